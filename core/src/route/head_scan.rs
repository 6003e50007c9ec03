//! A bounded look at the top level of a JSON object: yields key/value pairs whose bytes lie
//! entirely inside the head (the first `scan_len` bytes), without parsing the rest. Cost is
//! bounded by the head length, never by the message size.
//!
//! It is not a validator: on anything that is not a JSON object it stops yielding, and the
//! message is then classified as data.

use std::ops::Range;

/// A top-level value, as far as the head shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    /// A string; the range is its content between the quotes (escapes left as sent).
    Str(Range<usize>),
    /// A number, `true`, `false` or `null`: the raw token.
    Token(Range<usize>),
    /// An object or array, complete or cut off by the end of the head: the offset of its
    /// opening bracket.
    Composite(usize),
    /// The value is cut off by the end of the head.
    Truncated,
}

impl Value {
    /// The raw JSON bytes of a complete scalar (strings with their quotes).
    pub(crate) fn raw<'a>(&self, head: &'a [u8]) -> Option<&'a [u8]> {
        match self {
            Self::Str(r) => head.get(r.start - 1..r.end + 1),
            Self::Token(r) => head.get(r.clone()),
            Self::Composite(_) | Self::Truncated => None,
        }
    }
}

/// Bytes that end a number, `true`, `false` or `null`: a table lookup per byte instead of
/// seven compares (timestamps are 13 digits long).
pub(crate) const ENDS_TOKEN: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    let ends = *b",}] \t\r\n";
    while i < ends.len() {
        t[ends[i] as usize] = true;
        i += 1;
    }
    t
};

pub(crate) fn skip_ws_from(head: &[u8], mut pos: usize) -> usize {
    while matches!(head.get(pos), Some(b' ' | b'\t' | b'\r' | b'\n')) {
        pos += 1;
    }
    pos
}

/// When the object's first key is exactly one of `keys`: its index and the offset of its
/// value in `head`. Compares the candidates in place (no scan for the key's end): a few
/// comparisons however long the message.
pub(crate) fn first_key_among<'k>(
    head: &[u8],
    keys: impl Iterator<Item = &'k [u8]>,
) -> Option<(usize, usize)> {
    // The common shape first: `{"` with no whitespace.
    let mut pos = if head.starts_with(b"{\"") {
        1
    } else {
        let p = skip_ws_from(head, 0);
        if head.get(p) != Some(&b'{') {
            return None;
        }
        let p = skip_ws_from(head, p + 1);
        if head.get(p) != Some(&b'"') {
            return None;
        }
        p
    };
    let rest = &head[pos + 1..];
    let (which, len) = keys
        .enumerate()
        .find(|(_, k)| rest.get(..k.len()) == Some(k) && rest.get(k.len()) == Some(&b'"'))
        .map(|(i, k)| (i, k.len() + 1))?;
    pos += 1 + len;
    if head.get(pos) != Some(&b':') {
        pos = skip_ws_from(head, pos);
        if head.get(pos) != Some(&b':') {
            return None;
        }
    }
    pos += 1;
    if !matches!(head.get(pos), Some(b' ' | b'\t' | b'\r' | b'\n')) {
        return Some((which, pos));
    }
    Some((which, skip_ws_from(head, pos)))
}

/// Whether the value at `pos` is exactly the JSON token `token` (a scalar: a string with its
/// quotes, a number, `true`, `false`, `null`), decided without scanning the value.
pub(crate) fn value_is(head: &[u8], pos: usize, token: &[u8]) -> bool {
    let Some(rest) = head.get(pos..) else {
        return false;
    };
    // The second byte tells most values apart (`"b…` versus `"!serverShutdown"`) without a
    // call to `memcmp`.
    if token.len() >= 2 && rest.get(1) != token.get(1) {
        return false;
    }
    if !rest.starts_with(token) {
        return false;
    }
    // A string token ends at its closing quote; any other must not run on (`200` vs `2001`).
    token.first() == Some(&b'"')
        || matches!(
            rest.get(token.len()),
            Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n')
        )
}

