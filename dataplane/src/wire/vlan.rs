//! 802.1Q / 802.1ad VLAN tags.
//!
//! A tag follows a TPID (`0x8100` customer tag, `0x88a8` service tag,
//! `0x9100` pre-standard QinQ) that sits in the EtherType position of the
//! enclosing header; the view covers the four bytes after that TPID: the tag
//! control information (PCP, DEI, VLAN id) and the next EtherType. Tags stack
//! to any depth.

use super::{Error, Field, Rest, ethernet::EtherType, get_u16, put_u16};

/// A read/write view of one VLAN tag (TCI + inner EtherType) and what follows.
#[derive(Debug, Clone)]
pub struct Tag<T: AsRef<[u8]>> {
    buffer: T,
}

mod field {
    use super::{Field, Rest};

    pub const TCI: Field = 0..2;
    pub const ETHERTYPE: Field = 2..4;
    pub const PAYLOAD: Rest = 4..;
}

/// Length of one tag after its TPID.
pub const TAG_LEN: usize = field::PAYLOAD.start;

impl<T: AsRef<[u8]>> Tag<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Tag<T> {
        Tag { buffer }
    }

    /// Wraps a buffer, checking it holds the four-byte tag.
    pub fn new_checked(buffer: T) -> Result<Tag<T>, Error> {
        let tag = Self::new_unchecked(buffer);
        tag.check_len()?;
        Ok(tag)
    }

    /// Checks the buffer holds the whole tag.
    pub fn check_len(&self) -> Result<(), Error> {
        if self.buffer.as_ref().len() < TAG_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The tag control information (PCP, DEI, VID).
    pub fn tci(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::TCI)
    }

    /// Priority code point (3 bits).
    pub fn pcp(&self) -> u8 {
        (self.tci() >> 13) as u8
    }

    /// Drop eligible indicator.
    pub fn dei(&self) -> bool {
        self.tci() & 0x1000 != 0
    }

    /// VLAN identifier (12 bits).
    pub fn vid(&self) -> u16 {
        self.tci() & 0x0fff
    }

    /// The EtherType of what follows the tag (possibly another TPID).
    pub fn ethertype(&self) -> EtherType {
        EtherType::from(get_u16(self.buffer.as_ref(), field::ETHERTYPE))
    }

    /// The bytes after the tag.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Tag<T> {
    /// Sets the whole tag control information.
    pub fn set_tci(&mut self, value: u16) {
        put_u16(self.buffer.as_mut(), field::TCI, value);
    }

    /// Sets PCP, DEI and VID together.
    pub fn set_pcp_dei_vid(&mut self, pcp: u8, dei: bool, vid: u16) {
        let tci = (u16::from(pcp & 0x7) << 13) | (u16::from(dei) << 12) | (vid & 0x0fff);
        self.set_tci(tci);
    }

    /// Sets the inner EtherType.
    pub fn set_ethertype(&mut self, value: EtherType) {
        put_u16(self.buffer.as_mut(), field::ETHERTYPE, value.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static TAG: [u8; 6] = [
        0xb0, 0x64, // PCP 5, DEI 1, VID 100
        0x81, 0x00, // inner TPID 0x8100: another tag follows
        0x00, 0xc8, // (payload: the next tag's TCI, VID 200)
    ];

    #[test]
    fn deconstruct() {
        let t = Tag::new_checked(&TAG[..]).unwrap();
        assert_eq!(t.pcp(), 5);
        assert!(t.dei());
        assert_eq!(t.vid(), 100);
        assert_eq!(t.ethertype(), EtherType::Vlan);
        assert_eq!(t.payload(), &[0x00, 0xc8]);
    }

    #[test]
    fn construct() {
        let mut buf = [0xa5u8; 6];
        let mut t = Tag::new_unchecked(&mut buf[..]);
        t.set_pcp_dei_vid(5, true, 100);
        t.set_ethertype(EtherType::Vlan);
        buf[4..].copy_from_slice(&[0x00, 0xc8]);
        assert_eq!(buf, TAG);
    }

    #[test]
    fn impossible_len() {
        assert_eq!(Tag::new_checked(&TAG[..3]).unwrap_err(), Error::Truncated);
    }
}
