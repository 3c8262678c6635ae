//! Stochastic Fair Blue (Feng, Kandlur, Saha, Shin, "Blue: A New Class of
//! Active Queue Management Algorithms", 1999) in front of an egress queue,
//! with Linux's `sch_sfb` as the reference for every rule and default.
//!
//! # The structure
//!
//! Two *bin sets*, each `L` levels of `N` bins (default 8 x 16, as in the
//! kernel). A bin is a virtual queue length `qlen` and a marking
//! probability `p_mark` in Q0.16 fixed point ([`SFB_MAX_PROB`] = 0xFFFF
//! means 1). Each set has its own keyed [`Hasher`]; a flow's key is hashed
//! once per set, and its `L` bins come from that one hash pair. One set is
//! *active*.
//!
//! # Bin indices: slices, not double hashing
//!
//! [`BinIndex::Slices`] (the default) cuts the 64-bit pair `h2:h1` into `L`
//! equal fields ([`field_width`]: `64 / L` bits), level `r` taking the low
//! `log2 N` bits of field `r` (8 x 16: the low nibble of each byte), as the
//! Linux kernel cuts its one 32-bit hash into eight 4-bit pieces: the
//! levels are independent, which is what SFB's analysis assumes. Either
//! way `L log2 N <= 64`: a flow's indices travel packed in one `u64` per
//! bin set, in the same fields.
//!
//! [`BinIndex::Partitioned`] uses the kernels' partitioned indices (row `r`:
//! `(h1 + r * (h2 | 1)) >> (32 - log2 N)`), one `partitioned` call per batch.
//! Measurement rejects it for SFB: with narrow rows the `L` indices are the
//! digitised line `floor(x + r y) mod N` (`x`, `y` being `h1` and the step
//! scaled to `[0, N)`), so two flows whose lines are close share every bin.
//! With 10 penalised flows in 8 x 16 bins, 0.61% of innocent flows were
//! misjudged against 0.26% for independent levels (the formula
//! `(1 - (1 - 1/N)^M)^L`); slices measure 0.26% (`tests/sfb.rs`,
//! `misjudged_fraction_matches_formula`). Wide count-min rows do not suffer
//! this, because the carries from 16+ low bits randomise each row.
//!
//! # An arrival ([`Sfb::enqueue`])
//!
//! 1. Queue at `limit` packets: drop (`queuedrop`). Nothing else changes.
//! 2. For each of the flow's bins in the active set: `qlen == 0` lowers
//!    `p_mark` by `decrement`, `qlen >= target` raises it by `increment`
//!    (saturating). Take the minimum `qlen` and minimum `p_mark` over levels.
//! 3. Minimum `qlen >= max`: drop (`bucketdrop`).
//! 4. Minimum `p_mark` = 1: the flow is unresponsive. It goes to the
//!    *penalty box*: one token bucket of `penalty_rate` packets per second and
//!    `penalty_burst` packets, shared by every penalised flow, admits it (not
//!    marked) or drops it (`penaltydrop`).
//! 5. Otherwise, with probability `p = p_mark / 65536` (a 16-bit draw below
//!    `p_mark`): when `p > 1/2` the packet is dropped with probability
//!    `2p - 1` whatever its ECN field (`earlydrop`); else an ECN-capable
//!    packet is marked CE (`marked`) and any other packet dropped
//!    (`earlydrop`). So at `p = 0.75` ECN-capable packets are 50% dropped
//!    and 25% marked, others 75% dropped.
//! 6. The caller enqueues the packet; only if that succeeds are the flow's
//!    bin counts raised ([`Sfb::commit`]); if the queue refuses it,
//!    `childdrop` counts it. The bins the packet was counted in travel with
//!    it as an [`SfbTag`] and are lowered on dequeue ([`Sfb::release`]), so
//!    a swap of hash keys in between never unbalances a count. (The fused
//!    path below raises them during step 2 and lowers them again on a
//!    drop: the same counts at every step.)
//!
//! Probability updates happen for every arrival that passes step 1, even
//! those dropped later, as in the kernel.
//!
//! # Rehash and double buffering ([`Sfb::tick`])
//!
//! Every `rehash` the sets swap roles: the standby set becomes active and
//! the old active set is re-seeded. New keys are derived from a base seed
//! and a generation counter ([`SfbConfig::seed`]), so a replay reproduces
//! them. During the last `db` before a swap the standby set is *warmed*, with
//! the kernel's exact rule: only packets already judged unresponsive (step 4)
//! are also hashed into the standby set, have its bins' probabilities
//! updated, and (once enqueued) are counted in its bins, so that an
//! unresponsive flow keeps its penalty across the swap. Responsive flows
//! start the new set from whatever their bins hold.
//!
//! # Where this goes beyond the kernel
//!
//! * **Penalty bucket.** The kernel refills its penalty bucket only when it
//!   is empty, computing whole tokens from the time since the last refill and
//!   resetting that time even when no whole token accrued. A flow arriving
//!   faster than `penalty_rate` therefore never lets a whole token accrue and
//!   gets little more than the initial burst (about 22 packets in 10 s at
//!   100 pps with rate 10 and burst 20). Here the credit is kept exactly in
//!   units of 10^-9 token, so the penalty box admits `penalty_rate * t +
//!   penalty_burst` packets (about 120 in the same case).
//! * **Re-seeded bins forget their probabilities.** The kernel re-seeds the
//!   old set's key at a swap but keeps its `p_mark` values, which then apply
//!   to whichever flows the new key maps there, up to a rehash interval
//!   later. The point of rehashing is to give innocent flows that collided
//!   with an unresponsive one a fresh draw, so here the re-seeded set's
//!   probabilities are reset to 0. Its `qlen` values are kept: packets
//!   still queued carry tags into them and lower them as they leave.
//! * **No hash value 0 special case.** The kernel stores hash 0 to mean "not
//!   hashed into this set" and bumps a real 0 to 1; a tag here carries an
//!   explicit set mask.
//! * **Counters are `u64`** (the kernel's are `u32` and wrap).
//!
//! # Defaults
//!
//! The kernel's built-in ones (`sfb_default_ops`, used when no options are
//! given): rehash 600 s, db 60 s, max 25, target 20, increment
//! `(0xFFFF + 500) / 1000 = 66` (0.1%), decrement `(0xFFFF + 3000) / 6000 =
//! 11` (0.017%), penalty rate 10 pps, burst 20. The kernel's `limit` default
//! is the device's `tx_queue_len`, whose usual value is 1000; that is the
//! default here. Note that `tc qdisc add ... sfb` without options sends its
//! own defaults (increment 33, decrement 3), not the kernel's.
//!
//! Blue's rule makes `target` an absolute per-bin packet count and lowers
//! `p_mark` only at an *empty* bin: a smooth constant-rate flow that keeps a
//! few packets queued freezes its bins' `p_mark` below 1 and keeps about
//! `target` packets queued, so it is held near `target / sojourn` and the
//! penalty box (which needs `p_mark` = 1) stays empty unless the flow
//! overwhelms its bins. How the kernel's 8 x 16 bins and `target` 20 fare
//! against one such flow among AIMD flows, and the settings the
//! `traffic-gen scenario sfb` evaluation uses instead, are in that
//! scenario's module docs.
//!
//! There is no child qdisc: the child is the [`EgressQueue`] (a shaped
//! FIFO); `childdrop` counts the packets SFB admitted and the queue refused
//! (only possible when the queue's own limit is below SFB's).
//!
//! # Batches and the pipeline
//!
//! [`KeyBatch`] hashes a batch of flow keys with one `hash_batch` call per
//! bin set in use; [`SfbQueue`] pairs an [`Sfb`] with
//! its [`EgressQueue`]; [`SfbStage`] is the thin pipeline [`Stage`] over one
//! egress port. The rehash clock is advanced once per batch, at the batch's
//! `now`.
//!
//! # The fused path
//!
//! In the kernel's shape (8 x 16) with `limit < 2^16 - 1`, an
//! [`SfbQueue`] runs each arrival through one kernel
//! ([`kernels::sfb::Kernel::update_raise`], scalar, AVX2 or NEON): the
//! eight bins' probabilities are updated and their counts raised in one
//! pass, and the counts are lowered again if the packet is then dropped
//! (most are enqueued). A bin is one 32-bit word (`qlen` low, `p_mark`
//! high), always read and written whole; the set's bins are fixed arrays.
//! A key's bins become an offset word (byte `r` = slot of level `r`) with
//! two bit operations, the slices being one level per byte; the packet's
//! tag, kept in its egress slot, holds that word's bytes, and a departure
//! lowers its eight counts reading them in place. The decisions, counters
//! and bins equal the general path's, and [`SfbQueue::offer_batch`] equals
//! the per-packet calls (unit test `fused_batched_and_general_paths_agree`,
//! through swaps, double buffering and every drop reason).
//!
//! # Speed (issue #5)
//!
//! `sfb/enqueue-dequeue/avx2` (`cargo run --release -p bench --bin report
//! -- --only sfb`): 19.0 ns per packet against a target of 20 (median of
//! three full report runs: 18.97, 18.90, 19.82; 18.4 with `--only sfb`),
//! from 34.9 two sessions ago; the scalar kernel path 30.2. The workspace
//! aligns hot loops to 64 bytes (`.cargo/config.toml`), which is worth
//! 0.5 ns here and keeps unrelated edits from moving the figures. Each step was timed with
//! `bench/examples/sfb_cg.rs ab` against the previous build, interleaved
//! (medians of 15 passes, repeated; 2-core AMD EPYC VM), and counted with
//! callgrind (instructions per packet, batch hashing included):
//!
//! | step | instr/packet | ns/packet |
//! |---|---:|---:|
//! | start (SSE2 update vectorised by LLVM, 16-bit bin fields) | 577 | 34.8 |
//! | bins as whole 32-bit words; AVX2 update kernel | - | 32.3 |
//! | egress counters without saturation; one over-credit formula | 477 | 31.5 |
//! | tags hold offset words; one offset spread per packet | 447 | 30.8 |
//! | one SplitMix64 output per draw, branch-free step 5, departure time kept ready | - | 29.3 |
//! | backlog as `bytes_in - bytes_out`; tag words built in registers | - | 28.6 |
//! | fused kernel: counts raised with the update, lowered on a drop | 434 | 27.4 |
//! | backlogged departures from the length's cached split (no division) | 418 | 25.4 |
//! | kernel steps precomputed; cheaper key access in the loop | 388 | 24.3 |
//! | egress FIFO a power-of-two ring of `Copy` slots holding the tags too | 374 | 22.9 |
//! | key selected, not indexed; penalty box given the standby word, not the key; counters laid out against vector pairing; tag bytes read in place on departure | 366 | 22.7 |
//! | batch loop compiled with AVX2 (`Kernel::run`), the kernel inlined | 354 | 22.7 |
//! | slices one level per byte (offset word = mask and or); coins from a 64-bit multiplicative generator | 334 | 21.6 |
//! | whole keys in `KeyBatch`; step vectors loaded, not broadcast; departure inlined | 320 | 20.8 |
//! | backlogged wait from one subtraction; bucket room cached per length | 310 | 20.3 |
//! | fused path a compile-time parameter | 293 | 19.8 |
//! | kernel-shape bins as fixed arrays (no length check) | 286 | 19.5 |
//! | arrivals as an iterator (no index bounds checks) | 279 | 18.9 |
//! | hot loops aligned to 64 bytes (workspace build flag) | 279 | 18.4 |
//!
//! Three of the early steps were stalls rather than instructions: a 16-bit
//! count store followed by a 32-bit load of the same bin, an enqueue's
//! 16-byte load of two counters of which a dequeue had just written one 8
//! bytes wide, and a tag array written by index and read back whole all
//! miss store-to-load forwarding; and the coin refill branch (every fourth
//! draw) and the three branches of step 5 were mispredicted about 0.7
//! times per packet (cachegrind's branch simulator: 153k to 65k
//! mispredictions per 131k packets). A fourth stall came with the batch
//! API: the decision's `Result` rebuilt through a `?` was stored byte-wise
//! and read back wide (4 ns), so `offer` matches it instead. At the end the
//! loop runs about 6 instructions per cycle, so instructions are the cost:
//! about 0.05 ns each.
//!
//! The slices and the coins changed which bins a flow gets and which
//! packets are marked, so the scenario was re-run (`traffic-gen` module
//! docs and README). Tried and not kept: the queue's head, length and due
//! time copied into locals for a batch (the compiler spilled them: 8 more
//! instructions); each packet's departure computed at enqueue (24 ns
//! against 22.6: a wider slot, the departure no longer inlined); step 5
//! as one threshold chosen by ECN capability (a branch on a random bit; as
//! a select, no gain); the kernel taking its slots as bytes from memory
//! (LLVM merges the byte loads back into one); the kernel as a constant
//! passed through `Kernel::run` (same instruction count); the whole loop
//! with AVX2 while the closure was not `inline(always)` (the loop stayed
//! out of line and the departure with it). Earlier sessions' variants are
//! in the history.

