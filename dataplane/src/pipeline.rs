//! The batch pipeline: parse -> stages -> counters.
//!
//! Packets travel in a [`Batch`] of up to [`BATCH_SIZE`] packets. A batch owns
//! one reusable byte buffer per slot: filling a slot copies the frame into a
//! buffer that only grows (to the largest frame seen), so once warm the hot
//! path allocates neither per packet nor per batch.
//!
//! [`Pipeline::process`] parses every packet of a batch, gives each one a
//! [`Verdict`], runs the [`Stage`]s in order (each sees the whole batch and
//! the batch's `now`), then counts the verdicts:
//!
//! * `received` — every packet handed in;
//! * `forwarded` — every packet whose final verdict is [`Verdict::Forward`]
//!   or [`Verdict::Mark`] (a marked packet is forwarded with ECN CE set);
//! * `marked` — the subset of `forwarded` that was marked;
//! * `dropped` — per [`DropReason`];
//! * `consumed` — packets the router takes in as its own input and does
//!   not forward ([`Verdict::Consumed`]): on routed ports those addressed
//!   to it (ARP, neighbour discovery, pings; the answers are frames the
//!   router originates, not counted here), and on every port the IGMP/MLD
//!   messages to a group address that the multicast stage learns from;
//! * `held` — packets waiting for their next hop's MAC ([`Verdict::Held`]),
//!   a gauge: each leaves it later, forwarded or dropped, in a later batch.
//!
//! The invariant `received == forwarded + consumed + dropped + held` holds
//! after every call ([`PipelineCounters::is_consistent`]).
//!
//! A frame that fails to parse is counted by its [`Malformed`](crate::wire::Malformed) reason in
//! [`PipelineCounters::malformed`] whatever the [`MalformedPolicy`]; with
//! [`MalformedPolicy::Drop`] (the default) it is dropped with
//! [`DropReason::Malformed`], with [`MalformedPolicy::Pass`] it is forwarded
//! to the default ports with no [`Parsed`](crate::wire::Parsed) summary, and stages leave it alone.
//!
//! ```
//! use dataplane::clock::Timestamp;
//! use dataplane::pipeline::{Batch, Pipeline, PipelineConfig};
//! use dataplane::wire::LinkType;
//!
//! let mut pipeline = Pipeline::new(PipelineConfig::default());
//! let mut batch = Batch::new();
//! batch.push(Timestamp::ZERO, 3, LinkType::Ethernet, &[0, 1, 2]); // too short
//! pipeline.process(&mut batch, Timestamp::ZERO);
//! let c = pipeline.counters();
//! assert_eq!((c.received, c.forwarded, c.dropped.total()), (1, 0, 1));
//! assert!(c.is_consistent());
//! ```

use core::any::Any;
use core::fmt;

use crate::clock::Timestamp;
use crate::io::capture::{CaptureError, CaptureReader};
use crate::wire::MalformedCounters;

// The batch and verdict types live in the leaf [`crate::packet`]; they are
// re-exported here, where the harness and its users have always found them.
pub use crate::packet::{
    BATCH_SIZE, Batch, DropCounters, DropReason, NO_INGRESS, Packet, PortSet, Verdict,
};

/// A processing step over a whole batch. One stage, one file, one struct
/// with its own counters (see `stage/`).
pub trait Stage: Send {
    /// Short stable name (`heavy`, `sfb`, ...).
    fn name(&self) -> &'static str;

    /// Processes a batch at time `now`. Stages look at packets that are
    /// still live ([`Packet::is_live`]) and may drop or mark them.
    fn process(&mut self, batch: &mut Batch, now: Timestamp);

    /// The input has ended (end of a replay, or shutdown): close any open
    /// epoch. The default does nothing.
    fn finish(&mut self, now: Timestamp) {
        let _ = now;
    }

    /// The stage as [`Any`], so its owner can reach its reports.
    fn as_any(&self) -> &dyn Any;

    /// The stage as mutable [`Any`].
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

/// What to do with a frame that does not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MalformedPolicy {
    /// Drop it with [`DropReason::Malformed`].
    #[default]
    Drop,
    /// Forward it to the default ports untouched; stages skip it.
    Pass,
}

/// Pipeline settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PipelineConfig {
    /// Malformed frames: drop (default) or pass.
    pub malformed: MalformedPolicy,
    /// Where a parsed packet goes until a stage decides otherwise.
    pub default_egress: PortSet,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            malformed: MalformedPolicy::Drop,
            default_egress: PortSet::single(1),
        }
    }
}

