//! Classic libpcap format: a 24-byte file header, then 16-byte record
//! headers each followed by the captured bytes.
//!
//! Versions as libpcap reads them: 2.0 to 2.4, and 543.0 (DG/UX tcpdump).
//! Files older than 2.3 (and 543.0) have the captured and original
//! lengths of each record the other way round, and 2.3 files may (libpcap
//! swaps them when the captured length is the larger); all are read as
//! libpcap does.

use crate::wire::LinkType;

use super::source::{Fault, Source, grow, u16_at, u32_at};
use super::{CaptureErrorKind, MAX_RECORD_LEN, Meta};

/// pcap file header length.
pub(super) const FILE_HEADER_LEN: usize = 24;
/// pcap record header length.
pub(super) const RECORD_HEADER_LEN: usize = 16;

/// Magic numbers as they appear in the file, first four bytes.
pub(super) const MAGIC_US_LE: [u8; 4] = [0xd4, 0xc3, 0xb2, 0xa1];
pub(super) const MAGIC_US_BE: [u8; 4] = [0xa1, 0xb2, 0xc3, 0xd4];
pub(super) const MAGIC_NS_LE: [u8; 4] = [0x4d, 0x3c, 0xb2, 0xa1];
pub(super) const MAGIC_NS_BE: [u8; 4] = [0xa1, 0xb2, 0x3c, 0x4d];

/// Bits 16-25 of the link-type field: reserved, must be zero (libpcap's
/// and Wireshark's `LT_RESERVED1`).
const LT_RESERVED_MASK: u32 = 0x03ff_0000;
/// Bit 26: the FCS-length field (bits 28-31) is meaningful.
const LT_FCS_PRESENT: u32 = 0x0400_0000;

/// What the file header says, as the record reader needs it.
#[derive(Debug, Clone, Copy)]
pub(super) struct PcapHeader {
    big_endian: bool,
    nanos: bool,
    link_type: LinkType,
    /// FCS bytes at the end of each frame, when the header says.
    pub(super) fcs_len: Option<u8>,
    /// How the record lengths are ordered (see the module docs).
    lengths: Lengths,
}

/// The order of a record's captured and original lengths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lengths {
    /// Captured, then original (2.4).
    InOrder,
    /// Original, then captured (before 2.3, and 543.0).
    Swapped,
    /// Swapped when the first is the larger (2.3).
    MaybeSwapped,
}

/// Reads and checks the 24-byte file header. The caller has checked that
/// the first four bytes are one of the pcap magics.
pub(super) fn read_header(src: &mut Source) -> Result<PcapHeader, Fault> {
    let mut h = [0u8; FILE_HEADER_LEN];
    src.read_exact(&mut h, "pcap file header", 0, 0, FILE_HEADER_LEN as u64)?;
    let (big_endian, nanos) = match [h[0], h[1], h[2], h[3]] {
        MAGIC_US_LE => (false, false),
        MAGIC_US_BE => (true, false),
        MAGIC_NS_LE => (false, true),
        MAGIC_NS_BE => (true, true),
        other => {
            return Err(Fault::new(
                0,
                CaptureErrorKind::BadMagic(u32::from_be_bytes(other)),
            ));
        }
    };
    let major = u16_at(&h, 4, big_endian);
    let minor = u16_at(&h, 6, big_endian);
    let lengths = match (major, minor) {
        // DG/UX tcpdump's 543.0 writes the pre-2.3 order.
        (2, 0..=2) | (543, 0) => Lengths::Swapped,
        (2, 3) => Lengths::MaybeSwapped,
        (2, 4) => Lengths::InOrder,
        _ => {
            return Err(Fault::new(
                4,
                CaptureErrorKind::UnsupportedVersion {
                    format: "pcap",
                    major,
                    minor,
                },
            ));
        }
    };
    // Bytes 8..16 (thiszone, sigfigs) are always zero in practice and
    // ignored, as libpcap does. The snapshot length (16..20) only says what
    // the capture asked for; each record carries its own length, which is
    // what we check.
    let field = u32_at(&h, 20, big_endian);
    if field & LT_RESERVED_MASK != 0 {
        return Err(Fault::new(20, CaptureErrorKind::LinkTypeReserved(field)));
    }
    let fcs_len = (field & LT_FCS_PRESENT != 0).then(|| {
        // Bits 28-31 count 16-bit words.
        ((field >> 28) as u8) * 2
    });
    Ok(PcapHeader {
        big_endian,
        nanos,
        link_type: LinkType::from_linktype(field & 0xffff),
        fcs_len,
        lengths,
    })
}

/// Reads the next record into `buf`. `Ok(None)` at a clean end of file
/// (the stream ends exactly between records).
pub(super) fn next_record(
    hdr: &PcapHeader,
    src: &mut Source,
    buf: &mut Vec<u8>,
) -> Result<Option<Meta>, Fault> {
    let start = src.pos();
    let mut rh = [0u8; RECORD_HEADER_LEN];
    let got = src.read_some(&mut rh, start)?;
    if got == 0 {
        return Ok(None);
    }
    if got < RECORD_HEADER_LEN {
        return Err(Fault::new(
            start,
            CaptureErrorKind::Truncated {
                what: "record header",
                got: got as u64,
                need: RECORD_HEADER_LEN as u64,
            },
        ));
    }
    let be = hdr.big_endian;
    let sec = u64::from(u32_at(&rh, 0, be));
    let frac = u64::from(u32_at(&rh, 4, be));
    let (first, second) = (u32_at(&rh, 8, be), u32_at(&rh, 12, be));
    let (caplen, orig_len) = match hdr.lengths {
        Lengths::InOrder => (first, second),
        Lengths::Swapped => (second, first),
        Lengths::MaybeSwapped if first > second => (second, first),
        Lengths::MaybeSwapped => (first, second),
    };
    if caplen > MAX_RECORD_LEN {
        return Err(Fault::new(
            start + 8,
            CaptureErrorKind::RecordTooLarge {
                len: u64::from(caplen),
                max: MAX_RECORD_LEN,
            },
        ));
    }
    // Bounded by MAX_RECORD_LEN above.
    let n = caplen as usize;
    src.read_exact(
        grow(buf, n),
        "record data",
        start + RECORD_HEADER_LEN as u64,
        0,
        u64::from(caplen),
    )?;
    // Cannot overflow: u32::MAX * 1e9 + u32::MAX * 1e3 < 2^64.
    let ts_ns = sec * 1_000_000_000 + if hdr.nanos { frac } else { frac * 1_000 };
    Ok(Some(Meta {
        ts_ns,
        interface: 0,
        orig_len,
        link_type: hdr.link_type,
        data: 0..n,
    }))
}
