//! `traffic-gen`: replay captures through the embedded dataplane, or write
//! synthetic ones. Run `traffic-gen --help`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use dataplane::pipeline::{MalformedPolicy, PipelineConfig};
use dataplane::stage::heavy::{HeavyConfig, Threshold};
use indicatif::{ProgressBar, ProgressStyle};
use traffic_gen::replay::{Input, Pacing, ReplayConfig, replay};
use traffic_gen::synth::{SynthConfig, write_pcap};

#[derive(Debug, Parser)]
#[command(name = "traffic-gen", version, about = "Bloomplane traffic generator")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Replay pcap/pcapng files (or, with none, a synthetic Zipf workload)
    /// through the embedded dataplane and report counters, latency and
    /// heavy flows.
    Replay(ReplayArgs),
    /// Write a synthetic Zipf workload as a pcap, with its ground truth in
    /// FILE.truth.json.
    Synth(SynthCmd),
}

#[derive(Debug, Args)]
struct SynthArgs {
    /// Distinct flows.
    #[arg(long, default_value_t = 10_000)]
    flows: u32,
    /// Packets.
    #[arg(long, default_value_t = 200_000)]
    packets: u64,
    /// Zipf exponent.
    #[arg(long, default_value_t = 1.1)]
    zipf_s: f64,
    /// Frame size in bytes (default: per-flow sizes between 64 and 1500).
    #[arg(long)]
    size: Option<u16>,
    /// RNG seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

impl SynthArgs {
    fn config(&self) -> SynthConfig {
        SynthConfig {
            flows: self.flows,
            packets: self.packets,
            zipf_s: self.zipf_s,
            size: self.size,
            seed: self.seed,
        }
    }
}

#[derive(Debug, Args)]
struct SynthCmd {
    /// Output pcap.
    #[arg(short = 'o', long = "output")]
    output: PathBuf,
    #[command(flatten)]
    synth: SynthArgs,
}

#[derive(Debug, Args)]
struct ReplayArgs {
    /// Capture files (pcap, pcapng, gzip); none: a synthetic Zipf workload.
    files: Vec<PathBuf>,
    /// Worker threads, pinned to cores.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Do not pin workers to cores.
    #[arg(long)]
    no_pin: bool,
    /// Send as fast as possible (the default).
    #[arg(long, conflicts_with_all = ["multiplier", "pps", "mbps"])]
    topspeed: bool,
    /// Original timing scaled by X (2.0: twice as fast).
    #[arg(long, value_name = "X")]
    multiplier: Option<f64>,
    /// Packets per second.
    #[arg(long, value_name = "N", conflicts_with_all = ["multiplier", "mbps"])]
    pps: Option<f64>,
    /// Megabits per second.
    #[arg(long, value_name = "N", conflicts_with_all = ["multiplier", "pps"])]
    mbps: Option<f64>,
    /// Send the input N times.
    #[arg(long = "loop", value_name = "N", default_value_t = 1)]
    loops: u32,
    /// Heavy-flow threshold as a share of the epoch's bytes, in percent.
    #[arg(long, default_value_t = 0.1)]
    heavy_percent: f64,
    /// Epoch length in milliseconds of capture time (default: one epoch).
    #[arg(long, value_name = "MS")]
    epoch_ms: Option<u64>,
    /// Forward malformed frames instead of dropping them (counted either way).
    #[arg(long)]
    pass_malformed: bool,
    /// Heavy flows shown per epoch on the terminal.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// Write the latency distribution (.hgrm percentile format, microseconds).
    #[arg(long, value_name = "FILE")]
    hgrm: Option<PathBuf>,
    /// Write the whole report as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write the heavy flows as JSON lines.
    #[arg(long, value_name = "FILE")]
    heavy_jsonl: Option<PathBuf>,
    #[command(flatten)]
    synth: SynthArgs,
}

fn run_replay(a: &ReplayArgs) -> Result<()> {
    if !(a.heavy_percent.is_finite() && a.heavy_percent > 0.0 && a.heavy_percent <= 100.0) {
        bail!(
            "--heavy-percent must be in (0, 100], got {}",
            a.heavy_percent
        );
    }
    let pacing = match (a.multiplier, a.pps, a.mbps) {
        (Some(m), _, _) => Pacing::Multiplier(m),
        (_, Some(p), _) => Pacing::Pps(p),
        (_, _, Some(m)) => Pacing::Mbps(m),
        _ => Pacing::TopSpeed,
    };
    let defaults = ReplayConfig::default();
    let cfg = ReplayConfig {
        workers: a.workers,
        pin: !a.no_pin,
        pacing,
        loops: a.loops,
        pipeline: PipelineConfig {
            malformed: if a.pass_malformed {
                MalformedPolicy::Pass
            } else {
                MalformedPolicy::Drop
            },
            ..PipelineConfig::default()
        },
        heavy: HeavyConfig {
            threshold: Threshold::ByteShare(a.heavy_percent / 100.0),
            epoch_ns: a.epoch_ms.map(|ms| ms.saturating_mul(1_000_000)),
            ..defaults.heavy
        },
    };
    let input = if a.files.is_empty() {
        Input::Synth(a.synth.config())
    } else {
        Input::Files(a.files.clone())
    };
    let progress = std::io::stderr().is_terminal().then(|| {
        let total = match &input {
            Input::Synth(s) => Some(s.packets * u64::from(a.loops)),
            Input::Files(_) => None,
        };
        let pb = total.map_or_else(ProgressBar::new_spinner, ProgressBar::new);
        if let Ok(style) = ProgressStyle::with_template(
            "{spinner} {elapsed_precise} {bar:40} {pos} packets {per_sec}",
        ) {
            pb.set_style(style);
        }
        pb
    });
    let report = replay(&input, &cfg, progress.as_ref());
    if let Some(pb) = &progress {
        pb.finish_and_clear();
    }
    let report = report?;
    let mut out = std::io::stdout().lock();
    report.write_text(&mut out, a.top)?;
    if let Some(p) = &a.hgrm {
        let mut f =
            std::fs::File::create(p).with_context(|| format!("{}: cannot create", p.display()))?;
        report
            .write_hgrm(&mut f)
            .with_context(|| format!("{}: write failed", p.display()))?;
    }
    if let Some(p) = &a.json {
        let f =
            std::fs::File::create(p).with_context(|| format!("{}: cannot create", p.display()))?;
        serde_json::to_writer_pretty(std::io::BufWriter::new(f), &report)
            .with_context(|| format!("{}: write failed", p.display()))?;
    }
    if let Some(p) = &a.heavy_jsonl {
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("{}: cannot create", p.display()))?,
        );
        for e in &report.heavy {
            e.write_json_lines(&mut f)
                .with_context(|| format!("{}: write failed", p.display()))?;
        }
    }
    Ok(())
}

fn run() -> Result<()> {
    let cli = Cli::parse();
    match &cli.command {
        Command::Replay(a) => run_replay(a),
        Command::Synth(s) => {
            let truth = write_pcap(s.synth.config(), &s.output)?;
            println!(
                "wrote {} packets, {} bytes, {} flows to {} ({} flows at or above 0.1% of bytes; truth in {}.truth.json)",
                truth.packets,
                truth.bytes,
                truth.flows.len(),
                s.output.display(),
                truth.heavy(0.001).count(),
                s.output.display()
            );
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("traffic-gen: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
