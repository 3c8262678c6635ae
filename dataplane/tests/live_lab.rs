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
//!    leaves by C's port; groups B joins (learned from its IGMP reports,
//!    never listed) reach B whole although the two workers split the
//!    traffic: B's reports are one flow, read by one worker, while A's
//!    data to each group is a flow of its own, on either worker — a group
//!    whose data lands on the other worker arrives only because the
//!    workers share memberships (all eight on the reports' worker: 1 in
//!    256), and the workers' counters show the events crossing;
//! 3. icarus: datagrams whose filter already holds the router's mask are
//!    dropped as loops and counted;
//! 4. SIGTERM: the router drains, writes its final report and exits 0.
//! 5. ECN through a real shaped SFB queue: a second router run (same lab)
//!    shapes r-b to 4 Mbit/s behind SFB (r-a and r-c unshaped); A sends
//!    ECT(0) datagrams at three times that rate; B captures every frame on
//!    its link (`AF_PACKET`, kernel timestamps) and the test checks that
//!    some arrive CE-marked with a valid IPv4 checksum, that the report's
//!    SFB `marked` equals the CE count B saw, that B's arrival rate is
//!    within 30% of the configured rate (the shaper's behaviour, not our
//!    code's speed), and that every datagram is accounted for: received =
//!    forwarded + dropped by reason, sent by A = arrived at B + SFB drops,
//!    and frames at B = the router's r-b transmit count. SIGTERM right after
//!    the burst checks that the queue is drained at its rate, not dropped.
//!    The same router makes r-a and r-b Icarus edges: each datagram gets a
//!    filter on r-a (counted) and loses it on r-b (counted), so B sees
//!    plain 20-byte IPv4 headers with valid checksums.
//!
//! 6. One shaped queue per port: a third router run, two workers, r-b
//!    shaped to 4 Mbit/s behind the default SFB; A sends 12 Mbit/s in 32
//!    flows (so both workers read some), and B's arrival rate must be
//!    within 2% of 4 Mbit/s (with a queue per worker it would be 8; with
//!    a queue that is not work-conserving, under).
//!
//! The test runs once per port backend (`[io] backend`: pnet, ring and
//! xdp). On xdp every veth end has two queues (`LAB_QUEUES=2`), one per
//! worker, and host A's flows spread over them as RSS spreads a NIC's.
//!
//! Everything is bounded by timeouts (the whole test takes a few seconds),
//! and a guard kills the router and takes the lab down whatever happens.

use std::ffi::OsStr;
use std::io::ErrorKind;
use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

mod lab_common;

use dataplane::stage::icarus::{FilterParams, node_mask};
use lab_common::{
    Lab, big_rcvbuf, collect, in_netns, interface, packet_socket, send_numbered, send_range,
    setsockopt_bytes, setsockopt_int, skip_reason, spawn_in_netns, u,
};

const A: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
const GROUP: Ipv4Addr = Ipv4Addr::new(239, 1, 1, 1);
const NODE_ID: u64 = 7;
const UNICAST: u32 = 2000;
const MULTICAST: u32 = 200;
const LOOPING: u32 = 50;
/// Groups B joins (learned, not in the config), and datagrams to each.
const LEARNED_GROUPS: u8 = 8;
const LEARNED_EACH: u32 = 50;
const LEARNED_PORT: u16 = 9003;

fn learned_group(k: u8) -> Ipv4Addr {
    Ipv4Addr::new(239, 2, 0, 1 + k)
}

/// ECN phase: B's port is shaped to this rate...
const ECN_RATE_BPS: u64 = 4_000_000;
/// ...and A sends this many times faster...
const ECN_OVERLOAD: f64 = 3.0;
/// ...for this long...
const ECN_BURST: Duration = Duration::from_millis(1500);
/// ...datagrams of this payload...
const ECN_PAYLOAD: usize = 1000;
/// ...to this port of B.
const ECN_PORT: u16 = 9100;
/// The ECN phase's router's Icarus node id (an edge on both of its ports).
const ECN_NODE_ID: u64 = 11;
/// The frame on the wire: Ethernet + IPv4 + UDP + payload.
const ECN_FRAME: usize = 14 + 20 + 8 + ECN_PAYLOAD;

