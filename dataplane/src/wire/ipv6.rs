//! IPv6 packets and extension headers.
//!
//! [`Packet`] is the fixed 40-byte header; [`ExtHeader`] views any extension
//! header with the generic `next header, length` prefix (hop-by-hop,
//! routing, destination options, and AH, whose length unit differs);
//! [`FragmentHeader`] views the fixed 8-byte fragment header; [`Options`]
//! iterates the TLV options of hop-by-hop and destination-options headers.

use core::net::Ipv6Addr;

use super::{
    Error, Field, Rest, get_u16, get_u32,
    ip::{Ecn, IpProtocol},
    put_u16, put_u32,
};

/// A read/write view of an IPv6 packet (fixed header and what follows).
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

mod field {
    use super::{Field, Rest};

    pub const VER_TC_FLOW: Field = 0..4;
    pub const LENGTH: Field = 4..6;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC_ADDR: Field = 8..24;
    pub const DST_ADDR: Field = 24..40;
    pub const PAYLOAD: Rest = 40..;
}

/// Length of the fixed IPv6 header.
pub const HEADER_LEN: usize = field::PAYLOAD.start;

/// Hop-by-hop option type of the jumbo payload option (RFC 2675).
pub const OPT_JUMBO: u8 = 0xc2;
/// Pad1 option type (a single zero byte with no length).
pub const OPT_PAD1: u8 = 0;

fn addr(buf: &[u8], f: Field) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&buf[f]);
    Ipv6Addr::from(a)
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer, checking the 40-byte header is present. The payload
    /// may be shorter than the payload length says (cut by capture).
    pub fn new_checked(buffer: T) -> Result<Packet<T>, Error> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks the buffer holds the fixed header.
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

    /// The version field (6 for a well-formed packet).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    /// The traffic class (DSCP and ECN).
    pub fn traffic_class(&self) -> u8 {
        ((get_u32(self.buffer.as_ref(), field::VER_TC_FLOW) >> 20) & 0xff) as u8
    }

    /// The DSCP (traffic class high 6 bits).
    pub fn dscp(&self) -> u8 {
        self.traffic_class() >> 2
    }

    /// The ECN codepoint (traffic class low 2 bits).
    pub fn ecn(&self) -> Ecn {
        Ecn::from_bits(self.traffic_class())
    }

    /// The flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::VER_TC_FLOW) & 0x000f_ffff
    }

    /// The payload length field (0 in a jumbogram).
    pub fn payload_len(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::LENGTH)
    }

    /// The next header field.
    pub fn next_header(&self) -> IpProtocol {
        IpProtocol::from(self.buffer.as_ref()[field::NXT_HDR])
    }

    /// The hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// The source address.
    pub fn src_addr(&self) -> Ipv6Addr {
        addr(self.buffer.as_ref(), field::SRC_ADDR)
    }

    /// The destination address.
    pub fn dst_addr(&self) -> Ipv6Addr {
        addr(self.buffer.as_ref(), field::DST_ADDR)
    }

    /// The bytes after the fixed header, up to the payload length (or the
    /// end of the buffer, whichever comes first; everything for a jumbogram).
    pub fn payload(&self) -> &[u8] {
        let data = self.buffer.as_ref();
        let end = match usize::from(self.payload_len()) {
            0 => data.len(),
            n => (HEADER_LEN + n).min(data.len()),
        };
        &data[HEADER_LEN..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets version 6, the traffic class and the flow label.
    pub fn set_version_tc_flow(&mut self, traffic_class: u8, flow_label: u32) {
        let w = (6u32 << 28) | (u32::from(traffic_class) << 20) | (flow_label & 0x000f_ffff);
        put_u32(self.buffer.as_mut(), field::VER_TC_FLOW, w);
    }

    /// Sets the ECN codepoint, keeping the rest of the traffic class.
    /// (IPv6 has no header checksum.)
    pub fn set_ecn(&mut self, value: Ecn) {
        let b = &mut self.buffer.as_mut()[1];
        *b = (*b & !0x30) | (value.bits() << 4);
    }

    /// Sets the payload length.
    pub fn set_payload_len(&mut self, value: u16) {
        put_u16(self.buffer.as_mut(), field::LENGTH, value);
    }

    /// Sets the next header.
    pub fn set_next_header(&mut self, value: IpProtocol) {
        self.buffer.as_mut()[field::NXT_HDR] = value.into();
    }

    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, value: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = value;
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, value: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&value.octets());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, value: Ipv6Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&value.octets());
    }

    /// The bytes after the fixed header, mutably (to the end of the buffer).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD]
    }
}

/// A read/write view of an extension header with the generic
/// `next header (1), length (1)` prefix.
///
/// Length units: `(len + 1) * 8` bytes for hop-by-hop, routing and
/// destination options; `(len + 2) * 4` bytes for the authentication header.
#[derive(Debug, Clone)]
pub struct ExtHeader<T: AsRef<[u8]>> {
    buffer: T,
    ah: bool,
}

