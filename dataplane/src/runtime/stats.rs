//! What a worker reports ([`Stats::of`]), the sum over workers
//! ([`Stats::merged`]), and the text both tools print ([`Stats::render`]),
//! per port in the manner of `tc -s qdisc show`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::digest::QueryCounts;
use super::worker::{Latencies, Worker};
use crate::io::port::{Ports, RxCounters};
use crate::packet::DropReason;
use crate::peer::PeeringReport;
use crate::pipeline::PipelineCounters;
use crate::stage::digest::DigestCounters;
use crate::stage::egress::{PortSummary, QueueSummary, fmt_rate};
use crate::stage::forward::ForwardCounters;
use crate::stage::heavy::HeavyCounters;
use crate::stage::icarus::IcarusCounters;
use crate::stage::multicast::{InterfaceStats, MulticastCounters};
use crate::stage::wires::WiresCounters;

/// One port: what came in, what went out, its queue.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct InterfaceReport {
    /// Egress: name, copies sent, dropped by reason, backlog, SFB.
    #[serde(flatten)]
    pub port: PortSummary,
    /// Ingress counters.
    #[serde(flatten)]
    pub rx: RxCounters,
}

/// The chain's counters in a reportable form.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PipelineSummary {
    /// Packets handed in.
    pub received: u64,
    /// Forwarded (marked included).
    pub forwarded: u64,
    /// ECN CE-marked.
    pub marked: u64,
    /// Dropped, all reasons.
    pub dropped: u64,
    /// Taken in by the router as its own input: addressed to it (routed
    /// ports) or IGMP/MLD it learned from (absent when 0).
    #[serde(skip_serializing_if = "is_zero")]
    pub consumed: u64,
    /// Held for a next hop being resolved, now (absent when 0).
    #[serde(skip_serializing_if = "is_zero")]
    pub held: u64,
    /// Drops per reason (non-zero ones).
    pub drops: BTreeMap<String, u64>,
    /// Frames that did not parse, by reason (non-zero ones), whatever
    /// the policy.
    pub malformed: BTreeMap<String, u64>,
    /// Frames that were not IP.
    pub non_ip: u64,
    /// IP datagrams cut by the capture's snapshot length (counted and
    /// keyed, not malformed).
    pub cut_by_capture: u64,
}

impl PipelineSummary {
    /// The summary of `c`.
    pub fn from_counters(c: &PipelineCounters) -> Self {
        PipelineSummary {
            received: c.received,
            forwarded: c.forwarded,
            marked: c.marked,
            dropped: c.dropped.total(),
            consumed: c.consumed,
            held: c.held,
            drops: c
                .dropped
                .nonzero()
                .map(|(r, n)| (r.name().to_string(), n))
                .collect(),
            malformed: c
                .malformed
                .iter()
                .filter(|&(_, n)| n != 0)
                .map(|(r, n)| (r.to_string(), n))
                .collect(),
            non_ip: c.non_ip,
            cut_by_capture: c.cut_by_capture,
        }
    }

    fn merge(&mut self, o: &PipelineSummary) {
        self.received += o.received;
        self.forwarded += o.forwarded;
        self.marked += o.marked;
        self.dropped += o.dropped;
        self.consumed += o.consumed;
        self.held += o.held;
        for (k, v) in &o.drops {
            *self.drops.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &o.malformed {
            *self.malformed.entry(k.clone()).or_default() += v;
        }
        self.non_ip += o.non_ip;
        self.cut_by_capture += o.cut_by_capture;
    }

    /// `received == forwarded + consumed + dropped + held`.
    pub fn is_consistent(&self) -> bool {
        self.received == self.forwarded + self.consumed + self.dropped + self.held
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Percentiles of a latency distribution, held in nanoseconds.
///
/// Written to JSON in microseconds, with the unit in each name (`p50_us`,
/// ..., `mean_us`), as the `.hgrm` files are written: every report a
/// program reads (JSON, `.hgrm`, embedded and live) uses one unit; the
/// terminal shows each value with its own unit (`10.8us`, `40.53ms`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Latency {
    /// Samples.
    pub count: u64,
    /// Median, ns.
    #[serde(rename = "p50_us", serialize_with = "ns_as_us")]
    pub p50: u64,
    /// 90th percentile, ns.
    #[serde(rename = "p90_us", serialize_with = "ns_as_us")]
    pub p90: u64,
    /// 99th percentile, ns.
    #[serde(rename = "p99_us", serialize_with = "ns_as_us")]
    pub p99: u64,
    /// 99.9th percentile, ns.
    #[serde(rename = "p999_us", serialize_with = "ns_as_us")]
    pub p999: u64,
    /// Largest, ns.
    #[serde(rename = "max_us", serialize_with = "ns_as_us")]
    pub max: u64,
    /// Mean, ns.
    #[serde(rename = "mean_us", serialize_with = "ns_f64_as_us")]
    pub mean: f64,
}

/// Nanoseconds written as microseconds (to the nanosecond).
fn ns_as_us<S: serde::Serializer>(ns: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(*ns as f64 / 1e3)
}

/// The same for a mean.
fn ns_f64_as_us<S: serde::Serializer>(ns: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(*ns / 1e3)
}

impl Latency {
    /// The percentiles of `h` (all zero when it is empty).
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Latency::default();
        }
        Latency {
            count: h.len(),
            p50: h.value_at_quantile(0.5),
            p90: h.value_at_quantile(0.9),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
            mean: h.mean(),
        }
    }
}

