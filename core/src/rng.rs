//! Randomness for mask keys and `Sec-WebSocket-Key`: a CSPRNG (ChaCha12) seeded once at
//! construction. The engine never asks the OS itself; callers pass a seed, from
//! [`os_seed`] in production or a constant in tests.

use rand_chacha::ChaCha12Rng;
use rand_core::{RngCore, SeedableRng};

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

#[derive(Debug)]
pub(crate) struct MaskRng(ChaCha12Rng);

impl MaskRng {
    pub(crate) fn from_seed(seed: Seed) -> Self {
        Self(ChaCha12Rng::from_seed(seed))
    }

    pub(crate) fn mask_key(&mut self) -> [u8; 4] {
        self.0.next_u32().to_ne_bytes()
    }

    pub(crate) fn fill(&mut self, out: &mut [u8]) {
        self.0.fill_bytes(out);
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
}
