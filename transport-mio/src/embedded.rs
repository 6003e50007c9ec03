//! The loop on the application's own thread: it turns the loop when it likes, and may
//! register its own mio sources in the same `Poll` (one epoll for everything).

use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use feedwire_core::{BetfairAuth, BetfairSubscription, DataHandler, StatsHandle, StreamConfig};
use mio::event::Event;
use mio::{Events, Token};

use crate::event_loop::{EventLoop, USER_TOKEN_BIT};
use crate::handle::{
    AnyDataHandler, Command, Delivery, LoopError, LoopHandle, MioOptions, Reply, StreamId,
};

/// The token for the application's own source number `n` in [`MioLoop::registry`]; its
/// events come back through [`MioLoop::turn`]'s callback, never to a stream.
pub const fn user_token(n: u32) -> Token {
    Token(USER_TOKEN_BIT | n as usize)
}

/// The application's number of a token made by [`user_token`].
pub const fn user_token_number(token: Token) -> Option<u32> {
    if token.0 & USER_TOKEN_BIT != 0 {
        Some(token.0 as u32)
    } else {
        None
    }
}

/// A loop owned and turned by the application's thread. Streams are added and controlled
/// directly (no channel round trip); other threads can still use [`MioLoop::handle`]. `H`
/// is the type of its lending streams' handlers (see [`MioLoop::lending_to`]). Dropped, it
/// drops its streams as they are; to end them with a Close first, shut it down through a
/// handle ([`LoopHandle::shutdown`]) and turn it until [`turn`](Self::turn) says false.
pub struct MioLoop<H = AnyDataHandler> {
    inner: EventLoop<H>,
    handle: LoopHandle<H>,
    events: Events,
    running: bool,
}

impl<H> std::fmt::Debug for MioLoop<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MioLoop")
    }
}

impl MioLoop {
    /// A loop with no streams yet; its lending streams may each have a handler of a
    /// different type.
    pub fn new(options: MioOptions) -> std::io::Result<Self> {
        Self::lending_to(options)
    }
}

