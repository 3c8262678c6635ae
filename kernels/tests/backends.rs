//! Every backend the CPU has must be bit-identical to the scalar reference:
//! table-driven over every batch length 0..=67 and sub-slice offsets, then
//! property tests over random keys, seeds and layouts. A backend the CPU
//! lacks is skipped with a printed reason (on x86_64 CI that leaves scalar,
//! AVX2 and, where the CPU has it, AVX-512; under qemu scalar + NEON). Each
//! of x86's three AES hash kernels is also checked on its own, since a
//! backend runs only the widest one the CPU has.

use kernels::arch::scalar;
use kernels::index::{self, Blocked, Partitioned};
use kernels::{Backend, HashPair, Hasher};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

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

fn random_keys<const W: usize>(rng: &mut StdRng, n: usize) -> Vec<[u32; W]> {
    (0..n)
        .map(|_| std::array::from_fn(|_| rng.random()))
        .collect()
}

fn reference<const W: usize>(seed: u64, keys: &[[u32; W]]) -> Vec<HashPair> {
    let h = Hasher::with_seed(seed);
    let mut out = vec![HashPair::default(); keys.len()];
    scalar::hash(h.key(), keys, &mut out);
    out
}

fn check_hash_width<const W: usize>() {
    let mut rng = StdRng::seed_from_u64(W as u64);
    // 67 keys plus room for sub-slices starting at offsets 0..8.
    let all = random_keys::<W>(&mut rng, 67 + 8);
    for seed in [0u64, 1, 0xdead_beef_cafe_f00d] {
        for b in simd_backends() {
            let h = Hasher::with_seed(seed).on_backend(b).unwrap();
            for off in 0..8 {
                for len in 0..=67 {
                    let keys = &all[off..off + len];
                    let want = reference(seed, keys);
                    // Output slot longer than needed: only the prefix is written.
                    let mut got = vec![HashPair { h1: 7, h2: 7 }; len + 3];
                    h.hash_batch(keys, &mut got);
                    assert_eq!(
                        &got[..len],
                        &want[..],
                        "W={W} {b} seed={seed} off={off} len={len}"
                    );
                    assert!(got[len..].iter().all(|p| *p == HashPair { h1: 7, h2: 7 }));
                }
            }
        }
        // The one-key path equals the batch path.
        let h = Hasher::with_seed(seed);
        let want = reference(seed, &all);
        for (k, w) in all.iter().zip(&want) {
            assert_eq!(h.hash_one(k), *w);
        }
    }
}

/// Runs `f` over widths 1..=16 (a selection) with keys of every length
/// 0..=67 against the reference.
#[cfg(target_arch = "x86_64")]
fn check_kernel<const W: usize>(
    name: &str,
    f: impl Fn(&kernels::HashKey, &[[u32; W]], &mut [HashPair]),
) {
    let mut rng = StdRng::seed_from_u64(100 + W as u64);
    let all = random_keys::<W>(&mut rng, 67);
    let h = Hasher::with_seed(9);
    for len in 0..=67 {
        let keys = &all[..len];
        let mut got = vec![HashPair::default(); len];
        f(h.key(), keys, &mut got);
        assert_eq!(got, reference(9, keys), "{name} W={W} len={len}");
    }
}

/// One x86 AES kernel (a proof token) at widths 1, 4, 7, 10 and 16.
#[cfg(target_arch = "x86_64")]
macro_rules! check_kernel_widths {
    ($name:expr, $kernel:expr) => {{
        let k = $kernel;
        check_kernel::<1>($name, |key, keys, out| k.hash(key, keys, out));
        check_kernel::<4>($name, |key, keys, out| k.hash(key, keys, out));
        check_kernel::<7>($name, |key, keys, out| k.hash(key, keys, out));
        check_kernel::<10>($name, |key, keys, out| k.hash(key, keys, out));
        check_kernel::<16>($name, |key, keys, out| k.hash(key, keys, out));
    }};
}

/// Says why a check is skipped, past the test harness's capture.
#[cfg(target_arch = "x86_64")]
fn skip(why: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "{why}");
}