/// Starts `dataplane run` in the router namespace with config text
/// `config` (written to `<dir>/<tag>.toml`); its standard error goes to
/// `<dir>/<tag>.err` and its final report to `<dir>/<tag>.json`, whose
/// paths come back. Returns once it says it is running.
fn start_router(lab: &mut Lab, tag: &str, config: &str, extra: &[&Path]) -> (PathBuf, PathBuf) {
    let extra: Vec<&OsStr> = extra.iter().map(|p| p.as_os_str()).collect();
    lab.start_router_with(
        Path::new(env!("CARGO_BIN_EXE_dataplane")),
        tag,
        config,
        &extra,
    )
}

/// SIGTERM to the running router; waits (10 s at most) for it to exit 0
/// after printing its final stats; returns its standard error and its
/// final report.
fn stop_router(lab: &mut Lab, err_path: &Path, report: &Path) -> (String, serde_json::Value) {
    let (err, report, _) = lab.stop_router(err_path, report, Duration::from_secs(10));
    (err, report)
}

/// The router's `/metrics` port inside its namespace.
const METRICS_PORT: u16 = 19464;

/// Prometheus's own port inside the router's namespace.
const PROMETHEUS_PORT: u16 = 19090;

/// `GET path` from `127.0.0.1:port` inside namespace `ns`: the body.
fn http_get_in(ns: &str, port: u16, path: String) -> Option<String> {
    in_netns(ns, move || {
        use std::io::Read as _;
        let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        c.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        write!(c, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
        let mut out = String::new();
        c.read_to_string(&mut out).ok()?;
        out.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
    })
}

/// Starts Debian's `prometheus` in the router's namespace (1 s scrapes of
/// the router's `/metrics`, storage in the lab's scratch directory) and
/// queries `q` until it answers `want` (60 s at most); returns the last
/// answer, or `None` (with a printed reason) where prometheus is absent.
fn prometheus_scrape(lab: &Lab, q: &str, want: u64) -> Option<u64> {
    let bin = Path::new("/usr/bin/prometheus");
    if !bin.exists() {
        let _ = writeln!(
            std::io::stderr(),
            "prometheus phase skipped: /usr/bin/prometheus not found"
        );
        return None;
    }
    let config = lab.dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: router\n    static_configs:\n      - targets: ['127.0.0.1:{METRICS_PORT}']\n"
        ),
    )
    .unwrap();
    let log = std::fs::File::create(lab.dir.join("prometheus.log")).unwrap();
    let mut child = std::process::Command::new("ip")
        .args(["netns", "exec", &lab.ns("r")])
        .arg(bin)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            lab.dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{PROMETHEUS_PORT}"))
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let encoded: String = q
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut got = None;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        let Some(body) = http_get_in(
            &lab.ns("r"),
            PROMETHEUS_PORT,
            format!("/api/v1/query?query={encoded}"),
        ) else {
            continue;
        };
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        got = v["data"]["result"][0]["value"][1]
            .as_str()
            .and_then(|s| s.parse::<u64>().ok());
        if got == Some(want) {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let log = std::fs::read_to_string(lab.dir.join("prometheus.log")).unwrap_or_default();
    assert_eq!(got, Some(want), "{q} from Prometheus; it said:\n{log}");
    let _ = writeln!(
        std::io::stderr(),
        "prometheus scraped the running router: {q} = {want}"
    );
    got
}

/// The labs of the two tests run one after the other (the ECN phase
/// measures a rate; two routers on two cores would disturb it).
static ONE_LAB: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn live_router_in_netns_lab() {
    lab_run("pnet");
}

/// The same lab on the ring backend (`[io] backend = "ring"`), skipped with
/// the kernel's reason where it refuses a packet ring.
#[test]
fn live_router_in_netns_lab_ring() {
    lab_run("ring");
}

