//! The byte stream under a reader: counts what it hands out, so every fault
//! has an offset, and turns short reads into `Truncated` faults.

use std::io::{self, Read};

use super::CaptureErrorKind;

/// A fault found while reading: where, and what. The reader adds the file
/// name when it turns this into a [`CaptureError`](super::CaptureError).
#[derive(Debug)]
pub(super) struct Fault {
    pub(super) offset: u64,
    pub(super) kind: CaptureErrorKind,
}

impl Fault {
    pub(super) fn new(offset: u64, kind: CaptureErrorKind) -> Self {
        Fault { offset, kind }
    }
}

/// Reads into `buf` until it is full or the stream ends; returns how many
/// bytes were read (fewer than `buf.len()` only at the end of the stream).
pub(super) fn read_full(r: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// A byte stream that knows how far into it the reader is.
pub(super) struct Source {
    inner: Box<dyn Read + Send>,
    pos: u64,
}

impl Source {
    pub(super) fn new(inner: Box<dyn Read + Send>) -> Self {
        Source { inner, pos: 0 }
    }

    /// Bytes consumed so far.
    pub(super) fn pos(&self) -> u64 {
        self.pos
    }

    /// Reads as much of `buf` as the stream holds; returns the count.
    /// An I/O error is a fault at `start`, the structure being read.
    pub(super) fn read_some(&mut self, buf: &mut [u8], start: u64) -> Result<usize, Fault> {
        let got = read_full(&mut self.inner, buf)
            .map_err(|e| Fault::new(start, CaptureErrorKind::of_io(e)))?;
        self.pos += got as u64;
        Ok(got)
    }

    /// Fills `buf` completely, or fails with `Truncated { what, got, need }`
    /// at `start`, where `already` bytes of the structure (`need` long in all)
    /// were read before this call.
    pub(super) fn read_exact(
        &mut self,
        buf: &mut [u8],
        what: &'static str,
        start: u64,
        already: u64,
        need: u64,
    ) -> Result<(), Fault> {
        let got = self.read_some(buf, start)?;
        if got < buf.len() {
            return Err(Fault::new(
                start,
                CaptureErrorKind::Truncated {
                    what,
                    got: already + got as u64,
                    need,
                },
            ));
        }
        Ok(())
    }

    /// Discards `n` bytes without buffering them, with the same
    /// short-read rule as [`Source::read_exact`].
    pub(super) fn skip(
        &mut self,
        n: u64,
        what: &'static str,
        start: u64,
        already: u64,
        need: u64,
    ) -> Result<(), Fault> {
        let got = io::copy(&mut (&mut self.inner).take(n), &mut io::sink())
            .map_err(|e| Fault::new(start, CaptureErrorKind::of_io(e)))?;
        self.pos += got;
        if got < n {
            return Err(Fault::new(
                start,
                CaptureErrorKind::Truncated {
                    what,
                    got: already + got,
                    need,
                },
            ));
        }
        Ok(())
    }
}

/// Makes `buf` at least `n` bytes long and returns its first `n` bytes.
/// The buffer only ever grows, so steady-state reading does not allocate;
/// callers bound `n` before calling.
pub(super) fn grow(buf: &mut Vec<u8>, n: usize) -> &mut [u8] {
    if buf.len() < n {
        buf.resize(n, 0);
    }
    &mut buf[..n]
}

/// Reads a `u16` at `at` in the given byte order; 0 if out of range (callers
/// check lengths first, so that arm is never taken on a checked path).
pub(super) fn u16_at(b: &[u8], at: usize, big_endian: bool) -> u16 {
    match b.get(at..at.saturating_add(2)) {
        Some(&[x, y]) => {
            if big_endian {
                u16::from_be_bytes([x, y])
            } else {
                u16::from_le_bytes([x, y])
            }
        }
        _ => {
            debug_assert!(false, "u16_at({at}) past {}", b.len());
            0
        }
    }
}

/// Reads a `u32` at `at` in the given byte order; 0 if out of range (see
/// [`u16_at`]).
pub(super) fn u32_at(b: &[u8], at: usize, big_endian: bool) -> u32 {
    match b.get(at..at.saturating_add(4)) {
        Some(&[w, x, y, z]) => {
            if big_endian {
                u32::from_be_bytes([w, x, y, z])
            } else {
                u32::from_le_bytes([w, x, y, z])
            }
        }
        _ => {
            debug_assert!(false, "u32_at({at}) past {}", b.len());
            0
        }
    }
}

/// Reads a `u64` at `at` in the given byte order; 0 if out of range (see
/// [`u16_at`]).
pub(super) fn u64_at(b: &[u8], at: usize, big_endian: bool) -> u64 {
    let hi = u32_at(b, at, big_endian);
    let lo = u32_at(b, at.saturating_add(4), big_endian);
    if big_endian {
        (u64::from(hi) << 32) | u64::from(lo)
    } else {
        (u64::from(lo) << 32) | u64::from(hi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_both_orders() {
        let b = [1, 2, 3, 4, 5, 6, 7, 8];
        assert_eq!(u16_at(&b, 0, true), 0x0102);
        assert_eq!(u16_at(&b, 0, false), 0x0201);
        assert_eq!(u32_at(&b, 4, true), 0x0506_0708);
        assert_eq!(u32_at(&b, 4, false), 0x0807_0605);
        assert_eq!(u64_at(&b, 0, true), 0x0102_0304_0506_0708);
        assert_eq!(u64_at(&b, 0, false), 0x0807_0605_0403_0201);
    }

    #[test]
    fn short_reads_become_truncated() {
        let mut src = Source::new(Box::new(&[1u8, 2, 3][..]));
        let mut buf = [0u8; 8];
        let f = src.read_exact(&mut buf, "thing", 0, 0, 8).unwrap_err();
        assert_eq!(f.offset, 0);
        assert!(matches!(
            f.kind,
            CaptureErrorKind::Truncated {
                what: "thing",
                got: 3,
                need: 8
            }
        ));
        assert_eq!(src.pos(), 3);
    }
}
