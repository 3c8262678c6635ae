//! A flow's bins: the packed indices of [`SfbKey`] and [`SfbTag`], how a
//! hash pair becomes them (slices or partitioned rows), and the batched
//! hashing of [`KeyBatch`] and [`PortKeys`].

use kernels::HashPair;

use crate::flow::FlowKey;
use crate::packet::{Batch, Verdict};

use super::algorithm::Sfb;
use super::config::BinIndex;

/// A flow's bins: for each bin set whose hash was computed, its bin indices
/// packed in a `u64` (level `r` in the low `log2 N` bits of field `r`, see
/// [`field_width`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SfbKey {
    pub(super) packed: [u64; 2],
    /// Bit `s` set: `packed[s]` is valid. A full word: a narrower field,
    /// written alone and read back with its neighbours when the key is
    /// copied, stalls store-to-load forwarding on the hot path.
    pub(super) sets: u64,
}

impl SfbKey {
    /// Whether the key holds bins of set `set` (0 or 1).
    #[inline]
    pub fn has_set(&self, set: usize) -> bool {
        self.sets & (1 << set) != 0
    }

    /// The packed bin indices of set `set` (meaningful only when
    /// [`has_set`](Self::has_set)).
    #[inline]
    pub fn packed(&self, set: usize) -> u64 {
        // A select, not an index: indexing would keep the key in memory.
        if set & 1 == 0 {
            self.packed[0]
        } else {
            self.packed[1]
        }
    }

    /// Level `r`'s bin in set `set` for `levels` levels of `2^log2` bins
    /// (the low `log2` bits of field `r`, see [`field_width`]).
    #[inline]
    pub fn bin(&self, set: usize, r: usize, levels: usize, log2: u32) -> u32 {
        let mask = (1u64 << log2) - 1;
        let shift = r as u32 * field_width(levels);
        (self.packed(set).checked_shr(shift).unwrap_or(0) & mask) as u32
    }
}

/// Where a queued packet was counted: carried with it from enqueue to
/// dequeue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SfbTag(pub(super) SfbKey);

impl SfbTag {
    /// The bin sets the packet is counted in (bit `s` for set `s`).
    #[inline]
    pub fn sets(&self) -> u8 {
        self.0.sets as u8
    }
}

/// Row `r`'s index of `pair` in a partitioned layout of `2^log2` entries:
/// the formula of [`kernels::index`], bit for bit.
#[inline]
pub fn row_index(pair: HashPair, r: usize, log2: u32) -> u32 {
    let v = pair.h1.wrapping_add((r as u32).wrapping_mul(pair.h2 | 1));
    v.checked_shr(32 - log2).unwrap_or(0)
}

/// The pair as one 64-bit word `h2:h1`: with [`BinIndex::Slices`], the
/// packed bin indices themselves.
#[inline]
pub fn slices(pair: HashPair) -> u64 {
    (u64::from(pair.h2) << 32) | u64::from(pair.h1)
}

/// The bits of the packed word given to each of `levels` levels
/// (`64 / levels`, at least `log2 N` since `levels * log2 N <= 64`): level
/// `r`'s index is the low `log2 N` bits of bits `r * width ..`. Spread
/// evenly, eight levels take one byte each, and the kernel's offset word
/// ([`sfb_kernel::offsets`]) is then two bit operations away.
///
/// [`sfb_kernel::offsets`]: kernels::sfb::offsets
#[inline]
pub const fn field_width(levels: usize) -> u32 {
    64 / if levels == 0 { 1 } else { levels as u32 }
}

/// Level `r`'s bin of `pair` when bins are [`BinIndex::Slices`] of
/// `levels` levels: the low `log2` bits of field `r` of `h2:h1` (see
/// [`field_width`]).
#[inline]
pub fn slice_index(pair: HashPair, r: usize, levels: usize, log2: u32) -> u32 {
    let mask = (1u64 << log2) - 1;
    let shift = r as u32 * field_width(levels);
    (slices(pair).checked_shr(shift).unwrap_or(0) & mask) as u32
}

/// Reusable buffers that turn a batch of flow keys into [`SfbKey`]s with one
/// `hash_batch` call per bin set in use (plus one `partitioned` call with
/// [`BinIndex::Partitioned`]).
#[derive(Debug, Clone, Default)]
pub struct KeyBatch {
    pairs: Vec<HashPair>,
    idx: Vec<u32>,
    /// The last batch's keys, whole (a key is then one indexed read).
    keys: Vec<SfbKey>,
}

