//! IGMP: v1/v2 messages (RFC 1112, RFC 2236), v3 queries and v3 membership
//! reports with group records and source lists (RFC 3376).
//!
//! The group-record types here are generic over the address width so that
//! MLDv2 ([`super::mld`]) shares them: `N = 4` for IGMPv3, `N = 16` for MLDv2.
//!
//! The view must cover exactly the IGMP message (the IP payload, without
//! link-layer padding): the message length is what tells an IGMPv3 query
//! from a v1/v2 one.

use core::net::{Ipv4Addr, Ipv6Addr};

use super::{Error, Field, checksum, get_u16, put_u16, put_u32, wire_enum};

wire_enum! {
    /// IGMP message type.
    pub enum Message(u8) {
        /// Membership query, any version (`0x11`).
        MembershipQuery = 0x11,
        /// IGMPv1 membership report (`0x12`).
        V1Report = 0x12,
        /// IGMPv2 membership report (`0x16`).
        V2Report = 0x16,
        /// IGMPv2 leave group (`0x17`).
        LeaveGroup = 0x17,
        /// IGMPv3 membership report (`0x22`).
        V3Report = 0x22,
    }
}

wire_enum! {
    /// IGMPv3 / MLDv2 group (multicast address) record type.
    pub enum RecordType(u8) {
        /// `MODE_IS_INCLUDE` (1).
        ModeIsInclude = 1,
        /// `MODE_IS_EXCLUDE` (2).
        ModeIsExclude = 2,
        /// `CHANGE_TO_INCLUDE_MODE` (3).
        ChangeToInclude = 3,
        /// `CHANGE_TO_EXCLUDE_MODE` (4).
        ChangeToExclude = 4,
        /// `ALLOW_NEW_SOURCES` (5).
        AllowNewSources = 5,
        /// `BLOCK_OLD_SOURCES` (6).
        BlockOldSources = 6,
    }
}

impl RecordType {
    /// Whether a record of this type means "the host wants this group"
    /// (EXCLUDE mode, including EXCLUDE of an empty source list, or new
    /// sources allowed), as opposed to a leave (`TO_IN({})`, `IS_IN({})`).
    /// `num_sources` is the record's source count.
    pub fn is_join(self, num_sources: u16) -> bool {
        match self {
            RecordType::ModeIsExclude | RecordType::ChangeToExclude => true,
            RecordType::ModeIsInclude | RecordType::ChangeToInclude => num_sources > 0,
            RecordType::AllowNewSources => num_sources > 0,
            RecordType::BlockOldSources | RecordType::Unknown(_) => false,
        }
    }
}

/// Which IGMP message a view holds, from its type and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// IGMPv1 query (8 bytes, max response code 0).
    V1Query,
    /// IGMPv2 query (8 bytes, non-zero max response time).
    V2Query,
    /// IGMPv3 query (12 bytes or more).
    V3Query,
    /// IGMPv1 report.
    V1Report,
    /// IGMPv2 report.
    V2Report,
    /// IGMPv2 leave.
    Leave,
    /// IGMPv3 report.
    V3Report,
    /// Any other type.
    Other,
}

/// A read/write view of an IGMP message.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

mod field {
    use super::Field;

    pub const TYPE: usize = 0;
    pub const MAX_RESP: usize = 1;
    pub const CHECKSUM: Field = 2..4;
    pub const GROUP_ADDR: Field = 4..8;
    // v3 query
    pub const S_QRV: usize = 8;
    pub const QQIC: usize = 9;
    pub const NUM_SOURCES: Field = 10..12;
    pub const QUERY_SOURCES: usize = 12;
    // v3 report
    pub const NUM_RECORDS: Field = 6..8;
    pub const RECORDS: usize = 8;
}

