//! Heavy-flow detection: conservative-update count-min over bytes and
//! packets per flow, a bounded memory of flows that crossed the threshold
//! (counted exactly from then on), and epochs that report and reset.
//!
//! # Per batch
//!
//! The flow keys of the batch's live IP packets are gathered and hashed
//! once each (one keyed [`HashPair`] per key), and the same pairs feed both
//! sketches in batch order (bytes = the packet's length on the wire;
//! packets = 1; [`CountMin::add_conservative_pairs`] derives each sketch's
//! rows from the pair at its own shape). Each update returns the key's
//! estimate right after it. Then, packet by packet in
//! order, the running epoch totals grow, a flow already in the flow memory
//! gets its exact counts, and any other flow whose estimate reaches the
//! threshold enters the memory with its estimates at detection.
//!
//! Both families share one sketch (per metric), but each is hashed at its
//! own width: IPv4 keys at four words ([`FlowKey::words4`]), IPv6 keys at
//! ten ([`FlowKey::words10`]); a mixed batch is hashed as two sub-batches
//! whose pairs are put back in batch order (a one-family batch is hashed
//! in one call, straight into place). One
//! shared sketch rather than one per family, because the memory budget then
//! follows whatever mix arrives instead of being split in advance (a split
//! halves the width each family gets and doubles the overestimate of the
//! family that carries the traffic). Four words rather than the IPv4-mapped
//! ten-word form for IPv4, because of measurement: the batch hash costs
//! 0.74 ns per key at four words and 1.9 ns at ten on the AVX2 backend
//! (`hash/ipv4/avx2` and `hash/ipv6/avx2` in the bench report), and most
//! traffic is IPv4. A four-word and a ten-word key are different hash inputs, so
//! sharing counters between them is ordinary count-min collision, and every
//! estimate stays an upper bound.
//!
//! # Thresholds and recall
//!
//! [`Threshold::Bytes`] and [`Threshold::Packets`] are absolute per epoch.
//! [`Threshold::ByteShare`] is a share `phi` of the epoch's total bytes
//! `N`, which is only known when the epoch ends. Detection uses the running
//! total `N_t` (bytes of every IP packet so far in the epoch, this one
//! included): a flow is detected when `estimate >= phi * N_t`. Why this gives
//! recall 1.0: the count-min estimate never falls below the true count, and
//! `N_t <= N`. A flow whose epoch total is at least `phi * N` has, at its own
//! last packet, `estimate >= true >= phi * N >= phi * N_t`, so it is in the
//! memory by then at the latest (unless the memory overflowed, which is
//! counted). Checking against the final `N` during the epoch is impossible,
//! and against a guess of it would miss flows.
//!
//! The running total admits many flows early in the epoch (when `N_t` is
//! small any flow looks large), so the report is decided at the epoch end:
//! a tracked flow is reported when an upper bound of its epoch total reaches
//! the final threshold. Two upper bounds are known and the smaller is used:
//! the estimate at detection plus the exact count since, and the sketch's
//! estimate at the end of the epoch. Both are at least the true total, so
//! no heavy flow is filtered out, and both are tight for flows detected
//! early, which keeps precision high.
//!
//! The memory is bounded by [`HeavyConfig::capacity`]. When it is full, a
//! share-threshold stage first evicts the flows whose upper bound is below
//! the current threshold `phi * N_t`. That is safe for recall: the sketch
//! keeps counting every flow, so an evicted flow re-enters with an estimate
//! covering everything it sent, and a flow that will end heavy is never
//! evictable after its last packet. If nothing can be evicted the new flow
//! is not tracked and [`HeavyCounters::overflow`] counts it.
//!
//! # Epochs
//!
//! With [`HeavyConfig::epoch_ns`] set, epochs are aligned intervals of `now`
//! (`[k L, (k + 1) L)`, so workers agree on them); the epoch is decided per
//! batch by the batch's `now`. With `None`, one epoch covers the whole input
//! and closes at [`Stage::finish`]. At the end of an epoch the heavy flows
//! are reported ([`EpochReport`]) and both sketches and the memory reset.

use std::any::Any;
use std::io::{self, Write};

use kernels::cms::CountMin;
use kernels::{HashPair, Hasher};
use serde::Serialize;

