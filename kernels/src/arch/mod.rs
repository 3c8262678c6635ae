//! Backends. Each instantiates the generic algorithm in `lanes` for its
//! vector type. The scalar backend is public: it is the reference that tests
//! and benches compare every SIMD backend with.
//!
//! A SIMD backend is a proof token, as in memchr: a value of
//! [`x86_64::avx2::Avx2`] (or `Avx512`, `AesNi`, `Vaes256`, `Vaes512`,
//! `aarch64::neon::Neon`, `NeonAes`) exists only once its `new()` found the
//! CPU features, so its methods are safe. The one way around the check is
//! `unsafe fn new_unchecked`, for a caller that holds the proof in another
//! form (a [`Backend`](crate::Backend) that `require` accepted). Every
//! backend checks the lengths of its arguments with the functions below,
//! so the checks and their messages are written once.

pub mod scalar;

#[cfg(target_arch = "x86_64")]
pub mod x86_64;

#[cfg(target_arch = "aarch64")]
pub mod aarch64;

use crate::hash::HashPair;
use crate::index::{Blocked, Partitioned, SplitBlock, SplitBlockWords};

/// The key width `W` is 1..=[`MAX_WORDS`](crate::MAX_WORDS) (at compile
/// time) and `out` holds a pair for every key.
#[inline(always)]
pub(crate) fn check_hash<const W: usize>(keys: usize, out: usize) {
    const {
        assert!(
            W >= 1 && W <= crate::MAX_WORDS,
            "key width must be 1..=MAX_WORDS"
        )
    };
    if out < keys {
        too_short("hash", out, "pairs", keys);
    }
}

/// `out` holds `rows` indices for every pair.
#[inline(always)]
pub(crate) fn check_partitioned(pairs: &[HashPair], layout: Partitioned, out: &[u32]) {
    let need = layout.rows() * pairs.len();
    if out.len() < need {
        too_short("partitioned", out.len(), "indices", need);
    }
}

/// `blocks` holds a block for every pair and `bits` `k` positions.
#[inline(always)]
pub(crate) fn check_blocked(pairs: &[HashPair], layout: Blocked, blocks: &[u32], bits: &[u32]) {
    let n = pairs.len();
    if blocks.len() < n {
        too_short("blocked", blocks.len(), "block slots", n);
    }
    if bits.len() < layout.k() * n {
        too_short("blocked", bits.len(), "bit positions", layout.k() * n);
    }
}

/// `blocks` is the layout's size and (for a query) `out` holds an answer
/// for every pair.
#[inline(always)]
pub(crate) fn check_split_block(
    what: &'static str,
    layout: SplitBlock,
    blocks: &[SplitBlockWords],
    answers: Option<(usize, usize)>,
) {
    if blocks.len() as u64 != layout.blocks() {
        wrong_blocks(what, blocks.len(), layout.blocks());
    }
    if let Some((pairs, out)) = answers
        && out < pairs
    {
        too_short(what, out, "answers", pairs);
    }
}

// The panics live out of line, so the entry points stay a few
// instructions with no stack frame of their own: they run once per batch
// of 32-64 keys, where a frame's saves and restores were a measurable part
// of the call.

#[cold]
#[inline(never)]
fn too_short(what: &str, have: usize, unit: &str, need: usize) -> ! {
    panic!("{what}: output holds {have} {unit}, need {need}")
}

#[cold]
#[inline(never)]
fn wrong_blocks(what: &str, have: usize, need: u64) -> ! {
    panic!("{what}: wrong number of blocks ({have}, the layout has {need})")
}
