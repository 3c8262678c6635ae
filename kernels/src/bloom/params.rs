//! Geometry of a Bloom-family filter (layout, `m`, `k`), its sizing from
//! `(n, p)`, its false-positive formula, the size estimate from the number of
//! set bits, and the batch step shared by every filter: hash a chunk of keys,
//! derive their `k` bit positions, prefetch.

use std::fmt;

use crate::index::{Blocked, Partitioned, SPLIT_BLOCK_WORDS};
use crate::{HashPair, Hasher};

/// Keys hashed together: one batch of the dataplane.
pub(crate) const BATCH: usize = 64;
/// Positions buffered per chunk (`k * keys <= POS_CAP`): small enough that
/// the zeroed scratch on the stack costs little, large enough for 64 keys at
/// `k <= 8`.
const POS_CAP: usize = 512;
/// The most bit positions per key.
pub const MAX_K: usize = crate::index::MAX_BLOCKED_K;
/// The most bits (or counters, or positions) a filter may have: `2^32`, so a
/// position fits a `u32`.
pub const MAX_BITS: u64 = 1 << 32;
/// log2 of the bits in one block of the blocked layout (one 64-byte line).
pub const LOG2_BLOCK_BITS: u32 = 9;
/// Bits per block of the blocked layout.
pub const BLOCK_BITS: u64 = 1 << LOG2_BLOCK_BITS;
/// log2 of the bits in one block of the split-block layout (32 bytes).
pub const LOG2_SPLIT_BLOCK_BITS: u32 = 8;
/// Bits per block of the split-block layout: eight 32-bit words.
pub const SPLIT_BLOCK_BITS: u64 = 1 << LOG2_SPLIT_BLOCK_BITS;
/// `k` of the split-block layout: one bit in each of the eight words.
pub const SPLIT_BLOCK_K: usize = SPLIT_BLOCK_WORDS;

/// Where the `k` bits of a key go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layout {
    /// The textbook filter: `k` positions anywhere in one array of `m` bits,
    /// by double hashing, `x_r = h1 + r * (h2 | 1)` (mod 2^32), position
    /// `(x_r * m) >> 32` (multiply-shift range reduction, so `m` need only be
    /// a multiple of 64). A query touches up to `k` cache lines.
    ///
    /// False-positive rate after `n` keys: `f = (1 - (1 - 1/m)^(k n))^k
    /// ~= (1 - e^(-k n / m))^k`.
    Classic,
    /// Blocked filter (Putze, Sanders, Singler 2007): `m / 512`
    /// blocks of 512 bits, one 64-byte cache line each, a power of two of
    /// them. The block is the top bits of `h1`; the `k` bits inside it come
    /// from `h2` by multiply-shift ([`crate::index`]). A query touches one
    /// cache line.
    ///
    /// A block's load is Poisson with mean `lambda = n / blocks`, so
    /// `f = sum_i Poisson(i; lambda) * (1 - (1 - 1/512)^(i k))^k`.
    Blocked,
    /// Split-block filter (as in Parquet and Impala): `m / 256` blocks of
    /// 256 bits (32 bytes, aligned, so half a cache line), a power of two of
    /// them, each eight 32-bit words. `k` is always 8: exactly one bit per
    /// word, bit `(h2 * SALT[j]) >> 27` of word `j`, `SALT` the Parquet salts
    /// ([`crate::index::SALTS`]); the block is the top bits of `h1`. A key's
    /// mask is a few vector instructions and a query is one 32-byte load
    /// and one test, so this is the fastest layout (and the one
    /// [`Layout::default`] and [`crate::bloom::Bloom::with_rate`] pick).
    ///
    /// A block's load is Poisson with mean `lambda = n / blocks` and each
    /// key sets one of 32 bits in each word, so
    /// `f = sum_i Poisson(i; lambda) * (1 - (1 - 1/32)^i)^8`.
    SplitBlock,
}

impl Default for Layout {
    /// [`Layout::SplitBlock`], the layout [`crate::bloom::Bloom::with_rate`]
    /// picks (the fastest at the same false-positive target; see the
    /// [`bloom`](crate::bloom) module docs for the measurement).
    fn default() -> Self {
        Layout::SplitBlock
    }
}

impl Layout {
    pub(crate) fn code(self) -> u8 {
        match self {
            Layout::Classic => 0,
            Layout::Blocked => 1,
            Layout::SplitBlock => 2,
        }
    }

    pub(crate) fn from_code(c: u8) -> Option<Self> {
        match c {
            0 => Some(Layout::Classic),
            1 => Some(Layout::Blocked),
            2 => Some(Layout::SplitBlock),
            _ => None,
        }
    }
}

