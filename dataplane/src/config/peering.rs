//! The keys of the protocol between routers: `[peering]`,
//! `[peering.flows]` (with `[[peering.flows.listed]]`) and `[[peers]]`
//! ([`crate::peer`] is what they configure).

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::Deserialize;

use crate::flow::FlowKey;
use crate::peer::{DEFAULT_UDP_PORT, FlowsConfig, PeerConfig, PeeringConfig};
use crate::wire::IpProtocol;

use super::RouterConfig;

const NS_PER_MS: u64 = 1_000_000;
/// The most layers of a membership advertisement.
pub const MAX_DEPTH: usize = 16;
/// The most groups a membership filter may be sized for.
pub const MAX_GROUPS: u64 = 100_000;
/// The most flows a flow set may hold.
pub const MAX_FLOWS: usize = 1 << 20;

/// `[peering]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeeringSection {
    /// This router's id, unique in the network (1 or more).
    pub router_id: u32,
    /// The UDP port the router listens on (4784).
    #[serde(default = "default_port")]
    pub port: u16,
    /// The key of the hash of groups and flows, the same on every router.
    #[serde(default = "default_seed")]
    pub hash_seed: u64,
    /// Whole membership filters to every peer this often (1000 ms).
    #[serde(default = "default_advert")]
    pub advert_interval_ms: u64,
    /// A change at most this often per peer (100 ms).
    #[serde(default = "default_update")]
    pub update_interval_ms: u64,
    /// A peer silent this long is down (3500 ms).
    #[serde(default = "default_hold")]
    pub hold_ms: u64,
    /// Groups a membership filter is sized for (1000).
    #[serde(default = "default_groups")]
    pub groups: u64,
    /// Its false-positive rate at that many (0.001).
    #[serde(default = "default_group_fpr")]
    pub group_fpr: f64,
    /// Layers of an advertisement (2): a group is advertised at most this
    /// many routers away (set it to the network's diameter in routers; a
    /// cycle of routers longer than it does not echo a group back).
    #[serde(default = "default_depth")]
    pub depth: usize,
    /// Messages accepted per second from one peer (200), and back to back
    /// (100).
    #[serde(default = "default_rate")]
    pub rate: u32,
    /// See `rate`.
    #[serde(default = "default_burst")]
    pub burst: u32,
    /// How far a message's time may be from this router's clock (60000
    /// ms).
    #[serde(default = "default_skew")]
    pub max_skew_ms: u64,
    /// For tests of the protocol: the share of outgoing messages dropped
    /// on purpose (0).
    #[serde(default)]
    pub test_loss: f64,
    /// Flow-set reconciliation; absent: off.
    #[serde(default)]
    pub flows: Option<FlowsSection>,
}

/// `[peering.flows]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowsSection {
    /// A summary to every peer this often (1000 ms).
    #[serde(default = "default_exchange")]
    pub exchange_interval_ms: u64,
    /// The summaries' false-positive rate (0.1).
    #[serde(default = "default_flow_fpr")]
    pub fpr: f64,
    /// A flow nobody reported for this long leaves the set (60000 ms).
    #[serde(default = "default_ttl")]
    pub ttl_ms: u64,
    /// The most elements held (4096).
    #[serde(default = "default_capacity")]
    pub capacity: usize,
    /// Flows an operator puts in the set.
    #[serde(default)]
    pub listed: Vec<ListedFlow>,
}

/// `[[peering.flows.listed]]`: one flow.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListedFlow {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// `"tcp"`, `"udp"`, `"icmp"`, `"ipv6-icmp"` or a number.
    pub protocol: String,
    /// Source port (0 when none).
    #[serde(default)]
    pub src_port: u16,
    /// Destination port (ICMP: type << 8 | code; 0 when none).
    #[serde(default)]
    pub dst_port: u16,
}

/// `[[peers]]`: a neighbouring router.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerSection {
    /// The routed interface facing it.
    pub interface: String,
    /// Its address, on that interface's connected prefix.
    pub address: IpAddr,
    /// The UDP port it listens on (`[peering] port`).
    #[serde(default)]
    pub port: Option<u16>,
    /// The secret its messages are tagged with (the same on both routers);
    /// absent: untagged.
    #[serde(default)]
    pub key: Option<String>,
}

