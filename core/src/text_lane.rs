//! A fast lane's loop compiled for the widest vectors in use, and the whole-message UTF-8
//! checks it runs in them.
//!
//! Why: the per-message check ([`crate::utf8::is_valid`]) is inlined into code compiled for
//! x86-64's baseline, so a message below 256 bytes is checked in 16-byte SSE2 vectors (a
//! 0.2 KB aggTrade: twelve loads), and a longer one pays a call into a function compiled for
//! AVX2 or AVX-512 and the width's question, per message. Here the question is asked once a
//! read and the whole loop — frame headers, the check, the stream's classification and the
//! handler, inlined — runs in a function compiled for the width, so the check of a message of
//! 64 bytes or more is inline in 64-byte (or 32-byte) vectors: three loads for the aggTrade.
//! The per-message check goes through [`in_vectors`] too, the width's function running only
//! its ASCII walk, so the width is dispatched in one place.
//!
//! Public through [`crate::testing`] only, for the benchmark's `limit-utf8` reader, which
//! validates as the lanes do.

/// The UTF-8 check of a whole text message that a [`Lane`] runs: the same answer in every
/// width, at that width's speed where the lane runs compiled for it.
pub trait TextCheck: Copy {
    /// The length of a prefix of `bytes` known to be ASCII: all of `bytes`, or where the part
    /// simdutf8 must read starts (on a character boundary, every byte before it ASCII).
    fn ascii_prefix(self, bytes: &[u8]) -> usize;

    /// Whether `bytes` is valid UTF-8: its ASCII prefix, then simdutf8 for the rest.
    #[inline(always)]
    fn is_valid(self, bytes: &[u8]) -> bool {
        crate::utf8::is_valid_past(bytes, self.ascii_prefix(bytes))
    }
}

/// The check without AVX2 or AVX-512 (a CPU without them, a cap to 128-bit vectors, or
/// another architecture), for a lane compiled for the baseline: the inline 16-byte check up
/// to 512 bytes, simdutf8 beyond.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Baseline;

impl TextCheck for Baseline {
    #[inline(always)]
    fn ascii_prefix(self, bytes: &[u8]) -> usize {
        crate::utf8::ascii_prefix_without_vectors(bytes)
    }
}

/// The check in 32-byte vectors from 32 bytes on, for a lane compiled for AVX2; the token
/// of AVX2's vector operations. Made only by [`Avx2::new_unchecked`], whose callers promise
/// the CPU has AVX2 (the field is private), so its safe methods rely on no caller.
#[cfg(target_arch = "x86_64")]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Avx2(());

#[cfg(target_arch = "x86_64")]
impl Avx2 {
    /// The token.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    #[allow(unsafe_code)]
    pub(crate) unsafe fn new_unchecked() -> Self {
        Self(())
    }
}

#[cfg(target_arch = "x86_64")]
impl TextCheck for Avx2 {
    #[inline(always)]
    fn ascii_prefix(self, bytes: &[u8]) -> usize {
        ascii_prefix_in(self, bytes)
    }
}

/// The check in 64-byte vectors from 64 bytes on, for a lane compiled for AVX-512 (F, BW);
/// the token of their vector operations, as [`Avx2`] is AVX2's.
#[cfg(target_arch = "x86_64")]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Avx512(());

#[cfg(target_arch = "x86_64")]
impl Avx512 {
    /// The token.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F and BW.
    #[inline(always)]
    #[allow(unsafe_code)]
    pub(crate) unsafe fn new_unchecked() -> Self {
        Self(())
    }
}

#[cfg(target_arch = "x86_64")]
impl TextCheck for Avx512 {
    #[inline(always)]
    fn ascii_prefix(self, bytes: &[u8]) -> usize {
        ascii_prefix_in(self, bytes)
    }
}

