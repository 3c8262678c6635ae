//! The routed lab of `scripts/lab-l3.sh` for the live tests that run three
//! routers (`live_triangle.rs`, `live_peering.rs`, `live_traceback.rs`): the namespaces, a
//! scratch directory, the routers started from the script's configs and
//! stopped with their final reports checked.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{binaries, run_bounded, u, wait_for, workspace};

/// The routers, in the order their reports come back.
pub const ROUTERS: [&str; 3] = ["r1", "r2", "r3"];

/// The routed lab: its namespaces, scratch directory and running routers;
/// the routers are killed and the lab taken down on drop.
pub struct L3Lab {
    prefix: String,
    /// The scratch directory (configs, logs, reports).
    pub dir: PathBuf,
    routers: Vec<(&'static str, Child)>,
    /// The routers' port backend (`[io] backend`), given to every run.
    pub backend: &'static str,
}

impl L3Lab {
    /// Brings the lab up under namespace prefix `prefix`.
    pub fn up(prefix: &str) -> L3Lab {
        let dir = std::env::temp_dir().join(format!("{prefix}-l3"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let lab = L3Lab {
            prefix: prefix.into(),
            dir,
            routers: Vec::new(),
            backend: "pnet",
        };
        lab.script(&["up"]);
        lab
    }

    /// Runs `lab-l3.sh args...` for this lab; panics with its output on
    /// failure.
    pub fn script(&self, args: &[&str]) -> String {
        let out = run_bounded(
            Command::new("bash")
                .arg(workspace().join("scripts/lab-l3.sh"))
                .args(args)
                .env("LAB_PREFIX", &self.prefix),
            Duration::from_secs(120),
            "lab-l3.sh",
        );
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "lab-l3.sh {args:?} failed:\n{text}");
        text
    }

    /// The namespace of host or router `n` (`ha`, `r1`, ...).
    pub fn ns(&self, n: &str) -> String {
        format!("{}-{n}", self.prefix)
    }

    /// Writes the three configs for run `tag` (lab-l3.sh's flags) and
    /// starts the routers; waits until each says it is running.
    pub fn start(&mut self, tag: &str, flags: &[&str]) -> PathBuf {
        self.start_with(tag, flags, "0")
    }

    /// [`start`](Self::start) with the routers' stats printed every
    /// `interval` (`--stats-interval`) to `DIR/<router>.err`.
    pub fn start_with(&mut self, tag: &str, flags: &[&str], interval: &str) -> PathBuf {
        let dir = self.dir.join(tag);
        let mut args = vec!["configs", dir.to_str().unwrap()];
        args.extend_from_slice(flags);
        if self.backend != "pnet" {
            args.push(self.backend);
        }
        if std::env::var_os("BLOOMPLANE_L3_STATIC").is_some_and(|v| v == "1") {
            args.push("static");
        }
        self.script(&args);
        let bin = binaries().join("dataplane");
        for r in ROUTERS {
            let err = dir.join(format!("{r}.err"));
            let mut child = Command::new("ip")
                .args(["netns", "exec", &self.ns(r)])
                .arg(&bin)
                .arg("run")
                .arg("--config")
                .arg(dir.join(format!("{r}.toml")))
                .args(["--stats-interval", interval, "--final-report"])
                .arg(dir.join(format!("{r}.json")))
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&err).unwrap())
                .spawn()
                .expect("start a router");
            wait_for(&err, super::READY, Duration::from_secs(10), &mut child);
            self.routers.push((r, child));
        }
        dir
    }

    /// The process id of router `r`, while it runs.
    pub fn pid(&self, r: &str) -> Option<u32> {
        self.routers
            .iter()
            .find(|(n, _)| *n == r)
            .map(|(_, c)| c.id())
    }

    /// SIGKILL to router `r` (as a crash would): it leaves no report, and
    /// [`stop`](Self::stop) no longer waits for it.
    pub fn kill(&mut self, r: &str) {
        if let Some(i) = self.routers.iter().position(|(n, _)| *n == r) {
            let (_, mut c) = self.routers.remove(i);
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM to every router; each must exit 0 with its final report,
    /// which comes back (in `ROUTERS` order) after the accounting check.
    pub fn stop(&mut self, dir: &Path) -> Vec<serde_json::Value> {
        for (_, c) in &self.routers {
            // SAFETY: kill(2) on the pid of our own child, not yet waited
            // for, so the pid is not reused.
            unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
        }
        let start = Instant::now();
        let mut reports = Vec::new();
        for (r, mut c) in self.routers.drain(..) {
            let err = std::fs::read_to_string(dir.join(format!("{r}.err"))).unwrap_or_default();
            let status = loop {
                if let Some(st) = c.try_wait().unwrap() {
                    break st;
                }
                if start.elapsed() > Duration::from_secs(15) {
                    let _ = c.kill();
                    let _ = c.wait();
                    panic!("{r} did not stop within 15 s of SIGTERM:\n{err}");
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            let err = std::fs::read_to_string(dir.join(format!("{r}.err"))).unwrap_or_default();
            assert!(status.success(), "{r} exit {status}:\n{err}");
            let report: serde_json::Value = serde_json::from_slice(
                &std::fs::read(dir.join(format!("{r}.json"))).expect("final report"),
            )
            .unwrap();
            let pl = &report["total"]["pipeline"];
            assert_eq!(
                u(&pl["received"]),
                u(&pl["forwarded"]) + u(&pl["consumed"]) + u(&pl["dropped"]) + u(&pl["held"]),
                "{r}: received = forwarded + local + dropped + held: {pl}"
            );
            reports.push(report);
        }
        reports
    }

    /// Runs `cmd` in host `h`'s namespace (60 s at most).
    pub fn on(&self, h: &str, cmd: &[&str]) -> (bool, String) {
        let out = run_bounded(
            Command::new("ip")
                .args(["netns", "exec", &self.ns(h)])
                .args(cmd),
            Duration::from_secs(60),
            cmd[0],
        );
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }
}

impl Drop for L3Lab {
    fn drop(&mut self) {
        for (_, c) in &mut self.routers {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = run_bounded(
            Command::new("bash")
                .arg(workspace().join("scripts/lab-l3.sh"))
                .arg("down")
                .env("LAB_PREFIX", &self.prefix),
            Duration::from_secs(60),
            "lab-l3.sh down",
        );
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
