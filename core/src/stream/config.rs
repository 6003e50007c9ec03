//! Stream policy: timers, reconnection, protocol profile. Every knob has a safe default;
//! presets per exchange.

use std::time::Duration;

use crate::config::WsConfig;
use crate::lines::Delimiter;
use crate::route::RouterConfig;
use crate::stream::connect_budget::ConnectBudget;

/// The Betfair preset's idle timeout: three of Betfair's default heartbeat intervals
/// (`heartbeatMs` 5,000 ms unless the subscription asks for another, 500 to 30,000).
/// A subscription with a longer one is probed when quiet this long: answered, so no
/// reconnect, one heartbeat op each time.
const BETFAIR_IDLE: Duration = Duration::from_secs(15);

/// Deadlines the stream enforces. `None` disables a timer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeouts {
    /// From asking the transport to connect until the stream is open (TCP, TLS, WebSocket
    /// handshake, and for Betfair the `connection` message). Default 10 s.
    pub connect: Duration,
    /// From open until the first data message: a stream that never delivers (bad
    /// subscription, a server that took it and sends nothing) reconnects — once. If the next
    /// connection, with the same subscriptions, is silent too, the stream stays open (a
    /// quiet market: an illiquid symbol's trades, liquidations), the idle probe checking that
    /// the connection lives: reconnecting on and on would miss what does come while down
    /// (a quiet Binance stream was down 28% of the time, 14 reconnects in 10 minutes) and
    /// spend the exchange's connection budget. Data, or a new subscription, arms it again.
    /// Default 30 s.
    pub first_data: Option<Duration>,
    /// No bytes for this long → probe (WebSocket ping, Betfair heartbeat), and the
    /// connection is dead if no byte comes within [`probe_answer`](Self::probe_answer) of
    /// it. Default 30 s; 15 s in the Betfair preset (a subscribed connection is never
    /// quiet for longer than its `heartbeatMs`, 5 s by default: three missed).
    pub idle: Option<Duration>,
    /// How long the connection may stay silent after an idle probe before it is dead (no
    /// byte at all: any, not only the answer, counts as life). An exchange answers a ping at
    /// once; waiting longer only serves stale silence — a connection a NAT or firewall
    /// dropped without a reset is found dead `idle + probe_answer` after its last byte.
    /// Default 10 s, a request's own timeout.
    pub probe_answer: Duration,
    /// Probe at this interval regardless of traffic. Default off.
    pub keepalive: Option<Duration>,
    /// Wait this long for the peer's Close after ours. Default 5 s.
    pub close: Duration,
    /// Reconnect (planned) once a connection is this old, less a random part of up to
    /// 1/144 of it, so that connections opened together do not all reconnect at once;
    /// Binance ends connections after 24 h. Default off; 23 h 50 min in the Binance
    /// presets (each connection then lasts 23 h 40 min to 23 h 50 min). How the connection
    /// is replaced: [`ReconnectPolicy::planned`].
    pub max_lifetime: Option<Duration>,
    /// Once no byte has been read for this long, the connection gives its read memory back:
    /// the engine's read block (up to twice `max_read_size`, 512 KiB by default, on a stream
    /// that was busy) and, through
    /// [`Stream::poll_read_memory_released`](crate::Stream::poll_read_memory_released), the
    /// transport's own (a TLS session's ciphertext buffer, up to 81 KiB). Only what holds no
    /// partial frame or record goes. The next reads start small again (the engine's at 1 KiB,
    /// a TLS session's at 4 KiB), growing while they fill what they are offered: a stream
    /// woken for one message allocates a little before reading it, not its whole buffer.
    /// A connection that keeps reading has its read size reviewed once this period instead:
    /// if no read in it took more than a quarter of the size, the size shrinks to fit the
    /// largest (and the block with it), so a burst's buffer is not kept by a trickle.
    /// Default 1 s; `None` keeps the memory and the read size for the connection's life.
    pub release_read_memory: Option<Duration>,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(10),
            first_data: Some(Duration::from_secs(30)),
            idle: Some(Duration::from_secs(30)),
            probe_answer: Duration::from_secs(10),
            keepalive: None,
            close: Duration::from_secs(5),
            max_lifetime: None,
            release_read_memory: Some(Duration::from_secs(1)),
        }
    }
}

