//! The synthetic workload of the built-in router (`default-router.toml`):
//! a seeded stream of Ethernet frames, each with its ingress port, in
//! which every stage of that router has real work, and the exact ground
//! truth of what the router must do with it.
//!
//! # The router
//!
//! The workload reads the router's own configuration (the file `traffic-gen
//! replay` runs when given none): ports `r-a` = 0, `r-b` = 1, `r-c` = 2 by
//! the order of its interfaces; `r-b`'s shaped rate (20 Mbit/s behind SFB)
//! and static group (239.1.1.1); the multicast membership interval
//! (260 s); the heavy-flow epoch (1 s); the Icarus node (42), its filter
//! parameters (m = 128, the dataplane's default k, the default domain
//! seed) and its edge ports (insert on `r-a` and `r-b`).
//!
//! # The traffic
//!
//! Packets are [`RouterSynth::gap_ns`] apart in capture time from
//! [`SYNTH_START_NS`] (about 155 microseconds; the gap is computed, see
//! *Rates*). Every [`RouterSynth::unresponsive_every`]-th packet is the
//! unresponsive flow; a control message takes the first other slot at or
//! after its planned time; every other slot draws its class at random:
//!
//! * **Zipf unicast, `r-a` -> hosts behind `r-b`** (64 % of the drawn
//!   slots): [`RouterSynthConfig::flows`] flows with Zipf exponent
//!   [`RouterSynthConfig::zipf_s`] ([`ZipfFlows`], as `synth --kind zipf`
//!   draws them); each flow, from a hash of its id and the seed, is IPv6
//!   or IPv4 (1 in 4 IPv6), TCP or UDP (60 % TCP), and ECT(0) or not
//!   ECN-capable (30 % ECT(0)); each frame's size is drawn in 64..=1500 (at
//!   least its headers). `10.0.0.0/8` -> `172.16.0.0/12`, `2001:db8:a::/48`
//!   -> `2001:db8:b::/48`. (Sizes per packet rather than per flow: a flow
//!   whose one size were 1500 bytes would make the heaviest Zipf flow
//!   alone a quarter of `r-b`'s load, and no unresponsive rate would then
//!   reach 5 fair shares, see *Rates*.)
//! * **The unresponsive flow**, `r-a` -> `r-b`: UDP, not ECN-capable,
//!   1250-byte frames at a constant rate, `10.255.255.254:4000 ->
//!   172.31.255.254:4000`.
//! * **Reverse traffic**, `r-b` -> `r-a` (16 %): for a Zipf-drawn flow, a
//!   small frame the other way (a TCP ACK with 10 bytes of payload, or a
//!   UDP datagram of the same size), not ECN-capable.
//! * **Multicast data from `r-a`** (8 %): half to 239.1.1.1 (static on
//!   `r-b`; 1358-byte frames, a video stream), 35 % to the groups joined on
//!   `r-c`, 15 % to groups nobody joined (239.3.0.1-8, ff0e::3:1-4; 242- or
//!   262-byte frames for these two kinds).
//! * **IGMPv3 and MLDv2 reports on `r-c`**: joins of 239.2.0.1-16 and
//!   ff0e::2:1-8 in the first 25 ms, refreshed every 10 s, and one leave
//!   (239.2.0.16, `CHANGE_TO_INCLUDE({})`) half-way through the run.
//! * **Icarus packets on `r-c`** (12 %), from other routers of the domain
//!   to hosts behind `r-a`: UDP with the IPv4 option or the IPv6
//!   hop-by-hop option as [`IcarusSynth`] builds them after 1..=10 hops,
//!   10 % of them on a loop through node 42 (their filter holds its whole
//!   mask), 30 % IPv6.
//!
//! The router has wires, not routes: what arrives on `r-a` leaves by
//! `r-b`, what arrives on `r-b` or `r-c` leaves by `r-a`.
//!
//! # Rates
//!
//! The gap and the unresponsive flow's period are solved when the stream
//! is made, from the expected per-flow demands (the Zipf probabilities and
//! frame sizes are known exactly), so that
//!
//! * the traffic offered to `r-b` (Zipf + unresponsive + 239.1.1.1) is
//!   [`RouterSynthConfig::load`] (1.5) times its shaped rate, and
//! * the unresponsive flow sends [`RouterSynthConfig::unresponsive_shares`]
//!   (5) times the max-min fair share of `r-b` among the flows offered to
//!   it (the level `L` with `sum min(demand, L) = rate`: with Zipf
//!   demands the heaviest few flows are cut to `L`, here about 0.5 Mbit/s;
//!   an equal split among 10,000 flows, most of which hardly send, would
//!   make "5 shares" a trickle).
//!
//! The unresponsive flow lifts the fair share it is measured against, so
//! the ratio first rises with its rate and then falls: where the target is
//! out of reach (much heavier Zipf flows, e.g. s = 1.4) the nearest ratio
//! is taken and the truth says what it is.
//!
//! With the defaults (200,000 packets, 10,000 flows, s = 1.1, seed 1) the
//! gap is 154.6 us and the run spans 30.9 s, 31 one-second epochs. `r-b`
//! is offered 30.1 Mbit/s (1.50 x 20 Mbit/s): Zipf 25.0, the unresponsive
//! flow 2.3 (every 28th packet; 5.0 fair shares of 466 kbit/s) and
//! 239.1.1.1 2.8. Of the packets, Zipf frames are 62 % (79 % of the
//! bytes), reverse frames 15 %, multicast data 8 %, Icarus packets 12 %
//! (10 % of them holding node 42's mask), the unresponsive flow 3.6 %,
//! reports 95 packets; 30 % of the 7,563 Zipf flows that send are ECT(0).
//! Other seeds measure within a few hundredths of these. The truth
//! measures all of this on the stream itself ([`RouterTruth`]); the tests
//! hold it within the bounds they document.
//!
//! # The truth
//!
//! [`write_pcapng`] writes a pcapng with one interface per port, named as
//! the router names them, and `FILE.router.json` ([`RouterTruth`]): counts
//! and bytes per class; the offered load, fair share and unresponsive
//! rate; per Icarus packet whether its filter holds node 42's whole mask
//! (computed with the dataplane's mask function and an exact subset test);
//! per multicast data packet the exact egress ports (those with a current
//! member of the group, less the ingress; data never goes to a group whose
//! membership changes within [`SLOP_NS`] of it, as in `synth/mcast.rs`);
//! and per heavy-flow epoch (`[k s, (k + 1) s)` of capture time, aligned
//! as `stage/heavy.rs` aligns them) every flow's exact bytes and packets.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use anyhow::{Result, anyhow, bail};
use dataplane::config::RouterConfig;
use dataplane::stage::icarus::IcarusConfig;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::synth::icarus::{HopRange, IcarusSynth, IcarusSynthConfig};
use crate::synth::mcast::{Ctl, Model, write_control_frame, write_data_frame};
use crate::synth::{SYNTH_START_NS, ZipfFlows};
use dataplane::wire::build::{
    self, Addrs, ECT0, ETH_LEN, IpHeader, PROTO_TCP, PROTO_UDP, TCP_ACK, TCP_LEN, TCP_PSH_ACK,
    UDP_LEN, tcp_checksum, udp_checksum,
};

