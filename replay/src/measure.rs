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

/// What this process has used so far: CPU time and context switches, every thread's (those
/// that have ended too).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// User + system time.
    pub cpu: Duration,
    /// Times a thread gave up its CPU to wait (for a read, a lock, a timer).
    pub waits: u64,
    /// Times a thread was taken off its CPU while it could still run: another task had the
    /// CPU meanwhile.
    pub preemptions: u64,
}

/// [`Usage`] so far (one `getrusage`, as [`cpu_time`]); zero where it fails.
pub fn usage() -> Usage {
    match getrusage(UsageWho::RUSAGE_SELF) {
        Ok(u) => Usage {
            cpu: micros(u.user_time()) + micros(u.system_time()),
            waits: u.voluntary_context_switches().max(0) as u64,
            preemptions: u.involuntary_context_switches().max(0) as u64,
        },
        Err(_) => Usage::default(),
    }
}

/// A `getrusage` time as a `Duration` (µs resolution; a negative part reads as 0).
fn micros(t: nix::sys::time::TimeVal) -> Duration {
    Duration::from_secs(t.tv_sec().max(0) as u64) + Duration::from_micros(t.tv_usec().max(0) as u64)
}

/// CPU time this process has used so far: (user, system).
pub fn cpu_times() -> (Duration, Duration) {
    match getrusage(UsageWho::RUSAGE_SELF) {
        Ok(u) => (micros(u.user_time()), micros(u.system_time())),
        Err(_) => (Duration::ZERO, Duration::ZERO),
    }
}

/// CPU time the live threads of process `pid` have used so far (ns resolution): the
/// scheduler's own account, `/proc/PID/task/*/schedstat`, where `getrusage` of a child and
/// `/proc/PID/stat` count in clock ticks (10 ms, longer than a benchmark round). For another
/// process's time, such as the replay server's while a client reads from it. `None` where
/// `/proc` does not say; threads that have ended no longer count.
pub fn process_cpu_time(pid: u32) -> Option<Duration> {
    let mut ns = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let Ok(task) = task else { continue };
        // A thread that ended since the directory was listed has no file left: skipped.
        let Ok(stat) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        ns += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(Duration::from_nanos(ns))
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
    use std::time::{Duration, Instant};

    use nix::sched::{sched_getaffinity, CpuSet};
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    use nix::unistd::Pid;

    use super::{
        cpu_time, cpu_times, peak_rss_bytes, pin_to_cpu, process_cpu_time, raise_open_files,
        rss_bytes, usage,
    };

    #[test]
    fn cpu_time_counts_user_and_system_time() {
        let (user0, system0) = cpu_times();
        let before = cpu_time();
        // 30 ms of CPU or more, in user space and in the kernel (faulting fresh pages in);
        // bounded by wall time, 10 s.
        let started = Instant::now();
        let mut x = 0u64;
        loop {
            let (user, system) = cpu_times();
            if user > user0 && system > system0 && cpu_time() >= before + Duration::from_millis(30)
            {
                break;
            }
            for i in 0..100_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
            drop(std::hint::black_box(vec![1u8; 4 << 20]));
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "CPU time stands still"
            );
        }
        let (user, system) = cpu_times();
        assert!(user > user0 && system > system0, "{user:?} {system:?}");
        let total = cpu_time();
        assert!(total >= user + system && total >= before + Duration::from_millis(30));
    }

    #[test]
    fn usage_counts_waits_and_preemptions_of_every_thread() {
        let before = usage();
        std::thread::sleep(Duration::from_millis(2));
        let slept = usage();
        assert!(slept.waits > before.waits, "{before:?} {slept:?}");
        // Two threads that never wait, on one CPU: the scheduler must take turns between
        // them (bounded by wall time, 10 s). The count is the process's: the threads ended.
        let cpu = (0..CpuSet::count())
            .find(|&c| {
                sched_getaffinity(Pid::from_raw(0)).is_ok_and(|set| set.is_set(c).unwrap_or(false))
            })
            .expect("a CPU to run on");
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    pin_to_cpu(cpu).unwrap();
                    let started = Instant::now();
                    while !done.load(std::sync::atomic::Ordering::Relaxed) {
                        if usage().preemptions > slept.preemptions + 1 {
                            done.store(true, std::sync::atomic::Ordering::Relaxed);
                        }
                        assert!(
                            started.elapsed() < Duration::from_secs(10),
                            "never preempted"
                        );
                    }
                });
            }
        });
        let after = usage();
        assert!(
            after.preemptions >= slept.preemptions + 2,
            "{slept:?} {after:?}"
        );
        assert!(after.cpu >= slept.cpu);
    }

    #[test]
    fn process_cpu_time_counts_every_live_thread_to_the_nanosecond() {
        let pid = std::process::id();
        let before = process_cpu_time(pid).expect("/proc/PID/task/*/schedstat");
        // A thread spins 20 ms of its own CPU time while this one waits for it: only a sum
        // over the process's threads sees it (bounded by wall time, 10 s).
        let (tx, rx) = std::sync::mpsc::channel();
        let spinner = std::thread::spawn(move || {
            let started = Instant::now();
            let own = || process_cpu_time(pid).unwrap();
            let from = own();
            let mut x = 0u64;
            while own() < from + Duration::from_millis(20) {
                for i in 0..10_000u64 {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
                }
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "time stands still"
                );
            }
            tx.send(()).unwrap();
            // Still alive while the other thread reads.
            std::thread::sleep(Duration::from_millis(50));
        });
        rx.recv().unwrap();
        let during = process_cpu_time(pid).unwrap();
        assert!(
            during >= before + Duration::from_millis(20),
            "{before:?} → {during:?}"
        );
        // Not whole clock ticks: nanoseconds.
        assert!(!during.as_nanos().is_multiple_of(1_000_000), "{during:?}");
        spinner.join().unwrap();
        assert_eq!(process_cpu_time(u32::MAX), None, "no such process");
    }

    #[test]
    fn resident_memory_grows_with_touched_pages() {
        let before = rss_bytes();
        assert!(before > 1 << 20 && before.is_multiple_of(1024), "{before}");
        let touched = vec![1u8; 64 << 20];
        let during = rss_bytes();
        assert!(during >= before + (60 << 20), "{before} → {during}");
        assert!(peak_rss_bytes() >= during);
        drop(std::hint::black_box(touched));
    }

    #[test]
    fn open_files_are_raised_up_to_the_hard_limit_never_lowered() {
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        setrlimit(Resource::RLIMIT_NOFILE, 512, hard).unwrap();
        assert_eq!(raise_open_files(100), 512, "not lowered");
        assert_eq!(raise_open_files(600), 600);
        assert_eq!(getrlimit(Resource::RLIMIT_NOFILE).unwrap(), (600, hard));
        if hard < u64::MAX {
            assert_eq!(raise_open_files(hard + 1), hard, "capped at the hard limit");
        }
        setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();
    }

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
