//! Live replay: send a capture's frames out of a real interface with
//! tcpreplay's pacing, and (with an rx interface) capture what arrives at
//! the other end, match it to what was sent, and measure loss, reordering
//! and end-to-end latency.
//!
//! # Sockets
//!
//! Each side is one `AF_PACKET` socket, opened by the router's own socket
//! code ([`dataplane::io::socket::open_socket`], in no fanout group): the
//! receive side with a large `SO_RCVBUFFORCE` buffer and promiscuous, the
//! send side past the qdisc (`PACKET_QDISC_BYPASS`). The hot paths use
//! the descriptor directly: one `send(2)` per frame ([`Port::send`]), as
//! tcpreplay does (pnet's `send_to` polls before every send: two system
//! calls per frame, measured 30-40% slower), and `recvmmsg(2)` for up to
//! 32 frames per call on the receive side ([`RecvBatch`]), polling only
//! when the queue is empty, so that the receiver keeps up with what it
//! measures. The addresses `recvmmsg` returns give the packet type, so
//! frames the receiving host sends itself are skipped, whatever else
//! delivers them.
//!
//! With `--io ring` ([`IoBackend::Ring`]) both hot paths change, not the
//! sockets' setup: the sender gathers frames and sends them with one
//! `sendmmsg(2)` per batch ([`dataplane::io::ring::send_batch`]; see
//! [`BatchPlan`] for when a batch goes out), and the receiver reads a
//! `TPACKET_V3` receive ring ([`RxRing`], promiscuous, sized from
//! `--rx-buffer`) that the kernel fills without a system call per frame.
//! The ring stamps each frame with the kernel's receive time, which is
//! closer to the arrival than the time a `recvmmsg` call returns (see
//! Matching). Either receiver reports the frames the kernel dropped for it
//! ([`dataplane::io::socket::kernel_drops`]: a full socket buffer or ring).
//!
//! `--tx-threads N` ([`LiveConfig::tx_threads`]) runs N sender threads,
//! each with its own socket and every N-th frame of the generated stream
//! or the preloaded capture, paced at 1/N of the rate; their send stamps
//! are merged in time order before matching. One sender tops out near a
//! million frames per second, less than a ring router forwards on a larger
//! machine. The frames of different senders reach the wire in whatever
//! order the CPUs send them, so reordering is no longer the router's alone.
//!
//! `--tx-netns`/`--rx-netns` open a side's socket from a thread that has
//! entered `/var/run/netns/NAME` with `setns(2)`: a socket stays in the
//! namespace it was created in, and only that thread moves. The same thread
//! then sends (or receives).
//!
//! # Pacing
//!
//! [`Schedule`] (shared with the embedded replay) gives each packet's due
//! time as an offset from the start; the sender sleeps until shortly before
//! it and spins the rest, yielding the CPU
//! ([`wait_until`](crate::pacing::wait_until)), and the clock read that
//! ends the wait is the packet's send timestamp. Nothing is measured from
//! the previous packet, so a late packet never delays the ones after it.
//! The sender sets its timer slack to 1 ns so sleeps end close to when
//! asked.
//!
//! # Matching
//!
//! A frame is identified by a hash of the bytes a router does not change
//! ([`match_key`]): for IP, the addresses, the upper-layer protocol (after
//! IPv6 extension headers), the IPv4 identification and fragment field, and
//! the datagram from the upper-layer header to its end (as the IP length
//! says, so link padding does not count). Left out: the link header (a
//! router may rewrite MACs or VLAN tags), TTL / hop limit, TOS / traffic
//! class (ECN marks), the IPv4 header checksum and total length, IPv4
//! options and IPv6 extension headers before the upper layer (an Icarus
//! loop-detection option may be inserted, changed or stripped on the way).
//! Nothing is written into the packets, so any capture can be replayed
//! unchanged. Frames a router would not leave intact otherwise (non-IP,
//! malformed) are hashed from the link payload, or whole.
//!
//! Identical frames are matched first-sent to first-received (a FIFO per
//! hash; what that means when a copy is lost is in [`match_frames`]). The
//! sender records (hash, send time) per frame sent; the
//! receiver records (hash, receive time) per frame read; both times are
//! `CLOCK_MONOTONIC` (`Instant`), which network namespaces share. The two
//! lists are matched after the run ([`match_frames`]): a stable sort by
//! hash lines up the receives of a hash with its sends. That keeps
//! both hot paths to one `Vec` push (16 bytes per frame on each side) and
//! makes the matching a pure function.
//!
//! With pnet, the receive time is taken when the `recvmmsg` call that read
//! the frame returns (one clock read per call), so it includes the time the
//! frame waited in the socket queue: exact while the receiver keeps up (a
//! call then returns one or a few frames), inflated at top speed when it
//! does not. With the ring it is the kernel's receive time
//! (`CLOCK_REALTIME`), moved to the monotonic origin by the offset between
//! the two clocks sampled once when the receiver starts (never later than
//! the time the frame was read; that time when the kernel gave none).
//!
//! The send time is the clock read just before the system call that sent
//! the frame: per frame with pnet, per batch with the ring (a batch whose
//! call had to be repeated keeps the first read).
//!
//! A sent frame not received by `grace` after the last send is lost. A
//! received frame whose send came before that of a frame received earlier
//! is reordered. A received frame that matches nothing sent (the hosts' own
//! traffic) is unmatched: counted, not an error.
//!
//! # Defects and interruptions
//!
//! A capture with a defect part-way is sent up to the defect and the
//! defect reported (`input_errors`, [`crate::input`]), as the embedded
//! replay does. A stop requested by the operator ([`run_live_with_stop`])
//! ends the sending at the next frame or during a wait; the receiver still
//! gets its grace period, so the report's Actual/Rated lines and the
//! matching cover exactly what was sent.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use crossbeam_channel::{Receiver, Sender, bounded};
use dataplane::config::IoBackend;
use dataplane::io::capture::CaptureReader;
use dataplane::io::ring::{RingConfig, RxRing, send_batch};
use dataplane::io::socket::{
    Port, RECV_BATCH, RecvBatch, SocketOptions, interface_mtu, open_socket, wait_readable,
    wait_writable,
};
use dataplane::wire::{IpVersion, LinkType, parse};
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use serde::Serialize;
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

use crate::filter::BpfFilter;
use crate::input::{InputError, InputErrors, LimitReached, Limits, RunNotes, Stop, check_headers};
use crate::replay::{
    Latency, Pacing, PassClock, Playback, Schedule, new_histogram, wait_until_or_stop, write_hgrm,
};
use crate::synth::{UniqueConfig, UniqueFrames};

/// One side of the link: an interface, in a named network namespace or in
/// the current one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Endpoint {
    /// The interface name.
    pub interface: String,
    /// The network namespace (`ip netns` name), `None` for the current one.
    pub netns: Option<String>,
}

impl Endpoint {
    /// `eth0 (netns bp-a)`, or the bare interface name.
    pub fn describe(&self) -> String {
        match &self.netns {
            Some(ns) => format!("{} (netns {ns})", self.interface),
            None => self.interface.clone(),
        }
    }
}

/// Live replay settings.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveConfig {
    /// Where frames are sent.
    pub tx: Endpoint,
    /// Where they are captured; `None`: send only.
    pub rx: Option<Endpoint>,
    /// Pacing, passes, limits and filter (shared with offline replay).
    pub play: Playback,
    /// Read every packet into memory before sending (tcpreplay's
    /// `--preload-pcap`).
    pub preload: bool,
    /// How long after the last send the receiver keeps waiting.
    pub grace: Duration,
    /// Receive socket buffer requested (`SO_RCVBUFFORCE`), bytes; with the
    /// ring, the ring's size ([`ring_config`]).
    pub rx_buffer_bytes: usize,
    /// The sender's and receiver's packet I/O.
    pub io: IoBackend,
    /// `--hlog`: an HdrHistogram interval log of the send-to-receive
    /// latency, one histogram per [`HLOG_INTERVAL`] of receive time
    /// (values in microseconds), with `--rx`.
    pub hlog: Option<PathBuf>,
    /// `--tx-threads`: sender threads, each with its own socket on `tx`
    /// and every `tx_threads`-th frame of the input (round robin), paced at
    /// its share of the rate. More than one needs a generated stream or a
    /// preloaded capture, and `--pps` or `--topspeed`. One sender thread
    /// stops at about a million frames per second; a router that forwards
    /// more needs more of them to be measured.
    pub tx_threads: u32,
}

/// The most sender threads (`--tx-threads`).
pub const MAX_TX_THREADS: u32 = 64;

impl LiveConfig {
    /// Checks `tx_threads` against the input and the pacing; `preloaded`:
    /// the input is a generated stream or a preloaded capture.
    pub(crate) fn check_tx_threads(&self, preloaded: bool) -> Result<()> {
        let n = self.tx_threads;
        if !(1..=MAX_TX_THREADS).contains(&n) {
            bail!("--tx-threads {n}: must be 1 to {MAX_TX_THREADS}");
        }
        if n > 1 && !preloaded {
            bail!(
                "--tx-threads {n}: more than one sender needs --preload (each sends a share of the frames in memory)"
            );
        }
        if n > 1 && !matches!(self.play.pacing, Pacing::TopSpeed | Pacing::Pps(_)) {
            bail!(
                "--tx-threads {n}: more than one sender needs --pps or --topspeed, not {} (capture timing cannot be split between senders)",
                self.play.pacing.describe()
            );
        }
        Ok(())
    }
}

/// Which share of the input one sender thread sends: the frames whose
/// position `p` (in the input, per pass) has `p % count == index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shard {
    index: u32,
    count: u32,
}

impl Shard {
    /// This shard's part of `--limit` packets (the first `n % count` shards
    /// take one more).
    fn limit(self, n: u64) -> u64 {
        let (c, i) = (u64::from(self.count), u64::from(self.index));
        n / c + u64::from(i < n % c)
    }

    /// This shard's pacing: its share of a rate.
    fn pacing(self, p: Pacing) -> Pacing {
        match p {
            Pacing::Pps(r) => Pacing::Pps(r / f64::from(self.count)),
            other => other,
        }
    }
}

/// The interval of `--hlog`'s histograms.
pub const HLOG_INTERVAL: Duration = Duration::from_secs(1);

/// Frames made as they are sent ([`UniqueFrames`]) instead of read from
/// captures: what `traffic-gen throughput` offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Generated {
    /// The frames.
    pub frames: UniqueConfig,
    /// Stop sending this long after the first frame (for a top-speed run
    /// whose frame count is not known in advance).
    pub time_limit: Option<Duration>,
}

/// The receive ring for a `--rx-buffer` of `bytes`: blocks of 1 MiB (64 KiB
/// below 4 MiB), as many as fit (2 to 1024), handed over 1 ms after their
/// first frame at the latest.
pub fn ring_config(bytes: usize) -> RingConfig {
    let block: usize = if bytes >= 4 << 20 { 1 << 20 } else { 64 << 10 };
    RingConfig {
        block_bytes: block as u32,
        blocks: (bytes / block).clamp(2, 1024) as u32,
        block_timeout_ms: 1,
        ..RingConfig::default()
    }
}

impl Default for LiveConfig {
    fn default() -> Self {
        LiveConfig {
            tx: Endpoint {
                interface: "eth0".into(),
                netns: None,
            },
            rx: None,
            play: Playback::default(),
            preload: false,
            grace: Duration::from_millis(200),
            rx_buffer_bytes: 32 << 20,
            io: IoBackend::Pnet,
            hlog: None,
            tx_threads: 1,
        }
    }
}

// ---------------------------------------------------------------------------
// Matching

