//! Transmit errors with their reasons, in the namespace lab
//! (`scripts/lab.sh`): r-b's MTU is lowered to 1400 while host A, at MTU
//! 1500, sends full-size datagrams to B through the router. The kernel
//! refuses each 1514-byte frame on r-b (`EMSGSIZE`); the router says so
//! with the reason, the frame size and the MTU, in its stats text (`(N
//! err: N msgsize 1514>1400)`, or with the ring backend `N refused by the
//! kernel: ...`), its final JSON report (each interface's `tx_errors`) and Prometheus
//! (`bloomplane_interface_tx_refused_total{reason="msgsize"}`,
//! `bloomplane_interface_mtu_bytes`), while the datagrams that fit go
//! through. On every port backend (pnet, ring, xdp).
//!
//! Needs root and `ip netns`; otherwise it prints why and passes as skipped.

use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[path = "lab_common/mod.rs"]
mod lab_common;

use lab_common::{Lab, big_rcvbuf, collect, in_netns, run_bounded, skip_reason};

const A: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
/// Full-size datagrams (1500 bytes of IP: 1514-byte frames), and small ones.
const BIG: u32 = 200;
const SMALL: u32 = 100;
const PORT: u16 = 9100;
const METRICS_PORT: u16 = 19465;

/// One lab at a time in this process.
static ONE_LAB: Mutex<()> = Mutex::new(());

#[test]
fn transmit_errors_carry_their_reason_pnet() {
    transmit_errors("pnet");
}

#[test]
fn transmit_errors_carry_their_reason_ring() {
    transmit_errors("ring");
}

/// On AF_XDP the device would drop a frame over its MTU without a word:
/// the router checks the length itself and counts it as the kernel would.
#[test]
fn transmit_errors_carry_their_reason_xdp() {
    transmit_errors("xdp");
}

fn config(backend: &str) -> String {
    format!(
        "[io]\nbackend = \"{backend}\"\n\
         [[interfaces]]\nname = \"r-a\"\n[[interfaces]]\nname = \"r-b\"\n[[interfaces]]\nname = \"r-c\"\n\
         [[wires]]\nfrom = \"r-a\"\nto = \"r-b\"\n\
         [telemetry]\nlisten = \"127.0.0.1:{METRICS_PORT}\"\n"
    )
}

/// `GET /metrics` inside namespace `ns`: the body.
fn metrics_in(ns: &str) -> Option<String> {
    in_netns(ns, move || {
        use std::io::Read as _;
        let mut c = std::net::TcpStream::connect(("127.0.0.1", METRICS_PORT)).ok()?;
        c.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        write!(c, "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
        let mut out = String::new();
        c.read_to_string(&mut out).ok()?;
        out.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
    })
}

/// The value of the sample `series` in a Prometheus text body.
fn sample(body: &str, series: &str) -> Option<u64> {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn transmit_errors(backend: &str) {
    let name = format!("transmit_errors_carry_their_reason ({backend})");
    if let Some(why) = skip_reason().or_else(|| lab_common::backend_refused(backend)) {
        let _ = writeln!(std::io::stderr(), "{name}: skipped: {why}");
        return;
    }
    let _one = ONE_LAB.lock().unwrap_or_else(|e| e.into_inner());
    let mut lab = Lab::up(
        format!("bpx{}{}", std::process::id() % 100_000, &backend[..1]),
        "txerr",
    );
    let mtu = run_bounded(
        std::process::Command::new("ip").args([
            "netns",
            "exec",
            &lab.ns("r"),
            "ip",
            "link",
            "set",
            "r-b",
            "mtu",
            "1400",
        ]),
        Duration::from_secs(10),
        "ip link set mtu",
    );
    assert!(
        mtu.status.success(),
        "{}",
        String::from_utf8_lossy(&mtu.stderr)
    );
    let (err_path, report_path) = lab.start_router_with(
        Path::new(env!("CARGO_BIN_EXE_dataplane")),
        "router",
        &config(backend),
        &[],
    );

    let rx = in_netns(&lab.ns("b"), || {
        let s = UdpSocket::bind((B, PORT)).unwrap();
        big_rcvbuf(&s);
        s
    });
    let tx = in_netns(&lab.ns("a"), || UdpSocket::bind((A, 0)).unwrap());
    let to = SocketAddr::from((B, PORT));
    // Numbered: the big ones 0.., the small ones after them.
    let mut big = vec![0u8; 1472];
    for i in 0..BIG {
        big[..4].copy_from_slice(&i.to_be_bytes());
        tx.send_to(&big, to).unwrap();
        if i % 32 == 31 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let mut small = [0u8; 64];
    for i in BIG..BIG + SMALL {
        small[..4].copy_from_slice(&i.to_be_bytes());
        tx.send_to(&small, to).unwrap();
    }
    let (got, _) = collect(&rx, BIG + SMALL, Duration::from_secs(2));
    assert_eq!(got, SMALL, "only the datagrams that fit r-b's MTU arrive");

    // Prometheus, while the router runs (published every 100 ms).
    let want = "bloomplane_interface_tx_refused_total{interface=\"r-b\",reason=\"msgsize\"}";
    let start = Instant::now();
    let body = loop {
        let body = metrics_in(&lab.ns("r")).unwrap_or_default();
        if sample(&body, want) == Some(u64::from(BIG)) || start.elapsed() > Duration::from_secs(5) {
            break body;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(sample(&body, want), Some(u64::from(BIG)), "{body}");
    for (series, v) in [
        (
            "bloomplane_interface_tx_refused_total{interface=\"r-b\",reason=\"nobufs\"}",
            0,
        ),
        ("bloomplane_interface_mtu_bytes{interface=\"r-b\"}", 1400),
        ("bloomplane_interface_mtu_bytes{interface=\"r-a\"}", 1500),
        (
            "bloomplane_interface_tx_msgsize_largest_bytes{interface=\"r-b\"}",
            1514,
        ),
    ] {
        assert_eq!(sample(&body, series), Some(v), "{series}: {body}");
    }

    let (err, report, _) = lab.stop_router(&err_path, &report_path, Duration::from_secs(10));
    let all = err.split("== all workers").last().unwrap_or_default();
    let line = all
        .lines()
        .find(|l| l.starts_with("  port r-b "))
        .unwrap_or_else(|| panic!("{err}"));
    let reason = format!("{BIG} msgsize 1514>1400)");
    let counts = match backend {
        "pnet" => format!("({BIG} err: {reason}"),
        _ => format!("(0 err, {BIG} refused by the kernel: {reason}"),
    };
    assert!(line.contains(&counts), "{line}");
    let rb = report["total"]["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "r-b")
        .unwrap();
    let e = &rb["tx_errors"];
    assert_eq!(e["msgsize"], BIG, "{rb}");
    assert_eq!(
        (e["msgsize_largest"].as_u64(), e["mtu"].as_u64()),
        (Some(1514), Some(1400))
    );
    assert_eq!(
        (e["nobufs"].as_u64(), e["other"].as_u64()),
        (Some(0), Some(0))
    );
}