/// The bounds of the latency histograms exported to Prometheus, ns: 1 us
/// to 10 s in 1-2.5-5 steps (the `+Inf` bucket follows).
pub const LATENCY_BUCKETS_NS: [u64; 22] = [
    1_000,
    2_500,
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// A latency distribution as Prometheus histogram buckets, read off the
/// worker's HdrHistogram: how many values lie at or below each bound of
/// [`LATENCY_BUCKETS_NS`] (cumulative; a value counts by the lowest value
/// its HdrHistogram bucket stands for, within 0.1%), all of them, and
/// their sum. Unlike percentiles, buckets of several workers add up.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LatencyBuckets {
    /// Values at or below each bound, cumulative.
    pub le: Vec<u64>,
    /// Values.
    pub count: u64,
    /// Their sum, ns.
    pub sum_ns: f64,
}

impl LatencyBuckets {
    /// `h`'s buckets.
    pub fn of(h: &Histogram<u64>) -> Self {
        let mut le = vec![0u64; LATENCY_BUCKETS_NS.len()];
        let mut sum_ns = 0.0;
        for v in h.iter_recorded() {
            let n = v.count_at_value();
            let value = h.lowest_equivalent(v.value_iterated_to());
            sum_ns += h.median_equivalent(value) as f64 * n as f64;
            if let Some(x) = le.get_mut(LATENCY_BUCKETS_NS.partition_point(|&b| b < value)) {
                *x += n;
            }
        }
        for i in 1..le.len() {
            le[i] += le[i - 1];
        }
        LatencyBuckets {
            le,
            count: h.len(),
            sum_ns,
        }
    }

    /// Adds another worker's buckets.
    pub fn merge(&mut self, o: &LatencyBuckets) {
        if self.le.len() < o.le.len() {
            self.le.resize(o.le.len(), 0);
        }
        for (a, b) in self.le.iter_mut().zip(&o.le) {
            *a += b;
        }
        self.count += o.count;
        self.sum_ns += o.sum_ns;
    }
}

/// The three distributions of [`Latencies`] as [`LatencyBuckets`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LatencyHistograms {
    /// See [`Latencies::processing`].
    pub processing: LatencyBuckets,
    /// See [`Latencies::sojourn`].
    pub sojourn: LatencyBuckets,
    /// See [`Latencies::through`].
    pub through: LatencyBuckets,
}

impl LatencyHistograms {
    /// The buckets of `l` (through: the sojourn's plus the copies sent at
    /// once, without building that histogram).
    pub fn of(l: &Latencies) -> Self {
        let sojourn = LatencyBuckets::of(&l.sojourn);
        let mut through = sojourn.clone();
        // Cumulative: a zero is at or below every bound.
        for x in &mut through.le {
            *x += l.direct;
        }
        through.count += l.direct;
        LatencyHistograms {
            processing: LatencyBuckets::of(&l.processing),
            sojourn,
            through,
        }
    }

    /// Adds another worker's.
    pub fn merge(&mut self, o: &LatencyHistograms) {
        self.processing.merge(&o.processing);
        self.sojourn.merge(&o.sojourn);
        self.through.merge(&o.through);
    }
}

/// The three distributions of [`Latencies`], as percentiles.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LatencyReport {
    /// Taking a batch to its verdicts, wall clock, per packet.
    pub processing: Latency,
    /// In an egress queue, per queued copy (the backend's clock).
    pub sojourn: Latency,
    /// Arrival to departure, per copy sent (the backend's clock).
    pub through: Latency,
}

impl LatencyReport {
    /// The percentiles of `l`.
    pub fn of(l: &Latencies) -> Self {
        LatencyReport {
            processing: Latency::of(&l.processing),
            sojourn: Latency::of(&l.sojourn),
            through: Latency::of(&l.through()),
        }
    }
}

/// One interface's multicast figures ([`InterfaceStats`] with the name).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MulticastInterface {
    /// The interface.
    pub name: String,
    /// The figures.
    #[serde(flatten)]
    pub stats: InterfaceStats,
}

/// The rates over one interval of the live router's periodic report, from
/// two merged snapshots `secs` apart: what came in and went out (packets
/// and Mbit/s of every port together), what the router did not send per
/// second, by reason ([`Stats::not_sent`]), and the frames the kernel
/// dropped before the router read them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IntervalRates {
    /// Frames read per second.
    pub rx_pps: f64,
    /// Megabits read per second (wire length).
    pub rx_mbps: f64,
    /// Copies sent per second.
    pub tx_pps: f64,
    /// Megabits sent per second.
    pub tx_mbps: f64,
    /// Copies the router did not send per second (every reason).
    pub dropped_per_s: f64,
    /// The same by reason (reasons with none left out), most first.
    pub dropped_by_reason: Vec<(&'static str, f64)>,
    /// Frames the kernel dropped per second.
    pub kernel_dropped_per_s: f64,
}

