//! Icarus: loop detection with a Bloom filter carried in the packet.
//!
//! The wire format (IPv4 option `0x5E`, IPv6 hop-by-hop option `0x3E`, an
//! m-bit filter) and the frame operations are in [`crate::wire::icarus`].
//! This module holds the per-node part: the node's mask, the per-hop rule,
//! the per-interface edge behaviour, counters, and the pipeline stage.
//!
//! # The node mask
//!
//! Every node has a fixed mask of exactly `k` distinct bits out of `m`,
//! derived from its 64-bit node id with the kernels' keyed hash
//! ([`kernels::Hasher::hash_one`], the same on every machine and backend)
//! under a domain-wide seed ([`FilterParams::seed`]). Draw `r = 0, 1, 2,
//! ...` hashes the key `[id_lo, id_hi, m, r]`; each of the two
//! 32-bit halves of the pair gives one position (its top `log2 m` bits);
//! a position already taken is re-drawn (skipped), until `k` are distinct.
//!
//! Why independent draws rather than double hashing (`h1 + i * h2`): with
//! only `m` = 64..256 positions, double-hashed positions form arithmetic
//! progressions, so masks of different nodes overlap more than random
//! k-subsets do (the kernels measured about 9% more false positives for
//! progressions inside a Bloom block, see `kernels::index`). The false-alarm
//! analysis below assumes uniformly random k-subsets; independent draws give
//! them, and the test `tests/icarus_markov.rs` checks the measured rate
//! against the exact one. Masks are computed once per node (at start-up),
//! so the extra hashing costs nothing per packet.
//!
//! # The hop rule
//!
//! At every hop: if every bit of the node's mask is already set in the
//! packet's filter, the packet is on a loop ([`Outcome::Loop`]: counted in
//! `loops_detected`, then dropped with [`LoopAction::Drop`], the default, or
//! forwarded with [`LoopAction::Forward`]); otherwise the mask is ORed in,
//! in place, fixing the IPv4 header checksum incrementally
//! ([`Outcome::Marked`], counted in `marked_hops`).
//!
//! A real loop is always detected the first time the packet comes back to
//! a node: the node ORed its mask in at the first visit, and bits are never
//! cleared on the way. A loop-free path can raise a false alarm when the
//! masks of the nodes before a node happen to cover its mask.
//!
//! # False alarms: the exact probability
//!
//! **Definition.** A *false alarm on a path through h nodes* is the event
//! that at least one of h distinct nodes alarms, the filter being empty when
//! the first node sees it (it was inserted at the ingress edge; the first
//! node therefore never alarms), every node's mask being a uniformly random
//! k-subset of the m bits, independent of the others.
//!
//! The number `c` of set bits is a Markov chain. A node that finds `c` bits
//! set alarms with probability `C(c, k) / C(m, k)`; otherwise it adds `j >= 1`
//! new bits with the hypergeometric probability
//! `C(m - c, j) C(c, k - j) / C(m, k)`. [`false_alarm_probability`] runs the
//! chain from `c = 0` and sums the alarm probability at each of the h nodes
//! (mass that alarmed leaves the chain). It gives the reference values:
//!
//! | m   | k  | nodes h | P(false alarm) |
//! |-----|----|---------|----------------|
//! | 128 | 6  | 10      | 0.306%         |
//! | 64  | 4  | 10      | 8.70%          |
//! | 256 | 8  | 20      | 0.503%         |
//! | 128 | 10 | 10      | 0.180% (the default) |
//!
//! # The default k
//!
//! [`DEFAULT_K`] = 10 for the default m = 128: it is the k that minimises the
//! exact false-alarm probability on a path through 10 distinct nodes
//! ([`optimal_k`]`(128, 10) == 10`, 0.180%, against 0.306% for k = 6, 0.198%
//! for k = 8 and 0.186% for k = 11). The curve is flat between 8 and 11, and
//! k costs nothing per packet (the mask is precomputed; a hop is one AND
//! and one OR per 64-bit word whatever k is). The trade-off: a larger k
//! fills the filter faster, so longer paths lose more with k = 10 than with
//! a smaller k (15 nodes: 4.7% at k = 10, 3.7% at k = 6). For the other
//! widths, [`default_k`] gives the minimiser at 10 nodes as well: 5 for
//! m = 64 (7.87%) and 19 for m = 256 (0.00014%).
//!
//! # Edges
//!
//! Per interface (port `0..64`, bit masks in [`IcarusConfig`]): a packet
//! arriving without the option on a port in `insert_on_ingress` gets an
//! empty filter inserted before the hop rule runs (`inserted`; when the
//! header has no room, `no_room` and the packet passes untouched); a packet
//! leaving through a port in `strip_on_egress` loses the option
//! (`stripped`). Elsewhere a packet without the option passes untouched
//! (`passed_without_option`). See [`crate::wire::icarus`] for what
//! insertion and stripping do to the headers, and for jumbograms and
//! fragments.
//!
//! In the router's chain the insertion is deferred to the copies that keep
//! the option. A packet from an edge usually leaves by another edge, where
//! the option is stripped again: inserting it (the frame grows and is
//! parsed again) only to strip it from the copy (found and cut out again)
//! was a large part of the router's work (`pipeline/router/default` in the
//! README's benchmarks). So
//! [`IcarusStage`] only checks the insertion ([`icarus::check_insert`]:
//! `inserted`, or why not) and applies the hop rule to the filter the
//! packet would carry, which is always the same: an empty filter after
//! this node's hop ([`Icarus::inserted_filter`], always `marked_hops`).
//! The frame stays as it came; [`Packet::icarus_pending`] says how many
//! bytes the option adds. The egress stage then inserts that filter into
//! each copy leaving by a port that keeps it, and sends a copy leaving by
//! a stripping port as it came (`stripped`, as if inserted and stripped):
//! every copy's bytes and every counter are those of inserting at ingress.
//!
//! [`Packet::icarus_pending`]: crate::packet::Packet::icarus_pending
//!
//! # Cost per packet
//!
//! [`Icarus::check_and_update_batch`] dispatches the width once per batch,
//! converts the mask to wire order once ([`WireMask`]), tries the canonical
//! placement first (IPv4: version and IHL range in one compare of the first
//! byte, the four lead bytes in one compare; IPv6: the hop-by-hop length and
//! the six lead bytes), does the subset test and the OR on native `u64`
//! words of the frame, adjusts the IPv4 checksum with 64-bit end-around-carry
//! adds and a rotate-add fold, and counts marks and loops in registers,
//! adding them to the counters once per batch. Anything else takes the
//! general path ([`icarus::find`], [`icarus::check_and_update`]) and is
//! counted as it comes. The `icarus/check/*` benches measure this path
//! (the README's benchmark section has the figures).
//!
//! # Counters
//!
//! Per packet seen by [`Icarus::hop`] / [`Icarus::ingress`], exactly one of
//! `loops_detected`, `marked_hops`, `passed_without_option`, `no_room`,
//! `unsupported`, `bad_option`, `width_mismatch` grows; `inserted` and
//! `stripped` count the edge operations on top.

