//! `sfb/enqueue-dequeue/<backend>`: SFB enqueue plus dequeue per packet,
//! batched as the dataplane runs it (64 keys hashed per batch, then packet
//! by packet: drain the shaped queue to the arrival's time, offer the
//! packet), on [`bench_workload`]: 1000-byte packets of 1024 flows
//! arriving 10% faster than the 1 Gbit/s queue drains, so SFB marks and
//! drops in steady state. The queue and its clock carry on from one call to
//! the next.

use std::hint::black_box;

use criterion::{Criterion, Throughput};
use dataplane::clock::Timestamp;
use dataplane::flow::FlowKey;
use dataplane::pipeline::DropReason;
use dataplane::stage::egress::{Departure, EgressConfig};
use dataplane::stage::sfb::{
    Arrival, Enqueued, Feed, KeyBatch, SfbConfig, SfbKey, SfbProfile, SfbQueue,
};
use kernels::{Backend, BackendError, splitmix64};

use crate::measure::{Figure, figure_pair};

/// Packets per call.
pub const PACKETS: usize = 1 << 16;
/// Distinct flows.
pub const FLOWS: usize = 1024;
/// Keys hashed per batch.
pub const BATCH: usize = 64;

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
        self.queue_with(SfbProfile::Fair, backend)
    }

    /// [`queue_on`](Self::queue_on) with SFB's `profile`.
    pub fn queue_with(
        &self,
        profile: SfbProfile,
        backend: Backend,
    ) -> Result<SfbQueue<u32>, BackendError> {
        let mut q = self.queue_profile(profile);
        let sfb = q.sfb().clone().on_backend(backend)?;
        *q.sfb_mut() = sfb;
        Ok(q)
    }

    /// A queue configured for the workload (seeded, 1 Gbit/s, the
    /// router's default SFB).
    pub fn queue(&self) -> SfbQueue<u32> {
        self.queue_profile(SfbProfile::Fair)
    }

    /// [`queue`](Self::queue) with SFB's `profile`.
    pub fn queue_profile(&self, profile: SfbProfile) -> SfbQueue<u32> {
        let sfb = SfbConfig {
            seed: Some(1),
            profile,
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
            q.tick(Timestamp::from_nanos(t));
            kb.hash(q.sfb(), keys);
            let mut feed = BatchFeed {
                keys: kb.keys(),
                ecn,
                t0: t,
                gap: self.gap,
                sum: &mut sum,
                departed: &mut departed,
            };
            q.offer_batch(&mut feed);
            t += ecn.len() as u64 * self.gap;
        }
        sum += departed;
        (sum, t)
    }
}

/// One batch of [`BenchWorkload::run`] as SFB takes it: 1000-byte
/// arrivals `gap` ns apart from `t0`, verdicts and departures counted.
struct BatchFeed<'a> {
    keys: &'a [SfbKey],
    ecn: &'a [bool],
    t0: u64,
    gap: u64,
    sum: &'a mut u64,
    departed: &'a mut u64,
}

impl Feed<u32> for BatchFeed<'_> {
    #[inline(always)]
    fn arrivals(&self) -> usize {
        self.keys.len().min(self.ecn.len())
    }

    #[inline(always)]
    fn time(&mut self, k: usize) -> Timestamp {
        Timestamp::from_nanos(self.t0 + k as u64 * self.gap)
    }

    #[inline(always)]
    fn arrival(&mut self, k: usize, now: Timestamp) -> (Arrival<u32>, Option<&FlowKey>) {
        let a = Arrival {
            key: self.keys.get(k).copied().unwrap_or_default(),
            ecn_capable: self.ecn.get(k).copied().unwrap_or(false),
            item: k as u32,
            len: 1000,
            now,
        };
        (a, None)
    }

    /// Adds the verdict to the checksum as a value, which the compiler
    /// makes without a branch in both profiles' loops. (Written as a
    /// statement per arm, it branched in one profile's loop and not in the
    /// other's, and charged that profile about 0.2 mispredicted branches a
    /// packet of the harness's own.)
    #[inline(always)]
    fn verdict(&mut self, _: usize, v: Result<Enqueued, DropReason>) {
        *self.sum += match v {
            Ok(Enqueued::Forward) => 1 << 20,
            Ok(Enqueued::Mark) => 1 << 40,
            Err(_) => 0,
        };
    }

    #[inline(always)]
    fn departed(&mut self, _: Departure<u32>) {
        *self.departed += 1;
    }
}

/// The workload and, per backend, a warmed-up queue and its clock.
#[derive(Debug)]
pub struct Case {
    work: BenchWorkload,
    q: SfbQueue<u32>,
    t: u64,
}

