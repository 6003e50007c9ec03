//! UTF-8 validation of text messages, whole or arriving in pieces (across reads and across
//! fragments): an ASCII check first (AVX-512 or AVX2 vectors where the CPU has them),
//! simdutf8 for what is not ASCII. Each byte is read once, except that the first and last
//! vectors may overlap their neighbours, that a stride (256 or 512 bytes) with a byte ≥ 0x80
//! (and up to a vector before it) is read again by simdutf8, that up to 3 bytes of a
//! character split between pieces are carried and checked when the character completes, and
//! that a piece the fast validator rejects (it ends inside a character, or holds invalid
//! bytes) is read again by the one that says where.

/// Whether `bytes` is valid UTF-8, as one whole message. Market data is nearly all ASCII, and
/// whether bytes are ASCII is one OR a vector of them, at the speed they load: cheaper than
/// simdutf8, whose blocks carry the state of a character across them (per message, each read
/// from a buffer of them, `cargo bench -p feedwire-core --bench utf8`, in AVX2 vectors on an
/// AMD EPYC: 1 KB 11.1 vs 15.9 ns, 9 KB 86 vs 106 ns, 454 KB 4.4 vs 4.9 µs; in AVX-512 vectors
/// on a Xeon: 1 KB 9.2 vs 15.7 ns, 9 KB 88 vs 125 ns; with its loads on vector boundaries, in
/// a later, slower hour: 1 KB 10.0 vs 21.8 ns, 9 KB 73 vs 198, 454 KB 4.1 vs 9.8 µs, where
/// the check's own time fell 23%, 47% and 49%). So an ASCII check goes first (see
/// [`ascii_prefix`]) and simdutf8 validates only what it leaves: text that is not ASCII reads
/// up to one stride twice (1 KB with a `€` first 21 vs 24 ns, last 33 vs 27 ns on the EPYC;
/// on the Xeon, whose simdutf8 is faster than the ASCII check and simdutf8 together there,
/// 20 vs 17 ns and, in the longer stride, 22.5 vs 18.5 — 20.4 in AVX2 strides).
#[inline(always)]
pub(crate) fn is_valid(bytes: &[u8]) -> bool {
    is_valid_past(bytes, ascii_prefix(bytes))
}

/// Whether `bytes`, whose first `ascii` bytes are ASCII (and end on a character boundary),
/// is valid UTF-8: simdutf8 reads only the rest, and only if there is one.
#[inline(always)]
pub(crate) fn is_valid_past(bytes: &[u8], ascii: usize) -> bool {
    ascii == bytes.len() || simdutf8::basic::from_utf8(&bytes[ascii..]).is_ok()
}

/// [`ascii_prefix`] of a short `bytes` by the inline 16-byte check: all of it or nothing.
#[inline(always)]
pub(crate) fn ascii_prefix_inline(bytes: &[u8]) -> usize {
    if crate::vector::is_ascii(bytes) {
        bytes.len()
    } else {
        0
    }
}

/// Bytes the AVX2 check reads before it asks whether to go on (8 vectors): a byte ≥ 0x80
/// makes simdutf8 read again at most this much, and the question (one mask and branch per
/// 8 loads) costs ASCII nothing measurable.
#[cfg(target_arch = "x86_64")]
pub(crate) const AVX2_STRIDE: usize = 256;

/// Bytes the AVX-512 check reads before it asks whether to go on (8 vectors of 64 bytes, which LLVM
/// ORs three at a time with `vpternlogq`; measured with the former byte-array accumulator, which
/// compiled to the same loop standing alone). Against 32-byte vectors in 256-byte strides on an
/// AVX-512 Xeon, per message from a 256 KiB buffer of them: 310 B 3.6 vs 4.1 ns, 1 KB 8.7 vs 11.0,
/// 9 KB 81 vs 98, 454 KB 4.2 vs 4.9 µs; in 1,024-byte strides 9 KB and 454 KB gained 6-8% more and
/// 1 KB lost what it had gained (its bytes all in the tail).
#[cfg(target_arch = "x86_64")]
pub(crate) const AVX512_STRIDE: usize = 512;

