//! Transfer forms of a [`Bloom`] filter: raw and entropy-coded.
//!
//! Every encoding is a 44-byte header followed by a payload; all integers
//! are little-endian:
//!
//! ```text
//! offset size field
//!  0     4    magic "BLMF"
//!  4     1    version (1)
//!  5     1    encoding: 0 raw, 1 range-coded
//!  6     1    layout: 0 classic, 1 blocked, 2 split block
//!  7     1    k
//!  8     8    m, bits
//! 16     4    hash key id (HashKey::id)
//! 20     8    estimated item count at encoding (rounded; Params::estimate_items)
//! 28     8    number of set bits
//! 36     8    payload length in bytes
//! 44     ..   payload
//! ```
//!
//! Raw payload: the `m / 64` words of the bit vector. Range-coded payload
//! (Mitzenmacher, "Compressed Bloom filters", 2002): the `m` bits in order,
//! each coded with one fixed two-symbol model `P(1) = ones / m` (quantised to
//! 24 bits) by `constriction`'s range coder, as `u32` words. Since every bit
//! vector with the same number of ones has the same code length under that
//! model, the payload costs `m H(ones / m)` bits plus a few words, where
//! `H` is the binary entropy: the optimum for a filter whose bits are
//! independent with that density.
//!
//! Decoding trusts nothing: the header's lengths must agree with `m` and with
//! the bytes present, `m`, `k` must be a valid [`Params`], the set-bit count
//! and the item estimate must match the payload, a range-coded payload must
//! have the length its model implies and must re-encode to exactly the
//! same bytes (so each filter has one encoding). Malformed input is an
//! error, never a panic.

use std::fmt;

use constriction::stream::model::DefaultContiguousCategoricalEntropyModel;
use constriction::stream::queue::{DefaultRangeDecoder, DefaultRangeEncoder};
use constriction::stream::{Decode, Encode};

use super::filter::Bloom;
use super::params::{Layout, ParamError, Params};
use crate::Hasher;

/// The first four bytes of every encoding.
pub const MAGIC: [u8; 4] = *b"BLMF";
/// The encoding version this code writes and reads.
pub const VERSION: u8 = 1;
/// Header length in bytes.
pub const HEADER_LEN: usize = 44;
/// The largest filter (in bits) the range-coded form is used for and
/// accepted with: decoding costs time proportional to `m`, and a tiny
/// payload can claim a huge sparse filter. Larger filters travel raw.
pub const MAX_CODED_BITS: u64 = 1 << 28;
/// Fixed-point precision of the coder's model.
const PRECISION: u32 = 24;

const RAW: u8 = 0;
const CODED: u8 = 1;

