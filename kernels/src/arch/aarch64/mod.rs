//! aarch64 backends.

pub mod neon;
