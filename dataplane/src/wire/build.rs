//! Builders for the headers the project emits: Ethernet II, ARP, IPv4 and
//! IPv6, UDP, TCP, ICMPv4 and ICMPv6 (neighbour discovery, MLD), IGMP.
//! Each header is written here once, with its checksum; the forwarding
//! stage's answers (ICMP errors, echo replies, ARP, neighbour discovery),
//! the peering datagrams, traffic-gen's synthetic workloads and the tests
//! build their frames from these (as smoltcp's `Repr::emit` is the one
//! place a header is written).
//!
//! Every builder appends to the caller's buffer, so a stream that clears
//! and refills one buffer allocates nothing per frame once it has grown.
//! A checksum that covers bytes written after the header (UDP, TCP,
//! ICMPv6 over a payload) is set by a separate call once they are there.
//!
//! ```
//! use std::net::Ipv4Addr;
//! use dataplane::wire::build::{self, Addrs, IpHeader, PROTO_UDP, UDP_LEN};
//! use dataplane::wire::{LinkType, parse};
//!
//! let ip = IpHeader::new(
//!     Addrs::V4 { src: Ipv4Addr::new(10, 0, 0, 1), dst: Ipv4Addr::new(10, 0, 0, 2) },
//!     PROTO_UDP,
//! );
//! let mut f = Vec::new();
//! build::ethernet(&mut f, [2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1], ip.ethertype());
//! ip.push(&mut f, UDP_LEN + 4);
//! let l4 = f.len();
//! build::udp(&mut f, 1234, 53, 4);
//! f.extend_from_slice(b"ping");
//! build::udp_checksum(&mut f, l4, &ip);
//! let p = parse(LinkType::Ethernet, &f).unwrap();
//! assert_eq!(p.flow.unwrap().to_string(), "10.0.0.1:1234 -> 10.0.0.2:53 udp");
//! ```

use std::net::{Ipv4Addr, Ipv6Addr};

use super::checksum;

/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;

/// IP protocol number of ICMP.
pub const PROTO_ICMP: u8 = 1;
/// IP protocol number of IGMP.
pub const PROTO_IGMP: u8 = 2;
/// IP protocol number of TCP.
pub const PROTO_TCP: u8 = 6;
/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;
/// IPv6 next header of ICMPv6.
pub const PROTO_ICMPV6: u8 = 58;

/// Ethernet II header length.
pub const ETH_LEN: usize = 14;
/// UDP header length.
pub const UDP_LEN: usize = 8;
/// TCP header length without options.
pub const TCP_LEN: usize = 20;
/// ARP message length (Ethernet / IPv4).
pub const ARP_LEN: usize = 28;
/// The shortest Ethernet frame (without FCS); [`pad`] fills up to it.
pub const MIN_FRAME: usize = 60;

/// ECN codepoint ECT(0) in the low two bits of the IPv4 TOS byte or the
/// IPv6 traffic class (RFC 3168).
pub const ECT0: u8 = 0b10;

/// TCP flags ACK and PSH.
pub const TCP_PSH_ACK: u8 = 0x18;
/// TCP flag ACK.
pub const TCP_ACK: u8 = 0x10;

/// Appends an Ethernet II header.
pub fn ethernet(out: &mut Vec<u8>, dst: [u8; 6], src: [u8; 6], ethertype: u16) {
    out.extend_from_slice(&dst);
    out.extend_from_slice(&src);
    out.extend_from_slice(&ethertype.to_be_bytes());
}

/// Pads `out` with zeros to the shortest Ethernet frame ([`MIN_FRAME`]).
pub fn pad(out: &mut Vec<u8>) {
    if out.len() < MIN_FRAME {
        out.resize(MIN_FRAME, 0);
    }
}

/// A packet's source and destination, of one family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Addrs {
    /// IPv4.
    V4 {
        /// Source.
        src: Ipv4Addr,
        /// Destination.
        dst: Ipv4Addr,
    },
    /// IPv6.
    V6 {
        /// Source.
        src: Ipv6Addr,
        /// Destination.
        dst: Ipv6Addr,
    },
}

impl Addrs {
    /// The same addresses the other way round.
    pub fn reversed(self) -> Addrs {
        match self {
            Addrs::V4 { src, dst } => Addrs::V4 { src: dst, dst: src },
            Addrs::V6 { src, dst } => Addrs::V6 { src: dst, dst: src },
        }
    }
}

