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
    /// Only these areas (comma separated): hash, bloom, cms, lpm, pipeline,
    /// sfb, stages.
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
    /// The target features the binary was compiled with.
    compiled_features: Vec<&'static str>,
    /// `kernels::platform::summary`: backend, hash instructions, CPU, build.
    kernels: String,
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
    if want("lpm") {
        figures.extend(bench::lpm::report());
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
    // The kernel targets hold for every SIMD backend (those the CPU lacks
    // have no figures, so no ratio).
    let simd: Vec<&str> = kernels::Backend::ALL
        .into_iter()
        .filter(|b| *b != kernels::Backend::Scalar)
        .map(kernels::Backend::name)
        .collect();
    for &b in &simd {
        let fig = |area: &str| format!("{area}/{b}");
        speedup(
            &format!("hash/ipv4 {b} vs scalar"),
            &fig("hash/ipv4"),
            "hash/ipv4/scalar",
            if b == "neon" { 2.0 } else { 4.0 },
        );
        speedup(
            &format!("hash/ipv4 {b} vs ahash"),
            &fig("hash/ipv4"),
            "hash/ipv4/ahash",
            2.0,
        );
        speedup(
            &format!("hash/ipv4 {b} vs xxh3"),
            &fig("hash/ipv4"),
            "hash/ipv4/xxh3",
            2.0,
        );
        speedup(
            &format!("bloom/query {b} vs sbbf-rs"),
            &fig("bloom/query"),
            "bloom/query/sbbf-rs",
            1.5,
        );
        speedup(
            &format!("bloom/query {b} vs fastbloom"),
            &fig("bloom/query"),
            "bloom/query/fastbloom",
            5.0,
        );
        speedup(
            &format!("cms/cu-update {b} vs count-min-sketch"),
            &fig("cms/cu-update"),
            "cms/cu-update/count-min-sketch",
            3.0,
        );
        speedup(
            &format!("cms/cu-update {b} vs streaming_algorithms"),
            &fig("cms/cu-update"),
            "cms/cu-update/streaming_algorithms",
            3.0,
        );
    }
    // t(16 ports) / t(64 ports) >= 1/1.2: 64 ports cost at most 20% more.
    speedup(
        "portfilter 64 vs 16 ports",
        "portfilter/query/64",
        "portfilter/query/16",
        0.833,
    );
    speedup(
        "heavy/zipf ours vs heavykeeper",
        "heavy/zipf/bloomplane",
        "heavy/zipf/heavykeeper",
        1.5,
    );
    // Batched longest-prefix match: twice the faster peer's lookups per
    // second on the 1M-prefix IPv4 table (issue #20).
    for peer in ["prefix-trie", "ip_network_table"] {
        speedup(
            &format!("lpm/ipv4-1M vs {peer}"),
            "lpm/ipv4-1M/bloomplane",
            &format!("lpm/ipv4-1M/{peer}"),
            2.0,
        );
        speedup(
            &format!("lpm/ipv6-200k vs {peer}"),
            "lpm/ipv6-200k/bloomplane",
            &format!("lpm/ipv6-200k/{peer}"),
            1.0,
        );
    }
    // The protocol between routers adds nothing per packet when no message
    // arrives: the routed router with it on within 3% of it off.
    // (t(routed) / t(routed-peering) >= 1 / 1.03.)
    speedup(
        "pipeline/router routed-peering vs routed",
        "pipeline/router/routed-peering",
        "pipeline/router/routed",
        1.0 / 1.03,
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
    for &b in &simd {
        ceiling(
            &format!("hash/ipv4 {b} ns/key"),
            &format!("hash/ipv4/{b}"),
            1.0,
        );
        ceiling(
            &format!("index/partitioned-k8 {b} ns/key"),
            &format!("index/partitioned-k8/{b}"),
            0.5,
        );
        ceiling(
            &format!("cms/cu-update {b} ns/key"),
            &format!("cms/cu-update/{b}"),
            8.0,
        );
        ceiling(
            &format!("bloom/query {b} ns/key"),
            &format!("bloom/query/{b}"),
            2.0,
        );
    }
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

    // The digest stage adds at most 15% to the chain (same run, rounds in
    // turn).
    if let (Some(&d), Some(&b)) = (
        by_name.get("pipeline/router/digest"),
        by_name.get("pipeline/router/default"),
    ) {
        ratios.push(Ratio {
            name: "pipeline/router digest vs default".into(),
            value: d / b,
            target: "<= 1.15x".into(),
            met: d / b <= 1.15,
        });
    }

    // SFB enqueue+dequeue per packet, batched: at most 20 ns per packet.
    for b in kernels::Backend::ALL.map(kernels::Backend::name) {
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

    // The fair profile's SFB at most 1.3 times sch_sfb's rules per packet,
    // each backend's pair measured in turn in this run.
    for b in kernels::Backend::ALL.map(kernels::Backend::name) {
        let fair = format!("sfb/enqueue-dequeue/{b}");
        let linux = format!("sfb/enqueue-dequeue-linux/{b}");
        if let (Some(&f), Some(&l)) = (by_name.get(fair.as_str()), by_name.get(linux.as_str())) {
            let v = f / l;
            ratios.push(Ratio {
                name: format!("sfb fair vs linux {b}"),
                value: v,
                target: "<= 1.3x".into(),
                met: v <= 1.3,
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

    let cpu = kernels::platform::cpu_model();
    let summary = kernels::platform::summary(backend);
    println!("{summary}");
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
        compiled_features: kernels::platform::compiled_features(),
        kernels: summary,
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