/// Calls `f(key, value)` for each top-level pair of the object `head` opens, in order,
/// exactly as [`TopLevelPairs`] yields them (a truncated value is reported with its key, then
/// the walk ends; with `stop_at_composite` the first object or array value is reported
/// unskipped and ends it); stops early when `f` returns false. One loop with the position in
/// a local: this runs on every Betfair message.
pub(crate) fn for_each_pair(
    head: &[u8],
    stop_at_composite: bool,
    mut f: impl FnMut(Range<usize>, Value) -> bool,
) {
    let mut pos = skip_ws_from(head, 0);
    if head.get(pos) != Some(&b'{') {
        return;
    }
    pos += 1;
    loop {
        pos = skip_ws_from(head, pos);
        if head.get(pos) != Some(&b'"') {
            return;
        }
        let Some((key, after)) = string_at(head, pos) else {
            return;
        };
        pos = skip_ws_from(head, after);
        match head.get(pos) {
            Some(b':') => {}
            None => {
                f(key, Value::Truncated);
                return;
            }
            Some(_) => return,
        }
        pos = skip_ws_from(head, pos + 1);
        let value = match head.get(pos) {
            Some(b'{' | b'[') if stop_at_composite => {
                f(key, Value::Composite(pos));
                return;
            }
            Some(b'"') => string_at(head, pos).map(|(content, after)| {
                pos = after;
                Value::Str(content)
            }),
            Some(b'{' | b'[') => composite_end(head, pos).map(|after| {
                let at = pos;
                pos = after;
                Value::Composite(at)
            }),
            Some(_) => {
                let start = pos;
                let end = token_end(head, start);
                // A token that reaches the end of the head may continue beyond it.
                end.filter(|&e| e > start).map(|e| {
                    pos = e;
                    Value::Token(start..e)
                })
            }
            None => None,
        };
        let Some(value) = value else {
            f(key, Value::Truncated);
            return;
        };
        if !f(key, value) {
            return;
        }
        pos = skip_ws_from(head, pos);
        if head.get(pos) != Some(&b',') {
            return;
        }
        pos += 1;
    }
}

/// [`for_each_pair`] for compact JSON — no whitespace, no backslash in a key or string
/// value, no value cut off by the end of the head — which is what exchanges send: the same
/// calls to `f`, or `false` as soon as the head is anything else, before calling `f` for the
/// pair it could not read (the caller then walks again with [`for_each_pair`]). Half the
/// per-pair cost: no whitespace checks between tokens, strings in one step, numbers eight
/// digits at a time.
#[inline(always)]
pub(crate) fn for_each_compact_pair(
    head: &[u8],
    stop_at_composite: bool,
    mut f: impl FnMut(Range<usize>, Value) -> bool,
) -> bool {
    if !head.starts_with(b"{\"") {
        return false;
    }
    let mut pos = 1;
    loop {
        // `pos` is at a key's opening quote.
        let key_start = pos + 1;
        let Some(key_end) = head.get(key_start..).and_then(quote_or_backslash) else {
            return false;
        };
        let key_end = key_start + key_end;
        if head[key_end] != b'"' || head.get(key_end + 1) != Some(&b':') {
            return false;
        }
        let at = key_end + 2;
        let key = key_start..key_end;
        let (value, next) = match head.get(at) {
            Some(b'"') => {
                let start = at + 1;
                let Some(end) = head.get(start..).and_then(quote_or_backslash) else {
                    return false;
                };
                let end = start + end;
                if head[end] != b'"' {
                    return false;
                }
                (Value::Str(start..end), end + 1)
            }
            Some(b'{' | b'[') if stop_at_composite => {
                f(key, Value::Composite(at));
                return true;
            }
            Some(&b) if !ENDS_TOKEN[usize::from(b)] && !matches!(b, b'{' | b'[' | b':') => {
                let Some(end) = token_end(head, at) else {
                    return false;
                };
                (Value::Token(at..end), end)
            }
            _ => return false,
        };
        if !f(key, value) {
            return true;
        }
        match head.get(next) {
            Some(b',') if head.get(next + 1) == Some(&b'"') => pos = next + 1,
            Some(b'}') => return true,
            _ => return false,
        }
    }
}

/// The offset of the first byte at or after `start` that ends a token ([`ENDS_TOKEN`]), if
/// the head has one. ASCII digits are skipped eight bytes at a step (Betfair publish times
/// are 13 digits, and a digit never ends a token); the first byte that is not a digit is
/// found in the same word, so a number usually costs no byte loop at all.
#[inline(always)]
pub(crate) fn token_end(head: &[u8], start: usize) -> Option<usize> {
    let mut i = start;
    while let Some(&chunk) = head.get(i..).and_then(<[u8]>::first_chunk::<8>) {
        let others = not_digits(u64::from_le_bytes(chunk));
        if others != 0 {
            i += (others.trailing_zeros() / 8) as usize;
            break;
        }
        i += 8;
    }
    head[i..]
        .iter()
        .position(|&b| ENDS_TOKEN[usize::from(b)])
        .map(|n| i + n)
}

