//! The fair-share rate check ([`FairRate`]): a count-min sketch of the
//! flows' arrival rates with conservative update, the fair share computed
//! from it, and a drop (or mark) probability for packets of flows above
//! that share.
//!
//! # Why
//!
//! Blue raises a bin's probability only while the bin holds `target`
//! packets. An unresponsive flow whose packets are mostly dropped keeps
//! short bins, so its probability stops rising below 1 and the penalty box
//! (which waits for 1) rarely engages: measured with real CUBIC flows
//! through the router (`../shared/tools/flowmix`), such a flow kept about
//! 2x its fair share at 50 and 200 flows. Queue occupancy is the wrong
//! signal for it; its *arrival rate* is the right one, and a sketch gives it
//! without per-flow state.
//!
//! # What
//!
//! * **Rates.** `rows` rows of `2^log2_bins` counters, one row index per
//!   row from the flow's SFB hash word (a multiply-shift per row, so the
//!   rows are independent of each other whichever [`BinIndex`] makes the
//!   word). Every arrival, dropped later or not, adds its length with
//!   conservative update (only the rows at the minimum grow, to the new
//!   minimum), and the flow's rate is the minimum over its rows: never
//!   below its true decayed byte count, and above it only when every row
//!   collides with a heavier flow. Every `period_ms` of packet time all
//!   counters lose `1/2^shift` (default 1/8 per 100 ms: a mean age of
//!   about 0.8 s), so a counter is an exponentially weighted byte count.
//! * **Fair share.** At each period the share `alpha` is computed from the
//!   first row: flows under half an equal share of the capacity are *light*
//!   and keep what they send; the capacity they leave is divided equally
//!   among the others, whose number is the row's busy counters corrected
//!   for collisions by linear counting. The capacity is the shaper's rate in
//!   the same decayed units (or, on an unshaped port, the decayed bytes that
//!   actually left). When the row's demands fit 95% of the capacity there
//!   is no share and no packet is judged (not 100%: Blue holds responsive
//!   flows back, so that their demand and an unresponsive flow's can sit
//!   just under the link's rate with the unresponsive flow taking 40% of
//!   it, as the closed-loop model showed). This is the share Core-Stateless Fair
//!   Queueing (Stoica, Shenker, Zhang, SIGCOMM 1998) enforces, taken here
//!   from the sketch instead of labels carried in packets, and counted per
//!   competing flow rather than found by water-filling over the arrival
//!   rates: the TCP flows Blue marks stay below any share, and a
//!   water-filling share then grows to whatever the unresponsive flow takes
//!   (measured: 1.5x its fair share at 200 flows). For the same reason a
//!   flow that Blue marked or dropped within the last 10 periods is never
//!   light ([`FairRate::signal`], a countdown per first-row counter): with
//!   long windows (8 CUBIC flows at 100 Mbit/s and 50 ms, 46 packets each)
//!   responsive flows that Blue holds back sit under half the share, and
//!   counted as light they handed their part of the link to the
//!   unresponsive flow (4-5x its fair share in the model). A hold lasts
//!   only while the flow responds: a held counter that climbs back to its
//!   value at the hold's first period boundary, or near it, ends its hold
//!   (`FairRate::review_holds`). Without that, a flood of small
//!   unresponsive flows, hundreds of which Blue signals whenever the queue
//!   builds, counted as hundreds of competitors, cut the share to a sixth
//!   and left the link at 70% of its rate for a second at a time. Between
//!   periods the share is scaled the way a steady flow's counter grows (from `1 -
//!   1/2^shift` of its peak back to the peak), so a flow is compared at the
//!   same point of the sawtooth.
//! * **Verdict.** A packet of a flow whose rate `r` exceeds `alpha` is
//!   refused with probability `1 - alpha / r`, so that flow's admitted rate
//!   is `alpha` whatever it sends. An ECN-capable packet under `2 alpha` is
//!   marked CE instead of dropped (a responsive flow slows down on the
//!   mark; one that ignores marks climbs past `2 alpha` and is dropped).
//!   Holding flows far over the share to half of it, as sch_sfb's penalty
//!   box does, was tried and dropped: where every flow is unresponsive (32
//!   constant-rate flows at 3x their share through a 4 Mbit/s port) the
//!   link ran at 67% of its rate.
//!
//! * **Work conservation.** While the queue holds less than its floor
//!   ([`FLOOR_NS`] of the link, between two and ten full frames) the check
//!   refuses nothing of a flow under [`FLOOR_OVER`] times the share
//!   (the share before a gain under 1 shrank it: see *Capped flows*)
//!   ([`FairRate::floor`], [`RateVerdict::near`]; the caller applies it):
//!   its estimates of small flows are noisy, and refusing packets with the
//!   queue empty idled the link (1000 unresponsive flows at three times
//!   a 4 Mbit/s port: 92% of its rate).
//! * **Capped flows.** A flow over the share that is not ECN-capable is
//!   *capped* ([`RateVerdict::capped`]): the check holds it to the share
//!   and Blue drops none of its packets. Nothing else then shortens the
//!   capped flows' part of the queue, so the share does: it shrinks while
//!   they hold more than [`CAPPED_NS`] of the link and more than 3/4 of
//!   the queue (a flood of unresponsive flows whose admitted shares add up
//!   to a little more than the link), and grows back when they do not
//!   ([`FairRate::tick_queue`]).
//!
//! Blue still runs on every admitted packet: it keeps the queue short; this
//! check keeps the shares fair. The share also grows while a congested
//! shaped port sends under its rate (see [`FairRate::tick_queue`]), so
//! that responsive flows Blue holds back do not leave the link idle.
//!
//! The rows are indexed from the active bin set's hash word, so a rehash
//! (every `rehash_ms`, 10 minutes by default) moves every flow to other
//! counters, which hold other flows' history for the next second or so.
//!
//! [`BinIndex`]: super::BinIndex

use crate::clock::Timestamp;

use super::algorithm::NS_PER_MS;
use super::stats::FairStats;

/// Rounds of the share's fixed point (light flows and the share).
const SHARE_ROUNDS: usize = 8;

/// Consecutive short periods before the share grows.
const SHORT_PERIODS: u32 = 8;
/// The largest multiplier of the share, Q16 (2: a flow held to the share
/// never gets more than twice an equal share because others idle the link).
const MAX_GAIN: u64 = 2 << 16;
/// The smallest multiplier of the share, Q16 (1/16), to which it falls
/// while the capped flows fill the queue (see [`FairRate::tick`]).
const MIN_GAIN: u64 = 1 << 12;

/// The work-conserving floor spares flows under this many times the share
/// ([`RateVerdict::near`]): a flow near the share is one whose estimate's
/// noise can idle the link; one far over it is held to the share whatever
/// the queue holds (else an unresponsive flow at ten times its share takes
/// the link whenever responsive flows let the queue run short).
pub const FLOOR_OVER: u64 = 4;

/// A full Ethernet frame, bytes.
const FULL_FRAME: u64 = 1514;
/// The work-conserving floor: no packet is dropped while the queue holds
/// less than this much of the link's time (2 ms), counted as at least two
/// full Ethernet frames and at most ten (on fast links 2 ms is more
/// packets than Blue's bins hold at `target`, whose probabilities would
/// then climb under the floor where they cannot act).
pub const FLOOR_NS: u64 = 2_000_000;
/// The floor's bounds, bytes (see [`FLOOR_NS`]).
pub const FLOOR_BYTES: (u64, u64) = (2 * FULL_FRAME, 10 * FULL_FRAME);
/// The queue the capped flows may hold, in the link's time (20 ms, at most
/// 100 full frames, at least the floor), before the share shrinks (see
/// [`FairRate::tick_queue`]).
pub const CAPPED_NS: u64 = 20_000_000;

