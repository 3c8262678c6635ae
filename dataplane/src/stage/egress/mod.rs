//! The egress stage: every copy a packet sends out of a port, through the
//! port's queue when it has one.
//!
//! It is the last stage of the router's chain ([`crate::chain::Chain`]),
//! the same for the live router and for replay. For every live packet and
//! every port of its verdict but its ingress port (a copy back out of the
//! ingress is counted as `hairpin` and not sent, unless the forwarding
//! stage routed the packet back out of it:
//! [`Packet::to_ingress`](crate::packet::Packet::to_ingress)):
//!
//! * a port **without a queue** sends the copy at once, at the packet's
//!   arrival time;
//! * a port **with a queue** (an `sfb` table in the config) copies the
//!   frame into a buffer from the stage's pool (the packet's last copy
//!   takes the frame's own buffer, leaving the pool's empty one in the
//!   batch: no copy) and offers it to the port's
//!   [`SfbQueue`] (Stochastic Fair Blue in front of a token-bucket shaped
//!   FIFO, [`shaper`]) at the packet's arrival time, all of a batch's
//!   copies for that port in one [`SfbQueue::offer_batch`], the path the
//!   `sfb/enqueue-dequeue` benchmark measures. SFB's decision becomes the
//!   packet's verdict: a drop removes the port from the packet's ports (the
//!   packet is dropped for that reason when no port is left, so the chain
//!   counts it); a mark sets ECN CE on the queued copy (the IPv4 checksum
//!   fixed) and turns the verdict into [`Verdict::Mark`]. A queued copy is
//!   sent when the shaper releases it, at the release time.
//!
//! A copy leaving a port in the Icarus `strip_on` list loses its Icarus
//! option first (the other copies of the packet keep theirs). A packet
//! whose insertion the Icarus stage deferred
//! ([`Packet::icarus_pending`](crate::packet::Packet::icarus_pending))
//! gets the option ([`Egress::set_icarus_insert`]) in each copy leaving by
//! a port that keeps it; a copy leaving by a stripping port goes out as it
//! came and counts as stripped.
//!
//! Copies go to a [`Transmit`]: a live socket, a capture file per port, or
//! memory. Each [`TxFrame`] carries the arrival and departure times, so the
//! owner can measure the time through the router and in the queue.
//!
//! # Time
//!
//! The stage never reads a clock: a batch's `now` and each packet's arrival
//! time come from the owner (monotonic time live, capture time on replay).
//! A queued copy is offered at its packet's time (clamped to stay between
//! the port's previous arrival and `now`), so the queue drains between two
//! arrivals exactly as the shaper says, and departures are reported at the
//! time the shaper released them, however late the owner asks. On replay
//! the result is therefore deterministic.
//!
//! # Buffers
//!
//! Queued copies live in a pool of buffers handed out by index with a free
//! list: once the pool has grown to the queues' high-water mark, nothing is
//! allocated per packet.
//!
//! # Accounting
//!
//! Per port, every copy handed to it is sent, failed to send, dropped by a
//! reason, still queued, or dropped at shutdown:
//! `copies == sent + send_errors + dropped + backlog + shutdown_dropped`
//! ([`PortCounters::is_consistent`]). At a live router's shutdown the owner
//! sends what is due until its deadline, then [`Egress::discard_all`] drops
//! the rest; those packets were counted as forwarded by the chain, so the
//! stage reports how many of them were a packet's only copy
//! ([`Egress::shutdown_discarded`]) for the owner to move from forwarded to
//! dropped. On replay [`Egress::drain_all`] sends everything at the times
//! the shaper releases it instead; where workers share a queue, the last
//! of them to end drains it.

pub mod shaper;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::Serialize;

pub use shaper::{Departure, EgressConfig, EgressQueue, EgressStats, fmt_rate};

use crate::clock::Timestamp;
use crate::flow::FlowKey;
use crate::packet::{Batch, DropCounters, DropReason, Packet, PortSet, Transmit, TxFrame, Verdict};
use crate::stage::sfb::{
    Arrival, Enqueued, FairStats, Feed, PortKeys, SfbConfig, SfbConfigError, SfbCounters, SfbPeaks,
    SfbQueue,
};
use crate::timing::{Lap, Step};
use crate::wire::icarus::Filter;
use crate::wire::{icarus, set_ce_at};

/// A port whose SFB settings were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("interfaces[{port}].sfb.{}: {}", err.key, err.reason)]
pub struct PortConfigError {
    /// The port.
    pub port: usize,
    /// What is wrong.
    pub err: SfbConfigError,
}

/// One port of the stage (port `i` is the `i`-th spec).
#[derive(Debug, Clone, PartialEq)]
pub struct PortSpec {
    /// The interface name, for reports.
    pub name: String,
    /// SFB and the shaper when the port has a queue; `None`: copies leave
    /// at once.
    pub queue: Option<(SfbConfig, EgressConfig)>,
    /// Strip the Icarus option from copies leaving here (an edge port).
    pub strip: bool,
}

/// One port's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PortCounters {
    /// Copies handed to the port.
    pub copies: u64,
    /// Copies sent.
    pub sent: u64,
    /// Bytes of those copies (wire length).
    pub sent_bytes: u64,
    /// Copies the port's socket or file refused.
    pub send_errors: u64,
    /// Copies the queue took.
    pub enqueued: u64,
    /// Copies SFB or the queue refused, by reason.
    #[serde(serialize_with = "serialize_drops")]
    pub dropped: DropCounters,
    /// Copies still queued at a live shutdown's deadline, dropped.
    pub shutdown_dropped: u64,
    /// Copies not sent back out of their ingress port.
    pub hairpin: u64,
    /// Copies whose Icarus option was removed.
    pub stripped: u64,
    /// Copies whose bytes were copied rather than sent from where the
    /// frame arrived: into the port's queue (a frame lent by the port
    /// backend, which the queue keeps past its loan, or a multicast copy
    /// beside another), or into a buffer to insert or remove an Icarus
    /// option. A unicast frame sent at once is not copied.
    pub frame_copies: u64,
    /// Sum over queued copies that left of their time in the queue, ns.
    pub sojourn_sum_ns: u64,
    /// The longest of those, ns.
    pub sojourn_max_ns: u64,
}

fn serialize_drops<S: serde::Serializer>(d: &DropCounters, s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(d.nonzero().map(|(r, n)| (r.name(), n)))
}

impl PortCounters {
    /// `copies == sent + send_errors + dropped + backlog + shutdown_dropped`
    /// with `backlog` copies still queued.
    pub fn is_consistent(&self, backlog: u64) -> bool {
        self.copies
            == self.sent + self.send_errors + self.dropped.total() + backlog + self.shutdown_dropped
    }

    /// Adds another worker's counters for the same port.
    pub fn merge(&mut self, o: &PortCounters) {
        self.copies += o.copies;
        self.sent += o.sent;
        self.sent_bytes += o.sent_bytes;
        self.send_errors += o.send_errors;
        self.enqueued += o.enqueued;
        self.dropped.merge(&o.dropped);
        self.shutdown_dropped += o.shutdown_dropped;
        self.hairpin += o.hairpin;
        self.stripped += o.stripped;
        self.frame_copies += o.frame_copies;
        self.sojourn_sum_ns = self.sojourn_sum_ns.wrapping_add(o.sojourn_sum_ns);
        self.sojourn_max_ns = self.sojourn_max_ns.max(o.sojourn_max_ns);
    }

    /// Mean time in the queue of the queued copies that left, ms.
    pub fn mean_sojourn_ms(&self) -> f64 {
        let n = self.enqueued.saturating_sub(self.shutdown_dropped);
        if n == 0 {
            0.0
        } else {
            self.sojourn_sum_ns as f64 / n as f64 / 1e6
        }
    }
}