use crate::clock::Timestamp;
use crate::flow::FlowKey;
use crate::pipeline::{BATCH_SIZE, Batch, Stage};

/// When a flow is heavy, per epoch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Threshold {
    /// At least this many bytes.
    Bytes(u64),
    /// At least this many packets.
    Packets(u64),
    /// At least this share (0..=1) of the epoch's bytes.
    ByteShare(f64),
}

/// Heavy-flow stage settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HeavyConfig {
    /// The heavy-flow threshold.
    pub threshold: Threshold,
    /// Epoch length in ns of `now`; `None` for one epoch over the whole input.
    pub epoch_ns: Option<u64>,
    /// Rows of the bytes sketch.
    pub rows: usize,
    /// log2 of the bytes sketch's row width.
    pub log2_width: u32,
    /// Rows of the packets sketch.
    pub packet_rows: usize,
    /// log2 of the packets sketch's row width.
    pub packet_log2_width: u32,
    /// Most flows in the flow memory.
    pub capacity: usize,
    /// Hash seed; `None` for the per-process random key.
    pub seed: Option<u64>,
}

impl Default for HeavyConfig {
    /// 0.1% of the epoch's bytes, one epoch, a bytes sketch of 3 x 2^12
    /// counters (48 KiB) and a packets sketch of 2 x 2^11 (16 KiB), 4096
    /// tracked flows.
    fn default() -> Self {
        HeavyConfig {
            threshold: Threshold::ByteShare(0.001),
            epoch_ns: None,
            rows: 3,
            log2_width: 12,
            packet_rows: 2,
            packet_log2_width: 11,
            capacity: 4096,
            seed: None,
        }
    }
}

/// One heavy flow of one epoch, as a JSON line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HeavyReport {
    /// Epoch number (aligned epochs: `start / epoch_ns`; one epoch: 0).
    pub epoch: u64,
    /// Epoch start, ns.
    pub epoch_start_ns: u64,
    /// Epoch end, ns.
    pub epoch_end_ns: u64,
    /// The flow, e.g. `10.0.0.1:1234 -> 10.0.0.2:80 tcp`.
    pub flow: String,
    /// When the flow entered the flow memory, ns.
    pub detected_ns: u64,
    /// Sketch estimate of the flow's bytes at detection (detecting packet included).
    pub est_bytes: u64,
    /// Sketch estimate of the flow's packets at detection.
    pub est_packets: u64,
    /// Exact bytes after the detecting packet.
    pub exact_bytes: u64,
    /// Exact packets after the detecting packet.
    pub exact_packets: u64,
    /// Upper bound of the flow's bytes in the epoch.
    pub bytes_upper: u64,
    /// Upper bound of the flow's packets in the epoch.
    pub packets_upper: u64,
    /// The flow key.
    #[serde(skip)]
    pub key: FlowKey,
}

impl HeavyReport {
    /// The report as one line of JSON (no newline).
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// One closed epoch: its totals and its heavy flows, largest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EpochReport {
    /// Epoch number.
    pub epoch: u64,
    /// Start, ns.
    pub start_ns: u64,
    /// End, ns.
    pub end_ns: u64,
    /// IP bytes seen.
    pub bytes: u64,
    /// IP packets seen.
    pub packets: u64,
    /// Flows not tracked because the memory was full.
    pub overflow: u64,
    /// The heavy flows, by exact bytes then upper bound, descending.
    pub flows: Vec<HeavyReport>,
}

impl EpochReport {
    /// Writes the flows as JSON lines.
    pub fn write_json_lines(&self, w: &mut impl Write) -> io::Result<()> {
        for f in &self.flows {
            serde_json::to_writer(&mut *w, f)?;
            w.write_all(b"\n")?;
        }
        Ok(())
    }
}

