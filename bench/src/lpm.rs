//! `lpm/*`: longest-prefix-match lookups on tables shaped like the public
//! BGP table (`dataplane::route::synth`): `ipv4-1M` (1,000,000 IPv4
//! prefixes) and `ipv6-200k` (200,000 IPv6 prefixes), all three tables
//! built from the same routes and queried with the same addresses (90%
//! drawn inside a random route of the table, 10% uniform), cycling through
//! a pool of 2^20 addresses in calls of 32 (the router's batch of packets).
//!
//! Cases: `bloomplane` ([`Lpm::lookup_batch`]), `bloomplane-single`
//! ([`Lpm::lookup`] per address), and the peers one address at a time (they
//! have no batch call): `prefix-trie` (`PrefixMap<(u32, u8), u32>`, a
//! tree-bitmap trie) and `ip_network_table` (`IpNetworkTable`, on the
//! `treebitmap` crate). Every case returns a checksum of lengths and next
//! hops, and [`Inputs::new`] checks that all of them agree on the pool.

use std::hint::black_box;
use std::net::{Ipv4Addr, Ipv6Addr};

use criterion::{Criterion, Throughput};
use dataplane::route::{Address, Lpm, Prefix, RouteMatch, synth};
use ip_network::{Ipv4Network, Ipv6Network};
use ip_network_table::IpNetworkTable;
use prefix_trie::PrefixMap;

use crate::measure::{Figure, figure};

/// Addresses per timed call: the router's batch of packets.
pub const CALL: usize = dataplane::pipeline::BATCH_SIZE;
/// Addresses in the pool the calls cycle through.
const POOL: usize = 1 << 20;
/// Share of the addresses drawn inside a route of the table.
pub const INSIDE: f64 = 0.9;
/// Routes in the IPv4 and IPv6 tables.
pub const V4_ROUTES: usize = 1_000_000;
/// Routes in the IPv6 table.
pub const V6_ROUTES: usize = 200_000;

/// What a peer's table needs from an address family.
pub trait Family: Address {
    /// The figure's case name: `ipv4-1M` or `ipv6-200k`.
    const CASE: &'static str;
    /// `n` BGP-shaped routes (`route::synth`).
    fn bgp(n: usize, seed: u64) -> Vec<(Prefix<Self>, u32)>;
    /// Adds a route to an `ip_network_table`.
    fn table_insert(t: &mut IpNetworkTable<u32>, p: Prefix<Self>, nexthop: u32);
    /// `ip_network_table`'s longest match as (length, next hop).
    fn table_lookup(t: &IpNetworkTable<u32>, a: Self) -> Option<(u8, u32)>;
}

impl Family for u32 {
    const CASE: &'static str = "ipv4-1M";
    fn bgp(n: usize, seed: u64) -> Vec<(Prefix<u32>, u32)> {
        synth::bgp_v4(n, seed)
    }
    fn table_insert(t: &mut IpNetworkTable<u32>, p: Prefix<u32>, nexthop: u32) {
        let net = Ipv4Network::new(Ipv4Addr::from(p.addr()), p.prefix_len()).expect("masked");
        t.insert(net, nexthop);
    }
    #[inline(always)]
    fn table_lookup(t: &IpNetworkTable<u32>, a: u32) -> Option<(u8, u32)> {
        t.longest_match_ipv4(Ipv4Addr::from(a))
            .map(|(n, &nh)| (n.netmask(), nh))
    }
}

impl Family for u128 {
    const CASE: &'static str = "ipv6-200k";
    fn bgp(n: usize, seed: u64) -> Vec<(Prefix<u128>, u32)> {
        synth::bgp_v6(n, seed)
    }
    fn table_insert(t: &mut IpNetworkTable<u32>, p: Prefix<u128>, nexthop: u32) {
        let net = Ipv6Network::new(Ipv6Addr::from(p.addr()), p.prefix_len()).expect("masked");
        t.insert(net, nexthop);
    }
    #[inline(always)]
    fn table_lookup(t: &IpNetworkTable<u32>, a: u128) -> Option<(u8, u32)> {
        t.longest_match_ipv6(Ipv6Addr::from(a))
            .map(|(n, &nh)| (n.netmask(), nh))
    }
}

/// One family's three tables and its address pool.
#[allow(missing_debug_implementations)]
pub struct Inputs<A: Family>
where
    (A, u8): prefix_trie::Prefix,
{
    ours: Lpm<A>,
    trie: PrefixMap<(A, u8), u32>,
    table: IpNetworkTable<u32>,
    pool: Vec<A>,
}

/// The cases, in report order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    /// `Lpm::lookup_batch`.
    Ours,
    /// `Lpm::lookup`, one address at a time.
    OursSingle,
    /// `prefix_trie::PrefixMap::get_lpm`.
    PrefixTrie,
    /// `ip_network_table::IpNetworkTable::longest_match_*`.
    IpNetworkTable,
}

impl Case {
    /// Every case.
    pub const ALL: [Case; 4] = [
        Case::Ours,
        Case::OursSingle,
        Case::PrefixTrie,
        Case::IpNetworkTable,
    ];

