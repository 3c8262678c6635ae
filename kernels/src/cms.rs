//! Count-min sketch with saturating `u32` counters, plain and conservative
//! update, batched forms that hash and prefetch a whole batch before touching
//! the counters, merge, reset and halving.
//!
//! # Layout
//!
//! `d` rows of `w = 2^b` counters in one contiguous `Vec<u32>`, row `r` at
//! offset `r * w`. A key's counter in row `r` is the partitioned index of
//! its [`HashPair`] (see [`crate::index`]: `(h1 + r * (h2 | 1)) >> (32 - b)`),
//! so one keyed hash per key gives all `d` positions.
//!
//! # Guarantees
//!
//! Counters saturate at `u32::MAX` and never wrap, so an estimate is never
//! below the true count (the sum of the values added for the key, saturated).
//! With width `w = e / epsilon` and `d = ln(1 / delta)` rows, the estimate of
//! plain count-min exceeds the true count by more than `epsilon * N` (`N` the
//! sum of all values added) with probability at most `delta` (Cormode and
//! Muthukrishnan, "An improved data stream summary: the count-min sketch and
//! its applications", 2005). Conservative update (Estan and Varghese, "New
//! directions in traffic measurement and accounting", 2002) never gives a
//! larger estimate than plain update on the same stream, so the bound holds
//! for it too.
//!
//! # Batches
//!
//! The batched methods hash every key of the batch with the hasher's SIMD
//! backend, derive all row indices, then walk the keys in order, prefetching
//! the counters of a key a few keys ahead. Scratch space lives in a
//! [`CmsScratch`] (one inside every [`CountMin`], grown to the largest batch
//! seen), so no batch allocates once the sizes have settled. Results equal
//! those of the single-key methods applied in batch order, duplicates of a
//! key within a batch included.
//!
//! The pairs-based methods ([`CountMin::add_conservative_pairs`],
//! [`CountMin::add_pairs`], [`CountMin::estimate_pairs`]) take the keys'
//! [`HashPair`]s instead of the keys, so several sketches built from one
//! [`Hasher`] (one key) can share one hash per key; each derives its own
//! row indices from the pair as it reads the counters.

use std::f64::consts::E;
use std::fmt;

use crate::hash::{HashPair, Hasher};
use crate::index::Partitioned;
use crate::prefetch;

pub mod dual;

pub use dual::DualCountMin;

/// The most rows a [`CountMin`] may have (`delta` down to `e^-32`, about
/// `1.3e-14`).
pub const MAX_ROWS: usize = 32;

/// The most bits of row width (`2^31` counters, 8 GiB per row).
pub const MAX_LOG2_WIDTH: u32 = 31;

/// How many keys ahead the batched loops prefetch a key's counters.
///
/// Measured on 4 rows of 2^16 and 2^18 counters (1 and 4 MiB, AVX2, Zen 4):
/// 4 keys ahead (16 lines in flight) beat 2, 8, 16 and 32; the out-of-order
/// core already overlaps the loads of neighbouring keys, so a longer
/// distance only adds cache pressure.
const PREFETCH_AHEAD: usize = 4;

/// Sketches with at most this many bytes of counters skip the prefetch in
/// the pairs-based updates ([`CountMin::add_conservative_pairs`],
/// [`CountMin::add_pairs`]): their counters stay in L2, which the
/// out-of-order core already overlaps, so the look-ahead (derive the
/// indices early, prefetch, keep them in a ring) only adds instructions.
/// Measured with callgrind on the heavy stage's former 48 + 16 KiB sketches
/// (batches of 32): 28 instructions per row update with the look-ahead, 17
/// without.
const PREFETCH_MIN_BYTES: usize = 256 << 10;

/// Why two sketches cannot be merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeError {
    /// The sketches have different numbers of rows or row widths.
    Shape {
        /// `(rows, log2_width)` of the sketch merged into.
        ours: (usize, u32),
        /// `(rows, log2_width)` of the other sketch.
        theirs: (usize, u32),
    },
    /// The sketches hash with different keys ([`crate::HashKey::id`]), so
    /// the same flow lands on different counters in each.
    HashKey {
        /// Key id of the sketch merged into.
        ours: u32,
        /// Key id of the other sketch.
        theirs: u32,
    },
}

impl fmt::Display for MergeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MergeError::Shape { ours, theirs } => write!(
                f,
                "cannot merge count-min sketches of different shapes: \
                 {} rows x 2^{} into {} rows x 2^{}",
                theirs.0, theirs.1, ours.0, ours.1
            ),
            MergeError::HashKey { ours, theirs } => write!(
                f,
                "cannot merge count-min sketches with different hash keys: \
                 key {theirs:#010x} into key {ours:#010x}"
            ),
        }
    }
}

impl std::error::Error for MergeError {}

