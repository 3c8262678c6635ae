//! AVX-512 backend: sixteen 32-bit lanes in a `__m512i` for the index
//! kernels. The hash is in [`super::aes`] (four keys per `VAESENC`); split
//! blocks and SFB bins are 256 bits, so the backend runs their AVX2 code
//! (every CPU with this backend has AVX2).

use core::arch::x86_64::*;

use crate::hash::HashPair;
use crate::index::{Blocked, Partitioned};
use crate::lanes::{self, Lanes};

impl Lanes for __m512i {
    const LANES: usize = 16;

    #[inline(always)]
    unsafe fn splat(x: u32) -> Self {
        // SAFETY: the caller guarantees AVX-512F (trait contract).
        unsafe { _mm512_set1_epi32(x as i32) }
    }
    #[inline(always)]
    unsafe fn add(self, o: Self) -> Self {
        // SAFETY: the caller guarantees AVX-512F.
        unsafe { _mm512_add_epi32(self, o) }
    }
    #[inline(always)]
    unsafe fn or(self, o: Self) -> Self {
        // SAFETY: the caller guarantees AVX-512F.
        unsafe { _mm512_or_si512(self, o) }
    }
    #[inline(always)]
    unsafe fn mul(self, o: Self) -> Self {
        // SAFETY: the caller guarantees AVX-512F.
        unsafe { _mm512_mullo_epi32(self, o) }
    }
    #[inline(always)]
    unsafe fn shr_var(self, n: u32) -> Self {
        // SAFETY: the caller guarantees AVX-512F. VPSRLD with a count of 32
        // or more yields 0, matching the scalar definition.
        unsafe { _mm512_srl_epi32(self, _mm_cvtsi32_si128(n as i32)) }
    }
    #[inline(always)]
    unsafe fn load_pairs(p: *const HashPair) -> (Self, Self) {
        // SAFETY: the caller guarantees AVX-512F and 16 readable pairs (128
        // bytes): two loads of eight pairs, then the even words (h1) and the
        // odd words (h2) of both, in pair order.
        unsafe {
            let q = p.cast::<__m512i>();
            let a = _mm512_loadu_si512(q);
            let b = _mm512_loadu_si512(q.add(1));
            let evens =
                _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
            let odds = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
            (
                _mm512_permutex2var_epi32(a, evens, b),
                _mm512_permutex2var_epi32(a, odds, b),
            )
        }
    }
    #[inline(always)]
    unsafe fn store(self, out: *mut u32) {
        // SAFETY: the caller guarantees AVX-512F and 16 writable words.
        unsafe { _mm512_storeu_si512(out.cast(), self) }
    }
}

/// # Safety
/// The CPU must support AVX-512F; `out.len() >= rows * pairs.len()`.
#[target_feature(enable = "avx512f")]
unsafe fn partitioned_avx512(pairs: &[HashPair], rows: usize, log2_width: u32, out: &mut [u32]) {
    // SAFETY: AVX-512F is enabled here; the caller checked the lengths.
    unsafe { lanes::partitioned::<__m512i>(pairs, rows, log2_width, out) }
}

/// # Safety
/// The CPU must support AVX-512F; `blocks.len() >= pairs.len()` and
/// `bits.len() >= k * pairs.len()`.
#[target_feature(enable = "avx512f")]
unsafe fn blocked_avx512(
    pairs: &[HashPair],
    log2_blocks: u32,
    log2_block_bits: u32,
    k: usize,
    blocks: &mut [u32],
    bits: &mut [u32],
) {
    // SAFETY: AVX-512F is enabled here; the caller checked the lengths.
    unsafe { lanes::blocked::<__m512i>(pairs, log2_blocks, log2_block_bits, k, blocks, bits) }
}

/// Partitioned indices with AVX-512; see [`crate::index`].
///
/// # Safety
/// The CPU must support AVX-512F.
///
/// # Panics
/// If `out` is shorter than `rows * pairs.len()`.
#[inline]
pub unsafe fn partitioned(pairs: &[HashPair], layout: Partitioned, out: &mut [u32]) {
    assert!(
        out.len() >= layout.rows() * pairs.len(),
        "partitioned: output too short"
    );
    // SAFETY: AVX-512F support is the caller's promise; length checked.
    unsafe { partitioned_avx512(pairs, layout.rows(), layout.log2_width(), out) }
}

/// Blocked indices with AVX-512; see [`crate::index`].
///
/// # Safety
/// The CPU must support AVX-512F.
///
/// # Panics
/// If `blocks` is shorter than `pairs` or `bits` than `k * pairs.len()`.
#[inline]
pub unsafe fn blocked(pairs: &[HashPair], layout: Blocked, blocks: &mut [u32], bits: &mut [u32]) {
    assert!(
        blocks.len() >= pairs.len(),
        "blocked: block output too short"
    );
    assert!(
        bits.len() >= layout.k() * pairs.len(),
        "blocked: bit output too short"
    );
    // SAFETY: AVX-512F support is the caller's promise; lengths checked.
    unsafe {
        blocked_avx512(
            pairs,
            layout.log2_blocks(),
            layout.log2_block_bits(),
            layout.k(),
            blocks,
            bits,
        )
    }
}
