//! Values shared by IPv4 and IPv6: protocol numbers, version, ECN codepoints.

use core::fmt;

use super::wire_enum;

wire_enum! {
    /// An IP protocol number (IPv4 `protocol`, IPv6 `next header`).
    pub enum IpProtocol(u8) {
        /// IPv6 hop-by-hop options (0).
        HopByHop = 0,
        /// ICMP for IPv4 (1).
        Icmp = 1,
        /// IGMP (2).
        Igmp = 2,
        /// TCP (6).
        Tcp = 6,
        /// UDP (17).
        Udp = 17,
        /// IPv6 routing header (43).
        Ipv6Route = 43,
        /// IPv6 fragment header (44).
        Ipv6Frag = 44,
        /// Encapsulating security payload (50).
        Esp = 50,
        /// Authentication header (51).
        Ah = 51,
        /// ICMP for IPv6 (58).
        Icmpv6 = 58,
        /// IPv6 "no next header" (59).
        Ipv6NoNxt = 59,
        /// IPv6 destination options (60).
        Ipv6Opts = 60,
    }
}

impl IpProtocol {
    /// A short lower-case name (`tcp`, `udp`, ...), or `None` for unknown numbers.
    pub fn name(self) -> Option<&'static str> {
        Some(match self {
            IpProtocol::HopByHop => "hopopt",
            IpProtocol::Icmp => "icmp",
            IpProtocol::Igmp => "igmp",
            IpProtocol::Tcp => "tcp",
            IpProtocol::Udp => "udp",
            IpProtocol::Ipv6Route => "ipv6-route",
            IpProtocol::Ipv6Frag => "ipv6-frag",
            IpProtocol::Esp => "esp",
            IpProtocol::Ah => "ah",
            IpProtocol::Icmpv6 => "ipv6-icmp",
            IpProtocol::Ipv6NoNxt => "ipv6-nonxt",
            IpProtocol::Ipv6Opts => "ipv6-opts",
            IpProtocol::Unknown(_) => return None,
        })
    }
}

impl fmt::Display for IpProtocol {
    /// `tcp`, `udp`, ..., or `proto-N` for unknown numbers.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "proto-{}", u8::from(*self)),
        }
    }
}

/// IP version of a parsed packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpVersion {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

/// The two-bit ECN codepoint (RFC 3168): IPv4 TOS / IPv6 traffic class low bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Ecn {
    /// `00`: not ECN-capable transport.
    #[default]
    NotEct,
    /// `01`: ECN-capable transport, ECT(1).
    Ect1,
    /// `10`: ECN-capable transport, ECT(0).
    Ect0,
    /// `11`: congestion experienced.
    Ce,
}

impl Ecn {
    /// The codepoint of the low two bits of `bits`.
    #[inline]
    pub fn from_bits(bits: u8) -> Ecn {
        match bits & 0b11 {
            0b00 => Ecn::NotEct,
            0b01 => Ecn::Ect1,
            0b10 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }

    /// The two-bit value.
    #[inline]
    pub fn bits(self) -> u8 {
        match self {
            Ecn::NotEct => 0b00,
            Ecn::Ect1 => 0b01,
            Ecn::Ect0 => 0b10,
            Ecn::Ce => 0b11,
        }
    }

    /// Whether the sender declared an ECN-capable transport (ECT(0), ECT(1) or CE).
    #[inline]
    pub fn is_ect(self) -> bool {
        self != Ecn::NotEct
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_round_trip() {
        for v in 0..=255u8 {
            assert_eq!(u8::from(IpProtocol::from(v)), v);
        }
        assert_eq!(IpProtocol::from(6), IpProtocol::Tcp);
        assert_eq!(IpProtocol::from(253), IpProtocol::Unknown(253));
        assert_eq!(IpProtocol::Unknown(253).to_string(), "proto-253");
        assert_eq!(IpProtocol::Udp.to_string(), "udp");
    }

    #[test]
    fn ecn_bits() {
        for v in 0..4u8 {
            assert_eq!(Ecn::from_bits(v).bits(), v);
        }
        assert_eq!(Ecn::from_bits(0xfe), Ecn::Ect0);
        assert!(!Ecn::NotEct.is_ect());
        assert!(Ecn::Ce.is_ect());
    }
}
