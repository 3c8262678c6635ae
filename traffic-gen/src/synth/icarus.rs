//! Synthetic Icarus workload with exact ground truth: UDP packets (IPv4 and
//! IPv6) that carry the loop-detection filter as it looks when they reach
//! one *checking node* (the router under test) after `h` hops.
//!
//! # The model
//!
//! Every packet has a path of `h` nodes it went through before it reaches
//! the checking node (`h` drawn uniformly from [`HopRange`]); its filter is
//! the OR of their masks ([`dataplane::stage::icarus`]: the option was
//! inserted empty at the ingress edge and every node applied the hop rule).
//!
//! * A **loop-free** packet's path is `h` distinct random node ids (64-bit),
//!   none equal to the checking node.
//! * A **looping** packet (a share [`IcarusSynthConfig::loop_fraction`])
//!   went through the checking node before: its path is `max(h, 1)`
//!   distinct nodes, the checking node at a uniformly random place among
//!   them. Its filter therefore holds the checking node's whole mask.
//!
//! A packet whose path raised an alarm on the way (some node, the checking
//! node's earlier visit included, found its whole mask already set) would
//! have been dropped there and never arrived, so such a path is drawn again
//! (rejection sampling). The packets in the file are thus exactly the ones
//! that survive `h` hops, in the hop mix asked for.
//!
//! # The ground truth
//!
//! The sidecar `FILE.icarus.json` ([`IcarusTruth`]) holds, per packet,
//! whether it is on a loop, its path length, its IP version, and the exact
//! verdict of the checking node (`detected`: the filter holds every bit of
//! the checking node's mask, so the node counts it in `loops_detected` and
//! drops it under the default `on_loop = "drop"`). A looping packet is
//! always detected; a loop-free one is a false alarm exactly when the
//! masks along its path happen to cover the checking node's mask, which is
//! computed from the filter itself, per packet, so the verdicts are exact.
//!
//! # The expected false-alarm rate
//!
//! With `F(h)` the exact probability that a loop-free path through `h`
//! distinct nodes raises a false alarm somewhere
//! ([`false_alarm_probability`], the Markov chain over the filter's
//! popcount), a packet that survived `h` hops alarms at the checking node
//! (the `h + 1`-th distinct node) with probability
//!
//! ```text
//! q(h) = (F(h + 1) - F(h)) / (1 - F(h))
//! ```
//!
//! The expected number of false alarms in the file is the sum of `q(h)`
//! over its loop-free packets, with the Poisson-binomial variance
//! `sum q(h) (1 - q(h))` ([`MarkovSummary`]). Masks come from the real
//! node-id hashing; `dataplane/tests/icarus_markov.rs` checks that they
//! behave like the uniformly random k-subsets the chain assumes.
//!
//! # Packets
//!
//! Ethernet, then IPv4 `198.18.x.y -> 198.19.0.1` or IPv6
//! `2001:2::x -> 2001:2:0:1::1` (the benchmarking ranges of RFC 2544 and
//! RFC 5180), UDP to port 9 with a 16-byte payload (the sequence number as
//! a big-endian `u64`, the path length, 1 if looping, six zero bytes). The
//! IPv4 header checksum and the UDP checksum are computed on the plain
//! packet, then [`icarus::insert`] adds the option (it keeps both right).
//! Packets are 1 microsecond apart in capture time.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::str::FromStr;

use anyhow::{Context, Result, anyhow, bail};
use dataplane::io::capture::CaptureWriter;
use dataplane::stage::icarus::{
    DEFAULT_SEED, FilterParams, MAX_K, MaskDeriver, default_k, false_alarm_probability,
};
use dataplane::wire::LinkType;
use dataplane::wire::icarus::{self, Filter, FilterWidth, Hop};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::synth::{SYNTH_GAP_NS, SYNTH_START_NS, sidecar_path, write_sidecar};
use dataplane::wire::build::{self, Addrs, IpHeader, PROTO_UDP, UDP_LEN, udp_checksum};

/// The longest path accepted, in hops.
pub const MAX_HOPS: usize = 64;

/// The most packets one file may hold (the truth is kept in memory).
pub const MAX_PACKETS: u64 = 100_000_000;