/// Periods for which a Blue signal (a mark or a drop) keeps the flows of
/// a first-row counter competing (see [`FairRate::signal`]).
const HOLD_PERIODS: u8 = 10;

/// The most rows.
pub const MAX_RATE_ROWS: usize = 4;
/// The fair path's row count ([`FairRate::arrive_rows`]) when the sketch's
/// is read at each arrival: any count but the default two.
pub(super) const ANY_ROWS: usize = usize::MAX;
/// The largest `log2_bins` of the rate sketch.
pub const MAX_RATE_LOG2_BINS: u32 = 16;

/// Odd multipliers, one per row (from SplitMix64's constants and the golden
/// ratio): multiply-shift hashing of the SFB word into each row.
const ROW_MULT: [u64; MAX_RATE_ROWS] = [
    0x9E37_79B9_7F4A_7C15,
    0xBF58_476D_1CE4_E5B9,
    0x94D0_49BB_1331_11EB,
    0xD6E8_FEB8_6659_FD93,
];

/// A queue's state as [`FairRate::tick_queue`] needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Backlog {
    /// Bytes queued now.
    pub bytes: u64,
    /// Bytes that ever entered the queue (a counter; it may wrap).
    pub bytes_in: u64,
}

/// The rate check's verdict on one arrival: computed without branches (a
/// branch on whether a flow is over its share is mispredicted about as
/// often as flows sit near it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RateVerdict {
    /// The flow is within the fair share (or the port is not congested).
    pub under: bool,
    /// Over the share, ECN-capable and under twice it: mark CE.
    pub mark: bool,
    /// Over the share: drop.
    pub drop: bool,
    /// Over the share and not ECN-capable, the share not raised by the
    /// gain: the check holds the flow to the share by dropping, whatever
    /// the coin said for this packet, and Blue drops nothing more of it
    /// (see the module docs). While the gain raises the share (a link that
    /// others leave short), Blue's rules apply to such a flow as before,
    /// so that it does not take all of what the others leave.
    pub capped: bool,
    /// Under [`FLOOR_OVER`] times the share before this packet: the
    /// work-conserving floor spares the packet ([`FairRate::floor`]).
    pub near: bool,
}

impl RateVerdict {
    /// Within the share.
    pub const UNDER: RateVerdict = RateVerdict {
        under: true,
        mark: false,
        drop: false,
        capped: false,
        near: true,
    };
    /// Over the share, passed unmarked (markable: not capped).
    pub const OVER: RateVerdict = RateVerdict {
        under: false,
        mark: false,
        drop: false,
        capped: false,
        near: true,
    };
    /// Over the share, marked.
    pub const MARK: RateVerdict = RateVerdict {
        under: false,
        mark: true,
        drop: false,
        capped: false,
        near: true,
    };
    /// Over the share, dropped (not ECN-capable: capped).
    pub const DROP: RateVerdict = RateVerdict {
        under: false,
        mark: false,
        drop: true,
        capped: true,
        near: true,
    };
    /// Over the share, not markable, passed.
    pub const CAPPED: RateVerdict = RateVerdict {
        under: false,
        mark: false,
        drop: false,
        capped: true,
        near: true,
    };
}

/// A flow's counter in the first row of a [`FairRate`], as
/// [`FairRate::arrive_at`] found it (below `2^MAX_RATE_LOG2_BINS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FirstRow(u16);

impl FirstRow {
    /// The counter at `index` of the first row.
    #[inline(always)]
    pub(super) fn at(index: u16) -> Self {
        FirstRow(index)
    }

    /// Its index in the first row.
    #[inline(always)]
    pub(super) fn index(self) -> u16 {
        self.0
    }
}

/// The sketch, the departures, and the fair share of one queue.
#[derive(Debug, Clone)]
pub struct FairRate {
    rows: usize,
    log2: u32,
    /// `2^log2` (a row's counters) and `64 - log2` (the index's shift).
    stride: usize,
    index_shift: u32,
    shift: u32,
    period_ns: u64,
    /// `MAX_RATE_ROWS << log2` counters, row-major: decayed bytes. Rows
    /// from `rows` on are never touched (so never paged in); allocated so
    /// that an index for any row below `MAX_RATE_ROWS` is in bounds
    /// whatever `rows` is, which spares the arrival a check.
    counts: Vec<u32>,
    /// Per first-row counter, the periods left in which its flows count
    /// as competing because Blue signalled one of them
    /// ([`signal`](Self::signal)), as of the last period boundary.
    held: Vec<u8>,
    /// Per first-row counter, whether Blue signalled one of its flows
    /// since the last period boundary, where the flag becomes a hold
    /// ([`fold_signals`](Self::fold_signals); the holds are only read
    /// there). One `or` per arrival, where setting the hold itself was a
    /// load, a select and a store. Sized for the largest row, so that a
    /// [`FirstRow`] indexes it without a check.
    signalled: Box<[u8; 1 << MAX_RATE_LOG2_BINS]>,
    /// Per first-row counter, its value at the first period boundary of
    /// its hold (0: not taken yet) and at the last one: a hold ends early
    /// when the counter climbs back to its base
    /// ([`review_holds`](Self::review_holds)).
    hold_base: Vec<u32>,
    hold_last: Vec<u32>,
    /// At the last period boundary: the counters held after the review,
    /// and the flows the share was divided among (0: not congested).
    held_now: u32,
    competing: u32,
    /// Decayed bytes that left the queue, up to the last period boundary.
    departed: u64,
    /// Bytes that left since the last period boundary (not decayed).
    departed_now: u64,
    /// Consecutive congested periods in which the port sent under 98% of
    /// its rate.
    short_periods: u32,
    /// How far the decayed counts are from their steady state, Q16: `1 -
    /// (1 - 2^-shift)^k` after `k` periods (a flow that started with the
    /// sketch has counted that fraction of what it will hold).
    warm: u64,
    /// The gain is at most 1: flows over the share and not ECN-capable are
    /// capped ([`RateVerdict::capped`]).
    capping: bool,
    /// The share's multiplier, Q16 (1 << 16 = 1): raised while the port
    /// is congested yet sends below its rate (see [`FairRate::tick`]).
    gain: u64,
    /// The shaper's rate in bytes per second (0: unshaped, use `departed`).
    link_bytes_per_s: u64,
    /// The work-conserving floor in bytes ([`FLOOR_NS`]; 0 on an unshaped
    /// port).
    floor: u64,
    /// Bytes admitted into the queue since the last period boundary from
    /// capped flows ([`RateVerdict::capped`], `[1]`; `[0]` takes the other
    /// flows' adds and is never read: one add into the entry the flag
    /// names, no mask); the queue's bytes
    /// in, all flows, at that boundary; and how many bytes the capped
    /// flows may hold in the queue before the share shrinks ([`CAPPED_NS`]
    /// of the link, at least the floor; `u64::MAX` on an unshaped port).
    admitted: [u64; 2],
    bytes_in_at: u64,
    capped_limit: u64,
    /// The next decay, packet time.
    next: Option<Timestamp>,
    /// The fair share at the last period's peak (`u32::MAX`: no congestion).
    alpha_peak: u32,
    /// `alpha_peak` scaled to now (see the module docs).
    alpha: u32,
    /// The verdict's thresholds from `alpha` ([`set_alpha`](Self::set_alpha)),
    /// kept beside it so that an arrival only compares: `alpha << 16`,
    /// `2 * alpha` and `FLOOR_OVER * alpha`.
    alpha_q16: u64,
    alpha_twice: u64,
    alpha_near: u64,
}

