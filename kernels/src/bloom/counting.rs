//! The counting Bloom filter: 4-bit saturating counters.

use super::filter::Bloom;
use super::params::{Params, Scratch, prefetch};
use crate::Hasher;

/// The largest counter value; a counter that reaches it is saturated.
pub const COUNTER_MAX: u8 = 15;

/// A counting Bloom filter (Fan, Cao, Almeida, Broder 2000) with 4-bit
/// counters, two per byte: counter `p` is the low nibble of byte `p / 2`
/// when `p` is even, the high nibble when odd. Same positions as a
/// [`Bloom`] with the same [`Params`] and key.
///
/// A counter that reaches [`COUNTER_MAX`] saturates: it is never
/// incremented past it nor decremented again. Every other counter is at
/// least the number of live insertions that touched it, so removing an
/// inserted item never clears a position another live item needs: there are
/// no false negatives under any sequence of inserts and removes *of inserted
/// items*. (Removing an item that was never inserted but tests positive, a
/// false positive, can cause false negatives, as in every counting filter.)
/// With 4 bits and `k` at the optimum the chance that any counter saturates
/// is about `m * 1.37e-15` (Fan et al.), so saturation costs nothing in
/// practice but keeps the guarantee when it happens.
#[derive(Debug, Clone)]
pub struct CountingBloom {
    params: Params,
    hasher: Hasher,
    nibbles: Vec<u8>,
}

impl CountingBloom {
    /// An empty filter of `m` counters.
    pub fn new(params: Params, hasher: Hasher) -> Self {
        CountingBloom {
            params,
            hasher,
            nibbles: vec![0; (params.bits() / 2) as usize],
        }
    }

    /// The geometry.
    pub fn params(&self) -> Params {
        self.params
    }

    /// The hasher.
    pub fn hasher(&self) -> &Hasher {
        &self.hasher
    }

    /// Counter `p` (`p < m`).
    ///
    /// # Panics
    /// If `p >= m`.
    #[inline(always)]
    pub fn counter(&self, p: u64) -> u8 {
        let b = self.nibbles[(p / 2) as usize];
        (b >> ((p & 1) * 4)) & 0xf
    }

    #[inline(always)]
    fn update(&mut self, p: u32, inc: bool) {
        let shift = (p & 1) * 4;
        let b = &mut self.nibbles[(p / 2) as usize];
        let c = (*b >> shift) & 0xf;
        let c2 = if c == COUNTER_MAX {
            c
        } else if inc {
            c + 1
        } else {
            c.saturating_sub(1)
        };
        *b = (*b & !(0xf << shift)) | (c2 << shift);
    }

    /// Inserts one key.
    pub fn insert<const W: usize>(&mut self, key: &[u32; W]) {
        self.insert_batch(std::slice::from_ref(key));
    }

    /// Inserts every key (hash a chunk, prefetch, increment).
    pub fn insert_batch<const W: usize>(&mut self, keys: &[[u32; W]]) {
        let mut s = Scratch::new();
        let k = self.params.k();
        for chunk in keys.chunks(self.params.chunk()) {
            self.params.positions(&self.hasher, chunk, &mut s);
            let pos = &s.pos[..k * chunk.len()];
            for &p in pos {
                prefetch(&self.nibbles, (p / 2) as usize);
            }
            for &p in pos {
                self.update(p, true);
            }
        }
    }

    /// Removes one inserted key: decrements its counters, except saturated
    /// ones. A key the filter does not contain is left alone and `false`
    /// returned (it was certainly never inserted).
    pub fn remove<const W: usize>(&mut self, key: &[u32; W]) -> bool {
        let mut s = Scratch::new();
        self.params
            .positions(&self.hasher, std::slice::from_ref(key), &mut s);
        let pos = &s.pos[..self.params.k()];
        if pos.iter().any(|&p| self.counter(u64::from(p)) == 0) {
            return false;
        }
        for &p in pos {
            self.update(p, false);
        }
        true
    }

    /// Whether the key may be present: all its counters are non-zero.
    pub fn contains<const W: usize>(&self, key: &[u32; W]) -> bool {
        let mut s = Scratch::new();
        self.params
            .positions(&self.hasher, std::slice::from_ref(key), &mut s);
        s.pos[..self.params.k()]
            .iter()
            .all(|&p| self.counter(u64::from(p)) != 0)
    }

    /// The number of saturated counters.
    pub fn saturated(&self) -> u64 {
        (0..self.params.bits())
            .filter(|&p| self.counter(p) == COUNTER_MAX)
            .count() as u64
    }

    /// Iterates over the positions whose counter is non-zero, in order.
    pub(crate) fn nonzero(&self) -> impl Iterator<Item = (u64, bool)> + '_ {
        self.nibbles.iter().enumerate().flat_map(|(i, &b)| {
            let p = 2 * i as u64;
            [(p, b & 0xf != 0), (p + 1, b >> 4 != 0)]
        })
    }

    /// The plain filter with bit `p` set iff counter `p` is non-zero: same
    /// layout, `m`, `k` and key, so `to_bloom().contains(x) ==
    /// self.contains(x)` for every key.
    pub fn to_bloom(&self) -> Bloom {
        let mut b = Bloom::new(self.params, self.hasher.clone());
        for (p, set) in self.nonzero() {
            if set {
                b.set_position(p as u32);
            }
        }
        b
    }
}
