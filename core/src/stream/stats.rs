//! Per-stream statistics. The owning thread counts in plain integers on the hot path and
//! publishes a snapshot once per wake-up into a seqlock of atomics; readers on other threads
//! get a consistent snapshot without any lock, and the hot path never takes one.
//!
//! Why a published snapshot rather than per-field atomics: several fields must agree (a reader
//! computing bytes per message must not see `bytes` from one message and `messages` from the
//! next), and one publish per read batch costs less than atomic updates per message. A publish
//! stores only what changed since the last: after a read, the received counts, the read counts
//! and the receive time; the sent counts, responses, subscriptions, state and buffer size only
//! when they moved, and once a second the counts the second began with — a paced stream
//! publishes once a message.
//!
//! The rates are the reader's to compute, at the instant it asks: a stream that has gone
//! quiet publishes nothing (nothing wakes it), so rates worked out by the writer would
//! keep the last busy second's figure for as long as the silence lasts — the moment they
//! matter most. A second without a publish is a second without a message.

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Seconds of history the per-second rates average over.
const RATE_WINDOW_SECS: u64 = 5;

/// Seconds the writer keeps the starting counts of: every second of a rate window and the
/// one it ends in.
const RING: usize = RATE_WINDOW_SECS as usize + 1;

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
    /// Messages per second over the complete seconds (up to 5) before the instant the
    /// snapshot was taken at, the seconds since the stream's last message included.
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
    /// Bytes the connection's TLS session holds in its own buffers
    /// ([`TlsSession::buffer_capacity`](crate::TlsSession::buffer_capacity): ciphertext read
    /// in, plaintext held, ciphertext to send), as the transport last reported it
    /// ([`Stream::set_tls_buffer_bytes`](crate::Stream::set_tls_buffer_bytes); both adapters
    /// do, and so do [`StreamInput`](crate::StreamInput) and
    /// [`LendingInput`](crate::LendingInput) at every TLS read): 0 without TLS, before the
    /// handshake ends and after the connection does. With `read_buffer_bytes`, what the
    /// stream's reads hold.
    pub tls_buffer_bytes: u64,
    /// Reads handed to the stream (`handle_read*` calls; over TLS, reads of decrypted
    /// bytes), every connection's.
    pub reads: u64,
    /// Those of them that came back with all of `max_read_size` bytes: the socket (or TLS)
    /// held at least that much more when it was read. A stream whose reads keep coming back
    /// full is behind its feed by at least `max_read_size` (256 KiB by default), the bytes
    /// waiting in the kernel — `full_reads / reads` near 1 on a busy stream says so, without
    /// a clock. A short read says less: a non-blocking read (both adapters') stops where the
    /// socket's receive queue ends, though more may be arriving behind it.
    pub full_reads: u64,
}

/// Where each value lies in `Shared::fields`.
const MESSAGES_RECEIVED: usize = 0;
const BYTES_RECEIVED: usize = 1;
const MESSAGES_SENT: usize = 2;
const BYTES_SENT: usize = 3;
const RESPONSES: usize = 4;
const RECONNECTS: usize = 5;
const SUBSCRIPTIONS: usize = 6;
const LAST_RECEIVE: usize = 7;
const STATE: usize = 8;
const READ_BUFFER_BYTES: usize = 9;
const READS: usize = 10;
const FULL_READS: usize = 11;
const TLS_BUFFER_BYTES: usize = 12;
/// Then [`RING`] entries of three: a second, and the messages and bytes published before
/// it (see `Stats::boundaries`).
const BOUNDARIES: usize = 13;
const FIELDS: usize = BOUNDARIES + 3 * RING;

/// A second that saw no publish (an unused ring entry).
const NO_SECOND: u64 = u64::MAX;

#[derive(Debug)]
struct Shared {
    /// Odd while a publish is in progress.
    seq: AtomicU64,
    fields: [AtomicU64; FIELDS],
    /// `last_receive` is stored as nanoseconds after this instant, plus one (0 = never);
    /// seconds are counted from it.
    base: Instant,
}

/// A cloneable, `Send + Sync` reader of a stream's statistics.
#[derive(Debug, Clone)]
pub struct StatsHandle(Arc<Shared>);

