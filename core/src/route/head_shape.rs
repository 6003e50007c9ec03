//! Learned head shapes. A stream's messages share most of their heads' bytes — every
//! Betfair delta reads `{"op":"mcm","id":2,"clk":"` · clock · `","pt":` · time · `,"mc":[`
//! — so after walking one head in full, the stream keeps its *shape*: the bytes
//! outside the values that vary, and the verdict they imply. The next head is checked
//! against the last shapes seen, one integer compare per literal, scanning only the varying
//! values; when one fits, the verdict is the shape's (with this head's value ranges). Any
//! difference and the caller walks the head in full (and learns its shape).
//!
//! What a shape fixes: the keys (so which keys are present, and where the walk stops), and
//! the first value of every key the rules mention (Betfair `op`, `id`, `ct`, `statusCode`)
//! but the extracted ones no condition tests — so every condition comes out as it did for
//! the learned head. What varies: those extracted values (clocks) and the values of keys the
//! rules ignore (times), scanned by the rules of the general walk.
//!
//! A shape also keeps the layout of the last head that fitted it ([`Layout`]): while the
//! values keep their lengths, the next head is checked at fixed offsets with no walk at
//! all; a head with a value of another length is walked along the segments, and relearns it.
//!
//! Exactness: a head that fits has, at the same offsets, the bytes of the learned head
//! everywhere outside the varying values, and those are scanned by the very rules of
//! [`for_each_pair`]; so the general walk of that head reports the same keys, the same
//! condition values and value ranges where this one does, and stops at the same place. A
//! property test and a fuzz target hold the two walks to the same verdicts.

use std::ops::Range;

use super::classify::Verdict;
use super::head_layout::{Layout, Window};
use super::head_scan::{
    for_each_pair, quote_or_backslash, skip_ws_from, token_end, Value, ENDS_TOKEN,
};

/// Shapes kept per stream: the common one and one other (a heartbeat between deltas), so
/// alternating shapes do not relearn on every message.
const SLOTS: usize = 2;

/// What the rules do with each key, for learning shapes.
#[derive(Debug, Clone)]
pub(crate) struct KeyRoles {
    /// Number of distinct rule keys; shapes are learned for up to 64.
    pub(crate) keys: usize,
    /// Bit `i` set when key `i`'s first value is part of a shape (no bits above `keys`).
    pub(crate) fixed: u64,
    /// Key indexes of the extracted keys, in slot order.
    pub(crate) extract: [Option<usize>; 3],
}

/// Learned shapes of one stream's heads. A few hundred bytes.
#[derive(Debug, Clone, Default)]
pub(crate) struct HeadShapes {
    /// Slot 0 is tried first: the shape most heads fit.
    slots: [Shape; SLOTS],
    /// The last verdict came from a shape other than slot 0's, or a shape was learned last.
    other_fitted: bool,
}

/// A learned shape that fitted a head ([`HeadShapes::fit`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fitted {
    /// Where the shape is now; its verdict is [`HeadShapes::fitted_with_memo`].
    pub(crate) slot: usize,
    /// The caller's memo of its verdict (see [`ShapeFit::memo`]).
    pub(crate) memo: Option<u64>,
}

/// A learned shape's verdict for the head that fitted it, and what the caller keeps of it.
#[derive(Debug)]
pub(crate) struct ShapeFit<'a> {
    pub(crate) verdict: &'a Verdict,
    extract: &'a [Option<(u8, Extract)>; 3],
    /// A word the caller derives from `verdict` (and the fixed extracted values), kept with
    /// the shape until its verdict changes (a relearned shape, a head fitted along the
    /// segments with extracts elsewhere), when it is `None` again: so a caller works out once
    /// per shape what it does with the verdict, not once per message.
    pub(crate) memo: &'a mut Option<u64>,
}

impl ShapeFit<'_> {
    /// Whether the extracted value in `slot` lies in the shape's fixed bytes: the same bytes
    /// in every head the shape fits (Betfair `op`), where others (`clk`) vary.
    pub(crate) fn extract_is_fixed(&self, slot: usize) -> bool {
        matches!(self.extract.get(slot), Some(Some((_, Extract::Fixed(..)))))
    }
}

#[derive(Debug, Clone, Default)]
struct Shape {
    /// Every segment's literal, back to back.
    literals: Vec<u8>,
    /// A literal, then (usually) a varying value; the last may be a literal alone.
    segments: Vec<Segment>,
    end: ShapeEnd,
    /// The last fixed bytes end inside a token (a fixed number at the end of the walk): the
    /// byte after them must end it, as the learned head's did.
    ends_in_token: bool,
    /// Where each extracted key's value is: the mark of its segment, and how to find it
    /// from there.
    extract: [Option<(u8, Extract)>; 3],
    /// Segments marked so far (at most one per extract slot).
    marks: u8,
    /// Where the last head the segments fitted had each byte; its walk's end and extracts.
    layout: Layout,
    layout_end: usize,
    /// A head the layout fits ends its walk as the learned head did (`ends_fit`): the layout
    /// holds the byte at `layout_end`, the learned one, so this is only in doubt when that
    /// byte is whitespace before a possible comma.
    layout_settles_end: bool,
    /// The verdict for the last head that fitted: the learned flags, that head's extracts.
    fitted: Verdict,
    /// The walk's value windows, for relearning the layout (capacity reused).
    windows: Vec<(Range<usize>, Window)>,
    /// What the caller derived from `fitted` (see [`ShapeFit::memo`]); `None` whenever
    /// `fitted` changes.
    memo: Option<u64>,
}

