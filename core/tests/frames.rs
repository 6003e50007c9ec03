//! RFC 6455 §5 and §8: receiving frames, and failing the connection with the right code.

mod common;

use common::*;
use feedwire_core::testing::server_frame;
use feedwire_core::{
    ConfigError, Error, Event, MessageKind, ProtocolError, State, WebSocketClient, WsConfig,
};

/// Feeds `bytes` to an open client; expects the connection to fail with `error`, a Close
/// with `error`'s code on the wire, and nothing after it.
fn assert_fails(bytes: &[u8], error: ProtocolError, code: u16) {
    let mut ws = open_client(WsConfig::default());
    ws.handle_input(bytes);
    let evs = events(&mut ws);
    assert_eq!(
        evs.last(),
        Some(&Event::Failed(Error::Protocol(error.clone()))),
        "{evs:?}"
    );
    assert_eq!(error.close_code(), code);
    assert_eq!(
        sent_frames(&mut ws),
        vec![(true, 0x8, code.to_be_bytes().to_vec())]
    );
    assert_eq!(ws.state(), State::Failed);
    assert_eq!(ws.error(), Some(&Error::Protocol(error)));
    ws.handle_input(&server_frame(true, 1, b"after"));
    assert!(events(&mut ws).is_empty(), "terminal state ignores input");
    assert!(ws.is_finished());
}

#[test]
fn section_5_1_masked_server_frame_is_1002() {
    assert_fails(
        &[0x81, 0x81, 1, 2, 3, 4, b'a' ^ 1],
        ProtocolError::MaskedFrame,
        1002,
    );
}

#[test]
fn section_5_2_rsv_bits_are_1002() {
    assert_fails(&[0xC1, 0], ProtocolError::ReservedBits(0b100), 1002);
}

#[test]
fn section_5_2_reserved_opcodes_are_1002() {
    for op in [3u8, 7, 0xB, 0xF] {
        assert_fails(
            &server_frame(true, op, b""),
            ProtocolError::ReservedOpcode(op),
            1002,
        );
    }
}

#[test]
fn section_5_2_length_top_bit_is_1002() {
    assert_fails(
        &[0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 0],
        ProtocolError::LengthTopBitSet,
        1002,
    );
}

#[test]
fn section_5_4_continuation_without_start_is_1002() {
    assert_fails(
        &server_frame(true, 0, b"x"),
        ProtocolError::UnexpectedContinuation,
        1002,
    );
}

#[test]
fn section_5_4_new_message_inside_fragmented_is_1002() {
    let mut bytes = server_frame(false, 1, b"a");
    bytes.extend(server_frame(true, 2, b"b"));
    assert_fails(&bytes, ProtocolError::ExpectedContinuation, 1002);
}

#[test]
fn section_5_5_control_frame_rules_are_1002() {
    assert_fails(
        &server_frame(false, 9, b""),
        ProtocolError::FragmentedControlFrame,
        1002,
    );
    assert_fails(
        &server_frame(true, 9, &[0; 126]),
        ProtocolError::ControlFrameTooLong(126),
        1002,
    );
}

#[test]
fn section_5_5_1_close_payload_rules() {
    assert_fails(
        &server_frame(true, 8, &[3]),
        ProtocolError::CloseFrameOneByte,
        1002,
    );
    assert_fails(
        &server_frame(true, 8, &close_payload(1005, "")),
        ProtocolError::InvalidCloseCode(1005),
        1002,
    );
    assert_fails(
        &server_frame(true, 8, &[0x03, 0xE8, 0xFF]),
        ProtocolError::InvalidCloseReason,
        1007,
    );
}

#[test]
fn section_8_1_invalid_utf8_is_1007() {
    assert_fails(
        &server_frame(true, 1, b"ok \xff"),
        ProtocolError::InvalidUtf8,
        1007,
    );
    // Truncated character at the end of the message.
    assert_fails(
        &server_frame(true, 1, b"\xe2\x82"),
        ProtocolError::InvalidUtf8,
        1007,
    );
}

#[test]
fn section_8_1_invalid_utf8_fails_fast_across_fragments() {
    let mut ws = open_client(WsConfig::default());
    // The first fragment is already invalid: no need to wait for the rest.
    ws.handle_input(&server_frame(false, 1, b"\xce\xba\xed\xa0\x80"));
    assert_eq!(
        events(&mut ws),
        vec![Event::Failed(ProtocolError::InvalidUtf8.into())]
    );
}

#[test]
fn section_8_1_invalid_utf8_fails_fast_inside_a_partial_frame() {
    let mut ws = open_client(WsConfig::default());
    let frame = server_frame(true, 1, &[&b"\xff"[..], &[b'a'; 1000]].concat());
    ws.handle_input(&frame[..10]);
    assert_eq!(
        events(&mut ws),
        vec![Event::Failed(ProtocolError::InvalidUtf8.into())]
    );
}

