//! Real TCP through the router's default SFB (the `fair` profile), in the
//! namespace lab (root; skipped with the reason elsewhere).
//!
//! Host A sends eight bulk TCP flows (CUBIC where the kernel offers it per
//! socket, ECN on) and one not-ECT UDP flow at ten times its fair share to
//! host B, through `dataplane run` whose r-b egress is shaped to 10 Mbit/s
//! behind SFB with the built-in defaults. After a 5 s warm-up, 10 s are
//! measured at B: the UDP flow must get less than 1.25x its fair share
//! (`rate / (N + 1)`; the issue asked for 1.5x; the check holds it at the
//! share, so a bound at 1x would be a coin toss), every TCP flow more than
//! half of it, Jain's index of the TCP goodputs must be at least 0.9, and
//! the router must account for every packet. Measured: UDP 0.89x, Jain
//! 1.000. Without flowmix's 20 ms delay line sch_sfb's rules (`profile =
//! "linux"`) come close here too (UDP 0.93x, Jain 0.967, measured once) and
//! fail only the check that the fair-share check dropped the UDP flow's
//! excess; on flowmix they give the UDP flow 1.1-1.3x at 8 flows. This is the short CI version of
//! the `../shared/tools/flowmix` scenario (which adds a 20 ms delay line
//! and runs 8, 50 and 200 flows; the README has its figures).
//!
//! It runs on the pnet backend and again on xdp (`[io] backend = "xdp"`,
//! skipped with the kernel's reason where AF_XDP is refused), one lab at a
//! time.

mod lab_common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lab_common::{Lab, binaries, interface, skip_reason, spawn_in_netns, u};

const RATE_BPS: u64 = 10_000_000;
const N_TCP: usize = 8;
const WARMUP: Duration = Duration::from_secs(5);
const MEASURE: Duration = Duration::from_secs(10);
/// UDP payload of a 1514-byte frame.
const UDP_PAYLOAD: usize = 1472;
const UDP_FRAME: u64 = 1514;
const B_ADDR: [u8; 4] = [10, 77, 0, 2];
const TCP_PORT: u16 = 5201;
const UDP_PORT: u16 = 5202;

fn config(backend: &str) -> String {
    format!(
        r#"
[workers]
count = 1

[[interfaces]]
name = "r-a"
[[interfaces]]
name = "r-b"
[interfaces.egress]
rate_bps = {RATE_BPS}
burst_bytes = 15140
limit = 1000
[interfaces.sfb]
seed = 5

[[wires]]
from = "r-a"
to = "r-b"
bidirectional = true

[io]
backend = "{backend}"
"#
    )
}

/// One lab at a time: each measures rates.
static ONE_LAB: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Asks for CUBIC on `s`; false where the namespace does not allow it.
fn cubic(s: &TcpStream) -> bool {
    let name = b"cubic";
    // SAFETY: `s` is an open TCP socket; `name` is a live byte slice whose
    // exact length is passed.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    rc == 0
}

fn sysctl(ns: &str, kv: &str) {
    let st = std::process::Command::new("ip")
        .args(["netns", "exec", ns, "sysctl", "-qw", kv])
        .status()
        .expect("sysctl");
    assert!(st.success(), "sysctl {kv} in {ns}");
}

/// Jain's fairness index of `x`.
fn jain(x: &[f64]) -> f64 {
    let s: f64 = x.iter().sum();
    let s2: f64 = x.iter().map(|v| v * v).sum();
    s * s / (x.len() as f64 * s2)
}

#[test]
fn fair_sfb_holds_an_unresponsive_flow_among_real_tcp() {
    fair_sfb("pnet");
}

#[test]
fn fair_sfb_holds_an_unresponsive_flow_among_real_tcp_xdp() {
    fair_sfb("xdp");
}

