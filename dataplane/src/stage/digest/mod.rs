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
//! went into a queue has moved there. So the stage works in two steps:
//! [`DigestStage::gather`] reads the keys of the packets right after they
//! are parsed ([`crate::chain::Chain::process_local`], while the headers
//! are in the cache; the frame is as it came in, and what later stages
//! change, the TTL, the MACs, an Icarus option's bits, is left out of the
//! key), and [`DigestStage::record`], at the end of
//! [`crate::chain::Chain::process_shared`], hashes the keys of the packets
//! still forwarded, a batch at a time, into the current window. IPv4 keys (6
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

use kernels::{HashPair, Hasher};

use crate::clock::Timestamp;
use crate::packet::{BATCH_SIZE, Batch, Packet};
use crate::pipeline::Stage;
use crate::wire::IpVersion;

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

/// Keys gathered from a batch, kept with the slot they came from (bit 7:
/// the originated batch).
const FROM_ORIGINATED: u8 = 0x80;
/// Keys a chain gathers per batch at most: its packets and the held
/// packets released with them.
const MAX_KEYS: usize = 2 * BATCH_SIZE;

/// The digest stage (see the module docs).
#[derive(Debug)]
pub struct DigestStage {
    ring: SharedRing,
    /// The ring's hash key: keys are hashed as they are gathered.
    hasher: Hasher,
    /// One gather's keys, by family.
    keys4: [[u32; V4_WORDS]; BATCH_SIZE],
    keys6: [[u32; V6_WORDS]; BATCH_SIZE],
    from4: [u8; BATCH_SIZE],
    from6: [u8; BATCH_SIZE],
    /// The batch's hashed keys and the slots they came from.
    pairs: [HashPair; MAX_KEYS],
    from: [u8; MAX_KEYS],
    n: usize,
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
        let memory_bytes = ring.memory_bytes();
        let hasher = ring.hasher();
        Ok(DigestStage {
            ring: Arc::new(Mutex::new(ring)),
            hasher,
            keys4: [[0; V4_WORDS]; BATCH_SIZE],
            keys6: [[0; V6_WORDS]; BATCH_SIZE],
            from4: [0; BATCH_SIZE],
            from6: [0; BATCH_SIZE],
            pairs: [HashPair::default(); MAX_KEYS],
            from: [0; MAX_KEYS],
            n: 0,
            no_key: [0; 2],
            counters: DigestCounters {
                memory_bytes,
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

    /// Reads and hashes the key of every live packet of `batch` (see the
    /// module docs).
    pub fn gather(&mut self, batch: &Batch) {
        self.gather_from(batch, 0, u32::MAX);
    }

    /// Reads and hashes the keys of the held packets released into the
    /// originated batch (bit `i` of `released`: frame `i`).
    pub fn gather_released(&mut self, originated: &Batch, released: u32) {
        if released != 0 {
            self.gather_from(originated, FROM_ORIGINATED, released);
        }
    }

    fn gather_from(&mut self, batch: &Batch, tag: u8, which: u32) {
        let skip = usize::from(tag != 0);
        let (mut n4, mut n6) = (0, 0);
        for (i, p) in batch.packets().iter().enumerate() {
            if which & (1u32 << i) == 0 || !p.is_live() {
                continue;
            }
            // Written in place: the key goes straight into its slot, kept
            // only when it is whole.
            let (version, ip, hlen, total) = match &p.parsed {
                Some(x) => (
                    x.ip_version,
                    p.data().get(x.l3_offset..).unwrap_or_default(),
                    x.ip_header_len,
                    x.ip_total_len,
                ),
                None => (None, &[][..], 0, 0),
            };
            let ok = match version {
                Some(IpVersion::V4) if n4 < BATCH_SIZE => {
                    let w = &mut self.keys4[n4];
                    let ok = key::v4_parsed_into(ip, hlen, total, w);
                    w[0] = key::fold_port(w[0], p.ingress);
                    self.from4[n4] = tag | i as u8;
                    n4 += usize::from(ok);
                    ok
                }
                Some(IpVersion::V6) if n6 < BATCH_SIZE => {
                    let w = &mut self.keys6[n6];
                    let ok = key::v6_into(ip, Completeness::AsCaptured, w).is_ok();
                    w[0] = key::fold_port(w[0], p.ingress);
                    self.from6[n6] = tag | i as u8;
                    n6 += usize::from(ok);
                    ok
                }
                _ => false,
            };
            if !ok {
                self.no_key[skip] |= 1u64 << i;
            }
        }
        // Hashed a family at a time, a batch at once, into the batch's
        // pairs.
        let n = self.n;
        let (n4, n6) = (
            n4.min(MAX_KEYS - n),
            n6.min(MAX_KEYS - n - n4.min(MAX_KEYS - n)),
        );
        if n4 > 0 {
            self.hasher
                .hash_batch(&self.keys4[..n4], &mut self.pairs[n..n + n4]);
            self.from[n..n + n4].copy_from_slice(&self.from4[..n4]);
        }
        if n6 > 0 {
            let m = n + n4;
            self.hasher
                .hash_batch(&self.keys6[..n6], &mut self.pairs[m..m + n6]);
            self.from[m..m + n6].copy_from_slice(&self.from6[..n6]);
        }
        self.n = n + n4 + n6;
    }

    /// Records the gathered keys of the packets whose final verdict
    /// forwards them (`originated`: the batch [`gather_released`]
    /// read), at `now`; closes a window that is due.
    ///
    /// [`gather_released`]: Self::gather_released
    pub fn record(&mut self, batch: &Batch, originated: Option<&Batch>, now: Timestamp) {
        let (mut first, mut last) = (u64::MAX, 0u64);
        let packet = |from: u8| {
            let b = if from & FROM_ORIGINATED != 0 {
                originated.map_or(&[][..], Batch::packets)
            } else {
                batch.packets()
            };
            b.get(usize::from(from & !FROM_ORIGINATED))
                .filter(|p| forwarded(p))
        };
        // Pairs are compacted in place over those whose packet is no
        // longer forwarded (dropped by the Icarus or heavy-flow stages, or
        // at egress).
        let mut m = 0;
        for i in 0..self.n {
            if let Some(p) = packet(self.from[i]) {
                let t = p.ts.as_nanos();
                (first, last) = (first.min(t), last.max(t));
                self.pairs[m] = self.pairs[i];
                m += 1;
            }
        }
        for (k, tag) in [(0, 0u8), (1, FROM_ORIGINATED)] {
            let mut bits = self.no_key[k];
            while bits != 0 {
                let i = bits.trailing_zeros() as u8;
                bits &= bits - 1;
                self.counters.skipped += u64::from(packet(tag | i).is_some());
            }
        }
        let span = if first <= last {
            (Timestamp::from_nanos(first), Timestamp::from_nanos(last))
        } else {
            (now, now)
        };
        {
            let mut ring = lock(&self.ring);
            ring.record_pairs(now, span, &self.pairs[..m]);
            let c = ring.counters();
            self.counters.recorded = c.recorded;
            self.counters.windows = c.closed;
            self.counters.early = c.early;
        }
        self.n = 0;
        self.no_key = [0; 2];
    }
}

/// Forwarded with a port to go to (a forward to no port sends nothing).
#[inline]
fn forwarded(p: &Packet) -> bool {
    p.verdict.is_forwarded() && !p.verdict.ports().is_empty()
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