/// The matching hash of a frame: the bytes a router leaves unchanged (see
/// the module docs). Never panics, whatever the bytes.
pub fn match_key(link: LinkType, frame: &[u8]) -> u64 {
    let mut head = [0u8; 40];
    let (n, body): (usize, &[u8]) = match parse(link, frame) {
        Ok(p) => {
            let l3 = frame.get(p.l3_offset..).unwrap_or_default();
            let start = p.l3_offset.saturating_add(p.ip_header_len);
            let end = p.l3_offset.saturating_add(p.ip_total_len).min(frame.len());
            let upper = frame.get(start..end).unwrap_or_default();
            match p.ip_version {
                Some(IpVersion::V4) => {
                    head[0] = 4;
                    head[1] = p.protocol.into();
                    // identification, flags + fragment offset
                    copy_field(&mut head[2..6], l3.get(4..8));
                    // source, destination
                    copy_field(&mut head[6..14], l3.get(12..20));
                    (14, upper)
                }
                Some(IpVersion::V6) => {
                    head[0] = 6;
                    head[1] = p.protocol.into();
                    copy_field(&mut head[2..34], l3.get(8..40));
                    (34, upper)
                }
                None => {
                    head[0] = 0xff;
                    head[1..3].copy_from_slice(&u16::from(p.ethertype).to_be_bytes());
                    (3, l3)
                }
            }
        }
        Err(_) => {
            head[0] = 0xfe;
            (1, frame)
        }
    };
    xxh3_64_with_seed(body, xxh3_64(&head[..n]))
}

fn copy_field(dst: &mut [u8], src: Option<&[u8]>) {
    if let Some(s) = src.filter(|s| s.len() == dst.len()) {
        dst.copy_from_slice(s);
    }
}

/// A frame's matching hash and when it was sent or received (ns on a
/// monotonic clock shared by both sides).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// [`match_key`] of the frame.
    pub key: u64,
    /// Send or receive time, ns.
    pub t_ns: u64,
}

/// Matches the frames (as [`match_frames`]) while writing the latency of
/// each [`HLOG_INTERVAL`] to `path` as an HdrHistogram interval log
/// (`hdrhistogram`'s writer: V2 deflate histograms, base64, one line per
/// interval, values in microseconds), whose start time is `start`.
fn write_hlog(
    path: &Path,
    start: std::time::SystemTime,
    sent: &[Stamp],
    received: &[Stamp],
) -> Result<MatchOutcome> {
    use hdrhistogram::serialization::V2DeflateSerializer;
    use hdrhistogram::serialization::interval_log::IntervalLogWriterBuilder;
    let file = std::fs::File::create(path)
        .with_context(|| format!("--hlog {}: cannot create", path.display()))?;
    let mut out = io::BufWriter::new(file);
    let mut serializer = V2DeflateSerializer::new();
    let mut failed: Option<String> = None;
    let m = {
        let mut log = IntervalLogWriterBuilder::new()
            .add_comment("traffic-gen replay --tx --rx: send-to-receive latency, microseconds")
            .with_start_time(start)
            .begin_log_with(&mut out, &mut serializer)
            .map_err(|e| anyhow!("--hlog {}: {e}", path.display()))?;
        let step = u64::try_from(HLOG_INTERVAL.as_nanos()).unwrap_or(u64::MAX);
        match_frames_by_interval(sent, received, step, &mut |at, h| {
            if failed.is_none()
                && let Err(e) =
                    log.write_histogram(h, Duration::from_nanos(at), HLOG_INTERVAL, None)
            {
                failed = Some(format!("{e:?}"));
            }
        })
    };
    if let Some(e) = failed {
        bail!("--hlog {}: write failed: {e}", path.display());
    }
    out.flush()
        .with_context(|| format!("--hlog {}: write failed", path.display()))?;
    Ok(m)
}

/// What matching the received frames to the sent ones found.
#[derive(Debug, Clone)]
pub struct MatchOutcome {
    /// Sent frames that were received (once each).
    pub received: u64,
    /// Sent frames never received.
    pub lost: u64,
    /// Received frames whose send came before that of a frame received
    /// earlier.
    pub reordered: u64,
    /// Received frames that match nothing sent (or more copies of a frame
    /// than were sent).
    pub unmatched: u64,
    /// Latency of every matched frame, ns (receive time - send time).
    pub histogram: Histogram<u64>,
    /// Time from the first send to the last matched receive, ns (0 when
    /// nothing matched).
    pub span_ns: u64,
}

/// Matches `received` (in read order) to `sent` (in send order): the n-th
/// receive of a hash goes with the n-th send of that hash (first in, first
/// out), provided that send came before the receive; a receive with no
/// such send is unmatched.
///
/// FIFO is exact when nothing is lost: identical frames belong to one flow,
/// and a router keeps a flow in order (one flow, one worker). When a copy
/// of a frame sent several times is lost, the copies after it are each
/// given to the copy before them: their latency reads longer (by the gap
/// between copies) and they may count as reordered, while the received and
/// lost totals stay exact. Captures whose frames are unique (real traffic,
/// with TCP sequence numbers and IP identifications) do not have this
/// ambiguity; a synthetic capture that repeats one frame per flow does.
///
/// O((n + m) log n) for n sends and m receives; no allocation per frame
/// beyond the index arrays.
pub fn match_frames(sent: &[Stamp], received: &[Stamp]) -> MatchOutcome {
    match_frames_by_interval(sent, received, u64::MAX, &mut |_, _| {})
}

/// [`match_frames`], also handing the latencies of each `interval_ns` of
/// receive time (counted from the first send) to `on_interval(start
/// offset ns, histogram in microseconds)` as the matching leaves it: the
/// lines of an HdrHistogram interval log (`--hlog`), written as they close
/// so a long run needs one interval's memory, not one per interval. A
/// receive stamped before the current interval (out of read order) counts
/// in the current one.
pub fn match_frames_by_interval(
    sent: &[Stamp],
    received: &[Stamp],
    interval_ns: u64,
    on_interval: &mut dyn FnMut(u64, &Histogram<u64>),
) -> MatchOutcome {
    let interval_ns = interval_ns.max(1);
    let base = sent.first().map_or(0, |s| s.t_ns);
    let mut current: Option<u64> = None;
    let mut interval = new_histogram();
    // Send indices grouped by hash, in send order within a group (stable),
    // and each group's next unmatched position (indexed by the group's
    // first position).
    let mut order: Vec<usize> = (0..sent.len()).collect();
    order.sort_by_key(|&i| sent[i].key);
    let keys: Vec<u64> = order.iter().map(|&i| sent[i].key).collect();
    let mut next: Vec<usize> = (0..sent.len()).collect();

    let mut hist = new_histogram();
    let (mut received_n, mut reordered, mut unmatched) = (0u64, 0u64, 0u64);
    let mut highest: Option<usize> = None;
    let mut last_rx = 0u64;
    for r in received {
        let lo = keys.partition_point(|&k| k < r.key);
        let hi = lo + keys[lo..].partition_point(|&k| k == r.key);
        let pick = (lo < hi)
            .then(|| next[lo])
            .filter(|&p| p < hi && sent[order[p]].t_ns <= r.t_ns);
        let Some(p) = pick else {
            unmatched += 1;
            continue;
        };
        next[lo] = p + 1;
        let s = order[p];
        received_n += 1;
        if highest.is_some_and(|h| s < h) {
            reordered += 1;
        }
        highest = Some(highest.map_or(s, |h| h.max(s)));
        last_rx = last_rx.max(r.t_ns);
        let ns = r.t_ns.saturating_sub(sent[s].t_ns).max(1);
        let _ = hist.record(ns.min(hist.high()));
        let k = r.t_ns.saturating_sub(base) / interval_ns;
        match current {
            Some(c) if k > c => {
                on_interval(c.saturating_mul(interval_ns), &interval);
                interval.reset();
                current = Some(k);
            }
            None => current = Some(k),
            _ => {}
        }
        let _ = interval.record((ns / 1000).max(1).min(interval.high()));
    }
    if let Some(c) = current {
        on_interval(c.saturating_mul(interval_ns), &interval);
    }
    MatchOutcome {
        received: received_n,
        lost: sent.len() as u64 - received_n,
        reordered,
        unmatched,
        histogram: hist,
        span_ns: match sent.first() {
            Some(first) if received_n > 0 => last_rx.saturating_sub(first.t_ns),
            _ => 0,
        },
    }
}

// ---------------------------------------------------------------------------
// Report

/// Achieved rates, as tcpreplay's `Rated:` line.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Rates {
    /// Bytes per second.
    pub bytes_per_s: f64,
    /// Megabits per second.
    pub mbps: f64,
    /// Packets per second.
    pub pps: f64,
}

impl Rates {
    /// `packets` frames of `bytes` bytes in total sent in `elapsed_s`
    /// seconds (all zero when no time passed).
    pub fn of(packets: u64, bytes: u64, elapsed_s: f64) -> Self {
        if elapsed_s.is_nan() || elapsed_s <= 0.0 {
            return Rates {
                bytes_per_s: 0.0,
                mbps: 0.0,
                pps: 0.0,
            };
        }
        let bytes_per_s = bytes as f64 / elapsed_s;
        Rates {
            bytes_per_s,
            mbps: bytes_per_s * 8.0 / 1e6,
            pps: packets as f64 / elapsed_s,
        }
    }
}

/// Send-side counters, as tcpreplay's interface statistics.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TxStats {
    /// Frames sent.
    pub packets: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Frames the kernel refused for good (after the ENOBUFS retries).
    pub failed: u64,
    /// Send attempts repeated after ENOBUFS (a full device or peer queue).
    pub retried_enobufs: u64,
    /// Send attempts repeated after EAGAIN (a full socket send buffer).
    pub retried_eagain: u64,
    /// The failures by error.
    pub errors: BTreeMap<String, u64>,
}

/// The receive side of the report.
#[derive(Debug, Clone, Serialize)]
pub struct RxReport {
    /// Where frames were captured.
    pub endpoint: Endpoint,
    /// Receive buffer the kernel granted, bytes.
    pub recv_buffer: usize,
    /// Wait after the last send, ms.
    pub grace_ms: u64,
    /// Frames read (matched or not).
    pub frames: u64,
    /// Sent frames received.
    pub received: u64,
    /// Sent frames not received within the grace period.
    pub lost: u64,
    /// Received out of send order.
    pub reordered: u64,
    /// Received frames that match nothing sent.
    pub unmatched: u64,
    /// Delivery rate: received / (first send .. last matched receive), pps.
    pub received_pps: f64,
    /// Frames the kernel dropped before the receiver read them (socket
    /// buffer or ring full: `PACKET_STATISTICS` `tp_drops`).
    pub kernel_dropped: u64,
    /// Times the kernel found the ring's next block still held by the
    /// receiver (`tp_freeze_q_cnt`; 0 with pnet).
    pub kernel_freeze_q: u64,
    /// End-to-end latency (send -> receive), ns.
    pub latency: Latency,
    /// The latency histogram (ns).
    #[serde(skip)]
    pub histogram: Histogram<u64>,
}

/// The whole live-replay report.
#[derive(Debug, Clone, Serialize)]
pub struct LiveReport {
    /// Capture files.
    pub inputs: Vec<String>,
    /// Where frames were sent.
    pub tx: Endpoint,
    /// Whether the send socket bypasses the qdisc (`PACKET_QDISC_BYPASS`).
    pub qdisc_bypass: bool,
    /// The packet I/O of both sides.
    pub io: IoBackend,
    /// Pacing.
    pub pacing: String,
    /// Passes over the input.
    pub loops: u32,
    /// Packets were read into memory first.
    pub preload: bool,
    /// Frames sent.
    pub sent: u64,
    /// Bytes sent.
    pub bytes: u64,
    /// First send to end of last send, s.
    pub elapsed_s: f64,
    /// Achieved rates.
    pub rated: Rates,
    /// Send-side counters.
    pub tx_stats: TxStats,
    /// Defects part-way through input files: each file was sent up to its
    /// defect (empty when every file read to its end).
    pub input_errors: Vec<InputError>,
    /// The operator stopped the run (Ctrl-C, SIGTERM) before the input's
    /// end: the counters cover the frames sent until then.
    pub interrupted: bool,
    /// Records whose original length (above 16 MiB) was replaced by the
    /// captured one.
    pub input_lengths_fixed: u64,
    /// Gaps in capture time longer than the pacing limit (a minute) whose
    /// wait was cut to it (`--multiplier` only).
    pub pacing_gaps_capped: u64,
    /// Gaps in capture time longer than a minute, in every mode.
    pub capture_gaps: crate::pacing::LongGaps,
    /// `--limit` or `--duration` ended the sending before the input's end.
    pub limit_reached: Option<LimitReached>,
    /// The share of the requested rate reached (paced runs of 10 ms or
    /// more; a shortfall below 95% is warned about).
    pub rate_reached: Option<f64>,
    /// The `--filter` expression.
    pub filter: Option<String>,
    /// Records the filter did not match (not sent).
    pub filtered_out: u64,
    /// The receive side, with `--rx`.
    pub rx: Option<RxReport>,
}

