//! Tests of the forwarding stage with hand-built frames.

use super::*;
use crate::config::RouterConfig;
use crate::route::{Prefix, Reference, synth};
use crate::wire::build::{self, Addrs, IpHeader};
use crate::wire::{LinkType, parse};

pub(super) const CFG: &str = r#"
[[interfaces]]
name = "a"
addresses = ["10.1.0.1/24", "2001:db8:1::1/64"]
mac = "02:00:00:00:00:0a"
[[interfaces]]
name = "b"
addresses = ["10.2.0.1/24", "2001:db8:2::1/64"]
mac = "02:00:00:00:00:0b"
mtu = 1400
[[interfaces]]
name = "w0"
[[interfaces]]
name = "w1"
[[wires]]
from = "w0"
to = "w1"
[[routes]]
prefix = "10.9.0.0/16"
via = "10.2.0.2"
[[routes]]
prefix = "2001:db8:9::/48"
via = "2001:db8:2::2"
[[neighbours]]
address = "10.2.0.2"
mac = "02:00:00:00:02:02"
[[neighbours]]
address = "2001:db8:2::2"
mac = "02:00:00:00:02:06"
[[neighbours]]
address = "10.1.0.7"
mac = "02:00:00:00:01:07"
"#;

pub(super) const MAC_A: [u8; 6] = [2, 0, 0, 0, 0, 0x0a];
pub(super) const MAC_B: [u8; 6] = [2, 0, 0, 0, 0, 0x0b];
pub(super) const HOST_A: [u8; 6] = [2, 0, 0, 0, 1, 0x07];
pub(super) const GW_B: [u8; 6] = [2, 0, 0, 0, 2, 0x02];
pub(super) const GW_B6: [u8; 6] = [2, 0, 0, 0, 2, 0x06];

pub(super) fn stage() -> Forward {
    let cfg = RouterConfig::from_toml_str(CFG, "test").unwrap();
    Forward::new(&cfg.forward_config(), 0, false)
}

/// Ethernet (optionally one VLAN tag) + IPv4 + UDP with `payload` bytes.
pub(super) fn v4(
    dst_mac: [u8; 6],
    src: [u8; 4],
    dst: [u8; 4],
    ttl: u8,
    payload: usize,
    vlan: bool,
) -> Vec<u8> {
    let ip = IpHeader {
        ttl,
        ident: 0x1234,
        dont_fragment: true,
        ..IpHeader::v4(src, dst, build::PROTO_UDP)
    };
    udp(dst_mac, &ip, payload, vlan)
}

/// Ethernet (VLAN 5 if `vlan`), `ip`, UDP 1000 -> 2000 without a checksum
/// and `payload` bytes counting up.
fn udp(dst_mac: [u8; 6], ip: &IpHeader, payload: usize, vlan: bool) -> Vec<u8> {
    let mut f = Vec::new();
    if vlan {
        build::ethernet(&mut f, dst_mac, HOST_A, 0x8100);
        f.extend_from_slice(&5u16.to_be_bytes());
        f.extend_from_slice(&ip.ethertype().to_be_bytes());
    } else {
        build::ethernet(&mut f, dst_mac, HOST_A, ip.ethertype());
    }
    ip.push(&mut f, build::UDP_LEN + payload);
    build::udp(&mut f, 1000, 2000, payload);
    f.extend((0..payload).map(|i| i as u8));
    f
}

/// Ethernet + IPv6 + UDP with `payload` bytes.
pub(super) fn v6(dst_mac: [u8; 6], src: &str, dst: &str, hops: u8, payload: usize) -> Vec<u8> {
    let ip = IpHeader {
        ttl: hops,
        ..IpHeader::new(
            Addrs::V6 {
                src: src.parse().unwrap(),
                dst: dst.parse().unwrap(),
            },
            build::PROTO_UDP,
        )
    };
    udp(dst_mac, &ip, payload, false)
}

/// One batch of `(ingress, frame)` through the stage (parsed first).
pub(super) fn run(s: &mut Forward, frames: &[(u8, Vec<u8>)]) -> Batch {
    run_at(
        s,
        frames,
        Timestamp::from_nanos(1_000_000),
        &mut Originated::new(),
    )
}

/// [`run`] at `now`, the frames the stage makes into `out` (cleared
/// first).
pub(super) fn run_at(
    s: &mut Forward,
    frames: &[(u8, Vec<u8>)],
    now: Timestamp,
    out: &mut Originated,
) -> Batch {
    let mut b = Batch::new();
    for (port, f) in frames {
        b.push_from(
            Timestamp::ZERO,
            f.len() as u32,
            LinkType::Ethernet,
            *port,
            f,
        );
    }
    for p in b.packets_mut() {
        p.parsed = parse(LinkType::Ethernet, p.data()).ok();
        p.verdict = Verdict::Forward(PortSet::EMPTY);
    }
    out.clear();
    s.process(&mut b, now, out);
    b
}

