//! Longest-prefix match with Bloom filters in front of exact tables
//! (Dharmapurikar, Krishnamurthy and Taylor, "Longest Prefix Matching using
//! Bloom Filters", SIGCOMM 2003), for IPv4 (`u32`) and IPv6 (`u128`).
//!
//! # The structure
//!
//! * **Direct array** for the short prefixes, lengths `0..=16`
//!   ([`DIRECT_BITS`]): `2^16` slots, each holding the longest such route
//!   covering it (its length and next hop). Short routes are few but
//!   cover most of the space; one load answers every address that no
//!   longer route matches, with no hashing.
//! * **Strata** for the longer lengths, four lengths each ([`STRIDE`]):
//!   17-20, 21-24, 25-28, ... (IPv6: up to 125-128). A route is expanded
//!   to the stratum's longest length (controlled prefix expansion, as the
//!   paper does to cut the number of distinct lengths): a /22 becomes four
//!   /24 entries, each keeping the longest route of the stratum that covers
//!   it. So a lookup probes at most 4 strata for IPv4 (2 on a BGP table,
//!   whose prefixes stop at /24) and at most 28 for IPv6, instead of one
//!   per length, for at most 8 entries per route (4 per /22, 2 per /23 on
//!   the BGP table: about 1.6 entries per route).
//! * Each stratum has an **exact table** from the expanded prefix to
//!   (original length, next hop): open addressing over cache-line buckets
//!   of four entries, addressed by the same hash pair as the filter, so a
//!   batch prefetches the bucket of every positive before probing any (a
//!   general-purpose map has no such call, and its probe is two dependent
//!   loads: control bytes, then the entry). In front of it a
//!   **split-block Bloom filter** ([`kernels::index::SplitBlock`]: one
//!   32-byte block per key, tested with one vector load) sized for the
//!   stratum's entries at 12 to 24 keys per block (0.03-0.95% false
//!   positives).
//!
//! # A lookup
//!
//! [`Lpm::lookup_batch`] takes the addresses [`BATCH`] at a time and walks
//! the strata from the longest down. For each non-empty stratum it forms
//! the candidate keys of the addresses still unresolved (the address masked
//! to the stratum's length, and the length), hashes them in one
//! [`kernels::Hasher::hash_batch`] call (the SIMD AES kernels), tests them
//! in one filter call (prefetching every block first), prefetches the
//! exact-table bucket of every positive, then probes the exact table for
//! the positives with the same hash pair (no second hash).
//! A real match is the answer (every longer stratum already missed), and
//! the address leaves the batch; a false positive costs one exact probe
//! that finds nothing, never a wrong route. What no stratum resolves reads
//! the direct array.
//!
//! The exact tables are large (tens of MB for a full IPv4 table) and every
//! resolved address costs one random access to them; the filters are a
//! few MB and keep the accesses to strata without a match off them.
//! Batching turns those accesses into independent loads the core overlaps.
//! That is the difference from a trie (the peers in `bench`'s `lpm` area
//! are tree-bitmap tries): a trie walk is a chain of dependent loads, one
//! per level, that no batch can start early; here every address needs a
//! few independent ones, known as soon as its candidates are hashed.
//! [`Lpm::lookup`] (one address) overlaps what it can of its own:
//! all strata's filter blocks together, then all positives' buckets.
//!
//! # Updates
//!
//! [`Lpm::insert`] and [`Lpm::remove`] keep the routes as given (one map
//! per length) besides the expanded structure: a removal hands each of its
//! expanded entries or direct slots to the next longest route of the same
//! stratum (or of the direct array), or removes the entry. Bloom filters
//! cannot forget, so a removed entry stays in its filter as a false
//! positive until the filter is rebuilt: once removed keys pass both 1024
//! and the entries present, or when a growing stratum passes the filter's
//! capacity (rebuilt at twice the size). Updates take `&mut self` and
//! lookups `&self`: workers can share one table read-only.
//!
//! [`Reference`] is the plain table the tests compare with, and [`synth`]
//! makes tables shaped like the public BGP table and addresses for them.

mod addr;
mod exact;
mod filter;
mod lpm;
mod reference;
pub mod synth;

pub use addr::{Address, Prefix, PrefixLenError};
pub use lpm::{BATCH, DIRECT_BITS, Footprint, Lpm, Lpm4, Lpm6, RouteMatch, STRIDE};
pub use reference::Reference;
