//! The live router: pinned workers over their sockets, stats and reports.
//!
//! [`Router::start`] takes one lock per interface ([`lock`]: no second
//! router on the same ports), then opens every socket (all of worker 0's,
//! then worker 1's, ...), so a missing or down interface or a missing
//! capability is reported before any thread starts, and every interface's
//! fanout group gets its members in the same order: with the kernel's
//! symmetric flow hash, both directions of a flow land on the same worker.
//! With every socket and file open it gives up its capabilities
//! ([`privileges`]), then spawns and pins one thread per worker.
//!
//! Each worker runs the one worker loop ([`worker`]) over its ports
//! ([`SocketPorts`], pnet's, by default; [`RingPorts`], packet rings, with
//! `[io] backend = "ring"`; [`XdpPorts`], AF_XDP sockets, with `backend =
//! "xdp"`, the XDP programs held by the router until it is dropped) with
//! its own [`Chain`] built from the config, the same
//! chain replay runs: nothing is shared on the hot path. At every tick (100
//! ms) a worker publishes a snapshot of its counters behind a mutex only
//! the tick and the reader take, and hands its closed heavy-flow epochs to
//! the reporter, which writes an epoch once every worker has closed it.
//!
//! A shaped port has one queue, whatever the number of workers: worker 0's
//! chain makes it and every other worker's egress stage uses it
//! ([`crate::stage::egress::Egress::share_queues`]), so the port holds its
//! configured rate and SFB judges the whole queue, as Linux `sch_sfb` on
//! the port would. The queue sits behind a mutex: a worker takes it once
//! per batch that has copies for the port (to offer them) and when it
//! sends what the shaper released (with `try_lock`, leaving a queue
//! another worker holds to that worker); any worker sends released copies,
//! through its own socket. We chose this over handing frames to the
//! queue's owner through a lock-free ring, or a shared token bucket in
//! front of per-worker queues, because the lock is taken per batch, not
//! per packet, and a shaped port's rate (what the shaper lets out) is far
//! below what one worker forwards, so the lock is rarely contended: the
//! handoff ring would add a copy and a wake-up per frame, and per-worker
//! queues under one bucket would still show SFB `n` short queues. Each
//! worker counts what it offered, dropped and sent, so a port's counters
//! balance over the workers together; the queue's backlog and SFB figures
//! are reported once, in worker 0's stats, and the final merged report
//! reads them again once every worker has stopped (worker 0 may stop while
//! another still offers copies).
//!
//! Multicast memberships are shared ([`share`]). A report reaches only the
//! worker its flow hashes to, while data to its group may hash to another,
//! so with more than one worker every worker's multicast stage is a replica
//! of one membership state: each sends the joins and leaves (refreshes
//! included) it learns to every other worker over a crossbeam channel, and
//! each applies what the others sent before every batch and every tick; an
//! applied event is not sent again. We chose this over one control thread
//! owning the counting filters and publishing a shared `Arc<PortFilter>`:
//! the replicas keep the stage as it is (learning in the batch, data
//! behind a join in the same batch already forwarded, the data path's
//! filter private to its worker), and need no thread and no lock. The
//! bound: a join is in force on the worker that read it for the data after
//! it in the same batch, and on every other worker from the first batch
//! that worker begins after the join's batch ended. Replicas order a join
//! and a leave of one membership by their stamps (time on the shared
//! monotonic clock, worker), so all converge on the same memberships
//! whatever order events arrive in; a refresh anywhere re-arms the timer
//! everywhere, and expiry waits [`share::EXPIRY_GRACE`] (1 s) past the
//! timer so a refresh in flight does not lose to it. Static groups are in
//! every worker from the config.
//!
//! On stop (SIGINT/SIGTERM) a worker processes what its sockets still hold,
//! then sends its queued frames at their rate until the queues are empty or
//! [`DRAIN_DEADLINE`] has passed (one deadline for both steps, so a sender
//! that keeps sending cannot hold the stop up); what is left is dropped and
//! counted (`shutdown_dropped` per port; a packet whose only copy was
//! dropped moves from `forwarded` to the `egress_shutdown` drop reason).
//! Then the final counters are collected.
//!
//! Accounting: the chain's `received == forwarded + consumed + dropped` (by reason,
//! SFB and queue drops included); per port, `copies == sent + send_errors
//! + dropped + backlog + shutdown_dropped` ([`Stats::is_consistent`]).