/// Length of a v1/v2 message (and the minimum of any IGMP message).
pub const HEADER_LEN: usize = field::GROUP_ADDR.end;
/// Length of an IGMPv3 query without sources.
pub const V3_QUERY_LEN: usize = field::QUERY_SOURCES;

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer, checking it; see [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Packet<T>, Error> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks the 8-byte header is present; for a v3 query, that the source
    /// list fits; for a v3 report, that every announced group record (with
    /// its sources and auxiliary data) fits.
    pub fn check_len(&self) -> Result<(), Error> {
        let data = self.buffer.as_ref();
        if data.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        match self.kind() {
            Kind::V3Query => {
                let n = usize::from(self.num_sources());
                if data.len() < V3_QUERY_LEN + 4 * n {
                    return Err(Error::Truncated);
                }
            }
            Kind::V3Report => {
                let records =
                    GroupRecords::<4>::new(&data[field::RECORDS..], self.num_group_records());
                if !records.all_fit() {
                    return Err(Error::Truncated);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Message type.
    pub fn msg_type(&self) -> Message {
        Message::from(self.buffer.as_ref()[field::TYPE])
    }

    /// The message kind, from the type, the length and the max response code.
    pub fn kind(&self) -> Kind {
        let data = self.buffer.as_ref();
        match self.msg_type() {
            Message::MembershipQuery if data.len() >= V3_QUERY_LEN => Kind::V3Query,
            Message::MembershipQuery if self.max_resp_code() == 0 => Kind::V1Query,
            Message::MembershipQuery => Kind::V2Query,
            Message::V1Report => Kind::V1Report,
            Message::V2Report => Kind::V2Report,
            Message::LeaveGroup => Kind::Leave,
            Message::V3Report => Kind::V3Report,
            Message::Unknown(_) => Kind::Other,
        }
    }

    /// Max response code (v2/v3 queries; 0 in v1).
    pub fn max_resp_code(&self) -> u8 {
        self.buffer.as_ref()[field::MAX_RESP]
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Whether the checksum over the whole message verifies.
    pub fn verify_checksum(&self) -> bool {
        checksum::sum(self.buffer.as_ref()) == 0xffff
    }

    /// Group address (v1/v2 messages and queries; 0.0.0.0 in general queries).
    pub fn group_addr(&self) -> Ipv4Addr {
        let d = self.buffer.as_ref();
        Ipv4Addr::new(d[4], d[5], d[6], d[7])
    }

    /// v3 query: the S (suppress router-side processing) flag (false for
    /// messages too short to be a v3 query).
    pub fn s_flag(&self) -> bool {
        self.byte(field::S_QRV) & 0x08 != 0
    }

    /// v3 query: querier's robustness variable (0 when absent).
    pub fn qrv(&self) -> u8 {
        self.byte(field::S_QRV) & 0x07
    }

    /// v3 query: querier's query interval code (0 when absent).
    pub fn qqic(&self) -> u8 {
        self.byte(field::QQIC)
    }

    /// v3 query: number of sources (0 for messages too short to be a v3 query).
    pub fn num_sources(&self) -> u16 {
        super::read_u16(self.buffer.as_ref(), field::NUM_SOURCES.start).unwrap_or(0)
    }

    fn byte(&self, at: usize) -> u8 {
        self.buffer.as_ref().get(at).copied().unwrap_or(0)
    }

    /// v3 query: the source addresses (as many as announced and present).
    pub fn query_sources(&self) -> Sources<'_, 4> {
        let data = self.buffer.as_ref();
        let n = usize::from(self.num_sources());
        Sources::new(data.get(field::QUERY_SOURCES..).unwrap_or(&[]), n)
    }

    /// v3 report: number of group records.
    pub fn num_group_records(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::NUM_RECORDS)
    }

    /// v3 report: the group records (stops at the first that does not fit).
    pub fn group_records(&self) -> GroupRecords<'_, 4> {
        let data = self.buffer.as_ref();
        GroupRecords::new(
            data.get(field::RECORDS..).unwrap_or(&[]),
            self.num_group_records(),
        )
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the message type.
    pub fn set_msg_type(&mut self, value: Message) {
        self.buffer.as_mut()[field::TYPE] = value.into();
    }

    /// Sets the max response code.
    pub fn set_max_resp_code(&mut self, value: u8) {
        self.buffer.as_mut()[field::MAX_RESP] = value;
    }

    /// Sets the group address (v1/v2/queries).
    pub fn set_group_addr(&mut self, value: Ipv4Addr) {
        put_u32(self.buffer.as_mut(), field::GROUP_ADDR, value.into());
    }

    /// v3 report: zeroes the reserved word and sets the record count.
    pub fn set_v3_report_header(&mut self, num_records: u16) {
        let b = self.buffer.as_mut();
        put_u16(b, 4..6, 0);
        put_u16(b, field::NUM_RECORDS, num_records);
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

/// One IGMPv3 group record (`N = 4`) or MLDv2 multicast address record
/// (`N = 16`): type, aux data length, source count, multicast address,
/// sources, aux data. Only constructed when the whole record fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupRecord<'a, const N: usize> {
    bytes: &'a [u8],
}

impl<'a, const N: usize> GroupRecord<'a, N> {
    /// The record type.
    pub fn record_type(&self) -> RecordType {
        RecordType::from(self.bytes[0])
    }

    /// Auxiliary data length in 32-bit words.
    pub fn aux_data_len(&self) -> u8 {
        self.bytes[1]
    }

    /// Number of sources.
    pub fn num_sources(&self) -> u16 {
        get_u16(self.bytes, 2..4)
    }

    /// Multicast address octets.
    pub fn multicast_addr_octets(&self) -> [u8; N] {
        let mut a = [0u8; N];
        a.copy_from_slice(&self.bytes[4..4 + N]);
        a
    }

    /// The source addresses (all fit: the record was checked).
    pub fn sources(&self) -> Sources<'a, N> {
        Sources::new(&self.bytes[4 + N..], usize::from(self.num_sources()))
    }

    /// The auxiliary data.
    pub fn aux_data(&self) -> &'a [u8] {
        &self.bytes[4 + N + N * usize::from(self.num_sources())..]
    }

    /// Whole record length in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Always false: a record has at least its fixed part.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Whether this record asks to receive the group (see [`RecordType::is_join`]).
    pub fn is_join(&self) -> bool {
        self.record_type().is_join(self.num_sources())
    }
}

impl GroupRecord<'_, 4> {
    /// The IPv4 group address.
    pub fn multicast_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.multicast_addr_octets())
    }
}

