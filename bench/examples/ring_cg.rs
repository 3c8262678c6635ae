//! The ring backend under the router's chain, for a profiler: frames sent
//! into veth `a0` reach the router's port `r0`, cross a wire to `r1` and
//! are read back on `b1` (ring -> chain -> ring). Root, in a namespace of
//! its own:
//!
//! ```text
//! ip netns add bpcg
//! ip -n bpcg link add a0 type veth peer name r0
//! ip -n bpcg link add r1 type veth peer name b1
//! ip netns exec bpcg sysctl -qw net.ipv6.conf.all.disable_ipv6=1
//! for d in a0 r0 r1 b1; do ip -n bpcg link set $d up; done
//! cargo build --release -p bench --example ring_cg
//! ip netns exec bpcg valgrind --tool=callgrind --collect-atstart=no \
//!     --toggle-collect='ring_cg::route' target/release/examples/ring_cg 20000
//! ip netns del bpcg
//! ```
//!
//! `ring_cg [frames] [tx_frames]`: 60-byte UDP frames (20,000 by default);
//! `tx_frames` 0 (the default) transmits with `sendmmsg`, else on a
//! transmit ring of that many slots. Only [`route`] is collected: the
//! router's side (the receive ring read, the chain, the transmit), not the
//! sender's or the reader's. It prints the frames the router read; the
//! collected instructions over that count are the router's per frame
//! (system calls counted as the instructions that make them, not the
//! kernel's work).

use std::time::{Duration, Instant};

use dataplane::chain::Chain;
use dataplane::clock::MonotonicClock;
use dataplane::config::RouterConfig;
use dataplane::io::port::Ports;
use dataplane::io::ring::{RingConfig, RingPorts, RxRing, TxRefused, TxRing};
use dataplane::pipeline::Batch;
use dataplane::wire::build::{IpHeader, udp_frame};

/// Reads what the router's ports hold, runs it through the chain and
/// sends it on; returns the frames read.
#[inline(never)]
fn route(ports: &mut RingPorts, chain: &mut Chain, batch: &mut Batch) -> usize {
    let mut n = 0;
    loop {
        batch.clear();
        let got = ports.recv(batch);
        if got == 0 {
            return n;
        }
        n += got;
        let now = ports.now();
        chain.process(batch, now, ports);
        ports.flush();
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let frames: u32 = args.first().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let tx_frames: u32 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(0);
    let cfg = RouterConfig::from_toml_str(
        "[[interfaces]]\nname = \"r0\"\n[[interfaces]]\nname = \"r1\"\n\
         [[wires]]\nfrom = \"r0\"\nto = \"r1\"\n",
        "ring_cg",
    )
    .expect("config");
    let mut chain = Chain::build(&cfg).expect("chain");
    let rc = RingConfig {
        tx_frames,
        ..RingConfig::default()
    };
    let mut ports = RingPorts::open(
        &cfg.port_settings(),
        &[0x7c01, 0x7c02],
        &rc,
        MonotonicClock::new(),
    )
    .expect("the router's ports r0 and r1 (see the docs for the namespace)");
    let mut tx = TxRing::open("a0", 256).expect("sender's ring on a0");
    let mut rx = RxRing::open("b1", true, None, &RingConfig::default()).expect("reader on b1");
    let ip = IpHeader::v4([10, 0, 0, 1], [10, 0, 0, 2], 17);
    let mut batch = Batch::new();
    let (mut read, mut out) = (0usize, 0usize);
    let drain = |rx: &mut RxRing, out: &mut usize| {
        while let Some(f) = rx.next_frame() {
            if !f.outgoing {
                *out += 1;
            }
        }
    };
    for i in 0..frames {
        let f = udp_frame(
            [2, 0, 0, 0, 0, 2],
            [2, 0, 0, 0, 0, 1],
            &ip,
            4000,
            4001,
            &i.to_be_bytes().repeat(5)[..18],
        );
        while tx.push(&f) == Err(TxRefused::Full) {
            tx.kick().expect("kick");
            tx.wait_room(100);
            read += route(&mut ports, &mut chain, &mut batch);
            drain(&mut rx, &mut out);
        }
        if i % 32 == 31 {
            tx.kick().expect("kick");
            read += route(&mut ports, &mut chain, &mut batch);
            drain(&mut rx, &mut out);
        }
    }
    tx.kick().expect("kick");
    let deadline = Instant::now() + Duration::from_secs(20);
    while read < frames as usize && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
        read += route(&mut ports, &mut chain, &mut batch);
        drain(&mut rx, &mut out);
    }
    std::thread::sleep(Duration::from_millis(20));
    drain(&mut rx, &mut out);
    ports.refresh_counters();
    let c = ports.rx_counters();
    println!(
        "{frames} frames sent, {read} read by the router (kernel dropped {}), {out} read back on b1",
        c[0].rx_dropped
    );
}
