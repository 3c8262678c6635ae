//! The router workload's ground truth: [`RouterTruth`], gathered from the
//! stream by [`generate`] and written beside the capture by
//! [`write_pcapng`].

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use dataplane::flow::FlowKey;
use dataplane::wire::icarus::{self, Filter};
use dataplane::wire::{Ecn, LinkType, parse};
use serde::{Deserialize, Serialize};

use super::{
    Class, IcarusMark, RouterPacket, RouterSynth, RouterSynthConfig, SLOP_NS, max_min_share,
};
use crate::synth::{SYNTH_START_NS, create_pcapng, sidecar_path, write_sidecar};

/// Packets and bytes (frame lengths as captured).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Count {
    /// Packets.
    pub packets: u64,
    /// Bytes.
    pub bytes: u64,
}

/// One Icarus packet's truth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IcarusTruthPacket {
    /// Its index in the capture.
    pub index: u64,
    /// The verdict.
    #[serde(flatten)]
    pub mark: IcarusMark,
}

/// One multicast data packet's truth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct McastTruthPacket {
    /// Its index in the capture.
    pub index: u64,
    /// Its group.
    pub group: IpAddr,
    /// The exact egress ports, bit `i` = port `i`.
    pub egress: u64,
}

/// One flow's traffic in one epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpochFlow {
    /// The flow, as `FlowKey`'s display form (what heavy-flow reports show).
    pub flow: String,
    /// Its class.
    pub class: Class,
    /// Its ingress port.
    pub ingress: u8,
    /// Packets.
    pub packets: u64,
    /// Bytes as captured.
    pub bytes: u64,
    /// Bytes as the built-in router's heavy stage counts them: the router
    /// inserts an empty Icarus filter into IP packets arriving on its
    /// insertion edges (`r-a`, `r-b`) before that stage.
    pub router_bytes: u64,
}

/// One heavy-flow epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpochTruth {
    /// Epoch number (`start_ns / epoch_ns`).
    pub epoch: u64,
    /// Start, ns.
    pub start_ns: u64,
    /// End (exclusive), ns.
    pub end_ns: u64,
    /// Packets the heavy stage sees: every IP packet but those whose
    /// Icarus filter holds the node's mask (the icarus stage, first, drops
    /// them).
    pub packets: u64,
    /// Their bytes as captured.
    pub bytes: u64,
    /// Their bytes as the router's heavy stage counts them.
    pub router_bytes: u64,
    /// Every flow, by `router_bytes` descending.
    pub flows: Vec<EpochFlow>,
}

/// The ground truth written next to the capture (`FILE.router.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouterTruth {
    /// RNG seed.
    pub seed: u64,
    /// Packets.
    pub packets: u64,
    /// Interface names by port (the capture's interface ids).
    pub interfaces: Vec<String>,
    /// Capture time of the first packet, ns.
    pub start_ns: u64,
    /// Time between packets, ns.
    pub gap_ns: u64,
    /// Time the run spans (packets x gap), ns.
    pub duration_ns: u64,
    /// The unresponsive flow's period, packets.
    pub unresponsive_every: u64,
    /// Per class.
    pub classes: BTreeMap<Class, Count>,
    /// `r-b`'s shaped rate, bit/s.
    pub rb_rate_bps: u64,
    /// What is offered to `r-b` (Zipf, unresponsive, static multicast
    /// data), bit/s over the run.
    pub offered_rb_bps: f64,
    /// `offered_rb_bps / rb_rate_bps`.
    pub offered_rb_ratio: f64,
    /// The unresponsive flow's rate, bit/s.
    pub unresponsive_bps: f64,
    /// The max-min fair share of `r-b` among the flows offered to it (their
    /// measured rates), bit/s.
    pub fair_share_bps: f64,
    /// `unresponsive_bps / fair_share_bps`.
    pub unresponsive_fair_shares: f64,
    /// Zipf flows configured.
    pub zipf_flows: u32,
    /// Zipf flows that sent at least one packet.
    pub zipf_flows_seen: u64,
    /// Of those, ECT(0) flows.
    pub zipf_ect0_flows_seen: u64,
    /// The Icarus node.
    pub node_id: u64,
    /// Filter bits.
    pub m: usize,
    /// Mask bits.
    pub k: usize,
    /// Domain seed.
    pub domain_seed: u64,
    /// Every Icarus packet.
    pub icarus: Vec<IcarusTruthPacket>,
    /// Membership interval, ms.
    pub membership_interval_ms: u64,
    /// No data within this long of a membership change of its group, ns.
    pub slop_ns: u64,
    /// Every multicast data packet.
    pub multicast: Vec<McastTruthPacket>,
    /// Heavy-flow epoch length, ns.
    pub epoch_ns: u64,
    /// Every epoch with traffic, in order.
    pub epochs: Vec<EpochTruth>,
}

