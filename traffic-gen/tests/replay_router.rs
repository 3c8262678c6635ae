//! `replay --config`: the router's whole chain on captures in capture
//! time, judged against ground truth and exact references.
//!
//! * Icarus: `synth --kind icarus` replayed through a router that is the
//!   checking node: the packets it forwards (read back from the `--write`
//!   capture) are exactly those the truth file says are not on a loop.
//! * SFB: ECT(0) and not-ECT flows at twice a shaped port's rate: the
//!   departures written for that port never beat a token bucket of the
//!   configured rate and burst (checked against an exact integer model),
//!   the CE-marked frames in the capture are exactly the `marked` counter,
//!   every copy is accounted for, and the same run twice gives
//!   byte-identical captures and equal reports.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use dataplane::config::RouterConfig;
use dataplane::io::capture::{CaptureReader, CaptureWriter};
use dataplane::wire::build::{self, IpHeader, PROTO_UDP};
use dataplane::wire::{LinkType, checksum, parse};
use traffic_gen::replay::{Input, ReplayConfig, Report, replay};
use traffic_gen::synth::icarus::{IcarusSynthConfig, write_pcap};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("traffic-gen-router-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Every record of a capture: (time ns, wire length, bytes).
fn records(path: &Path) -> Vec<(u64, u32, Vec<u8>)> {
    let mut r = CaptureReader::open(path).unwrap();
    let mut out = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        out.push((rec.ts_ns, rec.orig_len, rec.data.to_vec()));
    }
    out
}

fn run(input: &Path, router: &str, write: &Path) -> Report {
    let router = RouterConfig::from_toml_str(router, "test router").unwrap();
    let cfg = ReplayConfig {
        pin: false,
        write: Some(write.to_path_buf()),
        ..ReplayConfig::new(router)
    };
    let r = replay(&Input::Files(vec![input.to_path_buf()]), &cfg, None).unwrap();
    assert!(r.router.is_consistent(), "{:?}", r.router);
    r
}

