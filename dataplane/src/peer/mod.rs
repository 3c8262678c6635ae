//! The peering protocol's control path: what neighbouring routers tell
//! each other in Bloom filters ([`crate::wire::peer`] has the messages).
//!
//! Nothing here runs per packet. The forwarding stage hands the datagrams
//! addressed to the router's peering port to this control path, and sends
//! what it makes; the multicast stage reads the filters it learns.
//!
//! # Multicast membership, advertised upstream
//!
//! Each router advertises to each peer the groups reachable through it, as
//! in Grönvall's per-interface multicast filters and the resource routing
//! of Broder and Mitzenmacher's survey (§6.1): the groups hosts joined on
//! its host ports (IGMP/MLD, and static groups), and the groups its
//! *other* peers advertised to it. What a peer told it is never sent back
//! to that peer (split horizon). As in the survey's attenuated Bloom
//! filters, the advertisement is `depth` filters, one per distance: layer
//! 0 the router's own hosts' groups, layer `d` what its other peers put in
//! their layer `d - 1`. Split horizon alone cannot stop a group going round
//! a cycle of routers for ever after the last host left it; with layers it
//! climbs one layer per update and falls off the last
//! ([`advert::Layers`]). The receiver uses the union of the layers as the
//! multicast filter of the port facing the sender: it holds no address of
//! a remote group, only the sender's bits. (Loops of the data itself are
//! the forwarding stage's to stop: a routed port forwards multicast only
//! when it came in by the port of the route back to its source.)
//!
//! Every peer's filter has the same geometry (`m`, `k`, the hash key of
//! `[peering] hash_seed`: the filters of several peers are ORed into one),
//! sized by [`advert::params`] for the configured number of groups at the
//! configured false-positive rate with the fewest bytes on the wire
//! ("Compressed Bloom Filters": `m` and `k` chosen for the transmitted
//! size, the bits range-coded). A filter is recomputed from its sources
//! whenever one of them changes, so a leave clears a bit only when no other
//! source sets it. A change goes out at most every
//! `[peering] update_interval_ms` as a delta (the bits that flipped) or the
//! whole filter, whichever is smaller; the whole filter goes out every
//! `advert_interval_ms` anyway, which repairs lost messages. A peer heard
//! from for `hold_ms` is down: its filter is dropped (and with it what it
//! added to the filters sent to the others).
//!
//! # Flow sets, reconciled network-wide (the Distributed Bloom Filter)
//!
//! With `[peering.flows]`, routers share a set of flows: the heavy flows
//! each one detects, and the flows listed in the config. Every
//! `exchange_interval_ms` each router sends each peer a DBF filter of its
//! set ([`kernels::bloom::dbf`]): a mapping of its own to the pair of
//! routers and made new by a nonce for the exchange, at a configurable,
//! high false-positive rate. The receiver answers with the flows the
//! filter does not show, which the sender lacks; a false positive only
//! delays a flow to a later exchange, where the nonce draws other bits.
//! An element is a flow and the generation of its last report (its report
//! time in periods of half the time to live), so that a flow still
//! reported where it was detected reaches the other routers again before
//! their copies expire; entries expire when no router has reported the
//! flow for `ttl_ms`.
//!
//! # Trust
//!
//! Messages are accepted only from the configured peers' addresses, on the
//! port that faces them; with a key, only when their tag verifies (keyed
//! BLAKE3); only with a sequence above the last one from that peer (a
//! replayed message is refused) and within `max_skew_ms` of this router's
//! clock; at most `rate` a second per peer (a token bucket). Every refusal
//! is counted by reason. What an authentic peer can do is bounded: a
//! filter has the configured geometry or is refused, a filter of all ones
//! makes this router send every group's traffic towards that peer (and only
//! towards it), a flow answer adds at most the set's capacity, and a
//! message never exceeds [`MAX_LEN`].
//!
//! Time is the caller's: Unix nanoseconds of the wall clock live, so that
//! sequences are comparable between routers (whose clocks must agree to
//! within `max_skew_ms`), any clock in tests.

pub mod advert;
pub mod flows;

use std::collections::HashSet;
use std::net::IpAddr;

use kernels::Hasher;
use kernels::bloom::{Bloom, Params};
use serde::Serialize;

use crate::addr::GroupKey;
use crate::flow::FlowKey;
use crate::wire::peer::{
    Delta, Header, Kind, MAX_LEN, Message, PeerError, Segment, TagKey, delta_capacity, emit,
};

use advert::{Assembly, Layers};
pub use flows::{FlowSet, FlowsConfig};

