//! The icarus loop-detection option: an m-bit Bloom filter carried in an
//! IPv4 option or an IPv6 hop-by-hop option.
//!
//! Every icarus node ORs its own fixed mask of k bits into the filter. If
//! every bit of the mask is already set, the packet has (almost certainly)
//! visited this node before: it is on a loop. This module is the wire
//! format: views over the option, emit functions, and the operations on
//! whole frames (find, check-and-update, insert, strip). Masks, counters and
//! the pipeline stage live in [`crate::stage::icarus`].
//!
//! # Option types
//!
//! Both options use the experimental values reserved by RFC 4727 for
//! exactly this kind of experiment:
//!
//! * **IPv4: option type `0x5E`** = copy 0, class 2 (debugging and
//!   measurement), number 30 (RFC 4727 section 2.1 reserves number 30 with
//!   every copy/class combination: `0x1E`, `0x5E`, `0x9E`, `0xDE`). Copy 0:
//!   a router that fragments the packet keeps the option in the first
//!   fragment only (the filter describes the path, not the data).
//! * **IPv6: hop-by-hop option type `0x3E`** (RFC 4727 section 2.2 reserves
//!   `0x1E`, `0x3E`, ..., `0xFE`). Its top two bits `00` say "skip this
//!   option if you do not know it", so routers without icarus forward the
//!   packet unchanged, and its third bit `1` says "the data may change en
//!   route" (it does: every hop ORs into it), so the option data counts as
//!   zero for an AH integrity check.
//!
//! # The filter
//!
//! `m` bits, `m` = 64, 128 (the default) or 256 ([`FilterWidth`]), stored as
//! `m / 8` bytes in network order: **bit `i` is bit `7 - i % 8` of byte
//! `i / 8`**, i.e. bit 0 is the most significant bit of the first byte. In
//! code the filter is a sequence of big-endian 64-bit words ([`Filter`]),
//! bit `i` being bit `63 - i % 64` of word `i / 64`.
//!
//! # IPv4 layout
//!
//! The option is inserted right after the fixed 20-byte header, before any
//! option already there, preceded by two NOPs so that the block is a
//! multiple of 4 bytes (the IHL counts 32-bit words) and the filter starts
//! 4-byte aligned at offset 24 of the IP header:
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |   NOP (0x01)  |   NOP (0x01)  |  type (0x5E)  | len (2 + m/8) |  offset 20
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                                                               |  offset 24
//! ~               filter: m/8 bytes, bit 0 = MSB of byte 0        ~
//! |                                                               |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |          options that were already there, unchanged           |
//! ```
//!
//! | m   | option (type, len, filter) | block with the NOPs | header without other options |
//! |-----|----------------------------|---------------------|------------------------------|
//! | 64  | 10 bytes, len `0x0A`       | 12 bytes, IHL +3    | 32 bytes (IHL 8)             |
//! | 128 | 18 bytes, len `0x12`       | 20 bytes, IHL +5    | 40 bytes (IHL 10)            |
//! | 256 | 34 bytes, len `0x22`       | 36 bytes, IHL +9    | 56 bytes (IHL 14)            |
//!
//! IPv4 options are limited to 40 bytes, so m = 256 fits only in a header
//! with at most 4 bytes of other options. The parser accepts the option
//! anywhere in the option list (after NOPs or other options, not after an
//! end-of-list), with a length of exactly 10, 18 or 34.
//!
//! # IPv6 layout
//!
//! The option lives in the hop-by-hop header (the only extension header
//! every router on the path examines, RFC 8200 section 4.3). Its alignment
//! requirement is `8n + 6`, so the filter starts 8-byte aligned. When the
//! packet has no hop-by-hop header, a new one is inserted right after the
//! fixed header (its next header is the packet's old one); a PadN of 2
//! data bytes aligns the option and the header is then exactly `8 + m/8`
//! bytes, a multiple of 8 with no trailing padding:
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  next header  |  hdr ext len  |  PadN (0x01)  |  PadN len (2) |  offset 40
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |      0x00     |      0x00     |  type (0x3E)  |  len (m / 8)  |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                                                               |  offset 48
//! ~               filter: m/8 bytes, bit 0 = MSB of byte 0        ~
//! |                                                               |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! Header sizes: m = 64: 16 bytes (hdr ext len 1); m = 128: 24 bytes (2);
//! m = 256: 40 bytes (4).
//!
//! When the packet already has a hop-by-hop header, the option is put at
//! the front of it, right after the two-byte prefix, as an `8 + m/8`-byte
//! block that ends with a PadN of no data (`01 00`); the options that were
//! there move by a multiple of 8 bytes and keep their alignment:
//!
//! ```text
//! | nh | len+(1+m/64) | 01 02 00 00 | 3E  m/8 | filter (m/8) | 01 00 | old options ... |
//! ```
//!
//! # Inserting and stripping
//!
//! [`insert`] and [`strip`] work on a whole frame in a `Vec<u8>` (anything
//! before the IP header — Ethernet, VLAN tags, Linux SLL — is kept; bytes
//! after the IP datagram, such as Ethernet padding, move with it). They keep
//! every length and checksum right:
//!
//! * IPv4: IHL and total length grow or shrink by the block (a total length
//!   of 0, written by segmentation offload, stays 0), and the header
//!   checksum is updated incrementally (RFC 1624), so a correct checksum
//!   stays correct and a wrong one (a zero from TX offload) stays wrong by
//!   the same amount; insert-then-strip therefore restores every byte, but
//!   that a checksum field of `ffff` comes back as `0000`: both are the
//!   one's-complement zero, and the update never writes `ffff` (RFC 1624's
//!   equation 3 yields `0000` for that value).
//! * IPv6: payload length grows or shrinks; the next-header chain goes
//!   through the new hop-by-hop header, or the existing one's length grows.
//! * TCP and UDP checksums stay valid without being touched: the
//!   pseudo-header holds the upper-layer length (IPv4 total length minus
//!   the header; IPv6 payload length minus the extension headers), which
//!   does not change.
//!
//! Insertion is refused, leaving the frame untouched, when:
//!
//! * the option is already there ([`IcarusError::AlreadyPresent`]);
//! * the IPv4 header would exceed 60 bytes (40 bytes of options, e.g. a
//!   header that already has 40 bytes of options), a length would exceed
//!   65535, or an existing hop-by-hop header would exceed 2048 bytes
//!   ([`IcarusError::NoRoom`]);
//! * the packet is an IPv6 jumbogram or has a payload length of 0
//!   ([`IcarusError::Jumbogram`]): its length lives in the jumbo option
//!   (RFC 2675) and is not rewritten here;
//! * the header is cut short or its option list is malformed.
//!
//! Fragments are not special: each fragment carries its own IP header, so
//! the option can be inserted into and stripped from any fragment (an IPv4
//! router that fragments further copies the option into the first fragment
//! only, as its copy bit is 0; the later fragments then travel unchecked).
//!
//! [`strip`] removes exactly what [`insert`] added: the NOPs and option
//! (IPv4); the whole hop-by-hop header when it holds nothing else, or the
//! front block (IPv6). An option placed differently by someone else is
//! removed with its two preceding NOPs when there are two, otherwise it is
//! replaced by two NOPs (IPv4, the header shrinks by `m/8`); in IPv6 it is
//! overwritten by a PadN of the same size (the filter is gone, every other
//! option keeps its offset), as it is in a jumbogram.
//!
//! # Check and update
//!
//! [`check_and_update`] reads the filter at a [`Location`] found by
//! [`find`], and either reports [`Hop::Loop`] (every bit of the mask was
//! set; nothing is written) or ORs the mask in ([`Hop::Marked`]) and, for
//! IPv4, updates the header checksum incrementally by the bits it added.
//!
//! # The no-panic promise
//!
//! [`find`], [`check_and_update`], [`insert`], [`strip`] and the views'
//! `new_checked` never panic on any input and never read or write outside
//! the frame: a short or inconsistent header is an error.