/// The pipeline's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PipelineCounters {
    /// Packets handed to the pipeline.
    pub received: u64,
    /// Packets forwarded (marked ones included).
    pub forwarded: u64,
    /// Packets forwarded with ECN CE set.
    pub marked: u64,
    /// Dropped packets by reason.
    pub dropped: DropCounters,
    /// Packets the router took in as its own input ([`Verdict::Consumed`]).
    pub consumed: u64,
    /// Packets held now for a next hop being resolved ([`Verdict::Held`]):
    /// each later leaves this figure for `forwarded` or `dropped`.
    pub held: u64,
    /// Frames that did not parse, by reason, whatever the policy.
    pub malformed: MalformedCounters,
    /// Frames that parsed but carry no IP (ARP, PPPoE, MPLS, ...).
    pub non_ip: u64,
    /// IP datagrams cut by the capture's snapshot length (longer than the
    /// captured bytes, headers through the L4 ports present): keyed and
    /// counted by the stages, not malformed.
    pub cut_by_capture: u64,
}

impl PipelineCounters {
    /// Counts one packet's final verdict: `forwarded` (and `marked`),
    /// `dropped` by reason, `consumed` or `held`.
    #[inline]
    pub fn count_verdict(&mut self, v: Verdict) {
        match v {
            Verdict::Forward(_) => self.forwarded = self.forwarded.saturating_add(1),
            Verdict::Mark(_) => {
                self.forwarded = self.forwarded.saturating_add(1);
                self.marked = self.marked.saturating_add(1);
            }
            Verdict::Drop(r) => self.dropped.record(r),
            Verdict::Consumed => self.consumed = self.consumed.saturating_add(1),
            Verdict::Held => self.held = self.held.saturating_add(1),
        }
    }

    /// `received == forwarded + consumed + dropped + held` and
    /// `marked <= forwarded`.
    pub fn is_consistent(&self) -> bool {
        self.received
            == self
                .forwarded
                .saturating_add(self.consumed)
                .saturating_add(self.dropped.total())
                .saturating_add(self.held)
            && self.marked <= self.forwarded
    }

    /// Adds another set (merging per-worker shards).
    pub fn merge(&mut self, other: &PipelineCounters) {
        self.received = self.received.saturating_add(other.received);
        self.forwarded = self.forwarded.saturating_add(other.forwarded);
        self.marked = self.marked.saturating_add(other.marked);
        self.consumed = self.consumed.saturating_add(other.consumed);
        self.held = self.held.saturating_add(other.held);
        self.non_ip = self.non_ip.saturating_add(other.non_ip);
        self.cut_by_capture = self.cut_by_capture.saturating_add(other.cut_by_capture);
        self.dropped.merge(&other.dropped);
        self.malformed.merge(&other.malformed);
    }
}

/// The first step of every batch: parses each packet in place, gives it
/// its first verdict (`Forward(default_egress)`, or for a frame that does
/// not parse, a drop or a pass by the [`MalformedPolicy`]) and counts
/// `received`, `non_ip`, `cut_by_capture` and the malformed reasons.
pub fn parse_batch(cfg: &PipelineConfig, batch: &mut Batch, c: &mut PipelineCounters) {
    c.received = c.received.saturating_add(batch.len() as u64);
    for p in batch.packets_mut() {
        // In place, with the length on the wire: an IP length past a frame
        // the capture did not cut is a lie, malformed; past one it cut
        // (`caplen < len`), the datagram is counted `cut_by_capture`.
        match p.parse_in_place() {
            Ok(()) => {
                match p.parsed.as_ref() {
                    Some(x) if x.is_ip() => {
                        if x.truncated {
                            c.cut_by_capture = c.cut_by_capture.saturating_add(1);
                        }
                    }
                    _ => c.non_ip = c.non_ip.saturating_add(1),
                }
                p.malformed = None;
                p.verdict = Verdict::Forward(cfg.default_egress);
            }
            Err(m) => {
                c.malformed.record(m);
                p.malformed = Some(m);
                p.verdict = match cfg.malformed {
                    MalformedPolicy::Drop => Verdict::Drop(DropReason::Malformed(m)),
                    MalformedPolicy::Pass => Verdict::Forward(cfg.default_egress),
                };
            }
        }
    }
}

