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

pub mod arch;
mod backend;
pub mod bloom;
pub mod cms;
mod hash;
pub mod index;
mod lanes;
mod seed;
pub mod sfb;

pub use backend::{Backend, BackendError};
pub use bloom::params::prefetch;
pub use hash::{HashPair, Hasher, MAX_WORDS};
pub use seed::{HashKey, splitmix64};
