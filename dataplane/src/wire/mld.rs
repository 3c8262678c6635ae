//! MLD (ICMPv6 types 130-132, 143): v1 queries, reports and dones
//! (RFC 2710), v2 queries and reports with multicast address records
//! (RFC 3810). The view covers the whole ICMPv6 message, exactly (the IPv6
//! upper-layer payload); a query of 28 bytes or more is a v2 query.

use core::net::Ipv6Addr;

pub use super::igmp::{GroupRecord, GroupRecords, RecordType, Sources};
use super::{Error, Field, get_u16, icmpv6::Message, put_u16};

/// Which MLD message a view holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// MLDv1 query (24 bytes).
    V1Query,
    /// MLDv2 query (28 bytes or more).
    V2Query,
    /// MLDv1 report.
    V1Report,
    /// MLDv1 done.
    Done,
    /// MLDv2 report.
    V2Report,
    /// Not an MLD message.
    Other,
}

/// A read/write view of an MLD message (an ICMPv6 message of an MLD type).
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

mod field {
    use super::Field;

    pub const TYPE: usize = 0;
    pub const MAX_RESP: Field = 4..6;
    pub const MCAST_ADDR: Field = 8..24;
    // v2 query
    pub const S_QRV: usize = 24;
    pub const QQIC: usize = 25;
    pub const NUM_SOURCES: Field = 26..28;
    pub const QUERY_SOURCES: usize = 28;
    // v2 report
    pub const NUM_RECORDS: Field = 6..8;
    pub const RECORDS: usize = 8;
}