/// Exponential backoff with jitter between connection attempts.
#[derive(Debug, Clone, PartialEq)]
pub struct ReconnectPolicy {
    /// Reconnect at all after a connection ends without a stop or crash. Default true.
    pub enabled: bool,
    /// Delay before the first retry. Default 250 ms.
    pub initial_delay: Duration,
    /// Delay cap. Default 30 s.
    pub max_delay: Duration,
    /// Fraction of each delay drawn at random and subtracted (0 = none, 1 = full jitter).
    /// Default 0.5.
    pub jitter: f64,
    /// A connection open this long resets the attempt counter. Default 60 s.
    pub healthy_after: Duration,
    /// Give up (crash) after this many consecutive retries without a healthy connection.
    /// Default unlimited.
    pub max_attempts: Option<u32>,
    /// What a failure that retrying will not mend does ([`EndReason::is_permanent`]: the
    /// upgrade refused with a 3xx or most 4xx, a server that does not speak WebSocket, a
    /// certificate that does not verify). Default [`PermanentFailure::EndIfNeverOpen`].
    ///
    /// [`EndReason::is_permanent`]: crate::EndReason::is_permanent
    pub permanent: PermanentFailure,
    /// What a planned reconnect does: close first, or leave the application time to
    /// connect anew before this connection goes. Default
    /// [`PlannedReconnect::CloseThenConnect`].
    pub planned: PlannedReconnect,
}

/// What the stream does when a connection is to be replaced on purpose: it reached
/// [`Timeouts::max_lifetime`], or the server announced its shutdown (Binance sends
/// `serverShutdown` 10 minutes before it ends the connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PlannedReconnect {
    /// Close the connection and connect again at once. What the server sends from our
    /// Close until the new connection's subscriptions take effect (the close handshake's
    /// round trip, the next connection's handshakes and the subscription's round trip) is
    /// missed.
    #[default]
    CloseThenConnect,
    /// Make-before-break, by the application: report
    /// [`StreamEvent::ReconnectDue`](crate::StreamEvent::ReconnectDue) and keep the
    /// connection, delivering as before, for up to `grace`. The application starts a second
    /// stream with the same subscriptions, takes both until the new one delivers what the
    /// old one does (matched by the messages' own ids: an aggTrade's `a`, a depth update's
    /// `u`), then stops this one. A connection still open when `grace` ends, or ended
    /// before then in any way but a stop or crash (the server's close, a reset, an error),
    /// is replaced as a planned reconnect is: at once, reported with the reason given in
    /// `ReconnectDue` and `planned: true`.
    Advise {
        /// How long the connection is kept after the report: less than the server leaves
        /// (Binance: 10 minutes after `serverShutdown`; the age of 24 h less the preset's
        /// 23 h 40 min to 23 h 50 min for `max_lifetime`).
        grace: Duration,
    },
}

/// What the stream does when a connection attempt fails in a way that retrying will not
/// mend ([`EndReason::is_permanent`](crate::EndReason::is_permanent)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PermanentFailure {
    /// End the stream ([`StreamEvent::Crashed`](crate::StreamEvent::Crashed) with the
    /// failure) while it has never been open: a wrong URL, path or certificate shows at once
    /// instead of as retries every `max_delay`. Once it has been open, retry as for any
    /// failure: the same server accepted it before, and an exchange's maintenance or a
    /// proxy's answer for a while must not end a stream for good.
    #[default]
    EndIfNeverOpen,
    /// End the stream whenever such a failure happens.
    End,
    /// Retry as for any failure (the backoff, `max_attempts`).
    Retry,
}

impl Default for ReconnectPolicy {
    fn default() -> Self {
        Self {
            enabled: true,
            initial_delay: Duration::from_millis(250),
            max_delay: Duration::from_secs(30),
            jitter: 0.5,
            healthy_after: Duration::from_secs(60),
            max_attempts: None,
            permanent: PermanentFailure::EndIfNeverOpen,
            planned: PlannedReconnect::CloseThenConnect,
        }
    }
}

/// Betfair credentials for the `authentication` op.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BetfairAuth {
    /// Application key.
    pub app_key: String,
    /// Session token.
    pub session: String,
}

/// How subscriptions and keepalives are spoken.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Profile {
    /// Binance stream endpoint: SUBSCRIBE / UNSUBSCRIBE / LIST_SUBSCRIPTIONS.
    BinanceStream,
    /// Binance WebSocket API: arbitrary `{"id","method","params"}` requests.
    BinanceWsApi,
    /// Betfair Exchange Stream API: authentication, market and order subscriptions.
    Betfair(BetfairAuth),
}