impl RouterTruth {
    /// The count of `class`.
    pub fn class(&self, class: Class) -> Count {
        self.classes.get(&class).copied().unwrap_or_default()
    }

    /// The share of all packets in `class`.
    pub fn packet_share(&self, class: Class) -> f64 {
        self.class(class).packets as f64 / self.packets.max(1) as f64
    }

    /// The share of all bytes in `class`.
    pub fn byte_share(&self, class: Class) -> f64 {
        let total: u64 = self.classes.values().map(|c| c.bytes).sum();
        self.class(class).bytes as f64 / total.max(1) as f64
    }

    /// The one-line summary `traffic-gen synth --kind router` prints.
    pub fn summary(&self) -> String {
        let loops = self.icarus.iter().filter(|p| p.mark.holds_mask).count();
        format!(
            "router: {} packets over {:.1} s ({} epochs) on {}: r-b offered {:.1} Mbit/s = {:.2} x {} Mbit/s; \
             unresponsive {:.2} Mbit/s = {:.1} fair shares of {:.0} kbit/s; zipf {:.0}% of packets; \
             {} icarus packets, {} holding node {}'s mask; {} multicast data",
            self.packets,
            self.duration_ns as f64 / 1e9,
            self.epochs.len(),
            self.interfaces.join(", "),
            self.offered_rb_bps / 1e6,
            self.offered_rb_ratio,
            self.rb_rate_bps / 1_000_000,
            self.unresponsive_bps / 1e6,
            self.unresponsive_fair_shares,
            self.fair_share_bps / 1e3,
            100.0 * self.packet_share(Class::Zipf),
            self.icarus.len(),
            loops,
            self.node_id,
            self.multicast.len(),
        )
    }
}

/// Per-epoch flow totals being gathered.
#[derive(Debug)]
struct EpochAcc {
    epoch: u64,
    flows: HashMap<FlowKey, EpochFlow>,
}

impl EpochAcc {
    /// Adds a packet of `flow`.
    fn add(&mut self, flow: FlowKey, p: &RouterPacket<'_>, bytes: u64, router_bytes: u64) {
        let f = self.flows.entry(flow).or_insert_with(|| EpochFlow {
            flow: flow.to_string(),
            class: p.class,
            ingress: p.port,
            packets: 0,
            bytes: 0,
            router_bytes: 0,
        });
        f.packets += 1;
        f.bytes += bytes;
        f.router_bytes += router_bytes;
    }

    fn close(self, epoch_ns: u64) -> EpochTruth {
        let mut flows: Vec<(FlowKey, EpochFlow)> = self.flows.into_iter().collect();
        flows.sort_by(|x, y| y.1.router_bytes.cmp(&x.1.router_bytes).then(x.0.cmp(&y.0)));
        let flows: Vec<EpochFlow> = flows.into_iter().map(|(_, f)| f).collect();
        EpochTruth {
            epoch: self.epoch,
            start_ns: self.epoch * epoch_ns,
            end_ns: (self.epoch + 1) * epoch_ns,
            packets: flows.iter().map(|f| f.packets).sum(),
            bytes: flows.iter().map(|f| f.bytes).sum(),
            router_bytes: flows.iter().map(|f| f.router_bytes).sum(),
            flows,
        }
    }
}

