//! Heavy-flow detection: conservative-update count-min over bytes and
//! packets per flow, a bounded memory of flows that crossed the threshold
//! (counted exactly from then on), and epochs that report and reset.
//!
//! # Per batch
//!
//! The flow keys of the batch's live IP packets are gathered and hashed
//! once each (one keyed [`HashPair`] per key), the flow memory's index
//! slots for all of them are prefetched, and then, packet by packet in
//! order:
//!
//! 1. the flow memory is probed with bits of the pair; a tracked flow gets
//!    the packet's bytes and packet counted exactly, and its packet goes
//!    no further (*shielding*, below);
//! 2. any other packet updates the sketch
//!    ([`DualCountMin::add_conservative_pair`]: one cell per row holds the
//!    flow's bytes and packets counters, so an update touches one cache
//!    line per row), which returns its estimates right after its update;
//! 3. an estimate that reaches the threshold (against the running byte
//!    total up to and including the packet) brings the flow into the
//!    memory with its estimates at detection.
//!
//! # Shielding
//!
//! As in Estan and Varghese's multistage filters ("New directions in
//! traffic measurement and accounting", 2002), the packets of a flow that
//! is already tracked do not go into the sketch. Heavy flows carry most of
//! the traffic, so the sketch then holds mostly small flows and the
//! packets of heavy flows before their detection: collisions with a heavy
//! flow no longer lift a small flow's estimate over the threshold. This
//! is what keeps precision at 1.0 with two rows (measured: without
//! shielding, 2 x 2^12 cells reported 3 false heavy flows out of 94 on the
//! 10^6-packet Zipf stream of `tests/heavy_accuracy.rs`, each a small flow
//! whose two cells both held a heavy flow's count; with it, none), and it
//! spares most packets the sketch update. The price is bookkeeping on
//! eviction: an evicted flow's exact counts since detection are added back
//! into the sketch (conservative update), so that the sketch's estimate of
//! every untracked flow stays an upper bound of its total in the epoch.
//!
//! Both families share one sketch, but each is hashed at its
//! own width: IPv4 keys at four words ([`FlowKey::words4`]), IPv6 keys at
//! ten ([`FlowKey::words10`]); a mixed batch is hashed as two sub-batches
//! whose pairs are put back in batch order (a one-family batch is hashed
//! in one call, straight into place). One
//! shared sketch rather than one per family, because the memory budget then
//! follows whatever mix arrives instead of being split in advance (a split
//! halves the width each family gets and doubles the overestimate of the
//! family that carries the traffic). Four words rather than the IPv4-mapped
//! ten-word form for IPv4, because the batch hash costs more than twice as
//! much per key at ten words as at four (`hash/ipv4/*` against
//! `hash/ipv6/*` in the bench report: one AES round per 16-byte block), and
//! most traffic is IPv4. A four-word and a ten-word key are different hash inputs, so
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
//! a tracked flow is reported when an upper bound of its epoch total, the
//! estimate at detection plus the exact count since, reaches the final
//! threshold. The bound is at least the true total, so no heavy flow is
//! filtered out, and it is tight for flows detected early, which keeps
//! precision high. (With shielding the sketch's own final estimate of a
//! tracked flow misses its packets since detection, so it is not a bound.)
//!
//! The memory is bounded by [`HeavyConfig::capacity`]. When it is full, a
//! share-threshold stage evicts flows whose bound is below the current
//! threshold `phi * N_t`, the smallest bounds first and at most a quarter
//! of the memory per sweep, so a flow near the threshold keeps its exact
//! count while smaller ones can make room. Eviction is safe for recall:
//! the evicted flow's counts go back into the sketch, so it re-enters with
//! an estimate covering everything it sent, and a flow that will end heavy
//! is never evictable after its last packet. If nothing can be evicted the
//! new flow is not tracked and [`HeavyCounters::overflow`] counts it.
//!
//! # Epochs
//!
//! With [`HeavyConfig::epoch_ns`] set, epochs are aligned intervals of `now`
//! (`[k L, (k + 1) L)`, so workers agree on them); the epoch is decided per
//! batch by the batch's `now`. With `None`, one epoch covers the whole input
//! and closes at [`Stage::finish`]. At the end of an epoch the heavy flows
//! are reported ([`EpochReport`]) and the sketch and the memory reset.

