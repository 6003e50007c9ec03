//! What benchmarks measure about their own process: CPU time (user + system), resident
//! memory, and the open-file limit that many connections need. Linux: `/proc/self/status`.

use std::time::Duration;

use nix::sys::resource::{getrlimit, getrusage, setrlimit, Resource, UsageWho};

/// CPU time this process has used so far, user + system (µs resolution).
pub fn cpu_time() -> Duration {
    let (user, system) = cpu_times();
    user + system
}

/// CPU time this process has used so far: (user, system).
pub fn cpu_times() -> (Duration, Duration) {
    match getrusage(UsageWho::RUSAGE_SELF) {
        Ok(u) => {
            let us = |t: nix::sys::time::TimeVal| {
                Duration::from_secs(t.tv_sec().max(0) as u64)
                    + Duration::from_micros(t.tv_usec().max(0) as u64)
            };
            (us(u.user_time()), us(u.system_time()))
        }
        Err(_) => (Duration::ZERO, Duration::ZERO),
    }
}

/// Resident set size now, bytes (`VmRSS`); 0 where `/proc` is missing.
pub fn rss_bytes() -> u64 {
    status_kib("VmRSS:") * 1024
}

/// Peak resident set size so far, bytes (`VmHWM`); 0 where `/proc` is missing.
pub fn peak_rss_bytes() -> u64 {
    status_kib("VmHWM:") * 1024
}

fn status_kib(key: &str) -> u64 {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return 0;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Raises the soft open-file limit towards `wanted` (at most the hard limit); returns the
/// soft limit in effect afterwards.
pub fn raise_open_files(wanted: u64) -> u64 {
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 0;
    };
    if soft >= wanted {
        return soft;
    }
    let target = wanted.min(hard);
    match setrlimit(Resource::RLIMIT_NOFILE, target, hard) {
        Ok(()) => target,
        Err(_) => soft,
    }
}
