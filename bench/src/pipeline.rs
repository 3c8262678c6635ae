//! `pipeline/*` and `heavy/*`: the dataplane's single-worker packet rate,
//! and heavy-flow detection against the `heavykeeper` crate.
//!
//! Traces are loaded into memory before anything is timed:
//!
//! * `zipf64`: 10^6 frames of 64 bytes over 10^5 flows, Zipf s = 1.1
//!   (`traffic_gen::synth`, seed 1: UDP, every fourth flow IPv6), stored
//!   back to back in one buffer as a NIC ring would hold them;
//! * `tls2`: `pcpp_tls2.pcap` from the shared corpus (7,451 packets, 665
//!   flows, 60% IPv6), skipped with a note when the file is absent.
//!
//! Cases:
//!
//! * `pipeline/heavy/<trace>`: one thread, no channels: the packets are
//!   copied into a reused [`Batch`] 32 at a time and run through
//!   [`Pipeline::process`] (parse + [`HeavyStage`]), with [`heavy_config`]
//!   (drop malformed, 0.1% byte-share threshold, one epoch, 2 x 2^12 cells
//!   of (bytes, packets) counters, 4096 tracked flows); the epoch is closed
//!   at the end. Per call: a fresh
//!   pipeline, every packet, `finish`. ns per packet.
//! * `heavy/zipf/bloomplane` and `heavy/zipf/heavykeeper`: heavy-flow
//!   detection alone, on flow keys parsed before timing. Ours gets the
//!   keys and wire lengths 32 at a time through [`HeavyStage::observe`]
//!   (the path [`Stage::process`](dataplane::pipeline::Stage::process) takes once it has gathered a
//!   batch's keys: hashing, the sketch, the flow memory, the threshold),
//!   then `finish` closes the epoch and reports. The input is a
//!   [`FlowKey`] (40 bytes), a length and a time per packet, next to the
//!   peer's 40-byte key. heavykeeper 0.7's `TopK` gets `add(key, 1)` per
//!   packet and `list()` at the end. Both start empty on every call. The
//!   peer's key is the flow's 10-word form (`FlowKey::words10`, the words
//!   our IPv6 keys are hashed as; one `[u32; 10]` type for both families).
//!
//! Same memory: our sketch is 2 x 4096 cells of two `u32` counters (bytes,
//! packets) = 64 KiB; heavykeeper's `TopK` gets [`HK_DEPTH`] x [`HK_WIDTH`] buckets of
//! 16 bytes (u64 fingerprint, u64 count) = 64 KiB, decay 0.9. Flow memory
//! is extra for both: ours tracks at most 4096 flows, heavykeeper's queue
//! holds [`HK_TOP_K`].
//!
//! Accuracy ([`accuracy`]) is judged against the exact per-flow packet
//! counts of the trace: a flow is heavy with at least 0.1% of the packets
//! (all frames are 64 bytes, so that is also 0.1% of the bytes, our
//! stage's threshold). heavykeeper counts packets; a flow it lists is
//! reported when its count reaches the same 0.1%.

use std::collections::{HashMap, HashSet};
use std::hint::black_box;
use std::path::{Path, PathBuf};

use criterion::{Criterion, Throughput};
use dataplane::clock::Timestamp;
use dataplane::flow::FlowKey;
use dataplane::io::capture::read_all;
use dataplane::pipeline::{BATCH_SIZE, Batch, Pipeline, PipelineConfig};
use dataplane::stage::heavy::{HeavyConfig, HeavyStage, Threshold};
use dataplane::wire::{LinkType, parse};
use heavykeeper::TopK;
use serde::Serialize;
use traffic_gen::synth::{Synth, SynthConfig};

use crate::measure::{Figure, figure};

/// Packets of the synthetic trace.
pub const ZIPF_PACKETS: u64 = 1_000_000;
/// Flows of the synthetic trace.
pub const ZIPF_FLOWS: u32 = 100_000;
/// Zipf exponent of the synthetic trace.
pub const ZIPF_S: f64 = 1.1;
/// Frame size of the synthetic trace.
pub const ZIPF_FRAME: u16 = 64;
/// Heavy: at least this share of the packets (and bytes).
pub const SHARE: f64 = 0.001;
/// heavykeeper rows.
pub const HK_DEPTH: usize = 2;
/// heavykeeper buckets per row (2 x 2048 x 16 B = 64 KiB).
pub const HK_WIDTH: usize = 2048;
/// heavykeeper top-k capacity.
pub const HK_TOP_K: usize = 1024;
/// heavykeeper decay base.
pub const HK_DECAY: f64 = 0.9;
const HK_SEED: u64 = 0x5eed_b10b;

