//! The replay server in a child process ([`ChildServer`]), as the benchmark and the examples
//! run it: the child serves what its parent configured and passes its URLs, count and CA
//! back; it ends when dropped; pinned, it runs on that CPU only; bad arguments end it with
//! the reason.
//!
//! `harness = false`: like every program using `ChildServer`, `main` calls `serve_if_child`
//! first, since the child is this executable run again.

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use feedwire_core::{Event, WsConfig};
use feedwire_replay::{
    feed_seq, root_store_of, sent_at_us, serve_if_child, ChildServer, Mode, ReplayConfig, Scenario,
    CHILD_ARG,
};
use feedwire_tests::blocking::{tls_messages, BlockingClient};
use feedwire_tests::peer::free_loopback_port;

const TIMEOUT: Duration = Duration::from_secs(20);

fn main() {
    serve_if_child();
    let checks: [(&str, fn()); 5] = [
        (
            "a_child_serves_what_it_was_given_and_ends_when_dropped",
            a_child_serves_what_it_was_given_and_ends_when_dropped,
        ),
        (
            "a_held_open_child_paces_or_runs_a_live_feed_as_configured",
            a_held_open_child_paces_or_runs_a_live_feed_as_configured,
        ),
        ("a_tls_child_passes_its_ca_on", a_tls_child_passes_its_ca_on),
        (
            "a_pinned_child_runs_on_its_cpu_only",
            a_pinned_child_runs_on_its_cpu_only,
        ),
        (
            "bad_arguments_end_the_child_with_the_reason",
            bad_arguments_end_the_child_with_the_reason,
        ),
    ];
    feedwire_tests::checks::run(&checks);
}

/// The messages of a plain WebSocket stream until it ends, and how it ended; a read timeout
/// (`read_timeout`) ends it as `Err`.
fn plain_messages(url: &str, read_timeout: Duration) -> (Vec<Bytes>, Result<Event, ErrorKind>) {
    let mut client = BlockingClient::connect(url, WsConfig::default(), read_timeout).unwrap();
    let (msgs, end) = client.messages_until_end();
    let end = match end {
        Ok(Some(end)) => Ok(end),
        Ok(None) => panic!("finished without an end event"),
        Err(e) => Err(e.kind()),
    };
    (msgs, end)
}

/// `127.0.0.1:port` of a `ws://`/`wss://` URL.
fn addr_of(url: &str) -> SocketAddr {
    let (_, rest) = url.split_once("://").unwrap();
    rest.split('/').next().unwrap().parse().unwrap()
}

fn a_child_serves_what_it_was_given_and_ends_when_dropped() {
    let port = free_loopback_port();
    let child = ChildServer::spawn(&ReplayConfig {
        count: Some(50),
        seed: 9,
        port,
        ..ReplayConfig::new(Scenario::MediumKline)
    })
    .unwrap();
    assert_eq!(
        child.url(),
        format!("ws://127.0.0.1:{port}/stream?streams=btcusdt@aggTrade")
    );
    assert_eq!(child.subscribe_url(), format!("ws://127.0.0.1:{port}/ws"));
    assert_eq!(child.messages_per_connection(), 50);
    assert_eq!(child.ca_pem(), None);
    let (msgs, end) = plain_messages(child.url(), TIMEOUT);
    assert_eq!(msgs, Scenario::MediumKline.payloads(9)[..50]);
    assert!(matches!(end, Ok(Event::Closed { .. })), "{end:?}");
    let pid = replay_child_pid();
    drop(child);
    // Waited for, not left running or a zombie: its `/proc` entry goes when it is reaped.
    let proc_entry = std::path::PathBuf::from(format!("/proc/{pid}"));
    assert!(!proc_entry.exists(), "the child was reaped");
    let after = TcpStream::connect(("127.0.0.1", port)).map(|_| ());
    assert_eq!(
        after.map_err(|e| e.kind()),
        Err(ErrorKind::ConnectionRefused),
        "the child is gone"
    );
}

fn a_held_open_child_paces_or_runs_a_live_feed_as_configured() {
    for mode in [
        Mode::Paced { per_sec: 5_000 },
        Mode::Live { per_sec: 5_000 },
    ] {
        let child = ChildServer::spawn(&ReplayConfig {
            count: Some(20),
            mode,
            hold_open: true,
            ..ReplayConfig::new(Scenario::SmallAggTrade)
        })
        .unwrap();
        // Held open: after its 20 messages the connection stays up until the client ends it.
        let (msgs, end) = plain_messages(child.url(), Duration::from_millis(500));
        assert_eq!(msgs.len(), 20, "{mode:?}");
        assert!(
            matches!(end, Err(ErrorKind::WouldBlock | ErrorKind::TimedOut)),
            "{mode:?}: {end:?}"
        );
        assert!(msgs.iter().all(|m| sent_at_us(m).is_some()), "{mode:?}");
        let live = matches!(mode, Mode::Live { .. });
        assert!(
            msgs.iter().all(|m| feed_seq(m).is_some() == live),
            "{mode:?}: only a live feed numbers its messages"
        );
    }
}

