//! The egress queue of a port: a FIFO with a packet limit, drained by a
//! token-bucket shaper at a configured rate (what `tbf` or an `htb` class
//! does under `sfb` in a Linux setup).
//!
//! # Time
//!
//! The queue never reads a clock: [`EgressQueue::enqueue`] and
//! [`EgressQueue::dequeue`] take `now` ([`Timestamp`], nanoseconds), which on
//! replay is the capture's time, so every result is deterministic.
//!
//! # The shaper
//!
//! Tokens are bytes. The bucket holds at most `burst_bytes` and fills at
//! `rate_bps / 8` bytes per second, continuously: the credit is kept
//! exactly, as an integer count of `1 / (8 * 10^9)` bytes (one bit-second
//! per nanosecond), so no fraction of a token is ever lost to rounding and
//! the long-run output is exactly `rate * t + burst`. The head packet leaves
//! at the first instant the bucket holds its length; that instant is
//! computed, not polled: [`EgressQueue::next_departure`] says when it will
//! be, and a [`Departure`] carries it. A `dequeue(now)` called late (once per
//! batch, say) still reports every packet at the time the shaper released it,
//! so sojourn times do not depend on how often the owner polls. A driver that
//! calls `dequeue` exactly at `next_departure()` sees `departed == now`.
//!
//! A packet longer than `burst_bytes` could never collect its tokens; it
//! waits until the bucket holds its length instead (the bucket may grow past
//! `burst_bytes` for that packet only), so the queue never stalls and the
//! output stays within `rate * t + max(burst, largest packet)`.
//!
//! `rate_bps == 0` means unshaped: a packet leaves at the time it arrived.
//!
//! # Sojourn
//!
//! Every [`Departure`] records its enqueue and departure times;
//! [`Departure::sojourn_ns`] is their difference, and [`EgressStats`] keeps
//! the count, sum and maximum.
//!
//! # Layout
//!
//! The queue sits on SFB's per-packet path, so its shape is chosen for
//! instructions and stalls: the FIFO is a power-of-two ring of `Copy`
//! slots (one head, one length; an `SfbQueue` keeps its tags in the same
//! slots, so it has no second ring to keep in step); the head's departure
//! time is computed when the packet becomes the head, so a dequeue that
//! finds nothing due is one comparison; a backlogged head (ready when the
//! previous packet left, less than a nanosecond's credit left) gets its
//! wait from its length's split by the rate, cached for the last length,
//! with one subtraction and a carry instead of a division on the chain from
//! one departure to the next (the general case divides with a reciprocal
//! multiply); the counters are plain adds, and the backlog is
//! `bytes_in - bytes_out` rather than a field a dequeue writes next to a
//! counter an enqueue reads (a store the compiler paired with its
//! neighbour into one wide store stalled the next load). The departure
//! times equal a 128-bit reference model of the bucket (property test
//! `departures_equal_the_reference`).

use serde::Deserialize;

use crate::clock::Timestamp;
use crate::packet::DropReason;

/// [`EgressQueue::due`] of an empty queue: never due.
const IDLE: (Timestamp, u64) = (Timestamp::from_nanos(u64::MAX), 0);

/// Token units per byte: 8 bits x 10^9 ns. One nanosecond at `rate_bps`
/// adds `rate_bps` units.
const UNITS_PER_BYTE: u64 = 8 * 1_000_000_000;

/// Egress queue settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EgressConfig {
    /// Drain rate in bits per second; 0 for unshaped.
    pub rate_bps: u64,
    /// Bucket depth in bytes (the most that leaves back to back after idling).
    pub burst_bytes: u64,
    /// The most packets in the queue.
    pub limit: usize,
}

impl Default for EgressConfig {
    /// 1 Gbit/s, a burst of ten full Ethernet frames (15140 bytes), 1000
    /// packets (Linux's default `txqueuelen`).
    fn default() -> Self {
        EgressConfig {
            rate_bps: 1_000_000_000,
            burst_bytes: 10 * 1514,
            limit: 1000,
        }
    }
}

