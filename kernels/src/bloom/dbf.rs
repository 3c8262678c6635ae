//! The Distributed Bloom Filter (DBF): set reconciliation between peers in
//! which every exchange uses a filter mapping of its own, built from hashes
//! the peers stored once per element.
//!
//! # What it is for
//!
//! Two peers reconcile sets with a Bloom filter like this: the sender builds
//! a filter of its set and sends it; the receiver answers with each of its
//! elements the filter does not contain, which the sender lacks. A filter
//! never misses an element it holds, so nothing the sender already has comes
//! back; but a false positive hides an element the sender lacks. With one
//! fixed mapping from elements to bits (a standard filter, the same hash
//! functions everywhere), the hidden element is hidden from every peer and
//! in every later exchange, since the sender's bits only fill up as its set
//! grows. Such a network needs filters with a low false-positive rate, which
//! means many bits per element, or it never converges.
//!
//! "The Distributed Bloom Filter" (Ramabaja and Avdullahu, 2019) changes the
//! mapping instead: each pair of peers uses its own mapping, and optionally
//! each exchange a new one (a nonce). A false positive is then a coin flip
//! per pair or per exchange, not a property of the element, so an element
//! reaches a node as soon as one exchange with one holder does not hide it.
//! Filters can then run at very high false-positive rates (the paper uses
//! 50%, about 1.44 bits per element) and a network still converges: with a
//! nonce per exchange, every element eventually gets through.
//!
//! A new mapping per exchange would be expensive if every element had to be
//! rehashed. The paper's second idea removes that cost: every element is
//! hashed once, when it is learned, and that stored hash is kept beside it;
//! a mapping is seed material that is combined with the stored hash, so
//! building a filter for a new peer or a new nonce costs index derivation
//! only.
//!
//! # Here
//!
//! * An element ([`Element`]) is hashed once by the kernels'
//!   [`Hasher`] into its stored [`HashPair`] (64 bits) when a
//!   [`DbfSet`] learns it. Both peers must hash with the same key, so that
//!   equal elements have equal stored hashes (the filter's transfer header
//!   carries the key's id, and decoding with another key is refused).
//! * A [`Mapping`] is 64 bits of seed material: from the pair's two node
//!   identifiers ([`Mapping::for_pair`], the same for both directions), made
//!   per exchange with [`Mapping::with_nonce`]. An element's pair under a
//!   mapping is `mix(stored ^ seed)`, `mix` the SplitMix64 finaliser (two
//!   multiplies, three xor-shifts, a bijection of 64 bits); the filter's
//!   layout then derives the `k` positions from that pair exactly as it does
//!   from a key's hash ([`Params`]).
//! * [`DbfFilter`] is a [`Bloom`] filled through a mapping; it travels in
//!   the transfer forms of [`Bloom`] (range-coded: [`DbfFilter::to_message`],
//!   sized for the fewest bytes by [`Params::for_transfer`]). The mapping is
//!   not on the wire: the peers derive it (the protocol carries the nonce).
//! * [`DbfSet`] holds `(element, stored hash, last reported)` entries,
//!   builds the sender's filter ([`DbfSet::filter`]), lists on the
//!   receiver's side the elements a filter does not contain
//!   ([`DbfSet::missing`]), and expires entries nobody reported for a
//!   configured time ([`DbfSet::expire`]).
//!
//! Building a filter and listing the missing elements allocate nothing per
//! element: mapped pairs go through a 64-pair buffer on the stack into the
//! filter's batch paths.
//!
//! # Why the mapping mixes after the XOR
//!
//! The paper derives an element's positions as `(H ^ g_j) mod m`, `H` the
//! stored hash and `g_j` the mapping's values. With `m` a power of two that
//! is `(H mod m) ^ (g_j mod m)`: two elements share a position under one
//! mapping exactly when they share it under every mapping, so every
//! mapping has the same false positives and the DBF degenerates into a
//! standard filter (`kernels/tests/dbf.rs` measures it). With other `m` the
//! reduction breaks the XOR structure only partly. One bijective mixing step
//! after the XOR makes the positions under different seeds behave as
//! independent hashes (the tests measure that a non-member is a false
//! positive under two mappings with the product of the two rates) and still
//! costs a few instructions per element, not a rehash of the element.
//!
//! # Example
//!
//! ```
//! use kernels::Hasher;
//! use kernels::bloom::Params;
//! use kernels::bloom::dbf::{DbfFilter, DbfSet, Mapping};
//!
//! // Two routers with the same hash key; flows as [u32; 4] words.
//! let flows: Vec<[u32; 4]> = (0..300u32).map(|i| [i, 0x0a00_0001, 80, 6]).collect();
//! let (mut a, mut b) = (
//!     DbfSet::new(Hasher::with_seed(9), 60, 10_000),
//!     DbfSet::new(Hasher::with_seed(9), 60, 10_000),
//! );
//! for f in &flows[..200] {
//!     a.report(*f, 0).unwrap();
//! }
//! for f in &flows[100..] {
//!     b.report(*f, 0).unwrap();
//! }
//!
//! // A sends a filter of its set at a 50% false-positive rate, under the
//! // pair's mapping with this exchange's nonce.
//! let mapping = Mapping::for_pair(1, 2).with_nonce(7);
//! let params = Params::for_transfer(a.len() as u64, 0.5, 1 << 20).unwrap();
//! let (bytes, _sizes) = a.filter(params, mapping).to_message(a.len() as u64, 16);
//!
//! // B decodes it and answers with the flows A lacks (about half of them:
//! // the other half are false positives this time).
//! let filter = DbfFilter::from_bytes(&bytes, Hasher::with_seed(9), mapping).unwrap();
//! let answer: Vec<([u32; 4], u64)> = b.missing(&filter).map(|(f, t)| (*f, t)).collect();
//! assert!(answer.iter().all(|(f, _)| f[0] >= 200), "only flows A lacks");
//! assert!(answer.len() > 20 && answer.len() < 80);
//! for (f, t) in answer {
//!     a.report(f, t).unwrap();
//! }
//! ```

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;

