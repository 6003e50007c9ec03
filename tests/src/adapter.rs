//! A blocking facade over the adapters, so that the loopback scenarios are written once and
//! run against every adapter (tokio now, mio with its issue): each adapter implements
//! [`Adapter`] and calls the functions of [`crate::scenarios`].

use std::time::Duration;

use bytes::Bytes;
use feedwire_core::rustls::RootCertStore;
use feedwire_core::{BetfairAuth, BetfairSubscription, StatsSnapshot, StreamConfig, StreamEvent};

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
    /// Unsubscribes Binance streams.
    fn unsubscribe(&mut self, streams: &[&str]) -> Result<(), String>;
    /// Asks for the connection's Binance streams (the answer is an event).
    fn list_subscriptions(&mut self) -> Result<(), String>;
    /// The Binance streams the stream subscribes on every connection, as it has them now.
    fn subscriptions(&mut self) -> Result<Vec<String>, String>;
    /// Sets the Betfair market subscription.
    fn subscribe_markets(&mut self, sub: BetfairSubscription) -> Result<(), String>;
    /// Sets the Betfair order subscription.
    fn subscribe_orders(&mut self, sub: BetfairSubscription) -> Result<(), String>;
    /// Replaces the Betfair credentials for the logins to come.
    fn set_betfair_auth(&mut self, auth: BetfairAuth) -> Result<(), String>;
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

/// A lending handler that copies each message into a channel as the `Data` event it stands
/// for, and forwards every other event.
struct Forward(std::sync::mpsc::Sender<StreamEvent>);

impl feedwire_mio::DataHandler for Forward {
    fn on_data(&mut self, data: feedwire_core::DataRef<'_>) {
        let _ = self.0.send(StreamEvent::Data {
            payload: Bytes::copy_from_slice(data.payload),
            heartbeat: data.heartbeat,
            received: data.received,
        });
    }

    fn on_event(&mut self, event: StreamEvent) {
        let _ = self.0.send(event);
    }
}

/// The tokio adapter behind the facade: one runtime (one worker thread) per session, so the
/// stream runs while the scenario sleeps.
#[derive(Debug, Default)]
pub struct TokioAdapter;

struct TokioSession {
    rt: tokio::runtime::Runtime,
    handle: feedwire_tokio::StreamHandle,
    events: Option<TokioEvents>,
}

/// Where a tokio session's events come from.
enum TokioEvents {
    /// The adapter's own receiver.
    Adapter(feedwire_tokio::Events),
    /// Copied out of a lending handler on the stream's task.
    Lent(std::sync::mpsc::Receiver<StreamEvent>),
}

impl Adapter for TokioAdapter {
    fn start(
        &self,
        config: StreamConfig,
        roots: Option<RootCertStore>,
        event_capacity: usize,
    ) -> Box<dyn Session> {
        start_tokio(config, roots, event_capacity, false)
    }
}

/// The tokio adapter with data lent to a handler on the stream's task
/// ([`feedwire_tokio::connect_lending`]), copied into the facade's channel as the `Data`
/// events they stand for. The handler cannot push back, so the scenarios about a full or
/// dropped receiver do not apply.
#[derive(Debug, Default)]
pub struct TokioLendAdapter;

impl Adapter for TokioLendAdapter {
    fn start(
        &self,
        config: StreamConfig,
        roots: Option<RootCertStore>,
        event_capacity: usize,
    ) -> Box<dyn Session> {
        start_tokio(config, roots, event_capacity, true)
    }
}

/// One runtime (one worker thread) running `config`.
fn start_tokio(
    config: StreamConfig,
    roots: Option<RootCertStore>,
    event_capacity: usize,
    lend: bool,
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
    let guard = rt.enter();
    let (handle, events) = if lend {
        let (tx, rx) = std::sync::mpsc::channel();
        let handle = feedwire_tokio::connect_lending(config, options, Forward(tx));
        (handle.expect("valid config"), TokioEvents::Lent(rx))
    } else {
        let (handle, events) = feedwire_tokio::connect(config, options).expect("valid config");
        (handle, TokioEvents::Adapter(events))
    };
    drop(guard);
    Box::new(TokioSession {
        rt,
        handle,
        events: Some(events),
    })
}

impl Session for TokioSession {
    fn next_event(&mut self, timeout: Duration) -> Result<Option<StreamEvent>, ()> {
        match self.events.as_mut() {
            None => Ok(None),
            Some(TokioEvents::Adapter(events)) => self.rt.block_on(async {
                tokio::time::timeout(timeout, events.next())
                    .await
                    .map_err(|_| ())
            }),
            Some(TokioEvents::Lent(rx)) => match rx.recv_timeout(timeout) {
                Ok(e) => Ok(Some(e)),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Ok(None),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(()),
            },
        }
    }

    fn subscribe(&mut self, streams: &[&str]) -> Result<(), String> {
        self.rt
            .block_on(self.handle.subscribe(streams))
            .map_err(|e| e.to_string())
    }

    fn unsubscribe(&mut self, streams: &[&str]) -> Result<(), String> {
        self.rt
            .block_on(self.handle.unsubscribe(streams))
            .map_err(|e| e.to_string())
    }

    fn list_subscriptions(&mut self) -> Result<(), String> {
        self.rt
            .block_on(self.handle.list_subscriptions())
            .map_err(|e| e.to_string())
    }

    fn subscriptions(&mut self) -> Result<Vec<String>, String> {
        self.rt
            .block_on(self.handle.subscriptions())
            .map_err(|e| e.to_string())
    }