/// Reusable buffers for the batched methods: the hash pairs, the row
/// indices (row-major, `idx[r * n + i]`) and the per-key estimates of one
/// batch. They grow to the largest batch seen and never shrink, so a
/// steady stream of batches allocates nothing.
///
/// Every [`CountMin`] holds one for its `&mut self` methods; pass your own
/// to [`CountMin::estimate_batch_with`] to query a shared sketch.
///
/// The indices are cache-line aligned: the index kernels write each row of
/// a batch as whole vectors, and from a 16-byte-aligned buffer every 64-byte
/// store would straddle two lines (measured on an Intel Xeon: 0.58 against
/// 0.42 ns per key for eight rows with AVX-512).
#[derive(Debug, Clone)]
pub struct CmsScratch {
    pairs: Vec<HashPair>,
    idx: LineAligned,
    est: Vec<u32>,
}

/// Indices in a cache-line-aligned buffer.
type LineAligned = aligned_vec::AVec<u32, aligned_vec::ConstAlign<64>>;

impl Default for CmsScratch {
    fn default() -> Self {
        CmsScratch {
            pairs: Vec::new(),
            // The alignment argument is ignored for a constant alignment.
            idx: LineAligned::new(0),
            est: Vec::new(),
        }
    }
}

impl CmsScratch {
    /// Empty buffers; the first batch sizes them.
    pub fn new() -> Self {
        CmsScratch::default()
    }

    /// Buffers already sized for batches of `keys` keys on `rows` rows.
    pub fn with_capacity(keys: usize, rows: usize) -> Self {
        let mut s = CmsScratch::default();
        s.reserve(keys, rows);
        s
    }

    /// Grows the buffers to hold a batch of `n` keys on `rows` rows.
    fn reserve(&mut self, n: usize, rows: usize) {
        if self.pairs.len() < n {
            self.pairs.resize(n, HashPair::default());
            self.est.resize(n, 0);
        }
        if self.idx.len() < n * rows {
            self.idx.resize(n * rows, 0);
        }
    }

    /// Hashes `keys` and derives their row indices into the buffers.
    fn index<const W: usize>(&mut self, hasher: &Hasher, layout: Partitioned, keys: &[[u32; W]]) {
        let n = keys.len();
        self.reserve(n, layout.rows());
        hasher.hash_batch(keys, &mut self.pairs[..n]);
        hasher.partitioned(&self.pairs[..n], layout, &mut self.idx[..n * layout.rows()]);
    }
}

/// A count-min sketch over keys `[u32; W]`: `d` rows of `w = 2^b`
/// saturating `u32` counters.
///
/// * Sizing: [`CountMin::with_error`] picks `w = e / epsilon` rounded up to
///   a power of two and `d = ceil(ln(1 / delta))`, so an estimate exceeds
///   the true count by more than `epsilon * N` with probability at most
///   `delta` (`N` the sum of all values added).
/// * Plain update ([`CountMin::add`]) adds the value to each of the key's
///   `d` counters; the estimate ([`CountMin::estimate`]) is their minimum.
/// * Conservative update ([`CountMin::add_conservative`]) raises each of the
///   key's counters to `max(counter, min + value)`, `min` the key's estimate
///   before the update: only the counters that would otherwise fall below
///   the new estimate move, which lowers the overestimate of small flows
///   (heavy-hitter false positives) without ever undercounting. Both
///   updates keep every counter of every key at or above its true count, so
///   they may be mixed on one sketch.
///
/// Hashing is keyed by the [`Hasher`]: sketches built with
/// [`Hasher::with_seed`] are reproducible, those from [`CountMin::new`] use
/// the per-process random key, so an outsider cannot aim flows at one
/// counter. Sketches merge only when their keys match.
///
/// ```
/// use kernels::Hasher;
/// use kernels::cms::CountMin;
///
/// // epsilon = 0.1%, delta = 1%: 5 rows of 4096 counters, 80 KiB.
/// let mut cms = CountMin::with_error(0.001, 0.01);
/// assert_eq!((cms.rows(), cms.width()), (5, 4096));
/// assert_eq!(cms.memory_bytes(), 5 * 4096 * 4);
///
/// // A reproducible sketch of 4 rows x 2^16 counters.
/// let mut cms = CountMin::with_hasher(4, 16, Hasher::with_seed(7));
/// let flow = [0x0a00_0001, 0x0a00_0002, (1234 << 16) | 80, 6];
/// cms.add_conservative(&flow, 1500);
/// assert_eq!(cms.estimate(&flow), 1500);
///
/// // Batches: hash all keys first, then update in order; the returned
/// // slice holds each key's estimate right after its update.
/// let keys = [flow, [1, 2, 3, 17], flow];
/// let est = cms.add_conservative_batch(&keys, &[40, 60, 40]);
/// assert_eq!(est, &[1540, 60, 1580]);
///
/// let mut out = [0; 3];
/// cms.estimate_batch(&keys, &mut out);
/// assert_eq!(out, [1580, 60, 1580]);
///
/// // Age the counts once per epoch.
/// cms.halve();
/// assert_eq!(cms.estimate(&flow), 790);
/// ```
#[derive(Clone)]
pub struct CountMin {
    /// `rows << log2_width` counters, row `r` at `r << log2_width`.
    counters: Vec<u32>,
    layout: Partitioned,
    hasher: Hasher,
    scratch: CmsScratch,
}

