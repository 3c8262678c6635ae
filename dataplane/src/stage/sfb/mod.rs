//! Stochastic Fair Blue (Feng, Kandlur, Saha, Shin, "Blue: A New Class of
//! Active Queue Management Algorithms", 1999) in front of an egress queue,
//! with Linux's `sch_sfb` as the reference for every rule and default.
//!
//! # The structure
//!
//! Two *bin sets*, each `L` levels of `N` bins (default 8 x 16, as in the
//! kernel). A bin is a virtual queue length `qlen` and a marking
//! probability `p_mark` in Q0.16 fixed point ([`SFB_MAX_PROB`] = 0xFFFF
//! means 1). Each set has its own keyed [`Hasher`](kernels::Hasher); a
//! flow's key is hashed once per set, and its `L` bins come from that one
//! hash pair. One set is *active*.
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
//! # Two profiles
//!
//! `profile = "linux"` ([`SfbConfig::linux`]) is Linux's `sch_sfb` rule for
//! rule, as below. `profile = "fair"`, the default, adds a *fair-share
//! check* in front of Blue ([`FairRate`]: a count-min sketch of the flows'
//! arrival rates and the fair share computed from it; its module docs say
//! why and how) and changes these things:
//!
//! * an arrival whose flow sends above the fair share is refused with
//!   probability `1 - share / rate` (`ratedrop`), or marked CE instead when
//!   it is ECN-capable and under twice the share (`ratemark`, also
//!   counted in `marked`), so such a flow gets the share whatever it sends;
//! * **work conservation**: while the queue holds less than its *floor*
//!   (2 ms of the link, at least two full frames and at most ten;
//!   [`FairRate::floor`]) nothing is dropped, by the check or by Blue
//!   (Blue may still mark), of a flow under four times the share
//!   ([`FLOOR_OVER`]): a queue in front of a busy link does not drop a
//!   packet the link would otherwise have sent idle. Without it the check's
//!   estimates, noisy for small flows, refused packets with the queue
//!   empty: 1000 unresponsive flows at three times a 4 Mbit/s port left it
//!   at 92% of its rate. A flow far over the share stays held to it (in
//!   the closed-loop model, AIMD flows with long windows leave the queue
//!   short, and an unresponsive flow at ten times its share spared by the
//!   floor took 6x its share of the link);
//! * a *capped* flow (over the share and not ECN-capable: the check holds
//!   it to the share by dropping) loses nothing to Blue: no early drop, no
//!   penalty box, no full bin. With hundreds of flows every bin is shared
//!   by a dozen of them, so Blue's bins say nothing about the capped flow
//!   itself, and its drops on top of the check's held an unresponsive flow
//!   among 200 TCP flows to half its share. What keeps the capped flows'
//!   part of the queue short is the share: it shrinks while they hold
//!   more than 20 ms of the link and most of the queue
//!   ([`FairRate::tick_queue`]);
//! * for an ECN-capable packet of a flow within its share Blue only marks,
//!   at any probability, and never sends it to the penalty box: a drop
//!   costs a small-window TCP flow a retransmission timeout where a mark
//!   costs it one halving; over the share, sch_sfb's rules apply;
//! * a full bin (`bucketdrop`) drops only flows over their share and not
//!   capped, and `max` is 22 rather than 25, so that with hundreds of flows
//!   the flows with more than their share of the standing queue lose
//!   packets a little before the queue's delay passes sch_sfb's;
//! * Blue's signals feed the check: a flow Blue marked or dropped in the
//!   last second competes for the link whatever its rate
//!   ([`FairRate::signal`]), so that responsive flows Blue holds back are
//!   not taken for light ones whose unused share goes to the flows over
//!   it; a hold ends early when the flow's rate does not fall after the
//!   signal (an unresponsive flow is not held back by Blue);
//! * **idle decay**: while the link is idle, every bin's probability
//!   halves every 100 ms of the queue's clock ([`IDLE_HALF_LIFE_NS`];
//!   monotonic time live, capture time on replay), as the Blue paper
//!   lowers `p` on an idle link. sch_sfb lowers a bin's probability only
//!   when a packet arrives to it empty: after a flood of 1024 flows the
//!   bins kept `maxprob 0.75` through 5 s of silence, and 20 new flows at
//!   10% of the rate lost 42% of their packets. A flow that starts after
//!   congestion has ended sees none of it.
//!
//! Measured with real CUBIC flows and one unresponsive UDP flow through the
//! live router (`../shared/tools/flowmix`), the fair profile holds the UDP
//! flow near its fair share at 8, 50 and 200 flows where sch_sfb's rules
//! leave it up to 2.6x, with fairer TCP shares and shorter queues;
//! `docs/BENCHMARKS.md` has the tables.
//!
//! The check needs the packet's length and the queue's departures, so it
//! runs in [`SfbQueue`] (the router's path); [`Sfb::enqueue`] alone is Blue.
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
//! Both profiles take the kernel's built-in values for the keys they share
//! (`fair` differs in `max`, 22, and in the check's keys: `rate_rows` 2,
//! `rate_log2_bins` 12, `rate_period_ms` 100, `rate_shift` 3). The kernel's built-in ones (`sfb_default_ops`, used when no options are
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
//! There is no child qdisc: the child is the
//! [`EgressQueue`](crate::stage::egress::EgressQueue) (a shaped FIFO);
//! `childdrop` counts the packets SFB admitted and the queue refused (only
//! possible when the queue's own limit is below SFB's).
//!
//! # Batches and the router
//!
//! [`KeyBatch`] hashes a batch of flow keys with one `hash_batch` call per
//! bin set in use; [`SfbQueue`] pairs an [`Sfb`] with its
//! [`EgressQueue`](crate::stage::egress::EgressQueue) and takes a batch's
//! arrivals in one [`SfbQueue::offer_batch`]. The router's egress stage
//! ([`crate::stage::egress`]) runs one per queued port, live and on replay,
//! gathering each batch's copies for it with [`PortKeys`]. The rehash clock
//! is advanced once per batch, at the batch's `now`.
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
//! tag, kept in its egress slot, holds that word, and a departure lowers
//! its eight counts reading the word's bytes in place. The decisions, counters
//! and bins equal the general path's, and [`SfbQueue::offer_batch`] equals
//! the per-packet calls (unit test `fused_batched_and_general_paths_agree`,
//! through swaps, double buffering and every drop reason).
//!
//! # Data layout and the hot path
//!
//! The per-packet path (an [`SfbQueue::offer_batch`] in the kernel's shape)
//! is shaped by how the CPU runs it; these are the reasons, so that a
//! change keeps them or is measured against them (`sfb/enqueue-dequeue` in
//! the bench crate, instruction counts with `bench/examples/sfb_cg.rs`; the
//! figures are in the README's benchmark section).
//!
//! * **Store-to-load forwarding.** A load that overlaps a recent narrower
//!   store to the same place waits until that store commits. So a bin is one
//!   32-bit word, always read and written whole (not a 16-bit count beside
//!   a 16-bit probability); [`SfbKey`]'s set mask is a full word; a tag's
//!   words are built in registers, not written into an array by index and
//!   read back whole; and `offer` matches the decision's `Result` rather
//!   than rebuilding it with `?`, which stored it byte by byte before a
//!   wide load.
//! * **No branches on coin flips.** A branch on a random outcome is
//!   mispredicted about as often as it is taken, so step 5's tests are
//!   computed without branches except the one on its result, and the coins
//!   take one generator output per draw (sharing an output among draws
//!   needs a refill branch).
//! * **One loop, compiled once per path.** The fused path is a compile-time
//!   parameter (`const FUSED`), so each path is compiled without the
//!   other's tests; the kernel shape's bins are fixed arrays (no length
//!   checks); the caller makes each arrival as it is offered (a [`Feed`]: no
//!   list of arrivals, verdicts or departures in between); and
//!   [`SfbQueue::offer_batch`] runs its loop inside
//!   [`kernels::sfb::Kernel::run`], compiled with the kernel's target
//!   feature, so that the kernel and the departure are inlined into it (the
//!   closure is `#[inline(always)]`; without it the loop stays out of line).
//! * **Few instructions per index.** Slices give eight levels one byte each,
//!   so the kernel's offset word is two bit operations from the packed
//!   indices, and a queued packet's tag keeps that word in its egress
//!   slot, where a departure reads its bytes in place (one byte load per
//!   slot). The tag holds the word, not an array of its bytes: the
//!   compiler assembled such an array byte by byte on every enqueue.
//!
//! The loop then runs several instructions per cycle, so the instruction
//! count (callgrind) is the figure to watch.

