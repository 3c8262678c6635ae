//! `route::Lpm` against `route::Reference`: random tables (default route,
//! host routes, nested prefixes, removals, replacements) and tables shaped
//! like the BGP table, single and batch lookups, on every backend the CPU
//! has.

use dataplane::route::synth::{self, Rng};
use dataplane::route::{Address, Lpm, Prefix, Reference, RouteMatch};
use kernels::{Backend, Hasher};

/// Tables on each available backend (the filters run on the hasher's).
fn tables<A: Address>() -> Vec<(Backend, Lpm<A>)> {
    Backend::available_list()
        .into_iter()
        .map(|b| {
            let h = Hasher::with_seed(0x1b3)
                .on_backend(b)
                .expect("listed as available");
            (b, Lpm::with_hasher(h))
        })
        .collect()
}

/// Random routes: lengths uniform over `0..=BITS`, half of them nested
/// inside an earlier route, next hops random.
fn random_routes<A: Address>(n: usize, rng: &mut Rng) -> Vec<(Prefix<A>, u32)> {
    let mut out: Vec<(Prefix<A>, u32)> = Vec::with_capacity(n);
    for _ in 0..n {
        let len = rng.below(u64::from(A::BITS) + 1) as u8;
        let mut bits = rng.next_u128();
        if !out.is_empty() && rng.unit() < 0.5 {
            let (p, _) = out[rng.below(out.len() as u64) as usize];
            if p.prefix_len() < len {
                let keep = !(u128::MAX >> p.prefix_len()) >> (128 - u32::from(A::BITS));
                bits = (bits & !keep) | p.addr().to_u128();
            }
        }
        let p = Prefix::new(A::from_u128(bits), len).unwrap();
        out.push((p, rng.next_u64() as u32));
    }
    out
}

/// `n` addresses: a third random, a third inside a route, a third at the
/// first or last address of a route.
fn probe_addresses<A: Address>(routes: &[(Prefix<A>, u32)], n: usize, rng: &mut Rng) -> Vec<A> {
    (0..n)
        .map(|i| {
            let r = rng.next_u128();
            if routes.is_empty() || i % 3 == 0 {
                return A::from_u128(r);
            }
            let (p, _) = routes[rng.below(routes.len() as u64) as usize];
            let host = u128::MAX
                .checked_shr(u32::from(p.prefix_len()))
                .unwrap_or(0)
                >> (128 - u32::from(A::BITS));
            let host = match i % 3 {
                1 => r & host,
                _ if r & 1 == 0 => 0,
                _ => host,
            };
            A::from_u128(p.addr().to_u128() | host)
        })
        .collect()
}

/// Single and batch lookups equal the reference on every address.
fn check<A: Address>(what: &str, lpm: &Lpm<A>, reference: &Reference<A>, addrs: &[A]) {
    assert_eq!(lpm.len(), reference.len(), "{what}: route count");
    let mut out = vec![None; addrs.len()];
    lpm.lookup_batch(addrs, &mut out);
    for (i, (&a, &got)) in addrs.iter().zip(&out).enumerate() {
        let want = reference.lookup(a);
        assert_eq!(got, want, "{what}: batch lookup of {a:x?} (#{i})");
        if i % 7 == 0 {
            assert_eq!(lpm.lookup(a), want, "{what}: lookup of {a:x?}");
        }
    }
}

fn random_churn<A: Address>(seed: u64, n: usize, addrs: usize) {
    for (backend, mut lpm) in tables::<A>() {
        let what = format!("{}-bit seed {seed} on {backend:?}", A::BITS);
        let mut rng = Rng::new(seed);
        let mut reference = Reference::new();
        let routes = random_routes::<A>(n, &mut rng);
        for &(p, nh) in &routes {
            assert_eq!(
                lpm.insert(p, nh),
                reference.insert(p, nh),
                "{what}: insert {p:?}"
            );
        }
        let probe = probe_addresses(&routes, addrs, &mut rng);
        check(&format!("{what}, filled"), &lpm, &reference, &probe);
        // Remove about half (some twice), replace a quarter's next hops.
        for &(p, _) in &routes {
            if rng.below(2) == 0 {
                assert_eq!(lpm.remove(p), reference.remove(p), "{what}: remove {p:?}");
            } else if rng.below(2) == 0 {
                let nh = rng.next_u64() as u32;
                assert_eq!(lpm.insert(p, nh), reference.insert(p, nh));
            }
        }
        check(&format!("{what}, after removals"), &lpm, &reference, &probe);
        for &(p, _) in &routes {
            lpm.remove(p);
            reference.remove(p);
        }
        assert!(lpm.is_empty());
        check(&format!("{what}, emptied"), &lpm, &reference, &probe);
    }
}

