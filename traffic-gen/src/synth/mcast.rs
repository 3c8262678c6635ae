//! Synthetic multicast workload with exact ground truth: hosts behind
//! several interfaces join and leave groups (IGMPv2/v3, MLDv1/v2 reports,
//! IGMPv2 leaves, MLDv1 dones, v3/MLDv2 `CHANGE_TO_INCLUDE({})`), let
//! memberships expire (no refresh for the group membership interval), and
//! multicast UDP data arrives on every interface.
//!
//! Writes an Ethernet pcapng with one interface per port, named `p0`,
//! `p1`, ... (a packet's interface id is its ingress port, so a router
//! whose interfaces bear those names maps ingress by name), and a sidecar
//! `FILE.mcast.json` ([`McastTruth`]): per packet, its ingress interface
//! and, for data, the
//! exact egress set (the interfaces with a current member of the group,
//! less the ingress); `null` for control messages, which the router
//! consumes.
//!
//! The dataplane applies a batch's control messages before its data and
//! times joins at the batch's end, so the ground truth is only exact for
//! data away from membership changes: a data packet never goes to a group
//! whose membership changed (join, leave, expiry) on any interface within
//! [`McastConfig::slop_ns`] of it (the batch span is far shorter).
//! Group `i` is `239.1.(i / 256).(i % 256)` for even `i` and
//! `ff0e::1:i` for odd `i`. Packets are [`McastConfig::gap_ns`] apart
//! (10 ms: 30 000 packets span 300 s, beyond the 260 s interval, so
//! expiries happen).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use anyhow::{Context, Result, bail};
use dataplane::stage::multicast::GROUP_MEMBERSHIP_INTERVAL_NS;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::synth::{SYNTH_START_NS, create_pcapng, write_sidecar};
use dataplane::wire::build::{self, Addrs, IpHeader, PROTO_UDP, UDP_LEN};

/// Settings of a multicast workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct McastConfig {
    /// Interfaces (1..=64).
    pub ports: usize,
    /// Distinct groups.
    pub groups: u32,
    /// Packets (control and data).
    pub packets: u64,
    /// Share of control messages.
    pub control_share: f64,
    /// Capture time between packets, ns.
    pub gap_ns: u64,
    /// No data within this long of a membership change of its group, ns.
    pub slop_ns: u64,
    /// RNG seed.
    pub seed: u64,
}

impl Default for McastConfig {
    fn default() -> Self {
        McastConfig {
            ports: 8,
            groups: 64,
            packets: 30_000,
            control_share: 0.05,
            gap_ns: 10_000_000,
            slop_ns: 2_000_000_000,
            seed: 1,
        }
    }
}

/// The ground truth written next to the capture.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McastTruth {
    /// Interfaces.
    pub ports: usize,
    /// Group membership interval used, ms.
    pub membership_interval_ms: u64,
    /// The groups, by index.
    pub groups: Vec<IpAddr>,
    /// Ingress interface of packet `i`.
    pub ingress: Vec<u8>,
    /// Exact egress set of packet `i` as a port mask (`None`: a control
    /// message, consumed).
    pub expected: Vec<Option<u64>>,
}

/// Group `i`'s address.
pub fn group(i: u32) -> IpAddr {
    if i.is_multiple_of(2) {
        IpAddr::V4(Ipv4Addr::new(239, 1, (i >> 8) as u8, i as u8))
    } else {
        IpAddr::V6(Ipv6Addr::new(
            0xff0e,
            0,
            0,
            0,
            0,
            1,
            (i >> 16) as u16,
            i as u16,
        ))
    }
}

/// A membership change a host announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ctl {
    /// Join (report).
    Join,
    /// Leave (IGMPv2 leave, MLDv1 done, `CHANGE_TO_INCLUDE({})`).
    Leave,
}

/// One planned packet.
#[derive(Debug, Clone, Copy)]
enum Plan {
    Control(usize, u32, Ctl),
    Data(usize),
}

/// Membership model: (port, group) -> expiry.
#[derive(Debug, Default)]
pub(crate) struct Model {
    members: HashMap<(usize, u32), u64>,
    /// The membership interval; `None`: [`GROUP_MEMBERSHIP_INTERVAL_NS`].
    interval_ns: Option<u64>,
}

impl Model {
    /// A model whose memberships last `interval_ns` after each report.
    pub(crate) fn with_interval(interval_ns: u64) -> Model {
        Model {
            interval_ns: Some(interval_ns),
            ..Model::default()
        }
    }

    /// A member of `g` on `port` that never expires (a static group).
    pub(crate) fn add_static(&mut self, port: usize, g: u32) {
        self.members.insert((port, g), u64::MAX);
    }

