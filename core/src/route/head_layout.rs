//! A shape's layout: where the last head that fitted the shape had each byte. One stream's
//! heads of one shape usually keep their values' lengths for long stretches (a Betfair
//! clock's length changes only as it grows, a publish time has thirteen digits), so the next
//! head is checked at the same offsets in one pass of sixteen-byte loads, each byte by what
//! it held in the learned head: a literal byte compared, a string value's byte checked for
//! a quote, a number's for a digit. No offset depends on where the previous value ended, and
//! the extracted ranges are the layout's own. A head with a value of another length does not
//! fit; the shape's segment walk takes it (and relearns the layout from it).
//!
//! Every byte a load covers is checked in the same two ways, whatever it held: a range check
//! (`byte + offset`, wrapping, at most `span`: a literal byte's offset takes it to 0 and its
//! span is 0; a digit's takes `0` to 0 with span 9; a string byte's takes `"` to 255 with span
//! 254, which refuses the quote alone) and no backslash (a learned head with one gets no
//! layout). In SSE2 ([`crate::vector`]) that is `paddb` and `psubusb` reading the pattern
//! from memory, one `pcmpeqb` and two ORs per 16 bytes, and layouts of four or five loads (a
//! Betfair `mcm` head's) are checked with no loop: about 40 instructions for the replay
//! server's 63-byte heads, against 85 with two compares a byte and the loop (callgrind).
//! (32-byte loads under AVX2 behind a CPU check, tried twice — with the older check, and
//! again on 2026-12-05 with this one (19 instructions a line fewer, in memory ~1 ns less, in
//! the socket table no less CPU) — so no `unsafe` for it.)
//!
//! Exactness: a head that fits has the learned head's bytes everywhere outside the value
//! windows, up to and including the byte after the last one the shape reads; a string
//! window holds no quote or backslash, so the string closes at the same quote; a number
//! window holds only digits, so a token starts there and ends where the learned one did (the
//! byte after is the learned one, which ended it). So the segment walk of such a head takes
//! the steps it took for the learned head, at the same offsets.

use std::ops::Range;

use crate::vector::{self, Flags, Pattern};

/// What a value window must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Window {
    /// String content: no quote, no backslash.
    Str,
    /// A number of the learned length: ASCII digits only.
    Digits,
}

/// The layout of one shape; no loads means none (nothing fits).
#[derive(Debug, Clone, Default)]
pub(super) struct Layout {
    /// What each byte of the head's first `need` must be: one load for each [`LOAD`] bytes
    /// from the start before the last, whole or not, then one for the last `LOAD` (the bytes
    /// it shares with the one before, if any, are checked twice, the same way).
    /// INVARIANT: `loads.len()` is `need.div_ceil(LOAD)`, the last at `need - LOAD`; or 0
    /// (and `need` 0).
    loads: Vec<Load>,
    /// Bytes a head needs (at least [`LOAD`]): one past the last byte checked.
    need: usize,
    /// `need` past the whole loads before the last (`need - LOAD * (loads.len() - 1)`,
    /// 1..=16; 0 with no loads): a small number added to a constant, so that the unrolled
    /// check knows `need` is at least those loads with no compare of its own.
    past_whole: u8,
}

/// Bytes one load checks: one SSE2 vector.
const LOAD: usize = 16;

/// What each byte of one load must be; every byte is checked (and none may be a backslash).
#[derive(Debug, Clone, Copy)]
struct Load {
    /// Added (wrapping) to each byte before the range check.
    offset: Pattern,
    /// The largest the byte plus its offset may be.
    span: Pattern,
}

impl Load {
    /// Every byte's checks, from `head` at `at`, as the learned head and its `windows` say.
    fn learn(head: &[u8], at: usize, windows: &[(Range<usize>, Window)]) -> Self {
        let (mut offsets, mut spans) = ([0; LOAD], [0; LOAD]);
        for (i, pos) in (at..at + LOAD).enumerate() {
            let (offset, span) = match windows.iter().find(|(range, _)| range.contains(&pos)) {
                // Anything but `"` (taken to 255); the backslash is refused everywhere.
                Some((_, Window::Str)) => (0u8.wrapping_sub(b'"' + 1), u8::MAX - 1),
                // `0`..=`9`.
                Some((_, Window::Digits)) => (0u8.wrapping_sub(b'0'), 9),
                // The learned byte.
                None => (0u8.wrapping_sub(head[pos]), 0),
            };
            offsets[i] = offset;
            spans[i] = span;
        }
        Self {
            offset: vector::pattern(offsets),
            span: vector::pattern(spans),
        }
    }

    /// `bad` with the bytes of `bytes` that are not what they must be flagged.
    #[inline(always)]
    fn flag(&self, bytes: &[u8; LOAD], bad: Flags) -> Flags {
        vector::flag_out_of_range(bad, bytes, &self.offset, &self.span)
    }
}

