//! Where the `\n` bytes of a read are, found a block at a time: one pass over [`BLOCK`] bytes
//! in the widest vectors the CPU has (AVX-512 or AVX2, as far as
//! [`crate::limit_vector_width`] allows) writes a bitmap of them, and each line then takes
//! one bit scan off it. `memchr` called once a line pays its calls, its setup and its tail
//! again for every line: on 0.18 KB Betfair lines (`in_memory betfair_mcm --lend`) a whole
//! stream took 241 instructions a line with it and 200 with the map in AVX2 (callgrind, which
//! has no AVX-512), 51-58 against 45-48 ns a line in AVX-512 (best of 5, four alternating
//! runs); over loopback, beside the benchmark's `memchr` splitter, 1.22-1.29× its CPU against
//! 1.01-1.07× (four alternating invocations of five rounds each).
//! Without AVX2 (or capped below it, or not on x86-64) the bitmap is filled from `memchr`.

/// Bytes mapped at a time: the bitmap lives on the stack (64 words), and a vector pass is one
/// call a block, not one a line.
const BLOCK: usize = 4096;

/// Words of the bitmap: bit `i` of word `w` says whether byte `64 w + i` of the block is
/// `\n`.
const WORDS: usize = BLOCK / 64;

/// Calls `found` with the position of each `\n` in `bytes`, in order, while it returns
/// true. One loop with its state in registers, inlined into the caller with `found`: as an
/// iterator the same search cost 36 instructions a line more (its state in memory, and the
/// caller's loop no longer inlined).
#[inline(always)]
pub(crate) fn for_each_newline(bytes: &[u8], mut found: impl FnMut(usize) -> bool) {
    let mut words = [0u64; WORDS];
    let mut block = 0;
    while block < bytes.len() {
        let end = bytes.len().min(block + BLOCK);
        let mapped = map_block(&mut words, &bytes[block..end]);
        for (w, &word) in mapped.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let at = block + w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if !found(at) {
                    return;
                }
            }
        }
        block = end;
    }
}

/// Writes the bitmap of `block` (at most [`BLOCK`] bytes) to the first words of `words`, as
/// many as cover it, and returns those. One call site for the caller's `found`, whatever the
/// CPU: with two (a `memchr` loop beside the bitmap's) it was no longer inlined.
#[inline(always)]
fn map_block<'w>(words: &'w mut [u64; WORDS], block: &[u8]) -> &'w [u64] {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::vector_width::{vector_width, VectorWidth};
        match vector_width() {
            // SAFETY: the one requirement of calling a function compiled for AVX-512 F and
            // BW is a CPU that has both, and `vector_width` says `Bits512` only where the CPU
            // said so (a cap only ever narrows it).
            #[allow(unsafe_code)]
            VectorWidth::Bits512 => unsafe { map_avx512(words, block) },
            // SAFETY: the same, for AVX2: `vector_width` says `Bits256` only where the CPU
            // has it.
            #[allow(unsafe_code)]
            VectorWidth::Bits256 => unsafe { map_avx2(words, block) },
            _ => map_with_memchr(words, block),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    map_with_memchr(words, block);
    let used = block.len().div_ceil(64);
    &words[..used]
}

/// [`map_block`] from `memchr`'s positions: any CPU.
#[inline(never)]
fn map_with_memchr(words: &mut [u64; WORDS], block: &[u8]) {
    *words = [0; WORDS];
    for at in memchr::memchr_iter(b'\n', block) {
        words[at / 64] |= 1 << (at % 64);
    }
}

/// [`map_block`] in 64-byte AVX-512 vectors: one compare into a mask register a word.
///
/// # Safety
/// The CPU must support AVX-512 F and BW.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
#[allow(unsafe_code)]
unsafe fn map_avx512(words: &mut [u64; WORDS], block: &[u8]) {
    use std::arch::x86_64::{
        __m512i, _mm512_cmpeq_epi8_mask, _mm512_loadu_si512, _mm512_set1_epi8,
    };
    let newline = _mm512_set1_epi8(b'\n' as i8);
    map_words(words, block, |chunk| {
        // SAFETY: `chunk` is 64 bytes, all readable; the load has no alignment requirement.
        let v = unsafe { _mm512_loadu_si512(chunk.as_ptr().cast::<__m512i>()) };
        _mm512_cmpeq_epi8_mask(v, newline)
    });
}

