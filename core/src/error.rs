//! Typed errors. Three kinds of failure (see the crate docs): a peer violation fails the
//! connection with an RFC close code and is reported once as [`crate::Event::Failed`]; local
//! misuse returns an error from the call and changes nothing; a broken invariant panics.

use std::time::Duration;

use bytes::Bytes;

/// A violation of RFC 6455 by the peer, detected while decoding frames.
///
/// Every variant maps to the close code the RFC prescribes, see [`ProtocolError::close_code`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// RFC 6455 §5.1: a server must not mask frames it sends.
    #[error("server frame is masked (RFC 6455 §5.1)")]
    MaskedFrame,
    /// RFC 6455 §5.2: RSV1-3 must be 0 unless an extension was negotiated (we negotiate none).
    #[error("reserved bits {0:#05b} set without a negotiated extension (RFC 6455 §5.2)")]
    ReservedBits(u8),
    /// RFC 6455 §5.2: opcodes 0x3-0x7 and 0xB-0xF are reserved.
    #[error("reserved opcode {0:#x} (RFC 6455 §5.2)")]
    ReservedOpcode(u8),
    /// RFC 6455 §5.5: control frame payloads are at most 125 bytes.
    #[error("control frame payload of {0} bytes exceeds 125 (RFC 6455 §5.5)")]
    ControlFrameTooLong(u64),
    /// RFC 6455 §5.5: control frames must not be fragmented.
    #[error("fragmented control frame (RFC 6455 §5.5)")]
    FragmentedControlFrame,
    /// RFC 6455 §5.4: a continuation frame arrived with no fragmented message in progress.
    #[error("continuation frame without a message in progress (RFC 6455 §5.4)")]
    UnexpectedContinuation,
    /// RFC 6455 §5.4: a new text/binary frame arrived inside a fragmented message.
    #[error("new data frame inside a fragmented message (RFC 6455 §5.4)")]
    ExpectedContinuation,
    /// RFC 6455 §5.2: the most significant bit of a 64-bit length must be 0.
    #[error("64-bit payload length with the most significant bit set (RFC 6455 §5.2)")]
    LengthTopBitSet,
    /// RFC 6455 §8.1: text messages must be valid UTF-8.
    #[error("invalid UTF-8 in a text message (RFC 6455 §8.1)")]
    InvalidUtf8,
    /// RFC 6455 §5.5.1: a close payload is empty or starts with a 2-byte code.
    #[error("close frame with a 1-byte payload (RFC 6455 §5.5.1)")]
    CloseFrameOneByte,
    /// RFC 6455 §7.4: the close code is reserved, unassigned or must not be sent on the wire.
    #[error("invalid close code {0} (RFC 6455 §7.4)")]
    InvalidCloseCode(u16),
    /// RFC 6455 §5.5.1: the close reason must be valid UTF-8.
    #[error("close reason is not valid UTF-8 (RFC 6455 §5.5.1)")]
    InvalidCloseReason,
    /// A frame's declared payload exceeds [`crate::WsConfig::max_frame_size`].
    #[error("frame payload of {len} bytes exceeds the limit of {max} bytes")]
    FrameTooLarge {
        /// Declared payload length, bytes.
        len: u64,
        /// Configured limit, bytes.
        max: usize,
    },
    /// A message (all fragments) exceeds [`crate::WsConfig::max_message_size`].
    #[error("message of at least {len} bytes exceeds the limit of {max} bytes")]
    MessageTooLarge {
        /// Message length known so far, bytes.
        len: u64,
        /// Configured limit, bytes.
        max: usize,
    },
}

impl ProtocolError {
    /// The close code RFC 6455 §7.4.1 prescribes for this violation.
    pub fn close_code(&self) -> u16 {
        match self {
            Self::InvalidUtf8 | Self::InvalidCloseReason => close_code::INVALID_PAYLOAD,
            Self::FrameTooLarge { .. } | Self::MessageTooLarge { .. } => close_code::TOO_BIG,
            _ => close_code::PROTOCOL_ERROR,
        }
    }
}