/// The fields of an IPv4 or IPv6 header that the project sets; the rest
/// are zero (IPv6 flow label, IPv4 fragment offset, options).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpHeader {
    /// Addresses (and so the version).
    pub addrs: Addrs,
    /// Protocol (IPv4) or next header (IPv6).
    pub proto: u8,
    /// TTL or hop limit.
    pub ttl: u8,
    /// IPv4 TOS byte or IPv6 traffic class: DSCP and ECN.
    pub tos: u8,
    /// IPv4 identification (ignored for IPv6).
    pub ident: u16,
    /// IPv4 don't-fragment flag (ignored for IPv6).
    pub dont_fragment: bool,
}

impl IpHeader {
    /// A header for `proto` between `addrs`: TTL 64, TOS 0, identification
    /// 0, fragmentation allowed.
    pub fn new(addrs: Addrs, proto: u8) -> IpHeader {
        IpHeader {
            addrs,
            proto,
            ttl: 64,
            tos: 0,
            ident: 0,
            dont_fragment: false,
        }
    }

    /// An IPv4 header for `proto` from `src` to `dst` ([`new`](Self::new)'s
    /// defaults).
    pub fn v4(src: impl Into<Ipv4Addr>, dst: impl Into<Ipv4Addr>, proto: u8) -> IpHeader {
        IpHeader::new(
            Addrs::V4 {
                src: src.into(),
                dst: dst.into(),
            },
            proto,
        )
    }

    /// The EtherType of this version.
    pub fn ethertype(&self) -> u16 {
        match self.addrs {
            Addrs::V4 { .. } => ETHERTYPE_IPV4,
            Addrs::V6 { .. } => ETHERTYPE_IPV6,
        }
    }

    /// The header's length: 20 or 40.
    pub fn len(&self) -> usize {
        match self.addrs {
            Addrs::V4 { .. } => 20,
            Addrs::V6 { .. } => 40,
        }
    }

    /// Never: a header has a length. (For clippy's `len_without_is_empty`.)
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Appends the header of a packet carrying `payload_len` bytes, with
    /// the IPv4 header checksum; `false` (nothing appended) when the packet
    /// does not fit its length field.
    pub fn try_push(&self, out: &mut Vec<u8>, payload_len: usize) -> bool {
        match self.addrs {
            Addrs::V4 { src, dst } => {
                let Ok(total) = u16::try_from(20 + payload_len) else {
                    return false;
                };
                let start = out.len();
                let flags: u8 = if self.dont_fragment { 0x40 } else { 0 };
                out.extend_from_slice(&[0x45, self.tos]);
                out.extend_from_slice(&total.to_be_bytes());
                out.extend_from_slice(&self.ident.to_be_bytes());
                out.extend_from_slice(&[flags, 0, self.ttl, self.proto, 0, 0]);
                out.extend_from_slice(&src.octets());
                out.extend_from_slice(&dst.octets());
                let sum = !checksum::sum(&out[start..]);
                out[start + 10..start + 12].copy_from_slice(&sum.to_be_bytes());
            }
            Addrs::V6 { src, dst } => {
                let Ok(len) = u16::try_from(payload_len) else {
                    return false;
                };
                out.extend_from_slice(&[0x60 | self.tos >> 4, self.tos << 4, 0, 0]);
                out.extend_from_slice(&len.to_be_bytes());
                out.extend_from_slice(&[self.proto, self.ttl]);
                out.extend_from_slice(&src.octets());
                out.extend_from_slice(&dst.octets());
            }
        }
        true
    }

    /// [`try_push`](Self::try_push) for callers whose lengths are their
    /// own (the generators).
    ///
    /// # Panics
    /// If the packet's length does not fit its length field.
    pub fn push(&self, out: &mut Vec<u8>, payload_len: usize) {
        assert!(
            self.try_push(out, payload_len),
            "IP packet with {payload_len} bytes of payload over its length field"
        );
    }

    /// The Internet checksum of the upper-layer `segment` (its checksum
    /// field zero) under this header's pseudo-header, ready to store. UDP
    /// stores a result of 0 as `0xffff` ([`udp_checksum`]).
    pub fn l4_checksum(&self, segment: &[u8]) -> u16 {
        let addrs = match self.addrs {
            Addrs::V4 { src, dst } => {
                u64::from(checksum::sum(&src.octets())) + u64::from(checksum::sum(&dst.octets()))
            }
            Addrs::V6 { src, dst } => {
                u64::from(checksum::sum(&src.octets())) + u64::from(checksum::sum(&dst.octets()))
            }
        };
        let acc = addrs
            + u64::from(self.proto)
            + segment.len() as u64
            + u64::from(checksum::sum(segment));
        !checksum::fold(acc)
    }
}

