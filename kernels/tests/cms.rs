//! Count-min sketch: the never-below guarantee and conservative update's
//! dominance over plain update (property tests over any stream), batched ==
//! sequential on every backend, the (epsilon, delta) bound and the
//! heavy-hitter false-positive gain on a Zipf stream, and the epoch
//! operations (merge, halve, reset), saturation and merge errors.

use std::collections::HashMap;

use kernels::cms::{CountMin, DualCountMin, MergeError};
use kernels::{Backend, HashPair, Hasher};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};

type Key = [u32; 4];

/// True counts of a stream, saturated to `u32` as the counters are.
fn truth(stream: &[(Key, u32)]) -> HashMap<Key, u32> {
    let mut t: HashMap<Key, u64> = HashMap::new();
    for (k, v) in stream {
        *t.entry(*k).or_default() += u64::from(*v);
    }
    t.into_iter()
        .map(|(k, v)| (k, v.min(u64::from(u32::MAX)) as u32))
        .collect()
}

/// A stream over a pool of `pool` keys (so keys repeat) with values
/// below `max_value`; small sketches make collisions certain.
fn stream(pool: usize, len: usize, max_value: u32) -> impl Strategy<Value = Vec<(Key, u32)>> {
    (
        prop::collection::vec(any::<Key>(), pool),
        prop::collection::vec((any::<prop::sample::Index>(), 0..max_value), 0..len),
    )
        .prop_map(|(keys, picks)| picks.into_iter().map(|(i, v)| (*i.get(&keys), v)).collect())
}

/// `Hasher::with_seed(seed)` on every backend this CPU has.
fn hashers(seed: u64) -> Vec<Hasher> {
    Backend::available_list()
        .into_iter()
        .map(|b| Hasher::with_seed(seed).on_backend(b).unwrap())
        .collect()
}

/// Feeds `stream` in batches of `batch` keys (0: one key at a time).
fn feed(cms: &mut CountMin, stream: &[(Key, u32)], conservative: bool, batch: usize) {
    if batch == 0 {
        for (k, v) in stream {
            if conservative {
                cms.add_conservative(k, *v);
            } else {
                cms.add(k, *v);
            }
        }
        return;
    }
    let mut keys = Vec::with_capacity(batch);
    let mut values = Vec::with_capacity(batch);
    for chunk in stream.chunks(batch) {
        keys.clear();
        values.clear();
        keys.extend(chunk.iter().map(|(k, _)| *k));
        values.extend(chunk.iter().map(|(_, v)| *v));
        if conservative {
            cms.add_conservative_batch(&keys, &values);
        } else {
            cms.add_batch(&keys, &values);
        }
    }
}

