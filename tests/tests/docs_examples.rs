//! The documents' examples run as written.
//!
//! * Every fenced block of `docs/*.md` whose info string is `sh run` runs
//!   (`docs/TESTING.md`, "Examples in the documents"): a file's blocks in
//!   order, with `bash -e`, in one temporary directory per file holding
//!   links to the repository's `dataplane/`, `traffic-gen/` and `scripts/`,
//!   with this build's `dataplane` and `traffic-gen` first on `PATH`. A
//!   block must exit 0, or N when its info string says `exit=N`; one
//!   marked `requires=PROGRAM` is skipped, with a printed reason, where
//!   PROGRAM is not installed.
//! * Every key the annotated example configurations write (or show
//!   commented out) is in the configuration reference, `docs/config.md`.
//!
//! The binaries are built as the lab tests build them (a cargo no-op when
//! they are fresh; `BLOOMPLANE_BIN_DIR` points at prebuilt ones instead).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

#[path = "../../dataplane/tests/lab_common/mod.rs"]
mod lab_common;

use lab_common::{binaries, run_bounded, workspace};
use tests::{Block, blocks};

#[test]
fn the_parser_finds_blocks_and_settings() {
    let md = "text\n```sh run requires=tcpdump exit=2\na\nb\n```\n```text\nx\n```\n```sh\nc\n```\n";
    let b = blocks(md);
    assert_eq!(b.len(), 3);
    assert!(b[0].runs() && !b[1].runs() && !b[2].runs());
    assert_eq!((b[0].line, b[0].code.as_str()), (2, "a\nb\n"));
    assert_eq!(b[0].setting("requires"), Some("tcpdump"));
    assert_eq!(b[0].setting("exit"), Some("2"));
    assert_eq!(b[2].setting("exit"), None);
}

/// Whether `program` is on `PATH`.
fn installed(program: &str) -> bool {
    Command::new("bash")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A temporary directory laid out as the repository root for the
/// examples: links to the directories they name, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("bloomplane-docs-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let root = workspace().canonicalize().unwrap();
        for d in ["dataplane", "traffic-gen", "scripts"] {
            std::os::unix::fs::symlink(root.join(d), dir.join(d)).unwrap();
        }
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The Markdown files of `docs/`, sorted.
fn documents() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(workspace().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    files.sort();
    files
}

#[test]
fn the_guides_examples_run() {
    let bins = binaries().canonicalize().unwrap();
    let path = format!(
        "{}:{}",
        bins.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut ran = 0;
    for file in documents() {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let runnable: Vec<Block> = blocks(&text).into_iter().filter(Block::runs).collect();
        if runnable.is_empty() {
            continue;
        }
        let scratch = Scratch::new(name.trim_end_matches(".md"));
        for b in &runnable {
            let at = format!("docs/{name}:{}", b.line);
            if let Some(p) = b.setting("requires")
                && !installed(p)
            {
                let _ = writeln!(
                    std::io::stderr(),
                    "skipping: the example at {at} needs {p}, which is not installed"
                );
                continue;
            }
            let want: i32 = b
                .setting("exit")
                .map_or(0, |s| s.parse().expect("exit=N takes a number"));
            let mut cmd = Command::new("bash");
            cmd.args(["-e", "-c", &b.code])
                .current_dir(&scratch.0)
                .env("PATH", &path)
                .env_remove("BLOOMPLANE_BACKEND");
            let out = run_bounded(&mut cmd, Duration::from_secs(300), &at);
            assert_eq!(
                out.status.code(),
                Some(want),
                "the example at {at} exited with {}, not {want}:\n{}\n--- stdout:\n{}\n--- stderr:\n{}",
                out.status,
                b.code,
                tail(&out.stdout),
                tail(&out.stderr)
            );
            ran += 1;
        }
    }
    assert!(ran >= 10, "only {ran} examples found to run");
}

/// The last lines of a command's output, for a failure message.
fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// The keys `text` (a TOML file) assigns, and those it shows commented out
/// (`# k = 10`).
fn config_keys(text: &str) -> Vec<String> {
    let mut keys = Vec::new();
    for line in text.lines() {
        let l = line.trim_start();
        let l = l.strip_prefix("# ").unwrap_or(l);
        let Some((key, _)) = l.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if !key.is_empty()
            && key
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            keys.push(key.to_string());
        }
    }
    keys
}

#[test]
fn the_reference_names_every_key_of_the_examples() {
    let reference = std::fs::read_to_string(workspace().join("docs/config.md")).unwrap();
    let root = workspace();
    let mut missing = Vec::new();
    let mut seen = 0;
    // Every shipped example (a new one is covered without being listed)
    // and the built-in router.
    let mut examples: Vec<String> = std::fs::read_dir(root.join("dataplane/examples"))
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.ends_with(".toml")
                .then(|| format!("dataplane/examples/{name}"))
        })
        .collect();
    examples.sort();
    assert!(
        examples.iter().any(|e| e.ends_with("router-peering.toml")),
        "{examples:?}"
    );
    examples.push("traffic-gen/src/default-router.toml".into());
    for example in &examples {
        let text = std::fs::read_to_string(root.join(example)).unwrap();
        for key in config_keys(&text) {
            seen += 1;
            if !reference.contains(&format!("`{key}`")) {
                missing.push(format!("{example}: {key}"));
            }
        }
    }
    assert!(seen > 50, "only {seen} keys found in the examples");
    assert!(
        missing.is_empty(),
        "keys missing from docs/config.md: {missing:?}"
    );
}

#[test]
fn the_key_reader_reads_keys_not_prose() {
    let toml = "[heavy]\nthreshold = { share = 0.01 }\n# log2_width = 13\n# report and reset, e.g. x = y\nrows = 2   # two\n";
    assert_eq!(config_keys(toml), ["threshold", "log2_width", "rows"]);
}

#[test]
fn the_documents_name_no_development_paths() {
    let root = workspace();
    let mut files = documents();
    files.extend([root.join("README.md"), root.join("ARCHITECTURE.md")]);
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (i, line) in text.lines().enumerate() {
            let lower = line.to_lowercase();
            assert!(
                !lower.contains("session") && !line.contains("../shared"),
                "{}:{}: {line}",
                file.display(),
                i + 1
            );
        }
    }
}

#[test]
fn the_document_links_resolve() {
    let root = workspace();
    let mut files = documents();
    files.extend([root.join("README.md"), root.join("ARCHITECTURE.md")]);
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let dir = file.parent().unwrap();
        for (i, line) in text.lines().enumerate() {
            for target in link_targets(line) {
                let (path, _anchor) = target.split_once('#').unwrap_or((target, ""));
                if path.is_empty() || path.contains("://") {
                    continue;
                }
                assert!(
                    dir.join(path).exists(),
                    "{}:{}: no such file: {path}",
                    file.display(),
                    i + 1
                );
            }
        }
    }
}

/// The targets of the Markdown links `[text](target)` on `line`.
fn link_targets(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let Some(end) = after.find(')') else { break };
        out.push(&after[..end]);
        rest = &after[end..];
    }
    out
}

#[test]
fn links_are_read_from_markdown() {
    assert_eq!(
        link_targets("see [a](docs/a.md#x) and ![p](replay.svg), not [b] (c)"),
        ["docs/a.md#x", "replay.svg"]
    );
}
