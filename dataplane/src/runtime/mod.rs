//! The live router: pinned workers, their sockets, egress queues, stats
//! and reports.
//!
//! [`Router::start`] opens every socket first (all of worker 0's, then
//! worker 1's, ...), so a missing or down interface or a missing capability
//! is reported before any thread starts, and every interface's fanout group
//! gets its members in the same order: with the kernel's symmetric flow hash,
//! both directions of a flow land on the same worker. Then one thread per
//! worker is spawned and pinned.
//!
//! A worker loops: for each port, read up to a batch of frames (the socket
//! is non-blocking), run the batch through its own [`Pipeline`] at the
//! monotonic `now`, and send every forwarded frame out of its ports that
//! have no egress queue. The pipeline's last stage, [`EgressQueues`],
//! holds a real queue per port with an `sfb` table: a copy of each frame
//! going out of such a port is judged by SFB (dropped, counted by reason;
//! CE-marked; or queued) and held in a token-bucket shaped FIFO. After each
//! batch, and whenever idle, the worker sends every queued frame whose
//! departure time has come. When no port had anything it waits in `poll`
//! for at most 10 ms and never past the next departure (`ppoll(2)`, so the
//! wait is not rounded to milliseconds), so the shaper's pacing holds. Every 100 ms it ticks the pipeline with an
//! empty batch (closing heavy-flow epochs on time, advancing SFB's rehash
//! clock), sends closed epochs to the reporter and publishes a snapshot of
//! its counters. Nothing is shared on the hot path: the snapshot sits behind
//! a mutex only the tick and the reader take, and a worker's membership
//! inbox (below) is looked at once per batch, not per packet.
//!
//! Each worker has its own queue per shaped port, draining at the port's
//! configured rate: a flow is always on one worker and sees that rate, and
//! with `n` workers the port carries up to `n` times the rate when flows
//! spread over them (as with one `tbf` per transmit queue under `mq`).
//!
//! Multicast memberships are shared ([`share`]). A report reaches only the
//! worker its flow hashes to, while data to its group may hash to another,
//! so with more than one worker every worker's multicast stage is a replica
//! of one membership state: each sends the joins and leaves (refreshes
//! included) it learns to every other worker over a crossbeam channel, and
//! each applies what the others sent before every batch and every tick
//! ([`share::process`]); an applied event is not sent again. We chose this
//! over one control thread owning the counting filters and publishing a
//! shared `Arc<PortFilter>`: the replicas keep the stage as it is (learning
//! in the batch, data behind a join in the same batch already forwarded,
//! the data path's filter private to its worker), and need no thread and no
//! lock. The bound: a join is in force on the worker that read it for the
//! data after it in the same batch, and on every other worker from the
//! first batch that worker begins after the join's batch ended, so data
//! can miss it only in the one batch another worker is in the middle of
//! (a batch holds at most 32 frames; an idle worker applies its inbox
//! before its next batch, or at its next tick). Replicas order a join and
//! a leave of one membership by their stamps (time on the shared monotonic
//! clock, worker), so all converge on the same memberships whatever order
//! events arrive in; a refresh anywhere re-arms the timer everywhere, and
//! expiry waits [`share::EXPIRY_GRACE`] (1 s) past the timer so a refresh
//! in flight does not lose to it. Static groups are in every worker from
//! the config.
//!
//! On stop (SIGINT/SIGTERM) a worker processes what its sockets still hold,
//! then sends its queued frames at their rate until the queues are empty or
//! [`DRAIN_DEADLINE`] has passed (one deadline for both steps, so a sender
//! that keeps sending cannot hold the stop up); what is left is dropped and counted
//! (`shutdown_dropped` per queue; a packet whose only copy was dropped moves
//! from `forwarded` to the `egress_shutdown` drop reason). Then the final
//! counters are collected.
//!
//! Accounting: the pipeline's `received == forwarded + dropped` (by reason,
//! SFB and queue drops included); per queue, `enqueued == sent +
//! send_errors + shutdown_dropped + backlog`.

pub mod forward;
pub mod lock;
pub mod privileges;
pub mod share;
pub mod socket;

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Serialize;

use crate::clock::{MonotonicClock, Timestamp};
use crate::config::RouterConfig;
use crate::pipeline::{Batch, Pipeline, PipelineConfig, PipelineCounters, PortSet, Verdict};
use crate::stage::heavy::{EpochReport, HeavyCounters, HeavyStage, Threshold, merge_epochs};
use crate::stage::icarus::{IcarusCounters, IcarusStage};
use crate::stage::multicast::{InterfaceStats, MulticastCounters, MulticastStage};
use crate::wire::{self, LinkType};
use forward::{EgressQueues, QueueCounters, QueueSpec, Wires, WiresCounters};
use share::MembershipLink;
use socket::{Port, Received};

/// How often a worker ticks its pipeline and publishes its counters.
pub const TICK: Duration = Duration::from_millis(100);

/// Longest wait in `poll` when every port is idle (shorter when a queued
/// frame is due sooner).
pub const IDLE_POLL: Duration = Duration::from_millis(10);

/// How long a stopping worker may take: it processes what its sockets
/// still hold and sends its queued frames at their rate until then; what
/// is still queued is dropped (and counted), what is still unread stays in
/// the socket.
pub const DRAIN_DEADLINE: Duration = Duration::from_secs(2);

/// Penalised flows kept per queue in a merged report.
const MAX_PENALISED: usize = 16;