mod truth;

pub use truth::{
    Count, EpochFlow, EpochTruth, IcarusTruthPacket, McastTruthPacket, RouterTruth, generate,
    truth_path, write_pcapng,
};

/// The built-in router's configuration.
const ROUTER_TOML: &str = include_str!("../../default-router.toml");

/// The most Zipf flows (their addresses must stay distinct).
pub const MAX_FLOWS: u32 = 1 << 19;

/// What a drawn slot (neither the unresponsive flow's nor a control
/// message's) carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Draw {
    Zipf,
    Reverse,
    Multicast,
    Icarus,
}

/// The chances of each [`Draw`].
const SLOT_WEIGHTS: [(Draw, f64); 4] = [
    (Draw::Zipf, 0.64),
    (Draw::Reverse, 0.16),
    (Draw::Multicast, 0.08),
    (Draw::Icarus, 0.12),
];

/// Of multicast data: the share to the static group and to the joined
/// groups (the rest goes to groups nobody joined).
const MCAST_STATIC: f64 = 0.5;
const MCAST_JOINED: f64 = 0.35;

/// Frame sizes: the unresponsive flow, data to the static group, other
/// multicast data (IPv4; IPv6 is 20 bytes longer).
const UNRESPONSIVE_FRAME: usize = 1250;
const STATIC_PAYLOAD: usize = 1316;
const OTHER_PAYLOAD: usize = 200;

