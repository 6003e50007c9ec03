//! Line splitting throughput, bare (`LineClient`) and through the whole Betfair `Stream`
//! (framing, routing by learned head shape, clocks, statistics, each line lent to a closure),
//! next to a raw memchr splitter over the same bytes; and head-scan classification cost per
//! message at 0.2 KB, 9 KB and 454 KB (it must be flat).
//!
//! `cargo bench -p feedwire-core --bench lines_routing`

use std::hint::black_box;
use std::time::Instant;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use feedwire_core::testing::open_betfair_stream;
use feedwire_core::{
    BetfairAuth, Classifier, Delimiter, LineClient, LineEvent, RouteRules, Stream, StreamConfig,
    StreamEvent,
};

const READ: usize = 256 * 1024;

fn mcm_line(i: usize, len: usize) -> Vec<u8> {
    let mut s = format!(
        r#"{{"op":"mcm","id":2,"clk":"AAAAAAAA{i}","pt":{},"mc":[{{"id":"1.2345","rc":["#,
        1_700_000_000_000u64 + i as u64
    );
    while s.len() < len - 4 {
        s.push_str(r#"{"atb":[[1.01,2.5]],"id":47972},"#);
    }
    s.truncate(len - 4);
    s.push_str("]}]}");
    s.into_bytes()
}

fn line_stream(line_len: usize, total: usize) -> (Vec<u8>, usize) {
    let mut out = Vec::with_capacity(total + line_len);
    let mut n = 0;
    while out.len() < total {
        out.extend(mcm_line(n, line_len));
        out.extend_from_slice(b"\r\n");
        n += 1;
    }
    (out, n)
}

fn drive(c: &mut LineClient, bytes: &[u8]) -> usize {
    let (mut fed, mut lines) = (0, 0);
    while fed < bytes.len() {
        let buf = c.read_buf();
        let n = buf.len().min(bytes.len() - fed);
        buf[..n].copy_from_slice(&bytes[fed..fed + n]);
        c.handle_read(n);
        fed += n;
        while let Some(e) = c.poll_event() {
            if let LineEvent::Line(l) = e {
                black_box(&l);
                lines += 1;
            }
        }
    }
    lines
}

/// The limit: copy into a fixed 256 KiB buffer per read and find lines with memchr.
fn raw_line_splitter(buf: &mut [u8], bytes: &[u8]) -> usize {
    let (mut lines, mut carry, mut fed) = (0, 0, 0);
    while fed < bytes.len() {
        let n = (buf.len() - carry).min(bytes.len() - fed);
        buf[carry..carry + n].copy_from_slice(&bytes[fed..fed + n]);
        fed += n;
        let end = carry + n;
        let mut start = 0;
        for nl in memchr::memchr_iter(b'\n', &buf[..end]) {
            black_box(&buf[start..nl.saturating_sub(1)]);
            start = nl + 1;
            lines += 1;
        }
        buf.copy_within(start..end, 0);
        carry = end - start;
    }
    lines
}

fn open_stream() -> Stream {
    let auth = BetfairAuth {
        app_key: "bench".to_owned(),
        session: "bench".to_owned(),
    };
    open_betfair_stream(
        StreamConfig::betfair("tcp://127.0.0.1:1", auth),
        Instant::now(),
    )
}

/// Feeds `bytes` to `s` in reads as large as it offers, lending each data line to a closure
/// as the transports do; the data lines (lent or queued).
fn feed_stream(s: &mut Stream, bytes: &[u8]) -> usize {
    let (mut fed, mut lines) = (0, 0);
    let now = Instant::now();
    while fed < bytes.len() {
        let buf = s.read_buf();
        let n = buf.len().min(bytes.len() - fed);
        buf[..n].copy_from_slice(&bytes[fed..fed + n]);
        s.handle_read_with(n, now, |d| {
            black_box(d.payload);
            lines += 1;
        });
        fed += n;
        // A line the learned shapes did not settle (the first, one whose clock grew a digit)
        // takes the general path and is queued.
        while let Some(e) = s.poll_event() {
            if let StreamEvent::Data { payload, .. } = e {
                black_box(&payload);
                lines += 1;
            }
        }
    }
    lines
}

fn lines(c: &mut Criterion) {
    for line_len in [200usize, 2000] {
        let (bytes, count) = line_stream(line_len, 4 << 20);
        let mut group = c.benchmark_group(format!("lines_{line_len}B"));
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_function("feedwire_line_client", |b| {
            b.iter_batched_ref(
                || LineClient::new(Delimiter::CrLf, READ, 16 << 20),
                |c| assert_eq!(drive(c, &bytes), count),
                BatchSize::LargeInput,
            );
        });
        group.bench_function("feedwire_stream_lent", |b| {
            b.iter_batched_ref(
                open_stream,
                |s| assert_eq!(feed_stream(s, &bytes), count),
                BatchSize::LargeInput,
            );
        });
        let mut buf = vec![0u8; READ];
        group.bench_function("limit_raw_memchr_splitter", |b| {
            b.iter(|| assert_eq!(raw_line_splitter(&mut buf, &bytes), count));
        });
        group.finish();
    }
}

fn classification(c: &mut Criterion) {
    let mut group = c.benchmark_group("classify");
    let binance = Classifier::new(RouteRules::binance_stream());
    for (name, len) in [("0.2KB", 200usize), ("9KB", 9_300), ("454KB", 454_000)] {
        let mut data = br#"{"stream":"btcusdt@depth","data":{"e":"depthUpdate","E":1700000000000,"s":"BTCUSDT","b":["#.to_vec();
        while data.len() < len - 3 {
            data.extend_from_slice(br#"["67321.10","0.012"],"#);
        }
        data.truncate(len - 3);
        data.extend_from_slice(b"]}}");
        let data = Bytes::from(data);
        group.bench_function(format!("binance_data_{name}"), |b| {
            b.iter(|| binance.classify(black_box(&data)))
        });
    }
    let response = Bytes::from_static(br#"{"result":null,"id":123456}"#);
    group.bench_function("binance_response", |b| {
        b.iter(|| binance.classify(black_box(&response)))
    });
    let betfair = Classifier::new(RouteRules::betfair());
    let mcm = Bytes::from(mcm_line(1, 2000));
    group.bench_function("betfair_mcm_2KB", |b| {
        b.iter(|| betfair.classify(black_box(&mcm)))
    });
    group.finish();
}

criterion_group!(benches, lines, classification);
criterion_main!(benches);
