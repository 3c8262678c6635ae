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
    /// Only these areas (comma separated): hash, bloom, cms, pipeline, sfb,
    /// stages.
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
    /// The CPU the figures come from (`/proc/cpuinfo`'s model name).
    cpu: String,
    backend: String,
    figures: Vec<Figure>,
    ratios: Vec<Ratio>,
    /// Heavy-flow recall and precision (area `pipeline`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    accuracy: Vec<bench::pipeline::Accuracy>,
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
    let mut accuracy = Vec::new();
    if want("pipeline") {
        figures.extend(bench::pipeline::report());
        figures.extend(bench::router::report());
        accuracy = bench::pipeline::accuracy();
    }
    if want("sfb") {
        figures.extend(bench::sfb::report());
    }
    if want("stages") {
        figures.extend(bench::stages::report());
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
    speedup(
        "bloom/query avx2 vs sbbf-rs",
        "bloom/query/avx2",
        "bloom/query/sbbf-rs",
        1.5,
    );
    speedup(
        "bloom/query avx2 vs fastbloom",
        "bloom/query/avx2",
        "bloom/query/fastbloom",
        5.0,
    );
    // t(16 ports) / t(64 ports) >= 1/1.2: 64 ports cost at most 20% more.
    speedup(
        "portfilter 64 vs 16 ports",
        "portfilter/query/64",
        "portfilter/query/16",
        0.833,
    );
    speedup(
        "cms/cu-update avx2 vs count-min-sketch",
        "cms/cu-update/avx2",
        "cms/cu-update/count-min-sketch",
        3.0,
    );
    speedup(
        "cms/cu-update avx2 vs streaming_algorithms",
        "cms/cu-update/avx2",
        "cms/cu-update/streaming_algorithms",
        3.0,
    );
    speedup(
        "heavy/zipf ours vs heavykeeper",
        "heavy/zipf/bloomplane",
        "heavy/zipf/heavykeeper",
        1.5,
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
    ceiling("cms/cu-update avx2 ns/key", "cms/cu-update/avx2", 8.0);
    ceiling("bloom/query avx2 ns/key", "bloom/query/avx2", 2.0);
    // 15 Mpps on one worker (10GbE line rate of 64-byte frames is 14.88).
    if let Some(&v) = by_name.get("pipeline/heavy/zipf64") {
        ratios.push(Ratio {
            name: "pipeline/heavy/zipf64 ns/packet".into(),
            value: v,
            target: "<= 66.7 ns/pkt".into(),
            met: v <= 66.7,
        });
    }

    // The whole router on one worker: 15 Mpps, 66.7 ns per packet.
    for fig in ["pipeline/router/default", "pipeline/router/core"] {
        if let Some(&v) = by_name.get(fig) {
            ratios.push(Ratio {
                name: format!("{fig} ns/packet"),
                value: v,
                target: "<= 66.7 ns/pkt".into(),
                met: v <= 66.7,
            });
        }
    }

    // SFB enqueue+dequeue per packet, batched: at most 20 ns per packet.
    for b in ["scalar", "avx2", "neon"] {
        let fig = format!("sfb/enqueue-dequeue/{b}");
        if let Some(&v) = by_name.get(fig.as_str()) {
            ratios.push(Ratio {
                name: format!("{fig} ns/packet"),
                value: v,
                target: "<= 20 ns/pkt".into(),
                met: v <= 20.0,
            });
        }
    }

    // Multicast egress-set query (64 interfaces) and icarus
    // check-and-update, batched: at most 5 ns per packet each.
    for fig in ["multicast/query/64", "icarus/check/v4"] {
        if let Some(&v) = by_name.get(fig) {
            ratios.push(Ratio {
                name: format!("{fig} ns/packet"),
                value: v,
                target: "<= 5 ns/pkt".into(),
                met: v <= 5.0,
            });
        }
    }

    let cpu = cpu_model();
    println!("cpu: {cpu}; kernel backend: {}", backend.name());
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
    if !accuracy.is_empty() {
        println!();
        println!(
            "{:<34} {:>6} {:>8} {:>6} {:>7} {:>9}",
            "heavy flows (>= 0.1% of packets)", "heavy", "reported", "tp", "recall", "precision"
        );
        for a in &accuracy {
            println!(
                "{:<34} {:>6} {:>8} {:>6} {:>7.3} {:>9.3}",
                a.name, a.heavy, a.reported, a.true_positives, a.recall, a.precision
            );
        }
    }
    let report = Report {
        cpu,
        backend: backend.name().into(),
        figures,
        ratios,
        accuracy,
    };
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// The CPU's model name and flags of note, from `/proc/cpuinfo` ("unknown"
/// elsewhere).
fn cpu_model() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |k: &str| {
        info.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    };
    let model = field("model name")
        .or_else(|| field("CPU part").map(|p| format!("CPU part {p}")))
        .unwrap_or_else(|| "unknown".into());
    let flags = field("flags").unwrap_or_default();
    let has = |f: &str| flags.split_whitespace().any(|x| x == f);
    let simd: Vec<&str> = ["avx2", "avx512f", "avx512vl"]
        .into_iter()
        .filter(|f| has(f))
        .collect();
    let cores = info.lines().filter(|l| l.starts_with("processor")).count();
    if simd.is_empty() {
        format!("{model}, {cores} cpus")
    } else {
        format!("{model}, {cores} cpus, {}", simd.join(" "))
    }
}
