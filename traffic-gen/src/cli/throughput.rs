//! `traffic-gen throughput`: the zero-loss rate between two live interfaces.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use dataplane::config::IoBackend;
use traffic_gen::Usage;
use traffic_gen::live::Endpoint;
use traffic_gen::scenario::{self};
use traffic_gen::throughput::{self, ThroughputConfig, run_throughput};

use super::output::{Output, print_written, write_json};
use super::parse_io;

#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub(crate) struct ThroughputArgs {
    /// Send out of IFACE.
    #[arg(long, value_name = "IFACE")]
    pub(crate) tx: String,
    /// Open --tx in network namespace NAME (/var/run/netns/NAME).
    #[arg(long, value_name = "NAME")]
    pub(crate) tx_netns: Option<String>,
    /// Receive on IFACE.
    #[arg(long, value_name = "IFACE")]
    pub(crate) rx: String,
    /// Open --rx in network namespace NAME.
    #[arg(long, value_name = "NAME")]
    pub(crate) rx_netns: Option<String>,
    /// Packet I/O of the sender and receiver: pnet (a system call per
    /// frame) or ring (sendmmsg batches, a TPACKET_V3 receive ring).
    #[arg(long, default_value = "pnet", value_parser = parse_io)]
    pub(crate) io: IoBackend,
    /// Sender threads, each with its own socket and every N-th frame (one
    /// sender tops out near a million frames per second).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub(crate) tx_threads: u32,
    /// Frame sizes, bytes as sent (no FCS), comma-separated, each in 60..=9000.
    #[arg(long, default_value = "64,128,256,512,1024,1280,1518", value_parser = parse_sizes)]
    pub(crate) size: Sizes,
    /// One trial's length (5s, 500ms).
    #[arg(long, default_value = "5s", value_parser = scenario::parse_duration)]
    pub(crate) duration: u64,
    /// Largest lost fraction of a trial that passes (0.001 = 0.1%).
    #[arg(long, default_value_t = 0.001)]
    pub(crate) loss: f64,
    /// Flows the frames are spread over (round robin).
    #[arg(long, default_value_t = 1024)]
    pub(crate) flows: u32,
    /// Start the search here (pps) instead of at the sender's top-speed rate.
    #[arg(long, value_name = "P")]
    pub(crate) max_pps: Option<f64>,
    /// Stop when the search interval is within this fraction of the rate.
    #[arg(long, value_name = "R", default_value_t = 0.01)]
    pub(crate) resolution: f64,
    /// Stop after this many rates per size.
    #[arg(long, default_value_t = 16)]
    pub(crate) max_trials: u32,
    /// Trials per rate: a rate passes only when all of them do (the first
    /// failure ends them), as RFC 2544 repeats its trials.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub(crate) repeat: u32,
    /// Pause between trials so that queues drain.
    #[arg(long, default_value = "500ms", value_parser = scenario::parse_duration)]
    pub(crate) pause: u64,
    /// Receive buffer (or ring) size, bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 32 << 20)]
    pub(crate) rx_buffer: usize,
    /// Frames not received this many ms after the last send are lost.
    #[arg(long, value_name = "MS", default_value_t = 200)]
    pub(crate) rx_grace: u64,
    /// Write the report (every trial) as JSON.
    #[arg(long, value_name = "FILE")]
    pub(crate) json: Option<PathBuf>,
}

/// `--size`'s list as one value (clap would otherwise split it itself and
/// lose the list's context in errors).
#[derive(Debug, Clone)]
pub(crate) struct Sizes(Vec<u16>);

pub(crate) fn parse_sizes(s: &str) -> Result<Sizes, String> {
    throughput::parse_sizes(s)
        .map(Sizes)
        .map_err(|e| format!("{e:#}"))
}

pub(crate) fn run_throughput_cmd(a: &ThroughputArgs) -> Result<()> {
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