use super::filter::Bloom;
use super::params::{BATCH, Params};
use super::transfer::{DecodeError, MessageSizes};
use crate::seed::splitmix64;
use crate::{HashPair, Hasher};

/// An element a [`DbfSet`] can hold: something with equality (the set's
/// index) and a stored hash computed once, when the element is learned.
pub trait Element: Clone + Eq + Hash {
    /// The element's stored hash under `hasher`'s key.
    fn stored_hash(&self, hasher: &Hasher) -> HashPair;
}

/// Keys of `W` 32-bit words (flow keys, group addresses), hashed by the
/// kernels' keyed hash.
impl<const W: usize> Element for [u32; W] {
    fn stored_hash(&self, hasher: &Hasher) -> HashPair {
        hasher.hash_one(self)
    }
}

/// Domain constants, so a pair's seed and a nonce's never coincide with
/// another derivation's for the same integers.
const PAIR_DOMAIN: u64 = 0x6462_665f_7061_6972; // "dbf_pair"
const NONCE_DOMAIN: u64 = 0x6462_665f_6e6f_6e63; // "dbf_nonc"

/// The mapping of one exchange: 64 bits of seed material. An element's
/// positions under it come from `mix(stored ^ seed)` (see the [module
/// docs](self)); two different seeds give (measurably) independent false
/// positives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mapping {
    seed: u64,
}

impl Mapping {
    /// A mapping from explicit seed material. One mapping shared by every
    /// pair (say `Mapping::new(0)`) is a standard Bloom filter.
    pub const fn new(seed: u64) -> Self {
        Mapping { seed }
    }

    /// The mapping of the pair of nodes `a` and `b` (their identifiers):
    /// the same whichever of the two calls it, different for every other
    /// pair. The paper XORs the two identifiers; this hashes the ordered
    /// pair instead, so that two different pairs never share a mapping
    /// (`1 ^ 2 == 0 ^ 3`).
    pub fn for_pair(a: u64, b: u64) -> Self {
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        let mut s = lo ^ PAIR_DOMAIN;
        let mut t = splitmix64(&mut s) ^ hi;
        Mapping {
            seed: splitmix64(&mut t),
        }
    }

