//! Replay into the embedded dataplane: one dispatcher thread reads captures
//! (or a synthetic stream), paces them as tcpreplay would, and hands packets
//! to `workers` pinned worker threads over bounded crossbeam channels. A
//! packet goes to the worker chosen by a hash of its flow key, so a flow
//! always meets the same worker and no state is shared between workers;
//! each worker runs its own [`Pipeline`] with a [`HeavyStage`] and its own
//! latency histogram, and the reports are merged at the end.
//!
//! Packets travel in chunks of up to [`BATCH_SIZE`] with reused buffers
//! (workers send emptied chunks back), so the steady state allocates
//! nothing per packet. A chunk is sent when full, and before the dispatcher
//! sleeps to pace, so pacing never holds packets back.
//!
//! Latency is per packet: from the moment the worker takes the packet (it
//! starts filling the batch) to its verdict (the pipeline returned), in ns,
//! recorded into an HdrHistogram (3 significant digits) per worker.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use crossbeam_channel::{Receiver, Sender, bounded, unbounded};
use dataplane::clock::Timestamp;
use dataplane::io::capture::CaptureReader;
use dataplane::pipeline::{BATCH_SIZE, Batch, Pipeline, PipelineConfig, PipelineCounters};
use dataplane::stage::heavy::{EpochReport, HeavyConfig, HeavyCounters, HeavyStage, merge_epochs};
use dataplane::wire::{LinkType, parse};
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use serde::Serialize;

use crate::synth::{Synth, SynthConfig};

/// What to replay.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// Capture files, in order.
    Files(Vec<PathBuf>),
    /// A synthetic Zipf stream generated on the fly.
    Synth(SynthConfig),
}

/// How fast to send, as tcpreplay's options.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pacing {
    /// As fast as possible (`--topspeed`).
    TopSpeed,
    /// The capture's own timing scaled: 2.0 is twice as fast (`--multiplier`).
    Multiplier(f64),
    /// Packets per second (`--pps`).
    Pps(f64),
    /// Megabits per second of wire length (`--mbps`).
    Mbps(f64),
}

impl Pacing {
    /// A short description for reports: `topspeed`, `multiplier 2`, `1000 pps`, `10 Mbps`.
    pub fn describe(self) -> String {
        match self {
            Pacing::TopSpeed => "topspeed".into(),
            Pacing::Multiplier(m) => format!("multiplier {m}"),
            Pacing::Pps(p) => format!("{p} pps"),
            Pacing::Mbps(m) => format!("{m} Mbps"),
        }
    }

    /// Checks that a rate is a positive finite number.
    pub fn validate(self) -> Result<()> {
        match self {
            Pacing::Multiplier(x) | Pacing::Pps(x) | Pacing::Mbps(x)
                if !(x.is_finite() && x > 0.0) =>
            {
                bail!("pacing rate must be a positive number, got {x}")
            }
            _ => Ok(()),
        }
    }
}

/// The send schedule of a paced stream, shared by the embedded and the live
/// replay: each packet's due time is an offset from the stream's start
/// computed from the packet's own position (its capture time, its index, or
/// the bytes before it), never from the previous packet's actual send time,
/// so lateness (a long sleep, a slow send) never accumulates: a late sender
/// catches up by sending the next packets at once.
///
/// Call [`next_offset`](Self::next_offset) once per packet in send order.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    pacing: Pacing,
    first_ts: Option<u64>,
    packets: u64,
    bits: u64,
}

/// Offsets are capped here (about 31 years), so that adding one to an
/// `Instant` cannot overflow.
const MAX_OFFSET_NS: u64 = 1_000_000_000 * 1_000_000_000;

impl Schedule {
    /// A schedule that starts with its first packet at offset 0.
    pub fn new(pacing: Pacing) -> Self {
        Schedule {
            pacing,
            first_ts: None,
            packets: 0,
            bits: 0,
        }
    }

