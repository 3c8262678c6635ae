//! The keyed hash (see [`crate::Hasher`]) with x86's AES instructions:
//! AES-NI on 128-bit vectors (one key per instruction), VAES on 256-bit
//! (two keys) and on 512-bit vectors (four keys).
//!
//! A key is one 128-bit lane: its blocks are loaded as they lie in memory,
//! with no transpose, and each round is one instruction for the whole
//! vector. Rounds of one key depend on each other (3-5 cycles each), so
//! eight vectors are kept in flight to fill the AES units; the last 64 bits
//! of each lane's state are the key's [`HashPair`], gathered with one
//! shuffle per two vectors. Tails shorter than a group go one key at a time
//! through AES-NI (the out-of-order core overlaps those independent keys).
//!
//! Each kernel is reached through its proof token ([`AesNi`], [`Vaes256`],
//! [`Vaes512`]; see [`crate::arch`]): a value exists only where the CPU has
//! the instructions, so `hash` on it is safe.

use core::arch::x86_64::*;

use super::avx512::Avx512;
use crate::hash::{HashPair, MAX_BLOCKS};
use crate::seed::{HashKey, ROUND_KEYS};

/// Vectors kept in flight per group.
const INFLIGHT: usize = 8;

/// Block `j` of the key at `p` (`W` words) as 16 bytes, zero-padded past the
/// key's end; never reads past the key.
///
/// # Safety
/// SSE2 (baseline on x86_64); `p` must be valid for reads of `W` words and
/// `4 * j < W`.
#[inline(always)]
unsafe fn block<const W: usize>(p: *const u32, j: usize) -> __m128i {
    let have = W - 4 * j;
    // SAFETY: words `4j .. 4j + min(have, 4)` lie inside the key, which the
    // caller guarantees readable; each branch reads exactly those.
    unsafe {
        let q = p.add(4 * j);
        match have {
            1 => _mm_cvtsi32_si128(q.read_unaligned() as i32),
            2 => _mm_loadl_epi64(q.cast()),
            3 => {
                let mut t = [0u32; 4];
                core::ptr::copy_nonoverlapping(q, t.as_mut_ptr(), 3);
                _mm_loadu_si128(t.as_ptr().cast())
            }
            _ => _mm_loadu_si128(q.cast()),
        }
    }
}

/// The initial state for width `W` in slot 0 (round key 0 with `W` xored
/// into its first word, as [`HashKey::initial_state`]), then the round keys;
/// loaded straight from the key, with no call and no copy (this runs once
/// per batch, and a 64-key batch takes only about 100 cycles).
///
/// # Safety
/// SSE2 (baseline on x86_64).
#[inline(always)]
unsafe fn round_keys<const W: usize>(key: &HashKey) -> [__m128i; ROUND_KEYS] {
    // SAFETY: each round key is 16 readable bytes (unaligned load). A loop,
    // not `array::map`: a closure would not inherit the caller's features.
    unsafe {
        let mut v = [_mm_setzero_si128(); ROUND_KEYS];
        for (x, r) in v.iter_mut().zip(&key.rk) {
            *x = _mm_loadu_si128(r.as_ptr().cast());
        }
        v[0] = _mm_xor_si128(v[0], _mm_cvtsi32_si128(W as i32));
        v
    }
}

/// Hashes the key at `p` with AES-NI and stores its pair at `o`.
///
/// # Safety
/// AES-NI must be enabled in the caller; `p` valid for reads of `W` words,
/// `o` for writes of one pair.
#[inline(always)]
unsafe fn one<const W: usize>(rk: &[__m128i; ROUND_KEYS], p: *const u32, o: *mut HashPair) {
    // SAFETY: the caller's promises; `block` reads only the key.
    unsafe {
        let mut s = rk[0];
        for j in 0..W.div_ceil(4) {
            s = _mm_aesenc_si128(_mm_xor_si128(s, block::<W>(p, j)), rk[1 + j]);
        }
        for k in &rk[1 + MAX_BLOCKS..] {
            s = _mm_aesenc_si128(s, *k);
        }
        // The low 64 bits are word 0 (h1) then word 1 (h2): `HashPair`'s
        // `repr(C)` layout.
        _mm_storel_epi64(o.cast(), s);
    }
}

