//! `hash/*` and `index/*`: batch hashing of 64-key batches of 13-byte IPv4
//! keys (and 10-word IPv6 keys) on every backend, against `ahash` and
//! `xxhash-rust` xxh3 hashing the same keys one at a time; and k = 8 index
//! derivation from the pairs.

use std::hash::{BuildHasher, Hasher as _};
use std::hint::black_box;

use criterion::{Criterion, Throughput};
use kernels::index::{Blocked, Partitioned};
use kernels::{Backend, HashPair, Hasher};

use crate::inputs::{V4Key, v4_keys, v6_words};
use crate::measure::{Figure, figure};

/// Keys per batch, as the dataplane hashes them.
pub const BATCH: usize = 64;
const SEED: u64 = 0xb100_0b1a_2e5e_ed00;

/// The inputs every case shares.
#[derive(Debug)]
pub struct Inputs {
    v4: Vec<V4Key>,
    v4_words: Vec<[u32; 4]>,
    v6: Vec<[u32; 10]>,
    pairs: Vec<HashPair>,
}

impl Inputs {
    /// One batch of each key kind, plus their pairs.
    pub fn new() -> Self {
        let v4 = v4_keys(1, BATCH);
        let v4_words: Vec<[u32; 4]> = v4.iter().map(|k| k.words).collect();
        let mut pairs = vec![HashPair::default(); BATCH];
        Hasher::with_seed(SEED).hash_batch(&v4_words, &mut pairs);
        Inputs {
            v4,
            v4_words,
            v6: v6_words(2, BATCH),
            pairs,
        }
    }
}

impl Default for Inputs {
    fn default() -> Self {
        Self::new()
    }
}

/// Keeps the output alive for the optimiser and returns a cheap check
/// value: a serial fold over the whole batch would cost more than the
/// kernel being measured.
fn check(pairs: &[HashPair]) -> u32 {
    black_box(pairs);
    pairs[0].h1 ^ pairs[pairs.len() - 1].h2
}

/// A kernel case: hashes the batch and returns a fold of the output.
fn ours<const W: usize>(h: &Hasher, keys: &[[u32; W]], out: &mut [HashPair]) -> u32 {
    h.hash_batch(black_box(keys), out);
    check(out)
}

fn ahash_case(state: &ahash::RandomState, keys: &[V4Key], out: &mut [u64]) -> u64 {
    for (o, k) in out.iter_mut().zip(black_box(keys)) {
        let mut h = state.build_hasher();
        h.write(&k.bytes);
        *o = h.finish();
    }
    black_box(&*out);
    out[0] ^ out[out.len() - 1]
}

fn xxh3_case(keys: &[V4Key], out: &mut [u64]) -> u64 {
    for (o, k) in out.iter_mut().zip(black_box(keys)) {
        *o = xxhash_rust::xxh3::xxh3_64_with_seed(&k.bytes, SEED);
    }
    black_box(&*out);
    out[0] ^ out[out.len() - 1]
}

fn partitioned_case(h: &Hasher, pairs: &[HashPair], out: &mut [u32]) -> u32 {
    h.partitioned(black_box(pairs), Partitioned::new(8, 16), out);
    black_box(&*out);
    out[0] ^ out[out.len() - 1]
}

fn blocked_case(h: &Hasher, pairs: &[HashPair], blocks: &mut [u32], bits: &mut [u32]) -> u32 {
    h.blocked(black_box(pairs), Blocked::new(12, 9, 8), blocks, bits);
    black_box((&*blocks, &*bits));
    blocks[0] ^ bits[bits.len() - 1]
}

fn hashers() -> Vec<Hasher> {
    Backend::available_list()
        .into_iter()
        .filter_map(|b| Hasher::with_seed(SEED).on_backend(b).ok())
        .collect()
}