#[test]
fn utf8_split_across_fragments_is_valid() {
    let mut ws = open_client(WsConfig::default());
    let text = "€uro 𝄞".as_bytes();
    let mut bytes = server_frame(false, 1, &text[..1]);
    bytes.extend(server_frame(false, 0, &text[1..5]));
    bytes.extend(server_frame(true, 0, &text[5..]));
    ws.handle_input(&bytes);
    let evs = events(&mut ws);
    assert!(
        matches!(evs.as_slice(), [Event::Message(m)] if m.kind == MessageKind::Text && m.payload == text),
        "{evs:?}"
    );
}

#[test]
fn frame_over_limit_is_1009_before_its_payload_arrives() {
    let config = WsConfig {
        max_frame_size: 1000,
        ..WsConfig::default()
    };
    let mut ws = open_client(config);
    ws.handle_input(&[0x82, 126, 0x03, 0xE9]); // header only: 1001 bytes declared
    assert_eq!(
        events(&mut ws),
        vec![Event::Failed(
            ProtocolError::FrameTooLarge {
                len: 1001,
                max: 1000
            }
            .into()
        )]
    );
    assert_eq!(
        sent_frames(&mut ws),
        vec![(true, 8, 1009u16.to_be_bytes().to_vec())]
    );
}

/// A declared length is only the peer's word: with the limits lifted (`usize::MAX`), a header
/// declaring 2^62 bytes costs what actually arrives — not an allocation of 2^62 bytes, which
/// aborted the process — and a frame larger than the engine sizes up front still arrives
/// whole, its block growing with its bytes.
#[test]
fn a_declared_length_beyond_memory_costs_only_what_arrives() {
    let unlimited = WsConfig {
        max_frame_size: usize::MAX,
        max_message_size: usize::MAX,
        ..WsConfig::default()
    };
    let mut ws = open_client(unlimited.clone());
    let mut header = vec![0x82u8, 127];
    header.extend_from_slice(&(1u64 << 62).to_be_bytes());
    ws.handle_input(&header);
    ws.handle_input(&[7; 100_000]);
    assert!(events(&mut ws).is_empty());
    assert!(
        ws.read_buffer_capacity() <= 40 << 20,
        "{} bytes allocated for 100 KB received",
        ws.read_buffer_capacity()
    );
    // 48 MiB, past the 32 MiB sized up front: intact.
    let mut ws = open_client(unlimited);
    let payload: Vec<u8> = (0..48usize << 20).map(|i| (i % 251) as u8).collect();
    let frame = server_frame(true, 2, &payload);
    for piece in frame.chunks(3 << 20) {
        ws.handle_input(piece);
    }
    let evs = events(&mut ws);
    assert!(
        matches!(&evs[..], [Event::Message(m)] if m.payload == payload),
        "{} events",
        evs.len()
    );
}

#[test]
fn a_read_size_past_a_gibibyte_is_a_typed_error() {
    let config = WsConfig {
        max_read_size: (1 << 30) + 1,
        ..WsConfig::default()
    };
    assert!(matches!(
        WebSocketClient::new("ws://127.0.0.1:1/", config, [0; 32]),
        Err(ConfigError::LimitTooLarge { name: "max_read_size", max }) if max == 1 << 30
    ));
    let at_limit = WsConfig {
        max_read_size: 1 << 30,
        ..WsConfig::default()
    };
    assert!(WebSocketClient::new("ws://127.0.0.1:1/", at_limit, [0; 32]).is_ok());
}

#[test]
fn message_over_limit_is_1009_across_fragments() {
    let config = WsConfig {
        max_message_size: 10,
        ..WsConfig::default()
    };
    let mut ws = open_client(config);
    let mut bytes = server_frame(false, 2, &[1; 6]);
    bytes.extend(server_frame(true, 0, &[2; 5]));
    ws.handle_input(&bytes);
    assert_eq!(
        events(&mut ws),
        vec![Event::Failed(
            ProtocolError::MessageTooLarge { len: 11, max: 10 }.into()
        )]
    );
}

#[test]
fn a_single_frame_over_the_message_limit_is_1009_and_the_limit_itself_arrives() {
    // The message limit binds a message of one frame too, below the frame limit.
    let config = WsConfig {
        max_message_size: 10,
        ..WsConfig::default()
    };
    let mut ws = open_client(config.clone());
    ws.handle_input(&server_frame(true, 2, &[1; 11]));
    assert_eq!(
        events(&mut ws),
        vec![Event::Failed(
            ProtocolError::MessageTooLarge { len: 11, max: 10 }.into()
        )]
    );
    // Exactly the limit, in one frame or in two, is a message.
    let mut ws = open_client(config);
    let mut bytes = server_frame(true, 2, &[1; 10]);
    bytes.extend(server_frame(false, 2, &[2; 6]));
    bytes.extend(server_frame(true, 0, &[3; 4]));
    ws.handle_input(&bytes);
    let evs = events(&mut ws);
    assert!(
        matches!(&evs[..], [Event::Message(a), Event::Message(b)]
            if a.payload.len() == 10 && b.payload.len() == 10),
        "{evs:?}"
    );
}

