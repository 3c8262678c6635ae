//! Keyed batch hashing of fixed-width keys into pairs of 32-bit hashes.
//!
//! # The hash
//!
//! A key of `W` 32-bit words (`1..=16`) is cut into `ceil(W / 4)` blocks of
//! 16 bytes, the last zero-padded; words are little-endian in their block.
//! With the secret round keys `K[0..8]` of a [`HashKey`] and `R(s, k)` one
//! AES encryption round (ShiftRows, SubBytes, MixColumns, then XOR `k`;
//! exactly x86's `AESENC`, and `AESMC(AESE(s, 0)) ^ k` on ARM):
//!
//! ```text
//! s = K[0] ^ W                      (W xored into the first word)
//! for j in 0..ceil(W / 4):  s = R(s ^ block[j], K[1 + j])
//! for f in 0..3:            s = R(s, K[5 + f])
//! h1 = word 0 of s;  h2 = word 1 of s
//! ```
//!
//! A one-block key (an IPv4 5-tuple) goes through four rounds. Two AES
//! rounds already make every output bit depend on every input bit; the
//! further two leave no statistical trace that the quality tests (avalanche,
//! chi-square, false-positive rates, seed independence) can find, and they
//! remove the three-round integral property (the XOR of the hashes of 256
//! keys that differ in one byte is not zero). The round keys are secret and
//! random per process, so an outsider who sends packets cannot choose keys
//! that collide.
//!
//! # Why AES rounds
//!
//! Lane multiplies cost very differently across the x86 cores the router
//! runs on: a 32-bit lane multiply (`VPMULLD`) is one micro-op with 3
//! cycles of latency on AMD Zen 4 but two micro-ops with 10 cycles on
//! Intel Golden Cove (uops.info), so a multiply-chain hash in 32-bit lanes
//! (this project's first, 14 of them per vector) ran on Intel Xeons
//! slower than `ahash` one key at a time. One AES round mixes 128 bits for
//! one micro-op on both (`VAESENC`: two per cycle on 256-bit vectors on
//! Zen 4 and Golden Cove, one per cycle on 512-bit vectors), so the same
//! code is several times faster than `ahash` on both (README, benchmarks).
//!
//! # Backends
//!
//! The scalar backend is the reference: it takes the rounds from the
//! RustCrypto `aes` crate, eight keys per `aes::hazmat::cipher_round_par`
//! call (AES-NI or ARMv8 when present, else its constant-time bit-sliced
//! software). The x86
//! backends use `VAESENC` on 512-bit vectors (AVX-512 backend: four keys
//! per instruction), on 256-bit vectors (AVX2 backend on CPUs with VAES:
//! two keys), or AES-NI on 128-bit vectors (AVX2 backend on older CPUs);
//! the NEON backend uses the ARMv8 AES instructions when the CPU has them.
//! Each is tested bit for bit against the reference and golden vectors.

use crate::backend::{Backend, BackendError};
use crate::index::{Blocked, Partitioned};
use crate::seed::HashKey;
use crate::{arch, index};

/// The widest key the kernels hash, in 32-bit words (an IPv6 5-tuple uses 10).
pub const MAX_WORDS: usize = 16;

/// Blocks of 16 bytes in the widest key.
pub(crate) const MAX_BLOCKS: usize = MAX_WORDS / 4;

/// AES rounds after the last block.
pub(crate) const FINAL_ROUNDS: usize = 3;

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
    /// Invariant: the CPU has what `path` needs (decided with `backend`).
    path: Path,
}

/// The AES code a hasher runs, decided once from its backend and the CPU;
/// each vector path holds its kernel's proof token, made only where the
/// CPU has every feature the kernel needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// `aes::hazmat`, eight keys per call (the reference).
    Reference,
    /// x86 AES-NI, 128-bit vectors.
    #[cfg(target_arch = "x86_64")]
    AesNi(arch::x86_64::aes::AesNi),
    /// x86 VAES on 256-bit vectors.
    #[cfg(target_arch = "x86_64")]
    Vaes256(arch::x86_64::aes::Vaes256),
    /// x86 VAES on 512-bit vectors.
    #[cfg(target_arch = "x86_64")]
    Vaes512(arch::x86_64::aes::Vaes512),
    /// ARMv8 AES instructions.
    #[cfg(target_arch = "aarch64")]
    NeonAes(arch::aarch64::neon::NeonAes),
}

