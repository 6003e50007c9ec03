//! [`Stream`]: one market-data stream through its whole life — connect, handshake,
//! subscribe, deliver, detect stalls, reconnect and resubscribe, stop or crash.
//!
//! Here: the stream's state, its construction, what it reports and what it hands out. The
//! rest of its `impl` is split by who acts: the transport's inputs (`input`), the
//! application's commands (`commands`), the messages that arrive (`inbound`), and a
//! connection's life from connect to end (`lifecycle`).

use std::collections::{BTreeSet, VecDeque};
use std::time::Instant;

use bytes::Bytes;

use super::clocks::Clocks;
use super::config::{Profile, StreamConfig};
use super::connection::Connection;
use super::event::{EndReason, RequestKind, StreamEvent, StreamState, TransportCommand};
use super::profile::{self, BetfairSubscription, Template};
use super::stats::{Stats, StatsHandle};
use super::timers::TimerTable;
use crate::endpoint::Endpoint;
use crate::error::{ConfigError, StreamError};
use crate::rng::{MaskRng, Seed};
use crate::route::{HeadShapes, RouteRules, Router, RouterConfig};
use crate::tls::TlsSession;

mod commands;
mod inbound;
mod input;
mod lifecycle;
mod line_plan;
mod positions;

/// [`StatsSnapshot::state`](super::stats::StatsSnapshot::state) codes of the two ends.
const CLOSED_CODE: u8 = 5;
const CRASHED_CODE: u8 = 6;

/// Streams per SUBSCRIBE message when (re)subscribing many at once.
const STREAMS_PER_REQUEST: usize = 200;

/// Smallest rest of a frame (bytes) that [`Stream::read_low_water`] asks the kernel to wait
/// for: below it, setting the option (two or three system calls per frame) would cost about
/// what the wake-ups it saves do.
pub const LOW_WATER_MIN: usize = 64 * 1024;

/// What only a Betfair stream keeps (464 bytes): boxed, so that the other streams, often
/// held by the thousand, do not carry it.
#[derive(Debug, Default)]
struct BetfairFeeds {
    /// The market and order subscriptions, indexed by [`Feed`].
    subs: [Option<BetfairSubscription>; 2],
    /// Their stream positions, indexed by [`Feed`].
    clocks: [Clocks; 2],
}

/// The two Betfair feeds, as indexes into the per-feed arrays.
#[derive(Debug, Clone, Copy)]
enum Feed {
    Markets = 0,
    Orders = 1,
}

impl Feed {
    /// The feed whose change messages carry this `op` (`mcm`, `ocm`), if any.
    #[inline(always)]
    fn of_op(op: &[u8]) -> Option<Self> {
        match op {
            b"mcm" => Some(Self::Markets),
            b"ocm" => Some(Self::Orders),
            _ => None,
        }
    }

