//! Hash quality, measured against statistics rather than assumed:
//! chi-square uniformity of indices for structured key sets, avalanche of
//! every output bit under every single-bit input flip, false-positive rates of
//! Bloom filters built on these indices against their formulas, and
//! independence of indices under different seeds. Seeds are fixed, so every
//! run sees the same numbers.

use kernels::index::{Blocked, Partitioned};
use kernels::{HashPair, Hasher};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use statrs::distribution::{ChiSquared, ContinuousCDF};

mod common;
use common::disjoint_keys;

const SEEDS: [u64; 3] = [1, 0x5eed, 0xfeed_face_dead_beef];

fn pairs_of<const W: usize>(h: &Hasher, keys: &[[u32; W]]) -> Vec<HashPair> {
    let mut out = vec![HashPair::default(); keys.len()];
    h.hash_batch(keys, &mut out);
    out
}

/// Upper-tail p-value of Pearson's statistic for `counts` against a uniform
/// expectation.
fn chi_square_p(counts: &[u64]) -> (f64, f64) {
    let total: u64 = counts.iter().sum();
    let expect = total as f64 / counts.len() as f64;
    assert!(
        expect >= 16.0,
        "too few keys per bucket for the test: {expect}"
    );
    let stat: f64 = counts
        .iter()
        .map(|&c| (c as f64 - expect).powi(2) / expect)
        .sum();
    let dist = ChiSquared::new((counts.len() - 1) as f64).unwrap();
    (stat, 1.0 - dist.cdf(stat))
}

/// Checks the uniformity of every partitioned row and of the blocked block
/// and bit indices for one key set.
fn check_uniform<const W: usize>(name: &str, keys: &[[u32; W]]) {
    // Aim for ~64 keys per bucket (at least 16).
    let log2_w = ((keys.len() / 64).max(2) as f64).log2().floor() as u32;
    let buckets = 1usize << log2_w;
    for seed in SEEDS {
        let h = Hasher::with_seed(seed);
        let pairs = pairs_of(&h, keys);
        let n = pairs.len();
        let rows = 4;
        let mut idx = vec![0u32; rows * n];
        h.partitioned(&pairs, Partitioned::new(rows, log2_w), &mut idx);
        let k = 4;
        let mut blocks = vec![0u32; n];
        let mut bits = vec![0u32; k * n];
        h.blocked(&pairs, Blocked::new(log2_w, 9, k), &mut blocks, &mut bits);

        let mut series: Vec<(String, Vec<u64>)> = Vec::new();
        for r in 0..rows {
            let mut c = vec![0u64; buckets];
            idx[r * n..(r + 1) * n]
                .iter()
                .for_each(|&i| c[i as usize] += 1);
            series.push((format!("row {r}"), c));
        }
        let mut c = vec![0u64; buckets];
        blocks.iter().for_each(|&b| c[b as usize] += 1);
        series.push(("block".into(), c));
        // Bit positions: 512 buckets; only when there are enough keys.
        if n >= 16 * 512 {
            for j in 0..k {
                let mut c = vec![0u64; 512];
                bits[j * n..(j + 1) * n]
                    .iter()
                    .for_each(|&b| c[b as usize] += 1);
                series.push((format!("bit {j}"), c));
            }
        }
        for (what, counts) in series {
            let (stat, p) = chi_square_p(&counts);
            assert!(
                p >= 0.001,
                "{name}, seed {seed:#x}, {what}: chi-square {stat:.1} over {} buckets, p = {p:.2e}",
                counts.len()
            );
        }
    }
}

const SRC: u32 = 0x0a00_0001; // 10.0.0.1
const DST: u32 = 0xc0a8_0102; // 192.168.1.2

#[test]
fn uniform_sequential_source_addresses() {
    let keys: Vec<[u32; 4]> = (0..65536u32)
        .map(|i| [SRC + i, DST, (40000 << 16) | 443, 6])
        .collect();
    check_uniform("sequential source addresses", &keys);
}

#[test]
fn uniform_only_source_port_varies() {
    let keys: Vec<[u32; 4]> = (0..65536u32)
        .map(|p| [SRC, DST, (p << 16) | 80, 6])
        .collect();
    check_uniform("source port only", &keys);
}

#[test]
fn uniform_source_port_and_protocol_vary() {
    let keys: Vec<[u32; 4]> = (0..16384u32)
        .flat_map(|p| [1u32, 6, 17, 132].map(|proto| [SRC, DST, ((1024 + p) << 16) | 53, proto]))
        .collect();
    check_uniform("source port and protocol", &keys);
}

