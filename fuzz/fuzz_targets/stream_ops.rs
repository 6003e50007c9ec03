//! The whole stream machine under any sequence of transport inputs, application commands and time,
//! decoded from the input a few bytes an op: a Binance market stream, a Binance WebSocket API
//! stream or a Betfair line stream, under a connect budget or none, connected and dropped, answered
//! or refused, fed frames, lines and raw bytes in reads of any size (queued or lent), stopped,
//! crashed, left quiet for up to a day at a time. Checks: no panic; every deadline a timeout leaves
//! is later than that timeout (one due again at once would spin an adapter's loop); a whole data
//! message (or line) fed to an open stream holding no partial message comes out once, unaltered, by
//! the read that completed it (alone, or before or behind a ping, a pong, an answer, a status or
//! other data in the same bytes); one end event at most and nothing after it; after a stop, one
//! data message at most (the one half received then); a stopped or crashed stream is terminal
//! within its close timeout, then stays silent and never asks for a connection again, whatever
//! comes.
#![no_main]

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use feedwire_core::testing::{accept_response, server_frame};
use feedwire_core::{
    BetfairAuth, BetfairSubscription, ConnectBudget, PlannedReconnect, Stream, StreamConfig,
    StreamEvent, StreamState, TransportCommand,
};
use libfuzzer_sys::fuzz_target;

static START: OnceLock<Instant> = OnceLock::new();

/// Pops the next byte of the op stream (0 once it runs out, so every op is complete).
struct Ops<'a>(&'a [u8]);

impl Ops<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    fn bytes(&mut self, n: usize) -> &[u8] {
        let (taken, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        taken
    }
}