fn fair_sfb(backend: &str) {
    let name = format!("fair_sfb_holds_an_unresponsive_flow_among_real_tcp ({backend})");
    if let Some(why) = skip_reason().or_else(|| lab_common::backend_refused(backend)) {
        eprintln!("{name}: skipped: {why}");
        return;
    }
    let _one = ONE_LAB.lock().unwrap_or_else(|e| e.into_inner());
    let bin = binaries().join("dataplane");
    let mut lab = Lab::up(
        format!("bps{}{}", std::process::id() % 100_000, &backend[..1]),
        "sfbtcp",
    );
    let (ns_a, ns_b) = (lab.ns("a"), lab.ns("b"));
    for ns in [&ns_a, &ns_b] {
        sysctl(ns, "net.ipv4.tcp_ecn=1");
    }
    let (err_path, report_path) = lab.start_router_with(&bin, "sfbtcp", &config(backend), &[]);

    let stop = Arc::new(AtomicBool::new(false));
    let tcp_bytes: Arc<Vec<AtomicU64>> = Arc::new((0..N_TCP).map(|_| AtomicU64::new(0)).collect());
    let udp_bytes = Arc::new(AtomicU64::new(0));
    let b: SocketAddr = (B_ADDR, TCP_PORT).into();
    let b_udp: SocketAddr = (B_ADDR, UDP_PORT).into();

    // B: the listener and the UDP socket, bound before A starts.
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let receiver = {
        let (stop, tcp_bytes, udp_bytes) = (stop.clone(), tcp_bytes.clone(), udp_bytes.clone());
        spawn_in_netns(&ns_b, move || {
            let listener = TcpListener::bind(b).expect("listen on B");
            let udp = UdpSocket::bind(b_udp).expect("UDP on B");
            lab_common::big_rcvbuf(&udp);
            ready_tx.send(()).unwrap();
            let udp_thread = {
                let (stop, udp_bytes) = (stop.clone(), udp_bytes.clone());
                std::thread::spawn(move || {
                    udp.set_read_timeout(Some(Duration::from_millis(100)))
                        .unwrap();
                    let mut buf = [0u8; 2048];
                    while !stop.load(Ordering::Relaxed) {
                        if let Ok(n) = udp.recv(&mut buf) {
                            udp_bytes.fetch_add(n as u64, Ordering::Relaxed);
                        }
                    }
                })
            };
            let mut readers = Vec::new();
            for _ in 0..N_TCP {
                let (mut s, _) = listener.accept().expect("accept");
                // The sender's first 4 bytes name its flow.
                let mut id = [0u8; 4];
                s.read_exact(&mut id).expect("flow id");
                let i = u32::from_be_bytes(id) as usize;
                let (stop, tcp_bytes) = (stop.clone(), tcp_bytes.clone());
                readers.push(std::thread::spawn(move || {
                    s.set_read_timeout(Some(Duration::from_millis(100)))
                        .unwrap();
                    let mut buf = vec![0u8; 1 << 16];
                    while !stop.load(Ordering::Relaxed) {
                        match s.read(&mut buf) {
                            Ok(0) => break,
                            Ok(n) => {
                                tcp_bytes[i].fetch_add(n as u64, Ordering::Relaxed);
                            }
                            Err(_) => {}
                        }
                    }
                }));
            }
            for r in readers {
                r.join().unwrap();
            }
            udp_thread.join().unwrap();
        })
    };
    ready_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("B ready");

    // A: the TCP senders and the UDP flow.
    let mut senders = Vec::new();
    for i in 0..N_TCP {
        let stop = stop.clone();
        senders.push(spawn_in_netns(&ns_a, move || {
            let mut s = TcpStream::connect_timeout(&b, Duration::from_secs(5)).expect("connect");
            let cc = cubic(&s);
            s.write_all(&(i as u32).to_be_bytes()).unwrap();
            s.set_write_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            let chunk = vec![0x55u8; 1 << 16];
            while !stop.load(Ordering::Relaxed) {
                let _ = s.write(&chunk);
            }
            cc
        }));
    }
    let fair_bps = RATE_BPS as f64 / (N_TCP as f64 + 1.0);
    let udp_pps = 10.0 * fair_bps / (UDP_FRAME as f64 * 8.0);
    let udp_sender = {
        let stop = stop.clone();
        spawn_in_netns(&ns_a, move || {
            let s = UdpSocket::bind("0.0.0.0:0").unwrap();
            let payload = [0u8; UDP_PAYLOAD];
            let start = Instant::now();
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let due = (start.elapsed().as_secs_f64() * udp_pps) as u64;
                while sent < due {
                    let _ = s.send_to(&payload, b_udp);
                    sent += 1;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            sent
        })
    };

    std::thread::sleep(WARMUP);
    let snap = || {
        (
            Instant::now(),
            tcp_bytes
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect::<Vec<u64>>(),
            udp_bytes.load(Ordering::Relaxed),
        )
    };
    let (t0, tcp0, udp0) = snap();
    std::thread::sleep(MEASURE);
    let (t1, tcp1, udp1) = snap();
    stop.store(true, Ordering::Relaxed);
    let cubic_flows = senders
        .into_iter()
        .map(|s| s.join().unwrap())
        .filter(|&c| c)
        .count();
    let udp_sent = udp_sender.join().unwrap();
    receiver.join().unwrap();
    let (err, report, _) = lab.stop_router(&err_path, &report_path, Duration::from_secs(10));

    let dt = (t1 - t0).as_secs_f64();
    let goodput: Vec<f64> = tcp0
        .iter()
        .zip(&tcp1)
        .map(|(a, b)| (b - a) as f64 * 8.0 / dt)
        .collect();
    let udp_frames = (udp1 - udp0) as f64 / UDP_PAYLOAD as f64;
    let udp_x = udp_frames * UDP_FRAME as f64 * 8.0 / dt / fair_bps;
    let total = &report["total"];
    let sfb = &interface(total, "r-b")["sfb"];
    // Past the test harness's capture, so that CI logs show the figures.
    let _ = writeln!(
        std::io::stderr(),
        "{name}: fair SFB, {N_TCP} TCP ({cubic_flows} CUBIC) + 1 UDP at 10x fair over {dt:.1} s: \
         UDP {udp_x:.2}x fair ({udp_sent} sent), TCP goodput Mbit/s {:?}, Jain {:.3}; sfb {sfb}",
        goodput
            .iter()
            .map(|g| (g / 1e4).round() / 100.0)
            .collect::<Vec<_>>(),
        jain(&goodput)
    );
    assert!(udp_x < 1.25, "UDP got {udp_x:.2}x its fair share\n{err}");
    assert!(jain(&goodput) >= 0.9, "Jain {:.3}\n{err}", jain(&goodput));
    for (i, g) in goodput.iter().enumerate() {
        assert!(
            *g > 0.5 * fair_bps,
            "TCP flow {i} got {:.0} kbit/s, under half the fair {:.0}\n{err}",
            g / 1e3,
            fair_bps / 1e3
        );
    }
    let pl = &total["pipeline"];
    assert_eq!(
        u(&pl["received"]),
        u(&pl["forwarded"]) + u(&pl["consumed"]) + u(&pl["dropped"]),
        "{pl}"
    );
    assert!(u(&sfb["ratedrop"]) > 0, "{sfb}");
}
