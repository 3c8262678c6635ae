//! Count-min over two metrics at once (for example bytes and packets per
//! flow): one cell holds both counters, so an update touches one cache
//! line per row instead of one per row and metric.
//!
//! A [`DualCountMin`] of `d` rows and `2^b` cells is, counter for counter,
//! two [`CountMin`](super::CountMin) sketches of the same shape and hasher
//! updated with the same keys, metric 0 in one and metric 1 in the other:
//! the cell of a key in row `r` is the same partitioned index
//! (`(h1 + r * (h2 | 1)) >> (32 - b)`), and conservative update raises each
//! metric's counters to that metric's own new minimum, independently. So
//! every guarantee of count-min with conservative update holds per metric,
//! and `tests/cms.rs` checks the equality against two `CountMin`s exactly.
//!
//! What it saves: the heavy-flow stage counts bytes and packets for every
//! packet. Two sketches of `d` rows cost `2d` counter lines per packet; the
//! dual sketch `d` lines, with the two minima and maxima taken on the two
//! halves of one 64-bit cell.

use super::row_index;
use crate::hash::{HashPair, Hasher};

/// Two counters per cell: metric 0 in the low half, metric 1 in the high.
type Cell = u64;

#[inline(always)]
fn lo(c: Cell) -> u32 {
    c as u32
}

#[inline(always)]
fn hi(c: Cell) -> u32 {
    (c >> 32) as u32
}

#[inline(always)]
fn cell(a: u32, b: u32) -> Cell {
    u64::from(a) | (u64::from(b) << 32)
}

/// Count-min with conservative update over two metrics per key; saturating
/// `u32` counters. See the [module docs](crate::cms::dual).
#[derive(Clone)]
pub struct DualCountMin {
    cells: Vec<Cell>,
    rows: usize,
    log2_width: u32,
    hasher: Hasher,
    est: Vec<[u32; 2]>,
}

impl std::fmt::Debug for DualCountMin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DualCountMin")
            .field("rows", &self.rows)
            .field("log2_width", &self.log2_width)
            .field("hasher", &self.hasher)
            .finish_non_exhaustive()
    }
}

impl DualCountMin {
    /// `rows` rows of `2^log2_width` cells (two counters each) hashed by
    /// `hasher`.
    ///
    /// # Panics
    /// If `rows` is not in `1..=`[`MAX_ROWS`](super::MAX_ROWS) or `log2_width` exceeds
    /// [`MAX_LOG2_WIDTH`](super::MAX_LOG2_WIDTH).
    pub fn with_hasher(rows: usize, log2_width: u32, hasher: Hasher) -> Self {
        let len = super::checked_len(rows, log2_width);
        DualCountMin {
            cells: vec![0; len],
            rows,
            log2_width,
            hasher,
            est: Vec::new(),
        }
    }

    /// Number of rows `d`.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// log2 of the row width.
    pub fn log2_width(&self) -> u32 {
        self.log2_width
    }

    /// The hasher (key and backend) the sketch uses.
    pub fn hasher(&self) -> &Hasher {
        &self.hasher
    }