/// The last step of every batch: counts each packet's final verdict
/// (`forwarded`, `marked`, `dropped` by reason, `consumed`, `held`), which
/// keeps `received == forwarded + consumed + dropped + held`.
///
/// Without a branch per packet: verdicts of a mixed batch (forwarded,
/// marked, dropped by the fair-share check or Blue's coin) alternate at
/// random, and a `match` per packet compiled to a jump whose target the
/// predictor misses about as often as the outcome changes (measured with
/// `router_cg`: this loop took 7 ns a packet on the bench's mix, 3 ns
/// without the branch). Each packet adds 0 or 1 to every tally instead,
/// and a drop's reason picks the counter its 1 goes to (a packet that is
/// not dropped adds its 1 to a spare counter past the reasons); the
/// batch's tallies are then added to the counters.
pub fn count_verdicts(batch: &Batch, c: &mut PipelineCounters) {
    let (mut forwarded, mut marked, mut consumed, mut held) = (0u64, 0u64, 0u64, 0u64);
    // One counter per reason, and one more that every packet not dropped
    // adds its 1 to.
    let mut drops = [0u32; DropReason::COUNT + 1];
    for p in batch.packets() {
        let v = p.verdict;
        forwarded += u64::from(v.is_forwarded());
        marked += u64::from(matches!(v, Verdict::Mark(_)));
        consumed += u64::from(v == Verdict::Consumed);
        held += u64::from(v == Verdict::Held);
        let reason = match v {
            Verdict::Drop(r) => Some(r),
            _ => None,
        };
        let i = reason.map_or(DropReason::COUNT, DropReason::index);
        if let Some(d) = drops.get_mut(i) {
            *d += 1;
        }
    }
    c.forwarded = c.forwarded.saturating_add(forwarded);
    c.marked = c.marked.saturating_add(marked);
    c.consumed = c.consumed.saturating_add(consumed);
    c.held = c.held.saturating_add(held);
    c.dropped.add_counts(&drops);
}

/// A harness for stages in any order: parse -> stages -> counters. Tests
/// and benches of single stages use it; the router's fixed chain is
/// [`crate::chain::Chain`].
pub struct Pipeline {
    config: PipelineConfig,
    stages: Vec<Box<dyn Stage>>,
    counters: PipelineCounters,
}

impl fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.stages.iter().map(|s| s.name()).collect();
        f.debug_struct("Pipeline")
            .field("config", &self.config)
            .field("stages", &names)
            .field("counters", &self.counters)
            .finish()
    }
}

impl Pipeline {
    /// A pipeline with no stage (parse and count only).
    pub fn new(config: PipelineConfig) -> Self {
        Pipeline {
            config,
            stages: Vec::new(),
            counters: PipelineCounters::default(),
        }
    }

    /// Appends a stage (stages run in the order they were added).
    pub fn with_stage(mut self, stage: impl Stage + 'static) -> Self {
        self.push_stage(Box::new(stage));
        self
    }

    /// Appends a boxed stage.
    pub fn push_stage(&mut self, stage: Box<dyn Stage>) {
        self.stages.push(stage);
    }

    /// The settings.
    pub fn config(&self) -> &PipelineConfig {
        &self.config
    }

    /// The counters so far.
    pub fn counters(&self) -> &PipelineCounters {
        &self.counters
    }

