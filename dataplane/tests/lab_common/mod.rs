//! The namespace lab (`scripts/lab.sh`) for the live tests of two crates
//! (`dataplane/tests/live_lab.rs`, `tests/tests/live_replay.rs`, which
//! includes this file by path): whether the lab can run here, a command
//! run with a time limit, and a guard that takes the lab down.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The workspace root (both crates sit one level below it).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Why the test cannot run here, if it cannot.
pub fn skip_reason() -> Option<String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root".into());
    }
    match Command::new("ip").args(["netns", "list"]).output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "`ip netns list` failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Some(format!("`ip` unavailable: {e}")),
    }
}

/// Runs `cmd` to completion within `limit`, killing it past that; its
/// output goes through files so that nothing blocks on a full pipe.
pub fn run_bounded(cmd: &mut Command, limit: Duration, what: &str) -> Output {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let stem = std::env::temp_dir().join(format!(
        "bplab-{}-{}",
        std::process::id(),
        RUNS.fetch_add(1, Ordering::Relaxed)
    ));
    let (out_path, err_path) = (stem.with_extension("out"), stem.with_extension("err"));
    let mut child = cmd
        .stdout(File::create(&out_path).expect("stdout file"))
        .stderr(File::create(&err_path).expect("stderr file"))
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{what}: no result within {limit:?}; killed:\n{}",
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = Output {
        status,
        stdout: std::fs::read(&out_path).unwrap_or_default(),
        stderr: std::fs::read(&err_path).unwrap_or_default(),
    };
    let _ = std::fs::remove_file(&out_path);
    let _ = std::fs::remove_file(&err_path);
    out
}

/// Kills the router and takes the lab down on drop.
pub struct Lab {
    /// The namespaces' prefix (`LAB_PREFIX`).
    pub prefix: String,
    /// A scratch directory, removed on drop.
    pub dir: PathBuf,
    /// The router process, killed on drop.
    pub router: Option<Child>,
}

impl Lab {
    /// Brings the lab up under `prefix` with a fresh scratch directory
    /// (`<tmp>/<prefix>-<what>`); panics with lab.sh's output if it fails.
    pub fn up(prefix: String, what: &str) -> Lab {
        let dir = std::env::temp_dir().join(format!("{prefix}-{what}"));
        std::fs::create_dir_all(&dir).unwrap();
        let lab = Lab {
            prefix,
            dir,
            router: None,
        };
        let up = lab.lab("up");
        assert!(
            up.status.success(),
            "lab.sh up failed:\n{}{}",
            String::from_utf8_lossy(&up.stdout),
            String::from_utf8_lossy(&up.stderr)
        );
        lab
    }

    /// Starts `bin run --config config --stats-interval 0 extra...` (the
    /// `dataplane` binary) in the router namespace, its standard error into
    /// `err`, and waits (10 s at most) until it says it is running.
    pub fn start_router(&mut self, bin: &Path, config: &Path, extra: &[&OsStr], err: &Path) {
        let router = Command::new("ip")
            .args(["netns", "exec", &self.ns("r")])
            .arg(bin)
            .arg("run")
            .arg("--config")
            .arg(config)
            .args(["--stats-interval", "0"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(File::create(err).unwrap())
            .spawn()
            .expect("start the router");
        let router = self.router.insert(router);
        wait_for(err, "running", Duration::from_secs(10), router);
    }

    /// The namespace of `host` (`a`, `b`, `r`, ...).
    pub fn ns(&self, host: &str) -> String {
        format!("{}-{host}", self.prefix)
    }

    /// Runs `lab.sh cmd` for this prefix, within two minutes.
    pub fn lab(&self, cmd: &str) -> Output {
        run_bounded(
            Command::new("bash")
                .arg(workspace().join("scripts/lab.sh"))
                .arg(cmd)
                .env("LAB_PREFIX", &self.prefix),
            Duration::from_secs(120),
            "lab.sh",
        )
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(mut c) = self.router.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = self.lab("down");
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Polls `path` until it contains `needle` (returning the text), failing
/// if `router` exits first or `timeout` passes.
pub fn wait_for(path: &Path, needle: &str, timeout: Duration, router: &mut Child) -> String {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.contains(needle) {
            return text;
        }
        if let Ok(Some(st)) = router.try_wait() {
            panic!("router exited early ({st}):\n{text}");
        }
        assert!(
            start.elapsed() < timeout,
            "no \"{needle}\" after {timeout:?}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
