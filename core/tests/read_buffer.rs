//! The engine-owned read buffer: `max_read_size`, zero-copy delivery, reassembly of large
//! messages across reads, and the buffer returning to its normal size afterwards.

mod common;

use common::*;
use feedwire_core::testing::server_frame;
use feedwire_core::{Event, WsConfig};

#[test]
fn reads_are_capped_at_max_read_size() {
    let mut ws = open_client(WsConfig {
        max_read_size: 1000,
        ..WsConfig::default()
    });
    assert_eq!(ws.read_buf().len(), 1000);
}

#[test]
fn unfragmented_messages_are_slices_of_the_read_buffer() {
    let mut ws = open_client(WsConfig::default());
    let mut bytes = server_frame(true, 1, b"alpha");
    bytes.extend(server_frame(true, 1, b"beta"));
    let buf = ws.read_buf();
    buf[..bytes.len()].copy_from_slice(&bytes);
    let buf_start = buf.as_ptr() as usize;
    ws.handle_read(bytes.len());
    let evs = events(&mut ws);
    let Event::Message(a) = &evs[0] else {
        panic!("{evs:?}")
    };
    let Event::Message(b) = &evs[1] else {
        panic!("{evs:?}")
    };
    assert_eq!(a.payload.as_ptr() as usize, buf_start + 2, "zero-copy");
    assert_eq!(b.payload.as_ptr() as usize, buf_start + 9, "zero-copy");
}

#[test]
fn message_larger_than_max_read_size_is_reassembled_then_buffer_shrinks() {
    let max = 16 * 1024;
    let mut ws = open_client(WsConfig {
        max_read_size: max,
        ..WsConfig::default()
    });
    let payload: Vec<u8> = (0..450_000).map(|i| b'a' + (i % 26) as u8).collect();
    let mut bytes = server_frame(true, 1, &payload);
    bytes.extend(server_frame(true, 1, b"small after"));
    let mut fed = 0;
    let mut seen = Vec::new();
    let mut peak = 0;
    while fed < bytes.len() {
        let buf = ws.read_buf();
        assert!(buf.len() <= max);
        let n = buf.len().min(bytes.len() - fed);
        buf[..n].copy_from_slice(&bytes[fed..fed + n]);
        ws.handle_read(n);
        fed += n;
        peak = peak.max(ws.read_buffer_capacity());
        seen.extend(events(&mut ws));
    }
    assert_eq!(seen.len(), 2);
    assert!(matches!(&seen[0], Event::Message(m) if m.payload == payload));
    assert!(matches!(&seen[1], Event::Message(m) if m.payload == "small after"));
    assert!(
        peak >= bytes.len() - 20,
        "one block held the whole frame: {peak}"
    );
    drop(seen);
    // The large block is kept for reuse for a while (two retired blocks at most); a few
    // blocks' worth of ordinary traffic later, only normal-sized blocks remain.
    let small = server_frame(true, 1, &[b's'; 1000]);
    for _ in 0..(8 * 2 * max / small.len()) {
        let buf = ws.read_buf();
        buf[..small.len()].copy_from_slice(&small);
        ws.handle_read(small.len());
        drop(events(&mut ws));
    }
    let cap = ws.read_buffer_capacity();
    assert!(
        cap <= 3 * 2 * max,
        "back to normal blocks (current + two retired): {cap}"
    );
}

#[test]
fn block_is_kept_between_reads_and_released_on_request_when_idle() {
    let mut ws = open_client(WsConfig::default());
    ws.handle_input(&server_frame(true, 1, b"x"));
    events(&mut ws);
    let cap = ws.read_buffer_capacity();
    assert!(cap > 0, "kept: the next read reuses it without zeroing");
    ws.handle_input(&server_frame(true, 1, b"y"));
    assert_eq!(
        ws.read_buffer_capacity(),
        cap - 3,
        "same block, 3 bytes further on"
    );
    ws.handle_input(&server_frame(true, 1, b"partial")[..4]);
    assert!(!ws.release_read_buffer(), "a partial frame keeps its block");
    ws.handle_input(&server_frame(true, 1, b"partial")[4..]);
    assert!(ws.release_read_buffer());
    assert_eq!(ws.read_buffer_capacity(), 0);
    let evs = events(&mut ws);
    assert!(matches!(evs.last(), Some(Event::Message(m)) if m.payload == "partial"));
}