/// A rate in `tc`'s units: `20Mbit`, `1Gbit`, `64Kbit`, `800bit`. The
/// stats text prints a shaper's rate and the SFB fair share with it.
pub fn fmt_rate(bps: u64) -> String {
    match bps {
        _ if bps >= 1_000_000_000 && bps.is_multiple_of(1_000_000) => {
            format!("{}Gbit", bps as f64 / 1e9)
        }
        _ if bps >= 1_000_000 => format!("{}Mbit", bps as f64 / 1e6),
        _ if bps >= 1_000 => format!("{}Kbit", bps as f64 / 1e3),
        _ => format!("{bps}bit"),
    }
}

/// A token bucket in exact integer units (see the module docs), in 64 bits:
/// exact for bursts and packets up to 2.3 GB (larger ones saturate).
#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// Units added per nanosecond (= bits per second).
    rate: u64,
    /// Depth in units.
    cap: u64,
    /// Credit at `at`.
    tokens: u64,
    /// The instant `tokens` refers to.
    at: Timestamp,
    /// `floor((2^64 - 1) / rate)` (0 when unshaped): divides by `rate` with
    /// a multiply (see [`div_rate`](Self::div_rate)).
    inv: u64,
    /// The last packet length's [`Split`].
    split: Split,
}

/// What the bucket works out for a packet length, kept for the last length
/// seen (packets of one length often follow each other).
#[derive(Debug, Clone, Copy)]
struct Split {
    len: u32,
    /// Units needed.
    need: u64,
    /// `need / rate` and `need % rate` (`rate > 0`).
    q: u64,
    r: u64,
    /// The credit the bucket can keep after such a packet leaves:
    /// `max(cap, need) - need`.
    room: u64,
}

impl Bucket {
    fn new(cfg: &EgressConfig) -> Self {
        let cap = cfg.burst_bytes.saturating_mul(UNITS_PER_BYTE);
        Bucket {
            rate: cfg.rate_bps,
            cap,
            tokens: cap,
            at: Timestamp::ZERO,
            inv: u64::MAX.checked_div(cfg.rate_bps).unwrap_or(0),
            split: Split {
                len: 0,
                need: 0,
                q: 0,
                r: 0,
                room: cap,
            },
        }
    }

    /// The [`Split`] of `len` (`rate > 0`).
    #[inline(always)]
    fn split(&mut self, len: u32) -> Split {
        if self.split.len != len {
            let need = u64::from(len).saturating_mul(UNITS_PER_BYTE);
            let (q, r) = self.div_rate(need);
            self.split = Split {
                len,
                need,
                q,
                r,
                room: self.cap.max(need) - need,
            };
        }
        self.split
    }

    /// `(x / rate, x % rate)` exactly, for `rate > 0`, without a hardware
    /// divide (it sits on the chain from one departure to the next).
    /// `inv` underestimates `2^64 / rate` by less than 2, so the estimate
    /// `x * inv / 2^64` is at most 2 below the quotient; the remainder fixes it.
    #[inline(always)]
    fn div_rate(&self, x: u64) -> (u64, u64) {
        let mut q = ((u128::from(x) * u128::from(self.inv)) >> 64) as u64;
        let mut r = x - q * self.rate;
        while r >= self.rate {
            q += 1;
            r -= self.rate;
        }
        (q, r)
    }

