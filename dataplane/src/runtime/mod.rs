//! The live router: pinned workers, their sockets, stats and reports.
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
//! monotonic `now`, and send every forwarded frame out of its ports. When no
//! port had anything it waits in `poll(2)` (10 ms at most). Every 100 ms it
//! ticks the pipeline with an empty batch (closing heavy-flow epochs on
//! time, draining SFB queues), sends closed epochs to the reporter and
//! publishes a snapshot of its counters. Nothing is shared on the hot path:
//! the snapshot sits behind a mutex only the tick and the reader take.

pub mod forward;
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
use crate::pipeline::{Batch, Pipeline, PipelineConfig, PipelineCounters, PortSet, Stage, Verdict};
use crate::stage::heavy::{EpochReport, HeavyCounters, HeavyStage, Threshold, merge_epochs};
use crate::stage::icarus::{IcarusCounters, IcarusStage};
use crate::stage::multicast::{MulticastCounters, MulticastStage};
use crate::stage::sfb::SfbStage;
use crate::wire::{self, LinkType};
use forward::{Wires, WiresCounters};
use socket::Port;

/// How often a worker ticks its pipeline and publishes its counters.
pub const TICK: Duration = Duration::from_millis(100);

/// Longest wait in `poll(2)` when every port is idle.
pub const IDLE_POLL: Duration = Duration::from_millis(10);

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