impl fmt::Debug for CountMin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CountMin")
            .field("rows", &self.rows())
            .field("log2_width", &self.log2_width())
            .field("hasher", &self.hasher)
            .finish_non_exhaustive()
    }
}

/// `rows << log2_width`, the counters (or cells) of a sketch of that shape.
///
/// # Panics
/// If `rows` is not in `1..=`[`MAX_ROWS`], `log2_width` exceeds
/// [`MAX_LOG2_WIDTH`], or the count overflows `usize`.
fn checked_len(rows: usize, log2_width: u32) -> usize {
    assert!(
        (1..=MAX_ROWS).contains(&rows),
        "count-min needs 1..={MAX_ROWS} rows, got {rows}"
    );
    assert!(
        log2_width <= MAX_LOG2_WIDTH,
        "count-min row width 2^{log2_width} exceeds 2^{MAX_LOG2_WIDTH}"
    );
    rows.checked_shl(log2_width)
        .filter(|&l| l >> log2_width == rows)
        .expect("count-min counters exceed the address space")
}

impl CountMin {
    /// `rows` rows of `2^log2_width` counters, hashed with the per-process
    /// random key ([`Hasher::new`]) on the active backend.
    ///
    /// # Panics
    /// If `rows` is not in `1..=`[`MAX_ROWS`] or `log2_width` exceeds
    /// [`MAX_LOG2_WIDTH`].
    pub fn new(rows: usize, log2_width: u32) -> Self {
        CountMin::with_hasher(rows, log2_width, Hasher::new())
    }

    /// `rows` rows of `2^log2_width` counters hashed by `hasher` (its key
    /// and backend): pass [`Hasher::with_seed`] for a reproducible sketch,
    /// or [`Hasher::on_backend`] to force a backend.
    ///
    /// # Panics
    /// If `rows` is not in `1..=`[`MAX_ROWS`] or `log2_width` exceeds
    /// [`MAX_LOG2_WIDTH`].
    pub fn with_hasher(rows: usize, log2_width: u32, hasher: Hasher) -> Self {
        let len = checked_len(rows, log2_width);
        CountMin {
            counters: vec![0; len],
            layout: Partitioned::new(rows, log2_width),
            hasher,
            scratch: CmsScratch::new(),
        }
    }

    /// A sketch sized for additive error `epsilon * N` with probability at
    /// least `1 - delta` (see [`CountMin::dimensions`]), on the per-process
    /// key.
    ///
    /// # Panics
    /// As [`CountMin::dimensions`].
    pub fn with_error(epsilon: f64, delta: f64) -> Self {
        let (rows, log2_width) = CountMin::dimensions(epsilon, delta);
        CountMin::new(rows, log2_width)
    }

    /// `(rows, log2_width)` for an additive error of at most `epsilon * N`
    /// with probability at least `1 - delta`: `w = e / epsilon` rounded up
    /// to a power of two, `d = ceil(ln(1 / delta))`. The memory is
    /// `4 * d * w` bytes: check it before building from untrusted settings.
    ///
    /// # Panics
    /// If `epsilon` is not in `(0, 1]`, `delta` is not in `(0, 1)`, or the
    /// sketch would exceed [`MAX_ROWS`] rows or `2^`[`MAX_LOG2_WIDTH`]
    /// counters per row.
    pub fn dimensions(epsilon: f64, delta: f64) -> (usize, u32) {
        assert!(
            epsilon > 0.0 && epsilon <= 1.0,
            "count-min epsilon must be in (0, 1], got {epsilon}"
        );
        assert!(
            delta > 0.0 && delta < 1.0,
            "count-min delta must be in (0, 1), got {delta}"
        );
        let width = (E / epsilon).ceil();
        assert!(
            width <= (1u64 << MAX_LOG2_WIDTH) as f64,
            "count-min epsilon {epsilon} needs more than 2^{MAX_LOG2_WIDTH} counters per row"
        );
        let log2_width = (width as u64).next_power_of_two().trailing_zeros();
        let rows = (1.0 / delta).ln().ceil().max(1.0);
        assert!(
            rows <= MAX_ROWS as f64,
            "count-min delta {delta} needs more than {MAX_ROWS} rows"
        );
        (rows as usize, log2_width)
    }

    /// Number of rows `d`.
    pub fn rows(&self) -> usize {
        self.layout.rows()
    }

    /// log2 of the row width.
    pub fn log2_width(&self) -> u32 {
        self.layout.log2_width()
    }

    /// Counters per row, `w = 2^log2_width`.
    pub fn width(&self) -> usize {
        1 << self.layout.log2_width()
    }