impl GroupRecord<'_, 16> {
    /// The IPv6 multicast address.
    pub fn multicast_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.multicast_addr_octets())
    }
}

/// Length of the record starting at `bytes`, if its fixed part can be read
/// (the caller checks the whole length fits).
fn record_len<const N: usize>(bytes: &[u8]) -> Option<usize> {
    let aux = usize::from(*bytes.get(1)?);
    let nsrc = usize::from(super::read_u16(bytes, 2)?);
    Some(4 + N + N * nsrc + 4 * aux)
}

/// Iterator over group records; yields each record that fits, up to the
/// announced count, and stops at the first that does not.
#[derive(Debug, Clone)]
pub struct GroupRecords<'a, const N: usize> {
    rest: &'a [u8],
    remaining: u16,
}

impl<'a, const N: usize> GroupRecords<'a, N> {
    /// Iterates `count` records packed in `bytes`.
    pub fn new(bytes: &'a [u8], count: u16) -> Self {
        GroupRecords {
            rest: bytes,
            remaining: count,
        }
    }

    /// Whether all announced records fit (consumes a copy of the iterator).
    pub fn all_fit(&self) -> bool {
        let n = self.remaining;
        self.clone().count() == usize::from(n)
    }
}

impl<'a, const N: usize> Iterator for GroupRecords<'a, N> {
    type Item = GroupRecord<'a, N>;