/// The UDP port routers talk on unless configured otherwise.
pub const DEFAULT_UDP_PORT: u16 = 4784;

/// The most flows a report lists.
pub const REPORTED_FLOWS: usize = 64;

/// How one peer is configured (`[[peers]]`).
#[derive(Debug, Clone, PartialEq)]
pub struct PeerConfig {
    /// The interface that faces it (its index among the interfaces).
    pub port: u8,
    /// That interface's name, for reports.
    pub interface: String,
    /// Its address.
    pub address: IpAddr,
    /// The UDP port it listens on.
    pub udp_port: u16,
    /// The shared secret its messages are tagged with; `None`: untagged.
    pub key: Option<Vec<u8>>,
}

/// The protocol's settings (`[peering]`).
#[derive(Debug, Clone, PartialEq)]
pub struct PeeringConfig {
    /// This router's id (unique in the network; the DBF's pair mappings
    /// are made from the two ids).
    pub router_id: u32,
    /// The UDP port it listens on.
    pub udp_port: u16,
    /// The key of the hash every router uses for groups and flows (the
    /// same on every router).
    pub hash_seed: u64,
    /// The whole membership filter goes to every peer this often, ns.
    pub advert_interval_ns: u64,
    /// A change goes out at most this often per peer, ns.
    pub update_interval_ns: u64,
    /// A peer not heard from for this long is down, ns.
    pub hold_ns: u64,
    /// The groups a membership filter is sized for.
    pub groups: u64,
    /// Layers of a membership advertisement: routers beyond which a group
    /// is no longer advertised.
    pub depth: usize,
    /// Its target false-positive rate at that many groups.
    pub group_fpr: f64,
    /// Messages accepted per second from one peer, and back to back.
    pub rate: u32,
    /// See `rate`.
    pub burst: u32,
    /// How far a message's sequence (the sender's clock) may be from this
    /// router's clock, ns.
    pub max_skew_ns: u64,
    /// Flow-set reconciliation; `None`: off.
    pub flows: Option<FlowsConfig>,
    /// The share of outgoing messages dropped on purpose (tests of the
    /// protocol under loss; 0 otherwise).
    pub loss: f64,
    /// The peers.
    pub peers: Vec<PeerConfig>,
}

/// A datagram to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Datagram {
    /// The interface it leaves by.
    pub port: u8,
    /// Where to.
    pub to: IpAddr,
    /// The UDP port there.
    pub udp_port: u16,
    /// The message.
    pub payload: Vec<u8>,
}

/// A datagram to the router's peering port, as the forwarding stage
/// took it in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inbound {
    /// Its source address.
    pub from: IpAddr,
    /// The port it came in by.
    pub ingress: u8,
    /// The UDP payload.
    pub payload: Vec<u8>,
}

/// A worker's end of the control path, held by its forwarding stage:
/// datagrams to `udp_port` go in (a bounded queue: what does not fit is
/// dropped and counted), the control path's datagrams come out.
#[derive(Debug, Clone)]
pub struct PeerTap {
    /// The router's peering port.
    pub udp_port: u16,
    /// Datagrams in.
    pub inbound: crossbeam_channel::Sender<Inbound>,
    /// Datagrams out.
    pub outbound: crossbeam_channel::Receiver<Datagram>,
}

/// Writes an Ethernet frame from MAC `from` to `to` carrying a UDP
/// datagram from `src:sport` to `dst:dport` with `payload` (TTL / hop
/// limit 255, so a peer can tell it came from the link; the UDP checksum
/// filled) into `out`. `false` when the addresses are of two families.
#[allow(clippy::too_many_arguments)]
pub fn udp_frame(
    out: &mut Vec<u8>,
    from: crate::addr::MacAddr,
    to: crate::addr::MacAddr,
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
    payload: &[u8],
) -> bool {
    use crate::wire::build::{self, Addrs, IpHeader, UDP_LEN};
    let addrs = match (src, dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => Addrs::V4 { src, dst },
        (IpAddr::V6(src), IpAddr::V6(dst)) => Addrs::V6 { src, dst },
        _ => return false,
    };
    // Identification 0, don't fragment, TTL / hop limit 255.
    let ip = IpHeader {
        ttl: 255,
        dont_fragment: true,
        ..IpHeader::new(addrs, build::PROTO_UDP)
    };
    let start = out.len();
    build::ethernet(out, to.0, from.0, ip.ethertype());
    if !ip.try_push(out, UDP_LEN + payload.len()) {
        out.truncate(start);
        return false;
    }
    let l4 = out.len();
    build::udp(out, sport, dport, payload.len());
    out.extend_from_slice(payload);
    build::udp_checksum(out, l4, &ip);
    true
}

