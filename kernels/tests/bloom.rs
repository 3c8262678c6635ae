//! Bloom, CountingBloom, PortFilter and the transfer forms: no false
//! negatives (property tests), false-positive rates against the layouts'
//! formulas, union/intersection/halving semantics, size estimates, and
//! decoding that rejects malformed bytes without panicking.

use std::collections::HashMap;

use kernels::bloom::{
    Bloom, CountingBloom, DecodeError, Incompatible, Layout, ParamError, Params, PortFilter,
    PortSet,
};
use kernels::{Backend, Hasher};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

mod common;
use common::disjoint_keys;

fn rate(b: &Bloom, keys: &[[u32; 4]]) -> f64 {
    let mut out = vec![false; keys.len()];
    b.contains_batch(keys, &mut out);
    out.iter().filter(|&&h| h).count() as f64 / keys.len() as f64
}

fn layout_strategy() -> impl Strategy<Value = Layout> {
    prop_oneof![Just(Layout::Classic), Just(Layout::Blocked)]
}

fn small_params(layout: Layout, log2_bits: u32, k: usize) -> Params {
    Params::new(layout, 1 << log2_bits, k).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn no_false_negatives(
        layout in layout_strategy(),
        log2_bits in 9u32..16,
        k in 1usize..=16,
        seed in any::<u64>(),
        keys in prop::collection::vec(any::<[u32; 4]>(), 0..300),
    ) {
        let mut b = Bloom::new(small_params(layout, log2_bits, k), Hasher::with_seed(seed));
        let (first, rest) = keys.split_at(keys.len() / 2);
        for key in first {
            b.insert(key);
        }
        b.insert_batch(rest);
        let mut out = vec![false; keys.len()];
        b.contains_batch(&keys, &mut out);
        prop_assert!(out.iter().all(|&h| h));
        prop_assert!(keys.iter().all(|key| b.contains(key)));
    }

    #[test]
    fn backends_agree(seed in any::<u64>(), keys in prop::collection::vec(any::<[u32; 10]>(), 1..200)) {
        let params = Params::new(Layout::Blocked, 1 << 12, 6).unwrap();
        let scalar = Hasher::with_seed(seed).on_backend(Backend::Scalar).unwrap();
        let mut a = Bloom::new(params, scalar);
        let mut b = Bloom::new(params, Hasher::with_seed(seed));
        a.insert_batch(&keys);
        b.insert_batch(&keys);
        prop_assert_eq!(a, b);
    }
}

fn check_fpr(layout: Layout, n: usize, p: f64, q: usize, seed: u64) {
    let params = Params::for_items(layout, n as u64, p).unwrap();
    let formula = params.false_positive_rate(n as f64);
    assert!(formula <= p);
    let (ins, qry) = disjoint_keys(seed, n, q);
    let mut b = Bloom::new(params, Hasher::with_seed(seed ^ 0x55));
    b.insert_batch(&ins);
    let measured = rate(&b, &qry);
    let rel = (measured - formula).abs() / formula;
    eprintln!(
        "{layout:?} n = {n}, p = {p}: m = {} ({} bits/item), k = {}, formula {formula:.6}, measured {measured:.6}, relative error {rel:.4}",
        params.bits(),
        params.bits() as f64 / n as f64,
        params.k()
    );
    assert!(rel <= 0.10, "measured {measured} vs formula {formula}");
}

#[test]
fn false_positive_rate_blocked_matches_putze_formula() {
    check_fpr(Layout::Blocked, 50_000, 0.01, 1_000_000, 1);
    check_fpr(Layout::Blocked, 13_000, 0.05, 500_000, 2);
    check_fpr(Layout::Blocked, 20_000, 0.001, 2_000_000, 3);
}

#[test]
fn false_positive_rate_classic_matches_formula() {
    check_fpr(Layout::Classic, 10_000, 0.01, 1_000_000, 4);
    check_fpr(Layout::Classic, 30_000, 0.001, 2_000_000, 5);
}