fn a_tls_child_passes_its_ca_on() {
    let child = ChildServer::spawn(&ReplayConfig {
        tls: true,
        ..ReplayConfig::new(Scenario::LargeDepth20)
    })
    .unwrap();
    assert!(
        child.url().starts_with("wss://127.0.0.1:"),
        "{}",
        child.url()
    );
    assert_eq!(
        child.messages_per_connection(),
        Scenario::LargeDepth20.default_count()
    );
    let pem = child.ca_pem().expect("a TLS child passes its CA on");
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
    assert_eq!(root_store_of(pem).len(), 1);
    assert_eq!(root_store_of(&format!("{pem}not a certificate")).len(), 1);
    assert!(root_store_of("not a certificate").is_empty());
    let msgs = tls_messages(
        child.url(),
        addr_of(child.url()),
        root_store_of(pem),
        100,
        Duration::ZERO,
    );
    assert_eq!(msgs[..100], Scenario::LargeDepth20.payloads(1)[..100]);
}

/// The CPUs a process's threads may run on, each thread's `Cpus_allowed_list`.
fn allowed_cpus(pid: u32) -> Vec<String> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    tasks
        .map(|t| {
            let status = std::fs::read_to_string(t.unwrap().path().join("status")).unwrap();
            status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .unwrap()
                .trim()
                .to_owned()
        })
        .collect()
}

/// The pid of this process's one child serving as a replay server.
fn replay_child_pid() -> u32 {
    let me = std::process::id();
    let children: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|pid: &u32| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            // `pid (comm) state ppid …`: comm may hold spaces, so count from its `)`.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().nth(1));
            ppid == Some(me.to_string().as_str())
                && String::from_utf8_lossy(&cmdline).contains(CHILD_ARG)
        })
        .collect();
    assert_eq!(children.len(), 1, "{children:?}");
    children[0]
}

fn a_pinned_child_runs_on_its_cpu_only() {
    let config = ReplayConfig {
        count: Some(10),
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    };
    let mine = allowed_cpus(std::process::id())[0].clone();
    let last_cpu = std::thread::available_parallelism().unwrap().get() - 1;
    let child = ChildServer::spawn_on_cpu(&config, Some(last_cpu)).unwrap();
    let cpus = allowed_cpus(replay_child_pid());
    assert!(cpus.len() > 1, "the server's thread is there: {cpus:?}");
    assert!(cpus.iter().all(|c| *c == last_cpu.to_string()), "{cpus:?}");
    let (msgs, _) = plain_messages(child.url(), TIMEOUT);
    assert_eq!(msgs.len(), 10, "a pinned child serves");
    drop(child);
    let child = ChildServer::spawn(&config).unwrap();
    let cpus = allowed_cpus(replay_child_pid());
    assert!(
        cpus.iter().all(|c| *c == mine),
        "unpinned: {cpus:?}, ours {mine}"
    );
    drop(child);
}

fn bad_arguments_end_the_child_with_the_reason() {
    let good = [
        "small_aggtrade",
        "default",
        "firehose",
        "0",
        "1",
        "0",
        "0",
        "any",
    ];
    let run = |args: &[&str]| {
        Command::new(std::env::current_exe().unwrap())
            .arg(CHILD_ARG)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    // Stdin closed at once: a good child reports where it serves, then ends.
    let ok = run(&good);
    assert!(ok.status.success(), "{ok:?}");
    let out = String::from_utf8(ok.stdout).unwrap();
    assert!(out.starts_with("url=ws://127.0.0.1:"), "{out}");
    assert!(out.contains("\ncount=300000\nca_pem_bytes=0\n"), "{out}");
    let too_few = run(&good[..7]);
    assert_eq!(too_few.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&too_few.stderr).contains("expected 8 arguments"));
    for (at, bad, reason) in [
        (0, "no_such_scenario", "bad scenario"),
        (1, "many", "bad count"),
        (2, "paced:fast", "bad rate"),
        (2, "live:", "bad rate"),
        (4, "seedless", "bad seed"),
        (5, "70000", "bad port"),
        (7, "cpu0", "bad cpu"),
    ] {
        let mut args = good;
        args[at] = bad;
        let out = run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {stderr}");
        assert!(stderr.contains(reason), "{bad}: {stderr}");
    }
}