    /// The first stage of type `T`.
    pub fn stage<T: Stage + 'static>(&self) -> Option<&T> {
        self.stages.iter().find_map(|s| s.as_any().downcast_ref())
    }

    /// The first stage of type `T`, writable.
    pub fn stage_mut<T: Stage + 'static>(&mut self) -> Option<&mut T> {
        self.stages
            .iter_mut()
            .find_map(|s| s.as_any_mut().downcast_mut())
    }

    /// Parses, runs every stage over, and counts one batch. The batch keeps
    /// its verdicts for the caller (tx); clear it before refilling.
    pub fn process(&mut self, batch: &mut Batch, now: Timestamp) {
        parse_batch(&self.config, batch, &mut self.counters);
        for s in &mut self.stages {
            s.process(batch, now);
        }
        count_verdicts(batch, &mut self.counters);
    }

    /// Tells every stage the input has ended at `now`.
    pub fn finish(&mut self, now: Timestamp) {
        for s in &mut self.stages {
            s.finish(now);
        }
    }

    /// Runs every remaining record of `reader` through the pipeline in
    /// batches, `now` being the latest capture time in each batch. Does not
    /// call [`finish`](Self::finish). Returns the latest time seen, or the
    /// capture's fault (records before it were processed).
    pub fn run_capture(
        &mut self,
        reader: &mut CaptureReader,
        batch: &mut Batch,
    ) -> Result<Option<Timestamp>, CaptureError> {
        let mut latest: Option<Timestamp> = None;
        loop {
            batch.clear();
            let filled = reader.fill_batch(batch);
            if !batch.is_empty() {
                let now = batch.latest_ts().unwrap_or_default();
                let now = latest.map_or(now, |l| l.max(now));
                latest = Some(now);
                self.process(batch, now);
            }
            match filled {
                Ok(0) => return Ok(latest),
                Ok(_) => {}
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{LinkType, Malformed};

    /// Ethernet + IPv4 + UDP 10.0.0.1:1000 -> 10.0.0.2:2000, 4 payload bytes.
    fn udp_frame() -> Vec<u8> {
        use crate::wire::build::{self, IpHeader};
        let ip = IpHeader::v4([10, 0, 0, 1], [10, 0, 0, 2], build::PROTO_UDP);
        build::udp_frame(
            [0, 1, 2, 3, 4, 5],
            [6, 7, 8, 9, 10, 11],
            &ip,
            1000,
            2000,
            &[1, 2, 3, 4],
        )
    }

    #[derive(Debug, Default)]
    struct DropOdd {
        seen: u64,
    }

    impl Stage for DropOdd {
        fn name(&self) -> &'static str {
            "drop_odd"
        }
        fn process(&mut self, batch: &mut Batch, _now: Timestamp) {
            for p in batch.packets_mut().iter_mut().filter(|p| p.is_live()) {
                self.seen += 1;
                if self.seen % 2 == 1 {
                    p.drop_for(DropReason::Loop);
                } else if self.seen.is_multiple_of(4) {
                    p.mark();
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

    /// The batch tally equals counting each packet's verdict on its own
    /// ([`PipelineCounters::count_verdict`]), for every kind of verdict and
    /// every drop reason in random order, and saturates as it does.
    #[test]
    fn batch_tally_equals_counting_each_verdict() {
        let reasons: Vec<DropReason> = DropReason::all().collect();
        let mut kinds = vec![
            Verdict::Forward(PortSet::single(1)),
            Verdict::Forward(PortSet::EMPTY),
            Verdict::Mark(PortSet::single(2)),
            Verdict::Consumed,
            Verdict::Held,
        ];
        kinds.extend(reasons.iter().map(|&r| Verdict::Drop(r)));
        let frame = udp_frame();
        let mut batched = PipelineCounters::default();
        let mut reference = PipelineCounters::default();
        let mut s = 5u64;
        let mut b = Batch::new();
        for round in 0..300 {
            b.clear();
            // Batches of every length, the empty one included.
            for _ in 0..round % (BATCH_SIZE + 1) {
                b.push(Timestamp::ZERO, 46, LinkType::Ethernet, &frame);
            }
            for p in b.packets_mut() {
                let k = kernels::splitmix64(&mut s) % kinds.len() as u64;
                p.verdict = kinds[k as usize];
                reference.count_verdict(p.verdict);
            }
            count_verdicts(&b, &mut batched);
            assert_eq!(batched, reference, "round {round}");
        }
        assert!(reasons.iter().all(|&r| reference.dropped.get(r) > 0));
        assert!(reference.consumed > 0 && reference.held > 0 && reference.marked > 0);
        // Near the top, the tallies saturate as single counts do.
        for c in [&mut batched, &mut reference] {
            c.forwarded = u64::MAX - 1;
            c.dropped.record_n(DropReason::Loop, u64::MAX - 1);
        }
        b.clear();
        for _ in 0..4 {
            b.push(Timestamp::ZERO, 46, LinkType::Ethernet, &frame);
        }
        for (i, p) in b.packets_mut().iter_mut().enumerate() {
            p.verdict = if i % 2 == 0 {
                Verdict::Forward(PortSet::single(0))
            } else {
                Verdict::Drop(DropReason::Loop)
            };
            reference.count_verdict(p.verdict);
        }
        count_verdicts(&b, &mut batched);
        assert_eq!(batched, reference);
        assert_eq!(batched.forwarded, u64::MAX);
        assert_eq!(batched.dropped.get(DropReason::Loop), u64::MAX);
    }

    #[test]
    fn drop_reason_indices_are_dense() {
        let all: Vec<DropReason> = DropReason::all().collect();
        assert_eq!(all.len(), DropReason::COUNT);
        for (i, r) in all.iter().enumerate() {
            assert_eq!(r.index(), i, "{r}");
        }
    }

    #[test]
    fn batch_reuses_buffers() {
        let mut b = Batch::new();
        let frame = udp_frame();
        for _ in 0..BATCH_SIZE {
            assert!(b.push(Timestamp::ZERO, 46, LinkType::Ethernet, &frame));
        }
        assert!(b.is_full());
        assert!(!b.push(Timestamp::ZERO, 46, LinkType::Ethernet, &frame));
        let ptrs: Vec<*const u8> = b.packets().iter().map(|p| p.data().as_ptr()).collect();
        b.clear();
        for _ in 0..BATCH_SIZE {
            b.push(Timestamp::ZERO, 46, LinkType::Ethernet, &frame);
        }
        let again: Vec<*const u8> = b.packets().iter().map(|p| p.data().as_ptr()).collect();
        assert_eq!(ptrs, again);
    }

    #[test]
    fn verdicts_are_counted_and_balance() {
        let mut p = Pipeline::new(PipelineConfig::default()).with_stage(DropOdd::default());
        let mut b = Batch::new();
        let frame = udp_frame();
        for i in 0..10u64 {
            b.push(Timestamp::from_nanos(i), 46, LinkType::Ethernet, &frame);
        }
        b.push(Timestamp::from_nanos(10), 3, LinkType::Ethernet, &[1, 2, 3]);
        p.process(&mut b, Timestamp::from_nanos(10));
        let c = p.counters();
        assert_eq!(c.received, 11);
        assert_eq!(c.dropped.get(DropReason::Loop), 5);
        assert_eq!(
            c.dropped.get(DropReason::Malformed(Malformed::TruncatedL2)),
            1
        );
        assert_eq!(c.forwarded, 5);
        assert_eq!(c.marked, 2);
        assert!(c.is_consistent());
        assert_eq!(p.stage::<DropOdd>().map(|s| s.seen), Some(10));
        let nz: Vec<_> = c.dropped.nonzero().collect();
        assert_eq!(nz.len(), 2);
    }

    #[test]
    fn frames_cut_by_the_capture_are_counted_not_malformed() {
        let mut p = Pipeline::new(PipelineConfig::default());
        let mut b = Batch::new();
        let frame = udp_frame();
        // Whole; cut after the UDP ports (a 38-byte snapshot); cut before
        // them.
        b.push(Timestamp::ZERO, 46, LinkType::Ethernet, &frame);
        b.push(Timestamp::ZERO, 46, LinkType::Ethernet, &frame[..38]);
        b.push(Timestamp::ZERO, 46, LinkType::Ethernet, &frame[..36]);
        p.process(&mut b, Timestamp::ZERO);
        let c = p.counters();
        assert_eq!(c.cut_by_capture, 1);
        assert_eq!(c.forwarded, 2);
        assert_eq!(c.malformed.get(Malformed::TruncatedL4Header), 1);
        assert!(c.is_consistent());
    }

    /// A frame whose IP length says more than arrived on the wire
    /// (`caplen == len`, as every live frame is) was not cut by a capture:
    /// its length field lies, and it is malformed (tcpdump:
    /// `truncated-ip - N bytes missing`), not `cut_by_capture`.
    #[test]
    fn a_frame_shorter_than_its_ip_length_is_malformed_not_cut() {
        let mut p = Pipeline::new(PipelineConfig::default());
        let mut b = Batch::new();
        let frame = udp_frame();
        b.push(Timestamp::ZERO, 38, LinkType::Ethernet, &frame[..38]);
        p.process(&mut b, Timestamp::ZERO);
        let c = p.counters();
        assert_eq!(c.cut_by_capture, 0);
        assert_eq!(c.forwarded, 0);
        assert_eq!(c.malformed.get(Malformed::Ipv4TotalLengthBeyondFrame), 1);
        assert_eq!(
            c.dropped
                .get(DropReason::Malformed(Malformed::Ipv4TotalLengthBeyondFrame)),
            1
        );
        assert!(c.is_consistent());
    }

    #[test]
    fn malformed_pass_forwards_but_counts() {
        let cfg = PipelineConfig {
            malformed: MalformedPolicy::Pass,
            ..PipelineConfig::default()
        };
        let mut p = Pipeline::new(cfg).with_stage(DropOdd::default());
        let mut b = Batch::new();
        b.push(Timestamp::ZERO, 3, LinkType::Ethernet, &[1, 2, 3]);
        p.process(&mut b, Timestamp::ZERO);
        let c = p.counters();
        assert_eq!(c.malformed.get(Malformed::TruncatedL2), 1);
        assert_eq!(c.dropped.total() + c.forwarded, 1);
        assert!(c.is_consistent());
    }

    #[test]
    fn port_set() {
        let s = PortSet::single(3).union(PortSet::single(63));
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![3, 63]);
        assert_eq!(s.len(), 2);
        assert!(PortSet::single(64).is_empty());
    }
}
