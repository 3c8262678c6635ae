//! Bloomplane traffic generator: replays captures (or a synthetic
//! workload) through the embedded router (the chain `dataplane run` builds
//! from a router.toml, in capture time) with tcpreplay-style pacing,
//! measures latency into HdrHistograms, and reports every counter, per port
//! and per stage, and the heavy flows.
//!
//! * [`replay`] — dispatcher, pinned workers over capture ports, the merged
//!   [`replay::Report`].
//! * [`input`] — what a replay keeps of a capture with a defect part-way
//!   ([`input::InputError`]), and the operator's stop flag.
//! * [`pacing`] — tcpreplay's pacing: a drift-free schedule, passes.
//! * [`live`] — the same captures and pacing out of a live interface, with
//!   end-to-end loss, reordering and latency measured on another (pnet
//!   sockets, or packet rings and `sendmmsg`).
//! * [`throughput`] — RFC 2544's zero-loss rate of what sits between two
//!   interfaces: a binary search of live runs of generated frames.
//! * [`synth`] — Zipf workloads with known ground truth, written as pcaps,
//!   and streams of unique fixed-size frames made as they are sent.
//!   * [`synth::mcast`] — multicast joins, leaves, expiries and data over
//!     several interfaces, with exact egress sets.
//!   * [`synth::icarus`] — packets carrying Icarus loop-detection filters as
//!     they look after h hops, with each one's exact verdict at the checking
//!     node.
//!   * [`synth::router`] — the built-in router's workload: every stage busy,
//!     ingress ports as pcapng interfaces, exact truth per class, packet and
//!     heavy-flow epoch.
//! * [`verbose`] — `replay -v`: a line per packet as tcpdump prints it.
//! * [`scenario`] — closed-loop AIMD and unresponsive senders against SFB
//!   and drop-tail in virtual time.
//! * [`traceback`] — where a packet came from: routers (or the digest
//!   windows a replay kept) asked hop by hop backwards.
//!
//! The `traffic-gen` binary is the command line over these modules (see
//! `docs/guide.md`). As a library, a replay of the built-in router's
//! synthetic workload, every packet accounted for:
//!
//! ```
//! use traffic_gen::replay::{Input, ReplayConfig, replay};
//! use traffic_gen::synth::router::RouterSynthConfig;
//!
//! let input = Input::Synth(RouterSynthConfig {
//!     packets: 5_000,
//!     ..RouterSynthConfig::default()
//! });
//! let report = replay(&input, &ReplayConfig::default(), None)?;
//! let p = &report.router.pipeline;
//! assert_eq!(p.received, 5_000);
//! assert_eq!(p.forwarded + p.consumed + p.dropped, p.received);
//! # Ok::<(), anyhow::Error>(())
//! ```

pub mod filter;
pub mod input;
pub mod live;
pub mod pacing;
pub mod plot;
pub mod replay;
pub mod scenario;
pub mod synth;
pub mod throughput;
pub mod traceback;
pub mod verbose;

/// A command line that cannot be run as given, found by the program
/// rather than by clap (flags that only apply together, a value out of
/// range): the binary exits with `dataplane::cli::EXIT_USAGE` (64), as for
/// clap's own usage errors.
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}
