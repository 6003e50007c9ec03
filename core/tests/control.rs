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

/// Every Ping gets its Pong while the transport takes our bytes. Once it has left 8 KiB
/// unsent (its peer is not reading), RFC 6455 §5.5.3 lets the engine answer only the latest
/// Ping: a flood costs one owed Pong, not one per Ping.
#[test]
fn pings_are_answered_one_by_one_until_the_pongs_pile_up_then_only_the_latest() {
    let mut ws = open_client(WsConfig::default());
    let ping = |i: usize| server_frame(true, 9, format!("{i:0>120}").as_bytes());
    let ten: Vec<u8> = (0..10).flat_map(ping).collect();
    ws.handle_input(&ten);
    let pongs = sent_frames(&mut ws);
    assert_eq!(pongs.len(), 10, "one Pong per Ping");
    assert!(pongs
        .iter()
        .enumerate()
        .all(|(i, p)| p.2 == format!("{i:0>120}").as_bytes()));
    // Nothing taken by the transport while a thousand Pings arrive.
    let flood: Vec<u8> = (0..1000).flat_map(ping).collect();
    ws.handle_input(&flood);
    ws.handle_input(&ping(1000));
    assert_eq!(events(&mut ws).len(), 1011, "every Ping is still reported");
    let pongs = sent_frames(&mut ws);
    let queued = (8 * 1024usize).div_ceil(126); // 126-byte Pong frames queued under 8 KiB
    assert_eq!(
        pongs.len(),
        queued + 1,
        "the Pongs under 8 KiB, then the latest"
    );
    assert_eq!(
        pongs.last().unwrap().2,
        format!("{:0>120}", 1000).as_bytes()
    );
    // Once the queue is taken, the next Ping is answered again.
    ws.handle_input(&ping(1001));
    assert_eq!(sent_frames(&mut ws).len(), 1);
}

#[test]
fn pongs_are_queued_only_while_under_8_kib_unsent() {
    // 128-byte Pong frames (a 122-byte payload, 2-byte header, 4-byte mask): 64 of them
    // are 8 KiB exactly, so the 65th Ping's Pong is owed, and only the latest one goes out.
    let mut ws = open_client(WsConfig::default());
    let ping = |i: usize| server_frame(true, 9, format!("{i:0>122}").as_bytes());
    let pings: Vec<u8> = (0..100).flat_map(ping).collect();
    ws.handle_input(&pings);
    assert_eq!(ws.queued_bytes(), 8 * 1024);
    let pongs = sent_frames(&mut ws);
    assert_eq!(pongs.len(), 65);
    assert_eq!(pongs[63].2, format!("{:0>122}", 63).as_bytes());
    assert_eq!(pongs[64].2, format!("{:0>122}", 99).as_bytes());
}

#[test]
fn an_owed_pong_goes_out_after_queued_data_and_before_a_close() {
    let mut ws = open_client(WsConfig::default());
    ws.send_text("queued first").unwrap();
    ws.handle_input(&server_frame(true, 9, b"hb"));
    ws.close(1000, "bye", Instant::now()).unwrap();
    assert_eq!(
        sent_frames(&mut ws),
        vec![
            (true, 0x1, b"queued first".to_vec()),
            (true, 0xA, b"hb".to_vec()),
            (true, 0x8, close_payload(1000, "bye")),
        ]
    );
    // The peer's Close right behind a Ping: the Pong, then the echo; nothing after it.
    let mut ws = open_client(WsConfig::default());
    let mut bytes = server_frame(true, 9, b"hb");
    bytes.extend(server_frame(true, 8, &close_payload(1000, "")));
    bytes.extend(server_frame(true, 9, b"late"));
    ws.handle_input(&bytes);
    assert_eq!(
        sent_frames(&mut ws),
        vec![
            (true, 0xA, b"hb".to_vec()),
            (true, 0x8, 1000u16.to_be_bytes().to_vec()),
        ]
    );
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
    assert!(!ws.has_events());
    ws.handle_input(&server_frame(true, 0xA, b"p"));
    assert!(ws.has_events());
    assert_eq!(events(&mut ws), vec![Event::Pong("p".into())]);
    assert!(!ws.has_events());
    assert_eq!(
        ws.ping(&[0; 126]),
        Err(SendError::ControlPayloadTooLong(126))
    );
    ws.ping(&[7; 125]).unwrap();
    assert_eq!(sent_frames(&mut ws), vec![(true, 0x9, vec![7; 125])]);
}

#[test]
fn peer_close_is_echoed_then_closed() {
    let config = WsConfig {
        max_frame_size: 4096,
        ..WsConfig::default()
    };
    let mut ws = open_client(config.clone());
    assert_eq!(ws.config(), &config);
    assert!(!ws.is_finished(), "open");
    ws.handle_input(&server_frame(true, 8, &close_payload(1001, "going away")));
    assert_eq!(ws.state(), State::Closed);
    assert!(
        !ws.is_finished(),
        "closed, but the echoed Close is still queued"
    );
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
    // The longest reason: 123 bytes, a Close payload of 125.
    let longest = "y".repeat(123);
    ws.close(4000, &longest, now).unwrap();
    assert_eq!(ws.close(1000, "", now), Err(SendError::NotOpen));
    let mut payload = 4000u16.to_be_bytes().to_vec();
    payload.extend_from_slice(longest.as_bytes());
    assert_eq!(sent_frames(&mut ws), vec![(true, 0x8, payload)]);
}

#[test]
fn sending_before_open_is_misuse() {
    let mut ws = feedwire_core::WebSocketClient::new(URL, WsConfig::default(), SEED).unwrap();
    assert_eq!(ws.send_text("early"), Err(SendError::NotOpen));
}