/// A flow in an SFB penalty box.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PenalisedSummary {
    /// The flow (`src:port -> dst:port proto`).
    pub flow: String,
    /// Packets the penalty bucket admitted.
    pub admitted: u64,
    /// Packets it dropped.
    pub dropped: u64,
}

/// A queue's SFB figures, as `tc -s qdisc show` prints sch_sfb's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SfbSummary {
    /// earlydrop, penaltydrop, bucketdrop, queuedrop, childdrop, marked,
    /// ratedrop, ratemark.
    #[serde(flatten)]
    pub counters: SfbCounters,
    /// Largest bin count now.
    pub maxqlen: u16,
    /// Largest marking probability now, Q0.16.
    pub maxprob: u16,
    /// Mean marking probability now, Q0.16.
    pub avgprob: u16,
    /// The highest of each of those over the run.
    pub peak: SfbPeaks,
    /// Flows recently in the penalty box (at most 16).
    pub penalised: Vec<PenalisedSummary>,
    /// The fair-share check's state (`None`: `profile = "linux"`).
    pub fair: Option<FairStats>,
}

/// Penalised flows kept in a merged summary.
const MAX_PENALISED: usize = 16;

impl SfbSummary {
    /// Adds another worker's figures for the same port (counts add up,
    /// the largest bin and probabilities take the larger; of the
    /// fair-share checks, the larger share and the sums of the flows).
    pub fn merge(&mut self, o: &SfbSummary) {
        self.counters.merge(&o.counters);
        self.fair = match (self.fair, o.fair) {
            (Some(a), Some(b)) => Some(FairStats {
                share_bps: a.share_bps.max(b.share_bps),
                competing: a.competing + b.competing,
                held: a.held + b.held,
            }),
            (a, b) => a.or(b),
        };
        self.maxqlen = self.maxqlen.max(o.maxqlen);
        self.peak = self.peak.max(o.peak);
        self.maxprob = self.maxprob.max(o.maxprob);
        self.avgprob = self.avgprob.max(o.avgprob);
        let room = MAX_PENALISED.saturating_sub(self.penalised.len());
        self.penalised
            .extend(o.penalised.iter().take(room).cloned());
    }
}

/// One port's report.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PortSummary {
    /// The interface.
    pub name: String,
    /// Its counters.
    #[serde(flatten)]
    pub counters: PortCounters,
    /// Copies queued now.
    pub backlog_packets: u64,
    /// Bytes queued now.
    pub backlog_bytes: u64,
    /// The rate the port's queue drains at, bit/s (`None`: no queue; 0:
    /// a queue that is not shaped).
    pub rate_bps: Option<u64>,
    /// SFB's figures, when the port has a queue.
    pub sfb: Option<SfbSummary>,
    /// How much of its rate a shaped port sent (`None`: no queue, not
    /// shaped, or nothing offered yet).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link: Option<LinkUse>,
}

impl PortSummary {
    /// Adds another worker's report for the same port.
    pub fn merge(&mut self, o: &PortSummary) {
        self.counters.merge(&o.counters);
        self.backlog_packets += o.backlog_packets;
        self.backlog_bytes += o.backlog_bytes;
        self.rate_bps = self.rate_bps.or(o.rate_bps);
        self.link = self.link.or(o.link);
        match (&mut self.sfb, &o.sfb) {
            (Some(a), Some(b)) => a.merge(b),
            (a @ None, Some(b)) => *a = Some(b.clone()),
            _ => {}
        }
    }

    /// Whether every copy is accounted for
    /// ([`PortCounters::is_consistent`]).
    pub fn is_consistent(&self) -> bool {
        self.counters.is_consistent(self.backlog_packets)
    }
}

/// A port queue's figures at one moment: what [`PortSummary`] reports
/// about the queue itself rather than one worker's copies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueSummary {
    /// Copies queued.
    pub backlog_packets: u64,
    /// Their bytes.
    pub backlog_bytes: u64,
    /// The configured rate, bit/s (0: not shaped).
    pub rate_bps: u64,
    /// SFB's figures.
    pub sfb: SfbSummary,
    /// How much of its rate the port sent.
    pub link: Option<LinkUse>,
}

impl QueueSummary {
    /// Puts these figures into a port's report.
    pub fn apply(self, s: &mut PortSummary) {
        s.backlog_packets = self.backlog_packets;
        s.backlog_bytes = self.backlog_bytes;
        s.rate_bps = Some(self.rate_bps);
        s.sfb = Some(self.sfb);
        s.link = self.link;
    }
}

/// How much of its rate a shaped port sent: the bytes that left its
/// queue over the shaped rate, over the last second or so of the queue's
/// clock (the backend's: monotonic time live, capture time on replay) and
/// over the run (from the first copy offered to the port). In JSON: `last`
/// and `run` (the ratios), `last_s` and `run_s` (their spans, s),
/// `last_sent_bps`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkUse {
    /// The shaped rate, bit/s (not 0).
    pub rate_bps: u64,
    /// The last window, ns (at least [`LINK_WINDOW_NS`] once one has
    /// passed), and the bytes sent in it.
    pub last_ns: u64,
    /// See `last_ns`.
    pub last_bytes: u64,
    /// The run, ns, and the bytes sent in it.
    pub run_ns: u64,
    /// See `run_ns`.
    pub run_bytes: u64,
}

impl LinkUse {
    /// Bit/s sent over `ns`.
    fn bps(ns: u64, bytes: u64) -> f64 {
        if ns == 0 {
            0.0
        } else {
            bytes as f64 * 8e9 / ns as f64
        }
    }

    /// Sent over the rate, over the last window.
    pub fn last(&self) -> f64 {
        self.last_sent_bps() / self.rate_bps.max(1) as f64
    }

    /// What was sent in the last window, bit/s.
    pub fn last_sent_bps(&self) -> f64 {
        Self::bps(self.last_ns, self.last_bytes)
    }

    /// Sent over the rate, over the run.
    pub fn run(&self) -> f64 {
        Self::bps(self.run_ns, self.run_bytes) / self.rate_bps.max(1) as f64
    }
}

impl Serialize for LinkUse {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("LinkUse", 5)?;
        st.serialize_field("last", &self.last())?;
        st.serialize_field("last_s", &(self.last_ns as f64 / 1e9))?;
        st.serialize_field("last_sent_bps", &(self.last_sent_bps() as u64))?;
        st.serialize_field("run", &self.run())?;
        st.serialize_field("run_s", &(self.run_ns as f64 / 1e9))?;
        st.end()
    }
}

/// The window of [`LinkUse::last`]: one second of the queue's clock.
pub const LINK_WINDOW_NS: u64 = 1_000_000_000;

/// Measures [`LinkUse`]: rolled once per batch offered or drain, off the
/// per-packet path.
#[derive(Debug, Clone, Copy, Default)]
struct LinkMeter {
    /// The first copy offered (`None`: none yet).
    start: Option<Timestamp>,
    /// The window being counted: since when, and the bytes sent by then.
    window: (Timestamp, u64),
    /// The last whole window: its ns and its bytes.
    last: Option<(u64, u64)>,
}

impl LinkMeter {
    /// The queue is drained to `now`, having sent `bytes_out` in all.
    fn roll(&mut self, now: Timestamp, bytes_out: u64) {
        let Some(_) = self.start else {
            self.start = Some(now);
            self.window = (now, bytes_out);
            return;
        };
        let (since, at) = self.window;
        let ns = now.nanos_since(since);
        if ns >= LINK_WINDOW_NS {
            self.last = Some((ns, bytes_out.saturating_sub(at)));
            self.window = (now, bytes_out);
        }
    }

