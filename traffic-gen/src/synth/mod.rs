//! Synthetic workloads with known ground truth: Zipf-distributed flows.
//!
//! Flow `i` (rank order is scattered over ids so heavy flows are not the low
//! ids) is UDP `10.0.0.1:port -> 11.x.y.z:53`, every fourth one IPv6
//! (`2001:db8::1 -> 2001:db8:1::i:2`), with a fixed frame size per flow
//! (`--size`, or per-flow sizes between 64 and 1500 bytes). Packets are
//! 1 microsecond apart in capture time, starting at 1 s after the epoch.
//!
//! [`UniqueFrames`] streams unique frames of one size over many IPv4 flows
//! round robin, made as they are sent: the input of `traffic-gen
//! throughput`'s trials.
//!
//! The other workloads are submodules: [`icarus`] (Icarus filters after h
//! hops, looping paths), [`mcast`] (groups, joins, leaves and data with
//! exact egress sets) and [`router`] (the built-in router's workload).

pub mod icarus;
pub mod mcast;
pub mod router;

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use dataplane::flow::FlowKey;
use dataplane::io::capture::{CaptureWriter, PcapNgWriter};
use dataplane::wire::{LinkType, parse};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_distr::{Distribution, Zipf};
use serde::Serialize;

use dataplane::wire::build::{self, Addrs, ETH_LEN, IpHeader, PROTO_UDP, UDP_LEN};

/// Settings of a Zipf workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SynthConfig {
    /// Number of distinct flows.
    pub flows: u32,
    /// Number of packets.
    pub packets: u64,
    /// Zipf exponent.
    pub zipf_s: f64,
    /// Frame size in bytes; `None` for per-flow sizes in 64..=1500.
    pub size: Option<u16>,
    /// RNG seed.
    pub seed: u64,
    /// Make every frame distinct: packet `n` carries `n` in its IPv4
    /// identification (header checksum updated) and in the first payload
    /// bytes (as many of the 8 as the frame has), so a receiver can tell
    /// copies of one flow's frames apart (`traffic-gen replay --rx`
    /// matches frames by content). Otherwise all frames of a flow are
    /// identical.
    pub unique: bool,
}

impl Default for SynthConfig {
    fn default() -> Self {
        SynthConfig {
            flows: 10_000,
            packets: 200_000,
            zipf_s: 1.1,
            size: None,
            seed: 1,
            unique: false,
        }
    }
}

/// Packets per second of synthetic capture time.
pub const SYNTH_GAP_NS: u64 = 1_000;
/// Capture time of the first synthetic packet.
pub const SYNTH_START_NS: u64 = 1_000_000_000;