/// Joined groups: 239.2.0.1-16 and ff0e::2:1-8; groups nobody joins:
/// 239.3.0.1-8 and ff0e::3:1-4.
const JOINED_V4: u16 = 16;
const JOINED_V6: u16 = 8;
const UNJOINED_V4: u16 = 8;
const UNJOINED_V6: u16 = 4;

/// Reports are refreshed this often.
pub const REFRESH_NS: u64 = 10_000_000_000;

/// No multicast data within this long of a membership change of its group.
pub const SLOP_NS: u64 = 2_000_000_000;

/// Settings of the router workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RouterSynthConfig {
    /// Packets (all classes).
    pub packets: u64,
    /// Zipf flows.
    pub flows: u32,
    /// Zipf exponent.
    pub zipf_s: f64,
    /// RNG seed (classes, flows, Icarus paths).
    pub seed: u64,
    /// Traffic offered to `r-b` over its shaped rate.
    pub load: f64,
    /// The unresponsive flow's rate in max-min fair shares of `r-b`.
    pub unresponsive_shares: f64,
}

impl Default for RouterSynthConfig {
    fn default() -> Self {
        RouterSynthConfig {
            packets: 200_000,
            flows: 10_000,
            zipf_s: 1.1,
            seed: 1,
            load: 1.5,
            unresponsive_shares: 5.0,
        }
    }
}

/// What a packet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// A Zipf flow's packet, `r-a` -> `r-b`.
    Zipf,
    /// The unresponsive flow, `r-a` -> `r-b`.
    Unresponsive,
    /// A small frame back, `r-b` -> `r-a`.
    Reverse,
    /// Multicast data from `r-a` to the static group of `r-b`.
    McastStatic,
    /// Multicast data from `r-a` to a group joined on `r-c`.
    McastJoined,
    /// Multicast data from `r-a` to a group nobody joined.
    McastUnjoined,
    /// A packet carrying an Icarus filter, `r-c` -> `r-a`.
    Icarus,
    /// An IGMPv3 or MLDv2 report on `r-c`.
    Control,
}

/// The Icarus facts of a packet of [`Class::Icarus`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IcarusMark {
    /// The filter holds the router's whole mask: the router counts a loop
    /// and drops the packet.
    pub holds_mask: bool,
    /// The packet went through the router before (a real loop; otherwise
    /// a packet that holds the mask is a false alarm).
    pub looping: bool,
}

/// One packet of the stream.
#[derive(Debug, Clone, Copy)]
pub struct RouterPacket<'a> {
    /// Capture time, ns.
    pub ts_ns: u64,
    /// Ingress port (`r-a` = 0, `r-b` = 1, `r-c` = 2).
    pub port: u8,
    /// The Ethernet frame.
    pub frame: &'a [u8],
    /// What it is.
    pub class: Class,
    /// Multicast data: the group and the exact egress ports (bit `i` =
    /// port `i`).
    pub multicast: Option<(IpAddr, u64)>,
    /// Icarus packets: the router's verdict.
    pub icarus: Option<IcarusMark>,
}

/// What the workload takes from the router's configuration.
#[derive(Debug, Clone)]
struct Router {
    names: Vec<String>,
    a: u8,
    b: u8,
    c: u8,
    rate_bps: u64,
    static_group: Ipv4Addr,
    membership_interval_ns: u64,
    epoch_ns: u64,
    icarus: IcarusConfig,
}