/// Why a filter geometry was refused.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ParamError {
    /// Sizing for zero expected items.
    NoItems,
    /// The target false-positive rate is not in `(0, 1)`.
    Rate(f64),
    /// `k` is not in `1..=32`.
    HashCount(usize),
    /// `m` does not fit the layout: Classic needs a multiple of 64 in
    /// `64..=2^32`, Blocked a power of two in `512..=2^32`, SplitBlock a
    /// power of two in `256..=2^32`.
    Bits(Layout, u64),
    /// The split-block layout sets exactly one bit per 32-bit word of its
    /// block: `k` must be 8.
    SplitBlockK(usize),
    /// No filter of at most [`MAX_BITS`] bits reaches the target rate.
    TooLarge,
    /// Halving needs a power-of-two `m` of at least 1024 bits.
    CannotHalve(u64),
    /// No classic filter of at most this many bits reaches the target rate
    /// ([`Params::for_transfer`]).
    OverBudget(u64),
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamError::NoItems => write!(f, "a Bloom filter must be sized for at least one item"),
            ParamError::Rate(p) => write!(f, "false-positive rate {p} is not in (0, 1)"),
            ParamError::HashCount(k) => write!(f, "k = {k} is not in 1..={MAX_K}"),
            ParamError::Bits(Layout::Classic, m) => write!(
                f,
                "m = {m} bits: the classic layout needs a multiple of 64 in 64..=2^32"
            ),
            ParamError::Bits(Layout::Blocked, m) => write!(
                f,
                "m = {m} bits: the blocked layout needs a power of two in 512..=2^32"
            ),
            ParamError::Bits(Layout::SplitBlock, m) => write!(
                f,
                "m = {m} bits: the split-block layout needs a power of two in 256..=2^32"
            ),
            ParamError::SplitBlockK(k) => write!(
                f,
                "k = {k}: the split-block layout sets one bit in each of its 8 words, so k must be 8"
            ),
            ParamError::TooLarge => write!(
                f,
                "no filter of at most 2^32 bits reaches the target false-positive rate"
            ),
            ParamError::CannotHalve(m) => write!(
                f,
                "cannot halve a filter of {m} bits: need a power of two of at least 1024"
            ),
            ParamError::OverBudget(max) => write!(
                f,
                "no classic filter of at most {max} bits reaches the target false-positive rate"
            ),
        }
    }
}

impl std::error::Error for ParamError {}

/// Why two filters cannot be combined (union, intersection, port filter):
/// they must share layout, `m`, `k` and hash key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Incompatible {
    /// Different layouts.
    Layout(Layout, Layout),
    /// Different numbers of bits.
    Bits(u64, u64),
    /// Different numbers of bit positions per key.
    HashCount(usize, usize),
    /// Different hash keys ([`crate::HashKey::id`]).
    Key(u32, u32),
}

impl fmt::Display for Incompatible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Incompatible::Layout(a, b) => write!(f, "filters differ in layout: {a:?} vs {b:?}"),
            Incompatible::Bits(a, b) => write!(f, "filters differ in size: {a} vs {b} bits"),
            Incompatible::HashCount(a, b) => write!(f, "filters differ in k: {a} vs {b}"),
            Incompatible::Key(a, b) => {
                write!(
                    f,
                    "filters use different hash keys: id {a:#010x} vs {b:#010x}"
                )
            }
        }
    }
}

impl std::error::Error for Incompatible {}

/// The geometry of a filter: layout, `m` bits (or counters), `k` positions
/// per key. Every filter built from equal `Params` and the same hash key
/// maps a key to the same positions, which is what union, intersection,
/// counting-to-plain export and the port filter rely on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Params {
    layout: Layout,
    bits: u64,
    k: usize,
}

impl Params {
    /// An explicit geometry.
    ///
    /// # Errors
    /// [`ParamError::HashCount`] unless `1 <= k <= 32`; [`ParamError::Bits`]
    /// unless `m` is a multiple of 64 in `64..=2^32` (Classic) or a power of
    /// two in `512..=2^32` (Blocked: the block index is the top bits of `h1`,
    /// so the block count is a power of two) or in `256..=2^32`
    /// (SplitBlock); [`ParamError::SplitBlockK`] unless `k == 8` for
    /// SplitBlock.
    pub fn new(layout: Layout, bits: u64, k: usize) -> Result<Self, ParamError> {
        if !(1..=MAX_K).contains(&k) {
            return Err(ParamError::HashCount(k));
        }
        if layout == Layout::SplitBlock && k != SPLIT_BLOCK_K {
            return Err(ParamError::SplitBlockK(k));
        }
        let ok = match layout {
            Layout::Classic => (64..=MAX_BITS).contains(&bits) && bits & 63 == 0,
            Layout::Blocked => (BLOCK_BITS..=MAX_BITS).contains(&bits) && bits.is_power_of_two(),
            Layout::SplitBlock => {
                (SPLIT_BLOCK_BITS..=MAX_BITS).contains(&bits) && bits.is_power_of_two()
            }
        };
        if !ok {
            return Err(ParamError::Bits(layout, bits));
        }
        Ok(Params { layout, bits, k })
    }

