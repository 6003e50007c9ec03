//! What a [`crate::Stream`] reports, and what it asks of its transport.

use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::endpoint::Endpoint;
use crate::error::{Error, LineError};
use crate::route::{RequestId, ResponseId};
use crate::ws::CloseInitiator;

/// Why a connection (or the whole stream) ended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EndReason {
    /// The transport could not connect (DNS, refused, TLS verification, …).
    #[error("connect failed: {0}")]
    ConnectFailed(String),
    /// TLS failed: certificate verification, handshake, alert, truncation.
    #[error("TLS: {0}")]
    Tls(crate::tls::TlsFailure),
    /// The transport failed after connecting (reset, write error, …).
    #[error("transport error: {0}")]
    Transport(String),
    /// The WebSocket engine failed: handshake refused or invalid, protocol violation, end of
    /// stream without a close handshake, close timeout.
    #[error(transparent)]
    WebSocket(#[from] Error),
    /// The line stream failed or ended mid-line.
    #[error(transparent)]
    Lines(#[from] LineError),
    /// The transport reached end of stream (line streams; WebSocket reports 1006).
    #[error("connection closed by peer")]
    Eof,
    /// The peer closed the WebSocket.
    #[error("closed by peer with code {code}")]
    ClosedByPeer {
        /// Close code.
        code: u16,
        /// Close reason.
        reason: Bytes,
    },
    /// Not open within the connect timeout.
    #[error("not open within the connect timeout")]
    ConnectTimeout,
    /// Open, but no data within the first-data timeout.
    #[error("no data within the first-data timeout")]
    FirstDataTimeout,
    /// No bytes within the idle timeout, then none within `probe_answer` of the probe.
    #[error("stalled: no bytes within the idle timeout, probe unanswered")]
    IdleTimeout,
    /// The server announced it will shut the connection down (planned reconnect).
    #[error("server announced shutdown")]
    ServerShutdown,
    /// The connection reached its maximum lifetime (planned reconnect).
    #[error("connection lifetime reached")]
    LifetimeReached,
    /// A response configured as fatal (e.g. a refused subscription or authentication).
    #[error("fatal response: {}", String::from_utf8_lossy(.0))]
    FatalResponse(Bytes),
    /// The server refused a request for now (Betfair `MAX_CONNECTION_LIMIT_EXCEEDED`,
    /// `TOO_MANY_REQUESTS`, `TIMEOUT`, `UNEXPECTED_ERROR`, `CONNECTION_FAILED`): the stream
    /// connects again after the backoff. The refusal as received.
    #[error("refused for now: {}", String::from_utf8_lossy(.0))]
    RefusedForNow(Bytes),
    /// A request the stream needs (Betfair authentication) could not be sent.
    #[error("could not send a required request: {0}")]
    RequestFailed(crate::error::StreamError),
    /// [`crate::Stream::crash`] was called.
    #[error("crashed on request: {0}")]
    UserCrash(String),
    /// Reconnection gave up after this many attempts.
    #[error("gave up after {attempts} attempts; last: {last}")]
    GaveUp {
        /// Consecutive failed attempts.
        attempts: u32,
        /// Why the last one ended.
        last: Box<EndReason>,
    },
}

impl EndReason {
    /// Whether retrying cannot be expected to mend this failure: the server answered the
    /// upgrade with a redirect (never followed: the URL is to be corrected) or a client
    /// error — other than 408 Request Timeout, 418 (Binance's ban, lifted after its
    /// `Retry-After`), 425 Too Early and 429 Too Many Requests; it answered, but not as a
    /// WebSocket server this client can use (no `Upgrade` or `Connection` token, a wrong
    /// `Sec-WebSocket-Accept`, an extension or subprotocol not offered); or its certificate
    /// did not verify. Connect failures, timeouts, resets, 5xx, malformed or cut-off
    /// answers and everything after the opening are not.
    pub fn is_permanent(&self) -> bool {
        use crate::error::HandshakeError as H;
        match self {
            Self::WebSocket(Error::Handshake(h)) => match h {
                H::Rejected { status, .. } => {
                    matches!(status, 300..=499) && !matches!(status, 408 | 418 | 425 | 429)
                }
                H::MissingUpgrade
                | H::MissingConnectionUpgrade
                | H::AcceptMismatch
                | H::UnexpectedExtension(_)
                | H::UnexpectedSubprotocol(_) => true,
                H::HeadTooLarge { .. } | H::Malformed(_) | H::Eof => false,
            },
            Self::Tls(failure) => failure.certificate,
            _ => false,
        }
    }
}

/// Where a stream is.
///
/// ```text
///            ┌────────────────────── reconnect policy allows ─────────────────────┐
///            ▼                                                                     │
///  ──▶ Connecting ──transport up──▶ Handshaking ──101──▶ Open ──stop()──▶ Closing ─┼─▶ Closed
///      (TCP, TLS)                  (WebSocket only)      │                         │
///            │                          │                ├─ peer close / error / ──┤
///            └──── timeout / error ─────┴────────────────┤  stall / planned       │
///                                                        │                         ▼
///                         crash(reason), fatal response ─┴─────────────────────▶ Crashed
/// ```
/// `Reconnecting` waits out the backoff between an end and the next `Connecting`. A failure
/// retrying will not mend ([`EndReason::is_permanent`]) ends a stream never yet open in
/// `Crashed` instead ([`ReconnectPolicy::permanent`](crate::ReconnectPolicy::permanent)).
/// `Closed` and `Crashed` are terminal: input is ignored, no reconnect follows.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamState {
    /// Waiting for the transport (TCP, then TLS) to connect — or, first, for a turn in the
    /// stream's [`ConnectBudget`](crate::ConnectBudget); `attempt` counts from 1.
    Connecting {
        /// Consecutive attempt.
        attempt: u32,
    },
    /// WebSocket upgrade sent, waiting for 101.
    Handshaking,
    /// Data flows.
    Open,
    /// We sent Close (after `stop()` or for a planned reconnect) and wait for the peer's.
    Closing,
    /// Waiting until `at` to connect again.
    Reconnecting {
        /// Next attempt number.
        attempt: u32,
        /// When it starts.
        at: Instant,
    },
    /// Ended by `stop()` (by `Local`) or by the peer with reconnection disabled.
    Closed {
        /// Who closed.
        by: CloseInitiator,
    },
    /// Ended without a clean close and without reconnecting.
    Crashed(EndReason),
}