/// One width's vector operations for the ASCII check, on its token ([`Avx2`], [`Avx512`]):
/// a token exists only where the CPU has the width, which makes them safe to call. Written
/// with intrinsics, whose accumulator is a register value from the start: a byte array ORed
/// lane by lane (the check's former form, which LLVM kept in a register in a function of its
/// own), inlined into a lane's large function before LLVM had simplified it, stayed in memory
/// there (every OR through the stack).
#[cfg(target_arch = "x86_64")]
pub(crate) trait AsciiVectors: Copy {
    /// Bytes a vector.
    const WIDTH: usize;
    /// Bytes a stride (the check asks whether to go on once a stride).
    const STRIDE: usize;
    /// A vector register.
    type V: Copy;
    /// A vector of zeros.
    fn zero(self) -> Self::V;
    /// `acc` ORed with the first `WIDTH` bytes of `bytes` (at least that long).
    fn or_load(self, acc: Self::V, bytes: &[u8]) -> Self::V;
    /// Whether a byte of `v` is ≥ 0x80.
    fn any_high(self, v: Self::V) -> bool;
}

#[cfg(target_arch = "x86_64")]
impl AsciiVectors for Avx2 {
    const WIDTH: usize = 32;
    const STRIDE: usize = crate::utf8::AVX2_STRIDE;
    type V = std::arch::x86_64::__m256i;

    #[inline(always)]
    fn zero(self) -> Self::V {
        // SAFETY: an `Avx2` exists only where the CPU has AVX2.
        #[allow(unsafe_code)]
        unsafe {
            std::arch::x86_64::_mm256_setzero_si256()
        }
    }

    #[inline(always)]
    fn or_load(self, acc: Self::V, bytes: &[u8]) -> Self::V {
        let bytes: &[u8; 32] = bytes.first_chunk().expect("a whole vector");
        // SAFETY: an `Avx2` exists only where the CPU has AVX2; the load reads the 32 bytes
        // of `bytes`, unaligned.
        #[allow(unsafe_code)]
        unsafe {
            use std::arch::x86_64::{_mm256_loadu_si256, _mm256_or_si256};
            _mm256_or_si256(acc, _mm256_loadu_si256(bytes.as_ptr().cast()))
        }
    }

    #[inline(always)]
    fn any_high(self, v: Self::V) -> bool {
        // SAFETY: an `Avx2` exists only where the CPU has AVX2.
        #[allow(unsafe_code)]
        unsafe {
            std::arch::x86_64::_mm256_movemask_epi8(v) != 0
        }
    }
}

#[cfg(target_arch = "x86_64")]
impl AsciiVectors for Avx512 {
    const WIDTH: usize = 64;
    const STRIDE: usize = crate::utf8::AVX512_STRIDE;
    type V = std::arch::x86_64::__m512i;

    #[inline(always)]
    fn zero(self) -> Self::V {
        // SAFETY: an `Avx512` exists only where the CPU has AVX-512 F and BW.
        #[allow(unsafe_code)]
        unsafe {
            std::arch::x86_64::_mm512_setzero_si512()
        }
    }

    #[inline(always)]
    fn or_load(self, acc: Self::V, bytes: &[u8]) -> Self::V {
        let bytes: &[u8; 64] = bytes.first_chunk().expect("a whole vector");
        // SAFETY: an `Avx512` exists only where the CPU has AVX-512 F and BW; the load reads
        // the 64 bytes of `bytes`, unaligned.
        #[allow(unsafe_code)]
        unsafe {
            use std::arch::x86_64::{_mm512_loadu_si512, _mm512_or_si512};
            _mm512_or_si512(acc, _mm512_loadu_si512(bytes.as_ptr().cast()))
        }
    }

    #[inline(always)]
    fn any_high(self, v: Self::V) -> bool {
        // SAFETY: an `Avx512` exists only where the CPU has AVX-512 F and BW.
        #[allow(unsafe_code)]
        unsafe {
            std::arch::x86_64::_mm512_movepi8_mask(v) != 0
        }
    }
}

/// The ASCII prefix of `bytes` in `O`'s vectors from one vector's length on (shorter: the
/// 16-byte check). No closures on the way: one used here was left out of line, compiled for
/// the baseline, its intrinsics calls.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn ascii_prefix_in<O: AsciiVectors>(ops: O, bytes: &[u8]) -> usize {
    if bytes.len() < O::WIDTH {
        crate::utf8::ascii_prefix_inline(bytes)
    } else {
        ascii_prefix(ops, bytes)
    }
}

