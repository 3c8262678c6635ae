//! `pipeline/router/*`: the router's whole chain, every stage on, driven by
//! the worker loop over memory ports on one thread: what one worker of
//! `dataplane run` or `traffic-gen replay` costs per packet once the
//! frames are in memory.
//!
//! The router is traffic-gen's built-in one (`default-router.toml`): r-a
//! and r-b are Icarus edges (a filter inserted on arrival, stripped on
//! departure), r-b is shaped to 20 Mbit/s behind SFB, r-c faces other
//! routers; multicast, heavy flows and Icarus are on. The case `default`
//! runs it as it is; the case `core` runs the same router with no Icarus
//! edge (a core router: every stage on, the filter only checked and
//! updated where a packet carries one), which shows what the edges'
//! insertion and stripping cost. The case `digest` runs `default` with
//! the digest stage on as well ([`DIGEST`]: a window a second sized for
//! 100,000 packets at 0.1%, 256 KiB, 60 kept), which shows what
//! traceback costs the chain.
//!
//! The traffic ([`mix64`]): 2^16 frames of 64 bytes (the Icarus ones 92:
//! their option makes them longer), in capture time 12 us apart, so the
//! shaped port is offered about 1.4 times its rate and SFB marks and drops:
//!
//! * 70% UDP from r-a to hosts behind r-b, 4096 flows drawn Zipf (s = 1.1),
//!   a quarter IPv6, 30% of the flows ECT(0);
//! * 10% the other way, r-b -> r-a;
//! * 8% multicast from r-a: to 239.1.1.1 (static behind r-b), to 16 groups
//!   joined on r-c (IGMPv3 reports, the first frames), and to groups
//!   nobody joined;
//! * 12% from r-c: UDP carrying an Icarus filter after 1..=10 hops (as
//!   `synth --kind icarus` builds them for node 42), 10% of them on a loop.
//!
//! A timed call rewinds the memory ports (times shifted to follow the last
//! pass) and steps the worker until they are empty; per call: every frame
//! copied into a batch, parsed, through every stage, every copy sent to the
//! memory ports (counted). ns per packet.
//!
//! Two more cases run the same router with routed ports
//! ([`routed_router`]: addresses, routes to the mix's prefixes, static
//! neighbours, the frames addressed to the ports' MACs), so that the
//! forwarding stage is in the chain: `routed`, and `routed-peering`, the
//! same with the protocol between routers on (`[peering]`, two peers, the
//! chain joined to a control path that receives nothing): what the
//! protocol costs per packet when no message arrives.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use criterion::{Criterion, Throughput};
use dataplane::chain::Chain;
use dataplane::clock::Timestamp;
use dataplane::config::{DigestSection, RouterConfig};
use dataplane::io::memory::MemoryPorts;
use dataplane::runtime::Worker;
use dataplane::wire::LinkType;
use dataplane::wire::build::{self, Addrs, IpHeader, udp_checksum};
use rand::SeedableRng;
use rand::rngs::StdRng;
use traffic_gen::replay::default_router;
use traffic_gen::synth::icarus::{IcarusSynth, IcarusSynthConfig};
use traffic_gen::synth::mcast::{Ctl, control_frame};
use traffic_gen::synth::{SYNTH_START_NS, ZipfFlows};

use crate::measure::{Figure, figure};

/// Frames per pass.
pub const FRAMES: usize = 1 << 16;
/// Capture time between frames.
pub const GAP_NS: u64 = 12_000;
/// Zipf flows of the unicast traffic.
pub const FLOWS: u32 = 4096;
const SEED: u64 = 0xb10b;

/// SplitMix64: the mix's draws.
fn draw(s: &mut u64) -> u64 {
    kernels::splitmix64(s)
}

