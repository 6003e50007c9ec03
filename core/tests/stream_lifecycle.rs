//! The stream state machine in virtual time against a scripted peer: open, subscribe,
//! deliver, stall detection, reconnect with resubscription, stop and crash.

mod common;

use std::time::Duration;

use bytes::Bytes;

use common::harness::{reconnect_reason, Harness};
use feedwire_core::testing::server_frame;
use feedwire_core::{
    CloseInitiator, ConfigError, ConnectBudget, EndReason, Error, HandshakeError, LineError,
    RequestId, RequestKind, Stream, StreamConfig, StreamError, StreamEvent, StreamState, Timeouts,
    TransportCommand, MAX_EXTRACT_KEYS,
};

const URL: &str = "ws://127.0.0.1:9443/ws";

fn binance() -> StreamConfig {
    StreamConfig::binance_stream(URL)
}

fn open(config: StreamConfig) -> Harness {
    let mut h = Harness::new(config);
    assert!(
        matches!(h.take_commands().as_slice(), [TransportCommand::Connect(e)] if e.port == 9443)
    );
    h.open_ws();
    h
}

/// An open Binance WebSocket API stream, its opening events taken.
fn open_ws_api() -> Harness {
    let mut h = open(StreamConfig::binance_ws_api(
        "ws://127.0.0.1:9443/ws-api/v3",
    ));
    h.take_events();
    h
}

