//! Runs every client on every scenario, alternating clients within each round so drift on a
//! shared machine hits all of them alike; medians and min–max over the rounds.

use std::time::Duration;

use feedwire_core::{tls_config_with_roots, Endpoint};
use feedwire_replay::{measure, root_store_of, ChildServer, Mode, ReplayConfig, Scenario};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::clients::{Client, Extra, Reads, Target, ALL};
use crate::instructions::{self, Feed};
use crate::recorder::{Recorder, Window};

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Rounds per scenario (every client once per round).
    pub runs: usize,
    /// Rounds per latency rate. Kept apart from `runs` because a latency round costs
    /// `latency_secs` per client and rate (a throughput round, tens of ms), so the
    /// throughput medians can take many more rounds in the same hour.
    pub latency_runs: usize,
    /// Messages per run: the scenario's count divided by this.
    pub count_divisor: usize,
    /// Scenarios, in order.
    pub scenarios: Vec<Scenario>,
    /// Client names to run (empty: all).
    pub clients: Vec<String>,
    /// Paced rates for latency (msgs/s), and seconds per rate.
    pub latency_rates: Vec<u32>,
    /// Seconds of paced traffic per latency run.
    pub latency_secs: u32,
    /// Measure peak RSS on `huge_ticker_arr`, one fresh process per client.
    pub memory: bool,
    /// Clients on CPU 0, the replay server on CPU 1. Unpinned, the two share both CPUs and
    /// a client mostly keeps up (short reads); pinned, the server outruns every client and
    /// each read comes back full: the regime of a consumer behind its feed on its own core.
    pub pin: bool,
    /// Every scenario and the latency runs over TLS (`wss://`, `tls://`), the replay
    /// server's test CA trusted; memory is measured over plain TCP.
    pub tls: bool,
    /// Count each client's user-space instructions per message on every scenario too, and
    /// on a paced stream where each read holds one message (valgrind's callgrind; over TLS
    /// under `tls`): the median of up to three counts, as many as `runs`.
    pub instructions: bool,
}

impl BenchOptions {
    /// The full benchmark: 5 rounds, every scenario at its full count, latency at 10k and
    /// 100k msgs/s for 3 s each (5 rounds), memory.
    pub fn full() -> Self {
        Self {
            runs: 5,
            latency_runs: 5,
            count_divisor: 1,
            scenarios: vec![
                Scenario::SmallAggTrade,
                Scenario::MediumKline,
                Scenario::LargeDepth20,
                Scenario::XlargeDepthDiff,
                Scenario::HugeTickerArr,
                Scenario::MultiplexMix,
                Scenario::BetfairMcm,
            ],
            clients: Vec::new(),
            latency_rates: vec![10_000, 100_000],
            latency_secs: 3,
            memory: true,
            pin: false,
            tls: false,
            instructions: false,
        }
    }

    /// A short run: 3 rounds, a fifth of each count, 1 s per latency rate.
    pub fn quick() -> Self {
        Self {
            runs: 3,
            latency_runs: 3,
            count_divisor: 5,
            latency_secs: 1,
            ..Self::full()
        }
    }

    /// Applies `--runs` and `--latency-runs`: `runs` alone sets both counts, `latency_runs`
    /// then sets the latency rounds apart, whichever flag came first.
    pub fn set_rounds(&mut self, runs: Option<usize>, latency_runs: Option<usize>) {
        if let Some(runs) = runs {
            self.runs = runs;
            self.latency_runs = runs;
        }
        if let Some(runs) = latency_runs {
            self.latency_runs = runs;
        }
    }

    fn selected(&self) -> Vec<&'static Client> {
        ALL.iter()
            .filter(|c| self.clients.is_empty() || self.clients.iter().any(|n| n == c.name))
            .collect()
    }
}

/// One scenario × client: medians over the rounds.
#[derive(Debug, Clone)]
pub struct Row {
    /// Scenario name.
    pub scenario: String,
    /// Client name.
    pub client: &'static str,
    /// A peer library.
    pub peer: bool,
    /// Messages per run.
    pub messages: u64,
    /// Mean payload size, bytes.
    pub mean_payload: f64,
    /// Median throughput.
    pub msgs_per_s: f64,
    /// Median CPU per message, µs (user + system).
    pub cpu_us_per_msg: f64,
    /// Min and max CPU per message over the rounds.
    pub cpu_range: (f64, f64),
    /// Min and max throughput over the rounds.
    pub msgs_per_s_range: (f64, f64),
    /// CPU per message of each round in order, µs; `None` for a round that failed. Rounds
    /// line up across the scenario's rows: round `k` of every client ran in one pass.
    pub cpu_by_round: Vec<Option<f64>>,
    /// Whether the client shared its CPU in each round, in the same order (the kernel
    /// preempted it at least once per 4 ms of the round's window); false for a round that
    /// failed.
    pub shared_by_round: Vec<bool>,
    /// The replay server's CPU per message in each round, µs, in the same order; `None` for a
    /// round that failed or where the server's time could not be read.
    pub server_cpu_by_round: Vec<Option<f64>>,
    /// The share of each round's window the server spent on a CPU (its CPU time over the
    /// window's wall time), in the same order: about 1 where the server set the pace.
    pub server_busy_by_round: Vec<Option<f64>>,
    /// Times the client waited (went to sleep) in each round's window, in the same order;
    /// `None` for a round that failed.
    pub waits_by_round: Vec<Option<u64>>,
    /// Messages per second of each round, in the same order; `None` for a round that failed.
    pub msgs_per_s_by_round: Vec<Option<f64>>,
    /// Read buffer held after the run (feedwire).
    pub read_buffer_bytes: Option<u64>,
    /// User-space instructions per message (callgrind), when counted.
    pub instructions_per_msg: Option<f64>,
    /// Why runs failed, if any did.
    pub failures: Vec<String>,
}

