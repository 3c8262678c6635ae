//! ICMP for IPv6: the common header. MLD messages are viewed by [`super::mld`].

use core::net::Ipv6Addr;

use super::{Error, Field, Rest, checksum, get_u16, get_u32, put_u16, put_u32, wire_enum};

wire_enum! {
    /// ICMPv6 message type.
    pub enum Message(u8) {
        /// Destination unreachable (1).
        DstUnreachable = 1,
        /// Packet too big (2).
        PktTooBig = 2,
        /// Time exceeded (3).
        TimeExceeded = 3,
        /// Parameter problem (4).
        ParamProblem = 4,
        /// Echo request (128).
        EchoRequest = 128,
        /// Echo reply (129).
        EchoReply = 129,
        /// Multicast listener query, MLDv1 or v2 (130).
        MldQuery = 130,
        /// MLDv1 report (131).
        MldReport = 131,
        /// MLDv1 done (132).
        MldDone = 132,
        /// Router solicitation (133).
        RouterSolicit = 133,
        /// Router advertisement (134).
        RouterAdvert = 134,
        /// Neighbor solicitation (135).
        NeighborSolicit = 135,
        /// Neighbor advertisement (136).
        NeighborAdvert = 136,
        /// Redirect (137).
        Redirect = 137,
        /// MLDv2 report (143).
        MldReportV2 = 143,
    }
}

/// A read/write view of an ICMPv6 message.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

mod field {
    use super::{Field, Rest};

    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Field = 2..4;
    pub const BODY: Field = 4..8;
    pub const PAYLOAD: Rest = 8..;
}

/// Length of the common ICMPv6 header including the first body word
/// (every defined message has at least these 8 bytes).
pub const HEADER_LEN: usize = field::PAYLOAD.start;

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer, checking 8 bytes are present.
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

    /// The first body word (echo id/seq, MTU, pointer, ...).
    pub fn body_word(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::BODY)
    }

    /// Bytes after the first 8.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }

    /// Whether the checksum verifies over the RFC 8200 pseudo-header and the
    /// whole buffer (which must be exactly the ICMPv6 message).
    pub fn verify_checksum(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        pseudo_sum(src, dst, self.buffer.as_ref()) == 0xffff
    }
}

fn pseudo_sum(src: &Ipv6Addr, dst: &Ipv6Addr, msg: &[u8]) -> u16 {
    let len = msg.len() as u64;
    let acc = u64::from(checksum::sum(&src.octets()))
        + u64::from(checksum::sum(&dst.octets()))
        + (len >> 16)
        + (len & 0xffff)
        + 58
        + u64::from(checksum::sum(msg));
    checksum::fold(acc)
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

    /// Sets the first body word.
    pub fn set_body_word(&mut self, value: u32) {
        put_u32(self.buffer.as_mut(), field::BODY, value);
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, value: u16) {
        put_u16(self.buffer.as_mut(), field::CHECKSUM, value);
    }

    /// Computes the checksum (pseudo-header included) and writes it.
    pub fn fill_checksum(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        self.set_checksum(0);
        let c = !pseudo_sum(src, dst, self.buffer.as_ref());
        self.set_checksum(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static ECHO: [u8; 12] = [
        0x80, // type: echo request
        0x00, // code
        0x00, 0x00, // checksum (filled by the tests)
        0x12, 0x34, 0x00, 0x01, // ident, seq
        0xaa, 0x00, 0x00, 0xff, // data
    ];

    fn addrs() -> (Ipv6Addr, Ipv6Addr) {
        (
            "2001:db8::1".parse().unwrap(),
            "2001:db8::2".parse().unwrap(),
        )
    }

    #[test]
    fn deconstruct_and_checksum() {
        let (s, d) = addrs();
        let mut buf = ECHO;
        Packet::new_unchecked(&mut buf[..]).fill_checksum(&s, &d);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.msg_type(), Message::EchoRequest);
        assert_eq!(p.msg_code(), 0);
        assert_eq!(p.body_word(), 0x1234_0001);
        assert_eq!(p.payload(), &[0xaa, 0x00, 0x00, 0xff]);
        assert!(p.verify_checksum(&s, &d));
        assert!(!p.verify_checksum(&d, &"2001:db8::3".parse().unwrap()));
    }

    #[test]
    fn construct() {
        let mut buf = [0xa5u8; 12];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_msg_type(Message::EchoRequest);
        p.set_msg_code(0);
        p.set_checksum(0);
        p.set_body_word(0x1234_0001);
        buf[8..].copy_from_slice(&[0xaa, 0x00, 0x00, 0xff]);
        assert_eq!(buf, ECHO);
    }

    #[test]
    fn impossible_len() {
        assert_eq!(
            Packet::new_checked(&ECHO[..7]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(Message::from(143), Message::MldReportV2);
    }
}
