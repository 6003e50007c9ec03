//! [`WebSocketClient`]: the sans-IO client connection.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::{Bytes, BytesMut};

use super::decoder::{Decoded, FrameDecoder};
use super::event::{CloseFrame, CloseInitiator, Event, Handshake, Message};
use super::pong::OwedPong;
use super::simple_frame::simple_data_frame;
use crate::config::WsConfig;
use crate::deadline::after;
use crate::endpoint::Endpoint;
use crate::error::{close_code, ConfigError, Error, HandshakeError, Refusal, SendError};
use crate::frame::Opcode;
use crate::handshake::{accept_key, build_request, encode_key, parse_response, ParsedResponse};
use crate::offer::{offer_in_order, Offered, Take, TakeNothing};
use crate::read_buffer::ReadBuffer;
use crate::read_room::ReadSpare;
use crate::rng::{MaskRng, Seed};
use crate::text_lane::{in_vectors, Lane, TextCheck};
use crate::transmit::TransmitQueue;
use crate::ws::MessageKind;

/// Where a connection is in its life.
///
/// ```text
///  Handshaking ──101 + checks──▶ Open ──close()──▶ Closing ──peer Close──▶ Closed
///      │                          │                   │
///      │                          └──peer Close (echoed)──────────────────▶ Closed
///      └──non-101 / bad head / EOF──▶ Failed ◀──violation / EOF / close timeout──┘
/// ```
/// `Closed` and `Failed` are terminal: input is ignored and nothing more is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum State {
    /// Upgrade request queued or sent; waiting for the response head.
    Handshaking,
    /// Data flows both ways.
    Open,
    /// We sent Close and wait for the peer's (see [`WsConfig::close_timeout`]).
    Closing,
    /// The close handshake completed.
    Closed,
    /// The connection failed; see [`WebSocketClient::error`].
    Failed,
}

#[derive(Debug)]
enum Phase {
    Handshaking {
        expected_accept: String,
    },
    /// A non-101 response: collecting its body to report it.
    Refused {
        status: u16,
        reason: String,
        body: BytesMut,
        remaining: Option<usize>,
        retry_after: Option<std::time::Duration>,
    },
    Open,
    Closing {
        deadline: Instant,
        frame: CloseFrame,
    },
    Closed,
    Failed(Error),
}

/// Unsent bytes past which Pings are answered by one Pong for the latest (RFC 6455 §5.5.3):
/// sixty Pongs of the largest size.
const PONG_ROOM: usize = 8 * 1024;

/// A sans-IO WebSocket client connection (RFC 6455): bytes in, events and bytes-to-send out.
/// It performs no I/O, reads no clock and spawns nothing.
///
/// # Calling contract
/// The caller owns the socket; the engine owns the read buffer. After creating the engine and
/// after **every** call that changes it (`handle_*`, `send_*`, `close`, `ping`), drain its
/// output before waiting again:
/// 1. write every chunk from [`poll_transmit`](Self::poll_transmit) to the socket, in order;
/// 2. take every event from [`poll_event`](Self::poll_event);
/// 3. wait for readability or until [`poll_timeout`](Self::poll_timeout), then read at most
///    `read_buf().len()` bytes into [`read_buf`](Self::read_buf) and report the count with
///    [`handle_read`](Self::handle_read) (0 bytes = end of stream: call
///    [`handle_eof`](Self::handle_eof)), or call [`handle_timeout`](Self::handle_timeout).
///
/// Close the socket once [`is_finished`](Self::is_finished) is true.
///
/// ```no_run
/// use std::io::{Read, Write};
/// use feedwire_core::{os_seed, Event, WebSocketClient, WsConfig};
///
/// let mut ws = WebSocketClient::new("ws://127.0.0.1:9001/", WsConfig::default(), os_seed())?;
/// let mut sock = std::net::TcpStream::connect(("127.0.0.1", 9001))?;
/// while !ws.is_finished() {
///     while let Some(chunk) = ws.poll_transmit() {
///         sock.write_all(&chunk)?;
///     }
///     while let Some(event) = ws.poll_event() {
///         if let Event::Message(m) = event {
///             println!("{} bytes", m.payload.len());
///         }
///     }
///     if ws.is_finished() {
///         break;
///     }
///     match sock.read(ws.read_buf())? {
///         0 => ws.handle_eof(),
///         n => ws.handle_read(n),
///     }
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct WebSocketClient {
    config: WsConfig,
    endpoint: Endpoint,
    phase: Phase,
    rb: ReadBuffer,
    decoder: FrameDecoder,
    /// Reused between reads so decoding allocates nothing in steady state.
    decoded: Vec<Decoded>,
    tx: TransmitQueue,
    /// The latest Ping's Pong while `tx` is too full to take it, framed into `tx` when the
    /// transport next asks for bytes. INVARIANT: owed only while `Open`: queueing our Close
    /// frames it first, a failure drops it.
    pong: OwedPong,
    rng: MaskRng,
    events: VecDeque<Event>,
}