/// Length of a prefix of `bytes` known to be ASCII: all of `bytes`, or where the part
/// simdutf8 must read starts (always on a character boundary, every byte before it being
/// ASCII). Below [`VECTORS_FROM`] bytes the check is in 16-byte SSE2 vectors, inline
/// ([`crate::vector::is_ascii`]). From there it runs in a function compiled for the widest
/// vectors in use ([`crate::text_lane::in_vectors`], which asks once a call): where the CPU
/// has AVX-512 (BW), in 64-byte vectors, [`AVX512_STRIDE`] bytes at a time; else where it has
/// AVX2, in 32-byte vectors, [`AVX2_STRIDE`] bytes at a time (either as far as
/// [`crate::limit_vector_width`] allows): the prefix is the strides before the first that
/// holds a byte ≥ 0x80, counted from the first vector boundary in memory where `bytes` is 512
/// bytes or longer ([`crate::text_lane::ascii_prefix`]). Without either,
/// [`ascii_prefix_without_vectors`].
#[inline(always)]
pub(crate) fn ascii_prefix(bytes: &[u8]) -> usize {
    if bytes.len() < VECTORS_FROM {
        return ascii_prefix_inline(bytes);
    }
    crate::text_lane::in_vectors(AsciiPrefix(bytes))
}

/// [`ascii_prefix`] as a lane: the widest vectors' function runs only the ASCII walk.
pub(crate) struct AsciiPrefix<'a>(pub(crate) &'a [u8]);

impl crate::text_lane::Lane for AsciiPrefix<'_> {
    type Output = usize;

    #[inline(always)]
    fn run<C: crate::text_lane::TextCheck>(self, check: C) -> usize {
        check.ascii_prefix(self.0)
    }
}

/// [`ascii_prefix`] where the CPU has neither AVX2 nor AVX-512 (or they are capped): the
/// inline check pays up to [`INLINE_UP_TO`] bytes (all of them when they are ASCII, else
/// nothing); beyond, simdutf8 alone is as fast (1 KB 13.8 vs 14.4 ns, measured with the former
/// check in 8-byte words) or faster (9 KB 80 vs 125 ns), so the prefix is empty.
#[inline(always)]
pub(crate) fn ascii_prefix_without_vectors(bytes: &[u8]) -> usize {
    if bytes.len() <= INLINE_UP_TO {
        ascii_prefix_inline(bytes)
    } else {
        0
    }
}

/// Shortest input (bytes) the AVX2 check takes: below, its call costs more than it saves
/// (measured against the former word check: 190 B in words 4.3 ns, in vectors 4.6; 310 B
/// 5.4-8.4 vs 3.0-3.5). The SSE2 check that replaced the words: 190 B 3.3 vs 3.75 ns
/// (`--bench utf8`), 21 instructions a message fewer; a whole stream's message took the same
/// time (`in_memory small_aggtrade`, 26.6 ns both). The AVX-512 check starts there too.
const VECTORS_FROM: usize = 256;

/// Longest input (bytes) checked inline when no vector check takes it.
pub(crate) const INLINE_UP_TO: usize = 512;

/// Validation state of one text message.
#[derive(Debug, Default, Clone)]
pub(crate) struct Utf8Stream {
    /// Start of a character whose remaining bytes have not arrived yet.
    carry: [u8; 4],
    /// INVARIANT: `carry_len < 4`, and `carry[..carry_len]` is a valid prefix of a character.
    carry_len: usize,
}

/// The bytes seen so far cannot be the start of valid UTF-8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InvalidUtf8;

impl Utf8Stream {
    /// Validates the next piece of the message. Fails as soon as an invalid sequence is seen,
    /// even if its character is not complete yet.
    pub(crate) fn feed(&mut self, mut piece: &[u8]) -> Result<(), InvalidUtf8> {
        if self.carry_len > 0 {
            let width = char_width(self.carry[0]);
            let take = (width - self.carry_len).min(piece.len());
            self.carry[self.carry_len..self.carry_len + take].copy_from_slice(&piece[..take]);
            self.carry_len += take;
            piece = &piece[take..];
            match simdutf8::compat::from_utf8(&self.carry[..self.carry_len]) {
                Ok(_) => self.carry_len = 0,
                Err(e) if e.error_len().is_some() => return Err(InvalidUtf8),
                // Still incomplete: `piece` is empty now.
                Err(_) => return Ok(()),
            }
        }
        // Nearly every piece is whole characters (market data is nearly all ASCII): the ASCII
        // check, then the faster validator that does not locate errors, settle it; only a
        // rest they reject (a character cut by the read, or invalid bytes) is read again to
        // find where.
        let rest = &piece[ascii_prefix(piece)..];
        if rest.is_empty() || simdutf8::basic::from_utf8(rest).is_ok() {
            return Ok(());
        }
        match simdutf8::compat::from_utf8(rest) {
            Ok(_) => Ok(()),
            Err(e) if e.error_len().is_some() => Err(InvalidUtf8),
            Err(e) => {
                let tail = &rest[e.valid_up_to()..];
                self.carry[..tail.len()].copy_from_slice(tail);
                self.carry_len = tail.len();
                Ok(())
            }
        }
    }