/// `eprintln!` that never panics ([`say`]).
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::runtime::say(format_args!($($arg)*))
    };
}

pub mod digest;
mod error;
pub mod http;
pub mod lock;
pub mod metrics;
pub mod peering;
pub mod privileges;
pub mod share;
pub mod stats;
pub mod worker;

pub use error::RouterError;

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::chain::{Chain, ChainError};
use crate::clock::MonotonicClock;
use crate::config::{IoBackend, RouterConfig};
use crate::io::port::Ports;
use crate::io::ring::RingPorts;
use crate::io::socket::{self, SocketPorts};
use crate::io::xdp::{Fallback, XdpPorts, XdpProgram, XdpSetup};
use crate::stage::digest::{Digests, TimeBase};
use crate::stage::egress::QueueView;
use crate::stage::heavy::{EpochReport, Threshold, merge_epochs};
use share::MembershipLink;
pub use stats::{
    InterfaceReport, IntervalRates, Latency, LatencyReport, MulticastInterface, PipelineSummary,
    Stats,
};
pub use worker::{DRAIN_DEADLINE, Latencies, TICK, Worker};

/// Writes a line to standard error, ignoring errors: a router whose
/// standard error is a closed pipe (`dataplane run 2>&1 | head`) keeps
/// forwarding instead of panicking in `eprintln!`.
pub fn say(args: std::fmt::Arguments<'_>) {
    let mut e = std::io::stderr().lock();
    let _ = e.write_fmt(args);
    let _ = e.write_all(b"\n");
}

/// Closed heavy-flow epochs of one worker.
#[derive(Debug)]
struct EpochMsg {
    worker: usize,
    reports: Vec<EpochReport>,
    /// Every epoch before this one is closed on this worker.
    closed_before: u64,
}

/// The chains of `workers` workers ([`Chain::build`] each), their multicast
/// stages linked as replicas of one membership state when there is more
/// than one worker (see the module docs); each with its end of the link.
///
/// # Errors
/// As [`Chain::build`].
pub fn build_workers(
    cfg: &RouterConfig,
    workers: usize,
) -> Result<Vec<(Chain, Option<MembershipLink>)>, ChainError> {
    let share = workers > 1
        && (cfg.multicast_config().is_some() || cfg.interfaces.iter().any(|i| i.is_routed()));
    let mut links = share.then(|| share::links(workers).into_iter());
    let mut out: Vec<(Chain, Option<MembershipLink>)> = Vec::with_capacity(workers);
    for _ in 0..workers {
        let mut chain = Chain::build_for(cfg, workers)?;
        let link = links.as_mut().and_then(Iterator::next);
        if let Some(l) = &link {
            l.attach(&mut chain);
        }
        // One queue per shaped port, worker 0's (see the module docs).
        if let Some((first, _)) = out.first() {
            chain.egress_mut().share_queues(first.egress());
        }
        out.push((chain, link));
    }
    Ok(out)
}

/// Options of [`Router::start`] that are not in the file.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Heavy-flow report destination overriding `heavy.report`.
    pub heavy_report: Option<String>,
}

/// What a worker thread hands back.
type WorkerOutput = (Stats, Latencies);

/// What [`Router::shutdown`] hands back.
#[derive(Debug)]
pub struct Shutdown {
    /// Each worker's final stats (those that did not panic).
    pub workers: Vec<Stats>,
    /// Their merged stats.
    pub total: Stats,
    /// A line per worker that panicked, with its message.
    pub failures: Vec<String>,
}