/// Length of an MLDv1 message.
pub const V1_LEN: usize = field::MCAST_ADDR.end;
/// Length of an MLDv2 query without sources.
pub const V2_QUERY_LEN: usize = field::QUERY_SOURCES;
/// Length of an MLDv2 report without records.
pub const V2_REPORT_LEN: usize = field::RECORDS;

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

    /// Checks the message is an MLD type ([`Error::Malformed`] otherwise),
    /// that the v1 message (24 bytes) or v2 report header (8 bytes) is
    /// present, and that every announced source and record fits.
    pub fn check_len(&self) -> Result<(), Error> {
        let data = self.buffer.as_ref();
        if data.is_empty() {
            return Err(Error::Truncated);
        }
        match self.kind() {
            Kind::Other => Err(Error::Malformed),
            Kind::V1Query | Kind::V1Report | Kind::Done if data.len() < V1_LEN => {
                Err(Error::Truncated)
            }
            Kind::V2Query if data.len() < V2_QUERY_LEN + 16 * usize::from(self.num_sources()) => {
                Err(Error::Truncated)
            }
            Kind::V2Report if data.len() < V2_REPORT_LEN || !self.records().all_fit() => {
                Err(Error::Truncated)
            }
            _ => Ok(()),
        }
    }

    fn records(&self) -> GroupRecords<'_, 16> {
        let data = self.buffer.as_ref();
        let n = super::read_u16(data, field::NUM_RECORDS.start).unwrap_or(0);
        GroupRecords::new(data.get(field::RECORDS..).unwrap_or(&[]), n)
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The ICMPv6 type.
    pub fn msg_type(&self) -> Message {
        Message::from(self.buffer.as_ref()[field::TYPE])
    }

    /// The message kind, from the type and, for queries, the length.
    pub fn kind(&self) -> Kind {
        match self.msg_type() {
            Message::MldQuery if self.buffer.as_ref().len() >= V2_QUERY_LEN => Kind::V2Query,
            Message::MldQuery => Kind::V1Query,
            Message::MldReport => Kind::V1Report,
            Message::MldDone => Kind::Done,
            Message::MldReportV2 => Kind::V2Report,
            _ => Kind::Other,
        }
    }

    /// Maximum response code (queries).
    pub fn max_resp_code(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::MAX_RESP)
    }

    /// The multicast address of a v1 message or a query (`::` in a general
    /// query, and for a v2 report, which has none).
    pub fn multicast_addr(&self) -> Ipv6Addr {
        match self.buffer.as_ref().get(field::MCAST_ADDR) {
            Some(b) => {
                let mut a = [0u8; 16];
                a.copy_from_slice(b);
                Ipv6Addr::from(a)
            }
            None => Ipv6Addr::UNSPECIFIED,
        }
    }

    /// v2 query: S flag (false for other messages).
    pub fn s_flag(&self) -> bool {
        self.byte(field::S_QRV) & 0x08 != 0
    }

    /// v2 query: querier's robustness variable (0 for other messages).
    pub fn qrv(&self) -> u8 {
        self.byte(field::S_QRV) & 0x07
    }

    /// v2 query: querier's query interval code (0 for other messages).
    pub fn qqic(&self) -> u8 {
        self.byte(field::QQIC)
    }

    fn byte(&self, at: usize) -> u8 {
        self.buffer.as_ref().get(at).copied().unwrap_or(0)
    }

    /// v2 query: number of sources.
    pub fn num_sources(&self) -> u16 {
        super::read_u16(self.buffer.as_ref(), field::NUM_SOURCES.start).unwrap_or(0)
    }

    /// v2 query: sources (as many as announced and present).
    pub fn query_sources(&self) -> Sources<'_, 16> {
        let data = self.buffer.as_ref();
        let srcs = data.get(field::QUERY_SOURCES..).unwrap_or(&[]);
        Sources::new(srcs, usize::from(self.num_sources()))
    }

    /// v2 report: number of multicast address records.
    pub fn num_records(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::NUM_RECORDS)
    }

    /// v2 report: the multicast address records (stops at the first that
    /// does not fit).
    pub fn address_records(&self) -> GroupRecords<'_, 16> {
        self.records()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the ICMPv6 type (an MLD type) and zeroes the code.
    pub fn set_msg_type(&mut self, value: Message) {
        let b = self.buffer.as_mut();
        b[field::TYPE] = value.into();
        b[1] = 0;
    }

    /// Sets the maximum response code.
    pub fn set_max_resp_code(&mut self, value: u16) {
        put_u16(self.buffer.as_mut(), field::MAX_RESP, value);
    }

    /// v1 message: zeroes the reserved field and sets the multicast address.
    pub fn set_v1_body(&mut self, addr: Ipv6Addr) {
        let b = self.buffer.as_mut();
        put_u16(b, 6..8, 0);
        b[field::MCAST_ADDR].copy_from_slice(&addr.octets());
    }

    /// v2 report: zeroes the reserved field and sets the record count.
    pub fn set_v2_report_header(&mut self, num_records: u16) {
        let b = self.buffer.as_mut();
        put_u16(b, 4..6, 0);
        put_u16(b, field::NUM_RECORDS, num_records);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static V1_REPORT: [u8; 24] = [
        0x83, // type 131: MLDv1 report
        0x00, // code
        0x00, 0x00, // checksum (not computed here: needs the IPv6 pseudo-header)
        0x00, 0x00, // max resp delay
        0x00, 0x00, // reserved
        0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xfb, // ff02::fb
    ];

    static V2_REPORT: [u8; 64] = [
        0x8f, // type 143: MLDv2 report
        0x00, // code
        0x00, 0x00, // checksum
        0x00, 0x00, // reserved
        0x00, 0x02, // 2 records
        // record 1: CHANGE_TO_EXCLUDE, no aux, 0 sources, ff02::fb (a join)
        0x04, 0x00, 0x00, 0x00, //
        0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xfb,
        // record 2: CHANGE_TO_INCLUDE, no aux, 1 source, ff3e::1234
        0x03, 0x00, 0x00, 0x01, //
        0xff, 0x3e, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x12, 0x34, //
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, // 2001:db8::1
    ];

    #[test]
    fn deconstruct_v1() {
        let p = Packet::new_checked(&V1_REPORT[..]).unwrap();
        assert_eq!(p.kind(), Kind::V1Report);
        assert_eq!(p.multicast_addr(), "ff02::fb".parse::<Ipv6Addr>().unwrap());
    }

    #[test]
    fn construct_v1() {
        let mut buf = [0xa5u8; 24];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_msg_type(Message::MldReport);
        p.set_max_resp_code(0);
        p.set_v1_body("ff02::fb".parse().unwrap());
        put_u16(&mut buf, 2..4, 0); // checksum left to the caller
        assert_eq!(buf, V1_REPORT);
    }

    #[test]
    fn deconstruct_v2_report() {
        let p = Packet::new_checked(&V2_REPORT[..]).unwrap();
        assert_eq!(p.kind(), Kind::V2Report);
        assert_eq!(p.num_records(), 2);
        let recs: Vec<_> = p.address_records().collect();
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0].record_type(), RecordType::ChangeToExclude);
        assert_eq!(
            recs[0].multicast_addr(),
            "ff02::fb".parse::<Ipv6Addr>().unwrap()
        );
        assert!(recs[0].is_join());
        assert_eq!(recs[1].record_type(), RecordType::ChangeToInclude);
        assert_eq!(
            recs[1].multicast_addr(),
            "ff3e::1234".parse::<Ipv6Addr>().unwrap()
        );
        let srcs: Vec<_> = recs[1].sources().map(Ipv6Addr::from).collect();
        assert_eq!(srcs, ["2001:db8::1".parse::<Ipv6Addr>().unwrap()]);
        assert!(recs[1].is_join());
    }

    #[test]
    fn construct_v2_report() {
        let mut buf = [0xa5u8; 64];
        buf[8..].copy_from_slice(&V2_REPORT[8..]);
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_msg_type(Message::MldReportV2);
        p.set_v2_report_header(2);
        put_u16(&mut buf, 2..4, 0);
        assert_eq!(buf, V2_REPORT);
    }

    #[test]
    fn v2_query() {
        let mut q = [0u8; 44];
        q[0] = 130;
        q[4..6].copy_from_slice(&[0x27, 0x10]);
        q[24] = 0x02; // QRV 2
        q[25] = 125;
        q[27] = 1; // one source
        q[28] = 0x20;
        let p = Packet::new_checked(&q[..]).unwrap();
        assert_eq!(p.kind(), Kind::V2Query);
        assert_eq!(p.max_resp_code(), 10000);
        assert_eq!((p.s_flag(), p.qrv(), p.qqic()), (false, 2, 125));
        assert_eq!(p.query_sources().count(), 1);
        assert_eq!(Packet::new_checked(&q[..43]).unwrap_err(), Error::Truncated);
        assert_eq!(Packet::new_checked(&q[..24]).unwrap().kind(), Kind::V1Query);
    }

    #[test]
    fn impossible_len() {
        assert_eq!(
            Packet::new_checked(&V1_REPORT[..23]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(Packet::new_checked(&[][..]).unwrap_err(), Error::Truncated);
        let mut echo = V1_REPORT;
        echo[0] = 128;
        assert_eq!(
            Packet::new_checked(&echo[..]).unwrap_err(),
            Error::Malformed
        );
        for cut in 0..V2_REPORT.len() {
            let p = Packet::new_unchecked(&V2_REPORT[..cut]);
            assert_eq!(p.check_len(), Err(Error::Truncated), "cut at {cut}");
            assert!(p.address_records().count() < 2);
        }
    }
}
