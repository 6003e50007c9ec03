//! Per-message cost of the whole `Stream` path (decode, route, stream events) next to the
//! bare `WebSocketClient`, for 200-byte Binance data messages.
//!
//! `cargo bench -p feedwire-core --bench stream`

use std::hint::black_box;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use feedwire_core::testing::{accept_response, open_websocket_stream, server_frame};
use feedwire_core::{Event, Stream, StreamConfig, StreamEvent, WebSocketClient, WsConfig};

const COUNT: usize = 2000;

fn payload(i: usize) -> Vec<u8> {
    format!(
        r#"{{"stream":"btcusdt@aggTrade","data":{{"e":"aggTrade","E":{},"s":"BTCUSDT","a":{i},"p":"67321.10","q":"0.01200","f":{i},"l":{i},"T":1700000000000,"m":true,"M":true}}}}"#,
        1_700_000_000_000u64 + i as u64
    )
    .into_bytes()
}

fn frames() -> Vec<u8> {
    (0..COUNT)
        .flat_map(|i| server_frame(true, 1, &payload(i)))
        .collect()
}

fn open_stream() -> Stream {
    open_websocket_stream(
        StreamConfig::binance_stream("ws://127.0.0.1:1/stream?streams=btcusdt@aggTrade"),
        Instant::now(),
    )
}

fn open_client() -> WebSocketClient {
    let mut ws =
        WebSocketClient::new("ws://127.0.0.1:1/", WsConfig::default(), [1; 32]).expect("valid");
    let mut req = Vec::new();
    while let Some(c) = ws.poll_transmit() {
        req.extend_from_slice(&c);
    }
    ws.handle_input(&accept_response(&req));
    while ws.poll_event().is_some() {}
    ws
}

/// Feeds `bytes` to `s` in reads as large as it offers; `read(s, k, n)` hands each read over
/// (adding lent messages to `n`); queued data events are counted after each read.
fn feed_stream(s: &mut Stream, bytes: &[u8], mut read: impl FnMut(&mut Stream, usize, &mut usize)) {
    let mut fed = 0;
    let mut n = 0;
    while fed < bytes.len() {
        let buf = s.read_buf();
        let k = buf.len().min(bytes.len() - fed);
        buf[..k].copy_from_slice(&bytes[fed..fed + k]);
        read(s, k, &mut n);
        fed += k;
        while let Some(e) = s.poll_event() {
            if let StreamEvent::Data { payload, .. } = e {
                black_box(&payload);
                n += 1;
            }
        }
    }
    assert_eq!(n, COUNT);
}

fn bench(c: &mut Criterion) {
    let bytes = frames();
    let mut group = c.benchmark_group("stream_200B");
    group.throughput(Throughput::Elements(COUNT as u64));
    group.bench_function("websocket_client_only", |b| {
        b.iter_batched_ref(
            open_client,
            |ws| {
                let mut fed = 0;
                let mut n = 0;
                while fed < bytes.len() {
                    let buf = ws.read_buf();
                    let k = buf.len().min(bytes.len() - fed);
                    buf[..k].copy_from_slice(&bytes[fed..fed + k]);
                    ws.handle_read(k);
                    fed += k;
                    while let Some(e) = ws.poll_event() {
                        if let Event::Message(m) = e {
                            black_box(&m);
                            n += 1;
                        }
                    }
                }
                assert_eq!(n, COUNT);
            },
            BatchSize::LargeInput,
        );
    });
    group.bench_function("stream_decode_route_events", |b| {
        b.iter_batched_ref(
            open_stream,
            |s| feed_stream(s, &bytes, |s, k, _| s.handle_read(k, Instant::now())),
            BatchSize::LargeInput,
        );
    });
    group.bench_function("stream_decode_route_lent", |b| {
        b.iter_batched_ref(
            open_stream,
            |s| {
                feed_stream(s, &bytes, |s, k, n| {
                    s.handle_read_with(k, Instant::now(), |d| {
                        black_box(d.payload);
                        *n += 1;
                    });
                })
            },
            BatchSize::LargeInput,
        );
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