/// The same lab on the AF_XDP backend (`[io] backend = "xdp"`), skipped
/// with the kernel's reason where it refuses AF_XDP or the XDP program.
#[test]
fn live_router_in_netns_lab_xdp() {
    lab_run("xdp");
}

/// `[io]` for `backend`, appended to every config of the run.
fn io_section(backend: &str) -> String {
    format!("\n[io]\nbackend = \"{backend}\"\n")
}

fn lab_run(backend: &str) {
    let name = format!("live_router_in_netns_lab ({backend})");
    if let Some(why) = skip_reason() {
        let _ = writeln!(std::io::stderr(), "{name}: skipped: {why}");
        return;
    }
    if let Some(why) = lab_common::backend_refused(backend) {
        let _ = writeln!(std::io::stderr(), "{name}: skipped: {why}");
        return;
    }
    let _one = ONE_LAB.lock().unwrap_or_else(|e| e.into_inner());
    let t0 = Instant::now();
    let tag = &backend[..1];
    let mut lab = Lab::up_queues(
        format!("bpl{}{tag}", std::process::id() % 100_000),
        "live",
        lab_common::lab_queues(backend, 2),
    );
    let dir = lab.dir.clone();

    let heavy_path = dir.join("heavy.jsonl");
    let (stderr_path, final_path) = start_router(
        &mut lab,
        "router",
        &format!(
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

[telemetry]
listen = "127.0.0.1:{METRICS_PORT}"
{io}"#,
            io = io_section(backend)
        ),
        &[Path::new("--heavy-report"), &heavy_path],
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

    // Learned groups: B's kernel reports its joins to the router (IGMPv3,
    // sent at once on joining); then A sends to each group.
    let rx_learned = in_netns(&lab.ns("b"), || {
        let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, LEARNED_PORT)).unwrap();
        big_rcvbuf(&s);
        for k in 0..LEARNED_GROUPS {
            s.join_multicast_v4(&learned_group(k), &B).unwrap();
        }
        s
    });
    std::thread::sleep(Duration::from_millis(500));
    for k in 0..LEARNED_GROUPS {
        let first = u32::from(k) * LEARNED_EACH;
        let to = SocketAddr::from((learned_group(k), LEARNED_PORT));
        send_range(&tx, to, first..first + LEARNED_EACH);
    }
    let learned = u32::from(LEARNED_GROUPS) * LEARNED_EACH;
    let (got, dups) = collect(&rx_learned, learned, Duration::from_secs(3));
    assert_eq!(
        (got, dups),
        (learned, 0),
        "multicast A -> groups B joined (learned, shared between workers)"
    );

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

    // Debian's Prometheus scrapes the running router (pnet run only: one
    // scrape test is enough) until the loop drops are in.
    let scraped = (backend == "pnet")
        .then(|| {
            prometheus_scrape(
                &lab,
                "bloomplane_pipeline_dropped_total{reason=\"loop\"}",
                u64::from(LOOPING),
            )
        })
        .flatten();

    // 4. SIGTERM: drain, final report, exit 0.
    let (_, report) = stop_router(&mut lab, &stderr_path, &final_path);
    let total = &report["total"];
    if let Some(v) = scraped {
        assert_eq!(
            v,
            u(&total["pipeline"]["drops"]["loop"]),
            "Prometheus's answer is the router's final count"
        );
    }
    let (ra, rb, rc_) = (
        interface(total, "r-a"),
        interface(total, "r-b"),
        interface(total, "r-c"),
    );
    let sent = u64::from(UNICAST + MULTICAST + LOOPING);
    assert!(u(&ra["rx_packets"]) >= sent, "r-a rx: {ra}");
    assert!(
        u(&rb["sent"]) >= u64::from(UNICAST + MULTICAST),
        "r-b tx: {rb}"
    );
    assert_eq!(u(&rc_["sent"]), 0, "nothing leaves by C's port: {rc_}");
    let pl = &total["pipeline"];
    assert_eq!(
        u(&pl["received"]),
        u(&pl["forwarded"]) + u(&pl["consumed"]) + u(&pl["dropped"]),
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
    // The joins crossed: what one worker sent, the other applied (at most
    // that: an event sent as they stopped may not be applied).
    let mc = |w: usize, k: &str| u(&workers[w]["multicast"][k]);
    let sent = [mc(0, "events_sent"), mc(1, "events_sent")];
    let applied = [mc(0, "events_applied"), mc(1, "events_applied")];
    assert!(
        sent[0] + sent[1] >= u64::from(LEARNED_GROUPS),
        "every join sent: {sent:?}"
    );
    assert!(
        applied[0] + applied[1] >= u64::from(LEARNED_GROUPS),
        "and applied: {applied:?}"
    );
    assert!(
        applied[0] <= sent[1] && applied[1] <= sent[0],
        "sent {sent:?} applied {applied:?}"
    );
    // Heavy flows: the unicast flow (2000 packets) is heavy at 100 packets.
    let heavy = std::fs::read_to_string(&heavy_path).unwrap_or_default();
    assert!(
        heavy.lines().any(|l| l.contains("10.77.0.2:9000")),
        "heavy report:\n{heavy}"
    );

    // 5. ECN through a real shaped SFB queue, with a second router run.
    ecn_phase(&mut lab, backend);

    // 6. One queue per shaped port with two workers and many flows.
    shared_queue_phase(&mut lab, backend);

    drop(lab);
    eprintln!("{name}: ok in {:?}", t0.elapsed());
}