/// Why bytes are not a valid encoding.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DecodeError {
    /// Fewer bytes than the header, or than the header's payload length.
    Truncated {
        /// Bytes needed.
        need: u64,
        /// Bytes present.
        have: u64,
    },
    /// Bytes after the payload.
    TrailingBytes(u64),
    /// The first four bytes are not `BLMF`.
    BadMagic,
    /// A version this code does not know.
    Version(u8),
    /// An unknown encoding byte.
    Encoding(u8),
    /// An unknown layout byte.
    Layout(u8),
    /// `m` and `k` do not form a valid geometry.
    Params(ParamError),
    /// The hash key differs from the decoder's.
    Key {
        /// The decoder's key id.
        expected: u32,
        /// The encoding's key id.
        found: u32,
    },
    /// The payload length does not fit `m` (raw) or the model (coded).
    PayloadLength(u64),
    /// A range-coded filter larger than [`MAX_CODED_BITS`].
    TooLargeToDecode(u64),
    /// The set-bit count in the header disagrees with the payload, or
    /// exceeds `m`.
    Ones(u64),
    /// The item estimate disagrees with the set-bit count.
    Estimate(u64),
    /// The range-coded payload does not decode, or is not the canonical
    /// encoding of what it decodes to.
    Corrupt,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated { need, have } => {
                write!(f, "truncated Bloom filter: need {need} bytes, have {have}")
            }
            DecodeError::TrailingBytes(n) => write!(f, "{n} bytes after the Bloom filter"),
            DecodeError::BadMagic => write!(f, "not a Bloom filter (bad magic)"),
            DecodeError::Version(v) => write!(f, "unknown Bloom filter version {v}"),
            DecodeError::Encoding(e) => write!(f, "unknown Bloom filter encoding {e}"),
            DecodeError::Layout(l) => write!(f, "unknown Bloom filter layout {l}"),
            DecodeError::Params(e) => write!(f, "invalid Bloom filter geometry: {e}"),
            DecodeError::Key { expected, found } => write!(
                f,
                "Bloom filter hashed with key id {found:#010x}, expected {expected:#010x}"
            ),
            DecodeError::PayloadLength(n) => {
                write!(
                    f,
                    "Bloom filter payload of {n} bytes does not fit its header"
                )
            }
            DecodeError::TooLargeToDecode(m) => {
                write!(f, "range-coded Bloom filter of {m} bits exceeds 2^28")
            }
            DecodeError::Ones(n) => write!(f, "Bloom filter set-bit count {n} is wrong"),
            DecodeError::Estimate(n) => write!(f, "Bloom filter item estimate {n} is wrong"),
            DecodeError::Corrupt => write!(f, "corrupt range-coded Bloom filter"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// What one filter message costs, beside what the other forms of the same
/// set would have cost: the compressed transfer form (what is sent), the
/// raw form of the same filter, and the items as a plain list. A sender
/// logs or counts these per message ([`Bloom::to_message`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageSizes {
    /// Bytes of [`Bloom::to_compressed_bytes`], header included (the raw
    /// form when coding would not be smaller).
    pub compressed: u64,
    /// Bytes of [`Bloom::to_bytes`]: [`HEADER_LEN`] `+ m / 8`.
    pub raw: u64,
    /// Bytes of the items as a list: `items * item_bytes` (4 per IPv4
    /// group, 16 per IPv6 group, 16 or 40 per flow key), no header.
    pub list: u64,
}

impl MessageSizes {
    /// The compression gain on the bit vector: raw payload over coded
    /// payload, headers excluded, so it compares with `m / z` of
    /// "Compressed Bloom filters" (`1 / H(p0)`,
    /// [`Params::compressed_bits`]). 1 when the filter travels raw.
    pub fn payload_gain(&self) -> f64 {
        let header = HEADER_LEN as u64;
        let coded = self.compressed.saturating_sub(header);
        if coded == 0 || self.compressed >= self.raw {
            return 1.0;
        }
        self.raw.saturating_sub(header) as f64 / coded as f64
    }
}

/// The header's item estimate: the rounded Swamidass-Baldi estimate
/// ([`Params::estimate_items`], finite for a full filter too).
fn estimate_field(params: &Params, ones: u64) -> u64 {
    params.estimate_items(ones).round() as u64
}

/// The two-symbol model for `ones` set bits out of `m` (`0 < ones < m`):
/// `P(1) = round(ones / m * 2^24)`, clamped so neither symbol has
/// probability zero. Integer arithmetic, so encoder and decoder agree.
fn model(m: u64, ones: u64) -> (DefaultContiguousCategoricalEntropyModel, u32, u32) {
    let scale = 1u128 << PRECISION;
    let p1 =
        ((u128::from(ones) * scale + u128::from(m) / 2) / u128::from(m)).clamp(1, scale - 1) as u32;
    let p0 = (1u32 << PRECISION) - p1;
    let model = DefaultContiguousCategoricalEntropyModel::from_nonzero_fixed_point_probabilities(
        [p0, p1],
        false,
    )
    .expect("two non-zero probabilities summing to 2^24 form a valid model");
    (model, p0, p1)
}

/// The code length in bits of any `m`-bit vector with `ones` ones under
/// [`model`].
fn code_bits(m: u64, ones: u64, p0: u32, p1: u32) -> f64 {
    let cost = |p: u32| f64::from(PRECISION) - f64::from(p).log2();
    ones as f64 * cost(p1) + (m - ones) as f64 * cost(p0)
}