/// Registers `hash/ipv4/*`, `hash/ipv6/*`, `index/partitioned-k8/*` and
/// `index/blocked-k8/*`.
pub fn register(c: &mut Criterion) {
    let inp = Inputs::new();
    let mut out = vec![HashPair::default(); BATCH];
    let mut out64 = vec![0u64; BATCH];
    // Cache-line-aligned, as the structures' own index buffers are
    // (`kernels::cms`): a 16-byte-aligned `Vec` makes every 64-byte store
    // straddle two lines.
    let mut idx = aligned_vec::avec![[64] | 0u32; 8 * BATCH];
    let mut blocks = aligned_vec::avec![[64] | 0u32; BATCH];

    let mut g = c.benchmark_group("hash/ipv4");
    g.throughput(Throughput::Elements(BATCH as u64));
    for h in hashers() {
        g.bench_function(h.backend().name(), |b| {
            b.iter(|| ours(&h, &inp.v4_words, &mut out))
        });
    }
    let state = ahash::RandomState::with_seeds(1, 2, 3, 4);
    g.bench_function("ahash", |b| {
        b.iter(|| ahash_case(&state, &inp.v4, &mut out64))
    });
    g.bench_function("xxh3", |b| b.iter(|| xxh3_case(&inp.v4, &mut out64)));
    g.finish();

    let mut g = c.benchmark_group("hash/ipv6");
    g.throughput(Throughput::Elements(BATCH as u64));
    for h in hashers() {
        g.bench_function(h.backend().name(), |b| {
            b.iter(|| ours(&h, &inp.v6, &mut out))
        });
    }
    g.finish();

    let mut g = c.benchmark_group("index/partitioned-k8");
    g.throughput(Throughput::Elements(BATCH as u64));
    for h in hashers() {
        g.bench_function(h.backend().name(), |b| {
            b.iter(|| partitioned_case(&h, &inp.pairs, &mut idx))
        });
    }
    g.finish();

    let mut g = c.benchmark_group("index/blocked-k8");
    g.throughput(Throughput::Elements(BATCH as u64));
    for h in hashers() {
        g.bench_function(h.backend().name(), |b| {
            b.iter(|| blocked_case(&h, &inp.pairs, &mut blocks, &mut idx))
        });
    }
    g.finish();
}

/// The headline figures for the report binary.
pub fn report() -> Vec<Figure> {
    let inp = Inputs::new();
    let mut out = vec![HashPair::default(); BATCH];
    let mut out64 = vec![0u64; BATCH];
    // Cache-line-aligned, as the structures' own index buffers are
    // (`kernels::cms`): a 16-byte-aligned `Vec` makes every 64-byte store
    // straddle two lines.
    let mut idx = aligned_vec::avec![[64] | 0u32; 8 * BATCH];
    let mut blocks = aligned_vec::avec![[64] | 0u32; BATCH];
    let mut figs = Vec::new();
    for h in hashers() {
        let b = h.backend().name();
        figs.push(figure(format!("hash/ipv4/{b}"), BATCH, || {
            ours(&h, &inp.v4_words, &mut out)
        }));
        figs.push(figure(format!("hash/ipv6/{b}"), BATCH, || {
            ours(&h, &inp.v6, &mut out)
        }));
        figs.push(figure(format!("index/partitioned-k8/{b}"), BATCH, || {
            partitioned_case(&h, &inp.pairs, &mut idx)
        }));
        figs.push(figure(format!("index/blocked-k8/{b}"), BATCH, || {
            blocked_case(&h, &inp.pairs, &mut blocks, &mut idx)
        }));
    }
    let state = ahash::RandomState::with_seeds(1, 2, 3, 4);
    figs.push(figure("hash/ipv4/ahash", BATCH, || {
        ahash_case(&state, &inp.v4, &mut out64)
    }));
    figs.push(figure("hash/ipv4/xxh3", BATCH, || {
        xxh3_case(&inp.v4, &mut out64)
    }));
    figs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_compute_the_same_as_direct_calls() {
        let inp = Inputs::new();
        let h = Hasher::with_seed(SEED);
        let mut out = vec![HashPair::default(); BATCH];
        assert_eq!(ours(&h, &inp.v4_words, &mut out), check(&inp.pairs));
        assert_eq!(out, inp.pairs);
        let mut a = vec![0u64; BATCH];
        let x = xxh3_case(&inp.v4, &mut a);
        assert_eq!(
            a[0],
            xxhash_rust::xxh3::xxh3_64_with_seed(&inp.v4[0].bytes, SEED)
        );
        assert_ne!(x, 0);
    }
}
