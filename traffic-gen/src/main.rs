//! `traffic-gen`: replay captures through the embedded dataplane, or write
//! synthetic ones. Run `traffic-gen --help`.
//!
//! Results are never thrown away: output files are created before a run
//! (a bad path fails at once, naming the flag), a capture with a defect
//! part-way is replayed up to it (exit status 2), and Ctrl-C or SIGTERM
//! during `replay` stops the sending, prints the summary and writes the
//! outputs of what was done (exit status 130).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use anyhow::{Context, Result};
use clap::parser::ValueSource;
use clap::{Args, CommandFactory, Parser, Subcommand};
use dataplane::cli::{CompletionsArgs, EXIT_USAGE, ManArgs};
use dataplane::config::{IoBackend, MacAddr, RouterConfig, ThresholdConfig};
use dataplane::pipeline::MalformedPolicy;
use dataplane::stage::sfb::SfbConfig;
use dataplane::wire::icarus::FilterWidth;
use indicatif::{ProgressBar, ProgressStyle};
use traffic_gen::Usage;
use traffic_gen::input::{InputError, Limits, Stop};
use traffic_gen::live::{Endpoint, LiveConfig, run_live_with_stop};
use traffic_gen::plot::plot_svg;
use traffic_gen::replay::{
    DEFAULT_ROUTER, DmacRewrite, Input, MacRewrite, Pacing, ReplayConfig, TimeFormat,
    default_router, hgrm_paths, replay_with_stop, write_hgrm,
};
use traffic_gen::scenario::{self, QueueKind, SfbScenarioConfig, markdown_table, run_sfb_scenario};
use traffic_gen::synth::{SynthConfig, write_pcap};
use traffic_gen::synth_icarus::{self, HopRange, IcarusSynthConfig};
use traffic_gen::synth_mcast::McastConfig;
use traffic_gen::synth_router::{self, RouterSynthConfig};
use traffic_gen::throughput::{self, ThroughputConfig, run_throughput};

/// The exit statuses, as `--help` shows them.
const EXIT_STATUS: &str = "\
Exit status:
  0    done
  1    error: the run failed, or could not start (the message names the
       file, offset, flag or interface)
  2    replay completed with input errors: a capture had a defect part-way
       (cut short, a bad record, garbage after the data); what precedes it
       was replayed, the next file read, and each defect is in the warnings
       and the JSON report's input_errors
  64   usage: an unknown flag, a missing or malformed value, a value out of
       range, flags that exclude each other (nothing was run)
  130  replay interrupted (SIGINT/Ctrl-C or SIGTERM): the summary and the
       --json/--hgrm/--heavy-jsonl/--plot/--write outputs cover what was
       sent (a second signal a second or more later exits at once, writing
       nothing)
  141  replay -v stopped because its standard output was closed (| head),
       as tcpdump ends on SIGPIPE (128 + 13); the outputs cover what was
       sent, as at an interrupt";

/// Returns a [`Usage`] error from the enclosing function.
macro_rules! usage {
    ($($t:tt)*) => {
        return Err(Usage(format!($($t)*)).into())
    };
}

/// How a command ended, short of an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Everything done.
    Done,
    /// Replayed up to a defect in some input file.
    InputErrors,
    /// Stopped by a signal, outputs written.
    Interrupted,
    /// `-v`'s standard output was closed: stopped as by a signal.
    OutputClosed,
}

impl Outcome {
    /// A replay's outcome: an interruption before input errors.
    fn of_replay(interrupted: bool, input_errors: &[InputError]) -> Self {
        if interrupted {
            Outcome::Interrupted
        } else if input_errors.is_empty() {
            Outcome::Done
        } else {
            Outcome::InputErrors
        }
    }

    fn exit_code(self) -> ExitCode {
        match self {
            Outcome::Done => ExitCode::SUCCESS,
            Outcome::InputErrors => ExitCode::from(2),
            Outcome::Interrupted => ExitCode::from(130),
            Outcome::OutputClosed => ExitCode::from(141),
        }
    }
}

#[derive(Debug, Parser)]
#[command(
    name = "traffic-gen",
    version,
    about = "Bloomplane traffic generator",
    after_help = EXIT_STATUS
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Replay pcap/pcapng files (or, with none, a synthetic workload)
    /// through the embedded router (--config FILE, or the built-in one) in
    /// capture time and report counters per port and stage, latency and
    /// heavy flows. A capture with a defect part-way is replayed up to it
    /// (exit status 2); a file that cannot be opened or whose header is bad
    /// fails the run before anything is sent, one of several included.
    /// Ctrl-C or SIGTERM stops, prints the summary of what was sent and
    /// writes the outputs (exit status 130).
    #[command(after_help = EXIT_STATUS)]
    Replay(Box<ReplayArgs>),
    /// Write a synthetic workload (--kind: Zipf flows, multicast, Icarus,
    /// the built-in router's) as a capture, with its ground truth beside it.
    Synth(SynthCmd),
    /// Closed-loop scenarios against the embedded dataplane in virtual time.
    #[command(subcommand)]
    Scenario(ScenarioCmd),
    /// The zero-loss rate between two live interfaces (RFC 2544 style): per
    /// frame size, a binary search of the offered rate at which at most
    /// --loss of the frames are lost; unique frames made as they are sent,
    /// sent from --tx and matched at --rx (needs CAP_NET_RAW).
    Throughput(ThroughputArgs),
    /// Where did a packet come from? Asks the router nearest the victim
    /// whether it forwarded the packet and from which port, then the
    /// routers behind those ports, hop by hop backwards (SPIE digests:
    /// the routers' [digest] tables, live on their telemetry listeners or
    /// kept by `replay --digests`).
    Traceback(traffic_gen::traceback::cli::TracebackArgs),
    /// Print a shell completion script (bash, elvish, fish, powershell, zsh).
    Completions(CompletionsArgs),
    /// Print the manual page (roff), or a subcommand's (`man replay`);
    /// --dir writes every page.
    Man(ManArgs),
}

