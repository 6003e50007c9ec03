//! Property: however the peer's bytes are cut into reads, a `Stream` reports the same events,
//! in the same order, and remembers the same stream positions. Data messages on a stream that
//! already had data skip the engine's event queue (the fast path), while responses, pings,
//! fragments and shutdown notices take the general path: the mix below interleaves them so
//! that every read boundary falls between, and inside, messages of both kinds. Lending
//! (`handle_read_with`, data borrowed from the read buffer) must report exactly what queueing
//! does, in the same order, for any split.

mod common;

use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes};
use common::harness::Harness;
use feedwire_core::testing::server_frame;
use feedwire_core::{PlannedReconnect, StreamConfig, StreamEvent};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Item {
    Data(u16),
    Binary(u8),
    Answer,
    Unsolicited(u8),
    Error(u8),
    Ping,
    Fragmented(u16),
    NotJson,
    /// A data message of this many payload bytes, over 16 KiB: a read that starts inside
    /// its frame stops at the frame's end.
    Large(u32),
}

fn item() -> impl Strategy<Value = Item> {
    prop_oneof![
        8 => any::<u16>().prop_map(Item::Data),
        1 => any::<u8>().prop_map(Item::Binary),
        1 => Just(Item::Answer),
        1 => any::<u8>().prop_map(Item::Unsolicited),
        1 => any::<u8>().prop_map(Item::Error),
        1 => Just(Item::Ping),
        1 => any::<u16>().prop_map(Item::Fragmented),
        1 => Just(Item::NotJson),
    ]
}

/// Small messages with large ones among them.
fn large_or_small() -> impl Strategy<Value = Item> {
    prop_oneof![
        2 => any::<u16>().prop_map(Item::Data),
        1 => (16_400u32..300_000).prop_map(Item::Large),
        1 => Just(Item::Ping),
    ]
}

/// Reads for large messages: a few bytes, a few KB, or hundreds of KB, cycled; one large
/// read per cycle at least, so that megabytes take hundreds of reads, not millions.
fn large_chunks() -> impl Strategy<Value = Vec<usize>> {
    (
        prop::collection::vec(
            prop_oneof![1usize..64, 1000usize..20_000, 20_000usize..400_000],
            0..5,
        ),
        20_000usize..400_000,
    )
        .prop_map(|(mut reads, large)| {
            reads.push(large);
            reads
        })
}

/// Reads of these sizes, cycled (then one read of whatever is left per `read_buf`).
fn chunks() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(prop_oneof![1usize..8, 8usize..300, 300usize..5000], 1..12)
}

/// How the test reads: queueing every event, or lending data messages (recorded as the
/// `Data` event they stand for, in the order they were lent); the bytes written into
/// `read_buf`, or (`Spare`) every other read through `read_spare`, the same room
/// uninitialised.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Queue,
    Lend,
    QueueSpare,
    LendSpare,
}

fn feed_in(h: &mut Harness, bytes: &[u8], chunks: &[usize], mode: Mode) {
    let mut at = 0;
    for (i, size) in chunks.iter().cycle().enumerate() {
        if at == bytes.len() || !h.s.is_connected() || i > 100_000 {
            return;
        }
        let n = if matches!(mode, Mode::QueueSpare | Mode::LendSpare) && i % 2 == 0 {
            let mut room = h.s.read_spare().expect("connected");
            let n = room.remaining_mut().min(*size).min(bytes.len() - at);
            room.put_slice(&bytes[at..at + n]);
            n
        } else {
            let buf = h.s.read_buf();
            let n = buf.len().min(*size).min(bytes.len() - at);
            buf[..n].copy_from_slice(&bytes[at..at + n]);
            n
        };
        match mode {
            Mode::Queue | Mode::QueueSpare => h.s.handle_read(n, h.now),
            Mode::Lend | Mode::LendSpare => {
                let events = &mut h.events;
                h.s.handle_read_with(n, h.now, |d| {
                    events.push(StreamEvent::Data {
                        payload: Bytes::copy_from_slice(d.payload),
                        heartbeat: d.heartbeat,
                        received: d.received,
                    })
                });
            }
        }
        at += n;
        h.pump();
    }
}

