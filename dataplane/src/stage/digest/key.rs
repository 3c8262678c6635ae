//! The invariant content of an IP packet: what SPIE hashes, the bytes no
//! router on the way changes.
//!
//! Snoeren et al. ("Hash-Based IP Traceback", SIGCOMM 2001) digest the IPv4
//! header without the fields routers change (TOS, TTL, checksum) and
//! without options, plus the first 8 bytes of payload. Here, in words for
//! the kernels' batch hash:
//!
//! | IPv4, 6 words | bits |
//! |---|---|
//! | 0 | ingress port (8) \| protocol (8) \| payload length (16) |
//! | 1 | identification (16) \| flags and fragment offset (16) |
//! | 2, 3 | source, destination |
//! | 4, 5 | the first 8 bytes after the header and its options (zero-padded) |
//!
//! | IPv6, 12 words | bits |
//! |---|---|
//! | 0 | ingress port (8) \| next header after hop-by-hop options (8) \| payload length without them (16) |
//! | 1 | flow label (20) |
//! | 2..6, 6..10 | source, destination |
//! | 10, 11 | the first 8 bytes after the fixed header and any hop-by-hop options header |
//!
//! Left out, so that the digest is the same at every hop: the TTL / hop
//! limit, DSCP and ECN (traffic class), the IPv4 header checksum, and IPv4
//! options and the IPv6 hop-by-hop options header, which routers insert,
//! change or strip (the Icarus option is carried in either). The payload
//! length is the IP length less the header and options, which is the same
//! with or without them. The link layer is never part of it.
//!
//! The payload bytes stop at the IP length: Ethernet padding after a short
//! datagram is not the packet's. A datagram shorter than 8 bytes of payload
//! is zero-padded; its length word tells the padding apart.
//!
//! The ingress port is folded into word 0 ([`Invariant::with_port`]), so
//! the digest records which neighbour a packet came from: a router asked
//! about a packet tests each of its ports.
//!
//! Both the forwarding path and a query build keys with
//! [`Invariant::from_ip`]: one function, so a query's key is the key the
//! router recorded. On the forwarding path the bytes are a parsed frame's,
//! whatever the capture kept ([`Completeness::AsCaptured`]); a query must
//! carry every byte the digest covers ([`Completeness::Whole`]).

use core::fmt;

/// Words of an IPv4 key.
pub const V4_WORDS: usize = 6;
/// Words of an IPv6 key.
pub const V6_WORDS: usize = 12;
/// Payload bytes covered after the IP header.
pub const PAYLOAD_BYTES: usize = 8;

/// IPv6's hop-by-hop options header.
const HOP_BY_HOP: u8 = 0;

/// The digest input of one packet (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Invariant {
    /// An IPv4 packet's words.
    V4([u32; V4_WORDS]),
    /// An IPv6 packet's words.
    V6([u32; V6_WORDS]),
}

/// Whether the bytes given must hold everything the digest covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completeness {
    /// A frame as it arrived or as a capture kept it: payload bytes the
    /// capture cut are left as zeros (the router recorded them so).
    AsCaptured,
    /// A query: the header and the first 8 bytes of payload (or the whole
    /// payload when shorter) must be present.
    Whole,
}

/// Why bytes give no key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InvariantError {
    /// No bytes.
    Empty,
    /// The version nibble is neither 4 nor 6.
    Version(u8),
    /// Fewer bytes than the part of the header read (`need` bytes).
    Truncated {
        /// Bytes needed.
        need: usize,
        /// Bytes given.
        have: usize,
    },
    /// The IPv4 header length field is below 5 words.
    HeaderLength(u8),
    /// The IPv4 total length is below the header length.
    TotalLength {
        /// The total length field.
        total: u16,
        /// The header length, bytes.
        header: usize,
    },
}

impl fmt::Display for InvariantError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InvariantError::Empty => f.write_str("no bytes"),
            InvariantError::Version(v) => {
                write!(f, "IP version {v} (the first nibble must be 4 or 6)")
            }
            InvariantError::Truncated { need, have } => write!(
                f,
                "{have} bytes: the header and the first {PAYLOAD_BYTES} bytes of payload need {need}"
            ),
            InvariantError::HeaderLength(ihl) => {
                write!(f, "IPv4 header length {ihl} words (at least 5)")
            }
            InvariantError::TotalLength { total, header } => write!(
                f,
                "IPv4 total length {total} is below the header length {header}"
            ),
        }
    }
}

