//! The Betfair profile over CRLF lines: connection greeting, authentication, market
//! subscription, heartbeats, and resubscription after reconnect resuming from the latest clk.

mod common;

use std::time::Duration;

use common::harness::{reconnect_reason, Harness};
use feedwire_core::{
    BetfairAuth, BetfairSubscription, EndReason, RequestId, StreamConfig, StreamEvent, StreamState,
    TransportCommand,
};

fn config() -> StreamConfig {
    let auth = BetfairAuth {
        app_key: "appkey".into(),
        session: "token".into(),
    };
    StreamConfig::betfair("tls://127.0.0.1:4443", auth)
}

fn markets() -> BetfairSubscription {
    BetfairSubscription {
        filter_json: r#"{"marketIds":["1.2345"]}"#.into(),
        data_filter_json: Some(r#"{"fields":["EX_BEST_OFFERS"]}"#.into()),
        heartbeat_ms: Some(5000),
        conflate_ms: None,
    }
}

/// Every order, no data filter: the order subscription the tests set.
fn orders() -> BetfairSubscription {
    BetfairSubscription {
        filter_json: "{}".into(),
        data_filter_json: None,
        heartbeat_ms: None,
        conflate_ms: None,
    }
}

/// The connection ends; after the backoff the next one opens and greets (the login then
/// goes out).
fn reconnect_to_the_greeting(h: &mut Harness) {
    h.s.handle_eof(h.now);
    h.pump();
    let delay = h.take_events().into_iter().find_map(|e| match e {
        StreamEvent::Reconnecting { delay, .. } => Some(delay),
        _ => None,
    });
    h.advance(delay.expect("a reconnect"));
    h.take_commands();
    h.connect();
    h.feed_line(r#"{"op":"connection","connectionId":"002-2"}"#);
}

/// The subscription's image (request 2): position `G1Fw` / `AAA`.
fn feed_the_image(h: &mut Harness) {
    h.feed_line(
        r#"{"op":"mcm","id":2,"initialClk":"G1Fw","clk":"AAA","ct":"SUB_IMAGE","pt":1,"mc":[]}"#,
    );
}

/// Connected, greeted, authenticated, subscribed.
fn subscribed() -> Harness {
    let mut h = Harness::new(config());
    assert!(
        matches!(h.take_commands().as_slice(), [TransportCommand::Connect(e)] if e.scheme.is_tls())
    );
    h.s.subscribe_markets(markets(), h.now).unwrap();
    h.connect();
    assert_eq!(
        h.state(),
        StreamState::Handshaking,
        "waits for the connection message"
    );
    h.feed_line(r#"{"op":"connection","connectionId":"002-1"}"#);
    assert_eq!(h.state(), StreamState::Open);
    assert_eq!(
        h.sent_lines(),
        vec![r#"{"op":"authentication","id":1,"appKey":"appkey","session":"token"}"#]
    );
    h.feed_line(r#"{"op":"status","id":1,"statusCode":"SUCCESS","connectionClosed":false}"#);
    assert_eq!(
        h.sent_lines(),
        vec![
            r#"{"op":"marketSubscription","id":2,"heartbeatMs":5000,"marketFilter":{"marketIds":["1.2345"]},"marketDataFilter":{"fields":["EX_BEST_OFFERS"]}}"#
        ]
    );
    h.feed_line(r#"{"op":"status","id":2,"statusCode":"SUCCESS","connectionClosed":false}"#);
    h
}

#[test]
fn authenticates_then_subscribes() {
    let mut h = subscribed();
    let evs = h.take_events();
    assert_eq!(evs[1], StreamEvent::Opened { reconnected: false });
    assert_eq!(evs[2], StreamEvent::Authenticated);
    assert_eq!(
        evs[3],
        StreamEvent::Subscribed {
            streams: vec!["marketSubscription".into()],
            id: RequestId::Int(2)
        }
    );
}

#[test]
fn market_changes_and_heartbeats_are_data() {
    let mut h = subscribed();
    h.take_events();
    h.feed_line(r#"{"op":"mcm","id":2,"initialClk":"G1","clk":"AAA","ct":"SUB_IMAGE","pt":1,"mc":[{"id":"1.2345"}]}"#);
    h.feed_line(r#"{"op":"mcm","id":2,"ct":"HEARTBEAT","clk":"AAB","pt":2}"#);
    let evs = h.take_events();
    assert!(matches!(
        &evs[0],
        StreamEvent::Data {
            heartbeat: false,
            ..
        }
    ));
    assert!(matches!(
        &evs[1],
        StreamEvent::Data {
            heartbeat: true,
            ..
        }
    ));
}

#[test]
fn resubscription_after_reconnect_resumes_from_the_latest_clk() {
    let mut h = subscribed();
    feed_the_image(&mut h);
    h.feed_line(r#"{"op":"mcm","id":2,"clk":"AAB","pt":2,"mc":[]}"#);
    h.feed_line(r#"{"op":"mcm","id":2,"clk":"AAC","pt":3,"mc":[]}"#);
    h.take_events();
    h.take_commands();
    h.s.handle_eof(h.now);
    h.pump();
    let evs = h.take_events();
    let Some(StreamEvent::Reconnecting {
        reason: EndReason::Eof,
        delay,
        ..
    }) = evs.first()
    else {
        panic!("{evs:?}")
    };
    h.advance(*delay);
    assert!(matches!(
        h.take_commands().as_slice(),
        [TransportCommand::Disconnect, TransportCommand::Connect(_)]
    ));
    h.connect();
    h.feed_line(r#"{"op":"connection","connectionId":"002-2"}"#);
    assert_eq!(
        h.sent_lines(),
        vec![r#"{"op":"authentication","id":3,"appKey":"appkey","session":"token"}"#]
    );
    h.feed_line(r#"{"op":"status","id":3,"statusCode":"SUCCESS"}"#);
    assert_eq!(
        h.sent_lines(),
        vec![
            r#"{"op":"marketSubscription","id":4,"heartbeatMs":5000,"marketFilter":{"marketIds":["1.2345"]},"marketDataFilter":{"fields":["EX_BEST_OFFERS"]},"initialClk":"G1Fw","clk":"AAC"}"#
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
}

/// Reconnects, takes the login, and answers the resubscription with `first` (its `ID` made
/// the request's id); the lines the client sent after the login (the resubscription).
fn resubscribe_and_answer(h: &mut Harness, first: &str) -> Vec<String> {
    reconnect_to_the_greeting(h);
    let login = h.sent_lines();
    let id: u64 = login[0]
        .split("\"id\":")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .expect("the login's id");
    h.feed_line(&format!(
        r#"{{"op":"status","id":{id},"statusCode":"SUCCESS"}}"#
    ));
    let sent = h.sent_lines();
    h.feed_line(&first.replace("ID", &(id + 1).to_string()));
    sent
}

/// A resumed subscription's first message is a `RESUB_DELTA` (what changed since the
/// position sent), not an image: the position moves on from it — to its `initialClk` when it
/// carries one, else keeping the one resumed from — and the next reconnect resumes from there.
#[test]
fn a_resub_delta_moves_the_position_on() {
    let mut h = subscribed();
    feed_the_image(&mut h);
    resubscribe_and_answer(
        &mut h,
        r#"{"op":"mcm","id":ID,"initialClk":"G2Ab","clk":"AAD","ct":"RESUB_DELTA","pt":4,"mc":[]}"#,
    );
    h.feed_line(r#"{"op":"mcm","id":4,"clk":"AAE","pt":5,"mc":[]}"#);
    let sent = resubscribe_and_answer(
        &mut h,
        r#"{"op":"mcm","id":ID,"clk":"AAF","ct":"RESUB_DELTA","pt":6,"mc":[]}"#,
    );
    assert!(
        sent[0].ends_with(r#""initialClk":"G2Ab","clk":"AAE"}"#),
        "{sent:?}"
    );
    let sent = resubscribe_and_answer(&mut h, r#"{"op":"mcm","id":ID,"clk":"AAG","pt":7,"mc":[]}"#);
    assert!(
        sent[0].ends_with(r#""initialClk":"G2Ab","clk":"AAF"}"#),
        "{sent:?}"
    );
}

#[test]
fn failed_authentication_crashes() {
    let mut h = Harness::new(config());
    h.connect();
    h.feed_line(r#"{"op":"connection","connectionId":"002-1"}"#);
    h.take_events();
    h.feed_line(r#"{"op":"status","id":1,"statusCode":"FAILURE","errorCode":"INVALID_SESSION_INFORMATION","connectionClosed":true}"#);
    let evs = h.take_events();
    assert!(
        matches!(
            &evs[..],
            [StreamEvent::Crashed(EndReason::FatalResponse(_))]
        ),
        "{evs:?}"
    );
}

/// Betfair refuses a login for now when the account is at its connection limit — after a
/// network blip the server may not have seen the old connection go yet — or throttles
/// connects: the stream connects again after the backoff and keeps its subscription,
/// instead of crashing for good.
#[test]
fn a_login_refused_for_now_is_tried_again_after_the_backoff() {
    for code in ["MAX_CONNECTION_LIMIT_EXCEEDED", "TOO_MANY_REQUESTS"] {
        let mut h = Harness::new(config());
        h.s.subscribe_markets(markets(), h.now).unwrap();
        h.connect();
        h.feed_line(r#"{"op":"connection","connectionId":"002-1"}"#);
        h.take_events();
        h.feed_line(&format!(
            r#"{{"op":"status","id":1,"statusCode":"FAILURE","errorCode":"{code}","connectionClosed":true}}"#
        ));
        let evs = h.take_events();
        let [StreamEvent::Reconnecting {
            reason: EndReason::RefusedForNow(refusal),
            delay,
            ..
        }] = &evs[..]
        else {
            panic!("{code}: {evs:?}")
        };
        assert!(refusal.ends_with(br#""connectionClosed":true}"#));
        assert!(*delay > Duration::ZERO, "after the backoff");
        h.advance(*delay);
        h.take_commands();
        h.connect();
        h.feed_line(r#"{"op":"connection","connectionId":"002-2"}"#);
        h.feed_line(r#"{"op":"status","id":2,"statusCode":"SUCCESS"}"#);
        let sent = h.sent_lines();
        assert!(
            sent.last()
                .unwrap()
                .starts_with(r#"{"op":"marketSubscription","id":3,"#),
            "{code}: {sent:?}"
        );
        assert_eq!(h.state(), StreamState::Open);
    }
}

/// A resubscription whose position the server refuses (`INVALID_CLOCK`) is sent again at
/// once without it, for a new image; resent as it was, it would be refused on every
/// reconnect.
#[test]
fn a_refused_position_is_dropped_for_a_new_image() {
    let mut h = subscribed();
    feed_the_image(&mut h);
    reconnect_to_the_greeting(&mut h);
    h.feed_line(r#"{"op":"status","id":3,"statusCode":"SUCCESS"}"#);
    let resubscription = h.sent_lines().pop().unwrap();
    assert!(resubscription.ends_with(r#""initialClk":"G1Fw","clk":"AAA"}"#));
    h.feed_line(r#"{"op":"status","id":4,"statusCode":"FAILURE","errorCode":"INVALID_CLOCK","connectionClosed":false}"#);
    assert_eq!(
        h.sent_lines(),
        [
            r#"{"op":"marketSubscription","id":5,"heartbeatMs":5000,"marketFilter":{"marketIds":["1.2345"]},"marketDataFilter":{"fields":["EX_BEST_OFFERS"]}}"#
        ]
    );
    assert_eq!(h.state(), StreamState::Open);
    assert!(
        !h.take_events()
            .iter()
            .any(|e| matches!(e, StreamEvent::Crashed(_))),
        "not fatal"
    );
    // The same refusal of a request with no position is final: sent again, it would be
    // refused again, without end.
    h.feed_line(r#"{"op":"status","id":5,"statusCode":"FAILURE","errorCode":"INVALID_CLOCK","connectionClosed":false}"#);
    assert!(h.sent_lines().is_empty());
    assert!(
        matches!(h.state(), StreamState::Crashed(_)),
        "{:?}",
        h.state()
    );
}

#[test]
fn idle_line_stream_is_probed_with_a_heartbeat_op() {
    let mut h = subscribed();
    h.feed_line(r#"{"op":"mcm","id":2,"clk":"A","pt":1}"#);
    h.sent.clear();
    // A subscribed connection hears from Betfair every 5 s (the default `heartbeatMs`,
    // which this subscription asks for): 15 s of silence is three heartbeats missed.
    h.advance(Duration::from_millis(14_999));
    assert!(h.sent_lines().is_empty());
    h.advance(Duration::from_millis(1));
    assert_eq!(h.sent_lines(), vec![r#"{"op":"heartbeat","id":3}"#]);
    h.feed_line(r#"{"op":"status","id":3,"statusCode":"SUCCESS"}"#);
    h.advance(Duration::from_secs(14));
    assert_eq!(h.state(), StreamState::Open);
    h.take_events();
    // Unanswered, the probe ends the connection 10 s later: dead 25 s after the last line.
    h.advance(Duration::from_secs(1));
    assert_eq!(h.sent_lines(), vec![r#"{"op":"heartbeat","id":4}"#]);
    h.advance(Duration::from_secs(10));
    assert!(
        h.take_events().iter().any(|e| matches!(
            e,
            StreamEvent::Reconnecting {
                reason: EndReason::IdleTimeout,
                ..
            }
        )),
        "dead 10 s after an unanswered probe"
    );
}

#[test]
fn stop_ends_a_line_session_at_once() {
    let mut h = subscribed();
    h.take_events();
    h.take_commands();
    h.s.stop(h.now);
    h.pump();
    assert!(h.take_events().ends_with(&[StreamEvent::Closed {
        by: feedwire_core::CloseInitiator::Local,
        code: 1000
    }]));
    assert_eq!(h.take_commands(), vec![TransportCommand::Disconnect]);
}

#[test]
fn greeting_must_arrive_within_the_connect_timeout() {
    common::harness::assert_connect_times_out(config());
}

#[test]
/// A subscription set while the authentication is still unanswered waits for its answer,
/// and goes out once: Betfair would answer a second one with a second full image. (The
/// adapters' Betfair scenario saw `[marketSubscription, marketSubscription, …]` now and
/// then on a loaded machine.)
fn a_subscription_set_before_the_login_is_answered_goes_out_once_after_it() {
    let mut h = Harness::new(config());
    h.connect();
    h.feed_line(r#"{"op":"connection","connectionId":"002-1"}"#);
    assert_eq!(h.state(), StreamState::Open);
    assert_eq!(h.sent_lines().len(), 1, "the authentication");
    h.s.subscribe_markets(markets(), h.now).unwrap();
    h.pump();
    assert_eq!(h.sent_lines(), Vec::<String>::new(), "not before the login");
    h.feed_line(r#"{"op":"status","id":1,"statusCode":"SUCCESS","connectionClosed":false}"#);
    let sent = h.sent_lines();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(sent[0].starts_with(r#"{"op":"marketSubscription","id":2,"#));
    // Once logged in, a new subscription goes out at once.
    h.s.subscribe_orders(orders(), h.now).unwrap();
    h.pump();
    let sent = h.sent_lines();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(sent[0].starts_with(r#"{"op":"orderSubscription","id":3,"#));
}

#[test]
/// A filter pretty-printed across lines (read from a file, say) is sent on one line: as it
/// was, it split the request into lines Betfair cannot parse, and set before the login it
/// failed without a word. A line the application sends with a line break in it is refused
/// as that, not as a stream that is not open.
fn line_breaks_in_a_subscriptions_json_go_out_as_spaces() {
    let mut h = Harness::new(config());
    h.s.subscribe_markets(
        BetfairSubscription {
            filter_json: "{\r\n  \"marketIds\": [\"1.2345\"]\r\n}".into(),
            data_filter_json: Some("{\n\"fields\":[\"EX_BEST_OFFERS\"]\n}".into()),
            heartbeat_ms: None,
            conflate_ms: None,
        },
        h.now,
    )
    .unwrap();
    h.connect();
    h.feed_line(r#"{"op":"connection","connectionId":"002-1"}"#);
    assert_eq!(h.sent_lines().len(), 1, "the authentication");
    h.feed_line(r#"{"op":"status","id":1,"statusCode":"SUCCESS","connectionClosed":false}"#);
    assert_eq!(
        h.sent_lines(),
        [concat!(
            r#"{"op":"marketSubscription","id":2,"marketFilter":{    "marketIds": ["1.2345"]  },"#,
            r#""marketDataFilter":{ "fields":["EX_BEST_OFFERS"] }}"#
        )]
    );
    assert_eq!(
        h.s.send_text("{\"op\":\"heartbeat\"}\r\n{}"),
        Err(feedwire_core::StreamError::DelimiterInLine)
    );
    assert_eq!(h.sent_lines(), Vec::<String>::new());
}

#[test]
/// A subscription replaced by another: messages still arriving for the old one carry its
/// positions, which must not become the new one's — a reconnect before the new image came
/// would resume the new filter from the old stream's position (no image for it).
fn a_replaced_subscription_resumes_only_from_its_own_positions() {
    let mut h = subscribed();
    feed_the_image(&mut h);
    h.s.subscribe_markets(
        BetfairSubscription {
            filter_json: r#"{"marketIds":["1.999"]}"#.into(),
            data_filter_json: None,
            heartbeat_ms: None,
            conflate_ms: None,
        },
        h.now,
    )
    .unwrap();
    h.pump();
    assert_eq!(h.sent_lines().len(), 1, "the new subscription");
    // The old subscription's delta, still on its way when the new one was sent.
    h.feed_line(r#"{"op":"mcm","id":2,"clk":"OLD","pt":2,"mc":[]}"#);
    let resubscription = |h: &mut Harness, auth_id: u64| {
        reconnect_to_the_greeting(h);
        h.feed_line(&format!(
            r#"{{"op":"status","id":{auth_id},"statusCode":"SUCCESS"}}"#
        ));
        h.sent_lines().pop().unwrap()
    };
    assert_eq!(
        resubscription(&mut h, 4),
        r#"{"op":"marketSubscription","id":5,"marketFilter":{"marketIds":["1.999"]}}"#,
        "no position yet: a full image"
    );
    // Its own image and deltas, then a reconnect: resumed from them.
    h.feed_line(
        r#"{"op":"mcm","id":5,"initialClk":"N1","clk":"NEW1","ct":"SUB_IMAGE","pt":3,"mc":[]}"#,
    );
    h.feed_line(r#"{"op":"mcm","id":5,"clk":"NEW2","pt":4,"mc":[]}"#);
    assert_eq!(
        resubscription(&mut h, 6),
        r#"{"op":"marketSubscription","id":7,"marketFilter":{"marketIds":["1.999"]},"initialClk":"N1","clk":"NEW2"}"#
    );
}

#[test]
/// Two replacements within a round trip: the first one's image (request 3) arrives after the
/// second (request 4) went out. It is not the subscription's: a reconnect before request 4's
/// own image must ask for a full image, not resume the latest filter from request 3's
/// position (markets only request 4 names would never get one).
fn an_image_of_a_replaced_request_is_not_the_subscriptions_position() {
    let mut h = subscribed();
    feed_the_image(&mut h);
    h.feed_line(r#"{"op":"mcm","id":2,"clk":"AAB","pt":2,"mc":[]}"#);
    let filter = |market: &str| BetfairSubscription {
        filter_json: format!(r#"{{"marketIds":["{market}"]}}"#),
        data_filter_json: None,
        heartbeat_ms: None,
        conflate_ms: None,
    };
    for market in ["1.3", "1.4"] {
        h.s.subscribe_markets(filter(market), h.now).unwrap();
    }
    h.pump();
    assert_eq!(h.sent_lines().len(), 2, "requests 3 and 4");
    h.feed_line(r#"{"op":"status","id":3,"statusCode":"SUCCESS","connectionClosed":false}"#);
    h.feed_line(
        r#"{"op":"mcm","id":3,"initialClk":"R3","clk":"R3A","ct":"SUB_IMAGE","pt":3,"mc":[]}"#,
    );
    h.feed_line(r#"{"op":"mcm","id":3,"clk":"R3B","pt":4,"mc":[]}"#);
    reconnect_to_the_greeting(&mut h);
    h.feed_line(r#"{"op":"status","id":5,"statusCode":"SUCCESS"}"#);
    assert_eq!(
        h.sent_lines().pop().unwrap(),
        r#"{"op":"marketSubscription","id":6,"marketFilter":{"marketIds":["1.4"]}}"#,
        "no position of its own yet: a full image"
    );
}

#[test]
/// Line streams bound the application's lines waiting for the transport too (the default
/// limit, 16 MiB, reached with 1 MiB lines).
fn application_lines_are_refused_while_max_send_queue_bytes_wait() {
    let mut h = Harness::betfair_authenticated();
    h.sent_lines();
    let line = format!(r#"{{"op":"heartbeat","pad":"{}"}}"#, "p".repeat(1 << 20));
    let (sent, refused) = h.send_until_refused(&line, 100);
    assert!(
        matches!(refused, feedwire_core::StreamError::SendQueueFull { max, .. } if max == 16 << 20),
        "{refused:?}"
    );
    assert_eq!(sent, 16);
    h.pump();
    assert_eq!(h.sent_lines().len(), 16);
    h.s.send_text(r#"{"op":"heartbeat","id":9}"#).unwrap();
}

#[test]
/// A session token renewed by a new login: set on the live stream, the next connection's
/// login carries it and resumes the subscription from its position; the current connection,
/// logged in already, is left as it is. Before, the only way was a new stream — the old
/// one's reconnect failed its login with the old token (fatal) — starting from full images.
fn renewed_credentials_are_used_from_the_next_login() {
    let mut h = subscribed();
    h.feed_line(
        r#"{"op":"mcm","id":2,"initialClk":"I1","clk":"C1","ct":"SUB_IMAGE","pt":1,"mc":[]}"#,
    );
    let renewed = BetfairAuth {
        app_key: "appkey".into(),
        session: "renewed".into(),
    };
    h.s.set_betfair_auth(renewed.clone()).unwrap();
    h.pump();
    assert_eq!(h.sent_lines(), Vec::<String>::new(), "no second login now");
    let bad = BetfairAuth {
        session: "a\"b".into(),
        ..renewed
    };
    assert_eq!(
        h.s.set_betfair_auth(bad),
        Err(feedwire_core::StreamError::InvalidCredential)
    );
    reconnect_to_the_greeting(&mut h);
    assert_eq!(
        h.sent_lines(),
        [r#"{"op":"authentication","id":3,"appKey":"appkey","session":"renewed"}"#]
    );
    h.feed_line(r#"{"op":"status","id":3,"statusCode":"SUCCESS"}"#);
    let resubscription = h.sent_lines().pop().unwrap();
    assert!(
        resubscription.ends_with(r#""initialClk":"I1","clk":"C1"}"#),
        "{resubscription}"
    );
    assert_eq!(h.state(), StreamState::Open);

    let mut binance = Harness::new(StreamConfig::binance_stream("ws://127.0.0.1:1/ws"));
    assert_eq!(
        binance.s.set_betfair_auth(BetfairAuth {
            app_key: "k".into(),
            session: "s".into()
        }),
        Err(feedwire_core::StreamError::NotSupported)
    );
}

#[test]
/// A large image comes in segments (`SEG_START` with the `initialClk`, `SEG`, `SEG_END` with
/// the `clk`). A connection lost before the last must ask for a whole new image: resuming
/// from the first segment's `initialClk` would leave the markets of the missing segments
/// with no image at all. Once the image is whole, a reconnect resumes from it.
fn a_connection_lost_inside_a_segmented_image_asks_for_a_new_image() {
    let segment = |id: u64, kind: &str, tokens: &str| {
        format!(
            r#"{{"op":"mcm","id":{id},{tokens}"pt":1,"ct":"SUB_IMAGE","segmentType":"{kind}","mc":[{{"id":"1.2345","img":true}}]}}"#
        )
    };
    let mut h = subscribed();
    h.feed_line(&segment(2, "SEG_START", r#""initialClk":"S1","#));
    h.feed_line(&segment(2, "SEG", ""));
    reconnect_to_the_greeting(&mut h);
    h.feed_line(r#"{"op":"status","id":3,"statusCode":"SUCCESS"}"#);
    assert_eq!(
        h.sent_lines().pop().unwrap(),
        r#"{"op":"marketSubscription","id":4,"heartbeatMs":5000,"marketFilter":{"marketIds":["1.2345"]},"marketDataFilter":{"fields":["EX_BEST_OFFERS"]}}"#,
        "no position: a whole new image"
    );

    h.feed_line(&segment(4, "SEG_START", r#""initialClk":"S4","#));
    h.feed_line(&segment(4, "SEG", ""));
    h.feed_line(&segment(4, "SEG_END", r#""clk":"S4A","#));
    h.feed_line(r#"{"op":"mcm","id":4,"clk":"S4B","pt":2,"mc":[]}"#);
    reconnect_to_the_greeting(&mut h);
    h.feed_line(r#"{"op":"status","id":5,"statusCode":"SUCCESS"}"#);
    assert!(
        h.sent_lines()
            .pop()
            .unwrap()
            .ends_with(r#""initialClk":"S4","clk":"S4B"}"#),
        "resumes from the whole image's position"
    );
}

#[test]
/// A status line without an id once the connection is open (Betfair's notice before it
/// closes a connection, say) is reported as it is: only the greeting — the first line,
/// while the stream waits for it — opens the session and sends a login.
fn a_status_without_an_id_after_the_greeting_is_unsolicited() {
    let mut h = subscribed();
    h.take_events();
    let notice =
        r#"{"op":"status","statusCode":"FAILURE","errorCode":"TIMEOUT","connectionClosed":true}"#;
    h.feed_line(notice);
    assert_eq!(
        h.take_events(),
        [StreamEvent::UnsolicitedResponse {
            id: None,
            payload: bytes::Bytes::from(notice),
            is_error: true,
        }]
    );
    assert_eq!(h.sent_lines(), Vec::<String>::new(), "no second login");
    assert_eq!(h.state(), StreamState::Open);
}

/// Each login after a reconnect: the events up to and with its answer.
fn login_after_a_reconnect(h: &mut Harness, auth_id: u64) -> Vec<StreamEvent> {
    reconnect_to_the_greeting(h);
    h.feed_line(&format!(
        r#"{{"op":"status","id":{auth_id},"statusCode":"SUCCESS"}}"#
    ));
    h.take_events()
}

#[test]
/// After a reconnect's login, `Resubscribed` counts the subscriptions sent again — markets
/// and orders, two — and a stream with none has nothing to report. The statistics count
/// a subscription from the call that sets it, not from the next read.
fn a_reconnect_reports_how_many_subscriptions_went_out_again() {
    let mut h = subscribed();
    h.s.subscribe_orders(orders(), h.now).unwrap();
    h.pump();
    assert_eq!(h.sent_lines().len(), 1, "the order subscription");
    assert_eq!(h.s.stats_handle().snapshot(h.now).subscriptions, 2);
    let evs = login_after_a_reconnect(&mut h, 4);
    let ops: Vec<String> = h
        .sent_lines()
        .iter()
        .map(|l| l.split('"').nth(3).unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        ops,
        ["authentication", "marketSubscription", "orderSubscription"]
    );
    assert!(
        evs.contains(&StreamEvent::Resubscribed { count: 2 }),
        "{evs:?}"
    );

    let mut h = Harness::new(config());
    assert_eq!(h.s.stats_handle().snapshot(h.now).subscriptions, 0);
    h.connect();
    h.feed_line(r#"{"op":"connection","connectionId":"002-1"}"#);
    h.feed_line(r#"{"op":"status","id":1,"statusCode":"SUCCESS"}"#);
    let evs = login_after_a_reconnect(&mut h, 2);
    assert!(evs.contains(&StreamEvent::Authenticated), "{evs:?}");
    assert!(
        !evs.iter()
            .any(|e| matches!(e, StreamEvent::Resubscribed { .. })),
        "{evs:?}"
    );
}

#[test]
/// The first-data wait starts with the subscriptions the login sends: a subscribed
/// connection that gets no data within it is replaced; one with nothing subscribed (it
/// waits for the application's subscription) is not.
fn the_first_data_wait_runs_only_for_subscriptions_sent_at_the_login() {
    let wait = Duration::from_secs(5);
    let quiet = || {
        let mut c = config();
        c.timeouts.first_data = Some(wait);
        c.timeouts.idle = None;
        c
    };
    let mut h = Harness::new(quiet());
    h.connect();
    h.feed_line(r#"{"op":"connection","connectionId":"002-1"}"#);
    h.feed_line(r#"{"op":"status","id":1,"statusCode":"SUCCESS"}"#);
    h.take_events();
    h.advance(wait * 4);
    assert_eq!(h.take_events(), Vec::<StreamEvent>::new());
    assert_eq!(h.state(), StreamState::Open);

    let mut h = Harness::new(quiet());
    h.s.subscribe_markets(markets(), h.now).unwrap();
    h.connect();
    h.feed_line(r#"{"op":"connection","connectionId":"002-1"}"#);
    h.feed_line(r#"{"op":"status","id":1,"statusCode":"SUCCESS"}"#);
    h.take_events();
    h.advance(wait);
    let evs = h.take_events();
    assert!(
        matches!(reconnect_reason(&evs), Some(EndReason::FirstDataTimeout)),
        "{evs:?}"
    );
}

#[test]
/// The order feed keeps its own position, from its `ocm` messages: a reconnect resumes the
/// order subscription from it, and a refusal of that position asks for a new order image
/// at once — as for markets.
fn the_order_feed_resumes_from_its_own_position() {
    let mut h = subscribed();
    feed_the_image(&mut h);
    h.s.subscribe_orders(orders(), h.now).unwrap();
    h.pump();
    assert_eq!(
        h.sent_lines(),
        [r#"{"op":"orderSubscription","id":3,"orderFilter":{}}"#]
    );
    h.feed_line(
        r#"{"op":"ocm","id":3,"initialClk":"O1","clk":"OA","ct":"SUB_IMAGE","pt":2,"oc":[]}"#,
    );
    h.feed_line(r#"{"op":"ocm","id":3,"clk":"OB","pt":3,"oc":[]}"#);
    reconnect_to_the_greeting(&mut h);
    h.feed_line(r#"{"op":"status","id":4,"statusCode":"SUCCESS"}"#);
    let sent = h.sent_lines();
    assert!(
        sent[2].starts_with(r#"{"op":"orderSubscription","id":6,"#)
            && sent[2].ends_with(r#""initialClk":"O1","clk":"OB"}"#),
        "{sent:?}"
    );
    assert!(
        sent[1].ends_with(r#""initialClk":"G1Fw","clk":"AAA"}"#),
        "markets' own"
    );
    h.feed_line(r#"{"op":"status","id":6,"statusCode":"FAILURE","errorCode":"INVALID_CLOCK","connectionClosed":false}"#);
    assert_eq!(
        h.sent_lines(),
        [r#"{"op":"orderSubscription","id":7,"orderFilter":{}}"#]
    );
    assert_eq!(h.state(), StreamState::Open);
}