/// The IPv4 header checksum verifies when recomputed from scratch.
pub(super) fn v4_header_ok(f: &[u8], l3: usize) -> bool {
    let hl = usize::from(f[l3] & 0x0f) * 4;
    checksum::sum(&f[l3..l3 + hl]) == 0xffff
}

#[test]
fn forwards_ipv4_ipv6_and_tagged_frames() {
    let mut s = stage();
    let frames = vec![
        (0, v4(MAC_A, [10, 1, 0, 7], [10, 9, 3, 4], 64, 10, false)),
        (0, v4(MAC_A, [10, 1, 0, 7], [10, 9, 3, 4], 2, 10, true)),
        (0, v6(MAC_A, "2001:db8:1::7", "2001:db8:9:1::5", 64, 10)),
        (1, v4(MAC_B, [10, 9, 0, 1], [10, 1, 0, 7], 255, 10, false)),
    ];
    let b = run(&mut s, &frames);
    let p = b.packets();
    for (i, (l3, ttl)) in [(14, 63), (18, 1)].into_iter().enumerate() {
        let f = p[i].data();
        assert_eq!(p[i].verdict, Verdict::Forward(PortSet::single(1)), "{i}");
        assert_eq!(f[l3 + 8], ttl);
        assert!(v4_header_ok(f, l3), "{i}: checksum");
        assert_eq!(&f[0..6], &GW_B);
        assert_eq!(&f[6..12], &MAC_B);
    }
    let f = p[2].data();
    assert_eq!(p[2].verdict, Verdict::Forward(PortSet::single(1)));
    assert_eq!(f[14 + 7], 63);
    assert_eq!((&f[0..6], &f[6..12]), (&GW_B6[..], &MAC_B[..]));
    // Back to a host on a connected prefix, out of port 0.
    let f = p[3].data();
    assert_eq!(p[3].verdict, Verdict::Forward(PortSet::single(0)));
    assert_eq!((f[22], &f[0..6], &f[6..12]), (254, &HOST_A[..], &MAC_A[..]));
    assert!(v4_header_ok(f, 14));
    // The payload is untouched.
    assert_eq!(&f[42..], &frames[3].1[42..]);
    assert_eq!(s.counters().forwarded, 4);
}

#[test]
fn drops_by_reason_and_consumes_what_is_for_the_router() {
    let mut s = stage();
    let mut arp = vec![0xff; 6];
    arp.extend_from_slice(&HOST_A);
    arp.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
    arp.extend_from_slice(&HOST_A);
    arp.extend_from_slice(&[10, 1, 0, 7, 0, 0, 0, 0, 0, 0, 10, 1, 0, 1]);
    let frames = vec![
        (0, v4(MAC_A, [10, 1, 0, 7], [10, 7, 0, 1], 64, 10, false)), // no route
        (0, v4(MAC_A, [10, 1, 0, 7], [10, 9, 0, 1], 1, 10, false)),  // ttl
        (0, v4(MAC_A, [10, 1, 0, 7], [10, 9, 0, 1], 0, 10, false)),  // ttl
        (0, v4(MAC_A, [10, 1, 0, 7], [10, 9, 0, 1], 9, 1373, false)), // 1401 > 1400
        (0, v4(MAC_A, [10, 1, 0, 7], [10, 9, 0, 1], 9, 1372, false)), // fits
        (0, v4(MAC_A, [10, 1, 0, 7], [10, 2, 0, 99], 9, 10, false)), // unknown neighbour: held
        (0, v4(MAC_B, [10, 1, 0, 7], [10, 9, 0, 1], 9, 10, false)),  // other host
        (0, v4(MAC_A, [10, 1, 0, 7], [10, 2, 0, 1], 9, 10, false)),  // local
        (0, v4(MAC_A, [10, 1, 0, 7], [10, 1, 0, 255], 9, 10, false)), // directed broadcast
        (0, arp),
        (2, v4(MAC_A, [10, 1, 0, 7], [10, 9, 0, 1], 1, 10, false)), // wire port: left alone
        (1, v6(MAC_B, "2001:db8:2::7", "2001:db8:7::1", 64, 10)),   // no route
    ];
    let b = run(&mut s, &frames);
    let v: Vec<Verdict> = b.packets().iter().map(|p| p.verdict).collect();
    use DropReason as R;
    assert_eq!(
        v,
        vec![
            Verdict::Drop(R::NoRoute),
            Verdict::Drop(R::TtlExpired),
            Verdict::Drop(R::TtlExpired),
            Verdict::Drop(R::TooBig),
            Verdict::Forward(PortSet::single(1)),
            Verdict::Held,
            Verdict::Drop(R::OtherHost),
            Verdict::Consumed,
            Verdict::Consumed,
            Verdict::Consumed,
            Verdict::Forward(PortSet::EMPTY),
            Verdict::Drop(R::NoRoute),
        ]
    );
    let c = s.counters();
    assert_eq!(
        (
            c.no_route,
            c.ttl_expired,
            c.too_big,
            c.held,
            c.other_host,
            c.local,
            c.forwarded
        ),
        (2, 2, 1, 1, 1, 3, 1)
    );
    // The wire port's frame is as it came.
    assert_eq!(b.packets()[10].data(), &frames[10].1[..]);
}

