//! One stratum's exact table: open addressing over cache-line buckets of
//! four entries, probed linearly bucket after bucket, addressed by the hash
//! pair the lookup already has, so a batch can prefetch every positive's
//! bucket before it probes any.
//!
//! A general-purpose map (hashbrown's `HashTable` served here first) finds
//! its bucket through a control-byte array and then the entry, two
//! dependent loads into a table of tens of megabytes, with no way to ask
//! for either ahead of the probe. Here the bucket is the one line the
//! filter's positive points at. The table doubles when live entries pass
//! 3/4 of the slots (so a full IPv4 table's largest stratum, 1.4M entries,
//! takes 32 MiB, not 64) and sweeps out removed entries when live and
//! removed ones pass 7/8; with four slots a bucket, most probes still end
//! in their first bucket.

use kernels::{HashPair, prefetch};

/// A `len` that marks a never-used slot (ends a probe).
const EMPTY: u8 = u8::MAX;
/// A `len` that marks a removed entry (a probe goes on past it).
const REMOVED: u8 = u8::MAX - 1;
/// Entries per bucket.
const SLOTS: usize = 4;

/// One expanded entry: `prefix` is masked to the stratum's target length;
/// `len` and `nexthop` are those of the longest route of the stratum that
/// covers it (`len` is [`EMPTY`] or [`REMOVED`] in a free slot).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry<A> {
    pub(crate) prefix: A,
    pub(crate) len: u8,
    pub(crate) nexthop: u32,
}

/// Four entries, cache-line aligned (one line for IPv4, two for IPv6).
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct Bucket<A>([Entry<A>; SLOTS]);

/// An open-addressing table of [`Entry`]s keyed by their hash pair.
#[derive(Debug, Clone)]
pub(crate) struct ExactTable<A> {
    buckets: Vec<Bucket<A>>,
    /// `buckets.len() - 1` (a power of two minus one).
    mask: usize,
    live: usize,
    removed: usize,
}

impl<A: Copy + Default + PartialEq> ExactTable<A> {
    /// An empty table of one bucket.
    pub(crate) fn new() -> Self {
        ExactTable::with_buckets(1)
    }

    fn with_buckets(n: usize) -> Self {
        let free = Entry {
            prefix: A::default(),
            len: EMPTY,
            nexthop: 0,
        };
        ExactTable {
            buckets: vec![Bucket([free; SLOTS]); n],
            mask: n - 1,
            live: 0,
            removed: 0,
        }
    }

    /// Entries present.
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    /// Bytes of buckets.
    pub(crate) fn bytes(&self) -> usize {
        size_of_val(self.buckets.as_slice())
    }

    /// Whether no entry is present.
    pub(crate) fn is_empty(&self) -> bool {
        self.live == 0
    }

    #[inline(always)]
    fn home(&self, pair: HashPair) -> usize {
        pair.h1 as usize & self.mask
    }

    /// Asks for the bucket a lookup of `pair` starts at.
    #[inline(always)]
    pub(crate) fn prefetch(&self, pair: HashPair) {
        prefetch(&self.buckets, self.home(pair));
    }

    /// The slot holding `prefix`, if present.
    #[inline(always)]
    fn position(&self, pair: HashPair, prefix: A) -> Option<(usize, usize)> {
        let mut b = self.home(pair);
        // A table is never full (at most 7/8 of its slots live or removed),
        // so some bucket on the way has an empty slot and ends the probe.
        loop {
            let bucket = &self.buckets[b].0;
            for (s, e) in bucket.iter().enumerate() {
                if e.prefix == prefix && e.len < REMOVED {
                    return Some((b, s));
                }
            }
            if bucket.iter().any(|e| e.len == EMPTY) {
                return None;
            }
            b = (b + 1) & self.mask;
        }
    }

    /// The entry for `prefix` (masked to the stratum's length) whose hash
    /// pair is `pair`.
    #[inline(always)]
    pub(crate) fn find(&self, pair: HashPair, prefix: A) -> Option<&Entry<A>> {
        self.position(pair, prefix)
            .map(|(b, s)| &self.buckets[b].0[s])
    }

    /// As [`find`](Self::find), to change the entry in place.
    pub(crate) fn find_mut(&mut self, pair: HashPair, prefix: A) -> Option<&mut Entry<A>> {
        self.position(pair, prefix)
            .map(|(b, s)| &mut self.buckets[b].0[s])
    }

