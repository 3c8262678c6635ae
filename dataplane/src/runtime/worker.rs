//! The worker loop: one [`Chain`] over one [`Ports`] backend, the same code
//! for the live router, replay and the benches.
//!
//! A round: read a batch ([`Ports::recv`]), run it through the chain at
//! the backend's `now` (the copies leave through the backend as the egress
//! stage hands them over), and measure it. When nothing came, send the
//! queued copies that are due and wait ([`Ports::wait`]) for input or the
//! next departure. Every [`TICK`] of the backend's clock the chain ticks
//! (heavy-flow epochs close on time, SFB's rehash clock and multicast
//! expiry advance, due copies leave) and the owner's hook runs (the live
//! router publishes a snapshot of the counters and hands closed epochs to
//! its reporter).
//!
//! With a [`MembershipLink`] (several workers, multicast on) the other
//! workers' membership events are applied before each batch and tick, and
//! this worker's sent after ([`share`]).
//!
//! The loop ends when the stop flag is set (live) or the input has ended
//! (replay, memory). Then [`Worker::finish`]: on real time, what the
//! sockets still hold is processed and the queues are sent at their rate,
//! both until [`DRAIN_DEADLINE`]; what is still queued then is dropped and
//! counted (`egress_shutdown`). On capture time the clock runs on until
//! the forwarding stage has released or given up on every packet it holds
//! for an unresolved next hop, then the queues are sent at the times their
//! shapers release them, and nothing is lost.
//!
//! # Latency
//!
//! Three distributions, in HdrHistograms of nanoseconds:
//!
//! * **processing**: wall-clock time from the moment the worker starts
//!   reading a batch to the verdict of its last packet, recorded once per
//!   packet of the batch (what a packet waits for the router's work);
//! * **sojourn**: time a queued copy spent in its port's queue (departure
//!   less arrival, on the backend's clock: capture time on replay);
//! * **through**: arrival to departure of every copy sent (the same clock):
//!   0 for a port without a queue (the copy leaves at its packet's arrival
//!   time), the sojourn for a queued one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::share::{self, MembershipLink};
use crate::chain::Chain;
use crate::clock::Timestamp;
use crate::io::port::Ports;
use crate::packet::{Batch, DropReason};
use crate::packet::{Transmit, TxFrame};

/// How often (on the backend's clock) a worker ticks its chain and runs
/// its owner's hook.
pub const TICK: Duration = Duration::from_millis(100);

/// How long a stopping live worker may take: it processes what its sockets
/// still hold and sends its queued copies at their rate until then; what
/// is still queued is dropped (and counted), what is still unread stays in
/// the socket.
pub const DRAIN_DEADLINE: Duration = Duration::from_secs(2);

/// The most ticks [`Worker::finish`] runs on capture time for the held
/// packets (see `finish_held`).
const MAX_FINISH_TICKS: usize = 100_000;

/// An empty latency histogram: 1 ns .. 100 s, 3 significant digits
/// (longer values are recorded as 100 s).
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("constant bounds are valid")
}

/// A worker's three latency distributions (see the module docs).
///
/// A copy leaves either at its arrival (a port without a queue: 0 ns
/// through the router on the backend's clock) or when its queue's shaper
/// releases it (its time through the router is its time in the queue), so
/// the through-router distribution is the sojourn distribution plus
/// `direct` zeros: it is made from them when asked for
/// ([`through`](Self::through)) rather than recorded twice per copy.
#[derive(Debug, Clone)]
pub struct Latencies {
    /// Wall-clock time from taking a batch to its verdicts, per packet, ns.
    pub processing: Histogram<u64>,
    /// Time in an egress queue, per queued copy sent, ns (backend clock).
    pub sojourn: Histogram<u64>,
    /// Copies sent at once (ports without a queue).
    pub direct: u64,
}

impl Default for Latencies {
    fn default() -> Self {
        Latencies {
            processing: new_histogram(),
            sojourn: new_histogram(),
            direct: 0,
        }
    }
}

impl Latencies {
    /// Adds another worker's distributions.
    pub fn merge(&mut self, o: &Latencies) {
        // The histograms share their bounds, so adding cannot fail.
        let _ = self.processing.add(&o.processing);
        let _ = self.sojourn.add(&o.sojourn);
        self.direct += o.direct;
    }

    /// Arrival to departure, per copy sent, ns (backend clock).
    pub fn through(&self) -> Histogram<u64> {
        let mut h = self.sojourn.clone();
        let _ = h.record_n(0, self.direct);
        h
    }
}