/// Whether each load's bytes are what it says, `chunks` paired with their loads and `tail`
/// with `last`: one flag vector gathered over all of them, one test at the end.
#[inline(always)]
fn all_fit<'a>(
    chunks: impl Iterator<Item = (&'a [u8], &'a Load)>,
    last: &Load,
    tail: &[u8; LOAD],
) -> bool {
    let mut bad = vector::no_flags();
    for (bytes, load) in chunks {
        let Some(bytes) = bytes.first_chunk() else {
            return false;
        };
        bad = load.flag(bytes, bad);
    }
    vector::none_flagged(last.flag(tail, bad))
}

impl Layout {
    /// No layout: nothing fits.
    pub(super) fn clear(&mut self) {
        self.loads.clear();
        self.need = 0;
        self.past_whole = 0;
    }

    /// Whether `head` has this layout.
    #[inline(always)]
    pub(super) fn fits(&self, head: &[u8]) -> bool {
        // Two lengths (a Betfair `mcm` head's): two compares, where more made a jump table
        // (eight instructions).
        match self.loads.len() {
            4 => self.fits_unrolled::<4>(head),
            5 => self.fits_unrolled::<5>(head),
            _ => self.fits_looped(head),
        }
    }

    /// [`fits`](Self::fits) for a layout of `N` loads: no loop.
    #[inline(always)]
    fn fits_unrolled<const N: usize>(&self, head: &[u8]) -> bool {
        let need = LOAD * (N - 1) + usize::from(self.past_whole);
        let Some(head) = head.get(..need) else {
            return false;
        };
        let (Ok(loads), Some(front), Some(tail)) = (
            <&[Load; N]>::try_from(self.loads.as_slice()),
            head.get(..LOAD * (N - 1)),
            head.last_chunk(),
        ) else {
            return false;
        };
        // `front` is N - 1 loads long: the chunks are whole, and the one bounds check above
        // does for all (`need` is at least `front`).
        all_fit(front.chunks_exact(LOAD).zip(loads), &loads[N - 1], tail)
    }

    /// [`fits`](Self::fits) for a layout of any number of loads: kept out of line.
    #[inline(never)]
    fn fits_looped(&self, head: &[u8]) -> bool {
        let Some(head) = head.get(..self.need) else {
            return false;
        };
        let (Some((last, whole)), Some(tail)) = (self.loads.split_last(), head.last_chunk()) else {
            return false;
        };
        all_fit(head.chunks_exact(LOAD).zip(whole), last, tail)
    }

    /// Learns the layout of `head`, which a shape's walk read up to `end` with `windows`
    /// (ascending, disjoint, inside `..end`) holding its varying values. The byte at `end`
    /// is kept too, so the head must have it. Leaves no layout (and returns `false`) when the
    /// shape covers less than one load (a load's every byte is checked, and bytes past the
    /// shape's end may be anything), a number window is not all digits or a byte kept is a
    /// backslash (no head would fit: the check refuses it everywhere).
    pub(super) fn learn(
        &mut self,
        head: &[u8],
        end: usize,
        windows: &[(Range<usize>, Window)],
    ) -> bool {
        self.clear();
        let need = end + 1;
        if need < LOAD || head.len() < need {
            return false;
        }
        let digits = |range: &Range<usize>| {
            let bytes = &head[range.clone()];
            !bytes.is_empty() && bytes.iter().all(u8::is_ascii_digit)
        };
        if windows
            .iter()
            .any(|(range, window)| *window == Window::Digits && !digits(range))
            || head[..need].contains(&b'\\')
        {
            return false;
        }
        let whole = (0..(need - 1) / LOAD).map(|k| LOAD * k);
        let loads = whole
            .chain([need - LOAD])
            .map(|at| Load::learn(head, at, windows));
        self.loads.extend(loads);
        self.need = need;
        // 1..=16: the loads before the last are the whole ones below `need`.
        self.past_whole = (need - LOAD * (self.loads.len() - 1)) as u8;
        true
    }
}

#[cfg(test)]
mod tests {
    use std::ops::Range;

    use super::{Layout, Window};

    fn layout(head: &[u8], end: usize, windows: &[(std::ops::Range<usize>, Window)]) -> Layout {
        let mut l = Layout::default();
        assert!(l.learn(head, end, windows));
        l
    }