    /// Adds an entry not yet present (`entry.len` a real length); `rehash`
    /// gives the pair of an entry already in the table when it grows.
    pub(crate) fn insert_new(
        &mut self,
        pair: HashPair,
        entry: Entry<A>,
        rehash: impl Fn(&Entry<A>) -> HashPair,
    ) {
        debug_assert!(entry.len < REMOVED && self.find(pair, entry.prefix).is_none());
        if 8 * (self.live + self.removed + 1) > 7 * SLOTS * self.buckets.len() {
            // Grow when live entries fill 3/4 of it, else only sweep out
            // the removed ones.
            let n = if 4 * (self.live + 1) > 3 * SLOTS * self.buckets.len() {
                2 * self.buckets.len()
            } else {
                self.buckets.len()
            };
            self.resize(n, &rehash);
        }
        self.place(pair, entry);
        self.live += 1;
    }

    /// Stores `entry` in the first free slot from its home bucket on.
    fn place(&mut self, pair: HashPair, entry: Entry<A>) {
        let mut b = self.home(pair);
        loop {
            if let Some(slot) = self.buckets[b].0.iter_mut().find(|e| e.len >= REMOVED) {
                if slot.len == REMOVED {
                    self.removed -= 1;
                }
                *slot = entry;
                return;
            }
            b = (b + 1) & self.mask;
        }
    }

    fn resize(&mut self, n: usize, rehash: &impl Fn(&Entry<A>) -> HashPair) {
        let old = std::mem::replace(self, ExactTable::with_buckets(n));
        for e in old.iter() {
            self.place(rehash(e), *e);
            self.live += 1;
        }
    }

    /// Removes the entry for `prefix`; whether it was present.
    pub(crate) fn remove(&mut self, pair: HashPair, prefix: A) -> bool {
        match self.position(pair, prefix) {
            Some((b, s)) => {
                self.buckets[b].0[s].len = REMOVED;
                self.live -= 1;
                self.removed += 1;
                true
            }
            None => false,
        }
    }

    /// Every entry present.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Entry<A>> + '_ {
        self.buckets
            .iter()
            .flat_map(|b| b.0.iter())
            .filter(|e| e.len < REMOVED)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// A pair whose home bucket is `home` in any table of at least
    /// `home + 1` buckets.
    fn pair(home: u32) -> HashPair {
        HashPair { h1: home, h2: 0 }
    }

    fn entry(prefix: u32, len: u8) -> Entry<u32> {
        Entry {
            prefix,
            len,
            nexthop: prefix ^ 0x5a5a,
        }
    }

    /// Keys sharing few home buckets chain across buckets (and wrap around
    /// the end); removals leave tombstones that probes pass and inserts
    /// reuse; growth and sweeps keep every live entry. Checked against a
    /// `HashMap` after every step.
    #[test]
    fn chains_tombstones_and_growth_match_a_map() {
        // The home of key k: one of three buckets, the last one near the
        // end of the first tables (so chains wrap).
        let home = |k: u32| [0, 1, 7][k as usize % 3];
        let rehash = |e: &Entry<u32>| pair(home(e.prefix));
        let mut t = ExactTable::<u32>::new();
        let mut model = HashMap::new();
        let mut rng = 1u64;
        for step in 0..20_000u32 {
            let k = (kernels::splitmix64(&mut rng) % 600) as u32;
            if model.contains_key(&k) && step % 3 != 0 {
                assert!(t.remove(pair(home(k)), k));
                model.remove(&k);
            } else if let Some(e) = t.find_mut(pair(home(k)), k) {
                e.nexthop = step;
                model.insert(k, step);
            } else {
                t.insert_new(pair(home(k)), entry(k, 24), rehash);
                model.insert(k, k ^ 0x5a5a);
            }
            assert_eq!(t.len(), model.len());
            if step % 97 == 0 {
                for k in 0..600 {
                    let got = t.find(pair(home(k)), k).map(|e| e.nexthop);
                    assert_eq!(got, model.get(&k).copied(), "key {k} at step {step}");
                }
                assert_eq!(t.iter().count(), model.len());
            }
        }
        assert!(!t.remove(pair(0), 600));
    }
}
