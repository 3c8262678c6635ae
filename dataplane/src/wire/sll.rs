//! Linux cooked capture v1 (`LINKTYPE_LINUX_SLL`, 113): a 16-byte
//! pseudo-header written by libpcap on the `any` device.

use super::{Error, Field, Rest, ethernet::EtherType, get_u16, put_u16};

/// A read/write view of a Linux cooked capture (SLL v1) header.
#[derive(Debug, Clone)]
pub struct Header<T: AsRef<[u8]>> {
    buffer: T,
}

mod field {
    use super::{Field, Rest};

    pub const PACKET_TYPE: Field = 0..2;
    pub const ARPHRD: Field = 2..4;
    pub const ADDR_LEN: Field = 4..6;
    pub const ADDR: Field = 6..14;
    pub const PROTOCOL: Field = 14..16;
    pub const PAYLOAD: Rest = 16..;
}

/// Length of the SLL v1 header.
pub const HEADER_LEN: usize = field::PAYLOAD.start;

impl<T: AsRef<[u8]>> Header<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Header<T> {
        Header { buffer }
    }

    /// Wraps a buffer, checking it holds the 16-byte header.
    pub fn new_checked(buffer: T) -> Result<Header<T>, Error> {
        let h = Self::new_unchecked(buffer);
        h.check_len()?;
        Ok(h)
    }

    /// Checks the buffer holds the whole header.
    pub fn check_len(&self) -> Result<(), Error> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Packet type (0 to us, 1 broadcast, 2 multicast, 3 to someone else, 4 sent by us).
    pub fn packet_type(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::PACKET_TYPE)
    }

    /// The `ARPHRD_*` type of the device.
    pub fn arphrd(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::ARPHRD)
    }

    /// Number of meaningful bytes in the link-layer address field.
    pub fn addr_len(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::ADDR_LEN)
    }

    /// The link-layer address field, at most 8 bytes (`addr_len` clamped).
    pub fn addr(&self) -> &[u8] {
        let n = usize::from(self.addr_len()).min(field::ADDR.len());
        &self.buffer.as_ref()[field::ADDR][..n]
    }

    /// The protocol field: an EtherType for IP, or a small Linux `ETH_P_*`
    /// value (1: 802.3, 4: 802.2 LLC, ...), which appears as `Unknown`.
    pub fn protocol(&self) -> EtherType {
        EtherType::from(get_u16(self.buffer.as_ref(), field::PROTOCOL))
    }

    /// The bytes after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Header<T> {
    /// Sets the packet type.
    pub fn set_packet_type(&mut self, value: u16) {
        put_u16(self.buffer.as_mut(), field::PACKET_TYPE, value);
    }

    /// Sets the `ARPHRD_*` type.
    pub fn set_arphrd(&mut self, value: u16) {
        put_u16(self.buffer.as_mut(), field::ARPHRD, value);
    }

    /// Sets the address (at most 8 bytes, zero padded) and its length.
    pub fn set_addr(&mut self, addr: &[u8]) {
        let n = addr.len().min(field::ADDR.len());
        let buf = self.buffer.as_mut();
        buf[field::ADDR].fill(0);
        buf[field::ADDR][..n].copy_from_slice(&addr[..n]);
        put_u16(buf, field::ADDR_LEN, n as u16);
    }

    /// Sets the protocol field.
    pub fn set_protocol(&mut self, value: EtherType) {
        put_u16(self.buffer.as_mut(), field::PROTOCOL, value.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static HEADER: [u8; 18] = [
        0x00, 0x04, // packet type: outgoing
        0x00, 0x01, // ARPHRD_ETHER
        0x00, 0x06, // address length 6
        0x02, 0x11, 0x22, 0x33, 0x44, 0x55, 0x00, 0x00, // address, padded to 8
        0x86, 0xdd, // protocol IPv6
        0x60, 0x00, // payload
    ];

    #[test]
    fn deconstruct() {
        let h = Header::new_checked(&HEADER[..]).unwrap();
        assert_eq!(h.packet_type(), 4);
        assert_eq!(h.arphrd(), 1);
        assert_eq!(h.addr(), &[0x02, 0x11, 0x22, 0x33, 0x44, 0x55]);
        assert_eq!(h.protocol(), EtherType::Ipv6);
        assert_eq!(h.payload(), &[0x60, 0x00]);
    }

    #[test]
    fn construct() {
        let mut buf = [0xa5u8; 18];
        let mut h = Header::new_unchecked(&mut buf[..]);
        h.set_packet_type(4);
        h.set_arphrd(1);
        h.set_addr(&[0x02, 0x11, 0x22, 0x33, 0x44, 0x55]);
        h.set_protocol(EtherType::Ipv6);
        buf[16..].copy_from_slice(&[0x60, 0x00]);
        assert_eq!(buf, HEADER);
    }

    #[test]
    fn impossible_len() {
        assert_eq!(
            Header::new_checked(&HEADER[..15]).unwrap_err(),
            Error::Truncated
        );
        let mut odd = HEADER;
        odd[4..6].copy_from_slice(&[0xff, 0xff]); // absurd address length is clamped
        assert_eq!(Header::new_checked(&odd[..]).unwrap().addr().len(), 8);
    }
}
