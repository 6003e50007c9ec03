//! `cargo run --release -p feedwire-bench -- [--quick] [--json PATH] [--markdown PATH]
//! [--runs N] [--latency-runs N] [--scenario NAME]… [--client NAME]… [--no-throughput]
//! [--no-latency] [--no-memory] [--pin] [--tls] [--instructions]`
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark reports to the terminal"
)]

use std::process::ExitCode;

use feedwire_bench::{child_main, json, machine, markdown, run, BenchOptions, LIMIT_READ_SIZE};
use feedwire_core::WsConfig;
use feedwire_replay::Scenario;

/// What the command line asks for.
#[derive(Debug)]
struct Invocation {
    options: BenchOptions,
    json_path: Option<String>,
    markdown_path: Option<String>,
}

/// Reads the flags (not the program name); `Ok(None)` for `--help`.
fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Invocation>, String> {
    let mut options = BenchOptions::full();
    let mut json_path = None;
    let mut markdown_path = None;
    let mut scenarios = Vec::new();
    // Applied after every flag is read, so that no flag undoes another whatever the order.
    let (mut quick, mut runs, mut latency_runs, mut throughput) = (false, None, None, true);
    // Zero rounds would print tables of nothing.
    let number = |flag: &str, v: String| match v.parse::<usize>() {
        Ok(0) => Err(format!("{flag}: at least 1")),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{flag}: not a number")),
    };
    while let Some(arg) = args.next() {
        let mut value = |what: &str| args.next().ok_or(format!("{arg} needs {what}"));
        match arg.as_str() {
            "--quick" => quick = true,
            "--json" => json_path = Some(value("a path")?),
            "--markdown" => markdown_path = Some(value("a path")?),
            "--runs" => runs = Some(number("--runs", value("a number")?)?),
            "--latency-runs" => latency_runs = Some(number("--latency-runs", value("a number")?)?),
            "--scenario" => {
                let name = value("a scenario")?;
                scenarios
                    .push(Scenario::from_name(&name).ok_or(format!("unknown scenario {name}"))?);
            }
            "--client" => options.clients.push(value("a client")?),
            "--no-throughput" => throughput = false,
            "--no-latency" => options.latency_rates.clear(),
            "--no-memory" => options.memory = false,
            "--pin" => options.pin = true,
            "--tls" => options.tls = true,
            "--instructions" => options.instructions = true,
            "--help" | "-h" => return Ok(None),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if quick {
        let q = BenchOptions::quick();
        options.runs = q.runs;
        options.latency_runs = q.latency_runs;
        options.count_divisor = q.count_divisor;
        options.latency_secs = q.latency_secs;
    }
    options.set_rounds(runs, latency_runs);
    if !scenarios.is_empty() {
        options.scenarios = scenarios;
    }
    if !throughput {
        options.scenarios.clear();
    }
    Ok(Some(Invocation {
        options,
        json_path,
        markdown_path,
    }))
}

fn main() -> ExitCode {
    child_main();
    let Invocation {
        options,
        json_path,
        markdown_path,
    } = match parse(std::env::args().skip(1)) {
        Ok(Some(invocation)) => invocation,
        Ok(None) => {
            let usage: Vec<&str> = include_str!("main.rs").lines().take(3).collect();
            println!("{}", usage.join("\n"));
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    eprintln!("feedwire-bench on {}", machine());
    let results = match run(&options, &mut |line| eprintln!("{line}")) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("benchmark failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    let table = markdown(&results);
    println!("{table}");
    if let Some(path) = json_path {
        if let Err(e) = std::fs::write(&path, json(&results)) {
            eprintln!("{path}: {e}");
            return ExitCode::FAILURE;
        }
    }
    if let Some(path) = markdown_path {
        let command: Vec<String> = std::env::args().skip(1).collect();
        let regime = if options.pin {
            format!(
                "Pinned (`--pin`): the clients run on CPU 0 and the replay server on CPU 1. \
                 The server still sets the pace (`server busy`: writing a byte on loopback \
                 costs it more than reading one costs the limit), so a round settles with the \
                 client behind its feed, reading full reads and seldom waiting, or caught up, \
                 woken for each piece and reading what has just arrived, at up to 1.3 times \
                 the CPU per message. On loopback each read's TCP window update also runs the \
                 server's pending transmit in the client's softirq. The limit reads {} KiB at \
                 a time, feedwire up to {} KiB (`max_read_size`), nexus-web up to its 1 MiB \
                 buffer.\n",
                LIMIT_READ_SIZE / 1024,
                WsConfig::default().max_read_size / 1024
            )
        } else {
            format!(
                "How to read them: on a 2-core machine the server and the client share the \
                 CPUs, so figures move 20-50% between invocations; compare rows within one \
                 table. A round comes out in one of two states, by where the scheduler puts \
                 the client: on a CPU of its own, the server on the other; or on the server's, \
                 the two taking turns in slices of about a millisecond while the other CPU \
                 idles (a VM's kernel may pack tasks onto few vCPUs: the machine line says \
                 when it does), every read full and 2-3 times the CPU per message for every \
                 client alike. `shared CPU` counts the rounds of the second state, and `CPU \
                 µs/msg alone` compares the clients over the rounds of the first; the other \
                 columns take every round. `--pin` gives the server a CPU of its own ({}).\n",
                if options.tls {
                    "BENCHMARKS-tls-pinned.md"
                } else {
                    "BENCHMARKS-pinned.md"
                }
            )
        };
        let transport = if options.tls {
            "Over TLS (`--tls`): the replay server encrypts with rustls (TLS 1.3, AES-GCM, its \
             test CA) and every client verifies it with the same rustls configuration (the \
             core's `tls_config_with_roots`: the aws-lc-rs provider). feedwire \
             uses its core's TLS layer (rustls's unbuffered API); the peers take a tokio-rustls \
             stream, nexus-web rustls's blocking `StreamOwned`, and the limit reads through \
             `StreamOwned` too — what reading costs with TLS set up as rustls documents it and \
             no other library. Latency runs are over TLS too (the paced server writes a small \
             record per tick, one message or a few); memory, when measured, is over plain \
             TCP.\n\n"
        } else {
            ""
        };
        let instructions = if options.instructions {
            "`instructions/msg` (`--instructions`): the client's user-space instructions per \
             message, counted by valgrind's callgrind in a process of its own (over TLS when the \
             tables are) — \
             what a run of a fifth of the messages and a run of all of them differ by, over \
             the messages they differ by, so start-up, handshake and close cancel out; the \
             median of up to three such counts (as many as rounds). The kernel's part of a read is not in it. Unlike \
             the CPU columns it hardly moves between invocations (feedwire's counts by a few \
             instructions per message); what moves it is where reads cut frames, for a \
             client whose work depends on that (the limit's 454 KB count, for one). Copies \
             count as the vector loops they are: the counted process runs with glibc's \
             `rep movsb`/`rep stosb` off (`GLIBC_TUNABLES`), which callgrind would count once \
             per byte. Under callgrind every client runs far slower than \
             the server writes, so every read comes back full; the paced table's stream (1k msgs/s) \
             is slow enough that each read still holds one message, so its counts are what a \
             read costs besides what a message does.\n\n"
        } else {
            ""
        };
        let doc = format!(
            "# Benchmarks\n\nMachine: {}.\n\nCommand: `cargo run --release -p feedwire-bench -- {}`\n\n{transport}\
             Client CPU per message is user + system time of the benchmark process (the replay \
             server runs in a child process), from the first message to the last. Ratios compare \
             medians measured side by side in this one run, every client once a round, in an order \
             shuffled afresh each round. `rounds ahead`: in how many rounds \
             the client spent less CPU per message than every peer of the same round (out of \
             the rounds all of them completed) — the comparison made pair by pair, where drift \
             common to a round cancels; a client level with the best peers is ahead in fewer \
             than half. `paired × best peer`: the median over rounds of the client's CPU per \
             message divided by the best peer's of the same round (the best peer: the lowest \
             median), the ratio judged pair by pair too. `limit-utf8` is the limit's reader \
             with feedwire's UTF-8 validation of text added (not a peer): the step from `limit` \
             to it is what validation costs, the step from it to a feedwire row what the rest \
             of the library costs. `shared CPU`: in how many rounds the client shared its CPU \
             with another task (the replay server, in practice): the kernel preempted it at \
             least once per 4 ms of the window (`getrusage`'s involuntary context switches), \
             where a client with a CPU of its own is preempted once in 6 ms or less. `CPU \
             µs/msg alone`: the median over the other rounds. `server µs/msg` and `server \
             busy`: what serving the client cost the replay server per message (its threads' \
             CPU time, the scheduler's account, over the connection) and the share of the \
             client's window the server was on a CPU, medians over the rounds. Where the \
             server was busy all of a client's window it, not the client, set the pace, and \
             each time the client caught up and slept, waking it cost the server CPU (tens of \
             µs where idle vCPUs halt — 28-68 µs a wait on the VMs of the earlier committed \
             tables, bench/ANALYSIS.md; the machine line gives \
             `haltpoll.guest_halt_poll_ns`), so a round settles fast \
             with few waits or slow with many, slow more often for some clients than for \
             others (each round's line on the terminal gives the client's waits, `getrusage`'s \
             voluntary context switches; the JSON a line through each client's CPU per run \
             against them, `cpu_us_per_msg_at_no_waits`, `cpu_us_per_wait`, `wake_fit_r`). \
             So the medians compare clients at different paces. Where the server was not busy \
             all of it, the client was slower than its feed (nearly every read full) and set \
             the pace itself: its CPU per message is its own work's. `CPU µs/msg at one pace` and \
             its ratios to the limit and the best peer compare them at one: each client's CPU \
             per message read off a line (Theil–Sen) through its rounds against their wall \
             time per message — the rounds in which it had its CPU to itself and the server \
             was busy 90% of the window or more — at the median wall time per message of all \
             such rounds of the scenario (the heading gives it in msgs/s); `*` where that pace \
             lies outside the client's rounds and its line is carried on. Where the clients set \
             the pace, CPU and wall time per message are one figure, and the line gives every \
             client the same: judge those scenarios by the medians.\n\n\
             {instructions}{regime}\n\
             The feedwire rows include \
             the whole stream machine (classification, statistics, timers, reconnection) and \
             read data lent in place (`handle_read_with`, `Delivery::Lend`, `drive_lending`), \
             each peer in its fastest idiomatic way too. Latency percentiles are medians over \
             alternating rounds too (as many as the latency table says).\n{table}",
            machine(),
            command.join(" ")
        );
        if let Err(e) = std::fs::write(&path, doc) {
            eprintln!("{path}: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::{parse, Invocation};

    /// What valid flags (not `--help`) ask for.
    fn parsed(args: &[&str]) -> Invocation {
        parse(args.iter().map(|a| (*a).to_owned()))
            .expect("valid flags")
            .expect("not --help")
    }

    fn rounds(args: &[&str]) -> (usize, usize) {
        let o = parsed(args).options;
        (o.runs, o.latency_runs)
    }

    #[test]
    fn latency_rounds_follow_runs_unless_set_apart_in_any_order() {
        assert_eq!(rounds(&[]), (5, 5));
        assert_eq!(rounds(&["--runs", "9"]), (9, 9));
        assert_eq!(rounds(&["--runs", "41", "--latency-runs", "9"]), (41, 9));
        assert_eq!(rounds(&["--latency-runs", "9", "--runs", "41"]), (41, 9));
        assert_eq!(rounds(&["--quick"]), (3, 3));
        assert_eq!(rounds(&["--runs", "7", "--quick"]), (7, 7));
    }

    #[test]
    fn bad_flags_are_named() {
        let err = |args: &[&str]| parse(args.iter().map(|a| (*a).to_owned())).unwrap_err();
        assert_eq!(
            err(&["--latency-runs", "x"]),
            "--latency-runs: not a number"
        );
        assert_eq!(err(&["--runs"]), "--runs needs a number");
        assert_eq!(err(&["--runs", "0"]), "--runs: at least 1");
        assert_eq!(err(&["--bogus"]), "unknown argument --bogus");
        assert!(parse(["--help".to_owned()].into_iter()).unwrap().is_none());
    }

    /// Each flag sets its option, whatever comes after it.
    #[test]
    fn flags_set_what_they_name() {
        let full = parsed(&[]).options;
        assert_eq!((full.count_divisor, full.latency_secs), (1, 3));
        assert_eq!(full.scenarios.len(), 7);
        assert_eq!(full.latency_rates, [10_000, 100_000]);
        assert!(full.memory && !full.pin && !full.tls && full.clients.is_empty());
        let quick = parsed(&["--quick"]).options;
        assert_eq!((quick.count_divisor, quick.latency_secs), (5, 1));
        let inv = parsed(&[
            "--scenario",
            "betfair_mcm",
            "--client",
            "limit",
            "--client",
            "feedwire-mio",
            "--no-latency",
            "--no-memory",
            "--pin",
            "--tls",
            "--json",
            "a.json",
            "--markdown",
            "b.md",
            "--quick",
        ]);
        let o = &inv.options;
        assert_eq!(o.scenarios.len(), 1);
        assert_eq!(o.scenarios[0].name(), "betfair_mcm");
        assert_eq!(o.clients, ["limit", "feedwire-mio"]);
        assert!(o.latency_rates.is_empty() && !o.memory && o.pin && o.tls);
        assert_eq!(inv.json_path.as_deref(), Some("a.json"));
        assert_eq!(inv.markdown_path.as_deref(), Some("b.md"));
        let latency_only = parsed(&["--scenario", "small_aggtrade", "--no-throughput"]);
        assert!(latency_only.options.scenarios.is_empty());
        assert_eq!(latency_only.options.latency_rates.len(), 2);
    }

    #[test]
    fn instructions_are_counted_only_when_asked() {
        let counted = |args: &[&str]| parsed(args).options.instructions;
        assert!(!counted(&["--quick"]));
        assert!(counted(&["--quick", "--instructions"]));
    }
}