/// The longest path asked for must arrive without a false alarm on the way
/// at least this often (otherwise most drawn paths are rejected).
pub const MIN_SURVIVAL: f64 = 0.5;

/// Draws of one packet's path before giving up (at [`MIN_SURVIVAL`] the
/// chance of reaching it is below 2^-1000).
const MAX_ATTEMPTS: u32 = 1_000;

/// Where the IP header starts in the frames (after Ethernet).
pub const L3_OFFSET: usize = 14;

/// An inclusive range of path lengths, in hops: `H`, `A..B` (half-open, as
/// in Rust) or `A..=B`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HopRange {
    /// Shortest path.
    pub min: usize,
    /// Longest path.
    pub max: usize,
}

impl HopRange {
    /// Exactly `h` hops.
    pub const fn exactly(h: usize) -> Self {
        HopRange { min: h, max: h }
    }

    /// The path lengths, shortest first.
    pub fn iter(&self) -> std::ops::RangeInclusive<usize> {
        self.min..=self.max
    }
}

impl Default for HopRange {
    fn default() -> Self {
        HopRange { min: 1, max: 10 }
    }
}

impl fmt::Display for HopRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.min == self.max {
            write!(f, "{}", self.min)
        } else {
            write!(f, "{}..={}", self.min, self.max)
        }
    }
}

impl FromStr for HopRange {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let num = |t: &str| {
            t.trim().parse::<usize>().map_err(|_| {
                format!("{t:?} is not a hop count (expected H, A..B or A..=B, e.g. 0..=10)")
            })
        };
        let r = if let Some((a, b)) = s.split_once("..=") {
            HopRange {
                min: num(a)?,
                max: num(b)?,
            }
        } else if let Some((a, b)) = s.split_once("..") {
            let (min, end) = (num(a)?, num(b)?);
            if end <= min {
                return Err(format!("{s:?} is empty ({min}..{end} excludes {end})"));
            }
            HopRange { min, max: end - 1 }
        } else {
            HopRange::exactly(num(s)?)
        };
        if r.min > r.max {
            return Err(format!("{s:?} is empty"));
        }
        if r.max > MAX_HOPS {
            return Err(format!("at most {MAX_HOPS} hops, got {}", r.max));
        }
        Ok(r)
    }
}

/// `--hops`: see [`HopRange`].
pub fn parse_hops(s: &str) -> Result<HopRange, String> {
    s.parse()
}

/// `--width`: 64, 128 or 256.
pub fn parse_width(s: &str) -> Result<FilterWidth, String> {
    s.trim()
        .parse::<usize>()
        .ok()
        .and_then(FilterWidth::from_bits)
        .ok_or_else(|| "must be 64, 128 or 256 (filter bits)".to_string())
}

/// `--domain-seed`: decimal or `0x` hexadecimal.
pub fn parse_seed(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(&hex.replace('_', ""), 16),
        None => s.replace('_', "").parse(),
    };
    r.map_err(|_| "must be a 64-bit number, decimal or 0x hexadecimal".to_string())
}

/// A share in `[0, 1]` (`--loop-fraction`, `--v6-fraction`).
pub fn parse_fraction(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        _ => Err("must be a number in [0, 1]".to_string()),
    }
}

/// Settings of an Icarus workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IcarusSynthConfig {
    /// The checking node (the router that will see the packets).
    pub node_id: u64,
    /// Filter width m.
    pub width: FilterWidth,
    /// Mask bits k; `None`: [`default_k`] for the width.
    pub k: Option<usize>,
    /// The domain seed that turns node ids into masks (`icarus.seed`).
    pub domain_seed: u64,
    /// Path lengths, drawn uniformly.
    pub hops: HopRange,
    /// Share of packets on a looping path.
    pub loop_fraction: f64,
    /// Share of IPv6 packets.
    pub v6_fraction: f64,
    /// Packets.
    pub packets: u64,
    /// RNG seed (paths, node ids, mix).
    pub seed: u64,
}

impl Default for IcarusSynthConfig {
    fn default() -> Self {
        IcarusSynthConfig {
            node_id: 1,
            width: FilterWidth::default(),
            k: None,
            domain_seed: DEFAULT_SEED,
            hops: HopRange::default(),
            loop_fraction: 0.1,
            v6_fraction: 0.3,
            packets: 20_000,
            seed: 1,
        }
    }
}