/// Per-interface counters of one worker (or merged).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PortCounters {
    /// The interface.
    pub name: String,
    /// Frames read.
    pub rx_packets: u64,
    /// Bytes read.
    pub rx_bytes: u64,
    /// Read errors (other than "nothing to read").
    pub rx_errors: u64,
    /// Frames other local sockets or the host stack sent out of this port,
    /// read back and dropped (not input, not in `rx_packets`).
    pub rx_outgoing_dropped: u64,
    /// Frames sent.
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Send errors (ENOBUFS, timeouts, ...).
    pub tx_errors: u64,
}

impl PortCounters {
    fn merge(&mut self, o: &PortCounters) {
        self.rx_packets += o.rx_packets;
        self.rx_bytes += o.rx_bytes;
        self.rx_errors += o.rx_errors;
        self.rx_outgoing_dropped += o.rx_outgoing_dropped;
        self.tx_packets += o.tx_packets;
        self.tx_bytes += o.tx_bytes;
        self.tx_errors += o.tx_errors;
    }
}

/// The pipeline's counters in a reportable form.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PipelineSummary {
    /// Packets handed in.
    pub received: u64,
    /// Forwarded (marked included).
    pub forwarded: u64,
    /// ECN CE-marked.
    pub marked: u64,
    /// Dropped, all reasons.
    pub dropped: u64,
    /// Drops per reason (non-zero ones).
    pub drops: BTreeMap<String, u64>,
    /// Frames that were not IP.
    pub non_ip: u64,
}

impl PipelineSummary {
    fn from_counters(c: &PipelineCounters) -> Self {
        PipelineSummary {
            received: c.received,
            forwarded: c.forwarded,
            marked: c.marked,
            dropped: c.dropped.total(),
            drops: c
                .dropped
                .nonzero()
                .map(|(r, n)| (r.name().to_string(), n))
                .collect(),
            non_ip: c.non_ip,
        }
    }

    fn merge(&mut self, o: &PipelineSummary) {
        self.received += o.received;
        self.forwarded += o.forwarded;
        self.marked += o.marked;
        self.dropped += o.dropped;
        for (k, v) in &o.drops {
            *self.drops.entry(k.clone()).or_default() += v;
        }
        self.non_ip += o.non_ip;
    }
}

/// A flow in an SFB penalty box.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PenalisedSummary {
    /// The flow (`src:port -> dst:port proto`).
    pub flow: String,
    /// Packets the penalty bucket admitted.
    pub admitted: u64,
    /// Packets it dropped.
    pub dropped: u64,
}

/// One egress queue: SFB's counters (`tc -s qdisc show` style), its penalty
/// box, the backlog and the queue's own counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SfbSummary {
    /// The interface.
    pub interface: String,
    /// Drops of non-ECN packets SFB would have marked (and of any packet
    /// above probability 1/2).
    pub earlydrop: u64,
    /// Penalty-box drops.
    pub penaltydrop: u64,
    /// Full-bin drops.
    pub bucketdrop: u64,
    /// Queue-limit drops.
    pub queuedrop: u64,
    /// Refused by the shaper's queue.
    pub childdrop: u64,
    /// CE marks.
    pub marked: u64,
    /// Largest bin count (max over workers).
    pub maxqlen: u16,
    /// Largest marking probability, Q0.16 (max over workers).
    pub maxprob: u16,
    /// Mean marking probability, Q0.16 (max over workers).
    pub avgprob: u16,
    /// Flows recently in the penalty box (at most 16).
    pub penalised: Vec<PenalisedSummary>,
    /// Frames queued at the snapshot.
    pub backlog_packets: u64,
    /// Bytes queued at the snapshot.
    pub backlog_bytes: u64,
    /// Enqueued, sent, sojourn, ...
    pub queue: QueueCounters,
}

impl SfbSummary {
    fn merge(&mut self, o: &SfbSummary) {
        self.earlydrop += o.earlydrop;
        self.penaltydrop += o.penaltydrop;
        self.bucketdrop += o.bucketdrop;
        self.queuedrop += o.queuedrop;
        self.childdrop += o.childdrop;
        self.marked += o.marked;
        self.maxqlen = self.maxqlen.max(o.maxqlen);
        self.maxprob = self.maxprob.max(o.maxprob);
        self.avgprob = self.avgprob.max(o.avgprob);
        let room = MAX_PENALISED.saturating_sub(self.penalised.len());
        self.penalised
            .extend(o.penalised.iter().take(room).cloned());
        self.backlog_packets += o.backlog_packets;
        self.backlog_bytes += o.backlog_bytes;
        let (a, b) = (&mut self.queue, &o.queue);
        a.enqueued += b.enqueued;
        a.sent += b.sent;
        a.sent_bytes += b.sent_bytes;
        a.send_errors += b.send_errors;
        a.shutdown_dropped += b.shutdown_dropped;
        a.sojourn_sum_ns = a.sojourn_sum_ns.saturating_add(b.sojourn_sum_ns);
        a.sojourn_max_ns = a.sojourn_max_ns.max(b.sojourn_max_ns);
        a.stripped += b.stripped;
    }

    /// Mean time from enqueue to send of the sent frames, ms.
    pub fn mean_sojourn_ms(&self) -> f64 {
        let n = self.queue.sent + self.queue.send_errors;
        if n == 0 {
            0.0
        } else {
            self.queue.sojourn_sum_ns as f64 / n as f64 / 1e6
        }
    }
}

/// One interface's multicast figures ([`InterfaceStats`] with the name).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MulticastInterface {
    /// The interface.
    pub name: String,
    /// The figures.
    #[serde(flatten)]
    pub stats: InterfaceStats,
}

