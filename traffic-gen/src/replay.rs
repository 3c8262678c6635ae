//! Replay into the embedded router: the very chain `dataplane run` builds
//! from a router.toml ([`dataplane::chain::Chain`]), run by the very worker
//! loop ([`dataplane::runtime::Worker`]), on capture ports in capture time.
//!
//! One dispatcher thread reads the captures (or generates the synthetic
//! workload), gives each frame its ingress port (a pcapng interface maps to
//! the configured interface of the same name, else to the one of the same
//! index; a plain pcap's frames arrive on `--ingress`, by default the first
//! interface), paces them as tcpreplay would, and hands them to `workers`
//! pinned worker threads in chunks over bounded crossbeam channels. A
//! frame goes to the worker chosen by a hash of its flow key, so a flow
//! always meets the same worker. Each worker's [`ChunkPorts`] feeds the
//! chunks to its worker loop, on the frames' own clock: egress shapers and
//! SFB queues drain at their configured rates against capture time,
//! multicast groups are learned from the capture's IGMP/MLD, heavy-flow
//! epochs follow capture time. What leaves a port is counted, and with
//! `--write DIR` written to `DIR/<interface>.pcap` at its departure time.
//! At the end of the input every queue is sent out at the times its shaper
//! releases it, so nothing is left queued.
//!
//! A capture with a defect part-way is replayed up to the defect, which
//! goes into the report's `input_errors` ([`crate::input`]); a stop
//! requested by the operator ([`replay_with_stop`]) ends the input there,
//! and the report (with `interrupted` set) covers what was sent, every
//! queue drained as at a normal end.
//!
//! # Determinism
//!
//! With one worker (the default), the same capture, config and seed give
//! the same verdicts, counters, heavy flows and byte-identical `--write`
//! captures: every stage runs on capture time, and the hash keys a config
//! leaves to chance are seeded from `--seed` ([`RouterConfig::fill_seeds`]).
//! With `n` workers, each flow's fate is still decided by one worker on its
//! own packets in capture order, so heavy flows, Icarus and, for ports
//! without a queue, every copy are the same; but the workers offer their
//! copies to a shaped port's one queue (as the live router does) in an
//! order that depends on thread timing, which changes SFB's decisions, and
//! multicast memberships learned by one worker reach the
//! others between batches whose order depends on thread timing. Where the
//! router has a queue, the dispatcher keeps the frames the workers are
//! working on within [`LOCKSTEP_WINDOW_NS`] of capture time of each other
//! ([`Lockstep`]), so that the queue sees the capture's arrivals in order
//! up to that window, as one worker's queue does. The written captures
//! are merged per port in departure-time order.
//!
//! # Latency
//!
//! Three distributions (see [`dataplane::runtime::worker`]): processing
//! (wall clock, per packet), egress sojourn and through-router (capture
//! time, per copy).

use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread;
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use crossbeam_channel::{Receiver, Sender, bounded, unbounded};
use dataplane::chain::{Chain, PacketLog};
use dataplane::clock::Timestamp;
use dataplane::config::RouterConfig;
use dataplane::io::capture::{CaptureReader, CaptureWriter, FileFormat};
use dataplane::io::memory::MemoryPorts;
use dataplane::io::port::{Ports, RxCounters};
use dataplane::pipeline::{BATCH_SIZE, Batch, MalformedPolicy, PipelineConfig, PortSet, Verdict};
use dataplane::runtime::share::MembershipLink;
use dataplane::runtime::{Latencies, LatencyReport, Stats, Worker, build_workers};
use dataplane::stage::egress::{Transmit, TxFrame};
use dataplane::stage::heavy::{EpochReport, Threshold, merge_epochs};
use dataplane::wire::{LinkType, parse};
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use serde::Serialize;

use crate::filter::BpfFilter;
pub use crate::pacing::{Pacing, PassClock, Schedule, wait_until, wait_until_or_stop};
use crate::plot::QueueSample;
use dataplane::ipfix::Exporter;
pub use dataplane::runtime::Latency;
pub use dataplane::runtime::worker::new_histogram;

use crate::input::{InputError, InputErrors, LimitReached, Limits, RunNotes, Stop, check_headers};
use crate::synth_router::{RouterSynth, RouterSynthConfig};

/// The built-in router `replay` runs without `--config` (printed by
/// `--print-config`).
pub const DEFAULT_ROUTER: &str = include_str!("default-router.toml");

/// The built-in router, parsed.
///
/// # Panics
/// Never: the text is part of the program and a test checks it.
pub fn default_router() -> RouterConfig {
    RouterConfig::from_toml_str(DEFAULT_ROUTER, "built-in router").expect("the built-in router")
}

/// What to replay.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// Capture files, in order.
    Files(Vec<PathBuf>),
    /// The built-in router's synthetic workload ([`crate::synth_router`]),
    /// generated on the fly, each frame on its own port (by name).
    Synth(RouterSynthConfig),
}

/// Replay settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayConfig {
    /// The router (`--config`, or [`default_router`]).
    pub router: RouterConfig,
    /// Worker threads (at least 1).
    pub workers: usize,
    /// Pin workers to cores.
    pub pin: bool,
    /// Pacing.
    pub pacing: Pacing,
    /// Times to send the input (at least 1); each pass is shifted in
    /// capture time to follow the previous one.
    pub loops: u32,
    /// Malformed frames: dropped (default) or passed to no port, counted
    /// either way.
    pub malformed: MalformedPolicy,
    /// The interface frames of a plain pcap (or the synthetic stream)
    /// arrive on; `None`: the first.
    pub ingress: Option<String>,
    /// Write each port's departures as `DIR/<interface>.pcap`.
    pub write: Option<PathBuf>,
    /// Seeds the hash keys the config leaves to chance.
    pub seed: u64,
    /// `--limit`, `--duration`: stop short of the input's end.
    pub limits: Limits,
    /// `--filter`: a BPF expression (libpcap's); only matching records
    /// are sent.
    pub filter: Option<String>,
    /// `--verbose`: a line per packet on standard output ([`packet_log`]).
    pub verbose: bool,
    /// `--plot`: sample each shaped port's queue at every tick (100 ms of
    /// capture time) for the report's [`Report::queue_samples`].
    pub sample_queues: bool,
}

impl ReplayConfig {
    /// One worker, pinned, at top speed, once, through `router`.
    pub fn new(router: RouterConfig) -> Self {
        ReplayConfig {
            router,
            workers: 1,
            pin: true,
            pacing: Pacing::TopSpeed,
            loops: 1,
            malformed: MalformedPolicy::Drop,
            ingress: None,
            write: None,
            seed: 1,
            limits: Limits::default(),
            filter: None,
            verbose: false,
            sample_queues: false,
        }
    }
}

impl Default for ReplayConfig {
    /// [`ReplayConfig::new`] with the built-in router.
    fn default() -> Self {
        ReplayConfig::new(default_router())
    }
}

/// One worker's share.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkerSummary {
    /// Worker index.
    pub worker: usize,
    /// Core it was pinned to, if pinned.
    pub core: Option<usize>,
    /// Packets it processed.
    pub packets: u64,
    /// Its latency percentiles.
    pub latency: LatencyReport,
}