/// Zipf-distributed flow ids: rank `r` (0 the most frequent) has
/// probability proportional to `(r + 1)^-s`, and ranks are scattered over
/// the ids `0..flows` so that the heavy flows are not the low ids: rank `r`
/// is id `r * m mod flows` with `m` near `0.618 * flows` and coprime with
/// it, a permutation of `0..flows` whatever `flows` is (every flow exists).
#[derive(Debug, Clone)]
pub struct ZipfFlows {
    zipf: Zipf<f64>,
    flows: u32,
    s: f64,
    /// The scattering multiplier (coprime with `flows`).
    m: u64,
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl ZipfFlows {
    /// `flows` flows with exponent `s`; an error, naming the option, for
    /// zero flows or a bad exponent.
    pub fn new(flows: u32, s: f64) -> Result<Self> {
        if flows == 0 {
            bail!("--flows must be at least 1");
        }
        if !(s.is_finite() && s >= 0.0) {
            bail!("--zipf-s must be a finite number >= 0, got {s}");
        }
        let zipf = Zipf::new(f64::from(flows), s)
            .with_context(|| format!("bad Zipf parameters (s = {s})"))?;
        let n = u64::from(flows);
        // Bounded: among any n consecutive integers one is coprime with n
        // (1 mod n is), so the search ends within n steps.
        let mut m = ((n as f64 * 0.618_033_988_75) as u64).max(1);
        while gcd(m, n) != 1 {
            m += 1;
        }
        Ok(ZipfFlows { zipf, flows, s, m })
    }

    /// The number of flows.
    pub fn flows(&self) -> u32 {
        self.flows
    }

    /// The id of the flow of rank `rank` (0-based).
    pub fn id_of_rank(&self, rank: u32) -> u32 {
        // Below `flows`, so it fits.
        ((u64::from(rank) * self.m) % u64::from(self.flows)) as u32
    }

    /// Draws a flow id.
    pub fn sample<R: rand::Rng + ?Sized>(&self, rng: &mut R) -> u32 {
        let rank = (self.zipf.sample(rng) as u32).saturating_sub(1);
        self.id_of_rank(rank)
    }

    /// The probability of each flow id (index = id) under [`ZipfFlows::sample`].
    pub fn probabilities(&self) -> Vec<f64> {
        let weights: Vec<f64> = (1..=self.flows)
            .map(|k| f64::from(k).powf(-self.s))
            .collect();
        let total: f64 = weights.iter().sum();
        let mut p = vec![0.0; self.flows as usize];
        for (rank, w) in weights.iter().enumerate() {
            p[self.id_of_rank(rank as u32) as usize] += w / total;
        }
        p
    }
}

/// A Zipf packet stream. Yields `(ts_ns, frame)`; the frame buffer is reused.
#[derive(Debug)]
pub struct Synth {
    cfg: SynthConfig,
    rng: StdRng,
    zipf: ZipfFlows,
    frames: Vec<Vec<u8>>,
    n: u64,
}

impl Synth {
    /// A stream for `cfg`; an error for zero flows or a bad exponent.
    pub fn new(cfg: SynthConfig) -> Result<Self> {
        let zipf = ZipfFlows::new(cfg.flows, cfg.zipf_s)?;
        let frames = (0..cfg.flows)
            .map(|i| {
                let size = cfg.size.map_or_else(
                    || 64 + (u64::from(i).wrapping_mul(0x9e37_79b9) % 1437) as usize,
                    usize::from,
                );
                frame(i, size)
            })
            .collect();
        Ok(Synth {
            cfg,
            rng: StdRng::seed_from_u64(cfg.seed),
            zipf,
            frames,
            n: 0,
        })
    }

    /// The next packet, `None` after `packets`.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<(u64, &[u8])> {
        if self.n >= self.cfg.packets {
            return None;
        }
        let ts = SYNTH_START_NS + self.n * SYNTH_GAP_NS;
        self.n += 1;
        let id = self.zipf.sample(&mut self.rng);
        let f = &mut self.frames[id as usize];
        if self.cfg.unique {
            stamp(f, self.n - 1);
        }
        Some((ts, f))
    }

    /// Total packets the stream yields.
    pub fn len(&self) -> u64 {
        self.cfg.packets
    }

    /// Whether the stream yields nothing.
    pub fn is_empty(&self) -> bool {
        self.cfg.packets == 0
    }
}

/// Frame sizes [`UniqueFrames`] makes, bytes (no frame check sequence:
/// the bytes handed to the interface, as a capture holds them).
pub const UNIQUE_SIZES: std::ops::RangeInclusive<u16> = 60..=9000;

/// Settings of a [`UniqueFrames`] stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UniqueConfig {
    /// Every frame's size, bytes (in [`UNIQUE_SIZES`]).
    pub size: u16,
    /// Flows, sent round robin.
    pub flows: u32,
    /// Frames; `u64::MAX` for a stream the caller stops.
    pub packets: u64,
}

/// Unique frames of one size over many flows, made as they are sent (a
/// throughput trial at a high rate would not fit in memory as a capture):
/// flow `i` is IPv4 UDP `10.0.0.1:(1024 + i) -> 11.x.y.z:53` (the IPv4
/// flows of [`frame`]), taken round robin; frame `n` carries `n` as
/// `--unique` does ([`Synth`]'s unique mode): in the IPv4 identification
/// (low 16 bits, checksum updated) and in the first 8 payload bytes (a
/// 60-byte frame has 18), so no two frames of a stream are alike and
/// `replay --rx` matches each exactly. IPv4 only: a 64-byte IPv6 frame has
/// room for 2 payload bytes, too few to tell millions of frames apart.
#[derive(Debug)]
pub struct UniqueFrames {
    cfg: UniqueConfig,
    frames: Vec<Vec<u8>>,
    n: u64,
    /// Frame numbers advance by this ([`shard`](Self::shard)).
    step: u64,
}

