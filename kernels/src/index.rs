//! Index derivation: k indices per key from its [`HashPair`], vectorised.
//!
//! Both layouts use double hashing (Kirsch and Mitzenmacher, "Less hashing,
//! same performance", 2006) with the step forced odd, `s = h2 | 1`, so it is
//! never zero, and take indices from the *top* bits of the 32-bit sums so
//! that every bit of `h1` and `s` reaches every index through the carries:
//!
//! * **Partitioned** (count-min rows, SFB levels): `d` rows of `2^b` entries;
//!   row `r` of a key is `(h1 + r * s) >> (32 - b)`, `r = 0..d`.
//! * **Blocked** (blocked Bloom filters): `2^B` blocks of `2^c` bits; the
//!   block is `h1 >> (32 - B)` and bit `j` inside it is
//!   `(h2 * SALT[j]) >> (32 - c)`, `j = 0..k` (multiply-shift with fixed odd
//!   salts, as in split-block Bloom filters), so the pattern depends only on
//!   `h2` and is independent of the block. Double hashing is *not* used
//!   here: inside a 512-bit block its arithmetic-progression patterns overlap
//!   between keys with equal steps, which measured about 9% more false
//!   positives than the independent-position formula; multiply-shift
//!   positions match it (see `tests/quality.rs`).
//!
//! * **Split block** (split-block Bloom filters, as in Parquet): `2^B`
//!   blocks of 256 bits, each eight 32-bit words, exactly one bit per word
//!   (`k = 8`). The block is `h1 >> (32 - B)`, as in the blocked layout;
//!   word `j` of it gets bit `(h2 * SALT[j]) >> 27`, `j = 0..8`, where
//!   `SALT` are the first eight of [`SALTS`] (the Parquet salts). The eight
//!   masks of a key are one vector multiply, shift and variable shift, and a
//!   query is one 32-byte load and one test ([`split_block_contains`]).
//!   With `lambda = n / 2^B` keys per block, the false-positive rate is
//!   `sum_i Poisson(i; lambda) * (1 - (1 - 1/32)^i)^8`.
//!
//! Shifts by 32 (a width of 1, `b = 0`) give index 0. Outputs are
//! index-major (`out[r * n + i]` for key `i`), so each row's indices for a
//! batch are contiguous: a structure walks one row at a time, which is what
//! prefetching wants.

use crate::arch;
#[cfg(target_arch = "aarch64")]
use crate::arch::aarch64::neon::Neon;
#[cfg(target_arch = "x86_64")]
use crate::arch::x86_64::{avx2::Avx2, avx512::Avx512};
use crate::backend::Backend;
use crate::hash::HashPair;

/// A partitioned layout: `rows` rows of `2^log2_width` entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partitioned {
    rows: usize,
    log2_width: u32,
}

impl Partitioned {
    /// `rows` rows (at least 1) of `2^log2_width` entries (`log2_width <= 32`).
    ///
    /// # Panics
    /// If `rows` is 0 or `log2_width > 32`.
    #[inline]
    pub fn new(rows: usize, log2_width: u32) -> Self {
        assert!(rows >= 1, "partitioned layout needs at least one row");
        assert!(log2_width <= 32, "row width 2^{log2_width} exceeds 2^32");
        Partitioned { rows, log2_width }
    }

    /// Number of rows (indices per key).
    #[inline]
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// log2 of the row width.
    #[inline]
    pub fn log2_width(&self) -> u32 {
        self.log2_width
    }
}

/// The most bit positions per key a blocked layout supports.
pub const MAX_BLOCKED_K: usize = crate::lanes::SALTS.len();

/// The odd multipliers of blocked and split-block bit positions: position
/// `j` of a key is `(h2 * SALTS[j]) >> (32 - c)`. The first eight are the
/// salts of the Parquet split-block Bloom filter specification (the
/// split-block layout uses exactly those); the rest continue with odd
/// SplitMix64 outputs.
pub const SALTS: [u32; MAX_BLOCKED_K] = crate::lanes::SALTS;

/// Words (and so bits per key, `k`) of one split block.
pub const SPLIT_BLOCK_WORDS: usize = 8;

/// One split block: 256 bits as eight 32-bit words, word `j` holding bits
/// `32 j .. 32 j + 32`.
pub type SplitBlockWords = [u32; SPLIT_BLOCK_WORDS];

/// A split-block layout: `2^log2_blocks` blocks of 256 bits, one bit per
/// 32-bit word per key (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitBlock {
    log2_blocks: u32,
}