    /// This mapping made unique to one exchange: `nonce` is a counter or a
    /// random value the peers agree on (the protocol carries it).
    pub fn with_nonce(self, nonce: u64) -> Self {
        let mut n = nonce ^ NONCE_DOMAIN;
        let mut t = self.seed ^ splitmix64(&mut n);
        Mapping {
            seed: splitmix64(&mut t),
        }
    }

    /// The seed material.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The pair an element with stored hash `stored` has under this
    /// mapping: `mix(stored ^ seed)`, split into `h1` (low half) and `h2`.
    #[inline(always)]
    pub fn map(&self, stored: HashPair) -> HashPair {
        let mut x = (u64::from(stored.h1) | (u64::from(stored.h2) << 32)) ^ self.seed;
        let z = splitmix64(&mut x);
        HashPair {
            h1: z as u32,
            h2: (z >> 32) as u32,
        }
    }

    /// Maps `stored` into `out` (the first `stored.len()` entries).
    #[inline(always)]
    fn map_into(&self, stored: &[HashPair], out: &mut [HashPair]) {
        for (o, &s) in out.iter_mut().zip(stored) {
            *o = self.map(s);
        }
    }
}

/// A Bloom filter of stored hashes under one [`Mapping`]: what a sender
/// sends in one exchange.
///
/// Its bits are an ordinary [`Bloom`] (any layout; [`Params::for_transfer`]
/// gives the classic geometry with the fewest bytes on the wire), but its
/// positions come from the mapping, so it is queried with stored hashes
/// ([`DbfFilter::contains`], [`DbfSet::missing`]), never with keys.
#[derive(Debug, Clone, PartialEq)]
pub struct DbfFilter {
    bloom: Bloom,
    mapping: Mapping,
}

impl DbfFilter {
    /// An empty filter of geometry `params` under `mapping`. `hasher` is
    /// the one the stored hashes were made with: its key id goes into the
    /// transfer header, and its backend derives positions.
    pub fn new(params: Params, hasher: Hasher, mapping: Mapping) -> Self {
        DbfFilter {
            bloom: Bloom::new(params, hasher),
            mapping,
        }
    }

    /// Adds the elements with these stored hashes.
    pub fn insert(&mut self, stored: &[HashPair]) {
        let mut buf = [HashPair::default(); BATCH];
        for chunk in stored.chunks(BATCH) {
            let buf = &mut buf[..chunk.len()];
            self.mapping.map_into(chunk, buf);
            self.bloom.insert_pairs(buf);
        }
    }

    /// Whether an element with stored hash `stored` may be in the filter
    /// (always true for one that was inserted).
    pub fn contains(&self, stored: HashPair) -> bool {
        let mut out = [false];
        self.bloom
            .contains_pairs(&[self.mapping.map(stored)], &mut out);
        out[0]
    }

    /// `out[i]` for `stored[i]`, up to [`BATCH`] of them (private: callers
    /// hold the buffers).
    fn contains_chunk(&self, stored: &[HashPair], out: &mut [bool; BATCH]) {
        debug_assert!(stored.len() <= BATCH);
        let mut buf = [HashPair::default(); BATCH];
        let buf = &mut buf[..stored.len()];
        self.mapping.map_into(stored, buf);
        self.bloom.contains_pairs(buf, out);
    }

    /// Clears the bits and sets a new mapping: the filter's storage reused
    /// for another exchange of the same geometry.
    pub fn reset(&mut self, mapping: Mapping) {
        self.bloom.clear();
        self.mapping = mapping;
    }

    /// The geometry.
    pub fn params(&self) -> Params {
        self.bloom.params()
    }

    /// The mapping.
    pub fn mapping(&self) -> Mapping {
        self.mapping
    }

    /// The bits as a plain [`Bloom`] (for its statistics: set bits,
    /// estimated items, predicted false-positive rate). Its own
    /// `contains` answers for keys, not for mapped stored hashes.
    pub fn bloom(&self) -> &Bloom {
        &self.bloom
    }

