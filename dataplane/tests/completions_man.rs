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
