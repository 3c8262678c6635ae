//! Wires: unicast forwarding of a bump in the wire.
//!
//! A live packet that arrived on port `i` goes out of `routes[i]` (never
//! `i` itself); none: dropped with [`DropReason::NoRoute`]. Packets that
//! arrived on a routed port (one with addresses: the forwarding stage's)
//! are left alone. With
//! `skip_multicast` (the multicast stage is on), IP multicast packets are
//! left to the multicast stage, which runs next; without it they follow the
//! wires like any frame (broadcasts and non-IP frames always do). The
//! routes come from the config's `[[wires]]`
//! ([`RouterConfig::unicast_routes`](crate::config::RouterConfig::unicast_routes)).

use std::any::Any;

use crate::clock::Timestamp;
use crate::packet::{Batch, DropReason, PortSet, Verdict};
use crate::pipeline::Stage;

/// Counters of the [`Wires`] stage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct WiresCounters {
    /// Packets given egress ports.
    pub routed: u64,
    /// Packets with no wire out of their ingress port.
    pub no_route: u64,
    /// Multicast packets left to the multicast stage.
    pub multicast: u64,
}

/// The wires stage.
#[derive(Debug, Clone)]
pub struct Wires {
    routes: Vec<PortSet>,
    skip_multicast: bool,
    routed: PortSet,
    counters: WiresCounters,
}

impl Wires {
    /// `routes[i]`: where unicast from port `i` goes (the ingress port is
    /// removed from every entry).
    pub fn new(routes: Vec<PortSet>, skip_multicast: bool) -> Self {
        let routes = routes
            .into_iter()
            .enumerate()
            .map(|(i, r)| PortSet::from_mask(r.mask() & !(1u64.checked_shl(i as u32).unwrap_or(0))))
            .collect();
        Wires {
            routes,
            skip_multicast,
            routed: PortSet::EMPTY,
            counters: WiresCounters::default(),
        }
    }

    /// Leaves the packets that arrive on `routed` ports to the forwarding
    /// stage.
    pub fn skipping(mut self, routed: PortSet) -> Self {
        self.routed = routed;
        self
    }

    /// The counters.
    pub fn counters(&self) -> &WiresCounters {
        &self.counters
    }
}

impl Wires {
    /// Gives every live packet its wire's egress ports (see the module
    /// docs).
    pub fn process(&mut self, batch: &mut Batch) {
        for p in batch.packets_mut() {
            if !p.is_live() || self.routed.contains(p.ingress) {
                continue;
            }
            if self.skip_multicast
                && p.parsed
                    .as_ref()
                    .is_some_and(|q| q.is_ip() && q.dst_multicast)
            {
                self.counters.multicast += 1;
                continue;
            }
            let r = self
                .routes
                .get(usize::from(p.ingress))
                .copied()
                .unwrap_or(PortSet::EMPTY);
            if r.is_empty() {
                self.counters.no_route += 1;
                p.drop_for(DropReason::NoRoute);
            } else {
                self.counters.routed += 1;
                p.verdict = match p.verdict {
                    Verdict::Mark(_) => Verdict::Mark(r),
                    _ => Verdict::Forward(r),
                };
            }
        }
    }
}

impl Stage for Wires {
    fn name(&self) -> &'static str {
        "wires"
    }

    fn process(&mut self, batch: &mut Batch, _now: Timestamp) {
        Wires::process(self, batch);
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::{Pipeline, PipelineConfig};
    use crate::wire::LinkType;

    fn frame(dst: [u8; 4]) -> Vec<u8> {
        use crate::wire::build::{self, IpHeader};
        let ip = IpHeader::v4([10, 0, 0, 1], dst, build::PROTO_UDP);
        build::udp_frame(
            [0, 1, 2, 3, 4, 5],
            [6, 7, 8, 9, 10, 11],
            &ip,
            1000,
            2000,
            &[],
        )
    }

    #[test]
    fn routes_and_never_hairpins() {
        let routes = vec![
            PortSet::from_mask(0b011),
            PortSet::EMPTY,
            PortSet::single(0),
        ];
        let mut p = Pipeline::new(PipelineConfig {
            default_egress: PortSet::EMPTY,
            ..PipelineConfig::default()
        })
        .with_stage(Wires::new(routes, true));
        let mut b = Batch::new();
        let f = frame([10, 0, 0, 2]);
        let m = frame([239, 1, 1, 1]);
        b.push_from(Timestamp::ZERO, 42, LinkType::Ethernet, 0, &f);
        b.push_from(Timestamp::ZERO, 42, LinkType::Ethernet, 1, &f);
        b.push_from(Timestamp::ZERO, 42, LinkType::Ethernet, 2, &f);
        b.push_from(Timestamp::ZERO, 42, LinkType::Ethernet, 0, &m);
        p.process(&mut b, Timestamp::ZERO);
        let v: Vec<_> = b.packets().iter().map(|p| p.verdict).collect();
        assert_eq!(v[0], Verdict::Forward(PortSet::single(1)));
        assert_eq!(v[1], Verdict::Drop(DropReason::NoRoute));
        assert_eq!(v[2], Verdict::Forward(PortSet::single(0)));
        // Left for the multicast stage (none here): the default egress.
        assert_eq!(v[3], Verdict::Forward(PortSet::EMPTY));
        let c = p.stage::<Wires>().unwrap().counters();
        assert_eq!((c.routed, c.no_route, c.multicast), (2, 1, 1));
    }
}