impl IntervalRates {
    /// The rates between `prev` and `now`, `secs` apart (all zero when no
    /// time passed; counters that went backwards count as zero).
    pub fn between(prev: &Stats, now: &Stats, secs: f64) -> IntervalRates {
        let sum = |s: &Stats, f: &dyn Fn(&InterfaceReport) -> u64| -> u64 {
            s.interfaces.iter().map(f).sum()
        };
        let per_s = |f: &dyn Fn(&Stats) -> u64| -> f64 {
            if secs > 0.0 {
                f(now).saturating_sub(f(prev)) as f64 / secs
            } else {
                0.0
            }
        };
        IntervalRates {
            rx_pps: per_s(&|s| sum(s, &|i| i.rx.rx_packets)),
            rx_mbps: per_s(&|s| sum(s, &|i| i.rx.rx_bytes)) * 8.0 / 1e6,
            tx_pps: per_s(&|s| sum(s, &|i| i.port.counters.sent)),
            tx_mbps: per_s(&|s| sum(s, &|i| i.port.counters.sent_bytes)) * 8.0 / 1e6,
            dropped_per_s: per_s(&|s| s.not_sent().values().sum()),
            dropped_by_reason: {
                let (a, b) = (prev.not_sent(), now.not_sent());
                let mut v: Vec<(&'static str, f64)> = b
                    .iter()
                    .map(|(&r, &n)| {
                        let d = n.saturating_sub(a.get(r).copied().unwrap_or(0));
                        (r, if secs > 0.0 { d as f64 / secs } else { 0.0 })
                    })
                    .filter(|&(_, x)| x > 0.0)
                    .collect();
                v.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(y.0)));
                v
            },
            kernel_dropped_per_s: per_s(&|s| sum(s, &|i| i.rx.rx_dropped)),
        }
    }

    /// The line heading a periodic report: when (RFC 3339, UTC), over how
    /// long, and the rates; the cumulative counters follow it.
    pub fn heading(&self, at: std::time::SystemTime, secs: f64) -> String {
        // The three largest reasons, as `(sfb_rate 650/s, no_route 10/s)`.
        let reasons: Vec<String> = self
            .dropped_by_reason
            .iter()
            .take(3)
            .map(|(r, x)| format!("{r} {x:.0}/s"))
            .collect();
        let reasons = if reasons.is_empty() {
            String::new()
        } else {
            format!(" ({})", reasons.join(", "))
        };
        format!(
            "== {} (last {secs:.2} s): in {:.0} pps {:.2} Mbit/s, out {:.0} pps {:.2} Mbit/s, dropped {:.0}/s{reasons}, kernel dropped {:.0}/s; cumulative counters:\n",
            humantime::format_rfc3339_seconds(at),
            self.rx_pps,
            self.rx_mbps,
            self.tx_pps,
            self.tx_mbps,
            self.dropped_per_s,
            self.kernel_dropped_per_s
        )
    }
}

/// Every counter of one worker, or of all of them merged.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Stats {
    /// Worker index (`None` when merged).
    pub worker: Option<usize>,
    /// The core the worker is pinned to (`None`: not pinned, or merged).
    pub core: Option<usize>,
    /// Per interface, in port order.
    pub interfaces: Vec<InterfaceReport>,
    /// The chain.
    pub pipeline: PipelineSummary,
    /// Batches processed.
    pub batches: u64,
    /// Forwarded packets whose port set was empty (nothing sent).
    pub no_egress: u64,
    /// The forwarding stage, when a port is routed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forward: Option<ForwardCounters>,
    /// The wires stage.
    pub wires: WiresCounters,
    /// The multicast stage, when on.
    pub multicast: Option<MulticastCounters>,
    /// The multicast stage's figures per interface (members, cap,
    /// refusals, filter fill and false-positive estimate), when on.
    pub multicast_interfaces: Vec<MulticastInterface>,
    /// The Icarus stage, when on.
    pub icarus: Option<IcarusCounters>,
    /// The heavy-flow stage, when on.
    pub heavy: Option<HeavyCounters>,
    /// The digest stage, when on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<DigestCounters>,
    /// Queries about the digests (`GET /digest`), when answered (the
    /// telemetry listener's, not a worker's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest_queries: Option<QueryCounts>,
    /// The protocol between routers, when on (the control thread's
    /// figures, in merged stats).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peering: Option<PeeringReport>,
    /// Latency percentiles (merged: exact when the owner merged the
    /// histograms, [`Stats::set_latency`]; otherwise each percentile is the
    /// largest worker's, an upper bound).
    pub latency: LatencyReport,
    /// The same distributions as histogram buckets (Prometheus), which add
    /// up exactly over workers.
    #[serde(skip)]
    pub latency_buckets: LatencyHistograms,
}

