//! `traffic-gen synth`: synthetic workloads written as captures, with their
//! ground truth beside them.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use dataplane::wire::icarus::FilterWidth;
use traffic_gen::synth::icarus::{self, HopRange, IcarusSynthConfig};
use traffic_gen::synth::mcast::McastConfig;
use traffic_gen::synth::router::{self, RouterSynthConfig};
use traffic_gen::synth::{SynthConfig, write_pcap};

#[derive(Debug, Args)]
pub(crate) struct SynthArgs {
    /// Distinct flows.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) flows: u32,
    /// Packets.
    #[arg(long, default_value_t = 200_000)]
    pub(crate) packets: u64,
    /// Zipf exponent.
    #[arg(long, default_value_t = 1.1)]
    pub(crate) zipf_s: f64,
    /// Frame size in bytes (default: per-flow sizes between 64 and 1500).
    #[arg(long)]
    pub(crate) size: Option<u16>,
    /// Seed: the synthetic workload's RNG, and (replay) every hash key the
    /// router config leaves to chance, so the same input, config and seed
    /// give the same run.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Every frame distinct (packet number in the IPv4 identification and
    /// the payload), for `replay --rx` latency under loss.
    #[arg(long)]
    pub(crate) unique: bool,
}

impl SynthArgs {
    pub(crate) fn config(&self) -> SynthConfig {
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
pub(crate) enum SynthKind {
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
pub(crate) struct SynthCmd {
    /// Output capture (pcap for zipf and icarus, pcapng for multicast and
    /// router).
    #[arg(short = 'o', long = "output")]
    pub(crate) output: PathBuf,
    /// Workload kind.
    #[arg(long, value_enum, default_value_t = SynthKind::Zipf)]
    pub(crate) kind: SynthKind,
    /// Multicast: interfaces (1..=64).
    #[arg(long, default_value_t = 8)]
    pub(crate) ports: usize,
    /// Multicast: distinct groups.
    #[arg(long, default_value_t = 64)]
    pub(crate) groups: u32,
    /// Multicast: capture time between packets, microseconds.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) gap_us: u64,
    #[command(flatten)]
    pub(crate) synth: SynthArgs,
    #[command(flatten, next_help_heading = "Icarus (--kind icarus)")]
    pub(crate) icarus: IcarusArgs,
}

#[derive(Debug, Args)]
pub(crate) struct IcarusArgs {
    /// Icarus: filter bits m (64, 128 or 256).
    #[arg(long, default_value = "128", value_name = "BITS", value_parser = icarus::parse_width)]
    pub(crate) width: FilterWidth,
    /// Icarus: mask bits k (default: the dataplane's default for the width:
    /// 5, 10, 19 for m = 64, 128, 256).
    #[arg(long)]
    pub(crate) k: Option<usize>,
    /// Icarus: the checking node (the router that will see the packets).
    #[arg(long, default_value_t = 1)]
    pub(crate) node_id: u64,
    /// Icarus: the domain seed turning node ids into masks (`icarus.seed`;
    /// default: the built-in one).
    #[arg(long, value_name = "SEED", value_parser = icarus::parse_seed)]
    pub(crate) domain_seed: Option<u64>,
    /// Icarus: hops before the checking node, H or a range A..=B (A..B is
    /// half-open), drawn uniformly; at most 64.
    #[arg(long, default_value = "1..=10", value_parser = icarus::parse_hops)]
    pub(crate) hops: HopRange,
    /// Icarus: share of packets on a looping path (through the checking node before).
    #[arg(long, default_value_t = 0.1, value_name = "F", value_parser = icarus::parse_fraction)]
    pub(crate) loop_fraction: f64,
    /// Icarus: share of IPv6 packets.
    #[arg(long, default_value_t = 0.3, value_name = "F", value_parser = icarus::parse_fraction)]
    pub(crate) v6_fraction: f64,
}

pub(crate) fn run_synth_router(s: &SynthCmd) -> Result<()> {
    let cfg = RouterSynthConfig {
        packets: s.synth.packets,
        flows: s.synth.flows,
        zipf_s: s.synth.zipf_s,
        seed: s.synth.seed,
        ..RouterSynthConfig::default()
    };
    let truth = router::write_pcapng(cfg, &s.output)?;
    println!(
        "wrote {} (truth in {}); {}",
        s.output.display(),
        router::truth_path(&s.output).display(),
        truth.summary()
    );
    Ok(())
}

pub(crate) fn run_synth_icarus(s: &SynthCmd) -> Result<()> {
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
    let truth = icarus::write_pcap(cfg, &s.output)?;
    println!(
        "wrote {} packets ({} IPv4, {} IPv6) to {} (truth in {})",
        truth.packets,
        truth.packets - truth.v6_packets,
        truth.v6_packets,
        s.output.display(),
        icarus::truth_path(&s.output).display()
    );
    println!("{}", truth.summary());
    Ok(())
}

pub(crate) fn run_synth(s: &SynthCmd) -> Result<()> {
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
            let truth = traffic_gen::synth::mcast::write_pcapng(cfg, &s.output)?;
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