/// Counters of the live I/O around the pipeline.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct IoCounters {
    /// Batches processed.
    pub batches: u64,
    /// Forwarded packets whose port set was empty (nothing sent).
    pub no_egress: u64,
    /// Copies not sent because the egress port was the ingress port.
    pub hairpin_suppressed: u64,
    /// Empty Icarus filters inserted at edge ingress.
    pub icarus_inserted: u64,
    /// Edge insertions that failed (no room, unsupported).
    pub icarus_insert_failed: u64,
    /// Filters stripped at edge egress.
    pub icarus_stripped: u64,
}

impl IoCounters {
    fn merge(&mut self, o: &IoCounters) {
        self.batches += o.batches;
        self.no_egress += o.no_egress;
        self.hairpin_suppressed += o.hairpin_suppressed;
        self.icarus_inserted += o.icarus_inserted;
        self.icarus_insert_failed += o.icarus_insert_failed;
        self.icarus_stripped += o.icarus_stripped;
    }
}

/// Every counter of one worker, or of all of them merged.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Stats {
    /// Worker index (`None` when merged).
    pub worker: Option<usize>,
    /// The core the worker is pinned to (`None`: not pinned, or merged).
    pub core: Option<usize>,
    /// Per interface, in port order.
    pub interfaces: Vec<PortCounters>,
    /// The pipeline.
    pub pipeline: PipelineSummary,
    /// Live I/O.
    pub io: IoCounters,
    /// The wires stage.
    pub wires: WiresCounters,
    /// The multicast stage, when on.
    pub multicast: Option<MulticastCounters>,
    /// The multicast stage's figures per interface (members, cap,
    /// refusals, filter fill and false-positive estimate), when on.
    pub multicast_interfaces: Vec<MulticastInterface>,
    /// The icarus stage, when on.
    pub icarus: Option<IcarusCounters>,
    /// The heavy-flow stage, when on.
    pub heavy: Option<HeavyCounters>,
    /// One per SFB queue.
    pub sfb: Vec<SfbSummary>,
}

impl Stats {
    /// Merges per-worker stats (`worker` and `core` are dropped).
    pub fn merged(all: &[Stats]) -> Stats {
        let mut m = Stats::default();
        for s in all {
            if m.interfaces.is_empty() {
                m.interfaces = s
                    .interfaces
                    .iter()
                    .map(|p| PortCounters {
                        name: p.name.clone(),
                        ..PortCounters::default()
                    })
                    .collect();
                m.sfb = s
                    .sfb
                    .iter()
                    .map(|q| SfbSummary {
                        interface: q.interface.clone(),
                        ..SfbSummary::default()
                    })
                    .collect();
            }
            for (a, b) in m.interfaces.iter_mut().zip(&s.interfaces) {
                a.merge(b);
            }
            for (a, b) in m.sfb.iter_mut().zip(&s.sfb) {
                a.merge(b);
            }
            m.pipeline.merge(&s.pipeline);
            m.io.merge(&s.io);
            m.wires.routed += s.wires.routed;
            m.wires.no_route += s.wires.no_route;
            m.wires.multicast += s.wires.multicast;
            if let Some(i) = &s.icarus {
                m.icarus.get_or_insert_with(Default::default).merge(i);
            }
            if let Some(h) = &s.heavy {
                let t = m.heavy.get_or_insert_with(Default::default);
                t.packets += h.packets;
                t.bytes += h.bytes;
                t.skipped += h.skipped;
                t.detections += h.detections;
                t.evictions += h.evictions;
                t.overflow += h.overflow;
                t.epochs = t.epochs.max(h.epochs);
                t.reported += h.reported;
            }
            if let Some(c) = &s.multicast {
                m.multicast.get_or_insert_with(Default::default).merge(c);
            }
            if m.multicast_interfaces.is_empty() {
                m.multicast_interfaces = s.multicast_interfaces.clone();
            } else {
                for (a, b) in m
                    .multicast_interfaces
                    .iter_mut()
                    .zip(&s.multicast_interfaces)
                {
                    a.stats.merge(&b.stats);
                }
            }
        }
        m
    }

