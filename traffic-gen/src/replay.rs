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
//! The same capture, config, seed and worker count give the same verdicts,
//! counters, heavy flows and byte-identical `--write` captures: every
//! stage runs on capture time, and the hash keys a config leaves to chance
//! are seeded from `--seed` ([`RouterConfig::fill_seeds`]). With `n`
//! workers, each flow's fate is decided by one worker on its own packets
//! in capture order, and the workers act on what they share (a shaped
//! port's one queue, as in the live router; the multicast memberships and
//! neighbours they tell each other) by turns in an order the input alone
//! fixes ([`Turns`]), so thread timing changes nothing but the wall-clock
//! figures. The written captures are merged per port in departure-time
//! order (ties: the lower worker first).
//!
//! Between worker counts, what differs is what the split changes: a shaped
//! queue takes one worker's frames a chunk at a time (a chunk is at most
//! [`BATCH_SIZE`] frames and [`TURN_WINDOW_NS`] of capture time), so the
//! arrivals of two workers reach it interleaved to within that window
//! rather than frame by frame, which moves a few of SFB's decisions; a
//! membership or neighbour one worker learns reaches the others at their
//! next turn rather than within the batch; and each worker closes the
//! heavy-flow epochs of its own traffic (the merged report is the same).
//! With one worker, batches and chunks are as before: a single-worker run
//! takes no turns.
//!
//! # Latency
//!
//! Three distributions (see [`dataplane::runtime::worker`]): processing
//! (wall clock, per packet), egress sojourn and through-router (capture
//! time, per copy).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread;
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use crossbeam_channel::{Receiver, Sender, bounded, unbounded};
use dataplane::chain::Chain;
use dataplane::clock::Timestamp;
use dataplane::config::{MacAddr, RouterConfig};
use dataplane::io::capture::{CaptureReader, CaptureWriter, FileFormat};
use dataplane::io::memory::MemoryPorts;
use dataplane::io::port::{Ports, RxCounters};
use dataplane::packet::{Transmit, TxFrame};
use dataplane::pipeline::{BATCH_SIZE, Batch, MalformedPolicy, PipelineConfig, PortSet};
use dataplane::runtime::share::MembershipLink;
use dataplane::runtime::{Latencies, LatencyReport, Stats, Worker, build_workers};
use dataplane::stage::digest::{DigestStage, Digests, SharedRing, TimeBase, store};
use dataplane::stage::heavy::{EpochReport, Threshold, merge_epochs};
use dataplane::wire::{LinkType, parse};
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use serde::Serialize;

use crate::filter::BpfFilter;
pub use crate::pacing::{
    LongGaps, Pacing, PassClock, Playback, Schedule, wait_until, wait_until_or_stop,
};
use crate::plot::QueueSample;
pub use crate::verbose::{TimeFormat, packet_log};
use dataplane::ipfix::Exporter;
pub use dataplane::runtime::Latency;
pub use dataplane::runtime::worker::new_histogram;

use crate::input::{InputError, InputErrors, LimitReached, Limits, RunNotes, Stop, check_headers};
use crate::synth::router::{RouterSynth, RouterSynthConfig};

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
    /// The built-in router's synthetic workload ([`crate::synth::router`]),
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
    /// Pacing, passes, limits and filter (shared with live replay).
    pub play: Playback,
    /// Malformed frames: dropped (default) or passed to no port, counted
    /// either way.
    pub malformed: MalformedPolicy,
    /// The interface frames of a plain pcap (or the synthetic stream)
    /// arrive on; `None`: the first.
    pub ingress: Option<String>,
    /// Write each port's departures as `DIR/<interface>.pcap`.
    pub write: Option<PathBuf>,
    /// Keep the digest stage's windows in DIR when the replay ends
    /// (`dataplane::stage::digest::store`), for `traceback --digests`.
    pub digests: Option<PathBuf>,
    /// Seeds the hash keys the config leaves to chance.
    pub seed: u64,
    /// `--verbose`: a line per packet on standard output
    /// ([`crate::verbose`]); the replay stops when standard output closes.
    pub verbose: bool,
    /// How `--verbose` shows times.
    pub time_format: TimeFormat,
    /// `--enet-dmac`, `--enet-smac`: the MACs of frames rewritten as they
    /// enter the router.
    pub rewrite: MacRewrite,
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
            play: Playback::default(),
            malformed: MalformedPolicy::Drop,
            ingress: None,
            write: None,
            digests: None,
            seed: 1,
            verbose: false,
            time_format: TimeFormat::Relative,
            rewrite: MacRewrite::default(),
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

