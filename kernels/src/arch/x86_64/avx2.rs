//! AVX2 backend: eight 32-bit lanes in a `__m256i` (index kernels, split-block
//! Bloom filters, SFB bins; the hash is in [`super::aes`]).
//!
//! The lane operations are `#[inline(always)]` and carry no target feature;
//! the private entry points are thin `#[target_feature(enable = "avx2")]`
//! trampolines that instantiate the generic bodies, so the whole loop is
//! compiled with AVX2 enabled. They are reached through [`Avx2`], a proof
//! token: a value exists only where the CPU has AVX2, so its methods are
//! safe.

use core::arch::x86_64::*;

use crate::Backend;
use crate::hash::HashPair;
use crate::index::{Blocked, Partitioned, SplitBlock, SplitBlockWords};
use crate::lanes::{self, Block, Lanes, SPLIT_SALTS, SplitLanes};

impl Lanes for __m256i {
    const LANES: usize = 8;

    #[inline(always)]
    unsafe fn splat(x: u32) -> Self {
        // SAFETY: the caller guarantees AVX2 (trait contract).
        unsafe { _mm256_set1_epi32(x as i32) }
    }
    #[inline(always)]
    unsafe fn add(self, o: Self) -> Self {
        // SAFETY: the caller guarantees AVX2.
        unsafe { _mm256_add_epi32(self, o) }
    }
    #[inline(always)]
    unsafe fn or(self, o: Self) -> Self {
        // SAFETY: the caller guarantees AVX2.
        unsafe { _mm256_or_si256(self, o) }
    }
    #[inline(always)]
    unsafe fn mul(self, o: Self) -> Self {
        // SAFETY: the caller guarantees AVX2.
        unsafe { _mm256_mullo_epi32(self, o) }
    }
    #[inline(always)]
    unsafe fn shr_var(self, n: u32) -> Self {
        // SAFETY: the caller guarantees AVX2. VPSRLVD with a count of 32 or
        // more yields 0, matching the scalar definition. The per-lane form:
        // one micro-op on Intel cores, where the shift by an xmm count is two
        // (on Zen 4 both are one); the count's broadcast is hoisted.
        unsafe { _mm256_srlv_epi32(self, _mm256_set1_epi32(n as i32)) }
    }
    #[inline(always)]
    unsafe fn load_pairs(p: *const HashPair) -> (Self, Self) {
        // SAFETY: the caller guarantees AVX2 and 8 readable pairs (64 bytes).
        unsafe {
            let q = p.cast::<__m256i>();
            let evens_odds = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
            // a = h1 of pairs 0..4 | h2 of pairs 0..4, b likewise for 4..8.
            let a = _mm256_permutevar8x32_epi32(_mm256_loadu_si256(q), evens_odds);
            let b = _mm256_permutevar8x32_epi32(_mm256_loadu_si256(q.add(1)), evens_odds);
            (
                _mm256_permute2x128_si256::<0x20>(a, b),
                _mm256_permute2x128_si256::<0x31>(a, b),
            )
        }
    }
    #[inline(always)]
    unsafe fn store(self, out: *mut u32) {
        // SAFETY: the caller guarantees AVX2 and 8 writable words.
        unsafe { _mm256_storeu_si256(out.cast(), self) }
    }
}

/// # Safety
/// The CPU must support AVX2; the output lengths are checked
/// ([`crate::arch`]'s checks).
#[target_feature(enable = "avx2")]
unsafe fn partitioned_avx2(pairs: &[HashPair], rows: usize, log2_width: u32, out: &mut [u32]) {
    // SAFETY: AVX2 is enabled here; the caller checked the lengths.
    unsafe { lanes::partitioned::<__m256i>(pairs, rows, log2_width, out) }
}

/// # Safety
/// The CPU must support AVX2; the output lengths are checked
/// ([`crate::arch`]'s checks).
#[target_feature(enable = "avx2")]
unsafe fn blocked_avx2(
    pairs: &[HashPair],
    log2_blocks: u32,
    log2_block_bits: u32,
    k: usize,
    blocks: &mut [u32],
    bits: &mut [u32],
) {
    // SAFETY: AVX2 is enabled here; the caller checked the lengths.
    unsafe { lanes::blocked::<__m256i>(pairs, log2_blocks, log2_block_bits, k, blocks, bits) }
}

// One key's eight word masks in one register: broadcast h2, multiply by the
// salts, keep the top five bits, shift a one by them; a query is one load
// and VPTEST (CF = 1 iff every mask bit is set in the block).
impl SplitLanes for __m256i {
    type Salts = __m256i;
    type Mask = __m256i;

