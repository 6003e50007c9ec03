//! # feedwire-core
//!
//! A sans-IO engine for exchange market-data streams: the WebSocket client protocol
//! (RFC 6455) with an engine-owned read buffer capped by `max_read_size`. Bytes go in, events
//! and bytes-to-send come out. This crate performs no I/O, reads no clock (time is an
//! argument; deadlines come out of `poll_timeout`) and spawns nothing, so any event loop —
//! blocking sockets, tokio, a hand-rolled epoll loop — can drive it.
//!
//! Start at [`WebSocketClient`]; its documentation states the calling contract.
//!
//! Failures come in three kinds: a peer violation fails the connection with the RFC close code
//! and is reported once ([`Event::Failed`], then [`WebSocketClient::error`]); local misuse
//! returns an error and changes nothing ([`SendError`], [`ConfigError`]); a broken internal
//! invariant panics with a message naming it. Bytes from the peer never cause a panic.

mod address;
mod config;
mod deadline;
mod endpoint;
mod error;
mod frame;
mod handshake;
mod lines;
mod mask;
mod offer;
mod read_buffer;
mod read_room;
mod rng;
mod route;
mod stream;
#[doc(hidden)]
pub mod testing;
mod text_lane;
mod tls;
mod transmit;
mod utf8;
mod vector;
mod vector_width;
mod write_queue;
mod ws;

pub use address::{connect_order, ADDRESS_FALLBACK};
pub use config::WsConfig;
pub use endpoint::{Endpoint, Scheme};
pub use error::{
    close_code, ConfigError, CorrelationError, Error, HandshakeError, LineError, ProtocolError,
    Refusal, SendError, StreamError,
};
pub use frame::push_server_frame;
pub use handshake::accept_key;
pub use lines::{Delimiter, LineClient, LineEvent, LineFramer};
pub use mask::apply_mask;
pub use read_room::{ReadRoom, ReadSpare};
pub use rng::{os_seed, Seed};
pub use route::{
    classify, Class, Classifier, Condition, Extracted, IdStyle, PendingRequests, RequestHandle,
    RequestId, ResponseId, RouteRules, Routed, Router, RouterConfig, TimedOut, MAX_EXTRACT_KEYS,
};
/// The TLS library, re-exported so that custom `ClientConfig`s and root stores match ours.
pub use rustls;
pub use stream::{
    Answer, AwaitedAnswers, BetfairAuth, BetfairSubscription, ConnectBudget, DataHandler, DataRef,
    EndReason, PermanentFailure, PlannedReconnect, Profile, ReconnectPolicy, RequestKind,
    StatsHandle, StatsSnapshot, Stream, StreamConfig, StreamEvent, StreamState, Timeouts,
    TransportCommand, LOW_WATER_MIN,
};
pub use tls::{
    default_tls_config, mozilla_roots, tls_config_with_roots, HandshakeOnly, LendingInput,
    PlaintextSink, StreamInput, TlsError, TlsFailure, TlsSession, HELD_PLAINTEXT_LIMIT,
};
pub use vector_width::{limit_vector_width, vector_width, VectorWidth};
pub use write_queue::WriteQueue;
pub use ws::{
    CloseFrame, CloseInitiator, Event, Handshake, Message, MessageKind, State, WebSocketClient,
};

/// Internals exposed for the fuzz targets and benchmarks; not a stable API.
#[doc(hidden)]
pub mod test_exports {
    pub use crate::ws::{Decoded, FrameDecoder};
}
