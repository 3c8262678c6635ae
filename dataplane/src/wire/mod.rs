//! Zero-copy packet views and the hot-path parser.
//!
//! # Layout
//!
//! Every header type lives in its own module as a `Packet<T: AsRef<[u8]>>`
//! (or `Frame`, `Tag`, ...) view in the style of smoltcp's `wire` module: a
//! private `mod field` of byte ranges, getters on `AsRef<[u8]>`, setters on
//! `AsMut<[u8]>`, and the pair `new_unchecked` / `new_checked`.
//!
//! * [`ethernet`] — Ethernet II frames and [`EtherType`].
//! * [`vlan`] — 802.1Q / 802.1ad tags (TPIDs `0x8100`, `0x88a8`, `0x9100`).
//! * [`sll`] — Linux cooked capture v1 (`LINKTYPE_LINUX_SLL`).
//! * [`ipv4`] — IPv4 with options; [`ipv6`] — IPv6 and its extension headers.
//! * [`tcp`], [`udp`], [`icmpv4`], [`icmpv6`], [`igmp`] (v1/v2/v3), [`mld`] (v1/v2).
//! * [`parse()`] — the single entry point used on the hot path; it returns a
//!   small `Copy` summary [`Parsed`] or a [`Malformed`] reason.
//! * [`set_ce`] — ECN congestion marking with the RFC 1624 checksum update.
//!
//! # The no-panic promise
//!
//! Parsing untrusted bytes never panics:
//!
//! * [`parse()`] never panics, never allocates and never reads a byte whose
//!   presence it has not checked, for any input and any [`LinkType`]. Every
//!   offset and length it returns lies within the buffer it was given.
//! * A view built with `new_checked` has validated every length field its
//!   accessors rely on; after that, no getter or setter panics. A view built
//!   with `new_unchecked` makes no such promise (accessors index the buffer
//!   and panic on a short one), exactly as in smoltcp.
//! * Iterators over variable-length contents (IGMPv3 group records, MLDv2
//!   address records, IPv6 options) check each element as they go and stop
//!   at the first one that does not fit, whatever the constructor.
//!
//! Unknown protocol numbers are values ([`EtherType::Unknown`],
//! [`IpProtocol::Unknown`]), never errors.

use core::ops::{Range, RangeFrom};

pub mod build;
pub mod ethernet;
pub mod flow;
pub mod icarus;
pub mod icmpv4;
pub mod icmpv6;
pub mod igmp;
pub mod ip;
pub mod ipv4;
pub mod ipv6;
pub mod mld;
mod parse;
pub mod peer;
pub mod sll;
pub mod tcp;
pub mod udp;
pub mod vlan;

pub use ethernet::{EtherType, Frame as EthernetFrame};
pub use ip::{Ecn, IpProtocol, IpVersion};
pub use ipv4::Packet as Ipv4Packet;
pub use ipv6::Packet as Ipv6Packet;
pub use parse::{
    Fragment, Malformed, MalformedCounters, Parsed, parse, parse_into, parse_with_orig_len, set_ce,
    set_ce_at,
};
pub use tcp::{Packet as TcpPacket, TcpFlags};
pub use udp::Packet as UdpPacket;

/// A byte range inside a header.
pub(crate) type Field = Range<usize>;
/// The bytes from an offset to the end of a buffer.
pub(crate) type Rest = RangeFrom<usize>;

/// Error returned by the `new_checked`/`check_len` constructors of the views.
///
/// The hot-path parser reports the richer [`Malformed`] instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// The buffer is shorter than the header (or than a length field says).
    Truncated,
    /// A length or count field is inconsistent with the header's own rules.
    Malformed,
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Truncated => f.write_str("truncated packet"),
            Error::Malformed => f.write_str("malformed packet"),
        }
    }
}

impl std::error::Error for Error {}

/// Reads a big-endian `u16` at `at`; `None` when the buffer is too short.
#[inline(always)]
pub(crate) fn read_u16(buf: &[u8], at: usize) -> Option<u16> {
    match buf.get(at..at.checked_add(2)?) {
        Some(&[a, b]) => Some(u16::from_be_bytes([a, b])),
        _ => None,
    }
}

/// Reads a big-endian `u16` from a two-byte field (panics on a short buffer,
/// which `new_checked` rules out).
#[inline(always)]
pub(crate) fn get_u16(buf: &[u8], field: Field) -> u16 {
    u16::from_be_bytes([buf[field.start], buf[field.start + 1]])
}

/// Reads a big-endian `u32` from a four-byte field.
#[inline(always)]
pub(crate) fn get_u32(buf: &[u8], field: Field) -> u32 {
    let s = field.start;
    u32::from_be_bytes([buf[s], buf[s + 1], buf[s + 2], buf[s + 3]])
}

/// Writes a big-endian `u16` into a two-byte field.
#[inline(always)]
pub(crate) fn put_u16(buf: &mut [u8], field: Field, value: u16) {
    buf[field].copy_from_slice(&value.to_be_bytes());
}

