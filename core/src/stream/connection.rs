//! One connection attempt's protocol engine: WebSocket or CRLF lines behind one interface.

use std::time::Instant;

use bytes::Bytes;

use super::event::EndReason;
use crate::config::WsConfig;
use crate::error::{close_code, ConfigError, LineError, StreamError};
use crate::lines::{Delimiter, LineClient, LineEvent};
use crate::offer::Take;
use crate::read_room::ReadSpare;
use crate::rng::Seed;
use crate::ws::{CloseInitiator, Event, MessageKind, WebSocketClient};

/// What the engine of one connection reports, reduced to what the stream acts on.
#[derive(Debug)]
pub(crate) enum ConnEvent {
    /// WebSocket handshake done.
    Opened,
    /// A complete message or line.
    Message { payload: Bytes, binary: bool },
    /// A close handshake completed.
    Closed {
        by: CloseInitiator,
        code: u16,
        reason: Bytes,
    },
    /// The engine failed, or a line stream ended.
    Ended(EndReason),
}

#[derive(Debug)]
pub(crate) enum Connection {
    // Boxed: the engines differ much in size; one allocation per connection attempt.
    Ws(Box<WebSocketClient>),
    Lines(Box<LineClient>),
}

impl Connection {
    pub(crate) fn websocket(url: &str, config: WsConfig, seed: Seed) -> Result<Self, ConfigError> {
        WebSocketClient::new(url, config, seed).map(|c| Self::Ws(Box::new(c)))
    }

    pub(crate) fn lines(delimiter: Delimiter, max_read_size: usize, max_line: usize) -> Self {
        Self::Lines(Box::new(LineClient::new(
            delimiter,
            max_read_size,
            max_line,
        )))
    }

    pub(crate) fn read_buf(&mut self) -> &mut [u8] {
        match self {
            Self::Ws(c) => c.read_buf(),
            Self::Lines(c) => c.read_buf(),
        }
    }

