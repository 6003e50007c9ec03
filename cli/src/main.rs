//! `feedwire`: the live demo, a client for real endpoints, the benchmark, and the replay
//! server on its own. `feedwire --help` and `feedwire <command> --help` show examples.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a command-line program reports to the terminal"
)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench_cmd;
mod demo;
mod replay_cmd;
mod signals;
mod stream_cmd;

/// Market-data streams as fast as the wire allows: Binance-style WebSocket and Betfair-style
/// CRLF lines, plain or TLS.
#[derive(Debug, Parser)]
#[command(name = "feedwire", version, propagate_version = true)]
#[command(after_help = "Examples:
  feedwire demo                          live demo against the embedded replay server
  feedwire stream wss://stream.binance.com:9443/ws --subscribe btcusdt@aggTrade
  feedwire bench --quick                 feedwire next to other clients and the raw limit
  feedwire replay-server --port 9001     serve replay data for your own client")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    Demo(demo::DemoArgs),
    Stream(stream_cmd::StreamArgs),
    Bench(bench_cmd::BenchArgs),
    ReplayServer(replay_cmd::ReplayArgs),
}

fn main() -> ExitCode {
    // The benchmark re-runs this executable for its replay server and memory runs.
    feedwire_bench::child_main();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("feedwire: cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Command::Demo(args) => runtime.block_on(demo::run(args)),
        Command::Stream(args) => runtime.block_on(stream_cmd::run(args)),
        Command::Bench(args) => bench_cmd::run(&args),
        Command::ReplayServer(args) => runtime.block_on(replay_cmd::run(args)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("feedwire: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// A command's failure: what went wrong, and the exit status that says so.
#[derive(Debug)]
pub(crate) struct Failure {
    message: String,
    /// 2: usage (bad arguments, unreadable files); 1: the stream or server failed.
    usage: bool,
}

impl Failure {
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            usage: true,
        }
    }

    pub(crate) fn failed(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            usage: false,
        }
    }

    fn exit_code(&self) -> u8 {
        if self.usage {
            2
        } else {
            1
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}
