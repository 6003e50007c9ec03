//! The stream's deadlines: a fixed table, the earliest of which is the next wake-up.

use std::time::Instant;

/// The stream's timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timer {
    Connect,
    FirstData,
    Idle,
    Keepalive,
    Reconnect,
    Pace,
    Lifetime,
    /// A connection attempt waiting for its turn in the shared connect budget.
    Turn,
    /// The connection's read memory goes back once it has been quiet this long.
    QuietRelease,
}

const COUNT: usize = 9;

impl Timer {
    const ALL: [Timer; COUNT] = [
        Self::Connect,
        Self::FirstData,
        Self::Idle,
        Self::Keepalive,
        Self::Reconnect,
        Self::Pace,
        Self::Lifetime,
        Self::Turn,
        Self::QuietRelease,
    ];
}

/// One optional deadline per timer, and the earliest of them kept at hand: the stream asks
/// for it after every wake-up, far more often than a timer changes (none changes on a read),
/// so it is worked out when one does rather than each time it is asked.
#[derive(Debug, Default, Clone)]
pub(crate) struct TimerTable {
    at: [Option<Instant>; COUNT],
    /// INVARIANT: the minimum of `at` (`None` when no timer is armed).
    earliest: Option<Instant>,
}

impl TimerTable {
    pub(crate) fn set(&mut self, timer: Timer, at: Instant) {
        let was = self.at[timer as usize].replace(at);
        match self.earliest {
            Some(e) if at <= e => self.earliest = Some(at),
            // This timer held the minimum and moved later: another may hold it now.
            Some(e) if was == Some(e) => self.recompute(),
            Some(_) => {}
            None => self.earliest = Some(at),
        }
    }

    pub(crate) fn stop(&mut self, timer: Timer) {
        if let Some(was) = self.at[timer as usize].take() {
            if Some(was) == self.earliest {
                self.recompute();
            }
        }
    }

    pub(crate) fn get(&self, timer: Timer) -> Option<Instant> {
        self.at[timer as usize]
    }

    pub(crate) fn clear(&mut self) {
        *self = Self::default();
    }

    /// The earliest deadline.
    #[inline]
    pub(crate) fn next(&self) -> Option<Instant> {
        self.earliest
    }

    /// Removes and returns every timer due at `now`, in declaration order.
    pub(crate) fn take_expired(&mut self, now: Instant) -> impl Iterator<Item = Timer> {
        let mut due = [None; COUNT];
        if self.earliest.is_some_and(|e| e <= now) {
            for t in Timer::ALL {
                if matches!(self.at[t as usize], Some(at) if at <= now) {
                    self.at[t as usize] = None;
                    due[t as usize] = Some(t);
                }
            }
            self.recompute();
        }
        due.into_iter().flatten()
    }

    fn recompute(&mut self) {
        self.earliest = self.at.iter().flatten().min().copied();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    proptest! {
        /// Whatever the sequence of changes, `next` is the minimum of the armed deadlines and
        /// `take_expired` hands out exactly the due ones.
        #[test]
        fn next_is_always_the_earliest_armed_deadline(
            ops in proptest::collection::vec((0u8..4, 0usize..COUNT, 0u64..50), 1..100)
        ) {
            let base = Instant::now();
            let mut table = TimerTable::default();
            let mut model: [Option<Instant>; COUNT] = [None; COUNT];
            for (op, i, ms) in ops {
                let at = base + Duration::from_millis(ms);
                match op {
                    0 => {
                        table.set(Timer::ALL[i], at);
                        model[i] = Some(at);
                    }
                    1 => {
                        table.stop(Timer::ALL[i]);
                        model[i] = None;
                    }
                    2 => {
                        let due: Vec<Timer> = table.take_expired(at).collect();
                        let want: Vec<Timer> = Timer::ALL
                            .into_iter()
                            .filter(|t| model[*t as usize].is_some_and(|d| d <= at))
                            .collect();
                        prop_assert_eq!(due, want);
                        for d in &mut model {
                            if d.is_some_and(|d| d <= at) {
                                *d = None;
                            }
                        }
                    }
                    _ => {
                        table.clear();
                        model = [None; COUNT];
                    }
                }
                prop_assert_eq!(table.next(), model.iter().flatten().min().copied());
                for t in Timer::ALL {
                    prop_assert_eq!(table.get(t), model[t as usize]);
                }
            }
        }
    }
}
