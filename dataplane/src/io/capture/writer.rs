//! [`CaptureWriter`]: classic pcap out.

use std::fmt;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use crate::wire::LinkType;

use super::pcap::{FILE_HEADER_LEN, MAGIC_NS_LE, MAGIC_US_LE, RECORD_HEADER_LEN};
use super::{CaptureError, CaptureErrorKind, MAX_RECORD_LEN};

/// The resolution of the timestamps a [`CaptureWriter`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TimeResolution {
    /// Microseconds (magic `a1b2c3d4`): what every pcap reader understands.
    /// Nanoseconds below a microsecond are dropped (truncated).
    Micro,
    /// Nanoseconds (magic `a1b23c4d`): exact for the reader's `ts_ns`.
    #[default]
    Nano,
}

/// Writes classic pcap: little-endian, version 2.4, one link type.
///
/// The header is written when the writer is made. Data longer than the
/// snapshot length (or than [`MAX_RECORD_LEN`], or than the snapshot length
/// 0 taken as "no limit") is cut to it, with the original length kept, as a
/// capture with that snapshot length would have recorded it. Call
/// [`CaptureWriter::finish`] to flush and see write errors: dropping the
/// writer flushes too but cannot report them.
///
/// ```
/// use dataplane::io::capture::{CaptureReader, CaptureWriter};
/// use dataplane::wire::LinkType;
/// # fn main() -> Result<(), dataplane::io::capture::CaptureError> {
/// let mut w = CaptureWriter::from_writer(Vec::new(), LinkType::Ethernet, 65535)?;
/// w.write(1_700_000_000_123_456_789, 60, &[0u8; 60])?;
/// let bytes = w.finish()?;
///
/// let mut r = CaptureReader::from_reader("mem", std::io::Cursor::new(bytes))?;
/// let rec = r.next_record()?.expect("one record");
/// assert_eq!(rec.ts_ns, 1_700_000_000_123_456_789);
/// # Ok(()) }
/// ```
pub struct CaptureWriter<W: Write = BufWriter<File>> {
    out: W,
    name: String,
    pos: u64,
    cap: usize,
    resolution: TimeResolution,
}

impl<W: Write> fmt::Debug for CaptureWriter<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaptureWriter")
            .field("name", &self.name)
            .field("position", &self.pos)
            .field("cap", &self.cap)
            .field("resolution", &self.resolution)
            .finish_non_exhaustive()
    }
}

impl CaptureWriter<BufWriter<File>> {
    /// Creates (or truncates) the file at `path` and writes a
    /// nanosecond-resolution pcap header.
    pub fn create(path: &Path, link_type: LinkType, snaplen: u32) -> Result<Self, CaptureError> {
        Self::create_with_resolution(path, link_type, snaplen, TimeResolution::Nano)
    }

    /// Like [`CaptureWriter::create`], with the given timestamp resolution.
    pub fn create_with_resolution(
        path: &Path,
        link_type: LinkType,
        snaplen: u32,
        resolution: TimeResolution,
    ) -> Result<Self, CaptureError> {
        let name = path.display().to_string();
        let file = File::create(path)
            .map_err(|e| CaptureError::new(name.clone(), 0, CaptureErrorKind::Io(e)))?;
        Self::start(BufWriter::new(file), name, link_type, snaplen, resolution)
    }
}

impl<W: Write> CaptureWriter<W> {
    /// Writes a nanosecond-resolution pcap header to `w` and returns a
    /// writer for its records. Errors call the stream `<writer>`.
    pub fn from_writer(w: W, link_type: LinkType, snaplen: u32) -> Result<Self, CaptureError> {
        Self::from_writer_with_resolution(w, link_type, snaplen, TimeResolution::Nano)
    }

    /// Like [`CaptureWriter::from_writer`], with the given timestamp
    /// resolution.
    pub fn from_writer_with_resolution(
        w: W,
        link_type: LinkType,
        snaplen: u32,
        resolution: TimeResolution,
    ) -> Result<Self, CaptureError> {
        Self::start(w, "<writer>".to_string(), link_type, snaplen, resolution)
    }

    fn start(
        out: W,
        name: String,
        link_type: LinkType,
        snaplen: u32,
        resolution: TimeResolution,
    ) -> Result<Self, CaptureError> {
        let cap = match snaplen {
            0 => MAX_RECORD_LEN,
            n => n.min(MAX_RECORD_LEN),
        } as usize;
        let mut w = CaptureWriter {
            out,
            name,
            pos: 0,
            cap,
            resolution,
        };
        let magic = match resolution {
            TimeResolution::Micro => MAGIC_US_LE,
            TimeResolution::Nano => MAGIC_NS_LE,
        };
        let mut h = [0u8; FILE_HEADER_LEN];
        h[0..4].copy_from_slice(&magic);
        h[4..6].copy_from_slice(&2u16.to_le_bytes());
        h[6..8].copy_from_slice(&4u16.to_le_bytes());
        // thiszone and sigfigs stay 0.
        h[16..20].copy_from_slice(&snaplen.to_le_bytes());
        // Only the low 16 bits hold a link type; the rest are reserved.
        h[20..24].copy_from_slice(&(link_type.to_linktype() & 0xffff).to_le_bytes());
        w.put(&h)?;
        Ok(w)
    }

    fn put(&mut self, bytes: &[u8]) -> Result<(), CaptureError> {
        self.out
            .write_all(bytes)
            .map_err(|e| CaptureError::new(self.name.clone(), self.pos, CaptureErrorKind::Io(e)))?;
        self.pos += bytes.len() as u64;
        Ok(())
    }

    /// Writes one record: `ts_ns` nanoseconds since the Unix epoch (before
    /// the year 2106), the packet's original length, and its captured
    /// bytes (cut to the snapshot length).
    pub fn write(&mut self, ts_ns: u64, orig_len: u32, data: &[u8]) -> Result<(), CaptureError> {
        let sec = u32::try_from(ts_ns / 1_000_000_000).map_err(|_| {
            CaptureError::new(
                self.name.clone(),
                self.pos,
                CaptureErrorKind::TimestampOutOfRange(ts_ns),
            )
        })?;
        let sub_ns = (ts_ns % 1_000_000_000) as u32;
        let frac = match self.resolution {
            TimeResolution::Micro => sub_ns / 1_000,
            TimeResolution::Nano => sub_ns,
        };
        let data = &data[..data.len().min(self.cap)];
        // At most MAX_RECORD_LEN, so it fits.
        let caplen = data.len() as u32;
        let mut h = [0u8; RECORD_HEADER_LEN];
        h[0..4].copy_from_slice(&sec.to_le_bytes());
        h[4..8].copy_from_slice(&frac.to_le_bytes());
        h[8..12].copy_from_slice(&caplen.to_le_bytes());
        h[12..16].copy_from_slice(&orig_len.to_le_bytes());
        self.put(&h)?;
        self.put(data)
    }

    /// The underlying writer.
    pub fn get_ref(&self) -> &W {
        &self.out
    }

    /// Flushes and returns the underlying writer.
    pub fn finish(mut self) -> Result<W, CaptureError> {
        self.out
            .flush()
            .map_err(|e| CaptureError::new(self.name.clone(), self.pos, CaptureErrorKind::Io(e)))?;
        Ok(self.out)
    }
}