proptest! {
    #[test]
    fn estimate_never_below_true_count(
        s in stream(40, 400, 1 << 20),
        rows in 1usize..=10,
        log2_width in 0u32..=6,
        conservative: bool,
        batch in 0usize..=70,
    ) {
        let mut cms = CountMin::with_hasher(rows, log2_width, Hasher::with_seed(1));
        feed(&mut cms, &s, conservative, batch);
        for (k, t) in truth(&s) {
            prop_assert!(cms.estimate(&k) >= t, "estimate {} < true {t}", cms.estimate(&k));
        }
    }

    #[test]
    fn conservative_never_above_plain(
        s in stream(40, 400, 1000),
        rows in 1usize..=5,
        log2_width in 0u32..=6,
        seed: u64,
    ) {
        let mut plain = CountMin::with_hasher(rows, log2_width, Hasher::with_seed(seed));
        let mut cu = plain.clone();
        feed(&mut plain, &s, false, 0);
        feed(&mut cu, &s, true, 0);
        // Pointwise on counters, hence on every estimate.
        for (c, p) in cu.counters().iter().zip(plain.counters()) {
            prop_assert!(c <= p);
        }
        for (k, _) in &s {
            prop_assert!(cu.estimate(k) <= plain.estimate(k));
        }
    }

    #[test]
    fn batched_equals_sequential(
        s in stream(12, 300, 1 << 12),
        rows in 1usize..=10,
        log2_width in 0u32..=8,
        conservative: bool,
        batch in 1usize..=80,
    ) {
        let mut seq = CountMin::with_hasher(rows, log2_width, Hasher::with_seed(9));
        let seq_est: Vec<u32> = s
            .iter()
            .map(|(k, v)| if conservative {
                seq.add_conservative(k, *v)
            } else {
                seq.add(k, *v)
            })
            .collect();
        for h in hashers(9) {
            let mut bat = CountMin::with_hasher(rows, log2_width, h);
            let mut est = Vec::new();
            for chunk in s.chunks(batch) {
                let keys: Vec<Key> = chunk.iter().map(|(k, _)| *k).collect();
                let values: Vec<u32> = chunk.iter().map(|(_, v)| *v).collect();
                let e = if conservative {
                    bat.add_conservative_batch(&keys, &values)
                } else {
                    bat.add_batch(&keys, &values)
                };
                est.extend_from_slice(e);
            }
            prop_assert_eq!(bat.counters(), seq.counters(), "backend {}", bat.hasher().backend());
            prop_assert_eq!(&est, &seq_est);
            let keys: Vec<Key> = s.iter().map(|(k, _)| *k).collect();
            let mut out = vec![0; keys.len()];
            bat.estimate_batch(&keys, &mut out);
            let single: Vec<u32> = keys.iter().map(|k| seq.estimate(k)).collect();
            prop_assert_eq!(out, single);
        }
    }

    /// Two sketches of different shapes fed from one hash per key (the
    /// pairs API) end exactly as if each had been fed the keys one at a
    /// time, and their estimates never fall below the true counts.
    #[test]
    fn pairs_equal_sequential_and_never_below_truth(
        s in stream(12, 300, 1 << 12),
        rows in 1usize..=10,
        log2_width in 0u32..=8,
        rows2 in 1usize..=5,
        log2_width2 in 0u32..=6,
        conservative: bool,
        batch in 1usize..=80,
    ) {
        let mut seq = CountMin::with_hasher(rows, log2_width, Hasher::with_seed(11));
        let mut seq2 = CountMin::with_hasher(rows2, log2_width2, Hasher::with_seed(11));
        let mut seq_est = Vec::new();
        for (k, v) in &s {
            if conservative {
                seq_est.push((seq.add_conservative(k, *v), seq2.add_conservative(k, 1)));
            } else {
                seq_est.push((seq.add(k, *v), seq2.add(k, 1)));
            }
        }
        let t = truth(&s);
        for h in hashers(11) {
            let mut a = CountMin::with_hasher(rows, log2_width, h.clone());
            let mut b = CountMin::with_hasher(rows2, log2_width2, h.clone());
            prop_assert_eq!(a.hasher().key().id(), b.hasher().key().id());
            let mut est = Vec::new();
            for chunk in s.chunks(batch) {
                let keys: Vec<Key> = chunk.iter().map(|(k, _)| *k).collect();
                let values: Vec<u32> = chunk.iter().map(|(_, v)| *v).collect();
                let mut pairs = vec![HashPair::default(); keys.len()];
                h.hash_batch(&keys, &mut pairs);
                let ones = vec![1; keys.len()];
                let (ea, eb) = if conservative {
                    (
                        a.add_conservative_pairs(&pairs, &values).to_vec(),
                        b.add_conservative_pairs(&pairs, &ones).to_vec(),
                    )
                } else {
                    (a.add_pairs(&pairs, &values).to_vec(), b.add_pairs(&pairs, &ones).to_vec())
                };
                est.extend(ea.into_iter().zip(eb));
            }
            prop_assert_eq!(a.counters(), seq.counters(), "backend {}", h.backend());
            prop_assert_eq!(b.counters(), seq2.counters(), "backend {}", h.backend());
            prop_assert_eq!(&est, &seq_est);
            let keys: Vec<Key> = s.iter().map(|(k, _)| *k).collect();
            let mut pairs = vec![HashPair::default(); keys.len()];
            h.hash_batch(&keys, &mut pairs);
            let mut out = vec![0; keys.len()];
            a.estimate_pairs(&pairs, &mut out);
            let single: Vec<u32> = keys.iter().map(|k| seq.estimate(k)).collect();
            prop_assert_eq!(&out, &single);
            for (k, e) in keys.iter().zip(&out) {
                prop_assert!(*e >= t[k]);
                let n = s.iter().filter(|(x, _)| x == k).count() as u32;
                prop_assert!(b.estimate(k) >= n);
            }
        }
    }
}

