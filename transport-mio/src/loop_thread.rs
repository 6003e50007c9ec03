//! Which loop, if any, the current thread is turning. Handlers run inside their loop's turn;
//! a blocking call on that loop's handle from there (a `subscribe` in reaction to an event)
//! would wait for an answer only the loop it blocks can give, and every stream of the loop
//! would hang with it. The handle asks here first and refuses instead.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// The next loop's id; 0 means "no loop" in [`INSIDE`].
static NEXT: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The loop this thread is turning now, or 0.
    static INSIDE: Cell<u64> = const { Cell::new(0) };
}

/// One loop, among all of a process (never reused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LoopId(u64);

impl LoopId {
    pub(crate) fn new() -> Self {
        Self(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// Marks this thread as turning the loop until the guard is dropped (also by a
    /// handler's panic unwinding through it); the previous mark comes back then.
    pub(crate) fn enter(self) -> Inside {
        Inside(INSIDE.replace(self.0))
    }

    /// Whether this thread is turning the loop now (it is inside one of its handlers, or
    /// between the steps of a turn).
    pub(crate) fn is_current(self) -> bool {
        INSIDE.get() == self.0
    }
}

/// While alive, the current thread counts as turning a loop.
pub(crate) struct Inside(u64);

impl Drop for Inside {
    fn drop(&mut self) {
        INSIDE.set(self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_nest_and_are_per_thread() {
        let (a, b) = (LoopId::new(), LoopId::new());
        assert!(!a.is_current());
        {
            let _in_a = a.enter();
            assert!(a.is_current());
            {
                let _in_b = b.enter();
                assert!(b.is_current() && !a.is_current());
            }
            assert!(a.is_current());
            std::thread::spawn(move || assert!(!a.is_current()))
                .join()
                .unwrap();
        }
        assert!(!a.is_current());
    }
}
