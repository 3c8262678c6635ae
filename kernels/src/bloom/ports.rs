//! The bit-sliced per-port filter.

use std::fmt;

use super::counting::CountingBloom;
use super::params::{
    BATCH, BLOCK_BITS, Incompatible, LOG2_BLOCK_BITS, Layout, Params, SPLIT_BLOCK_BITS, Scratch,
    prefetch,
};
use crate::lanes::{SALTS, SPLIT_SALTS, split_block_of};
use crate::{HashPair, Hasher};

/// The most ports a [`PortFilter`] holds.
pub const MAX_PORTS: usize = 256;
const SET_WORDS: usize = MAX_PORTS / 64;
/// Split-block port filters of at least this many words (4 MiB: beyond a
/// typical L2 and most of a shared L3 slice) prefetch every position a
/// chunk ahead; smaller ones are left to the out-of-order core.
const PREFETCH_MIN_WORDS: usize = 1 << 19;
/// Positions (word-sets) per split block.
const SPLIT_SPAN: usize = SPLIT_BLOCK_BITS as usize;
/// Positions (word-sets) per block of the blocked layout.
const BLOCKED_SPAN: usize = BLOCK_BITS as usize;
/// The largest `k` of the blocked layout with its own unrolled query loop
/// (for filters of at most 64 ports); larger ones loop over the salts.
const UNROLLED_K: usize = 8;
/// The first `K` blocked-layout salts, as an array (so a loop over them
/// unrolls).
#[inline(always)]
fn first_salts<const K: usize>() -> [u32; K] {
    let mut s = [0u32; K];
    s.copy_from_slice(&SALTS[..K]);
    s
}

/// A set of ports `0..256` (a 256-bit bitmap).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct PortSet([u64; SET_WORDS]);

impl PortSet {
    /// The empty set.
    pub const fn new() -> Self {
        PortSet([0; SET_WORDS])
    }

    /// Whether `port` is in the set (false for ports >= 256).
    pub fn contains(&self, port: usize) -> bool {
        port < MAX_PORTS && (self.0[port / 64] >> (port % 64)) & 1 != 0
    }

    /// Adds `port`.
    ///
    /// # Panics
    /// If `port >= 256`.
    pub fn insert(&mut self, port: usize) {
        assert!(port < MAX_PORTS, "port {port} >= {MAX_PORTS}");
        self.0[port / 64] |= 1 << (port % 64);
    }

    /// Number of ports in the set.
    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    /// The ports in increasing order.
    pub fn iter(&self) -> PortIter {
        PortIter {
            words: self.0,
            word: 0,
        }
    }

    /// The bitmap, 64 ports per word, port `p` at bit `p % 64` of word `p / 64`.
    pub fn words(&self) -> &[u64; 4] {
        &self.0
    }
}

impl fmt::Debug for PortSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl IntoIterator for PortSet {
    type Item = usize;
    type IntoIter = PortIter;
    fn into_iter(self) -> PortIter {
        self.iter()
    }
}

/// Iterator over a [`PortSet`], increasing.
#[derive(Debug, Clone)]
pub struct PortIter {
    words: [u64; SET_WORDS],
    word: usize,
}

impl Iterator for PortIter {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        while self.word < SET_WORDS {
            let w = self.words[self.word];
            if w != 0 {
                self.words[self.word] = w & (w - 1);
                return Some(self.word * 64 + w.trailing_zeros() as usize);
            }
            self.word += 1;
        }
        None
    }
}

/// Why a port filter operation was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortError {
    /// No filters to build from, or more than [`MAX_PORTS`].
    PortCount(usize),
    /// A port number at or above the filter's port count.
    NoSuchPort(usize),
    /// A per-port filter's geometry or key differs from the others'.
    Incompatible(Incompatible),
}

impl fmt::Display for PortError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortError::PortCount(n) => write!(f, "{n} ports: a port filter holds 1..={MAX_PORTS}"),
            PortError::NoSuchPort(p) => write!(f, "no port {p} in this port filter"),
            PortError::Incompatible(e) => write!(f, "per-port filter: {e}"),
        }
    }
}

impl std::error::Error for PortError {}

impl From<Incompatible> for PortError {
    fn from(e: Incompatible) -> Self {
        PortError::Incompatible(e)
    }
}