    /// The offset from the start, in ns, at which the next packet (capture
    /// time `ts_ns`, `wire_len` bytes) is due; `None` at top speed (send at
    /// once). Multiplier: capture time since the first packet divided by the
    /// multiplier (a capture time before the first packet is due at once);
    /// pps: index / rate; Mbps: bits of the packets before this one / rate.
    pub fn next_offset(&mut self, ts_ns: u64, wire_len: u32) -> Option<u64> {
        let first = *self.first_ts.get_or_insert(ts_ns);
        let ns = match self.pacing {
            Pacing::TopSpeed => None,
            Pacing::Multiplier(m) => Some(ts_ns.saturating_sub(first) as f64 / m),
            Pacing::Pps(p) => Some(self.packets as f64 * 1e9 / p),
            Pacing::Mbps(r) => Some(self.bits as f64 * 1e3 / r),
        };
        self.packets += 1;
        self.bits = self.bits.saturating_add(u64::from(wire_len) * 8);
        // `as` saturates: NaN -> 0, beyond u64 -> u64::MAX.
        ns.map(|ns| (ns.max(0.0) as u64).min(MAX_OFFSET_NS))
    }
}

/// Capture time across passes (`--loop`): pass 0 keeps the capture's times;
/// every later pass is shifted to start 1 us after the latest time of the
/// passes before it, so time keeps increasing from pass to pass (and the
/// multiplier schedule plays the passes back to back).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassClock {
    last_out: Option<u64>,
    shift: Option<i128>,
}

impl PassClock {
    /// A clock before the first pass.
    pub fn new() -> Self {
        PassClock::default()
    }

    /// Starts the next pass: its first packet sets the shift.
    pub fn start_pass(&mut self) {
        self.shift = None;
    }

    /// The shifted time of a packet captured at `ts_ns` in the current pass.
    pub fn map(&mut self, ts_ns: u64) -> u64 {
        let last_out = self.last_out;
        let s = *self.shift.get_or_insert_with(|| match last_out {
            None => 0,
            Some(l) => i128::from(l) + 1_000 - i128::from(ts_ns),
        });
        let t = (i128::from(ts_ns) + s).clamp(0, i128::from(u64::MAX)) as u64;
        self.last_out = Some(last_out.map_or(t, |l| l.max(t)));
        t
    }
}

/// Sleeps until shortly before `deadline`, then spins until it; returns the
/// last time read, at or after `deadline` (one clock read when the deadline
/// has already passed). Sleeping only to 100 us before keeps the wake-up's
/// lateness (timer slack, scheduling) out of the send time. The spin yields
/// the CPU between clock reads: alone on a core that costs a system call
/// per round, but where other threads share it (on a small machine, the
/// router and receiver being measured) they run instead of waiting for the
/// spinner's time slice to end, which measured 100x lower median latency
/// through the live lab on 2 cores.
pub fn wait_until(deadline: Instant) -> Instant {
    let mut now = Instant::now();
    if now >= deadline {
        return now;
    }
    let wait = deadline - now;
    if wait > Duration::from_micros(200) {
        thread::sleep(wait - Duration::from_micros(100));
    }
    loop {
        now = Instant::now();
        if now >= deadline {
            return now;
        }
        thread::yield_now();
    }
}

/// Replay settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReplayConfig {
    /// Worker threads (at least 1).
    pub workers: usize,
    /// Pin workers to cores.
    pub pin: bool,
    /// Pacing.
    pub pacing: Pacing,
    /// Times to send the input (at least 1); each pass is shifted in
    /// capture time to follow the previous one.
    pub loops: u32,
    /// The pipeline.
    pub pipeline: PipelineConfig,
    /// The heavy-flow stage.
    pub heavy: HeavyConfig,
}

impl Default for ReplayConfig {
    fn default() -> Self {
        ReplayConfig {
            workers: 1,
            pin: true,
            pacing: Pacing::TopSpeed,
            loops: 1,
            pipeline: PipelineConfig::default(),
            heavy: HeavyConfig {
                seed: Some(0x5eed_b10b),
                ..HeavyConfig::default()
            },
        }
    }
}