use core::fmt;
use std::any::Any;

use kernels::index::Partitioned;
use kernels::sfb::{self as sfb_kernel, Kernel};
use kernels::{Backend, BackendError, HashPair, Hasher, splitmix64};
use serde::Deserialize;

use crate::clock::Timestamp;
use crate::flow::FlowKey;
use crate::pipeline::{Batch, DropReason, Stage, Verdict};
use crate::wire::set_ce;

use super::egress::{Departure, EgressConfig, EgressQueue};

/// Probability 1 in Q0.16 (65535/65536, as in the kernel).
pub const SFB_MAX_PROB: u16 = 0xFFFF;

/// The most levels (`L`).
pub const MAX_LEVELS: usize = 16;

/// The largest `log2 N`. Besides, `L log2 N <= 64`: a flow's bin indices
/// are packed in one `u64` per set.
pub const MAX_LOG2_BINS: u32 = 16;

/// Nanoseconds per millisecond.
const NS_PER_MS: u64 = 1_000_000;

/// Penalty-bucket credit units per token.
const TOKEN: u64 = 1_000_000_000;

/// How a flow's hash pair becomes its `L` bin indices (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BinIndex {
    /// Independent bit fields of the pair `h2:h1`.
    #[default]
    Slices,
    /// The kernels' partitioned (double-hashing) indices; levels correlate.
    Partitioned,
}

/// SFB settings. Deserialises from TOML/JSON with every field optional
/// (missing ones take the defaults, which are the kernel's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SfbConfig {
    /// Levels `L` (1..=16).
    pub levels: usize,
    /// log2 of the bins per level `N` (0..=16, and `levels * log2_bins <= 64`).
    pub log2_bins: u32,
    /// How bins are derived from the hash pair.
    pub index: BinIndex,
    /// Interval between hash-key swaps, ms; 0 never swaps.
    pub rehash_ms: u64,
    /// Double-buffering (warm-up) time before each swap, ms; at most `rehash_ms`.
    pub db_ms: u64,
    /// Hard limit on the queue, packets.
    pub limit: usize,
    /// Minimum bin count at which a packet is dropped (`bucketdrop`).
    pub max: u16,
    /// Bin count from which arrivals raise the bin's probability.
    pub target: u16,
    /// Probability increase per arrival, Q0.16 (66 = 0.1%).
    pub increment: u16,
    /// Probability decrease per arrival at an empty bin, Q0.16 (11 = 0.017%).
    pub decrement: u16,
    /// Penalty box rate, packets per second (0 drops every penalised packet).
    pub penalty_rate: u32,
    /// Penalty box burst, packets (0 drops every penalised packet).
    pub penalty_burst: u32,
    /// Base seed of the hash keys and the random draws; `None` draws one
    /// from the operating system (not reproducible).
    pub seed: Option<u64>,
    /// How many penalised flows [`SfbStats`] lists (the most recent ones).
    pub penalty_flows: usize,
    /// A listed flow leaves the list after this long without a penalised
    /// packet, ms.
    pub penalty_idle_ms: u64,
}

impl Default for SfbConfig {
    fn default() -> Self {
        SfbConfig {
            levels: 8,
            log2_bins: 4,
            index: BinIndex::Slices,
            rehash_ms: 600_000,
            db_ms: 60_000,
            limit: 1000,
            max: 25,
            target: 20,
            increment: ((SFB_MAX_PROB as u32 + 500) / 1000) as u16,
            decrement: ((SFB_MAX_PROB as u32 + 3000) / 6000) as u16,
            penalty_rate: 10,
            penalty_burst: 20,
            seed: None,
            penalty_flows: 16,
            penalty_idle_ms: 1000,
        }
    }
}

/// A setting SFB cannot run with: the key and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("sfb.{key}: {reason}")]
pub struct SfbConfigError {
    /// The offending key.
    pub key: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

impl SfbConfig {
    /// A probability as Q0.16, rounded as `tc` does (`p * 0xFFFF + 0.5`);
    /// `p` is clamped to `0..=1`.
    pub fn prob(p: f64) -> u16 {
        (p.clamp(0.0, 1.0) * f64::from(SFB_MAX_PROB) + 0.5) as u16
    }

    /// Bins per level.
    pub fn bins(&self) -> usize {
        1 << self.log2_bins
    }

    /// Checks every key.
    pub fn validate(&self) -> Result<(), SfbConfigError> {
        let err = |key, reason: String| Err(SfbConfigError { key, reason });
        if !(1..=MAX_LEVELS).contains(&self.levels) {
            return err(
                "levels",
                format!("{} is outside 1..={MAX_LEVELS}", self.levels),
            );
        }
        if self.log2_bins > MAX_LOG2_BINS {
            return err(
                "log2_bins",
                format!("{} is above {MAX_LOG2_BINS}", self.log2_bins),
            );
        }
        if self.levels as u32 * self.log2_bins > 64 {
            return err(
                "log2_bins",
                format!(
                    "levels x log2_bins must fit 64 bits, got {} x {}",
                    self.levels, self.log2_bins
                ),
            );
        }
        if self.rehash_ms > 0 && self.db_ms > self.rehash_ms {
            return err(
                "db_ms",
                format!(
                    "{} exceeds rehash_ms ({}): warm-up must fit in the interval",
                    self.db_ms, self.rehash_ms
                ),
            );
        }
        if self.limit == 0 {
            return err("limit", "must be at least 1 packet".into());
        }
        Ok(())
    }
}

impl fmt::Display for SfbConfig {
    /// Like `tc qdisc show` prints an sfb qdisc's options.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = |v: u16| f64::from(v) / f64::from(SFB_MAX_PROB);
        write!(
            f,
            "limit {} max {} target {}\n  increment {:.5} decrement {:.5} penalty rate {} burst {} ({}ms {}ms)",
            self.limit,
            self.max,
            self.target,
            p(self.increment),
            p(self.decrement),
            self.penalty_rate,
            self.penalty_burst,
            self.rehash_ms,
            self.db_ms
        )
    }
}

/// One bin: a virtual queue length and a marking probability (Q0.16).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Bin {
    /// Packets queued that hash here.
    pub qlen: u16,
    /// Marking probability, Q0.16.
    pub p_mark: u16,
}

/// A flow's bins: for each bin set whose hash was computed, its bin indices
/// packed in a `u64` (level `r` in the low `log2 N` bits of field `r`, see
/// [`field_width`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SfbKey {
    packed: [u64; 2],
    /// Bit `s` set: `packed[s]` is valid. A full word: a narrower field,
    /// written alone and read back with its neighbours when the key is
    /// copied, stalls store-to-load forwarding on the hot path.
    sets: u64,
}

impl SfbKey {
    /// Whether the key holds bins of set `set` (0 or 1).
    #[inline]
    pub fn has_set(&self, set: usize) -> bool {
        self.sets & (1 << set) != 0
    }

    /// The packed bin indices of set `set` (meaningful only when
    /// [`has_set`](Self::has_set)).
    #[inline]
    pub fn packed(&self, set: usize) -> u64 {
        // A select, not an index: indexing would keep the key in memory.
        if set & 1 == 0 {
            self.packed[0]
        } else {
            self.packed[1]
        }
    }

    /// Level `r`'s bin in set `set` for `levels` levels of `2^log2` bins
    /// (the low `log2` bits of field `r`, see [`field_width`]).
    #[inline]
    pub fn bin(&self, set: usize, r: usize, levels: usize, log2: u32) -> u32 {
        let mask = (1u64 << log2) - 1;
        let shift = r as u32 * field_width(levels);
        (self.packed(set).checked_shr(shift).unwrap_or(0) & mask) as u32
    }
}