fn range_encode(bloom: &Bloom, ones: u64) -> Vec<u32> {
    let m = bloom.params().bits();
    let (model, _, _) = model(m, ones);
    let mut enc = DefaultRangeEncoder::new();
    let bits = bloom
        .words()
        .flat_map(|w| (0..64).map(move |i| ((w >> i) & 1) as usize));
    enc.encode_iid_symbols(bits, &model)
        .expect("every symbol has non-zero probability; a Vec backend never fills");
    enc.into_compressed().expect("a Vec backend never fails")
}

impl Bloom {
    fn header(&self, encoding: u8, ones: u64, payload_len: usize) -> Vec<u8> {
        let p = self.params();
        let mut out = Vec::with_capacity(HEADER_LEN + payload_len);
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.push(encoding);
        out.push(p.layout().code());
        out.push(p.k() as u8);
        out.extend_from_slice(&p.bits().to_le_bytes());
        out.extend_from_slice(&self.hasher().key().id().to_le_bytes());
        out.extend_from_slice(&estimate_field(&p, ones).to_le_bytes());
        out.extend_from_slice(&ones.to_le_bytes());
        out.extend_from_slice(&(payload_len as u64).to_le_bytes());
        debug_assert_eq!(out.len(), HEADER_LEN);
        out
    }

    /// The raw transfer form: header and the bit vector (`m / 8` bytes).
    pub fn to_bytes(&self) -> Vec<u8> {
        let m = self.params().bits();
        let mut out = self.header(RAW, self.count_ones(), (m / 8) as usize);
        for w in self.words() {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// The compressed transfer form: the bits range-coded with the model
    /// `P(1) = ones / m`, about `m H(ones / m)` bits. Falls back to the raw
    /// form when that is no larger (a dense filter) or the filter exceeds
    /// [`MAX_CODED_BITS`]. [`Bloom::from_bytes`] reads both.
    pub fn to_compressed_bytes(&self) -> Vec<u8> {
        let m = self.params().bits();
        let ones = self.count_ones();
        if m > MAX_CODED_BITS {
            return self.to_bytes();
        }
        let words = if ones == 0 || ones == m {
            Vec::new()
        } else {
            range_encode(self, ones)
        };
        if words.len() as u64 * 32 >= m {
            return self.to_bytes();
        }
        let mut out = self.header(CODED, ones, words.len() * 4);
        for w in words {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// The compressed transfer form ([`Bloom::to_compressed_bytes`]) and
    /// what it costs beside the raw form and a list of `items` items of
    /// `item_bytes` bytes each: what a sender counts for every message.
    ///
    /// ```
    /// use kernels::Hasher;
    /// use kernels::bloom::{Bloom, HEADER_LEN, Params};
    ///
    /// // 1,000 IPv4 groups at 0.1%; the raw filter must stay below the list.
    /// let list_bits = (1000 * 4 - HEADER_LEN as u64 - 1) * 8;
    /// let params = Params::for_transfer(1000, 0.001, list_bits).unwrap();
    /// let mut groups = Bloom::new(params, Hasher::with_seed(1));
    /// let ids: Vec<[u32; 1]> = (0..1000u32).map(|g| [0xe000_0000 | g]).collect();
    /// groups.insert_batch(&ids);
    /// let (bytes, sizes) = groups.to_message(1000, 4);
    /// assert_eq!(bytes.len() as u64, sizes.compressed);
    /// assert!(sizes.compressed < sizes.raw && sizes.raw < sizes.list);
    /// ```
    pub fn to_message(&self, items: u64, item_bytes: u64) -> (Vec<u8>, MessageSizes) {
        let bytes = self.to_compressed_bytes();
        let sizes = MessageSizes {
            compressed: bytes.len() as u64,
            raw: HEADER_LEN as u64 + self.params().bits() / 8,
            list: items.saturating_mul(item_bytes),
        };
        (bytes, sizes)
    }

    /// Decodes either transfer form for use with `hasher`, whose key must
    /// be the one the filter was built with.
    ///
    /// # Errors
    /// Any inconsistency, as a [`DecodeError`]; never panics.
    pub fn from_bytes(bytes: &[u8], hasher: Hasher) -> Result<Bloom, DecodeError> {
        let have = bytes.len() as u64;
        let Some((h, payload)) = bytes.split_first_chunk::<HEADER_LEN>() else {
            return Err(DecodeError::Truncated {
                need: HEADER_LEN as u64,
                have,
            });
        };
        if h[0..4] != MAGIC {
            return Err(DecodeError::BadMagic);
        }
        if h[4] != VERSION {
            return Err(DecodeError::Version(h[4]));
        }
        let encoding = h[5];
        if encoding != RAW && encoding != CODED {
            return Err(DecodeError::Encoding(encoding));
        }
        let layout = Layout::from_code(h[6]).ok_or(DecodeError::Layout(h[6]))?;
        let k = usize::from(h[7]);
        let u64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&h[at..at + 8]);
            u64::from_le_bytes(b)
        };
        let m = u64_at(8);
        let key = u32::from_le_bytes([h[16], h[17], h[18], h[19]]);
        let estimate = u64_at(20);
        let ones = u64_at(28);
        let payload_len = u64_at(36);
        let params = Params::new(layout, m, k).map_err(DecodeError::Params)?;
        if key != hasher.key().id() {
            return Err(DecodeError::Key {
                expected: hasher.key().id(),
                found: key,
            });
        }
        let present = payload.len() as u64;
        if present < payload_len {
            return Err(DecodeError::Truncated {
                need: (HEADER_LEN as u64).saturating_add(payload_len),
                have,
            });
        }
        if present > payload_len {
            return Err(DecodeError::TrailingBytes(present - payload_len));
        }
        if encoding == RAW && payload_len != m / 8 {
            return Err(DecodeError::PayloadLength(payload_len));
        }
        if ones > m {
            return Err(DecodeError::Ones(ones));
        }
        if estimate != estimate_field(&params, ones) {
            return Err(DecodeError::Estimate(estimate));
        }
        let bloom = match encoding {
            RAW => {
                let words = payload
                    .chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])));
                Bloom::from_words(params, hasher, words)
            }
            _ => decode_coded(params, hasher, ones, payload)?,
        };
        if bloom.count_ones() != ones {
            return Err(DecodeError::Ones(ones));
        }
        Ok(bloom)
    }
}