    /// The feed a subscription request of `kind` is for, if it is one.
    fn of_request(kind: &RequestKind) -> Option<Self> {
        match kind {
            RequestKind::MarketSubscription => Some(Self::Markets),
            RequestKind::OrderSubscription => Some(Self::Orders),
            _ => None,
        }
    }
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
    /// The configuration, but for `router.rules`, which is left empty: the rules live on
    /// compiled in `router`, and nothing reads them again (a kilobyte a stream).
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
    /// The connection attempt waits for its turn in the shared connect budget
    /// ([`Timer::Turn`]): the stream is `Connecting`, but no `Connect` has gone out.
    awaiting_turn: bool,
    /// A probe is out and unanswered.
    probing: bool,
    /// The transport holds its reads for the application ([`Stream::handle_reads_held`])
    /// and has not read since: request deadlines and a planned reconnect for age wait (an
    /// answer, or the messages before our Close's answer, may be in the socket).
    reads_held: bool,
    /// The last read on the current connection (or its opening): the idle timer measures
    /// silence from here.
    last_input: Instant,
    /// The connection gave its read memory back for quiet and the transport has not been
    /// told yet ([`Stream::poll_read_memory_released`]).
    read_memory_released: bool,
    /// Data arrived on the current connection, and no stop was asked for since: the reads'
    /// fast paths (queued or lent data) are open. Cleared by `stop()`, so that every message
    /// after it takes the general path, which drops it.
    got_data: bool,
    /// A connection ended for want of data since the subscriptions last changed and since
    /// data last came: the first-data timer is not armed again until one of those happens
    /// (see [`Timeouts::first_data`](crate::Timeouts::first_data)).
    first_data_spent: bool,
    /// Why the current connection is being closed on purpose (planned reconnect).
    planned: Option<EndReason>,
    /// Why the current connection is to be replaced, reported to the application
    /// ([`PlannedReconnect::Advise`](crate::PlannedReconnect::Advise)) and kept for it until
    /// the lifetime timer, which then holds the deadline, fires.
    advised: Option<EndReason>,
    stop_requested: bool,
    /// At `stop()` a message was partly received: it is the one message still delivered
    /// after the stop (the first to complete), then nothing.
    partial_at_stop: bool,
    /// Binance streams the application wants: those its URL names to begin with.
    streams: BTreeSet<String>,
    /// Binance streams the URL subscribes on every connection: on opening, those no longer
    /// in `streams` are unsubscribed and only the others in `streams` subscribed.
    url_streams: BTreeSet<String>,
    /// A Betfair stream's subscriptions and their positions; `Some` exactly when the profile
    /// is Betfair.
    betfair: Option<Box<BetfairFeeds>>,
    /// The current Betfair connection's login was answered with success: subscriptions set
    /// before it wait for it (its answer sends them).
    logged_in: bool,
    /// Shapes of recent data heads, so the fast path's head walk skips what they share.
    head_shapes: HeadShapes,
    outbox: VecDeque<Outgoing>,
    /// Send times of the last `control_rate` paced messages.
    paced: VecDeque<Instant>,
    stats: Stats,
}

