//! `Stream::handle_read_with`: data messages lent from the read buffer, everything else
//! queued — and never a message out of order, even with an event left unpolled.

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use common::harness::Harness;
use common::{filler_frame, LANE_LENGTHS, LANE_WIDTHS};
use feedwire_core::testing::server_frame;
use feedwire_core::{DataHandler, DataRef, StreamConfig, StreamEvent, StreamState};

/// Reads `bytes` in one `handle_read_with`; returns what was lent (payload, heartbeat) and
/// then the events queued, without polling anything before the read.
fn lend(h: &mut Harness, bytes: &[u8]) -> (Vec<(String, bool)>, Vec<StreamEvent>) {
    let buf = h.s.read_buf();
    buf[..bytes.len()].copy_from_slice(bytes);
    let mut lent = Vec::new();
    h.s.handle_read_with(bytes.len(), h.now, |d| {
        lent.push((
            String::from_utf8(d.payload.to_vec()).expect("utf8"),
            d.heartbeat,
        ));
    });
    h.pump();
    (lent, h.take_events())
}

fn frames(texts: &[&str]) -> Vec<u8> {
    texts
        .iter()
        .flat_map(|t| server_frame(true, 1, t.as_bytes()))
        .collect()
}

fn data_payload(e: &StreamEvent) -> Option<&[u8]> {
    match e {
        StreamEvent::Data { payload, .. } => Some(payload),
        _ => None,
    }
}

fn binance() -> Harness {
    let mut h = Harness::new(StreamConfig::binance_stream("ws://127.0.0.1:9/stream"));
    h.open_ws();
    h.s.subscribe(&["a@trade"], h.now).expect("open");
    h.pump();
    h.take_events();
    h
}

