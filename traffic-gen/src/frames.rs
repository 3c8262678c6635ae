//! Frame builders shared by the synthetic workloads: Ethernet II, IPv4 and
//! IPv6 headers (the IPv4 header checksum included), UDP and TCP headers,
//! and upper-layer checksums over the pseudo-header.
//!
//! Every builder appends to the caller's buffer, so a stream that clears
//! and refills one buffer allocates nothing per frame once it has grown.

use std::net::{Ipv4Addr, Ipv6Addr};

use dataplane::wire::checksum;

/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;

/// IP protocol number of TCP.
pub const PROTO_TCP: u8 = 6;
/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;

/// Ethernet II header length.
pub const ETH_LEN: usize = 14;
/// UDP header length.
pub const UDP_LEN: usize = 8;
/// TCP header length without options.
pub const TCP_LEN: usize = 20;

/// ECN codepoint ECT(0) in the low two bits of the IPv4 TOS byte or the
/// IPv6 traffic class (RFC 3168).
pub const ECT0: u8 = 0b10;

/// Appends an Ethernet II header.
pub fn push_eth(out: &mut Vec<u8>, dst: [u8; 6], src: [u8; 6], ethertype: u16) {
    out.extend_from_slice(&dst);
    out.extend_from_slice(&src);
    out.extend_from_slice(&ethertype.to_be_bytes());
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

/// The fields of an IPv4 or IPv6 header that the workloads set; the rest
/// are zero (IPv6 flow label, IPv4 fragment offset).
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
    /// the IPv4 header checksum.
    ///
    /// # Panics
    /// If the packet's length does not fit its length field.
    pub fn push(&self, out: &mut Vec<u8>, payload_len: usize) {
        match self.addrs {
            Addrs::V4 { src, dst } => {
                let start = out.len();
                let total = u16::try_from(20 + payload_len).expect("IPv4 packet over 65535 bytes");
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
                let len = u16::try_from(payload_len).expect("IPv6 payload over 65535 bytes");
                out.extend_from_slice(&[0x60 | self.tos >> 4, self.tos << 4, 0, 0]);
                out.extend_from_slice(&len.to_be_bytes());
                out.extend_from_slice(&[self.proto, self.ttl]);
                out.extend_from_slice(&src.octets());
                out.extend_from_slice(&dst.octets());
            }
        }
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
pub fn push_udp(out: &mut Vec<u8>, sport: u16, dport: u16, payload_len: usize) {
    let len = u16::try_from(UDP_LEN + payload_len).expect("UDP datagram over 65535 bytes");
    out.extend_from_slice(&sport.to_be_bytes());
    out.extend_from_slice(&dport.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
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

/// TCP flags ACK and PSH.
pub const TCP_PSH_ACK: u8 = 0x18;
/// TCP flag ACK.
pub const TCP_ACK: u8 = 0x10;

/// Appends a 20-byte TCP header (no options), window 65535, checksum zero
/// (set it with [`tcp_checksum`] once the payload is there).
pub fn push_tcp(out: &mut Vec<u8>, sport: u16, dport: u16, seq: u32, ack: u32, flags: u8) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::wire::{LinkType, parse};

    #[test]
    fn headers_parse_and_checksums_verify() {
        let v4 = Addrs::V4 {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 1, 0, 1),
        };
        let v6 = Addrs::V6 {
            src: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1),
            dst: Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1),
        };
        for addrs in [v4, v6] {
            for proto in [PROTO_UDP, PROTO_TCP] {
                let mut ip = IpHeader::new(addrs, proto);
                ip.tos = ECT0;
                let l4_len = if proto == PROTO_UDP { UDP_LEN } else { TCP_LEN } + 5;
                let mut f = Vec::new();
                push_eth(
                    &mut f,
                    [2, 0, 0, 0, 0, 2],
                    [2, 0, 0, 0, 0, 1],
                    ip.ethertype(),
                );
                ip.push(&mut f, l4_len);
                let l4 = f.len();
                if proto == PROTO_UDP {
                    push_udp(&mut f, 1, 2, 5);
                    f.extend_from_slice(b"hello");
                    udp_checksum(&mut f, l4, &ip);
                } else {
                    push_tcp(&mut f, 1, 2, 3, 4, TCP_ACK);
                    f.extend_from_slice(b"hello");
                    tcp_checksum(&mut f, l4, &ip);
                }
                let p = parse(LinkType::Ethernet, &f).expect("parses");
                assert_eq!(p.l3_offset, ETH_LEN);
                assert!(p.flow.is_some());
                // A correct checksum makes the whole sum, pseudo-header
                // included, 0xffff: checking it again gives 0.
                assert_eq!(ip.l4_checksum(&f[l4..]), 0);
                if let Addrs::V4 { .. } = addrs {
                    assert_eq!(checksum::sum(&f[14..34]), 0xffff);
                    assert_eq!(f[15], ECT0);
                } else {
                    assert_eq!(f[15] >> 4, ECT0);
                }
            }
        }
    }
}