impl IcarusSynthConfig {
    /// The filter parameters (width, k, domain seed), or an error naming the
    /// option at fault.
    pub fn params(&self) -> Result<FilterParams> {
        let k = self.k.unwrap_or(default_k(self.width));
        let m = self.width.bits();
        let p = FilterParams::new(self.width, k).map_err(|_| {
            anyhow!(
                "--k must be in 1..={} for --width {m}, got {k}",
                MAX_K.min(m)
            )
        })?;
        Ok(p.with_seed(self.domain_seed))
    }

    /// Checks every setting; the error names the option.
    pub fn validate(&self) -> Result<FilterParams> {
        let params = self.params()?;
        for (name, f) in [
            ("--loop-fraction", self.loop_fraction),
            ("--v6-fraction", self.v6_fraction),
        ] {
            if !(0.0..=1.0).contains(&f) {
                bail!("{name} must be a number in [0, 1], got {f}");
            }
        }
        if self.hops.min > self.hops.max || self.hops.max > MAX_HOPS {
            bail!(
                "--hops must be a non-empty range within 0..={MAX_HOPS}, got {}..={}",
                self.hops.min,
                self.hops.max
            );
        }
        if self.packets > MAX_PACKETS {
            bail!(
                "--packets must be at most {MAX_PACKETS} for --kind icarus, got {}",
                self.packets
            );
        }
        Ok(params)
    }
}

/// The exact per-hop false-alarm probabilities of the configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MarkovSummary {
    /// `[h, q(h)]` for every path length of the range: the probability that
    /// a loop-free packet that survived `h` hops alarms at the checking node.
    pub per_hops: Vec<(usize, f64)>,
    /// The mean of `q(h)` over the range (the hop mix is uniform).
    pub mix_probability: f64,
    /// `sum q(h)` over the loop-free packets of the file.
    pub expected_false_alarms: f64,
    /// `sqrt(sum q(h) (1 - q(h)))` over the same packets.
    pub sigma: f64,
}

/// `q(h)` for every `h` of `hops` from `F` (see the module docs), or the
/// error for a range whose longest paths mostly die on the way.
fn per_hop_probabilities(m: usize, k: usize, hops: HopRange) -> Result<Vec<(usize, f64)>> {
    let f_max = false_alarm_probability(m, k, hops.max);
    if 1.0 - f_max < MIN_SURVIVAL {
        let mut ok = 0;
        while ok < hops.max && 1.0 - false_alarm_probability(m, k, ok + 1) >= MIN_SURVIVAL {
            ok += 1;
        }
        bail!(
            "--hops {hops}: with m = {m}, k = {k} a loop-free path of {} nodes raises a false \
             alarm on the way with probability {:.1}% (over {:.0}%: most such packets never \
             arrive); use at most {ok} hops, a wider filter or another k",
            hops.max,
            100.0 * f_max,
            100.0 * (1.0 - MIN_SURVIVAL)
        );
    }
    let f: Vec<f64> = (hops.min..=hops.max + 1)
        .map(|h| false_alarm_probability(m, k, h))
        .collect();
    Ok(hops
        .iter()
        .zip(f.windows(2))
        .map(|(h, w)| (h, ((w[1] - w[0]) / (1.0 - w[0])).clamp(0.0, 1.0)))
        .collect())
}

/// One generated packet.
#[derive(Debug, Clone, Copy)]
pub struct SynthPacket<'a> {
    /// Capture time, ns.
    pub ts_ns: u64,
    /// The frame (Ethernet, IP header at [`L3_OFFSET`]).
    pub frame: &'a [u8],
    /// The nodes it went through, in order.
    pub path: &'a [u64],
    /// IPv6 (else IPv4).
    pub v6: bool,
    /// On a loop: the path holds the checking node.
    pub looping: bool,
    /// The filter it carries.
    pub filter: Filter,
    /// The checking node's verdict: the filter holds its whole mask.
    pub detected: bool,
    /// For a loop-free packet, the probability `q(h)` that it is a false
    /// alarm; 1 for a looping one.
    pub alarm_probability: f64,
}

