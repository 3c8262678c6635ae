//! The forwarding table the stage looks destinations up in, built once
//! from the config: connected routes from the interfaces' addresses,
//! static routes, and a host route per router address (and per IPv4
//! directed broadcast) whose next hop is [`NextHop::Local`].
//!
//! Routes live in one [`Lpm4`] and one [`Lpm6`]; the value stored with a
//! prefix is an index into [`Fib::hops`], so a lookup answers with the
//! whole next hop in one more load.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::config::{ForwardConfig, RouteVia};
use crate::addr::{InterfaceAddr, IpNet, MacAddr};
use crate::route::{Lpm4, Lpm6, Prefix};

/// Where a route sends a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NextHop {
    /// To the router itself (one of its addresses, or a directed
    /// broadcast of a connected prefix).
    Local,
    /// Out of `port`, to the destination itself (a connected prefix, or a
    /// static route naming an interface).
    Direct {
        /// The egress port.
        port: u8,
    },
    /// Out of `port`, to the gateway `via`.
    Gateway {
        /// The egress port.
        port: u8,
        /// The gateway, on a connected prefix of `port`.
        via: IpAddr,
    },
}

impl NextHop {
    /// The egress port and the address whose MAC the frame needs, for
    /// destination `dst` (`None` for [`NextHop::Local`]).
    pub fn resolve(self, dst: IpAddr) -> Option<(u8, IpAddr)> {
        match self {
            NextHop::Local => None,
            NextHop::Direct { port } => Some((port, dst)),
            NextHop::Gateway { port, via } => Some((port, via)),
        }
    }
}

/// What the stage knows about one port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortInfo {
    /// Whether the port has addresses (else the wires handle it).
    pub routed: bool,
    /// The router's MAC here.
    pub mac: MacAddr,
    /// The IP MTU.
    pub mtu: u32,
    /// The router's addresses here.
    pub addresses: Vec<InterfaceAddr>,
    /// Whether copies leaving here lose their Icarus option.
    pub strip: bool,
}

impl PortInfo {
    /// The router's IPv4 address here best suited to talk to `peer`: one
    /// whose prefix holds it, else the first.
    pub fn v4_for(&self, peer: Option<Ipv4Addr>) -> Option<Ipv4Addr> {
        let v4 = || {
            self.addresses.iter().filter_map(|a| match a.addr {
                IpAddr::V4(x) => Some((x, a)),
                IpAddr::V6(_) => None,
            })
        };
        peer.and_then(|p| {
            v4().find(|(_, a)| a.network().contains(IpAddr::V4(p)))
                .map(|(x, _)| x)
        })
        .or_else(|| v4().map(|(x, _)| x).next())
    }

    /// The router's IPv6 address here best suited to talk to `peer`.
    pub fn v6_for(&self, peer: Option<Ipv6Addr>) -> Option<Ipv6Addr> {
        let v6 = || {
            self.addresses.iter().filter_map(|a| match a.addr {
                IpAddr::V6(x) => Some((x, a)),
                IpAddr::V4(_) => None,
            })
        };
        peer.and_then(|p| {
            v6().find(|(_, a)| a.network().contains(IpAddr::V6(p)))
                .map(|(x, _)| x)
        })
        .or_else(|| v6().map(|(x, _)| x).next())
    }

    /// Whether `addr` is one of the router's addresses here.
    pub fn owns(&self, addr: IpAddr) -> bool {
        self.addresses.iter().any(|a| a.addr == addr)
    }
}

/// The routes and the ports (see the module docs).
#[derive(Debug, Clone)]
pub struct Fib {
    /// IPv4 routes; values index [`Fib::hops`].
    pub v4: Lpm4,
    /// IPv6 routes; values index [`Fib::hops`].
    pub v6: Lpm6,
    /// The distinct next hops.
    pub hops: Vec<NextHop>,
    /// Per port, in port order.
    pub ports: Vec<PortInfo>,
}