    /// The figures at `now` for a port shaped to `rate_bps` that has sent
    /// `bytes_out` (`None` when it is not shaped or nothing was offered).
    fn use_at(&self, now: Timestamp, bytes_out: u64, rate_bps: u64) -> Option<LinkUse> {
        let start = self.start?;
        if rate_bps == 0 {
            return None;
        }
        let (since, at) = self.window;
        let current = (now.nanos_since(since), bytes_out.saturating_sub(at));
        // The window under way once it is a whole one, else the last whole
        // one, else what there is.
        let (last_ns, last_bytes) = match self.last {
            Some(last) if current.0 < LINK_WINDOW_NS => last,
            _ => current,
        };
        Some(LinkUse {
            rate_bps,
            last_ns,
            last_bytes,
            run_ns: now.nanos_since(start),
            run_bytes: bytes_out,
        })
    }
}

/// The port queues of a chain, shared with every worker's stage (see
/// [`Egress::queue_view`]).
#[derive(Debug, Clone)]
pub struct QueueView {
    queues: Vec<Option<SharedQueue>>,
}

impl QueueView {
    /// Each port's queue figures at `now`, in port order (`None`: the port
    /// has no queue).
    pub fn summaries(&self, now: Timestamp) -> Vec<Option<QueueSummary>> {
        self.queues
            .iter()
            .map(|q| q.as_ref().map(|q| queue_summary(q, now)))
            .collect()
    }
}

