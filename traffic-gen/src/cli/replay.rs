//! `traffic-gen replay`: captures (or the synthetic workload) through the
//! embedded router, or live out of an interface.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::Ordering;

use anyhow::{Context, Result};
use clap::Args;
use dataplane::config::{IoBackend, MacAddr, RouterConfig, ThresholdConfig};
use dataplane::pipeline::MalformedPolicy;
use indicatif::{ProgressBar, ProgressStyle};
use traffic_gen::Usage;
use traffic_gen::input::{InputError, Limits, Stop};
use traffic_gen::live::{Endpoint, LiveConfig, run_live_with_stop};
use traffic_gen::plot::plot_svg;
use traffic_gen::replay::{
    DEFAULT_ROUTER, DmacRewrite, Input, MacRewrite, Pacing, Playback, ReplayConfig, TimeFormat,
    default_router, hgrm_paths, replay_with_stop,
};
use traffic_gen::scenario::{self};
use traffic_gen::synth::router::RouterSynthConfig;

use super::output::{
    Output, check_writable, create_file, print_written, quiet_on_closed_pipe, write_json,
};
use super::signals::stop_on_signals;
use super::synth::SynthArgs;
use super::{Outcome, parse_io};

#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub(crate) struct ReplayArgs {
    /// Capture files (pcap, pcapng, gzip; `-`: standard input, as tcpdump
    /// -r - reads it); none: a synthetic workload.
    pub(crate) files: Vec<PathBuf>,
    /// A capture file to read, as tcpdump's -r (repeatable; read before the
    /// files given without it).
    #[arg(short = 'r', long = "read", value_name = "FILE")]
    pub(crate) read: Vec<PathBuf>,
    /// The router to run (a router.toml, as `dataplane run --config` takes);
    /// default: the built-in router (see --print-config).
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Print the built-in router's configuration and exit.
    #[arg(long)]
    pub(crate) print_config: bool,
    /// The interface the frames of a plain pcap arrive on (pcapng
    /// interfaces map to the router's by name, else by index); default: the
    /// first interface.
    #[arg(long, value_name = "NAME")]
    pub(crate) ingress: Option<String>,
    /// Write what leaves each port as DIR/<interface>.pcap (departure
    /// times, the bytes as sent).
    #[arg(long, short = 'w', value_name = "DIR")]
    pub(crate) write: Option<PathBuf>,
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
    pub(crate) enet_dmac: Option<DmacRewrite>,
    /// Rewrite the source MAC of every frame to MAC as it enters the
    /// router, as tcprewrite's --enet-smac.
    #[arg(long, value_name = "MAC", value_parser = parse_mac)]
    pub(crate) enet_smac: Option<MacAddr>,
    /// Keep the router's packet digests (its [digest] table) in DIR when
    /// the replay ends, for `traceback --digests DIR`.
    #[arg(long, value_name = "DIR")]
    pub(crate) digests: Option<PathBuf>,

    /// Worker threads, pinned to cores.
    #[arg(long, default_value_t = 1)]
    pub(crate) workers: usize,
    /// Do not pin workers to cores.
    #[arg(long)]
    pub(crate) no_pin: bool,
    /// Send as fast as possible (the default).
    #[arg(short = 't', long, conflicts_with_all = ["multiplier", "pps", "mbps"])]
    pub(crate) topspeed: bool,
    /// Original timing scaled by X (2.0: twice as fast).
    #[arg(short = 'x', long, value_name = "X", value_parser = positive_f64)]
    pub(crate) multiplier: Option<f64>,
    /// Packets per second.
    #[arg(short = 'p', long, value_name = "N", value_parser = positive_f64,
          conflicts_with_all = ["multiplier", "mbps"])]
    pub(crate) pps: Option<f64>,
    /// Megabits per second.
    #[arg(short = 'M', long, value_name = "N", value_parser = positive_f64,
          conflicts_with_all = ["multiplier", "pps"])]
    pub(crate) mbps: Option<f64>,
    /// Send the input N times.
    #[arg(short = 'l', long = "loop", value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) loops: u32,
    /// Stop after N packets (over every pass and file), as tcpreplay's
    /// --limit.
    #[arg(short = 'c', long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) limit: Option<u64>,
    /// Stop sending this long after the start (wall clock: 30s, 500ms), as
    /// tcpreplay's --duration.
    #[arg(long, value_name = "T", value_parser = scenario::parse_duration)]
    pub(crate) duration: Option<u64>,
    /// Send only the records that match this BPF expression, as tcpdump
    /// reads it ('udp and port 53'; compiled by libpcap, loaded at run
    /// time).
    #[arg(long, value_name = "EXPR")]
    pub(crate) filter: Option<String>,
    /// Print a line per packet once the router decided it, as tcpdump
    /// prints packets: seconds since the first, ingress interface, VLAN
    /// tags, flow (fragments as `frag (OFFSET|LENGTH)`), length, verdict
    /// (forward PORTS / mark CE / drop REASON). One worker. The replay
    /// stops when standard output is closed (`| head`).
    #[arg(short = 'v', long, conflicts_with = "tx")]
    pub(crate) verbose: bool,
    /// -v with times as seconds since the Unix epoch (tcpdump's -tt).
    #[arg(long, group = "time_format", conflicts_with = "tx")]
    pub(crate) tt: bool,
    /// -v with times as the time since the previous packet, HH:MM:SS.us
    /// (tcpdump's -ttt).
    #[arg(long, group = "time_format", conflicts_with = "tx")]
    pub(crate) ttt: bool,
    /// -v with times as the local date and time, YYYY-MM-DD
    /// HH:MM:SS.us (tcpdump's -tttt; TZ applies).
    #[arg(long, group = "time_format", conflicts_with = "tx")]
    pub(crate) tttt: bool,
    /// -v with times as the time since the first packet, HH:MM:SS.us
    /// (tcpdump's -ttttt).
    #[arg(long, group = "time_format", conflicts_with = "tx")]
    pub(crate) ttttt: bool,
    /// Heavy-flow threshold as a share of the epoch's bytes, in percent
    /// (overrides the config's `heavy.threshold`).
    #[arg(long)]
    pub(crate) heavy_percent: Option<f64>,
    /// Heavy-flow epoch length in milliseconds of capture time (overrides
    /// the config's `heavy.epoch_ms`).
    #[arg(long, value_name = "MS")]
    pub(crate) epoch_ms: Option<u64>,
    /// Forward malformed frames instead of dropping them (counted either way).
    #[arg(long)]
    pub(crate) pass_malformed: bool,
    /// Heavy flows shown per epoch on the terminal.
    #[arg(long, default_value_t = 10)]
    pub(crate) top: usize,
    /// Write the latency distributions (.hgrm percentile format,
    /// microseconds): FILE's stem with -processing, -sojourn and -through
    /// (embedded), or FILE itself (live, with --rx).
    #[arg(long, value_name = "FILE")]
    pub(crate) hgrm: Option<PathBuf>,
    /// Write the whole report as JSON.
    #[arg(long, value_name = "FILE")]
    pub(crate) json: Option<PathBuf>,
    /// Draw the run as an SVG: latency by percentile (every distribution,
    /// log scales, as HdrHistogram's plotter) and, embedded, each shaped
    /// port's backlog and SFB marking probability over capture time.
    #[arg(long, value_name = "FILE.svg")]
    pub(crate) plot: Option<PathBuf>,
    /// Live, with --rx: write the send-to-receive latency as an
    /// HdrHistogram interval log (one histogram per second of the run,
    /// microseconds), for latency over time on long runs.
    #[arg(long, value_name = "FILE.hlog", requires = "rx")]
    pub(crate) hlog: Option<PathBuf>,
    /// Write the heavy flows as JSON lines.
    #[arg(long, value_name = "FILE")]
    pub(crate) heavy_jsonl: Option<PathBuf>,
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
    pub(crate) tx: Option<String>,
    /// Live: open --tx in network namespace NAME (/var/run/netns/NAME).
    #[arg(
        long,
        value_name = "NAME",
        requires = "tx",
        help_heading = "Live replay"
    )]
    pub(crate) tx_netns: Option<String>,
    /// Live: capture on IFACE, match what arrives to what was sent, and
    /// report loss, reordering and end-to-end latency.
    #[arg(
        long,
        value_name = "IFACE",
        requires = "tx",
        help_heading = "Live replay"
    )]
    pub(crate) rx: Option<String>,
    /// Live: open --rx in network namespace NAME.
    #[arg(
        long,
        value_name = "NAME",
        requires = "rx",
        help_heading = "Live replay"
    )]
    pub(crate) rx_netns: Option<String>,
    /// Live: frames not received this many ms after the last send are lost.
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 200,
        help_heading = "Live replay"
    )]
    pub(crate) rx_grace: u64,
    /// Live: receive socket buffer (SO_RCVBUFFORCE), bytes.
    #[arg(
        long,
        value_name = "BYTES",
        default_value_t = 32 << 20,
        help_heading = "Live replay"
    )]
    pub(crate) rx_buffer: usize,
    /// Live: read every packet into memory before sending (tcpreplay's
    /// --preload-pcap).
    #[arg(
        short = 'K',
        long,
        visible_alias = "preload-pcap",
        requires = "tx",
        help_heading = "Live replay"
    )]
    pub(crate) preload: bool,
    /// Live: packet I/O of the sender and receiver: pnet (one send(2) per
    /// frame, recvmmsg) or ring (sendmmsg batches, a TPACKET_V3 receive
    /// ring stamped by the kernel).
    #[arg(long, default_value = "pnet", value_parser = parse_io, help_heading = "Live replay")]
    pub(crate) io: IoBackend,
    /// Live: sender threads, each with its own socket and every N-th frame,
    /// at 1/N of --pps (needs --preload, and --pps or --topspeed).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        requires = "tx",
        help_heading = "Live replay"
    )]
    pub(crate) tx_threads: u32,
    #[command(flatten)]
    pub(crate) synth: SynthArgs,
}