/// Latency percentiles in ns.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Latency {
    /// Packets measured.
    pub count: u64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Largest.
    pub max: u64,
    /// Mean.
    pub mean: f64,
}

impl Latency {
    /// The percentiles of `h`.
    pub fn of(h: &Histogram<u64>) -> Self {
        Latency {
            count: h.len(),
            p50: h.value_at_quantile(0.5),
            p90: h.value_at_quantile(0.9),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
            mean: h.mean(),
        }
    }
}

/// The pipeline counters in a serialisable form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Packets in.
    pub received: u64,
    /// Forwarded (marked included).
    pub forwarded: u64,
    /// Marked.
    pub marked: u64,
    /// Dropped, total.
    pub dropped: u64,
    /// Dropped by reason (non-zero only).
    pub dropped_by_reason: BTreeMap<String, u64>,
    /// Malformed by reason (non-zero only), whatever the policy.
    pub malformed: BTreeMap<String, u64>,
    /// Non-IP frames.
    pub non_ip: u64,
}

impl From<&PipelineCounters> for Counters {
    fn from(c: &PipelineCounters) -> Self {
        Counters {
            received: c.received,
            forwarded: c.forwarded,
            marked: c.marked,
            dropped: c.dropped.total(),
            dropped_by_reason: c
                .dropped
                .nonzero()
                .map(|(r, n)| (r.name().to_string(), n))
                .collect(),
            malformed: c
                .malformed
                .iter()
                .filter(|&(_, n)| n != 0)
                .map(|(r, n)| (r.to_string(), n))
                .collect(),
            non_ip: c.non_ip,
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
    /// Its latency.
    pub latency_ns: Latency,
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
    /// Packets sent.
    pub packets: u64,
    /// Wire bytes sent.
    pub bytes: u64,
    /// Wall time, s.
    pub elapsed_s: f64,
    /// Packets per second achieved.
    pub pps: f64,
    /// Megabits per second achieved (wire length).
    pub mbps: f64,
    /// Pipeline counters, all workers.
    pub counters: Counters,
    /// Heavy-stage counters, all workers.
    pub heavy_counters: HeavyCounters,
    /// Per-packet processing latency, all workers.
    pub latency_ns: Latency,
    /// Heavy flows per epoch, merged.
    pub heavy: Vec<EpochReport>,
    /// Per worker.
    pub per_worker: Vec<WorkerSummary>,
    /// The merged histogram (ns).
    #[serde(skip)]
    pub histogram: Histogram<u64>,
}

impl Report {
    /// The human-readable summary printed on the terminal.
    pub fn write_text(&self, w: &mut impl Write, top: usize) -> std::io::Result<()> {
        let c = &self.counters;
        writeln!(
            w,
            "replayed {} packets ({} bytes) from {} in {:.3} s with {} worker(s), {}: {:.0} pps, {:.1} Mbps",
            self.packets,
            self.bytes,
            self.inputs.join(", "),
            self.elapsed_s,
            self.workers,
            self.pacing,
            self.pps,
            self.mbps
        )?;
        writeln!(
            w,
            "pipeline: received {} forwarded {} marked {} dropped {} non-ip {}",
            c.received, c.forwarded, c.marked, c.dropped, c.non_ip
        )?;
        for (r, n) in &c.dropped_by_reason {
            writeln!(w, "  dropped {r}: {n}")?;
        }
        let l = &self.latency_ns;
        writeln!(
            w,
            "latency (ns, take -> verdict): p50 {} p90 {} p99 {} p99.9 {} max {} count {}",
            l.p50, l.p90, l.p99, l.p999, l.max, l.count
        )?;
        for e in &self.heavy {
            writeln!(
                w,
                "heavy flows, epoch {} ({:.6} s .. {:.6} s, {} bytes, {} packets): {}",
                e.epoch,
                e.start_ns as f64 / 1e9,
                e.end_ns as f64 / 1e9,
                e.bytes,
                e.packets,
                e.flows.len()
            )?;
            if e.flows.is_empty() {
                continue;
            }
            writeln!(
                w,
                "  {:<58} {:>12} {:>9} {:>7}",
                "flow", "bytes<=", "packets<=", "share%"
            )?;
            for f in e.flows.iter().take(top) {
                writeln!(
                    w,
                    "  {:<58} {:>12} {:>9} {:>7.3}",
                    f.flow,
                    f.bytes_upper,
                    f.packets_upper,
                    100.0 * f.bytes_upper as f64 / e.bytes.max(1) as f64
                )?;
            }
            if e.flows.len() > top {
                writeln!(w, "  ... {} more (see --json)", e.flows.len() - top)?;
            }
        }
        Ok(())
    }

    /// The latency distribution in HdrHistogram's `.hgrm` percentile format
    /// (values in microseconds, 5 ticks per half distance).
    pub fn write_hgrm(&self, w: &mut impl Write) -> std::io::Result<()> {
        write_hgrm(&self.histogram, w)
    }
}

/// Writes `h` (ns) as an `.hgrm` percentile distribution in microseconds.
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

/// Up to [`BATCH_SIZE`] packets in one reusable buffer.
#[derive(Debug)]
struct Chunk {
    meta: Vec<(u64, u32, LinkType, usize, usize)>,
    bytes: Vec<u8>,
}

impl Chunk {
    fn new() -> Self {
        Chunk {
            meta: Vec::with_capacity(BATCH_SIZE),
            bytes: Vec::with_capacity(BATCH_SIZE * 2048),
        }
    }
    fn push(&mut self, ts: u64, orig_len: u32, link: LinkType, data: &[u8]) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(data);
        self.meta
            .push((ts, orig_len, link, start, self.bytes.len()));
    }
    fn clear(&mut self) {
        self.meta.clear();
        self.bytes.clear();
    }
}

struct WorkerResult {
    counters: PipelineCounters,
    heavy: Vec<EpochReport>,
    heavy_counters: HeavyCounters,
    hist: Histogram<u64>,
    core: Option<usize>,
    packets: u64,
}

/// An empty latency histogram: 1 ns .. 100 s, 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    // 1 ns .. 100 s at 3 significant digits; values above are clamped.
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("constant bounds are valid")
}