/// The capture file of the `tls2` case.
pub const TLS2: &str = "pcpp_tls2.pcap";

/// One packet of a [`Trace`]: its place in the trace's buffer and what the
/// capture said about it.
#[derive(Debug, Clone, Copy)]
struct Meta {
    ts: u64,
    orig_len: u32,
    link: LinkType,
    start: usize,
    end: usize,
}

/// Packets held in memory, back to back in one buffer.
#[derive(Debug, Default)]
pub struct Trace {
    bytes: Vec<u8>,
    meta: Vec<Meta>,
}

impl Trace {
    fn push(&mut self, ts: u64, orig_len: u32, link: LinkType, data: &[u8]) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(data);
        self.meta.push(Meta {
            ts,
            orig_len,
            link,
            start,
            end: self.bytes.len(),
        });
    }

    /// The synthetic Zipf trace of 64-byte frames.
    pub fn zipf64() -> Trace {
        let cfg = SynthConfig {
            flows: ZIPF_FLOWS,
            packets: ZIPF_PACKETS,
            zipf_s: ZIPF_S,
            size: Some(ZIPF_FRAME),
            seed: 1,
            unique: false,
        };
        let mut synth = Synth::new(cfg).expect("constant synth settings are valid");
        let mut t = Trace::default();
        t.bytes
            .reserve(ZIPF_PACKETS as usize * usize::from(ZIPF_FRAME));
        t.meta.reserve(ZIPF_PACKETS as usize);
        while let Some((ts, data)) = synth.next() {
            t.push(ts, data.len() as u32, LinkType::Ethernet, data);
        }
        t
    }

    /// Every record of a capture; `None` (with a note on stderr) when it
    /// cannot be read.
    pub fn capture(path: &Path) -> Option<Trace> {
        let (records, err) = read_all(path);
        if let Some(e) = err {
            if records.is_empty() {
                eprintln!("note: skipping {}: {e}", path.display());
                return None;
            }
            eprintln!(
                "note: {}: read {} records, then: {e}",
                path.display(),
                records.len()
            );
        }
        let mut t = Trace::default();
        for r in &records {
            t.push(r.ts_ns, r.orig_len, r.link_type, &r.data);
        }
        Some(t)
    }

    /// `pcpp_tls2.pcap` from the shared corpus, if present.
    pub fn tls2() -> Option<Trace> {
        Trace::capture(&corpus().join(TLS2))
    }

    /// Number of packets.
    pub fn len(&self) -> usize {
        self.meta.len()
    }

    /// Whether the trace holds no packet.
    pub fn is_empty(&self) -> bool {
        self.meta.is_empty()
    }

    fn frame(&self, m: &Meta) -> &[u8] {
        &self.bytes[m.start..m.end]
    }
}

/// The shared capture corpus (`../shared/pcaps` next to the workspace).
pub fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/pcaps")
}

/// What one replay returns: checked by the tests, kept by the timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayOutcome {
    /// Packets forwarded.
    pub forwarded: u64,
    /// Packets dropped.
    pub dropped: u64,
    /// Heavy flows reported.
    pub heavy: usize,
}

/// The heavy-flow settings of these benches: 0.1% of the bytes, one epoch,
/// 2 x 2^12 cells, 4096 tracked flows, a fixed seed.
pub fn heavy_config() -> HeavyConfig {
    HeavyConfig {
        threshold: Threshold::ByteShare(SHARE),
        // heavykeeper's memory, not the stage's default (1 MiB at 0.1%).
        rows: 2,
        log2_width: 12,
        seed: Some(HK_SEED),
        ..HeavyConfig::default()
    }
}

/// Replays `trace` through a fresh parse + heavy pipeline, one thread,
/// batches of [`BATCH_SIZE`].
pub fn replay(trace: &Trace, batch: &mut Batch) -> ReplayOutcome {
    let mut pipeline =
        Pipeline::new(PipelineConfig::default()).with_stage(HeavyStage::new(heavy_config()));
    let mut now = Timestamp::ZERO;
    for chunk in trace.meta.chunks(BATCH_SIZE) {
        batch.clear();
        for m in chunk {
            batch.push(
                Timestamp::from_nanos(m.ts),
                m.orig_len,
                m.link,
                trace.frame(m),
            );
        }
        now = now.max(batch.latest_ts().unwrap_or_default());
        pipeline.process(batch, now);
    }
    pipeline.finish(now);
    let c = pipeline.counters();
    let (forwarded, dropped) = (c.forwarded, c.dropped.total());
    let heavy = pipeline
        .stage_mut::<HeavyStage>()
        .map_or(0, |s| s.take_reports().iter().map(|r| r.flows.len()).sum());
    ReplayOutcome {
        forwarded,
        dropped,
        heavy,
    }
}