/// A 64-byte UDP frame (60 bytes of headers and payload, the rest the
/// FCS a capture leaves out: 60 bytes captured).
fn udp64(addrs: Addrs, tos: u8, sport: u16, dport: u16) -> Vec<u8> {
    let ip = IpHeader {
        tos,
        ..IpHeader::new(addrs, 17)
    };
    let mut f = Vec::with_capacity(64);
    build::ethernet(
        &mut f,
        [2, 0, 0, 0, 0, 2],
        [2, 0, 0, 0, 0, 1],
        ip.ethertype(),
    );
    let payload = 60usize.saturating_sub(14 + ip.len() + 8).max(8);
    ip.push(&mut f, 8 + payload);
    let l4 = f.len();
    build::udp(&mut f, sport, dport, payload);
    f.resize(l4 + 8 + payload, 0);
    udp_checksum(&mut f, l4, &ip);
    f
}

/// The frames of [`mix64`]: (ingress port, bytes).
pub fn mix64() -> Vec<(u8, Vec<u8>)> {
    let mut s = SEED;
    let mut rng = StdRng::seed_from_u64(SEED);
    let zipf = ZipfFlows::new(FLOWS, 1.1).expect("constant Zipf parameters");
    let mut icarus = IcarusSynth::new(IcarusSynthConfig {
        node_id: 42,
        loop_fraction: 0.1,
        packets: FRAMES as u64,
        seed: SEED,
        ..IcarusSynthConfig::default()
    })
    .expect("constant Icarus parameters");
    let joined: Vec<Ipv4Addr> = (1..=16).map(|i| Ipv4Addr::new(239, 2, 0, i)).collect();
    let mut out = Vec::with_capacity(FRAMES);
    for g in &joined {
        out.push((2, control_frame(IpAddr::V4(*g), Ctl::Join, 1, 2)));
    }
    while out.len() < FRAMES {
        let r = draw(&mut s) % 100;
        let flow = zipf.sample(&mut rng);
        let v6 = flow % 4 == 3;
        let ect = (flow.wrapping_mul(0x9e37_79b9) >> 16) % 10 < 3;
        let addrs = if v6 {
            Addrs::V6 {
                src: Ipv6Addr::new(0x2001, 0xdb8, 0xa, 0, 0, 0, 0, flow as u16),
                dst: Ipv6Addr::new(0x2001, 0xdb8, 0xb, 0, 0, 0, 0, flow as u16),
            }
        } else {
            Addrs::V4 {
                src: Ipv4Addr::from(0x0a00_0000 | flow),
                dst: Ipv4Addr::from(0xac10_0000 | flow),
            }
        };
        let sport = 1024 + (flow % 50_000) as u16;
        let frame = match r {
            0..70 => (0, udp64(addrs, if ect { 0x02 } else { 0 }, sport, 443)),
            70..80 => (1, udp64(addrs.reversed(), 0, 443, sport)),
            80..88 => {
                let g = match draw(&mut s) % 4 {
                    0 | 1 => Ipv4Addr::new(239, 1, 1, 1),
                    2 => joined[(draw(&mut s) % 16) as usize],
                    _ => Ipv4Addr::new(239, 3, 0, (draw(&mut s) % 8) as u8 + 1),
                };
                let addrs = Addrs::V4 {
                    src: Ipv4Addr::new(10, 0, 0, 1),
                    dst: g,
                };
                (0, udp64(addrs, 0, 5000, 5001))
            }
            _ => match icarus.next().expect("an Icarus frame") {
                Some(p) => (2, p.frame.to_vec()),
                None => continue,
            },
        };
        out.push(frame);
    }
    out
}

/// The `[digest]` table of the `digest` case: `window_ms = 1000`,
/// `windows = 60`, `packet_rate = 100000`, `false_positive_rate = 0.001`.
pub const DIGEST: DigestSection = DigestSection {
    window_ms: 1000,
    windows: 60,
    packet_rate: 100_000,
    false_positive_rate: Some(0.001),
    bits_per_packet: None,
    seed: None,
    query_clients: Vec::new(),
    query_rate: 50,
    query_burst: 50,
};

/// The built-in router with the digest stage on ([`DIGEST`]), seeded.
pub fn router_digest() -> RouterConfig {
    let mut cfg = default_router();
    cfg.digest = Some(DIGEST);
    cfg.fill_seeds(1);
    cfg
}