/// [`map_block`] in 32-byte AVX2 vectors: two compares and two byte masks a word.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(unsafe_code)]
unsafe fn map_avx2(words: &mut [u64; WORDS], block: &[u8]) {
    use std::arch::x86_64::{
        __m256i, _mm256_cmpeq_epi8, _mm256_loadu_si256, _mm256_movemask_epi8, _mm256_set1_epi8,
    };
    let newline = _mm256_set1_epi8(b'\n' as i8);
    map_words(words, block, |chunk| {
        // SAFETY: `chunk` is 64 bytes, all readable; the loads have no alignment requirement.
        let (low, high) = unsafe {
            (
                _mm256_loadu_si256(chunk.as_ptr().cast::<__m256i>()),
                _mm256_loadu_si256(chunk.as_ptr().add(32).cast::<__m256i>()),
            )
        };
        let low = _mm256_movemask_epi8(_mm256_cmpeq_epi8(low, newline)) as u32;
        let high = _mm256_movemask_epi8(_mm256_cmpeq_epi8(high, newline)) as u32;
        u64::from(low) | (u64::from(high) << 32)
    });
}

/// Fills the words of `words` that cover `block` with `word_of`, which maps 64 bytes to
/// their word; a last partial 64 bytes is copied into a zeroed chunk first (no `\n` in the
/// padding). Inlined into a function compiled for the vectors.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn map_words(words: &mut [u64; WORDS], block: &[u8], mut word_of: impl FnMut(&[u8; 64]) -> u64) {
    let mut chunks = block.chunks_exact(64);
    let mut filled = 0;
    for (word, chunk) in words.iter_mut().zip(chunks.by_ref()) {
        if let Some(chunk) = chunk.first_chunk::<64>() {
            *word = word_of(chunk);
        }
        filled += 1;
    }
    let rest = chunks.remainder();
    if let (false, Some(word)) = (rest.is_empty(), words.get_mut(filled)) {
        let mut padded = [0u8; 64];
        padded[..rest.len()].copy_from_slice(rest);
        *word = word_of(&padded);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn expected(bytes: &[u8]) -> Vec<usize> {
        bytes
            .iter()
            .enumerate()
            .filter(|(_, &b)| b == b'\n')
            .map(|(i, _)| i)
            .collect()
    }

    fn collect(bytes: &[u8]) -> Vec<usize> {
        let mut got = Vec::new();
        for_each_newline(bytes, |at| {
            got.push(at);
            true
        });
        got
    }

    /// Every width this CPU has, each in turn, the CPU's widest restored after.
    fn each_width(check: impl Fn()) {
        use crate::vector_width::{limit_vector_width, width_lock, LiftCap, VectorWidth};
        let _lock = width_lock();
        let _lift = LiftCap;
        for width in [
            VectorWidth::Bits128,
            VectorWidth::Bits256,
            VectorWidth::Bits512,
        ] {
            limit_vector_width(width);
            check();
        }
    }

    #[test]
    fn every_newline_in_order_across_blocks_words_and_a_partial_tail() {
        // Newlines at the first and last byte of words and blocks, and in a tail past them.
        let mut bytes = vec![b'x'; 3 * BLOCK + 100];
        for at in [
            0,
            63,
            64,
            127,
            BLOCK - 1,
            BLOCK,
            2 * BLOCK + 64,
            3 * BLOCK + 99,
        ] {
            bytes[at] = b'\n';
        }
        each_width(|| {
            for len in [0, 1, 63, 64, 65, BLOCK - 1, BLOCK, BLOCK + 1, bytes.len()] {
                let got = collect(&bytes[..len]);
                assert_eq!(got, expected(&bytes[..len]), "{len} bytes");
            }
        });
    }

    #[test]
    fn a_block_of_nothing_but_newlines_and_one_of_none() {
        let all = vec![b'\n'; BLOCK + 7];
        let none = vec![b'\r'; 2 * BLOCK];
        each_width(|| {
            assert_eq!(collect(&all), expected(&all));
            assert_eq!(collect(&none), Vec::<usize>::new());
        });
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn the_same_positions_as_a_byte_loop(
            bytes in proptest::collection::vec(prop_oneof![Just(b'\n'), Just(b'\r'), any::<u8>()], 0..9000),
        ) {
            each_width(|| {
                assert_eq!(collect(&bytes), expected(&bytes));
            });
        }
    }
}
