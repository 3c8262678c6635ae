//! `traffic-gen replay --digests DIR` then `traffic-gen traceback` on the
//! kept windows, as the binary runs them: a packet of the capture is found
//! from the port it came in by, with the window and probability in the
//! text and the JSON; a packet never sent is not seen; a topology naming
//! kept windows walks them; bad input names the flag, file or key.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_traffic-gen"))
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("traffic-gen-tb-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../dataplane/examples/router-traceback.toml")
}

/// The capture, replayed with its windows kept in `kept`.
fn replayed(d: &Path) -> (PathBuf, PathBuf) {
    let pcap = d.join("flows.pcap");
    ok(bin()
        .args(["synth", "--packets", "5000", "--flows", "200", "-o"])
        .arg(&pcap)
        .output()
        .unwrap());
    let kept = d.join("kept");
    let text = ok(bin()
        .arg("replay")
        .arg("--config")
        .arg(example())
        .arg("--digests")
        .arg(&kept)
        .arg(&pcap)
        .output()
        .unwrap());
    assert!(
        text.contains("stage digest recorded 5000 skipped 0"),
        "{text}"
    );
    assert!(
        text.contains(&format!("kept the digest windows in {}", kept.display())),
        "{text}"
    );
    (pcap, kept)
}

#[test]
fn a_kept_capture_is_traced() {
    let d = scratch("kept");
    let (pcap, kept) = replayed(&d);
    let text = ok(bin()
        .arg("traceback")
        .arg("--digests")
        .arg(&kept)
        .arg("--capture")
        .arg(&pcap)
        .args(["--frame", "1234"])
        .output()
        .unwrap());
    assert!(text.contains("router: seen"), "{text}");
    assert!(text.contains("from r-a (window 0/"), "{text}");
    assert!(
        text.contains("path: outside -> router (entered at router r-a)"),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&ok(bin()
        .arg("traceback")
        .arg("--digests")
        .arg(&kept)
        .arg("--capture")
        .arg(&pcap)
        .args(["--frame", "1234", "--json", "-"])
        .output()
        .unwrap()))
    .unwrap();
    let hop = &json["hops"][0];
    assert_eq!(hop["status"], "seen");
    assert_eq!(hop["branches"][0]["port"], "r-a");
    assert!(
        hop["branches"][0]["false_positive_probability"]
            .as_f64()
            .unwrap()
            < 0.01
    );
    assert_eq!(json["entries"][0]["port"], "r-a");

    // A datagram never sent (10.9.9.9 -> 10.8.8.8 UDP) is not seen.
    let never = "4500001c12344000401100000a0909090a08080803e807d000080000";
    let text = ok(bin()
        .arg("traceback")
        .arg("--digests")
        .arg(&kept)
        .args(["--hex", never])
        .output()
        .unwrap());
    assert!(text.contains("router: not seen"), "{text}");
    assert!(text.contains("every window kept searched"), "{text}");

    // A topology of two routers whose windows are the same capture's, r-a
    // of one facing r-b of the other: the walk goes on to the second.
    let topo = d.join("topology.toml");
    std::fs::write(
        &topo,
        "[[routers]]\nname = \"near\"\ndigests = \"kept\"\n[[routers]]\nname = \"far\"\ndigests = \"kept\"\n\
         [[links]]\nends = [\"near:r-a\", \"far:r-b\"]\n[[hosts]]\nname = \"S\"\nat = \"far:r-a\"\n",
    )
    .unwrap();
    let text = ok(bin()
        .arg("traceback")
        .arg("--topology")
        .arg(&topo)
        .args(["--from", "near"])
        .arg("--capture")
        .arg(&pcap)
        .args(["--frame", "7"])
        .output()
        .unwrap());
    assert!(
        text.contains("path: S -> far -> near (entered at far r-a)"),
        "{text}"
    );
}

#[test]
fn bad_input_names_what_is_wrong() {
    let d = scratch("bad");
    let run = |args: &[&str]| {
        let out = bin().arg("traceback").args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?} succeeded");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = run(&["--digests", "/nonexistent", "--hex", "4500"]);
    assert!(
        e.contains("--hex: 2 bytes: the header and the first 8 bytes of payload need 20"),
        "{e}"
    );
    let e = run(&[
        "--digests",
        "/nonexistent/kept",
        "--hex",
        "4500001c12344000401100000a0909090a08080803e807d000080000",
    ]);
    assert!(
        e.contains("/nonexistent/kept/digests.json: cannot read"),
        "{e}"
    );
    let topo = d.join("t.toml");
    std::fs::write(&topo, "[[routers]]\nname = \"a\"\nquery = \"here\"\n").unwrap();
    let e = run(&[
        "--topology",
        topo.to_str().unwrap(),
        "--from",
        "a",
        "--hex",
        "4500001c12344000401100000a0909090a08080803e807d000080000",
    ]);
    assert!(
        e.contains("routers[0].query: \"here\" is not an IP address and port"),
        "{e}"
    );
    let e = run(&[
        "--digests",
        "x",
        "--capture",
        "/nonexistent.pcap",
        "--frame",
        "1",
    ]);
    assert!(e.contains("/nonexistent.pcap"), "{e}");
    // Without the router keeping digests, --digests is refused first.
    let out = bin()
        .args(["replay", "--limit", "10", "--digests"])
        .arg(d.join("k"))
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("the router keeps no digests (add a [digest] table"),
        "{e}"
    );
}

/// Flags that do not go together, or a `--time` no clock reads, are usage
/// errors (exit 64, as clap's own); a file that cannot be read is not (1).
#[test]
fn usage_errors_exit_64() {
    let hex = "4500001c12344000401100000a0909090a08080803e807d000080000";
    let topo = scratch("usage").join("t.toml");
    std::fs::write(
        &topo,
        "[[routers]]\nname = \"a\"\nquery = \"127.0.0.1:1\"\n",
    )
    .unwrap();
    let topo = topo.to_str().unwrap();
    let code = |args: &[&str]| {
        let out = bin().arg("traceback").args(args).output().unwrap();
        let e = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), e)
    };
    for (args, says) in [
        (vec!["--hex", hex], "the routers: give --topology FILE"),
        (
            vec!["--digests", "x"],
            "the packet: give --capture FILE --frame N",
        ),
        (vec!["--topology", topo, "--hex", hex], "--from <ROUTER>"),
        (
            vec!["--digests", "x", "--hex", hex, "--time", "yesterday"],
            "--time: \"yesterday\" is neither seconds",
        ),
    ] {
        let (c, e) = code(&args);
        assert_eq!(c, Some(64), "{args:?}: {e}");
        assert!(e.contains(says), "{args:?}: {e}");
    }
    let (c, e) = code(&["--digests", "/nonexistent/kept", "--hex", hex]);
    assert_eq!(c, Some(1), "{e}");
}