proptest! {
    /// A dual sketch is, counter for counter, two count-min sketches of its
    /// shape and hasher under conservative update, metric 0 fed the values
    /// and metric 1 a second stream of values (including saturation near
    /// `u32::MAX`), and its per-update estimates are theirs.
    #[test]
    fn dual_equals_two_conservative_sketches(
        s in stream(12, 300, u32::MAX),
        rows in 1usize..=6,
        log2_width in 0u32..=7,
        batch in 1usize..=80,
    ) {
        let mut m0 = CountMin::with_hasher(rows, log2_width, Hasher::with_seed(5));
        let mut m1 = CountMin::with_hasher(rows, log2_width, Hasher::with_seed(5));
        let second = |v: u32| v.rotate_left(7) >> 3;
        let mut want = Vec::new();
        for (k, v) in &s {
            want.push([m0.add_conservative(k, *v), m1.add_conservative(k, second(*v))]);
        }
        for h in hashers(5) {
            let mut d = DualCountMin::with_hasher(rows, log2_width, h.clone());
            let mut got = Vec::new();
            for chunk in s.chunks(batch) {
                let keys: Vec<Key> = chunk.iter().map(|(k, _)| *k).collect();
                let a: Vec<u32> = chunk.iter().map(|(_, v)| *v).collect();
                let b: Vec<u32> = a.iter().map(|&v| second(v)).collect();
                let mut pairs = vec![HashPair::default(); keys.len()];
                h.hash_batch(&keys, &mut pairs);
                got.extend_from_slice(d.add_conservative_pairs(&pairs, &a, &b));
            }
            prop_assert_eq!(&got, &want, "backend {}", h.backend());
            // The one-key form, key by key, ends in the same state.
            let mut one = DualCountMin::with_hasher(rows, log2_width, h.clone());
            let mut got1 = Vec::new();
            for (k, v) in &s {
                got1.push(one.add_conservative_pair(h.hash_one(k), *v, second(*v)));
            }
            prop_assert_eq!(&got1, &want);
            prop_assert!(one.counters(0).eq(m0.counters().iter().copied()));
            prop_assert!(one.counters(1).eq(m1.counters().iter().copied()));
            prop_assert!(d.counters(0).eq(m0.counters().iter().copied()));
            prop_assert!(d.counters(1).eq(m1.counters().iter().copied()));
            for (k, _) in &s {
                prop_assert_eq!(d.estimate(k), [m0.estimate(k), m1.estimate(k)]);
            }
            d.reset();
            prop_assert!(d.counters(0).chain(d.counters(1)).all(|c| c == 0));
        }
    }
}

/// `packets` packets with Zipf(`s`) ranks over `distinct` random keys.
fn zipf_stream(distinct: usize, s: f64, packets: usize, seed: u64) -> Vec<Key> {
    let mut rng = StdRng::seed_from_u64(seed);
    let keys: Vec<Key> = (0..distinct).map(|_| rng.random()).collect();
    let zipf = Zipf::new(distinct as f64, s).unwrap();
    (0..packets)
        .map(|_| keys[zipf.sample(&mut rng) as usize - 1])
        .collect()
}

fn count(stream: &[Key]) -> HashMap<Key, u32> {
    let mut t = HashMap::new();
    for k in stream {
        *t.entry(*k).or_default() += 1;
    }
    t
}

#[test]
fn zipf_error_within_epsilon_delta() {
    let (epsilon, delta) = (0.001, 0.01);
    let stream = zipf_stream(100_000, 1.1, 1_000_000, 11);
    let truth = count(&stream);
    let ones = vec![1u32; 64];
    let (rows, log2_width) = CountMin::dimensions(epsilon, delta);
    assert_eq!((rows, log2_width), (5, 12));
    for conservative in [false, true] {
        let mut cms = CountMin::with_hasher(rows, log2_width, Hasher::with_seed(3));
        for chunk in stream.chunks(64) {
            if conservative {
                cms.add_conservative_batch(chunk, &ones[..chunk.len()]);
            } else {
                cms.add_batch(chunk, &ones[..chunk.len()]);
            }
        }
        let bound = epsilon * stream.len() as f64;
        let over = truth
            .iter()
            .filter(|(k, t)| f64::from(cms.estimate(k) - **t) > bound)
            .count();
        let frac = over as f64 / truth.len() as f64;
        eprintln!(
            "zipf s=1.1, N=1e6, {} distinct, {rows}x2^{log2_width} ({} KiB), \
             conservative={conservative}: {over} keys ({frac:.2e}) off by > {bound}",
            truth.len(),
            cms.memory_bytes() / 1024
        );
        assert!(frac <= delta, "{frac} of keys exceed epsilon * N");
    }
}