impl Router {
    fn load() -> Result<Router> {
        let cfg = RouterConfig::from_toml_str(ROUTER_TOML, "default-router.toml")
            .map_err(|e| anyhow!("{e}"))?;
        let port = |name: &str| {
            cfg.port_of(name)
                .ok_or_else(|| anyhow!("the built-in router has no interface {name}"))
        };
        let (a, b, c) = (port("r-a")?, port("r-b")?, port("r-c")?);
        let rb = &cfg.interfaces[usize::from(b)];
        let rate_bps = rb
            .egress
            .map(|e| e.rate_bps)
            .filter(|&r| r > 0)
            .ok_or_else(|| anyhow!("the built-in router does not shape r-b"))?;
        let static_group = rb
            .multicast_groups
            .iter()
            .find_map(|g| match g {
                IpAddr::V4(g) => Some(*g),
                IpAddr::V6(_) => None,
            })
            .ok_or_else(|| anyhow!("the built-in router has no IPv4 static group on r-b"))?;
        let mc = cfg
            .multicast_config()
            .ok_or_else(|| anyhow!("the built-in router has no multicast stage"))?;
        let epoch_ns = cfg
            .heavy_config()
            .and_then(|h| h.epoch_ns)
            .ok_or_else(|| anyhow!("the built-in router has no heavy-flow epochs"))?;
        let icarus = cfg
            .icarus_config()
            .ok_or_else(|| anyhow!("the built-in router has no icarus stage"))?;
        Ok(Router {
            names: cfg.interfaces.iter().map(|i| i.name.clone()).collect(),
            a,
            b,
            c,
            rate_bps,
            static_group,
            membership_interval_ns: mc.membership_interval_ms.saturating_mul(1_000_000),
            epoch_ns,
            icarus,
        })
    }
}

/// Zipf frames are this long (at least their headers), drawn per packet.
const ZIPF_SIZES: std::ops::RangeInclusive<usize> = 64..=1500;

/// A Zipf flow's fixed attributes.
#[derive(Debug, Clone, Copy)]
struct Flow {
    addrs: Addrs,
    tcp: bool,
    ect0: bool,
    sport: u16,
    dport: u16,
}

/// SplitMix64's finaliser: a well-mixed 64-bit hash of `x`.
fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Flow {
    /// Flow `id`'s attributes under `seed` (see the module docs).
    fn of(id: u32, seed: u64) -> Flow {
        let h = mix64(u64::from(id) ^ mix64(seed));
        let tcp = (h >> 8) % 10 < 6;
        let n = id + 1;
        let addrs = if h % 4 == 3 {
            Addrs::V6 {
                src: Ipv6Addr::new(0x2001, 0xdb8, 0xa, 0, 0, 0, (n >> 16) as u16, n as u16),
                dst: Ipv6Addr::new(0x2001, 0xdb8, 0xb, 0, 0, 0, (n >> 16) as u16, n as u16),
            }
        } else {
            Addrs::V4 {
                src: Ipv4Addr::from(0x0a00_0000 | n),
                dst: Ipv4Addr::from(0xac10_0000 | n),
            }
        };
        Flow {
            addrs,
            tcp,
            ect0: (h >> 16) % 10 < 3,
            sport: 1024 + (id % 60_000) as u16,
            dport: if tcp { 80 } else { 443 },
        }
    }

    /// The mean length of the flow's forward frames: a size drawn from
    /// [`ZIPF_SIZES`], at least the headers.
    fn mean_frame_len(&self) -> f64 {
        let hdr = self.header_len();
        let sum: usize = ZIPF_SIZES.map(|s| s.max(hdr)).sum();
        sum as f64 / ZIPF_SIZES.count() as f64
    }

    fn header_len(&self) -> usize {
        let ip = match self.addrs {
            Addrs::V4 { .. } => 20,
            Addrs::V6 { .. } => 40,
        };
        ETH_LEN + ip + if self.tcp { TCP_LEN } else { UDP_LEN }
    }
}

/// The MAC of the host behind `port` (`02:00:00:00:PORT:01`) and of the
/// router's port (`02:00:00:00:PORT:fe`).
fn host_mac(port: u8) -> [u8; 6] {
    [0x02, 0, 0, 0, port, 0x01]
}

fn router_mac(port: u8) -> [u8; 6] {
    [0x02, 0, 0, 0, port, 0xfe]
}

