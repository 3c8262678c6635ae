//! gzip-compressed captures: the members of a gzip file decompressed one
//! after another (`gzip -c a b > ab.gz` holds two), and what is wrong with
//! the compressed bytes said in terms of them.
//!
//! A gzip file is a sequence of members. After the last one the file must
//! end; [`GzMembers`] looks at what follows each member and, when it is
//! not another member (the magic `1f 8b`), reports the bytes it found and
//! where they start in the compressed file
//! ([`GzipError::TrailingGarbage`]), rather than the decoder's "invalid
//! gzip header". A member cut short or with corrupt data is
//! [`GzipError::CutShort`] or [`GzipError::Corrupt`] at the compressed
//! byte the decoder had reached. The errors travel inside the
//! [`io::Error`] the decompressed stream returns (kind
//! [`io::ErrorKind::InvalidData`]); [`GzipError::from_io`] finds them
//! again.

use std::io::{self, BufRead, Read};

use flate2::bufread::GzDecoder;

/// The gzip magic, the first two bytes of every member.
pub const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// How many bytes of trailing garbage an error shows.
const SHOWN: usize = 8;

/// What is wrong with a gzip file's compressed bytes. Offsets count bytes
/// of the compressed file from its start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GzipError {
    /// After a member ends, bytes that do not start another member.
    #[error(
        "after the gzip data (ends at compressed byte {at}): {len} more bytes that are not a gzip member: {}{}",
        hex(found),
        if *len > found.len() as u64 { " ..." } else { "" }
    )]
    TrailingGarbage {
        /// Where they start.
        at: u64,
        /// How many there are, to the end of the file.
        len: u64,
        /// The first of them (at most 8).
        found: Vec<u8>,
    },
    /// The file ends inside a member.
    #[error("gzip data cut short: the file ends at compressed byte {at}, inside a member")]
    CutShort {
        /// The file's length.
        at: u64,
    },
    /// The decoder refused a member's bytes.
    #[error("corrupt gzip data after compressed byte {at}: {reason}")]
    Corrupt {
        /// How far the decoder had read without fault.
        at: u64,
        /// The decoder's words.
        reason: String,
    },
}

impl GzipError {
    /// The gzip error an I/O error of the decompressed stream carries, if
    /// it carries one.
    pub fn from_io(e: &io::Error) -> Option<&GzipError> {
        e.get_ref().and_then(|x| x.downcast_ref::<GzipError>())
    }

    fn into_io(self) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, self)
    }
}