impl Path {
    fn of(backend: Backend) -> Path {
        match backend {
            #[cfg(target_arch = "x86_64")]
            Backend::Avx512 => arch::x86_64::aes::Vaes512::new()
                .map(Path::Vaes512)
                .or_else(|| arch::x86_64::aes::AesNi::new().map(Path::AesNi))
                .unwrap_or(Path::Reference),
            #[cfg(target_arch = "x86_64")]
            Backend::Avx2 => arch::x86_64::aes::Vaes256::new()
                .map(Path::Vaes256)
                .or_else(|| arch::x86_64::aes::AesNi::new().map(Path::AesNi))
                .unwrap_or(Path::Reference),
            #[cfg(target_arch = "aarch64")]
            Backend::Neon => arch::aarch64::neon::NeonAes::new()
                .map(Path::NeonAes)
                .unwrap_or(Path::Reference),
            _ => Path::Reference,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Path::Reference => "aes-crate",
            #[cfg(target_arch = "x86_64")]
            Path::AesNi(_) => "aes-ni",
            #[cfg(target_arch = "x86_64")]
            Path::Vaes256(_) => "vaes-256",
            #[cfg(target_arch = "x86_64")]
            Path::Vaes512(_) => "vaes-512",
            #[cfg(target_arch = "aarch64")]
            Path::NeonAes(_) => "neon-aes",
        }
    }

    /// The one-key path: AES-NI wherever a vector path runs on x86.
    fn one(self) -> Path {
        match self {
            #[cfg(target_arch = "x86_64")]
            Path::Vaes256(v) => Path::AesNi(v.aesni()),
            #[cfg(target_arch = "x86_64")]
            Path::Vaes512(v) => Path::AesNi(v.aesni()),
            p => p,
        }
    }
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
        let backend = Backend::active();
        Hasher {
            key,
            backend,
            path: Path::of(backend),
        }
    }

    /// The same key on another backend; an error if this CPU lacks it.
    pub fn on_backend(mut self, backend: Backend) -> Result<Self, BackendError> {
        self.backend = backend.require()?;
        self.path = Path::of(self.backend);
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

    /// The instructions the hash runs on: `aes-crate`, `aes-ni`,
    /// `vaes-256`, `vaes-512` or `neon-aes`.
    pub fn hash_instructions(&self) -> &'static str {
        self.path.name()
    }

    /// The instructions a hasher on `backend` would run (as
    /// [`hash_instructions`](Self::hash_instructions); "unavailable" if this
    /// CPU lacks the backend).
    pub fn instructions_on(backend: Backend) -> &'static str {
        if backend.is_available() {
            Path::of(backend).name()
        } else {
            "unavailable"
        }
    }

    /// Hashes one key (same result as the batch; the AES instructions
    /// without vector set-up where the CPU has them).
    pub fn hash_one<const W: usize>(&self, key: &[u32; W]) -> HashPair {
        let mut out = [HashPair::default()];
        self.run(self.path.one(), std::slice::from_ref(key), &mut out);
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
        self.run(self.path, keys, &mut out[..keys.len()]);
    }

    fn run<const W: usize>(&self, path: Path, keys: &[[u32; W]], out: &mut [HashPair]) {
        match path {
            Path::Reference => arch::scalar::hash(&self.key, keys, out),
            #[cfg(target_arch = "x86_64")]
            Path::AesNi(k) => k.hash(&self.key, keys, out),
            #[cfg(target_arch = "x86_64")]
            Path::Vaes256(k) => k.hash(&self.key, keys, out),
            #[cfg(target_arch = "x86_64")]
            Path::Vaes512(k) => k.hash(&self.key, keys, out),
            #[cfg(target_arch = "aarch64")]
            Path::NeonAes(k) => k.hash(&self.key, keys, out),
        }
    }

    /// Partitioned indices for `pairs` (see [`index::partitioned`]).
    #[inline]
    pub fn partitioned(&self, pairs: &[HashPair], layout: Partitioned, out: &mut [u32]) {
        // SAFETY: the backend was available when the hasher was built (the
        // field's invariant), and a CPU does not lose features.
        unsafe { index::partitioned_on(self.backend, pairs, layout, out) }
    }

    /// Blocked indices for `pairs` (see [`index::blocked`]).
    #[inline]
    pub fn blocked(
        &self,
        pairs: &[HashPair],
        layout: Blocked,
        blocks: &mut [u32],
        bits: &mut [u32],
    ) {
        // SAFETY: as in `partitioned`.
        unsafe { index::blocked_on(self.backend, pairs, layout, blocks, bits) }
    }
}