/// A panic's message, when it has one.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// A running router.
#[derive(Debug)]
pub struct Router {
    /// One lock per interface, held until the router is dropped.
    _locks: Vec<lock::InterfaceLock>,
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<WorkerOutput>>,
    snapshots: Snapshots,
    reporter: Option<HeavyReporter>,
    epochs: crossbeam_channel::Receiver<EpochMsg>,
    /// The shaped ports' queues, read for the final report once every
    /// worker has stopped.
    queues: Option<QueueView>,
    clock: MonotonicClock,
    /// The workers' digest rings, when the digest stage is on.
    digests: Option<Digests>,
    /// The peering control thread, when `[peering]` is on.
    peering: Option<peering::Peering>,
    /// The XDP programs, one per interface (xdp backend): detached when
    /// the router is dropped, after its workers stopped.
    _xdp: Vec<XdpProgram>,
}

impl Router {
    /// Opens every socket, then starts the workers. Errors (an interface
    /// another router holds, a missing or down interface, no `CAP_NET_RAW`,
    /// an unknown core) come back before any worker runs.
    pub fn start(cfg: &RouterConfig, opts: &RunOptions) -> Result<Router, RouterError> {
        let n = cfg.workers.resolved_count();
        let available = core_affinity::get_core_ids().unwrap_or_default();
        let mut cores = Vec::with_capacity(n);
        for i in 0..n {
            cores.push(match cfg.workers.cores.get(i) {
                Some(&c) => Some(available.iter().copied().find(|x| x.id == c).ok_or_else(
                    || RouterError::Core {
                        index: i,
                        core: c,
                        available: available.iter().map(|x| x.id).collect(),
                    },
                )?),
                None => None,
            });
        }
        // No other router on these ports (see `lock`).
        let locks = lock::lock_all(cfg.interfaces.iter().map(|i| i.name.as_str()))?;
        // Fanout groups: one per interface, joined in worker order.
        let mut groups = Vec::new();
        for (i, ifc) in cfg.interfaces.iter().enumerate() {
            let sys = socket::find_interface(&ifc.name)
                .map_err(|err| RouterError::Interface { index: i, err })?;
            groups.push(socket::fanout_group(sys.index));
        }
        let clock = MonotonicClock::new();
        let mut xdp_programs = Vec::new();
        let opened = match cfg.io.backend {
            IoBackend::Pnet => {
                let mut all = Vec::with_capacity(n);
                for _ in 0..n {
                    let mut ports = Vec::new();
                    for (ifc, g) in cfg.port_settings().iter().zip(&groups) {
                        ports.push(socket::open_port(ifc, *g)?);
                    }
                    all.push(ports);
                }
                for (p, g) in all[0].iter().zip(&groups) {
                    say!(
                        "dataplane: {}: pnet, receive buffer {} bytes, fanout group {g:#06x} ({n} workers)",
                        p.name,
                        p.recv_buffer
                    );
                }
                Opened::Pnet(
                    all.into_iter()
                        .map(|p| SocketPorts::new(p, clock))
                        .collect(),
                )
            }
            IoBackend::Ring => open_ring(cfg, &groups, n, clock)?,
            IoBackend::Xdp => match XdpSetup::open(&cfg.port_settings(), n, &cfg.io.xdp, clock) {
                Ok(setup) => {
                    for p in &setup.programs {
                        say!(
                            "dataplane: {}: {}, {} queue(s), {} UMEM frames per socket ({n} workers)",
                            p.name,
                            p.mode,
                            p.queues,
                            cfg.io.xdp.frames
                        );
                    }
                    xdp_programs = setup.programs;
                    Opened::Xdp(setup.workers)
                }
                Err(e) if cfg.io.xdp.fallback == Fallback::Ring => {
                    say!(
                        "dataplane: AF_XDP refused: {e}; running on the ring backend ([io.xdp] fallback = \"ring\")"
                    );
                    open_ring(cfg, &groups, n, clock)?
                }
                Err(e) => return Err(e.into()),
            },
        };
        let mut reporter = match cfg.heavy.as_ref() {
            Some(h) => Some(HeavyReporter::new(
                opts.heavy_report
                    .clone()
                    .unwrap_or_else(|| h.report.clone()),
                h.stage_config().threshold,
                n,
                h.ipfix.as_deref(),
                clock,
            )?),
            None => None,
        };
        // Every socket and file is open, no thread started: nothing needs a
        // capability from here on (see `privileges`).
        let dropped = privileges::drop_all()?;
        if dropped.effective_before != 0 {
            say!(
                "dataplane: capabilities dropped (effective was {:#x}, now none)",
                dropped.effective_before
            );
        }
        let (etx, erx) = crossbeam_channel::unbounded();
        let stop = Arc::new(AtomicBool::new(false));
        let mut chains = build_workers(cfg, n)?;
        let queues = chains.first().map(|(c, _)| c.egress().queue_view());
        let rings: Vec<_> = chains
            .iter()
            .filter_map(|(c, _)| c.digest().map(|d| d.ring()))
            .collect();
        let digests = (!rings.is_empty()).then(|| {
            Digests::new(
                rings,
                cfg.interfaces.iter().map(|i| i.name.clone()).collect(),
                TimeBase::Monotonic(clock),
            )
        });
        // The peering control thread and every worker's ends of it.
        let mut peering = None;
        if let Some(pc) = cfg.peering_config() {
            let peers = pc.peers.len();
            let (p, ends) = peering::Peering::start(pc, cfg.interfaces.len(), n)?;
            for ((chain, _), (tap, remote)) in chains.iter_mut().zip(ends) {
                chain.attach_peering(tap, remote);
            }
            if let Some(r) = &mut reporter {
                r.peer_flows = Some(p.flows.clone());
            }
            say!(
                "dataplane: peering: router id {}, {peers} peers",
                cfg.peering.as_ref().map_or(0, |s| s.router_id)
            );
            peering = Some(p);
        }
        let spawn = Spawn {
            cores,
            chains,
            stop: &stop,
            epochs: &etx,
            epoch_ns: cfg.heavy_config().and_then(|h| h.epoch_ns),
            groups: peering.as_ref().map(|p| (p.groups.clone(), p.peer_ports)),
        };
        let (workers, snapshots) = match opened {
            Opened::Pnet(io) => spawn.run(io)?,
            Opened::Ring(io) => spawn.run(io)?,
            Opened::Xdp(io) => spawn.run(io)?,
        };
        Ok(Router {
            _locks: locks,
            stop,
            workers,
            snapshots: Snapshots {
                workers: snapshots.into(),
                peering: peering.as_ref().map(peering::Peering::report_slot),
            },
            reporter,
            epochs: erx,
            queues,
            clock,
            digests,
            peering,
            _xdp: xdp_programs,
        })
    }

