//! Forwarding: the IP router of the routed ports.
//!
//! A port with addresses in the config is routed ([`fib::PortInfo`]); the
//! wires stage handles the others. For every live packet that arrived on
//! a routed port:
//!
//! 1. **Layer 2.** A frame addressed to another host's MAC is dropped
//!    (`other_host`: a promiscuous port sees them); only Ethernet frames
//!    carrying IPv4, IPv6 or ARP are routed (else `not_routable`). ARP is
//!    consumed ([`Verdict::Consumed`]). IP multicast is left to the
//!    multicast stage when it is on, else consumed, as are IPv4 limited
//!    broadcasts.
//! 2. **Lookup.** The destinations of the batch are looked up in the
//!    [`Fib`]'s longest-prefix-match tables, all IPv4 ones in one
//!    [`Lpm::lookup_batch`](crate::route::Lpm::lookup_batch) call and all
//!    IPv6 ones in another (the Bloom filters of every stratum probed for
//!    the batch at once). No route: `no_route` (and a Destination
//!    Unreachable, no route: IPv4 type 3 code 0 / ICMPv6 type 1 code 0). A
//!    route to the router itself: consumed.
//! 3. **Forward.** TTL / hop limit 1 or 0: `ttl_expired`. An IP datagram
//!    longer than the egress port's MTU: `too_big` (the router does not
//!    fragment; a datagram that only fits once the egress strips its
//!    Icarus option passes, and one that an Icarus option inserted at
//!    ingress pushed over is too big, since insertion runs before this
//!    stage; the MTU its ICMP error reports is then the egress MTU less
//!    the option's bytes, the room a sender must leave so that its packets
//!    fit once the domain's edge has inserted it). The next hop's MAC
//!    comes from the neighbour table
//!    ([`Neighbours`]). The TTL / hop limit is decremented (the IPv4
//!    checksum updated incrementally, RFC 1624), the Ethernet destination
//!    becomes the next hop's MAC and the source the egress port's, and the
//!    verdict the egress port (which may be the port it came in on: a
//!    route back where it came from is followed, as Linux does, without a
//!    redirect; [`Packet::to_ingress`] tells the egress stage it is not a
//!    hairpin). A next hop with no entry: the packet is
//!    held ([`Verdict::Held`]) while the router resolves it (below), or
//!    dropped (`no_neighbour`) when its queue is full.
//! 4. **ICMP.** A packet dropped for `ttl_expired` gets a Time Exceeded
//!    (IPv4 type 11 / ICMPv6 type 3), one dropped for `too_big` a
//!    Fragmentation Needed with the next-hop MTU (IPv4 type 3 code 4, when
//!    DF is set; without DF the packet is dropped, counted, since the
//!    router does not fragment) / Packet Too Big (ICMPv6 type 2); an echo
//!    request to one of the router's addresses gets its echo reply, a UDP
//!    datagram to one a Port Unreachable from that address (IPv4 type 3
//!    code 3 / ICMPv6 type 1 code 4: the router runs no UDP service, and
//!    a traceroute to it ends there). Never
//!    an error about an ICMP error, a non-first fragment or a packet to a
//!    group address ([`icmp::may_answer_with_error`]); errors are limited
//!    by a token bucket in packet time (`router.icmp_rate` a second, burst
//!    `router.icmp_burst`; one bucket per worker), the ones it refuses
//!    counted. The source is the router's address on the ingress port.
//!
//! # Neighbours
//!
//! The router answers ARP requests and neighbour solicitations for its
//! own addresses on the port they came in on, and learns the sender of
//! every ARP message and the link-layer option of every solicitation and
//! advertisement whose address is on a connected prefix of the port they
//! came in on ([`Neighbours::learn`]). After each batch
//! ([`Neighbours::due`]) held packets whose next hop is now known are
//! sent; unresolved next hops get an ARP request (broadcast) or a
//! neighbour solicitation (to the solicited-node group) every
//! `router.resolve_interval_ms`, and after `router.resolve_tries` their
//! packets are dropped (`no_neighbour`). Held packets count in the
//! chain's `held` until they leave it for `forwarded` or `dropped`. Each
//! worker has its own table; with several workers, what one learns is
//! sent to the others between batches ([`NeighbourEvent`],
//! [`crate::runtime::share`]), since the answer may reach another worker
//! than the one holding the packets (each worker solicits for its own).
//!
//! # Frames the router originates
//!
//! Answers are new frames, not the packet turned around: the packet keeps
//! its own verdict (dropped by its reason, or [`Verdict::Consumed`]), so the
//! chain's accounting stays `received == forwarded + local + dropped +
//! held`. The stage writes them into an [`Originated`] batch (reused
//! buffers, at most [`BATCH_SIZE`] frames a batch; a frame that finds it
//! full is counted and not made). ARP replies and neighbour
//! advertisements go back out of the port the question came in by, to
//! the asker's MAC. ICMP errors and echo replies are routed like any
//! packet: out of the port the routing table gives for their destination,
//! to that next hop's MAC (an error about a packet that went round a loop
//! takes the short way back; Linux does the same), or, while that next
//! hop is unknown, back to the MAC the packet came from. Their ingress is
//! [`NO_INGRESS`], which the egress stage never counts as a hairpin.
//! Held packets released go out like forwarded ones (with their own ingress port,
//! marked in [`Originated::released`] so that the chain moves them from
//! `held` to `forwarded`). The chain hands the batch to the egress stage
//! after the packets' own copies.
//!
//! Forwarding is done in place on the batch's buffers, with fixed scratch
//! arrays for the lookups; held packets are copied into a pool of buffers
//! that is reused: once warm, nothing is allocated per packet.

