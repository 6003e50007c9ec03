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
}

const COUNT: usize = 7;

impl Timer {
    const ALL: [Timer; COUNT] = [
        Self::Connect,
        Self::FirstData,
        Self::Idle,
        Self::Keepalive,
        Self::Reconnect,
        Self::Pace,
        Self::Lifetime,
    ];
}

/// One optional deadline per timer.
#[derive(Debug, Default, Clone)]
pub(crate) struct TimerTable([Option<Instant>; COUNT]);

impl TimerTable {
    pub(crate) fn set(&mut self, timer: Timer, at: Instant) {
        self.0[timer as usize] = Some(at);
    }

    pub(crate) fn stop(&mut self, timer: Timer) {
        self.0[timer as usize] = None;
    }

    pub(crate) fn get(&self, timer: Timer) -> Option<Instant> {
        self.0[timer as usize]
    }

    pub(crate) fn clear(&mut self) {
        self.0 = [None; COUNT];
    }

    pub(crate) fn next(&self) -> Option<Instant> {
        self.0.iter().flatten().min().copied()
    }

    /// Removes and returns every timer due at `now`, in declaration order.
    pub(crate) fn take_expired(&mut self, now: Instant) -> impl Iterator<Item = Timer> {
        let mut due = [None; COUNT];
        for t in Timer::ALL {
            if matches!(self.0[t as usize], Some(at) if at <= now) {
                self.0[t as usize] = None;
                due[t as usize] = Some(t);
            }
        }
        due.into_iter().flatten()
    }
}
