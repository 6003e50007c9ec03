//! A stream's events taken from its `event_channel` — or from a `shared_event_channel`, its
//! events tagged with its id — on a thread of the application's, as fast as that thread
//! can: messages a second and the client's CPU per message, by the channel's kind and
//! capacity, from the start and after the consumer paused (the channel full, the socket
//! holding the rest), each the median of alternating rounds. The replay server runs in a
//! child process, so the CPU is the client's (loop and consumer) alone.
//!
//! `cargo run --release -p feedwire-mio --example channel_consumer -- [ROUNDS]`

#![allow(clippy::print_stdout, reason = "an example reports to the terminal")]

use std::time::{Duration, Instant};

use feedwire_core::{StreamConfig, StreamEvent};
use feedwire_mio::{event_channel, shared_event_channel, Delivery, LoopHandle, MioOptions};
use feedwire_replay::example_args::first_arg;
use feedwire_replay::measure::cpu_time;
use feedwire_replay::{serve_if_child, ChildServer, ReplayConfig, Scenario};

const MESSAGES: usize = 300_000;
const CAPACITIES: [usize; 3] = [64, 1024, 4096];
const PAUSES_MS: [u64; 2] = [0, 200];
const SHARED: [bool; 2] = [false, true];

/// One stream's `MESSAGES` through its own channel or a `shared` one, the consumer pausing
/// `pause` after the first: the time and CPU from the first message to the last, the pause
/// taken out of the time.
fn round(capacity: usize, pause: Duration, shared: bool) -> (Duration, Duration) {
    let server = ChildServer::spawn(&ReplayConfig {
        count: Some(MESSAGES),
        hold_open: true,
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })
    .expect("replay server");
    let feed = LoopHandle::spawn(MioOptions::default()).expect("loop");
    // Both kinds through the same dynamic call, so that only the channels differ.
    let (delivery, events): (_, Box<dyn Iterator<Item = StreamEvent>>) = if shared {
        let (tx, events) = shared_event_channel(capacity);
        (Delivery::Shared(tx), Box::new(events.map(|(_, e)| e)))
    } else {
        let (tx, events) = event_channel(capacity);
        (Delivery::Channel(tx), Box::new(events))
    };
    let (id, _) = feed
        .connect(StreamConfig::binance_stream(server.url()), delivery)
        .expect("config");
    let (mut n, mut start) = (0, None);
    for event in events {
        match event {
            StreamEvent::Data { .. } => {
                if n == 0 {
                    start = Some((Instant::now(), cpu_time()));
                    std::thread::sleep(pause);
                }
                n += 1;
                if n == MESSAGES {
                    break;
                }
            }
            StreamEvent::Crashed(reason) => panic!("crashed: {reason}"),
            _ => {}
        }
    }
    let (t0, c0) = start.expect("data");
    let took = (t0.elapsed() - pause, cpu_time() - c0);
    feed.stop(id);
    feed.shutdown();
    took
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// What `--help` prints.
const USAGE: &str = "usage: channel_consumer [ROUNDS (5)]";

fn main() -> Result<(), String> {
    serve_if_child();
    let Some(rounds) = first_arg::<usize>("ROUNDS", 5, USAGE)? else {
        return Ok(());
    };
    let cases: Vec<(usize, u64, bool)> = CAPACITIES
        .iter()
        .flat_map(|&c| PAUSES_MS.iter().map(move |&p| (c, p)))
        .flat_map(|(c, p)| SHARED.iter().map(move |&s| (c, p, s)))
        .collect();
    let mut results = vec![(Vec::new(), Vec::new()); cases.len()];
    for _ in 0..rounds {
        for (i, &(capacity, pause, shared)) in cases.iter().enumerate() {
            let (time, cpu) = round(capacity, Duration::from_millis(pause), shared);
            results[i].0.push(MESSAGES as f64 / time.as_secs_f64());
            results[i].1.push(cpu.as_secs_f64() * 1e6 / MESSAGES as f64);
        }
    }
    println!(
        "channel  capacity  pause ms  msgs/s (pause taken out)  CPU µs/msg  (median of {rounds})"
    );
    for (&(capacity, pause, shared), (rates, cpus)) in cases.iter().zip(results) {
        let kind = if shared { "shared" } else { "own" };
        println!(
            "{kind:>7}  {capacity:>8}  {pause:>8}  {:>24.0}  {:>10.3}",
            median(rates),
            median(cpus)
        );
    }
    Ok(())
}