pub mod config;
pub mod fib;
pub mod icmp;
pub mod ndisc;
pub mod neighbour;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::addr::MacAddr;
use crate::clock::Timestamp;
use crate::packet::{BATCH_SIZE, Batch, DropReason, NO_INGRESS, Packet, PortSet, Verdict};
use crate::route::RouteMatch;
use crate::wire::{EtherType, IpVersion, LinkType, Parsed, checksum, icarus};

pub use config::{ForwardConfig, ForwardPort, RouteVia, StaticRoute};
pub use fib::{Fib, NextHop, PortInfo};
pub use icmp::TokenBucket;
pub use neighbour::{Neighbours, Resolution};

use neighbour::{Due, Held, Hold};

/// A neighbour one worker learned, for the others
/// ([`crate::runtime::share`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeighbourEvent {
    /// Its address.
    pub addr: IpAddr,
    /// Its MAC.
    pub mac: MacAddr,
    /// When it was learned.
    pub at: Timestamp,
}

/// The frames the forwarding stage originates during one batch (see the
/// module docs), with what the chain needs to account for them.
#[derive(Debug, Clone, Default)]
pub struct Originated {
    batch: Batch,
    /// The frames of the batch that are held packets released (bit `i`:
    /// frame `i`), which the chain counts as forwarded or dropped.
    released: u32,
    /// Held packets dropped during the batch (resolution failed).
    failed: u64,
}

impl Originated {
    /// An empty set with its buffers allocated.
    pub fn new() -> Self {
        Originated {
            batch: Batch::new(),
            released: 0,
            failed: 0,
        }
    }

    /// Empties it for the next batch, keeping the buffers.
    pub fn clear(&mut self) {
        self.batch.clear();
        self.released = 0;
        self.failed = 0;
    }

    /// Which frames are held packets released (bit `i`: frame `i`).
    pub fn released(&self) -> u32 {
        self.released
    }

    /// Held packets dropped during the batch (their next hop never
    /// answered).
    pub fn failed(&self) -> u64 {
        self.failed
    }

    /// The frames, as a batch for the egress stage.
    pub fn batch(&self) -> &Batch {
        &self.batch
    }

    /// The frames, writable.
    pub fn batch_mut(&mut self) -> &mut Batch {
        &mut self.batch
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.batch.is_empty()
    }

    /// A frame of the router's own, out of `port`, built by `build`.
    fn push(&mut self, now: Timestamp, port: u8, build: impl FnOnce(&mut Vec<u8>) -> bool) -> bool {
        self.batch
            .push_with(now, NO_INGRESS, PortSet::single(port), build)
    }
}

/// Counters of the [`Forward`] stage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ForwardCounters {
    /// Packets routed: TTL decremented, MACs rewritten, an egress port
    /// given.
    pub forwarded: u64,
    /// Packets to the router itself, consumed (ARP, pings, ...).
    pub local: u64,
    /// IP multicast left to the multicast stage.
    pub multicast: u64,
    /// Dropped: no route.
    pub no_route: u64,
    /// Dropped: TTL / hop limit expired.
    pub ttl_expired: u64,
    /// Dropped: larger than the egress MTU.
    pub too_big: u64,
    /// Dropped: next hop's MAC unknown.
    pub no_neighbour: u64,
    /// Dropped: addressed to another host's MAC.
    pub other_host: u64,
    /// Dropped: not IP or ARP over Ethernet.
    pub not_routable: u64,
    /// ICMP errors sent (Time Exceeded, Fragmentation Needed / Packet
    /// Too Big).
    pub icmp_errors: u64,
    /// ICMP errors the token bucket refused.
    pub icmp_rate_limited: u64,
    /// Echo replies sent.
    pub echo_replies: u64,
    /// Frames not made: the batch of originated frames was full.
    pub originated_full: u64,
    /// ARP replies sent.
    pub arp_replies: u64,
    /// ARP requests sent.
    pub arp_requests: u64,
    /// Neighbour advertisements sent.
    pub nd_adverts: u64,
    /// Neighbour solicitations sent.
    pub nd_solicits: u64,
    /// Neighbour entries learned or changed.
    pub learned: u64,
    /// Packets held for a next hop being resolved.
    pub held: u64,
    /// Held packets sent once it was.
    pub released: u64,
    /// Held packets dropped: it never answered (also in `no_neighbour`).
    pub resolve_failed: u64,
    /// Multicast dropped: it did not come in by the port of the route back
    /// to its source.
    pub rpf_failed: u64,
    /// Datagrams to the peering port handed to the control path.
    pub peer_messages: u64,
    /// ... not handed over: its queue was full.
    pub peer_dropped: u64,
    /// The control path's datagrams sent.
    pub peer_sent: u64,
    /// ... not sent: no route or next hop yet.
    pub peer_unresolved: u64,
}

