//! [`PcapNgWriter`]: pcapng out, one named interface per port.
//!
//! # Why this is written here
//!
//! The format a writer needs is three fixed blocks (section header,
//! interface description, enhanced packet), so this module writes them
//! itself, beside the pcap writer and with its error type (file and byte
//! offset in every error) and its snapshot-length rule. The `pcap-file`
//! crate was considered: its stable 2.0 writes enhanced packet timestamps
//! in nanoseconds whatever `if_tsresol` the interface declares (right
//! here only because we would declare nanoseconds), that is fixed in the
//! 3.0 release candidates, which need a newer Rust than this workspace's
//! `rust-version`, and its errors carry no offset. What is written is
//! checked by reading it back through [`CaptureReader`](super::CaptureReader)
//! and, where installed, by tshark (`dataplane/tests/capture_formats.rs`).

use std::fmt;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use crate::wire::LinkType;

use super::pcapng::{BOM_LE, BT_EPB, BT_IDB, OPT_IF_NAME, OPT_IF_TSRESOL, SHB_MAGIC};
use super::writer::Sink;
use super::{CaptureError, CaptureErrorKind, MAX_RECORD_LEN};

/// `if_tsresol` = 9: timestamps count nanoseconds.
const TSRESOL_NS: u8 = 9;

/// Writes pcapng: one little-endian section whose interfaces are given when
/// the writer is made, each with its `if_name` and nanosecond timestamps
/// (`if_tsresol` = 9); packets as enhanced packet blocks.
///
/// The section header and the interface descriptions are written when the
/// writer is made. Data longer than [`MAX_RECORD_LEN`] (the snapshot length
/// every interface declares) is cut to it, with the original length kept.
/// Call [`PcapNgWriter::finish`] to flush and see write errors: dropping the
/// writer flushes too but cannot report them.
///
/// ```
/// use dataplane::io::capture::{CaptureReader, PcapNgWriter};
/// use dataplane::wire::LinkType;
/// # fn main() -> Result<(), dataplane::io::capture::CaptureError> {
/// let ports = [("r-a", LinkType::Ethernet), ("r-b", LinkType::Ethernet)];
/// let mut w = PcapNgWriter::from_writer(Vec::new(), &ports)?;
/// w.write(1, 1_700_000_000_123_456_789, 60, &[0u8; 60])?;
/// let bytes = w.finish()?;
///
/// let mut r = CaptureReader::from_reader("mem", std::io::Cursor::new(bytes))?;
/// let rec = r.next_record()?.expect("one record");
/// assert_eq!((rec.interface, rec.ts_ns), (1, 1_700_000_000_123_456_789));
/// assert_eq!(r.interface_name(1), Some("r-b"));
/// # Ok(()) }
/// ```
pub struct PcapNgWriter<W: Write = BufWriter<File>> {
    out: Sink<W>,
    interfaces: usize,
}

impl<W: Write> fmt::Debug for PcapNgWriter<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PcapNgWriter")
            .field("name", &self.out.name)
            .field("position", &self.out.pos)
            .field("interfaces", &self.interfaces)
            .finish_non_exhaustive()
    }
}

impl PcapNgWriter<BufWriter<File>> {
    /// Creates (or truncates) the file at `path` and writes the section
    /// header and one interface description per `(name, link type)`, in
    /// order: interface id `i` is `interfaces[i]`.
    pub fn create(path: &Path, interfaces: &[(&str, LinkType)]) -> Result<Self, CaptureError> {
        Self::start(Sink::create(path)?, interfaces)
    }
}

impl<W: Write> PcapNgWriter<W> {
    /// Like [`PcapNgWriter::create`], onto `w`. Errors call the stream
    /// `<writer>`.
    pub fn from_writer(w: W, interfaces: &[(&str, LinkType)]) -> Result<Self, CaptureError> {
        Self::start(Sink::new(w, "<writer>".to_string()), interfaces)
    }

    fn start(out: Sink<W>, interfaces: &[(&str, LinkType)]) -> Result<Self, CaptureError> {
        let mut w = PcapNgWriter {
            out,
            interfaces: interfaces.len(),
        };
        // Section header: byte-order magic, version 1.0, section length
        // unknown (-1), no options.
        let mut shb = [0u8; 28];
        shb[0..4].copy_from_slice(&SHB_MAGIC);
        shb[4..8].copy_from_slice(&28u32.to_le_bytes());
        shb[8..12].copy_from_slice(&BOM_LE);
        shb[12..14].copy_from_slice(&1u16.to_le_bytes());
        shb[16..24].fill(0xff);
        shb[24..28].copy_from_slice(&28u32.to_le_bytes());
        w.out.put(&shb)?;
        for &(name, link_type) in interfaces {
            w.interface(name, link_type)?;
        }
        Ok(w)
    }

