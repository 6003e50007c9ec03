//! The bytes an end's reason carries (a peer's close reason, a fatal response, a Betfair
//! refusal) are the reason's own: applications keep the last reason of each stream, and a
//! slice of the read block would keep the whole block (up to twice `max_read_size`) alive
//! with it — for a thousand streams, hundreds of MiB for a few KB of reasons.

mod common;

use bytes::Bytes;
use common::harness::Harness;
use feedwire_core::testing::server_frame;
use feedwire_core::{BetfairAuth, EndReason, StreamConfig, StreamEvent};

/// Once nothing else holds them, `bytes` hold no more memory than their length.
fn assert_own(bytes: Bytes, what: &str) {
    let len = bytes.len();
    let held = bytes
        .try_into_mut()
        .unwrap_or_else(|_| panic!("{what}: still shared"))
        .capacity();
    assert!(held <= len + 64, "{what}: {len} bytes hold {held}");
}

/// An open stream that read `lots` of data first, so its read block is large.
fn busy_stream() -> Harness {
    let mut h = Harness::new(StreamConfig::binance_stream("ws://127.0.0.1:9443/ws"));
    h.open_ws();
    let data = server_frame(true, 1, &[b'x'; 4000]);
    h.feed(&data.repeat(16));
    h.take_events();
    h
}

#[test]
fn a_peer_close_reason_is_its_own_copy() {
    let mut h = busy_stream();
    let mut close = 1001u16.to_be_bytes().to_vec();
    close.extend_from_slice(b"going away for maintenance");
    h.feed(&server_frame(true, 8, &close));
    let reason = h
        .take_events()
        .into_iter()
        .find_map(|e| match e {
            StreamEvent::Reconnecting {
                reason: EndReason::ClosedByPeer { reason, .. },
                ..
            } => Some(reason),
            _ => None,
        })
        .expect("a reconnect for the close");
    assert_eq!(reason, &b"going away for maintenance"[..]);
    drop(h);
    assert_own(reason, "close reason");
}

#[test]
fn a_fatal_response_is_its_own_copy() {
    let mut h = Harness::new(StreamConfig::binance_stream("ws://127.0.0.1:9443/ws"));
    h.s.subscribe(&["nosuch@stream"], h.now).unwrap();
    h.open_ws();
    h.feed(&server_frame(true, 1, &[b'x'; 4000]).repeat(4));
    h.feed_text(r#"{"error":{"code":2,"msg":"Invalid request"},"id":1}"#);
    let response = h
        .take_events()
        .into_iter()
        .find_map(|e| match e {
            StreamEvent::Crashed(EndReason::FatalResponse(p)) => Some(p),
            _ => None,
        })
        .expect("crashed");
    drop(h);
    assert_own(response, "fatal response");
}

#[test]
fn a_betfair_refusal_is_its_own_copy() {
    let auth = BetfairAuth {
        app_key: "appkey".into(),
        session: "token".into(),
    };
    let mut h = Harness::new(StreamConfig::betfair("tls://127.0.0.1:4443", auth));
    h.connect();
    h.feed_line(r#"{"op":"connection","connectionId":"002-1"}"#);
    h.feed_line(&format!(
        r#"{{"op":"status","id":1,"statusCode":"FAILURE","errorCode":"TOO_MANY_REQUESTS","pad":"{}"}}"#,
        "x".repeat(3000)
    ));
    let refusal = h
        .take_events()
        .into_iter()
        .find_map(|e| match e {
            StreamEvent::Reconnecting {
                reason: EndReason::RefusedForNow(r),
                ..
            } => Some(r),
            _ => None,
        })
        .expect("refused for now");
    drop(h);
    assert_own(refusal, "refusal");
}