/// Where a queued packet was counted: carried with it from enqueue to
/// dequeue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SfbTag(SfbKey);

impl SfbTag {
    /// The bin sets the packet is counted in (bit `s` for set `s`).
    #[inline]
    pub fn sets(&self) -> u8 {
        self.0.sets as u8
    }
}

/// Why SFB refused a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SfbDrop {
    /// The queue was at `limit`.
    Queue,
    /// The flow's least-full bin was at `max`.
    Bucket,
    /// Penalty box: unresponsive flow over its rate.
    Penalty,
    /// Probabilistic drop (a non-ECN packet, or `p > 1/2`).
    Early,
}

impl SfbDrop {
    /// The pipeline's reason.
    pub fn reason(self) -> DropReason {
        match self {
            SfbDrop::Queue => DropReason::QueueFull,
            SfbDrop::Bucket => DropReason::SfbBucket,
            SfbDrop::Penalty => DropReason::SfbPenalty,
            SfbDrop::Early => DropReason::SfbEarly,
        }
    }
}

/// SFB's decision on an arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Enqueue it (marked CE if `mark`); then [`Sfb::commit`] the tag if the
    /// queue took it, [`Sfb::child_drop`] if not.
    Enqueue {
        /// Set ECN CE.
        mark: bool,
        /// The bins to count it in.
        tag: SfbTag,
    },
    /// Drop it.
    Drop(SfbDrop),
}

/// What [`Sfb::decide`] admitted: mark or not, and the sets to count in.
#[derive(Debug, Clone, Copy)]
struct Decision {
    mark: bool,
    sets: u8,
    /// The standby set's index word when `sets` includes it.
    standby: u64,
}

/// SFB's event counters (`tc -s qdisc` shows these).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SfbCounters {
    /// Probabilistic drops.
    pub earlydrop: u64,
    /// Penalty-box drops.
    pub penaltydrop: u64,
    /// Drops at a full bin.
    pub bucketdrop: u64,
    /// Drops at the queue limit.
    pub queuedrop: u64,
    /// Packets admitted by SFB and refused by the queue.
    pub childdrop: u64,
    /// Packets marked CE.
    pub marked: u64,
}

/// A flow in the penalty box.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PenalisedFlow {
    /// The flow.
    pub flow: FlowKey,
    /// Its first penalised packet (since it was listed).
    pub since: Timestamp,
    /// Its latest penalised packet.
    pub last: Timestamp,
    /// Packets the penalty bucket admitted.
    pub admitted: u64,
    /// Packets the penalty bucket dropped.
    pub dropped: u64,
}

/// A snapshot of SFB's state as `tc -s qdisc show` reports it, plus the
/// flows in the penalty box. `Display` prints it like `tc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SfbStats {
    /// Event counters.
    pub counters: SfbCounters,
    /// Largest bin count in the active set.
    pub maxqlen: u16,
    /// Largest probability in the active set, Q0.16.
    pub maxprob: u16,
    /// Mean probability over the active set, Q0.16 (integer mean, as the kernel).
    pub avgprob: u16,
    /// Flows recently penalised, most recent first.
    pub penalised: Vec<PenalisedFlow>,
}

impl fmt::Display for SfbStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.counters;
        let p = |v: u16| f64::from(v) / f64::from(SFB_MAX_PROB);
        writeln!(
            f,
            "  earlydrop {} penaltydrop {} bucketdrop {} queuedrop {} childdrop {} marked {}",
            c.earlydrop, c.penaltydrop, c.bucketdrop, c.queuedrop, c.childdrop, c.marked
        )?;
        write!(
            f,
            "  maxqlen {} maxprob {:.5} avgprob {:.5}",
            self.maxqlen,
            p(self.maxprob),
            p(self.avgprob)
        )?;
        if !self.penalised.is_empty() {
            write!(f, "\n  penalty box {} flows", self.penalised.len())?;
            for e in &self.penalised {
                write!(
                    f,
                    "\n    {} admitted {} dropped {} since {}",
                    e.flow, e.admitted, e.dropped, e.since
                )?;
            }
        }
        Ok(())
    }
}

/// A multiplicative congruential generator modulo 2^64 (Lehmer) with a
/// multiplier of good spectral figure (Steele and Vigna, "Computationally
/// easy, spectrally good multipliers for congruential pseudorandom number
/// generators", 2022): one multiply per draw, whose top 16 bits are the
/// coin (the high bits of such a generator are its good ones; the state is
/// odd, period 2^62). Seedable, so a replay draws the same coins. One
/// output per draw: sharing an output among draws needed a refill branch
/// that the predictor missed on about a quarter of packets. (SplitMix64,
/// used before, cost three multiplies' worth of instructions more per
/// packet.)
#[derive(Debug, Clone)]
struct Coins {
    state: u64,
}

impl Coins {
    fn new(seed: u64) -> Self {
        let mut s = seed;
        Coins {
            state: splitmix64(&mut s) | 1,
        }
    }

    #[inline]
    fn u16(&mut self) -> u16 {
        self.state = self.state.wrapping_mul(0xD134_2543_DE82_EF95);
        (self.state >> 48) as u16
    }
}

/// The hash seed of key generation `g` under base seed `base`.
fn derive_seed(base: u64, generation: u64) -> u64 {
    let mut s = base ^ generation.wrapping_mul(0xD6E8_FEB8_6659_FD93);
    splitmix64(&mut s)
}

/// The penalty box's token bucket with exact fractional credit.
#[derive(Debug, Clone)]
struct PenaltyBucket {
    rate: u64,
    cap: u64,
    /// Credit in units of 10^-9 token.
    credit: u64,
    at: Option<Timestamp>,
}

impl PenaltyBucket {
    fn new(rate: u32, burst: u32) -> Self {
        let cap = u64::from(burst) * TOKEN;
        PenaltyBucket {
            rate: u64::from(rate),
            cap,
            credit: cap,
            at: None,
        }
    }

    fn admit(&mut self, now: Timestamp) -> bool {
        if self.rate == 0 || self.cap == 0 {
            return false;
        }
        let at = *self.at.get_or_insert(now);
        if now > at {
            let gained = now.nanos_since(at).saturating_mul(self.rate);
            self.credit = self.credit.saturating_add(gained).min(self.cap);
            self.at = Some(now);
        }
        if self.credit >= TOKEN {
            self.credit -= TOKEN;
            true
        } else {
            false
        }
    }
}

/// Row `r`'s index of `pair` in a partitioned layout of `2^log2` entries:
/// the formula of [`kernels::index`], bit for bit.
#[inline]
pub fn row_index(pair: HashPair, r: usize, log2: u32) -> u32 {
    let v = pair.h1.wrapping_add((r as u32).wrapping_mul(pair.h2 | 1));
    v.checked_shr(32 - log2).unwrap_or(0)
}

/// The pair as one 64-bit word `h2:h1`: with [`BinIndex::Slices`], the
/// packed bin indices themselves.
#[inline]
pub fn slices(pair: HashPair) -> u64 {
    (u64::from(pair.h2) << 32) | u64::from(pair.h1)
}

/// The bits of the packed word given to each of `levels` levels
/// (`64 / levels`, at least `log2 N` since `levels * log2 N <= 64`): level
/// `r`'s index is the low `log2 N` bits of bits `r * width ..`. Spread
/// evenly, eight levels take one byte each, and the kernel's offset word
/// ([`sfb_kernel::offsets`]) is then two bit operations away.
#[inline]
pub const fn field_width(levels: usize) -> u32 {
    64 / if levels == 0 { 1 } else { levels as u32 }
}

/// Level `r`'s bin of `pair` when bins are [`BinIndex::Slices`] of
/// `levels` levels: the low `log2` bits of field `r` of `h2:h1` (see
/// [`field_width`]).
#[inline]
pub fn slice_index(pair: HashPair, r: usize, levels: usize, log2: u32) -> u32 {
    let mask = (1u64 << log2) - 1;
    let shift = r as u32 * field_width(levels);
    (slices(pair).checked_shr(shift).unwrap_or(0) & mask) as u32
}

/// Stochastic Fair Blue: the bins, the hash keys, the penalty box and the
/// counters of one queue. See the module docs for the algorithm.
#[derive(Debug, Clone)]
pub struct Sfb {
    cfg: SfbConfig,
    levels: usize,
    n: usize,
    log2: u32,
    /// [`field_width`] of `levels`.
    width: u32,
    layout: Partitioned,
    /// Per set, each bin as one word: `qlen` in bits 0..16, `p_mark` in
    /// bits 16..32. Every access reads or writes the whole word, so a load
    /// after a recent store to the same bin is forwarded from the store
    /// buffer (a 32-bit load of a bin whose count was just written as 16
    /// bits stalls until the store commits). Empty in the kernel's shape,
    /// whose bins are `kbins`.
    bins: [Vec<u32>; 2],
    /// The kernel's shape's bins as its fixed arrays (so that the fused
    /// path indexes them without a length check); unused in other shapes.
    kbins: [Box<[u32; sfb_kernel::SLOTS]>; 2],
    /// `levels` and `log2_bins` are the kernel's.
    kernel_shape: bool,
    /// An [`SfbQueue`] takes the fused path ([`sfb_kernel`]): the kernel's
    /// shape (8 x 16; the bins are then [`sfb_kernel::SLOTS`] words per
    /// set) and `limit < 2^16 - 1`, so that a count, which never exceeds
    /// the packets queued plus the arrival, stays below `u16::MAX`.
    fused: bool,
    /// The fused path's arrival kernel, on the hashers' backend.
    kernel: Kernel,
    /// `target` (at least 1: `qlen == 0` only decrements, as the Linux
    /// kernel's `else if`), `increment`, `decrement`, for every path.
    steps: sfb_kernel::Steps,
    hashers: [Hasher; 2],
    /// The hash backend forced by [`Sfb::on_backend`], kept across swaps.
    backend: Option<Backend>,
    active: usize,
    double_buffering: bool,
    rehash_time: Option<Timestamp>,
    base_seed: u64,
    generation: u64,
    coins: Coins,
    penalty: PenaltyBucket,
    counters: SfbCounters,
    penalised: Vec<PenalisedFlow>,
}

