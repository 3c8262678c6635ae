//! Capture files: read classic pcap and pcapng, either of them gzip-compressed,
//! and write classic pcap and pcapng.
//!
//! # Reading
//!
//! [`CaptureReader`] detects the format from the first bytes: `1f 8b` is
//! gzip (decompressed transparently, multi-member streams included), then
//! the pcap magics `a1b2c3d4` (microsecond timestamps) and `a1b23c4d`
//! (nanosecond) in either byte order, or the pcapng section header block
//! type `0a0d0d0a`. Anything else is [`CaptureErrorKind::BadMagic`], or
//! [`CaptureErrorKind::BadMagicInGzip`] for gzip data that is not a
//! capture. Bytes after a gzip file's last member that do not start
//! another, a member cut short or corrupt, are a
//! [`CaptureErrorKind::Gzip`] naming the compressed byte and what was
//! found there ([`GzipError`]).
//!
//! * **pcap**: the version must be 2.4. The link-type field keeps the link
//!   type in its low 16 bits; bits 16-25 are reserved and must be zero, and
//!   a file with any of them set is rejected at byte 20 with
//!   [`CaptureErrorKind::LinkTypeReserved`]. That is what the pcap
//!   specification (draft-ietf-opsawg-pcap) and Wireshark do; libpcap
//!   instead masks with `0x03ffffff` and so takes the reserved bits as part
//!   of the link type, which yields a number no decoder knows. Rejecting
//!   says why at once. `libpcap_linktype-reserved-field-not-zero.pcap` in
//!   the project's test captures is such a file (header only, field
//!   `0x00300000`): opening it fails at byte 20.
//!   Bits 26-31 carry an optional FCS length; it is reported by
//!   [`CaptureReader::pcap_fcs_len`] and otherwise ignored (the FCS stays in
//!   the data). `thiszone`, `sigfigs` and the snapshot length are ignored,
//!   as libpcap ignores them when reading.
//! * **pcapng**: each section header sets the byte order (from its
//!   byte-order magic) and must have major version 1. Interface description
//!   blocks give each interface's link type, snapshot length, timestamp
//!   resolution (`if_tsresol`, as a power of 10 or, with the top bit set, of
//!   2; microseconds by default) and `if_tsoffset`. Packets come from
//!   enhanced packet blocks, simple packet blocks (which carry no timestamp:
//!   `ts_ns` is 0, as libpcap reports) and the obsolete packet block (type
//!   2). Every other block is skipped by its length without being buffered.
//!   A new section header starts a new set of interfaces. Each record says
//!   which interface it came from ([`Record::interface`]) and the reader
//!   names the section's interfaces ([`CaptureReader::interface_name`],
//!   the `if_name` option, which must be UTF-8), so that a router can map a
//!   capture's interfaces to its ports by name.
//!
//! Every pcapng block length is checked: at least 12 (and the least its
//! type can hold), a multiple of 4, equal to the trailing copy at the end of
//! the block; the options of every block this reader loads (section,
//! interface and packet blocks) must each fit, padding included, inside the
//! block. A packet naming an interface its section has not declared is an
//! error.
//!
//! # Limits: nothing is allocated from a length field unchecked
//!
//! A packet's captured length may not exceed [`MAX_RECORD_LEN`] (256 KiB,
//! libpcap's limit for all but a few exotic link types), and a block the
//! reader loads may not exceed [`MAX_BLOCK_LEN`]; other blocks are skipped
//! by streaming, however long they claim to be. A section may declare at
//! most [`MAX_INTERFACES`] interfaces. The one packet buffer grows
//! to the largest record seen and is reused, so memory is bounded by those
//! limits whatever the input. A record's original length above
//! [`MAX_ORIG_LEN`] (16 MiB; a record claiming 4 GB for 60 bytes) is taken
//! as its captured length and counted ([`CaptureReader::lengths_fixed`]).
//! Malformed input never panics; it yields a
//! [`CaptureError`] naming the file, the byte offset and the fault.
//!
//! # Why not the `pcap-file` crate
//!
//! `pcap-file` 2.x reads both formats well, but its errors carry no byte
//! offset (a cut file surfaces as a bare `UnexpectedEof`), it buffers 8 MB
//! per reader and sizes reads from the block length field, and its buffer
//! management relies on `unsafe`. Offsets in every error, bounded memory and
//! no `unsafe` are requirements here, and the formats are small, so this
//! module reads them itself over [`std::io::Read`] with one reused buffer.
//! (`pcap-parser` is a `nom` parser over byte slices: the same offsets would
//! have to be rebuilt around it.)
//!
//! # Writing
//!
//! [`CaptureWriter`] writes classic pcap, little-endian, with nanosecond
//! timestamps by default ([`TimeResolution::Micro`] on request).
//! [`PcapNgWriter`] writes pcapng with several named interfaces and
//! nanosecond timestamps, each packet on one of them (its module docs say
//! why it is not the `pcap-file` crate's writer).