/// One Bloom filter per port, bit-sliced: for every position `p < m` one
/// word per 64 ports holds bit `p` of every port's filter, so a query is the
/// AND of the `k` words (word groups) at the key's positions, and the result
/// is the set of ports whose filter contains the key:
/// `ports(x) = AND_{j < k} slice[pos_j(x)]`.
///
/// The cost of a query is `k` loads of `ceil(ports / 64)` words, so it does
/// not depend on the port count up to 64. With the blocked layout a key's
/// positions lie in one block of 512 positions (4 KiB per 64 ports): `k`
/// cache lines of one page; with the split-block layout in one block of 256
/// (2 KiB per 64 ports), one position in each run of 32. Either way a
/// position is a word-set of its own, so a key touches `k` cache lines (no
/// arrangement of a block's words saves more than about 10%: with eight
/// word-sets per 64-byte line, a split-block key's eight positions fall in
/// 7.2 distinct lines on average at best, against 8 now). Both block
/// layouts are queried in registers ([`PortFilter::query_batch`]); the
/// classic layout through a position list; [`Params::for_port_filter`]
/// sizes a port filter for the fewest positions per key. Built from per-port
/// [`CountingBloom`]s (the control path), all with the same [`Params`] and
/// key.
///
/// The dataplane queries through [`PortFilter::query_batch_low`], where
/// the caller's ingress mask and store run inside the query loop and the
/// span needs no bounds check: a [`PortSet`] per answer and a second loop
/// for the mask cost about a fifth more instructions per key (callgrind on
/// `bench/examples/stages_cg.rs`, `multicast/query/64`).
#[derive(Debug, Clone)]
pub struct PortFilter {
    params: Params,
    hasher: Hasher,
    ports: usize,
    words: usize,
    slices: Vec<u64>,
}

impl PortFilter {
    /// An empty filter for `ports` ports.
    ///
    /// # Errors
    /// [`PortError::PortCount`] unless `1 <= ports <= 256`.
    pub fn new(params: Params, hasher: Hasher, ports: usize) -> Result<Self, PortError> {
        if !(1..=MAX_PORTS).contains(&ports) {
            return Err(PortError::PortCount(ports));
        }
        let words = ports.div_ceil(64);
        Ok(PortFilter {
            params,
            hasher,
            ports,
            words,
            slices: vec![0; params.bits() as usize * words],
        })
    }

    /// One port per filter, port `i` from `filters[i]`.
    ///
    /// # Errors
    /// [`PortError::PortCount`] for 0 or more than 256 filters;
    /// [`PortError::Incompatible`] if any filter's geometry or key differs
    /// from the first's.
    pub fn build(filters: &[CountingBloom]) -> Result<Self, PortError> {
        let first = filters.first().ok_or(PortError::PortCount(0))?;
        let mut pf = PortFilter::new(first.params(), first.hasher().clone(), filters.len())?;
        for (port, f) in filters.iter().enumerate() {
            pf.set_port(port, f)?;
        }
        Ok(pf)
    }

    /// Replaces port `port`'s filter with `filter`'s non-zero counters.
    ///
    /// # Errors
    /// [`PortError::NoSuchPort`] if `port >= self.ports()`;
    /// [`PortError::Incompatible`] if `filter`'s geometry or key differ.
    pub fn set_port(&mut self, port: usize, filter: &CountingBloom) -> Result<(), PortError> {
        if port >= self.ports {
            return Err(PortError::NoSuchPort(port));
        }
        self.params.check(
            &filter.params(),
            self.hasher.key().id(),
            filter.hasher().key().id(),
        )?;
        let (w, bit) = (port / 64, 1u64 << (port % 64));
        for (p, set) in filter.nonzero() {
            let slot = &mut self.slices[p as usize * self.words + w];
            if set {
                *slot |= bit;
            } else {
                *slot &= !bit;
            }
        }
        Ok(())
    }

    /// The geometry.
    pub fn params(&self) -> Params {
        self.params
    }

    /// The hasher.
    pub fn hasher(&self) -> &Hasher {
        &self.hasher
    }

    /// The number of ports.
    pub fn ports(&self) -> usize {
        self.ports
    }

    /// The ports whose filter contains `key`.
    pub fn query<const W: usize>(&self, key: &[u32; W]) -> PortSet {
        let mut out = [PortSet::new()];
        self.query_batch(std::slice::from_ref(key), &mut out);
        out[0]
    }