/// Why a message was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reject {
    /// Not from a configured peer's address, or not on the port facing it.
    Unknown,
    /// Over the peer's rate.
    Rate,
    /// Not a message (header, lengths, body).
    Malformed,
    /// The tag is missing or wrong.
    Auth,
    /// A sequence not above the last one accepted (a replay).
    Replay,
    /// A sequence too far from this router's clock.
    Stale,
    /// A filter of another geometry or hash key, or one that does not
    /// decode.
    Geometry,
    /// An unknown kind.
    Kind,
    /// A flow answer to no summary sent to that peer.
    Unsolicited,
}

impl Reject {
    /// Every reason, in the order counters print.
    pub const ALL: [Reject; 9] = [
        Reject::Unknown,
        Reject::Rate,
        Reject::Malformed,
        Reject::Auth,
        Reject::Replay,
        Reject::Stale,
        Reject::Geometry,
        Reject::Kind,
        Reject::Unsolicited,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Reject::Unknown => "unknown",
            Reject::Rate => "rate",
            Reject::Malformed => "malformed",
            Reject::Auth => "auth",
            Reject::Replay => "replay",
            Reject::Stale => "stale",
            Reject::Geometry => "geometry",
            Reject::Kind => "kind",
            Reject::Unsolicited => "unsolicited",
        }
    }
}

/// Refused messages by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Rejects {
    /// See [`Reject::Unknown`].
    pub unknown: u64,
    /// See [`Reject::Rate`].
    pub rate: u64,
    /// See [`Reject::Malformed`].
    pub malformed: u64,
    /// See [`Reject::Auth`].
    pub auth: u64,
    /// See [`Reject::Replay`].
    pub replay: u64,
    /// See [`Reject::Stale`].
    pub stale: u64,
    /// See [`Reject::Geometry`].
    pub geometry: u64,
    /// See [`Reject::Kind`].
    pub kind: u64,
    /// See [`Reject::Unsolicited`].
    pub unsolicited: u64,
}

impl Rejects {
    fn count(&mut self, r: Reject) {
        *self.get_mut(r) += 1;
    }

    fn get_mut(&mut self, r: Reject) -> &mut u64 {
        match r {
            Reject::Unknown => &mut self.unknown,
            Reject::Rate => &mut self.rate,
            Reject::Malformed => &mut self.malformed,
            Reject::Auth => &mut self.auth,
            Reject::Replay => &mut self.replay,
            Reject::Stale => &mut self.stale,
            Reject::Geometry => &mut self.geometry,
            Reject::Kind => &mut self.kind,
            Reject::Unsolicited => &mut self.unsolicited,
        }
    }

    /// The count for `r`.
    pub fn get(&self, r: Reject) -> u64 {
        let mut c = *self;
        *c.get_mut(r)
    }

    /// Every refusal.
    pub fn total(&self) -> u64 {
        Reject::ALL.iter().map(|&r| self.get(r)).sum()
    }
}

/// One peer's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PeerCounters {
    /// Messages accepted from it (each other one is in `rejected`).
    pub rx_messages: u64,
    /// Their bytes (UDP payload).
    pub rx_bytes: u64,
    /// Messages sent to it.
    pub tx_messages: u64,
    /// Their bytes.
    pub tx_bytes: u64,
    /// Messages not sent on purpose (`[peering] test_loss`).
    pub tx_lost: u64,
    /// Refused messages from it, by reason.
    pub rejected: Rejects,
    /// Whole membership filters received (all segments), and applied.
    pub filters_in: u64,
    /// Deltas received and applied.
    pub deltas_in: u64,
    /// Deltas that did not apply to the filter held (lost a message;
    /// the next whole filter repairs it).
    pub deltas_stale: u64,
    /// Whole membership filters sent.
    pub filters_out: u64,
    /// Deltas sent.
    pub deltas_out: u64,
    /// Bytes of membership filters sent (transfer form, compressed), and
    /// what the raw filters and the group lists would have been.
    pub filter_bytes: u64,
    /// See `filter_bytes`.
    pub filter_bytes_raw: u64,
    /// See `filter_bytes`.
    pub filter_bytes_list: u64,
    /// Times it went down (not heard from for the hold time).
    pub expired: u64,
    /// Flow summaries sent and received.
    pub summaries_out: u64,
    /// See `summaries_out`.
    pub summaries_in: u64,
    /// Flows sent to it in answers, and learned from its answers.
    pub flows_out: u64,
    /// See `flows_out`.
    pub flows_in: u64,
}

