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
//! without the kernel's noise (WebSocket scenarios). `--limit` runs the benchmark's raw
//! reader over the same 256 KiB pieces: its frame-header walk (WebSocket) or its memchr line
//! splitter (lines); `--limit-utf8` the frame walk with feedwire's UTF-8 validation of text
//! (the benchmark's `limit-utf8`).
//!
//! `--tls` sends the same bytes through TLS: a rustls server in memory (test CA) encrypts them
//! as a server writing the whole stream at once would (full 16 KiB records; `--record N`
//! encrypts N wire bytes per record instead, as a server writing message by message would),
//! untimed; the timed part is the client's [`TlsSession`] taking the ciphertext in pieces of
//! its own read size and moving the plaintext into the stream, which lends its messages (with
//! `--queue`, queues them as events) — decryption and every copy the TLS layer makes included.
//!
//! `--spare` writes each read through `Stream::read_spare` (the read buffer's room as
//! uninitialised memory, as a `recv` into spare capacity would) instead of `read_buf` (the
//! same room, zeroed first where it is new).
//!
//! `cargo run --release -p feedwire-bench --example in_memory -- small_aggtrade [--count N] [--repeat R] [--lend] [--spare] [--nexus | --limit | --limit-utf8] [--tls [--record N] [--queue]]`
#![allow(clippy::print_stdout, reason = "a benchmark reports to the terminal")]

use std::io::{Read, Write};

use std::time::Instant;

use feedwire_bench::in_memory::{feed, new_stream, open_stream, opening_answer, wire_bytes, READ};
use feedwire_bench::{LimitFrames, Recorder};
use feedwire_core::rustls::ServerConnection;
use feedwire_core::{
    tls_config_with_roots, DataHandler, DataRef, LendingInput, Stream, StreamEvent, StreamInput,
    TlsSession,
};
use feedwire_replay::{Scenario, TestPki};
use nexus_web::ws::{FrameReader, Message, Role};

/// nexus-web's reader over `bytes`, fed like [`feed`]: (messages, payload bytes).
#[inline(never)]
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

/// The benchmark's raw frame walk over `bytes` (`validate`: with feedwire's UTF-8 check of
/// text), copied in pieces like [`feed`]: (messages, payload bytes).
#[inline(never)]
fn feed_limit_frames(bytes: &[u8], validate: bool) -> Result<(usize, usize), String> {
    let mut buf = vec![0u8; READ];
    let mut frames = LimitFrames::new(validate);
    let mut rec = Recorder::new(u64::MAX, false);
    for piece in bytes.chunks(READ) {
        buf[..piece.len()].copy_from_slice(piece);
        frames.feed(&buf[..piece.len()], &mut rec)?;
    }
    let messages = usize::try_from(rec.messages()).map_err(|e| e.to_string())?;
    Ok((messages, bytes.len()))
}

/// The raw line splitter over `bytes`, copied like [`feed`]: (lines, line bytes without
/// delimiters).
#[inline(never)]
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

/// Counts lent messages.
#[derive(Default)]
struct Count {
    messages: usize,
    payload_bytes: usize,
}

impl DataHandler for Count {
    fn on_data(&mut self, data: DataRef<'_>) {
        self.messages += 1;
        self.payload_bytes += data.payload.len();
    }

    fn on_event(&mut self, _: StreamEvent) {}
}

/// A TLS session whose handshake is done, with the server that finished it.
struct TlsPair {
    client: TlsSession,
    server: ServerConnection,
}