fn subscribed_stream() -> Harness {
    let mut h = Harness::new(binance());
    h.s.subscribe(&["btcusdt@aggTrade", "ethusdt@aggTrade"], h.now)
        .unwrap();
    h.open_ws();
    assert_eq!(
        h.sent_texts(),
        vec![r#"{"method":"SUBSCRIBE","params":["btcusdt@aggTrade","ethusdt@aggTrade"],"id":1}"#]
    );
    h.feed_text(r#"{"result":null,"id":1}"#);
    h
}

#[test]
fn opens_subscribes_and_delivers_data() {
    let mut h = subscribed_stream();
    h.feed_text(r#"{"e":"aggTrade","s":"BTCUSDT","p":"1.0"}"#);
    let evs = h.take_events();
    assert_eq!(evs[0], StreamEvent::Connecting { attempt: 1 });
    assert_eq!(evs[1], StreamEvent::Opened { reconnected: false });
    assert_eq!(
        evs[2],
        StreamEvent::Subscribed {
            streams: vec!["btcusdt@aggTrade".into(), "ethusdt@aggTrade".into()],
            id: RequestId::Int(1)
        }
    );
    assert!(
        matches!(&evs[3], StreamEvent::Data { payload, heartbeat: false, received } if payload.starts_with(b"{\"e\":\"aggTrade\"") && *received == h.now)
    );
    assert_eq!(h.state(), StreamState::Open);
}

#[test]
fn statistics_are_exact_after_a_scripted_run() {
    let mut h = subscribed_stream();
    let msgs = [
        r#"{"e":"a","x":1}"#,
        r#"{"e":"b","x":22}"#,
        r#"{"e":"c","x":333}"#,
    ];
    for m in msgs {
        h.feed_text(m);
    }
    let snap = h.s.stats_handle().snapshot(h.now);
    let data_bytes: usize =
        msgs.iter().map(|m| m.len()).sum::<usize>() + r#"{"result":null,"id":1}"#.len();
    assert_eq!(snap.messages_received, 4, "3 data + 1 response");
    assert_eq!(
        snap.bytes_received, data_bytes as u64,
        "payload bytes, not frame bytes"
    );
    assert_eq!(snap.responses, 1);
    assert_eq!(snap.messages_sent, 1);
    assert_eq!(
        snap.bytes_sent,
        r#"{"method":"SUBSCRIBE","params":["btcusdt@aggTrade","ethusdt@aggTrade"],"id":1}"#.len()
            as u64
    );
    assert_eq!(snap.subscriptions, 2);
    assert_eq!(snap.reconnects, 0);
    assert_eq!(snap.state, 2);
    assert_eq!(snap.last_receive, Some(h.now));
    // Rates count complete seconds only.
    h.advance(Duration::from_secs(1));
    h.feed_text(r#"{"e":"d"}"#);
    let snap = h.s.stats_handle().snapshot(h.now);
    assert!(
        snap.messages_per_sec > 0.0 && snap.bytes_per_sec > 0.0,
        "{snap:?}"
    );
    // The feed goes quiet: nothing wakes the stream, and the rates still fall, a second at a
    // time, to zero once the window holds only quiet seconds.
    let stats = h.s.stats_handle();
    let busy = stats
        .snapshot(h.now + Duration::from_secs(1))
        .messages_per_sec;
    let later = stats
        .snapshot(h.now + Duration::from_secs(3))
        .messages_per_sec;
    assert!(0.0 < later && later < busy, "{busy} then {later}");
    let quiet = stats.snapshot(h.now + Duration::from_secs(6));
    assert_eq!((quiet.messages_per_sec, quiet.bytes_per_sec), (0.0, 0.0));
    assert_eq!(quiet.messages_received, snap.messages_received);
}

/// A stream dropped before it ended (its driver's future dropped, its runtime shut down) reads
/// closed in its statistics, and one dropped while unwinding from a panic (a handler's bug)
/// crashed — not "open" for good with rates falling to zero, as if the market were quiet.
/// One that ended keeps its own end.
#[test]
fn a_stream_dropped_before_it_ended_says_so_in_its_statistics() {
    let h = subscribed_stream();
    let stats = h.s.stats_handle();
    assert_eq!(stats.snapshot(h.now).state, 2);
    let now = h.now;
    drop(h);
    assert_eq!(stats.snapshot(now).state, 5, "closed");

    let h = subscribed_stream();
    let stats = h.s.stats_handle();
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _owned = h;
        panic!("a handler's bug");
    }));
    assert!(unwound.is_err());
    assert_eq!(stats.snapshot(now).state, 6, "crashed");

    let mut h = subscribed_stream();
    let stats = h.s.stats_handle();
    h.s.crash("given up", h.now);
    h.pump();
    drop(h);
    assert_eq!(stats.snapshot(now).state, 6, "its own end");
}

#[test]
fn first_data_timeout_reconnects_a_silent_subscription() {
    let mut h = subscribed_stream();
    h.take_events();
    h.take_commands();
    h.advance(Duration::from_secs(29));
    assert_eq!(h.state(), StreamState::Open, "not yet");
    h.advance(Duration::from_secs(1));
    let evs = h.take_events();
    assert!(
        matches!(
            &evs[..],
            [StreamEvent::Reconnecting {
                attempt: 2,
                reason: EndReason::FirstDataTimeout,
                planned: false,
                ..
            }]
        ),
        "{evs:?}"
    );
    assert_eq!(h.take_commands(), vec![TransportCommand::Disconnect]);
}

#[test]
fn first_data_timeout_does_not_fire_once_data_flows() {
    let mut h = subscribed_stream();
    h.feed_text(r#"{"e":"x"}"#);
    h.take_events();
    for _ in 0..10 {
        h.advance(Duration::from_secs(10));
        h.feed_text(r#"{"e":"x"}"#);
    }
    assert_eq!(h.state(), StreamState::Open);
    assert!(!h
        .take_events()
        .iter()
        .any(|e| matches!(e, StreamEvent::Reconnecting { .. })));
}

/// A quiet subscription (an illiquid symbol's trades, liquidations): the first-data timeout
/// reconnects once; a second silent connection with the same subscriptions stays open, the
/// idle probe answered. Reconnecting every 30 s kept such a stream down 28% of the time (14
/// reconnects in 10 minutes, each spending Binance's connection budget). Data, or a new
/// subscription, arms the timer again.
#[test]
fn first_data_timeout_reconnects_a_silent_subscription_once() {
    let mut h = subscribed_stream();
    let reconnects = |h: &mut Harness| {
        h.take_events()
            .into_iter()
            .filter_map(|e| match e {
                StreamEvent::Reconnecting { reason, delay, .. } => Some((reason, delay)),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    // Reconnects to the same subscriptions, answered; pings answered.
    let reopen = |h: &mut Harness, delay: Duration| {
        h.advance(delay);
        h.take_commands();
        h.open_ws();
        let sent = h.sent_texts();
        assert_eq!(sent.len(), 1, "the resubscription: {sent:?}");
        let id = sent[0].rsplit_once(":").unwrap().1.trim_end_matches('}');
        h.feed_text(&format!(r#"{{"result":null,"id":{id}}}"#));
    };
    let quiet_for = |h: &mut Harness, d: Duration| {
        let end = h.now + d;
        while h.now < end {
            h.advance(Duration::from_secs(1));
            for (op, payload) in h.sent_frames() {
                if op == 0x9 {
                    h.feed(&server_frame(true, 0xA, &payload));
                }
            }
        }
    };
    quiet_for(&mut h, Duration::from_secs(30));
    let [(EndReason::FirstDataTimeout, delay)] = reconnects(&mut h)[..] else {
        panic!("one first-data reconnect")
    };
    reopen(&mut h, delay);
    quiet_for(&mut h, Duration::from_secs(600));
    assert_eq!(reconnects(&mut h), [], "quiet, not dead");
    assert_eq!(h.state(), StreamState::Open);

    // A new subscription gets its own wait.
    h.s.subscribe(&["xrpusdt@aggTrade"], h.now).unwrap();
    h.pump();
    h.sent_texts();
    h.feed_text(r#"{"result":null,"id":3}"#);
    quiet_for(&mut h, Duration::from_secs(30));
    let [(EndReason::FirstDataTimeout, delay)] = reconnects(&mut h)[..] else {
        panic!("one first-data reconnect after the new subscription")
    };
    reopen(&mut h, delay);
    quiet_for(&mut h, Duration::from_secs(120));
    assert_eq!(reconnects(&mut h), []);

    // Data re-arms it for later connections.
    h.feed_text(r#"{"e":"x"}"#);
    h.s.handle_eof(h.now);
    h.pump();
    let [(_, delay)] = reconnects(&mut h)[..] else {
        panic!("a reconnect after the end of stream")
    };
    reopen(&mut h, delay);
    quiet_for(&mut h, Duration::from_secs(30));
    assert!(
        matches!(reconnects(&mut h)[..], [(EndReason::FirstDataTimeout, _)]),
        "armed again"
    );
}

#[test]
fn idle_stream_is_probed_then_declared_dead() {
    let mut h = subscribed_stream();
    h.feed_text(r#"{"e":"x"}"#);
    h.sent.clear();
    h.advance(Duration::from_secs(30));
    assert_eq!(
        h.sent_frames(),
        vec![(0x9, b"feedwire".to_vec())],
        "ping after 30 s without bytes"
    );
    assert_eq!(h.state(), StreamState::Open);
    // Dead `probe_answer` (10 s) after the probe, not as long again as the idle timeout: a
    // dropped connection is found 40 s after its last byte, not 60.
    h.advance(Duration::from_millis(9_999));
    assert_eq!(h.state(), StreamState::Open);
    h.advance(Duration::from_millis(1));
    let evs = h.take_events();
    assert!(
        evs.iter().any(|e| matches!(
            e,
            StreamEvent::Reconnecting {
                reason: EndReason::IdleTimeout,
                ..
            }
        )),
        "{evs:?}"
    );
}

/// Reads held back for the application (its events not taken) count as input: no probe, no
/// "stalled" however long the hold; once reads go on, silence is measured from the last hold.
#[test]
fn reads_held_for_the_application_are_not_silence() {
    let mut h = subscribed_stream();
    h.feed_text(r#"{"e":"x"}"#);
    h.sent.clear();
    h.take_events();
    for _ in 0..12 {
        h.s.handle_reads_held(h.now);
        h.advance(Duration::from_secs(10));
    }
    assert!(h.sent_frames().is_empty(), "no probe while reads were held");
    assert!(
        h.take_events().is_empty(),
        "no reconnect while reads were held"
    );
    assert_eq!(h.state(), StreamState::Open);
    // The last hold was 10 s ago: a probe 20 s on, dead 10 s after it.
    h.advance(Duration::from_secs(20));
    assert_eq!(h.sent_frames(), vec![(0x9, b"feedwire".to_vec())]);
    h.advance(Duration::from_secs(10));
    assert!(h.take_events().iter().any(|e| matches!(
        e,
        StreamEvent::Reconnecting {
            reason: EndReason::IdleTimeout,
            ..
        }
    )));
}

#[test]
fn the_idle_probe_counts_from_the_last_read_not_from_the_open() {
    let mut h = subscribed_stream();
    h.feed_text(r#"{"e":"x"}"#);
    h.advance(Duration::from_secs(20));
    h.feed_text(r#"{"e":"y"}"#);
    let last_read = h.now;
    h.sent.clear();
    // The timer armed at the open fires at 30 s, finds the read at 20 s and waits on.
    h.advance(Duration::from_millis(29_999));
    assert!(
        h.sent_frames().is_empty(),
        "no probe within 30 s of the last read"
    );
    assert_eq!(
        h.s.poll_timeout(),
        Some(last_read + Duration::from_secs(30)),
        "re-armed from the last read"
    );
    h.advance(Duration::from_millis(1));
    assert_eq!(h.sent_frames(), vec![(0x9, b"feedwire".to_vec())]);
    assert_eq!(h.state(), StreamState::Open);
}

#[test]
fn a_stream_read_more_often_than_its_idle_timeout_is_never_probed() {
    let mut h = subscribed_stream();
    h.feed_text(r#"{"e":"x"}"#);
    h.sent.clear();
    for _ in 0..100 {
        h.advance(Duration::from_secs(7));
        h.feed_text(r#"{"e":"x"}"#);
    }
    assert!(
        h.sent_frames().is_empty(),
        "no probe in 700 s of reads 7 s apart"
    );
    assert!(h
        .take_events()
        .iter()
        .all(|e| !matches!(e, StreamEvent::Reconnecting { .. })));
}

#[test]
fn an_answered_probe_keeps_the_stream() {
    let mut h = subscribed_stream();
    h.feed_text(r#"{"e":"x"}"#);
    h.advance(Duration::from_secs(30));
    h.feed(&server_frame(true, 0xA, b"feedwire"));
    h.advance(Duration::from_secs(29));
    assert_eq!(h.state(), StreamState::Open);
    h.take_events();
    h.advance(Duration::from_secs(1));
    assert!(h.take_events().is_empty(), "a new probe, not a reconnect");
}

#[test]
fn reconnects_with_backoff_and_resubscribes() {
    let mut h = subscribed_stream();
    h.feed_text(r#"{"e":"x"}"#);
    h.s.subscribe(&["bnbusdt@depth"], h.now).unwrap();
    h.feed_text(r#"{"result":null,"id":2}"#);
    h.take_events();
    h.take_commands();
    // Peer goes away.
    h.feed(&server_frame(true, 8, &1001u16.to_be_bytes()));
    let evs = h.take_events();
    let StreamEvent::Reconnecting {
        attempt: 2,
        delay,
        reason,
        planned: false,
    } = &evs[0]
    else {
        panic!("{evs:?}")
    };
    assert!(matches!(reason, EndReason::ClosedByPeer { code: 1001, .. }));
    assert!(
        *delay <= Duration::from_millis(250) && *delay >= Duration::from_millis(125),
        "{delay:?}"
    );
    assert_eq!(h.take_commands(), vec![TransportCommand::Disconnect]);
    h.advance(*delay);
    assert!(matches!(
        h.take_commands().as_slice(),
        [TransportCommand::Connect(_)]
    ));
    h.open_ws();
    let texts = h.sent_texts();
    assert_eq!(
        texts,
        vec![
            r#"{"method":"SUBSCRIBE","params":["bnbusdt@depth","btcusdt@aggTrade","ethusdt@aggTrade"],"id":3}"#
        ]
    );
    let evs = h.take_events();
    assert!(
        evs.contains(&StreamEvent::Opened { reconnected: true }),
        "{evs:?}"
    );
    assert!(
        evs.contains(&StreamEvent::Resubscribed { count: 1 }),
        "{evs:?}"
    );
    assert_eq!(h.s.stats_handle().snapshot(h.now).reconnects, 1);
}

/// Streams a combined-stream URL names are subscribed by every connection to it: the stream
/// counts them as subscribed — `unsubscribe` takes them (it answered `NotSubscribed`),
/// `max_streams` counts them — and after a reconnect unsubscribes again those the
/// application dropped, subscribing only the others it added (none twice).
#[test]
fn streams_named_in_the_url_are_subscribed_ones_across_reconnects() {
    let url = "ws://127.0.0.1:9443/stream?streams=btcusdt@aggTrade/ethusdt@trade";
    let mut h = open(StreamConfig::binance_stream(url));
    assert!(h.sent_texts().is_empty(), "the URL subscribed them");
    assert_eq!(h.s.stats_handle().snapshot(h.now).subscriptions, 2);
    h.s.subscribe(&["bnbusdt@depth", "btcusdt@aggTrade"], h.now)
        .unwrap();
    h.s.unsubscribe(&["ethusdt@trade"], h.now).unwrap();
    h.pump();
    assert_eq!(
        h.sent_texts(),
        vec![
            r#"{"method":"SUBSCRIBE","params":["bnbusdt@depth"],"id":1}"#,
            r#"{"method":"UNSUBSCRIBE","params":["ethusdt@trade"],"id":2}"#,
        ]
    );
    h.feed_text(r#"{"result":null,"id":1}"#);
    h.feed_text(r#"{"result":null,"id":2}"#);
    h.take_events();
    h.take_commands();
    h.feed(&server_frame(true, 8, &1001u16.to_be_bytes()));
    let delay = match h.take_events().as_slice() {
        [StreamEvent::Reconnecting { delay, .. }, ..] => *delay,
        evs => panic!("{evs:?}"),
    };
    h.take_commands();
    h.advance(delay);
    h.take_commands();
    h.open_ws();
    assert_eq!(
        h.sent_texts(),
        vec![
            r#"{"method":"UNSUBSCRIBE","params":["ethusdt@trade"],"id":3}"#,
            r#"{"method":"SUBSCRIBE","params":["bnbusdt@depth"],"id":4}"#,
        ]
    );
    assert_eq!(h.s.stats_handle().snapshot(h.now).subscriptions, 2);
    let evs = h.take_events();
    assert!(
        evs.contains(&StreamEvent::Resubscribed { count: 1 }),
        "the SUBSCRIBE: {evs:?}"
    );

    // Only the URL's streams: a reconnect sends nothing, and has nothing to report.
    let mut h = open(StreamConfig::binance_stream(url));
    h.s.handle_eof(h.now);
    h.pump();
    h.advance(Duration::from_secs(30));
    h.open_ws();
    assert!(h.sent_texts().is_empty());
    let evs = h.take_events();
    assert!(evs.contains(&StreamEvent::Opened { reconnected: true }));
    assert!(
        !evs.iter()
            .any(|e| matches!(e, StreamEvent::Resubscribed { .. })),
        "{evs:?}"
    );

    let mut c = StreamConfig::binance_stream(url);
    c.max_streams = 1;
    assert!(matches!(
        Stream::new(c, [0; 32], std::time::Instant::now()),
        Err(ConfigError::TooMany { max: 1, .. })
    ));
}

#[test]
fn backoff_grows_per_failed_attempt_and_resets_after_a_healthy_connection() {
    let mut h = open(binance());
    h.take_events();
    let mut delays = Vec::new();
    for _ in 0..4 {
        h.s.handle_transport_error("reset", h.now);
        h.pump();
        let evs = h.take_events();
        let Some(StreamEvent::Reconnecting { delay, .. }) = evs.first() else {
            panic!("{evs:?}")
        };
        delays.push(*delay);
        h.advance(*delay);
        h.s.handle_connect_failed("refused", h.now);
        h.pump();
        let evs = h.take_events();
        let Some(StreamEvent::Reconnecting { delay, .. }) = evs
            .iter()
            .find(|e| matches!(e, StreamEvent::Reconnecting { .. }))
        else {
            panic!("{evs:?}")
        };
        delays.push(*delay);
        h.advance(*delay);
        h.open_ws();
        h.take_events();
    }
    // Retries climb within one unhealthy run: the cap doubles per retry (with jitter taking
    // off at most half), so the 6th retry waits more than the 1st could.
    assert!(delays[0] <= Duration::from_millis(250), "{delays:?}");
    assert!(delays[5] > Duration::from_millis(250), "{delays:?}");
    // A connection open for longer than `healthy_after` resets the counter.
    h.advance(Duration::from_secs(20));
    h.feed_text(r#"{"e":"keepalive"}"#);
    h.advance(Duration::from_secs(20));
    h.feed_text(r#"{"e":"keepalive"}"#);
    h.advance(Duration::from_secs(21));
    h.feed_text(r#"{"e":"keepalive"}"#);
    h.s.handle_transport_error("reset", h.now);
    h.pump();
    let evs = h.take_events();
    let Some(StreamEvent::Reconnecting {
        attempt: 2, delay, ..
    }) = evs
        .iter()
        .find(|e| matches!(e, StreamEvent::Reconnecting { .. }))
    else {
        panic!("{evs:?}")
    };
    assert!(
        *delay <= Duration::from_millis(250),
        "first retry again: {delay:?}"
    );
}

#[test]
fn refused_upgrade_is_retried_with_backoff() {
    let mut h = Harness::new(binance());
    h.connect();
    h.feed(b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 0\r\n\r\n");
    let evs = h.take_events();
    assert!(
        evs.iter().any(|e| matches!(
            e,
            StreamEvent::Reconnecting {
                reason: EndReason::WebSocket(Error::Handshake(HandshakeError::Rejected {
                    status: 429,
                    ..
                })),
                ..
            }
        )),
        "{evs:?}"
    );
}

/// Binance answers too many connection attempts with 429 and a `Retry-After` (seconds), and
/// bans the IP (418) of a client that retries sooner: the stream waits at least that long,
/// however short its own backoff.
#[test]
fn a_refusal_with_retry_after_is_not_retried_sooner() {
    let mut h = Harness::new(binance());
    h.take_commands();
    h.connect();
    h.feed(b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\nContent-Length: 0\r\n\r\n");
    let evs = h.take_events();
    let delay = evs
        .iter()
        .find_map(|e| match e {
            StreamEvent::Reconnecting { delay, .. } => Some(*delay),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{evs:?}"));
    assert_eq!(
        delay,
        Duration::from_secs(7),
        "backoff alone would be <= 250 ms"
    );
    h.take_commands();
    h.advance(Duration::from_millis(6_999));
    assert!(h.take_commands().is_empty(), "no attempt before 7 s");
    h.advance(Duration::from_millis(1));
    assert!(matches!(
        h.take_commands().as_slice(),
        [TransportCommand::Connect(_)]
    ));
    // A later refusal without the header backs off as usual.
    h.connect();
    h.feed(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n");
    let evs = h.take_events();
    assert!(
        evs.iter().any(
            |e| matches!(e, StreamEvent::Reconnecting { delay, .. } if *delay < Duration::from_secs(1))
        ),
        "{evs:?}"
    );
}

#[test]
fn connect_timeout_when_the_handshake_never_answers() {
    common::harness::assert_connect_times_out(binance());
}

#[test]
fn fatal_response_crashes_the_stream() {
    let mut h = Harness::new(binance());
    h.s.subscribe(&["nosuch@stream"], h.now).unwrap();
    h.open_ws();
    h.take_events();
    h.take_commands();
    h.feed_text(r#"{"error":{"code":2,"msg":"Invalid request"},"id":1}"#);
    let evs = h.take_events();
    assert!(
        matches!(&evs[..], [StreamEvent::Crashed(EndReason::FatalResponse(p))] if p.starts_with(b"{\"error\"")),
        "{evs:?}"
    );
    assert_eq!(h.take_commands(), vec![TransportCommand::Disconnect]);
    h.advance(Duration::from_secs(3600));
    assert!(h.take_commands().is_empty(), "no reconnect after a crash");
}

#[test]
fn error_response_is_only_reported_when_not_fatal() {
    let mut h = Harness::new(StreamConfig {
        crash_on_error_response: false,
        ..binance()
    });
    h.s.subscribe(&["nosuch@stream"], h.now).unwrap();
    h.open_ws();
    h.take_events();
    h.feed_text(r#"{"error":{"code":2,"msg":"Invalid request"},"id":1}"#);
    let evs = h.take_events();
    assert!(
        matches!(&evs[..], [StreamEvent::Response { is_error: true, .. }]),
        "{evs:?}"
    );
    assert_eq!(h.state(), StreamState::Open);
}

#[test]
/// The WebSocket API wraps its notice as an event: it, too, ends the connection on our terms
/// (a Close now, a new connection at once) instead of being handed on as data until the
/// server drops the connection.
fn ws_api_server_shutdown_event_leads_to_a_planned_reconnect() {
    let mut h = open_ws_api();
    h.take_events();
    h.take_commands();
    h.feed_text(r#"{"event":{"e":"serverShutdown","E":1770123456789}}"#);
    assert_eq!(
        h.sent_frames(),
        vec![(0x8, 1000u16.to_be_bytes().to_vec())],
        "Close sent"
    );
    assert_eq!(h.state(), StreamState::Closing);
    h.feed(&server_frame(true, 8, &1000u16.to_be_bytes()));
    let evs = h.take_events();
    assert!(
        evs.iter().any(|e| matches!(
            e,
            StreamEvent::Reconnecting {
                reason: EndReason::ServerShutdown,
                planned: true,
                ..
            }
        )),
        "{evs:?}"
    );
}

#[test]
fn server_shutdown_notice_leads_to_a_planned_reconnect() {
    let mut h = subscribed_stream();
    h.take_events();
    h.take_commands();
    h.feed_text(r#"{"stream":"!serverShutdown","data":{"e":"serverShutdown","E":1}}"#);
    assert_eq!(
        h.sent_frames(),
        vec![(0x8, 1000u16.to_be_bytes().to_vec())],
        "Close sent"
    );
    assert_eq!(h.state(), StreamState::Closing);
    h.feed_text(r#"{"e":"still delivered"}"#);
    h.feed(&server_frame(true, 8, &1000u16.to_be_bytes()));
    let evs = h.take_events();
    assert!(matches!(&evs[0], StreamEvent::Data { .. }));
    assert!(
        matches!(&evs[1], StreamEvent::Data { payload, .. } if payload == "{\"e\":\"still delivered\"}")
    );
    assert!(
        matches!(&evs[2], StreamEvent::Reconnecting { reason: EndReason::ServerShutdown, planned: true, delay, .. } if delay.is_zero()),
        "{evs:?}"
    );
    assert_eq!(evs[3], StreamEvent::Connecting { attempt: 1 });
    assert!(matches!(
        h.take_commands().as_slice(),
        [TransportCommand::Disconnect, TransportCommand::Connect(_)]
    ));
}

#[test]
/// A connection's lifetime is the preset's 23 h 50 min less a random part of up to 10 min,
/// so that connections opened together do not all reconnect together; two seeds, two times.
fn lifetime_limit_leads_to_a_planned_reconnect() {
    let lifetime = |seed: u8| {
        let mut h = Harness::with_seed(binance(), [seed; 32]);
        h.open_ws();
        let opened = h.now;
        // Keep the stream busy so only the lifetime timer can end it.
        while h.state() == StreamState::Open {
            h.advance(Duration::from_secs(1));
            h.feed_text(r#"{"e":"x"}"#);
        }
        assert_eq!(h.state(), StreamState::Closing);
        (h.now - opened, h)
    };
    let (a, _) = lifetime(1);
    let (b, mut h) = lifetime(2);
    let (min, max) = (
        Duration::from_secs(23 * 3600 + 40 * 60),
        Duration::from_secs(23 * 3600 + 50 * 60),
    );
    for t in [a, b] {
        assert!(min <= t && t <= max, "{t:?}");
    }
    assert_ne!(a, b, "spread by the stream's random source");
    h.feed(&server_frame(true, 8, &1000u16.to_be_bytes()));
    let evs = h.take_events();
    assert!(evs.iter().any(|e| matches!(
        e,
        StreamEvent::Reconnecting {
            reason: EndReason::LifetimeReached,
            planned: true,
            ..
        }
    )));
}

/// Binance ends every connection after 24 h, the WebSocket API's as well as the streams':
/// both presets plan their reconnect within 10 minutes before that; Betfair has no limit.
#[test]
fn binance_presets_reconnect_before_the_24_hour_limit() {
    let limit = Some(Duration::from_secs(23 * 3600 + 50 * 60));
    assert_eq!(binance().timeouts.max_lifetime, limit);
    let api = StreamConfig::binance_ws_api("wss://ws-api.binance.com:443/ws-api/v3");
    assert_eq!(api.timeouts.max_lifetime, limit);
    assert_eq!(api.timeouts.first_data, None, "request/response only");
    let auth = feedwire_core::BetfairAuth {
        app_key: "app".into(),
        session: "token".into(),
    };
    let betfair = StreamConfig::betfair("tls://stream-api.betfair.com:443", auth);
    assert_eq!(betfair.timeouts.max_lifetime, None);
}

/// The connection's age comes while the transport holds its reads for the application: the
/// planned reconnect waits for the reads to go on — its Close would otherwise time out
/// behind them, and the connection go with the messages they hold.
#[test]
fn a_planned_reconnect_for_age_waits_for_held_reads() {
    let config = StreamConfig {
        timeouts: Timeouts {
            max_lifetime: Some(Duration::from_secs(3600)),
            ..Timeouts::default()
        },
        ..binance()
    };
    let mut h = open(config);
    // Busy (no idle probe) until shortly before the age, with the lifetime's random part
    // (at most 1/144 of it, 25 s) still ahead.
    for _ in 0..350 {
        h.advance(Duration::from_secs(10));
        h.feed_text(r#"{"e":"x"}"#);
    }
    h.sent.clear();
    for _ in 0..20 {
        h.s.handle_reads_held(h.now);
        h.advance(Duration::from_secs(10));
    }
    assert_eq!(
        h.state(),
        StreamState::Open,
        "no Close while reads are held"
    );
    assert!(h.sent_frames().is_empty());
    h.feed_text(r#"{"e":"y"}"#);
    h.advance(Duration::from_secs(1));
    assert_eq!(
        h.state(),
        StreamState::Closing,
        "the planned reconnect once reads go on"
    );
    assert_eq!(h.sent_frames()[0].0, 0x8);
}

#[test]
/// Binance allows 5 messages a second, Pongs included: the preset sends 4 control messages
/// in any one second, so a Pong always fits.
fn control_messages_are_paced_at_four_per_second_leaving_room_for_a_pong() {
    let mut h = open(binance());
    for i in 0..7 {
        h.s.subscribe(&[&format!("s{i}@trade")], h.now).unwrap();
        h.pump();
    }
    assert_eq!(h.sent_texts().len(), 4);
    h.feed(&server_frame(true, 9, b"hb"));
    let sent = h.sent_frames();
    assert_eq!(sent.len(), 1, "the Pong goes out at once: {sent:?}");
    assert_eq!(sent[0].0, 0xA);
    h.advance(Duration::from_millis(999));
    assert_eq!(h.sent_texts().len(), 0);
    h.advance(Duration::from_millis(1));
    // The three that waited went out together, as one request.
    assert_eq!(
        h.sent_texts(),
        [r#"{"method":"SUBSCRIBE","params":["s4@trade","s5@trade","s6@trade"],"id":5}"#]
    );
}

#[test]
/// A loop subscribing one stream per call: the calls that find the pacing budget spent join
/// the SUBSCRIBE waiting for it, up to 200 streams a request — all out in one second, not
/// four streams a second; an UNSUBSCRIBE between them keeps its place.
fn streams_subscribed_one_by_one_go_out_together_when_pacing_holds_them() {
    let mut h = open(binance());
    let names: Vec<String> = (0..300).map(|i| format!("s{i}@trade")).collect();
    for name in &names[..4] {
        h.s.subscribe(&[name], h.now).unwrap();
    }
    h.pump();
    assert_eq!(
        h.sent_texts().len(),
        4,
        "the budget's four, one stream each"
    );
    for name in &names[4..250] {
        h.s.subscribe(&[name], h.now).unwrap();
    }
    h.s.unsubscribe(&["s0@trade"], h.now).unwrap();
    h.s.unsubscribe(&["s1@trade"], h.now).unwrap();
    for name in &names[250..] {
        h.s.subscribe(&[name], h.now).unwrap();
    }
    h.pump();
    assert_eq!(h.sent_texts().len(), 0);
    h.advance(Duration::from_secs(1));
    let request = |method: &str, range: std::ops::Range<usize>, id: u64| {
        let params: Vec<String> = names[range].iter().map(|n| format!("\"{n}\"")).collect();
        format!(
            r#"{{"method":"{method}","params":[{}],"id":{id}}}"#,
            params.join(",")
        )
    };
    assert_eq!(
        h.sent_texts(),
        [
            request("SUBSCRIBE", 4..204, 5),
            request("SUBSCRIBE", 204..250, 6),
            request("UNSUBSCRIBE", 0..2, 7),
            request("SUBSCRIBE", 250..300, 8),
        ]
    );
    // Each answer reports the streams it was for.
    h.feed_text(r#"{"result":null,"id":6}"#);
    let answered = h.take_events().into_iter().find_map(|e| match e {
        StreamEvent::Subscribed { streams, .. } => Some(streams),
        _ => None,
    });
    assert_eq!(answered, Some(names[204..250].to_vec()));
    assert_eq!(h.s.subscriptions().count(), 298);
}

/// Streams unsubscribed one call at a time join the UNSUBSCRIBE waiting for the pacing
/// budget as subscriptions do, and as those only up to 200 streams a request.
#[test]
fn streams_unsubscribed_one_by_one_join_up_to_a_requests_worth() {
    let mut h = open(binance());
    let names: Vec<String> = (0..250).map(|i| format!("s{i}@trade")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    h.s.subscribe(&refs, h.now).unwrap();
    h.s.subscribe(&["a@trade"], h.now).unwrap();
    h.s.subscribe(&["b@trade"], h.now).unwrap();
    h.pump();
    assert_eq!(h.sent_texts().len(), 4, "the budget's four");
    for name in &names {
        h.s.unsubscribe(&[name], h.now).unwrap();
    }
    h.pump();
    assert_eq!(h.sent_texts().len(), 0);
    h.advance(Duration::from_secs(1));
    let sent = h.sent_texts();
    let counts: Vec<usize> = sent
        .iter()
        .map(|t| {
            assert!(t.starts_with(r#"{"method":"UNSUBSCRIBE""#), "{t}");
            t.matches("@trade").count()
        })
        .collect();
    assert_eq!(counts, [200, 50]);
    assert_eq!(h.s.subscriptions().count(), 2);
}

#[test]
fn a_stream_named_twice_in_one_call_is_sent_and_counted_once() {
    let mut h = open(binance());
    h.s.subscribe(&["a@trade", "b@trade", "a@trade"], h.now)
        .unwrap();
    h.s.unsubscribe(&["b@trade", "b@trade"], h.now).unwrap();
    h.pump();
    assert_eq!(
        h.sent_texts(),
        [
            r#"{"method":"SUBSCRIBE","params":["a@trade","b@trade"],"id":1}"#,
            r#"{"method":"UNSUBSCRIBE","params":["b@trade"],"id":2}"#,
        ]
    );
    assert_eq!(h.s.subscriptions().collect::<Vec<_>>(), ["a@trade"]);
    // Against a limit, a repeated name is one stream.
    let mut config = binance();
    config.max_streams = 2;
    let mut h = open(config);
    h.s.subscribe(&["a@trade", "a@trade", "b@trade"], h.now)
        .unwrap();
}

#[test]
fn subscription_limits_and_unknown_unsubscribe_are_typed_errors() {
    let mut h = open(binance());
    let many: Vec<String> = (0..1024).map(|i| format!("s{i}@trade")).collect();
    let refs: Vec<&str> = many.iter().map(String::as_str).collect();
    h.s.subscribe(&refs, h.now).unwrap();
    assert_eq!(
        h.s.subscribe(&["one@more"], h.now),
        Err(StreamError::TooManyStreams { max: 1024 })
    );
    assert_eq!(
        h.s.unsubscribe(&["not@subscribed"], h.now),
        Err(StreamError::NotSubscribed("not@subscribed".into()))
    );
    assert_eq!(
        h.s.subscribe(&["bad\"name"], h.now),
        Err(StreamError::InvalidStreamName("bad\"name".into()))
    );
    assert_eq!(
        h.s.request("x", None, h.now),
        Err(StreamError::NotSupported)
    );
    h.s.unsubscribe(&["s0@trade"], h.now).unwrap();
    assert_eq!(h.s.subscriptions().count(), 1023);
}

/// An answered request: a minute on, no timeout is reported for it.
fn assert_no_timeout_follows(h: &mut Harness) {
    h.advance(Duration::from_secs(60));
    assert!(
        !h.take_events()
            .iter()
            .any(|e| matches!(e, StreamEvent::RequestTimedOut { .. })),
        "answered: no timeout"
    );
}

#[test]
fn request_timeout_is_reported_once() {
    let mut h = open_ws_api();
    let id = h.s.request("time", None, h.now).unwrap();
    h.pump();
    let RequestId::Str(uuid) = &id else { panic!() };
    assert_eq!(
        h.sent_texts(),
        vec![format!(r#"{{"id":"{uuid}","method":"time"}}"#)]
    );
    h.advance(Duration::from_secs(10));
    let evs = h.take_events();
    assert!(
        matches!(&evs[..], [StreamEvent::RequestTimedOut { id: i, .. }] if *i == id),
        "{evs:?}"
    );
    h.advance(Duration::from_secs(100));
    assert!(!h
        .take_events()
        .iter()
        .any(|e| matches!(e, StreamEvent::RequestTimedOut { .. })));
}

/// A request past its timeout while the transport holds its reads for the application is
/// not reported timed out: its answer may be in the socket. The deadline is not offered
/// meanwhile (an event loop would spin on it); the next read brings the answer, matched to
/// its request — or, without it, the timeout is reported then.
#[test]
fn request_deadlines_wait_while_reads_are_held() {
    for answered in [true, false] {
        let mut h = open_ws_api();
        let id = h.s.request("time", None, h.now).unwrap();
        h.pump();
        let RequestId::Str(uuid) = &id else { panic!() };
        h.advance(Duration::from_secs(9));
        h.s.handle_reads_held(h.now);
        h.advance(Duration::from_secs(5));
        assert!(
            h.take_events().is_empty(),
            "no timeout while reads are held"
        );
        assert!(
            h.s.poll_timeout().is_none_or(|t| t > h.now),
            "no deadline in the past to spin on"
        );
        if answered {
            h.feed_text(&format!(r#"{{"id":"{uuid}","status":200,"result":{{}}}}"#));
            let evs = h.take_events();
            let matched = |e: &StreamEvent| match e {
                StreamEvent::Response {
                    id: i, is_error, ..
                } => *i == id && !is_error,
                _ => false,
            };
            assert!(matches!(&evs[..], [e] if matched(e)), "{evs:?}");
            assert_no_timeout_follows(&mut h);
        } else {
            h.feed_text(r#"{"subscriptionId":0,"event":{"e":"x"}}"#);
            h.advance(Duration::ZERO);
            let evs = h.take_events();
            assert!(
                evs.iter()
                    .any(|e| matches!(e, StreamEvent::RequestTimedOut { id: i, .. } if *i == id)),
                "{evs:?}"
            );
        }
    }
}

#[test]
fn ws_api_response_is_matched_to_its_request() {
    let mut h = open_ws_api();
    let id = h.s.request("ping", Some("{}"), h.now).unwrap();
    h.pump();
    let RequestId::Str(uuid) = &id else { panic!() };
    h.feed_text(&format!(
        r#"{{"id":"{uuid}","status":200,"result":{{}},"rateLimits":[]}}"#
    ));
    let evs = h.take_events();
    assert!(
        matches!(&evs[..], [StreamEvent::Response { id: i, is_error: false, .. }] if *i == id),
        "{evs:?}"
    );
    assert_no_timeout_follows(&mut h);
}

#[test]
fn stop_on_an_idle_open_stream_sends_close_at_once() {
    let mut h = subscribed_stream();
    h.feed_text(r#"{"e":"before stop"}"#);
    h.sent.clear();
    h.take_events();
    h.s.stop(h.now);
    h.pump();
    assert_eq!(
        h.sent_frames(),
        vec![(0x8, 1000u16.to_be_bytes().to_vec())],
        "Close on the wire in the same call"
    );
    assert_eq!(h.state(), StreamState::Closing);
    h.feed(&server_frame(true, 8, &1000u16.to_be_bytes()));
    let evs = h.take_events();
    assert_eq!(
        evs,
        vec![StreamEvent::Closed {
            by: CloseInitiator::Local,
            code: 1000
        }]
    );
    assert!(h.take_commands().contains(&TransportCommand::Disconnect));
    h.advance(Duration::from_secs(3600));
    assert!(h.take_commands().is_empty(), "no reconnect after stop");
}

#[test]
fn stop_without_an_answer_ends_after_the_close_timeout() {
    let mut h = subscribed_stream();
    h.take_events();
    h.s.stop(h.now);
    h.pump();
    h.advance(Duration::from_millis(4999));
    assert_eq!(h.state(), StreamState::Closing);
    h.advance(Duration::from_millis(1));
    assert_eq!(
        h.state(),
        StreamState::Closed {
            by: CloseInitiator::Local
        }
    );
    assert_eq!(
        h.take_events(),
        vec![StreamEvent::Closed {
            by: CloseInitiator::Local,
            code: 1000
        }]
    );
}

#[test]
fn stop_while_a_message_is_half_received_still_delivers_it() {
    let mut h = subscribed_stream();
    h.take_events();
    let frame = server_frame(true, 1, br#"{"e":"half and half"}"#);
    h.feed(&frame[..7]);
    h.s.stop(h.now);
    h.pump();
    h.feed(&frame[7..]);
    // Sent before the server saw our Close, but begun after the stop: dropped, however the
    // reads go (the half-received message took the general path; the fast paths stay shut).
    h.feed(&server_frame(true, 1, br#"{"e":"after"}"#));
    h.feed(&server_frame(true, 1, br#"{"e":"after, again"}"#));
    h.feed(&server_frame(true, 8, &1000u16.to_be_bytes()));
    let evs = h.take_events();
    assert_eq!(evs.len(), 2, "{evs:?}");
    assert!(
        matches!(&evs[0], StreamEvent::Data { payload, .. } if payload == "{\"e\":\"half and half\"}"),
        "{evs:?}"
    );
    assert_eq!(
        evs[1],
        StreamEvent::Closed {
            by: CloseInitiator::Local,
            code: 1000
        }
    );
}

#[test]
fn stop_while_a_fragmented_message_is_half_received_still_delivers_it() {
    let mut h = subscribed_stream();
    h.take_events();
    h.feed(&server_frame(false, 1, br#"{"e":"in "#));
    h.s.stop(h.now);
    h.pump();
    // A ping between the fragments, then the last one, then a message begun after the stop.
    h.feed(&server_frame(true, 9, b"p"));
    h.feed(&server_frame(true, 0, br#"pieces"}"#));
    h.feed(&server_frame(true, 1, br#"{"e":"after"}"#));
    h.feed(&server_frame(true, 8, &1000u16.to_be_bytes()));
    let data: Vec<_> = h
        .take_events()
        .into_iter()
        .filter_map(|e| match e {
            StreamEvent::Data { payload, .. } => Some(payload),
            _ => None,
        })
        .collect();
    assert_eq!(data, vec![Bytes::from_static(br#"{"e":"in pieces"}"#)]);
    assert_eq!(
        h.state(),
        StreamState::Closed {
            by: CloseInitiator::Local
        }
    );
}

#[test]
fn stop_while_a_control_frame_is_half_received_delivers_nothing_after_it() {
    let mut h = subscribed_stream();
    h.take_events();
    let ping = server_frame(true, 9, b"ping");
    h.feed(&ping[..3]);
    h.s.stop(h.now);
    h.pump();
    h.feed(&ping[3..]);
    h.feed(&server_frame(true, 1, br#"{"e":"after"}"#));
    h.feed(&server_frame(true, 8, &1000u16.to_be_bytes()));
    let evs = h.take_events();
    assert!(
        !evs.iter().any(|e| matches!(e, StreamEvent::Data { .. })),
        "{evs:?}"
    );
    assert!(evs.contains(&StreamEvent::Closed {
        by: CloseInitiator::Local,
        code: 1000
    }));
}

#[test]
fn messages_queued_before_a_crash_are_delivered_then_the_crash() {
    let mut h = subscribed_stream();
    h.take_events();
    h.take_commands();
    let mut two = server_frame(true, 1, br#"{"e":"1"}"#);
    two.extend(server_frame(true, 1, br#"{"e":"2"}"#));
    let buf = h.s.read_buf();
    buf[..two.len()].copy_from_slice(&two);
    h.s.handle_read(two.len(), h.now);
    h.s.crash("operator", h.now);
    h.pump();
    let evs = h.take_events();
    assert_eq!(evs.len(), 3, "{evs:?}");
    assert!(
        matches!(&evs[0], StreamEvent::Data { .. }) && matches!(&evs[1], StreamEvent::Data { .. })
    );
    assert_eq!(
        evs[2],
        StreamEvent::Crashed(EndReason::UserCrash("operator".into()))
    );
    assert!(h.sent_frames().is_empty(), "no close handshake on crash");
    assert_eq!(h.take_commands(), vec![TransportCommand::Disconnect]);
}

type Setup = Box<dyn Fn(&mut Harness)>;
type Outcome = (String, StreamState, Vec<StreamEvent>, Vec<TransportCommand>);

/// Drives a fresh stream into each state, then applies `act`.
fn in_every_state(act: impl Fn(&mut Harness)) -> Vec<Outcome> {
    let mut results = Vec::new();
    let setups: Vec<(&str, Setup)> = vec![
        ("connecting", Box::new(|_| {})),
        ("handshaking", Box::new(|h| h.connect())),
        ("open", Box::new(|h| h.open_ws())),
        (
            "closing",
            Box::new(|h| {
                h.open_ws();
                h.feed_text(r#"{"e":"serverShutdown"}"#);
            }),
        ),
        (
            "reconnecting",
            Box::new(|h| {
                h.open_ws();
                h.s.handle_transport_error("reset", h.now);
                h.pump();
            }),
        ),
    ];
    for (name, setup) in setups {
        let mut h = Harness::new(binance());
        setup(&mut h);
        h.take_events();
        h.take_commands();
        act(&mut h);
        h.pump();
        h.advance(Duration::from_secs(10));
        let state = h.state();
        results.push((name.to_owned(), state, h.take_events(), h.take_commands()));
    }
    results
}

#[test]
fn crash_in_every_state_ends_at_once_without_reconnect() {
    for (name, state, evs, cmds) in in_every_state(|h| h.s.crash("test", h.now)) {
        assert_eq!(
            state,
            StreamState::Crashed(EndReason::UserCrash("test".into())),
            "{name}"
        );
        assert_eq!(
            evs,
            vec![StreamEvent::Crashed(EndReason::UserCrash("test".into()))],
            "{name}"
        );
        assert!(
            !cmds
                .iter()
                .any(|c| matches!(c, TransportCommand::Connect(_))),
            "{name}: {cmds:?}"
        );
    }
}

#[test]
fn stop_in_every_state_ends_closed_by_us_without_reconnect() {
    for (name, state, evs, cmds) in in_every_state(|h| h.s.stop(h.now)) {
        assert_eq!(
            state,
            StreamState::Closed {
                by: CloseInitiator::Local
            },
            "{name}"
        );
        assert_eq!(
            evs.last(),
            Some(&StreamEvent::Closed {
                by: CloseInitiator::Local,
                code: 1000
            }),
            "{name}: {evs:?}"
        );
        assert!(
            !cmds
                .iter()
                .any(|c| matches!(c, TransportCommand::Connect(_))),
            "{name}: {cmds:?}"
        );
    }
}

#[test]
fn terminal_states_ignore_input() {
    let mut h = subscribed_stream();
    h.s.crash("done", h.now);
    h.pump();
    h.take_events();
    h.s.handle_timeout(h.now + Duration::from_secs(100));
    h.s.handle_eof(h.now);
    h.s.handle_connected(h.now);
    h.s.stop(h.now);
    h.pump();
    assert!(h.take_events().is_empty());
    assert_eq!(h.s.subscribe(&["a@b"], h.now), Err(StreamError::Ended));
}

#[test]
fn keepalive_pings_at_its_interval_even_while_data_flows() {
    let mut config = binance();
    config.timeouts.keepalive = Some(Duration::from_secs(10));
    let mut h = open(config);
    h.sent.clear();
    for _ in 0..3 {
        h.advance(Duration::from_secs(5));
        h.feed_text(r#"{"e":"x"}"#);
    }
    let pings = h
        .sent_frames()
        .into_iter()
        .filter(|(op, _)| *op == 0x9)
        .count();
    assert_eq!(pings, 1, "one ping in 15 s at a 10 s interval");
}

#[test]
fn peer_close_is_echoed_before_the_disconnect() {
    let mut h = subscribed_stream();
    h.sent.clear();
    h.feed(&server_frame(true, 8, &1001u16.to_be_bytes()));
    assert_eq!(h.sent_frames(), vec![(0x8, 1001u16.to_be_bytes().to_vec())]);
}

#[test]
fn protocol_violation_sends_its_close_code_before_the_disconnect() {
    let mut h = subscribed_stream();
    h.sent.clear();
    h.feed(&server_frame(true, 1, b"\xff not utf-8"));
    assert_eq!(h.sent_frames(), vec![(0x8, 1007u16.to_be_bytes().to_vec())]);
    let evs = h.take_events();
    assert!(
        evs.iter().any(|e| matches!(
            e,
            StreamEvent::Reconnecting {
                reason: EndReason::WebSocket(Error::Protocol(_)),
                ..
            }
        )),
        "{evs:?}"
    );
}

#[test]
fn a_refused_subscription_is_not_kept_for_resubscription() {
    let mut h = Harness::new(StreamConfig {
        crash_on_error_response: false,
        ..binance()
    });
    h.s.subscribe(&["good@trade", "bad@trade"], h.now).unwrap();
    h.open_ws();
    h.sent.clear();
    h.feed_text(r#"{"error":{"code":2,"msg":"Invalid request"},"id":1}"#);
    assert_eq!(h.s.subscriptions().count(), 0);
    h.s.subscribe(&["good@trade"], h.now).unwrap();
    h.pump();
    assert_eq!(
        h.sent_texts(),
        vec![r#"{"method":"SUBSCRIBE","params":["good@trade"],"id":2}"#]
    );
}

#[test]
fn read_buf_is_empty_without_a_connection() {
    let mut h = subscribed_stream();
    assert!(!h.s.read_buf().is_empty());
    h.s.crash("gone", h.now);
    assert!(!h.s.is_connected());
    assert!(h.s.read_buf().is_empty());
}

#[test]
fn a_list_of_many_subscriptions_meets_its_request() {
    // Thirty streams: the answer's `id` follows a 700-byte list, far past the 256-byte head.
    let names: Vec<String> = (0..30).map(|i| format!("sym{i:03}usdt@aggTrade")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut h = Harness::new(binance());
    h.s.subscribe(&refs, h.now).unwrap();
    h.open_ws();
    h.sent_texts();
    h.feed_text(r#"{"result":null,"id":1}"#);
    h.take_events();
    h.s.list_subscriptions(h.now).unwrap();
    h.pump();
    assert_eq!(
        h.sent_texts(),
        vec![r#"{"method":"LIST_SUBSCRIPTIONS","id":2}"#]
    );
    let list = names
        .iter()
        .map(|n| format!("\"{n}\""))
        .collect::<Vec<_>>()
        .join(",");
    let answer = format!(r#"{{"result":[{list}],"id":2}}"#);
    h.feed_text(&answer);
    assert_eq!(
        h.take_events(),
        vec![StreamEvent::Response {
            id: RequestId::Int(2),
            kind: Box::new(RequestKind::ListSubscriptions),
            payload: Bytes::from(answer),
            is_error: false,
        }]
    );
    assert_no_timeout_follows(&mut h);
}

/// A routing configuration that could not work as written is refused up front: no scan,
/// no room for a request, more extracted keys than are reported.
#[test]
fn unusable_routing_limits_are_typed_errors() {
    let mut c = binance();
    c.router.rules.scan_len = 0;
    assert!(matches!(
        Stream::new(c, [0; 32], std::time::Instant::now()),
        Err(ConfigError::ZeroLimit("scan_len"))
    ));
    let mut c = binance();
    c.router.max_pending = 0;
    assert!(matches!(
        Stream::new(c, [0; 32], std::time::Instant::now()),
        Err(ConfigError::ZeroLimit("max_pending"))
    ));
    let mut c = binance();
    c.router.rules.extract_keys = ["a", "b", "c", "d"].map(String::from).to_vec();
    assert!(matches!(
        Stream::new(c, [0; 32], std::time::Instant::now()),
        Err(ConfigError::TooMany {
            name: "extract_keys",
            max: MAX_EXTRACT_KEYS
        })
    ));
}

/// Sets one duration knob of a configuration.
type SetDuration = fn(&mut StreamConfig, Duration);

/// `Duration::MAX` is a natural way to write "never": every timeout, delay and lifetime takes
/// it (deadlines saturate at a century) without a panic — which in an adapter's loop would
/// end every stream it serves — and a NaN jitter means none. Each knob in turn, through a
/// whole life: open, data, a dropped connection and its reconnect, stop.
#[test]
fn durations_meaning_never_and_odd_jitter_never_panic() {
    let never = Duration::MAX;
    let knobs: [(&str, SetDuration); 10] = [
        ("connect", |c, d| c.timeouts.connect = d),
        ("first_data", |c, d| c.timeouts.first_data = Some(d)),
        ("idle", |c, d| c.timeouts.idle = Some(d)),
        ("keepalive", |c, d| c.timeouts.keepalive = Some(d)),
        ("close", |c, d| c.timeouts.close = d),
        ("max_lifetime", |c, d| c.timeouts.max_lifetime = Some(d)),
        ("initial_delay", |c, d| c.reconnect.initial_delay = d),
        ("max_delay", |c, d| {
            c.reconnect.initial_delay = d;
            c.reconnect.max_delay = d;
            c.reconnect.jitter = f64::NAN;
        }),
        ("healthy_after", |c, d| c.reconnect.healthy_after = d),
        ("request_timeout", |c, d| c.router.request_timeout = d),
    ];
    for (name, set) in knobs {
        let mut config = binance();
        set(&mut config, never);
        let mut h = Harness::new(config);
        h.s.subscribe(&["btcusdt@aggTrade"], h.now).unwrap();
        h.open_ws();
        h.feed_text(r#"{"result":null,"id":1}"#);
        h.feed_text(r#"{"e":"aggTrade"}"#);
        h.s.handle_eof(h.now);
        h.pump();
        h.advance(Duration::from_secs(3600));
        h.s.stop(h.now);
        h.pump();
        h.advance(Duration::from_secs(3600));
        let evs = h.take_events();
        assert!(
            evs.iter()
                .any(|e| matches!(e, StreamEvent::Reconnecting { .. })),
            "{name}: {evs:?}"
        );
    }
}

/// An answer can only come on the connection its request went out on. A SUBSCRIBE cut off
/// by a dropped connection is resent by the resubscription and ends silently — no
/// `RequestTimedOut` ten seconds after a resubscription that worked — while a request the
/// application made is reported lost at once, not timed out later.
#[test]
fn requests_cut_off_by_a_dropped_connection_end_with_it() {
    let mut h = Harness::new(binance());
    h.s.subscribe(&["btcusdt@aggTrade"], h.now).unwrap();
    h.open_ws();
    h.sent_texts();
    h.s.handle_eof(h.now);
    h.pump();
    h.advance(Duration::from_secs(1));
    h.open_ws();
    h.feed_text(r#"{"result":null,"id":2}"#);
    h.feed_text(r#"{"e":"aggTrade"}"#);
    h.advance(Duration::from_secs(30));
    let evs = h.take_events();
    assert!(
        evs.contains(&StreamEvent::Resubscribed { count: 1 }),
        "{evs:?}"
    );
    assert!(
        !evs.iter().any(|e| matches!(
            e,
            StreamEvent::RequestTimedOut { .. } | StreamEvent::RequestLost { .. }
        )),
        "{evs:?}"
    );
    // A LIST_SUBSCRIPTIONS in flight when the connection drops: lost, at once.
    h.s.list_subscriptions(h.now).unwrap();
    h.pump();
    h.s.handle_eof(h.now);
    h.pump();
    let evs = h.take_events();
    assert!(
        matches!(
            evs.first(),
            Some(StreamEvent::RequestLost {
                kind: RequestKind::ListSubscriptions,
                ..
            })
        ),
        "{evs:?}"
    );
    assert_no_timeout_follows(&mut h);
}

#[test]
fn a_request_pending_when_the_stream_ends_is_lost_before_its_end() {
    let mut h = open_ws_api();
    let id = h.s.request("time", None, h.now).unwrap();
    h.pump();
    h.s.crash("done", h.now);
    h.pump();
    let evs = h.take_events();
    assert!(
        matches!(&evs[..], [StreamEvent::RequestLost { id: i, .. }, StreamEvent::Crashed(_)] if *i == id),
        "{evs:?}"
    );
    h.advance(Duration::from_secs(60));
    assert!(h.take_events().is_empty(), "nothing after the end");
}

/// A peer that stops reading while it still sends: no timer ends the connection, and the
/// transport takes the stream's bytes only while its own queue is short. The application's
/// messages queue up to `max_send_queue`, then are refused (unbounded before: a send loop
/// grew the client by what it sent); the stream's own messages still go; once the
/// transport takes the bytes, sending works again.
#[test]
fn application_sends_are_refused_while_max_send_queue_bytes_wait() {
    const MAX: usize = 64 * 1024;
    let mut config = binance();
    config.max_send_queue = MAX;
    let mut h = open(config);
    h.take_events();
    let (sent, refused) = h.send_until_refused(&"x".repeat(1000), 1000);
    let StreamError::SendQueueFull { queued, max } = refused else {
        panic!("{refused:?}")
    };
    assert_eq!(max, MAX);
    assert!((MAX..MAX + 1010).contains(&queued), "{queued}");
    assert_eq!(
        sent,
        MAX.div_ceil(1006),
        "each 1000-byte text is 1006 bytes framed"
    );
    assert!(matches!(
        h.s.send_binary(b"y"),
        Err(StreamError::SendQueueFull { .. })
    ));
    // The stream's own messages are not refused.
    h.s.subscribe(&["btcusdt@aggTrade"], h.now).unwrap();
    h.pump();
    let texts = h.sent_texts();
    assert_eq!(texts.len(), sent + 1);
    assert!(texts[sent].starts_with(r#"{"method":"SUBSCRIBE""#));
    // Taken by the transport (the harness's pump): room again.
    h.s.send_text("after").unwrap();
    h.pump();
    assert_eq!(h.sent_texts(), ["after"]);

    assert_eq!(
        Stream::new(
            StreamConfig {
                max_send_queue: 0,
                ..binance()
            },
            [0; 32],
            h.now
        )
        .err(),
        Some(ConfigError::ZeroLimit("max_send_queue"))
    );
}

/// Streams given one connect budget take turns: once the window is full an attempt waits
/// (`Connecting`, nothing asked of the transport, no connect timeout running), and connects
/// when its turn comes; a stop while it waits ends it without a word to the transport. A
/// reconnect takes its turn too, behind those already waiting.
#[test]
fn streams_sharing_a_connect_budget_take_turns() {
    const WINDOW: Duration = Duration::from_secs(20);
    let budget = ConnectBudget::new(1, WINDOW).unwrap();
    let config = || StreamConfig {
        connect_budget: Some(budget.clone()),
        ..binance()
    };
    let connects = |h: &mut Harness| {
        h.take_commands()
            .iter()
            .filter(|c| matches!(c, TransportCommand::Connect(_)))
            .count()
    };
    let mut first = Harness::new(config());
    assert_eq!(connects(&mut first), 1, "the window was empty");
    let mut second = Harness::new(config());
    assert_eq!(
        second.take_events(),
        [StreamEvent::Connecting { attempt: 1 }]
    );
    assert_eq!(second.state(), StreamState::Connecting { attempt: 1 });
    // Longer than the connect timeout (10 s): no timer but the turn runs.
    second.advance(WINDOW - Duration::from_secs(1));
    assert!(second.take_commands().is_empty());
    assert!(second.take_events().is_empty(), "no connect timeout");
    second.advance(Duration::from_secs(1));
    assert_eq!(connects(&mut second), 1, "its turn came");

    // A third waits behind the second; stopped meanwhile, it never connects.
    let mut third = Harness::new(config());
    third.s.stop(third.now);
    third.pump();
    assert!(third.take_commands().is_empty(), "nothing to disconnect");
    assert_eq!(
        third.state(),
        StreamState::Closed {
            by: CloseInitiator::Local
        }
    );
    third.advance(3 * WINDOW);
    assert!(third.take_commands().is_empty());

    // The first, dropped, reconnects after its backoff — at its turn: a window after the
    // third's (3 windows from the start), which was spent though unused.
    first.open_ws();
    first.take_commands();
    first.s.handle_transport_error("reset", first.now);
    first.pump();
    first.advance(3 * WINDOW - Duration::from_secs(1));
    assert_eq!(connects(&mut first), 0, "behind the turns already given");
    first.advance(Duration::from_secs(1));
    assert_eq!(connects(&mut first), 1);
}

#[test]
fn a_stream_that_does_not_reconnect_drops_a_failed_attempt_once() {
    let mut config = binance();
    config.reconnect.enabled = false;
    let mut h = Harness::new(config);
    h.take_commands();
    h.take_events();
    h.s.handle_tls_error(&feedwire_core::TlsError::UnexpectedEof, h.now);
    h.pump();
    assert_eq!(h.take_commands(), vec![TransportCommand::Disconnect]);
    assert!(matches!(
        &h.take_events()[..],
        [StreamEvent::Crashed(EndReason::Tls(_))]
    ));
}

/// A data message carries the time of the read that completed it — on the general path (a
/// stream's first message), the queueing fast path and the lending one alike — so that an
/// application stamping every message needs no clock read of its own.
#[test]
fn data_carries_the_time_of_the_read_that_completed_it() {
    let mut h = subscribed_stream();
    let frame = server_frame(true, 1, br#"{"e":"aggTrade","a":1}"#);
    let (head, tail) = frame.split_at(7);
    let mut received = Vec::new();
    for lend in [false, false, true] {
        let started = h.now;
        h.feed(head);
        h.advance(Duration::from_millis(5));
        let buf = h.s.read_buf();
        buf[..tail.len()].copy_from_slice(tail);
        if lend {
            h.s.handle_read_with(tail.len(), h.now, |d| received.push(d.received));
        } else {
            h.s.handle_read(tail.len(), h.now);
        }
        h.pump();
        received.extend(h.take_events().iter().filter_map(|e| match e {
            StreamEvent::Data { received, .. } => Some(*received),
            _ => None,
        }));
        assert_eq!(received.len(), 1, "lend: {lend}");
        assert_eq!(received.pop(), Some(started + Duration::from_millis(5)));
    }
}

/// A line stream with no Betfair session (a plain CRLF feed) has no probe to send: no
/// Ping on lines, and no Betfair heartbeat request either. Its silence ends the connection
/// `probe_answer` after the idle timeout, with nothing written.
#[test]
fn a_plain_line_stream_is_not_probed_with_a_betfair_heartbeat() {
    let mut config = StreamConfig::binance_stream("tcp://127.0.0.1:9");
    config.timeouts.first_data = None;
    config.timeouts.idle = Some(Duration::from_secs(5));
    let answer = config.timeouts.probe_answer;
    let mut h = Harness::new(config);
    h.connect();
    assert_eq!(h.state(), StreamState::Open, "no greeting to wait for");
    h.feed(b"{\"e\":\"trade\"}\r\n");
    h.take_events();
    h.advance(Duration::from_secs(5));
    assert!(h.sent.is_empty(), "{:?}", h.sent);
    assert_eq!(h.state(), StreamState::Open);
    h.advance(answer);
    let evs = h.take_events();
    assert!(
        matches!(reconnect_reason(&evs), Some(EndReason::IdleTimeout)),
        "{evs:?}"
    );
    assert!(h.sent.is_empty(), "{:?}", h.sent);
}

/// `stop()` and the peer's Close cross: the peer's arrives before the transport wrote ours.
/// The stream ends at once (the handshake is complete from both sides), and our Close is
/// still written before the transport disconnects: the peer waits for it.
#[test]
fn a_close_crossing_the_peers_is_still_written() {
    let mut h = subscribed_stream();
    h.take_commands();
    h.sent.clear();
    h.s.stop(h.now);
    h.feed(&server_frame(true, 8, &1000u16.to_be_bytes()));
    assert_eq!(h.sent_frames(), vec![(0x8, 1000u16.to_be_bytes().to_vec())]);
    assert_eq!(
        h.state(),
        StreamState::Closed {
            by: CloseInitiator::Local
        }
    );
    assert_eq!(h.take_commands(), vec![TransportCommand::Disconnect]);
}

/// Without reconnects a peer's Close ends the stream as closed by the peer, with its code:
/// a normal end, not a crash.
#[test]
fn a_peers_close_ends_a_stream_that_does_not_reconnect_as_closed() {
    let mut config = binance();
    config.reconnect.enabled = false;
    let mut h = open(config);
    h.take_events();
    h.feed(&server_frame(true, 8, &1001u16.to_be_bytes()));
    assert_eq!(
        h.take_events(),
        [StreamEvent::Closed {
            by: CloseInitiator::Remote,
            code: 1001
        }]
    );
    assert_eq!(
        h.state(),
        StreamState::Closed {
            by: CloseInitiator::Remote
        }
    );
}

/// Application binary messages: a WebSocket stream sends them as binary frames; a line
/// stream has no binary framing and says so.
#[test]
fn binary_messages_go_out_on_websocket_streams_only() {
    let mut h = open(binance());
    h.sent.clear();
    assert_eq!(h.s.send_binary(&[0, 1, 2, 0xff]), Ok(()));
    h.pump();
    assert_eq!(h.sent_frames(), vec![(0x2, vec![0, 1, 2, 0xff])]);

    let mut h = Harness::new(StreamConfig::binance_stream("tcp://127.0.0.1:9"));
    h.connect();
    assert_eq!(h.state(), StreamState::Open);
    assert_eq!(h.s.send_binary(b"x"), Err(StreamError::NotSupported));
}

/// By default a line may be as long as 16 MiB: a Betfair image of a busy event runs to
/// megabytes on one line.
#[test]
fn a_line_of_megabytes_passes_by_default() {
    let mut h = Harness::new(StreamConfig::binance_stream("tcp://127.0.0.1:9"));
    h.connect();
    h.take_events();
    let mut line = vec![b'x'; 4 << 20];
    line.extend_from_slice(b"\r\n");
    h.feed(&line);
    let evs = h.take_events();
    assert!(
        matches!(evs.as_slice(), [StreamEvent::Data { payload, .. }] if payload.len() == 4 << 20),
        "{} events",
        evs.len()
    );
    assert_eq!(h.state(), StreamState::Open);
}

/// A line longer than `max_line` ends the connection with that reason (not as if the peer
/// had simply closed it), and the stream reconnects.
#[test]
fn a_line_over_max_line_ends_the_connection_for_that() {
    let mut config = StreamConfig::binance_stream("tcp://127.0.0.1:9");
    config.max_line = 1000;
    let mut h = Harness::new(config);
    h.connect();
    h.take_events();
    h.feed(&[b'x'; 1500]);
    let evs = h.take_events();
    assert!(
        matches!(
            reconnect_reason(&evs),
            Some(EndReason::Lines(LineError::LineTooLong { max: 1000 }))
        ),
        "{evs:?}"
    );
}
