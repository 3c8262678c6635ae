//! `traffic-gen scenario sfb`: closed-loop scenarios in virtual time.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use dataplane::stage::sfb::SfbConfig;
use traffic_gen::Usage;
use traffic_gen::plot::plot_svg;
use traffic_gen::replay::write_hgrm;
use traffic_gen::scenario::{self, QueueKind, SfbScenarioConfig, markdown_table, run_sfb_scenario};

use super::output::{Output, check_writable, create_file, print_written, write_json};

#[derive(Debug, Subcommand)]
pub(crate) enum ScenarioCmd {
    /// AIMD (ECN) flows and one unresponsive UDP flow through one
    /// bottleneck, under SFB and under a drop-tail FIFO of the same limit.
    Sfb(SfbScenarioArgs),
}

#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub(crate) struct SfbScenarioArgs {
    /// AIMD flows; a comma-separated list runs one row per value.
    #[arg(long, value_delimiter = ',', default_value = "50")]
    pub(crate) aimd: Vec<u32>,
    /// The unresponsive flow's offered rate, in fair shares (rate / (aimd + 1)).
    #[arg(long, default_value_t = 10.0)]
    pub(crate) unresponsive_factor: f64,
    /// Bottleneck rate, Mbit/s.
    #[arg(long, default_value_t = 100.0)]
    pub(crate) rate_mbps: f64,
    /// Packet size, bytes.
    #[arg(long, default_value_t = 1500)]
    pub(crate) packet_bytes: u32,
    /// Queue limit, packets (SFB's limit and the drop-tail FIFO's).
    #[arg(long, default_value_t = 1000)]
    pub(crate) limit: usize,
    /// Base RTT of every flow (or the lower end with --rtt-max).
    #[arg(long, default_value = "50ms", value_parser = scenario::parse_duration)]
    pub(crate) rtt: u64,
    /// Draw per-flow base RTTs uniformly from [--rtt, --rtt-max].
    #[arg(long, value_parser = scenario::parse_duration)]
    pub(crate) rtt_max: Option<u64>,
    /// Simulated time.
    #[arg(long, default_value = "60s", value_parser = scenario::parse_duration)]
    pub(crate) duration: u64,
    /// Unmeasured start (default: a third of --duration).
    #[arg(long, value_parser = scenario::parse_duration)]
    pub(crate) warmup: Option<u64>,
    /// Seed (start times, RTTs, SFB's hash keys and coins).
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// SFB profile: `fair` (the router's default: the fair-share check in
    /// front of Blue) or `linux` (sch_sfb's rules).
    #[arg(long, value_parser = ["fair", "linux"])]
    pub(crate) sfb_profile: Option<String>,
    /// SFB `target` (bin count from which arrivals raise p_mark; default 20,
    /// the kernel's).
    #[arg(long)]
    pub(crate) sfb_target: Option<u16>,
    /// SFB `max` (bin count at which arrivals are dropped; default 22 in the
    /// fair profile, 25 in the linux profile, the kernel's).
    #[arg(long)]
    pub(crate) sfb_max: Option<u16>,
    /// SFB `increment` as a probability (kernel default 0.001).
    #[arg(long)]
    pub(crate) sfb_increment: Option<f64>,
    /// SFB `decrement` as a probability (kernel default 0.00017).
    #[arg(long)]
    pub(crate) sfb_decrement: Option<f64>,
    /// SFB levels L (default 8, the kernel's).
    #[arg(long)]
    pub(crate) sfb_levels: Option<usize>,
    /// SFB bins per level N, a power of two (default 16, the kernel's).
    #[arg(long)]
    pub(crate) sfb_bins: Option<u32>,
    /// SFB penalty box rate, packets per second (kernel default 10).
    #[arg(long)]
    pub(crate) sfb_penalty_rate: Option<u32>,
    /// SFB penalty box burst, packets (kernel default 20).
    #[arg(long)]
    pub(crate) sfb_penalty_burst: Option<u32>,
    /// Print every flow's throughput.
    #[arg(long)]
    pub(crate) per_flow: bool,
    /// Write the sojourn distributions (.hgrm, microseconds) as
    /// STEM-QUEUE-aimdN.EXT for each queue (sfb, droptail) and row.
    #[arg(long, value_name = "FILE")]
    pub(crate) hgrm: Option<PathBuf>,
    /// Write the reports (every row, every flow) as JSON.
    #[arg(long, value_name = "FILE")]
    pub(crate) json: Option<PathBuf>,
    /// Draw the sojourn distributions of every row and queue by percentile
    /// as an SVG (log scales, as HdrHistogram's plotter).
    #[arg(long, value_name = "FILE.svg")]
    pub(crate) plot: Option<PathBuf>,
}

