//! The bit-sliced per-port filter.

use std::fmt;

use super::counting::CountingBloom;
use super::params::{BATCH, Incompatible, Layout, Params, SPLIT_BLOCK_BITS, Scratch, prefetch};
use crate::lanes::{SPLIT_SALTS, split_block_of};
use crate::{HashPair, Hasher};

/// The most ports a [`PortFilter`] holds.
pub const MAX_PORTS: usize = 256;
const SET_WORDS: usize = MAX_PORTS / 64;
/// Split-block port filters of at least this many words (4 MiB: beyond a
/// typical L2 and most of a shared L3 slice) prefetch every position a
/// chunk ahead; smaller ones are left to the out-of-order core.
const PREFETCH_MIN_WORDS: usize = 1 << 19;
/// Positions (word-sets) per split block.
const SPAN: usize = SPLIT_BLOCK_BITS as usize;

/// The bit of split-block word `j` for a key's `h2`, `salt` being
/// `SALTS[j]`: `(h2 * salt) >> 27`, below 32 (the definition of
/// [`crate::index::SplitBlock::mask`]), so `32 j + bit < 256` and the
/// index into a key's span needs no check.
#[inline(always)]
fn bit_of(h2: u32, salt: u32) -> usize {
    (h2.wrapping_mul(salt) >> 27) as usize
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
/// (2 KiB per 64 ports), one position in each run of 32. Built from per-port [`CountingBloom`]s (the
/// control path), all with the same [`Params`] and key.
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
    /// Split block (the default layout): per chunk of 64 keys, hash the
    /// chunk once ([`Hasher::hash_batch`]), then per key take its block
    /// from `h1` and its eight in-word bits `(h2 * SALT[j]) >> 27` in
    /// registers (a multiply by a constant and a shift each) and AND the
    /// eight word-sets (one `u64` per 64 ports) they name: about three
    /// instructions per position, no position array, no per-position bounds
    /// check (a key's block is sliced once, and a bit below 32 stays inside
    /// it). Other layouts: hash a chunk, derive and prefetch every position,
    /// AND the word-sets.
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
        if self.params.layout() == Layout::SplitBlock {
            match self.words {
                1 => self.query_split::<W, 1>(keys, out),
                2 => self.query_split::<W, 2>(keys, out),
                3 => self.query_split::<W, 3>(keys, out),
                _ => self.query_split::<W, 4>(keys, out),
            }
        } else {
            self.query_positions(keys, out);
        }
    }

    /// The split-block query for `PW = self.words` words per word-set (see
    /// [`PortFilter::query_batch`]). Position `32 j + b` of block `B` is
    /// word-set `256 B + 32 j + b`, so a key touches one span of `256 * PW`
    /// words (2 KiB per 64 ports), sliced once; its eight loads are
    /// independent and the out-of-order core overlaps them across keys.
    /// Filters of at least [`PREFETCH_MIN_WORDS`] words prefetch every
    /// key's eight lines first.
    ///
    /// The in-word bits are derived per key with scalar multiplies by
    /// constants: measured against deriving them eight keys per AVX2
    /// multiply into a position array (fewer instructions, 6.0 against 5.3
    /// ns/key on a 256 KiB filter), the array's stores and reloads cost more
    /// than the multiplies they save.
    #[inline]
    fn query_split<const W: usize, const PW: usize>(&self, keys: &[[u32; W]], out: &mut [PortSet]) {
        let log2_blocks = self.params.blocks().trailing_zeros();
        let slices = &self.slices[..];
        let far = slices.len() >= PREFETCH_MIN_WORDS;
        let mut pairs = [HashPair::default(); BATCH];
        for (keys, out) in keys.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            let pairs = &mut pairs[..keys.len()];
            self.hasher.hash_batch(keys, pairs);
            if far {
                for &pair in pairs.iter() {
                    let base = split_block_of(pair.h1, log2_blocks) * SPAN;
                    for (j, &salt) in SPLIT_SALTS.iter().enumerate() {
                        prefetch(slices, (base + 32 * j + bit_of(pair.h2, salt)) * PW);
                    }
                }
            }
            for (o, &pair) in out.iter_mut().zip(pairs.iter()) {
                let at = split_block_of(pair.h1, log2_blocks) * SPAN * PW;
                let span = &slices[at..][..SPAN * PW];
                let mut acc = [!0u64; PW];
                for (j, &salt) in SPLIT_SALTS.iter().enumerate() {
                    let p = (32 * j + bit_of(pair.h2, salt)) * PW;
                    for (a, &w) in acc.iter_mut().zip(&span[p..p + PW]) {
                        *a &= w;
                    }
                }
                let mut words = [0u64; SET_WORDS];
                words[..PW].copy_from_slice(&acc);
                *o = PortSet(words);
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

    /// The split-block query on every available backend, for every word-set
    /// width (1 to 4 words) and chunk tails, against the per-port filters.
    #[test]
    fn split_query_matches_per_port_filters_on_every_backend() {
        let params = Params::new(Layout::SplitBlock, 1 << 12, 8).unwrap();
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
                    for (key, set) in keys.iter().zip(&out) {
                        for (p, f) in filters.iter().enumerate() {
                            assert_eq!(set.contains(p), f.contains(key), "{backend:?} {ports} {n}");
                        }
                        assert!((ports..MAX_PORTS).all(|p| !set.contains(p)));
                    }
                }
            }
        }
    }
}
