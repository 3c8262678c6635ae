//! Bloomplane kernels: keyed SIMD batch hashing of fixed-width flow keys, the
//! index derivations every Bloom-family structure uses, the structures
//! themselves (Bloom filters, counting and per-port filters, count-min
//! sketches) and SFB's per-arrival bin kernel ([`sfb`]). Nothing here knows
//! about packets: a key is `[u32; W]` (W = 4 for an IPv4 5-tuple, 10 for
//! IPv6), and the structures take keys one at a time or a batch at a time.
//!
//! The batch calls are what the crate is for: they hash the whole batch
//! with the best SIMD backend the CPU has (AVX2, AVX-512, NEON; the scalar
//! reference elsewhere, every backend bit-identical), derive every key's
//! indices in vector registers and prefetch before touching memory. A Bloom
//! filter of multicast groups and a count-min sketch of per-flow bytes, fed
//! a batch of keys:
//!
//! ```
//! use kernels::bloom::Bloom;
//! use kernels::cms::CountMin;
//!
//! // A batch of IPv4 5-tuples: [src, dst, sport << 16 | dport, protocol].
//! let flows: Vec<[u32; 4]> = (0..64u32)
//!     .map(|i| [0x0a00_0000 | i, 0xac10_0001, (1024 + i) << 16 | 443, 6])
//!     .collect();
//!
//! // Bloom filter: 10,000 keys at a 0.1% false-positive rate (split-block
//! // layout: one 32-byte block per key, one vector test per query).
//! let mut seen = Bloom::with_rate(10_000, 0.001).unwrap();
//! seen.insert_batch(&flows[..32]);
//! let mut hit = vec![false; flows.len()];
//! seen.contains_batch(&flows, &mut hit);
//! assert!(hit[..32].iter().all(|&h| h), "no false negatives");
//! assert!(hit[32..].iter().filter(|&&h| h).count() <= 2, "few false positives");
//!
//! // Count-min sketch with conservative update, sized for an error of at
//! // most 0.1% of the total with probability 99%: every flow sent 1500
//! // bytes, flow 0 ten times more.
//! let mut bytes = CountMin::with_error(0.001, 0.01);
//! let mut sizes = vec![1500u32; flows.len()];
//! sizes[0] = 15_000;
//! bytes.add_conservative_batch(&flows, &sizes);
//! let mut estimate = vec![0u32; flows.len()];
//! bytes.estimate_batch(&flows, &mut estimate);
//! assert!(estimate[0] >= 15_000, "never below the true count");
//! assert!(estimate.iter().zip(&sizes).all(|(e, s)| e >= s));
//! ```
//!
//! Underneath, [`Hasher::hash_batch`] turns each key into a [`HashPair`]
//! (keyed AES rounds; a per-process random key unless seeded), and the
//! [`index`] functions derive k indices per key from the pairs:
//!
//! ```
//! use kernels::{Hasher, HashPair, index::Partitioned};
//!
//! let hasher = Hasher::with_seed(42);
//! let keys = [[0x0a00_0001, 0x0a00_0002, (1234 << 16) | 80, 6]; 3];
//! let mut pairs = [HashPair::default(); 3];
//! hasher.hash_batch(&keys, &mut pairs);
//! assert_eq!(pairs[0], hasher.hash_one(&keys[0]));
//!
//! // Four count-min rows of 2^16 counters: row-major output, out[r * n + i].
//! let layout = Partitioned::new(4, 16);
//! let mut idx = [0u32; 4 * 3];
//! hasher.partitioned(&pairs, layout, &mut idx);
//! assert!(idx.iter().all(|&i| i < 1 << 16));
//! ```
//!
//! [`Backend`] says which backend runs (`BLOOMPLANE_BACKEND` forces one);
//! [`platform::summary`] is the line `--version` prints.

pub mod arch;
mod backend;
pub mod bloom;
pub mod cms;
mod hash;
pub mod index;
mod lanes;
pub mod platform;
mod seed;
pub mod sfb;

pub use backend::{BACKEND_ENV, Backend, BackendError};
pub use bloom::params::prefetch;
pub use hash::{HashPair, Hasher, MAX_WORDS};
pub use seed::{HashKey, splitmix64};
