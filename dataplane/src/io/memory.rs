//! Ports in memory: frames queued with their arrival times and ingress
//! ports, read in order; what leaves each port counted, and kept when
//! asked. Time is the frames' own (capture time), so a run is
//! deterministic. Tests and benches drive the router's chain through it,
//! and replay feeds each worker's share of a capture into one.
//!
//! The frames are lent to the batch ([`Batch::lend`]), not copied: the
//! chain reads and writes them where they were queued. They lie in one
//! reference-counted buffer; each lent frame holds a clone of it, and the
//! ports change the buffer in place only when they hold the last one
//! (after the batch was cleared): queueing more frames while a batch still
//! holds some copies the buffer first, and the batch keeps the old one. A
//! frame is read once; [`MemoryPorts::rewind`] reads the frames again as
//! they were queued (not as the chain left them) when the ports keep an
//! unwritten copy ([`MemoryPorts::repeatable`]).

use std::ptr::NonNull;
use std::sync::Arc;

use crate::clock::Timestamp;
use crate::io::port::{Ports, RxCounters};
use crate::packet::{Batch, Lease};
use crate::packet::{Transmit, TxFrame};
use crate::wire::LinkType;

/// One frame waiting to be read.
#[derive(Debug, Clone, Copy)]
struct Meta {
    ts: Timestamp,
    ingress: u8,
    link: LinkType,
    orig_len: u32,
    start: usize,
    end: usize,
}

/// A copy that left a port (kept with [`MemoryPorts::keep_sent`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// The port.
    pub port: u8,
    /// The bytes.
    pub frame: Vec<u8>,
    /// Length on the wire.
    pub wire_len: u32,
    /// When its packet arrived.
    pub arrived: Timestamp,
    /// When it left.
    pub departs: Timestamp,
    /// Whether it came out of the port's queue.
    pub queued: bool,
}

/// Per-port transmit counts of [`MemoryPorts`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TxCount {
    /// Copies sent.
    pub packets: u64,
    /// Their wire bytes.
    pub bytes: u64,
}

/// Ports in memory (see the module docs).
#[derive(Debug, Clone)]
pub struct MemoryPorts {
    meta: Vec<Meta>,
    /// The queued frames, end to end; lent to batches (module docs).
    bytes: Arc<Vec<u8>>,
    /// The frames as queued, for [`rewind`](Self::rewind) (with
    /// [`repeatable`](Self::repeatable)).
    original: Option<Vec<u8>>,
    next: usize,
    clock: Timestamp,
    rx: Vec<RxCounters>,
    tx: Vec<TxCount>,
    keep: bool,
    sent: Vec<Sent>,
}

impl MemoryPorts {
    /// `ports` ports with nothing queued.
    pub fn new(ports: usize) -> Self {
        MemoryPorts {
            meta: Vec::new(),
            bytes: Arc::new(Vec::new()),
            original: None,
            next: 0,
            clock: Timestamp::ZERO,
            rx: vec![RxCounters::default(); ports],
            tx: vec![TxCount::default(); ports],
            keep: false,
            sent: Vec::new(),
        }
    }

    /// Keeps every copy sent (for [`take_sent`](Self::take_sent)); off by
    /// default (only counted).
    pub fn keep_sent(mut self, keep: bool) -> Self {
        self.keep = keep;
        self
    }

    /// Keeps the frames as queued, so that [`rewind`](Self::rewind) reads
    /// them again unwritten (a bench looping over the same frames; the
    /// chain decrements TTLs and marks ECN in the lent frames).
    pub fn repeatable(mut self) -> Self {
        self.original = Some(self.bytes.as_ref().clone());
        self
    }

    /// Queues a frame arriving at `ts` on `ingress`, `orig_len` bytes on
    /// the wire. Frames are read in the order queued; a time earlier than
    /// the previous frame's reads as that time.
    pub fn push(&mut self, ts: Timestamp, ingress: u8, link: LinkType, orig_len: u32, data: &[u8]) {
        // A batch may still hold frames of the buffer: then it is copied
        // first (`make_mut`) and the batch keeps the old one.
        let bytes = Arc::make_mut(&mut self.bytes);
        let start = bytes.len();
        bytes.extend_from_slice(data);
        let end = bytes.len();
        if let Some(o) = &mut self.original {
            o.extend_from_slice(data);
        }
        self.meta.push(Meta {
            ts,
            ingress,
            link,
            orig_len,
            start,
            end,
        });
    }

    /// Frames queued and not read yet.
    pub fn pending(&self) -> usize {
        self.meta.len() - self.next
    }

    /// Drops the frames already read, keeping their buffers' capacity
    /// (call when [`pending`](Self::pending) is 0 before queueing more).
    pub fn compact(&mut self) {
        if self.next == self.meta.len() {
            self.meta.clear();
            // A batch still holding frames keeps the old buffer.
            match Arc::get_mut(&mut self.bytes) {
                Some(b) => b.clear(),
                None => self.bytes = Arc::new(Vec::with_capacity(self.bytes.capacity())),
            }
            if let Some(o) = &mut self.original {
                o.clear();
            }
            self.next = 0;
        }
    }

    /// Reads every queued frame again from the first, their times shifted
    /// by `shift_ns` (a bench looping over the same frames passes the
    /// span of one pass, so time keeps increasing). With
    /// [`repeatable`](Self::repeatable) the frames are as queued again;
    /// without, as the chain left them.
    pub fn rewind(&mut self, shift_ns: u64) {
        for m in &mut self.meta {
            m.ts = m.ts.add_nanos(shift_ns);
        }
        if let Some(o) = &self.original {
            Arc::make_mut(&mut self.bytes).copy_from_slice(o);
        }
        self.next = 0;
    }