    /// The compressed transfer form ([`Bloom::to_compressed_bytes`]).
    pub fn to_compressed_bytes(&self) -> Vec<u8> {
        self.bloom.to_compressed_bytes()
    }

    /// The compressed transfer form and its cost beside the raw form and
    /// a list of `items` elements of `item_bytes` each
    /// ([`Bloom::to_message`]).
    pub fn to_message(&self, items: u64, item_bytes: u64) -> (Vec<u8>, MessageSizes) {
        self.bloom.to_message(items, item_bytes)
    }

    /// Decodes a filter a peer sent under `mapping` (which the bytes do
    /// not carry: the receiver derives it as the sender did). `hasher`
    /// must have the key the stored hashes are made with.
    ///
    /// # Errors
    /// Any malformed or inconsistent encoding, or another hash key, as a
    /// [`DecodeError`] ([`Bloom::from_bytes`]); never panics.
    pub fn from_bytes(bytes: &[u8], hasher: Hasher, mapping: Mapping) -> Result<Self, DecodeError> {
        Ok(DbfFilter {
            bloom: Bloom::from_bytes(bytes, hasher)?,
            mapping,
        })
    }
}

/// Why a [`DbfSet`] refused an element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbfError {
    /// The set already holds its capacity of elements (peers cannot grow
    /// it without bound).
    Full {
        /// The set's capacity.
        capacity: usize,
    },
}

impl fmt::Display for DbfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DbfError::Full { capacity } => {
                write!(
                    f,
                    "the set already holds its capacity of {capacity} elements"
                )
            }
        }
    }
}

impl std::error::Error for DbfError {}

/// A set of elements, each kept with its stored hash (computed once, when
/// learned) and the last time anyone reported it, for reconciliation with
/// [`DbfFilter`]s.
///
/// Times are the caller's clock in any unit (the router's nanoseconds);
/// an entry expires when it has not been reported for more than the set's
/// time to live ([`DbfSet::expire`]). A report never moves an entry's time
/// backwards, so an element learned from a peer with the peer's (older)
/// report time keeps the newer of the two.
#[derive(Debug, Clone)]
pub struct DbfSet<E> {
    hasher: Hasher,
    ttl: u64,
    capacity: usize,
    elems: Vec<E>,
    hashes: Vec<HashPair>,
    reported: Vec<u64>,
    index: HashMap<E, usize>,
}

impl<E: Element> DbfSet<E> {
    /// An empty set: elements are hashed by `hasher` (every peer must use
    /// the same key), expire `ttl` after their last report, and at most
    /// `capacity` are held.
    pub fn new(hasher: Hasher, ttl: u64, capacity: usize) -> Self {
        DbfSet {
            hasher,
            ttl,
            capacity,
            elems: Vec::new(),
            hashes: Vec::new(),
            reported: Vec::new(),
            index: HashMap::new(),
        }
    }

    /// Records that `element` was reported at time `at` (detected here, or
    /// learned from a peer that reported it then): a new element is hashed
    /// and added; a known one keeps the later of its time and `at`.
    /// Returns whether the element is new.
    ///
    /// # Errors
    /// [`DbfError::Full`] for a new element when the set holds `capacity`.
    pub fn report(&mut self, element: E, at: u64) -> Result<bool, DbfError> {
        if let Some(&i) = self.index.get(&element) {
            self.reported[i] = self.reported[i].max(at);
            return Ok(false);
        }
        if self.elems.len() >= self.capacity {
            return Err(DbfError::Full {
                capacity: self.capacity,
            });
        }
        let stored = element.stored_hash(&self.hasher);
        self.index.insert(element.clone(), self.elems.len());
        self.elems.push(element);
        self.hashes.push(stored);
        self.reported.push(at);
        Ok(true)
    }

    /// Removes `element`; whether it was there.
    pub fn remove(&mut self, element: &E) -> bool {
        match self.index.remove(element) {
            Some(i) => {
                self.remove_at(i);
                true
            }
            None => false,
        }
    }

