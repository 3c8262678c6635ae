//! The `traffic-gen` binary end to end: synth writes a pcap and its truth,
//! replay reads it back and writes the JSON and .hgrm reports; bad input
//! fails with the file named and a non-zero exit code.

use std::path::PathBuf;
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_traffic-gen"))
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("traffic-gen-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn synth_then_replay_with_reports() {
    let d = scratch("ok");
    let pcap = d.join("zipf.pcap");
    let out = bin()
        .args([
            "synth",
            "--flows",
            "2000",
            "--packets",
            "50000",
            "--seed",
            "3",
            "-o",
        ])
        .arg(&pcap)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let truth: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("zipf.pcap.truth.json")).unwrap()).unwrap();
    assert_eq!(truth["packets"], 50000);

    let (json, hgrm) = (d.join("r.json"), d.join("r.hgrm"));
    let out = bin()
        .args(["replay", "--workers", "2", "--loop", "2", "--json"])
        .arg(&json)
        .arg("--hgrm")
        .arg(&hgrm)
        .arg(&pcap)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("p99.9"), "{stdout}");
    assert!(stdout.contains("heavy flows"), "{stdout}");
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(report["router"]["pipeline"]["received"], 100000);
    assert_eq!(report["router"]["latency"]["processing"]["count"], 100000);
    for what in ["processing", "sojourn", "through"] {
        let path = d.join(format!("r-{what}.hgrm"));
        let hgrm = std::fs::read_to_string(&path).unwrap();
        assert!(
            hgrm.contains("Percentile") && hgrm.contains("#[Max"),
            "{}: {hgrm}",
            path.display()
        );
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn replay_without_files_uses_synthetic_workload() {
    let out = bin()
        .args(["replay", "--packets", "20000", "--flows", "500"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("replayed 20000 packets"), "{stdout}");
}

#[test]
fn errors_name_the_file_and_exit_non_zero() {
    let d = scratch("bad");
    let bad = d.join("not-a-capture.pcap");
    std::fs::write(&bad, b"hello, this is not a pcap file at all").unwrap();
    for path in [bad.clone(), d.join("missing.pcap")] {
        let out = bin().arg("replay").arg(&path).output().unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&path.display().to_string()), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let _ = std::fs::remove_dir_all(&d);
}
