//! [`Stream`]: one market-data stream through its whole life — connect, handshake,
//! subscribe, deliver, detect stalls, reconnect and resubscribe, stop or crash.

use std::collections::{BTreeSet, VecDeque};
use std::ops::Range;
use std::time::Instant;

use bytes::Bytes;

use super::backoff::reconnect_delay;
use super::clocks::Clocks;
use super::config::{Profile, StreamConfig};
use super::connection::{ConnEvent, Connection};
use super::event::{
    DataHandler, DataRef, EndReason, RequestKind, StreamEvent, StreamState, TransportCommand,
};
use super::profile::{self, BetfairSubscription, Template};
use super::stats::{Stats, StatsHandle};
use super::timers::{Timer, TimerTable};
use crate::endpoint::Endpoint;
use crate::error::{ConfigError, StreamError};
use crate::offer::{Lent, Owned, TakeNothing};
use crate::rng::{MaskRng, Seed};
use crate::route::{Classifier, HeadShapes, RequestId, Routed, Router, Verdict};
use crate::tls::TlsSession;
use crate::ws::CloseInitiator;

/// Streams per SUBSCRIBE message when (re)subscribing many at once.
const STREAMS_PER_REQUEST: usize = 200;

/// Smallest rest of a frame (bytes) that [`Stream::read_low_water`] asks the kernel to wait
/// for: below it, setting the option (two or three system calls per frame) would cost about
/// what the wake-ups it saves do.
pub const LOW_WATER_MIN: usize = 64 * 1024;

/// The two Betfair feeds, as indexes into the per-feed arrays.
#[derive(Debug, Clone, Copy)]
enum Feed {
    Markets = 0,
    Orders = 1,
}

/// A control message waiting for the pacing budget.
#[derive(Debug)]
struct Outgoing {
    kind: RequestKind,
    template: Template,
}

/// One market-data stream, sans-IO. It asks its transport to connect and disconnect
/// ([`poll_transport`](Self::poll_transport)), and otherwise follows the calling contract of
/// [`crate::WebSocketClient`]: after every `handle_*` or command, drain `poll_transport`,
/// `poll_transmit` and `poll_event`, then wait for input or until `poll_timeout`.
///
/// `stop()` and `crash()` act within the call: the transport learns of it from
/// `poll_transport`/`poll_transmit` right after, so an adapter that wakes its loop on a
/// command gets the Close frame out (or the socket dropped) at once, even on an idle stream.
/// Events already queued (complete messages received before the stop) are still delivered,
/// then the end event.
///
/// A blocking driver, to show the order of calls (a real adapter waits on readiness, a
/// command channel and `poll_timeout` at once):
///
/// ```no_run
/// use std::io::{Read, Write};
/// use std::net::TcpStream;
/// use std::time::Instant;
/// use feedwire_core::{os_seed, Stream, StreamConfig, StreamEvent, TransportCommand};
///
/// let config = StreamConfig::binance_stream("ws://127.0.0.1:9001/ws");
/// let mut stream = Stream::new(config, os_seed(), Instant::now())?;
/// stream.subscribe(&["btcusdt@aggTrade"], Instant::now())?;
/// let mut sock: Option<TcpStream> = None;
/// while !stream.state().is_terminal() {
///     while let Some(chunk) = stream.poll_transmit() {
///         sock.as_mut().expect("connected").write_all(&chunk)?;
///     }
///     while let Some(cmd) = stream.poll_transport() {
///         match cmd {
///             TransportCommand::Connect(ep) => match TcpStream::connect((ep.host.as_str(), ep.port)) {
///                 Ok(s) => {
///                     sock = Some(s);
///                     stream.handle_connected(Instant::now());
///                 }
///                 Err(e) => stream.handle_connect_failed(&e.to_string(), Instant::now()),
///             },
///             TransportCommand::Disconnect => sock = None,
///         }
///     }
///     while let Some(event) = stream.poll_event() {
///         if let StreamEvent::Data { payload, .. } = event {
///             println!("{} bytes", payload.len());
///         }
///     }
///     if let (Some(s), true) = (sock.as_mut(), stream.is_connected()) {
///         // A real adapter bounds this wait by `poll_timeout()` and calls `handle_timeout`.
///         match s.read(stream.read_buf()) {
///             Ok(0) => stream.handle_eof(Instant::now()),
///             Ok(n) => stream.handle_read(n, Instant::now()),
///             Err(e) => stream.handle_transport_error(&e.to_string(), Instant::now()),
///         }
///     } else if let Some(at) = stream.poll_timeout() {
///         std::thread::sleep(at.saturating_duration_since(Instant::now()));
///         stream.handle_timeout(Instant::now());
///     }
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Stream {
    config: StreamConfig,
    endpoint: Endpoint,
    state: StreamState,
    conn: Option<Connection>,
    /// An ended connection whose last queued bytes are still to be handed out.
    draining: Option<Connection>,
    router: Router<RequestKind>,
    rng: MaskRng,
    timers: TimerTable,
    events: VecDeque<StreamEvent>,
    transport: VecDeque<TransportCommand>,
    /// Consecutive attempts that did not stay healthy.
    attempt: u32,
    opened_at: Option<Instant>,
    ever_opened: bool,
    /// The current session followed an earlier open one.
    session_is_reconnect: bool,
    /// A probe is out and unanswered.
    probing: bool,
    /// Data arrived on the current connection.
    got_data: bool,
    /// Why the current connection is being closed on purpose (planned reconnect).
    planned: Option<EndReason>,
    stop_requested: bool,
    /// Binance streams the application wants.
    streams: BTreeSet<String>,
    /// Betfair market and order subscriptions, indexed by [`Feed`].
    betfair_subs: [Option<BetfairSubscription>; 2],
    /// Their stream positions, indexed by [`Feed`].
    clocks: [Clocks; 2],
    /// Shapes of recent data heads, so the fast path's head walk skips what they share.
    head_shapes: HeadShapes,
    outbox: VecDeque<Outgoing>,
    /// Send times of the last `control_rate` paced messages.
    paced: VecDeque<Instant>,
    stats: Stats,
}

