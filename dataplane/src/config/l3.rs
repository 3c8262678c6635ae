//! The routed-mode keys of the configuration: interface addresses, MAC
//! and MTU, `[[routes]]`, `[[neighbours]]` and `[router]`.
//!
//! A port is **routed** when its `[[interfaces]]` table lists `addresses`
//! (each gives a connected route), else it is a **wire** port that only
//! `[[wires]]` may name. The values are typed as they are read (a bad
//! prefix or MAC is a deserialization error naming its key); the checks
//! across tables (overlaps, unreachable gateways, wires on routed ports)
//! are in [`validate`], which the config's validation pass calls.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::Deserialize;

pub use crate::addr::{InterfaceAddr, IpNet, MacAddr};

use super::RouterConfig;

/// The smallest MTU accepted (IPv4's minimum, RFC 791).
pub const MIN_MTU: u32 = 68;
/// The smallest MTU of a port with IPv6 addresses (RFC 8200).
pub const MIN_MTU_V6: u32 = 1280;
/// The largest MTU accepted.
pub const MAX_MTU: u32 = 65_535;
/// The MTU of a port whose MTU is neither configured nor read from the
/// interface (replay).
pub const DEFAULT_MTU: u32 = 1500;
/// The most packets held per unresolved next hop.
pub const MAX_HOLD: usize = 64;

/// A static route: `prefix` via a gateway, or out of an interface with
/// the destination itself as the next hop.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// The destination.
    pub prefix: IpNet,
    /// The gateway (a neighbour on a connected prefix).
    #[serde(default)]
    pub via: Option<IpAddr>,
    /// Or the routed interface the prefix is on.
    #[serde(default)]
    pub interface: Option<String>,
}

/// A static neighbour (never expires).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NeighbourConfig {
    /// Its address, on a connected prefix.
    pub address: IpAddr,
    /// Its MAC.
    pub mac: MacAddr,
}

fn default_icmp_rate() -> u32 {
    1000
}
fn default_icmp_burst() -> u32 {
    50
}
fn default_hold() -> usize {
    3
}
fn default_resolve_tries() -> u32 {
    3
}
fn default_resolve_interval_ms() -> u64 {
    1000
}
fn default_reachable_ms() -> u64 {
    30_000
}

/// `[router]`: the routed ports' shared settings (Linux-like defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RouterSection {
    /// ICMP errors per second (token bucket rate; 0: no limit, as Linux's
    /// `icmp_ratelimit = 0`).
    #[serde(default = "default_icmp_rate")]
    pub icmp_rate: u32,
    /// ICMP errors sent back to back at most (the bucket's depth).
    #[serde(default = "default_icmp_burst")]
    pub icmp_burst: u32,
    /// Packets held per next hop while it is being resolved (Linux's
    /// `unres_qlen` idea); 0 drops them at once.
    #[serde(default = "default_hold")]
    pub neighbour_queue: usize,
    /// ARP requests / neighbour solicitations sent before the held packets
    /// are dropped (`no_neighbour`).
    #[serde(default = "default_resolve_tries")]
    pub resolve_tries: u32,
    /// Time between two of them, ms.
    #[serde(default = "default_resolve_interval_ms")]
    pub resolve_interval_ms: u64,
    /// How long a learned neighbour stays usable, ms.
    #[serde(default = "default_reachable_ms")]
    pub reachable_ms: u64,
}

impl Default for RouterSection {
    fn default() -> Self {
        RouterSection {
            icmp_rate: default_icmp_rate(),
            icmp_burst: default_icmp_burst(),
            neighbour_queue: default_hold(),
            resolve_tries: default_resolve_tries(),
            resolve_interval_ms: default_resolve_interval_ms(),
            reachable_ms: default_reachable_ms(),
        }
    }
}

/// Where Linux shows an interface's MAC and MTU.
pub const SYSFS_NET: &str = "/sys/class/net";

impl RouterConfig {
    /// The router's own MAC on routed port `port`: its `mac`, else the
    /// replay default ([`MacAddr::default_for_port`]; the live router reads
    /// the interface's into `mac` first, [`RouterConfig::read_link_settings`]).
    /// `None` for a wire port or no such port.
    pub fn router_mac(&self, port: usize) -> Option<MacAddr> {
        let ifc = self.interfaces.get(port).filter(|i| i.is_routed())?;
        Some(
            ifc.mac
                .unwrap_or_else(|| MacAddr::default_for_port(port as u8)),
        )
    }

