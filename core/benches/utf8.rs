//! UTF-8 validation of whole text messages: feedwire's check (ASCII first, simdutf8 from the
//! first block that is not ASCII) next to simdutf8 alone, on the benchmark scenarios' message
//! sizes, each message read from a 256 KiB buffer of them (as a read buffer holds them), and
//! on text that is not ASCII.
//!
//! `cargo bench -p feedwire-core --bench utf8`
//!
//! Compare the two rows of a group, measured side by side, not absolute times (shared, noisy
//! machines).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use feedwire_core::testing::TextValidator;

const BUFFER: usize = 256 * 1024;

/// `len` bytes of depth-update JSON: digits, quotes, commas, all ASCII.
fn json(len: usize) -> Vec<u8> {
    let unit = br#"["67321.10000000","0.01200000"],"#;
    unit.iter().copied().cycle().take(len).collect()
}

/// Messages of `len` bytes back to back, as many as fill a read buffer (at least one).
fn messages(message: &[u8]) -> Vec<u8> {
    message.repeat((BUFFER / message.len()).max(1))
}

fn validate(c: &mut Criterion) {
    let mut cases: Vec<(String, Vec<u8>)> = [190usize, 310, 1010, 9_330, 469_000]
        .into_iter()
        .map(|len| (format!("ascii_{len}B"), json(len)))
        .collect();
    // Not ASCII: a character at the start (the worst case: simdutf8 reads every block) and
    // one at the end (the ASCII check reads the last block, simdutf8 again).
    for len in [1010usize, 9_330] {
        let mut first = json(len);
        first[..3].copy_from_slice("€".as_bytes());
        cases.push((format!("euro_first_{len}B"), first));
        let mut last = json(len);
        last[len - 3..].copy_from_slice("€".as_bytes());
        cases.push((format!("euro_last_{len}B"), last));
    }
    for (name, message) in cases {
        let len = message.len();
        let buffer = messages(&message);
        let mut group = c.benchmark_group(format!("utf8_{name}"));
        group.throughput(Throughput::Elements((buffer.len() / len) as u64));
        group.bench_function("feedwire", |b| {
            b.iter(|| {
                for m in buffer.chunks_exact(len) {
                    assert!(TextValidator::whole(black_box(m)));
                }
            })
        });
        group.bench_function("simdutf8", |b| {
            b.iter(|| {
                for m in buffer.chunks_exact(len) {
                    assert!(simdutf8::basic::from_utf8(black_box(m)).is_ok());
                }
            })
        });
        group.finish();
    }
}

criterion_group!(benches, validate);
criterion_main!(benches);
