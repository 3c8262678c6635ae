//! The batch: up to [`BATCH_SIZE`] packet slots whose buffers are reused.

use super::{DropReason, PortSet, Verdict};
use crate::clock::Timestamp;
use crate::wire::{LinkType, Malformed, Parsed, parse_into};

/// The most packets a [`Batch`] holds.
pub const BATCH_SIZE: usize = 32;

/// Initial capacity of each slot's buffer (a full Ethernet frame with tags).
const SLOT_CAPACITY: usize = 2048;

/// One packet slot of a [`Batch`]: the frame (in a reused buffer), what the
/// capture or interface said about it, the parse summary and the verdict.
#[derive(Debug, Clone)]
pub struct Packet {
    data: Vec<u8>,
    /// Arrival time (capture time on replay).
    pub ts: Timestamp,
    /// Length on the wire (may exceed the captured bytes).
    pub orig_len: u32,
    /// Link type the frame starts with.
    pub link_type: LinkType,
    /// Ingress port.
    pub ingress: u8,
    /// Parse summary; `None` before parsing and for malformed frames.
    pub parsed: Option<Parsed>,
    /// Why the frame did not parse, if it did not.
    pub malformed: Option<Malformed>,
    /// Current verdict.
    pub verdict: Verdict,
    /// The packet may leave by its ingress port: a routed packet whose
    /// next hop is on the port it came in on (the forwarding stage sets
    /// it). Any other copy back out of its ingress port is a hairpin, not
    /// sent.
    pub to_ingress: bool,
    /// Bytes of an Icarus option still to be inserted (0: none). The
    /// Icarus stage checks an insertion edge's packets but leaves their
    /// frames as they came; the egress stage inserts the option into each
    /// copy that leaves by a port that keeps it, and a copy leaving by a
    /// stripping port goes out as it came (see [`crate::stage::icarus`]).
    /// The MTU check adds these bytes (the packet as it leaves); stages
    /// that count a flow's bytes (heavy flows) count what arrived.
    pub icarus_pending: u8,
}

impl Packet {
    fn empty() -> Self {
        Packet {
            data: Vec::with_capacity(SLOT_CAPACITY),
            ts: Timestamp::ZERO,
            orig_len: 0,
            link_type: LinkType::Ethernet,
            ingress: 0,
            parsed: None,
            malformed: None,
            verdict: Verdict::Forward(PortSet::EMPTY),
            to_ingress: false,
            icarus_pending: 0,
        }
    }

    /// The ingress port as a mask of the ports a copy may not leave by:
    /// empty when [`Packet::to_ingress`] is set or the frame has no ingress
    /// port ([`NO_INGRESS`](super::NO_INGRESS)).
    #[inline]
    pub fn ingress_mask(&self) -> u64 {
        if self.to_ingress {
            0
        } else {
            PortSet::single(self.ingress).mask()
        }
    }

    /// The captured bytes.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// The captured bytes, writable (ECN marking, in-packet filters).
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.data
    }

    /// Exchanges the frame's buffer with `buf`: the egress stage moves the
    /// frame of a packet's last copy into its port's queue instead of
    /// copying it, and leaves the queue's empty buffer in the slot.
    #[inline]
    pub(crate) fn swap_data(&mut self, buf: &mut Vec<u8>) {
        core::mem::swap(&mut self.data, buf);
    }

    /// Parses the frame into the slot's summary in place (written into the
    /// slot, not copied there), with the length on the wire: an IP length
    /// past a frame the capture did not cut is malformed, past one it cut
    /// the summary is flagged `truncated`.
    #[inline]
    pub(crate) fn parse_in_place(&mut self) -> Result<(), Malformed> {
        let orig_len = Some(self.orig_len as usize);
        parse_into(self.link_type, &self.data, orig_len, &mut self.parsed)
    }

    /// Whether the packet is still to be forwarded (stages skip dropped ones).
    #[inline]
    pub fn is_live(&self) -> bool {
        self.verdict.is_forwarded()
    }

    /// Drops the packet for `reason` (the first drop wins).
    #[inline]
    pub fn drop_for(&mut self, reason: DropReason) {
        if self.is_live() {
            self.verdict = Verdict::Drop(reason);
        }
    }

    /// Takes `port` out of the packet's egress ports (an egress queue
    /// refused it there); drops the packet for `reason` when no port is
    /// left. A mark stays a mark.
    #[inline]
    pub fn drop_port(&mut self, port: u8, reason: DropReason) {
        let rest = match self.verdict {
            Verdict::Forward(ps) | Verdict::Mark(ps) => {
                PortSet::from_mask(ps.mask() & !PortSet::single(port).mask())
            }
            _ => return,
        };
        self.verdict = match self.verdict {
            _ if rest.is_empty() => Verdict::Drop(reason),
            Verdict::Mark(_) => Verdict::Mark(rest),
            _ => Verdict::Forward(rest),
        };
    }

    /// Turns a forward into a mark to the same ports (no effect on a drop).
    #[inline]
    pub fn mark(&mut self) {
        if let Verdict::Forward(p) = self.verdict {
            self.verdict = Verdict::Mark(p);
        }
    }
}

