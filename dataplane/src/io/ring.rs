//! Live ports over Linux packet rings (`TPACKET_V3`): the fast backend
//! beside [`super::socket`] (`[io] backend = "ring"`).
//!
//! Each (worker, interface) socket gets a receive ring the kernel fills
//! without a system call per frame: `PACKET_RX_RING` of
//! [`RingConfig::blocks`] blocks of [`RingConfig::block_bytes`] bytes,
//! mapped into the process. The kernel hands a block over when it is full
//! or when [`RingConfig::block_timeout_ms`] has passed since its first
//! frame (so a quiet port does not hold a batch back). The frames are lent
//! to the worker's batch where the kernel put them ([`Batch::lend`]): the
//! chain reads and writes them in the block, and the egress sends them
//! from there. A block is given back to the kernel (`TP_STATUS_KERNEL`) not
//! when its last frame is read but at the next [`Ports::recv`] on its port
//! after the batch holding its frames was cleared: every lent frame holds
//! a clone of the ring's lease (the reference count of its mapping), and
//! the ring gives blocks back only when it holds the last clone; the
//! mapping is unmapped when the last clone is dropped, so a batch never
//! reads a block the kernel has taken back or memory no longer mapped.
//! While a batch holding frames of a ring is not cleared, that ring lends
//! nothing more; while every other block is held, it reads no further.
//! Transmit is `sendmmsg(2)` by default: copies are gathered per port while
//! a batch is processed and sent with one system call per port and batch
//! ([`Ports::flush`]) on the receive socket, past the qdisc layer
//! (`PACKET_QDISC_BYPASS`). With [`RingConfig::tx_frames`] set, each
//! (worker, interface) gets a second socket with a `PACKET_TX_RING` of
//! that many slots instead ([`TxRing`]): each copy is written into the next
//! free slot and marked, and one `send(2)` per port and batch asks the
//! kernel to send every marked slot. The kernel then builds each buffer
//! around the slot's pages instead of copying the frame in from an iovec,
//! and reads no message headers. Where the kernel refuses the ring, a
//! warning names the option and `sendmmsg` is used. A copy neither path can
//! take (the ring still full after one wait of up to 10 ms per batch, a
//! length the interface refuses) is counted as refused by the kernel
//! (`tx_dropped`).
//!
//! Why `sendmmsg` stays the default: on the lab's veth pairs the ring did
//! not forward more without loss (README, "The live router on the lab").
//! It spent about 9% less of the worker's CPU per 64-byte frame at a fixed
//! rate, but the veth runs the receiving side's softirq (and, in the lab,
//! host B's IP stack) inside the sender's system call, and a frame built
//! around a slot's pages costs the receiver a reallocation to pull its
//! headers, which a frame copied in whole does not.
//!
//! The sockets join the same `PACKET_FANOUT` hash group per interface as
//! the pnet backend's, so a flow lands on one worker. The group is asked
//! to ignore outgoing frames (`PACKET_FANOUT_FLAG_IGNORE_OUTGOING`, Linux
//! 5.x; without it the group delivers frames other sockets send, see
//! [`super::socket`]); each frame's packet type is checked as well, and an
//! outgoing one is counted and dropped.
//!
//! Frames whose VLAN tag the kernel took out of the frame (the ring says
//! so: `TP_STATUS_VLAN_VALID`, with `tp_vlan_tci` and, when
//! `TP_STATUS_VLAN_TPID_VALID`, `tp_vlan_tpid`) get it put back after the
//! MAC addresses, so the router sees the frame as it was on the wire: such
//! a frame is copied into the batch with its tag, not lent, and counted
//! (`rx_copied`). A frame the egress keeps in a port's queue is copied
//! into the queue's buffer, as are a multicast frame's copies beside the
//! first and a copy whose Icarus option is inserted or removed (the egress
//! stage's `frame_copies`); a unicast frame sent at once is written
//! straight from the block into the transmit ring's slot or the
//! `sendmmsg` buffer.
//!
//! Losses the router never saw are read from the kernel
//! ([`kernel_drops`]: `tp_drops`, frames
//! dropped because the ring was full; `tp_freeze_q_cnt`, blocks the kernel
//! found still held) at every [`Ports::refresh_counters`] into each port's
//! counters.
//!
//! The pieces are public for traffic-gen's live sender and receiver:
//! [`RxRing`] (one ring socket), [`TxRing`], and [`send_batch`] (`sendmmsg`
//! with a retry policy of the caller's).
//!
//! Not done: `sendmmsg` sends from buffers of the port's own (the frame is
//! written into one, as into a transmit ring's slot), not from the block
//! the frame lies in.
//!
//! A kernel without `TPACKET_V3`, or a ring it refuses (memory), gives an
//! error naming the socket option ([`PortError::Os`]).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{Ordering, fence};
use std::time::Duration;

use crate::clock::{MonotonicClock, Timestamp};
use crate::io::port::{PortSettings, Ports, RxCounters};
use crate::io::socket::{
    PortError, find_interface, interface_mtu, kernel_drops, packet_socket, poll_readable,
    setsockopt_int, wait_writable,
};
use crate::packet::{Batch, Lease};
use crate::packet::{Transmit, TxFrame};
use crate::wire::LinkType;

/// The size of a receive ring (see the module docs): `[io.ring]` in the
/// router's file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RingConfig {
    /// Bytes per block (a power of two, at least a page).
    pub block_bytes: u32,
    /// Blocks in the ring.
    pub blocks: u32,
    /// A block is handed over this long after its first frame at the
    /// latest, ms.
    pub block_timeout_ms: u32,
    /// Frame slots of each transmit ring (`PACKET_TX_RING`), one per
    /// worker and interface; 0 (the default): transmit with `sendmmsg(2)`
    /// instead (see the module docs for why that is the default).
    pub tx_frames: u32,
}

impl Default for RingConfig {
    /// 16 blocks of 256 KiB (4 MiB, the pnet backend's default socket
    /// buffer), 1 ms; no transmit ring (`sendmmsg`).
    fn default() -> Self {
        RingConfig {
            block_bytes: 256 << 10,
            blocks: 16,
            block_timeout_ms: 1,
            tx_frames: 0,
        }
    }
}

