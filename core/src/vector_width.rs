//! The widest vectors the ASCII check of text messages and the line search (the `\n` of a
//! read) run in: the CPU's widest by default, capped process-wide by [`limit_vector_width`].
//!
//! Why a cap: on Skylake-SP and Cascade Lake Xeons any 512-bit instruction lowers the core's
//! clock for a while after (of the order of a millisecond), and the rest of an application on
//! that core pays for it; a process that keeps its hot cores free of AVX-512 can hold
//! feedwire to AVX2. On newer cores the 512-bit check is the faster one (1 KB 8.7 against
//! 11.0 ns, 9 KB 81 against 98, on a Xeon with AVX-512).
//!
//! The answer a message asks for is one relaxed load of a cached byte: the CPU's own answers
//! through `is_x86_feature_detected!`, one check a feature, cost 7 instructions a message of
//! 0.3-9 KB under callgrind.

use std::sync::atomic::{AtomicU8, Ordering};

/// Vectors for the ASCII check of text messages of 256 bytes or more (shorter ones are
/// checked in 16-byte SSE2 vectors on x86-64, whatever the width). Ordered from narrowest to
/// widest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum VectorWidth {
    /// No vectors of feedwire's own: a byte loop (architectures other than x86-64).
    Scalar = 1,
    /// 16-byte SSE2 vectors, in every x86-64: inline up to 512 bytes, simdutf8 alone beyond
    /// (which picks its own vectors, AVX2 at most).
    Bits128 = 2,
    /// 32-byte AVX2 vectors, 256 bytes at a time.
    Bits256 = 3,
    /// 64-byte AVX-512 (F and BW) vectors, 512 bytes at a time.
    Bits512 = 4,
}

/// The [`VectorWidth`] in use as its `u8`; 0 until first asked. Only ever holds a width the
/// CPU has: the `unsafe` calls of the AVX2 and AVX-512 checks and line maps rely on it.
static IN_USE: AtomicU8 = AtomicU8::new(0);

/// The vectors the ASCII check and the line search run in now: the widest this CPU has, or
/// narrower where [`limit_vector_width`] said so.
#[inline(always)]
pub fn vector_width() -> VectorWidth {
    const BITS128: u8 = VectorWidth::Bits128 as u8;
    const BITS256: u8 = VectorWidth::Bits256 as u8;
    const BITS512: u8 = VectorWidth::Bits512 as u8;
    match IN_USE.load(Ordering::Relaxed) {
        BITS512 => VectorWidth::Bits512,
        BITS256 => VectorWidth::Bits256,
        BITS128 => VectorWidth::Bits128,
        0 => first_use(),
        _ => VectorWidth::Scalar,
    }
}

/// Holds the ASCII check and the line search of every stream in this process to vectors no
/// wider than `widest` (from each stream's next message or read on), and returns the width
/// in use now: `widest`, the CPU's widest where that is narrower, or the architecture's
/// narrowest where `widest` is narrower still (on x86-64 SSE2, which every x86-64 has:
/// `Scalar` gives `Bits128`). `VectorWidth::Bits512` lifts the cap. The setting is a speed
/// trade only: every width accepts and rejects the same bytes.
///
/// ```
/// use feedwire_core::{limit_vector_width, vector_width, VectorWidth};
///
/// // Keep this process's cores free of 512-bit instructions (Skylake-SP, Cascade Lake).
/// let now = limit_vector_width(VectorWidth::Bits256);
/// assert!(now <= VectorWidth::Bits256);
/// assert_eq!(vector_width(), now);
/// ```
pub fn limit_vector_width(widest: VectorWidth) -> VectorWidth {
    let now = capped(widest, widest_of_cpu());
    IN_USE.store(now as u8, Ordering::Relaxed);
    tracing::info!(?now, "feedwire: ASCII check's vector width set");
    now
}

/// The width in use under a cap of `widest` on a CPU whose widest is `cpu`: never wider than
/// the CPU (the `unsafe` calls rely on it), never narrower than the architecture.
fn capped(widest: VectorWidth, cpu: VectorWidth) -> VectorWidth {
    widest.min(cpu).max(NARROWEST)
}

/// The narrowest width this architecture runs: x86-64 checks in SSE2 below 256 bytes
/// whatever the cap, so it never says `Scalar`.
#[cfg(target_arch = "x86_64")]
const NARROWEST: VectorWidth = VectorWidth::Bits128;
#[cfg(not(target_arch = "x86_64"))]
const NARROWEST: VectorWidth = VectorWidth::Scalar;