#[derive(Debug, Clone, Copy)]
struct Segment {
    /// The literal: from the end of the previous varying value (the head's start for the
    /// first) to where this segment's value scan begins — just past a string's quote.
    literal: (u16, u16),
    /// The literal's first sixteen bytes (fewer if shorter) as a little-endian integer, and
    /// the mask selecting its length.
    word: u128,
    mask: u128,
    value: Varying,
    /// [`NO_MARK`], or the index under which a fit records where this segment lies (its
    /// literal's start, its value's start and end) for the extracts that read it.
    mark: u8,
}

/// A segment no extract reads.
const NO_MARK: u8 = u8::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Varying {
    Str,
    Token,
    /// An object or array: the walk stops at it (only learned when it stops at composites).
    Composite,
    /// No value: the shape's last literal.
    Nothing,
}

/// Where an extracted value is, in its marked segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Extract {
    /// The segment's varying value (a string).
    Value,
    /// Inside the segment's literal, at this offset and length.
    Fixed(u16, u16),
}

/// Why the learned walk stopped after its last pair.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum ShapeEnd {
    /// No shape: nothing learned.
    #[default]
    Empty,
    /// The next byte after optional whitespace is not a comma (the object's `}`).
    NoComma,
    /// Every rule key had a value: the walk stopped itself.
    AllFound,
    /// The last value is an object or array and the walk stops at composites.
    Composite,
}

impl HeadShapes {
    /// The verdict for `head` by a learned shape, if one fits: [`fit`](Self::fit), then
    /// [`fitted_with_memo`](Self::fitted_with_memo).
    #[cfg(test)]
    pub(crate) fn verdict(&mut self, head: &[u8]) -> Option<&Verdict> {
        let fitted = self.fit(head, head.len())?;
        Some(self.fitted_with_memo(fitted.slot).verdict)
    }

    /// The slot of the learned shape that fits `head`, if one does; its verdict is
    /// [`fitted_with_memo`](Self::fitted_with_memo) (two steps, so that a caller can learn a
    /// shape after none fitted with no borrow of `self` held over it). Slot 0 is tried
    /// first; a shape that fits another slot twice in a row (or right after it was learned)
    /// moves there, and the slot returned is where it is now. So whichever order a stream's
    /// shapes were learned in (a quiet market's heartbeats come before its first change), its
    /// common heads are not checked against another shape first — a failed check costs as
    /// much as a fitting one, and more when the segment walk follows it — while a shape that
    /// only interleaves (a heartbeat among deltas) moves nothing.
    ///
    /// Every slot's layout is tried before any slot's segment walk: a head of another shape
    /// (a heartbeat among deltas) would otherwise fail slot 0's walk, scanning values up to
    /// the literal that differs, before its own layout fits (on `betfair_mcm`, a heartbeat
    /// every 50 lines, 2 instructions a line; callgrind). Whichever shape fits gives the full
    /// walk's verdict, so the order is free.
    ///
    /// The head is `payload`'s first `scan_len` bytes (at most), the length every learned
    /// head was cut to: a layout is never longer than the head it was learned from, so the
    /// layouts are checked against `payload` itself (no cut made for the common case).
    #[inline(always)]
    pub(crate) fn fit(&mut self, payload: &[u8], scan_len: usize) -> Option<Fitted> {
        if self.slots[0].layout_fits(payload, scan_len) {
            self.other_fitted = false;
            return Some(self.fitted(0));
        }
        for slot in 1..SLOTS {
            if self.slots[slot].layout_fits(payload, scan_len) {
                let slot = self.promote(slot);
                return Some(self.fitted(slot));
            }
        }
        self.fit_by_walk(&payload[..payload.len().min(scan_len)])
    }

    /// [`fit`](Self::fit) for a head no layout fits: the first slot whose segments it fits
    /// (that slot's layout relearned from it).
    #[inline(never)]
    fn fit_by_walk(&mut self, head: &[u8]) -> Option<Fitted> {
        let slot = match (0..SLOTS).find(|&slot| self.slots[slot].walk_fits(head))? {
            0 => {
                self.other_fitted = false;
                0
            }
            slot => self.promote(slot),
        };
        Some(self.fitted(slot))
    }

    /// What [`fit`](Self::fit) returns for the shape in `slot`. The memo is read where the
    /// slot is still a constant (slot 0, the common case), not indexed after the paths meet.
    #[inline(always)]
    fn fitted(&self, slot: usize) -> Fitted {
        Fitted {
            slot,
            memo: self.slots[slot].memo,
        }
    }