impl ForwardCounters {
    /// Adds another worker's counters.
    pub fn merge(&mut self, o: &ForwardCounters) {
        self.forwarded += o.forwarded;
        self.local += o.local;
        self.multicast += o.multicast;
        self.no_route += o.no_route;
        self.ttl_expired += o.ttl_expired;
        self.too_big += o.too_big;
        self.no_neighbour += o.no_neighbour;
        self.other_host += o.other_host;
        self.not_routable += o.not_routable;
        self.icmp_errors += o.icmp_errors;
        self.icmp_rate_limited += o.icmp_rate_limited;
        self.echo_replies += o.echo_replies;
        self.originated_full += o.originated_full;
        self.arp_replies += o.arp_replies;
        self.arp_requests += o.arp_requests;
        self.nd_adverts += o.nd_adverts;
        self.nd_solicits += o.nd_solicits;
        self.learned += o.learned;
        self.held += o.held;
        self.released += o.released;
        self.resolve_failed += o.resolve_failed;
        self.rpf_failed += o.rpf_failed;
        self.peer_messages += o.peer_messages;
        self.peer_dropped += o.peer_dropped;
        self.peer_sent += o.peer_sent;
        self.peer_unresolved += o.peer_unresolved;
    }
}

/// The forwarding stage (see the module docs).
#[derive(Debug, Clone)]
pub struct Forward {
    fib: Fib,
    neighbours: Neighbours,
    /// Ports with addresses.
    routed: u64,
    /// Leave IP multicast to the multicast stage.
    multicast: bool,
    icmp: TokenBucket,
    /// Record learned neighbours for the other workers.
    share: bool,
    events: Vec<NeighbourEvent>,
    counters: ForwardCounters,
    /// Batch scratch: the packets whose destination is looked up, their
    /// destinations, and the answers.
    idx4: [u8; BATCH_SIZE],
    dst4: [u32; BATCH_SIZE],
    out4: [Option<RouteMatch>; BATCH_SIZE],
    idx6: [u8; BATCH_SIZE],
    dst6: [u128; BATCH_SIZE],
    out6: [Option<RouteMatch>; BATCH_SIZE],
    /// A copy of a frame too big as it is, to see whether it fits once the
    /// egress strips its Icarus option.
    scratch: Vec<u8>,
    /// The peering control path's end, when peering is on.
    peer: Option<crate::peer::PeerTap>,
}

impl Forward {
    /// The stage for `cfg`'s routed ports; `strip` is the Icarus strip
    /// mask, `multicast` whether the multicast stage is on.
    pub fn new(cfg: &ForwardConfig, strip: u64, multicast: bool) -> Forward {
        let neighbours = Neighbours::new(
            cfg.neighbours.iter().copied(),
            cfg.reachable_ms.saturating_mul(1_000_000),
        )
        .with_resolution(Resolution {
            hold: cfg.neighbour_queue,
            tries: cfg.resolve_tries,
            interval_ns: cfg.resolve_interval_ms.saturating_mul(1_000_000),
        });
        let mut f = Forward::with_fib(Fib::build(cfg, strip), neighbours, multicast);
        f.icmp = TokenBucket::new(cfg.icmp_rate, cfg.icmp_burst);
        f
    }

    /// The stage over a table built elsewhere (tests, benches).
    pub fn with_fib(fib: Fib, neighbours: Neighbours, multicast: bool) -> Forward {
        let routed = fib
            .ports
            .iter()
            .enumerate()
            .filter(|(_, p)| p.routed)
            .fold(0u64, |m, (i, _)| {
                m | 1u64.checked_shl(i as u32).unwrap_or(0)
            });
        Forward {
            fib,
            neighbours,
            routed,
            multicast,
            icmp: TokenBucket::new(1000, 50),
            share: false,
            events: Vec::new(),
            counters: ForwardCounters::default(),
            idx4: [0; BATCH_SIZE],
            dst4: [0; BATCH_SIZE],
            out4: [None; BATCH_SIZE],
            idx6: [0; BATCH_SIZE],
            dst6: [0; BATCH_SIZE],
            out6: [None; BATCH_SIZE],
            scratch: Vec::new(),
            peer: None,
        }
    }

    /// The ports it routes.
    pub fn routed_ports(&self) -> PortSet {
        PortSet::from_mask(self.routed)
    }

    /// The counters.
    pub fn counters(&self) -> &ForwardCounters {
        &self.counters
    }

    /// The routes and ports.
    pub fn fib(&self) -> &Fib {
        &self.fib
    }

    /// The neighbour table.
    pub fn neighbours(&self) -> &Neighbours {
        &self.neighbours
    }

    /// Records every neighbour learned from now on for
    /// [`Forward::take_neighbour_events`] (several workers).
    pub fn share_neighbours(&mut self) {
        self.share = true;
    }

