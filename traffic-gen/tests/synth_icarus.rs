//! `synth --kind icarus` end to end: the pcap replayed through an
//! `IcarusStage` of the checking node gives exactly the verdicts of the
//! truth file, every looping packet is caught, the false alarms agree with
//! the Markov chain, every checksum is right (computed here independently),
//! and the binary writes the files, replays them, and names the option in
//! its errors.

use std::path::{Path, PathBuf};
use std::process::Command;

use dataplane::io::capture::CaptureReader;
use dataplane::pipeline::{Batch, DropReason, Pipeline, PipelineConfig, Verdict};
use dataplane::stage::icarus::{FilterParams, IcarusConfig, IcarusStage};
use dataplane::wire::icarus::FilterWidth;
use traffic_gen::synth::icarus::{
    HopRange, IcarusSynthConfig, IcarusTruth, L3_OFFSET, truth_path, write_pcap,
};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("traffic-gen-icarus-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// One's-complement sum of big-endian 16-bit words (RFC 1071), unfolded.
fn ones(data: &[u8]) -> u64 {
    data.chunks(2)
        .map(|c| u64::from(c[0]) << 8 | u64::from(*c.get(1).unwrap_or(&0)))
        .sum()
}

fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// Checks the IPv4 header checksum and the UDP checksum of an Ethernet
/// frame (IPv6: through a hop-by-hop header if there is one), from the raw
/// bytes alone.
fn check_checksums(f: &[u8]) -> Result<(), String> {
    let ip = &f[L3_OFFSET..];
    let (pseudo, udp) = match ip[0] >> 4 {
        4 => {
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            if fold(ones(&ip[..ihl])) != 0xffff {
                return Err("IPv4 header checksum".into());
            }
            let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
            if total != ip.len() || ip[9] != 17 {
                return Err(format!("IPv4 total length {total}, {} bytes", ip.len()));
            }
            let udp = &ip[ihl..total];
            (ones(&ip[12..20]) + 17 + udp.len() as u64, udp)
        }
        6 => {
            let payload = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
            if payload + 40 != ip.len() {
                return Err(format!("IPv6 payload length {payload}, {} bytes", ip.len()));
            }
            let (mut next, mut at) = (ip[6], 40);
            if next == 0 {
                next = ip[at];
                at += (usize::from(ip[at + 1]) + 1) * 8;
            }
            if next != 17 {
                return Err(format!("IPv6 next header {next}"));
            }
            let udp = &ip[at..];
            (ones(&ip[8..40]) + 17 + udp.len() as u64, udp)
        }
        v => return Err(format!("IP version {v}")),
    };
    if usize::from(u16::from_be_bytes([udp[4], udp[5]])) != udp.len() {
        return Err("UDP length".into());
    }
    if udp[6..8] == [0, 0] || fold(pseudo + ones(udp)) != 0xffff {
        return Err("UDP checksum".into());
    }
    Ok(())
}

/// What a replay of the file through the checking node found.
#[derive(Debug, Default)]
struct Replayed {
    packets: u64,
    detected: u64,
    missed_loops: u64,
    false_alarms: u64,
    loops_detected_counter: u64,
}

/// Writes the workload, reads the truth back from its file, and replays
/// the pcap through a pipeline holding the checking node's `IcarusStage`,
/// comparing every packet's verdict with the truth.
fn replay_through_stage(cfg: IcarusSynthConfig, dir: &Path) -> (IcarusTruth, Replayed) {
    let pcap = dir.join("icarus.pcap");
    let written = write_pcap(cfg, &pcap).unwrap();
    let truth: IcarusTruth =
        serde_json::from_slice(&std::fs::read(truth_path(&pcap)).unwrap()).unwrap();
    // Floats may differ in the last bit through JSON; everything else is exact.
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * a.abs().max(1.0);
    assert!(close(truth.markov.sigma, written.markov.sigma));
    assert!(
        truth
            .markov
            .per_hops
            .iter()
            .zip(&written.markov.per_hops)
            .all(|(a, b)| a.0 == b.0 && close(a.1, b.1))
    );
    let mut back = truth.clone();
    back.markov = written.markov.clone();
    assert!(
        back == written,
        "the truth file differs from what was written"
    );
    assert_eq!(truth.packets, cfg.packets);
    assert_eq!(truth.detected.len() as u64, cfg.packets);

    let params = FilterParams::from_bits(truth.m, truth.k)
        .unwrap()
        .with_seed(truth.domain_seed);
    let mut node = IcarusConfig::new(truth.node_id);
    node.params = params;
    let mut pipeline = Pipeline::new(PipelineConfig::default()).with_stage(IcarusStage::new(node));
    let mut reader = CaptureReader::open(&pcap).unwrap();
    let mut batch = Batch::new();
    let mut r = Replayed::default();
    loop {
        batch.clear();
        let n = reader.fill_batch(&mut batch).unwrap();
        if n == 0 {
            break;
        }
        for p in batch.packets() {
            check_checksums(p.data()).unwrap_or_else(|e| panic!("packet {}: {e}", r.packets));
        }
        let now = batch.latest_ts().unwrap();
        pipeline.process(&mut batch, now);
        for p in batch.packets() {
            let i = r.packets as usize;
            let dropped = match p.verdict {
                Verdict::Drop(DropReason::Loop) => true,
                Verdict::Forward(_) | Verdict::Mark(_) => false,
                v => panic!("packet {i}: unexpected verdict {v:?}"),
            };
            assert_eq!(dropped, truth.detected[i], "packet {i}");
            if !dropped {
                // The node ORed its mask in: the checksums still hold.
                check_checksums(p.data()).unwrap_or_else(|e| panic!("packet {i} after: {e}"));
            }
            r.detected += u64::from(dropped);
            r.missed_loops += u64::from(truth.looping[i] && !dropped);
            r.false_alarms += u64::from(!truth.looping[i] && dropped);
            r.packets += 1;
        }
    }
    let c = pipeline.counters();
    assert_eq!(c.received, cfg.packets);
    assert_eq!(c.malformed.total(), 0);
    assert!(c.is_consistent());
    let s = pipeline.stage::<IcarusStage>().unwrap().counters();
    assert_eq!(s.seen(), cfg.packets, "{s:?}");
    assert_eq!(s.loops_detected + s.marked_hops, cfg.packets, "{s:?}");
    r.loops_detected_counter = s.loops_detected;
    (truth, r)
}

#[test]
fn stage_verdicts_match_the_truth_and_the_markov_chain() {
    let d = scratch("stage");
    let base = IcarusSynthConfig {
        packets: 20_000,
        ..IcarusSynthConfig::default()
    };
    let rows = [
        // The defaults: m = 128, k = 10, 1..=10 hops; few false alarms.
        base,
        // Many false alarms: m = 64, k = 5 over up to 15 hops.
        IcarusSynthConfig {
            width: FilterWidth::M64,
            hops: HopRange { min: 0, max: 15 },
            loop_fraction: 0.2,
            v6_fraction: 0.5,
            node_id: 77,
            seed: 2,
            ..base
        },
        // m = 256 (the IPv4 option fills 36 of 40 bytes), another k and
        // domain seed, long paths.
        IcarusSynthConfig {
            width: FilterWidth::M256,
            k: Some(8),
            domain_seed: 12345,
            hops: HopRange { min: 10, max: 40 },
            node_id: 0xdead_beef_0000_0001,
            seed: 3,
            ..base
        },
    ];
    for cfg in rows {
        let (t, r) = replay_through_stage(cfg, &d);
        let free = t.loop_free_packets();
        let mk = &t.markov;
        let q = mk.mix_probability;
        let binomial_sigma = (free as f64 * q * (1.0 - q)).sqrt();
        eprintln!(
            "m = {}, k = {}, hops {}..={}: {} looping, {} loop-free, false alarms {} \
             (expected {:.1} +- {:.1}; mix {:.4}% -> {:.1} +- {:.1})",
            t.m,
            t.k,
            t.hops_min,
            t.hops_max,
            t.looping_packets,
            free,
            r.false_alarms,
            mk.expected_false_alarms,
            mk.sigma,
            100.0 * q,
            q * free as f64,
            binomial_sigma
        );
        // Exact: every verdict (checked per packet above) and the totals.
        assert_eq!(r.packets, t.packets);
        assert_eq!(r.missed_loops, 0);
        assert_eq!(r.false_alarms, t.false_alarms);
        assert_eq!(r.detected, t.looping_packets + t.false_alarms);
        assert_eq!(r.loops_detected_counter, t.expected_loops_detected);
        assert!(t.looping_packets > 0);
        // Statistical: the false alarms against the chain, 4 sigma (plus
        // one packet of slack for the nearly-zero rows).
        let diff = (r.false_alarms as f64 - mk.expected_false_alarms).abs();
        assert!(diff <= 4.0 * mk.sigma + 1.0, "{diff} vs sigma {}", mk.sigma);
        let diff = (r.false_alarms as f64 - q * free as f64).abs();
        assert!(
            diff <= 4.0 * binomial_sigma + 1.0,
            "{diff} vs {binomial_sigma}"
        );
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// With many false alarms the statistical check has teeth: the m = 64 row
/// above expects hundreds; this one asserts so, so the check above cannot
/// pass vacuously.
#[test]
fn the_false_alarm_row_has_power() {
    let d = scratch("power");
    let (t, r) = replay_through_stage(
        IcarusSynthConfig {
            width: FilterWidth::M64,
            hops: HopRange { min: 0, max: 15 },
            packets: 20_000,
            ..IcarusSynthConfig::default()
        },
        &d,
    );
    assert!(t.markov.expected_false_alarms > 200.0, "{:?}", t.markov);
    assert!(r.false_alarms > 100);
    let _ = std::fs::remove_dir_all(&d);
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_traffic-gen"))
}

#[test]
fn cli_writes_the_files_and_replay_reads_them() {
    let d = scratch("cli");
    let pcap = d.join("loops.pcap");
    let out = bin()
        .args([
            "synth",
            "--kind",
            "icarus",
            "--packets",
            "5000",
            "--width",
            "64",
            "--hops",
            "0..12",
            "--loop-fraction",
            "0.25",
            "--v6-fraction",
            "0.5",
            "--node-id",
            "9",
            "--seed",
            "4",
            "-o",
        ])
        .arg(&pcap)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("wrote 5000 packets"), "{stdout}");
    assert!(stdout.contains("m = 64, k = 5"), "{stdout}");
    assert!(stdout.contains("hops 0..=11"), "{stdout}");
    assert!(stdout.contains("Markov chain"), "{stdout}");
    let truth: IcarusTruth =
        serde_json::from_slice(&std::fs::read(truth_path(&pcap)).unwrap()).unwrap();
    assert_eq!((truth.packets, truth.node_id, truth.m), (5000, 9, 64));
    assert!(stdout.contains(&format!(
        "loops_detected = {}",
        truth.expected_loops_detected
    )));

    // The built-in router's Icarus stage uses 128-bit filters: these 64-bit
    // ones pass as width mismatches. Every packet is read and none is
    // malformed.
    let json = d.join("r.json");
    let out = bin()
        .args(["replay", "--json"])
        .arg(&json)
        .arg(&pcap)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(report["router"]["pipeline"]["received"], 5000, "{report}");
    assert_eq!(
        report["router"]["icarus"]["width_mismatch"], 5000,
        "{report}"
    );
    let malformed = &report["router"]["pipeline"]["malformed"];
    assert!(
        malformed.as_object().is_none_or(|m| m.is_empty()),
        "{malformed}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn cli_errors_name_the_option() {
    let d = scratch("errors");
    let pcap = d.join("never.pcap");
    let cases: [(&[&str], &[&str]); 7] = [
        (&["--width", "100"], &["--width", "64, 128 or 256"]),
        (&["--k", "0"], &["--k", "1..=32"]),
        (&["--width", "64", "--k", "40"], &["--k", "--width 64"]),
        (&["--hops", "0..=80"], &["--hops", "at most 64"]),
        (&["--hops", "5..2"], &["--hops"]),
        (&["--loop-fraction", "1.5"], &["--loop-fraction", "[0, 1]"]),
        (
            &["--width", "64", "--k", "1", "--hops", "64"],
            &["--hops 64", "use at most"],
        ),
    ];
    for (args, want) in cases {
        let out = bin()
            .args(["synth", "--kind", "icarus", "--packets", "10", "-o"])
            .arg(&pcap)
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        for w in want {
            assert!(err.contains(w), "{args:?}: {err}");
        }
        assert!(!err.contains("panicked"), "{err}");
        assert!(!pcap.exists(), "{args:?} left a file");
    }
    let _ = std::fs::remove_dir_all(&d);
}
