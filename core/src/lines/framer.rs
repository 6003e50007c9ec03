//! Line splitting over the read buffer's unconsumed bytes, with a resume cursor.
//!
//! Every complete line is found in the call in which its last delimiter byte arrives,
//! wherever the read boundary fell (a `\r` ending one read and `\n` starting the next
//! included): the search looks for `\n` and checks the byte before it, which is still in the
//! buffer because the line is not consumed yet. Bytes already searched are not searched again.

use std::ops::Range;

use super::newlines::for_each_newline;
use crate::error::LineError;

/// What ends a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Delimiter {
    /// `\r\n` (Betfair). A `\n` not preceded by `\r` is part of the line.
    #[default]
    CrLf,
    /// A bare `\n`.
    Lf,
}

impl Delimiter {
    /// The delimiter's bytes.
    pub fn as_bytes(self) -> &'static [u8] {
        match self {
            Self::CrLf => b"\r\n",
            Self::Lf => b"\n",
        }
    }
}

/// Incremental line splitter state.
#[derive(Debug, Clone)]
pub struct LineFramer {
    delimiter: Delimiter,
    max_line: usize,
    /// Bytes at the start of the next input already searched without finding a delimiter.
    /// INVARIANT: they all belong to the one incomplete line at the start of that input.
    searched: usize,
}

impl LineFramer {
    /// A splitter for `delimiter` that refuses lines longer than `max_line` bytes (delimiter
    /// not counted).
    pub fn new(delimiter: Delimiter, max_line: usize) -> Self {
        Self {
            delimiter,
            max_line,
            searched: 0,
        }
    }

    /// Calls `take` with each complete line at the start of `input` (delimiter excluded), in
    /// order, while it returns `true`; returns the offset just past the last line taken. It
    /// stops without calling `take` at a line longer than `max_line`, and leaves that line
    /// and everything after it (the partial line at the end included) to a
    /// [`split`](Self::split) of the rest, which searches the rest from its start. One pass:
    /// no range is recorded for a line taken.
    #[inline]
    pub(crate) fn take_lines(
        &mut self,
        input: &[u8],
        mut take: impl FnMut(&[u8]) -> bool,
    ) -> usize {
        let from = std::mem::take(&mut self.searched);
        // The limit read once, the line sliced before its length is taken (its bounds
        // checked, the length needs no check of its own): 3 instructions a line fewer than
        // reading the fields and taking the range's length (callgrind, `betfair_mcm`).
        let max_line = self.max_line;
        let mut taken_to = 0;
        for_each_complete_line(self.delimiter, input, from, |line, next| {
            let line = &input[line];
            if line.len() > max_line || !take(line) {
                return false;
            }
            taken_to = next;
            true
        });
        taken_to
    }

    /// Finds every complete line in `input` and pushes its range (delimiter excluded) to
    /// `out`. Returns the bytes consumed (through the last delimiter); the next call must pass
    /// the input again from there, plus what arrived since.
    pub fn split(&mut self, input: &[u8], out: &mut Vec<Range<usize>>) -> Result<usize, LineError> {
        let mut line_start = 0;
        let mut too_long = false;
        let max_line = self.max_line;
        for_each_complete_line(self.delimiter, input, self.searched, |line, next| {
            if line.len() > max_line {
                too_long = true;
                return false;
            }
            out.push(line);
            line_start = next;
            true
        });
        if too_long {
            return Err(LineError::LineTooLong { max: self.max_line });
        }
        let pending = input.len() - line_start;
        // A pending `\r` may still become part of a delimiter; it is not line content yet.
        let content =
            pending - usize::from(self.delimiter == Delimiter::CrLf && input.ends_with(b"\r"));
        if content > self.max_line {
            return Err(LineError::LineTooLong { max: self.max_line });
        }
        self.searched = pending;
        Ok(line_start)
    }
}