    /// The hasher (key and backend) the sketch uses.
    pub fn hasher(&self) -> &Hasher {
        &self.hasher
    }

    /// Bytes of counter memory, `4 * d * w` (the scratch buffers, at most a
    /// few KiB for the batch sizes the dataplane uses, are not counted).
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of_val(self.counters.as_slice())
    }

    /// All counters, row `r` at `[r * w .. (r + 1) * w]`.
    pub fn counters(&self) -> &[u32] {
        &self.counters
    }

    /// Flat counter offsets of `key`, one per row (the rare path: scalar
    /// hash, same indices as the batched backends).
    fn offsets<const W: usize>(&self, key: &[u32; W]) -> ([usize; MAX_ROWS], usize) {
        let pair = self.hasher.hash_one(key);
        let d = self.rows();
        let mut idx = [0u32; MAX_ROWS];
        crate::arch::scalar::partitioned(std::slice::from_ref(&pair), self.layout, &mut idx[..d]);
        let b = self.log2_width();
        let mut off = [0usize; MAX_ROWS];
        for (r, (o, &i)) in off.iter_mut().zip(&idx[..d]).enumerate() {
            *o = (r << b) + i as usize;
        }
        (off, d)
    }

    /// Plain update: adds `value` to each of `key`'s counters (saturating)
    /// and returns the key's estimate after the update.
    pub fn add<const W: usize>(&mut self, key: &[u32; W], value: u32) -> u32 {
        let (off, d) = self.offsets(key);
        let mut est = u32::MAX;
        for &o in &off[..d] {
            let c = &mut self.counters[o];
            *c = c.saturating_add(value);
            est = est.min(*c);
        }
        est
    }

    /// Conservative update: with `m` the key's estimate, raises each of its
    /// counters to `max(counter, m + value)` (saturating) and returns the
    /// new estimate `m + value`.
    pub fn add_conservative<const W: usize>(&mut self, key: &[u32; W], value: u32) -> u32 {
        let (off, d) = self.offsets(key);
        let m = off[..d]
            .iter()
            .fold(u32::MAX, |m, &o| m.min(self.counters[o]));
        let new = m.saturating_add(value);
        for &o in &off[..d] {
            let c = &mut self.counters[o];
            *c = (*c).max(new);
        }
        new
    }

    /// The estimate of `key`: the minimum of its counters. Never below the
    /// (saturated) sum of the values added for it.
    pub fn estimate<const W: usize>(&self, key: &[u32; W]) -> u32 {
        let (off, d) = self.offsets(key);
        off[..d]
            .iter()
            .fold(u32::MAX, |m, &o| m.min(self.counters[o]))
    }

    /// Plain update of every key in order: `values[i]` is added for
    /// `keys[i]`. Returns each key's estimate right after its own update
    /// (as [`CountMin::add`] would have returned), borrowed from the
    /// sketch's scratch.
    ///
    /// # Panics
    /// If `values` and `keys` differ in length.
    pub fn add_batch<const W: usize>(&mut self, keys: &[[u32; W]], values: &[u32]) -> &[u32] {
        self.update_batch::<W, false>(keys, values)
    }

    /// Conservative update of every key in order (see
    /// [`CountMin::add_conservative`]): the counters end exactly as if the
    /// single-key updates had run one after another, duplicates included.
    /// Returns each key's estimate right after its own update, borrowed from
    /// the sketch's scratch.
    ///
    /// # Panics
    /// If `values` and `keys` differ in length.
    pub fn add_conservative_batch<const W: usize>(
        &mut self,
        keys: &[[u32; W]],
        values: &[u32],
    ) -> &[u32] {
        self.update_batch::<W, true>(keys, values)
    }

    /// Estimates of every key into `out[..keys.len()]`, using the sketch's
    /// own scratch (see [`CountMin::estimate_batch_with`] for `&self`).
    ///
    /// # Panics
    /// If `out` is shorter than `keys`.
    pub fn estimate_batch<const W: usize>(&mut self, keys: &[[u32; W]], out: &mut [u32]) {
        let mut scratch = std::mem::take(&mut self.scratch);
        self.estimate_batch_with(&mut scratch, keys, out);
        self.scratch = scratch;
    }

    /// Estimates of every key into `out[..keys.len()]`, with caller-owned
    /// scratch so a shared sketch can be queried.
    ///
    /// # Panics
    /// If `out` is shorter than `keys`.
    pub fn estimate_batch_with<const W: usize>(
        &self,
        scratch: &mut CmsScratch,
        keys: &[[u32; W]],
        out: &mut [u32],
    ) {
        let n = keys.len();
        assert!(
            out.len() >= n,
            "estimate_batch: output holds {} estimates for {n} keys",
            out.len()
        );
        scratch.index(&self.hasher, self.layout, keys);
        let (d, b) = (self.rows(), self.log2_width());
        let (idx, out) = (&scratch.idx[..d * n], &mut out[..n]);
        let counters = &self.counters[..];
        match d {
            1 => estimate_fixed::<1>(counters, b, idx, out),
            2 => estimate_fixed::<2>(counters, b, idx, out),
            3 => estimate_fixed::<3>(counters, b, idx, out),
            4 => estimate_fixed::<4>(counters, b, idx, out),
            5 => estimate_fixed::<5>(counters, b, idx, out),
            6 => estimate_fixed::<6>(counters, b, idx, out),
            7 => estimate_fixed::<7>(counters, b, idx, out),
            8 => estimate_fixed::<8>(counters, b, idx, out),
            _ => estimate_any(counters, d, b, idx, out),
        }
    }

    /// The batched update; `CU` picks conservative over plain update.
    fn update_batch<const W: usize, const CU: bool>(
        &mut self,
        keys: &[[u32; W]],
        values: &[u32],
    ) -> &[u32] {
        let n = keys.len();
        assert_eq!(
            values.len(),
            n,
            "count-min batch: {} values for {n} keys",
            values.len()
        );
        self.scratch.index(&self.hasher, self.layout, keys);
        let (d, b) = (self.rows(), self.log2_width());
        let idx = &self.scratch.idx[..d * n];
        let est = &mut self.scratch.est[..n];
        let c = &mut self.counters[..];
        match d {
            1 => update_fixed::<1, CU>(c, b, idx, values, est),
            2 => update_fixed::<2, CU>(c, b, idx, values, est),
            3 => update_fixed::<3, CU>(c, b, idx, values, est),
            4 => update_fixed::<4, CU>(c, b, idx, values, est),
            5 => update_fixed::<5, CU>(c, b, idx, values, est),
            6 => update_fixed::<6, CU>(c, b, idx, values, est),
            7 => update_fixed::<7, CU>(c, b, idx, values, est),
            8 => update_fixed::<8, CU>(c, b, idx, values, est),
            _ => update_any::<CU>(c, d, b, idx, values, est),
        }
        &self.scratch.est[..n]
    }

    /// Conservative update of every key given by its [`HashPair`], in
    /// order: exactly [`CountMin::add_conservative_batch`] on the keys the
    /// pairs were hashed from, without hashing them again. Returns each
    /// key's estimate right after its own update, borrowed from the
    /// sketch's scratch.
    ///
    /// This is how several sketches share one hash per key: hash the batch
    /// once with [`Hasher::hash_batch`] and feed the same pairs to each of
    /// them. The row indices are derived from the pair at every sketch's
    /// own `(rows, width)`, so the shapes may differ, but the pairs must
    /// come from a hasher with this sketch's key (compare
    /// `hasher().key().id()`, or build the sketches from one seed or one
    /// [`Hasher`]); otherwise the counters disagree with the keyed methods
    /// ([`CountMin::estimate`], [`CountMin::merge`]) about where a key
    /// lives.
    ///
    /// ```
    /// use kernels::{HashPair, Hasher};
    /// use kernels::cms::CountMin;
    ///
    /// let h = Hasher::with_seed(7);
    /// let (mut bytes, mut packets) = (
    ///     CountMin::with_hasher(3, 12, h.clone()),
    ///     CountMin::with_hasher(2, 11, h.clone()),
    /// );
    /// let keys = [[10, 20, 30, 6], [11, 21, 31, 17], [10, 20, 30, 6]];
    /// let mut pairs = [HashPair::default(); 3];
    /// h.hash_batch(&keys, &mut pairs);
    /// assert_eq!(bytes.add_conservative_pairs(&pairs, &[64, 1500, 64]), &[64, 1500, 128]);
    /// assert_eq!(packets.add_conservative_pairs(&pairs, &[1; 3]), &[1, 1, 2]);
    /// assert_eq!(bytes.estimate(&keys[0]), 128);
    /// ```
    ///
    /// # Panics
    /// If `values` and `pairs` differ in length.
    pub fn add_conservative_pairs(&mut self, pairs: &[HashPair], values: &[u32]) -> &[u32] {
        self.update_pairs::<true>(pairs, values)
    }

    /// Plain update of every key given by its [`HashPair`], in order (see
    /// [`CountMin::add_conservative_pairs`] for where pairs come from).
    /// Returns each key's estimate right after its own update.
    ///
    /// # Panics
    /// If `values` and `pairs` differ in length.
    pub fn add_pairs(&mut self, pairs: &[HashPair], values: &[u32]) -> &[u32] {
        self.update_pairs::<false>(pairs, values)
    }

    /// Estimates of every key given by its [`HashPair`] into
    /// `out[..pairs.len()]` (see [`CountMin::add_conservative_pairs`] for
    /// where pairs come from). Needs no scratch: the row indices are
    /// derived as the counters are read.
    ///
    /// # Panics
    /// If `out` is shorter than `pairs`.
    pub fn estimate_pairs(&self, pairs: &[HashPair], out: &mut [u32]) {
        let n = pairs.len();
        assert!(
            out.len() >= n,
            "estimate_pairs: output holds {} estimates for {n} keys",
            out.len()
        );
        let (d, b) = (self.rows(), self.log2_width());
        let (c, out) = (&self.counters[..], &mut out[..n]);
        match d {
            1 => estimate_pairs_fixed::<1>(c, b, pairs, out),
            2 => estimate_pairs_fixed::<2>(c, b, pairs, out),
            3 => estimate_pairs_fixed::<3>(c, b, pairs, out),
            4 => estimate_pairs_fixed::<4>(c, b, pairs, out),
            _ => {
                for (o, &p) in out.iter_mut().zip(pairs) {
                    *o = (0..d).fold(u32::MAX, |m, r| m.min(c[(r << b) + row_index(p, r, b)]));
                }
            }
        }
    }

    /// The pairs-based update; `CU` picks conservative over plain update.
    fn update_pairs<const CU: bool>(&mut self, pairs: &[HashPair], values: &[u32]) -> &[u32] {
        let n = pairs.len();
        assert_eq!(
            values.len(),
            n,
            "count-min pairs: {} values for {n} keys",
            values.len()
        );
        if self.scratch.est.len() < n {
            self.scratch.est.resize(n, 0);
        }
        let (d, b) = (self.rows(), self.log2_width());
        let small = self.memory_bytes() <= PREFETCH_MIN_BYTES;
        let est = &mut self.scratch.est[..n];
        let c = &mut self.counters[..];
        match (d, small) {
            (1, _) => update_pairs_fixed::<1, CU, false>(c, b, pairs, values, est),
            (2, true) => update_pairs_fixed::<2, CU, false>(c, b, pairs, values, est),
            (2, false) => update_pairs_fixed::<2, CU, true>(c, b, pairs, values, est),
            (3, true) => update_pairs_fixed::<3, CU, false>(c, b, pairs, values, est),
            (3, false) => update_pairs_fixed::<3, CU, true>(c, b, pairs, values, est),
            (4, true) => update_pairs_fixed::<4, CU, false>(c, b, pairs, values, est),
            (4, false) => update_pairs_fixed::<4, CU, true>(c, b, pairs, values, est),
            _ => {
                // Rare shapes: index through the scalar reference, then the
                // flat kernel (the order of updates is the same).
                let mut idx = std::mem::replace(&mut self.scratch.idx, LineAligned::new(0));
                if idx.len() < n * d {
                    idx.resize(n * d, 0);
                }
                crate::arch::scalar::partitioned(pairs, self.layout, &mut idx[..n * d]);
                update_any::<CU>(c, d, b, &idx[..n * d], values, est);
                self.scratch.idx = idx;
            }
        }
        &self.scratch.est[..n]
    }

    /// Adds `other`'s counters into this sketch (saturating sum), as if this
    /// sketch had also seen `other`'s stream under plain update. Merging
    /// conservative-update sketches keeps the never-below guarantee (and
    /// the error bound of plain count-min) but not the tighter estimates.
    ///
    /// # Errors
    /// [`MergeError::Shape`] if the row counts or widths differ,
    /// [`MergeError::HashKey`] if the hash keys differ. The backends may
    /// differ: they produce the same indices.
    pub fn merge(&mut self, other: &CountMin) -> Result<(), MergeError> {
        let (ours, theirs) = (
            (self.rows(), self.log2_width()),
            (other.rows(), other.log2_width()),
        );
        if ours != theirs {
            return Err(MergeError::Shape { ours, theirs });
        }
        let (ours, theirs) = (self.hasher.key().id(), other.hasher.key().id());
        if ours != theirs {
            return Err(MergeError::HashKey { ours, theirs });
        }
        for (c, &o) in self.counters.iter_mut().zip(&other.counters) {
            *c = c.saturating_add(o);
        }
        Ok(())
    }

    /// Sets every counter to zero (the start of a new epoch).
    pub fn reset(&mut self) {
        self.counters.fill(0);
    }

    /// Halves every counter, rounding down (aging: old traffic weighs half
    /// per call). Estimates stay at or above the halved true counts
    /// (`floor(x / 2)` is monotone), rounded down.
    pub fn halve(&mut self) {
        for c in &mut self.counters {
            *c >>= 1;
        }
    }
}