    /// Human-readable lines: per interface, per stage, per drop reason.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let who = match (self.worker, self.core) {
            (Some(w), Some(c)) => format!("worker {w} (core {c})"),
            (Some(w), None) => format!("worker {w}"),
            _ => "all workers".to_string(),
        };
        s.push_str(&format!("== {who}\n"));
        for p in &self.interfaces {
            s.push_str(&format!(
                "  if {:<15} rx {} pkts {} B ({} err, {} outgoing dropped)  tx {} pkts {} B ({} err)\n",
                p.name,
                p.rx_packets,
                p.rx_bytes,
                p.rx_errors,
                p.rx_outgoing_dropped,
                p.tx_packets,
                p.tx_bytes,
                p.tx_errors
            ));
        }
        let pl = &self.pipeline;
        s.push_str(&format!(
            "  pipeline received {} forwarded {} marked {} dropped {} non_ip {}\n",
            pl.received, pl.forwarded, pl.marked, pl.dropped, pl.non_ip
        ));
        for (r, n) in &pl.drops {
            s.push_str(&format!("  drop {r} {n}\n"));
        }
        s.push_str(&format!(
            "  stage wires routed {} no_route {} multicast {}\n",
            self.wires.routed, self.wires.no_route, self.wires.multicast
        ));
        if let Some(m) = &self.multicast {
            s.push_str(&format!(
                "  stage multicast data {} forwarded {} copies {} control {} joins {} refused {} leaves {} records {} over_budget {} events sent {} applied {} superseded {}\n",
                m.data_packets, m.forwarded, m.copies, m.control, m.joins, m.joins_refused,
                m.leaves, m.records, m.records_over_budget, m.events_sent, m.events_applied,
                m.events_superseded
            ));
        }
        for i in &self.multicast_interfaces {
            let st = &i.stats;
            s.push_str(&format!(
                "  multicast {} members {} learned {}/{} refused {} fill {:.4} fpr {:.6}\n",
                i.name, st.members, st.learned, st.max_learned, st.refused, st.fill, st.fpr
            ));
        }
        if let Some(i) = &self.icarus {
            s.push_str(&format!(
                "  stage icarus loops {} marked_hops {} inserted {} stripped {} no_room {} without_option {}\n",
                i.loops_detected, i.marked_hops, self.io.icarus_inserted, self.io.icarus_stripped,
                i.no_room, i.passed_without_option
            ));
        }
        if let Some(h) = &self.heavy {
            s.push_str(&format!(
                "  stage heavy packets {} bytes {} detections {} reported {} overflow {}\n",
                h.packets, h.bytes, h.detections, h.reported, h.overflow
            ));
        }
        for q in &self.sfb {
            let p = |v: u16| f64::from(v) / 65535.0;
            s.push_str(&format!(
                "  stage sfb {} marked {} earlydrop {} penaltydrop {} bucketdrop {} queuedrop {} childdrop {} maxqlen {} maxprob {:.4} avgprob {:.4}\n",
                q.interface, q.marked, q.earlydrop, q.penaltydrop, q.bucketdrop, q.queuedrop,
                q.childdrop, q.maxqlen, p(q.maxprob), p(q.avgprob)
            ));
            let c = &q.queue;
            s.push_str(&format!(
                "  queue {} backlog {} pkts {} B enqueued {} sent {} pkts {} B ({} err) shutdown_dropped {} sojourn mean {:.3} ms max {:.3} ms\n",
                q.interface, q.backlog_packets, q.backlog_bytes, c.enqueued, c.sent, c.sent_bytes,
                c.send_errors, c.shutdown_dropped, q.mean_sojourn_ms(), c.sojourn_max_ns as f64 / 1e6
            ));
            for f in &q.penalised {
                s.push_str(&format!(
                    "  penalised {} {} admitted {} dropped {}\n",
                    q.interface, f.flow, f.admitted, f.dropped
                ));
            }
        }
        s
    }
}

/// Closed heavy-flow epochs of one worker.
#[derive(Debug)]
struct EpochMsg {
    worker: usize,
    reports: Vec<EpochReport>,
    /// Every epoch before this one is closed on this worker.
    closed_before: u64,
}

/// Builds one worker's pipeline: parse -> icarus -> heavy -> wires ->
/// multicast -> the egress queues of the ports with an `sfb` table.
pub fn build_pipeline(cfg: &RouterConfig) -> anyhow::Result<Pipeline> {
    let mut p = Pipeline::new(PipelineConfig {
        default_egress: PortSet::EMPTY,
        ..PipelineConfig::default()
    });
    let icarus = cfg.icarus_config();
    if let Some(ic) = icarus {
        p.push_stage(Box::new(IcarusStage::new(ic)));
    }
    if let Some(h) = cfg.heavy_config() {
        p.push_stage(Box::new(HeavyStage::new(h)));
    }
    let mc = cfg.multicast_config();
    p.push_stage(Box::new(Wires::new(cfg.unicast_routes(), mc.is_some())));
    if let Some(m) = mc {
        p.push_stage(Box::new(MulticastStage::new(&m)?));
    }
    let strip = icarus.map_or(0, |c| c.strip_on_egress);
    let specs: Vec<QueueSpec> = cfg
        .sfb_stages()
        .into_iter()
        .map(|s| QueueSpec {
            port: s.port,
            name: cfg
                .interfaces
                .get(usize::from(s.port))
                .map_or_else(String::new, |i| i.name.clone()),
            sfb: s.sfb,
            egress: s.egress,
            strip: strip & 1u64.checked_shl(u32::from(s.port)).unwrap_or(0) != 0,
        })
        .collect();
    if !specs.is_empty() {
        p.push_stage(Box::new(EgressQueues::new(specs)?));
    }
    Ok(p)
}

/// One worker's pipeline and its end of the membership exchange.
#[derive(Debug)]
pub struct WorkerPipeline {
    /// The pipeline ([`build_pipeline`]).
    pub pipeline: Pipeline,
    /// `None` with one worker or no multicast stage.
    pub link: Option<MembershipLink>,
}

impl WorkerPipeline {
    /// One batch, as the live worker runs it ([`share::process`]).
    pub fn process(&mut self, batch: &mut Batch, now: Timestamp) {
        share::process(&mut self.pipeline, self.link.as_ref(), batch, now);
    }
}

/// The pipelines of `workers` workers ([`build_pipeline`] each), their
/// multicast stages linked as replicas of one membership state when there
/// is more than one worker (see the module docs).
pub fn build_workers(cfg: &RouterConfig, workers: usize) -> anyhow::Result<Vec<WorkerPipeline>> {
    let share = workers > 1 && cfg.multicast_config().is_some();
    let mut links = share.then(|| share::links(workers).into_iter());
    (0..workers)
        .map(|_| {
            let mut pipeline = build_pipeline(cfg)?;
            let link = links.as_mut().and_then(Iterator::next);
            if let Some(l) = &link {
                l.attach(&mut pipeline);
            }
            Ok(WorkerPipeline { pipeline, link })
        })
        .collect()
}

/// Options of [`Router::start`] that are not in the file.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Heavy-flow report destination overriding `heavy.report`.
    pub heavy_report: Option<String>,
}