    /// The smallest geometry whose false-positive rate after `n` items is at
    /// most `p`, by the layout's own formula.
    ///
    /// * Classic: `m = ceil(-n ln p / (ln 2)^2)` rounded up to a multiple of
    ///   64, `k = round((m / n) ln 2)`.
    /// * Blocked: the number of blocks is the smallest *power of two* (the
    ///   block is the top bits of `h1`) for which some `k` reaches `p` by the
    ///   Putze et al. formula of [`Layout::Blocked`] (the classic formula
    ///   underestimates a blocked filter's rate, by about 15% at 1%). Since the
    ///   rounding leaves slack, `k` is the *smallest* that reaches `p`: fewer
    ///   bits to test per query, same target.
    /// * SplitBlock: `k = 8`; the number of blocks is the smallest power of
    ///   two whose rate by the formula of [`Layout::SplitBlock`] is at most
    ///   `p`.
    ///
    /// # Errors
    /// [`ParamError::NoItems`] if `n == 0`, [`ParamError::Rate`] unless
    /// `0 < p < 1`, [`ParamError::TooLarge`] if more than 2^32 bits would be
    /// needed.
    pub fn for_items(layout: Layout, n: u64, p: f64) -> Result<Self, ParamError> {
        if n == 0 {
            return Err(ParamError::NoItems);
        }
        if !(p > 0.0 && p < 1.0) {
            return Err(ParamError::Rate(p));
        }
        let nf = n as f64;
        match layout {
            Layout::Classic => {
                let ln2 = std::f64::consts::LN_2;
                let m = (-nf * p.ln() / (ln2 * ln2)).ceil().max(64.0);
                let mut m = ((m / 64.0).ceil() * 64.0) as u64;
                // Rounding k can leave the rate a hair above p: grow m until
                // the exact formula meets it.
                loop {
                    if m > MAX_BITS {
                        return Err(ParamError::TooLarge);
                    }
                    let k = ((m as f64 / nf) * ln2).round().clamp(1.0, MAX_K as f64) as usize;
                    let params = Params::new(layout, m, k)?;
                    if params.false_positive_rate(nf) <= p {
                        return Ok(params);
                    }
                    m += 64;
                }
            }
            Layout::Blocked => {
                // Start where a block holds at most 512 keys (below that the
                // rate is near 1 anyway) and grow by doubling.
                let min_blocks = (nf / BLOCK_BITS as f64).ceil().max(1.0) as u64;
                if min_blocks > MAX_BITS / BLOCK_BITS {
                    return Err(ParamError::TooLarge);
                }
                let mut log2_blocks = min_blocks.next_power_of_two().trailing_zeros();
                while (BLOCK_BITS << log2_blocks) <= MAX_BITS {
                    let blocks = 1u64 << log2_blocks;
                    if let Some(k) = (1..=MAX_K).find(|&k| blocked_fpr(nf, blocks, k) <= p) {
                        return Params::new(layout, blocks * BLOCK_BITS, k);
                    }
                    log2_blocks += 1;
                }
                Err(ParamError::TooLarge)
            }
            Layout::SplitBlock => {
                let min_blocks = (nf / SPLIT_BLOCK_BITS as f64).ceil().max(1.0) as u64;
                if min_blocks > MAX_BITS / SPLIT_BLOCK_BITS {
                    return Err(ParamError::TooLarge);
                }
                let mut log2_blocks = min_blocks.next_power_of_two().trailing_zeros();
                while (SPLIT_BLOCK_BITS << log2_blocks) <= MAX_BITS {
                    let blocks = 1u64 << log2_blocks;
                    if split_block_fpr(nf, blocks) <= p {
                        return Params::new(layout, blocks * SPLIT_BLOCK_BITS, SPLIT_BLOCK_K);
                    }
                    log2_blocks += 1;
                }
                Err(ParamError::TooLarge)
            }
        }
    }

    /// The geometry of a per-port filter ([`crate::bloom::PortFilter`]) for
    /// `n` items per port at false-positive rate `p`: the blocked layout,
    /// with the fewest positions per key among the smallest size that
    /// reaches `p` ([`Params::for_items`]) and twice that size.
    ///
    /// A port filter is bit-sliced: each position is a word-set of its own
    /// (a `u64` per 64 ports), so a query costs one cache line and three
    /// instructions per position, whatever the layout; what counts is `k`.
    /// Block counts are powers of two, and the next power of two usually
    /// reaches `p` with far fewer positions: for `n = 1024`, `p = 0.1%`,
    /// 16 Ki bits need `k = 7` (rate 0.099%) and 32 Ki bits `k = 3`
    /// (0.084%). 32 Ki bits is also what the split-block layout needs there
    /// (its fixed `k = 8` cannot use the slack: 16 Ki bits give 0.13%), so
    /// against it the blocked choice touches 3 cache lines per query
    /// instead of 8 for the same memory.
    ///
    /// # Errors
    /// As [`Params::for_items`].
    pub fn for_port_filter(n: u64, p: f64) -> Result<Self, ParamError> {
        let small = Params::for_items(Layout::Blocked, n, p)?;
        let bits = small.bits * 2;
        if bits > MAX_BITS {
            return Ok(small);
        }
        let blocks = bits / BLOCK_BITS;
        let k = (1..small.k)
            .find(|&k| blocked_fpr(n as f64, blocks, k) <= p)
            .unwrap_or(small.k);
        if k < small.k {
            Params::new(Layout::Blocked, bits, k)
        } else {
            Ok(small)
        }
    }

