//! What many streams' read buffers hold after a burst and while a trickle follows it, in
//! memory: each stream is driven as a socket would drive it (a burst's reads take what the
//! stream offers, then one small message a read), with no sockets, no server and no runtime,
//! so the resident memory measured is the streams' alone. A benchmark, not a test.
//!
//! A stream that had a burst reads at a burst's size; a queueing stream (messages cut out of
//! the read block and taken as events, as the adapters' channels do) then walks that block
//! read by read, and every byte a read lands on is memory touched. The stream's quiet release
//! (`timeouts.release_read_memory`, 1 s) never comes to a stream that keeps trickling; its
//! review of the read size, once a period, does. Time is simulated: the trickle's messages
//! are `--interval` apart, and each stream's timers run when due.
//!
//! `cargo run --release -p feedwire-bench --example read_memory -- --streams 1000`
//!
//! Options: `--streams N` (1000), `--burst N` messages (300), `--trickle N` messages after it
//! (200), `--interval MS` between them (50), `--scenario NAME` of the burst (xlarge_depth_diff; the trickle is always
//! small_aggtrade's 0.2 KB messages), `--lend` (messages lent, not queued), `--bytes` (reads
//! through `read_buf`, zeroed where new, instead of `read_spare`).
//! The last line: `burst_bytes_per_stream=N trickle_bytes_per_stream=M`.
#![allow(clippy::print_stdout, reason = "an example reports to the terminal")]

use std::time::{Duration, Instant};

use feedwire_bench::in_memory::{feed, open_stream, wire_bytes};
use feedwire_core::testing::server_frame;
use feedwire_replay::example_args::{unknown_flag, Flags};
use feedwire_replay::{measure, Scenario};

/// What `--help` prints (the options of the module's documentation).
const USAGE: &str = "usage: read_memory [--streams N (1000)] [--burst N messages (300)] \
[--trickle N messages (200)] [--interval MS (50)] [--scenario NAME of the burst (xlarge_depth_diff)] [--lend] \
[--bytes (read_buf, not read_spare)]";

struct Options {
    streams: usize,
    burst: usize,
    trickle: usize,
    interval: Duration,
    scenario: Scenario,
    lend: bool,
    bytes: bool,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        streams: 1000,
        burst: 300,
        trickle: 200,
        interval: Duration::from_millis(50),
        scenario: Scenario::XlargeDepthDiff,
        lend: false,
        bytes: false,
    };
    let mut flags = Flags::from_env();
    while let Some(flag) = flags.next_flag()? {
        match flag.as_str() {
            "--lend" => o.lend = true,
            "--bytes" => o.bytes = true,
            "--help" | "-h" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            "--streams" => o.streams = flags.number::<usize>(&flag)?.max(1),
            "--burst" => o.burst = flags.number(&flag)?,
            "--trickle" => o.trickle = flags.number(&flag)?,
            "--interval" => o.interval = Duration::from_millis(flags.number(&flag)?),
            "--scenario" => {
                o.scenario = Some(flags.scenario(&flag)?)
                    .filter(|s| !s.is_lines())
                    .ok_or("--scenario: a WebSocket scenario")?
            }
            _ => return Err(unknown_flag(&flag)),
        }
    }
    Ok(o)
}

fn main() -> Result<(), String> {
    let o = options()?;
    let now = Instant::now();
    let burst = wire_bytes(o.scenario, o.burst);
    let trickle: Vec<Vec<u8>> = Scenario::SmallAggTrade
        .payloads(7)
        .iter()
        .cycle()
        .take(o.trickle)
        .map(|p| server_frame(true, 1, p))
        .collect();
    let spare = !o.bytes;
    let rss_before = measure::rss_bytes();
    let mut streams: Vec<_> = (0..o.streams)
        .map(|_| open_stream(Scenario::SmallAggTrade, now))
        .collect();
    let rss_open = measure::rss_bytes();
    let mut messages = 0;
    for s in &mut streams {
        messages += feed(s, &burst, now, o.lend, spare).0;
    }
    let rss_burst = measure::rss_bytes();
    // Round-robin, one message a stream at a time, as a loop serving them would.
    let mut now = now;
    for frame in &trickle {
        now += o.interval;
        for s in &mut streams {
            if s.poll_timeout().is_some_and(|t| t <= now) {
                s.handle_timeout(now);
            }
            messages += feed(s, frame, now, o.lend, spare).0;
        }
    }
    let rss_trickle = measure::rss_bytes();
    let expected = o.streams * (o.burst + o.trickle);
    if messages != expected {
        return Err(format!("{messages} of {expected} messages came out"));
    }
    let per_stream = |rss: u64, from: u64| rss.saturating_sub(from) / o.streams as u64;
    println!(
        "{} streams, {} ({}): open {} B/stream; after a burst of {} {} msgs +{} B/stream; \
         after {} 0.2 KB msgs one a read, {} ms apart, +{} B/stream",
        o.streams,
        if o.lend { "lent" } else { "queued" },
        if o.bytes { "read_buf" } else { "read_spare" },
        per_stream(rss_open, rss_before),
        o.burst,
        o.scenario.name(),
        per_stream(rss_burst, rss_open),
        o.trickle,
        o.interval.as_millis(),
        per_stream(rss_trickle, rss_open),
    );
    println!(
        "burst_bytes_per_stream={} trickle_bytes_per_stream={}",
        per_stream(rss_burst, rss_open),
        per_stream(rss_trickle, rss_open)
    );
    drop(streams);
    Ok(())
}
