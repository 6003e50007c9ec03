//! The `feedwire` binary end to end, against the replay server on 127.0.0.1: the demo, and
//! `stream` over WebSocket and lines, plain and TLS, with its output formats, its errors and
//! its graceful stop on SIGTERM.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::time::Duration;

use feedwire_replay::{Fault, ReplayConfig, ReplayServer, Scenario};
use feedwire_tests::scratch::ScratchDir;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const BIN: &str = env!("CARGO_BIN_EXE_feedwire");

/// Runs `feedwire args…`, killing it if it outlives `limit`.
fn feedwire(args: &[&str], limit: Duration) -> Output {
    Running::start(args, None).wait(limit)
}

/// A `feedwire` process a test started, its output piped; killed on drop, so a test that
/// fails before it waits leaves no process behind (a replay server would serve forever).
struct Running(Option<Child>);

impl Running {
    /// Starts `feedwire args…`, in `dir` if given.
    fn start(args: &[&str], dir: Option<&Path>) -> Self {
        let mut command = Command::new(BIN);
        command
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(dir) = dir {
            command.current_dir(dir);
        }
        Self(Some(command.spawn().expect("run feedwire")))
    }

    fn child(&mut self) -> &mut Child {
        self.0.as_mut().expect("still running")
    }

    /// Its standard output, line by line (once).
    fn stdout(&mut self) -> BufReader<ChildStdout> {
        BufReader::new(self.child().stdout.take().expect("stdout taken once"))
    }

    /// Sends it `signal`.
    fn signal(&mut self, signal: Signal) {
        let pid = Pid::from_raw(self.child().id() as i32);
        kill(pid, signal).expect("signal feedwire");
    }