use std::any::Any;

use kernels::Hasher;
use serde::Serialize;

use crate::clock::Timestamp;
use crate::packet::{Batch, DropReason};
use crate::pipeline::Stage;
use crate::wire::icarus::{
    self, Filter, FilterWidth, Hop, IcarusError, Location, Stripped, WireMask,
};
use crate::wire::{IpProtocol, IpVersion, Parsed};

/// Bytes of an IPv4 header without options.
const IPV4_HEADER: usize = 20;
/// Bytes of an IPv6 header without extension headers.
const IPV6_HEADER: usize = 40;

/// The default domain seed for node masks (ASCII "icarus-1").
pub const DEFAULT_SEED: u64 = 0x6963_6172_7573_2d31;

/// The default number of mask bits for the default m = 128 (see the module docs).
pub const DEFAULT_K: usize = 10;

/// The largest k accepted.
pub const MAX_K: usize = 32;

/// The k that minimises the false-alarm probability on a path through 10
/// distinct nodes for `width` (5, 10, 19 for m = 64, 128, 256).
pub const fn default_k(width: FilterWidth) -> usize {
    match width {
        FilterWidth::M64 => 5,
        FilterWidth::M128 => DEFAULT_K,
        FilterWidth::M256 => 19,
    }
}

/// A configuration error (control path).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamsError {
    /// k out of range.
    #[error("icarus.k = {k}: must be in 1..={max} (and at most m = {m})")]
    BadK {
        /// The k asked for.
        k: usize,
        /// The largest k accepted.
        max: usize,
        /// The filter width in bits.
        m: usize,
    },
    /// m not one of 64, 128, 256.
    #[error("icarus.m = {0}: must be 64, 128 or 256")]
    BadWidth(usize),
}

/// What every node of a loop-detection domain agrees on: the filter width,
/// and the seed that turns node ids into masks; plus this node's k.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FilterParams {
    width: FilterWidth,
    k: usize,
    seed: u64,
}

impl Default for FilterParams {
    fn default() -> Self {
        FilterParams {
            width: FilterWidth::M128,
            k: DEFAULT_K,
            seed: DEFAULT_SEED,
        }
    }
}

impl FilterParams {
    /// `width` and `k` (`1..=MAX_K`), with [`DEFAULT_SEED`].
    pub fn new(width: FilterWidth, k: usize) -> Result<Self, ParamsError> {
        if k == 0 || k > MAX_K || k > width.bits() {
            return Err(ParamsError::BadK {
                k,
                max: MAX_K,
                m: width.bits(),
            });
        }
        Ok(FilterParams {
            width,
            k,
            seed: DEFAULT_SEED,
        })
    }

