//! A stream's messages taken from `Events`, the default delivery (each data message queued as a
//! `Bytes` event and handed over in batches), as fast as the application's task can: a
//! firehose of one scenario from the replay server (a child process, so that the CPU measured
//! is the client's alone), messages a second and CPU per message from the first message to the
//! last, the median of the rounds. On a current-thread runtime (the adapter's reads sweep the
//! socket), or with `--multi-thread` on two workers: the consumer in `block_on`, on the thread
//! that called it (as in `#[tokio::main]`'s body), or with `--in-task` in a task spawned onto
//! the workers.
//!
//! `cargo run --release -p feedwire-tokio --example events_consumer -- [SCENARIO
//! (xlarge_depth_diff)] [ROUNDS (5)] [--multi-thread [--in-task]]` (WebSocket scenarios)

#![allow(clippy::print_stdout, reason = "an example reports to the terminal")]

use std::time::Instant;

use feedwire_core::{StreamConfig, StreamEvent};
use feedwire_replay::measure::cpu_time;
use feedwire_replay::{serve_if_child, ChildServer, ReplayConfig, Scenario};
use feedwire_tokio::{connect, TokioOptions};

/// What `--help` prints.
const USAGE: &str = "usage: events_consumer [SCENARIO (xlarge_depth_diff)] [ROUNDS (5)] \
                     [--multi-thread [--in-task]]";

/// Where the runtime runs and where the consumer waits.
#[derive(Clone, Copy)]
enum Placement {
    /// A current-thread runtime: the stream's task and the consumer on one thread.
    CurrentThread,
    /// Two workers; the consumer in `block_on`, on the calling thread.
    MultiThread,
    /// Two workers; the consumer in a task spawned onto them.
    MultiThreadTask,
}

/// One round: the scenario's messages through `Events`; messages a second and CPU µs a
/// message.
fn round(scenario: Scenario, placement: Placement) -> Result<(f64, f64), String> {
    let count = scenario.default_count();
    let server = ChildServer::spawn(&ReplayConfig {
        count: Some(count),
        hold_open: true,
        ..ReplayConfig::new(scenario)
    })
    .map_err(|e| format!("replay server: {e}"))?;
    let runtime = match placement {
        Placement::CurrentThread => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        Placement::MultiThread | Placement::MultiThreadTask => {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
        }
    }
    .map_err(|e| format!("runtime: {e}"))?;
    let consume = async move {
        let config = StreamConfig::binance_stream(server.url());
        let (handle, mut events) =
            connect(config, TokioOptions::default()).map_err(|e| e.to_string())?;
        let (mut n, mut start) = (0, None);
        while let Some(event) = events.next().await {
            match event {
                StreamEvent::Data { payload, .. } => {
                    if n == 0 {
                        start = Some((Instant::now(), cpu_time()));
                    }
                    std::hint::black_box(payload);
                    n += 1;
                    if n == count {
                        break;
                    }
                }
                StreamEvent::Crashed(reason) => return Err(format!("crashed: {reason}")),
                _ => {}
            }
        }
        let (t0, c0) = start.ok_or("no data")?;
        let (took, cpu) = (t0.elapsed(), cpu_time() - c0);
        handle.stop();
        if n < count {
            return Err(format!("{n} of {count} messages came"));
        }
        Ok((
            count as f64 / took.as_secs_f64(),
            cpu.as_secs_f64() * 1e6 / count as f64,
        ))
    };
    match placement {
        Placement::MultiThreadTask => runtime.block_on(async {
            tokio::spawn(consume)
                .await
                .map_err(|e| format!("consumer task: {e}"))?
        }),
        Placement::CurrentThread | Placement::MultiThread => runtime.block_on(consume),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), String> {
    serve_if_child();
    let (mut scenario, mut rounds) = (Scenario::XlargeDepthDiff, 5);
    let (mut multi_thread, mut in_task) = (false, false);
    let mut positional = 0;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--help" | "-h" => {
                println!("{USAGE}");
                return Ok(());
            }
            "--multi-thread" => multi_thread = true,
            "--in-task" => in_task = true,
            _ if positional == 0 => {
                scenario = Scenario::from_name(&arg)
                    .filter(|s| !s.is_lines())
                    .ok_or_else(|| format!("SCENARIO: no WebSocket scenario {arg}\n{USAGE}"))?;
                positional += 1;
            }
            _ if positional == 1 => {
                rounds = arg
                    .parse::<usize>()
                    .ok()
                    .filter(|&r| r > 0)
                    .ok_or_else(|| format!("ROUNDS: not a positive number: {arg}\n{USAGE}"))?;
                positional += 1;
            }
            _ => return Err(format!("unexpected argument {arg}\n{USAGE}")),
        }
    }
    let placement = match (multi_thread, in_task) {
        (false, false) => Placement::CurrentThread,
        (true, false) => Placement::MultiThread,
        (true, true) => Placement::MultiThreadTask,
        (false, true) => return Err(format!("--in-task needs --multi-thread\n{USAGE}")),
    };
    let (mut rates, mut cpus) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let (rate, cpu) = round(scenario, placement)?;
        println!("  {rate:>12.0} msgs/s  {cpu:.3} µs/msg");
        rates.push(rate);
        cpus.push(cpu);
    }
    println!(
        "{}: {:.0} msgs/s, {:.3} µs CPU a message (median of {rounds}, {})",
        scenario.name(),
        median(rates),
        median(cpus),
        match placement {
            Placement::CurrentThread => "current-thread runtime",
            Placement::MultiThread => "multi-thread runtime, consumer in block_on",
            Placement::MultiThreadTask => "multi-thread runtime, consumer in a task",
        }
    );
    Ok(())
}