/// A running router.
#[derive(Debug)]
pub struct Router {
    /// One lock per interface, held until the router is dropped.
    _locks: Vec<lock::InterfaceLock>,
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<Stats>>,
    snapshots: Vec<Arc<Mutex<Stats>>>,
    reporter: Option<HeavyReporter>,
    epochs: crossbeam_channel::Receiver<EpochMsg>,
}

struct Worker {
    id: usize,
    core: Option<core_affinity::CoreId>,
    ports: Vec<Port>,
    pipeline: Pipeline,
    /// Multicast memberships to and from the other workers.
    link: Option<MembershipLink>,
    clock: MonotonicClock,
    stop: Arc<AtomicBool>,
    snapshot: Arc<Mutex<Stats>>,
    epochs: crossbeam_channel::Sender<EpochMsg>,
    epoch_ns: Option<u64>,
    insert_mask: u64,
    strip_mask: u64,
    filter_width: crate::wire::icarus::FilterWidth,
    /// Ports with an egress queue (left to `send_due`).
    queued: u64,
    /// Filters stripped by `transmit` (the queues count their own).
    stripped: u64,
    /// The frame being read ([`socket::READ_BUFFER`] bytes).
    rx_buf: Box<[u8]>,
    /// Ports whose multicast cap was reported (once each).
    cap_warned: u64,
}

impl Router {
    /// Opens every socket, then starts the workers. Errors (missing or down
    /// interface, no `CAP_NET_RAW`, unknown core) come back before any
    /// worker runs.
    pub fn start(cfg: &RouterConfig, opts: &RunOptions) -> anyhow::Result<Router> {
        let n = cfg.workers.resolved_count();
        let available = core_affinity::get_core_ids().unwrap_or_default();
        let mut cores = Vec::with_capacity(n);
        for i in 0..n {
            cores.push(match cfg.workers.cores.get(i) {
                Some(&c) => Some(
                    available
                        .iter()
                        .copied()
                        .find(|x| x.id == c)
                        .ok_or_else(|| {
                            anyhow::anyhow!(
                                "workers.cores[{i}]: core {c} is not available to this process (have {:?})",
                                available.iter().map(|x| x.id).collect::<Vec<_>>()
                            )
                        })?,
                ),
                None => None,
            });
        }
        // No other router on these ports (see `lock`).
        let locks = lock::lock_all(cfg.interfaces.iter().map(|i| i.name.as_str()))?;
        // Fanout groups: one per interface, joined in worker order.
        let mut groups = Vec::new();
        for ifc in &cfg.interfaces {
            let sys = socket::find_interface(&ifc.name)?;
            groups.push(socket::fanout_group(sys.index));
        }
        let mut all_ports = Vec::with_capacity(n);
        for _ in 0..n {
            let mut ports = Vec::new();
            for (ifc, g) in cfg.interfaces.iter().zip(&groups) {
                ports.push(socket::open_port(ifc, *g)?);
            }
            all_ports.push(ports);
        }
        for p in &all_ports[0] {
            eprintln!(
                "dataplane: {}: receive buffer {} bytes, fanout group {:#06x} ({} workers)",
                p.name,
                p.recv_buffer,
                groups[cfg.port_of(&p.name).map_or(0, usize::from)],
                n
            );
        }

        let reporter = match cfg.heavy.as_ref() {
            Some(h) => Some(HeavyReporter::new(
                opts.heavy_report
                    .clone()
                    .unwrap_or_else(|| h.report.clone()),
                h.stage_config().threshold,
                n,
            )?),
            None => None,
        };
        // Every socket and file is open, no thread started: nothing needs a
        // capability from here on (see `privileges`).
        let dropped = privileges::drop_all()?;
        if dropped.effective_before != 0 {
            eprintln!(
                "dataplane: capabilities dropped (effective was {:#x}, now none)",
                dropped.effective_before
            );
        }
        let (etx, erx) = crossbeam_channel::unbounded();
        let stop = Arc::new(AtomicBool::new(false));
        let clock = MonotonicClock::new();
        let icarus = cfg.icarus_config();
        let mut workers = Vec::new();
        let mut snapshots = Vec::new();
        let pipelines = build_workers(cfg, n)?;
        for (id, ((ports, core), wp)) in all_ports.into_iter().zip(cores).zip(pipelines).enumerate()
        {
            let snapshot = Arc::new(Mutex::new(Stats::default()));
            snapshots.push(snapshot.clone());
            let WorkerPipeline { pipeline, link } = wp;
            let queued = pipeline
                .stage::<EgressQueues>()
                .map_or(0, |q| q.ports().mask());
            let w = Worker {
                id,
                core,
                ports,
                pipeline,
                link,
                clock,
                stop: stop.clone(),
                snapshot,
                epochs: etx.clone(),
                epoch_ns: cfg.heavy_config().and_then(|h| h.epoch_ns),
                insert_mask: icarus.map_or(0, |c| c.insert_on_ingress),
                strip_mask: icarus.map_or(0, |c| c.strip_on_egress),
                filter_width: icarus.map_or_else(Default::default, |c| c.params.width()),
                queued,
                stripped: 0,
                rx_buf: vec![0; socket::READ_BUFFER].into_boxed_slice(),
                cap_warned: 0,
            };
            workers.push(
                std::thread::Builder::new()
                    .name(format!("bp-worker-{id}"))
                    .spawn(move || w.run())?,
            );
        }
        Ok(Router {
            _locks: locks,
            stop,
            workers,
            snapshots,
            reporter,
            epochs: erx,
        })
    }