/// `--verbose`: one line per packet on standard output, as tcpdump prints
/// them, once the router has decided it: capture seconds since the first
/// packet, the ingress interface, the flow (or what else the frame is),
/// the length on the wire and the verdict with its ports or drop reason:
///
/// ```text
/// 0.000412 r-a 10.0.0.1:1024 -> 172.16.0.1:80 tcp length 60: forward r-b
/// 0.000415 r-c 10.9.0.7:5000 -> 10.0.0.9:4000 udp length 90: drop loop
/// ```
pub fn packet_log(names: Vec<String>) -> PacketLog {
    let mut first: Option<u64> = None;
    Box::new(move |batch: &Batch, _now: Timestamp| {
        let mut out = std::io::stdout().lock();
        let ports = |set: PortSet| -> String {
            let v: Vec<&str> = set
                .iter()
                .map(|p| names.get(usize::from(p)).map_or("?", String::as_str))
                .collect();
            if v.is_empty() {
                "nowhere".into()
            } else {
                v.join(",")
            }
        };
        for p in batch.packets() {
            let t = p.ts.as_nanos();
            let rel = t.saturating_sub(*first.get_or_insert(t)) as f64 / 1e9;
            let what = match (&p.parsed, p.malformed) {
                (Some(pp), _) => pp.flow.map_or_else(
                    || format!("ethertype 0x{:04x}", u16::from(pp.ethertype)),
                    |f| f.to_string(),
                ),
                (None, Some(m)) => format!("malformed ({})", m.name()),
                (None, None) => "not parsed".into(),
            };
            let verdict = match p.verdict {
                Verdict::Forward(set) => format!("forward {}", ports(set)),
                Verdict::Mark(set) => format!("mark CE, forward {}", ports(set)),
                Verdict::Drop(r) => format!("drop {r}"),
                Verdict::Local => "local (to the router)".to_string(),
                Verdict::Held => "held (resolving the next hop)".to_string(),
            };
            let ingress = names
                .get(usize::from(p.ingress))
                .map_or("?", String::as_str);
            // A closed pipe (`| head`) ends the lines, not the replay.
            let _ = writeln!(
                out,
                "{rel:.6} {ingress} {what} length {}: {verdict}",
                p.orig_len
            );
        }
    })
}

/// What went to the IPFIX collector (`heavy.ipfix`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IpfixSummary {
    /// The collector, `host:port`.
    pub collector: String,
    /// Data records sent (one per heavy flow and epoch).
    pub records: u64,
    /// Messages the socket refused.
    pub send_errors: u64,
}

/// A capture time (ns since the Unix epoch) as an RFC 3339 UTC date with
/// microseconds, as tcpdump's `-tttt` shows times (never raw seconds).
pub fn capture_date(ns: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns);
    humantime::format_rfc3339_micros(t).to_string()
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Inputs (file names, or the synthetic workload).
    pub inputs: Vec<String>,
    /// Worker threads.
    pub workers: usize,
    /// Passes over the input.
    pub loops: u32,
    /// Pacing.
    pub pacing: String,
    /// Packets sent into the router.
    pub packets: u64,
    /// Their wire bytes.
    pub bytes: u64,
    /// Capture time from the first packet to the last departure, s.
    pub capture_span_s: f64,
    /// Wall time, s.
    pub elapsed_s: f64,
    /// Packets per second achieved (wall clock).
    pub pps: f64,
    /// Megabits per second achieved (wire length, wall clock).
    pub mbps: f64,
    /// Every counter, all workers: per port, per stage, latency.
    pub router: Stats,
    /// Heavy flows per epoch, merged.
    pub heavy: Vec<EpochReport>,
    /// Per worker.
    pub per_worker: Vec<WorkerSummary>,
    /// The capture written per port (`--write`).
    pub written: Vec<PathBuf>,
    /// Defects part-way through input files: each file was replayed up to
    /// its defect (empty when every file read to its end).
    pub input_errors: Vec<InputError>,
    /// The operator stopped the run (Ctrl-C, SIGTERM) before the input's
    /// end: the counters cover the packets sent until then.
    pub interrupted: bool,
    /// `--limit` or `--duration` ended the run before the input's end.
    pub limit_reached: Option<LimitReached>,
    /// The share of the requested rate reached (paced runs of 10 ms or
    /// more; a shortfall below 95% is warned about).
    pub rate_reached: Option<f64>,
    /// The `--filter` expression.
    pub filter: Option<String>,
    /// Records the filter did not match (not sent).
    pub filtered_out: u64,
    /// The heavy flows exported as IPFIX (`heavy.ipfix`).
    pub ipfix: Option<IpfixSummary>,
    /// Each shaped port's queue over capture time (with
    /// [`ReplayConfig::sample_queues`]; for `--plot`).
    #[serde(skip)]
    pub queue_samples: Vec<(String, Vec<QueueSample>)>,
    /// Records whose original length was absurd (above
    /// `dataplane::io::capture::MAX_ORIG_LEN`) and taken as the captured
    /// length.
    pub input_lengths_fixed: u64,
    /// Gaps in capture time longer than a minute, cut to a minute by the
    /// pacing (`--multiplier`; see `pacing::Schedule`).
    pub pacing_gaps_capped: u64,
    /// How the workers were kept in step (`None`: one worker, or no
    /// queue; see [`Lockstep`]).
    pub lockstep: Option<LockstepSummary>,
    /// The merged latency histograms (ns).
    #[serde(skip)]
    pub latency: Latencies,
}

/// How the dispatcher kept the workers of a replay in step ([`Lockstep`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LockstepSummary {
    /// The window, ms of capture time.
    pub window_ms: f64,
    /// Times the dispatcher held a frame back for a late worker.
    pub waits: u64,
    /// Wall time it spent holding frames back, s.
    pub waited_s: f64,
}

impl Report {
    /// The human-readable summary printed on the terminal.
    pub fn write_text(&self, w: &mut impl Write, top: usize) -> std::io::Result<()> {
        writeln!(
            w,
            "replayed {} packets ({} bytes, {:.3} s of capture time) from {} in {:.3} s with {} worker(s), {}: {:.0} pps, {:.1} Mbps",
            self.packets,
            self.bytes,
            self.capture_span_s,
            self.inputs.join(", "),
            self.elapsed_s,
            self.workers,
            self.pacing,
            self.pps,
            self.mbps
        )?;
        let notes = RunNotes {
            sent: self.packets,
            interrupted: self.interrupted,
            limit_reached: self.limit_reached,
            pacing: &self.pacing,
            rate_reached: self.rate_reached,
            lengths_fixed: self.input_lengths_fixed,
            gaps_capped: self.pacing_gaps_capped,
        };
        notes.write_ending(w)?;
        if let Some(l) = &self.lockstep {
            writeln!(
                w,
                "workers kept within {} ms of capture time of each other (a shaped queue sees the arrivals in order): the dispatcher held frames back {} times, {:.3} s",
                l.window_ms, l.waits, l.waited_s
            )?;
        }
        if let Some(f) = &self.filter {
            writeln!(
                w,
                "filter '{f}': {} packets matched and were sent, {} did not match",
                self.packets, self.filtered_out
            )?;
        }
        if let Some(x) = &self.ipfix {
            writeln!(
                w,
                "ipfix: {} heavy-flow records sent to {} ({} messages refused)",
                x.records, x.collector, x.send_errors
            )?;
        }
        for e in &self.input_errors {
            writeln!(w, "input error: {e}; replayed what precedes it")?;
        }
        notes.write_input_fixes(w)?;
        write!(w, "{}", self.router.render())?;
        self.write_heavy(w, top)?;
        for p in &self.written {
            writeln!(w, "wrote {}", p.display())?;
        }
        Ok(())
    }

    /// The heavy flows: one epoch's table, or for several epochs the
    /// flows over the run (each flow's bytes and packets summed over the
    /// epochs it was heavy in); every epoch is in the JSON.
    fn write_heavy(&self, w: &mut impl Write, top: usize) -> std::io::Result<()> {
        let reported: usize = self.heavy.iter().map(|e| e.flows.len()).sum();
        if self.heavy.len() <= 1 {
            for e in &self.heavy {
                writeln!(
                    w,
                    "heavy flows, epoch {} ({} .. {}, {} bytes, {} packets): {}",
                    e.epoch,
                    capture_date(e.start_ns),
                    capture_date(e.end_ns),
                    e.bytes,
                    e.packets,
                    e.flows.len()
                )?;
            }
        }
        let mut flows: BTreeMap<&str, (u64, u64, u64)> = BTreeMap::new();
        let total: u64 = self.heavy.iter().map(|e| e.bytes).sum();
        for e in &self.heavy {
            for f in &e.flows {
                let x = flows.entry(f.flow.as_str()).or_default();
                x.0 += 1;
                x.1 += f.bytes_upper;
                x.2 += f.packets_upper;
            }
        }
        if self.heavy.len() > 1 {
            writeln!(
                w,
                "heavy flows: {reported} reports in {} epochs, {} distinct flows; over the run:",
                self.heavy.len(),
                flows.len()
            )?;
        }
        if flows.is_empty() {
            return Ok(());
        }
        let mut rows: Vec<_> = flows.into_iter().collect();
        rows.sort_by(|a, b| b.1.1.cmp(&a.1.1).then(a.0.cmp(b.0)));
        // As wide as the widest flow shown (two full IPv6 addresses fit).
        let width = rows
            .iter()
            .take(top)
            .map(|(f, _)| f.len())
            .max()
            .unwrap_or(0)
            .max(58);
        writeln!(
            w,
            "  {:<width$} {:>6} {:>12} {:>9} {:>7}",
            "flow", "epochs", "bytes<=", "packets<=", "share%"
        )?;
        for (flow, (epochs, bytes, packets)) in rows.iter().take(top) {
            writeln!(
                w,
                "  {flow:<width$} {epochs:>6} {bytes:>12} {packets:>9} {:>7.3}",
                100.0 * *bytes as f64 / total.max(1) as f64
            )?;
        }
        if rows.len() > top {
            writeln!(w, "  ... {} more (see --json)", rows.len() - top)?;
        }
        Ok(())
    }