/// `q`'s figures at `now`.
fn queue_summary(q: &SharedQueue, now: Timestamp) -> QueueSummary {
    let guard = lock(q);
    let q = &guard.queue;
    let st = q.stats(now);
    let eq = q.queue();
    QueueSummary {
        backlog_packets: eq.len() as u64,
        backlog_bytes: eq.backlog_bytes(),
        rate_bps: eq.config().rate_bps,
        link: guard
            .link
            .use_at(now, eq.stats().bytes_out, eq.config().rate_bps),
        sfb: SfbSummary {
            counters: st.counters,
            maxqlen: st.maxqlen,
            peak: st.peak,
            maxprob: st.maxprob,
            avgprob: st.avgprob,
            penalised: st
                .penalised
                .iter()
                .map(|f| PenalisedSummary {
                    flow: f.flow.to_string(),
                    admitted: f.admitted,
                    dropped: f.dropped,
                })
                .collect(),
            fair: st.fair,
        },
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

    /// A free slot, emptied, and its buffer.
    #[inline]
    fn take(&mut self) -> (u32, &mut Vec<u8>) {
        let i = match self.free.pop() {
            Some(i) if (i as usize) < self.bufs.len() => i,
            _ => self.grow(),
        };
        let b = &mut self.bufs[i as usize];
        b.clear();
        (i, b)
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
    fn buf_mut(&mut self, i: u32) -> Option<&mut Vec<u8>> {
        self.bufs.get_mut(i as usize)
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

/// A queued copy: its pool slot and its length on the wire.
#[derive(Debug, Clone, Copy, Default)]
struct Held {
    slot: u32,
    wire_len: u32,
}

/// A port's queue with the buffers of its queued copies: one per port,
/// shared by every worker's stage ([`Egress::share_queues`]).
#[derive(Debug)]
struct QueueState {
    /// Items are slots of `pool`.
    queue: SfbQueue<Held>,
    pool: FramePool,
    /// The latest arrival offered to the queue.
    last: Timestamp,
    /// How much of its rate the port sends.
    link: LinkMeter,
    /// Stages sharing the queue whose input has not ended
    /// ([`Egress::drain_all`]): the last of them drains it.
    running: usize,
}

/// A handle on a port's [`QueueState`].
type SharedQueue = Arc<Mutex<QueueState>>;

/// Locks a port's queue. A worker that panicked while holding it left the
/// queue in a state SFB and the shaper can still work with (every update
/// is a counter or a list push), so a poisoned lock is taken as it is.
fn lock(q: &SharedQueue) -> MutexGuard<'_, QueueState> {
    q.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Debug)]
struct Port {
    name: String,
    queue: Option<SharedQueue>,
    counters: PortCounters,
}

/// The egress stage (see the module docs).
#[derive(Debug)]
pub struct Egress {
    ports: Vec<Port>,
    /// Ports with a queue.
    queued: u64,
    /// Ports that strip the Icarus option.
    strip: u64,
    /// Ports that exist.
    all: u64,
    /// Whether this stage reports its queues' backlog and SFB figures
    /// (the one that made them; see [`Egress::share_queues`]).
    reports_queues: bool,
    keys: PortKeys,
    /// The filter of a deferred Icarus insertion (see the module docs).
    icarus_insert: Option<Filter>,
    scratch: Vec<u8>,
    /// Forwarded packets whose port set was empty (nothing sent).
    no_egress: u64,
    /// Discarded at shutdown: sole copies, and of those the marked ones.
    discarded_sole: u64,
    discarded_sole_marked: u64,
    /// This stage's input has ended ([`Egress::drain_all`]).
    ended: bool,
}

impl Egress {
    /// One port per spec, port `i` being `specs[i]` (at most 64).
    ///
    /// # Errors
    /// A port's SFB settings, with the port and the key at fault.
    pub fn new(specs: Vec<PortSpec>) -> Result<Self, PortConfigError> {
        let mut ports = Vec::with_capacity(specs.len());
        let (mut queued, mut strip, mut all) = (0u64, 0u64, 0u64);
        for (i, s) in specs
            .into_iter()
            .take(usize::from(PortSet::MAX_PORTS))
            .enumerate()
        {
            let bit = 1u64 << i;
            all |= bit;
            if s.strip {
                strip |= bit;
            }
            let queue = match s.queue {
                Some((sfb, egress)) => {
                    queued |= bit;
                    let limit = sfb.limit.min(egress.limit);
                    Some(Arc::new(Mutex::new(QueueState {
                        queue: SfbQueue::new(sfb, egress)
                            .map_err(|err| PortConfigError { port: i, err })?,
                        pool: FramePool::with_capacity(limit.saturating_add(1).min(POOL_PREALLOC)),
                        last: Timestamp::ZERO,
                        link: LinkMeter::default(),
                        running: 1,
                    })))
                }
                None => None,
            };
            ports.push(Port {
                name: s.name,
                queue,
                counters: PortCounters::default(),
            });
        }
        Ok(Egress {
            ports,
            queued,
            strip,
            all,
            reports_queues: true,
            keys: PortKeys::new(),
            icarus_insert: None,
            scratch: Vec::with_capacity(FRAME_CAPACITY),
            no_egress: 0,
            discarded_sole: 0,
            discarded_sole_marked: 0,
            ended: false,
        })
    }

    /// The filter the copies of a packet whose Icarus insertion was
    /// deferred get (the Icarus stage's
    /// [`inserted_filter`](crate::stage::icarus::Icarus::inserted_filter)).
    pub fn set_icarus_insert(&mut self, filter: Filter) {
        self.icarus_insert = Some(filter);
    }

    /// Makes this stage use `owner`'s port queues instead of its own, so
    /// that every worker's copies for a port go through one queue, which
    /// holds the port's rate and gives SFB the whole queue to judge
    /// (another worker's stage built from the same config). Any worker
    /// sends what the shaper releases, through its own ports. This stage's
    /// counters stay its own (what it offered, sent, dropped); the queues'
    /// backlog and SFB figures are reported by `owner` alone, so that
    /// merging the workers' reports counts them once.
    ///
    /// # Panics
    /// Never; a port `owner` lacks, or has no queue for, keeps its own.
    pub fn share_queues(&mut self, owner: &Egress) {
        for (p, o) in self.ports.iter_mut().zip(&owner.ports) {
            if let (Some(q), Some(oq)) = (&mut p.queue, &o.queue)
                && !Arc::ptr_eq(q, oq)
            {
                *q = oq.clone();
                lock(oq).running += 1;
            }
        }
        self.reports_queues = false;
    }

    /// The ports that have a queue.
    pub fn queued_ports(&self) -> PortSet {
        PortSet::from_mask(self.queued)
    }

    /// Number of ports.
    pub fn ports(&self) -> usize {
        self.ports.len()
    }

    /// Port `port`'s interface name.
    pub fn port_name(&self, port: usize) -> Option<&str> {
        self.ports.get(port).map(|p| p.name.as_str())
    }

    /// Forwarded packets whose port set was empty (nothing sent).
    pub fn no_egress(&self) -> u64 {
        self.no_egress
    }

    /// Copies queued and their bytes, over every queue.
    pub fn backlog(&self) -> (usize, u64) {
        self.queues().fold((0, 0), |(n, b), q| {
            let st = lock(q);
            (
                n + st.queue.queue().len(),
                b + st.queue.queue().backlog_bytes(),
            )
        })
    }

    /// The earliest time a queued copy is released (`None`: all empty).
    pub fn next_departure(&self) -> Option<Timestamp> {
        self.queues()
            .filter_map(|q| lock(q).queue.queue().next_departure())
            .min()
    }

    /// Pool slots made so far over every queue (bounded by the queues'
    /// limits plus one each).
    pub fn pool_slots(&self) -> usize {
        self.queues().map(|q| lock(q).pool.slots()).sum()
    }

    /// Each port's counters, in port order.
    pub fn counters(&self) -> impl Iterator<Item = &PortCounters> {
        self.ports.iter().map(|p| &p.counters)
    }

    /// The port queues.
    fn queues(&self) -> impl Iterator<Item = &SharedQueue> {
        self.ports.iter().filter_map(|p| p.queue.as_ref())
    }

    /// Every port's report at `now`: counters, backlog, and for a queued
    /// port SFB's figures (`tc -s qdisc` style; only in the stage that
    /// made the queues, see [`Egress::share_queues`]).
    pub fn summaries(&self, now: Timestamp) -> Vec<PortSummary> {
        self.ports
            .iter()
            .map(|p| {
                let mut s = PortSummary {
                    name: p.name.clone(),
                    counters: p.counters.clone(),
                    ..PortSummary::default()
                };
                if let Some(q) = &p.queue {
                    if self.reports_queues {
                        queue_summary(q, now).apply(&mut s);
                    } else {
                        // Only the rate: the queue's figures are its owner's
                        // to report, and cost a lock and its flow strings.
                        s.rate_bps = Some(lock(q).queue.queue().config().rate_bps);
                    }
                }
                s
            })
            .collect()
    }

    /// A handle on this stage's port queues, to read them after the
    /// workers that share them have stopped ([`QueueView::summaries`]).
    pub fn queue_view(&self) -> QueueView {
        QueueView {
            queues: self.ports.iter().map(|p| p.queue.clone()).collect(),
        }
    }

    /// Sends every packet of `batch` out of its ports (see the module
    /// docs); `now` is the batch's time.
    pub fn process(&mut self, batch: &mut Batch, now: Timestamp, tx: &mut impl Transmit) {
        let mut lap = Lap::start();
        self.send_direct(batch, now, tx);
        lap.lap(Step::EgressDirect);
        let mut q = self.queued;
        while q != 0 {
            let port = q.trailing_zeros() as usize;
            q &= q - 1;
            self.offer(port, batch, now, tx, &mut lap);
        }
    }

    /// Sends every queued copy the shapers released by `now`; returns how
    /// many. A queue another worker holds at the moment is left to it.
    pub fn send_due(&mut self, now: Timestamp, tx: &mut impl Transmit) -> usize {
        let mut n = 0;
        for port in 0..self.ports.len() {
            n += self.drain(port, now, tx, false);
        }
        n
    }

    /// The end of this stage's input on capture time (the end of a
    /// replay): sends every queued copy at the time its shaper releases
    /// it, capture time running on until the queues are empty; returns how
    /// many. A queue shared with stages whose input has not ended
    /// ([`share_queues`](Self::share_queues)) is left to them: their
    /// arrivals are still to come, and drained now, to the end of time,
    /// the queue would take them behind an empty shaper hundreds of
    /// milliseconds on, as if it had held twice its limit. The last stage
    /// to end drains it.
    pub fn drain_all(&mut self, tx: &mut impl Transmit) -> usize {
        self.end();
        let mut n = 0;
        for port in 0..self.ports.len() {
            let last = self.ports[port]
                .queue
                .as_ref()
                .is_some_and(|q| lock(q).running == 0);
            if last {
                n += self.drain(port, Timestamp::from_nanos(u64::MAX), tx, true);
            }
        }
        n
    }

    /// This stage's input has ended: it no longer holds its queues back
    /// from being drained (once, however often it is called).
    fn end(&mut self) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        for q in self.queues() {
            let mut st = lock(q);
            st.running = st.running.saturating_sub(1);
        }
    }

    /// Drops every queued copy (a live shutdown, after the drain
    /// deadline); returns how many.
    pub fn discard_all(&mut self) -> u64 {
        let mut n = 0;
        for p in &mut self.ports {
            let Some(q) = &p.queue else { continue };
            let mut guard = lock(q);
            let st = &mut *guard;
            while let Some(d) = st.queue.dequeue(Timestamp::from_nanos(u64::MAX)) {
                p.counters.shutdown_dropped += 1;
                let f = st.pool.flags(d.item.slot);
                if f & SOLE != 0 {
                    self.discarded_sole += 1;
                    if f & MARKED != 0 {
                        self.discarded_sole_marked += 1;
                    }
                }
                st.pool.put(d.item.slot);
                n += 1;
            }
        }
        n
    }

    /// Of the copies [`discard_all`](Self::discard_all) dropped, those that
    /// were their packet's only copy, and how many of those were marked:
    /// packets the chain counted as forwarded (and marked) that never left.
    pub fn shutdown_discarded(&self) -> (u64, u64) {
        (self.discarded_sole, self.discarded_sole_marked)
    }

    /// The copies for ports without a queue, sent at once.
    fn send_direct(&mut self, batch: &Batch, now: Timestamp, tx: &mut impl Transmit) {
        let direct = self.all & !self.queued;
        for p in batch.packets() {
            let ports = match p.verdict {
                Verdict::Forward(ps) | Verdict::Mark(ps) => ps.mask(),
                _ => continue,
            };
            if ports == 0 {
                self.no_egress += 1;
                continue;
            }
            let ingress = p.ingress_mask();
            if ports & ingress & self.all != 0 {
                self.ports[usize::from(p.ingress)].counters.hairpin += 1;
            }
            let mut out = ports & !ingress & direct;
            while out != 0 {
                let o = out.trailing_zeros() as usize;
                out &= out - 1;
                let strip = self.strip & (1u64 << o) != 0;
                let port = &mut self.ports[o];
                port.counters.copies += 1;
                let ip = p.parsed.as_ref().filter(|x| x.is_ip());
                let (frame, wire_len) = match ip {
                    Some(_) if strip && p.icarus_pending != 0 => {
                        port.counters.stripped += 1;
                        (p.data(), p.orig_len)
                    }
                    Some(x) if strip || p.icarus_pending != 0 => {
                        port.counters.frame_copies += 1;
                        let s = &mut self.scratch;
                        s.clear();
                        s.extend_from_slice(p.data());
                        if icarus_out(
                            s,
                            x.l3_offset,
                            strip,
                            p.icarus_pending != 0,
                            self.icarus_insert.as_ref(),
                        ) {
                            port.counters.stripped += 1;
                        }
                        (
                            s.as_slice(),
                            wire_len_of(p.orig_len, p.data().len(), s.len()),
                        )
                    }
                    _ => (p.data(), p.orig_len),
                };
                let t = p.ts.min(now);
                let f = TxFrame {
                    port: o as u8,
                    frame,
                    wire_len,
                    arrived: t,
                    departs: t,
                    queued: false,
                };
                if tx.send(&f) {
                    port.counters.sent += 1;
                    port.counters.sent_bytes += u64::from(wire_len);
                } else {
                    port.counters.send_errors += 1;
                }
            }
        }
    }

    /// Offers the batch's copies for queued port `port` (see the module
    /// docs), then sends what the shaper released by `now`.
    /// `lap` times the steps ([`crate::timing`]).
    fn offer(
        &mut self,
        port: usize,
        batch: &mut Batch,
        now: Timestamp,
        tx: &mut impl Transmit,
        lap: &mut Lap,
    ) {
        let strip = self.strip & (1u64 << port) != 0;
        let Some(p) = self.ports.get_mut(port) else {
            return;
        };
        let Some(q) = &p.queue else {
            return;
        };
        let copies = self.keys.gather(batch, port as u8, true);
        lap.lap(Step::EgressGather);
        let mut guard = lock(q);
        let st = &mut *guard;
        st.queue.tick(now);
        lap.lap(Step::EgressLock);
        if copies != 0 {
            self.keys.hash(st.queue.sfb());
            lap.lap(Step::EgressHash);
            // Queued ports after this one (ports go in increasing order,
            // after the ports without a queue).
            let later = self.queued
                & 1u64
                    .checked_shl(port as u32 + 1)
                    .map_or(0, |b| b.wrapping_neg());
            let mut feed = PortFeed {
                port,
                strip,
                later,
                insert: self.icarus_insert.as_ref(),
                now,
                keys: &self.keys,
                packets: batch.packets_mut(),
                pool: &mut st.pool,
                last: &mut st.last,
                counters: &mut p.counters,
                tx: &mut *tx,
                current: Current::default(),
            };
            st.queue.offer_batch(&mut feed);
            lap.lap(Step::EgressOffer);
        }
        st.queue.drain_until(now, |d| {
            send_one(port, &mut st.pool, &mut p.counters, d, tx)
        });
        if copies != 0 || st.link.start.is_some() {
            st.link.roll(now, st.queue.queue().stats().bytes_out);
        }
        lap.lap(Step::EgressDrain);
    }

    /// Dequeues what port `port`'s shaper released by `now` and sends it;
    /// unless `wait`, only when no other worker holds the queue.
    fn drain(&mut self, port: usize, now: Timestamp, tx: &mut impl Transmit, wait: bool) -> usize {
        let Some(p) = self.ports.get_mut(port) else {
            return 0;
        };
        let Some(q) = &p.queue else {
            return 0;
        };
        let mut guard = if wait {
            lock(q)
        } else {
            match q.try_lock() {
                Ok(g) => g,
                Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => return 0,
            }
        };
        let st = &mut *guard;
        let n = st.queue.drain_until(now, |d| {
            send_one(port, &mut st.pool, &mut p.counters, d, tx)
        });
        if st.link.start.is_some() && now != Timestamp::from_nanos(u64::MAX) {
            st.link.roll(now, st.queue.queue().stats().bytes_out);
        }
        n
    }
}

impl Drop for Egress {
    /// A stage dropped before its input ended (its worker unwound) holds
    /// no shared queue back from the stages still running: the last of
    /// them drains it ([`Egress::drain_all`]).
    fn drop(&mut self) {
        self.end();
    }
}

/// Sends a departure from `port`'s queue and frees its buffer.
#[inline]
fn send_one(
    port: usize,
    pool: &mut FramePool,
    c: &mut PortCounters,
    d: Departure<Held>,
    tx: &mut impl Transmit,
) {
    let f = TxFrame {
        port: port as u8,
        frame: pool.buf(d.item.slot),
        wire_len: d.item.wire_len,
        arrived: d.enqueued,
        departs: d.departed,
        queued: true,
    };
    if tx.send(&f) {
        c.sent += 1;
        c.sent_bytes += u64::from(d.item.wire_len);
    } else {
        c.send_errors += 1;
    }
    let sojourn = d.departed.nanos_since(d.enqueued);
    c.sojourn_sum_ns = c.sojourn_sum_ns.wrapping_add(sojourn);
    c.sojourn_max_ns = c.sojourn_max_ns.max(sojourn);
    pool.put(d.item.slot);
}

/// The arrival [`PortFeed`] made last: where its verdict applies.
#[derive(Debug, Clone, Copy, Default)]
struct Current {
    packet: usize,
    slot: u32,
    /// The IP header's offset (`usize::MAX`: not IP).
    l3: usize,
    /// No other port takes a copy of the packet.
    sole: bool,
}

/// A batch's copies for one queued port as its queue takes them
/// ([`Feed`]): each arrival gets a pool buffer (the frame itself when no
/// later queued port takes the packet, else a copy) with the Icarus edge
/// work done; a mark is set on the buffer and the packet as soon as it is
/// decided (the copy may leave before the batch ends), a drop frees the
/// buffer and takes the port from the packet's verdict, and a departure is
/// sent at once.
struct PortFeed<'a, X> {
    port: usize,
    strip: bool,
    /// Queued ports after this one.
    later: u64,
    /// The filter of a deferred Icarus insertion.
    insert: Option<&'a Filter>,
    now: Timestamp,
    keys: &'a PortKeys,
    packets: &'a mut [Packet],
    pool: &'a mut FramePool,
    /// The latest arrival offered to the queue.
    last: &'a mut Timestamp,
    counters: &'a mut PortCounters,
    tx: &'a mut X,
    current: Current,
}

