//! `dataplane completions SHELL` and `dataplane man`: a completion script
//! that names the subcommands, and the manual pages.

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "dataplane {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(args: &[&str]) -> String {
    String::from_utf8(run(args).stdout).unwrap()
}

#[test]
fn completions_name_every_subcommand() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = stdout(&["completions", shell]);
        for sub in ["check-config", "run", "completions", "man"] {
            assert!(script.contains(sub), "{shell}: no {sub}");
        }
        assert!(script.contains("stats-interval"), "{shell}: no run flags");
    }
}

#[test]
fn man_pages() {
    let page = stdout(&["man"]);
    let th = page.lines().position(|l| l.starts_with(".TH dataplane 1"));
    let sh = page.lines().position(|l| l.starts_with(".SH "));
    assert!(th.is_some() && th < sh, "{page}");
    assert!(page.contains("check\\-config"), "{page}");
    let run_page = stdout(&["man", "run"]);
    assert!(run_page.contains(".TH dataplane-run 1"), "{run_page}");
    assert!(run_page.contains("stats\\-interval"), "{run_page}");
    let bad = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args(["man", "nope"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
}

/// A usage error exits 64, a bad file 1; `--help` carries the table, as
/// the guide does.
#[test]
fn usage_errors_have_their_own_exit_status() {
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_dataplane"))
            .args(args)
            .output()
            .unwrap()
    };
    for (args, want) in [
        (
            vec!["run", "--confg", "r.toml"],
            "tip: a similar argument exists: '--config'",
        ),
        (
            vec!["run", "--config", "r.toml", "--stats-interval", "3h"],
            "unknown unit \"h\"",
        ),
        (vec!["check-config"], "required"),
    ] {
        let out = run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
    let out = run(&["check-config", "/nonexistent/r.toml"]);
    assert_eq!(out.status.code(), Some(1));
    let guide =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/guide.md")).unwrap();
    let dp = &guide[guide
        .find("`dataplane`:\n")
        .expect("the guide's dataplane table")..];
    for args in [
        vec!["--help"],
        vec!["run", "--help"],
        vec!["check-config", "--help"],
    ] {
        let out = run(&args);
        assert_eq!(out.status.code(), Some(0));
        let help = String::from_utf8_lossy(&out.stdout);
        for status in ["0", "1", "64"] {
            assert!(
                help.lines()
                    .any(|l| l.trim_start().starts_with(&format!("{status} "))),
                "{args:?}: no {status} in {help}"
            );
            assert!(dp.contains(&format!("| {status} |")), "guide: no {status}");
        }
    }
}