    /// The figure's last component.
    pub fn name(self) -> &'static str {
        match self {
            Case::Ours => "bloomplane",
            Case::OursSingle => "bloomplane-single",
            Case::PrefixTrie => "prefix-trie",
            Case::IpNetworkTable => "ip_network_table",
        }
    }
}

#[inline(always)]
fn sum(len: u8, nexthop: u32) -> u64 {
    u64::from(len) + u64::from(nexthop)
}

impl<A: Family> Inputs<A>
where
    (A, u8): prefix_trie::Prefix,
{
    /// Builds the three tables from `routes` routes of the BGP-shaped
    /// generator and the pool, and checks that every case agrees.
    pub fn new(routes: usize, seed: u64) -> Self {
        let table_routes = A::bgp(routes, seed);
        let mut ours = Lpm::new();
        let mut trie = PrefixMap::new();
        let mut table = IpNetworkTable::new();
        for &(p, nh) in &table_routes {
            ours.insert(p, nh);
            trie.insert((p.addr(), p.prefix_len()), nh);
            A::table_insert(&mut table, p, nh);
        }
        let pool = synth::addresses(&table_routes, POOL, INSIDE, seed ^ 0xadd2);
        let inp = Inputs {
            ours,
            trie,
            table,
            pool,
        };
        let mut out = vec![None; CALL];
        for call in 0..64 {
            let want = inp.run(Case::Ours, call, &mut out);
            for case in Case::ALL {
                assert_eq!(inp.run(case, call, &mut out), want, "{}", case.name());
            }
        }
        inp
    }

    /// The sizes of our table.
    pub fn footprint(&self) -> dataplane::route::Footprint {
        self.ours.footprint()
    }

    fn call(&self, call: usize) -> &[A] {
        let start = (call * CALL) % POOL;
        &self.pool[start..start + CALL]
    }

    /// Looks up call `call`'s addresses with `case`; returns the checksum
    /// of lengths and next hops found.
    #[inline(always)]
    pub fn run(&self, case: Case, call: usize, out: &mut [Option<RouteMatch>]) -> u64 {
        let addrs = black_box(self.call(call));
        match case {
            Case::Ours => {
                self.ours.lookup_batch(addrs, out);
                out.iter().flatten().map(|m| sum(m.len, m.nexthop)).sum()
            }
            Case::OursSingle => addrs
                .iter()
                .filter_map(|&a| self.ours.lookup(a))
                .map(|m| sum(m.len, m.nexthop))
                .sum(),
            Case::PrefixTrie => addrs
                .iter()
                .filter_map(|&a| self.trie.get_lpm(&(a, A::BITS)))
                .map(|((_, len), &nh)| sum(len, nh))
                .sum(),
            Case::IpNetworkTable => addrs
                .iter()
                .filter_map(|&a| A::table_lookup(&self.table, a))
                .map(|(len, nh)| sum(len, nh))
                .sum(),
        }
    }
}

struct Cursor(usize);

impl Cursor {
    fn next(&mut self) -> usize {
        self.0 = self.0.wrapping_add(1);
        self.0
    }
}

fn family_register<A: Family>(c: &mut Criterion, inp: &Inputs<A>)
where
    (A, u8): prefix_trie::Prefix,
{
    let mut g = c.benchmark_group(format!("lpm/{}", A::CASE));
    g.throughput(Throughput::Elements(CALL as u64));
    let mut out = vec![None; CALL];
    for case in Case::ALL {
        let mut cur = Cursor(0);
        g.bench_function(case.name(), |b| {
            b.iter(|| inp.run(case, cur.next(), &mut out))
        });
    }
    g.finish();
}

/// Criterion: `lpm/ipv4-1M/*` and `lpm/ipv6-200k/*`.
pub fn register(c: &mut Criterion) {
    family_register(c, &Inputs::<u32>::new(V4_ROUTES, 4));
    family_register(c, &Inputs::<u128>::new(V6_ROUTES, 6));
}

fn family_report<A: Family>(inp: &Inputs<A>) -> Vec<Figure>
where
    (A, u8): prefix_trie::Prefix,
{
    let f = inp.footprint();
    eprintln!(
        "lpm: {}: {} expanded entries; MiB of exact tables {:.1}, filters {:.1}, direct array {:.1}",
        A::CASE,
        f.entries,
        f.table_bytes as f64 / (1 << 20) as f64,
        f.filter_bytes as f64 / (1 << 20) as f64,
        f.direct_bytes as f64 / (1 << 20) as f64,
    );
    let mut out = vec![None; CALL];
    Case::ALL
        .into_iter()
        .map(|case| {
            let mut cur = Cursor(0);
            figure(format!("lpm/{}/{}", A::CASE, case.name()), CALL, || {
                inp.run(case, cur.next(), &mut out)
            })
        })
        .collect()
}

/// The report's `lpm` figures.
pub fn report() -> Vec<Figure> {
    let mut figs = family_report(&Inputs::<u32>::new(V4_ROUTES, 4));
    figs.extend(family_report(&Inputs::<u128>::new(V6_ROUTES, 6)));
    figs
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cases agree (checked inside `new`) on small tables.
    #[test]
    fn cases_agree() {
        Inputs::<u32>::new(20_000, 1);
        Inputs::<u128>::new(5_000, 2);
    }
}