/// The widest vectors this CPU runs the check in. `Bits512` only with AVX2 besides, so that a
/// cap to `Bits256` never runs the AVX2 check where the CPU lacks it (no CPU has AVX-512
/// without AVX2, but a hypervisor may say so).
pub(crate) fn widest_of_cpu() -> VectorWidth {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx2")
        {
            VectorWidth::Bits512
        } else if std::is_x86_feature_detected!("avx2") {
            VectorWidth::Bits256
        } else {
            VectorWidth::Bits128
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        VectorWidth::Scalar
    }
}

/// The first message's question: the CPU's widest, unless a cap was set meanwhile (a cap
/// set by another thread between the load and here is kept, not written over).
#[cold]
#[inline(never)]
fn first_use() -> VectorWidth {
    let found = widest_of_cpu();
    match IN_USE.compare_exchange(0, found as u8, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => found,
        Err(_) => vector_width(),
    }
}

/// Held by the tests that change the width and by those that assert which check runs:
/// `cargo test` runs a crate's tests on threads of one process, which share the width.
#[cfg(test)]
pub(crate) fn width_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Lifts the cap when dropped, so that a test that changed the width and failed leaves the
/// CPU's widest in use for the tests after it.
#[cfg(test)]
pub(crate) struct LiftCap;

#[cfg(test)]
impl Drop for LiftCap {
    fn drop(&mut self) {
        limit_vector_width(VectorWidth::Bits512);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Changes the process-wide width, as the line search's tests do (every width validates
    /// and finds lines alike, so tests that only validate see no difference; those that
    /// assert which check runs hold [`width_lock`] as this one does).
    #[test]
    fn a_cap_narrows_the_width_and_never_widens_past_the_cpu() {
        let _lock = width_lock();
        let _lift = LiftCap;
        let cpu = widest_of_cpu();
        assert!(
            cpu >= NARROWEST,
            "the CPU's widest is never below the architecture's"
        );
        assert!(vector_width() <= cpu);
        for cap in [
            VectorWidth::Scalar,
            VectorWidth::Bits128,
            VectorWidth::Bits256,
            VectorWidth::Bits512,
        ] {
            let now = limit_vector_width(cap);
            assert_eq!(
                now,
                cap.min(cpu).max(NARROWEST),
                "cap {cap:?} on a CPU with {cpu:?}"
            );
            assert_eq!(vector_width(), now);
            // The check runs in the width in use: its prefix of a `€` at byte 300 of text on
            // a 64-byte boundary is the strides before it (AVX2: one of 256 bytes; AVX-512:
            // none of 512) or, without a vector check for 1.5 KB, nothing.
            let mut buf = vec![b'a'; 1500 + 64];
            let from = buf.as_ptr().addr().wrapping_neg() % 64;
            let text = &mut buf[from..from + 1500];
            text[300..303].copy_from_slice("€".as_bytes());
            let prefix = match now {
                VectorWidth::Bits256 => 256,
                _ => 0,
            };
            assert_eq!(crate::utf8::ascii_prefix(text), prefix, "{now:?}");
            // Each width validates alike: ASCII, a `€` past the first stride, a broken one.
            let mut text = vec![b'a'; 1500];
            assert!(crate::utf8::is_valid(&text));
            text[700..703].copy_from_slice("€".as_bytes());
            assert!(crate::utf8::is_valid(&text));
            text[701] = b'a';
            assert!(!crate::utf8::is_valid(&text));
        }
        // x86-64 checks in SSE2 below 256 bytes whatever the cap: `Scalar` gives `Bits128`.
        #[cfg(target_arch = "x86_64")]
        assert_eq!(
            limit_vector_width(VectorWidth::Scalar),
            VectorWidth::Bits128
        );
        limit_vector_width(VectorWidth::Bits512);
        assert_eq!(vector_width(), cpu, "Bits512 lifts the cap");
    }

    #[test]
    fn a_cap_is_never_wider_than_the_cpu_nor_narrower_than_the_architecture() {
        use VectorWidth::*;
        let widths = [Scalar, Bits128, Bits256, Bits512];
        for cpu in widths.into_iter().filter(|&w| w >= NARROWEST) {
            for cap in widths {
                let now = capped(cap, cpu);
                assert!(now <= cpu, "cap {cap:?} on {cpu:?}: {now:?}");
                assert!(now >= NARROWEST);
                assert!(now == cap || now == cpu || now == NARROWEST);
            }
        }
        assert_eq!(capped(Bits512, Bits256), Bits256);
        assert_eq!(capped(Bits256, Bits512), Bits256);
    }
}
