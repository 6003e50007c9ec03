//! Arbitrary bytes as the server's handshake response (and whatever follows), with arbitrary
//! read splits. Checks: no panic; a rejected or failed handshake sends nothing after the
//! request; the outcome does not depend on the splits.
#![no_main]

use feedwire_core::{Event, WebSocketClient, WsConfig};
use libfuzzer_sys::fuzz_target;

fn run(data: &[u8], chunk: usize) -> (Vec<Event>, usize) {
    let config = WsConfig {
        max_handshake_size: 2048,
        subprotocols: vec!["json".into()],
        ..WsConfig::default()
    };
    let mut ws = WebSocketClient::new("ws://127.0.0.1:1/x", config, [9; 32]).expect("valid config");
    while ws.poll_transmit().is_some() {}
    let mut events = Vec::new();
    let mut sent = 0;
    for piece in data.chunks(chunk.max(1)) {
        ws.handle_input(piece);
        events.extend(std::iter::from_fn(|| ws.poll_event()));
        while let Some(c) = ws.poll_transmit() {
            sent += c.len();
        }
    }
    ws.handle_eof();
    events.extend(std::iter::from_fn(|| ws.poll_event()));
    while let Some(c) = ws.poll_transmit() {
        sent += c.len();
    }
    (events, sent)
}

fuzz_target!(|input: &[u8]| {
    let [chunk, data @ ..] = input else { return };
    let (reference, ref_sent) = run(data, usize::MAX);
    let (split, sent) = run(data, usize::from(*chunk) + 1);
    assert_eq!(reference, split, "handshake outcome depends on read splits");
    assert_eq!(ref_sent, sent);
});
