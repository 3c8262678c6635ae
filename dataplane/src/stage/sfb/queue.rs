//! [`SfbQueue`]: SFB in front of a shaped [`EgressQueue`], one FIFO holding
//! each packet with its tag; per-packet [`enqueue`](SfbQueue::enqueue) and
//! [`dequeue`](SfbQueue::dequeue), and the batched
//! [`offer_batch`](SfbQueue::offer_batch), each on the fused path or the
//! general one.

use crate::clock::Timestamp;
use crate::flow::FlowKey;
use crate::packet::DropReason;
use crate::stage::egress::{Departure, EgressConfig, EgressQueue};

use super::algorithm::{Checked, Sfb, Traits};
use super::config::{SfbConfig, SfbConfigError};
use super::keys::SfbKey;
use super::rate::{ANY_ROWS, Backlog};

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
    /// Per set, its word: the offset word on the fused path, whose bytes a
    /// departure reads in place ([`Sfb::lower_queued`]); packed indices
    /// otherwise.
    words: [u64; 2],
    sets: u8,
}

impl<T: Copy + Default> SfbQueue<T> {
    /// SFB with `sfb`, draining at `egress`'s rate.
    pub fn new(sfb: SfbConfig, egress: EgressConfig) -> Result<Self, SfbConfigError> {
        Ok(SfbQueue {
            sfb: {
                let mut s = Sfb::new(sfb)?;
                s.set_link_rate(egress.rate_bps);
                s
            },
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

    /// Advances SFB's clocks to `now` ([`Sfb::tick_queue`] with this
    /// queue's backlog); call before hashing a batch.
    #[inline]
    pub fn tick(&mut self, now: Timestamp) {
        let backlog = Backlog {
            bytes: self.queue.backlog_bytes(),
            bytes_in: self.queue.stats().bytes_in,
        };
        self.sfb.tick_queue(now, Some(backlog));
    }

    /// SFB's snapshot at `now` ([`Sfb::stats_idle`]: while the link is
    /// idle, the probabilities as the idle time has decayed them). A queue
    /// not drained to `now` counts as idle from when its last packet would
    /// have left with an empty bucket (an upper bound).
    pub fn stats(&self, now: Timestamp) -> super::SfbStats {
        let q = &self.queue;
        let idle_since = match (q.next_departure(), q.config().rate_bps) {
            (None, _) => Some(q.idle_since()),
            (Some(_), 0) => None,
            (Some(head), rate) => {
                let ns = u128::from(q.backlog_bytes()) * 8_000_000_000 / u128::from(rate);
                Some(head.add_nanos(u64::try_from(ns).unwrap_or(u64::MAX)))
            }
        };
        self.sfb.stats_idle(now, idle_since)
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
        let (sfb, queue) = (&mut self.sfb, &mut self.queue);
        match (sfb.fused, sfb.path_rows()) {
            (true, 0) => offer::<T, true, 0>(sfb, queue, &arrival, flow),
            (true, 2) => offer::<T, true, 2>(sfb, queue, &arrival, flow),
            (true, _) => offer::<T, true, ANY_ROWS>(sfb, queue, &arrival, flow),
            (false, 0) => offer::<T, false, 0>(sfb, queue, &arrival, flow),
            (false, 2) => offer::<T, false, 2>(sfb, queue, &arrival, flow),
            (false, _) => offer::<T, false, ANY_ROWS>(sfb, queue, &arrival, flow),
        }
    }

    /// The head packet if the shaper released it by `now`.
    #[inline]
    pub fn dequeue(&mut self, now: Timestamp) -> Option<Departure<T>> {
        let (sfb, queue) = (&mut self.sfb, &mut self.queue);
        let fair = sfb.fair;
        if sfb.fused {
            take::<T, true>(sfb, queue, now, fair)
        } else {
            take::<T, false>(sfb, queue, now, fair)
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
    /// [`Feed::departed`]) and then [`enqueue`](Self::enqueue) (the
    /// outcome to [`Feed::verdict`]). Equal, packet for packet, to those
    /// calls; faster, because the loop is compiled for the kernel's
    /// backend, which inlines the kernel into it
    /// ([`kernels::sfb::Kernel::run`]), the fused path is chosen once, and
    /// the caller makes each arrival when it is offered and acts on each
    /// verdict and departure at once, with no list of them in between.
    #[inline]
    pub fn offer_batch(&mut self, feed: &mut impl Feed<T>) {
        let kernel = self.sfb.kernel;
        kernel.run(
            #[inline(always)]
            || match (self.sfb.fused, self.sfb.path_rows()) {
                (true, 0) => self.offer_each::<true, 0>(feed),
                (true, 2) => self.offer_each::<true, 2>(feed),
                (true, _) => self.offer_each::<true, ANY_ROWS>(feed),
                (false, 0) => self.offer_each::<false, 0>(feed),
                (false, 2) => self.offer_each::<false, 2>(feed),
                (false, _) => self.offer_each::<false, ANY_ROWS>(feed),
            },
        );
    }

    /// [`offer_batch`](Self::offer_batch)'s loop, on the fused path or not,
    /// with the fair-share check (`ROWS` as in [`offer`]) or not.
    #[inline(always)]
    fn offer_each<const FUSED: bool, const ROWS: usize>(&mut self, feed: &mut impl Feed<T>) {
        for k in 0..feed.arrivals() {
            let now = feed.time(k);
            while let Some(d) = take::<T, FUSED>(&mut self.sfb, &mut self.queue, now, ROWS != 0) {
                feed.departed(d);
            }
            let (a, flow) = feed.arrival(k, now);
            let v = offer::<T, FUSED, ROWS>(&mut self.sfb, &mut self.queue, &a, flow);
            feed.verdict(k, v);
        }
    }
}

/// The caller's side of [`SfbQueue::offer_batch`]: a batch's arrivals,
/// made one at a time as the queue takes them, and what becomes of each.
pub trait Feed<T> {
    /// Arrivals in the batch.
    fn arrivals(&self) -> usize;
    /// When arrival `k` reaches the queue: not before arrival `k - 1`.
    /// Called once per arrival, before its departures and
    /// [`arrival`](Self::arrival).
    fn time(&mut self, k: usize) -> Timestamp;
    /// Arrival `k`, at `now` (what [`time`](Self::time) said), and its
    /// flow (only named in the penalty box's listing).
    fn arrival(&mut self, k: usize, now: Timestamp) -> (Arrival<T>, Option<&FlowKey>);
    /// SFB's and the queue's verdict on arrival `k`.
    fn verdict(&mut self, k: usize, v: Result<Enqueued, DropReason>);
    /// A packet the shaper released, in departure order.
    fn departed(&mut self, d: Departure<T>);
}

/// One arrival offered to an [`SfbQueue`] ([`SfbQueue::offer_batch`]).
#[derive(Debug, Clone, Copy)]
pub struct Arrival<T> {
    /// Its bins (from a [`KeyBatch`] made after the last [`Sfb::tick`]).
    ///
    /// [`KeyBatch`]: super::KeyBatch
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
/// `sfb.fused` and `ROWS` [`Sfb::path_rows`] (0: the fair-share check is
/// off; else the sketch's row count as [`FairRate`]'s `arrive_rows` takes
/// it), constants so that each path is compiled without the others' work.
///
/// [`FairRate`]: super::FairRate
#[inline(always)]
fn offer<T: Copy + Default, const FUSED: bool, const ROWS: usize>(
    sfb: &mut Sfb,
    queue: &mut EgressQueue<Queued<T>>,
    a: &Arrival<T>,
    flow: Option<&FlowKey>,
) -> Result<Enqueued, DropReason> {
    let fair = ROWS != 0;
    debug_assert_eq!(FUSED, sfb.fused);
    debug_assert_eq!(ROWS, sfb.path_rows());
    let set = sfb.active & 1;
    // The active set's bins: offsets on the fused path (whose kernel
    // raises the counts with the update), packed indices otherwise.
    let word = if FUSED {
        sfb.offsets(&a.key)
    } else {
        a.key.packed(set)
    };
    let offs = FUSED.then_some(word);
    if fair && queue.is_empty() {
        sfb.idle_until(a.now, queue.idle_since());
    }
    let check = if fair {
        sfb.rate_check::<ROWS>(
            a.key.packed(set),
            a.len,
            a.ecn_capable,
            queue.backlog_bytes(),
        )
    } else {
        Checked::default()
    };
    if check.has(Checked::DROP) {
        sfb.counters.ratedrop += 1;
        return Err(DropReason::SfbRate);
    }
    let (mut mark, sets, standby) = match sfb.decide(
        &a.key,
        offs,
        flow,
        Traits {
            ecn_capable: a.ecn_capable,
            keep_at_max: check.has(Checked::KEEP_AT_MAX),
            marks_only: check.has(Checked::MARKS_ONLY),
            paired_coin: fair,
            count_marks: !fair,
        },
        queue.len(),
        a.now,
    ) {
        Ok(d) => (d.mark, d.sets, d.standby),
        Err(d) => {
            if fair {
                sfb.rate.signal_at(check.first(), true);
            }
            return Err(d.reason());
        }
    };
    if fair {
        // Blue's mark is its signal; a packet both marked is counted once.
        sfb.rate.signal_at(check.first(), mark);
        mark |= check.has(Checked::MARK);
        sfb.counters.marked += u64::from(mark);
    }
    // Built in registers: an array written by index and read back whole
    // would miss store-to-load forwarding.
    let words = if set == 0 {
        [word, standby]
    } else {
        [standby, word]
    };
    let capped = fair & check.has(Checked::CAPPED);
    let queued = Queued {
        item: a.item,
        words,
        sets,
    };
    match queue.enqueue(queued, a.len, a.now) {
        Ok(()) => {
            if !FUSED {
                sfb.adjust(sets, words, true);
            }
            if fair {
                sfb.rate.enqueued(a.len, capped);
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
                sfb.lower_fused(sets, queued.words);
            }
            Err(r)
        }
    }
}

/// [`SfbQueue::dequeue`] on SFB and the queue's FIFO (`FUSED` as in
/// [`offer`]; `fair`: the fair-share check is on, a constant where the
/// caller's is).
#[inline(always)]
fn take<T: Copy + Default, const FUSED: bool>(
    sfb: &mut Sfb,
    queue: &mut EgressQueue<Queued<T>>,
    now: Timestamp,
    fair: bool,
) -> Option<Departure<T>> {
    debug_assert_eq!(FUSED, sfb.fused);
    debug_assert_eq!(fair, sfb.fair);
    let d = queue.dequeue_with(
        now,
        #[inline(always)]
        |q| {
            if FUSED {
                sfb.lower_queued(q.sets, &q.words);
            } else {
                sfb.adjust(q.sets, q.words, false);
            }
        },
    )?;
    if fair {
        sfb.rate.depart(d.len);
    }
    Some(Departure {
        item: d.item.item,
        len: d.len,
        enqueued: d.enqueued,
        departed: d.departed,
    })
}

#[cfg(test)]
mod tests {
    use kernels::{Backend, splitmix64};

    use super::*;
    use crate::stage::sfb::{KeyBatch, SfbProfile};

    /// The fused path (offset words, counts raised by the kernel and taken
    /// back on a drop) decides every packet as the general path does and
    /// leaves the same bins, through swaps, double buffering, the penalty
    /// box, early drops and marks, bucket drops and child drops, on every
    /// backend's kernel.
    /// Arrivals at `times` with `keys`' bins, each verdict and departure
    /// kept.
    struct TestFeed<'a> {
        keys: &'a KeyBatch,
        ecns: &'a [bool],
        times: &'a [u64],
        verdicts: &'a mut Vec<(usize, Result<Enqueued, DropReason>)>,
        departures: &'a mut Vec<Departure<u32>>,
    }

    impl Feed<u32> for TestFeed<'_> {
        fn arrivals(&self) -> usize {
            self.times.len()
        }
        fn time(&mut self, k: usize) -> Timestamp {
            Timestamp::from_nanos(self.times[k])
        }
        fn arrival(&mut self, k: usize, now: Timestamp) -> (Arrival<u32>, Option<&FlowKey>) {
            let a = Arrival {
                key: self.keys.key(k),
                ecn_capable: self.ecns[k],
                item: k as u32,
                len: 1000,
                now,
            };
            (a, None)
        }
        fn verdict(&mut self, k: usize, v: Result<Enqueued, DropReason>) {
            self.verdicts.push((k, v));
        }
        fn departed(&mut self, d: Departure<u32>) {
            self.departures.push(d);
        }
    }

    #[test]
    fn fused_batched_and_general_paths_agree() {
        for profile in [SfbProfile::Linux, SfbProfile::Fair] {
            paths_agree(profile);
        }
    }

    /// `fused_batched_and_general_paths_agree` under `profile`.
    fn paths_agree(profile: SfbProfile) {
        let sfb = SfbConfig {
            seed: Some(7),
            rehash_ms: 40,
            db_ms: 15,
            limit: 200,
            increment: 1500,
            decrement: 40,
            target: 6,
            max: Some(12),
            profile,
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
                let mut feed = TestFeed {
                    keys: &kb,
                    ecns: &ecns,
                    times: &times,
                    verdicts: &mut bverdicts,
                    departures: &mut bdeps,
                };
                batched.offer_batch(&mut feed);
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
            assert!(c.earlydrop > 0 && c.marked > 0, "{c:?}");
            assert!(c.childdrop > 0, "{c:?}");
            match profile {
                SfbProfile::Linux => assert!(c.penaltydrop > 0 && c.bucketdrop > 0, "{c:?}"),
                SfbProfile::Fair => assert!(c.ratedrop > 0 && c.ratemark > 0, "{c:?}"),
            }
            assert!(fused.sfb.generation > 3, "swapped {}", fused.sfb.generation);
            let end = Timestamp::from_nanos(u64::MAX);
            fused.drain_until(end, |_| {});
            general.drain_until(end, |_| {});
            assert!(fused.sfb.counts_are_zero() && general.sfb.counts_are_zero());
        }
    }
}