use std::any::Any;
use std::borrow::Borrow;
use std::io::{self, Write};

use kernels::cms::DualCountMin;
use kernels::{HashPair, Hasher};
use serde::Serialize;

use crate::clock::Timestamp;
use crate::flow::{Flow4, FlowKey};
use crate::wire::IpProtocol;

/// Filler for the per-batch flow buffer.
const NO_FLOW: FlowKey = FlowKey::V4(Flow4 {
    src: std::net::Ipv4Addr::UNSPECIFIED,
    dst: std::net::Ipv4Addr::UNSPECIFIED,
    src_port: 0,
    dst_port: 0,
    protocol: IpProtocol::HopByHop,
});
use crate::packet::{BATCH_SIZE, Batch};
use crate::pipeline::Stage;

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
    /// Rows of the sketch.
    pub rows: usize,
    /// log2 of the sketch's row width (cells of a bytes and a packets
    /// counter, 8 bytes each).
    pub log2_width: u32,
    /// Most flows in the flow memory.
    pub capacity: usize,
    /// Hash seed; `None` for the per-process random key.
    pub seed: Option<u64>,
}

/// The narrowest row a share threshold gets by default, in cells per
/// share: `phi * width >= 64` (see [`HeavyConfig::default_log2_width`]).
pub const CELLS_PER_SHARE: f64 = 64.0;

/// Bounds of the default row width (2^10..=2^18 cells: 16 KiB to 4 MiB
/// over two rows).
pub const DEFAULT_LOG2_WIDTH_RANGE: std::ops::RangeInclusive<u32> = 10..=18;

impl HeavyConfig {
    /// The row width a threshold gets when the configuration leaves it
    /// out: for a share `phi`, the smallest power of two with
    /// `phi * width >= 64` (0.1%: 2^16 cells, 1 MiB over two rows; 1%:
    /// 2^13, 128 KiB), within [`DEFAULT_LOG2_WIDTH_RANGE`]; for an
    /// absolute threshold, whose share of the traffic is unknown, 2^12.
    ///
    /// Why 64: a reported flow's bound is its true count plus the
    /// collisions its cells held when it was detected, about the sketch's
    /// bytes over the width, so the bound's error relative to the
    /// threshold falls as `1 / (phi * width)`. A flow that starts late in
    /// an epoch is detected against a sketch that holds most of the epoch,
    /// and near-threshold flows then cross on collisions alone. Measured on
    /// six staggered Pareto traces (`sketch_shape_sweep` in
    /// `tests/heavy_accuracy.rs`, 30,000 flows, about 80 heavy at 0.1%):
    /// at `phi * width` = 8 to 33, precision 0.979 to 1.0 (four of six
    /// below 0.99); at 66, 1.0 on all six; recall 1.0 throughout.
    pub fn default_log2_width(threshold: Threshold) -> u32 {
        let (lo, hi) = (
            *DEFAULT_LOG2_WIDTH_RANGE.start(),
            *DEFAULT_LOG2_WIDTH_RANGE.end(),
        );
        match threshold {
            Threshold::ByteShare(phi) if phi > 0.0 && phi.is_finite() => {
                let cells = (CELLS_PER_SHARE / phi).ceil().min(f64::from(1u32 << hi));
                (cells as u32)
                    .next_power_of_two()
                    .trailing_zeros()
                    .clamp(lo, hi)
            }
            _ => 12,
        }
    }
}