    /// From a bit count (64, 128, 256) and k.
    pub fn from_bits(m: usize, k: usize) -> Result<Self, ParamsError> {
        let width = FilterWidth::from_bits(m).ok_or(ParamsError::BadWidth(m))?;
        Self::new(width, k)
    }

    /// The same with another domain seed.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The filter width.
    pub fn width(&self) -> FilterWidth {
        self.width
    }

    /// Bits per mask.
    pub fn k(&self) -> usize {
        self.k
    }

    /// The domain seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }
}

/// Turns node ids into masks (holds the keyed hasher).
#[derive(Debug, Clone)]
pub struct MaskDeriver {
    hasher: Hasher,
    params: FilterParams,
}

impl MaskDeriver {
    /// A deriver for `params`.
    pub fn new(params: FilterParams) -> Self {
        MaskDeriver {
            hasher: Hasher::with_seed(params.seed),
            params,
        }
    }

    /// The parameters.
    pub fn params(&self) -> &FilterParams {
        &self.params
    }

    /// The mask of `node_id`: exactly k distinct bits (see the module docs).
    pub fn mask(&self, node_id: u64) -> Filter {
        let w = self.params.width;
        let shift = 32 - w.log2_bits();
        let mut f = Filter::empty(w);
        let mut have = 0;
        // 2^16 draws give 2^17 positions: with k <= 32 of m >= 64 the loop
        // ends long before; the fallback only guarantees termination.
        for draw in 0..1u32 << 16 {
            let p = self.hasher.hash_one(&[
                node_id as u32,
                (node_id >> 32) as u32,
                w.bits() as u32,
                draw,
            ]);
            for h in [p.h1, p.h2] {
                let bit = (h >> shift) as usize;
                if !f.get(bit) {
                    f.set(bit);
                    have += 1;
                    if have == self.params.k {
                        return f;
                    }
                }
            }
        }
        for bit in 0..w.bits() {
            if have == self.params.k {
                break;
            }
            if !f.get(bit) {
                f.set(bit);
                have += 1;
            }
        }
        f
    }
}

/// The mask of `node_id` under `params` (builds a hasher: use a
/// [`MaskDeriver`] for many).
pub fn node_mask(node_id: u64, params: &FilterParams) -> Filter {
    MaskDeriver::new(*params).mask(node_id)
}

/// The filter of a packet that entered empty and went through `node_ids`
/// in order, each applying the hop rule (a node that alarms leaves it as it
/// is, which is what ORing would do too).
pub fn filter_after_hops(node_ids: &[u64], params: &FilterParams) -> Filter {
    let d = MaskDeriver::new(*params);
    let mut f = Filter::empty(params.width);
    for &id in node_ids {
        f.check_and_update(&d.mask(id));
    }
    f
}

/// Inserts into the IP packet at `l3_offset` of `frame` the option carrying
/// [`filter_after_hops`]`(node_ids, params)` (for synthetic traffic: a
/// packet that already went through those nodes). See [`icarus::insert`].
pub fn insert_after_hops(
    frame: &mut Vec<u8>,
    l3_offset: usize,
    node_ids: &[u64],
    params: &FilterParams,
) -> Result<Location, IcarusError> {
    icarus::insert(frame, l3_offset, &filter_after_hops(node_ids, params))
}

/// Binomial coefficients `C(n, r)` for `n <= max` as `f64` (exact up to
/// 2^53, relative error below 1e-15 beyond).
fn binomials(max: usize) -> Vec<Vec<f64>> {
    let mut t = vec![vec![0.0f64; max + 1]; max + 1];
    for n in 0..=max {
        t[n][0] = 1.0;
        for r in 1..=n {
            t[n][r] = t[n - 1][r - 1] + if r < n { t[n - 1][r] } else { 0.0 };
        }
    }
    t
}

/// The exact probability of a false alarm on a loop-free path through
/// `nodes` distinct nodes, with an `m`-bit filter and `k`-bit masks (see the
/// module docs for the definition and the Markov chain).
///
/// ```
/// use dataplane::stage::icarus::false_alarm_probability;
/// let p = false_alarm_probability(128, 6, 10);
/// assert!((p - 0.00306).abs() < 0.000005);
/// ```
///
/// # Panics
/// If `k` is 0 or larger than `m`.
pub fn false_alarm_probability(m: usize, k: usize, nodes: usize) -> f64 {
    assert!(k >= 1 && k <= m, "need 1 <= k <= m, got k = {k}, m = {m}");
    let c = binomials(m);
    let total = c[m][k];
    let mut dist = vec![0.0f64; m + 1];
    dist[0] = 1.0;
    let mut alarm = 0.0;
    for _ in 0..nodes {
        let mut next = vec![0.0f64; m + 1];
        for (set, &p) in dist.iter().enumerate() {
            if p == 0.0 {
                continue;
            }
            if set >= k {
                alarm += p * c[set][k] / total;
            }
            for j in 1..=k.min(m - set) {
                if k - j <= set {
                    next[set + j] += p * c[m - set][j] * c[set][k - j] / total;
                }
            }
        }
        dist = next;
    }
    alarm
}