/// Merges the epoch reports of several workers (each flow met only one
/// worker) into the report one worker would have written: epochs with the
/// same number are combined, totals summed, and the flows re-filtered with
/// `threshold` against the combined totals (a worker judges shares against
/// its own, smaller, total, so it may report flows that are not heavy
/// overall; it never misses one that is).
pub fn merge_epochs(shards: &[Vec<EpochReport>], threshold: Threshold) -> Vec<EpochReport> {
    let mut by_epoch: std::collections::BTreeMap<u64, EpochReport> = Default::default();
    for r in shards.iter().flatten() {
        let e = by_epoch.entry(r.epoch).or_insert_with(|| EpochReport {
            epoch: r.epoch,
            start_ns: r.start_ns,
            end_ns: r.end_ns,
            bytes: 0,
            packets: 0,
            overflow: 0,
            flows: Vec::new(),
        });
        e.start_ns = e.start_ns.min(r.start_ns);
        e.end_ns = e.end_ns.max(r.end_ns);
        e.bytes += r.bytes;
        e.packets += r.packets;
        e.overflow += r.overflow;
        e.flows.extend(r.flows.iter().cloned());
    }
    by_epoch
        .into_values()
        .map(|mut e| {
            let (start, end, bytes) = (e.start_ns, e.end_ns, e.bytes);
            e.flows
                .retain(|f| is_heavy(threshold, bytes, f.bytes_upper, f.packets_upper));
            for f in &mut e.flows {
                f.epoch_start_ns = start;
                f.epoch_end_ns = end;
            }
            sort_flows(&mut e.flows);
            e
        })
        .collect()
}

fn sort_flows(flows: &mut [HeavyReport]) {
    flows.sort_by(|a, b| {
        (b.exact_bytes + b.est_bytes, b.bytes_upper, &a.key).cmp(&(
            a.exact_bytes + a.est_bytes,
            a.bytes_upper,
            &b.key,
        ))
    });
}

/// A flow's estimate in `cms`, at the width its family is hashed with.
fn estimate(cms: &CountMin, key: &FlowKey) -> u64 {
    u64::from(match key {
        FlowKey::V4(k) => cms.estimate(&k.words4()),
        FlowKey::V6(k) => cms.estimate(&k.words10()),
    })
}

#[inline]
fn is_heavy(t: Threshold, total_bytes: u64, bytes: u64, packets: u64) -> bool {
    match t {
        Threshold::Bytes(b) => bytes >= b,
        Threshold::Packets(p) => packets >= p,
        Threshold::ByteShare(phi) => bytes as f64 >= phi * total_bytes as f64,
    }
}

/// The stage's counters (whole run, all epochs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct HeavyCounters {
    /// IP packets counted.
    pub packets: u64,
    /// IP bytes counted.
    pub bytes: u64,
    /// Live packets without a flow key (non-IP, malformed and passed).
    pub skipped: u64,
    /// Flows that entered the memory.
    pub detections: u64,
    /// Flows evicted from the memory below the running threshold.
    pub evictions: u64,
    /// Flows that crossed the threshold while the memory was full.
    pub overflow: u64,
    /// Epochs closed.
    pub epochs: u64,
    /// Heavy flows reported.
    pub reported: u64,
}

#[derive(Debug, Clone, Copy)]
struct Tracked {
    detected_ns: u64,
    est_bytes: u64,
    est_packets: u64,
    bytes: u64,
    packets: u64,
}

impl Tracked {
    fn bytes_upper(&self) -> u64 {
        self.est_bytes.saturating_add(self.bytes)
    }
    fn packets_upper(&self) -> u64 {
        self.est_packets.saturating_add(self.packets)
    }
}

/// A flow as the flow memory hashes and compares it: five words built from
/// the words the sketches hash ([`FlowKey::words4`] / `words10`), so the
/// memory costs the gather loop a few shifts rather than a second walk of
/// the key. IPv4: `[src:dst, ports:proto, 0, 0, 0]`; IPv6: `[src (2),
/// dst (2), ports:proto | 1 << 48]`. Every field is in the words and the
/// last word tells the families apart, so two keys are equal exactly when
/// the flows are.
type MemKey = [u64; 5];

/// Bit set in the last word of every IPv6 [`MemKey`] (never in an IPv4 one).
const V6_TAG: u64 = 1 << 48;

#[inline]
fn pair(hi: u32, lo: u32) -> u64 {
    (u64::from(hi) << 32) | u64::from(lo)
}

#[inline]
fn mem_key4(w: &[u32; 4]) -> MemKey {
    [
        pair(w[0], w[1]),
        (u64::from(w[2]) << 8) | u64::from(w[3]),
        0,
        0,
        0,
    ]
}

