//! A connection quiet for `Timeouts::release_read_memory` gives its read memory back by itself
//! (virtual time, a scripted peer): once per quiet spell, never while a frame is half
//! received, and a busy connection never.

mod common;

use std::time::Duration;

use common::harness::Harness;
use feedwire_core::testing::{queue_room, server_frame};
use feedwire_core::{StreamConfig, StreamEvent};

const URL: &str = "ws://127.0.0.1:9443/ws";
const DATA: &str = r#"{"e":"trade","t":1}"#;

/// An open Binance stream that releases after `quiet`, its opening events taken.
fn open(quiet: Option<Duration>) -> Harness {
    let mut config = StreamConfig::binance_stream(URL);
    config.timeouts.release_read_memory = quiet;
    let mut h = Harness::new(config);
    h.take_commands();
    h.open_ws();
    h.take_events();
    h
}

fn read_buffer_bytes(h: &Harness) -> u64 {
    h.s.stats_handle().snapshot(h.now).read_buffer_bytes
}

fn data_events(h: &mut Harness) -> usize {
    h.take_events()
        .iter()
        .filter(|e| matches!(e, StreamEvent::Data { .. }))
        .count()
}

#[test]
fn the_default_is_one_second() {
    assert_eq!(
        StreamConfig::binance_stream(URL)
            .timeouts
            .release_read_memory,
        Some(Duration::from_secs(1))
    );
}

/// Quiet for the period after its last read: the block goes, the transport is told once,
/// and no timer is left for it (a quiet stream is not woken again for it). The next read
/// brings a block back and arms the timer from itself.
#[test]
fn a_quiet_connection_gives_its_read_memory_back_once_a_spell() {
    let mut h = open(Some(Duration::from_secs(1)));
    h.feed_text(DATA);
    assert_eq!(data_events(&mut h), 1);
    h.advance(Duration::from_millis(400));
    // A read 400 ms in: the quiet spell starts again from it.
    h.feed_text(DATA);
    h.advance(Duration::from_millis(900));
    assert!(read_buffer_bytes(&h) > 0, "0.9 s after the last read");
    assert!(!h.s.poll_read_memory_released());
    h.advance(Duration::from_millis(150));
    assert_eq!(read_buffer_bytes(&h), 0, "1.05 s after the last read");
    assert!(h.s.poll_read_memory_released());
    assert!(!h.s.poll_read_memory_released(), "told once");
    // What is left to wake for: the idle probe (30 s after the last read), not this.
    let next = h.s.poll_timeout().expect("the idle timer");
    assert!(next > h.now + Duration::from_secs(25), "{:?}", next - h.now);
    h.advance(Duration::from_secs(5));
    assert!(!h.s.poll_read_memory_released(), "nothing more to release");

    h.feed_text(DATA);
    assert_eq!(data_events(&mut h), 2);
    assert!(read_buffer_bytes(&h) > 0);
    h.advance(Duration::from_millis(1_050));
    assert_eq!(
        read_buffer_bytes(&h),
        0,
        "released again after the next quiet second"
    );
    assert!(h.s.poll_read_memory_released());
}

/// The event queue, which a burst's reads grew to a read's events (104 bytes an event), gives
/// its room back with the block: a quiet stream holds neither.
#[test]
fn a_quiet_connection_gives_its_event_queue_room_back() {
    let queue_room = |h: &mut Harness| {
        // An empty queue trades buffers with the stream's: the room it had shows.
        let mut queue = std::collections::VecDeque::new();
        h.s.drain_events_into(&mut queue);
        assert!(queue.is_empty());
        let room = queue.capacity();
        h.s.drain_events_into(&mut queue);
        room
    };
    let mut h = open(Some(Duration::from_secs(1)));
    let frame = server_frame(true, 1, DATA.as_bytes());
    h.feed(&frame.repeat(2_000));
    assert_eq!(data_events(&mut h), 2_000);
    assert!(queue_room(&mut h) >= 500, "a read's events");
    h.advance(Duration::from_millis(1_050));
    assert_eq!(read_buffer_bytes(&h), 0);
    assert_eq!(queue_room(&mut h), 0, "given back");
    h.feed_text(DATA);
    assert_eq!(data_events(&mut h), 1, "and the next read's events as ever");
}

