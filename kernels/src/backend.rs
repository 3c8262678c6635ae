//! Backend selection: detected once and cached, overridable by API or by the
//! `BLOOMPLANE_BACKEND` environment variable.

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

/// The environment variable that forces a backend: `scalar`, `avx2`,
/// `avx512` or `neon`.
pub const BACKEND_ENV: &str = "BLOOMPLANE_BACKEND";

/// A SIMD backend for the kernels. All produce bit-identical results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// Portable one-lane code; the reference every other backend must match.
    Scalar,
    /// x86_64 AVX2: eight 32-bit lanes; the hash on VAES (256-bit) where
    /// the CPU has it, else AES-NI.
    Avx2,
    /// x86_64 AVX-512 (F, BW, VL) with VAES: sixteen 32-bit lanes, the hash
    /// four keys per instruction. Split-block filters and SFB bins, whose
    /// unit is 256 bits, run the AVX2 code.
    Avx512,
    /// aarch64 NEON (Advanced SIMD): four 32-bit lanes.
    Neon,
}

/// Why a backend cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendError {
    /// The name is not one of `scalar`, `avx2`, `avx512`, `neon`.
    UnknownName(String),
    /// The backend exists but this CPU (or target architecture) lacks it.
    Unavailable(Backend),
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendError::UnknownName(name) => write!(
                f,
                "unknown kernel backend {name:?}: expected one of scalar, avx2, avx512, neon"
            ),
            BackendError::Unavailable(b) => write!(
                f,
                "kernel backend {b} is not available on this CPU (available: {})",
                Backend::available_list()
                    .iter()
                    .map(|b| b.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

impl std::error::Error for BackendError {}

impl Backend {
    /// Every backend, in order of preference (slowest first).
    pub const ALL: [Backend; 4] = [
        Backend::Scalar,
        Backend::Avx2,
        Backend::Avx512,
        Backend::Neon,
    ];

    /// The lower-case name used by the environment variable and reports.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Scalar => "scalar",
            Backend::Avx2 => "avx2",
            Backend::Avx512 => "avx512",
            Backend::Neon => "neon",
        }
    }

    /// Number of 32-bit lanes the backend processes at once.
    pub fn lanes(self) -> usize {
        match self {
            Backend::Scalar => 1,
            Backend::Avx2 => 8,
            Backend::Avx512 => 16,
            Backend::Neon => 4,
        }
    }

    /// Whether this CPU can run the backend. CPU features are detected once
    /// (std caches `is_x86_feature_detected!`); NEON is baseline on aarch64
    /// and so decided at compile time.
    pub fn is_available(self) -> bool {
        match self {
            Backend::Scalar => true,
            Backend::Avx2 => avx2_detected(),
            Backend::Avx512 => avx512_detected(),
            Backend::Neon => cfg!(target_arch = "aarch64"),
        }
    }

    /// `Ok(self)` when available, otherwise a clear error.
    pub fn require(self) -> Result<Backend, BackendError> {
        if self.is_available() {
            Ok(self)
        } else {
            Err(BackendError::Unavailable(self))
        }
    }

    /// The backends this CPU can run, scalar first.
    pub fn available_list() -> Vec<Backend> {
        Backend::ALL
            .into_iter()
            .filter(|b| b.is_available())
            .collect()
    }

    /// The fastest backend this CPU has.
    pub fn best() -> Backend {
        if Backend::Avx512.is_available() {
            Backend::Avx512
        } else if Backend::Avx2.is_available() {
            Backend::Avx2
        } else if Backend::Neon.is_available() {
            Backend::Neon
        } else {
            Backend::Scalar
        }
    }

    /// Reads `BLOOMPLANE_BACKEND`: `Ok(None)` when unset or empty, the
    /// backend when set to an available one, and an error naming the variable
    /// when the name is unknown or the CPU lacks it. Programs call this at
    /// start-up to turn a bad setting into an error message.
    pub fn from_env() -> Result<Option<Backend>, BackendError> {
        match std::env::var(BACKEND_ENV) {
            Ok(v) if !v.trim().is_empty() => v.parse::<Backend>()?.require().map(Some),
            _ => Ok(None),
        }
    }

    /// The backend used when none is asked for: `BLOOMPLANE_BACKEND` if it is
    /// set to an available backend, otherwise [`Backend::best`]. Decided once
    /// per process and cached. A bad setting is ignored here (with one line
    /// on stderr); call [`Backend::from_env`] to reject it instead.
    pub fn active() -> Backend {
        static ACTIVE: OnceLock<Backend> = OnceLock::new();
        *ACTIVE.get_or_init(|| match Backend::from_env() {
            Ok(Some(b)) => b,
            Ok(None) => Backend::best(),
            Err(e) => {
                let best = Backend::best();
                eprintln!("warning: {BACKEND_ENV}: {e}; using {best}");
                best
            }
        })
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Backend {
    type Err = BackendError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "scalar" => Ok(Backend::Scalar),
            "avx2" => Ok(Backend::Avx2),
            "avx512" | "avx-512" => Ok(Backend::Avx512),
            "neon" => Ok(Backend::Neon),
            _ => Err(BackendError::UnknownName(s.to_string())),
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn avx2_detected() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}

#[cfg(not(target_arch = "x86_64"))]
fn avx2_detected() -> bool {
    false
}

/// AVX-512 F, BW and VL (the 512-bit lanes and the 256-bit AVX2 code the
/// backend shares), AVX2, AES-NI and VAES (the hash). Decided once: the
/// index functions check their backend on every batch.
#[cfg(target_arch = "x86_64")]
fn avx512_detected() -> bool {
    static DETECTED: OnceLock<bool> = OnceLock::new();
    *DETECTED.get_or_init(|| {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("vaes")
    })
}

#[cfg(not(target_arch = "x86_64"))]
fn avx512_detected() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_names() {
        assert_eq!("scalar".parse::<Backend>(), Ok(Backend::Scalar));
        assert_eq!(" AVX2 ".parse::<Backend>(), Ok(Backend::Avx2));
        assert_eq!("neon".parse::<Backend>(), Ok(Backend::Neon));
        let err = "sse9".parse::<Backend>().unwrap_err();
        assert!(err.to_string().contains("unknown kernel backend \"sse9\""));
    }

    #[test]
    fn scalar_always_available_and_best_is_available() {
        assert!(Backend::Scalar.is_available());
        assert!(Backend::best().is_available());
        assert!(Backend::active().is_available());
        assert_eq!(Backend::available_list()[0], Backend::Scalar);
    }

    #[test]
    fn missing_backend_is_a_clear_error() {
        // Exactly one of AVX2 and NEON can exist on a given target.
        let missing = if cfg!(target_arch = "aarch64") {
            Backend::Avx2
        } else {
            Backend::Neon
        };
        let err = missing.require().unwrap_err();
        assert_eq!(err, BackendError::Unavailable(missing));
        assert!(err.to_string().contains("not available on this CPU"));
    }
}
