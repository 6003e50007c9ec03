//! Property: any sequence of inputs and commands never panics, and once `stop` or `crash` was
//! called the stream reaches a terminal state (within the close timeout) and stays there;
//! one end event at most; after a `stop`, one data message at most (the one half received
//! then).

mod common;

use std::time::Duration;

use common::harness::Harness;
use feedwire_core::testing::{accept_response, server_frame};
use feedwire_core::{
    BetfairAuth, BetfairSubscription, StreamConfig, StreamEvent, TransportCommand,
};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Connect { accept: bool },
    ConnectFailed,
    Frame(u8, String),
    Line(String),
    Raw(Vec<u8>),
    Advance(u64),
    Subscribe(u8),
    Unsubscribe(u8),
    SendText,
    Eof,
    TransportError,
    Stop,
    Crash,
}

fn op() -> impl Strategy<Value = Op> {
    let json = prop_oneof![
        Just(r#"{"e":"aggTrade","p":"1"}"#.to_owned()),
        (0u8..6).prop_map(|id| format!(r#"{{"result":null,"id":{id}}}"#)),
        (0u8..6).prop_map(|id| format!(r#"{{"error":{{"code":2}},"id":{id}}}"#)),
        Just(r#"{"e":"serverShutdown"}"#.to_owned()),
        Just(r#"{"op":"connection","connectionId":"x"}"#.to_owned()),
        (0u8..6).prop_map(|id| format!(r#"{{"op":"status","id":{id},"statusCode":"SUCCESS"}}"#)),
        Just(r#"{"op":"mcm","id":2,"initialClk":"A","clk":"B","pt":1}"#.to_owned()),
        "[ -~]{0,40}",
    ];
    prop_oneof![
        2 => any::<bool>().prop_map(|accept| Op::Connect { accept }),
        1 => Just(Op::ConnectFailed),
        4 => (prop::sample::select(vec![1u8, 2, 8, 9, 10, 0, 3]), json.clone()).prop_map(|(o, j)| Op::Frame(o, j)),
        2 => json.prop_map(Op::Line),
        1 => prop::collection::vec(any::<u8>(), 0..40).prop_map(Op::Raw),
        3 => prop_oneof![0u64..100, 100u64..40_000].prop_map(Op::Advance),
        1 => any::<u8>().prop_map(Op::Subscribe),
        1 => any::<u8>().prop_map(Op::Unsubscribe),
        1 => Just(Op::SendText),
        1 => Just(Op::Eof),
        1 => Just(Op::TransportError),
        1 => Just(Op::Stop),
        1 => Just(Op::Crash),
    ]
}

fn apply(h: &mut Harness, op: &Op, betfair: bool) {
    let now = h.now;
    match op {
        Op::Connect { accept } => {
            if h.commands
                .iter()
                .any(|c| matches!(c, TransportCommand::Connect(_)))
            {
                h.commands.clear();
                h.connect();
                let req = std::mem::take(&mut h.sent);
                // Only a connection that really started has an upgrade request to answer.
                if *accept && !betfair && req.starts_with(b"GET ") {
                    h.feed(&accept_response(&req));
                }
            }
        }
        Op::ConnectFailed => h.s.handle_connect_failed("refused", now),
        Op::Frame(opcode, text) => {
            let payload = if *opcode == 8 {
                1000u16.to_be_bytes().to_vec()
            } else {
                text.as_bytes().to_vec()
            };
            h.feed(&server_frame(true, *opcode, &payload));
        }
        Op::Line(text) => h.feed(format!("{text}\r\n").as_bytes()),
        Op::Raw(bytes) => h.feed(bytes),
        Op::Advance(ms) => h.advance(Duration::from_millis(*ms)),
        Op::Subscribe(n) => {
            if betfair {
                let sub = BetfairSubscription {
                    filter_json: "{}".into(),
                    data_filter_json: None,
                    heartbeat_ms: None,
                    conflate_ms: None,
                };
                let _ = h.s.subscribe_markets(sub, now);
            } else {
                let _ = h.s.subscribe(&[&format!("s{}@trade", n % 8)], now);
            }
        }
        Op::Unsubscribe(n) => {
            let _ = h.s.unsubscribe(&[&format!("s{}@trade", n % 8)], now);
        }
        Op::SendText => {
            let _ = h.s.send_text("{}");
        }
        Op::Eof => h.s.handle_eof(now),
        Op::TransportError => h.s.handle_transport_error("reset", now),
        Op::Stop => h.s.stop(now),
        Op::Crash => h.s.crash("prop", now),
    }
    h.pump();
}

fn run(ops: &[Op], config: StreamConfig, betfair: bool) -> Result<(), TestCaseError> {
    let mut h = Harness::new(config);
    let mut ended_by_command = false;
    let mut ends = 0;
    // Data events after the first stop (the harness takes every event after each op, so
    // none queued before the stop is counted): at most the message half received then.
    let mut data_after_stop: Option<usize> = None;
    for op in ops {
        apply(&mut h, op, betfair);
        ended_by_command |= matches!(op, Op::Stop | Op::Crash);
        let events = h.take_events();
        ends += events
            .iter()
            .filter(|e| matches!(e, StreamEvent::Closed { .. } | StreamEvent::Crashed(_)))
            .count();
        prop_assert!(ends <= 1, "one end event: {:?}", events);
        if let Some(n) = data_after_stop.as_mut() {
            *n += events
                .iter()
                .filter(|e| matches!(e, StreamEvent::Data { .. }))
                .count();
            prop_assert!(*n <= 1, "data after stop: {:?}", events);
        }
        if matches!(op, Op::Stop) {
            data_after_stop.get_or_insert(0);
        }
    }
    if ended_by_command {
        h.advance(Duration::from_secs(10));
        prop_assert!(
            h.s.state().is_terminal(),
            "not terminal after stop/crash: {:?}",
            h.s.state()
        );
        h.take_events();
        h.take_commands();
        for op in ops.iter().take(20) {
            apply(&mut h, op, betfair);
        }
        h.advance(Duration::from_secs(60));
        prop_assert!(h.s.state().is_terminal());
        prop_assert!(h.take_events().is_empty(), "terminal states stay silent");
        prop_assert!(!h
            .take_commands()
            .iter()
            .any(|c| matches!(c, TransportCommand::Connect(_))));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn binance_websocket_stream_survives_any_op_sequence(ops in prop::collection::vec(op(), 0..60)) {
        run(&ops, StreamConfig::binance_stream("ws://127.0.0.1:9443/ws"), false)?;
    }

    /// The same, with the stop made while the stream is open (and often while data flows):
    /// the sequences above reach that rarely.
    #[test]
    fn binance_websocket_stream_stopped_while_open(
        before in prop::collection::vec(op(), 0..8),
        after in prop::collection::vec(op(), 0..24),
    ) {
        let ops: Vec<Op> = [Op::Connect { accept: true }]
            .into_iter()
            .chain(before)
            .chain([Op::Stop])
            .chain(after)
            .collect();
        run(&ops, StreamConfig::binance_stream("ws://127.0.0.1:9443/ws"), false)?;
    }

    #[test]
    fn betfair_line_stream_survives_any_op_sequence(ops in prop::collection::vec(op(), 0..60)) {
        let auth = BetfairAuth { app_key: "k".into(), session: "s".into() };
        run(&ops, StreamConfig::betfair("tls://127.0.0.1:4443", auth), true)?;
    }
}
