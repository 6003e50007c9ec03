//! What benchmarks measure about their own process: CPU time (user + system), resident
//! memory, and the open-file limit that many connections need. Linux: `/proc/self/status`.
//! Also where they run: [`pin_to_cpu`].

use std::io;
use std::time::Duration;

use nix::sched::{sched_setaffinity, CpuSet};
use nix::sys::resource::{getrlimit, getrusage, setrlimit, Resource, UsageWho};
use nix::unistd::Pid;

/// Restricts the calling thread, and every thread or process it starts afterwards, to CPU
/// `cpu`: for measurements that keep a client and its server off each other's core.
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    let mut set = CpuSet::new();
    set.set(cpu).map_err(io::Error::from)?;
    sched_setaffinity(Pid::from_raw(0), &set).map_err(io::Error::from)
}

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

#[cfg(test)]
mod tests {
    use nix::sched::{sched_getaffinity, CpuSet};
    use nix::unistd::Pid;

    use super::pin_to_cpu;

    #[test]
    fn pinning_keeps_the_thread_and_its_children_to_one_cpu() {
        // In a thread of its own: the test harness's other threads keep their CPUs.
        std::thread::spawn(|| {
            pin_to_cpu(0).expect("CPU 0 exists");
            let allowed = |set: CpuSet| {
                (0..CpuSet::count())
                    .filter(|&c| set.is_set(c).unwrap_or(false))
                    .collect::<Vec<_>>()
            };
            let mine = sched_getaffinity(Pid::from_raw(0)).expect("affinity");
            assert_eq!(allowed(mine), [0]);
            let child = std::thread::spawn(|| sched_getaffinity(Pid::from_raw(0)).unwrap())
                .join()
                .unwrap();
            assert_eq!(allowed(child), [0], "inherited");
            assert!(pin_to_cpu(CpuSet::count()).is_err(), "no such CPU");
        })
        .join()
        .unwrap();
    }
}