    /// `out[i] = self.query(&keys[i])`.
    ///
    /// Split-block and blocked layouts: per chunk of 64 keys, hash the
    /// chunk once ([`Hasher::hash_batch`]), then per key take its block
    /// from `h1` and its `k` in-block positions from `h2` in registers (a
    /// multiply by a constant and a shift each) and AND the `k` word-sets
    /// (one `u64` per 64 ports) they name: three instructions per position,
    /// no position array, no bounds check (see
    /// [`PortFilter::query_batch_low`]). Classic layout: hash a chunk,
    /// derive and prefetch every position, AND the word-sets.
    ///
    /// # Panics
    /// If `out` is shorter than `keys`.
    pub fn query_batch<const W: usize>(&self, keys: &[[u32; W]], out: &mut [PortSet]) {
        assert!(
            out.len() >= keys.len(),
            "query_batch: {} outputs for {} keys",
            out.len(),
            keys.len()
        );
        if self.params.layout() == Layout::Classic {
            self.query_positions(keys, out);
            return;
        }
        match self.words {
            1 => self.query_blocks::<W, 1>(keys, |i, a| out[i] = PortSet([a[0], 0, 0, 0])),
            2 => self.query_blocks::<W, 2>(keys, |i, a| out[i] = PortSet([a[0], a[1], 0, 0])),
            3 => self.query_blocks::<W, 3>(keys, |i, a| out[i] = PortSet([a[0], a[1], a[2], 0])),
            _ => self.query_blocks::<W, 4>(keys, |i, a| out[i] = PortSet(a)),
        }
    }

    /// Ports `0..64` of every answer, handed to `f(i, ports)` in key order
    /// (`ports` = `self.query(&keys[i]).words()[0]`): the whole answer for a
    /// filter of at most 64 ports, and the dataplane's path. With the
    /// split-block and blocked layouts no [`PortSet`] is formed: the
    /// caller's work on the answer (an ingress mask, a store) runs inside
    /// the query loop, in registers.
    ///
    /// `f` is inlined into the query loop, which is plain scalar code (the
    /// hash is a separate call into the backend), so a closure costs
    /// nothing here.
    pub fn query_batch_low<const W: usize, F: FnMut(usize, u64)>(
        &self,
        keys: &[[u32; W]],
        mut f: F,
    ) {
        if self.params.layout() == Layout::Classic {
            let mut out = [PortSet::new(); BATCH];
            for (c, keys) in keys.chunks(BATCH).enumerate() {
                let out = &mut out[..keys.len()];
                self.query_positions(keys, out);
                for (i, o) in out.iter().enumerate() {
                    f(c * BATCH + i, o.0[0]);
                }
            }
            return;
        }
        match self.words {
            1 => self.query_blocks::<W, 1>(keys, |i, a| f(i, a[0])),
            2 => self.query_blocks::<W, 2>(keys, |i, a| f(i, a[0])),
            3 => self.query_blocks::<W, 3>(keys, |i, a| f(i, a[0])),
            _ => self.query_blocks::<W, 4>(keys, |i, a| f(i, a[0])),
        }
    }

    /// The query of the two block layouts for `PW = self.words` words per
    /// word-set: the layout's geometry as constants (split block: spans of
    /// 256 positions, position `j` in `32 j .. 32 j + 32`; blocked: spans of
    /// 512, every position anywhere in the span), and for the blocked
    /// layout on at most 64 ports, `k` as a constant too, so the position
    /// loop unrolls.
    #[inline(always)]
    fn query_blocks<const W: usize, const PW: usize>(
        &self,
        keys: &[[u32; W]],
        f: impl FnMut(usize, [u64; PW]),
    ) {
        const SPLIT_SHIFT: u32 = 32 - 5;
        const BLOCKED_SHIFT: u32 = 32 - LOG2_BLOCK_BITS;
        let salts = &SALTS[..self.params.k()];
        if self.params.layout() == Layout::SplitBlock {
            return self.query_span::<W, PW, SPLIT_SPAN, 32, SPLIT_SHIFT>(keys, &SPLIT_SALTS, f);
        }
        if PW > 1 || salts.len() > UNROLLED_K {
            return self.query_span::<W, PW, BLOCKED_SPAN, 0, BLOCKED_SHIFT>(keys, salts, f);
        }
        const B: usize = BLOCKED_SPAN;
        const S: u32 = BLOCKED_SHIFT;
        match salts.len() {
            1 => self.query_span::<W, PW, B, 0, S>(keys, &first_salts::<1>(), f),
            2 => self.query_span::<W, PW, B, 0, S>(keys, &first_salts::<2>(), f),
            3 => self.query_span::<W, PW, B, 0, S>(keys, &first_salts::<3>(), f),
            4 => self.query_span::<W, PW, B, 0, S>(keys, &first_salts::<4>(), f),
            5 => self.query_span::<W, PW, B, 0, S>(keys, &first_salts::<5>(), f),
            6 => self.query_span::<W, PW, B, 0, S>(keys, &first_salts::<6>(), f),
            7 => self.query_span::<W, PW, B, 0, S>(keys, &first_salts::<7>(), f),
            _ => self.query_span::<W, PW, B, 0, S>(keys, &first_salts::<UNROLLED_K>(), f),
        }
    }

