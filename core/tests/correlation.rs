//! Request/response correlation: answers carry the request's tag, unmatched responses are
//! unsolicited, deadlines fire exactly once, ids never confused after wrap-around or reuse.

use std::time::{Duration, Instant};

use bytes::Bytes;
use feedwire_core::{
    CorrelationError, IdStyle, RequestId, ResponseId, Routed, Router, RouterConfig,
};

const SEED: [u8; 32] = [5; 32];

fn response(id: &RequestId) -> Bytes {
    let mut s = String::from(r#"{"result":null,"id":"#);
    id.write_json(&mut s);
    s.push('}');
    Bytes::from(s)
}

#[test]
fn answer_carries_the_tag_and_ends_the_request() {
    let mut r = Router::new(RouterConfig::binance_stream(), SEED);
    let now = Instant::now();
    let (id1, h1) = r.register("sub btc", now).unwrap();
    let (id2, _) = r.register("sub eth", now).unwrap();
    assert_eq!(
        (id1.clone(), id2.clone()),
        (RequestId::Int(1), RequestId::Int(2)),
        "increasing integers"
    );
    let routed = r.route(response(&id1));
    assert!(
        matches!(routed, Routed::Answer { tag: "sub btc", handle, is_error: false, .. } if handle == h1)
    );
    // The same id again is no longer pending.
    assert!(matches!(
        r.route(response(&id1)),
        Routed::Unsolicited {
            id: Some(ResponseId::Int(1)),
            ..
        }
    ));
    assert_eq!(r.pending(), 1);
}

#[test]
fn data_is_data_even_while_requests_pend() {
    let mut r = Router::new(RouterConfig::binance_stream(), SEED);
    r.register((), Instant::now()).unwrap();
    let msg = Bytes::from_static(br#"{"stream":"a","data":{"id":1,"result":null}}"#);
    assert_eq!(
        r.route(msg.clone()),
        Routed::Data {
            payload: msg,
            heartbeat: false,
            shutdown: false,
            extracted: [None, None, None],
        }
    );
    assert_eq!(r.pending(), 1);
    let binary = Bytes::from_static(br#"{"result":null,"id":1}"#);
    assert!(matches!(r.route_binary(binary), Routed::Data { .. }));
}

#[test]
fn timeout_fires_exactly_once_and_a_late_answer_is_unsolicited() {
    let mut r = Router::new(
        RouterConfig {
            request_timeout: Duration::from_secs(2),
            ..RouterConfig::binance_stream()
        },
        SEED,
    );
    let t0 = Instant::now();
    let (id, handle) = r.register("req", t0).unwrap();
    assert_eq!(r.poll_timeout(), Some(t0 + Duration::from_secs(2)));
    r.handle_timeout(t0 + Duration::from_millis(1999));
    assert_eq!(r.poll_timed_out(), None);
    r.handle_timeout(t0 + Duration::from_secs(2));
    let t = r.poll_timed_out().unwrap();
    assert_eq!((t.handle, t.id.clone(), t.tag), (handle, id.clone(), "req"));
    r.handle_timeout(t0 + Duration::from_secs(60));
    assert_eq!(r.poll_timed_out(), None, "exactly once");
    assert_eq!(r.poll_timeout(), None);
    assert!(matches!(r.route(response(&id)), Routed::Unsolicited { .. }));
}

#[test]
fn answered_requests_leave_no_deadline_behind() {
    let mut r = Router::new(RouterConfig::binance_stream(), SEED);
    let t0 = Instant::now();
    let (id, _) = r.register(1, t0).unwrap();
    let (_, _) = r.register(2, t0 + Duration::from_secs(1)).unwrap();
    r.route(response(&id));
    assert_eq!(r.poll_timeout(), Some(t0 + Duration::from_secs(11)));
}

#[test]
fn ids_wrap_around_and_skip_ids_still_pending() {
    let config = RouterConfig {
        id_style: IdStyle::Counter { wrap_after: 3 },
        ..RouterConfig::binance_stream()
    };
    let mut r = Router::new(config, SEED);
    let now = Instant::now();
    let (a, _) = r.register('a', now).unwrap();
    let (b, _) = r.register('b', now).unwrap();
    let (c, _) = r.register('c', now).unwrap();
    assert_eq!(
        [a.clone(), b.clone(), c],
        [RequestId::Int(1), RequestId::Int(2), RequestId::Int(3)]
    );
    r.route(response(&b)); // 2 answered; 1 and 3 pending
    let (d, _) = r.register('d', now).unwrap();
    assert_eq!(d, RequestId::Int(2), "wrapped, skipping pending 1");
    // A response for id 2 now belongs to 'd', not the old 'b'.
    assert!(matches!(
        r.route(response(&d)),
        Routed::Answer { tag: 'd', .. }
    ));
}

#[test]
fn exhausted_id_range_is_a_typed_error_not_a_hang() {
    let config = RouterConfig {
        id_style: IdStyle::Counter { wrap_after: 2 },
        ..RouterConfig::binance_stream()
    };
    let mut r = Router::new(config, SEED);
    let now = Instant::now();
    r.register((), now).unwrap();
    r.register((), now).unwrap();
    assert_eq!(
        r.register((), now).unwrap_err(),
        CorrelationError::IdsExhausted
    );
}

#[test]
fn stale_handles_do_not_cancel_a_reused_slot() {
    let mut r = Router::new(RouterConfig::binance_stream(), SEED);
    let now = Instant::now();
    let (id, old) = r.register("old", now).unwrap();
    r.route(response(&id));
    let (_, new) = r.register("new", now).unwrap();
    assert_ne!(old, new);
    assert_eq!(r.cancel(old), None);
    assert_eq!(r.pending(), 1);
    assert_eq!(r.cancel(new), Some("new"));
    assert_eq!(r.cancel(new), None);
}

#[test]
fn full_table_is_a_typed_error() {
    let mut r = Router::new(
        RouterConfig {
            max_pending: 2,
            ..RouterConfig::binance_stream()
        },
        SEED,
    );
    let now = Instant::now();
    r.register((), now).unwrap();
    r.register((), now).unwrap();
    assert_eq!(
        r.register((), now).unwrap_err(),
        CorrelationError::Full { capacity: 2 }
    );
    assert_eq!(r.pending(), 2);
}

#[test]
fn uuid_ids_are_v4_and_matched_as_strings() {
    let mut r = Router::new(RouterConfig::binance_ws_api(), SEED);
    let now = Instant::now();
    let (id, _) = r.register("time", now).unwrap();
    let RequestId::Str(text) = &id else {
        panic!("{id:?}")
    };
    assert_eq!(text.len(), 36);
    assert_eq!(text.as_bytes()[14], b'4', "version 4: {text}");
    let (other, _) = r.register("other", now).unwrap();
    assert_ne!(id, other);
    let msg = Bytes::from(format!(r#"{{"id":"{text}","status":200,"result":{{}}}}"#));
    assert!(matches!(
        r.route(msg),
        Routed::Answer {
            tag: "time",
            is_error: false,
            ..
        }
    ));
}

/// Every stream holds a router: routers built from equal rules, each from a configuration of
/// its own, share one compiled classifier (a thousand Binance streams, one copy of the tables).
#[test]
fn routers_of_equal_rules_share_their_compiled_classifier() {
    let a: Router<()> = Router::new(RouterConfig::binance_stream(), SEED);
    let b: Router<()> = Router::new(RouterConfig::binance_stream(), [6; 32]);
    let api: Router<()> = Router::new(RouterConfig::binance_ws_api(), SEED);
    assert!(a.classifier().shares_tables_with(b.classifier()));
    assert!(!a.classifier().shares_tables_with(api.classifier()));
}
