//! Messages between neighbouring routers (the peering protocol of
//! [`crate::peer`]), carried in UDP to a router's own address.
//!
//! Every message is a 28-byte header, a body whose shape depends on the
//! kind, and, when the two routers share a key, a 16-byte tag; integers are
//! big-endian:
//!
//! ```text
//! offset size field
//!  0     2    magic "BP"
//!  2     1    version (1)
//!  3     1    kind: 1 membership filter, 2 membership delta,
//!                   3 flow summary, 4 flow answer
//!  4     2    length of the whole message (header, body, tag)
//!  6     2    flags: bit 0 = tagged (the last 16 bytes are the tag)
//!  8     4    the sender's router id
//! 12     8    sequence: the sender's clock when it sent the message
//!             (Unix ns), strictly increasing from one sender
//! 20     8    aux: membership filter: the filter's version;
//!             delta: the version it makes; flow summary: the exchange's
//!             nonce; flow answer: the nonce of the summary it answers
//! 28     ..   body
//! end-16 16   tag: the keyed BLAKE3 hash of every byte before it, cut to
//!             16 bytes (present when flags bit 0 is set)
//! ```
//!
//! Bodies:
//!
//! * **membership filter** and **flow summary** (a filter, cut into
//!   segments that each fit a frame): `u16` segment index, `u16` segment
//!   count, `u32` items the sender says the filter holds, then that
//!   segment's bytes of the filter's transfer form
//!   ([`kernels::bloom`]'s `to_compressed_bytes`);
//! * **membership delta**: `u64` the version it applies to, `u16` count,
//!   then `count` `u32` bit positions whose bit flipped;
//! * **flow answer**: `u16` count, then `count` entries: `u8` family (4 or
//!   6), `u8` protocol, `u16` source port, `u16` destination port, the
//!   source and destination addresses (4 or 16 bytes each), `u32` the
//!   generation of its last report, `u32` how long ago (ms) that was.
//!
//! [`Message::new_checked`] checks the header: the magic, the version, a
//! length field equal to the bytes present and within [`MAX_LEN`], room for
//! the tag the flags announce. After it no accessor panics. The bodies are
//! read by [`Segment::parse`], [`Delta::parse`] and [`FlowEntries`], which
//! check every count against the bytes present before they trust it. An
//! unknown kind is a value ([`Kind::Unknown`]); the control path refuses
//! it.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::Error;

/// The first two bytes of every message.
pub const MAGIC: [u8; 2] = *b"BP";
/// The version this code writes and reads.
pub const VERSION: u8 = 1;
/// Header length.
pub const HEADER_LEN: usize = 28;
/// Tag length.
pub const TAG_LEN: usize = 16;
/// The longest message: a UDP payload that fits an IPv6 packet in a
/// 1500-byte MTU with room for an Icarus option (1500 - 40 - 8 - 24).
pub const MAX_LEN: usize = 1428;
/// Body bytes before a segment's share of a filter.
pub const SEGMENT_HEADER_LEN: usize = 8;
/// The most segments one filter may be cut into (so a receiver holds at
/// most this many while a filter arrives).
pub const MAX_SEGMENTS: u16 = 64;
/// Body bytes before a delta's positions.
pub const DELTA_HEADER_LEN: usize = 10;
/// Body bytes before a flow answer's entries.
pub const ANSWER_HEADER_LEN: usize = 2;

/// Flags bit: the message ends with a tag.
pub const FLAG_TAGGED: u16 = 1;

mod field {
    use core::ops::Range;
    pub const MAGIC: Range<usize> = 0..2;
    pub const VERSION: usize = 2;
    pub const KIND: usize = 3;
    pub const LENGTH: Range<usize> = 4..6;
    pub const FLAGS: Range<usize> = 6..8;
    pub const SENDER: Range<usize> = 8..12;
    pub const SEQ: Range<usize> = 12..20;
    pub const AUX: Range<usize> = 20..28;
}