#[test]
fn uniform_ipv6_addresses_differing_in_one_byte() {
    let base: [u32; 10] = [
        0x2001_0db8,
        0x0000_0001,
        0,
        0x0000_0010,
        0x2001_0db8,
        0x0000_0002,
        0,
        0x0000_0020,
        (5000 << 16) | 443,
        6,
    ];
    let mut keys = vec![base];
    // Every value of every byte of both addresses, one byte at a time.
    for byte in 0..32 {
        let (word, shift) = (byte / 4, 24 - 8 * (byte % 4));
        for v in 0..256u32 {
            let mut k = base;
            k[word] = (k[word] & !(0xff << shift)) | (v << shift);
            if k != base {
                keys.push(k);
            }
        }
    }
    assert_eq!(keys.len(), 1 + 32 * 255);
    check_uniform("IPv6 one byte differs", &keys);
}

/// Flipping any one input bit flips each output bit with probability
/// 0.5 +- 0.05 (measured over 10,000 random keys: 0.05 is ten standard
/// deviations, so a pass is not luck and a fail is not noise).
fn check_avalanche<const W: usize>() {
    const N: usize = 10_000;
    let mut rng = StdRng::seed_from_u64(W as u64 * 7);
    let keys: Vec<[u32; W]> = (0..N)
        .map(|_| std::array::from_fn(|_| rng.random()))
        .collect();
    for seed in SEEDS {
        let h = Hasher::with_seed(seed);
        let base = pairs_of(&h, &keys);
        let mut flipped = keys.clone();
        let mut out = vec![HashPair::default(); N];
        let mut worst = (0.5f64, 0usize, 0usize);
        for bit in 0..W * 32 {
            let (word, b) = (bit / 32, bit % 32);
            for (f, k) in flipped.iter_mut().zip(&keys) {
                *f = *k;
                f[word] ^= 1 << b;
            }
            h.hash_batch(&flipped, &mut out);
            let mut counts = [0u32; 64];
            for (x, y) in base.iter().zip(&out) {
                let d = (u64::from(x.h1 ^ y.h1)) | (u64::from(x.h2 ^ y.h2) << 32);
                for (o, c) in counts.iter_mut().enumerate() {
                    *c += ((d >> o) & 1) as u32;
                }
            }
            for (o, &c) in counts.iter().enumerate() {
                let p = f64::from(c) / N as f64;
                if (p - 0.5).abs() > (worst.0 - 0.5).abs() {
                    worst = (p, bit, o);
                }
            }
        }
        assert!(
            (worst.0 - 0.5).abs() <= 0.05,
            "W={W} seed {seed:#x}: input bit {} flips output bit {} with p = {:.4}",
            worst.1,
            worst.2,
            worst.0
        );
        eprintln!(
            "avalanche W={W} seed {seed:#x}: worst |p - 0.5| = {:.4}",
            (worst.0 - 0.5).abs()
        );
    }
}

#[test]
fn avalanche_ipv4_width() {
    check_avalanche::<4>();
}

#[test]
fn avalanche_ipv6_width() {
    check_avalanche::<10>();
}

fn assert_close(what: &str, measured: f64, formula: f64) {
    let rel = (measured - formula).abs() / formula;
    eprintln!("{what}: measured {measured:.6}, formula {formula:.6}, relative error {rel:.4}");
    assert!(
        rel <= 0.10,
        "{what}: measured {measured:.6} vs formula {formula:.6} ({rel:.3} relative)"
    );
}

#[test]
fn bloom_false_positives_partitioned_layout() {
    // k slices of 2^14 bits, one index per slice (partitioned Bloom filter).
    let (k, lw, n, q) = (8usize, 14u32, 13_000usize, 1_000_000usize);
    let (ins, qry) = disjoint_keys(11, n, q);
    let h = Hasher::with_seed(3);
    let layout = Partitioned::new(k, lw);
    let w = 1usize << lw;
    let mut bits = vec![false; k * w];
    let p = pairs_of(&h, &ins);
    let mut idx = vec![0u32; k * n];
    h.partitioned(&p, layout, &mut idx);
    for r in 0..k {
        for &i in &idx[r * n..(r + 1) * n] {
            bits[r * w + i as usize] = true;
        }
    }
    let p = pairs_of(&h, &qry);
    let mut idx = vec![0u32; k * q];
    h.partitioned(&p, layout, &mut idx);
    let fp = (0..q)
        .filter(|&i| (0..k).all(|r| bits[r * w + idx[r * q + i] as usize]))
        .count();
    // Each slice holds n uniform draws: P(bit set) = 1 - (1 - 1/w)^n.
    let formula = (1.0 - (1.0 - 1.0 / w as f64).powi(n as i32)).powi(k as i32);
    assert_close("partitioned Bloom FPR", fp as f64 / q as f64, formula);
}