impl UniqueFrames {
    /// A stream for `cfg`; an error naming the option for a size outside
    /// [`UNIQUE_SIZES`] or no flows.
    pub fn new(cfg: UniqueConfig) -> Result<Self> {
        if !UNIQUE_SIZES.contains(&cfg.size) {
            bail!(
                "--size {}: frame sizes must be in {}..={} bytes",
                cfg.size,
                UNIQUE_SIZES.start(),
                UNIQUE_SIZES.end()
            );
        }
        if cfg.flows == 0 {
            bail!("--flows must be at least 1");
        }
        // Flow ids that `frame` makes IPv4 (every fourth one is IPv6).
        let frames = (0..cfg.flows)
            .map(|k| frame(k / 3 * 4 + k % 3, usize::from(cfg.size)))
            .collect();
        Ok(UniqueFrames {
            cfg,
            frames,
            n: 0,
            step: 1,
        })
    }

    /// Shard `index` of `count` of the stream: its frames `n` with
    /// `n % count == index`, the same bytes and times as in the whole
    /// stream, so that `count` senders, one per shard, send the stream
    /// between them, each frame once. `count` 0 is taken as 1.
    pub fn shard(mut self, index: u32, count: u32) -> Self {
        self.step = u64::from(count.max(1));
        self.n = u64::from(index);
        self
    }

    /// The next frame (its capture time is [`SYNTH_START_NS`] +
    /// n x [`SYNTH_GAP_NS`]), `None` after `packets`.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<(u64, &[u8])> {
        if self.n >= self.cfg.packets {
            return None;
        }
        let n = self.n;
        self.n = self.n.saturating_add(self.step);
        let ts = SYNTH_START_NS.saturating_add(n.saturating_mul(SYNTH_GAP_NS));
        let len = self.frames.len() as u64;
        let f = self.frames.get_mut((n % len) as usize)?;
        stamp(f, n);
        Some((ts, f))
    }

    /// The settings.
    pub fn config(&self) -> UniqueConfig {
        self.cfg
    }
}

/// One flow's exact totals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlowTruth {
    /// The flow, as `FlowKey`'s display form.
    pub flow: String,
    /// Bytes (frame lengths).
    pub bytes: u64,
    /// Packets.
    pub packets: u64,
}

/// Exact per-flow totals of a workload, largest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroundTruth {
    /// Total bytes.
    pub bytes: u64,
    /// Total packets.
    pub packets: u64,
    /// Every flow, by bytes descending.
    pub flows: Vec<FlowTruth>,
}

impl GroundTruth {
    /// The flows with at least `share` of the bytes.
    pub fn heavy(&self, share: f64) -> impl Iterator<Item = &FlowTruth> {
        let cut = share * self.bytes as f64;
        self.flows.iter().filter(move |f| f.bytes as f64 >= cut)
    }
}

/// Writes the workload to a pcap at `path` and its ground truth as JSON to
/// `path` + `.truth.json`; returns the truth.
pub fn write_pcap(cfg: SynthConfig, path: &Path) -> Result<GroundTruth> {
    let mut synth = Synth::new(cfg)?;
    let mut w = CaptureWriter::create(path, LinkType::Ethernet, 65535)
        .with_context(|| format!("{}: cannot create", path.display()))?;
    let mut per: HashMap<FlowKey, (u64, u64)> = HashMap::new();
    let (mut bytes, mut packets) = (0u64, 0u64);
    while let Some((ts, data)) = synth.next() {
        w.write(ts, data.len() as u32, data)
            .with_context(|| format!("{}: write failed", path.display()))?;
        if let Some(f) = parse(LinkType::Ethernet, data).ok().and_then(|p| p.flow) {
            let e = per.entry(f).or_default();
            e.0 += data.len() as u64;
            e.1 += 1;
        }
        bytes += data.len() as u64;
        packets += 1;
    }
    w.finish()
        .with_context(|| format!("{}: write failed", path.display()))?;
    let mut flows: Vec<(FlowKey, (u64, u64))> = per.into_iter().collect();
    flows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let truth = GroundTruth {
        bytes,
        packets,
        flows: flows
            .into_iter()
            .map(|(k, (b, p))| FlowTruth {
                flow: k.to_string(),
                bytes: b,
                packets: p,
            })
            .collect(),
    };
    let tpath = format!("{}.truth.json", path.display());
    let json = serde_json::to_vec_pretty(&truth)?;
    std::fs::write(&tpath, json).with_context(|| format!("{tpath}: cannot write"))?;
    Ok(truth)
}