// The batched kernels. Each walks the keys in batch order and prefetches
// the counters of the key `PREFETCH_AHEAD` places ahead. An update gathers
// the key's counters, takes their minimum, then raises (conservative update,
// `CU`) or adds, key by key, so a key repeated within a batch sees the
// earlier updates exactly as sequential single-key calls would.
//
// `*_fixed` take the row count as a constant `D` (1..=8, the sizes in use):
// the row loops unroll, each row is its own slice of `w` counters and each
// row's indices their own slice of `n`, and an index masked with `w - 1`
// is provably in bounds, so the loop body has no bounds checks. `*_any`
// serve any row count with plain loops over the flat array.

/// Prefetches the counters of key `i`, `D` rows.
#[inline(always)]
fn prefetch_fixed<const D: usize, R: AsRef<[u32]>>(rows: &[R; D], ix: &[&[u32]; D], i: usize) {
    for (row, ix) in rows.iter().zip(ix) {
        prefetch(row.as_ref(), ix[i] as usize);
    }
}

/// Batched estimates over a constant `D` rows.
#[inline(always)]
fn estimate_fixed<const D: usize>(counters: &[u32], b: u32, idx: &[u32], out: &mut [u32]) {
    let n = out.len();
    if n == 0 {
        return;
    }
    let mask = (1usize << b) - 1;
    let mut it = counters.chunks_exact(mask + 1);
    let rows: [&[u32]; D] = std::array::from_fn(|_| it.next().expect("count-min row"));
    let mut it = idx.chunks_exact(n);
    let ix: [&[u32]; D] = std::array::from_fn(|_| it.next().expect("row indices"));
    for i in 0..n.min(PREFETCH_AHEAD) {
        prefetch_fixed(&rows, &ix, i);
    }
    for (i, o) in out.iter_mut().enumerate() {
        if i + PREFETCH_AHEAD < n {
            prefetch_fixed(&rows, &ix, i + PREFETCH_AHEAD);
        }
        let mut m = u32::MAX;
        for r in 0..D {
            m = m.min(rows[r][ix[r][i] as usize & mask]);
        }
        *o = m;
    }
}