impl FairRate {
    /// A sketch of `rows` x `2^log2` counters decaying by `1/2^shift` every
    /// `period_ms`; `link_bps` is the shaper's rate in bits per second (0:
    /// unshaped).
    pub fn new(rows: usize, log2: u32, period_ms: u64, shift: u32, link_bps: u64) -> Self {
        let rows = rows.clamp(1, MAX_RATE_ROWS);
        let log2 = log2.clamp(1, MAX_RATE_LOG2_BINS);
        let mut f = FairRate {
            rows,
            log2,
            stride: 1 << log2,
            index_shift: 64 - log2,
            shift: shift.clamp(1, 16),
            period_ns: period_ms.max(1).saturating_mul(NS_PER_MS),
            counts: vec![0; MAX_RATE_ROWS << log2],
            held: vec![0; 1 << log2],
            signalled: Box::new([0; 1 << MAX_RATE_LOG2_BINS]),
            hold_base: vec![0; 1 << log2],
            hold_last: vec![0; 1 << log2],
            held_now: 0,
            competing: 0,
            departed: 0,
            departed_now: 0,
            short_periods: 0,
            warm: 0,
            gain: 1 << 16,
            capping: true,
            link_bytes_per_s: 0,
            floor: 0,
            admitted: [0; 2],
            bytes_in_at: 0,
            capped_limit: u64::MAX,
            next: None,
            alpha_peak: u32::MAX,
            alpha: 0,
            alpha_q16: 0,
            alpha_twice: 0,
            alpha_near: 0,
        };
        // No congestion yet; the thresholds follow from the share.
        f.set_alpha(u32::MAX);
        f.set_link_rate(link_bps);
        f
    }

    /// The shaper's rate, bits per second (0: unshaped, the capacity is
    /// what left the queue).
    pub fn set_link_rate(&mut self, bps: u64) {
        self.link_bytes_per_s = bps / 8;
        let of_link = |ns: u64| (u128::from(bps / 8) * u128::from(ns) / 1_000_000_000) as u64;
        (self.floor, self.capped_limit) = match bps {
            0 => (0, u64::MAX),
            _ => {
                let floor = of_link(FLOOR_NS).clamp(FLOOR_BYTES.0, FLOOR_BYTES.1);
                (floor, of_link(CAPPED_NS).min(100 * FULL_FRAME).max(floor))
            }
        };
    }

    /// The shaper's rate, bytes per second (0: unshaped).
    pub fn link_bytes_per_s(&self) -> u64 {
        self.link_bytes_per_s
    }

    /// The work-conserving floor, bytes: while the queue holds less, no
    /// packet is dropped (0: unshaped).
    #[inline(always)]
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// The fair share now, in decayed bytes (`u32::MAX`: not congested).
    pub fn alpha(&self) -> u32 {
        self.alpha
    }

    /// Sets the share now and the verdict's thresholds with it.
    #[inline(always)]
    fn set_alpha(&mut self, alpha: u32) {
        self.alpha = alpha;
        self.alpha_q16 = u64::from(alpha) << 16;
        self.alpha_twice = 2 * u64::from(alpha);
        // The floor's threshold from the share before a gain under 1:
        // while the capped flows' share shrinks it is held low, and the
        // flows it holds, sent at a few times the unshrunk share, must
        // still refill a queue that ran short.
        let base = match self.gain {
            g if g < 1 << 16 => (u64::from(alpha) << 16) / g.max(1),
            _ => u64::from(alpha),
        };
        self.alpha_near = FLOOR_OVER * base;
    }

    /// The flow's counter indices, one per row.
    #[inline(always)]
    fn index(&self, word: u64, row: usize) -> usize {
        // `row * stride`, not `row << log2`: a shift by a field's value
        // takes the count register on x86, and the fair path is short of
        // registers.
        (row * self.stride) | (word.wrapping_mul(ROW_MULT[row]) >> self.index_shift) as usize
    }

    /// The row count the fair path is compiled for with this sketch
    /// ([`arrive_rows`](Self::arrive_rows)): 2, the default, or
    /// [`ANY_ROWS`].
    pub(super) fn path_rows(&self) -> usize {
        if self.rows == 2 { 2 } else { ANY_ROWS }
    }

    /// The counters in use (`rows` rows).
    fn used_mut(&mut self) -> &mut [u32] {
        let n = self.rows << self.log2;
        &mut self.counts[..n]
    }

    /// The flow's rate now (the minimum of its counters), changing nothing.
    pub fn estimate(&self, word: u64) -> u32 {
        (0..self.rows)
            .map(|r| self.counts[self.index(word, r)])
            .min()
            .unwrap_or(0)
    }

    /// Counts an arrival of `len` bytes of the flow whose SFB hash word is
    /// `word` and judges it; `coin` is a uniform 16-bit draw.
    #[inline(always)]
    pub fn arrive(&mut self, word: u64, len: u32, ecn_capable: bool, coin: u16) -> RateVerdict {
        self.arrive_at(word, len, ecn_capable, coin).0
    }

    /// [`arrive`](Self::arrive), and the flow's first-row counter for
    /// [`signal_at`](Self::signal_at).
    #[inline(always)]
    pub fn arrive_at(
        &mut self,
        word: u64,
        len: u32,
        ecn_capable: bool,
        coin: u16,
    ) -> (RateVerdict, FirstRow) {
        self.arrive_rows::<ANY_ROWS>(word, len, ecn_capable, coin)
    }

    /// [`arrive_at`](Self::arrive_at) with the row count `R` a constant
    /// (the caller's [`path_rows`](Self::path_rows), chosen once per
    /// batch), so that the rows' loops unroll and no arrival tests the
    /// count; [`ANY_ROWS`] reads it at each arrival.
    #[inline(always)]
    pub(super) fn arrive_rows<const R: usize>(
        &mut self,
        word: u64,
        len: u32,
        ecn_capable: bool,
        coin: u16,
    ) -> (RateVerdict, FirstRow) {
        // Folded to one arm when `R` is a count.
        let (rate, first) = match R {
            1 => self.count::<1>(word, len),
            2 => self.count::<2>(word, len),
            3 => self.count::<3>(word, len),
            4 => self.count::<4>(word, len),
            _ => match self.rows {
                1 => self.count::<1>(word, len),
                2 => self.count::<2>(word, len),
                3 => self.count::<3>(word, len),
                _ => self.count::<4>(word, len),
            },
        };
        let rate = u64::from(rate);
        // Refused with probability 1 - alpha / rate (never when rate <=
        // alpha): coin / 2^16 < (rate - alpha) / rate, that is
        // rate * (2^16 - coin) > alpha * 2^16, which is false for every
        // coin when rate <= alpha (no saturating difference needed).
        let refuse = rate * ((1 << 16) - u64::from(coin)) > self.alpha_q16;
        // An ECN-capable flow is marked up to twice the share; beyond, it
        // is not responding to marks.
        let markable = ecn_capable & (rate < self.alpha_twice);
        let under = rate <= u64::from(self.alpha);
        let v = RateVerdict {
            under,
            mark: refuse & markable,
            drop: refuse & !markable,
            capped: !under & !ecn_capable & self.capping,
            // The flow's count before this packet: a flow sending a packet
            // every few periods counts far over the share the moment one
            // arrives.
            near: rate - u64::from(len) < self.alpha_near,
        };
        // A first-row index is below `2^log2 <= 2^16`.
        (v, FirstRow(first as u16))
    }