impl Sfb {
    /// SFB with `cfg`; an error names a bad key.
    pub fn new(cfg: SfbConfig) -> Result<Self, SfbConfigError> {
        cfg.validate()?;
        let base_seed = cfg.seed.unwrap_or_else(os_seed);
        let n = cfg.bins();
        let kernel_shape =
            cfg.levels == sfb_kernel::LEVELS && cfg.log2_bins == sfb_kernel::LOG2_BINS;
        let size = if kernel_shape { 0 } else { cfg.levels * n };
        let hashers = [
            Hasher::with_seed(derive_seed(base_seed, 0)),
            Hasher::with_seed(derive_seed(base_seed, 1)),
        ];
        // A hasher's backend is one this CPU has (its invariant).
        let kernel = Kernel::new(hashers[0].backend()).unwrap_or_else(|_| Kernel::scalar());
        Ok(Sfb {
            cfg,
            levels: cfg.levels,
            n,
            log2: cfg.log2_bins,
            width: field_width(cfg.levels),
            layout: Partitioned::new(cfg.levels, cfg.log2_bins),
            bins: [vec![0; size], vec![0; size]],
            kbins: [
                Box::new([0; sfb_kernel::SLOTS]),
                Box::new([0; sfb_kernel::SLOTS]),
            ],
            kernel_shape,
            fused: kernel_shape && cfg.limit < usize::from(u16::MAX),
            kernel,
            steps: sfb_kernel::Steps::new(cfg.target, cfg.increment, cfg.decrement),
            hashers,
            backend: None,
            active: 0,
            double_buffering: false,
            rehash_time: None,
            base_seed,
            generation: 1,
            coins: Coins::new(derive_seed(base_seed, u64::MAX)),
            penalty: PenaltyBucket::new(cfg.penalty_rate, cfg.penalty_burst),
            counters: SfbCounters::default(),
            penalised: Vec::with_capacity(cfg.penalty_flows),
        })
    }

    /// The same SFB hashing on `backend` (now and after every swap); an
    /// error if this CPU lacks it. Hashes do not depend on the backend.
    pub fn on_backend(mut self, backend: Backend) -> Result<Self, BackendError> {
        let backend = backend.require()?;
        for h in &mut self.hashers {
            *h = h.clone().on_backend(backend)?;
        }
        self.backend = Some(backend);
        self.kernel = Kernel::new(backend)?;
        Ok(self)
    }

    /// The settings.
    pub fn config(&self) -> &SfbConfig {
        &self.cfg
    }

    /// The active bin set (0 or 1).
    #[inline]
    pub fn active_set(&self) -> usize {
        self.active
    }

    /// Whether the standby set is being warmed (the last `db` before a swap).
    #[inline]
    pub fn double_buffering(&self) -> bool {
        self.double_buffering
    }

    /// The latest key generation drawn (sets start with generations 0 and
    /// 1; each swap draws the next).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The hasher of bin set `set`.
    #[inline]
    pub fn hasher(&self, set: usize) -> &Hasher {
        &self.hashers[set & 1]
    }

    /// The partitioned layout (`L` rows of `N` bins).
    #[inline]
    pub fn layout(&self) -> Partitioned {
        self.layout
    }

    /// The bin sets arrivals need hashes for now: the active one, and the
    /// standby one while double buffering (bit `s` for set `s`).
    #[inline]
    pub fn sets_in_use(&self) -> u8 {
        let a = 1u8 << self.active;
        if self.double_buffering {
            a | (1 << (self.active ^ 1))
        } else {
            a
        }
    }

    /// The bins of set `set`, level-major (`level * N + bin`).
    pub fn bins(&self, set: usize) -> Vec<Bin> {
        self.words(set).iter().map(|&w| unword(w)).collect()
    }

    /// The bin words of set `set` (see [`Sfb::bins`]'s field docs).
    fn words(&self, set: usize) -> &[u32] {
        if self.kernel_shape {
            &self.kbins[set & 1][..sfb_kernel::BINS]
        } else {
            &self.bins[set & 1]
        }
    }

    /// [`words`](Self::words), writable.
    fn words_mut(&mut self, set: usize) -> &mut [u32] {
        if self.kernel_shape {
            &mut self.kbins[set & 1][..sfb_kernel::BINS]
        } else {
            &mut self.bins[set & 1]
        }
    }

    /// The event counters.
    #[inline]
    pub fn counters(&self) -> &SfbCounters {
        &self.counters
    }

    /// Advances the rehash clock to `now`: swaps the sets when the interval
    /// has passed, starts double buffering in its last `db`. The first call
    /// starts the clock (and the penalty bucket, full). Call before hashing
    /// arrivals at `now` (hashes made before a swap are stale).
    pub fn tick(&mut self, now: Timestamp) {
        let start = *self.rehash_time.get_or_insert(now);
        if self.penalty.at.is_none() {
            self.penalty.at = Some(now);
        }
        let rehash = self.cfg.rehash_ms.saturating_mul(NS_PER_MS);
        if rehash == 0 {
            return;
        }
        let limit = start.add_nanos(rehash);
        if now > limit {
            self.swap();
            self.rehash_time = Some(now);
        } else if !self.double_buffering && self.cfg.db_ms > 0 {
            let db = self.cfg.db_ms.saturating_mul(NS_PER_MS);
            if now.as_nanos() > limit.as_nanos().saturating_sub(db) {
                self.double_buffering = true;
            }
        }
    }

    /// Swaps the sets now: the old active set gets the next key generation
    /// and its probabilities are cleared (see the module docs).
    pub fn swap(&mut self) {
        let old = self.active;
        self.generation += 1;
        let h = Hasher::with_seed(derive_seed(self.base_seed, self.generation));
        self.hashers[old] = match self.backend {
            // Available: `on_backend` checked it.
            Some(b) => h.clone().on_backend(b).unwrap_or(h),
            None => h,
        };
        for w in self.words_mut(old) {
            *w &= 0xFFFF;
        }
        self.active ^= 1;
        self.double_buffering = false;
    }

    /// The flow's bins for the sets in use, hashed one key at a time (the
    /// scalar path; [`KeyBatch`] is the batched one).
    pub fn key_one<const W: usize>(&self, words: &[u32; W]) -> SfbKey {
        let mut key = SfbKey {
            sets: u64::from(self.sets_in_use()),
            ..SfbKey::default()
        };
        for set in 0..2 {
            if key.has_set(set) {
                let pair = self.hashers[set].hash_one(words);
                key.packed[set] = match self.cfg.index {
                    BinIndex::Slices => slices(pair),
                    BinIndex::Partitioned => (0..self.levels).fold(0, |v, r| {
                        v | u64::from(row_index(pair, r, self.log2)) << (r as u32 * self.width)
                    }),
                };
            }
        }
        key
    }

    /// The active set's bins of `key` for the fused path: their offset
    /// word ([`sfb_kernel::offsets`]).
    #[inline(always)]
    fn offsets(&self, key: &SfbKey) -> u64 {
        sfb_kernel::offsets(key.packed(self.active))
    }

    /// Updates the probabilities of the bins `packed` names in `set`
    /// (branch-free); returns the minimum count and the minimum probability.
    /// Counts are left alone.
    #[inline(always)]
    fn update(&mut self, set: usize, packed: u64) -> (u16, u16) {
        if self.levels == 8 {
            self.update_levels::<8>(set, packed)
        } else {
            self.update_levels::<0>(set, packed)
        }
    }

    /// The fused arrival step on set `set`'s bins of offset word `offs`
    /// ([`Kernel::update_raise`]): probabilities updated and
    /// counts raised by one.
    #[inline(always)]
    fn update_raise(&mut self, set: usize, offs: u64) -> (u16, u16) {
        self.kernel
            .update_raise(&mut self.kbins[set & 1], offs, &self.steps)
    }

    /// Takes back [`update_raise`](Self::update_raise)'s raise (or a
    /// queued packet's count) in the sets of `sets`; `offs`: per set, the
    /// offset word's bytes (as a [`Queued`] tag keeps them).
    #[inline(always)]
    fn lower_fused(&mut self, sets: u8, offs: &[[u8; 8]; 2]) {
        for (set, o) in offs.iter().enumerate() {
            if sets & (1 << set) != 0 {
                sfb_kernel::lower_bytes(&mut self.kbins[set], o);
            }
        }
    }

    /// [`update`](Self::update) over `L` levels (`L == 0`: `self.levels`).
    #[inline(always)]
    fn update_levels<const L: usize>(&mut self, set: usize, packed: u64) -> (u16, u16) {
        let levels = if L == 0 { self.levels } else { L };
        let (n, b, mask) = (self.n, self.width, self.n as u64 - 1);
        let steps = self.steps;
        let bins = self.words_mut(set);
        let (mut minq, mut minp) = (u16::MAX, u16::MAX);
        for r in 0..levels {
            let i = r * n + ((packed >> (r as u32 * b)) & mask) as usize;
            let (q, p) = sfb_kernel::update_word(&mut bins[i], &steps);
            minq = minq.min(q);
            minp = minp.min(p);
        }
        (minq, minp)
    }

    /// The minimum count and probability of the key's bins in the active set,
    /// changing nothing.
    pub fn probe(&self, key: &SfbKey) -> (u16, u16) {
        let bins = self.words(self.active);
        (0..self.levels)
            .map(|r| {
                let i = key.bin(self.active, r, self.levels, self.log2);
                unword(bins[r * self.n + i as usize])
            })
            .fold((u16::MAX, u16::MAX), |(q, p), b| {
                (q.min(b.qlen), p.min(b.p_mark))
            })
    }

    /// Decides on an arrival (steps 1-5 of the module docs). `flow` names
    /// the flow for the penalty-box listing (optional); `queue_len` is the
    /// queue's length now. The key must have been made after the last
    /// [`tick`](Self::tick).
    #[inline]
    pub fn enqueue(
        &mut self,
        key: &SfbKey,
        flow: Option<&FlowKey>,
        ecn_capable: bool,
        queue_len: usize,
        now: Timestamp,
    ) -> Admit {
        match self.decide(key, None, flow, ecn_capable, queue_len, now) {
            Ok(d) => Admit::Enqueue {
                mark: d.mark,
                tag: SfbTag(SfbKey {
                    packed: key.packed,
                    sets: u64::from(d.sets),
                }),
            },
            Err(e) => Admit::Drop(e),
        }
    }

