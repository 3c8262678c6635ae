//! The algorithm: [`Sfb`]'s two bin sets, the arrival decision (steps 1-5
//! of the module docs), counting and uncounting, the rehash clock and
//! swaps, the coins, and the `tc`-style snapshot.

use kernels::index::Partitioned;
use kernels::sfb::{self as sfb_kernel, Kernel};
use kernels::{Backend, BackendError, Hasher, splitmix64};

use crate::clock::Timestamp;
use crate::flow::FlowKey;
use crate::packet::DropReason;

use super::config::{BinIndex, SFB_MAX_PROB, SfbConfig, SfbConfigError};
use super::keys::{SfbKey, SfbTag, field_width, row_index, slices};
use super::penalty::PenaltyBucket;
use super::rate::{Backlog, FairRate, FirstRow};
use super::stats::{PenalisedFlow, SfbCounters, SfbPeaks, SfbStats};

/// Nanoseconds per millisecond.
pub(super) const NS_PER_MS: u64 = 1_000_000;

/// While the link is idle, the fair profile halves every bin's marking
/// probability every this many ns of the queue's clock (the module docs'
/// idle decay; the bare [`Sfb`] has no queue and never decays).
pub const IDLE_HALF_LIFE_NS: u64 = 100 * NS_PER_MS;
/// Idle time is applied to the bins in steps of at least this much (a scan
/// of both sets per step).
const IDLE_STEP_NS: u64 = NS_PER_MS;

/// One bin: a virtual queue length and a marking probability (Q0.16).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Bin {
    /// Packets queued that hash here.
    pub qlen: u16,
    /// Marking probability, Q0.16.
    pub p_mark: u16,
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
pub(super) struct Decision {
    pub(super) mark: bool,
    pub(super) sets: u8,
    /// The standby set's index word when `sets` includes it.
    pub(super) standby: u64,
}

/// What [`Sfb::decide`] knows of an arrival besides its key.
#[derive(Debug, Clone, Copy)]
pub(super) struct Traits {
    /// The packet is ECN-capable.
    pub(super) ecn_capable: bool,
    /// A full bin (`max`) does not drop it (never true with the check off;
    /// under the fair profile: its flow within the share, the queue under
    /// the work-conserving floor, or the flow capped).
    pub(super) keep_at_max: bool,
    /// Blue neither drops it nor sends it to the penalty box, and marks it
    /// if it is ECN-capable (never true with the check off; under the fair
    /// profile: ECN-capable, the queue under the floor, or the flow
    /// capped).
    pub(super) marks_only: bool,
    /// Blue's coin is the second of the draw the fair-share check made for
    /// the packet ([`Coins::second`]; false: Blue draws its own).
    pub(super) paired_coin: bool,
    /// Blue counts its marks in `counters.marked` (false: the caller
    /// counts them with its own, once for a packet both marked).
    pub(super) count_marks: bool,
}

/// The fair-share check's verdict on an arrival as the fair path takes it
/// ([`Sfb::rate_check`]): what the check does with the packet and what it
/// spares the packet of Blue. One word, the flow's first-row counter in
/// its low 16 bits and a flag per bit above: it is alive across Blue's
/// kernel, which takes most registers, and one word spills and reloads
/// once where six values did each.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Checked(u32);

impl Checked {
    /// The check refuses the packet (the work-conserving floor applied).
    pub(super) const DROP: u32 = 1 << 16;
    /// The check marks it CE ([`RateVerdict`]'s `mark`).
    ///
    /// [`RateVerdict`]: super::RateVerdict
    pub(super) const MARK: u32 = 1 << 17;
    /// Its flow is capped ([`RateVerdict`]'s `capped`).
    ///
    /// [`RateVerdict`]: super::RateVerdict
    pub(super) const CAPPED: u32 = 1 << 18;
    /// [`Traits::keep_at_max`].
    pub(super) const KEEP_AT_MAX: u32 = 1 << 19;
    /// [`Traits::marks_only`].
    pub(super) const MARKS_ONLY: u32 = 1 << 20;

    #[inline(always)]
    fn new(first: FirstRow, flags: [(bool, u32); 5]) -> Self {
        let bits = flags.iter().fold(u32::from(first.index()), |b, &(on, f)| {
            b | (u32::from(on) * f)
        });
        Checked(bits)
    }