impl<X: Transmit> Feed<Held> for PortFeed<'_, X> {
    #[inline(always)]
    fn arrivals(&self) -> usize {
        self.keys.len()
    }

    #[inline(always)]
    fn time(&mut self, k: usize) -> Timestamp {
        let ts = self
            .packets
            .get(self.keys.packet(k))
            .map_or(self.now, |p| p.ts);
        let t = ts.min(self.now).max(*self.last);
        *self.last = t;
        t
    }

    #[inline(always)]
    fn arrival(&mut self, k: usize, now: Timestamp) -> (Arrival<Held>, Option<&FlowKey>) {
        let i = self.keys.packet(k);
        self.counters.copies += 1;
        let (slot, buf) = self.pool.take();
        // The keys name packets of this batch; were one missing, its copy
        // would be empty and accounted for like any other.
        let (ip, wire_len, sole) = match self.packets.get_mut(i) {
            Some(pk) => {
                let data_len = pk.data().len();
                let others = pk.verdict.ports().mask() & !pk.ingress_mask() & !(1u64 << self.port);
                if others & self.later == 0 {
                    // The packet's last copy: its frame moves into the queue
                    // (the slot takes the pool's empty buffer); a lent
                    // frame is copied, as it must outlive its loan.
                    if pk.swap_data(buf) {
                        self.counters.frame_copies += 1;
                    }
                } else {
                    self.counters.frame_copies += 1;
                    buf.extend_from_slice(pk.data());
                }
                let pending = pk.icarus_pending != 0;
                let ip = pk.parsed.as_ref().filter(|x| x.is_ip());
                if let Some(x) = ip
                    && (self.strip || pending)
                    && icarus_out(buf, x.l3_offset, self.strip, pending, self.insert)
                {
                    self.counters.stripped += 1;
                }
                (
                    ip,
                    wire_len_of(pk.orig_len, data_len, buf.len()),
                    others == 0,
                )
            }
            None => (None, 0, true),
        };
        self.current = Current {
            packet: i,
            slot,
            l3: ip.map_or(usize::MAX, |x| x.l3_offset),
            sole,
        };
        let arrival = Arrival {
            key: self.keys.key(k),
            ecn_capable: ip.is_some_and(|x| x.ecn.is_ect()),
            item: Held { slot, wire_len },
            len: wire_len,
            now,
        };
        // The flow only names a penalised flow in the reports: passed by
        // reference, not copied per packet.
        (arrival, ip.and_then(|x| x.flow.as_ref()))
    }

    #[inline(always)]
    fn verdict(&mut self, _: usize, v: Result<Enqueued, DropReason>) {
        let Current {
            packet,
            slot,
            l3,
            sole,
        } = self.current;
        let pk = self.packets.get_mut(packet);
        match v {
            Ok(how) => {
                self.counters.enqueued += 1;
                let mut flags = if sole { SOLE } else { 0 };
                if how == Enqueued::Mark {
                    if let Some(buf) = self.pool.buf_mut(slot) {
                        set_ce_at(buf, l3);
                    }
                    if let Some(pk) = pk {
                        pk.mark();
                    }
                    flags |= MARKED;
                }
                self.pool.set_flags(slot, flags);
            }
            Err(reason) => {
                self.pool.put(slot);
                self.counters.dropped.record(reason);
                if let Some(pk) = pk {
                    pk.drop_port(self.port as u8, reason);
                }
            }
        }
    }

    #[inline(always)]
    fn departed(&mut self, d: Departure<Held>) {
        send_one(self.port, self.pool, self.counters, d, self.tx);
    }
}