    /// The copies sent so far (with [`keep_sent`](Self::keep_sent)), oldest
    /// first; they are gone from here after the call.
    pub fn take_sent(&mut self) -> Vec<Sent> {
        std::mem::take(&mut self.sent)
    }

    /// What each port sent.
    pub fn tx_counts(&self) -> &[TxCount] {
        &self.tx
    }
}

impl Transmit for MemoryPorts {
    #[inline]
    fn send(&mut self, f: &TxFrame<'_>) -> bool {
        let Some(c) = self.tx.get_mut(usize::from(f.port)) else {
            return false;
        };
        c.packets += 1;
        c.bytes += u64::from(f.wire_len);
        if self.keep {
            self.keep_copy(f);
        }
        true
    }
}

impl MemoryPorts {
    /// Keeps a copy of `f` (tests): out of line, so that counting a frame
    /// sent stays a few instructions.
    #[cold]
    #[inline(never)]
    fn keep_copy(&mut self, f: &TxFrame<'_>) {
        self.sent.push(Sent {
            port: f.port,
            frame: f.frame.to_vec(),
            wire_len: f.wire_len,
            arrived: f.arrived,
            departs: f.departs,
            queued: f.queued,
        });
    }
}

impl Ports for MemoryPorts {
    /// Lends the next frames to `batch` (see the module docs).
    fn recv(&mut self, batch: &mut Batch) -> usize {
        if self.next >= self.meta.len() {
            return 0;
        }
        // Frames are lent out of a buffer no one else holds: a batch still
        // holding frames of it (not this one, cleared by its reader) makes
        // this a copy.
        let base: *mut u8 = Arc::make_mut(&mut self.bytes).as_mut_ptr();
        let lease: Lease = self.bytes.clone();
        let mut n = 0;
        while !batch.is_full() {
            let Some(m) = self.meta.get(self.next) else {
                break;
            };
            let ts = m.ts.max(self.clock);
            self.clock = ts;
            if let Some(rx) = self.rx.get_mut(usize::from(m.ingress)) {
                rx.rx_packets += 1;
                rx.rx_bytes += u64::from(m.orig_len);
            }
            // `start <= end <= bytes.len()`: `push` recorded them.
            let frame =
                std::ptr::slice_from_raw_parts_mut(base.wrapping_add(m.start), m.end - m.start);
            let frame = NonNull::new(frame).unwrap_or(NonNull::from(&mut [][..]));
            // SAFETY: `frame` lies inside the buffer `lease` holds (its
            // bounds were recorded when the frame was queued, and the
            // buffer only grows or is replaced, never shrunk in place while
            // shared); the buffer stays allocated while a clone of `lease`
            // lives, and these ports write it only through
            // `Arc::get_mut`/`make_mut`, which copy it while any clone is
            // out. Each frame is lent once per read (`next` moves on); a
            // rewind rewrites the buffer only through `make_mut`, so never
            // a region still lent.
            unsafe { batch.lend(ts, m.orig_len, m.link, m.ingress, &lease, frame) };
            self.next += 1;
            n += 1;
        }
        n
    }

    fn now(&mut self) -> Timestamp {
        self.clock
    }

    fn wait(&mut self, _until: Option<Timestamp>) -> bool {
        self.next < self.meta.len()
    }

    fn real_time(&self) -> bool {
        false
    }

    fn rx_counters(&self) -> &[RxCounters] {
        &self.rx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ports_with(frames: &[&[u8]]) -> MemoryPorts {
        let mut m = MemoryPorts::new(1);
        for (i, f) in frames.iter().enumerate() {
            m.push(
                Timestamp::from_nanos(i as u64),
                0,
                LinkType::Ethernet,
                f.len() as u32,
                f,
            );
        }
        m
    }

    #[test]
    fn frames_are_lent_from_the_queued_bytes() {
        let mut m = ports_with(&[&[1; 60], &[2; 70]]);
        let range = m.bytes.as_ptr_range();
        let mut b = Batch::new();
        assert_eq!(m.recv(&mut b), 2);
        for p in b.packets() {
            assert!(p.is_lent());
            assert!(range.contains(&p.data().as_ptr()));
        }
        // The chain writes where the frame lies.
        b.packets_mut()[1].data_mut()[0] = 9;
        b.clear();
        assert_eq!(m.bytes[60], 9);
        assert_eq!(Arc::strong_count(&m.bytes), 1);
    }

    #[test]
    fn queueing_while_frames_are_lent_leaves_them_be() {
        let mut m = ports_with(&[&[1; 60]]);
        let mut b = Batch::new();
        assert_eq!(m.recv(&mut b), 1);
        let at = b.packets()[0].data().as_ptr();
        // The batch still holds the frame: the ports copy their buffer.
        for _ in 0..100 {
            m.push(Timestamp::ZERO, 0, LinkType::Ethernet, 1000, &[3; 1000]);
        }
        assert_eq!(b.packets()[0].data(), &[1; 60]);
        assert_eq!(b.packets()[0].data().as_ptr(), at);
        let mut b2 = Batch::new();
        assert_eq!(m.recv(&mut b2), 32);
        assert_eq!(b2.packets()[0].data(), &[3; 1000]);
    }

    #[test]
    fn repeatable_rewind_reads_the_frames_as_queued() {
        let mut m = MemoryPorts::new(1).repeatable();
        m.push(Timestamp::ZERO, 0, LinkType::Ethernet, 4, &[1, 2, 3, 4]);
        let mut b = Batch::new();
        assert_eq!(m.recv(&mut b), 1);
        b.packets_mut()[0].data_mut()[0] = 0;
        b.clear();
        m.rewind(10);
        assert_eq!(m.recv(&mut b), 1);
        assert_eq!(b.packets()[0].data(), &[1, 2, 3, 4]);
    }
}