impl StatsHandle {
    /// A consistent snapshot, its rates as of `now` (the core reads no clock: pass
    /// `Instant::now()`). Retries while a publish is in progress; never blocks the writer.
    pub fn snapshot(&self, now: Instant) -> StatsSnapshot {
        let s = &self.0;
        loop {
            let before = s.seq.load(Ordering::Acquire);
            if before % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let v: [u64; FIELDS] = std::array::from_fn(|i| s.fields[i].load(Ordering::Relaxed));
            fence(Ordering::Acquire);
            if s.seq.load(Ordering::Relaxed) != before {
                continue;
            }
            let boundaries: [(u64, u64, u64); RING] = std::array::from_fn(|i| {
                let at = BOUNDARIES + 3 * i;
                (v[at], v[at + 1], v[at + 2])
            });
            let second = now.saturating_duration_since(s.base).as_secs();
            let totals = (v[MESSAGES_RECEIVED], v[BYTES_RECEIVED]);
            let (messages_per_sec, bytes_per_sec) = rates(&boundaries, totals, second);
            return StatsSnapshot {
                messages_received: v[MESSAGES_RECEIVED],
                bytes_received: v[BYTES_RECEIVED],
                messages_sent: v[MESSAGES_SENT],
                bytes_sent: v[BYTES_SENT],
                responses: v[RESPONSES],
                reconnects: v[RECONNECTS],
                subscriptions: v[SUBSCRIPTIONS],
                messages_per_sec,
                bytes_per_sec,
                last_receive: v[LAST_RECEIVE]
                    .checked_sub(1)
                    .map(|n| s.base + Duration::from_nanos(n)),
                state: v[STATE] as u8,
                read_buffer_bytes: v[READ_BUFFER_BYTES],
                reads: v[READS],
                full_reads: v[FULL_READS],
                tls_buffer_bytes: v[TLS_BUFFER_BYTES],
            };
        }
    }
}

/// Messages and bytes per second over the complete seconds (at most [`RATE_WINDOW_SECS`])
/// before `second`, from the ring of seconds that saw a publish — (second, messages and bytes
/// published before it) — and the totals published so far.
fn rates(boundaries: &[(u64, u64, u64); RING], totals: (u64, u64), second: u64) -> (f64, f64) {
    let used = || boundaries.iter().filter(|b| b.0 != NO_SECOND);
    let Some(last) = used().max_by_key(|b| b.0) else {
        return (0.0, 0.0);
    };
    // A reader whose clock is behind the writer's sees the writer's second.
    let second = second.max(last.0);
    // Published before `second`: all of it, unless `second` itself saw a publish.
    let until = if last.0 == second {
        (last.1, last.2)
    } else {
        totals
    };
    // Published before the window's first second: the boundary of the first second at or
    // after it that saw a publish (none between them did); none in the window, all of it.
    // The ring holds that second: the window and the second it ends in are six seconds.
    let from = second.saturating_sub(RATE_WINDOW_SECS);
    let since = used()
        .filter(|b| b.0 >= from)
        .min_by_key(|b| b.0)
        .map_or(totals, |b| (b.1, b.2));
    let secs = RATE_WINDOW_SECS.min(second).max(1) as f64;
    (
        until.0.saturating_sub(since.0) as f64 / secs,
        until.1.saturating_sub(since.1) as f64 / secs,
    )
}

/// The fields that change seldom (not with every read): stored into the shared snapshot only
/// by a publish that follows a change.
#[derive(Debug, Default)]
struct Cold {
    messages_sent: u64,
    bytes_sent: u64,
    responses: u64,
    reconnects: u64,
    subscriptions: u64,
    state: u8,
    read_buffer_bytes: u64,
    tls_buffer_bytes: u64,
}

/// The owner's counters.
///
/// A publish after a read stores five fields (messages, bytes, reads, full reads, last
/// receive) and the sequence number twice; the others only after they changed
/// (`cold_changed`), and one ring entry when a second begins. Every mutation of a cold field
/// therefore goes through a method here that sets that flag.
#[derive(Debug)]
pub(crate) struct Stats {
    messages_received: u64,
    bytes_received: u64,
    reads: u64,
    full_reads: u64,
    last_receive: Option<Instant>,
    /// `last_receive` changed since the last publish.
    last_receive_changed: bool,
    cold: Cold,
    /// A cold field changed since the last publish.
    cold_changed: bool,
    /// Received counts as of the last publish: the messages of one wake-up count in the
    /// second it published them in.
    published: (u64, u64),
    /// The second (since `Shared::base`) of the last publish; `u64::MAX` before the first.
    second: u64,
    /// Index of the newest entry of the shared ring, which holds, for each of the last
    /// [`RING`] seconds that saw a publish: (that second, messages and bytes published
    /// before it).
    newest: usize,
    shared: Arc<Shared>,
}