    /// Gives every routed port whose `mac` or `mtu` the file leaves out
    /// the interface's own (read from `/sys/class/net/NAME/address` and
    /// `.../mtu`, what `SIOCGIFHWADDR` and `SIOCGIFMTU` report): the live
    /// router's defaults. Replay keeps the file's defaults instead
    /// ([`MacAddr::default_for_port`], [`DEFAULT_MTU`]).
    ///
    /// # Errors
    /// Each port whose value cannot be read, naming the key to set.
    pub fn read_link_settings(&mut self, origin: &str) -> Result<(), super::ConfigErrors> {
        self.read_link_settings_from(std::path::Path::new(SYSFS_NET), origin)
    }

    /// [`RouterConfig::read_link_settings`] from another sysfs directory
    /// (tests).
    ///
    /// # Errors
    /// As [`RouterConfig::read_link_settings`].
    pub fn read_link_settings_from(
        &mut self,
        root: &std::path::Path,
        origin: &str,
    ) -> Result<(), super::ConfigErrors> {
        let mut errors = Vec::new();
        for (i, ifc) in self.interfaces.iter_mut().enumerate() {
            if !ifc.is_routed() {
                continue;
            }
            let dir = root.join(&ifc.name);
            let read = |f: &str| {
                let p = dir.join(f);
                std::fs::read_to_string(&p)
                    .map(|s| s.trim().to_string())
                    .map_err(|e| format!("cannot read {}: {e}", p.display()))
            };
            let mut fail = |key: &str, why: String| {
                errors.push(super::ConfigError {
                    origin: origin.to_string(),
                    line: None,
                    key: format!("interfaces[{i}].{key}"),
                    reason: format!("{why} (set it in the file)"),
                });
            };
            if ifc.mac.is_none() {
                match read("address").and_then(|s| s.parse::<MacAddr>()) {
                    Ok(m) => ifc.mac = Some(m),
                    Err(e) => fail("mac", e),
                }
            }
            if ifc.mtu.is_none() {
                match read("mtu")
                    .and_then(|s| s.parse::<u32>().map_err(|e| format!("MTU \"{s}\": {e}")))
                {
                    Ok(m) => ifc.mtu = Some(m),
                    Err(e) => fail("mtu", e),
                }
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(super::ConfigErrors(errors))
        }
    }
}

/// Whether `a` may be a router interface's address.
fn address_problem(a: &InterfaceAddr) -> Option<String> {
    let bad = match a.addr {
        IpAddr::V4(v) => {
            if v.is_unspecified() || v.is_loopback() || v.is_multicast() || v.is_broadcast() {
                Some("not a unicast address")
            } else if a.len == 0 {
                Some("a /0 connected route covers everything")
            } else if a.len < 31 && u32::from(v) == u32::from(v) & !(u32::MAX >> a.len) {
                Some("the network address of its prefix")
            } else if a.len < 31 && u32::from(v) | (u32::MAX >> a.len) == u32::from(v) {
                Some("the broadcast address of its prefix")
            } else {
                None
            }
        }
        IpAddr::V6(v) => {
            if v.is_unspecified() || v.is_loopback() || v.is_multicast() {
                Some("not a unicast address")
            } else if a.len == 0 {
                Some("a /0 connected route covers everything")
            } else {
                None
            }
        }
    };
    bad.map(|b| format!("{a}: {b}"))
}

/// The cross-table checks of the routed-mode keys (see the module docs).
pub(super) fn validate(cfg: &RouterConfig, errs: &mut Vec<(String, String)>) {
    // Every address and connected prefix, with its key.
    let mut addrs: BTreeMap<IpAddr, String> = BTreeMap::new();
    let mut nets: Vec<(IpNet, usize, String)> = Vec::new();
    for (i, ifc) in cfg.interfaces.iter().enumerate() {
        let v6 = ifc.addresses.iter().any(|a| a.addr.is_ipv6());
        if let Some(m) = ifc.mtu {
            let min = if v6 { MIN_MTU_V6 } else { MIN_MTU };
            if !(min..=MAX_MTU).contains(&m) {
                errs.push((
                    format!("interfaces[{i}].mtu"),
                    format!(
                        "{m} is outside {min}..={MAX_MTU}{}",
                        if v6 { " (IPv6 needs 1280)" } else { "" }
                    ),
                ));
            }
        }
        if let Some(m) = ifc.mac
            && (m.is_group() || m == MacAddr::default())
        {
            errs.push((
                format!("interfaces[{i}].mac"),
                format!("{m} is not a unicast MAC address"),
            ));
        }
        for (j, a) in ifc.addresses.iter().enumerate() {
            let key = format!("interfaces[{i}].addresses[{j}]");
            if let Some(p) = address_problem(a) {
                errs.push((key, p));
                continue;
            }
            if let Some(k) = addrs.insert(a.addr, key.clone()) {
                errs.push((key, format!("{} is also {k}", a.addr)));
                continue;
            }
            let net = a.network();
            if let Some((other, _, k)) = nets
                .iter()
                .find(|(n, port, _)| *port != i && n.overlaps(&net))
            {
                errs.push((
                    key,
                    format!("{net} overlaps {other} of {k} (another interface)"),
                ));
                continue;
            }
            nets.push((net, i, key));
        }
    }
    let routed = |name: &str| {
        cfg.interfaces
            .iter()
            .find(|i| i.name == name)
            .is_some_and(|i| !i.addresses.is_empty())
    };
    for (i, w) in cfg.wires.iter().enumerate() {
        for (k, n) in [("from", &w.from), ("to", &w.to)] {
            if routed(n) {
                errs.push((
                    format!("wires[{i}].{k}"),
                    format!(
                        "\"{n}\" is a routed port (it has addresses): wires join ports without addresses"
                    ),
                ));
            }
        }
    }
    let reaches = |a: IpAddr| nets.iter().find(|(n, _, _)| n.contains(a));
    let mut prefixes = BTreeMap::new();
    for (i, r) in cfg.routes.iter().enumerate() {
        let key = |k: &str| format!("routes[{i}].{k}");
        if let Some(j) = prefixes.insert(r.prefix, i) {
            errs.push((
                key("prefix"),
                format!("{} is already routes[{j}]", r.prefix),
            ));
        } else if let Some((_, _, k)) = nets.iter().find(|(n, _, _)| *n == r.prefix) {
            errs.push((
                key("prefix"),
                format!("{} is the connected prefix of {k}", r.prefix),
            ));
        }
        match (&r.via, &r.interface) {
            (Some(_), Some(_)) | (None, None) => errs.push((
                format!("routes[{i}]"),
                "give exactly one of `via` (a gateway) and `interface`".into(),
            )),
            (Some(v), None) => {
                if v.is_ipv4() != matches!(r.prefix, IpNet::V4(_)) {
                    errs.push((
                        key("via"),
                        format!("{v} is not of the family of {}", r.prefix),
                    ));
                } else if addrs.contains_key(v) {
                    errs.push((key("via"), format!("{v} is one of the router's addresses")));
                } else if reaches(*v).is_none() {
                    errs.push((
                        key("via"),
                        format!(
                            "{v} is on no connected prefix (no interface's addresses reach it)"
                        ),
                    ));
                }
            }
            (None, Some(n)) => {
                if cfg.port_of(n).is_none() {
                    errs.push((key("interface"), format!("unknown interface \"{n}\"")));
                } else if !routed(n) {
                    errs.push((
                        key("interface"),
                        format!("\"{n}\" has no addresses (a wire port routes nothing)"),
                    ));
                }
            }
        }
    }
    let mut seen = BTreeMap::new();
    for (i, n) in cfg.neighbours.iter().enumerate() {
        let key = format!("neighbours[{i}].address");
        if let Some(j) = seen.insert(n.address, i) {
            errs.push((key, format!("{} is already neighbours[{j}]", n.address)));
        } else if addrs.contains_key(&n.address) {
            errs.push((
                key,
                format!("{} is one of the router's addresses", n.address),
            ));
        } else if reaches(n.address).is_none() {
            errs.push((key, format!("{} is on no connected prefix", n.address)));
        }
        if n.mac.is_group() || n.mac == MacAddr::default() {
            errs.push((
                format!("neighbours[{i}].mac"),
                format!("{} is not a unicast MAC address", n.mac),
            ));
        }
    }
    let r = &cfg.router;
    if r.icmp_burst == 0 {
        errs.push(("router.icmp_burst".into(), "must be at least 1".into()));
    }
    if r.neighbour_queue > MAX_HOLD {
        errs.push((
            "router.neighbour_queue".into(),
            format!("{} is above {MAX_HOLD}", r.neighbour_queue),
        ));
    }
    if r.resolve_tries == 0 {
        errs.push(("router.resolve_tries".into(), "must be at least 1".into()));
    }
    if r.resolve_interval_ms == 0 {
        errs.push((
            "router.resolve_interval_ms".into(),
            "must be at least 1 ms".into(),
        ));
    }
    if r.reachable_ms == 0 {
        errs.push(("router.reachable_ms".into(), "must be at least 1 ms".into()));
    }
    let any_routed = cfg.interfaces.iter().any(|i| !i.addresses.is_empty());
    if !any_routed && (!cfg.routes.is_empty() || !cfg.neighbours.is_empty()) {
        errs.push((
            if cfg.routes.is_empty() {
                "neighbours".into()
            } else {
                "routes".into()
            },
            "no interface has addresses: routes and neighbours need a routed port".into(),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_settings_come_from_sysfs_unless_set() {
        let root = std::env::temp_dir().join(format!("bp-sysfs-{}", std::process::id()));
        std::fs::create_dir_all(root.join("r-a")).unwrap();
        std::fs::write(root.join("r-a/address"), "02:aa:00:00:00:01\n").unwrap();
        std::fs::write(root.join("r-a/mtu"), "9000\n").unwrap();
        let text = "[[interfaces]]\nname = \"r-a\"\naddresses = [\"10.0.0.1/24\"]\n\
                    [[interfaces]]\nname = \"r-b\"\naddresses = [\"10.0.1.1/24\"]\nmtu = 1400\n\
                    [[interfaces]]\nname = \"w\"\n";
        let mut c = RouterConfig::from_toml_str(text, "t").unwrap();
        let e = c.read_link_settings_from(&root, "t").unwrap_err();
        assert_eq!(e.0.len(), 1, "{e}");
        assert!(
            e.to_string()
                .starts_with("t: interfaces[1].mac: cannot read"),
            "{e}"
        );
        assert_eq!(c.interfaces[0].mac, Some(MacAddr([2, 0xaa, 0, 0, 0, 1])));
        assert_eq!(
            (c.interfaces[0].mtu, c.interfaces[1].mtu),
            (Some(9000), Some(1400))
        );
        assert_eq!(c.interfaces[2].mac, None, "wire ports are left alone");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn parse_values() {
        assert_eq!(
            "02:aB:00:00:00:01".parse::<MacAddr>().unwrap(),
            MacAddr([2, 0xab, 0, 0, 0, 1])
        );
        assert!("02:00:00:00:00".parse::<MacAddr>().is_err());
        assert!("02:00:00:00:00:01:02".parse::<MacAddr>().is_err());
        assert!("02:00:00:00:00:1g".parse::<MacAddr>().is_err());
        assert_eq!(
            "10.9.0.0/16".parse::<IpNet>().unwrap().to_string(),
            "10.9.0.0/16"
        );
        assert!(
            "10.9.0.1/16"
                .parse::<IpNet>()
                .unwrap_err()
                .contains("host bits")
        );
        assert!("10.9.0.0/33".parse::<IpNet>().is_err());
        assert!("10.9.0.0".parse::<IpNet>().is_err());
        let a: InterfaceAddr = "2001:db8:1::1/64".parse().unwrap();
        assert_eq!(a.network().to_string(), "2001:db8:1::/64");
        assert!(a.network().contains("2001:db8:1::77".parse().unwrap()));
        assert!(!a.network().contains("10.0.0.1".parse().unwrap()));
        let n16: IpNet = "10.0.0.0/16".parse().unwrap();
        let n24: IpNet = "10.0.3.0/24".parse().unwrap();
        assert!(n16.overlaps(&n24) && n24.overlaps(&n16));
        assert!(!n24.overlaps(&"10.0.4.0/24".parse().unwrap()));
    }
}