/// What a peer looks like now (for the stats text, JSON and metrics).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeerReport {
    /// The interface facing it.
    pub interface: String,
    /// Its address.
    pub address: IpAddr,
    /// Its router id, once heard from.
    pub router_id: Option<u32>,
    /// Heard from within the hold time.
    pub up: bool,
    /// Milliseconds since its last accepted message (`None`: never).
    pub last_heard_ms: Option<u64>,
    /// Its membership filter: the version, bits set, the estimated groups
    /// and false-positive rate (`None`: none held).
    pub filter: Option<FilterReport>,
    /// The counters.
    #[serde(flatten)]
    pub counters: PeerCounters,
}

/// A membership filter's figures.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FilterReport {
    /// The sender's version.
    pub version: u64,
    /// Bits set, of `bits`.
    pub ones: u64,
    /// See `ones`.
    pub bits: u64,
    /// Groups it holds, estimated from its fill.
    pub groups: f64,
    /// Its false-positive rate at that fill.
    pub fpr: f64,
}

/// The whole protocol's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeeringReport {
    /// This router's id.
    pub router_id: u32,
    /// Groups joined on this router's host ports (and static ones).
    pub local_groups: u64,
    /// The flow set's size (`None`: flows off).
    pub flows: Option<u64>,
    /// Flows learned from peers, detected here and expired, over the run.
    pub flows_learned: u64,
    /// See `flows_learned`.
    pub flows_detected: u64,
    /// See `flows_learned`.
    pub flows_expired: u64,
    /// Flows refused at the set's capacity.
    pub flows_refused: u64,
    /// The first [`REPORTED_FLOWS`] flows held, sorted.
    pub flows_held: Vec<String>,
    /// Messages from senders that are not peers, refused.
    pub rejected_unknown: u64,
    /// The membership filters' geometry: bits and positions per group.
    pub filter_bits: u64,
    /// See `filter_bits`.
    pub filter_k: u64,
    /// Every peer.
    pub peers: Vec<PeerReport>,
}

/// One peer's state.
#[derive(Debug)]
struct Peer {
    cfg: PeerConfig,
    key: Option<TagKey>,
    id: Option<u32>,
    last_seq: u64,
    last_heard: Option<u64>,
    up: bool,
    /// Its token bucket: tokens (scaled by 1e9) and when last filled.
    tokens: u64,
    filled: u64,
    /// The layers it advertises to this router, their union, and their
    /// version.
    remote: Option<Layers>,
    remote_union: Option<Bloom>,
    remote_version: u64,
    assembling: Option<Assembly>,
    /// What this router last advertised to it, and that version.
    sent: Option<Layers>,
    sent_version: u64,
    /// When a whole filter, and any update, last went to it.
    last_full: Option<u64>,
    last_update: Option<u64>,
    /// Flow reconciliation: the next exchange, the nonce of the summary
    /// sent last and when, the items its summaries say it holds, and the
    /// summary being assembled.
    next_exchange: u64,
    nonce_out: Option<(u64, u64)>,
    items: u64,
    summary: Option<Assembly>,
    counters: PeerCounters,
}

/// The control path (see the module docs).
#[derive(Debug)]
pub struct PeerControl {
    cfg: PeeringConfig,
    params: Params,
    group_hasher: Hasher,
    local: Vec<GroupKey>,
    /// The local groups' filter, as layer 0 of every advertisement.
    local_bloom: Bloom,
    peers: Vec<Peer>,
    flows: Option<FlowSet>,
    /// The last sequence sent (strictly increasing).
    seq: u64,
    rng: u64,
    out: Vec<Datagram>,
    unknown: u64,
    /// Bumped whenever a peer's filter changes.
    filters_version: u64,
    body: Vec<u8>,
    msg: Vec<u8>,
}

/// Why the settings were refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PeeringError {
    /// No membership filter fits the groups and rate in a message's
    /// segments.
    #[error("peering.groups / peering.group_fpr: {0}")]
    Sizing(String),
    /// The flow filters' settings.
    #[error("peering.flows: {0}")]
    Flows(String),
}