/// Why the opening handshake failed (RFC 6455 §4.1, client requirements).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    /// The response head did not end within the configured size.
    #[error("response head exceeds {max} bytes without ending")]
    HeadTooLarge {
        /// Configured limit, bytes.
        max: usize,
    },
    /// The response head is not valid HTTP/1.1.
    #[error("malformed response head: {0}")]
    Malformed(&'static str),
    /// The server answered with something other than 101 Switching Protocols.
    #[error("server refused the upgrade: HTTP {status} {}", .refusal.reason)]
    Rejected {
        /// HTTP status code.
        status: u16,
        /// The rest of the answer, boxed: a connection's failure is carried in every stream
        /// event's room (`StreamEvent` is as large as its largest variant), and a refused
        /// upgrade's reason, body and wait would make every event 40 bytes larger.
        refusal: Box<Refusal>,
    },
    /// The `Upgrade` header is missing or does not contain the `websocket` token.
    #[error("response lacks `Upgrade: websocket`")]
    MissingUpgrade,
    /// The `Connection` header is missing or does not contain the `upgrade` token.
    #[error("response lacks `Connection: upgrade`")]
    MissingConnectionUpgrade,
    /// `Sec-WebSocket-Accept` is missing or does not match the key we sent.
    #[error("Sec-WebSocket-Accept is missing or does not match the request key")]
    AcceptMismatch,
    /// The server selected an extension; we offer none.
    #[error("server selected extension {0:?} that was not offered")]
    UnexpectedExtension(String),
    /// The server selected a subprotocol we did not offer.
    #[error("server selected subprotocol {0:?} that was not offered")]
    UnexpectedSubprotocol(String),
    /// The connection ended before the response head was complete.
    #[error("connection closed during the opening handshake")]
    Eof,
}

/// What a server that refused the upgrade said besides its status
/// ([`HandshakeError::Rejected`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Refusal {
    /// Reason phrase as sent.
    pub reason: String,
    /// Response body bytes received (up to `max_handshake_size`, raw: no chunk decoding).
    pub body: Bytes,
    /// How long the server asked us to wait before trying again (`Retry-After` in seconds,
    /// as Binance sends with 429 and 418); a stream waits at least this long.
    pub retry_after: Option<Duration>,
}

/// The failure that ended a connection; reported once as [`crate::Event::Failed`] and kept by
/// the engine (sticky) afterwards.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The opening handshake failed.
    #[error("handshake failed: {0}")]
    Handshake(#[from] HandshakeError),
    /// The peer violated the protocol; a Close frame with [`Error::close_code`] was queued.
    #[error("protocol violation: {0}")]
    Protocol(#[from] ProtocolError),
    /// The transport reached end of stream without a close handshake (close code 1006).
    #[error("connection closed without a close handshake")]
    UnexpectedEof,
    /// We sent Close and the peer did not answer within the close timeout.
    #[error("peer did not answer our Close frame within the close timeout")]
    CloseTimeout,
}

impl Error {
    /// The close code this failure corresponds to (RFC 6455 §7.4.1). 1006 is never sent on the
    /// wire; it is what the application sees for an abnormal end.
    pub fn close_code(&self) -> u16 {
        match self {
            Self::Protocol(p) => p.close_code(),
            Self::Handshake(_) | Self::UnexpectedEof | Self::CloseTimeout => close_code::ABNORMAL,
        }
    }
}

/// Local misuse of the engine: the call changed nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// Data can only be sent while the connection is open (not before the handshake completes,
    /// nor after Close was sent or received).
    #[error("connection is not open for sending")]
    NotOpen,
    /// Ping, pong and close payloads are at most 125 bytes (RFC 6455 §5.5).
    #[error("control frame payload of {0} bytes exceeds 125")]
    ControlPayloadTooLong(usize),
    /// The close code may not be sent on the wire (RFC 6455 §7.4).
    #[error("close code {0} may not be sent")]
    InvalidCloseCode(u16),
}

/// The configuration or URL given to a constructor is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The URL does not parse.
    #[error("invalid URL: {0}")]
    InvalidUrl(String),
    /// The URL scheme is not one this engine speaks.
    #[error("unsupported URL scheme {0:?}")]
    UnsupportedScheme(String),
    /// The URL has no host.
    #[error("URL has no host")]
    MissingHost,
    /// WebSocket URLs must not carry a fragment (RFC 6455 §3).
    #[error("WebSocket URLs must not carry a fragment")]
    FragmentInUrl,
    /// An extra header's name is not an HTTP token or its value contains CR, LF or NUL.
    #[error("invalid extra header {0:?}")]
    InvalidHeader(String),
    /// A subprotocol name is not an HTTP token.
    #[error("invalid subprotocol {0:?}")]
    InvalidSubprotocol(String),
    /// Credentials contain characters that cannot go into a JSON string as is.
    #[error("credentials must not contain quotes, backslashes or control characters")]
    InvalidCredential,
    /// A size limit is zero.
    #[error("{0} must be greater than zero")]
    ZeroLimit(&'static str),
    /// A size limit is larger than the engine can honour.
    #[error("{name} must be at most {max} bytes")]
    LimitTooLarge {
        /// The knob.
        name: &'static str,
        /// Its largest value, bytes.
        max: usize,
    },
    /// A list holds more entries than the engine takes.
    #[error("{name} holds at most {max} entries")]
    TooMany {
        /// The knob.
        name: &'static str,
        /// Most entries.
        max: usize,
    },
}

