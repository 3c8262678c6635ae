//! ICMP for IPv4: the common 8-byte header.

use super::{Error, Field, Rest, checksum, get_u16, get_u32, put_u16, put_u32, wire_enum};

wire_enum! {
    /// ICMPv4 message type.
    pub enum Message(u8) {
        /// Echo reply (0).
        EchoReply = 0,
        /// Destination unreachable (3).
        DstUnreachable = 3,
        /// Redirect (5).
        Redirect = 5,
        /// Echo request (8).
        EchoRequest = 8,
        /// Router advertisement (9).
        RouterAdvert = 9,
        /// Router solicitation (10).
        RouterSolicit = 10,
        /// Time exceeded (11).
        TimeExceeded = 11,
        /// Parameter problem (12).
        ParamProblem = 12,
    }
}

/// A read/write view of an ICMPv4 message.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

mod field {
    use super::{Field, Rest};

    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Field = 2..4;
    pub const REST: Field = 4..8;
    pub const PAYLOAD: Rest = 8..;
}

/// Length of the ICMPv4 header.
pub const HEADER_LEN: usize = field::PAYLOAD.start;

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer, checking the 8-byte header is present.
    pub fn new_checked(buffer: T) -> Result<Packet<T>, Error> {
        if buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(Self::new_unchecked(buffer))
        }
    }

    /// Message type.
    pub fn msg_type(&self) -> Message {
        Message::from(self.buffer.as_ref()[field::TYPE])
    }

    /// Message code.
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// The type-specific second word (echo id/sequence, next-hop MTU, ...).
    pub fn rest_of_header(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::REST)
    }

    /// Echo identifier (first half of the second word).
    pub fn echo_ident(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 4..6)
    }

    /// Echo sequence number (second half of the second word).
    pub fn echo_seq_no(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 6..8)
    }

    /// Bytes after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }

    /// Whether the checksum over the whole buffer verifies.
    pub fn verify_checksum(&self) -> bool {
        checksum::sum(self.buffer.as_ref()) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the message type.
    pub fn set_msg_type(&mut self, value: Message) {
        self.buffer.as_mut()[field::TYPE] = value.into();
    }

    /// Sets the message code.
    pub fn set_msg_code(&mut self, value: u8) {
        self.buffer.as_mut()[field::CODE] = value;
    }

    /// Sets the second word.
    pub fn set_rest_of_header(&mut self, value: u32) {
        put_u32(self.buffer.as_mut(), field::REST, value);
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, value: u16) {
        put_u16(self.buffer.as_mut(), field::CHECKSUM, value);
    }

    /// Computes the checksum over the whole buffer and writes it.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = !checksum::sum(self.buffer.as_ref());
        self.set_checksum(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static ECHO: [u8; 12] = [
        0x08, // type: echo request
        0x00, // code
        0x8e, 0xfe, // checksum
        0x12, 0x34, // ident
        0xab, 0xcd, // seq
        0xaa, 0x00, 0x00, 0xff, // data
    ];

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&ECHO[..]).unwrap();
        assert_eq!(p.msg_type(), Message::EchoRequest);
        assert_eq!(p.msg_code(), 0);
        assert_eq!(p.checksum(), 0x8efe);
        assert_eq!(p.echo_ident(), 0x1234);
        assert_eq!(p.echo_seq_no(), 0xabcd);
        assert_eq!(p.rest_of_header(), 0x1234_abcd);
        assert_eq!(p.payload(), &[0xaa, 0x00, 0x00, 0xff]);
        assert!(p.verify_checksum());
    }

    #[test]
    fn construct() {
        let mut buf = [0xa5u8; 12];
        buf[8..].copy_from_slice(&[0xaa, 0x00, 0x00, 0xff]);
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_msg_type(Message::EchoRequest);
        p.set_msg_code(0);
        p.set_rest_of_header(0x1234_abcd);
        p.fill_checksum();
        assert_eq!(buf, ECHO);
    }

    #[test]
    fn impossible_len() {
        assert_eq!(
            Packet::new_checked(&ECHO[..7]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(Message::from(42), Message::Unknown(42));
    }
}
