//! The namespace lab (`scripts/lab.sh`) for the live tests of two crates
//! (`dataplane/tests/live_lab.rs`, `live_security.rs`,
//! `tests/tests/live_replay.rs` and `live_throughput.rs`, which include this
//! file by path): the binaries, whether the lab can run here, a command
//! run with a time limit, a guard that
//! takes the lab down, the router started and stopped, threads in a
//! namespace, and numbered UDP datagrams sent and collected.
#![allow(dead_code)]

pub mod l3;

use std::ffi::OsStr;
use std::fs::File;
use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
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

/// Why the ring backend cannot run here, if the kernel refuses a packet
/// ring ([`dataplane::io::ring::probe`]).
pub fn ring_refused() -> Option<String> {
    dataplane::io::ring::probe()
        .err()
        .map(|e| format!("the kernel refuses a packet ring: {e}"))
}

/// Why the xdp backend cannot run here, if the kernel refuses an AF_XDP
/// socket or the XDP program ([`dataplane::io::xdp::probe`]).
pub fn xdp_refused() -> Option<String> {
    dataplane::io::xdp::probe()
        .err()
        .map(|e| format!("the kernel refuses AF_XDP or the XDP program: {e}"))
}

/// Why `backend` cannot run here, if it cannot (pnet always can where the
/// lab can).
pub fn backend_refused(backend: &str) -> Option<String> {
    match backend {
        "ring" => ring_refused(),
        "xdp" => xdp_refused(),
        _ => None,
    }
}

/// Receive and transmit queues per veth end the lab needs for `backend`
/// with `workers` workers: AF_XDP binds a socket per queue, one worker per
/// queue at least; the others need one.
pub fn lab_queues(backend: &str, workers: u32) -> u32 {
    if backend == "xdp" { workers.max(1) } else { 1 }
}