    pub(crate) fn read_spare(&mut self) -> ReadSpare<'_> {
        match self {
            Self::Ws(c) => c.read_spare(),
            Self::Lines(c) => c.read_spare(),
        }
    }

    /// Reads `n` bytes, offering each complete message to `take(payload, binary)` while no
    /// event is queued ahead of it (see [`WebSocketClient::handle_read_offering`]); what
    /// `take` hands back comes out of [`next_event`](Self::next_event), in order.
    pub(crate) fn handle_read_offering(&mut self, n: usize, take: &mut impl Take) {
        match self {
            Self::Ws(c) => c.handle_read_offering(n, take),
            Self::Lines(c) => c.handle_read_offering(n, take),
        }
    }

    pub(crate) fn handle_eof(&mut self) {
        match self {
            Self::Ws(c) => c.handle_eof(),
            Self::Lines(c) => c.handle_eof(),
        }
    }

    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        if let Self::Ws(c) = self {
            c.handle_timeout(now);
        }
    }

    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        match self {
            Self::Ws(c) => c.poll_timeout(),
            Self::Lines(_) => None,
        }
    }

    #[inline]
    pub(crate) fn poll_transmit(&mut self) -> Option<Bytes> {
        match self {
            Self::Ws(c) => c.poll_transmit(),
            Self::Lines(c) => c.poll_transmit(),
        }
    }

    /// Bytes waiting for the transport.
    pub(crate) fn queued_bytes(&self) -> usize {
        match self {
            Self::Ws(c) => c.queued_bytes(),
            Self::Lines(c) => c.queued_bytes(),
        }
    }

    /// Sends one text message or line: `NotOpen` if the engine no longer sends,
    /// `DelimiterInLine` for a line that would go out as several.
    pub(crate) fn send_text(&mut self, text: &str) -> Result<(), StreamError> {
        let sent = match self {
            Self::Ws(c) => c.send_text(text).is_ok(),
            Self::Lines(c) => match c.send_line(text.as_bytes()) {
                Err(LineError::DelimiterInLine) => return Err(StreamError::DelimiterInLine),
                sent => sent.is_ok(),
            },
        };
        sent.then_some(()).ok_or(StreamError::NotOpen)
    }

    /// Sends a binary WebSocket message; `None` for line streams (no binary there), else
    /// whether the engine took it.
    pub(crate) fn send_binary(&mut self, data: &[u8]) -> Option<bool> {
        match self {
            Self::Ws(c) => Some(c.send_binary(data).is_ok()),
            Self::Lines(_) => None,
        }
    }

    /// Sends a WebSocket ping; false for line streams (they probe with a protocol message).
    pub(crate) fn ping(&mut self) -> bool {
        match self {
            Self::Ws(c) => c.ping(b"feedwire").is_ok(),
            Self::Lines(_) => false,
        }
    }

    /// Starts a WebSocket close handshake; false if there is none to start (line streams,
    /// or not open).
    pub(crate) fn close(&mut self, now: Instant) -> bool {
        match self {
            Self::Ws(c) => c.close(close_code::NORMAL, "", now).is_ok(),
            Self::Lines(_) => false,
        }
    }

    /// Bytes that must arrive before a message can complete: a partly received frame's rest
    /// (0 for lines, whose length is unknown until the delimiter).
    pub(crate) fn missing_frame_bytes(&self) -> usize {
        match self {
            Self::Ws(c) => c.missing_frame_bytes(),
            Self::Lines(_) => 0,
        }
    }

    pub(crate) fn read_buffer_capacity(&self) -> usize {
        match self {
            Self::Ws(c) => c.read_buffer_capacity(),
            Self::Lines(c) => c.read_buffer_capacity(),
        }
    }

    pub(crate) fn release_read_buffer(&mut self) -> bool {
        match self {
            Self::Ws(c) => c.release_read_buffer(),
            Self::Lines(c) => c.release_read_buffer(),
        }
    }

    pub(crate) fn review_read_size(&mut self) -> bool {
        match self {
            Self::Ws(c) => c.review_read_size(),
            Self::Lines(c) => c.review_read_size(),
        }
    }

    /// Bytes of room the engine's event queue holds, used or not.
    pub(crate) fn event_room(&self) -> usize {
        match self {
            Self::Ws(c) => c.event_room(),
            Self::Lines(c) => c.event_room(),
        }
    }

    /// Whether [`next_event`](Self::next_event) may return one (it skips the WebSocket
    /// events the stream does not take, so it can still return `None`).
    pub(crate) fn has_events(&self) -> bool {
        match self {
            Self::Ws(c) => c.has_events(),
            Self::Lines(c) => c.has_events(),
        }
    }

    /// Whether a message is partly received (WebSocket; a line session ends at a stop, so
    /// for lines the question does not arise).
    pub(crate) fn is_receiving_a_message(&self) -> bool {
        match self {
            Self::Ws(c) => c.is_receiving_a_message(),
            Self::Lines(_) => false,
        }
    }

    pub(crate) fn next_event(&mut self) -> Option<ConnEvent> {
        match self {
            Self::Ws(c) => loop {
                let event = match c.poll_event()? {
                    Event::Opened(_) => ConnEvent::Opened,
                    Event::Message(m) => ConnEvent::Message {
                        payload: m.payload,
                        binary: m.kind == MessageKind::Binary,
                    },
                    Event::Closed { by, frame } => ConnEvent::Closed {
                        by,
                        code: frame.code,
                        reason: frame.reason,
                    },
                    Event::Failed(e) => ConnEvent::Ended(EndReason::WebSocket(e)),
                    // Pings are answered by the engine; pongs and close starts need nothing.
                    _ => continue,
                };
                return Some(event);
            },
            Self::Lines(c) => Some(match c.poll_event()? {
                LineEvent::Line(payload) => ConnEvent::Message {
                    payload,
                    binary: false,
                },
                LineEvent::Failed(e) => ConnEvent::Ended(EndReason::Lines(e)),
                _ => ConnEvent::Ended(EndReason::Eof),
            }),
        }
    }
}
