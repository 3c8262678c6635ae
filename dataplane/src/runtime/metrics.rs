//! Prometheus metrics: the router's counters as an OpenMetrics text
//! exposition ([`encode`]), and the small HTTP server that answers
//! `GET /metrics` with it ([`MetricsServer`]), turned on by
//! `[telemetry] listen` in router.toml.
//!
//! **Where the values come from.** Workers publish a snapshot of their
//! counters at every tick ([`super::Snapshots`]); a scrape locks each
//! snapshot just long enough to clone it, sums them ([`Stats::merged`]) and
//! encodes the sum. Nothing is registered up front: the [`Collector`] is
//! built around the scrape's stats, so every scrape reads fresh values, and
//! a worker never waits for a scrape longer than one clone of its stats at
//! its next tick. The server runs on its own (unpinned) thread.
//!
//! **Names.** Everything is prefixed `bloomplane_`; counters end in
//! `_total`, byte counts in `_bytes`, times are in seconds, probabilities
//! are ratios in 0..=1. Labels: `interface` (the interface's name from the
//! config), `reason` (a drop or malformed reason, as in the text report).
//! Every drop and malformed reason is exported, zero or not, so a rate over
//! a reason never starts from a missing series. Per-queue metrics (SFB,
//! backlog) exist for interfaces with an `sfb` table; the heavy-flow,
//! Icarus and multicast metrics for the stages that are on.
//!
//! **Latency** is exported as three histograms (`le` buckets from 1 us to
//! 10 s in 1-2.5-5 steps, `+Inf`, `_count`, `_sum`), read at each tick off
//! each worker's HdrHistogram ([`super::stats::LatencyBuckets`]: one pass
//! over its recorded values, no histogram copied) and summed over workers
//! at scrape time, exactly (buckets add up; percentiles would not).
//! prometheus-client 0.24 encodes histograms it observes itself, not
//! counts a collector already has, so [`encode`] writes the three
//! histogram families after the collector's.
//!
//! **Two formats.** A scraper that asks for OpenMetrics (`Accept:
//! application/openmetrics-text`, as Prometheus does) gets it; any other
//! client (curl, `promtool check metrics`, which reads the Prometheus text
//! format 0.0.4) gets the same samples in text format 0.0.4
//! ([`to_prometheus_text`]): counter families named with their `_total`,
//! no `# UNIT` and no `# EOF` line. Other paths are 404, other methods 405.

use std::fmt::Write as _;
use std::net::SocketAddr;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeGaugeValue, EncodeLabelSet, NoLabelSet,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use super::digest::DigestRoute;
use super::http::{Handler, HttpListener, Limits, Request, Response, ServerThread};
use super::stats::{LATENCY_BUCKETS_NS, LatencyBuckets, Stats};
use crate::packet::DropReason;
use crate::stage::sfb::SFB_MAX_PROB;
use crate::wire::Malformed;

/// The prefix of every metric name.
pub const PREFIX: &str = "bloomplane";

/// The `Content-Type` of the OpenMetrics exposition.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The `Content-Type` of the Prometheus text format.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Reads one figure of a report.
type Field<T> = fn(&T) -> u64;

/// The OpenMetrics text exposition of `stats` (ends with `# EOF`).
pub fn encode(stats: &Stats) -> String {
    let mut registry = Registry::with_prefix(PREFIX);
    registry.register_collector(Box::new(StatsCollector(stats.clone())));
    let mut out = String::new();
    // Writing to a String cannot fail, and the collector only fails when
    // its writer does.
    let _ = encode_registry(&mut out, &registry);
    let b = &stats.latency_buckets;
    for (name, help, l) in [
        (
            "processing_latency",
            "Time to take a packet's batch to its verdicts (wall clock, per packet).",
            &b.processing,
        ),
        (
            "sojourn_latency",
            "Time a queued copy spent in its egress queue.",
            &b.sojourn,
        ),
        (
            "through_latency",
            "Time from a packet's arrival to its copy's departure.",
            &b.through,
        ),
    ] {
        encode_histogram(&mut out, name, help, l);
    }
    let _ = encode_eof(&mut out);
    out
}

/// A histogram family `PREFIX_{name}_seconds` of `l` (bounds of
/// [`LATENCY_BUCKETS_NS`], cumulative, then `+Inf`).
fn encode_histogram(out: &mut String, name: &str, help: &str, l: &LatencyBuckets) {
    let full = format!("{PREFIX}_{name}_seconds");
    let _ = writeln!(out, "# HELP {full} {help}");
    let _ = writeln!(out, "# TYPE {full} histogram");
    let _ = writeln!(out, "# UNIT {full} seconds");
    for (i, bound) in LATENCY_BUCKETS_NS.iter().enumerate() {
        let n = l.le.get(i).copied().unwrap_or(0);
        let _ = writeln!(out, "{full}_bucket{{le=\"{:e}\"}} {n}", *bound as f64 / 1e9);
    }
    let _ = writeln!(out, "{full}_bucket{{le=\"+Inf\"}} {}", l.count);
    let _ = writeln!(out, "{full}_sum {:e}", l.sum_ns / 1e9);
    let _ = writeln!(out, "{full}_count {}", l.count);
}