impl std::error::Error for InvariantError {}

/// Big-endian word of up to four bytes at `at`, zero-padded past `end`
/// (`end <= b.len()`).
#[inline(always)]
fn word_padded(b: &[u8], at: usize, end: usize) -> u32 {
    if let Some(&[a, x, y, z]) = b.get(at..at.wrapping_add(4)).filter(|_| at + 4 <= end) {
        return u32::from_be_bytes([a, x, y, z]);
    }
    let mut w = [0u8; 4];
    for (i, x) in w.iter_mut().enumerate() {
        let j = at + i;
        if j < end {
            *x = b.get(j).copied().unwrap_or(0);
        }
    }
    u32::from_be_bytes(w)
}

#[inline(always)]
fn be32(b: &[u8], at: usize) -> u32 {
    match b.get(at..at.wrapping_add(4)) {
        Some(&[a, x, y, z]) => u32::from_be_bytes([a, x, y, z]),
        _ => word_padded(b, at, b.len()),
    }
}

#[inline(always)]
fn be16(b: &[u8], at: usize) -> u16 {
    match b.get(at..at.wrapping_add(2)) {
        Some(&[a, x]) => u16::from_be_bytes([a, x]),
        _ => 0,
    }
}

/// Writes the IPv4 key of `ip` into `w` (see the module docs).
#[inline(always)]
pub(crate) fn v4_into(
    ip: &[u8],
    completeness: Completeness,
    w: &mut [u32; V4_WORDS],
) -> Result<(), InvariantError> {
    let have = ip.len();
    let Some(h) = ip.get(..20) else {
        return Err(InvariantError::Truncated { need: 20, have });
    };
    let ihl = h[0] & 0x0f;
    if ihl < 5 {
        return Err(InvariantError::HeaderLength(ihl));
    }
    let hlen = usize::from(ihl) * 4;
    let total = u16::from_be_bytes([h[2], h[3]]);
    // A zero total length is a capture of a TCP segmentation offload:
    // the datagram is what was captured.
    let total_len = if total == 0 { have } else { usize::from(total) };
    if total_len < hlen {
        return Err(InvariantError::TotalLength {
            total,
            header: hlen,
        });
    }
    let payload_len = total_len - hlen;
    let end = hlen + payload_len.min(PAYLOAD_BYTES);
    if completeness == Completeness::Whole && have < end {
        return Err(InvariantError::Truncated { need: end, have });
    }
    let end = end.min(have);
    *w = [
        (u32::from(h[9]) << 16) | (payload_len as u32 & 0xffff),
        u32::from_be_bytes([h[4], h[5], h[6], h[7]]),
        u32::from_be_bytes([h[12], h[13], h[14], h[15]]),
        u32::from_be_bytes([h[16], h[17], h[18], h[19]]),
        word_padded(ip, hlen, end),
        word_padded(ip, hlen + 4, end),
    ];
    Ok(())
}

/// [`v4_into`] with [`Completeness::AsCaptured`], for a datagram the
/// parser read (`hlen` and `total_len` its [`Parsed::ip_header_len`] and
/// [`Parsed::ip_total_len`]: the header length, the total length or, for
/// a total of 0, the bytes captured): the same key, read without checking
/// again what the parser checked when the payload's first 8 bytes are
/// there (the forwarding path's common case); `false` when there is no key.
///
/// [`Parsed::ip_header_len`]: crate::wire::Parsed::ip_header_len
/// [`Parsed::ip_total_len`]: crate::wire::Parsed::ip_total_len
#[inline(always)]
pub(crate) fn v4_parsed_into(
    ip: &[u8],
    hlen: usize,
    total_len: usize,
    w: &mut [u32; V4_WORDS],
) -> bool {
    let end = hlen + PAYLOAD_BYTES;
    // The header's first 20 bytes and the payload's first 8 as arrays:
    // one length check each, none per byte.
    let parts = ip
        .get(..end)
        .filter(|_| hlen >= 20 && total_len >= end)
        .and_then(|b| Some((b.first_chunk::<20>()?, b.last_chunk::<PAYLOAD_BYTES>()?)));
    match parts {
        Some((h, p)) => {
            let r =
                |a: &[u8], at: usize| u32::from_be_bytes([a[at], a[at + 1], a[at + 2], a[at + 3]]);
            *w = [
                (u32::from(h[9]) << 16) | ((total_len - hlen) as u32 & 0xffff),
                r(h, 4),
                r(h, 12),
                r(h, 16),
                r(p, 0),
                r(p, 4),
            ];
            true
        }
        None => v4_into(ip, Completeness::AsCaptured, w).is_ok(),
    }
}

