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