    /// One interface description block: link type, snapshot length,
    /// `if_name` (left out when empty), `if_tsresol` = 9, end of options.
    fn interface(&mut self, name: &str, link_type: LinkType) -> Result<(), CaptureError> {
        let name = name.as_bytes();
        let name_len = u16::try_from(name.len())
            .map_err(|_| self.out.error(CaptureErrorKind::NameTooLong(name.len())))?;
        let name_opt = if name.is_empty() {
            0
        } else {
            4 + name.len().next_multiple_of(4)
        };
        // Header 8, fixed fields 8, options (name, tsresol 8, end 4), trailer 4.
        let len = (8 + 8 + name_opt + 8 + 4 + 4) as u32;
        let mut head = [0u8; 16];
        head[0..4].copy_from_slice(&BT_IDB.to_le_bytes());
        head[4..8].copy_from_slice(&len.to_le_bytes());
        // Only 16 bits hold the link type; the next 16 are reserved.
        head[8..10].copy_from_slice(&(link_type.to_linktype() as u16).to_le_bytes());
        head[12..16].copy_from_slice(&MAX_RECORD_LEN.to_le_bytes());
        self.out.put(&head)?;
        if !name.is_empty() {
            self.option_header(OPT_IF_NAME, name_len)?;
            self.out.put(name)?;
            self.pad(name.len())?;
        }
        self.option_header(OPT_IF_TSRESOL, 1)?;
        self.out.put(&[TSRESOL_NS, 0, 0, 0])?;
        // opt_endofopt, then the trailing length.
        self.out.put(&[0; 4])?;
        self.out.put(&len.to_le_bytes())
    }

    fn option_header(&mut self, code: u16, len: u16) -> Result<(), CaptureError> {
        let mut h = [0u8; 4];
        h[0..2].copy_from_slice(&code.to_le_bytes());
        h[2..4].copy_from_slice(&len.to_le_bytes());
        self.out.put(&h)
    }

    /// Zeros after `n` bytes up to the next multiple of 4.
    fn pad(&mut self, n: usize) -> Result<(), CaptureError> {
        self.out.put(&[0; 3][..n.next_multiple_of(4) - n])
    }

    /// Writes one packet captured on `interface` (an index into the
    /// interfaces given at creation) at `ts_ns` nanoseconds since the Unix
    /// epoch, with its original length and captured bytes (cut to
    /// [`MAX_RECORD_LEN`]).
    pub fn write(
        &mut self,
        interface: u32,
        ts_ns: u64,
        orig_len: u32,
        data: &[u8],
    ) -> Result<(), CaptureError> {
        if interface as usize >= self.interfaces {
            return Err(self.out.error(CaptureErrorKind::UnknownInterface {
                id: interface,
                count: self.interfaces,
            }));
        }
        let data = &data[..data.len().min(MAX_RECORD_LEN as usize)];
        // At most MAX_RECORD_LEN, so these fit.
        let caplen = data.len() as u32;
        let len = 32 + caplen.next_multiple_of(4);
        let mut h = [0u8; 28];
        h[0..4].copy_from_slice(&BT_EPB.to_le_bytes());
        h[4..8].copy_from_slice(&len.to_le_bytes());
        h[8..12].copy_from_slice(&interface.to_le_bytes());
        h[12..16].copy_from_slice(&((ts_ns >> 32) as u32).to_le_bytes());
        h[16..20].copy_from_slice(&(ts_ns as u32).to_le_bytes());
        h[20..24].copy_from_slice(&caplen.to_le_bytes());
        h[24..28].copy_from_slice(&orig_len.to_le_bytes());
        self.out.put(&h)?;
        self.out.put(data)?;
        self.pad(data.len())?;
        self.out.put(&len.to_le_bytes())
    }

    /// How many interfaces the section declares.
    pub fn interface_count(&self) -> usize {
        self.interfaces
    }

    /// The underlying writer.
    pub fn get_ref(&self) -> &W {
        self.out.get_ref()
    }

    /// Flushes and returns the underlying writer.
    pub fn finish(self) -> Result<W, CaptureError> {
        self.out.finish()
    }
}