/// Writes a unicast frame from a host behind `port` into `out` (cleared
/// first): `len` bytes (at least the headers), TCP (`flags`) or UDP,
/// payload zero.
#[allow(clippy::too_many_arguments)]
fn unicast_frame(
    out: &mut Vec<u8>,
    port: u8,
    addrs: Addrs,
    tcp: bool,
    tos: u8,
    (sport, dport): (u16, u16),
    seq: u32,
    flags: u8,
    len: usize,
) {
    out.clear();
    let ip = IpHeader {
        tos,
        ident: seq as u16,
        ..IpHeader::new(addrs, if tcp { PROTO_TCP } else { PROTO_UDP })
    };
    let l4 = ETH_LEN + ip.len();
    let l4_len = if tcp { TCP_LEN } else { UDP_LEN };
    let len = len.max(l4 + l4_len);
    build::ethernet(out, router_mac(port), host_mac(port), ip.ethertype());
    ip.push(out, len - l4);
    if tcp {
        build::tcp(out, sport, dport, seq, seq ^ 0x5a5a_5a5a, flags);
    } else {
        build::udp(out, sport, dport, len - l4 - l4_len);
    }
    out.resize(len, 0);
    if tcp {
        tcp_checksum(out, l4, &ip);
    } else {
        udp_checksum(out, l4, &ip);
    }
}

/// The max-min fair share of `capacity` among `demands` (sorted in
/// place): the level `L` with `sum min(d, L) = capacity`; `None` when every
/// demand fits.
pub fn max_min_share(capacity: f64, demands: &mut [f64]) -> Option<f64> {
    demands.sort_by(f64::total_cmp);
    let mut left = capacity;
    let n = demands.len();
    for (i, &d) in demands.iter().enumerate() {
        let share = left / (n - i) as f64;
        if d >= share {
            return Some(share);
        }
        left -= d;
    }
    None
}

/// The solved rates: nanoseconds between packets and the unresponsive
/// flow's period in packets.
#[derive(Debug, Clone, Copy)]
struct Rates {
    gap_ns: u64,
    unresponsive_every: u64,
}