    /// Removes every entry last reported more than the time to live before
    /// `now`; returns how many.
    pub fn expire(&mut self, now: u64) -> usize {
        let before = self.elems.len();
        let mut i = 0;
        while i < self.elems.len() {
            if now.saturating_sub(self.reported[i]) > self.ttl {
                self.index.remove(&self.elems[i]);
                self.remove_at(i);
            } else {
                i += 1;
            }
        }
        before - self.elems.len()
    }

    /// Swap-removes entry `i` (already out of the index) and re-indexes the
    /// entry moved into its place.
    fn remove_at(&mut self, i: usize) {
        self.elems.swap_remove(i);
        self.hashes.swap_remove(i);
        self.reported.swap_remove(i);
        if let Some(moved) = self.elems.get(i)
            && let Some(slot) = self.index.get_mut(moved)
        {
            *slot = i;
        }
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.elems.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.elems.is_empty()
    }

    /// Whether `element` is in the set.
    pub fn contains(&self, element: &E) -> bool {
        self.index.contains_key(element)
    }

    /// When `element` was last reported, if it is in the set.
    pub fn last_reported(&self, element: &E) -> Option<u64> {
        self.index.get(element).map(|&i| self.reported[i])
    }

    /// `element`'s stored hash, if it is in the set.
    pub fn stored_hash(&self, element: &E) -> Option<HashPair> {
        self.index.get(element).map(|&i| self.hashes[i])
    }

    /// Every entry: element, stored hash, last reported (in no particular
    /// order).
    pub fn iter(&self) -> impl Iterator<Item = (&E, HashPair, u64)> + '_ {
        self.elems
            .iter()
            .zip(&self.hashes)
            .zip(&self.reported)
            .map(|((e, &h), &t)| (e, h, t))
    }

    /// The stored hashes, one per element.
    pub fn stored_hashes(&self) -> &[HashPair] {
        &self.hashes
    }

    /// The hasher elements are hashed with.
    pub fn hasher(&self) -> &Hasher {
        &self.hasher
    }

    /// The time to live.
    pub fn ttl(&self) -> u64 {
        self.ttl
    }

    /// The most elements the set holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The filter of this set under `mapping`, of geometry `params` (for
    /// `n` elements at a target rate: [`Params::for_transfer`] for the
    /// fewest bytes, or [`Params::for_items`]): what the sender sends.
    pub fn filter(&self, params: Params, mapping: Mapping) -> DbfFilter {
        let mut f = DbfFilter::new(params, self.hasher.clone(), mapping);
        f.insert(&self.hashes);
        f
    }

    /// Fills `filter` (cleared first, its mapping kept) with this set: as
    /// [`DbfSet::filter`], reusing the filter's storage.
    pub fn fill(&self, filter: &mut DbfFilter) {
        filter.reset(filter.mapping());
        filter.insert(&self.hashes);
    }

    /// The elements of this set that `filter` (a peer's, under the
    /// exchange's mapping) does not contain, with their last report times:
    /// the receiver's answer, each an element the peer lacks. Elements the
    /// peer holds never appear (no false negatives); an element the peer
    /// lacks is left out when it is a false positive of the filter.
    pub fn missing<'a>(&'a self, filter: &'a DbfFilter) -> Missing<'a, E> {
        Missing {
            set: self,
            filter,
            next: 0,
            hits: [true; BATCH],
            start: 0,
            len: 0,
            cursor: 0,
        }
    }
}

/// The iterator of [`DbfSet::missing`]: tests the set's stored hashes a
/// batch of 64 at a time against the filter (no allocation).
#[derive(Debug)]
pub struct Missing<'a, E> {
    set: &'a DbfSet<E>,
    filter: &'a DbfFilter,
    /// The first entry not yet tested.
    next: usize,
    /// The current batch's answers, entries `start..start + len`.
    hits: [bool; BATCH],
    start: usize,
    len: usize,
    cursor: usize,
}