/// Every queue's room goes with the block — the stream's events, its transport commands (the
/// connect's), its connection's events (the handshake's, a read's lines) — on a WebSocket
/// stream that only opened and on a Betfair line stream that had data: a quiet stream holds
/// none of them.
#[test]
fn a_quiet_stream_gives_every_queue_room_back() {
    let mut h = open(Some(Duration::from_secs(1)));
    assert!(queue_room(&h.s) > 0, "the opening's queues");
    h.advance(Duration::from_millis(1_050));
    assert_eq!(read_buffer_bytes(&h), 0);
    assert_eq!(queue_room(&h.s), 0, "WebSocket, only opened");
    h.feed_text(DATA);
    assert_eq!(data_events(&mut h), 1, "the next read's events as ever");

    let mut h = Harness::betfair_authenticated();
    let line = r#"{"op":"mcm","id":2,"clk":"AAA","pt":1,"mc":[{"id":"1.1"}]}"#;
    h.feed(format!("{line}\r\n").repeat(50).as_bytes());
    assert_eq!(data_events(&mut h), 50);
    h.advance(Duration::from_millis(1_050));
    assert_eq!(read_buffer_bytes(&h), 0);
    assert_eq!(queue_room(&h.s), 0, "Betfair, after data");
    h.feed_line(line);
    assert_eq!(data_events(&mut h), 1);
}

/// Reads every 300 ms for 5 s: the memory stays, however often the timer fires.
#[test]
fn a_busy_connection_keeps_its_read_memory() {
    let mut h = open(Some(Duration::from_secs(1)));
    for _ in 0..17 {
        h.feed_text(DATA);
        h.advance(Duration::from_millis(300));
        assert!(read_buffer_bytes(&h) > 0);
        assert!(!h.s.poll_read_memory_released());
    }
    assert_eq!(data_events(&mut h), 17);
}

/// A frame half received stays (its bytes are in the block), and completes intact after
/// the quiet spell; the transport is still told (its own buffer holds no part of it).
#[test]
fn a_half_received_frame_is_kept_through_a_quiet_spell() {
    let mut h = open(Some(Duration::from_secs(1)));
    let frame = server_frame(true, 1, DATA.as_bytes());
    h.feed(&frame[..7]);
    h.advance(Duration::from_secs(2));
    assert!(read_buffer_bytes(&h) > 0, "the half frame is kept");
    assert!(h.s.poll_read_memory_released());
    h.feed(&frame[7..]);
    let events = h.take_events();
    assert!(
        matches!(events.as_slice(), [StreamEvent::Data { payload, .. }] if payload[..] == *DATA.as_bytes()),
        "{events:?}"
    );
}

/// `None` keeps the memory for the connection's life.
#[test]
fn none_keeps_the_read_memory() {
    let mut h = open(None);
    h.feed_text(DATA);
    h.advance(Duration::from_secs(10));
    assert!(read_buffer_bytes(&h) > 0);
    assert!(!h.s.poll_read_memory_released());
}

/// A burst, then a message every 300 ms: never quiet, so nothing is released, but the read
/// size is reviewed once a period and the burst's blocks go — a trickle does not keep a
/// burst's buffer. With `None` the burst's buffer stays.
#[test]
fn a_trickle_after_a_burst_gives_the_burst_blocks_back() {
    for quiet in [Some(Duration::from_secs(1)), None] {
        let mut h = open(quiet);
        let frame = server_frame(true, 1, DATA.as_bytes());
        h.feed(&frame.repeat(10_000));
        assert_eq!(data_events(&mut h), 10_000);
        let after_burst = read_buffer_bytes(&h);
        assert!(after_burst > 16 * 1024, "{after_burst}");
        for _ in 0..10 {
            h.advance(Duration::from_millis(300));
            h.feed_text(DATA);
        }
        assert_eq!(data_events(&mut h), 10);
        assert!(!h.s.poll_read_memory_released(), "never quiet");
        let after_trickle = read_buffer_bytes(&h);
        if quiet.is_some() {
            assert!(after_trickle <= 4 * 1024, "{after_trickle}");
        } else {
            assert!(after_trickle > 16 * 1024, "{after_trickle}");
        }
    }
}