    /// The neighbours learned since the last call.
    pub fn take_neighbour_events(&mut self) -> impl Iterator<Item = NeighbourEvent> + '_ {
        self.events.drain(..)
    }

    /// Learns a neighbour another worker learned (not recorded again).
    pub fn apply_neighbour(&mut self, e: &NeighbourEvent) {
        self.neighbours.learn(e.addr, e.mac, e.at);
    }

    /// Routes every live packet of `batch` that arrived on a routed port
    /// (see the module docs); `now` is the batch's time. The frames the
    /// router makes go to `out`.
    pub fn process(&mut self, batch: &mut Batch, now: Timestamp, out: &mut Originated) {
        let (mut n4, mut n6) = (0usize, 0usize);
        for (i, p) in batch.packets_mut().iter_mut().enumerate() {
            if !p.is_live() || !PortSet::from_mask(self.routed).contains(p.ingress) {
                continue;
            }
            match self.classify(p, now, out) {
                Some(IpAddr::V4(d)) => {
                    self.idx4[n4] = i as u8;
                    self.dst4[n4] = u32::from(d);
                    n4 += 1;
                }
                Some(IpAddr::V6(d)) => {
                    self.idx6[n6] = i as u8;
                    self.dst6[n6] = u128::from(d);
                    n6 += 1;
                }
                None => {}
            }
        }
        if n4 > 0 {
            self.fib
                .v4
                .lookup_batch(&self.dst4[..n4], &mut self.out4[..n4]);
        }
        if n6 > 0 {
            self.fib
                .v6
                .lookup_batch(&self.dst6[..n6], &mut self.out6[..n6]);
        }
        let packets = batch.packets_mut();
        for k in 0..n4 {
            let hop = self.out4[k].and_then(|m| self.fib.hops.get(m.nexthop as usize).copied());
            let dst = IpAddr::V4(Ipv4Addr::from(self.dst4[k]));
            if let Some(p) = packets.get_mut(usize::from(self.idx4[k])) {
                self.route(p, dst, hop, now, out);
            }
        }
        for k in 0..n6 {
            let hop = self.out6[k].and_then(|m| self.fib.hops.get(m.nexthop as usize).copied());
            let dst = IpAddr::V6(Ipv6Addr::from(self.dst6[k]));
            if let Some(p) = packets.get_mut(usize::from(self.idx6[k])) {
                self.route(p, dst, hop, now, out);
            }
        }
        self.resolve(now, out);
        self.send_peer_datagrams(now, out);
    }

    /// Joins the stage to the peering control path ([`crate::peer`]):
    /// datagrams to the router's peering port go to it, and its datagrams
    /// leave as frames of the router's own.
    pub fn set_peer_tap(&mut self, tap: crate::peer::PeerTap) {
        self.peer = Some(tap);
    }

    /// The neighbour table's time-driven work (see the module docs).
    fn resolve(&mut self, now: Timestamp, out: &mut Originated) {
        let (fib, c) = (&self.fib, &mut self.counters);
        self.neighbours.due(now, |d| match d {
            Due::Release {
                port,
                mac,
                frame,
                held,
            } => {
                let i = out.batch.len();
                let ok = out
                    .batch
                    .push_with(held.ts, held.ingress, PortSet::single(port), |b| {
                        b.extend_from_slice(frame);
                        if let Some(d) = b.get_mut(0..6) {
                            d.copy_from_slice(&mac.0);
                        }
                        true
                    });
                if ok {
                    c.released += 1;
                    out.released |= 1u32.checked_shl(i as u32).unwrap_or(0);
                    if let Some(p) = out.batch.packets_mut().last_mut() {
                        p.orig_len = held.orig_len;
                        p.to_ingress = port == held.ingress;
                        p.icarus_pending = held.icarus_pending;
                    }
                }
                ok
            }
            Due::Solicit { addr, port } => {
                let Some(info) = fib.ports.get(usize::from(port)) else {
                    return true;
                };
                let mac = info.mac;
                let made = match addr {
                    IpAddr::V4(a) => info.v4_for(Some(a)).is_some_and(|src| {
                        out.push(now, port, |b| ndisc::arp_request(b, mac, src, a))
                    }),
                    IpAddr::V6(a) => info.v6_for(Some(a)).is_some_and(|src| {
                        out.push(now, port, |b| ndisc::neighbour_solicit(b, mac, src, a))
                    }),
                };
                match (made, addr) {
                    (true, IpAddr::V4(_)) => c.arp_requests += 1,
                    (true, IpAddr::V6(_)) => c.nd_solicits += 1,
                    (false, _) if out.batch.is_full() => {
                        c.originated_full += 1;
                        return false;
                    }
                    // No source address to ask from: counts as a try.
                    (false, _) => {}
                }
                true
            }
            Due::Failed { n } => {
                c.resolve_failed += n;
                c.no_neighbour += n;
                out.failed += n;
                true
            }
        });
    }

    /// Step 1 of the module docs: the destination to look up, or `None`
    /// when the packet was dealt with (dropped, consumed, left to the
    /// multicast stage).
    fn classify(&mut self, p: &mut Packet, now: Timestamp, out: &mut Originated) -> Option<IpAddr> {
        let c = &mut self.counters;
        let port = self.fib.ports.get(usize::from(p.ingress))?;
        let Some(x) = p.parsed.filter(|_| p.link_type == LinkType::Ethernet) else {
            c.not_routable += 1;
            p.drop_for(DropReason::NotRoutable);
            return None;
        };
        let l2_dst = p.data().get(0..6).unwrap_or(&[0; 6]);
        if l2_dst[0] & 1 == 0 && l2_dst != port.mac.0 {
            c.other_host += 1;
            p.drop_for(DropReason::OtherHost);
            return None;
        }
        if x.ethertype == EtherType::Arp {
            c.local += 1;
            p.verdict = Verdict::Consumed;
            if let Some(a) = ndisc::read_arp(p.data(), &x) {
                self.arp(p, &x, &a, now, out);
            }
            return None;
        }
        // (A parsed IP frame holds its whole header: no drop happens at
        // `ip_addr` in practice.)
        let Some(dst) = x
            .ip_version
            .and_then(|v| ip_addr(p.data(), x.l3_offset, v, Field::Dst))
        else {
            c.not_routable += 1;
            p.drop_for(DropReason::NotRoutable);
            return None;
        };
        if let Some(nd) = ndisc::read_nd(p.data(), &x) {
            c.local += 1;
            p.verdict = Verdict::Consumed;
            self.nd(p, &x, &nd, now, out);
            return None;
        }
        if x.dst_multicast || dst == IpAddr::V4(Ipv4Addr::BROADCAST) {
            if self.multicast && x.dst_multicast {
                c.multicast += 1;
                self.multicast_data(p, &x, dst);
            } else {
                c.local += 1;
                p.verdict = Verdict::Consumed;
            }
            return None;
        }
        Some(dst)
    }

    /// Multicast data that arrived on a routed port, before the multicast
    /// stage gives it its ports: forwarded only if it came in by the port
    /// of the route back to its source (the reverse-path check of
    /// multicast routers: a packet that came round a cycle of routers, or
    /// the second copy of one, is dropped, `rpf_failed`), and with its TTL
    /// or hop limit decremented (1 or 0: `ttl_expired`, without an ICMP
    /// error, as for any packet to a group). IGMP, MLD and link-local
    /// groups are the multicast stage's own (they never leave the link).
    fn multicast_data(&mut self, p: &mut Packet, x: &Parsed, dst: IpAddr) {
        use crate::wire::IpProtocol;
        if matches!(x.protocol, IpProtocol::Igmp | IpProtocol::Icmpv6)
            || crate::stage::multicast::is_link_local(dst)
        {
            return;
        }
        let src = x
            .ip_version
            .and_then(|v| ip_addr(p.data(), x.l3_offset, v, Field::Src));
        let back = src
            .and_then(|s| self.fib.lookup(s)?.resolve(s))
            .map(|(port, _)| port);
        if back != Some(p.ingress) {
            self.counters.rpf_failed += 1;
            p.drop_for(DropReason::RpfFailed);
            return;
        }
        if x.ttl <= 1 {
            self.counters.ttl_expired += 1;
            p.drop_for(DropReason::TtlExpired);
            return;
        }
        decrement_ttl(p, x);
    }

    /// Turns the control path's datagrams into frames (at most a batch's
    /// worth a call): routed to the peer like any packet, from this
    /// router's address on the way out, to its next hop's MAC. A next hop
    /// not known yet is asked for (ARP / NS) and the datagram dropped
    /// (`peer_unresolved`): the protocol repeats what matters.
    fn send_peer_datagrams(&mut self, now: Timestamp, out: &mut Originated) {
        let Some(tap) = &self.peer else { return };
        if tap.outbound.is_empty() {
            return;
        }
        let udp_port = tap.udp_port;
        for _ in 0..BATCH_SIZE / 2 {
            if out.batch.is_full() {
                self.counters.originated_full += 1;
                break;
            }
            let Some(d) = self.peer.as_ref().and_then(|t| t.outbound.try_recv().ok()) else {
                break;
            };
            let Some((port, via)) = self.fib.lookup(d.to).and_then(|h| h.resolve(d.to)) else {
                self.counters.peer_unresolved += 1;
                continue;
            };
            let Some(info) = self.fib.ports.get(usize::from(port)) else {
                continue;
            };
            let src = match d.to {
                IpAddr::V4(a) => info.v4_for(Some(a)).map(IpAddr::V4),
                IpAddr::V6(a) => info.v6_for(Some(a)).map(IpAddr::V6),
            };
            let (Some(src), Some(mac)) = (src, self.neighbours.get(via, now)) else {
                self.neighbours.want(via, port, now);
                self.counters.peer_unresolved += 1;
                continue;
            };
            let from = info.mac;
            if out.push(now, port, |b| {
                crate::peer::udp_frame(b, from, mac, src, d.to, udp_port, d.udp_port, &d.payload)
            }) {
                self.counters.peer_sent += 1;
            }
        }
    }

    /// A datagram to the router's peering port: handed to the control path
    /// (`peer_messages`), or counted `peer_dropped` when its queue is full.
    /// `true` when the datagram was one.
    fn take_peer_datagram(&mut self, p: &Packet, x: &Parsed) -> bool {
        let Some(tap) = &self.peer else { return false };
        if x.protocol != crate::wire::IpProtocol::Udp || x.dst_port != tap.udp_port {
            return false;
        }
        let Some(l4) = x.l4_offset else { return false };
        let frame = p.data();
        let end = (x.l3_offset + x.ip_total_len).min(frame.len());
        let payload = frame.get(l4 + 8..end).unwrap_or(&[]);
        let from = x
            .ip_version
            .and_then(|v| ip_addr(frame, x.l3_offset, v, Field::Src));
        let Some(from) = from else { return false };
        let msg = crate::peer::Inbound {
            from,
            ingress: p.ingress,
            payload: payload.to_vec(),
        };
        if tap.inbound.try_send(msg).is_ok() {
            self.counters.peer_messages += 1;
        } else {
            self.counters.peer_dropped += 1;
        }
        true
    }

    /// Steps 2 to 4 of the module docs for one looked-up packet.
    fn route(
        &mut self,
        p: &mut Packet,
        dst: IpAddr,
        hop: Option<NextHop>,
        now: Timestamp,
        out: &mut Originated,
    ) {
        let Some(x) = p.parsed else { return };
        let Some(hop) = hop else {
            self.counters.no_route += 1;
            p.drop_for(DropReason::NoRoute);
            self.error(p, &x, IcmpError::NoRoute, now, out);
            return;
        };
        let Some((port, via)) = hop.resolve(dst) else {
            self.counters.local += 1;
            p.verdict = Verdict::Consumed;
            if icmp::is_echo_request(p.data(), &x) {
                let (port, dst_mac) = self.answer_path(
                    x.ip_version
                        .and_then(|v| ip_addr(p.data(), x.l3_offset, v, Field::Src)),
                    p.ingress,
                    now,
                );
                let mac = self.port_mac(port);
                if out.push(now, port, |b| {
                    readdress(icmp::echo_reply(b, p.data(), &x, mac), b, dst_mac)
                }) {
                    self.counters.echo_replies += 1;
                } else if out.batch.is_full() {
                    self.counters.originated_full += 1;
                }
            } else if x.protocol == crate::wire::IpProtocol::Udp
                && self.fib.ports.iter().any(|q| q.owns(dst))
                && !self.take_peer_datagram(p, &x)
            {
                // No UDP service here (the end of a traceroute).
                self.error(p, &x, IcmpError::PortUnreachable(dst), now, out);
            }
            return;
        };
        if x.ttl <= 1 {
            self.counters.ttl_expired += 1;
            p.drop_for(DropReason::TtlExpired);
            self.error(p, &x, IcmpError::TimeExceeded, now, out);
            return;
        }
        let Some(egress) = self.fib.ports.get(usize::from(port)) else {
            self.counters.no_route += 1;
            p.drop_for(DropReason::NoRoute);
            return;
        };
        if !fits(&x, p, egress, &mut self.scratch) {
            // The sender must leave room for the Icarus option its packets
            // get at the domain's edge, or it would never fit (a port
            // that strips it was found too small without it).
            let overhead = if egress.strip {
                0
            } else if p.icarus_pending != 0 {
                u32::from(p.icarus_pending)
            } else {
                icarus_overhead(&x, p.data(), &mut self.scratch)
            };
            let mtu = egress.mtu.saturating_sub(overhead);
            self.counters.too_big += 1;
            p.drop_for(DropReason::TooBig);
            self.error(p, &x, IcmpError::TooBig(mtu), now, out);
            return;
        }
        let src = egress.mac;
        let known = self.neighbours.get(via, now);
        if !rewrite(p, &x, src, known.unwrap_or_default()) {
            self.counters.not_routable += 1;
            p.drop_for(DropReason::NotRoutable);
            return;
        }
        if known.is_some() {
            self.counters.forwarded += 1;
            p.to_ingress = port == p.ingress;
            let to = PortSet::single(port);
            p.verdict = match p.verdict {
                Verdict::Mark(_) => Verdict::Mark(to),
                _ => Verdict::Forward(to),
            };
            return;
        }
        let mut held = Held::new(p.ts, p.orig_len, p.ingress);
        held.icarus_pending = p.icarus_pending;
        match self.neighbours.hold(via, port, p.data(), held, now) {
            Hold::Held => {
                self.counters.held += 1;
                p.verdict = Verdict::Held;
            }
            Hold::Full => {
                self.counters.no_neighbour += 1;
                p.drop_for(DropReason::NoNeighbour);
            }
        }
    }

    /// An ARP message on a routed port: its sender learned, a request for
    /// one of the port's addresses answered.
    fn arp(
        &mut self,
        p: &Packet,
        x: &Parsed,
        a: &ndisc::Arp,
        now: Timestamp,
        out: &mut Originated,
    ) {
        let Some(port) = self.fib.ports.get(usize::from(p.ingress)) else {
            return;
        };
        let mac = port.mac;
        let owned = port.owns(IpAddr::V4(a.tpa));
        self.learn(p.ingress, IpAddr::V4(a.spa), a.sha, now);
        if a.op == ndisc::ARP_REQUEST && owned {
            if out.push(now, p.ingress, |b| ndisc::arp_reply(b, p.data(), x, a, mac)) {
                self.counters.arp_replies += 1;
            } else {
                self.counters.originated_full += 1;
            }
        }
    }

    /// A neighbour solicitation or advertisement on a routed port: the
    /// sender (NS) or target (NA) learned, a solicitation for one of the
    /// port's addresses answered.
    fn nd(&mut self, p: &Packet, x: &Parsed, nd: &ndisc::Nd, now: Timestamp, out: &mut Originated) {
        let Some(port) = self.fib.ports.get(usize::from(p.ingress)) else {
            return;
        };
        let mac = port.mac;
        let owned = port.owns(IpAddr::V6(nd.target));
        if nd.kind == ndisc::NA {
            let from = nd
                .lladdr
                .or_else(|| p.data().get(6..12)?.try_into().ok().map(MacAddr));
            if let Some(m) = from {
                self.learn(p.ingress, IpAddr::V6(nd.target), m, now);
            }
            return;
        }
        if let Some(m) = nd.lladdr
            && !nd.src.is_unspecified()
        {
            self.learn(p.ingress, IpAddr::V6(nd.src), m, now);
        }
        if owned && !nd.src.is_unspecified() {
            if out.push(now, p.ingress, |b| {
                ndisc::neighbour_advert(b, p.data(), x, nd, mac)
            }) {
                self.counters.nd_adverts += 1;
            } else {
                self.counters.originated_full += 1;
            }
        }
    }

    /// Learns `addr` at `mac` if `addr` is on a connected prefix of `port`
    /// (and not the router's own, nor a group MAC).
    fn learn(&mut self, port: u8, addr: IpAddr, mac: MacAddr, now: Timestamp) {
        if mac.is_group()
            || mac == MacAddr::default()
            || self.fib.port_of_neighbour(addr) != Some(port)
        {
            return;
        }
        if self.neighbours.learn(addr, mac, now) {
            self.counters.learned += 1;
        }
        if self.share {
            self.events.push(NeighbourEvent { addr, mac, at: now });
        }
    }
}