impl LiveReport {
    /// The terminal summary: tcpreplay's `Actual:`/`Rated:` lines and
    /// interface statistics, then the receive side.
    pub fn write_text(&self, w: &mut impl Write) -> io::Result<()> {
        writeln!(
            w,
            "Actual: {} packets ({} bytes) sent in {:.2} seconds",
            self.sent, self.bytes, self.elapsed_s
        )?;
        writeln!(
            w,
            "Rated: {:.1} Bps, {:.2} Mbps, {:.2} pps",
            self.rated.bytes_per_s, self.rated.mbps, self.rated.pps
        )?;
        let t = &self.tx_stats;
        writeln!(w, "Statistics for network device: {}", self.tx.describe())?;
        writeln!(w, "\tSuccessful packets:        {}", t.packets)?;
        writeln!(w, "\tFailed packets:            {}", t.failed)?;
        writeln!(w, "\tRetried packets (ENOBUFS): {}", t.retried_enobufs)?;
        writeln!(w, "\tRetried packets (EAGAIN):  {}", t.retried_eagain)?;
        for (e, n) in &t.errors {
            writeln!(w, "\t  failed: {e}: {n}")?;
        }
        let notes = RunNotes {
            sent: self.sent,
            interrupted: self.interrupted,
            limit_reached: self.limit_reached,
            pacing: &self.pacing,
            rate_reached: self.rate_reached,
            lengths_fixed: self.input_lengths_fixed,
            gaps: self.capture_gaps,
            // Only a multiplier cuts (waits for) the gaps it meets.
            paced_by_capture_time: self.pacing_gaps_capped > 0,
            capture_span_s: None,
        };
        notes.write_ending(w)?;
        if let Some(f) = &self.filter {
            writeln!(
                w,
                "filter '{f}': {} packets did not match and were not sent",
                self.filtered_out
            )?;
        }
        for e in &self.input_errors {
            writeln!(w, "input error: {e}; sent what precedes it")?;
        }
        notes.write_input_fixes(w)?;
        if let Some(r) = &self.rx {
            writeln!(
                w,
                "Received on {}: {} frames, {} of {} sent ({} lost, {} reordered), {} unmatched; delivered {:.2} pps",
                r.endpoint.describe(),
                r.frames,
                r.received,
                self.sent,
                r.lost,
                r.reordered,
                r.unmatched,
                r.received_pps
            )?;
            // A receive ring's blocks exist only with `--io ring`.
            if self.io == IoBackend::Ring {
                writeln!(
                    w,
                    "Kernel drops at the receiver ({}): {} (ring full), ring blocks found held: {}",
                    self.io.name(),
                    r.kernel_dropped,
                    r.kernel_freeze_q
                )?;
            } else {
                writeln!(
                    w,
                    "Kernel drops at the receiver ({}): {} (socket buffer full)",
                    self.io.name(),
                    r.kernel_dropped
                )?;
            }
            let l = &r.latency;
            let us = |ns: u64| ns as f64 / 1e3;
            writeln!(
                w,
                "Latency (us, send -> receive): p50 {:.1} p90 {:.1} p99 {:.1} p99.9 {:.1} max {:.1} mean {:.1} count {}",
                us(l.p50),
                us(l.p90),
                us(l.p99),
                us(l.p999),
                us(l.max),
                l.mean / 1e3,
                l.count
            )?;
        }
        Ok(())
    }

    /// The latency distribution in `.hgrm` format (microseconds); `None`
    /// without a receive side.
    pub fn write_hgrm(&self, w: &mut impl Write) -> Option<io::Result<()>> {
        self.rx.as_ref().map(|r| write_hgrm(&r.histogram, w))
    }
}

// ---------------------------------------------------------------------------
// Namespaces and sockets

/// Moves the calling thread into network namespace `name`
/// (`/var/run/netns/NAME`, as `ip netns` names them).
pub(crate) fn enter_netns(name: &str) -> Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') {
        bail!("\"{name}\" is not a network namespace name");
    }
    let path = Path::new("/var/run/netns").join(name);
    let file = File::open(&path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => anyhow!(
            "network namespace \"{name}\" not found ({} does not exist; `ip netns list` shows the namespaces)",
            path.display()
        ),
        _ => anyhow!(
            "network namespace \"{name}\": cannot open {}: {e}",
            path.display()
        ),
    })?;
    // SAFETY: `file` is open for the duration of the call; CLONE_NEWNET
    // moves only the calling thread, and nothing on it holds per-namespace
    // state that would be invalidated.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        let err = io::Error::last_os_error();
        return Err(match err.raw_os_error() {
            Some(libc::EPERM) => anyhow!(
                "network namespace \"{name}\": setns: {err} (entering a namespace needs CAP_SYS_ADMIN: run as root)"
            ),
            Some(libc::EINVAL) => anyhow!(
                "network namespace \"{name}\": {} is not a network namespace ({err})",
                path.display()
            ),
            _ => anyhow!("network namespace \"{name}\": setns: {err}"),
        });
    }
    Ok(())
}

/// Enters `ep`'s namespace (if any) and opens its socket
/// ([`open_socket`]): for receiving (`rx_buffer` is `Some`: that receive
/// buffer, promiscuous) or for sending (past the qdisc where the kernel
/// allows). Errors name the side, the interface and the namespace.
fn open_endpoint(ep: &Endpoint, rx_buffer: Option<usize>) -> Result<Port> {
    let side = if rx_buffer.is_some() { "--rx" } else { "--tx" };
    let opts = SocketOptions {
        promiscuous: rx_buffer.is_some(),
        recv_buffer_bytes: rx_buffer.map(|b| b as u64),
        fanout: None,
        qdisc_bypass: rx_buffer.is_none(),
    };
    match &ep.netns {
        Some(ns) => enter_netns(ns),
        None => Ok(()),
    }
    .and_then(|()| open_socket(&ep.interface, &opts).map_err(|e| anyhow!("{e}")))
    .with_context(|| format!("{side} {}", ep.describe()))
}

/// Whether frames of `size` bytes fit `ep`'s MTU of `mtu` (plus the
/// Ethernet header); the error says how to make them fit.
pub fn check_fits(ep: &Endpoint, mtu: u32, size: u16) -> Result<()> {
    let want = u32::from(size);
    let most = mtu.saturating_add(14);
    if want > most {
        bail!(
            "--tx {}: frames of {want} bytes do not fit its MTU of {mtu} (at most {most} bytes with the Ethernet header): raise the MTU (ip link set {} mtu {}) or send smaller frames",
            ep.describe(),
            ep.interface,
            want - 14
        );
    }
    Ok(())
}

/// The MTU of `ep`'s interface, asked in its namespace (from a thread of
/// its own that enters it).
///
/// # Errors
/// The namespace or the interface, named.
pub fn endpoint_mtu(ep: &Endpoint) -> Result<u32> {
    let ep2 = ep.clone();
    let asked = thread::spawn(move || -> Result<u32> {
        if let Some(ns) = &ep2.netns {
            enter_netns(ns)?;
        }
        // SAFETY: plain socket(2) call with constant arguments; checked
        // below.
        let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            bail!("socket(AF_INET): {}", io::Error::last_os_error());
        }
        // SAFETY: `raw` was just returned by socket(2); nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        interface_mtu(fd.as_raw_fd(), &ep2.interface)
            .map_err(|e| anyhow!("interface \"{}\": SIOCGIFMTU: {e}", ep2.interface))
    })
    .join()
    .map_err(|_| anyhow!("the MTU thread panicked"))?;
    asked.with_context(|| format!("--tx {}", ep.describe()))
}

// ---------------------------------------------------------------------------
// Sending

/// Most ENOBUFS retries of one frame, `ENOBUFS_PAUSE` apart.
const ENOBUFS_RETRIES: u32 = 64;
const ENOBUFS_PAUSE: Duration = Duration::from_micros(20);
/// A frame the socket has no room for this long is counted as failed.
const EAGAIN_LIMIT: Duration = Duration::from_secs(1);

struct Transmitter<'a> {
    sock: &'a Port,
    ep: &'a Endpoint,
    origin: Instant,
    start: Instant,
    schedule: Schedule,
    stats: TxStats,
    errnos: BTreeMap<i32, u64>,
    /// (hash, send time) per frame sent, with `--rx`.
    stamps: Option<Vec<Stamp>>,
    progress: Option<&'a ProgressBar>,
    attempted: u64,
    /// `--io ring`: frames gathered for the next `sendmmsg`.
    batch: Option<TxBatch>,
    /// The operator's stop.
    interrupt: Stop<'a>,
    /// A stop ended a wait: nothing more is sent.
    stopped: bool,
    /// Records whose original length was replaced by the captured one
    /// (streaming; counted on the first pass).
    lengths_fixed: u64,
    /// `--limit`, `--duration`.
    limits: Limits,
    /// A limit ended the sending: nothing more is sent.
    limit_reached: Option<LimitReached>,
    /// `--filter` while streaming (a preload filtered as it read).
    filter: Option<BpfFilter>,
    /// Records the filter did not match (first pass).
    filtered_out: u64,
    /// The share of the input this sender sends.
    shard: Shard,
}

/// Frames the batched sender sends with one system call, at most.
pub const TX_BATCH: usize = 64;

/// What the batched sender does before gathering a frame ([`BatchPlan::offer`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BeforeGather {
    /// The frame is due: gather it with the others.
    Gather,
    /// The frame is due later, at this offset (ns): send the frames
    /// gathered so far (if any), wait until then, and gather it.
    FlushAndWait(u64),
}

/// The batched sender's decisions, apart from its clock and its socket so
/// they can be tested: frames that are due go out together (up to
/// [`TX_BATCH`] per call at top speed, or when the sender is behind its
/// schedule), and gathered frames are sent before the sender waits for a
/// later due time, so no frame waits for the next one's due time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchPlan {
    pending: usize,
    /// The latest clock reading (ns from the start): a frame due by then is
    /// due without another reading.
    now: u64,
}

impl Default for BatchPlan {
    fn default() -> Self {
        Self::new()
    }
}

impl BatchPlan {
    /// Nothing gathered, the clock at the start.
    pub fn new() -> Self {
        BatchPlan { pending: 0, now: 0 }
    }

    /// Frames gathered and not yet sent.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// A frame due at offset `due` (ns from the start; `None`: at once) is
    /// next: whether it can be gathered now. `clock` reads the time (ns
    /// from the start); it is called only when the latest reading does not
    /// already show the frame due.
    pub fn offer(&mut self, due: Option<u64>, clock: impl FnOnce() -> u64) -> BeforeGather {
        match due {
            Some(d) if d > self.now => {
                self.now = self.now.max(clock());
                if d > self.now {
                    BeforeGather::FlushAndWait(d)
                } else {
                    BeforeGather::Gather
                }
            }
            _ => BeforeGather::Gather,
        }
    }

    /// The wait for a due time ended at `t` (ns from the start).
    pub fn waited(&mut self, t: u64) {
        self.now = self.now.max(t);
    }

    /// One frame was gathered; `true` when the batch is full and must be
    /// sent now.
    pub fn gathered(&mut self) -> bool {
        self.pending += 1;
        self.pending >= TX_BATCH
    }

    /// The gathered frames were sent (or given up).
    pub fn sent(&mut self) {
        self.pending = 0;
    }
}

/// The batched sender's gathered frames: copies (a capture reader reuses
/// its buffer between records) and their hashes.
struct TxBatch {
    plan: BatchPlan,
    bufs: Vec<Vec<u8>>,
    keys: [u64; TX_BATCH],
}

impl TxBatch {
    fn new() -> Self {
        TxBatch {
            plan: BatchPlan::new(),
            bufs: (0..TX_BATCH).map(|_| Vec::with_capacity(2048)).collect(),
            keys: [0; TX_BATCH],
        }
    }
}