    /// The verdict of the shape in `slot`, as [`fit`](Self::fit) returned it, with the
    /// caller's memo of it.
    #[inline(always)]
    pub(crate) fn fitted_with_memo(&mut self, slot: usize) -> ShapeFit<'_> {
        let shape = &mut self.slots[slot];
        ShapeFit {
            verdict: &shape.fitted,
            extract: &shape.extract,
            memo: &mut shape.memo,
        }
    }

    /// The shape in `slot` (not 0) fitted: it moves to slot 0 when a shape other than slot
    /// 0's fitted (or was learned) last time too. Returns where it is now.
    #[inline(never)]
    fn promote(&mut self, slot: usize) -> usize {
        if std::mem::replace(&mut self.other_fitted, true) {
            self.other_fitted = false;
            self.slots[..=slot].rotate_right(1);
            return 0;
        }
        slot
    }

    /// Learns the shape of `head`, whose full walk gave `verdict`, into the first empty slot,
    /// else the last (never slot 0's: the common shape stays while others come and go) —
    /// unless it is a response (routed on the general path) or its walk ends in a
    /// way a shape cannot promise (a value cut off by the end of the head, a composite value
    /// it would skip, a malformed pair). `key_index` maps a key's range in `head` to the
    /// index of a rule key.
    pub(crate) fn learn(
        &mut self,
        head: &[u8],
        stop_at_composite: bool,
        key_index: impl Fn(Range<usize>) -> Option<usize>,
        roles: &KeyRoles,
        verdict: &Verdict,
    ) {
        if !matches!(verdict, Verdict::Data { .. }) {
            return; // keep both shapes: data resumes after a response
        }
        let slot = (0..SLOTS)
            .find(|&slot| self.slots[slot].end == ShapeEnd::Empty)
            .unwrap_or(SLOTS - 1);
        let shape = &mut self.slots[slot];
        if shape.learn(head, stop_at_composite, key_index, roles, verdict) {
            self.other_fitted = slot != 0;
        } else {
            shape.clear();
        }
    }
}

impl Shape {
    fn clear(&mut self) {
        self.literals.clear();
        self.segments.clear();
        self.end = ShapeEnd::Empty;
        self.extract = [None; 3];
        self.marks = 0;
        self.ends_in_token = false;
        self.layout.clear();
        self.memo = None;
    }

    /// Whether the head of `payload` (its first `scan_len` bytes at most) has the layout of
    /// the last head that fitted: then `fitted` (its extracts included) is its verdict as it
    /// is. The layout, learned from such a head, holds no byte past it: it is checked
    /// against `payload`.
    #[inline(always)]
    fn layout_fits(&self, payload: &[u8], scan_len: usize) -> bool {
        self.layout.fits(payload)
            && (self.layout_settles_end
                || self.ends_fit(&payload[..payload.len().min(scan_len)], self.layout_end))
    }

    /// Whether `head` fits the segments (a head the layout did not fit); if so, `fitted` is
    /// its verdict.
    fn walk_fits(&mut self, head: &[u8]) -> bool {
        self.end != ShapeEnd::Empty && self.walk(head)
    }

    /// Whether `head` fits, by the layout or else along the segments.
    #[cfg(test)]
    fn fits(&mut self, head: &[u8]) -> bool {
        self.layout_fits(head, head.len()) || self.walk_fits(head)
    }

    /// The segment walk, for a head the layout did not fit: whether the head fits the
    /// segments; if so, its verdict and layout become the shape's.
    #[inline(never)]
    fn walk(&mut self, head: &[u8]) -> bool {
        self.windows.clear();
        let mut marks = [(0, 0, 0); 4];
        let mut pos = 0;
        let windows = &mut self.windows;
        for segment in &self.segments {
            let (start, end) = (
                usize::from(segment.literal.0),
                usize::from(segment.literal.1),
            );
            let literal_len = end - start;
            let same = match head.get(pos..).and_then(<[u8]>::first_chunk::<16>) {
                Some(&chunk) if literal_len <= 16 => {
                    u128::from_le_bytes(chunk) & segment.mask == segment.word
                }
                _ => head.get(pos..pos + literal_len) == Some(&self.literals[start..end]),
            };
            if !same {
                return false;
            }
            let literal_at = pos;
            pos += literal_len;
            let value_at = pos;
            match segment.value {
                Varying::Str => {
                    let Some(close) = head.get(pos..).and_then(quote_or_backslash) else {
                        return false;
                    };
                    let close = pos + close;
                    if head[close] != b'"' {
                        return false;
                    }
                    pos = close + 1;
                    windows.push((value_at..close, Window::Str));
                }
                Varying::Token => {
                    if !head.get(pos).is_some_and(|&b| starts_token(b)) {
                        return false;
                    }
                    let Some(end) = token_end(head, pos) else {
                        return false;
                    };
                    pos = end;
                    windows.push((value_at..pos, Window::Digits));
                }
                Varying::Composite => {
                    if !matches!(head.get(pos), Some(b'{' | b'[')) {
                        return false;
                    }
                }
                Varying::Nothing => {}
            }
            if segment.mark != NO_MARK {
                // At most three marks: the mask only spares the bounds check.
                marks[usize::from(segment.mark) & 3] = (literal_at, value_at, pos);
            }
        }
        let extracted = self.extract.map(|e| {
            e.map(|(mark, how)| {
                let (literal_at, value_at, end) = marks[usize::from(mark) & 3];
                match how {
                    Extract::Value => value_at..end - 1,
                    Extract::Fixed(at, len) => {
                        let at = literal_at + usize::from(at);
                        at..at + usize::from(len)
                    }
                }
            })
        });
        if !self.ends_fit(head, pos) {
            return false;
        }
        if let Verdict::Data { extracted: e, .. } = &mut self.fitted {
            *e = extracted;
        }
        self.memo = None;
        self.layout_end = pos;
        self.layout_settles_end = !(self.end == ShapeEnd::NoComma
            && matches!(head.get(pos), Some(b' ' | b'\t' | b'\r' | b'\n')));
        self.layout.learn(head, pos, &self.windows);
        true
    }