/// Frame slots the ring is sized for (the kernel's `tp_frame_size`; with
/// `TPACKET_V3` frames are packed, so this only sets `tp_frame_nr`).
const FRAME_SIZE: u32 = 2048;

/// The frame header's length, aligned as the kernel places the
/// `sockaddr_ll` after it (`TPACKET_ALIGN(sizeof(struct tpacket3_hdr))`).
const HDR_LEN: usize = (std::mem::size_of::<libc::tpacket3_hdr>() + libc::TPACKET_ALIGNMENT - 1)
    & !(libc::TPACKET_ALIGNMENT - 1);

/// Copies gathered per port before [`Ports::flush`] sends them.
pub const TX_BATCH: usize = 64;

/// Bytes per transmit block: each block holds whole slots.
const TX_BLOCK: usize = 1 << 16;

/// A receive ring's mapping, unmapped when the last holder drops it: the
/// [`Ring`] and every frame it lent hold it (a [`Lease`]).
struct Mapping {
    map: *mut u8,
    len: usize,
}

// SAFETY: the mapping is memory shared with the kernel, not tied to a
// thread; `Mapping` itself only unmaps it (the regions are read and
// written by the ring and the packets it lent them to, under the rules of
// `Ring`).
unsafe impl Send for Mapping {}
// SAFETY: as for `Send`; `&Mapping` gives access to nothing.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `map` and `len` are the mapping made in `open_ring`,
        // unmapped once, here, when no ring or lent frame holds it any more
        // (the last clone of the `Arc` is gone).
        unsafe {
            libc::munmap(self.map.cast(), self.len);
        }
    }
}

/// One mapped receive ring and its read position.
///
/// Blocks read for [`RingPorts`] are not given back to the kernel when
/// their last frame is read but at the next read after every frame lent
/// out of them was given back: `held` counts the blocks from `release`
/// on that are read and still ours (see [`Ring::release_held`]).
struct Ring {
    fd: OwnedFd,
    map: *mut u8,
    /// The mapping's length.
    len: usize,
    /// Holds the mapping (`Arc<Mapping>`); each lent frame holds a clone.
    lease: Lease,
    block_size: usize,
    blocks: usize,
    /// The block being read.
    block: usize,
    /// In that block: the next frame's offset and the frames left;
    /// `None`: the block is not ours yet.
    next: Option<(usize, u32)>,
    /// The first block read and not given back.
    release: usize,
    /// Blocks read to their end and not given back (from `release` on).
    held: usize,
}

// SAFETY: the pointer is into the mapping `lease` holds, used from one
// thread at a time through `&mut self`; the lease is `Send`.
unsafe impl Send for Ring {}

/// A frame as the ring holds it.
struct Slot {
    /// Offset of the frame's first byte in the mapping.
    mac: usize,
    /// Bytes captured.
    snaplen: usize,
    /// Bytes on the wire.
    len: u32,
    status: u32,
    vlan_tci: u16,
    vlan_tpid: u16,
    pkttype: u8,
    /// Kernel receive time, ns since the Unix epoch (`CLOCK_REALTIME`).
    ts_ns: u64,
}

impl Ring {
    /// The block descriptor's status word of block `b`.
    fn status(&self, b: usize) -> *mut u32 {
        // The descriptor is `tpacket_block_desc`: version, offset_to_priv,
        // then `tpacket_hdr_v1` whose first field is `block_status`.
        // SAFETY (of the arithmetic): `b < blocks`, so the block starts
        // inside the mapping; the status word is 8 bytes in.
        self.map.wrapping_add(b * self.block_size + 8).cast()
    }

    /// Gives the kernel back every block read to its end and still held
    /// (see the type's docs), when no frame lent out of the ring is still
    /// out; `false` when one is (a batch filled from this ring was not
    /// cleared), and then nothing is given back.
    fn release_held(&mut self) -> bool {
        if Arc::get_mut(&mut self.lease).is_none() {
            return false;
        }
        while self.held > 0 {
            self.give_back(self.release);
            self.release = (self.release + 1) % self.blocks;
            self.held -= 1;
        }
        true
    }

    /// Hands block `b` back to the kernel.
    fn give_back(&mut self, b: usize) {
        let st = self.status(b);
        fence(Ordering::Release);
        // SAFETY: `st` points at block `b`'s status word inside the
        // mapping; a volatile write is how the ring protocol hands the
        // block back. No frame of the block is read or lent any more: the
        // caller read it to its end and, when it lent frames of it,
        // holds the last clone of the lease.
        unsafe { std::ptr::write_volatile(st, libc::TP_STATUS_KERNEL) };
    }

