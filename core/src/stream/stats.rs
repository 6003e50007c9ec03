//! Per-stream statistics. The owning thread counts in plain integers on the hot path and
//! publishes a snapshot once per wake-up into a seqlock of atomics; readers on other threads
//! get a consistent snapshot without any lock, and the hot path never takes one.
//!
//! Why a published snapshot rather than per-field atomics: several fields must agree (a
//! reader computing bytes per message must not see `bytes` from one message and `messages`
//! from the next), and one publish per read batch costs less than atomic updates per message.

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Seconds of history the per-second rates average over.
const RATE_WINDOW_SECS: u64 = 5;

/// A consistent view of a stream's counters.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StatsSnapshot {
    /// Data messages and responses received.
    pub messages_received: u64,
    /// Their payload bytes (not frame or line overhead).
    pub bytes_received: u64,
    /// Messages sent (requests, subscriptions, application messages).
    pub messages_sent: u64,
    /// Their payload bytes.
    pub bytes_sent: u64,
    /// Responses received (answers and unsolicited).
    pub responses: u64,
    /// Reconnections started.
    pub reconnects: u64,
    /// Active subscriptions (Binance streams, Betfair subscriptions).
    pub subscriptions: u64,
    /// Messages per second over the last complete seconds (up to 5).
    pub messages_per_sec: f64,
    /// Payload bytes per second over the same window.
    pub bytes_per_sec: f64,
    /// Time of the last receive, if any.
    pub last_receive: Option<Instant>,
    /// The state, as [`crate::StreamState`] would name it: 0 connecting, 1 handshaking,
    /// 2 open, 3 closing, 4 reconnecting, 5 closed, 6 crashed.
    pub state: u8,
    /// Bytes the connection's read buffer holds allocated (0 when released while idle).
    pub read_buffer_bytes: u64,
}

const FIELDS: usize = 12;

#[derive(Debug)]
struct Shared {
    /// Odd while a publish is in progress.
    seq: AtomicU64,
    fields: [AtomicU64; FIELDS],
    /// `last_receive` is stored as nanoseconds after this instant, plus one (0 = never).
    base: Instant,
}

/// A cloneable, `Send + Sync` reader of a stream's statistics.
#[derive(Debug, Clone)]
pub struct StatsHandle(Arc<Shared>);

impl StatsHandle {
    /// A consistent snapshot (retries while a publish is in progress; never blocks the
    /// writer).
    pub fn snapshot(&self) -> StatsSnapshot {
        let s = &self.0;
        loop {
            let before = s.seq.load(Ordering::Acquire);
            if before % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let v: [u64; FIELDS] = std::array::from_fn(|i| s.fields[i].load(Ordering::Relaxed));
            fence(Ordering::Acquire);
            if s.seq.load(Ordering::Relaxed) == before {
                return StatsSnapshot {
                    messages_received: v[0],
                    bytes_received: v[1],
                    messages_sent: v[2],
                    bytes_sent: v[3],
                    responses: v[4],
                    reconnects: v[5],
                    subscriptions: v[6],
                    messages_per_sec: f64::from_bits(v[7]),
                    bytes_per_sec: f64::from_bits(v[8]),
                    last_receive: v[9]
                        .checked_sub(1)
                        .map(|n| s.base + Duration::from_nanos(n)),
                    state: v[10] as u8,
                    read_buffer_bytes: v[11],
                };
            }
        }
    }
}

/// The owner's counters.
#[derive(Debug)]
pub(crate) struct Stats {
    pub(crate) current: StatsSnapshot,
    /// Per-second buckets: (second since base, messages, bytes).
    buckets: [(u64, u64, u64); RATE_WINDOW_SECS as usize + 1],
    /// Received counts already folded into the buckets.
    folded: (u64, u64),
    /// The second the published rates were computed in: they cover complete seconds only,
    /// so they change when a second ends, not with every read.
    rated_in: u64,
    shared: Arc<Shared>,
}

impl Stats {
    pub(crate) fn new(base: Instant) -> Self {
        Self {
            current: StatsSnapshot::default(),
            buckets: [(u64::MAX, 0, 0); RATE_WINDOW_SECS as usize + 1],
            folded: (0, 0),
            rated_in: u64::MAX,
            shared: Arc::new(Shared {
                seq: AtomicU64::new(0),
                fields: std::array::from_fn(|_| AtomicU64::new(0)),
                base,
            }),
        }
    }

    pub(crate) fn handle(&self) -> StatsHandle {
        StatsHandle(self.shared.clone())
    }

    /// Counts a received message: two plain additions.
    #[inline]
    pub(crate) fn received(&mut self, bytes: usize) {
        self.current.messages_received += 1;
        self.current.bytes_received += bytes as u64;
    }