impl SplitBlock {
    /// `2^log2_blocks` blocks of 256 bits.
    ///
    /// # Panics
    /// If `log2_blocks > 32`.
    #[inline]
    pub fn new(log2_blocks: u32) -> Self {
        assert!(log2_blocks <= 32, "2^{log2_blocks} blocks exceed 2^32");
        SplitBlock { log2_blocks }
    }

    /// log2 of the number of blocks.
    #[inline]
    pub fn log2_blocks(&self) -> u32 {
        self.log2_blocks
    }

    /// The number of blocks, `2^log2_blocks`.
    #[inline]
    pub fn blocks(&self) -> u64 {
        1 << self.log2_blocks
    }

    /// The block of a key: `h1 >> (32 - log2_blocks)` (0 for one block).
    #[inline(always)]
    pub fn block(&self, pair: HashPair) -> usize {
        crate::lanes::split_block_of(pair.h1, self.log2_blocks)
    }

    /// The eight one-bit masks of a key, word `j` being
    /// `1 << ((h2 * SALTS[j]) >> 27)` (the scalar definition every backend
    /// matches).
    pub fn mask(pair: HashPair) -> SplitBlockWords {
        let mut m = [0u32; SPLIT_BLOCK_WORDS];
        for (mj, &salt) in m.iter_mut().zip(&SALTS) {
            *mj = 1 << (pair.h2.wrapping_mul(salt) >> 27);
        }
        m
    }
}

/// A blocked layout: `2^log2_blocks` blocks of `2^log2_block_bits` bits, `k`
/// bit positions per key inside its block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocked {
    log2_blocks: u32,
    log2_block_bits: u32,
    k: usize,
}

impl Blocked {
    /// `2^log2_blocks` blocks of `2^log2_block_bits` bits (9 for a 64-byte
    /// cache line), `k >= 1` positions per key.
    ///
    /// # Panics
    /// If `k` is not in `1..=32`, `log2_blocks > 32` or `log2_block_bits` is
    /// 0 or above 16.
    #[inline]
    pub fn new(log2_blocks: u32, log2_block_bits: u32, k: usize) -> Self {
        assert!(
            (1..=MAX_BLOCKED_K).contains(&k),
            "blocked layout needs k in 1..={MAX_BLOCKED_K}, got {k}"
        );
        assert!(log2_blocks <= 32, "2^{log2_blocks} blocks exceed 2^32");
        assert!(
            (1..=16).contains(&log2_block_bits),
            "block of 2^{log2_block_bits} bits is outside 2..=65536"
        );
        Blocked {
            log2_blocks,
            log2_block_bits,
            k,
        }
    }

    /// log2 of the number of blocks.
    #[inline]
    pub fn log2_blocks(&self) -> u32 {
        self.log2_blocks
    }

    /// log2 of the bits per block.
    #[inline]
    pub fn log2_block_bits(&self) -> u32 {
        self.log2_block_bits
    }

    /// Bit positions per key.
    #[inline]
    pub fn k(&self) -> usize {
        self.k
    }
}

/// Partitioned indices of every pair on `backend`: `out[r * n + i]` is row
/// `r`'s index for `pairs[i]`, `n = pairs.len()`.
///
/// # Panics
/// If `out` is shorter than `rows * n`, or `backend` is not available on
/// this CPU.
pub fn partitioned(backend: Backend, pairs: &[HashPair], layout: Partitioned, out: &mut [u32]) {
    // SAFETY: `checked` returns only a backend this CPU has.
    unsafe { partitioned_on(checked(backend), pairs, layout, out) }
}

/// [`partitioned`] on a backend already known to be available: a
/// [`Hasher`](crate::Hasher) checked its backend when it was built, so its
/// per-batch calls skip the check (and the detection call it may make,
/// which costs the dispatcher a stack frame).
///
/// # Safety
/// `backend.is_available()` must hold.
///
/// # Panics
/// If `out` is shorter than `rows * n`.
#[inline]
pub(crate) unsafe fn partitioned_on(
    backend: Backend,
    pairs: &[HashPair],
    layout: Partitioned,
    out: &mut [u32],
) {
    match backend {
        #[cfg(target_arch = "x86_64")]
        Backend::Avx2 => {
            // SAFETY: the caller promises AVX2 is available.
            let avx2 = unsafe { Avx2::new_unchecked() };
            avx2.partitioned(pairs, layout, out)
        }
        #[cfg(target_arch = "x86_64")]
        Backend::Avx512 => {
            // SAFETY: the caller promises the AVX-512 backend is available.
            let avx512 = unsafe { Avx512::new_unchecked() };
            avx512.partitioned(pairs, layout, out)
        }
        #[cfg(target_arch = "aarch64")]
        Backend::Neon => Neon::baseline().partitioned(pairs, layout, out),
        _ => arch::scalar::partitioned(pairs, layout, out),
    }
}

