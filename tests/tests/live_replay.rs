//! `traffic-gen replay --tx/--rx` end to end through the live router in the
//! network-namespace lab (`scripts/lab.sh`).
//!
//! Needs root and `ip netns`; otherwise it prints why and passes as skipped.
//! It builds the `dataplane` and `traffic-gen` binaries (a cargo no-op when
//! they are fresh; `BLOOMPLANE_BIN_DIR` points at prebuilt ones instead),
//! brings the lab up under a prefix of its own, runs the router in the
//! router namespace, writes a pcap of UDP frames A -> B (with some frames
//! repeated byte for byte, to exercise matching of identical packets), and
//! replays it from A's namespace at a fixed rate while capturing in B's.
//! It checks that every frame was sent, every sent frame is accounted for
//! (received + lost = sent) and none was lost or reordered by the
//! one-worker router, that the `.hgrm` file has the standard layout and
//! that the JSON report's percentiles are ordered. Then a replay
//! interrupted by SIGINT exits 130 with tcpreplay's Actual/Rated lines and
//! a JSON report of what was sent, and a capture cut in the middle is sent
//! up to the cut (exit 2, the cut in `input_errors`).
//!
//! Every step is bounded by a timeout, and a guard kills the router and
//! takes the lab down whatever happens.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

#[path = "../../dataplane/tests/lab_common/mod.rs"]
mod lab_common;

use dataplane::io::capture::CaptureWriter;
use dataplane::wire::LinkType;
use dataplane::wire::build::{self, IpHeader, PROTO_UDP};
use lab_common::{Lab, binaries, run_bounded, skip_reason, workspace};

/// Frames in the pcap (including the repeats).
const FRAMES: usize = 4000;
/// Every this many frames, one is sent twice, identically.
const REPEAT_EVERY: usize = 400;
const PPS: u32 = 20_000;
const MAC_A: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 0x0a];
const MAC_B: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 0x0b];
const IP_A: [u8; 4] = [10, 77, 0, 1];
const IP_B: [u8; 4] = [10, 77, 0, 2];

/// A UDP datagram A -> B in an Ethernet frame, numbered `seq`, with a
/// payload of `len` bytes (at least 4), valid IPv4 header checksum.
fn frame(seq: u32, len: usize) -> Vec<u8> {
    frame_to(seq, len, MAC_B, IP_B)
}

/// [`frame`] to `dst` at `dst_mac`.
fn frame_to(seq: u32, len: usize, dst_mac: [u8; 6], dst: [u8; 4]) -> Vec<u8> {
    let ip = IpHeader {
        ident: seq as u16,
        dont_fragment: true,
        ..IpHeader::v4(IP_A, dst, PROTO_UDP)
    };
    let mut payload = seq.to_be_bytes().to_vec();
    payload.extend((4..len).map(|i| (i as u8) ^ (seq as u8)));
    // To the discard port, no UDP checksum.
    build::udp_frame(dst_mac, MAC_A, &ip, 40000, 9, &payload)
}

fn write_pcap(path: &Path) -> usize {
    let mut w = CaptureWriter::create(path, LinkType::Ethernet, 65_535).expect("create pcap");
    let mut n = 0;
    let mut seq = 0u32;
    while n < FRAMES {
        let f = frame(seq, 18 + (seq as usize * 7) % 200);
        let copies = if (seq as usize).is_multiple_of(REPEAT_EVERY) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            if n < FRAMES {
                let ts = 1_700_000_000_000_000_000 + n as u64 * 10_000;
                w.write(ts, f.len() as u32, &f).expect("write pcap");
                n += 1;
            }
        }
        seq += 1;
    }
    w.finish().expect("finish pcap");
    n
}

