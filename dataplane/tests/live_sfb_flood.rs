//! The default SFB profile against floods of unresponsive flows, live, in
//! the namespace lab (root; skipped with the reason elsewhere).
//!
//! r-b is shaped to 4 Mbit/s behind SFB with the router's defaults (the
//! `fair` profile); host A sends UDP from many sockets (one flow each)
//! to host B, which times what arrives.
//!
//! 1. **The link stays full.** 1000 flows, then 32, together at three
//!    times the port's rate (1000-byte datagrams, the flows taking turns),
//!    with one worker and with two: B's arrival rate, from the first
//!    second of the flood to the last datagram, is at least 99% of the
//!    rate (with the fair-share check dropping whatever the queue held,
//!    1000 flows left the port at 92% of its rate with two workers). The
//!    router's stats text carries the `link use` line and its final
//!    report the `link` figures.
//! 2. **New flows do not pay for an old flood.** A 3 s flood of 64-byte
//!    frames over 1024 flows at three times the rate, 5 s with nothing,
//!    then 20 new flows at 10% of the rate (500 datagrams): fewer than 1%
//!    of those are lost, and the final report's bins show probabilities
//!    near 0 (under sch_sfb's rules the bins keep the flood's
//!    probabilities, which cost the new flows 42% of their packets with
//!    two workers).

mod lab_common;

use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lab_common::{Lab, big_rcvbuf, binaries, interface, skip_reason, spawn_in_netns, u};

const RATE_BPS: u64 = 4_000_000;
const A: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
const FLOOD_PORT: u16 = 9200;
const NEW_PORT: u16 = 9201;
/// Ethernet + IPv4 + UDP headers.
const HEADERS: usize = 14 + 20 + 8;

fn config(workers: usize) -> String {
    format!(
        r#"
[workers]
count = {workers}

[[interfaces]]
name = "r-a"
[[interfaces]]
name = "r-b"
[interfaces.egress]
rate_bps = {RATE_BPS}
burst_bytes = 3000
limit = 1000
[interfaces.sfb]
seed = 5
[[interfaces]]
name = "r-c"

[[wires]]
from = "r-a"
to = "r-b"
bidirectional = true
"#
    )
}

/// What B received on one port: each datagram's arrival and length.
type Arrivals = Vec<(Instant, usize)>;

/// B's receiver on `port` until `stop`: every datagram's arrival time and
/// length.
fn receive(lab: &Lab, port: u16, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Arrivals> {
    let (tx, rx) = std::sync::mpsc::channel();
    let h = spawn_in_netns(&lab.ns("b"), move || {
        let s = UdpSocket::bind((B, port)).expect("bind on B");
        big_rcvbuf(&s);
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        tx.send(()).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 2048];
        while !stop.load(Ordering::Relaxed) {
            if let Ok(n) = s.recv(&mut buf) {
                got.push((Instant::now(), n));
            }
        }
        got
    });
    rx.recv_timeout(Duration::from_secs(5)).expect("B ready");
    h
}