/// Bytes as `47 41 52 42`.
fn hex(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A buffered reader that counts the bytes taken from it (the compressed
/// offset) and can show the next two before they are taken.
struct Counted {
    inner: Box<dyn Read + Send>,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// Bytes consumed so far.
    pos: u64,
}

impl Counted {
    fn new(inner: Box<dyn Read + Send>) -> Self {
        Counted {
            inner,
            buf: vec![0; 64 * 1024].into_boxed_slice(),
            start: 0,
            end: 0,
            pos: 0,
        }
    }

    /// At least `n` (at most the buffer's size) unconsumed bytes, fewer
    /// only at the end of the file.
    fn peek(&mut self, n: usize) -> io::Result<&[u8]> {
        if self.end - self.start < n {
            self.buf.copy_within(self.start..self.end, 0);
            (self.end, self.start) = (self.end - self.start, 0);
            while self.end < n.min(self.buf.len()) {
                match self.inner.read(&mut self.buf[self.end..]) {
                    Ok(0) => break,
                    Ok(k) => self.end += k,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(&self.buf[self.start..self.end])
    }

    /// Counts and discards the rest of the file.
    fn count_rest(&mut self) -> io::Result<u64> {
        let buffered = (self.end - self.start) as u64;
        self.start = self.end;
        Ok(buffered + io::copy(&mut self.inner, &mut io::sink())?)
    }
}

impl Read for Counted {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let avail = self.fill_buf()?;
        let n = avail.len().min(out.len());
        out[..n].copy_from_slice(&avail[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for Counted {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.start == self.end {
            self.peek(1)?;
        }
        Ok(&self.buf[self.start..self.end])
    }

    fn consume(&mut self, amt: usize) {
        let amt = amt.min(self.end - self.start);
        self.start += amt;
        self.pos += amt as u64;
    }
}

/// The decompressed bytes of every member of a gzip file in turn (see the
/// module docs).
pub(super) struct GzMembers {
    /// The member being read; `None` once the file is done.
    member: Option<GzDecoder<Counted>>,
    /// Where the file's bytes are when no member is open.
    idle: Option<Counted>,
}

impl GzMembers {
    /// Decompresses `inner`, which starts with a gzip member's magic.
    pub(super) fn new(inner: Box<dyn Read + Send>) -> Self {
        GzMembers {
            member: Some(GzDecoder::new(Counted::new(inner))),
            idle: None,
        }
    }

    /// A member ended: opens the next one, or ends the file, or reports
    /// what follows instead.
    fn next_member(&mut self, mut src: Counted) -> io::Result<bool> {
        let at = src.pos;
        let head = src.peek(2)?;
        if head.is_empty() {
            self.idle = Some(src);
            return Ok(false);
        }
        if head.starts_with(&GZIP_MAGIC) {
            self.member = Some(GzDecoder::new(src));
            return Ok(true);
        }
        let found = src.peek(SHOWN)?.iter().take(SHOWN).copied().collect();
        let len = src.count_rest()?;
        self.idle = Some(src);
        Err(GzipError::TrailingGarbage { at, len, found }.into_io())
    }
}

impl Read for GzMembers {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        while let Some(dec) = &mut self.member {
            match dec.read(out) {
                Ok(0) => {}
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => return Err(e),
                Err(e) => {
                    let Some(mut src) = self.member.take().map(GzDecoder::into_inner) else {
                        return Err(e);
                    };
                    // An error the decoder met at the end of the file is the
                    // file's end inside the member.
                    let at_end = src.peek(1).is_ok_and(<[u8]>::is_empty);
                    let at = src.pos;
                    self.idle = Some(src);
                    return Err(if at_end {
                        GzipError::CutShort { at }
                    } else {
                        GzipError::Corrupt {
                            at,
                            reason: e.to_string(),
                        }
                    }
                    .into_io());
                }
            }
            // The member ended.
            let Some(src) = self.member.take().map(GzDecoder::into_inner) else {
                break;
            };
            if !self.next_member(src)? {
                break;
            }
        }
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn gz(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn read_all(bytes: Vec<u8>) -> (Vec<u8>, Option<GzipError>) {
        let mut r = GzMembers::new(Box::new(io::Cursor::new(bytes)));
        let mut out = Vec::new();
        let mut buf = [0u8; 7];
        loop {
            match r.read(&mut buf) {
                Ok(0) => return (out, None),
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) => return (out, GzipError::from_io(&e).cloned()),
            }
        }
    }

    #[test]
    fn members_in_turn() {
        let mut two = gz(b"hello, ");
        two.extend(gz(b"world"));
        assert_eq!(read_all(two), (b"hello, world".to_vec(), None));
    }

    #[test]
    fn garbage_after_the_last_member_is_shown_where_it_starts() {
        let one = gz(b"hello");
        let at = one.len() as u64;
        let mut bad = one;
        bad.extend_from_slice(b"GARBAGE-AFTER");
        let (out, err) = read_all(bad);
        assert_eq!(out, b"hello");
        let err = err.unwrap();
        assert_eq!(
            err,
            GzipError::TrailingGarbage {
                at,
                len: 13,
                found: b"GARBAGE-".to_vec()
            }
        );
        assert_eq!(
            err.to_string(),
            format!(
                "after the gzip data (ends at compressed byte {at}): 13 more bytes that are not a gzip member: 47 41 52 42 41 47 45 2d ..."
            )
        );
        // Three bytes: shown whole, no ellipsis.
        let mut short = gz(b"x");
        let at = short.len() as u64;
        short.extend_from_slice(b"abc");
        assert_eq!(
            read_all(short).1.unwrap().to_string(),
            format!(
                "after the gzip data (ends at compressed byte {at}): 3 more bytes that are not a gzip member: 61 62 63"
            )
        );
    }

    #[test]
    fn a_member_cut_short_or_corrupt() {
        let whole = gz(&[7u8; 5000]);
        let cut = whole[..whole.len() - 6].to_vec();
        let n = cut.len() as u64;
        assert_eq!(read_all(cut).1, Some(GzipError::CutShort { at: n }));
        let mut bad = whole;
        // The deflate block type 11 is reserved.
        bad[10] |= 0b110;
        let err = read_all(bad).1.unwrap();
        assert!(
            matches!(err, GzipError::Corrupt { at, .. } if at > 0),
            "{err:?}"
        );
    }
}