use super::{Error, checksum, ip::IpVersion};

/// IPv4 option type: copy 0, class 2 (debugging and measurement), number 30 (RFC 4727).
pub const IPV4_OPTION_TYPE: u8 = 0x5e;
/// IPv6 hop-by-hop option type: action 00 (skip if unknown), may change
/// en route, experimental number (RFC 4727).
pub const IPV6_OPTION_TYPE: u8 = 0x3e;

/// IPv4 end-of-option-list.
const IPV4_EOL: u8 = 0x00;
/// IPv4 no-operation option.
const IPV4_NOP: u8 = 0x01;
/// IPv6 Pad1 option.
const IPV6_PAD1: u8 = 0x00;
/// IPv6 PadN option.
const IPV6_PADN: u8 = 0x01;
/// IPv6 next-header value of the hop-by-hop options header.
const NH_HOP_BY_HOP: u8 = 0;

/// Length of the fixed IPv4 header.
const IPV4_FIXED: usize = 20;
/// The longest IPv4 header (IHL 15).
const IPV4_MAX_HEADER: usize = 60;
/// Length of the fixed IPv6 header.
const IPV6_FIXED: usize = 40;
/// The longest hop-by-hop header (hdr ext len 255).
const HBH_MAX: usize = 256 * 8;

/// The size of the filter: 64, 128 or 256 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub enum FilterWidth {
    /// 64 bits (8 bytes).
    M64,
    /// 128 bits (16 bytes), the default.
    #[default]
    M128,
    /// 256 bits (32 bytes).
    M256,
}

impl FilterWidth {
    /// Every width, smallest first.
    pub const ALL: [FilterWidth; 3] = [FilterWidth::M64, FilterWidth::M128, FilterWidth::M256];

    /// Number of bits, m.
    #[inline]
    pub const fn bits(self) -> usize {
        match self {
            FilterWidth::M64 => 64,
            FilterWidth::M128 => 128,
            FilterWidth::M256 => 256,
        }
    }

    /// log2 of the number of bits.
    #[inline]
    pub const fn log2_bits(self) -> u32 {
        self.bits().trailing_zeros()
    }

    /// Number of filter bytes, m / 8.
    #[inline]
    pub const fn bytes(self) -> usize {
        self.bits() / 8
    }

    /// Number of 64-bit words, m / 64.
    #[inline]
    pub const fn words(self) -> usize {
        self.bits() / 64
    }

    /// The width of `bits` bits, if it is 64, 128 or 256.
    pub const fn from_bits(bits: usize) -> Option<FilterWidth> {
        match bits {
            64 => Some(FilterWidth::M64),
            128 => Some(FilterWidth::M128),
            256 => Some(FilterWidth::M256),
            _ => None,
        }
    }

    /// The width of a filter of `bytes` bytes, if it is 8, 16 or 32.
    pub const fn from_bytes(bytes: usize) -> Option<FilterWidth> {
        Self::from_bits(bytes.wrapping_mul(8))
    }

    /// Length of the IPv4 option (type, length, filter): the value of its length byte.
    #[inline]
    pub const fn ipv4_option_len(self) -> usize {
        2 + self.bytes()
    }

    /// Length of the IPv4 block [`insert`] adds (two NOPs and the option).
    #[inline]
    pub const fn ipv4_block_len(self) -> usize {
        4 + self.bytes()
    }

    /// Length of the IPv6 option (type, data length, filter).
    #[inline]
    pub const fn ipv6_option_len(self) -> usize {
        2 + self.bytes()
    }

    /// Bytes [`insert`] adds to an IPv6 packet: a whole new hop-by-hop
    /// header, or the block at the front of an existing one (both `8 + m/8`).
    #[inline]
    pub const fn ipv6_block_len(self) -> usize {
        8 + self.bytes()
    }
}

/// An m-bit filter (also used for a node's mask): bit `i` is bit
/// `63 - i % 64` of word `i / 64`, which is bit `7 - i % 8` of byte `i / 8`
/// on the wire. Words beyond the width are always zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Filter {
    width: FilterWidth,
    words: [u64; 4],
}

/// The outcome of one hop's check-and-update.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Hop {
    /// At least one bit of the mask was clear; the mask is now ORed in.
    Marked,
    /// Every bit of the mask was already set: the packet is on a loop (or
    /// this is a false alarm). Nothing was written.
    Loop,
}

impl Filter {
    /// The all-zero filter.
    #[inline]
    pub const fn empty(width: FilterWidth) -> Filter {
        Filter {
            width,
            words: [0; 4],
        }
    }

    /// The width.
    #[inline]
    pub const fn width(&self) -> FilterWidth {
        self.width
    }

    /// The words (`m / 64` of them).
    #[inline]
    pub fn words(&self) -> &[u64] {
        &self.words[..self.width.words()]
    }

    /// A filter from its wire bytes (8, 16 or 32 of them).
    pub fn from_bytes(bytes: &[u8]) -> Option<Filter> {
        let width = FilterWidth::from_bytes(bytes.len())?;
        let mut f = Filter::empty(width);
        for (w, chunk) in f.words.iter_mut().zip(bytes.chunks_exact(8)) {
            *w = be_word(chunk);
        }
        Some(f)
    }

    /// Writes the wire bytes into the first `m / 8` bytes of `out`.
    ///
    /// # Panics
    /// If `out` is shorter than `m / 8`.
    pub fn write_bytes(&self, out: &mut [u8]) {
        let out = &mut out[..self.width.bytes()];
        for (chunk, w) in out.chunks_exact_mut(8).zip(self.words.iter()) {
            chunk.copy_from_slice(&w.to_be_bytes());
        }
    }

    /// Sets bit `bit` (`bit < m`; larger values are ignored).
    #[inline]
    pub fn set(&mut self, bit: usize) {
        if bit < self.width.bits() {
            self.words[bit / 64] |= 1 << (63 - bit % 64);
        }
    }

    /// Whether bit `bit` is set (`false` for `bit >= m`).
    #[inline]
    pub fn get(&self, bit: usize) -> bool {
        bit < self.width.bits() && self.words[bit / 64] & (1 << (63 - bit % 64)) != 0
    }

    /// Number of set bits.
    #[inline]
    pub fn count_ones(&self) -> u32 {
        self.words.iter().map(|w| w.count_ones()).sum()
    }