    /// Waits for it to end, reading its output as it comes (a full pipe would stall it);
    /// kills it if it outlives `limit`.
    fn wait(mut self, limit: Duration) -> Output {
        let child = self.0.take().expect("still running");
        let pid = child.id();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        match rx.recv_timeout(limit) {
            Ok(out) => out.expect("output"),
            Err(_) => {
                let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
                panic!("feedwire did not finish within {limit:?}");
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn server(scenario: Scenario, tls: bool) -> ReplayServer {
    ReplayServer::start(ReplayConfig {
        count: Some(1000),
        tls,
        hold_open: true,
        ..ReplayConfig::new(scenario)
    })
    .expect("replay server")
}

/// The test CA in a file of its own, for `--ca`; removed when dropped, so test runs leave
/// nothing behind in the temporary directory.
struct CaFile(String);

impl CaFile {
    fn new(srv: &ReplayServer, name: &str) -> Self {
        let path =
            std::env::temp_dir().join(format!("feedwire-cli-{}-{name}.pem", std::process::id()));
        std::fs::write(&path, &srv.pki().expect("TLS server").ca_pem).expect("write CA");
        Self(path.to_string_lossy().into_owned())
    }
}

impl Drop for CaFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn expected_lines(srv: &ReplayServer, n: usize) -> Vec<String> {
    (0..n).map(|i| text(srv.payload(i))).collect()
}

#[test]
fn demo_runs_for_its_duration_and_prints_a_summary() {
    let out = feedwire(&["demo", "--duration", "2"], Duration::from_secs(60));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    // Not a terminal: plain periodic status lines, then the summary.
    assert!(
        stdout
            .lines()
            .filter(|l| l.contains("msgs/s") && l.contains("p99"))
            .count()
            >= 1,
        "{stdout}"
    );
    assert!(stdout.contains("summary"), "{stdout}");
    let messages: u64 = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("messages"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("a message count in {stdout}"));
    assert!(messages > 1000, "data flowed for 2 s: {messages}");
    let reads: u64 = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("reads")?.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("a read count in {stdout}"));
    assert!(reads >= 1, "{stdout}");
    assert!(stdout.contains("latency (µs)"), "{stdout}");
    assert!(stdout.contains("closed by Local (1000)"), "{stdout}");
}

#[test]
fn demo_over_tls_lines() {
    let out = feedwire(
        &[
            "demo",
            "--lines",
            "--tls",
            "--duration",
            "1",
            "--rate",
            "5000",
        ],
        Duration::from_secs(60),
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("betfair_mcm (TLS)"), "{stdout}");
    // The embedded server really serves TLS: the stream's URL says so.
    assert!(stdout.contains(", tls://127.0.0.1:"), "{stdout}");
    assert!(stdout.contains("closed by Local"), "{stdout}");
}

/// `feedwire stream` subscribing `btcusdt@aggTrade` on `srv`, until `count` messages.
fn stream_agg_trades(srv: &ReplayServer, count: usize) -> Output {
    feedwire(
        &[
            "stream",
            &srv.subscribe_url(),
            "--subscribe",
            "btcusdt@aggTrade",
            "--count",
            &count.to_string(),
        ],
        Duration::from_secs(30),
    )
}

#[test]
fn stream_prints_each_websocket_message_raw() {
    let srv = server(Scenario::SmallAggTrade, false);
    let out = stream_agg_trades(&srv, 100);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
    assert_eq!(lines, expected_lines(&srv, 100));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("subscribed: btcusdt@aggTrade"), "{stderr}");
    assert!(stderr.contains("closed by Local (1000)"), "{stderr}");
}

/// A connection that drops after it opened is reconnected (only a first connection that
/// fails ends the command): the server resets every connection after 50 messages, and 120
/// arrive over three of them, in order, each connection's from the scenario's start.
#[test]
fn stream_reconnects_after_a_reset() {
    let srv = ReplayServer::start(ReplayConfig {
        count: Some(1000),
        hold_open: true,
        fault: Some(Fault::Reset { after: 50 }),
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })
    .expect("replay server");
    let out = stream_agg_trades(&srv, 120);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
    let first = expected_lines(&srv, 50);
    let expected: Vec<String> = first.iter().cycle().take(120).cloned().collect();
    assert_eq!(lines, expected);
    // The third connection's reset may come before the stop does (the messages past the
    // 120th were on their way): a third reconnect may be announced, then stopped.
    assert!(stderr.matches("reconnecting in").count() >= 2, "{stderr}");
    assert!(stderr.matches("reconnected to").count() >= 2, "{stderr}");
    assert!(
        stderr.contains("closed by Local (1000) after 120 messages"),
        "{stderr}"
    );
}

/// `--connect-to` pins the address: the URL's host (a name no resolver knows) is never
/// looked up.
#[test]
fn stream_connects_to_a_given_address_without_resolving_the_host() {
    let srv = server(Scenario::SmallAggTrade, false);
    let port = srv.addr().port();
    let url = format!("ws://feed.invalid:{port}/ws");
    let out = feedwire(
        &[
            "stream",
            &url,
            "--connect-to",
            &srv.addr().to_string(),
            "--subscribe",
            "btcusdt@aggTrade",
            "--count",
            "10",
        ],
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
    assert_eq!(lines, expected_lines(&srv, 10));
}

#[test]
fn stream_over_tls_with_a_private_ca_as_jsonl() {
    let srv = server(Scenario::MediumKline, true);
    let ca = CaFile::new(&srv, "ws");
    let out = feedwire(
        &[
            "stream",
            &srv.url(),
            "--ca",
            &ca.0,
            "--jsonl",
            "--count",
            "50",
            "--max-read-size",
            "4096",
        ],
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let want = expected_lines(&srv, 50);
    let got: Vec<&str> = stdout.lines().collect();
    assert_eq!(got.len(), 50);
    for (line, payload) in got.iter().zip(&want) {
        let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        assert!(
            v["recv_us"]
                .as_u64()
                .is_some_and(|t| t > 1_600_000_000_000_000),
            "{line}"
        );
        let expected: serde_json::Value = serde_json::from_str(payload).unwrap();
        assert_eq!(v["payload"], expected);
    }
}

#[test]
fn stream_reads_lines_plain_and_over_tls() {
    for tls in [false, true] {
        let srv = server(Scenario::BetfairMcm, tls);
        let mut args = vec![
            "stream".to_owned(),
            srv.url(),
            "--subscribe".into(),
            "1.234567".into(),
            "--count".into(),
            "20".into(),
            "--app-key".into(),
            "k".into(),
            "--session".into(),
            "s".into(),
        ];
        let ca = tls.then(|| CaFile::new(&srv, "lines"));
        if let Some(ca) = &ca {
            args.extend(["--ca".to_owned(), ca.0.clone()]);
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = feedwire(&refs, Duration::from_secs(30));
        assert!(out.status.success(), "tls={tls}: {}", text(&out.stderr));
        let lines: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
        assert_eq!(lines, expected_lines(&srv, 20), "tls={tls}");
    }
}

#[test]
fn errors_name_what_went_wrong() {
    // An untrusted certificate: verification is never switched off.
    let srv = server(Scenario::SmallAggTrade, true);
    let out = feedwire(
        &["stream", &srv.url(), "--count", "1"],
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("certificate"),
        "{}",
        text(&out.stderr)
    );

    // A refused upgrade names its HTTP status.
    let refused = ReplayServer::start(ReplayConfig {
        fault: Some(Fault::RefuseUpgrade(429)),
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })
    .unwrap();
    let out = feedwire(
        &["stream", &refused.url(), "--count", "1"],
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("429"), "{}", text(&out.stderr));

    // Nothing listening.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = feedwire(
        &["stream", &format!("ws://127.0.0.1:{port}/ws")],
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("refused"),
        "{}",
        text(&out.stderr)
    );

    // Usage errors exit 2.
    let out = feedwire(
        &["stream", "http://example.invalid/"],
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("ws://"), "{}", text(&out.stderr));
}

#[test]
fn sigterm_stops_gracefully() {
    let srv = ReplayServer::start(ReplayConfig {
        count: Some(100_000_000),
        mode: feedwire_replay::Mode::Paced { per_sec: 1000 },
        hold_open: true,
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })
    .unwrap();
    let mut child = Running::start(&["stream", &srv.url()], None);
    let mut stdout = child.stdout();
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert!(first.contains("\"ts_us\":"), "{first}");
    child.signal(Signal::SIGTERM);
    let out = child.wait(Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("closed by Local (1000)"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn every_command_has_help_with_examples() {
    for cmd in [
        &["--help"][..],
        &["demo", "--help"],
        &["stream", "--help"],
        &["bench", "--help"],
        &["replay-server", "--help"],
    ] {
        let out = feedwire(cmd, Duration::from_secs(10));
        assert!(out.status.success());
        assert!(text(&out.stdout).contains("Examples:"), "{cmd:?}");
    }
}

#[test]
fn replay_server_serves_until_interrupted_and_writes_its_ca() {
    let dir = ScratchDir::new("cli-replay");
    let mut server = Running::start(
        &["replay-server", "--port", "0", "--tls", "--count", "500"],
        Some(dir.path()),
    );
    let mut out = server.stdout();
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("wss://"))
        .unwrap_or_else(|| panic!("a URL in {first:?}"))
        .to_owned();
    let mut rest = String::new();
    while !rest.contains("Ctrl-C") {
        out.read_line(&mut rest).unwrap();
    }
    assert!(rest.contains("(subscribe first instead: wss://"), "{rest}");
    assert!(rest.contains("500 messages per connection"), "{rest}");
    let ca = dir.path().join("feedwire-replay-ca.pem");
    let client = feedwire(
        &[
            "stream",
            &url,
            "--ca",
            ca.to_str().unwrap(),
            "--count",
            "500",
        ],
        Duration::from_secs(30),
    );
    assert!(client.status.success(), "{}", text(&client.stderr));
    assert_eq!(text(&client.stdout).lines().count(), 500);
    server.signal(Signal::SIGINT);
    let status = server.wait(Duration::from_secs(10));
    assert!(status.status.success());
}

#[test]
fn ctrl_c_stops_the_demo_and_still_prints_the_summary() {
    let mut demo = Running::start(&["demo", "--rate", "2000"], None);
    let mut out = demo.stdout();
    let mut line = String::new();
    // The banner, then the first periodic status line: data is flowing.
    while !line.contains("total") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "demo ended early");
    }
    demo.signal(Signal::SIGINT);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let status = demo.wait(Duration::from_secs(10));
    assert!(
        status.status.success(),
        "{:?}: {}\n{rest}",
        status.status,
        text(&status.stderr)
    );
    assert!(rest.contains("summary"), "{rest}");
    assert!(rest.contains("closed by Local (1000)"), "{rest}");
}