    /// The classic geometry that sends the fewest bits: among classic
    /// filters of at most `max_bits` bits whose false-positive rate after
    /// `n` items is at most `p`, and with at most as many positions per key
    /// as the uncompressed optimum ([`Params::for_items`]), the one whose
    /// range-coded size ([`Params::compressed_bits`], Mitzenmacher's
    /// `z = m H(p0)`) is the smallest; on a tie, the smaller `k`.
    ///
    /// This is the optimisation of "Compressed Bloom filters" (Mitzenmacher
    /// 2002) in the form of its Tables IV and V: fix the false-positive
    /// rate, minimise the transmitted size. For each `k` the smallest `m` (a
    /// multiple of 64) that reaches `p` is the best for that `k` (the coded
    /// size grows with `m` at fixed `k`), so the search is one closed-form
    /// `m` per `k`. The bound on `m` is the paper's "restriction on m":
    /// without one the optimum runs to `k = 1` and `m ~ n / p`, an array
    /// the receiver must hold and the decoder walk. A sender that would
    /// otherwise send the items as a list passes the list's size in bits
    /// (less the transfer header), so the raw form never exceeds the list
    /// either.
    ///
    /// Coded size has a second optimum on the dense side (many positions,
    /// few zero bits), which the search leaves out, as the paper's tables
    /// do: a dense filter holding fewer items than it was sized for has
    /// about half its bits set and hardly compresses, where a sparse one
    /// gets sparser and compresses better. At a 50% rate (the DBF's) the
    /// dense optimum, `k = 27` and 7.4 array bits per item, codes a full
    /// filter in 1.26 bits per item against the textbook 1.44; but sized
    /// for 1,000 items and holding 200, it takes 920 bytes (it no longer
    /// compresses) against the textbook filter's 101, and over the DBF
    /// paper's experiments it sent more bytes per filter, not fewer
    /// (`docs/network.md`). So at 50% this gives the textbook geometry,
    /// `k = 1`.
    ///
    /// ```
    /// use kernels::bloom::{Layout, Params};
    ///
    /// // 10,000 items at about 0.045%, at most 48 array bits per item:
    /// // Table V's k = 3, m/n = 37.5, z/n = 14.67 (16 for the uncompressed
    /// // optimum, k = 11).
    /// let p = Params::for_transfer(10_000, 0.000454, 480_000).unwrap();
    /// assert_eq!((p.layout(), p.k()), (Layout::Classic, 3));
    /// assert!((p.bits() as f64 / 10_000.0 - 37.5).abs() < 0.3);
    /// assert!((p.compressed_bits(10_000.0) / 10_000.0 - 14.666).abs() < 0.1);
    /// ```
    ///
    /// # Errors
    /// [`ParamError::NoItems`] if `n == 0`, [`ParamError::Rate`] unless
    /// `0 < p < 1`, [`ParamError::TooLarge`] if no classic filter of at
    /// most 2^32 bits reaches `p`, [`ParamError::OverBudget`] if none of at
    /// most `max_bits` bits does.
    pub fn for_transfer(n: u64, p: f64, max_bits: u64) -> Result<Self, ParamError> {
        let textbook = Params::for_items(Layout::Classic, n, p)?;
        let cap = max_bits.min(MAX_BITS);
        let nf = n as f64;
        let mut best: Option<(f64, Params)> = None;
        for k in 1..=textbook.k {
            let Some(m) = classic_bits_for(nf, p, k, cap) else {
                continue;
            };
            let params = Params::new(Layout::Classic, m, k)?;
            let z = params.compressed_bits(nf);
            if best.is_none_or(|(fewest, _)| z < fewest) {
                best = Some((z, params));
            }
        }
        best.map(|(_, params)| params)
            .ok_or(ParamError::OverBudget(max_bits))
    }

    /// The expected fraction of zero bits after `n` distinct items:
    /// `(1 - 1/m)^(k n)` (Classic), `exp(-(n / R) (1 - (1 - 1/512)^k))`
    /// (Blocked, `R` blocks, a block's load Poisson), `exp(-(n / R) / 32)`
    /// (SplitBlock). 1 for `n <= 0` or NaN.
    pub fn expected_zero_fraction(&self, n: f64) -> f64 {
        if n.is_nan() || n <= 0.0 {
            return 1.0;
        }
        let k = self.k as f64;
        match self.layout {
            Layout::Classic => (k * n * (-1.0 / self.bits as f64).ln_1p()).exp(),
            Layout::Blocked => {
                let per_key = 1.0 - (1.0 - 1.0 / BLOCK_BITS as f64).powf(k);
                (-(n / self.blocks() as f64) * per_key).exp()
            }
            Layout::SplitBlock => (-(n / self.blocks() as f64) / 32.0).exp(),
        }
    }

    /// The transmitted size "Compressed Bloom filters" predicts for the
    /// range-coded bit vector after `n` items, in bits: `m H(p0)`, `H` the
    /// binary entropy and `p0` the [expected zero
    /// fraction](Params::expected_zero_fraction) (the paper's `z`; its
    /// Table II gives `z / n`). The coded payload of
    /// [`Bloom::to_compressed_bytes`](crate::bloom::Bloom::to_compressed_bytes)
    /// is this plus a few words; the header adds
    /// [`HEADER_LEN`](crate::bloom::HEADER_LEN) bytes.
    pub fn compressed_bits(&self, n: f64) -> f64 {
        self.bits as f64 * binary_entropy(self.expected_zero_fraction(n))
    }

    /// The layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// `m`: bits of a [`crate::bloom::Bloom`], counters of a
    /// [`crate::bloom::CountingBloom`], positions of a
    /// [`crate::bloom::PortFilter`].
    pub fn bits(&self) -> u64 {
        self.bits
    }

