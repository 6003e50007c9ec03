//! What the UTF-8 check of text costs right after the kernel copied it in, by read size: the
//! floor every validating client pays over the raw-read limit, which reads the same bytes and
//! never touches them.
//!
//! A thread on CPU 1 writes a scenario's payloads back to back over loopback TCP as fast as
//! the socket takes them; this thread, on CPU 0, reads them into the front of one buffer
//! (`recv` of at most the read size), then checks each whole piece of the scenario's mean
//! payload length in the read as the fast lanes check a message (one vector-width question a
//! read, [`in_vectors`]; the check compiled for it), then checks the same pieces again. The
//! first pass reads the bytes where the copy left them; the second where the first left them
//! (L1 if they fit, else L2), so the two passes tell which level the copy left them in. Per
//! piece: the `recv` (system call and copy), each pass (ns; each timed span includes one
//! clock read, ~20-30 ns a read, so small reads carry a few ns a piece of it).
//!
//! `cargo run --release -p feedwire-bench --example check_after_copy --`
//! `[SCENARIO] [--seconds S] [--read KiB]… [--bits 128|256|512]`
//! (default `xlarge_depth_diff`, 2 s a read size, reads of 256, 128, 64 and 32 KiB, in turn
//! twice; `--bits` caps the vectors, [`feedwire_core::limit_vector_width`]: 256 for the AVX2
//! check on a CPU with AVX-512).
#![allow(clippy::print_stdout, reason = "a benchmark reports to the terminal")]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use feedwire_core::testing::{in_vectors, Lane, TextCheck};
use feedwire_core::{limit_vector_width, VectorWidth};
use feedwire_replay::measure::pin_to_cpu;
use feedwire_replay::Scenario;

/// The pieces of one read, each checked as a whole text message.
struct Pieces<'a> {
    bytes: &'a [u8],
    piece: usize,
}

impl Lane for Pieces<'_> {
    type Output = usize;

    #[inline(always)]
    fn run<C: TextCheck>(self, check: C) -> usize {
        let mut valid = 0;
        for piece in self.bytes.chunks_exact(self.piece) {
            valid += usize::from(check.is_valid(piece));
        }
        valid
    }
}

/// Sums over one read size's run, ns and pieces.
#[derive(Default)]
struct Sums {
    recv_ns: u128,
    first_ns: u128,
    again_ns: u128,
    pieces: u64,
    reads: u64,
    bytes: u64,
}

fn measure(sock: &mut TcpStream, read: usize, piece: usize, seconds: f64) -> Result<Sums, String> {
    let mut buf = vec![0u8; read];
    let mut sums = Sums::default();
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    let mut valid = 0;
    let mut now = Instant::now();
    while now < end {
        let n = sock.read(&mut buf).map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("the writer closed".to_owned());
        }
        let copied = Instant::now();
        let whole = n / piece * piece;
        valid += in_vectors(Pieces {
            bytes: &buf[..whole],
            piece,
        });
        let first = Instant::now();
        valid += in_vectors(Pieces {
            bytes: &buf[..whole],
            piece,
        });
        let again = Instant::now();
        sums.recv_ns += (copied - now).as_nanos();
        sums.first_ns += (first - copied).as_nanos();
        sums.again_ns += (again - first).as_nanos();
        sums.pieces += (whole / piece) as u64;
        sums.reads += 1;
        sums.bytes += n as u64;
        now = again;
    }
    if valid as u64 != 2 * sums.pieces {
        return Err("a piece of ASCII payloads failed the check".to_owned());
    }
    Ok(sums)
}

/// What `--help` prints.
const USAGE: &str = "usage: check_after_copy [SCENARIO (xlarge_depth_diff)] [--seconds S (2)] \
[--read KiB (repeatable; 256, 128, 64, 32 twice)] [--bits 128|256|512]";

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().is_some_and(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return Ok(());
    }
    let scenario = match args.peek() {
        Some(name) if !name.starts_with("--") => {
            let name = args.next().unwrap_or_default();
            Scenario::from_name(&name).ok_or_else(|| format!("unknown scenario {name}"))?
        }
        _ => Scenario::XlargeDepthDiff,
    };
    let (mut seconds, mut reads) = (2.0, Vec::new());
    while let Some(flag) = args.next() {
        let value: f64 = args
            .next()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{flag} needs a number"))?;
        match flag.as_str() {
            "--seconds" => seconds = value,
            "--read" => reads.push((value as usize).max(1) * 1024),
            "--bits" => {
                let cap = match value as u32 {
                    128 => VectorWidth::Bits128,
                    256 => VectorWidth::Bits256,
                    512 => VectorWidth::Bits512,
                    other => return Err(format!("--bits {other}: 128, 256 or 512")),
                };
                limit_vector_width(cap);
            }
            other => return Err(format!("unknown flag {other} ({USAGE})")),
        }
    }
    if reads.is_empty() {
        reads = [256, 128, 64, 32].map(|k| k * 1024).to_vec();
        reads.extend_from_within(..);
    }
    let payloads = scenario.payloads(7);
    let stream: Vec<u8> = payloads.iter().flat_map(|p| p.iter().copied()).collect();
    if !stream.is_ascii() {
        return Err(format!("{}: payloads not ASCII", scenario.name()));
    }
    let piece = stream.len() / payloads.len();

    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || -> Result<(), String> {
            pin_to_cpu(1).map_err(|e| format!("pin the writer: {e}"))?;
            let (mut sock, _) = listener.accept().map_err(|e| format!("accept: {e}"))?;
            while !stop.load(Ordering::Relaxed) {
                // The reader's end closing ends this with an error, which is the stop.
                if sock.write_all(&stream).is_err() {
                    break;
                }
            }
            Ok(())
        })
    };
    pin_to_cpu(0).map_err(|e| format!("pin the reader: {e}"))?;
    let mut sock = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    println!(
        "{}: pieces of {piece} B (the mean payload), {seconds} s a read size, vectors {:?}",
        scenario.name(),
        feedwire_core::vector_width()
    );
    println!("| read | reads | mean read B | recv ns/piece | check ns/piece | again ns/piece |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for read in reads {
        let s = measure(&mut sock, read, piece, seconds)?;
        let per = |ns: u128| ns as f64 / s.pieces.max(1) as f64;
        println!(
            "| {} KiB | {} | {:.0} | {:.0} | {:.1} | {:.1} |",
            read / 1024,
            s.reads,
            s.bytes as f64 / s.reads.max(1) as f64,
            per(s.recv_ns),
            per(s.first_ns),
            per(s.again_ns)
        );
    }
    stop.store(true, Ordering::Relaxed);
    drop(sock);
    writer
        .join()
        .map_err(|_| "the writer panicked".to_owned())?
}
