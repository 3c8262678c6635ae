//! Bloomplane cross-crate integration tests live in `tests/`; this library
//! only holds their shared helpers.

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The shared capture corpus (outside the repository), or `None` with a
/// `skipping:` line when it is absent.
pub fn corpus_file(name: &str) -> Option<PathBuf> {
    let p = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/pcaps")).join(name);
    if p.is_file() {
        Some(p)
    } else {
        let _ = writeln!(std::io::stderr(), "skipping: {} not found", p.display());
        None
    }
}

/// A fenced code block of a Markdown file.
#[derive(Debug)]
pub struct Block {
    /// The line of its opening fence (1-based).
    pub line: usize,
    /// The info string's words (`sh`, `run`, `requires=tcpdump`).
    pub info: Vec<String>,
    /// The lines between the fences.
    pub code: String,
}

impl Block {
    /// Whether `docs_examples` runs it: `sh run`.
    pub fn runs(&self) -> bool {
        self.marked("run")
    }

    /// Whether it is a shell block marked `word` (`sh run`, `sh lab`).
    pub fn marked(&self, word: &str) -> bool {
        self.info.first().is_some_and(|w| w == "sh") && self.info.iter().any(|w| w == word)
    }

    /// The value of `key=VALUE` in the info string.
    pub fn setting(&self, key: &str) -> Option<&str> {
        self.info
            .iter()
            .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
    }
}

/// The fenced blocks of `text` (fences of three backticks at the start of
/// a line).
pub fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in text.lines().enumerate() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(info)) => {
                open = Some(Block {
                    line: i + 1,
                    info: info.split_whitespace().map(String::from).collect(),
                    code: String::new(),
                });
            }
            (Some(_), Some(rest)) if rest.trim().is_empty() => {
                out.extend(open.take());
            }
            (Some(b), _) => {
                b.code.push_str(line);
                b.code.push('\n');
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "a code block is not closed");
    out
}