    /// `k`: positions per key.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Number of blocks: of 512 bits (Blocked), of 256 bits (SplitBlock),
    /// or 0 (Classic).
    pub fn blocks(&self) -> u64 {
        match self.layout {
            Layout::Classic => 0,
            Layout::Blocked => self.bits / BLOCK_BITS,
            Layout::SplitBlock => self.bits / SPLIT_BLOCK_BITS,
        }
    }

    /// The false-positive rate after `n` distinct items, by the layout's
    /// formula (see [`Layout`]): 0 for `n <= 0` (or NaN), 1 for an
    /// infinite `n`, and in `[0, 1]` in between, computed in a bounded number
    /// of steps whatever `n` is.
    pub fn false_positive_rate(&self, n: f64) -> f64 {
        if n.is_nan() || n <= 0.0 {
            return 0.0;
        }
        let k = self.k as f64;
        match self.layout {
            Layout::Classic => {
                let m = self.bits as f64;
                (1.0 - (1.0 - 1.0 / m).powf(k * n)).powf(k)
            }
            Layout::Blocked => blocked_fpr(n, self.blocks(), self.k),
            Layout::SplitBlock => split_block_fpr(n, self.blocks()),
        }
    }

    /// Estimated number of distinct items from the number of set bits `x`
    /// (Swamidass and Baldi 2007).
    ///
    /// * Classic: each insertion leaves a given bit zero with probability
    ///   `(1 - 1/m)^k`, so `n* = ln(1 - x/m) / (k ln(1 - 1/m))`, which is
    ///   `-(m / k) ln(1 - x / m)` to first order.
    /// * Blocked: a block's load is Poisson(`n / R`), `R` blocks, so the
    ///   expected zero fraction is `exp(-(n / R) (1 - (1 - 1/512)^k))` and
    ///   `n* = -R ln(1 - x/m) / (1 - (1 - 1/512)^k)` (the classic form would
    ///   be biased by about `(k - 1) / 1024`).
    /// * SplitBlock: a key sets a given bit of its block with probability
    ///   1/32, so the zero fraction is `exp(-(n / R) / 32)` and
    ///   `n* = -32 R ln(1 - x/m)`.
    ///
    /// A full filter has no zero bit left to measure, so its estimate is
    /// taken at half a zero bit (`x = m - 1/2`): finite, larger than the
    /// estimate of any filter with a zero bit left, and read as "at least
    /// about this many". `x` above `m` counts as full.
    pub fn estimate_items(&self, x: u64) -> f64 {
        let m = self.bits as f64;
        let frac_zero = 1.0 - (x as f64).min(m - 0.5) / m;
        let k = self.k as f64;
        let n = match self.layout {
            Layout::Classic => frac_zero.ln() / (k * (1.0 - 1.0 / m).ln()),
            Layout::Blocked => {
                let per_key = 1.0 - (1.0 - 1.0 / BLOCK_BITS as f64).powf(k);
                -(self.blocks() as f64) * frac_zero.ln() / per_key
            }
            Layout::SplitBlock => -(self.blocks() as f64) * frac_zero.ln() * 32.0,
        };
        // ln(1) is 0, and -0.0 reads oddly in a report.
        n.max(0.0)
    }

    /// Whether two geometries (and hash keys) agree.
    pub(crate) fn check(&self, other: &Params, key_a: u32, key_b: u32) -> Result<(), Incompatible> {
        if self.layout != other.layout {
            return Err(Incompatible::Layout(self.layout, other.layout));
        }
        if self.bits != other.bits {
            return Err(Incompatible::Bits(self.bits, other.bits));
        }
        if self.k != other.k {
            return Err(Incompatible::HashCount(self.k, other.k));
        }
        if key_a != key_b {
            return Err(Incompatible::Key(key_a, key_b));
        }
        Ok(())
    }

    /// Keys per chunk so that `k * chunk <= POS_CAP`.
    pub(crate) fn chunk(&self) -> usize {
        (POS_CAP / self.k).min(BATCH)
    }