impl PeerControl {
    /// The control path of `cfg`; `seed` seeds its nonces (and the test
    /// loss), so that a test repeats.
    ///
    /// # Errors
    /// Settings no filter fits (validation refuses them first).
    pub fn new(cfg: PeeringConfig, seed: u64) -> Result<PeerControl, PeeringError> {
        let params = advert::params(cfg.groups, cfg.group_fpr).map_err(PeeringError::Sizing)?;
        let group_hasher = Hasher::with_seed(cfg.hash_seed);
        let flows = cfg
            .flows
            .clone()
            .map(|f| FlowSet::new(f, cfg.hash_seed))
            .transpose()
            .map_err(PeeringError::Flows)?;
        let peers = cfg
            .peers
            .iter()
            .map(|p| Peer {
                key: p.key.as_deref().map(TagKey::derive),
                cfg: p.clone(),
                id: None,
                last_seq: 0,
                last_heard: None,
                up: false,
                tokens: u64::from(cfg.burst).saturating_mul(1_000_000_000),
                filled: 0,
                remote: None,
                remote_union: None,
                remote_version: 0,
                assembling: None,
                sent: None,
                sent_version: 0,
                last_full: None,
                last_update: None,
                next_exchange: 0,
                nonce_out: None,
                items: 0,
                summary: None,
                counters: PeerCounters::default(),
            })
            .collect();
        Ok(PeerControl {
            local_bloom: Bloom::new(params, group_hasher.clone()),
            params,
            group_hasher,
            local: Vec::new(),
            peers,
            flows,
            seq: 0,
            rng: seed ^ 0x9e37_79b9_7f4a_7c15,
            out: Vec::new(),
            unknown: 0,
            filters_version: 0,
            body: Vec::with_capacity(MAX_LEN),
            msg: Vec::with_capacity(MAX_LEN),
            cfg,
        })
    }

    /// The settings.
    pub fn config(&self) -> &PeeringConfig {
        &self.cfg
    }

    /// The membership filters' geometry.
    pub fn params(&self) -> Params {
        self.params
    }

    /// The hasher of groups (and flows): every router's is the same.
    pub fn group_hasher(&self) -> &Hasher {
        &self.group_hasher
    }

    /// The groups joined on this router's host ports, now (every call
    /// replaces the last; the filters follow at the next [`tick`]).
    ///
    /// [`tick`]: Self::tick
    pub fn set_local_groups(&mut self, groups: impl IntoIterator<Item = GroupKey>) {
        let mut g: Vec<GroupKey> = groups.into_iter().collect();
        g.sort_unstable();
        g.dedup();
        if g != self.local {
            self.local_bloom = Bloom::new(self.params, self.group_hasher.clone());
            self.local_bloom.insert_batch(&g);
            self.local = g;
        }
    }

    /// Heavy flows this router detected at `now` (they join the flow set).
    pub fn detected(&mut self, flows: impl IntoIterator<Item = FlowKey>, now: u64) {
        if let Some(f) = &mut self.flows {
            for k in flows {
                f.report(k, now, true);
            }
        }
    }

    /// The flow set (`None`: flows off).
    pub fn flows(&self) -> Option<&FlowSet> {
        self.flows.as_ref()
    }

    /// Bumped whenever a peer's membership filter changes: the owner
    /// republishes [`remote_filters`](Self::remote_filters) when it moves.
    pub fn filters_version(&self) -> u64 {
        self.filters_version
    }

    /// The membership filter each peer advertises, by the port facing it
    /// (`ports` long; `None` where no peer or no filter).
    pub fn remote_filters(&self, ports: usize) -> Vec<Option<Bloom>> {
        let mut v: Vec<Option<Bloom>> = vec![None; ports];
        for p in &self.peers {
            if let (Some(slot), Some(f)) = (v.get_mut(usize::from(p.cfg.port)), &p.remote_union) {
                *slot = Some(match slot.take() {
                    // Two peers behind one port: their union.
                    Some(mut u) => {
                        let _ = u.union_with(f);
                        u
                    }
                    None => f.clone(),
                });
            }
        }
        v
    }

    /// The datagrams made since the last call.
    pub fn take_outgoing(&mut self) -> Vec<Datagram> {
        std::mem::take(&mut self.out)
    }

    /// A datagram from `from` that arrived on port `ingress` at `now`.
    pub fn receive(&mut self, from: IpAddr, ingress: u8, bytes: &[u8], now: u64) {
        let Some(i) = self
            .peers
            .iter()
            .position(|p| p.cfg.address == from && p.cfg.port == ingress)
        else {
            self.unknown += 1;
            return;
        };
        if let Err(r) = self.accept(i, bytes, now) {
            self.peers[i].counters.rejected.count(r);
        }
    }

