//! The table: [`Lpm`], with its direct array, strata, filters and exact
//! tables (see the [module docs](super) for the design).

use std::collections::HashMap;
use std::fmt;

use kernels::{HashPair, Hasher};

use super::addr::{Address, Prefix};
use super::exact::{Entry, ExactTable};
use super::filter::PairFilter;

/// Addresses looked up together: one hash call and one filter call per
/// stratum per chunk of this many. The router's batches are 32 packets;
/// longer calls gain from more independent accesses in flight per chunk.
pub const BATCH: usize = 64;

/// Prefixes of at most this length live in the direct array (`2^16`
/// slots, 512 KiB).
pub const DIRECT_BITS: u8 = 16;

/// Lengths per stratum above [`DIRECT_BITS`]: a prefix is expanded to the
/// stratum's longest length, at most `2^(STRIDE - 1)` entries.
pub const STRIDE: u8 = 4;

/// Strata of the widest address: IPv6's lengths 17..=128 in fours.
const MAX_STRATA: usize = (128 - DIRECT_BITS as usize).div_ceil(STRIDE as usize);

/// Exact-table entries removed but still in a filter, at which a filter is
/// rebuilt if they also outnumber the entries present.
const MIN_STALE_REBUILD: usize = 1024;

/// The answer for one address: the length of the longest matching prefix
/// and its next hop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RouteMatch {
    /// Length of the matching prefix.
    pub len: u8,
    /// The next-hop id stored with it.
    pub nexthop: u32,
}

/// The sizes of a table's lookup structures (the routes as given, kept
/// for updates, are not counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footprint {
    /// Expanded entries in the exact tables.
    pub entries: usize,
    /// Bytes of exact-table buckets.
    pub table_bytes: usize,
    /// Bytes of filter bits.
    pub filter_bytes: usize,
    /// Bytes of the direct array.
    pub direct_bytes: usize,
}

/// A direct-array slot: 0 for no route, else `(len + 1) << 32 | nexthop`.
type Slot = u64;

#[inline(always)]
fn slot(len: u8, nexthop: u32) -> Slot {
    ((u64::from(len) + 1) << 32) | u64::from(nexthop)
}

#[inline(always)]
fn unslot(s: Slot) -> Option<RouteMatch> {
    (s != 0).then(|| RouteMatch {
        len: ((s >> 32) - 1) as u8,
        nexthop: s as u32,
    })
}

/// The lengths `lowest..=target`, expanded to `target`: the exact table of
/// their expansions and the filter in front of it.
#[derive(Debug, Clone)]
struct Stratum<A> {
    target: u8,
    lowest: u8,
    table: ExactTable<A>,
    filter: PairFilter,
    /// Keys in the filter whose entries were removed since it was built.
    stale: usize,
}

/// A longest-prefix-match table from prefixes of `A` (`u32`: IPv4, `u128`:
/// IPv6) to next-hop ids.
///
/// ```
/// use dataplane::route::{Lpm, Prefix, RouteMatch};
///
/// let mut fib = Lpm::<u32>::new();
/// fib.insert(Prefix::new(0, 0).unwrap(), 1); // default route
/// fib.insert(Prefix::new(0x0a00_0000, 8).unwrap(), 2); // 10.0.0.0/8
/// fib.insert(Prefix::new(0x0a01_0200, 24).unwrap(), 3); // 10.1.2.0/24
/// assert_eq!(fib.lookup(0x0a01_0203), Some(RouteMatch { len: 24, nexthop: 3 }));
/// assert_eq!(fib.lookup(0x0a01_0303), Some(RouteMatch { len: 8, nexthop: 2 }));
///
/// let mut out = [None; 3];
/// fib.lookup_batch(&[0x0a01_0203, 0x0b00_0001, 0x0a00_0001], &mut out);
/// assert_eq!(out.map(|m| m.unwrap().nexthop), [3, 1, 2]);
///
/// fib.remove(Prefix::new(0, 0).unwrap());
/// assert_eq!(fib.lookup(0x0b00_0001), None);
/// ```
#[derive(Clone)]
pub struct Lpm<A: Address> {
    hasher: Hasher,
    /// `2^DIRECT_BITS` slots, each the longest route of length at most
    /// `DIRECT_BITS` covering it.
    direct: Vec<Slot>,
    /// Ascending by target length.
    strata: Vec<Stratum<A>>,
    /// The routes as inserted, by length (the control plane's copy, used
    /// to find what a removed route uncovers).
    routes: Vec<HashMap<A, u32, ahash::RandomState>>,
    count: usize,
}

