//! Sixteen-byte vector operations for the per-message paths: SSE2 (in every x86-64) through
//! `safe_arch`, a byte loop elsewhere. Written out rather than left to autovectorization: a
//! byte loop came out differently wherever it was inlined — 16-byte vectors in one place,
//! scalar code or vectors across loads (a byte of each) in another (a head's layout check: 40
//! instructions in one caller, 600 in another).

#[cfg(all(
    any(target_arch = "x86", target_arch = "x86_64"),
    target_feature = "sse2"
))]
mod imp {
    use safe_arch::{
        add_i8_m128i, bitor_m128i, cmp_eq_mask_i8_m128i, load_unaligned_m128i, m128i,
        move_mask_i8_m128i, set_splat_i8_m128i, sub_saturating_u8_m128i, zeroed_m128i,
    };

    /// Sixteen bytes, nonzero where a check failed.
    pub(crate) type Flags = m128i;

    /// Sixteen bytes kept for checks, in the vector register's own type: aligned, so that an
    /// operation reads it straight from memory (no separate unaligned load).
    pub(crate) type Pattern = m128i;

    #[inline(always)]
    pub(crate) fn pattern(bytes: [u8; 16]) -> Pattern {
        m128i::from(bytes)
    }

    #[inline(always)]
    pub(crate) fn no_flags() -> Flags {
        zeroed_m128i()
    }

    #[inline(always)]
    pub(crate) fn flag_out_of_range(
        flags: Flags,
        bytes: &[u8; 16],
        offset: &Pattern,
        span: &Pattern,
    ) -> Flags {
        let b = load_unaligned_m128i(bytes);
        let out_of_range = sub_saturating_u8_m128i(add_i8_m128i(b, *offset), *span);
        let backslash = cmp_eq_mask_i8_m128i(b, set_splat_i8_m128i(b'\\' as i8));
        bitor_m128i(flags, bitor_m128i(out_of_range, backslash))
    }

    #[inline(always)]
    pub(crate) fn none_flagged(flags: Flags) -> bool {
        move_mask_i8_m128i(cmp_eq_mask_i8_m128i(flags, zeroed_m128i())) == 0xFFFF
    }

    #[inline(always)]
    pub(crate) fn is_ascii(bytes: &[u8]) -> bool {
        let load = |chunk: &[u8]| {
            chunk
                .first_chunk()
                .map_or(zeroed_m128i(), load_unaligned_m128i)
        };
        let block = |b: &[u8]| {
            bitor_m128i(
                bitor_m128i(load(b), load(&b[16..])),
                bitor_m128i(load(&b[32..]), load(&b[48..])),
            )
        };
        let acc = if let Some(last) = bytes.last_chunk::<64>() {
            let mut blocks = bytes.chunks_exact(64);
            let acc = blocks
                .by_ref()
                .fold(zeroed_m128i(), |acc, b| bitor_m128i(acc, block(b)));
            // The rest as the last 64 bytes, overlapping bytes already read.
            if blocks.remainder().is_empty() {
                acc
            } else {
                bitor_m128i(acc, block(last))
            }
        } else if let Some(last) = bytes.last_chunk::<16>() {
            let mut chunks = bytes.chunks_exact(16);
            let acc = chunks
                .by_ref()
                .fold(zeroed_m128i(), |acc, c| bitor_m128i(acc, load(c)));
            bitor_m128i(acc, load(last))
        } else {
            return bytes.is_ascii();
        };
        move_mask_i8_m128i(acc) == 0
    }
}

/// The byte loops of [`imp`] where SSE2 is not there; compiled for tests everywhere, so that
/// its results are held to the vector code's.
#[cfg(any(
    test,
    not(all(
        any(target_arch = "x86", target_arch = "x86_64"),
        target_feature = "sse2"
    ))
))]
mod portable {
    pub(crate) type Flags = [u8; 16];

    pub(crate) type Pattern = [u8; 16];

    #[inline(always)]
    pub(crate) fn pattern(bytes: [u8; 16]) -> Pattern {
        bytes
    }

    #[inline(always)]
    pub(crate) fn no_flags() -> Flags {
        [0; 16]
    }

    #[inline(always)]
    pub(crate) fn flag_out_of_range(
        mut flags: Flags,
        bytes: &[u8; 16],
        offset: &[u8; 16],
        span: &[u8; 16],
    ) -> Flags {
        for i in 0..16 {
            let b = bytes[i];
            let out_of_range = b.wrapping_add(offset[i]).saturating_sub(span[i]);
            flags[i] |= out_of_range | 0u8.wrapping_sub(u8::from(b == b'\\'));
        }
        flags
    }

    #[inline(always)]
    pub(crate) fn none_flagged(flags: Flags) -> bool {
        u128::from_ne_bytes(flags) == 0
    }

    #[inline(always)]
    pub(crate) fn is_ascii(bytes: &[u8]) -> bool {
        bytes.is_ascii()
    }
}

#[cfg(not(all(
    any(target_arch = "x86", target_arch = "x86_64"),
    target_feature = "sse2"
)))]
use portable as imp;

/// Sixteen bytes of check results: nonzero where a byte failed.
pub(crate) use imp::Flags;

/// Flags with nothing flagged.
pub(crate) use imp::no_flags;