fn default_port() -> u16 {
    DEFAULT_UDP_PORT
}
fn default_seed() -> u64 {
    0x626c_6f6f_6d70_6c6e
}
fn default_advert() -> u64 {
    1000
}
fn default_update() -> u64 {
    100
}
fn default_hold() -> u64 {
    3500
}
fn default_groups() -> u64 {
    1000
}
fn default_group_fpr() -> f64 {
    0.001
}
fn default_depth() -> usize {
    2
}
fn default_rate() -> u32 {
    200
}
fn default_burst() -> u32 {
    100
}
fn default_skew() -> u64 {
    60_000
}
fn default_exchange() -> u64 {
    1000
}
fn default_flow_fpr() -> f64 {
    0.1
}
fn default_ttl() -> u64 {
    60_000
}
fn default_capacity() -> usize {
    4096
}

impl ListedFlow {
    fn key(&self) -> Result<FlowKey, String> {
        let protocol = match self.protocol.as_str() {
            "tcp" => IpProtocol::Tcp,
            "udp" => IpProtocol::Udp,
            "icmp" => IpProtocol::Icmp,
            "ipv6-icmp" | "icmpv6" => IpProtocol::Icmpv6,
            n => IpProtocol::from(n.parse::<u8>().map_err(|_| {
                format!("protocol \"{n}\" is not tcp, udp, icmp, ipv6-icmp or a number 0..=255")
            })?),
        };
        FlowKey::new(self.src, self.dst, protocol, self.src_port, self.dst_port)
            .ok_or_else(|| "src and dst are of two address families".into())
    }
}

