//! Stochastic Fair Blue's per-arrival bin kernel for the Linux shape: 8
//! levels of 16 bins.
//!
//! A bin is one `u32` word: the virtual queue length `qlen` in bits 0..16
//! and the marking probability `p_mark` (Q0.16) in bits 16..32. A bin set is
//! `[u32; SLOTS]`: level `r`'s bins at `16 r .. 16 r + 16`; the slots from
//! 128 on are never named by an offset and stay zero, and they make any
//! byte a valid index, so the kernels index without bounds checks.
//!
//! A flow's eight bins travel as an *offset word* ([`offsets`]): byte `r`
//! is the slot of its level-`r` bin. The arrival kernel
//! ([`Kernel::update_raise`]) does SFB's step for all eight at once: each
//! bin's probability goes down by `decrement` if its count is 0 and up by
//! `increment` if its count is at least `target` (both saturating), the
//! minimum count and minimum new probability are returned, and every count
//! is raised by one, as if the packet were enqueued. The caller lowers them
//! again ([`lower`]) if it drops the packet: most packets are enqueued, and
//! folding the raise into the probability write-back saves eight
//! read-modify-writes per packet.
//!
//! Every backend gives bit-identical results; [`update_raise_scalar`] is the
//! reference. Counts are raised and lowered as whole 32-bit words (a count
//! at `u16::MAX` would carry into the probability): the caller keeps every
//! count below `u16::MAX`, which a queue whose limit is below 2^16 does,
//! since a count never exceeds the packets queued. Whole-word accesses also
//! let a load of a bin that was just written be forwarded from the store
//! buffer (a wide load of a bin whose count was written 16 bits wide waits
//! for the store to commit).

use crate::arch;
use crate::{Backend, BackendError};

/// Levels.
pub const LEVELS: usize = 8;
/// log2 of the bins per level.
pub const LOG2_BINS: u32 = 4;
/// Bins per set.
pub const BINS: usize = LEVELS << LOG2_BINS;
/// Words allocated per set: any byte is a valid slot.
pub const SLOTS: usize = 256;

/// Step 2's constants: counts from `target` raise a bin's probability by
/// `increment`, an empty bin lowers it by `decrement`. Also kept as the
/// words the vector kernels broadcast, so that a call loads each with one
/// instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Steps {
    target: u16,
    increment: u16,
    decrement: u16,
    /// `target - 1`, `decrement << 16`, `increment << 16`.
    words: [u32; 3],
    /// Each of `words` repeated once per level: what the vector kernels
    /// load, one instruction per vector.
    lanes: [[u32; LEVELS]; 3],
}

impl Steps {
    /// The steps; a `target` of 0 acts as 1 (an empty bin only decrements,
    /// as the Linux kernel's `else if`).
    pub const fn new(target: u16, increment: u16, decrement: u16) -> Self {
        let target = if target == 0 { 1 } else { target };
        let words = [
            target as u32 - 1,
            (decrement as u32) << 16,
            (increment as u32) << 16,
        ];
        Steps {
            target,
            increment,
            decrement,
            words,
            lanes: [[words[0]; LEVELS], [words[1]; LEVELS], [words[2]; LEVELS]],
        }
    }

    /// Count from which an arrival raises the probability (at least 1).
    pub fn target(&self) -> u16 {
        self.target
    }

    /// Probability increase, Q0.16.
    pub fn increment(&self) -> u16 {
        self.increment
    }

    /// Probability decrease, Q0.16.
    pub fn decrement(&self) -> u16 {
        self.decrement
    }

    /// `target - 1`, `decrement << 16`, `increment << 16`.
    pub fn words(&self) -> [u32; 3] {
        self.words
    }

    /// [`words`](Self::words), each repeated once per level (the AVX2
    /// kernel's operands; NEON broadcasts a word in one instruction).
    #[inline(always)]
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) fn lanes(&self) -> &[[u32; LEVELS]; 3] {
        &self.lanes
    }
}

/// The offset word of bins packed one level per byte (level `r`'s index
/// in the low 4 bits of byte `r` of `packed`; the high bits are ignored):
/// byte `r` becomes `16 r` plus that index.
#[inline(always)]
pub fn offsets(packed: u64) -> u64 {
    (packed & 0x0F0F_0F0F_0F0F_0F0F) | 0x7060_5040_3020_1000
}

/// Level `r`'s slot in an offset word.
#[inline(always)]
pub fn slot(offs: u64, r: usize) -> usize {
    usize::from((offs >> (8 * r)) as u8)
}

/// Raises the eight counts of `offs` by one (a packet was enqueued).
#[inline(always)]
pub fn raise(bins: &mut [u32; SLOTS], offs: u64) {
    for r in 0..LEVELS {
        let w = &mut bins[slot(offs, r)];
        *w = w.wrapping_add(1);
    }
}

/// Lowers the eight counts of `offs` by one (a packet left, or
/// [`Kernel::update_raise`]'s raise is taken back).
#[inline(always)]
pub fn lower(bins: &mut [u32; SLOTS], offs: u64) {
    lower_bytes(bins, &offs.to_le_bytes());
}