    /// The workers' digest rings, to answer queries (`None`: no digest
    /// stage).
    pub fn digests(&self) -> Option<Digests> {
        self.digests.clone()
    }

    /// The stop flag (set it, from a signal handler say, to stop).
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// The latest snapshot of each worker.
    pub fn snapshot(&self) -> Vec<Stats> {
        self.snapshots.each()
    }

    /// A handle on the workers' snapshots that another thread can own
    /// (the metrics server's).
    pub fn snapshots_handle(&self) -> Snapshots {
        self.snapshots.clone()
    }

    /// Writes the heavy-flow epochs every worker has closed.
    pub fn pump_reports(&mut self) -> Result<(), RouterError> {
        if let Some(r) = &mut self.reporter {
            while let Ok(m) = self.epochs.try_recv() {
                r.add(m);
            }
            r.flush(false)?;
        }
        Ok(())
    }

    /// Stops the workers, waits for them (each closes its epochs), writes
    /// the last reports and returns every worker's final stats and the
    /// merged stats (latency percentiles from the merged histograms). A
    /// worker that panicked has no stats; its panic message is in
    /// [`Shutdown::failures`], and the others' stats are still returned.
    ///
    /// # Errors
    /// Writing the heavy-flow reports.
    pub fn shutdown(mut self) -> Result<Shutdown, RouterError> {
        self.stop.store(true, Ordering::SeqCst);
        let mut out = Vec::new();
        let mut latency = Latencies::default();
        let mut failures = Vec::new();
        for (id, w) in std::mem::take(&mut self.workers).into_iter().enumerate() {
            match w.join() {
                Ok((s, l)) => {
                    latency.merge(&l);
                    out.push(s);
                }
                Err(payload) => failures.push(format!(
                    "worker {id} panicked: {}",
                    panic_message(payload.as_ref())
                )),
            }
        }
        if let Some(r) = &mut self.reporter {
            while let Ok(m) = self.epochs.try_recv() {
                r.add(m);
            }
            r.flush(true)?;
        }
        let mut merged = Stats::merged(&out);
        merged.set_latency(&latency);
        // The merged epochs are the report's: each worker closes the epochs
        // it saw, and the merged counters take the larger count.
        if let (Some(r), Some(h)) = (&self.reporter, &mut merged.heavy) {
            (h.epochs, h.reported) = (r.epochs, r.flows);
        }
        if let Some(q) = &self.queues {
            merged.set_queues(q.summaries(self.clock.now()));
        }
        if let Some(p) = self.peering.take() {
            merged.peering = p.stop();
        }
        Ok(Shutdown {
            workers: out,
            total: merged,
            failures,
        })
    }

