//! x86_64 backends: the AES hash kernels, AVX2 and AVX-512.

pub mod aes;
pub mod avx2;
pub mod avx512;
