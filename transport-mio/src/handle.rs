//! The application's side of the loop: spawning it, commands through a channel and a waker,
//! and the two delivery styles.

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use feedwire_core::rustls::ClientConfig;
use feedwire_core::{
    BetfairAuth, BetfairSubscription, ConfigError, DataHandler, StatsHandle, StreamConfig,
    StreamError, StreamEvent,
};

use crate::doorbell::Doorbell;
use crate::event_loop::EventLoop;
use crate::loop_thread::LoopId;

/// Loop settings.
#[derive(Debug, Clone)]
pub struct MioOptions {
    /// TLS configuration for `wss://` and `tls://` (default:
    /// [`default_tls_config`](feedwire_core::default_tls_config), Mozilla roots, one for the
    /// process: reconnects resume TLS sessions). Verification is always on.
    pub tls: Option<Arc<ClientConfig>>,
    /// Most bytes read from one connection per wake-up, so one busy stream cannot starve the
    /// others (default 1 MiB).
    pub read_budget: usize,
    /// Busy polling: when a turn would wait, it first polls (`epoll_wait` with a zero
    /// timeout) for up to this long, never beyond the turn's own limit, then sleeps for the
    /// rest. Default zero: never spin. Spinning takes bytes the moment they are readable,
    /// without the sleeping thread's wake-up (tens of µs on a virtual machine), and keeps a
    /// core busy while the streams are quiet: for a loop thread on a core of its own, with
    /// the spin longer than the usual gap between messages.
    pub busy_poll: Duration,
}

impl Default for MioOptions {
    fn default() -> Self {
        Self {
            tls: None,
            read_budget: 1 << 20,
            busy_poll: Duration::ZERO,
        }
    }
}

/// Receives a stream's events on the loop thread. It must not block. If it panics, its
/// stream is dropped (crashed, the handler not called again) and the loop's other streams
/// go on.
pub trait Handler: Send + 'static {
    /// One event, in order.
    fn on_event(&mut self, event: StreamEvent);
}

/// The handler type of [`Delivery::Lend`] unless a loop names its own: any handler, each
/// data message's `on_data` called through its vtable.
pub type AnyDataHandler = Box<dyn DataHandler + Send>;

/// How a stream's events reach the application. `H` is the type of the loop's lending
/// handlers (see [`MioLoop::lending_to`](crate::MioLoop::lending_to)).
pub enum Delivery<H = AnyDataHandler> {
    /// Called on the loop thread.
    Handler(Box<dyn Handler>),
    /// Called on the loop thread (it must not block), data messages lent from the read
    /// buffer: the cheapest way to read a stream (see
    /// [`feedwire_core::Stream::handle_read_with`]). A panic drops the stream, as for
    /// [`Handler`].
    Lend(H),
    /// A bounded [`event_channel`](crate::event_channel): when full, the loop stops
    /// reading the stream until the consumer takes what waits, which wakes the loop
    /// (however long: the idle timeout does not take the held reads for a silent peer);
    /// when the receiver is dropped, the stream is stopped.
    Channel(crate::EventSender),
    /// A [`shared_event_channel`](crate::shared_event_channel) many streams send to, each
    /// event tagged with its stream's id; back-pressure and the receiver's drop as for
    /// [`Channel`](Self::Channel).
    Shared(crate::SharedEventSender),
}

impl<H> Delivery<H> {
    /// The handler to lend data to: a lending delivery's, and only while no event waits for
    /// it (`nothing_pending`), so that nothing overtakes a queued event.
    pub(crate) fn lender(&mut self, nothing_pending: bool) -> Option<&mut H> {
        match self {
            Self::Lend(h) if nothing_pending => Some(h),
            _ => None,
        }
    }
}

impl<H> std::fmt::Debug for Delivery<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Handler(_) => "Delivery::Handler",
            Self::Lend(_) => "Delivery::Lend",
            Self::Channel(_) => "Delivery::Channel",
            Self::Shared(_) => "Delivery::Shared",
        })
    }
}