impl WebSocketClient {
    /// Creates a connection to `url` (`ws://` or `wss://`) and queues the upgrade request.
    /// `seed` seeds the CSPRNG for `Sec-WebSocket-Key` and mask keys: [`crate::os_seed`] in
    /// production, a constant in tests.
    pub fn new(url: &str, config: WsConfig, seed: Seed) -> Result<Self, ConfigError> {
        let endpoint = Endpoint::parse(url)?;
        if !endpoint.scheme.is_websocket() {
            return Err(ConfigError::UnsupportedScheme(format!(
                "{:?}",
                endpoint.scheme
            )));
        }
        config.validate()?;
        let mut rng = MaskRng::from_seed(seed);
        let mut nonce = [0u8; 16];
        rng.fill(&mut nonce);
        let key = encode_key(&nonce);
        let mut tx = TransmitQueue::default();
        tx.push_raw(Bytes::from(build_request(&endpoint, &key, &config)));
        Ok(Self {
            rb: ReadBuffer::new(config.max_read_size),
            decoder: FrameDecoder::new(config.max_frame_size, config.max_message_size),
            decoded: Vec::new(),
            phase: Phase::Handshaking {
                expected_accept: accept_key(key.as_bytes()),
            },
            tx,
            pong: OwedPong::default(),
            rng,
            events: VecDeque::new(),
            config,
            endpoint,
        })
    }

    // ----- getters -----

    /// The current state.
    pub fn state(&self) -> State {
        match self.phase {
            Phase::Handshaking { .. } | Phase::Refused { .. } => State::Handshaking,
            Phase::Open => State::Open,
            Phase::Closing { .. } => State::Closing,
            Phase::Closed => State::Closed,
            Phase::Failed(_) => State::Failed,
        }
    }

    /// The failure that ended the connection (sticky), if it failed.
    pub fn error(&self) -> Option<&Error> {
        match &self.phase {
            Phase::Failed(e) => Some(e),
            _ => None,
        }
    }