    fn accept(&mut self, i: usize, bytes: &[u8], now: u64) -> Result<(), Reject> {
        let (rate, burst, skew) = (self.cfg.rate, self.cfg.burst, self.cfg.max_skew_ns);
        let p = &mut self.peers[i];
        if !take_token(&mut p.tokens, &mut p.filled, now, rate, burst) {
            return Err(Reject::Rate);
        }
        let m = Message::new_checked(bytes).map_err(|_| Reject::Malformed)?;
        if let Some(k) = &p.key {
            match m.tag() {
                Some(t) if k.verify(m.signed(), t) => {}
                _ => return Err(Reject::Auth),
            }
        }
        let seq = m.seq();
        if seq <= p.last_seq {
            return Err(Reject::Replay);
        }
        if seq.abs_diff(now) > skew {
            return Err(Reject::Stale);
        }
        if matches!(m.kind(), Kind::Unknown(_)) {
            return Err(Reject::Kind);
        }
        // Authentic and fresh: the peer is alive, whatever the body.
        p.last_seq = seq;
        p.last_heard = Some(now);
        p.up = true;
        p.id = Some(m.sender());
        let r = match m.kind() {
            Kind::Membership => self.on_filter_segment(i, &m),
            Kind::MembershipDelta => self.on_delta(i, &m),
            Kind::FlowSummary => self.on_summary(i, &m, now),
            Kind::FlowAnswer => self.on_answer(i, &m, now),
            Kind::Unknown(_) => Err(Reject::Kind),
        };
        if r.is_ok() {
            let c = &mut self.peers[i].counters;
            c.rx_messages += 1;
            c.rx_bytes += bytes.len() as u64;
        }
        r
    }

    fn on_filter_segment(&mut self, i: usize, m: &Message<&[u8]>) -> Result<(), Reject> {
        let seg = Segment::parse(m.body()).map_err(|_| Reject::Malformed)?;
        let version = m.aux();
        let p = &mut self.peers[i];
        let Some(bytes) = advert::assemble(&mut p.assembling, version, &seg) else {
            return Ok(());
        };
        let layers = Layers::decode(&bytes, self.params, &self.group_hasher, self.cfg.depth)
            .ok_or(Reject::Geometry)?;
        p.counters.filters_in += 1;
        if p.remote.as_ref() != Some(&layers) {
            self.filters_version += 1;
            p.remote_union = Some(layers.union());
        }
        p.remote = Some(layers);
        p.remote_version = version;
        Ok(())
    }

    fn on_delta(&mut self, i: usize, m: &Message<&[u8]>) -> Result<(), Reject> {
        let d = Delta::parse(m.body()).map_err(|_| Reject::Malformed)?;
        let most = self.params.bits() * self.cfg.depth as u64;
        if d.positions().any(|q| u64::from(q) >= most) {
            return Err(Reject::Malformed);
        }
        let p = &mut self.peers[i];
        match &mut p.remote {
            Some(layers) if p.remote_version == d.base => {
                for q in d.positions() {
                    layers.flip(q);
                }
                p.remote_version = m.aux();
                p.counters.deltas_in += 1;
                if !d.is_empty() {
                    self.filters_version += 1;
                    p.remote_union = Some(layers.union());
                }
            }
            _ => p.counters.deltas_stale += 1,
        }
        Ok(())
    }

    fn on_summary(&mut self, i: usize, m: &Message<&[u8]>, now: u64) -> Result<(), Reject> {
        let seg = Segment::parse(m.body()).map_err(|_| Reject::Malformed)?;
        let nonce = m.aux();
        let me = self.cfg.router_id;
        let p = &mut self.peers[i];
        let Some(bytes) = advert::assemble(&mut p.summary, nonce, &seg) else {
            return Ok(());
        };
        p.counters.summaries_in += 1;
        let Some(f) = &mut self.flows else {
            return Ok(());
        };
        p.items = u64::from(seg.items).min(f.capacity() as u64);
        let them = p.id.unwrap_or(0);
        let answer = f
            .answer(&bytes, me, them, nonce, now)
            .map_err(|_| Reject::Geometry)?;
        let sent = answer.len() as u64;
        self.peers[i].counters.flows_out += sent;
        for body in flows::answer_bodies(&answer) {
            self.send(i, Kind::FlowAnswer, nonce, &body, now);
        }
        Ok(())
    }

    fn on_answer(&mut self, i: usize, m: &Message<&[u8]>, now: u64) -> Result<(), Reject> {
        let nonce = m.aux();
        let hold = self.cfg.hold_ns;
        let p = &mut self.peers[i];
        match p.nonce_out {
            Some((n, at)) if n == nonce && now.saturating_sub(at) <= hold => {}
            _ => return Err(Reject::Unsolicited),
        }
        let Some(f) = &mut self.flows else {
            return Err(Reject::Unsolicited);
        };
        let learned = f.learn(m.body(), now).map_err(|_| Reject::Malformed)?;
        p.counters.flows_in += learned;
        Ok(())
    }