#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
struct ThroughputArgs {
    /// Send out of IFACE.
    #[arg(long, value_name = "IFACE")]
    tx: String,
    /// Open --tx in network namespace NAME (/var/run/netns/NAME).
    #[arg(long, value_name = "NAME")]
    tx_netns: Option<String>,
    /// Receive on IFACE.
    #[arg(long, value_name = "IFACE")]
    rx: String,
    /// Open --rx in network namespace NAME.
    #[arg(long, value_name = "NAME")]
    rx_netns: Option<String>,
    /// Packet I/O of the sender and receiver: pnet (a system call per
    /// frame) or ring (sendmmsg batches, a TPACKET_V3 receive ring).
    #[arg(long, default_value = "pnet", value_parser = parse_io)]
    io: IoBackend,
    /// Sender threads, each with its own socket and every N-th frame (one
    /// sender tops out near a million frames per second).
    #[arg(long, value_name = "N", default_value_t = 1)]
    tx_threads: u32,
    /// Frame sizes, bytes as sent (no FCS), comma-separated, each in 60..=9000.
    #[arg(long, default_value = "64,128,256,512,1024,1280,1518", value_parser = parse_sizes)]
    size: Sizes,
    /// One trial's length (5s, 500ms).
    #[arg(long, default_value = "5s", value_parser = scenario::parse_duration)]
    duration: u64,
    /// Largest lost fraction of a trial that passes (0.001 = 0.1%).
    #[arg(long, default_value_t = 0.001)]
    loss: f64,
    /// Flows the frames are spread over (round robin).
    #[arg(long, default_value_t = 1024)]
    flows: u32,
    /// Start the search here (pps) instead of at the sender's top-speed rate.
    #[arg(long, value_name = "P")]
    max_pps: Option<f64>,
    /// Stop when the search interval is within this fraction of the rate.
    #[arg(long, value_name = "R", default_value_t = 0.01)]
    resolution: f64,
    /// Stop after this many rates per size.
    #[arg(long, default_value_t = 16)]
    max_trials: u32,
    /// Trials per rate: a rate passes only when all of them do (the first
    /// failure ends them), as RFC 2544 repeats its trials.
    #[arg(long, value_name = "N", default_value_t = 1)]
    repeat: u32,
    /// Pause between trials so that queues drain.
    #[arg(long, default_value = "500ms", value_parser = scenario::parse_duration)]
    pause: u64,
    /// Receive buffer (or ring) size, bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 32 << 20)]
    rx_buffer: usize,
    /// Frames not received this many ms after the last send are lost.
    #[arg(long, value_name = "MS", default_value_t = 200)]
    rx_grace: u64,
    /// Write the report (every trial) as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

/// `--size`'s list as one value (clap would otherwise split it itself and
/// lose the list's context in errors).
#[derive(Debug, Clone)]
struct Sizes(Vec<u16>);

fn parse_sizes(s: &str) -> Result<Sizes, String> {
    throughput::parse_sizes(s)
        .map(Sizes)
        .map_err(|e| format!("{e:#}"))
}

fn parse_io(s: &str) -> Result<IoBackend, String> {
    s.parse()
}

fn run_throughput_cmd(a: &ThroughputArgs) -> Result<()> {
    let cfg = ThroughputConfig {
        tx: Endpoint {
            interface: a.tx.clone(),
            netns: a.tx_netns.clone(),
        },
        rx: Endpoint {
            interface: a.rx.clone(),
            netns: a.rx_netns.clone(),
        },
        io: a.io,
        tx_threads: a.tx_threads,
        sizes: a.size.0.clone(),
        duration: std::time::Duration::from_nanos(a.duration),
        max_loss: a.loss,
        flows: a.flows,
        max_pps: a.max_pps,
        resolution: a.resolution,
        max_trials: a.max_trials,
        repeat: a.repeat,
        rx_buffer_bytes: a.rx_buffer,
        grace: std::time::Duration::from_millis(a.rx_grace),
        pause: std::time::Duration::from_nanos(a.pause),
    };
    cfg.validate().map_err(|e| Usage(format!("{e:#}")))?;
    // The output file is checked first, so a bad path fails at once.
    let json = Output::check("--json", a.json.as_deref())?;
    let report = run_throughput(&cfg)?;
    let mut out = std::io::stdout().lock();
    report.write_text(&mut out)?;
    let written: Vec<PathBuf> = write_json(json, &report)?.into_iter().collect();
    print_written(&mut out, &written)
}

#[derive(Debug, Subcommand)]
enum ScenarioCmd {
    /// AIMD (ECN) flows and one unresponsive UDP flow through one
    /// bottleneck, under SFB and under a drop-tail FIFO of the same limit.
    Sfb(SfbScenarioArgs),
}

#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
struct SfbScenarioArgs {
    /// AIMD flows; a comma-separated list runs one row per value.
    #[arg(long, value_delimiter = ',', default_value = "50")]
    aimd: Vec<u32>,
    /// The unresponsive flow's offered rate, in fair shares (rate / (aimd + 1)).
    #[arg(long, default_value_t = 10.0)]
    unresponsive_factor: f64,
    /// Bottleneck rate, Mbit/s.
    #[arg(long, default_value_t = 100.0)]
    rate_mbps: f64,
    /// Packet size, bytes.
    #[arg(long, default_value_t = 1500)]
    packet_bytes: u32,
    /// Queue limit, packets (SFB's limit and the drop-tail FIFO's).
    #[arg(long, default_value_t = 1000)]
    limit: usize,
    /// Base RTT of every flow (or the lower end with --rtt-max).
    #[arg(long, default_value = "50ms", value_parser = scenario::parse_duration)]
    rtt: u64,
    /// Draw per-flow base RTTs uniformly from [--rtt, --rtt-max].
    #[arg(long, value_parser = scenario::parse_duration)]
    rtt_max: Option<u64>,
    /// Simulated time.
    #[arg(long, default_value = "60s", value_parser = scenario::parse_duration)]
    duration: u64,
    /// Unmeasured start (default: a third of --duration).
    #[arg(long, value_parser = scenario::parse_duration)]
    warmup: Option<u64>,
    /// Seed (start times, RTTs, SFB's hash keys and coins).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// SFB profile: `fair` (the router's default: the fair-share check in
    /// front of Blue) or `linux` (sch_sfb's rules).
    #[arg(long, value_parser = ["fair", "linux"])]
    sfb_profile: Option<String>,
    /// SFB `target` (bin count from which arrivals raise p_mark; default 20,
    /// the kernel's).
    #[arg(long)]
    sfb_target: Option<u16>,
    /// SFB `max` (bin count at which arrivals are dropped; default 22 in the
    /// fair profile, 25 in the linux profile, the kernel's).
    #[arg(long)]
    sfb_max: Option<u16>,
    /// SFB `increment` as a probability (kernel default 0.001).
    #[arg(long)]
    sfb_increment: Option<f64>,
    /// SFB `decrement` as a probability (kernel default 0.00017).
    #[arg(long)]
    sfb_decrement: Option<f64>,
    /// SFB levels L (default 8, the kernel's).
    #[arg(long)]
    sfb_levels: Option<usize>,
    /// SFB bins per level N, a power of two (default 16, the kernel's).
    #[arg(long)]
    sfb_bins: Option<u32>,
    /// SFB penalty box rate, packets per second (kernel default 10).
    #[arg(long)]
    sfb_penalty_rate: Option<u32>,
    /// SFB penalty box burst, packets (kernel default 20).
    #[arg(long)]
    sfb_penalty_burst: Option<u32>,
    /// Print every flow's throughput.
    #[arg(long)]
    per_flow: bool,
    /// Write the sojourn distributions (.hgrm, microseconds) as
    /// STEM-QUEUE-aimdN.EXT for each queue (sfb, droptail) and row.
    #[arg(long, value_name = "FILE")]
    hgrm: Option<PathBuf>,
    /// Write the reports (every row, every flow) as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Draw the sojourn distributions of every row and queue by percentile
    /// as an SVG (log scales, as HdrHistogram's plotter).
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
}

/// Creates the file `path` of `flag`, naming both when it cannot.
fn create_file(flag: &str, path: &Path) -> Result<File> {
    File::create(path).with_context(|| format!("{flag} {}: cannot create", path.display()))
}

/// Checks that the output file `path` of `flag` can be written, without
/// leaving a file behind (the writer creates it once the settings are
/// checked): a bad path fails at once, naming the flag and the path.
fn check_writable(flag: &str, path: &Path) -> Result<()> {
    let existed = path.exists();
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .with_context(|| format!("{flag} {}: cannot create", path.display()))?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// An output file of a run: checked before it ([`Output::check`]), so
/// that a bad path fails at once, and created when the results are
/// written, so that a run that fails leaves a file of that name as it was
/// (a previous run's results) or absent, not empty.
#[derive(Debug, Clone, Copy)]
struct Output<'p> {
    flag: &'static str,
    path: &'p Path,
}

impl<'p> Output<'p> {
    /// [`check_writable`] on `path`, if given.
    fn check(flag: &'static str, path: Option<&'p Path>) -> Result<Option<Self>> {
        path.map(|path| check_writable(flag, path).map(|()| Output { flag, path }))
            .transpose()
    }

