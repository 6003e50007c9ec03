//! Connection attempts paced across streams. Exchanges limit connects per IP, not per
//! stream (Binance: 300 per 5 minutes; an IP that keeps going over is refused with 429, then
//! banned with 418), so streams that share an address must share the count: a program's
//! streams at start-up, or all of them after a network blip, would otherwise connect in one
//! burst. Streams given the same [`ConnectBudget`] take their turns from it, first come first
//! served; the rest of each stream's policy (backoff, timeouts) is unchanged.
//!
//! Sans-IO like the rest of the stream: the budget reads no clock, it is told the time; a
//! mutex guards it because streams on several threads (tokio tasks) may share one, and it is
//! taken once a connection attempt, never on a read.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::deadline::after;
use crate::error::ConfigError;

/// At most `max` connection attempts in any `window`, shared by every stream configured with
/// a clone of it ([`StreamConfig::connect_budget`](crate::StreamConfig::connect_budget)).
/// A stream whose attempt finds the window full waits for its turn (turns are handed out in
/// the order asked for) before it connects; meanwhile it is `Connecting` and a stop ends it
/// at once. Clones share the count; equality is identity.
#[derive(Clone)]
pub struct ConnectBudget {
    inner: Arc<Inner>,
}

struct Inner {
    max: usize,
    window: Duration,
    /// The instants handed out for the last `max` attempts (some may lie ahead: streams
    /// waiting for them), in the order handed out, which is also time order.
    turns: Mutex<VecDeque<Instant>>,
}

impl ConnectBudget {
    /// A budget of `max` attempts in any `window` (Binance streams: 300 in 5 minutes, per IP).
    ///
    /// # Errors
    /// [`ConfigError::ZeroLimit`] if `max` is 0.
    pub fn new(max: u32, window: Duration) -> Result<Self, ConfigError> {
        if max == 0 {
            return Err(ConfigError::ZeroLimit("ConnectBudget max"));
        }
        let max = usize::try_from(max).unwrap_or(usize::MAX);
        Ok(Self {
            inner: Arc::new(Inner {
                max,
                window,
                turns: Mutex::new(VecDeque::with_capacity(max.min(1024))),
            }),
        })
    }

    /// Takes the next turn: the earliest instant at or after `now` (and after every turn
    /// handed out before) at which an attempt keeps at most `max` in any window. The turn is
    /// spent whether or not the attempt is then made.
    pub(crate) fn take_turn(&self, now: Instant) -> Instant {
        let inner = &*self.inner;
        // Nothing in the critical section can panic; a poisoned lock still holds a valid
        // queue.
        let mut turns = inner.turns.lock().unwrap_or_else(PoisonError::into_inner);
        // Streams on other threads may pass a `now` a little older than the last turn: that
        // turn's time is then the earliest this one can have, and order is kept.
        let mut turn = turns.back().map_or(now, |&last| now.max(last));
        if turns.len() == inner.max {
            // The `max`-th turn back bounds this one: a window after it.
            if let Some(oldest) = turns.pop_front() {
                turn = turn.max(after(oldest, inner.window));
            }
        }
        turns.push_back(turn);
        turn
    }
}

impl std::fmt::Debug for ConnectBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectBudget")
            .field("max", &self.inner.max)
            .field("window", &self.inner.window)
            .finish_non_exhaustive()
    }
}

impl PartialEq for ConnectBudget {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn turns_wait_only_once_the_window_is_full() {
        let budget = ConnectBudget::new(2, 10 * SECOND).unwrap();
        let t0 = Instant::now();
        assert_eq!(budget.take_turn(t0), t0);
        assert_eq!(budget.take_turn(t0 + SECOND), t0 + SECOND);
        // Full: the next turn is a window after the first.
        assert_eq!(budget.take_turn(t0 + 2 * SECOND), t0 + 10 * SECOND);
        // Behind that one, a window after the second.
        assert_eq!(budget.take_turn(t0 + 3 * SECOND), t0 + 11 * SECOND);
        // Much later the window is empty again.
        assert_eq!(budget.take_turn(t0 + 60 * SECOND), t0 + 60 * SECOND);
    }

    #[test]
    fn clones_share_the_count_and_equal_only_themselves() {
        let budget = ConnectBudget::new(1, SECOND).unwrap();
        let clone = budget.clone();
        let t0 = Instant::now();
        assert_eq!(budget.take_turn(t0), t0);
        assert_eq!(clone.take_turn(t0), t0 + SECOND);
        assert_eq!(budget, clone);
        assert_ne!(budget, ConnectBudget::new(1, SECOND).unwrap());
        assert!(matches!(
            ConnectBudget::new(0, SECOND),
            Err(ConfigError::ZeroLimit(_))
        ));
    }

    proptest! {
        /// Whatever the times asked at (mostly rising, sometimes a little older, as from
        /// another thread): every turn is at or after its asking time and after the turns
        /// before it, no window holds more than `max` turns, and a turn that waited could
        /// not have come sooner (the window before it is full).
        #[test]
        fn no_window_holds_more_than_max_turns(
            max in 1u32..5,
            window_ms in 1u64..2_000,
            steps in proptest::collection::vec((0u64..1_500, 0u64..50), 1..60),
        ) {
            let window = Duration::from_millis(window_ms);
            let budget = ConnectBudget::new(max, window).unwrap();
            let t0 = Instant::now() + Duration::from_secs(1);
            let (mut clock, mut turns) = (t0, Vec::new());
            for (advance, older) in steps {
                clock += Duration::from_millis(advance);
                let asked = clock - Duration::from_millis(older);
                let turn = budget.take_turn(asked);
                prop_assert!(turn >= asked);
                prop_assert!(turns.last().is_none_or(|&last| turn >= last));
                let max = max as usize;
                if turn > asked && turns.last().is_none_or(|&last| turn > last) {
                    let in_window = turns.iter().filter(|&&t| t + window >= turn).count();
                    prop_assert!(in_window >= max, "waited with {in_window} turns in the window");
                }
                turns.push(turn);
                for (i, &start) in turns.iter().enumerate() {
                    let within = turns[i..].iter().take_while(|&&t| t < start + window).count();
                    prop_assert!(within <= max, "{within} turns in a window");
                }
            }
        }
    }
}