    /// The time-driven work at `now`: peers that went silent are dropped,
    /// membership filters that changed (or are due) go out, flow summaries
    /// go out when an exchange is due, flows expire.
    pub fn tick(&mut self, now: u64) {
        let hold = self.cfg.hold_ns;
        for p in &mut self.peers {
            if p.up && p.last_heard.is_some_and(|t| now.saturating_sub(t) > hold) {
                p.up = false;
                p.counters.expired += 1;
                p.assembling = None;
                p.summary = None;
                p.remote_union = None;
                if p.remote.take().is_some() {
                    self.filters_version += 1;
                }
            }
        }
        for i in 0..self.peers.len() {
            self.advertise(i, now);
        }
        if self.flows.is_some() {
            if let Some(f) = &mut self.flows {
                f.expire(now);
            }
            for i in 0..self.peers.len() {
                self.exchange(i, now);
            }
        }
    }

    /// What this router advertises to peer `i` now: its local groups in
    /// layer 0, and in layer `d` the union of its other peers' layers
    /// `d - 1` (split horizon: nothing of what peer `i` said).
    fn advert_for(&self, i: usize) -> Layers {
        let depth = self.cfg.depth;
        let mut f = Layers::empty(self.params, &self.group_hasher, depth);
        if let Some(l) = f.layer_mut(0) {
            *l = self.local_bloom.clone();
        }
        for (j, q) in self.peers.iter().enumerate() {
            if j == i || q.cfg.port == self.peers[i].cfg.port {
                continue;
            }
            let Some(r) = &q.remote else { continue };
            for d in 1..depth {
                if let (Some(dst), Some(src)) = (f.layer_mut(d), r.layers().get(d - 1)) {
                    let _ = dst.union_with(src);
                }
            }
        }
        f
    }

    fn advertise(&mut self, i: usize, now: u64) {
        let (every, spacing) = (self.cfg.advert_interval_ns, self.cfg.update_interval_ns);
        let f = self.advert_for(i);
        let p = &self.peers[i];
        let full_due = p.last_full.is_none_or(|t| now.saturating_sub(t) >= every);
        let changed = p.sent.as_ref() != Some(&f);
        let may_update = p
            .last_update
            .is_none_or(|t| now.saturating_sub(t) >= spacing);
        if !(full_due || changed && may_update) {
            return;
        }
        let version = p.sent_version + 1;
        let tagged = p.key.is_some();
        let encoded = f.encode();
        // The list: the local groups' addresses, and 16 bytes for each
        // group other routers' filters add (their addresses are not known).
        let list = advert::list_bytes(&self.local) + 16 * f.beyond();
        // A change as a delta when its positions take fewer bytes than the
        // whole filter (and fit one message).
        let delta = match (&p.sent, full_due) {
            (Some(old), false) => {
                let flips = old.flipped(&f);
                (flips.len() * 4 < encoded.len() && flips.len() <= delta_capacity(tagged))
                    .then_some(flips)
            }
            _ => None,
        };
        let base = p.sent_version;
        match delta {
            Some(flips) => {
                self.body.clear();
                Delta::emit(base, &flips, &mut self.body);
                let body = std::mem::take(&mut self.body);
                self.send(i, Kind::MembershipDelta, version, &body, now);
                self.body = body;
                self.peers[i].counters.deltas_out += 1;
            }
            None => {
                let items = self.local.len() as u32;
                for body in advert::segments(&encoded, items, tagged) {
                    self.send(i, Kind::Membership, version, &body, now);
                }
                let c = &mut self.peers[i].counters;
                c.filters_out += 1;
                c.filter_bytes += encoded.len() as u64;
                c.filter_bytes_raw += f.raw_len();
                c.filter_bytes_list += list;
                self.peers[i].last_full = Some(now);
            }
        }
        let p = &mut self.peers[i];
        p.sent = Some(f);
        p.sent_version = version;
        p.last_update = Some(now);
    }

