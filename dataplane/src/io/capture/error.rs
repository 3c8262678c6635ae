//! The one error type of capture reading and writing.

use std::io;

use super::gzip::GzipError;

/// An error reading or writing a capture file: which file, where in it, and
/// what is wrong.
///
/// Displays as `<file>: byte <offset>: <what>`, for example
/// `pcaps/x.pcap: byte 24: record header cut short (8 of 16 bytes)`.
///
/// The offset counts bytes from the start of the capture stream. For a gzip
/// file that is the *decompressed* stream, which is what every other pcap
/// tool reports too. It points at the structure that is at fault (a record
/// header, a block, an option) or, where one field alone is wrong, at that
/// field (a version number, a length).
#[derive(Debug, thiserror::Error)]
#[error("{file}: byte {offset}: {kind}")]
pub struct CaptureError {
    file: String,
    offset: u64,
    kind: CaptureErrorKind,
}

impl CaptureError {
    /// Builds an error for `file` at byte `offset`.
    pub fn new(file: impl Into<String>, offset: u64, kind: CaptureErrorKind) -> Self {
        CaptureError {
            file: file.into(),
            offset,
            kind,
        }
    }

    /// The file (or stream name) the error is about.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The byte offset of the fault from the start of the (decompressed)
    /// capture stream.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// What is wrong.
    pub fn kind(&self) -> &CaptureErrorKind {
        &self.kind
    }

    /// Consumes the error, returning what was wrong.
    pub fn into_kind(self) -> CaptureErrorKind {
        self.kind
    }
}

