//! The cargo-fuzz targets' checks on stable (`fuzz_common`, which the
//! targets in `fuzz/fuzz_targets/` call too): every target's seeds from
//! the public captures and the example configs, every capture file whole,
//! and proptest mutations of the seeds (bit flips, byte changes, cuts,
//! inserted bytes, splices of two seeds).
//!
//! The captures live outside the repository (`../shared/pcaps`); without
//! them the frame targets print `skipping: ...` for their seeds and mutate
//! random bytes instead.

mod fuzz_common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use fuzz_common::seeds::{self, Seed, TARGETS};
use proptest::prelude::*;

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/pcaps");

fn corpus() -> Option<&'static Path> {
    let dir = Path::new(CORPUS);
    dir.join("MANIFEST.tsv").is_file().then_some(dir)
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")
}

/// Each target's seeds, built once per test binary.
fn seeds_of(target: &str) -> &'static [Seed] {
    static ALL: OnceLock<Vec<(&'static str, Vec<Seed>)>> = OnceLock::new();
    let all = ALL.get_or_init(|| {
        TARGETS
            .iter()
            .map(|&t| (t, seeds::for_target(t, corpus(), &examples())))
            .collect()
    });
    all.iter()
        .find(|(t, _)| *t == target)
        .map(|(_, s)| s.as_slice())
        .unwrap_or_else(|| panic!("unknown target {target}"))
}

fn check(target: &str, bytes: &[u8]) {
    match target {
        "parse" => fuzz_common::parse::check(bytes),
        "capture" => fuzz_common::capture::check(bytes),
        "config" => fuzz_common::config::check(bytes),
        "icarus" => fuzz_common::icarus::check(bytes),
        "multicast" => fuzz_common::multicast::check(bytes),
        "chain" => fuzz_common::chain::check(bytes),
        "digest" => fuzz_common::digest::check(bytes),
        "peer" => fuzz_common::peer::check(bytes),
        other => panic!("unknown target {other}"),
    }
}

/// Runs `target`'s check on each of its seeds, naming the one that fails.
fn every_seed(target: &str) {
    let seeds = seeds_of(target);
    if seeds.is_empty() {
        eprintln!("skipping {target} seeds: capture corpus {CORPUS} not found");
        return;
    }
    if corpus().is_some() && target != "config" && target != "peer" {
        assert!(seeds.len() >= 40, "{target}: only {} seeds", seeds.len());
    }
    for s in seeds {
        let r = std::panic::catch_unwind(|| check(target, &s.bytes));
        assert!(r.is_ok(), "{target}: seed {} fails", s.name);
    }
}

#[test]
fn parse_seeds() {
    every_seed("parse");
}

#[test]
fn capture_seeds_and_whole_files() {
    every_seed("capture");
    let Some(dir) = corpus() else { return };
    let files = seeds::captures(dir);
    assert!(files.len() >= 50, "only {} captures", files.len());
    for f in files {
        let bytes = std::fs::read(&f).unwrap();
        let r = std::panic::catch_unwind(|| fuzz_common::capture::check(&bytes));
        assert!(r.is_ok(), "capture: {} fails", f.display());
    }
}

#[test]
fn config_seeds() {
    assert!(seeds_of("config").len() >= 3, "the example configs");
    every_seed("config");
}

#[test]
fn icarus_seeds() {
    every_seed("icarus");
}

#[test]
fn multicast_seeds() {
    every_seed("multicast");
}

#[test]
fn chain_seeds() {
    every_seed("chain");
}

#[test]
fn digest_seeds() {
    every_seed("digest");
}

#[test]
fn peer_seeds() {
    assert!(!seeds_of("peer").is_empty(), "real exchanges");
    every_seed("peer");
}

/// One change to an input.
#[derive(Debug, Clone)]
enum Edit {
    /// Flip one bit.
    Flip(prop::sample::Index, u8),
    /// Set one byte.
    Set(prop::sample::Index, u8),
    /// Keep only the first part.
    Cut(prop::sample::Index),
    /// Insert bytes.
    Insert(prop::sample::Index, Vec<u8>),
    /// Copy a stretch of another seed over this one from here on.
    Splice(
        prop::sample::Index,
        prop::sample::Index,
        prop::sample::Index,
        u16,
    ),
}