impl Stats {
    /// Worker `w`'s counters now (pinned to `core`).
    pub fn of<P: Ports>(w: &Worker<P>, core: Option<usize>) -> Stats {
        let chain = w.chain();
        let now = w.now();
        let rx = w.io().rx_counters();
        let interfaces = chain
            .egress()
            .summaries(now)
            .into_iter()
            .enumerate()
            .map(|(i, port)| InterfaceReport {
                port,
                rx: rx.get(i).copied().unwrap_or_default(),
            })
            .collect();
        let multicast_interfaces = match chain.multicast() {
            None => Vec::new(),
            Some(m) => m
                .interface_stats()
                .into_iter()
                .map(|st| MulticastInterface {
                    name: chain
                        .egress()
                        .port_name(st.port)
                        .unwrap_or_default()
                        .to_string(),
                    stats: st,
                })
                .collect(),
        };
        Stats {
            worker: Some(w.id()),
            core,
            interfaces,
            pipeline: PipelineSummary::from_counters(chain.counters()),
            batches: w.batches(),
            no_egress: chain.egress().no_egress(),
            forward: chain.forward().map(|f| *f.counters()),
            wires: *chain.wires().counters(),
            multicast: chain.multicast().map(|m| m.counters()),
            multicast_interfaces,
            icarus: chain.icarus().map(|i| *i.counters()),
            heavy: chain.heavy().map(|h| *h.counters()),
            digest: chain.digest().map(|d| *d.counters()),
            digest_queries: None,
            peering: None,
            latency: LatencyReport::of(w.latency()),
            latency_buckets: LatencyHistograms::of(w.latency()),
        }
    }

    /// Sets the latency percentiles from merged histograms.
    pub fn set_latency(&mut self, l: &Latencies) {
        self.latency = LatencyReport::of(l);
        self.latency_buckets = LatencyHistograms::of(l);
    }

    /// Replaces the port queues' backlog and SFB figures with `queues`
    /// (from [`crate::stage::egress::QueueView::summaries`], read once every
    /// worker sharing them has stopped: a worker's own stats hold them as
    /// they were when it stopped, while others may still have been
    /// offering).
    pub fn set_queues(&mut self, queues: Vec<Option<QueueSummary>>) {
        for (i, q) in self.interfaces.iter_mut().zip(queues) {
            if let Some(q) = q {
                q.apply(&mut i.port);
            }
        }
    }

    /// Merges per-worker stats (`worker` and `core` are dropped).
    pub fn merged(all: &[Stats]) -> Stats {
        let mut m = Stats::default();
        for s in all {
            if m.interfaces.is_empty() {
                m.interfaces = s.interfaces.clone();
                m.multicast_interfaces = s.multicast_interfaces.clone();
            } else {
                for (a, b) in m.interfaces.iter_mut().zip(&s.interfaces) {
                    a.port.merge(&b.port);
                    a.rx.merge(&b.rx);
                }
                for (a, b) in m
                    .multicast_interfaces
                    .iter_mut()
                    .zip(&s.multicast_interfaces)
                {
                    a.stats.merge(&b.stats);
                }
            }
            m.pipeline.merge(&s.pipeline);
            m.batches += s.batches;
            m.no_egress += s.no_egress;
            if let Some(f) = &s.forward {
                m.forward.get_or_insert_with(Default::default).merge(f);
            }
            m.wires.routed += s.wires.routed;
            m.wires.no_route += s.wires.no_route;
            m.wires.multicast += s.wires.multicast;
            if let Some(i) = &s.icarus {
                m.icarus.get_or_insert_with(Default::default).merge(i);
            }
            if let Some(h) = &s.heavy {
                m.heavy.get_or_insert_with(Default::default).merge(h);
            }
            if let Some(d) = &s.digest {
                m.digest.get_or_insert_with(Default::default).merge(d);
            }
            if let Some(c) = &s.multicast {
                m.multicast.get_or_insert_with(Default::default).merge(c);
            }
            m.latency_buckets.merge(&s.latency_buckets);
            for (a, b) in [
                (&mut m.latency.processing, &s.latency.processing),
                (&mut m.latency.sojourn, &s.latency.sojourn),
                (&mut m.latency.through, &s.latency.through),
            ] {
                let n = a.count + b.count;
                if n > 0 {
                    a.mean = (a.mean * a.count as f64 + b.mean * b.count as f64) / n as f64;
                }
                a.count = n;
                a.p50 = a.p50.max(b.p50);
                a.p90 = a.p90.max(b.p90);
                a.p99 = a.p99.max(b.p99);
                a.p999 = a.p999.max(b.p999);
                a.max = a.max.max(b.max);
            }
        }
        m
    }