/// The file beside a capture that holds its truth: `path` + `suffix`.
pub fn sidecar_path(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    s.into()
}

/// Writes `truth` as JSON to [`sidecar_path`]`(path, suffix)`.
pub fn write_sidecar<T: Serialize>(path: &Path, suffix: &str, truth: &T) -> Result<()> {
    let tpath = sidecar_path(path, suffix);
    std::fs::write(&tpath, serde_json::to_vec(truth)?)
        .with_context(|| format!("{}: cannot write", tpath.display()))
}

/// Creates the pcapng at `path` with one Ethernet interface per name, in
/// order (interface id `i` is `names[i]`).
pub fn create_pcapng(path: &Path, names: &[String]) -> Result<PcapNgWriter> {
    let ports: Vec<(&str, LinkType)> = names
        .iter()
        .map(|n| (n.as_str(), LinkType::Ethernet))
        .collect();
    PcapNgWriter::create(path, &ports).with_context(|| format!("{}: cannot create", path.display()))
}

/// Writes packet number `n` into a [`frame`]: the IPv4 identification (low
/// 16 bits; the header checksum is recomputed) and the first payload bytes,
/// big-endian low bytes last, as many as the frame holds (up to 8).
fn stamp(f: &mut [u8], n: u64) {
    let v6 = f.get(12..14) == Some(&[0x86, 0xdd][..]);
    let l4 = if v6 { 54 } else { 34 };
    if !v6 && let Some(ip) = f.get_mut(14..34) {
        ip[4..6].copy_from_slice(&(n as u16).to_be_bytes());
        ip[10..12].fill(0);
        let sum = !dataplane::wire::checksum::sum(ip);
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
    }
    if let Some(payload) = f.get_mut(l4 + 8..) {
        let k = payload.len().min(8);
        payload[..k].copy_from_slice(&n.to_be_bytes()[8 - k..]);
    }
}