impl Transmitter<'_> {
    /// Moves the progress bar (only the first of several senders has it:
    /// its count times the senders, which send alike).
    fn show_progress(&self) {
        if let Some(p) = self.progress {
            p.set_position(self.attempted.saturating_mul(u64::from(self.shard.count)));
        }
    }

    #[inline]
    fn ns(&self, t: Instant) -> u64 {
        u64::try_from(t.duration_since(self.origin).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Waits until `due` unless the operator stops the run first or
    /// `--duration` ends before it (each noted; `None` then). A paced run's
    /// progress moves here, so it shows at low rates without an update
    /// per frame at high ones.
    fn wait_due(&mut self, due: Instant) -> Option<Instant> {
        self.show_progress();
        let deadline = self.limits.deadline(self.start);
        let until = deadline.map_or(due, |d| d.min(due));
        match wait_until_or_stop(until, self.interrupt) {
            None => {
                self.stopped = true;
                None
            }
            Some(_) if until < due => {
                self.limit_reached = Some(LimitReached::Duration);
                None
            }
            t => t,
        }
    }

    /// Paces, then sends `frame` (capture time `ts`, hash `key`).
    #[inline]
    fn emit(&mut self, ts: u64, frame: &[u8], key: u64) -> Result<()> {
        if self.limit_reached.is_none() {
            self.limit_reached = self.limits.reached(self.attempted, self.start);
        }
        if self.limit_reached.is_some() {
            return Ok(());
        }
        if let Some(mut b) = self.batch.take() {
            let r = self.gather(&mut b, ts, frame, key);
            self.batch = Some(b);
            return r;
        }
        let len = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        let t = match self.schedule.next_offset(ts, len) {
            Some(off) => {
                let due = self.start + Duration::from_nanos(off);
                let Some(t) = self.wait_due(due) else {
                    return Ok(());
                };
                Some(t)
            }
            None if self.stamps.is_some() => Some(Instant::now()),
            None => None,
        };
        if let Some(t) = self.send(frame, t)? {
            let t_ns = self.ns(t);
            if let Some(s) = &mut self.stamps {
                s.push(Stamp { key, t_ns });
            }
        }
        self.attempted += 1;
        if self.attempted & 0xfff == 0 {
            self.show_progress();
        }
        Ok(())
    }

    /// One `send(2)`, retried on EINTR, EAGAIN (after waiting for room) and
    /// ENOBUFS (bounded). `t` is the time read just before the first
    /// attempt; a retry reads it again. Returns the send time of a frame
    /// sent (`self.start` when no time was read), `None` for a failed one.
    fn send(&mut self, frame: &[u8], mut t: Option<Instant>) -> Result<Option<Instant>> {
        let mut retry = Retry::default();
        loop {
            let Err(err) = self.sock.send(frame) else {
                self.stats.packets += 1;
                self.stats.bytes += frame.len() as u64;
                return Ok(Some(t.unwrap_or(self.start)));
            };
            if err.raw_os_error() != Some(libc::EINTR)
                && !retry.again(&err, self.sock.fd, &mut self.stats)
            {
                self.give_up(&err)?;
                return Ok(None);
            }
            if t.is_some() {
                t = Some(Instant::now());
            }
        }
    }

    /// `--io ring`: paces `frame` and gathers it into `b`, sending the
    /// gathered frames first when it is not due yet ([`BatchPlan`]) and
    /// after it when the batch is full.
    fn gather(&mut self, b: &mut TxBatch, ts: u64, frame: &[u8], key: u64) -> Result<()> {
        let len = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        let due = self.schedule.next_offset(ts, len);
        let start = self.start;
        let since =
            |t: Instant| u64::try_from(t.duration_since(start).as_nanos()).unwrap_or(u64::MAX);
        if let BeforeGather::FlushAndWait(d) = b.plan.offer(due, || since(Instant::now())) {
            self.send_gathered(b)?;
            let Some(t) = self.wait_due(self.start + Duration::from_nanos(d)) else {
                return Ok(());
            };
            b.plan.waited(since(t));
        }
        let i = b.plan.pending();
        if let (Some(buf), Some(k)) = (b.bufs.get_mut(i), b.keys.get_mut(i)) {
            buf.clear();
            buf.extend_from_slice(frame);
            *k = key;
        }
        if b.plan.gathered() {
            self.send_gathered(b)?;
        }
        self.attempted += 1;
        if self.attempted & 0xfff == 0 {
            self.show_progress();
        }
        Ok(())
    }

    /// Sends the frames gathered in `b` with `sendmmsg(2)` (one call when
    /// the kernel takes them all), retried as [`Transmitter::send`] retries
    /// one frame; a frame refused for good is counted as failed and the
    /// rest are still sent. Each frame's send time is the clock read
    /// before the call that sent it.
    fn send_gathered(&mut self, b: &mut TxBatch) -> Result<()> {
        let n = b.plan.pending().min(TX_BATCH);
        let mut frames: [&[u8]; TX_BATCH] = [&[]; TX_BATCH];
        for (f, buf) in frames.iter_mut().zip(&b.bufs[..n]) {
            *f = buf;
        }
        let fd = self.sock.fd;
        let mut done = 0usize;
        while done < n {
            let t = Instant::now();
            let mut retry = Retry::default();
            let stats = &mut self.stats;
            let (sent, err) = send_batch(fd, &frames[done..n], |e| retry.again(e, fd, stats));
            let sent = sent.min(n - done);
            let t_ns = self.ns(t);
            for (f, &key) in frames[done..done + sent].iter().zip(&b.keys[done..]) {
                self.stats.packets += 1;
                self.stats.bytes += f.len() as u64;
                if let Some(s) = &mut self.stamps {
                    s.push(Stamp { key, t_ns });
                }
            }
            done += sent;
            if let Some(err) = err {
                // The frame the kernel stopped at is given up.
                self.give_up(&err)?;
                done += 1;
            }
        }
        b.plan.sent();
        Ok(())
    }

    /// Sends what is still gathered (`--io ring`).
    fn finish(&mut self) -> Result<()> {
        if let Some(mut b) = self.batch.take() {
            let r = self.send_gathered(&mut b);
            self.batch = Some(b);
            r?;
        }
        Ok(())
    }

    /// Counts a frame given up for `err` as failed, or ends the sending
    /// when the interface is down or gone.
    fn give_up(&mut self, err: &io::Error) -> Result<()> {
        let errno = err.raw_os_error().unwrap_or(0);
        if matches!(
            errno,
            libc::ENETDOWN | libc::ENODEV | libc::ENXIO | libc::EBADF
        ) {
            bail!(
                "interface {}: send failed after {} packets: {err} (interface down or gone?)",
                self.ep.describe(),
                self.stats.packets
            );
        }
        self.stats.failed += 1;
        *self.errnos.entry(errno).or_default() += 1;
        Ok(())
    }
}

/// The senders' retries of one frame (or of the frame a `sendmmsg` stopped
/// at): `EAGAIN` waits for room, for [`EAGAIN_LIMIT`] in all; `ENOBUFS`
/// pauses [`ENOBUFS_PAUSE`], [`ENOBUFS_RETRIES`] times at most.
#[derive(Debug, Default)]
struct Retry {
    enobufs: u32,
    eagain_since: Option<Instant>,
}

impl Retry {
    /// Whether to send again after `err` (having waited, and counted the
    /// retry in `stats`); `false`: the frame is given up.
    fn again(&mut self, err: &io::Error, fd: RawFd, stats: &mut TxStats) -> bool {
        match err.raw_os_error() {
            Some(libc::EAGAIN) => {
                let since = *self.eagain_since.get_or_insert_with(Instant::now);
                if since.elapsed() > EAGAIN_LIMIT {
                    return false;
                }
                stats.retried_eagain += 1;
                wait_writable(fd, 100);
                true
            }
            Some(libc::ENOBUFS) if self.enobufs < ENOBUFS_RETRIES => {
                self.enobufs += 1;
                stats.retried_enobufs += 1;
                thread::sleep(ENOBUFS_PAUSE);
                true
            }
            _ => false,
        }
    }
}

/// Frames read into memory (`--preload`): one buffer, no allocation per
/// frame.
#[derive(Debug, Default)]
struct Preloaded {
    bytes: Vec<u8>,
    /// (capture time, start, end, hash)
    frames: Vec<(u64, usize, usize, u64)>,
    /// Defects met while reading.
    errors: InputErrors,
    /// Records whose original length was replaced by the captured one.
    lengths_fixed: u64,
    /// Records the filter did not match.
    filtered_out: u64,
}

fn not_ethernet(file: &str, index: u64, link: LinkType) -> anyhow::Error {
    anyhow!(
        "{file}: packet {index}: link type {} cannot be sent on an Ethernet interface (only Ethernet captures can be replayed live)",
        link.to_linktype()
    )
}

/// Reads every file into memory, each up to its end, its defect or a stop.
fn preload(
    files: &[PathBuf],
    keys: bool,
    interrupt: Stop<'_>,
    mut filter: Option<&mut BpfFilter>,
) -> Result<Preloaded> {
    let mut p = Preloaded::default();
    for (i, f) in files.iter().enumerate() {
        let mut r = match CaptureReader::open(f) {
            Ok(r) => r,
            Err(e) => {
                p.errors.note(i, &e, 0);
                continue;
            }
        };
        let mut index = 0u64;
        while !interrupt.requested() {
            let rec = match r.next_record() {
                Ok(Some(rec)) => rec,
                Ok(None) => break,
                Err(e) => {
                    p.errors.note(i, &e, index);
                    break;
                }
            };
            if rec.link_type != LinkType::Ethernet {
                return Err(not_ethernet(&f.display().to_string(), index, rec.link_type));
            }
            if let Some(flt) = filter.as_deref_mut()
                && !flt.matches(rec.link_type, rec.data, rec.orig_len)?
            {
                p.filtered_out += 1;
                index += 1;
                continue;
            }
            let start = p.bytes.len();
            p.bytes.extend_from_slice(rec.data);
            let key = if keys {
                match_key(rec.link_type, rec.data)
            } else {
                0
            };
            p.frames.push((rec.ts_ns, start, p.bytes.len(), key));
            index += 1;
        }
        p.lengths_fixed += r.lengths_fixed();
    }
    Ok(p)
}

/// Sends every pass: generated, from memory, or streaming from the files;
/// then what is still gathered. Returns the defects met while streaming.
fn transmit(tx: &mut Transmitter<'_>, sh: Shared<'_>) -> Result<InputErrors> {
    let errors = match sh.generated {
        Some(g) => {
            transmit_generated(tx, g, sh.stop)?;
            InputErrors::default()
        }
        None => transmit_files(tx, sh.files, sh.loaded, sh.cfg.play.loops, sh.stop)?,
    };
    tx.finish()?;
    Ok(errors)
}

/// Sends a generated stream once, until it ends, its time limit passes or
/// the run is stopped.
fn transmit_generated(tx: &mut Transmitter<'_>, g: &Generated, stop: &AtomicBool) -> Result<()> {
    let keys = tx.stamps.is_some();
    let shard = tx.shard;
    let mut frames = UniqueFrames::new(g.frames)?.shard(shard.index, shard.count);
    let mut n = 0u64;
    while let Some((ts, f)) = frames.next() {
        let key = if keys {
            match_key(LinkType::Ethernet, f)
        } else {
            0
        };
        tx.emit(ts, f, key)?;
        n += 1;
        if tx.stopped || tx.interrupt.requested() {
            break;
        }
        if n & 0x3ff == 0
            && (stop.load(Ordering::Relaxed)
                || g.time_limit.is_some_and(|l| tx.start.elapsed() >= l))
        {
            break;
        }
    }
    Ok(())
}

/// Sends every pass of the capture files: from memory, or streaming (each
/// file up to its end or its defect, which is returned), until the end or
/// the operator's stop.
fn transmit_files(
    tx: &mut Transmitter<'_>,
    files: &[PathBuf],
    loaded: Option<&Preloaded>,
    loops: u32,
    stop: &AtomicBool,
) -> Result<InputErrors> {
    let keys = tx.stamps.is_some();
    let mut clock = PassClock::new();
    let mut errors = InputErrors::default();
    let halted =
        |tx: &Transmitter<'_>| tx.stopped || tx.interrupt.requested() || tx.limit_reached.is_some();
    for pass in 0..loops {
        clock.start_pass();
        if let Some(p) = loaded {
            let (i, n) = (tx.shard.index as usize, tx.shard.count as usize);
            for &(ts, s, e, key) in p.frames.iter().skip(i).step_by(n) {
                if halted(tx) {
                    break;
                }
                tx.emit(clock.map(ts), &p.bytes[s..e], key)?;
            }
        } else {
            for (i, f) in files.iter().enumerate() {
                if halted(tx) {
                    break;
                }
                // Every header was read before the run; a file gone since
                // is a defect at its start.
                let mut r = match CaptureReader::open(f) {
                    Ok(r) => r,
                    Err(e) => {
                        errors.note(i, &e, 0);
                        continue;
                    }
                };
                let mut index = 0u64;
                while !halted(tx) {
                    let rec = match r.next_record() {
                        Ok(Some(rec)) => rec,
                        Ok(None) => break,
                        Err(e) => {
                            errors.note(i, &e, index);
                            break;
                        }
                    };
                    if rec.link_type != LinkType::Ethernet {
                        return Err(not_ethernet(&f.display().to_string(), index, rec.link_type));
                    }
                    if let Some(flt) = &mut tx.filter
                        && !flt.matches(rec.link_type, rec.data, rec.orig_len)?
                    {
                        if pass == 0 {
                            tx.filtered_out += 1;
                        }
                        index += 1;
                        continue;
                    }
                    let key = if keys {
                        match_key(rec.link_type, rec.data)
                    } else {
                        0
                    };
                    tx.emit(clock.map(rec.ts_ns), rec.data, key)?;
                    index += 1;
                }
                if pass == 0 {
                    tx.lengths_fixed += r.lengths_fixed();
                }
            }
        }
        if stop.load(Ordering::Relaxed) || halted(tx) {
            break;
        }
    }
    Ok(errors)
}

/// What one sender thread did (or several, [`TxRun::merge`]d).
struct TxRun {
    stats: TxStats,
    stamps: Vec<Stamp>,
    elapsed: Duration,
    qdisc_bypass: bool,
    input_errors: InputErrors,
    /// The operator's stop ended the sending early.
    interrupted: bool,
    /// Records whose original length was replaced by the captured one.
    lengths_fixed: u64,
    /// Gaps in capture time cut to the pacing limit.
    gaps_capped: u64,
    /// Gaps in capture time longer than the limit.
    gaps: crate::pacing::LongGaps,
    /// `--limit` or `--duration` ended the sending.
    limit_reached: Option<LimitReached>,
    /// The share of the requested rate reached.
    rate_reached: Option<f64>,
    /// Records the filter did not match.
    filtered_out: u64,
}

impl TxRun {
    /// The senders' runs as one: counts added, send stamps in time order,
    /// the longest elapsed time, the lowest share of its rate any reached
    /// (`None` for no run).
    fn merge(runs: Vec<TxRun>) -> Option<TxRun> {
        let mut it = runs.into_iter();
        let mut all = it.next()?;
        for r in it {
            let (a, b) = (&mut all.stats, r.stats);
            a.packets += b.packets;
            a.bytes += b.bytes;
            a.failed += b.failed;
            a.retried_enobufs += b.retried_enobufs;
            a.retried_eagain += b.retried_eagain;
            for (e, n) in b.errors {
                *a.errors.entry(e).or_default() += n;
            }
            all.stamps.extend(r.stamps);
            all.elapsed = all.elapsed.max(r.elapsed);
            all.qdisc_bypass &= r.qdisc_bypass;
            all.interrupted |= r.interrupted;
            all.lengths_fixed += r.lengths_fixed;
            // Every sender of the stream meets every gap.
            all.gaps_capped = all.gaps_capped.max(r.gaps_capped);
            all.gaps = all.gaps.max(r.gaps);
            all.limit_reached = all.limit_reached.or(r.limit_reached);
            all.rate_reached = match (all.rate_reached, r.rate_reached) {
                (Some(x), Some(y)) => Some(x.min(y)),
                (x, y) => x.or(y),
            };
            all.filtered_out += r.filtered_out;
        }
        // Matching takes the sends in time order (one sender's are: a
        // stable sort of a sorted run is one pass).
        all.stamps.sort_by_key(|s| s.t_ns);
        Some(all)
    }
}

/// What the sender and receiver threads share.
#[derive(Clone, Copy)]
struct Shared<'a> {
    cfg: &'a LiveConfig,
    files: &'a [PathBuf],
    loaded: Option<&'a Preloaded>,
    /// Frames made as they are sent instead of `files`.
    generated: Option<&'a Generated>,
    /// The origin of both sides' timestamps.
    origin: Instant,
    /// Set when the receiver should drain and stop (and the sender give up).
    stop: &'a AtomicBool,
    /// The operator's stop: the sender stops sending, the grace period ends.
    interrupt: Stop<'a>,
    progress: Option<&'a ProgressBar>,
}