    /// [`enqueue`](Self::enqueue)'s decision without building the tag: the
    /// tag is `key`'s packed indices with the returned set mask.
    ///
    /// `fused`: the offset word of `key`'s active set, for the fused path
    /// of an [`SfbQueue`] (`self.fused`): the counts of every set updated
    /// are then raised with the probabilities, and lowered again here when
    /// the packet is dropped. `None`: counts are left to the caller.
    #[inline(always)]
    fn decide(
        &mut self,
        key: &SfbKey,
        fused: Option<u64>,
        flow: Option<&FlowKey>,
        ecn_capable: bool,
        queue_len: usize,
        now: Timestamp,
    ) -> Result<Decision, SfbDrop> {
        if queue_len >= self.cfg.limit {
            self.counters.queuedrop += 1;
            return Err(SfbDrop::Queue);
        }
        let a = self.active;
        debug_assert!(key.has_set(a), "SFB key made before a swap");
        let (minq, minp) = match fused {
            Some(offs) => self.update_raise(a, offs),
            None => self.update(a, key.packed(a)),
        };
        // `a` is 0 or 1.
        let sets = (a & 1) as u8 + 1;
        // Only the active set is in `sets`: its word in both places.
        let offs = [fused.unwrap_or(0); 2];
        if minq >= self.cfg.max {
            self.counters.bucketdrop += 1;
            if fused.is_some() {
                self.lower_fused(sets, &offs.map(u64::to_le_bytes));
            }
            return Err(SfbDrop::Bucket);
        }
        if minp == SFB_MAX_PROB {
            // The standby set's bins (`None` when the key has none), not
            // the key: a reference would keep the key in memory on the
            // common path too.
            let s = a ^ 1;
            let standby = key.has_set(s).then(|| key.packed(s));
            return self.penalise(standby, fused, flow, sets, now);
        }
        // Step 5 without branches but the one on its outcome: the draw is
        // random, so a branch per test would be mispredicted about as often
        // as it is taken.
        const HALF: u16 = SFB_MAX_PROB / 2;
        let r = self.coins.u16();
        let hit = r < minp;
        let over_half = u32::from(r) < u32::from(minp.saturating_sub(HALF)) * 2;
        let early = hit & (over_half | !ecn_capable);
        let mark = hit & !early;
        self.counters.marked += u64::from(mark);
        if early {
            self.counters.earlydrop += 1;
            if fused.is_some() {
                self.lower_fused(sets, &offs.map(u64::to_le_bytes));
            }
            return Err(SfbDrop::Early);
        }
        Ok(Decision {
            mark,
            sets,
            standby: 0,
        })
    }

    /// Step 4: the flow is unresponsive. `packed`: its bins in the standby
    /// set, if the key has them.
    #[inline(never)]
    fn penalise(
        &mut self,
        packed: Option<u64>,
        fused: Option<u64>,
        flow: Option<&FlowKey>,
        mut sets: u8,
        now: Timestamp,
    ) -> Result<Decision, SfbDrop> {
        let a = self.active;
        let s = a ^ 1;
        let mut standby = 0;
        if let (true, Some(p)) = (self.double_buffering, packed) {
            standby = p;
            if fused.is_some() {
                standby = sfb_kernel::offsets(standby);
                self.update_raise(s, standby);
            } else {
                self.update(s, standby);
            }
            sets |= 1 << s;
        }
        let admitted = self.penalty.admit(now);
        if let Some(f) = flow {
            self.note_penalised(f, admitted, now);
        }
        if !admitted {
            self.counters.penaltydrop += 1;
            if let Some(o) = fused {
                let mut offs = [standby; 2];
                offs[a & 1] = o;
                self.lower_fused(sets, &offs.map(u64::to_le_bytes));
            }
            return Err(SfbDrop::Penalty);
        }
        Ok(Decision {
            mark: false,
            sets,
            standby,
        })
    }

    /// The queue took the packet: count it in its bins.
    #[inline]
    pub fn commit(&mut self, tag: &SfbTag) {
        self.adjust(tag.sets(), tag.0.packed, true);
    }

    /// The queue refused a packet SFB admitted.
    #[inline]
    pub fn child_drop(&mut self) {
        self.counters.childdrop += 1;
    }

    /// The packet left the queue: uncount it.
    #[inline]
    pub fn release(&mut self, tag: &SfbTag) {
        self.adjust(tag.sets(), tag.0.packed, false);
    }

    /// Raises (`up`) or lowers by one, saturating, the counts of the bins
    /// `packed` names in the sets of `sets`.
    #[inline(always)]
    fn adjust(&mut self, sets: u8, packed: [u64; 2], up: bool) {
        for (set, &packed) in packed.iter().enumerate() {
            if sets & (1 << set) != 0 {
                self.adjust_any(set, packed, up);
            }
        }
    }

    /// [`adjust`](Self::adjust) of one set.
    #[inline(never)]
    fn adjust_any(&mut self, set: usize, packed: u64, up: bool) {
        let (n, b, mask) = (self.n, self.width, self.n as u64 - 1);
        let levels = self.levels;
        let bins = self.words_mut(set);
        let bin_of = |r: usize| r * n + ((packed >> (r as u32 * b)) & mask) as usize;
        for r in 0..levels {
            let w = &mut bins[bin_of(r)];
            let q = if up {
                (*w as u16).saturating_add(1)
            } else {
                (*w as u16).saturating_sub(1)
            };
            *w = (*w & !0xFFFF) | u32::from(q);
        }
    }

    #[cold]
    fn note_penalised(&mut self, flow: &FlowKey, admitted: bool, now: Timestamp) {
        if self.cfg.penalty_flows == 0 {
            return;
        }
        let (a, d) = if admitted { (1, 0) } else { (0, 1) };
        if let Some(e) = self.penalised.iter_mut().find(|e| e.flow == *flow) {
            e.last = now;
            e.admitted += a;
            e.dropped += d;
            return;
        }
        let fresh = PenalisedFlow {
            flow: *flow,
            since: now,
            last: now,
            admitted: a,
            dropped: d,
        };
        if self.penalised.len() < self.cfg.penalty_flows {
            self.penalised.push(fresh);
        } else if let Some(oldest) = self.penalised.iter_mut().min_by_key(|e| e.last) {
            *oldest = fresh;
        }
    }

    /// Sets every bin's probability in both sets to `p_mark` (experiments
    /// and tests: with `increment = decrement = 0` it then stays).
    pub fn force_probability(&mut self, p_mark: u16) {
        for set in 0..2 {
            for w in self.words_mut(set) {
                *w = (*w & 0xFFFF) | u32::from(p_mark) << 16;
            }
        }
    }

    /// Whether every bin count of both sets is 0.
    pub fn counts_are_zero(&self) -> bool {
        (0..2).all(|set| self.words(set).iter().all(|&w| w & 0xFFFF == 0))
    }

    /// The snapshot `tc -s qdisc` would show at `now`: counters, maximum
    /// count, maximum and mean probability of the active set, and the flows
    /// penalised within `penalty_idle_ms` of `now`.
    pub fn stats(&self, now: Timestamp) -> SfbStats {
        let bins: Vec<Bin> = self.words(self.active).iter().map(|&w| unword(w)).collect();
        let maxqlen = bins.iter().map(|b| b.qlen).max().unwrap_or(0);
        let maxprob = bins.iter().map(|b| b.p_mark).max().unwrap_or(0);
        let total: u64 = bins.iter().map(|b| u64::from(b.p_mark)).sum();
        let avgprob = (total / bins.len() as u64) as u16;
        let idle = self.cfg.penalty_idle_ms.saturating_mul(NS_PER_MS);
        let mut penalised: Vec<PenalisedFlow> = self
            .penalised
            .iter()
            .filter(|e| now.nanos_since(e.last) <= idle)
            .copied()
            .collect();
        penalised.sort_by_key(|e| core::cmp::Reverse(e.last));
        SfbStats {
            counters: self.counters,
            maxqlen,
            maxprob,
            avgprob,
            penalised,
        }
    }
}

/// A bin word's two halves.
#[inline(always)]
fn unword(w: u32) -> Bin {
    Bin {
        qlen: w as u16,
        p_mark: (w >> 16) as u16,
    }
}

/// 64 bits from the OS-seeded std hasher (SFB's unseeded default).
fn os_seed() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(0x5fb_u64)
}

/// Reusable buffers that turn a batch of flow keys into [`SfbKey`]s with one
/// `hash_batch` call per bin set in use (plus one `partitioned` call with
/// [`BinIndex::Partitioned`]).
#[derive(Debug, Clone, Default)]
pub struct KeyBatch {
    pairs: Vec<HashPair>,
    idx: Vec<u32>,
    /// The last batch's keys, whole (a key is then one indexed read).
    keys: Vec<SfbKey>,
}

impl KeyBatch {
    /// Empty buffers (they grow to the largest batch and stay).
    pub fn new() -> Self {
        KeyBatch::default()
    }

    /// Hashes `keys` for `sfb`'s sets in use.
    pub fn hash<const W: usize>(&mut self, sfb: &Sfb, keys: &[[u32; W]]) {
        let n = keys.len();
        let sets = sfb.sets_in_use();
        self.keys.clear();
        // A set not in use has no words: 0.
        self.keys.resize(
            n,
            SfbKey {
                packed: [0; 2],
                sets: u64::from(sets),
            },
        );
        if n == 0 {
            return;
        }
        self.pairs.resize(n, HashPair::default());
        for set in 0..2 {
            if sets & (1 << set) == 0 {
                continue;
            }
            let h = &sfb.hashers[set];
            h.hash_batch(keys, &mut self.pairs);
            match sfb.cfg.index {
                BinIndex::Slices => {
                    for (k, &p) in self.keys.iter_mut().zip(&self.pairs) {
                        k.packed[set] = slices(p);
                    }
                }
                BinIndex::Partitioned => {
                    self.idx.resize(sfb.levels * n, 0);
                    h.partitioned(&self.pairs, sfb.layout, &mut self.idx);
                    for (r, row) in self.idx.chunks_exact(n).enumerate() {
                        let shift = r as u32 * sfb.width;
                        for (k, &i) in self.keys.iter_mut().zip(row) {
                            k.packed[set] |= u64::from(i) << shift;
                        }
                    }
                }
            }
        }
    }

