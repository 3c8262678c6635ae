//! `traffic-gen completions SHELL` and `traffic-gen man`: a completion
//! script for every shell clap supports that names the subcommands, and
//! manual pages (the tool's, a subcommand's, every page into a directory).

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_traffic-gen"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "traffic-gen {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(args: &[&str]) -> String {
    String::from_utf8(run(args).stdout).unwrap()
}

/// The roff page's title line, which must come before its first section.
fn title(page: &str) -> &str {
    let th = page.lines().position(|l| l.starts_with(".TH "));
    let sh = page.lines().position(|l| l.starts_with(".SH "));
    assert!(
        th.is_some() && th < sh,
        "no .TH before the first section:\n{page}"
    );
    page.lines().nth(th.unwrap()).unwrap()
}

#[test]
fn completions_name_every_subcommand() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = stdout(&["completions", shell]);
        for sub in [
            "replay",
            "synth",
            "scenario",
            "throughput",
            "completions",
            "man",
        ] {
            assert!(script.contains(sub), "{shell}: no {sub}");
        }
        assert!(script.contains("topspeed"), "{shell}: no replay flags");
    }
    assert!(stdout(&["completions", "bash"]).contains("complete -F"));
    let bad = Command::new(env!("CARGO_BIN_EXE_traffic-gen"))
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(64), "a usage error");
}

#[test]
fn man_pages() {
    let page = stdout(&["man"]);
    assert!(title(&page).starts_with(".TH traffic-gen 1"), "{page}");
    assert!(page.contains("traffic\\-gen 0.1.0") || page.contains("traffic-gen 0.1.0"));
    for sub in ["replay", "synth", "throughput"] {
        assert!(page.contains(sub), "the subcommands listed: {sub}");
    }
    let replay = stdout(&["man", "replay"]);
    assert!(title(&replay).starts_with(".TH traffic-gen-replay 1"));
    assert!(replay.contains("tx\\-threads"), "replay's own options");
    let sfb = stdout(&["man", "scenario", "sfb"]);
    assert!(title(&sfb).starts_with(".TH traffic-gen-scenario-sfb 1"));

    let unknown = Command::new(env!("CARGO_BIN_EXE_traffic-gen"))
        .args(["man", "nope"])
        .output()
        .unwrap();
    assert_eq!(unknown.status.code(), Some(1));
    let err = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        err.contains("no subcommand \"nope\"") && err.contains("replay"),
        "{err}"
    );

    let dir = std::env::temp_dir().join(format!("traffic-gen-man-{}", std::process::id()));
    let listed = stdout(&["man", "--dir", dir.to_str().unwrap()]);
    for name in [
        "traffic-gen.1",
        "traffic-gen-replay.1",
        "traffic-gen-synth.1",
        "traffic-gen-scenario.1",
        "traffic-gen-scenario-sfb.1",
        "traffic-gen-throughput.1",
    ] {
        let path = dir.join(name);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        let stem = name.trim_end_matches(".1");
        assert!(title(&text).starts_with(&format!(".TH {stem} 1")), "{name}");
        assert!(listed.contains(name), "{listed}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