    fn exchange(&mut self, i: usize, now: u64) {
        let me = self.cfg.router_id;
        let p = &self.peers[i];
        if now < p.next_exchange {
            return;
        }
        let (them, items, tagged) = (p.id, p.items, p.key.is_some());
        let Some(f) = &self.flows else { return };
        let interval = f.config().exchange_interval_ns;
        // The pair's mapping needs the peer's id: until heard from, wait.
        let Some(them) = them else {
            self.peers[i].next_exchange = now.saturating_add(interval);
            return;
        };
        let nonce = splitmix(&mut self.rng);
        let (encoded, count) = f.summary(me, them, nonce, items);
        if encoded.is_empty() {
            return;
        }
        let bodies = advert::segments(&encoded, count, tagged);
        for body in bodies {
            self.send(i, Kind::FlowSummary, nonce, &body, now);
        }
        let p = &mut self.peers[i];
        p.counters.summaries_out += 1;
        p.nonce_out = Some((nonce, now));
        p.next_exchange = now.saturating_add(interval);
    }

    /// Makes one message to peer `i` and queues it (or drops it, with the
    /// configured test loss).
    fn send(&mut self, i: usize, kind: Kind, aux: u64, body: &[u8], now: u64) {
        self.seq = self.seq.saturating_add(1).max(now);
        let h = Header {
            kind,
            sender: self.cfg.router_id,
            seq: self.seq,
            aux,
        };
        let p = &mut self.peers[i];
        if !emit(&h, body, p.key.as_ref(), &mut self.msg) {
            return;
        }
        if self.cfg.loss > 0.0 && unit(&mut self.rng) < self.cfg.loss {
            p.counters.tx_lost += 1;
            return;
        }
        p.counters.tx_messages += 1;
        p.counters.tx_bytes += self.msg.len() as u64;
        self.out.push(Datagram {
            port: p.cfg.port,
            to: p.cfg.address,
            udp_port: p.cfg.udp_port,
            payload: self.msg.clone(),
        });
    }

    /// The figures now.
    pub fn report(&self, now: u64) -> PeeringReport {
        let f = self.flows.as_ref();
        PeeringReport {
            router_id: self.cfg.router_id,
            local_groups: self.local.len() as u64,
            flows: f.map(|f| f.len() as u64),
            flows_learned: f.map_or(0, |f| f.counters().learned),
            flows_detected: f.map_or(0, |f| f.counters().detected),
            flows_expired: f.map_or(0, |f| f.counters().expired),
            flows_refused: f.map_or(0, |f| f.counters().refused),
            flows_held: {
                let mut v: Vec<FlowKey> = self.network_flows().into_iter().collect();
                v.sort_unstable();
                v.iter()
                    .take(REPORTED_FLOWS)
                    .map(ToString::to_string)
                    .collect()
            },
            rejected_unknown: self.unknown,
            filter_bits: self.params.bits(),
            filter_k: self.params.k() as u64,
            peers: self
                .peers
                .iter()
                .map(|p| PeerReport {
                    interface: p.cfg.interface.clone(),
                    address: p.cfg.address,
                    router_id: p.id,
                    up: p.up,
                    last_heard_ms: p.last_heard.map(|t| now.saturating_sub(t) / 1_000_000),
                    filter: p.remote_union.as_ref().map(|f| FilterReport {
                        version: p.remote_version,
                        ones: f.count_ones(),
                        bits: f.params().bits(),
                        groups: f.estimate_items(),
                        fpr: f.false_positive_rate(),
                    }),
                    counters: p.counters,
                })
                .collect(),
        }
    }

    /// The distinct flows of the network-wide set (empty with flows off).
    pub fn network_flows(&self) -> HashSet<FlowKey> {
        self.flows
            .as_ref()
            .map(FlowSet::flow_keys)
            .unwrap_or_default()
    }
}

/// Takes a token from a bucket of `rate` a second and `burst` deep
/// (tokens scaled by 10^9, refilled from `filled` to `now`).
fn take_token(tokens: &mut u64, filled: &mut u64, now: u64, rate: u32, burst: u32) -> bool {
    let cap = u64::from(burst).saturating_mul(1_000_000_000);
    let dt = now.saturating_sub(*filled);
    *tokens = tokens
        .saturating_add(dt.saturating_mul(u64::from(rate)))
        .min(cap);
    *filled = now.max(*filled);
    if *tokens >= 1_000_000_000 {
        *tokens -= 1_000_000_000;
        true
    } else {
        false
    }
}

fn splitmix(s: &mut u64) -> u64 {
    kernels::splitmix64(s)
}

/// A uniform draw in [0, 1).
fn unit(s: &mut u64) -> f64 {
    (splitmix(s) >> 11) as f64 / (1u64 << 53) as f64
}

impl From<PeerError> for Reject {
    fn from(_: PeerError) -> Reject {
        Reject::Malformed
    }
}

#[cfg(test)]
mod tests;
