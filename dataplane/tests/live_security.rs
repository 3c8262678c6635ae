//! The live router against hostile hosts, in the namespace lab
//! (`scripts/lab.sh`), with the shipped `examples/lab-forwarding.toml`
//! (two workers):
//!
//! 1. privileges: once running, no thread of the router holds a capability
//!    (`CapEff`, `CapPrm` of every task in `/proc/<pid>/task`);
//! 2. a second `dataplane run` on the same interfaces exits non-zero at
//!    once, naming the first router's pid; the first's lock files exist
//!    while it runs and are gone after its clean exit (step 5);
//! 3. report floods: host A sends IGMPv3 reports joining 150,000 groups
//!    (816 full frames) and host C MLDv2 reports joining 150,000 IPv6
//!    groups (2,084 frames) while A sends numbered unicast datagrams to B,
//!    and more after the floods: every datagram arrives exactly once, each
//!    flooded port ends at its cap of learned groups with the rest refused
//!    and counted, and the filters' fill and false-positive estimates are
//!    reported and stay near their sizing;
//! 4. a raw socket in the router's namespace sends frames out of r-b (as
//!    another local process or a second router would): none is forwarded
//!    to A, and the router counts them as outgoing frames dropped; and A
//!    sends frames whose IPv4 total length claims more than the frame
//!    holds (a live frame is never cut by a capture): each is malformed,
//!    counted by its reason, not forwarded;
//! 5. SIGTERM right after: exit 0 within the drain deadline, every packet
//!    accounted for;
//! 6. unprivileged: the same router as user `nobody` with only
//!    `CAP_NET_RAW` and `CAP_NET_ADMIN` as ambient capabilities (the
//!    README's recipe, through `setpriv`; on xdp also `CAP_BPF` and
//!    `CAP_IPC_LOCK`, docs/live.md) forwards, and drops those too.
//!
//! 7. the router's standard error and output are a pipe whose reader has
//!    gone (`dataplane run ... 2>&1 | head -2`), stats every 100 ms: it
//!    keeps forwarding, and SIGTERM still ends it with exit 0 and its final
//!    report.
//!
//! It runs once per port backend (`[io] backend`: pnet, ring and xdp; on
//! xdp every veth end has two queues, one per worker).
//!
//! Needs root and `ip netns`; otherwise it prints why and passes as skipped.

use std::io::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

mod lab_common;
mod multicast_common;

use dataplane::runtime::DRAIN_DEADLINE;
use dataplane::wire::checksum;
use lab_common::{
    Lab, big_rcvbuf, collect, in_netns, interface, named, packet_socket, run_bounded, send_frame,
    send_range, skip_reason, spawn_in_netns, u, workspace,
};
use multicast_common::{
    IGMPV3_RECORDS_PER_FRAME, MLDV2_RECORDS_PER_FRAME, igmp_v3_report, mld_v2_report,
};

const A: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
const MAC_A: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 0x0a];
const MAC_B: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 0x0b];
/// Groups each flooding host joins.
const FLOOD_GROUPS: u32 = 150_000;
/// The default cap on learned groups per interface (`expected_groups`).
const CAP: u64 = 1024;
/// Unicast datagrams A -> B during the floods, and as many after.
const UNICAST: u32 = 1000;
const UNICAST_PORT: u16 = 9000;
/// Frames the raw socket sends out of r-b, and the port they are for.
const INJECTED: u32 = 20;
const INJECTED_PORT: u16 = 9500;
/// Frames from A whose IP length says 1500 bytes in a 64-byte frame.
const LYING: u32 = 16;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_dataplane"))
}