/// Writes a big-endian `u32` into a four-byte field.
#[inline(always)]
pub(crate) fn put_u32(buf: &mut [u8], field: Field, value: u32) {
    buf[field].copy_from_slice(&value.to_be_bytes());
}

/// Defines a `Copy` enum over a wire number with an `Unknown` variant, and the
/// two `From` conversions.
macro_rules! wire_enum {
    (
        $(#[$attr:meta])*
        pub enum $name:ident($ty:ty) {
            $( $(#[$vattr:meta])* $variant:ident = $value:expr ),+ $(,)?
        }
    ) => {
        $(#[$attr])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$vattr])* $variant, )+
            /// Any other value, kept as its number.
            Unknown($ty),
        }

        impl From<$ty> for $name {
            #[inline]
            fn from(value: $ty) -> Self {
                match value {
                    $( $value => $name::$variant, )+
                    other => $name::Unknown(other),
                }
            }
        }

        impl From<$name> for $ty {
            /// The named values from a table indexed by the variant (a
            /// load, where a `match` compiles to a jump table whose
            /// indirect branch mispredicts on traffic that mixes
            /// protocols), an `Unknown` one's number by a select.
            #[inline]
            fn from(value: $name) -> Self {
                /// The variants in declaration order, `Unknown` last.
                #[allow(dead_code)]
                enum Index {
                    $( $variant, )+
                    Unknown,
                }
                const NAMED: &[$ty] = &[$( $value, )+ 0];
                let i = match value {
                    $( $name::$variant => Index::$variant as usize, )+
                    $name::Unknown(_) => Index::Unknown as usize,
                };
                match value {
                    $name::Unknown(other) => other,
                    _ => NAMED.get(i).copied().unwrap_or_default(),
                }
            }
        }
    };
}
pub(crate) use wire_enum;

/// The Internet checksum (RFC 1071) helpers shared by the views.
pub mod checksum {
    /// One's-complement sum of `data` (big-endian 16-bit words, an odd
    /// trailing byte padded with zero), folded to 16 bits. Not complemented.
    ///
    /// Computed as RFC 1071 (section 2) allows: the sum does not depend on
    /// byte order, so `data` is added as native-endian 64-bit words (each
    /// four 16-bit words; the tail padded with zeros after it) with
    /// end-around carry, in two independent chains of 16 bytes per step,
    /// then folded (`2^64 - 1` is a multiple of `0xffff`, so the folds
    /// agree) and swapped to big-endian. An add and an add-with-carry per
    /// eight bytes where the definition takes four adds; the synthetic
    /// workload's UDP checksums and every Icarus insertion use it.
    pub fn sum(data: &[u8]) -> u16 {
        #[inline(always)]
        fn add(acc: u64, w: u64) -> u64 {
            // The carry out of bit 63 comes back in at bit 0; `s + 1`
            // cannot overflow after an overflowing add (`s < w`).
            let (s, c) = acc.overflowing_add(w);
            s + u64::from(c)
        }
        let word = |c: &[u8]| {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            u64::from_ne_bytes(w)
        };
        let (mut a, mut b) = (0u64, 0u64);
        let mut chunks = data.chunks_exact(16);
        for c in &mut chunks {
            let (x, y) = c.split_at(8);
            a = add(a, word(x));
            b = add(b, word(y));
        }
        for c in chunks.remainder().chunks(8) {
            a = add(a, word(c));
        }
        let native = fold_carry(add(a, b));
        u16::from_be(native)
    }

    /// [`fold`] of a 64-bit one's-complement accumulator whose top bits
    /// are in use: its 32-bit halves added first (at most 33 bits).
    #[inline]
    fn fold_carry(acc: u64) -> u16 {
        fold((acc & 0xffff_ffff) + (acc >> 32))
    }

    /// Folds a wide one's-complement accumulator to 16 bits.
    #[inline]
    pub fn fold(mut acc: u64) -> u16 {
        while acc > 0xffff {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        acc as u16
    }

    /// RFC 1624 equation 3: the new checksum after the 16-bit word `old`
    /// covered by checksum `hc` becomes `new`: `HC' = ~(~HC + ~m + m')`.
    #[inline]
    pub fn update_word(hc: u16, old: u16, new: u16) -> u16 {
        !fold(u64::from(!hc) + u64::from(!old) + u64::from(new))
    }
}

/// The link-layer header type of a captured or received frame
/// (libpcap `LINKTYPE_*` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkType {
    /// `LINKTYPE_ETHERNET` (1).
    Ethernet,
    /// `LINKTYPE_RAW` (101) or `LINKTYPE_IPV4`/`LINKTYPE_IPV6` (228/229): the frame starts with an IP header.
    RawIp,
    /// `LINKTYPE_LINUX_SLL` (113): Linux cooked capture v1.
    LinuxSll,
    /// Any other link type, kept as its number.
    Unknown(u32),
}

impl LinkType {
    /// Maps a libpcap `LINKTYPE_*` number to a link type.
    pub fn from_linktype(v: u32) -> Self {
        match v {
            1 => LinkType::Ethernet,
            101 | 228 | 229 => LinkType::RawIp,
            113 => LinkType::LinuxSll,
            other => LinkType::Unknown(other),
        }
    }

    /// The libpcap `LINKTYPE_*` number for this link type.
    pub fn to_linktype(self) -> u32 {
        match self {
            LinkType::Ethernet => 1,
            LinkType::RawIp => 101,
            LinkType::LinuxSll => 113,
            LinkType::Unknown(v) => v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linktype_round_trip() {
        for v in [1u32, 101, 113, 147] {
            assert_eq!(LinkType::from_linktype(v).to_linktype(), v);
        }
        assert_eq!(LinkType::from_linktype(228), LinkType::RawIp);
    }

    /// Every wire enum gives back the number it was made from, over its
    /// whole domain: the table of named values is in declaration order.
    #[test]
    fn wire_enums_round_trip() {
        for v in 0..=u8::MAX {
            assert_eq!(u8::from(ip::IpProtocol::from(v)), v);
            assert_eq!(u8::from(icmpv4::Message::from(v)), v);
            assert_eq!(u8::from(icmpv6::Message::from(v)), v);
            assert_eq!(u8::from(igmp::Message::from(v)), v);
            assert_eq!(u8::from(igmp::RecordType::from(v)), v);
        }
        for v in 0..=u16::MAX {
            assert_eq!(u16::from(ethernet::EtherType::from(v)), v);
        }
        // Named and unknown values on both sides of the table.
        assert_eq!(u8::from(ip::IpProtocol::Udp), 17);
        assert_eq!(u8::from(ip::IpProtocol::Ipv6Opts), 60);
        assert_eq!(u8::from(ip::IpProtocol::Unknown(0)), 0);
        assert_eq!(u16::from(ethernet::EtherType::Unknown(0x88b5)), 0x88b5);
    }

    #[test]
    fn read_u16_bounds() {
        assert_eq!(read_u16(&[1, 2, 3], 1), Some(0x0203));
        assert_eq!(read_u16(&[1, 2, 3], 2), None);
        assert_eq!(read_u16(&[1, 2, 3], usize::MAX), None);
    }

    #[test]
    fn checksum_rfc1071_example() {
        // RFC 1071 section 3 example: 00 01 f2 03 f4 f5 f6 f7 sums to 0xddf2.
        assert_eq!(
            checksum::sum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            0xddf2
        );
        assert_eq!(checksum::sum(&[0xff]), 0xff00);
    }

    /// The 16-bit big-endian definition, word by word: the reference for
    /// the fast [`checksum::sum`].
    fn plain_sum(data: &[u8]) -> u16 {
        let mut acc: u64 = 0;
        let mut chunks = data.chunks_exact(2);
        for pair in &mut chunks {
            acc += u64::from(u16::from_be_bytes([pair[0], pair[1]]));
        }
        if let [last] = chunks.remainder() {
            acc += u64::from(*last) << 8;
        }
        checksum::fold(acc)
    }

    /// The fast sum equals the definition on every length 0..=300 of
    /// random bytes, at every alignment, and on the extremes: all zeros
    /// (0), all ones (0xffff), words that sum to a multiple of 0xffff, and
    /// a 64 KiB datagram of 0xff bytes (the accumulators at their
    /// largest).
    #[test]
    fn checksum_sum_equals_the_definition() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let bytes: Vec<u8> = (0..400)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        for start in 0..8 {
            for len in 0..=300 {
                let d = &bytes[start..start + len];
                assert_eq!(checksum::sum(d), plain_sum(d), "start {start} len {len}");
            }
        }
        for d in [
            vec![0u8; 37],
            vec![0xffu8; 37],
            vec![0xffu8; 65_535],
            vec![0x12, 0x34, 0xed, 0xcb],
            vec![0x80, 0x00, 0x7f, 0xff, 0x00],
        ] {
            assert_eq!(
                checksum::sum(&d),
                plain_sum(&d),
                "{:?}",
                &d[..d.len().min(8)]
            );
        }
        assert_eq!(checksum::sum(&[]), 0);
        assert_eq!(checksum::sum(&[0xff; 2]), 0xffff);
    }

    #[test]
    fn checksum_update_matches_recompute() {
        let mut hdr = [
            0x45u8, 0x02, 0x00, 0x54, 0x12, 0x34, 0x40, 0x00, 0x40, 0x01, 0x00, 0x00, 10, 0, 0, 1,
            10, 0, 0, 2,
        ];
        let hc = !checksum::sum(&hdr);
        hdr[10..12].copy_from_slice(&hc.to_be_bytes());
        let old = u16::from_be_bytes([hdr[0], hdr[1]]);
        hdr[1] = 0x03;
        let new = u16::from_be_bytes([hdr[0], hdr[1]]);
        let hc2 = checksum::update_word(hc, old, new);
        hdr[10..12].copy_from_slice(&hc2.to_be_bytes());
        assert_eq!(checksum::sum(&hdr), 0xffff);
    }
}
