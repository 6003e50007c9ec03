//! A shape's layout: where the last head that fitted the shape had each byte. One stream's
//! heads of one shape usually keep their values' lengths for long stretches (a Betfair
//! clock's length changes only as it grows, a publish time has thirteen digits), so the next
//! head is checked at the same offsets in one pass of eight-byte words: literal bytes
//! compared, string values checked for quotes and backslashes, number values for digits. No
//! offset depends on where the previous value ended, and the extracted ranges are the
//! layout's own. A head with a value of another length does not fit; the shape's segment
//! walk takes it (and relearns the layout from it).
//!
//! Exactness: a head that fits has the learned head's bytes everywhere outside the value
//! windows, up to and including the byte after the last one the shape reads; a string
//! window holds no quote or backslash, so the string closes at the same quote; a number
//! window holds only digits, so a token starts there and ends where the learned one did (the
//! byte after is the learned one, which ended it). So the segment walk of such a head takes
//! the steps it took for the learned head, at the same offsets.

use std::ops::Range;

use super::head_scan::{not_digits, quotes_or_backslashes};

/// Longest value (bytes) a layout holds a window for; longer ones leave the shape without a
/// layout.
const MAX_WINDOW: usize = 32;

/// What a value window must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Window {
    /// String content: no quote, no backslash.
    Str,
    /// A number of the learned length: ASCII digits only.
    Digits,
}

/// The layout of one shape; no literal checks means none (nothing fits).
#[derive(Debug, Clone, Default)]
pub(super) struct Layout {
    /// Sixteen-byte loads over everything the shape reads, value windows masked out.
    literals: Vec<Literal>,
    /// Sixteen-byte loads over each value window.
    windows: Vec<WindowCheck>,
    /// Bytes a head needs: one past the last byte checked.
    need: usize,
}

#[derive(Debug, Clone, Copy)]
struct Literal {
    at: u16,
    /// The learned bytes, already masked.
    word: u128,
    /// 0xFF per byte compared.
    mask: u128,
}

#[derive(Debug, Clone, Copy)]
struct WindowCheck {
    at: u16,
    digits: bool,
    /// 0x80 per byte of the window.
    mask: u128,
}

impl Layout {
    /// No layout: nothing fits.
    pub(super) fn clear(&mut self) {
        self.literals.clear();
        self.windows.clear();
        self.need = 0;
    }

    /// Whether `head` has this layout.
    #[inline(always)]
    pub(super) fn fits(&self, head: &[u8]) -> bool {
        if self.literals.is_empty() || head.len() < self.need {
            return false;
        }
        let load = |at: u16| {
            head.get(usize::from(at)..)
                .and_then(<[u8]>::first_chunk::<16>)
                .map(|&chunk| u128::from_le_bytes(chunk))
        };
        let mut bad = 0;
        for literal in &self.literals {
            let Some(word) = load(literal.at) else {
                return false;
            };
            bad |= (word ^ literal.word) & literal.mask;
        }
        for window in &self.windows {
            let Some(word) = load(window.at) else {
                return false;
            };
            let flagged = if window.digits {
                halves(word, not_digits)
            } else {
                halves(word, quotes_or_backslashes)
            };
            bad |= flagged & window.mask;
        }
        bad == 0
    }

    /// Learns the layout of `head`, which a shape's walk read up to `end` with `windows`
    /// (ascending, disjoint, inside `..end`) holding its varying values. The byte at `end`
    /// is kept too, so the head must have it. Leaves no layout (and returns `false`) when a
    /// window is longer than [`MAX_WINDOW`] or a number window is not all digits.
    pub(super) fn learn(
        &mut self,
        head: &[u8],
        end: usize,
        windows: &[(Range<usize>, Window)],
    ) -> bool {
        self.clear();
        let covered = end + 1;
        if head.len() < covered.max(16) || covered > usize::from(u16::MAX) {
            return false;
        }
        for (range, window) in windows {
            let bytes = &head[range.clone()];
            let digits = || !bytes.is_empty() && bytes.iter().all(u8::is_ascii_digit);
            if bytes.len() > MAX_WINDOW || (*window == Window::Digits && !digits()) {
                self.clear();
                return false;
            }
            for (at, mask) in loads(range.clone(), 0x80) {
                self.windows.push(WindowCheck {
                    at,
                    digits: *window == Window::Digits,
                    mask,
                });
            }
        }
        for (at, mut mask) in loads(0..covered, 0xFF) {
            let start = usize::from(at);
            for (range, _) in windows {
                for i in range.start.max(start)..range.end.min(start + 16) {
                    mask &= !(0xFF << (8 * (i - start)));
                }
            }
            if mask != 0 {
                let learned = head[start..start + 16].try_into().expect("16 bytes");
                self.literals.push(Literal {
                    at,
                    word: u128::from_le_bytes(learned) & mask,
                    mask,
                });
            }
        }
        self.need = covered;
        true
    }
}

/// Sixteen-byte loads covering `region`: the offsets and masks (`lane` in each byte of the
/// region the load is the first to cover). A load that would run past the region's end
/// moves back to end there (or to start at 0), so no load reads past the region or the
/// 16 bytes the head is known to have.
fn loads(region: Range<usize>, lane: u8) -> impl Iterator<Item = (u16, u128)> {
    let mut from = region.start;
    std::iter::from_fn(move || {
        if from >= region.end {
            return None;
        }
        let at = from.min(region.end.max(16) - 16);
        let upto = (at + 16).min(region.end);
        let mask = (from - at..upto - at).fold(0u128, |m, i| m | u128::from(lane) << (8 * i));
        from = upto;
        Some((at as u16, mask))
    })
}

/// `flag` applied to both halves of `word`.
#[inline(always)]
fn halves(word: u128, flag: fn(u64) -> u64) -> u128 {
    u128::from(flag(word as u64)) | u128::from(flag((word >> 64) as u64)) << 64
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
    fn long_windows_and_non_digit_numbers_leave_no_layout() {
        let head = br#"{"a":"0123456789012345678901234567890123","b":-1}"#;
        let mut l = Layout::default();
        assert!(!l.learn(head, head.len() - 1, &[(6..40, Window::Str)]));
        assert!(!l.fits(head));
        assert!(!l.learn(head, head.len() - 1, &[(47..49, Window::Digits)]));
        assert!(!l.fits(head));
        assert!(!l.learn(b"{}", 1, &[]), "shorter than one load");
    }
}