    /// The next frame, if the kernel has handed a block over. With `hold`,
    /// a block read to its end stays ours until [`release_held`]
    /// (frames of it were lent); without, it is given back at once (the
    /// caller's borrow of the previous frame has ended).
    ///
    /// [`release_held`]: Self::release_held
    fn next(&mut self, hold: bool) -> Option<Slot> {
        loop {
            if let Some((off, left)) = self.next {
                if left > 0 {
                    let base = self.block * self.block_size;
                    let at = base + off;
                    if at + std::mem::size_of::<libc::tpacket3_hdr>() > base + self.block_size {
                        // A header the block cannot hold: give the block
                        // back rather than read past it.
                        self.next = Some((0, 0));
                        continue;
                    }
                    // SAFETY: `at` is inside the mapping and in this block
                    // (checked above), which the kernel handed over
                    // (`TP_STATUS_USER`) and does not write until it is
                    // given back; `read_unaligned` needs no alignment.
                    let h: libc::tpacket3_hdr =
                        unsafe { std::ptr::read_unaligned(self.map.add(at).cast()) };
                    let sll_at = at + HDR_LEN;
                    let pkttype = if sll_at + std::mem::size_of::<libc::sockaddr_ll>()
                        <= base + self.block_size
                    {
                        // SAFETY: as above; the address follows the header
                        // in the same block (checked).
                        let sll: libc::sockaddr_ll =
                            unsafe { std::ptr::read_unaligned(self.map.add(sll_at).cast()) };
                        sll.sll_pkttype
                    } else {
                        libc::PACKET_HOST
                    };
                    let mac = at + usize::from(h.tp_mac);
                    let snaplen =
                        (h.tp_snaplen as usize).min((base + self.block_size).saturating_sub(mac));
                    // The frames of a block are chained by `tp_next_offset`;
                    // a zero offset before the count is out ends the block.
                    let next_off = h.tp_next_offset as usize;
                    self.next = Some(if next_off == 0 {
                        (off, 0)
                    } else {
                        (off + next_off, left - 1)
                    });
                    return Some(Slot {
                        mac,
                        snaplen,
                        len: h.tp_len,
                        status: h.tp_status,
                        vlan_tci: h.hv1.tp_vlan_tci as u16,
                        vlan_tpid: h.hv1.tp_vlan_tpid,
                        pkttype,
                        ts_ns: u64::from(h.tp_sec) * 1_000_000_000 + u64::from(h.tp_nsec),
                    });
                }
                // Done with the block: give it back to the kernel, or hold
                // it while its frames are lent.
                if hold {
                    if self.held == 0 {
                        self.release = self.block;
                    }
                    self.held += 1;
                } else {
                    self.give_back(self.block);
                }
                self.block = (self.block + 1) % self.blocks;
                self.next = None;
            }
            if self.held > 0 && self.held + 1 >= self.blocks {
                // Every other block is held (lent): read no further until
                // they are given back, rather than come round to them.
                return None;
            }
            let st = self.status(self.block);
            // SAFETY: as above; the kernel writes this word, hence volatile.
            let status = unsafe { std::ptr::read_volatile(st) };
            if status & libc::TP_STATUS_USER == 0 {
                return None;
            }
            fence(Ordering::Acquire);
            let base = self.block * self.block_size;
            // SAFETY: the block is ours (`TP_STATUS_USER`); its descriptor's
            // header (`tpacket_hdr_v1`) starts 8 bytes in, inside the block.
            let bh: libc::tpacket_hdr_v1 =
                unsafe { std::ptr::read_unaligned(self.map.add(base + 8).cast()) };
            self.next = Some((bh.offset_to_first_pkt as usize, bh.num_pkts));
        }
    }

    /// The region of `s` (inside the mapping, in a block that is ours).
    fn region(&self, s: &Slot) -> NonNull<[u8]> {
        let p = std::ptr::slice_from_raw_parts_mut(self.map.wrapping_add(s.mac), s.snaplen);
        NonNull::new(p).unwrap_or(NonNull::from(&mut [][..]))
    }

    /// The bytes of `s` (inside the mapping, in a block that is ours).
    fn bytes(&self, s: &Slot) -> &[u8] {
        // SAFETY: `mac .. mac + snaplen` lies inside the mapping (`snaplen`
        // was cut to the block's end) in a block the kernel handed over
        // and does not touch until `next` gives it back, which needs
        // `&mut self`, so not while this borrow lives.
        unsafe { std::slice::from_raw_parts(self.map.add(s.mac), s.snaplen) }
    }
}

/// A frame read from an [`RxRing`].
#[derive(Debug)]
pub struct RingFrame<'a> {
    /// The frame as it was on the wire (a VLAN tag the kernel took out is
    /// back in).
    pub bytes: &'a [u8],
    /// Its length on the wire (more than `bytes` when truncated).
    pub wire_len: u32,
    /// Sent by this host (`PACKET_OUTGOING`), not received.
    pub outgoing: bool,
    /// Kernel receive time, ns since the Unix epoch (`CLOCK_REALTIME`).
    pub ts_ns: u64,
}

/// One packet socket with a `TPACKET_V3` receive ring, bound to one
/// interface (see the module docs). It can send too ([`send_batch`] on
/// [`RxRing::fd`]); a [`TxRing`] is a second socket.
pub struct RxRing {
    name: String,
    ring: Ring,
    /// A frame with its VLAN tag put back.
    scratch: Vec<u8>,
}

impl std::fmt::Debug for RxRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RxRing")
            .field("name", &self.name)
            .field("blocks", &self.ring.blocks)
            .field("block_size", &self.ring.block_size)
            .finish_non_exhaustive()
    }
}

impl RxRing {
    /// Opens interface `name` on a ring of `rc`: promiscuous when asked,
    /// outgoing frames ignored, past the qdisc on send, and in hash fanout
    /// group `fanout` when given.
    ///
    /// # Errors
    /// A missing or down interface, no `CAP_NET_RAW`, or the socket option
    /// the kernel refused (named).
    pub fn open(
        name: &str,
        promiscuous: bool,
        fanout: Option<u16>,
        rc: &RingConfig,
    ) -> Result<RxRing, PortError> {
        Ok(RxRing {
            name: name.to_string(),
            ring: open_ring(name, promiscuous, fanout, rc)?,
            scratch: Vec::with_capacity(2048),
        })
    }

    /// The interface name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The socket, for `poll(2)` and [`send_batch`].
    pub fn fd(&self) -> RawFd {
        self.ring.fd.as_raw_fd()
    }

    /// The addresses of the ring's mapping: the frames it lends lie in
    /// it (tests check that they were not copied).
    pub fn mapping(&self) -> std::ops::Range<usize> {
        let start = self.ring.map as usize;
        start..start + self.ring.len
    }

