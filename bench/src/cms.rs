//! `cms/*`: count-min sketch of 4 rows x 2^16 `u32` counters (1 MiB),
//! updated and queried in 64-key batches of 13-byte IPv4 keys, hashing
//! included. The batches are windows cycling through a pool of 4096 keys, so
//! successive iterations touch different counters.
//!
//! * `cms/cu-update/<backend>`: our conservative update
//!   ([`CountMin::add_conservative_batch`]) on every available backend.
//! * `cms/cu-update/count-min-sketch`: jedisct1's `count-min-sketch` 0.2,
//!   `CountMinSketch32::add(key, 1)` one key at a time. Its `add` *is* a
//!   conservative update (it raises the counters equal to the key's minimum
//!   to `min + value`, which for value 1 is the same rule). Sized with
//!   `new(capacity = 32768, probability = 0.95, tolerance = 1.0)`: width
//!   `2 * capacity / tolerance = 2^16`, `floor(log2(1 / 0.05)) = 4` rows,
//!   one `Vec<u32>`: the same 1 MiB. SipHash-1-3 of the key bytes.
//! * `cms/cu-update/streaming_algorithms`: `streaming_algorithms` 0.3
//!   `CountMinSketch<[u8; 13], u32>::push(key, &1)` one key at a time. For
//!   `u32` counters `push` is also a conservative update (the minimum plus
//!   the value, then a max into each counter). Sized with
//!   `new(probability = 0.95, tolerance = 2 / 2^16, ())`: 4 rows of 2^16
//!   `u32` counters, one `Vec` per row: the same 1 MiB. XxHash64 of the key
//!   bytes, then one more `finish` per row.
//! * `cms/estimate/<backend>` and `cms/estimate/<peer>`: the estimates of
//!   the same batches (ours batched, the peers' one key at a time).
//!
//! Every peer hashes the 13 packed bytes, ours the 4-word form of the same
//! keys.

use std::hint::black_box;

use criterion::{Criterion, Throughput};
use kernels::cms::{CmsScratch, CountMin};
use kernels::{Backend, Hasher};

use crate::inputs::{V4Key, v4_keys};
use crate::measure::{Figure, figure};

/// Keys per batch, as the dataplane updates them.
pub const BATCH: usize = 64;
/// Keys in the pool the batches cycle through.
pub const POOL: usize = 4096;
/// Rows of every sketch.
pub const ROWS: usize = 4;
/// log2 of the row width of every sketch.
pub const LOG2_WIDTH: u32 = 16;
const SEED: u64 = 0xc0c0_5ca1_ab1e_0001;

/// Peer `count-min-sketch`, keyed by the packed bytes.
type Jedisct1 = count_min_sketch::CountMinSketch32<[u8; 13]>;
/// Peer `streaming_algorithms`, keyed by the packed bytes.
type Streaming = streaming_algorithms::CountMinSketch<[u8; 13], u32>;

/// The key pool in both forms, and the per-key values (1: packet counts).
#[derive(Debug)]
pub struct Inputs {
    keys: Vec<V4Key>,
    words: Vec<[u32; 4]>,
    ones: Vec<u32>,
}

impl Inputs {
    /// The pool every case shares.
    pub fn new() -> Self {
        let keys = v4_keys(7, POOL);
        let words = keys.iter().map(|k| k.words).collect();
        Inputs {
            keys,
            words,
            ones: vec![1; BATCH],
        }
    }
}

impl Default for Inputs {
    fn default() -> Self {
        Self::new()
    }
}

/// The start of the next 64-key window of the pool.
fn next_window(pos: &mut usize) -> usize {
    let at = *pos;
    *pos = (at + BATCH) % POOL;
    at
}

/// Our sketch on `backend`, warmed with one pass over the pool.
fn ours(backend: Backend, inp: &Inputs) -> Option<CountMin> {
    let h = Hasher::with_seed(SEED).on_backend(backend).ok()?;
    let mut cms = CountMin::with_hasher(ROWS, LOG2_WIDTH, h);
    for w in inp.words.chunks(BATCH) {
        cms.add_conservative_batch(w, &inp.ones[..w.len()]);
    }
    Some(cms)
}