/// Hashes `keys[from..]` one key at a time.
///
/// # Safety
/// AES-NI must be enabled in the caller; `out.len() >= keys.len()`.
#[inline(always)]
unsafe fn tail<const W: usize>(
    rk: &[__m128i; ROUND_KEYS],
    keys: &[[u32; W]],
    out: &mut [HashPair],
    from: usize,
) {
    for i in from..keys.len() {
        // SAFETY: `i < keys.len() <= out.len()`.
        unsafe { one::<W>(rk, keys.as_ptr().add(i).cast(), out.as_mut_ptr().add(i)) }
    }
}

/// The AES-NI kernel.
///
/// # Safety
/// The CPU must support AES-NI; `out.len() >= keys.len()`.
#[target_feature(enable = "aes")]
unsafe fn aesni_body<const W: usize>(key: &HashKey, keys: &[[u32; W]], out: &mut [HashPair]) {
    // SAFETY: AES-NI is enabled here; the caller checked the lengths, so
    // every key read below is inside `keys` and every pair inside `out`.
    unsafe {
        let rk = round_keys::<W>(key);
        let (kp, op) = (keys.as_ptr().cast::<u32>(), out.as_mut_ptr());
        let n = keys.len();
        let mut i = 0;
        while i + INFLIGHT <= n {
            let mut s = [rk[0]; INFLIGHT];
            for j in 0..W.div_ceil(4) {
                for (l, x) in s.iter_mut().enumerate() {
                    let b = block::<W>(kp.add((i + l) * W), j);
                    *x = _mm_aesenc_si128(_mm_xor_si128(*x, b), rk[1 + j]);
                }
            }
            for k in &rk[1 + MAX_BLOCKS..] {
                for x in &mut s {
                    *x = _mm_aesenc_si128(*x, *k);
                }
            }
            for (l, x) in s.iter().enumerate() {
                _mm_storel_epi64(op.add(i + l).cast(), *x);
            }
            i += INFLIGHT;
        }
        tail(&rk, keys, out, i);
    }
}

/// The VAES 256-bit kernel.
///
/// # Safety
/// The CPU must support AVX2, AES-NI and VAES; `out.len() >= keys.len()`.
#[target_feature(enable = "avx2,aes,vaes")]
unsafe fn vaes256_body<const W: usize>(key: &HashKey, keys: &[[u32; W]], out: &mut [HashPair]) {
    const KEYS: usize = 2 * INFLIGHT;
    // SAFETY: AVX2, AES-NI and VAES are enabled here; the caller checked
    // the lengths: a group reads keys `i .. i + KEYS <= n` and writes as
    // many pairs.
    unsafe {
        let rk = round_keys::<W>(key);
        let mut wide = [_mm256_setzero_si256(); ROUND_KEYS];
        for (w, k) in wide.iter_mut().zip(&rk) {
            *w = _mm256_broadcastsi128_si256(*k);
        }
        let (kp, op) = (keys.as_ptr().cast::<u32>(), out.as_mut_ptr());
        let n = keys.len();
        let mut i = 0;
        while i + KEYS <= n {
            let mut s = [wide[0]; INFLIGHT];
            for j in 0..W.div_ceil(4) {
                for (l, x) in s.iter_mut().enumerate() {
                    let a = kp.add((i + 2 * l) * W);
                    // Keys 2l and 2l + 1: one load when they are one
                    // block each and adjacent.
                    let b = if W == 4 {
                        _mm256_loadu_si256(a.cast())
                    } else {
                        _mm256_set_m128i(block::<W>(a.add(W), j), block::<W>(a, j))
                    };
                    *x = _mm256_aesenc_epi128(_mm256_xor_si256(*x, b), wide[1 + j]);
                }
            }
            for k in &wide[1 + MAX_BLOCKS..] {
                for x in &mut s {
                    *x = _mm256_aesenc_epi128(*x, *k);
                }
            }
            for l in (0..INFLIGHT).step_by(2) {
                // Low halves of keys 2l, 2l+2 | 2l+1, 2l+3, then in order.
                let u = _mm256_unpacklo_epi64(s[l], s[l + 1]);
                let u = _mm256_permute4x64_epi64::<0b11_01_10_00>(u);
                _mm256_storeu_si256(op.add(i + 2 * l).cast(), u);
            }
            i += KEYS;
        }
        tail(&rk, keys, out, i);
    }
}

