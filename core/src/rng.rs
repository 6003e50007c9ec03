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