#[test]
fn union_and_intersection() {
    for layout in [Layout::Classic, Layout::Blocked] {
        let params = Params::for_items(layout, 4000, 0.01).unwrap();
        let h = Hasher::with_seed(9);
        let (keys, _) = disjoint_keys(6, 3000, 0);
        let (a_keys, b_keys) = (&keys[..2000], &keys[1000..]);
        let mut a = Bloom::new(params, h.clone());
        let mut b = Bloom::new(params, h.clone());
        let mut both = Bloom::new(params, h.clone());
        let mut common = Bloom::new(params, h.clone());
        a.insert_batch(a_keys);
        b.insert_batch(b_keys);
        both.insert_batch(&keys);
        common.insert_batch(&keys[1000..2000]);
        // The union is exactly the filter of the union of the sets.
        assert_eq!(a.union(&b).unwrap(), both);
        // The intersection contains the common keys, and its bits are a
        // superset of the common keys' filter.
        let i = a.intersection(&b).unwrap();
        assert!(keys[1000..2000].iter().all(|k| i.contains(k)));
        assert_eq!(i.union(&common).unwrap(), i);
        let mut a2 = a.clone();
        a2.union_with(&b).unwrap();
        assert_eq!(a2, both);
    }
}

#[test]
fn incompatible_filters_are_refused() {
    let h = Hasher::with_seed(1);
    let base = Bloom::new(Params::new(Layout::Blocked, 4096, 4).unwrap(), h.clone());
    let cases = [
        (
            Bloom::new(Params::new(Layout::Blocked, 8192, 4).unwrap(), h.clone()),
            Incompatible::Bits(4096, 8192),
        ),
        (
            Bloom::new(Params::new(Layout::Blocked, 4096, 5).unwrap(), h.clone()),
            Incompatible::HashCount(4, 5),
        ),
        (
            Bloom::new(Params::new(Layout::Classic, 4096, 4).unwrap(), h.clone()),
            Incompatible::Layout(Layout::Blocked, Layout::Classic),
        ),
        (
            Bloom::new(
                Params::new(Layout::Blocked, 4096, 4).unwrap(),
                Hasher::with_seed(2),
            ),
            Incompatible::Key(h.key().id(), Hasher::with_seed(2).key().id()),
        ),
    ];
    for (other, err) in cases {
        assert_eq!(base.union(&other), Err(err));
        assert_eq!(base.intersection(&other), Err(err));
        assert_eq!(base.estimate_union(&other), Err(err));
        assert!(!err.to_string().is_empty());
    }
}

#[test]
fn halving_keeps_every_key_and_equals_the_smaller_filter() {
    for layout in [Layout::Classic, Layout::Blocked] {
        let h = Hasher::with_seed(3);
        let (keys, others) = disjoint_keys(7, 2000, 100_000);
        let mut big = Bloom::new(Params::new(layout, 1 << 16, 5).unwrap(), h.clone());
        big.insert_batch(&keys);
        let half = big.halve().unwrap();
        assert_eq!(half.params().bits(), 1 << 15);
        assert!(keys.iter().all(|k| half.contains(k)), "{layout:?}");
        // Top-bit indexing: the halved filter is exactly the filter the
        // same keys give at half the size.
        let mut small = Bloom::new(Params::new(layout, 1 << 15, 5).unwrap(), h.clone());
        small.insert_batch(&keys);
        assert_eq!(half, small, "{layout:?}");
        let quarter = half.halve().unwrap();
        assert!(keys.iter().all(|k| quarter.contains(k)));
        assert!(rate(&quarter, &others) >= rate(&half, &others));
    }
    let odd = Bloom::new(
        Params::new(Layout::Classic, 640, 3).unwrap(),
        Hasher::with_seed(1),
    );
    assert_eq!(odd.halve(), Err(ParamError::CannotHalve(640)));
    let tiny = Bloom::new(
        Params::new(Layout::Blocked, 512, 3).unwrap(),
        Hasher::with_seed(1),
    );
    assert_eq!(tiny.halve(), Err(ParamError::CannotHalve(512)));
}