/// The high bit of each byte of `word` that is not an ASCII digit, exactly (no borrow or
/// carry crosses bytes): a digit has high nibble 3, and adding 6 to its low nibble does not
/// reach 0x10.
#[inline(always)]
fn not_digits(word: u64) -> u64 {
    const HIGH_BITS: u64 = 0x8080_8080_8080_8080;
    const LOW7: u64 = 0x7F7F_7F7F_7F7F_7F7F;
    const LOW_NIBBLES: u64 = 0x0F0F_0F0F_0F0F_0F0F;
    let high_not_three = (word & !LOW_NIBBLES) ^ 0x3030_3030_3030_3030;
    // High bit set for each nonzero byte: the low seven bits plus 0x7F carry into it.
    let nonzero = ((high_not_three & LOW7) + LOW7) | high_not_three;
    let low_over_nine = ((word & LOW_NIBBLES) + 0x0606_0606_0606_0606) << 3;
    (nonzero | low_over_nine) & HIGH_BITS
}

/// At the opening quote `head[at]`: the content range and the offset after the closing quote,
/// if that quote is inside the head.
#[inline(always)]
fn string_at(head: &[u8], at: usize) -> Option<(Range<usize>, usize)> {
    let start = at + 1;
    let mut i = start;
    loop {
        let end = quote_or_backslash(head.get(i..)?)? + i;
        if head[end] == b'\\' {
            i = end + 2; // the escaped byte cannot close the string
        } else {
            return Some((start..end, end + 1));
        }
    }
}

