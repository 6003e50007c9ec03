//! Many streams in one loop thread: idle connections' memory and busy connections' CPU per
//! message, against the local replay server running in a child process (so the numbers are
//! the client's alone). A benchmark, not a test.
//!
//! `cargo run --release -p feedwire-mio --example many_streams -- --idle 10000 --active 1000`
//!
//! Options: `--idle N` (10000), `--active N` (1000), `--count N` messages per active stream
//! (2000), `--scenario NAME` for the active streams (small_aggtrade), `--tls` (every stream
//! over TLS, the servers' test CA trusted), `--x25519` (with `--tls`: the key exchange narrowed
//! to X25519, as `tls_config_with_roots` suggests for many idle streams), `--shared` (the active streams' events go to one
//! `shared_event_channel` taken by a thread of their own, not to handlers on the loop's).
//! The CPU is the whole process's: loop and consumer.
//! The last line: `idle_bytes_per_conn=N active_cpu_us_per_msg=X active_msgs=M`.
#![allow(clippy::print_stdout, reason = "an example reports to the terminal")]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use feedwire_core::{StatsHandle, StreamConfig, StreamEvent};
use feedwire_mio::{shared_event_channel, Delivery, Handler, LoopHandle, MioOptions};
use feedwire_replay::example_args::{unknown_flag, Flags};
use feedwire_replay::{
    measure, root_store_of, serve_if_child, ChildServer, ReplayConfig, Scenario,
};

/// What `--help` prints (the options of the module's documentation).
const USAGE: &str = "usage: many_streams [--idle N (10000)] [--active N (1000)] \
[--count N messages an active stream (2000)] [--scenario NAME (small_aggtrade)] [--tls] \
[--x25519 (with --tls)] [--shared (one event channel for the active streams)]";

struct Options {
    idle: usize,
    active: usize,
    count: usize,
    scenario: Scenario,
    tls: bool,
    x25519: bool,
    shared: bool,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        idle: 10_000,
        active: 1_000,
        count: 2_000,
        scenario: Scenario::SmallAggTrade,
        tls: false,
        x25519: false,
        shared: false,
    };
    let mut flags = Flags::from_env();
    while let Some(flag) = flags.next_flag()? {
        match flag.as_str() {
            "--tls" => o.tls = true,
            "--x25519" => o.x25519 = true,
            "--shared" => o.shared = true,
            "--help" | "-h" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            "--idle" => o.idle = flags.number(&flag)?,
            "--active" => o.active = flags.number(&flag)?,
            "--count" => o.count = flags.number::<usize>(&flag)?.max(1),
            "--scenario" => o.scenario = flags.scenario(&flag)?,
            _ => return Err(unknown_flag(&flag)),
        }
    }
    Ok(o)
}

/// Counts data messages and payload bytes; everything else is ignored.
struct Counter {
    messages: Arc<AtomicU64>,
    opened: Arc<AtomicU64>,
    bytes: u64,
}