impl Row {
    /// A row of scenario `s` whose rounds took `cpu_by_round` (none shared), every other
    /// figure 1: for tests of what is made of the rounds.
    #[cfg(test)]
    pub(crate) fn of_rounds(
        client: &'static str,
        peer: bool,
        cpu_by_round: &[Option<f64>],
    ) -> Self {
        Self {
            scenario: "s".to_owned(),
            client,
            peer,
            messages: 1,
            mean_payload: 1.0,
            msgs_per_s: 1.0,
            cpu_us_per_msg: 1.0,
            cpu_range: (1.0, 1.0),
            msgs_per_s_range: (1.0, 1.0),
            cpu_by_round: cpu_by_round.to_vec(),
            shared_by_round: vec![false; cpu_by_round.len()],
            server_cpu_by_round: vec![None; cpu_by_round.len()],
            server_busy_by_round: vec![None; cpu_by_round.len()],
            waits_by_round: vec![None; cpu_by_round.len()],
            msgs_per_s_by_round: vec![None; cpu_by_round.len()],
            read_buffer_bytes: None,
            instructions_per_msg: None,
            failures: Vec::new(),
        }
    }

    /// Rounds that completed.
    pub fn runs(&self) -> usize {
        self.cpu_by_round.iter().flatten().count()
    }

    /// Rounds in which the client shared its CPU (see `shared_by_round`).
    pub fn shared_rounds(&self) -> usize {
        self.shared_by_round.iter().filter(|&&s| s).count()
    }

    /// Median CPU per message over the rounds in which the client had its CPU to itself, µs;
    /// `None` when it had it in none.
    pub fn cpu_us_per_msg_alone(&self) -> Option<f64> {
        let alone: Vec<f64> = self
            .cpu_by_round
            .iter()
            .zip(&self.shared_by_round)
            .filter_map(|(cpu, shared)| cpu.filter(|_| !shared))
            .collect();
        (!alone.is_empty()).then(|| median(alone))
    }

    /// Median over the rounds of what serving the client cost the replay server, µs per
    /// message; `None` when no round measured it.
    pub fn server_cpu_us_per_msg(&self) -> Option<f64> {
        median_of_some(&self.server_cpu_by_round)
    }

    /// Median over the rounds of the share of the window the server was on a CPU (1 = all of
    /// it); `None` when no round measured it.
    pub fn server_busy(&self) -> Option<f64> {
        median_of_some(&self.server_busy_by_round)
    }
}

/// The median of the values present; `None` when there are none.
fn median_of_some(v: &[Option<f64>]) -> Option<f64> {
    let present: Vec<f64> = v.iter().flatten().copied().collect();
    (!present.is_empty()).then(|| median(present))
}

/// One paced rate × client.
#[derive(Debug, Clone)]
pub struct LatencyRow {
    /// Messages per second sent.
    pub rate: u32,
    /// Client name.
    pub client: &'static str,
    /// One-way latency percentiles, µs: medians over the rounds.
    pub p50_us: u64,
    /// 99th percentile, µs.
    pub p99_us: u64,
    /// Lowest and highest 99th percentile of the rounds, µs.
    pub p99_range_us: (u64, u64),
    /// 99.9th percentile, µs.
    pub p999_us: u64,
    /// Largest of all rounds, µs.
    pub max_us: u64,
    /// CPU per message at this rate, µs (wake-ups included), median over the rounds.
    pub cpu_us_per_msg: f64,
    /// Rounds that completed.
    pub runs: usize,
    /// Why the run failed, if it did.
    pub failure: Option<String>,
}

/// Peak memory while receiving `huge_ticker_arr`, measured in a fresh process per client.
#[derive(Debug, Clone)]
pub struct MemoryRow {
    /// Client name.
    pub client: &'static str,
    /// Resident memory before connecting, bytes.
    pub baseline_rss: u64,
    /// Peak resident memory during the run, bytes.
    pub peak_rss: u64,
    /// Read buffer held after the run (feedwire).
    pub read_buffer_bytes: Option<u64>,
}

