//! Frame decoding and message assembly over the read buffer's unconsumed bytes.
//!
//! Resume cursor: the header of an incomplete frame is parsed once and kept; payload bytes of
//! a text frame are UTF-8-validated as they arrive (fail fast, while cache-hot) and never
//! again. Complete unfragmented messages are reported as ranges of the input, so the engine
//! can slice them out zero-copy; fragmented messages are joined in an assembly buffer.

use std::ops::Range;

use bytes::{Bytes, BytesMut};

use super::close::parse_close_payload;
use super::event::MessageKind;
use crate::error::ProtocolError;
use crate::frame::{parse_header, FrameHeader, Opcode};
use crate::utf8::Utf8Stream;

/// A complete frame or message found by [`FrameDecoder::decode`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// An unfragmented message whose payload is `payload` of the decoded input.
    Message {
        /// Text (validated) or binary.
        kind: MessageKind,
        /// Payload range in the input.
        payload: Range<usize>,
    },
    /// A fragmented message, joined.
    Assembled {
        /// Text (validated) or binary.
        kind: MessageKind,
        /// All fragments' payloads.
        payload: Bytes,
    },
    /// A Ping; payload range in the input.
    Ping(Range<usize>),
    /// A Pong; payload range in the input.
    Pong(Range<usize>),
    /// A valid Close; decoding stops after it.
    Close {
        /// Code (1005 if none).
        code: u16,
        /// Reason range in the input.
        reason: Range<usize>,
    },
}

/// How far [`FrameDecoder::decode`] got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Input bytes fully decoded; the rest is the start of an incomplete frame.
    pub consumed: usize,
    /// Total length of that incomplete frame if its header is known, else 0.
    pub frame_hint: usize,
}

/// Incremental decoder state for one connection.
#[derive(Debug)]
pub struct FrameDecoder {
    max_frame_size: usize,
    max_message_size: usize,
    /// Header of the incomplete frame at the start of the next input.
    current: Option<FrameHeader>,
    /// Payload bytes of `current` already validated.
    /// INVARIANT: `validated <= current.payload_len`, 0 when `current` is None.
    validated: usize,
    /// Kind of the fragmented message in progress.
    fragmented: Option<MessageKind>,
    assembly: BytesMut,
    utf8: Utf8Stream,
}

impl FrameDecoder {
    /// A decoder enforcing the given limits (bytes).
    pub fn new(max_frame_size: usize, max_message_size: usize) -> Self {
        Self {
            max_frame_size,
            max_message_size,
            current: None,
            validated: 0,
            fragmented: None,
            assembly: BytesMut::new(),
            utf8: Utf8Stream::default(),
        }
    }

    /// Between frames and messages: no header kept, no fragmented message in progress, so the
    /// next bytes start a frame that may take the fast lane.
    pub(crate) fn is_idle(&self) -> bool {
        self.current.is_none() && self.fragmented.is_none()
    }

    /// A fragmented message is in progress (its first frame was decoded, not its last).
    pub(crate) fn is_assembling(&self) -> bool {
        self.fragmented.is_some()
    }

    /// Largest payload (bytes) an unfragmented message may have under both limits.
    pub(crate) fn max_unfragmented_payload(&self) -> usize {
        self.max_frame_size.min(self.max_message_size)
    }

    /// Decodes complete frames from `input` into `out`. The next call must pass the input
    /// again starting at `Progress::consumed` (plus whatever arrived since). On error, `out`
    /// still holds what was complete before the violation.
    pub fn decode(
        &mut self,
        input: &[u8],
        out: &mut Vec<Decoded>,
    ) -> Result<Progress, ProtocolError> {
        self.decode_some(input, out, false)
    }