impl StreamState {
    /// `Closed` or `Crashed`.
    pub fn is_terminal(&self) -> bool {
        matches!(self, Self::Closed { .. } | Self::Crashed(_))
    }
}

/// What the transport should do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransportCommand {
    /// Open a connection (TCP, TLS when `endpoint.scheme.is_tls()`), then call
    /// [`crate::Stream::handle_connected`] or [`crate::Stream::handle_connect_failed`].
    /// To `endpoint.connect_to` if given, else to the host's addresses in
    /// [`connect_order`](crate::connect_order); of several, each but the last for at most
    /// [`ADDRESS_FALLBACK`](crate::ADDRESS_FALLBACK).
    Connect(Endpoint),
    /// Drop the current connection. Drain `poll_transmit` before acting on it: an ending
    /// WebSocket may still have a Close frame to write (after a crash there is none).
    Disconnect,
}

/// A request the stream made on the application's behalf, or the application's own.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestKind {
    /// SUBSCRIBE (Binance) for these streams.
    Subscribe(Vec<String>),
    /// UNSUBSCRIBE (Binance) for these streams.
    Unsubscribe(Vec<String>),
    /// LIST_SUBSCRIPTIONS (Binance).
    ListSubscriptions,
    /// An application request (Binance WebSocket API), with the method name.
    Request(String),
    /// Betfair authentication.
    Authentication,
    /// Betfair market subscription.
    MarketSubscription,
    /// Betfair order subscription.
    OrderSubscription,
    /// A heartbeat probe (Betfair `heartbeat` op).
    Heartbeat,
}