fn jedisct1(inp: &Inputs) -> Jedisct1 {
    let mut cms = Jedisct1::new(1 << (LOG2_WIDTH - 1), 0.95, 1.0).expect("count-min-sketch size");
    for k in &inp.keys {
        cms.add(&k.bytes, 1);
    }
    cms
}

fn streaming(inp: &Inputs) -> Streaming {
    let mut cms = Streaming::new(0.95, 2.0 / f64::from(1u32 << LOG2_WIDTH), ());
    for k in &inp.keys {
        cms.push(&k.bytes, &1);
    }
    cms
}

/// Our batched conservative update; returns a fold of two of the estimates.
fn cu_case(cms: &mut CountMin, keys: &[[u32; 4]], ones: &[u32]) -> u32 {
    let est = cms.add_conservative_batch(black_box(keys), ones);
    est[0] ^ est[BATCH - 1]
}

fn estimate_case(cms: &CountMin, s: &mut CmsScratch, keys: &[[u32; 4]], out: &mut [u32]) -> u32 {
    cms.estimate_batch_with(s, black_box(keys), out);
    black_box(&*out);
    out[0] ^ out[BATCH - 1]
}

fn jedisct1_cu_case(cms: &mut Jedisct1, keys: &[V4Key]) -> u32 {
    for k in black_box(keys) {
        cms.add(&k.bytes, 1);
    }
    // `add` returns nothing: read one counter back so the work shows.
    cms.estimate(&keys[0].bytes)
}

fn jedisct1_estimate_case(cms: &Jedisct1, keys: &[V4Key], out: &mut [u32]) -> u32 {
    for (o, k) in out.iter_mut().zip(black_box(keys)) {
        *o = cms.estimate(&k.bytes);
    }
    black_box(&*out);
    out[0] ^ out[BATCH - 1]
}

fn streaming_cu_case(cms: &mut Streaming, keys: &[V4Key]) -> u32 {
    let mut x = 0;
    for k in black_box(keys) {
        x ^= cms.push(&k.bytes, &1);
    }
    x
}

fn streaming_estimate_case(cms: &Streaming, keys: &[V4Key], out: &mut [u32]) -> u32 {
    for (o, k) in out.iter_mut().zip(black_box(keys)) {
        *o = cms.get(&k.bytes);
    }
    black_box(&*out);
    out[0] ^ out[BATCH - 1]
}

/// Registers `cms/cu-update/*` and `cms/estimate/*`.
pub fn register(c: &mut Criterion) {
    let inp = Inputs::new();
    let mut out = vec![0u32; BATCH];
    let mut scratch = CmsScratch::with_capacity(BATCH, ROWS);

    let mut g = c.benchmark_group("cms/cu-update");
    g.throughput(Throughput::Elements(BATCH as u64));
    for b in Backend::available_list() {
        let Some(mut cms) = ours(b, &inp) else {
            continue;
        };
        let mut pos = 0;
        g.bench_function(b.name(), |bch| {
            bch.iter(|| {
                let at = next_window(&mut pos);
                cu_case(&mut cms, &inp.words[at..at + BATCH], &inp.ones)
            })
        });
    }
    let mut j = jedisct1(&inp);
    let mut pos = 0;
    g.bench_function("count-min-sketch", |bch| {
        bch.iter(|| {
            let at = next_window(&mut pos);
            jedisct1_cu_case(&mut j, &inp.keys[at..at + BATCH])
        })
    });
    let mut s = streaming(&inp);
    g.bench_function("streaming_algorithms", |bch| {
        bch.iter(|| {
            let at = next_window(&mut pos);
            streaming_cu_case(&mut s, &inp.keys[at..at + BATCH])
        })
    });
    g.finish();

    let mut g = c.benchmark_group("cms/estimate");
    g.throughput(Throughput::Elements(BATCH as u64));
    for b in Backend::available_list() {
        let Some(cms) = ours(b, &inp) else {
            continue;
        };
        g.bench_function(b.name(), |bch| {
            bch.iter(|| {
                let at = next_window(&mut pos);
                estimate_case(&cms, &mut scratch, &inp.words[at..at + BATCH], &mut out)
            })
        });
    }
    g.bench_function("count-min-sketch", |bch| {
        bch.iter(|| {
            let at = next_window(&mut pos);
            jedisct1_estimate_case(&j, &inp.keys[at..at + BATCH], &mut out)
        })
    });
    g.bench_function("streaming_algorithms", |bch| {
        bch.iter(|| {
            let at = next_window(&mut pos);
            streaming_estimate_case(&s, &inp.keys[at..at + BATCH], &mut out)
        })
    });
    g.finish();
}