/// The built-in router, seeded; without Icarus edges for `core`.
pub fn router(core: bool) -> RouterConfig {
    let mut cfg = default_router();
    cfg.fill_seeds(1);
    if core && let Some(ic) = &mut cfg.icarus {
        ic.insert_on.clear();
        ic.strip_on.clear();
    }
    cfg
}

/// A worker of `router(core)` with [`mix64`] queued in its memory ports.
pub fn worker(core: bool, frames: &[(u8, Vec<u8>)]) -> Worker<MemoryPorts> {
    worker_for(&router(core), frames)
}

/// A worker running `cfg` (the built-in router, changed) over memory ports
/// holding `frames`, as [`worker`] does.
///
/// # Panics
/// If the chain cannot be built from `cfg`.
pub fn worker_for(cfg: &RouterConfig, frames: &[(u8, Vec<u8>)]) -> Worker<MemoryPorts> {
    let chain = Chain::build(cfg).expect("the router builds");
    // The chain writes into the lent frames (TTL, ECN marks): every pass
    // reads them as queued again.
    let mut io = MemoryPorts::new(cfg.interfaces.len()).repeatable();
    for (i, (port, f)) in frames.iter().enumerate() {
        let ts = Timestamp::from_nanos(SYNTH_START_NS + i as u64 * GAP_NS);
        io.push(ts, *port, LinkType::Ethernet, f.len() as u32, f);
    }
    Worker::new(0, chain, io, None)
}

/// One pass: the frames again, after the previous pass in capture time;
/// returns the packets the chain has received so far.
pub fn pass(w: &mut Worker<MemoryPorts>) -> u64 {
    w.io_mut().rewind(FRAMES as u64 * GAP_NS);
    while w.step() {}
    w.chain().counters().received
}

/// The MAC of routed port `port` in [`routed_router`].
fn port_mac(port: u8) -> [u8; 6] {
    [2, 0x62, 0x70, 0, 0, port + 1]
}

/// The built-in router with its three ports routed: r-a 10.200.1.1/24,
/// r-b 10.200.2.1/24 (shaped, SFB), r-c 10.200.3.1/24; the mix's
/// destinations routed as the wires sent them (172.16/12 and 2001:db8:b::
/// out of r-b, 10/8 and 2001:db8:a:: out of r-a, the rest out of r-c), to
/// static neighbours; with `peering`, `[peering]` and a peer on each of
/// r-b and r-c.
pub fn routed_router(peering: bool) -> RouterConfig {
    let mut text = String::from(
        r#"
[[interfaces]]
name = "r-a"
addresses = ["10.200.1.1/24", "2001:db8:c8:1::1/64"]
mac = "02:62:70:00:00:01"
[[interfaces]]
name = "r-b"
addresses = ["10.200.2.1/24", "2001:db8:c8:2::1/64"]
mac = "02:62:70:00:00:02"
multicast_groups = ["239.1.1.1"]
[interfaces.egress]
rate_bps = 20_000_000
burst_bytes = 15140
limit = 1000
[interfaces.sfb]
seed = 1
[[interfaces]]
name = "r-c"
addresses = ["10.200.3.1/24", "2001:db8:c8:3::1/64"]
mac = "02:62:70:00:00:03"
[[routes]]
prefix = "172.16.0.0/12"
via = "10.200.2.2"
[[routes]]
prefix = "2001:db8:b::/48"
via = "2001:db8:c8:2::2"
[[routes]]
prefix = "10.0.0.0/8"
via = "10.200.1.2"
[[routes]]
prefix = "2001:db8:a::/48"
via = "2001:db8:c8:1::2"
[[routes]]
prefix = "0.0.0.0/0"
via = "10.200.3.2"
[[routes]]
prefix = "::/0"
via = "2001:db8:c8:3::2"
[[neighbours]]
address = "10.200.1.2"
mac = "02:00:00:00:01:02"
[[neighbours]]
address = "2001:db8:c8:1::2"
mac = "02:00:00:00:01:02"
[[neighbours]]
address = "10.200.2.2"
mac = "02:00:00:00:02:02"
[[neighbours]]
address = "2001:db8:c8:2::2"
mac = "02:00:00:00:02:02"
[[neighbours]]
address = "10.200.3.2"
mac = "02:00:00:00:03:02"
[[neighbours]]
address = "2001:db8:c8:3::2"
mac = "02:00:00:00:03:02"
[multicast]
seed = 1
[heavy]
threshold = { share = 0.01 }
epoch_ms = 1000
seed = 1
report = "-"
[icarus]
node_id = 42
"#,
    );
    if peering {
        text.push_str(
            r#"
[peering]
router_id = 1
[peering.flows]
[[peers]]
interface = "r-b"
address = "10.200.2.2"
[[peers]]
interface = "r-c"
address = "10.200.3.2"
"#,
        );
    }
    let mut cfg =
        RouterConfig::from_toml_str(&text, "routed bench router").expect("a valid router");
    cfg.fill_seeds(1);
    cfg
}

