//! Decode throughput of the WebSocket engine and masking speed.
//!
//! `cargo bench -p feedwire-core --bench decode`
//!
//! Every decode case is measured next to a "limit": the same bytes copied into a 256 KiB
//! buffer per read and walked header to header without validation — the floor any client
//! must pay. Compare the two ratios, not absolute times (shared, noisy machines).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use feedwire_core::testing::{accept_response, server_frame};
use feedwire_core::{apply_mask, Event, WebSocketClient, WsConfig};

const READ: usize = 256 * 1024;

fn text_payload(len: usize) -> Vec<u8> {
    let unit = br#"{"e":"aggTrade","E":1700000000000,"s":"BTCUSDT","a":12345,"p":"67321.10","q":"0.012"},"#;
    unit.iter().copied().cycle().take(len).collect()
}

fn stream(frame_len: usize, count: usize) -> Vec<u8> {
    let frame = server_frame(true, 1, &text_payload(frame_len));
    frame.repeat(count)
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

fn drive(ws: &mut WebSocketClient, bytes: &[u8]) -> usize {
    let mut delivered = 0;
    let mut fed = 0;
    while fed < bytes.len() {
        let buf = ws.read_buf();
        let n = buf.len().min(bytes.len() - fed);
        buf[..n].copy_from_slice(&bytes[fed..fed + n]);
        ws.handle_read(n);
        fed += n;
        while let Some(ev) = ws.poll_event() {
            if let Event::Message(m) = ev {
                delivered += m.payload.len();
                black_box(&m);
            }
        }
    }
    delivered
}

/// The limit: copy every byte into a fixed 256 KiB buffer, one read at a time, and skip from
/// header to header without validating anything.
fn raw_header_skip(buf: &mut [u8], bytes: &[u8]) -> usize {
    let (mut total, mut skip, mut carry, mut fed) = (0usize, 0usize, 0usize, 0usize);
    while fed < bytes.len() {
        let n = (buf.len() - carry).min(bytes.len() - fed);
        buf[carry..carry + n].copy_from_slice(&bytes[fed..fed + n]);
        fed += n;
        let end = carry + n;
        let mut pos = 0;
        loop {
            if skip > 0 {
                let s = skip.min(end - pos);
                skip -= s;
                pos += s;
                if skip > 0 {
                    break;
                }
            }
            if end - pos < 2 {
                break;
            }
            let (hl, len) = match buf[pos + 1] & 0x7F {
                126 if end - pos >= 4 => (
                    4,
                    usize::from(u16::from_be_bytes([buf[pos + 2], buf[pos + 3]])),
                ),
                127 if end - pos >= 10 => (
                    10,
                    u64::from_be_bytes(buf[pos + 2..pos + 10].try_into().unwrap()) as usize,
                ),
                126 | 127 => break,
                l => (2, usize::from(l)),
            };
            total += black_box(len);
            pos += hl;
            skip = len;
        }
        buf.copy_within(pos..end, 0);
        carry = end - pos;
    }
    total
}

fn decode(c: &mut Criterion) {
    for (name, frame_len, count) in [
        ("200B", 200usize, 2000usize),
        ("9KB", 9_300, 100),
        ("450KB", 454_000, 4),
    ] {
        let bytes = stream(frame_len, count);
        let mut group = c.benchmark_group(format!("decode_text_{name}"));
        group.throughput(Throughput::Elements(count as u64));
        group.bench_function("feedwire_core", |b| {
            b.iter_batched_ref(
                open_client,
                |ws| assert_eq!(drive(ws, &bytes), frame_len * count),
                BatchSize::LargeInput,
            );
        });
        let mut buf = vec![0u8; READ];
        group.bench_function("limit_raw_header_skip", |b| {
            b.iter(|| assert_eq!(raw_header_skip(&mut buf, &bytes), frame_len * count));
        });
        group.finish();
    }
}

fn masking(c: &mut Criterion) {
    let mut group = c.benchmark_group("mask");
    for len in [200usize, 4096, 454_000] {
        let mut data = vec![0xA5u8; len];
        group.throughput(Throughput::Bytes(len as u64));
        group.bench_function(format!("word_at_a_time_{len}"), |b| {
            b.iter(|| apply_mask(black_box(&mut data), [1, 2, 3, 4], 0));
        });
        group.bench_function(format!("byte_at_a_time_{len}"), |b| {
            b.iter(|| {
                for (i, x) in black_box(&mut data).iter_mut().enumerate() {
                    *x ^= [1u8, 2, 3, 4][i & 3];
                }
            });
        });
    }
    group.finish();
}

criterion_group!(benches, decode, masking);
criterion_main!(benches);
