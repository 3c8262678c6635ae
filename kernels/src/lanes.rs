//! The index and split-block algorithms, written once over a small vector
//! trait.
//!
//! Each backend implements [`Lanes`] for its register type (`u32` for scalar,
//! `__m256i` for AVX2, `__m512i` for AVX-512, `uint32x4_t` for NEON) and
//! instantiates the generic bodies below from a thin `#[target_feature]`
//! trampoline. The bodies are `#[inline(always)]` so they compile inside the
//! trampoline with the feature enabled. (The hash is AES rounds, one key per
//! 128-bit lane, so it is written per instruction set instead: see
//! [`crate::Hasher`].)

use crate::hash::HashPair;

/// A vector of `LANES` 32-bit lanes with wrapping arithmetic.
///
/// All methods are `unsafe` because a backend's implementation may only run
/// on a CPU that has its feature; holding a value of the type is not proof of
/// that, the trampoline's caller is. Pointer arguments must be valid for the
/// number of elements documented on each method; no alignment is required.
pub(crate) trait Lanes: Copy {
    /// Number of 32-bit lanes.
    const LANES: usize;

    /// # Safety
    /// The CPU must support the backend.
    unsafe fn splat(x: u32) -> Self;
    /// # Safety
    /// The CPU must support the backend.
    unsafe fn add(self, o: Self) -> Self;
    /// # Safety
    /// The CPU must support the backend.
    unsafe fn or(self, o: Self) -> Self;
    /// Low 32 bits of the product.
    ///
    /// # Safety
    /// The CPU must support the backend.
    unsafe fn mul(self, o: Self) -> Self;
    /// Logical right shift by `n`; `n >= 32` gives 0.
    ///
    /// # Safety
    /// The CPU must support the backend.
    unsafe fn shr_var(self, n: u32) -> Self;
    /// Loads `LANES` pairs: lane `j` of the results holds `p[j].h1`, `p[j].h2`.
    ///
    /// # Safety
    /// The CPU must support the backend and `p` must be valid for reads of
    /// `LANES` pairs.
    unsafe fn load_pairs(p: *const HashPair) -> (Self, Self);
    /// Stores the lanes to `out[0..LANES]`.
    ///
    /// # Safety
    /// The CPU must support the backend and `out` must be valid for writes of
    /// `LANES` words.
    unsafe fn store(self, out: *mut u32);
}

/// Partitioned indices, row-major: `out[r * n + i]` is key `i`'s index in
/// row `r`, `(h1 + r * (h2 | 1)) >> (32 - log2_width)`.
///
/// # Safety
/// The CPU must support `V`'s backend; `out.len() >= rows * pairs.len()`.
#[inline(always)]
pub(crate) unsafe fn partitioned<V: Lanes>(
    pairs: &[HashPair],
    rows: usize,
    log2_width: u32,
    out: &mut [u32],
) {
    let n = pairs.len();
    debug_assert!(out.len() >= rows * n);
    let shift = 32 - log2_width;
    // Plain loops, no closures: a closure would not inherit the caller's
    // `#[target_feature]`, and the lane operations would not inline into it.
    let mut i = 0;
    // SAFETY: backend support is the caller's promise; each store writes
    // `out[r * n + i ..][..LANES]`, inside `out` because `i + LANES <= n`
    // and `r < rows`.
    unsafe {
        let one = V::splat(1);
        // Four vectors of keys at a time, row by row: each row's stores are
        // then one contiguous run (4 vectors), rather than one vector in
        // each of `rows` rows. Interleaving rows per vector measured up to
        // 2.4x slower depending on where the output lies relative to the
        // pairs (0.38-0.92 ns per key for eight rows on the same build).
        while i + 4 * V::LANES <= n {
            let mut g = [one; 4];
            let mut step = [one; 4];
            for v in 0..4 {
                let (h1, h2) = V::load_pairs(pairs.as_ptr().add(i + v * V::LANES));
                g[v] = h1;
                step[v] = h2.or(one);
            }
            for r in 0..rows {
                let row = out.as_mut_ptr().add(r * n + i);
                for v in 0..4 {
                    g[v].shr_var(shift).store(row.add(v * V::LANES));
                    g[v] = g[v].add(step[v]);
                }
            }
            i += 4 * V::LANES;
        }
        while i + V::LANES <= n {
            let (h1, h2) = V::load_pairs(pairs.as_ptr().add(i));
            let (step, mut g) = (h2.or(one), h1);
            for r in 0..rows {
                g.shr_var(shift).store(out.as_mut_ptr().add(r * n + i));
                g = g.add(step);
            }
            i += V::LANES;
        }
    }
    // The last `n % LANES` keys one at a time: a padded vector would need a
    // stack buffer for the pairs and another for the stores, and that frame
    // (with the registers it saves) cost every call, tail or not. The
    // scalar backend's loop above leaves none: said as a constant, its code
    // is compiled without this loop.
    if V::LANES > 1 {
        for (j, p) in pairs.iter().enumerate().skip(i) {
            let mut g = p.h1;
            for r in 0..rows {
                out[r * n + j] = shr(g, shift);
                g = g.wrapping_add(p.h2 | 1);
            }
        }
    }
}