/// The ICMP errors the stage sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IcmpError {
    TimeExceeded,
    /// With the egress MTU.
    TooBig(u32),
    /// A UDP datagram to this router address (the error's source).
    PortUnreachable(IpAddr),
    /// No route to the destination.
    NoRoute,
}

impl Forward {
    /// The router's MAC on `port`.
    /// Where an answer to `peer` (an ICMP error or echo reply) goes: out
    /// of the port the routing table gives for it, to its next hop's MAC,
    /// as any packet the router forwards (so an error about a packet that
    /// came the long way round a loop takes the short way back); when the
    /// route leads nowhere or its next hop is not yet known, back out of
    /// `ingress` to the MAC the packet came from (`None`).
    fn answer_path(
        &self,
        peer: Option<IpAddr>,
        ingress: u8,
        now: Timestamp,
    ) -> (u8, Option<MacAddr>) {
        peer.and_then(|a| {
            let (port, via) = self.fib.lookup(a)?.resolve(a)?;
            let mac = self.neighbours.get(via, now)?;
            Some((port, Some(mac)))
        })
        .unwrap_or((ingress, None))
    }

    fn port_mac(&self, port: u8) -> MacAddr {
        self.fib
            .ports
            .get(usize::from(port))
            .map_or(MacAddr::default_for_port(port), |p| p.mac)
    }

