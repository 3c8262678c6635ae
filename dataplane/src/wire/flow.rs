//! Flow keys: the 5-tuple of a packet and its fixed-width word forms for the
//! batch hash kernels.
//!
//! * [`Flow4::words4`] packs an IPv4 key into `[u32; 4]`:
//!   `[src, dst, (src_port << 16) | dst_port, protocol]` (13 bytes of information).
//! * [`Flow6::words10`] packs an IPv6 key into `[u32; 10]`:
//!   `[src (4 words), dst (4 words), (src_port << 16) | dst_port, protocol]`.
//! * [`Flow4::words10`] maps an IPv4 key to the same width through the
//!   IPv4-mapped IPv6 form (`::ffff:a.b.c.d`, RFC 4291 §2.5.5.2), so a mixed
//!   batch can be hashed at one width: the words of an IPv4 key are exactly
//!   those of the IPv6 key between the mapped addresses. Such IPv6 packets are
//!   not supposed to appear on the wire, and treating them as the same flow
//!   as their IPv4 twin is harmless.
//!
//! Address words are big-endian (network order) reads of the address bytes,
//! so `10.0.0.1` is `0x0a00_0001`.
//!
//! [`FlowKey::encode`] gives a fixed 38-byte serialised form and
//! [`FlowKey::decode`] reads it back.

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::IpProtocol;

/// An IPv4 5-tuple.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Flow4 {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Source port (0 when the protocol has none or for non-first fragments).
    pub src_port: u16,
    /// Destination port (0 when the protocol has none or for non-first fragments).
    pub dst_port: u16,
    /// Upper-layer protocol.
    pub protocol: IpProtocol,
}

/// An IPv6 5-tuple.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Flow6 {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// Source port (0 when the protocol has none or for non-first fragments).
    pub src_port: u16,
    /// Destination port (0 when the protocol has none or for non-first fragments).
    pub dst_port: u16,
    /// Upper-layer protocol (after the extension headers).
    pub protocol: IpProtocol,
}

/// The flow key of an IP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FlowKey {
    /// An IPv4 flow.
    V4(Flow4),
    /// An IPv6 flow.
    V6(Flow6),
}

#[inline]
fn ports_word(src_port: u16, dst_port: u16) -> u32 {
    (u32::from(src_port) << 16) | u32::from(dst_port)
}

#[inline]
fn v6_words(a: &Ipv6Addr) -> [u32; 4] {
    let o = a.octets();
    [
        u32::from_be_bytes([o[0], o[1], o[2], o[3]]),
        u32::from_be_bytes([o[4], o[5], o[6], o[7]]),
        u32::from_be_bytes([o[8], o[9], o[10], o[11]]),
        u32::from_be_bytes([o[12], o[13], o[14], o[15]]),
    ]
}

impl Flow4 {
    /// `[src, dst, (src_port << 16) | dst_port, protocol]`.
    #[inline]
    pub fn words4(&self) -> [u32; 4] {
        [
            u32::from(self.src),
            u32::from(self.dst),
            ports_word(self.src_port, self.dst_port),
            u32::from(u8::from(self.protocol)),
        ]
    }

    /// The ten-word form through IPv4-mapped addresses:
    /// `[0, 0, 0xffff, src, 0, 0, 0xffff, dst, ports, protocol]`.
    #[inline]
    pub fn words10(&self) -> [u32; 10] {
        let w = self.words4();
        [0, 0, 0xffff, w[0], 0, 0, 0xffff, w[1], w[2], w[3]]
    }

    /// The key of the reverse direction.
    pub fn reversed(&self) -> Flow4 {
        Flow4 {
            src: self.dst,
            dst: self.src,
            src_port: self.dst_port,
            dst_port: self.src_port,
            protocol: self.protocol,
        }
    }
}