    /// Whether every packet and every copy is accounted for: the chain's
    /// What the router did not send, by reason: packets dropped before any
    /// copy was made, by the chain's reason (`no_route`, `loop`, a
    /// malformed reason, ...), and every copy a port dropped (SFB's and the
    /// queue's reasons, counted per copy: a packet SFB dropped on its only
    /// port counts once), failed to send (`send_error`) or discarded at a
    /// live shutdown (`egress_shutdown`).
    pub fn not_sent(&self) -> BTreeMap<&'static str, u64> {
        let mut out: BTreeMap<&'static str, u64> = BTreeMap::new();
        for r in DropReason::all().filter(|r| !r.at_egress()) {
            if let Some(&n) = self.pipeline.drops.get(r.name())
                && n > 0
            {
                *out.entry(r.name()).or_default() += n;
            }
        }
        for i in &self.interfaces {
            let c = &i.port.counters;
            for (r, n) in c.dropped.nonzero() {
                *out.entry(r.name()).or_default() += n;
            }
            if c.send_errors > 0 {
                *out.entry("send_error").or_default() += c.send_errors;
            }
            if c.shutdown_dropped > 0 {
                *out.entry(DropReason::EgressShutdown.name()).or_default() += c.shutdown_dropped;
            }
        }
        out
    }

    /// `received == forwarded + consumed + dropped`, and per port `copies == sent +
    /// send_errors + dropped + backlog + shutdown_dropped`.
    pub fn is_consistent(&self) -> bool {
        self.pipeline.is_consistent() && self.interfaces.iter().all(|i| i.port.is_consistent())
    }

    /// Human-readable lines: the chain, per port (`tc -s qdisc` style for
    /// queued ports), per stage, latency.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let who = match (self.worker, self.core) {
            (Some(w), Some(c)) => format!("worker {w} (core {c})"),
            (Some(w), None) => format!("worker {w}"),
            _ => "all workers".to_string(),
        };
        let _ = writeln!(s, "== {who}");
        let pl = &self.pipeline;
        let _ = writeln!(
            s,
            "  pipeline received {} forwarded {} marked {} dropped {} non_ip {}{}",
            pl.received,
            pl.forwarded,
            pl.marked,
            pl.dropped,
            pl.non_ip,
            if pl.cut_by_capture > 0 {
                format!(" cut_by_capture {}", pl.cut_by_capture)
            } else {
                String::new()
            }
        );
        if pl.consumed > 0 || pl.held > 0 {
            let _ = writeln!(s, "    consumed {} held {}", pl.consumed, pl.held);
        }
        for (r, n) in &pl.drops {
            let _ = writeln!(s, "    dropped {r} {n}");
        }
        for (r, n) in &pl.malformed {
            let _ = writeln!(s, "    malformed {r} {n}");
        }
        // Copies, where the lines above count packets (a packet SFB
        // dropped on one of two ports was forwarded, and one copy is lost).
        let not_sent = self.not_sent();
        let total: u64 = not_sent.values().sum();
        if total > 0 {
            let by: Vec<String> = not_sent.iter().map(|(r, n)| format!("{r} {n}")).collect();
            let _ = writeln!(s, "    not sent {total} copies: {}", by.join(" "));
        }
        for i in &self.interfaces {
            render_port(&mut s, i);
        }
        if let Some(f) = &self.forward {
            let _ = writeln!(
                s,
                "  stage forward forwarded {} local {} multicast {} no_route {} ttl_expired {} too_big {} no_neighbour {} other_host {} not_routable {} icmp_errors {} icmp_rate_limited {} echo_replies {} originated_full {} arp_replies {} arp_requests {} nd_adverts {} nd_solicits {} learned {} held {} released {} resolve_failed {} rpf_failed {} peer_in {} peer_dropped {} peer_sent {} peer_unresolved {}",
                f.forwarded,
                f.local,
                f.multicast,
                f.no_route,
                f.ttl_expired,
                f.too_big,
                f.no_neighbour,
                f.other_host,
                f.not_routable,
                f.icmp_errors,
                f.icmp_rate_limited,
                f.echo_replies,
                f.originated_full,
                f.arp_replies,
                f.arp_requests,
                f.nd_adverts,
                f.nd_solicits,
                f.learned,
                f.held,
                f.released,
                f.resolve_failed,
                f.rpf_failed,
                f.peer_messages,
                f.peer_dropped,
                f.peer_sent,
                f.peer_unresolved
            );
        }
        let _ = writeln!(
            s,
            "  stage wires routed {} no_route {} multicast {}",
            self.wires.routed, self.wires.no_route, self.wires.multicast
        );
        if let Some(m) = &self.multicast {
            let _ = writeln!(
                s,
                "  stage multicast data {} forwarded {} copies {} suppressed {} control {} joins {} refused {} leaves {} records {} over_budget {} events sent {} applied {} superseded {}",
                m.data_packets,
                m.forwarded,
                m.copies,
                m.suppressed,
                m.control,
                m.joins,
                m.joins_refused,
                m.leaves,
                m.records,
                m.records_over_budget,
                m.events_sent,
                m.events_applied,
                m.events_superseded
            );
        }
        for i in &self.multicast_interfaces {
            let st = &i.stats;
            let _ = writeln!(
                s,
                "    multicast {} members {} learned {}/{} refused {} fill {:.4} fpr {:.6}",
                i.name, st.members, st.learned, st.max_learned, st.refused, st.fill, st.fpr
            );
        }
        if let Some(i) = &self.icarus {
            let _ = writeln!(
                s,
                "  stage icarus loops {} marked_hops {} inserted {} stripped {} no_room {} without_option {}",
                i.loops_detected,
                i.marked_hops,
                i.inserted,
                self.interfaces
                    .iter()
                    .map(|x| x.port.counters.stripped)
                    .sum::<u64>(),
                i.no_room,
                i.passed_without_option
            );
        }
        if let Some(h) = &self.heavy {
            let _ = writeln!(
                s,
                "  stage heavy packets {} bytes {} detections {} reported {} overflow {}{}",
                h.packets,
                h.bytes,
                h.detections,
                h.reported,
                h.overflow,
                if h.omitted > 0 {
                    format!(" omitted {}", h.omitted)
                } else {
                    String::new()
                }
            );
        }
        if let Some(d) = &self.digest {
            let _ = writeln!(
                s,
                "  stage digest recorded {} skipped {} windows {} early {} memory {:.1} MiB window_capacity {} design_fpr {:.2e}",
                d.recorded,
                d.skipped,
                d.windows,
                d.early,
                d.memory_bytes as f64 / f64::from(1u32 << 20),
                d.window_capacity,
                d.design_fpr
            );
        }
        if let Some(q) = &self.digest_queries {
            let _ = writeln!(
                s,
                "    digest queries answered {} refused {} rate_limited {} malformed {}",
                q.answered, q.refused, q.rate_limited, q.malformed
            );
        }
        if let Some(p) = &self.peering {
            render_peering(&mut s, p);
        }
        for (what, l) in [
            ("processing", &self.latency.processing),
            ("sojourn", &self.latency.sojourn),
            ("through", &self.latency.through),
        ] {
            if l.count > 0 {
                let _ = writeln!(
                    s,
                    "  latency {what:<10} p50 {} p90 {} p99 {} p99.9 {} max {} ({} samples)",
                    fmt_ns(l.p50),
                    fmt_ns(l.p90),
                    fmt_ns(l.p99),
                    fmt_ns(l.p999),
                    fmt_ns(l.max),
                    l.count
                );
            }
        }
        s
    }
}

