//! The plain Bloom filter.

use super::params::{BATCH, Incompatible, Layout, ParamError, Params, Scratch, prefetch};
use crate::index::{SplitBlock, SplitBlockWords};
use crate::{HashPair, Hasher, arch};

/// One 64-byte cache line of bits: the unit of the blocked layout, and the
/// alignment of every filter's storage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C, align(64))]
pub(crate) struct Line(pub(crate) [u64; 8]);

/// One 256-bit block of the split-block layout: eight 32-bit words, 32-byte
/// aligned. Split-block filters keep their bits in [`Line`]s like every
/// other filter (so union, halving, counting and the transfer forms share
/// one storage) and the kernels see each line as two such blocks, as
/// `[u32; 8]` slices ([`Bloom::split_blocks`]); the assertions below are
/// what makes that view sound and every block 32-byte aligned, so a block
/// load never splits a cache line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C, align(32))]
pub(crate) struct Block(pub(crate) SplitBlockWords);

const _: () = {
    assert!(size_of::<Line>() == 2 * size_of::<Block>());
    assert!(align_of::<Line>() >= align_of::<Block>());
    assert!(size_of::<Block>() == size_of::<SplitBlockWords>());
};

/// Whether the split-block kernels may view the `u64` storage as `u32`
/// words. Position `p = 256 b + 32 j + i` (bit `i` of word `j` of block `b`)
/// is bit `p % 64` of word `p / 64`; on a little-endian target that is bit
/// `i` of the `u32` at byte `32 b + 4 j`, which is what the kernels load.
/// Big-endian targets use the portable position path instead.
const SPLIT_VIEW: bool = cfg!(target_endian = "little");

/// A Bloom filter over keys `[u32; W]`, in any [`Layout`].
///
/// Bit `p` (a position in `0..m`) is bit `p % 64` of word `p / 64`; storage
/// is cache-line aligned, so a blocked filter's block is exactly one line
/// and a split-block filter's block exactly half of one (bit `i` of its
/// 32-bit word `j` is position `256 block + 32 j + i`).
///
/// ```
/// use kernels::Hasher;
/// use kernels::bloom::{Bloom, Layout, Params};
///
/// // 10,000 flows at 1%: blocked layout, sized by the Putze et al. formula.
/// let params = Params::for_items(Layout::Blocked, 10_000, 0.01).unwrap();
/// assert!(params.false_positive_rate(10_000.0) <= 0.01);
/// let mut bloom = Bloom::new(params, Hasher::with_seed(7));
///
/// let flows: Vec<[u32; 4]> = (0..10_000u32)
///     .map(|i| [0x0a00_0000 + i, 0xc0a8_0001, (40000 << 16) | 443, 6])
///     .collect();
/// bloom.insert_batch(&flows);
/// let mut hit = vec![false; flows.len()];
/// bloom.contains_batch(&flows, &mut hit);
/// assert!(hit.iter().all(|&h| h)); // no false negatives
/// assert!(bloom.contains(&flows[17]));
///
/// // Size estimate from the number of set bits (Swamidass-Baldi).
/// let est = bloom.estimate_items();
/// assert!((est - 10_000.0).abs() < 300.0, "{est}");
/// ```
#[derive(Debug, Clone)]
pub struct Bloom {
    params: Params,
    hasher: Hasher,
    lines: Vec<Line>,
}

impl PartialEq for Bloom {
    /// Same geometry, same key, same bits.
    fn eq(&self, o: &Self) -> bool {
        self.params == o.params
            && self.hasher.key().id() == o.hasher.key().id()
            && self.lines == o.lines
    }
}

impl Bloom {
    /// An empty filter.
    pub fn new(params: Params, hasher: Hasher) -> Self {
        let lines = params.bits().div_ceil(512) as usize;
        Bloom {
            params,
            hasher,
            lines: vec![Line::default(); lines],
        }
    }