impl Stream {
    /// A stream to `config.url`; the first [`TransportCommand::Connect`] is queued.
    pub fn new(config: StreamConfig, seed: Seed, now: Instant) -> Result<Self, ConfigError> {
        let endpoint = Endpoint::parse(&config.url)?;
        config.ws.validate()?;
        if let Profile::Betfair(auth) = &config.profile {
            if !profile::is_plain_json_string(&auth.app_key)
                || !profile::is_plain_json_string(&auth.session)
            {
                return Err(ConfigError::InvalidCredential);
            }
        }
        let mut rng = MaskRng::from_seed(seed);
        let mut router_seed = [0u8; 32];
        rng.fill(&mut router_seed);
        let mut s = Self {
            router: Router::new(config.router.clone(), router_seed),
            config,
            endpoint,
            state: StreamState::Connecting { attempt: 1 },
            conn: None,
            draining: None,
            rng,
            timers: TimerTable::default(),
            events: VecDeque::new(),
            transport: VecDeque::new(),
            attempt: 1,
            opened_at: None,
            ever_opened: false,
            session_is_reconnect: false,
            probing: false,
            got_data: false,
            planned: None,
            stop_requested: false,
            streams: BTreeSet::new(),
            betfair_subs: [None, None],
            clocks: [Clocks::default(), Clocks::default()],
            head_shapes: HeadShapes::default(),
            outbox: VecDeque::new(),
            paced: VecDeque::new(),
            stats: Stats::new(now),
        };
        s.start_connecting(now);
        s.publish(now);
        Ok(s)
    }

    // ----- getters -----

    /// The current state.
    pub fn state(&self) -> &StreamState {
        &self.state
    }

    /// Where it connects.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The Binance streams currently wanted (sent, or to be sent on the next connection).
    pub fn subscriptions(&self) -> impl Iterator<Item = &str> {
        self.streams.iter().map(String::as_str)
    }

    /// A `Send + Sync` handle reading consistent statistics from any thread.
    pub fn stats_handle(&self) -> StatsHandle {
        self.stats.handle()
    }

    /// Whether there is a live connection to read from.
    pub fn is_connected(&self) -> bool {
        self.conn.is_some()
    }

    /// The fewest bytes worth waking up to read (≥ 1): while a frame of at least
    /// [`LOW_WATER_MIN`] bytes is partly received, the bytes still missing from it — no
    /// message can complete with fewer, so reading them piecemeal only costs wake-ups (a
    /// 454 KB frame over loopback arrives in five or more pieces); 1 otherwise, and while
    /// the idle probe is out, so that bytes trickling in still count as life. Event loops
    /// with non-blocking reads set it as the socket's `SO_RCVLOWAT` after each wake-up's
    /// reads (an end of stream or an error still wakes them; both adapters do, through
    /// `feedwire-sockopt`); a blocking read must not (Linux may then wake it only at its
    /// timeout). In the socket's bytes, TLS or not: [`socket_low_water`](Self::socket_low_water).
    pub fn read_low_water(&self) -> usize {
        let missing = match &self.conn {
            Some(conn) if !self.probing && matches!(self.state, StreamState::Open) => {
                conn.missing_frame_bytes()
            }
            _ => 0,
        };
        if missing >= LOW_WATER_MIN {
            missing
        } else {
            1
        }
    }

    /// [`read_low_water`](Self::read_low_water) in the socket's bytes: through `tls`
    /// ([`TlsSession::read_low_water`]) when the
    /// connection has it. What an event loop sets as `SO_RCVLOWAT`.
    pub fn socket_low_water(&self, tls: Option<&TlsSession>) -> usize {
        let wanted = self.read_low_water();
        match tls {
            Some(tls) => tls.read_low_water(wanted),
            None => wanted,
        }
    }

    // ----- input -----

    /// Space for the next read from the connection; empty when there is none (the stream
    /// ended the connection in this very call and a `Disconnect` is waiting in
    /// [`poll_transport`](Self::poll_transport)): check [`is_connected`](Self::is_connected)
    /// before reading.
    pub fn read_buf(&mut self) -> &mut [u8] {
        match self.conn.as_mut() {
            Some(conn) => conn.read_buf(),
            None => &mut [],
        }
    }

    /// The transport connected (TCP, and TLS for `wss`/`tls`).
    pub fn handle_connected(&mut self, now: Instant) {
        if !matches!(self.state, StreamState::Connecting { .. }) {
            return;
        }
        tracing::debug!(host = %self.endpoint.host, port = self.endpoint.port, "stream transport connected");
        if self.endpoint.scheme.is_websocket() {
            let mut ws = self.config.ws.clone();
            ws.close_timeout = self.config.timeouts.close;
            let mut seed = [0u8; 32];
            self.rng.fill(&mut seed);
            match Connection::websocket(&self.config.url, ws, seed) {
                Ok(c) => self.conn = Some(c),
                Err(e) => return self.end_connection(EndReason::ConnectFailed(e.to_string()), now),
            }
        } else {
            self.conn = Some(Connection::lines(
                self.config.delimiter,
                self.config.ws.max_read_size,
                self.config.max_line,
            ));
        }
        self.state = StreamState::Handshaking;
        if !self.endpoint.scheme.is_websocket()
            && !matches!(self.config.profile, Profile::Betfair(_))
        {
            self.on_open(now);
        }
        self.publish(now);
    }

