//! Shared helpers: a scripted server peer in memory, no sockets.
#![allow(
    dead_code,
    unreachable_pub,
    reason = "each test file uses a different subset"
)]

use feedwire_core::testing::{accept_response, decode_client_frames};
use feedwire_core::{Event, WebSocketClient, WsConfig};

pub const SEED: [u8; 32] = [7; 32];
pub mod harness;

pub const URL: &str = "ws://127.0.0.1:9001/stream";

pub fn drain_tx(ws: &mut WebSocketClient) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(chunk) = ws.poll_transmit() {
        out.extend_from_slice(&chunk);
    }
    out
}

pub fn events(ws: &mut WebSocketClient) -> Vec<Event> {
    std::iter::from_fn(|| ws.poll_event()).collect()
}

/// A client that completed its handshake; its request and the Opened event are drained.
pub fn open_client(config: WsConfig) -> WebSocketClient {
    let mut ws = WebSocketClient::new(URL, config, SEED).expect("valid config");
    let request = drain_tx(&mut ws);
    ws.handle_input(&accept_response(&request));
    let evs = events(&mut ws);
    assert!(matches!(evs.as_slice(), [Event::Opened(_)]), "{evs:?}");
    ws
}

/// Frames the client sent since the last drain, unmasked: (fin, opcode, payload).
pub fn sent_frames(ws: &mut WebSocketClient) -> Vec<(bool, u8, Vec<u8>)> {
    decode_client_frames(&drain_tx(ws))
}

pub fn close_payload(code: u16, reason: &str) -> Vec<u8> {
    let mut p = code.to_be_bytes().to_vec();
    p.extend_from_slice(reason.as_bytes());
    p
}