    /// An empty filter for `n` items at false-positive rate `p`, on the
    /// process-wide key ([`Hasher::new`]), in the default layout
    /// ([`Layout::SplitBlock`]: the fastest to query and insert at the same
    /// target rate; see the [module docs](crate::bloom)).
    ///
    /// ```
    /// use kernels::bloom::{Bloom, Layout};
    ///
    /// let mut flows = Bloom::with_rate(10_000, 0.01).unwrap();
    /// assert_eq!(flows.params().layout(), Layout::SplitBlock);
    /// assert_eq!(flows.params().k(), 8);
    /// flows.insert(&[0x0a00_0001u32, 0x0a00_0002, (1234 << 16) | 80, 6]);
    /// assert!(flows.contains(&[0x0a00_0001u32, 0x0a00_0002, (1234 << 16) | 80, 6]));
    /// ```
    ///
    /// # Errors
    /// See [`Params::for_items`].
    pub fn with_rate(n: u64, p: f64) -> Result<Self, ParamError> {
        Ok(Bloom::new(
            Params::for_items(Layout::default(), n, p)?,
            Hasher::new(),
        ))
    }

    /// The geometry.
    pub fn params(&self) -> Params {
        self.params
    }

    /// The hasher (its key's id is the filter's key id).
    pub fn hasher(&self) -> &Hasher {
        &self.hasher
    }

    /// The split-block view of the storage: `blocks()` blocks of eight
    /// `u32` words (only meaningful when [`SPLIT_VIEW`]).
    #[inline(always)]
    fn split_blocks(&self) -> &[SplitBlockWords] {
        let n = self.params.blocks() as usize;
        assert!(n <= 2 * self.lines.len());
        // SAFETY: a `Line` is 64 bytes of `u64`s with no padding (`repr(C)`,
        // asserted above), so the lines are `2 * len` contiguous, initialised
        // 32-byte chunks, each aligned to 32 bytes, more than `[u32; 8]`
        // needs, and every bit pattern is a valid `[u32; 8]`. `n` chunks lie
        // inside the allocation (checked above), and the shared borrow of
        // `self` keeps them alive and unwritten for the slice's lifetime.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<SplitBlockWords>(), n) }
    }

    #[inline(always)]
    fn bit(&self, p: u32) -> u64 {
        let p = p as usize;
        (self.lines[p >> 9].0[(p >> 6) & 7] >> (p & 63)) & 1
    }

    #[inline(always)]
    fn set(&mut self, p: u32) {
        let p = p as usize;
        self.lines[p >> 9].0[(p >> 6) & 7] |= 1 << (p & 63);
    }

    #[inline(always)]
    pub(crate) fn set_position(&mut self, p: u32) {
        self.set(p)
    }

    /// Inserts one key.
    pub fn insert<const W: usize>(&mut self, key: &[u32; W]) {
        self.insert_batch(std::slice::from_ref(key));
    }

    /// Whether the key may have been inserted (never false for one that was).
    pub fn contains<const W: usize>(&self, key: &[u32; W]) -> bool {
        let mut out = [false];
        self.contains_batch(std::slice::from_ref(key), &mut out);
        out[0]
    }

    /// Inserts every key: hashes a chunk of up to 64 keys at once, derives
    /// all their positions, prefetches their lines, then sets the bits.
    ///
    /// The split-block layout hashes the chunk into a [`HashPair`] buffer
    /// (set up once per call), prefetches each key's block and ORs its
    /// eight-word mask in with the backend's kernel.
    pub fn insert_batch<const W: usize>(&mut self, keys: &[[u32; W]]) {
        if SPLIT_VIEW && self.params.layout() == Layout::SplitBlock {
            self.insert_split(keys);
            return;
        }
        let mut s = Scratch::new();
        let k = self.params.k();
        for chunk in keys.chunks(self.params.chunk()) {
            let n = chunk.len();
            self.params.positions(&self.hasher, chunk, &mut s);
            let pos = &s.pos[..k * n];
            self.prefetch(pos, n);
            for &p in pos {
                self.set(p);
            }
        }
    }