/// An IPv4 table.
pub type Lpm4 = Lpm<u32>;
/// An IPv6 table.
pub type Lpm6 = Lpm<u128>;

impl<A: Address> fmt::Debug for Lpm<A> {
    /// Sizes, not contents (a full table holds millions of entries).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lpm")
            .field("bits", &A::BITS)
            .field("routes", &self.count)
            .field("footprint", &self.footprint())
            .field("backend", &self.hasher.backend())
            .finish()
    }
}

impl<A: Address> Default for Lpm<A> {
    fn default() -> Self {
        Lpm::new()
    }
}

impl<A: Address> Lpm<A> {
    /// An empty table on the process-wide hash key and the active backend.
    pub fn new() -> Self {
        Lpm::with_hasher(Hasher::new())
    }

    /// An empty table hashing with `hasher` (its backend runs the filters).
    pub fn with_hasher(hasher: Hasher) -> Self {
        let backend = hasher.backend();
        let strata = (DIRECT_BITS + 1..=A::BITS)
            .step_by(usize::from(STRIDE))
            .map(|lowest| Stratum {
                target: (lowest + STRIDE - 1).min(A::BITS),
                lowest,
                table: ExactTable::new(),
                filter: PairFilter::with_capacity(0, backend),
                stale: 0,
            })
            .collect();
        Lpm {
            hasher,
            direct: vec![0; 1 << DIRECT_BITS],
            strata,
            routes: (0..=A::BITS).map(|_| HashMap::default()).collect(),
            count: 0,
        }
    }

    /// Routes in the table.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the table has no routes.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The next hop of exactly this prefix, if it is a route.
    pub fn get(&self, prefix: Prefix<A>) -> Option<u32> {
        self.routes[usize::from(prefix.prefix_len())]
            .get(&prefix.addr())
            .copied()
    }