/// The directory holding the `dataplane` and `traffic-gen` binaries, built
/// (or found fresh) by cargo with the profile this test was built with
/// (`BLOOMPLANE_BIN_DIR` names a directory of prebuilt ones instead).
pub fn binaries() -> PathBuf {
    if let Some(dir) = std::env::var_os("BLOOMPLANE_BIN_DIR") {
        return PathBuf::from(dir);
    }
    // target/<profile>/deps/<test>-<hash>
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps")
        .to_path_buf();
    let target_dir = profile_dir.parent().expect("target dir");
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("debug");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace())
        .args(["build", "--bins", "-p", "dataplane", "-p", "traffic-gen"])
        .env("CARGO_TARGET_DIR", target_dir);
    // `target/debug` holds two profiles' binaries: `cargo build` (dev,
    // unoptimized) and `cargo test` (test, optimized, as this test was
    // built). Whichever compiled last owns `target/debug/dataplane`, so a
    // plain `cargo build` here made the lab's router unoptimized or not
    // depending on the build history; under a flood the unoptimized ring
    // router lost frames. The test profile, always.
    match profile {
        "debug" => {
            cmd.args(["--profile", "test"]);
        }
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    let out = run_bounded(&mut cmd, Duration::from_secs(900), "cargo build");
    assert!(
        out.status.success(),
        "building the binaries failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    profile_dir
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
    /// Receive and transmit queues of every veth end (`LAB_QUEUES`).
    pub queues: u32,
}

impl Lab {
    /// Brings the lab up under `prefix` with a fresh scratch directory
    /// (`<tmp>/<prefix>-<what>`); panics with lab.sh's output if it fails.
    pub fn up(prefix: String, what: &str) -> Lab {
        Lab::up_queues(prefix, what, 1)
    }

    /// [`Lab::up`] with `queues` receive and transmit queues on every veth
    /// end (`LAB_QUEUES`; see [`lab_queues`]).
    pub fn up_queues(prefix: String, what: &str, queues: u32) -> Lab {
        let dir = std::env::temp_dir().join(format!("{prefix}-{what}"));
        std::fs::create_dir_all(&dir).unwrap();
        let lab = Lab {
            prefix,
            dir,
            router: None,
            queues,
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
        wait_for(err, READY, Duration::from_secs(10), router);
    }

    /// Writes `config` to `<dir>/<tag>.toml` and starts `bin run` with it
    /// ([`Lab::start_router`]), its standard error to `<dir>/<tag>.err` and
    /// its final report to `<dir>/<tag>.json`, whose paths come back.
    pub fn start_router_with(
        &mut self,
        bin: &Path,
        tag: &str,
        config: &str,
        extra: &[&OsStr],
    ) -> (PathBuf, PathBuf) {
        let cfg = self.dir.join(format!("{tag}.toml"));
        std::fs::write(&cfg, config).unwrap();
        let err = self.dir.join(format!("{tag}.err"));
        let report = self.dir.join(format!("{tag}.json"));
        let mut args: Vec<&OsStr> = vec![OsStr::new("--final-report"), report.as_os_str()];
        args.extend_from_slice(extra);
        self.start_router(bin, &cfg, &args, &err);
        (err, report)
    }

    /// SIGTERM to the running router; waits (`limit` at most) for it to
    /// exit 0 after printing its final stats; returns its standard error,
    /// its final report and how long it took to stop.
    pub fn stop_router(
        &mut self,
        err_path: &Path,
        report: &Path,
        limit: Duration,
    ) -> (String, serde_json::Value, Duration) {
        let mut router = self.router.take().unwrap();
        // SAFETY: kill(2) on the pid of our own child, which has not been
        // waited for, so the pid is not reused.
        let rc = unsafe { libc::kill(router.id() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(rc, 0);
        let start = Instant::now();
        let status = loop {
            if let Some(st) = router.try_wait().unwrap() {
                break st;
            }
            if start.elapsed() > limit {
                let _ = router.kill();
                let _ = router.wait();
                panic!(
                    "router did not stop within {limit:?} of SIGTERM:\n{}",
                    std::fs::read_to_string(err_path).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let took = start.elapsed();
        let err = std::fs::read_to_string(err_path).unwrap_or_default();
        assert!(status.success(), "router exit {status}:\n{err}");
        assert!(
            err.contains("== all workers"),
            "final stats printed:\n{err}"
        );
        // Workers that stop on the signal are not reported as failures.
        assert!(
            !err.contains("exited unexpectedly"),
            "a clean stop reported as a crash:\n{err}"
        );
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(report).expect("final report written")).unwrap();
        (err, report, took)
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
                .env("LAB_PREFIX", &self.prefix)
                .env("LAB_QUEUES", self.queues.to_string()),
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

/// The line `dataplane run` prints once its workers hold their ports.
/// Only its start: a fallback warning says "running on the ring backend"
/// before any port is open.
pub const READY: &str = "dataplane: running (";

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

/// Runs `f` on a thread that has entered namespace `ns`; sockets it creates
/// stay in that namespace.
pub fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    spawn_in_netns(ns, f).join().expect("namespace thread")
}

/// Like [`in_netns`], without waiting for `f`.
pub fn spawn_in_netns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> JoinHandle<T> {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        // SAFETY: `file` is an open namespace file for the duration of the
        // call; CLONE_NEWNET moves only this thread, which ends after `f`.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
}

/// Sets a socket option to `val`'s bytes; panics on failure.
pub fn setsockopt_bytes(s: &impl AsRawFd, level: libc::c_int, name: libc::c_int, val: &[u8]) {
    // SAFETY: `s` is an open socket; `val` is a live byte slice and its
    // exact length is passed.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            level,
            name,
            val.as_ptr().cast(),
            val.len() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "setsockopt: {}", std::io::Error::last_os_error());
}

/// Sets an `int` socket option; panics on failure.
pub fn setsockopt_int(s: &impl AsRawFd, level: libc::c_int, name: libc::c_int, val: libc::c_int) {
    setsockopt_bytes(s, level, name, &val.to_ne_bytes());
}

/// An 8 MiB receive buffer (`SO_RCVBUFFORCE`), so a burst is not lost
/// before the test reads it.
pub fn big_rcvbuf(s: &impl AsRawFd) {
    let v: libc::c_int = 8 << 20;
    setsockopt_bytes(s, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &v.to_ne_bytes());
}

/// Receives numbered datagrams until `want` distinct ones or `quiet` of
/// silence; returns (distinct, duplicates).
pub fn collect(s: &UdpSocket, want: u32, quiet: Duration) -> (u32, u32) {
    s.set_read_timeout(Some(quiet)).unwrap();
    let mut seen = vec![false; want as usize];
    let (mut distinct, mut dups) = (0, 0);
    let mut buf = [0u8; 2048];
    while distinct < want {
        match s.recv(&mut buf) {
            Ok(n) if n >= 4 => {
                let i = u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize;
                match seen.get_mut(i) {
                    Some(x) if !*x => {
                        *x = true;
                        distinct += 1;
                    }
                    _ => dups += 1,
                }
            }
            Ok(_) => dups += 1,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => break,
            Err(e) => panic!("recv: {e}"),
        }
    }
    (distinct, dups)
}

/// Sends datagrams numbered `0..n` to `to`.
pub fn send_numbered(s: &UdpSocket, to: SocketAddr, n: u32) {
    send_range(s, to, 0..n);
}

/// Sends datagrams numbered `range` to `to`.
pub fn send_range(s: &UdpSocket, to: SocketAddr, range: std::ops::Range<u32>) {
    let mut payload = [0u8; 64];
    for i in range {
        payload[..4].copy_from_slice(&i.to_be_bytes());
        s.send_to(&payload, to).expect("send");
        if i % 64 == 63 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// A packet socket bound to `ifname` of the calling thread's namespace
/// (protocol 0 until bound, so nothing of another interface arrives).
pub fn packet_socket(ifname: &str) -> OwnedFd {
    // SAFETY: plain socket(2) call; the result is checked before use.
    let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    assert!(raw >= 0, "socket: {}", std::io::Error::last_os_error());
    // SAFETY: `raw` was just returned by socket(2) and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let name = std::ffi::CString::new(ifname).unwrap();
    // SAFETY: `name` is a live NUL-terminated string.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    assert_ne!(index, 0, "{ifname}: {}", std::io::Error::last_os_error());
    // SAFETY: sockaddr_ll is plain old data; all zeroes is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    sll.sll_ifindex = index as libc::c_int;
    // SAFETY: `sll` is a live sockaddr_ll and its exact size is passed.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "bind: {}", std::io::Error::last_os_error());
    fd
}

/// Sends one frame on a bound packet socket; panics on failure.
pub fn send_frame(fd: &OwnedFd, frame: &[u8]) {
    // SAFETY: `fd` is an open, bound packet socket; `frame` is a live
    // byte slice and its exact length is passed.
    let n = unsafe { libc::send(fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
    assert_eq!(
        n,
        frame.len() as isize,
        "send: {}",
        std::io::Error::last_os_error()
    );
}

/// A counter of a JSON report (0 when absent).
pub fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// The entry named `name` of a report's `list` (`interfaces`, ...).
pub fn named<'a>(total: &'a serde_json::Value, list: &str, name: &str) -> &'a serde_json::Value {
    total[list]
        .as_array()
        .unwrap_or_else(|| panic!("{list} in {total}"))
        .iter()
        .find(|i| i["name"] == name)
        .unwrap_or_else(|| panic!("{list} {name} in {total}"))
}

/// The interface named `name` of a final report's total.
pub fn interface<'a>(total: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    named(total, "interfaces", name)
}