    /// Sends `e` about `p` to its source (see
    /// [`answer_path`](Self::answer_path)), if allowed
    /// (see [`icmp::may_answer_with_error`]) and the bucket has a token.
    fn error(
        &mut self,
        p: &Packet,
        x: &Parsed,
        e: IcmpError,
        now: Timestamp,
        out: &mut Originated,
    ) {
        let frame = p.data();
        if !icmp::may_answer_with_error(frame, x) {
            return;
        }
        let Some(port) = self.fib.ports.get(usize::from(p.ingress)) else {
            return;
        };
        let Some(v) = x.ip_version else { return };
        let peer = ip_addr(frame, x.l3_offset, v, Field::Src);
        // The message and its source address (the router's on the ingress
        // port, or the one a Port Unreachable answers for).
        let (ty, code, rest, src) = match v {
            IpVersion::V4 => {
                let dont_fragment = frame.get(x.l3_offset + 6).is_some_and(|b| b & 0x40 != 0);
                let (ty, code, rest) = match e {
                    IcmpError::TimeExceeded => (icmp::V4_TIME_EXCEEDED, 0, 0),
                    IcmpError::TooBig(_) if !dont_fragment => return,
                    IcmpError::TooBig(mtu) => (icmp::V4_UNREACHABLE, 4, mtu.min(0xffff)),
                    IcmpError::PortUnreachable(_) => (icmp::V4_UNREACHABLE, 3, 0),
                    IcmpError::NoRoute => (icmp::V4_UNREACHABLE, 0, 0),
                };
                let peer = match peer {
                    Some(IpAddr::V4(a)) => Some(a),
                    _ => None,
                };
                let src = match e {
                    IcmpError::PortUnreachable(a @ IpAddr::V4(_)) => Some(a),
                    _ => port.v4_for(peer).map(IpAddr::V4),
                };
                (ty, code, rest, src)
            }
            IpVersion::V6 => {
                let (ty, code, rest) = match e {
                    IcmpError::TimeExceeded => (icmp::V6_TIME_EXCEEDED, 0, 0),
                    IcmpError::TooBig(mtu) => (icmp::V6_TOO_BIG, 0, mtu),
                    IcmpError::PortUnreachable(_) => (icmp::V6_UNREACHABLE, 4, 0),
                    IcmpError::NoRoute => (icmp::V6_UNREACHABLE, 0, 0),
                };
                let peer = match peer {
                    Some(IpAddr::V6(a)) => Some(a),
                    _ => None,
                };
                let src = match e {
                    IcmpError::PortUnreachable(a @ IpAddr::V6(_)) => Some(a),
                    _ => port.v6_for(peer).map(IpAddr::V6),
                };
                (ty, code, rest, src)
            }
        };
        let Some(src) = src else { return };
        if !self.icmp.take(now) {
            self.counters.icmp_rate_limited += 1;
            return;
        }
        let (out_port, dst_mac) = self.answer_path(peer, p.ingress, now);
        let mac = self.port_mac(out_port);
        let made = out.push(now, out_port, |b| {
            let made = match src {
                IpAddr::V4(s) => icmp::v4_error(b, frame, x, mac, s, ty, code, rest),
                IpAddr::V6(s) => icmp::v6_error(b, frame, x, mac, s, ty, code, rest),
            };
            readdress(made, b, dst_mac)
        });
        if made {
            self.counters.icmp_errors += 1;
        } else if out.batch.is_full() {
            self.counters.originated_full += 1;
        }
    }
}