impl Case {
    /// A case on `backend` (`None` when this CPU lacks it), run once so the
    /// queue is full and the probabilities have settled.
    pub fn new(backend: Backend) -> Option<Self> {
        Self::with_profile(SfbProfile::Fair, backend)
    }

    /// [`new`](Self::new) with SFB's `profile`.
    pub fn with_profile(profile: SfbProfile, backend: Backend) -> Option<Self> {
        let work = bench_workload(PACKETS, FLOWS, 0x5fb);
        let q = work.queue_with(profile, backend).ok()?;
        let mut c = Case { work, q, t: 0 };
        c.run();
        Some(c)
    }

    /// One pass over the workload; a checksum.
    pub fn run(&mut self) -> u64 {
        let (sum, t) = self.work.run(&mut self.q, BATCH, self.t);
        self.t = t;
        black_box(sum)
    }
}

/// Registers `sfb/enqueue-dequeue/<backend>` for every available backend.
pub fn register(c: &mut Criterion) {
    let mut g = c.benchmark_group("sfb/enqueue-dequeue");
    g.throughput(Throughput::Elements(PACKETS as u64));
    for b in Backend::available_list() {
        if let Some(mut case) = Case::new(b) {
            g.bench_function(b.name(), |bch| bch.iter(|| case.run()));
        }
    }
    g.finish();
}

/// The headline figures for the report binary: ns per packet per backend.
/// `sfb/enqueue-dequeue/<backend>` is the router's default SFB (the fair
/// profile); `sfb/enqueue-dequeue-linux/<backend>` sch_sfb's rules alone,
/// which shows what the fair-share check costs. The two profiles are
/// measured in turn, sample for sample ([`figure_pair`]), so that their
/// ratio (the report's `sfb fair vs linux`) holds on a busy machine.
pub fn report() -> Vec<Figure> {
    let mut fair = Vec::new();
    let mut linux = Vec::new();
    for b in Backend::available_list() {
        let (Some(mut f), Some(mut l)) = (
            Case::with_profile(SfbProfile::Fair, b),
            Case::with_profile(SfbProfile::Linux, b),
        ) else {
            continue;
        };
        let (x, y) = figure_pair(
            (
                format!("sfb/enqueue-dequeue/{}", b.name()),
                format!("sfb/enqueue-dequeue-linux/{}", b.name()),
            ),
            PACKETS,
            move || f.run(),
            move || l.run(),
        );
        fair.push(x);
        linux.push(y);
    }
    fair.extend(linux);
    fair
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backends_agree() {
        let mut sums = Backend::available_list()
            .into_iter()
            .filter_map(Case::new)
            .map(|mut c| c.run());
        let first = sums.next().unwrap();
        assert!(sums.all(|s| s == first));
    }

    #[test]
    fn replay_is_deterministic() {
        let w = bench_workload(20_000, 64, 3);
        let run = || {
            let mut q = w.queue();
            let (sum, end) = w.run(&mut q, 32, 1_000_000_000);
            (
                sum,
                end,
                q.sfb().stats(Timestamp::from_nanos(end)),
                *q.queue().stats(),
            )
        };
        let a = run();
        assert_eq!(a, run());
        let c = a.2.counters;
        eprintln!("workload: {}\n  queue {:?}", a.2, a.3);
        assert!(c.marked > 0 && c.earlydrop > 0);
    }

    #[test]
    #[ignore = "timing report, run with --release --ignored --nocapture"]
    fn sfb_ns_per_packet() {
        use std::time::Instant;
        let w = bench_workload(1 << 18, 1024, 1);
        let best = |f: &mut dyn FnMut() -> u64| {
            let mut best = f64::MAX;
            for _ in 0..15 {
                let start = Instant::now();
                black_box(f());
                best = best.min(start.elapsed().as_secs_f64() * 1e9 / w.len() as f64);
            }
            best
        };
        // The whole thing: hash, decide, enqueue, dequeue.
        let full = best(&mut || {
            let mut q = w.queue();
            w.run(&mut q, 32, 0).0
        });
        // Hashing alone (one KeyBatch per 32 keys).
        let keys: Vec<[u32; 4]> = (0..w.len() as u32).map(|i| [i, i ^ 77, 5, 6]).collect();
        let q = w.queue();
        let mut kb = KeyBatch::new();
        let hash = best(&mut || {
            let mut acc = 0u64;
            for c in keys.chunks(32) {
                kb.hash(q.sfb(), c);
                acc ^= kb.key(c.len() - 1).packed(0);
            }
            acc
        });
        eprintln!(
            "SFB enqueue+dequeue, batches of 32, 8x16 bins, backend {:?}: {full:.1} ns/packet \
             (of which batch hashing {hash:.1})",
            q.sfb().hasher(0).backend()
        );
    }
}
