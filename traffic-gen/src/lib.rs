//! Bloomplane traffic generator: replays captures (or a synthetic Zipf
//! workload) through the embedded dataplane with tcpreplay-style pacing,
//! measures per-packet processing latency into HdrHistograms, and reports
//! the pipeline counters and the heavy flows.
//!
//! * [`replay`] — dispatcher, pinned workers, pacing, the merged [`replay::Report`].
//! * [`synth`] — Zipf workloads with known ground truth, written as pcaps.

pub mod replay;
pub mod synth;
