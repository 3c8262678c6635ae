//! Three routers in the routed lab (`scripts/lab-l3.sh`): hosts A and B,
//! routers R1, R2, R3 in a triangle, each a `dataplane run` of its own in
//! its own namespace, real veths, the hosts' own kernels.
//!
//! Needs root and `ip netns`; otherwise it prints why and passes as
//! skipped. Checks, in three runs of the three routers:
//!
//! 1. **Routes** (the plain configs): `ping` from A reaches B in IPv4 and
//!    IPv6 and every router's address (echo replies from the dataplane);
//!    `traceroute` from A to B names R1, R2 and B, in order (each router
//!    answers an expiring probe with Time Exceeded from the address of the
//!    port it came in by).
//! 2. **A loop without Icarus**: the configs route 10.99.0.0/16 round the
//!    triangle (R1 -> R2 -> R3 -> R1). A sends `N` datagrams with TTL 64
//!    into it: every one crosses 63 router-to-router links and dies at R1
//!    (64 = 3 x 21 + 1), counted as `ttl_expired`, with a Time Exceeded
//!    back to A.
//! 3. **The same loop with Icarus** (filters inserted on the host ports
//!    r1-a and r2-b): every looping datagram is dropped at R1, its first
//!    revisit, after 3 links; datagrams from A to B (a loop-free path
//!    through R1 and R2) all arrive. Node masks are fixed per node, so
//!    whether R2 alarms on that path is decided by the two masks (R1's
//!    does not cover R2's, checked); over random node ids the chance that
//!    it would is the exact false-alarm probability of two nodes with m =
//!    128, k = 6, C(6,6) / C(128,6), about 2e-10
//!    (`stage::icarus::false_alarm_probability`).
//!
//! Every router's final report must balance: received = forwarded +
//! local (answered or consumed by the router) + dropped by reason + held
//! (waiting for a neighbour). The looping link load (frames sent on the triangle's
//! links per looping datagram) is printed for the README.
//!
//! Neighbours are resolved with ARP / NS by default; with
//! `BLOOMPLANE_L3_STATIC=1` the lab writes static neighbours instead.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod lab_common;

use dataplane::stage::icarus::{
    FilterParams, false_alarm_probability, filter_after_hops, node_mask,
};
use lab_common::{
    binaries, in_netns, interface, run_bounded, skip_reason, spawn_in_netns, u, wait_for, workspace,
};

/// Datagrams sent into the loop per run.
const LOOPING: u32 = 200;
/// Datagrams from A to B in the Icarus run.
const THROUGH: u32 = 500;
const ROUTERS: [&str; 3] = ["r1", "r2", "r3"];
/// Frames the routers may send on the triangle's links of their own:
/// ARP / NS requests and replies for their next hops (a few per router).
const NEIGHBOUR_FRAMES: u64 = 24;

/// The routed lab: its namespaces, scratch directory and running routers;
/// the routers are killed and the lab taken down on drop.
struct L3Lab {
    prefix: String,
    dir: PathBuf,
    routers: Vec<Child>,
}

impl L3Lab {
    fn up(prefix: &str) -> L3Lab {
        let dir = std::env::temp_dir().join(format!("{prefix}-l3"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let lab = L3Lab {
            prefix: prefix.into(),
            dir,
            routers: Vec::new(),
        };
        lab.script(&["up"]);
        lab
    }

    /// Runs `lab-l3.sh args...` for this lab; panics with its output on
    /// failure.
    fn script(&self, args: &[&str]) -> String {
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

    fn ns(&self, n: &str) -> String {
        format!("{}-{n}", self.prefix)
    }

    /// Writes the three configs for run `tag` (lab-l3.sh's flags) and
    /// starts the routers; waits until each says it is running.
    fn start(&mut self, tag: &str, flags: &[&str]) -> PathBuf {
        let dir = self.dir.join(tag);
        let mut args = vec!["configs", dir.to_str().unwrap()];
        args.extend_from_slice(flags);
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
                .args(["--stats-interval", "0", "--final-report"])
                .arg(dir.join(format!("{r}.json")))
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&err).unwrap())
                .spawn()
                .expect("start a router");
            wait_for(&err, "running", Duration::from_secs(10), &mut child);
            self.routers.push(child);
        }
        dir
    }

