//! The split-block layout: every SIMD backend bit-identical to the scalar
//! reference (kernels and whole filters, every batch length 0..=67, then
//! property tests), both equal to the positions the index formula gives, no
//! false negatives, false-positive rates against the formula, sizing, and
//! the counting, port and transfer forms. A backend the CPU lacks is
//! skipped (x86_64: scalar + AVX2; under qemu: scalar + NEON).

use kernels::bloom::{
    Bloom, CountingBloom, DecodeError, Incompatible, Layout, ParamError, Params, PortFilter,
    PortSet, SPLIT_BLOCK_BITS, split_block_fpr,
};
use kernels::index::{self, SALTS, SplitBlock};
use kernels::{Backend, HashPair, Hasher};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

mod common;
use common::disjoint_keys;

fn simd_backends() -> Vec<Backend> {
    let list: Vec<Backend> = Backend::available_list()
        .into_iter()
        .filter(|b| *b != Backend::Scalar)
        .collect();
    if list.is_empty() {
        eprintln!("note: no SIMD backend on this CPU; only scalar is checked");
    }
    list
}

fn split(bits: u64) -> Params {
    Params::new(Layout::SplitBlock, bits, 8).unwrap()
}

fn answers(b: &Bloom, keys: &[[u32; 4]]) -> Vec<bool> {
    let mut out = vec![false; keys.len()];
    b.contains_batch(keys, &mut out);
    out
}

