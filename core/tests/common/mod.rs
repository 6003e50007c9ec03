//! Shared helpers: a scripted server peer in memory, no sockets.
#![allow(
    dead_code,
    unreachable_pub,
    reason = "each test file uses a different subset"
)]

use feedwire_core::testing::{accept_response, decode_client_frames};
use feedwire_core::{Event, WebSocketClient, WsConfig};

pub const SEED: [u8; 32] = [7; 32];

/// Every vector width a fast lane can run compiled for, widest first (the CPU's own cap
/// applies: on a machine without AVX-512 the first two are one).
pub const LANE_WIDTHS: [feedwire_core::VectorWidth; 3] = [
    feedwire_core::VectorWidth::Bits512,
    feedwire_core::VectorWidth::Bits256,
    feedwire_core::VectorWidth::Bits128,
];

/// Message lengths (bytes) around the UTF-8 checks' vectors (16, 32, 64) and strides (256,
/// 512), and past them.
pub const LANE_LENGTHS: [usize; 15] = [
    10, 31, 32, 63, 64, 65, 190, 255, 256, 300, 511, 512, 513, 1000, 9000,
];

/// A server text frame of spaces exactly `len` bytes long, header included (`len` ≥ 130):
/// a whole read of filler, which makes reads ramp up from 1 KiB to hold a longer test read.
pub fn filler_frame(len: usize) -> Vec<u8> {
    let header = if len - 4 <= usize::from(u16::MAX) {
        4
    } else {
        10
    };
    feedwire_core::testing::server_frame(true, 1, &vec![b' '; len - header])
}
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