    /// Whether the walk may end at `pos` as the learned head's did.
    #[inline(always)]
    fn ends_fit(&self, head: &[u8], pos: usize) -> bool {
        if self.ends_in_token && !head.get(pos).is_some_and(|&b| ENDS_TOKEN[usize::from(b)]) {
            return false;
        }
        !(self.end == ShapeEnd::NoComma && head.get(skip_ws_from(head, pos)) == Some(&b','))
    }

    /// Records `head`'s shape; `false` if it has none a shape could promise.
    fn learn(
        &mut self,
        head: &[u8],
        stop_at_composite: bool,
        key_index: impl Fn(Range<usize>) -> Option<usize>,
        roles: &KeyRoles,
        verdict: &Verdict,
    ) -> bool {
        self.clear();
        let Verdict::Data {
            heartbeat,
            shutdown,
            ..
        } = *verdict
        else {
            return false;
        };
        if roles.keys > 64 || head.len() > usize::from(u16::MAX) {
            return false;
        }
        self.fitted = Verdict::Data {
            heartbeat,
            shutdown,
            extracted: Default::default(),
        };
        let (mut seen, mut missing) = (0u64, roles.keys);
        // Where the current literal starts; `None` once the walk met what no shape promises.
        let mut literal_from = Some(0);
        // Where the last value ended, and whether it was a fixed token.
        let (mut last_end, mut fixed_token_last) = (0, false);
        let mut end = ShapeEnd::NoComma;
        // Extract slots whose fixed value is in the literal not yet pushed.
        let mut pending = 0u8;
        for_each_pair(head, stop_at_composite, |key, value| {
            let Some(from) = literal_from else {
                return false;
            };
            let (varying, value_start, value_end) = match value {
                Value::Str(r) => (Varying::Str, r.start, r.end + 1),
                Value::Token(r) => (Varying::Token, r.start, r.end),
                Value::Composite(at) if stop_at_composite => (Varying::Composite, at, at),
                Value::Composite(_) | Value::Truncated => {
                    literal_from = None;
                    return false;
                }
            };
            let key = key_index(key);
            let first = key.filter(|&k| seen & 1 << k == 0);
            if let Some(k) = first {
                seen |= 1 << k;
                missing -= 1;
            }
            let slots = first.map_or(0, |k| {
                (0..3).fold(0u8, |m, s| m | u8::from(roles.extract[s] == Some(k)) << s)
            });
            let fixed =
                varying != Varying::Composite && first.is_some_and(|k| roles.fixed & 1 << k != 0);
            if fixed {
                // The value stays in the literal; an extracted string is found at its offset.
                for slot in 0..3 {
                    if slots & 1 << slot != 0 && varying == Varying::Str {
                        self.extract[slot] = Some((
                            NO_MARK, // set when the literal is pushed
                            Extract::Fixed(
                                (value_start - from) as u16,
                                (value_end - 1 - value_start) as u16,
                            ),
                        ));
                        pending |= 1 << slot;
                    }
                }
                fixed_token_last = varying == Varying::Token;
            } else {
                let segment = self.push(
                    &head[from..value_start],
                    varying,
                    std::mem::take(&mut pending),
                );
                for slot in 0..3 {
                    if slots & 1 << slot != 0 && varying == Varying::Str {
                        let mark = self.mark(segment);
                        self.extract[slot] = Some((mark, Extract::Value));
                    }
                }
                literal_from = Some(value_end);
                fixed_token_last = false;
            }
            last_end = value_end;
            if varying == Varying::Composite {
                end = ShapeEnd::Composite;
                return false;
            }
            if missing == 0 {
                end = ShapeEnd::AllFound;
                return false;
            }
            true
        });
        let Some(from) = literal_from else {
            return false;
        };
        if end != ShapeEnd::Composite {
            // The walk ended by itself after a comma: a malformed pair, no shape. Otherwise
            // what is left of the last literal (fixed values at the end) closes the shape.
            if end == ShapeEnd::NoComma && head.get(skip_ws_from(head, last_end)) == Some(&b',') {
                return false;
            }
            if from < last_end || pending != 0 {
                self.push(&head[from..last_end], Varying::Nothing, pending);
            }
            self.ends_in_token = fixed_token_last;
        }
        if self.segments.is_empty() {
            return false;
        }
        self.end = end;
        // The head fits its own shape; walking it learns the layout.
        self.walk(head)
    }