    /// The workers that have exited although nobody stopped them (a
    /// panic), by id.
    pub fn exited_workers(&self) -> Vec<usize> {
        if self.stop.load(Ordering::SeqCst) {
            return Vec::new();
        }
        self.workers
            .iter()
            .enumerate()
            .filter(|(_, w)| w.is_finished())
            .map(|(i, _)| i)
            .collect()
    }
}

/// The snapshots the workers publish at every tick, one per worker, and
/// the peering control thread's latest figures; cheap to clone. Reading
/// one takes its mutex for a clone of the stats (the worker takes it once
/// per tick).
#[derive(Debug, Clone, Default)]
pub struct Snapshots {
    workers: Arc<[Arc<Mutex<Stats>>]>,
    peering: Option<peering::ReportSlot>,
}

impl Snapshots {
    /// The latest snapshot of each worker.
    pub fn each(&self) -> Vec<Stats> {
        self.workers
            .iter()
            .map(|s| s.lock().map(|g| g.clone()).unwrap_or_default())
            .collect()
    }

    /// Their sum ([`Stats::merged`]), with the peering figures.
    pub fn merged(&self) -> Stats {
        let mut m = Stats::merged(&self.each());
        m.peering = self
            .peering
            .as_ref()
            .and_then(|p| p.lock().ok().and_then(|r| r.clone()));
        m
    }
}

/// Every worker's ports, opened before any thread starts.
enum Opened {
    Pnet(Vec<SocketPorts>),
    Ring(Vec<RingPorts>),
    Xdp(Vec<XdpPorts>),
}

/// Every worker's ring ports, the choice printed.
fn open_ring(
    cfg: &RouterConfig,
    groups: &[u16],
    n: usize,
    clock: MonotonicClock,
) -> Result<Opened, RouterError> {
    let rc = cfg.io.ring;
    let settings = cfg.port_settings();
    let mut all = Vec::with_capacity(n);
    for _ in 0..n {
        all.push(RingPorts::open(&settings, groups, &rc, clock)?);
    }
    for (ifc, g) in cfg.interfaces.iter().zip(groups) {
        say!(
            "dataplane: {}: ring, {} blocks of {} bytes per worker, fanout group {g:#06x} ({n} workers)",
            ifc.name,
            rc.blocks,
            rc.block_bytes
        );
    }
    Ok(Opened::Ring(all))
}

/// What every worker thread is started with, whatever its backend.
struct Spawn<'a> {
    cores: Vec<Option<core_affinity::CoreId>>,
    chains: Vec<(Chain, Option<MembershipLink>)>,
    stop: &'a Arc<AtomicBool>,
    epochs: &'a crossbeam_channel::Sender<EpochMsg>,
    epoch_ns: Option<u64>,
    /// Peering: where worker 0 publishes the host ports' groups, and which
    /// ports face peers.
    groups: Option<(
        crossbeam_channel::Sender<Vec<crate::stage::multicast::GroupKey>>,
        u64,
    )>,
}