    /// The next frame the kernel has handed over, if any (does not wait:
    /// poll [`RxRing::fd`] for `POLLIN`).
    pub fn next_frame(&mut self) -> Option<RingFrame<'_>> {
        let s = self.ring.next(false)?;
        let bytes = self.ring.bytes(&s);
        let outgoing = s.pkttype == libc::PACKET_OUTGOING;
        if s.status & libc::TP_STATUS_VLAN_VALID != 0 && bytes.len() >= 12 {
            // Put the tag the kernel took out back after the MACs.
            return Some(RingFrame {
                bytes: tag_back(&mut self.scratch, bytes, &s),
                wire_len: s.len + 4,
                outgoing,
                ts_ns: s.ts_ns,
            });
        }
        Some(RingFrame {
            bytes,
            wire_len: s.len,
            outgoing,
            ts_ns: s.ts_ns,
        })
    }

    /// Moves the frames the kernel has handed over into `batch`, up to its
    /// room, lent where they lie ([`Batch::lend`]): first gives back the
    /// blocks read to their end by the previous call, once no frame lent
    /// out of them is still out (the batch they went into was cleared).
    /// A frame whose VLAN tag the kernel took out is copied with its tag
    /// back in (counted in `rx.rx_copied`); an outgoing one is counted
    /// and dropped. Returns how many frames went into the batch; none while
    /// a batch this ring filled still holds its frames.
    fn fill(
        &mut self,
        batch: &mut Batch,
        now: Timestamp,
        ingress: u8,
        rx: &mut RxCounters,
    ) -> usize {
        if !self.ring.release_held() {
            return 0;
        }
        let mut n = 0;
        while !batch.is_full() {
            let Some(s) = self.ring.next(true) else { break };
            if s.pkttype == libc::PACKET_OUTGOING {
                rx.rx_outgoing_dropped += 1;
                continue;
            }
            let region = self.ring.region(&s);
            if s.status & libc::TP_STATUS_VLAN_VALID != 0 && region.len() >= 12 {
                let bytes = self.ring.bytes(&s);
                let tagged = tag_back(&mut self.scratch, bytes, &s);
                rx.rx_packets += 1;
                rx.rx_bytes += u64::from(s.len + 4);
                rx.rx_copied += 1;
                batch.push_from(now, s.len + 4, LinkType::Ethernet, ingress, tagged);
                n += 1;
                continue;
            }
            rx.rx_packets += 1;
            rx.rx_bytes += u64::from(s.len);
            // SAFETY: `region` lies in the mapping the lease holds (`next`
            // cut it to its block), in a block the kernel handed over and
            // that stays ours until `release_held` gives it back, which it
            // does only once it holds the last clone of the lease, so not
            // while this slot holds one. The ring reads only block headers
            // and frame headers before each frame, never a frame's bytes
            // (a frame's header lies outside every frame's region), and
            // lends each frame once (`next` moves on).
            unsafe {
                batch.lend(
                    now,
                    s.len,
                    LinkType::Ethernet,
                    ingress,
                    &self.ring.lease,
                    region,
                )
            };
            n += 1;
        }
        n
    }

    /// Frames the kernel dropped (ring full) and times it found the next
    /// block still held, since the last call (`PACKET_STATISTICS`; the
    /// kernel resets them on every read).
    pub fn statistics(&self) -> (u64, u64) {
        let d = kernel_drops(self.fd());
        (d.dropped, d.frozen)
    }
}

/// `bytes` (of frame `s`, at least 12 long) with the VLAN tag the kernel
/// took out put back after the MAC addresses, in `scratch`.
fn tag_back<'a>(scratch: &'a mut Vec<u8>, bytes: &[u8], s: &Slot) -> &'a [u8] {
    let tpid = if s.status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
        s.vlan_tpid
    } else {
        0x8100
    };
    scratch.clear();
    scratch.extend_from_slice(&bytes[..12]);
    scratch.extend_from_slice(&tpid.to_be_bytes());
    scratch.extend_from_slice(&s.vlan_tci.to_be_bytes());
    scratch.extend_from_slice(&bytes[12..]);
    scratch
}

/// Sends `frames` on packet socket `fd` with as few `sendmmsg(2)` calls as
/// the kernel allows (one per [`TX_BATCH`] frames when it takes them all).
/// When a call fails, `retry` gets the error and says whether to try again
/// (it may wait first); when it says no, the frames not sent are given up.
/// Returns how many were sent, and the error that stopped it, if any.
pub fn send_batch(
    fd: RawFd,
    frames: &[&[u8]],
    mut retry: impl FnMut(&io::Error) -> bool,
) -> (usize, Option<io::Error>) {
    let mut done = 0usize;
    for chunk in frames.chunks(TX_BATCH) {
        let n = chunk.len();
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; TX_BATCH];
        // SAFETY: an all-zero mmsghdr is a valid empty message.
        let mut msgs: [libc::mmsghdr; TX_BATCH] = unsafe { std::mem::zeroed() };
        for (k, f) in chunk.iter().enumerate() {
            // The kernel only reads through this pointer (a send).
            iov[k] = libc::iovec {
                iov_base: f.as_ptr().cast_mut().cast(),
                iov_len: f.len(),
            };
        }
        for (m, v) in msgs.iter_mut().zip(iov.iter_mut()).take(n) {
            m.msg_hdr.msg_iov = v;
            m.msg_hdr.msg_iovlen = 1;
        }
        let mut sent = 0usize;
        while sent < n {
            // SAFETY: `msgs[sent..n]` are initialised messages whose single
            // iovec points at a live frame of `frames` of its length, which
            // the kernel only reads; `fd` is the caller's open socket.
            let r = unsafe {
                libc::sendmmsg(
                    fd,
                    msgs.as_mut_ptr().add(sent),
                    (n - sent) as libc::c_uint,
                    0,
                )
            };
            if r > 0 {
                sent += r as usize;
                continue;
            }
            let err = io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINTR) || retry(&err) {
                continue;
            }
            return (done + sent, Some(err));
        }
        done += n;
    }
    (done, None)
}

/// Why [`TxRing::push`] did not take a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxRefused {
    /// Every slot is still the kernel's (queued or on its way out): kick
    /// ([`TxRing::kick`]) and wait for room ([`TxRing::wait_room`]).
    Full,
    /// Shorter than an Ethernet header or longer than the interface's MTU
    /// allows (the kernel would refuse it).
    Length,
}