#[cfg(target_arch = "x86_64")]
#[test]
fn x86_aes_kernels_match_scalar() {
    use kernels::arch::x86_64::aes::{AesNi, Vaes256, Vaes512};
    match AesNi::new() {
        Some(k) => check_kernel_widths!("aes-ni", k),
        None => skip("skipping the AES-NI kernel: this CPU has no AES-NI"),
    }
    match Vaes256::new() {
        Some(k) => check_kernel_widths!("vaes-256", k),
        None => skip("skipping the VAES 256-bit kernel: this CPU lacks VAES or AVX2"),
    }
    match Vaes512::new() {
        Some(k) => check_kernel_widths!("vaes-512", k),
        None => skip(
            "skipping the VAES 512-bit kernel and the AVX-512 backend: this CPU lacks \
             AVX-512F/BW/VL or VAES",
        ),
    }
}

#[test]
fn hash_matches_scalar_every_length_and_offset() {
    check_hash_width::<1>();
    check_hash_width::<2>();
    check_hash_width::<3>();
    check_hash_width::<4>();
    check_hash_width::<5>();
    check_hash_width::<6>();
    check_hash_width::<7>();
    check_hash_width::<8>();
    check_hash_width::<10>();
    check_hash_width::<13>();
    check_hash_width::<16>();
}

fn random_pairs(rng: &mut StdRng, n: usize) -> Vec<HashPair> {
    (0..n)
        .map(|_| HashPair {
            h1: rng.random(),
            h2: rng.random(),
        })
        .collect()
}

fn check_partitioned(b: Backend, pairs: &[HashPair], layout: Partitioned) {
    let n = pairs.len() * layout.rows();
    let mut want = vec![0u32; n];
    let mut got = vec![u32::MAX; n + 5];
    scalar::partitioned(pairs, layout, &mut want);
    index::partitioned(b, pairs, layout, &mut got);
    assert_eq!(&got[..n], &want[..], "{b} {layout:?} n={}", pairs.len());
    assert!(
        got[n..].iter().all(|&v| v == u32::MAX),
        "wrote past the end"
    );
}

fn check_blocked(b: Backend, pairs: &[HashPair], layout: Blocked) {
    let n = pairs.len();
    let (mut wb, mut wbits) = (vec![0u32; n], vec![0u32; n * layout.k()]);
    let (mut gb, mut gbits) = (vec![u32::MAX; n + 5], vec![u32::MAX; n * layout.k() + 5]);
    scalar::blocked(pairs, layout, &mut wb, &mut wbits);
    index::blocked(b, pairs, layout, &mut gb, &mut gbits);
    assert_eq!(&gb[..n], &wb[..], "{b} {layout:?} n={n}");
    assert_eq!(&gbits[..n * layout.k()], &wbits[..], "{b} {layout:?} n={n}");
    assert!(
        gb[n..]
            .iter()
            .chain(&gbits[n * layout.k()..])
            .all(|&v| v == u32::MAX)
    );
}

