//! Randomness for mask keys and `Sec-WebSocket-Key`: a CSPRNG (ChaCha12) seeded once at
//! construction. The engine never asks the OS itself; callers pass a seed, from
//! [`os_seed`] in production or a constant in tests.

use rand_chacha::ChaCha12Core;
use rand_core::block::BlockRngCore;
use rand_core::SeedableRng;

/// A 32-byte CSPRNG seed.
pub type Seed = [u8; 32];

/// A fresh seed from the operating system's CSPRNG (one `getrandom` call). Call it when a
/// connection is created, not per message.
///
/// # Panics
/// If the operating system has no random source — a broken platform, not a runtime
/// condition a market-data client can recover from.
pub fn os_seed() -> Seed {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).expect("the OS random source is available");
    seed
}

/// ChaCha12's keystream, one 64-byte piece at a time. `ChaCha12Rng` keeps a 256-byte buffer
/// of it (320 bytes in all), and every stream holds two generators (its own and its
/// WebSocket engine's) that give a few bytes a connection or a frame sent: this keeps the
/// first quarter of each 256 bytes the core makes and lets the rest go, 120 bytes in all.
pub(crate) struct MaskRng {
    core: ChaCha12Core,
    piece: [u8; PIECE],
    /// Bytes of `piece` given out.
    used: usize,
}

/// Bytes of keystream kept from each of the core's 256-byte blocks.
const PIECE: usize = 64;

impl std::fmt::Debug for MaskRng {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the state: it would tell the mask keys to come.
        f.debug_struct("MaskRng").finish_non_exhaustive()
    }
}

impl MaskRng {
    pub(crate) fn from_seed(seed: Seed) -> Self {
        Self {
            core: ChaCha12Core::from_seed(seed),
            piece: [0; PIECE],
            used: PIECE,
        }
    }

    pub(crate) fn mask_key(&mut self) -> [u8; 4] {
        let mut key = [0; 4];
        self.fill(&mut key);
        key
    }

    pub(crate) fn fill(&mut self, mut out: &mut [u8]) {
        while !out.is_empty() {
            if self.used == PIECE {
                self.next_piece();
            }
            let n = out.len().min(PIECE - self.used);
            out[..n].copy_from_slice(&self.piece[self.used..self.used + n]);
            self.used += n;
            out = &mut out[n..];
        }
    }

    #[cold]
    fn next_piece(&mut self) {
        let mut block = <ChaCha12Core as BlockRngCore>::Results::default();
        self.core.generate(&mut block);
        for (bytes, word) in self.piece.chunks_exact_mut(4).zip(block.as_ref()) {
            bytes.copy_from_slice(&word.to_le_bytes());
        }
        self.used = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two seeds from the OS differ (a fixed seed would make every connection's mask keys
    /// predictable, which RFC 6455 §10.3 forbids); the chance of an honest collision is 2^-256.
    #[test]
    fn os_seeds_are_fresh() {
        let (a, b) = (os_seed(), os_seed());
        assert_ne!(a, b);
        assert_ne!(a, [0; 32]);
    }

    /// One seed gives one sequence (tests rely on it); another seed another.
    #[test]
    fn a_seed_fixes_the_sequence() {
        let keys = |seed| {
            let mut rng = MaskRng::from_seed(seed);
            let mut nonce = [0u8; 16];
            rng.fill(&mut nonce);
            (nonce, rng.mask_key(), rng.mask_key())
        };
        assert_eq!(keys([7; 32]), keys([7; 32]));
        assert_ne!(keys([7; 32]), keys([8; 32]));
        let (_, k1, k2) = keys([7; 32]);
        assert_ne!(k1, k2);
    }

    /// Bytes asked for across pieces come whole and in order — a piece's end splits none,
    /// whatever the sizes asked — and never repeat a piece: 10,000 bytes in odd sizes are
    /// the same as in one call, and no two of their 64-byte pieces are equal.
    #[test]
    fn pieces_join_without_a_seam() {
        let mut whole = vec![0u8; 10_000];
        MaskRng::from_seed([3; 32]).fill(&mut whole);
        let mut rng = MaskRng::from_seed([3; 32]);
        let mut parts = Vec::new();
        for size in [4, 1, 63, 64, 65, 7, 500].iter().cycle() {
            if parts.len() >= whole.len() {
                break;
            }
            let mut part = vec![0u8; (*size).min(whole.len() - parts.len())];
            rng.fill(&mut part);
            parts.extend_from_slice(&part);
        }
        assert_eq!(parts, whole);
        let pieces: std::collections::HashSet<&[u8]> = whole.chunks_exact(PIECE).collect();
        assert_eq!(pieces.len(), whole.len() / PIECE);
    }

    /// The generator is small: every stream holds two.
    #[test]
    fn a_generator_is_at_most_128_bytes() {
        assert!(std::mem::size_of::<MaskRng>() <= 128);
    }
}
