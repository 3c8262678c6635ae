//! The router's chain of stages: one typed struct, built once from a
//! [`RouterConfig`], the same for the live router and for replay.
//!
//! A batch takes this way through [`Chain::process`]:
//!
//! 1. **parse** ([`crate::pipeline::parse_batch`]): every frame parsed in
//!    place; malformed frames counted by reason and dropped (or passed);
//! 2. **Icarus** ([`IcarusStage`]): on an insertion edge, an empty filter
//!    to be inserted (into the copies that keep it, by the egress stage);
//!    then the hop rule: a packet whose filter already holds this node's
//!    mask is on a loop and dropped;
//! 3. **heavy flows** ([`HeavyStage`]): bytes and packets per flow into the
//!    sketch and the flow memory, epochs closed on time;
//! 4. **forward** ([`Forward`]): on routed ports (those with addresses),
//!    the IP router: longest-prefix match, TTL, neighbour MACs;
//! 5. **wires** ([`Wires`]): on the other ports, unicast egress ports
//!    from the config's wires;
//! 6. **multicast** ([`MulticastStage`]): IGMP/MLD learned and consumed,
//!    multicast data given the ports whose filters hold its group;
//! 7. **egress** ([`Egress`]): every copy out of its port, through the
//!    port's SFB queue and shaper when it has one, Icarus stripped on
//!    stripping edges and inserted elsewhere when the Icarus stage
//!    deferred it, handed to a [`Transmit`];
//! 8. **count** ([`crate::pipeline::count_verdicts`]): `received ==
//!    forwarded + local + dropped + held` (dropped by reason);
//! 9. **originated** ([`Originated`]): the frames the forwarding stage
//!    made during the batch (ICMP, ARP, neighbour discovery) handed to the
//!    egress stage like the batch's own copies (their ports' counters
//!    count them; the chain's `received` does not);
//! 10. **digest** ([`DigestStage`]): the invariant content of every packet
//!     forwarded (held packets when released) into the current window of
//!     the traceback ring, with its ingress port; its keys are read right
//!     after step 1 (step 7 may move a frame into a queue) and recorded
//!     once the verdicts are final.
//!
//! A stage the config leaves out is `None` and costs one branch per
//! batch. Every stage takes `now` (the batch's time) from the caller:
//! monotonic time live, capture time on replay, so a replay is
//! deterministic. [`Chain::tick`] runs the time-driven work when no packet
//! comes (heavy-flow epochs, SFB's rehash clock, multicast expiry, queue
//! departures); [`Chain::finish`] ends the input.

use std::fmt;

use crate::clock::Timestamp;
use crate::config::RouterConfig;
use crate::packet::Transmit;
use crate::packet::{Batch, DropReason, PortSet, Verdict};
use crate::pipeline::{PipelineConfig, PipelineCounters, Stage, count_verdicts, parse_batch};
use crate::stage::digest::DigestStage;
use crate::stage::egress::{Egress, PortConfigError, PortSpec};
use crate::stage::forward::{Forward, Originated};
use crate::stage::heavy::HeavyStage;
use crate::stage::icarus::IcarusStage;
use crate::stage::multicast::{MulticastError, MulticastStage};
use crate::stage::wires::Wires;
use crate::timing::{Lap, Step};

/// Why a chain could not be built from a config (which validation should
/// have refused already).
#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    /// The multicast settings.
    #[error("{0}")]
    Multicast(#[from] MulticastError),
    /// An interface's SFB settings.
    #[error("{0}")]
    Sfb(#[from] PortConfigError),
    /// The digest stage's sizing.
    #[error("digest: {0}")]
    Digest(#[from] kernels::bloom::ParamError),
}

/// Moves the held packets that left the forwarding stage's queues during
/// the batch from `held` to `forwarded` (or to `dropped`, by the reason
/// the egress stage gave, or `no_neighbour` for a next hop that never
/// answered).
fn count_released(o: &Originated, c: &mut PipelineCounters) {
    let released = o.released();
    for (i, p) in o.batch().packets().iter().enumerate() {
        if released & 1u32.checked_shl(i as u32).unwrap_or(0) == 0 {
            continue;
        }
        c.held = c.held.saturating_sub(1);
        // A released packet was forwarded or dropped, never kept.
        if !matches!(p.verdict, Verdict::Consumed | Verdict::Held) {
            c.count_verdict(p.verdict);
        }
    }
    c.held = c.held.saturating_sub(o.failed());
    c.dropped.record_n(DropReason::NoNeighbour, o.failed());
}

/// What sees every batch go through the chain (`traffic-gen replay
/// --verbose` prints a line per packet from it).
pub trait PacketLogger: Send {
    /// The batch before the egress stage takes its frames: the bytes are
    /// still the packets' (a frame that goes into a queue leaves the
    /// batch), as the ingress stages left them. By default nothing.
    fn before_egress(&mut self, _batch: &Batch) {}

    /// The batch once its verdicts are final, and its `now`.
    fn decided(&mut self, batch: &Batch, now: Timestamp);
}

/// A chain's [`PacketLogger`].
pub type PacketLog = Box<dyn PacketLogger>;

/// The router's stages in their order (see the module docs).
pub struct Chain {
    parse: PipelineConfig,
    icarus: Option<IcarusStage>,
    heavy: Option<HeavyStage>,
    forward: Option<Forward>,
    originated: Originated,
    wires: Wires,
    multicast: Option<MulticastStage>,
    egress: Egress,
    digest: Option<DigestStage>,
    counters: PipelineCounters,
    packet_log: Option<PacketLog>,
}

impl fmt::Debug for Chain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chain")
            .field("icarus", &self.icarus.is_some())
            .field("heavy", &self.heavy.is_some())
            .field("forward", &self.forward.is_some())
            .field("multicast", &self.multicast.is_some())
            .field("digest", &self.digest.is_some())
            .field("ports", &self.egress.ports())
            .field("counters", &self.counters)
            .field("packet_log", &self.packet_log.is_some())
            .finish_non_exhaustive()
    }
}