#[test]
fn bloom_false_positives_blocked_layout() {
    // 2^8 blocks of 512 bits, k = 8 bits per key inside its block.
    let (k, lb, n, q) = (8usize, 8u32, 13_000usize, 1_000_000usize);
    let (ins, qry) = disjoint_keys(12, n, q);
    let h = Hasher::with_seed(4);
    let layout = Blocked::new(lb, 9, k);
    let mut filter = vec![[0u64; 8]; 1 << lb];
    let p = pairs_of(&h, &ins);
    let (mut blocks, mut bits) = (vec![0u32; n], vec![0u32; k * n]);
    h.blocked(&p, layout, &mut blocks, &mut bits);
    for i in 0..n {
        for j in 0..k {
            let b = bits[j * n + i] as usize;
            filter[blocks[i] as usize][b / 64] |= 1 << (b % 64);
        }
    }
    let p = pairs_of(&h, &qry);
    let (mut blocks, mut bits) = (vec![0u32; q], vec![0u32; k * q]);
    h.blocked(&p, layout, &mut blocks, &mut bits);
    let fp = (0..q)
        .filter(|&i| {
            (0..k).all(|j| {
                let b = bits[j * q + i] as usize;
                filter[blocks[i] as usize][b / 64] & (1 << (b % 64)) != 0
            })
        })
        .count();
    // Putze, Sanders, Singler (2007): the load of a block is Poisson with mean
    // n / blocks; inside a block of B bits holding i keys, a query's k bits
    // are all set with probability (1 - (1 - 1/B)^(i k))^k.
    let lambda = n as f64 / (1u64 << lb) as f64;
    let bb = 512.0f64;
    let mut formula = 0.0;
    let mut pmf = (-lambda).exp();
    for i in 0..400 {
        if i > 0 {
            pmf *= lambda / i as f64;
        }
        formula += pmf * (1.0 - (1.0 - 1.0 / bb).powf((i * k) as f64)).powi(k as i32);
    }
    assert_close("blocked Bloom FPR", fp as f64 / q as f64, formula);
}

#[test]
fn different_seeds_give_unrelated_indices() {
    // Row-0 indices of the same 65,536 keys under two seeds: a chi-square
    // test of independence on the 16 x 16 table of their top four bits, and
    // the number of keys landing on the same 2^16-wide index (expect ~1).
    let keys: Vec<[u32; 4]> = (0..65536u32)
        .map(|i| [SRC + i, DST, (40000 << 16) | 443, 6])
        .collect();
    let layout = Partitioned::new(1, 16);
    let idx = |seed| {
        let h = Hasher::with_seed(seed);
        let mut out = vec![0u32; keys.len()];
        h.partitioned(&pairs_of(&h, &keys), layout, &mut out);
        out
    };
    let (a, b) = (idx(1), idx(2));
    let same = a.iter().zip(&b).filter(|(x, y)| x == y).count();
    assert!(
        same <= 8,
        "{same} of 65536 keys share their index under two seeds"
    );
    let mut table = [[0f64; 16]; 16];
    for (x, y) in a.iter().zip(&b) {
        table[(x >> 12) as usize][(y >> 12) as usize] += 1.0;
    }
    let n = keys.len() as f64;
    let rows: Vec<f64> = table.iter().map(|r| r.iter().sum()).collect();
    let cols: Vec<f64> = (0..16).map(|c| table.iter().map(|r| r[c]).sum()).collect();
    let mut stat = 0.0;
    for r in 0..16 {
        for c in 0..16 {
            let e = rows[r] * cols[c] / n;
            stat += (table[r][c] - e).powi(2) / e;
        }
    }
    let p = 1.0 - ChiSquared::new(15.0 * 15.0).unwrap().cdf(stat);
    assert!(
        p >= 0.001,
        "indices under two seeds look dependent: chi-square {stat:.1}, p = {p:.2e}"
    );
}