    /// Conservative update of `R` rows by `len`; the flow's new count and
    /// its first-row index. `R` is `self.rows` ([`arrive_rows`] dispatches
    /// on it).
    ///
    /// [`arrive_rows`]: Self::arrive_rows
    #[inline(always)]
    fn count<const R: usize>(&mut self, word: u64, len: u32) -> (u32, usize) {
        const { assert!(R >= 1 && R <= MAX_RATE_ROWS) };
        debug_assert_eq!(R, self.rows);
        let idx: [usize; R] = core::array::from_fn(|r| self.index(word, r));
        // Every index is in bounds: `counts` holds `MAX_RATE_ROWS << log2`
        // counters and `index(word, r)` for `r < R <= MAX_RATE_ROWS`
        // (asserted at compile time above) is `r << log2` plus a value
        // shifted right by `64 - log2` bits, so below `2^log2`. (The slice
        // in a local: its pointer stays in a register across the stores.)
        let counts = self.counts.as_mut_slice();
        // SAFETY: every `i` is in bounds (see above).
        let old: [u32; R] = idx.map(|i| unsafe { *counts.get_unchecked(i) });
        let rate = old
            .iter()
            .fold(u32::MAX, |m, &c| m.min(c))
            .saturating_add(len);
        // The rows' indices differ (each row is its own `2^log2` range),
        // so each counter is raised from the value read above.
        for (i, c) in idx.into_iter().zip(old) {
            // SAFETY: `i` is in bounds (see above).
            unsafe { *counts.get_unchecked_mut(i) = c.max(rate) };
        }
        (rate, idx[0])
    }

    /// Blue signalled (marked or dropped) a packet of the flow whose SFB
    /// hash word is `word`, if `on`: for the next 10 periods (`HOLD_PERIODS`)
    /// its first-row counter counts as competing for the link whatever its
    /// rate. A responsive flow that Blue holds back sends less than it
    /// would; counted as *light* it would leave its part of the link to
    /// the flows over the share (the model's long-window weak spot).
    #[inline(always)]
    pub fn signal(&mut self, word: u64, on: bool) {
        // A first-row index is below `2^log2 <= 2^16`.
        self.signal_at(FirstRow(self.index(word, 0) as u16), on);
    }

    /// [`signal`](Self::signal) by the first-row counter that
    /// [`arrive_at`](Self::arrive_at) returned for the flow.
    #[inline(always)]
    pub fn signal_at(&mut self, first: FirstRow, on: bool) {
        // No branch on `on`: a mark is a coin's outcome, which a predictor
        // misses about as often as it comes. The flag becomes the hold at
        // the next boundary ([`fold_signals`](Self::fold_signals)).
        self.signalled[usize::from(first.0)] |= u8::from(on);
    }

    /// The periods counter `i` of the first row is held for, counting a
    /// signal since the last boundary as a full hold.
    #[cfg(test)]
    fn hold(&self, i: usize) -> u8 {
        if self.signalled[i] != 0 {
            HOLD_PERIODS
        } else {
            self.held[i]
        }
    }

    /// At a period boundary, first: each counter signalled since the last
    /// one is held for [`HOLD_PERIODS`] from here, as if its hold had been
    /// set when the signal came (nothing reads the holds in between).
    #[inline(always)]
    fn fold_signals(&mut self) {
        let n = self.held.len();
        // Branch-free, so that the loop vectorises.
        for (h, s) in self.held.iter_mut().zip(&mut self.signalled[..n]) {
            let on = 0u8.wrapping_sub(u8::from(*s != 0));
            *h = (HOLD_PERIODS & on) | (*h & !on);
            *s = 0;
        }
    }

    /// A packet of `len` bytes that the check judged `capped` entered the
    /// queue (counted when it is).
    #[inline(always)]
    pub fn enqueued(&mut self, len: u32, capped: bool) {
        self.admitted[usize::from(capped)] += u64::from(len);
    }

    /// A packet of `len` bytes left the queue.
    #[inline(always)]
    pub fn depart(&mut self, len: u32) {
        self.departed_now += u64::from(len);
    }

    /// Advances packet time to `now`: decays the counters and recomputes the
    /// fair share at each period boundary passed, and scales the share to
    /// where `now` is in the period. [`tick_queue`](Self::tick_queue) with
    /// the queue's backlog unknown.
    #[inline(always)]
    pub fn tick(&mut self, now: Timestamp) {
        self.tick_queue(now, None);
    }

    /// [`tick`](Self::tick), told the queue's state (`None`: unknown;
    /// the share then never shrinks).
    ///
    /// The share's multiplier (its *gain*) keeps the check
    /// work-conserving and the queue short:
    ///
    /// * while the capped flows hold more than [`CAPPED_NS`] of the link
    ///   in the queue, and more than 3/4 of it, the share they are held
    ///   to is larger than the link can give them (Blue drops none of
    ///   their packets, so nothing else shortens their part of the
    ///   queue): the gain falls by 1/8 per period (to 1/16 at least).
    ///   Their part of the queue is taken as their part of the bytes that
    ///   entered it over the period (counted at enqueue only: one add per
    ///   packet, none per departure);
    /// * on a shaped port that is congested (the flows' demands exceed its
    ///   rate) yet sent less than 98% of its rate in each of the last 8
    ///   periods, the flows held to the share cannot use the rest (Blue's
    ///   drops of responsive flows, say): the gain grows by 1/16 per
    ///   period (at most to twice the equal share: the flows that idle the
    ///   link may be responsive ones that Blue holds back, and the spare
    ///   would then all go to the unresponsive flow) until the port is
    ///   full;
    /// * otherwise it returns to 1, by 1/64 per period from above and 1/16
    ///   from below.
    ///
    /// At each boundary the share is computed from the counters as they
    /// are there: when several boundaries passed since the last call (no
    /// arrival in between), the counters first decay through all but the
    /// last, so that the share after an idle gap is not the one before it.
    #[inline(always)]
    pub fn tick_queue(&mut self, now: Timestamp, queue: Option<Backlog>) {
        let next = *self
            .next
            .get_or_insert_with(|| now.add_nanos(self.period_ns));
        if now >= next {
            self.fold_signals();
            let periods = now.nanos_since(next) / self.period_ns + 1;
            // The boundaries passed without an arrival: the counters are
            // what they were at the first, decayed through the others.
            let cleared = periods > 1 && self.decay(periods - 1);
            // The decayed departures at their peak, as a counter's.
            self.departed += self.departed_now;
            // After a reset the sketch starts again: one period counted.
            let warmed = if cleared { 1 } else { periods.min(64) };
            for _ in 0..warmed {
                self.warm += ((1 << 16) - self.warm) >> self.shift;
            }
            self.held_now = self.review_holds();
            let share = self.fair_share();
            self.adjust_gain(share, periods, queue);
            self.capping = self.gain <= 1 << 16;
            self.departed_now = 0;
            self.alpha_peak = match share {
                u32::MAX => u32::MAX,
                s => ((u64::from(s) * self.gain) >> 16).min(u64::from(u32::MAX - 1)) as u32,
            };
            self.decay(1);
            self.next = Some(next.add_nanos(periods.saturating_mul(self.period_ns)));
        }
        if self.alpha_peak == u32::MAX {
            self.set_alpha(u32::MAX);
            return;
        }
        // A steady flow's counter is (1 - 2^-shift) of its peak just after a
        // decay and grows linearly back to the peak over the period.
        let left = self
            .next
            .map_or(0, |n| n.nanos_since(now))
            .min(self.period_ns);
        let frac_done = ((self.period_ns - left) << 16) / self.period_ns;
        let lost = (1u64 << 16) >> self.shift;
        let scale = (1u64 << 16) - lost + ((lost * frac_done) >> 16);
        self.set_alpha(((u64::from(self.alpha_peak) * scale) >> 16) as u32);
    }