    /// The stop flag (set it, from a signal handler say, to stop).
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// Whether any worker has exited (they only do when stopped, or on a
    /// panic).
    pub fn any_worker_exited(&self) -> bool {
        self.workers.iter().any(|w| w.is_finished())
    }

    /// The latest snapshot of each worker.
    pub fn snapshot(&self) -> Vec<Stats> {
        self.snapshots
            .iter()
            .map(|s| s.lock().map(|g| g.clone()).unwrap_or_default())
            .collect()
    }

    /// Writes the heavy-flow epochs every worker has closed.
    pub fn pump_reports(&mut self) -> anyhow::Result<()> {
        if let Some(r) = &mut self.reporter {
            while let Ok(m) = self.epochs.try_recv() {
                r.add(m);
            }
            r.flush(false)?;
        }
        Ok(())
    }

    /// Stops the workers, waits for them (each closes its epochs), writes
    /// the last reports and returns every worker's final stats.
    pub fn shutdown(mut self) -> anyhow::Result<Vec<Stats>> {
        self.stop.store(true, Ordering::SeqCst);
        let mut out = Vec::new();
        let mut panicked = false;
        for w in std::mem::take(&mut self.workers) {
            match w.join() {
                Ok(s) => out.push(s),
                Err(_) => panicked = true,
            }
        }
        if let Some(r) = &mut self.reporter {
            while let Ok(m) = self.epochs.try_recv() {
                r.add(m);
            }
            r.flush(true)?;
        }
        if panicked {
            anyhow::bail!("a worker panicked");
        }
        Ok(out)
    }
}