    #[inline(always)]
    unsafe fn split_salts() -> __m256i {
        // SAFETY: the caller guarantees AVX2; `SPLIT_SALTS` is 32 readable
        // bytes (unaligned load).
        unsafe { _mm256_loadu_si256(SPLIT_SALTS.as_ptr().cast()) }
    }
    #[inline(always)]
    unsafe fn split_mask(salts: __m256i, h2: u32) -> __m256i {
        // SAFETY: the caller guarantees AVX2; no memory is touched.
        unsafe {
            let x = _mm256_mullo_epi32(_mm256_set1_epi32(h2 as i32), salts);
            _mm256_sllv_epi32(_mm256_set1_epi32(1), _mm256_srli_epi32::<27>(x))
        }
    }
    #[inline(always)]
    unsafe fn split_test(block: *const Block, mask: __m256i) -> bool {
        // SAFETY: the caller guarantees AVX2 and a readable block of 32
        // bytes (unaligned load).
        unsafe { _mm256_testc_si256(_mm256_loadu_si256(block.cast()), mask) != 0 }
    }
    #[inline(always)]
    unsafe fn split_set(block: *mut Block, mask: __m256i) {
        // SAFETY: the caller guarantees AVX2 and a readable, writable block
        // of 32 bytes (unaligned accesses).
        unsafe {
            let p = block.cast::<__m256i>();
            _mm256_storeu_si256(p, _mm256_or_si256(_mm256_loadu_si256(p), mask));
        }
    }
}

/// # Safety
/// The CPU must support AVX2; the output lengths are checked
/// ([`crate::arch`]'s checks).
#[target_feature(enable = "avx2")]
unsafe fn split_block_contains_avx2(
    pairs: &[HashPair],
    log2_blocks: u32,
    blocks: &[Block],
    out: &mut [bool],
) {
    // SAFETY: AVX2 is enabled here; the caller checked the lengths.
    unsafe { lanes::split_block_contains::<__m256i>(pairs, log2_blocks, blocks, out) }
}

/// # Safety
/// The CPU must support AVX2; the block count is checked
/// ([`crate::arch`]'s checks).
#[target_feature(enable = "avx2")]
unsafe fn split_block_insert_avx2(pairs: &[HashPair], log2_blocks: u32, blocks: &mut [Block]) {
    // SAFETY: AVX2 is enabled here; the caller checked the length.
    unsafe { lanes::split_block_insert::<__m256i>(pairs, log2_blocks, blocks) }
}

/// The body of [`Avx2::sfb_update_raise`]: the eight bin words in one vector.
///
/// # Safety
/// AVX2 must be enabled in the caller.
#[inline(always)]
unsafe fn sfb_update_raise_body(
    bins: &mut [u32; crate::sfb::SLOTS],
    offs: u64,
    s: &crate::sfb::Steps,
) -> (u16, u16) {
    let i: [usize; 8] = core::array::from_fn(|r| crate::sfb::slot(offs, r));
    // SAFETY: AVX2 is enabled (the caller's promise); the intrinsics below
    // touch registers and the three 32-byte arrays of `s.lanes()` (unaligned
    // loads), and every slot is a byte, below `SLOTS`.
    unsafe {
        let w = _mm256_setr_epi32(
            bins[i[0]] as i32,
            bins[i[1]] as i32,
            bins[i[2]] as i32,
            bins[i[3]] as i32,
            bins[i[4]] as i32,
            bins[i[5]] as i32,
            bins[i[6]] as i32,
            bins[i[7]] as i32,
        );
        // The counts as 32-bit lanes (below 2^16: signed compares are exact).
        // One load per vector: `lanes` holds each word eight times.
        let [target_m1, down, up] = s
            .lanes()
            .map(|l| _mm256_loadu_si256(l.as_ptr().cast::<__m256i>()));
        let q = _mm256_blend_epi16::<0b1010_1010>(w, _mm256_setzero_si256());
        let empty = _mm256_cmpeq_epi32(q, _mm256_setzero_si256());
        let full = _mm256_cmpgt_epi32(q, target_m1);
        // Probability steps in the high halves only, saturating as u16.
        let down = _mm256_and_si256(empty, down);
        let up = _mm256_and_si256(full, up);
        let w = _mm256_adds_epu16(_mm256_subs_epu16(w, down), up);
        // Minimum count (low halves) and probability (high halves) at once.
        let lo = _mm256_castsi256_si128(w);
        let hi = _mm256_extracti128_si256::<1>(w);
        let m = _mm_min_epu16(lo, hi);
        let m = _mm_min_epu16(m, _mm_shuffle_epi32::<0b1110>(m));
        let m = _mm_min_epu16(m, _mm_shuffle_epi32::<0b0001>(m));
        let m = _mm_cvtsi128_si32(m) as u32;
        // Raise the counts and write the words back.
        let w = _mm256_add_epi32(w, _mm256_set1_epi32(1));
        let lo = _mm256_castsi256_si128(w);
        let hi = _mm256_extracti128_si256::<1>(w);
        bins[i[0]] = _mm_cvtsi128_si32(lo) as u32;
        bins[i[1]] = _mm_extract_epi32::<1>(lo) as u32;
        bins[i[2]] = _mm_extract_epi32::<2>(lo) as u32;
        bins[i[3]] = _mm_extract_epi32::<3>(lo) as u32;
        bins[i[4]] = _mm_cvtsi128_si32(hi) as u32;
        bins[i[5]] = _mm_extract_epi32::<1>(hi) as u32;
        bins[i[6]] = _mm_extract_epi32::<2>(hi) as u32;
        bins[i[7]] = _mm_extract_epi32::<3>(hi) as u32;
        (m as u16, (m >> 16) as u16)
    }
}