/// [`mix64`] addressed to [`routed_router`]'s ports: every unicast frame's
/// destination MAC is its ingress port's.
pub fn routed_mix(frames: &[(u8, Vec<u8>)]) -> Vec<(u8, Vec<u8>)> {
    frames
        .iter()
        .map(|(port, f)| {
            let mut f = f.clone();
            if f.len() >= 6 && f[0] & 1 == 0 {
                f[..6].copy_from_slice(&port_mac(*port));
            }
            (*port, f)
        })
        .collect()
}

/// A worker of [`routed_router`] over `frames`; with `peering`, its chain
/// joined to a control path whose channels stay empty (the senders are
/// returned, to keep them open).
pub fn routed_worker(
    peering: bool,
    frames: &[(u8, Vec<u8>)],
) -> (Worker<MemoryPorts>, Option<PeeringEnds>) {
    let cfg = routed_router(peering);
    let mut w = worker_for(&cfg, frames);
    let ends = peering.then(|| {
        let (in_tx, in_rx) = crossbeam_channel::bounded(4096);
        let (out_tx, out_rx) = crossbeam_channel::bounded(4096);
        let (remote_tx, remote_rx) = crossbeam_channel::unbounded();
        let tap = dataplane::peer::PeerTap {
            udp_port: dataplane::peer::DEFAULT_UDP_PORT,
            inbound: in_tx,
            outbound: out_rx,
        };
        assert!(w.chain_mut().attach_peering(tap, remote_rx));
        PeeringEnds {
            _inbound: in_rx,
            _outbound: out_tx,
            _remote: remote_tx,
        }
    });
    (w, ends)
}

/// The control path's ends a bench holds open.
#[derive(Debug)]
pub struct PeeringEnds {
    _inbound: crossbeam_channel::Receiver<dataplane::peer::Inbound>,
    _outbound: crossbeam_channel::Sender<dataplane::peer::Datagram>,
    _remote: crossbeam_channel::Sender<Vec<Option<kernels::bloom::Bloom>>>,
}

