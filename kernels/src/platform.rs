//! Where the kernels run: the CPU's model, the target features this binary
//! was compiled with, and one line that names the backend and the hash's
//! instructions. Binaries print [`summary`] in `--version` and at the top of
//! reports, so every figure says which machine and which code produced it
//! (the same source runs at different speeds on AMD and Intel cores).

use crate::backend::Backend;
use crate::hash::Hasher;

/// The CPU's model name and its core count from `/proc/cpuinfo` ("unknown"
/// where there is none), with the SIMD flags that decide the backend.
pub fn cpu_model() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |k: &str| {
        info.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    };
    let model = field("model name")
        .or_else(|| field("CPU part").map(|p| format!("CPU part {p}")))
        .unwrap_or_else(|| "unknown".into());
    let flags = field("flags")
        .or_else(|| field("Features"))
        .unwrap_or_default();
    let has = |f: &str| flags.split_whitespace().any(|x| x == f);
    let simd: Vec<&str> = ["avx2", "avx512f", "avx512vl", "aes", "vaes", "asimd"]
        .into_iter()
        .filter(|f| has(f))
        .collect();
    let cores = info.lines().filter(|l| l.starts_with("processor")).count();
    if simd.is_empty() {
        format!("{model}, {cores} cpus")
    } else {
        format!("{model}, {cores} cpus, {}", simd.join(" "))
    }
}

/// The SIMD-related target features this binary was compiled with (the
/// baseline of its target plus any `-C target-cpu` / `target-feature`):
/// what the compiler may use everywhere, as opposed to what the backends
/// detect at run time.
pub fn compiled_features() -> Vec<&'static str> {
    let mut v = Vec::new();
    macro_rules! enabled {
        ($($f:tt),*) => {
            $(if cfg!(target_feature = $f) { v.push($f); })*
        };
    }
    #[cfg(target_arch = "x86_64")]
    enabled!(
        "sse2", "sse3", "ssse3", "sse4.1", "sse4.2", "popcnt", "avx", "avx2", "fma", "bmi2", "aes",
        "vaes", "avx512f", "avx512bw", "avx512vl"
    );
    #[cfg(target_arch = "aarch64")]
    enabled!("neon", "aes", "sha2", "crc", "sve");
    v
}

/// One line: the backend, its lanes and hash instructions, the backends
/// this CPU has, the CPU, and the compile-time target features. For
/// example `kernels: backend avx2 (8 lanes, hash vaes-256; available
/// scalar, avx2); cpu AMD EPYC, 2 cpus, avx2 aes vaes; built for x86_64
/// with sse2`.
pub fn summary(backend: Backend) -> String {
    let hash = Hasher::instructions_on(backend);
    let available: Vec<&str> = Backend::available_list()
        .into_iter()
        .map(Backend::name)
        .collect();
    format!(
        "kernels: backend {backend} ({} lanes, hash {hash}; available {}); cpu {}; built for {} with {}",
        backend.lanes(),
        available.join(", "),
        cpu_model(),
        std::env::consts::ARCH,
        compiled_features().join(" ")
    )
}

/// `--version`'s long text for a binary of version `version`: the version,
/// then [`summary`] for the backend `BLOOMPLANE_BACKEND` asks for (the best
/// one where it is unset or cannot run here; programs report a bad setting
/// as an error of their own, and this prints no warning).
pub fn long_version(version: &str) -> String {
    let backend = Backend::from_env()
        .ok()
        .flatten()
        .unwrap_or_else(Backend::best);
    format!("{version}\n{}", summary(backend))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_names_the_backend_and_the_build() {
        let s = summary(Backend::Scalar);
        assert!(
            s.starts_with("kernels: backend scalar (1 lanes, hash aes-crate;"),
            "{s}"
        );
        assert!(s.contains(std::env::consts::ARCH), "{s}");
        #[cfg(target_arch = "x86_64")]
        assert!(compiled_features().contains(&"sse2"), "x86_64's baseline");
        let best = summary(Backend::best());
        assert!(best.contains(Backend::best().name()), "{best}");
    }
}
