//! The statistics' `reads` and `full_reads`: every read handed to a stream is counted once,
//! and it is full when it came back with all of `max_read_size` — whichever call took it.

mod common;

use common::harness::Harness;
use feedwire_core::testing::server_frame;
use feedwire_core::{DataHandler, StreamConfig, WsConfig};

const MAX_READ_SIZE: usize = 4096;

/// An open Binance stream reading at most [`MAX_READ_SIZE`] bytes a read, its events taken.
fn binance() -> Harness {
    let mut config = StreamConfig::binance_stream("ws://127.0.0.1:9/stream");
    config.ws = WsConfig {
        max_read_size: MAX_READ_SIZE,
        ..WsConfig::default()
    };
    let mut h = Harness::new(config);
    h.open_ws();
    h.s.subscribe(&["a@trade"], h.now).expect("open");
    h.pump();
    h.take_events();
    h
}

/// Trade frames, `count` of them, about 40 bytes each.
fn trades(count: usize) -> Vec<u8> {
    (0..count)
        .flat_map(|t| server_frame(true, 1, format!(r#"{{"e":"trade","t":{t}}}"#).as_bytes()))
        .collect()
}

#[test]
fn every_read_is_counted_once_and_full_only_at_max_read_size() {
    let mut h = binance();
    let stats = h.s.stats_handle();
    let before = stats.snapshot(h.now);
    let bytes = trades(600);
    // Reads as large as offered (the offer ramps up to the maximum), every third cut short
    // to a tenth; in turn through each of the three calls, the lending one also with the
    // events of a queueing read left unpolled (it then queues, as `handle_read` does, and
    // must count once).
    let (mut at, mut sizes) = (0, Vec::new());
    while at < bytes.len() {
        let i = sizes.len();
        let buf = h.s.read_buf();
        let mut n = buf.len().min(bytes.len() - at);
        if i % 3 == 2 {
            n = n.div_ceil(10);
        }
        buf[..n].copy_from_slice(&bytes[at..at + n]);
        match i % 4 {
            0 => h.s.handle_read(n, h.now),
            2 => h.s.handle_read_lending::<dyn DataHandler>(n, h.now, None),
            _ => h.s.handle_read_with(n, h.now, |_| {}),
        }
        sizes.push(n);
        at += n;
        h.pump();
        if i % 4 != 2 {
            h.take_events();
        }
    }
    let after = stats.snapshot(h.now);
    let full = sizes.iter().filter(|&&n| n == MAX_READ_SIZE).count() as u64;
    assert!(
        full >= 2 && full < sizes.len() as u64,
        "reads of both kinds: {sizes:?}"
    );
    assert_eq!(after.reads - before.reads, sizes.len() as u64, "{sizes:?}");
    assert_eq!(after.full_reads - before.full_reads, full, "{sizes:?}");
    assert_eq!(after.messages_received - before.messages_received, 600);
}
