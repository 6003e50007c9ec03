//! A scenario's messages through a whole `Stream` in memory: no sockets, no server, no
//! kernel — the library's own cost per message (decode, UTF-8, classification, statistics,
//! the event queue), plus one copy into the read buffer as a socket read would make.
//! Prints the best of `--repeat` passes (the machine is shared; the minimum is the stable
//! figure). Run it under `valgrind --tool=callgrind` for instruction counts.
//!
//! `--lend` reads with `Stream::handle_read_with` (data lent from the read buffer) instead of
//! queueing every message as an event. `--nexus` runs nexus-web's frame reader (the best peer
//! in the socket runs: zero-copy, simdutf8; no classification, no stream machine) over the
//! same bytes, copied in the same 256 KiB pieces — the library-against-library comparison
//! without the kernel's noise (WebSocket scenarios). `--limit` runs the benchmark's raw line
//! splitter (memchr over the same 256 KiB pieces, counting lines) for lines scenarios.
//!
//! `cargo run --release -p feedwire-bench --example in_memory -- small_aggtrade [--count N] [--repeat R] [--lend | --nexus | --limit]`
#![allow(clippy::print_stdout, reason = "a benchmark reports to the terminal")]

use std::time::Instant;

use feedwire_core::testing::{accept_response, server_frame};
use feedwire_core::{BetfairAuth, Stream, StreamConfig, StreamEvent};
use feedwire_replay::Scenario;
use nexus_web::ws::{FrameReader, Message, Role};

/// Largest read handed to the stream, bytes (the default `max_read_size`).
const READ: usize = 256 * 1024;

fn feed(s: &mut Stream, bytes: &[u8], now: Instant, lend: bool) -> (usize, usize) {
    let (mut fed, mut messages, mut payload_bytes) = (0, 0, 0);
    while fed < bytes.len() {
        let buf = s.read_buf();
        let n = buf.len().min(bytes.len() - fed).min(READ);
        buf[..n].copy_from_slice(&bytes[fed..fed + n]);
        if lend {
            s.handle_read_with(n, now, |d| {
                messages += 1;
                payload_bytes += d.payload.len();
            });
        } else {
            s.handle_read(n, now);
        }
        fed += n;
        while let Some(e) = s.poll_event() {
            if let StreamEvent::Data { payload, .. } = e {
                messages += 1;
                payload_bytes += payload.len();
            }
        }
    }
    (messages, payload_bytes)
}

/// The bytes of `count` of the scenario's messages, as the wire has them (frames, or CRLF
/// lines).
fn wire_bytes(scenario: Scenario, count: usize) -> Vec<u8> {
    let payloads = scenario.payloads(7);
    let nth = |i: usize| &payloads[i % payloads.len()];
    if scenario.is_lines() {
        let mut bytes = Vec::new();
        for i in 0..count {
            bytes.extend_from_slice(nth(i));
            bytes.extend_from_slice(b"\r\n");
        }
        bytes
    } else {
        (0..count)
            .flat_map(|i| server_frame(true, 1, nth(i)))
            .collect()
    }
}

/// A stream for `scenario`, open and past its opening exchange.
fn open_stream(scenario: Scenario, now: Instant) -> Stream {
    if scenario.is_lines() {
        let auth = BetfairAuth {
            app_key: "k".into(),
            session: "s".into(),
        };
        let mut s = Stream::new(
            StreamConfig::betfair("tcp://127.0.0.1:1", auth),
            [1; 32],
            now,
        )
        .expect("valid config");
        while s.poll_transport().is_some() {}
        s.handle_connected(now);
        while s.poll_transmit().is_some() {}
        feed(
            &mut s,
            b"{\"op\":\"connection\",\"connectionId\":\"x\"}\r\n{\"op\":\"status\",\"id\":1,\"statusCode\":\"SUCCESS\"}\r\n",
            now,
            false,
        );
        s
    } else {
        let config =
            StreamConfig::binance_stream("ws://127.0.0.1:1/stream?streams=btcusdt@aggTrade");
        let mut s = Stream::new(config, [1; 32], now).expect("valid config");
        while s.poll_transport().is_some() {}
        s.handle_connected(now);
        let mut request = Vec::new();
        while let Some(c) = s.poll_transmit() {
            request.extend_from_slice(&c);
        }
        feed(&mut s, &accept_response(&request), now, false);
        s
    }
}

