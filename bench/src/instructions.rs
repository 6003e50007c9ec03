//! Instructions per message, counted by valgrind's callgrind: the client's user-space work
//! alone (the kernel's part of a read is not counted), unmoved by whatever else the machine
//! is doing — the stable complement to the CPU tables, whose figures move 20-50% between
//! invocations on a shared machine.
//!
//! A client runs in a fresh process of this executable (the one-run child) under
//! `valgrind --tool=callgrind`, twice: for all of a scenario's messages, and for a fifth of
//! them from a server that sends only those. The difference of the two totals over the
//! difference of the counts is the cost of a message; start-up, connecting, the handshake
//! and the close cancel out. Under callgrind a client runs some 50 times slower than the
//! server writes, so every read comes back full: the counts are those of a consumer behind
//! its feed. What still moves between counts is how reads cut frames, which the timing of
//! each read decides.
//!
//! Copies are counted as the vector loops they would be without `rep movsb`: valgrind counts
//! a `rep movsb` once per byte, and glibc's `memcpy` uses it from a few KiB up, so a client
//! that copies whole 16 KiB TLS records counted about one instruction per byte copied where
//! one that copies the same bytes in 4 KiB pieces counted a thirtieth of that (1 KB over
//! TLS: feedwire 40.8 M of 108.6 M instructions in `memcpy`, tokio-websockets 22.9 M of
//! 97.6 M; with the vector loops 4.2 M of 71.8 M and 4.5 M of 78.8 M). The counted child runs
//! with glibc's `rep movsb`/`rep stosb` thresholds out of reach ([`NO_REP_STRINGS`]).

use std::process::Command;

use feedwire_replay::ChildServer;

use crate::clients::Client;
use crate::runner::{ONE_RUN_ARG, ONE_RUN_CA_ENV};

/// `GLIBC_TUNABLES` for the counted child: `memcpy` and `memset` never switch to `rep movsb`
/// / `rep stosb`, which callgrind would count once per byte.
const NO_REP_STRINGS: &str = "glibc.cpu.x86_rep_movsb_threshold=0x7fffffffffffffff:\
                              glibc.cpu.x86_rep_stosb_threshold=0x7fffffffffffffff";

/// A replay server a counted run reads from: its URL, its CA (PEM) when it speaks TLS, and
/// the messages it sends each connection.
pub(crate) struct Feed<'a> {
    url: &'a str,
    ca_pem: Option<&'a str>,
    count: u64,
}

impl<'a> Feed<'a> {
    pub(crate) fn of(server: &'a ChildServer, count: u64) -> Self {
        Self {
            url: server.url(),
            ca_pem: server.ca_pem(),
            count,
        }
    }
}

/// User-space instructions per message of `client`, from a run of `few` messages and one of
/// `all` messages, each from a firehose (or paced) server that sends that many; the median
/// of `repeats` such pairs (pairs in which the larger run counted no more are left out,
/// and if they are half or more, the count fails). One pair suffices for a client whose work per message hardly
/// depends on where reads cut frames (feedwire's counts repeat to within a few instructions);
/// one that moves its buffer's contents about as reads split frames (fastwebsockets: 1,100
/// to 11,700 per 9 KB message) needs the median.
///
/// # Errors
/// valgrind is missing or failed, or a run failed.
pub(crate) fn per_message(
    client: &Client,
    few: &Feed<'_>,
    all: &Feed<'_>,
    repeats: usize,
) -> Result<f64, String> {
    if all.count <= few.count {
        return Err(format!(
            "{} and {} messages: nothing to tell apart",
            few.count, all.count
        ));
    }
    let mut totals = Vec::new();
    for _ in 0..repeats.max(1) {
        totals.push((total(client, few)?, total(client, all)?));
    }
    median_per_message(&totals, few.count, all.count)
}