/// Writes the IPv6 key of `ip` into `w` (see the module docs).
#[inline(always)]
pub(crate) fn v6_into(
    ip: &[u8],
    completeness: Completeness,
    w: &mut [u32; V6_WORDS],
) -> Result<(), InvariantError> {
    let have = ip.len();
    if have < 40 {
        return Err(InvariantError::Truncated { need: 40, have });
    }
    let field = be16(ip, 4);
    let mut next = ip[6];
    let mut off = 40usize;
    let mut payload = field;
    // The datagram ends at its payload length; a jumbogram (length 0, the
    // real one in a hop-by-hop option) at the bytes given.
    let dgram_end = if field == 0 {
        have
    } else {
        40 + usize::from(field)
    };
    if next == HOP_BY_HOP {
        match ip.get(40..42) {
            Some(&[nh, len]) => {
                let hbh = (usize::from(len) + 1) * 8;
                next = nh;
                off += hbh;
                payload = payload.wrapping_sub(hbh as u16);
            }
            _ if completeness == Completeness::Whole => {
                return Err(InvariantError::Truncated { need: 42, have });
            }
            _ => {}
        }
    }
    let end = off + dgram_end.saturating_sub(off).min(PAYLOAD_BYTES);
    if completeness == Completeness::Whole && have < end {
        return Err(InvariantError::Truncated { need: end, have });
    }
    let end = end.min(have);
    w[0] = (u32::from(next) << 16) | u32::from(payload);
    w[1] = be32(ip, 0) & 0x000f_ffff;
    for (i, x) in w[2..10].iter_mut().enumerate() {
        *x = be32(ip, 8 + 4 * i);
    }
    w[10] = word_padded(ip, off, end);
    w[11] = word_padded(ip, off + 4, end);
    Ok(())
}

impl Invariant {
    /// The key of the IP datagram starting at `ip[0]` (see the module
    /// docs), with ingress port 0.
    ///
    /// # Errors
    /// Not IP, a header shorter than its fixed part, inconsistent IPv4
    /// lengths, or (with [`Completeness::Whole`]) covered bytes missing.
    pub fn from_ip(ip: &[u8], completeness: Completeness) -> Result<Invariant, InvariantError> {
        let first = *ip.first().ok_or(InvariantError::Empty)?;
        match first >> 4 {
            4 => {
                let mut w = [0; V4_WORDS];
                v4_into(ip, completeness, &mut w).map(|()| Invariant::V4(w))
            }
            6 => {
                let mut w = [0; V6_WORDS];
                v6_into(ip, completeness, &mut w).map(|()| Invariant::V6(w))
            }
            v => Err(InvariantError::Version(v)),
        }
    }

    /// The key of a frame's IP datagram the parser read (`ip` from its
    /// header on): [`Invariant::from_ip`] with [`Completeness::AsCaptured`],
    /// as the forwarding path computes it from the parser's lengths.
    ///
    /// # Errors
    /// As [`Invariant::from_ip`]; [`InvariantError::Empty`] when `parsed`
    /// is not IP.
    pub fn from_parsed(
        ip: &[u8],
        parsed: &crate::wire::Parsed,
    ) -> Result<Invariant, InvariantError> {
        match parsed.ip_version {
            Some(crate::wire::IpVersion::V4) => {
                let mut w = [0; V4_WORDS];
                if v4_parsed_into(ip, parsed.ip_header_len, parsed.ip_total_len, &mut w) {
                    Ok(Invariant::V4(w))
                } else {
                    Self::from_ip(ip, Completeness::AsCaptured)
                }
            }
            Some(crate::wire::IpVersion::V6) => Self::from_ip(ip, Completeness::AsCaptured),
            None => Err(InvariantError::Empty),
        }
    }

    /// The key with `port` as its ingress port (replacing any).
    #[inline]
    pub fn with_port(self, port: u8) -> Invariant {
        match self {
            Invariant::V4(mut w) => {
                w[0] = fold_port(w[0], port);
                Invariant::V4(w)
            }
            Invariant::V6(mut w) => {
                w[0] = fold_port(w[0], port);
                Invariant::V6(w)
            }
        }
    }

    /// The ingress port folded in.
    pub fn port(&self) -> u8 {
        let w0 = match self {
            Invariant::V4(w) => w[0],
            Invariant::V6(w) => w[0],
        };
        (w0 >> 24) as u8
    }
}