/// The protocol's lines: the router's, then one per peer.
fn render_peering(s: &mut String, p: &PeeringReport) {
    let flows = match p.flows {
        Some(n) => format!(
            "flows {n} (learned {} detected {} expired {} refused {})",
            p.flows_learned, p.flows_detected, p.flows_expired, p.flows_refused
        ),
        None => "flows off".into(),
    };
    let _ = writeln!(
        s,
        "  peering router {} groups {} {flows} unknown {} filter {} bits k {}",
        p.router_id, p.local_groups, p.rejected_unknown, p.filter_bits, p.filter_k
    );
    if !p.flows_held.is_empty() {
        let _ = writeln!(s, "    flows held: {}", p.flows_held.join(", "));
    }
    for q in &p.peers {
        let c = &q.counters;
        let heard = q
            .last_heard_ms
            .map_or_else(|| "never".to_string(), |ms| format!("{ms} ms ago"));
        let filter = q.filter.map_or_else(
            || "none".to_string(),
            |f| {
                format!(
                    "v{} {}/{} bits ~{:.0} groups fpr {:.6}",
                    f.version, f.ones, f.bits, f.groups, f.fpr
                )
            },
        );
        let rejected: Vec<String> = crate::peer::Reject::ALL
            .iter()
            .filter(|&&r| c.rejected.get(r) > 0)
            .map(|&r| format!("{} {}", r.name(), c.rejected.get(r)))
            .collect();
        let _ = writeln!(
            s,
            "    peer {} {} {} heard {heard} rx {} msgs {} B tx {} msgs {} B ({} lost) rejected {}{} filter {filter} filters in {} out {} deltas in {} out {} stale {} sent {} B (raw {} B, list {} B) summaries in {} out {} flows in {} out {} expired {}",
            q.interface,
            q.address,
            if q.up { "up" } else { "down" },
            c.rx_messages,
            c.rx_bytes,
            c.tx_messages,
            c.tx_bytes,
            c.tx_lost,
            c.rejected.total(),
            if rejected.is_empty() {
                String::new()
            } else {
                format!(" ({})", rejected.join(" "))
            },
            c.filters_in,
            c.filters_out,
            c.deltas_in,
            c.deltas_out,
            c.deltas_stale,
            c.filter_bytes,
            c.filter_bytes_raw,
            c.filter_bytes_list,
            c.summaries_in,
            c.summaries_out,
            c.flows_in,
            c.flows_out,
            c.expired
        );
    }
}

