//! What every client does per message, identically: count it, and in latency runs record
//! the one-way delay from the server's `"ts_us"` stamp. The timed window runs from the first
//! message to the last, so connecting, handshakes and runtime start-up are outside it.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use feedwire_replay::{measure, sent_at_us};
use hdrhistogram::Histogram;

/// Per-run counters and, for paced runs, the latency histogram.
#[derive(Debug)]
pub struct Recorder {
    expected: u64,
    messages: u64,
    bytes: u64,
    started: Option<(Instant, measure::Usage)>,
    finished: Option<(Instant, measure::Usage)>,
    latency: Option<Histogram<u64>>,
}

/// The measured window of one run.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    /// Messages after the first (the window opens at the first).
    pub messages: u64,
    /// Payload bytes of every message.
    pub bytes: u64,
    /// Wall time from the first message to the last.
    pub wall: Duration,
    /// This process's CPU time (user + system, all threads) in the same window.
    pub cpu: Duration,
    /// Its threads' waits (voluntary context switches) in the window.
    pub waits: u64,
    /// Its threads' preemptions (involuntary context switches) in the window.
    pub preemptions: u64,
}

impl Recorder {
    /// Expects `expected` data messages; with `latency`, records one-way delays (µs).
    pub fn new(expected: u64, latency: bool) -> Self {
        Self {
            expected,
            messages: 0,
            bytes: 0,
            started: None,
            finished: None,
            latency: latency.then(|| {
                Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
            }),
        }
    }

    /// Whether the client should pass each payload's first bytes (latency runs).
    pub fn wants_head(&self) -> bool {
        self.latency.is_some()
    }

    /// One complete data message of `len` bytes; `head` is at least its first `STAMP_WITHIN`
    /// bytes (or all of it) in latency runs, anything otherwise. Returns true when the run is
    /// complete.
    #[inline]
    pub fn on_message(&mut self, len: usize, head: &[u8]) -> bool {
        if self.messages == 0 {
            self.started = Some((Instant::now(), measure::usage()));
        }
        self.messages += 1;
        self.bytes += len as u64;
        if let Some(h) = &mut self.latency {
            if let Some(sent) = sent_at_us(head) {
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_micros() as u64);
                let _ = h.record(now.saturating_sub(sent).max(1));
            }
        }
        if self.messages >= self.expected {
            if self.finished.is_none() {
                self.finished = Some((Instant::now(), measure::usage()));
            }
            return true;
        }
        false
    }

    /// Messages so far.
    pub fn messages(&self) -> u64 {
        self.messages
    }

    /// The timed window, once complete.
    pub fn window(&self) -> Option<Window> {
        let ((t0, c0), (t1, c1)) = (self.started?, self.finished?);
        Some(Window {
            messages: self.messages.saturating_sub(1),
            bytes: self.bytes,
            wall: t1 - t0,
            cpu: c1.cpu.saturating_sub(c0.cpu),
            waits: c1.waits.saturating_sub(c0.waits),
            preemptions: c1.preemptions.saturating_sub(c0.preemptions),
        })
    }

    /// The latency histogram (µs), in latency runs.
    pub fn latency(&self) -> Option<&Histogram<u64>> {
        self.latency.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_opens_at_the_first_message() {
        let mut r = Recorder::new(3, false);
        assert!(!r.on_message(10, &[]));
        assert!(!r.on_message(10, &[]));
        assert!(r.window().is_none());
        assert!(r.on_message(10, &[]));
        let w = r.window().unwrap();
        assert_eq!((w.messages, w.bytes), (2, 30));
    }

    #[test]
    fn the_window_runs_from_the_first_message_to_the_last() {
        let mut r = Recorder::new(3, false);
        r.on_message(1, &[]);
        std::thread::sleep(Duration::from_millis(30));
        r.on_message(1, &[]);
        r.on_message(1, &[]);
        // Opened at the second message, it would be microseconds long.
        let w = r.window().unwrap();
        assert!(w.wall >= Duration::from_millis(30));
        assert!(w.waits >= 1, "the sleep is in the window: {w:?}");
    }

    #[test]
    fn only_latency_runs_want_heads_and_get_a_histogram() {
        let throughput = Recorder::new(1, false);
        assert!(!throughput.wants_head());
        assert!(throughput.latency().is_none());
        let mut paced = Recorder::new(1, true);
        assert!(paced.wants_head());
        let now_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_micros();
        let stamped = format!("{{\"ts_us\":{},\"x\":1}}", now_us - 250);
        assert!(paced.on_message(stamped.len(), stamped.as_bytes()));
        assert_eq!(paced.latency().map(|h| h.len()), Some(1));
    }
}
