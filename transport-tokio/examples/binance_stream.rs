//! A Binance-style WebSocket stream through the tokio adapter.
//!
//! ```text
//! cargo run --release -p feedwire-tokio --example binance_stream                 # local replay server
//! cargo run --release -p feedwire-tokio --example binance_stream -- wss://stream.binance.com:9443/ws btcusdt@aggTrade ethusdt@trade
//! ```
//! Prints a line per second (messages, MB) and a summary; Ctrl-C stops gracefully.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "an example reports to the terminal"
)]

use std::time::{Duration, Instant};

use feedwire_core::{tls_config_with_roots, StreamConfig, StreamEvent};
use feedwire_replay::{ReplayConfig, ReplayServer, Scenario};
use feedwire_tokio::{connect, TokioOptions};

/// What `--help` prints.
const USAGE: &str = "usage: binance_stream [URL [STREAM...]] (no URL: a local replay server)";

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url_arg = args.next();
    if matches!(url_arg.as_deref(), Some("--help" | "-h")) {
        println!("{USAGE}");
        return Ok(());
    }
    let mut streams: Vec<String> = args.collect();
    // With no URL, serve 300,000 aggTrade messages locally (verification stays on: we trust
    // the replay server's start-up CA, nothing else).
    let local = match url_arg {
        Some(_) => None,
        None => Some(ReplayServer::start(ReplayConfig {
            tls: true,
            hold_open: true,
            ..ReplayConfig::new(Scenario::SmallAggTrade)
        })?),
    };
    let url = match (&url_arg, &local) {
        (Some(u), _) => u.clone(),
        (None, Some(srv)) => srv.subscribe_url(),
        (None, None) => unreachable!("a local server runs when no URL is given"),
    };
    if streams.is_empty() {
        streams.push("btcusdt@aggTrade".to_owned());
    }
    let options = TokioOptions {
        tls: local
            .as_ref()
            .and_then(|s| s.pki())
            .map(|p| tls_config_with_roots(p.root_store())),
        ..TokioOptions::default()
    };
    let (handle, mut events) = connect(StreamConfig::binance_stream(&url), options)?;
    let refs: Vec<&str> = streams.iter().map(String::as_str).collect();
    handle.subscribe(&refs).await?;
    let expected = local.as_ref().map(|s| s.messages_per_connection());
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let (mut msgs, mut bytes) = (0u64, 0u64);
    loop {
        tokio::select! {
            event = events.next() => match event {
                Some(StreamEvent::Data { payload, .. }) => {
                    msgs += 1;
                    bytes += payload.len() as u64;
                    if expected == Some(msgs as usize) {
                        handle.stop();
                    }
                }
                Some(StreamEvent::Opened { .. }) => eprintln!("connected to {url}"),
                Some(StreamEvent::Subscribed { streams, .. }) => eprintln!("subscribed: {}", streams.join(", ")),
                Some(StreamEvent::Reconnecting { attempt, delay, reason, .. }) => eprintln!("reconnecting (attempt {attempt}, in {delay:?}): {reason}"),
                Some(StreamEvent::Closed { by, code }) => eprintln!("closed by {by:?} ({code})"),
                Some(StreamEvent::Crashed(reason)) => eprintln!("crashed: {reason}"),
                Some(_) => {}
                None => break,
            },
            _ = tick.tick() => println!("{msgs} messages, {:.1} MB", bytes as f64 / 1e6),
            _ = tokio::signal::ctrl_c() => handle.stop(),
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{msgs} messages, {:.1} MB in {secs:.2} s: {:.0} msgs/s",
        bytes as f64 / 1e6,
        msgs as f64 / secs
    );
    Ok(())
}
