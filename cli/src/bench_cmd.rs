//! `feedwire bench`: the side-by-side benchmark (the `feedwire-bench` crate).

use clap::Args;
use feedwire_bench::{json, machine, markdown, BenchOptions};

use crate::Failure;

/// Runs feedwire (blocking, mio, tokio) next to tokio-tungstenite, fastwebsockets,
/// tokio-websockets, nexus-web, nexus-async-net, sockudo-ws and the raw-read limit, against
/// the replay server in a child process; prints throughput, CPU per message, latency and
/// memory tables.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  feedwire bench --quick
  feedwire bench --json results.json")]
pub(crate) struct BenchArgs {
    /// A short run: 3 rounds, a fifth of each scenario, 1 s per latency rate.
    #[arg(long)]
    quick: bool,
    /// Also write the results as a JSON array to PATH.
    #[arg(long, value_name = "PATH")]
    json: Option<String>,
    /// Rounds per scenario and per latency rate (each client once per round, in rotating
    /// order).
    #[arg(long)]
    runs: Option<usize>,
    /// Rounds per latency rate, when it should differ from `--runs` (a latency round takes
    /// seconds per client, a throughput round milliseconds).
    #[arg(long, value_name = "RUNS")]
    latency_runs: Option<usize>,
}

pub(crate) fn run(args: &BenchArgs) -> Result<(), Failure> {
    let mut options = if args.quick {
        BenchOptions::quick()
    } else {
        BenchOptions::full()
    };
    options.set_rounds(
        args.runs.map(|r| r.max(1)),
        args.latency_runs.map(|r| r.max(1)),
    );
    eprintln!("feedwire bench on {}", machine());
    let results =
        feedwire_bench::run(&options, &mut |line| eprintln!("{line}")).map_err(Failure::failed)?;
    println!("{}", markdown(&results));
    if let Some(path) = &args.json {
        std::fs::write(path, json(&results))
            .map_err(|e| Failure::usage(format!("cannot write {path}: {e}")))?;
        eprintln!("results written to {path}");
    }
    Ok(())
}
