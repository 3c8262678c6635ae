//! Bloomplane dataplane: zero-copy packet views, capture and port I/O, the
//! stages, the router's chain of them, and the workers that run it.
//!
//! See `ARCHITECTURE.md` at the repository root for the map.

pub mod chain;
pub mod clock;
pub mod config;
pub mod flow;
pub mod io;
pub mod pipeline;
pub mod runtime;
pub mod stage;
pub mod wire;
