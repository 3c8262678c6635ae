//! The ring backend's transmit paths on a veth pair in a namespace of the
//! test's own (root; skipped with the reason otherwise): a `PACKET_TX_RING`
//! ([`TxRing`]) and the router's ports ([`RingPorts`], on a transmit ring
//! and on `sendmmsg(2)`) deliver every frame byte for byte and in order,
//! through many turns of a small ring, and refuse the lengths the
//! interface cannot carry. The receive ring lends its frames to the batch
//! where the kernel put them, and the router's chain forwards unicast
//! frames from there without copying them.

mod lab_common;

use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::{Duration, Instant};

use dataplane::chain::Chain;
use dataplane::clock::{MonotonicClock, Timestamp};
use dataplane::config::RouterConfig;
use dataplane::io::port::Ports;
use dataplane::io::ring::{RingConfig, RingPorts, RxRing, TxRefused, TxRing};
use dataplane::packet::{Transmit, TxFrame};
use dataplane::pipeline::Batch;

/// A namespace holding veth `t0` <-> `t1` (MTU 1500, up), removed on drop.
struct Pair {
    ns: String,
}

impl Pair {
    fn new(tag: &str) -> Pair {
        Pair::with_links(tag, &[("t0", "t1")])
    }

    /// A namespace holding the veth pairs `links`.
    fn with_links(tag: &str, links: &[(&str, &str)]) -> Pair {
        let ns = format!("bptx-{tag}-{}", std::process::id());
        let _ = Command::new("ip")
            .args(["netns", "del", &ns])
            .stderr(std::process::Stdio::null())
            .status();
        let run = |args: &[&str]| {
            let out = Command::new("ip").args(args).output().expect("ip");
            assert!(
                out.status.success(),
                "ip {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        };
        run(&["netns", "add", &ns]);
        let pair = Pair { ns };
        let ns = pair.ns.as_str();
        for &(a, b) in links {
            run(&[
                "-n", ns, "link", "add", a, "type", "veth", "peer", "name", b,
            ]);
            for dev in [a, b] {
                run(&["-n", ns, "link", "set", dev, "mtu", "1500", "up"]);
            }
        }
        run(&["-n", ns, "link", "set", "lo", "up"]);
        pair
    }

    /// Moves the calling thread into the namespace.
    fn enter(&self) {
        let f = std::fs::File::open(format!("/var/run/netns/{}", self.ns)).expect("netns file");
        // SAFETY: `f` is an open namespace file; setns moves only this
        // thread, which then opens its sockets there.
        let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
    }
}

/// Why the test cannot run here.
fn skip() -> Option<String> {
    lab_common::skip_reason().or_else(lab_common::ring_refused)
}

/// Frame `i`: broadcast, an experimental EtherType (no stack on the far
/// side takes it), the sequence number, and a length from 14 to 1514 bytes
/// that varies with `i`.
fn frame(i: u32) -> Vec<u8> {
    let len = 14 + (i as usize * 37) % 1501;
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x01, 0x88, 0xb5]);
    f.extend_from_slice(&i.to_be_bytes());
    let mut x = i;
    while f.len() < len {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        f.push((x >> 24) as u8);
    }
    f.truncate(len);
    f
}