    /// The block query: `f(i, ports)` for every key in order. A key's block
    /// is `split_block_of(h1)` (the top bits of `h1`), a span of `SPAN * PW`
    /// consecutive words; its position `j` is `OFF * j + ((h2 * salts[j]) >>
    /// SHIFT)` inside the span, below `SPAN` by construction (for both
    /// layouts `OFF * (k - 1) + 2^(32 - SHIFT) <= SPAN`), so the word-set
    /// index needs no check and the span is sliced once per key. The loads
    /// are independent and the out-of-order core overlaps them across keys.
    /// Filters of at least [`PREFETCH_MIN_WORDS`] words prefetch every
    /// key's lines first.
    ///
    /// The positions are derived per key with scalar multiplies by
    /// constants, not eight keys per AVX2 multiply into a position array:
    /// that takes fewer instructions but measured 13-20% slower on a
    /// 256 KiB split-block filter, the array's stores and reloads costing
    /// more than the multiplies they save.
    #[inline(always)]
    fn query_span<
        const W: usize,
        const PW: usize,
        const SPAN: usize,
        const OFF: usize,
        const SHIFT: u32,
    >(
        &self,
        keys: &[[u32; W]],
        salts: &[u32],
        mut f: impl FnMut(usize, [u64; PW]),
    ) {
        debug_assert_eq!(PW, self.words);
        debug_assert!(OFF * salts.len().saturating_sub(1) + (1 << (32 - SHIFT)) <= SPAN);
        let log2_blocks = self.params.blocks().trailing_zeros();
        let slices = &self.slices[..];
        // The invariant the span pointer below rests on: one span of
        // `SPAN * PW` words per block, `2^log2_blocks` blocks.
        assert_eq!(slices.len(), (SPAN * PW) << log2_blocks);
        let far = slices.len() >= PREFETCH_MIN_WORDS;
        let pos =
            |h2: u32, j: usize, salt: u32| OFF * j + (h2.wrapping_mul(salt) >> SHIFT) as usize;
        let mut pairs = [HashPair::default(); BATCH];
        for (c, keys) in keys.chunks(BATCH).enumerate() {
            let pairs = &mut pairs[..keys.len()];
            self.hasher.hash_batch(keys, pairs);
            if far {
                for &pair in pairs.iter() {
                    let base = split_block_of(pair.h1, log2_blocks) * SPAN;
                    for (j, &salt) in salts.iter().enumerate() {
                        prefetch(slices, (base + pos(pair.h2, j, salt)) * PW);
                    }
                }
            }
            for (i, &pair) in pairs.iter().enumerate() {
                let at = split_block_of(pair.h1, log2_blocks) * SPAN * PW;
                // SAFETY: `split_block_of` is below `2^log2_blocks`, so
                // `at + SPAN * PW <= (SPAN * PW) << log2_blocks`, which is
                // `slices.len()` (asserted above): the span lies inside
                // `slices`, and `slices` is borrowed for the whole call.
                let span =
                    unsafe { std::slice::from_raw_parts(slices.as_ptr().add(at), SPAN * PW) };
                let mut acc = [!0u64; PW];
                for (j, &salt) in salts.iter().enumerate() {
                    let p = pos(pair.h2, j, salt) * PW;
                    for (a, &w) in acc.iter_mut().zip(&span[p..p + PW]) {
                        *a &= w;
                    }
                }
                f(c * BATCH + i, acc);
            }
        }
    }