/// [`lower`] of an offset word in memory (a queued packet's tag), read
/// as its bytes: each slot is then one byte load rather than a shift and
/// a mask of the word in a register. The slots may come in any order.
#[inline(always)]
pub fn lower_bytes(bins: &mut [u32; SLOTS], offs: &[u8; 8]) {
    for &o in offs {
        let w = &mut bins[usize::from(o)];
        *w = w.wrapping_sub(1);
    }
}

/// One bin's probability update (step 2 of SFB) on its word, count left
/// alone: returns its count and new probability. The rule every kernel
/// here applies, and the general shapes' path in the dataplane too.
#[inline(always)]
pub fn update_word(w: &mut u32, s: &Steps) -> (u16, u16) {
    let q = *w as u16;
    let down = if q == 0 { s.decrement } else { 0 };
    let up = if q >= s.target { s.increment } else { 0 };
    let p = ((*w >> 16) as u16).saturating_sub(down).saturating_add(up);
    *w = u32::from(p) << 16 | u32::from(q);
    (q, p)
}

/// The reference arrival step (see the module docs): returns the minimum
/// count (before the raise) and the minimum new probability.
pub fn update_raise_scalar(bins: &mut [u32; SLOTS], offs: u64, s: &Steps) -> (u16, u16) {
    let (mut minq, mut minp) = (u16::MAX, u16::MAX);
    for r in 0..LEVELS {
        let i = slot(offs, r);
        let (q, p) = update_word(&mut bins[i], s);
        bins[i] = bins[i].wrapping_add(1);
        minq = minq.min(q);
        minp = minp.min(p);
    }
    (minq, minp)
}

/// The arrival kernel on a backend this CPU has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kernel {
    /// Available on this CPU (checked by [`Kernel::new`]).
    backend: Backend,
}

impl Kernel {
    /// The kernel on `backend`; an error if this CPU lacks it.
    pub fn new(backend: Backend) -> Result<Self, BackendError> {
        Ok(Kernel {
            backend: backend.require()?,
        })
    }

    /// The scalar kernel (every CPU has it).
    pub const fn scalar() -> Self {
        Kernel {
            backend: Backend::Scalar,
        }
    }

    /// The backend.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Runs `f` compiled for this kernel's backend, so that
    /// [`update_raise`](Self::update_raise) calls in it can be inlined
    /// (mark the closure `#[inline(always)]` so that it is inlined too).
    #[inline]
    pub fn run<R>(&self, f: impl FnOnce() -> R) -> R {
        match self.backend {
            #[cfg(target_arch = "x86_64")]
            Backend::Avx2 | Backend::Avx512 => {
                // SAFETY: `Kernel::new` found AVX2 on this CPU (the AVX-512
                // backend requires it too).
                let avx2 = unsafe { arch::x86_64::avx2::Avx2::new_unchecked() };
                avx2.run(f)
            }
            _ => f(),
        }
    }

    /// The arrival step on the eight bins of `offs` (see the module docs):
    /// probabilities updated, counts raised by one; returns the minimum
    /// count before the raise and the minimum new probability. Equal to
    /// [`update_raise_scalar`] on every backend.
    #[inline]
    pub fn update_raise(&self, bins: &mut [u32; SLOTS], offs: u64, s: &Steps) -> (u16, u16) {
        match self.backend {
            #[cfg(target_arch = "x86_64")]
            Backend::Avx2 | Backend::Avx512 => {
                // SAFETY: `Kernel::new` found AVX2 on this CPU (the AVX-512
                // backend requires it too).
                let avx2 = unsafe { arch::x86_64::avx2::Avx2::new_unchecked() };
                avx2.sfb_update_raise(bins, offs, s)
            }
            #[cfg(target_arch = "aarch64")]
            Backend::Neon => arch::aarch64::neon::Neon::baseline().sfb_update_raise(bins, offs, s),
            _ => update_raise_scalar(bins, offs, s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_name_each_levels_slice() {
        let packed = 0x1234_5678_9ABC_DEF0u64;
        let offs = offsets(packed);
        for r in 0..LEVELS {
            let nib = ((packed >> (8 * r)) & 15) as usize;
            assert_eq!(slot(offs, r), 16 * r + nib);
        }
    }

    #[test]
    fn scalar_step_follows_the_rules() {
        let s = &Steps::new(2, 100, 10);
        let mut bins = [0u32; SLOTS];
        let offs = offsets(0);
        // Empty bins at p = 5: down by 10, saturating at 0.
        for r in 0..LEVELS {
            bins[16 * r] = 5 << 16;
        }
        assert_eq!(update_raise_scalar(&mut bins, offs, s), (0, 0));
        assert!((0..LEVELS).all(|r| bins[16 * r] == 1));
        // Count 1 (below target): unchanged probability; count 2: up.
        assert_eq!(update_raise_scalar(&mut bins, offs, s), (1, 0));
        assert_eq!(update_raise_scalar(&mut bins, offs, s), (2, 100));
        assert!((0..LEVELS).all(|r| bins[16 * r] == (100 << 16) | 3));
        // Saturation at 0xFFFF.
        bins[16] = (0xFFF0 << 16) | 5;
        let (_, minp) = update_raise_scalar(&mut bins, offs, s);
        assert_eq!(bins[16] >> 16, 0xFFFF);
        assert_eq!(minp, 200);
        lower(&mut bins, offs);
        assert_eq!(bins[16] & 0xFFFF, 5);
    }
}
