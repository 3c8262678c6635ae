//! The live router's guide, run as written on a fresh lab.
//!
//! Every fenced block of `docs/live.md` whose info string is `sh lab`
//! runs, in order, with `bash -e`, in one temporary directory laid out as
//! the repository root (links to `dataplane/`, `traffic-gen/`, `scripts/`,
//! and `target/release/` holding this build's binaries, which are also
//! first on `PATH`): the lab brought up with `scripts/lab.sh up` and its
//! default settings (the `bp` namespaces, MTU 1500), the router started,
//! pinged through, replayed through and measured with `throughput`, the
//! lab taken down. Two commands are stood in for: `cargo build`, whose
//! binaries the test has built, and `sudo`, where it is not installed (the
//! test runs as root). Each block must exit 0; then the live replay must
//! have received everything it sent and `throughput` must have found a
//! zero-loss rate above 0 for every size, 1514-byte frames included.
//!
//! Needs root and `ip netns`, and the `bp` namespaces free (a lab a user
//! brought up is left alone: the test skips, saying so); otherwise it
//! prints why and passes as skipped.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

#[path = "../../dataplane/tests/lab_common/mod.rs"]
mod lab_common;

use lab_common::{binaries, ring_refused, run_bounded, skip_reason, workspace};
use tests::blocks;

/// The namespaces `scripts/lab.sh` makes by default.
const DEFAULT_NS: [&str; 4] = ["bp-a", "bp-r", "bp-b", "bp-c"];

/// Takes the default lab down, whatever happened: the processes left in
/// its namespaces first (a router started with `&`), then `lab.sh down`;
/// and removes the scratch directory.
struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for ns in DEFAULT_NS {
            if let Ok(o) = Command::new("ip").args(["netns", "pids", ns]).output() {
                for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                    if let Ok(pid) = pid.parse::<libc::pid_t>() {
                        // SAFETY: kill(2) on a process of the lab's
                        // namespace, which this test started.
                        unsafe { libc::kill(pid, libc::SIGKILL) };
                    }
                }
            }
        }
        let _ = Command::new("bash")
            .arg(workspace().join("scripts/lab.sh"))
            .arg("down")
            .env_remove("LAB_PREFIX")
            .output();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn the_live_guides_commands_run_on_a_fresh_lab() {
    let name = "the_live_guides_commands_run_on_a_fresh_lab";
    if let Some(why) = skip_reason().or_else(ring_refused) {
        let _ = writeln!(std::io::stderr(), "{name}: skipped: {why}");
        return;
    }
    let listed = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    if let Some(ns) = listed
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .find(|n| DEFAULT_NS.contains(n))
    {
        let _ = writeln!(
            std::io::stderr(),
            "{name}: skipped: namespace {ns} exists (a lab brought up by hand?); `sudo scripts/lab.sh down` frees it"
        );
        return;
    }
    let text = std::fs::read_to_string(workspace().join("docs/live.md")).unwrap();
    let lab_blocks: Vec<_> = blocks(&text)
        .into_iter()
        .filter(|b| b.marked("lab"))
        .collect();
    assert!(
        lab_blocks.len() >= 3,
        "docs/live.md has {} `sh lab` blocks",
        lab_blocks.len()
    );

    let bins = binaries().canonicalize().unwrap();
    let dir = std::env::temp_dir().join(format!("bloomplane-live-docs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("target/release")).unwrap();
    let _cleanup = Cleanup(dir.clone());
    let root = workspace().canonicalize().unwrap();
    for d in ["dataplane", "traffic-gen", "scripts"] {
        std::os::unix::fs::symlink(root.join(d), dir.join(d)).unwrap();
    }
    for b in ["dataplane", "traffic-gen"] {
        std::os::unix::fs::symlink(bins.join(b), dir.join("target/release").join(b)).unwrap();
    }
    // Stand-ins: the binaries are this build's (`cargo` does nothing), and
    // root needs no sudo (`sudo` execs its command, so that `kill %1` on a
    // backgrounded `sudo ... &` reaches the command, as sudo relays it).
    let shims = dir.join(".shims");
    std::fs::create_dir_all(&shims).unwrap();
    let mut stand_ins = vec![("cargo", "#!/bin/sh\nexit 0\n")];
    if Command::new("sudo").arg("-V").output().is_err() {
        stand_ins.push(("sudo", "#!/bin/sh\nexec \"$@\"\n"));
    }
    for (name, body) in stand_ins {
        use std::os::unix::fs::PermissionsExt as _;
        let p = shims.join(name);
        std::fs::write(&p, body).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let path = format!(
        "{}:{}:{}",
        shims.display(),
        bins.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for b in &lab_blocks {
        let at = format!("docs/live.md:{}", b.line);
        let mut cmd = Command::new("bash");
        cmd.args(["-e", "-c", &b.code])
            .current_dir(&dir)
            .env("PATH", &path)
            .env_remove("LAB_PREFIX")
            .env_remove("LAB_MTU")
            .env_remove("BLOOMPLANE_BACKEND");
        let out = run_bounded(&mut cmd, Duration::from_secs(300), &at);
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(
            out.status.success(),
            "the commands at {at} exited with {}:\n{}\n--- stdout:\n{stdout}\n--- stderr:\n{stderr}",
            out.status,
            b.code
        );
        eprintln!("{at}: ok\n{stdout}");
    }

    // The live replay: every frame sent was received.
    let e2e: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("e2e.json")).unwrap()).unwrap();
    let sent = e2e["sent"].as_u64().unwrap();
    assert_eq!(sent, 100_000, "{e2e}");
    assert_eq!(e2e["rx"]["received"].as_u64(), Some(sent), "{}", e2e["rx"]);
    // The throughput search: a zero-loss rate for every size.
    let fwd: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("fwd.json")).unwrap()).unwrap();
    let results = fwd["results"].as_array().unwrap();
    let sizes: Vec<u64> = results
        .iter()
        .map(|r| r["size"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, [64, 512, 1514]);
    for r in results {
        let pps = r["zero_loss"]["offered_pps"].as_f64().unwrap_or(0.0);
        assert!(pps > 0.0, "size {}: no zero-loss rate: {r}", r["size"]);
    }
    // The lab is down.
    let listed = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(!listed.lines().any(|l| l.starts_with("bp-r")), "{listed}");
}
