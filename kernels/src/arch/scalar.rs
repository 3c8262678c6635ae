//! The portable one-lane backend and reference implementation.

use crate::hash::HashPair;
use crate::index::{Blocked, Partitioned, SplitBlock, SplitBlockWords};
use crate::lanes::{self, Block, Lanes, SPLIT_SALTS, SplitLanes};
use crate::seed::HashKey;

// One lane: plain wrapping `u32` arithmetic. None of these need any CPU
// feature; they are `unsafe fn` only because the trait's methods are.
impl Lanes for u32 {
    const LANES: usize = 1;

    #[inline(always)]
    unsafe fn splat(x: u32) -> Self {
        x
    }
    #[inline(always)]
    unsafe fn add(self, o: Self) -> Self {
        self.wrapping_add(o)
    }
    #[inline(always)]
    unsafe fn or(self, o: Self) -> Self {
        self | o
    }
    #[inline(always)]
    unsafe fn mul(self, o: Self) -> Self {
        self.wrapping_mul(o)
    }
    #[inline(always)]
    unsafe fn shr_var(self, n: u32) -> Self {
        lanes::shr(self, n)
    }
    #[inline(always)]
    unsafe fn load_pairs(p: *const HashPair) -> (Self, Self) {
        // SAFETY: the caller guarantees one readable pair.
        let p = unsafe { *p };
        (p.h1, p.h2)
    }
    #[inline(always)]
    unsafe fn store(self, out: *mut u32) {
        // SAFETY: the caller guarantees one writable word.
        unsafe { out.write(self) }
    }
}

/// Hashes `keys` into `out[..keys.len()]` (reference implementation; see
/// [`crate::Hasher`] for the definition), eight keys at a time through
/// `aes::hazmat::cipher_round_par` (the `aes` crate's bit-sliced software
/// rounds work on eight blocks at once, and one call per round amortises
/// its dispatch where it uses AES-NI or ARMv8 AES). A short last group is
/// padded with zero blocks whose results are dropped.
///
/// # Panics
/// If `out` is shorter than `keys`.
pub fn hash<const W: usize>(key: &HashKey, keys: &[[u32; W]], out: &mut [HashPair]) {
    super::check_hash::<W>(keys.len(), out.len());
    let mut rk = [aes::Block8::default(); crate::seed::ROUND_KEYS];
    for (wide, k) in rk.iter_mut().zip(&key.rk) {
        wide.fill(aes::Block::from(*k));
    }
    let s0 = aes::Block::from(key.initial_state(W));
    for (keys, out) in keys.chunks(8).zip(out.chunks_mut(8)) {
        let mut s = aes::Block8::default();
        s.fill(s0);
        for j in 0..W.div_ceil(4) {
            for (state, words) in s.iter_mut().zip(keys) {
                for (c, w) in words[4 * j..W.min(4 * j + 4)].iter().enumerate() {
                    for (b, x) in w.to_le_bytes().into_iter().enumerate() {
                        state[4 * c + b] ^= x;
                    }
                }
            }
            aes::hazmat::cipher_round_par(&mut s, &rk[1 + j]);
        }
        for k in &rk[1 + crate::hash::MAX_BLOCKS..] {
            aes::hazmat::cipher_round_par(&mut s, k);
        }
        for (o, state) in out.iter_mut().zip(s.iter()) {
            *o = HashPair {
                h1: u32::from_le_bytes([state[0], state[1], state[2], state[3]]),
                h2: u32::from_le_bytes([state[4], state[5], state[6], state[7]]),
            };
        }
    }
}

/// Partitioned indices (reference implementation); see [`crate::index`].
///
/// # Panics
/// If `out` is shorter than `rows * pairs.len()`.
pub fn partitioned(pairs: &[HashPair], layout: Partitioned, out: &mut [u32]) {
    super::check_partitioned(pairs, layout, out);
    // SAFETY: no CPU feature needed; length checked above.
    unsafe { lanes::partitioned::<u32>(pairs, layout.rows(), layout.log2_width(), out) }
}

/// Blocked indices (reference implementation); see [`crate::index`].
///
/// # Panics
/// If `blocks` is shorter than `pairs` or `bits` than `k * pairs.len()`.
pub fn blocked(pairs: &[HashPair], layout: Blocked, blocks: &mut [u32], bits: &mut [u32]) {
    super::check_blocked(pairs, layout, blocks, bits);
    // SAFETY: no CPU feature needed; lengths checked above.
    unsafe {
        lanes::blocked::<u32>(
            pairs,
            layout.log2_blocks(),
            layout.log2_block_bits(),
            layout.k(),
            blocks,
            bits,
        )
    }
}

// Eight plain words. No CPU feature needed; `unsafe fn` only because the
// trait's methods are.
impl SplitLanes for u32 {
    type Salts = [u32; 8];
    type Mask = [u32; 8];

    #[inline(always)]
    unsafe fn split_salts() -> [u32; 8] {
        SPLIT_SALTS
    }
    #[inline(always)]
    unsafe fn split_mask(salts: [u32; 8], h2: u32) -> [u32; 8] {
        let mut m = [0u32; 8];
        for (mj, &sj) in m.iter_mut().zip(&salts) {
            *mj = 1 << (h2.wrapping_mul(sj) >> 27);
        }
        m
    }
    #[inline(always)]
    unsafe fn split_test(block: *const Block, mask: [u32; 8]) -> bool {
        // SAFETY: the caller guarantees one readable block.
        let b = unsafe { &*block };
        let mut miss = 0;
        for (&w, &m) in b.iter().zip(&mask) {
            miss |= m & !w;
        }
        miss == 0
    }
    #[inline(always)]
    unsafe fn split_set(block: *mut Block, mask: [u32; 8]) {
        // SAFETY: the caller guarantees one readable, writable block.
        let b = unsafe { &mut *block };
        for (w, &m) in b.iter_mut().zip(&mask) {
            *w |= m;
        }
    }
}

/// Split-block queries (reference implementation); see
/// [`crate::index::split_block_contains`].
///
/// # Panics
/// If `blocks.len()` is not `layout.blocks()` or `out` is shorter than
/// `pairs`.
pub fn split_block_contains(
    pairs: &[HashPair],
    layout: SplitBlock,
    blocks: &[SplitBlockWords],
    out: &mut [bool],
) {
    super::check_split_block(
        "split_block_contains",
        layout,
        blocks,
        Some((pairs.len(), out.len())),
    );
    // SAFETY: no CPU feature needed; lengths checked above.
    unsafe { lanes::split_block_contains::<u32>(pairs, layout.log2_blocks(), blocks, out) }
}

/// Split-block inserts (reference implementation); see
/// [`crate::index::split_block_insert`].
///
/// # Panics
/// If `blocks.len()` is not `layout.blocks()`.
pub fn split_block_insert(pairs: &[HashPair], layout: SplitBlock, blocks: &mut [SplitBlockWords]) {
    super::check_split_block("split_block_insert", layout, blocks, None);
    // SAFETY: no CPU feature needed; length checked above.
    unsafe { lanes::split_block_insert::<u32>(pairs, layout.log2_blocks(), blocks) }
}