    /// The set bits, in increasing order.
    pub fn ones(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.width.bits()).filter(|&b| self.get(b))
    }

    /// Whether every bit of `mask` is set here (widths must match; a
    /// different width gives `false`).
    #[inline]
    pub fn contains_all(&self, mask: &Filter) -> bool {
        self.width == mask.width
            && self
                .words
                .iter()
                .zip(mask.words.iter())
                .all(|(f, m)| f & m == *m)
    }

    /// ORs `mask` in (widths must match; otherwise nothing happens).
    #[inline]
    pub fn union_with(&mut self, mask: &Filter) {
        if self.width == mask.width {
            for (f, m) in self.words.iter_mut().zip(mask.words.iter()) {
                *f |= m;
            }
        }
    }

    /// The hop rule on the bits alone: [`Hop::Loop`] if every bit of `mask`
    /// is set, otherwise OR it in and [`Hop::Marked`]. This is the rule
    /// [`check_and_update`] applies to a packet.
    #[inline]
    pub fn check_and_update(&mut self, mask: &Filter) -> Hop {
        if self.contains_all(mask) {
            Hop::Loop
        } else {
            self.union_with(mask);
            Hop::Marked
        }
    }
}

/// Reads a big-endian word from an 8-byte chunk.
#[inline(always)]
fn be_word(chunk: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(chunk);
    u64::from_be_bytes(b)
}

/// Why an icarus operation left a frame alone. Small and `Copy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IcarusError {
    /// The bytes at the L3 offset are neither IPv4 nor IPv6.
    NotIp,
    /// The IP header (options or extension header included) is cut short.
    Truncated,
    /// A length field is inconsistent, the option list is malformed, or an
    /// icarus option has a length other than 64, 128 or 256 bits.
    Malformed,
    /// The packet's filter is not as wide as the mask.
    WidthMismatch,
    /// Insert: the option is already there.
    AlreadyPresent,
    /// Insert: no room (IPv4 options full, a length would overflow).
    NoRoom,
    /// Insert/strip: an IPv6 jumbogram or a zero payload length (the
    /// length would live in the jumbo option, which is not rewritten).
    Jumbogram,
}

impl core::fmt::Display for IcarusError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            IcarusError::NotIp => "not an IP packet",
            IcarusError::Truncated => "IP header cut short",
            IcarusError::Malformed => "malformed IP header or icarus option",
            IcarusError::WidthMismatch => "filter width differs from the mask",
            IcarusError::AlreadyPresent => "icarus option already present",
            IcarusError::NoRoom => "no room for the icarus option",
            IcarusError::Jumbogram => "IPv6 jumbogram",
        })
    }
}

impl std::error::Error for IcarusError {}

impl From<Error> for IcarusError {
    fn from(e: Error) -> Self {
        match e {
            Error::Truncated => IcarusError::Truncated,
            Error::Malformed => IcarusError::Malformed,
        }
    }
}

/// A read/write view of the IPv4 icarus option (starting at its type byte).
#[derive(Debug, Clone)]
pub struct Ipv4Option<T: AsRef<[u8]>> {
    buffer: T,
}

/// A read/write view of the IPv6 icarus hop-by-hop option (starting at its type byte).
#[derive(Debug, Clone)]
pub struct Ipv6Option<T: AsRef<[u8]>> {
    buffer: T,
}

mod field {
    pub const TYPE: usize = 0;
    pub const LEN: usize = 1;
    pub const FILTER: usize = 2;
}