fn edit() -> impl Strategy<Value = Edit> {
    use prop::sample::Index;
    prop_oneof![
        4 => (any::<Index>(), 0u8..8).prop_map(|(i, b)| Edit::Flip(i, b)),
        3 => (any::<Index>(), any::<u8>()).prop_map(|(i, v)| Edit::Set(i, v)),
        1 => any::<Index>().prop_map(Edit::Cut),
        2 => (any::<Index>(), prop::collection::vec(any::<u8>(), 1..64))
            .prop_map(|(i, v)| Edit::Insert(i, v)),
        1 => (any::<Index>(), any::<Index>(), any::<Index>(), 1u16..512)
            .prop_map(|(w, s, f, n)| Edit::Splice(w, s, f, n)),
    ]
}

/// `seed`'s bytes (or nothing, without seeds) changed by `edits`.
fn mutate(seeds: &[Seed], seed: prop::sample::Index, edits: &[Edit]) -> Vec<u8> {
    let mut v = if seeds.is_empty() {
        Vec::new()
    } else {
        seeds[seed.index(seeds.len())].bytes.clone()
    };
    for e in edits {
        match e {
            Edit::Flip(i, b) if !v.is_empty() => {
                let i = i.index(v.len());
                v[i] ^= 1 << b;
            }
            Edit::Set(i, x) if !v.is_empty() => {
                let i = i.index(v.len());
                v[i] = *x;
            }
            Edit::Cut(i) => v.truncate(i.index(v.len() + 1)),
            Edit::Insert(i, bytes) => {
                let at = i.index(v.len() + 1);
                v.splice(at..at, bytes.iter().copied());
            }
            Edit::Splice(at, other, from, n) if !seeds.is_empty() => {
                let o = &seeds[other.index(seeds.len())].bytes;
                let from = from.index(o.len() + 1);
                let part = &o[from..(from + usize::from(*n)).min(o.len())];
                let at = at.index(v.len() + 1);
                let end = (at + part.len()).min(v.len());
                v.splice(at..end, part.iter().copied());
            }
            _ => {}
        }
    }
    v
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    prop::collection::vec(edit(), 1..8)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn parse_mutated(seed in any::<prop::sample::Index>(), e in edits()) {
        fuzz_common::parse::check(&mutate(seeds_of("parse"), seed, &e));
    }

    #[test]
    fn config_mutated(seed in any::<prop::sample::Index>(), e in edits()) {
        fuzz_common::config::check(&mutate(seeds_of("config"), seed, &e));
    }

    #[test]
    fn icarus_mutated(seed in any::<prop::sample::Index>(), e in edits()) {
        fuzz_common::icarus::check(&mutate(seeds_of("icarus"), seed, &e));
    }

    #[test]
    fn multicast_mutated(seed in any::<prop::sample::Index>(), e in edits()) {
        fuzz_common::multicast::check(&mutate(seeds_of("multicast"), seed, &e));
    }

    #[test]
    fn digest_mutated(seed in any::<prop::sample::Index>(), e in edits()) {
        fuzz_common::digest::check(&mutate(seeds_of("digest"), seed, &e));
    }
}

proptest! {
    // Capture seeds are up to 64 KiB, chain seeds up to 64 frames: fewer
    // cases.
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn capture_mutated(seed in any::<prop::sample::Index>(), e in edits()) {
        fuzz_common::capture::check(&mutate(seeds_of("capture"), seed, &e));
    }

    #[test]
    fn chain_mutated(seed in any::<prop::sample::Index>(), e in edits()) {
        fuzz_common::chain::check(&mutate(seeds_of("chain"), seed, &e));
    }

    #[test]
    fn peer_mutated(seed in any::<prop::sample::Index>(), e in edits()) {
        fuzz_common::peer::check(&mutate(seeds_of("peer"), seed, &e));
    }
}