impl<T: AsRef<[u8]>> ExtHeader<T> {
    /// Wraps a buffer (starting at the header) without checking it. `ah`
    /// selects the authentication header's length unit.
    pub const fn new_unchecked(buffer: T, ah: bool) -> ExtHeader<T> {
        ExtHeader { buffer, ah }
    }

    /// Wraps a buffer, checking it holds the whole header.
    pub fn new_checked(buffer: T, ah: bool) -> Result<ExtHeader<T>, Error> {
        let h = Self::new_unchecked(buffer, ah);
        h.check_len()?;
        Ok(h)
    }

    /// Checks the buffer holds the two-byte prefix and the whole header.
    pub fn check_len(&self) -> Result<(), Error> {
        let len = self.buffer.as_ref().len();
        if len < 2 || len < self.header_len() {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// The header that follows.
    pub fn next_header(&self) -> IpProtocol {
        IpProtocol::from(self.buffer.as_ref()[0])
    }

    /// The length of this header in bytes.
    pub fn header_len(&self) -> usize {
        ext_header_len(self.buffer.as_ref()[1], self.ah)
    }

    /// The header body after the two-byte prefix (options, routing data, ...).
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[2..self.header_len()]
    }

    /// The TLV options of a hop-by-hop or destination-options header.
    pub fn options(&self) -> Options<'_> {
        Options { data: self.data() }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ExtHeader<T> {
    /// Sets the next header.
    pub fn set_next_header(&mut self, value: IpProtocol) {
        self.buffer.as_mut()[0] = value.into();
    }

    /// Sets the raw length byte.
    pub fn set_len_field(&mut self, value: u8) {
        self.buffer.as_mut()[1] = value;
    }

    /// The header body, mutably.
    pub fn data_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buffer.as_mut()[2..hl]
    }
}

/// Length in bytes of an extension header from its length byte.
#[inline]
pub(crate) fn ext_header_len(len_field: u8, ah: bool) -> usize {
    if ah {
        (usize::from(len_field) + 2) * 4
    } else {
        (usize::from(len_field) + 1) * 8
    }
}

/// One TLV option of a hop-by-hop or destination-options header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opt<'a> {
    /// Option type.
    pub kind: u8,
    /// Option data (empty for Pad1).
    pub data: &'a [u8],
}

/// Iterator over TLV options; stops at the first option that does not fit.
#[derive(Debug, Clone)]
pub struct Options<'a> {
    data: &'a [u8],
}

impl<'a> Options<'a> {
    /// Iterates the options in `data` (a header body after its two-byte prefix).
    pub fn new(data: &'a [u8]) -> Options<'a> {
        Options { data }
    }
}

impl<'a> Iterator for Options<'a> {
    type Item = Opt<'a>;

    fn next(&mut self) -> Option<Opt<'a>> {
        let (&kind, rest) = self.data.split_first()?;
        if kind == OPT_PAD1 {
            self.data = rest;
            return Some(Opt { kind, data: &[] });
        }
        let Some((&len, rest)) = rest.split_first() else {
            self.data = &[];
            return None;
        };
        let Some((data, rest)) = rest.split_at_checked(usize::from(len)) else {
            self.data = &[];
            return None;
        };
        self.data = rest;
        Some(Opt { kind, data })
    }
}

/// A read/write view of the 8-byte fragment header.
#[derive(Debug, Clone)]
pub struct FragmentHeader<T: AsRef<[u8]>> {
    buffer: T,
}

mod frag_field {
    use super::Field;

    pub const NXT_HDR: usize = 0;
    pub const OFF_M: Field = 2..4;
    pub const IDENT: Field = 4..8;
}

/// Length of the fragment header.
pub const FRAGMENT_HEADER_LEN: usize = frag_field::IDENT.end;