/// One egress queue's SFB counters (`tc -s qdisc show` style).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SfbSummary {
    /// The interface.
    pub interface: String,
    /// Drops of non-ECN packets SFB would have marked.
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
    }
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
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
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
                let t = m.multicast.get_or_insert_with(Default::default);
                t.data_packets += c.data_packets;
                t.forwarded += c.forwarded;
                t.copies += c.copies;
                t.suppressed += c.suppressed;
                t.link_local += c.link_local;
                t.control += c.control;
                t.joins += c.joins;
                t.leaves += c.leaves;
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
                "  if {:<15} rx {} pkts {} B ({} err)  tx {} pkts {} B ({} err)\n",
                p.name,
                p.rx_packets,
                p.rx_bytes,
                p.rx_errors,
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
                "  stage multicast data {} forwarded {} copies {} control {} joins {} leaves {}\n",
                m.data_packets, m.forwarded, m.copies, m.control, m.joins, m.leaves
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
            s.push_str(&format!(
                "  stage sfb {} marked {} earlydrop {} penaltydrop {} bucketdrop {} queuedrop {} childdrop {} maxqlen {} maxprob {:.4}\n",
                q.interface, q.marked, q.earlydrop, q.penaltydrop, q.bucketdrop, q.queuedrop,
                q.childdrop, q.maxqlen, f64::from(q.maxprob) / 65535.0
            ));
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
/// multicast -> one SFB queue per configured port.
pub fn build_pipeline(cfg: &RouterConfig) -> anyhow::Result<Pipeline> {
    let mut p = Pipeline::new(PipelineConfig {
        default_egress: PortSet::EMPTY,
        ..PipelineConfig::default()
    });
    if let Some(ic) = cfg.icarus_config() {
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
    let queues = cfg
        .sfb_stages()
        .into_iter()
        .map(SfbStage::new)
        .collect::<Result<Vec<_>, _>>()?;
    if !queues.is_empty() {
        let names = cfg
            .sfb_stages()
            .iter()
            .map(|s| cfg.interfaces[usize::from(s.port)].name.clone())
            .collect();
        p.push_stage(Box::new(EgressQueues { queues, names }));
    }
    Ok(p)
}

/// The SFB queues of every configured port, as one stage (so the owner can
/// reach each queue's counters).
#[derive(Debug)]
pub struct EgressQueues {
    queues: Vec<SfbStage>,
    names: Vec<String>,
}

impl EgressQueues {
    /// Counters per queue at `now`.
    pub fn summaries(&self, now: Timestamp) -> Vec<SfbSummary> {
        self.queues
            .iter()
            .zip(&self.names)
            .map(|(q, n)| {
                let st = q.stats(now);
                let c = st.counters;
                SfbSummary {
                    interface: n.clone(),
                    earlydrop: c.earlydrop,
                    penaltydrop: c.penaltydrop,
                    bucketdrop: c.bucketdrop,
                    queuedrop: c.queuedrop,
                    childdrop: c.childdrop,
                    marked: c.marked,
                    maxqlen: st.maxqlen,
                    maxprob: st.maxprob,
                }
            })
            .collect()
    }
}

impl Stage for EgressQueues {
    fn name(&self) -> &'static str {
        "sfb"
    }

    fn process(&mut self, batch: &mut Batch, now: Timestamp) {
        for q in &mut self.queues {
            q.process(batch, now);
        }
    }

    fn finish(&mut self, now: Timestamp) {
        for q in &mut self.queues {
            q.finish(now);
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
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
    clock: MonotonicClock,
    stop: Arc<AtomicBool>,
    snapshot: Arc<Mutex<Stats>>,
    epochs: crossbeam_channel::Sender<EpochMsg>,
    epoch_ns: Option<u64>,
    insert_mask: u64,
    strip_mask: u64,
    filter_width: crate::wire::icarus::FilterWidth,
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
        let (etx, erx) = crossbeam_channel::unbounded();
        let stop = Arc::new(AtomicBool::new(false));
        let clock = MonotonicClock::new();
        let icarus = cfg.icarus_config();
        let mut workers = Vec::new();
        let mut snapshots = Vec::new();
        for (id, (ports, core)) in all_ports.into_iter().zip(cores).enumerate() {
            let snapshot = Arc::new(Mutex::new(Stats::default()));
            snapshots.push(snapshot.clone());
            let w = Worker {
                id,
                core,
                ports,
                pipeline: build_pipeline(cfg)?,
                clock,
                stop: stop.clone(),
                snapshot,
                epochs: etx.clone(),
                epoch_ns: cfg.heavy_config().and_then(|h| h.epoch_ns),
                insert_mask: icarus.map_or(0, |c| c.insert_on_ingress),
                strip_mask: icarus.map_or(0, |c| c.strip_on_egress),
                filter_width: icarus.map_or_else(Default::default, |c| c.params.width()),
            };
            workers.push(
                std::thread::Builder::new()
                    .name(format!("bp-worker-{id}"))
                    .spawn(move || w.run())?,
            );
        }
        Ok(Router {
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
                let now = self.clock.now();
                self.pipeline.process(&mut batch, now);
                stats.io.batches += 1;
                self.transmit(&batch, &mut scratch, &mut stats);
            }
            let now = self.clock.now();
            if now >= next_tick {
                self.tick(&mut empty, now, &mut stats);
                next_tick = now.add_nanos(TICK.as_nanos() as u64);
            }
            if got == 0 {
                socket::poll_readable(&mut pollfds, &self.ports, IDLE_POLL);
            }
        }
        // Drain: whatever is already queued in the sockets is processed.
        for port in 0..self.ports.len() {
            loop {
                batch.clear();
                self.fill(port, &mut batch, &mut scratch, &mut stats);
                if batch.is_empty() {
                    break;
                }
                let now = self.clock.now();
                self.pipeline.process(&mut batch, now);
                stats.io.batches += 1;
                self.transmit(&batch, &mut scratch, &mut stats);
            }
        }
        let now = self.clock.now();
        self.pipeline.finish(now);
        self.collect(&mut stats, now, true);
        stats
    }

    /// Reads up to a batch from `port`.
    fn fill(&mut self, port: usize, batch: &mut Batch, scratch: &mut Vec<u8>, stats: &mut Stats) {
        let insert = self.insert_mask & (1u64 << port) != 0;
        while !batch.is_full() {
            let frame = match self.ports[port].rx.next() {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => break,
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

    /// Sends every forwarded packet out of its ports (never its ingress).
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
                if o >= self.ports.len() {
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
                        stats.io.icarus_stripped += 1;
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
    /// queue drains), closed epochs to the reporter, counters published.
    fn tick(&mut self, empty: &mut Batch, now: Timestamp, stats: &mut Stats) {
        empty.clear();
        self.pipeline.process(empty, now);
        self.collect(stats, now, false);
        if let Ok(mut s) = self.snapshot.lock() {
            s.clone_from(stats);
        }
    }

    fn collect(&mut self, stats: &mut Stats, now: Timestamp, last: bool) {
        let p = &mut self.pipeline;
        stats.pipeline = PipelineSummary::from_counters(p.counters());
        if let Some(w) = p.stage::<Wires>() {
            stats.wires = *w.counters();
        }
        stats.multicast = p.stage::<MulticastStage>().map(|m| m.counters().clone());
        stats.icarus = p.stage::<IcarusStage>().map(|i| *i.counters());
        stats.sfb = p
            .stage::<EgressQueues>()
            .map(|q| q.summaries(now))
            .unwrap_or_default();
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
        assert!(p.stage::<EgressQueues>().is_some());
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
        let m = Stats::merged(&[a.clone(), a.clone()]);
        assert_eq!(m.interfaces[0].rx_packets, 6);
        assert!(a.render().contains("worker 0 (core 1)"));
        assert!(m.render().contains("all workers"));
    }
}