/// A data message lent by [`crate::Stream::handle_read_with`]: the payload lies in the read
/// buffer and is borrowed for the duration of the callback only (copy what must outlive it).
/// It is exactly what [`StreamEvent::Data`] would have carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DataRef<'a> {
    /// The payload, borrowed from the read buffer.
    pub payload: &'a [u8],
    /// A protocol heartbeat (Betfair `"ct":"HEARTBEAT"`).
    pub heartbeat: bool,
    /// When the read that completed the message happened, as its transport stamped it
    /// (see [`StreamEvent::Data`]).
    pub received: Instant,
}

/// Receives a stream's data messages in place, and its other events, in order: what an
/// adapter calls when the application asks for data to be lent rather than queued. It runs
/// on the adapter's thread or task and must not block. A stop asked for from inside it (an
/// adapter's handle) takes effect once the read being lent is through: the rest of that
/// read's messages — at most `max_read_size` bytes, read before the stop — are still lent,
/// nothing read after it is.
pub trait DataHandler {
    /// A data message, borrowed from the stream's read buffer for this call only: no copy,
    /// no allocation, no event. Every data message arrives here, lent or (when it was queued
    /// behind another event) read from its event.
    fn on_data(&mut self, data: DataRef<'_>);
    /// Any other event.
    fn on_event(&mut self, event: StreamEvent);

    /// Hands over a queued event: data to [`on_data`](Self::on_data), the rest to
    /// [`on_event`](Self::on_event).
    fn deliver(&mut self, event: StreamEvent) {
        match event.as_data() {
            Some(d) => self.on_data(d),
            None => self.on_event(event),
        }
    }
}

/// A boxed handler is one: what an adapter holding handlers of different types keeps.
impl<H: DataHandler + ?Sized> DataHandler for Box<H> {
    #[inline]
    fn on_data(&mut self, data: DataRef<'_>) {
        (**self).on_data(data)
    }

    fn on_event(&mut self, event: StreamEvent) {
        (**self).on_event(event)
    }

