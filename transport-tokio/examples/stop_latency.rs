//! Measures how fast `stop()` takes effect on an idle stream: from the call to the Close
//! frame arriving at a silent server on 127.0.0.1 (same process, same monotonic clock), over
//! 1,000 trials; prints p50/p99/max. A benchmark, not a test.
//!
//! `cargo run --release -p feedwire-tokio --example stop_latency -- [trials]`
#![allow(clippy::print_stdout, reason = "an example reports to the terminal")]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use feedwire_core::{accept_key, StreamConfig, StreamEvent};
use feedwire_tokio::{connect, TokioOptions};

/// A server that completes the handshake, stays silent, and reports when a Close frame
/// (opcode 0x8, masked) arrives, or the connection ends (for `crash()`).
fn silent_server(listener: &TcpListener, closed_at: mpsc::Sender<Instant>) -> std::io::Result<()> {
    let (mut sock, _) = listener.accept()?;
    sock.set_nodelay(true)?;
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = sock.read(&mut buf)?;
        head.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&head);
    let key = text
        .lines()
        .find_map(|l| l.strip_prefix("Sec-WebSocket-Key: "))
        .unwrap_or_default()
        .trim()
        .to_owned();
    write!(
        sock,
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n\r\n",
        accept_key(key.as_bytes())
    )?;
    loop {
        // A reset reads as the end too.
        let n: usize = sock.read(&mut buf).unwrap_or_default();
        if n == 0 {
            let _ = closed_at.send(Instant::now());
            return Ok(());
        }
        if buf[..n].contains(&0x88) {
            let _ = closed_at.send(Instant::now());
            // Echo a Close so the client ends cleanly.
            sock.write_all(&[0x88, 0x02, 0x03, 0xE8])?;
            return Ok(());
        }
    }
}

/// Runs `trials` connections; on each idle stream calls `end` and measures until the server
/// sees the Close frame (stop) or the connection end (crash).
async fn measure(
    url: &str,
    listener: &TcpListener,
    trials: usize,
    crash: bool,
) -> Result<Vec<Duration>, Box<dyn std::error::Error>> {
    let mut latencies = Vec::with_capacity(trials);
    for _ in 0..trials {
        let (tx, rx) = mpsc::channel();
        let l = listener.try_clone()?;
        let server = std::thread::spawn(move || silent_server(&l, tx));
        let (handle, mut events) =
            connect(StreamConfig::binance_stream(url), TokioOptions::default())?;
        while let Some(e) = events.next().await {
            if matches!(e, StreamEvent::Opened { .. }) {
                break;
            }
        }
        // Idle for a moment, as a stream between messages would be.
        tokio::time::sleep(Duration::from_millis(2)).await;
        let called = Instant::now();
        if crash {
            handle.crash("measure");
        } else {
            handle.stop();
        }
        while events.next().await.is_some() {}
        let arrived = rx.recv_timeout(Duration::from_secs(5))?;
        latencies.push(arrived.saturating_duration_since(called));
        let _ = server.join();
    }
    latencies.sort();
    Ok(latencies)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let trials: usize = std::env::args().nth(1).map_or(Ok(1000), |s| s.parse())?;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let url = format!("ws://{}/ws", listener.local_addr()?);
    for (name, crash) in [
        ("stop() to Close frame at the server", false),
        ("crash() to connection end at the server", true),
    ] {
        let l = measure(&url, &listener, trials, crash).await?;
        let pct = |p: f64| l[((l.len() as f64 - 1.0) * p).round() as usize];
        println!(
            "{name}, {trials} idle streams on loopback: p50 {:?}, p99 {:?}, max {:?}",
            pct(0.50),
            pct(0.99),
            l[l.len() - 1]
        );
    }
    Ok(())
}
