//! A mio handler that calls its own loop's handle: what an application reacting to events
//! on the loop thread does (subscribe once data flows, stop after enough).

use std::sync::{Arc, Mutex, OnceLock};

use feedwire_core::{StreamConfig, StreamEvent};
use feedwire_mio::{Delivery, Handler, LoopError, LoopHandle, StreamId};

/// What the handler's calls returned, and the stream's last event.
#[derive(Debug, Default)]
pub struct Outcome {
    /// `(call, result)` for each blocking call made from the handler.
    pub calls: Vec<(&'static str, Result<(), LoopError>)>,
    /// Data messages seen.
    pub data: usize,
    /// The stream's end, once it came.
    pub end: Option<StreamEvent>,
}

/// The stream whose confirmed subscription (by the test, from where it may) makes the
/// handler stop its stream.
pub const STOP_SIGNAL: &str = "bnbusdt@trade";

/// On the first data message, makes every kind of blocking call on its own loop's handle;
/// once [`STOP_SIGNAL`] is confirmed, stops the stream from there (no answer to wait for).
#[derive(Debug)]
pub struct CallsItsOwnLoop {
    handle: LoopHandle,
    id: Arc<OnceLock<StreamId>>,
    outcome: Arc<Mutex<Outcome>>,
}

impl CallsItsOwnLoop {
    /// A handler for a stream of the loop `handle` controls; the id is to be set once
    /// `connect` returned it, and the outcome is shared with the test.
    pub fn new(handle: LoopHandle) -> (Self, Arc<OnceLock<StreamId>>, Arc<Mutex<Outcome>>) {
        let id = Arc::new(OnceLock::new());
        let outcome = Arc::new(Mutex::new(Outcome::default()));
        let handler = Self {
            handle,
            id: id.clone(),
            outcome: outcome.clone(),
        };
        (handler, id, outcome)
    }
}

impl CallsItsOwnLoop {
    /// The stream's id. A spawned loop can connect a loopback stream, and call this with its
    /// first data, before the thread that called `connect` has run again to set it (seen on
    /// a loaded machine); then the handler waits a moment for it.
    fn id(&self) -> StreamId {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            if let Some(id) = self.id.get() {
                return *id;
            }
            assert!(std::time::Instant::now() < deadline, "the id was never set");
            std::thread::yield_now();
        }
    }
}

impl Handler for CallsItsOwnLoop {
    fn on_event(&mut self, event: StreamEvent) {
        let mut outcome = self.outcome.lock().unwrap();
        match event {
            StreamEvent::Data { .. } => {
                let id = self.id();
                outcome.data += 1;
                if outcome.data == 1 {
                    let h = &self.handle;
                    let calls = [
                        ("subscribe", h.subscribe(id, &["ethusdt@trade"])),
                        ("unsubscribe", h.unsubscribe(id, &["btcusdt@aggTrade"])),
                        ("list_subscriptions", h.list_subscriptions(id)),
                        ("send_text", h.send_text(id, "{}")),
                        ("request", h.request(id, "ping", None).map(drop)),
                        (
                            "connect",
                            h.connect(
                                StreamConfig::binance_stream("ws://127.0.0.1:1/ws"),
                                Delivery::Handler(Box::new(Ignore)),
                            )
                            .map(drop),
                        ),
                    ];
                    outcome.calls.extend(calls);
                }
            }
            StreamEvent::Subscribed { streams, .. } if streams.iter().any(|s| s == STOP_SIGNAL) => {
                self.handle.stop(self.id());
            }
            e @ (StreamEvent::Closed { .. } | StreamEvent::Crashed(_)) => outcome.end = Some(e),
            _ => {}
        }
    }
}

struct Ignore;

impl Handler for Ignore {
    fn on_event(&mut self, _: StreamEvent) {}
}

/// Asserts that every blocking call the handler made was refused as made on the loop's
/// thread — none waited (a wait would have hung the loop and the test) — and that its stop
/// closed the stream.
pub fn assert_refused_then_stopped(outcome: &Outcome) {
    assert_eq!(outcome.calls.len(), 6);
    for (call, result) in &outcome.calls {
        assert!(
            matches!(result, Err(LoopError::OnLoopThread)),
            "{call}: {result:?}"
        );
    }
    assert_eq!(
        outcome.end,
        Some(StreamEvent::Closed {
            by: feedwire_core::CloseInitiator::Local,
            code: 1000
        })
    );
}