    /// When a packet needing `len` bytes, eligible from `ready`, leaves, and
    /// the credit left after it (`rate > 0`).
    #[inline(always)]
    fn departure(&mut self, ready: Timestamp, len: u32) -> (Timestamp, u64) {
        let Split {
            need,
            q: nq,
            r: nr,
            room,
            ..
        } = self.split(len);
        if ready <= self.at && self.tokens < self.rate && self.tokens < need {
            // A backlog: the packet was waiting when the previous one left,
            // which left less than a nanosecond's credit (`tokens <= cap`
            // always holds after a departure). The wait for `need - tokens`
            // follows from `need`'s split without a division, which keeps
            // the chain from one departure to the next short: with
            // `need = nq * rate + nr` and `tokens < rate`, `nq` ns bring the
            // credit to `tokens - nr + need`; if that is short of `need`
            // (`tokens < nr`), one more ns adds `rate`.
            let (over, short) = self.tokens.overflowing_sub(nr);
            let (wait, over) = if short {
                (nq + 1, over.wrapping_add(self.rate))
            } else {
                (nq, over)
            };
            return (self.at.add_nanos(wait), over.min(room));
        }
        let t0 = ready.max(self.at);
        let gained = t0.nanos_since(self.at).saturating_mul(self.rate);
        let tokens = self.tokens.saturating_add(gained).min(need + room);
        if tokens >= need {
            return (t0, tokens - need);
        }
        // rate > 0 here: an unshaped queue never reaches this point. After
        // `wait` ns the credit is `tokens + wait * rate`, which is `need`
        // plus `rate - r` (or `need` exactly when `r == 0`); the bucket
        // caps it at `cap`.
        let (q, r) = self.div_rate(need - tokens);
        let (wait, over) = if r == 0 {
            (q, 0)
        } else {
            (q + 1, self.rate - r)
        };
        (t0.add_nanos(wait), over.min(room))
    }
}

/// A packet that left the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Departure<T> {
    /// What was queued.
    pub item: T,
    /// Its length in bytes.
    pub len: u32,
    /// When it was enqueued.
    pub enqueued: Timestamp,
    /// When the shaper released it (at most the `now` of the dequeue call).
    pub departed: Timestamp,
}

impl<T> Departure<T> {
    /// Time spent in the queue, in nanoseconds.
    #[inline]
    pub fn sojourn_ns(&self) -> u64 {
        self.departed.nanos_since(self.enqueued)
    }
}

/// Counters of an [`EgressQueue`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EgressStats {
    /// Packets accepted.
    pub enqueued: u64,
    /// Bytes accepted.
    pub bytes_in: u64,
    // The order below keeps two counters that a dequeue adds to apart:
    // side by side, the compiler pairs their adds in one vector add, six
    // instructions where two do.
    /// Packets that left.
    pub dequeued: u64,
    /// Longest sojourn time, ns.
    pub sojourn_max_ns: u64,
    /// Sum of the sojourn times of the packets that left, ns (wraps only
    /// after 584 years of summed sojourn).
    pub sojourn_sum_ns: u64,
    /// Packets refused because the queue held `limit` packets.
    pub overlimit: u64,
    /// Bytes that left.
    pub bytes_out: u64,
}