#[test]
fn live_replay_through_the_router() {
    if let Some(why) = skip_reason() {
        let _ = writeln!(
            std::io::stderr(),
            "live_replay_through_the_router: skipped: {why}"
        );
        return;
    }
    let t0 = Instant::now();
    let bins = binaries();
    let (router_bin, tg_bin) = (bins.join("dataplane"), bins.join("traffic-gen"));
    assert!(router_bin.is_file(), "{} missing", router_bin.display());
    assert!(tg_bin.is_file(), "{} missing", tg_bin.display());

    let mut lab = Lab::up(
        format!("bplr{}", std::process::id() % 100_000),
        "live-replay",
    );
    let dir = lab.dir.clone();

    let config = dir.join("router.toml");
    std::fs::write(
        &config,
        r#"
[workers]
count = 1

[[interfaces]]
name = "r-a"
[[interfaces]]
name = "r-b"
[[interfaces]]
name = "r-c"

[[wires]]
from = "r-a"
to = "r-b"
bidirectional = true
"#,
    )
    .unwrap();
    let router_err = dir.join("router.err");
    lab.start_router(&router_bin, &config, &[], &router_err);

    let pcap = dir.join("a-to-b.pcap");
    let frames = write_pcap(&pcap) as u64;
    let (hgrm, json) = (dir.join("latency.hgrm"), dir.join("report.json"));
    let (hlog, svg) = (dir.join("latency.hlog"), dir.join("latency.svg"));
    let out = run_bounded(
        Command::new(&tg_bin)
            .arg("replay")
            .args(["--tx", "eth0", "--tx-netns", &lab.ns("a")])
            .args(["--rx", "eth0", "--rx-netns", &lab.ns("b")])
            .args(["--pps", &PPS.to_string()])
            .arg("--hgrm")
            .arg(&hgrm)
            .arg("--hlog")
            .arg(&hlog)
            .arg("--plot")
            .arg(&svg)
            .arg("--json")
            .arg(&json)
            .arg(&pcap),
        Duration::from_secs(60),
        "traffic-gen replay --tx",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "traffic-gen failed ({}):\n{stdout}{stderr}",
        out.status
    );
    eprintln!("{stdout}");
    assert!(
        stdout.contains(&format!("Actual: {frames} packets")),
        "{stdout}"
    );
    assert!(stdout.contains("Rated: "), "{stdout}");

    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("JSON report written"))
            .expect("JSON report parses");
    let u = |v: &serde_json::Value| v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"));
    let sent = u(&r["sent"]);
    let rx = &r["rx"];
    let (received, lost) = (u(&rx["received"]), u(&rx["lost"]));
    assert_eq!(sent, frames, "{r}");
    assert_eq!(u(&r["tx_stats"]["failed"]), 0, "{r}");
    assert_eq!(received + lost, sent, "{r}");
    // 20 kpps through one router worker on veths is far below what it
    // forwards (see the notes on live speed), and the receive buffers
    // hold seconds of it: nothing may be lost.
    assert_eq!(lost, 0, "{r}");
    // One worker keeps the order of one flow.
    assert_eq!(u(&rx["reordered"]), 0, "{r}");
    let l = &rx["latency"];
    let us = |k: &str| l[k].as_f64().unwrap_or_else(|| panic!("{k}: {l}"));
    let (p50, p99, max) = (us("p50_us"), us("p99_us"), us("max_us"));
    assert_eq!(u(&l["count"]), received, "{r}");
    assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{l}");

    let h = std::fs::read_to_string(&hgrm).expect("hgrm written");
    let first = h.lines().next().unwrap_or_default();
    assert_eq!(
        first.split_whitespace().collect::<Vec<_>>(),
        ["Value", "Percentile", "TotalCount", "1/(1-Percentile)"],
        "{h}"
    );
    assert!(h.contains("#[Mean    = "), "{h}");
    // The interval log: a start time and at least one interval line.
    let log = std::fs::read_to_string(&hlog).expect("hlog written");
    assert!(log.contains("#[StartTime: "), "{log}");
    assert!(
        log.lines()
            .any(|l| !l.starts_with('#') && !l.starts_with('"') && l.contains(",HIST")),
        "{log}"
    );
    let svg = std::fs::read_to_string(&svg).expect("plot written");
    assert!(svg.contains("send to receive"), "plot");
    assert!(
        h.contains(&format!("Total count    = {received:>12}]")),
        "{h}"
    );

    // SIGINT (coreutils' timeout) two seconds into a 20-second replay.
    let json = dir.join("interrupted.json");
    let out = run_bounded(
        Command::new("timeout")
            .args(["--preserve-status", "-s", "INT", "2"])
            .arg(&tg_bin)
            .arg("replay")
            .args(["--tx", "eth0", "--tx-netns", &lab.ns("a")])
            .args(["--rx", "eth0", "--rx-netns", &lab.ns("b")])
            .args(["--pps", &PPS.to_string(), "--loop", "100"])
            .arg("--json")
            .arg(&json)
            .arg(&pcap),
        Duration::from_secs(60),
        "traffic-gen replay --tx, interrupted",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stdout}{stderr}");
    for line in ["Actual: ", "Rated: ", "interrupted: stopped after"] {
        assert!(stdout.contains(line), "{line}: {stdout}");
    }
    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("JSON report written"))
            .expect("JSON report parses");
    let sent = u(&r["sent"]);
    assert_eq!(r["interrupted"], true, "{r}");
    assert!(0 < sent && sent < 100 * frames, "{r}");
    let rx = &r["rx"];
    assert_eq!(u(&rx["received"]) + u(&rx["lost"]), sent, "{r}");
    assert_eq!(
        u(&rx["lost"]),
        0,
        "the receiver's grace covers an interrupt: {r}"
    );

    // A capture cut in the middle of a record: sent up to the cut.
    let bytes = std::fs::read(&pcap).unwrap();
    let cut = dir.join("cut.pcap");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let json = dir.join("cut.json");
    let out = run_bounded(
        Command::new(&tg_bin)
            .arg("replay")
            .args(["--tx", "eth0", "--tx-netns", &lab.ns("a")])
            .args(["--pps", &PPS.to_string()])
            .arg("--json")
            .arg(&json)
            .arg(&cut),
        Duration::from_secs(60),
        "traffic-gen replay --tx, cut capture",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    assert!(stderr.contains("cut.pcap: byte "), "{stderr}");
    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("JSON report written"))
            .expect("JSON report parses");
    let errs = r["input_errors"].as_array().expect("input_errors");
    assert_eq!(errs.len(), 1, "{r}");
    let before = u(&errs[0]["packets_read"]);
    assert!(0 < before && before < frames, "{r}");
    assert_eq!(u(&r["sent"]), before, "{r}");
    assert!(
        stdout.contains(&format!("Actual: {before} packets")),
        "{stdout}"
    );

    drop(lab);
    eprintln!("live_replay_through_the_router: ok in {:?}", t0.elapsed());
}

