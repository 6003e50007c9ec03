//! Tables (terminal and markdown) and the JSON array of results.

use std::fmt::Write as _;

use serde::Serialize;

use crate::pace::common_pace;
use crate::runner::{
    median, LatencyRow, MemoryRow, PacedInstructions, Results, Row, PACED_INSTRUCTIONS_RATE,
};

fn best_peer<'a>(rows: &'a [Row], scenario: &str) -> Option<&'a Row> {
    rows.iter()
        .filter(|r| r.scenario == scenario && r.peer && r.runs() > 0)
        .min_by(|a, b| a.cpu_us_per_msg.total_cmp(&b.cpu_us_per_msg))
}

/// For a client that is not a peer: in how many rounds it spent less CPU per message than
/// every peer of that same round, out of the rounds in which it and every peer completed —
/// the bar judged pair by pair, where a round's common drift cancels. (The median against
/// the best peer compares with the lowest of several noisy medians, which a tie loses more
/// often than it wins.) A peer that failed every round is left out, as from the best peer:
/// it would leave no round to compare. `None` for a peer, or a scenario without peers.
fn rounds_ahead(rows: &[Row], r: &Row) -> Option<(usize, usize)> {
    if r.peer {
        return None;
    }
    let peers: Vec<&Row> = rows
        .iter()
        .filter(|p| p.scenario == r.scenario && p.peer && p.runs() > 0)
        .collect();
    if peers.is_empty() {
        return None;
    }
    let (mut ahead, mut compared) = (0, 0);
    for (k, own) in r.cpu_by_round.iter().enumerate() {
        let Some(own) = own else { continue };
        let best = peers
            .iter()
            .map(|p| p.cpu_by_round.get(k).copied().flatten())
            .try_fold(f64::INFINITY, |best, cpu| cpu.map(|c| best.min(c)));
        if let Some(best) = best {
            compared += 1;
            if *own < best {
                ahead += 1;
            }
        }
    }
    Some((ahead, compared))
}

/// For a client that is not a peer: the median, over the rounds both completed, of its CPU
/// per message divided by `best`'s in the same round (`best`: the peer with the lowest
/// median). The "× best peer" ratio judged pair by pair: a round's common drift cancels,
/// where the ratio of two medians can set one client's fast rounds against the other's slow
/// ones. `None` for a peer, or without a round in common.
fn paired_ratio(r: &Row, best: Option<&Row>) -> Option<f64> {
    let best = best.filter(|_| !r.peer)?;
    let ratios: Vec<f64> = r
        .cpu_by_round
        .iter()
        .zip(&best.cpu_by_round)
        .filter_map(|(own, theirs)| Some((*own)? / (*theirs)?))
        .collect();
    (!ratios.is_empty()).then(|| median(ratios))
}

/// The fewest user-space instructions per message of any peer among `rows` (one scenario's).
fn fewest_instructions_of_peers(rows: &[&Row]) -> Option<f64> {
    rows.iter()
        .filter(|r| r.peer)
        .filter_map(|r| r.instructions_per_msg)
        .min_by(f64::total_cmp)
}

/// The instruction columns of `r`'s table row: the count, and its ratio to `fewest` (the
/// best peer's).
fn instruction_cells(r: &Row, fewest: Option<f64>) -> String {
    match (r.instructions_per_msg, fewest) {
        (Some(n), Some(best)) => format!(" {n:.0} | {:.2} |", n / best),
        (Some(n), None) => format!(" {n:.0} | — |"),
        (None, _) => " — | — |".to_owned(),
    }
}

fn limit<'a>(rows: &'a [Row], scenario: &str) -> Option<&'a Row> {
    rows.iter()
        .find(|r| r.scenario == scenario && r.client == "limit" && r.runs() > 0)
}

fn scenarios(rows: &[Row]) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    for r in rows {
        if !names.contains(&r.scenario.as_str()) {
            names.push(&r.scenario);
        }
    }
    names
}