    /// Expires at `ts`; returns the (group, time) of each change.
    pub(crate) fn expire(&mut self, ts: u64, changes: &mut Vec<(u32, u64)>) {
        self.members.retain(|&(_, g), &mut e| {
            if e <= ts {
                changes.push((g, e));
                false
            } else {
                true
            }
        });
    }

    pub(crate) fn apply(
        &mut self,
        ts: u64,
        port: usize,
        g: u32,
        c: Ctl,
        changes: &mut Vec<(u32, u64)>,
    ) {
        match c {
            Ctl::Join => {
                if self
                    .members
                    .insert(
                        (port, g),
                        ts.saturating_add(self.interval_ns.unwrap_or(GROUP_MEMBERSHIP_INTERVAL_NS)),
                    )
                    .is_none()
                {
                    changes.push((g, ts));
                }
            }
            Ctl::Leave => {
                if self.members.remove(&(port, g)).is_some() {
                    changes.push((g, ts));
                }
            }
        }
    }

    /// The ports (a mask) with a member of `g`, less `ingress`.
    pub(crate) fn egress(&self, ports: usize, g: u32, ingress: usize) -> u64 {
        (0..ports)
            .filter(|&p| p != ingress && self.members.contains_key(&(p, g)))
            .fold(0, |m, p| m | 1 << p)
    }
}

/// A frame and its capture time in ns.
pub type Frame = (u64, Vec<u8>);

/// Builds the workload: frames with their times, and the truth.
pub fn generate(cfg: McastConfig) -> Result<(Vec<Frame>, McastTruth)> {
    if !(1..=64).contains(&cfg.ports) {
        bail!("--ports must be in 1..=64, got {}", cfg.ports);
    }
    if cfg.groups == 0 || cfg.groups > 65_536 {
        bail!("--groups must be in 1..=65536, got {}", cfg.groups);
    }
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let ts = |i: u64| SYNTH_START_NS + i * cfg.gap_ns;
    // Pass 1: control events and the times each group's membership changes.
    let mut plan = Vec::with_capacity(cfg.packets as usize);
    let mut model = Model::default();
    let mut changes = Vec::new();
    for i in 0..cfg.packets {
        model.expire(ts(i), &mut changes);
        let port = rng.random_range(0..cfg.ports);
        if rng.random_bool(cfg.control_share) {
            let g = rng.random_range(0..cfg.groups);
            let c = if model.members.contains_key(&(port, g)) && rng.random_bool(0.3) {
                Ctl::Leave
            } else {
                Ctl::Join
            };
            model.apply(ts(i), port, g, c, &mut changes);
            plan.push(Plan::Control(port, g, c));
        } else {
            plan.push(Plan::Data(port));
        }
    }
    let end = ts(cfg.packets);
    model.expire(
        end.saturating_add(GROUP_MEMBERSHIP_INTERVAL_NS),
        &mut changes,
    );
    let mut by_group: Vec<Vec<u64>> = vec![Vec::new(); cfg.groups as usize];
    for (g, t) in changes {
        by_group[g as usize].push(t);
    }
    for v in &mut by_group {
        v.sort_unstable();
    }
    let quiet = |g: u32, t: u64| {
        let v = &by_group[g as usize];
        let i = v.partition_point(|&c| c < t.saturating_sub(cfg.slop_ns));
        v.get(i).is_none_or(|&c| c > t + cfg.slop_ns)
    };
    // Pass 2: frames and the exact egress sets.
    let mut model = Model::default();
    let mut sink = Vec::new();
    let mut frames = Vec::with_capacity(plan.len());
    let mut truth = McastTruth {
        ports: cfg.ports,
        membership_interval_ms: GROUP_MEMBERSHIP_INTERVAL_NS / 1_000_000,
        groups: (0..cfg.groups).map(group).collect(),
        ingress: Vec::with_capacity(plan.len()),
        expected: Vec::with_capacity(plan.len()),
    };
    for (i, p) in plan.into_iter().enumerate() {
        let t = ts(i as u64);
        model.expire(t, &mut sink);
        match p {
            Plan::Control(port, g, c) => {
                model.apply(t, port, g, c, &mut sink);
                let version = rng.random_range(0..2u8);
                frames.push((t, control_frame(group(g), c, version, port as u8)));
                truth.ingress.push(port as u8);
                truth.expected.push(None);
            }
            Plan::Data(port) => {
                let mut g = rng.random_range(0..cfg.groups);
                let mut tries = 0;
                while !quiet(g, t) && tries < 64 {
                    g = rng.random_range(0..cfg.groups);
                    tries += 1;
                }
                if !quiet(g, t) {
                    // Every group is busy now: a group no one ever joins.
                    g = cfg.groups;
                }
                let addr = group(g);
                frames.push((t, data_frame(addr, port as u8, i as u32)));
                truth.ingress.push(port as u8);
                truth.expected.push(Some(if g < cfg.groups {
                    model.egress(cfg.ports, g, port)
                } else {
                    0
                }));
            }
        }
    }
    Ok((frames, truth))
}