/// A stream in a loop: the loop's slab, a slot and its generation. Unique in the process:
/// ids of streams on different loops differ, and a loop given another loop's id finds no
/// stream (`LoopError::NoStream`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StreamId {
    pub(crate) slab: u32,
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

/// Why a loop command failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoopError {
    /// The configuration is unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The stream refused the command.
    #[error(transparent)]
    Stream(#[from] StreamError),
    /// No such stream (ended, or never existed).
    #[error("no such stream")]
    NoStream,
    /// The loop has shut down.
    #[error("event loop has shut down")]
    LoopGone,
    /// A request got no response within its timeout.
    #[error("request timed out")]
    TimedOut,
    /// The connection a request went out on ended before its answer came.
    #[error("connection lost before the answer came")]
    ConnectionLost,
    /// A call that waits for the loop's answer was made on the thread turning that loop
    /// (from a handler): the loop cannot answer while the call holds it, so it would wait
    /// forever. Nothing was done. `stop` and `crash` work from there; others, from another
    /// thread (or, on a [`MioLoop`](crate::MioLoop), its own methods between turns).
    #[error("blocking call made on the loop's own thread (from a handler) refused")]
    OnLoopThread,
}

pub(crate) type Reply<T> = Sender<Result<T, LoopError>>;

pub(crate) enum Command<H> {
    Connect(
        Box<StreamConfig>,
        Delivery<H>,
        Reply<(StreamId, StatsHandle)>,
    ),
    Stop(StreamId),
    Crash(StreamId, String),
    Subscribe(StreamId, Vec<String>, Reply<()>),
    Unsubscribe(StreamId, Vec<String>, Reply<()>),
    ListSubscriptions(StreamId, Reply<()>),
    Subscriptions(StreamId, Reply<Vec<String>>),
    SubscribeMarkets(StreamId, BetfairSubscription, Reply<()>),
    SubscribeOrders(StreamId, BetfairSubscription, Reply<()>),
    SetBetfairAuth(StreamId, BetfairAuth, Reply<()>),
    SendText(StreamId, String, Reply<()>),
    SendBinary(StreamId, Vec<u8>, Reply<()>),
    Request(StreamId, String, Option<String>, Reply<Bytes>),
    /// One stream's addresses, known without a lookup (an IP literal, `connect_to`).
    Resolved(StreamId, Result<Vec<std::net::SocketAddr>, String>),
    /// A host's addresses from the resolver pool, for every stream that asked meanwhile.
    Looked(String, u16, Result<Vec<std::net::SocketAddr>, String>),
    Shutdown,
}

impl<H> Command<H> {
    /// The stream a command is about, if any.
    pub(crate) fn stream(&self) -> Option<StreamId> {
        match self {
            Self::Stop(id)
            | Self::Crash(id, _)
            | Self::Subscribe(id, ..)
            | Self::Unsubscribe(id, ..)
            | Self::ListSubscriptions(id, _)
            | Self::Subscriptions(id, _)
            | Self::SubscribeMarkets(id, ..)
            | Self::SubscribeOrders(id, ..)
            | Self::SetBetfairAuth(id, ..)
            | Self::SendText(id, ..)
            | Self::SendBinary(id, ..)
            | Self::Request(id, ..)
            | Self::Resolved(id, _) => Some(*id),
            Self::Connect(..) | Self::Looked(..) | Self::Shutdown => None,
        }
    }
}

/// Controls a loop from any thread; cloneable. Every command wakes the loop at once. The
/// calls that return a result wait for the loop's answer; made from the loop's own thread
/// (in a handler) they are refused with [`LoopError::OnLoopThread`] rather than hang it.
///
/// Dropping the last handle of a spawned loop shuts it down, as
/// [`shutdown`](Self::shutdown) does (a handle kept by one of the loop's own handlers
/// counts, so such a loop runs until `shutdown`).
pub struct LoopHandle<H = AnyDataHandler> {
    pub(crate) commands: Sender<Command<H>>,
    pub(crate) doorbell: Doorbell,
    pub(crate) thread: Option<Arc<JoinHandle<()>>>,
    pub(crate) loop_id: LoopId,
}

