//! `traffic-gen replay --io` and `traffic-gen throughput` end to end
//! through the live router in the network-namespace lab (`scripts/lab.sh`),
//! with the router on each of its backends (`[io] backend = "pnet"`, then
//! `"ring"`, then `"xdp"`) and traffic-gen on the same one (on ring for
//! the xdp router). The xdp part is skipped, with the reason printed, where
//! the kernel refuses AF_XDP or the XDP program.
//!
//! Needs root and `ip netns`; otherwise it prints why and passes as
//! skipped. The ring half is skipped, with the reason printed, where the
//! kernel refuses a packet ring ([`dataplane::io::ring::probe`]). Per
//! backend it starts the router (a wire r-a <-> r-b), replays a capture of
//! unique frames from A to B at a modest rate and checks that every frame
//! was sent, received and matched (none lost, none dropped by the
//! receiver's kernel), then runs a short `throughput` search (64-byte
//! frames, 1 s trials, at most 20,000 pps) and checks that its table and
//! JSON are well formed and the rate it found is above 0 and at most the
//! bound. On the ring backend the replay runs again with two sender
//! threads (`--tx-threads 2`, each sending every other frame), and the
//! search uses two, each rate tried twice (`--repeat 2`): still every
//! frame sent exactly once and matched. The
//! router's final report must show every frame received.
//!
//! Every step is bounded by a timeout, and a guard kills the router and
//! takes the lab down whatever happens.

use std::io::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

#[path = "../../dataplane/tests/lab_common/mod.rs"]
mod lab_common;

use dataplane::io::capture::CaptureWriter;
use dataplane::wire::LinkType;
use lab_common::{Lab, backend_refused, binaries, run_bounded, skip_reason};
use traffic_gen::synth::{UniqueConfig, UniqueFrames};

const PPS: u32 = 10_000;
const MAX_PPS: u32 = 20_000;

fn router_config(backend: &str) -> String {
    format!(
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

[io]
backend = "{backend}"
"#
    )
}

/// 2000 unique 64-byte frames, then 1000 unique 1000-byte ones, 10 us apart.
fn write_pcap(path: &Path) -> u64 {
    let mut w = CaptureWriter::create(path, LinkType::Ethernet, 65_535).expect("create pcap");
    let mut n = 0u64;
    for (size, packets) in [(64u16, 2000u64), (1000, 1000)] {
        let mut s = UniqueFrames::new(UniqueConfig {
            size,
            flows: 64,
            packets,
        })
        .unwrap();
        while let Some((_, f)) = s.next() {
            let ts = 1_700_000_000_000_000_000 + n * 10_000;
            w.write(ts, f.len() as u32, f).expect("write pcap");
            n += 1;
        }
    }
    w.finish().expect("finish pcap");
    n
}

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// `replay --io IO --tx-threads THREADS` of `pcap` from A to B: every
/// frame sent once, received and matched.
fn check_replay(tg: &Path, lab: &Lab, io: &str, threads: u32, pcap: &Path, frames: u64) {
    let json = lab.dir.join(format!("replay-{io}-{threads}.json"));
    let out = run_bounded(
        Command::new(tg)
            .arg("replay")
            .args(["--tx", "eth0", "--tx-netns", &lab.ns("a")])
            .args(["--rx", "eth0", "--rx-netns", &lab.ns("b")])
            .args(["--io", io, "--pps", &PPS.to_string(), "--preload"])
            .args(["--tx-threads", &threads.to_string()])
            .arg("--json")
            .arg(&json)
            .arg(pcap),
        Duration::from_secs(30),
        "traffic-gen replay --io",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "replay --io {io} failed ({}):\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{stdout}");
    assert!(
        stdout.contains(&format!("Kernel drops at the receiver ({io}): 0")),
        "{stdout}"
    );
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(r["io"], io, "{r}");
    let rx = &r["rx"];
    assert_eq!(u(&r["sent"]), frames, "{r}");
    assert_eq!(u(&r["tx_stats"]["failed"]), 0, "{r}");
    assert_eq!(u(&rx["received"]), frames, "{r}");
    assert_eq!(u(&rx["lost"]), 0, "{r}");
    assert_eq!(u(&rx["kernel_dropped"]), 0, "{r}");
    if threads == 1 {
        // Two senders interleave their frames as the scheduler lets them.
        assert_eq!(u(&rx["reordered"]), 0, "one worker keeps the order: {r}");
    }
    let l = &rx["latency"];
    assert_eq!(u(&l["count"]), frames, "{r}");
    let us = |k: &str| l[k].as_f64().unwrap_or_else(|| panic!("{k}: {l}"));
    assert!(0.0 < us("p50_us") && us("p50_us") <= us("p99_us"), "{l}");
}