#[test]
fn data_is_lent_and_a_response_queued_behind_it_in_order() {
    let mut h = binance();
    // The first data message of a connection takes the general path (it stops the
    // first-data timer): queued, not lent.
    let (lent, events) = lend(&mut h, &frames(&[r#"{"e":"trade","t":1}"#]));
    assert!(lent.is_empty());
    assert_eq!(
        data_payload(&events[0]),
        Some(&br#"{"e":"trade","t":1}"#[..])
    );

    let (lent, events) = lend(
        &mut h,
        &frames(&[
            r#"{"e":"trade","t":2}"#,
            r#"{"e":"trade","t":3}"#,
            r#"{"result":null,"id":1}"#,
            r#"{"e":"trade","t":4}"#,
        ]),
    );
    assert_eq!(
        lent,
        vec![
            (r#"{"e":"trade","t":2}"#.to_owned(), false),
            (r#"{"e":"trade","t":3}"#.to_owned(), false)
        ]
    );
    // The answer to SUBSCRIBE, then the message behind it: queued, in order.
    assert!(
        matches!(events[0], StreamEvent::Subscribed { .. }),
        "{events:?}"
    );
    assert_eq!(
        data_payload(&events[1]),
        Some(&br#"{"e":"trade","t":4}"#[..])
    );
    assert_eq!(events.len(), 2);
    let stats = h.s.stats_handle().snapshot(h.now);
    assert_eq!(stats.messages_received, 5, "lent messages are counted too");
}

#[test]
fn nothing_is_lent_ahead_of_an_unpolled_event() {
    let mut h = binance();
    h.feed_text(r#"{"e":"trade","t":1}"#);
    h.take_events();
    // A response read and left in the queue (not polled)…
    let buf = h.s.read_buf();
    let answer = frames(&[r#"{"result":null,"id":1}"#]);
    buf[..answer.len()].copy_from_slice(&answer);
    h.s.handle_read(answer.len(), h.now);
    // …so the next read's data must queue behind it rather than be lent ahead of it.
    let (lent, events) = lend(&mut h, &frames(&[r#"{"e":"trade","t":2}"#]));
    assert!(lent.is_empty(), "{lent:?}");
    assert!(
        matches!(events[0], StreamEvent::Subscribed { .. }),
        "{events:?}"
    );
    assert_eq!(
        data_payload(&events[1]),
        Some(&br#"{"e":"trade","t":2}"#[..])
    );
}

#[test]
fn fragmented_and_binary_messages_are_lent_too() {
    let mut h = binance();
    h.feed_text(r#"{"e":"trade","t":1}"#);
    h.take_events();
    let mut bytes = server_frame(false, 1, br#"{"e":"tr"#);
    bytes.extend(server_frame(true, 0, br#"ade","t":2}"#));
    bytes.extend(server_frame(true, 2, b"bin"));
    let (lent, events) = lend(&mut h, &bytes);
    assert_eq!(
        lent,
        vec![
            (r#"{"e":"trade","t":2}"#.to_owned(), false),
            ("bin".to_owned(), false)
        ]
    );
    assert!(events.is_empty(), "{events:?}");
}

#[test]
fn betfair_lines_are_lent_with_heartbeat_flags_and_clocks_kept() {
    let mut h = Harness::betfair_authenticated();
    h.feed_line(r#"{"op":"mcm","id":2,"initialClk":"I0","clk":"C0","ct":"SUB_IMAGE","mc":[]}"#);
    h.take_events();
    let (lent, events) = lend(
        &mut h,
        b"{\"op\":\"mcm\",\"id\":2,\"clk\":\"C1\",\"mc\":[]}\r\n\
          {\"op\":\"mcm\",\"id\":2,\"ct\":\"HEARTBEAT\",\"clk\":\"C2\"}\r\n\
          {\"op\":\"status\",\"id\":9,\"statusCode\":\"SUCCESS\"}\r\n\
          {\"op\":\"mcm\",\"id\":2,\"clk\":\"C3\",\"mc\":[]}\r\n\
          {\"op\":\"mcm\",\"id\":2,",
    );
    assert_eq!(
        lent,
        vec![
            (
                r#"{"op":"mcm","id":2,"clk":"C1","mc":[]}"#.to_owned(),
                false
            ),
            (
                r#"{"op":"mcm","id":2,"ct":"HEARTBEAT","clk":"C2"}"#.to_owned(),
                true
            ),
        ]
    );
    assert!(
        matches!(events[0], StreamEvent::UnsolicitedResponse { .. }),
        "{events:?}"
    );
    assert_eq!(
        data_payload(&events[1]),
        Some(&br#"{"op":"mcm","id":2,"clk":"C3","mc":[]}"#[..])
    );
    assert_eq!(events.len(), 2, "the partial line waits: {events:?}");
    // The resubscription after a reconnect carries the last clock, lent or queued.
    let sent = h.betfair_reconnect().join("\n");
    assert!(sent.contains(r#""clk":"C3""#), "{sent}");
    assert!(sent.contains(r#""initialClk":"I0""#), "{sent}");
}

#[test]
fn betfair_resubscribes_from_the_last_clock_however_it_was_kept() {
    // Deltas of one shape: same-length clocks (checked by the learned layout), a longer
    // one (walked, layout relearned), a clock past the inline size, and a clock too near
    // the end of its line for a whole-block copy. After each run of lines, a reconnect
    // must resume from exactly the last clock lent.
    let delta = |clk: &str| {
        format!(r#"{{"op":"mcm","id":2,"clk":"{clk}","pt":1700000000123,"mc":[{{"id":"1.2"}}]}}"#)
    };
    let long = "L".repeat(40);
    let endings: [(&[String], &str); 4] = [
        (
            &[
                delta("AAAA000001"),
                delta("AAAA000002"),
                delta("AAAA000003"),
            ],
            "AAAA000003",
        ),
        (&[delta("AAAA000004"), delta("AAAA0000005")], "AAAA0000005"),
        (&[delta("AAAA000006"), delta(&long)], &long),
        (
            &[
                delta("AAAA000007"),
                r#"{"op":"mcm","id":2,"pt":1,"clk":"Q="}"#.to_owned(),
            ],
            "Q=",
        ),
    ];
    for (lines, last) in endings {
        let mut h = Harness::betfair_authenticated();
        h.feed_line(r#"{"op":"mcm","id":2,"initialClk":"I0","clk":"C0","ct":"SUB_IMAGE","mc":[]}"#);
        h.take_events();
        let bytes: String = lines.iter().map(|l| format!("{l}\r\n")).collect();
        let (lent, events) = lend(&mut h, bytes.as_bytes());
        assert_eq!(lent.len(), lines.len(), "{events:?}");
        assert!(events.is_empty(), "{events:?}");
        let sent = h.betfair_reconnect().join("\n");
        assert!(
            sent.contains(&format!(r#""clk":"{last}""#)),
            "{last}: {sent}"
        );
        assert!(sent.contains(r#""initialClk":"I0""#), "{sent}");
    }
}

#[test]
fn frames_that_span_reads_are_lent_and_the_block_is_never_cut() {
    // 100 KB frames read at full offers (the read size ramps to 256 KiB): many frames start
    // in one read and end in another, so the decoder holds their headers between reads.
    // Each must still be lent in place: a frame cut out of the block instead shrinks the
    // block by its size (and the next reads zero-fill it again).
    let mut h = binance();
    h.feed_text(r#"{"e":"trade","t":1}"#);
    h.take_events();
    let payloads: Vec<String> = (0..150)
        .map(|i| format!(r#"{{"e":"depth","i":{i},"b":"{}"}}"#, "7".repeat(100_000)))
        .collect();
    let texts: Vec<&str> = payloads.iter().map(String::as_str).collect();
    let bytes = frames(&texts);
    // Where each frame ends in `bytes`: a read ending elsewhere cut a frame.
    let ends: Vec<usize> = texts
        .iter()
        .scan(0, |end, t| {
            *end += frames(&[t]).len();
            Some(*end)
        })
        .collect();
    let stats = h.s.stats_handle();
    let (mut fed, mut lent, mut capacities, mut cuts) = (0, Vec::new(), Vec::new(), 0);
    while fed < bytes.len() {
        let buf = h.s.read_buf();
        let n = buf.len().min(bytes.len() - fed);
        buf[..n].copy_from_slice(&bytes[fed..fed + n]);
        fed += n;
        cuts += usize::from(ends.binary_search(&fed).is_err());
        h.s.handle_read_with(n, h.now, |d| lent.push(d.payload.to_vec()));
        capacities.push(stats.snapshot(h.now).read_buffer_bytes);
    }
    assert!(
        cuts >= 40,
        "only {cuts} of {} reads ended inside a frame",
        capacities.len()
    );
    assert_eq!(lent.len(), payloads.len());
    assert!(lent.iter().zip(&payloads).all(|(l, p)| l == p.as_bytes()));
    h.pump();
    assert!(h.take_events().is_empty());
    // Once the reads are full-sized (the first dozen reads ramp up), one block serves every
    // read.
    let settled = &capacities[capacities.len() / 2..];
    assert!(settled.iter().all(|&c| c == settled[0]), "{capacities:?}");
}

#[test]
fn has_events_says_whether_a_read_queued_anything_besides_lent_data() {
    let mut h = binance();
    // The connection's first data message is queued (see above); take it.
    lend(&mut h, &frames(&[r#"{"e":"trade","t":1}"#]));
    let read = |h: &mut Harness, bytes: &[u8]| {
        h.s.read_buf()[..bytes.len()].copy_from_slice(bytes);
        let mut lent = 0;
        h.s.handle_read_with(bytes.len(), h.now, |_| lent += 1);
        lent
    };
    let lent = read(&mut h, &frames(&[r#"{"e":"trade","t":2}"#]));
    assert_eq!(lent, 1);
    assert!(!h.s.has_events(), "only lent data: nothing queued");

    let lent = read(
        &mut h,
        &frames(&[r#"{"e":"trade","t":3}"#, r#"{"result":null,"id":1}"#]),
    );
    assert_eq!(lent, 1);
    assert!(h.s.has_events(), "the answer to SUBSCRIBE is queued");
    assert!(matches!(
        h.s.poll_event(),
        Some(StreamEvent::Subscribed { .. })
    ));
    assert!(!h.s.has_events(), "and nothing behind it");
}

#[test]
fn nothing_read_after_stop_is_delivered_lent_or_queued() {
    for lending in [true, false] {
        let mut h = binance();
        lend(&mut h, &frames(&[r#"{"e":"trade","t":1}"#]));
        let (lent, _) = lend(&mut h, &frames(&[r#"{"e":"trade","t":2}"#]));
        assert_eq!(lent.len(), 1, "the fast path is open before the stop");
        let received = h.s.stats_handle().snapshot(h.now).messages_received;
        h.s.stop(h.now);
        h.pump();
        assert!(
            h.take_events()
                .iter()
                .all(|e| !matches!(e, StreamEvent::Data { .. })),
            "nothing was waiting"
        );
        // Data with an answer among it, sent before the server saw our Close; then its Close.
        let mut wire = frames(&[
            r#"{"e":"trade","t":3}"#,
            r#"{"result":null,"id":1}"#,
            r#"{"e":"trade","t":4}"#,
        ]);
        wire.extend(server_frame(true, 8, &1000u16.to_be_bytes()));
        let (lent, events) = if lending {
            lend(&mut h, &wire)
        } else {
            h.s.read_buf()[..wire.len()].copy_from_slice(&wire);
            h.s.handle_read(wire.len(), h.now);
            h.pump();
            (Vec::new(), h.take_events())
        };
        assert!(lent.is_empty(), "lent after stop: {lent:?}");
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, StreamEvent::Data { .. } | StreamEvent::Subscribed { .. })),
            "delivered after stop: {events:?}"
        );
        assert!(
            matches!(h.s.state(), StreamState::Closed { .. }),
            "the peer's Close still ends it: {:?}",
            h.s.state()
        );
        assert_eq!(
            h.s.stats_handle().snapshot(h.now).messages_received,
            received,
            "dropped messages are not counted as received"
        );
    }
}

/// A handler that keeps what it is given: the payloads lent, and the other events.
#[derive(Default)]
struct Kept {
    lent: Vec<String>,
    events: Vec<StreamEvent>,
}

impl DataHandler for Kept {
    fn on_data(&mut self, data: DataRef<'_>) {
        self.lent
            .push(String::from_utf8(data.payload.to_vec()).expect("utf8"));
    }
    fn on_event(&mut self, event: StreamEvent) {
        self.events.push(event);
    }
}

/// A [`Kept`] the test still sees after boxing the handler.
struct SharedKept(Rc<RefCell<Kept>>);

impl DataHandler for SharedKept {
    fn on_data(&mut self, data: DataRef<'_>) {
        self.0.borrow_mut().on_data(data);
    }
    fn on_event(&mut self, event: StreamEvent) {
        self.0.borrow_mut().on_event(event);
    }
}

#[test]
/// `handle_read_lending` is the adapters' read: lent to the handler when there is one,
/// queued as events without.
fn handle_read_lending_lends_to_a_handler_and_queues_without_one() {
    let mut h = binance();
    lend(&mut h, &frames(&[r#"{"e":"trade","t":1}"#]));
    let read = |h: &mut Harness, text: &str, handler: Option<&mut Kept>| {
        let bytes = frames(&[text]);
        h.s.read_buf()[..bytes.len()].copy_from_slice(&bytes);
        h.s.handle_read_lending(bytes.len(), h.now, handler);
    };
    let mut kept = Kept::default();
    read(&mut h, r#"{"e":"trade","t":2}"#, Some(&mut kept));
    assert_eq!(kept.lent, [r#"{"e":"trade","t":2}"#]);
    assert!(!h.s.has_events());
    read(&mut h, r#"{"e":"trade","t":3}"#, None::<&mut Kept>);
    assert_eq!(kept.lent.len(), 1);
    let queued = h.s.poll_event().expect("queued");
    assert_eq!(data_payload(&queued), Some(&br#"{"e":"trade","t":3}"#[..]));
    kept.deliver(queued);
    assert_eq!(kept.lent[1], r#"{"e":"trade","t":3}"#);
    assert!(kept.events.is_empty());

    // A boxed handler (what an adapter holding handlers of several types keeps) forwards
    // data, events and deliveries to the handler inside.
    let shared = Rc::new(RefCell::new(Kept::default()));
    let mut boxed: Box<dyn DataHandler> = Box::new(SharedKept(Rc::clone(&shared)));
    let bytes = frames(&[r#"{"e":"trade","t":4}"#]);
    h.s.read_buf()[..bytes.len()].copy_from_slice(&bytes);
    h.s.handle_read_lending(bytes.len(), h.now, Some(&mut boxed));
    boxed.on_event(StreamEvent::Resubscribed { count: 1 });
    boxed.deliver(StreamEvent::Data {
        payload: bytes::Bytes::from_static(b"{}"),
        heartbeat: false,
        received: h.now,
    });
    let inner = shared.borrow();
    assert_eq!(inner.lent, [r#"{"e":"trade","t":4}"#, "{}"]);
    assert_eq!(inner.events, [StreamEvent::Resubscribed { count: 1 }]);
}

#[test]
/// A quiet stream's read buffer can be given back between reads, but not while a frame is
/// half received (its bytes live there) nor when the stream has no connection; whether it
/// was is the call's answer, and the statistics show it at once.
fn a_streams_read_buffer_is_released_only_between_whole_frames() {
    let mut h = binance();
    let stats = h.s.stats_handle();
    let frame = frames(&[r#"{"e":"trade","t":1}"#]);
    let read = |h: &mut Harness, bytes: &[u8]| {
        h.s.read_buf()[..bytes.len()].copy_from_slice(bytes);
        h.s.handle_read(bytes.len(), h.now);
    };
    read(&mut h, &frame[..5]);
    assert!(!h.s.release_read_buffer(h.now), "half a frame held");
    assert!(stats.snapshot(h.now).read_buffer_bytes > 0);
    read(&mut h, &frame[5..]);
    assert!(h.s.release_read_buffer(h.now));
    assert_eq!(stats.snapshot(h.now).read_buffer_bytes, 0);
    assert!(!h.s.release_read_buffer(h.now), "nothing left to release");
    h.s.crash("gone", h.now);
    assert!(!h.s.release_read_buffer(h.now), "no connection");
}

/// The fast lane lends text only once its UTF-8 checks out, in every vector width the lane
/// can run compiled for (each a build of its own): messages of lengths around the checks'
/// vectors and strides, valid (ASCII, or with a `€`) and then one that is not — lent up to
/// it, never it.
#[test]
fn the_lane_lends_only_valid_text_in_every_vector_width() {
    use feedwire_core::{limit_vector_width, VectorWidth};
    for cap in LANE_WIDTHS {
        let width = limit_vector_width(cap);
        for len in LANE_LENGTHS {
            let mut h = binance();
            // The first data message takes the general path.
            lend(&mut h, &frames(&[r#"{"e":"trade","t":0}"#]));
            let ascii = format!(r#"{{"e":"trade","p":"{}"}}"#, "1".repeat(len));
            let euro = ascii.replacen('1', "€", 1);
            let mut bytes = frames(&[&ascii, &euro]);
            let mut invalid = ascii.clone().into_bytes();
            let at = invalid.len() - 3;
            invalid[at] = 0xFF;
            bytes.extend_from_slice(&server_frame(true, 1, &invalid));
            bytes.extend_from_slice(&frames(&[&ascii]));
            // Whole reads of filler until one read can hold all of it (reads ramp up from
            // 1 KiB), so that every frame is in the lane's read.
            while h.s.read_buf().len() < bytes.len() {
                let n = h.s.read_buf().len();
                lend(&mut h, &filler_frame(n));
            }
            let (lent, _) = lend(&mut h, &bytes);
            let lent: Vec<&str> = lent.iter().map(|(p, _)| p.as_str()).collect();
            assert_eq!(lent, [&ascii, &euro], "{width:?}, {len} bytes");
        }
    }
    limit_vector_width(VectorWidth::Bits512);
}