    /// Keys hashed by the last [`hash`](Self::hash).
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the last batch was empty.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The bins of key `i` of the last batch.
    ///
    /// # Panics
    /// If `i >= len()`.
    #[inline]
    pub fn key(&self, i: usize) -> SfbKey {
        self.keys[i]
    }

    /// The last batch's keys, in order.
    #[inline]
    pub fn keys(&self) -> &[SfbKey] {
        &self.keys
    }
}

/// How an admitted packet goes out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    /// As it came.
    Forward,
    /// With ECN CE set.
    Mark,
}

/// SFB in front of a shaped [`EgressQueue`]: one egress port's queue.
#[derive(Debug, Clone)]
pub struct SfbQueue<T> {
    sfb: Sfb,
    queue: EgressQueue<Queued<T>>,
}

/// An item in an [`SfbQueue`]'s FIFO with its tag: the sets it was counted
/// in and, per set, its bins (offset words on the fused path, packed
/// indices otherwise). One FIFO for both keeps one head and one length.
#[derive(Debug, Clone, Copy, Default)]
pub struct Queued<T> {
    item: T,
    /// Per set, the word's bytes (little-endian): on the fused path a
    /// departure reads its eight slots from here one byte each.
    words: [[u8; 8]; 2],
    sets: u8,
}

impl<T> Queued<T> {
    /// The words.
    #[inline(always)]
    fn words(&self) -> [u64; 2] {
        self.words.map(u64::from_le_bytes)
    }
}

impl<T: Copy + Default> SfbQueue<T> {
    /// SFB with `sfb`, draining at `egress`'s rate.
    pub fn new(sfb: SfbConfig, egress: EgressConfig) -> Result<Self, SfbConfigError> {
        Ok(SfbQueue {
            sfb: Sfb::new(sfb)?,
            queue: EgressQueue::new(egress),
        })
    }

    /// The SFB state.
    pub fn sfb(&self) -> &Sfb {
        &self.sfb
    }

    /// The SFB state, writable (tick it before hashing a batch).
    pub fn sfb_mut(&mut self) -> &mut Sfb {
        &mut self.sfb
    }

    /// The queue.
    pub fn queue(&self) -> &EgressQueue<Queued<T>> {
        &self.queue
    }

    /// Offers a packet of `len` bytes at `now`. Dequeue everything that
    /// left by `now` first ([`drain_until`](Self::drain_until)) so that the
    /// limit and the bin counts see the queue as it is at `now`; or use
    /// [`offer_batch`](Self::offer_batch), which does both for a batch.
    #[inline]
    pub fn enqueue(
        &mut self,
        key: &SfbKey,
        flow: Option<&FlowKey>,
        ecn_capable: bool,
        item: T,
        len: u32,
        now: Timestamp,
    ) -> Result<Enqueued, DropReason> {
        let arrival = Arrival {
            key: *key,
            ecn_capable,
            item,
            len,
            now,
        };
        if self.sfb.fused {
            offer::<T, true>(&mut self.sfb, &mut self.queue, &arrival, flow)
        } else {
            offer::<T, false>(&mut self.sfb, &mut self.queue, &arrival, flow)
        }
    }

    /// The head packet if the shaper released it by `now`.
    #[inline]
    pub fn dequeue(&mut self, now: Timestamp) -> Option<Departure<T>> {
        if self.sfb.fused {
            take::<T, true>(&mut self.sfb, &mut self.queue, now)
        } else {
            take::<T, false>(&mut self.sfb, &mut self.queue, now)
        }
    }

    /// Dequeues every packet released by `now`, handing each to `f`;
    /// returns how many.
    #[inline]
    pub fn drain_until(&mut self, now: Timestamp, mut f: impl FnMut(Departure<T>)) -> usize {
        let mut k = 0;
        while let Some(d) = self.dequeue(now) {
            f(d);
            k += 1;
        }
        k
    }

    /// A batch of arrivals in time order, each as
    /// [`drain_until`](Self::drain_until) its time (every departure to
    /// `departed`) and then [`enqueue`](Self::enqueue): `arrivals` yields
    /// each arrival and its flow (for the penalty-box listing),
    /// `verdict(k, ..)` receives the outcome of the `k`-th. Equal, packet
    /// for packet, to those calls; faster, because the loop is compiled
    /// for the kernel's backend, which inlines the kernel into it
    /// ([`kernels::sfb::Kernel::run`]), and the fused path is chosen once.
    #[inline]
    pub fn offer_batch(
        &mut self,
        arrivals: impl IntoIterator<Item = (Arrival<T>, Option<FlowKey>)>,
        mut verdict: impl FnMut(usize, Result<Enqueued, DropReason>),
        mut departed: impl FnMut(Departure<T>),
    ) {
        let kernel = self.sfb.kernel;
        kernel.run(
            #[inline(always)]
            || {
                let arrivals = arrivals.into_iter();
                if self.sfb.fused {
                    self.offer_each::<true>(arrivals, &mut verdict, &mut departed);
                } else {
                    self.offer_each::<false>(arrivals, &mut verdict, &mut departed);
                }
            },
        );
    }

    /// [`offer_batch`](Self::offer_batch)'s loop, on the fused path or not.
    #[inline(always)]
    fn offer_each<const FUSED: bool>(
        &mut self,
        arrivals: impl Iterator<Item = (Arrival<T>, Option<FlowKey>)>,
        verdict: &mut impl FnMut(usize, Result<Enqueued, DropReason>),
        departed: &mut impl FnMut(Departure<T>),
    ) {
        for (k, (a, flow)) in arrivals.enumerate() {
            while let Some(d) = take::<T, FUSED>(&mut self.sfb, &mut self.queue, a.now) {
                departed(d);
            }
            let v = offer::<T, FUSED>(&mut self.sfb, &mut self.queue, &a, flow.as_ref());
            verdict(k, v);
        }
    }
}

/// One arrival offered to an [`SfbQueue`] ([`SfbQueue::offer_batch`]).
#[derive(Debug, Clone, Copy)]
pub struct Arrival<T> {
    /// Its bins (from a [`KeyBatch`] made after the last [`Sfb::tick`]).
    pub key: SfbKey,
    /// ECT(0) or ECT(1): marked rather than dropped when `p <= 1/2`.
    pub ecn_capable: bool,
    /// What to queue.
    pub item: T,
    /// Its length in bytes.
    pub len: u32,
    /// Its time (at least the previous arrival's).
    pub now: Timestamp,
}

/// [`SfbQueue::enqueue`] on SFB and the queue's FIFO; `FUSED` is
/// `sfb.fused`, a constant so that each path is compiled without the other.
#[inline(always)]
fn offer<T: Copy + Default, const FUSED: bool>(
    sfb: &mut Sfb,
    queue: &mut EgressQueue<Queued<T>>,
    a: &Arrival<T>,
    flow: Option<&FlowKey>,
) -> Result<Enqueued, DropReason> {
    debug_assert_eq!(FUSED, sfb.fused);
    let set = sfb.active & 1;
    // The active set's bins: offsets on the fused path (whose kernel
    // raises the counts with the update), packed indices otherwise.
    let word = if FUSED {
        sfb.offsets(&a.key)
    } else {
        a.key.packed(set)
    };
    let offs = FUSED.then_some(word);
    let (mark, sets, standby) =
        match sfb.decide(&a.key, offs, flow, a.ecn_capable, queue.len(), a.now) {
            Ok(d) => (d.mark, d.sets, d.standby),
            Err(d) => return Err(d.reason()),
        };
    // Built in registers: an array written by index and read back whole
    // would miss store-to-load forwarding.
    let words = if set == 0 {
        [word, standby]
    } else {
        [standby, word]
    };
    let queued = Queued {
        item: a.item,
        words: words.map(u64::to_le_bytes),
        sets,
    };
    match queue.enqueue(queued, a.len, a.now) {
        Ok(()) => {
            if !FUSED {
                sfb.adjust(sets, words, true);
            }
            Ok(if mark {
                Enqueued::Mark
            } else {
                Enqueued::Forward
            })
        }
        Err(r) => {
            sfb.child_drop();
            if FUSED {
                sfb.lower_fused(sets, &queued.words);
            }
            Err(r)
        }
    }
}

/// [`SfbQueue::dequeue`] on SFB and the queue's FIFO (`FUSED` as in
/// [`offer`]).
#[inline(always)]
fn take<T: Copy + Default, const FUSED: bool>(
    sfb: &mut Sfb,
    queue: &mut EgressQueue<Queued<T>>,
    now: Timestamp,
) -> Option<Departure<T>> {
    debug_assert_eq!(FUSED, sfb.fused);
    let d = queue.dequeue_with(now, |q| {
        if FUSED {
            sfb.lower_fused(q.sets, &q.words);
        } else {
            sfb.adjust(q.sets, q.words(), false);
        }
    })?;
    Some(Departure {
        item: d.item.item,
        len: d.len,
        enqueued: d.enqueued,
        departed: d.departed,
    })
}

/// Settings of an [`SfbStage`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SfbStageConfig {
    /// The egress port this stage queues for.
    pub port: u8,
    /// SFB.
    pub sfb: SfbConfig,
    /// The port's queue and shaper.
    pub egress: EgressConfig,
    /// Keep every departure for [`SfbStage::take_departures`] (per-packet
    /// sojourn times); off, only the queue's aggregate counters are kept.
    pub record_departures: bool,
}

impl Default for SfbStageConfig {
    fn default() -> Self {
        SfbStageConfig {
            port: 1,
            sfb: SfbConfig::default(),
            egress: EgressConfig::default(),
            record_departures: false,
        }
    }
}

/// A packet of the batch that leaves by the port: its place in the batch
/// and its key's place in one family's [`KeyBatch`].
#[derive(Debug, Clone, Copy)]
struct Pending {
    packet: usize,
    wide: bool,
    j: usize,
}

/// The SFB keys of the packets of a batch that leave by one egress port,
/// hashed in one [`KeyBatch`] per address family present (IPv4 at four
/// words, IPv6 at ten; frames without a flow key share the all-zero key).
/// Reused across batches: [`gather`](Self::gather), then
/// [`hash`](Self::hash), then [`packet`](Self::packet) and
/// [`key`](Self::key) for each of the [`len`](Self::len) packets, in batch
/// order. Used by [`SfbStage`] and by the live router's egress queues.
#[derive(Debug, Clone, Default)]
pub struct PortKeys {
    k4: Vec<[u32; 4]>,
    k10: Vec<[u32; 10]>,
    b4: KeyBatch,
    b10: KeyBatch,
    pending: Vec<Pending>,
}