/// Appends a UDP header for `payload_len` bytes of payload, checksum zero
/// (set it with [`udp_checksum`] once the payload is there).
///
/// # Panics
/// If the datagram does not fit its length field.
pub fn udp(out: &mut Vec<u8>, sport: u16, dport: u16, payload_len: usize) {
    let len = u16::try_from(UDP_LEN + payload_len).expect("UDP datagram over 65535 bytes");
    out.extend_from_slice(&sport.to_be_bytes());
    out.extend_from_slice(&dport.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
}

/// A whole frame: Ethernet II from `src_mac` to `dst_mac`, the IP header
/// `ip` (its protocol UDP), a UDP header from `sport` to `dport` and
/// `payload`. The UDP checksum stays zero (none, as IPv4 allows; set it
/// with [`udp_checksum`] where it matters).
///
/// # Panics
/// If the datagram does not fit its length fields.
pub fn udp_frame(
    dst_mac: [u8; 6],
    src_mac: [u8; 6],
    ip: &IpHeader,
    sport: u16,
    dport: u16,
    payload: &[u8],
) -> Vec<u8> {
    let mut f = Vec::with_capacity(ETH_LEN + ip.len() + UDP_LEN + payload.len());
    ethernet(&mut f, dst_mac, src_mac, ip.ethertype());
    ip.push(&mut f, UDP_LEN + payload.len());
    udp(&mut f, sport, dport, payload.len());
    f.extend_from_slice(payload);
    f
}

/// Stores the checksum of the UDP datagram at `frame[l4..]` (to the end of
/// the frame) under `ip` (a result of 0 is sent as `0xffff`, RFC 768).
pub fn udp_checksum(frame: &mut [u8], l4: usize, ip: &IpHeader) {
    frame[l4 + 6..l4 + 8].fill(0);
    let sum = match ip.l4_checksum(&frame[l4..]) {
        0 => 0xffff,
        s => s,
    };
    frame[l4 + 6..l4 + 8].copy_from_slice(&sum.to_be_bytes());
}

/// Appends a 20-byte TCP header (no options), window 65535, checksum zero
/// (set it with [`tcp_checksum`] once the payload is there).
pub fn tcp(out: &mut Vec<u8>, sport: u16, dport: u16, seq: u32, ack: u32, flags: u8) {
    out.extend_from_slice(&sport.to_be_bytes());
    out.extend_from_slice(&dport.to_be_bytes());
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend_from_slice(&ack.to_be_bytes());
    out.extend_from_slice(&[0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
}

/// Stores the checksum of the TCP segment at `frame[l4..]` (to the end of
/// the frame) under `ip`.
pub fn tcp_checksum(frame: &mut [u8], l4: usize, ip: &IpHeader) {
    frame[l4 + 16..l4 + 18].fill(0);
    let sum = ip.l4_checksum(&frame[l4..]);
    frame[l4 + 16..l4 + 18].copy_from_slice(&sum.to_be_bytes());
}

/// Appends an ICMPv4 message: type, code, the second word `rest`, then
/// `body`, with its checksum.
pub fn icmpv4(out: &mut Vec<u8>, ty: u8, code: u8, rest: u32, body: &[u8]) {
    let at = out.len();
    out.extend_from_slice(&[ty, code, 0, 0]);
    out.extend_from_slice(&rest.to_be_bytes());
    out.extend_from_slice(body);
    icmpv4_checksum(out, at);
}

/// Stores the checksum of the ICMPv4 (or IGMP: the same sum) message at
/// `frame[at..]` (to the end of the frame).
pub fn icmpv4_checksum(frame: &mut [u8], at: usize) {
    frame[at + 2..at + 4].fill(0);
    let sum = !checksum::sum(&frame[at..]);
    frame[at + 2..at + 4].copy_from_slice(&sum.to_be_bytes());
}

/// Appends an ICMPv6 message: type, code, the first body word `rest`, then
/// `body`, with its checksum under `ip`'s pseudo-header.
pub fn icmpv6(out: &mut Vec<u8>, ip: &IpHeader, ty: u8, code: u8, rest: u32, body: &[u8]) {
    let at = out.len();
    out.extend_from_slice(&[ty, code, 0, 0]);
    out.extend_from_slice(&rest.to_be_bytes());
    out.extend_from_slice(body);
    icmpv6_checksum(out, at, ip);
}

/// Stores the checksum of the ICMPv6 message at `frame[at..]` (to the end
/// of the frame) under `ip`'s pseudo-header.
pub fn icmpv6_checksum(frame: &mut [u8], at: usize, ip: &IpHeader) {
    frame[at + 2..at + 4].fill(0);
    let sum = ip.l4_checksum(&frame[at..]);
    frame[at + 2..at + 4].copy_from_slice(&sum.to_be_bytes());
}

/// ARP operation: request.
pub const ARP_REQUEST: u16 = 1;
/// ARP operation: reply.
pub const ARP_REPLY: u16 = 2;

/// Appends an Ethernet / IPv4 ARP message (RFC 826): operation, sender
/// and target hardware and protocol addresses.
pub fn arp(out: &mut Vec<u8>, op: u16, sha: [u8; 6], spa: Ipv4Addr, tha: [u8; 6], tpa: Ipv4Addr) {
    out.extend_from_slice(&[0, 1, 8, 0, 6, 4]);
    out.extend_from_slice(&op.to_be_bytes());
    out.extend_from_slice(&sha);
    out.extend_from_slice(&spa.octets());
    out.extend_from_slice(&tha);
    out.extend_from_slice(&tpa.octets());
}

/// ICMPv6 type: neighbour solicitation.
pub const ND_SOLICIT: u8 = 135;
/// ICMPv6 type: neighbour advertisement.
pub const ND_ADVERT: u8 = 136;
/// Neighbour discovery option: source link-layer address.
pub const ND_OPT_SOURCE_LL: u8 = 1;
/// Neighbour discovery option: target link-layer address.
pub const ND_OPT_TARGET_LL: u8 = 2;
/// The length of a solicitation or advertisement with one link-layer
/// address option.
pub const ND_LEN: usize = 32;

/// Appends a neighbour solicitation or advertisement (RFC 4861 4.3, 4.4)
/// of [`ND_LEN`] bytes: `kind`, the flags byte (R, S, O in its top bits),
/// the target, and one link-layer address option `opt` carrying `mac`;
/// with its checksum under `ip` (whose payload length is [`ND_LEN`]).
pub fn nd(
    out: &mut Vec<u8>,
    ip: &IpHeader,
    kind: u8,
    flags: u8,
    target: Ipv6Addr,
    opt: u8,
    mac: [u8; 6],
) {
    let at = out.len();
    out.extend_from_slice(&[kind, 0, 0, 0, flags, 0, 0, 0]);
    out.extend_from_slice(&target.octets());
    out.extend_from_slice(&[opt, 1]);
    out.extend_from_slice(&mac);
    icmpv6_checksum(out, at, ip);
}

/// IGMPv2 type: membership report (RFC 2236).
pub const IGMP_V2_REPORT: u8 = 0x16;
/// IGMPv2 type: leave group.
pub const IGMP_V2_LEAVE: u8 = 0x17;
/// IGMPv3 type: membership report (RFC 3376).
pub const IGMP_V3_REPORT: u8 = 0x22;
/// MLDv1 type: multicast listener report (RFC 2710).
pub const MLD_V1_REPORT: u8 = 131;
/// MLDv1 type: multicast listener done.
pub const MLD_V1_DONE: u8 = 132;
/// MLDv2 type: multicast listener report (RFC 3810).
pub const MLD_V2_REPORT: u8 = 143;
/// Group record type (IGMPv3, MLDv2): CHANGE_TO_INCLUDE_MODE.
pub const RECORD_TO_INCLUDE: u8 = 3;
/// Group record type (IGMPv3, MLDv2): CHANGE_TO_EXCLUDE_MODE.
pub const RECORD_TO_EXCLUDE: u8 = 4;

/// Appends an IGMPv1/v2 message (8 bytes: type, max response time 0,
/// checksum, group), with its checksum.
pub fn igmp_v2(out: &mut Vec<u8>, ty: u8, group: Ipv4Addr) {
    let at = out.len();
    out.extend_from_slice(&[ty, 0, 0, 0]);
    out.extend_from_slice(&group.octets());
    icmpv4_checksum(out, at);
}

/// Appends an IGMPv3 report with one group record of `record` type, no
/// sources and no auxiliary data (16 bytes), with its checksum.
pub fn igmp_v3_report(out: &mut Vec<u8>, record: u8, group: Ipv4Addr) {
    let at = out.len();
    out.extend_from_slice(&[IGMP_V3_REPORT, 0, 0, 0, 0, 0, 0, 1]);
    out.extend_from_slice(&[record, 0, 0, 0]);
    out.extend_from_slice(&group.octets());
    icmpv4_checksum(out, at);
}

/// Appends an MLDv1 message (24 bytes: type, code 0, checksum, maximum
/// response delay 0, reserved, group), with its checksum under `ip`.
pub fn mld_v1(out: &mut Vec<u8>, ip: &IpHeader, ty: u8, group: Ipv6Addr) {
    let at = out.len();
    out.extend_from_slice(&[ty, 0, 0, 0, 0, 0, 0, 0]);
    out.extend_from_slice(&group.octets());
    icmpv6_checksum(out, at, ip);
}

/// Appends an MLDv2 report with one multicast address record of `record`
/// type, no sources (28 bytes), with its checksum under `ip`.
pub fn mld_v2_report(out: &mut Vec<u8>, ip: &IpHeader, record: u8, group: Ipv6Addr) {
    let at = out.len();
    out.extend_from_slice(&[MLD_V2_REPORT, 0, 0, 0, 0, 0, 0, 1]);
    out.extend_from_slice(&[record, 0, 0, 0]);
    out.extend_from_slice(&group.octets());
    icmpv6_checksum(out, at, ip);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{LinkType, parse};

    fn v4() -> Addrs {
        Addrs::V4 {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 1, 0, 1),
        }
    }

    fn v6() -> Addrs {
        Addrs::V6 {
            src: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1),
            dst: Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1),
        }
    }

    #[test]
    fn emit_ipv4_udp() {
        let ip = IpHeader {
            ttl: 255,
            dont_fragment: true,
            ident: 0x1234,
            tos: ECT0,
            ..IpHeader::new(v4(), PROTO_UDP)
        };
        let mut f = vec![0xa5; 3];
        ip.push(&mut f, UDP_LEN + 2);
        let l4 = f.len();
        udp(&mut f, 7, 9, 2);
        f.extend_from_slice(&[0xbe, 0xef]);
        udp_checksum(&mut f, l4, &ip);
        #[rustfmt::skip]
        let want: [u8; 30] = [
            0x45, 0x02, 0x00, 0x1e, // version, IHL, TOS (ECT(0)), total length 30
            0x12, 0x34, 0x40, 0x00, // identification, DF
            0xff, 0x11, 0x00, 0x00, // TTL 255, UDP, checksum (below)
            10, 0, 0, 1, 10, 1, 0, 1, // addresses
            0x00, 0x07, 0x00, 0x09, 0x00, 0x0a, 0x00, 0x00, // UDP 7 -> 9, length 10
            0xbe, 0xef,
        ];
        assert_eq!(&f[..3], &[0xa5; 3], "nothing before the header touched");
        assert_eq!(&f[3..13], &want[..10]);
        assert_eq!(&f[15..29], &want[12..26]);
        assert_eq!(&f[31..], &want[28..]);
        assert_eq!(checksum::sum(&f[3..23]), 0xffff, "header checksum");
        assert_eq!(ip.l4_checksum(&f[l4..]), 0, "UDP checksum");
    }

    #[test]
    fn emit_ipv6_traffic_class_and_length() {
        let ip = IpHeader {
            tos: 0xb8 | ECT0,
            ttl: 255,
            ..IpHeader::new(v6(), PROTO_ICMPV6)
        };
        let mut f = Vec::new();
        ip.push(&mut f, ND_LEN);
        assert_eq!(&f[..8], &[0x6b, 0xa0, 0, 0, 0, 32, 58, 255]);
        assert_eq!(f.len(), 40);
    }

    #[test]
    fn udp_frame_is_its_headers_and_payload() {
        for ip in [
            IpHeader::v4([10, 0, 0, 1], [10, 1, 0, 1], PROTO_UDP),
            IpHeader::new(v6(), PROTO_UDP),
        ] {
            let f = udp_frame([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1], &ip, 7, 9, b"hello");
            let mut want = Vec::new();
            ethernet(
                &mut want,
                [2, 0, 0, 0, 0, 2],
                [2, 0, 0, 0, 0, 1],
                ip.ethertype(),
            );
            ip.push(&mut want, UDP_LEN + 5);
            udp(&mut want, 7, 9, 5);
            want.extend_from_slice(b"hello");
            assert_eq!(f, want);
            assert_eq!(f.len(), ETH_LEN + ip.len() + UDP_LEN + 5);
            let p = parse(LinkType::Ethernet, &f).expect("parses");
            assert!(p.flow.is_some());
        }
    }

    #[test]
    fn impossible_len_is_refused_not_written() {
        let mut f = vec![0xa5];
        assert!(!IpHeader::new(v4(), PROTO_UDP).try_push(&mut f, 65_516));
        assert!(!IpHeader::new(v6(), PROTO_UDP).try_push(&mut f, 65_536));
        assert_eq!(f, [0xa5]);
        assert!(IpHeader::new(v4(), PROTO_UDP).try_push(&mut f, 65_515));
    }

    #[test]
    fn every_header_parses_and_its_checksum_verifies() {
        for addrs in [v4(), v6()] {
            for proto in [PROTO_UDP, PROTO_TCP] {
                let ip = IpHeader::new(addrs, proto);
                let l4_len = if proto == PROTO_UDP { UDP_LEN } else { TCP_LEN } + 5;
                let mut f = Vec::new();
                ethernet(
                    &mut f,
                    [2, 0, 0, 0, 0, 2],
                    [2, 0, 0, 0, 0, 1],
                    ip.ethertype(),
                );
                ip.push(&mut f, l4_len);
                let l4 = f.len();
                if proto == PROTO_UDP {
                    udp(&mut f, 1, 2, 5);
                    f.extend_from_slice(b"hello");
                    udp_checksum(&mut f, l4, &ip);
                } else {
                    tcp(&mut f, 1, 2, 3, 4, TCP_ACK);
                    f.extend_from_slice(b"hello");
                    tcp_checksum(&mut f, l4, &ip);
                }
                let p = parse(LinkType::Ethernet, &f).expect("parses");
                assert_eq!(p.l3_offset, ETH_LEN);
                assert!(p.flow.is_some());
                assert_eq!(ip.l4_checksum(&f[l4..]), 0);
            }
        }
    }

    #[test]
    fn icmp_igmp_and_mld_checksums_verify() {
        let mut m = Vec::new();
        icmpv4(&mut m, 3, 3, 0, b"quoted");
        assert_eq!(checksum::sum(&m), 0xffff);
        m.clear();
        igmp_v2(&mut m, IGMP_V2_REPORT, Ipv4Addr::new(239, 1, 2, 3));
        assert_eq!(m.len(), 8);
        assert_eq!(checksum::sum(&m), 0xffff);
        m.clear();
        igmp_v3_report(&mut m, RECORD_TO_EXCLUDE, Ipv4Addr::new(239, 1, 2, 3));
        assert_eq!(m.len(), 16);
        assert_eq!(checksum::sum(&m), 0xffff);

        let group: Ipv6Addr = "ff0e::1".parse().unwrap();
        let ip = IpHeader::new(v6(), PROTO_ICMPV6);
        for (msg, len) in [(0, 24), (1, 28), (2, 32), (3, 12)] {
            m.clear();
            match msg {
                0 => mld_v1(&mut m, &ip, MLD_V1_REPORT, group),
                1 => mld_v2_report(&mut m, &ip, RECORD_TO_INCLUDE, group),
                2 => nd(&mut m, &ip, ND_SOLICIT, 0, group, ND_OPT_SOURCE_LL, [2; 6]),
                _ => icmpv6(&mut m, &ip, 128, 0, 0x0001_0002, b"ping"),
            }
            assert_eq!(m.len(), len);
            assert_eq!(ip.l4_checksum(&m), 0, "message {msg}");
        }
    }

    #[test]
    fn arp_and_padding() {
        let mut f = Vec::new();
        ethernet(&mut f, [0xff; 6], [2, 0, 0, 0, 0, 1], ETHERTYPE_ARP);
        arp(
            &mut f,
            ARP_REQUEST,
            [2, 0, 0, 0, 0, 1],
            Ipv4Addr::new(10, 0, 0, 1),
            [0; 6],
            Ipv4Addr::new(10, 0, 0, 2),
        );
        assert_eq!(f.len(), ETH_LEN + ARP_LEN);
        pad(&mut f);
        assert_eq!(f.len(), MIN_FRAME);
        let p = parse(LinkType::Ethernet, &f).expect("parses");
        assert!(!p.is_ip());
    }
}