/// `--enet-dmac`, `--enet-smac`: the Ethernet addresses of the input's
/// frames rewritten as they enter the router, as tcprewrite's options of
/// those names do, so that a capture made anywhere can be replayed
/// through routed ports (which drop frames to another host's MAC as
/// `other_host`).
///
/// Only Ethernet frames are rewritten, and only a unicast destination: a
/// broadcast or multicast frame reaches every port as it is. The rewrite
/// is made in the copy of the frame the dispatcher hands to a worker (no
/// copy of its own); a `--filter` sees the frame as captured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MacRewrite {
    /// The destination: the ingress port's own MAC, or one for every frame.
    pub dmac: Option<DmacRewrite>,
    /// The source of every frame.
    pub smac: Option<MacAddr>,
}

/// What `--enet-dmac` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DmacRewrite {
    /// The router's own MAC on the routed port the frame arrives on
    /// (frames arriving on wire ports are left as they are).
    PortOwn,
    /// This MAC, on every frame.
    To(MacAddr),
}

/// How many frames [`MacRewrite`] changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct RewriteSummary {
    /// Destination MACs rewritten.
    pub dmac_rewritten: u64,
    /// Frames whose destination was kept: broadcast or multicast, not
    /// Ethernet, or (with the port's own MAC) arriving on a wire port.
    pub dmac_kept: u64,
    /// Source MACs rewritten.
    pub smac_rewritten: u64,
}

/// [`MacRewrite`] resolved against a router: per port, the destination to
/// write.
#[derive(Debug)]
struct Rewriter {
    dst: Vec<Option<[u8; 6]>>,
    src: Option<[u8; 6]>,
    dmac: bool,
    summary: RewriteSummary,
}

impl Rewriter {
    /// `None` when nothing is rewritten. The port's own MAC on a router
    /// without routed ports is an error (it could rewrite nothing).
    fn new(rw: MacRewrite, router: &RouterConfig) -> Result<Option<Rewriter>> {
        if rw == MacRewrite::default() {
            return Ok(None);
        }
        let ports = router.interfaces.len();
        let dst: Vec<Option<[u8; 6]>> = match rw.dmac {
            None => vec![None; ports],
            Some(DmacRewrite::To(m)) => vec![Some(m.0); ports],
            Some(DmacRewrite::PortOwn) => {
                let d: Vec<_> = (0..ports)
                    .map(|i| router.router_mac(i).map(|m| m.0))
                    .collect();
                if d.iter().all(Option::is_none) {
                    bail!(
                        "--enet-dmac: the router has no routed port (an interface with addresses) whose MAC to write; give one: --enet-dmac=MAC"
                    );
                }
                d
            }
        };
        Ok(Some(Rewriter {
            dst,
            src: rw.smac.map(|m| m.0),
            dmac: rw.dmac.is_some(),
            summary: RewriteSummary::default(),
        }))
    }