    /// Creates (or truncates) the file.
    fn create(&self) -> Result<File> {
        create_file(self.flag, self.path)
    }
}

/// Writes `value` as JSON into `out`; returns the path written.
fn write_json(out: Option<Output<'_>>, value: &impl serde::Serialize) -> Result<Option<PathBuf>> {
    let Some(o) = out else { return Ok(None) };
    let (p, f) = (o.path, o.create()?);
    let mut w = std::io::BufWriter::new(f);
    serde_json::to_writer_pretty(&mut w, value)
        .map_err(std::io::Error::from)
        .and_then(|()| w.flush())
        .with_context(|| format!("{}: write failed", p.display()))?;
    Ok(Some(p.to_path_buf()))
}

/// A `wrote FILE` line for each output file a command wrote (as the
/// replay's `--write` captures are listed), after its summary; a reader
/// gone from standard output is no error.
fn print_written(out: &mut impl Write, files: &[PathBuf]) -> Result<()> {
    for f in files {
        quiet_on_closed_pipe(writeln!(out, "wrote {}", f.display()))?;
    }
    Ok(())
}

fn run_scenario_sfb(a: &SfbScenarioArgs) -> Result<()> {
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
fn hgrm_path(p: &std::path::Path, queue: &str, aimd: u32) -> PathBuf {
    let stem = p
        .file_stem()
        .map_or_else(|| "sojourn".into(), |s| s.to_string_lossy().into_owned());
    let name = match p.extension() {
        Some(e) => format!("{stem}-{queue}-aimd{aimd}.{}", e.to_string_lossy()),
        None => format!("{stem}-{queue}-aimd{aimd}"),
    };
    p.with_file_name(name)
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
    /// Seed: the synthetic workload's RNG, and (replay) every hash key the
    /// router config leaves to chance, so the same input, config and seed
    /// give the same run.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Every frame distinct (packet number in the IPv4 identification and
    /// the payload), for `replay --rx` latency under loss.
    #[arg(long)]
    unique: bool,
}

impl SynthArgs {
    fn config(&self) -> SynthConfig {
        SynthConfig {
            flows: self.flows,
            packets: self.packets,
            zipf_s: self.zipf_s,
            size: self.size,
            seed: self.seed,
            unique: self.unique,
        }
    }
}

/// Which synthetic workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum SynthKind {
    /// Zipf flows (heavy hitters); truth in FILE.truth.json.
    Zipf,
    /// Multicast joins/leaves/data over several interfaces, as pcapng with
    /// one interface per port (p0, p1, ...); truth (ingress and exact
    /// egress set per packet) in FILE.mcast.json.
    Multicast,
    /// UDP packets carrying Icarus loop-detection filters as they look
    /// after --hops hops; truth (on a loop, exact verdict of --node-id per
    /// packet) in FILE.icarus.json.
    Icarus,
    /// The built-in router's workload (Zipf unicast, an unresponsive flow,
    /// reverse traffic, IGMPv3/MLDv2 and multicast data, Icarus packets) as
    /// pcapng with interfaces r-a, r-b, r-c; truth in FILE.router.json.
    Router,
}

#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
struct SynthCmd {
    /// Output capture (pcap for zipf and icarus, pcapng for multicast and
    /// router).
    #[arg(short = 'o', long = "output")]
    output: PathBuf,
    /// Workload kind.
    #[arg(long, value_enum, default_value_t = SynthKind::Zipf)]
    kind: SynthKind,
    /// Multicast: interfaces (1..=64).
    #[arg(long, default_value_t = 8)]
    ports: usize,
    /// Multicast: distinct groups.
    #[arg(long, default_value_t = 64)]
    groups: u32,
    /// Multicast: capture time between packets, microseconds.
    #[arg(long, default_value_t = 10_000)]
    gap_us: u64,
    #[command(flatten)]
    synth: SynthArgs,
    #[command(flatten, next_help_heading = "Icarus (--kind icarus)")]
    icarus: IcarusArgs,
}

#[derive(Debug, Args)]
struct IcarusArgs {
    /// Icarus: filter bits m (64, 128 or 256).
    #[arg(long, default_value = "128", value_name = "BITS", value_parser = synth_icarus::parse_width)]
    width: FilterWidth,
    /// Icarus: mask bits k (default: the dataplane's default for the width:
    /// 5, 10, 19 for m = 64, 128, 256).
    #[arg(long)]
    k: Option<usize>,
    /// Icarus: the checking node (the router that will see the packets).
    #[arg(long, default_value_t = 1)]
    node_id: u64,
    /// Icarus: the domain seed turning node ids into masks (`icarus.seed`;
    /// default: the built-in one).
    #[arg(long, value_name = "SEED", value_parser = synth_icarus::parse_seed)]
    domain_seed: Option<u64>,
    /// Icarus: hops before the checking node, H or a range A..=B (A..B is
    /// half-open), drawn uniformly; at most 64.
    #[arg(long, default_value = "1..=10", value_parser = synth_icarus::parse_hops)]
    hops: HopRange,
    /// Icarus: share of packets on a looping path (through the checking node before).
    #[arg(long, default_value_t = 0.1, value_name = "F", value_parser = synth_icarus::parse_fraction)]
    loop_fraction: f64,
    /// Icarus: share of IPv6 packets.
    #[arg(long, default_value_t = 0.3, value_name = "F", value_parser = synth_icarus::parse_fraction)]
    v6_fraction: f64,
}

fn run_synth_router(s: &SynthCmd) -> Result<()> {
    let cfg = RouterSynthConfig {
        packets: s.synth.packets,
        flows: s.synth.flows,
        zipf_s: s.synth.zipf_s,
        seed: s.synth.seed,
        ..RouterSynthConfig::default()
    };
    let truth = synth_router::write_pcapng(cfg, &s.output)?;
    println!(
        "wrote {} (truth in {}); {}",
        s.output.display(),
        synth_router::truth_path(&s.output).display(),
        truth.summary()
    );
    Ok(())
}

fn run_synth_icarus(s: &SynthCmd) -> Result<()> {
    let a = &s.icarus;
    let cfg = IcarusSynthConfig {
        node_id: a.node_id,
        width: a.width,
        k: a.k,
        domain_seed: a
            .domain_seed
            .unwrap_or(IcarusSynthConfig::default().domain_seed),
        hops: a.hops,
        loop_fraction: a.loop_fraction,
        v6_fraction: a.v6_fraction,
        packets: s.synth.packets,
        seed: s.synth.seed,
    };
    let truth = synth_icarus::write_pcap(cfg, &s.output)?;
    println!(
        "wrote {} packets ({} IPv4, {} IPv6) to {} (truth in {})",
        truth.packets,
        truth.packets - truth.v6_packets,
        truth.v6_packets,
        s.output.display(),
        synth_icarus::truth_path(&s.output).display()
    );
    println!("{}", truth.summary());
    Ok(())
}

#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
struct ReplayArgs {
    /// Capture files (pcap, pcapng, gzip; `-`: standard input, as tcpdump
    /// -r - reads it); none: a synthetic workload.
    files: Vec<PathBuf>,
    /// A capture file to read, as tcpdump's -r (repeatable; read before the
    /// files given without it).
    #[arg(short = 'r', long = "read", value_name = "FILE")]
    read: Vec<PathBuf>,
    /// The router to run (a router.toml, as `dataplane run --config` takes);
    /// default: the built-in router (see --print-config).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print the built-in router's configuration and exit.
    #[arg(long)]
    print_config: bool,
    /// The interface the frames of a plain pcap arrive on (pcapng
    /// interfaces map to the router's by name, else by index); default: the
    /// first interface.
    #[arg(long, value_name = "NAME")]
    ingress: Option<String>,
    /// Write what leaves each port as DIR/<interface>.pcap (departure
    /// times, the bytes as sent).
    #[arg(long, short = 'w', value_name = "DIR")]
    write: Option<PathBuf>,
    /// Rewrite the destination MAC of unicast frames as they enter the
    /// router, as tcprewrite's --enet-dmac: alone, to the router's own MAC
    /// on the routed port a frame arrives on (so any capture can go
    /// through a routed config: no `other_host` drops); --enet-dmac=MAC,
    /// to MAC on every frame. Broadcast and multicast frames keep theirs.
    #[arg(
        long,
        value_name = "MAC",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "port",
        value_parser = parse_dmac
    )]
    enet_dmac: Option<DmacRewrite>,
    /// Rewrite the source MAC of every frame to MAC as it enters the
    /// router, as tcprewrite's --enet-smac.
    #[arg(long, value_name = "MAC", value_parser = parse_mac)]
    enet_smac: Option<MacAddr>,
    /// Keep the router's packet digests (its [digest] table) in DIR when
    /// the replay ends, for `traceback --digests DIR`.
    #[arg(long, value_name = "DIR")]
    digests: Option<PathBuf>,

    /// Worker threads, pinned to cores.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Do not pin workers to cores.
    #[arg(long)]
    no_pin: bool,
    /// Send as fast as possible (the default).
    #[arg(short = 't', long, conflicts_with_all = ["multiplier", "pps", "mbps"])]
    topspeed: bool,
    /// Original timing scaled by X (2.0: twice as fast).
    #[arg(short = 'x', long, value_name = "X", value_parser = positive_f64)]
    multiplier: Option<f64>,
    /// Packets per second.
    #[arg(short = 'p', long, value_name = "N", value_parser = positive_f64,
          conflicts_with_all = ["multiplier", "mbps"])]
    pps: Option<f64>,
    /// Megabits per second.
    #[arg(short = 'M', long, value_name = "N", value_parser = positive_f64,
          conflicts_with_all = ["multiplier", "pps"])]
    mbps: Option<f64>,
    /// Send the input N times.
    #[arg(short = 'l', long = "loop", value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..))]
    loops: u32,
    /// Stop after N packets (over every pass and file), as tcpreplay's
    /// --limit.
    #[arg(short = 'c', long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    limit: Option<u64>,
    /// Stop sending this long after the start (wall clock: 30s, 500ms), as
    /// tcpreplay's --duration.
    #[arg(long, value_name = "T", value_parser = scenario::parse_duration)]
    duration: Option<u64>,
    /// Send only the records that match this BPF expression, as tcpdump
    /// reads it ('udp and port 53'; compiled by libpcap, loaded at run
    /// time).
    #[arg(long, value_name = "EXPR")]
    filter: Option<String>,
    /// Print a line per packet once the router decided it, as tcpdump
    /// prints packets: seconds since the first, ingress interface, VLAN
    /// tags, flow (fragments as `frag (OFFSET|LENGTH)`), length, verdict
    /// (forward PORTS / mark CE / drop REASON). One worker. The replay
    /// stops when standard output is closed (`| head`).
    #[arg(short = 'v', long, conflicts_with = "tx")]
    verbose: bool,
    /// -v with times as seconds since the Unix epoch (tcpdump's -tt).
    #[arg(long, group = "time_format", conflicts_with = "tx")]
    tt: bool,
    /// -v with times as the time since the previous packet, HH:MM:SS.us
    /// (tcpdump's -ttt).
    #[arg(long, group = "time_format", conflicts_with = "tx")]
    ttt: bool,
    /// -v with times as the local date and time, YYYY-MM-DD
    /// HH:MM:SS.us (tcpdump's -tttt; TZ applies).
    #[arg(long, group = "time_format", conflicts_with = "tx")]
    tttt: bool,
    /// -v with times as the time since the first packet, HH:MM:SS.us
    /// (tcpdump's -ttttt).
    #[arg(long, group = "time_format", conflicts_with = "tx")]
    ttttt: bool,
    /// Heavy-flow threshold as a share of the epoch's bytes, in percent
    /// (overrides the config's `heavy.threshold`).
    #[arg(long)]
    heavy_percent: Option<f64>,
    /// Heavy-flow epoch length in milliseconds of capture time (overrides
    /// the config's `heavy.epoch_ms`).
    #[arg(long, value_name = "MS")]
    epoch_ms: Option<u64>,
    /// Forward malformed frames instead of dropping them (counted either way).
    #[arg(long)]
    pass_malformed: bool,
    /// Heavy flows shown per epoch on the terminal.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// Write the latency distributions (.hgrm percentile format,
    /// microseconds): FILE's stem with -processing, -sojourn and -through
    /// (embedded), or FILE itself (live, with --rx).
    #[arg(long, value_name = "FILE")]
    hgrm: Option<PathBuf>,
    /// Write the whole report as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Draw the run as an SVG: latency by percentile (every distribution,
    /// log scales, as HdrHistogram's plotter) and, embedded, each shaped
    /// port's backlog and SFB marking probability over capture time.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Live, with --rx: write the send-to-receive latency as an
    /// HdrHistogram interval log (one histogram per second of the run,
    /// microseconds), for latency over time on long runs.
    #[arg(long, value_name = "FILE.hlog", requires = "rx")]
    hlog: Option<PathBuf>,
    /// Write the heavy flows as JSON lines.
    #[arg(long, value_name = "FILE")]
    heavy_jsonl: Option<PathBuf>,
    /// Live: send the capture's frames out of interface IFACE (AF_PACKET,
    /// needs CAP_NET_RAW) instead of through the embedded dataplane.
    #[arg(
        short = 'i',
        long,
        visible_alias = "intf1",
        value_name = "IFACE",
        help_heading = "Live replay",
        conflicts_with_all = [
            "workers", "no_pin", "heavy_percent", "epoch_ms", "pass_malformed", "top",
            "heavy_jsonl", "flows", "packets", "zipf_s", "size", "seed", "config",
            "ingress", "write", "enet_dmac", "enet_smac",
        ]
    )]
    tx: Option<String>,
    /// Live: open --tx in network namespace NAME (/var/run/netns/NAME).
    #[arg(
        long,
        value_name = "NAME",
        requires = "tx",
        help_heading = "Live replay"
    )]
    tx_netns: Option<String>,
    /// Live: capture on IFACE, match what arrives to what was sent, and
    /// report loss, reordering and end-to-end latency.
    #[arg(
        long,
        value_name = "IFACE",
        requires = "tx",
        help_heading = "Live replay"
    )]
    rx: Option<String>,
    /// Live: open --rx in network namespace NAME.
    #[arg(
        long,
        value_name = "NAME",
        requires = "rx",
        help_heading = "Live replay"
    )]
    rx_netns: Option<String>,
    /// Live: frames not received this many ms after the last send are lost.
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 200,
        help_heading = "Live replay"
    )]
    rx_grace: u64,
    /// Live: receive socket buffer (SO_RCVBUFFORCE), bytes.
    #[arg(
        long,
        value_name = "BYTES",
        default_value_t = 32 << 20,
        help_heading = "Live replay"
    )]
    rx_buffer: usize,
    /// Live: read every packet into memory before sending (tcpreplay's
    /// --preload-pcap).
    #[arg(
        short = 'K',
        long,
        visible_alias = "preload-pcap",
        requires = "tx",
        help_heading = "Live replay"
    )]
    preload: bool,
    /// Live: packet I/O of the sender and receiver: pnet (one send(2) per
    /// frame, recvmmsg) or ring (sendmmsg batches, a TPACKET_V3 receive
    /// ring stamped by the kernel).
    #[arg(long, default_value = "pnet", value_parser = parse_io, help_heading = "Live replay")]
    io: IoBackend,
    /// Live: sender threads, each with its own socket and every N-th frame,
    /// at 1/N of --pps (needs --preload, and --pps or --topspeed).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        requires = "tx",
        help_heading = "Live replay"
    )]
    tx_threads: u32,
    #[command(flatten)]
    synth: SynthArgs,
}

