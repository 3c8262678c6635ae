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
//!
//! The test runs on the pnet backend and again on xdp (`[io] backend =
//! "xdp"`, skipped with the kernel's reason where AF_XDP is refused). On
//! xdp the plain run also sends host A's router frames that are not its
//! own (LLDP): R1's XDP program leaves them to R1's kernel and counts them
//! (`rx_passed`), and the router never reads them.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

mod lab_common;

use dataplane::stage::icarus::{
    FilterParams, false_alarm_probability, filter_after_hops, node_mask,
};
use lab_common::l3::L3Lab;
use lab_common::{in_netns, interface, skip_reason, spawn_in_netns, u};

/// Datagrams sent into the loop per run.
const LOOPING: u32 = 200;
/// Datagrams from A to B in the Icarus run.
const THROUGH: u32 = 500;
/// Frames the routers may send on the triangle's links of their own:
/// ARP / NS requests and replies for their next hops (a few per router).
const NEIGHBOUR_FRAMES: u64 = 24;

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
    triangle("pnet");
}

#[test]
fn three_routers_route_and_icarus_stops_a_loop_xdp() {
    triangle("xdp");
}

/// One triangle at a time.
static ONE_LAB: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// LLDP frames host A sends R1 in the plain run.
const LLDP: u32 = 12;

/// An LLDP frame (EtherType 0x88cc) from A's MAC to the LLDP group
/// address: a chassis id, a port id and a TTL, then the end.
fn lldp_frame() -> Vec<u8> {
    let mut f = vec![0x01, 0x80, 0xc2, 0x00, 0x00, 0x0e];
    f.extend_from_slice(&[0x02, 0x81, 0x00, 0x01, 0x00, 0x02, 0x88, 0xcc]);
    // Chassis id (MAC), port id (interface name), TTL 120, end.
    f.extend_from_slice(&[0x02, 0x07, 0x04, 0x02, 0x81, 0x00, 0x01, 0x00, 0x02]);
    f.extend_from_slice(&[0x04, 0x05, 0x05, b'e', b't', b'h', b'0']);
    f.extend_from_slice(&[0x06, 0x02, 0x00, 0x78, 0x00, 0x00]);
    f.resize(60, 0);
    f
}

fn triangle(backend: &'static str) {
    let name = format!("three_routers_route_and_icarus_stops_a_loop ({backend})");
    if let Some(why) = skip_reason().or_else(|| lab_common::backend_refused(backend)) {
        eprintln!("{name}: skipped: {why}");
        return;
    }
    let _one = ONE_LAB.lock().unwrap_or_else(|e| e.into_inner());
    let prefix = format!("l3{}{}", std::process::id() % 10_000, &backend[..1]);
    let mut lab = L3Lab::up(&prefix);
    lab.backend = backend;

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
    // Frames that are not the router's on a routed port (LLDP).
    in_netns(&lab.ns("ha"), || {
        let fd = lab_common::packet_socket("eth0");
        for _ in 0..LLDP {
            lab_common::send_frame(&fd, &lldp_frame());
        }
    });
    std::thread::sleep(Duration::from_millis(200));
    let reports = lab.stop(&dir);
    assert!(
        u(&reports[0]["total"]["pipeline"]["forwarded"]) > 0,
        "R1 forwarded: {}",
        reports[0]["total"]
    );
    let r1a = interface(&reports[0]["total"], "r1-a");
    if backend == "xdp" {
        assert_eq!(r1a["mode"]["attach"], "native", "{r1a}");
        assert!(
            u(&r1a["rx_passed"]) >= u64::from(LLDP),
            "R1's program left A's LLDP frames to its kernel: {r1a}"
        );
    } else {
        assert_eq!(u(&r1a["rx_passed"]), 0, "{r1a}");
    }

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
        "{name}: looping link load per datagram: {:.2} links without Icarus, {:.2} with (TTL 64, {LOOPING} datagrams); \
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