/// One packet socket with a `TPACKET_V3` transmit ring
/// (`PACKET_TX_RING`), bound to one interface with protocol 0, so nothing
/// is ever received on it.
///
/// [`push`](Self::push) copies a frame into the next slot and marks it
/// `TP_STATUS_SEND_REQUEST`; [`kick`](Self::kick) asks the kernel to send
/// every marked slot with one `send(2)`. The kernel sends the slots in ring
/// order and marks each `TP_STATUS_AVAILABLE` again once its buffer is
/// freed (on a veth into another namespace, as soon as the peer takes
/// it). The kernel builds each frame's buffer around the slot's pages, so
/// the frame is not copied again on the way out. `PACKET_LOSS` is set:
/// a frame the kernel finds malformed is skipped rather than stopping the
/// ring (lengths are checked here first, so none should be). Sends go past
/// the qdisc (`PACKET_QDISC_BYPASS`), as the receive ring's socket's do.
pub struct TxRing {
    name: String,
    fd: OwnedFd,
    map: *mut u8,
    len: usize,
    frame_size: usize,
    frames: usize,
    /// The next slot to fill; the kernel sends from the same place on.
    head: usize,
    /// Slots marked since the last successful [`kick`](Self::kick).
    queued: usize,
    /// The longest frame taken: the interface's MTU plus an Ethernet
    /// header and one VLAN tag (a slot holds it after its header).
    max_frame: usize,
}

// SAFETY: the mapping is owned by this value alone and used from one
// thread at a time through `&mut self`.
unsafe impl Send for TxRing {}

impl Drop for TxRing {
    /// Hands the kernel what is still marked (a kick refused for lack of
    /// send budget leaves frames marked), retrying for up to about 100 ms,
    /// then unmaps the ring (the kernel keeps the pages of frames still on
    /// their way out).
    fn drop(&mut self) {
        for _ in 0..10 {
            if self.queued == 0 || self.kick().is_ok() {
                break;
            }
            self.wait_room(10);
        }
        // SAFETY: `map` and `len` are the mapping made in `open`, unmapped
        // once, here.
        unsafe {
            libc::munmap(self.map.cast(), self.len);
        }
    }
}

impl std::fmt::Debug for TxRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxRing")
            .field("name", &self.name)
            .field("frames", &self.frames)
            .field("frame_size", &self.frame_size)
            .field("max_frame", &self.max_frame)
            .finish_non_exhaustive()
    }
}

impl TxRing {
    /// Opens a transmit ring of `frames` slots (rounded up to whole
    /// blocks) on interface `name`; each slot holds a frame as long as the
    /// interface's MTU allows.
    ///
    /// # Errors
    /// A missing or down interface, no `CAP_NET_RAW`, or the socket option
    /// the kernel refused (named: `PACKET_TX_RING` needs Linux 4.11 with
    /// `TPACKET_V3`).
    pub fn open(name: &str, frames: u32) -> Result<TxRing, PortError> {
        let ifc = find_interface(name)?;
        let fd = v3_socket(name)?;
        let mtu = interface_mtu(fd.as_raw_fd(), name).map_err(os(name, "ioctl(SIOCGIFMTU)"))?;
        // An Ethernet header and a VLAN tag over the MTU, as the kernel's
        // own limit for a packet socket's frames.
        let max_frame = mtu as usize + 18;
        let frame_size = (HDR_LEN + max_frame)
            .next_power_of_two()
            .max(FRAME_SIZE as usize);
        let block = frame_size.max(TX_BLOCK);
        let per_block = block / frame_size;
        let blocks = (frames.max(1) as usize).div_ceil(per_block);
        setsockopt_int(&fd, libc::SOL_PACKET, libc::PACKET_LOSS, 1)
            .map_err(os(name, "setsockopt(PACKET_LOSS)"))?;
        setsockopt_int(&fd, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, 1)
            .map_err(os(name, "setsockopt(PACKET_QDISC_BYPASS)"))?;
        // Room in the socket's send budget for a full ring of frames in
        // flight (best effort: capped by net.core.wmem_max without
        // CAP_NET_ADMIN's SO_SNDBUFFORCE).
        let want = (blocks * block).min(i32::MAX as usize) as libc::c_int;
        if setsockopt_int(&fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, want).is_err() {
            let _ = setsockopt_int(&fd, libc::SOL_SOCKET, libc::SO_SNDBUF, want);
        }
        let req = libc::tpacket_req3 {
            tp_block_size: block as u32,
            tp_block_nr: blocks as u32,
            tp_frame_size: frame_size as u32,
            tp_frame_nr: (blocks * per_block) as u32,
            tp_retire_blk_tov: 0,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        setsockopt_val(&fd, libc::SOL_PACKET, libc::PACKET_TX_RING, &req)
            .map_err(os(name, "setsockopt(PACKET_TX_RING)"))?;
        let len = blocks * block;
        let ring = TxRing {
            name: name.to_string(),
            map: map_ring(&fd, len, name, "mmap(PACKET_TX_RING)")?,
            fd,
            len,
            frame_size,
            frames: blocks * per_block,
            head: 0,
            queued: 0,
            max_frame,
        };
        // Protocol 0: the socket receives nothing.
        bind_packet(&ring.fd, ifc.index, 0, name)?;
        Ok(ring)
    }

    /// The interface name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The socket, for `poll(2)` (`POLLOUT`: the next slot is free).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Slots in the ring.
    pub fn frames(&self) -> usize {
        self.frames
    }

    /// The longest frame [`push`](Self::push) takes.
    pub fn max_frame(&self) -> usize {
        self.max_frame
    }

    /// Slots marked for sending and not yet handed to the kernel by a
    /// [`kick`](Self::kick).
    pub fn queued(&self) -> usize {
        self.queued
    }

    /// Slot `i`'s header.
    fn header(&self, i: usize) -> *mut u8 {
        // `i < frames`, so the slot lies inside the mapping.
        self.map.wrapping_add(i * self.frame_size)
    }

    /// Copies `frame` into the next slot and marks it for sending (it
    /// leaves at the next [`kick`](Self::kick)).
    ///
    /// # Errors
    /// [`TxRefused::Full`] when the slot is still the kernel's;
    /// [`TxRefused::Length`] for a frame under 14 bytes or over
    /// [`max_frame`](Self::max_frame).
    pub fn push(&mut self, frame: &[u8]) -> Result<(), TxRefused> {
        if frame.len() < 14 || frame.len() > self.max_frame {
            return Err(TxRefused::Length);
        }
        let h = self.header(self.head);
        let status = h
            .wrapping_add(std::mem::offset_of!(libc::tpacket3_hdr, tp_status))
            .cast::<u32>();
        // SAFETY: `status` is the slot's aligned status word inside the
        // mapping (slots are `frame_size` apart, a multiple of 16); the
        // kernel writes it, hence volatile.
        if unsafe { std::ptr::read_volatile(status) } != libc::TP_STATUS_AVAILABLE {
            return Err(TxRefused::Full);
        }
        fence(Ordering::Acquire);
        // SAFETY: the slot is ours (`TP_STATUS_AVAILABLE`: the kernel does
        // not touch it until it is marked); the header's fields and the
        // frame at `HDR_LEN` fit the slot (`max_frame <= frame_size -
        // HDR_LEN`, checked above), inside the mapping.
        unsafe {
            let len_at = h.add(std::mem::offset_of!(libc::tpacket3_hdr, tp_len));
            std::ptr::write_volatile(len_at.cast::<u32>(), frame.len() as u32);
            let snap_at = h.add(std::mem::offset_of!(libc::tpacket3_hdr, tp_snaplen));
            std::ptr::write_volatile(snap_at.cast::<u32>(), frame.len() as u32);
            // A fixed-size slot: no chaining.
            std::ptr::write_volatile(h.cast::<u32>(), 0);
            std::ptr::copy_nonoverlapping(frame.as_ptr(), h.add(HDR_LEN), frame.len());
        }
        fence(Ordering::Release);
        // SAFETY: as above; marking the slot hands it to the kernel.
        unsafe { std::ptr::write_volatile(status, libc::TP_STATUS_SEND_REQUEST) };
        self.head = (self.head + 1) % self.frames;
        self.queued += 1;
        Ok(())
    }

    /// Asks the kernel to send every marked slot (one `send(2)`, not
    /// waiting). Slots it could not take yet (its send budget is spent)
    /// stay marked and go with the next kick.
    ///
    /// # Errors
    /// The system call's error (`EAGAIN` and `ENOBUFS` included: the
    /// frames are still in the ring).
    pub fn kick(&mut self) -> io::Result<()> {
        if self.queued == 0 {
            return Ok(());
        }
        loop {
            // SAFETY: `fd` is this ring's open socket; a null buffer of
            // length 0 is what the ring protocol sends.
            let r =
                unsafe { libc::send(self.fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT) };
            if r >= 0 {
                self.queued = 0;
                return Ok(());
            }
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EINTR) {
                return Err(err);
            }
        }
    }