impl Flow6 {
    /// `[src (4 words), dst (4 words), (src_port << 16) | dst_port, protocol]`.
    #[inline]
    pub fn words10(&self) -> [u32; 10] {
        let s = v6_words(&self.src);
        let d = v6_words(&self.dst);
        [
            s[0],
            s[1],
            s[2],
            s[3],
            d[0],
            d[1],
            d[2],
            d[3],
            ports_word(self.src_port, self.dst_port),
            u32::from(u8::from(self.protocol)),
        ]
    }

    /// The key of the reverse direction.
    pub fn reversed(&self) -> Flow6 {
        Flow6 {
            src: self.dst,
            dst: self.src,
            src_port: self.dst_port,
            dst_port: self.src_port,
            protocol: self.protocol,
        }
    }
}

/// Length of [`FlowKey::encode`]'s output.
pub const ENCODED_LEN: usize = 38;

impl FlowKey {
    /// The key of a flow from `src:src_port` to `dst:dst_port` over
    /// `protocol`; `None` when the addresses are of two families.
    pub fn new(
        src: IpAddr,
        dst: IpAddr,
        protocol: IpProtocol,
        src_port: u16,
        dst_port: u16,
    ) -> Option<FlowKey> {
        match (src, dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => Some(FlowKey::V4(Flow4 {
                src,
                dst,
                src_port,
                dst_port,
                protocol,
            })),
            (IpAddr::V6(src), IpAddr::V6(dst)) => Some(FlowKey::V6(Flow6 {
                src,
                dst,
                src_port,
                dst_port,
                protocol,
            })),
            _ => None,
        }
    }

    /// The four-word form of an IPv4 key; `None` for IPv6.
    #[inline]
    pub fn words4(&self) -> Option<[u32; 4]> {
        match self {
            FlowKey::V4(k) => Some(k.words4()),
            FlowKey::V6(_) => None,
        }
    }

    /// The ten-word form (IPv4 keys through IPv4-mapped addresses).
    #[inline]
    pub fn words10(&self) -> [u32; 10] {
        match self {
            FlowKey::V4(k) => k.words10(),
            FlowKey::V6(k) => k.words10(),
        }
    }

    /// Source address.
    pub fn src(&self) -> IpAddr {
        match self {
            FlowKey::V4(k) => IpAddr::V4(k.src),
            FlowKey::V6(k) => IpAddr::V6(k.src),
        }
    }

    /// Destination address.
    pub fn dst(&self) -> IpAddr {
        match self {
            FlowKey::V4(k) => IpAddr::V4(k.dst),
            FlowKey::V6(k) => IpAddr::V6(k.dst),
        }
    }

    /// `(source port, destination port)`.
    pub fn ports(&self) -> (u16, u16) {
        match self {
            FlowKey::V4(k) => (k.src_port, k.dst_port),
            FlowKey::V6(k) => (k.src_port, k.dst_port),
        }
    }

    /// Upper-layer protocol.
    pub fn protocol(&self) -> IpProtocol {
        match self {
            FlowKey::V4(k) => k.protocol,
            FlowKey::V6(k) => k.protocol,
        }
    }

    /// The key of the reverse direction.
    pub fn reversed(&self) -> FlowKey {
        match self {
            FlowKey::V4(k) => FlowKey::V4(k.reversed()),
            FlowKey::V6(k) => FlowKey::V6(k.reversed()),
        }
    }

    /// A fixed 38-byte serialised form: version (4 or 6), protocol, source
    /// port and destination port (big-endian), then the 16-byte source and
    /// destination addresses (IPv4 in IPv4-mapped form).
    pub fn encode(&self) -> [u8; ENCODED_LEN] {
        let (version, src, dst) = match self {
            FlowKey::V4(k) => (4u8, k.src.to_ipv6_mapped(), k.dst.to_ipv6_mapped()),
            FlowKey::V6(k) => (6u8, k.src, k.dst),
        };
        let (sp, dp) = self.ports();
        let mut out = [0u8; ENCODED_LEN];
        out[0] = version;
        out[1] = self.protocol().into();
        out[2..4].copy_from_slice(&sp.to_be_bytes());
        out[4..6].copy_from_slice(&dp.to_be_bytes());
        out[6..22].copy_from_slice(&src.octets());
        out[22..38].copy_from_slice(&dst.octets());
        out
    }

