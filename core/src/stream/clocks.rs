//! The stream positions (Betfair `initialClk` / `clk`) a subscription resumes from. Every
//! `mcm`/`ocm` message carries one, so recording it is on the hot path: a token of up to
//! [`INLINE`] bytes is kept inline and copied as one fixed-size block when the message has
//! that many bytes from the token's start (two vector moves, no `memcpy` call, no `Vec`
//! bookkeeping); anything else goes the general way.

use std::ops::Range;

use crate::route::top_level_int;

/// Longest token (bytes) kept inline. Betfair clocks are base64 of a few varints: 8–28
/// bytes seen.
const INLINE: usize = 32;

/// The stream position of one Betfair subscription. Empty means unknown.
#[derive(Debug, Clone, Default)]
pub(crate) struct Clocks {
    initial_clk: Token,
    clk: Token,
    /// A message of this subscription has come: its first (the image) carries an
    /// `initialClk`. Until then the tokens read back empty: messages still arriving for the
    /// subscription it replaced carry that one's positions, and a reconnect must not resume
    /// the new filter from them. Set where an `initialClk` is recorded, so the per-message
    /// path has no check of its own (one cost 35 instructions a message: `update` was no
    /// longer inlined).
    own: bool,
    /// The `id` of the subscription request last sent: an image (a message with an
    /// `initialClk`) carrying another id is the image of a request this one replaced (two
    /// replaced within a round trip), not this subscription's first message. `None` until one
    /// is sent.
    request: Option<u64>,
}

impl Clocks {
    /// Records the tokens `message` carried, each as `source[range]` (raw JSON string
    /// content, escapes as sent); `None` leaves a token as it was. An image of another
    /// subscription request than the last sent is passed over whole.
    #[inline]
    pub(crate) fn update(
        &mut self,
        message: &[u8],
        initial_clk: Option<(&[u8], Range<usize>)>,
        clk: Option<(&[u8], Range<usize>)>,
    ) {
        if let Some((source, range)) = initial_clk {
            if !self.take_image(message, source, range) {
                return;
            }
        }
        if let Some((source, range)) = clk {
            self.clk.set(source, range);
        }
    }

    /// Notes the id the subscription's request went out with (first, or again after a
    /// reconnect).
    pub(crate) fn sent(&mut self, request: u64) {
        self.request = Some(request);
    }

    /// Records the `initialClk` of the image `message` (`source[range]`) unless the image
    /// carries the `id` of another request than the last sent; whether it did. Out of line:
    /// images are one message in thousands, and the check must not grow the per-message
    /// `update`.
    #[cold]
    #[inline(never)]
    fn take_image(&mut self, message: &[u8], source: &[u8], range: Range<usize>) -> bool {
        let another = self
            .request
            .is_some_and(|sent| top_level_int(message, b"id").is_some_and(|id| id != sent));
        if !another {
            self.initial_clk.set(source, range);
            self.own = true;
        }
        !another
    }

    /// The `initialClk` to resume from; empty before the subscription's first message.
    pub(crate) fn initial_clk(&self) -> &[u8] {
        if self.own {
            self.initial_clk.as_bytes()
        } else {
            &[]
        }
    }

    /// The `clk` to resume from; empty before the subscription's first message.
    pub(crate) fn clk(&self) -> &[u8] {
        if self.own {
            self.clk.as_bytes()
        } else {
            &[]
        }
    }
}

/// One token's bytes.
#[derive(Debug, Clone, Default)]
struct Token {
    /// The token is `inline[..len]` when `len <= INLINE` (bytes after `len` are whatever
    /// followed it in its message), else `spill`.
    inline: [u8; INLINE],
    len: usize,
    /// The token when it is longer than `INLINE` bytes (capacity reused).
    spill: Vec<u8>,
}