    /// Waits up to `timeout_ms` for the next slot to be free again.
    pub fn wait_room(&self, timeout_ms: i32) {
        wait_writable(self.fd.as_raw_fd(), timeout_ms);
    }
}

/// One worker's port on a ring.
struct RingPort {
    rx: RxRing,
    tx: TxPath,
}

/// How a [`RingPort`] sends.
enum TxPath {
    /// A transmit ring, and whether this batch already waited for room
    /// in it.
    Ring { ring: TxRing, waited: bool },
    /// Copies gathered for the next `sendmmsg` on the receive socket.
    Mmsg { bufs: Vec<Vec<u8>>, len: usize },
}

impl TxPath {
    fn mmsg() -> TxPath {
        TxPath::Mmsg {
            bufs: (0..TX_BATCH).map(|_| Vec::with_capacity(2048)).collect(),
            len: 0,
        }
    }
}

/// A worker's live ports over packet rings (see the module docs).
pub struct RingPorts {
    ports: Vec<RingPort>,
    clock: MonotonicClock,
    next: usize,
    rx: Vec<RxCounters>,
    pollfds: Vec<libc::pollfd>,
    block_timeout_ms: u32,
}

impl std::fmt::Debug for RingPorts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingPorts")
            .field(
                "ports",
                &self.ports.iter().map(|p| p.rx.name()).collect::<Vec<_>>(),
            )
            .field("rx", &self.rx)
            .finish_non_exhaustive()
    }
}

fn os(name: &str, what: &'static str) -> impl FnOnce(io::Error) -> PortError {
    let name = name.to_string();
    move |err| PortError::Os { name, what, err }
}

/// `setsockopt(2)` of a plain-data value.
fn setsockopt_val<T>(fd: &OwnedFd, level: libc::c_int, opt: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: `fd` is an open socket; `v` is a live `T` (plain data, as
    // every option set here is) and its exact size is passed.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A raw packet socket for `TPACKET_V3` rings (protocol 0 until bound:
/// nothing arrives).
fn v3_socket(name: &str) -> Result<OwnedFd, PortError> {
    let fd = packet_socket(name)?;
    setsockopt_int(
        &fd,
        libc::SOL_PACKET,
        libc::PACKET_VERSION,
        libc::tpacket_versions::TPACKET_V3 as libc::c_int,
    )
    .map_err(os(name, "setsockopt(PACKET_VERSION, TPACKET_V3)"))?;
    Ok(fd)
}

/// Maps the `len` bytes of the ring the kernel made for `fd`; `what` names
/// the mapping in an error.
fn map_ring(
    fd: &OwnedFd,
    len: usize,
    name: &str,
    what: &'static str,
) -> Result<*mut u8, PortError> {
    // SAFETY: maps the ring the kernel made for `fd`, `len` bytes as it was
    // sized; the result is checked against MAP_FAILED.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            fd.as_raw_fd(),
            0,
        )
    };
    if map == libc::MAP_FAILED {
        return Err(os(name, what)(io::Error::last_os_error()));
    }
    Ok(map.cast())
}

/// Binds packet socket `fd` to interface `ifindex` for frames of
/// `protocol` (host order; 0: none).
fn bind_packet(fd: &OwnedFd, ifindex: u32, protocol: u16, name: &str) -> Result<(), PortError> {
    // SAFETY: sockaddr_ll is plain data; all zeroes is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = protocol.to_be();
    sll.sll_ifindex = ifindex as libc::c_int;
    // SAFETY: `sll` is a live sockaddr_ll and its exact size is passed.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(os(name, "bind(AF_PACKET)")(io::Error::last_os_error()));
    }
    Ok(())
}