    pub(crate) fn sent(&mut self, bytes: usize) {
        self.current.messages_sent += 1;
        self.current.bytes_sent += bytes as u64;
    }

    /// Folds this wake-up's counts into the rate window and publishes a snapshot.
    pub(crate) fn publish(&mut self, now: Instant, state: u8) {
        let since_base = now.saturating_duration_since(self.shared.base);
        let second = since_base.as_secs();
        let slot = (second % self.buckets.len() as u64) as usize;
        if self.buckets[slot].0 != second {
            self.buckets[slot] = (second, 0, 0);
        }
        self.buckets[slot].1 += self.current.messages_received - self.folded.0;
        self.buckets[slot].2 += self.current.bytes_received - self.folded.1;
        self.folded = (self.current.messages_received, self.current.bytes_received);
        if second != self.rated_in {
            self.rated_in = second;
            // Complete seconds only: the current one is still filling.
            let window = self
                .buckets
                .iter()
                .filter(|b| b.0 < second && second - b.0 <= RATE_WINDOW_SECS);
            let (msgs, bytes) = window.fold((0, 0), |acc, b| (acc.0 + b.1, acc.1 + b.2));
            let secs = RATE_WINDOW_SECS.min(second).max(1) as f64;
            self.current.messages_per_sec = msgs as f64 / secs;
            self.current.bytes_per_sec = bytes as f64 / secs;
        }
        self.current.state = state;
        let c = &self.current;
        // A read publishes with `now` its receive time: no second subtraction for it.
        let last = match c.last_receive {
            None => 0,
            Some(t) if t == now => since_base.as_nanos() as u64 + 1,
            Some(t) => t.saturating_duration_since(self.shared.base).as_nanos() as u64 + 1,
        };
        let values = [
            c.messages_received,
            c.bytes_received,
            c.messages_sent,
            c.bytes_sent,
            c.responses,
            c.reconnects,
            c.subscriptions,
            c.messages_per_sec.to_bits(),
            c.bytes_per_sec.to_bits(),
            last,
            u64::from(c.state),
            c.read_buffer_bytes,
        ];
        let s = &self.shared;
        let seq = s.seq.load(Ordering::Relaxed);
        s.seq.store(seq + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        for (f, v) in s.fields.iter().zip(values) {
            f.store(v, Ordering::Relaxed);
        }
        s.seq.store(seq + 2, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_on_other_threads_see_consistent_snapshots() {
        let base = Instant::now();
        let mut stats = Stats::new(base);
        let handle = stats.handle();
        let reader = std::thread::spawn(move || {
            let mut seen = 0;
            for _ in 0..200_000 {
                let s = handle.snapshot();
                // Every message is 100 bytes: a torn read would break this.
                assert_eq!(s.bytes_received, 100 * s.messages_received);
                assert_eq!(s.messages_sent, s.messages_received);
                seen = s.messages_received;
            }
            seen
        });
        for i in 0..200_000u64 {
            stats.received(100);
            stats.sent(7);
            stats.publish(base + Duration::from_millis(i), 2);
        }
        let seen = reader.join().expect("reader thread");
        assert!(seen <= 200_000);
        assert_eq!(stats.handle().snapshot().messages_received, 200_000);
    }

    #[test]
    fn rates_change_when_a_second_completes_not_within_it() {
        let base = Instant::now();
        let mut stats = Stats::new(base);
        let rate = |stats: &Stats| stats.handle().snapshot().messages_per_sec;
        for ms in 0..1000u64 {
            stats.received(10);
            stats.publish(base + Duration::from_millis(ms), 2);
            assert_eq!(rate(&stats), 0.0, "second 0 is still filling at {ms} ms");
        }
        for ms in 1000..1500u64 {
            stats.received(10);
            stats.publish(base + Duration::from_millis(ms), 2);
            assert_eq!(rate(&stats), 1000.0, "second 0's messages over one second");
        }
        stats.publish(base + Duration::from_millis(2000), 2);
        // Seconds 0 and 1 complete: 1,500 messages over two seconds.
        assert_eq!(rate(&stats), 750.0);
        assert_eq!(stats.handle().snapshot().messages_received, 1500);
    }

    #[test]
    fn rates_average_complete_seconds() {
        let base = Instant::now();
        let mut stats = Stats::new(base);
        for sec in 0..3u64 {
            for _ in 0..10 {
                stats.received(50);
            }
            stats.publish(base + Duration::from_secs(sec), 2);
        }
        stats.publish(base + Duration::from_secs(3), 2);
        let s = stats.handle().snapshot();
        assert_eq!((s.messages_per_sec, s.bytes_per_sec), (10.0, 500.0));
    }
}