/// JSON a peer sends: data, answers to the ids the stream uses (small counters), notices.
fn json(pick: u8, id: u8) -> String {
    let id = id % 8;
    match pick % 12 {
        0 => r#"{"stream":"btcusdt@aggTrade","data":{"e":"aggTrade","p":"1"}}"#.to_owned(),
        1 => format!(r#"{{"result":null,"id":{id}}}"#),
        2 => format!(r#"{{"error":{{"code":2,"msg":"x"}},"id":{id}}}"#),
        3 => format!(r#"{{"result":["btcusdt@aggTrade"],"id":{id}}}"#),
        4 => r#"{"e":"serverShutdown","E":1}"#.to_owned(),
        5 => r#"{"op":"connection","connectionId":"x"}"#.to_owned(),
        6 => format!(r#"{{"op":"status","id":{id},"statusCode":"SUCCESS"}}"#),
        7 => format!(
            r#"{{"op":"status","id":{id},"statusCode":"FAILURE","errorCode":"NO_SESSION"}}"#
        ),
        8 => format!(
            r#"{{"op":"mcm","id":{id},"initialClk":"A","clk":"B","pt":1,"ct":"SUB_IMAGE"}}"#
        ),
        9 => format!(r#"{{"op":"mcm","id":{id},"clk":"C","pt":2,"ct":"HEARTBEAT"}}"#),
        10 => format!(r#"{{"id":"{id}","status":200,"result":{{}}}}"#),
        _ => r#"{"e":"depthUpdate","b":[["1","2"]]}"#.to_owned(),
    }
}

/// How the fuzzed transport feeds the stream.
struct Transport {
    /// A `Connect` was asked for and not yet answered.
    connect_asked: bool,
    /// Bytes at most a read.
    read_cap: usize,
    /// Reads lend their data messages instead of queueing them.
    lend: bool,
    /// What the stream wrote since the connection opened.
    sent: Vec<u8>,
    now: Instant,
    /// Since the connection was made, only whole messages in the stream's own framing were
    /// fed (frames, or lines): none of the peer's bytes is part of a message in progress.
    whole_input: bool,
    /// Market data messages made unique so far.
    serial: u64,
}

/// The stream's profile.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// Binance market streams over WebSocket.
    Market,
    /// The Binance WebSocket API.
    Api,
    /// Betfair lines.
    Lines,
}

/// Everything the stream reported, checked as it comes.
#[derive(Default)]
struct Seen {
    ended: bool,
    stopped: bool,
    crashed: bool,
    data_after_stop: usize,
    /// A message to count deliveries of, and their count.
    watched: Vec<u8>,
    watched_hits: usize,
}

impl Seen {
    fn event(&mut self, event: &StreamEvent) {
        assert!(!self.ended, "an event after the stream's end: {event:?}");
        match event {
            StreamEvent::Closed { .. } | StreamEvent::Crashed(_) => self.ended = true,
            StreamEvent::Data { payload, .. } => self.data(payload),
            _ => {}
        }
    }

    fn watch(&mut self, payload: Option<&[u8]>) {
        self.watched.clear();
        self.watched.extend_from_slice(payload.unwrap_or_default());
        self.watched_hits = 0;
    }

    fn data(&mut self, payload: &[u8]) {
        assert!(!self.ended, "data after the stream's end");
        self.watched_hits += usize::from(!self.watched.is_empty() && payload == self.watched);
        if self.stopped {
            self.data_after_stop += 1;
            assert!(self.data_after_stop <= 1, "data messages after the stop");
        }
    }
}

fn pump(s: &mut Stream, t: &mut Transport, seen: &mut Seen) {
    loop {
        let mut progressed = false;
        while let Some(c) = s.poll_transport() {
            progressed = true;
            match c {
                TransportCommand::Connect(_) => {
                    assert!(!seen.ended, "a connect asked for after the stream's end");
                    t.connect_asked = true;
                }
                TransportCommand::Disconnect => t.connect_asked = false,
            }
        }
        while let Some(chunk) = s.poll_transmit() {
            t.sent.extend_from_slice(&chunk);
            progressed = true;
        }
        while let Some(e) = s.poll_event() {
            seen.event(&e);
            progressed = true;
        }
        if !progressed {
            return;
        }
    }
}

fn feed(s: &mut Stream, t: &mut Transport, seen: &mut Seen, bytes: &[u8]) {
    feed_watching(s, t, seen, bytes, None);
}

/// [`feed`], and if `watched` is `Some((payload, end))`: the data message `payload`, whose
/// bytes end at `end` of `bytes`, is delivered exactly once by the read that completes it
/// (lent during it, or queued by the time it returns) — not at a later read, as a framer that
/// waits for a read to end on a boundary would — and not again.
fn feed_watching(
    s: &mut Stream,
    t: &mut Transport,
    seen: &mut Seen,
    bytes: &[u8],
    watched: Option<(&[u8], usize)>,
) {
    seen.watch(watched.map(|(payload, _)| payload));
    let end = watched.map_or(usize::MAX, |(_, end)| end);
    let mut fed = 0;
    while fed < bytes.len() && s.is_connected() {
        let buf = s.read_buf();
        let n = buf.len().min(bytes.len() - fed).min(t.read_cap);
        buf[..n].copy_from_slice(&bytes[fed..fed + n]);
        if t.lend {
            s.handle_read_with(n, t.now, |d| seen.data(d.payload));
        } else {
            s.handle_read(n, t.now);
        }
        fed += n;
        pump(s, t, seen);
        if fed >= end {
            assert_eq!(
                seen.watched_hits, 1,
                "a whole data message not delivered once by the read that completed it"
            );
        }
    }
    if watched.is_some() {
        assert_eq!(
            seen.watched_hits, 1,
            "a whole data message not delivered once"
        );
        seen.watch(None);
    }
}

/// Moves time forward by `d`, firing every deadline on the way, each checked to move on.
fn advance(s: &mut Stream, t: &mut Transport, seen: &mut Seen, d: Duration) {
    let end = t.now + d;
    while let Some(due) = s.poll_timeout().filter(|&due| due <= end) {
        t.now = t.now.max(due);
        s.handle_timeout(t.now);
        pump(s, t, seen);
        if let Some(next) = s.poll_timeout() {
            assert!(next > t.now, "a timeout left a deadline not after it");
        }
    }
    t.now = end;
}

/// A message and a data message of its own (`own`, `data` in its framing) in one buffer, the
/// own one first if `own_first`: the bytes, and the data with where its bytes end in them.
fn beside(
    message: Vec<u8>,
    own: Vec<u8>,
    data: String,
    own_first: bool,
) -> (Vec<u8>, Option<(Vec<u8>, usize)>) {
    let (bytes, end) = if own_first {
        let end = own.len();
        ([own, message].concat(), end)
    } else {
        let end = message.len() + own.len();
        ([message, own].concat(), end)
    };
    (bytes, Some((data.into_bytes(), end)))
}

/// Steps of time an op moves by (ms): up to a day, past a connection's planned lifetime. The
/// long ones are rare: a day of a stream whose connects go unanswered is 5,340 timeouts.
const STEPS_MS: [u64; 16] = [
    0, 0, 1, 1, 7, 30, 100, 250, 999, 1_000, 3_000, 5_000, 15_000, 61_000, 3_600_000, 86_400_000,
];

fn apply(s: &mut Stream, t: &mut Transport, seen: &mut Seen, ops: &mut Ops<'_>, kind: Kind) {
    let now = t.now;
    match ops.byte() % 20 {
        0 | 1 => {
            let how = ops.byte();
            if std::mem::take(&mut t.connect_asked) {
                if how % 5 == 4 {
                    s.handle_connect_failed("refused", now);
                } else {
                    t.sent.clear();
                    t.whole_input = true;
                    s.handle_connected(now);
                    pump(s, t, seen);
                    let request = std::mem::take(&mut t.sent);
                    if kind != Kind::Lines && request.starts_with(b"GET ") {
                        match how % 5 {
                            0 | 1 => feed(s, t, seen, &accept_response(&request)),
                            2 => feed(
                                s,
                                t,
                                seen,
                                b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 2\r\n\r\n",
                            ),
                            _ => {}
                        }
                    }
                }
            }
        }
        2..=4 => {
            let (head, pick, id) = (ops.byte(), ops.byte(), ops.byte());
            let opcode = [1, 1, 1, 2, 0, 8, 9, 10, 3][usize::from(head % 9)];
            let payload = match opcode {
                8 => [1000u16, 1001, 1008, 4000][usize::from(pick % 4)]
                    .to_be_bytes()
                    .to_vec(),
                9 | 10 => vec![id; usize::from(pick % 4)],
                _ => json(pick, id).into_bytes(),
            };
            let fin = head & 0x80 == 0;
            let frame = server_frame(fin, opcode, &payload);
            // Whether the frame leaves the stream as it was: open, between messages.
            let harmless = fin
                && (matches!(opcode, 9 | 10) || opcode == 1 && matches!(pick % 12, 0 | 1 | 3 | 11));
            // The message checked: a market data message of its own (a number no other
            // carries) before or behind a harmless frame in the same bytes (as a read of
            // several messages holds them), or this frame if it is data.
            let (bytes, watched) = if head & 0x40 != 0 && harmless {
                t.serial += 1;
                let data = format!(
                    r#"{{"stream":"btcusdt@aggTrade","data":{{"e":"aggTrade","a":{}}}}}"#,
                    t.serial
                );
                let own = server_frame(true, 1, data.as_bytes());
                beside(frame, own, data, head & 0x20 != 0)
            } else {
                let data = harmless && opcode == 1 && matches!(pick % 12, 0 | 11);
                let watched = data.then(|| (payload.clone(), frame.len()));
                (frame, watched)
            };
            // Checked where it must hold: an open market stream holding no partial message.
            let watched = watched.filter(|_| {
                kind == Kind::Market
                    && t.whole_input
                    && !seen.stopped
                    && matches!(s.state(), StreamState::Open)
            });
            t.whole_input &= kind != Kind::Lines && fin && matches!(opcode, 1 | 2 | 9 | 10);
            let watched = watched.as_ref().map(|(p, end)| (p.as_slice(), *end));
            feed_watching(s, t, seen, &bytes, watched);
        }
        5 | 6 => {
            let (pick, id) = (ops.byte(), ops.byte());
            let line = format!("{}\r\n", json(pick, id)).into_bytes();
            // As for frames: a market change line of its own, before or behind a harmless
            // line (a status, a market change, a heartbeat), checked the same way.
            let harmless = matches!(pick % 12, 6 | 8 | 9);
            let (bytes, watched) = if kind == Kind::Lines && pick & 0x80 != 0 && harmless {
                t.serial += 1;
                let n = t.serial;
                let data = format!(r#"{{"op":"mcm","id":2,"clk":"AA{n}","pt":{n},"mc":[]}}"#);
                let own = format!("{data}\r\n").into_bytes();
                beside(line, own, data, pick & 0x40 != 0)
            } else {
                (line, None)
            };
            let watched = watched.filter(|_| {
                t.whole_input && !seen.stopped && matches!(s.state(), StreamState::Open)
            });
            t.whole_input &= kind == Kind::Lines;
            let watched = watched.as_ref().map(|(p, end)| (p.as_slice(), *end));
            feed_watching(s, t, seen, &bytes, watched);
        }
        7 => {
            let n = usize::from(ops.byte() % 64);
            let raw = ops.bytes(n).to_vec();
            t.whole_input &= raw.is_empty();
            feed(s, t, seen, &raw);
        }
        8 | 9 => {
            let step = STEPS_MS[usize::from(ops.byte()) % STEPS_MS.len()];
            advance(s, t, seen, Duration::from_millis(step));
        }
        10 => {
            let n = ops.byte();
            if kind == Kind::Lines {
                let sub = BetfairSubscription {
                    filter_json: "{}".into(),
                    data_filter_json: None,
                    heartbeat_ms: Some(500),
                    conflate_ms: None,
                };
                let _ = if n & 1 == 0 {
                    s.subscribe_markets(sub, now)
                } else {
                    s.subscribe_orders(sub, now)
                };
            } else {
                let _ = s.subscribe(&[&format!("s{}@trade", n % 4)], now);
            }
        }
        11 => {
            let n = ops.byte();
            let _ = s.unsubscribe(&[&format!("s{}@trade", n % 4)], now);
        }
        12 => {
            let _ = s.list_subscriptions(now);
            let _ = s.request("ping", None, now);
        }
        13 => {
            let _ = if ops.byte() & 1 == 0 {
                s.send_text("{}")
            } else {
                s.send_binary(&[1, 2])
            };
        }
        14 => s.handle_eof(now),
        15 => s.handle_transport_error("reset", now),
        16 => {
            seen.stopped = true;
            s.stop(now);
        }
        17 => {
            seen.crashed = true;
            s.crash("fuzz", now);
        }
        18 => match ops.byte() % 4 {
            0 => s.handle_reads_held(now),
            1 => {
                s.release_read_buffer(now);
            }
            2 => {
                let _ = s.set_betfair_auth(BetfairAuth {
                    app_key: "k2".into(),
                    session: "s2".into(),
                });
            }
            _ => s.set_tls_buffer_bytes(usize::from(ops.byte()) * 1024, now),
        },
        _ => {
            let how = ops.byte();
            t.lend = how & 1 == 1;
            t.read_cap = 1 + usize::from(how >> 1) * 9;
        }
    }
    pump(s, t, seen);
}

fuzz_target!(|input: &[u8]| {
    let mut ops = Ops(input);
    let setup = ops.byte();
    let url_tls = setup & 0x10 != 0;
    let kind = [Kind::Market, Kind::Api, Kind::Lines][usize::from(setup % 3)];
    let mut config = match kind {
        Kind::Market => StreamConfig::binance_stream(if url_tls {
            "wss://127.0.0.1:1/stream"
        } else {
            "ws://127.0.0.1:1/stream"
        }),
        Kind::Api => StreamConfig::binance_ws_api("ws://127.0.0.1:1/ws-api/v3"),
        Kind::Lines => {
            let auth = BetfairAuth {
                app_key: "k".into(),
                session: "s".into(),
            };
            StreamConfig::betfair("tcp://127.0.0.1:1", auth)
        }
    };
    if setup & 0x20 != 0 {
        config.reconnect.planned = PlannedReconnect::Advise {
            grace: Duration::from_millis(5),
        };
    }
    if setup & 0x08 != 0 {
        // Two connects in 10 s: the rest wait their turn on a timer of their own.
        let budget = ConnectBudget::new(2, Duration::from_secs(10)).expect("valid budget");
        config.connect_budget = Some(budget);
    }
    if setup & 0x40 != 0 {
        config.ws.max_message_size = 256;
        config.ws.max_frame_size = 128;
    }
    // One clock for every run: a failing input replays with the same instants.
    let start = *START.get_or_init(Instant::now);
    let mut s = Stream::new(config, [9; 32], start).expect("valid config");
    let mut t = Transport {
        connect_asked: false,
        read_cap: usize::MAX,
        lend: setup & 0x80 != 0,
        sent: Vec::new(),
        now: start,
        whole_input: false,
        serial: 0,
    };
    let mut seen = Seen::default();
    pump(&mut s, &mut t, &mut seen);
    let mut applied = 0;
    while !ops.0.is_empty() && applied < 400 {
        apply(&mut s, &mut t, &mut seen, &mut ops, kind);
        applied += 1;
    }
    if seen.stopped || seen.crashed {
        // Whatever state the stop or crash met, the close timeout ends it.
        advance(&mut s, &mut t, &mut seen, Duration::from_secs(60));
        assert!(
            s.state().is_terminal(),
            "not terminal after a stop: {:?}",
            s.state()
        );
    }
    if s.state().is_terminal() {
        assert!(seen.ended, "terminal without an end event: {:?}", s.state());
        // Terminal stays terminal and silent, whatever comes.
        let mut again = Ops(input);
        again.byte();
        for _ in 0..40 {
            if again.0.is_empty() {
                break;
            }
            apply(&mut s, &mut t, &mut seen, &mut again, kind);
        }
        advance(&mut s, &mut t, &mut seen, Duration::from_secs(60));
        assert!(s.state().is_terminal());
    }
});
