//! Bloom-family filters over fixed-width keys `[u32; W]`, all built on the
//! batch [`Hasher`](crate::Hasher) and the [`index`](crate::index) formulas.
//!
//! * [`Bloom`]: the plain filter, in the [`Layout::Blocked`] layout (one
//!   512-bit cache line per key, chosen by measurement: one memory access per
//!   query) or the [`Layout::Classic`] one (the textbook filter, for
//!   comparison with the literature and for compressed transfer). Sizing from
//!   `(n, p)` uses each layout's own false-positive formula:
//!   * Classic: `f = (1 - (1 - 1/m)^(k n))^k ~= (1 - e^(-k n / m))^k`;
//!   * Blocked (Putze, Sanders, Singler 2007), `B = 512`, `lambda = n / blocks`:
//!     `f = sum_i Poisson(i; lambda) (1 - (1 - 1/B)^(i k))^k`; the block count
//!     is rounded up to a power of two because the block index is the top
//!     bits of `h1`.
//!
//!   Union (OR), intersection (AND), halving, the Swamidass-Baldi size
//!   estimate `n* = -(m/k) ln(1 - X/m)` and union/intersection estimates.
//! * [`CountingBloom`]: 4-bit saturating counters; insert, remove, export to
//!   a [`Bloom`].
//! * [`PortFilter`]: one filter per port, bit-sliced, answering with a
//!   [`PortSet`].
//! * Transfer forms ([`Bloom::to_bytes`], [`Bloom::to_compressed_bytes`],
//!   [`Bloom::from_bytes`]): a versioned header and a raw or range-coded
//!   payload; decoding rejects malformed bytes with a [`DecodeError`].
//!
//! Every filter hashes a batch of keys at once, derives all positions,
//! prefetches, then touches memory.

mod counting;
mod filter;
mod params;
mod ports;
mod transfer;

pub use counting::{COUNTER_MAX, CountingBloom};
pub use filter::Bloom;
pub use params::{
    BLOCK_BITS, Incompatible, Layout, MAX_BITS, MAX_K, ParamError, Params, blocked_fpr,
};
pub use ports::{MAX_PORTS, PortError, PortFilter, PortIter, PortSet};
pub use transfer::{DecodeError, HEADER_LEN, MAGIC, MAX_CODED_BITS, VERSION};