impl Stats {
    pub(crate) fn new(base: Instant) -> Self {
        let fields = std::array::from_fn(|i| {
            let unused = i >= BOUNDARIES && (i - BOUNDARIES).is_multiple_of(3);
            AtomicU64::new(if unused { NO_SECOND } else { 0 })
        });
        Self {
            messages_received: 0,
            bytes_received: 0,
            reads: 0,
            full_reads: 0,
            last_receive: None,
            last_receive_changed: false,
            // The first publish stores every field.
            cold: Cold::default(),
            cold_changed: true,
            published: (0, 0),
            second: u64::MAX,
            newest: 0,
            shared: Arc::new(Shared {
                seq: AtomicU64::new(0),
                fields,
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
        self.messages_received += 1;
        self.bytes_received += bytes as u64;
    }

    /// Counts `messages` received messages of `bytes` payload bytes in all.
    #[inline]
    pub(crate) fn received_many(&mut self, messages: u64, bytes: u64) {
        self.messages_received += messages;
        self.bytes_received += bytes;
    }

    /// Counts a read, `full` when it filled all of `max_read_size`: two plain additions.
    #[inline]
    pub(crate) fn read(&mut self, full: bool) {
        self.reads += 1;
        self.full_reads += u64::from(full);
    }

    /// Records a read's time (published with the next publish).
    #[inline]
    pub(crate) fn set_last_receive(&mut self, at: Instant) {
        self.last_receive = Some(at);
        self.last_receive_changed = true;
    }

    /// Counts a sent message of `bytes` payload bytes.
    pub(crate) fn sent(&mut self, bytes: usize) {
        self.cold.messages_sent += 1;
        self.cold.bytes_sent += bytes as u64;
        self.cold_changed = true;
    }

    /// Messages sent so far.
    pub(crate) fn messages_sent(&self) -> u64 {
        self.cold.messages_sent
    }

    /// Counts a response (an answer or an unsolicited one).
    pub(crate) fn response(&mut self) {
        self.cold.responses += 1;
        self.cold_changed = true;
    }

    /// Counts a reconnection started.
    pub(crate) fn reconnect(&mut self) {
        self.cold.reconnects += 1;
        self.cold_changed = true;
    }

    /// Sets the number of active subscriptions.
    pub(crate) fn set_subscriptions(&mut self, count: usize) {
        self.cold.subscriptions = count as u64;
        self.cold_changed = true;
    }

    /// Sets what the connection's TLS session holds (bytes); returns whether it changed.
    pub(crate) fn set_tls_buffer_bytes(&mut self, bytes: u64) -> bool {
        if bytes == self.cold.tls_buffer_bytes {
            return false;
        }
        self.cold.tls_buffer_bytes = bytes;
        self.cold_changed = true;
        true
    }

    /// Publishes the `state` code alone: for a stream dropped before it ended, which has no
    /// time to publish the rest with. Counts received since the last publish stay
    /// unpublished (the rates would have no second to put them in).
    pub(crate) fn publish_state(&mut self, state: u8) {
        if state == self.cold.state {
            return;
        }
        self.cold.state = state;
        let s = &self.shared;
        let seq = s.seq.load(Ordering::Relaxed);
        s.seq.store(seq + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        s.fields[STATE].store(u64::from(state), Ordering::Relaxed);
        s.seq.store(seq + 2, Ordering::Release);
    }

    /// Publishes a snapshot with the stream's `state` code and its read buffer's
    /// allocation (bytes); the first publish in a second also records, in the ring, what
    /// was published before it.
    pub(crate) fn publish(&mut self, now: Instant, state: u8, read_buffer_bytes: u64) {
        let since_base = now.saturating_duration_since(self.shared.base);
        let second = since_base.as_secs();
        if second != self.second {
            self.start_second(second);
        }
        if state != self.cold.state || read_buffer_bytes != self.cold.read_buffer_bytes {
            self.cold.state = state;
            self.cold.read_buffer_bytes = read_buffer_bytes;
            self.cold_changed = true;
        }
        let s = &self.shared;
        let seq = s.seq.load(Ordering::Relaxed);
        s.seq.store(seq + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        self.published = (self.messages_received, self.bytes_received);
        s.fields[MESSAGES_RECEIVED].store(self.messages_received, Ordering::Relaxed);
        s.fields[BYTES_RECEIVED].store(self.bytes_received, Ordering::Relaxed);
        s.fields[READS].store(self.reads, Ordering::Relaxed);
        s.fields[FULL_READS].store(self.full_reads, Ordering::Relaxed);
        if self.last_receive_changed {
            self.last_receive_changed = false;
            // A read publishes with `now` its receive time: no second subtraction for it.
            let last = match self.last_receive {
                None => 0,
                Some(t) if t == now => since_base.as_nanos() as u64 + 1,
                Some(t) => t.saturating_duration_since(s.base).as_nanos() as u64 + 1,
            };
            s.fields[LAST_RECEIVE].store(last, Ordering::Relaxed);
        }
        if self.cold_changed {
            self.cold_changed = false;
            let c = &self.cold;
            let cold = [
                (MESSAGES_SENT, c.messages_sent),
                (BYTES_SENT, c.bytes_sent),
                (RESPONSES, c.responses),
                (RECONNECTS, c.reconnects),
                (SUBSCRIPTIONS, c.subscriptions),
                (STATE, u64::from(c.state)),
                (READ_BUFFER_BYTES, c.read_buffer_bytes),
                (TLS_BUFFER_BYTES, c.tls_buffer_bytes),
            ];
            for (i, v) in cold {
                s.fields[i].store(v, Ordering::Relaxed);
            }
        }
        s.seq.store(seq + 2, Ordering::Release);
    }

    /// The first publish in `second`: records, in the ring's next entry, what was published
    /// before it — a write of its own to the seqlock (once a second), which keeps the
    /// publish that follows as short as one without it.
    #[cold]
    fn start_second(&mut self, second: u64) {
        self.second = second;
        self.newest = (self.newest + 1) % RING;
        let at = BOUNDARIES + 3 * self.newest;
        let s = &self.shared;
        let seq = s.seq.load(Ordering::Relaxed);
        s.seq.store(seq + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        s.fields[at].store(second, Ordering::Relaxed);
        s.fields[at + 1].store(self.published.0, Ordering::Relaxed);
        s.fields[at + 2].store(self.published.1, Ordering::Relaxed);
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
                let s = handle.snapshot(base);
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
            stats.publish(base + Duration::from_millis(i), 2, 0);
        }
        let seen = reader.join().expect("reader thread");
        assert!(seen <= 200_000);
        assert_eq!(stats.handle().snapshot(base).messages_received, 200_000);
    }

    #[test]
    fn rates_change_when_a_second_completes_not_within_it() {
        let base = Instant::now();
        let mut stats = Stats::new(base);
        let at = |ms| base + Duration::from_millis(ms);
        let rate = |stats: &Stats, ms| stats.handle().snapshot(at(ms)).messages_per_sec;
        for ms in 0..1000u64 {
            stats.received(10);
            stats.publish(at(ms), 2, 0);
            assert_eq!(
                rate(&stats, ms),
                0.0,
                "second 0 is still filling at {ms} ms"
            );
        }
        for ms in 1000..1500u64 {
            stats.received(10);
            stats.publish(at(ms), 2, 0);
            assert_eq!(
                rate(&stats, ms),
                1000.0,
                "second 0's messages over one second"
            );
        }
        // Seconds 0 and 1 complete: 1,500 messages over two seconds, whether or not
        // anything published in second 2.
        assert_eq!(rate(&stats, 2000), 750.0);
        stats.publish(at(2000), 2, 0);
        assert_eq!(rate(&stats, 2000), 750.0);
        assert_eq!(stats.handle().snapshot(at(2000)).messages_received, 1500);
    }

    #[test]
    fn rates_average_complete_seconds() {
        let base = Instant::now();
        let mut stats = Stats::new(base);
        for sec in 0..3u64 {
            for _ in 0..10 {
                stats.received(50);
            }
            stats.publish(base + Duration::from_secs(sec), 2, 0);
        }
        let s = stats.handle().snapshot(base + Duration::from_secs(3));
        assert_eq!((s.messages_per_sec, s.bytes_per_sec), (10.0, 500.0));
    }

    #[test]
    fn read_only_publishes_keep_the_cold_fields_and_carry_the_hot_ones() {
        let base = Instant::now();
        let mut stats = Stats::new(base);
        stats.sent(7);
        stats.response();
        stats.set_subscriptions(3);
        stats.publish(base, 2, 4096);
        for ms in 1..=50u64 {
            let now = base + Duration::from_millis(ms);
            stats.received(10);
            stats.set_last_receive(now);
            stats.publish(now, 2, 4096);
        }
        let s = stats.handle().snapshot(base + Duration::from_millis(50));
        assert_eq!((s.messages_received, s.bytes_received), (50, 500));
        assert_eq!(s.last_receive, Some(base + Duration::from_millis(50)));
        assert_eq!(
            (s.messages_sent, s.bytes_sent, s.responses, s.subscriptions),
            (1, 7, 1, 3)
        );
        assert_eq!((s.state, s.read_buffer_bytes), (2, 4096));
        // A publish without a read (a timer) keeps the last receive. Each counter's change
        // shows at once, on its own: state and buffer size stay as they were here, so only
        // the counter's method can have asked for the cold fields to be stored.
        let mut at = 60;
        let mut publish_at = |stats: &mut Stats| {
            let now = base + Duration::from_millis(at);
            stats.publish(now, 2, 4096);
            at += 1;
            stats.handle().snapshot(now)
        };
        stats.reconnect();
        let s = publish_at(&mut stats);
        assert_eq!(s.last_receive, Some(base + Duration::from_millis(50)));
        assert_eq!((s.reconnects, s.messages_received), (1, 50));
        stats.sent(5);
        assert_eq!(publish_at(&mut stats).bytes_sent, 12);
        stats.response();
        assert_eq!(publish_at(&mut stats).responses, 2);
        stats.set_subscriptions(4);
        assert_eq!(publish_at(&mut stats).subscriptions, 4);
        assert!(stats.set_tls_buffer_bytes(83_000));
        assert!(!stats.set_tls_buffer_bytes(83_000), "unchanged");
        assert_eq!(publish_at(&mut stats).tls_buffer_bytes, 83_000);
        stats.publish(base + Duration::from_millis(70), 4, 0);
        let s = stats.handle().snapshot(base + Duration::from_millis(70));
        assert_eq!((s.state, s.read_buffer_bytes), (4, 0));
        // The state alone changing shows too.
        stats.publish(base + Duration::from_millis(71), 5, 0);
        assert_eq!(stats.handle().snapshot(base).state, 5);
        // A receive published later than it happened keeps its own time.
        let received = base + Duration::from_millis(80);
        stats.set_last_receive(received);
        stats.publish(base + Duration::from_millis(95), 5, 0);
        let s = stats.handle().snapshot(base + Duration::from_millis(95));
        assert_eq!(s.last_receive, Some(received));
    }

    proptest::proptest! {
        /// The rates equal a model that keeps every second's count for good: messages and
        /// bytes published in the complete seconds of the window over its length, whatever
        /// the gaps between publishes (seconds without any, long runs that wrap the ring),
        /// asked at a publish or any time after it.
        #[test]
        fn rates_match_a_model_that_keeps_every_second(
            steps in proptest::collection::vec((0u64..2_500, 0u64..5, 1u64..300), 1..200),
            read_later in 0u64..9_000,
        ) {
            let base = Instant::now();
            let mut stats = Stats::new(base);
            let mut per_second: std::collections::BTreeMap<u64, (u64, u64)> = Default::default();
            let mut ms = 0;
            for (advance, msgs, size) in steps {
                ms += advance;
                let second = ms / 1000;
                for _ in 0..msgs {
                    stats.received(size as usize);
                }
                let e = per_second.entry(second).or_default();
                e.0 += msgs;
                e.1 += msgs * size;
                stats.publish(base + Duration::from_millis(ms), 2, 0);
                // Asked at the publish, and later with nothing published since.
                for later in [ms, ms + read_later] {
                    let second = later / 1000;
                    let from = second.saturating_sub(RATE_WINDOW_SECS);
                    let (m, b) = per_second
                        .range(from..second)
                        .fold((0, 0), |acc, (_, c)| (acc.0 + c.0, acc.1 + c.1));
                    let secs = RATE_WINDOW_SECS.min(second).max(1) as f64;
                    let snap = stats.handle().snapshot(base + Duration::from_millis(later));
                    proptest::prop_assert_eq!(snap.messages_per_sec, m as f64 / secs);
                    proptest::prop_assert_eq!(snap.bytes_per_sec, b as f64 / secs);
                }
            }
        }
    }
}
