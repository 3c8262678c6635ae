//! TCP headers.

use core::fmt;

use super::{Error, Field, get_u16, get_u32, put_u16, put_u32};

/// TCP flags: the nine bits after the data offset (NS/AE, CWR, ECE, URG,
/// ACK, PSH, RST, SYN, FIN).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TcpFlags(pub u16);

impl TcpFlags {
    /// FIN.
    pub const FIN: TcpFlags = TcpFlags(0x001);
    /// SYN.
    pub const SYN: TcpFlags = TcpFlags(0x002);
    /// RST.
    pub const RST: TcpFlags = TcpFlags(0x004);
    /// PSH.
    pub const PSH: TcpFlags = TcpFlags(0x008);
    /// ACK.
    pub const ACK: TcpFlags = TcpFlags(0x010);
    /// URG.
    pub const URG: TcpFlags = TcpFlags(0x020);
    /// ECE (ECN echo).
    pub const ECE: TcpFlags = TcpFlags(0x040);
    /// CWR (congestion window reduced).
    pub const CWR: TcpFlags = TcpFlags(0x080);
    /// AE (accurate ECN, formerly NS).
    pub const AE: TcpFlags = TcpFlags(0x100);

    /// Whether every flag in `other` is set.
    pub fn contains(self, other: TcpFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for TcpFlags {
    type Output = TcpFlags;
    fn bitor(self, rhs: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 | rhs.0)
    }
}

impl fmt::Display for TcpFlags {
    /// tcpdump-like letters: `S`, `SA`, `FPA`, ... (`.` for none); E, W, e
    /// for ECE, CWR, AE.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const LETTERS: [(TcpFlags, char); 9] = [
            (TcpFlags::FIN, 'F'),
            (TcpFlags::SYN, 'S'),
            (TcpFlags::RST, 'R'),
            (TcpFlags::PSH, 'P'),
            (TcpFlags::ACK, 'A'),
            (TcpFlags::URG, 'U'),
            (TcpFlags::ECE, 'E'),
            (TcpFlags::CWR, 'W'),
            (TcpFlags::AE, 'e'),
        ];
        if self.0 & 0x1ff == 0 {
            return f.write_str(".");
        }
        for (flag, c) in LETTERS {
            if self.contains(flag) {
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

/// A read/write view of a TCP segment.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

mod field {
    use super::Field;

    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const SEQ_NUM: Field = 4..8;
    pub const ACK_NUM: Field = 8..12;
    pub const FLAGS: Field = 12..14;
    pub const WIN_SIZE: Field = 14..16;
    pub const CHECKSUM: Field = 16..18;
    pub const URGENT: Field = 18..20;
}

/// Length of the TCP header without options.
pub const MIN_HEADER_LEN: usize = field::URGENT.end;

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer, checking the header and its options are present.
    pub fn new_checked(buffer: T) -> Result<Packet<T>, Error> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks the fixed header is present, the data offset is at least 5
    /// and the options it announces are present.
    pub fn check_len(&self) -> Result<(), Error> {
        let len = self.buffer.as_ref().len();
        if len < MIN_HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = self.header_len();
        if hl < MIN_HEADER_LEN {
            Err(Error::Malformed)
        } else if len < hl {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::SRC_PORT)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::DST_PORT)
    }

    /// Sequence number.
    pub fn seq_number(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::SEQ_NUM)
    }