/// A rate for people: `9.57M`, `301.0k`, `120`.
pub fn si(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

/// Markdown tables: one per scenario, then latency and memory. `|`-tables read fine on a
/// terminal too.
pub fn markdown(results: &Results) -> String {
    let mut out = String::new();
    for scenario in scenarios(&results.rows) {
        let rows: Vec<&Row> = results
            .rows
            .iter()
            .filter(|r| r.scenario == scenario)
            .collect();
        let first = rows[0];
        let pace = common_pace(&rows);
        let _ = writeln!(
            out,
            "\n### {scenario} ({:.2} KB mean payload, {} msgs per run, median of {} rounds{})\n",
            first.mean_payload / 1000.0,
            first.messages,
            rows.iter().map(|r| r.runs()).max().unwrap_or(0),
            pace.map_or(String::new(), |p| format!(
                "; one pace: {} msgs/s",
                si(1e6 / p)
            ))
        );
        let counted = rows.iter().any(|r| r.instructions_per_msg.is_some());
        out.push_str(
            "| client | msgs/s | CPU µs/msg | CPU min–max | × limit | × best peer | paired × best peer | rounds ahead | shared CPU | CPU µs/msg alone | server µs/msg | server busy | CPU µs/msg at one pace | × limit at one pace | × best peer at one pace |",
        );
        out.push_str(if counted {
            " instructions/msg | instr. × best peer |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
        } else {
            "\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
        });
        let lim = limit(&results.rows, scenario);
        let peer = best_peer(&results.rows, scenario);
        let fewest = fewest_instructions_of_peers(&rows);
        let at_pace = |r: &Row| pace.and_then(|p| r.cpu_at_pace(p));
        let limit_at_pace = lim.and_then(at_pace);
        let best_peer_at_pace = rows
            .iter()
            .filter(|r| r.peer)
            .filter_map(|r| at_pace(r))
            .map(|a| a.us_per_msg)
            .min_by(f64::total_cmp);
        for r in rows {
            let instructions = if counted {
                instruction_cells(r, fewest)
            } else {
                String::new()
            };
            if r.runs() == 0 {
                let _ = writeln!(
                    out,
                    "| {} | failed: {} | | | | | | | | | | | | | |{instructions}",
                    r.client,
                    r.failures.first().map_or("", String::as_str)
                );
                continue;
            }
            let ratio = |base: Option<&Row>| {
                base.map_or("—".to_owned(), |b| {
                    format!("{:.2}", r.cpu_us_per_msg / b.cpu_us_per_msg)
                })
            };
            let ahead = rounds_ahead(&results.rows, r)
                .map_or("—".to_owned(), |(ahead, of)| format!("{ahead}/{of}"));
            let paired = paired_ratio(r, peer).map_or("—".to_owned(), |x| format!("{x:.2}"));
            let alone = r
                .cpu_us_per_msg_alone()
                .map_or("—".to_owned(), |x| format!("{x:.3}"));
            let server = r
                .server_cpu_us_per_msg()
                .map_or("—".to_owned(), |x| format!("{x:.3}"));
            let busy = r
                .server_busy()
                .map_or("—".to_owned(), |x| format!("{:.0}%", 100.0 * x));
            let mine = at_pace(r);
            let paced = mine.map_or("—".to_owned(), |a| {
                format!("{:.3}{}", a.us_per_msg, if a.within { "" } else { "*" })
            });
            let ratio_at = |base: Option<f64>| {
                mine.zip(base).map_or("—".to_owned(), |(a, b)| {
                    format!("{:.2}", a.us_per_msg / b)
                })
            };
            let paced_limit = ratio_at(limit_at_pace.map(|a| a.us_per_msg));
            let paced_peer = if r.peer {
                "—".to_owned()
            } else {
                ratio_at(best_peer_at_pace)
            };
            let _ = writeln!(
                out,
                "| {} | {} | {:.3} | {:.3}–{:.3} | {} | {} | {paired} | {ahead} | {}/{} | {alone} | {server} | {busy} | {paced} | {paced_limit} | {paced_peer} |{instructions}",
                r.client,
                si(r.msgs_per_s),
                r.cpu_us_per_msg,
                r.cpu_range.0,
                r.cpu_range.1,
                ratio(lim),
                ratio(peer),
                r.shared_rounds(),
                r.runs(),
            );
        }
    }
    if !results.latency.is_empty() {
        let rounds = results.latency.iter().map(|l| l.runs).max().unwrap_or(0);
        out.push_str(&format!(
            "\n### One-way latency, paced small_aggtrade (server send stamp — a batch a millisecond, stamped as it is written — → client has the message; medians of {rounds} alternating rounds)\n\n"
        ));
        if results.latency.iter().any(|l| l.client.ends_with("-spin")) {
            out.push_str(&format!(
                "The `-spin` rows poll without sleeping between the 1 ms batches, so their CPU column is a whole core; every other client sleeps until the kernel wakes it. `limit-spin` is the raw reader on a non-blocking socket, reading again at once when there is nothing; `feedwire-mio-spin` and `feedwire-tokio-spin` are the mio loop and the tokio adapter with `busy_poll` at {} ms. A `-spin` row's p99 − limit is against `limit-spin`.\n\n",
                crate::clients::SPIN.as_millis()
            ));
        }
        out.push_str(
            "| rate | client | p50 µs | p99 µs | p99 min–max | p99 − limit µs | p99.9 µs | max µs | CPU µs/msg |\n\
             |---:|---|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for r in &results.latency {
            let floor = if r.client.ends_with("-spin") {
                "limit-spin"
            } else {
                "limit"
            };
            let limit = results
                .latency
                .iter()
                .find(|l| l.rate == r.rate && l.client == floor && l.failure.is_none())
                .map(|l| l.p99_us);
            latency_line(&mut out, r, limit);
        }
    }
    if !results.paced_instructions.is_empty() {
        paced_instructions_table(&mut out, &results.paced_instructions);
    }
    if !results.memory.is_empty() {
        out.push_str(
            "\n### Memory while receiving huge_ticker_arr (454 KB messages; a fresh process per client)\n\n\
             | client | peak RSS MiB | baseline MiB | peak − baseline MiB | read buffer after |\n\
             |---|---:|---:|---:|---:|\n",
        );
        for r in &results.memory {
            memory_line(&mut out, r);
        }
    }
    out
}

/// The paced instruction counts: what a read costs besides what a message does, where each
/// read holds one message.
fn paced_instructions_table(out: &mut String, rows: &[PacedInstructions]) {
    let _ = write!(
        out,
        "\n### Instructions per message, small_aggtrade paced at {PACED_INSTRUCTIONS_RATE} msgs/s (a read per message; callgrind)\n\n\
         | client | instructions/msg | × best peer |\n|---|---:|---:|\n"
    );
    let fewest = rows
        .iter()
        .filter(|r| r.peer)
        .filter_map(|r| r.instructions_per_msg)
        .min_by(f64::total_cmp);
    for r in rows {
        let (count, ratio) = match (r.instructions_per_msg, fewest) {
            (Some(n), Some(best)) => (format!("{n:.0}"), format!("{:.2}", n / best)),
            (Some(n), None) => (format!("{n:.0}"), "—".to_owned()),
            (None, _) => ("failed".to_owned(), "—".to_owned()),
        };
        let _ = writeln!(out, "| {} | {count} | {ratio} |", r.client);
    }
}

/// One latency row; `limit_p99` is the raw reader's p99 at the same rate, µs.
fn latency_line(out: &mut String, r: &LatencyRow, limit_p99: Option<u64>) {
    match &r.failure {
        Some(e) => {
            let _ = writeln!(
                out,
                "| {} | {} | failed: {e} | | | | | | |",
                si(f64::from(r.rate)),
                r.client
            );
        }
        None => {
            let over = limit_p99.map_or_else(
                || "—".to_owned(),
                |l| format!("{:+}", r.p99_us as i64 - l as i64),
            );
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {}–{} | {over} | {} | {} | {:.3} |",
                si(f64::from(r.rate)),
                r.client,
                r.p50_us,
                r.p99_us,
                r.p99_range_us.0,
                r.p99_range_us.1,
                r.p999_us,
                r.max_us,
                r.cpu_us_per_msg
            );
        }
    }
}