/// Everything one invocation measured.
#[derive(Debug, Clone, Default)]
pub struct Results {
    /// Throughput and CPU.
    pub rows: Vec<Row>,
    /// Latency.
    pub latency: Vec<LatencyRow>,
    /// Memory.
    pub memory: Vec<MemoryRow>,
    /// Instructions per message at [`PACED_INSTRUCTIONS_RATE`] (with `instructions`).
    pub paced_instructions: Vec<PacedInstructions>,
}

/// A client's user-space instructions per message on a paced stream, where each read holds
/// one message: what a read costs besides what a message does.
#[derive(Debug, Clone)]
pub struct PacedInstructions {
    /// Client name.
    pub client: &'static str,
    /// A peer library.
    pub peer: bool,
    /// `None` when counting failed.
    pub instructions_per_msg: Option<f64>,
}

/// Messages per second of the paced instruction counts: slow enough that a client under
/// callgrind (some 50 times slower than natively) still reads each message on its own.
pub const PACED_INSTRUCTIONS_RATE: u32 = 1000;

struct Sample {
    msgs_per_s: f64,
    cpu_us_per_msg: f64,
    messages: u64,
    bytes: u64,
    read_buffer: Option<u64>,
    reads: Option<Reads>,
    waits: u64,
    preemptions: u64,
    shared: bool,
    /// The replay server's CPU per message of the run (connection to close), µs.
    server_cpu_us_per_msg: Option<f64>,
    /// The server's CPU time over the run over the window's wall time: about 1 when the
    /// server, not the client, set the pace.
    server_busy: Option<f64>,
}

/// Preemptions per millisecond of a round's window at and above which the client counts as
/// having shared its CPU. The scheduler may put the client on the replay server's CPU even with
/// the other one idle (a VM's kernel may pack tasks onto few vCPUs: the machine line says when
/// it does), and there the two take turns in slices of about a millisecond: the client is
/// preempted about once a millisecond (0.7-1.6 a ms in the shared rounds of 48 on 0.3 KB) and
/// spends 2-3 times the CPU per message (taking turns with the server on one CPU, every client
/// did: limit 0.084-0.093 µs, nexus-web 0.087-0.092, the blocking core 0.089-0.104, against
/// 0.03-0.06 on CPUs of their own). A client with a CPU of its own is preempted only by the
/// kernel's threads: 0-0.16 a ms in the other rounds of 140 on every scenario, pinned and not;
/// the rounds at 0.26-0.69 a ms had shared part of their window and spent more than the rest.
pub(crate) const SHARED_CPU_PREEMPTIONS_PER_MS: f64 = 0.25;

/// Whether a window of `wall` in which the client was preempted `preemptions` times was spent
/// sharing its CPU (see [`SHARED_CPU_PREEMPTIONS_PER_MS`]).
pub(crate) fn shared_cpu(preemptions: u64, wall: Duration) -> bool {
    preemptions > 0
        && preemptions as f64 >= SHARED_CPU_PREEMPTIONS_PER_MS * wall.as_secs_f64() * 1e3
}

/// CPU per message over the window `w`, µs.
fn cpu_us_per_msg(w: &Window) -> f64 {
    w.cpu.as_secs_f64() * 1e6 / w.messages.max(1) as f64
}

impl Sample {
    /// The rates of a run of `count` messages that measured `w`, in which the server used
    /// `server_cpu` serving them.
    fn of(w: &Window, count: u64, extra: &Extra, server_cpu: Option<Duration>) -> Self {
        let msgs = w.messages.max(1) as f64;
        Self {
            msgs_per_s: msgs / w.wall.as_secs_f64().max(1e-9),
            cpu_us_per_msg: cpu_us_per_msg(w),
            messages: count,
            bytes: w.bytes,
            read_buffer: extra.read_buffer_bytes,
            reads: extra.reads,
            waits: w.waits,
            preemptions: w.preemptions,
            shared: shared_cpu(w.preemptions, w.wall),
            server_cpu_us_per_msg: server_cpu.map(|c| c.as_secs_f64() * 1e6 / count.max(1) as f64),
            server_busy: server_cpu.map(|c| c.as_secs_f64() / w.wall.as_secs_f64().max(1e-9)),
        }
    }
}

/// One run of `client` against `server` (at `target`). The server's CPU time is read before
/// the client connects and after it is done, outside the client's window.
fn run_once(
    client: &Client,
    target: &Target,
    server: &ChildServer,
    count: u64,
) -> Result<Sample, String> {
    let rec = Recorder::new(count, false);
    let server_before = server.cpu_time();
    let (rec, extra) = (client.run)(target, rec)?;
    let server_cpu = server
        .cpu_time()
        .zip(server_before)
        .map(|(after, before)| after.saturating_sub(before));
    let w = rec
        .window()
        .ok_or_else(|| format!("incomplete: {} of {count} messages", rec.messages()))?;
    Ok(Sample::of(&w, count, &extra, server_cpu))
}