/// Solves the gap and the unresponsive period (module docs, *Rates*) from
/// the expected demands.
fn solve_rates(cfg: &RouterSynthConfig, zipf: &ZipfFlows, rate_bps: u64) -> Result<Rates> {
    let w = |d: Draw| SLOT_WEIGHTS.iter().find(|x| x.0 == d).map_or(0.0, |x| x.1);
    // Bits per drawn slot of each flow offered to r-b.
    let mut base: Vec<f64> = zipf
        .probabilities()
        .iter()
        .enumerate()
        .map(|(id, p)| w(Draw::Zipf) * p * 8.0 * Flow::of(id as u32, cfg.seed).mean_frame_len())
        .collect();
    let static_len = (ETH_LEN + 20 + UDP_LEN + STATIC_PAYLOAD) as f64;
    base.push(w(Draw::Multicast) * MCAST_STATIC * 8.0 * static_len);
    let base_total: f64 = base.iter().sum();
    let cap = rate_bps as f64;
    let unresponsive_bits = 8.0 * UNRESPONSIVE_FRAME as f64;
    // For a share x of the slots taken by the unresponsive flow: the slot
    // rate that makes the load right, and the unresponsive rate over the
    // fair share it leads to.
    let solve = |x: f64| -> (f64, f64) {
        let per_slot = (1.0 - x) * base_total + x * unresponsive_bits;
        let slots_per_sec = cfg.load * cap / per_slot;
        let u = slots_per_sec * x * unresponsive_bits;
        let mut d: Vec<f64> = base.iter().map(|b| slots_per_sec * (1.0 - x) * b).collect();
        d.push(u);
        let level = max_min_share(cap, &mut d).unwrap_or(cap);
        (slots_per_sec, u / level)
    };
    // The ratio rises with x, then falls again (a large flow lifts the
    // fair share itself). Take the least x that reaches the target, or the
    // x nearest to it when none does (heavy Zipf flows can make the target
    // unreachable: the truth reports what was reached).
    let grid: Vec<f64> = (0..=60)
        .map(|i| 1e-4 * 5000f64.powf(f64::from(i) / 60.0))
        .collect();
    let x = match grid
        .iter()
        .position(|&x| solve(x).1 >= cfg.unresponsive_shares)
    {
        Some(0) => grid[0],
        Some(i) => {
            let (mut lo, mut hi) = (grid[i - 1], grid[i]);
            for _ in 0..50 {
                let mid = 0.5 * (lo + hi);
                if solve(mid).1 < cfg.unresponsive_shares {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            hi
        }
        None => grid
            .iter()
            .copied()
            .max_by(|a, b| solve(*a).1.total_cmp(&solve(*b).1))
            .unwrap_or(0.05),
    };
    let every = (1.0 / x).round().clamp(2.0, 1e9) as u64;
    let (slots_per_sec, _) = solve(1.0 / every as f64);
    Ok(Rates {
        gap_ns: (1e9 / slots_per_sec).round().max(1.0) as u64,
        unresponsive_every: every,
    })
}

/// The router workload as a stream (one frame buffer, reused).
#[derive(Debug)]
pub struct RouterSynth {
    cfg: RouterSynthConfig,
    router: Router,
    rates: Rates,
    rng: StdRng,
    zipf: ZipfFlows,
    icarus: IcarusSynth,
    /// Group 0 is the static group, then the joined, then the unjoined.
    groups: Vec<IpAddr>,
    /// Planned reports: (time, group, join or leave), by time.
    controls: Vec<(u64, u32, Ctl)>,
    next_control: usize,
    /// Per group, the times its membership changes.
    changes: Vec<Vec<u64>>,
    model: Model,
    sink: Vec<(u32, u64)>,
    frame: Vec<u8>,
    n: u64,
}

impl RouterSynth {
    /// A stream for `cfg`; an error, naming the setting, for a bad one.
    pub fn new(cfg: RouterSynthConfig) -> Result<Self> {
        if cfg.flows > MAX_FLOWS {
            bail!(
                "--flows must be at most {MAX_FLOWS} for --kind router, got {}",
                cfg.flows
            );
        }
        if !(cfg.load.is_finite() && cfg.load > 0.0) {
            bail!("the load must be a positive number, got {}", cfg.load);
        }
        if !(cfg.unresponsive_shares.is_finite() && cfg.unresponsive_shares > 0.0) {
            bail!(
                "the unresponsive shares must be a positive number, got {}",
                cfg.unresponsive_shares
            );
        }
        let router = Router::load()?;
        let zipf = ZipfFlows::new(cfg.flows, cfg.zipf_s)?;
        let rates = solve_rates(&cfg, &zipf, router.rate_bps)?;
        let params = router.icarus.params;
        let icarus = IcarusSynth::new(IcarusSynthConfig {
            node_id: router.icarus.node_id,
            width: params.width(),
            k: Some(params.k()),
            domain_seed: params.seed(),
            hops: HopRange { min: 1, max: 10 },
            loop_fraction: 0.1,
            v6_fraction: 0.3,
            packets: cfg.packets,
            seed: mix64(cfg.seed ^ 0x1ca2),
        })?;
        let mut groups = vec![IpAddr::V4(router.static_group)];
        groups.extend((1..=JOINED_V4).map(|i| IpAddr::V4(Ipv4Addr::new(239, 2, 0, i as u8))));
        groups.extend(
            (1..=JOINED_V6).map(|i| IpAddr::V6(Ipv6Addr::new(0xff0e, 0, 0, 0, 0, 0, 2, i))),
        );
        groups.extend((1..=UNJOINED_V4).map(|i| IpAddr::V4(Ipv4Addr::new(239, 3, 0, i as u8))));
        groups.extend(
            (1..=UNJOINED_V6).map(|i| IpAddr::V6(Ipv6Addr::new(0xff0e, 0, 0, 0, 0, 0, 3, i))),
        );
        let end = SYNTH_START_NS + cfg.packets * rates.gap_ns;
        let controls = plan_controls(end, rates.gap_ns * cfg.packets);
        // Every membership change, by group: joins and the leave, and the
        // expiries a run longer than the membership interval would bring.
        let mut model = Model::with_interval(router.membership_interval_ns);
        let mut found = Vec::new();
        for &(t, g, c) in &controls {
            model.expire(t, &mut found);
            model.apply(t, usize::from(router.c), g, c, &mut found);
        }
        model.expire(
            end.saturating_add(router.membership_interval_ns),
            &mut found,
        );
        let mut changes = vec![Vec::new(); groups.len()];
        for (g, t) in found {
            changes[g as usize].push(t);
        }
        for v in &mut changes {
            v.sort_unstable();
        }
        let mut model = Model::with_interval(router.membership_interval_ns);
        model.add_static(usize::from(router.b), 0);
        Ok(RouterSynth {
            cfg,
            router,
            rates,
            rng: StdRng::seed_from_u64(cfg.seed),
            zipf,
            icarus,
            groups,
            controls,
            next_control: 0,
            changes,
            model,
            sink: Vec::new(),
            frame: Vec::with_capacity(2048),
            n: 0,
        })
    }

    /// Capture time between packets, ns.
    pub fn gap_ns(&self) -> u64 {
        self.rates.gap_ns
    }

    /// The unresponsive flow sends every this many packets.
    pub fn unresponsive_every(&self) -> u64 {
        self.rates.unresponsive_every
    }

    /// The capture time the run spans (packets x gap), ns.
    pub fn duration_ns(&self) -> u64 {
        self.cfg.packets * self.rates.gap_ns
    }

    /// The interface names, by port.
    pub fn interface_names(&self) -> &[String] {
        &self.router.names
    }

    /// The multicast groups the workload uses (static, joined, unjoined).
    pub fn groups(&self) -> &[IpAddr] {
        &self.groups
    }

    /// Total packets the stream yields.
    pub fn len(&self) -> u64 {
        self.cfg.packets
    }

    /// Whether the stream yields nothing.
    pub fn is_empty(&self) -> bool {
        self.cfg.packets == 0
    }

    /// Whether group `g` has no membership change within [`SLOP_NS`] of `t`.
    fn quiet(&self, g: u32, t: u64) -> bool {
        let v = &self.changes[g as usize];
        let i = v.partition_point(|&c| c < t.saturating_sub(SLOP_NS));
        v.get(i).is_none_or(|&c| c > t + SLOP_NS)
    }

    /// The next packet, `None` after `packets`. An error only if no Icarus
    /// path survives its hops in a thousand draws (see `synth/icarus.rs`).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<RouterPacket<'_>>> {
        if self.n >= self.cfg.packets {
            return Ok(None);
        }
        let i = self.n;
        self.n += 1;
        let ts = SYNTH_START_NS + i * self.rates.gap_ns;
        let every = self.rates.unresponsive_every;
        let (a, b, c) = (self.router.a, self.router.b, self.router.c);
        let mut multicast = None;
        let mut icarus = None;
        let (port, class) = if i % every == every / 2 {
            let addrs = Addrs::V4 {
                src: Ipv4Addr::new(10, 255, 255, 254),
                dst: Ipv4Addr::new(172, 31, 255, 254),
            };
            let ports = (4000, 4000);
            unicast_frame(
                &mut self.frame,
                a,
                addrs,
                false,
                0,
                ports,
                i as u32,
                0,
                UNRESPONSIVE_FRAME,
            );
            (a, Class::Unresponsive)
        } else if self
            .controls
            .get(self.next_control)
            .is_some_and(|x| x.0 <= ts)
        {
            let (_, g, ctl) = self.controls[self.next_control];
            self.next_control += 1;
            self.model.expire(ts, &mut self.sink);
            self.model.apply(ts, usize::from(c), g, ctl, &mut self.sink);
            self.sink.clear();
            write_control_frame(&mut self.frame, self.groups[g as usize], ctl, 1, c);
            (c, Class::Control)
        } else {
            let mut u: f64 = self.rng.random();
            let mut draw = Draw::Icarus;
            for (d, w) in SLOT_WEIGHTS {
                if u < w {
                    draw = d;
                    break;
                }
                u -= w;
            }
            match draw {
                Draw::Zipf | Draw::Reverse => {
                    let f = Flow::of(self.zipf.sample(&mut self.rng), self.cfg.seed);
                    if draw == Draw::Zipf {
                        let tos = if f.ect0 { ECT0 } else { 0 };
                        let ports = (f.sport, f.dport);
                        let len = self.rng.random_range(ZIPF_SIZES);
                        unicast_frame(
                            &mut self.frame,
                            a,
                            f.addrs,
                            f.tcp,
                            tos,
                            ports,
                            i as u32,
                            TCP_PSH_ACK,
                            len,
                        );
                        (a, Class::Zipf)
                    } else {
                        let ports = (f.dport, f.sport);
                        let len = f.header_len() + 10;
                        unicast_frame(
                            &mut self.frame,
                            b,
                            f.addrs.reversed(),
                            f.tcp,
                            0,
                            ports,
                            i as u32,
                            TCP_ACK,
                            len,
                        );
                        (b, Class::Reverse)
                    }
                }
                Draw::Icarus => {
                    let p = self
                        .icarus
                        .next()?
                        .ok_or_else(|| anyhow!("the icarus stream ended early"))?;
                    icarus = Some(IcarusMark {
                        holds_mask: p.detected,
                        looping: p.looping,
                    });
                    self.frame.clear();
                    self.frame.extend_from_slice(p.frame);
                    (c, Class::Icarus)
                }
                Draw::Multicast => {
                    let (g, class) = self.pick_group(ts);
                    self.model.expire(ts, &mut self.sink);
                    self.sink.clear();
                    let egress = self
                        .model
                        .egress(self.router.names.len(), g, usize::from(a));
                    let addr = self.groups[g as usize];
                    multicast = Some((addr, egress));
                    let payload = if g == 0 {
                        STATIC_PAYLOAD
                    } else {
                        OTHER_PAYLOAD
                    };
                    write_data_frame(&mut self.frame, addr, a, i as u32, payload);
                    (a, class)
                }
            }
        };
        Ok(Some(RouterPacket {
            ts_ns: ts,
            port,
            frame: &self.frame,
            class,
            multicast,
            icarus,
        }))
    }

    /// A group for multicast data at `t`: static, joined (away from its
    /// membership changes) or unjoined.
    fn pick_group(&mut self, t: u64) -> (u32, Class) {
        let joined = u32::from(JOINED_V4 + JOINED_V6);
        let unjoined = u32::from(UNJOINED_V4 + UNJOINED_V6);
        let u: f64 = self.rng.random();
        if u < MCAST_STATIC {
            return (0, Class::McastStatic);
        }
        if u < MCAST_STATIC + MCAST_JOINED {
            for _ in 0..16 {
                let g = 1 + self.rng.random_range(0..joined);
                if self.quiet(g, t) {
                    return (g, Class::McastJoined);
                }
            }
        }
        (
            1 + joined + self.rng.random_range(0..unjoined),
            Class::McastUnjoined,
        )
    }
}

/// The reports on `r-c` of a run ending at `end` and lasting `duration`:
/// every joined group joins in the first 25 ms (1 ms apart), reports again
/// every [`REFRESH_NS`], and the last IPv4 group leaves half-way (and is
/// not refreshed after). Sorted by time.
fn plan_controls(end: u64, duration: u64) -> Vec<(u64, u32, Ctl)> {
    let joined = u32::from(JOINED_V4 + JOINED_V6);
    let leaver = u32::from(JOINED_V4);
    let leave_at = SYNTH_START_NS + duration / 2;
    let mut v = Vec::new();
    let mut round = 0u64;
    loop {
        let base = SYNTH_START_NS + round * REFRESH_NS;
        if base >= end {
            break;
        }
        for g in 1..=joined {
            let t = base + u64::from(g) * 1_000_000;
            if t < end && !(g == leaver && t >= leave_at) {
                v.push((t, g, Ctl::Join));
            }
        }
        round += 1;
    }
    if leave_at < end {
        v.push((leave_at, leaver, Ctl::Leave));
    }
    v.sort_by_key(|x| x.0);
    v
}