impl Fib {
    /// The table `cfg` describes; `strip` is the Icarus strip mask. A
    /// route the validation would refuse (a gateway no connected prefix
    /// reaches) is left out.
    pub fn build(cfg: &ForwardConfig, strip: u64) -> Fib {
        let ports: Vec<PortInfo> = cfg
            .ports
            .iter()
            .enumerate()
            .map(|(i, p)| PortInfo {
                routed: !p.addresses.is_empty(),
                mac: p.mac,
                mtu: p.mtu,
                addresses: p.addresses.clone(),
                strip: strip & 1u64.checked_shl(i as u32).unwrap_or(0) != 0,
            })
            .collect();
        let mut fib = Fib {
            v4: Lpm4::new(),
            v6: Lpm6::new(),
            hops: Vec::new(),
            ports,
        };
        let mut ids: HashMap<NextHop, u32> = HashMap::new();
        let mut routes: Vec<(IpNet, NextHop)> = Vec::new();
        let connected: Vec<(IpNet, u8)> = cfg
            .ports
            .iter()
            .enumerate()
            .flat_map(|(i, ifc)| ifc.addresses.iter().map(move |a| (a.network(), i as u8)))
            .collect();
        for &(net, port) in &connected {
            routes.push((net, NextHop::Direct { port }));
        }
        for r in &cfg.routes {
            let hop = match r.via {
                RouteVia::Gateway(via) => connected
                    .iter()
                    .filter(|(n, _)| n.contains(via))
                    .max_by_key(|(n, _)| n.prefix_len())
                    .map(|&(_, port)| NextHop::Gateway { port, via }),
                RouteVia::Port(port) => Some(NextHop::Direct { port }),
            };
            if let Some(h) = hop {
                routes.push((r.prefix, h));
            }
        }
        for p in &cfg.ports {
            for a in &p.addresses {
                if let Some(host) = IpNet::of(a.addr, if a.addr.is_ipv4() { 32 } else { 128 }) {
                    routes.push((host, NextHop::Local));
                }
                if let (IpAddr::V4(v), l @ 1..=30) = (a.addr, a.len) {
                    let bcast = u32::from(v) | (u32::MAX >> l);
                    if let Ok(p) = Prefix::new(bcast, 32) {
                        routes.push((IpNet::V4(p), NextHop::Local));
                    }
                }
            }
        }
        for (net, hop) in routes {
            let next = fib.hops.len() as u32;
            let id = *ids.entry(hop).or_insert(next);
            if id == next {
                fib.hops.push(hop);
            }
            match net {
                IpNet::V4(p) => {
                    fib.v4.insert(p, id);
                }
                IpNet::V6(p) => {
                    fib.v6.insert(p, id);
                }
            }
        }
        fib
    }

    /// The next hop of one destination (tests, the control path; the
    /// stage looks up whole batches).
    pub fn lookup(&self, dst: IpAddr) -> Option<NextHop> {
        let m = match dst {
            IpAddr::V4(a) => self.v4.lookup(u32::from(a)),
            IpAddr::V6(a) => self.v6.lookup(u128::from(a)),
        }?;
        self.hops.get(m.nexthop as usize).copied()
    }

    /// The port whose connected prefix holds `addr`.
    pub fn port_of_neighbour(&self, addr: IpAddr) -> Option<u8> {
        match self.lookup(addr)? {
            NextHop::Direct { port } => Some(port),
            _ => None,
        }
    }

    /// Whether any port is routed.
    pub fn any_routed(&self) -> bool {
        self.ports.iter().any(|p| p.routed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RouterConfig;

    #[test]
    fn builds_connected_static_and_local_routes() {
        let cfg = RouterConfig::from_toml_str(
            r#"
[[interfaces]]
name = "a"
addresses = ["10.1.0.1/24", "2001:db8:1::1/64"]
[[interfaces]]
name = "b"
addresses = ["10.2.0.1/24"]
mac = "02:00:00:00:00:0b"
mtu = 9000
[[interfaces]]
name = "w"
[[routes]]
prefix = "10.9.0.0/16"
via = "10.2.0.2"
[[routes]]
prefix = "0.0.0.0/0"
interface = "a"
"#,
            "t",
        )
        .unwrap();
        let f = Fib::build(&cfg.forward_config(), 0b10);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(f.lookup(ip("10.1.0.1")), Some(NextHop::Local));
        assert_eq!(f.lookup(ip("10.1.0.255")), Some(NextHop::Local));
        assert_eq!(f.lookup(ip("10.1.0.7")), Some(NextHop::Direct { port: 0 }));
        assert_eq!(
            f.lookup(ip("10.9.3.4")),
            Some(NextHop::Gateway {
                port: 1,
                via: ip("10.2.0.2")
            })
        );
        assert_eq!(f.lookup(ip("8.8.8.8")), Some(NextHop::Direct { port: 0 }));
        assert_eq!(f.lookup(ip("2001:db8:1::1")), Some(NextHop::Local));
        assert_eq!(
            f.lookup(ip("2001:db8:1::9")),
            Some(NextHop::Direct { port: 0 })
        );
        assert_eq!(f.lookup(ip("2001:db8:7::9")), None);
        assert!(f.ports[0].routed && !f.ports[2].routed);
        assert_eq!(f.ports[0].mac, MacAddr::default_for_port(0));
        assert_eq!((f.ports[1].mtu, f.ports[0].mtu), (9000, 1500));
        assert!(f.ports[1].strip && !f.ports[0].strip);
        assert_eq!(f.ports[0].v4_for(None), Some(Ipv4Addr::new(10, 1, 0, 1)));
        assert_eq!(f.ports[1].v6_for(None), None);
        assert_eq!(f.port_of_neighbour(ip("10.2.0.9")), Some(1));
    }
}