impl Handler for Counter {
    fn on_event(&mut self, event: StreamEvent) {
        match event {
            StreamEvent::Data { payload, .. } => {
                self.bytes += payload.len() as u64;
                // Same thread as every other handler: an uncontended add.
                self.messages.fetch_add(1, Ordering::Relaxed);
            }
            StreamEvent::Opened { .. } => {
                self.opened.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

/// The core's configuration with one key exchange, X25519: no ML-KEM share in the
/// ClientHello, none kept while the handshake runs.
fn x25519_only(
    roots: feedwire_core::rustls::RootCertStore,
) -> Arc<feedwire_core::rustls::ClientConfig> {
    use feedwire_core::rustls::crypto::aws_lc_rs;
    let provider = feedwire_core::rustls::crypto::CryptoProvider {
        kx_groups: vec![aws_lc_rs::kx_group::X25519],
        ..aws_lc_rs::default_provider()
    };
    let config = feedwire_core::rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_safe_default_protocol_versions()
        .expect("aws-lc-rs supports the default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(config)
}

fn wait_until(what: &str, limit: Duration, done: impl Fn() -> bool) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    while !done() {
        if Instant::now() > deadline {
            return Err(format!("timed out waiting for {what}"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    serve_if_child();
    let o = options()?;
    let wanted_fds = (o.idle + o.active) as u64 + 1024; // the servers are other processes
    let fds = measure::raise_open_files(wanted_fds);
    if fds < wanted_fds {
        return Err(format!("open-file limit {fds} < {wanted_fds}: raise `ulimit -n`").into());
    }
    let idle_server = ChildServer::spawn(&ReplayConfig {
        hold_open: true,
        tls: o.tls,
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })?;
    let active_server = ChildServer::spawn(&ReplayConfig {
        count: Some(o.count),
        hold_open: true,
        tls: o.tls,
        ..ReplayConfig::new(o.scenario)
    })?;
    // Both servers' CAs (each makes its own at start-up).
    let mut roots = feedwire_core::rustls::RootCertStore::empty();
    for server in [&idle_server, &active_server] {
        if let Some(pem) = server.ca_pem() {
            roots.roots.extend(root_store_of(pem).roots);
        }
    }
    let lp = LoopHandle::spawn(MioOptions {
        tls: o.tls.then(|| {
            if o.x25519 {
                x25519_only(roots)
            } else {
                feedwire_core::tls_config_with_roots(roots)
            }
        }),
        ..MioOptions::default()
    })?;
    let messages = Arc::new(AtomicU64::new(0));
    let opened = Arc::new(AtomicU64::new(0));
    let counter = || {
        Delivery::Handler(Box::new(Counter {
            messages: messages.clone(),
            opened: opened.clone(),
            bytes: 0,
        }))
    };

    // Idle: the bare endpoint, nothing subscribed, so the server sends nothing after the
    // handshake. Settle, then RSS delta / N.
    std::thread::sleep(Duration::from_millis(200));
    let rss_before = measure::rss_bytes();
    let started = Instant::now();
    let mut ids = Vec::with_capacity(o.idle + o.active);
    for _ in 0..o.idle {
        let config = StreamConfig::binance_stream(idle_server.subscribe_url());
        ids.push(lp.connect(config, counter())?.0);
    }
    wait_until("idle streams to open", Duration::from_secs(120), || {
        opened.load(Ordering::Relaxed) >= o.idle as u64
    })?;
    let open_time = started.elapsed();
    let rss_open = measure::rss_bytes();
    // Quiet streams hand their read block back after a second.
    std::thread::sleep(Duration::from_millis(2_500));
    let rss_settled = measure::rss_bytes();
    let per_conn = |rss: u64| rss.saturating_sub(rss_before) / o.idle.max(1) as u64;
    println!(
        "idle: {} streams open in {:.2} s; RSS +{:.1} MiB right after the handshakes ({} B/conn), \
         +{:.1} MiB settled ({} B/conn)",
        o.idle,
        open_time.as_secs_f64(),
        rss_open.saturating_sub(rss_before) as f64 / (1 << 20) as f64,
        per_conn(rss_open),
        rss_settled.saturating_sub(rss_before) as f64 / (1 << 20) as f64,
        per_conn(rss_settled),
    );

    // Active: firehose on every stream at once, next to the idle ones, all in one thread.
    let expected = (o.active * o.count) as u64;
    let (user_before, sys_before) = measure::cpu_times();
    let started = Instant::now();
    let mut stats: Vec<StatsHandle> = Vec::with_capacity(o.active);
    let (shared, consumer) = if o.shared {
        let (tx, events) = shared_event_channel(4096);
        let messages = messages.clone();
        let consumer = std::thread::spawn(move || {
            for (_, event) in events {
                if let StreamEvent::Data { .. } = event {
                    messages.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        (Some(tx), Some(consumer))
    } else {
        (None, None)
    };
    for _ in 0..o.active {
        let config = StreamConfig::binance_stream(active_server.url());
        let delivery = match &shared {
            Some(tx) => Delivery::Shared(tx.clone()),
            None => counter(),
        };
        let (id, s) = lp.connect(config, delivery)?;
        ids.push(id);
        stats.push(s);
    }
    // The consumer's events end with the streams: only their senders are left.
    drop(shared);
    wait_until("active streams' messages", Duration::from_secs(600), || {
        messages.load(Ordering::Relaxed) >= expected
    })?;
    let elapsed = started.elapsed();
    let (user_after, sys_after) = measure::cpu_times();
    let (user, sys) = (user_after - user_before, sys_after - sys_before);
    let cpu = user + sys;
    let received = messages.load(Ordering::Relaxed);
    let bytes: u64 = stats
        .iter()
        .map(|s| s.snapshot(Instant::now()).bytes_received)
        .sum();
    let cpu_per_msg = cpu.as_secs_f64() * 1e6 / received as f64;
    println!(
        "active{}: {} streams x {} {} msgs = {received} msgs, {:.1} MB in {:.2} s ({:.0} msgs/s); \
         client CPU {:.2} s (user {:.2} + sys {:.2}, connects included) = {cpu_per_msg:.3} us/msg",
        if o.shared { " (shared channel)" } else { "" },
        o.active,
        o.count,
        o.scenario.name(),
        bytes as f64 / 1e6,
        elapsed.as_secs_f64(),
        received as f64 / elapsed.as_secs_f64(),
        cpu.as_secs_f64(),
        user.as_secs_f64(),
        sys.as_secs_f64(),
    );

    for id in ids {
        lp.stop(id);
    }
    lp.shutdown();
    if let Some(consumer) = consumer {
        consumer.join().map_err(|_| "the consumer panicked")?;
    }
    println!(
        "idle_bytes_per_conn={} active_cpu_us_per_msg={cpu_per_msg:.3} active_msgs={received}",
        per_conn(rss_settled)
    );
    Ok(())
}