    /// Validates the last piece of a message and ends it. With nothing carried over (the
    /// common case: a whole message in one read) this is [`is_valid`]: the ASCII check, and
    /// the faster validator that does not locate errors only where it is not ASCII.
    pub(crate) fn feed_last(&mut self, piece: &[u8]) -> Result<(), InvalidUtf8> {
        if self.carry_len == 0 && is_valid(piece) {
            return Ok(());
        }
        self.feed(piece)?;
        self.finish()
    }

    /// Ends the message: a character left incomplete is invalid. Resets for the next message.
    pub(crate) fn finish(&mut self) -> Result<(), InvalidUtf8> {
        let complete = self.carry_len == 0;
        self.carry_len = 0;
        if complete {
            Ok(())
        } else {
            Err(InvalidUtf8)
        }
    }
}

/// Length of the character a lead byte starts; only called on bytes simdutf8 accepted as
/// the start of an incomplete character, so 2..=4.
fn char_width(lead: u8) -> usize {
    match lead {
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        _ => 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream_validate(pieces: &[&[u8]]) -> Result<(), InvalidUtf8> {
        let mut s = Utf8Stream::default();
        for p in pieces {
            s.feed(p)?;
        }
        s.finish()
    }

    /// A vector check this CPU can run: its name, the check, its stride and its vector width
    /// (bytes; it takes any input at least one vector long).
    type VectorCheck = (&'static str, fn(&[u8]) -> usize, usize, usize);

    /// Every vector check this CPU can run, not only the one [`ascii_prefix`] picks (a
    /// machine with AVX-512 tests the AVX2 check too).
    fn vector_checks() -> Vec<VectorCheck> {
        #[allow(unused_mut)]
        let mut checks: Vec<VectorCheck> = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            use crate::vector_width::{widest_of_cpu, VectorWidth};
            if widest_of_cpu() >= VectorWidth::Bits256 {
                // SAFETY: pushed only where the CPU has AVX2 (`widest_of_cpu` says `Bits256`
                // or wider only then).
                #[allow(unsafe_code)]
                let avx2: fn(&[u8]) -> usize =
                    |b| unsafe { crate::text_lane::run_avx2(AsciiPrefix(b)) };
                checks.push(("avx2", avx2, AVX2_STRIDE, 32));
            }
            if widest_of_cpu() == VectorWidth::Bits512 {
                // SAFETY: pushed only where the CPU has AVX-512 F and BW (`widest_of_cpu`
                // says `Bits512` only then).
                #[allow(unsafe_code)]
                let avx512: fn(&[u8]) -> usize =
                    |b| unsafe { crate::text_lane::run_avx512(AsciiPrefix(b)) };
                checks.push(("avx512", avx512, AVX512_STRIDE, 64));
            }
        }
        checks
    }

    /// The stride and vector width (bytes) [`ascii_prefix`] takes `len` bytes in, if it takes
    /// them in vectors.
    fn stride(len: usize) -> Option<(usize, usize)> {
        #[cfg(target_arch = "x86_64")]
        if len >= VECTORS_FROM {
            use crate::vector_width::{widest_of_cpu, VectorWidth};
            match widest_of_cpu() {
                VectorWidth::Bits512 => return Some((AVX512_STRIDE, 64)),
                VectorWidth::Bits256 => return Some((AVX2_STRIDE, 32)),
                _ => {}
            }
        }
        let _ = len;
        None
    }

    /// Whether [`ascii_prefix`] checks `len` bytes itself rather than leave them to simdutf8.
    fn prefix_checks(len: usize) -> bool {
        stride(len).is_some() || len <= INLINE_UP_TO
    }

    /// The ASCII prefix a vector check in strides of `stride` and vectors of `width` bytes reports
    /// for `bytes` whose first byte ≥ 0x80 is at `at`: the whole strides before it, counted from
    /// the first vector boundary in memory from `ALIGNED_FROM` (512) bytes on (none if `at` is
    /// before the first boundary past the start), else from the start.
    fn strides_before(bytes: &[u8], at: usize, stride: usize, width: usize) -> usize {
        let lead = if bytes.len() >= 512 {
            bytes.as_ptr().addr().wrapping_neg() % width
        } else {
            0
        };
        if lead != 0 && at < width {
            0
        } else {
            lead + (at - lead) / stride * stride
        }
    }

    /// The ASCII prefix [`ascii_prefix`] reports for `bytes` whose first byte ≥ 0x80 is at
    /// `at`: the whole strides before it in a vector check, else nothing.
    fn prefix_before(bytes: &[u8], at: usize) -> usize {
        stride(bytes.len()).map_or(0, |(s, w)| strides_before(bytes, at, s, w))
    }

    /// `len` bytes of `fill` in `buf`, starting `rem` bytes past a 64-byte boundary in memory.
    fn placed(buf: &mut Vec<u8>, len: usize, rem: usize, fill: u8) -> &mut [u8] {
        buf.clear();
        buf.resize(len + 128, fill);
        let from = (rem + 64 - buf.as_ptr().addr() % 64) % 64;
        &mut buf[from..from + len]
    }

    #[test]
    fn whole_message_check_finds_a_high_byte_at_every_position() {
        // The prefixes asserted are the CPU's widest check's.
        let _width = crate::vector_width::width_lock();
        // Lengths around every width the checks switch at: the byte loop, 16-byte vectors,
        // 64-byte blocks and their overlapping tail, the vector checks and their strides
        // (where the CPU has them; the inline check and each vector check are asserted at
        // every length on their own too).
        let lengths = (0..=100)
            .chain([127, 128, 129, 190])
            .chain(250..=260)
            .chain(510..=514)
            .chain([1010])
            .chain(1022..=1026);
        let checks = vector_checks();
        let mut buf = Vec::new();
        // On a 64-byte boundary, one byte past one (the vector checks' first load spans the
        // boundary) and 40 past (a boundary 24 bytes in, for 32- and 64-byte vectors alike).
        for (len, rem) in lengths.flat_map(|len| [0, 1, 40].map(|rem| (len, rem))) {
            let text = placed(&mut buf, len, rem, b'a');
            let what = |at: &str| format!("{at}{len} bytes, {rem} past a boundary");
            assert!(is_valid(text), "{}", what(""));
            let checked = if prefix_checks(len) { len } else { 0 };
            assert_eq!(ascii_prefix(text), checked, "{}", what(""));
            assert!(crate::vector::is_ascii(text), "{}", what(""));
            let inline = if len <= INLINE_UP_TO { len } else { 0 };
            assert_eq!(ascii_prefix_without_vectors(text), inline, "{}", what(""));
            // [`ascii_prefix`] takes a vector check from `VECTORS_FROM` bytes on, a lane from
            // the check's vector width: each is asserted from its width on.
            let in_vectors: Vec<VectorCheck> =
                checks.iter().filter(|c| len >= c.3).copied().collect();
            for &(name, check, _, _) in &in_vectors {
                assert_eq!(check(text), len, "{name}: {}", what(""));
            }
            for at in 0..len {
                let here = what(&format!("at {at} of "));
                text[at] = 0xFF;
                assert!(!is_valid(text), "0xFF {here}");
                assert_eq!(ascii_prefix(text), prefix_before(text, at), "0xFF {here}");
                text[at] = 0x80;
                assert_eq!(ascii_prefix(text), prefix_before(text, at), "0x80 {here}");
                for &(name, check, stride, width) in &in_vectors {
                    let expected = strides_before(text, at, stride, width);
                    assert_eq!(check(text), expected, "{name}: 0x80 {here}");
                }
                assert!(!crate::vector::is_ascii(text), "0x80 {here}");
                assert_eq!(ascii_prefix_without_vectors(text), 0, "0x80 {here}");
                // Two high bytes in the same lane of two vectors (16, 32 or 64 bytes apart)
                // or blocks: the checks gather with OR, under which nothing cancels.
                for gap in [8, 16, 32, 64, 128] {
                    if at + gap < len {
                        text[at + gap] = 0x80;
                        let what = format!("0x80 {here} and {gap} bytes on");
                        assert!(!is_valid(text), "{what}");
                        assert!(!crate::vector::is_ascii(text), "{what}");
                        for &(name, check, stride, width) in &in_vectors {
                            let expected = strides_before(text, at, stride, width);
                            assert_eq!(check(text), expected, "{name}: {what}");
                        }
                        text[at + gap] = b'a';
                    }
                }
                if at + 2 <= len {
                    text[at..at + 2].copy_from_slice("é".as_bytes());
                    assert!(is_valid(text), "é {here}");
                    text[at + 1] = b'a';
                }
                text[at] = b'a';
            }
        }
    }

    #[test]
    fn text_that_is_not_ascii_is_validated_from_its_first_stride_that_is_not() {
        // The prefixes asserted are the CPU's widest check's.
        let _width = crate::vector_width::width_lock();
        let euro = "€".as_bytes();
        let mut buf = Vec::new();
        // Each vector check on its own strides, counted from the first vector boundary (on
        // one, and a byte past one: the boundary a vector less a byte in), then whichever
        // `ascii_prefix` picks (none beyond 512 bytes without AVX2: the prefix is empty
        // there, validity the same).
        for (name, check, s, w) in vector_checks() {
            for rem in [0, 1] {
                let what = format!("{name}, {rem} past a boundary");
                let text = placed(&mut buf, 30 * s, rem, b'a');
                let lead = text.as_ptr().addr().wrapping_neg() % w;
                assert_eq!(lead, (w - rem) % w, "{what}");
                // A character across the first stride's end: the second stride starts in it.
                text[lead + s - 1..lead + s + 2].copy_from_slice(euro);
                assert_eq!(check(text), lead, "{what}");
                // Across the 20th: 19 strides are ASCII, simdutf8 starts at the 20th.
                let text = placed(&mut buf, 30 * s, rem, b'a');
                text[lead + 20 * s - 1..lead + 20 * s + 2].copy_from_slice(euro);
                assert_eq!(check(text), lead + 19 * s, "{what}");
                // In the bytes before the first boundary: nothing is known to be ASCII.
                if lead != 0 {
                    let text = placed(&mut buf, 30 * s, rem, b'a');
                    text[lead - 1..lead + 2].copy_from_slice(euro);
                    assert_eq!(check(text), 0, "{what}");
                }
                // An ASCII message is one prefix, whatever its length; a rest shorter than a
                // vector is checked as the last vector, overlapping the stride before.
                for tail in [1, 5, 31, 32, 33, 63, 64, 65, 255, s - 1] {
                    let text = placed(&mut buf, 2 * s + tail, rem, b'x');
                    assert_eq!(check(text), text.len(), "{what}: tail {tail}");
                    *text.last_mut().expect("not empty") = 0x80;
                    let strides = if lead + 2 * s < text.len() { 2 } else { 1 };
                    assert_eq!(check(text), lead + strides * s, "{what}: tail {tail}");
                }
            }
        }
        let s = stride(VECTORS_FROM).map_or(256, |(s, _)| s);
        let prefix = |n: usize| if stride(n).is_some() { n } else { 0 };
        let text = placed(&mut buf, 30 * s, 0, b'a');
        text[s - 1..s + 2].copy_from_slice(euro);
        assert_eq!(ascii_prefix(text), 0);
        assert!(is_valid(text));
        let text = placed(&mut buf, 30 * s, 0, b'a');
        text[20 * s - 1..20 * s + 2].copy_from_slice(euro);
        assert_eq!(ascii_prefix(text), prefix(19 * s));
        assert!(is_valid(text));
        // Invalid after valid text that is not ASCII, strides later.
        text[30 * s - 1] = 0xFF;
        assert!(!is_valid(text));
        for tail in [1, 5, 31, 32, 33, 255] {
            let text = placed(&mut buf, 2 * s + tail, 0, b'x');
            assert_eq!(ascii_prefix(text), prefix(text.len()), "tail {tail}");
            assert!(is_valid(text), "tail {tail}");
            *text.last_mut().expect("not empty") = 0x80;
            assert_eq!(ascii_prefix(text), prefix(2 * s), "tail {tail}");
            assert!(!is_valid(text), "tail {tail}");
        }
    }

    #[test]
    fn a_long_ascii_piece_that_ends_inside_a_character_carries_it() {
        // Long enough for a vector check where the CPU has one.
        let mut piece = vec![b'a'; 300];
        piece.extend_from_slice(&"€".as_bytes()[..2]);
        let mut s = Utf8Stream::default();
        assert_eq!(s.feed(&piece), Ok(()));
        assert_eq!(s.feed_last(&"€b".as_bytes()[2..]), Ok(()));
        let mut s = Utf8Stream::default();
        assert_eq!(s.feed(&piece), Ok(()));
        assert_eq!(s.feed_last(b"b"), Err(InvalidUtf8));
    }

    proptest::proptest! {
        /// Mostly ASCII with a few arbitrary bytes anywhere, as a whole message and in two
        /// pieces: the same answer as the standard library's validator.
        #[test]
        fn agrees_with_std(
            len in 0usize..600,
            chars in proptest::collection::vec((0usize..600, proptest::char::any()), 0..4),
            bytes in proptest::collection::vec((0usize..600, proptest::prelude::any::<u8>()), 0..2),
            split in 0usize..700,
        ) {
            let mut text: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            for (at, c) in chars {
                let at = at.min(text.len());
                text.splice(at..at, c.to_string().into_bytes());
            }
            for (at, byte) in bytes {
                if at < text.len() {
                    text[at] = byte;
                }
            }
            let expect = std::str::from_utf8(&text).is_ok();
            proptest::prop_assert_eq!(is_valid(&text), expect);
            let split = split.min(text.len());
            let streamed = stream_validate(&[&text[..split], &text[split..]]);
            proptest::prop_assert_eq!(streamed.is_ok(), expect);
        }
    }

    #[test]
    fn every_split_of_valid_text_is_valid() {
        let text = "κόσμε a€𝄞z".as_bytes();
        for i in 0..=text.len() {
            for j in i..=text.len() {
                let r = stream_validate(&[&text[..i], &text[i..j], &text[j..]]);
                assert_eq!(r, Ok(()), "split {i} {j}");
            }
        }
    }

    #[test]
    fn every_split_of_invalid_text_is_invalid() {
        let cases: [&[u8]; 5] = [
            b"\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5\xed\xa0\x80edited",
            b"abc\xff",
            b"\xf4\x90\x80\x80",
            b"\xe2\x82",
            b"\xc0\xaf",
        ];
        for text in cases {
            for i in 0..=text.len() {
                let r = stream_validate(&[&text[..i], &text[i..]]);
                assert_eq!(r, Err(InvalidUtf8), "{text:?} split {i}");
            }
        }
    }

    #[test]
    fn feed_last_agrees_with_feed_and_finish() {
        let cases: [&[u8]; 4] = [b"plain", "€𝄞".as_bytes(), b"bad \xff", b"cut \xe2\x82"];
        for text in cases {
            for i in 0..=text.len() {
                let mut a = Utf8Stream::default();
                let ra = a.feed(&text[..i]).and_then(|()| a.feed_last(&text[i..]));
                let mut b = Utf8Stream::default();
                let rb = b
                    .feed(&text[..i])
                    .and_then(|()| b.feed(&text[i..]))
                    .and_then(|()| b.finish());
                assert_eq!(ra, rb, "{text:?} split {i}");
            }
        }
    }

    #[test]
    fn fails_fast_before_the_character_completes() {
        let mut s = Utf8Stream::default();
        assert_eq!(s.feed(b"ok\xe2"), Ok(()));
        // 0xe2 must be followed by a continuation byte; 'a' is not one.
        assert_eq!(s.feed(b"a"), Err(InvalidUtf8));
        let mut s = Utf8Stream::default();
        // 0xed 0xa0 starts a UTF-16 surrogate: invalid at the second byte.
        assert_eq!(s.feed(b"\xed"), Ok(()));
        assert_eq!(s.feed(b"\xa0"), Err(InvalidUtf8));
    }
}
