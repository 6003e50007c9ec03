//! Learned head shapes: the bytes *between* the values of a message's head walk. A stream's
//! messages share them — every Betfair delta opens `{"op":` · `,"id":` · `,"clk":"` · `,"pt":`
//! · `,"mc":` — so the next head is checked against the last shapes seen, one integer compare
//! per pair, with no key to find, look up or match: only the values are scanned. Any
//! difference and the caller walks the head in full (and learns its shape).
//!
//! Exactness: a head that matches a shape has, at the same offsets, the same bytes as the
//! learned head everywhere but inside the values, and values are scanned by the very rules of
//! [`for_each_pair`]; so the general walk of that head would report the same keys with the
//! same value ranges and stop at the same place. A property test holds the two to that.

use std::ops::Range;

use super::head_scan::{
    for_each_pair, quote_or_backslash, skip_ws_from, token_end, Value, ENDS_TOKEN,
};

/// Shapes kept per stream: the common one and one other (a heartbeat between deltas), so
/// alternating shapes do not relearn on every message.
const SLOTS: usize = 2;

/// Learned shapes of one stream's heads, most useful first. A few hundred bytes.
#[derive(Debug, Clone, Default)]
pub(crate) struct HeadShapes {
    slots: [Shape; SLOTS],
    /// The slot the next learned shape replaces: not the one that fitted or was learned last.
    replace: usize,
}

#[derive(Debug, Clone, Default)]
struct Shape {
    /// Every pair's literal, back to back.
    literals: Vec<u8>,
    pairs: Vec<ShapePair>,
    end: ShapeEnd,
}

#[derive(Debug, Clone, Copy)]
struct ShapePair {
    /// The literal: from the end of the previous value (the head's start for the first) to
    /// where this value's scan begins — just past a string's opening quote.
    literal: (u16, u16),
    /// The literal's first sixteen bytes (fewer if shorter) as a little-endian integer, and
    /// the mask selecting its length.
    word: u128,
    mask: u128,
    kind: ValueKind,
    /// Index of the key among the rules' keys (`None`: a key no rule mentions).
    key: Option<u16>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ValueKind {
    Str,
    Token,
    /// An object or array: the walk stops at it (only learned when it stops at composites).
    Composite,
}

/// Why the learned walk stopped after its last pair.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum ShapeEnd {
    /// No pairs: nothing learned.
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
    /// Walks `head` along a learned shape, filling `values` (all `None`, one per rule key)
    /// with the first value of each rule key exactly as the general walk would; `false` (and
    /// `values` all `None` again) if no shape fits.
    #[inline]
    pub(crate) fn walk(&mut self, head: &[u8], values: &mut [Option<Value>]) -> bool {
        for slot in 0..SLOTS {
            if self.slots[slot].walk(head, values) {
                self.replace = (slot + 1) % SLOTS;
                return true;
            }
            values.fill(None);
        }
        false
    }

    /// Learns the shape of `head` (walked by the general rules) into the slot that did not
    /// match last, unless the walk ends in a way a shape cannot promise (a value cut off by
    /// the end of the head, a composite value it would skip, a malformed pair).
    /// `key_index` maps a key's range in `head` to the index of a rule key; there are `keys`.
    pub(crate) fn learn(
        &mut self,
        head: &[u8],
        stop_at_composite: bool,
        key_index: impl Fn(Range<usize>) -> Option<usize>,
        keys: usize,
    ) {
        let shape = &mut self.slots[self.replace];
        if shape.learn(head, stop_at_composite, key_index, keys) {
            self.replace = (self.replace + 1) % SLOTS;
        } else {
            shape.clear();
        }
    }
}

impl Shape {
    fn clear(&mut self) {
        self.literals.clear();
        self.pairs.clear();
        self.end = ShapeEnd::Empty;
    }

    #[inline(always)]
    fn walk(&self, head: &[u8], values: &mut [Option<Value>]) -> bool {
        if self.end == ShapeEnd::Empty {
            return false;
        }
        // Once every key has a value the walk stops (as the general one does).
        let mut missing = values.len();
        let mut f = |k: usize, value: Value| {
            if values[k].is_none() {
                values[k] = Some(value);
                missing -= 1;
            }
            missing > 0
        };
        let mut pos = 0;
        let last = self.pairs.len() - 1;
        for (i, pair) in self.pairs.iter().enumerate() {
            let (start, end) = (usize::from(pair.literal.0), usize::from(pair.literal.1));
            let literal_len = end - start;
            let same = match head.get(pos..).and_then(<[u8]>::first_chunk::<16>) {
                Some(&chunk) if literal_len <= 16 => {
                    u128::from_le_bytes(chunk) & pair.mask == pair.word
                }
                _ => head.get(pos..pos + literal_len) == Some(&self.literals[start..end]),
            };
            if !same {
                return false;
            }
            pos += literal_len;
            let value = match pair.kind {
                ValueKind::Str => {
                    let Some(close) = head.get(pos..).and_then(quote_or_backslash) else {
                        return false;
                    };
                    let close = pos + close;
                    if head[close] != b'"' {
                        return false;
                    }
                    let value = Value::Str(pos..close);
                    pos = close + 1;
                    value
                }
                ValueKind::Token => {
                    match head.get(pos) {
                        Some(&b) if starts_token(b) => {}
                        _ => return false,
                    }
                    let Some(end) = token_end(head, pos) else {
                        return false;
                    };
                    let value = Value::Token(pos..end);
                    pos = end;
                    value
                }
                ValueKind::Composite => {
                    if !matches!(head.get(pos), Some(b'{' | b'[')) {
                        return false;
                    }
                    if let Some(k) = pair.key {
                        f(usize::from(k), Value::Composite);
                    }
                    return true;
                }
            };
            if let Some(k) = pair.key {
                if !f(usize::from(k), value) {
                    // Only where the learned walk stopped too (same keys, same count).
                    return i == last && self.end == ShapeEnd::AllFound;
                }
            }
        }
        self.end == ShapeEnd::NoComma && head.get(skip_ws_from(head, pos)) != Some(&b',')
    }