/// One key's update at offsets `o` of `D` rows: conservative (`CU`: raise
/// each counter to the minimum plus `v`) or plain (add `v` to each);
/// returns the new estimate.
#[inline(always)]
fn bump<const D: usize, const CU: bool>(rows: &mut [&mut [u32]; D], o: [usize; D], v: u32) -> u32 {
    if CU {
        let mut m = u32::MAX;
        for r in 0..D {
            m = m.min(rows[r][o[r]]);
        }
        let new = m.saturating_add(v);
        for r in 0..D {
            let c = &mut rows[r][o[r]];
            *c = (*c).max(new);
        }
        new
    } else {
        let mut m = u32::MAX;
        for r in 0..D {
            let c = &mut rows[r][o[r]];
            *c = c.saturating_add(v);
            m = m.min(*c);
        }
        m
    }
}

/// Batched update over a constant `D` rows.
#[inline(always)]
fn update_fixed<const D: usize, const CU: bool>(
    counters: &mut [u32],
    b: u32,
    idx: &[u32],
    values: &[u32],
    est: &mut [u32],
) {
    let n = values.len();
    if n == 0 {
        return;
    }
    let mask = (1usize << b) - 1;
    let mut it = counters.chunks_exact_mut(mask + 1);
    let mut rows: [&mut [u32]; D] = std::array::from_fn(|_| it.next().expect("count-min row"));
    let mut it = idx.chunks_exact(n);
    let ix: [&[u32]; D] = std::array::from_fn(|_| it.next().expect("row indices"));
    for i in 0..n.min(PREFETCH_AHEAD) {
        prefetch_fixed(&rows, &ix, i);
    }
    for (i, (e, &v)) in est.iter_mut().zip(values).enumerate() {
        if i + PREFETCH_AHEAD < n {
            prefetch_fixed(&rows, &ix, i + PREFETCH_AHEAD);
        }
        let o: [usize; D] = std::array::from_fn(|r| ix[r][i] as usize & mask);
        *e = bump::<D, CU>(&mut rows, o, v);
    }
}