/// Records `v` (at most the histogram's highest value) `n` times.
fn record(h: &mut Histogram<u64>, v: u64, n: u64) {
    let _ = h.record_n(v.min(h.high()), n);
}

/// The backend as the egress stage's [`Transmit`], timing every copy sent.
struct Tap<'a, P> {
    io: &'a mut P,
    latency: &'a mut Latencies,
}

impl<P: Transmit> Transmit for Tap<'_, P> {
    #[inline]
    fn send(&mut self, f: &TxFrame<'_>) -> bool {
        let ok = self.io.send(f);
        if ok {
            if f.queued {
                record(
                    &mut self.latency.sojourn,
                    f.departs.nanos_since(f.arrived),
                    1,
                );
            } else {
                self.latency.direct += 1;
            }
        }
        ok
    }
}

/// One worker: a chain over a backend (see the module docs).
#[derive(Debug)]
pub struct Worker<P> {
    id: usize,
    chain: Chain,
    io: P,
    link: Option<MembershipLink>,
    latency: Latencies,
    batch: Batch,
    empty: Batch,
    next_tick: Option<Timestamp>,
    batches: u64,
    last_now: Timestamp,
}

impl<P: Ports> Worker<P> {
    /// Worker `id` running `chain` over `io`; `link` joins its multicast
    /// stage to the other workers' (see [`super::share`]).
    pub fn new(id: usize, chain: Chain, io: P, link: Option<MembershipLink>) -> Self {
        Worker {
            id,
            chain,
            io,
            link,
            latency: Latencies::default(),
            batch: Batch::new(),
            empty: Batch::new(),
            next_tick: None,
            batches: 0,
            last_now: Timestamp::ZERO,
        }
    }

    /// The worker's index.
    pub fn id(&self) -> usize {
        self.id
    }

    /// The chain.
    pub fn chain(&self) -> &Chain {
        &self.chain
    }

    /// The chain, writable (reports, counters).
    pub fn chain_mut(&mut self) -> &mut Chain {
        &mut self.chain
    }

    /// The backend.
    pub fn io(&self) -> &P {
        &self.io
    }

    /// The backend, writable.
    pub fn io_mut(&mut self) -> &mut P {
        &mut self.io
    }

    /// The latency distributions so far.
    pub fn latency(&self) -> &Latencies {
        &self.latency
    }

    /// Batches processed.
    pub fn batches(&self) -> u64 {
        self.batches
    }

    /// The backend's time of the latest round.
    pub fn now(&self) -> Timestamp {
        self.last_now
    }

    /// Takes the worker apart: its chain, backend and latencies.
    pub fn into_parts(self) -> (Chain, P, Latencies) {
        (self.chain, self.io, self.latency)
    }

    /// Runs until `stop` is set or the input ends, then
    /// [`finish`](Self::finish)es; `hook(worker, now, last)` runs at every
    /// tick, and once more after the finish with `last` set.
    pub fn run(&mut self, stop: &AtomicBool, hook: &mut dyn FnMut(&mut Self, Timestamp, bool)) {
        while !stop.load(Ordering::Relaxed) {
            if !self.round() {
                break;
            }
            if let Some(now) = self.tick_if_due() {
                hook(self, now, false);
            }
            self.io.pass_turn();
        }
        self.io.take_turn();
        self.finish();
        let now = self.last_now;
        hook(self, now, true);
        self.io.pass_turn();
    }

    /// One round of [`run`](Self::run) without a hook: a batch (or the due
    /// departures and a wait), then the tick when it is due. `false` when
    /// the input has ended. Benches drive a worker with it.
    pub fn step(&mut self) -> bool {
        if !self.round() {
            return false;
        }
        self.tick_if_due();
        self.io.pass_turn();
        true
    }

    /// Ticks when [`TICK`] has passed on the backend's clock since the last
    /// tick (or the first round); returns the tick's time.
    fn tick_if_due(&mut self) -> Option<Timestamp> {
        let now = self.last_now;
        let tick = TICK.as_nanos() as u64;
        let due = *self.next_tick.get_or_insert(now.add_nanos(tick));
        if now < due {
            return None;
        }
        self.tick(now);
        self.next_tick = Some(now.add_nanos(tick));
        Some(now)
    }

