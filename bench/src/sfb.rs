//! `sfb/enqueue-dequeue/<backend>`: SFB enqueue plus dequeue per packet,
//! batched as the dataplane runs it (64 keys hashed per batch, then packet
//! by packet: drain the shaped queue to the arrival's time, offer the
//! packet), on [`dataplane::stage::sfb::bench_workload`]: 1000-byte
//! packets of 1024 flows arriving 10% faster than the 1 Gbit/s queue drains,
//! so SFB marks and drops in steady state. The queue and its clock carry on
//! from one call to the next.

use std::hint::black_box;

use criterion::{Criterion, Throughput};
use dataplane::stage::sfb::{BenchWorkload, SfbQueue, bench_workload};
use kernels::Backend;

use crate::measure::{Figure, figure};

/// Packets per call.
pub const PACKETS: usize = 1 << 16;
/// Distinct flows.
pub const FLOWS: usize = 1024;
/// Keys hashed per batch.
pub const BATCH: usize = 64;

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
        let work = bench_workload(PACKETS, FLOWS, 0x5fb);
        let q = work.queue_on(backend).ok()?;
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
pub fn report() -> Vec<Figure> {
    Backend::available_list()
        .into_iter()
        .filter_map(|b| {
            let mut case = Case::new(b)?;
            Some(figure(
                format!("sfb/enqueue-dequeue/{}", b.name()),
                PACKETS,
                move || case.run(),
            ))
        })
        .collect()
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
}