/// Row `r`'s index of a key with hash pair `p` in rows of `2^b` counters:
/// the top `b` bits of `h1 + r * (h2 | 1)` (wrapping), 0 when `b = 0`; the
/// same as [`crate::index::partitioned`] on every backend.
#[inline(always)]
fn row_index(p: HashPair, r: usize, b: u32) -> usize {
    let g = p.h1.wrapping_add((r as u32).wrapping_mul(p.h2 | 1));
    ((u64::from(g) << b) >> 32) as usize
}

/// The `D` row indices of a key (see [`row_index`]), masked so the
/// compiler sees them inside a row of `mask + 1` counters.
#[inline(always)]
fn row_indices<const D: usize>(p: HashPair, b: u32, mask: usize) -> [usize; D] {
    let step = p.h2 | 1;
    let mut g = p.h1;
    std::array::from_fn(|_| {
        let i = ((u64::from(g) << b) >> 32) as usize & mask;
        g = g.wrapping_add(step);
        i
    })
}

/// Batched estimates from hash pairs over a constant `D` rows: each key's
/// indices are derived `PREFETCH_AHEAD` keys early, prefetched, and kept
/// in a small ring until the key is read.
#[inline(always)]
fn estimate_pairs_fixed<const D: usize>(
    counters: &[u32],
    b: u32,
    pairs: &[HashPair],
    out: &mut [u32],
) {
    let n = out.len();
    if n == 0 {
        return;
    }
    let mask = (1usize << b) - 1;
    let mut it = counters.chunks_exact(mask + 1);
    let rows: [&[u32]; D] = std::array::from_fn(|_| it.next().expect("count-min row"));
    let mut ring = [[0usize; D]; PREFETCH_AHEAD];
    for (i, &p) in pairs.iter().enumerate().take(PREFETCH_AHEAD) {
        ring[i] = row_indices::<D>(p, b, mask);
        for r in 0..D {
            prefetch(rows[r], ring[i][r]);
        }
    }
    for (i, o) in out.iter_mut().enumerate() {
        let at = ring[i % PREFETCH_AHEAD];
        if let Some(&p) = pairs.get(i + PREFETCH_AHEAD) {
            let next = row_indices::<D>(p, b, mask);
            for r in 0..D {
                prefetch(rows[r], next[r]);
            }
            ring[i % PREFETCH_AHEAD] = next;
        }
        let mut m = u32::MAX;
        for r in 0..D {
            m = m.min(rows[r][at[r]]);
        }
        *o = m;
    }
}