    /// Appends segments for `literal` followed by a `value`: a literal longer than one
    /// compare is cut into sixteen-byte pieces (the value goes with the last). `fixed`
    /// extract slots, whose offsets count from the literal's start, go with the first.
    /// Returns the last segment's index.
    fn push(&mut self, literal: &[u8], value: Varying, fixed: u8) -> usize {
        let count = literal.len().div_ceil(16).max(1);
        let first = self.segments.len();
        for i in 0..count {
            let piece = &literal[(16 * i).min(literal.len())..(16 * i + 16).min(literal.len())];
            let start = self.literals.len();
            self.literals.extend_from_slice(piece);
            let mut word = [0u8; 16];
            word[..piece.len()].copy_from_slice(piece);
            self.segments.push(Segment {
                literal: (start as u16, self.literals.len() as u16),
                word: u128::from_le_bytes(word),
                mask: if piece.len() == 16 {
                    u128::MAX
                } else {
                    (1u128 << (8 * piece.len())) - 1
                },
                value: if i + 1 < count {
                    Varying::Nothing
                } else {
                    value
                },
                mark: NO_MARK,
            });
        }
        if fixed != 0 {
            let mark = self.mark(first);
            for (slot, extract) in self.extract.iter_mut().enumerate() {
                if let Some((m, _)) = extract.as_mut().filter(|_| fixed & 1 << slot != 0) {
                    *m = mark;
                }
            }
        }
        self.segments.len() - 1
    }

    /// The mark of segment `index`, given one if it has none yet (at most one per extract
    /// slot is ever needed).
    fn mark(&mut self, index: usize) -> u8 {
        let segment = &mut self.segments[index];
        if segment.mark == NO_MARK {
            segment.mark = self.marks;
            self.marks += 1;
        }
        segment.mark
    }
}