/// Sixteen bytes a check compares with, as [`pattern`] makes them.
pub(crate) use imp::Pattern;

/// The pattern of these bytes.
pub(crate) use imp::pattern;

/// `flags` with each byte of `bytes` flagged whose `byte + offset` (wrapping, byte by byte)
/// is over `span`, or that is a backslash.
pub(crate) use imp::flag_out_of_range;

/// Whether nothing is flagged.
pub(crate) use imp::none_flagged;

/// Whether every byte of `bytes` is ASCII: 16-byte vectors ORed together (four a step), the
/// tail as the last whole ones again, one sign mask at the end.
pub(crate) use imp::is_ascii;

#[cfg(test)]
mod tests {
    use super::{flag_out_of_range, no_flags, none_flagged, pattern};

    proptest::proptest! {
        #[test]
        fn the_byte_loops_agree_with_the_vectors(
            mut bytes in proptest::array::uniform16(proptest::prelude::any::<u8>()),
            span in proptest::array::uniform16(proptest::prelude::any::<u8>()),
            over in proptest::option::of(0..16usize),
            slash in proptest::option::of(0..16usize),
            text in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
        ) {
            use super::portable;
            // Every byte within its span, but one taken past it and one made a backslash.
            let mut offset = bytes.map(|b| 0u8.wrapping_sub(b));
            if let Some(i) = over {
                offset[i] = offset[i].wrapping_add(span[i]).wrapping_add(1);
            }
            if let Some(i) = slash {
                bytes[i] = b'\\';
                offset[i] = 0u8.wrapping_sub(b'\\');
            }
            let vector = none_flagged(flag_out_of_range(
                no_flags(),
                &bytes,
                &pattern(offset),
                &pattern(span),
            ));
            let loops = portable::none_flagged(portable::flag_out_of_range(
                portable::no_flags(),
                &bytes,
                &portable::pattern(offset),
                &portable::pattern(span),
            ));
            proptest::prop_assert_eq!(vector, loops);
            let past = over.is_some_and(|i| span[i] < u8::MAX && Some(i) != slash);
            proptest::prop_assert_eq!(vector, !past && !bytes.contains(&b'\\'));
            proptest::prop_assert_eq!(super::is_ascii(&text), portable::is_ascii(&text));
            // Random bytes are nearly never all ASCII: the same text with the high bits off.
            let ascii: Vec<u8> = text.iter().map(|b| b & 0x7F).collect();
            proptest::prop_assert!(portable::is_ascii(&ascii));
            proptest::prop_assert_eq!(super::is_ascii(&ascii), portable::is_ascii(&ascii));
        }
    }

    /// A backslash is flagged whatever its range says, in the vectors and the byte loops
    /// alike — also where its range flags it too with every bit (`byte + offset` = 0xFF over
    /// a span of 0), which flags combined with `^` rather than `|` would cancel.
    #[test]
    fn a_backslash_out_of_its_range_too_is_flagged() {
        use super::portable;
        let mut bytes = [b'a'; 16];
        bytes[5] = b'\\';
        for off in 0..=u8::MAX {
            let mut offset = bytes.map(|b| 0u8.wrapping_sub(b));
            offset[5] = off;
            let mut span = [u8::MAX; 16];
            span[5] = 0;
            let vector = flag_out_of_range(no_flags(), &bytes, &pattern(offset), &pattern(span));
            assert!(!none_flagged(vector), "vectors, offset {off}");
            let loops = portable::flag_out_of_range(
                portable::no_flags(),
                &bytes,
                &portable::pattern(offset),
                &portable::pattern(span),
            );
            assert!(!portable::none_flagged(loops), "byte loops, offset {off}");
        }
    }

    #[test]
    fn is_ascii_sees_a_high_byte_anywhere_at_any_length() {
        for len in 0..=200 {
            let ascii = vec![b'a'; len];
            assert!(super::is_ascii(&ascii), "{len}");
            for at in 0..len {
                let mut high = ascii.clone();
                high[at] = 0x80;
                assert!(!super::is_ascii(&high), "{len} {at}");
            }
        }
    }

    #[test]
    fn a_byte_is_flagged_when_out_of_its_range_or_a_backslash() {
        // Byte 0 must be 7 exactly, byte 1 a digit, the rest anything.
        let mut offset = [0u8; 16];
        let mut span = [u8::MAX; 16];
        (offset[0], span[0]) = (0u8.wrapping_sub(7), 0);
        (offset[1], span[1]) = (0u8.wrapping_sub(b'0'), 9);
        for b0 in 0..=u8::MAX {
            for b1 in [b'0', b'9', b'/', b':', 0, 0xFF] {
                let mut bytes = [b'a'; 16];
                (bytes[0], bytes[1]) = (b0, b1);
                let fits = b0 == 7 && b1.is_ascii_digit();
                let flags = flag_out_of_range(no_flags(), &bytes, &pattern(offset), &pattern(span));
                assert_eq!(none_flagged(flags), fits, "{b0} {b1}");
            }
        }
        let mut bytes = [b'a'; 16];
        (bytes[0], bytes[1], bytes[9]) = (7, b'5', b'\\');
        let (offset, span) = (pattern(offset), pattern(span));
        assert!(!none_flagged(flag_out_of_range(
            no_flags(),
            &bytes,
            &offset,
            &span
        )));
    }
}