/// `--enet-dmac[=MAC]`: the port's own MAC (no value), or MAC.
fn parse_dmac(s: &str) -> Result<DmacRewrite, String> {
    if s == "port" {
        return Ok(DmacRewrite::PortOwn);
    }
    parse_mac(s).map(DmacRewrite::To)
}

/// A unicast MAC address, `02:00:00:00:0a:01`.
fn parse_mac(s: &str) -> Result<MacAddr, String> {
    let m: MacAddr = s.parse()?;
    if m.is_group() {
        return Err(format!("{m} is a group (multicast) address, not a host's"));
    }
    Ok(m)
}

/// A finite number above zero (clap names the flag on failure).
fn positive_f64(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        Ok(_) => Err("must be a positive number".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// The synthetic workload's settings, which do not apply to captures.
const SYNTH_ONLY: [&str; 5] = ["packets", "flows", "zipf_s", "size", "unique"];

impl ReplayArgs {
    /// `-r` files, then the positional ones.
    fn inputs(&self) -> Vec<PathBuf> {
        self.read.iter().chain(&self.files).cloned().collect()
    }

    fn limits(&self) -> Limits {
        Limits {
            packets: self.limit,
            duration: self.duration.map(std::time::Duration::from_nanos),
        }
    }

    /// `--tt` ... `--ttttt`, each implying `-v`.
    fn time_format(&self) -> Option<TimeFormat> {
        [
            (self.tt, TimeFormat::Epoch),
            (self.ttt, TimeFormat::Delta),
            (self.tttt, TimeFormat::Date),
            (self.ttttt, TimeFormat::SinceFirst),
        ]
        .into_iter()
        .find_map(|(on, f)| on.then_some(f))
    }

    fn pacing(&self) -> Pacing {
        match (self.multiplier, self.pps, self.mbps) {
            (Some(m), _, _) => Pacing::Multiplier(m),
            (_, Some(p), _) => Pacing::Pps(p),
            (_, _, Some(m)) => Pacing::Mbps(m),
            _ => Pacing::TopSpeed,
        }
    }
}

/// A progress bar on standard error when it is a terminal (none when it
/// is not): elapsed time, packets and a whole-number rate, plus the bar and
/// an ETA when the total is known (the synthetic workload, `--limit`). It
/// ticks on its own, so the clock moves at low rates too.
fn progress_bar(total: Option<u64>) -> Option<ProgressBar> {
    std::io::stderr().is_terminal().then(|| {
        let template = if total.is_some() {
            "{spinner} {elapsed_precise} [{bar:30}] {human_pos}/{human_len} packets, {rate} pps, ETA {eta}"
        } else {
            "{spinner} {elapsed_precise} {human_pos} packets, {rate} pps"
        };
        let pb = total.map_or_else(ProgressBar::new_spinner, ProgressBar::new);
        if let Ok(style) = ProgressStyle::with_template(template) {
            pb.set_style(style.with_key(
                "rate",
                |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                    let _ = write!(w, "{:.0}", s.per_sec());
                },
            ));
        }
        pb.enable_steady_tick(std::time::Duration::from_millis(250));
        pb
    })
}

/// A second SIGINT/SIGTERM at least this long after the first exits at
/// once (status 130, no outputs). A closer one is the same request
/// delivered twice (`timeout(1)` signals the command, then its whole
/// process group) and only stops the run as the first did.
const SECOND_SIGNAL_NS: u64 = 1_000_000_000;

/// `CLOCK_MONOTONIC` in ns (never 0); async-signal-safe.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime is
    // async-signal-safe (POSIX), so this may run in a signal handler.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    let ns = u64::try_from(ts.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(ts.tv_nsec).unwrap_or(0));
    ns.max(1)
}

