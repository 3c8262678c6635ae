//! One stratum's Bloom filter: split-block layout (one 32-byte block per
//! key, eight bits, tested with one vector load), storage cache-line
//! aligned, queried and filled with hash pairs the table computed once per
//! candidate, through the kernels' SIMD paths
//! ([`kernels::index::split_block_contains`] and `split_block_insert`).

use aligned_vec::{AVec, ConstAlign};
use kernels::index::{self, SplitBlock, SplitBlockWords};
use kernels::{Backend, HashPair, prefetch};

/// Keys per 256-bit block at most: 10.7 bits per key or more, a
/// false-positive rate of at most 0.95% (`kernels::bloom::split_block_fpr`);
/// after rounding the block count up to a power of two a filter usually
/// holds fewer, down to half (12 a block: 0.03%).
pub(crate) const MAX_KEYS_PER_BLOCK: usize = 24;

/// A split-block Bloom filter over precomputed hash pairs.
#[derive(Debug, Clone)]
pub(crate) struct PairFilter {
    layout: SplitBlock,
    blocks: AVec<SplitBlockWords, ConstAlign<64>>,
    /// Keys it may hold before the table rebuilds it larger.
    capacity: usize,
    backend: Backend,
}

impl PairFilter {
    /// An empty filter for up to `capacity` keys, queried on `backend`.
    pub(crate) fn with_capacity(capacity: usize, backend: Backend) -> Self {
        let blocks = capacity.div_ceil(MAX_KEYS_PER_BLOCK).next_power_of_two();
        let layout = SplitBlock::new(blocks.trailing_zeros());
        PairFilter {
            layout,
            blocks: AVec::from_iter(64, std::iter::repeat_n([0u32; 8], blocks)),
            capacity: blocks * MAX_KEYS_PER_BLOCK,
            backend,
        }
    }

    /// Keys it holds before its false-positive rate passes the target.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes of bits.
    pub(crate) fn bytes(&self) -> usize {
        self.blocks.len() * size_of::<SplitBlockWords>()
    }

    /// Adds every pair's key.
    pub(crate) fn insert(&mut self, pairs: &[HashPair]) {
        index::split_block_insert(self.backend, pairs, self.layout, &mut self.blocks);
    }

    /// Asks for the block `pair`'s key falls in.
    #[inline(always)]
    pub(crate) fn prefetch(&self, pair: HashPair) {
        prefetch(&self.blocks, self.layout.block(pair));
    }

    /// `out[i]`: whether `pairs[i]`'s key may be in the filter (always
    /// true for one that was inserted).
    #[inline(always)]
    pub(crate) fn contains(&self, pairs: &[HashPair], out: &mut [bool]) {
        index::split_block_contains(self.backend, pairs, self.layout, &self.blocks, out);
    }
}