impl Token {
    #[inline(always)]
    fn set(&mut self, source: &[u8], range: Range<usize>) {
        let len = range.len();
        self.len = len;
        if len <= INLINE {
            match source
                .get(range.start..)
                .and_then(<[u8]>::first_chunk::<INLINE>)
            {
                Some(block) => self.inline = *block,
                None => self.inline[..len].copy_from_slice(&source[range]),
            }
        } else {
            self.spill.clear();
            self.spill.extend_from_slice(&source[range]);
        }
    }

    fn as_bytes(&self) -> &[u8] {
        if self.len > INLINE {
            &self.spill
        } else {
            &self.inline[..self.len]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Clocks;

    #[test]
    fn tokens_of_any_length_read_back_whole_wherever_they_sit() {
        let long = "L".repeat(40);
        let message = format!(r#"{{"clk":"{long}","x":"AAAA","pt":1}}"#);
        let bytes = message.as_bytes();
        let at = |token: &str| {
            let start = message.find(token).expect("token in message");
            start..start + token.len()
        };
        let mut clocks = Clocks::default();
        assert_eq!((clocks.initial_clk(), clocks.clk()), (&b""[..], &b""[..]));
        // A position without the subscription's first message (an `initialClk`) is not its
        // own yet: it reads back empty.
        clocks.update(bytes, None, Some((bytes, at("AAAA"))));
        assert_eq!(clocks.clk(), b"");
        // Inline with a whole block behind it, inline near the end, spilled, and back.
        clocks.update(bytes, Some((bytes, 2..6)), Some((bytes, at("AAAA"))));
        assert_eq!(
            (clocks.initial_clk(), clocks.clk()),
            (&b"clk\""[..], &b"AAAA"[..])
        );
        let tail = bytes.len() - 3..bytes.len() - 1;
        clocks.update(bytes, None, Some((bytes, tail)));
        assert_eq!(
            (clocks.initial_clk(), clocks.clk()),
            (&b"clk\""[..], &b":1"[..])
        );
        clocks.update(bytes, None, Some((bytes, at(&long))));
        assert_eq!(clocks.clk(), long.as_bytes());
        clocks.update(bytes, None, Some((bytes, at("AAAA"))));
        assert_eq!(clocks.clk(), b"AAAA");
        clocks.update(bytes, Some((bytes, 0..0)), None);
        assert_eq!(
            (clocks.initial_clk(), clocks.clk()),
            (&b""[..], &b"AAAA"[..])
        );
    }

    #[test]
    fn an_image_of_a_replaced_request_is_passed_over() {
        /// Records `message`'s `initialClk` and `clk`, which the tests write as `I…`/`C…`.
        fn record(clocks: &mut Clocks, message: &str) {
            let token = |prefix: &str| {
                let start = message.find(&format!("\"{prefix}"))? + 1;
                let len = message[start..].find('"')?;
                Some((message.as_bytes(), start..start + len))
            };
            clocks.update(message.as_bytes(), token("I"), token("C"));
        }
        let read = |clocks: &Clocks| {
            let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
            (text(clocks.initial_clk()), text(clocks.clk()))
        };
        let image =
            |id: u64| format!(r#"{{"op":"mcm","id":{id},"initialClk":"I{id}","clk":"C{id}"}}"#);

        // Before any request is noted, an image is taken whatever its id.
        let mut clocks = Clocks::default();
        record(&mut clocks, &image(1));
        assert_eq!(read(&clocks), ("I1".into(), "C1".into()));

        let mut clocks = Clocks::default();
        clocks.sent(4);
        record(&mut clocks, &image(3));
        assert_eq!(read(&clocks), (String::new(), String::new()));
        record(&mut clocks, &image(4));
        assert_eq!(read(&clocks), ("I4".into(), "C4".into()));
        // An image with no id, or one that is not an integer, is not judged.
        record(&mut clocks, r#"{"op":"mcm","initialClk":"I5","clk":"C5"}"#);
        assert_eq!(read(&clocks), ("I5".into(), "C5".into()));
        record(
            &mut clocks,
            r#"{"op":"mcm","id":"x","initialClk":"I6","clk":"C6"}"#,
        );
        assert_eq!(read(&clocks), ("I6".into(), "C6".into()));
    }
}
