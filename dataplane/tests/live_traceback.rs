//! Traceback in the three-router lab (`scripts/lab-l3.sh ... icarus
//! digest`): hosts A and B, routers R1, R2, R3, each a `dataplane run` with
//! its digest stage on, Icarus edges on the host ports (the option is
//! inserted at R1 and stripped at R2, so R2 records packets that carry it
//! and R1 packets that do not), every router serving `/digest` on
//! 127.0.0.1:9464 of its namespace.
//!
//! Needs root and `ip netns`; otherwise it prints why and passes as
//! skipped. Checks:
//!
//! 1. **The path, exactly**: a UDP datagram, a TCP segment (IPv4) and a UDP
//!    datagram over IPv6 from A to B, captured as B receives them (TTL two
//!    lower than A sent, no Icarus option), traced with `traffic-gen
//!    traceback --topology --from r2`: R2 names r2-r1 and nothing else,
//!    R1 names r1-a and nothing else, the packet entered at R1's r1-a from
//!    host A: two branches in all, no false one.
//! 2. **R3 never saw them**: asked alone (`--query ... --netns`), R3
//!    answers "not seen" with the false-positive probability it states.
//! 3. **Hostile queries**: a client at 127.0.0.2 (not listed) gets 403; a
//!    malformed query 400; a flood of queries from four threads for 5 s is
//!    held to the rate (429) while 100 pings from A to B all cross R1 and
//!    R2; 3,000 half-sent requests to R2's listener leave R2's thread
//!    count as it was, and it still answers a scrape.
//!
//! Every router's final report must balance.

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod lab_common;

use lab_common::l3::{L3Lab, ROUTERS};
use lab_common::{binaries, in_netns, packet_socket, run_bounded, skip_reason, spawn_in_netns, u};

const LISTEN: &str = "127.0.0.1:9464";

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// Frames B's eth0 receives for `secs` whose payload holds one of
/// `markers`: (marker, IP datagram, time received).
fn capture_at_b(
    lab: &L3Lab,
    markers: &'static [&'static str],
    secs: u64,
) -> std::thread::JoinHandle<Vec<(String, Vec<u8>, u64)>> {
    spawn_in_netns(&lab.ns("hb"), move || {
        let fd = packet_socket("eth0");
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 100_000,
        };
        // SAFETY: `fd` is an open socket; the timeval is live and its size
        // is passed.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        let end = Instant::now() + Duration::from_secs(secs);
        let mut out = Vec::new();
        let mut buf = [0u8; 2048];
        while Instant::now() < end && out.len() < markers.len() {
            // SAFETY: `buf` is a live buffer of the length passed.
            let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n <= 14 {
                continue;
            }
            let frame = &buf[..n as usize];
            for m in markers {
                let hit = frame.windows(m.len()).any(|w| w == m.as_bytes());
                if hit && !out.iter().any(|(k, _, _): &(String, Vec<u8>, u64)| k == m) {
                    out.push((m.to_string(), frame[14..].to_vec(), now_ns()));
                }
            }
        }
        out
    })
}

fn traceback(args: &[&str]) -> serde_json::Value {
    let out = run_bounded(
        Command::new(binaries().join("traffic-gen"))
            .arg("traceback")
            .args(args)
            .args(["--json", "-"]),
        Duration::from_secs(60),
        "traffic-gen traceback",
    );
    assert!(
        out.status.success(),
        "traceback {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A GET to the listener from `from` (bound first): (status, body).
fn get_from(from: Ipv4Addr, path: &str) -> (u16, String) {
    // SAFETY: plain socket(2); the descriptor is owned by the stream below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0);
    let sin = |a: Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as u16,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(a).to_be(),
        },
        sin_zero: [0; 8],
    };
    let local = sin(from, 0);
    let remote = sin(Ipv4Addr::LOCALHOST, 9464);
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: `fd` is open; the addresses are live sockaddr_in of `len`.
    unsafe {
        assert_eq!(
            libc::bind(fd, (&local as *const libc::sockaddr_in).cast(), len),
            0
        );
        assert_eq!(
            libc::connect(fd, (&remote as *const libc::sockaddr_in).cast(), len),
            0
        );
    }
    // SAFETY: `fd` is a connected socket nothing else owns.
    let mut s = unsafe { TcpStream::from_raw_fd(fd) };
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (
        status,
        out.split_once("\r\n\r\n").map_or("", |x| x.1).to_string(),
    )
}

fn threads_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .count()
}

fn raise_nofile(want: u64) {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `l` is a live rlimit.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut l);
        l.rlim_cur = l.rlim_max.min(want);
        libc::setrlimit(libc::RLIMIT_NOFILE, &l);
    }
}

