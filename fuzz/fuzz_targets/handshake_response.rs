//! Arbitrary bytes as the server's handshake response (and whatever follows), with arbitrary
//! read splits. Checks: no panic; a rejected or failed handshake sends nothing after the
//! request; the outcome does not depend on the splits — what is sent neither, but for how
//! many Pings a Pong answers (one per Ping until 8 KiB of Pongs wait unsent, then only the
//! latest: how many wait depends on where reads fell), the latest always answered.
#![no_main]

use feedwire_core::testing::decode_client_frames;
use feedwire_core::{Event, WebSocketClient, WsConfig};
use libfuzzer_sys::fuzz_target;

/// Frames sent after the request: those other than Pongs, and the last Pong's payload.
type Sent = (Vec<(bool, u8, Vec<u8>)>, Option<Vec<u8>>);

fn run(data: &[u8], chunk: usize) -> (Vec<Event>, Sent) {
    let config = WsConfig {
        max_handshake_size: 2048,
        subprotocols: vec!["json".into()],
        ..WsConfig::default()
    };
    let mut ws = WebSocketClient::new("ws://127.0.0.1:1/x", config, [9; 32]).expect("valid config");
    while ws.poll_transmit().is_some() {}
    let mut events = Vec::new();
    let mut sent = Vec::new();
    for piece in data.chunks(chunk.max(1)) {
        ws.handle_input(piece);
        events.extend(std::iter::from_fn(|| ws.poll_event()));
        while let Some(c) = ws.poll_transmit() {
            sent.extend_from_slice(&c);
        }
    }
    ws.handle_eof();
    events.extend(std::iter::from_fn(|| ws.poll_event()));
    while let Some(c) = ws.poll_transmit() {
        sent.extend_from_slice(&c);
    }
    let frames = decode_client_frames(&sent);
    let last_pong = frames
        .iter()
        .rev()
        .find(|f| f.1 == 0xA)
        .map(|f| f.2.clone());
    let others = frames.into_iter().filter(|f| f.1 != 0xA).collect();
    (events, (others, last_pong))
}

fuzz_target!(|input: &[u8]| {
    let [chunk, data @ ..] = input else { return };
    let (reference, ref_sent) = run(data, usize::MAX);
    let (split, sent) = run(data, usize::from(*chunk) + 1);
    assert_eq!(reference, split, "handshake outcome depends on read splits");
    assert_eq!(ref_sent, sent);
});
