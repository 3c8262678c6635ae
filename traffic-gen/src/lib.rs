//! Bloomplane traffic generator: replays captures (or a synthetic Zipf
//! workload) through the embedded dataplane with tcpreplay-style pacing,
//! measures per-packet processing latency into HdrHistograms, and reports
//! the pipeline counters and the heavy flows.
//!
//! * [`replay`] — dispatcher, pinned workers, pacing, the merged [`replay::Report`].
//! * [`synth`] — Zipf workloads with known ground truth, written as pcaps.
//! * [`synth_mcast`] — multicast joins, leaves, expiries and data over
//!   several interfaces, with exact egress sets.
//! * [`scenario`] — closed-loop AIMD and unresponsive senders against SFB
//!   and drop-tail in virtual time.

pub mod replay;
pub mod scenario;
pub mod synth;
pub mod synth_mcast;
