//! [`CaptureWriter`]: classic pcap out; the byte sink every writer uses.

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
    out: Sink<W>,
    cap: usize,
    resolution: TimeResolution,
}

impl<W: Write> fmt::Debug for CaptureWriter<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaptureWriter")
            .field("name", &self.out.name)
            .field("position", &self.out.pos)
            .field("cap", &self.cap)
            .field("resolution", &self.resolution)
            .finish_non_exhaustive()
    }
}

/// The stream under a writer: counts the bytes written, so that every
/// error names the file and the offset it happened at.
pub(super) struct Sink<W> {
    out: W,
    pub(super) name: String,
    pub(super) pos: u64,
}

impl Sink<BufWriter<File>> {
    /// Creates (or truncates) the file at `path`; errors name it as
    /// `path.display()` shows it.
    pub(super) fn create(path: &Path) -> Result<Self, CaptureError> {
        let name = path.display().to_string();
        match File::create(path) {
            Ok(file) => Ok(Sink::new(BufWriter::new(file), name)),
            Err(e) => Err(CaptureError::new(name, 0, CaptureErrorKind::Io(e))),
        }
    }
}

impl<W: Write> Sink<W> {
    pub(super) fn new(out: W, name: String) -> Self {
        Sink { out, name, pos: 0 }
    }

    /// An error at the current offset.
    pub(super) fn error(&self, kind: CaptureErrorKind) -> CaptureError {
        CaptureError::new(self.name.clone(), self.pos, kind)
    }

    pub(super) fn put(&mut self, bytes: &[u8]) -> Result<(), CaptureError> {
        if let Err(e) = self.out.write_all(bytes) {
            return Err(self.error(CaptureErrorKind::Io(e)));
        }
        self.pos += bytes.len() as u64;
        Ok(())
    }

    pub(super) fn get_ref(&self) -> &W {
        &self.out
    }

    /// Flushes and returns the stream.
    pub(super) fn finish(mut self) -> Result<W, CaptureError> {
        if let Err(e) = self.out.flush() {
            return Err(self.error(CaptureErrorKind::Io(e)));
        }
        Ok(self.out)
    }
}

/// The captured length for a snapshot length: 0 means no limit, and
/// nothing exceeds [`MAX_RECORD_LEN`].
pub(super) fn cap_for(snaplen: u32) -> usize {
    let cap = match snaplen {
        0 => MAX_RECORD_LEN,
        n => n.min(MAX_RECORD_LEN),
    };
    cap as usize
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
        Self::start(Sink::create(path)?, link_type, snaplen, resolution)
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
        Self::start(
            Sink::new(w, "<writer>".to_string()),
            link_type,
            snaplen,
            resolution,
        )
    }

    fn start(
        out: Sink<W>,
        link_type: LinkType,
        snaplen: u32,
        resolution: TimeResolution,
    ) -> Result<Self, CaptureError> {
        let mut w = CaptureWriter {
            out,
            cap: cap_for(snaplen),
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
        w.out.put(&h)?;
        Ok(w)
    }

    /// Writes one record: `ts_ns` nanoseconds since the Unix epoch (before
    /// the year 2106), the packet's original length, and its captured
    /// bytes (cut to the snapshot length).
    pub fn write(&mut self, ts_ns: u64, orig_len: u32, data: &[u8]) -> Result<(), CaptureError> {
        let sec = u32::try_from(ts_ns / 1_000_000_000)
            .map_err(|_| self.out.error(CaptureErrorKind::TimestampOutOfRange(ts_ns)))?;
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
        self.out.put(&h)?;
        self.out.put(data)
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
