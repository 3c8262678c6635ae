//! Bloom-family filters over fixed-width keys `[u32; W]`, all built on the
//! batch [`Hasher`](crate::Hasher) and the [`index`](crate::index) formulas.
//!
//! * [`Bloom`]: the plain filter, in one of three [`Layout`]s:
//!   * [`Layout::SplitBlock`] (the default, what [`Bloom::with_rate`]
//!     picks): 256-bit blocks of eight 32-bit words, exactly one bit per
//!     word (`k = 8`), bit `(h2 * SALT[j]) >> 27` of word `j` with the
//!     Parquet salts, block `h1 >> (32 - log2 blocks)`. A query is one
//!     32-byte load and one vector test; the AVX2 and NEON kernels build a
//!     key's mask with one multiply, shift and variable shift.
//!   * [`Layout::Blocked`]: one 512-bit cache line per key, `k` bits
//!     anywhere in it (any `k`, one memory access per query, a scalar bit
//!     test per position).
//!   * [`Layout::Classic`]: the textbook filter, for comparison with the
//!     literature and for compressed transfer.
//!
//!   Sizing from `(n, p)` uses each layout's own false-positive formula:
//!   * Classic: `f = (1 - (1 - 1/m)^(k n))^k ~= (1 - e^(-k n / m))^k`;
//!   * Blocked (Putze, Sanders, Singler 2007), `B = 512`, `lambda = n / blocks`:
//!     `f = sum_i Poisson(i; lambda) (1 - (1 - 1/B)^(i k))^k`;
//!   * SplitBlock, `lambda = n / blocks`:
//!     `f = sum_i Poisson(i; lambda) (1 - (1 - 1/32)^i)^8` (each of the `i`
//!     keys in a block sets one of the 32 bits of every word);
//!
//!   the block counts are rounded up to a power of two because the block
//!   index is the top bits of `h1`.
//!
//!   Union (OR), intersection (AND), halving, the Swamidass-Baldi size
//!   estimate `n* = -(m/k) ln(1 - X/m)` (and its blocked and split-block
//!   forms) and union/intersection estimates, in every layout.
//! * [`CountingBloom`]: 4-bit saturating counters; insert, remove, export to
//!   a [`Bloom`]. Every layout (split block: 8 counters per key, one in each
//!   32-counter word of the key's 256-counter block).
//! * [`PortFilter`]: one filter per port, bit-sliced, answering with a
//!   [`PortSet`]; every layout. A position is a word-set of its own there,
//!   so a query costs `k` cache lines whatever the layout:
//!   [`Params::for_port_filter`] sizes one with the blocked layout and the
//!   fewest positions per key within twice the smallest size (`k = 3`
//!   instead of the split block's 8 at 1,024 items and 0.1%, same memory).
//! * Transfer forms ([`Bloom::to_bytes`], [`Bloom::to_compressed_bytes`],
//!   [`Bloom::from_bytes`]): a versioned header (layout code 0 classic,
//!   1 blocked, 2 split block) and a raw or range-coded payload; decoding
//!   rejects malformed bytes with a [`DecodeError`]. [`Params::for_transfer`]
//!   sizes a classic filter for the fewest bytes on the wire at a target
//!   rate ("Compressed Bloom filters"), and [`Bloom::to_message`] reports
//!   a message's size beside the raw form and a plain list ([`MessageSizes`]).
//! * [`dbf`]: the Distributed Bloom Filter's per-pair, per-exchange
//!   mappings built from stored element hashes, and the set of
//!   `(element, stored hash, last reported)` entries peers reconcile.
//!
//! Every filter hashes a batch of keys at once, derives all positions (or,
//! split block, the block and the mask in registers), prefetches, then
//! touches memory. The split-block paths keep no zeroed scratch: one
//! 64-pair hash buffer per call.
//!
//! # Choice of the default layout
//!
//! [`Layout::default`] and [`Bloom::with_rate`] pick [`Layout::SplitBlock`]:
//! at the same false-positive *target* it is about 3.5-4x faster to query
//! than the 512-bit blocked layout (`bloom/query/*` against
//! `bloom/query-blocked512/*` in the README's benchmark tables: 64-key
//! batches of 13-byte IPv4 keys, hashing included, filters sized for
//! n = 50,000 at p = 1%). The sizes and the false-positive rates measured
//! on those filters:
//!
//! | layout                | size    | measured rate |
//! |-----------------------|---------|---------------|
//! | SplitBlock (k = 8)    | 64 KiB  | 0.99%         |
//! | Blocked 512 (k = 5)   | 64 KiB  | 0.90%         |
//! | sbbf-rs (11 bits/key) | 67 KiB  | 0.80%         |
//! | fastbloom (SipHash)   | 59 KiB  | 0.99%         |
//!
//! Instruction counts (callgrind, repeatable): 26 per key for a split-block
//! query (hash 9.8, mask and test 13.3, the rest batching) against 149 for
//! the blocked one, whose `k` scalar bit tests, per-call zeroed scratch and
//! index arrays the split-block kernel does without. The cost of the choice
//! is memory at some `(n, p)`: the block count is a power of two and the
//! rate falls about 30-fold per doubling (2^12 blocks, 128 KiB, give 0.03%
//! here), so a target just under what 2^b blocks give takes twice the
//! memory: here 2^11 blocks (64 KiB) give 0.99% against the 1% target,
//! and a 0.95% target would take 2^12. Where memory
//! matters more than speed, or another `k` is wanted, size with
//! `Params::for_items(Layout::Blocked, ..)`; Classic remains for the
//! textbook formulas and compressed transfer.

mod counting;
pub mod dbf;
mod filter;
pub(crate) mod params;
mod ports;
mod transfer;

pub use counting::{COUNTER_MAX, CountingBloom};
pub use filter::Bloom;
pub use params::{
    BLOCK_BITS, Incompatible, Layout, MAX_BITS, MAX_K, ParamError, Params, SPLIT_BLOCK_BITS,
    SPLIT_BLOCK_K, blocked_fpr, split_block_fpr,
};
pub use ports::{MAX_PORTS, PortError, PortFilter, PortIter, PortSet};
pub use transfer::{DecodeError, HEADER_LEN, MAGIC, MAX_CODED_BITS, MessageSizes, VERSION};