/// The router of the comparison: every stage that decides per packet on,
/// Icarus as a core node 42 (no edge), one heavy-flow epoch, a static
/// group behind r-b.
const COMPARE_ROUTER: &str = r#"
[workers]
count = 1

[[interfaces]]
name = "r-a"
[[interfaces]]
name = "r-b"
multicast_groups = ["239.1.1.1"]
[[interfaces]]
name = "r-c"

[[wires]]
from = "r-a"
to = "r-b"
bidirectional = true

[multicast]
seed = 3

[heavy]
threshold = { packets = 100 }
seed = 3

[icarus]
node_id = 42
"#;

/// A capture sent from A: Icarus-carrying packets on paths through other
/// nodes of the domain (10% on a loop through node 42), unicast A -> B in
/// 40 flows of which 5 are heavy (150 packets each, the other 35 about 21),
/// multicast to the static group and to a group nobody joined (both
/// heavy). 50 us apart.
fn write_mixed(path: &Path) -> u64 {
    use traffic_gen::synth::icarus::{IcarusSynth, IcarusSynthConfig};
    let mut w = CaptureWriter::create(path, LinkType::Ethernet, 65_535).expect("create pcap");
    let mut icarus = IcarusSynth::new(IcarusSynthConfig {
        node_id: 42,
        packets: 1500,
        seed: 5,
        ..IcarusSynthConfig::default()
    })
    .unwrap();
    let mut n = 0u64;
    let mut put = |w: &mut CaptureWriter, f: &[u8]| {
        let ts = 1_700_000_000_000_000_000 + n * 50_000;
        w.write(ts, f.len() as u32, f).expect("write pcap");
        n += 1;
    };
    let mut seq = 0u32;
    for i in 0..4500u32 {
        match i % 3 {
            0 => {
                if let Some(p) = icarus.next().unwrap() {
                    let f = p.frame.to_vec();
                    put(&mut w, &f);
                }
            }
            1 => {
                // Flows 0..5 get half the packets: heavy at 100 packets.
                let flow = if i % 6 == 1 {
                    (i / 6) % 5
                } else {
                    5 + (i / 6) % 35
                };
                let mut f = frame(seq, 64);
                f[34..36].copy_from_slice(&(41000 + flow as u16).to_be_bytes());
                put(&mut w, &f);
                seq += 1;
            }
            _ => {
                let g = if i % 4 == 2 {
                    [239, 9, 9, 9]
                } else {
                    [239, 1, 1, 1]
                };
                let mac = [0x01, 0x00, 0x5e, g[1] & 0x7f, g[2], g[3]];
                put(&mut w, &frame_to(seq, 64, mac, g));
                seq += 1;
            }
        }
    }
    w.finish().expect("finish pcap");
    n
}