    /// [`decode`](Self::decode), stopping early with `until_idle` as soon as at least one
    /// frame was decoded and the decoder [`is_idle`](Self::is_idle) (so that the engine's
    /// fast lane can take over).
    pub(crate) fn decode_some(
        &mut self,
        input: &[u8],
        out: &mut Vec<Decoded>,
        until_idle: bool,
    ) -> Result<Progress, ProtocolError> {
        let mut pos = 0;
        loop {
            if until_idle && pos > 0 && self.is_idle() {
                return Ok(Progress {
                    consumed: pos,
                    frame_hint: 0,
                });
            }
            let header = match self.current.take() {
                Some(h) => h,
                None => match parse_header(&input[pos..], self.max_frame_size)? {
                    Some(h) => {
                        self.check_sequence(&h)?;
                        h
                    }
                    None => {
                        return Ok(Progress {
                            consumed: pos,
                            frame_hint: 0,
                        })
                    }
                },
            };
            let payload_start = pos + header.header_len;
            let frame_end = pos + header.frame_len();
            let available_end = frame_end.min(input.len());
            if self.is_text(header.opcode) && payload_start + self.validated < available_end {
                let piece = &input[payload_start + self.validated..available_end];
                let ends_message = header.fin && frame_end <= input.len();
                let checked = if ends_message {
                    self.utf8.feed_last(piece)
                } else {
                    self.utf8.feed(piece)
                };
                checked.map_err(|_| ProtocolError::InvalidUtf8)?;
                self.validated = available_end - payload_start;
            }
            if frame_end > input.len() {
                self.current = Some(header);
                return Ok(Progress {
                    consumed: pos,
                    frame_hint: header.frame_len(),
                });
            }
            self.validated = 0;
            let payload = payload_start..frame_end;
            pos = frame_end;
            match header.opcode {
                Opcode::Text | Opcode::Binary => {
                    let kind = if header.opcode == Opcode::Text {
                        MessageKind::Text
                    } else {
                        MessageKind::Binary
                    };
                    if header.fin {
                        self.finish_text(kind)?;
                        out.push(Decoded::Message { kind, payload });
                    } else {
                        self.fragmented = Some(kind);
                        self.assembly.extend_from_slice(&input[payload]);
                    }
                }
                Opcode::Continuation => {
                    self.assembly.extend_from_slice(&input[payload]);
                    if header.fin {
                        let kind = self
                            .fragmented
                            .take()
                            .expect("check_sequence saw a message in progress");
                        self.finish_text(kind)?;
                        out.push(Decoded::Assembled {
                            kind,
                            payload: self.assembly.split().freeze(),
                        });
                    }
                }
                Opcode::Ping => out.push(Decoded::Ping(payload)),
                Opcode::Pong => out.push(Decoded::Pong(payload)),
                Opcode::Close => {
                    let code = parse_close_payload(&input[payload.clone()])?;
                    let reason = (payload.start + 2).min(payload.end)..payload.end;
                    out.push(Decoded::Close { code, reason });
                    return Ok(Progress {
                        consumed: pos,
                        frame_hint: 0,
                    });
                }
            }
        }
    }

    fn is_text(&self, opcode: Opcode) -> bool {
        match opcode {
            Opcode::Text => true,
            Opcode::Continuation => self.fragmented == Some(MessageKind::Text),
            _ => false,
        }
    }

    fn finish_text(&mut self, kind: MessageKind) -> Result<(), ProtocolError> {
        if kind == MessageKind::Text {
            self.utf8.finish().map_err(|_| ProtocolError::InvalidUtf8)?;
        }
        Ok(())
    }

    /// RFC 6455 §5.4 fragmentation rules and the message size limit, checked on the header
    /// so that an oversized message fails before its payload is buffered.
    fn check_sequence(&self, h: &FrameHeader) -> Result<(), ProtocolError> {
        let so_far = match (h.opcode, self.fragmented) {
            (Opcode::Continuation, None) => return Err(ProtocolError::UnexpectedContinuation),
            (Opcode::Text | Opcode::Binary, Some(_)) => {
                return Err(ProtocolError::ExpectedContinuation)
            }
            (Opcode::Continuation, Some(_)) => self.assembly.len(),
            (Opcode::Text | Opcode::Binary, None) => 0,
            _ => return Ok(()),
        };
        let len = (so_far + h.payload_len) as u64;
        if len > self.max_message_size as u64 {
            return Err(ProtocolError::MessageTooLarge {
                len,
                max: self.max_message_size,
            });
        }
        Ok(())
    }
}