    /// Writes the three latency distributions as `.hgrm` files next to
    /// `path` ([`hgrm_paths`]); returns their paths.
    ///
    /// # Errors
    /// The file that could not be created or written.
    pub fn write_hgrms(&self, path: &Path) -> Result<Vec<PathBuf>> {
        let files = hgrm_paths(path).map(|p| {
            let f = std::fs::File::create(&p);
            (p, f)
        });
        let mut opened = Vec::new();
        for (p, f) in files {
            let f = f.with_context(|| format!("{}: cannot create", p.display()))?;
            opened.push((p, f));
        }
        self.write_hgrms_to(opened)
    }

    /// Writes the processing, sojourn and through distributions, in that
    /// order, into `files` (created beforehand, as [`hgrm_paths`] names
    /// them, so that a bad path fails before the run); returns the paths.
    ///
    /// # Errors
    /// The file that could not be written.
    pub fn write_hgrms_to(
        &self,
        files: impl IntoIterator<Item = (PathBuf, std::fs::File)>,
    ) -> Result<Vec<PathBuf>> {
        let through = self.latency.through();
        let hists = [&self.latency.processing, &self.latency.sojourn, &through];
        let mut out = Vec::new();
        for (h, (p, f)) in hists.into_iter().zip(files) {
            let mut w = std::io::BufWriter::new(f);
            write_hgrm(h, &mut w)
                .and_then(|()| w.flush())
                .with_context(|| format!("{}: write failed", p.display()))?;
            out.push(p);
        }
        Ok(out)
    }
}

/// The `.hgrm` files of an embedded replay's `--hgrm path`:
/// `STEM-processing.EXT`, `STEM-sojourn.EXT`, `STEM-through.EXT`.
pub fn hgrm_paths(path: &Path) -> [PathBuf; 3] {
    ["processing", "sojourn", "through"].map(|what| suffixed(path, what))
}

/// `dir/stem.ext` -> `dir/stem-WHAT.ext`.
pub fn suffixed(p: &Path, what: &str) -> PathBuf {
    let stem = p
        .file_stem()
        .map_or_else(|| "latency".into(), |s| s.to_string_lossy().into_owned());
    let name = match p.extension() {
        Some(e) => format!("{stem}-{what}.{}", e.to_string_lossy()),
        None => format!("{stem}-{what}"),
    };
    p.with_file_name(name)
}

/// Writes `h` (ns) as an `.hgrm` percentile distribution in microseconds
/// (HdrHistogram's format, 5 ticks per half distance).
pub fn write_hgrm(h: &Histogram<u64>, w: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        w,
        "{:>12} {:>14} {:>10} {:>14}\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    )?;
    let mut total = 0u64;
    for v in h.iter_quantiles(5) {
        total += v.count_since_last_iteration();
        let q = v.quantile_iterated_to();
        let value = h.highest_equivalent(v.value_iterated_to()) as f64 / 1000.0;
        if q < 1.0 {
            writeln!(
                w,
                "{value:>12.3} {q:>14.12} {total:>10} {:>14.2}",
                1.0 / (1.0 - q)
            )?;
        } else {
            writeln!(w, "{value:>12.3} {q:>14.12} {total:>10}")?;
        }
    }
    let mean = h.mean() / 1000.0;
    let sd = h.stdev() / 1000.0;
    writeln!(w, "#[Mean    = {mean:>12.3}, StdDeviation   = {sd:>12.3}]")?;
    writeln!(
        w,
        "#[Max     = {:>12.3}, Total count    = {:>12}]",
        h.max() as f64 / 1000.0,
        h.len()
    )?;
    writeln!(
        w,
        "#[Buckets = {:>12}, SubBuckets     = {:>12}]",
        h.buckets(),
        h.distinct_values()
    )
}

/// Up to [`BATCH_SIZE`] frames in one reusable buffer.
#[derive(Debug)]
struct Chunk {
    meta: Vec<(u64, u32, LinkType, u8, usize, usize)>,
    bytes: Vec<u8>,
}

impl Chunk {
    fn new() -> Self {
        Chunk {
            meta: Vec::with_capacity(BATCH_SIZE),
            bytes: Vec::with_capacity(BATCH_SIZE * 2048),
        }
    }
    fn push(&mut self, ts: u64, orig_len: u32, link: LinkType, ingress: u8, data: &[u8]) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(data);
        self.meta
            .push((ts, orig_len, link, ingress, start, self.bytes.len()));
    }
    fn clear(&mut self) {
        self.meta.clear();
        self.bytes.clear();
    }
}

/// Where a worker's departures are written (`--write`): one pcap per port.
#[derive(Debug)]
struct Writers {
    files: Vec<(PathBuf, CaptureWriter)>,
    error: Option<anyhow::Error>,
}

impl Writers {
    fn send(&mut self, f: &TxFrame<'_>) {
        if self.error.is_some() {
            return;
        }
        let Some((path, w)) = self.files.get_mut(usize::from(f.port)) else {
            return;
        };
        if let Err(e) = w.write(f.departs.as_nanos(), f.wire_len, f.frame) {
            self.error = Some(anyhow!("{}: {e}", path.display()));
        }
    }

    fn finish(self) -> Result<Vec<PathBuf>> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let mut out = Vec::new();
        for (p, w) in self.files {
            w.finish().map_err(|e| anyhow!("{}: {e}", p.display()))?;
            out.push(p);
        }
        Ok(out)
    }
}

/// How far apart in capture time the frames the workers of a replay work
/// on may be, where the router has a queue (see [`Lockstep`]). A smaller
/// window keeps the queue's arrivals closer to capture order but makes
/// the dispatcher wait for the workers more often; at this one a shaped
/// port's counts match a one-worker run's (the README has the figures).
pub const LOCKSTEP_WINDOW_NS: u64 = 20_000_000;

/// What keeps the workers of a replay within [`LOCKSTEP_WINDOW_NS`] of
/// capture time of each other: how many frames each has finished.
///
/// The workers share each shaped port's queue, as in the live router,
/// where they all run on the wall clock. On replay each runs on its own
/// frames' clock as fast as it can, and an arrival never goes back in
/// time: left to run apart (the dispatcher buffers 64 chunks per worker),
/// on busy cores one worker got hundreds of milliseconds of capture time
/// ahead of another, the late one's copies reached the queue in bursts
/// stamped with the early one's time, and the built-in router's shaped
/// port sent about 60% of what it sends with one worker. So the
/// dispatcher hands out a frame only when no worker still has a frame from
/// more than the window before it unfinished: a worker publishes how many
/// frames it has finished (all it received before each `recv`), and the
/// dispatcher, which knows what it gave to whom (`InStep`), waits for the
/// late ones, having first sent every frame it holds. Only the dispatcher
/// waits, and only for workers that have all they need, so the replay
/// always moves on; a worker that ends, or unwinds, counts as having
/// finished everything.
#[derive(Debug)]
pub struct Lockstep {
    /// Per worker: frames finished.
    done: Vec<AtomicU64>,
    /// The dispatcher is asleep waiting for a worker, and what wakes it.
    waiting: AtomicBool,
    lock: Mutex<()>,
    moved: Condvar,
}