/// The length of an ASCII prefix of `bytes` (at least `O::WIDTH` long), as
/// [`crate::utf8::ascii_prefix`] has it: all of `bytes`, or where the first stride that holds
/// a byte ≥ 0x80 begins. From [`ALIGNED_FROM`] bytes on, the strides begin at the first
/// vector boundary in memory ([`vector_lead`]; the bytes before it checked with one vector
/// first, 0 if they are not ASCII), so that every load but the last is of whole cache lines.
/// Shorter, they begin at `bytes`' start. The one ASCII walk in vectors: inline in a lane,
/// the per-message check's among them ([`crate::utf8::AsciiPrefix`]).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn ascii_prefix<O: AsciiVectors>(ops: O, bytes: &[u8]) -> usize {
    let lead = if bytes.len() >= ALIGNED_FROM {
        vector_lead::<O>(bytes)
    } else {
        0
    };
    if lead != 0 && ops.any_high(ops.or_load(ops.zero(), bytes)) {
        return 0;
    }
    let mut strides = bytes[lead..].chunks_exact(O::STRIDE);
    let mut ascii = lead;
    for stride in strides.by_ref() {
        if any_high(ops, stride) {
            return ascii;
        }
        ascii += O::STRIDE;
    }
    let rest = strides.remainder().len();
    if rest == 0 || !any_high(ops, &bytes[bytes.len() - rest.max(O::WIDTH)..]) {
        bytes.len()
    } else {
        ascii
    }
}

/// Shortest text (bytes) whose ASCII walk loads from vector boundaries: a load of 64 bytes
/// from anywhere else spans two cache lines, and the loads' speed went on that (9,331-byte
/// pieces of a buffer, AVX-512: 143-150 ns a piece from L2, 65 from L1, against 83 and 47 for
/// 9,344-byte ones, all on boundaries; right after a 256 KiB `recv`, `check_after_copy`:
/// 1 KB 15-17 → 11-12 ns, 9 KB 157 → 100). Below, the one vector more that finding the
/// boundary costs did not pay: 310 bytes in AVX2 vectors 7.0 → 7.7-8.0 ns (1 KB 21-22 → 19,
/// 9 KB 200 → 142), and in AVX-512 from 256 bytes on the micro-benchmark's 310 bytes +9%.
/// At least a stride of either width, so at least a vector.
#[cfg(target_arch = "x86_64")]
pub(crate) const ALIGNED_FROM: usize = 512;

// What the walk from the boundary needs: the text past the lead (up to a vector less a byte)
// is still at least a vector long.
#[cfg(target_arch = "x86_64")]
const _: () = assert!(ALIGNED_FROM >= 2 * 64);

/// Bytes from the start of `bytes` to the first `O::WIDTH`-byte boundary in memory at or
/// after it (`0..O::WIDTH`).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn vector_lead<O: AsciiVectors>(bytes: &[u8]) -> usize {
    bytes.as_ptr().addr().wrapping_neg() % O::WIDTH
}

/// Whether a byte of `bytes` (at least `O::WIDTH` long) is ≥ 0x80: its vectors ORed into one,
/// the rest as one more vector overlapping bytes already read. A function, not a closure,
/// as [`ascii_prefix_in`] says.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn any_high<O: AsciiVectors>(ops: O, bytes: &[u8]) -> bool {
    let mut vectors = bytes.chunks_exact(O::WIDTH);
    let mut acc = ops.zero();
    for vector in vectors.by_ref() {
        acc = ops.or_load(acc, vector);
    }
    if !vectors.remainder().is_empty() {
        acc = ops.or_load(acc, &bytes[bytes.len() - O::WIDTH..]);
    }
    ops.any_high(acc)
}

/// A loop over the messages of one read that [`in_vectors`] runs compiled for the widest
/// vectors in use. `run` must be `#[inline(always)]`: only what is inlined into the width's
/// function is compiled for its vectors.
pub trait Lane {
    /// What the loop returns.
    type Output;
    /// The loop, checking each whole text message with `check`.
    fn run<C: TextCheck>(self, check: C) -> Self::Output;
}

