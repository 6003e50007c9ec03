//! What keeping `Data` payloads costs: a multiplexed stream of 1,000 symbols trading as
//! unevenly as markets do (the k-th at 1/k² of the busiest's rate), the application keeping
//! the latest message of each. A payload is a slice of the read block it arrived in, so each
//! quiet symbol's last message holds a whole block; copied, it holds its own bytes. Prints
//! the heap each way. A measurement, not a test (the README quotes it).
//!
//! `cargo run --release -p feedwire-tests --example held_payloads -- [messages]`
#![allow(clippy::print_stdout, reason = "an example reports to the terminal")]

use std::alloc::System;
use std::collections::HashMap;
use std::time::Instant;

use bytes::Bytes;
use feedwire_core::testing::{open_websocket_stream, server_frame};
use feedwire_core::{StreamConfig, StreamEvent};
use feedwire_replay::example_args::first_arg;
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const SYMBOLS: usize = 1000;

/// Where the symbol's number sits in a payload: `{"stream":"s` is 12 bytes.
const SYMBOL_DIGITS: std::ops::Range<usize> = 12..16;

/// `messages` frames of aggTrade payloads, symbols drawn from the skewed mix (seeded).
fn wire(messages: usize) -> Vec<u8> {
    let weights: Vec<f64> = (1..=SYMBOLS).map(|k| 1.0 / (k * k) as f64).collect();
    let total: f64 = weights.iter().sum();
    let cdf: Vec<f64> = weights
        .iter()
        .scan(0.0, |acc, w| {
            *acc += w / total;
            Some(*acc)
        })
        .collect();
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    let mut out = Vec::new();
    for _ in 0..messages {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let u = (state >> 11) as f64 / (1u64 << 53) as f64;
        let k = cdf.partition_point(|&c| c < u).min(SYMBOLS - 1);
        let payload = format!(
            r#"{{"stream":"s{k:04}@aggTrade","data":{{"e":"aggTrade","E":1700000000000,"s":"S{k:04}","a":1,"p":"43000.10","q":"0.010","f":1,"l":1,"T":1700000000000,"m":true,"M":false}}}}"#
        );
        out.extend_from_slice(&server_frame(true, 1, payload.as_bytes()));
    }
    out
}

/// Heap bytes live now that were not when `region` began.
fn live(region: &Region<'_, System>) -> i64 {
    let change = region.change();
    i64::try_from(change.bytes_allocated).unwrap_or(i64::MAX)
        - i64::try_from(change.bytes_deallocated).unwrap_or(i64::MAX)
}

/// Feeds `wire` through a stream in full-size reads, keeping each symbol's latest payload
/// (`copy`: a copy of it); the heap that leaves behind, and the payload bytes kept.
fn keep_latest(wire: &[u8], copy: bool) -> (i64, usize) {
    let now = Instant::now();
    let config = StreamConfig::binance_stream("ws://127.0.0.1:1/stream?streams=s0000@aggTrade");
    let mut stream = open_websocket_stream(config, now);
    let region = Region::new(GLOBAL);
    let mut latest: HashMap<u16, Bytes> = HashMap::with_capacity(SYMBOLS);
    let mut fed = 0;
    while fed < wire.len() {
        let buf = stream.read_buf();
        let n = buf.len().min(wire.len() - fed);
        buf[..n].copy_from_slice(&wire[fed..fed + n]);
        fed += n;
        stream.handle_read(n, now);
        while let Some(event) = stream.poll_event() {
            if let StreamEvent::Data { payload, .. } = event {
                let digits = std::str::from_utf8(&payload[SYMBOL_DIGITS]).expect("digits");
                let symbol = digits.parse().expect("a symbol number");
                let kept = if copy {
                    Bytes::copy_from_slice(&payload)
                } else {
                    payload
                };
                latest.insert(symbol, kept);
            }
        }
    }
    drop(stream);
    let kept = latest.values().map(Bytes::len).sum();
    (live(&region), kept)
}

/// What `--help` prints.
const USAGE: &str = "usage: held_payloads [MESSAGES (2000000)]";

fn main() -> Result<(), String> {
    let Some(messages) = first_arg("MESSAGES", 2_000_000, USAGE)? else {
        return Ok(());
    };
    let wire = wire(messages);
    println!("{messages} messages of {SYMBOLS} symbols, the latest of each kept:");
    for (copy, how) in [(false, "as delivered"), (true, "copied")] {
        let (heap, kept) = keep_latest(&wire, copy);
        println!(
            "  {how:>12}: {kept} payload bytes kept, heap {:.1} MiB",
            heap as f64 / f64::from(1 << 20)
        );
    }
    Ok(())
}