impl<H> Clone for LoopHandle<H> {
    fn clone(&self) -> Self {
        Self {
            commands: self.commands.clone(),
            doorbell: self.doorbell.clone(),
            thread: self.thread.clone(),
            loop_id: self.loop_id,
        }
    }
}

/// The last handle of a spawned loop gone: nothing can stop its streams or the loop any
/// more, so it shuts down. It used to run on with its streams connected (reconnecting for
/// good) and its thread parked in `epoll_wait`, until the process ended.
impl<H> Drop for LoopHandle<H> {
    fn drop(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        // Only the last of the clones gets the thread (atomically: two dropped at once on
        // two threads cannot both think the other one remains).
        let Ok(thread) = Arc::try_unwrap(thread) else {
            return;
        };
        // An ended loop refuses the command; its thread is joined all the same.
        let _ = self.send(Command::Shutdown);
        if !self.loop_id.is_current() {
            let _ = thread.join();
        }
    }
}

impl<H> std::fmt::Debug for LoopHandle<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LoopHandle")
    }
}

impl LoopHandle {
    /// Starts a loop on a thread of its own; its lending streams may each have a handler of
    /// a different type.
    pub fn spawn(options: MioOptions) -> std::io::Result<Self> {
        Self::spawn_lending_to(options)
    }
}

impl<H: DataHandler + Send + 'static> LoopHandle<H> {
    /// Starts a loop on a thread of its own whose lending streams all have handlers of type
    /// `H`: each data message's `on_data` is called directly (and can be inlined), not
    /// through a vtable — about 10 instructions less per message.
    pub fn spawn_lending_to(options: MioOptions) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        let (event_loop, doorbell) = EventLoop::new(options, rx, tx.clone())?;
        let loop_id = event_loop.id();
        let thread = std::thread::Builder::new()
            .name("feedwire-mio".into())
            .spawn(move || event_loop.run())?;
        Ok(Self {
            commands: tx,
            doorbell,
            thread: Some(Arc::new(thread)),
            loop_id,
        })
    }
}

impl<H> LoopHandle<H> {
    fn send(&self, cmd: Command<H>) -> Result<(), LoopError> {
        self.commands.send(cmd).map_err(|_| LoopError::LoopGone)?;
        self.doorbell.ring().map_err(|_| LoopError::LoopGone)
    }

    fn call<T>(&self, make: impl FnOnce(Reply<T>) -> Command<H>) -> Result<T, LoopError> {
        if self.loop_id.is_current() {
            return Err(LoopError::OnLoopThread);
        }
        let (tx, rx): (Reply<T>, Receiver<Result<T, LoopError>>) = mpsc::channel();
        self.send(make(tx))?;
        rx.recv().map_err(|_| LoopError::LoopGone)?
    }

    /// Adds a stream; returns its id and a statistics reader.
    pub fn connect(
        &self,
        config: StreamConfig,
        delivery: Delivery<H>,
    ) -> Result<(StreamId, StatsHandle), LoopError> {
        self.call(|r| Command::Connect(Box::new(config), delivery, r))
    }

    /// Graceful stop (Close frame on the wire at once). What is still delivered after it:
    /// [`Stream::stop`](feedwire_core::Stream::stop).
    pub fn stop(&self, id: StreamId) {
        let _ = self.send(Command::Stop(id));
    }

    /// Immediate end.
    pub fn crash(&self, id: StreamId, reason: &str) {
        let _ = self.send(Command::Crash(id, reason.to_owned()));
    }

    /// Subscribes Binance streams.
    pub fn subscribe(&self, id: StreamId, streams: &[&str]) -> Result<(), LoopError> {
        let streams = streams.iter().map(|s| (*s).to_owned()).collect();
        self.call(|r| Command::Subscribe(id, streams, r))
    }

