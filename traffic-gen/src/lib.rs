//! Bloomplane traffic generator: replays captures (or a synthetic Zipf
//! workload) through the embedded dataplane with tcpreplay-style pacing,
//! measures per-packet processing latency into HdrHistograms, and reports
//! the pipeline counters and the heavy flows.
//!
//! * [`replay`] — dispatcher, pinned workers, pacing, the merged [`replay::Report`].
//! * [`live`] — the same captures and pacing out of a live interface, with
//!   end-to-end loss, reordering and latency measured on another.
//! * [`synth`] — Zipf workloads with known ground truth, written as pcaps.
//! * [`synth_mcast`] — multicast joins, leaves, expiries and data over
//!   several interfaces, with exact egress sets.
//! * [`synth_icarus`] — packets carrying Icarus loop-detection filters as
//!   they look after h hops, with each one's exact verdict at the checking
//!   node.
//! * [`scenario`] — closed-loop AIMD and unresponsive senders against SFB
//!   and drop-tail in virtual time.

pub mod live;
pub mod replay;
pub mod scenario;
pub mod synth;
pub mod synth_icarus;
pub mod synth_mcast;