impl Lockstep {
    fn new(workers: usize) -> Self {
        Lockstep {
            done: (0..workers).map(|_| AtomicU64::new(0)).collect(),
            waiting: AtomicBool::new(false),
            lock: Mutex::new(()),
            moved: Condvar::new(),
        }
    }

    /// Worker `w` has finished `frames` frames; wakes the dispatcher if it
    /// waits.
    fn finished(&self, w: usize, frames: u64) {
        if let Some(d) = self.done.get(w) {
            // Sequentially consistent with the dispatcher's flag: either it
            // sees this count, or this sees it waiting.
            d.store(frames, AtomicOrdering::SeqCst);
        }
        if self.waiting.load(AtomicOrdering::SeqCst) {
            let _g = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
            self.moved.notify_one();
        }
    }

    /// Frames worker `w` has finished.
    fn done(&self, w: usize) -> u64 {
        self.done
            .get(w)
            .map_or(u64::MAX, |d| d.load(AtomicOrdering::SeqCst))
    }
}

/// A worker's place in the [`Lockstep`]; dropped (the worker ended, or is
/// unwinding), it holds the dispatcher back no more.
#[derive(Debug)]
struct Seat {
    lockstep: Arc<Lockstep>,
    id: usize,
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.lockstep.finished(self.id, u64::MAX);
    }
}

/// A replay worker's ports: the chunks the dispatcher sends, on their own
/// clock (capture time); what leaves is counted and, with `--write`,
/// written.
#[derive(Debug)]
pub struct ChunkPorts {
    mem: MemoryPorts,
    rx: Receiver<Chunk>,
    free: Sender<Chunk>,
    writers: Option<Writers>,
    last_departure: Timestamp,
    /// Frames handed to the worker loop.
    received: u64,
    /// This worker's place in the lockstep (`None`: one worker, or no
    /// queue).
    seat: Option<Seat>,
}

impl ChunkPorts {
    fn take(&mut self, chunk: Chunk) {
        self.mem.compact();
        for &(ts, orig_len, link, ingress, s, e) in &chunk.meta {
            self.mem.push(
                Timestamp::from_nanos(ts),
                ingress,
                link,
                orig_len,
                &chunk.bytes[s..e],
            );
        }
        let mut chunk = chunk;
        chunk.clear();
        let _ = self.free.send(chunk);
    }
}

impl Transmit for ChunkPorts {
    fn send(&mut self, f: &TxFrame<'_>) -> bool {
        self.last_departure = self.last_departure.max(f.departs);
        if let Some(w) = &mut self.writers {
            w.send(f);
        }
        self.mem.send(f)
    }
}

impl Ports for ChunkPorts {
    fn recv(&mut self, batch: &mut Batch) -> usize {
        // The worker loop is done with every frame it was handed before.
        if let Some(seat) = &self.seat {
            seat.lockstep.finished(seat.id, self.received);
        }
        if self.mem.pending() == 0
            && let Ok(c) = self.rx.try_recv()
        {
            self.take(c);
        }
        let n = self.mem.recv(batch);
        self.received += n as u64;
        n
    }

    fn now(&mut self) -> Timestamp {
        self.mem.now()
    }

    fn wait(&mut self, _until: Option<Timestamp>) -> bool {
        if self.mem.pending() > 0 {
            return true;
        }
        match self.rx.recv() {
            Ok(c) => {
                self.take(c);
                true
            }
            Err(_) => false,
        }
    }

    fn real_time(&self) -> bool {
        false
    }

    fn rx_counters(&self) -> &[RxCounters] {
        self.mem.rx_counters()
    }
}

/// What a worker thread hands back.
struct WorkerResult {
    stats: Stats,
    latency: Latencies,
    heavy: Vec<EpochReport>,
    core: Option<usize>,
    packets: u64,
    last_departure: Timestamp,
    written: Result<Vec<PathBuf>>,
    /// Per port, the queue's samples (worker 0, with `sample_queues`).
    queue_samples: Vec<Vec<QueueSample>>,
}

fn worker(
    id: usize,
    chain: Chain,
    link: Option<MembershipLink>,
    ports: ChunkPorts,
    core: Option<core_affinity::CoreId>,
    sample_queues: bool,
) -> WorkerResult {
    let pinned = core
        .filter(|c| core_affinity::set_for_current(*c))
        .map(|c| c.id);
    let mut w = Worker::new(id, chain, ports, link);
    let mut queue_samples: Vec<Vec<QueueSample>> = Vec::new();
    // The queues are shared: worker 0 samples them for everyone.
    let view = (sample_queues && id == 0).then(|| w.chain().egress().queue_view());
    w.run(&AtomicBool::new(false), &mut |_, now, _| {
        let Some(view) = &view else { return };
        let qs = view.summaries(now);
        queue_samples.resize_with(qs.len(), Vec::new);
        for (samples, q) in queue_samples.iter_mut().zip(qs) {
            if let Some(q) = q {
                samples.push(QueueSample {
                    t_ns: now.as_nanos(),
                    backlog_packets: q.backlog_packets,
                    backlog_bytes: q.backlog_bytes,
                    maxprob: f64::from(q.sfb.maxprob) / 65536.0,
                    avgprob: f64::from(q.sfb.avgprob) / 65536.0,
                });
            }
        }
    });
    let stats = Stats::of(&w, pinned);
    let heavy = w
        .chain_mut()
        .heavy_mut()
        .map(|h| h.take_reports())
        .unwrap_or_default();
    let packets = stats.pipeline.received;
    let (_, ports, latency) = w.into_parts();
    let written = ports.writers.map_or(Ok(Vec::new()), Writers::finish);
    WorkerResult {
        stats,
        latency,
        heavy,
        core: pinned,
        packets,
        last_departure: ports.last_departure,
        written,
        queue_samples,
    }
}

/// Flow hash for dispatch: the same flow always goes to the same worker.
fn worker_of(link: LinkType, data: &[u8], workers: usize) -> usize {
    if workers == 1 {
        return 0;
    }
    let Some(flow) = parse(link, data).ok().and_then(|p| p.flow) else {
        return 0;
    };
    let mut h: u64 = 0x9e37_79b9_7f4a_7c15;
    for w in flow.words10() {
        h = (h ^ u64::from(w))
            .wrapping_mul(0x0100_0000_01b3)
            .rotate_left(29);
    }
    ((h >> 32) % workers as u64) as usize
}

struct Dispatcher<'a> {
    txs: Vec<Sender<Chunk>>,
    free: Receiver<Chunk>,
    pending: Vec<Chunk>,
    start: Instant,
    schedule: Schedule,
    sent: u64,
    bytes: u64,
    first_ts: Option<u64>,
    progress: Option<&'a ProgressBar>,
    stop: Stop<'a>,
    /// A stop was requested: nothing more is sent.
    stopped: bool,
    /// `--limit`, `--duration`.
    limits: Limits,
    /// A limit ended the sending: nothing more is sent.
    limit_reached: Option<LimitReached>,
    /// Records whose absurd original length the reader replaced.
    lengths_fixed: u64,
    /// `--filter`, compiled.
    filter: Option<BpfFilter>,
    /// Records the filter did not match.
    filtered_out: u64,
    /// The dispatcher's side of the workers' lockstep (`None`: one worker,
    /// or no queue).
    in_step: Option<InStep>,
}

/// The dispatcher's side of the [`Lockstep`]: per worker, the arrival
/// times of the frames given to it (sent, or still held here) that it has
/// not finished, in the order given; and what holding frames back cost.
#[derive(Debug)]
struct InStep {
    lockstep: Arc<Lockstep>,
    unfinished: Vec<VecDeque<u64>>,
    /// Per worker, frames it has finished (as last read).
    finished: Vec<u64>,
    /// No worker had an unfinished frame from before this, ns of capture
    /// time, when it was last worked out: frames up to the window past it
    /// go out without a look at the workers.
    floor: u64,
    /// Times a frame was held back for a late worker, and for how long.
    waits: u64,
    waited: std::time::Duration,
}

impl InStep {
    fn new(lockstep: Arc<Lockstep>) -> Self {
        let workers = lockstep.done.len();
        InStep {
            lockstep,
            unfinished: vec![VecDeque::new(); workers],
            finished: vec![0; workers],
            floor: 0,
            waits: 0,
            waited: std::time::Duration::ZERO,
        }
    }

