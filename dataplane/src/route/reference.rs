//! The plain longest-prefix match the tests hold [`Lpm`](super::Lpm) to:
//! one ordered map per length, probed from the longest length down.

use std::collections::BTreeMap;

use super::addr::{Address, Prefix};
use super::lpm::RouteMatch;

/// A reference table: obviously correct, `BITS + 1` map probes a lookup.
#[derive(Debug, Clone)]
pub struct Reference<A> {
    by_len: Vec<BTreeMap<A, u32>>,
}

impl<A: Address> Default for Reference<A> {
    fn default() -> Self {
        Reference::new()
    }
}

impl<A: Address> Reference<A> {
    /// An empty table.
    pub fn new() -> Self {
        Reference {
            by_len: (0..=A::BITS).map(|_| BTreeMap::new()).collect(),
        }
    }

    /// Adds or replaces a route; returns the next hop it replaced.
    pub fn insert(&mut self, p: Prefix<A>, nexthop: u32) -> Option<u32> {
        self.by_len[usize::from(p.prefix_len())].insert(p.addr(), nexthop)
    }

    /// Removes a route; returns its next hop.
    pub fn remove(&mut self, p: Prefix<A>) -> Option<u32> {
        self.by_len[usize::from(p.prefix_len())].remove(&p.addr())
    }

    /// The longest route covering `addr`.
    pub fn lookup(&self, addr: A) -> Option<RouteMatch> {
        (0..=A::BITS).rev().find_map(|len| {
            self.by_len[usize::from(len)]
                .get(&addr.mask(len))
                .map(|&nexthop| RouteMatch { len, nexthop })
        })
    }

    /// Routes in the table.
    pub fn len(&self) -> usize {
        self.by_len.iter().map(BTreeMap::len).sum()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.by_len.iter().all(BTreeMap::is_empty)
    }
}