/// Word 0 of a key with `port` folded in.
#[inline(always)]
pub(crate) fn fold_port(w0: u32, port: u8) -> u32 {
    (w0 & 0x00ff_ffff) | (u32::from(port) << 24)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// IPv4 UDP 10.0.0.1:1000 -> 10.0.0.2:2000, 4 payload bytes; TTL 64,
    /// TOS 0, checksum left 0.
    const V4: [u8; 32] = [
        0x45, 0x00, 0x00, 0x20, // version 4, IHL 5, TOS 0, total 32
        0x12, 0x34, 0x40, 0x00, // id 0x1234, DF
        0x40, 0x11, 0x00, 0x00, // TTL 64, UDP, checksum
        10, 0, 0, 1, // source
        10, 0, 0, 2, // destination
        0x03, 0xe8, 0x07, 0xd0, // ports 1000 -> 2000
        0x00, 0x0c, 0xab, 0xcd, // UDP length 12, checksum
        1, 2, 3, 4, // payload
    ];

    #[test]
    fn deconstruct_v4() {
        let k = Invariant::from_ip(&V4, Completeness::Whole).unwrap();
        assert_eq!(
            k,
            Invariant::V4([
                (17 << 16) | 12,
                0x1234_4000,
                0x0a00_0001,
                0x0a00_0002,
                0x03e8_07d0,
                0x000c_abcd,
            ])
        );
        assert_eq!(k.port(), 0);
        assert_eq!(k.with_port(7).port(), 7);
        assert_eq!(k.with_port(7).with_port(0), k);
    }

    /// TTL, TOS (DSCP and ECN) and the checksum change nothing; the id,
    /// the addresses, the protocol and the first payload bytes do.
    #[test]
    fn mutable_fields_are_left_out() {
        let base = Invariant::from_ip(&V4, Completeness::Whole).unwrap();
        for (at, v) in [(1usize, 0xb9u8), (8, 1), (10, 0xff), (11, 0x12)] {
            let mut p = V4;
            p[at] = v;
            assert_eq!(Invariant::from_ip(&p, Completeness::Whole).unwrap(), base);
        }
        for at in [4usize, 6, 9, 12, 19, 20, 27] {
            let mut p = V4;
            p[at] ^= 0x01;
            assert_ne!(
                Invariant::from_ip(&p, Completeness::Whole).unwrap(),
                base,
                "byte {at}"
            );
        }
        // Bytes after the first 8 of payload are not covered.
        let mut p = V4;
        p[28] ^= 0xff;
        assert_eq!(Invariant::from_ip(&p, Completeness::Whole).unwrap(), base);
    }

    /// An options field (here the 8 bytes an Icarus option of 64 bits...
    /// any option) inserted between hops leaves the key as it was.
    #[test]
    fn ipv4_options_are_left_out() {
        let base = Invariant::from_ip(&V4, Completeness::Whole).unwrap();
        let mut p = V4[..20].to_vec();
        p[0] = 0x47; // IHL 7: 8 bytes of options
        p[3] = 0x28; // total 40
        p.extend_from_slice(&[1, 1, 0x5e, 6, 0xaa, 0xbb, 0xcc, 0xdd]);
        p.extend_from_slice(&V4[20..]);
        assert_eq!(Invariant::from_ip(&p, Completeness::Whole).unwrap(), base);
    }

    /// Ethernet padding after a short datagram is not covered, and a
    /// payload shorter than 8 bytes is padded with zeros.
    #[test]
    fn padding_after_the_datagram_is_ignored() {
        let mut p = V4[..28].to_vec(); // UDP header only
        p[3] = 28;
        let k = Invariant::from_ip(&p, Completeness::Whole).unwrap();
        p.extend_from_slice(&[0xee; 18]);
        assert_eq!(Invariant::from_ip(&p, Completeness::Whole).unwrap(), k);
        let mut q = V4[..24].to_vec(); // 4 bytes of payload
        q[3] = 24;
        let Invariant::V4(w) = Invariant::from_ip(&q, Completeness::Whole).unwrap() else {
            panic!()
        };
        assert_eq!((w[0] & 0xffff, w[4], w[5]), (4, 0x03e8_07d0, 0));
    }

    #[test]
    fn a_query_needs_every_covered_byte() {
        assert_eq!(
            Invariant::from_ip(&V4[..27], Completeness::Whole),
            Err(InvariantError::Truncated { need: 28, have: 27 })
        );
        // As captured, the cut bytes are zeros.
        let cut = Invariant::from_ip(&V4[..24], Completeness::AsCaptured).unwrap();
        let Invariant::V4(w) = cut else { panic!() };
        assert_eq!(w[5], 0);
        assert_eq!(
            Invariant::from_ip(&V4[..19], Completeness::AsCaptured),
            Err(InvariantError::Truncated { need: 20, have: 19 })
        );
    }

    #[test]
    fn impossible_lengths() {
        let mut p = V4;
        p[0] = 0x44;
        assert_eq!(
            Invariant::from_ip(&p, Completeness::Whole),
            Err(InvariantError::HeaderLength(4))
        );
        let mut p = V4;
        p[3] = 16;
        assert_eq!(
            Invariant::from_ip(&p, Completeness::Whole),
            Err(InvariantError::TotalLength {
                total: 16,
                header: 20
            })
        );
        assert_eq!(
            Invariant::from_ip(&[0x50; 40], Completeness::Whole),
            Err(InvariantError::Version(5))
        );
        assert_eq!(
            Invariant::from_ip(&[], Completeness::Whole),
            Err(InvariantError::Empty)
        );
    }

    /// IPv6 UDP 2001:db8::1 -> 2001:db8::2, flow label 0x12345, hop limit
    /// 64, traffic class 0, then 8 bytes of UDP header and 4 of payload.
    fn v6(tc: u8, hop: u8) -> Vec<u8> {
        let mut p = vec![
            0x60 | (tc >> 4),
            (tc << 4) | 0x01,
            0x23,
            0x45, // version, class, flow label
            0x00,
            0x0c,
            17,
            hop, // payload length 12, UDP, hop limit
        ];
        p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        p.extend_from_slice(&[0x03, 0xe8, 0x07, 0xd0, 0x00, 0x0c, 0xab, 0xcd, 1, 2, 3, 4]);
        p
    }

    #[test]
    fn deconstruct_v6() {
        let k = Invariant::from_ip(&v6(0, 64), Completeness::Whole).unwrap();
        let Invariant::V6(w) = k else { panic!() };
        assert_eq!(w[0], (17 << 16) | 12);
        assert_eq!(w[1], 0x12345);
        assert_eq!(w[2..6], [0x2001_0db8, 0, 0, 1]);
        assert_eq!(w[6..10], [0x2001_0db8, 0, 0, 2]);
        assert_eq!(w[10..], [0x03e8_07d0, 0x000c_abcd]);
        // Traffic class and hop limit are left out.
        assert_eq!(
            Invariant::from_ip(&v6(0xb9, 3), Completeness::Whole).unwrap(),
            k
        );
    }

    /// A hop-by-hop options header inserted (as the Icarus IPv6 option is)
    /// leaves the key as it was.
    #[test]
    fn hop_by_hop_options_are_left_out() {
        let plain = v6(0, 64);
        let k = Invariant::from_ip(&plain, Completeness::Whole).unwrap();
        let mut p = plain[..40].to_vec();
        p[5] = 12 + 24; // payload length with a 24-byte HBH header
        p[6] = HOP_BY_HOP;
        p.extend_from_slice(&[17, 2]); // next header UDP, (2 + 1) x 8 bytes
        p.extend_from_slice(&[0x3e, 20]); // an option of 20 bytes
        p.extend_from_slice(&[0x5a; 20]);
        p.extend_from_slice(&plain[40..]);
        assert_eq!(p.len(), 40 + 24 + 12);
        assert_eq!(Invariant::from_ip(&p, Completeness::Whole).unwrap(), k);
        // Its options are not covered either.
        p[45] ^= 0xff;
        assert_eq!(Invariant::from_ip(&p, Completeness::Whole).unwrap(), k);
        // A query cut inside the covered bytes is refused.
        assert!(matches!(
            Invariant::from_ip(&p[..70], Completeness::Whole),
            Err(InvariantError::Truncated { need: 72, have: 70 })
        ));
    }

    /// IPv4 and IPv6 keys of every length never panic (the property is
    /// fuzzed too: `dataplane/tests/fuzz_common/digest.rs`).
    #[test]
    fn every_prefix_of_a_packet() {
        for p in [V4.to_vec(), v6(0, 1)] {
            for n in 0..=p.len() {
                for c in [Completeness::Whole, Completeness::AsCaptured] {
                    let _ = Invariant::from_ip(&p[..n], c);
                }
            }
        }
    }
}