/// The headline `cms` figures for the report binary (ns per key).
pub fn report() -> Vec<Figure> {
    let inp = Inputs::new();
    let mut out = vec![0u32; BATCH];
    let mut scratch = CmsScratch::with_capacity(BATCH, ROWS);
    let mut pos = 0;
    let mut figs = Vec::new();
    for b in Backend::available_list() {
        let Some(mut cms) = ours(b, &inp) else {
            continue;
        };
        figs.push(figure(format!("cms/cu-update/{b}"), BATCH, || {
            let at = next_window(&mut pos);
            cu_case(&mut cms, &inp.words[at..at + BATCH], &inp.ones)
        }));
        figs.push(figure(format!("cms/estimate/{b}"), BATCH, || {
            let at = next_window(&mut pos);
            estimate_case(&cms, &mut scratch, &inp.words[at..at + BATCH], &mut out)
        }));
    }
    let mut j = jedisct1(&inp);
    figs.push(figure("cms/cu-update/count-min-sketch", BATCH, || {
        let at = next_window(&mut pos);
        jedisct1_cu_case(&mut j, &inp.keys[at..at + BATCH])
    }));
    figs.push(figure("cms/estimate/count-min-sketch", BATCH, || {
        let at = next_window(&mut pos);
        jedisct1_estimate_case(&j, &inp.keys[at..at + BATCH], &mut out)
    }));
    let mut s = streaming(&inp);
    figs.push(figure("cms/cu-update/streaming_algorithms", BATCH, || {
        let at = next_window(&mut pos);
        streaming_cu_case(&mut s, &inp.keys[at..at + BATCH])
    }));
    figs.push(figure("cms/estimate/streaming_algorithms", BATCH, || {
        let at = next_window(&mut pos);
        streaming_estimate_case(&s, &inp.keys[at..at + BATCH], &mut out)
    }));
    figs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_sized_like_ours_and_count_the_same() {
        let inp = Inputs::new();
        let mut cms = ours(Backend::Scalar, &inp).unwrap();
        assert_eq!(cms.memory_bytes(), 1 << 20);
        assert_eq!(
            Jedisct1::estimate_memory(1 << (LOG2_WIDTH - 1), 0.95, 1.0),
            Ok(1 << 20)
        );
        let mut j = jedisct1(&inp);
        let mut s = streaming(&inp);
        // After the warm-up pass every key was seen once; a wide sketch with
        // 4096 keys rarely collides, so all three say 1 for nearly all keys.
        let mut scratch = CmsScratch::new();
        let mut out = vec![0; BATCH];
        let w = &inp.words[..BATCH];
        let ours_fold = estimate_case(&cms, &mut scratch, w, &mut out);
        assert!(out.iter().all(|&e| e >= 1));
        assert_eq!(ours_fold, out[0] ^ out[BATCH - 1]);
        let mut pj = vec![0; BATCH];
        jedisct1_estimate_case(&j, &inp.keys[..BATCH], &mut pj);
        let mut ps = vec![0; BATCH];
        streaming_estimate_case(&s, &inp.keys[..BATCH], &mut ps);
        assert!(pj.iter().chain(&ps).all(|&e| e >= 1));
        // One more update of the first window raises every estimate by one.
        cu_case(&mut cms, w, &inp.ones);
        jedisct1_cu_case(&mut j, &inp.keys[..BATCH]);
        streaming_cu_case(&mut s, &inp.keys[..BATCH]);
        let mut again = vec![0; BATCH];
        estimate_case(&cms, &mut scratch, w, &mut again);
        for (a, o) in again.iter().zip(&out) {
            assert!(a > o);
        }
        jedisct1_estimate_case(&j, &inp.keys[..BATCH], &mut pj);
        streaming_estimate_case(&s, &inp.keys[..BATCH], &mut ps);
        assert!(pj.iter().chain(&ps).all(|&e| e >= 2));
    }
}