/// Every problem of `[peering]` and `[[peers]]`, as `(key, reason)`.
pub(super) fn validate(cfg: &RouterConfig, errs: &mut Vec<(String, String)>) {
    let Some(p) = &cfg.peering else {
        if !cfg.peers.is_empty() {
            errs.push((
                "peers".into(),
                "[[peers]] needs a [peering] table (router_id, ...)".into(),
            ));
        }
        return;
    };
    let mut e = |k: &str, r: String| errs.push((format!("peering.{k}"), r));
    if p.router_id == 0 {
        e("router_id", "0 is not a router id (1 or more)".into());
    }
    if p.port == 0 {
        e("port", "0 is not a UDP port".into());
    }
    for (k, v) in [
        ("advert_interval_ms", p.advert_interval_ms),
        ("update_interval_ms", p.update_interval_ms),
        ("hold_ms", p.hold_ms),
        ("max_skew_ms", p.max_skew_ms),
    ] {
        if v == 0 || v > 3_600_000 {
            e(k, format!("{v} is outside 1..=3600000"));
        }
    }
    if p.hold_ms <= p.advert_interval_ms {
        e(
            "hold_ms",
            format!(
                "{} is not above advert_interval_ms ({}): a live peer would go down between its refreshes",
                p.hold_ms, p.advert_interval_ms
            ),
        );
    }
    if p.groups == 0 || p.groups > MAX_GROUPS {
        e(
            "groups",
            format!("{} is outside 1..={MAX_GROUPS}", p.groups),
        );
    }
    if !(p.group_fpr > 0.0 && p.group_fpr < 1.0) {
        e("group_fpr", format!("{} is not in (0, 1)", p.group_fpr));
    } else if p.groups > 0
        && p.groups <= MAX_GROUPS
        && let Err(r) = crate::peer::advert::params(p.groups, p.group_fpr)
    {
        e("group_fpr", r);
    }
    if p.depth == 0 || p.depth > MAX_DEPTH {
        e("depth", format!("{} is outside 1..={MAX_DEPTH}", p.depth));
    }
    if p.rate == 0 || p.burst == 0 {
        e("rate", "rate and burst must be positive".into());
    }
    if !(0.0..1.0).contains(&p.test_loss) {
        e("test_loss", format!("{} is not in [0, 1)", p.test_loss));
    }
    if let Some(f) = &p.flows {
        if f.exchange_interval_ms == 0 || f.exchange_interval_ms > 3_600_000 {
            e(
                "flows.exchange_interval_ms",
                format!("{} is outside 1..=3600000", f.exchange_interval_ms),
            );
        }
        if !(f.fpr > 0.0 && f.fpr < 1.0) {
            e("flows.fpr", format!("{} is not in (0, 1)", f.fpr));
        }
        if f.ttl_ms < 2 * f.exchange_interval_ms {
            e(
                "flows.ttl_ms",
                format!(
                    "{} is below two exchanges ({} ms): flows would expire before they cross",
                    f.ttl_ms,
                    2 * f.exchange_interval_ms
                ),
            );
        }
        if f.capacity == 0 || f.capacity > MAX_FLOWS {
            e(
                "flows.capacity",
                format!("{} is outside 1..={MAX_FLOWS}", f.capacity),
            );
        }
        for (i, l) in f.listed.iter().enumerate() {
            if let Err(r) = l.key() {
                e(&format!("flows.listed[{i}]"), r);
            }
        }
    }
    let mut seen: BTreeMap<IpAddr, usize> = BTreeMap::new();
    for (i, peer) in cfg.peers.iter().enumerate() {
        let key = |k: &str| format!("peers[{i}].{k}");
        let Some(ifc) = cfg.interfaces.iter().find(|x| x.name == peer.interface) else {
            errs.push((
                key("interface"),
                format!("no interface \"{}\"", peer.interface),
            ));
            continue;
        };
        if !ifc.is_routed() {
            errs.push((
                key("interface"),
                format!(
                    "\"{}\" has no addresses: peers talk over routed interfaces",
                    peer.interface
                ),
            ));
        } else if ifc.addresses.iter().any(|a| a.addr == peer.address) {
            errs.push((
                key("address"),
                format!("{} is this router's own address", peer.address),
            ));
        } else if !ifc
            .addresses
            .iter()
            .any(|a| a.network().contains(peer.address))
        {
            errs.push((
                key("address"),
                format!(
                    "{} is not on a connected prefix of \"{}\"",
                    peer.address, peer.interface
                ),
            ));
        }
        if let Some(j) = seen.insert(peer.address, i) {
            errs.push((
                key("address"),
                format!("{} is also peers[{j}]", peer.address),
            ));
        }
        if peer.port == Some(0) {
            errs.push((key("port"), "0 is not a UDP port".into()));
        }
        if peer.key.as_ref().is_some_and(String::is_empty) {
            errs.push((
                key("key"),
                "an empty key: leave it out for untagged messages".into(),
            ));
        }
    }
}

impl RouterConfig {
    /// The protocol's settings, when `[peering]` is there (a validated
    /// config: ports and flows resolved).
    pub fn peering_config(&self) -> Option<PeeringConfig> {
        let p = self.peering.as_ref()?;
        let ms = |v: u64| v.saturating_mul(NS_PER_MS);
        Some(PeeringConfig {
            router_id: p.router_id,
            udp_port: p.port,
            hash_seed: p.hash_seed,
            advert_interval_ns: ms(p.advert_interval_ms),
            update_interval_ns: ms(p.update_interval_ms),
            hold_ns: ms(p.hold_ms),
            groups: p.groups,
            depth: p.depth,
            group_fpr: p.group_fpr,
            rate: p.rate,
            burst: p.burst,
            max_skew_ns: ms(p.max_skew_ms),
            flows: p.flows.as_ref().map(|f| FlowsConfig {
                exchange_interval_ns: ms(f.exchange_interval_ms),
                fpr: f.fpr,
                ttl_ns: ms(f.ttl_ms),
                capacity: f.capacity,
                listed: f.listed.iter().filter_map(|l| l.key().ok()).collect(),
            }),
            loss: p.test_loss,
            peers: self
                .peers
                .iter()
                .filter_map(|q| {
                    Some(PeerConfig {
                        port: self.port_of(&q.interface)?,
                        interface: q.interface.clone(),
                        address: q.address,
                        udp_port: q.port.unwrap_or(p.port),
                        key: q.key.as_ref().map(|k| k.as_bytes().to_vec()),
                    })
                })
                .collect(),
        })
    }
}
