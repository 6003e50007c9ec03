//! The loop embedded in an application's own thread: one `mio::Poll` for the application's
//! sockets and the feed. Here the application listens for commands on a UDP socket
//! (`stats`, `stop`), does its own work between turns (a report once a second) and handles
//! the feed's events in a handler on the same thread. A helper thread plays the operator.
//!
//! `cargo run --release -p feedwire-mio --example embedded_loop -- [seconds]`
#![allow(clippy::print_stdout, reason = "an example reports to the terminal")]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use feedwire_core::{StreamConfig, StreamEvent};
use feedwire_mio::{user_token, Delivery, Handler, MioLoop, MioOptions};
use feedwire_replay::example_args::first_arg;
use feedwire_replay::{Mode, ReplayConfig, ReplayServer, Scenario};
use mio::net::UdpSocket;
use mio::Interest;

/// The application's own source: its command socket.
const COMMANDS: u32 = 1;

/// The application's per-message work: count and keep the last trade's size.
struct Book {
    trades: Arc<AtomicU64>,
    last_len: usize,
    closed: Arc<AtomicBool>,
}

impl Handler for Book {
    fn on_event(&mut self, event: StreamEvent) {
        match event {
            StreamEvent::Data { payload, .. } => {
                self.last_len = payload.len();
                self.trades.fetch_add(1, Ordering::Relaxed);
            }
            StreamEvent::Closed { code, .. } => {
                println!("feed closed ({code})");
                self.closed.store(true, Ordering::Relaxed);
            }
            StreamEvent::Crashed(reason) => {
                println!("feed ended: {reason:?}");
                self.closed.store(true, Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

/// What `--help` prints.
const USAGE: &str = "usage: embedded_loop [SECONDS (2)]";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some(seconds) = first_arg::<u64>("SECONDS", 2, USAGE)? else {
        return Ok(());
    };
    let server = ReplayServer::start(ReplayConfig {
        mode: Mode::Paced { per_sec: 20_000 },
        hold_open: true,
        count: Some(10_000_000),
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })?;

    let mut feed = MioLoop::new(MioOptions::default())?;
    let mut commands = UdpSocket::bind("127.0.0.1:0".parse()?)?;
    let command_addr = commands.local_addr()?;
    feed.registry()
        .register(&mut commands, user_token(COMMANDS), Interest::READABLE)?;

    let trades = Arc::new(AtomicU64::new(0));
    let closed = Arc::new(AtomicBool::new(false));
    let (id, stats) = feed.connect(
        StreamConfig::binance_stream(&server.url()),
        Delivery::Handler(Box::new(Book {
            trades: trades.clone(),
            last_len: 0,
            closed: closed.clone(),
        })),
    )?;

    // The operator: asks for stats, then for a stop.
    std::thread::spawn(move || -> std::io::Result<()> {
        let op = std::net::UdpSocket::bind("127.0.0.1:0")?;
        std::thread::sleep(Duration::from_millis(500));
        op.send_to(b"stats", command_addr)?;
        std::thread::sleep(Duration::from_secs(seconds));
        op.send_to(b"stop", command_addr)?;
        Ok(())
    });

    let started = Instant::now();
    let mut next_report = started + Duration::from_secs(1);
    let mut buf = [0u8; 64];
    while !closed.load(Ordering::Relaxed) {
        // The application decides how long a turn may wait: here, until its next report.
        let wait = next_report.saturating_duration_since(Instant::now());
        let mut received = Vec::new();
        feed.turn(Some(wait), |event| {
            if event.token() == user_token(COMMANDS) {
                while let Ok((n, _)) = commands.recv_from(&mut buf) {
                    received.push(String::from_utf8_lossy(&buf[..n]).into_owned());
                }
            }
        })?;
        for command in received {
            match command.as_str() {
                "stats" => println!("operator asked: {:?}", stats.snapshot(Instant::now())),
                "stop" => {
                    println!(
                        "operator asked to stop after {} trades",
                        trades.load(Ordering::Relaxed)
                    );
                    // Direct call on the loop's thread: the Close frame is written now.
                    feed.stop(id);
                }
                other => println!("unknown command {other:?}"),
            }
        }
        if Instant::now() >= next_report {
            next_report += Duration::from_secs(1);
            println!(
                "{:.0} s: {} trades",
                started.elapsed().as_secs_f64(),
                trades.load(Ordering::Relaxed)
            );
        }
    }
    println!(
        "done: {} trades in {:.2} s",
        trades.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