/// The shipped lab configuration with two workers, on `backend`.
fn config(backend: &str) -> String {
    let path = workspace().join("dataplane/examples/lab-forwarding.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("count = 1"), "{}", path.display());
    assert!(!text.contains("[io]"), "{}", path.display());
    format!(
        "{}\n[io]\nbackend = \"{backend}\"\n",
        text.replace("count = 1", "count = 2")
    )
}

/// The two runs one after the other (each floods the machine).
static ONE_LAB: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Every task of `pid` holds no capability.
fn assert_no_capabilities(pid: u32) {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    let mut n = 0;
    for t in tasks {
        let status = std::fs::read_to_string(t.unwrap().path().join("status")).unwrap();
        for field in ["CapEff:", "CapPrm:", "CapAmb:"] {
            let line = status.lines().find(|l| l.starts_with(field)).unwrap();
            assert!(line.ends_with("0000000000000000"), "pid {pid}: {line}");
        }
        n += 1;
    }
    assert!(n >= 3, "main thread and two workers: {n} tasks");
}

/// Sends `frames` on `eth0` of `ns`, 32 a millisecond (so the veth's
/// backlog is never the bottleneck); returns how many.
fn flood(ns: &str, frames: Vec<Vec<u8>>) -> std::thread::JoinHandle<usize> {
    spawn_in_netns(ns, move || {
        let fd = packet_socket("eth0");
        for (i, f) in frames.iter().enumerate() {
            send_frame(&fd, f);
            if i % 32 == 31 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        frames.len()
    })
}

fn igmp_flood() -> Vec<Vec<u8>> {
    let groups: Vec<Ipv4Addr> = (0..FLOOD_GROUPS)
        .map(|i| Ipv4Addr::from(0xe800_0000 + i)) // 232.0.0.0 + i
        .collect();
    groups
        .chunks(IGMPV3_RECORDS_PER_FRAME)
        .map(igmp_v3_report)
        .collect()
}

fn mld_flood() -> Vec<Vec<u8>> {
    let groups: Vec<Ipv6Addr> = (0..FLOOD_GROUPS)
        .map(|i| Ipv6Addr::from_bits((0xff0e_u128 << 112) | (1 << 40) | u128::from(i)))
        .collect();
    groups
        .chunks(MLDV2_RECORDS_PER_FRAME)
        .map(mld_v2_report)
        .collect()
}

/// A UDP datagram from B to A, numbered `seq`, as it would arrive on r-b.
fn b_to_a(seq: u32) -> Vec<u8> {
    udp((MAC_B, B), (MAC_A, A), seq, None)
}

/// A UDP datagram from A to B whose IPv4 total length claims 1500 bytes.
fn lying_a_to_b(seq: u32) -> Vec<u8> {
    udp((MAC_A, A), (MAC_B, B), seq, Some(1500))
}

/// A UDP datagram numbered `seq` to [`INJECTED_PORT`], with its true IPv4
/// total length or `claimed`.
fn udp(
    from: ([u8; 6], Ipv4Addr),
    to: ([u8; 6], Ipv4Addr),
    seq: u32,
    claimed: Option<u16>,
) -> Vec<u8> {
    let mut f = to.0.to_vec();
    f.extend_from_slice(&from.0);
    f.extend_from_slice(&[0x08, 0x00]);
    let payload = seq.to_be_bytes();
    let len = claimed.unwrap_or(20 + 8 + payload.len() as u16);
    let mut ip = vec![0x45, 0, 0, 0, 0, 1, 0, 0, 64, 17, 0, 0];
    ip[2..4].copy_from_slice(&len.to_be_bytes());
    ip.extend_from_slice(&from.1.octets());
    ip.extend_from_slice(&to.1.octets());
    let sum = !checksum::sum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&40000u16.to_be_bytes());
    f.extend_from_slice(&INJECTED_PORT.to_be_bytes());
    f.extend_from_slice(&(8 + payload.len() as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]); // no UDP checksum
    f.extend_from_slice(&payload);
    f
}

/// Frames sent out of r-b by a raw socket in the router's namespace: none
/// may reach A.
fn inject_on_router_port(lab: &Lab) {
    let rx = in_netns(&lab.ns("a"), || {
        UdpSocket::bind((A, INJECTED_PORT)).unwrap()
    });
    in_netns(&lab.ns("r"), || {
        let fd = packet_socket("r-b");
        for i in 0..INJECTED {
            send_frame(&fd, &b_to_a(i));
        }
    });
    let (got, _) = collect(&rx, INJECTED, Duration::from_millis(700));
    assert_eq!(got, 0, "frames sent out of r-b by another socket reached A");
}

#[test]
fn live_router_against_hostile_hosts() {
    hostile_hosts("pnet");
}

/// The same on the ring backend, skipped with the kernel's reason where it
/// refuses a packet ring.
#[test]
fn live_router_against_hostile_hosts_ring() {
    hostile_hosts("ring");
}

/// The same on the AF_XDP backend, skipped with the kernel's reason where
/// it refuses AF_XDP or the XDP program.
#[test]
fn live_router_against_hostile_hosts_xdp() {
    hostile_hosts("xdp");
}

fn hostile_hosts(backend: &str) {
    let name = format!("live_router_against_hostile_hosts ({backend})");
    if let Some(why) = skip_reason().or_else(|| lab_common::backend_refused(backend)) {
        let _ = writeln!(std::io::stderr(), "{name}: skipped: {why}");
        return;
    }
    let _one = ONE_LAB.lock().unwrap_or_else(|e| e.into_inner());
    let t0 = Instant::now();
    let mut lab = Lab::up_queues(
        format!("bps{}{}", std::process::id() % 100_000, &backend[..1]),
        "sec",
        lab_common::lab_queues(backend, 2),
    );
    let (err_path, report_path) = lab.start_router_with(bin(), "router", &config(backend), &[]);
    let pid = lab.router.as_ref().unwrap().id();

    // 1. Privileges.
    assert_no_capabilities(pid);
    let err = std::fs::read_to_string(&err_path).unwrap();
    assert!(err.contains("capabilities dropped"), "{err}");

    // 2. A second router on the same ports.
    let second = run_bounded(
        Command::new("ip")
            .args(["netns", "exec", &lab.ns("r")])
            .arg(bin())
            .args(["run", "--stats-interval", "0", "--config"])
            .arg(lab.dir.join("router.toml")),
        Duration::from_secs(10),
        "second router",
    );
    let text = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "second router started:\n{text}");
    assert!(
        text.contains("interface \"r-a\" is in use by another router")
            && text.contains(&format!("pid {pid} (")),
        "{text}"
    );
    // The router's lock files, named by its namespace's inode.
    let netns = {
        use std::os::unix::fs::MetadataExt as _;
        std::fs::metadata(format!("/var/run/netns/{}", lab.ns("r")))
            .unwrap()
            .ino()
    };
    let lock_files: Vec<std::path::PathBuf> = ["r-a", "r-b", "r-c"]
        .iter()
        .map(|i| {
            dataplane::runtime::lock::lock_dir().join(format!("bloomplane-net{netns}-{i}.lock"))
        })
        .collect();
    for f in &lock_files {
        assert!(f.exists(), "{} while the router runs", f.display());
    }

    // 3. Floods, with unicast through them and after them.
    let rx = in_netns(&lab.ns("b"), || {
        let s = UdpSocket::bind((B, UNICAST_PORT)).unwrap();
        big_rcvbuf(&s);
        s
    });
    let tx = in_netns(&lab.ns("a"), || UdpSocket::bind((A, 0)).unwrap());
    let to = SocketAddr::from((B, UNICAST_PORT));
    let (igmp, mld) = (igmp_flood(), mld_flood());
    let (igmp_frames, mld_frames) = (igmp.len(), mld.len());
    let flood_a = flood(&lab.ns("a"), igmp);
    let flood_c = flood(&lab.ns("c"), mld);
    send_range(&tx, to, 0..UNICAST);
    assert_eq!(flood_a.join().unwrap(), igmp_frames);
    assert_eq!(flood_c.join().unwrap(), mld_frames);
    send_range(&tx, to, UNICAST..2 * UNICAST);
    let (got, dups) = collect(&rx, 2 * UNICAST, Duration::from_secs(3));
    assert_eq!(
        (got, dups),
        (2 * UNICAST, 0),
        "unicast A -> B through the floods"
    );

    // 4. Frames other sockets send out of a router port; frames that lie
    // about their length.
    inject_on_router_port(&lab);
    let lying: Vec<Vec<u8>> = (0..LYING).map(lying_a_to_b).collect();
    assert_eq!(flood(&lab.ns("a"), lying).join().unwrap(), LYING as usize);

    // 5. Stop within the deadline; read the counters.
    let limit = DRAIN_DEADLINE + Duration::from_secs(3);
    let (err, report, took) = lab.stop_router(&err_path, &report_path, limit);
    eprintln!("stopped {took:?} after SIGTERM");
    // A clean exit removes its lock files.
    for f in &lock_files {
        assert!(!f.exists(), "{} left after a clean exit", f.display());
    }
    let all = err.split("== all workers").last().unwrap_or_default();
    for l in all
        .lines()
        .filter(|l| l.contains("multicast") || l.contains(" if "))
    {
        eprintln!("{l}");
    }
    let total = &report["total"];
    let pl = &total["pipeline"];
    // The reports the multicast stage learned from are consumed.
    assert_eq!(
        u(&pl["received"]),
        u(&pl["forwarded"]) + u(&pl["consumed"]) + u(&pl["dropped"]),
        "{pl}"
    );
    assert!(u(&pl["consumed"]) > 0, "{pl}");
    assert_eq!(
        u(&pl["malformed"]["ipv4_total_length_beyond_frame"]),
        u64::from(LYING),
        "{pl}"
    );
    let (ra, rb) = (interface(total, "r-a"), interface(total, "r-b"));
    // Under the flood the kernel may drop frames before the router reads
    // them (a full ring block or socket buffer while the tests share the
    // CPUs); it counts each, and the router reports them.
    assert!(
        u(&ra["rx_packets"]) + u(&ra["rx_dropped"]) >= igmp_frames as u64 + u64::from(2 * UNICAST),
        "r-a read or the kernel dropped every frame A sent: {ra}"
    );
    // pnet's sockets see the injected frames (the kernel ignores
    // PACKET_IGNORE_OUTGOING for fanout members) and count them; the
    // ring's fanout group is asked to leave them out
    // (PACKET_FANOUT_FLAG_IGNORE_OUTGOING), so it may never see them.
    // Either way none reached A (checked above).
    if backend == "pnet" {
        assert!(
            u(&rb["rx_outgoing_dropped"]) >= u64::from(INJECTED),
            "outgoing frames counted: {rb}"
        );
    }
    let mc = &total["multicast"];
    assert!(u(&mc["joins_refused"]) > 0, "{mc}");
    let seen = u(&mc["records"]) + u(&mc["records_over_budget"]);
    assert!(seen >= 2 * u64::from(FLOOD_GROUPS), "{mc}");
    eprintln!("multicast: {mc}");
    for name in ["r-a", "r-c"] {
        let m = named(total, "multicast_interfaces", name);
        assert_eq!(
            (u(&m["learned"]), u(&m["max_learned"])),
            (CAP, CAP),
            "{name}: {m}"
        );
        assert!(u(&m["refused"]) > 0, "{name}: {m}");
        let (fill, fpr) = (m["fill"].as_f64().unwrap(), m["fpr"].as_f64().unwrap());
        assert!(fill > 0.0 && fill < 0.3 && fpr < 0.005, "{name}: {m}");
    }

    // 6. Unprivileged, with ambient capabilities.
    unprivileged(&mut lab, backend);

    // 7. Standard error a closed pipe.
    closed_pipe(&mut lab, backend);

    drop(lab);
    eprintln!("{name}: ok in {:?}", t0.elapsed());
}