// One concern per file:
// config.rs     SfbConfig, BinIndex, validation, tc-style display
// algorithm.rs  Sfb: bins, decide / commit / release, tick and swap, coins, snapshot
// penalty.rs    the penalty box's token bucket
// rate.rs       the fair-share check: rate sketch, max-min share, verdicts
// keys.rs       SfbKey, SfbTag, indices from a hash pair, KeyBatch, PortKeys
// queue.rs      SfbQueue (SFB + the shaped FIFO), Arrival, Feed, offer / take, offer_batch
// stats.rs      SfbCounters, PenalisedFlow, SfbStats

mod algorithm;
mod config;
mod keys;
mod penalty;
mod queue;
mod rate;
mod stats;

pub use algorithm::{Admit, Bin, Sfb, SfbDrop};
pub use algorithm::{IDLE_HALF_LIFE_NS, PEAK_SAMPLE_NS};
pub use config::{
    BinIndex, MAX_LEVELS, MAX_LOG2_BINS, SFB_MAX_PROB, SfbConfig, SfbConfigError, SfbProfile,
};
pub use keys::{KeyBatch, PortKeys, SfbKey, SfbTag, field_width, row_index, slice_index, slices};
pub use queue::{Arrival, Enqueued, Feed, Queued, SfbQueue};
pub use rate::{
    Backlog, CAPPED_NS, FLOOR_BYTES, FLOOR_NS, FLOOR_OVER, FairRate, FirstRow, MAX_RATE_LOG2_BINS,
    MAX_RATE_ROWS, RateVerdict,
};
pub use stats::{FairStats, PenalisedFlow, SfbCounters, SfbPeaks, SfbStats};
