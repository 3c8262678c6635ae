//! Secret hash keys: expanded from a 64-bit seed, random per process by default.

use std::fmt;
use std::sync::OnceLock;

/// Round keys of the keyed hash: the initial state, one per 16-byte block of
/// the widest key ([`crate::MAX_WORDS`] words), and the finishing rounds
/// (see [`crate::Hasher`] for the hash itself).
pub(crate) const ROUND_KEYS: usize = 1 + crate::hash::MAX_BLOCKS + crate::hash::FINAL_ROUNDS;

/// The expanded secret of the keyed hash: eight 128-bit AES round keys.
///
/// Built from a 64-bit seed with SplitMix64, so [`HashKey::from_seed`] is
/// reproducible across runs and machines; [`HashKey::process`] draws one seed
/// per process from the operating system. `Debug` never prints the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct HashKey {
    /// Round key `i` as 16 bytes (the byte order of an AES block: byte 0 is
    /// the low byte of the first 32-bit word on every machine).
    pub(crate) rk: [[u8; 16]; ROUND_KEYS],
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
        let mut rk = [[0u8; 16]; ROUND_KEYS];
        for r in &mut rk {
            r[..8].copy_from_slice(&splitmix64(&mut s).to_le_bytes());
            r[8..].copy_from_slice(&splitmix64(&mut s).to_le_bytes());
        }
        // A public fingerprint so two parties can check they share a key
        // (transfer forms carry it). It is drawn after the secret words, so it
        // reveals nothing about them beyond what SplitMix64's output does.
        let id = (splitmix64(&mut s) >> 32) as u32;
        HashKey { rk, id }
    }

    /// The process-wide key: one seed per process from the operating system's
    /// random source, drawn on first use and then shared by every structure
    /// that does not ask for a seed, so filters built in one process combine.
    pub fn process() -> Self {
        static KEY: OnceLock<HashKey> = OnceLock::new();
        KEY.get_or_init(|| HashKey::from_seed(os_seed())).clone()
    }

    /// The initial state for keys of `words` words: round key 0 with the
    /// width folded into its first word, so keys of different widths that
    /// pad to the same blocks still hash apart.
    #[inline]
    pub(crate) fn initial_state(&self, words: usize) -> [u8; 16] {
        let mut s = self.rk[0];
        let w0 = u32::from_le_bytes([s[0], s[1], s[2], s[3]]) ^ words as u32;
        s[..4].copy_from_slice(&w0.to_le_bytes());
        s
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