/// What is wrong with a capture file. The [`CaptureError`] around it says
/// where.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CaptureErrorKind {
    /// The operating system, or the gzip decoder, reported an error.
    #[error("I/O error: {0}")]
    Io(io::Error),

    /// The file holds no bytes at all.
    #[error("empty file: no capture header")]
    Empty,

    /// The first four bytes are neither a pcap nor a pcapng magic number
    /// (nor the gzip magic `1f 8b`). Shown as the bytes in file order, and
    /// as text where they are printable (`0x3c68746d ("<htm")`).
    #[error("unknown magic number {}: not a pcap, pcapng or gzip file", Magic(*.0))]
    BadMagic(u32),

    /// A gzip file (magic `1f 8b`) whose decompressed content starts with
    /// neither a pcap nor a pcapng magic number: compressed, but not a
    /// capture.
    #[error(
        "gzip data (magic 1f 8b) whose content starts with unknown magic number {}: not a pcap or pcapng capture",
        Magic(*.0)
    )]
    BadMagicInGzip(u32),

    /// The compressed bytes of a gzip file are at fault (the
    /// [`CaptureError`]'s offset is the decompressed stream's; this says
    /// where in the compressed file).
    #[error("{0}")]
    Gzip(GzipError),

    /// The file or section header carries a version this reader does not
    /// understand (pcap must be 2.4, pcapng 1.x).
    #[error("unsupported {format} version {major}.{minor}")]
    UnsupportedVersion {
        /// `"pcap"` or `"pcapng"`.
        format: &'static str,
        /// Major version found.
        major: u16,
        /// Minor version found.
        minor: u16,
    },

    /// A pcap link-type field has bits set that the format reserves (bits
    /// 16-25, mask `0x03ff0000`); libpcap and Wireshark reject such files.
    #[error("link type field 0x{0:08x} has reserved bits set (mask 0x03ff0000)")]
    LinkTypeReserved(u32),

    /// A pcapng section header's byte-order magic is neither `1a2b3c4d`
    /// nor its byte swap.
    #[error("pcapng byte-order magic 0x{0:08x} is neither 0x1a2b3c4d nor its byte swap")]
    BadByteOrderMagic(u32),

    /// A structure ended before all its bytes were read: the file was cut.
    #[error("{what} cut short ({got} of {need} bytes)")]
    Truncated {
        /// The structure that was cut (`"record header"`, `"record data"`,
        /// `"enhanced packet block"`, ...).
        what: &'static str,
        /// Bytes present.
        got: u64,
        /// Bytes the structure needs.
        need: u64,
    },

    /// A pcapng block length is below the minimum for its block type
    /// (12 for any block, 28 for a section header).
    #[error("block length {len} is less than the minimum of {min}")]
    BlockTooShort {
        /// The length found.
        len: u32,
        /// The least this block type can be.
        min: u32,
    },

    /// A pcapng block length is not a multiple of 4.
    #[error("block length {0} is not a multiple of 4")]
    BlockLengthUnaligned(u32),

    /// The trailing copy of a pcapng block length differs from the leading
    /// one.
    #[error("trailing block length {trailing} differs from the leading length {leading}")]
    BlockTrailerMismatch {
        /// Length at the start of the block.
        leading: u32,
        /// Length at the end of the block.
        trailing: u32,
    },

    /// A block this reader must load is larger than it will buffer.
    #[error("{block} of {len} bytes exceeds the {max}-byte limit")]
    BlockTooLarge {
        /// Which block.
        block: &'static str,
        /// Its length.
        len: u32,
        /// The limit, [`MAX_BLOCK_LEN`](super::MAX_BLOCK_LEN).
        max: u32,
    },

    /// The fixed fields or packet data of a pcapng block do not fit inside
    /// its block length.
    #[error("{what} needs {need} bytes but the block has only {avail}")]
    BlockOverrun {
        /// What overran (`"enhanced packet block packet data"`, ...).
        what: &'static str,
        /// Bytes needed.
        need: u64,
        /// Bytes the block holds for it.
        avail: u64,
    },

    /// A pcapng option runs past the end of its block.
    #[error(
        "{block} option {} needs {need} bytes but only {avail} remain in the block",
        match code { Some(c) => c.to_string(), None => "header".to_string() }
    )]
    OptionOverrun {
        /// The block holding the option.
        block: &'static str,
        /// The option code, or `None` when not even its 4-byte header fits.
        code: Option<u16>,
        /// Bytes the option needs, its value padded to 4 included.
        need: u64,
        /// Bytes left in the block's option area.
        avail: u64,
    },

    /// A pcapng option holds a value this reader cannot use.
    #[error("{block} option {code}: {reason}")]
    BadOption {
        /// The block holding the option.
        block: &'static str,
        /// The option code.
        code: u16,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// An interface's `if_tsresol` does not fit in 64 bits (10^-20 or
    /// finer, 2^-64 or finer).
    #[error("if_tsresol 0x{0:02x} is finer than this reader supports")]
    TsResolution(u8),

    /// A packet's captured length exceeds the reader's limit,
    /// [`MAX_RECORD_LEN`](super::MAX_RECORD_LEN), as libpcap also refuses.
    #[error("captured length {len} exceeds the {max}-byte record limit")]
    RecordTooLarge {
        /// The captured length found.
        len: u64,
        /// The limit.
        max: u32,
    },

    /// A pcapng packet block names an interface that no interface
    /// description block in its section declared (reading), or a packet
    /// given to the pcapng writer names an interface it was not made with.
    #[error("interface id {id} unknown: the section declares {count} interface(s)")]
    UnknownInterface {
        /// The interface id found.
        id: u32,
        /// How many interfaces the section has declared so far.
        count: usize,
    },

    /// A timestamp given to the writer does not fit a pcap record header
    /// (seconds beyond `u32::MAX`, the year 2106).
    #[error("timestamp {0} ns does not fit a pcap record header")]
    TimestampOutOfRange(u64),

    /// An interface name given to the pcapng writer is longer than an
    /// option can hold (65535 bytes).
    #[error("interface name of {0} bytes does not fit a pcapng option (at most 65535)")]
    NameTooLong(usize),

    /// A pcapng section declares more interfaces than the reader keeps
    /// ([`MAX_INTERFACES`](super::MAX_INTERFACES)): a few megabytes of
    /// compressed interface blocks would otherwise take gigabytes.
    #[error("more than {0} interfaces in one section")]
    TooManyInterfaces(usize),
}

/// A magic number as the bytes in file order, and as text where they are
/// printable ASCII.
struct Magic(u32);

impl std::fmt::Display for Magic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "0x{:08x}", self.0)?;
        let b = self.0.to_be_bytes();
        if b.iter().all(|c| c.is_ascii_graphic() || *c == b' ') {
            write!(
                f,
                " (\"{}\")",
                b.iter().map(|&c| char::from(c)).collect::<String>()
            )?;
        }
        Ok(())
    }
}

impl CaptureErrorKind {
    /// An I/O error of the byte stream: a gzip fault it carries
    /// ([`GzipError::from_io`]) as [`CaptureErrorKind::Gzip`], anything else
    /// as [`CaptureErrorKind::Io`].
    pub(super) fn of_io(e: io::Error) -> Self {
        match GzipError::from_io(&e) {
            Some(g) => CaptureErrorKind::Gzip(g.clone()),
            None => CaptureErrorKind::Io(e),
        }
    }
}