impl Default for HeavyConfig {
    /// 0.1% of the epoch's bytes, one epoch, a sketch of 2 x 2^16 cells
    /// of (bytes, packets) counters (1 MiB, see
    /// [`HeavyConfig::default_log2_width`]), 4096 tracked flows.
    fn default() -> Self {
        let threshold = Threshold::ByteShare(0.001);
        HeavyConfig {
            threshold,
            epoch_ns: None,
            rows: 2,
            log2_width: HeavyConfig::default_log2_width(threshold),
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
    /// The flow, e.g. `10.0.0.1:1234 -> 10.0.0.2:80 tcp`, for people.
    pub flow: String,
    /// The flow's fields, for programs.
    #[serde(flatten)]
    pub fields: FlowFields,
    /// The outermost VLAN id of the packet that made the flow heavy
    /// (`None`: untagged). Flows are keyed by their 5-tuple: one seen on
    /// two VLANs is one flow.
    pub vlan: Option<u16>,
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

/// A flow key's fields as a report's JSON gives them: `src`, `dst`,
/// `proto` (the IANA protocol number), `sport` and `dport` for protocols
/// with ports (null otherwise, and for a non-first fragment, which
/// carries none), `icmp_type` and `icmp_code` for ICMP and ICMPv6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FlowFields {
    /// Source address.
    pub src: std::net::IpAddr,
    /// Destination address.
    pub dst: std::net::IpAddr,
    /// Source port.
    pub sport: Option<u16>,
    /// Destination port.
    pub dport: Option<u16>,
    /// IP protocol number (6 TCP, 17 UDP, 1 ICMP, 58 ICMPv6, ...).
    pub proto: u8,
    /// ICMP type.
    pub icmp_type: Option<u8>,
    /// ICMP code.
    pub icmp_code: Option<u8>,
}

impl FlowFields {
    /// The fields of `key` (see the type's docs).
    pub fn of(key: &FlowKey) -> Self {
        use crate::wire::IpProtocol;
        let (src, dst, sport, dport, protocol) = match key {
            FlowKey::V4(k) => (
                k.src.into(),
                k.dst.into(),
                k.src_port,
                k.dst_port,
                k.protocol,
            ),
            FlowKey::V6(k) => (
                k.src.into(),
                k.dst.into(),
                k.src_port,
                k.dst_port,
                k.protocol,
            ),
        };
        let icmp = matches!(protocol, IpProtocol::Icmp | IpProtocol::Icmpv6);
        let ports = !icmp && (sport != 0 || dport != 0);
        // An ICMP key holds type and code in its destination port.
        let [t, c] = dport.to_be_bytes();
        FlowFields {
            src,
            dst,
            sport: ports.then_some(sport),
            dport: ports.then_some(dport),
            proto: u8::from(protocol),
            icmp_type: icmp.then_some(t),
            icmp_code: icmp.then_some(c),
        }
    }
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
    /// Heavy flows not listed: the reports held reached
    /// [`MAX_PENDING_FLOWS`] (the smallest left out; absent when 0).
    #[serde(skip_serializing_if = "is_zero", default)]
    pub omitted: u64,
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
/// worker): epochs with the same number are combined, totals summed, and
/// the flows re-filtered with `threshold` against the combined totals (a
/// worker judges shares against its own, smaller, total, so it may report
/// flows that are not heavy overall; it never misses one that is). Totals
/// equal one worker's exactly; the flows keep recall 1.0, but a false
/// positive (a bound lifted over the threshold by collisions) depends on
/// the sketch a flow met, so the set equals one worker's only where
/// neither has one.
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
            omitted: 0,
            flows: Vec::new(),
        });
        e.start_ns = e.start_ns.min(r.start_ns);
        e.end_ns = e.end_ns.max(r.end_ns);
        e.bytes += r.bytes;
        e.packets += r.packets;
        e.overflow += r.overflow;
        e.omitted += r.omitted;
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

/// `x` as a counter value (saturated).
fn sat32(x: u64) -> u32 {
    u32::try_from(x).unwrap_or(u32::MAX)
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
    /// Epochs closed (each with its report). One worker closes the epochs
    /// its own packets and ticks saw; a merged report (a replay's, the
    /// live router's final one) counts the epochs of its merged report,
    /// one per epoch any worker closed, as its JSON lists them.
    pub epochs: u64,
    /// Heavy flows reported (merged: in the merged report).
    pub reported: u64,
    /// Heavy flows not listed because the reports not yet taken held
    /// [`MAX_PENDING_FLOWS`] already (absent when 0).
    #[serde(skip_serializing_if = "is_zero")]
    pub omitted: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The most heavy-flow reports a stage holds until they are taken
/// ([`HeavyStage::take_reports`]): the flows of later epochs are counted
/// (`omitted`, in the epoch's report and the counters) but not listed.
/// The live router takes the reports every tick; a replay takes them at
/// its end, and a threshold or epoch that makes most flows heavy in many
/// epochs would otherwise grow the report (and the memory) with the
/// capture.
pub const MAX_PENDING_FLOWS: usize = 100_000;

impl HeavyCounters {
    /// Adds another worker's counters (epochs: the larger, a lower bound
    /// until the owner sets the merged report's count; likewise
    /// `reported`).
    pub fn merge(&mut self, o: &HeavyCounters) {
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.skipped += o.skipped;
        self.detections += o.detections;
        self.evictions += o.evictions;
        self.overflow += o.overflow;
        self.epochs = self.epochs.max(o.epochs);
        self.reported += o.reported;
        self.omitted += o.omitted;
    }
}

#[derive(Debug, Clone, Copy)]
struct Tracked {
    vlan: Option<u16>,
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

/// A tracked flow's exact counts since detection, next to its key: a hit
/// in the flow memory reads and writes this one entry (56 bytes).
#[derive(Debug, Clone, Copy)]
struct Hot {
    key: MemKey,
    bytes: u64,
    packets: u64,
}

/// What the flow memory keeps of a tracked flow besides its counts (read
/// at eviction sweeps and at the epoch end only).
#[derive(Debug, Clone, Copy)]
struct Cold {
    flow: FlowKey,
    hash: u32,
    /// The detecting packet's outer VLAN.
    vlan: Option<u16>,
    detected_ns: u64,
    est_bytes: u64,
    est_packets: u64,
}

impl Cold {
    fn tracked(&self, h: &Hot) -> Tracked {
        Tracked {
            vlan: self.vlan,
            detected_ns: self.detected_ns,
            est_bytes: self.est_bytes,
            est_packets: self.est_packets,
            bytes: h.bytes,
            packets: h.packets,
        }
    }
}

/// The flow memory: tracked flows in dense vectors, found through an
/// open-addressing index (linear probing, at most half full).
///
/// It is probed once per packet, so it is built for that: an index slot
/// holds the entry's [`mem_hash`] beside its entry number, so a probe
/// compares keys only when the 32-bit hashes agree; a miss usually reads
/// one slot, a hit one slot and one [`Hot`] entry (key and counts
/// together). Entries are only removed by [`retain`](Self::retain) (the
/// eviction sweep) and [`clear`](Self::clear), which rebuild the index from
/// the stored hashes, so it needs no tombstones.
#[derive(Debug)]
struct FlowMemory {
    /// Tracked flows are entries `1..` (entry 0 is a placeholder, so
    /// that an index slot's entry number is never 0).
    hot: Vec<Hot>,
    /// Same numbering as `hot` (entry 0 unused).
    cold: Vec<Cold>,
    /// Per slot: `mem_hash << 32 | entry number`, or 0 when empty.
    index: Vec<u64>,
    mask: usize,
}

const PLACEHOLDER: Hot = Hot {
    key: [0; 5],
    bytes: 0,
    packets: 0,
};

const NO_COLD: Cold = Cold {
    flow: NO_FLOW,
    hash: 0,
    vlan: None,
    detected_ns: 0,
    est_bytes: 0,
    est_packets: 0,
};

impl FlowMemory {
    fn with_capacity(capacity: usize) -> Self {
        let slots = capacity.saturating_mul(2).max(2).next_power_of_two();
        let mut hot = Vec::with_capacity(capacity + 1);
        hot.push(PLACEHOLDER);
        let mut cold = Vec::with_capacity(capacity + 1);
        cold.push(NO_COLD);
        FlowMemory {
            hot,
            cold,
            index: vec![0; slots],
            mask: slots - 1,
        }
    }

    #[inline]
    fn len(&self) -> usize {
        self.hot.len() - 1
    }

    /// Hints the CPU to fetch the first index slot of `hash`.
    #[inline(always)]
    fn prefetch(&self, hash: u32) {
        kernels::prefetch(&self.index, hash as usize & self.mask);
    }

    /// The entry number of `key` (whose [`mem_hash`] is `hash`), 0 when
    /// it is not tracked.
    #[inline(always)]
    fn find(&self, key: &MemKey, hash: u32) -> usize {
        let mut slot = hash as usize & self.mask;
        loop {
            let s = self.index[slot];
            if s == 0 {
                return 0;
            }
            let e = s as u32 as usize;
            if (s >> 32) as u32 == hash && self.hot.get(e).is_some_and(|h| same_key(&h.key, key)) {
                return e;
            }
            slot = (slot + 1) & self.mask;
        }
    }

    /// Adds a packet of `len` bytes to entry `e`.
    #[inline(always)]
    fn add(&mut self, e: usize, len: u32) {
        if let Some(h) = self.hot.get_mut(e) {
            h.bytes = h.bytes.wrapping_add(u64::from(len));
            h.packets = h.packets.wrapping_add(1);
        }
    }

    /// Adds a flow that is not tracked (the caller keeps `len() < capacity`).
    fn insert(&mut self, key: MemKey, cold: Cold) {
        self.hot.push(Hot {
            key,
            bytes: 0,
            packets: 0,
        });
        self.cold.push(cold);
        self.place(cold.hash, self.len() as u32);
    }

    fn place(&mut self, hash: u32, n: u32) {
        let mut slot = hash as usize & self.mask;
        while self.index[slot] != 0 {
            slot = (slot + 1) & self.mask;
        }
        self.index[slot] = (u64::from(hash) << 32) | u64::from(n);
    }

    /// Keeps the entries `keep` accepts, then rebuilds the index; the
    /// others are appended to `evicted`.
    fn retain(
        &mut self,
        mut keep: impl FnMut(&Tracked) -> bool,
        evicted: &mut Vec<(FlowKey, Tracked)>,
    ) {
        let mut kept = 1;
        for i in 1..self.hot.len() {
            let t = self.cold[i].tracked(&self.hot[i]);
            if keep(&t) {
                self.hot.swap(kept, i);
                self.cold.swap(kept, i);
                kept += 1;
            } else {
                evicted.push((self.cold[i].flow, t));
            }
        }
        self.hot.truncate(kept);
        self.cold.truncate(kept);
        self.index.fill(0);
        for i in 1..kept {
            self.place(self.cold[i].hash, i as u32);
        }
    }

    fn clear(&mut self) {
        self.hot.truncate(1);
        self.cold.truncate(1);
        self.index.fill(0);
    }

    /// Every tracked flow and its counts.
    fn iter(&self) -> impl Iterator<Item = (FlowKey, Tracked)> + '_ {
        self.cold
            .iter()
            .zip(&self.hot)
            .skip(1)
            .map(|(c, h)| (c.flow, c.tracked(h)))
    }
}

/// The heavy-flow stage.
#[derive(Debug)]
pub struct HeavyStage {
    config: HeavyConfig,
    /// Bytes (metric 0) and packets (metric 1) per flow.
    sketch: DualCountMin,
    memory: FlowMemory,
    counters: HeavyCounters,
    /// Current epoch: number, start, totals, overflow.
    epoch: Option<(u64, u64)>,
    epoch_bytes: u64,
    epoch_packets: u64,
    epoch_overflow: u64,
    /// Running total at the last sweep that could not free enough room.
    sweep_blocked_at: u64,
    /// The bounds an eviction sweep chooses from (reused).
    sweep_scratch: Vec<u64>,
    /// The sketch's key (a copy, so hashing a batch borrows no sketch).
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
    /// Per flow in batch order: its flow-memory key.
    mem_keys: [MemKey; BATCH_SIZE],
    /// Flows evicted by the last sweep (reused).
    evicted: Vec<(FlowKey, Tracked)>,
    reports: Vec<EpochReport>,
    /// Flows in `reports` ([`MAX_PENDING_FLOWS`] at most).
    pending_flows: usize,
}

impl HeavyStage {
    /// A stage with `config`.
    ///
    /// # Panics
    /// If the sketch shape is out of [`DualCountMin`]'s range.
    pub fn new(config: HeavyConfig) -> Self {
        let hasher = config.seed.map_or_else(Hasher::new, Hasher::with_seed);
        let sketch = DualCountMin::with_hasher(config.rows, config.log2_width, hasher.clone());
        HeavyStage {
            config,
            sketch,
            hasher,
            memory: FlowMemory::with_capacity(config.capacity),
            counters: HeavyCounters::default(),
            epoch: None,
            epoch_bytes: 0,
            epoch_packets: 0,
            epoch_overflow: 0,
            sweep_blocked_at: 0,
            sweep_scratch: Vec::with_capacity(config.capacity),
            keys4: [[0; 4]; BATCH_SIZE],
            keys10: [[0; 10]; BATCH_SIZE],
            at4: [0; BATCH_SIZE],
            at10: [0; BATCH_SIZE],
            pairs: [HashPair::default(); BATCH_SIZE],
            family_pairs: [HashPair::default(); BATCH_SIZE],
            mem_keys: [[0; 5]; BATCH_SIZE],
            evicted: Vec::new(),
            reports: Vec::new(),
            pending_flows: 0,
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

    /// Bytes of sketch memory.
    pub fn sketch_bytes(&self) -> usize {
        self.sketch.memory_bytes()
    }

    /// Flows in the memory now.
    pub fn tracked(&self) -> usize {
        self.memory.len()
    }

    /// The reports of the epochs closed so far (taken: a second call
    /// returns only newer ones).
    pub fn take_reports(&mut self) -> Vec<EpochReport> {
        self.pending_flows = 0;
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
        // Evict the smallest bounds below the floor, a quarter of the
        // memory at most: a flow near the threshold stays tracked (and its
        // bound tight: re-entering later would bring the sketch's noise in
        // with a fresh estimate) as long as smaller flows can make room.
        let want = (self.config.capacity / 4).max(1);
        let bounds = &mut self.sweep_scratch;
        bounds.clear();
        bounds.extend(
            self.memory
                .iter()
                .map(|(_, t)| t.bytes_upper())
                .filter(|&b| b < floor),
        );
        let (cut, mut ties) = if bounds.len() <= want {
            (floor, 0)
        } else {
            let (_, &mut cut, _) = bounds.select_nth_unstable(want - 1);
            let below = bounds.iter().filter(|&&b| b < cut).count();
            (cut, want - below)
        };
        let mut evicted = std::mem::take(&mut self.evicted);
        evicted.clear();
        self.memory.retain(
            |t| {
                let b = t.bytes_upper();
                if b == cut && ties > 0 {
                    ties -= 1;
                    return false;
                }
                b >= cut
            },
            &mut evicted,
        );
        // Shielding kept the evicted flows' packets since detection out of
        // the sketch: put them back, so its estimate of every untracked
        // flow stays an upper bound of the flow's epoch total.
        for (key, t) in &evicted {
            let (b, p) = (sat32(t.bytes), sat32(t.packets));
            match key {
                FlowKey::V4(k) => self.sketch.add_conservative(&k.words4(), b, p),
                FlowKey::V6(k) => self.sketch.add_conservative(&k.words10(), b, p),
            };
        }
        let freed = evicted.len();
        self.evicted = evicted;
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

    /// Heavy-flow detection on flow keys alone (no packets, no parse):
    /// packet `i` of flow `flows[i]` had `lens[i]` bytes on the wire, all
    /// at `now`. The same path as [`Stage::process`] takes after it has
    /// gathered a batch's keys, so results are identical for the same keys,
    /// lengths and times (epochs are decided by `now`).
    ///
    /// # Panics
    /// If `flows` and `lens` differ in length.
    pub fn observe(&mut self, flows: &[FlowKey], lens: &[u32], now: Timestamp) {
        assert_eq!(
            flows.len(),
            lens.len(),
            "HeavyStage::observe: {} flows, {} lengths",
            flows.len(),
            lens.len()
        );
        self.advance_epoch(now, now);
        for (f, l) in flows.chunks(BATCH_SIZE).zip(lens.chunks(BATCH_SIZE)) {
            self.count(f, l, &[], now);
        }
    }

    /// Epoch bookkeeping for a batch at `now` whose earliest packet is at
    /// `first`.
    fn advance_epoch(&mut self, now: Timestamp, first: Timestamp) {
        let (k, start) = self.epoch_of(now);
        match (self.epoch, self.config.epoch_ns) {
            // One epoch: it starts with the earliest packet seen, also when
            // a later file of the input holds earlier times.
            (None, None) => self.epoch = Some((0, first.min(now).as_nanos())),
            (Some((0, s)), None) if first.min(now).as_nanos() < s => {
                self.epoch = Some((0, first.min(now).as_nanos()));
            }
            (None, Some(_)) => self.epoch = Some((k, start)),
            (Some((cur, _)), Some(l)) if k > cur => {
                self.close_epoch(cur.saturating_add(1).saturating_mul(l));
                self.epoch = Some((k, start));
            }
            _ => {}
        }
    }

    /// Counts one batch: packet `i` of flow `flows[i]`, `lens[i]` bytes,
    /// outer VLAN `vlans[i]` (none when `vlans` is shorter) (at most
    /// [`BATCH_SIZE`] packets; the caller chunks).
    fn count<F: Borrow<FlowKey>>(
        &mut self,
        flows: &[F],
        lens: &[u32],
        vlans: &[Option<u16>],
        now: Timestamp,
    ) {
        let n = flows.len().min(lens.len());
        // `n <= BATCH_SIZE`; saying so lets the compiler drop the bounds
        // checks on the per-batch arrays below.
        let n = n.min(BATCH_SIZE);
        if n == 0 {
            return;
        }
        let (mut n4, mut n10) = (0, 0);
        let (flows, lens) = (&flows[..n], &lens[..n]);
        for (i, f) in flows.iter().enumerate() {
            match f.borrow() {
                FlowKey::V4(k) => {
                    let w = k.words4();
                    self.mem_keys[i] = mem_key4(&w);
                    self.keys4[n4] = w;
                    self.at4[n4] = i as u8;
                    n4 += 1;
                }
                FlowKey::V6(k) => {
                    let w = k.words10();
                    self.mem_keys[i] = mem_key10(&w);
                    self.keys10[n10] = w;
                    self.at10[n10] = i as u8;
                    n10 += 1;
                }
            }
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
        // The probes below read one index slot per packet, at random in
        // the index: ask for all of them now.
        for p in &self.pairs[..n] {
            self.memory.prefetch(mem_hash(*p));
        }

        // Packet by packet, in order. Shielding: a flow in the memory is
        // counted there, exactly, and its packet stays out of the sketch;
        // any other packet updates the sketch and is checked against the
        // running total up to and including it.
        let threshold = self.config.threshold;
        let base = self.epoch_bytes;
        let mut total = base;
        for (j, &len) in lens.iter().enumerate() {
            total += u64::from(len);
            let hash = mem_hash(self.pairs[j]);
            let e = self.memory.find(&self.mem_keys[j], hash);
            if e != 0 {
                self.memory.add(e, len);
                continue;
            }
            let [eb, ep] = self
                .sketch
                .add_conservative_pair(self.pairs[j], len, 1)
                .map(u64::from);
            if !is_heavy(threshold, total, eb, ep) {
                continue;
            }
            // The total so far is the floor an eviction sweep may use.
            self.epoch_bytes = total;
            if self.make_room() {
                self.memory.insert(
                    self.mem_keys[j],
                    Cold {
                        flow: *flows[j].borrow(),
                        hash,
                        vlan: vlans.get(j).copied().flatten(),
                        detected_ns: now.as_nanos(),
                        est_bytes: eb,
                        est_packets: ep,
                    },
                );
                self.counters.detections += 1;
            } else {
                self.counters.overflow += 1;
                self.epoch_overflow += 1;
            }
        }
        self.epoch_bytes = total;
        self.counters.bytes += total - base;
        self.epoch_packets += n as u64;
        self.counters.packets += n as u64;
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
            let (bytes_upper, packets_upper) = (t.bytes_upper(), t.packets_upper());
            if is_heavy(threshold, total, bytes_upper, packets_upper) {
                flows.push(HeavyReport {
                    epoch,
                    epoch_start_ns: start_ns,
                    epoch_end_ns: end_ns,
                    flow: key.to_string(),
                    fields: FlowFields::of(&key),
                    vlan: t.vlan,
                    detected_ns: t.detected_ns,
                    est_bytes: t.est_bytes,
                    est_packets: t.est_packets,
                    exact_bytes: t.bytes,
                    exact_packets: t.packets,
                    bytes_upper,
                    packets_upper,
                    key,
                });
            }
        }
        sort_flows(&mut flows);
        let room = MAX_PENDING_FLOWS.saturating_sub(self.pending_flows);
        let omitted = flows.len().saturating_sub(room) as u64;
        flows.truncate(room);
        self.pending_flows += flows.len();
        self.counters.epochs += 1;
        self.counters.reported += flows.len() as u64;
        self.counters.omitted += omitted;
        self.reports.push(EpochReport {
            epoch,
            start_ns,
            end_ns,
            bytes: total,
            packets: self.epoch_packets,
            overflow: self.epoch_overflow,
            omitted,
            flows,
        });
        self.sketch.reset();
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

    /// Counts the batch's live packets. With epochs, each packet counts
    /// in the epoch of its own time (at most `now`): a batch that spans an
    /// epoch boundary closes the epoch between its packets, so the epochs
    /// do not depend on how packets were batched.
    fn process(&mut self, batch: &mut Batch, now: Timestamp) {
        let first = batch.packets().iter().map(|p| p.ts).min().unwrap_or(now);
        let epoch_ns = self.config.epoch_ns.filter(|&l| l > 0);
        if epoch_ns.is_none() {
            self.advance_epoch(now, first);
        }
        // By reference: a flow key is 40 bytes.
        let mut flows: [&FlowKey; BATCH_SIZE] = [&NO_FLOW; BATCH_SIZE];
        let mut lens = [0u32; BATCH_SIZE];
        let mut vlans = [None; BATCH_SIZE];
        let mut n = 0;
        let mut skipped = 0u64;
        let mut at = now;
        // Where the next epoch starts (`Some(0)`: no epoch yet; `None`:
        // never): `t / l > cur` is `t >= (cur + 1) * l`, with no division
        // per packet.
        let next_start = |e: Option<(u64, u64)>, l: u64| match e {
            None => Some(0),
            Some((cur, _)) => cur.checked_add(1).and_then(|c| c.checked_mul(l)),
        };
        let mut next = epoch_ns.and_then(|l| next_start(self.epoch, l));
        for p in batch.packets() {
            if !p.is_live() {
                continue;
            }
            // By reference: a `Parsed` is over a hundred bytes.
            let Some((f, vlan)) = p
                .parsed
                .as_ref()
                .and_then(|pp| pp.flow.as_ref().map(|f| (f, pp.outer_vlan)))
            else {
                skipped += 1;
                continue;
            };
            if let Some(l) = epoch_ns {
                let t = p.ts.min(now);
                if next.is_some_and(|b| t.as_nanos() >= b) {
                    self.count(&flows[..n], &lens[..n], &vlans[..n], at);
                    n = 0;
                    self.advance_epoch(t, t);
                    next = next_start(self.epoch, l);
                }
                at = t;
            }
            // At most one flow per packet of the batch: `n < BATCH_SIZE`.
            if let (Some(slot), Some(len), Some(v)) =
                (flows.get_mut(n), lens.get_mut(n), vlans.get_mut(n))
            {
                *slot = f;
                *v = vlan;
                // The bytes that arrived on the wire: an Icarus option
                // this router inserts is an egress matter, not the flow's.
                *len = p.orig_len.max(p.data().len() as u32);
                n += 1;
            }
        }
        self.counters.skipped += skipped;
        self.count(&flows[..n], &lens[..n], &vlans[..n], at);
        if epoch_ns.is_some() {
            self.advance_epoch(now, first);
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