/// An answer `made` into `b` (addressed back to the MAC its packet came
/// from) sent to `dst` instead, when the routing table gave one.
fn readdress(made: bool, b: &mut [u8], dst: Option<MacAddr>) -> bool {
    if let (true, Some(d), Some(head)) = (made, dst, b.get_mut(..6)) {
        head.copy_from_slice(&d.0);
    }
    made
}

/// Which address of an IP header [`ip_addr`] reads.
#[derive(Clone, Copy)]
enum Field {
    Src,
    Dst,
}

/// The source or destination address of the IP header at `l3`.
fn ip_addr(frame: &[u8], l3: usize, v: IpVersion, f: Field) -> Option<IpAddr> {
    match v {
        IpVersion::V4 => {
            let at = l3 + if matches!(f, Field::Src) { 12 } else { 16 };
            let b: [u8; 4] = frame.get(at..at + 4)?.try_into().ok()?;
            Some(IpAddr::V4(b.into()))
        }
        IpVersion::V6 => {
            let at = l3 + if matches!(f, Field::Src) { 8 } else { 24 };
            let b: [u8; 16] = frame.get(at..at + 16)?.try_into().ok()?;
            Some(IpAddr::V6(b.into()))
        }
    }
}

/// Whether the datagram of `p` fits `out`'s MTU as it will leave: as it
/// is, with the Icarus option the egress stage will insert
/// ([`Packet::icarus_pending`]) on a port that keeps it, or, on a port that
/// strips Icarus, without its option (`scratch` holds the stripped copy,
/// made only for a datagram too big as it is).
fn fits(x: &Parsed, p: &Packet, out: &PortInfo, scratch: &mut Vec<u8>) -> bool {
    let mtu = out.mtu as usize;
    let grow = if out.strip {
        0
    } else {
        usize::from(p.icarus_pending)
    };
    if x.ip_total_len + grow <= mtu {
        return true;
    }
    if !out.strip || p.icarus_pending != 0 {
        return false;
    }
    scratch.clear();
    scratch.extend_from_slice(p.data());
    match icarus::strip(scratch, x.l3_offset) {
        Ok(icarus::Stripped::Removed(n)) => x.ip_total_len.saturating_sub(n) <= mtu,
        _ => false,
    }
}