/// A signal came at `now` (ns, not 0): whether it is a second one,
/// [`SECOND_SIGNAL_NS`] or more after the first, so the program exits at
/// once. `first` holds when the first came (0: none yet). Async-signal-safe.
fn exit_on_signal(first: &AtomicU64, now: u64) -> bool {
    match first.compare_exchange(0, now, Ordering::SeqCst, Ordering::SeqCst) {
        Ok(_) => false,
        Err(t) => now.saturating_sub(t) >= SECOND_SIGNAL_NS,
    }
}

/// Sets the returned flag on SIGINT and SIGTERM, so that a replay stops
/// and still reports; a second signal [`SECOND_SIGNAL_NS`] or more after
/// the first exits at once with status 130.
fn stop_on_signals() -> Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    // When the first signal came (0: none yet).
    let first = Arc::new(AtomicU64::new(0));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let (flag, first) = (Arc::clone(&flag), Arc::clone(&first));
        let action = move || {
            if exit_on_signal(&first, monotonic_ns()) {
                signal_hook::low_level::exit(130);
            }
            flag.store(true, Ordering::SeqCst);
        };
        // SAFETY: the action is async-signal-safe: it reads the clock with
        // clock_gettime, does atomic operations on values it owns (no
        // allocation, no lock, no panic) and may call _exit
        // (signal_hook::low_level::exit).
        unsafe { signal_hook::low_level::register(sig, action) }
            .context("cannot install a signal handler")?;
    }
    Ok(flag)
}