impl<H: DataHandler + Send + 'static> MioLoop<H> {
    /// A loop with no streams yet whose lending streams all have handlers of type `H`
    /// (`MioLoop::<MyHandler>::lending_to(options)`): each data message's `on_data` is then
    /// called directly (and can be inlined), not through a vtable — about 10 instructions
    /// less per message. Streams delivering by [`Delivery::Handler`] or
    /// [`Delivery::Channel`] can still be added.
    pub fn lending_to(options: MioOptions) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        let (inner, doorbell) = EventLoop::new(options, rx, tx.clone())?;
        Ok(Self {
            handle: LoopHandle {
                commands: tx,
                doorbell,
                thread: None,
                loop_id: inner.id(),
            },
            inner,
            events: Events::with_capacity(1024),
            running: true,
        })
    }

    /// Controls this loop from other threads (every command wakes a waiting `turn`).
    /// Blocking calls on it (`connect`, `subscribe`, …) must not be made from the thread that
    /// turns the loop: use the methods of `MioLoop` there. From inside a turn (a handler)
    /// they are refused ([`LoopError::OnLoopThread`]); between turns they would wait for
    /// the next one.
    pub fn handle(&self) -> LoopHandle<H> {
        self.handle.clone()
    }

    /// Where the application registers its own sources, with tokens from [`user_token`].
    pub fn registry(&self) -> &mio::Registry {
        self.inner.registry()
    }

    /// One iteration: waits at most `max_wait` (`None`: until something happens) for
    /// readiness, a command or a stream's deadline, then services the streams. Events of the
    /// application's sources are passed to `on_user_event`. Returns false after a shutdown
    /// command (from [`LoopHandle::shutdown`]).
    pub fn turn(
        &mut self,
        max_wait: Option<Duration>,
        mut on_user_event: impl FnMut(&Event),
    ) -> std::io::Result<bool> {
        if self.running {
            let _inside = self.inner.id().enter();
            self.running = self
                .inner
                .turn(&mut self.events, max_wait, &mut on_user_event)?;
        }
        Ok(self.running)
    }

    fn call<T>(&mut self, make: impl FnOnce(Reply<T>) -> Command<H>) -> Result<T, LoopError> {
        let (tx, rx): (Reply<T>, Receiver<Result<T, LoopError>>) = mpsc::channel();
        let _inside = self.inner.id().enter();
        self.inner.command(make(tx));
        // Outputs (a subscription frame, a connect) go out now, not at the next turn.
        self.inner.service_ready();
        rx.try_recv().map_err(|_| LoopError::LoopGone)?
    }

    /// Adds a stream; returns its id and a statistics reader.
    pub fn connect(
        &mut self,
        config: StreamConfig,
        delivery: Delivery<H>,
    ) -> Result<(StreamId, StatsHandle), LoopError> {
        self.call(|r| Command::Connect(Box::new(config), delivery, r))
    }

    /// Graceful stop: the Close frame is written within this call. What is still delivered
    /// after it: [`Stream::stop`](feedwire_core::Stream::stop).
    pub fn stop(&mut self, id: StreamId) {
        let _inside = self.inner.id().enter();
        self.inner.command(Command::Stop(id));
        self.inner.service_ready();
    }

    /// Immediate end, within this call.
    pub fn crash(&mut self, id: StreamId, reason: &str) {
        let _inside = self.inner.id().enter();
        self.inner.command(Command::Crash(id, reason.to_owned()));
        self.inner.service_ready();
    }

    /// Subscribes Binance streams.
    pub fn subscribe(&mut self, id: StreamId, streams: &[&str]) -> Result<(), LoopError> {
        let streams = streams.iter().map(|s| (*s).to_owned()).collect();
        self.call(|r| Command::Subscribe(id, streams, r))
    }

    /// Unsubscribes Binance streams; one not subscribed is an error and nothing is sent.
    pub fn unsubscribe(&mut self, id: StreamId, streams: &[&str]) -> Result<(), LoopError> {
        let streams = streams.iter().map(|s| (*s).to_owned()).collect();
        self.call(|r| Command::Unsubscribe(id, streams, r))
    }

    /// Asks a Binance stream endpoint for the connection's streams; the answer reaches the
    /// stream's handler as a [`StreamEvent::Response`](feedwire_core::StreamEvent::Response).
    pub fn list_subscriptions(&mut self, id: StreamId) -> Result<(), LoopError> {
        self.call(|r| Command::ListSubscriptions(id, r))
    }

    /// The Binance streams stream `id` subscribes on every connection (those its URL names
    /// among them, less those unsubscribed), as it has them now: what a second stream
    /// subscribes to take over from this one (make-before-break, at
    /// [`StreamEvent::ReconnectDue`](feedwire_core::StreamEvent::ReconnectDue)). A
    /// subscription the server refused is not among them.
    pub fn subscriptions(&mut self, id: StreamId) -> Result<Vec<String>, LoopError> {
        self.call(|r| Command::Subscriptions(id, r))
    }

    /// Sets the Betfair market subscription.
    pub fn subscribe_markets(
        &mut self,
        id: StreamId,
        sub: BetfairSubscription,
    ) -> Result<(), LoopError> {
        self.call(|r| Command::SubscribeMarkets(id, sub, r))
    }

    /// Sets the Betfair order subscription.
    pub fn subscribe_orders(
        &mut self,
        id: StreamId,
        sub: BetfairSubscription,
    ) -> Result<(), LoopError> {
        self.call(|r| Command::SubscribeOrders(id, sub, r))
    }

    /// Replaces a Betfair stream's credentials for the logins to come (a renewed session
    /// token): see [`Stream::set_betfair_auth`](feedwire_core::Stream::set_betfair_auth).
    pub fn set_betfair_auth(&mut self, id: StreamId, auth: BetfairAuth) -> Result<(), LoopError> {
        self.call(|r| Command::SetBetfairAuth(id, auth, r))
    }

    /// Sends a text message or line.
    pub fn send_text(&mut self, id: StreamId, text: &str) -> Result<(), LoopError> {
        let text = text.to_owned();
        self.call(|r| Command::SendText(id, text, r))
    }

    /// Sends a binary message.
    pub fn send_binary(&mut self, id: StreamId, data: &[u8]) -> Result<(), LoopError> {
        let data = data.to_vec();
        self.call(|r| Command::SendBinary(id, data, r))
    }
}