    /// `out[i] = self.contains(&keys[i])`, a chunk of up to 64 keys at a
    /// time (hash, positions, prefetch, then one branch-free AND of `k` bit
    /// tests per key). The split-block layout needs no positions: after
    /// hashing, its kernel prefetches each key's block, builds the key's
    /// eight-word mask in registers and tests it with one load.
    ///
    /// # Panics
    /// If `out` is shorter than `keys`.
    pub fn contains_batch<const W: usize>(&self, keys: &[[u32; W]], out: &mut [bool]) {
        assert!(
            out.len() >= keys.len(),
            "contains_batch: {} outputs for {} keys",
            out.len(),
            keys.len()
        );
        if SPLIT_VIEW && self.params.layout() == Layout::SplitBlock {
            self.contains_split(keys, out);
            return;
        }
        let mut s = Scratch::new();
        let k = self.params.k();
        let chunk = self.params.chunk();
        for (keys, out) in keys.chunks(chunk).zip(out.chunks_mut(chunk)) {
            match self.params.layout() {
                Layout::Blocked => self.contains_blocked(keys, out, &mut s),
                Layout::Classic | Layout::SplitBlock => {
                    let n = keys.len();
                    self.params.positions(&self.hasher, keys, &mut s);
                    let pos = &s.pos[..k * n];
                    self.prefetch(pos, n);
                    self.test_positions(pos, n, out);
                }
            }
        }
    }

