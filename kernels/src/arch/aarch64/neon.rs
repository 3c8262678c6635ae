//! NEON backend: four 32-bit lanes in a `uint32x4_t` for the index and
//! split-block kernels, and the ARMv8 AES instructions for the hash.
//!
//! NEON is part of the aarch64 baseline, so the backend is chosen at compile
//! time: [`Neon::new`] always answers, and the token's methods are safe.
//! The AES extension is optional (most aarch64 server and desktop cores
//! have it, the Raspberry Pi 4's Cortex-A72 does not) and detected at run
//! time ([`NeonAes::new`]): without it the hash runs the reference code.

use core::arch::aarch64::*;

use crate::hash::HashPair;
use crate::hash::MAX_BLOCKS;
use crate::index::{Blocked, Partitioned, SplitBlock, SplitBlockWords};
use crate::lanes::{self, Block, Lanes, SPLIT_SALTS, SplitLanes};
use crate::seed::{HashKey, ROUND_KEYS};

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
    unsafe fn shr_var(self, n: u32) -> Self {
        // SAFETY: NEON is baseline. USHL by a negative amount shifts right;
        // by -32 it yields 0, matching the scalar definition.
        unsafe { vshlq_u32(self, vdupq_n_s32(-(n as i32))) }
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

/// Block `j` of a key of `W` words as 16 bytes, zero-padded past its end.
#[inline(always)]
fn block<const W: usize>(key: &[u32; W], j: usize) -> [u32; 4] {
    let mut b = [0u32; 4];
    let have = (W - 4 * j).min(4);
    b[..have].copy_from_slice(&key[4 * j..4 * j + have]);
    b
}

/// Keys hashed side by side (independent rounds in flight).
const INFLIGHT: usize = 8;

/// One AES round as x86's `AESENC` computes it: AESE xors its key operand
/// first, so `AESMC(AESE(s, b)) ^ k` is `AESENC(s ^ b, k)`. A macro, not an
/// `#[inline(always)]` function: the intrinsics inline only into code
/// compiled with the AES feature, which the caller has.
macro_rules! round {
    ($s:expr, $b:expr, $k:expr) => {
        veorq_u8(vaesmcq_u8(vaeseq_u8($s, $b)), $k)
    };
}

/// The ARMv8 AES kernel.
///
/// # Safety
/// The CPU must have the AES extension; `out.len() >= keys.len()`.
#[target_feature(enable = "neon,aes")]
unsafe fn hash_aes_body<const W: usize>(key: &HashKey, keys: &[[u32; W]], out: &mut [HashPair]) {
    // SAFETY: NEON and AES are enabled here (the caller's promise); every
    // load reads a local 16-byte array and every store one 8-byte pair of
    // `out` (the caller checked `out.len() >= keys.len()`).
    unsafe {
        let mut rk = [vdupq_n_u8(0); ROUND_KEYS];
        let mut init = key.rk;
        init[0] = key.initial_state(W);
        for (v, r) in rk.iter_mut().zip(&init) {
            *v = vld1q_u8(r.as_ptr());
        }
        let zero = vdupq_n_u8(0);
        let mut chunks = keys.chunks_exact(INFLIGHT);
        let mut at = 0;
        for group in &mut chunks {
            let mut s = [rk[0]; INFLIGHT];
            for j in 0..W.div_ceil(4) {
                for (x, k) in s.iter_mut().zip(group) {
                    let b = vld1q_u8(block(k, j).as_ptr().cast());
                    *x = round!(*x, b, rk[1 + j]);
                }
            }
            for k in &rk[1 + MAX_BLOCKS..] {
                for x in &mut s {
                    *x = round!(*x, zero, *k);
                }
            }
            for (l, x) in s.iter().enumerate() {
                vst1_u8(out.as_mut_ptr().add(at + l).cast(), vget_low_u8(*x));
            }
            at += INFLIGHT;
        }
        for (l, k) in chunks.remainder().iter().enumerate() {
            let mut x = rk[0];
            for j in 0..W.div_ceil(4) {
                x = round!(x, vld1q_u8(block(k, j).as_ptr().cast()), rk[1 + j]);
            }
            for r in &rk[1 + MAX_BLOCKS..] {
                x = round!(x, zero, *r);
            }
            vst1_u8(out.as_mut_ptr().add(at + l).cast(), vget_low_u8(x));
        }
    }
}

/// Partitioned indices with NEON; see [`crate::index`].
///
/// # Panics
/// If `out` is shorter than `rows * pairs.len()`.
fn partitioned(pairs: &[HashPair], layout: Partitioned, out: &mut [u32]) {
    super::super::check_partitioned(pairs, layout, out);
    // SAFETY: NEON is baseline on aarch64; length checked above.
    unsafe { lanes::partitioned::<uint32x4_t>(pairs, layout.rows(), layout.log2_width(), out) }
}

/// Blocked indices with NEON; see [`crate::index`].
///
/// # Panics
/// If `blocks` is shorter than `pairs` or `bits` than `k * pairs.len()`.
fn blocked(pairs: &[HashPair], layout: Blocked, blocks: &mut [u32], bits: &mut [u32]) {
    super::super::check_blocked(pairs, layout, blocks, bits);
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

// A key's eight word masks in two registers (words 0..4, 4..8). A query
// ORs `mask & !block` of both halves and asks whether any lane is non-zero.
#[allow(unused_unsafe)]
impl SplitLanes for uint32x4_t {
    type Salts = [uint32x4_t; 2];
    type Mask = [uint32x4_t; 2];

    #[inline(always)]
    unsafe fn split_salts() -> [uint32x4_t; 2] {
        // SAFETY: NEON is baseline; `SPLIT_SALTS` holds 8 readable words.
        unsafe {
            [
                vld1q_u32(SPLIT_SALTS.as_ptr()),
                vld1q_u32(SPLIT_SALTS.as_ptr().add(4)),
            ]
        }
    }
    #[inline(always)]
    unsafe fn split_mask(salts: [uint32x4_t; 2], h2: u32) -> [uint32x4_t; 2] {
        // SAFETY: NEON is baseline on aarch64; no memory is touched. The
        // shift counts are 0..32, so reading them as signed (USHL shifts
        // left for positive counts) is exact.
        unsafe {
            let h = vdupq_n_u32(h2);
            let one = vdupq_n_u32(1);
            let lo = vshrq_n_u32::<27>(vmulq_u32(h, salts[0]));
            let hi = vshrq_n_u32::<27>(vmulq_u32(h, salts[1]));
            [
                vshlq_u32(one, vreinterpretq_s32_u32(lo)),
                vshlq_u32(one, vreinterpretq_s32_u32(hi)),
            ]
        }
    }
    #[inline(always)]
    unsafe fn split_test(block: *const Block, mask: [uint32x4_t; 2]) -> bool {
        // SAFETY: the caller guarantees a readable block of 8 words.
        unsafe {
            let p = block.cast::<u32>();
            let miss = vorrq_u32(
                vbicq_u32(mask[0], vld1q_u32(p)),
                vbicq_u32(mask[1], vld1q_u32(p.add(4))),
            );
            vmaxvq_u32(miss) == 0
        }
    }
    #[inline(always)]
    unsafe fn split_set(block: *mut Block, mask: [uint32x4_t; 2]) {
        // SAFETY: the caller guarantees a readable, writable block of 8 words.
        unsafe {
            let p = block.cast::<u32>();
            vst1q_u32(p, vorrq_u32(vld1q_u32(p), mask[0]));
            vst1q_u32(p.add(4), vorrq_u32(vld1q_u32(p.add(4)), mask[1]));
        }
    }
}

/// Split-block queries with NEON; see [`crate::index::split_block_contains`].
///
/// # Panics
/// If `blocks.len()` is not `layout.blocks()` or `out` is shorter than
/// `pairs`.
fn split_block_contains(
    pairs: &[HashPair],
    layout: SplitBlock,
    blocks: &[SplitBlockWords],
    out: &mut [bool],
) {
    super::super::check_split_block(
        "split_block_contains",
        layout,
        blocks,
        Some((pairs.len(), out.len())),
    );
    // SAFETY: NEON is baseline on aarch64; lengths checked above.
    unsafe { lanes::split_block_contains::<uint32x4_t>(pairs, layout.log2_blocks(), blocks, out) }
}

/// Split-block inserts with NEON; see [`crate::index::split_block_insert`].
///
/// # Panics
/// If `blocks.len()` is not `layout.blocks()`.
fn split_block_insert(pairs: &[HashPair], layout: SplitBlock, blocks: &mut [SplitBlockWords]) {
    super::super::check_split_block("split_block_insert", layout, blocks, None);
    // SAFETY: NEON is baseline on aarch64; length checked above.
    unsafe { lanes::split_block_insert::<uint32x4_t>(pairs, layout.log2_blocks(), blocks) }
}

/// SFB's arrival step with NEON (two vectors of four bin words); see
/// [`crate::sfb::update_raise_scalar`].
#[allow(unused_unsafe)]
fn sfb_update_raise(
    bins: &mut [u32; crate::sfb::SLOTS],
    offs: u64,
    s: &crate::sfb::Steps,
) -> (u16, u16) {
    let i: [usize; 8] = core::array::from_fn(|r| crate::sfb::slot(offs, r));
    let words: [u32; 8] = core::array::from_fn(|r| bins[i[r]]);
    let mut out = [0u32; 8];
    // SAFETY: NEON is baseline on aarch64; the loads and stores use the
    // two local arrays of eight words.
    let m = unsafe {
        let step = |w: uint32x4_t| -> uint32x4_t {
            let q = vandq_u32(w, vdupq_n_u32(0xFFFF));
            let empty = vceqq_u32(q, vdupq_n_u32(0));
            let [target_m1, down, up] = s.words();
            let full = vcgtq_u32(q, vdupq_n_u32(target_m1));
            let down = vandq_u32(empty, vdupq_n_u32(down));
            let up = vandq_u32(full, vdupq_n_u32(up));
            let w = vqsubq_u16(vreinterpretq_u16_u32(w), vreinterpretq_u16_u32(down));
            vreinterpretq_u32_u16(vqaddq_u16(w, vreinterpretq_u16_u32(up)))
        };
        let a = step(vld1q_u32(words.as_ptr()));
        let b = step(vld1q_u32(words.as_ptr().add(4)));
        // Low halves are counts, high halves probabilities.
        let (a16, b16) = (vreinterpretq_u16_u32(a), vreinterpretq_u16_u32(b));
        let minq = vminvq_u16(vuzp1q_u16(a16, b16));
        let minp = vminvq_u16(vuzp2q_u16(a16, b16));
        let one = vdupq_n_u32(1);
        vst1q_u32(out.as_mut_ptr(), vaddq_u32(a, one));
        vst1q_u32(out.as_mut_ptr().add(4), vaddq_u32(b, one));
        (minq, minp)
    };
    for r in 0..8 {
        bins[i[r]] = out[r];
    }
    m
}

/// The NEON backend. NEON is part of the aarch64 baseline, so every
/// aarch64 CPU has it and a value needs no detection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Neon(());

impl Neon {
    /// The backend (always there on aarch64).
    #[inline]
    pub const fn new() -> Option<Neon> {
        Some(Neon::baseline())
    }

    /// The backend, without an `Option`: NEON is baseline.
    #[inline]
    pub const fn baseline() -> Neon {
        Neon(())
    }

    /// Partitioned indices; see [`crate::index::partitioned`].
    ///
    /// # Panics
    /// If `out` is shorter than `rows * pairs.len()`.
    #[inline]
    pub fn partitioned(self, pairs: &[HashPair], layout: Partitioned, out: &mut [u32]) {
        partitioned(pairs, layout, out)
    }

    /// Blocked indices; see [`crate::index::blocked`].
    ///
    /// # Panics
    /// If `blocks` is shorter than `pairs` or `bits` than `k * pairs.len()`.
    #[inline]
    pub fn blocked(
        self,
        pairs: &[HashPair],
        layout: Blocked,
        blocks: &mut [u32],
        bits: &mut [u32],
    ) {
        blocked(pairs, layout, blocks, bits)
    }

    /// Split-block queries; see [`crate::index::split_block_contains`].
    ///
    /// # Panics
    /// If `blocks.len()` is not `layout.blocks()` or `out` is shorter than
    /// `pairs`.
    #[inline]
    pub fn split_block_contains(
        self,
        pairs: &[HashPair],
        layout: SplitBlock,
        blocks: &[SplitBlockWords],
        out: &mut [bool],
    ) {
        split_block_contains(pairs, layout, blocks, out)
    }

    /// Split-block inserts; see [`crate::index::split_block_insert`].
    ///
    /// # Panics
    /// If `blocks.len()` is not `layout.blocks()`.
    #[inline]
    pub fn split_block_insert(
        self,
        pairs: &[HashPair],
        layout: SplitBlock,
        blocks: &mut [SplitBlockWords],
    ) {
        split_block_insert(pairs, layout, blocks)
    }

    /// SFB's arrival step; see [`crate::sfb::update_raise_scalar`].
    #[inline]
    pub fn sfb_update_raise(
        self,
        bins: &mut [u32; crate::sfb::SLOTS],
        offs: u64,
        s: &crate::sfb::Steps,
    ) -> (u16, u16) {
        sfb_update_raise(bins, offs, s)
    }
}

/// The hash with the ARMv8 AES instructions (see [`crate::Hasher`]; the
/// low 8 bytes of the state are the pair, as `HashPair`'s `repr(C)` layout
/// on a little-endian target): a value is the proof that this CPU has the
/// AES extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeonAes(());

impl NeonAes {
    /// The kernel, if this CPU has the AES extension (detected once, cached
    /// by the standard library).
    #[inline]
    pub fn new() -> Option<NeonAes> {
        if std::arch::is_aarch64_feature_detected!("aes") {
            // SAFETY: the detection just found the AES extension.
            Some(unsafe { NeonAes::new_unchecked() })
        } else {
            None
        }
    }

    /// The kernel without the check.
    ///
    /// # Safety
    /// The CPU must have the AES extension
    /// (`is_aarch64_feature_detected!("aes")`).
    #[inline]
    pub const unsafe fn new_unchecked() -> NeonAes {
        NeonAes(())
    }

    /// Hashes `keys` into `out[..keys.len()]`.
    ///
    /// # Panics
    /// If `out` is shorter than `keys`, or `W` is 0 or above
    /// [`MAX_WORDS`](crate::MAX_WORDS) (at compile time).
    #[inline]
    pub fn hash<const W: usize>(self, key: &HashKey, keys: &[[u32; W]], out: &mut [HashPair]) {
        super::super::check_hash::<W>(keys.len(), out.len());
        // SAFETY: `self` proves the AES extension; the lengths are checked
        // above.
        unsafe { hash_aes_body(key, keys, out) }
    }
}