/// A packet socket, bound to nothing yet (protocol 0: nothing arrives),
/// with a `TPACKET_V3` receive ring of `rc` set up but not mapped.
fn ring_socket(name: &str, rc: &RingConfig) -> Result<OwnedFd, PortError> {
    let fd = v3_socket(name)?;
    let req = libc::tpacket_req3 {
        tp_block_size: rc.block_bytes,
        tp_block_nr: rc.blocks,
        tp_frame_size: FRAME_SIZE,
        tp_frame_nr: rc.block_bytes / FRAME_SIZE * rc.blocks,
        tp_retire_blk_tov: rc.block_timeout_ms,
        tp_sizeof_priv: 0,
        tp_feature_req_word: 0,
    };
    setsockopt_val(&fd, libc::SOL_PACKET, libc::PACKET_RX_RING, &req)
        .map_err(os(name, "setsockopt(PACKET_RX_RING)"))?;
    Ok(fd)
}

/// Opens interface `name` on a ring (see [`RxRing::open`]).
fn open_ring(
    name: &str,
    promiscuous: bool,
    fanout: Option<u16>,
    rc: &RingConfig,
) -> Result<Ring, PortError> {
    let ifc = find_interface(name)?;
    let fd = ring_socket(name, rc)?;
    let len = rc.block_bytes as usize * rc.blocks as usize;
    let map = map_ring(&fd, len, name, "mmap(PACKET_RX_RING)")?;
    let ring = Ring {
        map,
        len,
        lease: Arc::new(Mapping { map, len }),
        fd,
        block_size: rc.block_bytes as usize,
        blocks: rc.blocks as usize,
        block: 0,
        next: None,
        release: 0,
        held: 0,
    };
    bind_packet(&ring.fd, ifc.index, libc::ETH_P_ALL as u16, name)?;
    if promiscuous {
        let mreq = libc::packet_mreq {
            mr_ifindex: ifc.index as libc::c_int,
            mr_type: libc::PACKET_MR_PROMISC as u16,
            mr_alen: 0,
            mr_address: [0; 8],
        };
        setsockopt_val(
            &ring.fd,
            libc::SOL_PACKET,
            libc::PACKET_ADD_MEMBERSHIP,
            &mreq,
        )
        .map_err(os(
            name,
            "setsockopt(PACKET_ADD_MEMBERSHIP, PACKET_MR_PROMISC)",
        ))?;
    }
    setsockopt_int(&ring.fd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, 1)
        .map_err(|e| PortError::IgnoreOutgoing(name.to_string(), e))?;
    setsockopt_int(&ring.fd, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, 1)
        .map_err(os(name, "setsockopt(PACKET_QDISC_BYPASS)"))?;
    if let Some(group) = fanout {
        let arg = |flags: libc::c_uint| -> libc::c_int {
            (u32::from(group) | ((libc::PACKET_FANOUT_HASH | flags) << 16)) as libc::c_int
        };
        if setsockopt_int(
            &ring.fd,
            libc::SOL_PACKET,
            libc::PACKET_FANOUT,
            arg(libc::PACKET_FANOUT_FLAG_IGNORE_OUTGOING),
        )
        .is_err()
        {
            // Older kernels know no IGNORE_OUTGOING flag; the packet type
            // is checked per frame anyway.
            setsockopt_int(&ring.fd, libc::SOL_PACKET, libc::PACKET_FANOUT, arg(0))
                .map_err(os(name, "setsockopt(PACKET_FANOUT)"))?;
        }
    }
    Ok(ring)
}

/// Whether this kernel and process can have a packet ring: opens a packet
/// socket and asks for a small `TPACKET_V3` receive ring, bound to no
/// interface (so nothing arrives). `Err` names what was refused.
///
/// # Errors
/// No `CAP_NET_RAW`, or the socket option the kernel refused.
pub fn probe() -> Result<(), PortError> {
    let small = RingConfig {
        block_bytes: 1 << 16,
        blocks: 2,
        block_timeout_ms: 1,
        tx_frames: 0,
    };
    ring_socket("(probe)", &small).map(drop)
}

impl RingPorts {
    /// One worker's ports (port `i` is `interfaces[i]`) on rings of `rc`,
    /// in the fanout groups `groups[i]`, on `clock`.
    ///
    /// # Errors
    /// As [`RxRing::open`]: the first port that could not be opened.
    pub fn open(
        interfaces: &[PortSettings],
        groups: &[u16],
        rc: &RingConfig,
        clock: MonotonicClock,
    ) -> Result<RingPorts, PortError> {
        let mut ports = Vec::with_capacity(interfaces.len());
        for (cfg, &g) in interfaces.iter().zip(groups) {
            let rx = RxRing::open(&cfg.name, cfg.promiscuous, Some(g), rc)?;
            let tx = match rc.tx_frames {
                0 => TxPath::mmsg(),
                n => match TxRing::open(&cfg.name, n) {
                    Ok(ring) => TxPath::Ring {
                        ring,
                        waited: false,
                    },
                    // A kernel that refuses the ring (before 4.11, or
                    // memory) still sends, one call per batch.
                    Err(PortError::Os { what, err, .. }) => {
                        eprintln!(
                            "dataplane: interface \"{}\": {what}: {err}; transmitting with sendmmsg(2)",
                            cfg.name
                        );
                        TxPath::mmsg()
                    }
                    Err(e) => return Err(e),
                },
            };
            ports.push(RingPort { rx, tx });
        }
        let n = ports.len();
        // Each port's MTU, for the reasons of refused copies (`TxErrors`).
        let rx = ports
            .iter()
            .map(|p| {
                let mut c = RxCounters::default();
                c.tx_errors.mtu = interface_mtu(p.rx.fd(), p.rx.name()).unwrap_or(0);
                c
            })
            .collect();
        Ok(RingPorts {
            ports,
            clock,
            next: 0,
            rx,
            pollfds: Vec::with_capacity(n),
            block_timeout_ms: rc.block_timeout_ms,
        })
    }