    /// Whether `flag` (one of the constants above) is set.
    #[inline(always)]
    pub(super) fn has(self, flag: u32) -> bool {
        self.0 & flag != 0
    }

    /// The flow's first-row counter, for [`FairRate::signal_at`].
    #[inline(always)]
    pub(super) fn first(self) -> FirstRow {
        FirstRow::at(self.0 as u16)
    }
}

/// A multiplicative congruential generator modulo 2^64 (Lehmer) with a
/// multiplier of good spectral figure (Steele and Vigna, "Computationally
/// easy, spectrally good multipliers for congruential pseudorandom number
/// generators", 2022): one multiply per draw, whose top 16 bits are the
/// coin (the high bits of such a generator are its good ones; the state is
/// odd, period 2^62). Seedable, so a replay draws the same coins. One
/// output per draw: sharing an output among draws needs a refill branch,
/// which the predictor misses (the draws are random). One multiply is
/// fewer instructions than a SplitMix64 output.
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

    /// A second coin from the last draw's output: the 16 bits below
    /// [`u16`](Self::u16)'s (period 2^46, plenty for a coin; the fair path
    /// draws one for the check and takes this one for Blue, and one
    /// multiply fewer is a few instructions of its ~100). Read from the
    /// state when it is wanted, so that no register holds it meanwhile.
    #[inline]
    fn second(&self) -> u16 {
        (self.state >> 32) as u16
    }
}

/// The hash seed of key generation `g` under base seed `base`.
fn derive_seed(base: u64, generation: u64) -> u64 {
    let mut s = base ^ generation.wrapping_mul(0xD6E8_FEB8_6659_FD93);
    splitmix64(&mut s)
}

/// Stochastic Fair Blue: the bins, the hash keys, the penalty box and the
/// counters of one queue. See the module docs for the algorithm.
#[derive(Debug, Clone)]
pub struct Sfb {
    pub(super) cfg: SfbConfig,
    pub(super) levels: usize,
    n: usize,
    log2: u32,
    /// [`field_width`] of `levels`.
    pub(super) width: u32,
    pub(super) layout: Partitioned,
    /// Per set, each bin as one word: `qlen` in bits 0..16, `p_mark` in
    /// bits 16..32. Every access reads or writes the whole word, so a load
    /// after a recent store to the same bin is forwarded from the store
    /// buffer (a 32-bit load of a bin whose count was just written as 16
    /// bits stalls until the store commits). Empty in the kernel's shape,
    /// whose bins are `kbins`.
    bins: [Vec<u32>; 2],
    /// The kernel's shape's bins as its fixed arrays (so that the fused
    /// path indexes them without a length check); unused in other shapes.
    pub(super) kbins: [Box<[u32; sfb_kernel::SLOTS]>; 2],
    /// `levels` and `log2_bins` are the kernel's.
    kernel_shape: bool,
    /// An [`SfbQueue`] takes the fused path ([`sfb_kernel`]): the kernel's
    /// shape (8 x 16; the bins are then [`sfb_kernel::SLOTS`] words per
    /// set) and `limit < 2^16 - 1`, so that a count, which never exceeds
    /// the packets queued plus the arrival, stays below `u16::MAX`.
    ///
    /// [`SfbQueue`]: super::SfbQueue
    pub(super) fused: bool,
    /// The fused path's arrival kernel, on the hashers' backend.
    pub(super) kernel: Kernel,
    /// `target` (at least 1: `qlen == 0` only decrements, as the Linux
    /// kernel's `else if`), `increment`, `decrement`, for every path.
    steps: sfb_kernel::Steps,
    pub(super) hashers: [Hasher; 2],
    /// The hash backend forced by [`Sfb::on_backend`], kept across swaps.
    backend: Option<Backend>,
    pub(super) active: usize,
    double_buffering: bool,
    rehash_time: Option<Timestamp>,
    base_seed: u64,
    pub(super) generation: u64,
    coins: Coins,
    penalty: PenaltyBucket,
    /// `cfg.effective_max()`.
    max: u16,
    /// The fair-share check, used only when `fair` (off, as in Linux, it
    /// is a sketch of two counters that nothing touches). Not an `Option`:
    /// the fair path (`FAIR` in `queue.rs`) reaches it several times per
    /// packet, and each unwrap was a test and a branch.
    pub(super) rate: FairRate,
    /// The fair-share check is on.
    pub(super) fair: bool,
    pub(super) counters: SfbCounters,
    penalised: Vec<PenalisedFlow>,
    /// The run's highest bin figures so far ([`SfbStats::peak`]), and when
    /// [`tick`](Sfb::tick) samples them next (ns of the clock).
    peak: SfbPeaks,
    next_peak_ns: u64,
    /// Idle time up to here is counted ([`Sfb::idle_until`]), and the
    /// part not yet applied to the bins.
    idle_counted: Timestamp,
    idle_credit: u64,
}