fn sender_thread(
    sh: Shared<'_>,
    shard: Shard,
    ready: Sender<Result<()>>,
    go: Receiver<()>,
) -> Result<TxRun> {
    let cfg = sh.cfg;
    let sock = match open_endpoint(&cfg.tx, None) {
        Ok(s) => s,
        Err(e) => {
            let msg = format!("{e:#}");
            let _ = ready.send(Err(e));
            bail!("{msg}");
        }
    };
    if let Some(g) = sh.generated
        && sock.mtu > 0
        && let Err(e) = check_fits(&cfg.tx, sock.mtu, g.frames.size)
    {
        // The kernel would refuse every frame (EMSGSIZE): say so once.
        let msg = format!("{e:#}");
        let _ = ready.send(Err(e));
        bail!("{msg}");
    }
    // SAFETY: prctl(PR_SET_TIMERSLACK) only changes this thread's timer
    // slack; the argument is a plain integer.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
    }
    let _ = ready.send(Ok(()));
    if go.recv().is_err() {
        bail!("cancelled");
    }
    let capacity = match (cfg.rx.is_some(), sh.loaded, sh.generated) {
        (false, _, _) => None,
        (true, _, Some(g)) => {
            Some(usize::try_from(shard.limit(g.frames.packets)).map_or(1 << 20, |n| n.min(1 << 26)))
        }
        (true, Some(p), None) => Some(
            (p.frames.len() / shard.count as usize + 1).saturating_mul(cfg.play.loops as usize),
        ),
        (true, None, None) => Some(1 << 16),
    };
    let start = Instant::now();
    let mut tx = Transmitter {
        sock: &sock,
        ep: &cfg.tx,
        origin: sh.origin,
        start,
        schedule: Schedule::new(shard.pacing(cfg.play.pacing)),
        stats: TxStats::default(),
        errnos: BTreeMap::new(),
        stamps: capacity.map(Vec::with_capacity),
        progress: if shard.index == 0 { sh.progress } else { None },
        attempted: 0,
        batch: (cfg.io == IoBackend::Ring).then(TxBatch::new),
        interrupt: sh.interrupt,
        stopped: false,
        lengths_fixed: 0,
        limits: Limits {
            packets: cfg.play.limits.packets.map(|n| shard.limit(n)),
            ..cfg.play.limits
        },
        limit_reached: None,
        // Compiled here (checked once before the run): the program stays
        // with the thread that runs it.
        filter: match (sh.loaded, &cfg.play.filter) {
            (None, Some(expr)) if sh.generated.is_none() => Some(BpfFilter::new(expr)?),
            _ => None,
        },
        filtered_out: 0,
        shard,
    };
    let input_errors = transmit(&mut tx, sh)?;
    let interrupted = tx.stopped || sh.interrupt.requested();
    let elapsed = start.elapsed();
    let mut stats = tx.stats;
    stats.errors = tx
        .errnos
        .iter()
        .map(|(&e, &n)| (io::Error::from_raw_os_error(e).to_string(), n))
        .collect();
    Ok(TxRun {
        stats,
        stamps: tx.stamps.unwrap_or_default(),
        elapsed,
        qdisc_bypass: sock.qdisc_bypass,
        input_errors,
        interrupted,
        lengths_fixed: tx.lengths_fixed,
        gaps_capped: tx.schedule.capped_gaps(),
        gaps: tx.schedule.long_gaps(),
        limit_reached: tx.limit_reached,
        rate_reached: tx.schedule.rate_reached(elapsed),
        filtered_out: tx.filtered_out,
    })
}

// ---------------------------------------------------------------------------
// Receiving

/// After the stop signal the receiver drains its queue, for at most this long.
const DRAIN_LIMIT: Duration = Duration::from_millis(200);

struct RxRun {
    stamps: Vec<Stamp>,
    recv_buffer: usize,
    /// `PACKET_STATISTICS`: frames dropped, ring blocks found held.
    kernel_dropped: u64,
    kernel_freeze_q: u64,
}

fn receiver_thread(sh: Shared<'_>, ep: &Endpoint, ready: Sender<Result<()>>) -> Result<RxRun> {
    if sh.cfg.io == IoBackend::Ring {
        return ring_receiver(sh, ep, ready);
    }
    let (origin, stop) = (sh.origin, sh.stop);
    let sock = match open_endpoint(ep, Some(sh.cfg.rx_buffer_bytes)) {
        Ok(s) => s,
        Err(e) => {
            let msg = format!("{e:#}");
            let _ = ready.send(Err(e));
            bail!("{msg}");
        }
    };
    let _ = ready.send(Ok(()));
    let mut batch = RecvBatch::new();
    let mut stamps = Vec::with_capacity(1 << 16);
    let mut stopping: Option<Instant> = None;
    loop {
        match batch.recv(&sock) {
            Ok(n) => {
                // One read time for the frames of one call: when they were read.
                let t = Instant::now();
                let t_ns = u64::try_from(t.duration_since(origin).as_nanos()).unwrap_or(u64::MAX);
                for i in 0..n {
                    let (frame, outgoing) = batch.frame(i);
                    if !outgoing {
                        stamps.push(Stamp {
                            key: match_key(LinkType::Ethernet, frame),
                            t_ns,
                        });
                    }
                }
                if stop.load(Ordering::Acquire) {
                    // Drain what is queued, but not forever under a flood.
                    let since = *stopping.get_or_insert(t);
                    if n < RECV_BATCH || since.elapsed() > DRAIN_LIMIT {
                        break;
                    }
                }
            }
            Err(err) => match err.raw_os_error() {
                Some(libc::EINTR) => {}
                Some(libc::EAGAIN) => {
                    if stop.load(Ordering::Acquire) {
                        break; // queue drained
                    }
                    wait_readable(sock.fd, 5);
                }
                _ => bail!("--rx {}: receive failed: {err}", ep.describe()),
            },
        }
    }
    let drops = sock.kernel_drops();
    Ok(RxRun {
        stamps,
        recv_buffer: sock.recv_buffer,
        kernel_dropped: drops.dropped,
        kernel_freeze_q: drops.frozen,
    })
}

/// Nanoseconds since the Unix epoch (`CLOCK_REALTIME`, the ring's clock).
fn realtime_ns() -> i128 {
    match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => i128::try_from(d.as_nanos()).unwrap_or(i128::MAX),
        Err(e) => -i128::try_from(e.duration().as_nanos()).unwrap_or(i128::MAX),
    }
}