fn memory_line(out: &mut String, r: &MemoryRow) {
    let mib = |b: u64| b as f64 / 1048576.0;
    let _ = writeln!(
        out,
        "| {} | {:.1} | {:.1} | {:.1} | {} |",
        r.client,
        mib(r.peak_rss),
        mib(r.baseline_rss),
        mib(r.peak_rss.saturating_sub(r.baseline_rss)),
        r.read_buffer_bytes
            .map_or("—".to_owned(), |b| format!("{b} B"))
    );
}

#[derive(Serialize)]
struct Spread {
    cpu_us_per_msg: [f64; 2],
    msgs_per_s: [f64; 2],
}

#[derive(Serialize)]
struct JsonRow<'a> {
    scenario: &'a str,
    client: &'a str,
    msgs_per_s: f64,
    cpu_us_per_msg: f64,
    spread: Spread,
    runs: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    p50_us: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    p99_us: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    p999_us: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    peak_rss_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    read_buffer_bytes: Option<u64>,
    /// `[ahead, compared]`: see [`rounds_ahead`].
    #[serde(skip_serializing_if = "Option::is_none")]
    rounds_ahead: Option<[usize; 2]>,
    /// See [`paired_ratio`].
    #[serde(skip_serializing_if = "Option::is_none")]
    paired_vs_best_peer: Option<f64>,
    /// Rounds in which the client shared its CPU ([`Row::shared_rounds`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    shared_cpu_rounds: Option<usize>,
    /// [`Row::cpu_us_per_msg_alone`].
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu_us_per_msg_alone: Option<f64>,
    /// [`Row::server_cpu_us_per_msg`].
    #[serde(skip_serializing_if = "Option::is_none")]
    server_cpu_us_per_msg: Option<f64>,
    /// [`Row::server_busy`].
    #[serde(skip_serializing_if = "Option::is_none")]
    server_busy: Option<f64>,
    /// [`Row::wake_fit`].
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu_us_per_msg_at_no_waits: Option<f64>,
    /// [`Row::wake_fit`].
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu_us_per_wait: Option<f64>,
    /// [`Row::wake_fit`]: how closely the rounds follow the line.
    #[serde(skip_serializing_if = "Option::is_none")]
    wake_fit_r: Option<f64>,
    /// The scenario's [`common_pace`], msgs/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pace_msgs_per_s: Option<f64>,
    /// [`Row::cpu_at_pace`] at it.
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu_us_per_msg_at_pace: Option<f64>,
    /// Whether that pace lies within the client's rounds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pace_within_rounds: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    instructions_per_msg: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    paced_instructions_per_msg: Option<f64>,
}