#[test]
fn icarus_verdicts_equal_the_truth() {
    let dir = scratch("icarus");
    let pcap = dir.join("loops.pcap");
    let synth = IcarusSynthConfig {
        node_id: 7,
        packets: 20_000,
        ..IcarusSynthConfig::default()
    };
    let truth = write_pcap(synth, &pcap).unwrap();
    let router = format!(
        r#"
[[interfaces]]
name = "in"
[[interfaces]]
name = "out"
[[wires]]
from = "in"
to = "out"
[icarus]
node_id = {}
filter_bits = {}
k = {}
seed = {}
"#,
        truth.node_id, truth.m, truth.k, truth.domain_seed
    );
    let out = dir.join("out");
    let report = run(&pcap, &router, &out);
    // The sequence number is the last 8 bytes of every frame (the UDP
    // payload's first 8 of 16, see synth_icarus): read it back.
    let forwarded: HashSet<u64> = records(&out.join("out.pcap"))
        .iter()
        .map(|(_, _, f)| {
            let p = parse(LinkType::Ethernet, f).unwrap();
            let udp = p.l4_bytes(f);
            u64::from_be_bytes(udp[8..16].try_into().unwrap())
        })
        .collect();
    let want: HashSet<u64> = (0..truth.packets)
        .filter(|&i| !truth.detected[i as usize])
        .collect();
    assert_eq!(forwarded.len(), want.len());
    assert_eq!(forwarded, want, "forwarded packets differ from the truth");
    let ic = report.router.icarus.unwrap();
    assert_eq!(ic.loops_detected, truth.expected_loops_detected);
    assert_eq!(
        report
            .router
            .pipeline
            .drops
            .get("loop")
            .copied()
            .unwrap_or(0),
        truth.expected_loops_detected
    );
    assert!(records(&out.join("in.pcap")).is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Shaped port: 8 Mbit/s, a 3000-byte bucket.
const RATE_BPS: u64 = 8_000_000;
const BURST: u64 = 3000;
const FRAME: usize = 1000;

const SHAPED: &str = r#"
[[interfaces]]
name = "in"
[[interfaces]]
name = "out"
[interfaces.egress]
rate_bps = 8_000_000
burst_bytes = 3000
limit = 200
[interfaces.sfb]
limit = 200
target = 8
max = 30
increment = 1000
[[wires]]
from = "in"
to = "out"
"#;

/// 20 UDP flows of 1000-byte frames, half of them ECT(0), together at
/// twice [`RATE_BPS`] for two seconds.
fn overload(path: &Path) -> u64 {
    let mut w = CaptureWriter::create(path, LinkType::Ethernet, 65535).unwrap();
    let gap = (FRAME as u64 * 8) * 1_000_000_000 / (2 * RATE_BPS);
    let n = 2 * 1_000_000_000 / gap;
    for i in 0..n {
        let flow = (i % 20) as u16;
        let ip = IpHeader {
            tos: if flow.is_multiple_of(2) { 0x02 } else { 0 },
            ..IpHeader::v4([10, 0, 0, 1], [10, 0, 1, flow as u8], PROTO_UDP)
        };
        let f = build::udp_frame([0; 6], [0; 6], &ip, 5000 + flow, 9, &[0; FRAME - 42]);
        w.write(1_000_000_000 + i * gap, FRAME as u32, &f).unwrap();
    }
    w.finish().unwrap();
    n
}

#[test]
fn shaped_port_keeps_its_rate_and_marks_what_it_counts() {
    let dir = scratch("sfb");
    let pcap = dir.join("overload.pcap");
    let sent = overload(&pcap);
    let out = dir.join("out");
    let report = run(&pcap, SHAPED, &out);
    let deps = records(&out.join("out.pcap"));
    let port = report
        .router
        .interfaces
        .iter()
        .find(|i| i.port.name == "out")
        .unwrap();
    let c = &port.port.counters;
    let sfb = port.port.sfb.as_ref().unwrap().counters;
    assert_eq!(c.copies, sent);
    assert_eq!(deps.len() as u64, c.sent);
    assert!(
        c.dropped.total() > 0,
        "twice the rate: something is dropped"
    );
    // The token bucket, exactly: credit in units of 1 / (8 * 10^9) bytes
    // (one bit-nanosecond), full at the start; a frame may leave when the
    // bucket holds its length, and the bucket never holds more than the
    // burst (or the frame waiting, when it is longer).
    let unit = 8 * 1_000_000_000u128;
    let (mut credit, mut last) = (u128::from(BURST) * unit, deps[0].0);
    for (t, len, _) in &deps {
        assert!(*t >= last, "departures in time order");
        let need = u128::from(*len) * unit;
        credit = (credit + u128::from(t - last) * u128::from(RATE_BPS))
            .min(u128::from(BURST.max(u64::from(*len))) * unit);
        assert!(
            credit >= need,
            "a frame left at {t} before the bucket held it"
        );
        credit -= need;
        last = *t;
    }
    // Over the run the port sent close to its rate, never above it (SFB's
    // drops let the queue run dry now and then).
    let span = (deps.last().unwrap().0 - deps[0].0) as f64 / 1e9;
    let rate = (deps.len() - 1) as f64 * FRAME as f64 * 8.0 / span;
    let ratio = rate / RATE_BPS as f64;
    assert!(ratio > 0.6 && ratio < 1.001, "{rate} bit/s");
    // CE in the capture is exactly what SFB counted, and only on ECT flows.
    let ce: Vec<&Vec<u8>> = deps
        .iter()
        .map(|d| &d.2)
        .filter(|f| f[15] & 3 == 3)
        .collect();
    assert!(sfb.marked > 0, "{sfb:?}");
    assert_eq!(ce.len() as u64, sfb.marked);
    assert_eq!(report.router.pipeline.marked, sfb.marked);
    for f in &ce {
        assert_eq!(checksum::sum(&f[14..34]), 0xffff, "IPv4 checksum after CE");
        assert_eq!(f[33] % 2, 0, "an ECT(0) flow");
    }
    let sojourn = report.router.latency.sojourn;
    assert_eq!(sojourn.count, c.sent);
    assert!(sojourn.max > 0);
    // Deterministic: the same run again, byte for byte.
    let again = dir.join("again");
    let report2 = run(&pcap, SHAPED, &again);
    assert_eq!(
        std::fs::read(out.join("out.pcap")).unwrap(),
        std::fs::read(again.join("out.pcap")).unwrap()
    );
    let strip = |r: &Report| {
        let mut v = serde_json::to_value(r).unwrap();
        for k in ["elapsed_s", "pps", "mbps", "per_worker", "written"] {
            v.as_object_mut().unwrap().remove(k);
        }
        v["router"]["latency"]["processing"] = serde_json::Value::Null;
        v
    };
    assert_eq!(strip(&report), strip(&report2));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `synth --kind multicast` (pcapng, one interface per port, `p0`..)
/// through a router whose interfaces have those names: every data packet
/// leaves by exactly the ports of its truth (read back from the `--write`
/// captures by its sequence number), control messages by none.
#[test]
fn multicast_egress_sets_equal_the_truth() {
    use traffic_gen::synth::mcast::{McastConfig, write_pcapng};
    let dir = scratch("mcast");
    let pcap = dir.join("mcast.pcapng");
    let cfg = McastConfig {
        packets: 30_000,
        ..McastConfig::default()
    };
    let truth = write_pcapng(cfg, &pcap).unwrap();
    let mut router = String::new();
    for p in 0..truth.ports {
        router.push_str(&format!("[[interfaces]]\nname = \"p{p}\"\n"));
    }
    // Filters sized so that a false forward is out of the question.
    router.push_str("[multicast]\nexpected_groups = 4096\nfalse_positive_rate = 1e-9\n");
    let out = dir.join("out");
    let report = run(&pcap, &router, &out);
    let mut got = vec![0u64; truth.ingress.len()];
    for p in 0..truth.ports {
        for (_, _, f) in records(&out.join(format!("p{p}.pcap"))) {
            let parsed = parse(LinkType::Ethernet, &f).unwrap();
            let udp = parsed.l4_bytes(&f);
            let seq = u32::from_be_bytes(udp[8..12].try_into().unwrap()) as usize;
            assert_eq!(got[seq] & (1 << p), 0, "packet {seq} twice out of p{p}");
            got[seq] |= 1 << p;
        }
    }
    let (mut data, mut fanned) = (0, 0);
    for (i, want) in truth.expected.iter().enumerate() {
        match want {
            None => assert_eq!(got[i], 0, "control message {i} consumed"),
            Some(mask) => {
                assert_eq!(got[i], *mask, "packet {i} from p{}", truth.ingress[i]);
                data += 1;
                fanned += u64::from(mask.count_ones() > 1);
            }
        }
    }
    let mc = report.router.multicast.unwrap();
    assert_eq!(mc.data_packets, data);
    assert!(fanned > 100, "{fanned} packets to several ports");
    assert!(mc.joins > 0 && mc.leaves > 0 && mc.expiries > 0, "{mc:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Routed mode (`dataplane/examples/router-l3.toml`): a synthetic capture
/// arriving on r-a, replayed with `--write`. Packets to 10.9/16 leave r-b
/// with TTL 63, the static neighbour's MAC and r-b's default MAC, the IPv4
/// checksum right; those with TTL 1 come back out of r-a as ICMP Time
/// Exceeded; those for the default route wait for 10.3.0.254, which the
/// router asks for on r-c (an ARP request a second, three in all), and
/// are dropped when it never answers; frames to another MAC are dropped.
/// A UDP frame from 10.1.0.7 (a host behind r-a of
/// `dataplane/examples/router-l3.toml`) to `dst`, sent to `dst_mac`.
fn routed_frame(dst_mac: [u8; 6], dst: [u8; 4], ttl: u8) -> Vec<u8> {
    let ip = IpHeader {
        ttl,
        ident: 1,
        dont_fragment: true,
        ..IpHeader::v4([10, 1, 0, 7], dst, PROTO_UDP)
    };
    build::udp_frame(dst_mac, [2, 0, 0, 0, 1, 7], &ip, 5000, 9, &[0xab; 20])
}

/// r-a's MAC in `dataplane/examples/router-l3.toml`.
const ROUTER_MAC: [u8; 6] = [2, 0, 0, 0, 0x0a, 1];

fn l3_router() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../dataplane/examples/router-l3.toml"
    ))
    .unwrap()
}

#[test]
fn routed_replay_rewrites_ttl_and_macs() {
    let dir = scratch("l3");
    let pcap = dir.join("routed.pcap");
    let router_mac = ROUTER_MAC;
    let frame = routed_frame;
    let mut w = CaptureWriter::create(&pcap, LinkType::Ethernet, 65535).unwrap();
    let (mut routed, mut expired, mut far, mut other) = (0u64, 0u64, 0u64, 0u64);
    for i in 0..400u64 {
        let (mac, dst, ttl) = match i % 8 {
            0 => {
                expired += 1;
                (router_mac, [10, 9, 1, 1], 1)
            }
            1 if far < 2 => {
                far += 1;
                (router_mac, [192, 0, 2, 1], 64)
            }
            2 => {
                other += 1;
                ([2, 0, 0, 0, 9, 9], [10, 9, 1, 1], 64)
            }
            _ => {
                routed += 1;
                (router_mac, [10, 9, (i >> 8) as u8, i as u8], 64)
            }
        };
        let f = frame(mac, dst, ttl);
        // 10 ms apart: 4 s of capture time.
        w.write(1_000_000_000 + i * 10_000_000, f.len() as u32, &f)
            .unwrap();
    }
    w.finish().unwrap();
    let out = dir.join("out");
    let report = run(&pcap, &l3_router(), &out);
    let r = &report.router;
    assert_eq!(r.pipeline.received, 400);
    assert_eq!(r.pipeline.forwarded, routed);
    assert_eq!(r.pipeline.held, 0);
    assert_eq!(r.pipeline.drops.get("ttl_expired"), Some(&expired));
    assert_eq!(r.pipeline.drops.get("other_host"), Some(&other));
    assert_eq!(r.pipeline.drops.get("no_neighbour"), Some(&far));
    let f = r.forward.expect("the forwarding stage's counters");
    assert_eq!(
        (f.forwarded, f.icmp_errors, f.arp_requests),
        (routed, expired, 3)
    );
    let b = records(&out.join("r-b.pcap"));
    assert_eq!(b.len() as u64, routed);
    for (_, _, d) in &b {
        assert_eq!(&d[0..6], &[2, 0, 0, 0, 0x0b, 2], "the static neighbour");
        assert_eq!(&d[6..12], &[2, 0x62, 0x70, 0, 0, 2], "r-b's default MAC");
        assert_eq!(d[22], 63, "TTL");
        assert_eq!(checksum::sum(&d[14..34]), 0xffff, "IPv4 checksum");
    }
    let a = records(&out.join("r-a.pcap"));
    assert_eq!(a.len() as u64, expired);
    for (_, _, d) in &a {
        let p = parse(LinkType::Ethernet, d).unwrap();
        let l4 = p.l4_offset.unwrap();
        assert_eq!((d[l4], d[l4 + 1]), (11, 0), "time exceeded");
        assert_eq!(&d[0..6], &[2, 0, 0, 0, 1, 7], "back to the sender");
        assert_eq!(checksum::sum(&d[l4..]), 0xffff, "ICMP checksum");
    }
    let c = records(&out.join("r-c.pcap"));
    assert_eq!(c.len(), 3, "three ARP requests for 10.3.0.254");
    assert!(c.iter().all(|(_, _, d)| d[12..14] == [0x08, 0x06]));
    // A second apart at least: the timers run with the batches (32
    // packets, 320 ms of this capture) and the replay's ticks.
    let gaps: Vec<u64> = c.windows(2).map(|w| w[1].0 - w[0].0).collect();
    assert!(
        gaps.iter()
            .all(|g| (1_000_000_000..1_400_000_000).contains(g)),
        "{gaps:?}"
    );
}

/// A capture that ends while packets wait for a next hop that never
/// answers: the replay runs its clock on as a router left alone would (an
/// ARP request a second, three in all, then `no_neighbour`), rather than
/// ending with them held.
#[test]
fn held_packets_at_the_end_of_a_replay_are_given_up() {
    let dir = scratch("l3-end");
    let pcap = dir.join("held.pcap");
    let mut w = CaptureWriter::create(&pcap, LinkType::Ethernet, 65535).unwrap();
    // One packet routed to the static neighbour, then two for the default
    // route, the last frames of the capture.
    let frames = [
        routed_frame(ROUTER_MAC, [10, 9, 0, 1], 64),
        routed_frame(ROUTER_MAC, [192, 0, 2, 1], 64),
        routed_frame(ROUTER_MAC, [192, 0, 2, 2], 64),
    ];
    for (i, f) in frames.iter().enumerate() {
        w.write(1_000_000_000 + i as u64 * 1_000_000, f.len() as u32, f)
            .unwrap();
    }
    w.finish().unwrap();
    let out = dir.join("out");
    let report = run(&pcap, &l3_router(), &out);
    let r = &report.router;
    assert_eq!(r.pipeline.received, 3);
    assert_eq!(r.pipeline.forwarded, 1);
    assert_eq!(r.pipeline.held, 0, "{:?}", r.pipeline);
    assert_eq!(r.pipeline.drops.get("no_neighbour"), Some(&2));
    let f = r.forward.expect("the forwarding stage's counters");
    assert_eq!((f.forwarded, f.arp_requests), (1, 3));
    let c = records(&out.join("r-c.pcap"));
    assert_eq!(c.len(), 3, "three ARP requests for 10.3.0.254");
    assert!(c.iter().all(|(_, _, d)| d[12..14] == [0x08, 0x06]));
    let gaps: Vec<u64> = c.windows(2).map(|w| w[1].0 - w[0].0).collect();
    assert!(gaps.iter().all(|&g| g == 1_000_000_000), "{gaps:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `input` through the built-in router with `workers` workers, unpinned;
/// every copy accounted for.
fn on_default_router(input: &Input, workers: usize) -> Report {
    let cfg = ReplayConfig {
        pin: false,
        workers,
        ..ReplayConfig::new(traffic_gen::replay::default_router())
    };
    let r = replay(input, &cfg, None).unwrap();
    assert!(r.router.is_consistent(), "{:?}", r.router);
    r
}

/// The built-in router's shaped port.
fn r_b(r: &Report) -> &dataplane::runtime::stats::InterfaceReport {
    r.router
        .interfaces
        .iter()
        .find(|i| i.port.name == "r-b")
        .expect("the built-in router has r-b")
}

/// The workers of a replay share a shaped port's queue, as the live
/// router's do. Taking turns at it chunk by chunk in capture order
/// (`replay::Turns`), two or three of them offer it the same traffic one
/// worker does, and the built-in router's shaped port `r-b` sends as much
/// as in a one-worker run. (Workers left to run apart at top speed on busy
/// cores drifted hundreds of milliseconds of capture time apart, the late
/// one's copies reached the queue in bursts, and `r-b` sent about 60% of
/// what one worker's run sends.)
#[test]
fn workers_share_a_shaped_port_as_one_worker_does() {
    use traffic_gen::synth::router::RouterSynthConfig;
    let input = Input::Synth(RouterSynthConfig {
        packets: 100_000,
        ..RouterSynthConfig::default()
    });
    let sent = |workers: usize| {
        let r = on_default_router(&input, workers);
        assert_eq!(r.router.pipeline.received, 100_000);
        // Turns taken, and said so, only where there is more than one.
        assert_eq!(r.turns.is_some(), workers > 1, "{:?}", r.turns);
        r_b(&r).port.counters.sent
    };
    let one = sent(1) as f64;
    for workers in [2, 3] {
        let n = sent(workers) as f64;
        assert!(
            (n - one).abs() <= 0.02 * one,
            "{workers} workers: r-b sent {n} copies, one worker {one}"
        );
    }
}

/// A capture whose last 10 ms belong to one flow (so to one worker) while
/// the built-in router's shaped port `r-b` is full: a worker whose input
/// ends first leaves the shared queue to the others, whose arrivals are
/// still to come, and the last one drains it. The frames are all 1000
/// bytes, so no copy can wait longer than the 1000 (`limit`) of them take
/// at 20 Mbit/s, 400 ms (the longest wait here, with any number of
/// workers), and `r-b` sends what one worker's run sends. Drained by the
/// first worker to end, to the end of time, the queue took the late
/// worker's arrivals behind a shaper already past them: copies waited
/// 400.7 to 423 ms (six runs), and on a Zipf capture two workers sent up
/// to 1.8 times one worker's copies. That depends on which worker ends
/// first on the wall clock, so each worker count runs four times.
#[test]
fn the_last_worker_to_end_drains_the_shared_queue() {
    let dir = scratch("last-drains");
    let pcap = dir.join("tail.pcap");
    let mut w = CaptureWriter::create(&pcap, LinkType::Ethernet, 65535).unwrap();
    let start = 1_000_000_000u64;
    for i in 0..40_000u64 {
        let flow = if i < 30_000 { (i % 64) as u32 } else { 7 };
        let f = traffic_gen::synth::frame(flow, 1000);
        w.write(start + i * 1_000, 1000, &f).unwrap();
    }
    drop(w);
    let input = Input::Files(vec![pcap]);
    // 1000 frames of 1000 bytes at 20 Mbit/s (the built-in r-b).
    let bound_ns = 1000 * 1000 * 8 * 1_000_000_000 / 20_000_000;
    let sent = |workers: usize| {
        let r = on_default_router(&input, workers);
        let rb = r_b(&r);
        let c = &rb.port.counters;
        assert!(c.sent > 1000, "{workers} workers: r-b sent {}", c.sent);
        assert_eq!(rb.port.backlog_packets, 0, "{workers} workers");
        assert!(
            c.sojourn_max_ns <= bound_ns,
            "{workers} workers: a copy waited {} ns, more than {bound_ns} ns",
            c.sojourn_max_ns
        );
        c.sent
    };
    let one = sent(1) as f64;
    for workers in [2, 2, 2, 2, 3, 3, 3, 3] {
        let n = sent(workers) as f64;
        assert!(
            (n - one).abs() <= 0.1 * one,
            "{workers} workers: r-b sent {n} copies, one worker {one}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
