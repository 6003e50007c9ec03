//! A Betfair Exchange Stream API session (CRLF JSON lines over TLS) through the tokio adapter.
//!
//! ```text
//! cargo run --release -p feedwire-tokio --example betfair_stream                 # local replay server
//! BETFAIR_APP_KEY=… BETFAIR_SESSION=… cargo run --release -p feedwire-tokio --example betfair_stream -- tls://stream-api.betfair.com:443 1.234567
//! ```
//! Authenticates, subscribes to the market (ladder best offers, 5 s heartbeats), prints a line
//! per second; reconnects resume from the latest `clk`. Ctrl-C stops.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "an example reports to the terminal"
)]

use std::time::Duration;

use feedwire_core::{
    tls_config_with_roots, BetfairAuth, BetfairSubscription, StreamConfig, StreamEvent,
};
use feedwire_replay::{ReplayConfig, ReplayServer, Scenario};
use feedwire_tokio::{connect, TokioOptions};

/// What `--help` prints.
const USAGE: &str =
    "usage: [BETFAIR_APP_KEY=K BETFAIR_SESSION=S] betfair_stream [URL [MARKET_ID]] \
(no URL: a local replay server)";

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url_arg = args.next();
    if matches!(url_arg.as_deref(), Some("--help" | "-h")) {
        println!("{USAGE}");
        return Ok(());
    }
    let market = args.next().unwrap_or_else(|| "1.234567".to_owned());
    let local = match url_arg {
        Some(_) => None,
        None => Some(ReplayServer::start(ReplayConfig {
            tls: true,
            hold_open: true,
            ..ReplayConfig::new(Scenario::BetfairMcm)
        })?),
    };
    let url = match (&url_arg, &local) {
        (Some(u), _) => u.clone(),
        (None, Some(srv)) => srv.url(),
        (None, None) => unreachable!("a local server runs when no URL is given"),
    };
    let auth = BetfairAuth {
        app_key: std::env::var("BETFAIR_APP_KEY").unwrap_or_else(|_| "local-app-key".to_owned()),
        session: std::env::var("BETFAIR_SESSION").unwrap_or_else(|_| "local-session".to_owned()),
    };
    let options = TokioOptions {
        tls: local
            .as_ref()
            .and_then(|s| s.pki())
            .map(|p| tls_config_with_roots(p.root_store())),
        ..TokioOptions::default()
    };
    let (handle, mut events) = connect(StreamConfig::betfair(&url, auth), options)?;
    handle
        .subscribe_markets(BetfairSubscription {
            filter_json: format!("{{\"marketIds\":[\"{market}\"]}}"),
            data_filter_json: Some(
                "{\"fields\":[\"EX_BEST_OFFERS\"],\"ladderLevels\":3}".to_owned(),
            ),
            heartbeat_ms: Some(5000),
            conflate_ms: None,
        })
        .await?;
    let expected = local.as_ref().map(|s| s.messages_per_connection() as u64);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let (mut changes, mut heartbeats) = (0u64, 0u64);
    loop {
        tokio::select! {
            event = events.next() => match event {
                Some(StreamEvent::Data { heartbeat, .. }) => {
                    if heartbeat { heartbeats += 1 } else { changes += 1 }
                    if expected == Some(changes + heartbeats) {
                        handle.stop();
                    }
                }
                Some(StreamEvent::Authenticated) => eprintln!("authenticated at {url}"),
                Some(StreamEvent::Subscribed { .. }) => eprintln!("subscribed to market {market}"),
                Some(StreamEvent::Reconnecting { reason, delay, .. }) => eprintln!("reconnecting in {delay:?}: {reason}"),
                Some(StreamEvent::Closed { .. }) => eprintln!("closed"),
                Some(StreamEvent::Crashed(reason)) => eprintln!("crashed: {reason}"),
                Some(_) => {}
                None => break,
            },
            _ = tick.tick() => println!("{changes} market changes, {heartbeats} heartbeats"),
            _ = tokio::signal::ctrl_c() => handle.stop(),
        }
    }
    println!("{changes} market changes, {heartbeats} heartbeats");
    Ok(())
}