/// A short `throughput --io IO --tx-threads THREADS --repeat REPEAT`
/// search: a well-formed table and JSON, a rate in (0, MAX_PPS].
fn check_throughput(tg: &Path, lab: &Lab, io: &str, threads: u32, repeat: u32) {
    let json = lab.dir.join(format!("throughput-{io}.json"));
    let out = run_bounded(
        Command::new(tg)
            .arg("throughput")
            .args(["--tx", "eth0", "--tx-netns", &lab.ns("a")])
            .args(["--rx", "eth0", "--rx-netns", &lab.ns("b")])
            .args(["--io", io, "--size", "64", "--duration", "1s"])
            .args(["--tx-threads", &threads.to_string()])
            .args(["--repeat", &repeat.to_string()])
            .args(["--max-pps", &MAX_PPS.to_string()])
            // A loaded 2-core machine may lose a frame now and then; the
            // test is about the search's plumbing, not the rate.
            .args(["--loss", "0.01", "--max-trials", "4", "--pause", "100ms"])
            .arg("--json")
            .arg(&json),
        Duration::from_secs(60),
        "traffic-gen throughput",
    );
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "throughput --io {io} failed ({}):\n{stdout}{stderr}",
        out.status
    );
    eprintln!("{stderr}{stdout}");
    assert!(stdout.contains(&format!("io {io}")), "{stdout}");
    assert!(
        stdout.contains("| frame B | zero-loss pps | Mbit/s |"),
        "{stdout}"
    );
    let row = stdout
        .lines()
        .find(|l| l.starts_with("| 64 |"))
        .unwrap_or_else(|| panic!("no 64-byte row:\n{stdout}"));
    assert_eq!(row.matches('|').count(), 11, "{row}");
    assert!(stderr.contains("throughput 64 B: trial 1"), "{stderr}");

    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(r["io"], io, "{r}");
    assert_eq!(u(&r["tx_threads"]), u64::from(threads), "{r}");
    assert_eq!(u(&r["repeat"]), u64::from(repeat), "{r}");
    let res = &r["results"][0];
    assert_eq!(u(&res["size"]), 64, "{r}");
    assert_eq!(res["upper_from"], "max_pps", "{r}");
    let trials = res["trials"].as_array().expect("trials");
    assert!(
        !trials.is_empty() && trials.len() <= 4 * repeat as usize,
        "{r}"
    );
    for t in trials {
        assert_eq!(u(&t["offered"]), u(&t["received"]) + u(&t["lost"]), "{t}");
        assert!(t["verdict"].is_string(), "{t}");
    }
    let z = &res["zero_loss"];
    let rate = f(&z["offered_pps"]);
    assert!(rate > 0.0 && rate <= f64::from(MAX_PPS), "{r}");
    assert_eq!(z["verdict"], "pass", "{r}");
    assert!(f(&z["loss"]) <= 0.01, "{r}");
    let h = &res["half_rate"];
    assert!((f(&h["offered_pps"]) - rate / 2.0).abs() < 1e-6, "{r}");
    assert!(u(&h["received"]) > 0, "{r}");
}

#[test]
fn ring_and_pnet_replay_and_throughput_through_the_router() {
    let name = "ring_and_pnet_replay_and_throughput_through_the_router";
    if let Some(why) = skip_reason() {
        let _ = writeln!(std::io::stderr(), "{name}: skipped: {why}");
        return;
    }
    let t0 = Instant::now();
    let bins = binaries();
    let (router_bin, tg_bin) = (bins.join("dataplane"), bins.join("traffic-gen"));
    assert!(router_bin.is_file(), "{} missing", router_bin.display());
    assert!(tg_bin.is_file(), "{} missing", tg_bin.display());

    let mut lab = Lab::up(
        format!("bplt{}", std::process::id() % 100_000),
        "throughput",
    );
    let pcap = lab.dir.join("unique.pcap");
    let frames = write_pcap(&pcap);
    // (the router's backend, traffic-gen's).
    for (backend, io) in [("pnet", "pnet"), ("ring", "ring"), ("xdp", "ring")] {
        if let Some(why) = backend_refused(backend).or_else(|| backend_refused(io)) {
            let _ = writeln!(std::io::stderr(), "{name}: {backend} part skipped: {why}");
            continue;
        }
        let (err, report) = lab.start_router_with(
            &router_bin,
            &format!("router-{backend}"),
            &router_config(backend),
            &[],
        );
        check_replay(&tg_bin, &lab, io, 1, &pcap, frames);
        // Two senders, each with every other frame of the capture (and of
        // the search's stream): still every frame exactly once.
        let threads = if io == "ring" { 2 } else { 1 };
        if threads > 1 {
            check_replay(&tg_bin, &lab, io, threads, &pcap, frames);
        }
        // And each rate tried twice on the ring (`--repeat 2`).
        check_throughput(&tg_bin, &lab, io, threads, threads);
        let (_, fin, _) = lab.stop_router(&err, &report, Duration::from_secs(10));
        // Every replayed frame reached the router (its count may hold a
        // few more: what A's own stack sent meanwhile).
        assert!(
            u(&fin["total"]["pipeline"]["received"]) >= frames,
            "{}",
            fin["total"]
        );
    }
    drop(lab);
    eprintln!("{name}: ok in {:?}", t0.elapsed());
}
