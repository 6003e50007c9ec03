//! Server-side helpers for tests, fuzz targets and benchmarks: a scripted peer needs to
//! answer the handshake and write unmasked server frames. Not a stable API.

use crate::handshake::accept_key;
pub use crate::text_lane::{in_vectors, Lane, TextCheck};

/// An unmasked server frame with raw `opcode` bits (reserved ones included, for tests).
pub fn server_frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 10);
    crate::frame::push_server_frame(&mut out, fin, opcode, payload);
    out
}

/// The `101 Switching Protocols` answer to a client's upgrade request.
///
/// # Panics
/// If `request` carries no `Sec-WebSocket-Key` header (test input is wrong).
pub fn accept_response(request: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(request);
    let key = text
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("sec-websocket-key")
                .then(|| value.trim().to_owned())
        })
        .expect("request has Sec-WebSocket-Key");
    format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {}\r\n\r\n",
        accept_key(key.as_bytes())
    )
    .into_bytes()
}

/// Unmasks a client frame stream into `(fin, opcode, payload)` triples; for tests that check
/// what the client sent. Stops at the first incomplete frame.
pub fn decode_client_frames(mut bytes: &[u8]) -> Vec<(bool, u8, Vec<u8>)> {
    let mut frames = Vec::new();
    while bytes.len() >= 2 {
        let fin = bytes[0] & 0x80 != 0;
        let opcode = bytes[0] & 0x0F;
        assert!(bytes[1] & 0x80 != 0, "client frames must be masked");
        let (len, mut at) = match bytes[1] & 0x7F {
            126 if bytes.len() >= 4 => (usize::from(u16::from_be_bytes([bytes[2], bytes[3]])), 4),
            127 if bytes.len() >= 10 => (
                u64::from_be_bytes(bytes[2..10].try_into().expect("8 bytes")) as usize,
                10,
            ),
            126 | 127 => break,
            n => (usize::from(n), 2),
        };
        if bytes.len() < at + 4 + len {
            break;
        }
        let key: [u8; 4] = bytes[at..at + 4].try_into().expect("4 bytes");
        at += 4;
        let mut payload = bytes[at..at + len].to_vec();
        crate::mask::apply_mask(&mut payload, key, 0);
        frames.push((fin, opcode, payload));
        bytes = &bytes[at + len..];
    }
    frames
}

/// Classifies `heads` in order as a stream's fast path does — along the head shapes learned
/// from the heads before — and as the full head walk does; the first head where the two
/// verdicts differ, if any (for the `head_shapes` fuzz target).
pub fn shaped_verdicts_differ<'a>(
    rules: &crate::RouteRules,
    heads: impl IntoIterator<Item = &'a [u8]>,
) -> Option<&'a [u8]> {
    let classifier = crate::Classifier::new(rules.clone());
    let mut shapes = crate::route::HeadShapes::default();
    heads.into_iter().find(|head| {
        classifier.verdict_by_shape(head, &mut shapes) != classifier.verdict_by_scan(head)
    })
}

/// The UTF-8 validation feedwire applies to text messages, on its own: the whole-message
/// check a frame that arrived in one read gets, and the streaming check for a message that
/// arrives in pieces. For the benchmark's `limit-utf8` reader, which adds exactly this cost
/// to the raw read loop so that a table can tell validation from the rest of the library.
#[derive(Debug, Default, Clone)]
pub struct TextValidator {
    stream: crate::utf8::Utf8Stream,
}

impl TextValidator {
    /// Whether `payload`, a whole message, is valid UTF-8: the check a message gets outside
    /// the fast lanes (the widest vectors in use asked per message).
    pub fn whole(payload: &[u8]) -> bool {
        crate::utf8::is_valid(payload)
    }

    /// Whether `payload`, a whole message, is valid UTF-8: the check in a fast lane compiled
    /// for the widest vectors in use ([`in_vectors`]).
    pub fn whole_in_lane(payload: &[u8]) -> bool {
        struct One<'a>(&'a [u8]);
        impl Lane for One<'_> {
            type Output = bool;
            #[inline(always)]
            fn run<C: TextCheck>(self, check: C) -> bool {
                check.is_valid(self.0)
            }
        }
        in_vectors(One(payload))
    }

    /// The next piece of a message arriving in pieces; false once it cannot be valid (then
    /// the next message needs a new validator).
    pub fn feed(&mut self, piece: &[u8]) -> bool {
        self.stream.feed(piece).is_ok()
    }

    /// The message's last piece: false if the message is not valid UTF-8 (then the next
    /// message needs a new validator); true leaves it ready for the next message.
    pub fn feed_last(&mut self, piece: &[u8]) -> bool {
        self.stream.feed_last(piece).is_ok()
    }
}