/// How often (at most, on the queue's clock) [`Sfb::tick`] samples the
/// bins for the run's peaks ([`SfbStats::peak`]): a scan of the active set
/// costs about as much as a few packets, so once a millisecond is free.
pub const PEAK_SAMPLE_NS: u64 = 1_000_000;

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
            max: cfg.effective_max(),
            rate: match cfg.effective_rate_rows() {
                0 => FairRate::new(1, 1, cfg.rate_period_ms, cfg.rate_shift, 0),
                rows => FairRate::new(
                    rows,
                    cfg.rate_log2_bins,
                    cfg.rate_period_ms,
                    cfg.rate_shift,
                    0,
                ),
            },
            fair: cfg.effective_rate_rows() > 0,
            counters: SfbCounters::default(),
            penalised: Vec::with_capacity(cfg.penalty_flows),
            peak: SfbPeaks::default(),
            next_peak_ns: 0,
            idle_counted: Timestamp::ZERO,
            idle_credit: 0,
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
        self.tick_queue(now, None);
    }

    /// [`tick`](Self::tick), told the queue's state, which the fair-share
    /// check's gain looks at ([`FairRate::tick_queue`]; `None`: unknown).
    /// [`SfbQueue::tick`](super::SfbQueue::tick) passes it.
    pub fn tick_queue(&mut self, now: Timestamp, queue: Option<Backlog>) {
        if now.as_nanos() >= self.next_peak_ns {
            self.peak = self.peak.max(self.bin_figures());
            self.next_peak_ns = now.as_nanos().saturating_add(PEAK_SAMPLE_NS);
        }
        if self.fair {
            let r = &mut self.rate;
            // The period's sweeps over the sketch vectorise with the
            // kernel's target feature.
            self.kernel.run(
                #[inline(always)]
                || r.tick_queue(now, queue),
            );
        }
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
    ///
    /// [`KeyBatch`]: super::KeyBatch
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
    pub(super) fn offsets(&self, key: &SfbKey) -> u64 {
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

    /// Takes back [`update_raise`](Self::update_raise)'s raise in the sets
    /// of `sets`; `offs`: per set, the offset word.
    #[inline(always)]
    pub(super) fn lower_fused(&mut self, sets: u8, offs: [u64; 2]) {
        for (set, o) in offs.into_iter().enumerate() {
            if sets & (1 << set) != 0 {
                sfb_kernel::lower(&mut self.kbins[set], o);
            }
        }
    }

    /// [`lower_fused`](Self::lower_fused) for a packet leaving the queue,
    /// its offset words read in place from its tag (a [`Queued`]): one byte
    /// load per slot, where a word loaded whole takes a shift and a mask
    /// per slot. (The tag holds words, not arrays of their bytes: the
    /// compiler assembled such arrays byte by byte on every enqueue.)
    ///
    /// [`Queued`]: super::Queued
    #[inline(always)]
    pub(super) fn lower_queued(&mut self, sets: u8, offs: &[u64; 2]) {
        for (set, o) in offs.iter().enumerate() {
            if sets & (1 << set) != 0 {
                // The slots in any order: every one is lowered.
                sfb_kernel::lower_bytes(&mut self.kbins[set], bytemuck::cast_ref(o));
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
        let traits = Traits {
            ecn_capable,
            keep_at_max: false,
            marks_only: false,
            paired_coin: false,
            count_marks: true,
        };
        match self.decide(key, None, flow, traits, queue_len, now) {
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
    ///
    /// `traits`: what the fair-share check (when on) spares the packet:
    /// a full bin (`keep_at_max`: the flows that fill the queue are those
    /// over their share), Blue's drops (`marks_only`).
    ///
    /// [`SfbQueue`]: super::SfbQueue
    #[inline(always)]
    pub(super) fn decide(
        &mut self,
        key: &SfbKey,
        fused: Option<u64>,
        flow: Option<&FlowKey>,
        traits: Traits,
        queue_len: usize,
        now: Timestamp,
    ) -> Result<Decision, SfbDrop> {
        let Traits {
            ecn_capable,
            keep_at_max,
            marks_only,
            paired_coin,
            count_marks,
        } = traits;
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
        if minq >= self.max && !keep_at_max {
            self.counters.bucketdrop += 1;
            if fused.is_some() {
                self.lower_fused(sets, offs);
            }
            return Err(SfbDrop::Bucket);
        }
        if minp == SFB_MAX_PROB && !marks_only {
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
        let r = if paired_coin {
            self.coins.second()
        } else {
            self.coins.u16()
        };
        let hit = r < minp;
        // A packet that Blue only marks is dropped by no draw: its
        // probability for the drop is 0. (Folded into the probability,
        // not tested beside it: the compiler then branches once on the
        // outcome, where with a third operand it branched on each.)
        let drop_p = minp & u16::from(!marks_only).wrapping_neg();
        let over_half = u32::from(r) < u32::from(drop_p.saturating_sub(HALF)) * 2;
        let early = (r < drop_p) & (over_half | !ecn_capable);
        // Only an ECN-capable packet is marked (without `marks_only`, a
        // hit on any other is an early drop).
        let mark = hit & !early & ecn_capable;
        if count_marks {
            self.counters.marked += u64::from(mark);
        }
        if early {
            self.counters.earlydrop += 1;
            if fused.is_some() {
                self.lower_fused(sets, offs);
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
                self.lower_fused(sets, offs);
            }
            return Err(SfbDrop::Penalty);
        }
        Ok(Decision {
            mark: false,
            sets,
            standby,
        })
    }

    /// The fair-share check's link rate: the shaper's, bits per second (0:
    /// unshaped, the check then takes what left the queue as the capacity).
    pub fn set_link_rate(&mut self, bps: u64) {
        self.rate.set_link_rate(bps);
    }

    /// The fair-share check, if on.
    pub fn fair_rate(&self) -> Option<&FairRate> {
        self.fair.then_some(&self.rate)
    }

    /// The fair path an [`SfbQueue`] compiles for this SFB, as the row
    /// count of [`FairRate::arrive_rows`]: 0 with the check off.
    ///
    /// [`SfbQueue`]: super::SfbQueue
    #[inline]
    pub(super) fn path_rows(&self) -> usize {
        if self.fair { self.rate.path_rows() } else { 0 }
    }

    /// Runs an arrival through the fair-share check (the caller knows it is
    /// on, with `R` its [`path_rows`](Self::path_rows)): `word` is the
    /// flow's packed hash word in the active set, `backlog` the bytes
    /// queued. Counts its marks in `ratemark` (its drops, and the marks in
    /// `marked`, are the caller's to count). Under the work-conserving
    /// floor ([`FairRate::floor`]) the check drops nothing of a flow near
    /// the share ([`RateVerdict::near`]), and Blue drops nothing of a
    /// packet so spared, nor of a capped flow's; a full bin does not drop
    /// a packet of a flow within the share either, and Blue only marks an
    /// ECN-capable one.
    ///
    /// [`RateVerdict::near`]: super::RateVerdict::near
    #[inline(always)]
    pub(super) fn rate_check<const R: usize>(
        &mut self,
        word: u64,
        len: u32,
        ecn_capable: bool,
        backlog: u64,
    ) -> Checked {
        debug_assert!(self.fair);
        let r = &mut self.rate;
        // Blue's coin is this draw's second (`Traits::paired_coin`).
        let coin = self.coins.u16();
        let (v, first) = r.arrive_rows::<R>(word, len, ecn_capable, coin);
        // Under the floor a flow near the share keeps its packet; one far
        // over it does not (`FLOOR_OVER`).
        let short = (backlog < r.floor()) & v.near;
        self.counters.ratemark += u64::from(v.mark);
        let no_drop = short | v.capped;
        Checked::new(
            first,
            [
                // `drop & !short`, written as one test of two bits: the
                // compiler then branches once on the outcome, where on the
                // `&` of the comparisons it branched on the coin's refusal
                // first, which goes either way.
                (
                    (u8::from(v.drop) << 1 | u8::from(!short)) == 3,
                    Checked::DROP,
                ),
                (v.mark, Checked::MARK),
                (v.capped, Checked::CAPPED),
                (v.under | no_drop, Checked::KEEP_AT_MAX),
                (no_drop | (ecn_capable & v.under), Checked::MARKS_ONLY),
            ],
        )
    }

    /// An arrival at `now` found the queue empty: the link was idle since
    /// `since` (the end of the last departure's transmission, on the
    /// queue's clock; [`EgressQueue::idle_since`]). Blue's probabilities decay
    /// while the link is idle, as the Blue paper lowers `p` on an idle
    /// link: every bin's (both sets') halves every [`IDLE_HALF_LIFE_NS`]
    /// of idle time, applied in steps of at least 1 ms (one scan of the
    /// bins each), so a flow that starts after congestion has ended is
    /// judged by bins that forgot it. (sch_sfb lowers a bin's probability
    /// only when a packet arrives to it empty, by `decrement`; after a
    /// flood the bins keep its probabilities for as long as no packet
    /// comes.) The fair profile only.
    #[inline]
    pub(super) fn idle_until(&mut self, now: Timestamp, since: Timestamp) {
        let from = since.max(self.idle_counted);
        self.idle_credit = self.idle_credit.saturating_add(now.nanos_since(from));
        self.idle_counted = from.max(now);
        if self.idle_credit >= IDLE_STEP_NS {
            self.apply_idle();
        }
    }

    /// Applies the idle time counted to every bin's probability (out of
    /// line: rare, and a loop the per-packet path need not carry).
    #[cold]
    #[inline(never)]
    fn apply_idle(&mut self) {
        let f = idle_factor(self.idle_credit);
        self.idle_credit = 0;
        for set in 0..2 {
            for w in self.words_mut(set) {
                let p = (u64::from(*w >> 16) * f) >> 16;
                *w = (*w & 0xFFFF) | (p as u32) << 16;
            }
        }
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
    pub(super) fn adjust(&mut self, sets: u8, packed: [u64; 2], up: bool) {
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
        self.stats_idle(now, None)
    }

    /// [`stats`](Self::stats); `idle_since`: the link has been idle since
    /// then, so the probabilities are shown as the idle time until `now`
    /// has decayed them ([`IDLE_HALF_LIFE_NS`], fair profile only; the mean
    /// scaled as a whole).
    pub fn stats_idle(&self, now: Timestamp, idle_since: Option<Timestamp>) -> SfbStats {
        let SfbPeaks {
            maxqlen,
            mut maxprob,
            mut avgprob,
        } = self.bin_figures();
        if let (Some(since), true) = (idle_since, self.fair) {
            let since = since.max(self.idle_counted);
            let pending = self.idle_credit.saturating_add(now.nanos_since(since));
            if pending >= IDLE_STEP_NS {
                let f = idle_factor(pending);
                maxprob = ((u64::from(maxprob) * f) >> 16) as u16;
                avgprob = ((u64::from(avgprob) * f) >> 16) as u16;
            }
        }
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
            peak: self.peak.max(SfbPeaks {
                maxqlen,
                maxprob,
                avgprob,
            }),
            penalised,
            fair: self.fair.then(|| self.rate.stats_at(now)),
        }
    }
}

impl Sfb {
    /// The active set's largest count, largest probability and mean
    /// probability (integer mean, as the kernel's) now.
    fn bin_figures(&self) -> SfbPeaks {
        let words = self.words(self.active);
        let (mut maxqlen, mut maxprob, mut total) = (0u16, 0u16, 0u64);
        for &w in words {
            let b = unword(w);
            maxqlen = maxqlen.max(b.qlen);
            maxprob = maxprob.max(b.p_mark);
            total += u64::from(b.p_mark);
        }
        SfbPeaks {
            maxqlen,
            maxprob,
            avgprob: (total / words.len().max(1) as u64) as u16,
        }
    }
}

/// `2^(-idle / IDLE_HALF_LIFE_NS)` in Q16 (at most 1 << 16).
fn idle_factor(idle_ns: u64) -> u64 {
    let halves = idle_ns as f64 / IDLE_HALF_LIFE_NS as f64;
    ((-halves).exp2() * 65536.0) as u64
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
