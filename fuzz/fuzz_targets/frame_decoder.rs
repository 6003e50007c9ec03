//! Arbitrary server bytes after a completed handshake, fed with arbitrary read splits and
//! `max_read_size`, every other read through `read_spare`. Checks: no panic, and the events
//! do not depend on the splits.
#![no_main]

use bytes::BufMut;
use feedwire_core::testing::accept_response;
use feedwire_core::{Event, WebSocketClient, WsConfig};
use libfuzzer_sys::fuzz_target;

fn run(data: &[u8], max_read_size: usize, splits: &[u8]) -> Vec<Event> {
    let config = WsConfig {
        max_read_size,
        max_frame_size: 1 << 20,
        max_message_size: 1 << 20,
        ..WsConfig::default()
    };
    let mut ws = WebSocketClient::new("ws://127.0.0.1:1/", config, [3; 32]).expect("valid config");
    let mut request = Vec::new();
    while let Some(chunk) = ws.poll_transmit() {
        request.extend_from_slice(&chunk);
    }
    ws.handle_input(&accept_response(&request));
    let mut events = Vec::new();
    let mut fed = 0;
    let mut i = 0;
    while fed < data.len() {
        let want = splits
            .get(i % splits.len().max(1))
            .map_or(usize::MAX, |&s| usize::from(s) + 1);
        // Every other read through the room as uninitialised memory, as a `recv` into spare
        // capacity would write it: the same room, the same events.
        let n = if i % 2 == 1 {
            let mut room = ws.read_spare();
            let n = room.remaining_mut().min(want).min(data.len() - fed);
            room.put_slice(&data[fed..fed + n]);
            n
        } else {
            let buf = ws.read_buf();
            let n = buf.len().min(want).min(data.len() - fed);
            buf[..n].copy_from_slice(&data[fed..fed + n]);
            n
        };
        ws.handle_read(n);
        fed += n;
        i += 1;
        events.extend(std::iter::from_fn(|| ws.poll_event()));
        while ws.poll_transmit().is_some() {}
    }
    ws.handle_eof();
    events.extend(std::iter::from_fn(|| ws.poll_event()));
    events
}

fuzz_target!(|input: &[u8]| {
    let [control, nsplits, rest @ ..] = input else {
        return;
    };
    let nsplits = usize::from(*nsplits % 8).min(rest.len());
    let (splits, data) = rest.split_at(nsplits);
    let max_read_size = 1 + usize::from(*control) * 37;
    let reference = run(data, 256 * 1024, &[]);
    let split = run(data, max_read_size, splits);
    assert_eq!(reference, split, "events depend on read splits");
});
