//! `feedwire replay-server`: the replay server on its own, for testing one's own clients.

use clap::Args;
use feedwire_replay::{Mode, ReplayConfig, ReplayServer, Scenario};

use crate::Failure;

/// Serves deterministic Binance (WebSocket) or Betfair (CRLF lines) data on 127.0.0.1 until
/// Ctrl-C.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  feedwire replay-server --port 9001
  feedwire replay-server --port 9002 --lines --tls
  feedwire replay-server --scenario huge_ticker_arr --rate 10

Scenarios: small_aggtrade, medium_kline, large_depth20, xlarge_depth_diff, huge_ticker_arr,
multiplex_mix, betfair_mcm (--lines).")]
pub(crate) struct ReplayArgs {
    /// Port on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
    #[command(flatten)]
    served: Served,
    /// Messages per second per connection (paced, with send stamps); default: firehose.
    #[arg(long)]
    rate: Option<u32>,
    /// Messages per connection (default: the scenario's count).
    #[arg(long)]
    count: Option<usize>,
}

/// What the replay server serves (shared by `demo` and `replay-server`).
#[derive(Debug, Args)]
pub(crate) struct Served {
    /// Payload scenario (default small_aggtrade, or betfair_mcm with --lines).
    #[arg(long)]
    pub(crate) scenario: Option<String>,
    /// Betfair-style CRLF lines instead of WebSocket.
    #[arg(long)]
    pub(crate) lines: bool,
    /// TLS with a CA made at start-up (clients verify against it; replay-server writes it to
    /// feedwire-replay-ca.pem).
    #[arg(long)]
    pub(crate) tls: bool,
}

impl Served {
    pub(crate) fn scenario(&self) -> Result<Scenario, Failure> {
        scenario(self.scenario.as_deref(), self.lines)
    }
}

fn scenario(name: Option<&str>, lines: bool) -> Result<Scenario, Failure> {
    let scenario = match name {
        Some(n) => {
            Scenario::from_name(n).ok_or_else(|| Failure::usage(format!("unknown scenario {n}")))?
        }
        None if lines => Scenario::BetfairMcm,
        None => Scenario::SmallAggTrade,
    };
    if lines != scenario.is_lines() {
        return Err(Failure::usage(if lines {
            format!("--lines serves betfair_mcm, not {}", scenario.name())
        } else {
            "betfair_mcm is served as lines: add --lines".to_owned()
        }));
    }
    Ok(scenario)
}

pub(crate) async fn run(args: ReplayArgs) -> Result<(), Failure> {
    let mut interrupts = crate::signals::Interrupts::install()
        .map_err(|e| Failure::failed(format!("cannot handle signals: {e}")))?;
    let scenario = args.served.scenario()?;
    let server = ReplayServer::start(ReplayConfig {
        count: args.count,
        mode: args
            .rate
            .map_or(Mode::Firehose, |per_sec| Mode::Paced { per_sec }),
        tls: args.served.tls,
        port: args.port,
        hold_open: true,
        ..ReplayConfig::new(scenario)
    })
    .map_err(|e| Failure::failed(format!("cannot start the replay server: {e}")))?;
    println!("serving {} at {}", scenario.name(), server.url());
    if !scenario.is_lines() {
        println!("(subscribe first instead: {})", server.subscribe_url());
    }
    if let Some(pki) = server.pki() {
        let path = "feedwire-replay-ca.pem";
        std::fs::write(path, &pki.ca_pem)
            .map_err(|e| Failure::failed(format!("cannot write {path}: {e}")))?;
        println!("trust this CA: {path} (e.g. feedwire stream URL --ca {path})");
    }
    println!(
        "{} messages per connection; Ctrl-C stops",
        server.messages_per_connection()
    );
    interrupts.recv().await;
    println!("stopped after {} connections", server.connections());
    Ok(())
}