    /// Acknowledgement number.
    pub fn ack_number(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::ACK_NUM)
    }

    /// Header length in bytes (data offset × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::FLAGS.start] >> 4) * 4
    }

    /// The nine flag bits.
    pub fn flags(&self) -> TcpFlags {
        TcpFlags(get_u16(self.buffer.as_ref(), field::FLAGS) & 0x01ff)
    }

    /// Window size.
    pub fn window_len(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::WIN_SIZE)
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Urgent pointer.
    pub fn urgent_at(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::URGENT)
    }

    /// Option bytes.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[MIN_HEADER_LEN..self.header_len()]
    }

    /// Bytes after the header (to the end of the buffer).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the source port.
    pub fn set_src_port(&mut self, value: u16) {
        put_u16(self.buffer.as_mut(), field::SRC_PORT, value);
    }

    /// Sets the destination port.
    pub fn set_dst_port(&mut self, value: u16) {
        put_u16(self.buffer.as_mut(), field::DST_PORT, value);
    }

    /// Sets the sequence number.
    pub fn set_seq_number(&mut self, value: u32) {
        put_u32(self.buffer.as_mut(), field::SEQ_NUM, value);
    }

    /// Sets the acknowledgement number.
    pub fn set_ack_number(&mut self, value: u32) {
        put_u32(self.buffer.as_mut(), field::ACK_NUM, value);
    }

    /// Sets the header length in bytes (multiple of 4, 20..=60) and the flags.
    pub fn set_header_len_and_flags(&mut self, header_len: usize, flags: TcpFlags) {
        let raw = (((header_len / 4) as u16 & 0xf) << 12) | (flags.0 & 0x01ff);
        put_u16(self.buffer.as_mut(), field::FLAGS, raw);
    }

    /// Sets the window size.
    pub fn set_window_len(&mut self, value: u16) {
        put_u16(self.buffer.as_mut(), field::WIN_SIZE, value);
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, value: u16) {
        put_u16(self.buffer.as_mut(), field::CHECKSUM, value);
    }

    /// Sets the urgent pointer.
    pub fn set_urgent_at(&mut self, value: u16) {
        put_u16(self.buffer.as_mut(), field::URGENT, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static SEGMENT: [u8; 28] = [
        0xbf, 0x00, // src port 48896
        0x00, 0x50, // dst port 80
        0x01, 0x23, 0x45, 0x67, // seq
        0x89, 0xab, 0xcd, 0xef, // ack
        0x60, 0xc2, // data offset 6, flags CWR|ECE|SYN
        0x01, 0x23, // window
        0x7a, 0x8d, // checksum (not verified here)
        0x00, 0x00, // urgent
        0x02, 0x04, 0x05, 0xb4, // option: MSS 1460
        0xaa, 0x00, 0x00, 0xff, // payload
    ];

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&SEGMENT[..]).unwrap();
        assert_eq!(p.src_port(), 48896);
        assert_eq!(p.dst_port(), 80);
        assert_eq!(p.seq_number(), 0x0123_4567);
        assert_eq!(p.ack_number(), 0x89ab_cdef);
        assert_eq!(p.header_len(), 24);
        assert_eq!(p.flags(), TcpFlags::SYN | TcpFlags::ECE | TcpFlags::CWR);
        assert_eq!(p.flags().to_string(), "SEW");
        assert_eq!(p.window_len(), 0x0123);
        assert_eq!(p.checksum(), 0x7a8d);
        assert_eq!(p.urgent_at(), 0);
        assert_eq!(p.options(), &[0x02, 0x04, 0x05, 0xb4]);
        assert_eq!(p.payload(), &[0xaa, 0x00, 0x00, 0xff]);
    }

    #[test]
    fn construct() {
        let mut buf = [0xa5u8; 28];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_src_port(48896);
        p.set_dst_port(80);
        p.set_seq_number(0x0123_4567);
        p.set_ack_number(0x89ab_cdef);
        p.set_header_len_and_flags(24, TcpFlags::SYN | TcpFlags::ECE | TcpFlags::CWR);
        p.set_window_len(0x0123);
        p.set_checksum(0x7a8d);
        p.set_urgent_at(0);
        buf[20..].copy_from_slice(&[0x02, 0x04, 0x05, 0xb4, 0xaa, 0x00, 0x00, 0xff]);
        assert_eq!(buf, SEGMENT);
    }

    #[test]
    fn impossible_len() {
        assert_eq!(
            Packet::new_checked(&SEGMENT[..19]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            Packet::new_checked(&SEGMENT[..23]).unwrap_err(),
            Error::Truncated
        );
        let mut bad = SEGMENT;
        bad[12] = 0x40; // data offset 4
        assert_eq!(Packet::new_checked(&bad[..]).unwrap_err(), Error::Malformed);
        assert_eq!(TcpFlags::default().to_string(), ".");
    }
}
