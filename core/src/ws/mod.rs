//! The WebSocket client engine (RFC 6455), sans-IO.

mod client;
mod close;
mod decoder;
mod event;
mod pong;
mod simple_frame;

pub use client::{State, WebSocketClient};
pub use event::{CloseFrame, CloseInitiator, Event, Handshake, Message, MessageKind};

#[doc(hidden)]
pub use decoder::{Decoded, FrameDecoder};
