//! RFC 6455 §5.5 and §7: ping/pong, and both directions of the close handshake.

mod common;

use std::time::{Duration, Instant};

use common::*;
use feedwire_core::testing::server_frame;
use feedwire_core::{CloseFrame, CloseInitiator, Error, Event, SendError, State, WsConfig};

#[test]
fn ping_is_answered_with_pong_of_the_same_payload() {
    let mut ws = open_client(WsConfig::default());
    ws.handle_input(&server_frame(true, 9, b"hb-42"));
    assert_eq!(sent_frames(&mut ws), vec![(true, 0xA, b"hb-42".to_vec())]);
    assert_eq!(events(&mut ws), vec![Event::Ping("hb-42".into())]);
}

#[test]
fn ping_between_fragments_does_not_disturb_the_message() {
    let mut ws = open_client(WsConfig::default());
    let mut bytes = server_frame(false, 1, b"frag");
    bytes.extend(server_frame(true, 9, b""));
    bytes.extend(server_frame(true, 0, b"ment"));
    ws.handle_input(&bytes);
    let evs = events(&mut ws);
    assert_eq!(evs[0], Event::Ping("".into()));
    assert!(matches!(&evs[1], Event::Message(m) if m.payload == "fragment"));
    assert_eq!(sent_frames(&mut ws), vec![(true, 0xA, vec![])]);
}

#[test]
fn pong_is_reported() {
    let mut ws = open_client(WsConfig::default());
    ws.ping(b"p").unwrap();
    assert_eq!(sent_frames(&mut ws), vec![(true, 0x9, b"p".to_vec())]);
    ws.handle_input(&server_frame(true, 0xA, b"p"));
    assert_eq!(events(&mut ws), vec![Event::Pong("p".into())]);
    assert_eq!(
        ws.ping(&[0; 126]),
        Err(SendError::ControlPayloadTooLong(126))
    );
}

#[test]
fn peer_close_is_echoed_then_closed() {
    let mut ws = open_client(WsConfig::default());
    ws.handle_input(&server_frame(true, 8, &close_payload(1001, "going away")));
    assert_eq!(
        sent_frames(&mut ws),
        vec![(true, 8, 1001u16.to_be_bytes().to_vec())]
    );
    let frame = CloseFrame {
        code: 1001,
        reason: "going away".into(),
    };
    assert_eq!(
        events(&mut ws),
        vec![
            Event::CloseStarted {
                by: CloseInitiator::Remote,
                frame: frame.clone()
            },
            Event::Closed {
                by: CloseInitiator::Remote,
                frame
            },
        ]
    );
    assert_eq!(ws.state(), State::Closed);
    assert!(ws.is_finished());
    assert_eq!(
        ws.send_text("late"),
        Err(SendError::NotOpen),
        "no frames after Closed"
    );
}

#[test]
fn empty_peer_close_is_echoed_empty() {
    let mut ws = open_client(WsConfig::default());
    ws.handle_input(&server_frame(true, 8, b""));
    assert_eq!(sent_frames(&mut ws), vec![(true, 8, vec![])]);
    let evs = events(&mut ws);
    assert!(matches!(evs.last(), Some(Event::Closed { frame, .. }) if frame.code == 1005));
}

#[test]
fn our_close_waits_for_the_peer_and_delivers_data_meanwhile() {
    let mut ws = open_client(WsConfig::default());
    let now = Instant::now();
    ws.close(1000, "bye", now).unwrap();
    assert_eq!(
        sent_frames(&mut ws),
        vec![(true, 8, close_payload(1000, "bye"))]
    );
    assert_eq!(ws.state(), State::Closing);
    assert_eq!(ws.poll_timeout(), Some(now + Duration::from_secs(5)));
    let mut bytes = server_frame(true, 1, b"in flight");
    bytes.extend(server_frame(true, 9, b"no pong after close"));
    bytes.extend(server_frame(true, 8, &close_payload(1000, "")));
    ws.handle_input(&bytes);
    let frame = CloseFrame {
        code: 1000,
        reason: "bye".into(),
    };
    let evs = events(&mut ws);
    assert_eq!(
        evs[0],
        Event::CloseStarted {
            by: CloseInitiator::Local,
            frame: frame.clone()
        }
    );
    assert!(matches!(&evs[1], Event::Message(m) if m.payload == "in flight"));
    assert!(matches!(&evs[2], Event::Ping(_)));
    assert_eq!(
        evs[3],
        Event::Closed {
            by: CloseInitiator::Local,
            frame
        }
    );
    assert!(
        sent_frames(&mut ws).is_empty(),
        "nothing is sent after our Close"
    );
    assert_eq!(ws.poll_timeout(), None);
}

#[test]
fn close_timeout_fires_only_at_the_deadline() {
    let mut ws = open_client(WsConfig {
        close_timeout: Duration::from_millis(300),
        ..WsConfig::default()
    });
    let now = Instant::now();
    ws.close(1000, "", now).unwrap();
    events(&mut ws);
    ws.handle_timeout(now + Duration::from_millis(299));
    assert_eq!(ws.state(), State::Closing);
    assert!(events(&mut ws).is_empty());
    ws.handle_timeout(now + Duration::from_millis(300));
    assert_eq!(events(&mut ws), vec![Event::Failed(Error::CloseTimeout)]);
    assert_eq!(ws.state(), State::Failed);
}

#[test]
fn close_argument_checks_change_nothing() {
    let mut ws = open_client(WsConfig::default());
    let now = Instant::now();
    assert_eq!(
        ws.close(1005, "", now),
        Err(SendError::InvalidCloseCode(1005))
    );
    assert_eq!(
        ws.close(1000, &"x".repeat(124), now),
        Err(SendError::ControlPayloadTooLong(126))
    );
    assert_eq!(ws.state(), State::Open);
    assert!(drain_tx(&mut ws).is_empty());
    ws.close(4000, "app", now).unwrap();
    assert_eq!(ws.close(1000, "", now), Err(SendError::NotOpen));
}

#[test]
fn sending_before_open_is_misuse() {
    let mut ws = feedwire_core::WebSocketClient::new(URL, WsConfig::default(), SEED).unwrap();
    assert_eq!(ws.send_text("early"), Err(SendError::NotOpen));
}