    fn deliver(&mut self, event: StreamEvent) {
        (**self).deliver(event)
    }
}

/// An event from [`crate::Stream::poll_event`].
///
/// 72 bytes: every queued message moves one through a queue or a channel or two. The tag is
/// a whole word (`repr(u64)`) and each variant's fields follow it in declaration order, so
/// that a move copies whole aligned words: with Rust's default layout (a one-byte tag, small
/// fields packed after it) the 64 bytes an event would take were copied from offset 1, in
/// loads that straddled the stores just made, and each stalled (store forwarding):
/// +15% CPU a 0.2 KB message through the tokio adapter's `Events`. Hence the order of fields
/// below, and the rarer variants' larger parts boxed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
#[repr(u64)]
pub enum StreamEvent {
    /// Connecting (attempt counts from 1).
    Connecting {
        /// Consecutive attempt.
        attempt: u32,
    },
    /// The stream is open: data may flow, subscriptions are being (re)sent.
    Opened {
        /// True after a reconnect.
        reconnected: bool,
    },
    /// A data message.
    Data {
        /// The payload (zero-copy): a slice of the read block it arrived in, which stays
        /// allocated (twice `max_read_size`, 512 KiB by default) until every payload cut
        /// from it is dropped. Copy (`Bytes::copy_from_slice`) a message kept for long —
        /// the latest of each of many symbols, one block each for the quiet ones.
        payload: Bytes,
        /// A protocol heartbeat (Betfair `"ct":"HEARTBEAT"`).
        heartbeat: bool,
        /// When the read that completed the message happened: the `now` its transport gave
        /// with that read (tokio: the clock read right after the socket read; the mio loop:
        /// for its first read of a wake-up the time it began serving the stream, for each
        /// further read the clock right after it; your loop: what you pass). Messages of one
        /// read share it. A receive timestamp without a clock read a message (a vDSO
        /// `Instant::now()` costs about as much as the library's whole work on a small
        /// message); for wall-clock time, add the offset between `SystemTime::now()` and
        /// `Instant::now()` taken once.
        received: Instant,
    },
    /// The response to one of our requests.
    Response {
        /// Id the request was sent with.
        id: RequestId,
        /// What the request was (boxed, for the size of every event).
        kind: Box<RequestKind>,
        /// The response (zero-copy).
        payload: Bytes,
        /// It reports an error.
        is_error: bool,
    },
    /// A response that matches no pending request.
    UnsolicitedResponse {
        /// Its id, if any (boxed, for the size of every event).
        id: Option<Box<ResponseId>>,
        /// The response.
        payload: Bytes,
        /// It reports an error.
        is_error: bool,
    },
    /// A request got no response in time; reported exactly once.
    RequestTimedOut {
        /// Id it was sent with.
        id: RequestId,
        /// What it was.
        kind: RequestKind,
    },
    /// A request whose connection ended before its answer came: none can come now (ask
    /// again once the stream is open). Reported at once, instead of a timeout later.
    /// Requests the stream redoes by itself on the next connection — subscriptions
    /// (resent), authentication, heartbeats — end silently.
    RequestLost {
        /// Id it was sent with.
        id: RequestId,
        /// What it was.
        kind: RequestKind,
    },
    /// The server confirmed these subscriptions.
    Subscribed {
        /// Streams (Binance) or the subscription op (Betfair): those of one request, which
        /// may carry several calls' streams (calls that waited for the pacing budget share
        /// one; see [`StreamConfig::control_rate`](crate::StreamConfig::control_rate)).
        streams: Vec<String>,
        /// The request id.
        id: RequestId,
    },
    /// The server confirmed these unsubscriptions.
    Unsubscribed {
        /// Streams.
        streams: Vec<String>,
        /// The request id.
        id: RequestId,
    },
    /// Betfair authentication succeeded.
    Authenticated,
    /// After a reconnect, every subscription was re-sent (`count` requests).
    Resubscribed {
        /// Subscription requests sent.
        count: usize,
    },
    /// The connection is to be replaced on purpose and, as
    /// [`PlannedReconnect::Advise`](crate::PlannedReconnect::Advise) asked, is kept until
    /// `deadline` for the application to connect anew first; it still delivers. Reported once
    /// a connection. Not reported with the default `CloseThenConnect`, whose
    /// [`Reconnecting`](Self::Reconnecting) says `planned: true`.
    ReconnectDue {
        /// Why: [`EndReason::ServerShutdown`] or [`EndReason::LifetimeReached`].
        reason: EndReason,
        /// When the stream replaces the connection itself if it is still open.
        deadline: Instant,
    },
    /// The connection ended; another attempt follows after `delay`.
    Reconnecting {
        /// Planned (server shutdown notice, lifetime) rather than a failure.
        planned: bool,
        /// Number of the connection attempt that follows (the first connection was 1).
        attempt: u32,
        /// Backoff before it.
        delay: Duration,
        /// Why the connection ended.
        reason: EndReason,
    },
    /// Terminal: closed cleanly.
    Closed {
        /// Who closed.
        by: CloseInitiator,
        /// WebSocket close code (1000 for a line stream we ended).
        code: u16,
    },
    /// Terminal: crashed.
    Crashed(EndReason),
}

// A variant that outgrows the others makes every queued message's event larger.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<StreamEvent>() == 72);

impl StreamEvent {
    /// A [`StreamEvent::Data`] as the [`DataRef`] it would have been lent as, so that code
    /// reading lent messages can take queued ones the same way.
    pub fn as_data(&self) -> Option<DataRef<'_>> {
        match self {
            Self::Data {
                payload,
                heartbeat,
                received,
            } => Some(DataRef {
                payload,
                heartbeat: *heartbeat,
                received: *received,
            }),
            _ => None,
        }
    }
}