    /// The position-list query of the blocked and classic layouts: hash a
    /// chunk, derive every position, prefetch its word-set, AND them.
    fn query_positions<const W: usize>(&self, keys: &[[u32; W]], out: &mut [PortSet]) {
        let mut s = Scratch::new();
        let k = self.params.k();
        let chunk = self.params.chunk();
        let words = self.words;
        for (keys, out) in keys.chunks(chunk).zip(out.chunks_mut(chunk)) {
            let n = keys.len();
            self.params.positions(&self.hasher, keys, &mut s);
            let pos = &s.pos[..k * n];
            for &p in pos {
                prefetch(&self.slices, p as usize * words);
            }
            if words == 1 {
                let mut acc = [!0u64; BATCH];
                for row in pos.chunks_exact(n) {
                    for (a, &p) in acc.iter_mut().zip(row) {
                        *a &= self.slices[p as usize];
                    }
                }
                for (o, &a) in out.iter_mut().zip(&acc) {
                    *o = PortSet([a, 0, 0, 0]);
                }
            } else {
                for (i, o) in out.iter_mut().enumerate() {
                    let mut acc = [0u64; SET_WORDS];
                    acc[..words].fill(!0);
                    for j in 0..k {
                        let base = pos[j * n + i] as usize * words;
                        for (a, &w) in acc.iter_mut().zip(&self.slices[base..base + words]) {
                            *a &= w;
                        }
                    }
                    *o = PortSet(acc);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Backend;

    /// `query_batch` and `query_batch_low` of `params` on every available
    /// backend, for word-set widths 1 to 4 and chunk tails, against the
    /// per-port filters.
    fn check_against_per_port_filters(params: Params) {
        let keys: Vec<[u32; 3]> = (0..150u32)
            .map(|i| [i.wrapping_mul(0x9e37_79b9), i, 7])
            .collect();
        for backend in Backend::ALL.into_iter().filter(|b| b.is_available()) {
            let h = Hasher::with_seed(11).on_backend(backend).unwrap();
            for ports in [1usize, 8, 64, 65, 130, 200, 256] {
                let filters: Vec<CountingBloom> = (0..ports)
                    .map(|p| {
                        let mut c = CountingBloom::new(params, h.clone());
                        let mine: Vec<[u32; 3]> = keys
                            .iter()
                            .enumerate()
                            .filter(|(i, _)| (i * 31 + p * 17) % 5 < 2)
                            .map(|(_, k)| *k)
                            .collect();
                        c.insert_batch(&mine);
                        c
                    })
                    .collect();
                let pf = PortFilter::build(&filters).unwrap();
                for n in [1, 7, 64, 65, 150] {
                    let mut out = vec![PortSet::new(); n];
                    pf.query_batch(&keys[..n], &mut out);
                    let mut low = vec![None; n];
                    pf.query_batch_low(&keys[..n], |i, ports| {
                        assert!(low[i].replace(ports).is_none(), "key {i} answered twice");
                    });
                    for ((key, set), low) in keys.iter().zip(&out).zip(&low) {
                        for (p, f) in filters.iter().enumerate() {
                            assert_eq!(
                                set.contains(p),
                                f.contains(key),
                                "{params:?} {backend:?} {ports} {n}"
                            );
                        }
                        assert!((ports..MAX_PORTS).all(|p| !set.contains(p)));
                        assert_eq!(*low, Some(set.words()[0]));
                    }
                }
            }
        }
    }

    /// The split-block query (the register path) against the per-port
    /// filters.
    #[test]
    fn split_query_matches_per_port_filters_on_every_backend() {
        check_against_per_port_filters(Params::new(Layout::SplitBlock, 1 << 12, 8).unwrap());
    }

    /// The blocked query for every `k` with an unrolled loop and a few
    /// beyond (the salt loop), against the per-port filters.
    #[test]
    fn blocked_query_matches_per_port_filters_on_every_backend() {
        for k in 1..=12 {
            check_against_per_port_filters(Params::new(Layout::Blocked, 1 << 12, k).unwrap());
        }
    }

    /// The classic layout keeps the position-list path; `query_batch_low`
    /// goes through it too.
    #[test]
    fn classic_query_matches_per_port_filters() {
        check_against_per_port_filters(Params::new(Layout::Classic, 1 << 12, 5).unwrap());
    }
}
