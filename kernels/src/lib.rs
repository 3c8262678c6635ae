//! Bloomplane kernels: keyed SIMD batch hashing of fixed-width flow keys, the
//! index derivations every Bloom-family structure uses, the structures
//! themselves (Bloom filters, count-min sketches) and SFB's per-arrival bin
//! kernel ([`sfb`]). Nothing here knows about packets.
//!
//! The contract: a batch of keys (`[u32; W]`, W = 4 for an IPv4 5-tuple, 10 for
//! IPv6) goes in, one [`HashPair`] per key comes out, and from the pairs the
//! [`index`] functions derive k indices per key. Every backend (scalar, AVX2,
//! NEON) produces bit-identical output; the scalar one is the reference.
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
//! The structures most users want are [`bloom::Bloom`] and
//! [`cms::CountMin`]; both take keys one at a time or a batch at a time
//! (the batch calls hash with the SIMD backend and prefetch):
//!
//! ```
//! use kernels::bloom::Bloom;
//!
//! // 10,000 groups at a 0.1% false-positive rate (split-block layout).
//! let mut groups = Bloom::with_rate(10_000, 0.001).unwrap();
//! let keys: Vec<[u32; 4]> = (0..1000u32).map(|g| [0xe000_0000 | g, 0, 0, 0]).collect();
//! groups.insert_batch(&keys);
//! let mut hit = vec![false; keys.len()];
//! groups.contains_batch(&keys, &mut hit);
//! assert!(hit.iter().all(|&h| h), "no false negatives");
//! assert!(groups.false_positive_rate() < 0.001);
//! ```
//!
//! ```
//! use kernels::cms::CountMin;
//!
//! // Count-min with conservative update: estimates never fall below the
//! // true count, and exceed it by at most epsilon N with probability 1 - delta.
//! let mut bytes = CountMin::with_error(0.001, 0.01);
//! let flow = [0x0a00_0001, 0x0a00_0002, (1234 << 16) | 80, 6];
//! for _ in 0..10 {
//!     bytes.add_conservative(&flow, 1500);
//! }
//! assert!(bytes.estimate(&flow) >= 15_000);
//! ```

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