/// The ECN phase's router: r-b shaped to [`ECN_RATE_BPS`] behind SFB, r-a
/// and r-c unshaped. r-a and r-b are Icarus edges: what arrives on r-a gets
/// an empty filter (and this node's mask at once), what leaves by r-b loses
/// it again, so B must see plain 20-byte IPv4 headers.
///
/// One unresponsive flow holds the whole queue in each of its bins. From
/// `target` (5) queued packets every arrival raises the flow's marking
/// probability by `increment` (12/65536): about 0.33 after the burst's
/// ~2200 arrivals, so marking starts within a few ms and stays below 1/2,
/// above which ECN packets would be dropped too. `max` (8) caps the flow's
/// queue (bucketdrop), which still keeps the shaper busy. These are
/// sch_sfb's rules (`profile = "linux"`): under the default fair profile
/// the flow, at 3x its share, is over twice it and so dropped rather than
/// marked by the fair-share check (CE marks through that profile are what
/// `live_sfb_tcp` sees from real TCP).
fn ecn_config(backend: &str) -> String {
    format!(
        r#"
[workers]
count = 2

[[interfaces]]
name = "r-a"
[[interfaces]]
name = "r-b"
[interfaces.egress]
rate_bps = {ECN_RATE_BPS}
burst_bytes = 3000
limit = 64
[interfaces.sfb]
profile = "linux"
limit = 64
max = 8
target = 5
increment = 12
decrement = 12
[[interfaces]]
name = "r-c"

[[wires]]
from = "r-a"
to = "r-b"
bidirectional = true

[icarus]
node_id = {ECN_NODE_ID}
insert_on = ["r-a"]
strip_on = ["r-b"]
{io}"#,
        io = io_section(backend)
    )
}

/// A frame that reached B's link: kernel receive time (ns), length, and
/// for the ECN phase's datagrams `(number, TOS byte, IPv4 checksum ok,
/// IPv4 header length)`.
#[derive(Debug, Clone, Copy)]
struct Arrival {
    ns: u64,
    len: usize,
    ours: Option<(u32, u8, bool, usize)>,
}

/// A datagram of ours (UDP to `port`) in an Ethernet frame, if it is one.
fn parse_ours(f: &[u8], port: u16) -> Option<(u32, u8, bool, usize)> {
    if f.get(12..14)? != [0x08, 0x00] {
        return None;
    }
    let ip = f.get(14..)?;
    let ihl = usize::from(ip.first()? & 0x0f) * 4;
    if *ip.get(9)? != 17 {
        return None;
    }
    let udp = ip.get(ihl..)?;
    if u16::from_be_bytes([*udp.get(2)?, *udp.get(3)?]) != port {
        return None;
    }
    let seq = u32::from_be_bytes(udp.get(8..12)?.try_into().ok()?);
    let checksum_ok = dataplane::wire::checksum::sum(ip.get(..ihl)?) == 0xffff;
    Some((seq, *ip.get(1)?, checksum_ok, ihl))
}