/// Batched update from hash pairs over a constant `D` rows (indices as in
/// [`estimate_pairs_fixed`]). With `PF`, each key's indices are derived
/// `PREFETCH_AHEAD` keys early, prefetched and kept in a small ring;
/// without (sketches that stay in cache), they are derived as the key is
/// updated.
#[inline(always)]
fn update_pairs_fixed<const D: usize, const CU: bool, const PF: bool>(
    counters: &mut [u32],
    b: u32,
    pairs: &[HashPair],
    values: &[u32],
    est: &mut [u32],
) {
    let n = values.len();
    if n == 0 {
        return;
    }
    let mask = (1usize << b) - 1;
    let mut it = counters.chunks_exact_mut(mask + 1);
    let mut rows: [&mut [u32]; D] = std::array::from_fn(|_| it.next().expect("count-min row"));
    let mut ring = [[0usize; D]; PREFETCH_AHEAD];
    if PF {
        for (i, &p) in pairs.iter().enumerate().take(PREFETCH_AHEAD) {
            ring[i] = row_indices::<D>(p, b, mask);
            for r in 0..D {
                prefetch(rows[r], ring[i][r]);
            }
        }
    }
    for (i, ((e, &v), &p)) in est.iter_mut().zip(values).zip(pairs).enumerate() {
        let o = if PF {
            let o = ring[i % PREFETCH_AHEAD];
            if let Some(&p) = pairs.get(i + PREFETCH_AHEAD) {
                let next = row_indices::<D>(p, b, mask);
                for r in 0..D {
                    prefetch(rows[r], next[r]);
                }
                ring[i % PREFETCH_AHEAD] = next;
            }
            o
        } else {
            row_indices::<D>(p, b, mask)
        };
        *e = bump::<D, CU>(&mut rows, o, v);
    }
}

/// Prefetches the `d` counters of key `i` in the flat layout.
#[inline(always)]
fn prefetch_any(counters: &[u32], d: usize, b: u32, idx: &[u32], n: usize, i: usize) {
    for r in 0..d {
        prefetch(counters, (r << b) + idx[r * n + i] as usize);
    }
}

/// Batched estimates over any number of rows.
fn estimate_any(counters: &[u32], d: usize, b: u32, idx: &[u32], out: &mut [u32]) {
    let n = out.len();
    for i in 0..n.min(PREFETCH_AHEAD) {
        prefetch_any(counters, d, b, idx, n, i);
    }
    for (i, o) in out.iter_mut().enumerate() {
        if i + PREFETCH_AHEAD < n {
            prefetch_any(counters, d, b, idx, n, i + PREFETCH_AHEAD);
        }
        *o = (0..d).fold(u32::MAX, |m, r| {
            m.min(counters[(r << b) + idx[r * n + i] as usize])
        });
    }
}

/// Batched update over any number of rows.
fn update_any<const CU: bool>(
    counters: &mut [u32],
    d: usize,
    b: u32,
    idx: &[u32],
    values: &[u32],
    est: &mut [u32],
) {
    let n = values.len();
    for i in 0..n.min(PREFETCH_AHEAD) {
        prefetch_any(counters, d, b, idx, n, i);
    }
    for (i, (e, &v)) in est.iter_mut().zip(values).enumerate() {
        if i + PREFETCH_AHEAD < n {
            prefetch_any(counters, d, b, idx, n, i + PREFETCH_AHEAD);
        }
        let at = |r: usize| (r << b) + idx[r * n + i] as usize;
        if CU {
            let m = (0..d).fold(u32::MAX, |m, r| m.min(counters[at(r)]));
            let new = m.saturating_add(v);
            for r in 0..d {
                let c = &mut counters[at(r)];
                *c = (*c).max(new);
            }
            *e = new;
        } else {
            let mut m = u32::MAX;
            for r in 0..d {
                let c = &mut counters[at(r)];
                *c = c.saturating_add(v);
                m = m.min(*c);
            }
            *e = m;
        }
    }
}