/// What a message carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A segment of the sender's whole membership filter for the receiver.
    Membership,
    /// Bits of that filter that flipped since a version.
    MembershipDelta,
    /// A segment of a DBF filter of the sender's flow set.
    FlowSummary,
    /// Flows the sender has that a summary did not show.
    FlowAnswer,
    /// Anything else.
    Unknown(u8),
}

impl From<u8> for Kind {
    fn from(v: u8) -> Kind {
        match v {
            1 => Kind::Membership,
            2 => Kind::MembershipDelta,
            3 => Kind::FlowSummary,
            4 => Kind::FlowAnswer,
            other => Kind::Unknown(other),
        }
    }
}

impl From<Kind> for u8 {
    fn from(k: Kind) -> u8 {
        match k {
            Kind::Membership => 1,
            Kind::MembershipDelta => 2,
            Kind::FlowSummary => 3,
            Kind::FlowAnswer => 4,
            Kind::Unknown(v) => v,
        }
    }
}

/// Why bytes are not a message (small and `Copy`, for counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PeerError {
    /// Shorter than the header (or the tag it announces).
    Truncated,
    /// Not "BP".
    BadMagic,
    /// Another version.
    Version(u8),
    /// The length field disagrees with the bytes present, or exceeds
    /// [`MAX_LEN`].
    Length,
    /// A body shorter than its counts say, a count over its bound, or
    /// bytes left after the last entry.
    Body,
}

impl core::fmt::Display for PeerError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PeerError::Truncated => f.write_str("truncated"),
            PeerError::BadMagic => f.write_str("bad magic"),
            PeerError::Version(v) => write!(f, "version {v}"),
            PeerError::Length => f.write_str("length field"),
            PeerError::Body => f.write_str("body"),
        }
    }
}

impl From<Error> for PeerError {
    fn from(_: Error) -> PeerError {
        PeerError::Truncated
    }
}

/// A view of one message (see the module docs).
#[derive(Debug, Clone)]
pub struct Message<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Message<T> {
    /// Wraps `buffer`, checking the header (see the module docs).
    ///
    /// # Errors
    /// What is wrong with it.
    pub fn new_checked(buffer: T) -> Result<Message<T>, PeerError> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(PeerError::Truncated);
        }
        if b[field::MAGIC] != MAGIC {
            return Err(PeerError::BadMagic);
        }
        if b[field::VERSION] != VERSION {
            return Err(PeerError::Version(b[field::VERSION]));
        }
        let len = usize::from(u16::from_be_bytes([
            b[field::LENGTH.start],
            b[field::LENGTH.start + 1],
        ]));
        if len != b.len() || len > MAX_LEN {
            return Err(PeerError::Length);
        }
        let tagged = u16::from_be_bytes([b[6], b[7]]) & FLAG_TAGGED != 0;
        if tagged && len < HEADER_LEN + TAG_LEN {
            return Err(PeerError::Truncated);
        }
        Ok(Message { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The kind.
    pub fn kind(&self) -> Kind {
        Kind::from(self.b()[field::KIND])
    }

    /// The flags.
    pub fn flags(&self) -> u16 {
        let b = self.b();
        u16::from_be_bytes([b[field::FLAGS.start], b[field::FLAGS.start + 1]])
    }

    /// Whether the message ends with a tag.
    pub fn is_tagged(&self) -> bool {
        self.flags() & FLAG_TAGGED != 0
    }

    /// The sender's router id.
    pub fn sender(&self) -> u32 {
        let mut a = [0u8; 4];
        a.copy_from_slice(&self.b()[field::SENDER]);
        u32::from_be_bytes(a)
    }

    /// The sequence (the sender's clock, Unix ns).
    pub fn seq(&self) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&self.b()[field::SEQ]);
        u64::from_be_bytes(a)
    }

    /// The kind-specific word (see the module docs).
    pub fn aux(&self) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&self.b()[field::AUX]);
        u64::from_be_bytes(a)
    }

    /// The body.
    pub fn body(&self) -> &[u8] {
        let end = self.b().len() - if self.is_tagged() { TAG_LEN } else { 0 };
        &self.b()[HEADER_LEN..end]
    }

    /// The bytes the tag covers (everything before it).
    pub fn signed(&self) -> &[u8] {
        let end = self.b().len() - if self.is_tagged() { TAG_LEN } else { 0 };
        &self.b()[..end]
    }

    /// The tag, when tagged.
    pub fn tag(&self) -> Option<&[u8]> {
        self.is_tagged()
            .then(|| &self.b()[self.b().len() - TAG_LEN..])
    }
}