    /// The gain at a period boundary (see [`tick_queue`](Self::tick_queue)):
    /// `share` the share just computed, `periods` the periods since the
    /// last boundary, `queue` the queue's state if known.
    fn adjust_gain(&mut self, share: u32, periods: u64, queue: Option<Backlog>) {
        const ONE: u64 = 1 << 16;
        let capped_in = core::mem::take(&mut self.admitted[1]);
        self.admitted[0] = 0;
        // The capped flows' part of the queue, as their part of what
        // entered it since the last boundary.
        let capped_held = queue.map_or(0, |q| {
            let entered = q.bytes_in.wrapping_sub(self.bytes_in_at);
            self.bytes_in_at = q.bytes_in;
            if capped_in.saturating_mul(4) > entered.saturating_mul(3) {
                let held = u128::from(q.bytes) * u128::from(capped_in) / u128::from(entered.max(1));
                u64::try_from(held).unwrap_or(u64::MAX)
            } else {
                0
            }
        });
        if share == u32::MAX || self.link_bytes_per_s == 0 {
            self.gain = ONE;
            self.short_periods = 0;
            return;
        }
        if capped_held > self.capped_limit {
            self.short_periods = 0;
            self.gain = (self.gain - (self.gain >> 3)).max(MIN_GAIN);
            return;
        }
        let due = self
            .link_bytes_per_s
            .saturating_mul(self.period_ns.saturating_mul(periods))
            / 1_000_000_000;
        if self.departed_now.saturating_mul(100) < due.saturating_mul(98) {
            self.short_periods += 1;
            if self.short_periods >= SHORT_PERIODS || self.gain < ONE {
                self.gain = (self.gain + (self.gain >> 4)).min(MAX_GAIN);
            }
        } else {
            self.short_periods = 0;
            self.gain = if self.gain > ONE {
                (self.gain - (self.gain >> 6)).max(ONE)
            } else {
                (self.gain + (self.gain >> 4)).min(ONE)
            };
        }
    }

    /// At a period boundary, before the share: ends the holds of flows that
    /// do not slow down. A held counter's value at the first boundary of
    /// its hold is its base. At a later boundary the hold ends when the
    /// counter is back at its base, or within an eighth of it and no lower
    /// than at the boundary before: its flows did not answer Blue's signal,
    /// so Blue is not what holds them back, and the counter competes only
    /// if its rate makes it heavy. A responsive flow that halved its rate
    /// sits well under its base for about a second (a decayed count falls
    /// while the rate is under it, by a sixteenth a period at first), about
    /// as long as a hold lasts; a steady flow's counter moves around its
    /// base by noise only, and the eighth lets the small flows, whose
    /// noise is largest, go as soon as they stop falling.
    ///
    /// Boundaries only, because a steady flow's counter is at the same
    /// point of its sawtooth there (its peak, before the decay); the first
    /// boundary only takes the base, so that a flow signalled late in a
    /// period has had a period to answer.
    ///
    /// Returns the number of counters still held.
    #[inline(always)]
    fn review_holds(&mut self) -> u32 {
        let mut still = 0u32;
        let row = &self.counts[..self.held.len()];
        let holds = self.held.iter_mut().zip(&mut self.hold_base);
        // Branch-free and with every store made (masks, not selects, which
        // the compiler turns into masked stores), so that the loop
        // vectorises (with the kernel's target feature: `tick_queue` runs
        // in it). A counter not held keeps everything as it is.
        for (((h, base), last), &c) in holds.zip(&mut self.hold_last).zip(row) {
            let held = *h != 0;
            let fresh = *base == 0;
            let ends = !fresh & ((c >= *base) | ((c >= *last) & (c >= *base - (*base >> 3))));
            // The base: taken (held, none yet), cleared (held, ends), else
            // as it was.
            let keep = u32::from(!held | (!fresh & !ends)).wrapping_neg();
            let take = u32::from(held & fresh).wrapping_neg();
            *base = (*base & keep) | (c.max(1) & take);
            *h &= u8::from(!(held & ends)).wrapping_neg();
            let seen = u32::from(held).wrapping_neg();
            *last = (c & seen) | (*last & !seen);
            still += u32::from(*h != 0);
        }
        still
    }

    /// Each counter (and the departures) loses `1/2^shift`, `periods` times;
    /// true when that clears them all (and the holds, and the warm-up).
    #[inline(always)]
    fn decay(&mut self, periods: u64) -> bool {
        let s = self.shift;
        if periods.saturating_mul(u64::from(s)) >= 32 {
            self.used_mut().fill(0);
            self.held.fill(0);
            self.hold_base.fill(0);
            self.departed = 0;
            self.warm = 0;
            return true;
        }
        let p = u8::try_from(periods).unwrap_or(u8::MAX);
        for (h, b) in self.held.iter_mut().zip(&mut self.hold_base) {
            *h = h.saturating_sub(p);
            if *h == 0 {
                *b = 0;
            }
        }
        for _ in 0..periods {
            for c in self.used_mut() {
                *c -= *c >> s;
            }
            self.departed -= self.departed >> s;
        }
        false
    }

    /// The capacity in decayed bytes: a steady `link_bytes_per_s` counted
    /// over every period since the sketch started and decayed as a counter
    /// is, at its peak.
    fn capacity(&self) -> u64 {
        if self.link_bytes_per_s == 0 {
            return self.departed;
        }
        let per_period = self.link_bytes_per_s.saturating_mul(self.period_ns) / 1_000_000_000;
        ((u128::from(per_period << self.shift) * u128::from(self.warm)) >> 16) as u64
    }