/// Sets a socket option to the bytes of `val`.
fn setsockopt_val<T>(s: &impl AsRawFd, level: libc::c_int, name: libc::c_int, val: &T) {
    // SAFETY: `s` is an open socket; `val` is a live, initialised `T` and
    // its exact size is passed.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            level,
            name,
            (val as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "setsockopt: {}", std::io::Error::last_os_error());
}

/// Captures every frame arriving on `ifname` (this thread's namespace)
/// with its kernel timestamp, until `stop` is set and the link has been
/// quiet for 50 ms (or 30 s have passed); datagrams to `port` are ours.
/// Says `ready` once bound.
fn capture_link(
    ifname: &str,
    port: u16,
    stop: Arc<AtomicBool>,
    ready: std::sync::mpsc::Sender<()>,
) -> Vec<Arrival> {
    let fd = packet_socket(ifname);
    big_rcvbuf(&fd);
    setsockopt_int(&fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1);
    let tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 50_000,
    };
    setsockopt_val(&fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &tv);
    ready.send(()).unwrap();

    let mut out = Vec::new();
    let mut buf = [0u8; 2048];
    let mut control = [0u64; 16];
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        // SAFETY: plain old data; all zeroes is a valid value.
        let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: plain old data; all zeroes is a valid (empty) msghdr.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = (&mut from as *mut libc::sockaddr_ll).cast();
        msg.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: every pointer in `msg` points at a live local buffer of
        // the length given beside it.
        let n = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            match e.kind() {
                ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted => {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    continue;
                }
                _ => panic!("recvmsg: {e}"),
            }
        }
        if from.sll_pkttype == libc::PACKET_OUTGOING {
            continue;
        }
        let mut ns = 0;
        // SAFETY: `msg` was filled by recvmsg; the CMSG_* walk stays within
        // `msg_controllen` bytes of `control`.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                    let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                    ns = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        let n = n as usize;
        out.push(Arrival {
            ns,
            len: n,
            ours: parse_ours(&buf[..n.min(buf.len())], port),
        });
    }
    out
}

/// Sends `n` numbered datagrams of [`ECN_PAYLOAD`] bytes, one every `gap`
/// (catching up after a late wake-up).
fn send_paced(s: &UdpSocket, to: SocketAddr, n: u32, gap: Duration) {
    let mut payload = [0u8; ECN_PAYLOAD];
    let start = Instant::now();
    for i in 0..n {
        let due = start + gap * i;
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        payload[..4].copy_from_slice(&i.to_be_bytes());
        s.send_to(&payload, to).expect("send");
    }
}

