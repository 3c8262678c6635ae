//! UDP headers.

use super::{Error, Field, get_u16, put_u16};

/// A read/write view of a UDP datagram.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

mod field {
    use super::Field;

    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const LENGTH: Field = 4..6;
    pub const CHECKSUM: Field = 6..8;
}

/// Length of the UDP header.
pub const HEADER_LEN: usize = field::CHECKSUM.end;

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer, checking the 8-byte header is present and the length
    /// field is not below 8 (0 is allowed: a jumbogram's UDP length, RFC 2675).
    /// The buffer may be shorter than the length field (cut by capture).
    pub fn new_checked(buffer: T) -> Result<Packet<T>, Error> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// See [`new_checked`](Self::new_checked).
    pub fn check_len(&self) -> Result<(), Error> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        match usize::from(self.len()) {
            0 => Ok(()),
            n if n < HEADER_LEN => Err(Error::Malformed),
            _ => Ok(()),
        }
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::SRC_PORT)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::DST_PORT)
    }

    /// Length field (header + data).
    pub fn len(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::LENGTH)
    }

    /// Whether the length field says there is no data after the header.
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= HEADER_LEN
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// The data: up to the length field or the end of the buffer, whichever
    /// comes first (everything when the length field is 0).
    pub fn payload(&self) -> &[u8] {
        let data = self.buffer.as_ref();
        let end = match usize::from(self.len()) {
            0 => data.len(),
            n => n.clamp(HEADER_LEN, data.len()),
        };
        &data[HEADER_LEN..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the source port.
    pub fn set_src_port(&mut self, value: u16) {
        put_u16(self.buffer.as_mut(), field::SRC_PORT, value);
    }

    /// Sets the destination port.
    pub fn set_dst_port(&mut self, value: u16) {
        put_u16(self.buffer.as_mut(), field::DST_PORT, value);
    }

    /// Sets the length field.
    pub fn set_len(&mut self, value: u16) {
        put_u16(self.buffer.as_mut(), field::LENGTH, value);
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, value: u16) {
        put_u16(self.buffer.as_mut(), field::CHECKSUM, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static DATAGRAM: [u8; 12] = [
        0x14, 0xe9, // src port 5353
        0x14, 0xe9, // dst port 5353
        0x00, 0x0c, // length 12
        0x12, 0x4d, // checksum
        0xaa, 0x00, 0x00, 0xff, // data
    ];

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&DATAGRAM[..]).unwrap();
        assert_eq!(p.src_port(), 5353);
        assert_eq!(p.dst_port(), 5353);
        assert_eq!(p.len(), 12);
        assert!(!p.is_empty());
        assert_eq!(p.checksum(), 0x124d);
        assert_eq!(p.payload(), &[0xaa, 0x00, 0x00, 0xff]);
    }

    #[test]
    fn construct() {
        let mut buf = [0xa5u8; 12];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_src_port(5353);
        p.set_dst_port(5353);
        p.set_len(12);
        p.set_checksum(0x124d);
        buf[8..].copy_from_slice(&[0xaa, 0x00, 0x00, 0xff]);
        assert_eq!(buf, DATAGRAM);
    }

    #[test]
    fn impossible_len() {
        assert_eq!(
            Packet::new_checked(&DATAGRAM[..7]).unwrap_err(),
            Error::Truncated
        );
        let mut bad = DATAGRAM;
        bad[5] = 7;
        assert_eq!(Packet::new_checked(&bad[..]).unwrap_err(), Error::Malformed);
        // Length beyond the buffer: payload is what was captured.
        let mut long = DATAGRAM;
        long[4] = 0x10;
        assert_eq!(Packet::new_checked(&long[..]).unwrap().payload().len(), 4);
    }
}