impl PortKeys {
    /// Empty buffers.
    pub fn new() -> Self {
        PortKeys::default()
    }

    /// Collects the packets of `batch` forwarded (or marked) to `port`,
    /// leaving out those that arrived on `port` when `skip_ingress`;
    /// returns how many.
    pub fn gather(&mut self, batch: &Batch, port: u8, skip_ingress: bool) -> usize {
        self.k4.clear();
        self.k10.clear();
        self.pending.clear();
        for (i, p) in batch.packets().iter().enumerate() {
            let ports = match p.verdict {
                Verdict::Forward(ps) | Verdict::Mark(ps) => ps,
                Verdict::Drop(_) => continue,
            };
            if !ports.contains(port) || (skip_ingress && p.ingress == port) {
                continue;
            }
            match p.parsed.and_then(|x| x.flow) {
                Some(FlowKey::V6(f)) => {
                    self.pending.push(Pending {
                        packet: i,
                        wide: true,
                        j: self.k10.len(),
                    });
                    self.k10.push(f.words10());
                }
                other => {
                    self.pending.push(Pending {
                        packet: i,
                        wide: false,
                        j: self.k4.len(),
                    });
                    self.k4.push(match other {
                        Some(FlowKey::V4(f)) => f.words4(),
                        _ => [0; 4],
                    });
                }
            }
        }
        self.pending.len()
    }

    /// Hashes the gathered keys with `sfb`'s bin sets (tick `sfb` first).
    pub fn hash(&mut self, sfb: &Sfb) {
        self.b4.hash(sfb, &self.k4);
        self.b10.hash(sfb, &self.k10);
    }

    /// Packets gathered.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether none was gathered.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// The batch index of gathered packet `k`.
    ///
    /// # Panics
    /// If `k >= len()`.
    pub fn packet(&self, k: usize) -> usize {
        self.pending[k].packet
    }

    /// The bins of gathered packet `k` (after [`hash`](Self::hash)).
    ///
    /// # Panics
    /// If `k >= len()`.
    pub fn key(&self, k: usize) -> SfbKey {
        let pd = self.pending[k];
        if pd.wide {
            self.b10.key(pd.j)
        } else {
            self.b4.key(pd.j)
        }
    }
}

/// The pipeline stage: SFB and the shaped queue of one egress port.
///
/// Per batch: the SFB clock is ticked at `now`; the live packets going out
/// of `port` are hashed in one [`KeyBatch`] per address family present
/// (IPv4 at four words, IPv6 at ten; frames without a flow key share the
/// all-zero key); then packet by packet, at the packet's time (its capture
/// time, kept between the previous packet's and `now`), the queue is
/// drained to that time and the packet offered. The verdict follows: a drop
/// removes `port` from the packet's ports (the packet is dropped when none
/// is left), a mark sets ECN CE in the frame and turns the verdict into
/// [`Verdict::Mark`]. Finally the queue is drained to `now`.
///
/// The frame itself is not held: the pipeline forwards it at once, and the
/// queue holds its length, flow and timing, so what the stage models is the
/// port's queueing delay and SFB's decisions (in replay, exactly).
#[derive(Debug)]
pub struct SfbStage {
    cfg: SfbStageConfig,
    queue: SfbQueue<Option<FlowKey>>,
    keys: PortKeys,
    last: Timestamp,
    departures: Vec<Departure<Option<FlowKey>>>,
    /// The batch's outcomes, in [`PortKeys`] order.
    verdicts: Vec<Result<Enqueued, DropReason>>,
}

impl SfbStage {
    /// A stage for `cfg.port`.
    pub fn new(cfg: SfbStageConfig) -> Result<Self, SfbConfigError> {
        Ok(SfbStage {
            cfg,
            queue: SfbQueue::new(cfg.sfb, cfg.egress)?,
            keys: PortKeys::new(),
            last: Timestamp::ZERO,
            departures: Vec::new(),
            verdicts: Vec::new(),
        })
    }

    /// The port's SFB queue.
    pub fn queue(&self) -> &SfbQueue<Option<FlowKey>> {
        &self.queue
    }

    /// SFB's snapshot at `now` (`tc -s qdisc` style when displayed).
    pub fn stats(&self, now: Timestamp) -> SfbStats {
        self.queue.sfb().stats(now)
    }

    /// Moves the recorded departures into `out` (with `record_departures`).
    pub fn take_departures(&mut self, out: &mut Vec<Departure<Option<FlowKey>>>) {
        out.append(&mut self.departures);
    }

    fn drain(&mut self, now: Timestamp) {
        let record = self.cfg.record_departures;
        let deps = &mut self.departures;
        self.queue.drain_until(now, |d| {
            if record {
                deps.push(d);
            }
        });
    }
}