impl TlsPair {
    fn handshake(pki: &TestPki) -> Result<Self, String> {
        let config = tls_config_with_roots(pki.root_store());
        let mut client = TlsSession::new(config, "localhost").map_err(|e| e.to_string())?;
        let mut server = ServerConnection::new(pki.server_config()).map_err(|e| e.to_string())?;
        // `encrypt` writes a whole scenario before the client reads any of it.
        server.set_buffer_limit(None);
        let mut nothing = Count::default();
        while client.is_handshaking() {
            let mut to_server = Vec::new();
            while let Some(c) = client.poll_transmit() {
                to_server.extend_from_slice(&c);
            }
            server_take(&mut server, &to_server)?;
            let to_client = server_output(&mut server);
            feed_ciphertext(&mut client, None, &to_client, &mut nothing, true);
        }
        Ok(Self { client, server })
    }

    /// The client's pending output through the server: the plaintext it carried.
    fn client_to_server(&mut self, plaintext: &[u8]) -> Result<Vec<u8>, String> {
        self.client.write_plaintext(plaintext);
        let mut to_server = Vec::new();
        while let Some(c) = self.client.poll_transmit() {
            to_server.extend_from_slice(&c);
        }
        server_take(&mut self.server, &to_server)?;
        let mut received = Vec::new();
        let _ = self.server.reader().read_to_end(&mut received);
        Ok(received)
    }

    /// `wire` encrypted by the server, `record` plaintext bytes per write.
    fn encrypt(&mut self, wire: &[u8], record: usize) -> Vec<u8> {
        let mut ciphertext = Vec::new();
        for piece in wire.chunks(record.max(1)) {
            self.server
                .writer()
                .write_all(piece)
                .expect("the server's buffer limit is lifted");
            ciphertext.extend_from_slice(&server_output(&mut self.server));
        }
        ciphertext
    }
}

