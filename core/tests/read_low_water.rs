//! `Stream::read_low_water`: the bytes worth waking up for. A large frame's rest while it
//! arrives; 1 whenever fewer bytes could matter (small frames, lines, the idle probe out,
//! closing).

mod common;

use std::time::Duration;

use common::harness::Harness;
use feedwire_core::testing::server_frame;
use feedwire_core::{StreamConfig, StreamEvent, StreamState, LOW_WATER_MIN};

fn open_stream() -> Harness {
    let mut h = Harness::new(StreamConfig::binance_stream("ws://127.0.0.1:9443/ws"));
    h.open_ws();
    h.take_events();
    h
}

/// A text frame of `len` payload bytes (a JSON object) and its header's length.
fn big_frame(len: usize) -> (Vec<u8>, usize) {
    let mut payload = br#"{"e":"big","d":""#.to_vec();
    payload.resize(len - 2, b'x');
    payload.extend_from_slice(br#""}"#);
    let frame = server_frame(true, 1, &payload);
    let header = frame.len() - len;
    (frame, header)
}

fn data_count(h: &mut Harness) -> usize {
    h.take_events()
        .iter()
        .filter(|e| matches!(e, StreamEvent::Data { .. }))
        .count()
}

#[test]
fn a_large_frame_asks_for_its_rest_until_it_completes() {
    let mut h = open_stream();
    assert_eq!(h.s.read_low_water(), 1, "nothing partly received");
    let (frame, header) = big_frame(300_000);
    h.feed(&frame[..header + 10_000]);
    assert_eq!(h.s.read_low_water(), 290_000);
    assert_eq!(
        h.s.socket_low_water(None),
        290_000,
        "no TLS: the same bytes"
    );
    h.feed(&frame[header + 10_000..header + 210_000]);
    assert_eq!(h.s.read_low_water(), 90_000);
    h.feed(&frame[header + 210_000..]);
    assert_eq!(data_count(&mut h), 1);
    assert_eq!(h.s.read_low_water(), 1, "the frame is done");
}

#[test]
fn a_rest_below_the_minimum_asks_for_one_byte() {
    let mut h = open_stream();
    let (frame, header) = big_frame(LOW_WATER_MIN + 1000);
    h.feed(&frame[..header + 500]);
    assert_eq!(h.s.read_low_water(), LOW_WATER_MIN + 500);
    h.feed(&frame[header + 500..header + 2000]);
    assert_eq!(
        h.s.read_low_water(),
        1,
        "{} bytes left",
        LOW_WATER_MIN - 1000
    );
    // A header alone, its length not known yet: nothing to wait for.
    let mut h = open_stream();
    h.feed(&frame[..1]);
    assert_eq!(h.s.read_low_water(), 1);
    // Binance's depth diffs (~9 KB) and 20 KB messages arrive in a read or two: setting
    // the mark for them would cost more system calls than the wake-ups it saves.
    let (frame, header) = big_frame(20_000);
    let mut h = open_stream();
    h.feed(&frame[..header + 100]);
    assert_eq!(h.s.read_low_water(), 1, "19,900 bytes left");
}

#[test]
fn the_idle_probe_drops_the_mark_until_bytes_arrive() {
    // Bytes trickling in below the mark would not wake a reader: once the idle deadline
    // passes (probe sent), any byte counts again, so a slow frame is not taken for a dead
    // peer. The next read raises the mark again.
    let mut h = open_stream();
    let (frame, header) = big_frame(300_000);
    h.feed(&frame[..header + 10_000]);
    assert_eq!(h.s.read_low_water(), 290_000);
    h.advance(Duration::from_secs(30));
    assert_eq!(h.sent_frames(), vec![(0x9, b"feedwire".to_vec())]);
    assert_eq!(h.s.read_low_water(), 1, "probing");
    h.feed(&frame[header + 10_000..header + 11_000]);
    assert_eq!(h.s.read_low_water(), 289_000, "bytes arrived: not probing");
    assert_eq!(h.state(), StreamState::Open);
}

#[test]
fn closing_drops_the_mark() {
    let mut h = open_stream();
    let (frame, header) = big_frame(300_000);
    h.feed(&frame[..header + 10_000]);
    h.s.stop(h.now);
    h.pump();
    assert!(matches!(h.state(), StreamState::Closing), "{:?}", h.state());
    assert_eq!(h.s.read_low_water(), 1);
}

#[test]
fn line_streams_ask_for_one_byte() {
    // A line's length is unknown until its delimiter: any byte may end it.
    let mut h = Harness::betfair_authenticated();
    let long = format!(
        r#"{{"op":"mcm","id":1,"pt":1,"mc":[{{"id":"{}"}}]}}"#,
        "x".repeat(200_000)
    );
    h.feed(&long.as_bytes()[..150_000]);
    assert_eq!(h.s.read_low_water(), 1);
}