impl Worker {
    fn run(mut self) -> Stats {
        let pinned = self.core.filter(|c| core_affinity::set_for_current(*c));
        if let (Some(c), None) = (self.core, pinned) {
            eprintln!(
                "dataplane: worker {}: could not pin to core {}",
                self.id, c.id
            );
        }
        let mut stats = Stats {
            worker: Some(self.id),
            core: pinned.map(|c| c.id),
            interfaces: self
                .ports
                .iter()
                .map(|p| PortCounters {
                    name: p.name.clone(),
                    ..PortCounters::default()
                })
                .collect(),
            ..Stats::default()
        };
        let mut batch = Batch::new();
        let mut empty = Batch::new();
        let mut scratch: Vec<u8> = Vec::with_capacity(socket::READ_BUFFER);
        let mut pollfds = Vec::with_capacity(self.ports.len());
        let mut next_tick = self.clock.now().add_nanos(TICK.as_nanos() as u64);
        while !self.stop.load(Ordering::Relaxed) {
            let mut got = 0;
            for port in 0..self.ports.len() {
                batch.clear();
                self.fill(port, &mut batch, &mut scratch, &mut stats);
                if batch.is_empty() {
                    continue;
                }
                got += batch.len();
                self.forward(&mut batch, &mut scratch, &mut stats);
            }
            let now = self.clock.now();
            self.send_due(now, &mut stats);
            if now >= next_tick {
                self.tick(&mut empty, now, &mut stats);
                next_tick = now.add_nanos(TICK.as_nanos() as u64);
            }
            if got == 0 {
                let wait = self.next_departure().map_or(IDLE_POLL, |t| {
                    IDLE_POLL.min(Duration::from_nanos(t.nanos_since(now)))
                });
                wait_readable(&mut pollfds, &self.ports, wait);
            }
        }
        // Drain: whatever is already queued in the sockets is processed
        // (up to the deadline: a sender that never stops cannot hold the
        // stop up)...
        let deadline = self
            .clock
            .now()
            .add_nanos(u64::try_from(DRAIN_DEADLINE.as_nanos()).unwrap_or(u64::MAX));
        for port in 0..self.ports.len() {
            while self.clock.now() < deadline {
                batch.clear();
                self.fill(port, &mut batch, &mut scratch, &mut stats);
                if batch.is_empty() {
                    break;
                }
                self.forward(&mut batch, &mut scratch, &mut stats);
            }
        }
        // ...and the egress queues are sent at their rate, up to the same
        // deadline.
        loop {
            let now = self.clock.now();
            self.send_due(now, &mut stats);
            let Some(next) = self.next_departure() else {
                break;
            };
            if now >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_nanos(next.min(deadline).nanos_since(now)));
        }
        if let Some(q) = self.pipeline.stage_mut::<EgressQueues>() {
            let left = q.discard_all();
            if left > 0 {
                eprintln!(
                    "dataplane: worker {}: {left} queued frames not sent within {:?} of the stop; dropped",
                    self.id, DRAIN_DEADLINE
                );
            }
        }
        let now = self.clock.now();
        self.pipeline.finish(now);
        self.collect(&mut stats, now, true);
        stats
    }

    /// One batch: pipeline, then the unqueued ports' copies, then whatever
    /// the queues released.
    fn forward(&mut self, batch: &mut Batch, scratch: &mut Vec<u8>, stats: &mut Stats) {
        let now = self.clock.now();
        // Frames due by `now` leave first: the queue limits and SFB's bins
        // then see the queues as they are at `now`.
        self.send_due(now, stats);
        share::process(&mut self.pipeline, self.link.as_ref(), batch, now);
        stats.io.batches += 1;
        self.transmit(batch, scratch, stats);
        self.send_due(now, stats);
    }

    /// Sends every queued frame the shapers released by `now`.
    fn send_due(&mut self, now: Timestamp, stats: &mut Stats) {
        if self.queued == 0 {
            return;
        }
        let Some(q) = self.pipeline.stage_mut::<EgressQueues>() else {
            return;
        };
        let ports = &mut self.ports;
        q.send_due(now, |out, frame| {
            let o = usize::from(out);
            let (Some(port), Some(pc)) = (ports.get_mut(o), stats.interfaces.get_mut(o)) else {
                return false;
            };
            match port.tx.send_to(frame, None) {
                Some(Ok(())) => {
                    pc.tx_packets += 1;
                    pc.tx_bytes += frame.len() as u64;
                    true
                }
                _ => {
                    pc.tx_errors += 1;
                    false
                }
            }
        });
    }

    /// When the next queued frame is due (`None`: nothing queued).
    fn next_departure(&self) -> Option<Timestamp> {
        if self.queued == 0 {
            return None;
        }
        self.pipeline.stage::<EgressQueues>()?.next_departure()
    }

    /// Reads up to a batch from `port`.
    fn fill(&mut self, port: usize, batch: &mut Batch, scratch: &mut Vec<u8>, stats: &mut Stats) {
        let insert = self.insert_mask & (1u64 << port) != 0;
        while !batch.is_full() {
            let frame = match self.ports[port].recv(&mut self.rx_buf) {
                Ok(Received::Frame(n)) => &self.rx_buf[..n],
                Ok(Received::Empty) => break,
                Ok(Received::Outgoing) => {
                    stats.interfaces[port].rx_outgoing_dropped += 1;
                    continue;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    stats.interfaces[port].rx_errors += 1;
                    break;
                }
            };
            let pc = &mut stats.interfaces[port];
            pc.rx_packets += 1;
            pc.rx_bytes += frame.len() as u64;
            let now = self.clock.now();
            if insert {
                scratch.clear();
                scratch.extend_from_slice(frame);
                if let Ok(parsed) = wire::parse(LinkType::Ethernet, scratch)
                    && parsed.is_ip()
                {
                    let empty = wire::icarus::Filter::empty(self.filter_width);
                    match wire::icarus::insert(scratch, parsed.l3_offset, &empty) {
                        Ok(_) => stats.io.icarus_inserted += 1,
                        Err(wire::icarus::IcarusError::AlreadyPresent) => {}
                        Err(_) => stats.io.icarus_insert_failed += 1,
                    }
                }
                let len = scratch.len() as u32;
                batch.push_from(now, len, LinkType::Ethernet, port as u8, scratch);
            } else {
                let len = frame.len() as u32;
                batch.push_from(now, len, LinkType::Ethernet, port as u8, frame);
            }
        }
    }

    /// Sends every forwarded packet out of its ports (never its ingress),
    /// except the ports with an egress queue: the queue holds those copies.
    fn transmit(&mut self, batch: &Batch, scratch: &mut Vec<u8>, stats: &mut Stats) {
        for p in batch.packets() {
            let ports = match p.verdict {
                Verdict::Forward(ps) | Verdict::Mark(ps) => ps,
                Verdict::Drop(_) => continue,
            };
            if ports.is_empty() {
                stats.io.no_egress += 1;
                continue;
            }
            for out in ports.iter() {
                let o = usize::from(out);
                if out == p.ingress {
                    stats.io.hairpin_suppressed += 1;
                    continue;
                }
                if o >= self.ports.len() || self.queued & (1u64 << o) != 0 {
                    continue;
                }
                let data: &[u8] = if self.strip_mask & (1u64 << o) != 0
                    && let Some(parsed) = p.parsed.filter(|q| q.is_ip())
                {
                    scratch.clear();
                    scratch.extend_from_slice(p.data());
                    if matches!(
                        wire::icarus::strip(scratch, parsed.l3_offset),
                        Ok(wire::icarus::Stripped::Removed(_)
                            | wire::icarus::Stripped::Neutralised)
                    ) {
                        self.stripped += 1;
                    }
                    scratch
                } else {
                    p.data()
                };
                let pc = &mut stats.interfaces[o];
                match self.ports[o].tx.send_to(data, None) {
                    Some(Ok(())) => {
                        pc.tx_packets += 1;
                        pc.tx_bytes += data.len() as u64;
                    }
                    _ => pc.tx_errors += 1,
                }
            }
        }
    }

    /// The 100 ms housekeeping: empty batch through the pipeline (epochs,
    /// SFB's rehash clock), closed epochs to the reporter, counters
    /// published.
    fn tick(&mut self, empty: &mut Batch, now: Timestamp, stats: &mut Stats) {
        empty.clear();
        share::process(&mut self.pipeline, self.link.as_ref(), empty, now);
        self.collect(stats, now, false);
        if let Ok(mut s) = self.snapshot.lock() {
            s.clone_from(stats);
        }
    }

    fn collect(&mut self, stats: &mut Stats, now: Timestamp, last: bool) {
        let p = &mut self.pipeline;
        stats.pipeline = PipelineSummary::from_counters(p.counters());
        stats.io.icarus_stripped = self.stripped;
        if let Some(w) = p.stage::<Wires>() {
            stats.wires = *w.counters();
        }
        stats.multicast = p.stage::<MulticastStage>().map(|m| m.counters().clone());
        if let Some(m) = p.stage::<MulticastStage>() {
            stats.multicast_interfaces = m
                .interface_stats()
                .into_iter()
                .zip(&self.ports)
                .map(|(st, port)| {
                    let bit = 1u64 << (st.port & 63);
                    if st.refused > 0 && self.cap_warned & bit == 0 {
                        self.cap_warned |= bit;
                        eprintln!(
                            "dataplane: worker {}: {}: {} learned multicast groups, the cap (multicast.max_learned_groups): further joins are refused and counted",
                            self.id, port.name, st.learned
                        );
                    }
                    MulticastInterface {
                        name: port.name.clone(),
                        stats: st,
                    }
                })
                .collect();
        }
        stats.icarus = p.stage::<IcarusStage>().map(|i| *i.counters());
        stats.sfb = Vec::new();
        if let Some(q) = p.stage::<EgressQueues>() {
            stats.sfb = q.summaries(now);
            stats.io.icarus_stripped += q.counters().map(|(_, c)| c.stripped).sum::<u64>();
            let (gone, gone_marked) = q.shutdown_discarded();
            if gone > 0 {
                let pl = &mut stats.pipeline;
                pl.forwarded = pl.forwarded.saturating_sub(gone);
                pl.marked = pl.marked.saturating_sub(gone_marked);
                pl.dropped += gone;
                *pl.drops.entry("egress_shutdown".to_string()).or_default() += gone;
            }
        }
        if let Some(h) = p.stage_mut::<HeavyStage>() {
            stats.heavy = Some(*h.counters());
            let reports = h.take_reports();
            let closed_before = if last {
                u64::MAX
            } else {
                self.epoch_ns.map_or(0, |l| now.as_nanos() / l.max(1))
            };
            let _ = self.epochs.send(EpochMsg {
                worker: self.id,
                reports,
                closed_before,
            });
        }
    }
}