impl Stage for SfbStage {
    fn name(&self) -> &'static str {
        "sfb"
    }

    fn process(&mut self, batch: &mut Batch, now: Timestamp) {
        let port = self.cfg.port;
        self.queue.sfb_mut().tick(now);
        if self.keys.gather(batch, port, false) == 0 {
            self.drain(now);
            return;
        }
        self.keys.hash(self.queue.sfb());
        let keys = &self.keys;
        let last = &mut self.last;
        let record = self.cfg.record_departures;
        let departures = &mut self.departures;
        let verdicts = &mut self.verdicts;
        verdicts.clear();
        let packets = batch.packets();
        self.queue.offer_batch(
            (0..keys.len()).map(|k| {
                let p = &packets[keys.packet(k)];
                let t = p.ts.min(now).max(*last);
                *last = t;
                let flow = p.parsed.and_then(|x| x.flow);
                let a = Arrival {
                    key: keys.key(k),
                    ecn_capable: p.parsed.is_some_and(|x| x.ecn.is_ect()),
                    item: flow,
                    len: p.orig_len,
                    now: t,
                };
                (a, flow)
            }),
            |_, v| verdicts.push(v),
            |d| {
                if record {
                    departures.push(d);
                }
            },
        );
        for (k, &res) in self.verdicts.iter().enumerate() {
            let p = &mut batch.packets_mut()[self.keys.packet(k)];
            match res {
                Ok(Enqueued::Forward) => {}
                Ok(Enqueued::Mark) => {
                    if let Some(parsed) = p.parsed {
                        set_ce(p.data_mut(), &parsed);
                    }
                    p.mark();
                }
                Err(reason) => p.drop_port(port, reason),
            }
        }
        self.drain(now);
    }

    /// Drains the queue completely (every packet at the time the shaper
    /// releases it), so the last sojourns are recorded and the bins empty.
    fn finish(&mut self, now: Timestamp) {
        let _ = now;
        self.drain(Timestamp::from_nanos(u64::MAX));
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// A deterministic workload for timing SFB enqueue+dequeue per packet,
/// batched: `packets` IPv4 flow keys drawn from `flows` flows, half of
/// them ECN-capable, 1000-byte packets arriving 10% faster than a 1 Gbit/s
/// queue drains them, so SFB marks and drops. Build it outside the timed
/// section; time [`BenchWorkload::run`].
#[derive(Debug, Clone)]
pub struct BenchWorkload {
    keys: Vec<[u32; 4]>,
    ecn: Vec<bool>,
    /// Arrival gap, ns.
    gap: u64,
}

/// Builds a [`BenchWorkload`].
pub fn bench_workload(packets: usize, flows: usize, seed: u64) -> BenchWorkload {
    let mut s = seed;
    let flows = flows.max(1) as u64;
    let flow_keys: Vec<[u32; 4]> = (0..flows)
        .map(|f| {
            let v = splitmix64(&mut s);
            [0x0a00_0000 | f as u32, v as u32, (v >> 32) as u32, 6]
        })
        .collect();
    let mut keys = Vec::with_capacity(packets);
    let mut ecn = Vec::with_capacity(packets);
    for _ in 0..packets {
        let f = splitmix64(&mut s) % flows;
        keys.push(flow_keys[f as usize]);
        ecn.push(f & 1 == 0);
    }
    // 1000 bytes at 1 Gbit/s take 8000 ns; arrive every 7272 ns.
    BenchWorkload {
        keys,
        ecn,
        gap: 7272,
    }
}

impl BenchWorkload {
    /// Packets in the workload.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the workload is empty.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// [`queue`](Self::queue) hashing on `backend`; an error if this CPU
    /// lacks it.
    pub fn queue_on(&self, backend: Backend) -> Result<SfbQueue<u32>, BackendError> {
        let q = self.queue();
        Ok(SfbQueue {
            sfb: q.sfb.on_backend(backend)?,
            queue: q.queue,
        })
    }

    /// A queue configured for the workload (seeded, 1 Gbit/s).
    pub fn queue(&self) -> SfbQueue<u32> {
        let sfb = SfbConfig {
            seed: Some(1),
            ..SfbConfig::default()
        };
        let egress = EgressConfig {
            rate_bps: 1_000_000_000,
            burst_bytes: 10_000,
            limit: 1000,
        };
        match SfbQueue::new(sfb, egress) {
            Ok(q) => q,
            Err(e) => unreachable!("default SFB config is valid: {e}"),
        }
    }

    /// Runs every packet through `q` in batches of `batch`, starting at
    /// `start` ns; returns a checksum (packets forwarded, marked and
    /// departed) and the time after the last arrival.
    pub fn run(&self, q: &mut SfbQueue<u32>, batch: usize, start: u64) -> (u64, u64) {
        let mut kb = KeyBatch::new();
        let mut t = start;
        let mut sum = 0u64;
        let mut departed = 0u64;
        let batch = batch.max(1);
        for (keys, ecn) in self.keys.chunks(batch).zip(self.ecn.chunks(batch)) {
            q.sfb_mut().tick(Timestamp::from_nanos(t));
            kb.hash(q.sfb(), keys);
            let (t0, gap, kb) = (t, self.gap, &kb);
            let arrivals = kb.keys().iter().zip(ecn).enumerate();
            q.offer_batch(
                arrivals.map(move |(i, (&key, &ecn_capable))| {
                    let a = Arrival {
                        key,
                        ecn_capable,
                        item: i as u32,
                        len: 1000,
                        now: Timestamp::from_nanos(t0 + i as u64 * gap),
                    };
                    (a, None)
                }),
                |_, v| match v {
                    Ok(Enqueued::Forward) => sum += 1 << 20,
                    Ok(Enqueued::Mark) => sum += 1 << 40,
                    Err(_) => {}
                },
                |_| departed += 1,
            );
            t += ecn.len() as u64 * self.gap;
        }
        sum += departed;
        (sum, t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_kernels() {
        let c = SfbConfig::default();
        assert_eq!(c.increment, 66);
        assert_eq!(c.decrement, 11);
        assert_eq!((c.max, c.target, c.limit), (25, 20, 1000));
        assert_eq!((c.rehash_ms, c.db_ms), (600_000, 60_000));
        assert_eq!((c.penalty_rate, c.penalty_burst), (10, 20));
        assert_eq!(SfbConfig::prob(0.001), 66);
        assert_eq!(
            c.to_string(),
            "limit 1000 max 25 target 20\n  increment 0.00101 decrement 0.00017 \
             penalty rate 10 burst 20 (600000ms 60000ms)"
        );
    }

    #[test]
    fn config_errors_name_the_key() {
        let bad = SfbConfig {
            levels: 0,
            ..SfbConfig::default()
        };
        assert_eq!(bad.validate().unwrap_err().key, "levels");
        let bad = SfbConfig {
            db_ms: 700_000,
            ..SfbConfig::default()
        };
        let e = bad.validate().unwrap_err();
        assert!(e.to_string().starts_with("sfb.db_ms: "), "{e}");
    }

    #[test]
    fn row_index_matches_the_kernels() {
        for log2 in [0, 1, 4, 8] {
            let layout = Partitioned::new(8, log2);
            let h = Hasher::with_seed(9);
            let keys: Vec<[u32; 4]> = (0..37u32).map(|i| [i, i * 7, 3, 6]).collect();
            let mut pairs = vec![HashPair::default(); keys.len()];
            h.hash_batch(&keys, &mut pairs);
            let mut out = vec![0u32; 8 * keys.len()];
            h.partitioned(&pairs, layout, &mut out);
            for (i, p) in pairs.iter().enumerate() {
                for r in 0..8 {
                    assert_eq!(out[r * keys.len() + i], row_index(*p, r, log2));
                }
            }
        }
    }

    #[test]
    fn key_batch_matches_key_one() {
        for index in [BinIndex::Slices, BinIndex::Partitioned] {
            let mut sfb = Sfb::new(SfbConfig {
                seed: Some(3),
                rehash_ms: 100,
                db_ms: 10,
                index,
                ..SfbConfig::default()
            })
            .unwrap();
            let keys: Vec<[u32; 4]> = (0..45u32).map(|i| [i, 1, 2, 17]).collect();
            let mut kb = KeyBatch::new();
            for t in [0u64, 95_000_000] {
                sfb.tick(Timestamp::from_nanos(t));
                kb.hash(&sfb, &keys);
                for (i, k) in keys.iter().enumerate() {
                    let key = kb.key(i);
                    assert_eq!(key, sfb.key_one(k));
                    assert!((0..8).all(|r| key.bin(0, r, 8, 4) < 16));
                }
            }
            assert!(sfb.double_buffering());
            assert_eq!(sfb.sets_in_use(), 0b11);
        }
    }

    #[test]
    fn slices_are_the_pair_bits() {
        let p = HashPair {
            h1: 0x7654_3210,
            h2: 0xfedc_ba98,
        };
        // Sixteen levels: one nibble each.
        let got: Vec<u32> = (0..16).map(|r| slice_index(p, r, 16, 4)).collect();
        assert_eq!(got, (0..16).collect::<Vec<u32>>());
        // Eight levels: the low bits of each byte.
        let got: Vec<u32> = (0..8).map(|r| slice_index(p, r, 8, 4)).collect();
        assert_eq!(got, [0, 2, 4, 6, 8, 0xa, 0xc, 0xe]);
        assert_eq!(slice_index(p, 0, 8, 8), 0x10);
        assert_eq!(slice_index(p, 7, 8, 8), 0xfe);
        assert_eq!(slice_index(p, 3, 8, 0), 0);
        // Two levels of 20 bits: bits 0.. and 32...
        assert_eq!(slice_index(p, 1, 2, 20), 0xcba98);
        let bad = SfbConfig {
            levels: 16,
            log2_bins: 5,
            ..SfbConfig::default()
        };
        assert_eq!(bad.validate().unwrap_err().key, "log2_bins");
    }

    #[test]
    fn stats_display_like_tc() {
        let sfb = Sfb::new(SfbConfig {
            seed: Some(1),
            ..SfbConfig::default()
        })
        .unwrap();
        let s = sfb.stats(Timestamp::ZERO).to_string();
        assert_eq!(
            s,
            "  earlydrop 0 penaltydrop 0 bucketdrop 0 queuedrop 0 childdrop 0 marked 0\n  \
             maxqlen 0 maxprob 0.00000 avgprob 0.00000"
        );
    }

    #[test]
    fn penalty_bucket_keeps_fractions() {
        let mut b = PenaltyBucket::new(10, 1);
        let mut admitted = 0;
        // One arrival per ms for 1 s: the initial token plus 10 per second.
        for ms in 0..1000u64 {
            admitted += u32::from(b.admit(Timestamp::from_nanos(ms * NS_PER_MS)));
        }
        assert_eq!(admitted, 1 + 9);
    }

    /// The fused path (offset words, counts raised by the kernel and taken
    /// back on a drop) decides every packet as the general path does and
    /// leaves the same bins, through swaps, double buffering, the penalty
    /// box, early drops and marks, bucket drops and child drops, on every
    /// backend's kernel.
    #[test]
    fn fused_batched_and_general_paths_agree() {
        let sfb = SfbConfig {
            seed: Some(7),
            rehash_ms: 40,
            db_ms: 15,
            limit: 200,
            increment: 1500,
            decrement: 40,
            target: 6,
            max: 12,
            ..SfbConfig::default()
        };
        // A queue shorter than SFB's limit: admitted packets are refused.
        let egress = EgressConfig {
            rate_bps: 40_000_000,
            burst_bytes: 3000,
            limit: 150,
        };
        for backend in Backend::available_list() {
            let mut fused = SfbQueue::<u32>::new(sfb, egress).unwrap();
            fused.sfb = fused.sfb.on_backend(backend).unwrap();
            let mut general = fused.clone();
            general.sfb.fused = false;
            // The fused path again, through `offer_batch`.
            let mut batched = fused.clone();
            assert!(fused.sfb.fused);
            let mut s = 99u64;
            let flows: Vec<[u32; 4]> = (0..300u32).map(|f| [f, 7, f * 31, 17]).collect();
            let mut kb = KeyBatch::new();
            let mut t = 0u64;
            let mut keys = Vec::new();
            for batch in 0..400 {
                t += 1_000_000;
                fused.sfb_mut().tick(Timestamp::from_nanos(t));
                general.sfb_mut().tick(Timestamp::from_nanos(t));
                keys.clear();
                for _ in 0..32 {
                    let r = splitmix64(&mut s);
                    // Three flows send half the packets: they reach p = 1.
                    let f = if r & 1 == 0 {
                        (r >> 8) % 3
                    } else {
                        (r >> 8) % 300
                    };
                    keys.push(flows[f as usize]);
                }
                kb.hash(fused.sfb(), &keys);
                let ecns: Vec<bool> = keys.iter().map(|_| splitmix64(&mut s) & 1 == 0).collect();
                // Arrivals spread over the batch at random gaps, so that
                // departures fall between them.
                let mut at = t;
                let times: Vec<u64> = (0..keys.len())
                    .map(|_| {
                        at += splitmix64(&mut s) % 30_000;
                        at
                    })
                    .collect();
                let now = |i: usize| Timestamp::from_nanos(times[i]);
                let (mut deps, mut verdicts) = (Vec::new(), Vec::new());
                for (i, &ecn) in ecns.iter().enumerate() {
                    let mut a = Vec::new();
                    let mut b = Vec::new();
                    fused.drain_until(now(i), |d| a.push(d.clone()));
                    general.drain_until(now(i), |d| b.push(d.item));
                    assert_eq!(a.iter().map(|d| d.item).collect::<Vec<_>>(), b);
                    deps.extend(a);
                    let key = kb.key(i);
                    let x = fused.enqueue(&key, None, ecn, i as u32, 1000, now(i));
                    let y = general.enqueue(&key, None, ecn, i as u32, 1000, now(i));
                    assert_eq!(x, y, "{backend:?} batch {batch} packet {i}");
                    verdicts.push((i, x));
                }
                let (mut bdeps, mut bverdicts) = (Vec::new(), Vec::new());
                batched.sfb_mut().tick(Timestamp::from_nanos(t));
                batched.offer_batch(
                    (0..keys.len()).map(|i| {
                        let a = Arrival {
                            key: kb.key(i),
                            ecn_capable: ecns[i],
                            item: i as u32,
                            len: 1000,
                            now: now(i),
                        };
                        (a, None)
                    }),
                    |i, v| bverdicts.push((i, v)),
                    |d| bdeps.push(d),
                );
                assert_eq!(bverdicts, verdicts, "{backend:?} batch {batch}");
                assert_eq!(bdeps, deps, "{backend:?} batch {batch}");
                assert_eq!(
                    fused.sfb.kbins, general.sfb.kbins,
                    "{backend:?} batch {batch}"
                );
                assert_eq!(batched.sfb.kbins, fused.sfb.kbins);
                assert_eq!(fused.sfb.counters, general.sfb.counters);
                assert_eq!(batched.sfb.counters, fused.sfb.counters);
                assert_eq!(batched.queue.stats(), fused.queue.stats());
            }
            let c = fused.sfb.counters;
            assert!(
                c.earlydrop > 0 && c.marked > 0 && c.penaltydrop > 0,
                "{c:?}"
            );
            assert!(c.bucketdrop > 0 && c.childdrop > 0, "{c:?}");
            assert!(fused.sfb.generation > 3, "swapped {}", fused.sfb.generation);
            let end = Timestamp::from_nanos(u64::MAX);
            fused.drain_until(end, |_| {});
            general.drain_until(end, |_| {});
            assert!(fused.sfb.counts_are_zero() && general.sfb.counts_are_zero());
        }
    }
}