/// Bytes of room `stream`'s queues hold, used or not — its events, its transport commands,
/// its connection's events: what a quiet stream gives back.
pub fn queue_room(stream: &crate::Stream) -> usize {
    stream.queue_room()
}

/// A WebSocket `Stream` for `config` past its opening exchange, as a transport would leave
/// it: connected, the upgrade answered by [`accept_response`], the events it raised taken.
/// For benchmarks and tests that feed frames straight into `read_buf`.
///
/// # Panics
/// If `config` is not a valid WebSocket stream configuration (test input is wrong).
pub fn open_websocket_stream(
    config: crate::StreamConfig,
    now: std::time::Instant,
) -> crate::Stream {
    let mut s = crate::Stream::new(config, [1; 32], now).expect("valid stream config");
    while s.poll_transport().is_some() {}
    s.handle_connected(now);
    let mut request = Vec::new();
    while let Some(c) = s.poll_transmit() {
        request.extend_from_slice(&c);
    }
    let answer = accept_response(&request);
    s.read_buf()[..answer.len()].copy_from_slice(&answer);
    s.handle_read(answer.len(), now);
    while s.poll_event().is_some() {}
    s
}

/// The lines a Betfair server answers a stream's opening with: its connection message, then
/// a `SUCCESS` status for each of the requests `1..=requests` (authentication, then the
/// subscriptions), CRLF-delimited.
pub fn betfair_opening(requests: u32) -> Vec<u8> {
    let mut out = b"{\"op\":\"connection\",\"connectionId\":\"test\"}\r\n".to_vec();
    for id in 1..=requests {
        out.extend_from_slice(
            format!(
                "{{\"op\":\"status\",\"id\":{id},\"statusCode\":\"SUCCESS\",\"connectionClosed\":false}}\r\n"
            )
            .as_bytes(),
        );
    }
    out
}

/// A Betfair `Stream` for `config`, subscribed to every market, past its opening exchange as
/// a transport would leave it: connected, authenticated and subscribed (answered by
/// [`betfair_opening`]), the events it raised and the requests it wrote taken. For
/// benchmarks and tests that feed lines straight into `read_buf`.
///
/// # Panics
/// If `config` is not a valid Betfair stream configuration (test input is wrong).
pub fn open_betfair_stream(config: crate::StreamConfig, now: std::time::Instant) -> crate::Stream {
    let mut s = crate::Stream::new(config, [1; 32], now).expect("valid stream config");
    s.subscribe_markets(
        crate::BetfairSubscription {
            filter_json: "{}".to_owned(),
            data_filter_json: None,
            heartbeat_ms: None,
            conflate_ms: None,
        },
        now,
    )
    .expect("a Betfair stream subscribes");
    while s.poll_transport().is_some() {}
    s.handle_connected(now);
    let answer = betfair_opening(2);
    s.read_buf()[..answer.len()].copy_from_slice(&answer);
    s.handle_read(answer.len(), now);
    while s.poll_transmit().is_some() {}
    while s.poll_event().is_some() {}
    s
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::open_betfair_stream;
    use crate::{BetfairAuth, StreamConfig, StreamEvent, StreamState};

    #[test]
    fn an_opened_betfair_stream_is_subscribed_and_lends_the_next_change() {
        let now = Instant::now();
        let auth = BetfairAuth {
            app_key: "k".to_owned(),
            session: "s".to_owned(),
        };
        let mut s = open_betfair_stream(StreamConfig::betfair("tcp://127.0.0.1:1", auth), now);
        assert_eq!(s.state(), &StreamState::Open);
        let opened = s.stats_handle().snapshot(now);
        // Authentication and subscription written, both answered, and the connection message.
        assert_eq!((opened.messages_sent, opened.responses), (2, 3));
        assert_eq!(opened.subscriptions, 1);
        let line = br#"{"op":"mcm","id":2,"clk":"AAA","pt":1,"mc":[]}"#;
        let mut wire = line.to_vec();
        wire.extend_from_slice(b"\r\n");
        s.read_buf()[..wire.len()].copy_from_slice(&wire);
        // Lent, or queued when no learned shape settles it (this is the stream's first).
        let mut data = Vec::new();
        s.handle_read_with(wire.len(), now, |d| data.push(d.payload.to_vec()));
        while let Some(e) = s.poll_event() {
            if let StreamEvent::Data { payload, .. } = e {
                data.push(payload.to_vec());
            }
        }
        assert_eq!(data, [line.to_vec()]);
        assert!(s.poll_transmit().is_none(), "nothing left to answer");
    }
}
