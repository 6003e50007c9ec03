//! RFC 6455 §5.3 and §5.4 on the sending side: masking with fresh keys, fragmentation,
//! zero-copy owned payloads.

mod common;

use bytes::BytesMut;
use common::*;
use feedwire_core::{MessageKind, WsConfig};

#[test]
fn text_and_binary_round_trip_through_the_mask() {
    let mut ws = open_client(WsConfig::default());
    for len in [0usize, 1, 125, 126, 1024, 1025, 65535, 65536, 300_000] {
        let data: Vec<u8> = (0..len).map(|i| (i * 13) as u8).collect();
        ws.send_binary(&data).unwrap();
        assert_eq!(
            sent_frames(&mut ws),
            vec![(true, 2, data.clone())],
            "len {len}"
        );
        ws.send_owned(MessageKind::Binary, BytesMut::from(&data[..]))
            .unwrap();
        assert_eq!(
            sent_frames(&mut ws),
            vec![(true, 2, data)],
            "owned len {len}"
        );
    }
    ws.send_text("{\"method\":\"SUBSCRIBE\"}").unwrap();
    assert_eq!(
        sent_frames(&mut ws),
        vec![(true, 1, b"{\"method\":\"SUBSCRIBE\"}".to_vec())]
    );
}

#[test]
fn every_frame_gets_a_fresh_mask_key() {
    let mut ws = open_client(WsConfig::default());
    let mut keys = std::collections::HashSet::new();
    for _ in 0..100 {
        ws.send_text("same").unwrap();
        let bytes = drain_tx(&mut ws);
        keys.insert(bytes[2..6].to_vec());
    }
    assert!(keys.len() >= 99, "keys repeat: {}", keys.len());
}

#[test]
fn large_owned_payload_is_queued_without_copy() {
    let mut ws = open_client(WsConfig::default());
    let payload = BytesMut::from(&vec![b'a'; 10_000][..]);
    let ptr = payload.as_ptr();
    ws.send_owned(MessageKind::Text, payload).unwrap();
    let header = ws.poll_transmit().unwrap();
    assert_eq!(header.len(), 8);
    let body = ws.poll_transmit().unwrap();
    assert_eq!(body.as_ptr(), ptr, "masked in place, same allocation");
}

#[test]
fn outgoing_messages_fragment_at_the_configured_size() {
    let mut ws = open_client(WsConfig {
        fragment_size: Some(4),
        ..WsConfig::default()
    });
    ws.send_text("abcdefghij").unwrap();
    assert_eq!(
        sent_frames(&mut ws),
        vec![
            (false, 1, b"abcd".to_vec()),
            (false, 0, b"efgh".to_vec()),
            (true, 0, b"ij".to_vec())
        ]
    );
    ws.send_owned(MessageKind::Binary, BytesMut::from(&b"12345678"[..]))
        .unwrap();
    assert_eq!(
        sent_frames(&mut ws),
        vec![(false, 2, b"1234".to_vec()), (true, 0, b"5678".to_vec())]
    );
}