/// One capture through the live router in the lab (sent from A) and
/// through `traffic-gen replay --config` with the same router: the same
/// Icarus verdicts, multicast forwarding and heavy flows.
#[test]
fn live_router_and_replay_agree() {
    if let Some(why) = skip_reason() {
        let _ = writeln!(
            std::io::stderr(),
            "live_router_and_replay_agree: skipped: {why}"
        );
        return;
    }
    let bins = binaries();
    let (router_bin, tg_bin) = (bins.join("dataplane"), bins.join("traffic-gen"));
    let mut lab = Lab::up(format!("bplc{}", std::process::id() % 100_000), "compare");
    let dir = lab.dir.clone();
    let pcap = dir.join("mixed.pcap");
    let frames = write_mixed(&pcap);
    let heavy_live = dir.join("heavy.jsonl");
    let (err, report) = lab.start_router_with(
        &router_bin,
        "router",
        COMPARE_ROUTER,
        &[
            std::ffi::OsStr::new("--heavy-report"),
            heavy_live.as_os_str(),
        ],
    );
    let out = run_bounded(
        Command::new(&tg_bin)
            .arg("replay")
            .args(["--tx", "eth0", "--tx-netns", &lab.ns("a")])
            .args(["--pps", &PPS.to_string()])
            .arg(&pcap),
        Duration::from_secs(60),
        "traffic-gen replay --tx",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::thread::sleep(Duration::from_millis(300));
    let (_, live, _) = lab.stop_router(&err, &report, Duration::from_secs(10));
    let live = &live["total"];

    let json = dir.join("replay.json");
    let out = run_bounded(
        Command::new(&tg_bin)
            .arg("replay")
            .arg("--config")
            .arg(dir.join("router.toml"))
            .arg("--no-pin")
            .arg("--json")
            .arg(&json)
            .arg(&pcap),
        Duration::from_secs(60),
        "traffic-gen replay --config",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let replay: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let offline = &replay["router"];

    let u = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    // Every frame of the capture reached the live router (its counts may
    // hold a few more: what A's own stack sent meanwhile).
    assert!(u(&live["pipeline"]["received"]) >= frames, "{live}");
    assert_eq!(u(&offline["pipeline"]["received"]), frames);
    for k in [
        "loops_detected",
        "marked_hops",
        "width_mismatch",
        "bad_option",
    ] {
        assert_eq!(live["icarus"][k], offline["icarus"][k], "icarus {k}");
    }
    assert!(u(&offline["icarus"]["loops_detected"]) > 0);
    for k in ["data_packets", "forwarded", "copies", "suppressed"] {
        assert_eq!(
            live["multicast"][k], offline["multicast"][k],
            "multicast {k}"
        );
    }
    assert!(u(&offline["multicast"]["suppressed"]) > 0);
    let live_heavy: std::collections::BTreeSet<String> = std::fs::read_to_string(&heavy_live)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["flow"].as_str().map(str::to_string))
        .collect();
    let offline_heavy: std::collections::BTreeSet<String> = replay["heavy"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| e["flows"].as_array().unwrap().iter())
        .filter_map(|f| f["flow"].as_str().map(str::to_string))
        .collect();
    assert_eq!(live_heavy.len(), 7, "{live_heavy:?}");
    assert_eq!(live_heavy, offline_heavy);
    drop(lab);
}

/// Public captures (`../shared/pcaps`) of the kinds a router must survive:
/// VLAN and QinQ stacks, fragments, malformed and truncated headers,
/// IGMP, SSDP multicast, mixed traffic.
const PUBLIC_CAPTURES: &[&str] = &[
    "pcpp_VlanPackets.pcap",
    "pcpp_ipv4-malformed.pcap",
    "pcpp_ip-frag.pcap",
    "pcpp_IgmpPackets.pcap",
    "zeek_vlan-qinqinq.pcap",
    "zeek_ip4-trunc.pcap",
    "tcpdump_802.1ad_QinQ.pcap",
    "tcpdump_udp-length-heapoverflow.pcap",
    "cesnet_ssdp.pcap",
    "cesnet_mixed.pcap",
];

/// The same public captures sent from A through the live router once on
/// each port backend: each reads every frame A sent, byte for byte (VLAN
/// tags included), and the ring backend's counters are pnet's (every
/// pipeline count and drop reason, multicast, Icarus, what left r-b).
/// The hosts' IPv6 is off for the test, so no host chatter (router
/// solicitations, MLD reports) lands in one run and not the other.
#[test]
fn ring_and_pnet_forward_public_captures_alike() {
    let name = "ring_and_pnet_forward_public_captures_alike";
    if let Some(why) = skip_reason().or_else(lab_common::ring_refused) {
        let _ = writeln!(std::io::stderr(), "{name}: skipped: {why}");
        return;
    }
    let pcaps = workspace().join("../shared/pcaps");
    if !pcaps.is_dir() {
        let _ = writeln!(
            std::io::stderr(),
            "{name}: skipped: {} not found (the shared captures are not in a user's clone)",
            pcaps.display()
        );
        return;
    }
    let files: Vec<PathBuf> = PUBLIC_CAPTURES.iter().map(|f| pcaps.join(f)).collect();
    let bins = binaries();
    let (router_bin, tg_bin) = (bins.join("dataplane"), bins.join("traffic-gen"));
    let mut lab = Lab::up(format!("bplp{}", std::process::id() % 100_000), "public");
    for h in ["a", "b", "c"] {
        let out = lab_common::run_bounded(
            Command::new("ip").args([
                "netns",
                "exec",
                &lab.ns(h),
                "sysctl",
                "-qw",
                "net.ipv6.conf.all.disable_ipv6=1",
            ]),
            Duration::from_secs(10),
            "sysctl",
        );
        assert!(out.status.success(), "{out:?}");
    }
    let mut totals = Vec::new();
    for backend in ["pnet", "ring"] {
        let config = format!("{COMPARE_ROUTER}\n[io]\nbackend = \"{backend}\"\n");
        let (err, report) = lab.start_router_with(&router_bin, backend, &config, &[]);
        let json = lab.dir.join(format!("{backend}-tx.json"));
        let out = run_bounded(
            Command::new(&tg_bin)
                .arg("replay")
                .args(["--tx", "eth0", "--tx-netns", &lab.ns("a")])
                .args(["--pps", "5000"])
                .arg("--json")
                .arg(&json)
                .args(&files),
            Duration::from_secs(120),
            "traffic-gen replay --tx",
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(300));
        let (_, r, _) = lab.stop_router(&err, &report, Duration::from_secs(10));
        let tx: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&json).expect("traffic-gen JSON")).unwrap();
        // Every frame A sent reached the router, and nothing else did.
        let sent = tx["sent"].as_u64().unwrap_or(0);
        assert_eq!(
            r["total"]["pipeline"]["received"].as_u64(),
            Some(sent),
            "{backend}: {}",
            r["total"]["pipeline"]
        );
        // ... byte for byte: VLAN tags the kernel takes out are put back.
        assert_eq!(
            lab_common::interface(&r["total"], "r-a")["rx_bytes"].as_u64(),
            tx["bytes"].as_u64(),
            "{backend}: bytes A sent against bytes r-a read"
        );
        totals.push(r["total"].clone());
    }
    let (pnet, ring) = (&totals[0], &totals[1]);
    let u = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    eprintln!("{name}: pnet pipeline {}", pnet["pipeline"]);
    eprintln!("{name}: ring pipeline {}", ring["pipeline"]);
    assert!(u(&pnet["pipeline"]["received"]) > 3000, "{pnet}");
    // `publishes` counts how often learned memberships were published to
    // the data path: once per batch that changed them, so it depends on
    // where batches end (timing), not on what was forwarded.
    let without_publishes = |t: &serde_json::Value| {
        let mut m = t["multicast"].clone();
        if let Some(o) = m.as_object_mut() {
            o.remove("publishes");
        }
        m
    };
    assert_eq!(
        without_publishes(pnet),
        without_publishes(ring),
        "multicast"
    );
    for section in ["pipeline", "icarus"] {
        assert_eq!(pnet[section], ring[section], "{section}");
    }
    let port = |t: &serde_json::Value, name: &str| {
        let i = lab_common::interface(t, name);
        (
            u(&i["rx_packets"]),
            u(&i["rx_bytes"]),
            u(&i["sent"]),
            u(&i["sent_bytes"]),
        )
    };
    for name in ["r-a", "r-b", "r-c"] {
        assert_eq!(port(pnet, name), port(ring, name), "{name}");
    }
    drop(lab);
}