    /// Every route, shortest prefixes first (in no order within a length).
    pub fn iter(&self) -> impl Iterator<Item = (Prefix<A>, u32)> + '_ {
        self.routes.iter().enumerate().flat_map(|(len, m)| {
            m.iter()
                .map(move |(&a, &nh)| (Prefix::new(a, len as u8).expect("stored lengths fit"), nh))
        })
    }

    /// Sizes of the lookup structures (for reports).
    pub fn footprint(&self) -> Footprint {
        let mut f = Footprint {
            entries: 0,
            table_bytes: 0,
            filter_bytes: 0,
            direct_bytes: size_of_val(self.direct.as_slice()),
        };
        for s in &self.strata {
            f.entries += s.table.len();
            f.table_bytes += s.table.bytes();
            f.filter_bytes += s.filter.bytes();
        }
        f
    }

    /// Adds or replaces a route; returns the next hop it replaced.
    pub fn insert(&mut self, prefix: Prefix<A>, nexthop: u32) -> Option<u32> {
        let len = prefix.prefix_len();
        let old = self.routes[usize::from(len)].insert(prefix.addr(), nexthop);
        if old.is_none() {
            self.count += 1;
        }
        if len <= DIRECT_BITS {
            let new = slot(len, nexthop);
            for s in &mut self.direct[direct_range(prefix)] {
                // A longer route already there keeps its slot.
                if unslot(*s).is_none_or(|m| m.len <= len) {
                    *s = new;
                }
            }
        } else {
            let si = stratum_of(len);
            let hasher = &self.hasher;
            let st = &mut self.strata[si];
            let target = st.target;
            let mut fresh = [HashPair::default(); 1 << (STRIDE - 1)];
            let mut n_fresh = 0;
            for e in expansions(prefix, target) {
                let pair = A::hash_one(hasher, &e.key(target));
                match st.table.find_mut(pair, e) {
                    Some(x) => {
                        if x.len <= len {
                            x.len = len;
                            x.nexthop = nexthop;
                        }
                    }
                    None => {
                        st.table.insert_new(
                            pair,
                            Entry {
                                prefix: e,
                                len,
                                nexthop,
                            },
                            |x| A::hash_one(hasher, &x.prefix.key(target)),
                        );
                        fresh[n_fresh] = pair;
                        n_fresh += 1;
                    }
                }
            }
            if st.table.len() + st.stale > st.filter.capacity() {
                st.rebuild_filter(hasher, 2 * st.table.len());
            } else {
                st.filter.insert(&fresh[..n_fresh]);
            }
        }
        old
    }

    /// Removes a route; returns its next hop, or `None` if it was not in
    /// the table. Addresses it covered fall back to the next longest route.
    pub fn remove(&mut self, prefix: Prefix<A>) -> Option<u32> {
        let len = prefix.prefix_len();
        let old = self.routes[usize::from(len)].remove(&prefix.addr())?;
        self.count -= 1;
        if len <= DIRECT_BITS {
            let range = direct_range(prefix);
            let start = range.start;
            for (i, s) in self.direct[range].iter_mut().enumerate() {
                if unslot(*s).is_some_and(|m| m.len == len) {
                    let at = A::from_u128(((start + i) as u128) << (A::BITS - DIRECT_BITS));
                    *s = covering(&self.routes, at, len, 0).map_or(0, |m| slot(m.len, m.nexthop));
                }
            }
        } else {
            let si = stratum_of(len);
            let hasher = &self.hasher;
            let routes = &self.routes;
            let st = &mut self.strata[si];
            let (target, lowest) = (st.target, st.lowest);
            for e in expansions(prefix, target) {
                let pair = A::hash_one(hasher, &e.key(target));
                if st.table.find(pair, e).is_none_or(|x| x.len != len) {
                    continue;
                }
                match covering(routes, e, len, lowest) {
                    Some(m) => {
                        let x = st.table.find_mut(pair, e).expect("found above");
                        x.len = m.len;
                        x.nexthop = m.nexthop;
                    }
                    None => {
                        st.table.remove(pair, e);
                        st.stale += 1;
                    }
                }
            }
            if st.stale >= MIN_STALE_REBUILD && st.stale > st.table.len() {
                st.rebuild_filter(hasher, st.table.len());
            }
        }
        Some(old)
    }

    /// The longest route covering `addr`.
    ///
    /// One address has no batch to overlap its memory accesses with, so
    /// it overlaps its own: the candidates of every non-empty stratum are
    /// hashed in one call and their filter blocks and the direct slot
    /// asked for at once, then the filters are tested and every positive's
    /// bucket asked for, and only then are the positives probed, longest
    /// first. (The batch path instead walks the strata one at a time,
    /// hashing only what is still unresolved.)
    pub fn lookup(&self, addr: A) -> Option<RouteMatch> {
        let mut keys = [A::Key::default(); MAX_STRATA];
        let mut which = [0u8; MAX_STRATA];
        let mut n = 0;
        for (si, st) in self.strata.iter().enumerate().rev() {
            if !st.table.is_empty() {
                keys[n] = addr.key(st.target);
                which[n] = si as u8;
                n += 1;
            }
        }
        let mut pairs = [HashPair::default(); MAX_STRATA];
        A::hash_keys(&self.hasher, &keys[..n], &mut pairs[..n]);
        for (&si, &p) in which[..n].iter().zip(&pairs[..n]) {
            self.strata[usize::from(si)].filter.prefetch(p);
        }
        let slot = addr.top(DIRECT_BITS);
        kernels::prefetch(&self.direct, slot);
        let mut hit = [false; MAX_STRATA];
        for k in 0..n {
            let st = &self.strata[usize::from(which[k])];
            st.filter.contains(&pairs[k..=k], &mut hit[k..=k]);
            if hit[k] {
                st.table.prefetch(pairs[k]);
            }
        }
        for k in 0..n {
            if hit[k] {
                let st = &self.strata[usize::from(which[k])];
                if let Some(x) = st.table.find(pairs[k], addr.mask(st.target)) {
                    return Some(RouteMatch {
                        len: x.len,
                        nexthop: x.nexthop,
                    });
                }
            }
        }
        unslot(self.direct[slot])
    }

    /// `out[i] = self.lookup(addrs[i])`, [`BATCH`] addresses at a time.
    ///
    /// # Panics
    /// If `out` is shorter than `addrs`.
    pub fn lookup_batch(&self, addrs: &[A], out: &mut [Option<RouteMatch>]) {
        assert!(
            out.len() >= addrs.len(),
            "lookup_batch: {} outputs for {} addresses",
            out.len(),
            addrs.len()
        );
        for (a, o) in addrs.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            self.lookup_chunk(a, o);
        }
    }

    /// One chunk: the strata from the longest down, each over the
    /// addresses still unresolved (hash their candidates, test the filter,
    /// probe the exact table for the positives); what no stratum resolves
    /// reads the direct array.
    #[inline]
    fn lookup_chunk(&self, addrs: &[A], out: &mut [Option<RouteMatch>]) {
        debug_assert!(addrs.len() <= BATCH && out.len() >= addrs.len());
        let mut live = [0u8; BATCH];
        let mut n_live = addrs.len();
        for (i, l) in live.iter_mut().enumerate().take(n_live) {
            *l = i as u8;
        }
        let mut keys = [A::Key::default(); BATCH];
        let mut pairs = [HashPair::default(); BATCH];
        let mut hit = [false; BATCH];
        for st in self.strata.iter().rev() {
            if n_live == 0 {
                break;
            }
            if st.table.is_empty() {
                continue;
            }
            let target = st.target;
            for (k, &i) in keys.iter_mut().zip(&live[..n_live]) {
                *k = addrs[usize::from(i)].key(target);
            }
            A::hash_keys(&self.hasher, &keys[..n_live], &mut pairs[..n_live]);
            st.filter.contains(&pairs[..n_live], &mut hit[..n_live]);
            // Ask for every positive's bucket before probing any.
            for (p, _) in pairs[..n_live]
                .iter()
                .zip(&hit[..n_live])
                .filter(|(_, h)| **h)
            {
                st.table.prefetch(*p);
            }
            let mut kept = 0;
            for j in 0..n_live {
                let i = usize::from(live[j]);
                let found = if hit[j] {
                    st.table.find(pairs[j], addrs[i].mask(target))
                } else {
                    None
                };
                match found {
                    Some(x) => {
                        out[i] = Some(RouteMatch {
                            len: x.len,
                            nexthop: x.nexthop,
                        })
                    }
                    None => {
                        live[kept] = live[j];
                        kept += 1;
                    }
                }
            }
            n_live = kept;
        }
        for &i in &live[..n_live] {
            let i = usize::from(i);
            out[i] = unslot(self.direct[addrs[i].top(DIRECT_BITS)]);
        }
    }
}