impl Chain {
    /// The chain `cfg` describes: its stages, wires, multicast filters and
    /// egress queues. Malformed frames are dropped.
    ///
    /// # Errors
    /// Settings a stage refuses (a validated config has none).
    pub fn build(cfg: &RouterConfig) -> Result<Chain, ChainError> {
        Self::build_for(cfg, cfg.workers.resolved_count())
    }

    /// [`Chain::build`] for one of `workers` workers (the digest stage's
    /// expected load is shared among them).
    ///
    /// # Errors
    /// As [`Chain::build`].
    pub fn build_for(cfg: &RouterConfig, workers: usize) -> Result<Chain, ChainError> {
        let icarus = cfg.icarus_config();
        let strip = icarus.map_or(0, |c| c.strip_on_egress);
        let mut queues: Vec<_> = vec![None; cfg.interfaces.len()];
        for s in cfg.egress_queues() {
            if let Some(q) = queues.get_mut(usize::from(s.port)) {
                *q = Some((s.sfb, s.egress));
            }
        }
        let specs = cfg
            .interfaces
            .iter()
            .zip(queues)
            .enumerate()
            .map(|(i, (ifc, queue))| PortSpec {
                name: ifc.name.clone(),
                queue,
                strip: strip & 1u64.checked_shl(i as u32).unwrap_or(0) != 0,
            })
            .collect();
        let mut egress = Egress::new(specs)?;
        let icarus = icarus.map(IcarusStage::new);
        if let Some(s) = &icarus {
            egress.set_icarus_insert(*s.core().inserted_filter());
        }
        let multicast = cfg.multicast_config();
        let forward = cfg
            .interfaces
            .iter()
            .any(|i| i.is_routed())
            .then(|| Forward::new(&cfg.forward_config(), strip, multicast.is_some()));
        let routed = forward
            .as_ref()
            .map_or(PortSet::EMPTY, Forward::routed_ports);
        Ok(Chain {
            parse: PipelineConfig {
                default_egress: PortSet::EMPTY,
                ..PipelineConfig::default()
            },
            icarus,
            heavy: cfg.heavy_config().map(HeavyStage::new),
            forward,
            originated: Originated::new(),
            wires: Wires::new(cfg.unicast_routes(), multicast.is_some()).skipping(routed),
            multicast: multicast.as_ref().map(MulticastStage::new).transpose()?,
            egress,
            digest: cfg
                .digest_config(workers)
                .map(|d| DigestStage::new(&d))
                .transpose()?,
            counters: PipelineCounters::default(),
            packet_log: None,
        })
    }

    /// The parse settings (malformed frames, strict lengths).
    pub fn parse_config(&self) -> &PipelineConfig {
        &self.parse
    }

    /// Sets the parse settings (the default egress of a packet no stage
    /// routes stays empty unless set here).
    pub fn set_parse_config(&mut self, cfg: PipelineConfig) {
        self.parse = cfg;
    }

    /// One batch through every stage at `now`; copies leave through `tx`.
    /// The batch keeps its verdicts and parse summaries; the frame of a
    /// packet whose last copy went into an egress queue moved there (the
    /// packet's bytes are then empty).
    pub fn process(&mut self, batch: &mut Batch, now: Timestamp, tx: &mut impl Transmit) {
        self.process_local(batch, now);
        self.process_shared(batch, now, tx);
    }

    /// Steps 1-3 of [`process`](Self::process) (parse, Icarus, heavy
    /// flows; and the digest stage's keys read): what depends on this
    /// chain's own state and the batch alone.
    /// Workers run them side by side; the rest, whose state they may share
    /// (learned neighbours and memberships, the egress queues), follows in
    /// [`process_shared`](Self::process_shared).
    pub fn process_local(&mut self, batch: &mut Batch, now: Timestamp) {
        let mut lap = Lap::start();
        parse_batch(&self.parse, batch, &mut self.counters);
        if let Some(d) = &mut self.digest {
            d.gather(batch);
        }
        lap.lap(Step::Parse);
        if let Some(s) = &mut self.icarus {
            s.process(batch);
        }
        lap.lap(Step::Icarus);
        if let Some(s) = &mut self.heavy {
            Stage::process(s, batch, now);
        }
        lap.lap(Step::Heavy);
    }