/// The name of port `port`'s interface in the written capture: `p0`,
/// `p1`, ...
pub fn interface_name(port: usize) -> String {
    format!("p{port}")
}

/// Writes the workload to `path` as pcapng, one interface per port named
/// by [`interface_name`] (a packet's interface id is its ingress port), and
/// its truth to `path` + `.mcast.json`.
pub fn write_pcapng(cfg: McastConfig, path: &Path) -> Result<McastTruth> {
    let (frames, truth) = generate(cfg)?;
    let names: Vec<String> = (0..cfg.ports).map(interface_name).collect();
    let mut w = create_pcapng(path, &names)?;
    for ((ts, f), &port) in frames.iter().zip(&truth.ingress) {
        w.write(u32::from(port), *ts, f.len() as u32, f)
            .with_context(|| format!("{}: write failed", path.display()))?;
    }
    w.finish()
        .with_context(|| format!("{}: write failed", path.display()))?;
    write_sidecar(path, ".mcast.json", &truth)?;
    Ok(truth)
}

/// Appends the Ethernet header and `ip` of a frame from a host behind
/// `port` (source MAC `02:00:00:00:PORT:01`) to the multicast MAC
/// `01:00:5e:00:00:01`, carrying `payload_len` bytes.
fn push_headers(out: &mut Vec<u8>, ip: &IpHeader, payload_len: usize, port: u8) {
    build::ethernet(
        out,
        [0x01, 0x00, 0x5e, 0, 0, 1],
        [0x02, 0, 0, 0, port, 1],
        ip.ethertype(),
    );
    ip.push(out, payload_len);
}

/// A control message from a host behind `port`: `version` 0 is IGMPv2 /
/// MLDv1 (report; leave / done), 1 is IGMPv3 / MLDv2 (`CHANGE_TO_EXCLUDE({})`;
/// `CHANGE_TO_INCLUDE({})`).
pub fn control_frame(g: IpAddr, c: Ctl, version: u8, port: u8) -> Vec<u8> {
    let mut out = Vec::new();
    write_control_frame(&mut out, g, c, version, port);
    out
}

/// [`control_frame`] into `out` (cleared first).
pub fn write_control_frame(out: &mut Vec<u8>, g: IpAddr, c: Ctl, version: u8, port: u8) {
    out.clear();
    let join = matches!(c, Ctl::Join);
    match g {
        IpAddr::V4(g) => {
            let src = Ipv4Addr::new(10, port, 0, 9);
            let (dst, n) = match (version, join) {
                (0, true) => (g, 8),
                (0, false) => (Ipv4Addr::new(224, 0, 0, 2), 8),
                _ => (Ipv4Addr::new(224, 0, 0, 22), 16),
            };
            let ip = IpHeader {
                ttl: 1,
                ..IpHeader::new(Addrs::V4 { src, dst }, build::PROTO_IGMP)
            };
            push_headers(out, &ip, n, port);
            match (version, join) {
                (0, true) => build::igmp_v2(out, build::IGMP_V2_REPORT, g),
                (0, false) => build::igmp_v2(out, build::IGMP_V2_LEAVE, g),
                (_, true) => build::igmp_v3_report(out, build::RECORD_TO_EXCLUDE, g),
                (_, false) => build::igmp_v3_report(out, build::RECORD_TO_INCLUDE, g),
            }
        }
        IpAddr::V6(g) => {
            let src = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, u16::from(port), 9);
            let (dst, n) = match (version, join) {
                (0, true) => (g, 24),
                (0, false) => (Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2), 24),
                _ => (Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 0x16), 28),
            };
            let ip = IpHeader {
                ttl: 1,
                ..IpHeader::new(Addrs::V6 { src, dst }, build::PROTO_ICMPV6)
            };
            push_headers(out, &ip, n, port);
            match (version, join) {
                (0, true) => build::mld_v1(out, &ip, build::MLD_V1_REPORT, g),
                (0, false) => build::mld_v1(out, &ip, build::MLD_V1_DONE, g),
                (_, true) => build::mld_v2_report(out, &ip, build::RECORD_TO_EXCLUDE, g),
                (_, false) => build::mld_v2_report(out, &ip, build::RECORD_TO_INCLUDE, g),
            }
        }
    }
}

/// A UDP datagram to `g` from a sender behind `port`, sequence number `seq`.
pub fn data_frame(g: IpAddr, port: u8, seq: u32) -> Vec<u8> {
    let mut out = Vec::new();
    write_data_frame(&mut out, g, port, seq, 8);
    out
}