/// Ethernet + IPv4/IPv6 + UDP frame of flow `flow`, `size` bytes (at least
/// the headers).
pub fn frame(flow: u32, size: usize) -> Vec<u8> {
    let v6 = flow % 4 == 3;
    let addrs = if v6 {
        Addrs::V6 {
            src: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1),
            dst: Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, (flow >> 16) as u16, flow as u16, 2),
        }
    } else {
        Addrs::V4 {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::from(0x0b00_0000 | (flow & 0x00ff_ffff)),
        }
    };
    let ip = IpHeader::new(addrs, PROTO_UDP);
    let l4 = ETH_LEN + ip.len();
    let size = size.clamp(l4 + UDP_LEN, 9000);
    let mut f = Vec::with_capacity(size);
    build::ethernet(
        &mut f,
        [0x02, 0, 0, 0, 0, 2],
        [0x02, 0, 0, 0, 0, 1],
        ip.ethertype(),
    );
    ip.push(&mut f, size - l4);
    let sport = (1024 + flow % 50_000) as u16;
    build::udp(&mut f, sport, 53, size - l4 - UDP_LEN);
    f.resize(size, 0);
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_flow_count_gives_that_many_flows() {
        // Ranks map to ids one to one whatever the count (200,000 gave
        // 111,551 distinct ids, 1,000 gave 729, before).
        for flows in [1u32, 2, 3, 10, 729, 1000, 1024, 4096, 65_537, 200_000] {
            let z = ZipfFlows::new(flows, 1.1).unwrap();
            let mut seen = vec![false; flows as usize];
            for r in 0..flows {
                let id = z.id_of_rank(r);
                assert!(!seen[id as usize], "{flows}: id {id} twice");
                seen[id as usize] = true;
            }
            let p = z.probabilities();
            assert!(
                p.iter().all(|&x| x > 0.0),
                "{flows}: a flow that never occurs"
            );
            assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-9);
            if flows > 10 {
                assert_ne!(z.id_of_rank(0) + 1, z.id_of_rank(1), "ranks scattered");
            }
        }
    }

    #[test]
    fn frames_parse_to_distinct_flows() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..1000 {
            let f = frame(i, 100);
            let p = parse(LinkType::Ethernet, &f).expect("parses");
            assert!(seen.insert(p.flow.expect("ip")));
        }
    }

    #[test]
    fn stream_is_deterministic() {
        let cfg = SynthConfig {
            packets: 1000,
            ..SynthConfig::default()
        };
        let collect = || {
            let mut s = Synth::new(cfg).unwrap();
            let mut v = Vec::new();
            while let Some((ts, d)) = s.next() {
                v.push((ts, d.to_vec()));
            }
            v
        };
        assert_eq!(collect(), collect());
        assert_eq!(collect().len(), 1000);
    }

    #[test]
    fn unique_stream_frames_are_unique_sized_and_parse() {
        for size in [60u16, 64, 128, 1518, 9000] {
            let mut s = UniqueFrames::new(UniqueConfig {
                size,
                flows: 7,
                packets: 3000,
            })
            .unwrap();
            let mut seen = std::collections::HashSet::new();
            let mut flows = std::collections::HashSet::new();
            let mut keys = std::collections::HashSet::new();
            let mut last_ts = 0;
            while let Some((ts, d)) = s.next() {
                assert!(ts > last_ts);
                last_ts = ts;
                assert_eq!(d.len(), usize::from(size));
                let p = parse(LinkType::Ethernet, d).expect("parses");
                assert_eq!(p.ip_total_len, usize::from(size) - 14, "IP length");
                flows.insert(p.flow.expect("IP"));
                assert_eq!(dataplane::wire::checksum::sum(&d[14..34]), 0xffff);
                assert!(seen.insert(d.to_vec()), "a frame repeated");
                keys.insert(crate::live::match_key(LinkType::Ethernet, d));
            }
            assert_eq!(seen.len(), 3000);
            assert_eq!(keys.len(), 3000, "matching keys differ too");
            assert_eq!(flows.len(), 7);
        }
    }

    #[test]
    fn unique_stream_rejects_bad_settings() {
        for size in [0u16, 59, 9001] {
            let err = UniqueFrames::new(UniqueConfig {
                size,
                flows: 1,
                packets: 1,
            })
            .unwrap_err();
            assert!(err.to_string().contains("--size"), "{err}");
        }
        let err = UniqueFrames::new(UniqueConfig {
            size: 64,
            flows: 0,
            packets: 1,
        })
        .unwrap_err();
        assert!(err.to_string().contains("--flows"), "{err}");
        // A stream of nothing yields nothing.
        let mut s = UniqueFrames::new(UniqueConfig {
            size: 64,
            flows: 1,
            packets: 0,
        })
        .unwrap();
        assert!(s.next().is_none());
    }

    #[test]
    fn unique_frames_differ_and_stay_valid() {
        for size in [None, Some(64)] {
            let cfg = SynthConfig {
                packets: 5000,
                flows: 50,
                size,
                unique: true,
                ..SynthConfig::default()
            };
            let mut s = Synth::new(cfg).unwrap();
            let mut seen = std::collections::HashSet::new();
            while let Some((_, d)) = s.next() {
                assert!(seen.insert(d.to_vec()), "a frame repeated");
                parse(LinkType::Ethernet, d).expect("parses");
                if d[12..14] == [0x08, 0x00] {
                    let ip = &d[14..34];
                    assert_eq!(dataplane::wire::checksum::sum(ip), 0xffff, "IPv4 checksum");
                }
            }
            assert_eq!(seen.len(), 5000);
        }
    }

    #[test]
    fn shards_split_the_unique_stream_exactly() {
        let cfg = UniqueConfig {
            size: 64,
            flows: 7,
            packets: 1001,
        };
        let mut whole = Vec::new();
        let mut s = UniqueFrames::new(cfg).unwrap();
        while let Some((ts, f)) = s.next() {
            whole.push((ts, f.to_vec()));
        }
        assert_eq!(whole.len(), 1001);
        for count in [1u32, 2, 3, 8] {
            let mut got = vec![None; whole.len()];
            for index in 0..count {
                let mut s = UniqueFrames::new(cfg).unwrap().shard(index, count);
                let mut n = index as usize;
                while let Some((ts, f)) = s.next() {
                    assert!(got[n].is_none(), "frame {n} sent twice");
                    got[n] = Some((ts, f.to_vec()));
                    n += count as usize;
                }
            }
            let got: Vec<_> = got.into_iter().map(|g| g.expect("every frame")).collect();
            assert_eq!(got, whole, "{count} shards");
        }
    }
}