/// The flow keys of a trace, parsed before timing, with the exact truth.
#[derive(Debug)]
pub struct Keys {
    /// Per IP packet: capture time, wire length, flow key.
    ts: Vec<u64>,
    lens: Vec<u32>,
    flows: Vec<FlowKey>,
    /// The same flows in heavykeeper's key form.
    words: Vec<[u32; 10]>,
    /// Exact packets per flow.
    truth: HashMap<FlowKey, u64>,
}

impl Keys {
    /// Parses every packet of `trace` (non-IP and malformed ones are left out).
    pub fn of(trace: &Trace) -> Keys {
        let mut k = Keys {
            ts: Vec::with_capacity(trace.len()),
            lens: Vec::with_capacity(trace.len()),
            flows: Vec::with_capacity(trace.len()),
            words: Vec::with_capacity(trace.len()),
            truth: HashMap::new(),
        };
        for m in &trace.meta {
            let Ok(p) = parse(m.link, trace.frame(m)) else {
                continue;
            };
            let Some(f) = p.flow else { continue };
            let len = m.orig_len.max((m.end - m.start) as u32);
            k.ts.push(m.ts);
            k.lens.push(len);
            k.flows.push(f);
            k.words.push(f.words10());
            *k.truth.entry(f).or_default() += 1;
        }
        k
    }