    /// Where this connection goes: host and port to dial, whether TLS wraps it.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &WsConfig {
        &self.config
    }

    /// Closed or failed, and every queued byte handed out: the transport may close the socket.
    pub fn is_finished(&self) -> bool {
        matches!(self.phase, Phase::Closed | Phase::Failed(_)) && self.tx.is_empty()
    }

    /// Bytes waiting in [`poll_transmit`](Self::poll_transmit).
    pub fn queued_bytes(&self) -> usize {
        self.tx.queued_bytes()
    }

    /// Bytes allocated to the read buffer: the block it writes into, plus up to two earlier
    /// blocks kept for reuse once the application has dropped their messages.
    pub fn read_buffer_capacity(&self) -> usize {
        self.rb.capacity() + self.rb.retained()
    }

    /// Reviews the read size; call it once a period on a connection that is reading (a
    /// [`Stream`](crate::Stream) does every `release_read_memory`, 1 s by default). Reads
    /// grow while they fill what they are offered; if no read since the last review took
    /// more than a quarter of the read size, it shrinks to the power of two at least twice
    /// the largest of them (at least 1 KiB), and the next read leaves a block more than twice
    /// the new size: a connection that had a burst does not keep a burst's buffer, nor, when
    /// its messages are cut out and queued, walk it with small reads. Returns whether it
    /// shrank.
    pub fn review_read_size(&mut self) -> bool {
        self.rb.review_read_size()
    }

    /// Frees the read buffer's block if no partial frame is buffered; returns whether it did.
    /// The event queue's room goes too, when it holds no event.
    /// For transports holding many mostly-idle connections: call it when a connection goes
    /// quiet, not after every read (the next read would allocate and zero a new block).
    pub fn release_read_buffer(&mut self) -> bool {
        if self.events.is_empty() {
            // Its room was a read's events (or the handshake's): nothing a quiet
            // connection needs.
            self.events = VecDeque::new();
        }
        self.rb.release_if_empty()
    }

    /// Bytes still missing from the frame being received, once its header is in; 0 when no
    /// frame is partly received or its length is not known yet. No message can complete
    /// before that many more bytes arrive.
    pub fn missing_frame_bytes(&self) -> usize {
        self.rb.frame_rest()
    }

    // ----- input -----

    /// Space for the next read: at most [`WsConfig::max_read_size`] bytes, never empty.
    pub fn read_buf(&mut self) -> &mut [u8] {
        self.rb.read_buf()
    }

    /// [`read_buf`](Self::read_buf)'s room as uninitialised memory, for a transport that can
    /// read into it (see [`ReadSpare`]): the same bytes offered, without zeroing them first.
    pub fn read_spare(&mut self) -> ReadSpare<'_> {
        self.rb.read_spare()
    }

    /// The transport wrote `n` bytes at the start of [`read_buf`](Self::read_buf) (or through
    /// [`read_spare`](Self::read_spare)); decodes everything complete. Every message whose
    /// last byte is among them is queued as an event before this returns.
    ///
    /// # Panics
    /// If `n` exceeds what the transport wrote into the room it was offered (a transport bug).
    pub fn handle_read(&mut self, n: usize) {
        self.rb.commit(n);
        self.process(&mut TakeNothing);
    }

    /// [`handle_read`](Self::handle_read) for an embedding engine with a fast path: each
    /// complete data message is first offered to `take` (lent or owned, see [`Take`]), as
    /// long as no event is queued ahead of it; a message `take` does not take, like every
    /// event after it, is queued as usual. Messages therefore come out in order whether taken
    /// or queued, and a taken message skips the event queue.
    pub(crate) fn handle_read_offering(&mut self, n: usize, take: &mut impl Take) {
        self.rb.commit(n);
        if !self.took_whole_read(take) {
            self.process(take);
        }
    }

    /// The fast lane alone, for a read that starts and ends on frame boundaries and holds
    /// only complete data frames (a stream that keeps up: a paced stream's every read);
    /// whether it took the whole read. Anything else is left to [`process`](Self::process),
    /// whose general paths, inlined with the lane, make every call set up and spill the
    /// addresses they use: a paced read of one 0.2 KB message cost 224 instructions there,
    /// 198 here (callgrind). A function of its own so that `process`, where a busy stream's
    /// reads go (a read that ends inside a frame leaves the next one to the general decoder
    /// first), compiles as before.
    #[inline(never)]
    fn took_whole_read(&mut self, take: &mut impl Take) -> bool {
        matches!(self.phase, Phase::Open) && self.lane_took_all(take)
    }

    /// The fast lane, where it may take messages (no event queued ahead of them, the decoder
    /// between frames); whether it took every byte there was.
    #[inline(always)]
    fn lane_took_all(&mut self, take: &mut impl Take) -> bool {
        if !(self.events.is_empty() && self.decoder.is_idle()) {
            return false;
        }
        self.take_simple_frames(take);
        if !self.rb.filled().is_empty() {
            return false;
        }
        // The idle decoder would find no header and report nothing, at more cost than the
        // lane's.
        self.rb.set_frame_hint(0);
        true
    }

    /// Feeds bytes the caller already holds, as if read in pieces of at most
    /// `max_read_size`. Copies; transports should read into [`read_buf`](Self::read_buf).
    pub fn handle_input(&mut self, data: &[u8]) {
        crate::tls::PlaintextSink::feed(self, data);
    }

    /// The transport reached end of stream.
    pub fn handle_eof(&mut self) {
        match &mut self.phase {
            Phase::Handshaking { .. } => self.fail(HandshakeError::Eof.into()),
            Phase::Refused { .. } => self.finish_refusal(),
            Phase::Open | Phase::Closing { .. } => self.fail(Error::UnexpectedEof),
            Phase::Closed | Phase::Failed(_) => {}
        }
    }

    /// Acts on deadlines that passed by `now`: the close timeout.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let Phase::Closing { deadline, .. } = self.phase {
            if now >= deadline {
                self.fail(Error::CloseTimeout);
            }
        }
    }

    // ----- commands -----

    /// Sends a text message (copied and masked in one pass).
    pub fn send_text(&mut self, text: &str) -> Result<(), SendError> {
        self.send_borrowed(Opcode::Text, text.as_bytes())
    }

    /// Sends a binary message (copied and masked in one pass).
    pub fn send_binary(&mut self, data: &[u8]) -> Result<(), SendError> {
        self.send_borrowed(Opcode::Binary, data)
    }

    /// Sends a message whose buffer the caller gives up: masked in place and queued without
    /// a copy. A text payload must be UTF-8 (it is not re-checked).
    pub fn send_owned(
        &mut self,
        kind: MessageKind,
        mut payload: BytesMut,
    ) -> Result<(), SendError> {
        self.check_open()?;
        let first = data_opcode(kind);
        let size = self.config.fragment_size.unwrap_or(usize::MAX).max(1);
        let mut opcode = first;
        loop {
            let piece = payload.split_to(payload.len().min(size));
            let fin = payload.is_empty();
            let key = self.rng.mask_key();
            self.tx.push_frame_owned(fin, opcode, piece, key);
            opcode = Opcode::Continuation;
            if fin {
                return Ok(());
            }
        }
    }

    /// Sends a Ping with `payload` (at most 125 bytes).
    pub fn ping(&mut self, payload: &[u8]) -> Result<(), SendError> {
        self.check_open()?;
        if payload.len() > 125 {
            return Err(SendError::ControlPayloadTooLong(payload.len()));
        }
        let key = self.rng.mask_key();
        self.tx.push_frame(true, Opcode::Ping, payload, key);
        Ok(())
    }

    /// Starts the close handshake: queues Close(`code`, `reason`) and waits for the peer's
    /// Close until `now + close_timeout`. Messages that arrive meanwhile are still delivered.
    pub fn close(&mut self, code: u16, reason: &str, now: Instant) -> Result<(), SendError> {
        self.check_open()?;
        if !close_code::is_sendable(code) {
            return Err(SendError::InvalidCloseCode(code));
        }
        if reason.len() > 123 {
            return Err(SendError::ControlPayloadTooLong(reason.len() + 2));
        }
        self.queue_close(code, reason.as_bytes());
        let frame = CloseFrame {
            code,
            reason: Bytes::copy_from_slice(reason.as_bytes()),
        };
        tracing::debug!(code, host = %self.endpoint.host, "websocket close started by us");
        self.events.push_back(Event::CloseStarted {
            by: CloseInitiator::Local,
            frame: frame.clone(),
        });
        self.phase = Phase::Closing {
            deadline: after(now, self.config.close_timeout),
            frame,
        };
        Ok(())
    }

    // ----- output -----

    /// The next chunk of bytes to write to the transport, in order. A transport may stop
    /// asking while its peer is not reading (see [`crate::WriteQueue`]): what the engine
    /// queues by itself meanwhile stays bounded, since it answers only the latest Ping.
    #[must_use]
    #[inline]
    pub fn poll_transmit(&mut self) -> Option<Bytes> {
        // One byte compared on every call (every read of a paced stream makes one): the
        // framing is out of line.
        if self.pong.is_owed() {
            self.frame_owed_pong();
        }
        self.tx.pop()
    }

    /// Whether [`poll_event`](Self::poll_event) has an event to return.
    #[must_use]
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// Bytes of room the event queue holds, used or not.
    pub(crate) fn event_room(&self) -> usize {
        self.events.capacity() * std::mem::size_of::<Event>()
    }

    /// Whether a data message is partly received: a fragmented one in progress, or the
    /// unconsumed input starting with a data frame's header (opcode below 8; the input
    /// always starts at the header of the frame it ends inside).
    pub(crate) fn is_receiving_a_message(&self) -> bool {
        self.decoder.is_assembling() || self.rb.filled().first().is_some_and(|&b| b & 0x0F < 8)
    }

    /// The next event.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The earliest deadline at which [`handle_timeout`](Self::handle_timeout) must be called.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.phase {
            Phase::Closing { deadline, .. } => Some(deadline),
            _ => None,
        }
    }

    // ----- internals -----

    fn check_open(&self) -> Result<(), SendError> {
        match self.phase {
            Phase::Open => Ok(()),
            _ => Err(SendError::NotOpen),
        }
    }

    fn send_borrowed(&mut self, first: Opcode, data: &[u8]) -> Result<(), SendError> {
        self.check_open()?;
        let size = self.config.fragment_size.unwrap_or(usize::MAX).max(1);
        let mut opcode = first;
        let mut rest = data;
        loop {
            let (piece, tail) = rest.split_at(rest.len().min(size));
            rest = tail;
            let key = self.rng.mask_key();
            self.tx.push_frame(rest.is_empty(), opcode, piece, key);
            opcode = Opcode::Continuation;
            if rest.is_empty() {
                return Ok(());
            }
        }
    }

    /// A Pong per Ping while the transport takes our bytes; once it has left
    /// [`PONG_ROOM`] bytes unsent (its peer is not reading), only the latest Ping's Pong is
    /// kept ([`OwedPong`]), so that a Ping flood cannot grow the queue.
    fn answer_ping(&mut self, payload: &[u8]) {
        if self.tx.queued_bytes() < PONG_ROOM {
            let key = self.rng.mask_key();
            self.tx.push_frame(true, Opcode::Pong, payload, key);
        } else {
            self.pong.owe(payload);
        }
    }

    /// Queues the owed Pong, if any, behind what `tx` holds (a frame's header and payload
    /// may be separate chunks there: nothing is put between them).
    #[cold]
    #[inline(never)]
    fn frame_owed_pong(&mut self) {
        if let Some(payload) = self.pong.take() {
            let key = self.rng.mask_key();
            self.tx.push_frame(true, Opcode::Pong, payload, key);
        }
    }

    fn queue_close(&mut self, code: u16, reason: &[u8]) {
        // Nothing may follow our Close: the Pong owed goes first.
        self.frame_owed_pong();
        let mut payload = [0u8; 125];
        let len = if code == close_code::NO_STATUS {
            0
        } else {
            payload[..2].copy_from_slice(&code.to_be_bytes());
            payload[2..2 + reason.len()].copy_from_slice(reason);
            2 + reason.len()
        };
        let key = self.rng.mask_key();
        self.tx
            .push_frame(true, Opcode::Close, &payload[..len], key);
    }

    fn process(&mut self, take: &mut impl Take) {
        loop {
            match &self.phase {
                Phase::Handshaking { .. } => {
                    if !self.process_handshake() {
                        return;
                    }
                }
                Phase::Refused { .. } => return self.process_refusal_body(),
                Phase::Open | Phase::Closing { .. } => return self.process_frames(take),
                Phase::Closed | Phase::Failed(_) => {
                    let all = self.rb.filled().len();
                    self.rb.consume(all);
                    self.rb.release_if_empty();
                    return;
                }
            }
        }
    }

    /// Returns whether processing should go on in the new phase.
    fn process_handshake(&mut self) -> bool {
        let Phase::Handshaking { expected_accept } = &self.phase else {
            unreachable!("process_handshake is only called while handshaking");
        };
        let max = self.config.max_handshake_size;
        // Parse at most `max` bytes, so the outcome does not depend on how much arrived
        // beyond the cap in one read.
        let filled = self.rb.filled();
        let buf = &filled[..filled.len().min(max)];
        let parsed = parse_response(buf, expected_accept, &self.config.subprotocols);
        match parsed {
            Ok(None) if buf.len() >= max => self.fail(HandshakeError::HeadTooLarge { max }.into()),
            Ok(None) => {}
            Ok(Some(ParsedResponse::Accepted {
                head_len,
                headers,
                subprotocol,
            })) => {
                self.rb.consume(head_len);
                self.phase = Phase::Open;
                tracing::debug!(host = %self.endpoint.host, "websocket opened");
                self.events.push_back(Event::Opened(Handshake {
                    headers,
                    subprotocol,
                }));
                return true;
            }
            Ok(Some(ParsedResponse::Refused {
                head_len,
                status,
                reason,
                content_length,
                retry_after,
            })) => {
                self.rb.consume(head_len);
                self.phase = Phase::Refused {
                    status,
                    reason,
                    body: BytesMut::new(),
                    remaining: content_length,
                    retry_after,
                };
                return true;
            }
            Err(e) => self.fail(e.into()),
        }
        false
    }

    fn process_refusal_body(&mut self) {
        let cap = self.config.max_handshake_size;
        let Phase::Refused {
            body, remaining, ..
        } = &mut self.phase
        else {
            unreachable!("process_refusal_body is only called while refused");
        };
        let available = self.rb.filled().len();
        let want = remaining.unwrap_or(usize::MAX).min(cap - body.len());
        let take = available.min(want);
        body.extend_from_slice(&self.rb.consume(take));
        if let Some(r) = remaining {
            *r -= take;
        }
        let done = *remaining == Some(0) || body.len() >= cap;
        if done {
            self.finish_refusal();
        }
    }

    fn finish_refusal(&mut self) {
        let Phase::Refused {
            status,
            reason,
            body,
            retry_after,
            ..
        } = std::mem::replace(&mut self.phase, Phase::Closed)
        else {
            unreachable!("finish_refusal is only called while refused");
        };
        self.fail(
            HandshakeError::Rejected {
                status,
                refusal: Box::new(Refusal {
                    reason,
                    body: body.freeze(),
                    retry_after,
                }),
            }
            .into(),
        );
    }

    /// Alternates between the fast lane (while it may take messages) and the general decoder
    /// (one frame or fragmented message at a time while the fast lane may resume, else to the
    /// end of the input).
    fn process_frames(&mut self, take: &mut impl Take) {
        loop {
            let lane_open = self.events.is_empty();
            if self.lane_took_all(take) {
                return;
            }
            if !self.decode_general(take, lane_open) {
                return;
            }
        }
    }

    /// Runs the general decoder; whether it consumed bytes and the connection still takes
    /// frames (so that the fast lane should look again).
    fn decode_general<T: Take>(&mut self, take: &mut T, until_idle: bool) -> bool {
        let mut decoded = std::mem::take(&mut self.decoded);
        let result = self
            .decoder
            .decode_some(self.rb.filled(), &mut decoded, until_idle);
        let (consumed, hint) = match result {
            Ok(p) => (p.consumed, p.frame_hint),
            Err(_) => (self.rb.filled().len(), 0),
        };
        if T::LENDS
            && result.is_ok()
            && self.events.is_empty()
            && self.lend_decoded(&decoded, consumed, take)
        {
            decoded.clear();
            self.decoded = decoded;
            self.rb.set_frame_hint(hint);
            return consumed > 0 && until_idle;
        }
        let input = self.rb.consume(consumed);
        self.rb.set_frame_hint(hint);
        for item in decoded.drain(..) {
            match item {
                Decoded::Message { kind, payload } => self.offer(
                    Message {
                        kind,
                        payload: input.slice(payload),
                    },
                    take,
                ),
                Decoded::Assembled { kind, payload } => self.offer(Message { kind, payload }, take),
                Decoded::Ping(range) => {
                    if matches!(self.phase, Phase::Open) {
                        self.answer_ping(&input[range.clone()]);
                    }
                    self.events.push_back(Event::Ping(input.slice(range)));
                }
                Decoded::Pong(range) => self.events.push_back(Event::Pong(input.slice(range))),
                Decoded::Close { code, reason } => self.on_peer_close(code, input.slice(reason)),
            }
        }
        self.decoded = decoded;
        if let Err(e) = result {
            self.fail(e.into());
            false
        } else if matches!(self.phase, Phase::Closed) {
            self.process(take);
            false
        } else {
            consumed > 0 && until_idle
        }
    }

    /// A lending stream's message that the general decoder completed (a frame that arrived
    /// over several reads, so the decoder held its header) is lent in place like the fast
    /// lane's, and the buffer lets go of it without cutting it out: cutting would give up the
    /// block's front for good, and the next reads would zero the block again (per frame for
    /// frames larger than a read). Only the one-message case: anything else (a control frame,
    /// an assembled message) goes the general way. Whether `decoded` was handled here. Called
    /// only while no event is queued (one the fast lane declined included), so nothing is lent
    /// ahead of one.
    fn lend_decoded(&mut self, decoded: &[Decoded], consumed: usize, take: &mut impl Take) -> bool {
        let [Decoded::Message { kind, payload }] = decoded else {
            return false;
        };
        let filled = self.rb.filled();
        if take.lend(
            &filled[payload.clone()],
            Offered::frame(*kind == MessageKind::Binary),
        ) {
            self.rb.discard(consumed);
        } else {
            // Declined (not data for the stream): queued as the general path would have.
            let input = self.rb.consume(consumed);
            self.events.push_back(Event::Message(Message {
                kind: *kind,
                payload: input.slice(payload.clone()),
            }));
        }
        true
    }

    /// The fast lane: complete, final, unmasked data frames at the front of the buffer go
    /// out in one tight loop (header, UTF-8, slice). It stops before the first frame that is
    /// anything else — or whose text is not valid UTF-8 — and the general decoder takes it
    /// from there, so every error is reported exactly as without this lane. The loop runs
    /// compiled for the widest vectors in use, the taker inlined ([`crate::text_lane`]).
    fn take_simple_frames<T: Take>(&mut self, take: &mut T) {
        in_vectors(SimpleFrames { client: self, take });
    }

    /// [`take_simple_frames`](Self::take_simple_frames) for a stream that takes owned
    /// messages (or none), each text message checked with `check`.
    #[inline(always)]
    fn own_simple_frames(&mut self, check: impl TextCheck, take: &mut impl Take) {
        let max = self.decoder.max_unfragmented_payload();
        let filled = self.rb.filled();
        let mut end = 0;
        while let Some((kind, header, len)) = simple_data_frame(&filled[end..], max) {
            let payload = &filled[end + header..end + header + len];
            if kind == MessageKind::Text && !check.is_valid(payload) {
                break;
            }
            end += header + len;
        }
        if end == 0 {
            return;
        }
        let input = self.rb.consume(end);
        // The headers are read again rather than remembered: 2-4 bytes each, cheaper than
        // writing and reading back a list of ranges.
        let mut at = 0;
        while let Some((kind, header, len)) = simple_data_frame(&input[at..], max) {
            let payload = input.slice(at + header..at + header + len);
            at += header + len;
            self.offer(Message { kind, payload }, take);
        }
    }

    /// The fast lane for a stream that borrows: each frame is validated (with `check`) and lent
    /// in one pass while it is still in the buffer, and the buffer lets go of the lent
    /// frames without cutting a slice for any of them. A frame the stream does not take is
    /// queued (which closes the lane: everything after it is queued behind it).
    #[inline(always)]
    fn lend_simple_frames(&mut self, check: impl TextCheck, take: &mut impl Take) {
        let max = self.decoder.max_unfragmented_payload();
        let filled = self.rb.filled();
        let mut end = 0;
        let mut declined = None;
        while let Some((kind, header, len)) = simple_data_frame(&filled[end..], max) {
            let payload = &filled[end + header..end + header + len];
            if kind == MessageKind::Text && !check.is_valid(payload) {
                break;
            }
            if !take.lend(payload, Offered::frame(kind == MessageKind::Binary)) {
                declined = Some((kind, header, len));
                break;
            }
            end += header + len;
        }
        self.rb.discard(end);
        if let Some((kind, header, len)) = declined {
            let frame = self.rb.consume(header + len);
            self.events.push_back(Event::Message(Message {
                kind,
                payload: frame.slice(header..),
            }));
        }
    }

    /// Hands `message` to `take` unless an event is queued ahead of it (order is kept).
    fn offer(&mut self, message: Message, take: &mut impl Take) {
        let Message { kind, payload } = message;
        let offered = Offered::frame(kind == MessageKind::Binary);
        offer_in_order(
            &mut self.events,
            payload,
            |payload| take.take(payload, offered),
            |payload| Event::Message(Message { kind, payload }),
        );
    }

    fn on_peer_close(&mut self, code: u16, reason: Bytes) {
        match std::mem::replace(&mut self.phase, Phase::Closed) {
            Phase::Open => {
                // RFC 6455 §5.5.1: echo the status code received.
                self.queue_close(code, b"");
                tracing::debug!(code, host = %self.endpoint.host, "websocket closed by peer");
                let frame = CloseFrame { code, reason };
                self.events.push_back(Event::CloseStarted {
                    by: CloseInitiator::Remote,
                    frame: frame.clone(),
                });
                self.events.push_back(Event::Closed {
                    by: CloseInitiator::Remote,
                    frame,
                });
            }
            Phase::Closing { frame, .. } => {
                tracing::debug!(code, host = %self.endpoint.host, "websocket close handshake completed");
                self.events.push_back(Event::Closed {
                    by: CloseInitiator::Local,
                    frame,
                });
            }
            other => self.phase = other,
        }
    }

    fn fail(&mut self, error: Error) {
        if matches!(self.phase, Phase::Open) {
            if let Error::Protocol(p) = &error {
                self.queue_close(p.close_code(), b"");
            }
        }
        // Failed without a Close (or after one): nothing more is answered.
        let _ = self.pong.take();
        tracing::debug!(%error, host = %self.endpoint.host, "websocket connection failed");
        self.events.push_back(Event::Failed(error.clone()));
        self.phase = Phase::Failed(error);
        let all = self.rb.filled().len();
        self.rb.consume(all);
    }
}