/// The router as `nobody` with `CAP_NET_RAW` and `CAP_NET_ADMIN` as
/// ambient capabilities (on xdp also `CAP_BPF`, to load the program, and
/// `CAP_IPC_LOCK`, to pin the UMEMs): it starts, forwards, drops them,
/// stops cleanly.
fn unprivileged(lab: &mut Lab, backend: &str) {
    if Command::new("setpriv").arg("--version").output().is_err() {
        let _ = writeln!(
            std::io::stderr(),
            "unprivileged phase skipped: setpriv (util-linux) not found"
        );
        return;
    }
    // Every path the router opens must be reachable by nobody.
    for dir in [lab.dir.as_path(), bin().parent().unwrap()] {
        let mut p = Some(dir);
        while let Some(d) = p {
            let mode = std::fs::metadata(d).unwrap().permissions().mode();
            if mode & 0o001 == 0 {
                let _ = writeln!(
                    std::io::stderr(),
                    "unprivileged phase skipped: {} is not searchable by others",
                    d.display()
                );
                return;
            }
            p = d.parent();
        }
    }
    let out = lab.dir.join("nobody");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o777)).unwrap();
    let cfg = lab.dir.join("nobody.toml");
    std::fs::write(&cfg, config(backend)).unwrap();
    let err = lab.dir.join("nobody.err");
    let report = out.join("final.json");
    let caps = if backend == "xdp" {
        "+net_raw,+net_admin,+bpf,+ipc_lock"
    } else {
        "+net_raw,+net_admin"
    };
    let router = Command::new("ip")
        .args(["netns", "exec", &lab.ns("r")])
        .args([
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ])
        .arg(format!("--inh-caps={caps}"))
        .arg(format!("--ambient-caps={caps}"))
        .arg(bin())
        .args(["run", "--stats-interval", "0", "--config"])
        .arg(&cfg)
        .arg("--final-report")
        .arg(&report)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("start setpriv");
    let router = lab.router.insert(router);
    lab_common::wait_for(&err, lab_common::READY, Duration::from_secs(10), router);
    let pid = router.id();
    let uid_line = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .map(str::to_string)
        .unwrap();
    assert!(uid_line.contains("65534"), "{uid_line}");
    assert_no_capabilities(pid);

    let rx = in_netns(&lab.ns("b"), || {
        UdpSocket::bind((B, UNICAST_PORT + 1)).unwrap()
    });
    let tx = in_netns(&lab.ns("a"), || UdpSocket::bind((A, 0)).unwrap());
    send_range(&tx, SocketAddr::from((B, UNICAST_PORT + 1)), 0..200);
    assert_eq!(collect(&rx, 200, Duration::from_secs(3)), (200, 0));
    lab.stop_router(&err, &report, Duration::from_secs(10));
}