/// Offset of the first `"` or `\\` in `bytes`. Eight bytes per step (SWAR): strings in a
/// head are short, too short for a SIMD search's set-up to pay, and a byte loop costs about
/// nine instructions per byte.
#[inline(always)]
pub(crate) fn quote_or_backslash(bytes: &[u8]) -> Option<usize> {
    const QUOTES: u64 = u64::from_ne_bytes([b'"'; 8]);
    const BACKSLASHES: u64 = u64::from_ne_bytes([b'\\'; 8]);
    // The lowest flagged byte of each mask is exact (false flags only appear above a true
    // zero byte), so the lowest of their union is the first match.
    let zero_bytes = |x: u64| x.wrapping_sub(0x0101_0101_0101_0101) & !x & 0x8080_8080_8080_8080;
    let mut i = 0;
    while let Some(&chunk) = bytes.get(i..).and_then(<[u8]>::first_chunk::<8>) {
        let word = u64::from_le_bytes(chunk);
        let found = zero_bytes(word ^ QUOTES) | zero_bytes(word ^ BACKSLASHES);
        if found != 0 {
            return Some(i + (found.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    bytes[i..]
        .iter()
        .position(|&b| b == b'"' || b == b'\\')
        .map(|n| i + n)
}

/// At `{` or `[`: the offset after the matching close, if inside the head. Brackets of both
/// kinds count as one depth: this is a classifier, not a validator.
fn composite_end(head: &[u8], at: usize) -> Option<usize> {
    let (mut depth, mut in_string, mut escaped) = (0u32, false, false);
    for (i, &b) in head[at..].iter().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth -= 1;
                if depth == 0 {
                    return Some(at + i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// Iterator over the top-level pairs in `head`: the plain reference implementation that
/// [`for_each_pair`] is tested against.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct TopLevelPairs<'a> {
    head: &'a [u8],
    /// INVARIANT: `pos <= head.len()`; `usize::MAX` once iteration stopped.
    pos: usize,
    /// Yield the first object or array value as `Composite` without skipping it, then stop.
    stop_at_composite: bool,
}

#[cfg(test)]
impl<'a> TopLevelPairs<'a> {
    pub(crate) fn new(head: &'a [u8]) -> Self {
        Self::with_stop(head, false)
    }

    /// With `stop_at_composite`, iteration ends at the first object or array value (which is
    /// yielded, unskipped).
    pub(crate) fn with_stop(head: &'a [u8], stop_at_composite: bool) -> Self {
        let mut s = Self {
            head,
            pos: 0,
            stop_at_composite,
        };
        s.skip_ws();
        if s.head.get(s.pos) == Some(&b'{') {
            s.pos += 1;
        } else {
            s.pos = usize::MAX;
        }
        s
    }

    fn peek(&self) -> Option<u8> {
        self.head.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.pos += 1;
        }
    }

    /// At an opening quote: the content range, if the closing quote is inside the head.
    fn string(&mut self) -> Option<Range<usize>> {
        let start = self.pos + 1;
        let mut i = start;
        loop {
            // Strings in a head are short: a plain scan beats memchr's per-call setup here.
            let at = self
                .head
                .get(i..)?
                .iter()
                .position(|&b| b == b'"' || b == b'\\')?
                + i;
            if self.head[at] == b'\\' {
                i = at + 2; // the escaped byte cannot close the string
            } else {
                self.pos = at + 1;
                return Some(start..at);
            }
        }
    }

    /// At `{` or `[`: skips to the matching close; `false` if the head ends first.
    fn composite(&mut self) -> bool {
        match composite_end(self.head, self.pos) {
            Some(after) => {
                self.pos = after;
                true
            }
            None => {
                self.pos = self.head.len();
                false
            }
        }
    }

    fn value(&mut self) -> Value {
        match self.peek() {
            Some(b'"') => self.string().map_or(Value::Truncated, Value::Str),
            Some(b'{' | b'[') => {
                let at = self.pos;
                if self.composite() {
                    Value::Composite(at)
                } else {
                    Value::Truncated
                }
            }
            Some(_) => {
                let start = self.pos;
                self.pos = self.head[start..]
                    .iter()
                    .position(|&b| ENDS_TOKEN[usize::from(b)])
                    .map_or(self.head.len(), |n| start + n);
                // A token that reaches the end of the head may continue beyond it.
                if self.pos == self.head.len() || self.pos == start {
                    Value::Truncated
                } else {
                    Value::Token(start..self.pos)
                }
            }
            None => Value::Truncated,
        }
    }
}

#[cfg(test)]
impl Iterator for TopLevelPairs<'_> {
    /// Key content range and value.
    type Item = (Range<usize>, Value);

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos == usize::MAX {
            return None;
        }
        self.skip_ws();
        if self.peek() != Some(b'"') {
            self.pos = usize::MAX;
            return None;
        }
        let Some(key) = self.string() else {
            self.pos = usize::MAX;
            return None;
        };
        self.skip_ws();
        match self.peek() {
            Some(b':') => {}
            // The head ends right after a complete key: report the key, then stop.
            None => {
                self.pos = usize::MAX;
                return Some((key, Value::Truncated));
            }
            Some(_) => {
                self.pos = usize::MAX;
                return None;
            }
        }
        self.pos += 1;
        self.skip_ws();
        if self.stop_at_composite && matches!(self.peek(), Some(b'{' | b'[')) {
            let at = self.pos;
            self.pos = usize::MAX;
            return Some((key, Value::Composite(at)));
        }
        let value = self.value();
        if matches!(value, Value::Truncated) {
            // Report the key (it is complete), then stop.
            self.pos = usize::MAX;
            return Some((key, value));
        }
        self.skip_ws();
        match self.peek() {
            Some(b',') => self.pos += 1,
            _ => self.pos = usize::MAX,
        }
        Some((key, value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(head: &[u8]) -> Vec<(String, String)> {
        TopLevelPairs::new(head)
            .map(|(k, v)| {
                let key = String::from_utf8_lossy(&head[k]).into_owned();
                let val = match v {
                    Value::Composite(_) => "<composite>".to_owned(),
                    Value::Truncated => "<truncated>".to_owned(),
                    v => String::from_utf8_lossy(v.raw(head).unwrap()).into_owned(),
                };
                (key, val)
            })
            .collect()
    }

    fn kv(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn top_level_pairs_only() {
        assert_eq!(
            pairs(br#" { "result" : null , "id":1, "data":{"error":1,"id":[2]} }"#),
            kv(&[("result", "null"), ("id", "1"), ("data", "<composite>")])
        );
    }

    #[test]
    fn escaped_quotes_inside_strings() {
        assert_eq!(
            pairs(br#"{"note":"say \"id\":7, \\","id":"a\"b"}"#),
            kv(&[("note", r#""say \"id\":7, \\""#), ("id", r#""a\"b""#)])
        );
    }

    #[test]
    fn truncated_heads() {
        assert_eq!(pairs(br#"{"id":12"#), kv(&[("id", "<truncated>")]));
        assert_eq!(
            pairs(br#"{"result":{"a":1"#),
            kv(&[("result", "<truncated>")])
        );
        assert_eq!(pairs(br#"{"resu"#), kv(&[]));
        assert_eq!(pairs(br#"{"result""#), kv(&[("result", "<truncated>")]));
        assert_eq!(pairs(br#"{"id":"abc"#), kv(&[("id", "<truncated>")]));
    }

    #[test]
    fn first_key_in_place() {
        let keys: [&[u8]; 2] = [b"stream", b"e"];
        let keys = || keys.iter().copied();
        let head = br#"{"stream":"!serverShutdown","data":{}}"#;
        let (which, at) = first_key_among(head, keys()).unwrap();
        assert_eq!(which, 0);
        assert!(value_is(head, at, br#""!serverShutdown""#));
        assert!(!value_is(head, at, br#""!server""#));
        assert_eq!(first_key_among(b" {\n\"e\" : 1}", keys()), Some((1, 9)));
        assert!(value_is(b" {\n\"e\" : 1}", 9, b"1"));
        assert!(!value_is(b"{\"e\":12}", 5, b"1"));
        for miss in [
            &br#"{"streams":1}"#[..],
            br#"{"str\"eam":1}"#,
            br#"{"result":null,"stream":1}"#,
            br#"["stream"]"#,
            br#"{"stream""#,
            b"",
        ] {
            assert_eq!(
                first_key_among(miss, keys()),
                None,
                "{}",
                String::from_utf8_lossy(miss)
            );
        }
    }

    #[test]
    fn stopping_at_the_first_composite() {
        let head = br#"{"op":"mcm","clk":"AA","mc":[{"id":"1.2","rc":[]}],"ct":"HEARTBEAT"}"#;
        let got: Vec<_> = TopLevelPairs::with_stop(head, true)
            .map(|(k, v)| (String::from_utf8_lossy(&head[k]).into_owned(), v))
            .collect();
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(got[2], ("mc".to_owned(), Value::Composite(28)));
        assert_eq!(head[28], b'[');
    }

    #[test]
    fn quote_or_backslash_finds_the_first_at_every_offset() {
        for len in 0..40 {
            for at in 0..len {
                for (first, second) in [(b'"', b'\\'), (b'\\', b'"'), (b'"', b'"')] {
                    let mut bytes = vec![b'a'; len];
                    // Bytes that trip naive SWAR tricks: 0x80+ and one below the target.
                    for (i, b) in bytes.iter_mut().enumerate() {
                        *b = [b'a', 0xA2, b'!', 0xDC, b'['][i % 5];
                    }
                    bytes[at] = first;
                    if at + 1 < len {
                        bytes[at + 1] = second;
                    }
                    assert_eq!(quote_or_backslash(&bytes), Some(at), "{len} {at}");
                }
            }
            let none = vec![b'x'; len];
            assert_eq!(quote_or_backslash(&none), None);
        }
    }

    #[test]
    fn not_digits_flags_exactly_the_bytes_that_are_not_digits() {
        for b in 0..=255u8 {
            for at in 0..8 {
                for fill in [b'0', b'9', b'5', 0x2F, 0x3A, 0xB0] {
                    let mut word = [fill; 8];
                    word[at] = b;
                    let expected = word.iter().enumerate().fold(0u64, |m, (i, c)| {
                        m | u64::from(!c.is_ascii_digit()) << (8 * i + 7)
                    });
                    assert_eq!(
                        not_digits(u64::from_le_bytes(word)),
                        expected,
                        "byte {b:#x} at {at} among {fill:#x}"
                    );
                }
            }
        }
    }

    fn walked(head: &[u8], stop: bool) -> Vec<(Range<usize>, Value)> {
        let mut out = Vec::new();
        for_each_pair(head, stop, |k, v| {
            out.push((k, v));
            true
        });
        out
    }

    /// What [`for_each_compact_pair`] reports, or `None` where it leaves the head to the
    /// general walk.
    fn walked_compact(head: &[u8], stop: bool) -> Option<Vec<(Range<usize>, Value)>> {
        let mut out = Vec::new();
        for_each_compact_pair(head, stop, |k, v| {
            out.push((k, v));
            true
        })
        .then_some(out)
    }

    #[test]
    fn compact_walk_reads_exchange_heads_and_leaves_the_rest() {
        let head = br#"{"op":"mcm","id":2,"clk":"AAAA","pt":1700000000123,"mc":[{"id":"1.2"}]}"#;
        let got = walked_compact(head, true).expect("compact");
        assert_eq!(got, walked(head, true));
        assert_eq!(got.len(), 5);
        // A whole object read to its `}`: answered, not left to the general walk.
        let whole = br#"{"e":"trade","E":1700000000123,"s":"BTCUSDT"}"#;
        for stop in [false, true] {
            assert_eq!(walked_compact(whole, stop), Some(walked(whole, stop)));
        }
        for other in [
            &br#"{ "op":"mcm"}"#[..],
            br#"{"op" :"mcm"}"#,
            br#"{"op":"m\"cm"}"#,
            br#"{"o\"p":1}"#,
            br#"{"op":"mcm","#,
            br#"{"pt":17000"#,
            br#"{"op":"mcm" }"#,
        ] {
            assert_eq!(
                walked_compact(other, true),
                None,
                "{}",
                String::from_utf8_lossy(other)
            );
        }
    }

    proptest::proptest! {
        /// Wherever the compact walk answers, it answers exactly what the general walk does.
        #[test]
        fn compact_walk_matches_the_general_walk(
            head in proptest::prop_oneof![
                "[{}\\[\\]\":, a-z0-9\\\\\t]{0,120}",
                "\\{\"[a-z]{1,3}\":(\"[a-z\\\\\"]{0,6}\"|[0-9]{1,20}|-?[0-9.e]{1,4}|true|null|\\[[0-9,\"]{0,8}\\]|\\{\\}) ?,?(\"[a-z]{1,3}\":(\"[a-z]{0,6}\"|[0-9]{1,17}|false|\\{\"a\":[1]\\}),?){0,5}\\}?",
            ],
            cut in 0usize..140,
        ) {
            let head = &head.as_bytes()[..head.len().min(cut)];
            for stop in [false, true] {
                if let Some(compact) = walked_compact(head, stop) {
                    proptest::prop_assert_eq!(compact, walked(head, stop));
                }
            }
        }
    }

    proptest::proptest! {
        /// The one-loop walk reports exactly what the reference iterator yields, for any
        /// bytes, both with and without stopping at the first composite.
        #[test]
        fn walk_matches_the_reference_iterator(
            head in proptest::prop_oneof![
                "[{}\\[\\]\":, a-z0-9\\\\\t]{0,120}",
                "\\{\"[a-z]{1,3}\":(\"[a-z\\\\\"]{0,6}\"|[0-9]{1,4}|\\[[0-9,\"]{0,8}\\]|\\{\\}) ?,? ?(\"[a-z]{1,3}\" ?: ?(\"[a-z]{0,6}\"|true|\\{\"a\":[1]\\}),?){0,5}\\}?",
            ],
        ) {
            for stop in [false, true] {
                let reference: Vec<_> = TopLevelPairs::with_stop(head.as_bytes(), stop).collect();
                proptest::prop_assert_eq!(walked(head.as_bytes(), stop), reference);
            }
        }
    }

    #[test]
    /// A key with no value (`:` then `,` or `}`), junk where the colon belongs, or junk
    /// after a comma ends both walks there, as the reference does: nothing after it is read
    /// as a pair.
    fn a_missing_value_or_colon_ends_the_walk() {
        let reference =
            |head: &[u8], stop| -> Vec<_> { TopLevelPairs::with_stop(head, stop).collect() };
        for head in [
            &br#"{"a":,"b":1}"#[..],
            br#"{"a": }"#,
            br#"{"a":}"#,
            br#"{"a"x1,"b":2}"#,
            br#"{"a"x"b","c":2}"#,
            br#"{"a":1,x":2}"#,
        ] {
            for stop in [false, true] {
                let got = walked(head, stop);
                assert_eq!(got, reference(head, stop));
                assert!(got.len() <= 1, "{}", String::from_utf8_lossy(head));
                if let Some(compact) = walked_compact(head, stop) {
                    assert_eq!(compact, got, "{}", String::from_utf8_lossy(head));
                }
            }
        }
        assert_eq!(
            walked(br#"{"a":,"b":1}"#, false),
            [(2..3, Value::Truncated)]
        );
    }

    #[test]
    fn not_an_object() {
        assert!(pairs(b"[1,2]").is_empty());
        assert!(pairs(b"pong").is_empty());
        assert!(pairs(b"").is_empty());
        assert!(pairs(b"\xff\xfe{").is_empty());
    }
}