/// The bytes the datagram's Icarus option takes (what stripping it would
/// remove; 0 without one), from a copy in `scratch`.
fn icarus_overhead(x: &Parsed, frame: &[u8], scratch: &mut Vec<u8>) -> u32 {
    scratch.clear();
    scratch.extend_from_slice(frame);
    match icarus::strip(scratch, x.l3_offset) {
        Ok(icarus::Stripped::Removed(n)) => u32::try_from(n).unwrap_or(u32::MAX),
        _ => 0,
    }
}

/// Decrements the TTL / hop limit of the IP header (IPv4: checksum
/// updated, RFC 1624); `false` when the frame is too short for it.
fn decrement_ttl(p: &mut Packet, x: &Parsed) -> bool {
    let l3 = x.l3_offset;
    let f = p.data_mut();
    match x.ip_version {
        Some(IpVersion::V4) => {
            let Some(h) = f.get_mut(l3..l3 + 20) else {
                return false;
            };
            let old = u16::from_be_bytes([h[8], h[9]]);
            h[8] = h[8].saturating_sub(1);
            let new = u16::from_be_bytes([h[8], h[9]]);
            let hc = checksum::update_word(u16::from_be_bytes([h[10], h[11]]), old, new);
            h[10..12].copy_from_slice(&hc.to_be_bytes());
        }
        Some(IpVersion::V6) => {
            let Some(h) = f.get_mut(l3..l3 + 40) else {
                return false;
            };
            h[7] = h[7].saturating_sub(1);
        }
        None => return false,
    }
    if let Some(q) = &mut p.parsed {
        q.ttl = q.ttl.saturating_sub(1);
    }
    true
}

/// Decrements the TTL / hop limit (IPv4: checksum updated, RFC 1624) and
/// writes the Ethernet addresses; `false` when the frame is too short for
/// them (it is then left as it was).
fn rewrite(p: &mut Packet, x: &Parsed, src: MacAddr, dst: MacAddr) -> bool {
    if p.data().len() < 12 || x.l3_offset < 14 || !decrement_ttl(p, x) {
        return false;
    }
    let f = p.data_mut();
    f[0..6].copy_from_slice(&dst.0);
    f[6..12].copy_from_slice(&src.0);
    true
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_icmp;
#[cfg(test)]
mod tests_ndisc;
#[cfg(test)]
mod tests_tshark;
