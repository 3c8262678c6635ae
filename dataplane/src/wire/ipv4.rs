//! IPv4 packets, options included.

use core::net::Ipv4Addr;

use super::{
    Error, Field, checksum, get_u16, get_u32,
    ip::{Ecn, IpProtocol},
    put_u16, put_u32,
};

/// A read/write view of an IPv4 packet.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

mod field {
    use super::Field;

    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: Field = 2..4;
    pub const IDENT: Field = 4..6;
    pub const FLG_OFF: Field = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Field = 10..12;
    pub const SRC_ADDR: Field = 12..16;
    pub const DST_ADDR: Field = 16..20;
}

/// Length of the IPv4 header without options.
pub const MIN_HEADER_LEN: usize = field::DST_ADDR.end;

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const OFFSET_MASK: u16 = 0x1fff;

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer, checking the header (options included) is present and
    /// self-consistent; see [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Packet<T>, Error> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks the buffer holds the whole header, options included, that the
    /// IHL is at least 5 and that the total length is not below the header
    /// length (0 is allowed: segmentation offload, see
    /// [`total_len`](Self::total_len)). The buffer may be shorter than the
    /// total length (a capture cut by snaplen); [`payload`](Self::payload)
    /// then returns what is there.
    pub fn check_len(&self) -> Result<(), Error> {
        let len = self.buffer.as_ref().len();
        if len < MIN_HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = self.header_len();
        if hl < MIN_HEADER_LEN {
            return Err(Error::Malformed);
        }
        if len < hl {
            return Err(Error::Truncated);
        }
        let tl = usize::from(self.total_len());
        if tl != 0 && tl < hl {
            return Err(Error::Malformed);
        }
        Ok(())
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The version field (4 for a well-formed packet).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// The header length in bytes (IHL × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    /// The differentiated services code point (6 bits).
    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] >> 2
    }

    /// The ECN codepoint.
    pub fn ecn(&self) -> Ecn {
        Ecn::from_bits(self.buffer.as_ref()[field::DSCP_ECN])
    }

    /// The total length field. Linux writes 0 here for segmentation-offload
    /// packets longer than 65535 bytes ("BIG TCP"); the length is then the
    /// buffer's.
    pub fn total_len(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::LENGTH)
    }

    /// The identification field.
    pub fn ident(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::IDENT)
    }

    /// The "don't fragment" flag.
    pub fn dont_frag(&self) -> bool {
        get_u16(self.buffer.as_ref(), field::FLG_OFF) & FLAG_DF != 0
    }

    /// The "more fragments" flag.
    pub fn more_frags(&self) -> bool {
        get_u16(self.buffer.as_ref(), field::FLG_OFF) & FLAG_MF != 0
    }

    /// The fragment offset in bytes.
    pub fn frag_offset(&self) -> u16 {
        (get_u16(self.buffer.as_ref(), field::FLG_OFF) & OFFSET_MASK) << 3
    }

    /// Whether this packet is a fragment (MF set or a non-zero offset).
    pub fn is_fragment(&self) -> bool {
        get_u16(self.buffer.as_ref(), field::FLG_OFF) & (FLAG_MF | OFFSET_MASK) != 0
    }

    /// The time-to-live field.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// The protocol field.
    pub fn protocol(&self) -> IpProtocol {
        IpProtocol::from(self.buffer.as_ref()[field::PROTOCOL])
    }

    /// The header checksum field.
    pub fn checksum(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// The source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(get_u32(self.buffer.as_ref(), field::SRC_ADDR))
    }

    /// The destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(get_u32(self.buffer.as_ref(), field::DST_ADDR))
    }

    /// The option bytes (between the fixed header and `header_len`).
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[field::DST_ADDR.end..self.header_len()]
    }

    /// Whether the header checksum verifies (a zero field from TX offload does not).
    pub fn verify_checksum(&self) -> bool {
        checksum::sum(&self.buffer.as_ref()[..self.header_len()]) == 0xffff
    }

    /// The payload: from the end of the header to the total length, or to the
    /// end of the buffer when that comes first or the total length is 0.
    pub fn payload(&self) -> &[u8] {
        let data = self.buffer.as_ref();
        let end = match usize::from(self.total_len()) {
            0 => data.len(),
            tl => tl.min(data.len()),
        };
        &data[self.header_len()..end.max(self.header_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets version 4 and the header length in bytes (a multiple of 4, 20..=60).
    pub fn set_version_and_header_len(&mut self, header_len: usize) {
        self.buffer.as_mut()[field::VER_IHL] = 0x40 | ((header_len / 4) as u8 & 0x0f);
    }

    /// Sets the DSCP, keeping the ECN bits.
    pub fn set_dscp(&mut self, value: u8) {
        let b = &mut self.buffer.as_mut()[field::DSCP_ECN];
        *b = (*b & 0x03) | (value << 2);
    }

    /// Sets the ECN codepoint without touching the checksum.
    pub fn set_ecn(&mut self, value: Ecn) {
        let b = &mut self.buffer.as_mut()[field::DSCP_ECN];
        *b = (*b & !0x03) | value.bits();
    }

    /// Sets the ECN codepoint and updates the header checksum incrementally
    /// (RFC 1624 eqn. 3). A zero (offloaded) checksum is not special-cased:
    /// the update keeps the one's-complement sum of the whole header unchanged,
    /// so a header that verified still verifies, and one that did not (such
    /// as a zero checksum) fails by the same amount as before.
    pub fn set_ecn_update_checksum(&mut self, value: Ecn) {
        let old = get_u16(self.buffer.as_ref(), 0..2);
        self.set_ecn(value);
        let new = get_u16(self.buffer.as_ref(), 0..2);
        let hc = checksum::update_word(self.checksum(), old, new);
        self.set_checksum(hc);
    }

    /// Sets the total length.
    pub fn set_total_len(&mut self, value: u16) {
        put_u16(self.buffer.as_mut(), field::LENGTH, value);
    }

    /// Sets the identification.
    pub fn set_ident(&mut self, value: u16) {
        put_u16(self.buffer.as_mut(), field::IDENT, value);
    }

    /// Sets the flags (DF, MF) and the fragment offset in bytes (a multiple of 8).
    pub fn set_flags_and_offset(&mut self, dont_frag: bool, more_frags: bool, offset: u16) {
        let mut raw = (offset >> 3) & OFFSET_MASK;
        if dont_frag {
            raw |= FLAG_DF;
        }
        if more_frags {
            raw |= FLAG_MF;
        }
        put_u16(self.buffer.as_mut(), field::FLG_OFF, raw);
    }

    /// Sets the time-to-live.
    pub fn set_ttl(&mut self, value: u8) {
        self.buffer.as_mut()[field::TTL] = value;
    }

    /// Sets the protocol.
    pub fn set_protocol(&mut self, value: IpProtocol) {
        self.buffer.as_mut()[field::PROTOCOL] = value.into();
    }

    /// Sets the header checksum field.
    pub fn set_checksum(&mut self, value: u16) {
        put_u16(self.buffer.as_mut(), field::CHECKSUM, value);
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, value: Ipv4Addr) {
        put_u32(self.buffer.as_mut(), field::SRC_ADDR, value.into());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, value: Ipv4Addr) {
        put_u32(self.buffer.as_mut(), field::DST_ADDR, value.into());
    }

    /// The option bytes, mutably.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buffer.as_mut()[field::DST_ADDR.end..hl]
    }

    /// Computes and writes the header checksum.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let hl = self.header_len();
        let c = !checksum::sum(&self.buffer.as_ref()[..hl]);
        self.set_checksum(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A 24-byte header (one 4-byte option: router alert) carrying 4 bytes.
    static PACKET: [u8; 28] = [
        0x46, // version 4, IHL 6
        0x2a, // DSCP 10 (AF11), ECN ECT(0)
        0x00, 0x1c, // total length 28
        0xbe, 0xef, // ident
        0x40, 0x00, // DF, offset 0
        0x01, // TTL 1
        0x02, // protocol IGMP
        0x00, 0x00, // checksum (filled in by the tests)
        0xc0, 0xa8, 0x01, 0x02, // src 192.168.1.2
        0xe0, 0x00, 0x00, 0x16, // dst 224.0.0.22
        0x94, 0x04, 0x00, 0x00, // option: router alert
        0xde, 0xad, 0xbe, 0xef, // payload
    ];

    fn packet() -> [u8; 28] {
        let mut p = PACKET;
        Packet::new_unchecked(&mut p[..]).fill_checksum();
        p
    }

    #[test]
    fn deconstruct() {
        let bytes = packet();
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 24);
        assert_eq!(p.dscp(), 10);
        assert_eq!(p.ecn(), Ecn::Ect0);
        assert_eq!(p.total_len(), 28);
        assert_eq!(p.ident(), 0xbeef);
        assert!(p.dont_frag() && !p.more_frags() && !p.is_fragment());
        assert_eq!(p.frag_offset(), 0);
        assert_eq!(p.ttl(), 1);
        assert_eq!(p.protocol(), IpProtocol::Igmp);
        assert_eq!(p.src_addr(), Ipv4Addr::new(192, 168, 1, 2));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(224, 0, 0, 22));
        assert_eq!(p.options(), &[0x94, 0x04, 0x00, 0x00]);
        assert_eq!(p.payload(), &[0xde, 0xad, 0xbe, 0xef]);
        assert!(p.verify_checksum());
    }

    #[test]
    fn construct() {
        let mut buf = [0xa5u8; 28];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_version_and_header_len(24);
        p.set_dscp(10);
        p.set_ecn(Ecn::Ect0);
        p.set_total_len(28);
        p.set_ident(0xbeef);
        p.set_flags_and_offset(true, false, 0);
        p.set_ttl(1);
        p.set_protocol(IpProtocol::Igmp);
        p.set_src_addr(Ipv4Addr::new(192, 168, 1, 2));
        p.set_dst_addr(Ipv4Addr::new(224, 0, 0, 22));
        p.options_mut().copy_from_slice(&[0x94, 0x04, 0x00, 0x00]);
        p.fill_checksum();
        buf[24..].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(buf, packet());
    }

    #[test]
    fn fragment_fields() {
        let mut bytes = packet();
        Packet::new_unchecked(&mut bytes[..]).set_flags_and_offset(false, true, 1480);
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert!(p.more_frags() && p.is_fragment() && !p.dont_frag());
        assert_eq!(p.frag_offset(), 1480);
    }

    #[test]
    fn impossible_len() {
        let bytes = packet();
        assert_eq!(
            Packet::new_checked(&bytes[..19]).unwrap_err(),
            Error::Truncated
        );
        // IHL 6 but only 20 bytes captured.
        assert_eq!(
            Packet::new_checked(&bytes[..22]).unwrap_err(),
            Error::Truncated
        );
        let mut bad = bytes;
        bad[0] = 0x44; // IHL 4
        assert_eq!(Packet::new_checked(&bad[..]).unwrap_err(), Error::Malformed);
        let mut bad = bytes;
        bad[3] = 20; // total length below the 24-byte header
        assert_eq!(Packet::new_checked(&bad[..]).unwrap_err(), Error::Malformed);
    }

    #[test]
    fn payload_cut_by_capture_and_padding() {
        let bytes = packet();
        // Cut by snaplen: header complete, payload partial.
        assert_eq!(
            Packet::new_checked(&bytes[..26]).unwrap().payload(),
            &[0xde, 0xad]
        );
        // Ethernet padding after the datagram is not payload.
        let mut padded = [0u8; 40];
        padded[..28].copy_from_slice(&bytes);
        assert_eq!(Packet::new_checked(&padded[..]).unwrap().payload().len(), 4);
        // Total length 0 (segmentation offload): payload runs to the end.
        let mut tso = padded;
        tso[2..4].copy_from_slice(&[0, 0]);
        assert_eq!(Packet::new_checked(&tso[..]).unwrap().payload().len(), 16);
    }

    #[test]
    fn ecn_update_keeps_checksum_valid() {
        let mut bytes = packet();
        let mut p = Packet::new_checked(&mut bytes[..]).unwrap();
        p.set_ecn_update_checksum(Ecn::Ce);
        assert_eq!(p.ecn(), Ecn::Ce);
        assert_eq!(p.dscp(), 10);
        assert!(p.verify_checksum());
    }
}