/// The reference filter, written from the formula alone: block
/// `h1 >> (32 - log2 blocks)`, word `j` gets bit `(h2 * SALTS[j]) >> 27`;
/// bit `i` of word `j` of block `b` is filter position `256 b + 32 j + i`,
/// so the raw transfer payload (little-endian `u64`s) is these words in
/// order, little-endian.
fn reference_payload(params: Params, hasher: &Hasher, keys: &[[u32; 4]]) -> Vec<u8> {
    let log2_blocks = params.blocks().trailing_zeros();
    let mut words = vec![0u32; (params.bits() / 32) as usize];
    for key in keys {
        let HashPair { h1, h2 } = hasher.hash_one(key);
        let b = (u64::from(h1) >> (32 - log2_blocks)) as usize;
        for (j, salt) in SALTS[..8].iter().enumerate() {
            words[b * 8 + j] |= 1 << (h2.wrapping_mul(*salt) >> 27);
        }
    }
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

#[test]
fn params_and_sizing() {
    assert_eq!(Layout::default(), Layout::SplitBlock);
    assert_eq!(SPLIT_BLOCK_BITS, 256);
    assert_eq!(
        Params::new(Layout::SplitBlock, 4096, 7),
        Err(ParamError::SplitBlockK(7))
    );
    assert!(
        ParamError::SplitBlockK(7)
            .to_string()
            .contains("k must be 8")
    );
    assert_eq!(
        Params::new(Layout::SplitBlock, 128, 8),
        Err(ParamError::Bits(Layout::SplitBlock, 128))
    );
    assert_eq!(
        Params::new(Layout::SplitBlock, 768, 8),
        Err(ParamError::Bits(Layout::SplitBlock, 768))
    );
    assert_eq!(split(256).blocks(), 1);
    for (n, p) in [
        (50_000u64, 0.01),
        (1000, 0.001),
        (13_000, 0.05),
        (1, 0.5),
        (48_000, 0.01),
    ] {
        let pr = Params::for_items(Layout::SplitBlock, n, p).unwrap();
        assert_eq!(pr.k(), 8);
        assert!(pr.blocks().is_power_of_two());
        let f = pr.false_positive_rate(n as f64);
        assert!(f <= p, "{n} {p} {pr:?}");
        assert_eq!(f, split_block_fpr(n as f64, pr.blocks()));
        if pr.blocks() > 1 {
            assert!(split_block_fpr(n as f64, pr.blocks() / 2) > p, "{n} {p}");
        }
    }
    // The formula at a known point: lambda = 0 gives 0, a huge load 1.
    assert_eq!(split_block_fpr(0.0, 8), 0.0);
    assert!(split_block_fpr(1e6, 1) > 0.999);
    let b = Bloom::with_rate(10_000, 0.01).unwrap();
    assert_eq!(b.params().layout(), Layout::SplitBlock);
}

/// Random pairs through the kernels directly: every backend's blocks and
/// answers equal the scalar reference's, for every batch length 0..=67 and
/// sub-slice offset, and the scalar blocks equal the mask formula.
#[test]
fn kernels_match_scalar_every_length() {
    let mut rng = StdRng::seed_from_u64(67);
    let pairs: Vec<HashPair> = (0..67 + 8)
        .map(|_| HashPair {
            h1: rng.random(),
            h2: rng.random(),
        })
        .collect();
    for log2_blocks in [0u32, 1, 3, 6] {
        let layout = SplitBlock::new(log2_blocks);
        let nb = layout.blocks() as usize;
        for off in 0..8 {
            for len in 0..=67 {
                let ins = &pairs[off..off + len];
                let mut want = vec![[0u32; 8]; nb];
                index::split_block_insert(Backend::Scalar, &ins[..len / 2], layout, &mut want);
                // The formula.
                let mut formula = vec![[0u32; 8]; nb];
                for p in &ins[..len / 2] {
                    let m = SplitBlock::mask(*p);
                    for (w, mw) in formula[layout.block(*p)].iter_mut().zip(m) {
                        *w |= mw;
                    }
                }
                assert_eq!(want, formula, "log2_blocks={log2_blocks} len={len}");
                let mut want_out = vec![false; len + 2];
                index::split_block_contains(Backend::Scalar, ins, layout, &want, &mut want_out);
                assert!(want_out[..len / 2].iter().all(|&h| h));
                for b in simd_backends() {
                    let mut got = vec![[0u32; 8]; nb];
                    index::split_block_insert(b, &ins[..len / 2], layout, &mut got);
                    assert_eq!(
                        got, want,
                        "{b} log2_blocks={log2_blocks} off={off} len={len}"
                    );
                    let mut out = vec![true; len + 2];
                    out[len..].fill(false);
                    index::split_block_contains(b, ins, layout, &want, &mut out);
                    assert_eq!(
                        out, want_out,
                        "{b} log2_blocks={log2_blocks} off={off} len={len}"
                    );
                }
            }
        }
    }
}

/// Whole filters: every backend builds the same bits as scalar and gives the
/// same answers, for every batch length 0..=67, and equals the reference.
#[test]
fn filters_match_scalar_every_length() {
    let (keys, others) = disjoint_keys(3, 67, 67);
    let params = split(1 << 12);
    for seed in [0u64, 1, 0xdead_beef_cafe_f00d] {
        let scalar = Hasher::with_seed(seed).on_backend(Backend::Scalar).unwrap();
        for len in 0..=67 {
            let mut want = Bloom::new(params, scalar.clone());
            want.insert_batch(&keys[..len]);
            assert_eq!(
                &want.to_bytes()[kernels::bloom::HEADER_LEN..],
                &reference_payload(params, &scalar, &keys[..len])[..],
                "seed={seed} len={len}"
            );
            let mixed: Vec<[u32; 4]> = keys[..len]
                .iter()
                .zip(&others[..len])
                .flat_map(|(a, b)| [*a, *b])
                .collect();
            let want_out = answers(&want, &mixed[..len]);
            assert!(want_out.iter().step_by(2).all(|&h| h));
            for b in simd_backends() {
                let h = Hasher::with_seed(seed).on_backend(b).unwrap();
                let mut got = Bloom::new(params, h);
                got.insert_batch(&keys[..len]);
                assert_eq!(got, want, "{b} seed={seed} len={len}");
                assert_eq!(answers(&got, &mixed[..len]), want_out, "{b} len={len}");
                // One key at a time gives the same filter.
                let mut one = Bloom::new(params, got.hasher().clone());
                for k in &keys[..len] {
                    one.insert(k);
                }
                assert_eq!(one, want);
                for (k, &w) in mixed[..len].iter().zip(&want_out) {
                    assert_eq!(got.contains(k), w);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn backends_bit_identical_and_no_false_negatives(
        log2_bits in 8u32..16,
        seed in any::<u64>(),
        keys in prop::collection::vec(any::<[u32; 4]>(), 0..300),
        queries in prop::collection::vec(any::<[u32; 4]>(), 0..200),
    ) {
        let params = split(1 << log2_bits);
        let scalar = Hasher::with_seed(seed).on_backend(Backend::Scalar).unwrap();
        let mut want = Bloom::new(params, scalar.clone());
        let (first, rest) = keys.split_at(keys.len() / 2);
        for key in first {
            want.insert(key);
        }
        want.insert_batch(rest);
        prop_assert_eq!(
            &want.to_bytes()[kernels::bloom::HEADER_LEN..],
            &reference_payload(params, &scalar, &keys)[..]
        );
        prop_assert!(answers(&want, &keys).iter().all(|&h| h));
        let want_q = answers(&want, &queries);
        for b in simd_backends() {
            let mut got = Bloom::new(params, Hasher::with_seed(seed).on_backend(b).unwrap());
            got.insert_batch(&keys);
            prop_assert_eq!(&got, &want);
            prop_assert!(answers(&got, &keys).iter().all(|&h| h));
            prop_assert_eq!(answers(&got, &queries), want_q.clone());
        }
    }

    #[test]
    fn ten_word_keys_agree(seed in any::<u64>(), keys in prop::collection::vec(any::<[u32; 10]>(), 1..150)) {
        let params = split(1 << 11);
        let mut a = Bloom::new(params, Hasher::with_seed(seed).on_backend(Backend::Scalar).unwrap());
        a.insert_batch(&keys);
        for b in simd_backends() {
            let mut c = Bloom::new(params, Hasher::with_seed(seed).on_backend(b).unwrap());
            c.insert_batch(&keys);
            prop_assert_eq!(&c, &a);
            let mut out = vec![false; keys.len()];
            c.contains_batch(&keys, &mut out);
            prop_assert!(out.iter().all(|&h| h));
        }
    }
}

fn check_fpr(n: usize, p: f64, q: usize, seed: u64) {
    let params = Params::for_items(Layout::SplitBlock, n as u64, p).unwrap();
    let formula = params.false_positive_rate(n as f64);
    assert!(formula <= p);
    let (ins, qry) = disjoint_keys(seed, n, q);
    let mut b = Bloom::new(params, Hasher::with_seed(seed ^ 0x55));
    b.insert_batch(&ins);
    let hits = answers(&b, &qry).iter().filter(|&&h| h).count();
    let measured = hits as f64 / q as f64;
    let rel = (measured - formula).abs() / formula;
    eprintln!(
        "SplitBlock n = {n}, p = {p}: m = {} ({} bits/item), formula {formula:.6}, measured {measured:.6} ({hits} of {q}), relative error {rel:.4}",
        params.bits(),
        params.bits() as f64 / n as f64,
    );
    assert!(rel <= 0.10, "measured {measured} vs formula {formula}");
    // The size estimate from the set bits.
    let est = b.estimate_items();
    assert!((est - n as f64).abs() / (n as f64) < 0.02, "{est} vs {n}");
}

#[test]
fn false_positive_rate_matches_formula() {
    check_fpr(48_000, 0.01, 1_000_000, 1);
    check_fpr(12_000, 0.002, 3_000_000, 2);
}

#[test]
fn counting_and_port_filters_use_the_same_positions() {
    let params = split(1 << 11);
    let h = Hasher::with_seed(21);
    let (keys, others) = disjoint_keys(21, 300, 3000);
    let mut plain = Bloom::new(params, h.clone());
    plain.insert_batch(&keys);
    let mut c = CountingBloom::new(params, h.clone());
    c.insert_batch(&keys);
    // The counting filter derives positions portably (the index formula);
    // its export equals the kernels' filter.
    assert_eq!(c.to_bloom(), plain);
    for k in keys.iter().chain(&others) {
        assert_eq!(c.contains(k), plain.contains(k));
    }
    // Remove half; no false negatives for the rest.
    for k in &keys[..150] {
        assert!(c.remove(k));
    }
    assert!(keys[150..].iter().all(|k| c.contains(k)));

    let mut rng = StdRng::seed_from_u64(5);
    let filters: Vec<CountingBloom> = (0..70)
        .map(|_| {
            let mut f = CountingBloom::new(params, h.clone());
            let mine: Vec<[u32; 4]> = keys
                .iter()
                .filter(|_| rng.random_ratio(1, 4))
                .copied()
                .collect();
            f.insert_batch(&mine);
            f
        })
        .collect();
    let pf = PortFilter::build(&filters).unwrap();
    let mut out = vec![PortSet::new(); keys.len()];
    pf.query_batch(&keys, &mut out);
    for (key, set) in keys.iter().zip(&out) {
        let want: Vec<usize> = (0..70).filter(|&p| filters[p].contains(key)).collect();
        assert_eq!(set.iter().collect::<Vec<_>>(), want);
    }
    // Mixing layouts is refused, clearly.
    let blocked = CountingBloom::new(Params::new(Layout::Blocked, 1 << 11, 8).unwrap(), h);
    let err = PortFilter::build(&[filters[0].clone(), blocked]).unwrap_err();
    assert!(err.to_string().contains("layout"), "{err}");
}

#[test]
fn union_intersection_halving_and_compatibility() {
    let h = Hasher::with_seed(9);
    let params = Params::for_items(Layout::SplitBlock, 4000, 0.01).unwrap();
    let (keys, others) = disjoint_keys(6, 3000, 100_000);
    let (a_keys, b_keys) = (&keys[..2000], &keys[1000..]);
    let mut a = Bloom::new(params, h.clone());
    let mut b = Bloom::new(params, h.clone());
    let mut both = Bloom::new(params, h.clone());
    a.insert_batch(a_keys);
    b.insert_batch(b_keys);
    both.insert_batch(&keys);
    assert_eq!(a.union(&b).unwrap(), both);
    let i = a.intersection(&b).unwrap();
    assert!(keys[1000..2000].iter().all(|k| i.contains(k)));

    let mut big = Bloom::new(split(1 << 16), h.clone());
    big.insert_batch(&keys[..2000]);
    let half = big.halve().unwrap();
    let mut small = Bloom::new(split(1 << 15), h.clone());
    small.insert_batch(&keys[..2000]);
    assert_eq!(half, small);
    let quarter = half.halve().unwrap();
    assert!(keys[..2000].iter().all(|k| quarter.contains(k)));
    let rate = |f: &Bloom| answers(f, &others).iter().filter(|&&x| x).count();
    assert!(rate(&quarter) >= rate(&half));
    // Down to two blocks; one more halving is refused (m >= 1024 rule).
    let mut f = Bloom::new(split(1 << 10), h.clone());
    f.insert_batch(&keys[..20]);
    let g = f.halve().unwrap();
    assert_eq!(g.params().bits(), 512);
    assert!(keys[..20].iter().all(|k| g.contains(k)));
    assert_eq!(g.halve(), Err(ParamError::CannotHalve(512)));

    let blocked = Bloom::new(Params::new(Layout::Blocked, 1 << 12, 8).unwrap(), h.clone());
    let sb = Bloom::new(split(1 << 12), h.clone());
    let err = sb.compatible(&blocked).unwrap_err();
    assert_eq!(
        err,
        Incompatible::Layout(Layout::SplitBlock, Layout::Blocked)
    );
    assert!(err.to_string().contains("SplitBlock vs Blocked"), "{err}");
}

#[test]
fn transfer_round_trips_with_layout_code_2() {
    for n in [0, 1, 50, 400, 5000] {
        let h = Hasher::with_seed(5);
        let mut b = Bloom::new(split(1 << 13), h.clone());
        let (keys, _) = disjoint_keys(5, n, 0);
        b.insert_batch(&keys);
        for bytes in [b.to_bytes(), b.to_compressed_bytes()] {
            assert_eq!(bytes[6], 2);
            let back = Bloom::from_bytes(&bytes, h.clone()).unwrap();
            assert_eq!(back, b, "n = {n}");
            assert!(keys.iter().all(|k| back.contains(k)));
        }
        // A split-block header with k other than 8 is a geometry error.
        let mut bad = b.to_bytes();
        bad[7] = 7;
        assert_eq!(
            Bloom::from_bytes(&bad, h.clone()).unwrap_err(),
            DecodeError::Params(ParamError::SplitBlockK(7))
        );
    }
}