/// [`data_frame`] into `out` (cleared first), with `payload_len` bytes of
/// UDP payload (at least 8: the sequence number, then zeros).
pub fn write_data_frame(out: &mut Vec<u8>, g: IpAddr, port: u8, seq: u32, payload_len: usize) {
    out.clear();
    let payload_len = payload_len.max(8);
    let addrs = match g {
        IpAddr::V4(g) => Addrs::V4 {
            src: Ipv4Addr::new(10, port, 0, 1),
            dst: g,
        },
        IpAddr::V6(g) => Addrs::V6 {
            src: Ipv6Addr::new(0x2001, 0xdb8, u16::from(port), 0, 0, 0, 0, 1),
            dst: g,
        },
    };
    let ip = IpHeader {
        ttl: 16,
        ..IpHeader::new(addrs, PROTO_UDP)
    };
    build::ethernet(
        out,
        [0x01, 0x00, 0x5e, 0, 0, 1],
        [0x02, 0, 0, 0, port, 1],
        ip.ethertype(),
    );
    ip.push(out, UDP_LEN + payload_len);
    build::udp(out, 5000, 5001, payload_len);
    out.extend_from_slice(&seq.to_be_bytes());
    out.resize(out.len() + payload_len - 4, 0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::clock::Timestamp;
    use dataplane::pipeline::{Batch, Pipeline, PipelineConfig, Verdict};
    use dataplane::stage::multicast::{MulticastConfig, MulticastStage};
    use dataplane::wire::LinkType;

    /// Replays the workload through the stage, 32 packets per batch, and
    /// compares every data packet's egress set with the truth. The filters
    /// are sized for 4096 groups per interface at a false-positive rate of
    /// 1e-9, so a false positive is negligible (about 1e-4 expected over the
    /// whole run) and the sets must be equal.
    #[test]
    fn replay_matches_truth() {
        let cfg = McastConfig {
            packets: 30_000,
            ..McastConfig::default()
        };
        let (frames, truth) = generate(cfg).unwrap();
        let stage = MulticastStage::new(&MulticastConfig {
            expected_groups: 4096,
            false_positive_rate: 1e-9,
            seed: Some(11),
            ..MulticastConfig::with_ports(cfg.ports)
        })
        .unwrap();
        let mut p = Pipeline::new(PipelineConfig::default()).with_stage(stage);
        let mut batch = Batch::new();
        let (mut data, mut nonempty, mut checked) = (0, 0, 0);
        for (chunk, base) in frames.chunks(32).zip((0..).step_by(32)) {
            batch.clear();
            for (k, (ts, f)) in chunk.iter().enumerate() {
                let ing = truth.ingress[base + k];
                batch.push_from(
                    Timestamp::from_nanos(*ts),
                    f.len() as u32,
                    LinkType::Ethernet,
                    ing,
                    f,
                );
            }
            let now = batch.latest_ts().unwrap();
            p.process(&mut batch, now);
            for (k, pk) in batch.packets().iter().enumerate() {
                let i = base + k;
                match truth.expected[i] {
                    None => assert!(!pk.is_live(), "control {i} consumed"),
                    Some(mask) => {
                        data += 1;
                        let got = match pk.verdict {
                            Verdict::Forward(s) | Verdict::Mark(s) => s.mask(),
                            _ => 0,
                        };
                        assert_eq!(got, mask, "packet {i}");
                        nonempty += u64::from(mask != 0);
                        checked += 1;
                    }
                }
            }
        }
        let c = p.stage::<MulticastStage>().unwrap().counters();
        assert!(data > 20_000 && nonempty > 5_000, "{data} {nonempty}");
        assert!(c.joins > 500 && c.leaves > 50 && c.expiries > 5, "{c:?}");
        assert_eq!(checked, data);
    }

    /// The pcapng's interfaces are the ports, named p0, p1, ..., and each
    /// packet's interface is its ingress port.
    #[test]
    fn pcapng_interfaces_are_the_ports() {
        let cfg = McastConfig {
            ports: 5,
            packets: 2_000,
            ..McastConfig::default()
        };
        let path = std::env::temp_dir().join(format!("synth_mcast_{}.pcapng", std::process::id()));
        let truth = write_pcapng(cfg, &path).unwrap();
        let mut r = dataplane::io::capture::CaptureReader::open(&path).unwrap();
        let (frames, _) = generate(cfg).unwrap();
        let mut n = 0;
        while let Some(rec) = r.next_record().unwrap() {
            assert_eq!(rec.interface, u32::from(truth.ingress[n]));
            assert_eq!((rec.ts_ns, rec.data), (frames[n].0, &frames[n].1[..]));
            n += 1;
        }
        assert_eq!(n, 2_000);
        for p in 0..5 {
            assert_eq!(r.interface_name(p as u32), Some(interface_name(p).as_str()));
        }
        let _ = std::fs::remove_file(format!("{}.mcast.json", path.display()));
        std::fs::remove_file(&path).unwrap();
    }
}
