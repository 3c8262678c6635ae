//! Replay end to end across the crates: a synthetic workload written by
//! traffic-gen's synth, replayed through the embedded dataplane by several
//! workers, checked against the workload's ground truth; and a real capture
//! replayed with the counters balancing.

use std::collections::HashSet;

use dataplane::config::RouterConfig;
use traffic_gen::replay::{Input, Playback, ReplayConfig, replay};

/// Two ports, one wire, heavy flows at 0.1% of the bytes over one epoch:
/// the router the heavy-flow truth is judged on (no Icarus edge, which
/// would add bytes to every packet).
const HEAVY_ONLY: &str = r#"
[[interfaces]]
name = "in"
[[interfaces]]
name = "out"
[[wires]]
from = "in"
to = "out"
[heavy]
threshold = { share = 0.001 }
"#;
use traffic_gen::synth::{SynthConfig, write_pcap};

#[test]
fn synthetic_pcap_heavy_flows_match_ground_truth() {
    let dir = std::env::temp_dir().join(format!("bloomplane-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("zipf.pcap");
    let truth = write_pcap(
        SynthConfig {
            flows: 20_000,
            packets: 300_000,
            zipf_s: 1.1,
            size: None,
            seed: 42,
            unique: false,
        },
        &pcap,
    )
    .unwrap();
    let router = RouterConfig::from_toml_str(HEAVY_ONLY, "heavy-only").unwrap();
    let cfg = ReplayConfig {
        workers: 2,
        pin: false,
        ..ReplayConfig::new(router)
    };
    let report = replay(&Input::Files(vec![pcap.clone()]), &cfg, None).unwrap();
    let c = &report.router.pipeline;
    assert_eq!(c.received, truth.packets);
    assert_eq!(c.received, c.forwarded + c.dropped);
    assert!(report.router.is_consistent());
    assert_eq!(report.heavy.len(), 1);
    assert_eq!(report.heavy[0].bytes, truth.bytes);
    let want: HashSet<&str> = truth.heavy(0.001).map(|f| f.flow.as_str()).collect();
    let got: HashSet<&str> = report.heavy[0]
        .flows
        .iter()
        .map(|f| f.flow.as_str())
        .collect();
    assert!(!want.is_empty());
    assert!(want.is_subset(&got), "missed {:?}", want.difference(&got));
    let extra = got.difference(&want).count();
    assert!(
        extra * 100 <= got.len(),
        "{extra} false positives of {}",
        got.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn real_capture_replays_and_balances() {
    let Some(path) = tests::corpus_file("pcpp_tls2.pcap") else {
        return;
    };
    let report = replay(
        &Input::Files(vec![path]),
        &ReplayConfig {
            workers: 2,
            pin: false,
            play: Playback {
                loops: 2,
                ..Playback::default()
            },
            ..ReplayConfig::default()
        },
        None,
    )
    .unwrap();
    let c = &report.router.pipeline;
    assert_eq!(c.received, 2 * 7451);
    assert!(report.router.is_consistent(), "{:?}", report.router);
    assert_eq!(report.router.latency.processing.count, 2 * 7451);
    assert!(!report.heavy[0].flows.is_empty());
}