/// An Icarus packet stream (the frame buffer is reused).
#[derive(Debug)]
pub struct IcarusSynth {
    cfg: IcarusSynthConfig,
    deriver: MaskDeriver,
    mask: Filter,
    q: Vec<(usize, f64)>,
    rng: StdRng,
    n: u64,
    path: Vec<u64>,
    frame: Vec<u8>,
}

impl IcarusSynth {
    /// A stream for `cfg`; an error, naming the option, for a bad setting.
    pub fn new(cfg: IcarusSynthConfig) -> Result<Self> {
        let params = cfg.validate()?;
        let q = per_hop_probabilities(params.width().bits(), params.k(), cfg.hops)?;
        let deriver = MaskDeriver::new(params);
        Ok(IcarusSynth {
            mask: deriver.mask(cfg.node_id),
            deriver,
            q,
            cfg,
            rng: StdRng::seed_from_u64(cfg.seed),
            n: 0,
            path: Vec::with_capacity(MAX_HOPS),
            frame: Vec::with_capacity(256),
        })
    }

    /// The filter parameters.
    pub fn params(&self) -> &FilterParams {
        self.deriver.params()
    }

    /// The checking node's mask.
    pub fn mask(&self) -> &Filter {
        &self.mask
    }

    /// `[h, q(h)]` over the hop range (see the module docs).
    pub fn per_hops(&self) -> &[(usize, f64)] {
        &self.q
    }

    /// Total packets the stream yields.
    pub fn len(&self) -> u64 {
        self.cfg.packets
    }

    /// Whether the stream yields nothing.
    pub fn is_empty(&self) -> bool {
        self.cfg.packets == 0
    }

    /// Draws a path of `h` distinct nodes (holding the checking node when
    /// `looping`) on which no node alarms; returns its filter.
    fn draw_path(&mut self, h: usize, looping: bool) -> Result<Filter> {
        let node = self.cfg.node_id;
        for _ in 0..MAX_ATTEMPTS {
            self.path.clear();
            let at = looping.then(|| self.rng.random_range(0..h));
            while self.path.len() < h {
                if at == Some(self.path.len()) {
                    self.path.push(node);
                    continue;
                }
                let id: u64 = self.rng.random();
                if id != node && !self.path.contains(&id) {
                    self.path.push(id);
                }
            }
            let mut f = Filter::empty(self.mask.width());
            let survived = self.path.iter().all(|&id| {
                let m = if id == node {
                    self.mask
                } else {
                    self.deriver.mask(id)
                };
                f.check_and_update(&m) == Hop::Marked
            });
            if survived {
                return Ok(f);
            }
        }
        bail!(
            "packet {}: no path of {h} hops without a false alarm in {MAX_ATTEMPTS} draws",
            self.n
        )
    }

    /// The next packet, `None` after `packets`.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<SynthPacket<'_>>> {
        if self.n >= self.cfg.packets {
            return Ok(None);
        }
        let seq = self.n;
        let v6 = self.rng.random_bool(self.cfg.v6_fraction);
        let looping = self.rng.random_bool(self.cfg.loop_fraction);
        let i = self.rng.random_range(0..self.q.len());
        let (h, q) = self.q[i];
        let h = if looping { h.max(1) } else { h };
        let filter = self.draw_path(h, looping)?;
        let detected = filter.contains_all(&self.mask);
        udp_frame(&mut self.frame, seq, v6, h, looping);
        icarus::insert(&mut self.frame, L3_OFFSET, &filter)
            .map_err(|e| anyhow!("packet {seq}: cannot insert the icarus option: {e}"))?;
        self.n += 1;
        Ok(Some(SynthPacket {
            ts_ns: SYNTH_START_NS + seq * SYNTH_GAP_NS,
            frame: &self.frame,
            path: &self.path,
            v6,
            looping,
            filter,
            detected,
            alarm_probability: if looping { 1.0 } else { q },
        }))
    }
}