/// The same samples in the Prometheus text format 0.0.4: a counter
/// family's `# HELP` and `# TYPE` name it with its `_total` (the name its
/// samples carry); `# UNIT` and `# EOF` lines are left out.
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let counters: std::collections::BTreeSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len() + 64 * counters.len());
    for line in openmetrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| Some((p, line.strip_prefix(p)?)));
        match meta {
            Some((p, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let total = if counters.contains(name) {
                    "_total"
                } else {
                    ""
                };
                let _ = writeln!(out, "{p}{name}{total} {tail}");
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// One scrape's stats, as a prometheus-client collector.
#[derive(Debug)]
struct StatsCollector(Stats);

/// Writes families through a [`DescriptorEncoder`], leaving out a family
/// with no sample.
struct Families<'a>(DescriptorEncoder<'a>);

impl Families<'_> {
    /// A counter family: one sample per `(labels, value)`.
    fn counters<L: EncodeLabelSet>(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<&Unit>,
        series: impl IntoIterator<Item = (L, u64)>,
    ) -> std::fmt::Result {
        let mut series = series.into_iter().peekable();
        if series.peek().is_none() {
            return Ok(());
        }
        let mut m = self
            .0
            .encode_descriptor(name, help, unit, MetricType::Counter)?;
        for (labels, v) in series {
            m.encode_family(&labels)?
                .encode_counter::<NoLabelSet, u64, u64>(&v, None)?;
        }
        Ok(())
    }

    /// A counter without labels.
    fn counter(&mut self, name: &str, help: &str, unit: Option<&Unit>, v: u64) -> std::fmt::Result {
        let mut m = self
            .0
            .encode_descriptor(name, help, unit, MetricType::Counter)?;
        m.encode_counter::<NoLabelSet, u64, u64>(&v, None)
    }

    /// A gauge without labels.
    fn gauge(&mut self, name: &str, help: &str, v: i64) -> std::fmt::Result {
        self.0
            .encode_descriptor(name, help, None, MetricType::Gauge)?
            .encode_gauge(&v)
    }

    /// A gauge family: one sample per `(labels, value)`.
    fn gauges<L: EncodeLabelSet, V: EncodeGaugeValue>(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<&Unit>,
        series: impl IntoIterator<Item = (L, V)>,
    ) -> std::fmt::Result {
        let mut series = series.into_iter().peekable();
        if series.peek().is_none() {
            return Ok(());
        }
        let mut m = self
            .0
            .encode_descriptor(name, help, unit, MetricType::Gauge)?;
        for (labels, v) in series {
            m.encode_family(&labels)?.encode_gauge(&v)?;
        }
        Ok(())
    }
}

/// A probability held in Q0.16 as a ratio (as the text report and `tc`
/// print it: [`SFB_MAX_PROB`] is 1).
fn probability(q: u16) -> f64 {
    f64::from(q) / f64::from(SFB_MAX_PROB)
}

impl Collector for StatsCollector {
    fn encode(&self, encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let s = &self.0;
        let mut f = Families(encoder);
        let pl = &s.pipeline;

        // The chain.
        f.counter(
            "pipeline_received",
            "Packets handed to the chain.",
            None,
            pl.received,
        )?;
        f.counter(
            "pipeline_forwarded",
            "Packets forwarded (marked included).",
            None,
            pl.forwarded,
        )?;
        f.counter("pipeline_marked", "Packets ECN CE-marked.", None, pl.marked)?;
        let mut drops: Vec<(&str, u64)> = DropReason::all()
            .map(|r| (r.name(), pl.drops.get(r.name()).copied().unwrap_or(0)))
            .collect();
        for (r, &n) in &pl.drops {
            if !drops.iter().any(|(k, _)| k == r) {
                drops.push((r, n));
            }
        }
        f.counters(
            "pipeline_dropped",
            "Packets dropped, by reason.",
            None,
            drops.into_iter().map(|(r, n)| ([("reason", r)], n)),
        )?;
        let mut malformed: Vec<(&str, u64)> = Malformed::ALL
            .iter()
            .map(|m| (m.name(), pl.malformed.get(m.name()).copied().unwrap_or(0)))
            .collect();
        for (r, &n) in &pl.malformed {
            if !malformed.iter().any(|(k, _)| k == r) {
                malformed.push((r, n));
            }
        }
        f.counters(
            "pipeline_malformed",
            "Frames that did not parse, by reason, whatever the policy.",
            None,
            malformed.into_iter().map(|(r, n)| ([("reason", r)], n)),
        )?;
        f.counter(
            "pipeline_non_ip",
            "Frames that were not IP.",
            None,
            pl.non_ip,
        )?;
        f.counter("pipeline_batches", "Batches processed.", None, s.batches)?;
        f.counter(
            "pipeline_no_egress",
            "Forwarded packets whose egress port set was empty.",
            None,
            s.no_egress,
        )?;

        // Interfaces.
        let ifs = &s.interfaces;
        let per_if = |v: fn(&super::InterfaceReport) -> u64| {
            ifs.iter()
                .map(move |i| ([("interface", i.port.name.as_str())], v(i)))
        };
        let bytes = Some(&Unit::Bytes);
        f.counters(
            "interface_rx_packets",
            "Frames read.",
            None,
            per_if(|i| i.rx.rx_packets),
        )?;
        f.counters(
            "interface_rx",
            "Bytes of the frames read (wire length).",
            bytes,
            per_if(|i| i.rx.rx_bytes),
        )?;
        f.counters(
            "interface_rx_errors",
            "Read errors.",
            None,
            per_if(|i| i.rx.rx_errors),
        )?;
        f.counters(
            "interface_rx_dropped",
            "Frames the kernel dropped before the router read them (receive queue or ring full).",
            None,
            per_if(|i| i.rx.rx_dropped),
        )?;
        f.counters(
            "interface_rx_outgoing_dropped",
            "Frames other local sockets sent out of the port, read back and dropped.",
            None,
            per_if(|i| i.rx.rx_outgoing_dropped),
        )?;
        f.counters(
            "interface_rx_copied",
            "Frames copied into the batch on the way in rather than lent where the kernel put them (ring backend: a VLAN tag put back).",
            None,
            per_if(|i| i.rx.rx_copied),
        )?;
        f.counters(
            "interface_rx_passed",
            "Frames the port's XDP program left to the kernel's stack: not the router's, or on a queue without a socket (xdp backend).",
            None,
            per_if(|i| i.rx.rx_passed),
        )?;
        f.counters(
            "interface_tx_packets",
            "Copies sent.",
            None,
            per_if(|i| i.port.counters.sent),
        )?;
        f.counters(
            "interface_tx",
            "Bytes of the copies sent (wire length).",
            bytes,
            per_if(|i| i.port.counters.sent_bytes),
        )?;
        f.counters(
            "interface_tx_errors",
            "Copies the port's socket refused.",
            None,
            per_if(|i| i.port.counters.send_errors),
        )?;
        f.counters(
            "interface_tx_dropped",
            "Copies the kernel refused after the router handed them over (ring and xdp backends).",
            None,
            per_if(|i| i.rx.tx_dropped),
        )?;
        f.counters(
            "interface_tx_refused",
            "Copies the kernel refused to send, by reason: msgsize (longer than the interface takes), nobufs, again (queue or ring full), other; the send errors of pnet ports, the tx_dropped of ring and xdp ports.",
            None,
            ifs.iter().flat_map(|i| {
                i.rx.tx_errors
                    .by_reason()
                    .map(|(r, n)| ([("interface", i.port.name.as_str()), ("reason", r)], n))
            }),
        )?;
        f.gauges(
            "interface_mtu",
            "The interface's MTU when the router opened it (0: not known).",
            bytes,
            ifs.iter().map(|i| {
                (
                    [("interface", i.port.name.as_str())],
                    i64::from(i.rx.tx_errors.mtu),
                )
            }),
        )?;
        f.gauges(
            "interface_tx_msgsize_largest",
            "The longest copy the kernel refused as longer than the interface takes.",
            bytes,
            ifs.iter().map(|i| {
                (
                    [("interface", i.port.name.as_str())],
                    i64::from(i.rx.tx_errors.msgsize_largest),
                )
            }),
        )?;
        f.counters(
            "egress_copies",
            "Copies handed to the port.",
            None,
            per_if(|i| i.port.counters.copies),
        )?;
        f.counters(
            "egress_dropped",
            "Copies the port's SFB or queue dropped (all reasons).",
            None,
            per_if(|i| i.port.counters.dropped.total()),
        )?;
        f.counters(
            "egress_shutdown_dropped",
            "Copies still queued at a stop's deadline, dropped.",
            None,
            per_if(|i| i.port.counters.shutdown_dropped),
        )?;
        f.counters(
            "egress_hairpin",
            "Copies not sent back out of their ingress port.",
            None,
            per_if(|i| i.port.counters.hairpin),
        )?;
        f.counters(
            "egress_frame_copies",
            "Copies whose bytes were copied: a lent frame kept in the port's queue, a multicast copy beside another, or an Icarus option inserted or removed.",
            None,
            per_if(|i| i.port.counters.frame_copies),
        )?;

        // Egress queues (interfaces with an SFB table).
        let queues: Vec<(
            &str,
            &super::InterfaceReport,
            &crate::stage::egress::SfbSummary,
        )> = ifs
            .iter()
            .filter_map(|i| Some((i.port.name.as_str(), i, i.port.sfb.as_ref()?)))
            .collect();
        type Sfb = crate::stage::egress::SfbSummary;
        let sfb_counters: [(&str, &str, Field<Sfb>); 8] = [
            ("sfb_marked", "Packets SFB marked CE.", |q| {
                q.counters.marked
            }),
            (
                "sfb_earlydrop",
                "Packets SFB dropped by its marking probability (not ECN-capable).",
                |q| q.counters.earlydrop,
            ),
            (
                "sfb_penaltydrop",
                "Packets of flows in the penalty box dropped.",
                |q| q.counters.penaltydrop,
            ),
            (
                "sfb_bucketdrop",
                "Packets dropped at a full SFB bin.",
                |q| q.counters.bucketdrop,
            ),
            (
                "sfb_queuedrop",
                "Packets dropped at the queue limit.",
                |q| q.counters.queuedrop,
            ),
            (
                "sfb_childdrop",
                "Packets SFB admitted and the queue refused.",
                |q| q.counters.childdrop,
            ),
            (
                "sfb_ratedrop",
                "Packets SFB's fair-share check dropped (their flow over the fair share).",
                |q| q.counters.ratedrop,
            ),
            (
                "sfb_ratemark",
                "Packets SFB's fair-share check marked CE (also in sfb_marked).",
                |q| q.counters.ratemark,
            ),
        ];
        for (name, help, v) in sfb_counters {
            f.counters(
                name,
                help,
                None,
                queues.iter().map(|(n, _, q)| ([("interface", *n)], v(q))),
            )?;
        }
        f.gauges(
            "queue_backlog_packets",
            "Copies in the egress queue now.",
            None,
            queues
                .iter()
                .map(|(n, i, _)| ([("interface", *n)], i.port.backlog_packets)),
        )?;
        f.gauges(
            "queue_backlog",
            "Bytes in the egress queue now.",
            bytes,
            queues
                .iter()
                .map(|(n, i, _)| ([("interface", *n)], i.port.backlog_bytes)),
        )?;
        f.gauges(
            "link_use_ratio",
            "The bytes a shaped port sent over its rate: over the last second of the queue's clock (window=\"last\") and since the first copy offered to it (window=\"run\").",
            None,
            queues.iter().filter_map(|(n, i, _)| i.port.link.map(|l| (*n, l))).flat_map(
                |(n, l)| {
                    [
                        ([("interface", n), ("window", "last")], l.last()),
                        ([("interface", n), ("window", "run")], l.run()),
                    ]
                },
            ),
        )?;
        f.gauges(
            "sfb_maxqlen",
            "Packets in SFB's fullest bin.",
            None,
            queues
                .iter()
                .map(|(n, _, q)| ([("interface", *n)], u64::from(q.maxqlen))),
        )?;
        f.gauges(
            "sfb_maxprob",
            "SFB's largest marking probability (0 to 1).",
            None,
            queues
                .iter()
                .map(|(n, _, q)| ([("interface", *n)], probability(q.maxprob))),
        )?;
        f.gauges(
            "sfb_avgprob",
            "SFB's mean marking probability (0 to 1).",
            None,
            queues
                .iter()
                .map(|(n, _, q)| ([("interface", *n)], probability(q.avgprob))),
        )?;
        f.gauges(
            "sfb_peak_maxqlen",
            "The most packets in SFB's fullest bin over the run.",
            None,
            queues
                .iter()
                .map(|(n, _, q)| ([("interface", *n)], u64::from(q.peak.maxqlen))),
        )?;
        f.gauges(
            "sfb_peak_maxprob",
            "SFB's largest marking probability over the run (0 to 1).",
            None,
            queues
                .iter()
                .map(|(n, _, q)| ([("interface", *n)], probability(q.peak.maxprob))),
        )?;
        f.gauges(
            "sfb_peak_avgprob",
            "SFB's largest mean marking probability over the run (0 to 1).",
            None,
            queues
                .iter()
                .map(|(n, _, q)| ([("interface", *n)], probability(q.peak.avgprob))),
        )?;
        // The fair-share check (the default profile's queues only).
        let fair: Vec<_> = queues
            .iter()
            .filter_map(|(n, _, q)| q.fair.map(|f| (*n, f)))
            .collect();
        f.gauges(
            "sfb_fair_share_bytes_per_second",
            "The fair-share check's share (0: the demands fit the link).",
            None,
            fair.iter()
                .map(|(n, s)| ([("interface", *n)], s.share_bps / 8)),
        )?;
        f.gauges(
            "sfb_fair_competing",
            "Flows the fair share is divided among.",
            None,
            fair.iter()
                .map(|(n, s)| ([("interface", *n)], u64::from(s.competing))),
        )?;
        f.gauges(
            "sfb_fair_held",
            "Flows counted as competing because SFB marked or dropped them in the last second and their rate has not come back.",
            None,
            fair.iter()
                .map(|(n, s)| ([("interface", *n)], u64::from(s.held))),
        )?;

        // Stages.
        let w = &s.wires;
        f.counter(
            "wires_routed",
            "Packets given egress ports.",
            None,
            w.routed,
        )?;
        f.counter(
            "wires_no_route",
            "Packets with no wire out of their ingress port.",
            None,
            w.no_route,
        )?;
        f.counter(
            "pipeline_consumed",
            "Packets the router took in as its own input: addressed to it, or IGMP/MLD it learned from.",
            None,
            pl.consumed,
        )?;
        if let Some(fw) = &s.forward {
            f.gauge(
                "pipeline_held",
                "Packets held now for a next hop being resolved.",
                i64::try_from(pl.held).unwrap_or(i64::MAX),
            )?;
            for (name, help, v) in [
                (
                    "forward_forwarded",
                    "Packets routed (TTL decremented, MACs rewritten).",
                    fw.forwarded,
                ),
                (
                    "forward_local",
                    "Packets to the router itself, consumed.",
                    fw.local,
                ),
                (
                    "forward_no_route",
                    "Routed-port packets with no route.",
                    fw.no_route,
                ),
                (
                    "forward_ttl_expired",
                    "Packets whose TTL / hop limit expired here.",
                    fw.ttl_expired,
                ),
                (
                    "forward_too_big",
                    "Packets larger than the egress MTU.",
                    fw.too_big,
                ),
                (
                    "forward_no_neighbour",
                    "Packets whose next hop's MAC stayed unknown.",
                    fw.no_neighbour,
                ),
                (
                    "forward_other_host",
                    "Frames to another host's MAC.",
                    fw.other_host,
                ),
                ("forward_icmp_errors", "ICMP errors sent.", fw.icmp_errors),
                (
                    "forward_icmp_rate_limited",
                    "ICMP errors the token bucket refused.",
                    fw.icmp_rate_limited,
                ),
                (
                    "forward_echo_replies",
                    "Echo replies sent.",
                    fw.echo_replies,
                ),
                ("forward_arp_replies", "ARP replies sent.", fw.arp_replies),
                (
                    "forward_arp_requests",
                    "ARP requests sent.",
                    fw.arp_requests,
                ),
                (
                    "forward_nd_adverts",
                    "Neighbour advertisements sent.",
                    fw.nd_adverts,
                ),
                (
                    "forward_nd_solicits",
                    "Neighbour solicitations sent.",
                    fw.nd_solicits,
                ),
                (
                    "forward_held",
                    "Packets held for a next hop being resolved.",
                    fw.held,
                ),
                (
                    "forward_released",
                    "Held packets sent once resolved.",
                    fw.released,
                ),
            ] {
                f.counter(name, help, None, v)?;
            }
        }
        if let Some(h) = &s.heavy {
            f.counter(
                "heavy_packets",
                "IP packets the heavy-flow stage counted.",
                None,
                h.packets,
            )?;
            f.counter(
                "heavy",
                "IP bytes the heavy-flow stage counted.",
                bytes,
                h.bytes,
            )?;
            f.counter(
                "heavy_detections",
                "Flows detected as heavy (entered the flow memory).",
                None,
                h.detections,
            )?;
            f.counter(
                "heavy_reported",
                "Heavy flows reported at the end of an epoch (per worker).",
                None,
                h.reported,
            )?;
            f.counter(
                "heavy_overflow",
                "Flows that crossed the threshold while the flow memory was full.",
                None,
                h.overflow,
            )?;
        }
        if let Some(d) = &s.digest {
            f.counter(
                "digest_recorded",
                "Packet digests recorded (forwarded IP packets).",
                None,
                d.recorded,
            )?;
            f.counter(
                "digest_skipped",
                "Forwarded packets with no digest (not IP).",
                None,
                d.skipped,
            )?;
            f.counter("digest_windows", "Digest windows closed.", None, d.windows)?;
            f.counter(
                "digest_early_windows",
                "Digest windows closed early because they held their capacity.",
                None,
                d.early,
            )?;
            f.gauge(
                "digest_memory_bytes",
                "Bytes of the digest windows' filters.",
                i64::try_from(d.memory_bytes).unwrap_or(i64::MAX),
            )?;
        }
        if let Some(q) = &s.digest_queries {
            f.counters(
                "digest_queries",
                "Queries about the digests, by result.",
                None,
                [
                    ([("result", "answered")], q.answered),
                    ([("result", "refused")], q.refused),
                    ([("result", "rate_limited")], q.rate_limited),
                    ([("result", "malformed")], q.malformed),
                ],
            )?;
        }
        if let Some(i) = &s.icarus {
            f.counter(
                "icarus_loops",
                "Packets found on a forwarding loop.",
                None,
                i.loops_detected,
            )?;
            f.counter(
                "icarus_marked_hops",
                "Hops that ORed this node's mask in.",
                None,
                i.marked_hops,
            )?;
            f.counter(
                "icarus_inserted",
                "Icarus filters inserted on ingress.",
                None,
                i.inserted,
            )?;
            f.counters(
                "icarus_stripped",
                "Icarus filters removed from departing copies.",
                None,
                per_if(|i| i.port.counters.stripped),
            )?;
            f.counter(
                "icarus_no_room",
                "Packets that should have got a filter but had no room.",
                None,
                i.no_room,
            )?;
        }
        if let Some(m) = &s.multicast {
            for (name, help, v) in [
                (
                    "multicast_data_packets",
                    "Multicast data packets looked up.",
                    m.data_packets,
                ),
                (
                    "multicast_forwarded",
                    "Multicast data packets forwarded.",
                    m.forwarded,
                ),
                ("multicast_copies", "Multicast copies sent.", m.copies),
                (
                    "multicast_joins",
                    "Memberships learned from reports.",
                    m.joins,
                ),
                (
                    "multicast_joins_refused",
                    "Joins refused at the cap.",
                    m.joins_refused,
                ),
                (
                    "multicast_leaves",
                    "Memberships ended by a leave.",
                    m.leaves,
                ),
                (
                    "multicast_expiries",
                    "Memberships whose timer ran out.",
                    m.expiries,
                ),
                (
                    "multicast_records_over_budget",
                    "Group records ignored over the per-batch budget.",
                    m.records_over_budget,
                ),
            ] {
                f.counter(name, help, None, v)?;
            }
        }
        let mc = &s.multicast_interfaces;
        f.gauges(
            "multicast_members",
            "Multicast groups delivered out of the interface now (static included).",
            None,
            mc.iter().map(|i| (mif_label(i), i.stats.members as u64)),
        )?;
        f.gauges(
            "multicast_learned_groups",
            "Multicast groups learned from reports on the interface now.",
            None,
            mc.iter().map(|i| (mif_label(i), i.stats.learned as u64)),
        )?;
        f.gauges(
            "multicast_learned_groups_limit",
            "The cap on learned groups per interface.",
            None,
            mc.iter().map(|i| (mif_label(i), i.stats.max_learned)),
        )?;
        f.gauges(
            "multicast_filter_fill_ratio",
            "Fraction of the interface's group filter set.",
            None,
            mc.iter().map(|i| (mif_label(i), i.stats.fill)),
        )?;
        f.gauges(
            "multicast_filter_false_positive_ratio",
            "The group filter's false-positive estimate.",
            None,
            mc.iter().map(|i| (mif_label(i), i.stats.fpr)),
        )?;
        if let Some(p) = &s.peering {
            encode_peering(&mut f, p)?;
        }
        Ok(())
    }
}

/// The protocol between routers: the router's figures, and per peer
/// (labelled by the interface facing it and its address).
fn encode_peering(f: &mut Families<'_>, p: &crate::peer::PeeringReport) -> std::fmt::Result {
    f.gauge(
        "peering_local_groups",
        "Groups joined on this router's host ports, advertised to its peers.",
        i64::try_from(p.local_groups).unwrap_or(i64::MAX),
    )?;
    if let Some(n) = p.flows {
        f.gauge(
            "peering_flows",
            "Flows in the network-wide set held here.",
            i64::try_from(n).unwrap_or(i64::MAX),
        )?;
        f.counter(
            "peering_flows_learned",
            "Flows learned from peers.",
            None,
            p.flows_learned,
        )?;
        f.counter(
            "peering_flows_detected",
            "Flows reported here (detected heavy, or listed).",
            None,
            p.flows_detected,
        )?;
    }
    f.counter(
        "peering_rejected_unknown",
        "Messages to the peering port from senders that are not peers.",
        None,
        p.rejected_unknown,
    )?;
    let label = |q: &crate::peer::PeerReport| {
        [
            ("interface", q.interface.clone()),
            ("peer", q.address.to_string()),
        ]
    };
    let peers = &p.peers;
    f.gauges(
        "peering_peer_up",
        "1 while the peer is heard from within the hold time.",
        None,
        peers.iter().map(|q| (label(q), u64::from(q.up))),
    )?;
    for (name, help, get) in [
        (
            "peering_rx_messages",
            "Messages accepted from the peer.",
            (|c: &crate::peer::PeerCounters| c.rx_messages)
                as fn(&crate::peer::PeerCounters) -> u64,
        ),
        ("peering_rx_bytes", "Their bytes.", |c| c.rx_bytes),
        ("peering_tx_messages", "Messages sent to the peer.", |c| {
            c.tx_messages
        }),
        ("peering_tx_bytes", "Their bytes.", |c| c.tx_bytes),
        (
            "peering_filters_in",
            "Whole membership filters received.",
            |c| c.filters_in,
        ),
        (
            "peering_filters_out",
            "Whole membership filters sent.",
            |c| c.filters_out,
        ),
        ("peering_deltas_in", "Membership deltas applied.", |c| {
            c.deltas_in
        }),
        ("peering_deltas_out", "Membership deltas sent.", |c| {
            c.deltas_out
        }),
        (
            "peering_filter_bytes",
            "Bytes of membership filters sent (compressed).",
            |c| c.filter_bytes,
        ),
        ("peering_summaries_out", "Flow summaries sent.", |c| {
            c.summaries_out
        }),
        (
            "peering_flows_in",
            "Flows learned from the peer's answers.",
            |c| c.flows_in,
        ),
        (
            "peering_flows_out",
            "Flows sent in answers to the peer.",
            |c| c.flows_out,
        ),
        (
            "peering_expired",
            "Times the peer went down (silent for the hold time).",
            |c| c.expired,
        ),
    ] {
        f.counters(
            name,
            help,
            None,
            peers.iter().map(|q| (label(q), get(&q.counters))),
        )?;
    }
    f.counters(
        "peering_rejected",
        "Messages from the peer refused, by reason.",
        None,
        peers.iter().flat_map(|q| {
            crate::peer::Reject::ALL.iter().map(move |&r| {
                let mut l = label(q).to_vec();
                l.push(("reason", r.name().to_string()));
                (l, q.counters.rejected.get(r))
            })
        }),
    )
}

/// The `interface` label of a multicast interface.
fn mif_label(i: &super::MulticastInterface) -> [(&'static str, &str); 1] {
    [("interface", i.name.as_str())]
}

/// Why [`MetricsServer::bind`] failed.
#[derive(Debug, thiserror::Error)]
#[error("telemetry.listen: cannot listen on {addr}: {error}")]
pub struct BindError {
    /// The address.
    pub addr: SocketAddr,
    /// What the system said.
    pub error: Box<dyn std::error::Error + Send + Sync>,
}

/// Where a scrape's stats come from.
pub trait StatsSource: Send + 'static {
    /// The stats now.
    fn stats(&self) -> Stats;
}

impl StatsSource for super::Snapshots {
    fn stats(&self) -> Stats {
        self.merged()
    }
}

/// Fixed stats (tests, a finished replay).
impl StatsSource for Stats {
    fn stats(&self) -> Stats {
        self.clone()
    }
}

/// A bound listener, not yet serving: bind before the router gives up its
/// capabilities, serve once it runs ([`MetricsServer::spawn`]). The server
/// is [`super::http`]'s: one thread, a bounded number of connections.
#[derive(Debug)]
pub struct MetricsServer {
    listener: HttpListener,
}

impl MetricsServer {
    /// Listens on `addr` (port 0: any free port, see
    /// [`MetricsServer::local_addr`]).
    ///
    /// # Errors
    /// The address cannot be bound (in use, not local, no permission).
    pub fn bind(addr: SocketAddr) -> Result<MetricsServer, BindError> {
        let listener = HttpListener::bind(addr).map_err(|error| BindError {
            addr,
            error: Box::new(error),
        })?;
        Ok(MetricsServer { listener })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr()
    }

    /// Serves `GET /metrics` from `source` on a thread of its own until
    /// [`MetricsThread::stop`].
    ///
    /// # Errors
    /// The thread cannot be spawned.
    pub fn spawn<S: StatsSource>(self, source: S) -> std::io::Result<MetricsThread> {
        self.spawn_with(source, None, Limits::default())
    }

    /// Serves `GET /metrics` from `source` and, with `digest`, `GET
    /// /digest` (the router's answers about packets it forwarded,
    /// [`super::digest`]), within `limits`.
    ///
    /// # Errors
    /// The thread cannot be spawned.
    pub fn spawn_with<S: StatsSource>(
        self,
        source: S,
        digest: Option<DigestRoute>,
        limits: Limits,
    ) -> std::io::Result<MetricsThread> {
        self.listener
            .serve("bp-telemetry", Telemetry { source, digest }, limits)
    }
}

/// The telemetry listener's routes.
struct Telemetry<S> {
    source: S,
    digest: Option<DigestRoute>,
}

impl<S: StatsSource> Handler for Telemetry<S> {
    fn handle(&mut self, rq: &Request<'_>) -> Response {
        match (rq.path, &mut self.digest) {
            ("/metrics", d) => {
                let mut stats = self.source.stats();
                if let Some(d) = d {
                    stats.digest_queries = Some(d.counters().snapshot());
                }
                metrics_response(rq, &stats)
            }
            ("/digest", Some(d)) => d.handle(rq),
            ("/digest", None) => Response::text(
                404,
                "not found: this router keeps no packet digests (no [digest] table)\n",
            ),
            _ => Response::text(404, "not found: the metrics are at /metrics\n"),
        }
    }
}

/// The answer to `GET /metrics`.
fn metrics_response(rq: &Request<'_>, stats: &Stats) -> Response {
    let openmetrics = rq
        .header("Accept")
        .is_some_and(|v| v.contains("application/openmetrics-text"));
    let text = encode(stats);
    if openmetrics {
        Response::with_type(200, OPENMETRICS_CONTENT_TYPE, text.into_bytes())
    } else {
        Response::with_type(
            200,
            TEXT_CONTENT_TYPE,
            to_prometheus_text(&text).into_bytes(),
        )
    }
}

/// The serving thread; [`ServerThread::stop`] (or dropping it) stops it
/// within 100 ms and closes the listener.
pub type MetricsThread = ServerThread;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{InterfaceReport, MulticastInterface};
    use crate::stage::egress::SfbSummary;
    use crate::stage::heavy::HeavyCounters;
    use crate::stage::icarus::IcarusCounters;

    /// Two interfaces, the second queued, every stage on.
    fn stats() -> Stats {
        let mut s = Stats::default();
        let mut a = InterfaceReport::default();
        a.port.name = "r-a".into();
        a.rx.rx_packets = 1000;
        a.rx.rx_bytes = 1_500_000;
        a.rx.rx_dropped = 7;
        a.rx.rx_errors = 1;
        let mut b = InterfaceReport::default();
        b.port.name = "r-b".into();
        b.port.counters.sent = 900;
        b.port.counters.sent_bytes = 1_350_000;
        b.port.counters.send_errors = 2;
        b.rx.tx_errors.mtu = 1500;
        b.rx.tx_errors.record(libc::EMSGSIZE, 1534, 1);
        b.rx.tx_errors.record(libc::ENOBUFS, 60, 1);
        b.port.counters.stripped = 5;
        b.port.backlog_packets = 3;
        b.port.backlog_bytes = 4500;
        let mut sfb = SfbSummary {
            maxprob: 32768,
            avgprob: SFB_MAX_PROB,
            maxqlen: 9,
            peak: crate::stage::sfb::SfbPeaks {
                maxqlen: 40,
                maxprob: SFB_MAX_PROB,
                avgprob: SFB_MAX_PROB,
            },
            fair: Some(crate::stage::sfb::FairStats {
                share_bps: 1_250_000,
                competing: 17,
                held: 3,
            }),
            ..SfbSummary::default()
        };
        sfb.counters.marked = 11;
        sfb.counters.earlydrop = 12;
        sfb.counters.penaltydrop = 13;
        sfb.counters.bucketdrop = 14;
        sfb.counters.queuedrop = 15;
        b.port.sfb = Some(sfb);
        // 3.75 Mbit/s of 4 over the last second, 2 over the run's 10 s.
        b.port.link = Some(crate::stage::egress::LinkUse {
            rate_bps: 4_000_000,
            last_ns: 1_000_000_000,
            last_bytes: 468_750,
            run_ns: 10_000_000_000,
            run_bytes: 2_500_000,
        });
        s.interfaces = vec![a, b];
        s.pipeline.received = 1000;
        s.pipeline.forwarded = 958;
        s.pipeline.marked = 11;
        s.pipeline.dropped = 42;
        s.pipeline.drops.insert("sfb_bucket".into(), 14);
        s.pipeline.drops.insert("loop".into(), 28);
        s.pipeline.malformed.insert("truncated_l2".into(), 2);
        s.heavy = Some(HeavyCounters {
            detections: 4,
            reported: 3,
            ..HeavyCounters::default()
        });
        s.icarus = Some(IcarusCounters {
            loops_detected: 28,
            inserted: 100,
            ..IcarusCounters::default()
        });
        s.multicast_interfaces = vec![MulticastInterface {
            name: "r-b".into(),
            stats: crate::stage::multicast::InterfaceStats {
                learned: 6,
                members: 7,
                ..Default::default()
            },
        }];
        // 1,000 processing times: 900 of 1.5 us, 99 of 40 us, one of 1 ms.
        let mut h = crate::runtime::worker::new_histogram();
        h.record_n(1_500, 900).unwrap();
        h.record_n(40_000, 99).unwrap();
        h.record(1_000_000).unwrap();
        s.latency_buckets.processing = LatencyBuckets::of(&h);
        s
    }

    #[test]
    fn encode_names_labels_values() {
        let text = encode(&stats());
        for want in [
            "# TYPE bloomplane_pipeline_received counter\n",
            "bloomplane_pipeline_received_total 1000\n",
            "bloomplane_pipeline_dropped_total{reason=\"loop\"} 28\n",
            "bloomplane_pipeline_dropped_total{reason=\"sfb_bucket\"} 14\n",
            // Every reason, zero or not.
            "bloomplane_pipeline_dropped_total{reason=\"queue_full\"} 0\n",
            "bloomplane_pipeline_malformed_total{reason=\"truncated_l2\"} 2\n",
            "# UNIT bloomplane_interface_rx_bytes bytes\n",
            "bloomplane_interface_rx_bytes_total{interface=\"r-a\"} 1500000\n",
            "bloomplane_interface_rx_packets_total{interface=\"r-a\"} 1000\n",
            "bloomplane_interface_rx_dropped_total{interface=\"r-a\"} 7\n",
            "bloomplane_interface_rx_errors_total{interface=\"r-a\"} 1\n",
            "bloomplane_interface_tx_packets_total{interface=\"r-b\"} 900\n",
            "bloomplane_interface_tx_bytes_total{interface=\"r-b\"} 1350000\n",
            "bloomplane_interface_tx_errors_total{interface=\"r-b\"} 2\n",
            "bloomplane_interface_tx_refused_total{interface=\"r-b\",reason=\"msgsize\"} 1\n",
            "bloomplane_interface_tx_refused_total{interface=\"r-b\",reason=\"nobufs\"} 1\n",
            "bloomplane_interface_tx_refused_total{interface=\"r-b\",reason=\"again\"} 0\n",
            "bloomplane_interface_tx_refused_total{interface=\"r-a\",reason=\"msgsize\"} 0\n",
            "bloomplane_interface_mtu_bytes{interface=\"r-b\"} 1500\n",
            "bloomplane_interface_tx_msgsize_largest_bytes{interface=\"r-b\"} 1534\n",
            "bloomplane_sfb_marked_total{interface=\"r-b\"} 11\n",
            "bloomplane_sfb_earlydrop_total{interface=\"r-b\"} 12\n",
            "bloomplane_sfb_penaltydrop_total{interface=\"r-b\"} 13\n",
            "bloomplane_sfb_bucketdrop_total{interface=\"r-b\"} 14\n",
            "bloomplane_sfb_queuedrop_total{interface=\"r-b\"} 15\n",
            "# TYPE bloomplane_queue_backlog_packets gauge\n",
            "bloomplane_queue_backlog_packets{interface=\"r-b\"} 3\n",
            "bloomplane_queue_backlog_bytes{interface=\"r-b\"} 4500\n",
            "bloomplane_sfb_maxqlen{interface=\"r-b\"} 9\n",
            "bloomplane_sfb_avgprob{interface=\"r-b\"} 1.0\n",
            "bloomplane_sfb_peak_maxqlen{interface=\"r-b\"} 40\n",
            "bloomplane_sfb_fair_share_bytes_per_second{interface=\"r-b\"} 156250\n",
            "bloomplane_sfb_fair_competing{interface=\"r-b\"} 17\n",
            "bloomplane_sfb_fair_held{interface=\"r-b\"} 3\n",
            "# TYPE bloomplane_link_use_ratio gauge\n",
            "bloomplane_link_use_ratio{interface=\"r-b\",window=\"last\"} 0.9375\n",
            "bloomplane_link_use_ratio{interface=\"r-b\",window=\"run\"} 0.5\n",
            "bloomplane_heavy_detections_total 4\n",
            "bloomplane_heavy_reported_total 3\n",
            "bloomplane_icarus_loops_total 28\n",
            "bloomplane_icarus_inserted_total 100\n",
            "bloomplane_icarus_stripped_total{interface=\"r-b\"} 5\n",
            "bloomplane_multicast_learned_groups{interface=\"r-b\"} 6\n",
            "bloomplane_multicast_members{interface=\"r-b\"} 7\n",
            "# TYPE bloomplane_processing_latency_seconds histogram\n",
            "bloomplane_processing_latency_seconds_bucket{le=\"1e-6\"} 0\n",
            "bloomplane_processing_latency_seconds_bucket{le=\"2.5e-6\"} 900\n",
            "bloomplane_processing_latency_seconds_bucket{le=\"2.5e-5\"} 900\n",
            "bloomplane_processing_latency_seconds_bucket{le=\"5e-5\"} 999\n",
            "bloomplane_processing_latency_seconds_bucket{le=\"1e-3\"} 1000\n",
            "bloomplane_processing_latency_seconds_bucket{le=\"+Inf\"} 1000\n",
            "bloomplane_processing_latency_seconds_count 1000\n",
            "bloomplane_sojourn_latency_seconds_bucket{le=\"+Inf\"} 0\n",
            "bloomplane_sojourn_latency_seconds_count 0\n",
        ] {
            assert!(text.contains(want), "{want:?} missing from\n{text}");
        }
        // Q0.16 as a ratio, as tc prints it.
        let maxprob = text
            .lines()
            .find_map(|l| l.strip_prefix("bloomplane_sfb_maxprob{interface=\"r-b\"} "))
            .unwrap();
        assert!((maxprob.parse::<f64>().unwrap() - 0.500_007_6).abs() < 1e-6);
        // The sum: 900 x 1.5 us + 99 x 40 us + 1 ms, within HdrHistogram's
        // 0.1%.
        let sum: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("bloomplane_processing_latency_seconds_sum "))
            .unwrap()
            .parse()
            .unwrap();
        assert!((sum - 6.31e-3).abs() < 6.31e-6, "{sum}");
        // No queue on r-a; multicast counters only when the stage is on.
        assert!(!text.contains("sfb_marked_total{interface=\"r-a\"}"));
        assert!(!text.contains("bloomplane_multicast_joins"));
        assert!(text.ends_with("# EOF\n"));
        assert_eq!(text.matches("# EOF").count(), 1);
        assert!(!text.contains("bloomplane_forward_"), "no routed port");
    }

    #[test]
    fn forwarding_counters_when_a_port_is_routed() {
        let mut s = stats();
        s.pipeline.consumed = 5;
        s.pipeline.held = 2;
        s.forward = Some(crate::stage::forward::ForwardCounters {
            forwarded: 900,
            ttl_expired: 3,
            icmp_errors: 3,
            arp_requests: 1,
            ..Default::default()
        });
        let text = encode(&s);
        for want in [
            "bloomplane_pipeline_consumed_total 5\n",
            "# TYPE bloomplane_pipeline_held gauge\n",
            "bloomplane_pipeline_held 2\n",
            "bloomplane_forward_forwarded_total 900\n",
            "bloomplane_forward_ttl_expired_total 3\n",
            "bloomplane_forward_icmp_errors_total 3\n",
            "bloomplane_forward_arp_requests_total 1\n",
            "bloomplane_forward_no_route_total 0\n",
        ] {
            assert!(text.contains(want), "{want:?} missing from\n{text}");
        }
    }

    #[test]
    fn prometheus_text_names_counter_families_with_total() {
        let text = to_prometheus_text(&encode(&stats()));
        assert!(text.contains(
            "# HELP bloomplane_pipeline_dropped_total Packets dropped, by reason.\n\
             # TYPE bloomplane_pipeline_dropped_total counter\n\
             bloomplane_pipeline_dropped_total{reason="
        ));
        assert!(text.contains("bloomplane_pipeline_dropped_total{reason=\"no_route\"} 0\n"));
        assert!(text.contains("# TYPE bloomplane_queue_backlog_bytes gauge\n"));
        assert!(text.contains("# TYPE bloomplane_processing_latency_seconds histogram\n"));
        assert!(!text.contains("# UNIT") && !text.contains("# EOF"));
    }
}