    /// Worker `w` is given a frame that arrived at `ts`.
    fn given(&mut self, w: usize, ts: u64) {
        if let Some(times) = self.unfinished.get_mut(w) {
            times.push_back(ts);
        }
    }

    /// Whether a frame that arrived at `ts` may go out: no worker has an
    /// unfinished frame from more than [`LOCKSTEP_WINDOW_NS`] before it.
    fn allows(&mut self, ts: u64) -> bool {
        if ts <= self.floor.saturating_add(LOCKSTEP_WINDOW_NS) {
            return true;
        }
        // Every frame still to come arrives no earlier than this one
        // (arrival times that go back are taken as they come), so it
        // bounds the floor when every worker is done.
        let mut floor = ts;
        for (w, times) in self.unfinished.iter_mut().enumerate() {
            let done = self.lockstep.done(w);
            while self.finished[w] < done && times.pop_front().is_some() {
                self.finished[w] += 1;
            }
            if let Some(&t) = times.front() {
                floor = floor.min(t);
            }
        }
        self.floor = floor;
        ts <= floor.saturating_add(LOCKSTEP_WINDOW_NS)
    }

    /// Waits until a frame that arrived at `ts` may go out (every frame
    /// held by the dispatcher having been sent), or a stop is requested.
    fn wait(&mut self, ts: u64, stop: &Stop<'_>) {
        if self.allows(ts) {
            return;
        }
        self.waits += 1;
        let since = Instant::now();
        let l = Arc::clone(&self.lockstep);
        if !(0..64).any(|_| {
            std::hint::spin_loop();
            self.allows(ts)
        }) {
            // Asleep until a worker finishes frames (the timeout checks the
            // stop request and guards against a lost wake-up).
            l.waiting.store(true, AtomicOrdering::SeqCst);
            let mut g = l.lock.lock().unwrap_or_else(PoisonError::into_inner);
            while !self.allows(ts) && !stop.requested() {
                g = l
                    .moved
                    .wait_timeout(g, std::time::Duration::from_millis(5))
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
            drop(g);
            l.waiting.store(false, AtomicOrdering::SeqCst);
        }
        self.waited += since.elapsed();
    }

    /// What holding frames back cost, for the report.
    fn summary(&self) -> LockstepSummary {
        LockstepSummary {
            window_ms: LOCKSTEP_WINDOW_NS as f64 / 1e6,
            waits: self.waits,
            waited_s: self.waited.as_secs_f64(),
        }
    }
}

impl Dispatcher<'_> {
    /// With the lockstep, holds a frame that arrived at `ts` back until no
    /// worker has an unfinished frame from more than the window before it
    /// (see [`Lockstep`]): first sends every frame held here, then waits
    /// for the workers. A stop request ends the wait.
    fn keep_pace(&mut self, ts: u64) -> Result<()> {
        if self.in_step.as_mut().is_none_or(|s| s.allows(ts)) {
            return Ok(());
        }
        self.flush_all()?;
        if let Some(s) = &mut self.in_step {
            s.wait(ts, &self.stop);
        }
        Ok(())
    }

    /// Whether the filter (if any) keeps this record; counts the others.
    fn keep(&mut self, link: LinkType, data: &[u8], orig_len: u32) -> Result<bool> {
        let Some(f) = &mut self.filter else {
            return Ok(true);
        };
        let keep = f.matches(link, data, orig_len)?;
        if !keep {
            self.filtered_out += 1;
        }
        Ok(keep)
    }

    /// Nothing more is sent: stopped by the operator or by a limit.
    fn halted(&self) -> bool {
        self.stopped || self.limit_reached.is_some()
    }

    fn flush(&mut self, w: usize) -> Result<()> {
        if self.pending[w].meta.is_empty() {
            return Ok(());
        }
        let fresh = self.free.try_recv().unwrap_or_else(|_| Chunk::new());
        let full = std::mem::replace(&mut self.pending[w], fresh);
        self.txs[w]
            .send(full)
            .map_err(|_| anyhow!("worker {w} stopped early"))
    }

    fn flush_all(&mut self) -> Result<()> {
        for w in 0..self.pending.len() {
            self.flush(w)?;
        }
        Ok(())
    }

    fn pace(&mut self, ts: u64, wire_len: u32) -> Result<()> {
        let Some(offset) = self.schedule.next_offset(ts, wire_len) else {
            return Ok(());
        };
        let target = self.start + std::time::Duration::from_nanos(offset);
        if target > Instant::now() {
            self.flush_all()?;
            // A paced run's progress moves where it waits: it shows at low
            // rates without an update per packet at high ones.
            if let Some(p) = self.progress {
                p.set_position(self.sent);
            }
            // A wait never outlasts --duration.
            let deadline = self.limits.deadline(self.start);
            let until = deadline.map_or(target, |d| d.min(target));
            if wait_until_or_stop(until, self.stop).is_none() {
                self.stopped = true;
            } else if until < target {
                self.limit_reached = Some(LimitReached::Duration);
            }
        }
        Ok(())
    }

    fn send(
        &mut self,
        ts: u64,
        orig_len: u32,
        link: LinkType,
        ingress: u8,
        data: &[u8],
    ) -> Result<()> {
        if self.stop.requested() {
            self.stopped = true;
        }
        if !self.halted() {
            self.limit_reached = self.limits.reached(self.sent, self.start);
        }
        if !self.halted() {
            self.pace(ts, orig_len)?;
        }
        if self.halted() {
            return Ok(());
        }
        self.first_ts.get_or_insert(ts);
        self.keep_pace(ts)?;
        let w = worker_of(link, data, self.txs.len());
        if let Some(s) = &mut self.in_step {
            s.given(w, ts);
        }
        self.pending[w].push(ts, orig_len, link, ingress, data);
        if self.pending[w].meta.len() >= BATCH_SIZE {
            self.flush(w)?;
        }
        self.sent += 1;
        self.bytes += u64::from(orig_len.max(data.len() as u32));
        if let Some(p) = self.progress
            && self.sent.is_multiple_of(4096)
        {
            p.set_position(self.sent);
        }
        Ok(())
    }
}

/// Which port a frame arrives on (see the module docs): a pcapng
/// interface named like a configured interface is that port; otherwise a
/// pcapng interface id below the port count is that port unless
/// `--ingress` is given; otherwise (and for every frame of a plain pcap)
/// the `--ingress` port, by default the first.
struct IngressMap<'a> {
    router: &'a RouterConfig,
    default: u8,
    explicit: bool,
}

impl IngressMap<'_> {
    fn port(&self, r: &CaptureReader, interface: u32) -> u8 {
        if r.format().file == FileFormat::Pcap {
            return self.default;
        }
        if let Some(p) = r
            .interface_name(interface)
            .and_then(|n| self.router.port_of(n))
        {
            return p;
        }
        match u8::try_from(interface) {
            Ok(i) if !self.explicit && usize::from(i) < self.router.interfaces.len() => i,
            _ => self.default,
        }
    }

    fn by_name(&self, name: &str) -> u8 {
        self.router.port_of(name).unwrap_or(self.default)
    }
}