/// The router with its standard output and error a closed pipe (the
/// reader, like `head -2`, read its first line and left): every stats
/// print fails with EPIPE; it must keep forwarding and stop cleanly.
fn closed_pipe(lab: &mut Lab, backend: &str) {
    use std::io::BufRead;
    let cfg = lab.dir.join("pipe.toml");
    std::fs::write(&cfg, config(backend)).unwrap();
    let report = lab.dir.join("pipe.json");
    let _ = std::fs::remove_file(&report);
    let mut child = Command::new("ip")
        .args(["netns", "exec", &lab.ns("r")])
        .arg(bin())
        .args(["run", "--stats-interval", "100ms", "--config"])
        .arg(&cfg)
        .arg("--final-report")
        .arg(&report)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the router");
    let stderr = child.stderr.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(stderr).lines();
    let mut seen = String::new();
    let running = loop {
        match lines.next() {
            Some(Ok(l)) => {
                seen.push_str(&l);
                seen.push('\n');
                if l.contains(lab_common::READY) {
                    break true;
                }
            }
            _ => break false,
        }
    };
    // The reader goes away.
    drop(lines);
    drop(stdout);
    lab.router = Some(child);
    assert!(running, "the router did not start:\n{seen}");
    std::thread::sleep(Duration::from_millis(300));
    let rx = in_netns(&lab.ns("b"), || {
        UdpSocket::bind((B, UNICAST_PORT + 2)).unwrap()
    });
    let tx = in_netns(&lab.ns("a"), || UdpSocket::bind((A, 0)).unwrap());
    send_range(&tx, SocketAddr::from((B, UNICAST_PORT + 2)), 0..200);
    assert_eq!(
        collect(&rx, 200, Duration::from_secs(3)),
        (200, 0),
        "forwarding with a closed pipe for standard error"
    );
    let child = lab.router.as_mut().unwrap();
    assert!(
        child.try_wait().unwrap().is_none(),
        "the router exited on a closed pipe"
    );
    // SAFETY: kill(2) on the pid of our own child, not yet waited for.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(
            start.elapsed() < DRAIN_DEADLINE + Duration::from_secs(3),
            "no exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    lab.router = None;
    assert!(status.success(), "exit {status} with a closed pipe");
    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).expect("final report written")).unwrap();
    assert!(u(&r["total"]["pipeline"]["received"]) >= 200, "{r}");
}