#[test]
fn conservative_cuts_heavy_hitter_false_positives() {
    let stream = zipf_stream(100_000, 1.1, 1_000_000, 12);
    let truth = count(&stream);
    let threshold = (stream.len() / 1000) as u32; // 0.1% of N
    let ones = vec![1u32; 64];
    let mut plain = CountMin::with_hasher(4, 10, Hasher::with_seed(5));
    let mut cu = plain.clone();
    for chunk in stream.chunks(64) {
        plain.add_batch(chunk, &ones[..chunk.len()]);
        cu.add_conservative_batch(chunk, &ones[..chunk.len()]);
    }
    let false_positives = |cms: &CountMin| {
        truth
            .iter()
            .filter(|(k, t)| **t < threshold && cms.estimate(k) >= threshold)
            .count()
    };
    let heavy = truth.values().filter(|&&t| t >= threshold).count();
    let (fp_plain, fp_cu) = (false_positives(&plain), false_positives(&cu));
    let factor = fp_plain as f64 / fp_cu.max(1) as f64;
    eprintln!(
        "4x2^10 (16 KiB), threshold {threshold}, {heavy} true heavy hitters: \
         false positives plain {fp_plain}, conservative {fp_cu}, factor {factor:.1}"
    );
    assert!(
        fp_plain >= 30,
        "plain count-min should have false positives"
    );
    assert!(
        factor >= 3.0,
        "conservative update cut false positives only {factor:.1}x"
    );
}

#[test]
fn dimensions_follow_the_formulas() {
    assert_eq!(CountMin::dimensions(0.001, 0.01), (5, 12)); // 2719 -> 4096
    assert_eq!(CountMin::dimensions(1.0, 0.5), (1, 2)); // e -> 3 -> 4
    assert_eq!(CountMin::dimensions(0.01, 0.001), (7, 9)); // 272 -> 512
    let cms = CountMin::with_error(0.0001, 0.05);
    assert_eq!((cms.rows(), cms.width()), (3, 32768));
    assert_eq!(cms.memory_bytes(), 3 * 32768 * 4);
    assert_eq!(cms.counters().len(), 3 * 32768);
}

#[test]
#[should_panic(expected = "epsilon must be in (0, 1]")]
fn zero_epsilon_panics() {
    CountMin::dimensions(0.0, 0.01);
}

#[test]
#[should_panic(expected = "delta must be in (0, 1)")]
fn delta_one_panics() {
    CountMin::dimensions(0.01, 1.0);
}

#[test]
fn plain_and_conservative_single_keys() {
    let mut cms = CountMin::with_hasher(4, 16, Hasher::with_seed(2));
    let (a, b) = ([1, 2, 3, 4], [5, 6, 7, 8]);
    assert_eq!(cms.add(&a, 10), 10);
    assert_eq!(cms.add(&a, 5), 15);
    assert_eq!(cms.add_conservative(&b, 7), 7);
    assert_eq!(cms.estimate(&a), 15);
    assert_eq!(cms.estimate(&b), 7);
    assert_eq!(cms.estimate(&[9, 9, 9, 9]), 0);
    // Keys of other widths share the sketch.
    assert_eq!(cms.add_conservative(&[1u32; 10], 3), 3);
    assert_eq!(cms.estimate(&[1u32; 10]), 3);
}

