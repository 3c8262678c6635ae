//! Bloomplane benchmarks. Each area module (`hash`, ...) holds its inputs,
//! its criterion registrations (`register`, names `area/case/backend-or-peer`)
//! and its headline figures for the report binary (`report`). Peers run in the
//! same binary on the same inputs, so every ratio comes from one run.
//!
//! `cargo run --release -p bench --bin report` prints every figure, ratio
//! and target (`docs/BENCHMARKS.md` holds the current ones);
//! `cargo bench -p bench --bench kernels` and `--bench dataplane` run the
//! criterion benches.

pub mod bloom;
pub mod cms;
pub mod hash;
pub mod inputs;
pub mod lpm;
pub mod measure;
pub mod pipeline;
pub mod router;
pub mod sfb;
pub mod stages;