#[test]
fn packets_are_traced_back_to_their_entry() {
    if let Some(why) = skip_reason() {
        let _ = writeln!(std::io::stderr(), "live_traceback: skipped: {why}");
        return;
    }
    let mut lab = L3Lab::up(&format!("bpt{}", std::process::id() % 10_000));
    let dir = lab.start("traceback", &["icarus", "digest"]);
    // Gateways resolved both ways.
    let (ok, text) = lab.on("ha", &["ping", "-c", "2", "-W", "2", "10.81.2.2"]);
    assert!(ok, "{text}");
    let (ok, text) = lab.on(
        "ha",
        &["ping", "-6", "-c", "2", "-W", "2", "2001:db8:81:2::2"],
    );
    assert!(ok, "{text}");

    // 1. A datagram, a segment and an IPv6 datagram, captured at B.
    const MARKS: &[&str] = &["spie-udp-4", "spie-tcp-4", "spie-udp-6"];
    let cap = capture_at_b(&lab, MARKS, 10);
    let listener = spawn_in_netns(&lab.ns("hb"), || {
        let l = TcpListener::bind("10.81.2.2:9998").unwrap();
        let (mut c, _) = l.accept().unwrap();
        let mut b = [0u8; 64];
        let _ = c.read(&mut b);
    });
    std::thread::sleep(Duration::from_millis(300));
    in_netns(&lab.ns("ha"), || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        s.send_to(b"spie-udp-4", "10.81.2.2:9999").unwrap();
        let s6 = UdpSocket::bind("[::]:0").unwrap();
        s6.send_to(b"spie-udp-6", "[2001:db8:81:2::2]:9999")
            .unwrap();
        let mut t =
            TcpStream::connect_timeout(&"10.81.2.2:9998".parse().unwrap(), Duration::from_secs(5))
                .unwrap();
        t.write_all(b"spie-tcp-4").unwrap();
        std::thread::sleep(Duration::from_millis(200));
    });
    listener.join().unwrap();
    let got = cap.join().unwrap();
    assert_eq!(
        got.len(),
        MARKS.len(),
        "captured at B: {:?}",
        got.iter().map(|g| &g.0).collect::<Vec<_>>()
    );
    let topo = dir.join("topology.toml");
    for (mark, ip, t) in &got {
        // B sees it two hops later and without the Icarus option.
        let ttl = if ip[0] >> 4 == 4 { ip[8] } else { ip[7] };
        assert!(ttl <= 62, "{mark}: TTL {ttl}");
        let time = format!("{}.{:09}", t / 1_000_000_000, t % 1_000_000_000);
        let j = traceback(&[
            "--topology",
            topo.to_str().unwrap(),
            "--from",
            "r2",
            "--hex",
            &hex(ip),
            "--time",
            &time,
        ]);
        let hops = j["hops"].as_array().unwrap();
        let h2 = &hops[0];
        assert_eq!(h2["router"], "r2", "{mark}: {j}");
        let b2: Vec<&str> = h2["branches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["port"].as_str().unwrap())
            .collect();
        assert_eq!(b2, ["r2-r1"], "{mark}: {j}");
        let h1 = hops.iter().find(|h| h["router"] == "r1").expect("r1 asked");
        assert_eq!(h1["toward"], "r1-r2", "{mark}");
        let b1: Vec<&str> = h1["branches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["port"].as_str().unwrap())
            .collect();
        assert_eq!(b1, ["r1-a"], "{mark}: {j}");
        let entries = j["entries"].as_array().unwrap();
        assert_eq!(entries.len(), 1, "{mark}: {j}");
        assert_eq!(
            (
                entries[0]["router"].as_str(),
                entries[0]["port"].as_str(),
                entries[0]["host"].as_str()
            ),
            (Some("r1"), Some("r1-a"), Some("A")),
            "{mark}"
        );
        assert_eq!(hops.len(), 2, "{mark}: only R2 and R1 asked: {j}");
        for h in [h1, h2] {
            let p = h["false_positive_probability"].as_f64().unwrap();
            assert!(p < 1e-4, "{mark}: {p}");
            assert!(!h["windows"].as_array().unwrap().is_empty());
        }
        if mark == "spie-udp-4" {
            // The text an operator reads (docs/traceback.md shows it).
            let out = run_bounded(
                Command::new(binaries().join("traffic-gen")).args([
                    "traceback",
                    "--topology",
                    topo.to_str().unwrap(),
                    "--from",
                    "r2",
                    "--hex",
                    &hex(ip),
                    "--time",
                    &time,
                ]),
                Duration::from_secs(60),
                "traffic-gen traceback",
            );
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                text.contains("path: A -> r1 -> r2 (entered at r1 r1-a)"),
                "{text}"
            );
            print!("{text}");
        }
        // 2. R3 alone: not seen.
        let ns3 = lab.ns("r3");
        let j3 = traceback(&[
            "--query",
            LISTEN,
            "--netns",
            &ns3,
            "--hex",
            &hex(ip),
            "--time",
            &time,
        ]);
        let h3 = &j3["hops"][0];
        assert_eq!(h3["status"], "not_seen", "{mark}: {j3}");
        assert!(h3["false_positive_probability"].as_f64().unwrap() < 1e-4);
        println!(
            "{mark}: traced r2 <- r1 <- A; r3 not seen (false-positive probability {:.1e})",
            h3["false_positive_probability"].as_f64().unwrap()
        );
    }

    // 3. Hostile queries on R2.
    let ip_hex = hex(&got[0].1);
    let r2_pid = lab.pid("r2").expect("r2 runs");
    let q = format!("/digest?ip={ip_hex}");
    let (refused, malformed) = in_netns(&lab.ns("r2"), move || {
        (
            get_from(Ipv4Addr::new(127, 0, 0, 2), &q),
            get_from(Ipv4Addr::LOCALHOST, "/digest?ip=zz"),
        )
    });
    assert_eq!(refused.0, 403, "{refused:?}");
    assert_eq!(malformed.0, 400, "{malformed:?}");
    assert!(malformed.1.contains("ip: character 0"), "{malformed:?}");
    // A flood of queries while A pings B.
    let stop = Arc::new(AtomicBool::new(false));
    let mut flood = Vec::new();
    for _ in 0..4 {
        let stop = stop.clone();
        let q = format!("/digest?ip={ip_hex}");
        flood.push(spawn_in_netns(&lab.ns("r2"), move || {
            let mut codes = [0u64; 3];
            let end = Instant::now() + Duration::from_secs(8);
            while !stop.load(Ordering::Relaxed) && Instant::now() < end {
                match get_from(Ipv4Addr::LOCALHOST, &q).0 {
                    200 => codes[0] += 1,
                    429 => codes[1] += 1,
                    _ => codes[2] += 1,
                }
            }
            codes
        }));
    }
    let (ok, ping) = lab.on(
        "ha",
        &["ping", "-c", "100", "-i", "0.02", "-W", "1", "10.81.2.2"],
    );
    stop.store(true, Ordering::Relaxed);
    let mut codes = [0u64; 3];
    for f in flood {
        for (a, b) in codes.iter_mut().zip(f.join().unwrap()) {
            *a += b;
        }
    }
    println!(
        "query flood: {} answered, {} refused for the rate, {} other; ping: {}",
        codes[0],
        codes[1],
        codes[2],
        ping.lines().rev().nth(1).unwrap_or("")
    );
    assert!(ok && ping.contains(" 0% packet loss"), "{ping}");
    assert!(codes[1] > codes[0] && codes[2] == 0, "{codes:?}");
    // 3,000 half-sent requests to R2's listener.
    raise_nofile(8192);
    let before = threads_of(r2_pid);
    let (after, scrape) = in_netns(&lab.ns("r2"), move || {
        let mut idle = Vec::new();
        for _ in 0..3000 {
            let mut s = TcpStream::connect(LISTEN).unwrap();
            s.write_all(b"GET /metr").unwrap();
            idle.push(s);
        }
        std::thread::sleep(Duration::from_millis(500));
        let after = threads_of(r2_pid);
        let scrape = get_from(Ipv4Addr::LOCALHOST, "/metrics");
        drop(idle);
        (after, scrape)
    });
    println!("r2 threads with 3,000 idle connections: {before} -> {after}");
    assert_eq!(
        after, before,
        "the router's threads grew with idle connections"
    );
    assert_eq!(scrape.0, 200);
    assert!(
        scrape
            .1
            .contains("bloomplane_digest_queries_total{result=\"rate_limited\"}"),
        "{}",
        scrape.1
    );
    let (ok, text) = lab.on("ha", &["ping", "-c", "3", "-W", "2", "10.81.2.2"]);
    assert!(ok, "{text}");

    let reports = lab.stop(&dir);
    for (r, rep) in ROUTERS.iter().zip(&reports) {
        let d = &rep["total"]["digest"];
        assert!(u(&d["recorded"]) > 0 || *r == "r3", "{r}: {d}");
    }
}