#[test]
fn random_tables_v4() {
    for seed in 0..6 {
        random_churn::<u32>(seed, [10, 300, 5_000, 40_000][seed as usize % 4], 60_000);
    }
}

#[test]
fn random_tables_v6() {
    for seed in 0..6 {
        random_churn::<u128>(
            100 + seed,
            [10, 300, 5_000, 20_000][seed as usize % 4],
            20_000,
        );
    }
}

#[test]
fn default_and_host_routes() {
    let mut v4 = Lpm::<u32>::new();
    assert_eq!(v4.lookup(1), None);
    v4.insert(Prefix::new(0, 0).unwrap(), 7);
    v4.insert(Prefix::new(0x0a00_0001, 32).unwrap(), 8);
    v4.insert(Prefix::new(0x0a00_0000, 31).unwrap(), 9);
    let m = |len, nexthop| Some(RouteMatch { len, nexthop });
    assert_eq!(v4.lookup(0x0a00_0001), m(32, 8));
    assert_eq!(v4.lookup(0x0a00_0000), m(31, 9));
    assert_eq!(v4.lookup(0x0a00_0002), m(0, 7));
    assert_eq!(v4.lookup(u32::MAX), m(0, 7));
    assert_eq!(v4.remove(Prefix::new(0x0a00_0001, 32).unwrap()), Some(8));
    assert_eq!(v4.remove(Prefix::new(0x0a00_0001, 32).unwrap()), None);
    assert_eq!(v4.lookup(0x0a00_0001), m(31, 9));

    let mut v6 = Lpm::<u128>::new();
    let host = 0x2001_0db8_0000_0000_0000_0000_0000_0001u128;
    v6.insert(Prefix::new(0, 0).unwrap(), 1);
    v6.insert(Prefix::new(host, 128).unwrap(), 2);
    v6.insert(Prefix::new(host, 127).unwrap(), 3);
    v6.insert(Prefix::new(host, 32).unwrap(), 4);
    assert_eq!(v6.lookup(host), m(128, 2));
    assert_eq!(v6.lookup(host - 1), m(127, 3));
    assert_eq!(v6.lookup(host + 1), m(32, 4));
    assert_eq!(v6.lookup(1), m(0, 1));
    assert_eq!(v6.get(Prefix::new(host, 127).unwrap()), Some(3));
    assert_eq!(v6.iter().count(), 4);
}

/// Inserting and removing many routes of one stratum leaves removed keys
/// in its filter until a rebuild: lookups stay right throughout.
#[test]
fn stale_filter_keys_are_never_routes() {
    let mut lpm = Lpm::<u32>::new();
    let mut reference = Reference::new();
    let mut rng = Rng::new(5);
    let mut present = Vec::new();
    for round in 0..20 {
        for _ in 0..2_000 {
            let p = Prefix::new(rng.next_u64() as u32, 24).unwrap();
            lpm.insert(p, round);
            reference.insert(p, round);
            present.push(p);
        }
        // Remove most of them again.
        for p in present.drain(..1_800) {
            assert_eq!(lpm.remove(p), reference.remove(p));
        }
        let addrs: Vec<u32> = (0..5_000).map(|_| rng.next_u64() as u32).collect();
        check("churn", &lpm, &reference, &addrs);
    }
}

fn bgp_check<A: Address>(routes: &[(Prefix<A>, u32)], addrs: usize) {
    let mut lpm = Lpm::<A>::new();
    let mut reference = Reference::new();
    for &(p, nh) in routes {
        lpm.insert(p, nh);
        reference.insert(p, nh);
    }
    let mut probe = synth::addresses(routes, addrs, 0.8, 11);
    probe.extend(probe_addresses(routes, addrs / 4, &mut Rng::new(12)));
    check(&format!("bgp {}", routes.len()), &lpm, &reference, &probe);
}

#[test]
fn bgp_shaped_tables() {
    bgp_check(&synth::bgp_v4(100_000, 1), 1_000_000);
    bgp_check(&synth::bgp_v6(50_000, 2), 200_000);
}

/// The full-size tables of the benchmark (seconds to build and check).
#[test]
#[ignore]
fn bgp_full_size_tables() {
    bgp_check(&synth::bgp_v4(1_000_000, 1), 4_000_000);
    bgp_check(&synth::bgp_v6(200_000, 2), 1_000_000);
}

/// Workers share one table read-only.
#[test]
fn tables_are_shareable() {
    fn shareable<T: Send + Sync>() {}
    shareable::<Lpm<u32>>();
    shareable::<Lpm<u128>>();
}