/// The k in `1..=MAX_K` that minimises [`false_alarm_probability`]`(m, k, nodes)`.
pub fn optimal_k(m: usize, nodes: usize) -> usize {
    let mut best = (f64::INFINITY, 1);
    for k in 1..=MAX_K.min(m) {
        let p = false_alarm_probability(m, k, nodes);
        if p < best.0 {
            best = (p, k);
        }
    }
    best.1
}

/// What to do with a packet on a loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LoopAction {
    /// Count and drop (the default).
    #[default]
    Drop,
    /// Count and forward.
    Forward,
}

/// One node's icarus settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcarusConfig {
    /// This node's id (its mask comes from it).
    pub node_id: u64,
    /// Width, k and domain seed.
    pub params: FilterParams,
    /// Drop (default) or forward packets on a loop.
    pub on_loop: LoopAction,
    /// Ports (bit i = port i) whose arriving packets get the option when
    /// they lack it (edge ingress).
    pub insert_on_ingress: u64,
    /// Ports (bit i = port i) whose departing packets lose the option (edge egress).
    pub strip_on_egress: u64,
}

impl IcarusConfig {
    /// A core node (no edge ports) with the default parameters.
    pub fn new(node_id: u64) -> Self {
        IcarusConfig {
            node_id,
            params: FilterParams::default(),
            on_loop: LoopAction::Drop,
            insert_on_ingress: 0,
            strip_on_egress: 0,
        }
    }

    /// Inserts on ingress at `port` (`< 64`; others ignored).
    pub fn insert_on(mut self, port: u8) -> Self {
        self.insert_on_ingress |= 1u64.checked_shl(u32::from(port)).unwrap_or(0);
        self
    }

    /// Strips on egress at `port` (`< 64`; others ignored).
    pub fn strip_on(mut self, port: u8) -> Self {
        self.strip_on_egress |= 1u64.checked_shl(u32::from(port)).unwrap_or(0);
        self
    }
}

/// Icarus counters (merge per-worker shards with [`merge`](Self::merge)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct IcarusCounters {
    /// Packets whose filter already held every bit of the mask.
    pub loops_detected: u64,
    /// Hops that ORed the mask in.
    pub marked_hops: u64,
    /// Options inserted on ingress.
    pub inserted: u64,
    /// Options stripped on egress.
    pub stripped: u64,
    /// Packets that should have got the option but had no room for it.
    pub no_room: u64,
    /// Packets without the option, passed untouched.
    pub passed_without_option: u64,
    /// Packets whose header or icarus option is malformed or cut short,
    /// passed untouched.
    pub bad_option: u64,
    /// Packets whose filter is not m bits wide, passed untouched.
    pub width_mismatch: u64,
    /// Packets that should have got the option but cannot (IPv6 jumbograms),
    /// passed untouched.
    pub unsupported: u64,
}

impl IcarusCounters {
    /// Adds another set.
    pub fn merge(&mut self, o: &IcarusCounters) {
        let add = |a: &mut u64, b: u64| *a = a.saturating_add(b);
        add(&mut self.loops_detected, o.loops_detected);
        add(&mut self.marked_hops, o.marked_hops);
        add(&mut self.inserted, o.inserted);
        add(&mut self.stripped, o.stripped);
        add(&mut self.no_room, o.no_room);
        add(&mut self.passed_without_option, o.passed_without_option);
        add(&mut self.bad_option, o.bad_option);
        add(&mut self.width_mismatch, o.width_mismatch);
        add(&mut self.unsupported, o.unsupported);
    }

    /// Packets that went through the hop rule or were passed: the sum of
    /// the exclusive counters (everything but `inserted` and `stripped`).
    pub fn seen(&self) -> u64 {
        [
            self.loops_detected,
            self.marked_hops,
            self.passed_without_option,
            self.no_room,
            self.bad_option,
            self.width_mismatch,
            self.unsupported,
        ]
        .iter()
        .fold(0u64, |a, &b| a.saturating_add(b))
    }
}