type Spawned = (Vec<JoinHandle<WorkerOutput>>, Vec<Arc<Mutex<Stats>>>);

impl Spawn<'_> {
    /// Starts worker `i` over `io[i]`.
    fn run<P: Ports + Send + 'static>(self, io: Vec<P>) -> std::io::Result<Spawned> {
        let mut workers = Vec::new();
        let mut snapshots = Vec::new();
        for (id, ((io, core), (chain, link))) in
            io.into_iter().zip(self.cores).zip(self.chains).enumerate()
        {
            let snapshot = Arc::new(Mutex::new(Stats::default()));
            snapshots.push(snapshot.clone());
            let stop = self.stop.clone();
            let epochs = self.epochs.clone();
            let epoch_ns = self.epoch_ns;
            let groups = if id == 0 { self.groups.clone() } else { None };
            let worker = Worker::new(id, chain, io, link);
            workers.push(
                std::thread::Builder::new()
                    .name(format!("bp-worker-{id}"))
                    .spawn(move || {
                        run_worker(worker, core, &stop, &snapshot, &epochs, epoch_ns, groups)
                    })?,
            );
        }
        Ok((workers, snapshots))
    }
}

/// A live worker's thread: pinned, then the worker loop; at every tick a
/// snapshot of its counters and its closed epochs go to the owner, and a
/// port's multicast cap is reported the first time it is reached.
fn run_worker<P: Ports>(
    mut worker: Worker<P>,
    core: Option<core_affinity::CoreId>,
    stop: &AtomicBool,
    snapshot: &Mutex<Stats>,
    epochs: &crossbeam_channel::Sender<EpochMsg>,
    epoch_ns: Option<u64>,
    groups: Option<(
        crossbeam_channel::Sender<Vec<crate::stage::multicast::GroupKey>>,
        u64,
    )>,
) -> WorkerOutput {
    let id = worker.id();
    let pinned = core.filter(|c| core_affinity::set_for_current(*c));
    if let (Some(c), None) = (core, pinned) {
        say!("dataplane: worker {id}: could not pin to core {}", c.id);
    }
    let core = pinned.map(|c| c.id);
    let mut cap_warned = 0u64;
    let mut published: Option<Vec<crate::stage::multicast::GroupKey>> = None;
    let mut hook = |w: &mut Worker<P>, now: crate::clock::Timestamp, last: bool| {
        // The host ports' groups, for the peering control path, when they
        // changed.
        if let (Some((tx, peer_ports)), Some(m)) = (&groups, w.chain().multicast()) {
            let g = peering::host_groups(m, *peer_ports);
            if published.as_ref() != Some(&g) {
                let _ = tx.send(g.clone());
                published = Some(g);
            }
        }
        let stats = Stats::of(w, core);
        for i in &stats.multicast_interfaces {
            let bit = 1u64 << (i.stats.port & 63);
            if i.stats.refused > 0 && cap_warned & bit == 0 {
                cap_warned |= bit;
                say!(
                    "dataplane: worker {id}: {}: {} learned multicast groups, the cap (multicast.max_learned_groups): further joins are refused and counted",
                    i.name,
                    i.stats.learned
                );
            }
        }
        if let Ok(mut s) = snapshot.lock() {
            *s = stats;
        }
        if let Some(h) = w.chain_mut().heavy_mut() {
            let reports = h.take_reports();
            let closed_before = if last {
                u64::MAX
            } else {
                epoch_ns.map_or(0, |l| now.as_nanos() / l.max(1))
            };
            let _ = epochs.send(EpochMsg {
                worker: id,
                reports,
                closed_before,
            });
        }
    };
    worker.run(stop, &mut hook);
    let stats = Stats::of(&worker, core);
    let (_, _, latency) = worker.into_parts();
    (stats, latency)
}