/// Why a line stream failed, or a line could not be sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LineError {
    /// A line grew beyond the configured maximum (its delimiter not counted). Refused as soon
    /// as more than `max` of its bytes are in, whether its end has arrived or not; how many
    /// more had arrived by then depends on where reads fell, so it is not reported (the
    /// events of a stream never depend on read boundaries).
    #[error("line longer than the limit of {max} bytes")]
    LineTooLong {
        /// Configured limit, bytes.
        max: usize,
    },
    /// The stream ended in the middle of a line.
    #[error("stream ended inside a line ({len} bytes without a delimiter)")]
    TruncatedLine {
        /// Bytes of the unfinished line.
        len: usize,
    },
    /// Sending after the stream ended (local misuse).
    #[error("line stream is not open for sending")]
    NotOpen,
    /// An outgoing line contains the delimiter (local misuse).
    #[error("outgoing line contains the delimiter")]
    DelimiterInLine,
}

/// A request could not be registered for correlation (local condition; nothing changed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CorrelationError {
    /// The pending-request table is full.
    #[error("{capacity} requests already pending")]
    Full {
        /// Configured capacity.
        capacity: usize,
    },
    /// The id is already pending.
    #[error("request id already pending")]
    DuplicateId,
    /// Every id of the configured integer range is pending.
    #[error("every request id in the configured range is pending")]
    IdsExhausted,
}

/// A stream command could not be carried out (local condition; nothing changed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// The command does not exist in this stream's protocol profile.
    #[error("not supported by this stream's profile")]
    NotSupported,
    /// The command needs an open stream.
    #[error("stream is not open")]
    NotOpen,
    /// The stream ended (closed or crashed).
    #[error("stream has ended")]
    Ended,
    /// More streams than one connection may carry.
    #[error("more than {max} streams on one connection")]
    TooManyStreams {
        /// The limit.
        max: usize,
    },
    /// Unsubscribing a stream that is not subscribed.
    #[error("not subscribed to {0:?}")]
    NotSubscribed(String),
    /// A stream or method name that cannot go into a JSON string as is.
    #[error("invalid stream or method name {0:?}")]
    InvalidStreamName(String),
    /// A line to send contains the line delimiter: it would go out as several lines.
    #[error("a line to send contains the line delimiter")]
    DelimiterInLine,
    /// Credentials that cannot go into a JSON string as is (empty, quotes, backslashes,
    /// control characters).
    #[error("credentials must be non-empty, without quotes, backslashes or control characters")]
    InvalidCredential,
    /// As many bytes as [`StreamConfig::max_send_queue`](crate::StreamConfig::max_send_queue)
    /// wait for the transport already: the peer is not reading.
    #[error("{queued} bytes already wait to be sent (limit {max})")]
    SendQueueFull {
        /// Bytes waiting.
        queued: usize,
        /// The limit.
        max: usize,
    },
    /// The request could not be registered for its response.
    #[error(transparent)]
    Correlation(#[from] CorrelationError),
}

/// Close codes of RFC 6455 §7.4.1.
pub mod close_code {
    /// Normal closure.
    pub const NORMAL: u16 = 1000;
    /// Endpoint going away.
    pub const GOING_AWAY: u16 = 1001;
    /// Protocol error.
    pub const PROTOCOL_ERROR: u16 = 1002;
    /// Unsupported data type.
    pub const UNSUPPORTED_DATA: u16 = 1003;
    /// No status code present (never on the wire).
    pub const NO_STATUS: u16 = 1005;
    /// Abnormal closure, no close frame (never on the wire).
    pub const ABNORMAL: u16 = 1006;
    /// Invalid frame payload data (e.g. bad UTF-8).
    pub const INVALID_PAYLOAD: u16 = 1007;
    /// Policy violation.
    pub const POLICY: u16 = 1008;
    /// Message too big.
    pub const TOO_BIG: u16 = 1009;
    /// Internal error.
    pub const INTERNAL: u16 = 1011;

    /// Whether `code` may appear in a Close frame on the wire: 1000-1003, 1007-1014 (IANA
    /// registered), 3000-4999 (libraries, applications).
    pub fn is_sendable(code: u16) -> bool {
        matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
    }
}