    /// The interface names, in port order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.ports.iter().map(|p| p.rx.name())
    }

    /// Port `i`'s receive ring ([`RxRing::mapping`]).
    pub fn rx_mapping(&self, i: usize) -> Option<std::ops::Range<usize>> {
        self.ports.get(i).map(|p| p.rx.mapping())
    }

    /// Reads up to the batch's room from port `i`'s ring.
    fn fill(&mut self, i: usize, batch: &mut Batch) -> usize {
        let Some(port) = self.ports.get_mut(i) else {
            return 0;
        };
        // One reading for the call: the frames it takes were read together.
        let now = self.clock.now();
        port.rx.fill(batch, now, i as u8, &mut self.rx[i])
    }

    /// Sends what port `i` has gathered: on a transmit ring one kick (and
    /// the next batch may wait for room again); else the copies with
    /// [`send_gathered`].
    fn flush_port(&mut self, i: usize) {
        let Some(p) = self.ports.get_mut(i) else {
            return;
        };
        match &mut p.tx {
            TxPath::Ring { ring, waited } => {
                *waited = false;
                // Frames not taken now (send budget spent, interface down)
                // stay marked and go with the next kick.
                let _ = ring.kick();
            }
            TxPath::Mmsg { bufs, len } => {
                send_gathered(p.rx.fd(), &bufs[..*len], &mut self.rx[i]);
                *len = 0;
            }
        }
    }
}

/// Sends `bufs` on packet socket `fd` with `sendmmsg(2)`, waiting once (10
/// ms at most) for room. Frames the kernel refuses are counted in
/// `counters.tx_dropped`, and by reason in `counters.tx_errors`; a frame
/// refused for any reason but a full queue is skipped and the rest still
/// sent.
fn send_gathered(fd: RawFd, bufs: &[Vec<u8>], counters: &mut RxCounters) {
    let n = bufs.len().min(TX_BATCH);
    let mut frames: [&[u8]; TX_BATCH] = [&[]; TX_BATCH];
    for (f, b) in frames.iter_mut().zip(bufs) {
        *f = b;
    }
    let mut waited = false;
    let mut done = 0;
    while done < n {
        let mut full = false;
        let (sent, err) = send_batch(fd, &frames[done..n], |err| {
            full = matches!(err.raw_os_error(), Some(libc::EAGAIN | libc::ENOBUFS));
            if !full || waited {
                return false;
            }
            waited = true;
            wait_writable(fd, 10);
            true
        });
        done += sent;
        let Some(err) = err else {
            break;
        };
        let errno = err.raw_os_error().unwrap_or(0);
        if full {
            // Still no room after the wait: the rest is given up.
            let rest = (n - done) as u64;
            counters.tx_dropped += rest;
            counters
                .tx_errors
                .record(errno, frames.get(done).map_or(0, |f| f.len()), rest);
            break;
        }
        // This frame is refused (too long, say); the others may go.
        counters.tx_dropped += 1;
        counters
            .tx_errors
            .record(errno, frames.get(done).map_or(0, |f| f.len()), 1);
        done += 1;
    }
}

impl Transmit for RingPorts {
    /// Puts the copy in the port's transmit ring (sent at
    /// [`Ports::flush`], or at once when the ring is full), or gathers it
    /// for the port's next `sendmmsg` (sent at [`Ports::flush`], or at once
    /// when [`TX_BATCH`] are waiting). A copy the ring cannot take (full
    /// after one wait of up to 10 ms per flush, or a length the interface
    /// refuses) is counted as refused by the kernel (`tx_dropped`), as
    /// `sendmmsg` counts its refusals.
    fn send(&mut self, f: &TxFrame<'_>) -> bool {
        let i = usize::from(f.port);
        let Some(p) = self.ports.get_mut(i) else {
            return false;
        };
        let counters = &mut self.rx[i];
        match &mut p.tx {
            TxPath::Ring { ring, waited } => {
                let mut r = ring.push(f.frame);
                if r == Err(TxRefused::Full) {
                    let _ = ring.kick();
                    r = ring.push(f.frame);
                    if r == Err(TxRefused::Full) && !*waited {
                        *waited = true;
                        ring.wait_room(10);
                        r = ring.push(f.frame);
                    }
                }
                match r {
                    Ok(()) => {}
                    Err(why) => {
                        counters.tx_dropped += 1;
                        // As send(2) would say it.
                        let errno = match why {
                            TxRefused::Length if f.frame.len() < 14 => libc::EINVAL,
                            TxRefused::Length => libc::EMSGSIZE,
                            TxRefused::Full => libc::EAGAIN,
                        };
                        counters.tx_errors.record(errno, f.frame.len(), 1);
                    }
                }
            }
            TxPath::Mmsg { bufs, len } => {
                if *len == TX_BATCH {
                    send_gathered(p.rx.fd(), &bufs[..], counters);
                    *len = 0;
                }
                if let Some(b) = bufs.get_mut(*len) {
                    b.clear();
                    b.extend_from_slice(f.frame);
                    *len += 1;
                }
            }
        }
        true
    }
}

impl Ports for RingPorts {
    fn recv(&mut self, batch: &mut Batch) -> usize {
        let n = self.ports.len();
        for k in 0..n {
            let i = (self.next + k) % n;
            let got = self.fill(i, batch);
            if got > 0 {
                self.next = (i + 1) % n;
                return got;
            }
        }
        0
    }

    fn now(&mut self) -> Timestamp {
        self.clock.now()
    }

    fn wait(&mut self, until: Option<Timestamp>) -> bool {
        self.flush();
        let now = self.clock.now();
        poll_readable(
            &mut self.pollfds,
            self.ports.iter().map(|p| p.rx.fd()),
            now,
            until,
        );
        true
    }

    fn real_time(&self) -> bool {
        true
    }

    /// Twice the block timeout: a part-filled block is handed over by then.
    fn settle_time(&self) -> Duration {
        Duration::from_millis(2 * u64::from(self.block_timeout_ms.max(1)))
    }

    fn rx_counters(&self) -> &[RxCounters] {
        &self.rx
    }

    fn flush(&mut self) {
        for i in 0..self.ports.len() {
            self.flush_port(i);
        }
    }

    fn refresh_counters(&mut self) {
        for (p, rx) in self.ports.iter().zip(&mut self.rx) {
            let (dropped, frozen) = p.rx.statistics();
            rx.rx_dropped += dropped;
            rx.rx_frozen += frozen;
        }
    }
}