#[test]
fn indices_match_scalar_every_length() {
    let mut rng = StdRng::seed_from_u64(99);
    let all = random_pairs(&mut rng, 67 + 8);
    for b in simd_backends() {
        for off in [0, 1, 3, 7] {
            for len in 0..=67 {
                let pairs = &all[off..off + len];
                for rows in [1, 2, 3, 4, 8, 9] {
                    for lw in [0, 1, 7, 16, 31, 32] {
                        check_partitioned(b, pairs, Partitioned::new(rows, lw));
                    }
                }
                for lb in [0, 1, 10, 20, 31, 32] {
                    for bb in [6, 8, 9] {
                        for k in [1, 2, 7, 8, 16, 32] {
                            check_blocked(b, pairs, Blocked::new(lb, bb, k));
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn scalar_index_formulas_as_documented() {
    let p = HashPair {
        h1: 0x8000_0001,
        h2: 0x4000_0000,
    };
    // step = h2 | 1 = 0x40000001
    let mut out = [0u32; 4];
    scalar::partitioned(&[p], Partitioned::new(4, 4), &mut out);
    let g = |r: u32| 0x8000_0001u32.wrapping_add(r.wrapping_mul(0x4000_0001)) >> 28;
    assert_eq!(out, [g(0), g(1), g(2), g(3)]);
    // A zero h2 still steps: the step is never zero.
    let z = HashPair { h1: 0, h2: 0 };
    let mut out = [0u32; 3];
    scalar::partitioned(&[z], Partitioned::new(3, 32), &mut out);
    assert_eq!(out, [0, 1, 2]);
    // Width 1 (log2 0) maps everything to 0.
    scalar::partitioned(&[p, p, p], Partitioned::new(1, 0), &mut out);
    assert_eq!(out, [0, 0, 0]);
    // Blocked: block from h1's top bits, bits from h2 times the salts.
    let p = HashPair {
        h1: 0x8000_0001,
        h2: 0x1234_5679,
    };
    let (mut blocks, mut bits) = ([0u32; 1], [0u32; 3]);
    scalar::blocked(&[p], Blocked::new(2, 9, 3), &mut blocks, &mut bits);
    assert_eq!(blocks[0], 0x8000_0001 >> 30);
    let salts = [0x47b6_137bu32, 0x4497_4d91, 0x8824_ad5b];
    assert_eq!(bits, salts.map(|s| 0x1234_5679u32.wrapping_mul(s) >> 23));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn prop_ipv4_keys_match(seed: u64, keys in prop::collection::vec(any::<[u32; 4]>(), 0..200)) {
        let want = reference(seed, &keys);
        for b in simd_backends() {
            let mut got = vec![HashPair::default(); keys.len()];
            Hasher::with_seed(seed).on_backend(b).unwrap().hash_batch(&keys, &mut got);
            prop_assert_eq!(&got, &want);
        }
    }

    #[test]
    fn prop_ipv6_keys_match(seed: u64, keys in prop::collection::vec(any::<[u32; 10]>(), 0..120)) {
        let want = reference(seed, &keys);
        for b in simd_backends() {
            let mut got = vec![HashPair::default(); keys.len()];
            Hasher::with_seed(seed).on_backend(b).unwrap().hash_batch(&keys, &mut got);
            prop_assert_eq!(&got, &want);
        }
    }

    #[test]
    fn prop_indices_match(
        pairs in prop::collection::vec(any::<(u32, u32)>(), 0..100),
        rows in 1usize..12,
        lw in 0u32..=32,
        lb in 0u32..=32,
        bb in 1u32..=16,
        k in 1usize..=32,
    ) {
        let pairs: Vec<HashPair> = pairs.into_iter().map(|(h1, h2)| HashPair { h1, h2 }).collect();
        for b in simd_backends() {
            check_partitioned(b, &pairs, Partitioned::new(rows, lw));
            check_blocked(b, &pairs, Blocked::new(lb, bb, k));
        }
    }
}

/// On aarch64 the NEON backend hashes with the AES instructions when the
/// core has them (so the comparisons above check them against the `aes`
/// crate's software rounds, which it uses on aarch64 by default).
#[cfg(target_arch = "aarch64")]
#[test]
fn neon_hashes_with_the_aes_extension_where_present() {
    let h = Hasher::with_seed(1).on_backend(Backend::Neon).unwrap();
    if std::arch::is_aarch64_feature_detected!("aes") {
        assert_eq!(h.hash_instructions(), "neon-aes");
    } else {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "this core has no AES extension: the NEON backend hashes with the reference"
        );
        assert_eq!(h.hash_instructions(), "aes-crate");
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn x86_tokens_exist_exactly_where_their_backend_is_available() {
    use kernels::arch::x86_64::{avx2::Avx2, avx512::Avx512};
    assert_eq!(Avx2::new().is_some(), Backend::Avx2.is_available());
    assert_eq!(Avx512::new().is_some(), Backend::Avx512.is_available());
    if let Some(t) = Avx512::new() {
        assert_eq!(Some(t.avx2()), Avx2::new());
    }
}

#[cfg(target_arch = "aarch64")]
#[test]
fn neon_token_is_always_there() {
    use kernels::arch::aarch64::neon::Neon;
    assert_eq!(Neon::new(), Some(Neon::baseline()));
    assert!(Backend::Neon.is_available());
}