#[inline]
fn mem_key10(w: &[u32; 10]) -> MemKey {
    [
        pair(w[0], w[1]),
        pair(w[2], w[3]),
        pair(w[4], w[5]),
        pair(w[6], w[7]),
        (u64::from(w[8]) << 8) | u64::from(w[9]) | V6_TAG,
    ]
}

/// Whether two [`MemKey`]s are equal: word by word without branches (a
/// plain `==` on the array is a call to `memcmp`, once per packet).
#[inline(always)]
fn same_key(a: &MemKey, b: &MemKey) -> bool {
    a.iter().zip(b).fold(0, |d, (x, y)| d | (x ^ y)) == 0
}

/// Where a key's probe sequence starts in the flow memory's index: bits of
/// the key's keyed [`HashPair`], which the sketches need anyway (so the
/// memory costs no hashing of its own, and flows cannot be aimed at one
/// probe sequence without the hasher's key). Both halves are mixed in: the
/// sketches index by the top bits of `h1 + r * (h2 | 1)`.
#[inline(always)]
fn mem_hash(p: HashPair) -> u32 {
    p.h1.rotate_left(13) ^ p.h2
}

/// The flow memory: tracked flows in a dense vector, found through an
/// open-addressing index (linear probing, at most half full) of entry
/// numbers.
///
/// It is probed once per packet, so it is built for that: the probe starts
/// at the key's [`mem_hash`], a miss usually reads one `u32` slot, and a
/// hit one slot and one key. Entries are only removed by
/// [`retain`](Self::retain) (the eviction sweep) and
/// [`clear`](Self::clear), which rebuild the index from the stored hashes,
/// so it needs no tombstones.
#[derive(Debug)]
struct FlowMemory {
    keys: Vec<MemKey>,
    /// Per entry (same order as `keys`): its [`mem_hash`].
    hashes: Vec<u32>,
    /// Per entry (same order as `keys`): the flow and its counts.
    entries: Vec<(FlowKey, Tracked)>,
    /// Per slot: entry number + 1, or 0 when empty.
    index: Vec<u32>,
    mask: usize,
}

impl FlowMemory {
    fn with_capacity(capacity: usize) -> Self {
        let slots = capacity.saturating_mul(2).max(2).next_power_of_two();
        FlowMemory {
            keys: Vec::with_capacity(capacity),
            hashes: Vec::with_capacity(capacity),
            entries: Vec::with_capacity(capacity),
            index: vec![0; slots],
            mask: slots - 1,
        }
    }

    #[inline]
    fn len(&self) -> usize {
        self.keys.len()
    }

    /// The counts of `key` (whose [`mem_hash`] is `hash`), if tracked.
    #[inline(always)]
    fn get_mut(&mut self, key: &MemKey, hash: u32) -> Option<&mut Tracked> {
        let mut slot = hash as usize & self.mask;
        loop {
            let e = self.index[slot] as usize;
            if e == 0 {
                return None;
            }
            if same_key(&self.keys[e - 1], key) {
                return Some(&mut self.entries[e - 1].1);
            }
            slot = (slot + 1) & self.mask;
        }
    }

    /// Adds a flow that is not tracked (the caller keeps `len() < capacity`).
    fn insert(&mut self, key: MemKey, hash: u32, flow: FlowKey, t: Tracked) {
        self.keys.push(key);
        self.hashes.push(hash);
        self.entries.push((flow, t));
        self.place(hash, self.keys.len() as u32);
    }

    fn place(&mut self, hash: u32, n: u32) {
        let mut slot = hash as usize & self.mask;
        while self.index[slot] != 0 {
            slot = (slot + 1) & self.mask;
        }
        self.index[slot] = n;
    }

    /// Keeps the entries `keep` accepts, then rebuilds the index.
    fn retain(&mut self, mut keep: impl FnMut(&Tracked) -> bool) {
        let mut kept = 0;
        for i in 0..self.keys.len() {
            if keep(&self.entries[i].1) {
                self.keys.swap(kept, i);
                self.hashes.swap(kept, i);
                self.entries.swap(kept, i);
                kept += 1;
            }
        }
        self.keys.truncate(kept);
        self.hashes.truncate(kept);
        self.entries.truncate(kept);
        self.index.fill(0);
        for i in 0..kept {
            self.place(self.hashes[i], i as u32 + 1);
        }
    }