    /// One round: a batch, or the due departures and a wait. `false` when
    /// the input has ended. The steps of the chain that touch only this
    /// worker's state run first; then the worker takes its turn at what it
    /// shares ([`Ports::take_turn`]), which the caller passes on.
    fn round(&mut self) -> bool {
        self.batch.clear();
        let t0 = Instant::now();
        let n = self.io.recv(&mut self.batch);
        let now = self.io.now().max(self.last_now);
        self.last_now = now;
        if n == 0 {
            self.io.take_turn();
            let mut tap = Tap {
                io: &mut self.io,
                latency: &mut self.latency,
            };
            self.chain.egress_mut().send_due(now, &mut tap);
            self.io.flush();
            let next = self.chain.egress().next_departure();
            return self.io.wait(next);
        }
        self.chain.process_local(&mut self.batch, now);
        self.io.take_turn();
        let mut tap = Tap {
            io: &mut self.io,
            latency: &mut self.latency,
        };
        share::process_shared(
            &mut self.chain,
            self.link.as_ref(),
            &mut self.batch,
            now,
            &mut tap,
        );
        self.io.flush();
        let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        record(&mut self.latency.processing, ns, n as u64);
        self.batches += 1;
        true
    }

    /// The time-driven work at `now` ([`Chain::tick`]).
    fn tick(&mut self, now: Timestamp) {
        let mut tap = Tap {
            io: &mut self.io,
            latency: &mut self.latency,
        };
        self.empty.clear();
        share::process(
            &mut self.chain,
            self.link.as_ref(),
            &mut self.empty,
            now,
            &mut tap,
        );
        self.io.flush();
        self.io.refresh_counters();
    }

    /// Ends the run (see the module docs): drains or sends what is left,
    /// closes the heavy-flow epoch.
    pub fn finish(&mut self) {
        if self.io.real_time() {
            self.finish_live();
        } else {
            self.finish_held();
            let mut tap = Tap {
                io: &mut self.io,
                latency: &mut self.latency,
            };
            self.chain.egress_mut().drain_all(&mut tap);
        }
        self.io.flush();
        self.io.refresh_counters();
        let now = self.last_now;
        self.chain.finish(now);
    }

    /// The end of input on capture time: the clock runs on, tick by tick,
    /// until every next hop still being resolved has released its held
    /// packets or given up on them (counted `no_neighbour`), as a router
    /// left alone would; its solicitations leave as they would.
    fn finish_held(&mut self) {
        // Each round solicits or gives up on at least one next hop, unless
        // the originated batch was full; the bound only guards a mistake.
        for _ in 0..MAX_FINISH_TICKS {
            let Some(t) = self.chain.forward().and_then(|f| f.neighbours().next_due()) else {
                return;
            };
            let now = t.max(self.last_now);
            self.last_now = now;
            self.tick(now);
        }
    }

    /// A live stop: the sockets' backlog, then the queues at their rate,
    /// both until [`DRAIN_DEADLINE`]; the rest is dropped and counted.
    fn finish_live(&mut self) {
        let deadline = self
            .io
            .now()
            .add_nanos(u64::try_from(DRAIN_DEADLINE.as_nanos()).unwrap_or(u64::MAX));
        // Input that arrived before the stop may not be readable yet (a
        // ring's part-filled block): after an empty read, wait for it once.
        let settle = u64::try_from(self.io.settle_time().as_nanos()).unwrap_or(u64::MAX);
        let mut waited = settle == 0;
        loop {
            self.batch.clear();
            if self.io.now() >= deadline {
                break;
            }
            if self.io.recv(&mut self.batch) == 0 {
                if waited {
                    break;
                }
                waited = true;
                let now = self.io.now();
                self.io.wait(Some(now.add_nanos(settle).min(deadline)));
                continue;
            }
            waited = settle == 0;
            let now = self.io.now();
            self.last_now = now;
            let mut tap = Tap {
                io: &mut self.io,
                latency: &mut self.latency,
            };
            self.chain.process(&mut self.batch, now, &mut tap);
            self.io.flush();
        }
        loop {
            let now = self.io.now();
            self.last_now = now;
            let mut tap = Tap {
                io: &mut self.io,
                latency: &mut self.latency,
            };
            self.chain.egress_mut().send_due(now, &mut tap);
            self.io.flush();
            let Some(next) = self.chain.egress().next_departure() else {
                break;
            };
            if now >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_nanos(next.min(deadline).nanos_since(now)));
        }
        let egress = self.chain.egress_mut();
        let left = egress.discard_all();
        if left > 0 {
            say!(
                "dataplane: worker {}: {left} queued frames not sent within {:?} of the stop; dropped",
                self.id,
                DRAIN_DEADLINE
            );
        }
        let (gone, gone_marked) = egress.shutdown_discarded();
        if gone > 0 {
            let c = self.chain.counters_mut();
            c.forwarded = c.forwarded.saturating_sub(gone);
            c.marked = c.marked.saturating_sub(gone_marked);
            c.dropped.record_n(DropReason::EgressShutdown, gone);
        }
    }
}
