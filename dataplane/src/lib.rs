//! Bloomplane dataplane: zero-copy packet views, capture I/O, and (in later
//! changes) the stages, pipeline and workers.
//!
//! See `ARCHITECTURE.md` at the repository root for the map.

pub mod clock;
pub mod config;
pub mod flow;
pub mod io;
pub mod pipeline;
pub mod runtime;
pub mod stage;
pub mod wire;
