//! NEON backend: four 32-bit lanes in a `uint32x4_t`.
//!
//! NEON is part of the aarch64 baseline, so the backend is chosen at compile
//! time and its entry points are safe functions.

use core::arch::aarch64::*;

use crate::hash::HashPair;
use crate::index::{Blocked, Partitioned};
use crate::lanes::{self, Lanes};
use crate::seed::HashKey;

// NEON is always present on aarch64; the `unsafe` blocks below are needed
// only for the pointer accesses, and `allow(unused_unsafe)` covers toolchains
// on which the arithmetic intrinsics are already safe to call.
#[allow(unused_unsafe)]
impl Lanes for uint32x4_t {
    const LANES: usize = 4;

    #[inline(always)]
    unsafe fn splat(x: u32) -> Self {
        // SAFETY: NEON is baseline on aarch64.
        unsafe { vdupq_n_u32(x) }
    }
    #[inline(always)]
    unsafe fn add(self, o: Self) -> Self {
        // SAFETY: NEON is baseline on aarch64.
        unsafe { vaddq_u32(self, o) }
    }
    #[inline(always)]
    unsafe fn xor(self, o: Self) -> Self {
        // SAFETY: NEON is baseline on aarch64.
        unsafe { veorq_u32(self, o) }
    }
    #[inline(always)]
    unsafe fn or(self, o: Self) -> Self {
        // SAFETY: NEON is baseline on aarch64.
        unsafe { vorrq_u32(self, o) }
    }
    #[inline(always)]
    unsafe fn mul(self, o: Self) -> Self {
        // SAFETY: NEON is baseline on aarch64.
        unsafe { vmulq_u32(self, o) }
    }
    #[inline(always)]
    unsafe fn shr<const N: i32>(self) -> Self {
        // SAFETY: NEON is baseline on aarch64.
        unsafe { vshrq_n_u32::<N>(self) }
    }
    #[inline(always)]
    unsafe fn shr_var(self, n: u32) -> Self {
        // SAFETY: NEON is baseline. USHL by a negative amount shifts right;
        // by -32 it yields 0, matching the scalar definition.
        unsafe { vshlq_u32(self, vdupq_n_s32(-(n as i32))) }
    }
    #[inline(always)]
    unsafe fn load_keys<const W: usize>(keys: *const [u32; W]) -> [Self; W] {
        // Transpose through the stack: column c holds word c of keys 0..4.
        let mut cols = [[0u32; 4]; W];
        for (j, _) in [(); 4].iter().enumerate() {
            // SAFETY: the caller guarantees 4 readable keys.
            let key = unsafe { *keys.add(j) };
            for c in 0..W {
                cols[c][j] = key[c];
            }
        }
        // SAFETY: each column is 4 readable words.
        core::array::from_fn(|c| unsafe { vld1q_u32(cols[c].as_ptr()) })
    }
    #[inline(always)]
    unsafe fn store_pairs(h1: Self, h2: Self, out: *mut HashPair) {
        // SAFETY: the caller guarantees 4 writable pairs; `HashPair` is
        // `repr(C)` {h1, h2}, exactly what the interleaving store writes.
        unsafe { vst2q_u32(out.cast::<u32>(), uint32x4x2_t(h1, h2)) }
    }
    #[inline(always)]
    unsafe fn load_pairs(p: *const HashPair) -> (Self, Self) {
        // SAFETY: the caller guarantees 4 readable pairs.
        let v = unsafe { vld2q_u32(p.cast::<u32>()) };
        (v.0, v.1)
    }
    #[inline(always)]
    unsafe fn store(self, out: *mut u32) {
        // SAFETY: the caller guarantees 4 writable words.
        unsafe { vst1q_u32(out, self) }
    }
}

/// Hashes `keys` into `out[..keys.len()]` with NEON.
///
/// # Panics
/// If `out` is shorter than `keys`.
pub fn hash<const W: usize>(key: &HashKey, keys: &[[u32; W]], out: &mut [HashPair]) {
    const {
        assert!(
            W >= 1 && W <= crate::MAX_WORDS,
            "key width must be 1..=MAX_WORDS"
        )
    };
    assert!(out.len() >= keys.len(), "hash: output shorter than input");
    // SAFETY: NEON is baseline on aarch64; lengths checked above.
    unsafe { lanes::hash::<uint32x4_t, W>(key, keys, out) }
}

/// Partitioned indices with NEON; see [`crate::index`].
///
/// # Panics
/// If `out` is shorter than `rows * pairs.len()`.
pub fn partitioned(pairs: &[HashPair], layout: Partitioned, out: &mut [u32]) {
    assert!(
        out.len() >= layout.rows() * pairs.len(),
        "partitioned: output too short"
    );
    // SAFETY: NEON is baseline on aarch64; length checked above.
    unsafe { lanes::partitioned::<uint32x4_t>(pairs, layout.rows(), layout.log2_width(), out) }
}

/// Blocked indices with NEON; see [`crate::index`].
///
/// # Panics
/// If `blocks` is shorter than `pairs` or `bits` than `k * pairs.len()`.
pub fn blocked(pairs: &[HashPair], layout: Blocked, blocks: &mut [u32], bits: &mut [u32]) {
    assert!(
        blocks.len() >= pairs.len(),
        "blocked: block output too short"
    );
    assert!(
        bits.len() >= layout.k() * pairs.len(),
        "blocked: bit output too short"
    );
    // SAFETY: NEON is baseline on aarch64; lengths checked above.
    unsafe {
        lanes::blocked::<uint32x4_t>(
            pairs,
            layout.log2_blocks(),
            layout.log2_block_bits(),
            layout.k(),
            blocks,
            bits,
        )
    }
}
