//! Arbitrary peer bytes into a whole `Stream` (Binance over WebSocket after a completed
//! handshake with one subscription pending, or Betfair lines after the greeting and
//! authentication), fed with arbitrary read splits (every other read through `read_spare`, the
//! same room uninitialised). Data messages take the stream's fast path
//! and everything else the general one; checks: no panic, and the events (payloads included)
//! do not depend on the splits, nor on whether data messages are queued or lent
//! (`handle_read_with`; a lent message is recorded as the `Data` event it stands for). With a
//! stop after some of the bytes (the split byte's high bits): the same, and after the stop at
//! most one data message (the one half received then).
#![no_main]

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes};
use feedwire_core::testing::accept_response;
use feedwire_core::{
    BetfairAuth, PlannedReconnect, Stream, StreamConfig, StreamEvent, TransportCommand, WsConfig,
};
use libfuzzer_sys::fuzz_target;

fn drain(s: &mut Stream, sent: &mut Vec<u8>, events: &mut Vec<String>) {
    while s.poll_transport().is_some() {}
    while let Some(chunk) = s.poll_transmit() {
        sent.extend_from_slice(&chunk);
    }
    events.extend(std::iter::from_fn(|| s.poll_event()).map(|e| format!("{e:?}")));
}

fn feed(
    s: &mut Stream,
    now: Instant,
    data: &[u8],
    splits: &[u8],
    lend: bool,
    events: &mut Vec<String>,
) {
    let mut sent = Vec::new();
    let (mut fed, mut i) = (0, 0);
    while fed < data.len() && s.is_connected() {
        let want = splits
            .get(i % splits.len().max(1))
            .map_or(usize::MAX, |&n| usize::from(n) + 1);
        // Every other read through the room as uninitialised memory, as a `recv` into spare
        // capacity would write it: the same room, the same events.
        let n = if i % 2 == 1 {
            let mut room = s.read_spare().expect("connected");
            let n = room.remaining_mut().min(want).min(data.len() - fed);
            room.put_slice(&data[fed..fed + n]);
            n
        } else {
            let buf = s.read_buf();
            let n = buf.len().min(want).min(data.len() - fed);
            buf[..n].copy_from_slice(&data[fed..fed + n]);
            n
        };
        if lend {
            s.handle_read_with(n, now, |d| {
                let event = StreamEvent::Data {
                    payload: Bytes::copy_from_slice(d.payload),
                    heartbeat: d.heartbeat,
                    received: d.received,
                };
                events.push(format!("{event:?}"));
            });
        } else {
            s.handle_read(n, now);
        }
        fed += n;
        i += 1;
        drain(s, &mut sent, events);
    }
}

/// Marks where the stop was made among the events.
const STOP: &str = "-- stop --";

static START: OnceLock<Instant> = OnceLock::new();

/// A shutdown notice's report keeps the connection this long.
const GRACE: Duration = Duration::from_millis(5);

fn run(
    lines: bool,
    advise: bool,
    data: &[u8],
    stop_at: Option<usize>,
    max_read_size: usize,
    splits: &[u8],
    lend: bool,
) -> Vec<String> {
    // One clock for every run: a reported deadline is an instant, compared between runs.
    let now = *START.get_or_init(Instant::now);
    let mut config = if lines {
        let auth = BetfairAuth {
            app_key: "k".into(),
            session: "s".into(),
        };
        StreamConfig::betfair("tcp://127.0.0.1:1", auth)
    } else {
        StreamConfig::binance_stream("ws://127.0.0.1:1/stream")
    };
    if advise {
        config.reconnect.planned = PlannedReconnect::Advise { grace: GRACE };
    }
    config.ws = WsConfig {
        max_read_size,
        max_frame_size: 1 << 20,
        max_message_size: 1 << 20,
        ..config.ws
    };
    let mut s = Stream::new(config, [5; 32], now).expect("valid config");
    let (mut sent, mut events) = (Vec::new(), Vec::new());
    while let Some(c) = s.poll_transport() {
        assert!(matches!(c, TransportCommand::Connect(_)));
    }
    s.handle_connected(now);
    drain(&mut s, &mut sent, &mut events);
    let opening: Vec<u8> = if lines {
        b"{\"op\":\"connection\",\"connectionId\":\"1\"}\r\n{\"op\":\"status\",\"id\":1,\"statusCode\":\"SUCCESS\"}\r\n".to_vec()
    } else {
        accept_response(&sent)
    };
    feed(&mut s, now, &opening, &[], false, &mut events);
    if !lines {
        let _ = s.subscribe(&["btcusdt@aggTrade"], now);
    }
    events.clear();
    match stop_at {
        Some(at) => {
            feed(&mut s, now, &data[..at], splits, lend, &mut events);
            s.stop(now);
            drain(&mut s, &mut Vec::new(), &mut events);
            events.push(STOP.to_owned());
            feed(&mut s, now, &data[at..], splits, lend, &mut events);
        }
        None => feed(&mut s, now, data, splits, lend, &mut events),
    }
    let later = now + 2 * GRACE;
    if s.poll_timeout().is_some_and(|t| t <= later) {
        s.handle_timeout(later);
    }
    s.handle_eof(later);
    drain(&mut s, &mut Vec::new(), &mut events);
    events
}

fuzz_target!(|input: &[u8]| {
    let [control, nsplits, options, rest @ ..] = input else {
        return;
    };
    let lines = control & 1 == 1;
    let advise = options & 1 == 1;
    let stop = usize::from(*nsplits >> 3);
    let nsplits = usize::from(*nsplits % 8).min(rest.len());
    let (splits, data) = rest.split_at(nsplits);
    let max_read_size = 1 + usize::from((control >> 1) & 0x3F) * 37;
    let lend = control & 0x80 != 0;
    // 1..=31: a stop after that many 32nds of the bytes.
    let stop_at = (stop > 0).then(|| data.len() * stop / 32);
    let reference = run(lines, advise, data, stop_at, 256 * 1024, &[], false);
    let split = run(lines, advise, data, stop_at, max_read_size, splits, lend);
    assert_eq!(
        reference, split,
        "events depend on read splits (lending: {lend}, stop at {stop_at:?})"
    );
    if let Some(marker) = reference.iter().position(|e| e == STOP) {
        let after = reference[marker..]
            .iter()
            .filter(|e| e.starts_with("Data"))
            .count();
        assert!(after <= 1, "{after} data messages after the stop");
    }
});