/// Whether the general walk reads a token starting with `b` (not a string, not a composite,
/// not an empty token).
#[inline(always)]
fn starts_token(b: u8) -> bool {
    !ENDS_TOKEN[usize::from(b)] && !matches!(b, b'"' | b'{' | b'[')
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::HeadShapes;
    use crate::route::{Classifier, Condition, RouteRules, Verdict};

    fn classifiers() -> Vec<Classifier> {
        let mut walk_all = RouteRules::betfair();
        walk_all.stop_at_composite = false;
        let mut short = RouteRules::betfair();
        short.scan_len = 40;
        // Conditions on numbers and on a key that also has an extracted value.
        let tokens = RouteRules {
            scan_len: 256,
            response: vec![Condition::has_key("result")],
            error: vec![Condition::not_equals("statusCode", "0")],
            heartbeat: vec![
                Condition::not_equals("id", "1"),
                Condition::equals_str("op", "a"),
            ],
            shutdown: vec![Condition::not_equals("pt", "12")],
            id_key: "id".to_owned(),
            extract_keys: vec!["clk".to_owned(), "op".to_owned(), "ct".to_owned()],
            data_first_keys: Vec::new(),
            stop_at_composite: true,
        };
        [
            RouteRules::betfair(),
            walk_all,
            short,
            tokens,
            RouteRules::binance_stream(),
            RouteRules::binance_ws_api(),
        ]
        .into_iter()
        .map(Classifier::new)
        .collect()
    }

    const KEYS: [&str; 10] = [
        "op",
        "id",
        "clk",
        "pt",
        "mc",
        "ct",
        "initialClk",
        "result",
        "statusCode",
        "x\\\"y",
    ];

    /// One message on a skeleton: `(key, kind)` pairs with this message's values, a space
    /// after one pair's colon, an ending, and a cut.
    fn message(
        skeleton: &[(usize, u8)],
        values: &[String],
        spaced: Option<usize>,
        ending: u8,
        cut: usize,
    ) -> Vec<u8> {
        let mut s = String::from("{");
        for (i, (&(key, kind), value)) in skeleton.iter().zip(values).enumerate() {
            if i > 0 {
                s.push(',');
            }
            s.push_str(&format!("\"{}\":", KEYS[key]));
            if spaced == Some(i) {
                s.push(' ');
            }
            match kind {
                0 => s.push_str(&format!("\"{value}\"")),
                1 => s.push_str(value),
                _ => s.push_str(&format!("[{value}]")),
            }
        }
        s.push_str(["}", ",", "", " }"][usize::from(ending % 4)]);
        let bytes = s.into_bytes();
        bytes[..bytes.len().min(cut)].to_vec()
    }

    fn value(kind: u8) -> BoxedStrategy<String> {
        match kind {
            0 => "[A-Za-z0-9\"\\\\]{0,10}".boxed(),
            1 => "[0-9]{1,17}|1|12|true|null|-1\\.5e3|[0-9a-z.\":]{1,4}".boxed(),
            _ => "[0-9,\"{}]{0,6}".boxed(),
        }
    }

    prop_compose! {
        fn stream()(skeleton in prop::collection::vec((0..KEYS.len(), 0u8..3), 0..7))
            (messages in prop::collection::vec(
                (
                    skeleton.iter().map(|&(_, kind)| value(kind)).collect::<Vec<_>>(),
                    prop::option::weighted(0.1, 0..7usize),
                    prop::sample::select(vec![0u8, 0, 0, 1, 2, 3]),
                    prop::sample::select(vec![usize::MAX, usize::MAX, usize::MAX, 5, 20, 37]),
                ),
                1..8,
            ), skeleton in Just(skeleton))
            -> Vec<Vec<u8>> {
            messages
                .iter()
                .map(|(values, spaced, ending, cut)| message(&skeleton, values, *spaced, *ending, *cut))
                .collect()
        }
    }

    prop_compose! {
        /// A head, then heads with its every value of the same length but other bytes —
        /// mostly ones the learned layout admits (digits, letters), sometimes a quote,
        /// backslash, sign, point or delimiter in their place.
        fn same_lengths()(skeleton in prop::collection::vec((0..KEYS.len(), 0u8..3), 1..7))
            (base in skeleton.iter().map(|&(_, kind)| value(kind)).collect::<Vec<_>>(),
             fills in prop::collection::vec(
                 prop::collection::vec("[0-9]{17}|[0-9A-Za-z]{17}|[0-9a-z\"\\\\.,:} -]{17}|[0-9][,}:\" ][0-9a-z]{15}", skeleton.len()),
                 1..6,
             ),
             ending in prop::sample::select(vec![0u8, 1, 3]),
             skeleton in Just(skeleton))
            -> Vec<Vec<u8>> {
            let mut heads = vec![message(&skeleton, &base, None, ending, usize::MAX)];
            for fill in fills {
                let values: Vec<String> = base
                    .iter()
                    .zip(&fill)
                    .map(|(b, f)| f[..b.len().min(f.len())].to_owned())
                    .collect();
                heads.push(message(&skeleton, &values, None, ending, usize::MAX));
            }
            heads
        }
    }

    proptest! {
        /// Heads that differ from the one that taught a shape only in their values' bytes
        /// (the case a shape's layout decides) get the verdicts of the full walk.
        #[test]
        fn layouts_give_the_verdicts_of_the_full_walk(heads in same_lengths()) {
            for classifier in classifiers() {
                let mut shapes = HeadShapes::default();
                for head in &heads {
                    prop_assert_eq!(
                        classifier.verdict_by_shape(head, &mut shapes),
                        classifier.verdict_by_scan(head),
                        "{}", String::from_utf8_lossy(head)
                    );
                }
            }
        }

        /// Along any stream of heads — most sharing a shape, some with other values, spacing,
        /// endings or cut short — walking by learned shapes gives exactly the verdicts of
        /// walking every head in full, for every kind of rules.
        #[test]
        fn shapes_give_the_verdicts_of_the_full_walk(streams in prop::collection::vec(stream(), 1..3)) {
            for classifier in classifiers() {
                let mut shapes = HeadShapes::default();
                for head in streams.iter().flatten() {
                    prop_assert_eq!(
                        classifier.verdict_by_shape(head, &mut shapes),
                        classifier.verdict_by_scan(head),
                        "{}", String::from_utf8_lossy(head)
                    );
                }
            }
        }
    }

    #[test]
    fn a_layout_is_checked_past_scan_len_but_the_end_within_it() {
        // The walk ends at `pt`'s value with a space after it, so a fitting layout leaves the
        // end to `ends_fit`: a comma after the whitespace means more pairs (a `ct` that makes
        // a heartbeat), but only within the head the rules see, cut at `scan_len` (60) —
        // the layout itself reads the payload.
        let mut rules = RouteRules::betfair();
        rules.scan_len = 60;
        let classifier = Classifier::new(rules);
        let mut shapes = HeadShapes::default();
        let far = format!(
            r#"{{"op":"mcm","id":2,"clk":"AE","pt":20{},"ct":"HEARTBEAT"}}"#,
            " ".repeat(30)
        );
        for head in [
            &br#"{"op":"mcm","id":2,"clk":"AB","pt":17 }"#[..],
            br#"{"op":"mcm","id":2,"clk":"AC","pt":18 }"#,
            br#"{"op":"mcm","id":2,"clk":"AD","pt":19 ,"ct":"HEARTBEAT"}"#,
            far.as_bytes(),
            br#"{"op":"mcm","id":2,"clk":"AF","pt":21 }"#,
        ] {
            assert_eq!(
                classifier.verdict_by_shape(head, &mut shapes),
                classifier.verdict_by_scan(head),
                "{}",
                String::from_utf8_lossy(head)
            );
        }
        assert!(shapes.slots[0].layout_fits(br#"{"op":"mcm","id":2,"clk":"AG","pt":22 }"#, 60));
    }

    #[test]
    fn a_fixed_number_at_the_end_must_end_where_it_did() {
        // `id` is tested (heartbeat when it is not 1), so its value is part of the shape.
        let classifier = classifiers().swap_remove(3);
        let mut shapes = HeadShapes::default();
        let learned = br#"{"id":1}"#;
        assert_eq!(
            classifier.verdict_by_shape(learned, &mut shapes),
            classifier.verdict_by_scan(learned)
        );
        assert!(shapes.verdict(learned).is_some());
        for longer in [&br#"{"id":12}"#[..], br#"{"id":1"#] {
            assert_eq!(
                shapes.verdict(longer),
                None,
                "{}",
                String::from_utf8_lossy(longer)
            );
            assert_eq!(
                classifier.verdict_by_shape(longer, &mut shapes),
                classifier.verdict_by_scan(longer)
            );
        }
    }

    #[test]
    /// Rules naming more than 64 keys (a shape's key set is one `u64`) learn no shapes:
    /// every head is walked in full, with the full walk's verdicts. Heads past 64 KiB
    /// (offsets in a shape are 16-bit) the same.
    fn rules_beyond_what_a_shape_holds_walk_every_head() {
        let mut rules = RouteRules::betfair();
        rules.heartbeat = (0..70)
            .map(|i| Condition::equals_str(&format!("k{i}"), "beat"))
            .collect();
        let classifier = Classifier::new(rules);
        let mut shapes = HeadShapes::default();
        for head in [
            &br#"{"k69":"beat","clk":"A"}"#[..],
            br#"{"k69":"beat","clk":"B"}"#,
            br#"{"k3":"calm","clk":"C"}"#,
        ] {
            assert_eq!(
                classifier.verdict_by_shape(head, &mut shapes),
                classifier.verdict_by_scan(head)
            );
            assert_eq!(shapes.verdict(head), None, "nothing learned");
        }
        let mut rules = RouteRules::betfair();
        rules.scan_len = 1 << 17;
        let classifier = Classifier::new(rules);
        let mut shapes = HeadShapes::default();
        let long = |clk: &str| {
            format!(
                r#"{{"pad":"{}","op":"mcm","clk":"{clk}"}}"#,
                "p".repeat(70_000)
            )
            .into_bytes()
        };
        for head in [long("A"), long("B")] {
            assert_eq!(
                classifier.verdict_by_shape(&head, &mut shapes),
                classifier.verdict_by_scan(&head)
            );
            assert_eq!(shapes.verdict(&head), None, "nothing learned");
        }
    }

    #[test]
    /// A key given twice: its first value is the one that counts (the full walk's rule), in
    /// a shape too — its extracts and conditions, however the second value changes.
    fn a_repeated_key_counts_once_in_a_shape() {
        let classifier = Classifier::new(RouteRules::betfair());
        let mut shapes = HeadShapes::default();
        for head in [
            &br#"{"op":"mcm","clk":"AA","ct":"HEARTBEAT","clk":"B","ct":"X","pt":1}"#[..],
            br#"{"op":"mcm","clk":"CC","ct":"HEARTBEAT","clk":"D","ct":"X","pt":2}"#,
            br#"{"op":"mcm","clk":"EE","ct":"HEARTBEAT","clk":"FFF","ct":"Y","pt":3}"#,
        ] {
            let verdict = classifier.verdict_by_shape(head, &mut shapes);
            assert_eq!(verdict, classifier.verdict_by_scan(head));
            let Verdict::Data {
                heartbeat: true,
                extracted: [_, _, Some(clk)],
                ..
            } = verdict
            else {
                panic!("{verdict:?}")
            };
            assert_eq!(clk.len(), 2, "the first clk");
        }
    }

    #[test]
    /// A head whose walk stops once every rule key has a value is learned up to there: the
    /// rest of the head may differ in anything, even its length.
    fn a_shape_ends_where_every_rule_key_was_found() {
        let classifier = Classifier::new(RouteRules {
            scan_len: 256,
            response: Vec::new(),
            error: Vec::new(),
            heartbeat: vec![Condition::equals_str("op", "hb")],
            shutdown: Vec::new(),
            id_key: "id".to_owned(),
            extract_keys: vec!["clk".to_owned()],
            data_first_keys: Vec::new(),
            stop_at_composite: true,
        });
        let mut shapes = HeadShapes::default();
        let learned = br#"{"op":"x","id":1,"clk":"A","pad":"zzz","n":1}"#;
        classifier.verdict_by_shape(learned, &mut shapes);
        for head in [
            &br#"{"op":"x","id":1,"clk":"BB","pad":"y"}"#[..],
            br#"{"op":"x","id":1,"clk":"C","rest":[1,2,3],"more":{"a":1}}"#,
        ] {
            assert_eq!(
                shapes.verdict(head).cloned(),
                Some(classifier.verdict_by_scan(head)),
                "{}",
                String::from_utf8_lossy(head)
            );
        }
    }

    #[test]
    /// Extracts in any key order: a clock read from its own value, before a fixed `op`
    /// found in a later literal, keeps its place.
    fn extracts_keep_their_places_whatever_the_key_order() {
        let classifier = Classifier::new(RouteRules::betfair());
        let mut shapes = HeadShapes::default();
        for head in [
            &br#"{"clk":"AAA","op":"mcm","pt":1,"mc":[]}"#[..],
            br#"{"clk":"B","op":"mcm","pt":22,"mc":[]}"#,
            br#"{"clk":"CCCC","op":"mcm","pt":333,"mc":[]}"#,
        ] {
            let verdict = classifier.verdict_by_shape(head, &mut shapes);
            assert_eq!(
                verdict,
                classifier.verdict_by_scan(head),
                "{}",
                String::from_utf8_lossy(head)
            );
            let Verdict::Data {
                extracted: [Some(op), _, Some(clk)],
                ..
            } = verdict
            else {
                panic!("{verdict:?}")
            };
            assert_eq!((&head[op], head[clk.start - 1]), (&b"mcm"[..], b'"'));
        }
    }

    fn delta(clk: &str, pt: u64, mc: &str) -> Vec<u8> {
        format!(r#"{{"op":"mcm","id":2,"clk":"{clk}","pt":{pt},"mc":[{mc}]}}"#).into_bytes()
    }

    #[test]
    fn betfair_deltas_and_heartbeats_fit_the_shapes_they_taught() {
        let classifier = Classifier::new(RouteRules::betfair());
        let mut shapes = HeadShapes::default();
        let heartbeat = |clk: &str| {
            format!(r#"{{"op":"mcm","id":2,"ct":"HEARTBEAT","clk":"{clk}","pt":17}}"#).into_bytes()
        };
        // Learned from the first of each.
        let first = delta("AAA", 1, "{}");
        assert_eq!(
            classifier.verdict_by_shape(&first, &mut shapes),
            classifier.verdict_by_scan(&first)
        );
        let beat = heartbeat("AAB");
        classifier.verdict_by_shape(&beat, &mut shapes);
        // A response in between (not learned) leaves both shapes in place.
        let status = br#"{"op":"status","id":3,"statusCode":"SUCCESS"}"#;
        let answer = classifier.verdict_by_shape(status, &mut shapes);
        assert!(matches!(answer, Verdict::Response { .. }));
        for (head, heartbeat) in [
            (
                delta(
                    "ABCDEFGHIJKLMNOPQRSTUVWX",
                    1_700_000_000_123,
                    r#"{"id":"1.2"}"#,
                ),
                false,
            ),
            (heartbeat("Q0FBQQ=="), true),
            (delta("Z", 9, ""), false),
        ] {
            let fitted = shapes.verdict(&head).cloned();
            assert_eq!(
                fitted,
                Some(classifier.verdict_by_scan(&head)),
                "{}",
                String::from_utf8_lossy(&head)
            );
            let verdict = classifier.verdict_by_shape(&head, &mut shapes);
            assert_eq!(verdict, classifier.verdict_by_scan(&head));
            assert!(matches!(verdict, Verdict::Data { heartbeat: h, .. } if h == heartbeat));
        }
        // A different head does not fit: another op (its verdict could differ), an extra
        // space, a longer key, an escaped clock, a number where a composite was, another
        // fixed value past a long literal's sixteenth byte (another id; an image where a
        // heartbeat was, the same length: it is no heartbeat).
        for other in [
            &br#"{"op":"ocm","id":2,"clk":"A","pt":1,"mc":[]}"#[..],
            br#"{"op":"mcm","id":3,"clk":"A","pt":1,"mc":[]}"#,
            br#"{"op":"mcm","id":2,"ct":"SUB_IMAGE","clk":"A","pt":17}"#,
            br#"{"op":"status","id":2,"clk":"A","pt":1,"mc":[]}"#,
            br#"{"op":"mcm","id":2,"clk": "A","pt":1,"mc":[]}"#,
            br#"{"op":"mcm","id":2,"clks":"A","pt":1,"mc":[]}"#,
            br#"{"op":"mcm","id":2,"clk":"A\"","pt":1,"mc":[]}"#,
            br#"{"op":"mcm","id":2,"clk":"A","pt":1,"mc":7}"#,
        ] {
            assert_eq!(
                shapes.verdict(other),
                None,
                "{}",
                String::from_utf8_lossy(other)
            );
        }
    }

    #[test]
    fn the_shape_most_heads_fit_is_tried_first_whatever_came_first() {
        let classifier = Classifier::new(RouteRules::betfair());
        let heartbeat = |clk: &str| {
            format!(r#"{{"op":"mcm","id":2,"ct":"HEARTBEAT","clk":"{clk}","pt":17}}"#).into_bytes()
        };
        let mut shapes = HeadShapes::default();
        // A quiet market: a heartbeat is learned before the first change.
        classifier.verdict_by_shape(&heartbeat("AAA"), &mut shapes);
        classifier.verdict_by_shape(&heartbeat("AAB"), &mut shapes);
        assert!(shapes.slots[0].fits(&heartbeat("AAC")));
        // Deltas from then on: learned into the other slot, first in line once they fit
        // there again.
        for (i, clk) in ["AAD", "AAE", "AAF"].into_iter().enumerate() {
            let head = delta(clk, 1, "{}");
            assert_eq!(
                classifier.verdict_by_shape(&head, &mut shapes),
                classifier.verdict_by_scan(&head)
            );
            assert_eq!(shapes.slots[0].fits(&head), i > 0, "delta {i}");
        }
        // A heartbeat among deltas fits where it is and moves nothing.
        let beat = heartbeat("AAG");
        assert_eq!(
            classifier.verdict_by_shape(&beat, &mut shapes),
            classifier.verdict_by_scan(&beat)
        );
        let next = delta("AAH", 2, "{}");
        assert!(shapes.slots[0].fits(&next));
        assert!(shapes.slots[1].fits(&beat));
        // Nor does a shape seen once: it takes the last slot, not the deltas'.
        let status = br#"{"op":"mcm","id":2,"ct":"RESUB_DELTA","clk":"AAI","pt":3}"#;
        assert_eq!(
            classifier.verdict_by_shape(status, &mut shapes),
            classifier.verdict_by_scan(status)
        );
        assert!(shapes.slots[0].fits(&next));
        assert!(shapes.slots[1].fits(status));
    }
}
