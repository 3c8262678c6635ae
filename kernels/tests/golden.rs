//! Golden vectors: fixed keys and seeds with their exact outputs. If one of
//! these fails, the hash function changed; that must be a deliberate act
//! (it changes every structure's layout and every transfer form).
//!
//! The pairs were computed by `scripts/golden_hash.py`, an independent
//! Python implementation of the documented hash (its AES round is checked
//! against the FIPS-197 example), so they pin the definition, not just
//! this code's output.

use kernels::index::{Blocked, Partitioned};
use kernels::{Backend, HashPair, Hasher};

const V4_KEY: [u32; 4] = [0x0a00_0001, 0xc0a8_0102, (49152 << 16) | 443, 6];
const V6_KEY: [u32; 10] = [
    0x2001_0db8,
    0,
    0,
    1,
    0x2001_0db8,
    0,
    0,
    2,
    (5353 << 16) | 5353,
    17,
];

fn every_backend() -> Vec<Hasher> {
    Backend::available_list()
        .into_iter()
        .flat_map(|b| [0u64, 42, u64::MAX].map(|s| Hasher::with_seed(s).on_backend(b).unwrap()))
        .collect()
}

fn pair(h: &Hasher, key: &[u32]) -> HashPair {
    let mut out = [HashPair::default(); 1];
    match key.len() {
        4 => h.hash_batch(&[<[u32; 4]>::try_from(key).unwrap()], &mut out),
        10 => h.hash_batch(&[<[u32; 10]>::try_from(key).unwrap()], &mut out),
        _ => unreachable!(),
    }
    out[0]
}

#[test]
fn golden_pairs() {
    let expect: [(u64, &[u32], u32, u32); 6] = GOLDEN;
    for h in every_backend() {
        for (seed, key, h1, h2) in expect {
            if Hasher::with_seed(seed).key() != h.key() {
                continue;
            }
            let p = pair(&h, key);
            assert_eq!(
                (p.h1, p.h2),
                (h1, h2),
                "seed {seed} key {key:x?} on {}: got {:#010x}, {:#010x}",
                h.backend(),
                p.h1,
                p.h2
            );
        }
    }
}

#[test]
fn golden_indices() {
    let h = Hasher::with_seed(42);
    let p = pair(&h, &V4_KEY);
    let mut rows = [0u32; 4];
    h.partitioned(&[p], Partitioned::new(4, 16), &mut rows);
    let (mut blocks, mut bits) = ([0u32; 1], [0u32; 8]);
    h.blocked(&[p], Blocked::new(10, 9, 8), &mut blocks, &mut bits);
    assert_eq!(rows, GOLDEN_ROWS, "got {rows:?}");
    assert_eq!(blocks[0], GOLDEN_BLOCK, "got {}", blocks[0]);
    assert_eq!(bits, GOLDEN_BITS, "got {bits:?}");
}

const GOLDEN: [(u64, &[u32], u32, u32); 6] = [
    (0, &V4_KEY, 0x1b5a2d08, 0x325c0049),
    (42, &V4_KEY, 0x81073cfe, 0x08582ff2),
    (18446744073709551615, &V4_KEY, 0x7be35863, 0x43c54e15),
    (0, &V6_KEY, 0x4881d240, 0x8b3f3ef2),
    (42, &V6_KEY, 0xaf3c9bcf, 0xb45aecef),
    (18446744073709551615, &V6_KEY, 0x77c96ec1, 0xfd13418c),
];
const GOLDEN_ROWS: [u32; 4] = [33031, 35167, 37303, 39439];
const GOLDEN_BLOCK: u32 = 516;
const GOLDEN_BITS: [u32; 8] = [387, 416, 443, 159, 215, 438, 8, 36];