/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn sfb_update_raise_avx2(
    bins: &mut [u32; crate::sfb::SLOTS],
    offs: u64,
    s: &crate::sfb::Steps,
) -> (u16, u16) {
    // SAFETY: AVX2 is enabled here.
    unsafe { sfb_update_raise_body(bins, offs, s) }
}

/// Runs `f` with AVX2 enabled (see [`Avx2::run`]).
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn with_avx2<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// The AVX2 backend: a value is the proof that this CPU has AVX2 (see
/// [`crate::arch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Avx2(());

impl Avx2 {
    /// The backend, if this CPU has AVX2 (detected once and cached by the
    /// standard library).
    #[inline]
    pub fn new() -> Option<Avx2> {
        if Backend::Avx2.is_available() {
            // SAFETY: the detection just found AVX2.
            Some(unsafe { Avx2::new_unchecked() })
        } else {
            None
        }
    }

    /// The backend without the check.
    ///
    /// # Safety
    /// The CPU must support AVX2 (for instance: `Backend::Avx2` or
    /// `Backend::Avx512` passed [`Backend::require`]).
    #[inline]
    pub const unsafe fn new_unchecked() -> Avx2 {
        Avx2(())
    }

    /// Partitioned indices; see [`crate::index::partitioned`].
    ///
    /// # Panics
    /// If `out` is shorter than `rows * pairs.len()`.
    #[inline]
    pub fn partitioned(self, pairs: &[HashPair], layout: Partitioned, out: &mut [u32]) {
        super::super::check_partitioned(pairs, layout, out);
        // SAFETY: `self` proves AVX2; the length is checked above.
        unsafe { partitioned_avx2(pairs, layout.rows(), layout.log2_width(), out) }
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
        // SAFETY: `self` proves AVX2; the lengths are checked above.
        unsafe {
            blocked_avx2(
                pairs,
                layout.log2_blocks(),
                layout.log2_block_bits(),
                layout.k(),
                blocks,
                bits,
            )
        }
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
        super::super::check_split_block(
            "split_block_contains",
            layout,
            blocks,
            Some((pairs.len(), out.len())),
        );
        // SAFETY: `self` proves AVX2; the lengths are checked above.
        unsafe { split_block_contains_avx2(pairs, layout.log2_blocks(), blocks, out) }
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
        super::super::check_split_block("split_block_insert", layout, blocks, None);
        // SAFETY: `self` proves AVX2; the length is checked above.
        unsafe { split_block_insert_avx2(pairs, layout.log2_blocks(), blocks) }
    }

    /// SFB's arrival step; see [`crate::sfb::update_raise_scalar`].
    #[inline]
    pub fn sfb_update_raise(
        self,
        bins: &mut [u32; crate::sfb::SLOTS],
        offs: u64,
        s: &crate::sfb::Steps,
    ) -> (u16, u16) {
        // SAFETY: `self` proves AVX2.
        unsafe { sfb_update_raise_avx2(bins, offs, s) }
    }

    /// Runs `f` compiled with AVX2 enabled, so that AVX2 code called in it
    /// (such as [`Avx2::sfb_update_raise`]) can be inlined into it.
    #[inline]
    pub fn run<R>(self, f: impl FnOnce() -> R) -> R {
        // SAFETY: `self` proves AVX2.
        unsafe { with_avx2(f) }
    }
}
