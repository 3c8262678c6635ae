//! Ethernet II frames.

use core::fmt;

use super::{Error, Field, Rest, get_u16, put_u16, wire_enum};

wire_enum! {
    /// An EtherType (or, below `0x0600`, an 802.3 length kept as `Unknown`).
    pub enum EtherType(u16) {
        /// IPv4 (`0x0800`).
        Ipv4 = 0x0800,
        /// ARP (`0x0806`).
        Arp = 0x0806,
        /// 802.1Q customer VLAN tag (`0x8100`).
        Vlan = 0x8100,
        /// 802.1ad service VLAN tag, QinQ (`0x88a8`).
        QinQ = 0x88a8,
        /// Pre-standard QinQ tag (`0x9100`).
        QinQLegacy = 0x9100,
        /// IPv6 (`0x86dd`).
        Ipv6 = 0x86dd,
        /// PPPoE discovery (`0x8863`).
        PppoeDiscovery = 0x8863,
        /// PPPoE session (`0x8864`).
        PppoeSession = 0x8864,
        /// MPLS unicast (`0x8847`).
        MplsUnicast = 0x8847,
        /// MPLS multicast (`0x8848`).
        MplsMulticast = 0x8848,
    }
}

impl EtherType {
    /// Whether this value is a VLAN tag protocol identifier (`0x8100`, `0x88a8`, `0x9100`).
    #[inline]
    pub fn is_vlan_tpid(self) -> bool {
        matches!(
            self,
            EtherType::Vlan | EtherType::QinQ | EtherType::QinQLegacy
        )
    }
}

/// A six-octet Ethernet address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Address(pub [u8; 6]);

impl Address {
    /// The broadcast address `ff:ff:ff:ff:ff:ff`.
    pub const BROADCAST: Address = Address([0xff; 6]);

    /// Whether the group bit (I/G, lowest bit of the first octet) is set.
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 0x01 != 0
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

/// A read/write view of an Ethernet II frame.
#[derive(Debug, Clone)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

mod field {
    use super::{Field, Rest};

    pub const DESTINATION: Field = 0..6;
    pub const SOURCE: Field = 6..12;
    pub const ETHERTYPE: Field = 12..14;
    pub const PAYLOAD: Rest = 14..;
}

/// Length of the Ethernet II header.
pub const HEADER_LEN: usize = field::PAYLOAD.start;

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Frame<T> {
        Frame { buffer }
    }

    /// Wraps a buffer, checking it holds the 14-byte header.
    pub fn new_checked(buffer: T) -> Result<Frame<T>, Error> {
        let frame = Self::new_unchecked(buffer);
        frame.check_len()?;
        Ok(frame)
    }

    /// Checks the buffer holds the whole header.
    pub fn check_len(&self) -> Result<(), Error> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The destination address.
    pub fn dst_addr(&self) -> Address {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::DESTINATION]);
        Address(a)
    }

    /// The source address.
    pub fn src_addr(&self) -> Address {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::SOURCE]);
        Address(a)
    }

    /// The EtherType field.
    pub fn ethertype(&self) -> EtherType {
        EtherType::from(get_u16(self.buffer.as_ref(), field::ETHERTYPE))
    }

    /// The bytes after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, value: Address) {
        self.buffer.as_mut()[field::DESTINATION].copy_from_slice(&value.0);
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, value: Address) {
        self.buffer.as_mut()[field::SOURCE].copy_from_slice(&value.0);
    }

    /// Sets the EtherType field.
    pub fn set_ethertype(&mut self, value: EtherType) {
        put_u16(self.buffer.as_mut(), field::ETHERTYPE, value.into());
    }

    /// The bytes after the header, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static FRAME: [u8; 18] = [
        0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb, // dst 01:00:5e:00:00:fb (multicast)
        0x02, 0x11, 0x22, 0x33, 0x44, 0x55, // src
        0x08, 0x00, // ethertype IPv4
        0xaa, 0xbb, 0xcc, 0xdd, // payload
    ];

    #[test]
    fn deconstruct() {
        let f = Frame::new_checked(&FRAME[..]).unwrap();
        assert_eq!(f.dst_addr(), Address([0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb]));
        assert!(f.dst_addr().is_multicast());
        assert_eq!(f.src_addr().to_string(), "02:11:22:33:44:55");
        assert_eq!(f.ethertype(), EtherType::Ipv4);
        assert_eq!(f.payload(), &[0xaa, 0xbb, 0xcc, 0xdd]);
    }

    #[test]
    fn construct() {
        let mut buf = [0xa5u8; 18];
        let mut f = Frame::new_unchecked(&mut buf[..]);
        f.set_dst_addr(Address([0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb]));
        f.set_src_addr(Address([0x02, 0x11, 0x22, 0x33, 0x44, 0x55]));
        f.set_ethertype(EtherType::Ipv4);
        f.payload_mut().copy_from_slice(&[0xaa, 0xbb, 0xcc, 0xdd]);
        assert_eq!(buf, FRAME);
    }

    #[test]
    fn impossible_len() {
        assert_eq!(
            Frame::new_checked(&FRAME[..13]).unwrap_err(),
            Error::Truncated
        );
        assert!(
            Frame::new_checked(&FRAME[..14])
                .unwrap()
                .payload()
                .is_empty()
        );
    }

    #[test]
    fn ethertype_values() {
        assert_eq!(EtherType::from(0x88a8), EtherType::QinQ);
        assert_eq!(EtherType::from(0x1234), EtherType::Unknown(0x1234));
        assert_eq!(u16::from(EtherType::Unknown(0x1234)), 0x1234);
        assert!(EtherType::QinQLegacy.is_vlan_tpid());
        assert!(!EtherType::Ipv6.is_vlan_tpid());
    }
}