    /// The fair share over the first row (`u32::MAX` when the demands fit
    /// 95% of the capacity): the capacity left by the light flows (under half an
    /// equal share), divided equally among the others, their number
    /// corrected for collisions by linear counting.
    #[inline(always)]
    fn fair_share(&mut self) -> u32 {
        let cap = self.capacity();
        let row = &self.counts[..1 << self.log2];
        // The busy counters (above 0) and the sum of all (none above the
        // largest threshold).
        let held = &self.held[..];
        let (busy, _) = split(row, &[], 0);
        let (_, total) = split(row, &[], u64::MAX);
        // Congested from 95% of the capacity: responsive flows that an AQM
        // holds back keep the demand just under the link while an
        // unresponsive flow takes what it likes.
        if total.saturating_mul(100) <= cap.saturating_mul(95) || busy == 0 {
            self.competing = 0;
            return u32::MAX;
        }
        // Flows under half the share are light: they keep what they send
        // and the rest is shared equally by the others. The share depends
        // on which flows are light, so iterate from an equal share of all
        // busy counters; the share only grows, and settles in a few rounds.
        let bins = 1u64 << self.log2;
        let mut competing = linear_count(busy, bins);
        let mut share = cap as f64 / competing.max(1.0);
        for _ in 0..SHARE_ROUNDS {
            let (heavy, light) = split(row, held, (share / 2.0) as u64);
            competing = linear_count(heavy, bins);
            let next = cap.saturating_sub(light) as f64 / competing.max(1.0);
            if next <= share * 1.001 {
                share = share.max(next);
                break;
            }
            share = next;
        }
        self.competing = competing.round() as u32;
        share.min(f64::from(u32::MAX - 1)) as u32
    }

    /// [`stats`](Self::stats) as of `now`: when enough periods passed
    /// without an arrival for the counters to have decayed to nothing, the
    /// next arrival finds no congestion, and so does this.
    pub fn stats_at(&self, now: Timestamp) -> FairStats {
        let periods = self.next.map_or(0, |n| {
            if now >= n {
                now.nanos_since(n) / self.period_ns + 1
            } else {
                0
            }
        });
        if periods.saturating_mul(u64::from(self.shift)) > 32 {
            return FairStats::default();
        }
        self.stats()
    }

    /// The check's state at the last period boundary: the share as a
    /// rate (a steady flow at `r` bytes a second peaks at `r * period *
    /// 2^shift` decayed bytes), the flows it was divided among and the
    /// counters held because Blue signalled their flows.
    pub fn stats(&self) -> FairStats {
        let share_bps = match self.alpha_peak {
            u32::MAX => 0,
            a => {
                let per = u128::from(self.period_ns) << self.shift;
                (u128::from(a) * 8 * 1_000_000_000 / per.max(1)) as u64
            }
        };
        FairStats {
            share_bps,
            competing: self.competing,
            held: self.held_now,
        }
    }
}

/// How many of `row`'s counters are above `light_below` or held (`held`,
/// when not empty, is the row's [`FairRate::signal`] holds), and the sum of
/// the others. Branch-free, with the threshold as a counter's `u32` (none
/// is above `u32::MAX`), so that the loop vectorises: the fair share's
/// rounds run it over a whole row each, once per period, which on a replay
/// faster than real time (capture time, many periods per second of work)
/// was most of the period's cost.
#[inline(always)]
fn split(row: &[u32], held: &[u8], light_below: u64) -> (u64, u64) {
    debug_assert!(row.len() <= 1 << MAX_RATE_LOG2_BINS);
    let t = u32::try_from(light_below).unwrap_or(u32::MAX);
    // The light sum in two u32 halves, low and high 16 bits of each
    // counter: neither can overflow over at most 2^16 counters
    // (`MAX_RATE_LOG2_BINS`), and u32 lanes are what SSE2 adds.
    let (mut heavy, mut lo, mut hi) = (0u32, 0u32, 0u32);
    let mut add = |c: u32, h: u8| {
        let is_heavy = (c > t) | (h != 0);
        let l = if is_heavy { 0 } else { c };
        heavy += u32::from(is_heavy);
        lo += l & 0xFFFF;
        hi += l >> 16;
    };
    if held.len() == row.len() {
        for (&c, &h) in row.iter().zip(held) {
            add(c, h);
        }
    } else {
        for &c in row {
            add(c, 0);
        }
    }
    (u64::from(heavy), u64::from(lo) + (u64::from(hi) << 16))
}

