//! Live forwarding: the config's wires, and the ports' real egress queues.
//!
//! # Wires
//!
//! A live packet that arrived on port `i` goes out of `routes[i]` (never
//! `i` itself); none: dropped with [`DropReason::NoRoute`]. With
//! `skip_multicast`, IP multicast packets are left to the multicast stage,
//! which runs next; without it they follow the wires like any frame
//! (broadcasts and non-IP frames always do).
//!
//! # Egress queues
//!
//! [`EgressQueues`] is the last stage of a worker's pipeline: one real
//! [`SfbQueue`] per port with an `sfb` table (a shaped FIFO behind
//! Stochastic Fair Blue, `stage/sfb.rs` and `stage/egress.rs`). For every
//! live packet going out of such a port (not its ingress port) it copies the
//! frame into a buffer from its pool, strips the icarus option from the copy
//! when the port is an icarus edge, and offers the copy to the queue at the
//! batch's `now`. SFB's decision becomes the packet's verdict as
//! [`SfbStage`](crate::stage::sfb::SfbStage) makes it in replay: a drop
//! removes the port from the packet's ports (the packet is dropped for that
//! reason when no port is left, so the pipeline counts it), a mark sets ECN
//! CE on the queued copy (IPv4 checksum fixed) and turns the verdict into
//! [`Verdict::Mark`]. The port stays in the verdict of a queued packet: the
//! worker's transmit skips the queued ports ([`EgressQueues::ports`]), and
//! sends their frames when the shaper releases them
//! ([`EgressQueues::send_due`], [`EgressQueues::next_departure`]).
//!
//! Buffers come from a free list: a slot is taken per offered copy and
//! given back when the copy is sent or refused, so once the pool has grown
//! to the queues' high-water mark nothing is allocated per packet.
//!
//! At shutdown the owner sends what is due until its deadline, then
//! [`EgressQueues::discard_all`] drops the rest; those frames were counted
//! as forwarded by the pipeline, so the queue counts them
//! (`shutdown_dropped`) and reports how many of them were a packet's only
//! copy ([`EgressQueues::shutdown_discarded`]) for the owner to move from
//! forwarded to dropped.

use std::any::Any;

use super::{PenalisedSummary, SfbSummary};
use crate::clock::Timestamp;

use crate::pipeline::{Batch, DropReason, PortSet, Stage, Verdict};
use crate::stage::egress::EgressConfig;
use crate::stage::sfb::{Enqueued, PortKeys, SfbConfig, SfbConfigError, SfbQueue};
use crate::wire::{icarus, set_ce};

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
            counters: WiresCounters::default(),
        }
    }

    /// The counters.
    pub fn counters(&self) -> &WiresCounters {
        &self.counters
    }
}