/// The result of one packet's hop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The mask was ORed in.
    Marked,
    /// Every bit was set: on a loop.
    Loop,
    /// No option (and none inserted): passed untouched.
    NoOption,
    /// Insertion wanted, no room: passed untouched.
    NoRoom,
    /// Insertion wanted, IPv6 jumbogram: passed untouched.
    Unsupported,
    /// Malformed header or option: passed untouched.
    BadOption,
    /// The filter is not as wide as this node's mask: passed untouched.
    WidthMismatch,
}

/// One node's icarus state: its mask, settings and counters. Stands alone
/// (frames in, outcomes out); [`IcarusStage`] plugs it into the pipeline.
#[derive(Debug, Clone)]
pub struct Icarus {
    config: IcarusConfig,
    mask: Filter,
    empty: Filter,
    /// An empty filter after this node's hop, and that hop's outcome.
    fresh: (Filter, Outcome),
    counters: IcarusCounters,
}

impl Icarus {
    /// A node with `config`; the mask is derived here, once.
    pub fn new(config: IcarusConfig) -> Self {
        let mask = node_mask(config.node_id, &config.params);
        let empty = Filter::empty(config.params.width);
        let mut fresh = empty;
        let hop = match fresh.check_and_update(&mask) {
            Hop::Marked => Outcome::Marked,
            Hop::Loop => Outcome::Loop,
        };
        Icarus {
            config,
            mask,
            empty,
            fresh: (fresh, hop),
            counters: IcarusCounters::default(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &IcarusConfig {
        &self.config
    }

    /// This node's mask.
    pub fn mask(&self) -> &Filter {
        &self.mask
    }

    /// The filter an option inserted at this node's edge carries on: an
    /// empty filter after this node's hop (its mask).
    pub fn inserted_filter(&self) -> &Filter {
        &self.fresh.0
    }

    /// The counters so far.
    pub fn counters(&self) -> &IcarusCounters {
        &self.counters
    }

    /// Whether a packet with this outcome is to be dropped.
    #[inline]
    pub fn drops(&self, outcome: Outcome) -> bool {
        outcome == Outcome::Loop && self.config.on_loop == LoopAction::Drop
    }

    #[inline(always)]
    fn count(&mut self, o: Outcome) -> Outcome {
        let c = &mut self.counters;
        let slot = match o {
            Outcome::Marked => &mut c.marked_hops,
            Outcome::Loop => &mut c.loops_detected,
            Outcome::NoOption => &mut c.passed_without_option,
            Outcome::NoRoom => &mut c.no_room,
            Outcome::Unsupported => &mut c.unsupported,
            Outcome::BadOption => &mut c.bad_option,
            Outcome::WidthMismatch => &mut c.width_mismatch,
        };
        *slot = slot.wrapping_add(1);
        o
    }

    /// The hop rule without counting: the canonical placement first
    /// ([`icarus::check_and_update_canonical`], a few comparisons and one
    /// AND-compare and OR per word), then the general find.
    #[inline(always)]
    fn apply(&self, frame: &mut [u8], l3_offset: usize) -> Outcome {
        match icarus::check_and_update_canonical(frame, l3_offset, &self.mask) {
            Some(Hop::Marked) => return Outcome::Marked,
            Some(Hop::Loop) => return Outcome::Loop,
            None => {}
        }
        self.apply_general(frame, l3_offset)
    }

    /// The hop rule for any placement: find the option, then check and
    /// update it.
    #[inline(never)]
    fn apply_general(&self, frame: &mut [u8], l3_offset: usize) -> Outcome {
        match icarus::find(frame, l3_offset) {
            Ok(Some(loc)) => match icarus::check_and_update(frame, &loc, &self.mask) {
                Ok(Hop::Marked) => Outcome::Marked,
                Ok(Hop::Loop) => Outcome::Loop,
                Err(IcarusError::WidthMismatch) => Outcome::WidthMismatch,
                Err(_) => Outcome::BadOption,
            },
            Ok(None) => Outcome::NoOption,
            Err(_) => Outcome::BadOption,
        }
    }

    /// One hop on the IP packet at `l3_offset` of `frame` (no insertion):
    /// check-and-update when it carries the option, counted.
    #[inline]
    pub fn hop(&mut self, frame: &mut [u8], l3_offset: usize) -> Outcome {
        let o = self.apply(frame, l3_offset);
        self.count(o)
    }

    /// [`hop`](Self::hop) over a batch: `out[i]` is the outcome of
    /// `frames[i]` with its IP header at `l3_offsets[i]`.
    ///
    /// The width is dispatched once per batch, the mask converted to wire
    /// order once ([`WireMask`]), and the two common outcomes are counted
    /// in registers and added to the counters at the end; the rest take
    /// [`hop`](Self::hop)'s general path and are counted as they come.
    ///
    /// # Panics
    /// If `l3_offsets` or `out` is shorter than `frames`.
    pub fn check_and_update_batch<B: AsMut<[u8]>>(
        &mut self,
        frames: &mut [B],
        l3_offsets: &[usize],
        out: &mut [Outcome],
    ) {
        let n = frames.len();
        assert!(
            l3_offsets.len() >= n && out.len() >= n,
            "check_and_update_batch: {n} frames, {} offsets, {} outputs",
            l3_offsets.len(),
            out.len()
        );
        match self.mask.width() {
            FilterWidth::M64 => self.batch::<1, B>(frames, l3_offsets, out),
            FilterWidth::M128 => self.batch::<2, B>(frames, l3_offsets, out),
            FilterWidth::M256 => self.batch::<4, B>(frames, l3_offsets, out),
        }
    }

    /// [`check_and_update_batch`](Self::check_and_update_batch) for a
    /// `W`-word mask.
    #[inline(always)]
    fn batch<const W: usize, B: AsMut<[u8]>>(
        &mut self,
        frames: &mut [B],
        l3_offsets: &[usize],
        out: &mut [Outcome],
    ) {
        let mask = WireMask::<W>::of(&self.mask);
        let (mut marked, mut loops) = (0u64, 0u64);
        for ((f, &l3), o) in frames.iter_mut().zip(l3_offsets).zip(out.iter_mut()) {
            let f = f.as_mut();
            *o = match mask.check_and_update_canonical(f, l3) {
                Some(Hop::Marked) => {
                    marked += 1;
                    Outcome::Marked
                }
                Some(Hop::Loop) => {
                    loops += 1;
                    Outcome::Loop
                }
                None => {
                    let o = self.apply_general(f, l3);
                    self.count(o)
                }
            };
        }
        let c = &mut self.counters;
        c.marked_hops = c.marked_hops.wrapping_add(marked);
        c.loops_detected = c.loops_detected.wrapping_add(loops);
    }

    /// A packet arriving on `port`: inserts an empty filter first when the
    /// packet lacks the option and `port` is an insertion edge, then
    /// applies the hop rule. Counted.
    pub fn ingress(&mut self, frame: &mut Vec<u8>, l3_offset: usize, port: u8) -> Outcome {
        if self.inserts_on(port) {
            match icarus::insert(frame, l3_offset, &self.empty) {
                Ok(_) => self.counters.inserted = self.counters.inserted.wrapping_add(1),
                Err(e) => {
                    if let Some(o) = self.refusal(e) {
                        return o;
                    }
                }
            }
        }
        self.hop(frame, l3_offset)
    }

    /// Whether `port` is an insertion edge.
    #[inline]
    fn inserts_on(&self, port: u8) -> bool {
        port < 64 && self.config.insert_on_ingress & (1 << port) != 0
    }

    /// An insertion edge's refusal `e`, counted as its outcome; `None`
    /// when the packet already carries the option (the hop rule applies).
    fn refusal(&mut self, e: IcarusError) -> Option<Outcome> {
        let o = match e {
            IcarusError::AlreadyPresent => return None,
            IcarusError::NoRoom => Outcome::NoRoom,
            IcarusError::Jumbogram => Outcome::Unsupported,
            _ => Outcome::BadOption,
        };
        Some(self.count(o))
    }

    /// [`ingress`](Self::ingress) with the insertion deferred: the frame is
    /// changed only by the hop rule on an option it already carries. On an
    /// insertion edge, a packet without the option that would take one is
    /// counted as inserted and as hopped with [`inserted_filter`]
    /// (`marked_hops`); the second value is then the bytes the option will
    /// add, 0 otherwise. Counted as `ingress` counts.
    ///
    /// [`inserted_filter`]: Self::inserted_filter
    pub fn ingress_deferred(
        &mut self,
        frame: &mut [u8],
        l3_offset: usize,
        port: u8,
    ) -> (Outcome, u8) {
        if self.inserts_on(port) {
            match icarus::check_insert(frame, l3_offset, self.config.params.width) {
                Ok((_, n)) => return self.deferred_insert(n),
                Err(e) => {
                    if let Some(o) = self.refusal(e) {
                        return (o, 0);
                    }
                }
            }
        }
        (self.hop(frame, l3_offset), 0)
    }

    /// A deferred insertion of `n` bytes that [`icarus::check_insert`]
    /// (or [`plain_insert`](Self::plain_insert)) allowed: counted as
    /// inserted and hopped with [`inserted_filter`](Self::inserted_filter).
    #[inline]
    fn deferred_insert(&mut self, n: usize) -> (Outcome, u8) {
        self.counters.inserted = self.counters.inserted.wrapping_add(1);
        // At most 40 bytes (8 + a 256-bit filter).
        (self.count(self.fresh.1), u8::try_from(n).unwrap_or(u8::MAX))
    }

    /// [`ingress_deferred`](Self::ingress_deferred) on an insertion edge
    /// for a packet whose parse found a header that cannot hold the option
    /// (`parsed.ip_header_len` 20 for IPv4, 40 for IPv6): decided from the
    /// parse, without reading the frame again. `None` when the parse alone
    /// cannot tell (not such a header, or the option might not fit);
    /// `ingress_deferred` then decides. The same outcome as
    /// [`icarus::check_insert`] on such a header: IPv4 refuses only a total
    /// length over 65,535 with the option (a length 0, taken from the
    /// capture, is left so), IPv6 a payload length of 0 (a jumbogram's) or
    /// over 65,535 with the option.
    #[inline]
    pub fn plain_insert(&mut self, parsed: &Parsed) -> Option<(Outcome, u8)> {
        let w = self.config.params.width;
        let n = match parsed.ip_version? {
            IpVersion::V4 if parsed.ip_header_len == IPV4_HEADER => {
                let n = w.ipv4_block_len();
                let room = parsed.ip_len_from_capture || parsed.ip_total_len + n <= 65_535;
                room.then_some(n)?
            }
            IpVersion::V6
                if parsed.ip_header_len == IPV6_HEADER
                    && !parsed.jumbo
                    && parsed.protocol != IpProtocol::HopByHop =>
            {
                let n = w.ipv6_block_len();
                let pl = parsed.ip_total_len.checked_sub(IPV6_HEADER)?;
                (pl != 0 && pl + n <= 65_535).then_some(n)?
            }
            _ => return None,
        };
        Some(self.deferred_insert(n))
    }

    /// A packet leaving through `port`: strips the option when `port` is a
    /// stripping edge. Returns whether the option was removed or
    /// neutralised (counted in `stripped`).
    pub fn egress(&mut self, frame: &mut Vec<u8>, l3_offset: usize, port: u8) -> bool {
        if port >= 64 || self.config.strip_on_egress & (1 << port) == 0 {
            return false;
        }
        match icarus::strip(frame, l3_offset) {
            Ok(Stripped::Removed(_) | Stripped::Neutralised) => {
                self.counters.stripped = self.counters.stripped.wrapping_add(1);
                true
            }
            Ok(Stripped::Absent) | Err(_) => false,
        }
    }
}

/// The stage: on every live IP packet of a batch, the edge insertion when
/// it arrived on an insertion edge, deferred ([`Icarus::ingress_deferred`]:
/// the frame is left as it is and [`Packet::icarus_pending`] set, see the
/// module docs), then the hop rule, in place; packets on a loop are
/// dropped with [`DropReason::Loop`] under [`LoopAction::Drop`]. The
/// egress stage ([`crate::stage::egress`]) inserts the option into the
/// copies that keep it and strips it from the copies leaving a stripping
/// edge (a [`Pipeline`](crate::pipeline::Pipeline) of single stages,
/// having no egress stage, inserts nothing).
///
/// [`Packet::icarus_pending`]: crate::packet::Packet::icarus_pending
#[derive(Debug, Clone)]
pub struct IcarusStage {
    core: Icarus,
}

impl IcarusStage {
    /// A stage for `config`.
    pub fn new(config: IcarusConfig) -> Self {
        IcarusStage {
            core: Icarus::new(config),
        }
    }

    /// Runs one batch (see the type's docs).
    pub fn process(&mut self, batch: &mut Batch) {
        let mut bare = 0u64;
        for p in batch.packets_mut() {
            if !p.is_live() {
                continue;
            }
            let Some(q) = p.parsed.as_ref() else {
                continue;
            };
            // A header with no options (IPv4) or no extension headers
            // (IPv6) carries no option: most packets, told from the parse.
            // The family is a select, not a branch: in mixed traffic it
            // changes at random from packet to packet.
            let Some(version) = q.ip_version else {
                continue;
            };
            let bare_len = core::hint::select_unpredictable(
                version == IpVersion::V6,
                IPV6_HEADER,
                IPV4_HEADER,
            );
            let l3 = q.l3_offset;
            let plain = q.ip_header_len == bare_len;
            let port = p.ingress;
            let o = if self.core.inserts_on(port) {
                let (o, grow) = match self.core.plain_insert(q) {
                    Some(d) => d,
                    None => self.core.ingress_deferred(p.data_mut(), l3, port),
                };
                p.icarus_pending = grow;
                o
            } else if plain {
                bare += 1;
                continue;
            } else {
                self.core.hop(p.data_mut(), l3)
            };
            if self.core.drops(o) {
                p.drop_for(DropReason::Loop);
            }
        }
        let c = &mut self.core.counters.passed_without_option;
        *c = c.wrapping_add(bare);
    }

    /// The node state and counters.
    pub fn core(&self) -> &Icarus {
        &self.core
    }

    /// The counters.
    pub fn counters(&self) -> &IcarusCounters {
        self.core.counters()
    }
}

impl Stage for IcarusStage {
    fn name(&self) -> &'static str {
        "icarus"
    }

    fn process(&mut self, batch: &mut Batch, _now: Timestamp) {
        IcarusStage::process(self, batch);
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_probabilities() {
        let pct = |m, k, h| 100.0 * false_alarm_probability(m, k, h);
        assert!((pct(128, 6, 10) - 0.306).abs() < 0.0005);
        assert!((pct(64, 4, 10) - 8.70).abs() < 0.005);
        assert!((pct(256, 8, 20) - 0.503).abs() < 0.0005);
        assert_eq!(false_alarm_probability(128, 6, 1), 0.0);
    }

    #[test]
    fn default_k_is_the_minimiser() {
        for w in FilterWidth::ALL {
            assert_eq!(optimal_k(w.bits(), 10), default_k(w), "m = {}", w.bits());
        }
        assert_eq!(default_k(FilterWidth::default()), DEFAULT_K);
    }

    #[test]
    fn masks_have_exactly_k_bits_and_are_stable() {
        for w in FilterWidth::ALL {
            for k in [1, 4, 10, MAX_K] {
                let d = MaskDeriver::new(FilterParams::new(w, k).unwrap());
                for id in 0..200u64 {
                    let m = d.mask(id.wrapping_mul(0x9e37_79b9_7f4a_7c15));
                    assert_eq!(m.count_ones() as usize, k);
                    assert_eq!(m, d.mask(id.wrapping_mul(0x9e37_79b9_7f4a_7c15)));
                }
            }
        }
        let p = FilterParams::default();
        assert_ne!(node_mask(1, &p), node_mask(2, &p));
        assert_ne!(node_mask(1, &p), node_mask(1, &p.with_seed(7)));
    }

    #[test]
    fn params_validation() {
        assert!(FilterParams::new(FilterWidth::M64, 0).is_err());
        assert!(FilterParams::new(FilterWidth::M64, MAX_K + 1).is_err());
        assert_eq!(
            FilterParams::from_bits(100, 4).unwrap_err(),
            ParamsError::BadWidth(100)
        );
        assert!(FilterParams::from_bits(256, 8).is_ok());
    }

    /// `plain_insert` decides from the parse exactly as `ingress_deferred`
    /// does from the frame, on IPv4 and IPv6 headers without options at
    /// every length where the option stops fitting, and says `None` where
    /// the frame is needed.
    #[test]
    fn plain_insert_agrees_with_check_insert() {
        let eth = |ethertype: [u8; 2]| {
            let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
            f.extend_from_slice(&ethertype);
            f
        };
        let mut decided = 0;
        for w in FilterWidth::ALL {
            let params = FilterParams::new(w, 4).unwrap();
            let (n4, n6) = (w.ipv4_block_len(), w.ipv6_block_len());
            let mut frames = Vec::new();
            for total in [
                0,
                20,
                64,
                1500,
                65_535 - n4 - 1,
                65_535 - n4,
                65_536 - n4,
                65_535,
            ] {
                let mut f = eth([0x08, 0x00]);
                let t = u16::try_from(total).unwrap();
                f.extend_from_slice(&[0x45, 0, t.to_be_bytes()[0], t.to_be_bytes()[1]]);
                f.extend_from_slice(&[0, 0, 0, 0, 64, 253, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
                f.resize(14 + 64, 0);
                frames.push(f);
            }
            for pl in [0, 1, 24, 65_535 - n6 - 1, 65_535 - n6, 65_536 - n6, 65_535] {
                let mut f = eth([0x86, 0xdd]);
                let p = u16::try_from(pl).unwrap().to_be_bytes();
                f.extend_from_slice(&[0x60, 0, 0, 0, p[0], p[1], 59, 64]);
                f.extend_from_slice(&[0xfd; 32]);
                f.resize(14 + 40 + 24, 0);
                frames.push(f);
            }
            for mut f in frames {
                let Ok(parsed) = crate::wire::parse(crate::wire::LinkType::Ethernet, &f) else {
                    continue;
                };
                let cfg = IcarusConfig {
                    params,
                    ..IcarusConfig::new(42)
                }
                .insert_on(0);
                let (mut fast, mut slow) = (Icarus::new(cfg), Icarus::new(cfg));
                let Some(got) = fast.plain_insert(&parsed) else {
                    continue;
                };
                let want = slow.ingress_deferred(&mut f, parsed.l3_offset, 0);
                assert_eq!(got, want, "{w:?} {parsed:?}");
                assert_eq!(fast.counters(), slow.counters(), "{w:?} {parsed:?}");
                decided += 1;
            }
        }
        // Per width: IPv4 totals 0, 20, 64, 1500 and the two that fit;
        // IPv6 payloads 1, 24 and the two that fit.
        assert_eq!(decided, 3 * (6 + 4));
    }
}
