//! Frame builders and a batch runner shared by the multicast tests: IPv4
//! and IPv6 in Ethernet, UDP data to a group, IGMPv2 and MLDv1 messages
//! with good checksums.

#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use dataplane::clock::Timestamp;
use dataplane::pipeline::{Batch, Pipeline, Verdict};
use dataplane::wire::{LinkType, checksum};

/// An Ethernet header to a multicast MAC.
pub fn eth(ethertype: u16) -> Vec<u8> {
    let mut f = vec![0x01, 0x00, 0x5e, 0, 0, 1, 0x02, 0, 0, 0, 0, 1];
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

/// An IPv4 packet (header checksum set) in Ethernet.
pub fn ipv4(proto: u8, src: Ipv4Addr, dst: Ipv4Addr, payload: &[u8]) -> Vec<u8> {
    let mut f = eth(0x0800);
    let len = 20 + payload.len() as u16;
    let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 1, proto, 0, 0];
    ip[2..4].copy_from_slice(&len.to_be_bytes());
    ip.extend_from_slice(&src.octets());
    ip.extend_from_slice(&dst.octets());
    let sum = !checksum::sum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(payload);
    f
}

/// An IPv6 packet (hop limit 1) in Ethernet.
pub fn ipv6(next: u8, src: Ipv6Addr, dst: Ipv6Addr, payload: &[u8]) -> Vec<u8> {
    let mut f = eth(0x86dd);
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    f.extend_from_slice(&[next, 1]);
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&dst.octets());
    f.extend_from_slice(payload);
    f
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
    let mut m = vec![kind, 0, 0, 0];
    m.extend_from_slice(&group.octets());
    let sum = !checksum::sum(&m);
    m[2..4].copy_from_slice(&sum.to_be_bytes());
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
    let mut m = vec![kind, 0, 0, 0, 0, 0, 0, 0];
    m.extend_from_slice(&group.octets());
    let len = m.len() as u64;
    let acc = u64::from(checksum::sum(&src.octets()))
        + u64::from(checksum::sum(&dst.octets()))
        + len
        + 58
        + u64::from(checksum::sum(&m));
    let sum = !checksum::fold(acc);
    m[2..4].copy_from_slice(&sum.to_be_bytes());
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
    let sum = !checksum::sum(&m);
    m[2..4].copy_from_slice(&sum.to_be_bytes());
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
    let acc = u64::from(checksum::sum(&src.octets()))
        + u64::from(checksum::sum(&dst.octets()))
        + m.len() as u64
        + 58
        + u64::from(checksum::sum(&m));
    let sum = !checksum::fold(acc);
    m[2..4].copy_from_slice(&sum.to_be_bytes());
    ipv6(58, src, dst, &m)
}