    /// Blocked layout only: hashes `keys` (at most [`Params::chunk`]) and
    /// returns their blocks and in-block bits (`bits[j * n + i]`, `< 512`).
    #[inline(always)]
    pub(crate) fn blocked_indices<'s, const W: usize>(
        &self,
        hasher: &Hasher,
        keys: &[[u32; W]],
        s: &'s mut Scratch,
    ) -> (&'s [u32], &'s [u32]) {
        let n = keys.len();
        debug_assert!(self.layout == Layout::Blocked && n <= self.chunk());
        let pairs = &mut s.pairs[..n];
        hasher.hash_batch(keys, pairs);
        let log2_blocks = (self.bits / BLOCK_BITS).trailing_zeros();
        let layout = Blocked::new(log2_blocks, LOG2_BLOCK_BITS, self.k);
        let (blocks, pos) = (&mut s.blocks[..n], &mut s.pos[..self.k * n]);
        hasher.blocked(pairs, layout, blocks, pos);
        (blocks, pos)
    }

    /// Hashes `keys` (at most [`Params::chunk`] of them) and writes their
    /// positions, index-major: `s.pos[j * n + i]` is position `j` of key `i`,
    /// in `0..m` (see [`Params::pair_positions`]).
    #[inline]
    pub(crate) fn positions<const W: usize>(
        &self,
        hasher: &Hasher,
        keys: &[[u32; W]],
        s: &mut Scratch,
    ) {
        let n = keys.len();
        debug_assert!(n <= self.chunk());
        let pairs = &mut s.pairs[..n];
        hasher.hash_batch(keys, pairs);
        self.pair_positions(hasher, &s.pairs[..n], &mut s.blocks, &mut s.pos);
    }

    /// Writes the positions of `pairs` (at most [`Params::chunk`] of them)
    /// into `pos`, index-major: `pos[j * n + i]` is position `j` of pair
    /// `i`, in `0..m`. Blocked: `block * 512 + bit`; SplitBlock:
    /// `block * 256 + 32 j + bit_j` (bit `i` of word `j` of the block is
    /// position `256 block + 32 j + i`); Classic: `(x_j * m) >> 32`.
    /// `blocks` is scratch for the block of each pair. The hasher only
    /// chooses the backend: its key plays no part.
    #[inline]
    pub(crate) fn pair_positions(
        &self,
        hasher: &Hasher,
        pairs: &[HashPair],
        blocks: &mut [u32; BATCH],
        pos: &mut [u32; POS_CAP],
    ) {
        let n = pairs.len();
        debug_assert!(n <= self.chunk());
        let pos = &mut pos[..self.k * n];
        match self.layout {
            Layout::Blocked => {
                let log2_blocks = (self.bits / BLOCK_BITS).trailing_zeros();
                let layout = Blocked::new(log2_blocks, LOG2_BLOCK_BITS, self.k);
                let blocks = &mut blocks[..n];
                hasher.blocked(pairs, layout, blocks, pos);
                for row in pos.chunks_exact_mut(n) {
                    for (p, &b) in row.iter_mut().zip(blocks.iter()) {
                        *p |= b << LOG2_BLOCK_BITS;
                    }
                }
            }
            Layout::SplitBlock => {
                // Word j's bit is (h2 * SALT[j]) >> 27: the blocked
                // derivation with 32-bit "blocks" of bits and k = 8.
                let log2_blocks = self.blocks().trailing_zeros();
                let layout = Blocked::new(log2_blocks, 5, SPLIT_BLOCK_K);
                let blocks = &mut blocks[..n];
                hasher.blocked(pairs, layout, blocks, pos);
                for (j, row) in pos.chunks_exact_mut(n).enumerate() {
                    for (p, &b) in row.iter_mut().zip(blocks.iter()) {
                        *p |= (b << LOG2_SPLIT_BLOCK_BITS) | ((j as u32) << 5);
                    }
                }
            }
            Layout::Classic => {
                // log2 width 32: the raw double-hashing sums h1 + r * s.
                hasher.partitioned(pairs, Partitioned::new(self.k, 32), pos);
                let m = self.bits;
                for p in pos.iter_mut() {
                    *p = ((u64::from(*p) * m) >> 32) as u32;
                }
            }
        }
    }
}

/// Scratch for one chunk of keys, on the stack.
pub(crate) struct Scratch {
    pub(crate) pairs: [HashPair; BATCH],
    pub(crate) blocks: [u32; BATCH],
    pub(crate) pos: [u32; POS_CAP],
}

impl Scratch {
    #[inline(always)]
    pub(crate) fn new() -> Self {
        Scratch {
            pairs: [HashPair::default(); BATCH],
            blocks: [0; BATCH],
            pos: [0; POS_CAP],
        }
    }
}

/// The smallest classic `m` (a multiple of 64, at most `cap`) with
/// `(1 - (1 - 1/m)^(k n))^k <= p`, or `None` if above `cap`. Solved in
/// closed form, then stepped by 64 to the exact boundary (a step or two).
fn classic_bits_for(n: f64, p: f64, k: usize, cap: u64) -> Option<u64> {
    let kf = k as f64;
    // (1 - 1/m)^(k n) = 1 - p^(1/k)  =>  1/m = 1 - (1 - p^(1/k))^(1/(k n)).
    let zeros = -(p.ln() / kf).exp_m1(); // 1 - p^(1/k), in (0, 1)
    let inv_m = -(zeros.ln() / (kf * n)).exp_m1();
    let m = 1.0 / inv_m;
    if !m.is_finite() || m > cap as f64 + 64.0 {
        return None;
    }
    let fpr = |m: u64| (1.0 - (kf * n * (-1.0 / m as f64).ln_1p()).exp()).powf(kf);
    let mut m = ((m / 64.0).ceil() as u64).max(1) * 64;
    while fpr(m) > p {
        m += 64;
        if m > cap {
            return None;
        }
    }
    while m > 64 && fpr(m - 64) <= p {
        m -= 64;
    }
    (m <= cap).then_some(m)
}

/// The binary entropy `H(x) = -x log2 x - (1 - x) log2 (1 - x)`, 0 at the
/// ends.
fn binary_entropy(x: f64) -> f64 {
    if !(x > 0.0 && x < 1.0) {
        return 0.0;
    }
    -(x * x.log2() + (1.0 - x) * (1.0 - x).log2())
}

/// The blocked layout's false-positive rate (Putze, Sanders, Singler 2007):
/// `sum_i Poisson(i; n / blocks) * (1 - (1 - 1/512)^(i k))^k`, summed in
/// log space over the loads within `12 sqrt(lambda) + 30` of the mean, in
/// a number of steps bounded whatever `n` is (a load too large for any
/// clear bit to be left gives 1 at once).
pub fn blocked_fpr(n: f64, blocks: u64, k: usize) -> f64 {
    let ln_keep = (1.0 - 1.0 / BLOCK_BITS as f64).ln() * k as f64;
    poisson_mix(n / blocks as f64, ln_keep, k as f64)
}