/// `flows` sockets on A sending `payload`-byte datagrams to B's `port`,
/// taking turns, together at `bps` (frame bytes) for `secs`; returns how
/// many were sent.
fn send(lab: &Lab, flows: usize, payload: usize, bps: f64, secs: f64, port: u16) -> u64 {
    spawn_in_netns(&lab.ns("a"), move || {
        let socks: Vec<UdpSocket> = (0..flows)
            .map(|_| UdpSocket::bind((A, 0)).expect("bind on A"))
            .collect();
        let to = SocketAddr::from((B, port));
        let pps = bps / ((payload + HEADERS) * 8) as f64;
        let n = (pps * secs) as u64;
        let mut buf = vec![0u8; payload];
        let start = Instant::now();
        let mut sent = 0u64;
        while sent < n {
            // Paced per millisecond: what is due now goes out now.
            let due = ((start.elapsed().as_secs_f64() * pps) as u64 + 1).min(n);
            while sent < due {
                buf[..4].copy_from_slice(&(sent as u32).to_be_bytes());
                let _ = socks[sent as usize % flows].send_to(&buf, to);
                sent += 1;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        sent
    })
    .join()
    .expect("sender")
}

/// The arrival rate at B, bit/s of frames, from `skip` after the first
/// datagram to the last.
fn rate(got: &Arrivals, skip: Duration) -> f64 {
    let Some(&(first, _)) = got.first() else {
        return 0.0;
    };
    let from = first + skip;
    let mut bytes = 0usize;
    let mut last = from;
    for &(t, n) in got.iter().filter(|a| a.0 > from) {
        bytes += n + HEADERS;
        last = t;
    }
    bytes as f64 * 8.0 / (last - from).as_secs_f64().max(1e-9)
}

#[test]
fn floods_keep_the_port_full_and_new_flows_do_not_pay_for_them() {
    if let Some(why) = skip_reason() {
        eprintln!("floods_keep_the_port_full_and_new_flows_do_not_pay_for_them: skipped: {why}");
        return;
    }
    let bin = binaries().join("dataplane");
    let mut lab = Lab::up(format!("bpf{}", std::process::id() % 100_000), "sfbflood");
    for workers in [1, 2] {
        for flows in [1000, 32] {
            let tag = format!("flood{flows}w{workers}");
            let (err_path, report_path) = lab.start_router_with(&bin, &tag, &config(workers), &[]);
            let stop = Arc::new(AtomicBool::new(false));
            let rx = receive(&lab, FLOOD_PORT, stop.clone());
            let sent = send(&lab, flows, 1000, 3.0 * RATE_BPS as f64, 6.0, FLOOD_PORT);
            // The queue drains (the fair profile keeps it short).
            std::thread::sleep(Duration::from_millis(500));
            stop.store(true, Ordering::Relaxed);
            let got = rx.join().unwrap();
            let (err, report, _) =
                lab.stop_router(&err_path, &report_path, Duration::from_secs(10));
            let r = rate(&got, Duration::from_secs(1));
            let rb = interface(&report["total"], "r-b");
            let _ = writeln!(
                std::io::stderr(),
                "{flows} flows, {workers} worker(s): A sent {sent}, B got {} at {:.4} Mbit/s \
                 ({:.4} of the rate); r-b link {}; sfb {}",
                got.len(),
                r / 1e6,
                r / RATE_BPS as f64,
                rb["link"],
                rb["sfb"]
            );
            assert!(
                r >= 0.99 * RATE_BPS as f64,
                "{flows} flows, {workers} worker(s): {r:.0} bit/s\n{err}"
            );
            assert!(u(&rb["sfb"]["ratedrop"]) > 0, "{rb}");
            assert!(rb["link"]["run"].as_f64().is_some(), "{rb}");
            assert!(err.contains("link use "), "{err}");
        }
        // Flood, gap, new flows.
        let tag = format!("gap{workers}");
        let (err_path, report_path) = lab.start_router_with(&bin, &tag, &config(workers), &[]);
        let stop = Arc::new(AtomicBool::new(false));
        let rx = receive(&lab, NEW_PORT, stop.clone());
        send(
            &lab,
            1024,
            64 - HEADERS,
            3.0 * RATE_BPS as f64,
            3.0,
            FLOOD_PORT,
        );
        std::thread::sleep(Duration::from_secs(5));
        // 500 datagrams in 20 flows at 0.4 Mbit/s.
        let secs = 500.0 * 64.0 * 8.0 / (0.1 * RATE_BPS as f64);
        let sent = send(
            &lab,
            20,
            64 - HEADERS,
            0.1 * RATE_BPS as f64,
            secs,
            NEW_PORT,
        );
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, Ordering::Relaxed);
        let got = rx.join().unwrap().len() as u64;
        let (err, report, _) = lab.stop_router(&err_path, &report_path, Duration::from_secs(10));
        let sfb = &interface(&report["total"], "r-b")["sfb"];
        let _ = writeln!(
            std::io::stderr(),
            "{workers} worker(s): after the flood and 5 s idle, {got} of {sent} new datagrams arrived; sfb {sfb}"
        );
        assert_eq!(sent, 500);
        assert!(
            (sent - got.min(sent)) * 100 < sent,
            "{workers} worker(s): lost {} of {sent}\n{err}",
            sent - got.min(sent)
        );
        // Q0.16: under 5% now, whatever the flood raised them to.
        assert!(
            u(&sfb["maxprob"]) < 65535 / 20,
            "the bins forgot the flood: {sfb}"
        );
    }
}