    /// Rewrites `frame`, arriving on `port`, in place.
    fn apply(&mut self, link: LinkType, port: u8, frame: &mut [u8]) {
        let ethernet = link == LinkType::Ethernet && frame.len() >= 14;
        let dst = self.dst.get(usize::from(port)).copied().flatten();
        match dst {
            Some(mac) if ethernet && frame[0] & 1 == 0 => {
                frame[..6].copy_from_slice(&mac);
                self.summary.dmac_rewritten += 1;
            }
            _ if self.dmac => self.summary.dmac_kept += 1,
            _ => {}
        }
        if let Some(mac) = self.src
            && ethernet
        {
            frame[6..12].copy_from_slice(&mac);
            self.summary.smac_rewritten += 1;
        }
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
    /// Capture time from the first arrival to the last arrival or
    /// departure, whichever is later, s (the capture's span even when no
    /// packet left).
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
    /// Where the digest windows were kept (`--digests`).
    pub digests: Option<PathBuf>,
    /// Defects part-way through input files: each file was replayed up to
    /// its defect (empty when every file read to its end).
    pub input_errors: Vec<InputError>,
    /// The operator stopped the run (Ctrl-C, SIGTERM) before the input's
    /// end: the counters cover the packets sent until then.
    pub interrupted: bool,
    /// `--verbose`'s standard output was closed (`| head`), which stopped
    /// the run as an interruption does.
    pub output_closed: bool,
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
    /// The MACs `--enet-dmac`/`--enet-smac` rewrote (`None`: neither given).
    pub enet_rewrite: Option<RewriteSummary>,
    /// Each shaped port's queue over capture time (with
    /// [`ReplayConfig::sample_queues`]; for `--plot`).
    #[serde(skip)]
    pub queue_samples: Vec<(String, Vec<QueueSample>)>,
    /// Records whose original length was absurd (above
    /// `dataplane::io::capture::MAX_ORIG_LEN`) and taken as the captured
    /// length.
    pub input_lengths_fixed: u64,
    /// Gaps in capture time longer than a minute whose wait was cut to a
    /// minute (`--multiplier` only; see `pacing::Schedule`).
    pub pacing_gaps_capped: u64,
    /// Gaps in capture time longer than a minute, in every mode (the
    /// router's clock runs through them: they are in `capture_span_s`).
    pub capture_gaps: LongGaps,
    /// How the workers took turns at what they share (`None`: one worker,
    /// or nothing shared; see [`Turns`]).
    pub turns: Option<TurnsSummary>,
    /// The merged latency histograms (ns).
    #[serde(skip)]
    pub latency: Latencies,
}

/// How the workers of a replay took turns ([`Turns`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TurnsSummary {
    /// A chunk's longest span, ms of capture time ([`TURN_WINDOW_NS`]).
    pub window_ms: f64,
    /// Turns taken: chunks, and each worker's end.
    pub turns: u64,
    /// Times a worker waited for its turn (wall-clock dependent).
    pub waits: u64,
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
            gaps: self.capture_gaps,
            // Only a multiplier cuts (waits for) the gaps it meets.
            paced_by_capture_time: self.pacing_gaps_capped > 0,
            capture_span_s: Some(self.capture_span_s),
        };
        notes.write_ending(w)?;
        if let Some(t) = &self.turns {
            writeln!(
                w,
                "workers took {} turns at what they share (queues, memberships, neighbours) in capture order, chunks of at most {} ms of capture time: the run repeats exactly (a worker waited for its turn {} times)",
                t.turns, t.window_ms, t.waits
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
        if let Some(x) = &self.enet_rewrite {
            writeln!(
                w,
                "enet: {} destination MACs rewritten, {} kept (broadcast, multicast, not Ethernet, or a wire port); {} source MACs rewritten",
                x.dmac_rewritten, x.dmac_kept, x.smac_rewritten
            )?;
        }
        for e in &self.input_errors {
            writeln!(w, "input error: {e}; replayed what precedes it")?;
        }
        notes.write_input_fixes(w)?;
        let omitted: u64 = self.heavy.iter().map(|e| e.omitted).sum();
        if omitted > 0 {
            writeln!(
                w,
                "heavy flows: {omitted} reports not kept: a worker holds at most {} until the end of the replay (the epochs' totals count them); raise the threshold or the epoch length",
                dataplane::stage::heavy::MAX_PENDING_FLOWS
            )?;
        }
        write!(w, "{}", self.router.render())?;
        self.write_heavy(w, top)?;
        for p in &self.written {
            writeln!(w, "wrote {}", p.display())?;
        }
        if let Some(d) = &self.digests {
            writeln!(w, "kept the digest windows in {}", d.display())?;
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

/// Up to [`BATCH_SIZE`] frames in one reusable buffer; with [`Turns`], its
/// number in their order, or a worker's end of input.
#[derive(Debug)]
struct Chunk {
    meta: Vec<(u64, u32, LinkType, u8, usize, usize)>,
    bytes: Vec<u8>,
    seq: u64,
    end: bool,
}

impl Chunk {
    fn new() -> Self {
        Chunk {
            meta: Vec::with_capacity(BATCH_SIZE),
            bytes: Vec::with_capacity(BATCH_SIZE * 2048),
            seq: 0,
            end: false,
        }
    }

    /// The first frame's time.
    fn first_ts(&self) -> Option<u64> {
        self.meta.first().map(|m| m.0)
    }
    /// Appends a frame; returns its bytes in the chunk.
    fn push(
        &mut self,
        ts: u64,
        orig_len: u32,
        link: LinkType,
        ingress: u8,
        data: &[u8],
    ) -> &mut [u8] {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(data);
        self.meta
            .push((ts, orig_len, link, ingress, start, self.bytes.len()));
        &mut self.bytes[start..]
    }
    fn clear(&mut self) {
        self.meta.clear();
        self.bytes.clear();
        self.end = false;
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

/// How far apart in capture time the frames of one chunk may be when the
/// workers of a replay take turns ([`Turns`]): a chunk is handed out when
/// it is full or when a frame arrives this long after its first, so a
/// shaped queue takes the workers' arrivals in capture order to within
/// this window.
pub const TURN_WINDOW_NS: u64 = 5_000_000;

/// The order in which the workers of a replay act on what they share.
///
/// The workers share each shaped port's queue (as in the live router) and
/// tell each other the multicast memberships and neighbours they learn. On
/// the wall clock the order in which they reach that state would depend on
/// thread timing, and so would SFB's decisions, the memberships a packet
/// sees and which departures a worker sends. So the dispatcher numbers the
/// chunks it hands out, in the order it hands them out (a chunk is cut
/// when it is full or [`TURN_WINDOW_NS`] after its first frame, both
/// decided by the input alone), and numbers each worker's end of input
/// after them; a worker runs the steps of the chain that touch only its
/// own state (parsing, Icarus, heavy flows) whenever it likes, and the
/// rest of a chunk (and the tick and report that follow it, or its end)
/// only in that chunk's turn. Every run of the same input, config and
/// worker count then makes the same decisions in the same order. A worker
/// whose turn has not come waits; the one whose turn it is always holds
/// its chunk (every chunk numbered before it was sent before it), so the
/// replay always moves on. A worker that unwinds, or a dispatcher that
/// stops without numbering the ends, breaks the order: the others then go
/// on unordered (the run fails anyway).
#[derive(Debug, Default)]
pub struct Turns {
    /// The number whose turn it is.
    next: AtomicU64,
    /// The order is given up (see above).
    broken: AtomicBool,
    /// Workers asleep waiting for a turn, and what wakes them.
    sleepers: AtomicU64,
    lock: Mutex<()>,
    moved: Condvar,
    /// Times a worker waited for its turn.
    waits: AtomicU64,
}

impl Turns {
    /// Waits until it is turn `seq`'s (or the order is broken).
    fn wait_for(&self, seq: u64) {
        let ready = || {
            self.next.load(AtomicOrdering::SeqCst) == seq
                || self.broken.load(AtomicOrdering::SeqCst)
        };
        if ready() {
            return;
        }
        self.waits.fetch_add(1, AtomicOrdering::Relaxed);
        for _ in 0..256 {
            std::hint::spin_loop();
            if ready() {
                return;
            }
        }
        // Counted first, so that a pass either sees a sleeper or is seen
        // here before the wait.
        self.sleepers.fetch_add(1, AtomicOrdering::SeqCst);
        let mut g = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        while !ready() {
            g = self
                .moved
                .wait_timeout(g, std::time::Duration::from_millis(5))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        drop(g);
        self.sleepers.fetch_sub(1, AtomicOrdering::SeqCst);
    }

    /// Turn `seq` is over: the next one's begins.
    fn pass(&self, seq: u64) {
        self.next.store(seq + 1, AtomicOrdering::SeqCst);
        self.wake();
    }

    /// Gives the order up (see the type's docs).
    fn give_up(&self) {
        self.broken.store(true, AtomicOrdering::SeqCst);
        self.wake();
    }

    fn wake(&self) {
        if self.sleepers.load(AtomicOrdering::SeqCst) > 0 {
            let _g = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
            self.moved.notify_all();
        }
    }
}

/// A worker's place in the [`Turns`].
#[derive(Debug)]
struct Turn {
    turns: Arc<Turns>,
    /// The number of the input `recv` returned last (a chunk, or the end).
    seq: u64,
    /// The turn is held.
    holding: bool,
    /// The worker's end of input has come (numbered, or not: see `Drop`).
    ended: bool,
    /// Its end's turn has been passed: the worker is done with the order.
    done: bool,
}

impl Drop for Turn {
    /// A worker that unwinds (its turn, or an earlier one, would never be
    /// passed) gives the order up, so that the others still finish.
    fn drop(&mut self) {
        if !self.done {
            self.turns.give_up();
        }
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
    /// This worker's place in the order of the workers' turns (`None`: one
    /// worker, or nothing shared).
    turn: Option<Turn>,
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
        let Some(turn) = &mut self.turn else {
            if self.mem.pending() == 0
                && let Ok(c) = self.rx.try_recv()
            {
                self.take(c);
            }
            return self.mem.recv(batch);
        };
        // Taking turns: one chunk is one batch, waited for (the end of
        // the input comes as a numbered chunk of its own).
        if turn.ended {
            return 0;
        }
        match self.rx.recv() {
            Ok(c) if c.end => {
                (turn.seq, turn.ended) = (c.seq, true);
                let mut c = c;
                c.clear();
                let _ = self.free.send(c);
                0
            }
            Ok(c) => {
                turn.seq = c.seq;
                self.take(c);
                self.mem.recv(batch)
            }
            // The dispatcher stopped without numbering this worker's end:
            // no turn of it comes (see `Turns`).
            Err(_) => {
                turn.ended = true;
                turn.turns.give_up();
                0
            }
        }
    }

    fn now(&mut self) -> Timestamp {
        self.mem.now()
    }

    fn wait(&mut self, _until: Option<Timestamp>) -> bool {
        if self.mem.pending() > 0 {
            return true;
        }
        if let Some(turn) = &self.turn {
            return !turn.ended;
        }
        match self.rx.recv() {
            Ok(c) => {
                self.take(c);
                true
            }
            Err(_) => false,
        }
    }

    fn take_turn(&mut self) {
        if let Some(t) = &mut self.turn
            && !t.holding
        {
            t.turns.wait_for(t.seq);
            t.holding = true;
        }
    }

    fn pass_turn(&mut self) {
        if let Some(t) = &mut self.turn
            && t.holding
        {
            t.turns.pass(t.seq);
            t.holding = false;
            t.done = t.ended;
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
    /// The digest stage's ring, when on.
    digest: Option<SharedRing>,
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
    let digest = w.chain().digest().map(DigestStage::ring);
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
        digest,
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
    /// `--verbose`'s standard output is gone: stop as at a request.
    output_closed: Arc<AtomicBool>,
    /// `--enet-dmac`, `--enet-smac`.
    rewrite: Option<Rewriter>,
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
    /// The workers take turns ([`Turns`]): chunks are numbered and cut by
    /// the input alone.
    turns: bool,
    /// The next chunk's number.
    seq: u64,
    /// The latest arrival handed out, ns of capture time.
    last_ts: u64,
}

impl Dispatcher<'_> {
    /// With [`Turns`], hands out every chunk whose first frame arrived more
    /// than [`TURN_WINDOW_NS`] before `ts` (in worker order).
    fn cut_by_time(&mut self, ts: u64) -> Result<()> {
        if !self.turns {
            return Ok(());
        }
        for w in 0..self.pending.len() {
            if self.pending[w]
                .first_ts()
                .is_some_and(|f| ts.saturating_sub(f) > TURN_WINDOW_NS)
            {
                self.flush(w)?;
            }
        }
        Ok(())
    }

    /// With [`Turns`], after the last chunk: each worker's end of input,
    /// numbered after every chunk (in worker order). A worker that has
    /// stopped is skipped.
    fn end_turns(&mut self) {
        if !self.turns {
            return;
        }
        for tx in &self.txs {
            let mut c = self.free.try_recv().unwrap_or_else(|_| Chunk::new());
            c.clear();
            (c.seq, c.end) = (self.seq, true);
            self.seq += 1;
            let _ = tx.send(c);
        }
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
        let mut full = std::mem::replace(&mut self.pending[w], fresh);
        full.seq = self.seq;
        self.seq += 1;
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
            // Workers taking turns get chunks cut by the input alone (a
            // cut here would depend on the wall clock).
            if !self.turns {
                self.flush_all()?;
            }
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
        if self.stop.requested() || self.output_closed.load(AtomicOrdering::Relaxed) {
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
        self.last_ts = self.last_ts.max(ts);
        self.cut_by_time(ts)?;
        let w = worker_of(link, data, self.txs.len());
        let copy = self.pending[w].push(ts, orig_len, link, ingress, data);
        if let Some(rw) = &mut self.rewrite {
            rw.apply(link, ingress, copy);
        }
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
    if cfg.play.loops == 0 {
        bail!("--loop must be at least 1");
    }
    if cfg.verbose && cfg.workers > 1 {
        bail!("--verbose prints the packets in order: it takes one worker (--workers 1)");
    }
    cfg.play.pacing.validate()?;
    let ingress = default_ingress(cfg)?;
    let rewrite = Rewriter::new(cfg.rewrite, &cfg.router)?;
    // Compiled first: an expression libpcap refuses fails before any work.
    let filter = cfg.play.filter.as_deref().map(BpfFilter::new).transpose()?;
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
    if let Some(dir) = &cfg.digests {
        if router.digest.is_none() {
            bail!(
                "--digests {}: the router keeps no digests (add a [digest] table to its config)",
                dir.display()
            );
        }
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--digests {}: cannot create the directory", dir.display()))?;
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
    // Workers that share something (a queue; memberships and neighbours,
    // linked) take turns at it.
    let turns = (cfg.workers > 1
        && (!router.egress_queues().is_empty() || chains.iter().any(|(_, l)| l.is_some())))
    .then(|| Arc::new(Turns::default()));
    let mut txs = Vec::new();
    let mut handles = Vec::new();
    let sample_queues = cfg.sample_queues;
    // Set by `--verbose`'s log when standard output goes away.
    let output_closed = Arc::new(AtomicBool::new(false));
    for (i, (mut chain, link)) in chains.into_iter().enumerate() {
        if cfg.verbose {
            chain.set_packet_log(packet_log(
                names.clone(),
                cfg.time_format,
                Arc::clone(&output_closed),
            ));
        }
        chain.set_parse_config(PipelineConfig {
            malformed: cfg.malformed,
            default_egress: PortSet::EMPTY,
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
            turn: turns.clone().map(|turns| Turn {
                turns,
                seq: 0,
                holding: false,
                ended: false,
                done: false,
            }),
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
        schedule: Schedule::new(cfg.play.pacing),
        sent: 0,
        bytes: 0,
        first_ts: None,
        progress,
        stop,
        output_closed: Arc::clone(&output_closed),
        rewrite,
        stopped: false,
        limits: cfg.play.limits,
        limit_reached: None,
        lengths_fixed: 0,
        filter,
        filtered_out: 0,
        turns: turns.is_some(),
        seq: 0,
        last_ts: 0,
    };
    let started = Instant::now();
    let map = IngressMap {
        router: &router,
        default: ingress,
        explicit: cfg.ingress.is_some(),
    };
    let result = feed(input, cfg, &map, &mut d);
    let flushed = d.flush_all();
    d.end_turns();
    let output_closed = output_closed.load(AtomicOrdering::Relaxed);
    let (sent, bytes, first_ts) = (d.sent, d.bytes, d.first_ts);
    let interrupted = d.stopped && !output_closed;
    let last_ts = d.last_ts;
    let limit_reached = d.limit_reached;
    let filtered_out = d.filtered_out;
    let rate_reached = d.schedule.rate_reached(d.start.elapsed());
    let (lengths_fixed, gaps_capped) = (d.lengths_fixed, d.schedule.capped_gaps());
    let capture_gaps = d.schedule.long_gaps();
    let numbered = d.seq;
    let enet_rewrite = d.rewrite.as_ref().map(|r| r.summary);
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
    let mut rings = Vec::new();
    for (i, r) in results.into_iter().enumerate() {
        rings.extend(r.digest);
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
    // The merged epochs are the report's: one definition of both figures
    // whatever the worker count (each worker closes the epochs it saw).
    if let Some(h) = &mut stats.heavy {
        h.epochs = heavy.len() as u64;
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
    if let Some(dir) = &cfg.digests {
        let d = Digests::new(rings, names.clone(), TimeBase::Unix);
        store::save(&d, dir).map_err(|e| anyhow!("--digests: {e}"))?;
    }
    let inputs = match input {
        Input::Files(f) => f.iter().map(|p| p.display().to_string()).collect(),
        Input::Synth(s) => vec![format!(
            "the built-in router's synthetic workload (packets {}, flows {}, zipf s {}, seed {})",
            s.packets, s.flows, s.zipf_s, s.seed
        )],
    };
    // The capture's span, whatever became of its packets: from the first
    // arrival to the last arrival or departure.
    let span = first_ts.map_or(0, |f| {
        last_departure.as_nanos().max(last_ts).saturating_sub(f)
    });
    let turns = turns.map(|t| TurnsSummary {
        window_ms: TURN_WINDOW_NS as f64 / 1e6,
        turns: numbered,
        waits: t.waits.load(AtomicOrdering::Relaxed),
    });
    Ok(Report {
        inputs,
        workers: cfg.workers,
        loops: cfg.play.loops,
        pacing: cfg.play.pacing.describe(),
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
        digests: cfg.digests.clone(),
        input_errors,
        interrupted,
        output_closed,
        limit_reached,
        rate_reached,
        filter: cfg.play.filter.clone(),
        filtered_out,
        ipfix,
        enet_rewrite,
        queue_samples,
        input_lengths_fixed: lengths_fixed,
        pacing_gaps_capped: gaps_capped,
        capture_gaps,
        turns,
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
    for _ in 0..cfg.play.loops {
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
            play: Playback {
                loops: 2,
                pacing: Pacing::Pps(50_000.0),
                ..Playback::default()
            },
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
    fn hostile_lengths_and_capture_gaps_are_bounded_and_explained() {
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
            play: Playback {
                pacing: Pacing::Multiplier(1000.0),
                ..Playback::default()
            },
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
        let gap = r.capture_gaps.longest_ns as f64 / 1e9;
        assert!(gap > 2147483648.0 && gap < 2147483649.0, "{gap}");
        let span = format!("{:.3}", r.capture_span_s);
        assert!(
            text.contains(&format!(
                "capture time: 1 gap longer than a minute (the longest {gap:.3} s); \
                 --multiplier 1000 paced each as one minute of capture time ({:.3} s of the capture's timing skipped), \
                 and the router runs on capture time, so the {span} s of capture time include it",
                gap - 60.0
            )),
            "{text}"
        );
        // At top speed nothing waits: the gap is explained, nothing cut.
        let cfg = ReplayConfig {
            pin: false,
            ..ReplayConfig::default()
        };
        let r = replay(&Input::Files(vec![d.join("bad.pcap")]), &cfg, None).unwrap();
        assert_eq!((r.pacing_gaps_capped, r.capture_gaps.count), (0, 1));
        let mut text = Vec::new();
        r.write_text(&mut text, 0).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(
            text.contains(&format!(
                "capture time: 1 gap longer than a minute (the longest {gap:.3} s); \
                 topspeed pacing does not wait for capture time, and the router runs on capture time, \
                 so the {span} s of capture time include it"
            )),
            "{text}"
        );
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
            play: Playback {
                loops: 2,
                ..Playback::default()
            },
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
            play: Playback {
                pacing: Pacing::Pps(20_000.0),
                ..Playback::default()
            },
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
        assert_eq!(p.received, p.forwarded + p.consumed + p.dropped);
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