/// `x >> n`, 0 when `n >= 32` (a layout of width 1 shifts by 32), as the
/// vector shifts define it: the scalar backend's [`Lanes::shr_var`], and
/// the vector backends' one-key tails.
#[inline(always)]
pub(crate) fn shr(x: u32, n: u32) -> u32 {
    x.checked_shr(n).unwrap_or(0)
}

/// Odd multipliers for blocked bit positions. The first eight are the salts
/// of the Parquet split-block Bloom filter specification; the rest continue
/// with odd SplitMix64 outputs.
pub(crate) const SALTS: [u32; 32] = {
    let mut s = [
        0x47b6_137b,
        0x4497_4d91,
        0x8824_ad5b,
        0xa2b7_289d,
        0x7054_95c7,
        0x2df1_424b,
        0x9efc_4947,
        0x5c6b_fb31,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
    ];
    let mut state: u64 = 0x5a17_5a17_5a17_5a17;
    let mut j = 8;
    while j < 32 {
        s[j] = (crate::seed::splitmix64(&mut state) >> 32) as u32 | 1;
        j += 1;
    }
    s
};

/// Blocked indices: `blocks[i] = h1 >> (32 - log2_blocks)` and, position-major,
/// `bits[j * n + i] = (h2 * SALTS[j]) >> (32 - log2_block_bits)`.
///
/// # Safety
/// The CPU must support `V`'s backend; `blocks.len() >= n`,
/// `bits.len() >= k * n` where `n = pairs.len()`, and `k <= SALTS.len()`.
#[inline(always)]
pub(crate) unsafe fn blocked<V: Lanes>(
    pairs: &[HashPair],
    log2_blocks: u32,
    log2_block_bits: u32,
    k: usize,
    blocks: &mut [u32],
    bits: &mut [u32],
) {
    let n = pairs.len();
    debug_assert!(blocks.len() >= n && bits.len() >= k * n && k <= SALTS.len());
    let block_shift = 32 - log2_blocks;
    let bit_shift = 32 - log2_block_bits;
    let mut i = 0;
    // SAFETY: as in `partitioned`: every store stays inside `blocks[..n]`
    // and `bits[..k * n]` (a step writes `i .. i + LANES <= n` of each).
    unsafe {
        // Four vectors at a time, position by position, as in `partitioned`.
        while i + 4 * V::LANES <= n {
            let mut h2 = [V::splat(0); 4];
            for (v, h) in h2.iter_mut().enumerate() {
                let (a, b) = V::load_pairs(pairs.as_ptr().add(i + v * V::LANES));
                a.shr_var(block_shift)
                    .store(blocks.as_mut_ptr().add(i + v * V::LANES));
                *h = b;
            }
            for (j, &salt) in SALTS[..k].iter().enumerate() {
                let salt = V::splat(salt);
                let row = bits.as_mut_ptr().add(j * n + i);
                for (v, h) in h2.iter().enumerate() {
                    h.mul(salt).shr_var(bit_shift).store(row.add(v * V::LANES));
                }
            }
            i += 4 * V::LANES;
        }
        while i + V::LANES <= n {
            let (h1, h2) = V::load_pairs(pairs.as_ptr().add(i));
            h1.shr_var(block_shift).store(blocks.as_mut_ptr().add(i));
            for (j, &salt) in SALTS[..k].iter().enumerate() {
                h2.mul(V::splat(salt))
                    .shr_var(bit_shift)
                    .store(bits.as_mut_ptr().add(j * n + i));
            }
            i += V::LANES;
        }
    }
    // The last `n % LANES` keys one at a time (see `partitioned`).
    if V::LANES > 1 {
        for (t, p) in pairs.iter().enumerate().skip(i) {
            blocks[t] = shr(p.h1, block_shift);
            for (j, &salt) in SALTS[..k].iter().enumerate() {
                bits[j * n + t] = shr(p.h2.wrapping_mul(salt), bit_shift);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Split-block Bloom filters: 256-bit blocks, one bit per 32-bit word.

/// One split block (see [`crate::index::SplitBlock`]).
pub(crate) type Block = crate::index::SplitBlockWords;

/// The split-block salts: the first eight of [`SALTS`] (Parquet's).
pub(crate) const SPLIT_SALTS: [u32; 8] = [
    SALTS[0], SALTS[1], SALTS[2], SALTS[3], SALTS[4], SALTS[5], SALTS[6], SALTS[7],
];

/// The split-block operations of one backend: the eight one-bit masks of a
/// key, and testing or setting them in its 256-bit block. Each backend keeps
/// its own representation of a mask (one `__m256i`, two `uint32x4_t`, eight
/// `u32`), the way memchr's vector trait keeps NEON's own mask type.
///
/// Like [`Lanes`], every method is `unsafe` because a backend's
/// implementation may only run on a CPU that has its feature. Block pointers
/// need no alignment beyond `u32`'s (the filters align blocks to 32 bytes,
/// so the loads never split a cache line).
pub(crate) trait SplitLanes {
    /// The salts, loaded once per call.
    type Salts: Copy;
    /// A key's eight word masks.
    type Mask: Copy;

    /// # Safety
    /// The CPU must support the backend.
    unsafe fn split_salts() -> Self::Salts;
    /// Word `j` of the mask is `1 << ((h2 * SALT[j]) >> 27)`.
    ///
    /// # Safety
    /// The CPU must support the backend.
    unsafe fn split_mask(salts: Self::Salts, h2: u32) -> Self::Mask;
    /// Whether every bit of `mask` is set in `*block`.
    ///
    /// # Safety
    /// The CPU must support the backend; `block` must be valid for reads.
    unsafe fn split_test(block: *const Block, mask: Self::Mask) -> bool;
    /// `*block |= mask`.
    ///
    /// # Safety
    /// The CPU must support the backend; `block` must be valid for reads and
    /// writes.
    unsafe fn split_set(block: *mut Block, mask: Self::Mask);
}

/// The block of a key: the top `log2_blocks` bits of `h1` (0 when there is
/// one block; `log2_blocks <= 32`).
#[inline(always)]
pub(crate) fn split_block_of(h1: u32, log2_blocks: u32) -> usize {
    (u64::from(h1) >> (32 - log2_blocks)) as usize
}

/// Asks the CPU to bring the line at `p` into L1. A hint only: it never
/// faults and changes nothing a program can observe, so any address will do.
#[inline(always)]
fn prefetch_block(p: *const Block) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: `prefetch` (SSE, baseline on x86_64) never faults and
        // reads or writes nothing architecturally, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>()) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        // No stable prefetch intrinsic elsewhere; the out-of-order core still
        // overlaps the independent loads.
        let _ = p;
    }
}

/// Filters of at least this many split blocks (512 KiB) are prefetched a
/// batch ahead. Smaller ones stay in L2 (or L1), where the out-of-order
/// core overlaps the independent block loads by itself: measured on a
/// 128 KiB filter (AVX2, 64-key batches), a prefetch pass cost 0.2-0.3
/// ns/key and gained nothing, while on a 16 MiB filter it halved the time.
pub(crate) const PREFETCH_MIN_BLOCKS: usize = 1 << 14;

/// Prefetches the block of every pair when the filter is large enough to
/// miss L2 ([`PREFETCH_MIN_BLOCKS`]).
#[inline(always)]
fn prefetch_blocks(pairs: &[HashPair], log2_blocks: u32, base: *const Block, blocks: usize) {
    if blocks >= PREFETCH_MIN_BLOCKS {
        // Plain loop, no closure (see `partitioned`).
        for p in pairs {
            prefetch_block(base.wrapping_add(split_block_of(p.h1, log2_blocks)));
        }
    }
}

/// Split-block queries: `out[i]` is whether `pairs[i]`'s mask is all set in
/// block `split_block_of(h1)`. Every block of a large filter is prefetched
/// first ([`PREFETCH_MIN_BLOCKS`]), then each is tested with one load.
///
/// # Safety
/// The CPU must support `V`'s backend; `log2_blocks <= 32`,
/// `blocks.len() == 2^log2_blocks` and `out.len() >= pairs.len()`.
#[inline(always)]
pub(crate) unsafe fn split_block_contains<V: SplitLanes>(
    pairs: &[HashPair],
    log2_blocks: u32,
    blocks: &[Block],
    out: &mut [bool],
) {
    debug_assert!(blocks.len() as u64 == 1u64 << log2_blocks && out.len() >= pairs.len());
    let base = blocks.as_ptr();
    prefetch_blocks(pairs, log2_blocks, base, blocks.len());
    // Plain loops, no closures: a closure would not inherit the caller's
    // `#[target_feature]`, and the lane operations would not inline into it.
    // SAFETY: backend support is the caller's promise; `split_block_of` is
    // below `2^log2_blocks == blocks.len()`, so every block pointer is in
    // bounds.
    unsafe {
        let salts = V::split_salts();
        for (o, p) in out.iter_mut().zip(pairs) {
            let b = base.add(split_block_of(p.h1, log2_blocks));
            *o = V::split_test(b, V::split_mask(salts, p.h2));
        }
    }
}

/// Split-block inserts: ORs each pair's mask into its block, in order
/// (large filters prefetched first, as in [`split_block_contains`]).
///
/// # Safety
/// The CPU must support `V`'s backend; `log2_blocks <= 32` and
/// `blocks.len() == 2^log2_blocks`.
#[inline(always)]
pub(crate) unsafe fn split_block_insert<V: SplitLanes>(
    pairs: &[HashPair],
    log2_blocks: u32,
    blocks: &mut [Block],
) {
    debug_assert!(blocks.len() as u64 == 1u64 << log2_blocks);
    let n_blocks = blocks.len();
    let base = blocks.as_mut_ptr();
    prefetch_blocks(pairs, log2_blocks, base, n_blocks);
    // SAFETY: as in `split_block_contains`; `base` comes from the exclusive
    // borrow of `blocks`, so the writes alias nothing.
    unsafe {
        let salts = V::split_salts();
        for p in pairs {
            let b = base.add(split_block_of(p.h1, log2_blocks));
            V::split_set(b, V::split_mask(salts, p.h2));
        }
    }
}