    fn clear(&mut self) {
        self.keys.clear();
        self.hashes.clear();
        self.entries.clear();
        self.index.fill(0);
    }

    fn iter(&self) -> impl Iterator<Item = &(FlowKey, Tracked)> {
        self.entries.iter()
    }
}

/// The heavy-flow stage.
#[derive(Debug)]
pub struct HeavyStage {
    config: HeavyConfig,
    bytes: CountMin,
    packets: CountMin,
    memory: FlowMemory,
    counters: HeavyCounters,
    /// Current epoch: number, start, totals, overflow.
    epoch: Option<(u64, u64)>,
    epoch_bytes: u64,
    epoch_packets: u64,
    epoch_overflow: u64,
    /// Running total at the last sweep that could not free enough room.
    sweep_blocked_at: u64,
    /// The key of both sketches (they are built from one [`Hasher`], so
    /// one hash pair per key serves both).
    hasher: Hasher,
    /// Reused per-batch buffers.
    keys4: [[u32; 4]; BATCH_SIZE],
    keys10: [[u32; 10]; BATCH_SIZE],
    /// Position in the batch's flow order of each IPv4 / IPv6 key.
    at4: [u8; BATCH_SIZE],
    at10: [u8; BATCH_SIZE],
    /// Per flow in batch order: the hash pair of its key.
    pairs: [HashPair; BATCH_SIZE],
    /// One family's pairs before they are scattered into `pairs`.
    family_pairs: [HashPair; BATCH_SIZE],
    /// Per flow in batch order: its flow-memory key and its packet's place
    /// in the batch.
    mem_keys: [MemKey; BATCH_SIZE],
    slots: [u8; BATCH_SIZE],
    lens: [u32; BATCH_SIZE],
    ones: [u32; BATCH_SIZE],
    est_bytes: [u32; BATCH_SIZE],
    est_packets: [u32; BATCH_SIZE],
    reports: Vec<EpochReport>,
}

