//! Streams that were busy and went quiet: the memory they hold right after their burst and a
//! few seconds later, when each has given its read memory back (`timeouts.release_read_memory`,
//! 1 s), on the tokio adapter, against the local replay server in a child process (so the
//! numbers are the client's alone). A benchmark, not a test.
//!
//! `cargo run --release -p feedwire-tokio --example quiet_streams -- --streams 500`
//!
//! Options: `--streams N` (500), `--count N` messages a stream (100), `--scenario NAME`
//! (xlarge_depth_diff), `--tls` (the server's test CA trusted), `--keep` (release off: what
//! the streams hold without it).
//! The last line: `burst_bytes_per_stream=N quiet_bytes_per_stream=M`.
#![allow(clippy::print_stdout, reason = "an example reports to the terminal")]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use feedwire_core::{StreamConfig, StreamEvent};
use feedwire_replay::example_args::{unknown_flag, Flags};
use feedwire_replay::{
    measure, root_store_of, serve_if_child, ChildServer, ReplayConfig, Scenario,
};
use feedwire_tokio::{connect, TokioOptions};

/// What `--help` prints (the options of the module's documentation).
const USAGE: &str = "usage: quiet_streams [--streams N (500)] [--count N messages a stream (100)] \
[--scenario NAME (xlarge_depth_diff)] [--tls] [--keep (no read-memory release)]";

struct Options {
    streams: usize,
    count: usize,
    scenario: Scenario,
    tls: bool,
    keep: bool,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        streams: 500,
        count: 100,
        scenario: Scenario::XlargeDepthDiff,
        tls: false,
        keep: false,
    };
    let mut flags = Flags::from_env();
    while let Some(flag) = flags.next_flag()? {
        match flag.as_str() {
            "--tls" => o.tls = true,
            "--keep" => o.keep = true,
            "--help" | "-h" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            "--streams" => o.streams = flags.number::<usize>(&flag)?.max(1),
            "--count" => o.count = flags.number::<usize>(&flag)?.max(1),
            "--scenario" => o.scenario = flags.scenario(&flag)?,
            _ => return Err(unknown_flag(&flag)),
        }
    }
    Ok(o)
}

async fn wait_until(what: &str, limit: Duration, done: impl Fn() -> bool) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    while !done() {
        if Instant::now() > deadline {
            return Err(format!("timed out waiting for {what}"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    serve_if_child();
    let o = options()?;
    let wanted_fds = o.streams as u64 + 1024;
    if measure::raise_open_files(wanted_fds) < wanted_fds {
        return Err(format!("open-file limit below {wanted_fds}: raise `ulimit -n`").into());
    }
    let server = ChildServer::spawn(&ReplayConfig {
        count: Some(o.count),
        hold_open: true,
        tls: o.tls,
        ..ReplayConfig::new(o.scenario)
    })?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(&o, &server))
}

async fn run(o: &Options, server: &ChildServer) -> Result<(), Box<dyn std::error::Error>> {
    let options = TokioOptions {
        tls: server
            .ca_pem()
            .map(|pem| feedwire_core::tls_config_with_roots(root_store_of(pem))),
        ..TokioOptions::default()
    };
    let messages = Arc::new(AtomicU64::new(0));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rss_before = measure::rss_bytes();
    let mut handles = Vec::with_capacity(o.streams);
    for _ in 0..o.streams {
        let mut config = StreamConfig::binance_stream(server.url());
        if o.keep {
            config.timeouts.release_read_memory = None;
        }
        let (handle, mut events) = connect(config, options.clone())?;
        let messages = messages.clone();
        tokio::spawn(async move {
            while let Some(event) = events.next().await {
                match event {
                    // Counted and dropped: nothing keeps a read block alive.
                    StreamEvent::Data { .. } => {
                        messages.fetch_add(1, Ordering::Relaxed);
                    }
                    StreamEvent::Closed { .. } | StreamEvent::Crashed(_) => break,
                    _ => {}
                }
            }
        });
        handles.push(handle);
    }
    let expected = (o.streams * o.count) as u64;
    let started = Instant::now();
    wait_until("every stream's burst", Duration::from_secs(600), || {
        messages.load(Ordering::Relaxed) >= expected
    })
    .await?;
    let burst_time = started.elapsed();
    let per_stream = |rss: u64| rss.saturating_sub(rss_before) / o.streams as u64;
    let rss_burst = measure::rss_bytes();
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let rss_quiet = measure::rss_bytes();
    println!(
        "{} streams x {} {} msgs{}{} in {:.2} s; RSS +{:.1} MiB right after ({} B/stream), \
         +{:.1} MiB 2.5 s later ({} B/stream)",
        o.streams,
        o.count,
        o.scenario.name(),
        if o.tls { " over TLS" } else { "" },
        if o.keep { ", release off" } else { "" },
        burst_time.as_secs_f64(),
        rss_burst.saturating_sub(rss_before) as f64 / (1 << 20) as f64,
        per_stream(rss_burst),
        rss_quiet.saturating_sub(rss_before) as f64 / (1 << 20) as f64,
        per_stream(rss_quiet),
    );
    for handle in &handles {
        handle.stop();
    }
    println!(
        "burst_bytes_per_stream={} quiet_bytes_per_stream={}",
        per_stream(rss_burst),
        per_stream(rss_quiet)
    );
    Ok(())
}