macro_rules! option_view {
    ($view:ident, $ty:expr, $width_of_len:expr, $len_of_width:expr) => {
        impl<T: AsRef<[u8]>> $view<T> {
            /// Wraps a buffer without checking it.
            pub const fn new_unchecked(buffer: T) -> $view<T> {
                $view { buffer }
            }

            /// Wraps a buffer, checking the type, that the length byte gives
            /// a 64-, 128- or 256-bit filter, and that the buffer holds it.
            pub fn new_checked(buffer: T) -> Result<$view<T>, Error> {
                let v = Self::new_unchecked(buffer);
                v.check_len()?;
                Ok(v)
            }

            /// See [`new_checked`](Self::new_checked).
            pub fn check_len(&self) -> Result<(), Error> {
                let b = self.buffer.as_ref();
                let (Some(&ty), Some(&len)) = (b.get(field::TYPE), b.get(field::LEN)) else {
                    return Err(Error::Truncated);
                };
                if ty != $ty {
                    return Err(Error::Malformed);
                }
                let Some(width) = $width_of_len(len) else {
                    return Err(Error::Malformed);
                };
                if b.len() < field::FILTER + width.bytes() {
                    return Err(Error::Truncated);
                }
                Ok(())
            }

            /// Consumes the view, returning the buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }

            /// The option type byte.
            pub fn option_type(&self) -> u8 {
                self.buffer.as_ref()[field::TYPE]
            }

            /// The length byte.
            pub fn len_field(&self) -> u8 {
                self.buffer.as_ref()[field::LEN]
            }

            /// The filter width the length byte gives (`None` if invalid).
            pub fn width(&self) -> Option<FilterWidth> {
                $width_of_len(self.len_field())
            }

            /// The filter bytes.
            ///
            /// # Panics
            /// If the length byte is invalid or the buffer short (ruled out by
            /// [`new_checked`](Self::new_checked)).
            pub fn filter_bytes(&self) -> &[u8] {
                let n = self.width().map_or(usize::MAX, FilterWidth::bytes);
                &self.buffer.as_ref()[field::FILTER..field::FILTER + n]
            }

            /// The filter.
            pub fn filter(&self) -> Filter {
                Filter::from_bytes(self.filter_bytes()).unwrap_or(Filter::empty(FilterWidth::M128))
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $view<T> {
            /// Sets the option type byte.
            pub fn set_option_type(&mut self, value: u8) {
                self.buffer.as_mut()[field::TYPE] = value;
            }

            /// Sets the length byte.
            pub fn set_len_field(&mut self, value: u8) {
                self.buffer.as_mut()[field::LEN] = value;
            }

            /// The filter bytes, mutably (same panics as [`filter_bytes`](Self::filter_bytes)).
            pub fn filter_bytes_mut(&mut self) -> &mut [u8] {
                let n = self.width().map_or(usize::MAX, FilterWidth::bytes);
                &mut self.buffer.as_mut()[field::FILTER..field::FILTER + n]
            }

            /// Writes the whole option: type, length and `filter`.
            ///
            /// # Panics
            /// If the buffer is shorter than the option.
            pub fn emit(&mut self, filter: &Filter) {
                self.set_option_type($ty);
                self.set_len_field($len_of_width(filter.width()));
                filter.write_bytes(self.filter_bytes_mut());
            }
        }
    };
}

/// The filter width an IPv4 length byte (type, length and data) gives.
#[inline]
fn ipv4_width(len: u8) -> Option<FilterWidth> {
    FilterWidth::from_bytes(usize::from(len).wrapping_sub(2))
}

/// The filter width an IPv6 data length byte gives.
#[inline]
fn ipv6_width(len: u8) -> Option<FilterWidth> {
    FilterWidth::from_bytes(usize::from(len))
}

/// The IPv4 length byte for `w` (type, length and data).
#[inline]
fn ipv4_len_byte(w: FilterWidth) -> u8 {
    w.ipv4_option_len() as u8
}

/// The IPv6 data length byte for `w`.
#[inline]
fn ipv6_len_byte(w: FilterWidth) -> u8 {
    w.bytes() as u8
}

option_view!(Ipv4Option, IPV4_OPTION_TYPE, ipv4_width, ipv4_len_byte);
option_view!(Ipv6Option, IPV6_OPTION_TYPE, ipv6_width, ipv6_len_byte);

/// Writes the IPv4 block [`insert`] adds (`NOP NOP 0x5E len filter`) into
/// the first [`FilterWidth::ipv4_block_len`] bytes of `out`.
///
/// # Panics
/// If `out` is shorter than the block.
pub fn emit_ipv4_block(filter: &Filter, out: &mut [u8]) {
    out[0] = IPV4_NOP;
    out[1] = IPV4_NOP;
    Ipv4Option::new_unchecked(&mut out[2..]).emit(filter);
}

/// Writes a complete hop-by-hop header holding only the icarus option
/// (`next_header len 01 02 00 00 0x3E m/8 filter`) into the first
/// [`FilterWidth::ipv6_block_len`] bytes of `out`.
///
/// # Panics
/// If `out` is shorter than the header.
pub fn emit_ipv6_hop_by_hop(next_header: u8, filter: &Filter, out: &mut [u8]) {
    let len = filter.width().ipv6_block_len();
    out[0] = next_header;
    out[1] = (len / 8 - 1) as u8;
    out[2..6].copy_from_slice(&[IPV6_PADN, 2, 0, 0]);
    Ipv6Option::new_unchecked(&mut out[6..]).emit(filter);
}

/// Writes the block [`insert`] puts at the front of an existing hop-by-hop
/// header (`01 02 00 00 0x3E m/8 filter 01 00`) into the first
/// [`FilterWidth::ipv6_block_len`] bytes of `out`.
///
/// # Panics
/// If `out` is shorter than the block.
pub fn emit_ipv6_front_block(filter: &Filter, out: &mut [u8]) {
    let n = filter.width().bytes();
    out[0..4].copy_from_slice(&[IPV6_PADN, 2, 0, 0]);
    Ipv6Option::new_unchecked(&mut out[4..]).emit(filter);
    out[6 + n..8 + n].copy_from_slice(&[IPV6_PADN, 0]);
}

/// Where the icarus option of a frame is. Offsets are from the start of the
/// frame and lie within it when [`find`] returned the location.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Location {
    /// IP version.
    pub version: IpVersion,
    /// Offset of the IP header.
    pub l3_offset: usize,
    /// Offset of the option's type byte.
    pub option_offset: usize,
    /// Offset of the first filter byte.
    pub filter_offset: usize,
    /// The filter's width.
    pub width: FilterWidth,
    /// IPv4: how many NOP options immediately precede the option (at most
    /// 2 counted); IPv6: whether the option sits in the canonical front
    /// position `01 02 00 00` of the hop-by-hop header (1) or not (0).
    pub lead: u8,
}

impl Location {
    /// The filter as it is in `frame` (the frame the location was found in).
    pub fn filter(&self, frame: &[u8]) -> Option<Filter> {
        frame
            .get(self.filter_offset..self.filter_offset + self.width.bytes())
            .and_then(Filter::from_bytes)
    }
}

/// The IP version at `l3`, from the version nibble.
#[inline(always)]
fn version_at(frame: &[u8], l3: usize) -> Result<IpVersion, IcarusError> {
    match frame.get(l3).map(|b| b >> 4) {
        Some(4) => Ok(IpVersion::V4),
        Some(6) => Ok(IpVersion::V6),
        Some(_) => Err(IcarusError::NotIp),
        None => Err(IcarusError::Truncated),
    }
}

/// Finds the icarus option of the IP packet at `l3_offset` in `frame`.
///
/// `Ok(None)` when the packet has none; an error when the bytes are not IP,
/// the header is cut short, or its option list (IPv4) or hop-by-hop header
/// (IPv6) is malformed. The canonical positions that [`insert`] uses are
/// checked first, so finding an inserted option costs a few comparisons.
#[inline]
pub fn find(frame: &[u8], l3_offset: usize) -> Result<Option<Location>, IcarusError> {
    match version_at(frame, l3_offset)? {
        IpVersion::V4 => find_v4(frame, l3_offset),
        IpVersion::V6 => find_v6(frame, l3_offset),
    }
}

#[inline(always)]
fn find_v4(frame: &[u8], l3: usize) -> Result<Option<Location>, IcarusError> {
    let ip = frame.get(l3..).ok_or(IcarusError::Truncated)?;
    if ip.len() < IPV4_FIXED {
        return Err(IcarusError::Truncated);
    }
    let hl = usize::from(ip[0] & 0x0f) * 4;
    if hl < IPV4_FIXED {
        return Err(IcarusError::Malformed);
    }
    if ip.len() < hl {
        return Err(IcarusError::Truncated);
    }
    let loc = |opt: usize, lead: u8, width: FilterWidth| Location {
        version: IpVersion::V4,
        l3_offset: l3,
        option_offset: l3 + opt,
        filter_offset: l3 + opt + 2,
        width,
        lead,
    };
    // Fast path: the canonical block right after the fixed header.
    let fast = match ip[IPV4_FIXED..hl] {
        [IPV4_NOP, IPV4_NOP, IPV4_OPTION_TYPE, len, ..] => {
            ipv4_width(len).filter(|w| IPV4_FIXED + w.ipv4_block_len() <= hl)
        }
        _ => None,
    };
    if let Some(w) = fast {
        return Ok(Some(loc(IPV4_FIXED + 2, 2, w)));
    }
    let mut i = IPV4_FIXED;
    let mut nops = 0u8;
    while i < hl {
        match ip[i] {
            IPV4_EOL => break,
            IPV4_NOP => {
                nops = nops.saturating_add(1).min(2);
                i += 1;
            }
            ty => {
                let len = match ip.get(i + 1) {
                    Some(&l) if i + 1 < hl => usize::from(l),
                    _ => return Err(IcarusError::Malformed),
                };
                if len < 2 || i + len > hl {
                    return Err(IcarusError::Malformed);
                }
                if ty == IPV4_OPTION_TYPE {
                    let w = ipv4_width(len as u8).ok_or(IcarusError::Malformed)?;
                    return Ok(Some(loc(i, nops, w)));
                }
                nops = 0;
                i += len;
            }
        }
    }
    Ok(None)
}

#[inline(always)]
fn find_v6(frame: &[u8], l3: usize) -> Result<Option<Location>, IcarusError> {
    let ip = frame.get(l3..).ok_or(IcarusError::Truncated)?;
    if ip.len() < IPV6_FIXED {
        return Err(IcarusError::Truncated);
    }
    if ip[6] != NH_HOP_BY_HOP {
        return Ok(None);
    }
    let hbh = &ip[IPV6_FIXED..];
    let Some(&len_field) = hbh.get(1) else {
        return Err(IcarusError::Truncated);
    };
    let hl = (usize::from(len_field) + 1) * 8;
    if hbh.len() < hl {
        return Err(IcarusError::Truncated);
    }
    let loc = |opt: usize, lead: u8, width: FilterWidth| Location {
        version: IpVersion::V6,
        l3_offset: l3,
        option_offset: l3 + IPV6_FIXED + opt,
        filter_offset: l3 + IPV6_FIXED + opt + 2,
        width,
        lead,
    };
    let fast = match hbh[..hl] {
        [_, _, IPV6_PADN, 2, 0, 0, IPV6_OPTION_TYPE, len, ..] => {
            ipv6_width(len).filter(|w| 8 + w.bytes() <= hl)
        }
        _ => None,
    };
    if let Some(w) = fast {
        return Ok(Some(loc(6, 1, w)));
    }
    let mut i = 2;
    while i < hl {
        let ty = hbh[i];
        if ty == IPV6_PAD1 {
            i += 1;
            continue;
        }
        let len = match hbh.get(i + 1) {
            Some(&l) if i + 1 < hl => usize::from(l),
            _ => return Err(IcarusError::Malformed),
        };
        if i + 2 + len > hl {
            return Err(IcarusError::Malformed);
        }
        if ty == IPV6_OPTION_TYPE {
            let w = ipv6_width(len as u8).ok_or(IcarusError::Malformed)?;
            return Ok(Some(loc(i, 0, w)));
        }
        i += 2 + len;
    }
    Ok(None)
}

/// One's-complement sum of `bytes` as they lie in the header: starting at
/// an odd offset swaps the bytes of the sum (RFC 1071 byte-order independence).
#[inline]
fn region_sum(bytes: &[u8], odd: bool) -> u16 {
    let s = checksum::sum(bytes);
    if odd { s.swap_bytes() } else { s }
}

/// Adds one's-complement terms to the sum the IPv4 header checksum at
/// `l3 + 10` stands for (RFC 1624 eqn. 3 generalised: `HC' = ~(~HC + terms)`).
#[inline(always)]
fn adjust_ipv4_checksum(frame: &mut [u8], l3: usize, terms: u64) {
    let at = l3 + 10;
    let hc = u16::from_be_bytes([frame[at], frame[at + 1]]);
    let new = !checksum::fold(u64::from(!hc) + terms);
    frame[at..at + 2].copy_from_slice(&new.to_be_bytes());
}

/// ORs the first `W` words of `mask` into the `8 W` filter bytes. `None`
/// (and nothing written) when every bit was already set; otherwise the
/// one's-complement sum (unfolded, congruent mod 0xffff) of the bits added.
#[inline(always)]
fn or_mask<const W: usize>(bytes: &mut [u8], mask: &[u64; 4]) -> Option<u64> {
    if bytes.len() < W * 8 {
        return None;
    }
    let mut old = [0u64; W];
    let mut any = 0u64;
    let mut sum = 0u64;
    for w in 0..W {
        old[w] = be_word(&bytes[w * 8..w * 8 + 8]);
        let a = mask[w] & !old[w];
        any |= a;
        sum += (a >> 32) + (a & 0xffff_ffff);
    }
    if any == 0 {
        return None;
    }
    for w in 0..W {
        bytes[w * 8..w * 8 + 8].copy_from_slice(&(old[w] | mask[w]).to_be_bytes());
    }
    Some(sum)
}

/// Applies one hop of node `mask` to the filter at `loc` in `frame`:
/// [`Hop::Loop`] when every bit of the mask is already set (nothing
/// written), otherwise ORs the mask in, updates the IPv4 header checksum
/// incrementally by the bits added, and returns [`Hop::Marked`].
///
/// `loc` must come from [`find`] on this frame; a location that does not fit
/// the frame gives [`IcarusError::Truncated`], a mask of another width
/// [`IcarusError::WidthMismatch`].
#[inline]
pub fn check_and_update(
    frame: &mut [u8],
    loc: &Location,
    mask: &Filter,
) -> Result<Hop, IcarusError> {
    if mask.width != loc.width {
        return Err(IcarusError::WidthMismatch);
    }
    let n = loc.width.bytes();
    if loc.version == IpVersion::V4 && frame.len() < loc.l3_offset + 12 {
        return Err(IcarusError::Truncated);
    }
    let bytes = frame
        .get_mut(loc.filter_offset..loc.filter_offset.saturating_add(n))
        .ok_or(IcarusError::Truncated)?;
    // Width-specialised so the word loop unrolls completely.
    let added = match loc.width {
        FilterWidth::M64 => or_mask::<1>(bytes, &mask.words),
        FilterWidth::M128 => or_mask::<2>(bytes, &mask.words),
        FilterWidth::M256 => or_mask::<4>(bytes, &mask.words),
    };
    let Some(added) = added else {
        return Ok(Hop::Loop);
    };
    if loc.version == IpVersion::V4 {
        // The new filter is the old one plus `added` with no carries, so the
        // header's sum grows by the sum of the added bits.
        let mut s = checksum::fold(added);
        if (loc.filter_offset - loc.l3_offset) % 2 == 1 {
            s = s.swap_bytes();
        }
        adjust_ipv4_checksum(frame, loc.l3_offset, u64::from(s));
    }
    Ok(Hop::Marked)
}

/// The hop rule for the common case, straight from the frame: the option
/// at the canonical place [`insert`] puts it (IPv4: `NOP NOP 0x5E len`
/// right after the fixed header, filter at offset 24; IPv6: first in a
/// hop-by-hop header right after the fixed header, behind `PadN 2`, filter
/// at offset 48) and as wide as `mask`. `Some` is exactly what
/// [`find`] then [`check_and_update`] would give (and write) for such a
/// packet; `None` means the packet is not in that form (no option,
/// another place or width, a short or malformed header), nothing was
/// written, and the caller takes the general path.
///
/// A few comparisons find the option, one AND-compare per 64-bit word tests
/// the mask, one OR per word sets it, and the IPv4 checksum is adjusted by
/// the bits added (RFC 1624). Never panics, never touches bytes outside the
/// IP header. Batches of one node use [`WireMask`], which converts the
/// mask once.
#[inline(always)]
pub fn check_and_update_canonical(
    frame: &mut [u8],
    l3_offset: usize,
    mask: &Filter,
) -> Option<Hop> {
    match mask.width {
        FilterWidth::M64 => WireMask::<1>::of(mask).check_and_update_canonical(frame, l3_offset),
        FilterWidth::M128 => WireMask::<2>::of(mask).check_and_update_canonical(frame, l3_offset),
        FilterWidth::M256 => WireMask::<4>::of(mask).check_and_update_canonical(frame, l3_offset),
    }
}

/// A node mask of `W` 64-bit words (`W` = 1, 2, 4 for m = 64, 128, 256)
/// prepared for the canonical fast path: its words as the filter's bytes
/// read in native order, so the hop compares and ORs the frame's bytes as
/// they lie, with no byte swap per packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WireMask<const W: usize>([u64; W]);

impl<const W: usize> WireMask<W> {
    /// The first `W` words of `mask` (the caller picks `W = mask.width().words()`;
    /// a wider `mask` is cut, which the canonical width check then refuses
    /// to apply to any frame of the mask's own width).
    #[inline]
    pub fn of(mask: &Filter) -> Self {
        let mut w = [0u64; W];
        for (d, s) in w.iter_mut().zip(&mask.words) {
            *d = s.to_be();
        }
        WireMask(w)
    }

    /// [`check_and_update_canonical`] with this mask: `Some` only for a
    /// filter of `8 W` bytes at the canonical place.
    ///
    /// IPv4 is recognised from the first byte alone: version 4 and an IHL
    /// that covers the fixed header and the block is one range of values
    /// (`0x40 + (24 + 8 W) / 4 ..= 0x4f`). The checksum is adjusted with
    /// 64-bit end-around-carry additions and folded to 16 bits by a
    /// rotate-add, which gives the same value as [`checksum::fold`] (the
    /// unique representative in `1..=0xffff` of a non-zero sum; see
    /// `fold16`).
    #[inline(always)]
    pub fn check_and_update_canonical(&self, frame: &mut [u8], l3_offset: usize) -> Option<Hop> {
        let n = 8 * W;
        let ip = frame.get_mut(l3_offset..)?;
        let first = *ip.first()?;
        let min_ihl = ((IPV4_FIXED + 4 + n) / 4) as u8;
        if first.wrapping_sub(0x40 + min_ihl) <= 0x0f - min_ihl {
            // IHL covers the fixed header and the block; the buffer holds
            // the whole header (as `find_v4` requires).
            let hl = usize::from(first & 0x0f) * 4;
            let hdr = ip.get_mut(..hl)?;
            let (fixed, rest) = hdr.split_at_mut_checked(IPV4_FIXED + 4)?;
            let lead = [IPV4_NOP, IPV4_NOP, IPV4_OPTION_TYPE, (2 + n) as u8];
            if fixed[IPV4_FIXED..] != lead {
                return None;
            }
            let Some(sum) = self.or_into(rest.get_mut(..n)?) else {
                return Some(Hop::Loop);
            };
            // The filter starts at an even offset, so the added bits add
            // to the header's sum as they lie (see `check_and_update`).
            let hc = u16::from_ne_bytes([fixed[10], fixed[11]]);
            let new = !fold16(sum, !hc);
            fixed[10..12].copy_from_slice(&new.to_ne_bytes());
            return Some(Hop::Marked);
        }
        if first >> 4 != 6 {
            return None;
        }
        // The hop-by-hop header is next, whole in the buffer (as `find_v6`
        // requires), and starts with `PadN 2` and the option.
        let at = IPV6_FIXED + 8;
        let hl = (usize::from(*ip.get(IPV6_FIXED + 1)?) + 1) * 8;
        if hl < 8 + n || ip.len() < IPV6_FIXED + hl {
            return None;
        }
        let (fixed, rest) = ip.split_at_mut_checked(at)?;
        let lead = [IPV6_PADN, 2, 0, 0, IPV6_OPTION_TYPE, n as u8];
        if fixed[6] != NH_HOP_BY_HOP || fixed[IPV6_FIXED + 2..] != lead {
            return None;
        }
        Some(match self.or_into(rest.get_mut(..n)?) {
            Some(_) => Hop::Marked,
            None => Hop::Loop,
        })
    }

    /// ORs the mask into the `8 W` filter bytes as they lie (`bytes` holds
    /// exactly those). `None` (and nothing written) when every bit was
    /// already set: a loop. Otherwise the 64-bit end-around-carry sum of the
    /// bits added: congruent mod 0xffff to their one's-complement sum, and
    /// non-zero (some bit was added, and end-around carries never turn a
    /// non-zero total into zero).
    #[inline(always)]
    fn or_into(&self, bytes: &mut [u8]) -> Option<u64> {
        let mut any = 0u64;
        let mut sum = 0u64;
        let mut carries = 0u64;
        let mut new = [0u64; W];
        for ((chunk, &m), nw) in bytes.chunks_exact(8).zip(&self.0).zip(new.iter_mut()) {
            let mut b = [0u8; 8];
            b.copy_from_slice(chunk);
            let old = u64::from_ne_bytes(b);
            let a = m & !old;
            any |= a;
            let (s, c) = sum.overflowing_add(a);
            sum = s;
            carries += u64::from(c);
            *nw = old | m;
        }
        if any == 0 {
            return None;
        }
        for (chunk, nw) in bytes.chunks_exact_mut(8).zip(new) {
            chunk.copy_from_slice(&nw.to_ne_bytes());
        }
        // `carries <= W`: adding it back cannot overflow unless `sum` is
        // within W of 2^64, and then the end-around carry is added once more.
        let (s, c) = sum.overflowing_add(carries);
        Some(s + u64::from(c))
    }
}

/// The 16-bit one's-complement sum of `sum` (64-bit, end-around carry) and
/// `x`: the same value as `checksum::fold(u64::from(x) + sum')` for any
/// `sum'` congruent to `sum` mod 0xffff with the same zero-ness, i.e. the
/// unique representative in `1..=0xffff` of a non-zero total (0 for zero).
/// End-around-carry additions keep a total congruent mod 0xffff (`2^16`,
/// `2^32` and `2^64` are all 1 mod 0xffff) and never turn a non-zero total
/// into zero; the last step adds the 32-bit value's halves with the carry
/// out of the low half wrapped back in (`x + rotl(x, 16)`, high half).
#[inline(always)]
fn fold16(sum: u64, x: u16) -> u16 {
    let (s, c) = sum.overflowing_add(u64::from(x));
    let s = s + u64::from(c);
    let (t, c) = (s as u32).overflowing_add((s >> 32) as u32);
    let t = t + u32::from(c);
    (t.wrapping_add(t.rotate_left(16)) >> 16) as u16
}

/// Opens a gap of `n` bytes at `at` (everything from `at` moves up by `n`;
/// the gap is zeroed). Allocates only when the capacity is too small.
fn open_gap(frame: &mut Vec<u8>, at: usize, n: usize) {
    let old = frame.len();
    frame.resize(old + n, 0);
    frame.copy_within(at..old, at + n);
    frame[at..at + n].fill(0);
}

/// What inserting an option of width `width` into the IP packet at
/// `l3_offset` of `frame` would do, checked without changing anything: the
/// packet's IP version and the bytes the frame would grow by, or why
/// [`insert`] would refuse it (the same error).
///
/// The router checks at an insertion edge and inserts later, into the
/// copies that leave by a port that keeps the option
/// ([`crate::stage::icarus`]).
pub fn check_insert(
    frame: &[u8],
    l3_offset: usize,
    width: FilterWidth,
) -> Result<(IpVersion, usize), IcarusError> {
    let version = version_at(frame, l3_offset)?;
    let l3 = l3_offset;
    // A whole header without options (IPv4) or hop-by-hop header (IPv6)
    // holds no option: `find` would say `None` after the same checks.
    let plain = match version {
        IpVersion::V4 => frame.len() >= l3 + IPV4_FIXED && frame[l3] & 0x0f == 5,
        IpVersion::V6 => frame.len() >= l3 + IPV6_FIXED && frame[l3 + 6] != NH_HOP_BY_HOP,
    };
    if !plain && find(frame, l3_offset)?.is_some() {
        return Err(IcarusError::AlreadyPresent);
    }
    match version {
        IpVersion::V4 => {
            // `find` (or `plain`) checked the whole header is present and
            // IHL >= 5.
            let hl = usize::from(frame[l3] & 0x0f) * 4;
            let tl = usize::from(u16::from_be_bytes([frame[l3 + 2], frame[l3 + 3]]));
            let n = width.ipv4_block_len();
            if hl + n > IPV4_MAX_HEADER || (tl != 0 && tl + n > usize::from(u16::MAX)) {
                return Err(IcarusError::NoRoom);
            }
            if tl != 0 && tl < hl {
                return Err(IcarusError::Malformed);
            }
            Ok((version, n))
        }
        IpVersion::V6 => {
            let pl = usize::from(u16::from_be_bytes([frame[l3 + 4], frame[l3 + 5]]));
            if pl == 0 {
                return Err(IcarusError::Jumbogram);
            }
            let n = width.ipv6_block_len();
            if pl + n > usize::from(u16::MAX) {
                return Err(IcarusError::NoRoom);
            }
            if frame[l3 + 6] == NH_HOP_BY_HOP {
                // `find` checked the whole hop-by-hop header is present.
                let len_field = usize::from(frame[l3 + IPV6_FIXED + 1]);
                if (len_field + 1) * 8 + n > HBH_MAX {
                    return Err(IcarusError::NoRoom);
                }
                if pl < (len_field + 1) * 8 {
                    return Err(IcarusError::Malformed);
                }
            }
            Ok((version, n))
        }
    }
}

/// Inserts the icarus option carrying `filter` into the IP packet at
/// `l3_offset` of `frame` (see the module docs for the layouts and for
/// when insertion is refused, [`check_insert`]; a refused frame is left
/// untouched).
///
/// Returns the location of the new option.
pub fn insert(
    frame: &mut Vec<u8>,
    l3_offset: usize,
    filter: &Filter,
) -> Result<Location, IcarusError> {
    let w = filter.width();
    let (version, n) = check_insert(frame, l3_offset, w)?;
    let l3 = l3_offset;
    match version {
        IpVersion::V4 => {
            let hl = usize::from(frame[l3] & 0x0f) * 4;
            let tl = usize::from(u16::from_be_bytes([frame[l3 + 2], frame[l3 + 3]]));
            let old01 = u16::from_be_bytes([frame[l3], frame[l3 + 1]]);
            let at = l3 + IPV4_FIXED;
            open_gap(frame, at, n);
            emit_ipv4_block(filter, &mut frame[at..at + n]);
            frame[l3] = 0x40 | ((hl + n) / 4) as u8;
            let new01 = u16::from_be_bytes([frame[l3], frame[l3 + 1]]);
            let mut terms = u64::from(!old01) + u64::from(new01);
            if tl != 0 {
                let new_tl = (tl + n) as u16;
                frame[l3 + 2..l3 + 4].copy_from_slice(&new_tl.to_be_bytes());
                terms += u64::from(!(tl as u16)) + u64::from(new_tl);
            }
            terms += u64::from(checksum::sum(&frame[at..at + n]));
            adjust_ipv4_checksum(frame, l3, terms);
            Ok(Location {
                version,
                l3_offset: l3,
                option_offset: at + 2,
                filter_offset: at + 4,
                width: w,
                lead: 2,
            })
        }
        IpVersion::V6 => {
            let pl = usize::from(u16::from_be_bytes([frame[l3 + 4], frame[l3 + 5]]));
            let hbh = l3 + IPV6_FIXED;
            if frame[l3 + 6] == NH_HOP_BY_HOP {
                let len_field = usize::from(frame[hbh + 1]);
                let at = hbh + 2;
                open_gap(frame, at, n);
                emit_ipv6_front_block(filter, &mut frame[at..at + n]);
                frame[hbh + 1] = (len_field + n / 8) as u8;
            } else {
                let nh = frame[l3 + 6];
                open_gap(frame, hbh, n);
                emit_ipv6_hop_by_hop(nh, filter, &mut frame[hbh..hbh + n]);
                frame[l3 + 6] = NH_HOP_BY_HOP;
            }
            frame[l3 + 4..l3 + 6].copy_from_slice(&((pl + n) as u16).to_be_bytes());
            Ok(Location {
                version,
                l3_offset: l3,
                option_offset: hbh + 6,
                filter_offset: hbh + 8,
                width: w,
                lead: 1,
            })
        }
    }
}

/// What [`strip`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stripped {
    /// The packet had no icarus option; nothing changed.
    Absent,
    /// The option (and the padding or hop-by-hop header [`insert`] adds
    /// with it) was removed; the frame is shorter by this many bytes.
    Removed(usize),
    /// The option was overwritten in place by padding (an IPv6 option
    /// outside the canonical position, or any IPv6 jumbogram).
    Neutralised,
}