/// The split-block layout's false-positive rate: `sum_i Poisson(i; n /
/// blocks) * (1 - (1 - 1/32)^i)^8` (each of the `i` keys in the block sets
/// one of 32 bits in each of the 8 words), summed like [`blocked_fpr`].
pub fn split_block_fpr(n: f64, blocks: u64) -> f64 {
    let ln_keep = (1.0 - 1.0 / 32.0f64).ln();
    poisson_mix(n / blocks as f64, ln_keep, SPLIT_BLOCK_K as f64)
}

/// `sum_i Poisson(i; lambda) * (1 - e^(i ln_keep))^power`: the false-positive
/// rate of a blocked filter whose blocks hold a Poisson(`lambda`) number of
/// keys, a key leaving a given bit of its block clear with probability
/// `e^ln_keep` (`ln_keep < 0`).
///
/// Summed in log space (large loads would underflow `e^-lambda`) over the
/// loads within `12 sqrt(lambda) + 30` of the mean (the rest weighs less
/// than `e^-60`). The work is bounded whatever `lambda` is: once
/// `e^(i ln_keep) < 2^-60` a term's bracket is 1 to double precision, so
/// the loads above that point are summed as one tail (`1 -` the mass
/// below it), and a mean window wholly above it gives 1 at once. So a
/// full filter, whose size estimate is huge, costs no more than an empty
/// one, and an infinite or NaN load is 1 or 0, never a loop.
fn poisson_mix(lambda: f64, ln_keep: f64, power: f64) -> f64 {
    if lambda.is_nan() || lambda <= 0.0 {
        return 0.0;
    }
    if !lambda.is_finite() {
        return 1.0;
    }
    let saturated = (60.0 * std::f64::consts::LN_2 / -ln_keep).ceil();
    let spread = 12.0 * lambda.sqrt() + 30.0;
    let lo = (lambda - spread).max(0.0).floor();
    let hi = (lambda + spread).ceil();
    if lo >= saturated {
        return 1.0;
    }
    let top = hi.min(saturated);
    let (lo, top) = (lo as u64, top as u64);
    let ln_l = lambda.ln();
    // ln(lo!) once, then one addition per term.
    let mut ln_fact = libm::lgamma(lo as f64 + 1.0);
    let (mut sum, mut mass) = (0.0f64, 0.0f64);
    for i in lo..=top {
        if i > lo {
            ln_fact += (i as f64).ln();
        }
        let ln_pmf = -lambda + i as f64 * ln_l - ln_fact;
        if ln_pmf < -60.0 {
            continue;
        }
        let pmf = ln_pmf.exp();
        mass += pmf;
        sum += pmf * (1.0 - (ln_keep * i as f64).exp()).powf(power);
    }
    if (top as f64) < hi {
        sum += (1.0 - mass).max(0.0);
    }
    sum.min(1.0)
}