fn ecn_phase(lab: &mut Lab, backend: &str) {
    let pps = ECN_OVERLOAD * ECN_RATE_BPS as f64 / (ECN_FRAME * 8) as f64;
    let n = (pps * ECN_BURST.as_secs_f64()) as u32;
    let gap = Duration::from_secs_f64(1.0 / pps);

    // B: every frame of its link, and a socket that takes the datagrams
    // (so B answers no port-unreachable).
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let capture = {
        let stop = stop.clone();
        spawn_in_netns(&lab.ns("b"), move || {
            capture_link("eth0", ECN_PORT, stop, ready_tx)
        })
    };
    ready_rx
        .recv_timeout(Duration::from_secs(5))
        .expect("capture on B ready");
    let _sink = in_netns(&lab.ns("b"), || UdpSocket::bind((B, ECN_PORT)).unwrap());
    let (err_path, report_path) = start_router(lab, "ecn", &ecn_config(backend), &[]);

    let tx = in_netns(&lab.ns("a"), || {
        let s = UdpSocket::bind((A, 0)).unwrap();
        setsockopt_int(&s, libc::IPPROTO_IP, libc::IP_TOS, 0x02); // ECT(0)
        s
    });
    send_paced(&tx, SocketAddr::from((B, ECN_PORT)), n, gap);
    // SIGTERM at once: the frames still queued must leave at the rate.
    let (err, report) = stop_router(lab, &err_path, &report_path);
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::SeqCst);
    let arrivals = capture.join().expect("capture thread");

    let total = &report["total"];
    let pl = &total["pipeline"];
    let drops = pl["drops"].as_object().cloned().unwrap_or_default();
    let rb = interface(total, "r-b");
    let ra = interface(total, "r-a");
    let sfb = &rb["sfb"];
    assert!(sfb.is_object(), "no SFB queue for r-b in {total}");
    let ctx = format!("sfb: {sfb}\npipeline: {pl}\nr-a: {ra}\nr-b: {rb}\n{err}");

    // What B saw.
    let ours: Vec<(u64, usize, u32, u8, bool)> = arrivals
        .iter()
        .filter_map(|a| a.ours.map(|(seq, tos, ok, _)| (a.ns, a.len, seq, tos, ok)))
        .collect();
    let with_options = arrivals
        .iter()
        .filter(|a| a.ours.is_some_and(|o| o.3 != 20))
        .count();
    let mut seen = vec![false; n as usize];
    for &(_, _, seq, _, _) in &ours {
        let slot = seen.get_mut(seq as usize).expect("a numbered datagram");
        assert!(!*slot, "datagram {seq} arrived twice");
        *slot = true;
    }
    let ce = ours.iter().filter(|o| o.3 & 3 == 3).count() as u64;
    assert!(
        ours.iter().all(|o| o.4),
        "every arriving IPv4 header checksums right"
    );
    assert!(
        ours.iter().all(|o| o.3 & 3 == 2 || o.3 & 3 == 3),
        "datagrams arrive ECT(0) or CE"
    );

    // Counters.
    let marked = u(&sfb["marked"]);
    let sfb_drops = [
        "earlydrop",
        "penaltydrop",
        "bucketdrop",
        "queuedrop",
        "childdrop",
        "ratedrop",
    ]
    .iter()
    .map(|k| u(&sfb[*k]))
    .sum::<u64>();
    let pipeline_sfb_drops = [
        "sfb_early",
        "sfb_penalty",
        "sfb_bucket",
        "sfb_rate",
        "queue_full",
    ]
    .iter()
    .map(|k| drops.get(*k).map_or(0, u))
    .sum::<u64>();
    let q = rb;
    assert_eq!(
        u(&pl["received"]),
        u(&pl["forwarded"]) + u(&pl["consumed"]) + u(&pl["dropped"]),
        "received = forwarded + consumed + dropped\n{ctx}"
    );
    assert_eq!(
        drops.values().map(u).sum::<u64>(),
        u(&pl["dropped"]),
        "every drop has a reason\n{ctx}"
    );
    // On a loaded machine the kernel may drop a frame or two when the
    // worker falls behind the ring; those are counted, never lost.
    assert!(
        u(&ra["rx_packets"]) + u(&ra["rx_dropped"]) >= u64::from(n),
        "r-a read the burst, or the kernel counted what it dropped\n{ctx}"
    );
    assert!(marked > 0, "SFB marked nothing\n{ctx}");
    assert!(ce > 0, "no CE-marked datagram reached B\n{ctx}");
    assert_eq!(
        u(&q["shutdown_dropped"]),
        0,
        "SIGTERM drains the queue at its rate\n{ctx}"
    );
    assert_eq!(u(&rb["send_errors"]), 0, "{ctx}");
    assert_eq!(ce, marked, "every SFB mark reaches B as CE\n{ctx}");
    assert_eq!(
        sfb_drops, pipeline_sfb_drops,
        "the queue's drops are the pipeline's\n{ctx}"
    );
    assert_eq!(
        ours.len() as u64 + sfb_drops,
        u64::from(n),
        "each datagram A sent arrived at B or was dropped by SFB\n{ctx}"
    );
    assert_eq!(
        arrivals.len() as u64,
        u(&rb["sent"]),
        "B's link got exactly what the router sent on r-b\n{ctx}"
    );
    assert_eq!(u(&q["enqueued"]), u(&q["sent"]), "{ctx}");
    // Icarus edges: every datagram got a filter on r-a and lost it on r-b.
    let ic = &total["icarus"];
    assert_eq!(with_options, 0, "B saw IPv4 options: not stripped\n{ctx}");
    assert!(
        u(&ic["inserted"]) >= u64::from(n),
        "a filter inserted into each datagram on r-a: {ic}\n{ctx}"
    );
    assert_eq!(u(&ic["no_room"]) + u(&ic["unsupported"]), 0, "{ic}");
    assert!(
        u(&rb["stripped"]) >= ours.len() as u64,
        "stripped from each datagram leaving by r-b: {rb}\n{ctx}"
    );
    assert_eq!(
        u(&total["icarus"]["loops_detected"]),
        0,
        "a fresh filter never alarms\n{ctx}"
    );
    assert_eq!(u(&rb["backlog_packets"]), 0, "{ctx}");

    // The shaper: B's arrival rate over the burst (first to last datagram).
    let first = ours.iter().map(|o| o.0).min().unwrap_or(0);
    let last = ours.iter().map(|o| o.0).max().unwrap_or(0);
    let bits: u64 = ours
        .iter()
        .filter(|o| o.0 != first)
        .map(|o| o.1 as u64 * 8)
        .sum();
    let secs = (last - first) as f64 / 1e9;
    let rate = bits as f64 / secs.max(1e-9);
    let want = ECN_RATE_BPS as f64;
    eprintln!(
        "live_router_in_netns_lab ({backend}): ECN: A sent {n} datagrams at {:.0} pps ({:.1} Mbit/s); B got {} \
         ({} CE, {:.1}%) over {:.3} s at {:.3} Mbit/s (configured {:.3}); SFB marked {} dropped {} \
         (bucket {}, early {}, penalty {}), maxprob {:.3}, queue sojourn mean {:.2} ms max {:.2} ms",
        pps,
        pps * (ECN_FRAME * 8) as f64 / 1e6,
        ours.len(),
        ce,
        100.0 * ce as f64 / ours.len().max(1) as f64,
        secs,
        rate / 1e6,
        want / 1e6,
        marked,
        sfb_drops,
        u(&sfb["bucketdrop"]),
        u(&sfb["earlydrop"]),
        u(&sfb["penaltydrop"]),
        u(&sfb["maxprob"]) as f64 / 65535.0,
        u(&q["sojourn_sum_ns"]) as f64 / u(&q["sent"]).max(1) as f64 / 1e6,
        u(&q["sojourn_max_ns"]) as f64 / 1e6,
    );
    assert!(
        (0.7 * want..=1.3 * want).contains(&rate),
        "arrival rate at B {rate:.0} bit/s is not within 30% of the configured {want:.0}\n{ctx}"
    );
}

