//! SPIE traceback: a digest of every forwarded packet's invariant content
//! in a ring of time-window Bloom filters, so that the router can answer
//! "did you forward this packet around time T, and from which port?"
//! (Snoeren et al., "Hash-Based IP Traceback", SIGCOMM 2001).
//!
//! * [`key`]: the invariant content of IPv4 and IPv6 packets, as words for
//!   the kernels' batch hash, with the ingress port folded in;
//! * [`ring`]: the windows, their sizing and capacity, early closing;
//! * [`query`]: the questions a router answers (parsed from untrusted
//!   text) and its answers, with the false-positive probability of each;
//! * [`store`]: windows kept on disk after a replay, for offline queries.
//!
//! # In the chain
//!
//! A packet is recorded once (not per copy) if its final verdict is
//! forward or mark with at least one port: a dropped packet, or one held
//! for a neighbour, needs no digest (a held packet is recorded when it is
//! released). The final verdict is known only after the egress stage (SFB
//! may drop every copy), and by then the frame of a packet whose last copy
//! went into a queue has moved there. So the stage works in two steps
//! inside [`crate::chain::Chain::process_shared`]: [`DigestStage::gather`]
//! reads the keys of the live packets before the egress stage (the frame
//! is as it came in: the forwarding stage's TTL and MAC rewrite and the
//! Icarus stage's hop are on fields the key leaves out), and
//! [`DigestStage::record`] after it hashes the keys of the packets still
//! forwarded, a batch at a time, into the current window. IPv4 keys (6
//! words) and IPv6 keys (12) are hashed as two sub-batches.
//!
//! # Per worker
//!
//! Each worker has its own ring (no state shared on the hot path). A
//! query asks every worker's ring and merges the answers: a flow's packets
//! land on one worker, but the digest of a packet may be on any. The ring
//! sits behind a mutex the worker takes once per batch and a query takes
//! while it tests its windows (queries are rate-limited,
//! [`crate::runtime::digest`]); the worker never waits on anything else.
//! The expected load is divided among the workers
//! ([`crate::config::DigestSection`]); a worker that gets more than its
//! share closes windows early.

pub mod key;
pub mod query;
pub mod ring;
pub mod store;

use std::any::Any;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::clock::Timestamp;
use crate::pipeline::{BATCH_SIZE, Batch, Packet, Stage};

pub use key::{Completeness, Invariant, InvariantError};
pub use query::{Answer, DigestQuery, Digests, QueryError, TimeBase};
pub use ring::{DigestConfig, Geometry, Ring, RingCounters, Sizing, WindowMeta, WindowProbe};

use key::{V4_WORDS, V6_WORDS};

/// A worker's ring, shared with the query path.
pub type SharedRing = Arc<Mutex<Ring>>;

/// Locks a ring; a worker that panicked holding it left a ring that is
/// still whole (every write to it is a plain store).
pub fn lock(ring: &SharedRing) -> MutexGuard<'_, Ring> {
    ring.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The stage's counters (a worker's; summed over workers in reports, the
/// sizes and rate per worker).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DigestCounters {
    /// Digests recorded: forwarded IP packets.
    pub recorded: u64,
    /// Forwarded packets with no digest: not IP (ARP, ...), or malformed
    /// frames passed on.
    pub skipped: u64,
    /// Windows closed.
    pub windows: u64,
    /// Of those, closed early because they held their capacity (the load
    /// was above the expected one).
    pub early: u64,
    /// Bytes of filters allocated.
    pub memory_bytes: u64,
    /// Digests a window holds (per worker).
    pub window_capacity: u64,
    /// The false-positive rate of a test against a full window.
    pub design_fpr: f64,
}

impl DigestCounters {
    /// Adds another worker's (sums; the capacity and rate are each
    /// worker's, kept).
    pub fn merge(&mut self, o: &DigestCounters) {
        self.recorded += o.recorded;
        self.skipped += o.skipped;
        self.windows += o.windows;
        self.early += o.early;
        self.memory_bytes += o.memory_bytes;
        self.window_capacity = self.window_capacity.max(o.window_capacity);
        self.design_fpr = self.design_fpr.max(o.design_fpr);
    }
}

/// Keys gathered from a batch before the egress stage, kept with the slot
/// they came from (bit 7: the originated batch).
const FROM_ORIGINATED: u8 = 0x80;
/// Keys a chain gathers per batch at most: its packets and the held
/// packets released with them.
const MAX_KEYS: usize = 2 * BATCH_SIZE;

/// The digest stage (see the module docs).
#[derive(Debug)]
pub struct DigestStage {
    ring: SharedRing,
    keys4: [[u32; V4_WORDS]; MAX_KEYS],
    from4: [u8; MAX_KEYS],
    n4: usize,
    keys6: [[u32; V6_WORDS]; MAX_KEYS],
    from6: [u8; MAX_KEYS],
    n6: usize,
    /// Live packets with no key: bit `i` of the batch, of the originated one.
    no_key: [u64; 2],
    counters: DigestCounters,
}