/// Asks the CPU to bring the cache line holding `slice[at]` into L1. A hint
/// only: it changes no state a program can observe, whatever `at` is.
#[inline(always)]
pub fn prefetch<T>(slice: &[T], at: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let p = slice.as_ptr().wrapping_add(at).cast::<i8>();
        // SAFETY: `prefetch` (SSE, baseline on x86_64) never faults and
        // reads or writes nothing architecturally, whatever the address; the
        // pointer comes from `wrapping_add`, so forming it is defined even if
        // `at` were out of bounds (callers pass positions below `m`).
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        // No stable prefetch intrinsic elsewhere (aarch64's is unstable);
        // the out-of-order core still overlaps the independent loads.
        let _ = (slice, at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocked_sizing_rounds_to_power_of_two_and_meets_target() {
        for (n, p) in [(50_000u64, 0.01), (1000, 0.001), (13_000, 0.05), (1, 0.5)] {
            let pr = Params::for_items(Layout::Blocked, n, p).unwrap();
            assert!(pr.blocks().is_power_of_two());
            assert!(pr.false_positive_rate(n as f64) <= p, "{n} {p} {pr:?}");
            // Half the blocks would not do with any k.
            if pr.blocks() > 1 {
                let half = pr.blocks() / 2;
                assert!((1..=MAX_K).all(|k| blocked_fpr(n as f64, half, k) > p));
            }
        }
    }

    #[test]
    fn classic_sizing_matches_textbook() {
        let pr = Params::for_items(Layout::Classic, 10_000, 0.01).unwrap();
        assert_eq!(pr.k(), 7);
        assert!((95_800..=96_000).contains(&pr.bits()), "{pr:?}");
        assert!(pr.false_positive_rate(10_000.0) < 0.0102);
    }

    #[test]
    fn bad_params_are_errors() {
        assert_eq!(
            Params::for_items(Layout::Blocked, 0, 0.1),
            Err(ParamError::NoItems)
        );
        assert!(matches!(
            Params::for_items(Layout::Blocked, 1, 1.0),
            Err(ParamError::Rate(_))
        ));
        assert!(matches!(
            Params::for_items(Layout::Blocked, 1, f64::NAN),
            Err(ParamError::Rate(_))
        ));
        assert_eq!(
            Params::new(Layout::Blocked, 1000, 3),
            Err(ParamError::Bits(Layout::Blocked, 1000))
        );
        assert_eq!(
            Params::new(Layout::Classic, 100, 3),
            Err(ParamError::Bits(Layout::Classic, 100))
        );
        assert_eq!(
            Params::new(Layout::Classic, 128, 33),
            Err(ParamError::HashCount(33))
        );
        assert_eq!(
            Params::new(Layout::Classic, 128, 0),
            Err(ParamError::HashCount(0))
        );
        assert!(Params::for_items(Layout::Blocked, u64::MAX / 2, 1e-9).is_err());
    }

    #[test]
    fn classic_formula_limits() {
        let pr = Params::new(Layout::Classic, 160_000, 11).unwrap();
        let f = pr.false_positive_rate(10_000.0);
        assert!((f - 0.000459).abs() / 0.000459 < 0.01, "{f}");
    }

    /// The sum as it was first written: every load from 0, one `ln i` at a
    /// time. Exact where it terminates; the reference for `poisson_mix`.
    fn naive_mix(lambda: f64, ln_keep: f64, power: f64) -> f64 {
        let hi = (lambda + 12.0 * lambda.sqrt() + 30.0).ceil() as u64;
        let (mut ln_fact, mut sum) = (0.0f64, 0.0f64);
        for i in 0..=hi {
            if i > 0 {
                ln_fact += (i as f64).ln();
            }
            let ln_pmf = -lambda + i as f64 * lambda.ln() - ln_fact;
            if ln_pmf >= -60.0 {
                sum += ln_pmf.exp() * (1.0 - (ln_keep * i as f64).exp()).powf(power);
            }
        }
        sum.min(1.0)
    }

    #[test]
    fn poisson_mix_matches_the_plain_sum() {
        // Loads where the window starts at 0, where it starts above 0 (the
        // lgamma start), and where the tail above the saturation point is
        // summed as one term.
        let blocked = |k: f64| (1.0 - 1.0 / 512.0f64).ln() * k;
        let split = (1.0 - 1.0 / 32.0f64).ln();
        for (lambda, ln_keep, power) in [
            (0.3, blocked(3.0), 3.0),
            (16.0, blocked(3.0), 3.0),
            (700.0, blocked(1.0), 1.0),
            (5_000.0, blocked(1.0), 1.0),
            (20_000.0, blocked(1.0), 1.0),
            (30.0, split, 8.0),
            (400.0, split, 8.0),
            (1_200.0, split, 8.0),
        ] {
            let (a, b) = (
                poisson_mix(lambda, ln_keep, power),
                naive_mix(lambda, ln_keep, power),
            );
            assert!((a - b).abs() <= 1e-12 + 1e-9 * b, "{lambda}: {a} vs {b}");
        }
    }

    /// Every layout, empty, one bit short of full, and full: the estimate
    /// and the rate are finite, ordered, and right at the edges.
    #[test]
    fn estimates_at_the_edges() {
        for params in [
            Params::new(Layout::Classic, 4096, 7).unwrap(),
            Params::new(Layout::Blocked, 32 * 1024, 3).unwrap(),
            Params::new(Layout::Blocked, 1 << 20, 1).unwrap(),
            Params::new(Layout::SplitBlock, 1 << 16, 8).unwrap(),
            Params::new(Layout::Classic, MAX_BITS, 32).unwrap(),
        ] {
            let m = params.bits();
            let empty = params.estimate_items(0);
            assert_eq!(empty, 0.0, "{params:?}");
            assert!(empty.is_sign_positive());
            assert_eq!(params.false_positive_rate(empty), 0.0);
            let one = params.estimate_items(1);
            assert!(
                one > 0.0 && one < 1.0 + 1e-9 * m as f64,
                "{params:?}: {one}"
            );
            let short = params.estimate_items(m - 1);
            let full = params.estimate_items(m);
            assert!(short.is_finite() && full.is_finite(), "{params:?}");
            assert!(full > short && short > one, "{params:?}: {short} {full}");
            assert_eq!(params.estimate_items(m + 5), full, "beyond full is full");
            let (f_short, f_full) = (
                params.false_positive_rate(short),
                params.false_positive_rate(full),
            );
            assert!(f_short.is_finite() && f_full.is_finite());
            assert!((0.0..=1.0).contains(&f_short) && (0.0..=1.0).contains(&f_full));
            assert!(
                f_full >= f_short && f_full > 0.999,
                "{params:?}: {f_short} {f_full}"
            );
            assert_eq!(params.false_positive_rate(f64::INFINITY), 1.0);
            assert_eq!(params.false_positive_rate(f64::NAN), 0.0);
            assert_eq!(params.false_positive_rate(-3.0), 0.0);
            // Beyond any count a filter can hold: 1, at once.
            assert_eq!(params.false_positive_rate(1e300), 1.0, "{params:?}");
        }
    }

    #[test]
    fn oversized_sizing_fails_fast() {
        // Every candidate size is tried with every k; each try is bounded.
        for layout in [Layout::Blocked, Layout::SplitBlock, Layout::Classic] {
            assert_eq!(
                Params::for_items(layout, u64::MAX, 1e-6),
                Err(ParamError::TooLarge),
                "{layout:?}"
            );
        }
        assert!(Params::for_port_filter(u64::MAX, 0.001).is_err());
    }
}