    /// Reads [`encode`](Self::encode)'s form back; `None` for an unknown
    /// version byte or an IPv4 key whose addresses are not IPv4-mapped.
    pub fn decode(bytes: &[u8; ENCODED_LEN]) -> Option<FlowKey> {
        let protocol = IpProtocol::from(bytes[1]);
        let src_port = u16::from_be_bytes([bytes[2], bytes[3]]);
        let dst_port = u16::from_be_bytes([bytes[4], bytes[5]]);
        let mut s = [0u8; 16];
        let mut d = [0u8; 16];
        s.copy_from_slice(&bytes[6..22]);
        d.copy_from_slice(&bytes[22..38]);
        let (src, dst) = (Ipv6Addr::from(s), Ipv6Addr::from(d));
        match bytes[0] {
            4 => Some(FlowKey::V4(Flow4 {
                src: src.to_ipv4_mapped()?,
                dst: dst.to_ipv4_mapped()?,
                src_port,
                dst_port,
                protocol,
            })),
            6 => Some(FlowKey::V6(Flow6 {
                src,
                dst,
                src_port,
                dst_port,
                protocol,
            })),
            _ => None,
        }
    }
}

impl From<Flow4> for FlowKey {
    fn from(k: Flow4) -> FlowKey {
        FlowKey::V4(k)
    }
}

impl From<Flow6> for FlowKey {
    fn from(k: Flow6) -> FlowKey {
        FlowKey::V6(k)
    }
}

/// A flow as both families print it: `src:sport -> dst:dport proto` (the
/// addresses in brackets where `bracketed`, as IPv6 writes them beside a
/// port), ICMP with its type and code from the destination port field
/// (`src -> dst icmp 8/0`), other protocols without ports unless they
/// carry some.
fn write_flow(
    f: &mut fmt::Formatter<'_>,
    (src, dst): (impl fmt::Display, impl fmt::Display),
    bracketed: bool,
    protocol: IpProtocol,
    (src_port, dst_port): (u16, u16),
) -> fmt::Result {
    let p = protocol;
    let ports = match protocol {
        IpProtocol::Icmp | IpProtocol::Icmpv6 => {
            let [t, c] = dst_port.to_be_bytes();
            return write!(f, "{src} -> {dst} {p} {t}/{c}");
        }
        IpProtocol::Tcp | IpProtocol::Udp => true,
        _ => src_port != 0 || dst_port != 0,
    };
    match (ports, bracketed) {
        (false, _) => write!(f, "{src} -> {dst} {p}"),
        (true, false) => write!(f, "{src}:{src_port} -> {dst}:{dst_port} {p}"),
        (true, true) => write!(f, "[{src}]:{src_port} -> [{dst}]:{dst_port} {p}"),
    }
}

impl fmt::Display for Flow4 {
    /// `10.0.0.1:1234 -> 10.0.0.2:80 tcp`; ICMP with its type and code
    /// (`10.0.0.1 -> 10.0.0.2 icmp 8/0`), other protocols without ports
    /// (`10.0.0.1 -> 224.0.0.22 igmp`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ports = (self.src_port, self.dst_port);
        write_flow(f, (self.src, self.dst), false, self.protocol, ports)
    }
}

impl fmt::Display for Flow6 {
    /// `[2001:db8::1]:53 -> [2001:db8::2]:4242 udp`; ICMPv6 with its type
    /// and code (`2001:db8::1 -> 2001:db8::2 ipv6-icmp 128/0`), other
    /// protocols without ports.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ports = (self.src_port, self.dst_port);
        write_flow(f, (self.src, self.dst), true, self.protocol, ports)
    }
}

