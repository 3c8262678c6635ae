//! [`CaptureReader`]: format detection and the record loop.

use std::fmt;
use std::fs::File;
use std::io::{BufReader, Cursor, Read};
use std::path::Path;

use crate::clock::Timestamp;
use crate::packet::Batch;

use super::gzip::{GZIP_MAGIC, GzMembers};

use super::pcapng::{Block, PcapngState, SHB_MAGIC};
use super::source::{Fault, Source, read_full};
use super::{CaptureError, CaptureErrorKind, CaptureFormat, FileFormat, Meta, Record, pcap};

/// Read buffer between the reader and the file or decompressor.
const BUF_CAPACITY: usize = 64 * 1024;

enum State {
    Pcap(pcap::PcapHeader),
    Pcapng(PcapngState),
}

/// Reads packets from a pcap or pcapng stream, gzip-compressed or not.
///
/// Built with [`CaptureReader::open`] or [`CaptureReader::from_reader`],
/// which read and check the file header (for pcapng, the first section
/// header block) before returning. Then [`CaptureReader::next_record`]
/// yields records one at a time, borrowed from a buffer the reader reuses,
/// so a steady read does not allocate.
///
/// # Errors and the terminal state
///
/// Every record before a fault is returned before the fault is reported.
/// Once `next_record` has returned an error, or `Ok(None)` at the end of the
/// stream, the reader is finished: every later call returns `Ok(None)`. So
/// `while let Some(r) = reader.next_record()? { ... }` processes every good
/// record and then surfaces the first fault exactly once.
///
/// ```no_run
/// use dataplane::io::capture::CaptureReader;
/// # fn main() -> Result<(), dataplane::io::capture::CaptureError> {
/// let mut reader = CaptureReader::open("trace.pcapng.gz".as_ref())?;
/// let mut bytes = 0u64;
/// while let Some(rec) = reader.next_record()? {
///     bytes += rec.data.len() as u64;
/// }
/// # Ok(()) }
/// ```
pub struct CaptureReader {
    name: String,
    src: Source,
    format: CaptureFormat,
    state: State,
    buf: Vec<u8>,
    done: bool,
    /// Records whose original length was absurdly large, and was taken as
    /// the captured length.
    lengths_fixed: u64,
}

/// An original length above this is not a frame's (a record claiming 4 GB
/// for 60 captured bytes): it is taken as the captured length, and counted.
pub const MAX_ORIG_LEN: u32 = 16 << 20;