impl EgressStats {
    /// Mean sojourn time in ns (0 before the first departure).
    pub fn mean_sojourn_ns(&self) -> f64 {
        if self.dequeued == 0 {
            0.0
        } else {
            self.sojourn_sum_ns as f64 / self.dequeued as f64
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Slot<T> {
    item: T,
    len: u32,
    enqueued: Timestamp,
}

/// A FIFO of up to `limit` packets drained by a token-bucket shaper.
///
/// The FIFO is a ring of slots, a power of two of them, that doubles when
/// full (`limit` bounds it). Items are `Copy` handles (a buffer index, a
/// flow and sequence number), so a slot is read out without being cleared.
#[derive(Debug, Clone)]
pub struct EgressQueue<T> {
    cfg: EgressConfig,
    slots: Vec<Slot<T>>,
    /// The oldest packet's slot.
    head: usize,
    /// Packets queued.
    len: usize,
    bucket: Bucket,
    /// The head's departure and the credit after it, computed when the
    /// packet becomes the head (arrivals behind it do not change it);
    /// [`IDLE`] when the queue is empty. Kept ready so that a dequeue that
    /// finds nothing due is one comparison.
    due: (Timestamp, u64),
    stats: EgressStats,
}

impl<T> EgressQueue<T> {
    /// The settings.
    pub fn config(&self) -> &EgressConfig {
        &self.cfg
    }

    /// Packets queued.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no packet is queued.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes queued.
    #[inline]
    pub fn backlog_bytes(&self) -> u64 {
        self.stats.bytes_in - self.stats.bytes_out
    }

    /// The counters.
    pub fn stats(&self) -> &EgressStats {
        &self.stats
    }

    /// When the link went idle, for an empty queue: the end of the last
    /// departure's transmission at the shaped rate (the departure itself on
    /// an unshaped queue; [`Timestamp::ZERO`] before any). Meaningless
    /// while packets are queued.
    #[inline]
    pub fn idle_since(&self) -> Timestamp {
        // The bucket's split is the last head's, the packet that left last
        // once the queue is empty; its quotient is its time on the wire.
        self.bucket.at.add_nanos(self.bucket.split.q)
    }

    /// When the head packet leaves (`None` when empty). Later arrivals do
    /// not change it.
    #[inline]
    pub fn next_departure(&self) -> Option<Timestamp> {
        (self.len != 0).then_some(self.due.0)
    }
}

impl<T: Copy + Default> EgressQueue<T> {
    /// An empty queue with a full bucket.
    pub fn new(cfg: EgressConfig) -> Self {
        EgressQueue {
            cfg,
            slots: vec![Slot::default(); cfg.limit.clamp(16, 1 << 16).next_power_of_two()],
            head: 0,
            len: 0,
            bucket: Bucket::new(&cfg),
            due: IDLE,
            stats: EgressStats::default(),
        }
    }

    /// Appends a packet of `len` bytes at `now`; [`DropReason::QueueFull`]
    /// (and the item dropped) when the queue holds `limit` packets.
    #[inline(always)]
    pub fn enqueue(&mut self, item: T, len: u32, now: Timestamp) -> Result<(), DropReason> {
        if self.len >= self.cfg.limit {
            self.stats.overlimit = self.stats.overlimit.saturating_add(1);
            return Err(DropReason::QueueFull);
        }
        if self.len == self.slots.len() {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        if let Some(s) = self.slots.get_mut((self.head + self.len) & mask) {
            *s = Slot {
                item,
                len,
                enqueued: now,
            };
        }
        self.len += 1;
        if self.len == 1 {
            self.due = head_departure(&mut self.bucket, now, len);
        }
        // Counters are u64: they cannot wrap in practice; plain adds keep
        // the per-packet path short. (The backlog is `bytes_in - bytes_out`
        // rather than a field of its own: the compiler pairs the adds of an
        // enqueue into one 16-byte store, and a field that a dequeue also
        // wrote 8 bytes wide made every following enqueue's 16-byte load
        // miss store-to-load forwarding.)
        self.stats.enqueued += 1;
        self.stats.bytes_in += u64::from(len);
        Ok(())
    }

    /// The head packet if the shaper has released it by `now`.
    #[inline]
    pub fn dequeue(&mut self, now: Timestamp) -> Option<Departure<T>> {
        self.dequeue_with(now, |_| {})
    }

    /// [`dequeue`](Self::dequeue), showing `f` the item in its slot first
    /// (read in place: its bytes need not be copied out).
    #[inline(always)]
    pub(crate) fn dequeue_with(
        &mut self,
        now: Timestamp,
        f: impl FnOnce(&T),
    ) -> Option<Departure<T>> {
        let (departed, tokens) = self.due;
        if departed > now {
            return None;
        }
        // An empty queue is due at the end of time, and may be asked then.
        if self.len == 0 {
            return None;
        }
        let mask = self.slots.len() - 1;
        let slot = self.slots.get(self.head)?;
        f(&slot.item);
        let slot = *slot;
        self.head = (self.head + 1) & mask;
        self.len -= 1;
        self.bucket.tokens = tokens;
        self.bucket.at = departed;
        self.due = match self.slots.get(self.head) {
            Some(next) if self.len != 0 => {
                head_departure(&mut self.bucket, next.enqueued, next.len)
            }
            _ => IDLE,
        };
        let d = Departure {
            item: slot.item,
            len: slot.len,
            enqueued: slot.enqueued,
            departed,
        };
        let s = &mut self.stats;
        let sj = d.sojourn_ns();
        s.dequeued += 1;
        s.bytes_out += u64::from(d.len);
        // Wrapping, not checked: no input may panic the queue.
        s.sojourn_sum_ns = s.sojourn_sum_ns.wrapping_add(sj);
        s.sojourn_max_ns = s.sojourn_max_ns.max(sj);
        Some(d)
    }

    /// Doubles the full ring, the queued slots moved to its start.
    #[cold]
    fn grow(&mut self) {
        let cap = self.slots.len();
        self.slots.rotate_left(self.head);
        self.slots.resize(cap * 2, Slot::default());
        self.head = 0;
    }
}

/// The departure of a head packet of `len` bytes enqueued at `enqueued`,
/// and the credit after it.
#[inline(always)]
fn head_departure(b: &mut Bucket, enqueued: Timestamp, len: u32) -> (Timestamp, u64) {
    if b.rate == 0 {
        // Unshaped: leave on arrival (never before the previous packet).
        (enqueued.max(b.at), 0)
    } else {
        b.departure(enqueued, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ns: u64) -> Timestamp {
        Timestamp::from_nanos(ns)
    }

    #[test]
    fn unshaped_leaves_on_arrival() {
        let mut q = EgressQueue::new(EgressConfig {
            rate_bps: 0,
            burst_bytes: 0,
            limit: 4,
        });
        q.enqueue(1u32, 1500, t(10)).unwrap();
        q.enqueue(2u32, 1500, t(20)).unwrap();
        assert_eq!(q.next_departure(), Some(t(10)));
        let d = q.dequeue(t(100)).unwrap();
        assert_eq!((d.item, d.departed, d.sojourn_ns()), (1, t(10), 0));
        let d = q.dequeue(t(100)).unwrap();
        assert_eq!((d.item, d.departed), (2, t(20)));
        assert!(q.dequeue(t(100)).is_none());
    }

    #[test]
    fn oversized_packet_does_not_stall() {
        // 8000 bit/s = 1000 byte/s, burst 100 bytes, one 1000-byte packet.
        let mut q = EgressQueue::new(EgressConfig {
            rate_bps: 8000,
            burst_bytes: 100,
            limit: 4,
        });
        q.enqueue((), 1000, t(0)).unwrap();
        // The bucket holds 100 bytes at t = 0 and needs 900 more: 0.9 s.
        assert_eq!(q.next_departure(), Some(t(900_000_000)));
        assert!(q.dequeue(t(899_999_999)).is_none());
        assert_eq!(
            q.dequeue(t(1_000_000_000)).unwrap().departed,
            t(900_000_000)
        );
    }

    #[test]
    fn div_rate_is_exact() {
        let xs = [0, 1, 7, 999, 1 << 32, u64::MAX / 3, u64::MAX - 1, u64::MAX];
        for rate in [
            1,
            3,
            8000,
            1_000_000_000,
            999_999_937,
            u64::MAX / 2,
            u64::MAX,
        ] {
            let b = Bucket::new(&EgressConfig {
                rate_bps: rate,
                burst_bytes: 0,
                limit: 1,
            });
            for x in xs {
                assert_eq!(b.div_rate(x), (x / rate, x % rate), "{x} / {rate}");
            }
        }
    }

    #[test]
    fn ring_grows_in_order() {
        // Room for 2^16 slots at first; the head is moved off slot 0
        // before the ring fills and doubles.
        let mut q = EgressQueue::new(EgressConfig {
            rate_bps: 0,
            burst_bytes: 0,
            limit: 100_000,
        });
        let n = 70_000u32;
        for k in 0..10 {
            q.enqueue(k, 1, t(0)).unwrap();
        }
        for k in 0..5 {
            assert_eq!(q.dequeue(t(0)).unwrap().item, k);
        }
        for k in 10..n {
            q.enqueue(k, 1, t(1)).unwrap();
        }
        assert_eq!(q.len(), n as usize - 5);
        let out: Vec<u32> = std::iter::from_fn(|| q.dequeue(t(1)).map(|d| d.item)).collect();
        assert_eq!(out, (5..n).collect::<Vec<_>>());
        assert_eq!(q.stats().dequeued, u64::from(n));
    }

    #[test]
    fn limit_refuses() {
        let mut q = EgressQueue::new(EgressConfig {
            rate_bps: 1,
            burst_bytes: 0,
            limit: 2,
        });
        assert!(q.enqueue((), 1, t(0)).is_ok());
        assert!(q.enqueue((), 1, t(0)).is_ok());
        assert_eq!(q.enqueue((), 1, t(0)), Err(DropReason::QueueFull));
        assert_eq!(q.stats().overlimit, 1);
        assert_eq!(q.backlog_bytes(), 2);
    }

    /// The token bucket of the module docs, in 128-bit arithmetic with no
    /// shortcut: the departure of a `len`-byte packet ready at `ready`, and
    /// the credit after it.
    fn reference(
        cfg: &EgressConfig,
        (tokens, at): (u128, u64),
        ready: u64,
        len: u32,
    ) -> ((u128, u64), u64) {
        let rate = u128::from(cfg.rate_bps);
        let need = u128::from(len) * u128::from(UNITS_PER_BYTE);
        let cap = (u128::from(cfg.burst_bytes) * u128::from(UNITS_PER_BYTE)).max(need);
        let t0 = ready.max(at);
        let tok = (tokens + u128::from(t0 - at) * rate).min(cap);
        let wait = if tok >= need {
            0
        } else {
            (need - tok).div_ceil(rate)
        };
        let tok = (tok + wait * rate).min(cap) - need;
        let t = t0 + wait as u64;
        ((tok, t), t)
    }

    proptest::proptest! {
        /// Departure times equal the reference model's on random arrivals:
        /// backlogs (the division-free path), idle gaps, lengths above the
        /// burst, slow and fast rates.
        #[test]
        fn departures_equal_the_reference(
            rate in proptest::prop_oneof![1u64..100, 8000u64..10_000_000, 999_000_000u64..10_000_000_000],
            burst in 0u64..20_000,
            arrivals in proptest::collection::vec(
                (proptest::prop_oneof![0u64..2000, 0u64..50_000_000], proptest::prop_oneof![proptest::strategy::Just(1000u32), 1u32..9000]),
                1..200,
            ),
        ) {
            let cfg = EgressConfig { rate_bps: rate, burst_bytes: burst, limit: 64 };
            let mut q = EgressQueue::new(cfg);
            let mut got = Vec::new();
            let mut now = 0u64;
            let mut sent = Vec::new();
            for (k, &(gap, len)) in arrivals.iter().enumerate() {
                now += gap;
                while let Some(d) = q.dequeue(t(now)) {
                    got.push((d.item, d.departed.as_nanos()));
                }
                if q.enqueue(k, len, t(now)).is_ok() {
                    sent.push((k, now, len));
                }
            }
            while let Some(d) = q.dequeue(t(u64::MAX)) {
                got.push((d.item, d.departed.as_nanos()));
            }
            // The reference: FIFO order, each packet ready at its arrival.
            let mut state = (u128::from(burst) * u128::from(UNITS_PER_BYTE), 0u64);
            let want: Vec<(usize, u64)> = sent
                .iter()
                .map(|&(k, ready, len)| {
                    let (next, dep) = reference(&cfg, state, ready, len);
                    state = next;
                    (k, dep)
                })
                .collect();
            proptest::prop_assert_eq!(got, want);
        }
    }
}
