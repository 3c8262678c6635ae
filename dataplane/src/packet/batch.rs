//! The batch: up to [`BATCH_SIZE`] packet slots whose buffers are reused.
//!
//! A slot's frame is either its own (a reused buffer, filled by
//! [`Batch::push_from`] or [`Batch::push_with`]) or lent: a region of a
//! backend's memory (a packet ring's block, the frames of the memory
//! backend) the chain reads and writes where it lies, handed in by
//! [`Batch::lend`]. The slot always holds a pointer and a length to its
//! frame (into its own buffer when it owns the frame), so
//! [`Packet::data`] and [`Packet::data_mut`] are the same two loads
//! either way, and the stages do not know which it is. What the stages
//! decide (verdict, ports, offsets, Icarus edits) stays in the slot beside
//! the frame.
//!
//! A lent frame comes with a [`Lease`]: a clone of the reference count of
//! the memory it lies in. The memory stays mapped while any clone lives,
//! and the backend touches the region again (gives a ring block back to
//! the kernel, rewrites its frames) only once it holds the last one
//! (`Arc::get_mut`). A slot drops its lease when the batch is
//! [cleared](Batch::clear) or the slot refilled, and a copy of a slot
//! ([`Clone`]) owns its frame: no packet can read a region its lender has
//! taken back.

use std::ptr::NonNull;
use std::sync::Arc;

use super::{DropReason, PortSet, Verdict};
use crate::clock::Timestamp;
use crate::wire::{LinkType, Malformed, Parsed, parse_into};

/// The most packets a [`Batch`] holds.
pub const BATCH_SIZE: usize = 32;

/// Initial capacity of each slot's buffer (a full Ethernet frame with tags).
const SLOT_CAPACITY: usize = 2048;

/// What keeps a lent frame's memory valid (see the module docs): the
/// lender's reference-counted memory, of any type.
pub type Lease = Arc<dyn std::any::Any + Send + Sync>;

/// One packet slot of a [`Batch`]: the frame (in a reused buffer, or lent
/// by the backend), what the capture or interface said about it, the parse
/// summary and the verdict.
pub struct Packet {
    /// The frame's first byte: into `buf` when the slot owns the frame,
    /// into the lender's memory when it is lent.
    ptr: NonNull<u8>,
    /// The frame's length.
    len: usize,
    /// `Some` while the frame is lent: keeps its memory.
    lease: Option<Lease>,
    /// The slot's own buffer (reused).
    buf: Vec<u8>,
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

// SAFETY: `ptr` points into the slot's own buffer (a `Vec<u8>`, Send and
// Sync) or into memory the packet's lease keeps alive, which is `Send +
// Sync` and which no one but this packet reads or writes while the lease
// is out (`Batch::lend`'s contract). Access goes through `&self` (reads)
// and `&mut self` (writes) only, as for a `Vec<u8>`.
unsafe impl Send for Packet {}
// SAFETY: as for `Send`.
unsafe impl Sync for Packet {}

impl std::fmt::Debug for Packet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packet")
            .field("data", &self.data())
            .field("lent", &self.is_lent())
            .field("ts", &self.ts)
            .field("orig_len", &self.orig_len)
            .field("link_type", &self.link_type)
            .field("ingress", &self.ingress)
            .field("parsed", &self.parsed)
            .field("malformed", &self.malformed)
            .field("verdict", &self.verdict)
            .field("to_ingress", &self.to_ingress)
            .field("icarus_pending", &self.icarus_pending)
            .finish()
    }
}

impl Clone for Packet {
    /// A copy that owns its frame (a lent one is copied).
    fn clone(&self) -> Self {
        let mut buf = Vec::with_capacity(self.buf.capacity().max(self.len));
        buf.extend_from_slice(self.data());
        let mut p = Packet {
            ptr: NonNull::dangling(),
            len: 0,
            lease: None,
            buf,
            ts: self.ts,
            orig_len: self.orig_len,
            link_type: self.link_type,
            ingress: self.ingress,
            parsed: self.parsed,
            malformed: self.malformed,
            verdict: self.verdict,
            to_ingress: self.to_ingress,
            icarus_pending: self.icarus_pending,
        };
        p.own();
        p
    }
}

impl Packet {
    fn empty() -> Self {
        let mut p = Packet {
            ptr: NonNull::dangling(),
            len: 0,
            lease: None,
            buf: Vec::with_capacity(SLOT_CAPACITY),
            ts: Timestamp::ZERO,
            orig_len: 0,
            link_type: LinkType::Ethernet,
            ingress: 0,
            parsed: None,
            malformed: None,
            verdict: Verdict::Forward(PortSet::EMPTY),
            to_ingress: false,
            icarus_pending: 0,
        };
        p.own();
        p
    }

    /// Makes the slot's own buffer its frame (ending a loan): called after
    /// every change to `buf`, so that `ptr` and `len` describe it.
    #[inline]
    fn own(&mut self) {
        self.lease = None;
        self.len = self.buf.len();
        self.ptr = NonNull::from(self.buf.as_mut_slice()).cast();
    }

