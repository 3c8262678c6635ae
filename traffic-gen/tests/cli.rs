//! The `traffic-gen` binary end to end: synth writes a pcap and its truth,
//! replay reads it back and writes the JSON and .hgrm reports; bad input
//! fails with the file named and a non-zero exit code.

use std::io::Write as _;
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

/// Runs `cmd`, asserts that it succeeded (its stderr in the message) and
/// returns its stdout.
fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn synth_then_replay_with_reports() {
    let d = scratch("ok");
    let pcap = d.join("zipf.pcap");
    run_ok(
        bin()
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
            .arg(&pcap),
    );
    let truth: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("zipf.pcap.truth.json")).unwrap()).unwrap();
    assert_eq!(truth["packets"], 50000);

    let (json, hgrm) = (d.join("r.json"), d.join("r.hgrm"));
    let stdout = run_ok(
        bin()
            .args(["replay", "--workers", "2", "--loop", "2", "--json"])
            .arg(&json)
            .arg("--hgrm")
            .arg(&hgrm)
            .arg(&pcap),
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
    let stdout = run_ok(bin().args(["replay", "--packets", "20000", "--flows", "500"]));
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

/// Every output file a run writes gets its `wrote FILE` line, after the
/// summary, and nothing else does: `--write`'s captures, `--hgrm`'s three
/// distributions, `--json`, `--plot`, `--heavy-jsonl`; `scenario sfb`
/// likewise.
#[test]
fn wrote_lines_name_every_output_file() {
    let d = scratch("wrote");
    let stdout = run_ok(bin().current_dir(&d).args([
        "replay",
        "--limit",
        "3000",
        "--json",
        "r.json",
        "--plot",
        "r.svg",
        "--heavy-jsonl",
        "h.jsonl",
        "--hgrm",
        "l.hgrm",
        "--write",
        "out",
    ]));
    let wrote: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("wrote "))
        .collect();
    assert_eq!(
        wrote,
        [
            "out/r-a.pcap",
            "out/r-b.pcap",
            "out/r-c.pcap",
            "l-processing.hgrm",
            "l-sojourn.hgrm",
            "l-through.hgrm",
            "r.json",
            "r.svg",
            "h.jsonl",
        ],
        "{stdout}"
    );
    for f in &wrote {
        assert!(d.join(f).is_file(), "{f}");
    }
    let stdout = run_ok(bin().current_dir(&d).args([
        "scenario",
        "sfb",
        "--aimd",
        "4",
        "--rate-mbps",
        "10",
        "--duration",
        "2s",
        "--json",
        "s.json",
        "--plot",
        "s.svg",
        "--hgrm",
        "s.hgrm",
    ]));
    let wrote: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("wrote "))
        .collect();
    assert_eq!(
        wrote,
        [
            "s-sfb-aimd4.hgrm",
            "s-droptail-aimd4.hgrm",
            "s.svg",
            "s.json"
        ],
        "{stdout}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

/// The shared corpus of public captures, if this checkout has it.
fn shared_pcaps() -> Option<PathBuf> {
    let d = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/pcaps"));
    d.is_dir().then_some(d)
}

fn json(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// A synthetic pcap of `packets` 100-byte frames: 24 header bytes, then 116
/// per record.
fn fixed_pcap(d: &std::path::Path, name: &str, packets: u32) -> PathBuf {
    let p = d.join(name);
    run_ok(
        bin()
            .args(["synth", "--flows", "20", "--size", "100", "--packets"])
            .arg(packets.to_string())
            .arg("-o")
            .arg(&p),
    );
    p
}

#[test]
fn a_public_capture_cut_short_is_replayed_up_to_the_cut() {
    let Some(pcaps) = shared_pcaps() else {
        let _ = writeln!(std::io::stderr(), "skipping: ../shared/pcaps is absent");
        return;
    };
    let d = scratch("cut-public");
    // As `head -c 100000 pcpp_tls2.pcap > cut.pcap`.
    let bytes = std::fs::read(pcaps.join("pcpp_tls2.pcap")).unwrap();
    let cut = d.join("cut.pcap");
    std::fs::write(&cut, &bytes[..100_000]).unwrap();
    let report = d.join("r.json");
    let out = bin()
        .args(["replay", "--no-pin", "--json"])
        .arg(&report)
        .arg(&cut)
        .arg(pcaps.join("pcpp_DnsPackets.pcap"))
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let warning = format!("warning: {}: byte ", cut.display());
    assert!(stderr.contains(&warning), "{stderr}");
    assert!(stderr.contains("cut short"), "{stderr}");
    assert!(stdout.contains("replayed "), "{stdout}");
    let r = json(&report);
    let errs = r["input_errors"].as_array().unwrap();
    assert_eq!(errs.len(), 1, "{r}");
    assert_eq!(errs[0]["file"], cut.display().to_string());
    let (offset, before) = (
        errs[0]["offset"].as_u64().unwrap(),
        errs[0]["packets_read"].as_u64().unwrap(),
    );
    assert!(offset > 24 && offset < 100_000, "{offset}");
    assert!(before > 0);
    // The next file was replayed whole after the cut one.
    let p = &r["router"]["pipeline"];
    let received = p["received"].as_u64().unwrap();
    assert!(received > before, "{r}");
    assert_eq!(
        received,
        p["forwarded"].as_u64().unwrap()
            + p["consumed"].as_u64().unwrap_or(0)
            + p["dropped"].as_u64().unwrap()
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn defects_in_synthetic_files_are_listed_and_the_rest_replayed() {
    let d = scratch("defects");
    let whole = fixed_pcap(&d, "whole.pcap", 30);
    let bytes = std::fs::read(&whole).unwrap();
    // Record 4's captured length is bogus.
    let bogus = d.join("bogus.pcap");
    let mut b = bytes.clone();
    b[24 + 4 * 116 + 8..24 + 4 * 116 + 12].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
    std::fs::write(&bogus, &b).unwrap();
    // A gzip member, then garbage.
    let gz = d.join("trailing.pcap.gz");
    let status = Command::new("gzip")
        .arg("-k")
        .arg("-c")
        .arg(&whole)
        .stdout(std::fs::File::create(&gz).unwrap())
        .status();
    let gzip = status.is_ok_and(|s| s.success());
    if gzip {
        let mut f = std::fs::OpenOptions::new().append(true).open(&gz).unwrap();
        std::io::Write::write_all(&mut f, b"this is not a gzip member").unwrap();
    } else {
        eprintln!("gzip not found: the trailing-garbage case is left out");
    }
    let report = d.join("r.json");
    let mut cmd = bin();
    cmd.args(["replay", "--no-pin", "--json"])
        .arg(&report)
        .arg(&bogus)
        .arg(&whole);
    if gzip {
        cmd.arg(&gz);
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let r = json(&report);
    let errs = r["input_errors"].as_array().unwrap();
    assert_eq!(errs.len(), 1 + usize::from(gzip), "{r}");
    assert_eq!(errs[0]["file"], bogus.display().to_string());
    assert_eq!(errs[0]["offset"], 24 + 4 * 116 + 8);
    assert_eq!(errs[0]["packets_read"], 4);
    if gzip {
        // The whole member is read; the garbage is where it ends.
        assert_eq!(errs[1]["file"], gz.display().to_string());
        assert_eq!(errs[1]["offset"], bytes.len());
        assert_eq!(errs[1]["packets_read"], 30);
    }
    let want = 4 + 30 + if gzip { 30 } else { 0 };
    assert_eq!(r["packets"], want);
    assert_eq!(r["router"]["pipeline"]["received"], want);
    assert_eq!(r["interrupted"], false);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_bad_header_fails_before_any_work_even_among_good_files() {
    let d = scratch("header");
    let good = fixed_pcap(&d, "good.pcap", 5);
    let bad = d.join("bad.pcap");
    std::fs::write(&bad, [0xd4, 0xc3, 0xb2, 0xa1, 9, 0]).unwrap();
    // A previous run's results, and outputs this run would make.
    let json = d.join("r.json");
    std::fs::write(&json, "{\"previous\": true}").unwrap();
    let (jsonl, hgrm) = (d.join("h.jsonl"), d.join("l.hgrm"));
    let out = bin()
        .args(["replay", "--no-pin", "--json"])
        .arg(&json)
        .arg("--heavy-jsonl")
        .arg(&jsonl)
        .arg("--hgrm")
        .arg(&hgrm)
        .arg(&good)
        .arg(&bad)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&bad.display().to_string()), "{stderr}");
    assert!(out.stdout.is_empty(), "nothing was replayed");
    // The failed run leaves the previous results as they were, and no
    // empty files.
    assert_eq!(
        std::fs::read_to_string(&json).unwrap(),
        "{\"previous\": true}"
    );
    assert!(!jsonl.exists());
    assert!(!d.join("l-processing.hgrm").exists());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn bad_output_paths_fail_at_once_naming_flag_and_path() {
    let d = scratch("paths");
    let good = fixed_pcap(&d, "good.pcap", 5);
    let missing = d.join("no-such-dir");
    let file_as_dir = good.join("x");
    let cases: [(&str, Vec<std::ffi::OsString>, PathBuf); 5] = [
        (
            "--json",
            vec![
                "replay".into(),
                "--json".into(),
                missing.join("r.json").into(),
            ],
            missing.join("r.json"),
        ),
        (
            "--hgrm",
            vec![
                "replay".into(),
                "--hgrm".into(),
                missing.join("l.hgrm").into(),
            ],
            missing.join("l-processing.hgrm"),
        ),
        (
            "--heavy-jsonl",
            vec![
                "replay".into(),
                "--heavy-jsonl".into(),
                missing.join("h.jsonl").into(),
            ],
            missing.join("h.jsonl"),
        ),
        (
            "--write",
            vec![
                "replay".into(),
                "--write".into(),
                file_as_dir.clone().into(),
            ],
            file_as_dir.clone(),
        ),
        (
            "--output",
            vec!["synth".into(), "-o".into(), missing.join("s.pcap").into()],
            missing.join("s.pcap"),
        ),
    ];
    for (flag, args, path) in cases {
        let mut cmd = bin();
        cmd.args(&args);
        if args[0] == "replay" {
            // A slow replay: a path checked only at the end would hang here.
            cmd.args(["--no-pin", "--pps", "1"]).arg(&good);
        }
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{flag}: {stderr}");
        let named = format!("{flag} {}", path.display());
        assert!(
            stderr.contains(&named),
            "{flag}: want {named:?} in {stderr}"
        );
        assert!(out.stdout.is_empty(), "{flag}: nothing was replayed");
    }
    assert!(!missing.exists());
    let _ = std::fs::remove_dir_all(&d);
}

/// Runs `replay ARGS` (slow enough to last minutes; ARGS include
/// `--write out`), sends `signals` back to back once the output paths
/// exist and some packets went in, and returns the exit status, standard
/// output and the JSON report.
fn interrupted_replay(
    name: &str,
    signals: &[libc::c_int],
    args: &[&str],
) -> (std::process::ExitStatus, String, serde_json::Value, PathBuf) {
    let d = scratch(name);
    let report = d.join("r.json");
    let mut child = bin()
        .args(["replay", "--no-pin", "--pps", "2000", "--json"])
        .arg(&report)
        .args(args)
        .current_dir(&d)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The report file is created just before the signal handlers are
    // installed and the replay starts; packets went in once `--write`'s
    // captures hold more than their headers (the writers flush every few
    // KiB). Waiting for that, not for a fixed time, keeps a slow start (a
    // debug build on a loaded machine) from being signalled before its
    // first packet.
    let start = std::time::Instant::now();
    let limit = std::time::Duration::from_secs(60);
    while !report.exists() && start.elapsed() < limit {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let written = || -> u64 {
        std::fs::read_dir(d.join("out"))
            .map(|it| {
                it.filter_map(Result::ok)
                    .filter_map(|e| e.metadata().ok())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0)
    };
    while written() < 16 << 10 && start.elapsed() < limit {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::thread::sleep(std::time::Duration::from_millis(100));
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    for &signal in signals {
        // SAFETY: kill(2) with the id of a child this test started and has
        // not reaped yet, so the id cannot name another process.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    }
    // 200,000 packets at 2,000 pps would take 100 s; a stop takes far less.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("replay did not stop on signals {signals:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(report.exists(), "{stderr}");
    let text = std::fs::read(&report).unwrap();
    let r = serde_json::from_slice(&text)
        .unwrap_or_else(|e| panic!("{e}: {}: {stderr}", String::from_utf8_lossy(&text)));
    (status, stdout, r, d)
}

fn assert_consistent_and_partial(r: &serde_json::Value) {
    assert_eq!(r["interrupted"], true, "{r}");
    let p = &r["router"]["pipeline"];
    let received = p["received"].as_u64().unwrap();
    assert!(received > 0, "{r}");
    assert!(received < 200_000, "{r}");
    assert_eq!(r["packets"].as_u64(), Some(received));
    assert_eq!(
        received,
        p["forwarded"].as_u64().unwrap()
            + p["consumed"].as_u64().unwrap_or(0)
            + p["dropped"].as_u64().unwrap(),
        "{p}"
    );
}

#[test]
fn sigint_stops_the_replay_and_writes_every_output() {
    let (status, stdout, r, d) = interrupted_replay(
        "sigint",
        &[libc::SIGINT],
        &[
            "--hgrm",
            "l.hgrm",
            "--heavy-jsonl",
            "h.jsonl",
            "--write",
            "out",
        ],
    );
    assert_eq!(status.code(), Some(130), "{stdout}");
    assert!(stdout.contains("interrupted: stopped after"), "{stdout}");
    assert!(stdout.contains("pipeline received"), "{stdout}");
    assert_consistent_and_partial(&r);
    for what in ["processing", "sojourn", "through"] {
        let h = std::fs::read_to_string(d.join(format!("l-{what}.hgrm"))).unwrap();
        assert!(h.contains("#[Max"), "{what}: {h}");
    }
    assert!(d.join("h.jsonl").exists());
    // What left each port is in --write's captures.
    let sent: u64 = r["router"]["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["sent"].as_u64().unwrap())
        .sum();
    let written: u64 = ["r-a", "r-b", "r-c"]
        .iter()
        .map(|n| {
            let (recs, fault) =
                dataplane::io::capture::read_all(d.join("out").join(format!("{n}.pcap")));
            assert!(fault.is_none(), "{n}: {fault:?}");
            recs.len() as u64
        })
        .sum();
    assert_eq!(written, sent);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn sigterm_stops_the_replay_of_files_too() {
    let d = scratch("sigterm-input");
    let pcap = fixed_pcap(&d, "long.pcap", 200_000);
    let (status, stdout, r, d2) = interrupted_replay(
        "sigterm",
        &[libc::SIGTERM],
        &["--write", "out", pcap.to_str().unwrap()],
    );
    assert_eq!(status.code(), Some(130), "{stdout}");
    assert_consistent_and_partial(&r);
    assert_eq!(r["input_errors"].as_array().map(Vec::len), Some(0));
    let _ = std::fs::remove_dir_all(&d);
    let _ = std::fs::remove_dir_all(&d2);
}

#[test]
fn one_request_delivered_twice_still_writes_the_report() {
    // As timeout(1) does: the command, then its process group.
    let (status, stdout, r, d) = interrupted_replay(
        "sigint-twice",
        &[libc::SIGINT, libc::SIGINT],
        &["--write", "out"],
    );
    assert_eq!(status.code(), Some(130), "{stdout}");
    assert!(stdout.contains("interrupted: stopped after"), "{stdout}");
    assert_consistent_and_partial(&r);
    let _ = std::fs::remove_dir_all(&d);
}

/// tcpreplay's and tcpdump's flags: `-c`/`--limit` on captures (across
/// `-l` passes and files), `-r` and `-` (standard input, gzip too), the
/// synthetic workload's flags refused with files, negative numbers
/// answered by clap naming the flag.
#[test]
fn limit_read_stdin_and_flag_errors() {
    let d = scratch("flags");
    let a = fixed_pcap(&d, "a.pcap", 300);
    let b = fixed_pcap(&d, "b.pcap", 300);
    let j = d.join("r.json");
    // -c 500 over two files of 300 and two passes: 500 packets.
    let stdout = run_ok(
        bin()
            .args(["replay", "-l", "2", "-c", "500", "--json"])
            .arg(&j)
            .arg("-r")
            .arg(&a)
            .arg(&b),
    );
    assert!(
        stdout.contains("--limit reached: stopped after 500 packets"),
        "{stdout}"
    );
    let r = json(&j);
    assert_eq!(r["packets"], 500);
    assert_eq!(r["router"]["pipeline"]["received"], 500);
    assert_eq!(r["limit_reached"], "packets");
    assert_eq!(r["inputs"][0], a.display().to_string(), "-r comes first");
    // Standard input, gzipped, as `tcpdump -r -`.
    let gz = d.join("a.pcap.gz");
    let mut enc = flate2::write::GzEncoder::new(
        std::fs::File::create(&gz).unwrap(),
        flate2::Compression::fast(),
    );
    std::io::copy(&mut std::fs::File::open(&a).unwrap(), &mut enc).unwrap();
    enc.finish().unwrap();
    run_ok(
        bin()
            .args(["replay", "--json"])
            .arg(&j)
            .arg("-")
            .stdin(std::fs::File::open(&gz).unwrap()),
    );
    let r = json(&j);
    assert_eq!(r["packets"], 300);
    assert_eq!(r["inputs"][0], "-");
    assert!(r["limit_reached"].is_null());
    // The synthetic workload's flags do not apply to captures.
    let out = bin()
        .args(["replay", "--packets", "10", "--zipf-s", "1.2"])
        .arg(&a)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "a usage error");
    assert!(
        stderr.contains("--packets, --zipf-s: only for the synthetic workload"),
        "{stderr}"
    );
    // Negative and zero values: clap's error, naming the flag.
    for (args, want) in [
        (["--pps", "-1"], "invalid value '-1' for '--pps <N>'"),
        (["-x", "0"], "invalid value '0' for '--multiplier <X>'"),
        (["-c", "-5"], "invalid value '-5' for '--limit <N>'"),
    ] {
        let out = bin().arg("replay").args(args).arg(&a).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// Exit status 64 is a usage error, and only that: clap's (an unknown
/// flag, with its hint; a value out of range) and the program's own
/// (flags that exclude each other); 2 stays "completed with input
/// errors". `--help` of the program and of `replay` carry the table, and
/// the guide's table has the same statuses.
#[test]
fn usage_errors_have_their_own_exit_status() {
    let d = scratch("usage");
    let a = fixed_pcap(&d, "a.pcap", 100);
    for (args, want) in [
        (
            vec!["replay", "--confg", "x.toml"],
            "tip: a similar argument exists: '--config'",
        ),
        (
            vec!["replay", "--pps", "0"],
            "invalid value '0' for '--pps <N>'",
        ),
        (
            vec!["replay", "--io", "ring"],
            "--io applies to live replay (--tx)",
        ),
        (
            vec!["replay", "-v", "--workers", "2"],
            "--verbose prints the packets in order",
        ),
        (
            vec!["replay", "--workers", "0"],
            "--workers must be at least 1",
        ),
        (
            vec!["throughput", "--tx", "a", "--rx", "b", "--loss", "2"],
            "--loss is a fraction",
        ),
        (vec!["bogus"], "unrecognized subcommand 'bogus'"),
    ] {
        let mut cmd = bin();
        cmd.args(&args);
        if args[0] == "replay" {
            cmd.arg(&a);
        }
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing was run");
    }
    // The input errors' own status.
    let cut = d.join("cut.pcap");
    std::fs::write(&cut, &std::fs::read(&a).unwrap()[..1000]).unwrap();
    let out = bin().arg("replay").arg(&cut).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    // Help and version exit 0; help carries the table.
    let guide =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/guide.md")).unwrap();
    for args in [vec!["--help"], vec!["replay", "--help"]] {
        let out = bin().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        let help = String::from_utf8_lossy(&out.stdout);
        for status in ["0", "1", "2", "64", "130", "141"] {
            assert!(
                help.lines()
                    .any(|l| l.trim_start().starts_with(&format!("{status} "))),
                "{args:?}: no {status} in {help}"
            );
            assert!(
                guide.contains(&format!("| {status} |")),
                "the guide's table lacks {status}"
            );
        }
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// `--duration` stops a paced replay on the wall clock.
#[test]
fn duration_stops_a_paced_replay() {
    let d = scratch("duration");
    let a = fixed_pcap(&d, "a.pcap", 1000);
    let j = d.join("r.json");
    run_ok(
        bin()
            .args(["replay", "--pps", "2000", "--duration", "200ms", "--json"])
            .arg(&j)
            .arg(&a),
    );
    let r = json(&j);
    assert_eq!(r["limit_reached"], "duration");
    let sent = r["packets"].as_u64().unwrap();
    // 2000 pps for 0.2 s: about 400 of the 1000, never all.
    assert!((1..1000).contains(&sent), "{sent}");
    assert_eq!(r["router"]["pipeline"]["received"], sent);
    std::fs::remove_dir_all(&d).unwrap();
}

/// A rate the replay cannot reach is warned about, as tcpreplay's
/// statistics show it: 200,000 packets asked at 10 Mpps (a 20 ms
/// schedule) through the whole router, which runs at about 1 Mpps.
#[test]
fn an_unreached_rate_is_warned_about() {
    let d = scratch("rate");
    let j = d.join("r.json");
    let stdout = run_ok(
        bin()
            .args(["replay", "--pps", "10000000", "--json"])
            .arg(&j),
    );
    assert!(
        stdout.contains("warning: the requested rate (10000000 pps) was not reached"),
        "{stdout}"
    );
    let r = json(&j)["rate_reached"].as_f64().unwrap();
    assert!(r > 0.0 && r < 0.95, "{r}");
    std::fs::remove_dir_all(&d).unwrap();
}

/// `--filter` sends what `tcpdump -r FILE EXPR` prints: the same count on
/// public captures (VLAN stacks, IPv6, DNS) and a synthetic one, for
/// several expressions; an expression libpcap refuses fails at once with
/// its message. Skipped with a printed reason without tcpdump or libpcap.
#[test]
fn filter_sends_what_tcpdump_matches() {
    use std::io::Write as _;
    let Ok(v) = Command::new("tcpdump").arg("--version").output() else {
        let _ = writeln!(std::io::stderr(), "skipping: tcpdump is not installed");
        return;
    };
    assert!(v.status.success());
    let d = scratch("filter");
    let mut inputs = vec![fixed_pcap(&d, "zipf.pcap", 500)];
    if let Some(p) = shared_pcaps() {
        for f in [
            "cesnet_mixed.pcap",
            "pcpp_VlanPackets.pcap",
            "zeek_ipv6-fragmented-dns.pcap",
            "pcpp_DnsPackets.pcap",
            "pcpp_many-protocols.pcap",
        ] {
            inputs.push(p.join(f));
        }
    } else {
        let _ = writeln!(
            std::io::stderr(),
            "public captures skipped: ../shared/pcaps is absent"
        );
    }
    let j = d.join("r.json");
    let mut compared = 0;
    for input in &inputs {
        for expr in [
            "udp and port 53",
            "tcp",
            "vlan",
            "ip6",
            "icmp or icmp6",
            "net 10.0.0.0/8",
            "greater 1000",
        ] {
            let td = Command::new("tcpdump")
                .args(["-nn", "--count", "-r"])
                .arg(input)
                .arg(expr)
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&td.stdout);
            let want: u64 = text
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| {
                    panic!(
                        "tcpdump --count: {text:?} {}",
                        String::from_utf8_lossy(&td.stderr)
                    )
                });
            let out = bin()
                .args(["replay", "--filter", expr, "--json"])
                .arg(&j)
                .arg(input)
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            if out.status.code() == Some(1) && stderr.contains("needs libpcap") {
                let _ = writeln!(std::io::stderr(), "skipping: {stderr}");
                return;
            }
            assert!(
                out.status.success(),
                "{}: {expr}: {stderr}",
                input.display()
            );
            let r = json(&j);
            assert_eq!(r["packets"], want, "{} '{expr}'", input.display());
            assert_eq!(r["filter"], expr);
            compared += 1;
        }
    }
    assert!(compared >= 7);
    let out = bin()
        .args(["replay", "--filter", "udp and prot 53"])
        .arg(&inputs[0])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("--filter 'udp and prot 53': "), "{stderr}");
    std::fs::remove_dir_all(&d).unwrap();
}

/// `-v` prints a line per packet with its verdict, as many as were
/// replayed, the drops among them as many as the report counts; a reader
/// that closes the pipe early (`| head -1`) ends the output, not the run.
#[test]
fn verbose_lines_match_the_report() {
    let d = scratch("verbose");
    let j = d.join("r.json");
    let stdout = run_ok(bin().args(["replay", "-v", "-c", "3000", "--json"]).arg(&j));
    let lines: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains(" length ") && l.contains(": "))
        .filter(|l| {
            l.split(' ')
                .next()
                .is_some_and(|t| t.parse::<f64>().is_ok())
        })
        .collect();
    let r = json(&j);
    assert_eq!(lines.len() as u64, r["packets"].as_u64().unwrap());
    let drops = lines.iter().filter(|l| l.contains(": drop ")).count() as u64;
    assert_eq!(drops, r["router"]["pipeline"]["dropped"].as_u64().unwrap());
    let marks = lines
        .iter()
        .filter(|l| l.contains(": mark CE, forward "))
        .count() as u64;
    assert_eq!(marks, r["router"]["pipeline"]["marked"].as_u64().unwrap());
    assert!(lines[0].starts_with("0.000000 "), "{}", lines[0]);
    std::fs::remove_dir_all(&d).unwrap();
}

/// `replay -v | head -1`: when the reader closes the pipe the replay
/// stops, as tcpdump does, with an interrupt's partial results (the JSON
/// written, every packet sent accounted for) and status 141, far short of
/// the 200,000 packets of the input.
#[test]
fn verbose_stops_when_its_output_closes() {
    let d = scratch("verbose-pipe");
    let j = d.join("r.json");
    let mut child = bin()
        .args(["replay", "-v", "--json"])
        .arg(&j)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::BufRead as _;
        let mut first = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        assert!(first.contains(" length "), "{first}");
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{stderr}");
    let r = json(&j);
    let sent = r["packets"].as_u64().unwrap();
    assert!(sent > 0 && sent < 200_000, "{sent}");
    assert_eq!(r["output_closed"], true);
    assert_eq!(r["interrupted"], false);
    assert_eq!(r["router"]["pipeline"]["received"], sent);
    assert!(
        stderr.contains(&format!(
            "standard output closed: stopped after {sent} packets, as at an interrupt"
        )),
        "{stderr}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

/// `--heavy-jsonl` gives each flow as fields beside the string: `src`,
/// `dst`, `proto` (number), `sport`/`dport` (TCP, UDP) or `icmp_type`/
/// `icmp_code` (ICMP), each equal to what the `flow` string says, and
/// `vlan`, the outer VLAN id read from the capture's own bytes for every
/// packet of the flow (null untagged).
#[test]
fn heavy_jsonl_gives_the_flow_as_fields() {
    use std::collections::{BTreeMap, BTreeSet};
    let d = scratch("heavy-fields");
    let mut inputs = vec![(fixed_pcap(&d, "zipf.pcap", 3000), "5")];
    if let Some(p) = shared_pcaps() {
        inputs.push((p.join("pcpp_VlanPackets.pcap"), "5"));
        inputs.push((p.join("cesnet_mixed.pcap"), "1"));
    } else {
        let _ = writeln!(
            std::io::stderr(),
            "public captures skipped: ../shared/pcaps is absent"
        );
    }
    let h = d.join("h.jsonl");
    let mut seen = BTreeSet::new();
    for (input, pct) in &inputs {
        // The outer VLAN of each frame, by its IPv4/IPv6 addresses (each of
        // these captures' address pairs stays on one VLAN).
        let mut vlans: BTreeMap<(String, String), BTreeSet<Option<u16>>> = BTreeMap::new();
        let mut r = dataplane::io::capture::CaptureReader::open(input).unwrap();
        while let Some(rec) = r.next_record().unwrap() {
            let f = rec.data;
            let (mut at, mut outer) = (12, None);
            while matches!(f.get(at..at + 2), Some([0x81, 0x00] | [0x88, 0xa8])) {
                let tci = u16::from_be_bytes([f[at + 2], f[at + 3]]);
                outer.get_or_insert(tci & 0x0fff);
                at += 4;
            }
            let addrs = match f.get(at..at + 2) {
                Some([0x08, 0x00]) if f.len() >= at + 22 => {
                    let a = |o: usize| std::net::Ipv4Addr::new(f[o], f[o + 1], f[o + 2], f[o + 3]);
                    (a(at + 14).to_string(), a(at + 18).to_string())
                }
                Some([0x86, 0xdd]) if f.len() >= at + 42 => {
                    let a = |o: usize| {
                        let b: [u8; 16] = f[o..o + 16].try_into().unwrap();
                        std::net::Ipv6Addr::from(b).to_string()
                    };
                    (a(at + 10), a(at + 26))
                }
                _ => continue,
            };
            vlans.entry(addrs).or_default().insert(outer);
        }
        run_ok(
            bin()
                .args(["replay", "--heavy-percent", pct, "--heavy-jsonl"])
                .arg(&h)
                .arg(input),
        );
        let text = std::fs::read_to_string(&h).unwrap();
        assert!(!text.is_empty(), "{}", input.display());
        for line in text.lines() {
            let r: serde_json::Value = serde_json::from_str(line).unwrap();
            let flow = r["flow"].as_str().unwrap();
            // `a:p -> b:q proto`, `[a]:p -> [b]:q proto`, `a -> b icmp t/c`.
            let w: Vec<&str> = flow.split(' ').collect();
            let split = |x: &str| -> (String, Option<u64>) {
                match x.rsplit_once(':') {
                    Some((a, p)) if x.starts_with('[') || a.contains('.') => (
                        a.trim_matches(['[', ']']).to_string(),
                        Some(p.parse().unwrap()),
                    ),
                    _ => (x.to_string(), None),
                }
            };
            let ((src, sport), (dst, dport)) = (split(w[0]), split(w[2]));
            assert_eq!(r["src"], src, "{line}");
            assert_eq!(r["dst"], dst, "{line}");
            assert_eq!(r["sport"].as_u64(), sport, "{line}");
            assert_eq!(r["dport"].as_u64(), dport, "{line}");
            let proto = match w[3] {
                "tcp" => 6,
                "udp" => 17,
                "icmp" => 1,
                "ipv6-icmp" => 58,
                other => other.trim_start_matches("proto-").parse().unwrap_or(-1),
            };
            assert_eq!(r["proto"], proto, "{line}");
            if let Some(tc) = w.get(4) {
                let (t, c) = tc.split_once('/').unwrap();
                assert_eq!(r["icmp_type"].to_string(), t, "{line}");
                assert_eq!(r["icmp_code"].to_string(), c, "{line}");
            } else {
                assert!(
                    r["icmp_type"].is_null() && r["icmp_code"].is_null(),
                    "{line}"
                );
            }
            let v = &vlans[&(src, dst)];
            assert_eq!(v.len(), 1, "{line}: one VLAN per address pair");
            let want = v.first().copied().flatten();
            assert_eq!(r["vlan"].as_u64(), want.map(u64::from), "{line}");
            seen.insert((sport.is_some(), r["icmp_type"].is_null(), want.is_some()));
        }
    }
    if shared_pcaps().is_some() {
        assert!(
            seen.contains(&(false, false, true)),
            "ICMP on a VLAN: {seen:?}"
        );
    }
    assert!(
        seen.contains(&(true, true, false)),
        "ports, untagged: {seen:?}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

/// `--enet-dmac` and `--enet-smac` as tcprewrite's: `--enet-dmac` alone
/// takes the routed port's own MAC (and does not take the next argument
/// as its value), `--enet-dmac=MAC` writes MAC into every unicast frame
/// (the wires then send them on with it), `--enet-smac MAC` the source;
/// a group MAC is a usage error, the port's own MAC on a router without
/// routed ports an error naming the flag.
#[test]
fn enet_dmac_and_smac_rewrite_as_tcprewrite() {
    let d = scratch("enet");
    let pcap = fixed_pcap(&d, "z.pcap", 200);
    let l3 = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../dataplane/examples/router-l3.toml"
    );
    let stdout = run_ok(
        bin()
            .args(["replay", "--config", l3, "--enet-dmac"])
            .arg(&pcap),
    );
    assert!(
        stdout.contains("enet: 200 destination MACs rewritten, 0 kept"),
        "{stdout}"
    );
    assert!(!stdout.contains("dropped other_host"), "{stdout}");
    // Into every frame, through the built-in router's wires.
    let w = d.join("out");
    run_ok(
        bin()
            .args([
                "replay",
                "--enet-dmac=02:00:00:00:0a:01",
                "--enet-smac",
                "02:00:00:00:aa:02",
                "-w",
            ])
            .arg(&w)
            .arg(&pcap),
    );
    let mut r = dataplane::io::capture::CaptureReader::open(&w.join("r-b.pcap")).unwrap();
    let mut n = 0;
    while let Some(rec) = r.next_record().unwrap() {
        assert_eq!(rec.data[..12], [2, 0, 0, 0, 0x0a, 1, 2, 0, 0, 0, 0xaa, 2]);
        n += 1;
    }
    assert!(n > 100, "{n}");
    for (args, status, want) in [
        (
            vec!["--enet-dmac=01:00:5e:00:00:01"],
            64,
            "is a group (multicast) address",
        ),
        (vec!["--enet-smac", "zz"], 64, "is not a MAC address"),
        (
            vec!["--enet-dmac"],
            1,
            "--enet-dmac: the router has no routed port",
        ),
    ] {
        let out = bin().arg("replay").args(&args).arg(&pcap).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(status), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// What a replay's report can grow to is bounded: a router that makes
/// every flow heavy in 1 ms epochs (400 epochs, about 190,000 reports)
/// keeps 100,000 and counts the rest, in the summary, the stage's line
/// and `--heavy-jsonl`; a `--heavy-percent` below what the sketch can
/// count is a usage error.
#[test]
fn a_replay_report_is_bounded() {
    let d = scratch("bound");
    let cfg = d.join("every.toml");
    std::fs::write(
        &cfg,
        "[[interfaces]]\nname = \"a\"\n[[interfaces]]\nname = \"b\"\n[[wires]]\nfrom = \"a\"\nto = \"b\"\n\
         [heavy]\nthreshold = { packets = 1 }\nepoch_ms = 1\n",
    )
    .unwrap();
    let pcap = d.join("many.pcap");
    run_ok(
        bin()
            .args(["synth", "--flows", "100000", "--packets", "200000", "-o"])
            .arg(&pcap),
    );
    let h = d.join("h.jsonl");
    let stdout = run_ok(
        bin()
            .args(["replay", "--no-pin", "-l", "2", "--config"])
            .arg(&cfg)
            .arg("--heavy-jsonl")
            .arg(&h)
            .arg(&pcap),
    );
    let stage = stdout
        .lines()
        .find(|l| l.starts_with("  stage heavy "))
        .unwrap();
    let field = |k: &str| -> u64 {
        let w: Vec<&str> = stage.split(' ').collect();
        let i = w.iter().position(|x| *x == k).unwrap();
        w[i + 1].parse().unwrap()
    };
    let (detections, reported, omitted) =
        (field("detections"), field("reported"), field("omitted"));
    assert_eq!(reported, 100_000, "{stage}");
    assert_eq!(detections, reported + omitted, "{stage}");
    assert!(omitted > 50_000, "{stage}");
    assert!(
        stdout.contains(&format!(
            "heavy flows: {omitted} reports not kept: a worker holds at most 100000 until the end of the replay"
        )),
        "{stdout}"
    );
    assert_eq!(
        std::fs::read_to_string(&h).unwrap().lines().count(),
        100_000
    );
    let out = bin()
        .args(["replay", "--heavy-percent", "1e-298"])
        .arg(&pcap)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains("--heavy-percent 1e-298: as a share, ")
            && stderr.contains("is below what the sketch can count"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

/// Splits `vlan 118, p 0, vlan 10, p 0, DEI, ...` into its tags.
fn vlan_tags(line: &str) -> Vec<String> {
    let t: Vec<&str> = line.split(", ").flat_map(|x| x.split(' ')).collect();
    let mut tags = Vec::new();
    for (i, w) in t.iter().enumerate() {
        if *w == "vlan" && t.get(i + 2) == Some(&"p") {
            let dei = t.get(i + 4) == Some(&"DEI");
            tags.push(format!(
                "{} {} {dei}",
                t[i + 1],
                t[i + 3].trim_end_matches(',')
            ));
        }
    }
    tags
}

/// `frag (A|B)`, if the line has it.
fn frag_of(line: &str) -> Option<&str> {
    let i = line.find("frag (")?;
    let rest = &line[i..];
    Some(&rest[..=rest.find(')')?])
}

/// `-v` against tcpdump on public captures: `--tttt` prints tcpdump
/// `-tttt`'s times (TZ=UTC) and `--tt` its `-tt` times; every VLAN tag
/// (id, priority, DEI) is shown as `tcpdump -e` shows it; IPv6 fragments
/// as tcpdump's `frag (OFFSET|LENGTH)`, and IPv4 ones with the offset and
/// the payload length tcpdump `-v` gives, a non-first fragment without
/// ports. Skipped with a printed reason without tcpdump or the captures.
#[test]
fn verbose_prints_fragments_vlans_and_times_as_tcpdump() {
    if Command::new("tcpdump").arg("--version").output().is_err() {
        let _ = writeln!(std::io::stderr(), "skipping: tcpdump is not installed");
        return;
    }
    let Some(pcaps) = shared_pcaps() else {
        let _ = writeln!(std::io::stderr(), "skipping: ../shared/pcaps is absent");
        return;
    };
    let lines = |cmd: &mut Command| -> Vec<String> {
        let out = cmd.env("TZ", "UTC").output().unwrap();
        assert!(
            out.status.success(),
            "{:?}: {}",
            cmd,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.chars().next().is_some_and(|c| c.is_ascii_digit()))
            .map(str::to_string)
            .collect()
    };
    let (mut frags4, mut frags6, mut tags) = (0, 0, 0);
    for name in [
        "pcpp_ip6_fragments.pcap",
        "zeek_ipv6-fragmented-dns.pcap",
        "ddos_amp.dns.RRSIG.fragmented.pcap",
        "pcpp_ip-frag.pcap",
        "pcpp_VlanPackets.pcap",
        "zeek_vlan-pcp-dei.pcapng",
        "tcpdump_802.1ad_QinQ.pcap",
        "zeek_vlan-qinqinq.pcap",
    ] {
        let f = pcaps.join(name);
        let ours = lines(bin().args(["replay", "--no-pin", "--tttt"]).arg(&f));
        let epoch = lines(bin().args(["replay", "--no-pin", "--tt"]).arg(&f));
        let e = lines(
            Command::new("tcpdump")
                .args(["-tttt", "-nn", "-e", "-r"])
                .arg(&f),
        );
        let tt = lines(Command::new("tcpdump").args(["-tt", "-nn", "-r"]).arg(&f));
        let v = lines(Command::new("tcpdump").args(["-nn", "-v", "-r"]).arg(&f));
        assert_eq!(ours.len(), e.len(), "{name}");
        assert_eq!(
            (epoch.len(), tt.len(), v.len()),
            (e.len(), e.len(), e.len()),
            "{name}"
        );
        for (i, o) in ours.iter().enumerate() {
            let at = format!("{name} packet {}: {o}\n tcpdump: {}", i + 1, e[i]);
            assert_eq!(o[..26], e[i][..26], "{at}");
            assert_eq!(epoch[i].split(' ').next(), tt[i].split(' ').next(), "{at}");
            let want = vlan_tags(&e[i]);
            assert_eq!(vlan_tags(o), want, "{at}");
            tags += want.len();
            if let Some(f6) = frag_of(&e[i]) {
                assert_eq!(frag_of(o), Some(f6), "{at}");
                frags6 += 1;
                continue;
            }
            // IPv4: `(tos 0x0, ttl 54, id 35969, offset 2912, flags [none], proto UDP (17), length 1038)`.
            let h = &v[i];
            let field = |k: &str| -> Option<u64> {
                let s = &h[h.find(k)? + k.len()..];
                s.split([',', ')']).next()?.trim().parse().ok()
            };
            let (Some(offset), Some(total)) = (field("offset "), field("length ")) else {
                assert_eq!(frag_of(o), None, "{at}");
                continue;
            };
            if offset == 0 && !h.contains("flags [+") {
                assert_eq!(frag_of(o), None, "{at}");
                continue;
            }
            assert!(!h.contains("options ("), "{at}: IP options");
            assert_eq!(
                frag_of(o),
                Some(format!("frag ({offset}|{})", total - 20)).as_deref(),
                "{at}"
            );
            if offset > 0 {
                // IPv4 addresses without ports: they are in the first fragment.
                let flow = &o[27..o.find(" frag (").unwrap()];
                assert!(!flow.contains(':'), "{at}");
            }
            frags4 += 1;
        }
    }
    assert!(
        frags4 >= 1000 && frags6 >= 30 && tags >= 50,
        "{frags4} {frags6} {tags}"
    );
}

/// Negative values on the other commands: the flag is named (clap's
/// parser or the command's own check), never "unexpected argument".
#[test]
fn negative_values_name_their_flag() {
    for (args, want) in [
        (
            vec!["synth", "-o", "/nonexistent/x.pcap", "--packets", "-3"],
            "'--packets <PACKETS>'",
        ),
        (
            vec!["scenario", "sfb", "--rate-mbps", "-5"],
            "--rate-mbps must be positive",
        ),
        (
            vec!["throughput", "--tx", "a", "--rx", "b", "--loss", "-1"],
            "--loss is a fraction",
        ),
    ] {
        let out = bin().args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("unexpected argument"),
            "{args:?}: {stderr}"
        );
    }
}

/// `[heavy] ipfix`: the heavy flows reach Debian's nfcapd as IPFIX, and
/// `nfdump -o json` lists exactly the flows, bytes and packets the replay
/// reported (the upper bounds), with the epoch as first/last. Skipped
/// with a printed reason where nfdump is not installed.
#[test]
fn ipfix_export_reaches_nfdump() {
    use std::collections::BTreeSet;
    use std::io::Write as _;
    if Command::new("nfcapd").arg("-V").output().is_err()
        || Command::new("nfdump").arg("-V").output().is_err()
    {
        let _ = writeln!(
            std::io::stderr(),
            "skipping: nfdump/nfcapd are not installed"
        );
        return;
    }
    let d = scratch("ipfix");
    let flows_dir = d.join("flows");
    std::fs::create_dir_all(&flows_dir).unwrap();
    let pcap = d.join("z.pcap");
    run_ok(
        bin()
            .args([
                "synth",
                "--flows",
                "300",
                "--packets",
                "20000",
                "--seed",
                "2",
                "-o",
            ])
            .arg(&pcap),
    );
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = String::from_utf8(
        bin()
            .args(["replay", "--print-config"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .replace(
        "report = \"-\"",
        &format!("report = \"-\"\nipfix = \"127.0.0.1:{port}\""),
    );
    assert!(
        config.contains("ipfix"),
        "the built-in router has a [heavy] report line"
    );
    let cfg = d.join("router.toml");
    std::fs::write(&cfg, config).unwrap();
    let mut nfcapd = Command::new("nfcapd")
        .arg("-w")
        .arg(&flows_dir)
        .args(["-b", "127.0.0.1", "-t", "3600", "-p", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Listening once its socket shows in /proc/net/udp.
    let hex = format!(":{port:04X} ");
    for _ in 0..100 {
        if std::fs::read_to_string("/proc/net/udp")
            .unwrap_or_default()
            .contains(&hex)
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let j = d.join("r.json");
    run_ok(
        bin()
            .args(["replay", "--config"])
            .arg(&cfg)
            .arg("--json")
            .arg(&j)
            .arg(&pcap),
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    // SIGTERM: nfcapd writes its file out and exits.
    let _ = Command::new("kill").arg(nfcapd.id().to_string()).status();
    let _ = nfcapd.wait();
    let r = json(&j);
    assert_eq!(r["ipfix"]["send_errors"], 0);
    let mut want = BTreeSet::new();
    for e in r["heavy"].as_array().unwrap() {
        for f in e["flows"].as_array().unwrap() {
            want.insert((
                f["flow"].as_str().unwrap().to_string(),
                f["bytes_upper"].as_u64().unwrap(),
                f["packets_upper"].as_u64().unwrap(),
            ));
        }
    }
    assert_eq!(r["ipfix"]["records"].as_u64().unwrap(), want.len() as u64);
    assert!(want.len() > 5, "{} heavy flows", want.len());
    let dump = Command::new("nfdump")
        .arg("-R")
        .arg(&flows_dir)
        .args(["-o", "json"])
        .output()
        .unwrap();
    assert!(
        dump.status.success(),
        "{}",
        String::from_utf8_lossy(&dump.stderr)
    );
    let records: Vec<serde_json::Value> = serde_json::from_slice(&dump.stdout).unwrap();
    let proto = |n: u64| match n {
        6 => "tcp",
        17 => "udp",
        _ => "other",
    };
    let got: BTreeSet<(String, u64, u64)> = records
        .iter()
        .map(|x| {
            let (s, d, sp, dp) = (
                &x["src4_addr"],
                &x["dst4_addr"],
                &x["src_port"],
                &x["dst_port"],
            );
            let flow = if s.is_string() {
                format!(
                    "{}:{} -> {}:{} {}",
                    s.as_str().unwrap(),
                    sp,
                    d.as_str().unwrap(),
                    dp,
                    proto(x["proto"].as_u64().unwrap())
                )
            } else {
                format!(
                    "[{}]:{} -> [{}]:{} {}",
                    x["src6_addr"].as_str().unwrap(),
                    sp,
                    x["dst6_addr"].as_str().unwrap(),
                    dp,
                    proto(x["proto"].as_u64().unwrap())
                )
            };
            (
                flow,
                x["in_bytes"].as_u64().unwrap(),
                x["in_packets"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, want);
    std::fs::remove_dir_all(&d).unwrap();
}

/// `--plot`: the replay's latency distributions and its shaped port's queue
/// drawn as an SVG; `scenario sfb --plot` too; a bad path fails first.
#[test]
fn plot_draws_the_run() {
    let d = scratch("plot");
    let svg = d.join("r.svg");
    run_ok(bin().args(["replay", "-c", "50000", "--plot"]).arg(&svg));
    let text = std::fs::read_to_string(&svg).unwrap();
    for s in [
        "<svg",
        "replay: latency by percentile",
        "processing (wall clock)",
        "sojourn (capture time)",
        "r-b backlog",
        "SFB marking probability",
    ] {
        assert!(text.contains(s), "{s} missing");
    }
    let svg2 = d.join("s.svg");
    run_ok(
        bin()
            .args([
                "scenario",
                "sfb",
                "--aimd",
                "4",
                "--duration",
                "3s",
                "--plot",
            ])
            .arg(&svg2),
    );
    let text = std::fs::read_to_string(&svg2).unwrap();
    assert!(
        text.contains("sfb sojourn, 4 AIMD") && text.contains("droptail sojourn, 4 AIMD"),
        "{}",
        &text[..200]
    );
    let out = bin()
        .args(["replay", "-c", "10", "--plot", "/nonexistent/dir/x.svg"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--plot /nonexistent/dir/x.svg"));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_kernel_backend_this_cpu_lacks_is_an_error_and_version_names_the_backend() {
    // The backend the other architecture has: never available here.
    let missing = if cfg!(target_arch = "aarch64") {
        "avx2"
    } else {
        "neon"
    };
    let out = bin()
        .args(["replay", "-c", "10"])
        .env("BLOOMPLANE_BACKEND", missing)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "traffic-gen: error: BLOOMPLANE_BACKEND: kernel backend {missing} is not \
             available on this CPU"
        )),
        "{err}"
    );
    assert!(
        !err.contains("warning"),
        "one error, no fallback warning: {err}"
    );

    let text = run_ok(bin().arg("--version").env("BLOOMPLANE_BACKEND", "scalar"));
    assert!(
        text.contains("kernels: backend scalar (1 lanes, hash aes-crate;"),
        "{text}"
    );
    assert!(text.contains("built for"), "{text}");
}