impl KeyBatch {
    /// Empty buffers (they grow to the largest batch and stay).
    pub fn new() -> Self {
        KeyBatch::default()
    }

    /// Hashes `keys` for `sfb`'s sets in use.
    pub fn hash<const W: usize>(&mut self, sfb: &Sfb, keys: &[[u32; W]]) {
        let n = keys.len();
        let sets = sfb.sets_in_use();
        self.keys.clear();
        // A set not in use has no words: 0.
        self.keys.resize(
            n,
            SfbKey {
                packed: [0; 2],
                sets: u64::from(sets),
            },
        );
        if n == 0 {
            return;
        }
        self.pairs.resize(n, HashPair::default());
        for set in 0..2 {
            if sets & (1 << set) == 0 {
                continue;
            }
            let h = &sfb.hashers[set];
            h.hash_batch(keys, &mut self.pairs);
            match sfb.cfg.index {
                BinIndex::Slices => {
                    for (k, &p) in self.keys.iter_mut().zip(&self.pairs) {
                        k.packed[set] = slices(p);
                    }
                }
                BinIndex::Partitioned => {
                    self.idx.resize(sfb.levels * n, 0);
                    h.partitioned(&self.pairs, sfb.layout, &mut self.idx);
                    for (r, row) in self.idx.chunks_exact(n).enumerate() {
                        let shift = r as u32 * sfb.width;
                        for (k, &i) in self.keys.iter_mut().zip(row) {
                            k.packed[set] |= u64::from(i) << shift;
                        }
                    }
                }
            }
        }
    }

    /// Keys hashed by the last [`hash`](Self::hash).
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the last batch was empty.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The bins of key `i` of the last batch.
    ///
    /// # Panics
    /// If `i >= len()`.
    #[inline]
    pub fn key(&self, i: usize) -> SfbKey {
        self.keys[i]
    }

    /// The last batch's keys, in order.
    #[inline]
    pub fn keys(&self) -> &[SfbKey] {
        &self.keys
    }
}

/// A packet of the batch that leaves by the port: its place in the batch
/// and its key's place in one family's [`KeyBatch`].
#[derive(Debug, Clone, Copy)]
struct Pending {
    packet: usize,
    wide: bool,
    j: usize,
}

/// The SFB keys of the packets of a batch that leave by one egress port,
/// hashed in one [`KeyBatch`] per address family present (IPv4 at four
/// words, IPv6 at ten; frames without a flow key share the all-zero key).
/// Reused across batches: [`gather`](Self::gather), then
/// [`hash`](Self::hash), then [`packet`](Self::packet) and
/// [`key`](Self::key) for each of the [`len`](Self::len) packets, in batch
/// order. Used by the router's egress stage
/// ([`crate::stage::egress`]).
#[derive(Debug, Clone, Default)]
pub struct PortKeys {
    k4: Vec<[u32; 4]>,
    k10: Vec<[u32; 10]>,
    b4: KeyBatch,
    b10: KeyBatch,
    pending: Vec<Pending>,
}

impl PortKeys {
    /// Empty buffers.
    pub fn new() -> Self {
        PortKeys::default()
    }

    /// Collects the packets of `batch` forwarded (or marked) to `port`,
    /// leaving out, when `skip_ingress`, those that arrived on `port`
    /// (unless routed back out of it:
    /// [`Packet::to_ingress`](crate::packet::Packet::to_ingress));
    /// returns how many.
    pub fn gather(&mut self, batch: &Batch, port: u8, skip_ingress: bool) -> usize {
        self.k4.clear();
        self.k10.clear();
        self.pending.clear();
        for (i, p) in batch.packets().iter().enumerate() {
            let ports = match p.verdict {
                Verdict::Forward(ps) | Verdict::Mark(ps) => ps,
                _ => continue,
            };
            if !ports.contains(port)
                || (skip_ingress
                    && p.ingress_mask() & crate::packet::PortSet::single(port).mask() != 0)
            {
                continue;
            }
            // By reference: a copy of the key read back by field would
            // miss store-to-load forwarding.
            match p.parsed.as_ref().and_then(|x| x.flow.as_ref()) {
                Some(FlowKey::V6(f)) => {
                    self.pending.push(Pending {
                        packet: i,
                        wide: true,
                        j: self.k10.len(),
                    });
                    self.k10.push(f.words10());
                }
                other => {
                    self.pending.push(Pending {
                        packet: i,
                        wide: false,
                        j: self.k4.len(),
                    });
                    self.k4.push(match other {
                        Some(FlowKey::V4(f)) => f.words4(),
                        _ => [0; 4],
                    });
                }
            }
        }
        self.pending.len()
    }

