//! A stream's messages taken from `Events`, the default delivery (each data message queued as a
//! `Bytes` event and handed over in batches), as fast as the application's task can: a
//! firehose of one scenario from the replay server (a child process, so that the CPU measured
//! is the client's alone), messages a second and CPU per message from the first message to the
//! last, the median of the rounds. On a current-thread runtime (the adapter's reads sweep the
//! socket), or with `--multi-thread` on two workers.
//!
//! `cargo run --release -p feedwire-tokio --example events_consumer -- [SCENARIO
//! (xlarge_depth_diff)] [ROUNDS (5)] [--multi-thread]` (WebSocket scenarios)

#![allow(clippy::print_stdout, reason = "an example reports to the terminal")]

use std::time::Instant;

use feedwire_core::{StreamConfig, StreamEvent};
use feedwire_replay::measure::cpu_time;
use feedwire_replay::{serve_if_child, ChildServer, ReplayConfig, Scenario};
use feedwire_tokio::{connect, TokioOptions};

/// What `--help` prints.
const USAGE: &str =
    "usage: events_consumer [SCENARIO (xlarge_depth_diff)] [ROUNDS (5)] [--multi-thread]";

/// One round: the scenario's messages through `Events`; messages a second and CPU µs a
/// message.
fn round(scenario: Scenario, multi_thread: bool) -> Result<(f64, f64), String> {
    let count = scenario.default_count();
    let server = ChildServer::spawn(&ReplayConfig {
        count: Some(count),
        hold_open: true,
        ..ReplayConfig::new(scenario)
    })
    .map_err(|e| format!("replay server: {e}"))?;
    let runtime = if multi_thread {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    }
    .map_err(|e| format!("runtime: {e}"))?;
    runtime.block_on(async move {
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
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), String> {
    serve_if_child();
    let (mut scenario, mut rounds, mut multi_thread) = (Scenario::XlargeDepthDiff, 5, false);
    let mut positional = 0;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--help" | "-h" => {
                println!("{USAGE}");
                return Ok(());
            }
            "--multi-thread" => multi_thread = true,
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
    let (mut rates, mut cpus) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let (rate, cpu) = round(scenario, multi_thread)?;
        println!("  {rate:>12.0} msgs/s  {cpu:.3} µs/msg");
        rates.push(rate);
        cpus.push(cpu);
    }
    println!(
        "{}: {:.0} msgs/s, {:.3} µs CPU a message (median of {rounds}, {} runtime)",
        scenario.name(),
        median(rates),
        median(cpus),
        if multi_thread {
            "multi-thread"
        } else {
            "current-thread"
        }
    );
    Ok(())
}