/// Calls `line` with each complete line of `input`, searching for delimiters from `from` on
/// (the bytes before it are known to hold none): the line's range (delimiter excluded) and
/// where the next starts, while it returns true.
#[inline(always)]
fn for_each_complete_line(
    delimiter: Delimiter,
    input: &[u8],
    from: usize,
    mut line: impl FnMut(Range<usize>, usize) -> bool,
) {
    let from = from.min(input.len());
    let mut line_start = 0;
    for_each_newline(&input[from..], |nl| {
        let nl = from + nl;
        let end = match delimiter {
            Delimiter::Lf => nl,
            Delimiter::CrLf if nl > line_start && input[nl - 1] == b'\r' => nl - 1,
            Delimiter::CrLf => return true,
        };
        let range = line_start..end;
        line_start = nl + 1;
        line(range, line_start)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(framer: &mut LineFramer, input: &[u8]) -> (Vec<Vec<u8>>, usize) {
        let mut out = Vec::new();
        let consumed = framer.split(input, &mut out).unwrap();
        (
            out.into_iter().map(|r| input[r].to_vec()).collect(),
            consumed,
        )
    }

    #[test]
    fn taking_lines_stops_at_a_declined_or_overlong_line_and_leaves_the_rest_to_split() {
        let mut f = LineFramer::new(Delimiter::CrLf, 6);
        let input = b"one\r\ntwo\r\nthree\r\npart";
        let mut taken = Vec::new();
        let end = f.take_lines(input, |l| {
            taken.push(l.to_vec());
            l != b"two"
        });
        assert_eq!(taken, vec![b"one".to_vec(), b"two".to_vec()]);
        assert_eq!(end, 5, "just past the last line taken");
        // The rest is split from its start, the declined line included.
        assert_eq!(
            lines(&mut f, &input[end..]),
            (vec![b"two".to_vec(), b"three".to_vec()], 12)
        );
        // A line longer than the limit is not offered; split reports it.
        let mut f = LineFramer::new(Delimiter::CrLf, 3);
        let input = b"abc\r\nabcd\r\n";
        let end = f.take_lines(input, |_| true);
        assert_eq!(end, 5);
        let mut out = Vec::new();
        assert!(matches!(
            f.split(&input[end..], &mut out),
            Err(LineError::LineTooLong { max: 3 })
        ));
    }

    #[test]
    fn many_lines_in_one_read() {
        let mut f = LineFramer::new(Delimiter::CrLf, 100);
        let (got, consumed) = lines(&mut f, b"{\"op\":\"mcm\"}\r\n{}\r\n\r\npartial");
        assert_eq!(
            got,
            vec![b"{\"op\":\"mcm\"}".to_vec(), b"{}".to_vec(), b"".to_vec()]
        );
        assert_eq!(consumed, 20);
    }

    #[test]
    fn cr_at_the_end_of_one_read_lf_at_the_start_of_the_next() {
        let mut f = LineFramer::new(Delimiter::CrLf, 100);
        let (got, consumed) = lines(&mut f, b"abc\r");
        assert!(got.is_empty());
        assert_eq!(consumed, 0);
        let (got, consumed) = lines(&mut f, b"abc\r\n");
        assert_eq!((got, consumed), (vec![b"abc".to_vec()], 5));
    }

    #[test]
    fn bare_lf_is_content_in_crlf_mode_and_a_delimiter_in_lf_mode() {
        let mut f = LineFramer::new(Delimiter::CrLf, 100);
        assert_eq!(lines(&mut f, b"a\nb\r\n").0, vec![b"a\nb".to_vec()]);
        let mut f = LineFramer::new(Delimiter::Lf, 100);
        assert_eq!(
            lines(&mut f, b"a\nb\r\n").0,
            vec![b"a".to_vec(), b"b\r".to_vec()]
        );
    }

    #[test]
    fn line_over_the_limit_is_an_error_before_its_end_arrives() {
        let mut f = LineFramer::new(Delimiter::CrLf, 4);
        let mut out = Vec::new();
        assert_eq!(
            f.split(b"1234\r", &mut out),
            Ok(0),
            "4 bytes and a pending CR fit"
        );
        assert_eq!(
            f.split(b"12345", &mut out),
            Err(LineError::LineTooLong { max: 4 })
        );
        let mut f = LineFramer::new(Delimiter::CrLf, 4);
        assert_eq!(
            f.split(b"ok\r\n12345\r\n", &mut out),
            Err(LineError::LineTooLong { max: 4 })
        );
    }

    #[test]
    fn a_complete_line_of_exactly_the_limit_is_a_line() {
        // `max_line` is the longest line accepted, whether its delimiter arrives with it or
        // later.
        for delimiter in [Delimiter::CrLf, Delimiter::Lf] {
            let mut f = LineFramer::new(delimiter, 4);
            let mut input = b"1234".to_vec();
            input.extend_from_slice(delimiter.as_bytes());
            assert_eq!(lines(&mut f, &input), (vec![b"1234".to_vec()], input.len()));
            // The content first, its delimiter in a later read.
            assert_eq!(lines(&mut f, b"1234"), (vec![], 0));
            assert_eq!(lines(&mut f, &input), (vec![b"1234".to_vec()], input.len()));
            let mut f = LineFramer::new(delimiter, 4);
            assert_eq!(f.take_lines(&input, |line| line == b"1234"), input.len());
        }
    }
}