    /// Unsubscribes Binance streams; one not subscribed is an error and nothing is sent.
    pub fn unsubscribe(&self, id: StreamId, streams: &[&str]) -> Result<(), LoopError> {
        let streams = streams.iter().map(|s| (*s).to_owned()).collect();
        self.call(|r| Command::Unsubscribe(id, streams, r))
    }

    /// Asks a Binance stream endpoint for the connection's streams (the stream must be
    /// open); the answer reaches the stream's handler as
    /// [`StreamEvent::Response`](feedwire_core::StreamEvent::Response) with
    /// [`RequestKind::ListSubscriptions`](feedwire_core::RequestKind::ListSubscriptions).
    pub fn list_subscriptions(&self, id: StreamId) -> Result<(), LoopError> {
        self.call(|r| Command::ListSubscriptions(id, r))
    }

    /// The Binance streams stream `id` subscribes on every connection (those its URL names
    /// among them, less those unsubscribed), as it has them now: what a second stream
    /// subscribes to take over from this one (make-before-break, at
    /// [`StreamEvent::ReconnectDue`](feedwire_core::StreamEvent::ReconnectDue)). A
    /// subscription the server refused is not among them.
    pub fn subscriptions(&self, id: StreamId) -> Result<Vec<String>, LoopError> {
        self.call(|r| Command::Subscriptions(id, r))
    }

    /// Sets the Betfair market subscription.
    pub fn subscribe_markets(
        &self,
        id: StreamId,
        sub: BetfairSubscription,
    ) -> Result<(), LoopError> {
        self.call(|r| Command::SubscribeMarkets(id, sub, r))
    }

    /// Sets the Betfair order subscription.
    pub fn subscribe_orders(
        &self,
        id: StreamId,
        sub: BetfairSubscription,
    ) -> Result<(), LoopError> {
        self.call(|r| Command::SubscribeOrders(id, sub, r))
    }

    /// Replaces a Betfair stream's credentials for the logins to come (a renewed session
    /// token): see [`Stream::set_betfair_auth`](feedwire_core::Stream::set_betfair_auth).
    pub fn set_betfair_auth(&self, id: StreamId, auth: BetfairAuth) -> Result<(), LoopError> {
        self.call(|r| Command::SetBetfairAuth(id, auth, r))
    }

    /// Sends a text message or line.
    pub fn send_text(&self, id: StreamId, text: &str) -> Result<(), LoopError> {
        let text = text.to_owned();
        self.call(|r| Command::SendText(id, text, r))
    }

    /// Sends a binary message.
    pub fn send_binary(&self, id: StreamId, data: &[u8]) -> Result<(), LoopError> {
        let data = data.to_vec();
        self.call(|r| Command::SendBinary(id, data, r))
    }

    /// A Binance WebSocket API request (`params_json`: a JSON value, or none); blocks until
    /// its response (or the request timeout).
    pub fn request(
        &self,
        id: StreamId,
        method: &str,
        params_json: Option<&str>,
    ) -> Result<Bytes, LoopError> {
        let (method, params) = (method.to_owned(), params_json.map(str::to_owned));
        self.call(|r| Command::Request(id, method, params, r))
    }

    /// Stops the loop and waits for its thread — unless called on that thread (from a
    /// handler), which the loop leaves once the handler returns. Every stream is stopped on
    /// the way out: its Close frame is written if the socket takes it at once (the peers'
    /// answers are not waited for) and its queued events are handed on; then the streams
    /// are dropped. Commands sent before the shutdown are taken first.
    pub fn shutdown(mut self) {
        let _ = self.send(Command::Shutdown);
        if self.loop_id.is_current() {
            return;
        }
        if let Some(t) = self.thread.take().and_then(|a| Arc::try_unwrap(a).ok()) {
            let _ = t.join();
        }
    }
}