/// The median over `totals` — the instructions of a run of `few` messages and of one of
/// `all`, a pair each — of the difference over `all - few`. A pair whose longer run counted
/// no more is left out: what varies from run to run (a client's start-up, its waits)
/// outweighed the messages. Half the pairs or more like that: no count to report.
fn median_per_message(totals: &[(u64, u64)], few: u64, all: u64) -> Result<f64, String> {
    let mut counts: Vec<f64> = totals
        .iter()
        .filter(|(base, whole)| whole > base)
        .map(|(base, whole)| (whole - base) as f64 / (all - few) as f64)
        .collect();
    let inverted = totals.len() - counts.len();
    if counts.len() <= inverted {
        return Err(format!(
            "in {inverted} of {} pairs the run of {all} messages counted no more \
             instructions than the run of {few}",
            totals.len()
        ));
    }
    counts.sort_by(f64::total_cmp);
    Ok(counts[counts.len() / 2])
}

/// Instructions of one whole run of `client` on `feed`, every thread of the process (the
/// server is another process, not traced). A TLS server's CA goes to the child in
/// [`ONE_RUN_CA_ENV`].
fn total(client: &Client, feed: &Feed<'_>) -> Result<u64, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut valgrind = Command::new("valgrind");
    valgrind
        .args([
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            "--trace-children=no",
        ])
        .arg(&exe)
        .args([ONE_RUN_ARG, client.name, feed.url, &feed.count.to_string()])
        .env("GLIBC_TUNABLES", NO_REP_STRINGS);
    if let Some(pem) = feed.ca_pem {
        valgrind.env(ONE_RUN_CA_ENV, pem);
    }
    let out = valgrind
        .output()
        .map_err(|e| format!("valgrind (Debian package valgrind): {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        let why = child_failure(&stderr);
        return Err(format!("{} under callgrind: {why}", client.name));
    }
    refs(&stderr).ok_or_else(|| format!("no instruction count from callgrind:\n{stderr}"))
}

/// Why the counted child failed: the last line of its own on standard error (valgrind's
/// lines, `==PID== …`, come after it).
fn child_failure(stderr: &str) -> &str {
    stderr
        .lines()
        .rev()
        .find(|l| !l.starts_with("=="))
        .unwrap_or("")
}

/// The total from callgrind's summary line, `==PID== I   refs:      80,360,340`.
fn refs(stderr: &str) -> Option<u64> {
    let line = stderr.lines().find(|l| l.contains("I   refs:"))?;
    let digits: String = line
        .rsplit(':')
        .next()?
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_total_from_the_summary() {
        let stderr = "==21313== Events    : Ir\n==21313== Collected : 80360340\n\
                      ==21313== \n==21313== I   refs:      80,360,340\n";
        assert_eq!(refs(stderr), Some(80_360_340));
        assert_eq!(
            refs("==1== Callgrind, a call-graph generating cache profiler\n"),
            None
        );
    }

    #[test]
    fn a_failure_reads_the_childs_last_line_not_valgrinds() {
        let stderr = "==7== Callgrind\nconnect: refused\nthe run failed\n==7== \n\
                      ==7== I   refs:      1,000\n";
        assert_eq!(child_failure(stderr), "the run failed");
        assert_eq!(child_failure("==7== only valgrind\n"), "");
    }

    #[test]
    fn a_message_costs_the_median_difference_of_the_pairs() {
        // 800 messages more: 10, 30 and 20 instructions each.
        let pairs = [(1_000, 9_000), (2_000, 26_000), (1_500, 17_500)];
        assert_eq!(median_per_message(&pairs, 200, 1_000), Ok(20.0));
        // Pairs whose longer run counted no more are left out, while they are fewer than
        // half: the median of the rest.
        let pairs = [(1_000, 9_000), (5_000, 5_000), (2_000, 26_000)];
        assert_eq!(median_per_message(&pairs, 200, 1_000), Ok(30.0));
        let pairs = [(1_000, 9_000), (5_000, 4_000)];
        let e = median_per_message(&pairs, 200, 1_000).unwrap_err();
        assert!(
            e.starts_with("in 1 of 2 pairs the run of 1000 messages"),
            "{e}"
        );
    }
}
