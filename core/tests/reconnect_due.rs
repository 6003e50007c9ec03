//! `PlannedReconnect::Advise`: a connection to be replaced (the server's shutdown notice, the
//! connection's age) is reported and kept, delivering, for the application to connect anew
//! first; replaced by the stream itself when the grace ends or the connection goes before.

mod common;

use std::time::Duration;

use common::harness::Harness;
use feedwire_core::testing::server_frame;
use feedwire_core::{
    CloseInitiator, EndReason, PlannedReconnect, StreamConfig, StreamEvent, StreamState,
    TransportCommand,
};

const GRACE: Duration = Duration::from_secs(300);
const NOTICE: &str = r#"{"stream":"!serverShutdown","data":{"e":"serverShutdown","E":1}}"#;

fn advising() -> StreamConfig {
    let mut c = StreamConfig::binance_stream("ws://127.0.0.1:9443/stream");
    c.reconnect.planned = PlannedReconnect::Advise { grace: GRACE };
    c
}

/// Open and subscribed, every event and command so far taken.
fn subscribed(config: StreamConfig) -> Harness {
    let mut h = Harness::new(config);
    h.s.subscribe(&["btcusdt@aggTrade"], h.now).unwrap();
    h.open_ws();
    h.feed_text(r#"{"result":null,"id":1}"#);
    h.feed_text(r#"{"e":"first"}"#);
    h.take_events();
    h.take_commands();
    h.sent.clear();
    h
}

/// Moves time on by `d` in one-second steps, a message each, so that only the deadline
/// under test can end the connection.
fn busy_for(h: &mut Harness, d: Duration) {
    let end = h.now + d;
    while h.now < end && h.state() == StreamState::Open {
        h.advance(Duration::from_secs(1));
        h.feed_text(r#"{"e":"x"}"#);
    }
}

fn is_data(e: &StreamEvent) -> bool {
    matches!(e, StreamEvent::Data { .. })
}

fn close_echo() -> Vec<u8> {
    server_frame(true, 8, &1000u16.to_be_bytes())
}

fn assert_replaced_at_once(events: &[StreamEvent], why: &EndReason) {
    let reconnecting: Vec<_> = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::Reconnecting { .. }))
        .collect();
    assert!(
        matches!(
            reconnecting.as_slice(),
            [StreamEvent::Reconnecting { reason, planned: true, delay, attempt: 1 }]
                if reason == why && delay.is_zero()
        ),
        "{events:?}"
    );
}

#[test]
fn a_shutdown_notice_is_reported_and_the_connection_kept_until_the_grace_ends() {
    let mut h = subscribed(advising());
    let noticed = h.now;
    h.feed_text(NOTICE);
    let evs = h.take_events();
    let [StreamEvent::Data { .. }, StreamEvent::ReconnectDue { reason, deadline }] = &evs[..]
    else {
        panic!("{evs:?}");
    };
    assert_eq!(
        (reason, *deadline),
        (&EndReason::ServerShutdown, noticed + GRACE)
    );
    assert!(h.sent.is_empty(), "no Close");
    // Still delivering; a second notice is not a second report.
    h.feed_text(r#"{"e":"after"}"#);
    h.feed_text(NOTICE);
    busy_for(&mut h, GRACE - Duration::from_secs(2));
    assert_eq!(h.state(), StreamState::Open);
    assert!(h.take_events().iter().all(is_data));
    assert!(h.take_commands().is_empty());
    busy_for(&mut h, Duration::from_secs(5));
    assert_eq!(h.state(), StreamState::Closing, "replaced at the deadline");
    assert_eq!(h.sent_frames(), vec![(0x8, 1000u16.to_be_bytes().to_vec())]);
    h.feed(&close_echo());
    let evs = h.take_events();
    assert_replaced_at_once(&evs, &EndReason::ServerShutdown);
    assert!(matches!(
        h.take_commands().as_slice(),
        [TransportCommand::Disconnect, TransportCommand::Connect(_)]
    ));
    // The next connection is a new one: its own notice is reported again.
    h.open_ws();
    h.feed_text(r#"{"result":null,"id":2}"#);
    h.take_events();
    h.feed_text(NOTICE);
    assert!(h
        .take_events()
        .iter()
        .any(|e| matches!(e, StreamEvent::ReconnectDue { .. })));
}

#[test]
fn an_advised_connection_the_server_ends_first_is_replaced_at_once() {
    for end in [
        server_frame(true, 8, &1001u16.to_be_bytes()),
        // A protocol violation: a reserved opcode.
        server_frame(true, 3, b""),
    ] {
        let mut h = subscribed(advising());
        h.feed_text(NOTICE);
        h.take_events();
        h.feed(&end);
        if h.s.is_connected() {
            h.s.handle_eof(h.now);
            h.pump();
        }
        assert_replaced_at_once(&h.take_events(), &EndReason::ServerShutdown);
    }
}

#[test]
fn a_stop_after_the_report_ends_the_stream_without_a_reconnect() {
    let mut h = subscribed(advising());
    h.feed_text(NOTICE);
    h.take_events();
    h.s.stop(h.now);
    h.pump();
    assert_eq!(h.sent_frames(), vec![(0x8, 1000u16.to_be_bytes().to_vec())]);
    h.feed(&close_echo());
    assert_eq!(
        h.take_events(),
        vec![StreamEvent::Closed {
            by: CloseInitiator::Local,
            code: 1000
        }]
    );
    h.advance(GRACE * 2);
    assert!(h.take_events().is_empty());
    assert_eq!(
        h.state(),
        StreamState::Closed {
            by: CloseInitiator::Local
        }
    );
}

#[test]
fn the_connections_age_is_reported_with_the_grace_after_it() {
    let mut config = advising();
    config.timeouts.max_lifetime = Some(Duration::from_secs(3600));
    let mut h = subscribed(config);
    busy_for(&mut h, Duration::from_secs(3600));
    let due: Vec<_> = h
        .take_events()
        .into_iter()
        .filter(|e| !is_data(e))
        .collect();
    let [StreamEvent::ReconnectDue {
        reason: EndReason::LifetimeReached,
        deadline,
    }] = due.as_slice()
    else {
        panic!("{due:?}");
    };
    assert_eq!(h.state(), StreamState::Open);
    // A notice now changes nothing: the report stands, with its deadline.
    h.feed_text(NOTICE);
    assert!(h.take_events().iter().all(is_data));
    let left = *deadline - h.now;
    busy_for(&mut h, left - Duration::from_secs(1));
    assert_eq!(h.state(), StreamState::Open);
    busy_for(&mut h, Duration::from_secs(2));
    assert_eq!(h.state(), StreamState::Closing);
    h.feed(&close_echo());
    assert_replaced_at_once(&h.take_events(), &EndReason::LifetimeReached);
}

/// The grace ends while the transport holds reads for the application: the replacement
/// waits for reads to go on, as a planned reconnect for age does.
#[test]
fn the_deadline_waits_for_held_reads() {
    let mut h = subscribed(advising());
    h.feed_text(NOTICE);
    busy_for(&mut h, GRACE - Duration::from_secs(1));
    for _ in 0..5 {
        h.s.handle_reads_held(h.now);
        h.advance(Duration::from_secs(1));
    }
    assert_eq!(
        h.state(),
        StreamState::Open,
        "no Close while reads are held"
    );
    h.feed_text(r#"{"e":"y"}"#);
    h.advance(Duration::from_secs(1));
    assert_eq!(h.state(), StreamState::Closing);
}

/// The default closes at the notice, with no report first.
#[test]
fn the_default_replaces_the_connection_without_a_report() {
    let mut h = subscribed(StreamConfig::binance_stream("ws://127.0.0.1:9443/stream"));
    h.feed_text(NOTICE);
    assert_eq!(h.state(), StreamState::Closing);
    assert!(!h
        .take_events()
        .iter()
        .any(|e| matches!(e, StreamEvent::ReconnectDue { .. })));
}