    /// The transport could not connect.
    pub fn handle_connect_failed(&mut self, reason: &str, now: Instant) {
        if matches!(self.state, StreamState::Connecting { .. }) {
            self.end_connection(EndReason::ConnectFailed(reason.to_owned()), now);
            self.publish(now);
        }
    }

    /// TLS failed, during the handshake or after.
    pub fn handle_tls_error(&mut self, error: &crate::tls::TlsError, now: Instant) {
        if self.conn.is_some() || matches!(self.state, StreamState::Connecting { .. }) {
            self.end_connection(EndReason::Tls(error.into()), now);
            self.publish(now);
        }
    }

    /// The transport failed after connecting.
    pub fn handle_transport_error(&mut self, reason: &str, now: Instant) {
        if self.conn.is_some() {
            self.end_connection(EndReason::Transport(reason.to_owned()), now);
            self.publish(now);
        }
    }

    /// The transport wrote `n` bytes into [`read_buf`](Self::read_buf).
    pub fn handle_read(&mut self, n: usize, now: Instant) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        // The fast path: a data message on a stream that already had data goes straight to
        // the event queue (no engine event, no routing enum). The first data message (its
        // timer), responses, shutdown notices and whatever follows them in this read take
        // the general path in `drain_connection`, in order.
        if self.got_data {
            let classifier = self.router.classifier();
            let (events, stats, clocks, shapes) = (
                &mut self.events,
                &mut self.stats,
                &mut self.clocks,
                &mut self.head_shapes,
            );
            conn.handle_read_offering(
                n,
                &mut Owned(|payload: Bytes, binary| {
                    match plain_data(classifier, shapes, clocks, &payload, binary) {
                        Some(heartbeat) => {
                            stats.received(payload.len());
                            events.push_back(StreamEvent::Data { payload, heartbeat });
                            None
                        }
                        None => Some(payload),
                    }
                }),
            );
        } else {
            conn.handle_read_offering(n, &mut TakeNothing);
        }
        self.after_read(now);
    }

    /// [`handle_read`](Self::handle_read) that lends data messages to `on_data` instead of
    /// queueing them: each payload is borrowed from the read buffer during the call (no
    /// slice, no reference count, no event), in arrival order. Everything else — and any
    /// data message that arrives behind an event not yet polled — is queued as usual, so
    /// calling `on_data` for what this lends and then draining
    /// [`poll_event`](Self::poll_event) sees every message in arrival order. Lending starts
    /// only with an empty event queue; the first data message of each connection is queued
    /// (it stops the first-data timer on the general path).
    pub fn handle_read_with(
        &mut self,
        n: usize,
        now: Instant,
        mut on_data: impl FnMut(DataRef<'_>),
    ) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        if !(self.got_data && self.events.is_empty()) {
            return self.handle_read(n, now);
        }
        let classifier = self.router.classifier();
        let (stats, clocks, shapes) = (&mut self.stats, &mut self.clocks, &mut self.head_shapes);
        conn.handle_read_offering(
            n,
            &mut Lent(
                #[inline(always)]
                |payload: &[u8], binary| match plain_data(
                    classifier, shapes, clocks, payload, binary,
                ) {
                    Some(heartbeat) => {
                        stats.received(payload.len());
                        on_data(DataRef { payload, heartbeat });
                        true
                    }
                    None => false,
                },
            ),
        );
        self.after_read(now);
    }

    /// [`handle_read_with`](Self::handle_read_with) lending to `handler`, or
    /// [`handle_read`](Self::handle_read) without one: for an adapter whose delivery may or
    /// may not lend (and must not lend while events wait for its handler).
    pub fn handle_read_lending(
        &mut self,
        n: usize,
        now: Instant,
        handler: Option<&mut (dyn DataHandler + '_)>,
    ) {
        match handler {
            Some(h) => self.handle_read_with(n, now, |d| h.on_data(d)),
            None => self.handle_read(n, now),
        }
    }

    /// What every read does after the engine took the bytes: timers, then the events.
    fn after_read(&mut self, now: Instant) {
        self.stats.current.last_receive = Some(now);
        self.probing = false;
        if let Some(idle) = self.config.timeouts.idle {
            if matches!(self.state, StreamState::Open) {
                self.timers.set(Timer::Idle, now + idle);
            }
        }
        self.drain_connection(now);
        self.publish(now);
    }

    /// The transport reached end of stream.
    pub fn handle_eof(&mut self, now: Instant) {
        if let Some(conn) = self.conn.as_mut() {
            conn.handle_eof();
            self.drain_connection(now);
            if self.conn.is_some() {
                // The engine ended without an event (already terminal): end here.
                self.end_connection(EndReason::Eof, now);
            }
            self.publish(now);
        }
    }

    /// Acts on every deadline that passed by `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let Some(conn) = self.conn.as_mut() {
            conn.handle_timeout(now);
            self.drain_connection(now);
        }
        self.router.handle_timeout(now);
        while let Some(t) = self.router.poll_timed_out() {
            self.events.push_back(StreamEvent::RequestTimedOut {
                id: t.id,
                kind: t.tag,
            });
        }
        let due: Vec<Timer> = self.timers.take_expired(now).collect();
        for timer in due {
            self.on_timer(timer, now);
        }
        self.publish(now);
    }

    // ----- commands -----

    /// Graceful stop: WebSocket Close (then wait for the peer up to the close timeout), or
    /// the end of a line session. Ends as `Closed { by: Local }`; no reconnect follows.
    pub fn stop(&mut self, now: Instant) {
        if self.state.is_terminal() || self.stop_requested {
            return;
        }
        self.stop_requested = true;
        tracing::info!(host = %self.endpoint.host, "stream stop requested");
        self.timers.clear();
        self.outbox.clear();
        let closing = matches!(self.state, StreamState::Open)
            && self.conn.as_mut().is_some_and(|c| c.close(now));
        if closing {
            self.state = StreamState::Closing;
        } else {
            self.finish(
                StreamState::Closed {
                    by: CloseInitiator::Local,
                },
                now,
            );
        }
        self.publish(now);
    }

    /// Immediate end: no close handshake, the transport drops the connection now. Ends as
    /// `Crashed(UserCrash(reason))`; no reconnect follows.
    pub fn crash(&mut self, reason: &str, now: Instant) {
        if self.state.is_terminal() {
            return;
        }
        tracing::warn!(host = %self.endpoint.host, reason, "stream crash requested");
        self.finish(
            StreamState::Crashed(EndReason::UserCrash(reason.to_owned())),
            now,
        );
        self.publish(now);
    }

    /// Subscribes to Binance streams (e.g. `btcusdt@aggTrade`). Sent now if open (paced),
    /// otherwise on the next connection.
    pub fn subscribe(&mut self, streams: &[&str], now: Instant) -> Result<(), StreamError> {
        self.check_profile(matches!(self.config.profile, Profile::BinanceStream))?;
        if let Some(bad) = streams.iter().find(|s| !profile::is_plain_json_string(s)) {
            return Err(StreamError::InvalidStreamName((*bad).to_owned()));
        }
        let new: Vec<String> = streams
            .iter()
            .filter(|s| !self.streams.contains(**s))
            .map(|s| (*s).to_owned())
            .collect();
        if self.streams.len() + new.len() > self.config.max_streams {
            return Err(StreamError::TooManyStreams {
                max: self.config.max_streams,
            });
        }
        if new.is_empty() {
            return Ok(());
        }
        self.streams.extend(new.iter().cloned());
        self.stats.current.subscriptions = self.streams.len() as u64;
        if matches!(self.state, StreamState::Open) {
            self.arm_first_data(now);
            for chunk in new.chunks(STREAMS_PER_REQUEST) {
                let template = profile::binance_method("SUBSCRIBE", chunk);
                self.queue_control(RequestKind::Subscribe(chunk.to_vec()), template, now);
            }
        }
        self.publish(now);
        Ok(())
    }

    /// Unsubscribes Binance streams; a stream not subscribed is an error and nothing is sent.
    pub fn unsubscribe(&mut self, streams: &[&str], now: Instant) -> Result<(), StreamError> {
        self.check_profile(matches!(self.config.profile, Profile::BinanceStream))?;
        if let Some(missing) = streams.iter().find(|s| !self.streams.contains(**s)) {
            return Err(StreamError::NotSubscribed((*missing).to_owned()));
        }
        let gone: Vec<String> = streams.iter().map(|s| (*s).to_owned()).collect();
        for s in &gone {
            self.streams.remove(s);
        }
        self.stats.current.subscriptions = self.streams.len() as u64;
        if matches!(self.state, StreamState::Open) {
            for chunk in gone.chunks(STREAMS_PER_REQUEST) {
                let template = profile::binance_method("UNSUBSCRIBE", chunk);
                self.queue_control(RequestKind::Unsubscribe(chunk.to_vec()), template, now);
            }
        }
        self.publish(now);
        Ok(())
    }

    /// Asks a Binance stream endpoint for its subscriptions; the answer arrives as
    /// [`StreamEvent::Response`].
    pub fn list_subscriptions(&mut self, now: Instant) -> Result<(), StreamError> {
        self.check_profile(matches!(self.config.profile, Profile::BinanceStream))?;
        self.check_open()?;
        self.queue_control(
            RequestKind::ListSubscriptions,
            profile::binance_method("LIST_SUBSCRIPTIONS", &[]),
            now,
        );
        Ok(())
    }

    /// Sends a Binance WebSocket API request; `params_json` is a JSON value (or none). The
    /// answer arrives as [`StreamEvent::Response`] with the returned id.
    pub fn request(
        &mut self,
        method: &str,
        params_json: Option<&str>,
        now: Instant,
    ) -> Result<RequestId, StreamError> {
        self.check_profile(matches!(self.config.profile, Profile::BinanceWsApi))?;
        self.check_open()?;
        if !profile::is_plain_json_string(method) {
            return Err(StreamError::InvalidStreamName(method.to_owned()));
        }
        let template = profile::binance_api_request(method, params_json);
        self.send_request(RequestKind::Request(method.to_owned()), &template, now)
    }

    /// Sets the Betfair market subscription (replacing any previous one); sent now if
    /// authenticated, and again on every reconnect, resuming from the latest `clk`.
    pub fn subscribe_markets(
        &mut self,
        sub: BetfairSubscription,
        now: Instant,
    ) -> Result<(), StreamError> {
        self.set_betfair_subscription(Feed::Markets, sub, now)
    }

    /// Sets the Betfair order subscription; see [`subscribe_markets`](Self::subscribe_markets).
    pub fn subscribe_orders(
        &mut self,
        sub: BetfairSubscription,
        now: Instant,
    ) -> Result<(), StreamError> {
        self.set_betfair_subscription(Feed::Orders, sub, now)
    }

    /// Sends an application text message (or line) as is.
    pub fn send_text(&mut self, text: &str) -> Result<(), StreamError> {
        self.check_open()?;
        let conn = self.conn.as_mut().ok_or(StreamError::NotOpen)?;
        if !conn.send_text(text) {
            return Err(StreamError::NotOpen);
        }
        self.stats.sent(text.len());
        Ok(())
    }

    /// Sends an application binary message (WebSocket streams only).
    pub fn send_binary(&mut self, data: &[u8]) -> Result<(), StreamError> {
        self.check_open()?;
        let conn = self.conn.as_mut().ok_or(StreamError::NotOpen)?;
        match conn.send_binary(data) {
            None => Err(StreamError::NotSupported),
            Some(false) => Err(StreamError::NotOpen),
            Some(true) => {
                self.stats.sent(data.len());
                Ok(())
            }
        }
    }

    /// Frees the connection's read buffer if nothing partial is buffered (for transports
    /// holding many quiet streams).
    pub fn release_read_buffer(&mut self, now: Instant) -> bool {
        let released = self
            .conn
            .as_mut()
            .is_some_and(Connection::release_read_buffer);
        if released {
            self.publish(now);
        }
        released
    }

    // ----- output -----

    /// What the transport must do next.
    #[must_use]
    pub fn poll_transport(&mut self) -> Option<TransportCommand> {
        self.transport.pop_front()
    }

    /// The next chunk of bytes to write, in order.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Bytes> {
        if let Some(old) = self.draining.as_mut() {
            match old.poll_transmit() {
                Some(chunk) => return Some(chunk),
                None => self.draining = None,
            }
        }
        self.conn.as_mut()?.poll_transmit()
    }

    /// The next event.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<StreamEvent> {
        self.events.pop_front()
    }

    /// Moves every queued event, in order, to the back of `out`: the same events
    /// [`poll_event`](Self::poll_event) would return. When `out` is empty the queues are
    /// swapped (no event is copied), so a transport that hands events over in batches can
    /// pass a recycled empty queue and move a whole read's events at once.
    pub fn drain_events_into(&mut self, out: &mut VecDeque<StreamEvent>) {
        if out.is_empty() {
            std::mem::swap(&mut self.events, out);
        } else {
            out.append(&mut self.events);
        }
    }

    /// The earliest deadline at which [`handle_timeout`](Self::handle_timeout) must run.
    #[must_use]
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        let conn = self.conn.as_ref().and_then(Connection::poll_timeout);
        [self.timers.next(), self.router.poll_timeout(), conn]
            .into_iter()
            .flatten()
            .min()
    }

    // ----- internals -----

    fn check_profile(&self, ok: bool) -> Result<(), StreamError> {
        if self.state.is_terminal() {
            return Err(StreamError::Ended);
        }
        if ok {
            Ok(())
        } else {
            Err(StreamError::NotSupported)
        }
    }

    fn check_open(&self) -> Result<(), StreamError> {
        match self.state {
            StreamState::Open => Ok(()),
            _ if self.state.is_terminal() => Err(StreamError::Ended),
            _ => Err(StreamError::NotOpen),
        }
    }

    fn betfair_subscriptions(&self) -> usize {
        self.betfair_subs.iter().flatten().count()
    }

    fn state_code(&self) -> u8 {
        match self.state {
            StreamState::Connecting { .. } => 0,
            StreamState::Handshaking => 1,
            StreamState::Open => 2,
            StreamState::Closing => 3,
            StreamState::Reconnecting { .. } => 4,
            StreamState::Closed { .. } => 5,
            StreamState::Crashed(_) => 6,
        }
    }

    fn publish(&mut self, now: Instant) {
        let code = self.state_code();
        self.stats.current.read_buffer_bytes = self
            .conn
            .as_ref()
            .map_or(0, |c| c.read_buffer_capacity() as u64);
        self.stats.publish(now, code);
    }

    fn start_connecting(&mut self, now: Instant) {
        self.state = StreamState::Connecting {
            attempt: self.attempt,
        };
        tracing::info!(host = %self.endpoint.host, port = self.endpoint.port, attempt = self.attempt, "stream connecting");
        self.events.push_back(StreamEvent::Connecting {
            attempt: self.attempt,
        });
        self.transport
            .push_back(TransportCommand::Connect(self.endpoint.clone()));
        self.timers
            .set(Timer::Connect, now + self.config.timeouts.connect);
    }

    fn on_open(&mut self, now: Instant) {
        self.state = StreamState::Open;
        self.opened_at = Some(now);
        self.got_data = false;
        self.probing = false;
        let t = &self.config.timeouts;
        self.timers.stop(Timer::Connect);
        if let Some(idle) = t.idle {
            self.timers.set(Timer::Idle, now + idle);
        }
        if let Some(k) = t.keepalive {
            self.timers.set(Timer::Keepalive, now + k);
        }
        if let Some(l) = t.max_lifetime {
            self.timers.set(Timer::Lifetime, now + l);
        }
        let reconnected = self.ever_opened;
        self.ever_opened = true;
        self.session_is_reconnect = reconnected;
        tracing::info!(host = %self.endpoint.host, reconnected, "stream open");
        self.events.push_back(StreamEvent::Opened { reconnected });
        match self.config.profile.clone() {
            Profile::BinanceStream => {
                let streams: Vec<String> = self.streams.iter().cloned().collect();
                let mut count = 0;
                for chunk in streams.chunks(STREAMS_PER_REQUEST) {
                    let template = profile::binance_method("SUBSCRIBE", chunk);
                    self.queue_control(RequestKind::Subscribe(chunk.to_vec()), template, now);
                    count += 1;
                }
                if reconnected && count > 0 {
                    self.events.push_back(StreamEvent::Resubscribed { count });
                }
                if !self.streams.is_empty() || self.endpoint.resource.contains('@') {
                    self.arm_first_data(now);
                }
            }
            Profile::Betfair(auth) => {
                let template = profile::betfair_authentication(&auth);
                // Only a full pending-request table can refuse this; without a login the
                // stream is useless, so that ends it with the reason.
                if let Err(e) = self.send_request(RequestKind::Authentication, &template, now) {
                    self.finish(StreamState::Crashed(EndReason::RequestFailed(e)), now);
                }
            }
            Profile::BinanceWsApi => {}
        }
    }

    fn arm_first_data(&mut self, now: Instant) {
        if let (Some(fd), false) = (self.config.timeouts.first_data, self.got_data) {
            if self.timers.get(Timer::FirstData).is_none() {
                self.timers.set(Timer::FirstData, now + fd);
            }
        }
    }

    /// Queues a control message subject to pacing, or sends it now.
    fn queue_control(&mut self, kind: RequestKind, template: Template, now: Instant) {
        self.outbox.push_back(Outgoing { kind, template });
        self.flush_outbox(now);
    }

    fn flush_outbox(&mut self, now: Instant) {
        while !self.outbox.is_empty() {
            if let Some(rate) = self.config.control_rate {
                while self
                    .paced
                    .front()
                    .is_some_and(|t| now.saturating_duration_since(*t).as_secs_f64() >= 1.0)
                {
                    self.paced.pop_front();
                }
                if self.paced.len() >= rate.max(1) as usize {
                    let oldest = *self.paced.front().expect("non-empty: len >= rate >= 1");
                    self.timers
                        .set(Timer::Pace, oldest + std::time::Duration::from_secs(1));
                    return;
                }
                self.paced.push_back(now);
            }
            let out = self.outbox.pop_front().expect("checked non-empty");
            if let Err(e) = self.send_request(out.kind, &out.template, now) {
                tracing::warn!(error = %e, "control message dropped");
            }
        }
    }

    fn send_request(
        &mut self,
        kind: RequestKind,
        template: &Template,
        now: Instant,
    ) -> Result<RequestId, StreamError> {
        let conn = self.conn.as_mut().ok_or(StreamError::NotOpen)?;
        let (id, handle) = self
            .router
            .register(kind, now)
            .map_err(StreamError::Correlation)?;
        let text = template.render(&id);
        if !conn.send_text(&text) {
            self.router.cancel(handle);
            return Err(StreamError::NotOpen);
        }
        self.stats.sent(text.len());
        Ok(id)
    }

    fn set_betfair_subscription(
        &mut self,
        feed: Feed,
        sub: BetfairSubscription,
        now: Instant,
    ) -> Result<(), StreamError> {
        self.check_profile(matches!(self.config.profile, Profile::Betfair(_)))?;
        self.clocks[feed as usize] = Clocks::default();
        self.betfair_subs[feed as usize] = Some(sub);
        self.stats.current.subscriptions = self.betfair_subscriptions() as u64;
        if matches!(self.state, StreamState::Open) {
            self.arm_first_data(now);
            self.send_betfair_subscription(feed, now)?;
        }
        Ok(())
    }

    fn send_betfair_subscription(&mut self, feed: Feed, now: Instant) -> Result<(), StreamError> {
        if let Some(sub) = &self.betfair_subs[feed as usize] {
            let (op, filter, kind) = match feed {
                Feed::Markets => (
                    "marketSubscription",
                    "marketFilter",
                    RequestKind::MarketSubscription,
                ),
                Feed::Orders => (
                    "orderSubscription",
                    "orderFilter",
                    RequestKind::OrderSubscription,
                ),
            };
            let t = profile::betfair_subscription(op, filter, sub, &self.clocks[feed as usize]);
            self.send_request(kind, &t, now)?;
        }
        Ok(())
    }

    fn drain_connection(&mut self, now: Instant) {
        while let Some(event) = self.conn.as_mut().and_then(Connection::next_event) {
            match event {
                ConnEvent::Opened => self.on_open(now),
                ConnEvent::Message { payload, binary } => self.on_message(payload, binary, now),
                ConnEvent::Closed { by, code, reason } => self.on_closed(by, code, reason, now),
                ConnEvent::Ended(reason) => self.end_connection(reason, now),
            }
            if self.state.is_terminal() {
                return;
            }
        }
    }

    fn on_message(&mut self, payload: Bytes, binary: bool, now: Instant) {
        self.stats.received(payload.len());
        let routed = if binary {
            self.router.route_binary(payload)
        } else {
            self.router.route(payload)
        };
        match routed {
            Routed::Data {
                payload,
                heartbeat,
                shutdown,
                extracted,
            } => {
                if !self.got_data {
                    self.got_data = true;
                    self.timers.stop(Timer::FirstData);
                }
                update_clocks(
                    &mut self.clocks,
                    extracted
                        .each_ref()
                        .map(|v| v.as_deref().map(|b| (b, 0..b.len()))),
                );
                self.events
                    .push_back(StreamEvent::Data { payload, heartbeat });
                if shutdown {
                    self.planned_reconnect(EndReason::ServerShutdown, now);
                }
            }
            Routed::Answer {
                payload,
                id,
                tag,
                is_error,
                ..
            } => {
                self.stats.current.responses += 1;
                self.on_answer(id, tag, payload, is_error, now);
            }
            Routed::Unsolicited {
                payload,
                id,
                is_error,
            } => {
                self.stats.current.responses += 1;
                let betfair_greeting = matches!(self.config.profile, Profile::Betfair(_))
                    && matches!(self.state, StreamState::Handshaking)
                    && id.is_none();
                if betfair_greeting {
                    self.on_open(now);
                } else {
                    self.events.push_back(StreamEvent::UnsolicitedResponse {
                        id,
                        payload,
                        is_error,
                    });
                }
            }
        }
    }

    fn on_answer(
        &mut self,
        id: RequestId,
        kind: RequestKind,
        payload: Bytes,
        is_error: bool,
        now: Instant,
    ) {
        let subscription = matches!(
            kind,
            RequestKind::Subscribe(_)
                | RequestKind::Unsubscribe(_)
                | RequestKind::MarketSubscription
                | RequestKind::OrderSubscription
        );
        let fatal = is_error
            && ((subscription && self.config.crash_on_error_response)
                || kind == RequestKind::Authentication);
        if fatal {
            return self.finish(StreamState::Crashed(EndReason::FatalResponse(payload)), now);
        }
        if let (RequestKind::Subscribe(refused), true) = (&kind, is_error) {
            // A refused subscription is not active: do not resubscribe it after a reconnect.
            for s in refused {
                self.streams.remove(s);
            }
            self.stats.current.subscriptions = self.streams.len() as u64;
        }
        let event = match (kind, is_error) {
            (RequestKind::Authentication, false) => {
                self.events.push_back(StreamEvent::Authenticated);
                let before = self.stats.current.messages_sent;
                let _ = self.send_betfair_subscription(Feed::Markets, now);
                let _ = self.send_betfair_subscription(Feed::Orders, now);
                let count = (self.stats.current.messages_sent - before) as usize;
                if self.session_is_reconnect && count > 0 {
                    self.events.push_back(StreamEvent::Resubscribed { count });
                }
                if count > 0 {
                    self.arm_first_data(now);
                }
                return;
            }
            (RequestKind::Heartbeat, _) => return,
            (RequestKind::Subscribe(streams), false) => StreamEvent::Subscribed { streams, id },
            (RequestKind::Unsubscribe(streams), false) => StreamEvent::Unsubscribed { streams, id },
            (RequestKind::MarketSubscription, false) => StreamEvent::Subscribed {
                streams: vec!["marketSubscription".to_owned()],
                id,
            },
            (RequestKind::OrderSubscription, false) => StreamEvent::Subscribed {
                streams: vec!["orderSubscription".to_owned()],
                id,
            },
            (kind, is_error) => StreamEvent::Response {
                id,
                kind,
                payload,
                is_error,
            },
        };
        self.events.push_back(event);
    }

    fn on_closed(&mut self, by: CloseInitiator, code: u16, reason: Bytes, now: Instant) {
        match by {
            CloseInitiator::Remote => {
                self.end_connection(EndReason::ClosedByPeer { code, reason }, now)
            }
            CloseInitiator::Local => {
                let reason = self
                    .planned
                    .clone()
                    .unwrap_or(EndReason::ClosedByPeer { code, reason });
                self.end_connection(reason, now);
            }
        }
    }

    fn on_timer(&mut self, timer: Timer, now: Instant) {
        if self.state.is_terminal() {
            return;
        }
        match timer {
            Timer::Connect => {
                if matches!(
                    self.state,
                    StreamState::Connecting { .. } | StreamState::Handshaking
                ) {
                    self.end_connection(EndReason::ConnectTimeout, now);
                }
            }
            Timer::FirstData => {
                if !self.got_data && matches!(self.state, StreamState::Open) {
                    self.end_connection(EndReason::FirstDataTimeout, now);
                }
            }
            Timer::Idle => {
                if !matches!(self.state, StreamState::Open) {
                    return;
                }
                if self.probing {
                    return self.end_connection(EndReason::IdleTimeout, now);
                }
                self.probe(now);
                self.probing = true;
                if let Some(idle) = self.config.timeouts.idle {
                    self.timers.set(Timer::Idle, now + idle);
                }
            }
            Timer::Keepalive => {
                if matches!(self.state, StreamState::Open) {
                    self.probe(now);
                    if let Some(k) = self.config.timeouts.keepalive {
                        self.timers.set(Timer::Keepalive, now + k);
                    }
                }
            }
            Timer::Reconnect => {
                if matches!(self.state, StreamState::Reconnecting { .. }) {
                    self.start_connecting(now);
                }
            }
            Timer::Pace => self.flush_outbox(now),
            Timer::Lifetime => self.planned_reconnect(EndReason::LifetimeReached, now),
        }
    }

    fn probe(&mut self, now: Instant) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        if !conn.ping() && matches!(self.config.profile, Profile::Betfair(_)) {
            let _ = self.send_request(RequestKind::Heartbeat, &profile::betfair_heartbeat(), now);
        }
    }

    /// Ends the current connection on purpose and connects again at once.
    fn planned_reconnect(&mut self, reason: EndReason, now: Instant) {
        if !matches!(self.state, StreamState::Open) || self.planned.is_some() {
            return;
        }
        tracing::info!(host = %self.endpoint.host, %reason, "planned reconnect");
        self.planned = Some(reason.clone());
        if self.conn.as_mut().is_some_and(|c| c.close(now)) {
            self.state = StreamState::Closing;
            self.timers.clear();
        } else {
            self.end_connection(reason, now);
        }
    }

    /// The current connection is over: reconnect, or end the stream.
    fn end_connection(&mut self, reason: EndReason, now: Instant) {
        if self.state.is_terminal() {
            return;
        }
        if self.stop_requested {
            return self.finish(
                StreamState::Closed {
                    by: CloseInitiator::Local,
                },
                now,
            );
        }
        let fatal = matches!(
            reason,
            EndReason::FatalResponse(_) | EndReason::UserCrash(_)
        );
        // A planned reconnect ends with its own reason, however the closing connection then
        // went (close handshake, reset, or a violation in the bytes after the notice): the
        // same bytes must give the same report however reads split them, and whether the
        // engine failed before or after the stream acted on the notice depends on that.
        let planned = self.planned.take();
        let was_planned = planned.is_some();
        let reason = match planned {
            Some(why) if !fatal => {
                tracing::debug!(host = %self.endpoint.host, ended = %reason, "planned reconnect: connection ended");
                why
            }
            _ => reason,
        };
        self.release_connection(true);
        self.timers.clear();
        self.outbox.clear();
        self.paced.clear();
        let healthy = self.opened_at.is_some_and(|t| {
            now.saturating_duration_since(t) >= self.config.reconnect.healthy_after
        });
        self.opened_at = None;
        if !self.config.reconnect.enabled || fatal {
            let end = match reason {
                EndReason::ClosedByPeer { code, .. } if !fatal => {
                    self.events.push_back(StreamEvent::Closed {
                        by: CloseInitiator::Remote,
                        code,
                    });
                    StreamState::Closed {
                        by: CloseInitiator::Remote,
                    }
                }
                other => StreamState::Crashed(other),
            };
            return self.finish(end, now);
        }
        // `attempt` numbers connection attempts: 1 for the first; a planned reconnect starts
        // the count afresh, a healthy connection makes the next retry a first retry.
        if was_planned {
            self.attempt = 0;
        } else if healthy {
            self.attempt = 1;
        }
        self.attempt += 1;
        let retry = self.attempt - 1;
        if let Some(max) = self.config.reconnect.max_attempts {
            if retry > max {
                let gave_up = EndReason::GaveUp {
                    attempts: max,
                    last: Box::new(reason),
                };
                return self.finish(StreamState::Crashed(gave_up), now);
            }
        }
        let delay = if was_planned {
            std::time::Duration::ZERO
        } else {
            let random = u32::from_ne_bytes(self.rng.mask_key());
            reconnect_delay(&self.config.reconnect, retry, random)
        };
        self.stats.current.reconnects += 1;
        tracing::info!(host = %self.endpoint.host, %reason, attempt = self.attempt, ?delay, "stream reconnecting");
        self.events.push_back(StreamEvent::Reconnecting {
            attempt: self.attempt,
            delay,
            reason,
            planned: was_planned,
        });
        let at = now + delay;
        self.state = StreamState::Reconnecting {
            attempt: self.attempt,
            at,
        };
        if was_planned {
            self.start_connecting(now);
        } else {
            self.timers.set(Timer::Reconnect, at);
        }
    }

    /// Detaches the current connection (if any) and tells the transport to drop it. With
    /// `flush`, bytes the engine still queued (a Close echo, a Close with an error code) are
    /// handed out by `poll_transmit` before the transport acts on the `Disconnect`.
    fn release_connection(&mut self, flush: bool) {
        let had = self.conn.take().map(|c| {
            if flush {
                self.draining = Some(c);
            }
        });
        if !flush {
            self.draining = None;
        }
        if had.is_some() || matches!(self.state, StreamState::Connecting { .. }) {
            self.transport.push_back(TransportCommand::Disconnect);
        }
    }

    /// Enters a terminal state: drops the connection and reports the end once.
    fn finish(&mut self, end: StreamState, _now: Instant) {
        // A crash drops the connection with whatever it still had to send; a close lets a
        // queued Close frame out first.
        self.release_connection(!matches!(end, StreamState::Crashed(_)));
        self.timers.clear();
        self.outbox.clear();
        match &end {
            StreamState::Closed { by } => {
                if !matches!(self.events.back(), Some(StreamEvent::Closed { .. })) {
                    self.events.push_back(StreamEvent::Closed {
                        by: *by,
                        code: 1000,
                    });
                }
                tracing::info!(host = %self.endpoint.host, ?by, "stream closed");
            }
            StreamState::Crashed(reason) => {
                tracing::warn!(host = %self.endpoint.host, %reason, "stream crashed");
                self.events.push_back(StreamEvent::Crashed(reason.clone()));
            }
            _ => unreachable!("finish is only called with a terminal state"),
        }
        self.state = end;
    }
}