impl Stage for Wires {
    fn name(&self) -> &'static str {
        "wires"
    }

    fn process(&mut self, batch: &mut Batch, _now: Timestamp) {
        for p in batch.packets_mut() {
            if !p.is_live() {
                continue;
            }
            if self.skip_multicast && p.parsed.is_some_and(|q| q.is_ip() && q.dst_multicast) {
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

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// Initial capacity of a pooled frame buffer (a full Ethernet frame with
/// tags); a buffer grows to the largest frame it held and keeps it.
const FRAME_CAPACITY: usize = 2048;

/// Pool slots made up front (the pool grows past it only while the queues
/// reach a new high-water mark).
const POOL_PREALLOC: usize = 256;

/// Slot flag: the copy was its packet's only egress copy.
const SOLE: u8 = 1;
/// Slot flag: the copy was CE-marked.
const MARKED: u8 = 2;

/// Frame buffers handed out by index, with a free list.
#[derive(Debug, Default)]
struct FramePool {
    bufs: Vec<Vec<u8>>,
    flags: Vec<u8>,
    free: Vec<u32>,
}

impl FramePool {
    fn with_capacity(slots: usize) -> Self {
        let mut p = FramePool {
            bufs: Vec::with_capacity(slots),
            flags: Vec::with_capacity(slots),
            free: Vec::with_capacity(slots),
        };
        for _ in 0..slots {
            let i = p.grow();
            p.free.push(i);
        }
        p
    }

    /// A new slot (not on the free list).
    #[cold]
    fn grow(&mut self) -> u32 {
        let i = u32::try_from(self.bufs.len()).unwrap_or(u32::MAX);
        self.bufs.push(Vec::with_capacity(FRAME_CAPACITY));
        self.flags.push(0);
        i
    }

    /// A free slot, emptied.
    #[inline]
    fn take(&mut self) -> u32 {
        let i = match self.free.pop() {
            Some(i) => i,
            None => self.grow(),
        };
        if let Some(b) = self.bufs.get_mut(i as usize) {
            b.clear();
        }
        i
    }

    #[inline]
    fn put(&mut self, i: u32) {
        self.free.push(i);
    }

    #[inline]
    fn buf(&self, i: u32) -> &[u8] {
        self.bufs.get(i as usize).map_or(&[], |b| b.as_slice())
    }

    #[inline]
    fn flags(&self, i: u32) -> u8 {
        self.flags.get(i as usize).copied().unwrap_or(0)
    }

    #[inline]
    fn set_flags(&mut self, i: u32, f: u8) {
        if let Some(x) = self.flags.get_mut(i as usize) {
            *x = f;
        }
    }

    /// Slots made so far (in use or free).
    fn slots(&self) -> usize {
        self.bufs.len()
    }
}

/// One egress queue to build: the port, its interface name, SFB and shaper
/// settings, and whether the icarus option is stripped on the way out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSpec {
    /// The egress port.
    pub port: u8,
    /// Its interface name (for the reports).
    pub name: String,
    /// SFB.
    pub sfb: SfbConfig,
    /// The shaper and the queue's packet limit.
    pub egress: EgressConfig,
    /// Strip the icarus option from frames queued here (an edge port).
    pub strip: bool,
}

/// Counters of one live egress queue, besides SFB's own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct QueueCounters {
    /// Frames the queue took.
    pub enqueued: u64,
    /// Frames sent when the shaper released them.
    pub sent: u64,
    /// Bytes of those frames.
    pub sent_bytes: u64,
    /// Released frames the socket refused (ENOBUFS, timeouts, ...).
    pub send_errors: u64,
    /// Frames still queued at the shutdown deadline, dropped.
    pub shutdown_dropped: u64,
    /// Sum over released frames of (send time - enqueue time), ns.
    pub sojourn_sum_ns: u64,
    /// Longest of those, ns.
    pub sojourn_max_ns: u64,
    /// Queued copies whose icarus option was removed.
    pub stripped: u64,
}

#[derive(Debug)]
struct PortQueue {
    port: u8,
    name: String,
    strip: bool,
    /// Items are pool slots.
    queue: SfbQueue<u32>,
    counters: QueueCounters,
}

/// The live egress queues of one worker, as the pipeline's last stage (see
/// the module docs).
#[derive(Debug)]
pub struct EgressQueues {
    queues: Vec<PortQueue>,
    ports: PortSet,
    pool: FramePool,
    keys: PortKeys,
    /// Discarded at shutdown: sole copies, and of those the marked ones.
    discarded_sole: u64,
    discarded_sole_marked: u64,
}

impl EgressQueues {
    /// One queue per spec (a port named twice keeps its first spec).
    pub fn new(specs: Vec<QueueSpec>) -> Result<Self, SfbConfigError> {
        let mut queues = Vec::with_capacity(specs.len());
        let mut ports = PortSet::EMPTY;
        let mut limit = 0usize;
        for s in specs {
            if ports.contains(s.port) || s.port >= PortSet::MAX_PORTS {
                continue;
            }
            ports = ports.union(PortSet::single(s.port));
            limit = limit.saturating_add(s.sfb.limit.min(s.egress.limit));
            queues.push(PortQueue {
                port: s.port,
                name: s.name,
                strip: s.strip,
                queue: SfbQueue::new(s.sfb, s.egress)?,
                counters: QueueCounters::default(),
            });
        }
        Ok(EgressQueues {
            queues,
            ports,
            pool: FramePool::with_capacity(limit.saturating_add(1).min(POOL_PREALLOC)),
            keys: PortKeys::new(),
            discarded_sole: 0,
            discarded_sole_marked: 0,
        })
    }

    /// The ports that have a queue: the transmit path leaves them to
    /// [`send_due`](Self::send_due).
    pub fn ports(&self) -> PortSet {
        self.ports
    }

    /// Frames and bytes queued, over every queue.
    pub fn backlog(&self) -> (usize, u64) {
        self.queues.iter().fold((0, 0), |(n, b), q| {
            (
                n + q.queue.queue().len(),
                b + q.queue.queue().backlog_bytes(),
            )
        })
    }

    /// The earliest time a queued frame is released (`None`: all empty).
    pub fn next_departure(&self) -> Option<Timestamp> {
        self.queues
            .iter()
            .filter_map(|q| q.queue.queue().next_departure())
            .min()
    }

    /// Hands every frame the shapers released by `now` to `send(port,
    /// frame)` (which says whether it went out), in queue order per port;
    /// returns how many.
    pub fn send_due(&mut self, now: Timestamp, mut send: impl FnMut(u8, &[u8]) -> bool) -> usize {
        let mut n = 0;
        for q in &mut self.queues {
            while let Some(d) = q.queue.dequeue(now) {
                let frame = self.pool.buf(d.item);
                let c = &mut q.counters;
                if send(q.port, frame) {
                    c.sent += 1;
                    c.sent_bytes += frame.len() as u64;
                } else {
                    c.send_errors += 1;
                }
                let sojourn = now.nanos_since(d.enqueued);
                c.sojourn_sum_ns = c.sojourn_sum_ns.saturating_add(sojourn);
                c.sojourn_max_ns = c.sojourn_max_ns.max(sojourn);
                self.pool.put(d.item);
                n += 1;
            }
        }
        n
    }

    /// Drops every queued frame (shutdown, after the drain deadline);
    /// returns how many.
    pub fn discard_all(&mut self) -> u64 {
        let mut n = 0;
        for q in &mut self.queues {
            while let Some(d) = q.queue.dequeue(Timestamp::from_nanos(u64::MAX)) {
                q.counters.shutdown_dropped += 1;
                let f = self.pool.flags(d.item);
                if f & SOLE != 0 {
                    self.discarded_sole += 1;
                    if f & MARKED != 0 {
                        self.discarded_sole_marked += 1;
                    }
                }
                self.pool.put(d.item);
                n += 1;
            }
        }
        n
    }

    /// Of the frames [`discard_all`](Self::discard_all) dropped, those that
    /// were their packet's only copy, and how many of those were marked:
    /// packets the pipeline counted as forwarded (and marked) that never
    /// left.
    pub fn shutdown_discarded(&self) -> (u64, u64) {
        (self.discarded_sole, self.discarded_sole_marked)
    }

    /// Pool slots made so far (bounded by the queues' limits plus one).
    pub fn pool_slots(&self) -> usize {
        self.pool.slots()
    }

    /// Counters of every queue, in port order of the specs.
    pub fn counters(&self) -> impl Iterator<Item = (u8, &QueueCounters)> {
        self.queues.iter().map(|q| (q.port, &q.counters))
    }

    /// The report of every queue at `now`: SFB's counters (`tc -s qdisc`
    /// style), the penalty box, the backlog and the queue's counters.
    pub fn summaries(&self, now: Timestamp) -> Vec<SfbSummary> {
        self.queues
            .iter()
            .map(|q| {
                let st = q.queue.sfb().stats(now);
                let c = st.counters;
                let eq = q.queue.queue();
                SfbSummary {
                    interface: q.name.clone(),
                    earlydrop: c.earlydrop,
                    penaltydrop: c.penaltydrop,
                    bucketdrop: c.bucketdrop,
                    queuedrop: c.queuedrop,
                    childdrop: c.childdrop,
                    marked: c.marked,
                    maxqlen: st.maxqlen,
                    maxprob: st.maxprob,
                    avgprob: st.avgprob,
                    penalised: st
                        .penalised
                        .iter()
                        .map(|p| PenalisedSummary {
                            flow: p.flow.to_string(),
                            admitted: p.admitted,
                            dropped: p.dropped,
                        })
                        .collect(),
                    backlog_packets: eq.len() as u64,
                    backlog_bytes: eq.backlog_bytes(),
                    queue: q.counters,
                }
            })
            .collect()
    }

    /// Offers the batch's packets for queue `qi` (see the module docs).
    fn offer(&mut self, qi: usize, batch: &mut Batch, now: Timestamp) {
        let Some(q) = self.queues.get_mut(qi) else {
            return;
        };
        let port = q.port;
        q.queue.sfb_mut().tick(now);
        if self.keys.gather(batch, port, true) == 0 {
            return;
        }
        self.keys.hash(q.queue.sfb());
        let this = PortSet::single(port).mask();
        for k in 0..self.keys.len() {
            let key = self.keys.key(k);
            let packet = self.keys.packet(k);
            let Some(p) = batch.packets_mut().get_mut(packet) else {
                continue;
            };
            let ports = match p.verdict {
                Verdict::Forward(ps) | Verdict::Mark(ps) => ps,
                Verdict::Drop(_) => continue,
            };
            let others = ports.mask() & !this & !PortSet::single(p.ingress).mask();
            let parsed = p.parsed;
            let slot = self.pool.take();
            let Some(buf) = self.pool.bufs.get_mut(slot as usize) else {
                continue;
            };
            buf.extend_from_slice(p.data());
            if q.strip
                && let Some(x) = parsed.filter(|x| x.is_ip())
                && matches!(
                    icarus::strip(buf, x.l3_offset),
                    Ok(icarus::Stripped::Removed(_) | icarus::Stripped::Neutralised)
                )
            {
                q.counters.stripped += 1;
            }
            let len = u32::try_from(buf.len()).unwrap_or(u32::MAX);
            let flow = parsed.and_then(|x| x.flow);
            let ecn = parsed.is_some_and(|x| x.ecn.is_ect());
            match q.queue.enqueue(&key, flow.as_ref(), ecn, slot, len, now) {
                Ok(how) => {
                    q.counters.enqueued += 1;
                    let mut flags = if others == 0 { SOLE } else { 0 };
                    if how == Enqueued::Mark {
                        if let (Some(x), Some(buf)) =
                            (parsed, self.pool.bufs.get_mut(slot as usize))
                        {
                            set_ce(buf, &x);
                        }
                        p.mark();
                        flags |= MARKED;
                    }
                    self.pool.set_flags(slot, flags);
                }
                Err(reason) => {
                    self.pool.put(slot);
                    p.drop_port(port, reason);
                }
            }
        }
    }
}

impl Stage for EgressQueues {
    fn name(&self) -> &'static str {
        "egress"
    }

    fn process(&mut self, batch: &mut Batch, now: Timestamp) {
        for qi in 0..self.queues.len() {
            self.offer(qi, batch, now);
        }
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
        let mut f = vec![
            0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0x08, 0x00, // Ethernet
            0x45, 0x00, 0x00, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 0, 0, 0, 0, // IPv4
            0x03, 0xe8, 0x07, 0xd0, 0, 8, 0, 0, // UDP
        ];
        f[30..34].copy_from_slice(&dst);
        let sum = !crate::wire::checksum::sum(&f[14..34]);
        f[24..26].copy_from_slice(&sum.to_be_bytes());
        f
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

    /// [`frame`] from source port `sport` with TOS byte `tos`.
    fn frame_tos(dst: [u8; 4], sport: u16, tos: u8) -> Vec<u8> {
        let mut f = frame(dst);
        f[15] = tos;
        f[34..36].copy_from_slice(&sport.to_be_bytes());
        f[24..26].copy_from_slice(&[0, 0]);
        let sum = !crate::wire::checksum::sum(&f[14..34]);
        f[24..26].copy_from_slice(&sum.to_be_bytes());
        f
    }

    fn ms(n: u64) -> Timestamp {
        Timestamp::from_nanos(n * 1_000_000)
    }

    /// Wires with `routes`, then one queue per `(port, sfb, egress)`.
    fn pipeline(routes: Vec<PortSet>, queues: &[(u8, SfbConfig, EgressConfig)]) -> Pipeline {
        let specs = queues
            .iter()
            .map(|&(port, sfb, egress)| QueueSpec {
                port,
                name: format!("p{port}"),
                sfb,
                egress,
                strip: false,
            })
            .collect();
        Pipeline::new(PipelineConfig {
            default_egress: PortSet::EMPTY,
            ..PipelineConfig::default()
        })
        .with_stage(Wires::new(routes, false))
        .with_stage(EgressQueues::new(specs).unwrap())
    }

    /// SFB that never judges (queue far below its thresholds).
    fn lenient() -> SfbConfig {
        SfbConfig {
            seed: Some(1),
            max: 1000,
            target: 1000,
            ..SfbConfig::default()
        }
    }

    fn queues(p: &mut Pipeline) -> &mut EgressQueues {
        p.stage_mut::<EgressQueues>().unwrap()
    }

    /// Sends what is due at `now`: `(port, frame)` per frame.
    fn due(p: &mut Pipeline, now: Timestamp) -> Vec<(u8, Vec<u8>)> {
        let mut out = Vec::new();
        queues(p).send_due(now, |port, f| {
            out.push((port, f.to_vec()));
            true
        });
        out
    }

    #[test]
    fn queued_port_holds_frames_and_paces_them() {
        // 0 -> {1, 2}; 1 is shaped to 1 byte/us with a 100-byte bucket.
        let egress = EgressConfig {
            rate_bps: 8_000_000,
            burst_bytes: 100,
            limit: 1000,
        };
        let mut p = pipeline(
            vec![PortSet::from_mask(0b110), PortSet::EMPTY, PortSet::EMPTY],
            &[(1, lenient(), egress)],
        );
        assert_eq!(queues(&mut p).ports(), PortSet::single(1));
        let slots = queues(&mut p).pool_slots();
        let mut b = Batch::new();
        for round in 0..100u64 {
            let t0 = ms(round);
            b.clear();
            let frames: Vec<Vec<u8>> = (0..10u16).map(|i| frame_tos([10, 0, 0, 2], i, 0)).collect();
            for f in &frames {
                b.push_from(t0, f.len() as u32, LinkType::Ethernet, 0, f);
            }
            p.process(&mut b, t0);
            // Queued, not dropped: the verdict keeps both ports (transmit
            // skips the queued one).
            assert!(
                b.packets()
                    .iter()
                    .all(|x| x.verdict == Verdict::Forward(PortSet::from_mask(0b110)))
            );
            assert_eq!(queues(&mut p).backlog(), (10, 420));
            // The bucket holds two 42-byte frames; the third needs 26 more
            // bytes: 26 us.
            let sent = due(&mut p, t0);
            assert_eq!(sent.len(), 2);
            assert_eq!(queues(&mut p).next_departure(), Some(t0.add_nanos(26_000)));
            assert_eq!(due(&mut p, t0.add_nanos(25_999)).len(), 0);
            let mut all = sent;
            all.extend(due(&mut p, t0.add_nanos(26_000)));
            assert_eq!(all.len(), 3);
            // The rest, one per 42 us.
            all.extend(due(&mut p, t0.add_nanos(26_000 + 7 * 42_000)));
            assert_eq!(all.len(), 10);
            assert_eq!(queues(&mut p).next_departure(), None);
            assert!(all.iter().all(|(port, _)| *port == 1));
            let got: Vec<&Vec<u8>> = all.iter().map(|(_, f)| f).collect();
            assert_eq!(got, frames.iter().collect::<Vec<_>>(), "FIFO, unchanged");
        }
        // Steady state: the pool did not grow.
        assert_eq!(queues(&mut p).pool_slots(), slots);
        let c = p.counters();
        assert!(c.is_consistent());
        assert_eq!((c.forwarded, c.dropped.total()), (1000, 0));
        let (_, qc) = queues(&mut p).counters().next().unwrap();
        assert_eq!((qc.enqueued, qc.sent, qc.sent_bytes), (1000, 1000, 42_000));
    }

    #[test]
    fn marks_and_drops_are_accounted() {
        // 0 -> {1}, unshaped queue: SFB at a fixed probability of 1/4.
        let sfb = SfbConfig {
            increment: 0,
            decrement: 0,
            ..lenient()
        };
        let egress = EgressConfig {
            rate_bps: 0,
            ..EgressConfig::default()
        };
        let mut p = pipeline(
            vec![PortSet::single(1), PortSet::EMPTY],
            &[(1, sfb, egress)],
        );
        for q in &mut queues(&mut p).queues {
            q.queue.sfb_mut().force_probability(0x4000);
        }
        let mut b = Batch::new();
        let mut sent = Vec::new();
        let (mut ect, mut not_ect) = (0u64, 0u64);
        for round in 0..40u64 {
            b.clear();
            for i in 0..32u16 {
                // Even source ports ECT(0), odd ones Not-ECT.
                let f = frame_tos([10, 0, 0, 2], i, if i % 2 == 0 { 0x02 } else { 0 });
                b.push_from(ms(round), f.len() as u32, LinkType::Ethernet, 0, &f);
            }
            p.process(&mut b, ms(round));
            // The batch's own frames are untouched: only queued copies are
            // marked.
            assert!(b.packets().iter().all(|x| x.data()[15] & 3 != 3));
            sent.extend(due(&mut p, ms(round)));
            ect += 16;
            not_ect += 16;
        }
        let c = p.counters().clone();
        assert!(c.is_consistent());
        let ce: Vec<&Vec<u8>> = sent
            .iter()
            .map(|(_, f)| f)
            .filter(|f| f[15] & 3 == 3)
            .collect();
        let st = queues(&mut p).queues[0].queue.sfb().stats(ms(40));
        // Every forwarded packet went out of the queue; every mark is a CE
        // frame with a right checksum, from an ECT(0) packet.
        assert_eq!(c.forwarded, sent.len() as u64);
        assert!(c.marked > 0 && c.marked < ect, "{c:?}");
        assert_eq!(c.marked, st.counters.marked);
        assert_eq!(ce.len() as u64, c.marked);
        for f in &ce {
            assert_eq!(crate::wire::checksum::sum(&f[14..34]), 0xffff);
            assert_eq!(u16::from_be_bytes([f[34], f[35]]) % 2, 0);
        }
        // Not-ECT packets SFB would have marked are dropped, and counted.
        let early = c.dropped.get(DropReason::SfbEarly);
        assert!(early > 0 && early < not_ect, "{c:?}");
        assert_eq!(early, st.counters.earlydrop);
        assert_eq!(c.dropped.total(), early);
        assert_eq!(c.received, ect + not_ect);
    }

    #[test]
    fn queue_drops_keep_other_ports_and_shutdown_counts_sole_copies() {
        // 0 -> {1, 2}, 3 -> {1}; 1 is a slow queue of 2 packets.
        let egress = EgressConfig {
            rate_bps: 8_000,
            burst_bytes: 0,
            limit: 2,
        };
        let mut p = pipeline(
            vec![
                PortSet::from_mask(0b110),
                PortSet::EMPTY,
                PortSet::EMPTY,
                PortSet::single(1),
            ],
            &[(1, lenient(), egress)],
        );
        let f = frame_tos([10, 0, 0, 2], 7, 0x02);
        let mut b = Batch::new();
        for _ in 0..3 {
            b.push_from(ms(0), 42, LinkType::Ethernet, 0, &f);
        }
        p.process(&mut b, ms(0));
        let v: Vec<Verdict> = b.packets().iter().map(|x| x.verdict).collect();
        assert_eq!(v[0], Verdict::Forward(PortSet::from_mask(0b110)));
        assert_eq!(v[1], Verdict::Forward(PortSet::from_mask(0b110)));
        // Refused by port 1's queue, still sent out of port 2.
        assert_eq!(v[2], Verdict::Forward(PortSet::single(2)));
        assert_eq!(p.counters().dropped.total(), 0);
        // The queue is full: from port 3 (only port 1), refused and dropped.
        b.clear();
        b.push_from(ms(1), 42, LinkType::Ethernet, 3, &f);
        p.process(&mut b, ms(1));
        assert_eq!(b.packets()[0].verdict, Verdict::Drop(DropReason::QueueFull));
        // 42 bytes at 1 kB/s: one frame after 42 ms.
        assert_eq!(due(&mut p, ms(42)).len(), 1);
        b.clear();
        b.push_from(ms(43), 42, LinkType::Ethernet, 3, &f);
        p.process(&mut b, ms(43));
        assert!(b.packets()[0].verdict.is_forwarded());
        // Shutdown: two frames left, one the only copy of its packet.
        assert_eq!(queues(&mut p).discard_all(), 2);
        assert_eq!(queues(&mut p).shutdown_discarded(), (1, 0));
        assert_eq!(queues(&mut p).backlog(), (0, 0));
        assert_eq!(queues(&mut p).next_departure(), None);
        let s = queues(&mut p).summaries(ms(50));
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].interface, "p1");
        assert_eq!(s[0].queuedrop + s[0].childdrop, 2);
        assert_eq!(s[0].queue.enqueued, 3);
        assert_eq!(s[0].queue.sent, 1);
        assert_eq!(s[0].queue.shutdown_dropped, 2);
    }
}