fn worker(
    rx: Receiver<Chunk>,
    free: Sender<Chunk>,
    core: Option<core_affinity::CoreId>,
    cfg: ReplayConfig,
) -> WorkerResult {
    let pinned = core
        .filter(|c| core_affinity::set_for_current(*c))
        .map(|c| c.id);
    let mut pipeline = Pipeline::new(cfg.pipeline).with_stage(HeavyStage::new(cfg.heavy));
    let mut batch = Batch::new();
    let mut hist = new_histogram();
    let mut now = Timestamp::ZERO;
    let mut packets = 0u64;
    for mut chunk in rx {
        let t0 = Instant::now();
        batch.clear();
        for &(ts, orig_len, link, s, e) in &chunk.meta {
            batch.push(
                Timestamp::from_nanos(ts),
                orig_len,
                link,
                &chunk.bytes[s..e],
            );
        }
        now = now.max(batch.latest_ts().unwrap_or_default());
        pipeline.process(&mut batch, now);
        let ns = u64::try_from(t0.elapsed().as_nanos())
            .unwrap_or(u64::MAX)
            .max(1);
        let _ = hist.record_n(ns.min(hist.high()), batch.len() as u64);
        packets += batch.len() as u64;
        chunk.clear();
        let _ = free.send(chunk);
    }
    pipeline.finish(now);
    let counters = pipeline.counters().clone();
    let (heavy, heavy_counters) = match pipeline.stage_mut::<HeavyStage>() {
        Some(s) => (s.take_reports(), *s.counters()),
        None => (Vec::new(), HeavyCounters::default()),
    };
    WorkerResult {
        counters,
        heavy,
        heavy_counters,
        hist,
        core: pinned,
        packets,
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
    cfg: ReplayConfig,
    txs: Vec<Sender<Chunk>>,
    free: Receiver<Chunk>,
    pending: Vec<Chunk>,
    start: Instant,
    schedule: Schedule,
    sent: u64,
    bytes: u64,
    progress: Option<&'a ProgressBar>,
}

impl Dispatcher<'_> {
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
        let target = self.start + Duration::from_nanos(offset);
        if target > Instant::now() {
            self.flush_all()?;
            wait_until(target);
        }
        Ok(())
    }

    fn send(&mut self, ts: u64, orig_len: u32, link: LinkType, data: &[u8]) -> Result<()> {
        self.pace(ts, orig_len)?;
        let w = worker_of(link, data, self.txs.len());
        self.pending[w].push(ts, orig_len, link, data);
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

/// Replays `input` through `cfg.workers` embedded dataplanes and returns the
/// merged report. Errors name the file and the reason.
pub fn replay(input: &Input, cfg: &ReplayConfig, progress: Option<&ProgressBar>) -> Result<Report> {
    let cfg = *cfg;
    if cfg.workers == 0 {
        bail!("--workers must be at least 1");
    }
    if cfg.loops == 0 {
        bail!("--loop must be at least 1");
    }
    cfg.pacing.validate()?;
    // Open every file first, so a bad name fails before any work.
    if let Input::Files(files) = input {
        for f in files {
            CaptureReader::open(f).map_err(|e| anyhow!("{e}"))?;
        }
    }
    let cores = if cfg.pin {
        core_affinity::get_core_ids().unwrap_or_default()
    } else {
        Vec::new()
    };
    let (free_tx, free_rx) = unbounded::<Chunk>();
    let mut txs = Vec::new();
    let mut handles = Vec::new();
    for i in 0..cfg.workers {
        let (tx, rx) = bounded::<Chunk>(64);
        txs.push(tx);
        let free = free_tx.clone();
        let core = (!cores.is_empty()).then(|| cores[i % cores.len()]);
        let h = thread::Builder::new()
            .name(format!("worker-{i}"))
            .spawn(move || worker(rx, free, core, cfg))
            .context("cannot start a worker thread")?;
        handles.push(h);
    }
    drop(free_tx);
    let mut d = Dispatcher {
        cfg,
        pending: (0..cfg.workers).map(|_| Chunk::new()).collect(),
        txs,
        free: free_rx,
        start: Instant::now(),
        schedule: Schedule::new(cfg.pacing),
        sent: 0,
        bytes: 0,
        progress,
    };
    let started = Instant::now();
    let result = feed(input, &mut d);
    let flushed = d.flush_all();
    let sent = d.sent;
    let bytes = d.bytes;
    drop(d); // closes the channels: workers finish their epochs
    let mut results = Vec::new();
    for h in handles {
        results.push(h.join().map_err(|_| anyhow!("a worker thread panicked"))?);
    }
    result?;
    flushed?;
    let elapsed = started.elapsed().as_secs_f64();

    let mut counters = PipelineCounters::default();
    let mut hist = new_histogram();
    let mut heavy_counters = HeavyCounters::default();
    let mut shards = Vec::new();
    let mut per_worker = Vec::new();
    for (i, r) in results.into_iter().enumerate() {
        counters.merge(&r.counters);
        let _ = hist.add(&r.hist);
        let hc = &mut heavy_counters;
        let o = r.heavy_counters;
        hc.packets += o.packets;
        hc.bytes += o.bytes;
        hc.skipped += o.skipped;
        hc.detections += o.detections;
        hc.evictions += o.evictions;
        hc.overflow += o.overflow;
        hc.epochs = hc.epochs.max(o.epochs);
        per_worker.push(WorkerSummary {
            worker: i,
            core: r.core,
            packets: r.packets,
            latency_ns: Latency::of(&r.hist),
        });
        shards.push(r.heavy);
    }
    let heavy = merge_epochs(&shards, cfg.heavy.threshold);
    heavy_counters.reported = heavy.iter().map(|e| e.flows.len() as u64).sum();
    let inputs = match input {
        Input::Files(f) => f.iter().map(|p| p.display().to_string()).collect(),
        Input::Synth(s) => vec![format!(
            "synthetic zipf (flows {}, packets {}, s {}, seed {})",
            s.flows, s.packets, s.zipf_s, s.seed
        )],
    };
    Ok(Report {
        inputs,
        workers: cfg.workers,
        loops: cfg.loops,
        pacing: cfg.pacing.describe(),
        packets: sent,
        bytes,
        elapsed_s: elapsed,
        pps: sent as f64 / elapsed.max(1e-9),
        mbps: bytes as f64 * 8.0 / 1e6 / elapsed.max(1e-9),
        counters: Counters::from(&counters),
        heavy_counters,
        latency_ns: Latency::of(&hist),
        heavy,
        per_worker,
        histogram: hist,
    })
}

/// Sends every pass of the input; capture time of pass `k > 0` is shifted to
/// start 1 us after the previous pass ended ([`PassClock`]), so `now` keeps
/// increasing.
fn feed(input: &Input, d: &mut Dispatcher<'_>) -> Result<()> {
    let mut clock = PassClock::new();
    for _ in 0..d.cfg.loops {
        clock.start_pass();
        match input {
            Input::Files(files) => {
                for f in files {
                    let mut r = CaptureReader::open(f).map_err(|e| anyhow!("{e}"))?;
                    loop {
                        match r.next_record() {
                            Ok(Some(rec)) => {
                                let ts = clock.map(rec.ts_ns);
                                d.send(ts, rec.orig_len, rec.link_type, rec.data)?;
                            }
                            Ok(None) => break,
                            Err(e) => return Err(anyhow!("{e}")),
                        }
                    }
                }
            }
            Input::Synth(cfg) => {
                let mut s = Synth::new(*cfg)?;
                while let Some((ts, data)) = s.next() {
                    let ts = clock.map(ts);
                    d.send(ts, data.len() as u32, LinkType::Ethernet, data)?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn synth() -> Input {
        Input::Synth(SynthConfig {
            flows: 5_000,
            packets: 100_000,
            zipf_s: 1.1,
            size: None,
            seed: 9,
            unique: false,
        })
    }

    #[test]
    fn merged_report_equals_single_worker_report() {
        let one = replay(&synth(), &ReplayConfig::default(), None).unwrap();
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
        assert_eq!(one.counters, three.counters);
        assert_eq!(one.latency_ns.count, three.latency_ns.count);
        assert_eq!(one.latency_ns.count, 100_000);
        assert_eq!(one.heavy.len(), 1);
        assert_eq!(three.heavy.len(), 1);
        let (a, b) = (&one.heavy[0], &three.heavy[0]);
        assert_eq!(
            (a.start_ns, a.end_ns, a.bytes, a.packets),
            (b.start_ns, b.end_ns, b.bytes, b.packets)
        );
        let ka: HashSet<String> = a.flows.iter().map(|f| f.flow.clone()).collect();
        let kb: HashSet<String> = b.flows.iter().map(|f| f.flow.clone()).collect();
        assert!(!ka.is_empty());
        assert_eq!(ka, kb);
        assert!(three.per_worker.iter().all(|w| w.packets > 0));
    }

    #[test]
    fn loops_and_pps_pacing() {
        let input = Input::Synth(SynthConfig {
            flows: 10,
            packets: 500,
            ..SynthConfig::default()
        });
        let cfg = ReplayConfig {
            loops: 2,
            pacing: Pacing::Pps(50_000.0),
            ..ReplayConfig::default()
        };
        let r = replay(&input, &cfg, None).unwrap();
        assert_eq!(r.packets, 1000);
        assert_eq!(r.counters.received, 1000);
        // 1000 packets at 50 kpps take at least ~20 ms.
        assert!(r.elapsed_s >= 0.015, "{}", r.elapsed_s);
        let e = &r.heavy[0];
        assert_eq!(e.packets, 1000);
        let mut hgrm = Vec::new();
        r.write_hgrm(&mut hgrm).unwrap();
        let text = String::from_utf8(hgrm).unwrap();
        assert!(text.contains("Total count    =         1000"), "{text}");
    }

    /// The offsets of `packets` (capture time, length) over `loops` passes.
    fn offsets(pacing: Pacing, packets: &[(u64, u32)], loops: u32) -> Vec<Option<u64>> {
        let mut sched = Schedule::new(pacing);
        let mut clock = PassClock::new();
        let mut out = Vec::new();
        for _ in 0..loops {
            clock.start_pass();
            for &(ts, len) in packets {
                out.push(sched.next_offset(clock.map(ts), len));
            }
        }
        out
    }

    const CAPTURE: [(u64, u32); 4] = [
        (5_000_000_000, 100),
        (5_000_001_000, 200),
        (5_000_004_000, 1500),
        (5_000_010_000, 64),
    ];

    #[test]
    fn schedule_topspeed_sends_at_once() {
        assert!(
            offsets(Pacing::TopSpeed, &CAPTURE, 3)
                .iter()
                .all(Option::is_none)
        );
    }

    #[test]
    fn schedule_multiplier_follows_capture_time_across_loops() {
        let got = offsets(Pacing::Multiplier(2.0), &CAPTURE, 2);
        // Pass 2 starts 1 us after pass 1's last packet (10 us): at 11 us.
        let want = [0, 1_000, 4_000, 10_000, 11_000, 12_000, 15_000, 21_000].map(|us| Some(us / 2));
        assert_eq!(got, want);
        // Slower than real time; a capture going back in time is sent at once.
        let got = offsets(
            Pacing::Multiplier(0.5),
            &[(100, 60), (50, 60), (300, 60)],
            1,
        );
        assert_eq!(got, [Some(0), Some(0), Some(400)]);
    }

    #[test]
    fn schedule_pps_is_index_over_rate_without_drift() {
        // 3 pps: offsets are n/3 s rounded down, never an accumulated sum of
        // rounded gaps (which would drift by up to 1 ns per packet).
        let many: Vec<(u64, u32)> = (0..3000).map(|i| (i, 60)).collect();
        let got = offsets(Pacing::Pps(3.0), &many, 1);
        for (n, o) in got.iter().enumerate() {
            let want = (n as u128 * 1_000_000_000 / 3) as u64;
            let o = o.unwrap();
            assert!(o.abs_diff(want) <= 1, "packet {n}: {o} vs {want}");
        }
        // Loops continue the count.
        let got = offsets(Pacing::Pps(1000.0), &CAPTURE, 2);
        let want: Vec<Option<u64>> = (0..8).map(|n| Some(n * 1_000_000)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn schedule_mbps_is_bits_before_over_rate() {
        // 8 Mbit/s = 1 byte per us: a packet is due when the bytes before it
        // have gone out.
        let got = offsets(Pacing::Mbps(8.0), &CAPTURE, 2);
        let want = [0, 100, 300, 1800, 1864, 1964, 2164, 3664].map(|us| Some(us * 1_000));
        assert_eq!(got, want);
    }

    #[test]
    fn schedule_offsets_are_capped() {
        let mut s = Schedule::new(Pacing::Multiplier(1e-12));
        assert_eq!(s.next_offset(0, 60), Some(0));
        assert_eq!(s.next_offset(u64::MAX, 60), Some(MAX_OFFSET_NS));
        assert!(
            Instant::now()
                .checked_add(Duration::from_nanos(MAX_OFFSET_NS))
                .is_some()
        );
    }

    #[test]
    fn pacing_rates_must_be_positive() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(Pacing::Pps(bad).validate().is_err());
            assert!(Pacing::Mbps(bad).validate().is_err());
            assert!(Pacing::Multiplier(bad).validate().is_err());
        }
        assert!(Pacing::TopSpeed.validate().is_ok());
        assert!(Pacing::Pps(1.0).validate().is_ok());
    }

    #[test]
    fn wait_until_is_not_early() {
        let start = Instant::now();
        for k in 1..=20u64 {
            let deadline = start + Duration::from_micros(50 * k);
            let t = wait_until(deadline);
            assert!(t >= deadline);
            assert!(Instant::now() >= deadline);
        }
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
}
