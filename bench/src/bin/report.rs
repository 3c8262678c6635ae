//! The benchmark report: every headline figure, with ratios to the scalar
//! backend and to peer crates measured in the same run, as a table and JSON.
//!
//! `cargo run --release -p bench --bin report -- --json report.json`

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use bench::measure::Figure;
use clap::Parser;
use serde::Serialize;

/// Prints Bloomplane's headline benchmark figures.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Also write the report as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Only these areas (comma separated): hash, bloom, cms.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
}

/// A ratio between two figures of the same run, with the target it is held to.
#[derive(Debug, Serialize)]
struct Ratio {
    name: String,
    value: f64,
    target: String,
    met: bool,
}

#[derive(Debug, Serialize)]
struct Report {
    backend: String,
    figures: Vec<Figure>,
    ratios: Vec<Ratio>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let backend = kernels::Backend::from_env()
        .context("BLOOMPLANE_BACKEND")?
        .unwrap_or_else(kernels::Backend::best);
    let want = |area: &str| args.only.is_empty() || args.only.iter().any(|a| a == area);
    let mut figures = Vec::new();
    if want("hash") {
        figures.extend(bench::hash::report());
    }
    if want("bloom") {
        figures.extend(bench::bloom::report());
    }
    if want("cms") {
        figures.extend(bench::cms::report());
    }
    let by_name: BTreeMap<&str, f64> = figures
        .iter()
        .map(|f| (f.name.as_str(), f.ns_per_item))
        .collect();
    let mut ratios = Vec::new();
    let mut speedup = |name: &str, fast: &str, slow: &str, min: f64| {
        if let (Some(f), Some(s)) = (by_name.get(fast), by_name.get(slow)) {
            let v = s / f;
            ratios.push(Ratio {
                name: name.into(),
                value: v,
                target: format!(">= {min}x"),
                met: v >= min,
            });
        }
    };
    speedup(
        "hash/ipv4 avx2 vs scalar",
        "hash/ipv4/avx2",
        "hash/ipv4/scalar",
        4.0,
    );
    speedup(
        "hash/ipv4 avx2 vs ahash",
        "hash/ipv4/avx2",
        "hash/ipv4/ahash",
        2.0,
    );
    speedup(
        "hash/ipv4 avx2 vs xxh3",
        "hash/ipv4/avx2",
        "hash/ipv4/xxh3",
        2.0,
    );
    speedup(
        "hash/ipv4 neon vs scalar",
        "hash/ipv4/neon",
        "hash/ipv4/scalar",
        2.0,
    );
    let mut ceiling = |name: &str, fig: &str, max_ns: f64| {
        if let Some(&v) = by_name.get(fig) {
            ratios.push(Ratio {
                name: name.into(),
                value: v,
                target: format!("<= {max_ns} ns/key"),
                met: v <= max_ns,
            });
        }
    };
    ceiling("hash/ipv4 avx2 ns/key", "hash/ipv4/avx2", 1.0);
    ceiling(
        "index/partitioned-k8 avx2 ns/key",
        "index/partitioned-k8/avx2",
        0.5,
    );

    println!("{:<34} {:>10} {:>10}", "benchmark", "ns/item", "M items/s");
    for f in &figures {
        println!(
            "{:<34} {:>10.3} {:>10.1}",
            f.name, f.ns_per_item, f.mitems_per_s
        );
    }
    println!();
    println!(
        "{:<34} {:>10} {:>14} {:>5}",
        "ratio / ceiling", "value", "target", "met"
    );
    for r in &ratios {
        println!(
            "{:<34} {:>10.3} {:>14} {:>5}",
            r.name,
            r.value,
            r.target,
            if r.met { "yes" } else { "NO" }
        );
    }
    let report = Report {
        backend: backend.name().into(),
        figures,
        ratios,
    };
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