/// A port's lines.
fn render_port(s: &mut String, i: &InterfaceReport) {
    let p = &i.port;
    let c = &p.counters;
    // Ring-only counters appear once they are not zero.
    let mut ring = String::new();
    if i.rx.rx_frozen > 0 {
        let _ = write!(ring, ", {} ring blocks held", i.rx.rx_frozen);
    }
    // An AF_XDP port says what its program left to the kernel, and how its
    // frames arrive (at the end, after the figures).
    let mode = match i.rx.mode {
        Some(m) => {
            let _ = write!(ring, ", {} left to the kernel", i.rx.rx_passed);
            format!("  {m}")
        }
        None => String::new(),
    };
    let tx_dropped = if i.rx.tx_dropped > 0 {
        format!(", {} refused by the kernel", i.rx.tx_dropped)
    } else {
        String::new()
    };
    // Why the kernel refused copies, after the count they explain (`err`
    // with pnet, `refused by the kernel` with rings and AF_XDP): `: 51886 msgsize
    // 1534>1500`. (The line keeps the token positions flowmix reads: what
    // it adds comes inside the parentheses, after the counts.)
    let reasons = if i.rx.tx_errors.total() > 0 {
        format!(": {}", i.rx.tx_errors)
    } else {
        String::new()
    };
    let _ = writeln!(
        s,
        "  port {} rx {} pkts {} B ({} err, {} kernel dropped{ring}, {} outgoing ignored)  sent {} pkts {} B ({} err{tx_dropped}{reasons}) hairpin {}{mode}",
        p.name,
        i.rx.rx_packets,
        i.rx.rx_bytes,
        i.rx.rx_errors,
        i.rx.rx_dropped,
        i.rx.rx_outgoing_dropped,
        c.sent,
        c.sent_bytes,
        c.send_errors,
        c.hairpin
    );
    let Some(sfb) = &p.sfb else {
        return;
    };
    let rate = match p.rate_bps {
        Some(0) | None => "unshaped".to_string(),
        Some(r) => format!("rate {}", fmt_rate(r)),
    };
    let drops: u64 = c.dropped.total();
    // As sch_sfb counts them, `overlimits` are the arrivals over the
    // queue's limit (each also a `queuedrop`).
    let _ = writeln!(
        s,
        "    qdisc sfb {rate}: Sent {} bytes {} pkt (dropped {}, overlimits {}, shutdown {}) backlog {}b {}p",
        c.sent_bytes,
        c.sent,
        drops,
        sfb.counters.queuedrop,
        c.shutdown_dropped,
        p.backlog_bytes,
        p.backlog_packets
    );
    // How much of its rate the shaped port sent: a line of its own, which
    // flowmix's parser (keyed on each line's first word) passes over.
    if let Some(l) = &p.link {
        let _ = writeln!(
            s,
            "      link use {:.3} (sent {} of {}) over the last {:.2} s, {:.3} over the run ({:.1} s)",
            l.last(),
            fmt_rate(l.last_sent_bps() as u64 / 1000 * 1000),
            fmt_rate(l.rate_bps),
            l.last_ns as f64 / 1e9,
            l.run(),
            l.run_ns as f64 / 1e9
        );
    }
    let prob = |v: u16| f64::from(v) / 65535.0;
    let sc = &sfb.counters;
    let _ = writeln!(
        s,
        "      earlydrop {} penaltydrop {} bucketdrop {} queuedrop {} childdrop {} marked {} ratedrop {} ratemark {}",
        sc.earlydrop,
        sc.penaltydrop,
        sc.bucketdrop,
        sc.queuedrop,
        sc.childdrop,
        sc.marked,
        sc.ratedrop,
        sc.ratemark
    );
    if let Some(fair) = &sfb.fair {
        let _ = writeln!(s, "      {fair}");
    }
    // tc's convention: the bins' figures are now; the peaks and the
    // sojourn times are over the run. (The second line keeps the shape
    // flowmix's parser reads: what it adds comes last.)
    let _ = writeln!(
        s,
        "      peak maxqlen {} maxprob {:.5} avgprob {:.5} over the run",
        sfb.peak.maxqlen,
        prob(sfb.peak.maxprob),
        prob(sfb.peak.avgprob),
    );
    let _ = writeln!(
        s,
        "      maxqlen {} maxprob {:.5} avgprob {:.5} sojourn mean {:.3} ms max {:.3} ms (bins now, sojourn over the run)",
        sfb.maxqlen,
        prob(sfb.maxprob),
        prob(sfb.avgprob),
        c.mean_sojourn_ms(),
        c.sojourn_max_ns as f64 / 1e6
    );
    for f in &sfb.penalised {
        let _ = writeln!(
            s,
            "      penalised {} admitted {} dropped {}",
            f.flow, f.admitted, f.dropped
        );
    }
}