fn binance_bytes(items: &[Item], shutdown_at_end: bool, trailing: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let text = |t: String| server_frame(true, 1, t.as_bytes());
        out.extend(match item {
            Item::Data(n) if n % 2 == 0 => text(format!(
                r#"{{"stream":"btcusdt@aggTrade","data":{{"e":"aggTrade","a":{i},"p":"{n}"}}}}"#
            )),
            Item::Data(n) => text(format!(r#"{{"e":"trade","t":{i},"p":"{n}"}}"#)),
            Item::Binary(b) => server_frame(true, 2, &[*b, 0, 0xff]),
            Item::Answer => text(r#"{"result":null,"id":1}"#.to_owned()),
            Item::Unsolicited(id) => {
                text(format!(r#"{{"result":null,"id":{}}}"#, 100 + *id as u32))
            }
            Item::Error(id) => text(format!(r#"{{"error":{{"code":2,"msg":"x"}},"id":{id}}}"#)),
            Item::Ping => server_frame(true, 9, b"hb"),
            Item::Fragmented(n) => {
                let whole = format!(r#"{{"e":"depthUpdate","u":{n},"b":[["1.0","2"]]}}"#);
                let (a, b) = whole.split_at(whole.len() / 2);
                let mut f = server_frame(false, 1, a.as_bytes());
                f.extend(server_frame(true, 0, b.as_bytes()));
                f
            }
            Item::NotJson => text("pong".to_owned()),
            Item::Large(len) => text(padded(
                format!(r#"{{"stream":"btcusdt@ticker","data":{{"a":{i},"d":""#),
                *len,
                "\"}}",
            )),
        });
    }
    if shutdown_at_end {
        out.extend(server_frame(
            true,
            1,
            br#"{"stream":"!serverShutdown","data":{"e":"serverShutdown","E":1}}"#,
        ));
    }
    // Whatever follows (garbage included) must not change the report either.
    out.extend_from_slice(trailing);
    out
}

/// `head`, then `x` up to `len` bytes in all with `tail`.
fn padded(mut head: String, len: u32, tail: &str) -> String {
    let fill = (len as usize).saturating_sub(head.len() + tail.len());
    head.extend(std::iter::repeat_n('x', fill));
    head.push_str(tail);
    head
}

/// Everything observable: the events (Debug form, payloads included) and what was sent.
/// `advise`: the shutdown notice is reported and the connection kept
/// ([`PlannedReconnect::Advise`], its grace over within the run) instead of closed at once.
fn binance_run(
    items: &[Item],
    (shutdown, advise): (bool, bool),
    trailing: &[u8],
    chunks: &[usize],
    mode: Mode,
) -> (String, Vec<(u8, Vec<u8>)>) {
    let mut config = StreamConfig::binance_stream("ws://127.0.0.1:9/stream");
    if advise {
        config.reconnect.planned = PlannedReconnect::Advise {
            grace: Duration::from_millis(5),
        };
    }
    let mut h = Harness::new(config);
    h.open_ws();
    h.s.subscribe(&["btcusdt@aggTrade"], h.now).expect("open");
    h.pump();
    h.take_events();
    h.sent.clear();
    feed_in(
        &mut h,
        &binance_bytes(items, shutdown, trailing),
        chunks,
        mode,
    );
    let fed = h.now;
    h.advance(Duration::from_millis(10));
    (describe(&h.take_events(), fed), h.sent_frames())
}

/// Events as text, their instants (a reconnect's deadline, a message's read) as the time
/// from `origin`: each run has its own clock.
fn describe(events: &[StreamEvent], origin: Instant) -> String {
    let events: Vec<String> = events
        .iter()
        .map(|e| match e {
            StreamEvent::ReconnectDue { reason, deadline } => {
                format!("ReconnectDue({reason:?}, +{:?})", *deadline - origin)
            }
            StreamEvent::Data {
                payload,
                heartbeat,
                received,
            } => format!("Data({payload:?}, {heartbeat}, +{:?})", *received - origin),
            e => format!("{e:?}"),
        })
        .collect();
    format!("{events:?}")
}

/// The events before a stop made after the first `at` bytes, the events after it (the rest
/// of the bytes, then the server's Close), and how many data messages the latter hold.
fn binance_stop_run(
    items: &[Item],
    at: usize,
    chunks: &[usize],
    mode: Mode,
) -> (String, String, usize) {
    let mut h = Harness::new(StreamConfig::binance_stream("ws://127.0.0.1:9/stream"));
    let origin = h.now;
    h.open_ws();
    h.s.subscribe(&["btcusdt@aggTrade"], h.now).expect("open");
    h.pump();
    h.take_events();
    let mut bytes = binance_bytes(items, false, &[]);
    let at = at.min(bytes.len());
    bytes.extend(server_frame(true, 8, &1000u16.to_be_bytes()));
    feed_in(&mut h, &bytes[..at], chunks, mode);
    let before = h.take_events();
    h.s.stop(h.now);
    h.pump();
    feed_in(&mut h, &bytes[at..], chunks, mode);
    h.advance(Duration::from_millis(10));
    let after = h.take_events();
    let data = after
        .iter()
        .filter(|e| matches!(e, StreamEvent::Data { .. }))
        .count();
    (describe(&before, origin), describe(&after, origin), data)
}

fn betfair_bytes(items: &[Item]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let line = match item {
            Item::Data(n) if n % 3 == 0 => {
                format!(r#"{{"op":"mcm","id":2,"ct":"HEARTBEAT","clk":"H{i}","pt":{n}}}"#)
            }
            Item::Data(n) if n % 3 == 1 => format!(
                r#"{{"op":"mcm","id":2,"initialClk":"I{i}","clk":"C{i}","pt":{n},"mc":[{{"id":"1.2","rc":[]}}]}}"#
            ),
            Item::Data(n) => format!(
                r#"{{"op":"mcm","id":2,"clk":"C{i}","pt":{n},"mc":[{{"id":"1.2","rc":[{{"atb":[[1.5,{n}]],"id":4}}]}}]}}"#
            ),
            Item::Binary(b) => format!(r#"{{"op":"ocm","id":3,"clk":"O{b}","pt":1,"oc":[]}}"#),
            Item::Answer => r#"{"op":"status","id":2,"statusCode":"SUCCESS"}"#.to_owned(),
            Item::Unsolicited(id) => format!(
                r#"{{"op":"status","id":{},"statusCode":"SUCCESS"}}"#,
                100 + *id as u32
            ),
            Item::Error(id) => format!(
                r#"{{"op":"status","id":{},"statusCode":"FAILURE","errorCode":"X"}}"#,
                100 + *id as u32
            ),
            Item::Ping => r#"{"op":"mcm","id":2,"ct":"HEARTBEAT","pt":5}"#.to_owned(),
            Item::Fragmented(n) => format!(r#" {{ "op" : "mcm", "clk" : "S{n}", "mc" : [] }}"#),
            Item::NotJson => "pong".to_owned(),
            Item::Large(len) => padded(
                format!(r#"{{"op":"mcm","id":2,"clk":"L{i}","pt":{i},"mc":[{{"id":""#),
                *len,
                "\"}]}",
            ),
        };
        out.extend_from_slice(line.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Events, then the resubscription sent after a reconnect (it carries the clocks seen).
fn betfair_run(items: &[Item], chunks: &[usize], mode: Mode) -> (String, Vec<String>) {
    let mut h = Harness::betfair_authenticated();
    let fed = h.now;
    feed_in(&mut h, &betfair_bytes(items), chunks, mode);
    let events = describe(&h.take_events(), fed);
    (events, h.betfair_reconnect())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn binance_events_do_not_depend_on_read_boundaries(
        items in prop::collection::vec(item(), 1..40),
        shutdown in any::<bool>(),
        advise in any::<bool>(),
        trailing in prop::collection::vec(any::<u8>(), 0..6),
        chunks in chunks(),
    ) {
        // Data first, so that what follows can take the fast path.
        let items = [vec![Item::Data(0)], items].concat();
        let shutdown = (shutdown, advise);
        let whole = binance_run(&items, shutdown, &trailing, &[1 << 20], Mode::Queue);
        let split = binance_run(&items, shutdown, &trailing, &chunks, Mode::Queue);
        prop_assert_eq!(&split.0, &whole.0);
        // Same reads, lent instead of queued: everything identical, the bytes sent included.
        for (reads, queued) in [(&[1 << 20][..], &whole), (&chunks, &split)] {
            let lent = binance_run(&items, shutdown, &trailing, reads, Mode::Lend);
            prop_assert_eq!(&lent, queued, "lending must not change what is reported or sent");
        }
        // Reads through spare room: the same bytes, the same reads, the same report.
        for mode in [Mode::QueueSpare, Mode::LendSpare] {
            let spare = binance_run(&items, shutdown, &trailing, &chunks, mode);
            prop_assert_eq!(&spare, &split, "reading through read_spare ({:?})", mode);
        }
        // What was sent, too, while the connection ended normally. Not after a crash (a
        // fatal answer drops the connection at once, so a pong queued in the same read is
        // never handed out, while one read earlier it was), and not when garbage followed a
        // shutdown notice (the engine answers a violation with Close 1002 as soon as it
        // decodes it: in the notice's own read, before the stream's planned Close 1000).
        let crashed = whole.0.contains("Crashed");
        if !crashed && (trailing.is_empty() || !shutdown.0) {
            prop_assert_eq!(split.1, whole.1);
        }
    }

    /// What a stop delivers depends only on the bytes that arrived before it, not on how
    /// they (or the ones after it) were cut into reads, nor on lending: at most the message
    /// half received at the stop.
    #[test]
    fn what_a_stop_delivers_does_not_depend_on_read_boundaries(
        items in prop::collection::vec(item(), 1..30),
        permille in 0usize..=1000,
        chunks in chunks(),
    ) {
        let items = [vec![Item::Data(0)], items].concat();
        let at = binance_bytes(&items, false, &[]).len() * permille / 1000;
        let whole = binance_stop_run(&items, at, &[1 << 20], Mode::Queue);
        prop_assert!(whole.2 <= 1, "data after the stop: {}", whole.1);
        prop_assert_eq!(&binance_stop_run(&items, at, &chunks, Mode::Queue), &whole);
        prop_assert_eq!(&binance_stop_run(&items, at, &chunks, Mode::Lend), &whole);
        prop_assert_eq!(&binance_stop_run(&items, at, &[1 << 20], Mode::Lend), &whole);
        prop_assert_eq!(&binance_stop_run(&items, at, &chunks, Mode::QueueSpare), &whole);
        prop_assert_eq!(&binance_stop_run(&items, at, &chunks, Mode::LendSpare), &whole);
    }

    #[test]
    fn betfair_events_and_clocks_do_not_depend_on_read_boundaries(
        items in prop::collection::vec(item(), 1..40),
        chunks in chunks(),
    ) {
        let items = [vec![Item::Data(1)], items].concat();
        let whole = betfair_run(&items, &[1 << 20], Mode::Queue);
        prop_assert_eq!(betfair_run(&items, &chunks, Mode::Queue), whole.clone());
        prop_assert_eq!(betfair_run(&items, &[1 << 20], Mode::Lend), whole.clone());
        prop_assert_eq!(betfair_run(&items, &chunks, Mode::QueueSpare), whole.clone());
        prop_assert_eq!(betfair_run(&items, &chunks, Mode::LendSpare), whole.clone());
        prop_assert_eq!(betfair_run(&items, &chunks, Mode::Lend), whole);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn large_messages_do_not_depend_on_read_boundaries(
        items in prop::collection::vec(large_or_small(), 1..8),
        chunks in large_chunks(),
    ) {
        let items = [vec![Item::Data(0)], items].concat();
        let whole = binance_run(&items, (false, false), &[], &[1 << 20], Mode::Queue);
        prop_assert!(!whole.0.contains("Crashed") && !whole.0.contains("Failed"), "{}", whole.0);
        prop_assert_eq!(&binance_run(&items, (false, false), &[], &chunks, Mode::Queue), &whole);
        prop_assert_eq!(&binance_run(&items, (false, false), &[], &chunks, Mode::Lend), &whole);
        for mode in [Mode::QueueSpare, Mode::LendSpare] {
            prop_assert_eq!(&binance_run(&items, (false, false), &[], &chunks, mode), &whole);
        }
        let whole = betfair_run(&items, &[1 << 20], Mode::Queue);
        prop_assert_eq!(betfair_run(&items, &chunks, Mode::Queue), whole.clone());
        prop_assert_eq!(betfair_run(&items, &chunks, Mode::QueueSpare), whole.clone());
        prop_assert_eq!(betfair_run(&items, &chunks, Mode::Lend), whole);
    }
}