/// `--io ring`: the receiver on a `TPACKET_V3` ring (see the module docs).
fn ring_receiver(sh: Shared<'_>, ep: &Endpoint, ready: Sender<Result<()>>) -> Result<RxRun> {
    let (origin, stop) = (sh.origin, sh.stop);
    let rc = ring_config(sh.cfg.rx_buffer_bytes);
    let opened = match &ep.netns {
        Some(ns) => enter_netns(ns),
        None => Ok(()),
    }
    .and_then(|()| RxRing::open(&ep.interface, true, None, &rc).map_err(|e| anyhow!("{e}")))
    .with_context(|| format!("--rx {}", ep.describe()));
    let mut ring = match opened {
        Ok(r) => r,
        Err(e) => {
            let msg = format!("{e:#}");
            let _ = ready.send(Err(e));
            bail!("{msg}");
        }
    };
    let since_origin =
        |t: Instant| u64::try_from(t.duration_since(origin).as_nanos()).unwrap_or(u64::MAX);
    // The kernel stamps frames on CLOCK_REALTIME; both sides' times are
    // monotonic from `origin`. One sample of each gives the offset.
    let offset = realtime_ns() - i128::from(since_origin(Instant::now()));
    let _ = ready.send(Ok(()));
    let capacity = sh
        .generated
        .and_then(|g| usize::try_from(g.frames.packets).ok())
        .map_or(1 << 16, |n| n.min(1 << 26));
    let mut stamps = Vec::with_capacity(capacity);
    let mut stopping: Option<Instant> = None;
    let mut idle_after_stop = false;
    loop {
        let mut got = 0usize;
        // Frames cannot have arrived after they are read: a kernel time
        // past the latest reading (clocks stepped) is cut to a new one.
        let mut read_ns = since_origin(Instant::now());
        while let Some(f) = ring.next_frame() {
            got += 1;
            if f.outgoing {
                continue;
            }
            let t_ns = if f.ts_ns == 0 {
                read_ns
            } else {
                let t = (i128::from(f.ts_ns) - offset).max(0);
                if t > i128::from(read_ns) {
                    read_ns = since_origin(Instant::now());
                }
                u64::try_from(t).unwrap_or(u64::MAX).min(read_ns)
            };
            stamps.push(Stamp {
                key: match_key(LinkType::Ethernet, f.bytes),
                t_ns,
            });
            if got >= 1 << 14 {
                break;
            }
        }
        if stop.load(Ordering::Acquire) {
            // Drain what is handed over (a block is handed over within its
            // timeout: wait once for that), but not forever under a flood.
            let since = *stopping.get_or_insert_with(Instant::now);
            if since.elapsed() > DRAIN_LIMIT || (got == 0 && idle_after_stop) {
                break;
            }
            idle_after_stop = got == 0;
            if got == 0 {
                wait_readable(ring.fd(), 5);
            }
        } else if got == 0 {
            wait_readable(ring.fd(), 5);
        }
    }
    let (kernel_dropped, kernel_freeze_q) = ring.statistics();
    Ok(RxRun {
        stamps,
        recv_buffer: rc.block_bytes as usize * rc.blocks as usize,
        kernel_dropped,
        kernel_freeze_q,
    })
}

// ---------------------------------------------------------------------------
// The run

/// Sets the stop flag when dropped, so that no exit path leaves the
/// receiver running (a scoped thread would then never be joined).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

fn joined<T>(h: thread::ScopedJoinHandle<'_, Result<T>>, what: &str) -> Result<T> {
    h.join()
        .map_err(|_| anyhow!("the {what} thread panicked"))?
}

/// Sends a generated stream live as `cfg` says (once: `cfg.loops` and
/// `cfg.preload` do not apply) and returns the report. Errors name the
/// interface or the namespace at fault, or the bad setting.
pub fn run_live_generated(
    generated: &Generated,
    cfg: &LiveConfig,
    progress: Option<&ProgressBar>,
) -> Result<LiveReport> {
    cfg.play.pacing.validate()?;
    cfg.check_tx_threads(true)?;
    // A bad size or flow count fails here, before any socket is opened.
    UniqueFrames::new(generated.frames)?;
    if let Some(pb) = progress
        && generated.frames.packets != u64::MAX
    {
        pb.set_length(generated.frames.packets);
    }
    let f = generated.frames;
    let input = format!(
        "generated: unique {}-byte frames over {} flows",
        f.size, f.flows
    );
    run(
        &[],
        None,
        Some(generated),
        input,
        cfg,
        progress,
        Stop::never(),
    )
}

/// Replays `files` live as `cfg` says and returns the report. Errors name
/// the file (and byte offset), the interface or the namespace at fault; a
/// defect part-way through a file is no error but one of the report's
/// `input_errors`.
pub fn run_live(
    files: &[PathBuf],
    cfg: &LiveConfig,
    progress: Option<&ProgressBar>,
) -> Result<LiveReport> {
    run_live_with_stop(files, cfg, progress, Stop::never())
}

/// [`run_live`], ending the sending early when `interrupt` is requested:
/// the report covers the frames sent until then and says `interrupted`.
pub fn run_live_with_stop(
    files: &[PathBuf],
    cfg: &LiveConfig,
    progress: Option<&ProgressBar>,
    interrupt: Stop<'_>,
) -> Result<LiveReport> {
    if files.is_empty() {
        bail!("--tx needs at least one capture file");
    }
    if cfg.play.loops == 0 {
        bail!("--loop must be at least 1");
    }
    cfg.play.pacing.validate()?;
    cfg.check_tx_threads(cfg.preload)?;
    // Open every file first, so a bad name or header fails before any work.
    check_headers(files)?;
    // Compiled first: an expression libpcap refuses fails before any work.
    let mut filter = cfg.play.filter.as_deref().map(BpfFilter::new).transpose()?;
    let loaded = if cfg.preload {
        let p = preload(files, cfg.rx.is_some(), interrupt, filter.as_mut())?;
        if let Some(pb) = progress {
            pb.set_length((p.frames.len() as u64).saturating_mul(u64::from(cfg.play.loops)));
        }
        Some(p)
    } else {
        None
    };
    let mut report = run(
        files,
        loaded.as_ref(),
        None,
        String::new(),
        cfg,
        progress,
        interrupt,
    )?;
    report.inputs = files.iter().map(|p| p.display().to_string()).collect();
    if let Some(p) = loaded {
        // Preloading read every file before the sending began.
        report.input_errors = p.errors.into_vec();
        report.input_lengths_fixed = p.lengths_fixed;
        report.filtered_out = p.filtered_out;
        report.interrupted |= interrupt.requested();
    }
    Ok(report)
}