    /// Bytes of counter memory, `8 * d * w`.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of_val(self.cells.as_slice())
    }

    /// Metric `m`'s counters (0 or 1; anything else reads as 1), row `r` at
    /// `[r * w .. (r + 1) * w]`.
    pub fn counters(&self, m: usize) -> impl Iterator<Item = u32> + '_ {
        self.cells
            .iter()
            .map(move |&c| if m == 0 { lo(c) } else { hi(c) })
    }

    /// Sets every counter to zero.
    pub fn reset(&mut self) {
        self.cells.fill(0);
    }

    /// Both estimates of `key` (hashed with the sketch's hasher).
    pub fn estimate<const W: usize>(&self, key: &[u32; W]) -> [u32; 2] {
        self.estimate_pair(self.hasher.hash_one(key))
    }

    /// Both estimates of the key whose [`HashPair`] is `p`.
    pub fn estimate_pair(&self, p: HashPair) -> [u32; 2] {
        let b = self.log2_width;
        let (mut m0, mut m1) = (u32::MAX, u32::MAX);
        for r in 0..self.rows {
            let c = self.cells[(r << b) + row_index(p, r, b)];
            m0 = m0.min(lo(c));
            m1 = m1.min(hi(c));
        }
        [m0, m1]
    }

    /// Conservative update of one `key` (hashed with the sketch's hasher):
    /// its metrics rise by `a` and `b`. Returns its estimates after.
    pub fn add_conservative<const W: usize>(&mut self, key: &[u32; W], a: u32, b: u32) -> [u32; 2] {
        self.add_conservative_pair(self.hasher.hash_one(key), a, b)
    }

    /// Conservative update of the key whose [`HashPair`] is `p` (from the
    /// sketch's hasher): its metrics rise by `a` and `b`. Returns its
    /// estimates after. The one-key form of
    /// [`add_conservative_pairs`](Self::add_conservative_pairs), for
    /// callers that decide per key whether to update at all (no batch
    /// buffers, inlined: the heavy-flow stage calls it for the packets its
    /// flow memory does not absorb).
    #[inline(always)]
    pub fn add_conservative_pair(&mut self, p: HashPair, a: u32, b: u32) -> [u32; 2] {
        let lb = self.log2_width;
        match self.rows {
            1 => update_one::<1>(&mut self.cells, lb, p, a, b),
            2 => update_one::<2>(&mut self.cells, lb, p, a, b),
            3 => update_one::<3>(&mut self.cells, lb, p, a, b),
            4 => update_one::<4>(&mut self.cells, lb, p, a, b),
            d => update_any(&mut self.cells, d, lb, p, a, b),
        }
    }

    /// Conservative update of every key given by its [`HashPair`] (from the
    /// sketch's hasher), in order: key `i`'s metrics rise by `a[i]` and
    /// `b[i]`. Returns each key's two estimates right after its own update.
    /// Keys repeated within the batch see the earlier updates, as single
    /// updates in order would.
    ///
    /// # Panics
    /// If `a` or `b` differ in length from `pairs`.
    pub fn add_conservative_pairs(
        &mut self,
        pairs: &[HashPair],
        a: &[u32],
        b: &[u32],
    ) -> &[[u32; 2]] {
        let n = pairs.len();
        assert!(
            a.len() == n && b.len() == n,
            "dual count-min: {} and {} values for {n} keys",
            a.len(),
            b.len()
        );
        if self.est.len() < n {
            self.est.resize(n, [0; 2]);
        }
        for (i, &p) in pairs.iter().enumerate() {
            self.est[i] = self.add_conservative_pair(p, a[i], b[i]);
        }
        &self.est[..n]
    }
}

/// One key's conservative update over a constant `D` rows.
#[inline(always)]
fn update_one<const D: usize>(
    cells: &mut [Cell],
    lb: u32,
    p: HashPair,
    a: u32,
    b: u32,
) -> [u32; 2] {
    let mask = (1usize << lb) - 1;
    let step = p.h2 | 1;
    let mut g = p.h1;
    let mut at = [0usize; D];
    for (r, x) in at.iter_mut().enumerate() {
        *x = (r << lb) | (((u64::from(g) << lb) >> 32) as usize & mask);
        g = g.wrapping_add(step);
    }
    let (mut m0, mut m1) = (u32::MAX, u32::MAX);
    for &i in &at {
        let x = cells.get(i).copied().unwrap_or(0);
        m0 = m0.min(lo(x));
        m1 = m1.min(hi(x));
    }
    let (n0, n1) = (m0.saturating_add(a), m1.saturating_add(b));
    for &i in &at {
        if let Some(x) = cells.get_mut(i) {
            *x = cell(lo(*x).max(n0), hi(*x).max(n1));
        }
    }
    [n0, n1]
}

/// One key's conservative update over any number of rows.
fn update_any(cells: &mut [Cell], d: usize, lb: u32, p: HashPair, a: u32, b: u32) -> [u32; 2] {
    let (mut m0, mut m1) = (u32::MAX, u32::MAX);
    for r in 0..d {
        let x = cells[(r << lb) + row_index(p, r, lb)];
        m0 = m0.min(lo(x));
        m1 = m1.min(hi(x));
    }
    let (n0, n1) = (m0.saturating_add(a), m1.saturating_add(b));
    for r in 0..d {
        let x = &mut cells[(r << lb) + row_index(p, r, lb)];
        *x = cell(lo(*x).max(n0), hi(*x).max(n1));
    }
    [n0, n1]
}