/// Blocked indices of every pair on `backend`: `blocks[i]` is the block of
/// `pairs[i]` and `bits[j * n + i]` its `j`-th bit inside the block.
///
/// # Panics
/// If `blocks` is shorter than `n` or `bits` than `k * n`, or `backend` is
/// not available on this CPU.
pub fn blocked(
    backend: Backend,
    pairs: &[HashPair],
    layout: Blocked,
    blocks: &mut [u32],
    bits: &mut [u32],
) {
    // SAFETY: `checked` returns only a backend this CPU has.
    unsafe { blocked_on(checked(backend), pairs, layout, blocks, bits) }
}

/// [`blocked`] on a backend already known to be available (see
/// [`partitioned_on`]).
///
/// # Safety
/// `backend.is_available()` must hold.
///
/// # Panics
/// If `blocks` is shorter than `n` or `bits` than `k * n`.
#[inline]
pub(crate) unsafe fn blocked_on(
    backend: Backend,
    pairs: &[HashPair],
    layout: Blocked,
    blocks: &mut [u32],
    bits: &mut [u32],
) {
    match backend {
        #[cfg(target_arch = "x86_64")]
        Backend::Avx2 => {
            // SAFETY: the caller promises AVX2 is available.
            let avx2 = unsafe { Avx2::new_unchecked() };
            avx2.blocked(pairs, layout, blocks, bits)
        }
        #[cfg(target_arch = "x86_64")]
        Backend::Avx512 => {
            // SAFETY: the caller promises the AVX-512 backend is available.
            let avx512 = unsafe { Avx512::new_unchecked() };
            avx512.blocked(pairs, layout, blocks, bits)
        }
        #[cfg(target_arch = "aarch64")]
        Backend::Neon => Neon::baseline().blocked(pairs, layout, blocks, bits),
        _ => arch::scalar::blocked(pairs, layout, blocks, bits),
    }
}

/// Split-block queries on `backend`: `out[i]` becomes whether every bit of
/// `pairs[i]`'s mask is set in its block of `blocks`. Prefetches every
/// key's block first, then tests each with one load.
///
/// # Panics
/// If `blocks.len()` is not `layout.blocks()`, `out` is shorter than
/// `pairs`, or `backend` is not available on this CPU.
pub fn split_block_contains(
    backend: Backend,
    pairs: &[HashPair],
    layout: SplitBlock,
    blocks: &[SplitBlockWords],
    out: &mut [bool],
) {
    match checked(backend) {
        #[cfg(target_arch = "x86_64")]
        Backend::Avx2 | Backend::Avx512 => {
            // SAFETY: `checked` proved AVX2 is available (the AVX-512
            // backend requires it too).
            let avx2 = unsafe { Avx2::new_unchecked() };
            avx2.split_block_contains(pairs, layout, blocks, out)
        }
        #[cfg(target_arch = "aarch64")]
        Backend::Neon => Neon::baseline().split_block_contains(pairs, layout, blocks, out),
        _ => arch::scalar::split_block_contains(pairs, layout, blocks, out),
    }
}

/// Split-block inserts on `backend`: ORs every pair's mask into its block,
/// in order.
///
/// # Panics
/// If `blocks.len()` is not `layout.blocks()`, or `backend` is not
/// available on this CPU.
pub fn split_block_insert(
    backend: Backend,
    pairs: &[HashPair],
    layout: SplitBlock,
    blocks: &mut [SplitBlockWords],
) {
    match checked(backend) {
        #[cfg(target_arch = "x86_64")]
        Backend::Avx2 | Backend::Avx512 => {
            // SAFETY: `checked` proved AVX2 is available (the AVX-512
            // backend requires it too).
            let avx2 = unsafe { Avx2::new_unchecked() };
            avx2.split_block_insert(pairs, layout, blocks)
        }
        #[cfg(target_arch = "aarch64")]
        Backend::Neon => Neon::baseline().split_block_insert(pairs, layout, blocks),
        _ => arch::scalar::split_block_insert(pairs, layout, blocks),
    }
}

/// `backend` if this CPU has it (a cached flag), else a panic naming it.
#[inline]
fn checked(backend: Backend) -> Backend {
    match backend.require() {
        Ok(b) => b,
        Err(e) => unavailable(e),
    }
}

// The panic lives out of line, so the dispatchers above stay a few
// instructions with no stack frame of their own: they run once per batch
// of 32-64 keys, where a frame's saves and restores were a measurable part
// of the call. (The length checks are the backends', in `crate::arch`.)

#[cold]
#[inline(never)]
fn unavailable(e: crate::backend::BackendError) -> ! {
    panic!("{e}")
}