/// The routes chosen for random destinations on a random table are the
/// reference's, IPv4 and IPv6: every next hop is a gateway whose MAC
/// names its id, so the frame's new destination MAC says which route won.
#[test]
fn routes_match_the_reference_on_a_random_table() {
    const HOPS: u32 = 8;
    let gw = |id: u32| IpAddr::V4(Ipv4Addr::new(10, 1, 0, 10 + id as u8));
    let mac = |id: u32| MacAddr([2, 0, 0, 0, 0x77, id as u8]);
    let cfg = RouterConfig::from_toml_str(CFG, "test").unwrap();
    let mut fib = Fib::build(&cfg.forward_config(), 0);
    fib.v4 = crate::route::Lpm4::new();
    fib.v6 = crate::route::Lpm6::new();
    fib.hops = (0..HOPS)
        .map(|id| NextHop::Gateway {
            port: (id % 2) as u8,
            via: gw(id),
        })
        .collect();
    let mut r4 = Reference::new();
    let mut r6 = Reference::new();
    let t4 = synth::bgp_v4(3000, 7);
    let t6 = synth::bgp_v6(1000, 8);
    for &(p, nh) in &t4 {
        fib.v4.insert(p, nh % HOPS);
        r4.insert(p, nh % HOPS);
    }
    for &(p, nh) in &t6 {
        fib.v6.insert(p, nh % HOPS);
        r6.insert(p, nh % HOPS);
    }
    // A default route for IPv4 only: IPv6 misses stay misses.
    let d = Prefix::new(0u32, 0).unwrap();
    fib.v4.insert(d, 3);
    r4.insert(d, 3);
    let neighbours = Neighbours::new((0..HOPS).map(|id| (gw(id), mac(id))), 1);
    let mut s = Forward::with_fib(fib, neighbours, false);
    // Unicast destinations (multicast and broadcast are not routed).
    let a4: Vec<u32> = synth::addresses(&t4, 400, 0.8, 9)
        .into_iter()
        .filter(|&a| a < 0xe000_0000)
        .collect();
    let a6 = synth::addresses(&t6, 400, 0.8, 10);
    let (mut hits, mut misses) = (0, 0);
    for chunk in a4.chunks(BATCH_SIZE) {
        let frames: Vec<_> = chunk
            .iter()
            .map(|&a| (0u8, v4(MAC_A, [10, 1, 0, 7], a.to_be_bytes(), 64, 4, false)))
            .collect();
        let b = run(&mut s, &frames);
        for (p, &a) in b.packets().iter().zip(chunk) {
            let want = r4.lookup(a).unwrap().nexthop;
            assert_eq!(&p.data()[0..6], &mac(want).0, "{}", Ipv4Addr::from(a));
            assert_eq!(
                p.verdict,
                Verdict::Forward(PortSet::single((want % 2) as u8))
            );
            hits += 1;
        }
    }
    for chunk in a6.chunks(BATCH_SIZE) {
        let frames: Vec<_> = chunk
            .iter()
            .map(|&a| {
                let d = Ipv6Addr::from(a).to_string();
                (0u8, v6(MAC_A, "2001:db8:1::7", &d, 64, 4))
            })
            .collect();
        let b = run(&mut s, &frames);
        for (p, &a) in b.packets().iter().zip(chunk) {
            match r6.lookup(a) {
                Some(m) => {
                    assert_eq!(&p.data()[0..6], &mac(m.nexthop).0);
                    hits += 1;
                }
                None => {
                    assert_eq!(p.verdict, Verdict::Drop(DropReason::NoRoute));
                    misses += 1;
                }
            }
        }
    }
    assert!(hits > 600 && misses > 10, "{hits} {misses}");
}