fn data_opcode(kind: MessageKind) -> Opcode {
    match kind {
        MessageKind::Text => Opcode::Text,
        MessageKind::Binary => Opcode::Binary,
    }
}

/// The fast lane's loop over one read, for [`in_vectors`]: lending or owning as the taker
/// does.
struct SimpleFrames<'a, T> {
    client: &'a mut WebSocketClient,
    take: &'a mut T,
}

impl<T: Take> Lane for SimpleFrames<'_, T> {
    type Output = ();

    #[inline(always)]
    fn run<C: TextCheck>(self, check: C) {
        if T::LENDS {
            self.client.lend_simple_frames(check, self.take);
        } else {
            self.client.own_simple_frames(check, self.take);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offer::Lent;
    use crate::testing::{accept_response, server_frame};

    fn open() -> WebSocketClient {
        let mut ws = WebSocketClient::new("ws://127.0.0.1:9/s", WsConfig::default(), [7; 32])
            .expect("valid config");
        let mut request = Vec::new();
        while let Some(chunk) = ws.poll_transmit() {
            request.extend_from_slice(&chunk);
        }
        ws.handle_input(&accept_response(&request));
        assert!(matches!(ws.poll_event(), Some(Event::Opened(_))));
        ws
    }

    /// Reads `bytes` in offering reads (as many as the reads' sizes take) to a taker that
    /// lends; what it was lent.
    fn offer_read(ws: &mut WebSocketClient, mut bytes: &[u8]) -> Vec<Vec<u8>> {
        let mut lent = Vec::new();
        while !bytes.is_empty() {
            let buf = ws.read_buf();
            let n = buf.len().min(bytes.len());
            buf[..n].copy_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            ws.handle_read_offering(
                n,
                &mut Lent(|payload: &[u8], _| {
                    lent.push(payload.to_vec());
                    true
                }),
            );
        }
        lent
    }

    #[test]
    fn a_read_of_whole_data_frames_is_lent_but_never_ahead_of_a_queued_event() {
        let mut ws = open();
        // A read of whole data frames (a stream that keeps up): all lent, nothing queued.
        let two = [server_frame(true, 1, b"a"), server_frame(true, 1, b"b")].concat();
        assert_eq!(offer_read(&mut ws, &two), [b"a".to_vec(), b"b".to_vec()]);
        assert!(ws.poll_event().is_none());
        // A ping's event, left unpolled: the next read's data queues behind it, in order.
        ws.handle_input(&server_frame(true, 9, b"p"));
        assert!(offer_read(&mut ws, &server_frame(true, 1, b"c")).is_empty());
        assert!(matches!(ws.poll_event(), Some(Event::Ping(p)) if p[..] == b"p"[..]));
        assert!(matches!(ws.poll_event(), Some(Event::Message(m)) if m.payload[..] == b"c"[..]));
        assert!(ws.poll_event().is_none());
        // A frame cut by the read: the rest arrives with a whole frame behind it.
        let cut = [server_frame(true, 1, b"dd"), server_frame(true, 1, b"e")].concat();
        assert_eq!(offer_read(&mut ws, &cut[..3]), Vec::<Vec<u8>>::new());
        assert_eq!(
            offer_read(&mut ws, &cut[3..]),
            [b"dd".to_vec(), b"e".to_vec()]
        );
        assert!(ws.poll_event().is_none());
        // A frame larger than a read, whose header the general decoder holds: the read that
        // ends it starts inside its payload, which the fast lane must not take for a header.
        let big = vec![b'x'; 300_000];
        let frames = [server_frame(true, 1, &big), server_frame(true, 1, b"f")].concat();
        let lent = offer_read(&mut ws, &frames);
        assert_eq!(lent.len(), 2);
        assert!(lent[0] == big && lent[1] == b"f");
        assert!(ws.poll_event().is_none());
    }
}
