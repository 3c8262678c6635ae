//! Writes the starting inputs of every cargo-fuzz target (see
//! `tests/fuzz_common/seeds.rs`) into `fuzz/corpus/<target>/`:
//!
//! ```text
//! cargo run -p dataplane --example fuzz_seeds [PCAPS_DIR [CORPUS_DIR]]
//! ```
//!
//! `PCAPS_DIR` defaults to `../shared/pcaps` beside the repository,
//! `CORPUS_DIR` to the fuzz crate's `corpus/`. Without the captures only
//! the `config` target gets seeds.

#[path = "../tests/fuzz_common/mod.rs"]
mod fuzz_common;

use std::path::PathBuf;

use anyhow::Context;
use fuzz_common::seeds::{TARGETS, for_target};

fn main() -> anyhow::Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut args = std::env::args_os().skip(1);
    let pcaps = args
        .next()
        .map_or_else(|| root.join("../../shared/pcaps"), PathBuf::from);
    let corpus = args
        .next()
        .map_or_else(|| root.join("../fuzz/corpus"), PathBuf::from);
    let pcaps = pcaps.is_dir().then_some(pcaps);
    if pcaps.is_none() {
        eprintln!("no capture directory: seeding the config target only");
    }
    for target in TARGETS {
        let seeds = for_target(target, pcaps.as_deref(), &root.join("examples"));
        let dir = corpus.join(target);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        for s in &seeds {
            let path = dir.join(&s.name);
            std::fs::write(&path, &s.bytes)
                .with_context(|| format!("writing {}", path.display()))?;
        }
        println!("{target}: {} seeds in {}", seeds.len(), dir.display());
    }
    Ok(())
}
