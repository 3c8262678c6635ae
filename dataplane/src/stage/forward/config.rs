//! The forwarding stage's own settings: the routed ports, the static
//! routes and neighbours, and the `[router]` section's limits, with every
//! default already applied. The router's configuration builds one
//! (`RouterConfig::forward_config`); the stage reads nothing else of it.

use std::net::IpAddr;

use crate::addr::{InterfaceAddr, IpNet, MacAddr};

/// One port as the forwarding stage sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardPort {
    /// The router's MAC here.
    pub mac: MacAddr,
    /// The IP MTU.
    pub mtu: u32,
    /// The router's addresses here, with their connected prefix lengths;
    /// none: a wire port, which the stage leaves alone.
    pub addresses: Vec<InterfaceAddr>,
}

/// Where a static route sends its prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteVia {
    /// To a gateway on a connected prefix (a route no connected prefix
    /// reaches is left out of the table).
    Gateway(IpAddr),
    /// Out of a port, to the destination itself.
    Port(u8),
}

/// A static route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaticRoute {
    /// The destination.
    pub prefix: IpNet,
    /// Where it goes.
    pub via: RouteVia,
}

/// Everything the forwarding stage is built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardConfig {
    /// Per port, in port order.
    pub ports: Vec<ForwardPort>,
    /// The static routes (the connected ones come from the ports).
    pub routes: Vec<StaticRoute>,
    /// The static neighbours (never expire): address and MAC.
    pub neighbours: Vec<(IpAddr, MacAddr)>,
    /// ICMP errors per second (0: no limit).
    pub icmp_rate: u32,
    /// ICMP errors sent back to back at most.
    pub icmp_burst: u32,
    /// Packets held per next hop while it is being resolved.
    pub neighbour_queue: usize,
    /// ARP requests / neighbour solicitations sent before the held packets
    /// are dropped.
    pub resolve_tries: u32,
    /// Time between two of them, ms.
    pub resolve_interval_ms: u64,
    /// How long a learned neighbour stays usable, ms.
    pub reachable_ms: u64,
}