/// The port a plain capture's frames arrive on.
fn default_ingress(cfg: &ReplayConfig) -> Result<u8> {
    match &cfg.ingress {
        None => Ok(0),
        Some(name) => cfg.router.port_of(name).ok_or_else(|| {
            anyhow!(
                "--ingress {name}: no such interface in the router (have {})",
                cfg.router
                    .interfaces
                    .iter()
                    .map(|i| i.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }),
    }
}

/// Replays `input` through `cfg.workers` embedded routers and returns the
/// merged report. Errors name the file and the reason; a defect part-way
/// through a file is no error but one of the report's `input_errors`.
pub fn replay(input: &Input, cfg: &ReplayConfig, progress: Option<&ProgressBar>) -> Result<Report> {
    replay_with_stop(input, cfg, progress, Stop::never())
}

/// [`replay`], ending the input early when `stop` is requested: the
/// report covers the packets sent until then and says `interrupted`.
pub fn replay_with_stop(
    input: &Input,
    cfg: &ReplayConfig,
    progress: Option<&ProgressBar>,
    stop: Stop<'_>,
) -> Result<Report> {
    if cfg.workers == 0 {
        bail!("--workers must be at least 1");
    }
    if cfg.loops == 0 {
        bail!("--loop must be at least 1");
    }
    if cfg.verbose && cfg.workers > 1 {
        bail!("--verbose prints the packets in order: it takes one worker (--workers 1)");
    }
    cfg.pacing.validate()?;
    let ingress = default_ingress(cfg)?;
    // Compiled first: an expression libpcap refuses fails before any work.
    let filter = cfg.filter.as_deref().map(BpfFilter::new).transpose()?;
    // Open every file first, so a bad name or header fails before any work.
    if let Input::Files(files) = input {
        check_headers(files)?;
    }
    let mut router = cfg.router.clone();
    router.fill_seeds(cfg.seed);
    let ports = router.interfaces.len();
    let names: Vec<String> = router.interfaces.iter().map(|i| i.name.clone()).collect();
    if let Some(dir) = &cfg.write {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--write {}: cannot create the directory", dir.display()))?;
    }
    let cores = if cfg.pin {
        core_affinity::get_core_ids().unwrap_or_default()
    } else {
        Vec::new()
    };
    let chains = build_workers(&router, cfg.workers).map_err(|e| anyhow!("{e}"))?;
    // The shaped ports' queues, shared by the workers: read once all stop.
    let queues = chains.first().map(|(c, _)| c.egress().queue_view());
    let (free_tx, free_rx) = unbounded::<Chunk>();
    // Only a queue sees the order in which the workers offer their copies.
    let lockstep = (cfg.workers > 1 && !router.egress_queues().is_empty())
        .then(|| Arc::new(Lockstep::new(cfg.workers)));
    let mut txs = Vec::new();
    let mut handles = Vec::new();
    let sample_queues = cfg.sample_queues;
    for (i, (mut chain, link)) in chains.into_iter().enumerate() {
        if cfg.verbose {
            chain.set_packet_log(packet_log(names.clone()));
        }
        chain.set_parse_config(PipelineConfig {
            malformed: cfg.malformed,
            default_egress: PortSet::EMPTY,
            ..PipelineConfig::default()
        });
        let writers = match &cfg.write {
            None => None,
            Some(dir) => Some(Writers {
                files: names
                    .iter()
                    .map(|n| {
                        let p = if cfg.workers == 1 {
                            dir.join(format!("{n}.pcap"))
                        } else {
                            dir.join(format!(".{n}.worker{i}.pcap"))
                        };
                        CaptureWriter::create(&p, LinkType::Ethernet, 65535)
                            .map(|w| (p.clone(), w))
                            .map_err(|e| anyhow!("--write {}: {e}", dir.display()))
                    })
                    .collect::<Result<_>>()?,
                error: None,
            }),
        };
        let (tx, rx) = bounded::<Chunk>(64);
        txs.push(tx);
        let ports = ChunkPorts {
            mem: MemoryPorts::new(ports),
            rx,
            free: free_tx.clone(),
            writers,
            last_departure: Timestamp::ZERO,
            received: 0,
            seat: lockstep.clone().map(|lockstep| Seat { lockstep, id: i }),
        };
        let core = (!cores.is_empty()).then(|| cores[i % cores.len()]);
        let h = thread::Builder::new()
            .name(format!("worker-{i}"))
            .spawn(move || worker(i, chain, link, ports, core, sample_queues))
            .context("cannot start a worker thread")?;
        handles.push(h);
    }
    drop(free_tx);
    let mut d = Dispatcher {
        pending: (0..cfg.workers).map(|_| Chunk::new()).collect(),
        txs,
        free: free_rx,
        start: Instant::now(),
        schedule: Schedule::new(cfg.pacing),
        sent: 0,
        bytes: 0,
        first_ts: None,
        progress,
        stop,
        stopped: false,
        limits: cfg.limits,
        limit_reached: None,
        lengths_fixed: 0,
        filter,
        filtered_out: 0,
        in_step: lockstep.map(InStep::new),
    };
    let started = Instant::now();
    let map = IngressMap {
        router: &router,
        default: ingress,
        explicit: cfg.ingress.is_some(),
    };
    let result = feed(input, cfg, &map, &mut d);
    let flushed = d.flush_all();
    let (sent, bytes, first_ts, interrupted) = (d.sent, d.bytes, d.first_ts, d.stopped);
    let limit_reached = d.limit_reached;
    let filtered_out = d.filtered_out;
    let rate_reached = d.schedule.rate_reached(d.start.elapsed());
    let (lengths_fixed, gaps_capped) = (d.lengths_fixed, d.schedule.capped_gaps());
    let lockstep = d.in_step.as_ref().map(InStep::summary);
    drop(d); // closes the channels: workers finish
    let mut results = Vec::new();
    for h in handles {
        results.push(h.join().map_err(|_| anyhow!("a worker thread panicked"))?);
    }
    let input_errors = result?.into_vec();
    flushed?;
    let elapsed = started.elapsed().as_secs_f64();

    let mut latency = Latencies::default();
    let mut shards = Vec::new();
    let mut per_worker = Vec::new();
    let mut all = Vec::new();
    let mut last_departure = Timestamp::ZERO;
    let mut written = Vec::new();
    let mut queue_samples = Vec::new();
    for (i, r) in results.into_iter().enumerate() {
        for (port, s) in r.queue_samples.into_iter().enumerate() {
            if !s.is_empty() {
                queue_samples.push((names.get(port).cloned().unwrap_or_default(), s));
            }
        }
        latency.merge(&r.latency);
        per_worker.push(WorkerSummary {
            worker: i,
            core: r.core,
            packets: r.packets,
            latency: LatencyReport::of(&r.latency),
        });
        shards.push(r.heavy);
        all.push(r.stats);
        last_departure = last_departure.max(r.last_departure);
        written.push(r.written?);
    }
    let mut stats = Stats::merged(&all);
    stats.set_latency(&latency);
    if let Some(q) = &queues {
        stats.set_queues(q.summaries(last_departure));
    }
    let threshold = router
        .heavy_config()
        .map_or(Threshold::ByteShare(0.001), |h| h.threshold);
    let heavy = merge_epochs(&shards, threshold);
    if let Some(h) = &mut stats.heavy {
        h.reported = heavy.iter().map(|e| e.flows.len() as u64).sum();
    }
    // `heavy.ipfix`: the epochs as the live router exports them, with
    // capture times (Unix nanoseconds in the capture) as flow times.
    let ipfix = match router.heavy.as_ref().and_then(|h| h.ipfix.as_deref()) {
        Some(addr) => {
            let mut x = Exporter::new(addr)
                .with_context(|| format!("heavy.ipfix: cannot export to {addr}"))?;
            for e in &heavy {
                x.export(e, |ns| ns / 1_000_000);
            }
            Some(IpfixSummary {
                collector: addr.to_string(),
                records: x.records,
                send_errors: x.send_errors,
            })
        }
        None => None,
    };
    let written = match &cfg.write {
        Some(dir) if cfg.workers > 1 => merge_written(dir, &names, written)?,
        _ => written.into_iter().flatten().collect(),
    };
    let inputs = match input {
        Input::Files(f) => f.iter().map(|p| p.display().to_string()).collect(),
        Input::Synth(s) => vec![format!(
            "the built-in router's synthetic workload (packets {}, flows {}, zipf s {}, seed {})",
            s.packets, s.flows, s.zipf_s, s.seed
        )],
    };
    let span = first_ts.map_or(0, |f| last_departure.as_nanos().saturating_sub(f));
    Ok(Report {
        inputs,
        workers: cfg.workers,
        loops: cfg.loops,
        pacing: cfg.pacing.describe(),
        packets: sent,
        bytes,
        capture_span_s: span as f64 / 1e9,
        elapsed_s: elapsed,
        pps: sent as f64 / elapsed.max(1e-9),
        mbps: bytes as f64 * 8.0 / 1e6 / elapsed.max(1e-9),
        router: stats,
        heavy,
        per_worker,
        written,
        input_errors,
        interrupted,
        limit_reached,
        rate_reached,
        filter: cfg.filter.clone(),
        filtered_out,
        ipfix,
        queue_samples,
        input_lengths_fixed: lengths_fixed,
        pacing_gaps_capped: gaps_capped,
        lockstep,
        latency,
    })
}

/// The next record of each worker's capture, by (time, worker).
type Heads = BTreeMap<(u64, usize), (u32, Vec<u8>)>;

/// Moves reader `i`'s next record into `heads`.
fn pull(r: &mut CaptureReader, i: usize, heads: &mut Heads) -> Result<()> {
    if let Some(rec) = r.next_record().map_err(|e| anyhow!("{e}"))? {
        heads.insert((rec.ts_ns, i), (rec.orig_len, rec.data.to_vec()));
    }
    Ok(())
}

/// Merges the workers' per-port captures (`written[worker][port]`) into
/// `dir/<interface>.pcap` in departure-time order (ties: the lower
/// worker first), removing the workers' files.
fn merge_written(dir: &Path, names: &[String], written: Vec<Vec<PathBuf>>) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for (port, name) in names.iter().enumerate() {
        let path = dir.join(format!("{name}.pcap"));
        let mut w =
            CaptureWriter::create(&path, LinkType::Ethernet, 65535).map_err(|e| anyhow!("{e}"))?;
        let mut readers = Vec::new();
        for files in &written {
            if let Some(p) = files.get(port) {
                readers.push(CaptureReader::open(p).map_err(|e| anyhow!("{e}"))?);
            }
        }
        // The heads of every worker's file, merged by (time, worker).
        let mut heads: Heads = BTreeMap::new();
        for (i, r) in readers.iter_mut().enumerate() {
            pull(r, i, &mut heads)?;
        }
        while let Some(((ts, i), (orig_len, data))) = heads.pop_first() {
            w.write(ts, orig_len, &data)
                .map_err(|e| anyhow!("{}: {e}", path.display()))?;
            pull(&mut readers[i], i, &mut heads)?;
        }
        w.finish().map_err(|e| anyhow!("{}: {e}", path.display()))?;
        for files in &written {
            if let Some(p) = files.get(port) {
                let _ = std::fs::remove_file(p);
            }
        }
        out.push(path);
    }
    Ok(out)
}

/// Sends every pass of the input until its end or a stop; capture time of
/// pass `k > 0` is shifted to start 1 us after the previous pass ended
/// ([`PassClock`]), so `now` keeps increasing. A file's defect part-way
/// ends that file, not the run: it is returned among the input errors.
fn feed(
    input: &Input,
    cfg: &ReplayConfig,
    map: &IngressMap<'_>,
    d: &mut Dispatcher<'_>,
) -> Result<InputErrors> {
    let mut clock = PassClock::new();
    let mut errors = InputErrors::default();
    // A record borrows the reader; its interface's name is looked up after
    // the record's bytes are copied out.
    let mut buf = Vec::with_capacity(65_536);
    for _ in 0..cfg.loops {
        clock.start_pass();
        match input {
            Input::Files(files) => {
                for (i, f) in files.iter().enumerate() {
                    if d.halted() {
                        break;
                    }
                    // Every header was read before the run; a file gone
                    // since is a defect at its start.
                    let mut r = match CaptureReader::open(f) {
                        Ok(r) => r,
                        Err(e) => {
                            errors.note(i, &e, 0);
                            continue;
                        }
                    };
                    let mut read = 0u64;
                    while !d.halted() {
                        let (ts, orig_len, link, interface) = match r.next_record() {
                            Ok(Some(rec)) => {
                                buf.clear();
                                buf.extend_from_slice(rec.data);
                                (rec.ts_ns, rec.orig_len, rec.link_type, rec.interface)
                            }
                            Ok(None) => break,
                            Err(e) => {
                                errors.note(i, &e, read);
                                break;
                            }
                        };
                        read += 1;
                        if !d.keep(link, &buf, orig_len)? {
                            continue;
                        }
                        let port = map.port(&r, interface);
                        d.send(clock.map(ts), orig_len, link, port, &buf)?;
                    }
                    d.lengths_fixed += r.lengths_fixed();
                }
            }
            Input::Synth(s) => {
                let mut s = RouterSynth::new(*s)?;
                let ports: Vec<u8> = s.interface_names().iter().map(|n| map.by_name(n)).collect();
                while !d.halted()
                    && let Some(p) = s.next()?
                {
                    let port = ports
                        .get(usize::from(p.port))
                        .copied()
                        .unwrap_or(map.default);
                    let len = p.frame.len() as u32;
                    if !d.keep(LinkType::Ethernet, p.frame, len)? {
                        continue;
                    }
                    d.send(clock.map(p.ts_ns), len, LinkType::Ethernet, port, p.frame)?;
                }
            }
        }
        if d.halted() {
            break;
        }
    }
    Ok(errors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// The dispatcher hands out a frame only when no worker has an
    /// unfinished frame from more than the window before it, whatever the
    /// workers did before: worker 1 idle for a long stretch does not let
    /// worker 0's frames run ahead of the first frame given to worker 1
    /// afterwards.
    #[test]
    fn pace_holds_frames_a_window_past_a_late_worker() {
        const W: u64 = LOCKSTEP_WINDOW_NS;
        let lockstep = Arc::new(Lockstep::new(2));
        let mut in_step = InStep::new(Arc::clone(&lockstep));
        // Worker 0 alone for a long while, finishing each frame at once.
        for k in 0..100u64 {
            let ts = k * W;
            assert!(in_step.allows(ts), "frame {k}");
            in_step.given(0, ts);
            lockstep.finished(0, k + 1);
        }
        // Worker 1 gets a frame and does not finish it: worker 0's frames
        // go out up to the window past it, and no further.
        let t1 = 100 * W;
        assert!(in_step.allows(t1));
        in_step.given(1, t1);
        for ts in [t1, t1 + W / 2, t1 + W] {
            assert!(in_step.allows(ts), "{ts}");
            in_step.given(0, ts);
        }
        lockstep.finished(0, 103);
        assert!(!in_step.allows(t1 + W + 1));
        assert!(!in_step.allows(t1 + 10 * W));
        // Once worker 1 has finished it, they go out again.
        lockstep.finished(1, 1);
        assert!(in_step.allows(t1 + W + 1));
        // A frame that arrived earlier than those before (a capture whose
        // times go back) is never held.
        assert!(in_step.allows(0));
    }

    fn synth() -> Input {
        Input::Synth(RouterSynthConfig {
            packets: 100_000,
            seed: 9,
            ..RouterSynthConfig::default()
        })
    }

    #[test]
    fn default_router_is_valid() {
        let r = default_router();
        assert_eq!(r.interfaces.len(), 3);
        assert!(r.heavy.is_some() && r.icarus.is_some() && r.multicast_config().is_some());
        assert_eq!(r.egress_queues().len(), 1);
    }

    #[test]
    fn merged_report_equals_single_worker_report() {
        let one = replay(
            &synth(),
            &ReplayConfig {
                pin: false,
                ..ReplayConfig::default()
            },
            None,
        )
        .unwrap();
        let three = replay(
            &synth(),
            &ReplayConfig {
                workers: 3,
                pin: false,
                ..ReplayConfig::default()
            },
            None,
        )
        .unwrap();
        let (a, b) = (&one.router, &three.router);
        assert!(a.is_consistent() && b.is_consistent());
        assert_eq!(a.pipeline.received, 100_000);
        assert_eq!(b.pipeline.received, 100_000);
        assert_eq!(a.icarus, b.icarus, "Icarus is per packet");
        assert_eq!(a.heavy.map(|h| h.bytes), b.heavy.map(|h| h.bytes));
        assert_eq!(one.latency.processing.len(), 100_000);
        assert_eq!(three.latency.processing.len(), 100_000);
        assert_eq!(one.heavy.len(), three.heavy.len());
        let flows = |r: &Report| -> HashSet<String> {
            r.heavy
                .iter()
                .flat_map(|e| e.flows.iter().map(|f| format!("{} {}", e.epoch, f.flow)))
                .collect()
        };
        assert!(!flows(&one).is_empty());
        assert_eq!(flows(&one), flows(&three));
        assert!(three.per_worker.iter().all(|w| w.packets > 0));
    }

    #[test]
    fn loops_and_pps_pacing() {
        let input = Input::Synth(RouterSynthConfig {
            packets: 500,
            ..RouterSynthConfig::default()
        });
        let cfg = ReplayConfig {
            loops: 2,
            pacing: Pacing::Pps(50_000.0),
            pin: false,
            ..ReplayConfig::default()
        };
        let r = replay(&input, &cfg, None).unwrap();
        assert_eq!(r.packets, 1000);
        assert_eq!(r.router.pipeline.received, 1000);
        // 1000 packets at 50 kpps take at least ~20 ms.
        assert!(r.elapsed_s >= 0.015, "{}", r.elapsed_s);
        // Every packet but those dropped on a loop (before the heavy stage)
        // counts in an epoch.
        let packets: u64 = r.heavy.iter().map(|e| e.packets).sum();
        let loops = r.router.icarus.map_or(0, |i| i.loops_detected);
        assert_eq!(packets + loops, 1000);
        let mut hgrm = Vec::new();
        write_hgrm(&r.latency.processing, &mut hgrm).unwrap();
        let text = String::from_utf8(hgrm).unwrap();
        assert!(text.contains("Total count    =         1000"), "{text}");
    }

    /// A scratch directory for one test.
    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tg-replay-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A pcap of `packets` 100-byte frames: 24 header bytes, then 116 per
    /// record.
    fn fixed_pcap(path: &Path, packets: u64) {
        crate::synth::write_pcap(
            crate::synth::SynthConfig {
                flows: 20,
                packets,
                size: Some(100),
                ..crate::synth::SynthConfig::default()
            },
            path,
        )
        .unwrap();
    }

    /// A record claiming 4 GB for 100 bytes, and a 2^31 s jump in capture
    /// time at --multiplier: the length is the captured one, the gap is
    /// cut to a minute (60 ms at x1000), both counted.
    #[test]
    fn hostile_lengths_and_gaps_are_bounded_and_reported() {
        let d = scratch("hostile");
        let (src, bad) = (d.join("src.pcap"), d.join("bad.pcap"));
        fixed_pcap(&src, 4);
        let mut r = CaptureReader::open(&src).unwrap();
        let mut w = CaptureWriter::create(&bad, LinkType::Ethernet, 65535).unwrap();
        let mut k = 0u64;
        while let Some(rec) = r.next_record().unwrap() {
            let ts = if k >= 2 {
                rec.ts_ns + (1u64 << 31) * 1_000_000_000
            } else {
                rec.ts_ns
            };
            let orig = if k == 1 { u32::MAX } else { rec.orig_len };
            w.write(ts, orig, rec.data).unwrap();
            k += 1;
        }
        w.finish().unwrap();
        let cfg = ReplayConfig {
            pin: false,
            pacing: Pacing::Multiplier(1000.0),
            ..ReplayConfig::default()
        };
        let r = replay(&Input::Files(vec![bad]), &cfg, None).unwrap();
        assert_eq!(r.packets, 4);
        assert_eq!(r.bytes, 4 * 100);
        assert_eq!((r.input_lengths_fixed, r.pacing_gaps_capped), (1, 1));
        assert!(r.router.is_consistent());
        let mut text = Vec::new();
        r.write_text(&mut text, 0).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("input warning: 1 records"), "{text}");
        assert!(text.contains("pacing: 1 gaps"), "{text}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_defect_part_way_is_replayed_up_to_it_and_reported() {
        let d = scratch("defect");
        let (whole, cut, bogus) = (
            d.join("whole.pcap"),
            d.join("cut.pcap"),
            d.join("bogus.pcap"),
        );
        fixed_pcap(&whole, 40);
        let bytes = std::fs::read(&whole).unwrap();
        // Cut in the middle of record 10's data.
        std::fs::write(&cut, &bytes[..24 + 10 * 116 + 16 + 50]).unwrap();
        // Record 7's captured length says 0xffff_fff0.
        let mut b = bytes.clone();
        b[24 + 7 * 116 + 8..24 + 7 * 116 + 12].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
        std::fs::write(&bogus, &b).unwrap();
        let cfg = ReplayConfig {
            pin: false,
            loops: 2,
            ..ReplayConfig::default()
        };
        let files = vec![cut.clone(), whole.clone(), bogus.clone()];
        let r = replay(&Input::Files(files), &cfg, None).unwrap();
        // Both passes send what precedes each defect, and every file after.
        assert_eq!(r.packets, 2 * (10 + 40 + 7));
        assert_eq!(r.router.pipeline.received, r.packets);
        assert!(r.router.is_consistent());
        assert!(!r.interrupted);
        // One entry per file, not per pass.
        let e = &r.input_errors;
        assert_eq!(e.len(), 2, "{e:?}");
        assert_eq!(e[0].file, cut.display().to_string());
        assert_eq!(e[0].offset, 24 + 10 * 116 + 16);
        assert_eq!(e[0].packets_read, 10);
        assert!(e[0].reason.contains("cut short"), "{}", e[0].reason);
        assert_eq!(e[1].file, bogus.display().to_string());
        assert_eq!(e[1].offset, 24 + 7 * 116 + 8);
        assert_eq!(e[1].packets_read, 7);
        let mut text = Vec::new();
        r.write_text(&mut text, 10).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("input error: "), "{text}");
        // A file that reads to its end has no input error.
        let r = replay(&Input::Files(vec![whole]), &cfg, None).unwrap();
        assert!(r.input_errors.is_empty());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_bad_header_among_several_files_fails_before_any_work() {
        let d = scratch("header");
        let (good, bad) = (d.join("good.pcap"), d.join("bad.pcap"));
        fixed_pcap(&good, 5);
        std::fs::write(&bad, b"\xd4\xc3\xb2\xa1 but not a pcap header").unwrap();
        let out = d.join("out");
        let cfg = ReplayConfig {
            pin: false,
            write: Some(out.clone()),
            ..ReplayConfig::default()
        };
        let err = replay(&Input::Files(vec![good, bad]), &cfg, None).unwrap_err();
        assert!(format!("{err:#}").contains("bad.pcap"), "{err:#}");
        assert!(!out.exists(), "nothing is done before the headers are read");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_stop_ends_the_input_and_the_report_covers_what_was_sent() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let flag = AtomicBool::new(false);
        let cfg = ReplayConfig {
            pin: false,
            // 200,000 packets at 20,000 pps would take 10 s.
            pacing: Pacing::Pps(20_000.0),
            ..ReplayConfig::default()
        };
        let input = Input::Synth(RouterSynthConfig::default());
        let progress = ProgressBar::hidden();
        let r = thread::scope(|s| {
            let h = s.spawn(|| replay_with_stop(&input, &cfg, Some(&progress), Stop::on(&flag)));
            // Stop once some packets went in (a paced bar moves with each).
            while progress.position() == 0 && !h.is_finished() {
                thread::sleep(std::time::Duration::from_millis(5));
            }
            flag.store(true, Ordering::Relaxed);
            h.join().unwrap().unwrap()
        });
        assert!(r.interrupted);
        assert!(r.packets >= 1 && r.packets < 200_000, "{}", r.packets);
        let p = &r.router.pipeline;
        assert_eq!(p.received, r.packets);
        assert_eq!(p.received, p.forwarded + p.dropped);
        assert!(r.router.is_consistent());
        for i in &r.router.interfaces {
            assert_eq!(i.port.backlog_packets, 0, "{} drained", i.port.name);
        }
        let mut text = Vec::new();
        r.write_text(&mut text, 10).unwrap();
        assert!(
            String::from_utf8(text)
                .unwrap()
                .contains("interrupted: stopped after")
        );
    }

    #[test]
    fn missing_file_is_named() {
        let err = replay(
            &Input::Files(vec![PathBuf::from("/nonexistent/x.pcap")]),
            &ReplayConfig::default(),
            None,
        )
        .unwrap_err();
        assert!(
            format!("{err:#}").contains("/nonexistent/x.pcap"),
            "{err:#}"
        );
    }

    #[test]
    fn unknown_ingress_is_named() {
        let err = replay(
            &synth(),
            &ReplayConfig {
                ingress: Some("eth9".into()),
                ..ReplayConfig::default()
            },
            None,
        )
        .unwrap_err();
        assert!(
            format!("{err:#}").contains("--ingress eth9: no such interface"),
            "{err:#}"
        );
    }
}
