//! False alarms on loop-free paths: the exact Markov-chain probability
//! against a simulation with masks from the real node-id hashing and the
//! real hop rule; and the hop rule on real packets agrees with the bits.
//!
//! "A false alarm on a path through h nodes": at least one of h distinct
//! nodes finds every bit of its mask already set, the filter being empty
//! when the first node sees it (see `dataplane::stage::icarus`).

mod icarus_common;

use dataplane::stage::icarus::{
    FilterParams, Icarus, IcarusConfig, LoopAction, MaskDeriver, Outcome, false_alarm_probability,
};
use dataplane::wire::icarus::{self, Filter, FilterWidth, Hop};
use icarus_common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Draws `h` distinct random node ids.
fn path(rng: &mut StdRng, h: usize, ids: &mut Vec<u64>) {
    ids.clear();
    while ids.len() < h {
        let id: u64 = rng.random();
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
}

/// Fraction of `paths` random loop-free paths of `h` nodes on which some
/// node alarms, each node's mask derived from its random id.
fn measure(params: FilterParams, h: usize, paths: usize, seed: u64) -> f64 {
    let d = MaskDeriver::new(params);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut ids = Vec::with_capacity(h);
    let mut alarms = 0usize;
    for _ in 0..paths {
        path(&mut rng, h, &mut ids);
        let mut f = Filter::empty(params.width());
        if ids
            .iter()
            .any(|&id| f.check_and_update(&d.mask(id)) == Hop::Loop)
        {
            alarms += 1;
        }
    }
    alarms as f64 / paths as f64
}

#[test]
fn false_alarms_match_the_markov_chain() {
    const PATHS: usize = 100_000;
    // (m, k, nodes)
    let rows: [(usize, usize, usize); 9] = [
        (64, 4, 10),
        (64, 5, 10),
        (128, 6, 10),
        (128, 10, 10),
        (128, 6, 15),
        (128, 10, 15),
        (128, 10, 20),
        (256, 8, 20),
        (256, 19, 10),
    ];
    eprintln!("icarus false alarms on loop-free paths ({PATHS} simulated paths per row)");
    eprintln!("|   m |  k | nodes |    exact |  measured |  diff | 4 sigma |");
    eprintln!("|----:|---:|------:|---------:|----------:|------:|--------:|");
    let mut failures = Vec::new();
    for (i, &(m, k, h)) in rows.iter().enumerate() {
        let params = FilterParams::from_bits(m, k).unwrap();
        let exact = false_alarm_probability(m, k, h);
        let measured = measure(params, h, PATHS, 0x1ca2_0000 + i as u64);
        let sigma = (exact * (1.0 - exact) / PATHS as f64).sqrt();
        let diff = measured - exact;
        eprintln!(
            "| {m:>3} | {k:>2} | {h:>5} | {:>7.3}% | {:>8.3}% | {:>+5.3}% | {:>6.3}% |",
            100.0 * exact,
            100.0 * measured,
            100.0 * diff,
            400.0 * sigma
        );
        // Within 4 standard errors of the binomial count (about 1 in 16000
        // for a correct implementation); the brief's +-0.06% for m = 128,
        // k = 6 is 3.4 sigma.
        let tol = if (m, k, h) == (128, 6, 10) {
            0.0006
        } else {
            (4.0 * sigma).max(1e-5)
        };
        if diff.abs() > tol {
            failures.push((m, k, h, exact, measured));
        }
    }
    assert!(failures.is_empty(), "outside tolerance: {failures:?}");
}

#[test]
fn the_three_reference_numbers() {
    let pct = |m, k, h| 100.0 * false_alarm_probability(m, k, h);
    eprintln!(
        "exact: m=128 k=6 10 nodes {:.4}%, m=64 k=4 10 nodes {:.4}%, m=256 k=8 20 nodes {:.4}%",
        pct(128, 6, 10),
        pct(64, 4, 10),
        pct(256, 8, 20)
    );
    assert_eq!(format!("{:.3}", pct(128, 6, 10)), "0.306");
    assert_eq!(format!("{:.2}", pct(64, 4, 10)), "8.70");
    assert_eq!(format!("{:.3}", pct(256, 8, 20)), "0.503");
}

/// Exact chain against brute force for a tiny filter: every mask of k bits
/// equally likely, enumerated.
#[test]
fn chain_matches_enumeration_for_a_tiny_filter() {
    // m = 6, k = 2, 3 nodes: 15^3 = 3375 equally likely mask sequences.
    let (m, k) = (6usize, 2usize);
    let masks: Vec<u32> = (0u32..1 << m)
        .filter(|x| x.count_ones() as usize == k)
        .collect();
    let mut alarms = 0usize;
    let mut total = 0usize;
    for &a in &masks {
        for &b in &masks {
            for &c in &masks {
                total += 1;
                let mut f = 0u32;
                let mut alarm = false;
                for x in [a, b, c] {
                    if f & x == x {
                        alarm = true;
                    }
                    f |= x;
                }
                alarms += usize::from(alarm);
            }
        }
    }
    let exact = false_alarm_probability(m, k, 3);
    assert!((exact - alarms as f64 / total as f64).abs() < 1e-12);
}

/// The simulation's bit-level rule and the hop on real packets agree, path
/// by path (IPv4 and IPv6, every width).
#[test]
fn packets_agree_with_the_bits() {
    let mut rng = StdRng::seed_from_u64(7);
    let mut ids = Vec::new();
    for (w, k) in [
        (FilterWidth::M64, 4),
        (FilterWidth::M128, 6),
        (FilterWidth::M256, 3),
    ] {
        let params = FilterParams::new(w, k).unwrap();
        let d = MaskDeriver::new(params);
        let mut alarms = 0;
        for p in 0..1_500 {
            path(&mut rng, 12, &mut ids);
            let mut frame = if p & 1 == 0 {
                ipv4_frame(&[], 17, b"sim")
            } else {
                ipv6_frame(&[], 6, b"sim")
            };
            icarus::insert(&mut frame, 14, &Filter::empty(w)).unwrap();
            let mut bits = Filter::empty(w);
            for &id in &ids {
                let mut cfg = IcarusConfig::new(id);
                cfg.params = params;
                cfg.on_loop = LoopAction::Forward;
                let mut node = Icarus::new(cfg);
                let expect = match bits.check_and_update(&d.mask(id)) {
                    Hop::Marked => Outcome::Marked,
                    Hop::Loop => Outcome::Loop,
                };
                alarms += usize::from(expect == Outcome::Loop);
                assert_eq!(node.hop(&mut frame, 14), expect);
                let loc = icarus::find(&frame, 14).unwrap().unwrap();
                assert_eq!(loc.filter(&frame), Some(bits));
            }
            check_l4(&frame, 14).unwrap();
        }
        assert!(
            alarms > 0,
            "m = {}: no false alarm at all in 12-node paths",
            w.bits()
        );
    }
}