/// Linear counting (Whang, Vander-Zanden, Taylor, 1990): the number of
/// distinct flows that occupy `used` of `bins` bins.
fn linear_count(used: u64, bins: u64) -> f64 {
    let (u, b) = (used as f64, bins as f64);
    if used >= bins {
        return b * b.ln();
    }
    -b * (1.0 - u / b).ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Timestamp {
        Timestamp::from_nanos(v * NS_PER_MS)
    }

    /// Flows with fixed rates (bytes per ms) through the check for `secs`;
    /// returns each flow's admitted bytes per ms.
    fn run(rates: &[u32], link_bytes_per_ms: u64, secs: u64, ecn: bool) -> Vec<f64> {
        let mut f = FairRate::new(2, 12, 100, 3, link_bytes_per_ms * 8 * 1000);
        let mut s = 7u64;
        let mut admitted = vec![0u64; rates.len()];
        let words: Vec<u64> = (0..rates.len())
            .map(|i| kernels::splitmix64(&mut (i as u64 + 1)))
            .collect();
        for t in 0..secs * 1000 {
            f.tick(ms(t));
            for (i, &r) in rates.iter().enumerate() {
                // r bytes per ms as 100-byte packets.
                for _ in 0..r / 100 {
                    let coin = (kernels::splitmix64(&mut s) >> 48) as u16;
                    if !f.arrive(words[i], 100, ecn, coin).drop && t >= 2000 {
                        admitted[i] += 100;
                    }
                }
            }
            // The link sends what it can.
            f.depart(link_bytes_per_ms as u32);
        }
        let measured = (secs * 1000 - 2000) as f64;
        admitted.iter().map(|&b| b as f64 / measured).collect()
    }

    #[test]
    fn demands_that_fit_are_not_judged() {
        let got = run(&[300, 500, 100], 1000, 4, false);
        for (g, want) in got.iter().zip([300.0, 500.0, 100.0]) {
            assert!((g - want).abs() < 1.0, "{got:?}");
        }
    }

    #[test]
    fn flows_over_the_share_get_the_share() {
        // Link 1000 B/ms. 100 B/ms is light (under half the share); the
        // others share the remaining 900: 450 each. The 300 B/ms flow keeps
        // its 300 (the share is a cap, not a reservation), the 800 B/ms
        // flow (under twice the share) gets 450.
        let got = run(&[100, 300, 800], 1000, 6, false);
        assert!((got[0] - 100.0).abs() < 2.0, "{got:?}");
        assert!((got[1] - 300.0).abs() < 3.0, "{got:?}");
        assert!((got[2] - 450.0).abs() < 0.05 * 450.0, "{got:?}");
    }

    /// A flow under half the share is light and keeps what it sends; the
    /// others share the rest. Once Blue signals it and it slows down, it
    /// competes: the share is the equal one whatever its rate. Signalled
    /// but not slowing down, its holds end early and the share is well
    /// above the equal one.
    #[test]
    fn signalled_flows_compete_while_they_respond() {
        #[derive(Clone, Copy, PartialEq)]
        enum Light {
            Unsignalled,
            Responsive,
            Unresponsive,
        }
        let run = |light_flow: Light| {
            let mut f = FairRate::new(2, 12, 100, 3, 1000 * 8 * 1000);
            let (light, heavy) = (11u64, 12u64);
            let mut s = 5u64;
            let mut admitted = 0u64;
            for t in 0..6000u64 {
                f.tick(ms(t));
                // 200 B/ms; from 1 s on, 100 B/ms when it responds to the
                // signals.
                let pkts = if light_flow == Light::Responsive && t >= 1000 {
                    1
                } else {
                    2
                };
                for _ in 0..pkts {
                    f.arrive(light, 100, false, 0);
                }
                f.signal(light, light_flow != Light::Unsignalled);
                for _ in 0..12 {
                    let coin = (kernels::splitmix64(&mut s) >> 48) as u16;
                    if !f.arrive(heavy, 100, false, coin).drop && t >= 2000 {
                        admitted += 100;
                    }
                }
                f.depart(1000);
            }
            admitted as f64 / 4000.0
        };
        // 200 B/ms is light against an equal share of 500: the 1200 B/ms
        // flow gets the other 800.
        let free = run(Light::Unsignalled);
        assert!((free - 800.0).abs() < 0.05 * 800.0, "{free}");
        // Signalled and slowed down, it competes: the equal share, 500.
        let held = run(Light::Responsive);
        assert!((held - 500.0).abs() < 0.05 * 500.0, "{held}");
        // Signalled but steady: held at every other boundary at most (a
        // hold takes its base at one and ends at the next), so the share
        // is well above the equal one.
        let steady = run(Light::Unresponsive);
        assert!(steady > 600.0, "{steady}");
    }

    /// A hold takes its base at the first period boundary and ends at a
    /// later one where the counter is back at the base, or near it and no
    /// longer falling; a flow that slowed down stays held until the hold
    /// lapses.
    #[test]
    fn a_hold_ends_when_its_flow_does_not_slow_down() {
        let mut f = FairRate::new(1, 4, 100, 3, 0);
        let words = [3u64, 5, 6];
        let [steady, dipped, slowed] = words.map(|w| f.index(w, 0));
        assert!(steady != dipped && dipped != slowed && steady != slowed);
        // Each flow's bytes per 10 ms.
        let send = |f: &mut FairRate, t: u64, bytes: [u32; 3]| {
            f.tick(ms(t));
            for (w, b) in words.into_iter().zip(bytes) {
                f.arrive(w, b, false, 0);
            }
        };
        // 1000 B per 10 ms each for 3 s: the counters within 2% of steady.
        let mut t = 0;
        while t < 3000 {
            send(&mut f, t, [1000; 3]);
            t += 10;
        }
        for w in words {
            f.signal(w, true);
        }
        // The first boundary (3 s) takes the bases.
        send(&mut f, t, [1000, 800, 500]);
        t += 10;
        assert!(
            [steady, dipped, slowed]
                .iter()
                .all(|&i| f.held[i] == HOLD_PERIODS - 1)
        );
        assert!([steady, dipped, slowed].iter().all(|&i| f.hold_base[i] > 0));
        // The next: `steady` is back at its base; `dipped` (800 B for a
        // period) and `slowed` (500 B from now on) are under it.
        while t <= 3100 {
            send(&mut f, t, [1000, 800, 500]);
            t += 10;
        }
        assert_eq!((f.held[steady], f.hold_base[steady]), (0, 0), "steady");
        assert_eq!(f.held[dipped], HOLD_PERIODS - 2, "dipped: held");
        assert_eq!(f.held[slowed], HOLD_PERIODS - 2, "slowed: held");
        // `dipped` back at 1000 B: still under its base at the next
        // boundary, but rising and within an eighth of it: released.
        let base = f.hold_base[dipped];
        while t < 3200 {
            send(&mut f, t, [1000, 1000, 500]);
            t += 10;
        }
        let c = f.counts[dipped];
        assert!(c < base && c >= base - base / 8, "{c} against {base}");
        send(&mut f, t, [1000, 1000, 500]);
        t += 10;
        assert_eq!(f.held[dipped], 0, "dipped: released");
        // `slowed` stays held until the hold lapses.
        while t < 3000 + 100 * u64::from(HOLD_PERIODS - 1) {
            send(&mut f, t, [1000, 1000, 500]);
            assert!(f.held[slowed] > 0, "slowed at {t} ms");
            t += 10;
        }
        send(&mut f, t, [1000, 1000, 500]);
        assert_eq!((f.held[slowed], f.hold_base[slowed]), (0, 0), "lapsed");
    }

    #[test]
    fn a_signal_holds_for_its_periods_then_lapses() {
        let mut f = FairRate::new(1, 4, 100, 3, 0);
        f.tick(ms(0));
        f.signal(9, false);
        assert!(
            (0..f.held.len()).all(|i| f.hold(i) == 0),
            "no signal, no hold"
        );
        f.signal(9, true);
        let i = f.index(9, 0);
        assert_eq!(f.hold(i), HOLD_PERIODS);
        f.tick(ms(100));
        assert_eq!(f.held[i], HOLD_PERIODS - 1);
        f.tick(ms(100 * (u64::from(HOLD_PERIODS) + 5)));
        assert_eq!(f.held[i], 0);
    }

    /// The reported share is the rate a flow is held to, and the
    /// competing flows are the ones over half of it.
    #[test]
    fn stats_report_the_share_as_a_rate() {
        // Link 1000 B/ms; five flows of 300 B/ms and one of 50: the light
        // one keeps its 50, the others share 950: 190 B/ms, 1.52 Mbit/s.
        let mut f = FairRate::new(2, 12, 100, 3, 1000 * 8 * 1000);
        assert_eq!(f.stats(), FairStats::default(), "not congested yet");
        for t in 0..6000u64 {
            f.tick(ms(t));
            for w in 1..=5u64 {
                for _ in 0..3 {
                    f.arrive(w, 100, false, 0);
                }
            }
            f.arrive(6, 50, false, 0);
            f.depart(1000);
        }
        let s = f.stats();
        assert!((s.share_bps as f64 - 1.52e6).abs() < 0.03 * 1.52e6, "{s:?}");
        assert_eq!((s.competing, s.held), (5, 0), "{s:?}");
        f.signal(6, true);
        f.tick(ms(6000));
        assert_eq!(f.stats().held, 1, "held from the next boundary");
    }

    #[test]
    fn equal_flows_over_the_link_share_it_equally() {
        // Five flows of 300 B/ms on 1000 B/ms: 200 each.
        let got = run(&[300; 5], 1000, 6, false);
        for g in &got {
            assert!((g - 200.0).abs() < 0.05 * 200.0, "{got:?}");
        }
    }

    #[test]
    fn the_share_grows_while_the_port_is_short() {
        // Four flows of 500 B/ms on 1000 B/ms; a fifth of what the check
        // admits is lost after it (as Blue's drops would be). Held to the
        // equal share, the port would send 800 B/ms; the share grows until
        // it is full.
        let mut f = FairRate::new(2, 12, 100, 3, 1000 * 8 * 1000);
        let mut s = 11u64;
        let words: Vec<u64> = (1..=4u64)
            .map(|i| kernels::splitmix64(&mut { i }))
            .collect();
        let (mut sent, mut credit) = (0u64, 0u64);
        for t in 0..20_000u64 {
            f.tick(ms(t));
            for &w in &words {
                for _ in 0..5 {
                    let coin = (kernels::splitmix64(&mut s) >> 48) as u16;
                    let keep = !kernels::splitmix64(&mut s).is_multiple_of(5);
                    if !f.arrive(w, 100, false, coin).drop && keep {
                        credit += 100;
                    }
                }
            }
            // The link sends what it was given, up to its rate.
            let out = credit.min(1000);
            credit -= out;
            f.depart(out as u32);
            if t >= 10_000 {
                sent += out;
            }
        }
        let use_ = sent as f64 / 10_000.0 / 1000.0;
        assert!(use_ > 0.95, "link use {use_}");
    }

    /// The verdict as it reads in the module docs (a saturating
    /// difference), against the thresholds `arrive` compares with: equal on
    /// every share, rate, coin and ECN capability tried, the edges included.
    #[test]
    fn verdict_equals_the_documented_rule() {
        let reference = |rate: u64, alpha: u64, coin: u16, ecn: bool| {
            let refuse = u64::from(coin) * rate < rate.saturating_sub(alpha) << 16;
            let markable = ecn & (rate < 2 * alpha);
            RateVerdict {
                under: rate <= alpha,
                mark: refuse & markable,
                drop: refuse & !markable,
                capped: rate > alpha && !ecn,
                // A fresh sketch: the count before the packet is 0.
                near: 0 < FLOOR_OVER * alpha,
            }
        };
        let mut s = 5u64;
        let edges = [
            0u32,
            1,
            2,
            999,
            1000,
            1001,
            u32::MAX / 2,
            u32::MAX - 1,
            u32::MAX,
        ];
        for i in 0..200_000u32 {
            let r = kernels::splitmix64(&mut s);
            let alpha = match i % 3 {
                0 => edges[(r % edges.len() as u64) as usize],
                1 => (r >> 32) as u32,
                _ => (r >> 48) as u32,
            };
            // A rate near the share, near twice it, or anywhere.
            let rate = match (r >> 8) % 4 {
                0 => alpha.wrapping_add((r >> 40) as u32 % 5).wrapping_sub(2),
                1 => alpha
                    .wrapping_mul(2)
                    .wrapping_add((r >> 40) as u32 % 5)
                    .wrapping_sub(2),
                2 => edges[((r >> 16) % edges.len() as u64) as usize],
                _ => kernels::splitmix64(&mut s) as u32,
            }
            .max(1);
            let coin = match (r >> 4) % 4 {
                0 => 0,
                1 => u16::MAX,
                _ => (r >> 20) as u16,
            };
            let ecn = r & 1 == 0;
            // A fresh sketch counts the arrival at its length.
            let mut f = FairRate::new(2, 4, 100, 3, 0);
            f.set_alpha(alpha);
            let got = f.arrive(r, rate, ecn, coin);
            let want = reference(u64::from(rate), u64::from(alpha), coin, ecn);
            assert_eq!(got, want, "rate {rate} alpha {alpha} coin {coin} ecn {ecn}");
        }
    }

    #[test]
    fn ecn_capable_packets_are_marked_under_twice_the_share() {
        let mut f = FairRate::new(2, 10, 100, 3, 8_000_000);
        let w = 0x1234_5678_9abc_def0;
        // Force a share: 100 bytes, and a flow counted at 150.
        f.set_alpha(100);
        f.alpha_peak = 100;
        let mut verdicts = Vec::new();
        for coin in [0u16, 65535] {
            let mut g = f.clone();
            verdicts.push(g.arrive(w, 150, true, coin));
        }
        assert_eq!(verdicts, [RateVerdict::MARK, RateVerdict::OVER]);
        let mut g = f.clone();
        // ECN-capable over twice the share: dropped, not capped (Blue's
        // rules still apply to it).
        let v = g.arrive(w, 250, true, 0);
        assert!(v.drop && !v.mark && !v.capped, "{v:?}");
        let mut g = f.clone();
        assert_eq!(g.arrive(w, 150, false, 0), RateVerdict::DROP);
    }

    #[test]
    fn unresponsive_flows_get_the_share_and_fill_the_link() {
        // Every flow at 3x its share: each gets the share, the link full.
        let got = run(&[600; 5], 1000, 6, false);
        for g in &got {
            assert!((g - 200.0).abs() < 0.05 * 200.0, "{got:?}");
        }
        // 300 B/ms keeps its rate; the 5000 B/ms flow gets the share (500,
        // both flows being over half an equal share).
        let got = run(&[300, 5000], 1000, 6, false);
        assert!((got[0] - 300.0).abs() < 3.0, "{got:?}");
        assert!((got[1] - 500.0).abs() < 0.05 * 500.0, "{got:?}");
    }

    #[test]
    fn conservative_update_never_underestimates() {
        let mut f = FairRate::new(2, 4, 100, 3, 0);
        let mut truth = std::collections::HashMap::new();
        let mut s = 3u64;
        for _ in 0..5000 {
            let flow = kernels::splitmix64(&mut s) % 40;
            let w = kernels::splitmix64(&mut (flow + 100));
            let len = 64 + (kernels::splitmix64(&mut s) % 1400) as u32;
            f.arrive(w, len, false, u16::MAX);
            *truth.entry(w).or_insert(0u64) += u64::from(len);
        }
        for (&w, &t) in &truth {
            assert!(u64::from(f.estimate(w)) >= t);
        }
    }

    #[test]
    fn counters_decay_by_the_shift_each_period() {
        let mut f = FairRate::new(1, 4, 100, 3, 0);
        f.tick(ms(0));
        f.arrive(5, 800, false, u16::MAX);
        f.tick(ms(100));
        assert_eq!(f.estimate(5), 700);
        f.tick(ms(300));
        // Two more periods: 700 -> 613 -> 537.
        assert_eq!(f.estimate(5), 537);
        f.tick(ms(10_000));
        assert_eq!(f.estimate(5), 0, "a long silence forgets everything");
    }

    /// `split` against the plain loop over u64 values, on rows of random
    /// and extreme counters (up to 2^16 of `u32::MAX`, where the halves'
    /// sums are at their largest) and thresholds up to and past `u32::MAX`.
    #[test]
    fn split_is_the_plain_count_and_sum() {
        let plain = |row: &[u32], t: u64| {
            row.iter().fold((0u64, 0u64), |(h, l), &c| {
                if u64::from(c) > t {
                    (h + 1, l)
                } else {
                    (h, l + u64::from(c))
                }
            })
        };
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let full = vec![u32::MAX; 1 << MAX_RATE_LOG2_BINS];
        let mixed: Vec<u32> = (0..4096)
            .map(|i| match i % 4 {
                0 => 0,
                1 => next() as u32,
                2 => (next() % 5000) as u32,
                _ => u32::MAX - (next() % 3) as u32,
            })
            .collect();
        // Every third counter held: heavy whatever its value.
        let held: Vec<u8> = (0..mixed.len()).map(|i| u8::from(i % 3 == 0)).collect();
        let unheld: Vec<u32> = mixed
            .iter()
            .zip(&held)
            .map(|(&c, &h)| if h == 0 { c } else { 0 })
            .collect();
        let n_held = held.iter().filter(|&&h| h != 0).count() as u64;
        for row in [&full[..], &mixed[..], &[][..]] {
            let mut ts = vec![0, 1, 4999, 1 << 31, u64::from(u32::MAX) - 1];
            ts.extend([u64::from(u32::MAX), u64::from(u32::MAX) + 1, u64::MAX]);
            ts.extend((0..20).map(|_| next() >> 31));
            for t in ts {
                assert_eq!(split(row, &[], t), plain(row, t), "threshold {t}");
                if row.len() == mixed.len() {
                    // The held counters heavy whatever their value: zeroed
                    // in `unheld`, where they are never above `t`.
                    let (h, l) = plain(&unheld, t);
                    assert_eq!(split(row, &held, t), (h + n_held, l), "threshold {t}");
                }
            }
        }
    }
}
