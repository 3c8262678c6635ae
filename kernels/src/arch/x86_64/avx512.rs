//! AVX-512 backend: sixteen 32-bit lanes in a `__m512i` for the index
//! kernels. The hash is in [`super::aes`] (four keys per `VAESENC`); split
//! blocks and SFB bins are 256 bits, so the backend runs their AVX2 code
//! (every CPU with this backend has AVX2: [`Avx512::avx2`]).
//!
//! [`Avx512`] is the proof token (see [`crate::arch`]): a value exists only
//! where the CPU has what the backend needs, so its methods are safe.

use core::arch::x86_64::*;

use super::avx2::Avx2;
use crate::Backend;
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
/// The CPU must support AVX-512F; `out.len() >= rows * pairs.len()`
/// ([`crate::arch`]'s checks).
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

/// The AVX-512 backend: a value is the proof that this CPU has AVX-512F,
/// BW and VL, AVX2, AES-NI and VAES ([`Backend::Avx512`]'s detection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Avx512(());

impl Avx512 {
    /// The backend, if this CPU has its features (detected once, cached).
    #[inline]
    pub fn new() -> Option<Avx512> {
        if Backend::Avx512.is_available() {
            // SAFETY: the detection just found every feature.
            Some(unsafe { Avx512::new_unchecked() })
        } else {
            None
        }
    }

    /// The backend without the check.
    ///
    /// # Safety
    /// `Backend::Avx512.is_available()` must hold.
    #[inline]
    pub const unsafe fn new_unchecked() -> Avx512 {
        Avx512(())
    }

    /// The AVX2 backend, which this CPU has too (split blocks and SFB bins
    /// run on it).
    #[inline]
    pub const fn avx2(self) -> Avx2 {
        // SAFETY: the AVX-512 backend's detection includes AVX2.
        unsafe { Avx2::new_unchecked() }
    }

    /// Partitioned indices; see [`crate::index::partitioned`].
    ///
    /// # Panics
    /// If `out` is shorter than `rows * pairs.len()`.
    #[inline]
    pub fn partitioned(self, pairs: &[HashPair], layout: Partitioned, out: &mut [u32]) {
        super::super::check_partitioned(pairs, layout, out);
        // SAFETY: `self` proves AVX-512F; the length is checked above.
        unsafe { partitioned_avx512(pairs, layout.rows(), layout.log2_width(), out) }
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
        super::super::check_blocked(pairs, layout, blocks, bits);
        // SAFETY: `self` proves AVX-512F; the lengths are checked above.
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
}