fn decode_coded(
    params: Params,
    hasher: Hasher,
    ones: u64,
    payload: &[u8],
) -> Result<Bloom, DecodeError> {
    let m = params.bits();
    let len = payload.len() as u64;
    if m > MAX_CODED_BITS {
        return Err(DecodeError::TooLargeToDecode(m));
    }
    if ones == 0 || ones == m {
        if len != 0 {
            return Err(DecodeError::PayloadLength(len));
        }
        let fill = if ones == 0 { 0 } else { !0 };
        return Ok(Bloom::from_words(
            params,
            hasher,
            std::iter::repeat_n(fill, (m / 64) as usize),
        ));
    }
    let (model, p0, p1) = model(m, ones);
    // The code length is fixed by (m, ones): check it before decoding, so a
    // short payload cannot make us decode a large filter.
    let expect = code_bits(m, ones, p0, p1);
    let bits = len as f64 * 8.0;
    if len & 3 != 0 || bits < expect * 0.99 - 128.0 || bits > expect * 1.01 + 128.0 {
        return Err(DecodeError::PayloadLength(len));
    }
    let compressed: Vec<u32> = payload
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let mut dec = DefaultRangeDecoder::from_compressed(compressed.clone())
        .map_err(|_| DecodeError::Corrupt)?;
    let mut words = vec![0u64; (m / 64) as usize];
    for (i, sym) in dec.decode_iid_symbols(m as usize, &model).enumerate() {
        let s = sym.map_err(|_| DecodeError::Corrupt)?;
        words[i / 64] |= (s as u64 & 1) << (i % 64);
    }
    let bloom = Bloom::from_words(params, hasher, words.into_iter());
    if bloom.count_ones() != ones {
        return Err(DecodeError::Ones(ones));
    }
    if range_encode(&bloom, ones) != compressed {
        return Err(DecodeError::Corrupt);
    }
    Ok(bloom)
}
