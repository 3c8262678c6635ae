//! Helpers the kernels' integration tests share (each test file includes
//! this folder with `mod common;`).
#![allow(dead_code)]

use std::collections::HashSet;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// `n` distinct random 5-tuples (three random words and a protocol byte),
/// then `q` more distinct from them: keys to insert, and keys to query
/// that were never inserted.
pub fn disjoint_keys(seed: u64, n: usize, q: usize) -> (Vec<[u32; 4]>, Vec<[u32; 4]>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut seen = HashSet::new();
    let mut all = Vec::with_capacity(n + q);
    while all.len() < n + q {
        let k: [u32; 4] = [
            rng.random(),
            rng.random(),
            rng.random(),
            rng.random_range(0..256),
        ];
        if seen.insert(k) {
            all.push(k);
        }
    }
    let q = all.split_off(n);
    (all, q)
}