    /// SIGTERM to every router; each must exit 0 with its final report,
    /// which comes back (in `ROUTERS` order) after the accounting check.
    fn stop(&mut self, dir: &Path) -> Vec<serde_json::Value> {
        for c in &self.routers {
            // SAFETY: kill(2) on the pid of our own child, not yet waited
            // for, so the pid is not reused.
            unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
        }
        let start = Instant::now();
        let mut reports = Vec::new();
        for (r, mut c) in ROUTERS.iter().zip(self.routers.drain(..)) {
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

    /// Runs `cmd` in host `h`'s namespace (30 s at most).
    fn on(&self, h: &str, cmd: &[&str]) -> (bool, String) {
        let out = run_bounded(
            Command::new("ip")
                .args(["netns", "exec", &self.ns(h)])
                .args(cmd),
            Duration::from_secs(30),
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
        for c in &mut self.routers {
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

/// A drop counter of a router's final report (0 when absent).
fn drops(report: &serde_json::Value, reason: &str) -> u64 {
    u(&report["total"]["pipeline"]["drops"][reason])
}

/// Frames a router sent out of `port`.
fn sent(report: &serde_json::Value, port: &str) -> u64 {
    u(&interface(&report["total"], port)["sent"])
}

/// The frames sent on the triangle's links, summed over the routers.
fn triangle_load(reports: &[serde_json::Value]) -> u64 {
    sent(&reports[0], "r1-r2")
        + sent(&reports[0], "r1-r3")
        + sent(&reports[1], "r2-r1")
        + sent(&reports[1], "r2-r3")
        + sent(&reports[2], "r3-r1")
        + sent(&reports[2], "r3-r2")
}

/// Sends `n` datagrams from host A to `to` with TTL 64, 1 ms apart (the
/// first waits for A's kernel to resolve its gateway).
fn send_from_a(lab: &L3Lab, to: SocketAddr, n: u32) {
    in_netns(&lab.ns("ha"), move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        s.set_ttl(64).unwrap();
        for i in 0..n {
            // A send may fail while A's kernel resolves the gateway; the
            // datagram is then retried.
            let mut tries = 0;
            while s.send_to(&i.to_be_bytes(), to).is_err() && tries < 100 {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}

#[test]
fn three_routers_route_and_icarus_stops_a_loop() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let prefix = format!("l3{}", std::process::id() % 10_000);
    let mut lab = L3Lab::up(&prefix);

    // 1. Routes: pings and traceroute.
    let dir = lab.start("plain", &[]);
    let have_ping = Command::new("ping").arg("-V").output().is_ok();
    if have_ping {
        for to in [
            "10.81.2.2",
            "2001:db8:81:2::2",
            "10.81.1.1",
            "10.81.12.2",
            "10.81.23.3",
            "2001:db8:81:13::3",
        ] {
            let (ok, text) = lab.on("ha", &["ping", "-c", "2", "-W", "2", "-i", "0.2", to]);
            assert!(ok, "ping {to} from A:\n{text}");
        }
    } else {
        eprintln!("ping not installed (iputils-ping): pings skipped");
    }
    if Command::new("traceroute").arg("--version").output().is_ok() {
        let (ok, text) = lab.on(
            "ha",
            &[
                "traceroute",
                "-n",
                "-q",
                "1",
                "-w",
                "2",
                "-m",
                "6",
                "10.81.2.2",
            ],
        );
        assert!(ok, "traceroute:\n{text}");
        let hops: Vec<&str> = text
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().nth(1))
            .collect();
        assert_eq!(
            hops,
            ["10.81.1.1", "10.81.12.2", "10.81.2.2"],
            "traceroute A -> B names R1, R2, B:\n{text}"
        );
    } else {
        eprintln!("traceroute not installed: skipped");
    }
    let reports = lab.stop(&dir);
    assert!(
        u(&reports[0]["total"]["pipeline"]["forwarded"]) > 0,
        "R1 forwarded: {}",
        reports[0]["total"]
    );

    // 2. The loop without Icarus: 63 links each, TTL expiry at R1.
    let looped = SocketAddr::from((Ipv4Addr::new(10, 99, 0, 5), 9));
    let dir = lab.start("loop", &["loop"]);
    // A Time Exceeded listener on A: a raw ICMP socket.
    let icmp = spawn_in_netns(&lab.ns("ha"), || {
        count_time_exceeded(Duration::from_secs(4))
    });
    send_from_a(&lab, looped, LOOPING);
    std::thread::sleep(Duration::from_millis(500));
    let time_exceeded = icmp.join().unwrap();
    let reports = lab.stop(&dir);
    let expired: Vec<u64> = reports.iter().map(|r| drops(r, "ttl_expired")).collect();
    assert_eq!(
        expired,
        [u64::from(LOOPING), 0, 0],
        "every looping datagram dies at R1 (hop 64)"
    );
    let load_plain = triangle_load(&reports);
    assert!(
        (63 * u64::from(LOOPING)..=63 * u64::from(LOOPING) + NEIGHBOUR_FRAMES)
            .contains(&load_plain),
        "63 router-to-router links per datagram: {load_plain} frames"
    );
    assert!(
        time_exceeded >= 1 && time_exceeded <= u64::from(LOOPING),
        "Time Exceeded back at A: {time_exceeded}"
    );

    // 3. The same loop with Icarus: dropped at the first revisit; a
    // loop-free path raises no alarm.
    let dir = lab.start("icarus", &["loop", "icarus"]);
    let b = spawn_in_netns(&lab.ns("hb"), || {
        let s = UdpSocket::bind("0.0.0.0:7000").unwrap();
        lab_common::big_rcvbuf(&s);
        lab_common::collect(&s, THROUGH, Duration::from_secs(3))
    });
    std::thread::sleep(Duration::from_millis(100));
    send_from_a(
        &lab,
        SocketAddr::from((Ipv4Addr::new(10, 81, 2, 2), 7000)),
        THROUGH,
    );
    send_from_a(&lab, looped, LOOPING);
    let (distinct, dups) = b.join().unwrap();
    let reports = lab.stop(&dir);
    let loops: Vec<u64> = reports.iter().map(|r| drops(r, "loop")).collect();
    assert_eq!(
        loops,
        [u64::from(LOOPING), 0, 0],
        "every looping datagram is dropped at R1, its first revisit"
    );
    let expired: u64 = reports.iter().map(|r| drops(r, "ttl_expired")).sum();
    assert_eq!(expired, 0, "no datagram lives to its TTL");
    let load_icarus = triangle_load(&reports) - u64::from(THROUGH);
    assert!(
        (3 * u64::from(LOOPING)..=3 * u64::from(LOOPING) + NEIGHBOUR_FRAMES).contains(&load_icarus),
        "3 links per looping datagram (A to B adds one link each): {load_icarus} frames"
    );
    assert_eq!(
        u(&interface(&reports[1]["total"], "r2-b")["stripped"]),
        u64::from(THROUGH),
        "B's datagrams leave R2 without their filter"
    );
    assert_eq!(
        (distinct, dups),
        (THROUGH, 0),
        "every datagram A -> B arrives once: no false alarm on a loop-free path"
    );
    // The masks are fixed per node: with node ids 1 and 2 (the lab's), R2
    // alarms on A -> B exactly when R1's mask covers R2's, which is what
    // the exact probability below is the chance of over random ids.
    let params = FilterParams::default();
    assert!(
        !filter_after_hops(&[1], &params).contains_all(&node_mask(2, &params)),
        "R1's mask does not cover R2's, so no datagram A -> B may alarm"
    );
    let p2 = false_alarm_probability(128, 6, 2);
    eprintln!(
        "looping link load per datagram: {:.2} links without Icarus, {:.2} with (TTL 64, {LOOPING} datagrams); \
         false alarms A -> B: 0 of {THROUGH} (exact probability for 2 nodes, m = 128, k = 6: {p2:.2e}); \
         Time Exceeded at A: {time_exceeded}",
        load_plain as f64 / f64::from(LOOPING),
        load_icarus as f64 / f64::from(LOOPING),
    );
}

/// Counts ICMP Time Exceeded messages arriving in this namespace for
/// `window`.
fn count_time_exceeded(window: Duration) -> u64 {
    // SAFETY: socket(2) with constant arguments; the descriptor is owned
    // by the `OwnedFd` at once.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_ICMP) };
    assert!(
        fd >= 0,
        "raw ICMP socket: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let sock = UdpSocket::from(fd);
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let start = Instant::now();
    let mut n = 0;
    let mut buf = [0u8; 2048];
    while start.elapsed() < window {
        if let Ok(len) = sock.recv(&mut buf) {
            // An IPv4 header (IHL words), then the ICMP type.
            let ihl = usize::from(buf[0] & 0x0f) * 4;
            if len > ihl && buf[ihl] == 11 {
                n += 1;
            }
        }
    }
    n
}