impl HeavyStage {
    /// A stage with `config`.
    ///
    /// # Panics
    /// If the sketch shape is out of [`CountMin`]'s range.
    pub fn new(config: HeavyConfig) -> Self {
        let hasher = config.seed.map_or_else(Hasher::new, Hasher::with_seed);
        let bytes = CountMin::with_hasher(config.rows, config.log2_width, hasher.clone());
        let packets =
            CountMin::with_hasher(config.packet_rows, config.packet_log2_width, hasher.clone());
        HeavyStage {
            config,
            bytes,
            packets,
            hasher,
            memory: FlowMemory::with_capacity(config.capacity),
            counters: HeavyCounters::default(),
            epoch: None,
            epoch_bytes: 0,
            epoch_packets: 0,
            epoch_overflow: 0,
            sweep_blocked_at: 0,
            keys4: [[0; 4]; BATCH_SIZE],
            keys10: [[0; 10]; BATCH_SIZE],
            at4: [0; BATCH_SIZE],
            at10: [0; BATCH_SIZE],
            pairs: [HashPair::default(); BATCH_SIZE],
            family_pairs: [HashPair::default(); BATCH_SIZE],
            mem_keys: [[0; 5]; BATCH_SIZE],
            slots: [0; BATCH_SIZE],
            lens: [0; BATCH_SIZE],
            ones: [1; BATCH_SIZE],
            est_bytes: [0; BATCH_SIZE],
            est_packets: [0; BATCH_SIZE],
            reports: Vec::new(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &HeavyConfig {
        &self.config
    }

    /// The counters.
    pub fn counters(&self) -> &HeavyCounters {
        &self.counters
    }

    /// Bytes of sketch memory (both sketches).
    pub fn sketch_bytes(&self) -> usize {
        self.bytes.memory_bytes() + self.packets.memory_bytes()
    }

    /// Flows in the memory now.
    pub fn tracked(&self) -> usize {
        self.memory.len()
    }

    /// The reports of the epochs closed so far (taken: a second call
    /// returns only newer ones).
    pub fn take_reports(&mut self) -> Vec<EpochReport> {
        std::mem::take(&mut self.reports)
    }

    fn threshold_now(&self) -> Option<u64> {
        match self.config.threshold {
            Threshold::Bytes(_) | Threshold::Packets(_) => None,
            Threshold::ByteShare(phi) => Some((phi * self.epoch_bytes as f64).ceil() as u64),
        }
    }

    /// Room for one more flow: evicts flows below the running share
    /// threshold when full. `false` when nothing could be evicted.
    fn make_room(&mut self) -> bool {
        if self.memory.len() < self.config.capacity {
            return true;
        }
        let Some(floor) = self.threshold_now() else {
            return false;
        };
        // Sweep again only once the total has grown by 1/8 since a sweep
        // that freed too little, so a full memory costs O(1) per packet.
        if self.sweep_blocked_at != 0
            && self.epoch_bytes < self.sweep_blocked_at + self.sweep_blocked_at / 8
        {
            return false;
        }
        let before = self.memory.len();
        self.memory.retain(|t| t.bytes_upper() >= floor);
        let freed = before - self.memory.len();
        self.counters.evictions += freed as u64;
        if freed < self.config.capacity / 8 {
            self.sweep_blocked_at = self.epoch_bytes.max(1);
        } else {
            self.sweep_blocked_at = 0;
        }
        self.memory.len() < self.config.capacity
    }

    fn epoch_of(&self, now: Timestamp) -> (u64, u64) {
        match self.config.epoch_ns {
            Some(l) if l > 0 => {
                let k = now.as_nanos() / l;
                (k, k * l)
            }
            _ => (0, now.as_nanos()),
        }
    }

    /// Closes the current epoch at `end_ns`: reports, then resets.
    fn close_epoch(&mut self, end_ns: u64) {
        let Some((epoch, start_ns)) = self.epoch.take() else {
            return;
        };
        let total = self.epoch_bytes;
        let threshold = self.config.threshold;
        let mut flows = Vec::new();
        for (key, t) in self.memory.iter() {
            let bytes_upper = t.bytes_upper().min(estimate(&self.bytes, key));
            let packets_upper = t.packets_upper().min(estimate(&self.packets, key));
            if is_heavy(threshold, total, bytes_upper, packets_upper) {
                flows.push(HeavyReport {
                    epoch,
                    epoch_start_ns: start_ns,
                    epoch_end_ns: end_ns,
                    flow: key.to_string(),
                    detected_ns: t.detected_ns,
                    est_bytes: t.est_bytes,
                    est_packets: t.est_packets,
                    exact_bytes: t.bytes,
                    exact_packets: t.packets,
                    bytes_upper,
                    packets_upper,
                    key: *key,
                });
            }
        }
        sort_flows(&mut flows);
        self.counters.epochs += 1;
        self.counters.reported += flows.len() as u64;
        self.reports.push(EpochReport {
            epoch,
            start_ns,
            end_ns,
            bytes: total,
            packets: self.epoch_packets,
            overflow: self.epoch_overflow,
            flows,
        });
        self.bytes.reset();
        self.packets.reset();
        self.memory.clear();
        self.epoch_bytes = 0;
        self.epoch_packets = 0;
        self.epoch_overflow = 0;
        self.sweep_blocked_at = 0;
    }
}

impl Stage for HeavyStage {
    fn name(&self) -> &'static str {
        "heavy"
    }

    fn process(&mut self, batch: &mut Batch, now: Timestamp) {
        // Epoch bookkeeping, by the batch's `now`.
        let (k, start) = self.epoch_of(now);
        match (self.epoch, self.config.epoch_ns) {
            (None, None) => {
                // One epoch: it starts with the earliest packet seen.
                let first = batch.packets().iter().map(|p| p.ts).min().unwrap_or(now);
                self.epoch = Some((0, first.min(now).as_nanos()));
            }
            (None, Some(_)) => self.epoch = Some((k, start)),
            (Some((cur, _)), Some(l)) if k > cur => {
                self.close_epoch(cur.saturating_add(1).saturating_mul(l));
                self.epoch = Some((k, start));
            }
            _ => {}
        }

        // Gather the flow keys of the live IP packets, per family.
        let (mut n, mut n4, mut n10) = (0, 0, 0);
        let mut skipped = 0u64;
        for (i, p) in batch.packets().iter().enumerate() {
            if !p.is_live() {
                continue;
            }
            // By reference: a `Parsed` is over a hundred bytes.
            let Some(f) = p.parsed.as_ref().and_then(|pp| pp.flow.as_ref()) else {
                skipped += 1;
                continue;
            };
            let len = p.orig_len.max(p.data().len() as u32);
            match f {
                FlowKey::V4(k) => {
                    let w = k.words4();
                    self.mem_keys[n] = mem_key4(&w);
                    self.keys4[n4] = w;
                    self.at4[n4] = n as u8;
                    n4 += 1;
                }
                FlowKey::V6(k) => {
                    let w = k.words10();
                    self.mem_keys[n] = mem_key10(&w);
                    self.keys10[n10] = w;
                    self.at10[n10] = n as u8;
                    n10 += 1;
                }
            }
            // `i < BATCH_SIZE = 32`.
            self.slots[n] = i as u8;
            self.lens[n] = len;
            n += 1;
        }
        self.counters.skipped += skipped;
        // `n <= BATCH_SIZE` (one flow per packet); saying so lets the
        // compiler drop the bounds checks on the per-batch arrays below.
        let n = n.min(BATCH_SIZE);
        if n == 0 {
            return;
        }

        // One hash per key, in batch order: a single-family batch hashes
        // straight into place, a mixed one per family and then scatters.
        let pairs = &mut self.pairs[..n];
        if n10 == 0 {
            self.hasher.hash_batch(&self.keys4[..n4], pairs);
        } else if n4 == 0 {
            self.hasher.hash_batch(&self.keys10[..n10], pairs);
        } else {
            let tmp = &mut self.family_pairs;
            self.hasher.hash_batch(&self.keys4[..n4], &mut tmp[..n4]);
            for (&at, &h) in self.at4[..n4].iter().zip(&tmp[..n4]) {
                pairs[usize::from(at)] = h;
            }
            self.hasher.hash_batch(&self.keys10[..n10], &mut tmp[..n10]);
            for (&at, &h) in self.at10[..n10].iter().zip(&tmp[..n10]) {
                pairs[usize::from(at)] = h;
            }
        }
        // Both sketches from the same pairs (they share the hasher's key).
        let est = self.bytes.add_conservative_pairs(pairs, &self.lens[..n]);
        self.est_bytes[..n].copy_from_slice(est);
        let est = self.packets.add_conservative_pairs(pairs, &self.ones[..n]);
        self.est_packets[..n].copy_from_slice(est);

        // Packet by packet, in order: only the running byte total is read
        // per packet; the packet totals are added once per batch.
        let threshold = self.config.threshold;
        self.epoch_packets += n as u64;
        self.counters.packets += n as u64;
        for j in 0..n {
            let len = u64::from(self.lens[j]);
            self.epoch_bytes += len;
            self.counters.bytes += len;
            let hash = mem_hash(self.pairs[j]);
            if let Some(t) = self.memory.get_mut(&self.mem_keys[j], hash) {
                t.bytes += len;
                t.packets += 1;
                continue;
            }
            let (eb, ep) = (u64::from(self.est_bytes[j]), u64::from(self.est_packets[j]));
            if !is_heavy(threshold, self.epoch_bytes, eb, ep) {
                continue;
            }
            // The gather loop took this packet's key from it.
            let Some(flow) = batch.packets()[usize::from(self.slots[j])]
                .parsed
                .as_ref()
                .and_then(|pp| pp.flow)
            else {
                continue;
            };
            if self.make_room() {
                self.memory.insert(
                    self.mem_keys[j],
                    hash,
                    flow,
                    Tracked {
                        detected_ns: now.as_nanos(),
                        est_bytes: eb,
                        est_packets: ep,
                        bytes: 0,
                        packets: 0,
                    },
                );
                self.counters.detections += 1;
            } else {
                self.counters.overflow += 1;
                self.epoch_overflow += 1;
            }
        }
    }

    fn finish(&mut self, now: Timestamp) {
        let end = match (self.epoch, self.config.epoch_ns) {
            (Some((k, _)), Some(l)) if l > 0 => k.saturating_add(1).saturating_mul(l),
            _ => now.as_nanos(),
        };
        self.close_epoch(end);
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