#[test]
fn size_estimates_within_a_few_percent() {
    for layout in [Layout::Classic, Layout::Blocked] {
        let params = Params::for_items(layout, 40_000, 0.01).unwrap();
        let h = Hasher::with_seed(11);
        let (keys, _) = disjoint_keys(8, 40_000, 0);
        let (a_keys, b_keys) = (&keys[..25_000], &keys[15_000..]);
        let mut a = Bloom::new(params, h.clone());
        let mut b = Bloom::new(params, h.clone());
        a.insert_batch(a_keys);
        b.insert_batch(b_keys);
        let close = |what: &str, est: f64, truth: f64, tol: f64| {
            let rel = (est - truth).abs() / truth;
            eprintln!(
                "{layout:?} {what}: estimate {est:.0}, truth {truth}, relative error {rel:.4}"
            );
            assert!(rel <= tol, "{layout:?} {what}: {est} vs {truth}");
        };
        close("|A|", a.estimate_items(), 25_000.0, 0.02);
        close("|B|", b.estimate_items(), 25_000.0, 0.02);
        close("|A u B|", a.estimate_union(&b).unwrap(), 40_000.0, 0.02);
        close(
            "|A n B|",
            a.estimate_intersection(&b).unwrap(),
            10_000.0,
            0.05,
        );
    }
}

/// One step of a counting-filter history.
#[derive(Debug, Clone)]
enum Op {
    Insert(u8),
    Remove(u8),
}

fn op_strategy() -> impl Strategy<Value = Op> {
    // A universe of 40 keys so keys repeat and counters saturate.
    prop_oneof![
        3 => (0u8..40).prop_map(Op::Insert),
        2 => (0u8..40).prop_map(Op::Remove),
    ]
}

fn universe_key(i: u8) -> [u32; 4] {
    [0x0a00_0000 + u32::from(i), 0xc0a8_0001, 80, 6]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn counting_no_false_negatives_under_saturation(
        layout in layout_strategy(),
        k in 1usize..=8,
        seed in any::<u64>(),
        ops in prop::collection::vec(op_strategy(), 0..400),
    ) {
        // 512 counters for up to 40 keys inserted many times: saturation.
        let mut c = CountingBloom::new(small_params(layout, 9, k), Hasher::with_seed(seed));
        let mut live: HashMap<u8, usize> = HashMap::new();
        for op in ops {
            match op {
                Op::Insert(i) => {
                    c.insert(&universe_key(i));
                    *live.entry(i).or_default() += 1;
                }
                Op::Remove(i) => {
                    // Only remove inserted items (the counting filter's contract).
                    if let Some(n) = live.get_mut(&i).filter(|n| **n > 0) {
                        prop_assert!(c.remove(&universe_key(i)));
                        *n -= 1;
                    }
                }
            }
            for (&i, &n) in &live {
                if n > 0 {
                    prop_assert!(c.contains(&universe_key(i)), "lost key {}", i);
                }
            }
        }
        let plain = c.to_bloom();
        for i in 0..=255u8 {
            let key = universe_key(i);
            prop_assert_eq!(plain.contains(&key), c.contains(&key));
        }
    }

    #[test]
    fn port_filter_equals_per_port_contains(
        ports in 1usize..=140,
        seed in any::<u64>(),
        layout in layout_strategy(),
    ) {
        let params = Params::new(layout, 1 << 11, 4).unwrap();
        let h = Hasher::with_seed(seed);
        let mut rng = StdRng::seed_from_u64(seed);
        let keys: Vec<[u32; 4]> = (0..150).map(|_| [rng.random(), 1, 2, 17]).collect();
        let filters: Vec<CountingBloom> = (0..ports)
            .map(|_| {
                let mut c = CountingBloom::new(params, h.clone());
                let mine: Vec<[u32; 4]> =
                    keys.iter().filter(|_| rng.random_ratio(1, 4)).copied().collect();
                c.insert_batch(&mine);
                c
            })
            .collect();
        let pf = PortFilter::build(&filters).unwrap();
        let mut out = vec![PortSet::new(); keys.len()];
        pf.query_batch(&keys, &mut out);
        for (key, set) in keys.iter().zip(&out) {
            let want: Vec<usize> = (0..ports).filter(|&p| filters[p].contains(key)).collect();
            prop_assert_eq!(set.iter().collect::<Vec<_>>(), want.clone());
            prop_assert_eq!(set.len(), want.len());
            prop_assert_eq!(*set, pf.query(key));
            for (p, f) in filters.iter().enumerate() {
                prop_assert_eq!(set.contains(p), f.contains(key));
            }
        }
        // Incremental: clear a port by setting an empty filter, then restore.
        let mut inc = pf.clone();
        inc.set_port(0, &CountingBloom::new(params, h.clone())).unwrap();
        for key in &keys {
            prop_assert!(!inc.query(key).contains(0));
        }
        inc.set_port(0, &filters[0]).unwrap();
        for key in &keys {
            prop_assert_eq!(inc.query(key), pf.query(key));
        }
    }
}

