//! A blocking facade over the adapters, so that the loopback scenarios are written once and
//! run against every adapter (tokio now, mio with its issue): each adapter implements
//! [`Adapter`] and calls the functions of [`crate::scenarios`].

use std::time::Duration;

use bytes::Bytes;
use feedwire_core::rustls::RootCertStore;
use feedwire_core::{BetfairSubscription, StatsSnapshot, StreamConfig, StreamEvent};

/// Starts streams.
pub trait Adapter {
    /// Starts a stream. `roots`: the CA to trust for TLS (`None`: the public roots only);
    /// `event_capacity`: events buffered for the application.
    fn start(
        &self,
        config: StreamConfig,
        roots: Option<RootCertStore>,
        event_capacity: usize,
    ) -> Box<dyn Session>;
}

/// One running stream, driven in the background by its adapter.
pub trait Session {
    /// The next event within `timeout`: `Ok(None)` once the stream's events ended,
    /// `Err(())` if none arrived in time.
    #[allow(clippy::result_unit_err, reason = "a timeout carries no information")]
    fn next_event(&mut self, timeout: Duration) -> Result<Option<StreamEvent>, ()>;
    /// Subscribes Binance streams.
    fn subscribe(&mut self, streams: &[&str]) -> Result<(), String>;
    /// Sets the Betfair market subscription.
    fn subscribe_markets(&mut self, sub: BetfairSubscription) -> Result<(), String>;
    /// Sends a text message or line.
    fn send_text(&mut self, text: &str) -> Result<(), String>;
    /// Sends a binary message.
    fn send_binary(&mut self, data: &[u8]) -> Result<(), String>;
    /// A Binance WebSocket API request, waiting for its response payload.
    fn request(&mut self, method: &str) -> Result<Bytes, String>;
    /// Graceful stop.
    fn stop(&mut self);
    /// Immediate end.
    fn crash(&mut self, reason: &str);
    /// A statistics snapshot.
    fn stats(&self) -> StatsSnapshot;
    /// Drops the application's event receiver (cancel safety).
    fn drop_events(&mut self);
}

/// The tokio adapter behind the facade: one runtime (one worker thread) per session, so the
/// stream runs while the scenario sleeps.
#[derive(Debug, Default)]
pub struct TokioAdapter;

struct TokioSession {
    rt: tokio::runtime::Runtime,
    handle: feedwire_tokio::StreamHandle,
    events: Option<feedwire_tokio::Events>,
}

impl Adapter for TokioAdapter {
    fn start(
        &self,
        config: StreamConfig,
        roots: Option<RootCertStore>,
        event_capacity: usize,
    ) -> Box<dyn Session> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let options = feedwire_tokio::TokioOptions {
            tls: roots.map(feedwire_core::tls_config_with_roots),
            event_capacity,
            ..feedwire_tokio::TokioOptions::default()
        };
        let (handle, events) = rt
            .block_on(async { feedwire_tokio::connect(config, options) })
            .expect("valid config");
        Box::new(TokioSession {
            rt,
            handle,
            events: Some(events),
        })
    }
}

impl Session for TokioSession {
    fn next_event(&mut self, timeout: Duration) -> Result<Option<StreamEvent>, ()> {
        let Some(events) = self.events.as_mut() else {
            return Ok(None);
        };
        self.rt.block_on(async {
            tokio::time::timeout(timeout, events.next())
                .await
                .map_err(|_| ())
        })
    }

    fn subscribe(&mut self, streams: &[&str]) -> Result<(), String> {
        self.rt
            .block_on(self.handle.subscribe(streams))
            .map_err(|e| e.to_string())
    }

    fn subscribe_markets(&mut self, sub: BetfairSubscription) -> Result<(), String> {
        self.rt
            .block_on(self.handle.subscribe_markets(sub))
            .map_err(|e| e.to_string())
    }

    fn send_text(&mut self, text: &str) -> Result<(), String> {
        self.rt
            .block_on(self.handle.send_text(text))
            .map_err(|e| e.to_string())
    }

    fn send_binary(&mut self, data: &[u8]) -> Result<(), String> {
        self.rt
            .block_on(self.handle.send_binary(data.to_vec()))
            .map_err(|e| e.to_string())
    }

    fn request(&mut self, method: &str) -> Result<Bytes, String> {
        self.rt
            .block_on(self.handle.request(method, None))
            .map(|r| r.payload)
            .map_err(|e| e.to_string())
    }

    fn stop(&mut self) {
        self.handle.stop();
    }

    fn crash(&mut self, reason: &str) {
        self.handle.crash(reason);
    }

    fn stats(&self) -> StatsSnapshot {
        self.handle.stats()
    }

    fn drop_events(&mut self) {
        self.events = None;
    }
}

/// The mio adapter behind the facade: one event loop (one thread) per session, events through
/// the bounded channel delivery.
#[derive(Debug, Default)]
pub struct MioAdapter;

struct MioSession {
    handle: feedwire_mio::LoopHandle,
    id: feedwire_mio::StreamId,
    events: Option<std::sync::mpsc::Receiver<StreamEvent>>,
    stats: feedwire_core::StatsHandle,
}

impl Adapter for MioAdapter {
    fn start(
        &self,
        config: StreamConfig,
        roots: Option<RootCertStore>,
        event_capacity: usize,
    ) -> Box<dyn Session> {
        let options = feedwire_mio::MioOptions {
            tls: roots.map(feedwire_core::tls_config_with_roots),
            ..feedwire_mio::MioOptions::default()
        };
        let handle = feedwire_mio::LoopHandle::spawn(options).expect("event loop");
        let (tx, rx) = std::sync::mpsc::sync_channel(event_capacity);
        let (id, stats) = handle
            .connect(config, feedwire_mio::Delivery::Channel(tx))
            .expect("valid config");
        Box::new(MioSession {
            handle,
            id,
            events: Some(rx),
            stats,
        })
    }
}

impl Session for MioSession {
    fn next_event(&mut self, timeout: Duration) -> Result<Option<StreamEvent>, ()> {
        let Some(rx) = self.events.as_ref() else {
            return Ok(None);
        };
        match rx.recv_timeout(timeout) {
            Ok(e) => Ok(Some(e)),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Ok(None),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(()),
        }
    }

    fn subscribe(&mut self, streams: &[&str]) -> Result<(), String> {
        self.handle
            .subscribe(self.id, streams)
            .map_err(|e| e.to_string())
    }

    fn subscribe_markets(&mut self, sub: BetfairSubscription) -> Result<(), String> {
        self.handle
            .subscribe_markets(self.id, sub)
            .map_err(|e| e.to_string())
    }

    fn send_text(&mut self, text: &str) -> Result<(), String> {
        self.handle
            .send_text(self.id, text)
            .map_err(|e| e.to_string())
    }

    fn send_binary(&mut self, data: &[u8]) -> Result<(), String> {
        self.handle
            .send_binary(self.id, data)
            .map_err(|e| e.to_string())
    }

    fn request(&mut self, method: &str) -> Result<Bytes, String> {
        self.handle
            .request(self.id, method)
            .map_err(|e| e.to_string())
    }

    fn stop(&mut self) {
        self.handle.stop(self.id);
    }

    fn crash(&mut self, reason: &str) {
        self.handle.crash(self.id, reason);
    }

    fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }

    fn drop_events(&mut self) {
        self.events = None;
    }
}

impl Drop for MioSession {
    fn drop(&mut self) {
        self.handle.clone().shutdown();
    }
}