/// A JSON array, one object per scenario × client (`scenario`, `client`, `msgs_per_s`,
/// `cpu_us_per_msg`, `spread` = min/max over rounds; `rounds_ahead` and
/// `paired_vs_best_peer` for the rows that are not peers; `shared_cpu_rounds` and
/// `cpu_us_per_msg_alone` (see [`Row::shared_rounds`]); `server_cpu_us_per_msg` and
/// `server_busy`, what serving the client cost the replay server; `cpu_us_per_msg_at_no_waits`,
/// `cpu_us_per_wait` and `wake_fit_r` (see [`Row::wake_fit`]); `pace_msgs_per_s`,
/// `cpu_us_per_msg_at_pace` and `pace_within_rounds` (see [`Row::cpu_at_pace`]);
/// `instructions_per_msg` when
/// counted, and on `small_aggtrade` rows `paced_instructions_per_msg`, the count at a read
/// per message). Latency runs appear as scenario
/// `small_aggtrade@<rate>/s` with `p50_us`, `p99_us`, `p999_us`; `huge_ticker_arr` rows
/// carry `peak_rss_bytes` from the memory runs.
pub fn json(results: &Results) -> String {
    let paces: Vec<(&str, Option<f64>)> = scenarios(&results.rows)
        .into_iter()
        .map(|s| {
            let rows: Vec<&Row> = results.rows.iter().filter(|r| r.scenario == s).collect();
            (s, common_pace(&rows))
        })
        .collect();
    let pace_of = |scenario: &str| {
        paces
            .iter()
            .find(|(s, _)| *s == scenario)
            .and_then(|(_, p)| *p)
    };
    let mut rows: Vec<JsonRow<'_>> = results
        .rows
        .iter()
        .map(|r| {
            let fit = r.wake_fit();
            let pace = pace_of(&r.scenario);
            let at_pace = pace.and_then(|p| r.cpu_at_pace(p));
            JsonRow {
                scenario: &r.scenario,
                client: r.client,
                msgs_per_s: r.msgs_per_s,
                cpu_us_per_msg: r.cpu_us_per_msg,
                spread: Spread {
                    cpu_us_per_msg: [r.cpu_range.0, r.cpu_range.1],
                    msgs_per_s: [r.msgs_per_s_range.0, r.msgs_per_s_range.1],
                },
                runs: r.runs(),
                p50_us: None,
                p99_us: None,
                p999_us: None,
                peak_rss_bytes: (r.scenario == "huge_ticker_arr")
                    .then(|| results.memory.iter().find(|m| m.client == r.client))
                    .flatten()
                    .map(|m| m.peak_rss),
                read_buffer_bytes: r.read_buffer_bytes,
                rounds_ahead: rounds_ahead(&results.rows, r).map(|(a, n)| [a, n]),
                paired_vs_best_peer: paired_ratio(r, best_peer(&results.rows, &r.scenario)),
                shared_cpu_rounds: Some(r.shared_rounds()),
                cpu_us_per_msg_alone: r.cpu_us_per_msg_alone(),
                server_cpu_us_per_msg: r.server_cpu_us_per_msg(),
                server_busy: r.server_busy(),
                cpu_us_per_msg_at_no_waits: fit.map(|f| f.us_per_msg_at_no_waits),
                cpu_us_per_wait: fit.map(|f| f.us_per_wait),
                wake_fit_r: fit.map(|f| f.r),
                pace_msgs_per_s: pace.map(|p| 1e6 / p),
                cpu_us_per_msg_at_pace: at_pace.map(|a| a.us_per_msg),
                pace_within_rounds: at_pace.map(|a| a.within),
                instructions_per_msg: r.instructions_per_msg,
                paced_instructions_per_msg: (r.scenario == "small_aggtrade")
                    .then(|| {
                        results
                            .paced_instructions
                            .iter()
                            .find(|p| p.client == r.client)
                    })
                    .flatten()
                    .and_then(|p| p.instructions_per_msg),
            }
        })
        .collect();
    let names: Vec<String> = results
        .latency
        .iter()
        .map(|l| format!("small_aggtrade@{}/s", l.rate))
        .collect();
    for (l, name) in results.latency.iter().zip(&names) {
        if l.failure.is_some() {
            continue;
        }
        rows.push(JsonRow {
            scenario: name,
            client: l.client,
            msgs_per_s: f64::from(l.rate),
            cpu_us_per_msg: l.cpu_us_per_msg,
            spread: Spread {
                cpu_us_per_msg: [l.cpu_us_per_msg, l.cpu_us_per_msg],
                msgs_per_s: [f64::from(l.rate), f64::from(l.rate)],
            },
            runs: l.runs,
            p50_us: Some(l.p50_us),
            p99_us: Some(l.p99_us),
            p999_us: Some(l.p999_us),
            peak_rss_bytes: None,
            read_buffer_bytes: None,
            rounds_ahead: None,
            paired_vs_best_peer: None,
            shared_cpu_rounds: None,
            cpu_us_per_msg_alone: None,
            server_cpu_us_per_msg: None,
            server_busy: None,
            cpu_us_per_msg_at_no_waits: None,
            cpu_us_per_wait: None,
            wake_fit_r: None,
            pace_msgs_per_s: None,
            cpu_us_per_msg_at_pace: None,
            pace_within_rounds: None,
            instructions_per_msg: None,
            paced_instructions_per_msg: None,
        });
    }
    serde_json::to_string_pretty(&rows).expect("plain data serialises")
}

/// The machine, for BENCHMARKS.md: CPU model, cores, kernel, how TCP receive buffers are
/// sized (autotuned or fixed, and from what size). Cores are the machine's
/// (`/proc/cpuinfo`), not the ones this process may run on: `--pin` has already confined it
/// to one when the report is written.
pub fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map_or_else(
            || "unknown CPU".to_owned(),
            |v| v.trim_start_matches([' ', '\t', ':']).to_owned(),
        );
    let cores = match cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count()
    {
        0 => std::thread::available_parallelism().map_or(0, |n| n.get()),
        n => n,
    };
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_or_else(|_| "unknown".to_owned(), |s| s.trim().to_owned());
    let mut machine = format!("{cpu}, {cores} cores, Linux {kernel}");
    let sysctl = |name: &str| std::fs::read_to_string(format!("/proc/sys/net/ipv4/{name}"));
    if let (Ok(moderate), Ok(rmem)) = (sysctl("tcp_moderate_rcvbuf"), sysctl("tcp_rmem")) {
        machine.push_str(", ");
        machine.push_str(&receive_buffers(&moderate, &rmem));
    }
    if let Ok(pack) = std::fs::read_to_string("/proc/sys/kernel/sched_vcpu_pack") {
        machine.push_str(", ");
        machine.push_str(&vcpu_packing(&pack));
    }
    if let Ok(ns) = std::fs::read_to_string("/sys/module/haltpoll/parameters/guest_halt_poll_ns") {
        machine.push_str(", ");
        machine.push_str(&halt_polling(&ns));
    }
    machine
}