/// The shared-queue phase: flows, their destination port, the burst.
const SHARED_FLOWS: u16 = 32;
const SHARED_PORT: u16 = 9200;
const SHARED_BURST: Duration = Duration::from_secs(2);

fn shared_queue_phase(lab: &mut Lab, backend: &str) {
    let pps = ECN_OVERLOAD * ECN_RATE_BPS as f64 / (ECN_FRAME * 8) as f64;
    let n = (pps * SHARED_BURST.as_secs_f64()) as u32;
    let gap = Duration::from_secs_f64(1.0 / pps);
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let capture = {
        let stop = stop.clone();
        spawn_in_netns(&lab.ns("b"), move || {
            capture_link("eth0", SHARED_PORT, stop, ready_tx)
        })
    };
    ready_rx
        .recv_timeout(Duration::from_secs(5))
        .expect("capture on B ready");
    let _sink = in_netns(&lab.ns("b"), || UdpSocket::bind((B, SHARED_PORT)).unwrap());
    let config = format!(
        r#"
[workers]
count = 2

[[interfaces]]
name = "r-a"
[[interfaces]]
name = "r-b"
[interfaces.egress]
rate_bps = {ECN_RATE_BPS}
burst_bytes = 3000
limit = 64
[interfaces.sfb]
# The default (fair) profile: 32 constant-rate flows at 3x their share are
# each held to it, and the queue, work-conserving, keeps the port full.
limit = 64
[[interfaces]]
name = "r-c"

[[wires]]
from = "r-a"
to = "r-b"
bidirectional = true
{io}"#,
        io = io_section(backend)
    );
    let (err_path, report_path) = start_router(lab, "shared", &config, &[]);
    // 32 flows: one socket per source port, taking turns.
    let socks: Vec<UdpSocket> = in_netns(&lab.ns("a"), || {
        (0..SHARED_FLOWS)
            .map(|_| UdpSocket::bind((A, 0)).unwrap())
            .collect()
    });
    let to = SocketAddr::from((B, SHARED_PORT));
    let mut payload = [0u8; ECN_PAYLOAD];
    let start = Instant::now();
    for i in 0..n {
        let due = start + gap * i;
        if let Some(d) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
        payload[..4].copy_from_slice(&i.to_be_bytes());
        socks[i as usize % socks.len()]
            .send_to(&payload, to)
            .expect("send");
    }
    let (err, report) = stop_router(lab, &err_path, &report_path);
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::SeqCst);
    let arrivals = capture.join().expect("capture thread");

    let total = &report["total"];
    let pl = &total["pipeline"];
    let rb = interface(total, "r-b");
    let ctx = format!("pipeline: {pl}\nr-b: {rb}\n{err}");
    let workers = report["workers"].as_array().expect("workers");
    for w in workers {
        let ra = interface(w, "r-a");
        assert!(
            u(&ra["rx_packets"]) > 0,
            "the flows did not spread over both workers: {ra}\n{ctx}"
        );
    }
    assert_eq!(
        u(&pl["received"]),
        u(&pl["forwarded"]) + u(&pl["consumed"]) + u(&pl["dropped"]),
        "{ctx}"
    );
    let ours: Vec<(u64, usize)> = arrivals
        .iter()
        .filter(|a| a.ours.is_some())
        .map(|a| (a.ns, a.len))
        .collect();
    assert_eq!(arrivals.len() as u64, u(&rb["sent"]), "{ctx}");
    assert!(
        u(&rb["sfb"]["bucketdrop"])
            + u(&rb["sfb"]["earlydrop"])
            + u(&rb["sfb"]["queuedrop"])
            + u(&rb["sfb"]["ratedrop"])
            > 0,
        "three times the rate, and nothing dropped?\n{ctx}"
    );
    let first = ours.iter().map(|o| o.0).min().unwrap_or(0);
    let last = ours.iter().map(|o| o.0).max().unwrap_or(0);
    let bits: u64 = ours
        .iter()
        .filter(|o| o.0 != first)
        .map(|o| o.1 as u64 * 8)
        .sum();
    let secs = (last - first) as f64 / 1e9;
    let rate = bits as f64 / secs.max(1e-9);
    let want = ECN_RATE_BPS as f64;
    eprintln!(
        "live_router_in_netns_lab ({backend}): shared queue: A sent {n} datagrams in {SHARED_FLOWS} flows at {:.1} Mbit/s; \
         workers read {:?}; B got {} over {secs:.3} s at {:.3} Mbit/s (configured {:.3})",
        pps * (ECN_FRAME * 8) as f64 / 1e6,
        workers
            .iter()
            .map(|w| u(&interface(w, "r-a")["rx_packets"]))
            .collect::<Vec<_>>(),
        ours.len(),
        rate / 1e6,
        want / 1e6,
    );
    assert!(
        (0.98 * want..=1.02 * want).contains(&rate),
        "arrival rate at B {rate:.0} bit/s is not within 2% of the configured {want:.0}\n{ctx}"
    );
}