/// Runs `lane` compiled for the widest vectors in use ([`crate::vector_width`]), with the
/// check in them: one question a read rather than one a message.
#[inline(always)]
pub fn in_vectors<L: Lane>(lane: L) -> L::Output {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::vector_width::VectorWidth;
        match crate::vector_width::vector_width() {
            // SAFETY: the one requirement of calling a function compiled for AVX-512 F and
            // BW (and AVX2) is a CPU that has them, and `vector_width` says `Bits512` only
            // where the CPU said so (a cap only ever narrows it).
            #[allow(unsafe_code)]
            VectorWidth::Bits512 => return unsafe { run_avx512(lane) },
            // SAFETY: the same, for AVX2: `vector_width` says `Bits256` only where the CPU
            // has it.
            #[allow(unsafe_code)]
            VectorWidth::Bits256 => return unsafe { run_avx2(lane) },
            _ => {}
        }
    }
    lane.run(Baseline)
}

/// `lane` compiled for AVX-512 F and BW.
///
/// # Safety
/// The CPU must support AVX-512 F and BW, and AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avx512f,avx512bw")]
#[allow(unsafe_code)]
pub(crate) unsafe fn run_avx512<L: Lane>(lane: L) -> L::Output {
    // SAFETY: the caller's promise, passed on.
    lane.run(unsafe { Avx512::new_unchecked() })
}