/// The cases on the built-in router: name and router.
fn cases() -> [(&'static str, RouterConfig); 3] {
    [
        ("default", router(false)),
        ("core", router(true)),
        ("digest", router_digest()),
    ]
}

/// Criterion: `pipeline/router/default`, `core`, `digest`, `routed` and
/// `routed-peering`.
pub fn register(c: &mut Criterion) {
    let frames = mix64();
    let mut g = c.benchmark_group("pipeline/router");
    g.sample_size(10);
    g.throughput(Throughput::Elements(FRAMES as u64));
    for (name, cfg) in cases() {
        let mut w = worker_for(&cfg, &frames);
        g.bench_function(name, |b| b.iter(|| pass(black_box(&mut w))));
    }
    let routed = routed_mix(&frames);
    for (name, peering) in [("routed", false), ("routed-peering", true)] {
        let (mut w, _ends) = routed_worker(peering, &routed);
        g.bench_function(name, |b| b.iter(|| pass(black_box(&mut w))));
    }
    g.finish();
}

/// The report's figures for every case; the built-in router's cases
/// (default, core, digest) measured in turn, then the routed pair in turn,
/// three times each, each figure the median of its three, so that the
/// cases compared share the machine's state.
pub fn report() -> Vec<Figure> {
    let frames = mix64();
    let mut workers: Vec<_> = cases()
        .into_iter()
        .map(|(name, cfg)| (name, worker_for(&cfg, &frames)))
        .collect();
    let mut rounds: Vec<Vec<Figure>> = vec![Vec::new(); workers.len()];
    for _ in 0..3 {
        for (i, (name, w)) in workers.iter_mut().enumerate() {
            rounds[i].push(figure(format!("pipeline/router/{name}"), FRAMES, || {
                pass(w)
            }));
        }
    }
    let mut out: Vec<Figure> = rounds
        .into_iter()
        .map(|mut r| {
            r.sort_by(|a, b| a.ns_per_item.total_cmp(&b.ns_per_item));
            r.swap_remove(1)
        })
        .collect();
    let routed = routed_mix(&frames);
    let (mut off, _) = routed_worker(false, &routed);
    let (mut on, _ends) = routed_worker(true, &routed);
    let (mut t_off, mut t_on) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        t_off.push(figure("pipeline/router/routed", FRAMES, || pass(&mut off)));
        t_on.push(figure("pipeline/router/routed-peering", FRAMES, || {
            pass(&mut on)
        }));
    }
    for mut t in [t_off, t_on] {
        t.sort_by(|a, b| a.ns_per_item.total_cmp(&b.ns_per_item));
        out.push(t.swap_remove(1));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every stage does work on the mix, and every packet and copy is
    /// accounted for over several passes.
    #[test]
    fn mix_exercises_every_stage() {
        let frames = mix64();
        assert_eq!(frames.len(), FRAMES);
        for (core, digest) in [(false, false), (true, false), (false, true)] {
            let mut w = if digest {
                worker_for(&router_digest(), &frames)
            } else {
                worker(core, &frames)
            };
            for k in 1..=3 {
                assert_eq!(pass(&mut w), k * FRAMES as u64);
            }
            let s = dataplane::runtime::Stats::of(&w, None);
            assert!(s.pipeline.is_consistent(), "{s:?}");
            let ic = s.icarus.unwrap();
            assert!(ic.loops_detected > 0, "{ic:?}");
            assert_eq!(ic.inserted > 0, !core, "{ic:?}");
            let mc = s.multicast.unwrap();
            assert!(
                mc.copies > 0 && mc.suppressed > 0 && mc.joins == 16,
                "{mc:?}"
            );
            let b = s.interfaces[1].port.sfb.clone().unwrap().counters;
            assert!(b.marked > 0 && b.earlydrop > 0, "{b:?}");
            assert!(s.heavy.unwrap().detections > 0);
            if digest {
                let d = s.digest.unwrap();
                assert_eq!(d.recorded + d.skipped, s.pipeline.forwarded, "{d:?}");
                assert!(d.recorded > 0 && d.windows > 0, "{d:?}");
            }
        }
    }

    /// The routed router forwards the mix by its routes (most of it out of
    /// r-b, as the wires sent it), and with peering on (no message
    /// arriving) gives the same verdicts.
    #[test]
    fn the_routed_router_forwards_the_mix_with_and_without_peering() {
        let frames = routed_mix(&mix64());
        let mut counts = Vec::new();
        for peering in [false, true] {
            let (mut w, _ends) = routed_worker(peering, &frames);
            pass(&mut w);
            let s = dataplane::runtime::Stats::of(&w, None);
            assert!(s.pipeline.is_consistent(), "{s:?}");
            let f = s.forward.unwrap();
            assert!(f.forwarded > FRAMES as u64 / 2, "{f:?}");
            counts.push((s.pipeline.clone(), f.forwarded, f.peer_messages));
        }
        assert_eq!(counts[0], counts[1]);
    }
}