#[test]
fn port_filter_errors() {
    let p = Params::new(Layout::Blocked, 1024, 3).unwrap();
    let a = CountingBloom::new(p, Hasher::with_seed(1));
    let b = CountingBloom::new(p, Hasher::with_seed(2));
    assert!(PortFilter::build(&[]).is_err());
    assert!(PortFilter::build(&[a.clone(), b]).is_err());
    let mut pf = PortFilter::build(std::slice::from_ref(&a)).unwrap();
    assert!(pf.set_port(1, &a).is_err());
    assert!(PortFilter::new(p, Hasher::with_seed(1), 257).is_err());
    assert!(PortFilter::new(p, Hasher::with_seed(1), 256).is_ok());
}

fn sample_filter(layout: Layout, bits: u64, k: usize, n: usize, seed: u64) -> Bloom {
    let mut b = Bloom::new(
        Params::new(layout, bits, k).unwrap(),
        Hasher::with_seed(seed),
    );
    let (keys, _) = disjoint_keys(seed, n, 0);
    b.insert_batch(&keys);
    b
}

#[test]
fn transfer_round_trips() {
    for layout in [Layout::Classic, Layout::Blocked] {
        for n in [0, 1, 50, 400, 5000] {
            let b = sample_filter(layout, 1 << 13, 4, n, 5);
            for bytes in [b.to_bytes(), b.to_compressed_bytes()] {
                let back = Bloom::from_bytes(&bytes, Hasher::with_seed(5)).unwrap();
                assert_eq!(back, b, "{layout:?} n = {n}");
                assert_eq!(
                    Bloom::from_bytes(&bytes, Hasher::with_seed(6)).unwrap_err(),
                    DecodeError::Key {
                        expected: Hasher::with_seed(6).key().id(),
                        found: Hasher::with_seed(5).key().id()
                    }
                );
            }
            // Sparse filters compress.
            if n == 50 {
                assert!(b.to_compressed_bytes().len() * 4 < b.to_bytes().len());
            }
        }
    }
}

#[test]
fn transfer_rejects_every_truncation_and_trailing_bytes() {
    for b in [
        sample_filter(Layout::Blocked, 1 << 12, 3, 60, 1),
        sample_filter(Layout::Classic, 1 << 12, 3, 60, 1),
        sample_filter(Layout::Classic, 1 << 10, 3, 900, 1),
    ] {
        for bytes in [b.to_bytes(), b.to_compressed_bytes()] {
            for len in 0..bytes.len() {
                assert!(Bloom::from_bytes(&bytes[..len], Hasher::with_seed(1)).is_err());
            }
            let mut more = bytes.clone();
            more.push(0);
            assert_eq!(
                Bloom::from_bytes(&more, Hasher::with_seed(1)).unwrap_err(),
                DecodeError::TrailingBytes(1)
            );
        }
    }
}