    /// Steps 4-10 of [`process`](Self::process), after
    /// [`process_local`](Self::process_local).
    pub fn process_shared(&mut self, batch: &mut Batch, now: Timestamp, tx: &mut impl Transmit) {
        let mut lap = Lap::start();
        self.originated.clear();
        if let Some(s) = &mut self.forward {
            s.process(batch, now, &mut self.originated);
        }
        self.wires.process(batch);
        lap.lap(Step::Forward);
        if let Some(s) = &mut self.multicast {
            Stage::process(s, batch, now);
        }
        lap.lap(Step::Multicast);
        if let Some(log) = &mut self.packet_log {
            log.before_egress(batch);
        }
        if let Some(d) = &mut self.digest {
            d.gather_released(self.originated.batch(), self.originated.released());
        }
        self.egress.process(batch, now, tx);
        lap.lap(Step::Egress);
        count_verdicts(batch, &mut self.counters);
        if !self.originated.is_empty() {
            self.egress.process(self.originated.batch_mut(), now, tx);
        }
        count_released(&self.originated, &mut self.counters);
        if let Some(d) = &mut self.digest {
            d.record(batch, Some(self.originated.batch()), now);
        }
        if let Some(log) = &mut self.packet_log {
            log.decided(batch, now);
        }
        lap.lap(Step::Tail);
    }

    /// Hands every processed batch to `log` (see [`PacketLog`]).
    pub fn set_packet_log(&mut self, log: PacketLog) {
        self.packet_log = Some(log);
    }

    /// The time-driven work at `now` with no packet: heavy-flow epochs
    /// closed, SFB's rehash clock and multicast expiry advanced (an empty
    /// batch through the stages), queued copies released by `now` sent.
    pub fn tick(&mut self, empty: &mut Batch, now: Timestamp, tx: &mut impl Transmit) {
        empty.clear();
        self.process(empty, now, tx);
    }

    /// The input has ended at `now`: the open heavy-flow epoch is closed.
    /// The queues are left as they are (see [`Egress::drain_all`] and
    /// [`Egress::discard_all`]).
    pub fn finish(&mut self, now: Timestamp) {
        if let Some(s) = &mut self.heavy {
            Stage::finish(s, now);
        }
    }

    /// The counters so far.
    pub fn counters(&self) -> &PipelineCounters {
        &self.counters
    }

    /// The counters, writable (a live shutdown moves discarded copies from
    /// forwarded to dropped).
    pub fn counters_mut(&mut self) -> &mut PipelineCounters {
        &mut self.counters
    }

    /// The Icarus stage, when on.
    pub fn icarus(&self) -> Option<&IcarusStage> {
        self.icarus.as_ref()
    }

    /// The heavy-flow stage, when on.
    pub fn heavy(&self) -> Option<&HeavyStage> {
        self.heavy.as_ref()
    }

    /// The heavy-flow stage, writable (to take its reports).
    pub fn heavy_mut(&mut self) -> Option<&mut HeavyStage> {
        self.heavy.as_mut()
    }

    /// The forwarding stage, when a port is routed.
    pub fn forward(&self) -> Option<&Forward> {
        self.forward.as_ref()
    }

    /// The forwarding stage, writable (neighbours between workers).
    pub fn forward_mut(&mut self) -> Option<&mut Forward> {
        self.forward.as_mut()
    }

    /// The wires.
    pub fn wires(&self) -> &Wires {
        &self.wires
    }

    /// The multicast stage, when on.
    pub fn multicast(&self) -> Option<&MulticastStage> {
        self.multicast.as_ref()
    }

    /// The multicast stage, writable (membership events between workers).
    pub fn multicast_mut(&mut self) -> Option<&mut MulticastStage> {
        self.multicast.as_mut()
    }

    /// The digest stage, when on.
    pub fn digest(&self) -> Option<&DigestStage> {
        self.digest.as_ref()
    }

    /// Joins the chain to the peering control path ([`crate::peer`]): the
    /// forwarding stage hands it the datagrams to the peering port and
    /// sends its datagrams, the multicast stage ORs in the filters the
    /// neighbours advertise. `false` when the chain has no routed port
    /// (peers talk over routed ports only).
    pub fn attach_peering(
        &mut self,
        tap: crate::peer::PeerTap,
        remote: crossbeam_channel::Receiver<Vec<Option<kernels::bloom::Bloom>>>,
    ) -> bool {
        let Some(f) = &mut self.forward else {
            return false;
        };
        f.set_peer_tap(tap);
        if let Some(m) = &mut self.multicast {
            m.set_remote_filters(remote);
        }
        true
    }

    /// The egress stage.
    pub fn egress(&self) -> &Egress {
        &self.egress
    }

    /// The egress stage, writable (queued departures, shutdown).
    pub fn egress_mut(&mut self) -> &mut Egress {
        &mut self.egress
    }
}