impl<A: Address> Stratum<A> {
    /// A new filter for `capacity` keys holding every entry's key.
    fn rebuild_filter(&mut self, hasher: &Hasher, capacity: usize) {
        let mut filter = PairFilter::with_capacity(capacity, hasher.backend());
        let mut keys = [A::Key::default(); 64];
        let mut pairs = [HashPair::default(); 64];
        let mut n = 0;
        for e in self.table.iter() {
            keys[n] = e.prefix.key(self.target);
            n += 1;
            if n == keys.len() {
                A::hash_keys(hasher, &keys, &mut pairs);
                filter.insert(&pairs);
                n = 0;
            }
        }
        A::hash_keys(hasher, &keys[..n], &mut pairs[..n]);
        filter.insert(&pairs[..n]);
        self.filter = filter;
        self.stale = 0;
    }
}

/// The stratum holding length `len` (`len > DIRECT_BITS`).
fn stratum_of(len: u8) -> usize {
    usize::from((len - DIRECT_BITS - 1) / STRIDE)
}

/// The direct-array slots a prefix of length at most [`DIRECT_BITS`] covers.
fn direct_range<A: Address>(p: Prefix<A>) -> std::ops::Range<usize> {
    let start = p.addr().top(DIRECT_BITS);
    start..start + (1 << (DIRECT_BITS - p.prefix_len()))
}

/// The prefixes of length `target` inside `p` (`p.len() <= target`).
fn expansions<A: Address>(p: Prefix<A>, target: u8) -> impl Iterator<Item = A> {
    let base = p.addr().to_u128();
    let shift = A::BITS - target;
    (0..1u128 << (target - p.prefix_len())).map(move |i| A::from_u128(base | (i << shift)))
}

/// The longest route covering `addr` with a length in `lowest..len`.
fn covering<A: Address>(
    routes: &[HashMap<A, u32, ahash::RandomState>],
    addr: A,
    len: u8,
    lowest: u8,
) -> Option<RouteMatch> {
    (lowest..len).rev().find_map(|l| {
        routes[usize::from(l)]
            .get(&addr.mask(l))
            .map(|&nexthop| RouteMatch { len: l, nexthop })
    })
}