    /// Number of keyed packets.
    pub fn len(&self) -> usize {
        self.flows.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// The flows with at least [`SHARE`] of the packets, exactly.
    pub fn heavy_truth(&self) -> HashSet<FlowKey> {
        let cut = SHARE * self.flows.len() as f64;
        self.truth
            .iter()
            .filter(|&(_, &n)| n as f64 >= cut)
            .map(|(k, _)| *k)
            .collect()
    }
}

/// Our detection: the heavy stage (traffic-gen's settings) fed the
/// pre-parsed flow keys and lengths in batches of [`BATCH_SIZE`]
/// ([`HeavyStage::observe`], the stage's own path after it gathers a
/// batch's keys), then the epoch closed; the reported flows.
pub fn detect_ours(keys: &Keys) -> Vec<FlowKey> {
    let mut stage = HeavyStage::new(heavy_config());
    let mut now = Timestamp::ZERO;
    for ((ts, lens), flows) in keys
        .ts
        .chunks(BATCH_SIZE)
        .zip(keys.lens.chunks(BATCH_SIZE))
        .zip(keys.flows.chunks(BATCH_SIZE))
    {
        now = now.max(Timestamp::from_nanos(ts.last().copied().unwrap_or(0)));
        stage.observe(flows, lens, now);
    }
    dataplane::pipeline::Stage::finish(&mut stage, now);
    stage
        .take_reports()
        .iter()
        .flat_map(|r| r.flows.iter().map(|f| f.key))
        .collect()
}

/// heavykeeper's detection: `add(key, 1)` per packet, then the listed flows
/// whose count reaches [`SHARE`] of the packets (as 10-word keys).
pub fn detect_heavykeeper(keys: &Keys) -> Vec<[u32; 10]> {
    let mut hk: TopK<[u32; 10]> = TopK::with_seed(HK_TOP_K, HK_WIDTH, HK_DEPTH, HK_DECAY, HK_SEED);
    for k in &keys.words {
        hk.add(k, 1);
    }
    let cut = SHARE * keys.words.len() as f64;
    hk.list()
        .into_iter()
        .filter(|n| n.count as f64 >= cut)
        .map(|n| n.item)
        .collect()
}

/// Recall and precision of one detector on one trace.
#[derive(Debug, Clone, Serialize)]
pub struct Accuracy {
    /// The figure the detector is timed as, e.g. `heavy/zipf/bloomplane`.
    pub name: String,
    /// Flows with at least 0.1% of the packets, exactly.
    pub heavy: usize,
    /// Flows the detector reported.
    pub reported: usize,
    /// Reported flows that are heavy.
    pub true_positives: usize,
    /// `true_positives / heavy`.
    pub recall: f64,
    /// `true_positives / reported`.
    pub precision: f64,
}

impl Accuracy {
    fn of(name: &str, truth: &HashSet<[u32; 10]>, reported: &[[u32; 10]]) -> Accuracy {
        let reported: HashSet<[u32; 10]> = reported.iter().copied().collect();
        let tp = reported.intersection(truth).count();
        let ratio = |a: usize, b: usize| if b == 0 { 1.0 } else { a as f64 / b as f64 };
        Accuracy {
            name: name.into(),
            heavy: truth.len(),
            reported: reported.len(),
            true_positives: tp,
            recall: ratio(tp, truth.len()),
            precision: ratio(tp, reported.len()),
        }
    }
}

/// Recall and precision of both detectors on the Zipf trace.
pub fn accuracy() -> Vec<Accuracy> {
    let keys = Keys::of(&Trace::zipf64());
    accuracy_on(&keys)
}

fn accuracy_on(keys: &Keys) -> Vec<Accuracy> {
    let truth: HashSet<[u32; 10]> = keys.heavy_truth().iter().map(|k| k.words10()).collect();
    let ours: Vec<[u32; 10]> = detect_ours(keys).iter().map(|k| k.words10()).collect();
    vec![
        Accuracy::of("heavy/zipf/bloomplane", &truth, &ours),
        Accuracy::of("heavy/zipf/heavykeeper", &truth, &detect_heavykeeper(keys)),
    ]
}

/// Registers `pipeline/heavy/{zipf64,tls2}` and `heavy/zipf/{bloomplane,heavykeeper}`.
pub fn register(c: &mut Criterion) {
    let zipf = Trace::zipf64();
    let tls2 = Trace::tls2();
    let mut batch = Batch::new();

    let mut g = c.benchmark_group("pipeline/heavy");
    g.sample_size(10);
    g.throughput(Throughput::Elements(zipf.len() as u64));
    g.bench_function("zipf64", |b| {
        b.iter(|| replay(black_box(&zipf), &mut batch))
    });
    if let Some(t) = &tls2 {
        g.throughput(Throughput::Elements(t.len() as u64));
        g.bench_function("tls2", |b| b.iter(|| replay(black_box(t), &mut batch)));
    }
    g.finish();

    let keys = Keys::of(&zipf);
    let mut g = c.benchmark_group("heavy/zipf");
    g.sample_size(10);
    g.throughput(Throughput::Elements(keys.len() as u64));
    g.bench_function("bloomplane", |b| {
        b.iter(|| detect_ours(black_box(&keys)).len())
    });
    g.bench_function("heavykeeper", |b| {
        b.iter(|| detect_heavykeeper(black_box(&keys)).len())
    });
    g.finish();
}

/// The headline figures for the report binary.
pub fn report() -> Vec<Figure> {
    let zipf = Trace::zipf64();
    let mut batch = Batch::new();
    let mut figs = vec![figure("pipeline/heavy/zipf64", zipf.len(), || {
        replay(black_box(&zipf), &mut batch)
    })];
    if let Some(t) = Trace::tls2() {
        figs.push(figure("pipeline/heavy/tls2", t.len(), || {
            replay(black_box(&t), &mut batch)
        }));
    }
    let keys = Keys::of(&zipf);
    figs.push(figure("heavy/zipf/bloomplane", keys.len(), || {
        detect_ours(black_box(&keys)).len()
    }));
    figs.push(figure("heavy/zipf/heavykeeper", keys.len(), || {
        detect_heavykeeper(black_box(&keys)).len()
    }));
    figs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_forwards_every_packet_and_finds_heavy_flows() {
        let zipf = Trace::zipf64();
        let out = replay(&zipf, &mut Batch::new());
        assert_eq!(out.forwarded, ZIPF_PACKETS);
        assert_eq!(out.dropped, 0);
        let keys = Keys::of(&zipf);
        assert_eq!(keys.len(), ZIPF_PACKETS as usize);
        let truth = keys.heavy_truth();
        assert!(!truth.is_empty());
        // Recall 1.0 by construction (see the heavy stage's docs).
        assert!(out.heavy >= truth.len());
        let acc = accuracy_on(&keys);
        assert_eq!(acc[0].recall, 1.0);
        assert_eq!(acc[0].reported, out.heavy);
    }

    #[test]
    fn tls2_replays_when_present() {
        let Some(t) = Trace::tls2() else { return };
        let out = replay(&t, &mut Batch::new());
        assert_eq!(out.forwarded + out.dropped, t.len() as u64);
        assert!(out.heavy > 0);
    }
}