/// The run itself, from captures (`files`, `loaded` when preloaded) or a
/// generated stream (described as `input`).
fn run(
    files: &[PathBuf],
    loaded: Option<&Preloaded>,
    generated: Option<&Generated>,
    input: String,
    cfg: &LiveConfig,
    progress: Option<&ProgressBar>,
    interrupt: Stop<'_>,
) -> Result<LiveReport> {
    let stop = AtomicBool::new(false);
    let sh_origin = Instant::now();
    let sh = Shared {
        cfg,
        files,
        loaded,
        generated,
        origin: sh_origin,
        stop: &stop,
        interrupt,
        progress,
    };
    let (tx_run, rx_run) = thread::scope(|s| -> Result<(TxRun, Option<RxRun>)> {
        let _stop_guard = StopOnDrop(&stop);
        let rx_handle = match &cfg.rx {
            Some(ep) => {
                let (ready_tx, ready_rx) = bounded(1);
                let h = thread::Builder::new()
                    .name("live-rx".into())
                    .spawn_scoped(s, move || receiver_thread(sh, ep, ready_tx))
                    .context("cannot start the receiver thread")?;
                match ready_rx.recv() {
                    Ok(Ok(())) => Some(h),
                    Ok(Err(e)) => return Err(e),
                    Err(_) => {
                        return Err(joined(h, "receiver")
                            .err()
                            .unwrap_or_else(|| anyhow!("the receiver stopped")));
                    }
                }
            }
            None => None,
        };
        // Every sender opens its socket first; all start together.
        let count = cfg.tx_threads.max(1);
        let (go_tx, go_rx) = bounded(count as usize);
        let mut senders = Vec::with_capacity(count as usize);
        for index in 0..count {
            let (ready_tx, ready_rx) = bounded(1);
            let go_rx = go_rx.clone();
            let shard = Shard { index, count };
            let h = thread::Builder::new()
                .name(format!("live-tx{index}"))
                .spawn_scoped(s, move || sender_thread(sh, shard, ready_tx, go_rx))
                .context("cannot start a sender thread")?;
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    return Err(joined(h, "sender")
                        .err()
                        .unwrap_or_else(|| anyhow!("the sender stopped")));
                }
            }
            senders.push(h);
        }
        for _ in 0..count {
            let _ = go_tx.send(());
        }
        let mut runs = Vec::with_capacity(senders.len());
        for h in senders {
            runs.push(joined(h, "sender")?);
        }
        let Some(tx_run) = TxRun::merge(runs) else {
            bail!("no sender ran");
        };
        let rx_run = match rx_handle {
            Some(h) => {
                // Also after an operator's stop: frames still on the way
                // are not lost.
                thread::sleep(cfg.grace);
                sh.stop.store(true, Ordering::Release);
                Some(joined(h, "receiver")?)
            }
            None => None,
        };
        Ok((tx_run, rx_run))
    })?;

    let elapsed_s = tx_run.elapsed.as_secs_f64();
    let st = tx_run.stats;
    let rx = match (rx_run, &cfg.rx) {
        (Some(r), Some(ep)) => {
            let m = match cfg.hlog.as_deref() {
                Some(path) => {
                    // The log's start: the wall-clock time of the stamps' origin.
                    let start = std::time::SystemTime::now() - sh_origin.elapsed();
                    write_hlog(path, start, &tx_run.stamps, &r.stamps)?
                }
                None => match_frames(&tx_run.stamps, &r.stamps),
            };
            Some(RxReport {
                endpoint: ep.clone(),
                recv_buffer: r.recv_buffer,
                grace_ms: u64::try_from(cfg.grace.as_millis()).unwrap_or(u64::MAX),
                frames: r.stamps.len() as u64,
                received: m.received,
                lost: m.lost,
                reordered: m.reordered,
                unmatched: m.unmatched,
                received_pps: Rates::of(m.received, 0, m.span_ns as f64 / 1e9).pps,
                kernel_dropped: r.kernel_dropped,
                kernel_freeze_q: r.kernel_freeze_q,
                latency: Latency::of(&m.histogram),
                histogram: m.histogram,
            })
        }
        _ => None,
    };
    Ok(LiveReport {
        inputs: vec![input],
        tx: cfg.tx.clone(),
        qdisc_bypass: tx_run.qdisc_bypass,
        io: cfg.io,
        pacing: cfg.play.pacing.describe(),
        loops: cfg.play.loops,
        preload: cfg.preload,
        sent: st.packets,
        bytes: st.bytes,
        elapsed_s,
        rated: Rates::of(st.packets, st.bytes, elapsed_s),
        tx_stats: st,
        input_errors: tx_run.input_errors.into_vec(),
        interrupted: tx_run.interrupted,
        input_lengths_fixed: tx_run.lengths_fixed,
        pacing_gaps_capped: tx_run.gaps_capped,
        capture_gaps: tx_run.gaps,
        limit_reached: tx_run.limit_reached,
        rate_reached: tx_run.rate_reached,
        filter: cfg.play.filter.clone(),
        filtered_out: tx_run.filtered_out,
        rx,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::wire::checksum;

    #[test]
    fn shards_split_limits_and_rates() {
        for count in [1u32, 2, 3, 7] {
            for n in [0u64, 1, 6, 7, 100, 101] {
                let parts: Vec<u64> = (0..count)
                    .map(|index| Shard { index, count }.limit(n))
                    .collect();
                assert_eq!(parts.iter().sum::<u64>(), n, "{count} shards of {n}");
                assert!(parts.iter().max().unwrap() - parts.iter().min().unwrap() <= 1);
            }
        }
        let s = Shard { index: 1, count: 4 };
        assert_eq!(s.pacing(Pacing::Pps(1000.0)), Pacing::Pps(250.0));
        assert_eq!(s.pacing(Pacing::TopSpeed), Pacing::TopSpeed);
    }

    /// Two senders' runs merge into one: counts added, stamps in time
    /// order, the longest time, the lowest rate share, the first limit.
    #[test]
    fn sender_runs_merge() {
        let run = |t: &[u64], packets, ms, bypass, rate| TxRun {
            stats: TxStats {
                packets,
                bytes: packets * 64,
                failed: 1,
                errors: [("No buffer space".to_string(), 1)].into(),
                ..TxStats::default()
            },
            stamps: t.iter().map(|&t_ns| Stamp { key: t_ns, t_ns }).collect(),
            elapsed: Duration::from_millis(ms),
            qdisc_bypass: bypass,
            input_errors: InputErrors::default(),
            interrupted: false,
            lengths_fixed: 0,
            gaps_capped: 2,
            gaps: crate::pacing::LongGaps {
                count: 2,
                longest_ns: 5,
                beyond_ns: 9,
            },
            limit_reached: None,
            rate_reached: rate,
            filtered_out: 0,
        };
        assert!(TxRun::merge(Vec::new()).is_none());
        let mut b = run(&[2, 3, 6], 3, 90, false, Some(0.9));
        b.limit_reached = Some(LimitReached::Duration);
        let m = TxRun::merge(vec![run(&[1, 4, 5, 7], 4, 100, true, Some(1.0)), b]).unwrap();
        assert_eq!(m.stats.packets, 7);
        assert_eq!(m.stats.bytes, 7 * 64);
        assert_eq!(m.stats.failed, 2);
        assert_eq!(m.stats.errors["No buffer space"], 2);
        let t: Vec<u64> = m.stamps.iter().map(|s| s.t_ns).collect();
        assert_eq!(t, [1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(m.elapsed, Duration::from_millis(100));
        assert!(!m.qdisc_bypass);
        assert_eq!(m.gaps_capped, 2, "each sender meets every gap");
        assert_eq!(m.gaps.count, 2);
        assert_eq!(m.rate_reached, Some(0.9));
        assert_eq!(m.limit_reached, Some(LimitReached::Duration));
    }

    #[test]
    fn several_senders_need_frames_in_memory_and_a_rate() {
        let cfg = |tx_threads, pacing| LiveConfig {
            tx_threads,
            play: Playback {
                pacing,
                ..Playback::default()
            },
            ..LiveConfig::default()
        };
        assert!(
            cfg(1, Pacing::Multiplier(1.0))
                .check_tx_threads(false)
                .is_ok()
        );
        assert!(cfg(4, Pacing::Pps(1e6)).check_tx_threads(true).is_ok());
        assert!(cfg(4, Pacing::TopSpeed).check_tx_threads(true).is_ok());
        for (c, preloaded, want) in [
            (cfg(0, Pacing::TopSpeed), true, "must be 1 to 64"),
            (cfg(65, Pacing::TopSpeed), true, "must be 1 to 64"),
            (cfg(2, Pacing::TopSpeed), false, "needs --preload"),
            (
                cfg(2, Pacing::Multiplier(1.0)),
                true,
                "needs --pps or --topspeed",
            ),
            (cfg(2, Pacing::Mbps(10.0)), true, "not 10 Mbps"),
        ] {
            let e = c.check_tx_threads(preloaded).unwrap_err().to_string();
            assert!(e.starts_with("--tx-threads") && e.contains(want), "{e}");
        }
    }

    /// Ethernet + IPv4 (optional options) + UDP with `payload`.
    fn udp4(ttl: u8, tos: u8, options: &[u8], payload: &[u8]) -> Vec<u8> {
        let ihl = 20 + options.len();
        let total = ihl + 8 + payload.len();
        let mut f = vec![
            0x02, 0xbb, 0, 0, 0, 0x0b, 0x02, 0xbb, 0, 0, 0, 0x0a, 0x08, 0x00, // ethernet
        ];
        // version 4, IHL, TOS, total length
        f.extend_from_slice(&[0x40 | (ihl / 4) as u8, tos]);
        f.extend_from_slice(&(total as u16).to_be_bytes());
        // identification 0x1234, DF, TTL, UDP, checksum (filled in below)
        f.extend_from_slice(&[0x12, 0x34, 0x40, 0x00, ttl, 17, 0, 0]);
        // 10.77.0.1 -> 10.77.0.2
        f.extend_from_slice(&[10, 77, 0, 1, 10, 77, 0, 2]);
        f.extend_from_slice(options);
        let c = !checksum::sum(&f[14..14 + ihl]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
        let ulen = 8 + payload.len();
        f.extend_from_slice(&[0x30, 0x39, 0x00, 0x09, (ulen >> 8) as u8, ulen as u8, 0, 0]);
        f.extend_from_slice(payload);
        f
    }

    /// Ethernet + IPv6 (optional hop-by-hop header) + UDP with `payload`.
    fn udp6(hop: u8, tclass: u8, hbh: Option<&[u8]>, payload: &[u8]) -> Vec<u8> {
        let ext = hbh.map_or(0, |h| h.len() + 2);
        let plen = ext + 8 + payload.len();
        let mut f = vec![
            0x02, 0xbb, 0, 0, 0, 0x0b, 0x02, 0xbb, 0, 0, 0, 0x0a, 0x86, 0xdd,
        ];
        f.extend_from_slice(&[
            0x60 | (tclass >> 4),
            (tclass << 4),
            0,
            0,
            (plen >> 8) as u8,
            plen as u8,
            if hbh.is_some() { 0 } else { 17 },
            hop,
        ]);
        f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        if let Some(h) = hbh {
            // next header UDP, length in 8-octet units beyond the first 8
            f.extend_from_slice(&[17, ((h.len() + 2) / 8 - 1) as u8]);
            f.extend_from_slice(h);
        }
        let ulen = 8 + payload.len();
        f.extend_from_slice(&[0x30, 0x39, 0x00, 0x09, (ulen >> 8) as u8, ulen as u8, 0, 0]);
        f.extend_from_slice(payload);
        f
    }

    fn key(f: &[u8]) -> u64 {
        match_key(LinkType::Ethernet, f)
    }

    #[test]
    fn key_ignores_what_a_router_changes() {
        let base = udp4(64, 0, &[], b"hello, router");
        // TTL decremented (checksum follows), ECN CE, DSCP.
        assert_eq!(key(&base), key(&udp4(63, 0, &[], b"hello, router")));
        assert_eq!(key(&base), key(&udp4(64, 0x03, &[], b"hello, router")));
        assert_eq!(key(&base), key(&udp4(64, 0xb8, &[], b"hello, router")));
        // An option inserted (IHL, total length and checksum change).
        let opt = [0x5e, 12, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
        assert_eq!(key(&base), key(&udp4(64, 0, &opt, b"hello, router")));
        // The MACs rewritten, padding added to the frame.
        let mut f = base.clone();
        f[..12].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        f.extend_from_slice(&[0; 6]);
        assert_eq!(key(&base), key(&f));
        // A damaged checksum field only.
        let mut f = base.clone();
        f[24] ^= 0xff;
        assert_eq!(key(&base), key(&f));
    }

    #[test]
    fn key_sees_what_a_router_keeps() {
        let base = udp4(64, 0, &[], b"hello, router");
        assert_ne!(key(&base), key(&udp4(64, 0, &[], b"hello, rooter")));
        let mut f = base.clone();
        f[29] = 9; // source address
        assert_ne!(key(&base), key(&f));
        let mut f = base.clone();
        f[18] = 0x99; // identification
        assert_ne!(key(&base), key(&f));
        let mut f = base.clone();
        f[35] = 10; // destination port
        assert_ne!(key(&base), key(&f));
    }

    #[test]
    fn key_ipv6_ignores_hop_limit_class_and_hop_by_hop() {
        let base = udp6(64, 0, None, b"six");
        assert_eq!(key(&base), key(&udp6(1, 0x03, None, b"six")));
        // A hop-by-hop header with an option inserted: PadN then data.
        let hbh = [0x3e, 4, 0xaa, 0xbb, 0xcc, 0xdd];
        assert_eq!(key(&base), key(&udp6(64, 0, Some(&hbh), b"six")));
        assert_ne!(key(&base), key(&udp6(64, 0, None, b"sex")));
        assert_ne!(key(&base), key(&udp4(64, 0, &[], b"six")));
    }

    #[test]
    fn key_never_panics() {
        for len in 0..80 {
            let f = udp4(64, 0, &[], b"0123456789");
            let _ = key(&f[..len.min(f.len())]);
            let _ = key(&vec![0xff; len]);
            let _ = match_key(LinkType::RawIp, &vec![0x45; len]);
        }
    }

    fn st(key: u64, t_ns: u64) -> Stamp {
        Stamp { key, t_ns }
    }

    /// `--hlog`: one interval histogram per second of receive time, read
    /// back with hdrhistogram's log reader; counts and values (us) add up.
    #[test]
    fn hlog_writes_one_histogram_per_second() {
        use hdrhistogram::serialization::Deserializer;
        use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
        // 3.5 s of frames, one every 10 ms, each received 250 us later.
        let sent: Vec<Stamp> = (0..350).map(|i| st(i, 1_000 + i * 10_000_000)).collect();
        let recv: Vec<Stamp> = sent.iter().map(|s| st(s.key, s.t_ns + 250_000)).collect();
        let path =
            std::env::temp_dir().join(format!("bloomplane-hlog-{}.hlog", std::process::id()));
        let start = std::time::UNIX_EPOCH + Duration::from_secs(1_764_000_000);
        let m = write_hlog(&path, start, &sent, &recv).unwrap();
        assert_eq!(m.received, 350);
        let text = std::fs::read(&path).unwrap();
        let mut total = 0;
        let mut starts = Vec::new();
        let mut de = Deserializer::new();
        for e in IntervalLogIterator::new(&text) {
            match e.unwrap() {
                LogEntry::Interval(h) => {
                    starts.push(h.start_timestamp().as_secs_f64());
                    let bytes = base64::Engine::decode(
                        &base64::engine::general_purpose::STANDARD,
                        h.encoded_histogram(),
                    )
                    .unwrap();
                    let hist: Histogram<u64> = de.deserialize(&mut &bytes[..]).unwrap();
                    assert_eq!(hist.max(), 250, "microseconds");
                    total += hist.len();
                }
                LogEntry::StartTime(t) => assert_eq!(t.as_secs(), 1_764_000_000),
                LogEntry::BaseTime(_) => {}
            }
        }
        assert_eq!(total, 350);
        assert_eq!(starts, vec![0.0, 1.0, 2.0, 3.0]);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn matching_counts_loss_reorder_unmatched() {
        let sent = [st(1, 100), st(2, 200), st(3, 300), st(4, 400)];
        // 3 arrives before 2; 4 is lost; 9 is noise.
        let recv = [st(1, 150), st(9, 160), st(3, 330), st(2, 380)];
        let m = match_frames(&sent, &recv);
        assert_eq!((m.received, m.lost, m.reordered, m.unmatched), (3, 1, 1, 1));
        assert_eq!(m.received + m.lost, sent.len() as u64);
        assert_eq!(m.histogram.len(), 3);
        assert_eq!(m.histogram.min(), 30);
        assert_eq!(m.histogram.max(), 180);
        assert_eq!(m.span_ns, 380 - 100);
    }

    #[test]
    fn identical_frames_match_first_in_first_out() {
        // Three copies of the same frame, 1000 ns apart, each taking 50 ns.
        let sent = [st(7, 1000), st(7, 2000), st(7, 3000)];
        let recv = [st(7, 1050), st(7, 2050), st(7, 3050), st(7, 9999)];
        let m = match_frames(&sent, &recv);
        assert_eq!((m.received, m.lost, m.reordered, m.unmatched), (3, 0, 0, 1));
        assert_eq!(m.histogram.max(), 50);
        assert_eq!(m.histogram.min(), 50);
        // One copy lost: the later receives still pair in order.
        let m = match_frames(&sent, &recv[..2]);
        assert_eq!((m.received, m.lost), (2, 1));
    }

    #[test]
    fn a_lost_copy_shifts_fifo_attribution_not_totals() {
        // Two identical frames (key 7) with another between them; the
        // first copy is lost. FIFO gives the second copy to the first:
        // the totals are exact, the latency and the order are not (see
        // `match_frames`).
        let sent = [st(7, 1000), st(8, 1500), st(7, 2000)];
        let recv = [st(8, 1550), st(7, 2050)];
        let m = match_frames(&sent, &recv);
        assert_eq!((m.received, m.lost, m.unmatched), (2, 1, 0));
        assert_eq!(m.reordered, 1);
        assert_eq!(m.histogram.max(), 1050);
    }

    #[test]
    fn a_late_unique_frame_is_reordered_not_lost() {
        let sent = [st(1, 0), st(2, 10), st(3, 20), st(4, 30)];
        let recv = [st(1, 5), st(3, 25), st(4, 35), st(2, 90)];
        let m = match_frames(&sent, &recv);
        assert_eq!((m.received, m.lost, m.reordered, m.unmatched), (4, 0, 1, 0));
        assert_eq!(m.histogram.max(), 80);
    }

    #[test]
    fn matching_invariants_hold_on_arbitrary_input() {
        use rand::{Rng, SeedableRng, rngs::StdRng};
        let mut rng = StdRng::seed_from_u64(7);
        for _ in 0..500 {
            let keys = rng.random_range(1..6u64);
            let sent: Vec<Stamp> = (0..rng.random_range(0..40u64))
                .map(|i| st(rng.random_range(0..keys), i * 10))
                .collect();
            let recv: Vec<Stamp> = (0..rng.random_range(0..40u64))
                .map(|_| st(rng.random_range(0..keys + 2), rng.random_range(0..500)))
                .collect();
            let m = match_frames(&sent, &recv);
            assert_eq!(m.received + m.lost, sent.len() as u64);
            assert_eq!(m.received + m.unmatched, recv.len() as u64);
            assert!(m.reordered <= m.received);
            assert_eq!(m.histogram.len(), m.received);
        }
    }

    #[test]
    fn matching_empty_and_clock_edge() {
        let m = match_frames(&[], &[]);
        assert_eq!((m.received, m.lost, m.unmatched), (0, 0, 0));
        // A receive stamped before the send it would match (impossible on
        // one monotonic clock) matches nothing.
        let m = match_frames(&[st(1, 500)], &[st(1, 400)]);
        assert_eq!((m.received, m.lost, m.unmatched), (0, 1, 1));
    }

    /// Drives a [`BatchPlan`] as the batched sender does, on a simulated
    /// clock: a wait jumps to the due time, gathering a frame costs
    /// `gather_ns`, a send call `call_ns`. Returns each call's time and
    /// frames, and how often the clock was read.
    fn simulate(
        dues: &[Option<u64>],
        gather_ns: u64,
        call_ns: u64,
    ) -> (Vec<(u64, Vec<usize>)>, usize) {
        struct Sim {
            plan: BatchPlan,
            clock: u64,
            pending: Vec<usize>,
            calls: Vec<(u64, Vec<usize>)>,
            call_ns: u64,
        }
        impl Sim {
            fn flush(&mut self) {
                assert_eq!(self.plan.pending(), self.pending.len());
                if !self.pending.is_empty() {
                    self.calls
                        .push((self.clock, std::mem::take(&mut self.pending)));
                    self.clock += self.call_ns;
                }
                self.plan.sent();
            }
        }
        let mut sim = Sim {
            plan: BatchPlan::new(),
            clock: 0,
            pending: Vec::new(),
            calls: Vec::new(),
            call_ns,
        };
        let mut reads = 0;
        for (i, &due) in dues.iter().enumerate() {
            let now = sim.clock;
            let step = sim.plan.offer(due, || {
                reads += 1;
                now
            });
            if let BeforeGather::FlushAndWait(d) = step {
                sim.flush();
                sim.clock = sim.clock.max(d);
                sim.plan.waited(sim.clock);
            }
            sim.pending.push(i);
            sim.clock += gather_ns;
            if sim.plan.gathered() {
                sim.flush();
            }
        }
        sim.flush();
        (sim.calls, reads)
    }

    /// Every frame sent once, in order, never before it is due.
    fn check_sent(dues: &[Option<u64>], calls: &[(u64, Vec<usize>)]) {
        let order: Vec<usize> = calls.iter().flat_map(|(_, f)| f.iter().copied()).collect();
        assert_eq!(order, (0..dues.len()).collect::<Vec<_>>());
        for (t, frames) in calls {
            assert!(!frames.is_empty() && frames.len() <= TX_BATCH);
            for &i in frames {
                assert!(
                    dues[i].is_none_or(|d| d <= *t),
                    "frame {i} due {:?} sent at {t}",
                    dues[i]
                );
            }
        }
    }

    #[test]
    fn top_speed_sends_full_batches() {
        let dues = vec![None; 200];
        let (calls, reads) = simulate(&dues, 10, 1000);
        check_sent(&dues, &calls);
        let sizes: Vec<usize> = calls.iter().map(|(_, f)| f.len()).collect();
        assert_eq!(sizes, [64, 64, 64, 8]);
        assert_eq!(reads, 0, "top speed needs no clock");
    }

    #[test]
    fn slow_pacing_sends_each_frame_before_waiting_for_the_next() {
        // 10 us apart, a call takes 1 us: nothing is ever behind.
        let dues: Vec<Option<u64>> = (0..100).map(|i| Some(i * 10_000)).collect();
        let (calls, _) = simulate(&dues, 10, 1000);
        check_sent(&dues, &calls);
        assert_eq!(calls.len(), 100, "one frame per call");
        for (k, (t, frames)) in calls.iter().enumerate() {
            // Sent at its due time (plus the gathering), before the next is due.
            assert_eq!(frames, &[k]);
            assert_eq!(*t, k as u64 * 10_000 + 10);
        }
    }

    #[test]
    fn frames_already_due_go_out_together() {
        // 100 ns apart, but a call takes 2 us: the sender falls behind and
        // gathers what has come due meanwhile.
        let dues: Vec<Option<u64>> = (0..1000).map(|i| Some(i * 100)).collect();
        let (calls, reads) = simulate(&dues, 10, 2000);
        check_sent(&dues, &calls);
        assert!(calls.len() < 100, "{} calls", calls.len());
        assert!(calls.iter().skip(1).all(|(_, f)| f.len() > 1));
        // A frame due by the last clock reading needs no new one.
        assert!(reads < dues.len(), "{reads} clock reads");
        // A pending frame is flushed before the sender waits: with a gap
        // after frame 9 it leaves at once, not at frame 10's due time.
        let mut dues: Vec<Option<u64>> = (0..10).map(|_| None).collect();
        dues.push(Some(1_000_000));
        let (calls, _) = simulate(&dues, 10, 1000);
        check_sent(&dues, &calls);
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0], (100, (0..10).collect()));
        assert_eq!(calls[1], (1_000_010, vec![10]));
    }

    #[test]
    fn ring_sizes_follow_the_buffer() {
        let r = ring_config(32 << 20);
        assert_eq!(
            (r.block_bytes, r.blocks, r.block_timeout_ms),
            (1 << 20, 32, 1)
        );
        let r = ring_config(1 << 20);
        assert_eq!((r.block_bytes, r.blocks), (64 << 10, 16));
        let r = ring_config(0);
        assert_eq!((r.block_bytes, r.blocks), (64 << 10, 2));
        let r = ring_config(usize::MAX);
        assert_eq!((r.block_bytes, r.blocks), (1 << 20, 1024));
    }

    #[test]
    fn rates_as_tcpreplay() {
        let r = Rates::of(10_000, 6_540_000, 0.52);
        assert!((r.bytes_per_s - 12_576_923.08).abs() < 0.01, "{r:?}");
        assert!((r.mbps - 100.615_384).abs() < 1e-5, "{r:?}");
        assert!((r.pps - 19_230.769).abs() < 1e-3, "{r:?}");
        let z = Rates::of(1, 60, 0.0);
        assert_eq!((z.bytes_per_s, z.mbps, z.pps), (0.0, 0.0, 0.0));
    }

    #[test]
    fn report_text_has_tcpreplay_lines_and_ring_blocks_only_with_rings() {
        let rep = LiveReport {
            inputs: vec!["x.pcap".into()],
            tx: Endpoint {
                interface: "eth0".into(),
                netns: Some("bp-a".into()),
            },
            qdisc_bypass: true,
            io: IoBackend::Pnet,
            pacing: "topspeed".into(),
            loops: 1,
            preload: false,
            sent: 10_000,
            bytes: 6_540_000,
            elapsed_s: 0.52,
            rated: Rates::of(10_000, 6_540_000, 0.52),
            tx_stats: TxStats::default(),
            input_errors: vec![InputError {
                file: "x.pcap".into(),
                offset: 99_915,
                reason: "record data cut short (85 of 190 bytes)".into(),
                packets_read: 258,
            }],
            interrupted: true,
            input_lengths_fixed: 2,
            pacing_gaps_capped: 0,
            capture_gaps: crate::pacing::LongGaps {
                count: 1,
                longest_ns: 3_600_000_000_000,
                beyond_ns: 3_540_000_000_000,
            },
            limit_reached: Some(LimitReached::Packets),
            rate_reached: Some(0.5),
            filter: None,
            filtered_out: 0,
            rx: None,
        };
        let mut out = Vec::new();
        rep.write_text(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("Actual: 10000 packets (6540000 bytes) sent in 0.52 seconds"),
            "{text}"
        );
        assert!(
            text.contains("Rated: 12576923.1 Bps, 100.62 Mbps, 19230.77 pps"),
            "{text}"
        );
        assert!(
            text.contains("interrupted: stopped after 10000 packets"),
            "{text}"
        );
        assert!(
            text.contains("input error: x.pcap: byte 99915: record data cut short (85 of 190 bytes) (after 258 packets)"),
            "{text}"
        );
        assert!(
            text.contains("input warning: 2 records gave an original length above 16 MiB"),
            "{text}"
        );
        assert!(
            text.contains(
                "capture time: 1 gap longer than a minute (the longest 3600.000 s); \
                 topspeed pacing does not wait for capture time\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("--limit reached: stopped after 10000 packets"),
            "{text}"
        );
        assert!(
            text.contains("warning: the requested rate (topspeed) was not reached: 50% of it"),
            "{text}"
        );
        assert!(rep.write_hgrm(&mut Vec::new()).is_none());

        // The receiver's kernel line: ring blocks only with a ring.
        let rx = |io| {
            let mut r = rep.clone();
            r.io = io;
            r.rx = Some(RxReport {
                endpoint: Endpoint {
                    interface: "eth0".into(),
                    netns: Some("bp-b".into()),
                },
                recv_buffer: 1 << 20,
                grace_ms: 200,
                frames: 9_000,
                received: 9_000,
                lost: 1_000,
                reordered: 0,
                unmatched: 0,
                received_pps: 19_000.0,
                kernel_dropped: 3,
                kernel_freeze_q: 0,
                latency: Latency::default(),
                histogram: new_histogram(),
            });
            let mut out = Vec::new();
            r.write_text(&mut out).unwrap();
            String::from_utf8(out).unwrap()
        };
        let pnet = rx(IoBackend::Pnet);
        assert!(
            pnet.contains("Kernel drops at the receiver (pnet): 3 (socket buffer full)\n"),
            "{pnet}"
        );
        assert!(!pnet.contains("ring blocks"), "{pnet}");
        let ring = rx(IoBackend::Ring);
        assert!(
            ring.contains(
                "Kernel drops at the receiver (ring): 3 (ring full), ring blocks found held: 0\n"
            ),
            "{ring}"
        );
    }

    #[test]
    fn missing_namespace_and_interface_are_named() {
        let err = enter_netns("bloomplane-no-such-ns").unwrap_err();
        assert!(
            format!("{err:#}").contains("\"bloomplane-no-such-ns\" not found"),
            "{err:#}"
        );
        assert!(enter_netns("../x").is_err());
        let ep = Endpoint {
            interface: "bpnosuchif0".into(),
            netns: None,
        };
        let err = open_endpoint(&ep, None).expect_err("no such interface");
        let msg = format!("{err:#}");
        assert!(
            msg.contains("--tx bpnosuchif0") && msg.contains("not found"),
            "{msg}"
        );
    }

    #[test]
    fn preload_keeps_what_precedes_a_defect() {
        let dir = std::env::temp_dir().join(format!("tg-live-preload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (whole, cut) = (dir.join("whole.pcap"), dir.join("cut.pcap"));
        crate::synth::write_pcap(
            crate::synth::SynthConfig {
                flows: 20,
                packets: 30,
                size: Some(100),
                ..crate::synth::SynthConfig::default()
            },
            &whole,
        )
        .unwrap();
        let bytes = std::fs::read(&whole).unwrap();
        // 24 header bytes, 116 per record: cut inside record 12's header.
        std::fs::write(&cut, &bytes[..24 + 12 * 116 + 5]).unwrap();
        let files = [cut.clone(), whole.clone(), cut.clone()];
        let p = preload(&files, true, Stop::never(), None).unwrap();
        assert_eq!(p.frames.len(), 12 + 30 + 12);
        let errs = p.errors.into_vec();
        // One entry per position on the command line.
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert_eq!(errs[0].file, cut.display().to_string());
        assert_eq!(errs[0].offset, 24 + 12 * 116);
        assert_eq!(errs[0].packets_read, 12);
        // A stop before reading reads nothing.
        let flag = AtomicBool::new(true);
        let p = preload(&files, false, Stop::on(&flag), None).unwrap();
        assert!(p.frames.is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_capture_is_named_before_sending() {
        let dir = std::env::temp_dir().join(format!("tg-live-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("bad.pcap");
        std::fs::write(&bad, b"not a capture at all").unwrap();
        let cfg = LiveConfig {
            tx: Endpoint {
                interface: "bpnosuchif0".into(),
                netns: None,
            },
            ..LiveConfig::default()
        };
        let err = run_live(std::slice::from_ref(&bad), &cfg, None).unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("bad.pcap"), "{msg}");
        assert!(run_live(&[], &cfg, None).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