    /// Sets what is known of a frame just put in the slot (when and where
    /// it arrived) and clears what the stages decide of it.
    #[inline]
    fn arrived(&mut self, ts: Timestamp, orig_len: u32, link_type: LinkType, ingress: u8) {
        self.ts = ts;
        self.orig_len = orig_len;
        self.link_type = link_type;
        self.ingress = ingress;
        self.parsed = None;
        self.malformed = None;
        self.verdict = Verdict::Forward(PortSet::EMPTY);
        self.to_ingress = false;
        self.icarus_pending = 0;
    }

    /// Whether the frame is lent by the backend rather than held in the
    /// slot's own buffer.
    #[inline]
    pub fn is_lent(&self) -> bool {
        self.lease.is_some()
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
        // SAFETY: `ptr .. ptr + len` is the slot's own buffer's contents
        // (`own` set them after its last change), or a lent region, valid
        // for reads while the lease the slot holds lives and read or
        // written by no one else (`Batch::lend`'s contract); the borrow of
        // `self` keeps both.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The captured bytes, writable (ECN marking, in-packet filters).
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `data`; the region is also valid for writes (the
        // own buffer, or `Batch::lend`'s contract), and `&mut self` makes
        // this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Moves the frame into `buf` and leaves the slot with an empty frame:
    /// the egress stage keeps the frame of a packet's last copy in its
    /// port's queue this way. An owned frame's buffer is exchanged with
    /// `buf` (the slot keeps the queue's empty buffer); a lent frame must
    /// outlive its loan in the queue, so it is copied into `buf`. Returns
    /// whether it copied.
    #[inline]
    pub(crate) fn swap_data(&mut self, buf: &mut Vec<u8>) -> bool {
        let lent = self.is_lent();
        if lent {
            copy_frame(buf, self.data());
        } else {
            core::mem::swap(&mut self.buf, buf);
        }
        self.buf.clear();
        self.own();
        lent
    }

    /// Parses the frame into the slot's summary in place (written into the
    /// slot, not copied there), with the length on the wire: an IP length
    /// past a frame the capture did not cut is malformed, past one it cut
    /// the summary is flagged `truncated`.
    #[inline]
    pub(crate) fn parse_in_place(&mut self) -> Result<(), Malformed> {
        self.parse_with(Some(self.orig_len as usize))
    }

    /// Parses the frame into `parsed`, `orig_len` bytes on the wire.
    #[inline]
    fn parse_with(&mut self, orig_len: Option<usize>) -> Result<(), Malformed> {
        // SAFETY: as in `data`; `parsed` is a field apart from the frame.
        let data = unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) };
        parse_into(self.link_type, data, orig_len, &mut self.parsed)
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

/// Copies `src` into `dst` (emptied first). A frame of 16 to 64 bytes
/// (the commonest in a queue: small packets) is moved as two overlapping
/// fixed-size blocks the compiler writes inline; others with
/// `extend_from_slice`.
#[inline(always)]
fn copy_frame(dst: &mut Vec<u8>, src: &[u8]) {
    dst.clear();
    if !(copy_ends::<32>(dst, src) || copy_ends::<16>(dst, src)) {
        dst.extend_from_slice(src);
    }
}

/// Copies `src` into the empty `dst` as its first and its last `N` bytes
/// (two blocks that meet or overlap) when `N <= src.len() <= 2 N` and
/// `dst` has room for `2 N` bytes; else copies nothing and says so.
#[inline(always)]
fn copy_ends<const N: usize>(dst: &mut Vec<u8>, src: &[u8]) -> bool {
    let n = src.len();
    let (Some(a), Some(b)) = (src.first_chunk::<N>(), src.last_chunk::<N>()) else {
        return false;
    };
    if n > 2 * N || dst.capacity() < 2 * N || !dst.is_empty() {
        return false;
    }
    let p = dst.as_mut_ptr();
    // SAFETY: `dst` has room for `2 N >= n` bytes; the writes cover
    // `0..N` and `n - N..n` (`n >= N`), both inside it, and together
    // `0..n` (they meet or overlap, as `n <= 2 N`), so every byte is
    // written before `set_len` makes it part of the vector.
    unsafe {
        p.cast::<[u8; N]>().write_unaligned(*a);
        p.add(n - N).cast::<[u8; N]>().write_unaligned(*b);
        dst.set_len(n);
    }
    true
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

    /// Empties the batch, keeping its buffers; ends every loan (the
    /// slots drop their leases, see the module docs).
    #[inline]
    pub fn clear(&mut self) {
        for p in &mut self.slots[..self.len] {
            if p.lease.is_some() {
                p.own();
            }
        }
        self.len = 0;
    }

    /// Lends a frame to the next slot: the chain will read and write it
    /// where it lies. `false` (nothing lent) when the batch is full. The
    /// slot keeps a clone of `lease` until the batch is cleared or the
    /// slot refilled.
    ///
    /// # Safety
    /// `frame` must be valid for reads and writes of its length for as
    /// long as any clone of `lease` lives, and must not be read or written
    /// but through this slot (nor lent to another) while the slot's clone
    /// lives: the lender takes the region back only once it holds the last
    /// clone of `lease` (`Arc::get_mut`).
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn lend(
        &mut self,
        ts: Timestamp,
        orig_len: u32,
        link_type: LinkType,
        ingress: u8,
        lease: &Lease,
        frame: NonNull<[u8]>,
    ) -> bool {
        let Some(slot) = self.slots.get_mut(self.len) else {
            return false;
        };
        slot.lease = Some(Arc::clone(lease));
        slot.ptr = frame.cast();
        slot.len = frame.len();
        slot.arrived(ts, orig_len, link_type, ingress);
        self.len += 1;
        true
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
        slot.buf.clear();
        slot.buf.extend_from_slice(data);
        slot.own();
        slot.arrived(ts, orig_len, link_type, ingress);
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
        slot.buf.clear();
        let built = build(&mut slot.buf);
        slot.own();
        if !built {
            return false;
        }
        slot.ts = ts;
        slot.orig_len = u32::try_from(slot.len).unwrap_or(u32::MAX);
        slot.link_type = LinkType::Ethernet;
        slot.ingress = ingress;
        slot.malformed = slot.parse_with(None).err();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Lends `frames[i]` to the next slot of `b`.
    fn lend(b: &mut Batch, lease: &Lease, region: &mut [u8]) {
        let frame = NonNull::from(region);
        // SAFETY: `region` is borrowed from the buffer the test keeps
        // (`lease` holds a clone of it) and not touched while `b` holds
        // it: each test clears `b` before reading its buffer again.
        assert!(unsafe { b.lend(Timestamp::ZERO, 4, LinkType::Ethernet, 1, lease, frame) });
    }

    #[test]
    fn lent_frame_is_read_and_written_in_place() {
        let mut mem = Arc::new(vec![1u8, 2, 3, 4, 5, 6, 7, 8]);
        let base = Arc::get_mut(&mut mem).unwrap().as_mut_ptr();
        let lease: Lease = mem.clone();
        let mut b = Batch::new();
        // SAFETY: within the 8 bytes `mem` holds; see `lend`.
        let (lo, hi) = unsafe {
            (
                std::slice::from_raw_parts_mut(base, 4),
                std::slice::from_raw_parts_mut(base.add(4), 4),
            )
        };
        lend(&mut b, &lease, lo);
        lend(&mut b, &lease, hi);
        drop(lease);
        assert_eq!(Arc::strong_count(&mem), 3, "one clone per lent slot");
        let p = &mut b.packets_mut()[1];
        assert!(p.is_lent());
        assert_eq!(p.data().as_ptr(), base.wrapping_add(4).cast_const());
        p.data_mut()[0] = 0x55;
        // A copy owns its frame.
        let c = b.packets()[1].clone();
        assert!(!c.is_lent());
        assert_ne!(c.data().as_ptr(), b.packets()[1].data().as_ptr());
        assert_eq!(c.data(), &[0x55, 6, 7, 8]);
        b.clear();
        assert_eq!(Arc::strong_count(&mem), 1, "cleared: every loan ended");
        assert_eq!(mem.as_slice(), &[1, 2, 3, 4, 0x55, 6, 7, 8]);
    }

    #[test]
    fn copy_frame_copies_every_length() {
        let src: Vec<u8> = (0..200u8).collect();
        for n in 0..=200 {
            for cap in [0, 63, 64, 2048] {
                let mut dst = Vec::with_capacity(cap);
                dst.extend_from_slice(&[0xa5; 3][..cap.min(3)]);
                copy_frame(&mut dst, &src[..n]);
                assert_eq!(dst, &src[..n], "{n} bytes, capacity {cap}");
            }
        }
    }

    #[test]
    fn swap_data_copies_a_lent_frame_and_moves_an_owned_one() {
        let mut mem = Arc::new(vec![9u8; 6]);
        let base = Arc::get_mut(&mut mem).unwrap().as_mut_ptr();
        let lease: Lease = mem.clone();
        let mut b = Batch::new();
        // SAFETY: the 6 bytes `mem` holds; see `lend`.
        lend(&mut b, &lease, unsafe {
            std::slice::from_raw_parts_mut(base, 6)
        });
        b.push(Timestamp::ZERO, 3, LinkType::Ethernet, &[7, 7, 7]);
        let mut q = Vec::with_capacity(64);
        assert!(b.packets_mut()[0].swap_data(&mut q), "lent: copied");
        assert_eq!(q, [9; 6]);
        let p = &b.packets()[0];
        assert!(!p.is_lent());
        assert!(p.data().is_empty());
        let mut q2 = Vec::with_capacity(64);
        let owned_at = b.packets()[1].data().as_ptr();
        assert!(!b.packets_mut()[1].swap_data(&mut q2), "owned: moved");
        assert_eq!((q2.as_ptr(), q2.as_slice()), (owned_at, &[7u8, 7, 7][..]));
        assert!(b.packets()[1].data().is_empty());
        drop(lease);
        assert_eq!(
            Arc::strong_count(&mem),
            1,
            "the slot's loan ended with the copy"
        );
    }
}
