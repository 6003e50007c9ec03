//! Whether a tokio source still holds this task's waker, so that a wait need not poll it.
//!
//! A tokio source polled to `Pending` keeps the waker it was given until it wakes it (a
//! command sent, the timer fired). Until then, polling it again on every wake-up only
//! re-registers the same waker: for the command channel and the deadline timer that was
//! ~260 and ~115 instructions a wake-up — on a paced feed, a message — against the ~40 it
//! takes to see that nothing changed (an emptiness check, a flag).
//!
//! Two things break the hold, and both are checked: the task's waker may change (the
//! future moved to another task, or polled inside a combinator with a waker of its own),
//! and tokio's cooperative budget: a source polled with the task's budget spent returns
//! `Pending` *without* registering (it asks for an immediate re-poll instead), so a poll
//! only counts as a registration when budget remained before it.

use std::task::{Context, Waker};

/// The waker a source was last polled to `Pending` with, while it holds it.
#[derive(Debug, Default)]
pub(crate) struct Registered(Option<Waker>);

impl Registered {
    /// Whether the source holds a waker that wakes the task polling with `cx`.
    #[inline]
    pub(crate) fn holds(&self, cx: &Context<'_>) -> bool {
        self.0.as_ref().is_some_and(|w| w.will_wake(cx.waker()))
    }

    /// The source returned `Pending` from a poll with `cx`; `had_budget`: tokio's
    /// cooperative budget had some left before that poll (so the source registered).
    pub(crate) fn pending(&mut self, cx: &Context<'_>, had_budget: bool) {
        if !had_budget {
            self.0 = None;
        } else if !self.holds(cx) {
            self.0 = Some(cx.waker().clone());
        }
    }

    /// The source woke us, was re-armed, or returned `Ready`: it holds no waker of ours.
    pub(crate) fn clear(&mut self) {
        self.0 = None;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Context, Wake, Waker};

    use super::Registered;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn waker() -> Waker {
        Waker::from(Arc::new(Count(AtomicUsize::new(0))))
    }

    #[test]
    fn a_hold_is_for_the_same_waker_and_only_after_a_budgeted_pending() {
        let (a, b) = (waker(), waker());
        let (cx_a, cx_b) = (Context::from_waker(&a), Context::from_waker(&b));
        let mut r = Registered::default();
        assert!(!r.holds(&cx_a), "nothing registered yet");
        r.pending(&cx_a, false);
        assert!(
            !r.holds(&cx_a),
            "a Pending without budget registered nothing"
        );
        r.pending(&cx_a, true);
        assert!(r.holds(&cx_a));
        assert!(!r.holds(&cx_b), "another task's waker is not held");
        r.pending(&cx_b, true);
        assert!(
            r.holds(&cx_b) && !r.holds(&cx_a),
            "the newest registration counts"
        );
        r.clear();
        assert!(!r.holds(&cx_b));
    }
}