impl Stream {
    /// A stream to `config.url`; the first [`TransportCommand::Connect`] is queued — or, when
    /// the stream's [`ConnectBudget`](crate::ConnectBudget) has no turn free, comes out of
    /// [`handle_timeout`](Self::handle_timeout) at its turn ([`poll_timeout`](Self::poll_timeout)
    /// says when).
    pub fn new(mut config: StreamConfig, seed: Seed, now: Instant) -> Result<Self, ConfigError> {
        let mut endpoint = Endpoint::parse(&config.url)?;
        endpoint.connect_to.clone_from(&config.connect_to);
        config.ws.validate()?;
        config.router.validate()?;
        if config.max_send_queue == 0 {
            return Err(ConfigError::ZeroLimit("max_send_queue"));
        }
        if let Profile::Betfair(auth) = &config.profile {
            if !profile::is_usable_auth(auth) {
                return Err(ConfigError::InvalidCredential);
            }
        }
        let url_streams: BTreeSet<String> = match config.profile {
            Profile::BinanceStream => profile::binance_url_streams(&endpoint.resource)
                .into_iter()
                .collect(),
            _ => BTreeSet::new(),
        };
        if url_streams.len() > config.max_streams {
            return Err(ConfigError::TooMany {
                name: "streams in the URL",
                max: config.max_streams,
            });
        }
        let mut rng = MaskRng::from_seed(seed);
        let mut router_seed = [0u8; 32];
        rng.fill(&mut router_seed);
        let router = RouterConfig {
            rules: std::mem::replace(&mut config.router.rules, no_rules()),
            ..config.router
        };
        let betfair = matches!(config.profile, Profile::Betfair(_)).then(Box::default);
        let mut s = Self {
            router: Router::new(router, router_seed),
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
            awaiting_turn: false,
            probing: false,
            reads_held: false,
            last_input: now,
            read_memory_released: false,
            got_data: false,
            first_data_spent: false,
            planned: None,
            advised: None,
            stop_requested: false,
            partial_at_stop: false,
            streams: url_streams.clone(),
            url_streams,
            betfair,
            logged_in: false,
            head_shapes: HeadShapes::default(),
            outbox: VecDeque::new(),
            paced: VecDeque::new(),
            stats: Stats::new(now),
        };
        s.stats.set_subscriptions(s.streams.len());
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

    /// Bytes of room the stream's queues hold, used or not: its events, its transport
    /// commands and its connection's events.
    pub(crate) fn queue_room(&self) -> usize {
        self.events.capacity() * std::mem::size_of::<StreamEvent>()
            + self.transport.capacity() * std::mem::size_of::<TransportCommand>()
            + self.conn.as_ref().map_or(0, Connection::event_room)
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

    /// Whether [`poll_event`](Self::poll_event) has an event to return: a transport can
    /// skip its hand-over after a read that only lent data (nearly every read).
    #[inline]
    #[must_use]
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
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
    /// It can come before anything is due: while reads arrive, the idle timer stays armed
    /// from an earlier moment and, when that comes, re-arms from the last read (moving it on
    /// every read would cost every read) — one such wake-up per idle timeout at most.
    #[must_use]
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        let conn = self.conn.as_ref().and_then(Connection::poll_timeout);
        // While reads are held, a request's deadline waits for them (see `handle_timeout`).
        let requests = if self.reads_held {
            None
        } else {
            self.router.poll_timeout()
        };
        [self.timers.next(), requests, conn]
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

    /// The positions of a Betfair stream's `feed`; `None` on other streams.
    fn clocks_of(&self, feed: Feed) -> Option<&Clocks> {
        self.betfair
            .as_deref()
            .map(|feeds| &feeds.clocks[feed as usize])
    }

    /// [`clocks_of`](Self::clocks_of), to change.
    fn clocks_mut(&mut self, feed: Feed) -> Option<&mut Clocks> {
        self.betfair
            .as_deref_mut()
            .map(|feeds| &mut feeds.clocks[feed as usize])
    }

    fn betfair_subscriptions(&self) -> usize {
        self.betfair
            .as_ref()
            .map_or(0, |feeds| feeds.subs.iter().flatten().count())
    }

    fn state_code(&self) -> u8 {
        match self.state {
            StreamState::Connecting { .. } => 0,
            StreamState::Handshaking => 1,
            StreamState::Open => 2,
            StreamState::Closing => 3,
            StreamState::Reconnecting { .. } => 4,
            StreamState::Closed { .. } => CLOSED_CODE,
            StreamState::Crashed(_) => CRASHED_CODE,
        }
    }

    fn publish(&mut self, now: Instant) {
        let code = self.state_code();
        let read_buffer_bytes = self
            .conn
            .as_ref()
            .map_or(0, |c| c.read_buffer_capacity() as u64);
        self.stats.publish(now, code, read_buffer_bytes);
    }
}

/// Rules that allocate nothing, for the stream's copy of its configuration once the router
/// holds the real ones compiled.
fn no_rules() -> RouteRules {
    RouteRules {
        scan_len: 0,
        response: Vec::new(),
        error: Vec::new(),
        heartbeat: Vec::new(),
        shutdown: Vec::new(),
        id_key: String::new(),
        extract_keys: Vec::new(),
        data_first_keys: Vec::new(),
        stop_at_composite: false,
    }
}

/// A stream dropped before it ended — its driver's future dropped (a `select!`), its runtime
/// shut down, a loop shut down while its Close waits for the answer, its owner unwinding
/// from a panic in a handler — says so in its statistics: closed, or crashed when dropped
/// while unwinding. Else they would read "open" (or "closing") for good, their rates falling
/// to zero as if the market had gone quiet.
impl Drop for Stream {
    fn drop(&mut self) {
        if self.state.is_terminal() {
            return;
        }
        let panicking = std::thread::panicking();
        let host = &self.endpoint.host;
        if self.stop_requested && !panicking {
            // Stopped, its Close not answered yet (a loop shutting down does not wait).
            tracing::debug!(%host, "stream dropped while closing");
        } else {
            tracing::warn!(%host, panicking, "stream dropped before it ended");
        }
        self.stats
            .publish_state(if panicking { CRASHED_CODE } else { CLOSED_CODE });
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::Stream;
    use crate::{BetfairAuth, StreamConfig};

    /// Binance streams come by the thousand: the Betfair feeds' subscriptions and positions
    /// are not part of theirs, inline or boxed.
    #[test]
    fn only_a_betfair_stream_holds_betfair_feeds() {
        let now = Instant::now();
        let binance = StreamConfig::binance_stream("wss://127.0.0.1:9443/ws/btcusdt@aggTrade");
        let binance = Stream::new(binance, [7; 32], now).unwrap();
        assert!(binance.betfair.is_none());
        let auth = BetfairAuth {
            app_key: "appkey".into(),
            session: "token".into(),
        };
        let betfair = StreamConfig::betfair("tls://127.0.0.1:4443", auth);
        let betfair = Stream::new(betfair, [7; 32], now).unwrap();
        assert!(betfair.betfair.is_some());
    }
}
