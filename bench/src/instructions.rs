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

use std::process::Command;

use crate::clients::Client;
use crate::runner::ONE_RUN_ARG;

/// User-space instructions per message of `client`, from a run of `few` messages and one of
/// `all` messages, each `(url, count)` of a plain-TCP firehose server that sends that many;
/// the median of `repeats` such pairs. One pair suffices for a client whose work per
/// message hardly depends on where reads cut frames (feedwire's counts repeat to within a
/// few instructions); one that moves its buffer's contents about as reads split frames
/// (fastwebsockets: 1,100 to 11,700 per 9 KB message) needs the median.
///
/// # Errors
/// valgrind is missing or failed, or a run failed.
pub(crate) fn per_message(
    client: &Client,
    few: (&str, u64),
    all: (&str, u64),
    repeats: usize,
) -> Result<f64, String> {
    if all.1 <= few.1 {
        return Err(format!(
            "{} and {} messages: nothing to tell apart",
            few.1, all.1
        ));
    }
    let mut counts = Vec::new();
    for _ in 0..repeats.max(1) {
        let base = total(client, few.0, few.1)?;
        let whole = total(client, all.0, all.1)?;
        counts.push(whole.saturating_sub(base) as f64 / (all.1 - few.1) as f64);
    }
    counts.sort_by(f64::total_cmp);
    Ok(counts[counts.len() / 2])
}

/// Instructions of one whole run of `client` for `count` messages, every thread of the
/// process (the server is another process, not traced).
fn total(client: &Client, url: &str, count: u64) -> Result<u64, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = Command::new("valgrind")
        .args([
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            "--trace-children=no",
        ])
        .arg(&exe)
        .args([ONE_RUN_ARG, client.name, url, &count.to_string()])
        .output()
        .map_err(|e| format!("valgrind (Debian package valgrind): {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        let last = stderr
            .lines()
            .rev()
            .find(|l| !l.starts_with("=="))
            .unwrap_or("");
        return Err(format!("{} under callgrind: {last}", client.name));
    }
    refs(&stderr).ok_or_else(|| format!("no instruction count from callgrind:\n{stderr}"))
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
}
