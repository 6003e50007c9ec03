//! Deadlines from durations the application configured. `Duration::MAX` (or any duration too
//! long to add to an `Instant`) is a natural way to write "never"; `Instant + Duration` panics
//! on it, and a panic in an adapter's loop would end every stream it serves. So every
//! configured duration becomes a deadline here, capped at a century: no connection lives
//! that long, and the adapters' timers clamp far deadlines themselves.

use std::time::{Duration, Instant};

/// The longest wait a deadline stands for: a century.
pub(crate) const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `now + wait`, with `wait` capped at a century.
pub(crate) fn after(now: Instant, wait: Duration) -> Instant {
    // A century always fits after a monotonic clock's reading (Linux: time since boot in a
    // u64 of seconds); were it not to, `now` is the one instant known to exist.
    now.checked_add(wait.min(CENTURY)).unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_waits_saturate_instead_of_panicking() {
        let now = Instant::now();
        assert_eq!(
            after(now, Duration::from_secs(5)),
            now + Duration::from_secs(5)
        );
        assert_eq!(after(now, Duration::MAX), now + CENTURY);
        // Any wait under a century is kept as it is.
        let years_99 = Duration::from_secs(99 * 365 * 24 * 3600);
        assert_eq!(after(now, years_99), now + years_99);
        assert!(after(now, Duration::MAX) > after(now, Duration::from_secs(3600 * 24 * 365)));
    }
}
