//! What the engine reports to the application.

use bytes::Bytes;

use crate::error::Error;

/// Text or binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageKind {
    /// Payload is valid UTF-8 (validated before delivery).
    Text,
    /// Arbitrary bytes.
    Binary,
}

/// A complete data message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Text or binary.
    pub kind: MessageKind,
    /// The payload, unmasked, fragments joined. An unfragmented message is a zero-copy slice
    /// of the engine's read buffer; holding it keeps that buffer block alive.
    pub payload: Bytes,
}

/// Who started the close handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloseInitiator {
    /// We did, with [`crate::WebSocketClient::close`].
    Local,
    /// The peer did; the engine echoed its Close.
    Remote,
}

/// The status of a Close frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloseFrame {
    /// Close code; 1005 when the frame carried none.
    pub code: u16,
    /// UTF-8 reason, possibly empty.
    pub reason: Bytes,
}

/// The accepted opening handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handshake {
    /// Response headers in the order received (names as sent).
    pub headers: Vec<(String, Bytes)>,
    /// The subprotocol the server selected, if any.
    pub subprotocol: Option<String>,
}

/// An event from [`crate::WebSocketClient::poll_event`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// The handshake completed; data may flow.
    Opened(Handshake),
    /// A complete text or binary message.
    Message(Message),
    /// The peer sent Ping; the engine already queued the Pong (same payload).
    Ping(Bytes),
    /// The peer sent Pong.
    Pong(Bytes),
    /// A close handshake began. No data can be sent from here on; data that the peer sent
    /// before its Close is still delivered.
    CloseStarted {
        /// Who began it.
        by: CloseInitiator,
        /// The initiator's code and reason.
        frame: CloseFrame,
    },
    /// The close handshake completed. Terminal: the transport may close the socket once
    /// [`crate::WebSocketClient::is_finished`] says so.
    Closed {
        /// Who began it.
        by: CloseInitiator,
        /// The initiator's code and reason.
        frame: CloseFrame,
    },
    /// The connection failed. Terminal; reported once, then kept by
    /// [`crate::WebSocketClient::error`].
    Failed(Error),
}