impl fmt::Display for FlowKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FlowKey::V4(k) => k.fmt(f),
            FlowKey::V6(k) => k.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k4() -> Flow4 {
        Flow4 {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 0, 2),
            src_port: 1234,
            dst_port: 80,
            protocol: IpProtocol::Tcp,
        }
    }

    fn k6() -> Flow6 {
        Flow6 {
            src: "2001:db8::1".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
            src_port: 53,
            dst_port: 4242,
            protocol: IpProtocol::Udp,
        }
    }

    #[test]
    fn words4_layout() {
        assert_eq!(
            k4().words4(),
            [0x0a00_0001, 0x0a00_0002, (1234 << 16) | 80, 6]
        );
    }

    #[test]
    fn words10_layout() {
        let w = k6().words10();
        assert_eq!(w[..4], [0x2001_0db8, 0, 0, 1]);
        assert_eq!(w[4..8], [0x2001_0db8, 0, 0, 2]);
        assert_eq!(w[8], (53 << 16) | 4242);
        assert_eq!(w[9], 17);
    }

    #[test]
    fn v4_maps_into_words10() {
        let k = k4();
        let mapped = Flow6 {
            src: k.src.to_ipv6_mapped(),
            dst: k.dst.to_ipv6_mapped(),
            src_port: k.src_port,
            dst_port: k.dst_port,
            protocol: k.protocol,
        };
        assert_eq!(k.words10(), mapped.words10());
        assert_eq!(FlowKey::V4(k).words10(), k.words10());
        assert_eq!(FlowKey::V4(k).words4(), Some(k.words4()));
        assert_eq!(FlowKey::V6(k6()).words4(), None);
    }

    #[test]
    fn display() {
        assert_eq!(
            FlowKey::V4(k4()).to_string(),
            "10.0.0.1:1234 -> 10.0.0.2:80 tcp"
        );
        assert_eq!(
            FlowKey::V6(k6()).to_string(),
            "[2001:db8::1]:53 -> [2001:db8::2]:4242 udp"
        );
        let mut k = k4();
        k.protocol = IpProtocol::Unknown(132);
        assert_eq!(k.to_string(), "10.0.0.1:1234 -> 10.0.0.2:80 proto-132");
        // ICMP: type/code (NetFlow's destination port); no ports: none shown.
        k.protocol = IpProtocol::Icmp;
        (k.src_port, k.dst_port) = (0, 0x0800);
        assert_eq!(k.to_string(), "10.0.0.1 -> 10.0.0.2 icmp 8/0");
        let mut k6 = k6();
        (k6.protocol, k6.src_port, k6.dst_port) = (IpProtocol::Icmpv6, 0, 0x8100);
        assert_eq!(k6.to_string(), "2001:db8::1 -> 2001:db8::2 ipv6-icmp 129/0");
        (k.protocol, k.dst_port) = (IpProtocol::Igmp, 0);
        assert_eq!(k.to_string(), "10.0.0.1 -> 10.0.0.2 igmp");
    }

    #[test]
    fn encode_round_trip() {
        for k in [FlowKey::V4(k4()), FlowKey::V6(k6())] {
            assert_eq!(FlowKey::decode(&k.encode()), Some(k));
        }
        let mut bad = FlowKey::V4(k4()).encode();
        bad[0] = 5;
        assert_eq!(FlowKey::decode(&bad), None);
        let mut bad = FlowKey::V6(k6()).encode();
        bad[0] = 4;
        assert_eq!(FlowKey::decode(&bad), None);
    }

    #[test]
    fn reversed() {
        let k = FlowKey::V4(k4());
        assert_eq!(k.reversed().ports(), (80, 1234));
        assert_eq!(k.reversed().reversed(), k);
        assert_eq!(k.reversed().src(), k.dst());
    }
}