/// The VAES 512-bit kernel.
///
/// # Safety
/// The CPU must support AVX-512F/BW/VL, AVX2, AES-NI and VAES;
/// `out.len() >= keys.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,aes,vaes")]
unsafe fn vaes512_body<const W: usize>(key: &HashKey, keys: &[[u32; W]], out: &mut [HashPair]) {
    const KEYS: usize = 4 * INFLIGHT;
    // SAFETY: AVX-512F/BW/VL, AVX2, AES-NI and VAES are enabled here; the
    // caller checked the lengths: a group reads keys `i .. i + KEYS <= n`
    // (or `i .. i + 4`) and writes as many pairs.
    unsafe {
        let rk = round_keys::<W>(key);
        let mut wide = [_mm512_setzero_si512(); ROUND_KEYS];
        for (w, k) in wide.iter_mut().zip(&rk) {
            *w = _mm512_broadcast_i32x4(*k);
        }
        let (kp, op) = (keys.as_ptr().cast::<u32>(), out.as_mut_ptr());
        let n = keys.len();
        // The low 64 bits of each 128-bit lane of two vectors, in order.
        let evens = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14);
        let mut i = 0;
        while i + KEYS <= n {
            let mut s = [wide[0]; INFLIGHT];
            for j in 0..W.div_ceil(4) {
                for (l, x) in s.iter_mut().enumerate() {
                    let b = load4::<W>(kp.add((i + 4 * l) * W), j);
                    *x = _mm512_aesenc_epi128(_mm512_xor_si512(*x, b), wide[1 + j]);
                }
            }
            for k in &wide[1 + MAX_BLOCKS..] {
                for x in &mut s {
                    *x = _mm512_aesenc_epi128(*x, *k);
                }
            }
            for l in (0..INFLIGHT).step_by(2) {
                let u = _mm512_permutex2var_epi64(s[l], evens, s[l + 1]);
                _mm512_storeu_si512(op.add(i + 4 * l).cast(), u);
            }
            i += KEYS;
        }
        while i + 4 <= n {
            let mut s = wide[0];
            for j in 0..W.div_ceil(4) {
                let b = load4::<W>(kp.add(i * W), j);
                s = _mm512_aesenc_epi128(_mm512_xor_si512(s, b), wide[1 + j]);
            }
            for k in &wide[1 + MAX_BLOCKS..] {
                s = _mm512_aesenc_epi128(s, *k);
            }
            let u = _mm512_permutexvar_epi64(evens, s);
            _mm256_storeu_si256(op.add(i).cast(), _mm512_castsi512_si256(u));
            i += 4;
        }
        tail(&rk, keys, out, i);
    }
}

/// Block `j` of the four keys at `p`, one per 128-bit lane.
///
/// # Safety
/// AVX-512F must be enabled in the caller; `p` valid for reads of four keys
/// of `W` words; `4 * j < W`.
#[inline(always)]
unsafe fn load4<const W: usize>(p: *const u32, j: usize) -> __m512i {
    // SAFETY: the caller's promises; with `W == 4` the four keys are the 64
    // bytes at `p`.
    unsafe {
        if W == 4 {
            _mm512_loadu_si512(p.cast())
        } else {
            let lo = _mm256_set_m128i(block::<W>(p.add(W), j), block::<W>(p, j));
            let hi = _mm256_set_m128i(block::<W>(p.add(3 * W), j), block::<W>(p.add(2 * W), j));
            _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
        }
    }
}

/// The hash with AES-NI on 128-bit vectors: a value is the proof that this
/// CPU has AES-NI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AesNi(());

impl AesNi {
    /// The kernel, if this CPU has AES-NI.
    #[inline]
    pub fn new() -> Option<AesNi> {
        if std::arch::is_x86_feature_detected!("aes") {
            // SAFETY: the detection just found the features.
            Some(unsafe { AesNi::new_unchecked() })
        } else {
            None
        }
    }

    /// The kernel without the check.
    ///
    /// # Safety
    /// The CPU must support AES-NI (`is_x86_feature_detected!("aes")`).
    #[inline]
    pub const unsafe fn new_unchecked() -> AesNi {
        AesNi(())
    }

