//! # feedwire-bench
//!
//! feedwire (blocking core, mio loop, tokio adapter) side by side with other Rust WebSocket
//! clients and with the limit (a raw read loop that only skips frame headers, or a raw memchr
//! line splitter), against the replay server running in a child process: throughput and the
//! client's CPU time per message (user + system, all threads, measured from the first message
//! to the last), one-way latency at paced rates, and peak memory on 454 KB messages; with
//! `--instructions`, each client's user-space instructions per message too (callgrind).
//!
//! Programs that run the benchmark call [`child_main`] first: the benchmark re-runs its own
//! executable for the replay server and for each memory or instruction measurement.

mod clients;
pub mod in_memory;
mod instructions;
mod pace;
mod recorder;
mod report;
mod runner;

pub use clients::{
    Client, Extra, LimitFrames, Reads, RunFn, Target, ALL as CLIENTS, LIMIT_READ_SIZE,
};
pub use pace::{common_pace, AtPace, WakeFit, FIT_ROUNDS, SERVER_PACED_BUSY};
pub use recorder::{Recorder, Window};
pub use report::{json, machine, markdown, si};
pub use runner::{
    run, run_latency, run_memory, run_paced_instructions, run_scenario, BenchOptions, LatencyRow,
    MemoryRow, PacedInstructions, Results, Row, PACED_INSTRUCTIONS_RATE,
};

/// Call first in `main`: when this process was started by the benchmark as its replay server
/// or for one client's run (a memory or instruction measurement), does that and exits;
/// otherwise returns at once.
pub fn child_main() {
    feedwire_replay::serve_if_child();
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(runner::ONE_RUN_ARG) {
        match runner::one_run_child(&args[2..]) {
            Ok(()) => std::process::exit(0),
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(2)
            }
        }
    }
}