/// Up to [`BATCH_SIZE`] packets with reusable buffers.
#[derive(Debug, Clone)]
pub struct Batch {
    slots: Vec<Packet>,
    len: usize,
}

impl Default for Batch {
    fn default() -> Self {
        Self::new()
    }
}

impl Batch {
    /// An empty batch with all its buffers allocated.
    pub fn new() -> Self {
        Batch {
            slots: (0..BATCH_SIZE).map(|_| Packet::empty()).collect(),
            len: 0,
        }
    }

    /// Number of packets.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the batch holds no packet.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the batch holds [`BATCH_SIZE`] packets.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.len == BATCH_SIZE
    }

    /// Empties the batch, keeping its buffers.
    #[inline]
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Copies a frame into the next slot; `false` (and nothing copied) when
    /// the batch is full. Ingress port 0.
    #[inline]
    pub fn push(&mut self, ts: Timestamp, orig_len: u32, link_type: LinkType, data: &[u8]) -> bool {
        self.push_from(ts, orig_len, link_type, 0, data)
    }

    /// Like [`push`](Self::push) with an ingress port.
    #[inline]
    pub fn push_from(
        &mut self,
        ts: Timestamp,
        orig_len: u32,
        link_type: LinkType,
        ingress: u8,
        data: &[u8],
    ) -> bool {
        let Some(slot) = self.slots.get_mut(self.len) else {
            return false;
        };
        slot.data.clear();
        slot.data.extend_from_slice(data);
        slot.ts = ts;
        slot.orig_len = orig_len;
        slot.link_type = link_type;
        slot.ingress = ingress;
        slot.parsed = None;
        slot.malformed = None;
        slot.verdict = Verdict::Forward(PortSet::EMPTY);
        slot.to_ingress = false;
        slot.icarus_pending = 0;
        self.len += 1;
        true
    }

    /// Builds a frame in the next slot: `build` writes it into the slot's
    /// (cleared) buffer and says whether it made one. The frame is then
    /// parsed and given the verdict `Forward(to)`. `false` (nothing added)
    /// when the batch is full or `build` made nothing.
    pub fn push_with(
        &mut self,
        ts: Timestamp,
        ingress: u8,
        to: PortSet,
        build: impl FnOnce(&mut Vec<u8>) -> bool,
    ) -> bool {
        let Some(slot) = self.slots.get_mut(self.len) else {
            return false;
        };
        slot.data.clear();
        if !build(&mut slot.data) {
            return false;
        }
        slot.ts = ts;
        slot.orig_len = u32::try_from(slot.data.len()).unwrap_or(u32::MAX);
        slot.link_type = LinkType::Ethernet;
        slot.ingress = ingress;
        slot.malformed = parse_into(LinkType::Ethernet, &slot.data, None, &mut slot.parsed).err();
        slot.verdict = Verdict::Forward(to);
        slot.to_ingress = false;
        slot.icarus_pending = 0;
        self.len += 1;
        true
    }

    /// The packets.
    #[inline]
    pub fn packets(&self) -> &[Packet] {
        &self.slots[..self.len]
    }

    /// The packets, writable.
    #[inline]
    pub fn packets_mut(&mut self) -> &mut [Packet] {
        &mut self.slots[..self.len]
    }

    /// Time of the latest packet (`None` when empty).
    pub fn latest_ts(&self) -> Option<Timestamp> {
        self.packets().iter().map(|p| p.ts).max()
    }
}
