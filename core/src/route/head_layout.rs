//! A shape's layout: where the last head that fitted the shape had each byte. One stream's
//! heads of one shape usually keep their values' lengths for long stretches (a Betfair
//! clock's length changes only as it grows, a publish time has thirteen digits), so the next
//! head is checked at the same offsets in one pass of sixteen-byte loads, each byte by what
//! it held in the learned head: a literal byte compared, a string value's byte checked for
//! quote and backslash, a number's for a digit. No offset depends on where the previous value
//! ended, and the extracted ranges are the layout's own. A head with a value of another
//! length does not fit; the shape's segment walk takes it (and relearns the layout from it).
//!
//! Each load's checks are byte-wise over `[u8; 16]`, written so that the compiler keeps them
//! in vector registers (SSE2 on x86-64: a handful of instructions a load, literal and value
//! bytes alike), without `unsafe`.
//!
//! Exactness: a head that fits has the learned head's bytes everywhere outside the value
//! windows, up to and including the byte after the last one the shape reads; a string
//! window holds no quote or backslash, so the string closes at the same quote; a number
//! window holds only digits, so a token starts there and ends where the learned one did (the
//! byte after is the learned one, which ended it). So the segment walk of such a head takes
//! the steps it took for the learned head, at the same offsets.

use std::ops::Range;

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
    /// What each byte of the head's first `need` must be: one [`Load`] for each sixteen
    /// bytes from the start, then, when `need` is not a multiple of 16, one for the last
    /// sixteen (checking only the bytes the others leave).
    /// INVARIANT: `loads.len()` is `need / 16`, plus one when `need % 16 != 0`; or 0.
    loads: Vec<Load>,
    /// Bytes a head needs (at least 16): one past the last byte checked.
    need: usize,
}

/// What each byte of one sixteen-byte load must be. A byte no mask selects is checked by
/// another load (or is past the shape's end). Each mask is sixteen-byte aligned, as a vector
/// register's loads like.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(16))]
struct Load {
    /// The learned bytes where `literal_mask` is 0xFF, else 0.
    literal: [u8; 16],
    /// 0xFF per byte compared with the learned one.
    literal_mask: [u8; 16],
    /// 0xFF per byte of a number window: must be an ASCII digit.
    digits: [u8; 16],
    /// 0xFF per byte of a string window: must be neither `"` nor `\`.
    string: [u8; 16],
}

impl Load {
    /// Sets bits of `bad` in each byte of `bytes` that is not what it must be.
    #[inline(always)]
    fn flag(&self, bytes: &[u8; 16], bad: &mut [u8; 16]) {
        for i in 0..16 {
            let b = bytes[i];
            let literal = (b ^ self.literal[i]) & self.literal_mask[i];
            let not_digit = all_ones(!b.is_ascii_digit()) & self.digits[i];
            let quote = all_ones(b == b'"' || b == b'\\') & self.string[i];
            bad[i] |= literal | not_digit | quote;
        }
    }
}

impl Layout {
    /// No layout: nothing fits.
    pub(super) fn clear(&mut self) {
        self.loads.clear();
        self.need = 0;
    }

    /// Whether `head` has this layout.
    #[inline(always)]
    pub(super) fn fits(&self, head: &[u8]) -> bool {
        let Some(head) = head.get(..self.need) else {
            return false;
        };
        if self.loads.is_empty() {
            return false;
        }
        let Some((whole, last)) = self.loads.split_at_checked(self.need / 16) else {
            return false;
        };
        let mut bad = [0u8; 16];
        for (bytes, load) in head.chunks_exact(16).zip(whole) {
            let Some(bytes) = bytes.first_chunk() else {
                return false;
            };
            load.flag(bytes, &mut bad);
        }
        if let (Some(load), Some(bytes)) = (last.first(), head.last_chunk()) {
            load.flag(bytes, &mut bad);
        }
        u128::from_ne_bytes(bad) == 0
    }

    /// Learns the layout of `head`, which a shape's walk read up to `end` with `windows`
    /// (ascending, disjoint, inside `..end`) holding its varying values. The byte at `end`
    /// is kept too, so the head must have it. Leaves no layout (and returns `false`) when the
    /// head is shorter than one load or a number window is not all digits.
    pub(super) fn learn(
        &mut self,
        head: &[u8],
        end: usize,
        windows: &[(Range<usize>, Window)],
    ) -> bool {
        self.clear();
        let covered = end + 1;
        let need = covered.max(16);
        if head.len() < need {
            return false;
        }
        let digits = |range: &Range<usize>| {
            let bytes = &head[range.clone()];
            !bytes.is_empty() && bytes.iter().all(u8::is_ascii_digit)
        };
        if windows
            .iter()
            .any(|(range, window)| *window == Window::Digits && !digits(range))
        {
            return false;
        }
        let whole = need / 16;
        let last = (need % 16 != 0).then_some((need - 16, 16 * whole..covered));
        let loads = (0..whole).map(|k| (16 * k, 16 * k..covered.min(16 * (k + 1))));
        for (at, checked) in loads.chain(last) {
            let mut load = Load::default();
            for pos in checked {
                let i = pos - at;
                match windows.iter().find(|(range, _)| range.contains(&pos)) {
                    Some((_, Window::Str)) => load.string[i] = 0xFF,
                    Some((_, Window::Digits)) => load.digits[i] = 0xFF,
                    None => {
                        load.literal[i] = head[pos];
                        load.literal_mask[i] = 0xFF;
                    }
                }
            }
            self.loads.push(load);
        }
        self.need = need;
        true
    }
}

/// 0xFF when `flag`, else 0.
#[inline(always)]
fn all_ones(flag: bool) -> u8 {
    0u8.wrapping_sub(u8::from(flag))
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn every_byte_position_is_checked_by_some_load() {
        // Any single changed literal byte, and any quote put into the string window, at any
        // offset, is seen: the overlapping last loads leave no byte out.
        let learned = br#"{"a":"xyzxyzxyzxyzxyz","b":12345,"c":1}"#;
        let s = 6..21;
        let n = 27..32;
        let end = learned.len() - 1;
        let l = layout(
            learned,
            end,
            &[(s.clone(), Window::Str), (n.clone(), Window::Digits)],
        );
        for i in 0..learned.len() {
            let mut changed = learned.to_vec();
            if s.contains(&i) {
                changed[i] = b'"';
            } else if n.contains(&i) {
                changed[i] = b'.';
            } else {
                changed[i] ^= 0x01;
            }
            assert!(!l.fits(&changed), "byte {i}");
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
    }
}