/// Merges the workers' heavy-flow epochs and writes each closed epoch once
/// every worker has closed it.
struct HeavyReporter {
    out: Box<dyn Write + Send>,
    threshold: Threshold,
    pending: Vec<Vec<EpochReport>>,
    closed_before: Vec<u64>,
    /// `heavy.ipfix`: the collector's exporter.
    ipfix: Option<crate::ipfix::Exporter>,
    /// The workers' clock: reports carry wall-clock times.
    clock: MonotonicClock,
    /// Merged epochs written, and the heavy flows in them.
    epochs: u64,
    flows: u64,
    /// The peering control path, which shares the heavy flows network-wide.
    peer_flows: Option<crossbeam_channel::Sender<Vec<crate::flow::FlowKey>>>,
}

impl std::fmt::Debug for HeavyReporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeavyReporter")
            .field("threshold", &self.threshold)
            .field("closed_before", &self.closed_before)
            .finish_non_exhaustive()
    }
}

impl HeavyReporter {
    fn new(
        dest: String,
        threshold: Threshold,
        workers: usize,
        ipfix: Option<&str>,
        clock: MonotonicClock,
    ) -> Result<Self, RouterError> {
        let out: Box<dyn Write + Send> = if dest == "-" {
            Box::new(std::io::stdout())
        } else {
            match std::fs::File::create(&dest) {
                Ok(f) => Box::new(f),
                Err(err) => return Err(RouterError::HeavyReport { dest, err }),
            }
        };
        let ipfix = ipfix
            .map(|a| {
                crate::ipfix::Exporter::new(a).map_err(|err| RouterError::Ipfix {
                    to: a.to_string(),
                    err,
                })
            })
            .transpose()?;
        Ok(HeavyReporter {
            out,
            threshold,
            pending: vec![Vec::new(); workers],
            closed_before: vec![0; workers],
            ipfix,
            clock,
            epochs: 0,
            flows: 0,
            peer_flows: None,
        })
    }

    fn add(&mut self, m: EpochMsg) {
        self.pending[m.worker].extend(m.reports);
        self.closed_before[m.worker] = self.closed_before[m.worker].max(m.closed_before);
    }

    fn flush(&mut self, all: bool) -> Result<(), RouterError> {
        let limit = if all {
            u64::MAX
        } else {
            self.closed_before.iter().copied().min().unwrap_or(0)
        };
        let mut ready = Vec::with_capacity(self.pending.len());
        for p in &mut self.pending {
            let (now, later): (Vec<_>, Vec<_>) = p.drain(..).partition(|r| r.epoch < limit);
            *p = later;
            ready.push(now);
        }
        if ready.iter().all(Vec::is_empty) {
            return Ok(());
        }
        for mut e in merge_epochs(&ready, self.threshold) {
            // Wall-clock times, Unix nanoseconds, as the operator's logs.
            let clock = self.clock;
            let unix = |ns: u64| clock.to_unix_ns(crate::clock::Timestamp::from_nanos(ns));
            (e.start_ns, e.end_ns) = (unix(e.start_ns), unix(e.end_ns));
            for f in &mut e.flows {
                (f.epoch_start_ns, f.epoch_end_ns) = (e.start_ns, e.end_ns);
                f.detected_ns = unix(f.detected_ns);
            }
            e.write_json_lines(&mut self.out)?;
            self.epochs += 1;
            self.flows += e.flows.len() as u64;
            if let Some(tx) = &self.peer_flows
                && !e.flows.is_empty()
            {
                let _ = tx.send(e.flows.iter().map(|f| f.key).collect());
            }
            if let Some(x) = &mut self.ipfix {
                x.export(&e, |ns| ns / 1_000_000);
            }
        }
        // Flushed per epoch: a pipe's reader sees each one as it closes.
        self.out.flush()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::memory::MemoryPorts;
    use crate::packet::PortSet;
    use crate::wire::LinkType;

    #[test]
    fn example_config_builds_every_stage() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/router.toml");
        let cfg = RouterConfig::load(&path).unwrap();
        let c = Chain::build(&cfg).unwrap();
        assert_eq!(c.egress().queued_ports(), PortSet::single(1));
        assert!(c.heavy().is_some());
        assert!(c.icarus().is_some());
        assert!(c.multicast().is_some());
    }