impl fmt::Debug for CaptureReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaptureReader")
            .field("name", &self.name)
            .field("format", &self.format)
            .field("position", &self.src.pos())
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl CaptureReader {
    /// Opens the capture file at `path`. Errors name the file as
    /// `path.display()` shows it.
    pub fn open(path: &Path) -> Result<CaptureReader, CaptureError> {
        let name = path.display().to_string();
        match File::open(path) {
            Ok(file) => Self::from_reader(name, file),
            Err(e) => Err(CaptureError::new(name, 0, CaptureErrorKind::Io(e))),
        }
    }

    /// Reads a capture from any byte stream; `name` is what errors call it.
    /// The stream is buffered here, so pass it unbuffered.
    pub fn from_reader(
        name: impl Into<String>,
        r: impl Read + Send + 'static,
    ) -> Result<CaptureReader, CaptureError> {
        let name = name.into();
        match Self::detect(Box::new(r)) {
            Ok((src, format, state, buf)) => Ok(CaptureReader {
                name,
                src,
                format,
                state,
                buf,
                done: false,
                lengths_fixed: 0,
            }),
            Err(f) => Err(CaptureError::new(name, f.offset, f.kind)),
        }
    }

    /// Sniffs the magic numbers and reads the file header.
    #[allow(clippy::type_complexity)]
    fn detect(
        mut raw: Box<dyn Read + Send>,
    ) -> Result<(Source, CaptureFormat, State, Vec<u8>), Fault> {
        let mut magic = [0u8; 4];
        let io_fault = |e| Fault::new(0, CaptureErrorKind::of_io(e));
        let mut n = read_full(&mut raw, &mut magic).map_err(io_fault)?;
        // Put the sniffed bytes back in front of the stream.
        let mut stream: Box<dyn Read + Send> =
            Box::new(Cursor::new(magic).take(n as u64).chain(raw));
        let gzip = n >= 2 && magic[..2] == GZIP_MAGIC;
        if gzip {
            let mut inner = GzMembers::new(stream);
            n = read_full(&mut inner, &mut magic).map_err(io_fault)?;
            stream = Box::new(Cursor::new(magic).take(n as u64).chain(inner));
        }
        if n == 0 {
            return Err(Fault::new(0, CaptureErrorKind::Empty));
        }
        if n < 4 {
            return Err(Fault::new(
                0,
                CaptureErrorKind::Truncated {
                    what: "magic number",
                    got: n as u64,
                    need: 4,
                },
            ));
        }
        let mut src = Source::new(Box::new(BufReader::with_capacity(BUF_CAPACITY, stream)));
        let mut buf = Vec::new();
        let (file, state) = match magic {
            pcap::MAGIC_US_LE | pcap::MAGIC_US_BE | pcap::MAGIC_NS_LE | pcap::MAGIC_NS_BE => {
                (FileFormat::Pcap, State::Pcap(pcap::read_header(&mut src)?))
            }
            SHB_MAGIC => {
                let mut st = PcapngState::default();
                // The first block is the section header (the magic is its
                // type): read it now so a bad header fails the open.
                st.next_block(&mut src, &mut buf)?;
                (FileFormat::Pcapng, State::Pcapng(st))
            }
            other if gzip => {
                return Err(Fault::new(
                    0,
                    CaptureErrorKind::BadMagicInGzip(u32::from_be_bytes(other)),
                ));
            }
            other => {
                return Err(Fault::new(
                    0,
                    CaptureErrorKind::BadMagic(u32::from_be_bytes(other)),
                ));
            }
        };
        Ok((src, CaptureFormat { file, gzip }, state, buf))
    }

    /// The container format, and whether it was gzip-compressed.
    pub fn format(&self) -> CaptureFormat {
        self.format
    }

    /// The name errors use for this stream.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many bytes of the (decompressed) stream have been consumed.
    pub fn position(&self) -> u64 {
        self.src.pos()
    }

    /// For classic pcap, how many FCS bytes end each frame, when the file
    /// header says (bits 26-31 of its link-type field); `None` otherwise.
    /// The FCS, if any, is part of [`Record::data`].
    pub fn pcap_fcs_len(&self) -> Option<u8> {
        match &self.state {
            State::Pcap(h) => h.fcs_len,
            State::Pcapng(_) => None,
        }
    }

    /// The name (`if_name`) of interface `id` of the current pcapng section,
    /// as a [`Record::interface`] refers to it; `None` when that interface
    /// has no name, does not exist, or the file is classic pcap.
    ///
    /// Names belong to a section: after a record of a new section, the
    /// new section's interfaces answer. An `if_name` must be UTF-8 (the
    /// reader fails at the option otherwise); trailing NULs are dropped, and
    /// an empty name counts as none. Of several `if_name` options the first
    /// counts.
    pub fn interface_name(&self, id: u32) -> Option<&str> {
        match &self.state {
            State::Pcap(_) => None,
            State::Pcapng(st) => st.interface_name(id),
        }
    }

    /// How many interfaces records may name: for pcapng, the interfaces the
    /// current section has declared so far (ids `0..count`); 1 for classic
    /// pcap (every record is interface 0).
    pub fn interface_count(&self) -> usize {
        match &self.state {
            State::Pcap(_) => 1,
            State::Pcapng(st) => st.interface_count(),
        }
    }

    /// Records so far whose recorded original length was above
    /// [`MAX_ORIG_LEN`] and was replaced by the captured length: a bogus
    /// length must not count a 60-byte frame as 4 GB in rates and byte
    /// counters. (An original length below the captured one is kept: the
    /// stages use the captured bytes.)
    pub fn lengths_fixed(&self) -> u64 {
        self.lengths_fixed
    }

    /// Fills `batch` from the capture until the batch is full or the
    /// capture ends; returns the number of packets added (records before a
    /// fault are in the batch when the fault is returned).
    pub fn fill_batch(&mut self, batch: &mut Batch) -> Result<usize, CaptureError> {
        let before = batch.len();
        while !batch.is_full() {
            match self.next_record()? {
                Some(r) => {
                    batch.push(
                        Timestamp::from_nanos(r.ts_ns),
                        r.orig_len,
                        r.link_type,
                        r.data,
                    );
                }
                None => break,
            }
        }
        Ok(batch.len() - before)
    }

    /// The next record, borrowed from the reader's buffer until the next
    /// call. `Ok(None)` at the end of the stream, and after any error (see
    /// the type's docs).
    pub fn next_record(&mut self) -> Result<Option<Record<'_>>, CaptureError> {
        if self.done {
            return Ok(None);
        }
        match self.advance() {
            Ok(Some(meta)) => {
                let data = self.buf.get(meta.data).unwrap_or_default();
                // Bounded by MAX_RECORD_LEN.
                let caplen = data.len() as u32;
                let orig_len = if meta.orig_len > MAX_ORIG_LEN {
                    self.lengths_fixed += 1;
                    caplen
                } else {
                    meta.orig_len
                };
                Ok(Some(Record {
                    ts_ns: meta.ts_ns,
                    interface: meta.interface,
                    orig_len,
                    link_type: meta.link_type,
                    data,
                }))
            }
            Ok(None) => {
                self.done = true;
                Ok(None)
            }
            Err(f) => {
                self.done = true;
                Err(CaptureError::new(self.name.clone(), f.offset, f.kind))
            }
        }
    }

    fn advance(&mut self) -> Result<Option<Meta>, Fault> {
        match &mut self.state {
            State::Pcap(h) => pcap::next_record(h, &mut self.src, &mut self.buf),
            State::Pcapng(st) => loop {
                match st.next_block(&mut self.src, &mut self.buf)? {
                    Block::End => return Ok(None),
                    Block::Packet(meta) => return Ok(Some(meta)),
                    Block::Section | Block::Other => {}
                }
            },
        }
    }
}
