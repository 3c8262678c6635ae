//! Frame builders and a batch runner shared by the multicast tests: IPv4
//! and IPv6 in Ethernet, UDP data to a group, IGMPv2 and MLDv1 messages
//! with good checksums.

#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use dataplane::clock::Timestamp;
use dataplane::pipeline::{Batch, Pipeline, Verdict};
use dataplane::wire::LinkType;
use dataplane::wire::build::{self, Addrs, IpHeader};

/// The multicast MAC the test frames go to and the host they come from.
const GROUP_MAC: [u8; 6] = [0x01, 0x00, 0x5e, 0, 0, 1];
const HOST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 1];

/// An IP packet of `ip` (TTL or hop limit 1) carrying `payload`, in
/// Ethernet to a multicast MAC.
fn packet(ip: IpHeader, payload: &[u8]) -> Vec<u8> {
    let ip = IpHeader { ttl: 1, ..ip };
    let mut f = Vec::new();
    build::ethernet(&mut f, GROUP_MAC, HOST_MAC, ip.ethertype());
    ip.push(&mut f, payload.len());
    f.extend_from_slice(payload);
    f
}

/// An IPv4 packet (header checksum set) in Ethernet.
pub fn ipv4(proto: u8, src: Ipv4Addr, dst: Ipv4Addr, payload: &[u8]) -> Vec<u8> {
    packet(IpHeader::v4(src, dst, proto), payload)
}

/// An IPv6 packet (hop limit 1) in Ethernet.
pub fn ipv6(next: u8, src: Ipv6Addr, dst: Ipv6Addr, payload: &[u8]) -> Vec<u8> {
    packet(IpHeader::new(Addrs::V6 { src, dst }, next), payload)
}

/// A UDP datagram to `group` (either family).
pub fn data_frame(group: IpAddr) -> Vec<u8> {
    let udp = [0x13, 0x88, 0x13, 0x88, 0, 12, 0, 0, 1, 2, 3, 4];
    match group {
        IpAddr::V4(g) => ipv4(17, Ipv4Addr::new(10, 0, 0, 1), g, &udp),
        IpAddr::V6(g) => ipv6(17, "2001:db8::1".parse().unwrap(), g, &udp),
    }
}

/// An IGMPv2 message of `kind` (0x16 report, 0x17 leave) for `group`.
pub fn igmp_v2(kind: u8, group: Ipv4Addr) -> Vec<u8> {
    let mut m = Vec::new();
    build::igmp_v2(&mut m, kind, group);
    let dst = if kind == 0x17 {
        Ipv4Addr::new(224, 0, 0, 2)
    } else {
        group
    };
    ipv4(2, Ipv4Addr::new(10, 0, 0, 9), dst, &m)
}

/// An MLDv1 message of `kind` (131 report, 132 done) for `group`.
pub fn mld_v1(kind: u8, group: Ipv6Addr) -> Vec<u8> {
    let src: Ipv6Addr = "fe80::9".parse().unwrap();
    let dst: Ipv6Addr = if kind == 132 {
        "ff02::2".parse().unwrap()
    } else {
        group
    };
    let ip = IpHeader {
        ttl: 1,
        ..IpHeader::new(Addrs::V6 { src, dst }, 58)
    };
    let mut m = Vec::new();
    build::mld_v1(&mut m, &ip, kind, group);
    ipv6(58, src, dst, &m)
}

/// A batch of `frames` (ingress port, frame), all stamped `now`.
pub fn batch(frames: &[(u8, Vec<u8>)], now: u64) -> Batch {
    let mut b = Batch::new();
    for (ing, f) in frames {
        b.push_from(
            Timestamp::from_nanos(now),
            f.len() as u32,
            LinkType::Ethernet,
            *ing,
            f,
        );
    }
    b
}

/// The verdicts of a processed batch.
pub fn verdicts(b: &Batch) -> Vec<Verdict> {
    b.packets().iter().map(|p| p.verdict).collect()
}

/// Runs `frames` (ingress port, frame), all stamped `now`, through `p` as
/// one batch; returns the verdicts.
pub fn run(p: &mut Pipeline, frames: &[(u8, Vec<u8>)], now: u64) -> Vec<Verdict> {
    let mut b = batch(frames, now);
    p.process(&mut b, Timestamp::from_nanos(now));
    verdicts(&b)
}

/// IGMPv3 group records of a report fit in one 1500-byte frame.
pub const IGMPV3_RECORDS_PER_FRAME: usize = (1500 - 20 - 8) / 8;

/// An IGMPv3 report (to 224.0.0.22) joining `groups` with
/// `MODE_IS_EXCLUDE({})` records, one per group.
pub fn igmp_v3_report(groups: &[Ipv4Addr]) -> Vec<u8> {
    let mut m = vec![0x22, 0, 0, 0, 0, 0];
    m.extend_from_slice(&(groups.len() as u16).to_be_bytes());
    for g in groups {
        m.extend_from_slice(&[2, 0, 0, 0]);
        m.extend_from_slice(&g.octets());
    }
    build::icmpv4_checksum(&mut m, 0);
    ipv4(
        2,
        Ipv4Addr::new(10, 0, 0, 9),
        Ipv4Addr::new(224, 0, 0, 22),
        &m,
    )
}

/// MLDv2 address records of a report fit in one 1500-byte frame.
pub const MLDV2_RECORDS_PER_FRAME: usize = (1500 - 40 - 8) / 20;

/// An MLDv2 report (to ff02::16) joining `groups` with
/// `MODE_IS_EXCLUDE({})` records, one per group.
pub fn mld_v2_report(groups: &[Ipv6Addr]) -> Vec<u8> {
    let src: Ipv6Addr = "fe80::9".parse().unwrap();
    let dst: Ipv6Addr = "ff02::16".parse().unwrap();
    let mut m = vec![143, 0, 0, 0, 0, 0];
    m.extend_from_slice(&(groups.len() as u16).to_be_bytes());
    for g in groups {
        m.extend_from_slice(&[2, 0, 0, 0]);
        m.extend_from_slice(&g.octets());
    }
    build::icmpv6_checksum(&mut m, 0, &IpHeader::new(Addrs::V6 { src, dst }, 58));
    ipv6(58, src, dst, &m)
}