    fn next(&mut self) -> Option<GroupRecord<'a, N>> {
        if self.remaining == 0 {
            return None;
        }
        let len = record_len::<N>(self.rest);
        let Some((bytes, rest)) = len.and_then(|l| self.rest.split_at_checked(l)) else {
            self.remaining = 0;
            return None;
        };
        self.rest = rest;
        self.remaining -= 1;
        Some(GroupRecord { bytes })
    }
}

/// Iterator over a packed list of `N`-byte source addresses.
#[derive(Debug, Clone)]
pub struct Sources<'a, const N: usize> {
    chunks: core::iter::Take<core::slice::ChunksExact<'a, u8>>,
}

impl<'a, const N: usize> Sources<'a, N> {
    /// Iterates up to `count` addresses packed in `bytes`.
    pub fn new(bytes: &'a [u8], count: usize) -> Self {
        Sources {
            chunks: bytes.chunks_exact(N).take(count),
        }
    }
}

impl<const N: usize> Iterator for Sources<'_, N> {
    type Item = [u8; N];

    fn next(&mut self) -> Option<[u8; N]> {
        let c = self.chunks.next()?;
        let mut a = [0u8; N];
        a.copy_from_slice(c);
        Some(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static V2_REPORT: [u8; 8] = [
        0x16, // type: v2 report
        0x00, // max resp
        0x09, 0x04, // checksum
        0xe0, 0x00, 0x00, 0xfb, // group 224.0.0.251
    ];

    static V3_REPORT: [u8; 36] = [
        0x22, // type: v3 report
        0x00, // reserved
        0x00, 0x00, // checksum (filled by the tests)
        0x00, 0x00, // reserved
        0x00, 0x02, // 2 group records
        // record 1: CHANGE_TO_EXCLUDE, no aux, 0 sources, 239.1.2.3 (a join)
        0x04, 0x00, 0x00, 0x00, 0xef, 0x01, 0x02, 0x03,
        // record 2: ALLOW_NEW_SOURCES, aux 1 word, 2 sources, 232.1.1.1
        0x05, 0x01, 0x00, 0x02, 0xe8, 0x01, 0x01, 0x01, //
        0x0a, 0x00, 0x00, 0x01, // source 10.0.0.1
        0x0a, 0x00, 0x00, 0x02, // source 10.0.0.2
        0xde, 0xad, 0xbe, 0xef, // aux data
    ];

    static V3_QUERY: [u8; 16] = [
        0x11, // type: query
        0x64, // max resp code 100
        0x00, 0x00, // checksum
        0xe8, 0x01, 0x01, 0x01, // group 232.1.1.1
        0x0a, // S=1, QRV=2
        0x7d, // QQIC 125
        0x00, 0x01, // 1 source
        0x0a, 0x00, 0x00, 0x01, // source 10.0.0.1
    ];

    #[test]
    fn deconstruct_v2() {
        let p = Packet::new_checked(&V2_REPORT[..]).unwrap();
        assert_eq!(p.msg_type(), Message::V2Report);
        assert_eq!(p.kind(), Kind::V2Report);
        assert_eq!(p.group_addr(), Ipv4Addr::new(224, 0, 0, 251));
        assert!(p.verify_checksum());
    }

    #[test]
    fn construct_v2() {
        let mut buf = [0xa5u8; 8];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_msg_type(Message::V2Report);
        p.set_max_resp_code(0);
        p.set_group_addr(Ipv4Addr::new(224, 0, 0, 251));
        p.fill_checksum();
        assert_eq!(buf, V2_REPORT);
    }

    #[test]
    fn deconstruct_v3_report() {
        let p = Packet::new_checked(&V3_REPORT[..]).unwrap();
        assert_eq!(p.kind(), Kind::V3Report);
        assert_eq!(p.num_group_records(), 2);
        let recs: Vec<_> = p.group_records().collect();
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0].record_type(), RecordType::ChangeToExclude);
        assert_eq!(recs[0].multicast_addr(), Ipv4Addr::new(239, 1, 2, 3));
        assert!(recs[0].is_join());
        assert_eq!(recs[0].len(), 8);
        assert_eq!(recs[1].record_type(), RecordType::AllowNewSources);
        assert_eq!(recs[1].aux_data_len(), 1);
        assert_eq!(recs[1].multicast_addr(), Ipv4Addr::new(232, 1, 1, 1));
        let srcs: Vec<_> = recs[1].sources().map(Ipv4Addr::from).collect();
        assert_eq!(
            srcs,
            [Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2)]
        );
        assert_eq!(recs[1].aux_data(), &[0xde, 0xad, 0xbe, 0xef]);
    }

    #[test]
    fn construct_v3_report() {
        let mut buf = [0xa5u8; 36];
        buf[8..].copy_from_slice(&V3_REPORT[8..]);
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_msg_type(Message::V3Report);
        p.set_max_resp_code(0);
        p.set_v3_report_header(2);
        p.set_checksum(0);
        assert_eq!(buf, V3_REPORT);
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.fill_checksum();
        assert!(p.verify_checksum());
    }

    #[test]
    fn deconstruct_v3_query() {
        let p = Packet::new_checked(&V3_QUERY[..]).unwrap();
        assert_eq!(p.kind(), Kind::V3Query);
        assert_eq!(p.max_resp_code(), 100);
        assert!(p.s_flag());
        assert_eq!(p.qrv(), 2);
        assert_eq!(p.qqic(), 125);
        assert_eq!(p.group_addr(), Ipv4Addr::new(232, 1, 1, 1));
        let srcs: Vec<_> = p.query_sources().map(Ipv4Addr::from).collect();
        assert_eq!(srcs, [Ipv4Addr::new(10, 0, 0, 1)]);
        // The same type in 8 bytes is a v2 (or, with max resp 0, v1) query.
        assert_eq!(
            Packet::new_checked(&V3_QUERY[..8]).unwrap().kind(),
            Kind::V2Query
        );
        let mut v1 = V3_QUERY;
        v1[1] = 0;
        assert_eq!(Packet::new_checked(&v1[..8]).unwrap().kind(), Kind::V1Query);
    }

    #[test]
    fn impossible_len() {
        assert_eq!(
            Packet::new_checked(&V2_REPORT[..7]).unwrap_err(),
            Error::Truncated
        );
        // Sources announced but cut.
        assert_eq!(
            Packet::new_checked(&V3_QUERY[..15]).unwrap_err(),
            Error::Truncated
        );
        // Every cut inside the records is caught, and the iterator never overruns.
        for cut in 8..V3_REPORT.len() {
            let p = Packet::new_unchecked(&V3_REPORT[..cut]);
            assert_eq!(p.check_len(), Err(Error::Truncated), "cut at {cut}");
            assert!(p.group_records().count() < 2);
        }
        // More records announced than present.
        let mut more = V3_REPORT;
        more[7] = 3;
        assert_eq!(
            Packet::new_checked(&more[..]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(Packet::new_unchecked(&more[..]).group_records().count(), 2);
    }

    #[test]
    fn every_accessor_on_every_kind() {
        for msg in [
            &V2_REPORT[..],
            &V3_REPORT[..],
            &V3_QUERY[..],
            &V3_QUERY[..8],
        ] {
            let p = Packet::new_checked(msg).unwrap();
            let _ = (
                p.kind(),
                p.max_resp_code(),
                p.group_addr(),
                p.s_flag(),
                p.qrv(),
            );
            let _ = (p.qqic(), p.num_sources(), p.query_sources().count());
            let _ = (p.num_group_records(), p.group_records().count());
        }
    }

    #[test]
    fn join_semantics() {
        assert!(RecordType::ModeIsExclude.is_join(0));
        assert!(!RecordType::ChangeToInclude.is_join(0));
        assert!(RecordType::ChangeToInclude.is_join(1));
        assert!(!RecordType::BlockOldSources.is_join(3));
    }
}
