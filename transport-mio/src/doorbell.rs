//! How a handle reaches its loop: the `mio::Waker` that ends the loop's wait, and a flag the
//! loop's reads look at between socket reads. A busy stream's reads otherwise run on to the
//! read budget (1 MiB by default) before the loop looks at its commands, so a `stop` took
//! effect only after megabytes more had been read and lent.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use mio::Waker;

/// Shared by a loop and its handles; cloning shares it.
#[derive(Debug, Clone)]
pub(crate) struct Doorbell {
    waker: Arc<Waker>,
    /// A command was sent and the loop has not taken its commands since.
    waiting: Arc<AtomicBool>,
}

impl Doorbell {
    pub(crate) fn new(waker: Waker) -> Self {
        Self {
            waker: Arc::new(waker),
            waiting: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The waker alone, for senders whose messages need not cut reads short (resolved
    /// addresses).
    pub(crate) fn waker(&self) -> Arc<Waker> {
        self.waker.clone()
    }

    /// After a command was sent: flags it and wakes the loop.
    pub(crate) fn ring(&self) -> std::io::Result<()> {
        self.waiting.store(true, Ordering::Relaxed);
        self.waker.wake()
    }

    /// Whether a command waits (reads should stop and let the loop take it). Relaxed: a
    /// command seen one read late is still taken at once by the next turn, which the wake
    /// makes immediate.
    #[inline]
    pub(crate) fn rung(&self) -> bool {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Before the loop takes its commands (one rung after this waits for the next turn,
    /// which its wake makes immediate).
    pub(crate) fn answer(&self) {
        self.waiting.store(false, Ordering::Relaxed);
    }
}