#[test]
fn transfer_rejects_bad_headers() {
    let b = sample_filter(Layout::Blocked, 1 << 12, 3, 60, 1);
    let good = b.to_bytes();
    let h = || Hasher::with_seed(1);
    let with = |at: usize, v: &[u8]| {
        let mut x = good.clone();
        x[at..at + v.len()].copy_from_slice(v);
        Bloom::from_bytes(&x, h()).unwrap_err()
    };
    assert_eq!(with(0, b"XLMF"), DecodeError::BadMagic);
    assert_eq!(with(4, &[2]), DecodeError::Version(2));
    assert_eq!(with(5, &[7]), DecodeError::Encoding(7));
    assert_eq!(with(6, &[9]), DecodeError::Layout(9));
    assert!(matches!(with(7, &[0]), DecodeError::Params(_)));
    assert!(matches!(with(7, &[33]), DecodeError::Params(_)));
    assert!(matches!(
        with(8, &1000u64.to_le_bytes()),
        DecodeError::Params(_)
    ));
    assert_eq!(
        with(8, &(1u64 << 13).to_le_bytes()),
        DecodeError::PayloadLength(512)
    );
    assert!(matches!(
        with(28, &5u64.to_le_bytes()),
        DecodeError::Estimate(_) | DecodeError::Ones(_)
    ));
    assert!(matches!(
        with(36, &u64::MAX.to_le_bytes()),
        DecodeError::Truncated { .. }
    ));
    for e in [
        DecodeError::BadMagic,
        DecodeError::Corrupt,
        DecodeError::Version(3),
    ] {
        assert!(!e.to_string().is_empty());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        let _ = Bloom::from_bytes(&bytes, Hasher::with_seed(1));
    }

    #[test]
    fn decoding_arbitrary_headers_never_panics(
        encoding in 0u8..3,
        layout in 0u8..3,
        rest in prop::collection::vec(any::<u8>(), 0..400),
    ) {
        let mut bytes = b"BLMF".to_vec();
        bytes.extend_from_slice(&[1, encoding, layout]);
        bytes.extend_from_slice(&rest);
        let _ = Bloom::from_bytes(&bytes, Hasher::with_seed(1));
    }

    #[test]
    fn decoding_mutated_encodings_is_canonical(
        layout in layout_strategy(),
        n in 0usize..300,
        compressed in any::<bool>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let b = sample_filter(layout, 1 << 11, 3, n, 2);
        let mut bytes = if compressed { b.to_compressed_bytes() } else { b.to_bytes() };
        let original = bytes.clone();
        for (i, v) in edits {
            let at = i.index(bytes.len());
            bytes[at] = v;
        }
        // Any accepted encoding is the unique encoding of what it decodes to.
        if let Ok(back) = Bloom::from_bytes(&bytes, Hasher::with_seed(2)) {
            let again = if bytes[5] == 1 { back.to_compressed_bytes() } else { back.to_bytes() };
            prop_assert_eq!(again, bytes.clone());
            if bytes == original {
                prop_assert_eq!(back, b);
            }
        }
    }
}

/// A filter filled to the last bit (the state an IGMP join flood leaves a
/// multicast port in): its size estimate and false-positive rate are
/// finite, the rate is 1 within half a bit and matches what queries measure,
/// and a counting filter exported in that state says the same.
#[test]
fn full_filters_have_finite_estimates() {
    for layout in [Layout::Classic, Layout::Blocked, Layout::SplitBlock] {
        let k = if layout == Layout::SplitBlock { 8 } else { 3 };
        let params = small_params(layout, 10, k);
        let (keys, probes) = disjoint_keys(7, 20_000, 2_000);
        let mut b = Bloom::new(params, Hasher::with_seed(3));
        b.insert_batch(&keys);
        assert_eq!(b.count_ones(), params.bits(), "{layout:?}: filled");
        let n = b.estimate_items();
        assert!(n.is_finite() && n > 0.0, "{layout:?}: estimate {n}");
        let f = b.false_positive_rate();
        // At the estimate half a bit of the m is still clear: (1 - 1/2m)^k.
        let floor = 1.0 - k as f64 / params.bits() as f64;
        assert!(
            f.is_finite() && f >= floor && f <= 1.0,
            "{layout:?}: rate {f}"
        );
        assert_eq!(
            rate(&b, &probes),
            1.0,
            "{layout:?}: every probe answers yes"
        );

        let mut c = CountingBloom::new(params, Hasher::with_seed(3));
        for k in &keys {
            c.insert(k);
        }
        assert_eq!(c.to_bloom().false_positive_rate(), f, "{layout:?}");
    }
}