    /// Hashes `keys` into `out[..keys.len()]`.
    ///
    /// # Panics
    /// If `out` is shorter than `keys`, or `W` is 0 or above
    /// [`MAX_WORDS`](crate::MAX_WORDS) (at compile time).
    #[inline]
    pub fn hash<const W: usize>(self, key: &HashKey, keys: &[[u32; W]], out: &mut [HashPair]) {
        super::super::check_hash::<W>(keys.len(), out.len());
        // SAFETY: `self` proves the features; the lengths are checked above.
        unsafe { aesni_body(key, keys, out) }
    }
}

/// The hash with VAES on 256-bit vectors: a value is the proof that this
/// CPU has AVX2, AES-NI and VAES.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vaes256(());

impl Vaes256 {
    /// The AES-NI kernel, which every CPU with this one's features runs
    /// (VAES needs AES-NI, checked with it).
    #[inline]
    pub fn aesni(self) -> AesNi {
        // SAFETY: `self` proves AES-NI (its constructor checked it).
        unsafe { AesNi::new_unchecked() }
    }

    /// The kernel, if this CPU has AVX2, AES-NI and VAES.
    #[inline]
    pub fn new() -> Option<Vaes256> {
        if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("vaes")
        {
            // SAFETY: the detection just found the features.
            Some(unsafe { Vaes256::new_unchecked() })
        } else {
            None
        }
    }

    /// The kernel without the check.
    ///
    /// # Safety
    /// The CPU must support AVX2, AES-NI and VAES.
    #[inline]
    pub const unsafe fn new_unchecked() -> Vaes256 {
        Vaes256(())
    }

    /// Hashes `keys` into `out[..keys.len()]`.
    ///
    /// # Panics
    /// If `out` is shorter than `keys`, or `W` is 0 or above
    /// [`MAX_WORDS`](crate::MAX_WORDS) (at compile time).
    #[inline]
    pub fn hash<const W: usize>(self, key: &HashKey, keys: &[[u32; W]], out: &mut [HashPair]) {
        super::super::check_hash::<W>(keys.len(), out.len());
        // SAFETY: `self` proves the features; the lengths are checked above.
        unsafe { vaes256_body(key, keys, out) }
    }
}

/// The hash with VAES on 512-bit vectors: a value is the proof that this
/// CPU has the AVX-512 backend's features (AVX-512F/BW/VL, AVX2, AES-NI,
/// VAES).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vaes512(());

impl Vaes512 {
    /// The AES-NI kernel, which every CPU with this one's features runs
    /// (VAES needs AES-NI, checked with it).
    #[inline]
    pub fn aesni(self) -> AesNi {
        // SAFETY: `self` proves AES-NI (its constructor checked it).
        unsafe { AesNi::new_unchecked() }
    }

    /// The kernel, if this CPU has the AVX-512 backend's features.
    #[inline]
    pub fn new() -> Option<Vaes512> {
        if Avx512::new().is_some() {
            // SAFETY: the detection just found the features.
            Some(unsafe { Vaes512::new_unchecked() })
        } else {
            None
        }
    }

    /// The kernel without the check.
    ///
    /// # Safety
    /// `Backend::Avx512.is_available()` must hold.
    #[inline]
    pub const unsafe fn new_unchecked() -> Vaes512 {
        Vaes512(())
    }

    /// Hashes `keys` into `out[..keys.len()]`.
    ///
    /// # Panics
    /// If `out` is shorter than `keys`, or `W` is 0 or above
    /// [`MAX_WORDS`](crate::MAX_WORDS) (at compile time).
    #[inline]
    pub fn hash<const W: usize>(self, key: &HashKey, keys: &[[u32; W]], out: &mut [HashPair]) {
        super::super::check_hash::<W>(keys.len(), out.len());
        // SAFETY: `self` proves the features; the lengths are checked above.
        unsafe { vaes512_body(key, keys, out) }
    }
}

impl From<Avx512> for Vaes512 {
    /// The AVX-512 backend's detection covers the kernel's features.
    #[inline]
    fn from(_: Avx512) -> Vaes512 {
        // SAFETY: an `Avx512` proves every feature the kernel needs.
        unsafe { Vaes512::new_unchecked() }
    }
}