#[test]
fn conservative_raises_only_low_counters() {
    // Two rows of width 1: every key shares both counters, so they stay
    // equal to the running total.
    let mut cms = CountMin::with_hasher(2, 0, Hasher::with_seed(2));
    cms.add(&[1], 5);
    assert_eq!(cms.add_conservative(&[2], 3), 8);
    assert_eq!(cms.counters(), &[8, 8]);
    // Wider rows: after a CU update the key's minimum is exactly m + v and
    // no counter is above max(old, m + v).
    let mut cms = CountMin::with_hasher(4, 3, Hasher::with_seed(4));
    let keys: Vec<[u32; 1]> = (0..20).map(|i| [i]).collect();
    for (i, k) in keys.iter().enumerate() {
        cms.add(k, i as u32);
    }
    let before = cms.counters().to_vec();
    let m = cms.estimate(&[7]);
    assert_eq!(cms.add_conservative(&[7], 100), m + 100);
    assert_eq!(cms.estimate(&[7]), m + 100);
    for (new, old) in cms.counters().iter().zip(&before) {
        assert!(*new == *old || *new == m + 100, "{old} -> {new}");
    }
}

#[test]
fn counters_saturate_never_wrap() {
    let k = [42, 0, 0, 1];
    for conservative in [false, true] {
        let mut cms = CountMin::with_hasher(3, 4, Hasher::with_seed(8));
        let add = |cms: &mut CountMin, v| {
            if conservative {
                cms.add_conservative(&k, v)
            } else {
                cms.add(&k, v)
            }
        };
        assert_eq!(add(&mut cms, u32::MAX - 5), u32::MAX - 5);
        assert_eq!(add(&mut cms, 3), u32::MAX - 2);
        assert_eq!(add(&mut cms, 10), u32::MAX);
        assert_eq!(add(&mut cms, u32::MAX), u32::MAX);
        let e = if conservative {
            cms.add_conservative_batch(&[k, k], &[1, u32::MAX])
        } else {
            cms.add_batch(&[k, k], &[1, u32::MAX])
        };
        assert_eq!(e, &[u32::MAX, u32::MAX]);
        assert_eq!(cms.estimate(&k), u32::MAX);
        // Merging saturates too.
        let other = cms.clone();
        cms.merge(&other).unwrap();
        assert_eq!(cms.estimate(&k), u32::MAX);
        assert!(cms.counters().iter().all(|&c| c == 0 || c == u32::MAX));
    }
}

#[test]
fn merge_sums_counters() {
    let h = Hasher::with_seed(21);
    let mut a = CountMin::with_hasher(4, 8, h.clone());
    // Another backend, same key: compatible.
    let mut b = CountMin::with_hasher(4, 8, h.on_backend(Backend::Scalar).unwrap());
    let s1: Vec<Key> = (0..300u32).map(|i| [i % 37, 1, 2, 3]).collect();
    let s2: Vec<Key> = (0..300u32).map(|i| [i % 23, 1, 2, 3]).collect();
    let ones = vec![1; 300];
    a.add_batch(&s1, &ones);
    b.add_batch(&s2, &ones);
    let mut both = CountMin::with_hasher(4, 8, Hasher::with_seed(21));
    both.add_batch(&s1, &ones);
    both.add_batch(&s2, &ones);
    a.merge(&b).unwrap();
    assert_eq!(a.counters(), both.counters());
    // Merged conservative sketches still never undercount.
    let mut c1 = CountMin::with_hasher(4, 8, Hasher::with_seed(21));
    let mut c2 = c1.clone();
    c1.add_conservative_batch(&s1, &ones);
    c2.add_conservative_batch(&s2, &ones);
    c1.merge(&c2).unwrap();
    let all: Vec<(Key, u32)> = s1.iter().chain(&s2).map(|k| (*k, 1)).collect();
    for (k, t) in truth(&all) {
        assert!(c1.estimate(&k) >= t);
    }
}