impl DigestStage {
    /// A stage with an empty ring.
    ///
    /// # Errors
    /// As [`DigestConfig::geometry`].
    pub fn new(cfg: &DigestConfig) -> Result<DigestStage, kernels::bloom::ParamError> {
        let ring = Ring::new(cfg)?;
        let g = *ring.geometry();
        Ok(DigestStage {
            ring: Arc::new(Mutex::new(ring)),
            keys4: [[0; V4_WORDS]; MAX_KEYS],
            from4: [0; MAX_KEYS],
            n4: 0,
            keys6: [[0; V6_WORDS]; MAX_KEYS],
            from6: [0; MAX_KEYS],
            n6: 0,
            no_key: [0; 2],
            counters: DigestCounters {
                window_capacity: g.capacity,
                design_fpr: g.design_fpr,
                ..DigestCounters::default()
            },
        })
    }

    /// The ring, for the query path.
    pub fn ring(&self) -> SharedRing {
        self.ring.clone()
    }

    /// The counters so far.
    pub fn counters(&self) -> &DigestCounters {
        &self.counters
    }

    /// Reads the key of every live packet of `batch` (before the egress
    /// stage; see the module docs).
    pub fn gather(&mut self, batch: &Batch) {
        self.gather_from(batch, 0, u32::MAX);
    }

    /// Reads the keys of the held packets released into the originated
    /// batch (bit `i` of `released`: frame `i`).
    pub fn gather_released(&mut self, originated: &Batch, released: u32) {
        if released != 0 {
            self.gather_from(originated, FROM_ORIGINATED, released);
        }
    }

    fn gather_from(&mut self, batch: &Batch, tag: u8, which: u32) {
        let skip = usize::from(tag != 0);
        for (i, p) in batch.packets().iter().enumerate() {
            if which & (1u32 << i) == 0 || !p.is_live() {
                continue;
            }
            match key_of(p) {
                Some(Invariant::V4(w)) if self.n4 < MAX_KEYS => {
                    self.keys4[self.n4] = w;
                    self.from4[self.n4] = tag | i as u8;
                    self.n4 += 1;
                }
                Some(Invariant::V6(w)) if self.n6 < MAX_KEYS => {
                    self.keys6[self.n6] = w;
                    self.from6[self.n6] = tag | i as u8;
                    self.n6 += 1;
                }
                _ => self.no_key[skip] |= 1u64 << i,
            }
        }
    }

    /// Records the gathered keys of the packets whose final verdict
    /// forwards them (`originated`: the batch [`gather_released`]
    /// read), at `now`; closes a window that is due.
    ///
    /// [`gather_released`]: Self::gather_released
    pub fn record(&mut self, batch: &Batch, originated: Option<&Batch>, now: Timestamp) {
        let sent = |from: u8| {
            let b = if from & FROM_ORIGINATED != 0 {
                originated
            } else {
                Some(batch)
            };
            b.and_then(|b| b.packets().get(usize::from(from & !FROM_ORIGINATED)))
                .filter(|p| forwarded(p))
        };
        let (mut first, mut last) = (u64::MAX, 0u64);
        let mut m4 = 0;
        for i in 0..self.n4 {
            if let Some(p) = sent(self.from4[i]) {
                (first, last) = (first.min(p.ts.as_nanos()), last.max(p.ts.as_nanos()));
                self.keys4[m4] = self.keys4[i];
                m4 += 1;
            }
        }
        let mut m6 = 0;
        for i in 0..self.n6 {
            if let Some(p) = sent(self.from6[i]) {
                (first, last) = (first.min(p.ts.as_nanos()), last.max(p.ts.as_nanos()));
                self.keys6[m6] = self.keys6[i];
                m6 += 1;
            }
        }
        for (k, b) in [Some(batch), originated].into_iter().enumerate() {
            let mut bits = self.no_key[k];
            while bits != 0 {
                let i = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let p = b.and_then(|b| b.packets().get(i));
                self.counters.skipped += u64::from(p.is_some_and(forwarded));
            }
        }
        let span = if first <= last {
            (Timestamp::from_nanos(first), Timestamp::from_nanos(last))
        } else {
            (now, now)
        };
        {
            let mut ring = lock(&self.ring);
            ring.record(now, span, &self.keys4[..m4], &self.keys6[..m6]);
            let c = ring.counters();
            self.counters.recorded = c.recorded;
            self.counters.windows = c.closed;
            self.counters.early = c.early;
            self.counters.memory_bytes = ring.memory_bytes();
        }
        self.n4 = 0;
        self.n6 = 0;
        self.no_key = [0; 2];
    }
}

/// Forwarded with a port to go to (a forward to no port sends nothing).
#[inline]
fn forwarded(p: &Packet) -> bool {
    p.verdict.is_forwarded() && !p.verdict.ports().is_empty()
}

/// The key of a parsed IP packet, with its ingress port.
#[inline]
fn key_of(p: &Packet) -> Option<Invariant> {
    let parsed = p.parsed.as_ref()?;
    parsed.ip_version?;
    let ip = p.data().get(parsed.l3_offset..)?;
    Invariant::from_ip(ip, Completeness::AsCaptured)
        .ok()
        .map(|k| k.with_port(p.ingress))
}

/// For tests and benches of the stage alone: the batch's verdicts are
/// final, so gather and record at once.
impl Stage for DigestStage {
    fn name(&self) -> &'static str {
        "digest"
    }

    fn process(&mut self, batch: &mut Batch, now: Timestamp) {
        self.gather(batch);
        self.record(batch, None, now);
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