/// Removes the icarus option from the IP packet at `l3_offset` of `frame`,
/// undoing [`insert`] byte for byte (see the module docs for options placed
/// otherwise, and for an IPv4 checksum field of `ffff`). Lengths and the
/// IPv4 checksum are kept right.
pub fn strip(frame: &mut Vec<u8>, l3_offset: usize) -> Result<Stripped, IcarusError> {
    let Some(loc) = find(frame, l3_offset)? else {
        return Ok(Stripped::Absent);
    };
    let l3 = l3_offset;
    let bytes = loc.width.bytes();
    match loc.version {
        IpVersion::V4 => {
            let hl = usize::from(frame[l3] & 0x0f) * 4;
            let tl = usize::from(u16::from_be_bytes([frame[l3 + 2], frame[l3 + 3]]));
            let (start, removed_len, replacement): (usize, usize, &[u8]) = if loc.lead >= 2 {
                (loc.option_offset - 2, bytes + 4, &[])
            } else {
                (loc.option_offset, bytes + 2, &[IPV4_NOP, IPV4_NOP])
            };
            let n = removed_len - replacement.len();
            if tl != 0 && tl < hl {
                return Err(IcarusError::Malformed);
            }
            let odd = (start - l3) % 2 == 1;
            let old01 = u16::from_be_bytes([frame[l3], frame[l3 + 1]]);
            let mut terms = u64::from(!region_sum(&frame[start..start + removed_len], odd))
                + u64::from(region_sum(replacement, odd))
                + u64::from(!old01);
            frame[start..start + replacement.len()].copy_from_slice(replacement);
            frame.drain(start + replacement.len()..start + removed_len);
            frame[l3] = 0x40 | ((hl - n) / 4) as u8;
            terms += u64::from(u16::from_be_bytes([frame[l3], frame[l3 + 1]]));
            if tl != 0 {
                let new_tl = (tl - n) as u16;
                frame[l3 + 2..l3 + 4].copy_from_slice(&new_tl.to_be_bytes());
                terms += u64::from(!(tl as u16)) + u64::from(new_tl);
            }
            adjust_ipv4_checksum(frame, l3, terms);
            Ok(Stripped::Removed(n))
        }
        IpVersion::V6 => {
            let pl = usize::from(u16::from_be_bytes([frame[l3 + 4], frame[l3 + 5]]));
            let hbh = l3 + IPV6_FIXED;
            let hl = (usize::from(frame[hbh + 1]) + 1) * 8;
            let n = loc.width.ipv6_block_len();
            let front = loc.lead == 1;
            if pl != 0 && pl < hl {
                return Err(IcarusError::Malformed);
            }
            if pl != 0 && front && hl == n {
                // The whole header is ours.
                frame[l3 + 6] = frame[hbh];
                frame.drain(hbh..hbh + n);
                frame[l3 + 4..l3 + 6].copy_from_slice(&((pl - n) as u16).to_be_bytes());
                return Ok(Stripped::Removed(n));
            }
            let tail = hbh + 2 + 6 + bytes;
            if pl != 0 && front && hl > n && frame[tail..tail + 2] == [IPV6_PADN, 0] {
                frame.drain(hbh + 2..hbh + 2 + n);
                frame[hbh + 1] = (hl / 8 - 1 - n / 8) as u8;
                frame[l3 + 4..l3 + 6].copy_from_slice(&((pl - n) as u16).to_be_bytes());
                return Ok(Stripped::Removed(n));
            }
            // Anywhere else (or a jumbogram): overwrite with a PadN of the
            // same size, keeping every offset.
            let o = loc.option_offset;
            frame[o] = IPV6_PADN;
            frame[o + 2..o + 2 + bytes].fill(0);
            Ok(Stripped::Neutralised)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `fold16` (end-around-carry sums, rotate-add fold) against the plain
    /// fold of the exact integer total, on edge values and a sweep: the
    /// canonical fast path's checksum must be the general path's.
    #[test]
    fn fold16_is_fold_of_the_exact_total() {
        let mut x: u64 = 0x243f_6a88_85a3_08d3;
        let mut words: Vec<u64> = vec![0, 1, 0xffff, 0x1_0000, 0xffff_ffff, 1 << 63, !0, !0 - 1];
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(0x5851_f42d_4c95_7f2d)
                .wrapping_add(0x1405_7b7e_f767_814f);
            words.push(x >> (x % 61));
        }
        for (i, pair) in words.windows(4).enumerate() {
            let hc = (pair[0] as u16).wrapping_mul(i as u16);
            // The 64-bit end-around-carry sum, as `or_into` forms it.
            let (mut sum, mut carries) = (0u64, 0u64);
            for &a in pair {
                let (s, c) = sum.overflowing_add(a);
                sum = s;
                carries += u64::from(c);
            }
            let (s, c) = sum.overflowing_add(carries);
            let sum = s + u64::from(c);
            // The exact total, folded 16 bits at a time.
            let exact: u128 = pair.iter().map(|&a| u128::from(a)).sum::<u128>() + u128::from(!hc);
            let folded = checksum::fold(
                ((exact >> 64) as u64 + (exact as u64 >> 32)) + (exact as u64 & 0xffff_ffff),
            );
            assert_eq!(fold16(sum, !hc), folded, "{pair:x?} {hc:x}");
        }
        assert_eq!(fold16(0, 0), 0);
        assert_eq!(fold16(0, 0xffff), 0xffff);
        assert_eq!(fold16(0xffff, 0), 0xffff);
        assert_eq!(fold16(0x1_0000, 0xffff), 0x1);
    }

    /// A filter whose bytes are `0x01, 0x02, ...`.
    fn counting(width: FilterWidth) -> Filter {
        let bytes: Vec<u8> = (1..=width.bytes() as u8).collect();
        Filter::from_bytes(&bytes).unwrap()
    }

    // IPv4 option, m = 64.
    static IPV4_OPTION_64: [u8; 10] = [
        0x5e, // type: copy 0, class 2, number 30
        0x0a, // length 10 = 2 + 8
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // filter
    ];

    // IPv6 hop-by-hop option, m = 64.
    static IPV6_OPTION_64: [u8; 10] = [
        0x3e, // type: skip if unknown, may change, experimental
        0x08, // data length 8
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // filter
    ];

    // The IPv4 block insert adds, m = 128.
    static IPV4_BLOCK_128: [u8; 20] = [
        0x01, 0x01, // NOP, NOP
        0x5e, 0x12, // type, length 18
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // filter bytes 0..8
        0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, // filter bytes 8..16
    ];

    // A new hop-by-hop header, m = 128, in front of UDP.
    static IPV6_HBH_128: [u8; 24] = [
        0x11, // next header: UDP
        0x02, // hdr ext len: (2 + 1) * 8 = 24 bytes
        0x01, 0x02, 0x00, 0x00, // PadN, 2 bytes of padding
        0x3e, 0x10, // type, data length 16
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // filter bytes 0..8
        0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, // filter bytes 8..16
    ];

    // The front block for an existing hop-by-hop header, m = 64.
    static IPV6_FRONT_64: [u8; 16] = [
        0x01, 0x02, 0x00, 0x00, // PadN, 2 bytes of padding
        0x3e, 0x08, // type, data length 8
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // filter
        0x01, 0x00, // PadN, no padding
    ];

    #[test]
    fn deconstruct() {
        let o = Ipv4Option::new_checked(&IPV4_OPTION_64[..]).unwrap();
        assert_eq!(o.option_type(), 0x5e);
        assert_eq!(o.len_field(), 10);
        assert_eq!(o.width(), Some(FilterWidth::M64));
        assert_eq!(o.filter_bytes(), &IPV4_OPTION_64[2..]);
        assert_eq!(o.filter(), counting(FilterWidth::M64));
        let o = Ipv6Option::new_checked(&IPV6_OPTION_64[..]).unwrap();
        assert_eq!(o.option_type(), 0x3e);
        assert_eq!(o.width(), Some(FilterWidth::M64));
        assert_eq!(o.filter(), counting(FilterWidth::M64));
    }

    #[test]
    fn emit() {
        let f = counting(FilterWidth::M64);
        let mut buf = [0xa5u8; 10];
        Ipv4Option::new_unchecked(&mut buf[..]).emit(&f);
        assert_eq!(buf, IPV4_OPTION_64);
        let mut buf = [0xa5u8; 10];
        Ipv6Option::new_unchecked(&mut buf[..]).emit(&f);
        assert_eq!(buf, IPV6_OPTION_64);

        let f = counting(FilterWidth::M128);
        let mut buf = [0xa5u8; 20];
        emit_ipv4_block(&f, &mut buf);
        assert_eq!(buf, IPV4_BLOCK_128);
        let mut buf = [0xa5u8; 24];
        emit_ipv6_hop_by_hop(0x11, &f, &mut buf);
        assert_eq!(buf, IPV6_HBH_128);

        let mut buf = [0xa5u8; 16];
        emit_ipv6_front_block(&counting(FilterWidth::M64), &mut buf);
        assert_eq!(buf, IPV6_FRONT_64);
    }

    #[test]
    fn bit_order() {
        let mut f = Filter::empty(FilterWidth::M128);
        f.set(0);
        f.set(9);
        f.set(127);
        let mut b = [0u8; 16];
        f.write_bytes(&mut b);
        assert_eq!(b[0], 0x80, "bit 0 is the MSB of byte 0");
        assert_eq!(b[1], 0x40, "bit 9 is bit 6 of byte 1");
        assert_eq!(b[15], 0x01, "bit 127 is the LSB of byte 15");
        assert_eq!(f.ones().collect::<Vec<_>>(), [0, 9, 127]);
        assert_eq!(f.count_ones(), 3);
        f.set(128); // out of range: ignored
        assert!(!f.get(128));
        assert_eq!(f.count_ones(), 3);
    }

    #[test]
    fn impossible_len() {
        assert_eq!(
            Ipv4Option::new_checked(&IPV4_OPTION_64[..9]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            Ipv4Option::new_checked(&IPV4_OPTION_64[..1]).unwrap_err(),
            Error::Truncated
        );
        let mut bad = IPV4_OPTION_64;
        bad[1] = 11; // 9 filter bytes
        assert_eq!(
            Ipv4Option::new_checked(&bad[..]).unwrap_err(),
            Error::Malformed
        );
        let mut bad = IPV4_OPTION_64;
        bad[0] = 0x1e; // another variant of number 30
        assert_eq!(
            Ipv4Option::new_checked(&bad[..]).unwrap_err(),
            Error::Malformed
        );
        let mut bad = IPV6_OPTION_64;
        bad[1] = 10; // the IPv4 length convention
        assert_eq!(
            Ipv6Option::new_checked(&bad[..]).unwrap_err(),
            Error::Malformed
        );
    }
}