/// A message's header fields, for [`emit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The kind.
    pub kind: Kind,
    /// The sender's router id.
    pub sender: u32,
    /// The sequence.
    pub seq: u64,
    /// The kind-specific word.
    pub aux: u64,
}

/// The key of a tag: 32 bytes derived from the peers' shared secret.
#[derive(Clone, PartialEq, Eq)]
pub struct TagKey([u8; 32]);

impl core::fmt::Debug for TagKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("TagKey(..)")
    }
}

impl TagKey {
    /// The key for the shared secret `secret` (any bytes; the router's
    /// config gives a string).
    pub fn derive(secret: &[u8]) -> TagKey {
        TagKey(blake3::derive_key(
            "bloomplane peering 2026 tag key",
            secret,
        ))
    }

    /// The tag of `bytes`.
    pub fn tag(&self, bytes: &[u8]) -> [u8; TAG_LEN] {
        let h = blake3::keyed_hash(&self.0, bytes);
        let mut t = [0u8; TAG_LEN];
        t.copy_from_slice(&h.as_bytes()[..TAG_LEN]);
        t
    }

    /// Whether `tag` is the tag of `bytes` (compared in constant time).
    pub fn verify(&self, bytes: &[u8], tag: &[u8]) -> bool {
        let want = self.tag(bytes);
        tag.len() == TAG_LEN && want.iter().zip(tag).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }
}

/// Writes the message `header` + `body` (tagged with `key` when given) into
/// `out` (cleared first). `false`, with `out` empty, when it would exceed
/// [`MAX_LEN`].
pub fn emit(header: &Header, body: &[u8], key: Option<&TagKey>, out: &mut Vec<u8>) -> bool {
    out.clear();
    let len = HEADER_LEN + body.len() + if key.is_some() { TAG_LEN } else { 0 };
    if len > MAX_LEN {
        return false;
    }
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.push(u8::from(header.kind));
    out.extend_from_slice(&(len as u16).to_be_bytes());
    let flags = if key.is_some() { FLAG_TAGGED } else { 0 };
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&header.sender.to_be_bytes());
    out.extend_from_slice(&header.seq.to_be_bytes());
    out.extend_from_slice(&header.aux.to_be_bytes());
    out.extend_from_slice(body);
    if let Some(k) = key {
        let t = k.tag(out);
        out.extend_from_slice(&t);
    }
    true
}

/// One segment of a filter (the body of a membership filter or flow
/// summary).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment<'a> {
    /// Its index, `0..count`.
    pub index: u16,
    /// How many segments the filter was cut into.
    pub count: u16,
    /// The items the sender says the filter holds.
    pub items: u32,
    /// This segment's bytes of the filter's transfer form.
    pub bytes: &'a [u8],
}