impl<T: AsRef<[u8]>> FragmentHeader<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> FragmentHeader<T> {
        FragmentHeader { buffer }
    }

    /// Wraps a buffer, checking it holds 8 bytes.
    pub fn new_checked(buffer: T) -> Result<FragmentHeader<T>, Error> {
        if buffer.as_ref().len() < FRAGMENT_HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(Self::new_unchecked(buffer))
        }
    }

    /// The header that follows (in the first fragment) or that the
    /// reassembled payload starts with.
    pub fn next_header(&self) -> IpProtocol {
        IpProtocol::from(self.buffer.as_ref()[frag_field::NXT_HDR])
    }

    /// The fragment offset in bytes.
    pub fn frag_offset(&self) -> u16 {
        get_u16(self.buffer.as_ref(), frag_field::OFF_M) & !0x7
    }

    /// The "more fragments" flag.
    pub fn more_frags(&self) -> bool {
        get_u16(self.buffer.as_ref(), frag_field::OFF_M) & 1 != 0
    }

    /// The identification.
    pub fn ident(&self) -> u32 {
        get_u32(self.buffer.as_ref(), frag_field::IDENT)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> FragmentHeader<T> {
    /// Writes the whole header: next header, offset in bytes (multiple of 8),
    /// M flag, identification. The reserved fields are zeroed.
    pub fn emit(&mut self, next: IpProtocol, offset: u16, more: bool, ident: u32) {
        let b = self.buffer.as_mut();
        b[frag_field::NXT_HDR] = next.into();
        b[1] = 0;
        put_u16(b, frag_field::OFF_M, (offset & !0x7) | u16::from(more));
        put_u32(b, frag_field::IDENT, ident);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static PACKET: [u8; 64] = [
        0x60, 0x20, 0x00,
        0x00, // version 6, traffic class 0x02 (DSCP 0, ECT(0)), flow label 0
        0x00, 0x18, // payload length 24
        0x00, // next header: hop-by-hop
        0x01, // hop limit 1
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, // src fe80::1
        0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x16, // dst ff02::16
        // hop-by-hop, 8 bytes
        0x2c, // next: fragment
        0x00, // len 0 -> 8 bytes
        0x05, 0x02, 0x00, 0x00, // router alert (MLD)
        0x01, 0x00, // PadN, 0 bytes
        // fragment header
        0x3a, // next: ICMPv6
        0x00, // reserved
        0x00, 0x01, // offset 0, M=1
        0x12, 0x34, 0x56, 0x78, // ident
        // 8 bytes of upper layer
        0x8f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&PACKET[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0x02);
        assert_eq!(p.ecn(), Ecn::Ect0);
        assert_eq!(p.dscp(), 0);
        assert_eq!(p.flow_label(), 0);
        assert_eq!(p.payload_len(), 24);
        assert_eq!(p.next_header(), IpProtocol::HopByHop);
        assert_eq!(p.hop_limit(), 1);
        assert_eq!(p.src_addr(), "fe80::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.dst_addr(), "ff02::16".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.payload().len(), 24);

        let hbh = ExtHeader::new_checked(p.payload(), false).unwrap();
        assert_eq!(hbh.next_header(), IpProtocol::Ipv6Frag);
        assert_eq!(hbh.header_len(), 8);
        let opts: Vec<_> = hbh.options().collect();
        assert_eq!(
            opts,
            [
                Opt {
                    kind: 0x05,
                    data: &[0, 0]
                },
                Opt {
                    kind: 0x01,
                    data: &[]
                }
            ]
        );

        let frag = FragmentHeader::new_checked(&p.payload()[8..]).unwrap();
        assert_eq!(frag.next_header(), IpProtocol::Icmpv6);
        assert_eq!(frag.frag_offset(), 0);
        assert!(frag.more_frags());
        assert_eq!(frag.ident(), 0x1234_5678);
    }

    #[test]
    fn construct() {
        let mut buf = [0xa5u8; 64];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_version_tc_flow(0x00, 0);
        p.set_ecn(Ecn::Ect0);
        p.set_payload_len(24);
        p.set_next_header(IpProtocol::HopByHop);
        p.set_hop_limit(1);
        p.set_src_addr("fe80::1".parse().unwrap());
        p.set_dst_addr("ff02::16".parse().unwrap());
        let pl = p.payload_mut();
        let mut hbh = ExtHeader::new_unchecked(&mut pl[..8], false);
        hbh.set_next_header(IpProtocol::Ipv6Frag);
        hbh.set_len_field(0);
        hbh.data_mut()
            .copy_from_slice(&[0x05, 0x02, 0x00, 0x00, 0x01, 0x00]);
        FragmentHeader::new_unchecked(&mut pl[8..16]).emit(
            IpProtocol::Icmpv6,
            0,
            true,
            0x1234_5678,
        );
        pl[16..].copy_from_slice(&[0x8f, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(buf, PACKET);
    }

    #[test]
    fn impossible_len() {
        assert_eq!(
            Packet::new_checked(&PACKET[..39]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            ExtHeader::new_checked(&PACKET[40..47], false).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            ExtHeader::new_checked(&PACKET[40..41], false).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            FragmentHeader::new_checked(&PACKET[48..55]).unwrap_err(),
            Error::Truncated
        );
        // AH length unit: len 1 -> 12 bytes.
        let ah = [0x06, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            ExtHeader::new_checked(&ah[..], true).unwrap().header_len(),
            12
        );
        assert!(ExtHeader::new_checked(&ah[..11], true).is_err());
    }

    #[test]
    fn options_stop_at_overrun() {
        let data = [0x00, 0xc2, 0x04, 0x00, 0x01, 0x00, 0x00, 0x01, 0x09];
        let opts: Vec<_> = Options::new(&data).collect();
        assert_eq!(opts.len(), 2);
        assert_eq!(opts[1].kind, OPT_JUMBO);
        assert_eq!(opts[1].data, &[0x00, 0x01, 0x00, 0x00]);
        // A length running past the end ends the iteration.
        assert_eq!(Options::new(&[0x01, 0x05, 0x00]).count(), 0);
    }
}