/// How long an idle vCPU of a guest using the `haltpoll` idle driver polls before it halts
/// (ns; `haltpoll.guest_halt_poll_ns`). At 0 every idle vCPU halts, and waking a task on it
/// takes an interrupt through the hypervisor: on the machines of the committed tables that
/// cost the replay server 28-68 µs of CPU each time a client it fed had gone to sleep
/// (bench/ANALYSIS.md).
fn halt_polling(ns: &str) -> String {
    format!(
        "guest halt polling `haltpoll.guest_halt_poll_ns` = {}",
        ns.trim()
    )
}

/// What a VM kernel's `kernel.sched_vcpu_pack` (a setting stock Linux does not have; the
/// guest may not change it) is set to: non-zero on the machine where the scheduler put a
/// client and the replay server on one vCPU, the other idle, in some unpinned rounds (see
/// [`crate::runner::SHARED_CPU_PREEMPTIONS_PER_MS`]).
fn vcpu_packing(value: &str) -> String {
    format!(
        "scheduler vCPU packing `kernel.sched_vcpu_pack` = {}",
        value.trim()
    )
}

/// How the kernel sizes a TCP socket's receive buffer, from `net.ipv4.tcp_moderate_rcvbuf`
/// and `net.ipv4.tcp_rmem` (min, default, max bytes). It decides, pinned on loopback, which
/// regime a client reads in: with autotuning (which grows the buffer from what the client
/// copies per round trip) some rounds settle with the client caught up, reading what has
/// just arrived and woken for each piece, more of them for some clients than for others;
/// with a fixed 6 MB buffer nearly every round of every client reads a deep queue in full
/// reads (bench/ANALYSIS.md).
fn receive_buffers(moderate: &str, rmem: &str) -> String {
    let default = rmem.split_whitespace().nth(1).unwrap_or("?");
    if moderate.trim() == "0" {
        format!("TCP receive buffers fixed at {default} B (autotuning off)")
    } else {
        format!("TCP receive buffers autotuned from {default} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_line_names_the_vcpu_packing_setting() {
        assert_eq!(
            vcpu_packing("15\n"),
            "scheduler vCPU packing `kernel.sched_vcpu_pack` = 15"
        );
    }

    #[test]
    fn the_machine_line_names_the_halt_polling_setting() {
        assert_eq!(
            halt_polling("0\n"),
            "guest halt polling `haltpoll.guest_halt_poll_ns` = 0"
        );
    }

    #[test]
    fn the_receive_buffers_say_whether_they_are_autotuned() {
        assert_eq!(
            receive_buffers("1\n", "4096\t131072\t33554432\n"),
            "TCP receive buffers autotuned from 131072 B"
        );
        assert_eq!(
            receive_buffers("0\n", "4096\t6291456\t33554432\n"),
            "TCP receive buffers fixed at 6291456 B (autotuning off)"
        );
    }

    #[test]
    fn the_machine_has_the_cores_it_has_when_the_report_runs_pinned() {
        let cores = |m: &str| m.split(", ").nth(1).map(str::to_owned);
        let free = machine();
        // On a thread of its own: pinning is for the calling thread.
        let pinned = std::thread::spawn(|| {
            feedwire_replay::measure::pin_to_cpu(0).expect("CPU 0 exists");
            machine()
        })
        .join()
        .expect("no panic");
        assert_eq!(cores(&pinned), cores(&free), "{pinned} / {free}");
        let n: usize = cores(&free)
            .and_then(|c| c.strip_suffix(" cores")?.parse().ok())
            .unwrap_or_else(|| panic!("{free}"));
        assert!(n >= 1, "{free}");
        assert!(free.contains(", Linux "), "{free}");
    }

    /// The JSON array: the five keys on every row; peak RSS on the client's own
    /// `huge_ticker_arr` row only; a latency row per rate and client that completed.
    #[test]
    fn json_rows_carry_their_own_measurements() {
        let at = |scenario: &str, client| {
            let mut r = row(client, false, &[Some(1.0)]);
            r.scenario = scenario.to_owned();
            r
        };
        let memory = |client, peak_rss| MemoryRow {
            client,
            baseline_rss: 1,
            peak_rss,
            read_buffer_bytes: None,
        };
        let results = Results {
            rows: vec![
                at("small_aggtrade", "ours"),
                at("huge_ticker_arr", "ours"),
                at("huge_ticker_arr", "peer"),
            ],
            latency: vec![
                latency(100_000, "ours", 200),
                LatencyRow {
                    failure: Some("stalled".to_owned()),
                    ..latency(100_000, "peer", 999)
                },
            ],
            memory: vec![memory("peer", 7_000_000), memory("ours", 5_000_000)],
            ..Results::default()
        };
        let parsed: serde_json::Value = serde_json::from_str(&json(&results)).unwrap();
        let rows = parsed.as_array().unwrap();
        assert_eq!(rows.len(), 4, "{parsed}");
        for r in rows {
            for key in [
                "scenario",
                "client",
                "msgs_per_s",
                "cpu_us_per_msg",
                "spread",
            ] {
                assert!(r.get(key).is_some(), "{key}: {r}");
            }
        }
        let peak = |i: usize| rows[i].get("peak_rss_bytes").and_then(|v| v.as_u64());
        assert_eq!(peak(0), None, "not huge_ticker_arr");
        assert_eq!(peak(1), Some(5_000_000), "ours");
        assert_eq!(peak(2), Some(7_000_000), "peer");
        assert_eq!(rows[3]["scenario"], "small_aggtrade@100000/s");
        assert_eq!(rows[3]["client"], "ours");
        assert_eq!(rows[3]["p99_us"], 200);
        assert_eq!(rows[0]["shared_cpu_rounds"], 0);
        assert_eq!(rows[0]["cpu_us_per_msg_alone"], 1.0);
        assert!(
            rows[0].get("server_cpu_us_per_msg").is_none(),
            "not measured"
        );
        assert!(
            rows[3].get("shared_cpu_rounds").is_none(),
            "latency rows have none"
        );
    }

    #[test]
    fn the_table_counts_shared_rounds_and_takes_the_alone_median_over_the_rest() {
        let mut ours = row("ours", false, &[Some(1.0), Some(3.0), Some(2.0)]);
        ours.shared_by_round = vec![false, true, false];
        let mut peer = row("peer", true, &[Some(4.0), Some(4.0), None]);
        peer.shared_by_round = vec![true, true, false];
        let table = markdown(&Results {
            rows: vec![ours, peer],
            ..Results::default()
        });
        assert!(
            table.contains("| rounds ahead | shared CPU | CPU µs/msg alone |"),
            "{table}"
        );
        assert!(
            table.contains(" | 1/3 | 1.500 | — | — | — | — | — |\n"),
            "{table}"
        );
        assert!(
            table.contains(" | 2/2 | — | — | — | — | — | — |\n"),
            "{table}"
        );
    }

    #[test]
    fn the_table_gives_the_servers_median_cost_and_busy_share() {
        let mut ours = row("ours", false, &[Some(1.0), Some(3.0), Some(2.0), None]);
        ours.server_cpu_by_round = vec![Some(0.1), None, Some(0.3), None];
        ours.server_busy_by_round = vec![Some(0.99), Some(0.5), Some(1.01), None];
        assert_eq!(ours.server_cpu_us_per_msg(), Some(0.2));
        assert_eq!(ours.server_busy(), Some(0.99));
        let table = markdown(&Results {
            rows: vec![ours.clone()],
            ..Results::default()
        });
        assert!(
            table.contains("| CPU µs/msg alone | server µs/msg | server busy | CPU µs/msg at"),
            "{table}"
        );
        assert!(
            table.contains(" | 0/3 | 2.000 | 0.200 | 99% | — | — | — |\n"),
            "{table}"
        );
        let parsed: serde_json::Value = serde_json::from_str(&json(&Results {
            rows: vec![ours],
            ..Results::default()
        }))
        .unwrap();
        assert_eq!(parsed[0]["server_cpu_us_per_msg"], 0.2);
        assert_eq!(parsed[0]["server_busy"], 0.99);
    }

    #[test]
    fn the_json_gives_the_cost_at_no_waits_and_a_wait() {
        // 1,000 messages a run at 0.03 µs each and 6 µs a wait, exactly.
        let waits = [0u64, 100, 50, 200, 10];
        let cpu: Vec<Option<f64>> = waits
            .iter()
            .map(|&w| Some(0.03 + 6.0 * w as f64 / 1_000.0))
            .collect();
        let mut ours = Row {
            messages: 1_000,
            ..row("ours", false, &cpu)
        };
        ours.waits_by_round = waits.iter().map(|&w| Some(w)).collect();
        let results = Results {
            rows: vec![ours],
            ..Results::default()
        };
        let parsed: serde_json::Value = serde_json::from_str(&json(&results)).unwrap();
        let close = |v: &serde_json::Value, x: f64| (v.as_f64().unwrap() - x).abs() < 1e-9;
        assert!(
            close(&parsed[0]["cpu_us_per_msg_at_no_waits"], 0.03),
            "{parsed}"
        );
        assert!(close(&parsed[0]["cpu_us_per_wait"], 6.0), "{parsed}");
        assert!(close(&parsed[0]["wake_fit_r"], 1.0), "{parsed}");
        assert!(
            !markdown(&results).contains("0 waits"),
            "a model, not a measurement: JSON only"
        );
    }

    #[test]
    fn the_table_and_json_compare_every_client_at_one_pace() {
        // CPU per message 0.1 µs per µs of wall time a message above 0.02 (limit), 0.03
        // (ours) and 0.04 (peer), each at 1, 2, 0.5, 0.25 and 4 M msgs/s: one pace, the
        // median wall time, is 1 µs a message.
        let paced = |client, peer, base: f64| {
            let mps = [1e6, 2e6, 0.5e6, 0.25e6, 4e6];
            let cpu: Vec<Option<f64>> = mps.iter().map(|m| Some(base + 0.1 * 1e6 / m)).collect();
            let mut r = row(client, peer, &cpu);
            r.msgs_per_s_by_round = mps.iter().copied().map(Some).collect();
            r
        };
        let results = Results {
            rows: vec![
                paced("limit", false, 0.02),
                paced("ours", false, 0.03),
                paced("peer", true, 0.04),
            ],
            ..Results::default()
        };
        let table = markdown(&results);
        assert!(table.contains("rounds; one pace: 1.00M msgs/s)"), "{table}");
        assert!(
            table.contains("| ours |") && table.contains(" | 0.130 | 1.08 | 0.93 |\n"),
            "{table}"
        );
        assert!(table.contains(" | 0.140 | 1.17 | — |\n"), "peer: {table}");
        let parsed: serde_json::Value = serde_json::from_str(&json(&results)).unwrap();
        let close = |v: &serde_json::Value, x: f64| (v.as_f64().unwrap() - x).abs() < 1e-9;
        assert!(close(&parsed[1]["pace_msgs_per_s"], 1e6), "{parsed}");
        assert!(
            close(&parsed[1]["cpu_us_per_msg_at_pace"], 0.13),
            "{parsed}"
        );
        assert_eq!(parsed[1]["pace_within_rounds"], true);
    }

    fn row(client: &'static str, peer: bool, cpu_by_round: &[Option<f64>]) -> Row {
        Row::of_rounds(client, peer, cpu_by_round)
    }

    #[test]
    fn rounds_ahead_compares_each_round_with_every_peer_of_that_round() {
        let rows = vec![
            row(
                "ours",
                false,
                &[Some(1.0), Some(1.0), Some(1.0), None, Some(1.0), Some(1.0)],
            ),
            // Rounds 1 and 6: ahead of both; round 2: behind b; round 3: level with a, which
            // is not ahead; rounds 4 and 5: ours, then a, failed — not compared.
            row(
                "a",
                true,
                &[Some(2.0), Some(2.0), Some(1.0), Some(2.0), None, Some(1.2)],
            ),
            row(
                "b",
                true,
                &[
                    Some(1.5),
                    Some(0.5),
                    Some(3.0),
                    Some(2.0),
                    Some(2.0),
                    Some(1.1),
                ],
            ),
        ];
        assert_eq!(rounds_ahead(&rows, &rows[0]), Some((2, 4)));
        assert_eq!(rounds_ahead(&rows, &rows[1]), None, "peers get no count");
    }

    #[test]
    fn paired_ratio_is_the_median_of_same_round_ratios() {
        // Medians alone: ours 2.0, best 2.0 — level. Round by round ours is half of best in
        // three of the four rounds both completed (rounds 4 and 6: one of them failed).
        let ours = row(
            "ours",
            false,
            &[Some(1.0), Some(2.0), Some(4.0), None, Some(3.0), Some(1.0)],
        );
        let best = row(
            "best",
            true,
            &[Some(2.0), Some(4.0), Some(2.0), Some(1.0), Some(6.0), None],
        );
        let ratio = paired_ratio(&ours, Some(&best)).expect("rounds in common");
        assert!((ratio - 0.5).abs() < 1e-12, "{ratio}");
        assert_eq!(paired_ratio(&best, Some(&best)), None, "peers get no ratio");
        assert_eq!(paired_ratio(&ours, None), None, "no peer, no ratio");
        let disjoint = row("d", false, &[None, None, None, None, None, Some(1.0)]);
        assert_eq!(
            paired_ratio(&disjoint, Some(&best)),
            None,
            "no round in common"
        );
    }

    #[test]
    fn instruction_columns_appear_only_when_counted() {
        let results = |counts: [Option<f64>; 3]| {
            let mut rows = vec![
                row("ours", false, &[Some(1.0)]),
                row("a", true, &[Some(2.0)]),
                row("b", true, &[Some(2.0)]),
            ];
            for (r, n) in rows.iter_mut().zip(counts) {
                r.instructions_per_msg = n;
            }
            Results {
                rows,
                ..Results::default()
            }
        };
        let plain = markdown(&results([None; 3]));
        assert!(!plain.contains("instructions/msg"), "{plain}");
        let counted = markdown(&results([Some(240.0), Some(400.0), Some(480.0)]));
        assert!(
            counted.contains("instructions/msg | instr. × best peer"),
            "{counted}"
        );
        assert!(
            counted.contains("| 240 | 0.60 |"),
            "the best peer's 400: {counted}"
        );
        assert!(counted.contains("| 400 | 1.00 |"), "{counted}");
        let failed_peer = markdown(&results([Some(240.0), None, Some(480.0)]));
        assert!(failed_peer.contains("| 240 | 0.50 |"), "{failed_peer}");
        assert!(failed_peer.contains("| — | — |"), "{failed_peer}");
    }

    #[test]
    fn paced_instruction_counts_get_a_table_and_a_json_key() {
        let paced = |client, peer, n| PacedInstructions {
            client,
            peer,
            instructions_per_msg: n,
        };
        let mut ours = row("ours", false, &[Some(1.0)]);
        ours.scenario = "small_aggtrade".to_owned();
        let results = Results {
            rows: vec![ours],
            paced_instructions: vec![
                paced("ours", false, Some(750.0)),
                paced("a", true, Some(500.0)),
                paced("b", true, None),
            ],
            ..Results::default()
        };
        let table = markdown(&results);
        assert!(table.contains("paced at 1000 msgs/s"), "{table}");
        assert!(table.contains("| ours | 750 | 1.50 |"), "{table}");
        assert!(table.contains("| a | 500 | 1.00 |"), "{table}");
        assert!(table.contains("| b | failed | — |"), "{table}");
        assert!(
            json(&results).contains("\"paced_instructions_per_msg\": 750.0"),
            "{}",
            json(&results)
        );
        assert!(!markdown(&Results::default()).contains("paced at"));
    }

    /// "× best peer" divides by the peer with the lowest median CPU per message among the
    /// scenario's peers that completed a round — not by a faster client that is no peer, nor
    /// a peer that failed every round, nor another scenario's peer.
    #[test]
    fn the_best_peer_is_the_cheapest_peer_that_completed() {
        let with_cpu = |client, peer, cpu| {
            let mut r = row(client, peer, &[Some(cpu)]);
            r.cpu_us_per_msg = cpu;
            r
        };
        let mut failed = row("failed", true, &[None]);
        failed.cpu_us_per_msg = 0.1;
        failed.failures = vec!["connect: refused".to_owned()];
        let mut elsewhere = with_cpu("elsewhere", true, 0.2);
        elsewhere.scenario = "t".to_owned();
        let rows = vec![
            with_cpu("ours", false, 1.0),
            with_cpu("limit", false, 0.5),
            with_cpu("dear", true, 4.0),
            with_cpu("cheap", true, 2.0),
            failed,
            elsewhere,
        ];
        assert_eq!(best_peer(&rows, "s").map(|r| r.client), Some("cheap"));
        assert_eq!(best_peer(&rows[..2], "s").map(|r| r.client), None);
        assert!(
            limit(&[row("limit", false, &[None])], "s").is_none(),
            "a failed limit"
        );
        let table = markdown(&Results {
            rows,
            ..Results::default()
        });
        // × limit, × best peer, paired, rounds ahead.
        assert!(table.contains("| 2.00 | 0.50 | 0.50 | 1/1 |"), "{table}");
        assert!(table.contains("| 8.00 | 2.00 | — | — |"), "dear: {table}");
        assert!(
            table.contains("\n| failed | failed: connect: refused | | | | | | | | | | | | | |\n"),
            "{table}"
        );
    }

    #[test]
    fn rates_read_in_millions_thousands_or_units() {
        assert_eq!(si(9_574_000.0), "9.57M");
        assert_eq!(si(1e6), "1.00M");
        assert_eq!(si(999_949.0), "999.9k");
        assert_eq!(si(1e3), "1.0k");
        assert_eq!(si(999.0), "999");
    }

    fn latency(rate: u32, client: &'static str, p99_us: u64) -> LatencyRow {
        LatencyRow {
            rate,
            client,
            p50_us: 40,
            p99_us,
            p99_range_us: (p99_us - 10, p99_us + 10),
            p999_us: 300,
            max_us: 4000,
            cpu_us_per_msg: 1.5,
            runs: 9,
            failure: None,
        }
    }

    /// Each latency row against the limit of its own rate — `limit-spin` for a spinning
    /// client — unless that limit failed; memory in MiB. Neither table without rows.
    #[test]
    fn latency_rows_compare_with_their_rates_limit_and_memory_reads_in_mib() {
        let failed = |rate, client| LatencyRow {
            failure: Some("stalled".to_owned()),
            ..latency(rate, client, 999)
        };
        let results = Results {
            latency: vec![
                latency(10_000, "limit", 150),
                failed(10_000, "limit-spin"),
                latency(10_000, "ours-spin", 95),
                latency(100_000, "limit", 197),
                latency(100_000, "limit-spin", 107),
                latency(100_000, "ours", 200),
                latency(100_000, "ours-spin", 104),
                failed(100_000, "peer"),
            ],
            memory: vec![
                MemoryRow {
                    client: "ours",
                    baseline_rss: 4 << 20,
                    peak_rss: 10 << 20,
                    read_buffer_bytes: Some(262_144),
                },
                MemoryRow {
                    client: "peer",
                    baseline_rss: 4 << 20,
                    peak_rss: 3 << 20,
                    read_buffer_bytes: None,
                },
            ],
            ..Results::default()
        };
        let table = markdown(&results);
        for line in [
            "| 10.0k | ours-spin | 40 | 95 | 85–105 | — | 300 | 4000 | 1.500 |",
            "| 100.0k | limit | 40 | 197 | 187–207 | +0 | 300 | 4000 | 1.500 |",
            "| 100.0k | ours | 40 | 200 | 190–210 | +3 | 300 | 4000 | 1.500 |",
            "| 100.0k | ours-spin | 40 | 104 | 94–114 | -3 | 300 | 4000 | 1.500 |",
            "| 100.0k | peer | failed: stalled | | | | | | |",
            "| ours | 10.0 | 4.0 | 6.0 | 262144 B |",
            "| peer | 3.0 | 4.0 | 0.0 | — |",
        ] {
            assert!(table.contains(&format!("\n{line}\n")), "{line}: {table}");
        }
        assert!(table.contains("The `-spin` rows poll"), "{table}");
        let no_spin = Results {
            latency: vec![
                latency(100_000, "limit", 197),
                latency(100_000, "ours", 200),
            ],
            ..Results::default()
        };
        let table = markdown(&no_spin);
        assert!(table.contains("One-way latency"), "{table}");
        assert!(!table.contains("`-spin`"), "{table}");
        assert!(!table.contains("### Memory"), "{table}");
        let table = markdown(&Results::default());
        assert!(!table.contains("One-way latency"), "{table}");
    }

    #[test]
    fn rounds_ahead_is_absent_without_peers() {
        let rows = vec![row("ours", false, &[Some(1.0)])];
        assert_eq!(rounds_ahead(&rows, &rows[0]), None);
    }
}