/// The ground truth written next to the pcap (`FILE.icarus.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IcarusTruth {
    /// The checking node.
    pub node_id: u64,
    /// Filter bits m.
    pub m: usize,
    /// Mask bits k.
    pub k: usize,
    /// Domain seed (`icarus.seed`).
    pub domain_seed: u64,
    /// Shortest path, hops.
    pub hops_min: usize,
    /// Longest path, hops.
    pub hops_max: usize,
    /// Packets.
    pub packets: u64,
    /// IPv6 packets.
    pub v6_packets: u64,
    /// Packets on a loop (every one is detected).
    pub looping_packets: u64,
    /// Loop-free packets whose filter covers the checking node's mask.
    pub false_alarms: u64,
    /// What the checking node counts in `loops_detected`: looping packets
    /// plus false alarms.
    pub expected_loops_detected: u64,
    /// The exact probabilities.
    pub markov: MarkovSummary,
    /// Per packet: on a loop.
    pub looping: Vec<bool>,
    /// Per packet: path length (nodes before the checking node's visit now).
    pub hops: Vec<u8>,
    /// Per packet: IPv6.
    pub v6: Vec<bool>,
    /// Per packet: the checking node's exact verdict (true: a loop, counted
    /// and dropped under `on_loop = "drop"`).
    pub detected: Vec<bool>,
}

impl IcarusTruth {
    /// Loop-free packets.
    pub fn loop_free_packets(&self) -> u64 {
        self.packets - self.looping_packets
    }

    /// The summary lines `traffic-gen synth --kind icarus` prints.
    pub fn summary(&self) -> String {
        let free = self.loop_free_packets();
        let pct = |n: u64| {
            if free == 0 {
                0.0
            } else {
                100.0 * n as f64 / free as f64
            }
        };
        let mk = &self.markov;
        format!(
            "icarus: m = {}, k = {}, domain seed {:#x}, checking node {}, hops {}\n\
             on a loop: {} (all detected)\n\
             loop-free: {}, false alarms {} = {:.4}% (expected {:.1} +- {:.1}; \
             Markov chain: {:.4}% for this hop mix)\n\
             node {} counts loops_detected = {} and drops them under on_loop = \"drop\"",
            self.m,
            self.k,
            self.domain_seed,
            self.node_id,
            HopRange {
                min: self.hops_min,
                max: self.hops_max
            },
            self.looping_packets,
            free,
            self.false_alarms,
            pct(self.false_alarms),
            mk.expected_false_alarms,
            mk.sigma,
            100.0 * mk.mix_probability,
            self.node_id,
            self.expected_loops_detected,
        )
    }
}

