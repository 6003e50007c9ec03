//! The stream positions (Betfair `initialClk` / `clk`) a subscription resumes from. Every
//! `mcm`/`ocm` message carries one, so recording it is on the hot path: a token of up to
//! [`INLINE`] bytes is kept inline and copied as one fixed-size block when the message has
//! that many bytes from the token's start (two vector moves, no `memcpy` call, no `Vec`
//! bookkeeping); anything else goes the general way.
//!
//! A large image may come split over several messages (Betfair `segmentType` `SEG_START`,
//! `SEG`…, `SEG_END`; the first carries the `initialClk`, the last the `clk`). It is the
//! subscription's position only once whole: a connection lost in between must ask for a new
//! image, not resume from the first segment's `initialClk` — the markets of the segments that
//! never came would get no image at all.

use std::ops::Range;

use crate::route::{head_str, top_level_int};

/// Longest token (bytes) kept inline. Betfair clocks are base64 of a few varints: 8–28
/// bytes seen.
pub(crate) const INLINE: usize = 32;

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
    /// An image split over several messages has begun and not ended: its `initialClk` is
    /// recorded, but `own` stays unset until the last segment.
    segmenting: bool,
}

impl Clocks {
    /// Records the tokens `message` carried, each as `source[range]` (raw JSON string
    /// content, escapes as sent); `None` leaves a token as it was. An image of another
    /// subscription request than the last sent is passed over whole. Always inlined: out of
    /// line it cost ~35 instructions a message more (callgrind, `betfair_mcm` lines).
    #[inline(always)]
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
            if self.segmenting {
                self.segment(message);
            }
            self.clk.set(source, range);
        }
    }

    /// [`update`](Self::update) with a `clk` of at most [`INLINE`] bytes, `message[clk]`,
    /// and no `initialClk`.
    #[inline(always)]
    pub(crate) fn update_clk(&mut self, message: &[u8], clk: Range<usize>) {
        if self.segmenting {
            self.segment(message);
        }
        self.clk.set_inline(message, clk);
    }

    /// Notes the id the subscription's request went out with (first, or again after a
    /// reconnect). A segmented image the last connection did not finish is over: the
    /// subscription has no position from it.
    pub(crate) fn sent(&mut self, request: u64) {
        self.request = Some(request);
        self.segmenting = false;
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
            // The position starts at this image: an earlier `clk` is not after it.
            self.clk.len = 0;
            self.segmenting = segment_type(message) == Some(b"SEG_START");
            self.own = !self.segmenting;
        }
        !another
    }

    /// `message`, with a `clk`, arrived while a segmented image was under way: unless it is
    /// a segment other than the last (the first too: one that carries its `clk` as well is
    /// no more whole) or a heartbeat (which says nothing of the image), the image is whole
    /// (its last segment, `SEG_END`, or a message of no segment at all: the segments are
    /// over) and its position the subscription's. Asked only of messages with a `clk` (the
    /// last segment carries it), which keeps the check inside the branch every message takes
    /// anyway: 2 instructions a message.
    #[cold]
    #[inline(never)]
    fn segment(&mut self, message: &[u8]) {
        let goes_on = matches!(segment_type(message), Some(b"SEG_START" | b"SEG"))
            || head_str(message, b"ct") == Some(b"HEARTBEAT");
        if !goes_on {
            self.segmenting = false;
            self.own = true;
        }
    }

    /// Whether a subscription request sends a position to resume from.
    pub(crate) fn resumes(&self) -> bool {
        !self.initial_clk().is_empty() || !self.clk().is_empty()
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

/// `message`'s `segmentType`, looked for among the keys before its first object or array
/// (where Betfair puts it: before `mc`/`oc`).
fn segment_type(message: &[u8]) -> Option<&[u8]> {
    head_str(message, b"segmentType")
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
        if range.len() <= INLINE {
            self.set_inline(source, range);
        } else {
            self.len = range.len();
            self.spill.clear();
            self.spill.extend_from_slice(&source[range]);
        }
    }

    /// [`set`](Self::set) for a token of at most [`INLINE`] bytes.
    #[inline(always)]
    fn set_inline(&mut self, source: &[u8], range: Range<usize>) {
        self.len = range.len();
        // `INLINE` bytes from the start, when the source has them: one compare where the
        // start is known to be small (a fitted shape's plan holds it in 32 bits).
        let block = range
            .start
            .checked_add(INLINE)
            .and_then(|end| source.get(range.start..end))
            .and_then(|block| <&[u8; INLINE]>::try_from(block).ok());
        match block {
            Some(block) => self.inline = *block,
            None => self.inline[..range.len()].copy_from_slice(&source[range]),
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
        // Exactly `INLINE` bytes is the longest token kept inline.
        let inline = &long[..super::INLINE];
        clocks.update(bytes, None, Some((bytes, at(inline))));
        assert_eq!(clocks.clk(), inline.as_bytes());
        clocks.update(bytes, None, Some((bytes, at("AAAA"))));
        assert_eq!(clocks.clk(), b"AAAA");
        // A new image starts a new position: the earlier `clk` is not after it.
        clocks.update(bytes, Some((bytes, 0..0)), None);
        assert_eq!((clocks.initial_clk(), clocks.clk()), (&b""[..], &b""[..]));
    }

    #[test]
    fn a_position_resumes_from_either_token() {
        // What the subscription request sends (each token it has) is what `resumes` tells:
        // an image with an `initialClk` and no `clk` yet is a position to resume from.
        let mut clocks = Clocks::default();
        assert!(!clocks.resumes());
        record(&mut clocks, r#"{"op":"mcm","initialClk":"I1","mc":[]}"#);
        assert_eq!(read(&clocks), ("I1".into(), String::new()));
        assert!(clocks.resumes());
        record(&mut clocks, r#"{"op":"mcm","clk":"C1","mc":[]}"#);
        assert!(clocks.resumes());
    }

    /// Records `message`'s `initialClk` and `clk`, which the tests write as `I…`/`C…`.
    fn record(clocks: &mut Clocks, message: &str) {
        let token = |prefix: &str| {
            let start = message.find(&format!("\"{prefix}"))? + 1;
            let len = message[start..].find('"')?;
            Some((message.as_bytes(), start..start + len))
        };
        clocks.update(message.as_bytes(), token("I"), token("C"));
    }

    /// The position a reconnect would resume from.
    fn read(clocks: &Clocks) -> (String, String) {
        let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
        (text(clocks.initial_clk()), text(clocks.clk()))
    }

    #[test]
    fn an_image_of_a_replaced_request_is_passed_over() {
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

    #[test]
    fn a_segmented_image_is_the_position_only_once_whole() {
        let segment = |kind: &str, tokens: &str| {
            format!(r#"{{"op":"mcm",{tokens}"ct":"SUB_IMAGE","segmentType":"{kind}","mc":[]}}"#)
        };
        let mut clocks = Clocks::default();
        clocks.sent(2);
        record(
            &mut clocks,
            &segment("SEG_START", r#""id":2,"initialClk":"I1","#),
        );
        assert_eq!(read(&clocks), (String::new(), String::new()));
        record(&mut clocks, &segment("SEG", ""));
        record(&mut clocks, &segment("SEG", r#""clk":"Cmid","#));
        record(
            &mut clocks,
            r#"{"op":"mcm","id":2,"ct":"HEARTBEAT","clk":"Cbeat","pt":1}"#,
        );
        assert_eq!(read(&clocks), (String::new(), String::new()));
        // A first segment carrying a `clk` as well is no more whole.
        record(
            &mut clocks,
            &segment("SEG_START", r#""id":2,"initialClk":"I1","clk":"C0","#),
        );
        assert_eq!(read(&clocks), (String::new(), String::new()));
        record(&mut clocks, &segment("SEG_END", r#""clk":"C1","#));
        assert_eq!(read(&clocks), ("I1".into(), "C1".into()));
        record(&mut clocks, r#"{"op":"mcm","id":2,"clk":"C2","mc":[]}"#);
        assert_eq!(read(&clocks), ("I1".into(), "C2".into()));

        // Cut off (a reconnect sends the request again): no position from it, and none from
        // the earlier image either, whose markets it has partly replaced.
        record(
            &mut clocks,
            &segment("SEG_START", r#""id":2,"initialClk":"I3","#),
        );
        clocks.sent(4);
        assert_eq!(read(&clocks), (String::new(), String::new()));
        record(
            &mut clocks,
            r#"{"op":"mcm","id":4,"ct":"HEARTBEAT","clk":"C4"}"#,
        );
        assert_eq!(read(&clocks), (String::new(), String::new()));

        // Segments end with the first message with a `clk` that is neither one nor a
        // heartbeat: an image whole in one message, or data after a last segment that never
        // said it was.
        record(
            &mut clocks,
            &segment("SEG_START", r#""id":4,"initialClk":"I5","#),
        );
        record(&mut clocks, r#"{"op":"mcm","id":4,"clk":"C5","mc":[]}"#);
        assert_eq!(read(&clocks), ("I5".into(), "C5".into()));
        // `segmentType` is looked for before the first composite value only.
        record(
            &mut clocks,
            r#"{"op":"mcm","id":4,"initialClk":"I6","clk":"C6","mc":[],"segmentType":"SEG_START"}"#,
        );
        assert_eq!(read(&clocks), ("I6".into(), "C6".into()));
    }
}