    /// Records `head`'s shape; `false` if it has none a walk could promise.
    fn learn(
        &mut self,
        head: &[u8],
        stop_at_composite: bool,
        key_index: impl Fn(Range<usize>) -> Option<usize>,
        keys: usize,
    ) -> bool {
        self.clear();
        // Keys seen, as bits: rules with more keys than that are not learned.
        if keys > 64 {
            return false;
        }
        let (mut seen, mut missing) = (0u64, keys);
        // Where the previous value ended; `None` once the walk met what no shape promises.
        let mut prev_end = Some(0);
        let mut end = ShapeEnd::NoComma;
        for_each_pair(head, stop_at_composite, |key, value| {
            let (kind, value_start, value_end) = match value {
                Value::Str(r) => (ValueKind::Str, r.start, r.end + 1),
                Value::Token(r) => (ValueKind::Token, r.start, r.end),
                Value::Composite if stop_at_composite => {
                    // The bracket: past the key's closing quote, whitespace, `:`, whitespace.
                    let at = skip_ws_from(head, skip_ws_from(head, key.end + 1) + 1);
                    (ValueKind::Composite, at, at)
                }
                Value::Composite | Value::Truncated => {
                    prev_end = None;
                    return false;
                }
            };
            let Some(from) = prev_end else { return false };
            let key = key_index(key);
            if let Some(k) = key {
                if seen & 1 << k == 0 {
                    seen |= 1 << k;
                    missing -= 1;
                }
            }
            self.push(&head[from..value_start], kind, key);
            prev_end = Some(value_end);
            if kind == ValueKind::Composite {
                end = ShapeEnd::Composite;
                return false;
            }
            if missing == 0 {
                end = ShapeEnd::AllFound;
                return false;
            }
            true
        });
        let Some(prev_end) = prev_end else {
            return false;
        };
        // A walk that ended by itself: only a clean end (no comma next) is a shape; after a
        // comma it met a malformed pair.
        if self.pairs.is_empty()
            || self.literals.len() > usize::from(u16::MAX)
            || self.pairs.iter().any(|p| p.key == Some(u16::MAX))
            || (end == ShapeEnd::NoComma && head.get(skip_ws_from(head, prev_end)) == Some(&b','))
        {
            return false;
        }
        self.end = end;
        true
    }

    /// Appends a pair whose literal is `literal`.
    fn push(&mut self, literal: &[u8], kind: ValueKind, key: Option<usize>) {
        let start = self.literals.len();
        self.literals.extend_from_slice(literal);
        let n = literal.len().min(16);
        let mut word = [0u8; 16];
        word[..n].copy_from_slice(&literal[..n]);
        let clamp = |v: usize| u16::try_from(v).unwrap_or(u16::MAX);
        self.pairs.push(ShapePair {
            literal: (clamp(start), clamp(self.literals.len())),
            word: u128::from_le_bytes(word),
            mask: if n == 16 {
                u128::MAX
            } else {
                (1u128 << (8 * n)) - 1
            },
            kind,
            key: key.map(clamp),
        });
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
    use crate::route::{Classifier, RouteRules, Verdict};

    fn classifiers() -> Vec<Classifier> {
        let mut walk_all = RouteRules::betfair();
        walk_all.stop_at_composite = false;
        let mut short = RouteRules::betfair();
        short.scan_len = 40;
        [
            RouteRules::betfair(),
            walk_all,
            short,
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
            1 => "[0-9]{1,17}|true|null|-1\\.5e3|[0-9a-z.\":]{1,4}".boxed(),
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

    proptest! {
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
            let mut values = vec![None; 6];
            assert!(
                shapes.walk(&head, &mut values),
                "{}",
                String::from_utf8_lossy(&head)
            );
            let verdict = classifier.verdict_by_shape(&head, &mut shapes);
            assert_eq!(verdict, classifier.verdict_by_scan(&head));
            assert!(matches!(verdict, Verdict::Data { heartbeat: h, .. } if h == heartbeat));
        }
        // A different head does not fit: an extra space, a longer key, an escaped clock.
        for other in [
            &br#"{"op":"mcm","id":2,"clk": "A","pt":1,"mc":[]}"#[..],
            br#"{"op":"mcm","id":2,"clks":"A","pt":1,"mc":[]}"#,
            br#"{"op":"mcm","id":2,"clk":"A\"","pt":1,"mc":[]}"#,
            br#"{"op":"mcm","id":2,"clk":"A","pt":1,"mc":7}"#,
        ] {
            let mut values = vec![None; 6];
            assert!(
                !shapes.walk(other, &mut values),
                "{}",
                String::from_utf8_lossy(other)
            );
            assert!(values.iter().all(Option::is_none));
        }
    }
}
