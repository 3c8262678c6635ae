//! Ports in memory: frames queued with their arrival times and ingress
//! ports, read in order; what leaves each port counted, and kept when
//! asked. Time is the frames' own (capture time), so a run is
//! deterministic. Tests and benches drive the router's chain through it,
//! and replay feeds each worker's share of a capture into one.

use crate::clock::Timestamp;
use crate::io::port::{Ports, RxCounters};
use crate::packet::Batch;
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
    bytes: Vec<u8>,
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
            bytes: Vec::new(),
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

    /// Queues a frame arriving at `ts` on `ingress`, `orig_len` bytes on
    /// the wire. Frames are read in the order queued; a time earlier than
    /// the previous frame's reads as that time.
    pub fn push(&mut self, ts: Timestamp, ingress: u8, link: LinkType, orig_len: u32, data: &[u8]) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(data);
        self.meta.push(Meta {
            ts,
            ingress,
            link,
            orig_len,
            start,
            end: self.bytes.len(),
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
            self.bytes.clear();
            self.next = 0;
        }
    }

    /// Reads every queued frame again from the first, their times shifted
    /// by `shift_ns` (a bench looping over the same frames passes the
    /// span of one pass, so time keeps increasing).
    pub fn rewind(&mut self, shift_ns: u64) {
        for m in &mut self.meta {
            m.ts = m.ts.add_nanos(shift_ns);
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
    fn recv(&mut self, batch: &mut Batch) -> usize {
        let mut n = 0;
        while !batch.is_full() {
            let Some(m) = self.meta.get(self.next) else {
                break;
            };
            let ts = m.ts.max(self.clock);
            self.clock = ts;
            let data = &self.bytes[m.start..m.end];
            if let Some(rx) = self.rx.get_mut(usize::from(m.ingress)) {
                rx.rx_packets += 1;
                rx.rx_bytes += u64::from(m.orig_len);
            }
            batch.push_from(ts, m.orig_len, m.link, m.ingress, data);
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