/// A summary written into a pipe its reader closed (`| head`) is not an
/// error: like Unix tools, the run ends with its own status, the files it
/// wrote complete.
fn quiet_on_closed_pipe(r: std::io::Result<()>) -> std::io::Result<()> {
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}

/// Tells the operator about each input error (the summary and the JSON
/// list them too).
fn warn_input_errors(errors: &[InputError], what: &str) {
    for e in errors {
        eprintln!("traffic-gen: warning: {e}; {what} what precedes it");
    }
}

/// Standard input (`-` among the files) copied to a temporary file, which
/// is removed when this is dropped: the replay opens each capture twice (its
/// header is checked before the run) and reads gzip by its magic.
struct StdinSpool {
    dir: PathBuf,
}

impl StdinSpool {
    /// Replaces `-` in `files` by the spooled copy of standard input.
    fn take(files: &mut [PathBuf]) -> Result<Option<StdinSpool>> {
        let dashes = files.iter().filter(|f| f.as_os_str() == "-").count();
        if dashes == 0 {
            return Ok(None);
        }
        if dashes > 1 {
            usage!("standard input (-) can be read once");
        }
        let dir = std::env::temp_dir().join(format!("traffic-gen-{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("{}: cannot create", dir.display()))?;
        let spool = StdinSpool { dir };
        let path = spool.dir.join("stdin");
        let mut f = create_file("-", &path)?;
        std::io::copy(&mut std::io::stdin().lock(), &mut f)
            .with_context(|| format!("standard input: cannot copy to {}", path.display()))?;
        for file in files.iter_mut().filter(|f| f.as_os_str() == "-") {
            file.clone_from(&path);
        }
        Ok(Some(spool))
    }
}

impl StdinSpool {
    /// Names standard input `-` again where a report names the copy.
    fn rename<'n>(spool: Option<&StdinSpool>, names: impl IntoIterator<Item = &'n mut String>) {
        let Some(sp) = spool else { return };
        let copy = sp.dir.join("stdin").display().to_string();
        for n in names {
            if *n == copy {
                *n = "-".into();
            }
        }
    }
}

impl Drop for StdinSpool {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn run_replay(a: &ReplayArgs, synth_flags: &[&str]) -> Result<Outcome> {
    if a.print_config {
        print!("{DEFAULT_ROUTER}");
        return Ok(Outcome::Done);
    }
    let mut files = a.inputs();
    if !files.is_empty() && !synth_flags.is_empty() {
        let flags: Vec<String> = synth_flags
            .iter()
            .map(|f| format!("--{}", f.replace('_', "-")))
            .collect();
        usage!(
            "{}: only for the synthetic workload (no capture files given); --limit N stops after N packets",
            flags.join(", ")
        );
    }
    let spool = StdinSpool::take(&mut files)?;
    if let Some(tx) = &a.tx {
        return run_live_replay(a, tx, files, spool.as_ref());
    }
    if a.io != IoBackend::Pnet {
        usage!("--io applies to live replay (--tx)");
    }
    if a.workers == 0 {
        usage!("--workers must be at least 1");
    }
    let time_format = a.time_format();
    let verbose = a.verbose || time_format.is_some();
    if verbose && a.workers > 1 {
        usage!("--verbose prints the packets in order: it takes one worker (--workers 1)");
    }
    let mut router = match &a.config {
        Some(p) => {
            let r = RouterConfig::load(p)?;
            for w in r.warnings() {
                eprintln!("traffic-gen: warning: {}: {w}", p.display());
            }
            r
        }
        None => default_router(),
    };
    let cpus = core_affinity::get_core_ids().map_or(0, |c| c.len());
    if cpus > 0 && a.workers > cpus {
        eprintln!(
            "traffic-gen: warning: --workers {}: more workers than the {cpus} CPUs this process may use; they take turns on them",
            a.workers
        );
    }
    if a.heavy_percent.is_some() || a.epoch_ms.is_some() {
        let h = router.heavy.get_or_insert_with(Default::default);
        if let Some(pct) = a.heavy_percent {
            if !(pct.is_finite() && pct > 0.0 && pct <= 100.0) {
                usage!("--heavy-percent must be in (0, 100], got {pct}");
            }
            if let Some(why) = dataplane::config::share_problem(pct / 100.0, h.log2_width) {
                usage!("--heavy-percent {pct:?}: as a share, {why}");
            }
            h.threshold = ThresholdConfig::Share(pct / 100.0);
        }
        if let Some(ms) = a.epoch_ms {
            if ms == 0 {
                usage!("--epoch-ms must be at least 1");
            }
            h.epoch_ms = Some(ms);
        }
    }
    let cfg = ReplayConfig {
        router,
        workers: a.workers,
        pin: !a.no_pin,
        pacing: a.pacing(),
        loops: a.loops,
        malformed: if a.pass_malformed {
            MalformedPolicy::Pass
        } else {
            MalformedPolicy::Drop
        },
        ingress: a.ingress.clone(),
        write: a.write.clone(),
        digests: a.digests.clone(),
        seed: a.synth.seed,
        limits: a.limits(),
        filter: a.filter.clone(),
        verbose,
        time_format: time_format.unwrap_or_default(),
        rewrite: MacRewrite {
            dmac: a.enet_dmac,
            smac: a.enet_smac,
        },
        sample_queues: a.plot.is_some(),
    };
    let input = if files.is_empty() {
        if a.synth.size.is_some() || a.synth.unique {
            usage!(
                "--size and --unique shape `synth --kind zipf` captures; the built-in workload replay runs without files has its own sizes"
            );
        }
        Input::Synth(RouterSynthConfig {
            packets: a.synth.packets,
            flows: a.synth.flows,
            zipf_s: a.synth.zipf_s,
            seed: a.synth.seed,
            ..RouterSynthConfig::default()
        })
    } else {
        Input::Files(files)
    };
    // Output files are checked before the run, so a bad path fails at once
    // (the --write directory and its captures: by the replay, before it
    // sends anything), and written after it.
    let json = Output::check("--json", a.json.as_deref())?;
    if let Some(p) = &a.plot {
        check_writable("--plot", p)?;
    }
    let heavy_jsonl = Output::check("--heavy-jsonl", a.heavy_jsonl.as_deref())?;
    let hgrms = match &a.hgrm {
        Some(p) => {
            let paths = hgrm_paths(p);
            for path in &paths {
                check_writable("--hgrm", path)?;
            }
            Some(paths)
        }
        None => None,
    };
    let stop = stop_on_signals()?;
    let progress = progress_bar(match &input {
        Input::Synth(s) => {
            let all = s.packets * u64::from(a.loops);
            Some(a.limit.map_or(all, |l| l.min(all)))
        }
        Input::Files(_) => a.limit,
    });
    let report = replay_with_stop(&input, &cfg, progress.as_ref(), Stop::on(&stop));
    if let Some(pb) = &progress {
        pb.finish_and_clear();
    }
    let mut report = report?;
    StdinSpool::rename(spool.as_ref(), report.inputs.iter_mut());
    StdinSpool::rename(
        spool.as_ref(),
        report.input_errors.iter_mut().map(|e| &mut e.file),
    );
    warn_input_errors(&report.input_errors, "replayed");
    let mut out = std::io::stdout().lock();
    // The files are written even when standard output is gone.
    let printed = report.write_text(&mut out, a.top);
    let mut written = match hgrms {
        Some(paths) => {
            let files = paths
                .into_iter()
                .map(|path| create_file("--hgrm", &path).map(|f| (path, f)))
                .collect::<Result<Vec<_>>>()?;
            report.write_hgrms_to(files)?
        }
        None => Vec::new(),
    };
    written.extend(write_json(json, &report)?);
    if let Some(p) = &a.plot {
        let through = report.latency.through();
        plot_svg(
            p,
            "replay",
            &[
                ("processing (wall clock)", &report.latency.processing),
                ("sojourn (capture time)", &report.latency.sojourn),
                ("through (capture time)", &through),
            ],
            &report.queue_samples,
        )?;
        written.push(p.clone());
    }
    if let Some(o) = heavy_jsonl {
        let p = o.path;
        let mut f = std::io::BufWriter::new(o.create()?);
        for e in &report.heavy {
            e.write_json_lines(&mut f)
                .with_context(|| format!("{}: write failed", p.display()))?;
        }
        f.flush()
            .with_context(|| format!("{}: write failed", p.display()))?;
        written.push(p.to_path_buf());
    }
    quiet_on_closed_pipe(printed)?;
    print_written(&mut out, &written)?;
    if report.output_closed {
        eprintln!(
            "traffic-gen: standard output closed: stopped after {} packets, as at an interrupt",
            report.packets
        );
        return Ok(Outcome::OutputClosed);
    }
    let interrupted = report.interrupted || stop.load(Ordering::Relaxed);
    Ok(Outcome::of_replay(interrupted, &report.input_errors))
}

/// `replay --tx IFACE [--rx IFACE] FILE...`: live replay.
fn run_live_replay(
    a: &ReplayArgs,
    tx: &str,
    files: Vec<PathBuf>,
    spool: Option<&StdinSpool>,
) -> Result<Outcome> {
    if a.hgrm.is_some() && a.rx.is_none() {
        usage!("--hgrm needs --rx (latency is measured at the receiver)");
    }
    let cfg = LiveConfig {
        tx: Endpoint {
            interface: tx.to_string(),
            netns: a.tx_netns.clone(),
        },
        rx: a.rx.as_ref().map(|rx| Endpoint {
            interface: rx.clone(),
            netns: a.rx_netns.clone(),
        }),
        pacing: a.pacing(),
        loops: a.loops,
        preload: a.preload,
        grace: std::time::Duration::from_millis(a.rx_grace),
        rx_buffer_bytes: a.rx_buffer,
        io: a.io,
        limits: a.limits(),
        filter: a.filter.clone(),
        hlog: a.hlog.clone(),
        tx_threads: a.tx_threads,
    };
    // Output files are checked before the run, so a bad path fails at once.
    let hgrm = Output::check("--hgrm", a.hgrm.as_deref())?;
    let json = Output::check("--json", a.json.as_deref())?;
    if let Some(p) = &a.plot {
        if a.rx.is_none() {
            usage!("--plot needs --rx with live replay (latency is measured at the receiver)");
        }
        check_writable("--plot", p)?;
    }
    if let Some(p) = &a.hlog {
        check_writable("--hlog", p)?;
    }
    let stop = stop_on_signals()?;
    let progress = progress_bar(a.limit);
    let report = run_live_with_stop(&files, &cfg, progress.as_ref(), Stop::on(&stop));
    if let Some(pb) = &progress {
        pb.finish_and_clear();
    }
    let mut report = report?;
    StdinSpool::rename(spool, report.inputs.iter_mut());
    StdinSpool::rename(spool, report.input_errors.iter_mut().map(|e| &mut e.file));
    warn_input_errors(&report.input_errors, "sent");
    // The files are written even when standard output is gone.
    let mut out = std::io::stdout().lock();
    let printed = report.write_text(&mut out);
    let mut written = Vec::new();
    // Without a receive side there is no distribution, and no file.
    if let Some(o) = hgrm
        && report.rx.is_some()
    {
        let p = o.path;
        let mut f = std::io::BufWriter::new(o.create()?);
        if let Some(r) = report.write_hgrm(&mut f) {
            r.and_then(|()| f.flush())
                .with_context(|| format!("{}: write failed", p.display()))?;
        }
        written.push(p.to_path_buf());
    }
    if let Some(p) = &a.hlog
        && report.rx.is_some()
    {
        written.push(p.clone());
    }
    written.extend(write_json(json, &report)?);
    if let (Some(p), Some(rx)) = (&a.plot, &report.rx) {
        plot_svg(p, "live replay", &[("send to receive", &rx.histogram)], &[])?;
        written.push(p.clone());
    }
    quiet_on_closed_pipe(printed)?;
    print_written(&mut out, &written)?;
    let interrupted = report.interrupted || stop.load(Ordering::Relaxed);
    Ok(Outcome::of_replay(interrupted, &report.input_errors))
}

fn run() -> Result<Outcome> {
    let (matches, cli) = dataplane::cli::parse_or_exit::<Cli>(
        Cli::command().long_version(kernels::platform::long_version(env!("CARGO_PKG_VERSION"))),
    );
    // Generated from the command line's definition; no backend needed.
    match &cli.command {
        Command::Completions(a) => {
            a.write(Cli::command(), &mut std::io::stdout().lock())?;
            return Ok(Outcome::Done);
        }
        Command::Man(a) => {
            a.write(Cli::command(), &mut std::io::stdout().lock())?;
            return Ok(Outcome::Done);
        }
        _ => {}
    }
    // A backend forced through the environment that this CPU lacks (or an
    // unknown name) is an error here, before any work, not a silent
    // fallback.
    kernels::Backend::from_env().context(kernels::BACKEND_ENV)?;
    if let Command::Synth(s) = &cli.command {
        check_writable("--output", &s.output)?;
    }
    // The synthetic workload's flags the command line gave (not defaults).
    let synth_flags: Vec<&str> = matches
        .subcommand_matches("replay")
        .map(|m| {
            SYNTH_ONLY
                .into_iter()
                .filter(|id| m.value_source(id) == Some(ValueSource::CommandLine))
                .collect()
        })
        .unwrap_or_default();
    match &cli.command {
        Command::Replay(a) => run_replay(a, &synth_flags),
        Command::Scenario(ScenarioCmd::Sfb(a)) => run_scenario_sfb(a).map(|()| Outcome::Done),
        Command::Throughput(a) => run_throughput_cmd(a).map(|()| Outcome::Done),
        Command::Synth(s) => run_synth(s).map(|()| Outcome::Done),
        Command::Traceback(a) => traffic_gen::traceback::cli::run(a).map(|()| Outcome::Done),
        Command::Completions(_) | Command::Man(_) => Ok(Outcome::Done),
    }
}

fn run_synth(s: &SynthCmd) -> Result<()> {
    match s.kind {
        SynthKind::Icarus => run_synth_icarus(s),
        SynthKind::Router => run_synth_router(s),
        SynthKind::Multicast => {
            let cfg = McastConfig {
                ports: s.ports,
                groups: s.groups,
                packets: s.synth.packets,
                gap_ns: s.gap_us.saturating_mul(1_000),
                seed: s.synth.seed,
                ..McastConfig::default()
            };
            let truth = traffic_gen::synth_mcast::write_pcapng(cfg, &s.output)?;
            let data = truth.expected.iter().flatten().count();
            println!(
                "wrote {} packets ({} data, {} control) over {} interfaces (p0..p{}) to {} (truth in {}.mcast.json)",
                truth.ingress.len(),
                data,
                truth.ingress.len() - data,
                truth.ports,
                truth.ports.saturating_sub(1),
                s.output.display(),
                s.output.display()
            );
            Ok(())
        }
        SynthKind::Zipf => {
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
        Ok(outcome) => outcome.exit_code(),
        Err(e) => {
            // A configuration's errors come one per line; each gets the prefix.
            for line in format!("{e:#}").lines() {
                eprintln!("traffic-gen: error: {line}");
            }
            if e.downcast_ref::<Usage>().is_some() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_later_second_signal_exits() {
        let first = AtomicU64::new(0);
        let t = 5_000_000_000;
        assert!(!exit_on_signal(&first, t), "the first stops the run");
        assert!(!exit_on_signal(&first, t + 1_000), "the same request twice");
        assert!(!exit_on_signal(&first, t + SECOND_SIGNAL_NS - 1));
        assert!(exit_on_signal(&first, t + SECOND_SIGNAL_NS));
        // A clock that went backwards is no second request.
        assert!(!exit_on_signal(&first, t - 1));
    }

    #[test]
    fn the_monotonic_clock_is_never_zero_and_moves_forward() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(a > 0 && b >= a);
    }

    #[test]
    fn the_cli_is_well_formed() {
        <Cli as clap::CommandFactory>::command().debug_assert();
    }
}
