//! The loop's deadlines across streams, earliest first. A busy stream's deadline moves later
//! on nearly every read (the idle timer starts again), so an entry is pushed only when a
//! stream's deadline moves *earlier* than the entry it already has; when that entry comes
//! due and the deadline has moved on, it is pushed again for the new time. The heap holds
//! about one entry per stream, whatever the read rate — not one per read for the length of
//! the idle timeout (30 s × 100k reads/s would be 3 M entries).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

/// A stream's slot in the loop's slab: index and generation.
pub(crate) type Key = (u32, u32);

/// One stream's side of the bookkeeping, kept in its slab entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct StreamDeadline {
    /// When the stream next wants `handle_timeout`.
    wanted: Option<Instant>,
    /// The time of its live heap entry, if any (INVARIANT: no later than `wanted`, when
    /// both are set).
    scheduled: Option<Instant>,
}

#[derive(Debug, Default)]
pub(crate) struct Deadlines {
    heap: BinaryHeap<Reverse<(Instant, Key)>>,
}

impl Deadlines {
    /// Records that stream `key` next wants a timeout at `wanted` (`None`: never).
    pub(crate) fn set(&mut self, key: Key, d: &mut StreamDeadline, wanted: Option<Instant>) {
        d.wanted = wanted;
        if let Some(at) = wanted {
            if d.scheduled.is_none_or(|s| at < s) {
                d.scheduled = Some(at);
                self.heap.push(Reverse((at, key)));
            }
        }
    }

    /// The earliest entry's time (possibly a stream whose deadline moved later since: the
    /// loop wakes, finds nothing due, and sleeps again).
    pub(crate) fn next(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((at, _))| *at)
    }

    /// Takes the next entry due by `now`: its time and stream. Hand it to
    /// [`settle`](Self::settle) with that stream's side (drop it if the stream is gone).
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<(Instant, Key)> {
        match self.heap.peek() {
            Some(&Reverse((at, key))) if at <= now => {
                self.heap.pop();
                Some((at, key))
            }
            _ => None,
        }
    }

    /// Whether the entry `(at, key)` just taken means stream `key`'s deadline has come. An
    /// entry replaced by an earlier one is dropped; one whose deadline moved later is pushed
    /// again for the new time.
    pub(crate) fn settle(
        &mut self,
        (at, key): (Instant, Key),
        d: &mut StreamDeadline,
        now: Instant,
    ) -> bool {
        if d.scheduled != Some(at) {
            return false; // replaced by an earlier entry, already handled
        }
        d.scheduled = None;
        match d.wanted {
            Some(wanted) if wanted <= now => {
                d.wanted = None;
                true
            }
            Some(later) => {
                d.scheduled = Some(later);
                self.heap.push(Reverse((later, key)));
                false
            }
            None => false,
        }
    }

    /// Entries held (live or stale).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Deadlines, StreamDeadline};

    #[test]
    fn a_deadline_pushed_back_on_every_read_keeps_one_entry() {
        let t0 = std::time::Instant::now();
        let ms = Duration::from_millis;
        let mut deadlines = Deadlines::default();
        let mut d = StreamDeadline::default();
        // 100k reads, each moving the idle deadline 30 s past "now".
        for i in 0..100_000u64 {
            deadlines.set(
                (0, 0),
                &mut d,
                Some(t0 + Duration::from_micros(10 * i) + ms(30_000)),
            );
        }
        assert_eq!(deadlines.len(), 1);
        // The first entry comes due: the deadline has moved, so it is pushed again, not fired.
        let first = deadlines.next().expect("an entry");
        let entry = deadlines.pop_due(first).expect("due");
        assert!(!deadlines.settle(entry, &mut d, first));
        assert_eq!(deadlines.len(), 1);
        let last = t0 + Duration::from_micros(10 * 99_999) + ms(30_000);
        assert_eq!(deadlines.next(), Some(last));
        let entry = deadlines.pop_due(last).expect("due");
        assert!(deadlines.settle(entry, &mut d, last));
        assert_eq!(deadlines.len(), 0);
    }

    #[test]
    fn the_same_deadline_set_again_on_every_service_keeps_one_entry() {
        // A fixed deadline (a keepalive's) on a stream serviced 10,000 times before it.
        let at = std::time::Instant::now() + Duration::from_secs(30);
        let mut deadlines = Deadlines::default();
        let mut d = StreamDeadline::default();
        for _ in 0..10_000 {
            deadlines.set((0, 0), &mut d, Some(at));
        }
        assert_eq!(deadlines.len(), 1);
    }

    #[test]
    fn an_earlier_deadline_fires_at_its_time_and_the_stale_entry_does_not() {
        let t0 = std::time::Instant::now();
        let s = Duration::from_secs;
        let mut deadlines = Deadlines::default();
        let (mut a, mut b) = (StreamDeadline::default(), StreamDeadline::default());
        deadlines.set((1, 0), &mut a, Some(t0 + s(10)));
        deadlines.set((2, 0), &mut b, Some(t0 + s(5)));
        deadlines.set((1, 0), &mut a, Some(t0 + s(2))); // moved earlier: a second entry
        let mut fired = Vec::new();
        for now in [t0 + s(1), t0 + s(2), t0 + s(5), t0 + s(10)] {
            while let Some(entry) = deadlines.pop_due(now) {
                let d = if entry.1 == (1, 0) { &mut a } else { &mut b };
                if deadlines.settle(entry, d, now) {
                    fired.push((now - t0, entry.1));
                }
            }
        }
        assert_eq!(fired, vec![(s(2), (1, 0)), (s(5), (2, 0))]);
        assert_eq!(deadlines.len(), 0);
        // Cleared: its entry comes due and nothing fires.
        deadlines.set((1, 0), &mut a, Some(t0 + s(20)));
        deadlines.set((1, 0), &mut a, None);
        let entry = deadlines.pop_due(t0 + s(30)).expect("due");
        assert!(!deadlines.settle(entry, &mut a, t0 + s(30)));
        assert_eq!(deadlines.len(), 0);
    }
}