/// The sequence number of a frame built by [`frame`], if it is one (at
/// least 18 bytes; shorter ones are matched by length and position).
fn seq(f: &[u8]) -> Option<u32> {
    if f.get(12..14) != Some(&[0x88, 0xb5][..]) {
        return None;
    }
    f.get(14..18)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

const FRAMES: u32 = 4000;

/// Small rings: many turns of each.
fn small_rx() -> RingConfig {
    RingConfig {
        block_bytes: 1 << 16,
        blocks: 64,
        block_timeout_ms: 1,
        tx_frames: 64,
    }
}

#[test]
fn tx_ring_delivers_every_frame_in_order() {
    if let Some(why) = skip() {
        eprintln!("skipped: {why}");
        return;
    }
    let pair = Pair::new("ring");
    std::thread::scope(|s| {
        s.spawn(|| {
            pair.enter();
            let mut rx = RxRing::open("t1", true, None, &small_rx()).expect("rx ring");
            let mut tx = TxRing::open("t0", 64).expect("tx ring");
            assert_eq!(tx.frames(), 64, "{tx:?}");
            // MTU 1500: an Ethernet header and one VLAN tag over it.
            assert_eq!(tx.max_frame(), 1518);
            assert_eq!(tx.push(&[0u8; 13]), Err(TxRefused::Length));
            assert_eq!(tx.push(&[0u8; 1519]), Err(TxRefused::Length));
            assert_eq!(tx.queued(), 0);
            let mut got: Vec<Vec<u8>> = Vec::new();
            let drain = |rx: &mut RxRing, got: &mut Vec<Vec<u8>>| {
                while let Some(f) = rx.next_frame() {
                    if !f.outgoing && (f.bytes.len() < 14 || f.bytes[12..14] == [0x88, 0xb5]) {
                        got.push(f.bytes.to_vec());
                    }
                }
            };
            // Marked slots are the kernel's until a kick sends them: the
            // 65th frame finds the ring full.
            for i in 0..64 {
                tx.push(&frame(i)).expect("a free slot");
            }
            assert_eq!(tx.queued(), 64);
            assert_eq!(tx.push(&frame(64)), Err(TxRefused::Full));
            tx.kick().expect("kick");
            assert_eq!(tx.queued(), 0);
            let mut full = 0u32;
            for i in 64..FRAMES {
                let f = frame(i);
                loop {
                    match tx.push(&f) {
                        Ok(()) => break,
                        Err(TxRefused::Full) => {
                            full += 1;
                            tx.kick().expect("kick");
                            tx.wait_room(100);
                            drain(&mut rx, &mut got);
                        }
                        Err(e) => panic!("frame {i} of {} bytes: {e:?}", f.len()),
                    }
                }
                if i % 16 == 15 {
                    tx.kick().expect("kick");
                    drain(&mut rx, &mut got);
                }
            }
            tx.kick().expect("kick");
            let deadline = Instant::now() + Duration::from_secs(5);
            while got.len() < FRAMES as usize && Instant::now() < deadline {
                drain(&mut rx, &mut got);
                std::thread::sleep(Duration::from_millis(2));
            }
            let (dropped, _) = rx.statistics();
            assert_eq!(dropped, 0, "the receive ring dropped frames");
            assert_eq!(got.len(), FRAMES as usize, "frames received");
            for (i, g) in got.iter().enumerate() {
                assert_eq!(g, &frame(i as u32), "frame {i} (seq {:?})", seq(g));
            }
            eprintln!("{FRAMES} frames through a 64-slot ring, {full} waits for room");
        });
    });
}

/// `RingPorts` sends what the egress stage hands it, on a transmit ring
/// (`tx_frames` 64) and on `sendmmsg` (`tx_frames` 0), and its own ring on
/// the far end reads it back.
#[test]
fn ring_ports_send_on_both_transmit_paths() {
    if let Some(why) = skip() {
        eprintln!("skipped: {why}");
        return;
    }
    for tx_frames in [64, 0] {
        let pair = Pair::new(&format!("ports{tx_frames}"));
        std::thread::scope(|s| {
            s.spawn(|| {
                pair.enter();
                let cfg = RouterConfig::from_toml_str(
                    "[[interfaces]]\nname = \"t0\"\n[[interfaces]]\nname = \"t1\"\n",
                    "test",
                )
                .expect("config");
                let rc = RingConfig {
                    tx_frames,
                    ..small_rx()
                };
                let mut ports = RingPorts::open(
                    &cfg.port_settings(),
                    &[0x7a01, 0x7a02],
                    &rc,
                    MonotonicClock::new(),
                )
                .expect("ring ports");
                let mut batch = Batch::new();
                let mut got: VecDeque<Vec<u8>> = VecDeque::new();
                let mut recv = |ports: &mut RingPorts, got: &mut VecDeque<Vec<u8>>| {
                    loop {
                        batch.clear();
                        if ports.recv(&mut batch) == 0 {
                            break;
                        }
                        for p in batch.packets() {
                            if p.ingress == 1 && p.data().get(12..14) == Some(&[0x88, 0xb5][..]) {
                                got.push_back(p.data().to_vec());
                            }
                        }
                    }
                };
                let t = Timestamp::from_nanos(0);
                // Frames of at least 18 bytes (the sequence number), and one
                // the MTU cannot carry, refused and counted.
                let sent: Vec<Vec<u8>> = (0..FRAMES).map(frame).filter(|f| f.len() >= 18).collect();
                for (k, f) in sent.iter().enumerate() {
                    let tx = TxFrame {
                        port: 0,
                        frame: f,
                        wire_len: f.len() as u32,
                        arrived: t,
                        departs: t,
                        queued: false,
                    };
                    assert!(ports.send(&tx));
                    if k % 32 == 31 {
                        ports.flush();
                        recv(&mut ports, &mut got);
                    }
                }
                let big = vec![0u8; 1600];
                ports.send(&TxFrame {
                    port: 0,
                    frame: &big,
                    wire_len: 1600,
                    arrived: t,
                    departs: t,
                    queued: false,
                });
                ports.flush();
                let deadline = Instant::now() + Duration::from_secs(5);
                while got.len() < sent.len() && Instant::now() < deadline {
                    recv(&mut ports, &mut got);
                    std::thread::sleep(Duration::from_millis(2));
                }
                ports.refresh_counters();
                let c = ports.rx_counters();
                assert_eq!(c[1].rx_dropped, 0, "tx_frames {tx_frames}: {c:?}");
                assert_eq!(
                    c[0].tx_dropped, 1,
                    "tx_frames {tx_frames}: the 1600-byte frame"
                );
                assert_eq!(
                    got.len(),
                    sent.len(),
                    "tx_frames {tx_frames}: frames read back"
                );
                for (k, (g, f)) in got.iter().zip(&sent).enumerate() {
                    assert_eq!(g, f, "tx_frames {tx_frames}: frame {k}");
                }
            });
        });
    }
}

/// Frame `i` of [`ring_router_lends_unicast_frames`]: UDP from 10.0.0.1 to
/// 10.0.0.2 with `i` in its payload, 60 to 1060 bytes.
fn udp(i: u32) -> Vec<u8> {
    let ip = dataplane::wire::build::IpHeader::v4([10, 0, 0, 1], [10, 0, 0, 2], 17);
    let mut payload = i.to_be_bytes().to_vec();
    payload.resize(18 + (i as usize * 37) % 1000, 0xa5);
    dataplane::wire::build::udp_frame(
        [2, 0, 0, 0, 0, 2],
        [2, 0, 0, 0, 0, 1],
        &ip,
        4000,
        4001,
        &payload,
    )
}

/// The ring backend under the router's chain: `a0` -> `r0` (router) `r1`
/// -> `b1`, a wire from r0 to r1. Every frame the router reads is lent:
/// its bytes lie in r0's receive ring; every unicast frame leaves by r1
/// byte for byte, and none was copied on the way (`rx_copied` and the
/// egress's `frame_copies` stay 0), on both transmit paths.
#[test]
fn ring_router_lends_unicast_frames() {
    if let Some(why) = skip() {
        eprintln!("skipped: {why}");
        return;
    }
    const N: u32 = 2000;
    for tx_frames in [64, 0] {
        let pair = Pair::with_links(&format!("lend{tx_frames}"), &[("a0", "r0"), ("r1", "b1")]);
        std::thread::scope(|s| {
            s.spawn(|| {
                pair.enter();
                let cfg = RouterConfig::from_toml_str(
                    "[[interfaces]]\nname = \"r0\"\n[[interfaces]]\nname = \"r1\"\n\
                     [[wires]]\nfrom = \"r0\"\nto = \"r1\"\n",
                    "test",
                )
                .expect("config");
                let mut chain = Chain::build(&cfg).expect("chain");
                let rc = RingConfig {
                    tx_frames,
                    ..small_rx()
                };
                let mut ports = RingPorts::open(
                    &cfg.port_settings(),
                    &[0x7b01, 0x7b02],
                    &rc,
                    MonotonicClock::new(),
                )
                .expect("ring ports");
                let ring0 = ports.rx_mapping(0).expect("port 0");
                let mut tx = TxRing::open("a0", 64).expect("sender's ring");
                let mut rx = RxRing::open("b1", true, None, &small_rx()).expect("receiver's ring");
                let mut batch = Batch::new();
                let mut got: Vec<Vec<u8>> = Vec::new();
                let (mut lent, mut read) = (0u64, 0u64);
                let mut route = |ports: &mut RingPorts,
                                 chain: &mut Chain,
                                 got: &mut Vec<Vec<u8>>| {
                    loop {
                        batch.clear();
                        if ports.recv(&mut batch) == 0 {
                            break;
                        }
                        // Ours (the host's own IPv6 chatter may come too).
                        let ours = batch
                            .packets()
                            .iter()
                            .filter(|p| p.data().get(34..36) == Some(&4000u16.to_be_bytes()[..]));
                        for p in ours {
                            read += 1;
                            let at = p.data().as_ptr() as usize;
                            if p.is_lent()
                                && ring0.contains(&at)
                                && ring0.contains(&(at + p.data().len() - 1))
                            {
                                lent += 1;
                            }
                        }
                        let now = ports.now();
                        chain.process(&mut batch, now, ports);
                        ports.flush();
                    }
                    while let Some(f) = rx.next_frame() {
                        if !f.outgoing && f.bytes.get(34..36) == Some(&4000u16.to_be_bytes()[..]) {
                            got.push(f.bytes.to_vec());
                        }
                    }
                };
                for i in 0..N {
                    let f = udp(i);
                    while tx.push(&f) == Err(TxRefused::Full) {
                        tx.kick().expect("kick");
                        tx.wait_room(100);
                        route(&mut ports, &mut chain, &mut got);
                    }
                    if i % 16 == 15 {
                        tx.kick().expect("kick");
                        route(&mut ports, &mut chain, &mut got);
                    }
                }
                tx.kick().expect("kick");
                let deadline = Instant::now() + Duration::from_secs(5);
                while got.len() < N as usize && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(2));
                    route(&mut ports, &mut chain, &mut got);
                }
                ports.refresh_counters();
                let c = ports.rx_counters();
                assert_eq!(c[0].rx_dropped, 0, "tx_frames {tx_frames}: {c:?}");
                assert_eq!(
                    got.len(),
                    N as usize,
                    "tx_frames {tx_frames}: frames through the router"
                );
                for (i, g) in got.iter().enumerate() {
                    assert_eq!(g, &udp(i as u32), "tx_frames {tx_frames}: frame {i}");
                }
                assert!(c[0].rx_packets >= N as u64, "tx_frames {tx_frames}: {c:?}");
                assert_eq!(
                    (read, lent),
                    (N as u64, N as u64),
                    "tx_frames {tx_frames}: frames lent from r0's ring"
                );
                assert_eq!(c[0].rx_copied, 0, "tx_frames {tx_frames}: {c:?}");
                let out = &chain.egress().summaries(ports.now())[1];
                assert!(
                    out.counters.sent >= N as u64,
                    "tx_frames {tx_frames}: {out:?}"
                );
                assert_eq!(
                    out.counters.frame_copies, 0,
                    "tx_frames {tx_frames}: {out:?}"
                );
            });
        });
    }
}