/// Generates the workload, calling `sink` for each packet; returns the
/// truth. Fails if a frame does not parse (a bug here).
pub fn generate(
    cfg: RouterSynthConfig,
    mut sink: impl FnMut(&RouterPacket<'_>) -> Result<()>,
) -> Result<RouterTruth> {
    let mut s = RouterSynth::new(cfg)?;
    let router = s.router.clone();
    let params = router.icarus.params;
    let empty = Filter::empty(params.width());
    let mut t = RouterTruth {
        seed: cfg.seed,
        packets: 0,
        interfaces: router.names.clone(),
        start_ns: SYNTH_START_NS,
        gap_ns: s.gap_ns(),
        duration_ns: s.duration_ns(),
        unresponsive_every: s.unresponsive_every(),
        classes: BTreeMap::new(),
        rb_rate_bps: router.rate_bps,
        offered_rb_bps: 0.0,
        offered_rb_ratio: 0.0,
        unresponsive_bps: 0.0,
        fair_share_bps: 0.0,
        unresponsive_fair_shares: 0.0,
        zipf_flows: cfg.flows,
        zipf_flows_seen: 0,
        zipf_ect0_flows_seen: 0,
        node_id: router.icarus.node_id,
        m: params.width().bits(),
        k: params.k(),
        domain_seed: params.seed(),
        icarus: Vec::new(),
        membership_interval_ms: router.membership_interval_ns / 1_000_000,
        slop_ns: SLOP_NS,
        multicast: Vec::new(),
        epoch_ns: router.epoch_ns,
        epochs: Vec::new(),
    };
    // Whole-run bytes of each flow offered to r-b, and whether ECT(0).
    let mut offered: HashMap<FlowKey, (Class, u64, bool)> = HashMap::new();
    let mut acc: Option<EpochAcc> = None;
    let mut scratch = Vec::with_capacity(2048);
    while let Some(p) = s.next()? {
        sink(&p)?;
        let index = t.packets;
        t.packets += 1;
        let len = p.frame.len() as u64;
        let c = t.classes.entry(p.class).or_default();
        c.packets += 1;
        c.bytes += len;
        if let Some(mark) = p.icarus {
            t.icarus.push(IcarusTruthPacket { index, mark });
        }
        if let Some((group, egress)) = p.multicast {
            t.multicast.push(McastTruthPacket {
                index,
                group,
                egress,
            });
        }
        let parsed = parse(LinkType::Ethernet, p.frame)
            .map_err(|e| anyhow!("packet {index} ({:?}) does not parse: {e:?}", p.class))?;
        let Some(flow) = parsed.flow else {
            continue;
        };
        if matches!(
            p.class,
            Class::Zipf | Class::Unresponsive | Class::McastStatic
        ) {
            let e = offered
                .entry(flow)
                .or_insert((p.class, 0, parsed.ecn == Ecn::Ect0));
            e.1 += len;
        }
        if p.icarus.is_some_and(|m| m.holds_mask) {
            continue;
        }
        let edge = router.icarus.insert_on_ingress & (1u64 << p.port) != 0;
        let router_len = if edge && parsed.is_ip() {
            scratch.clear();
            scratch.extend_from_slice(p.frame);
            match icarus::insert(&mut scratch, parsed.l3_offset, &empty) {
                Ok(_) => scratch.len() as u64,
                Err(_) => len,
            }
        } else {
            len
        };
        let epoch = p.ts_ns / router.epoch_ns;
        if acc.as_ref().is_some_and(|a| a.epoch != epoch) {
            t.epochs
                .extend(acc.take().map(|a| a.close(router.epoch_ns)));
        }
        let a = acc.get_or_insert_with(|| EpochAcc {
            epoch,
            flows: HashMap::new(),
        });
        a.add(flow, &p, len, router_len);
    }
    t.epochs
        .extend(acc.take().map(|a| a.close(router.epoch_ns)));
    let secs = t.duration_ns as f64 / 1e9;
    let mut demands: Vec<f64> = offered.values().map(|v| 8.0 * v.1 as f64 / secs).collect();
    // In a fixed order, so that the same seed gives the same sums.
    demands.sort_by(f64::total_cmp);
    t.offered_rb_bps = demands.iter().sum();
    t.offered_rb_ratio = t.offered_rb_bps / router.rate_bps as f64;
    t.unresponsive_bps = 8.0 * t.class(Class::Unresponsive).bytes as f64 / secs;
    t.fair_share_bps =
        max_min_share(router.rate_bps as f64, &mut demands).unwrap_or(router.rate_bps as f64);
    t.unresponsive_fair_shares = t.unresponsive_bps / t.fair_share_bps;
    for (class, _, ect0) in offered.values() {
        if *class == Class::Zipf {
            t.zipf_flows_seen += 1;
            t.zipf_ect0_flows_seen += u64::from(*ect0);
        }
    }
    Ok(t)
}

/// What the truth file's name adds to the capture's.
const TRUTH_SUFFIX: &str = ".router.json";

/// The truth path for a capture path (`path` + `.router.json`).
pub fn truth_path(path: &Path) -> PathBuf {
    sidecar_path(path, TRUTH_SUFFIX)
}

/// Writes the workload to `path` as pcapng, one interface per router port
/// named as the router names it, and its truth to [`truth_path`]; returns
/// the truth.
pub fn write_pcapng(cfg: RouterSynthConfig, path: &Path) -> Result<RouterTruth> {
    // Validate before creating the file, so a bad setting leaves nothing.
    let names = RouterSynth::new(RouterSynthConfig { packets: 0, ..cfg })?
        .interface_names()
        .to_vec();
    let mut w = create_pcapng(path, &names)?;
    let truth = generate(cfg, |p| {
        w.write(u32::from(p.port), p.ts_ns, p.frame.len() as u32, p.frame)
            .with_context(|| format!("{}: write failed", path.display()))
    })?;
    w.finish()
        .with_context(|| format!("{}: write failed", path.display()))?;
    write_sidecar(path, TRUTH_SUFFIX, &truth)?;
    Ok(truth)
}