mod error;
mod gzip;
mod pcap;
mod pcapng;
mod pcapng_writer;
mod reader;
mod source;
mod writer;

use std::ops::Range;
use std::path::Path;

use crate::wire::LinkType;

pub use error::{CaptureError, CaptureErrorKind};
pub use gzip::GzipError;
pub use pcapng_writer::PcapNgWriter;
pub use reader::{CaptureReader, MAX_ORIG_LEN};
pub use writer::{CaptureWriter, TimeResolution};

/// The largest captured length accepted for one packet: 256 KiB, libpcap's
/// `MAXIMUM_SNAPLEN`.
pub const MAX_RECORD_LEN: u32 = 256 * 1024;

/// The largest pcapng block the reader loads into memory (section headers,
/// interface descriptions, packets): a maximal packet plus 64 KiB of headers
/// and options. Other blocks are skipped whatever their length.
pub const MAX_BLOCK_LEN: u32 = MAX_RECORD_LEN + 64 * 1024;

/// Interfaces one pcapng section may declare (real captures have a few;
/// each kept costs about 50 bytes, and an interface block is 20 bytes
/// that compress to almost nothing).
pub const MAX_INTERFACES: usize = 65_536;

/// The container format of a capture file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileFormat {
    /// Classic libpcap format.
    Pcap,
    /// pcapng.
    Pcapng,
}

/// What a [`CaptureReader`] found: the container, and whether it was
/// gzip-compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CaptureFormat {
    /// pcap or pcapng.
    pub file: FileFormat,
    /// Whether the stream was gzip-compressed.
    pub gzip: bool,
}

/// One captured packet, borrowed from the reader's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Capture time in nanoseconds since the Unix epoch (0 for pcapng simple
    /// packet blocks, which carry no time).
    pub ts_ns: u64,
    /// The pcapng interface the packet was captured on (its id in the
    /// current section: [`CaptureReader::interface_name`] names it); 0 for
    /// classic pcap and for pcapng simple packet blocks.
    pub interface: u32,
    /// The packet's length on the wire; `data` may be shorter (snaplen).
    pub orig_len: u32,
    /// The link-layer type `data` starts with.
    pub link_type: LinkType,
    /// The captured bytes.
    pub data: &'a [u8],
}

impl Record<'_> {
    /// Copies the record out of the reader's buffer.
    pub fn to_owned_record(&self) -> OwnedRecord {
        OwnedRecord {
            ts_ns: self.ts_ns,
            interface: self.interface,
            orig_len: self.orig_len,
            link_type: self.link_type,
            data: self.data.to_vec(),
        }
    }
}

/// A [`Record`] that owns its bytes, for tests and tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedRecord {
    /// Capture time in nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// The pcapng interface id (0 for classic pcap), as in [`Record`].
    pub interface: u32,
    /// The packet's length on the wire.
    pub orig_len: u32,
    /// The link-layer type `data` starts with.
    pub link_type: LinkType,
    /// The captured bytes.
    pub data: Vec<u8>,
}

impl OwnedRecord {
    /// Borrows this record as a [`Record`].
    pub fn as_record(&self) -> Record<'_> {
        Record {
            ts_ns: self.ts_ns,
            interface: self.interface,
            orig_len: self.orig_len,
            link_type: self.link_type,
            data: &self.data,
        }
    }
}

impl From<Record<'_>> for OwnedRecord {
    fn from(r: Record<'_>) -> Self {
        r.to_owned_record()
    }
}

/// A record's fields with its data as a range of the reader's buffer.
#[derive(Debug, Clone)]
struct Meta {
    ts_ns: u64,
    interface: u32,
    orig_len: u32,
    link_type: LinkType,
    data: Range<usize>,
}

/// Reads a whole capture file into memory: every record before the first
/// fault, and the fault, if any. Meant for tests and tools; the dataplane
/// streams with [`CaptureReader`].
pub fn read_all(path: impl AsRef<Path>) -> (Vec<OwnedRecord>, Option<CaptureError>) {
    let mut reader = match CaptureReader::open(path.as_ref()) {
        Ok(r) => r,
        Err(e) => return (Vec::new(), Some(e)),
    };
    drain(&mut reader)
}

/// Reads every remaining record of `reader` into memory, with the fault
/// that stopped it, if any.
pub fn drain(reader: &mut CaptureReader) -> (Vec<OwnedRecord>, Option<CaptureError>) {
    let mut out = Vec::new();
    loop {
        match reader.next_record() {
            Ok(Some(r)) => out.push(r.to_owned_record()),
            Ok(None) => return (out, None),
            Err(e) => return (out, Some(e)),
        }
    }
}