    /// Hashes the gathered keys with `sfb`'s bin sets (tick `sfb` first).
    pub fn hash(&mut self, sfb: &Sfb) {
        self.b4.hash(sfb, &self.k4);
        self.b10.hash(sfb, &self.k10);
    }

    /// Packets gathered.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether none was gathered.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// The batch index of gathered packet `k`.
    ///
    /// # Panics
    /// If `k >= len()`.
    pub fn packet(&self, k: usize) -> usize {
        self.pending[k].packet
    }

    /// The bins of gathered packet `k` (after [`hash`](Self::hash)).
    ///
    /// # Panics
    /// If `k >= len()`.
    pub fn key(&self, k: usize) -> SfbKey {
        let pd = self.pending[k];
        if pd.wide {
            self.b10.key(pd.j)
        } else {
            self.b4.key(pd.j)
        }
    }
}

#[cfg(test)]
mod tests {
    use kernels::Hasher;
    use kernels::index::Partitioned;

    use super::*;
    use crate::clock::Timestamp;
    use crate::stage::sfb::SfbConfig;

    #[test]
    fn row_index_matches_the_kernels() {
        for log2 in [0, 1, 4, 8] {
            let layout = Partitioned::new(8, log2);
            let h = Hasher::with_seed(9);
            let keys: Vec<[u32; 4]> = (0..37u32).map(|i| [i, i * 7, 3, 6]).collect();
            let mut pairs = vec![HashPair::default(); keys.len()];
            h.hash_batch(&keys, &mut pairs);
            let mut out = vec![0u32; 8 * keys.len()];
            h.partitioned(&pairs, layout, &mut out);
            for (i, p) in pairs.iter().enumerate() {
                for r in 0..8 {
                    assert_eq!(out[r * keys.len() + i], row_index(*p, r, log2));
                }
            }
        }
    }

    #[test]
    fn key_batch_matches_key_one() {
        for index in [BinIndex::Slices, BinIndex::Partitioned] {
            let mut sfb = Sfb::new(SfbConfig {
                seed: Some(3),
                rehash_ms: 100,
                db_ms: 10,
                index,
                ..SfbConfig::default()
            })
            .unwrap();
            let keys: Vec<[u32; 4]> = (0..45u32).map(|i| [i, 1, 2, 17]).collect();
            let mut kb = KeyBatch::new();
            for t in [0u64, 95_000_000] {
                sfb.tick(Timestamp::from_nanos(t));
                kb.hash(&sfb, &keys);
                for (i, k) in keys.iter().enumerate() {
                    let key = kb.key(i);
                    assert_eq!(key, sfb.key_one(k));
                    assert!((0..8).all(|r| key.bin(0, r, 8, 4) < 16));
                }
            }
            assert!(sfb.double_buffering());
            assert_eq!(sfb.sets_in_use(), 0b11);
        }
    }

    #[test]
    fn slices_are_the_pair_bits() {
        let p = HashPair {
            h1: 0x7654_3210,
            h2: 0xfedc_ba98,
        };
        // Sixteen levels: one nibble each.
        let got: Vec<u32> = (0..16).map(|r| slice_index(p, r, 16, 4)).collect();
        assert_eq!(got, (0..16).collect::<Vec<u32>>());
        // Eight levels: the low bits of each byte.
        let got: Vec<u32> = (0..8).map(|r| slice_index(p, r, 8, 4)).collect();
        assert_eq!(got, [0, 2, 4, 6, 8, 0xa, 0xc, 0xe]);
        assert_eq!(slice_index(p, 0, 8, 8), 0x10);
        assert_eq!(slice_index(p, 7, 8, 8), 0xfe);
        assert_eq!(slice_index(p, 3, 8, 0), 0);
        // Two levels of 20 bits: bits 0.. and 32...
        assert_eq!(slice_index(p, 1, 2, 20), 0xcba98);
        let bad = SfbConfig {
            levels: 16,
            log2_bins: 5,
            ..SfbConfig::default()
        };
        assert_eq!(bad.validate().unwrap_err().key, "log2_bins");
    }
}