/// The order in which `clients` clients run in round `round` (indices): shuffled afresh each
/// round, seeded by the round so that an invocation repeats. No client always runs first or
/// last, and none always right after the same one: where the scheduler put the previous
/// client and the server carries over to the next client (shared CPUs come in runs of
/// consecutive clients), and under the rotation this replaced, the clients after the limit
/// inherited most of the shared rounds (0.3 KB: `limit-utf8` and the three feedwire clients,
/// in that order after the limit, shared in 10-24 of 41 rounds; the limit and nexus-web in 1).
fn round_order(clients: usize, round: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..clients).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(round as u64);
    for k in (1..clients).rev() {
        let j = (rng.next_u64() % (k as u64 + 1)) as usize;
        order.swap(k, j);
    }
    order
}

/// The median of `v`; NaN when empty.
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn range(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

/// CPU of the clients (and of the memory measurements they start) when pinned.
const CLIENT_CPU: usize = 0;

/// The replay server's CPU, when pinned.
fn server_cpu(options: &BenchOptions) -> Option<usize> {
    options.pin.then_some(CLIENT_CPU + 1)
}

/// A firehose replay server in a child process, where clients connect to it, and the
/// messages each run receives.
fn firehose(
    options: &BenchOptions,
    scenario: Scenario,
) -> Result<(ChildServer, Target, usize), String> {
    let count = (scenario.default_count() / options.count_divisor.max(1)).max(100);
    let (server, target) = firehose_of(options, scenario, count)?;
    Ok((server, target, count))
}

/// A firehose replay server sending `count` messages per connection.
fn firehose_of(
    options: &BenchOptions,
    scenario: Scenario,
    count: usize,
) -> Result<(ChildServer, Target), String> {
    let server = ChildServer::spawn_on_cpu(
        &ReplayConfig {
            count: Some(count),
            hold_open: true,
            tls: options.tls,
            ..ReplayConfig::new(scenario)
        },
        server_cpu(options),
    )
    .map_err(|e| format!("replay server: {e}"))?;
    let target = target_of(&server)?;
    Ok((server, target))
}

/// Where clients connect to `server`, trusting its CA when it speaks TLS.
fn target_of(server: &ChildServer) -> Result<Target, String> {
    target_for(server.url(), server.ca_pem())
}

/// Where clients connect to the replay server at `url`, trusting `ca_pem` (its CA) when it
/// speaks TLS.
fn target_for(url: &str, ca_pem: Option<&str>) -> Result<Target, String> {
    let target = Target::from_url(url);
    let endpoint = Endpoint::parse(url).map_err(|e| format!("replay server URL {url}: {e}"))?;
    if !endpoint.scheme.is_tls() {
        return Ok(target);
    }
    let pem = ca_pem.ok_or("a TLS replay server, and no CA to trust")?;
    Ok(target.with_tls(tls_config_with_roots(root_store_of(pem))))
}

/// Throughput and CPU for one scenario; `progress` hears of each finished run.
pub fn run_scenario(
    options: &BenchOptions,
    scenario: Scenario,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Row>, String> {
    let (server, target, count) = firehose(options, scenario)?;
    progress(&format!(
        "{}: {count} messages a run from {}",
        scenario.name(),
        target.url
    ));
    let clients: Vec<&Client> = options
        .selected()
        .into_iter()
        .filter(|c| c.throughput && if target.lines { c.lines } else { c.websocket })
        .collect();
    // Each client's rounds in order: the sample, or why the round failed.
    let mut rounds: Vec<Vec<Result<Sample, String>>> = clients.iter().map(|_| Vec::new()).collect();
    for round in 0..options.runs {
        for i in round_order(clients.len(), round) {
            let outcome = run_once(clients[i], &target, &server, count as u64);
            match &outcome {
                Ok(s) => {
                    progress(&format!(
                        "{} round {}: {:<18} {:>12.0} msgs/s {:>8.3} us/msg{} {:>5} waits {:>4} \
                         preempted{}{}",
                        scenario.name(),
                        round + 1,
                        clients[i].name,
                        s.msgs_per_s,
                        s.cpu_us_per_msg,
                        s.reads.map_or_else(String::new, |r| format!(
                            " {:>7} reads {:>3.0}% full",
                            r.all,
                            100.0 * r.full as f64 / r.all.max(1) as f64
                        )),
                        s.waits,
                        s.preemptions,
                        if s.shared { " (shared CPU)" } else { "" },
                        s.server_cpu_us_per_msg.zip(s.server_busy).map_or_else(
                            String::new,
                            |(cpu, busy)| format!(
                                "; server {cpu:.3} us/msg, busy {:.0}%",
                                100.0 * busy
                            )
                        ),
                    ));
                }
                Err(e) => progress(&format!(
                    "{} {}: failed: {e}",
                    scenario.name(),
                    clients[i].name
                )),
            }
            rounds[i].push(outcome);
            // Let the server's side of the previous connection wind down.
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let instructions = if options.instructions {
        count_instructions(options, &clients, scenario, &server, count, progress)
    } else {
        vec![None; clients.len()]
    };
    Ok(clients
        .iter()
        .zip(rounds)
        .zip(instructions)
        .map(|((c, rounds), instructions_per_msg)| {
            row_of(scenario, c, count as u64, &rounds, instructions_per_msg)
        })
        .collect())
}

/// A client's row of `scenario` from its `rounds` in order (a failed round: why).
fn row_of(
    scenario: Scenario,
    client: &Client,
    messages: u64,
    rounds: &[Result<Sample, String>],
    instructions_per_msg: Option<f64>,
) -> Row {
    let each = |f: fn(&Sample) -> f64| -> Vec<Option<f64>> {
        rounds.iter().map(|r| r.as_ref().ok().map(f)).collect()
    };
    let done: Vec<&Sample> = rounds.iter().filter_map(|r| r.as_ref().ok()).collect();
    let cpu: Vec<f64> = done.iter().map(|s| s.cpu_us_per_msg).collect();
    let mps: Vec<f64> = done.iter().map(|s| s.msgs_per_s).collect();
    Row {
        scenario: scenario.name().to_owned(),
        client: client.name,
        peer: client.peer,
        messages,
        mean_payload: done
            .first()
            .map_or(0.0, |x| x.bytes as f64 / x.messages.max(1) as f64),
        msgs_per_s: median(mps.clone()),
        cpu_us_per_msg: median(cpu.clone()),
        cpu_range: range(&cpu),
        msgs_per_s_range: range(&mps),
        cpu_by_round: each(|s| s.cpu_us_per_msg),
        shared_by_round: rounds
            .iter()
            .map(|r| r.as_ref().is_ok_and(|s| s.shared))
            .collect(),
        server_cpu_by_round: rounds
            .iter()
            .map(|r| r.as_ref().ok().and_then(|s| s.server_cpu_us_per_msg))
            .collect(),
        server_busy_by_round: rounds
            .iter()
            .map(|r| r.as_ref().ok().and_then(|s| s.server_busy))
            .collect(),
        waits_by_round: rounds
            .iter()
            .map(|r| r.as_ref().ok().map(|s| s.waits))
            .collect(),
        msgs_per_s_by_round: each(|s| s.msgs_per_s),
        read_buffer_bytes: done.last().and_then(|x| x.read_buffer),
        instructions_per_msg,
        failures: rounds
            .iter()
            .filter_map(|r| r.as_ref().err().cloned())
            .collect(),
    }
}

/// Most counts of a client's instructions per message whose median is reported (fewer when
/// fewer rounds are asked for): see [`instructions::per_message`].
const INSTRUCTION_REPEATS: usize = 3;

/// Each client's user-space instructions per message on `scenario` (see
/// [`crate::instructions`]), from runs of `count` messages from `target` and of a fifth of
/// them from a server of its own (each run ends where its server's messages end, so the
/// short run has no rest of a long stream to read through while it closes); `None` where
/// counting failed, which `progress` hears of.
fn count_instructions(
    options: &BenchOptions,
    clients: &[&Client],
    scenario: Scenario,
    server: &ChildServer,
    count: usize,
    progress: &mut dyn FnMut(&str),
) -> Vec<Option<f64>> {
    let few = count / 5;
    let short = firehose_of(options, scenario, few);
    clients
        .iter()
        .map(|c| {
            let counted = short.as_ref().map_err(Clone::clone).and_then(|(s, _)| {
                instructions::per_message(
                    c,
                    &Feed::of(s, few as u64),
                    &Feed::of(server, count as u64),
                    options.runs.min(INSTRUCTION_REPEATS),
                )
            });
            match counted {
                Ok(n) => {
                    progress(&format!(
                        "{} instructions: {:<18} {n:>10.0} per message",
                        scenario.name(),
                        c.name
                    ));
                    Some(n)
                }
                Err(e) => {
                    progress(&format!(
                        "{} instructions {}: failed: {e}",
                        scenario.name(),
                        c.name
                    ));
                    None
                }
            }
        })
        .collect()
}

/// Each WebSocket client's instructions per message on `small_aggtrade` paced at
/// [`PACED_INSTRUCTIONS_RATE`]: 2,500 messages against 500 (2.5 and 0.5 s a run), each
/// from a paced server of its own.
pub fn run_paced_instructions(
    options: &BenchOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<PacedInstructions>, String> {
    let paced = |count: u64| {
        ChildServer::spawn(&ReplayConfig {
            count: Some(count as usize),
            mode: Mode::Paced {
                per_sec: PACED_INSTRUCTIONS_RATE,
            },
            hold_open: true,
            tls: options.tls,
            ..ReplayConfig::new(Scenario::SmallAggTrade)
        })
        .map_err(|e| format!("replay server: {e}"))
    };
    let (few, all) = (500, 2500);
    let (short, long) = (paced(few)?, paced(all)?);
    Ok(options
        .selected()
        .into_iter()
        .filter(|c| c.websocket && c.throughput)
        .map(|c| {
            let counted = instructions::per_message(
                c,
                &Feed::of(&short, few),
                &Feed::of(&long, all),
                options.runs.min(INSTRUCTION_REPEATS),
            );
            progress(&match &counted {
                Ok(n) => format!(
                    "paced {PACED_INSTRUCTIONS_RATE}/s instructions: {:<18} {n:>10.0} per message",
                    c.name
                ),
                Err(e) => format!("paced instructions {}: failed: {e}", c.name),
            });
            PacedInstructions {
                client: c.name,
                peer: c.peer,
                instructions_per_msg: counted.ok(),
            }
        })
        .collect())
}

/// One run's latency figures.
struct LatencySample {
    p50: u64,
    p99: u64,
    p999: u64,
    max: u64,
    cpu_us_per_msg: f64,
}

fn latency_once(client: &Client, target: &Target, count: u64) -> Result<LatencySample, String> {
    let (rec, _) = (client.run)(target, Recorder::new(count, true))?;
    let h = rec.latency().expect("latency run");
    let cpu = rec.window().map_or(f64::NAN, |w| cpu_us_per_msg(&w));
    Ok(LatencySample {
        p50: h.value_at_quantile(0.50),
        p99: h.value_at_quantile(0.99),
        p999: h.value_at_quantile(0.999),
        max: h.max(),
        cpu_us_per_msg: cpu,
    })
}

/// One-way latency at each paced rate (0.2 KB aggTrade): `latency_runs` rounds, clients alternating
/// as in the throughput runs; each percentile is the median over the rounds (a single
/// 3-second run moves its p99 by tens of µs on a shared 2-core machine).
pub fn run_latency(
    options: &BenchOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<LatencyRow>, String> {
    let clients: Vec<&Client> = options
        .selected()
        .into_iter()
        .filter(|c| c.websocket)
        .collect();
    let mut rows = Vec::new();
    for &rate in &options.latency_rates {
        let count = u64::from(rate) * u64::from(options.latency_secs.max(1));
        let server = ChildServer::spawn_on_cpu(
            &ReplayConfig {
                count: Some(count as usize),
                mode: Mode::Paced { per_sec: rate },
                hold_open: true,
                tls: options.tls,
                ..ReplayConfig::new(Scenario::SmallAggTrade)
            },
            server_cpu(options),
        )
        .map_err(|e| format!("replay server: {e}"))?;
        let target = target_of(&server)?;
        progress(&format!(
            "latency at {rate}/s: {count} messages a run from {}",
            target.url
        ));
        let mut samples: Vec<Vec<LatencySample>> = clients.iter().map(|_| Vec::new()).collect();
        let mut failures: Vec<Option<String>> = clients.iter().map(|_| None).collect();
        for round in 0..options.latency_runs {
            for i in round_order(clients.len(), round) {
                match latency_once(clients[i], &target, count) {
                    Ok(l) => {
                        progress(&format!(
                            "latency {rate}/s round {}: {:<18} p50 {} us p99 {} us p99.9 {} us",
                            round + 1,
                            clients[i].name,
                            l.p50,
                            l.p99,
                            l.p999
                        ));
                        samples[i].push(l);
                    }
                    Err(e) => {
                        progress(&format!(
                            "latency {rate}/s {}: failed: {e}",
                            clients[i].name
                        ));
                        failures[i] = Some(e);
                    }
                }
            }
        }
        for ((client, s), failure) in clients.iter().zip(samples).zip(failures) {
            let med = |f: fn(&LatencySample) -> u64| {
                median(s.iter().map(|x| f(x) as f64).collect()) as u64
            };
            let p99s: Vec<f64> = s.iter().map(|x| x.p99 as f64).collect();
            let (lo, hi) = range(&p99s);
            rows.push(LatencyRow {
                rate,
                client: client.name,
                p50_us: med(|x| x.p50),
                p99_us: med(|x| x.p99),
                p99_range_us: (lo as u64, hi as u64),
                p999_us: med(|x| x.p999),
                max_us: s.iter().map(|x| x.max).max().unwrap_or(0),
                cpu_us_per_msg: median(s.iter().map(|x| x.cpu_us_per_msg).collect()),
                runs: s.len(),
                failure: if s.is_empty() { failure } else { None },
            });
        }
    }
    Ok(rows)
}

/// The argument that makes [`crate::child_main`] run one client once, in a process of its
/// own: for peak RSS (no other client's heap) and for instruction counts (nothing else in
/// the process to count).
pub(crate) const ONE_RUN_ARG: &str = "--feedwire-bench-one-run";

/// The environment variable that gives the one-run child the CA (PEM) of a TLS server.
pub(crate) const ONE_RUN_CA_ENV: &str = "FEEDWIRE_BENCH_ONE_RUN_CA_PEM";

/// Peak RSS on `huge_ticker_arr`: each client in a fresh process (this executable again),
/// so no client inherits another's heap.
pub fn run_memory(
    options: &BenchOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<MemoryRow>, String> {
    // Over plain TCP even under --tls: the table is about read buffers (TLS would add
    // rustls's own to every client alike).
    let plain = BenchOptions {
        tls: false,
        ..options.clone()
    };
    let (server, _, count) = firehose(&plain, Scenario::HugeTickerArr)?;
    progress(&format!(
        "memory: {count} messages a run from {}, a fresh process a client",
        server.url()
    ));
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    for client in options
        .selected()
        .into_iter()
        .filter(|c| c.throughput && c.websocket)
    {
        let out = std::process::Command::new(&exe)
            .args([ONE_RUN_ARG, client.name, server.url(), &count.to_string()])
            .output()
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&out.stdout);
        let field = |k: &str| {
            text.split_whitespace()
                .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))
                .and_then(|v| v.parse::<u64>().ok())
        };
        match (field("baseline"), field("peak")) {
            (Some(baseline_rss), Some(peak_rss)) => {
                let row = MemoryRow {
                    client: client.name,
                    baseline_rss,
                    peak_rss,
                    read_buffer_bytes: field("read_buffer"),
                };
                progress(&format!(
                    "memory {:<18} peak RSS {:.1} MiB (baseline {:.1} MiB)",
                    row.client,
                    row.peak_rss as f64 / 1048576.0,
                    row.baseline_rss as f64 / 1048576.0
                ));
                rows.push(row);
            }
            _ => progress(&format!(
                "memory {}: failed: {}",
                client.name,
                String::from_utf8_lossy(&out.stderr).trim()
            )),
        }
    }
    Ok(rows)
}

/// In the one-run child: one run, then `baseline=… peak=… read_buffer=…` on stdout.
#[allow(
    clippy::print_stdout,
    reason = "the child reports to its parent through stdout"
)]
pub(crate) fn one_run_child(args: &[String]) -> Result<(), String> {
    let [name, url, count] = args else {
        return Err("expected CLIENT URL COUNT".to_owned());
    };
    let client = ALL
        .iter()
        .find(|c| c.name == name)
        .ok_or_else(|| format!("unknown client {name}"))?;
    let count: u64 = count.parse().map_err(|_| "bad count".to_owned())?;
    let baseline = measure::rss_bytes();
    let ca_pem = std::env::var(ONE_RUN_CA_ENV).ok();
    let target = target_for(url, ca_pem.as_deref())?;
    let (_, extra) = (client.run)(&target, Recorder::new(count, false))?;
    let peak = measure::peak_rss_bytes();
    print!("baseline={baseline} peak={peak}");
    if let Some(rb) = extra.read_buffer_bytes {
        print!(" read_buffer={rb}");
    }
    println!();
    Ok(())
}

/// Everything the options ask for.
pub fn run(options: &BenchOptions, progress: &mut dyn FnMut(&str)) -> Result<Results, String> {
    if options.pin {
        measure::pin_to_cpu(CLIENT_CPU).map_err(|e| format!("--pin: CPU {CLIENT_CPU}: {e}"))?;
    }
    let mut results = Results::default();
    for &scenario in &options.scenarios {
        results
            .rows
            .extend(run_scenario(options, scenario, progress)?);
    }
    if !options.latency_rates.is_empty() {
        results.latency = run_latency(options, progress)?;
    }
    if options.memory {
        results.memory = run_memory(options, progress)?;
    }
    if options.instructions {
        results.paced_instructions = run_paced_instructions(options, progress)?;
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_reads_as_messages_a_second_and_cpu_a_message() {
        let w = Window {
            messages: 1_000,
            bytes: 200_000,
            wall: Duration::from_millis(10),
            cpu: Duration::from_millis(5),
            waits: 7,
            preemptions: 2,
        };
        let reads = Reads { all: 40, full: 3 };
        let extra = Extra {
            read_buffer_bytes: Some(4096),
            reads: Some(reads),
        };
        let s = Sample::of(&w, 1_001, &extra, Some(Duration::from_millis(8)));
        assert!((s.msgs_per_s - 100_000.0).abs() < 1e-6, "{}", s.msgs_per_s);
        assert!(
            (s.cpu_us_per_msg - 5.0).abs() < 1e-9,
            "{}",
            s.cpu_us_per_msg
        );
        assert_eq!(
            (s.messages, s.bytes, s.read_buffer, s.reads),
            (1_001, 200_000, Some(4096), Some(reads))
        );
        assert_eq!((s.waits, s.preemptions, s.shared), (7, 2, false));
        let preempted = Window {
            preemptions: 3,
            ..w
        };
        assert!(Sample::of(&preempted, 1_001, &extra, None).shared);
    }

    /// Every per-round column of a row lines up with the rounds, a failed round included: the
    /// lines through a client's rounds pair each round's CPU with its own pace and waits.
    #[test]
    fn a_rows_rounds_line_up_past_a_failed_round() {
        let sample = |cpu: f64, mps: f64, waits: u64, shared: bool| Sample {
            msgs_per_s: mps,
            cpu_us_per_msg: cpu,
            messages: 10,
            bytes: 2_000,
            read_buffer: Some(4096),
            reads: None,
            waits,
            preemptions: 0,
            shared,
            server_cpu_us_per_msg: Some(cpu * 2.0),
            server_busy: Some(1.0),
        };
        let rounds = vec![
            Ok(sample(1.0, 100.0, 5, false)),
            Err("stalled".to_owned()),
            Ok(sample(3.0, 300.0, 7, true)),
        ];
        let client = crate::CLIENTS.iter().find(|c| c.name == "limit").unwrap();
        let row = row_of(Scenario::SmallAggTrade, client, 10, &rounds, None);
        assert_eq!(row.cpu_by_round, [Some(1.0), None, Some(3.0)]);
        assert_eq!(row.msgs_per_s_by_round, [Some(100.0), None, Some(300.0)]);
        assert_eq!(row.waits_by_round, [Some(5), None, Some(7)]);
        assert_eq!(row.shared_by_round, [false, false, true]);
        assert_eq!(row.server_cpu_by_round, [Some(2.0), None, Some(6.0)]);
        assert_eq!(row.server_busy_by_round, [Some(1.0), None, Some(1.0)]);
        assert_eq!(row.failures, ["stalled"]);
        assert_eq!(
            (row.runs(), row.cpu_us_per_msg, row.msgs_per_s),
            (2, 2.0, 200.0)
        );
        assert_eq!(
            (row.mean_payload, row.read_buffer_bytes),
            (200.0, Some(4096))
        );
    }

    #[test]
    fn a_round_shared_its_cpu_from_one_preemption_per_4_ms() {
        let ms = Duration::from_millis;
        assert!(!shared_cpu(0, ms(10)));
        assert!(
            !shared_cpu(0, Duration::ZERO),
            "nothing counted, nothing shared"
        );
        assert!(!shared_cpu(2, ms(10)), "kernel threads");
        assert!(shared_cpu(3, ms(10)));
        assert!(shared_cpu(20, ms(20)), "turns of a millisecond");
        assert!(shared_cpu(1, Duration::ZERO));
    }

    #[test]
    fn the_alone_median_leaves_out_shared_and_failed_rounds() {
        let row = Row {
            shared_by_round: vec![false, true, false, false, true],
            ..Row::of_rounds(
                "c",
                false,
                &[Some(1.0), Some(9.0), None, Some(3.0), Some(8.0)],
            )
        };
        assert_eq!((row.shared_rounds(), row.runs()), (2, 4));
        assert_eq!(row.cpu_us_per_msg_alone(), Some(2.0));
        let always_shared = Row {
            shared_by_round: vec![true, true, false, true, true],
            ..row
        };
        assert_eq!(always_shared.cpu_us_per_msg_alone(), None);
    }

    #[test]
    fn each_round_runs_every_client_once_in_an_order_of_its_own() {
        let rounds: Vec<Vec<usize>> = (0..41).map(|r| round_order(11, r)).collect();
        for order in &rounds {
            let mut sorted = order.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..11).collect::<Vec<_>>());
        }
        assert_eq!(rounds[3], round_order(11, 3), "an invocation repeats");
        for client in 0..11 {
            let firsts = rounds.iter().filter(|o| o[0] == client).count();
            assert!(firsts < 12, "client {client} first in {firsts} of 41");
            // Which clients it ran right after, over the rounds.
            let before: std::collections::BTreeSet<usize> = rounds
                .iter()
                .filter_map(|o| {
                    let at = o.iter().position(|&c| c == client)?;
                    at.checked_sub(1).map(|p| o[p])
                })
                .collect();
            assert!(before.len() >= 5, "client {client} follows only {before:?}");
        }
        assert_eq!(round_order(1, 7), [0]);
        assert!(round_order(0, 7).is_empty());
    }

    #[test]
    fn the_median_is_the_middle_or_the_mean_of_the_two_middles() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(vec![7.0]), 7.0);
        assert!(median(Vec::new()).is_nan());
        assert_eq!(range(&[3.0, 1.0, 2.0]), (1.0, 3.0));
    }

    #[test]
    fn pinned_the_server_runs_on_a_cpu_of_its_own() {
        let pinned = BenchOptions {
            pin: true,
            ..BenchOptions::quick()
        };
        assert_eq!(server_cpu(&pinned), Some(CLIENT_CPU + 1));
        assert_eq!(server_cpu(&BenchOptions::quick()), None);
    }
}
