//! Secret hash keys: expanded from a 64-bit seed, random per process by default.

use std::fmt;
use std::sync::OnceLock;

use crate::hash::MAX_WORDS;

/// The expanded secret of the keyed hash: two initial states and one key word
/// per key position.
///
/// Built from a 64-bit seed with SplitMix64, so [`HashKey::from_seed`] is
/// reproducible across runs and machines; [`HashKey::process`] draws one seed
/// per process from the operating system. `Debug` never prints the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct HashKey {
    pub(crate) a: u32,
    pub(crate) b: u32,
    pub(crate) k: [u32; MAX_WORDS],
    id: u32,
}

/// SplitMix64 step (Steele, Lea, Flood 2014): a well-studied 64-bit generator
/// whose outputs for consecutive states are statistically independent. The
/// project's one copy: key schedules, salts, and deterministic test and
/// benchmark inputs all draw from it.
pub const fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl HashKey {
    /// Expands a 64-bit seed. The same seed gives the same key everywhere.
    pub fn from_seed(seed: u64) -> Self {
        let mut s = seed;
        let ab = splitmix64(&mut s);
        let mut k = [0u32; MAX_WORDS];
        for pair in k.chunks_exact_mut(2) {
            let v = splitmix64(&mut s);
            pair[0] = v as u32;
            pair[1] = (v >> 32) as u32;
        }
        // A public fingerprint so two parties can check they share a key
        // (transfer forms carry it). It is drawn after the secret words, so it
        // reveals nothing about them beyond what SplitMix64's output does.
        let id = (splitmix64(&mut s) >> 32) as u32;
        HashKey {
            a: ab as u32,
            b: (ab >> 32) as u32,
            k,
            id,
        }
    }

    /// The process-wide key: one seed per process from the operating system's
    /// random source, drawn on first use and then shared by every structure
    /// that does not ask for a seed, so filters built in one process combine.
    pub fn process() -> Self {
        static KEY: OnceLock<HashKey> = OnceLock::new();
        KEY.get_or_init(|| HashKey::from_seed(os_seed())).clone()
    }

    /// A public 32-bit fingerprint of the key (not the seed): equal keys have
    /// equal ids, and structures refuse to combine when ids differ.
    pub fn id(&self) -> u32 {
        self.id
    }
}

impl fmt::Debug for HashKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HashKey {{ id: {:#010x}, .. }}", self.id)
    }
}

/// 64 random bits from the operating system. `getrandom` is the primary
/// source; should it ever fail, std's `RandomState` (itself seeded from the
/// OS) is used instead rather than giving up.
fn os_seed() -> u64 {
    let mut buf = [0u8; 8];
    match getrandom::fill(&mut buf) {
        Ok(()) => u64::from_le_bytes(buf),
        Err(_) => {
            use std::hash::BuildHasher;
            std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_key() {
        assert_eq!(HashKey::from_seed(7), HashKey::from_seed(7));
        assert_ne!(HashKey::from_seed(7), HashKey::from_seed(8));
        assert_ne!(HashKey::from_seed(7).id(), HashKey::from_seed(8).id());
    }

    #[test]
    fn process_key_is_stable_within_process() {
        assert_eq!(HashKey::process(), HashKey::process());
    }

    #[test]
    fn debug_hides_secret() {
        let s = format!("{:?}", HashKey::from_seed(1));
        assert!(s.starts_with("HashKey { id: 0x"), "{s}");
        assert!(!s.contains("k:"));
    }
}