pub(crate) fn run_scenario_sfb(a: &SfbScenarioArgs) -> Result<()> {
    if !(a.rate_mbps.is_finite() && a.rate_mbps > 0.0) {
        usage!("--rate-mbps must be positive, got {}", a.rate_mbps);
    }
    let mut d = SfbScenarioConfig::evaluation_sfb();
    if a.sfb_profile.as_deref() == Some("linux") {
        d.profile = dataplane::stage::sfb::SfbProfile::Linux;
    }
    let sfb = SfbConfig {
        target: a.sfb_target.unwrap_or(d.target),
        max: a.sfb_max.or(d.max),
        increment: a.sfb_increment.map_or(d.increment, SfbConfig::prob),
        decrement: a.sfb_decrement.map_or(d.decrement, SfbConfig::prob),
        levels: a.sfb_levels.unwrap_or(d.levels),
        log2_bins: match a.sfb_bins {
            Some(n) if n.is_power_of_two() => n.trailing_zeros(),
            Some(n) => usage!("--sfb-bins must be a power of two, got {n}"),
            None => d.log2_bins,
        },
        penalty_rate: a.sfb_penalty_rate.unwrap_or(d.penalty_rate),
        penalty_burst: a.sfb_penalty_burst.unwrap_or(d.penalty_burst),
        ..d
    };
    // Output files are checked first, so a bad path fails at once.
    let json = Output::check("--json", a.json.as_deref())?;
    if let Some(p) = &a.plot {
        check_writable("--plot", p)?;
    }
    let mut hgrms = BTreeMap::new();
    if let Some(p) = &a.hgrm {
        for &aimd in &a.aimd {
            for q in [QueueKind::Sfb, QueueKind::DropTail] {
                let path = hgrm_path(p, q.name(), aimd);
                check_writable("--hgrm", &path)?;
                hgrms.insert((q.name(), aimd), path);
            }
        }
    }
    let mut reports = Vec::new();
    let mut written = Vec::new();
    let mut out = std::io::stdout().lock();
    for (i, &aimd) in a.aimd.iter().enumerate() {
        let cfg = SfbScenarioConfig {
            aimd,
            unresponsive_factor: a.unresponsive_factor,
            rate_bps: (a.rate_mbps * 1e6).round() as u64,
            packet_bytes: a.packet_bytes,
            limit: a.limit,
            rtt_ns: a.rtt,
            rtt_max_ns: a.rtt_max,
            duration_ns: a.duration,
            warmup_ns: a.warmup.unwrap_or(a.duration / 3),
            seed: a.seed,
            sfb,
        };
        let started = std::time::Instant::now();
        let rep = run_sfb_scenario(&cfg)?;
        if i > 0 {
            writeln!(out)?;
        }
        rep.write_text(&mut out, a.per_flow)?;
        writeln!(out, "(wall time {:.2} s)", started.elapsed().as_secs_f64())?;
        for r in &rep.results {
            if let Some(path) = hgrms.remove(&(r.queue.name(), aimd)) {
                let mut f = std::io::BufWriter::new(create_file("--hgrm", &path)?);
                write_hgrm(&r.histogram, &mut f)
                    .and_then(|()| f.flush())
                    .with_context(|| format!("{}: write failed", path.display()))?;
                written.push(path);
            }
        }
        reports.push(rep);
    }
    writeln!(out)?;
    write!(out, "{}", markdown_table(&reports))?;
    if let Some(p) = &a.plot {
        let names: Vec<String> = reports
            .iter()
            .flat_map(|rep| {
                rep.results
                    .iter()
                    .map(move |r| format!("{} sojourn, {} AIMD", r.queue.name(), rep.aimd))
            })
            .collect();
        let hists: Vec<(&str, &hdrhistogram::Histogram<u64>)> = names
            .iter()
            .map(String::as_str)
            .zip(
                reports
                    .iter()
                    .flat_map(|rep| rep.results.iter().map(|r| &r.histogram)),
            )
            .collect();
        plot_svg(p, "scenario sfb", &hists, &[])?;
        written.push(p.clone());
    }
    written.extend(write_json(json, &reports)?);
    print_written(&mut out, &written)
}

/// `dir/stem.ext` -> `dir/stem-QUEUE-aimdN.ext`.
pub(crate) fn hgrm_path(p: &std::path::Path, queue: &str, aimd: u32) -> PathBuf {
    let stem = p
        .file_stem()
        .map_or_else(|| "sojourn".into(), |s| s.to_string_lossy().into_owned());
    let name = match p.extension() {
        Some(e) => format!("{stem}-{queue}-aimd{aimd}.{}", e.to_string_lossy()),
        None => format!("{stem}-{queue}-aimd{aimd}"),
    };
    p.with_file_name(name)
}