/// `1.5ms`, `12us`, `250ns`, `2.00s`.
pub fn fmt_ns(ns: u64) -> String {
    match ns {
        0..1_000 => format!("{ns}ns"),
        1_000..1_000_000 => format!("{:.1}us", ns as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.2}ms", ns as f64 / 1e6),
        _ => format!("{:.2}s", ns as f64 / 1e9),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two ports; `dropped` packets without a route, and `sfb` copies SFB
    /// dropped on port 1 of which half were their packet's only copy (the
    /// others' packets left by port 0).
    fn snapshot(rx: u64, tx: u64, dropped: u64, sfb: u64, kernel: u64) -> Stats {
        let mut s = Stats::default();
        for _ in 0..2 {
            let mut i = InterfaceReport::default();
            i.rx.rx_packets = rx;
            i.rx.rx_bytes = rx * 125;
            i.rx.rx_dropped = kernel;
            i.port.counters.sent = tx;
            i.port.counters.sent_bytes = tx * 250;
            s.interfaces.push(i);
        }
        s.interfaces[1]
            .port
            .counters
            .dropped
            .record_n(DropReason::SfbEarly, sfb);
        s.pipeline.drops.insert("no_route".into(), dropped);
        s.pipeline.drops.insert("sfb_early".into(), sfb / 2);
        s.pipeline.dropped = dropped + sfb / 2;
        s
    }

    /// A port's send errors with their reasons, inside the parentheses
    /// after the counts, so the tokens flowmix reads keep their places
    /// (`sent` +1, +3, +5: packets, bytes, errors).
    #[test]
    fn the_port_line_gives_transmit_errors_their_reasons() {
        let mut i = InterfaceReport::default();
        i.port.name = "r-b".into();
        i.port.counters.sent = 7;
        i.port.counters.sent_bytes = 700;
        i.port.counters.send_errors = 51_889;
        i.rx.tx_errors.mtu = 1500;
        i.rx.tx_errors.record(libc::EMSGSIZE, 1534, 51_886);
        i.rx.tx_errors.record(libc::ENOBUFS, 60, 2);
        i.rx.tx_errors.record(libc::ENETDOWN, 60, 1);
        let mut s = String::new();
        render_port(&mut s, &i);
        let line = s.lines().next().unwrap();
        assert_eq!(
            line,
            "  port r-b rx 0 pkts 0 B (0 err, 0 kernel dropped, 0 outgoing ignored)  sent 7 pkts 700 B \
             (51889 err: 51886 msgsize 1534>1500, 2 nobufs, 1 other (errno 100: Network is down)) hairpin 0"
        );
        let t: Vec<&str> = line.split_whitespace().collect();
        let sent = t.iter().position(|x| *x == "sent").unwrap();
        assert_eq!(
            (t[sent + 1], t[sent + 3], t[sent + 5]),
            ("7", "700", "(51889")
        );
        // The ring backend's refusals.
        i.port.counters.send_errors = 0;
        i.rx.tx_dropped = 51_889;
        let mut s = String::new();
        render_port(&mut s, &i);
        assert!(
            s.contains("(0 err, 51889 refused by the kernel: 51886 msgsize 1534>1500, 2 nobufs, "),
            "{s}"
        );
        let j = serde_json::to_value(i.rx).unwrap();
        assert_eq!(j["tx_errors"]["msgsize"], 51_886);
        assert_eq!(j["tx_errors"]["msgsize_largest"], 1534);
        assert_eq!(j["tx_errors"]["mtu"], 1500);
    }

    #[test]
    fn latency_json_is_in_microseconds() {
        let l = Latency {
            count: 3,
            p50: 10_800,
            p90: 14_200,
            p99: 32_400,
            p999: 88_700,
            max: 4_100_000,
            mean: 12_345.0,
        };
        let v = serde_json::to_value(l).unwrap();
        assert_eq!(v["count"], 3);
        assert_eq!(v["p50_us"], 10.8);
        assert_eq!(v["max_us"], 4100.0);
        assert_eq!(v["mean_us"], 12.345);
        assert!(v.get("p50").is_none());
    }

    #[test]
    fn the_interval_line_counts_every_copy_not_sent_by_reason() {
        let a = snapshot(1000, 500, 10, 0, 0);
        let b = snapshot(3000, 1500, 30, 40, 4);
        let r = IntervalRates::between(&a, &b, 2.0);
        // Two ports: 2 x 2000 frames in 2 s; 125 bytes = 1000 bits each.
        assert_eq!(r.rx_pps, 2000.0);
        assert_eq!(r.rx_mbps, 2.0);
        assert_eq!(r.tx_pps, 1000.0);
        assert_eq!(r.tx_mbps, 2.0);
        // Every copy not sent: 20 without a route, 40 SFB dropped (of
        // which 20 were a packet's only copy, in the chain's count too).
        assert_eq!((r.dropped_per_s, r.kernel_dropped_per_s), (30.0, 4.0));
        assert_eq!(
            r.dropped_by_reason,
            vec![("sfb_early", 20.0), ("no_route", 10.0)]
        );
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_764_000_000);
        assert_eq!(
            r.heading(at, 2.0),
            "== 2025-11-24T16:00:00Z (last 2.00 s): in 2000 pps 2.00 Mbit/s, out 1000 pps 2.00 Mbit/s, dropped 30/s (sfb_early 20/s, no_route 10/s), kernel dropped 4/s; cumulative counters:\n"
        );
        // Counters that went backwards (a restart) and no time: zero.
        let z = IntervalRates::between(&b, &a, 2.0);
        assert_eq!((z.rx_pps, z.dropped_per_s), (0.0, 0.0));
        assert_eq!(IntervalRates::between(&a, &b, 0.0).rx_pps, 0.0);
    }
}
