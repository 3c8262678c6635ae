//! The live router in a network-namespace lab (`scripts/lab.sh`): real
//! sockets, real veths.
//!
//! Needs root and `ip netns`; otherwise it prints why and passes as skipped.
//! It brings the lab up under a prefix of its own (so parallel runs do not
//! collide), runs the built `dataplane` binary in the router namespace, and
//! checks:
//!
//! 1. unicast A -> B: N numbered UDP datagrams all arrive, once each, and
//!    the router's counters account for every one;
//! 2. multicast: a group listed behind B only reaches B, and nothing at all
//!    leaves by C's port;
//! 3. icarus: datagrams whose filter already holds the router's mask are
//!    dropped as loops and counted;
//! 4. SIGTERM: the router drains, writes its final report and exits 0.
//!
//! Everything is bounded by timeouts, and a guard kills the router and takes
//! the lab down whatever happens.

use std::fs::File;
use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dataplane::stage::icarus::{FilterParams, node_mask};

const A: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
const GROUP: Ipv4Addr = Ipv4Addr::new(239, 1, 1, 1);
const NODE_ID: u64 = 7;
const UNICAST: u32 = 2000;
const MULTICAST: u32 = 200;
const LOOPING: u32 = 50;

fn lab_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/lab.sh")
}

/// Why the test cannot run here, if it cannot.
fn skip_reason() -> Option<String> {
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

/// Kills the router and takes the lab down on drop.
struct Lab {
    prefix: String,
    dir: PathBuf,
    router: Option<Child>,
}

impl Lab {
    fn ns(&self, host: &str) -> String {
        format!("{}-{host}", self.prefix)
    }

    fn lab(&self, cmd: &str) -> std::process::Output {
        Command::new("bash")
            .arg(lab_script())
            .arg(cmd)
            .env("LAB_PREFIX", &self.prefix)
            .output()
            .expect("run lab.sh")
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

/// Runs `f` on a thread that has entered namespace `ns`; sockets it creates
/// stay in that namespace.
fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        // SAFETY: `file` is an open namespace file for the duration of the
        // call; CLONE_NEWNET moves only this thread, which ends after `f`.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .expect("namespace thread")
}

fn setsockopt_bytes(s: &UdpSocket, level: libc::c_int, name: libc::c_int, val: &[u8]) {
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

fn big_rcvbuf(s: &UdpSocket) {
    let v: libc::c_int = 8 << 20;
    setsockopt_bytes(s, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &v.to_ne_bytes());
}

/// Receives numbered datagrams until `want` distinct ones or `quiet` of
/// silence; returns (distinct, duplicates).
fn collect(s: &UdpSocket, want: u32, quiet: Duration) -> (u32, u32) {
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

fn send_numbered(s: &UdpSocket, to: SocketAddr, n: u32) {
    let mut payload = [0u8; 64];
    for i in 0..n {
        payload[..4].copy_from_slice(&i.to_be_bytes());
        s.send_to(&payload, to).expect("send");
        if i % 64 == 63 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

fn wait_for(path: &Path, needle: &str, timeout: Duration, router: &mut Child) -> String {
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

#[test]
fn live_router_in_netns_lab() {
    if let Some(why) = skip_reason() {
        eprintln!("live_router_in_netns_lab: skipped: {why}");
        return;
    }
    let t0 = Instant::now();
    let prefix = format!("bpl{}", std::process::id() % 100_000);
    let dir = std::env::temp_dir().join(format!("{prefix}-live"));
    std::fs::create_dir_all(&dir).unwrap();
    let mut lab = Lab {
        prefix,
        dir: dir.clone(),
        router: None,
    };
    let up = lab.lab("up");
    assert!(
        up.status.success(),
        "lab.sh up failed:\n{}{}",
        String::from_utf8_lossy(&up.stdout),
        String::from_utf8_lossy(&up.stderr)
    );

    let config = dir.join("router.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[workers]
count = 2

[[interfaces]]
name = "r-a"
[[interfaces]]
name = "r-b"
multicast_groups = ["{GROUP}"]
[[interfaces]]
name = "r-c"

[[wires]]
from = "r-a"
to = "r-b"
bidirectional = true

[icarus]
node_id = {NODE_ID}

[heavy]
threshold = {{ packets = 100 }}
epoch_ms = 500
"#
        ),
    )
    .unwrap();
    let stderr_path = dir.join("router.err");
    let final_path = dir.join("final.json");
    let heavy_path = dir.join("heavy.jsonl");
    let router = Command::new("ip")
        .args(["netns", "exec", &lab.ns("r")])
        .arg(env!("CARGO_BIN_EXE_dataplane"))
        .arg("run")
        .arg("--config")
        .arg(&config)
        .args(["--stats-interval", "0"])
        .arg("--final-report")
        .arg(&final_path)
        .arg("--heavy-report")
        .arg(&heavy_path)
        .stdout(Stdio::null())
        .stderr(File::create(&stderr_path).unwrap())
        .spawn()
        .expect("start the router");
    lab.router = Some(router);
    wait_for(
        &stderr_path,
        "running",
        Duration::from_secs(10),
        lab.router.as_mut().unwrap(),
    );

    // Receivers in B (unicast, multicast, loop port), sender in A.
    let (rx_uni, rx_multi, rx_loop) = in_netns(&lab.ns("b"), || {
        let u = UdpSocket::bind((B, 9000)).unwrap();
        big_rcvbuf(&u);
        let m = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 9001)).unwrap();
        big_rcvbuf(&m);
        m.join_multicast_v4(&GROUP, &B).unwrap();
        let l = UdpSocket::bind((B, 9002)).unwrap();
        (u, m, l)
    });
    let (tx, tx_loop) = in_netns(&lab.ns("a"), || {
        let s = UdpSocket::bind((A, 0)).unwrap();
        s.set_multicast_ttl_v4(4).unwrap();
        let l = UdpSocket::bind((A, 0)).unwrap();
        (s, l)
    });

    // 1. Unicast.
    send_numbered(&tx, SocketAddr::from((B, 9000)), UNICAST);
    let (got, dups) = collect(&rx_uni, UNICAST, Duration::from_secs(3));
    assert_eq!((got, dups), (UNICAST, 0), "unicast A -> B");

    // 2. Multicast (the router learns nothing it needs from B's IGMP join:
    // the group is static behind r-b; the join itself stays on B's link).
    send_numbered(&tx, SocketAddr::from((GROUP, 9001)), MULTICAST);
    let (got, dups) = collect(&rx_multi, MULTICAST, Duration::from_secs(3));
    assert_eq!((got, dups), (MULTICAST, 0), "multicast A -> group behind B");

    // 3. Looping packets: the IPv4 option already holds the router's mask.
    let mask = node_mask(NODE_ID, &FilterParams::default());
    let m = mask.width().bits() / 8;
    let mut opt = vec![
        0x01,
        0x01,
        dataplane::wire::icarus::IPV4_OPTION_TYPE,
        (2 + m) as u8,
    ];
    opt.resize(4 + m, 0);
    mask.write_bytes(&mut opt[4..]);
    setsockopt_bytes(&tx_loop, libc::IPPROTO_IP, libc::IP_OPTIONS, &opt);
    send_numbered(&tx_loop, SocketAddr::from((B, 9002)), LOOPING);
    let (got, _) = collect(&rx_loop, LOOPING, Duration::from_millis(500));
    assert_eq!(got, 0, "looping packets must not reach B");

    // 4. SIGTERM: drain, final report, exit 0.
    let mut router = lab.router.take().unwrap();
    // SAFETY: kill(2) on the pid of our own child, which has not been
    // waited for, so the pid is not reused.
    let rc = unsafe { libc::kill(router.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let start = Instant::now();
    let status = loop {
        if let Some(st) = router.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > Duration::from_secs(10) {
            let _ = router.kill();
            let _ = router.wait();
            panic!("router did not stop within 10 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let err = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    assert!(status.success(), "router exit {status}:\n{err}");
    assert!(
        err.contains("== all workers"),
        "final stats printed:\n{err}"
    );

    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&final_path).expect("final report written")).unwrap();
    let total = &report["total"];
    let u = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    let ifs = total["interfaces"].as_array().unwrap();
    let by_name = |n: &str| ifs.iter().find(|i| i["name"] == n).unwrap().clone();
    let (ra, rb, rc_) = (by_name("r-a"), by_name("r-b"), by_name("r-c"));
    let sent = u64::from(UNICAST + MULTICAST + LOOPING);
    assert!(u(&ra["rx_packets"]) >= sent, "r-a rx: {ra}");
    assert!(
        u(&rb["tx_packets"]) >= u64::from(UNICAST + MULTICAST),
        "r-b tx: {rb}"
    );
    assert_eq!(
        u(&rc_["tx_packets"]),
        0,
        "nothing leaves by C's port: {rc_}"
    );
    let pl = &total["pipeline"];
    assert_eq!(
        u(&pl["received"]),
        u(&pl["forwarded"]) + u(&pl["dropped"]),
        "{pl}"
    );
    assert_eq!(u(&pl["drops"]["loop"]), u64::from(LOOPING), "{pl}");
    assert_eq!(
        u(&total["icarus"]["loops_detected"]),
        u64::from(LOOPING),
        "{total}"
    );
    assert!(
        u(&total["multicast"]["forwarded"]) >= u64::from(MULTICAST),
        "{total}"
    );
    let workers = report["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 2);
    // Heavy flows: the unicast flow (2000 packets) is heavy at 100 packets.
    let heavy = std::fs::read_to_string(&heavy_path).unwrap_or_default();
    assert!(
        heavy.lines().any(|l| l.contains("10.77.0.2:9000")),
        "heavy report:\n{heavy}"
    );
    drop(lab);
    eprintln!("live_router_in_netns_lab: ok in {:?}", t0.elapsed());
}