/// Everything a [`crate::Stream`] needs.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamConfig {
    /// `ws://`, `wss://` (WebSocket) or `tcp://`, `tls://` (CRLF lines).
    pub url: String,
    /// Addresses to connect to, tried in this order, instead of resolving the URL's host —
    /// which still names the server for TLS verification and the `Host` header (as curl's
    /// `--connect-to`): an endpoint pinned to known IPs, no DNS on a reconnect. Default
    /// empty: resolve the host each connection. Either way, of several addresses each but
    /// the last gets [`ADDRESS_FALLBACK`](crate::ADDRESS_FALLBACK) to connect before the
    /// next is tried.
    pub connect_to: Vec<std::net::SocketAddr>,
    /// Protocol profile.
    pub profile: Profile,
    /// WebSocket engine limits (also `max_read_size` for line streams).
    pub ws: WsConfig,
    /// Line delimiter for `tcp://` and `tls://`.
    pub delimiter: Delimiter,
    /// Longest accepted line, bytes (default 16 MiB).
    pub max_line: usize,
    /// Classification and correlation.
    pub router: RouterConfig,
    /// Deadlines.
    pub timeouts: Timeouts,
    /// Reconnection.
    pub reconnect: ReconnectPolicy,
    /// Connection attempts counted together with other streams' (default none: this stream
    /// connects when its own policy says). Give every stream that connects from the same
    /// address to the same exchange a clone of one budget — Binance allows an IP 300
    /// connects in 5 minutes and bans one that keeps going over — and a reconnect storm
    /// (every stream after a network blip, a program's streams at start-up) stays within it:
    /// an attempt that finds the window full waits for its turn.
    pub connect_budget: Option<ConnectBudget>,
    /// Most subscription control messages sent in any one second (a sliding window).
    /// `None`: no pacing. Binance closes a connection that sends it more than 5 messages a
    /// second, Pings and Pongs included, and bans an IP that keeps doing so: its preset
    /// sends 4, leaving a slot for the Pong a server Ping asks for. A SUBSCRIBE (UNSUBSCRIBE)
    /// held back joins the one held before it, up to 200 streams a request.
    pub control_rate: Option<u32>,
    /// Most streams on one connection (Binance: 1024).
    pub max_streams: usize,
    /// Most bytes waiting in the stream for the transport to take (default 16 MiB): an
    /// application message ([`Stream::send_text`](crate::Stream::send_text),
    /// [`send_binary`](crate::Stream::send_binary)) sent while this many wait is refused with
    /// [`StreamError::SendQueueFull`](crate::StreamError::SendQueueFull). A peer that stops
    /// reading while it still sends (so no timer ends the connection) must not make the
    /// client queue the application's messages without end. The stream's own messages
    /// (subscriptions, probes, the Close) are not refused; a transport takes bytes only while
    /// its own queue is short, so the rest wait here.
    pub max_send_queue: usize,
    /// An error response to a subscription or authentication crashes the stream with that
    /// response as the reason (default true); otherwise it is only reported. Not for the
    /// Betfair refusals that say try again: one for now (the account's connection limit,
    /// throttling, a timeout, the server's own failure) ends the connection and the stream
    /// connects again after the backoff ([`EndReason::RefusedForNow`](crate::EndReason)),
    /// and a refused position (`INVALID_CLOCK`) is dropped and the subscription sent again
    /// for a new image.
    pub crash_on_error_response: bool,
}

impl StreamConfig {
    fn base(url: &str, profile: Profile, router: RouterConfig) -> Self {
        Self {
            url: url.to_owned(),
            connect_to: Vec::new(),
            profile,
            ws: WsConfig::default(),
            delimiter: Delimiter::CrLf,
            max_line: 16 * 1024 * 1024,
            router,
            timeouts: Timeouts::default(),
            reconnect: ReconnectPolicy::default(),
            connect_budget: None,
            control_rate: None,
            max_streams: usize::MAX,
            max_send_queue: 16 * 1024 * 1024,
            crash_on_error_response: true,
        }
    }

    /// Binance streams (`wss://stream.binance.com:9443/ws` or `/stream`): 4 control
    /// messages a second (Binance's 5 less one for a Pong), 1024 streams, reconnect before
    /// the 24 h limit. Streams the URL names (`/stream?streams=a/b`, `/ws/<stream>`) count
    /// as subscribed: they can be unsubscribed, count towards `max_streams`, and a
    /// reconnect — to the same URL — unsubscribes again those that were.
    pub fn binance_stream(url: &str) -> Self {
        let mut c = Self::base(url, Profile::BinanceStream, RouterConfig::binance_stream());
        c.control_rate = Some(4);
        c.max_streams = 1024;
        c.timeouts.max_lifetime = Some(Duration::from_secs(23 * 3600 + 50 * 60));
        c
    }

    /// Binance WebSocket API: request/response only, so no first-data timeout.
    pub fn binance_ws_api(url: &str) -> Self {
        let mut c = Self::base(url, Profile::BinanceWsApi, RouterConfig::binance_ws_api());
        c.timeouts.first_data = None;
        c.timeouts.max_lifetime = Some(Duration::from_secs(23 * 3600 + 50 * 60));
        c
    }

    /// Betfair Exchange Stream API (`tls://stream-api.betfair.com:443`): idle probe after
    /// 15 s of silence, where a subscribed connection gets a heartbeat every 5 s (Betfair's
    /// default `heartbeatMs`).
    pub fn betfair(url: &str, auth: BetfairAuth) -> Self {
        let mut c = Self::base(url, Profile::Betfair(auth), RouterConfig::betfair());
        c.timeouts.idle = Some(BETFAIR_IDLE);
        c
    }
}