    #[test]
    fn a_head_fits_when_only_its_values_differ_in_kind() {
        let learned = br#"{"op":"mcm","clk":"AAAA000123","pt":1700000000123,"mc":["#;
        let clk = 19..29;
        let pt = 36..49;
        let end = learned.len() - 1; // the bracket
        let l = layout(learned, end, &[(clk, Window::Str), (pt, Window::Digits)]);
        assert!(l.fits(learned));
        assert!(l.fits(br#"{"op":"mcm","clk":"BBBBzz9999","pt":1700000000999,"mc":[{"#));
        for other in [
            &br#"{"op":"ocm","clk":"AAAA000123","pt":1700000000123,"mc":["#[..],
            br#"{"op":"mcm","clk":"AAAA0001\"3","pt":1700000000123,"mc":["#,
            br#"{"op":"mcm","clk":"AAAA0001\\3","pt":1700000000123,"mc":["#,
            br#"{"op":"mcm","clk":"AAAA000123","pt":170000000012x,"mc":["#,
            br#"{"op":"mcm","clk":"AAAA000123","pt":-700000000123,"mc":["#,
            br#"{"op":"mcm","clk":"AAAA000123","pt":1700000000123,"mc":{"#,
            br#"{"op":"mcm","clk":"AAAA00012","pt":1700000000123,"mc":["#,
            br#"{"op":"mcm","clk":"AAAA000123","pt":1700000000123,"mc":"#,
        ] {
            assert!(!l.fits(other), "{}", String::from_utf8_lossy(other));
        }
    }

    /// A head with a 15-byte string window and a 5-digit number window, and its layout.
    fn string_and_number() -> (&'static [u8], Range<usize>, Range<usize>, Layout) {
        let learned = br#"{"a":"xyzxyzxyzxyzxyz","b":12345,"c":1}"#;
        let (s, n) = (6..21, 27..32);
        let windows = [(s.clone(), Window::Str), (n.clone(), Window::Digits)];
        let l = layout(learned, learned.len() - 1, &windows);
        (learned, s, n, l)
    }

    #[test]
    fn every_byte_position_is_checked_by_some_load() {
        // Any single changed literal byte, and any quote put into the string window, at any
        // offset, is seen: the overlapping last loads leave no byte out.
        let (learned, s, n, l) = string_and_number();
        assert_each_changed_byte_refused(&l, learned, &s, &n);
    }

    /// `l` refuses `learned` with any one byte changed to one its place does not allow: a
    /// quote in the string window `s`, a dot in the number window `n`, another literal byte.
    fn assert_each_changed_byte_refused(
        l: &Layout,
        learned: &[u8],
        s: &Range<usize>,
        n: &Range<usize>,
    ) {
        for i in 0..learned.len() {
            let mut changed = learned.to_vec();
            if s.contains(&i) {
                changed[i] = b'"';
            } else if n.contains(&i) {
                changed[i] = b'.';
            } else {
                changed[i] ^= 0x01;
            }
            assert!(!l.fits(&changed), "byte {i} of {}", learned.len());
        }
    }

    #[test]
    fn every_byte_is_checked_whatever_the_heads_length() {
        // Lengths around whole loads: the last load ends at the last byte needed, whether
        // it overlaps the one before (17, 47) or not (16, 32, 48); one load to eight, so
        // both the unrolled checks (four and five loads) and the loop.
        for pad in 0..=120 {
            let learned = format!(r#"{{"a":"{}","b":1}}"#, "x".repeat(pad));
            let learned = learned.as_bytes();
            let s = 6..6 + pad;
            let mut l = Layout::default();
            if !l.learn(learned, learned.len() - 1, &[(s.clone(), Window::Str)]) {
                assert!(
                    learned.len() < 16,
                    "{pad}: a shape of a load or more has a layout"
                );
                continue;
            }
            assert!(l.fits(learned), "{pad}");
            assert_each_changed_byte_refused(&l, learned, &s, &(0..0));
        }
    }

    #[test]
    fn every_value_a_window_allows_fits_at_every_position() {
        // The checks a load gives every byte leave no false refusal: any byte but `"` and
        // `\` in a string window, any digit in a number window, in every load (the last
        // overlaps the one before).
        let (learned, s, n, l) = string_and_number();
        for i in s.chain(n.clone()) {
            for b in 0..=u8::MAX {
                let mut changed = learned.to_vec();
                changed[i] = b;
                let allowed = if n.contains(&i) {
                    b.is_ascii_digit()
                } else {
                    b != b'"' && b != b'\\'
                };
                assert_eq!(l.fits(&changed), allowed, "byte {b:#04x} at {i}");
            }
        }
    }

    #[test]
    fn long_windows_fit_and_non_digit_numbers_leave_no_layout() {
        // A string window longer than a load is checked by the loads it spans, each byte once.
        let head = br#"{"a":"0123456789012345678901234567890123","b":-1}"#;
        let mut l = Layout::default();
        assert!(l.learn(head, head.len() - 1, &[(6..40, Window::Str)]));
        assert!(l.fits(head));
        assert!(l.fits(br#"{"a":"abcdefghijklmnopqrstuvwxyzABCDEFGH","b":-1}"#));
        for at in 6..40 {
            let mut quoted = head.to_vec();
            quoted[at] = b'"';
            assert!(!l.fits(&quoted), "quote at {at}");
        }
        assert!(!l.learn(head, head.len() - 1, &[(47..49, Window::Digits)]));
        assert!(!l.fits(head));
        assert!(!l.learn(b"{}", 1, &[]), "shorter than one load");
        // A shape that ends within the first load leaves none either, however long the head:
        // a load checks every byte it reads, and those past the shape's end may be anything.
        let short_shape = br#"{"a":[1,2,"x","y","z"]}"#;
        assert!(!l.learn(short_shape, 5, &[]));
        assert!(!l.fits(short_shape));
    }
}
