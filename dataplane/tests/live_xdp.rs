//! The AF_XDP backend's own behaviour in the namespace lab
//! (`scripts/lab.sh`, one queue per veth end): what it refuses and how it
//! says so, its fallback, and that it leaves nothing attached.
//!
//! 1. Two workers on interfaces with one receive queue each: `dataplane
//!    run` exits non-zero at once, naming the interface, its queue count,
//!    the workers and the `ethtool -L` that fixes it.
//! 2. The same with `[io.xdp] fallback = "ring"`: it says why and runs on
//!    the ring backend, and datagrams from A reach B.
//! 3. An MTU the UMEM's frames cannot hold (9000): refused, naming the MTU.
//! 4. One worker: it starts in native copy mode (the start line and every
//!    port's JSON), forwards A -> B, and after SIGTERM no XDP program is
//!    left on any router port (`ip link` shows none).
//!
//! The whole test runs the other live tests' way: root and `ip netns`, else
//! skipped with the reason; AF_XDP refused by the kernel, skipped with the
//! kernel's reason.

use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::process::Command;
use std::time::Duration;

mod lab_common;

use lab_common::{
    Lab, binaries, collect, in_netns, interface, run_bounded, send_numbered, skip_reason,
};

const A: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);

fn config(workers: u32, extra: &str) -> String {
    format!(
        r#"
[workers]
count = {workers}

[[interfaces]]
name = "r-a"
[[interfaces]]
name = "r-b"
[[interfaces]]
name = "r-c"

[[wires]]
from = "r-a"
to = "r-b"
bidirectional = true

[io]
backend = "xdp"
{extra}
"#
    )
}

/// `dataplane run` with `config` in the router namespace, expected to exit
/// by itself within 10 s; its exit success and standard error.
fn run_once(lab: &Lab, tag: &str, config: &str) -> (bool, String) {
    let path = lab.dir.join(format!("{tag}.toml"));
    std::fs::write(&path, config).unwrap();
    let out = run_bounded(
        Command::new("ip")
            .args(["netns", "exec", &lab.ns("r")])
            .arg(binaries().join("dataplane"))
            .args(["run", "--stats-interval", "0", "--config"])
            .arg(&path),
        Duration::from_secs(10),
        "dataplane run",
    );
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// 100 datagrams A -> B all arrive once.
fn a_to_b(lab: &Lab, port: u16, what: &str) {
    let rx = in_netns(&lab.ns("b"), move || {
        let s = UdpSocket::bind((B, port)).unwrap();
        lab_common::big_rcvbuf(&s);
        s
    });
    let tx = in_netns(&lab.ns("a"), || UdpSocket::bind((A, 0)).unwrap());
    send_numbered(&tx, SocketAddr::from((B, port)), 100);
    assert_eq!(
        collect(&rx, 100, Duration::from_secs(3)),
        (100, 0),
        "{what}: A -> B"
    );
}

#[test]
fn xdp_refuses_plainly_falls_back_and_detaches() {
    let name = "xdp_refuses_plainly_falls_back_and_detaches";
    if let Some(why) = skip_reason().or_else(lab_common::xdp_refused) {
        let _ = writeln!(std::io::stderr(), "{name}: skipped: {why}");
        return;
    }
    let mut lab = Lab::up(format!("bpx{}", std::process::id() % 100_000), "xdp");
    let bin = binaries().join("dataplane");

    // 1. Too few queues.
    let (ok, err) = run_once(&lab, "queues", &config(2, ""));
    assert!(!ok, "started with 1 queue for 2 workers:\n{err}");
    assert!(
        err.contains("interfaces[0] \"r-a\": 1 receive queue(s) for 2 workers")
            && err.contains("ethtool -L r-a"),
        "{err}"
    );

    // 3. An MTU a UMEM frame cannot hold.
    let mtu = Command::new("ip")
        .args(["-n", &lab.ns("r"), "link", "set", "r-c", "mtu", "9000"])
        .status()
        .unwrap();
    assert!(mtu.success());
    let (ok, err) = run_once(&lab, "mtu", &config(1, ""));
    assert!(!ok, "started with MTU 9000:\n{err}");
    assert!(
        err.contains("interfaces[2] \"r-c\": MTU 9000 takes frames up to 9022 bytes"),
        "{err}"
    );
    let mtu = Command::new("ip")
        .args(["-n", &lab.ns("r"), "link", "set", "r-c", "mtu", "1500"])
        .status()
        .unwrap();
    assert!(mtu.success());

    // 2. The fallback to ring.
    let (err_path, report) = lab.start_router_with(
        &bin,
        "fallback",
        &config(2, "[io.xdp]\nfallback = \"ring\"\n"),
        &[],
    );
    a_to_b(&lab, 9100, "fallback");
    let (err, fin, _) = lab.stop_router(&err_path, &report, Duration::from_secs(10));
    assert!(
        err.contains("AF_XDP refused: interfaces[0] \"r-a\": 1 receive queue(s) for 2 workers")
            && err.contains("running on the ring backend")
            && err.contains("r-a: ring, "),
        "{err}"
    );
    assert!(
        interface(&fin["total"], "r-a").get("mode").is_none(),
        "{}",
        fin["total"]
    );

    // 4. One worker, native copy mode; nothing left attached.
    let (err_path, report) = lab.start_router_with(&bin, "native", &config(1, ""), &[]);
    a_to_b(&lab, 9101, "native");
    let (err, fin, _) = lab.stop_router(&err_path, &report, Duration::from_secs(10));
    assert!(err.contains("r-a: xdp native copy, 1 queue(s)"), "{err}");
    for port in ["r-a", "r-b", "r-c"] {
        let i = interface(&fin["total"], port);
        assert_eq!(i["mode"]["attach"], "native", "{i}");
        assert_eq!(i["mode"]["zero_copy"], false, "{i}");
        assert!(err.contains(&format!("port {port} rx ")), "{err}");
    }
    let ra = interface(&fin["total"], "r-a");
    assert!(lab_common::u(&ra["rx_packets"]) >= 100, "{ra}");
    let links = Command::new("ip")
        .args(["-n", &lab.ns("r"), "-d", "link", "show"])
        .output()
        .unwrap();
    let links = String::from_utf8_lossy(&links.stdout);
    assert!(
        !links.contains("prog/xdp") && !links.contains("xdpgeneric"),
        "an XDP program is left attached:\n{links}"
    );
}