/// The fast path's judgement of a message on a stream that already had data: `Some(heartbeat)`
/// for plain data (its Betfair clocks recorded), `None` for anything the general path must
/// route (a response, a shutdown notice).
#[inline(always)]
fn plain_data(
    classifier: &Classifier,
    shapes: &mut HeadShapes,
    clocks: &mut [Clocks; 2],
    payload: &[u8],
    binary: bool,
) -> Option<bool> {
    if binary {
        return Some(false);
    }
    if let Some(flags) = classifier.plain_by_first_key(payload) {
        return (!flags.shutdown).then_some(flags.heartbeat);
    }
    classifier.with_verdict_by_shape(payload, shapes, |verdict| match verdict {
        Verdict::Data {
            heartbeat,
            shutdown: false,
            extracted,
        } => {
            update_clocks(clocks, extracted.clone().map(|r| r.map(|r| (payload, r))));
            Some(*heartbeat)
        }
        _ => None,
    })
}

/// Records the stream positions a Betfair change message carries (`extracted` holds its `op`,
/// `initialClk` and `clk`, each as `source[range]`); nothing for other messages.
#[inline(always)]
fn update_clocks(clocks: &mut [Clocks; 2], extracted: [Option<(&[u8], Range<usize>)>; 3]) {
    let [Some((source, op)), initial, clk] = extracted else {
        return;
    };
    let feed = match &source[op] {
        b"mcm" => Feed::Markets,
        b"ocm" => Feed::Orders,
        _ => return,
    };
    clocks[feed as usize].update(initial, clk);
}
