//! A lending handler that stops its own stream from `on_data`, and counts what is lent after.

use std::sync::{Arc, Mutex, OnceLock};

use feedwire_core::{DataHandler, DataRef, StreamEvent};

/// How the handler stops its stream (set once the stream's handle exists).
pub type StopFn = Box<dyn Fn() + Send + Sync>;

/// Data messages lent, and the stream's end once it came.
#[derive(Debug, Default)]
pub struct Lent {
    /// Data messages lent in all.
    pub data: usize,
    /// `Closed` or `Crashed`.
    pub end: Option<StreamEvent>,
}

/// Calls `stop` from `on_data` when the `stop_at`-th message is lent.
pub struct StopsItself {
    /// Which message stops the stream.
    pub stop_at: usize,
    /// The stop, set after the stream started.
    pub stop: Arc<OnceLock<StopFn>>,
    /// Shared with the test.
    pub lent: Arc<Mutex<Lent>>,
}

impl std::fmt::Debug for StopsItself {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StopsItself")
            .field("stop_at", &self.stop_at)
            .finish_non_exhaustive()
    }
}

impl DataHandler for StopsItself {
    fn on_data(&mut self, _: DataRef<'_>) {
        let mut lent = self.lent.lock().unwrap();
        lent.data += 1;
        if lent.data == self.stop_at {
            (self.stop.get().expect("stop set before data"))();
        }
    }

    fn on_event(&mut self, event: StreamEvent) {
        if matches!(event, StreamEvent::Closed { .. } | StreamEvent::Crashed(_)) {
            self.lent.lock().unwrap().end = Some(event);
        }
    }
}

/// Bytes a read takes at most in these tests: the rest of the read that lent the stopping
/// message is still lent (it was read before the stop), and nothing read after.
pub const MAX_READ: usize = 16 * 1024;

/// Waits (up to 20 s) for the stream's end, then asserts it was a local close and that
/// after the `stop_at`-th message no more than one read's messages (`MAX_READ` bytes of
/// messages of at least `min_message` bytes) were lent.
pub fn assert_stopped_within_a_read(lent: &Mutex<Lent>, stop_at: usize, min_message: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while lent.lock().unwrap().end.is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "no end after the stop"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let lent = lent.lock().unwrap();
    assert!(
        matches!(
            lent.end,
            Some(StreamEvent::Closed {
                by: feedwire_core::CloseInitiator::Local,
                ..
            })
        ),
        "{:?}",
        lent.end
    );
    let after = lent.data - stop_at;
    assert!(
        after <= MAX_READ / min_message,
        "{after} messages lent after the stop (one read holds at most {})",
        MAX_READ / min_message
    );
}