impl<'a> Segment<'a> {
    /// Reads a segment body.
    ///
    /// # Errors
    /// [`PeerError::Body`]: shorter than its header, no bytes, a count of
    /// 0 or over [`MAX_SEGMENTS`], or an index not below the count.
    pub fn parse(body: &'a [u8]) -> Result<Segment<'a>, PeerError> {
        let (h, bytes) = body
            .split_at_checked(SEGMENT_HEADER_LEN)
            .ok_or(PeerError::Body)?;
        let index = u16::from_be_bytes([h[0], h[1]]);
        let count = u16::from_be_bytes([h[2], h[3]]);
        let items = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
        if count == 0 || count > MAX_SEGMENTS || index >= count || bytes.is_empty() {
            return Err(PeerError::Body);
        }
        Ok(Segment {
            index,
            count,
            items,
            bytes,
        })
    }

    /// Writes this segment as a body into `out` (appended).
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.index.to_be_bytes());
        out.extend_from_slice(&self.count.to_be_bytes());
        out.extend_from_slice(&self.items.to_be_bytes());
        out.extend_from_slice(self.bytes);
    }
}

/// The most bytes of a filter one segment carries, for a message tagged or
/// not.
pub fn segment_capacity(tagged: bool) -> usize {
    MAX_LEN - HEADER_LEN - SEGMENT_HEADER_LEN - if tagged { TAG_LEN } else { 0 }
}

/// The most bit positions one delta carries, for a message tagged or not.
pub fn delta_capacity(tagged: bool) -> usize {
    (MAX_LEN - HEADER_LEN - DELTA_HEADER_LEN - if tagged { TAG_LEN } else { 0 }) / 4
}

/// A membership delta's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delta<'a> {
    /// The version it applies to.
    pub base: u64,
    positions: &'a [u8],
}

impl<'a> Delta<'a> {
    /// Reads a delta body.
    ///
    /// # Errors
    /// [`PeerError::Body`]: shorter than its header or than its count
    /// says, or bytes left after the last position.
    pub fn parse(body: &'a [u8]) -> Result<Delta<'a>, PeerError> {
        let (h, rest) = body
            .split_at_checked(DELTA_HEADER_LEN)
            .ok_or(PeerError::Body)?;
        let mut b = [0u8; 8];
        b.copy_from_slice(&h[..8]);
        let count = usize::from(u16::from_be_bytes([h[8], h[9]]));
        if rest.len() != count * 4 {
            return Err(PeerError::Body);
        }
        Ok(Delta {
            base: u64::from_be_bytes(b),
            positions: rest,
        })
    }

    /// The flipped bit positions.
    pub fn positions(&self) -> impl Iterator<Item = u32> + 'a {
        self.positions
            .chunks_exact(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.positions.len() / 4
    }

    /// Whether none.
    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }

    /// Writes a delta body from `base` and `positions` into `out`
    /// (appended).
    pub fn emit(base: u64, positions: &[u32], out: &mut Vec<u8>) {
        out.extend_from_slice(&base.to_be_bytes());
        out.extend_from_slice(&(positions.len() as u16).to_be_bytes());
        for p in positions {
            out.extend_from_slice(&p.to_be_bytes());
        }
    }
}

/// One flow of a flow answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowEntry {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Protocol number.
    pub protocol: u8,
    /// Source port (or 0).
    pub src_port: u16,
    /// Destination port (or ICMP type and code, or 0).
    pub dst_port: u16,
    /// The generation of its last report (part of the element: see
    /// [`crate::peer::flows`]).
    pub generation: u32,
    /// How long ago it was last reported, ms.
    pub age_ms: u32,
}

impl FlowEntry {
    /// Its bytes in an answer.
    pub fn wire_len(&self) -> usize {
        match self.src {
            IpAddr::V4(_) => 6 + 8 + 8,
            IpAddr::V6(_) => 6 + 32 + 8,
        }
    }

    /// Appends it to an answer body in `out`; `false` (nothing written)
    /// when its addresses are of two families.
    pub fn emit(&self, out: &mut Vec<u8>) -> bool {
        match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                out.extend_from_slice(&[4, self.protocol]);
                out.extend_from_slice(&self.src_port.to_be_bytes());
                out.extend_from_slice(&self.dst_port.to_be_bytes());
                out.extend_from_slice(&s.octets());
                out.extend_from_slice(&d.octets());
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                out.extend_from_slice(&[6, self.protocol]);
                out.extend_from_slice(&self.src_port.to_be_bytes());
                out.extend_from_slice(&self.dst_port.to_be_bytes());
                out.extend_from_slice(&s.octets());
                out.extend_from_slice(&d.octets());
            }
            _ => return false,
        }
        out.extend_from_slice(&self.generation.to_be_bytes());
        out.extend_from_slice(&self.age_ms.to_be_bytes());
        true
    }
}