    /// The split-block query: per chunk of up to 64 keys, hash into `pairs`
    /// (initialised once per call, 512 bytes), then the backend's kernel.
    #[inline]
    fn contains_split<const W: usize>(&self, keys: &[[u32; W]], out: &mut [bool]) {
        let mut pairs = [HashPair::default(); BATCH];
        for (keys, out) in keys.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            let pairs = &mut pairs[..keys.len()];
            self.hasher.hash_batch(keys, pairs);
            self.contains_split_pairs(pairs, out);
        }
    }

    /// The split-block query of hash pairs, with the backend's kernel. The
    /// backend is the hasher's, checked when the hasher was built.
    #[inline]
    fn contains_split_pairs(&self, pairs: &[HashPair], out: &mut [bool]) {
        let layout = SplitBlock::new(self.params.blocks().trailing_zeros());
        let blocks = self.split_blocks();
        match self.hasher.backend() {
            #[cfg(target_arch = "x86_64")]
            crate::Backend::Avx2 | crate::Backend::Avx512 => {
                // SAFETY: a `Hasher` holds `Avx2` (or `Avx512`, which
                // requires AVX2 too) only if
                // `Backend::require` or `Backend::active` found AVX2 on
                // this CPU when it was built (its invariant).
                let avx2 = unsafe { arch::x86_64::avx2::Avx2::new_unchecked() };
                avx2.split_block_contains(pairs, layout, blocks, out)
            }
            #[cfg(target_arch = "aarch64")]
            crate::Backend::Neon => arch::aarch64::neon::Neon::baseline()
                .split_block_contains(pairs, layout, blocks, out),
            _ => arch::scalar::split_block_contains(pairs, layout, blocks, out),
        }
    }

    /// The split-block insert: as [`Bloom::contains_split`], ORing masks in.
    #[inline]
    fn insert_split<const W: usize>(&mut self, keys: &[[u32; W]]) {
        let mut pairs = [HashPair::default(); BATCH];
        for keys in keys.chunks(BATCH) {
            let pairs = &mut pairs[..keys.len()];
            self.hasher.hash_batch(keys, pairs);
            self.insert_split_pairs(pairs);
        }
    }

    /// The split-block insert of hash pairs, with the backend's kernel.
    #[inline]
    fn insert_split_pairs(&mut self, pairs: &[HashPair]) {
        let layout = SplitBlock::new(self.params.blocks().trailing_zeros());
        let backend = self.hasher.backend();
        let blocks = split_blocks_mut(&mut self.lines, self.params.blocks() as usize);
        match backend {
            #[cfg(target_arch = "x86_64")]
            crate::Backend::Avx2 | crate::Backend::Avx512 => {
                // SAFETY: as in `contains_split_pairs`: the hasher's backend
                // was found on this CPU when the hasher was built.
                let avx2 = unsafe { arch::x86_64::avx2::Avx2::new_unchecked() };
                avx2.split_block_insert(pairs, layout, blocks)
            }
            #[cfg(target_arch = "aarch64")]
            crate::Backend::Neon => {
                arch::aarch64::neon::Neon::baseline().split_block_insert(pairs, layout, blocks)
            }
            _ => arch::scalar::split_block_insert(pairs, layout, blocks),
        }
    }

    /// Inserts keys given by their hash pairs instead of the keys: each
    /// pair sets the positions a key with that pair would (a pair from
    /// this filter's [`Bloom::hasher`] is the key's). For structures that
    /// derive pairs themselves (the DBF's per-peer mappings,
    /// [`crate::bloom::dbf`]) or hash keys of several widths before
    /// inserting them at once. Allocation-free.
    pub fn insert_pairs(&mut self, pairs: &[HashPair]) {
        if SPLIT_VIEW && self.params.layout() == Layout::SplitBlock {
            for chunk in pairs.chunks(BATCH) {
                self.insert_split_pairs(chunk);
            }
            return;
        }
        let mut s = Scratch::new();
        let k = self.params.k();
        for chunk in pairs.chunks(self.params.chunk()) {
            let n = chunk.len();
            self.params
                .pair_positions(&self.hasher, chunk, &mut s.blocks, &mut s.pos);
            let pos = &s.pos[..k * n];
            self.prefetch(pos, n);
            for &p in pos {
                self.set(p);
            }
        }
    }

    /// `out[i]`: whether a key with hash pair `pairs[i]` may have been
    /// inserted (as [`Bloom::insert_pairs`]). `out` must be at least as
    /// long as `pairs` (the caller's buffer; crate-internal).
    pub(crate) fn contains_pairs(&self, pairs: &[HashPair], out: &mut [bool]) {
        debug_assert!(out.len() >= pairs.len());
        if SPLIT_VIEW && self.params.layout() == Layout::SplitBlock {
            for (chunk, out) in pairs.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
                self.contains_split_pairs(chunk, out);
            }
            return;
        }
        let mut s = Scratch::new();
        let k = self.params.k();
        let chunk = self.params.chunk();
        for (pairs, out) in pairs.chunks(chunk).zip(out.chunks_mut(chunk)) {
            let n = pairs.len();
            self.params
                .pair_positions(&self.hasher, pairs, &mut s.blocks, &mut s.pos);
            let pos = &s.pos[..k * n];
            self.prefetch(pos, n);
            self.test_positions(pos, n, out);
        }
    }

    /// `out[i]` = whether all `k` positions of key `i` are set, positions
    /// index-major (`pos[j * n + i]`).
    #[inline(always)]
    fn test_positions(&self, pos: &[u32], n: usize, out: &mut [bool]) {
        let mut acc = [1u64; BATCH];
        for row in pos.chunks_exact(n) {
            for (a, &p) in acc.iter_mut().zip(row) {
                *a &= self.bit(p);
            }
        }
        for (o, &a) in out.iter_mut().zip(&acc[..n]) {
            *o = a != 0;
        }
    }

    /// The blocked query of one chunk: block and in-block bits straight
    /// from [`Hasher::blocked`], one line per key, the `k` tests of a key in
    /// registers.
    #[inline(always)]
    fn contains_blocked<const W: usize>(
        &self,
        keys: &[[u32; W]],
        out: &mut [bool],
        s: &mut Scratch,
    ) {
        let n = keys.len();
        let k = self.params.k();
        let (blocks, bits) = self.params.blocked_indices(&self.hasher, keys, s);
        for &b in blocks {
            prefetch(&self.lines, b as usize);
        }
        for (i, (o, &b)) in out.iter_mut().zip(blocks).enumerate() {
            let line = &self.lines[b as usize].0;
            let mut acc = 1u64;
            for j in 0..k {
                let bit = bits[j * n + i];
                acc &= line[((bit >> 6) & 7) as usize] >> (bit & 63);
            }
            *o = acc != 0;
        }
    }

    /// Prefetches the lines a chunk's positions fall in: one per key for the
    /// blocked layout (all `k` share the block), all `k` for the classic one.
    #[inline(always)]
    fn prefetch(&self, pos: &[u32], n: usize) {
        let pos = match self.params.layout() {
            Layout::Blocked | Layout::SplitBlock => &pos[..n],
            Layout::Classic => pos,
        };
        for &p in pos {
            prefetch(&self.lines, (p >> 9) as usize);
        }
    }

    /// Clears every bit.
    pub fn clear(&mut self) {
        self.lines.fill(Line::default());
    }

    /// The number of set bits.
    pub fn count_ones(&self) -> u64 {
        self.lines
            .iter()
            .flat_map(|l| l.0)
            .map(|w| u64::from(w.count_ones()))
            .sum()
    }

    /// The estimated number of distinct items inserted, from the number of
    /// set bits ([`Params::estimate_items`]: `n* = -(m/k) ln(1 - X/m)` and
    /// its blocked form).
    pub fn estimate_items(&self) -> f64 {
        self.params.estimate_items(self.count_ones())
    }

    /// The false-positive rate the layout's formula predicts at the
    /// estimated item count.
    pub fn false_positive_rate(&self) -> f64 {
        self.params.false_positive_rate(self.estimate_items())
    }

    /// Checks that `other` has the same layout, `m`, `k` and hash key.
    ///
    /// # Errors
    /// The first difference found.
    pub fn compatible(&self, other: &Bloom) -> Result<(), Incompatible> {
        self.params.check(
            &other.params,
            self.hasher.key().id(),
            other.hasher.key().id(),
        )
    }

    /// Adds every key of `other` (bitwise OR): afterwards the filter answers
    /// as if every key inserted in either had been inserted in it.
    ///
    /// # Errors
    /// If the filters are not [`compatible`](Bloom::compatible).
    pub fn union_with(&mut self, other: &Bloom) -> Result<(), Incompatible> {
        self.compatible(other)?;
        for (a, b) in self.lines.iter_mut().zip(&other.lines) {
            for (x, y) in a.0.iter_mut().zip(&b.0) {
                *x |= y;
            }
        }
        Ok(())
    }

    /// Bitwise AND: contains every key both filters contain. (Its bits can
    /// be a superset of the filter of the true intersection, so it may have
    /// more false positives than a filter built from the intersection.)
    ///
    /// # Errors
    /// If the filters are not [`compatible`](Bloom::compatible).
    pub fn intersect_with(&mut self, other: &Bloom) -> Result<(), Incompatible> {
        self.compatible(other)?;
        for (a, b) in self.lines.iter_mut().zip(&other.lines) {
            for (x, y) in a.0.iter_mut().zip(&b.0) {
                *x &= y;
            }
        }
        Ok(())
    }

    /// The union as a new filter ([`Bloom::union_with`]).
    ///
    /// # Errors
    /// If the filters are not [`compatible`](Bloom::compatible).
    pub fn union(&self, other: &Bloom) -> Result<Bloom, Incompatible> {
        let mut u = self.clone();
        u.union_with(other)?;
        Ok(u)
    }

    /// The intersection as a new filter ([`Bloom::intersect_with`]).
    ///
    /// # Errors
    /// If the filters are not [`compatible`](Bloom::compatible).
    pub fn intersection(&self, other: &Bloom) -> Result<Bloom, Incompatible> {
        let mut u = self.clone();
        u.intersect_with(other)?;
        Ok(u)
    }

    /// Estimated `|A u B|`: the item estimate of the OR of the two filters.
    ///
    /// # Errors
    /// If the filters are not [`compatible`](Bloom::compatible).
    pub fn estimate_union(&self, other: &Bloom) -> Result<f64, Incompatible> {
        self.compatible(other)?;
        let ones: u64 = self
            .lines
            .iter()
            .zip(&other.lines)
            .flat_map(|(a, b)| a.0.iter().zip(b.0.iter()).map(|(x, y)| x | y))
            .map(|w| u64::from(w.count_ones()))
            .sum();
        Ok(self.params.estimate_items(ones))
    }

    /// Estimated `|A n B| = |A| + |B| - |A u B|` from the three estimates
    /// (Swamidass and Baldi 2007), floored at zero.
    ///
    /// # Errors
    /// If the filters are not [`compatible`](Bloom::compatible).
    pub fn estimate_intersection(&self, other: &Bloom) -> Result<f64, Incompatible> {
        let u = self.estimate_union(other)?;
        Ok((self.estimate_items() + other.estimate_items() - u).max(0.0))
    }

    /// A filter of half the size that still contains every key this one
    /// contains (a sender can shrink a sparse filter before transfer). The
    /// index is the *top* bits of a 32-bit quantity in both layouts, so
    /// halving drops the lowest of them:
    ///
    /// * Blocked and SplitBlock: block `b` becomes `b >> 1`, so new block
    ///   `j` is the OR of old blocks `2j` and `2j + 1` (the bits inside a
    ///   block depend on `h2` only and do not move).
    /// * Classic with `m = 2^b`: position `x >> (32 - b)` becomes
    ///   `x >> (33 - b)`, so new bit `j` is the OR of old bits `2j`, `2j + 1`.
    ///
    /// The false-positive rate rises to that of the same items in `m / 2`
    /// bits.
    ///
    /// # Errors
    /// [`ParamError::CannotHalve`] unless `m` is a power of two of at least
    /// 1024 bits.
    pub fn halve(&self) -> Result<Bloom, ParamError> {
        let m = self.params.bits();
        if !m.is_power_of_two() || m < 1024 {
            return Err(ParamError::CannotHalve(m));
        }
        let params = Params::new(self.params.layout(), m / 2, self.params.k())?;
        let mut out = Bloom::new(params, self.hasher.clone());
        match self.params.layout() {
            Layout::Blocked => {
                for (o, pair) in out.lines.iter_mut().zip(self.lines.chunks_exact(2)) {
                    for (w, (a, b)) in o.0.iter_mut().zip(pair[0].0.iter().zip(&pair[1].0)) {
                        *w = a | b;
                    }
                }
            }
            Layout::SplitBlock => {
                // Old blocks 2j and 2j + 1 are the halves of old line j (u64
                // words 0..4 and 4..8); new block j is half j % 2 of new
                // line j / 2.
                let new_blocks = params.blocks() as usize;
                for (j, old) in self.lines.iter().take(new_blocks).enumerate() {
                    let half = (j % 2) * 4;
                    let dst = &mut out.lines[j / 2].0[half..half + 4];
                    for (w, d) in dst.iter_mut().enumerate() {
                        *d = old.0[w] | old.0[4 + w];
                    }
                }
            }
            Layout::Classic => {
                // Old words 2w and 2w + 1 hold old bits 128w..128w+128,
                // which fold into new word w.
                let old: Vec<u64> = self.lines.iter().flat_map(|l| l.0).collect();
                let new: Vec<u64> = old
                    .chunks_exact(2)
                    .map(|p| fold_pairs(p[0]) | (fold_pairs(p[1]) << 32))
                    .collect();
                for (l, ws) in out.lines.iter_mut().zip(new.chunks(8)) {
                    l.0[..ws.len()].copy_from_slice(ws);
                }
            }
        }
        Ok(out)
    }

    /// The bit vector as words (`m / 64` of them; bit `p` of the filter is
    /// bit `p % 64` of word `p / 64`): two filters of one geometry compare
    /// word by word (a sender diffing what it advertised before against
    /// what it advertises now).
    pub fn words(&self) -> impl Iterator<Item = u64> + '_ {
        let n = (self.params.bits() / 64) as usize;
        self.lines.iter().flat_map(|l| l.0).take(n)
    }

    /// Flips bit `position` (applying a delta that lists the bits that
    /// changed); `false`, and nothing done, when `position` is not below
    /// `m`.
    pub fn flip(&mut self, position: u64) -> bool {
        if position >= self.params.bits() {
            return false;
        }
        let p = position as usize;
        self.lines[p >> 9].0[(p >> 6) & 7] ^= 1 << (p & 63);
        true
    }

    /// Builds a filter from `m / 64` words (caller checked the count).
    pub(crate) fn from_words(
        params: Params,
        hasher: Hasher,
        words: impl Iterator<Item = u64>,
    ) -> Bloom {
        let mut b = Bloom::new(params, hasher);
        for (i, w) in words.enumerate() {
            b.lines[i / 8].0[i % 8] = w;
        }
        b
    }
}