/// Waits up to `timeout` for any of `ports` to be readable, with
/// nanosecond precision (`ppoll(2)`; `poll(2)` counts whole milliseconds,
/// which would wake a shaped queue late or spin). EINTR counts as a timeout.
fn wait_readable(fds: &mut Vec<libc::pollfd>, ports: &[Port], timeout: Duration) {
    fds.clear();
    fds.extend(ports.iter().map(|p| libc::pollfd {
        fd: p.fd,
        events: libc::POLLIN,
        revents: 0,
    }));
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: timeout.subsec_nanos().into(),
    };
    // SAFETY: `fds` is a live, initialised array of `fds.len()` pollfd
    // structs and `ts` a live timespec for the duration of the call; a null
    // signal mask leaves the mask alone. The descriptors are open (pnet owns
    // them and `ports` borrows pnet's halves).
    unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        );
    }
}

/// Merges the workers' heavy-flow epochs and writes each closed epoch once
/// every worker has closed it.
struct HeavyReporter {
    out: Box<dyn Write + Send>,
    threshold: Threshold,
    pending: Vec<Vec<EpochReport>>,
    closed_before: Vec<u64>,
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
    fn new(dest: String, threshold: Threshold, workers: usize) -> anyhow::Result<Self> {
        let out: Box<dyn Write + Send> = if dest == "-" {
            Box::new(std::io::stdout())
        } else {
            Box::new(
                std::fs::File::create(&dest)
                    .map_err(|e| anyhow::anyhow!("heavy.report: cannot create {dest}: {e}"))?,
            )
        };
        Ok(HeavyReporter {
            out,
            threshold,
            pending: vec![Vec::new(); workers],
            closed_before: vec![0; workers],
        })
    }

    fn add(&mut self, m: EpochMsg) {
        self.pending[m.worker].extend(m.reports);
        self.closed_before[m.worker] = self.closed_before[m.worker].max(m.closed_before);
    }

    fn flush(&mut self, all: bool) -> anyhow::Result<()> {
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
        for e in merge_epochs(&ready, self.threshold) {
            e.write_json_lines(&mut self.out)?;
        }
        self.out.flush()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_pipeline_builds() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/router.toml");
        let cfg = RouterConfig::load(&path).unwrap();
        let p = build_pipeline(&cfg).unwrap();
        assert!(p.stage::<Wires>().is_some());
        assert_eq!(
            p.stage::<EgressQueues>().map(|q| q.ports()),
            Some(PortSet::single(1))
        );
        assert!(p.stage::<HeavyStage>().is_some());
        assert!(p.stage::<IcarusStage>().is_some());
        assert!(p.stage::<MulticastStage>().is_some());
    }

    #[test]
    fn stats_merge_and_render() {
        let a = Stats {
            worker: Some(0),
            core: Some(1),
            interfaces: vec![PortCounters {
                name: "a".into(),
                rx_packets: 3,
                ..PortCounters::default()
            }],
            ..Stats::default()
        };
        let a = Stats {
            sfb: vec![SfbSummary {
                interface: "a".into(),
                marked: 2,
                maxprob: 7,
                penalised: vec![PenalisedSummary::default(); MAX_PENALISED],
                backlog_packets: 1,
                queue: QueueCounters {
                    sent: 4,
                    sojourn_sum_ns: 8_000_000,
                    sojourn_max_ns: 3_000_000,
                    ..QueueCounters::default()
                },
                ..SfbSummary::default()
            }],
            ..a
        };
        let m = Stats::merged(&[a.clone(), a.clone()]);
        assert_eq!(m.interfaces[0].rx_packets, 6);
        let q = &m.sfb[0];
        assert_eq!((q.marked, q.maxprob, q.backlog_packets), (4, 7, 2));
        assert_eq!((q.queue.sent, q.queue.sojourn_max_ns), (8, 3_000_000));
        assert_eq!(q.penalised.len(), MAX_PENALISED);
        assert!((q.mean_sojourn_ms() - 2.0).abs() < 1e-9);
        assert!(
            m.render()
                .contains("queue a backlog 2 pkts 0 B enqueued 0 sent 8 pkts"),
            "{}",
            m.render()
        );
        assert!(a.render().contains("worker 0 (core 1)"));
        assert!(m.render().contains("all workers"));
    }
}