impl<'a, E: Element> Iterator for Missing<'a, E> {
    type Item = (&'a E, u64);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            while self.cursor < self.len {
                let i = self.cursor;
                self.cursor += 1;
                if !self.hits[i] {
                    let at = self.start + i;
                    return Some((&self.set.elems[at], self.set.reported[at]));
                }
            }
            let total = self.set.hashes.len();
            if self.next >= total {
                return None;
            }
            let end = (self.next + BATCH).min(total);
            self.filter
                .contains_chunk(&self.set.hashes[self.next..end], &mut self.hits);
            self.start = self.next;
            self.len = end - self.next;
            self.cursor = 0;
            self.next = end;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bloom::Layout;

    #[test]
    fn pair_mapping_is_symmetric_and_unique() {
        assert_eq!(Mapping::for_pair(1, 2), Mapping::for_pair(2, 1));
        assert_ne!(Mapping::for_pair(1, 2), Mapping::for_pair(0, 3));
        assert_ne!(
            Mapping::for_pair(1, 2),
            Mapping::for_pair(1, 2).with_nonce(0)
        );
        assert_ne!(
            Mapping::for_pair(1, 2).with_nonce(1),
            Mapping::for_pair(1, 2).with_nonce(2)
        );
    }

    #[test]
    fn set_reports_refreshes_expires_and_caps() {
        let mut s = DbfSet::new(Hasher::with_seed(1), 10, 3);
        assert_eq!(s.report([1u32, 2], 5), Ok(true));
        assert_eq!(s.report([1u32, 2], 3), Ok(false));
        assert_eq!(s.last_reported(&[1, 2]), Some(5), "never moves back");
        assert_eq!(s.report([3u32, 4], 8), Ok(true));
        assert_eq!(s.report([5u32, 6], 20), Ok(true));
        assert_eq!(s.report([7u32, 8], 20), Err(DbfError::Full { capacity: 3 }));
        assert_eq!(s.report([1u32, 2], 12), Ok(false), "a refresh is not new");
        assert_eq!(
            s.stored_hash(&[3, 4]),
            Some(Hasher::with_seed(1).hash_one(&[3u32, 4]))
        );
        // At 19: [3, 4] was last reported at 8, 11 ago; the others are fresh.
        assert_eq!(s.expire(19), 1);
        assert!(!s.contains(&[3, 4]));
        assert_eq!(s.len(), 2);
        // The swap-removed entry is still found at its new place.
        assert_eq!(s.last_reported(&[5, 6]), Some(20));
        assert_eq!(s.last_reported(&[1, 2]), Some(12));
        assert!(s.remove(&[1, 2]));
        assert!(!s.remove(&[1, 2]));
        assert_eq!(s.last_reported(&[5, 6]), Some(20));
        assert_eq!(s.expire(u64::MAX), 1);
        assert!(s.is_empty());
    }

    #[test]
    fn fill_equals_filter_and_missing_is_the_complement() {
        let mut a = DbfSet::new(Hasher::with_seed(3), 100, 10_000);
        for i in 0..1000u32 {
            a.report([i, 7], 0).unwrap();
        }
        let params = Params::new(Layout::Classic, 2048, 2).unwrap();
        let m = Mapping::for_pair(4, 5).with_nonce(6);
        let f = a.filter(params, m);
        let mut g = DbfFilter::new(params, Hasher::with_seed(3), Mapping::new(1));
        g.insert(&a.stored_hashes()[..10]);
        g.reset(m);
        a.fill(&mut g);
        assert_eq!(f, g);
        // Against a sparse filter of other elements: `missing` lists
        // exactly the entries `contains` rejects, in set order.
        let mut b = DbfSet::new(Hasher::with_seed(3), 100, 10_000);
        for i in 500..700u32 {
            b.report([i, 7], 0).unwrap();
        }
        let fb = b.filter(params, m);
        let want: Vec<_> = a
            .iter()
            .filter(|(_, h, _)| !fb.contains(*h))
            .map(|(e, _, t)| (*e, t))
            .collect();
        let got: Vec<_> = a.missing(&fb).map(|(e, t)| (*e, t)).collect();
        assert_eq!(got, want);
        assert!(got.iter().all(|(e, _)| !(500..700).contains(&e[0])));
    }
}
