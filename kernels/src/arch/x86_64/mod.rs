//! x86_64 backends.

pub mod avx2;
