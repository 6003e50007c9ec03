//! How fast `stop()` and `crash()` take effect on an idle stream, for each adapter: from the
//! call to the Close frame (or the connection's end) arriving at a silent server on
//! 127.0.0.1, in the same process on the same monotonic clock. Prints p50/p99/max. A
//! benchmark, not a test.
//!
//! `cargo run --release -p feedwire-tests --example stop_latency -- [trials]`
#![allow(clippy::print_stdout, reason = "an example reports to the terminal")]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use feedwire_core::{StreamConfig, StreamEvent};
use feedwire_replay::example_args::first_arg;
use feedwire_tests::adapter::{Adapter, MioAdapter, TokioAdapter};
use feedwire_tests::scenarios::accept_upgrade;

/// Completes the handshake, stays silent, reports when a Close frame arrives or the
/// connection ends.
fn silent_server(listener: &TcpListener, seen: mpsc::Sender<Instant>) -> std::io::Result<()> {
    let (mut sock, _) = listener.accept()?;
    sock.set_nodelay(true)?;
    accept_upgrade(&mut sock);
    let mut buf = [0u8; 4096];
    loop {
        // A reset reads as the end too.
        let n: usize = sock.read(&mut buf).unwrap_or_default();
        if n == 0 || buf[..n].contains(&0x88) {
            let _ = seen.send(Instant::now());
            let _ = sock.write_all(&[0x88, 0x02, 0x03, 0xE8]);
            return Ok(());
        }
    }
}

fn measure(
    adapter: &dyn Adapter,
    trials: usize,
    crash: bool,
) -> Result<Vec<Duration>, Box<dyn std::error::Error>> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let url = format!("ws://{}/ws", listener.local_addr()?);
    let mut latencies = Vec::with_capacity(trials);
    for _ in 0..trials {
        let (tx, rx) = mpsc::channel();
        let l = listener.try_clone()?;
        let server = std::thread::spawn(move || silent_server(&l, tx));
        let mut session = adapter.start(StreamConfig::binance_stream(&url), None, 1024);
        while let Ok(Some(e)) = session.next_event(Duration::from_secs(5)) {
            if matches!(e, StreamEvent::Opened { .. }) {
                break;
            }
        }
        // Idle for a moment, as a stream between messages would be.
        std::thread::sleep(Duration::from_millis(2));
        let called = Instant::now();
        if crash {
            session.crash("measure");
        } else {
            session.stop();
        }
        let arrived = rx.recv_timeout(Duration::from_secs(5))?;
        latencies.push(arrived.saturating_duration_since(called));
        while let Ok(Some(_)) = session.next_event(Duration::from_secs(5)) {}
        let _ = server.join();
    }
    latencies.sort();
    Ok(latencies)
}

/// What `--help` prints.
const USAGE: &str = "usage: stop_latency [TRIALS (1000)]";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some(trials) = first_arg::<usize>("TRIALS", 1000, USAGE)? else {
        return Ok(());
    };
    let adapters: [(&str, &dyn Adapter); 2] = [("tokio", &TokioAdapter), ("mio", &MioAdapter)];
    for (name, adapter) in adapters {
        for (what, crash) in [
            ("stop() -> Close frame at the server", false),
            ("crash() -> connection end at the server", true),
        ] {
            let l = measure(adapter, trials, crash)?;
            let pct = |p: f64| l[((l.len() as f64 - 1.0) * p).round() as usize];
            println!(
                "{name}: {what}, {trials} idle streams on loopback: p50 {:?}, p99 {:?}, max {:?}",
                pct(0.50),
                pct(0.99),
                l[l.len() - 1]
            );
        }
    }
    Ok(())
}