/// Generates the workload, calling `sink` for each packet; returns the truth.
pub fn generate(
    cfg: IcarusSynthConfig,
    mut sink: impl FnMut(&SynthPacket<'_>) -> Result<()>,
) -> Result<IcarusTruth> {
    let mut s = IcarusSynth::new(cfg)?;
    let per_hops = s.per_hops().to_vec();
    let mix_probability = per_hops.iter().map(|&(_, q)| q).sum::<f64>() / per_hops.len() as f64;
    let params = *s.params();
    let cap = cfg.packets.min(1 << 20) as usize;
    let mut t = IcarusTruth {
        node_id: cfg.node_id,
        m: params.width().bits(),
        k: params.k(),
        domain_seed: params.seed(),
        hops_min: cfg.hops.min,
        hops_max: cfg.hops.max,
        packets: 0,
        v6_packets: 0,
        looping_packets: 0,
        false_alarms: 0,
        expected_loops_detected: 0,
        markov: MarkovSummary {
            per_hops,
            mix_probability,
            expected_false_alarms: 0.0,
            sigma: 0.0,
        },
        looping: Vec::with_capacity(cap),
        hops: Vec::with_capacity(cap),
        v6: Vec::with_capacity(cap),
        detected: Vec::with_capacity(cap),
    };
    let mut var = 0.0;
    while let Some(p) = s.next()? {
        sink(&p)?;
        t.packets += 1;
        t.v6_packets += u64::from(p.v6);
        t.looping_packets += u64::from(p.looping);
        t.false_alarms += u64::from(!p.looping && p.detected);
        t.expected_loops_detected += u64::from(p.detected);
        if !p.looping {
            t.markov.expected_false_alarms += p.alarm_probability;
            var += p.alarm_probability * (1.0 - p.alarm_probability);
        }
        t.looping.push(p.looping);
        t.hops.push(p.path.len() as u8);
        t.v6.push(p.v6);
        t.detected.push(p.detected);
    }
    t.markov.sigma = var.sqrt();
    Ok(t)
}

/// Writes the workload to a pcap at `path` and its truth to `path` +
/// `.icarus.json`; returns the truth.
pub fn write_pcap(cfg: IcarusSynthConfig, path: &Path) -> Result<IcarusTruth> {
    // Validate before creating the file, so a bad option leaves nothing behind.
    IcarusSynth::new(IcarusSynthConfig { packets: 0, ..cfg })?;
    let mut w = CaptureWriter::create(path, LinkType::Ethernet, 65535)
        .with_context(|| format!("{}: cannot create", path.display()))?;
    let truth = generate(cfg, |p| {
        w.write(p.ts_ns, p.frame.len() as u32, p.frame)
            .with_context(|| format!("{}: write failed", path.display()))
    })?;
    w.finish()
        .with_context(|| format!("{}: write failed", path.display()))?;
    write_sidecar(path, TRUTH_SUFFIX, &truth)?;
    Ok(truth)
}

/// What the truth file's name adds to the capture's.
const TRUTH_SUFFIX: &str = ".icarus.json";

/// The truth path for a pcap path (`path` + `.icarus.json`).
pub fn truth_path(path: &Path) -> std::path::PathBuf {
    sidecar_path(path, TRUTH_SUFFIX)
}

/// Ethernet + IPv4/IPv6 + UDP with correct checksums and the 16-byte
/// payload of the module docs, into `out` (cleared first).
fn udp_frame(out: &mut Vec<u8>, seq: u64, v6: bool, hops: usize, looping: bool) {
    const PAYLOAD: usize = 16;
    out.clear();
    let addrs = if v6 {
        Addrs::V6 {
            src: Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, (seq >> 16) as u16, seq as u16),
            dst: Ipv6Addr::new(0x2001, 2, 0, 1, 0, 0, 0, 1),
        }
    } else {
        Addrs::V4 {
            src: Ipv4Addr::new(198, 18, (seq >> 8) as u8, seq as u8),
            dst: Ipv4Addr::new(198, 19, 0, 1),
        }
    };
    let ip = IpHeader {
        ttl: 255 - hops.min(MAX_HOPS) as u8,
        ident: seq as u16,
        dont_fragment: true,
        ..IpHeader::new(addrs, PROTO_UDP)
    };
    build::ethernet(
        out,
        [0x02, 0, 0, 0, 0, 2],
        [0x02, 0, 0, 0, 0, 1],
        ip.ethertype(),
    );
    ip.push(out, UDP_LEN + PAYLOAD);
    let l4 = out.len();
    build::udp(out, 1024 + (seq % 60_000) as u16, 9, PAYLOAD);
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend_from_slice(&[hops.min(255) as u8, u8::from(looping), 0, 0, 0, 0, 0, 0]);
    udp_checksum(out, l4, &ip);
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::stage::icarus::filter_after_hops;
    use dataplane::wire::parse;

    #[test]
    fn hop_ranges_parse() {
        assert_eq!("7".parse(), Ok(HopRange::exactly(7)));
        assert_eq!("0..10".parse(), Ok(HopRange { min: 0, max: 9 }));
        assert_eq!(" 2 ..= 5 ".parse(), Ok(HopRange { min: 2, max: 5 }));
        assert_eq!(HopRange { min: 2, max: 5 }.to_string(), "2..=5");
        assert_eq!(HopRange::exactly(3).to_string(), "3");
        for bad in [
            "", "x", "5..5", "5..3", "5..=3", "0..=65", "65", "-1", "1..=", "..3",
        ] {
            assert!(bad.parse::<HopRange>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn widths_and_fractions_parse() {
        assert_eq!(parse_width("64"), Ok(FilterWidth::M64));
        assert_eq!(parse_width("256"), Ok(FilterWidth::M256));
        assert!(parse_width("100").unwrap_err().contains("64, 128 or 256"));
        assert_eq!(parse_seed("0x6963_6172_7573_2d31"), Ok(DEFAULT_SEED));
        assert_eq!(parse_seed("42"), Ok(42));
        assert!(parse_seed("0x1_0000_0000_0000_0000").is_err());
        assert!(parse_seed("-1").is_err());
        assert_eq!(parse_fraction("0.25"), Ok(0.25));
        for bad in ["-0.1", "1.5", "NaN", "inf", "x"] {
            assert!(parse_fraction(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn bad_settings_name_the_option() {
        let err = |c: IcarusSynthConfig| IcarusSynth::new(c).unwrap_err().to_string();
        let d = IcarusSynthConfig::default();
        assert!(err(IcarusSynthConfig { k: Some(0), ..d }).contains("--k"));
        assert!(
            err(IcarusSynthConfig {
                k: Some(33),
                width: FilterWidth::M64,
                ..d
            })
            .contains("--k must be in 1..=32 for --width 64")
        );
        assert!(
            err(IcarusSynthConfig {
                loop_fraction: f64::NAN,
                ..d
            })
            .contains("--loop-fraction")
        );
        assert!(
            err(IcarusSynthConfig {
                v6_fraction: 2.0,
                ..d
            })
            .contains("--v6-fraction")
        );
        let long = err(IcarusSynthConfig {
            width: FilterWidth::M64,
            k: Some(1),
            hops: HopRange { min: 0, max: 64 },
            ..d
        });
        assert!(
            long.contains("--hops 0..=64") && long.contains("use at most"),
            "{long}"
        );
        assert!(
            err(IcarusSynthConfig {
                hops: HopRange { min: 3, max: 2 },
                ..d
            })
            .contains("--hops")
        );
    }

    /// Every packet parses, carries the filter of its path, which
    /// `filter_after_hops` agrees with, and the verdict is the mask test.
    #[test]
    fn packets_carry_the_filter_of_their_path() {
        for width in FilterWidth::ALL {
            let cfg = IcarusSynthConfig {
                width,
                hops: HopRange { min: 0, max: 12 },
                loop_fraction: 0.3,
                v6_fraction: 0.5,
                packets: 300,
                ..IcarusSynthConfig::default()
            };
            let mut s = IcarusSynth::new(cfg).unwrap();
            let params = *s.params();
            let mask = *s.mask();
            let (mut v6, mut looping) = (0, 0);
            while let Some(p) = s.next().unwrap() {
                assert!(parse(LinkType::Ethernet, p.frame).is_ok());
                let loc = icarus::find(p.frame, L3_OFFSET).unwrap().unwrap();
                assert_eq!(loc.filter(p.frame), Some(p.filter));
                assert_eq!(p.filter, filter_after_hops(p.path, &params));
                assert_eq!(p.detected, p.filter.contains_all(&mask));
                assert_eq!(p.looping, p.path.contains(&cfg.node_id));
                if p.looping {
                    assert!(p.detected && !p.path.is_empty());
                }
                let mut ids = p.path.to_vec();
                ids.sort_unstable();
                ids.dedup();
                assert_eq!(ids.len(), p.path.len(), "distinct nodes");
                assert!(p.path.len() <= 12);
                v6 += u32::from(p.v6);
                looping += u32::from(p.looping);
            }
            assert!((100..200).contains(&v6) && (50..150).contains(&looping));
        }
    }

    #[test]
    fn stream_is_deterministic() {
        let collect = |seed| {
            let mut s = IcarusSynth::new(IcarusSynthConfig {
                packets: 500,
                seed,
                ..IcarusSynthConfig::default()
            })
            .unwrap();
            let mut v = Vec::new();
            while let Some(p) = s.next().unwrap() {
                v.push((p.ts_ns, p.frame.to_vec()));
            }
            v
        };
        assert_eq!(collect(1), collect(1));
        assert_ne!(collect(1), collect(2));
    }

    #[test]
    fn conditional_probabilities() {
        let q = per_hop_probabilities(128, 10, HopRange { min: 0, max: 10 }).unwrap();
        assert_eq!(q[0], (0, 0.0));
        // One earlier node covers the mask only with the very same mask.
        assert!(q[1].1 > 0.0 && q[1].1 < 1e-12);
        assert!(q.windows(2).all(|w| w[0].1 <= w[1].1));
        let (f10, f11) = (
            false_alarm_probability(128, 10, 10),
            false_alarm_probability(128, 10, 11),
        );
        assert!((q[10].1 - (f11 - f10) / (1.0 - f10)).abs() < 1e-15);
    }
}