/// `lane` compiled for AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(unsafe_code)]
pub(crate) unsafe fn run_avx2<L: Lane>(lane: L) -> L::Output {
    // SAFETY: the caller's promise, passed on.
    lane.run(unsafe { Avx2::new_unchecked() })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Collects each check's answers for a list of messages, in a lane.
    struct Answers<'a>(&'a [Vec<u8>]);

    impl Lane for Answers<'_> {
        type Output = Vec<bool>;
        #[inline(always)]
        fn run<C: TextCheck>(self, check: C) -> Vec<bool> {
            self.0.iter().map(|m| check.is_valid(m)).collect()
        }
    }

    /// Messages of every length around the widths' switches, ASCII and not, valid and not,
    /// a byte ≥ 0x80 at the first, middle and last positions.
    fn messages() -> Vec<Vec<u8>> {
        let lengths = (0..=200).chain([255, 256, 257, 511, 512, 513, 1023, 1024, 1500, 9000]);
        let mut out = Vec::new();
        for len in lengths {
            let ascii = vec![b'a'; len];
            out.push(ascii.clone());
            if len >= 3 {
                for at in [0, len / 2 - 1, len - 3] {
                    let mut euro = ascii.clone();
                    euro[at..at + 3].copy_from_slice("€".as_bytes());
                    out.push(euro.clone());
                    // Cut: the lead byte without its continuation.
                    euro[at + 1] = b'a';
                    out.push(euro);
                }
                // A bad byte last, and on each side of the strides' edges.
                for at in [len - 1, 31, 32, 63, 64, 255, 256, 511, 512, 513] {
                    if at < len {
                        let mut high = ascii.clone();
                        high[at] = 0xFF;
                        out.push(high);
                    }
                }
            }
        }
        out
    }

    #[test]
    fn every_width_answers_as_the_standard_library() {
        let _width = crate::vector_width::width_lock();
        let messages = messages();
        let expected: Vec<bool> = messages
            .iter()
            .map(|m| std::str::from_utf8(m).is_ok())
            .collect();
        assert_eq!(in_vectors(Answers(&messages)), expected, "widest in use");
        assert_eq!(Answers(&messages).run(Baseline), expected, "baseline");
        #[cfg(target_arch = "x86_64")]
        {
            use crate::vector_width::{widest_of_cpu, VectorWidth};
            // Run compiled for each width the CPU has, as `in_vectors` would pick it.
            if widest_of_cpu() >= VectorWidth::Bits256 {
                // SAFETY: only where the CPU has AVX2.
                #[allow(unsafe_code)]
                let avx2 = unsafe { run_avx2(Answers(&messages)) };
                assert_eq!(avx2, expected, "AVX2");
            }
            if widest_of_cpu() == VectorWidth::Bits512 {
                // SAFETY: only where the CPU has AVX-512 F and BW (and AVX2).
                #[allow(unsafe_code)]
                let avx512 = unsafe { run_avx512(Answers(&messages)) };
                assert_eq!(avx512, expected, "AVX-512");
            }
        }
    }

    /// Each check's ASCII prefix for a list of messages, in a lane.
    struct Prefixes<'a>(&'a [Vec<u8>]);

    impl Lane for Prefixes<'_> {
        type Output = Vec<usize>;
        #[inline(always)]
        fn run<C: TextCheck>(self, check: C) -> Vec<usize> {
            self.0.iter().map(|m| check.ascii_prefix(m)).collect()
        }
    }

    /// What the prefix is for: ASCII text is all prefix (none of it handed to simdutf8) in
    /// every check that takes its length — the vector checks at every length, the baseline
    /// up to `INLINE_UP_TO` bytes (beyond, by design, simdutf8 alone) — and no check's
    /// prefix reaches past a byte ≥ 0x80. A check whose prefix were always 0 would still
    /// answer right, only slowly: `every_width_answers_as_the_standard_library` let the
    /// baseline's through, under a mutant.
    #[test]
    fn ascii_text_is_all_prefix_and_no_prefix_passes_a_high_byte() {
        let _width = crate::vector_width::width_lock();
        let lengths: Vec<usize> = (0..=200).chain([255, 256, 511, 512, 513, 9000]).collect();
        let ascii: Vec<Vec<u8>> = lengths.iter().map(|&len| vec![b'a'; len]).collect();
        // Texts with one 0xFF, and where it is.
        let (mut high, mut high_at) = (Vec::new(), Vec::new());
        for &len in &lengths {
            for at in [0, len / 2, len.saturating_sub(1)] {
                if at < len {
                    let mut m = vec![b'a'; len];
                    m[at] = 0xFF;
                    high.push(m);
                    high_at.push(at);
                }
            }
        }
        let check = |what: &str, vectors: bool, prefixes: &dyn Fn(&[Vec<u8>]) -> Vec<usize>| {
            let all_prefix = |len: usize| vectors || len <= crate::utf8::INLINE_UP_TO;
            let expected: Vec<usize> = lengths
                .iter()
                .map(|&len| if all_prefix(len) { len } else { 0 })
                .collect();
            assert_eq!(prefixes(&ascii), expected, "{what}: ASCII text");
            for ((prefix, at), m) in prefixes(&high).into_iter().zip(&high_at).zip(&high) {
                assert!(
                    prefix <= *at,
                    "{what}: {prefix} past 0xFF at {at} of {}",
                    m.len()
                );
            }
        };
        check("baseline", false, &|m| Prefixes(m).run(Baseline));
        let in_use = crate::vector_width::vector_width();
        let vectors = in_use >= crate::vector_width::VectorWidth::Bits256;
        check("widest in use", vectors, &|m| in_vectors(Prefixes(m)));
        #[cfg(target_arch = "x86_64")]
        {
            use crate::vector_width::{widest_of_cpu, VectorWidth};
            if widest_of_cpu() >= VectorWidth::Bits256 {
                // SAFETY: only where the CPU has AVX2.
                #[allow(unsafe_code)]
                check("AVX2", true, &|m| unsafe { run_avx2(Prefixes(m)) });
            }
            if widest_of_cpu() == VectorWidth::Bits512 {
                // SAFETY: only where the CPU has AVX-512 F and BW (and AVX2).
                #[allow(unsafe_code)]
                check("AVX-512", true, &|m| unsafe { run_avx512(Prefixes(m)) });
            }
        }
    }

    #[test]
    fn a_lane_runs_in_the_width_in_use() {
        let _width = crate::vector_width::width_lock();
        let _lift = crate::vector_width::LiftCap;

        /// Which check the lane ran.
        struct Which;
        impl Lane for Which {
            type Output = &'static str;
            #[inline(always)]
            fn run<C: TextCheck>(self, _: C) -> &'static str {
                std::any::type_name::<C>()
            }
        }

        use crate::vector_width::{limit_vector_width, VectorWidth};
        for cap in [
            VectorWidth::Bits128,
            VectorWidth::Bits256,
            VectorWidth::Bits512,
        ] {
            let now = limit_vector_width(cap);
            let ran = in_vectors(Which);
            let expected = match now {
                #[cfg(target_arch = "x86_64")]
                VectorWidth::Bits512 => std::any::type_name::<Avx512>(),
                #[cfg(target_arch = "x86_64")]
                VectorWidth::Bits256 => std::any::type_name::<Avx2>(),
                _ => std::any::type_name::<Baseline>(),
            };
            assert_eq!(ran, expected, "cap {cap:?}, in use {now:?}");
        }
    }
}