/// `--enet-dmac[=MAC]`: the port's own MAC (no value), or MAC.
pub(crate) fn parse_dmac(s: &str) -> Result<DmacRewrite, String> {
    if s == "port" {
        return Ok(DmacRewrite::PortOwn);
    }
    parse_mac(s).map(DmacRewrite::To)
}

/// A unicast MAC address, `02:00:00:00:0a:01`.
pub(crate) fn parse_mac(s: &str) -> Result<MacAddr, String> {
    let m: MacAddr = s.parse()?;
    if m.is_group() {
        return Err(format!("{m} is a group (multicast) address, not a host's"));
    }
    Ok(m)
}

/// A finite number above zero (clap names the flag on failure).
pub(crate) fn positive_f64(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        Ok(_) => Err("must be a positive number".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// The synthetic workload's settings, which do not apply to captures.
pub(crate) const SYNTH_ONLY: [&str; 5] = ["packets", "flows", "zipf_s", "size", "unique"];

impl ReplayArgs {
    /// `-r` files, then the positional ones.
    pub(crate) fn inputs(&self) -> Vec<PathBuf> {
        self.read.iter().chain(&self.files).cloned().collect()
    }

    pub(crate) fn limits(&self) -> Limits {
        Limits {
            packets: self.limit,
            duration: self.duration.map(std::time::Duration::from_nanos),
        }
    }

    /// `--tt` ... `--ttttt`, each implying `-v`.
    pub(crate) fn time_format(&self) -> Option<TimeFormat> {
        [
            (self.tt, TimeFormat::Epoch),
            (self.ttt, TimeFormat::Delta),
            (self.tttt, TimeFormat::Date),
            (self.ttttt, TimeFormat::SinceFirst),
        ]
        .into_iter()
        .find_map(|(on, f)| on.then_some(f))
    }

    pub(crate) fn pacing(&self) -> Pacing {
        match (self.multiplier, self.pps, self.mbps) {
            (Some(m), _, _) => Pacing::Multiplier(m),
            (_, Some(p), _) => Pacing::Pps(p),
            (_, _, Some(m)) => Pacing::Mbps(m),
            _ => Pacing::TopSpeed,
        }
    }

    /// The pacing, passes, limits and filter, as offline and live replay
    /// take them.
    pub(crate) fn playback(&self) -> Playback {
        Playback {
            pacing: self.pacing(),
            loops: self.loops,
            limits: self.limits(),
            filter: self.filter.clone(),
        }
    }
}

/// A progress bar on standard error when it is a terminal (none when it
/// is not): elapsed time, packets and a whole-number rate, plus the bar and
/// an ETA when the total is known (the synthetic workload, `--limit`). It
/// ticks on its own, so the clock moves at low rates too.
pub(crate) fn progress_bar(total: Option<u64>) -> Option<ProgressBar> {
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

/// Tells the operator about each input error (the summary and the JSON
/// list them too).
pub(crate) fn warn_input_errors(errors: &[InputError], what: &str) {
    for e in errors {
        eprintln!("traffic-gen: warning: {e}; {what} what precedes it");
    }
}

/// Standard input (`-` among the files) copied to a temporary file, which
/// is removed when this is dropped: the replay opens each capture twice (its
/// header is checked before the run) and reads gzip by its magic.
pub(crate) struct StdinSpool {
    pub(crate) dir: PathBuf,
}

impl StdinSpool {
    /// Replaces `-` in `files` by the spooled copy of standard input.
    pub(crate) fn take(files: &mut [PathBuf]) -> Result<Option<StdinSpool>> {
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
    pub(crate) fn rename<'n>(
        spool: Option<&StdinSpool>,
        names: impl IntoIterator<Item = &'n mut String>,
    ) {
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

pub(crate) fn run_replay(a: &ReplayArgs, synth_flags: &[&str]) -> Result<Outcome> {
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
        play: a.playback(),
        malformed: if a.pass_malformed {
            MalformedPolicy::Pass
        } else {
            MalformedPolicy::Drop
        },
        ingress: a.ingress.clone(),
        write: a.write.clone(),
        digests: a.digests.clone(),
        seed: a.synth.seed,
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
pub(crate) fn run_live_replay(
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
        play: a.playback(),
        preload: a.preload,
        grace: std::time::Duration::from_millis(a.rx_grace),
        rx_buffer_bytes: a.rx_buffer,
        io: a.io,
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