/// The entries of a flow answer's body, checked as they are read: the
/// iterator yields `Err` once (and then ends) at the first entry that does
/// not fit, has an unknown family, or when bytes are left after the
/// count's last entry.
#[derive(Debug, Clone)]
pub struct FlowEntries<'a> {
    rest: &'a [u8],
    left: u16,
    failed: bool,
}

impl<'a> FlowEntries<'a> {
    /// The entries of `body`.
    ///
    /// # Errors
    /// [`PeerError::Body`] when the body is shorter than its count field.
    pub fn new(body: &'a [u8]) -> Result<FlowEntries<'a>, PeerError> {
        let (h, rest) = body
            .split_at_checked(ANSWER_HEADER_LEN)
            .ok_or(PeerError::Body)?;
        Ok(FlowEntries {
            rest,
            left: u16::from_be_bytes([h[0], h[1]]),
            failed: false,
        })
    }

    /// Entries the count announces that are not read yet.
    pub fn remaining(&self) -> u16 {
        self.left
    }

    /// Writes an answer body's count into `out` (appended); the entries
    /// follow ([`FlowEntry::emit`]).
    pub fn emit_count(count: u16, out: &mut Vec<u8>) {
        out.extend_from_slice(&count.to_be_bytes());
    }
}

impl Iterator for FlowEntries<'_> {
    type Item = Result<FlowEntry, PeerError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if self.left == 0 {
            if self.rest.is_empty() {
                return None;
            }
            self.failed = true;
            return Some(Err(PeerError::Body));
        }
        let r = self.rest;
        let alen = match r.first() {
            Some(4) => 4,
            Some(6) => 16,
            _ => {
                self.failed = true;
                return Some(Err(PeerError::Body));
            }
        };
        let need = 6 + 2 * alen + 8;
        if r.len() < need {
            self.failed = true;
            return Some(Err(PeerError::Body));
        }
        let protocol = r[1];
        let src_port = u16::from_be_bytes([r[2], r[3]]);
        let dst_port = u16::from_be_bytes([r[4], r[5]]);
        let addr = |at: usize| -> IpAddr {
            if alen == 4 {
                let mut a = [0u8; 4];
                a.copy_from_slice(&r[at..at + 4]);
                IpAddr::V4(Ipv4Addr::from(a))
            } else {
                let mut a = [0u8; 16];
                a.copy_from_slice(&r[at..at + 16]);
                IpAddr::V6(Ipv6Addr::from(a))
            }
        };
        let (src, dst) = (addr(6), addr(6 + alen));
        let at = 6 + 2 * alen;
        let word = |at: usize| u32::from_be_bytes([r[at], r[at + 1], r[at + 2], r[at + 3]]);
        let (generation, age_ms) = (word(at), word(at + 4));
        self.rest = &r[need..];
        self.left -= 1;
        Some(Ok(FlowEntry {
            src,
            dst,
            protocol,
            src_port,
            dst_port,
            generation,
            age_ms,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A flow summary of one segment, tagged: the header annotated.
    #[rustfmt::skip]
    const SUMMARY: [u8; 28 + 8 + 4] = [
        b'B', b'P',             // magic
        0x01,                   // version 1
        0x03,                   // flow summary
        0x00, 0x38,             // 56 bytes: 28 + 12 body + 16 tag
        0x00, 0x01,             // tagged
        0x00, 0x00, 0x00, 0x07, // sender 7
        0x18, 0x7a, 0x9c, 0x6b, 0x2d, 0x00, 0x00, 0x01, // seq
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xbe, 0xef, // nonce 0xbeef
        0x00, 0x00,             // segment 0
        0x00, 0x01,             //   of 1
        0x00, 0x00, 0x00, 0x05, // 5 items
        0xa1, 0xa2, 0xa3, 0xa4, // filter bytes
    ];

    fn key() -> TagKey {
        TagKey::derive(b"lab secret")
    }

    #[test]
    fn construct() {
        let mut body = Vec::new();
        Segment {
            index: 0,
            count: 1,
            items: 5,
            bytes: &[0xa1, 0xa2, 0xa3, 0xa4],
        }
        .emit(&mut body);
        let mut out = vec![0xa5; 100];
        let h = Header {
            kind: Kind::FlowSummary,
            sender: 7,
            seq: 0x187a_9c6b_2d00_0001,
            aux: 0xbeef,
        };
        assert!(emit(&h, &body, Some(&key()), &mut out));
        assert_eq!(&out[..SUMMARY.len()], &SUMMARY[..]);
        assert_eq!(out.len(), SUMMARY.len() + TAG_LEN);
        assert_eq!(&out[SUMMARY.len()..], &key().tag(&SUMMARY)[..]);
    }

    #[test]
    fn deconstruct() {
        let mut bytes = SUMMARY.to_vec();
        bytes.extend_from_slice(&key().tag(&SUMMARY));
        let m = Message::new_checked(&bytes[..]).unwrap();
        assert_eq!(m.kind(), Kind::FlowSummary);
        assert_eq!(m.sender(), 7);
        assert_eq!(m.seq(), 0x187a_9c6b_2d00_0001);
        assert_eq!(m.aux(), 0xbeef);
        assert!(m.is_tagged());
        assert!(key().verify(m.signed(), m.tag().unwrap()));
        assert!(!TagKey::derive(b"other").verify(m.signed(), m.tag().unwrap()));
        let s = Segment::parse(m.body()).unwrap();
        assert_eq!((s.index, s.count, s.items), (0, 1, 5));
        assert_eq!(s.bytes, &[0xa1, 0xa2, 0xa3, 0xa4]);
    }

    #[test]
    fn impossible_len() {
        let mut bytes = SUMMARY.to_vec();
        bytes.extend_from_slice(&key().tag(&SUMMARY));
        // Every cut of the message is refused.
        for n in 0..bytes.len() {
            assert!(Message::new_checked(&bytes[..n]).is_err(), "{n}");
        }
        // A length field that lies.
        bytes[5] = bytes[5].wrapping_add(1);
        assert_eq!(
            Message::new_checked(&bytes[..]).err(),
            Some(PeerError::Length)
        );
        // Tagged but too short for the tag.
        let mut short = SUMMARY[..HEADER_LEN].to_vec();
        short[4..6].copy_from_slice(&(HEADER_LEN as u16).to_be_bytes());
        assert_eq!(
            Message::new_checked(&short[..]).err(),
            Some(PeerError::Truncated)
        );
        short[7] = 0;
        assert!(Message::new_checked(&short[..]).is_ok());
        short[2] = 9;
        assert_eq!(
            Message::new_checked(&short[..]).err(),
            Some(PeerError::Version(9))
        );
        short[0] = b'X';
        assert_eq!(
            Message::new_checked(&short[..]).err(),
            Some(PeerError::BadMagic)
        );
    }

    #[test]
    fn segments_and_deltas_check_their_counts() {
        assert!(Segment::parse(&[0, 0, 0, 0, 0, 0, 0, 1, 9]).is_err()); // count 0
        assert!(Segment::parse(&[0, 2, 0, 2, 0, 0, 0, 1, 9]).is_err()); // index >= count
        assert!(Segment::parse(&[0, 0, 0, 65, 0, 0, 0, 1, 9]).is_err()); // over the bound
        assert!(Segment::parse(&[0, 0, 0, 1, 0, 0, 0, 1]).is_err()); // no bytes
        let mut d = Vec::new();
        Delta::emit(41, &[3, 70_000], &mut d);
        let delta = Delta::parse(&d).unwrap();
        assert_eq!(delta.base, 41);
        assert_eq!(delta.positions().collect::<Vec<_>>(), [3, 70_000]);
        assert!(Delta::parse(&d[..d.len() - 1]).is_err());
        d.push(0);
        assert!(Delta::parse(&d).is_err());
        // A count of 65535 with no positions.
        assert!(Delta::parse(&[0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]).is_err());
    }

    #[test]
    fn flow_answers_round_trip_and_stop_at_a_bad_entry() {
        let flows = [
            FlowEntry {
                src: "10.0.0.1".parse().unwrap(),
                dst: "10.0.0.2".parse().unwrap(),
                protocol: 17,
                src_port: 5000,
                dst_port: 53,
                generation: 9,
                age_ms: 1200,
            },
            FlowEntry {
                src: "2001:db8::1".parse().unwrap(),
                dst: "2001:db8::2".parse().unwrap(),
                protocol: 6,
                src_port: 443,
                dst_port: 40_000,
                generation: 10,
                age_ms: 0,
            },
        ];
        let mut body = Vec::new();
        FlowEntries::emit_count(2, &mut body);
        for f in &flows {
            assert!(f.emit(&mut body));
        }
        assert_eq!(
            body.len(),
            2 + flows.iter().map(FlowEntry::wire_len).sum::<usize>()
        );
        let got: Vec<_> = FlowEntries::new(&body).unwrap().collect();
        assert_eq!(got, flows.iter().map(|f| Ok(*f)).collect::<Vec<_>>());
        // A count larger than the entries present: an error, once.
        let mut lie = body.clone();
        lie[1] = 3;
        let got: Vec<_> = FlowEntries::new(&lie).unwrap().collect();
        assert_eq!(got.len(), 3);
        assert_eq!(got[2], Err(PeerError::Body));
        // Bytes after the last entry.
        body.push(0);
        assert_eq!(
            FlowEntries::new(&body).unwrap().last(),
            Some(Err(PeerError::Body))
        );
        // Mixed families are not written.
        let mixed = FlowEntry {
            dst: "2001:db8::2".parse().unwrap(),
            ..flows[0]
        };
        assert!(!mixed.emit(&mut Vec::new()));
    }

    #[test]
    fn a_message_over_the_limit_is_not_made() {
        let h = Header {
            kind: Kind::Membership,
            sender: 1,
            seq: 1,
            aux: 0,
        };
        let mut out = Vec::new();
        assert!(emit(
            &h,
            &vec![0; segment_capacity(true) + SEGMENT_HEADER_LEN],
            Some(&key()),
            &mut out
        ));
        assert_eq!(out.len(), MAX_LEN);
        assert!(!emit(&h, &vec![0; MAX_LEN], None, &mut out));
        assert!(out.is_empty());
    }

    /// Arbitrary bytes never panic a reader.
    #[test]
    fn arbitrary_bytes() {
        let mut s = 0x1234_5678_u64;
        for len in 0..400 {
            let mut b = Vec::with_capacity(len);
            for _ in 0..len {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                b.push((s >> 56) as u8);
            }
            if len >= 6 {
                b[0..2].copy_from_slice(&MAGIC);
                b[2] = VERSION;
                b[4..6].copy_from_slice(&(len as u16).to_be_bytes());
            }
            if let Ok(m) = Message::new_checked(&b[..]) {
                let _ = (m.kind(), m.sender(), m.seq(), m.aux(), m.tag());
                let _ = Segment::parse(m.body());
                let _ = Delta::parse(m.body()).map(|d| d.positions().count());
                if let Ok(e) = FlowEntries::new(m.body()) {
                    let _ = e.count();
                }
            }
        }
    }
}