/// The Icarus edge work on `copy` (a copy of a frame, IP header at `l3`)
/// leaving by a port that strips (`strip`) or keeps the option: strips an
/// option it carries, or, for a deferred insertion (`pending`:
/// [`Packet::icarus_pending`](crate::packet::Packet::icarus_pending)),
/// inserts `insert` where the port keeps it. Returns whether the copy
/// counts as stripped.
fn icarus_out(
    copy: &mut Vec<u8>,
    l3: usize,
    strip: bool,
    pending: bool,
    insert: Option<&Filter>,
) -> bool {
    if pending {
        if !strip && let Some(f) = insert {
            // The Icarus stage checked that it fits.
            let _ = icarus::insert(copy, l3, f);
        }
        return strip;
    }
    strip
        && matches!(
            icarus::strip(copy, l3),
            Ok(icarus::Stripped::Removed(_) | icarus::Stripped::Neutralised)
        )
}

/// The wire length of a copy of `copy_len` bytes made from a frame of
/// `data_len` captured bytes and `orig_len` on the wire.
fn wire_len_of(orig_len: u32, data_len: usize, copy_len: usize) -> u32 {
    let cut = (orig_len as usize).saturating_sub(data_len);
    u32::try_from(copy_len + cut).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::memory::{MemoryPorts, Sent};
    use crate::pipeline::{PipelineConfig, PipelineCounters, count_verdicts, parse_batch};
    use crate::stage::wires::Wires;
    use crate::wire::LinkType;

    /// Ethernet + IPv4 + UDP to `dst` from source port `sport`, TOS `tos`.
    fn frame(dst: [u8; 4], sport: u16, tos: u8) -> Vec<u8> {
        use crate::wire::build::{self, IpHeader};
        let ip = IpHeader {
            tos,
            ..IpHeader::v4([10, 0, 0, 1], dst, build::PROTO_UDP)
        };
        build::udp_frame(
            [0, 1, 2, 3, 4, 5],
            [6, 7, 8, 9, 10, 11],
            &ip,
            sport,
            2000,
            &[],
        )
    }

    fn ms(n: u64) -> Timestamp {
        Timestamp::from_nanos(n * 1_000_000)
    }

    /// Wires, then the egress stage, as the chain runs them; every copy
    /// kept.
    struct Rig {
        wires: Wires,
        egress: Egress,
        counters: PipelineCounters,
        sink: MemoryPorts,
    }

    impl Rig {
        /// `routes[i]` out of port `i`; port `p` queued with `(sfb,
        /// egress)` for each entry of `queues`.
        fn new(routes: Vec<PortSet>, queues: &[(u8, SfbConfig, EgressConfig)]) -> Rig {
            let n = routes.len();
            let specs = (0..n)
                .map(|i| PortSpec {
                    name: format!("p{i}"),
                    queue: queues
                        .iter()
                        .find(|q| usize::from(q.0) == i)
                        .map(|&(_, s, e)| (s, e)),
                    strip: false,
                })
                .collect();
            Rig {
                wires: Wires::new(routes, false),
                egress: Egress::new(specs).unwrap(),
                counters: PipelineCounters::default(),
                sink: MemoryPorts::new(n).keep_sent(true),
            }
        }

        fn run(&mut self, b: &mut Batch, now: Timestamp) {
            let cfg = PipelineConfig {
                default_egress: PortSet::EMPTY,
                ..PipelineConfig::default()
            };
            parse_batch(&cfg, b, &mut self.counters);
            self.wires.process(b);
            self.egress.process(b, now, &mut self.sink);
            count_verdicts(b, &mut self.counters);
        }

        fn due(&mut self, now: Timestamp) -> Vec<Sent> {
            self.egress.send_due(now, &mut self.sink);
            self.sink.take_sent()
        }

        fn consistent(&self) -> bool {
            let (n, _) = self.egress.backlog();
            self.counters.is_consistent()
                && self
                    .egress
                    .summaries(Timestamp::ZERO)
                    .iter()
                    .all(|s| s.is_consistent())
                && n as u64
                    == self
                        .egress
                        .summaries(Timestamp::ZERO)
                        .iter()
                        .map(|s| s.backlog_packets)
                        .sum::<u64>()
        }
    }

    /// SFB that never judges (queue far below its thresholds).
    fn lenient() -> SfbConfig {
        SfbConfig {
            seed: Some(1),
            max: Some(1000),
            target: 1000,
            ..SfbConfig::default()
        }
    }

    /// A lent frame (here out of a buffer of the test's, as the ring and
    /// memory backends lend theirs) that waits in a shaped port's queue is
    /// copied into the queue's buffer and counted: the loan ends with the
    /// batch, and the copy leaves byte for byte.
    #[test]
    fn queued_port_copies_lent_frames() {
        use std::ptr::NonNull;
        use std::sync::Arc;
        let egress = EgressConfig {
            rate_bps: 8_000_000,
            burst_bytes: 100,
            limit: 1000,
        };
        let mut r = Rig::new(
            vec![PortSet::single(1), PortSet::EMPTY],
            &[(1, lenient(), egress)],
        );
        let t0 = ms(1);
        let frames: Vec<Vec<u8>> = (0..10u16).map(|i| frame([10, 0, 0, 2], i, 0)).collect();
        let mut mem = Arc::new(frames.concat());
        let base = Arc::get_mut(&mut mem).unwrap().as_mut_ptr();
        let lease: crate::packet::Lease = mem.clone();
        let mut b = Batch::new();
        let mut at = 0;
        for f in &frames {
            let region = std::ptr::slice_from_raw_parts_mut(base.wrapping_add(at), f.len());
            // SAFETY: disjoint parts of the buffer `lease` holds, each lent
            // once; the test reads the buffer only after the batch is
            // cleared and the copies have left.
            let lent = unsafe {
                b.lend(
                    t0,
                    f.len() as u32,
                    LinkType::Ethernet,
                    0,
                    &lease,
                    NonNull::new(region).unwrap(),
                )
            };
            assert!(lent);
            at += f.len();
        }
        drop(lease);
        r.run(&mut b, t0);
        b.clear();
        assert_eq!(Arc::strong_count(&mem), 1, "no loan outlives the batch");
        let mut sent = r.sink.take_sent();
        sent.extend(r.due(ms(100)));
        let got: Vec<&Vec<u8>> = sent.iter().map(|s| &s.frame).collect();
        assert_eq!(got, frames.iter().collect::<Vec<_>>());
        let c = r.egress.counters().nth(1).unwrap();
        assert_eq!((c.sent, c.frame_copies), (10, 10));
        assert!(r.consistent());
    }

    #[test]
    fn queued_port_holds_frames_and_paces_them() {
        // 0 -> {1, 2}; 1 is shaped to 1 byte/us with a 100-byte bucket.
        let egress = EgressConfig {
            rate_bps: 8_000_000,
            burst_bytes: 100,
            limit: 1000,
        };
        let mut r = Rig::new(
            vec![PortSet::from_mask(0b110), PortSet::EMPTY, PortSet::EMPTY],
            &[(1, lenient(), egress)],
        );
        assert_eq!(r.egress.queued_ports(), PortSet::single(1));
        let slots = r.egress.pool_slots();
        let mut b = Batch::new();
        for round in 0..100u64 {
            let t0 = ms(round);
            b.clear();
            let frames: Vec<Vec<u8>> = (0..10u16).map(|i| frame([10, 0, 0, 2], i, 0)).collect();
            for f in &frames {
                b.push_from(t0, f.len() as u32, LinkType::Ethernet, 0, f);
            }
            r.run(&mut b, t0);
            assert!(
                b.packets()
                    .iter()
                    .all(|x| x.verdict == Verdict::Forward(PortSet::from_mask(0b110)))
            );
            // Port 2 sent all ten at once, at their arrival; port 1 two (the
            // bucket holds two 42-byte frames).
            let sent = r.sink.take_sent();
            let (to2, mut to1): (Vec<Sent>, Vec<Sent>) =
                sent.into_iter().partition(|s| s.port == 2);
            assert_eq!(to2.len(), 10);
            assert!(to2.iter().all(|s| !s.queued && s.departs == t0));
            assert_eq!(to1.len(), 2);
            assert_eq!(r.egress.backlog(), (8, 336));
            // The third needs 26 more bytes: 26 us; then one per 42 us.
            assert_eq!(r.egress.next_departure(), Some(t0.add_nanos(26_000)));
            assert_eq!(r.due(t0.add_nanos(25_999)).len(), 0);
            to1.extend(r.due(t0.add_nanos(26_000 + 7 * 42_000)));
            assert_eq!(to1.len(), 10);
            assert_eq!(r.egress.next_departure(), None);
            let got: Vec<&Vec<u8>> = to1.iter().map(|s| &s.frame).collect();
            assert_eq!(got, frames.iter().collect::<Vec<_>>(), "FIFO, unchanged");
            for (k, s) in to1.iter().enumerate().skip(2) {
                let due = t0.add_nanos(26_000 + (k as u64 - 2) * 42_000);
                assert_eq!((s.arrived, s.departs, s.queued), (t0, due, true));
            }
        }
        // Steady state: the pool did not grow.
        assert_eq!(r.egress.pool_slots(), slots);
        assert!(r.consistent());
        assert_eq!(
            (r.counters.forwarded, r.counters.dropped.total()),
            (1000, 0)
        );
        let c = r.egress.counters().nth(1).unwrap();
        assert_eq!(
            (c.copies, c.enqueued, c.sent, c.sent_bytes),
            (1000, 1000, 1000, 42_000)
        );
    }

    /// A shaped port's link use: what left over its rate, over the last
    /// whole second of the queue's clock and over the run; none for a port
    /// without a queue, nor before a copy is offered.
    #[test]
    fn link_use_is_what_left_over_the_rate() {
        // 1 byte/us; 42-byte frames offered at twice that, then at half.
        let egress = EgressConfig {
            rate_bps: 8_000_000,
            burst_bytes: 100,
            limit: 1000,
        };
        let mut r = Rig::new(
            vec![PortSet::single(1), PortSet::EMPTY],
            &[(1, lenient(), egress)],
        );
        let link = |r: &Rig, now| r.egress.summaries(now)[1].link;
        assert_eq!(link(&r, ms(0)), None, "nothing offered yet");
        assert_eq!(r.egress.summaries(ms(0))[0].link, None, "no queue");
        let f = frame([10, 0, 0, 2], 7, 0);
        let mut b = Batch::new();
        let mut offer = |r: &mut Rig, from: u64, to: u64, per_ms: usize| {
            for t in from..to {
                b.clear();
                for _ in 0..per_ms {
                    b.push_from(ms(t), f.len() as u32, LinkType::Ethernet, 0, &f);
                }
                r.run(&mut b, ms(t));
                r.due(ms(t));
            }
        };
        // 48 frames a ms (2016 bytes): the port is full.
        offer(&mut r, 0, 2500, 48);
        let l = link(&r, ms(2500)).unwrap();
        assert_eq!(l.rate_bps, 8_000_000);
        assert!((l.last() - 1.0).abs() < 0.005, "{l:?}");
        assert!(l.last_ns >= LINK_WINDOW_NS, "{l:?}");
        assert!((l.run() - 1.0).abs() < 0.005, "{l:?}");
        // Drained, then 12 a ms (504 bytes) for two seconds: half the rate.
        r.due(ms(20_000));
        offer(&mut r, 20_000, 22_000, 12);
        let l = link(&r, ms(22_000)).unwrap();
        assert!((l.last() - 0.504).abs() < 0.005, "{l:?}");
        assert!(l.run() < 0.3, "the idle time counts over the run: {l:?}");
        assert!((l.last_sent_bps() - 4_032_000.0).abs() < 40_000.0, "{l:?}");
    }

    #[test]
    fn workers_share_one_queue_per_port_and_its_rate() {
        // Two stages (two workers' chains) share port 1's queue, shaped to
        // 1 byte/us with a 100-byte bucket. Each offers fifteen 42-byte
        // frames per ms for 20 ms: 1260 bytes/ms together against the 1000
        // the shaper lets out (each alone would fit under it, so two queues
        // would send everything at once).
        let egress = EgressConfig {
            rate_bps: 8_000_000,
            burst_bytes: 100,
            limit: 1000,
        };
        let routes = vec![PortSet::single(1), PortSet::EMPTY];
        let mut w0 = Rig::new(routes.clone(), &[(1, lenient(), egress)]);
        let mut w1 = Rig::new(routes, &[(1, lenient(), egress)]);
        w1.egress.share_queues(&w0.egress);
        let mut b = Batch::new();
        let mut sent = Vec::new();
        for round in 0..20u64 {
            for (w, r) in [&mut w0, &mut w1].into_iter().enumerate() {
                let t = ms(round).add_nanos(w as u64 * 500_000);
                b.clear();
                let frames: Vec<Vec<u8>> = (0..15u16)
                    .map(|i| frame([10, 0, w as u8, 2], i, 0))
                    .collect();
                for f in &frames {
                    b.push_from(t, f.len() as u32, LinkType::Ethernet, 0, f);
                }
                r.run(&mut b, t);
                sent.extend(r.sink.take_sent());
            }
            // Either worker sends what is due; here the other one.
            sent.extend(w1.due(ms(round + 1)));
        }
        let by_20ms = sent.len();
        let backlog = w0.egress.backlog().0;
        assert!(backlog > 0);
        // The first worker to end leaves the shared queue to the other,
        // whose arrivals may still come; the last one drains it.
        assert_eq!(w1.egress.drain_all(&mut w1.sink), 0);
        assert_eq!(w1.egress.drain_all(&mut w1.sink), 0, "ended once");
        assert_eq!(w0.egress.backlog().0, backlog);
        assert_eq!(w0.egress.drain_all(&mut w0.sink), backlog);
        sent.extend(w0.sink.take_sent());
        assert_eq!(sent.len(), 600, "everything leaves in the end");
        // One bucket: over any interval, at most burst + rate x length.
        let mut departs: Vec<u64> = sent.iter().map(|s| s.departs.as_nanos()).collect();
        departs.sort_unstable();
        for i in 0..departs.len() {
            for j in i..departs.len() {
                let bytes = 42 * (j - i + 1) as u64;
                let allowed = 100 + (departs[j] - departs[i]) / 1000;
                assert!(
                    bytes <= allowed,
                    "{} frames in {} ns",
                    j - i + 1,
                    departs[j] - departs[i]
                );
            }
        }
        assert!(by_20ms <= (100 + 20_000) / 42, "{by_20ms} sent by 20 ms");
        // The backlog and SFB figures are reported once (worker 0).
        let (s0, s1) = (w0.egress.summaries(ms(30)), w1.egress.summaries(ms(30)));
        assert!(s0[1].sfb.is_some() && s1[1].sfb.is_none());
        assert_eq!(s1[1].rate_bps, Some(8_000_000));
        let mut merged = s0[1].clone();
        merged.merge(&s1[1]);
        assert!(merged.is_consistent(), "{merged:?}");
        assert_eq!((merged.counters.copies, merged.counters.sent), (600, 600));
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
        let mut r = Rig::new(
            vec![PortSet::single(1), PortSet::EMPTY],
            &[(1, sfb, egress)],
        );
        if let Some(q) = &r.egress.ports[1].queue {
            lock(q).queue.sfb_mut().force_probability(0x4000);
        }
        let mut b = Batch::new();
        let mut sent = Vec::new();
        let (mut ect, mut not_ect) = (0u64, 0u64);
        for round in 0..40u64 {
            b.clear();
            for i in 0..32u16 {
                // Even source ports ECT(0), odd ones Not-ECT.
                let f = frame([10, 0, 0, 2], i, if i % 2 == 0 { 0x02 } else { 0 });
                b.push_from(ms(round), f.len() as u32, LinkType::Ethernet, 0, &f);
            }
            r.run(&mut b, ms(round));
            // Only queued copies are marked. A packet's last queued copy
            // takes its frame (the slot is left empty); no frame left in
            // the batch is marked.
            assert!(
                b.packets()
                    .iter()
                    .all(|x| x.data().get(15).is_none_or(|&t| t & 3 != 3))
            );
            assert!(b.packets().iter().all(|x| x.data().is_empty()));
            sent.extend(r.due(ms(round)));
            ect += 16;
            not_ect += 16;
        }
        assert!(r.consistent());
        let c = r.counters.clone();
        let ce: Vec<&Vec<u8>> = sent
            .iter()
            .map(|s| &s.frame)
            .filter(|f| f[15] & 3 == 3)
            .collect();
        let st = r.egress.summaries(ms(40))[1].sfb.clone().unwrap();
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
        let pc = r.egress.counters().nth(1).unwrap();
        assert_eq!(pc.dropped.get(DropReason::SfbEarly), early);
    }

    #[test]
    fn queue_drops_keep_other_ports_and_shutdown_counts_sole_copies() {
        // 0 -> {1, 2}, 3 -> {1}; 1 is a slow queue of 2 packets.
        let egress = EgressConfig {
            rate_bps: 8_000,
            burst_bytes: 0,
            limit: 2,
        };
        let mut r = Rig::new(
            vec![
                PortSet::from_mask(0b110),
                PortSet::EMPTY,
                PortSet::EMPTY,
                PortSet::single(1),
            ],
            &[(1, lenient(), egress)],
        );
        let f = frame([10, 0, 0, 2], 7, 0x02);
        let mut b = Batch::new();
        for _ in 0..3 {
            b.push_from(ms(0), 42, LinkType::Ethernet, 0, &f);
        }
        r.run(&mut b, ms(0));
        let v: Vec<Verdict> = b.packets().iter().map(|x| x.verdict).collect();
        assert_eq!(v[0], Verdict::Forward(PortSet::from_mask(0b110)));
        assert_eq!(v[1], Verdict::Forward(PortSet::from_mask(0b110)));
        // Refused by port 1's queue, still sent out of port 2.
        assert_eq!(v[2], Verdict::Forward(PortSet::single(2)));
        assert_eq!(r.counters.dropped.total(), 0);
        // The queue is full: from port 3 (only port 1), refused and dropped.
        b.clear();
        b.push_from(ms(1), 42, LinkType::Ethernet, 3, &f);
        r.run(&mut b, ms(1));
        assert_eq!(b.packets()[0].verdict, Verdict::Drop(DropReason::QueueFull));
        // 42 bytes at 1 kB/s: one frame after 42 ms.
        r.sink.take_sent();
        assert_eq!(r.due(ms(42)).len(), 1);
        b.clear();
        b.push_from(ms(43), 42, LinkType::Ethernet, 3, &f);
        r.run(&mut b, ms(43));
        assert!(b.packets()[0].verdict.is_forwarded());
        // Shutdown: two frames left, one the only copy of its packet.
        assert_eq!(r.egress.discard_all(), 2);
        assert_eq!(r.egress.shutdown_discarded(), (1, 0));
        assert_eq!(r.egress.backlog(), (0, 0));
        assert_eq!(r.egress.next_departure(), None);
        assert!(r.consistent());
        let s = &r.egress.summaries(ms(50))[1];
        assert_eq!(s.name, "p1");
        let sfb = s.sfb.as_ref().unwrap();
        assert_eq!(sfb.counters.queuedrop + sfb.counters.childdrop, 2);
        let c = &s.counters;
        assert_eq!(
            (c.copies, c.enqueued, c.sent, c.shutdown_dropped),
            (5, 3, 1, 2)
        );
        assert_eq!(c.dropped.get(DropReason::QueueFull), 2);
    }

    /// A copy back out of its ingress port is not sent but counted; a
    /// copy out of a stripping edge loses the Icarus option while the copy
    /// to another port keeps it.
    #[test]
    fn hairpins_and_strip_per_copy() {
        let mut specs: Vec<PortSpec> = (0..3)
            .map(|i| PortSpec {
                name: format!("p{i}"),
                queue: None,
                strip: i == 2,
            })
            .collect();
        specs[1].queue = Some((lenient(), EgressConfig::default()));
        let mut egress = Egress::new(specs).unwrap();
        let mut sink = MemoryPorts::new(3).keep_sent(true);
        let plain = frame([10, 0, 0, 2], 1, 0);
        let mut with = plain.clone();
        let empty = icarus::Filter::empty(icarus::FilterWidth::M128);
        icarus::insert(&mut with, 14, &empty).unwrap();
        let mut b = Batch::new();
        b.push_from(ms(1), with.len() as u32, LinkType::Ethernet, 0, &with);
        let mut c = PipelineCounters::default();
        parse_batch(&PipelineConfig::default(), &mut b, &mut c);
        b.packets_mut()[0].verdict = Verdict::Forward(PortSet::from_mask(0b111));
        egress.process(&mut b, ms(1), &mut sink);
        let sent = sink.take_sent();
        assert_eq!(sent.len(), 2, "{sent:?}");
        let to = |p: u8| sent.iter().find(|s| s.port == p).unwrap();
        assert_eq!(to(1).frame, with, "port 1 keeps the option");
        assert_eq!(to(2).frame, plain, "port 2 strips it");
        assert_eq!(to(2).wire_len as usize, plain.len());
        let s = egress.summaries(ms(1));
        assert_eq!(s[0].counters.hairpin, 1);
        assert_eq!((s[0].counters.copies, s[2].counters.stripped), (0, 1));
        assert!(s.iter().all(PortSummary::is_consistent));
    }
}