/// The mutable split-block view of `n` blocks (see [`Bloom::split_blocks`]).
#[inline(always)]
fn split_blocks_mut(lines: &mut [Line], n: usize) -> &mut [SplitBlockWords] {
    assert!(n <= 2 * lines.len());
    // SAFETY: as in `Bloom::split_blocks`; the exclusive borrow of `lines`
    // makes the slice the only access to the storage while it lives.
    unsafe { std::slice::from_raw_parts_mut(lines.as_mut_ptr().cast::<SplitBlockWords>(), n) }
}

/// OR of each adjacent pair of bits, compacted: bit `j` of the result is
/// `w[2j] | w[2j + 1]`, `j < 32`.
fn fold_pairs(w: u64) -> u64 {
    let mut x = (w | (w >> 1)) & 0x5555_5555_5555_5555;
    x = (x | (x >> 1)) & 0x3333_3333_3333_3333;
    x = (x | (x >> 2)) & 0x0f0f_0f0f_0f0f_0f0f;
    x = (x | (x >> 4)) & 0x00ff_00ff_00ff_00ff;
    x = (x | (x >> 8)) & 0x0000_ffff_0000_ffff;
    (x | (x >> 16)) & 0x0000_0000_ffff_ffff
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pair paths set and test exactly the bits the key paths do, in
    /// every layout and on every backend this CPU has.
    #[test]
    fn pair_paths_equal_key_paths() {
        let keys: Vec<[u32; 4]> = (0..1000u32).map(|i| [i, i * 7, 99, 6]).collect();
        let probes: Vec<[u32; 4]> = (0..3000u32).map(|i| [i, i * 7 + 1, 99, 6]).collect();
        for backend in crate::Backend::ALL {
            let Ok(hasher) = Hasher::with_seed(4).on_backend(backend) else {
                continue;
            };
            for params in [
                Params::new(Layout::Classic, 9600, 7).unwrap(),
                Params::new(Layout::Blocked, 8192, 5).unwrap(),
                Params::new(Layout::SplitBlock, 8192, 8).unwrap(),
            ] {
                let mut by_key = Bloom::new(params, hasher.clone());
                by_key.insert_batch(&keys);
                let mut pairs = vec![HashPair::default(); keys.len()];
                hasher.hash_batch(&keys, &mut pairs);
                let mut by_pair = Bloom::new(params, hasher.clone());
                by_pair.insert_pairs(&pairs);
                assert_eq!(by_key, by_pair, "{backend:?} {params:?}");
                let mut want = vec![false; probes.len()];
                by_key.contains_batch(&probes, &mut want);
                let mut probe_pairs = vec![HashPair::default(); probes.len()];
                hasher.hash_batch(&probes, &mut probe_pairs);
                let mut got = vec![false; probes.len()];
                by_pair.contains_pairs(&probe_pairs, &mut got);
                assert_eq!(want, got, "{backend:?} {params:?}");
                assert!(got.iter().any(|&h| h) && !got.iter().all(|&h| h));
            }
        }
    }

    #[test]
    fn fold_pairs_reference() {
        for w in [
            0u64,
            1,
            2,
            3,
            0x8000_0000_0000_0000,
            0xdead_beef_1234_5678,
            !0,
        ] {
            let want = (0..32).fold(0u64, |acc, j| {
                acc | ((((w >> (2 * j)) | (w >> (2 * j + 1))) & 1) << j)
            });
            assert_eq!(fold_pairs(w), want, "{w:#x}");
        }
    }
}
