//! Keyed batch hashing of fixed-width keys into pairs of 32-bit hashes.

use crate::backend::{Backend, BackendError};
use crate::index::{Blocked, Partitioned};
use crate::seed::HashKey;
use crate::{arch, index};

/// The widest key the kernels hash, in 32-bit words (an IPv6 5-tuple uses 10).
pub const MAX_WORDS: usize = 16;

/// Two 32-bit hashes of one key. `h1` and `h2` come from independent chains;
/// the [`index`] functions derive every index of the key from them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct HashPair {
    /// First hash: the start of the double-hashing sequence (and, for blocked
    /// layouts, the block).
    pub h1: u32,
    /// Second hash: the step of the sequence once forced odd.
    pub h2: u32,
}

/// A keyed hasher bound to one backend.
///
/// Construction decides the backend once ([`Backend::active`] unless one is
/// forced); every call then dispatches with a single match, never
/// re-detecting CPU features.
#[derive(Debug, Clone)]
pub struct Hasher {
    key: HashKey,
    /// Invariant: `backend.is_available()` held when the hasher was built.
    backend: Backend,
}

impl Default for Hasher {
    fn default() -> Self {
        Hasher::new()
    }
}

impl Hasher {
    /// The process-wide random key ([`HashKey::process`]) on the active backend.
    pub fn new() -> Self {
        Hasher::with_key(HashKey::process())
    }

    /// A reproducible hasher: the same seed gives the same hashes on every
    /// backend and machine.
    pub fn with_seed(seed: u64) -> Self {
        Hasher::with_key(HashKey::from_seed(seed))
    }

    /// A hasher with an explicit key on the active backend.
    pub fn with_key(key: HashKey) -> Self {
        Hasher {
            key,
            backend: Backend::active(),
        }
    }

    /// The same key on another backend; an error if this CPU lacks it.
    pub fn on_backend(mut self, backend: Backend) -> Result<Self, BackendError> {
        self.backend = backend.require()?;
        Ok(self)
    }

    /// The backend this hasher runs on.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The hasher's key.
    pub fn key(&self) -> &HashKey {
        &self.key
    }

    /// Hashes one key (the rare path: scalar code, same result as the batch).
    pub fn hash_one<const W: usize>(&self, key: &[u32; W]) -> HashPair {
        let mut out = [HashPair::default()];
        arch::scalar::hash(&self.key, std::slice::from_ref(key), &mut out);
        out[0]
    }

    /// Hashes every key: `out[i]` becomes the pair of `keys[i]`.
    ///
    /// # Panics
    /// If `out` is shorter than `keys`, or `W` is 0 or above [`MAX_WORDS`]
    /// (the latter at compile time).
    pub fn hash_batch<const W: usize>(&self, keys: &[[u32; W]], out: &mut [HashPair]) {
        assert!(
            out.len() >= keys.len(),
            "hash_batch: output holds {} pairs for {} keys",
            out.len(),
            keys.len()
        );
        let out = &mut out[..keys.len()];
        match self.backend {
            #[cfg(target_arch = "x86_64")]
            Backend::Avx2 => {
                // SAFETY: `backend` is Avx2 only if `Backend::require` or
                // `Backend::active` found AVX2 on this CPU (struct invariant).
                unsafe { arch::x86_64::avx2::hash(&self.key, keys, out) }
            }
            #[cfg(target_arch = "aarch64")]
            Backend::Neon => arch::aarch64::neon::hash(&self.key, keys, out),
            _ => arch::scalar::hash(&self.key, keys, out),
        }
    }

    /// Partitioned indices for `pairs` (see [`index::partitioned`]).
    pub fn partitioned(&self, pairs: &[HashPair], layout: Partitioned, out: &mut [u32]) {
        index::partitioned(self.backend, pairs, layout, out)
    }

    /// Blocked indices for `pairs` (see [`index::blocked`]).
    pub fn blocked(
        &self,
        pairs: &[HashPair],
        layout: Blocked,
        blocks: &mut [u32],
        bits: &mut [u32],
    ) {
        index::blocked(self.backend, pairs, layout, blocks, bits)
    }
}
