//! A whole [`Stream`] driven in memory: no sockets, no server, no kernel. The helpers the
//! in-memory examples share (`in_memory`, `read_memory`): a scenario's wire bytes as the replay
//! server sends them, a stream past its opening exchange, reads fed to it.

use std::time::Instant;

use bytes::BufMut;
use feedwire_core::testing::{accept_response, betfair_opening, server_frame};
use feedwire_core::{BetfairAuth, Stream, StreamConfig, StreamEvent};
use feedwire_replay::Scenario;

/// Largest read handed to the stream, bytes: the limit's read size, so that every reader
/// here sees the same pieces (the stream's `max_read_size` caps what it offers).
pub const READ: usize = 256 * 1024;

/// Feeds `bytes` to `s` as socket reads would: each read takes what the stream offers (at
/// most [`READ`]), through `read_spare` when `spare`, else `read_buf`; data lent when `lend`,
/// else queued and taken as events. (messages, payload bytes).
pub fn feed(s: &mut Stream, bytes: &[u8], now: Instant, lend: bool, spare: bool) -> (usize, usize) {
    let (mut fed, mut messages, mut payload_bytes) = (0, 0, 0);
    while fed < bytes.len() {
        let n = if spare {
            let mut room = s.read_spare().expect("connected");
            let n = room.remaining_mut().min(bytes.len() - fed).min(READ);
            room.put_slice(&bytes[fed..fed + n]);
            n
        } else {
            let buf = s.read_buf();
            let n = buf.len().min(bytes.len() - fed).min(READ);
            buf[..n].copy_from_slice(&bytes[fed..fed + n]);
            n
        };
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
pub fn wire_bytes(scenario: Scenario, count: usize) -> Vec<u8> {
    let payloads = scenario.payloads(7);
    // As the replay server sends them (a Betfair image once, first).
    let nth = |i: usize| &payloads[scenario.payload_index(i, payloads.len())];
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

/// A stream for `scenario`, connected, its opening request waiting in `poll_transmit`.
pub fn new_stream(scenario: Scenario, now: Instant) -> Stream {
    let config = if scenario.is_lines() {
        let auth = BetfairAuth {
            app_key: "k".into(),
            session: "s".into(),
        };
        StreamConfig::betfair("tcp://127.0.0.1:1", auth)
    } else {
        StreamConfig::binance_stream("ws://127.0.0.1:1/stream?streams=btcusdt@aggTrade")
    };
    let mut s = Stream::new(config, [1; 32], now).expect("valid config");
    while s.poll_transport().is_some() {}
    s.handle_connected(now);
    s
}

/// What the server answers to the stream's opening `request`: the upgrade's accept, or
/// Betfair's connection and authentication replies.
pub fn opening_answer(scenario: Scenario, request: &[u8]) -> Vec<u8> {
    if scenario.is_lines() {
        betfair_opening(1)
    } else {
        accept_response(request)
    }
}

/// A stream for `scenario`, open and past its opening exchange.
pub fn open_stream(scenario: Scenario, now: Instant) -> Stream {
    let mut s = new_stream(scenario, now);
    let mut request = Vec::new();
    while let Some(c) = s.poll_transmit() {
        request.extend_from_slice(&c);
    }
    feed(
        &mut s,
        &opening_answer(scenario, &request),
        now,
        false,
        false,
    );
    s
}