    /// A UDP frame 10.0.0.1 -> 10.0.0.2 of `len` bytes.
    fn frame(len: usize) -> Vec<u8> {
        use crate::wire::build::{self, IpHeader};
        let ip = IpHeader::v4([10, 0, 0, 1], [10, 0, 0, 2], build::PROTO_UDP);
        build::udp_frame([0; 6], [0; 6], &ip, 1000, 2000, &vec![0; len - 42])
    }

    /// Two workers over memory: stats merge, render, and account for every
    /// packet and copy.
    #[test]
    fn stats_merge_and_render() {
        let text = r#"
[[interfaces]]
name = "a"
[[interfaces]]
name = "b"
[interfaces.egress]
rate_bps = 8_000_000
[interfaces.sfb]
seed = 1
[[wires]]
from = "a"
to = "b"
"#;
        let cfg = RouterConfig::from_toml_str(text, "test").unwrap();
        let mut workers = Vec::new();
        for (id, (chain, link)) in build_workers(&cfg, 2).unwrap().into_iter().enumerate() {
            let mut io = MemoryPorts::new(2);
            for i in 0..100u64 {
                let f = frame(1000);
                io.push(
                    crate::clock::Timestamp::from_nanos(i * 50_000),
                    0,
                    LinkType::Ethernet,
                    1000,
                    &f,
                );
            }
            let mut w = Worker::new(id, chain, io, link);
            w.run(&AtomicBool::new(false), &mut |_, _, _| {});
            workers.push(w);
        }
        // Read once both have ended: the last to end drained the queue
        // they share.
        let all: Vec<Stats> = workers.iter().map(|w| Stats::of(w, None)).collect();
        let m = Stats::merged(&all);
        assert!(m.is_consistent(), "{m:?}");
        assert_eq!(m.pipeline.received, 200);
        let b = &m.interfaces[1];
        assert_eq!(b.port.name, "b");
        let c = &b.port.counters;
        assert_eq!(c.copies, 200);
        // One flow at 160 Mbit/s into an 8 Mbit/s queue: SFB's bins fill
        // (bucketdrop); the rest leaves, the queue drained at the end.
        assert!(c.dropped.total() > 0 && c.sent > 0, "{c:?}");
        assert_eq!(c.sent + c.dropped.total(), 200);
        assert_eq!(b.port.backlog_packets, 0, "a replay drains the queue");
        assert_eq!(m.interfaces[0].rx.rx_packets, 200);
        assert!(m.latency.sojourn.max > 1_000_000, "{:?}", m.latency);
        let text = m.render();
        assert!(text.contains("== all workers"), "{text}");
        assert!(text.contains("  port b rx 0 pkts"), "{text}");
        let sent = format!(
            "    qdisc sfb rate 8Mbit: Sent {} bytes {} pkt (dropped {}",
            c.sent_bytes,
            c.sent,
            c.dropped.total()
        );
        assert!(text.contains(&sent), "{text}");
        // The shaped port's link use: a line of its own after the qdisc's,
        // and the same figures in the JSON.
        let l = b.port.link.expect("a shaped port's link use");
        let line = format!(
            "\n      link use {:.3} (sent {} of 8Mbit) over the last {:.2} s, {:.3} over the run (",
            l.last(),
            crate::stage::egress::fmt_rate(l.last_sent_bps() as u64 / 1000 * 1000),
            l.last_ns as f64 / 1e9,
            l.run()
        );
        assert!(text.contains(&line), "{line}\n{text}");
        let json = serde_json::to_value(&m).unwrap();
        assert_eq!(json["interfaces"][1]["link"]["run"], l.run(), "{json}");
        assert!(all[0].render().contains("== worker 0"));
    }
}
