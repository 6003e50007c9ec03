//! The stream's calls made at the wrong moment, and the batch hand-over of its events.

mod common;

use std::collections::VecDeque;
use std::time::Instant;

use common::harness::Harness;
use feedwire_core::{Stream, StreamConfig, StreamError, StreamEvent};

const URL: &str = "ws://127.0.0.1:9443/ws";

#[test]
/// Sends and requests need an open connection: before it opens the answer is `NotOpen`
/// (worth retrying once it does); once the stream ended, `Ended` (it never will).
fn calls_needing_an_open_connection_say_why_they_cannot_go() {
    let mut h = Harness::new(StreamConfig::binance_stream(URL));
    h.connect();
    assert_eq!(h.s.send_text("x"), Err(StreamError::NotOpen));
    assert_eq!(h.s.send_binary(b"x"), Err(StreamError::NotOpen));
    assert_eq!(h.s.list_subscriptions(h.now), Err(StreamError::NotOpen));
    h.s.crash("done", h.now);
    assert_eq!(h.s.send_text("x"), Err(StreamError::Ended));
    assert_eq!(h.s.list_subscriptions(h.now), Err(StreamError::Ended));

    let mut api = Harness::new(StreamConfig::binance_ws_api(URL));
    assert_eq!(
        api.s.request("time", None, api.now),
        Err(StreamError::NotOpen)
    );
    api.open_ws();
    assert!(api.s.request("time", None, api.now).is_ok());
    api.s.crash("done", api.now);
    assert_eq!(
        api.s.request("time", None, api.now),
        Err(StreamError::Ended)
    );
}

#[test]
/// `drain_events_into` hands over every queued event in order — by swapping queues into an
/// empty one, by appending to one that holds events already — and leaves none behind.
fn drained_events_arrive_in_order_into_empty_and_filled_queues() {
    let now = Instant::now();
    let mut s = Stream::new(StreamConfig::binance_stream(URL), [7; 32], now).expect("valid");
    let mut out = VecDeque::new();
    s.drain_events_into(&mut out);
    assert!(matches!(
        out.make_contiguous(),
        [StreamEvent::Connecting { attempt: 1 }]
    ));
    assert!(!s.has_events());
    s.handle_connected(now);
    s.crash("done", now);
    s.drain_events_into(&mut out);
    let evs: Vec<_> = out.into_iter().collect();
    assert!(
        matches!(
            &evs[..],
            [
                StreamEvent::Connecting { attempt: 1 },
                StreamEvent::Crashed(_)
            ]
        ),
        "{evs:?}"
    );
    assert_eq!(s.poll_event(), None);
}