fn server_take(server: &mut ServerConnection, mut ciphertext: &[u8]) -> Result<(), String> {
    while !ciphertext.is_empty() {
        server
            .read_tls(&mut ciphertext)
            .map_err(|e| e.to_string())?;
        server.process_new_packets().map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn server_output(server: &mut ServerConnection) -> Vec<u8> {
    let mut out = Vec::new();
    while server.wants_write() {
        server.write_tls(&mut out).expect("writing to a Vec");
    }
    out
}

/// Ciphertext into the session in pieces of its read size; plaintext into `stream` (lent to
/// `count`, or counted from the events it queued), or nowhere while `stream` is `None`.
fn feed_ciphertext(
    tls: &mut TlsSession,
    mut stream: Option<&mut Stream>,
    ciphertext: &[u8],
    count: &mut Count,
    lend: bool,
) {
    let now = Instant::now();
    let mut fed = 0;
    while fed < ciphertext.len() {
        let buf = tls.read_buf();
        let n = buf.len().min(ciphertext.len() - fed);
        buf[..n].copy_from_slice(&ciphertext[fed..fed + n]);
        fed += n;
        let Some(s) = stream.as_deref_mut() else {
            tls.handle_read(n, &mut feedwire_core::HandshakeOnly)
                .expect("the in-memory server sends valid TLS");
            continue;
        };
        let input = &mut LendingInput {
            stream: s,
            now,
            handler: lend.then_some(&mut *count),
        };
        tls.handle_read(n, input)
            .expect("the in-memory server sends valid TLS");
        // Messages queued behind an event (the connection's first) come out here, as an
        // adapter collects them after each read.
        while let Some(e) = s.poll_event() {
            count.deliver(e);
        }
    }
}

/// The scenario through TLS: a fresh handshake and stream, the ciphertext made untimed, then
/// the timed feed. (messages, payload bytes, elapsed ns).
fn run_tls(
    pki: &TestPki,
    scenario: Scenario,
    wire: &[u8],
    record: usize,
    lend: bool,
) -> Result<(usize, usize, u128), String> {
    let now = Instant::now();
    let mut pair = TlsPair::handshake(pki)?;
    let mut s = open_stream_over_tls(scenario, &mut pair, now)?;
    let ciphertext = pair.encrypt(wire, record);
    let mut count = Count::default();
    let started = Instant::now();
    feed_ciphertext(
        &mut pair.client,
        Some(&mut s),
        &ciphertext,
        &mut count,
        lend,
    );
    let elapsed = started.elapsed().as_nanos();
    Ok((count.messages, count.payload_bytes, elapsed))
}

/// [`open_stream`] with its opening exchange through `pair`.
fn open_stream_over_tls(
    scenario: Scenario,
    pair: &mut TlsPair,
    now: Instant,
) -> Result<Stream, String> {
    let mut s = new_stream(scenario, now);
    let mut request = Vec::new();
    while let Some(c) = s.poll_transmit() {
        request.extend_from_slice(&c);
    }
    let request = pair.client_to_server(&request)?;
    let answer = opening_answer(scenario, &request);
    let ciphertext = pair.encrypt(&answer, 16 * 1024);
    let mut input = StreamInput {
        stream: &mut s,
        now,
    };
    let mut rest = &ciphertext[..];
    while !rest.is_empty() {
        let buf = pair.client.read_buf();
        let n = buf.len().min(rest.len());
        buf[..n].copy_from_slice(&rest[..n]);
        rest = &rest[n..];
        pair.client
            .handle_read(n, &mut input)
            .map_err(|e| e.to_string())?;
    }
    while s.poll_event().is_some() {}
    Ok(s)
}

/// What `--help` prints.
const USAGE: &str = "usage: in_memory SCENARIO [--count N] [--repeat R] \
[--lend] [--spare] [--nexus | --limit | --limit-utf8] [--tls [--record N] [--queue]]";

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let name = args.next().ok_or(USAGE)?;
    if name == "--help" || name == "-h" {
        println!("{USAGE}");
        return Ok(());
    }
    let scenario = Scenario::from_name(&name).ok_or_else(|| format!("unknown scenario {name}"))?;
    let (mut count, mut repeat) = (scenario.default_count(), 5);
    let (mut lend, mut nexus, mut limit, mut limit_utf8, mut tls, mut spare, mut queue) =
        (false, false, false, false, false, false, false);
    let mut record = 16 * 1024;
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--lend" => lend = true,
            "--spare" => spare = true,
            "--nexus" if !scenario.is_lines() => nexus = true,
            "--nexus" => return Err("--nexus: WebSocket scenarios only".to_owned()),
            "--limit" => limit = true,
            "--limit-utf8" if !scenario.is_lines() => limit_utf8 = true,
            "--limit-utf8" => return Err("--limit-utf8: WebSocket scenarios only".to_owned()),
            "--tls" => tls = true,
            "--queue" => queue = true,
            _ => {}
        }
        if matches!(
            flag.as_str(),
            "--lend" | "--spare" | "--nexus" | "--limit" | "--limit-utf8" | "--tls" | "--queue"
        ) {
            continue;
        }
        let value: usize = args
            .next()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{flag} needs a number"))?;
        match flag.as_str() {
            "--count" => count = value,
            "--repeat" => repeat = value.max(1),
            "--record" => record = value.max(1),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    let bytes = wire_bytes(scenario, count);
    let pki = if tls {
        Some(TestPki::generate().map_err(|e| e.to_string())?)
    } else {
        None
    };
    let mut best = f64::MAX;
    for _ in 0..repeat {
        let (messages, payload_bytes, elapsed) = if let Some(pki) = pki.as_ref() {
            run_tls(pki, scenario, &bytes, record, !queue)?
        } else {
            let now = Instant::now();
            let mut s = open_stream(scenario, now);
            let started = Instant::now();
            let (messages, payload_bytes) = if nexus {
                feed_nexus(&bytes)?
            } else if limit && scenario.is_lines() {
                feed_limit_lines(&bytes)
            } else if limit || limit_utf8 {
                feed_limit_frames(&bytes, limit_utf8)?
            } else {
                feed(&mut s, &bytes, now, lend, spare)
            };
            (messages, payload_bytes, started.elapsed().as_nanos())
        };
        let ns = elapsed as f64 / messages.max(1) as f64;
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
