//! Backends. Each instantiates the generic algorithm in `lanes` for its
//! vector type. The scalar backend is public: it is the reference that tests
//! and benches compare every SIMD backend with.

pub mod scalar;

#[cfg(target_arch = "x86_64")]
pub mod x86_64;

#[cfg(target_arch = "aarch64")]
pub mod aarch64;