/// nexus-web's reader over `bytes`, fed like [`feed`]: (messages, payload bytes).
fn feed_nexus(bytes: &[u8]) -> Result<(usize, usize), String> {
    let mut reader = FrameReader::builder()
        .role(Role::Client)
        .buffer_capacity(1 << 20)
        .build();
    let (mut fed, mut messages, mut payload_bytes) = (0, 0, 0);
    while fed < bytes.len() {
        let spare = reader.spare();
        let n = spare.len().min(bytes.len() - fed).min(READ);
        if n == 0 {
            reader.compact();
            continue;
        }
        spare[..n].copy_from_slice(&bytes[fed..fed + n]);
        reader.filled(n);
        fed += n;
        while reader.poll().map_err(|e| e.to_string())? {
            match reader.next().map_err(|e| e.to_string())? {
                Some(Message::Text(t)) => {
                    messages += 1;
                    payload_bytes += t.len();
                }
                Some(_) => {}
                None => break,
            }
        }
    }
    Ok((messages, payload_bytes))
}

/// The raw line splitter over `bytes`, copied like [`feed`]: (lines, line bytes without
/// delimiters).
fn feed_limit_lines(bytes: &[u8]) -> (usize, usize) {
    let mut buf = vec![0u8; READ];
    let (mut fed, mut lines, mut line_bytes, mut partial) = (0, 0, 0, 0);
    while fed < bytes.len() {
        let n = READ.min(bytes.len() - fed);
        buf[..n].copy_from_slice(&bytes[fed..fed + n]);
        fed += n;
        let mut start = 0;
        for end in memchr::memchr_iter(b'\n', &buf[..n]) {
            lines += 1;
            line_bytes += (partial + end - start).saturating_sub(1);
            partial = 0;
            start = end + 1;
        }
        partial += n - start;
    }
    (lines, line_bytes)
}

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let name = args
        .next()
        .ok_or("usage: in_memory SCENARIO [--count N] [--repeat R] [--lend | --nexus | --limit]")?;
    let scenario = Scenario::from_name(&name).ok_or_else(|| format!("unknown scenario {name}"))?;
    let (mut count, mut repeat) = (scenario.default_count(), 5);
    let (mut lend, mut nexus, mut limit) = (false, false, false);
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--lend" => lend = true,
            "--nexus" if !scenario.is_lines() => nexus = true,
            "--nexus" => return Err("--nexus: WebSocket scenarios only".to_owned()),
            "--limit" if scenario.is_lines() => limit = true,
            "--limit" => return Err("--limit: lines scenarios only".to_owned()),
            _ => {}
        }
        if matches!(flag.as_str(), "--lend" | "--nexus" | "--limit") {
            continue;
        }
        let value: usize = args
            .next()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{flag} needs a number"))?;
        match flag.as_str() {
            "--count" => count = value,
            "--repeat" => repeat = value.max(1),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    let bytes = wire_bytes(scenario, count);
    let mut best = f64::MAX;
    for _ in 0..repeat {
        let now = Instant::now();
        let mut s = open_stream(scenario, now);
        let started = Instant::now();
        let (messages, payload_bytes) = if nexus {
            feed_nexus(&bytes)?
        } else if limit {
            feed_limit_lines(&bytes)
        } else {
            feed(&mut s, &bytes, now, lend)
        };
        let ns = started.elapsed().as_nanos() as f64 / messages.max(1) as f64;
        if messages != count {
            return Err(format!("{messages} of {count} messages came out"));
        }
        best = best.min(ns);
        println!(
            "{name}: {messages} msgs, {:.1} MB payload, {ns:.1} ns/msg",
            payload_bytes as f64 / 1e6
        );
    }
    println!("best of {repeat}: {best:.1} ns/msg");
    Ok(())
}