    fn subscribe_markets(&mut self, sub: BetfairSubscription) -> Result<(), String> {
        self.rt
            .block_on(self.handle.subscribe_markets(sub))
            .map_err(|e| e.to_string())
    }

    fn subscribe_orders(&mut self, sub: BetfairSubscription) -> Result<(), String> {
        self.rt
            .block_on(self.handle.subscribe_orders(sub))
            .map_err(|e| e.to_string())
    }

    fn set_betfair_auth(&mut self, auth: BetfairAuth) -> Result<(), String> {
        self.rt
            .block_on(self.handle.set_betfair_auth(auth))
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

struct MioSession<H> {
    handle: feedwire_mio::LoopHandle<H>,
    id: feedwire_mio::StreamId,
    events: Option<MioEvents>,
    stats: feedwire_core::StatsHandle,
}

/// Where a mio session's events come from: the delivery's own channel, or the channel a
/// lending handler forwards into.
enum MioEvents {
    Channel(feedwire_mio::Events),
    Forwarded(std::sync::mpsc::Receiver<StreamEvent>),
}

impl MioEvents {
    fn recv_timeout(
        &mut self,
        timeout: Duration,
    ) -> Result<StreamEvent, std::sync::mpsc::RecvTimeoutError> {
        match self {
            Self::Channel(rx) => rx.recv_timeout(timeout),
            Self::Forwarded(rx) => rx.recv_timeout(timeout),
        }
    }
}

impl Adapter for MioAdapter {
    fn start(
        &self,
        config: StreamConfig,
        roots: Option<RootCertStore>,
        event_capacity: usize,
    ) -> Box<dyn Session> {
        let (tx, rx) = feedwire_mio::event_channel(event_capacity);
        let delivery = feedwire_mio::Delivery::<feedwire_mio::AnyDataHandler>::Channel(tx);
        start_mio(config, roots, delivery, MioEvents::Channel(rx))
    }
}

/// The mio adapter with data lent to a [`feedwire_mio::DataHandler`] on the loop thread (a
/// loop typed for it: `LoopHandle::spawn_lending_to`, `on_data` called without a vtable),
/// which copies every message into the facade's channel as the `Data` event it stands for
/// (so the scenarios see exactly what a channel delivery would show). The handler cannot
/// push back, so the scenarios about a full or dropped channel do not apply.
#[derive(Debug, Default)]
pub struct MioLendAdapter;

impl Adapter for MioLendAdapter {
    fn start(
        &self,
        config: StreamConfig,
        roots: Option<RootCertStore>,
        _event_capacity: usize,
    ) -> Box<dyn Session> {
        let (tx, rx) = std::sync::mpsc::channel();
        let delivery = feedwire_mio::Delivery::Lend(Forward(tx));
        start_mio(config, roots, delivery, MioEvents::Forwarded(rx))
    }
}

/// One event loop (one thread) running `config`, its events read from `events`.
fn start_mio<H: feedwire_mio::DataHandler + Send + 'static>(
    config: StreamConfig,
    roots: Option<RootCertStore>,
    delivery: feedwire_mio::Delivery<H>,
    events: MioEvents,
) -> Box<dyn Session> {
    let options = feedwire_mio::MioOptions {
        tls: roots.map(feedwire_core::tls_config_with_roots),
        ..feedwire_mio::MioOptions::default()
    };
    let handle = feedwire_mio::LoopHandle::spawn_lending_to(options).expect("event loop");
    let (id, stats) = handle.connect(config, delivery).expect("valid config");
    Box::new(MioSession {
        handle,
        id,
        events: Some(events),
        stats,
    })
}

impl<H: feedwire_mio::DataHandler + Send + 'static> Session for MioSession<H> {
    fn next_event(&mut self, timeout: Duration) -> Result<Option<StreamEvent>, ()> {
        let Some(rx) = self.events.as_mut() else {
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

    fn unsubscribe(&mut self, streams: &[&str]) -> Result<(), String> {
        self.handle
            .unsubscribe(self.id, streams)
            .map_err(|e| e.to_string())
    }

    fn list_subscriptions(&mut self) -> Result<(), String> {
        self.handle
            .list_subscriptions(self.id)
            .map_err(|e| e.to_string())
    }

    fn subscriptions(&mut self) -> Result<Vec<String>, String> {
        self.handle
            .subscriptions(self.id)
            .map_err(|e| e.to_string())
    }

    fn subscribe_markets(&mut self, sub: BetfairSubscription) -> Result<(), String> {
        self.handle
            .subscribe_markets(self.id, sub)
            .map_err(|e| e.to_string())
    }

    fn subscribe_orders(&mut self, sub: BetfairSubscription) -> Result<(), String> {
        self.handle
            .subscribe_orders(self.id, sub)
            .map_err(|e| e.to_string())
    }

    fn set_betfair_auth(&mut self, auth: BetfairAuth) -> Result<(), String> {
        self.handle
            .set_betfair_auth(self.id, auth)
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
            .request(self.id, method, None)
            .map_err(|e| e.to_string())
    }

    fn stop(&mut self) {
        self.handle.stop(self.id);
    }

    fn crash(&mut self, reason: &str) {
        self.handle.crash(self.id, reason);
    }

    fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot(std::time::Instant::now())
    }

    fn drop_events(&mut self) {
        self.events = None;
    }
}

impl<H> Drop for MioSession<H> {
    fn drop(&mut self) {
        self.handle.clone().shutdown();
    }
}