#[test]
fn a_character_cut_short_by_an_empty_last_fragment_is_1007() {
    // The last fragment brings no bytes to validate; the message still ends inside `€`.
    let mut bytes = server_frame(false, 1, b"ok \xe2\x82");
    bytes.extend(server_frame(true, 0, b""));
    assert_fails(&bytes, ProtocolError::InvalidUtf8, 1007);
    // The same, the fragments in reads of their own.
    let mut ws = open_client(WsConfig::default());
    ws.handle_input(&server_frame(false, 1, b"ok \xe2\x82"));
    assert!(events(&mut ws).is_empty());
    ws.handle_input(&server_frame(true, 0, b""));
    assert_eq!(
        events(&mut ws),
        vec![Event::Failed(ProtocolError::InvalidUtf8.into())]
    );
}

#[test]
fn messages_before_a_violation_are_delivered() {
    let mut ws = open_client(WsConfig::default());
    let mut bytes = server_frame(true, 1, b"one");
    bytes.extend(server_frame(true, 2, b"two"));
    bytes.extend([0xC1, 0]);
    ws.handle_input(&bytes);
    let evs = events(&mut ws);
    assert_eq!(evs.len(), 3, "{evs:?}");
    assert!(matches!(&evs[0], Event::Message(m) if m.payload == "one"));
    assert!(
        matches!(&evs[1], Event::Message(m) if m.payload == "two" && m.kind == MessageKind::Binary)
    );
    assert!(matches!(&evs[2], Event::Failed(_)));
}

#[test]
fn lengths_7_16_64_bit_and_empty() {
    let mut ws = open_client(WsConfig::default());
    for len in [0usize, 1, 125, 126, 65535, 65536, 200_000] {
        let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        ws.handle_input(&server_frame(true, 2, &payload));
        let evs = events(&mut ws);
        assert!(
            matches!(evs.as_slice(), [Event::Message(m)] if m.payload == payload),
            "len {len}"
        );
    }
}

#[test]
fn eof_mid_frame_is_abnormal_1006() {
    let mut ws = open_client(WsConfig::default());
    ws.handle_input(&server_frame(true, 1, b"complete"));
    ws.handle_input(&server_frame(true, 1, b"half a frame")[..5]);
    ws.handle_eof();
    let evs = events(&mut ws);
    assert!(matches!(&evs[0], Event::Message(m) if m.payload == "complete"));
    assert_eq!(evs[1], Event::Failed(Error::UnexpectedEof));
    assert_eq!(Error::UnexpectedEof.close_code(), 1006);
    assert!(drain_tx(&mut ws).is_empty(), "1006 is never sent");
}

/// Fuzz finding (frame_decoder, first run): the reported length of an oversized control frame
/// depended on whether its extended length had arrived yet.
#[test]
fn oversized_control_frame_error_does_not_depend_on_read_splits() {
    let bytes = [0x89u8, 127, 0, 0, 0, 0, 0, 0, 1, 0];
    let mut whole = open_client(WsConfig::default());
    whole.handle_input(&bytes);
    let mut split = open_client(WsConfig::default());
    split.handle_input(&bytes[..3]);
    assert!(
        events(&mut split).is_empty(),
        "waits for the declared length"
    );
    split.handle_input(&bytes[3..]);
    let expected = vec![Event::Failed(
        ProtocolError::ControlFrameTooLong(256).into(),
    )];
    assert_eq!(events(&mut whole), expected);
    assert_eq!(events(&mut split), expected);
}

/// A message whose text is not UTF-8 fails the connection with 1007 from the fast lane too,
/// in every vector width it can run compiled for, the messages before it delivered: lengths
/// around the checks' vectors and strides, the bad byte near the end (past the first strides).
#[test]
fn section_8_1_invalid_utf8_is_1007_in_every_vector_width() {
    use feedwire_core::{limit_vector_width, VectorWidth};
    for cap in LANE_WIDTHS {
        let width = limit_vector_width(cap);
        for len in LANE_LENGTHS {
            let ascii = "a".repeat(len);
            let euro = format!("€{}", &ascii[3..]);
            let mut invalid = ascii.clone().into_bytes();
            invalid[len - 2] = 0xFF;
            let mut bytes = server_frame(true, 1, ascii.as_bytes());
            bytes.extend_from_slice(&server_frame(true, 1, euro.as_bytes()));
            bytes.extend_from_slice(&server_frame(true, 1, &invalid));
            let mut ws = open_client(WsConfig::default());
            // Whole reads of filler until one read can hold all of it (reads ramp up from
            // 1 KiB), so that every frame is in the lane's read.
            while ws.read_buf().len() < bytes.len() {
                let n = ws.read_buf().len();
                ws.handle_input(&filler_frame(n));
                assert!(matches!(&events(&mut ws)[..], [Event::Message(_)]));
            }
            ws.handle_input(&bytes);
            let evs = events(&mut ws);
            let invalid_utf8 = Event::Failed(Error::Protocol(ProtocolError::InvalidUtf8));
            assert!(
                matches!(
                    &evs[..],
                    [Event::Message(a), Event::Message(e), failed]
                        if a.payload == ascii.as_bytes()
                            && e.payload == euro.as_bytes()
                            && *failed == invalid_utf8
                ),
                "{width:?}, {len} bytes: {evs:?}"
            );
        }
    }
    limit_vector_width(VectorWidth::Bits512);
}