#[test]
fn merge_rejects_incompatible_sketches() {
    let mut a = CountMin::with_hasher(4, 8, Hasher::with_seed(1));
    let rows = CountMin::with_hasher(3, 8, Hasher::with_seed(1));
    let width = CountMin::with_hasher(4, 9, Hasher::with_seed(1));
    let key = CountMin::with_hasher(4, 8, Hasher::with_seed(2));
    assert_eq!(
        a.merge(&rows),
        Err(MergeError::Shape {
            ours: (4, 8),
            theirs: (3, 8)
        })
    );
    assert!(matches!(a.merge(&width), Err(MergeError::Shape { .. })));
    let err = a.merge(&key).unwrap_err();
    assert_eq!(
        err,
        MergeError::HashKey {
            ours: Hasher::with_seed(1).key().id(),
            theirs: Hasher::with_seed(2).key().id(),
        }
    );
    assert!(err.to_string().contains("different hash keys"), "{err}");
    assert!(
        a.merge(&rows)
            .unwrap_err()
            .to_string()
            .contains("3 rows x 2^8 into 4 rows x 2^8")
    );
    // Nothing was changed by the failed merges.
    assert!(a.counters().iter().all(|&c| c == 0));
    // The process key is shared by every `new` sketch in the process.
    let mut p = CountMin::new(2, 4);
    p.merge(&CountMin::new(2, 4)).unwrap();
}

#[test]
fn halve_and_reset() {
    let mut cms = CountMin::with_hasher(4, 12, Hasher::with_seed(6));
    let keys: Vec<Key> = (0..100u32).map(|i| [i, i, i, i]).collect();
    let values: Vec<u32> = (0..100u32).map(|i| 2 * i + 1).collect();
    cms.add_conservative_batch(&keys, &values);
    let before: Vec<u32> = keys.iter().map(|k| cms.estimate(k)).collect();
    let counters = cms.counters().to_vec();
    cms.halve();
    for (c, o) in cms.counters().iter().zip(&counters) {
        assert_eq!(*c, o / 2);
    }
    for ((k, b), v) in keys.iter().zip(&before).zip(&values) {
        assert_eq!(cms.estimate(k), b / 2);
        assert!(cms.estimate(k) >= v / 2);
    }
    cms.reset();
    assert!(cms.counters().iter().all(|&c| c == 0));
    assert_eq!(cms.estimate(&keys[5]), 0);
    assert_eq!(cms.memory_bytes(), 4 * 4096 * 4);
}

#[test]
fn empty_batches_and_scratch_reuse() {
    let mut cms = CountMin::with_hasher(3, 5, Hasher::with_seed(6));
    let none: [[u32; 4]; 0] = [];
    assert!(cms.add_conservative_batch(&none, &[]).is_empty());
    let mut out = [7u32; 2];
    cms.estimate_batch(&none, &mut out);
    assert_eq!(out, [7, 7]);
    // A large batch, then a small one: the estimates are the small batch's.
    let big: Vec<Key> = (0..500u32).map(|i| [i, 0, 0, 0]).collect();
    cms.add_batch(&big, &vec![1; 500]);
    assert_eq!(cms.add_batch(&big[..2], &[1, 1]).len(), 2);
    let mut scratch = kernels::cms::CmsScratch::with_capacity(64, 3);
    let mut a = vec![0; 500];
    let mut b = vec![0; 500];
    cms.estimate_batch_with(&mut scratch, &big, &mut a);
    cms.estimate_batch(&big, &mut b);
    assert_eq!(a, b);
}

#[test]
#[should_panic(expected = "3 values for 2 keys")]
fn batch_length_mismatch_panics() {
    let mut cms = CountMin::with_hasher(3, 5, Hasher::with_seed(6));
    cms.add_batch(&[[1u32], [2]], &[1, 2, 3]);
}

#[test]
fn pairs_api_on_empty_and_mismatched_batches() {
    let mut cms = CountMin::with_hasher(3, 5, Hasher::with_seed(6));
    assert!(cms.add_conservative_pairs(&[], &[]).is_empty());
    let mut out = [7u32; 2];
    cms.estimate_pairs(&[], &mut out);
    assert_eq!(out, [7, 7]);
    let p = cms.hasher().hash_one(&[1u32, 2, 3, 4]);
    assert_eq!(cms.add_conservative_pairs(&[p, p], &[5, 6]), &[5, 11]);
    cms.estimate_pairs(&[p], &mut out);
    assert_eq!(out[0], cms.estimate(&[1u32, 2, 3, 4]));
}

#[test]
#[should_panic(expected = "3 values for 2 keys")]
fn pairs_length_mismatch_panics() {
    let mut cms = CountMin::with_hasher(3, 5, Hasher::with_seed(6));
    cms.add_conservative_pairs(&[HashPair::default(); 2], &[1, 2, 3]);
}
