//! The ring of time windows: one Bloom filter of digests per window, a
//! bounded number of windows, the oldest reused when a new one opens.
//!
//! A window opens at `now` and closes when [`DigestConfig::window_ns`] has
//! passed and it holds a digest, or early, as soon as it holds its
//! capacity ([`Geometry::capacity`]): the number of digests at which its
//! filter's false-positive rate reaches the configured one. A flood thus
//! shortens the history the ring covers, never raises the rate of an
//! answer past the configured one (closing early is counted,
//! [`RingCounters::early`]). A window that receives nothing stays open
//! (its range grows over the idle time, and it answers "not seen" there
//! with probability 1) until a packet comes after its length has passed;
//! so every instant from the oldest window's opening to now is in exactly
//! one window's range, and the ring's memory is its windows' filters
//! whatever the traffic.
//!
//! Filters use the kernels' split-block layout (eight bits in one 32-byte
//! block per digest; a batch is hashed, its blocks prefetched, then set).
//! Every window's filter is allocated (and written, so its pages are
//! mapped) when the ring is built: the ring's memory is what the
//! configuration says from the start, and a window that opens only clears
//! the filter of the one it reuses, never allocates.

use kernels::bloom::{Bloom, Layout, ParamError, Params, SPLIT_BLOCK_BITS, SPLIT_BLOCK_K};
use kernels::{HashPair, Hasher};

use super::key::{Invariant, V4_WORDS, V6_WORDS};
use crate::clock::Timestamp;

/// The most windows a ring keeps.
pub const MAX_WINDOWS: usize = 1 << 16;

/// How a window's filter is sized.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sizing {
    /// The false-positive rate of a window holding its capacity.
    FalsePositiveRate(f64),
    /// Bits of filter per digest at the expected load.
    BitsPerPacket(f64),
}

/// One worker's digest settings (`[digest]` in router.toml, with the
/// expected load divided among the workers).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DigestConfig {
    /// Window length, ns.
    pub window_ns: u64,
    /// Windows kept (the history is about `windows x window_ns`).
    pub windows: usize,
    /// Digests a window is expected to hold (packets per second x window
    /// length, for this worker).
    pub expected: u64,
    /// How the filters are sized for that load.
    pub sizing: Sizing,
    /// Hash seed; `None`: the process's random key (a ring kept on disk
    /// needs a seed, [`super::store`]).
    pub seed: Option<u64>,
}

/// A window's filter geometry and capacity, from a [`DigestConfig`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Geometry {
    /// The filter (split block, power-of-two blocks).
    pub params: Params,
    /// Digests a window holds before it closes early.
    pub capacity: u64,
    /// The false-positive rate of a test against a window holding its
    /// capacity (the formula of the split-block layout).
    pub design_fpr: f64,
}

impl Geometry {
    /// Bytes of one window's filter.
    pub fn filter_bytes(&self) -> u64 {
        self.params.bits() / 8
    }

    /// The false-positive rate of a test against a window holding
    /// `digests` digests.
    pub fn fpr(&self, digests: u64) -> f64 {
        self.params.false_positive_rate(digests as f64)
    }
}

impl DigestConfig {
    /// The window geometry: the filter sized for [`DigestConfig::expected`]
    /// digests by [`DigestConfig::sizing`], rounded up to a power of two of
    /// blocks, and the capacity that rounding leaves: with a rate, the most
    /// digests at which the formula stays within it; with bits per packet,
    /// the filter's bits over that figure.
    ///
    /// # Errors
    /// No digests expected, a rate outside (0, 1), bits per packet that are
    /// not positive, or a filter over the kernels' largest (2^32 bits).
    pub fn geometry(&self) -> Result<Geometry, ParamError> {
        let n = self.expected.max(1);
        match self.sizing {
            Sizing::FalsePositiveRate(p) => {
                let params = Params::for_items(Layout::SplitBlock, n, p)?;
                // The largest load within `p`: the formula rises with the
                // load, so bisect between n (within) and the bits (not).
                let (mut lo, mut hi) = (n, params.bits());
                while hi - lo > 1 {
                    let mid = lo + (hi - lo) / 2;
                    if params.false_positive_rate(mid as f64) <= p {
                        lo = mid;
                    } else {
                        hi = mid;
                    }
                }
                Ok(Geometry {
                    params,
                    capacity: lo,
                    design_fpr: params.false_positive_rate(lo as f64),
                })
            }
            Sizing::BitsPerPacket(b) => {
                if !(b.is_finite() && b > 0.0) {
                    return Err(ParamError::Rate(b));
                }
                let want = (n as f64 * b).ceil();
                if want > kernels::bloom::MAX_BITS as f64 {
                    return Err(ParamError::TooLarge);
                }
                let bits = (want as u64).max(SPLIT_BLOCK_BITS).next_power_of_two();
                let params = Params::new(Layout::SplitBlock, bits, SPLIT_BLOCK_K)?;
                let capacity = ((bits as f64 / b).floor() as u64).max(1);
                Ok(Geometry {
                    params,
                    capacity,
                    design_fpr: params.false_positive_rate(capacity as f64),
                })
            }
        }
    }
}

/// What is known of a window: its id, its range and its load. Times are
/// the ring's clock (ns): capture time on replay, monotonic time live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowMeta {
    /// Windows are numbered from 0 in the order they open.
    pub id: u64,
    /// When it opened.
    pub opened_ns: u64,
    /// When it closed; `None` while it is the current one.
    pub closed_ns: Option<u64>,
    /// The earliest and latest arrival time of a packet recorded in it
    /// (a capture's times may go back a little).
    pub first_ns: Option<u64>,
    /// See [`WindowMeta::first_ns`].
    pub last_ns: Option<u64>,
    /// Digests recorded in it.
    pub digests: u64,
    /// It closed because it held its capacity.
    pub early: bool,
}

impl WindowMeta {
    fn new(id: u64, now: u64) -> Self {
        WindowMeta {
            id,
            opened_ns: now,
            closed_ns: None,
            first_ns: None,
            last_ns: None,
            digests: 0,
            early: false,
        }
    }

    /// The times it covers: from its opening (or an earlier packet) to its
    /// closing (or a later packet; open-ended while current).
    pub fn range(&self) -> (u64, u64) {
        let lo = self
            .first_ns
            .map_or(self.opened_ns, |f| f.min(self.opened_ns));
        let hi = self
            .closed_ns
            .map_or(u64::MAX, |c| self.last_ns.map_or(c, |l| l.max(c)));
        (lo, hi)
    }

    /// Whether its range meets `[from, to]`.
    pub fn overlaps(&self, from: u64, to: u64) -> bool {
        let (lo, hi) = self.range();
        lo <= to && from <= hi
    }
}

/// A ring's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingCounters {
    /// Digests recorded.
    pub recorded: u64,
    /// Windows closed.
    pub closed: u64,
    /// Of those, closed early (full).
    pub early: u64,
}

/// One window's answer to a probe.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowProbe {
    /// The window.
    pub meta: WindowMeta,
    /// The false-positive rate of one port's test against it (its load).
    pub fpr: f64,
    /// The ports (bit `p`: port `p`) whose key it holds.
    pub ports: u64,
}

/// A ring of windows (see the module docs).
#[derive(Debug, Clone)]
pub struct Ring {
    window_ns: u64,
    geometry: Geometry,
    seed: Option<u64>,
    /// Slot `i`'s window (`None`: never used).
    metas: Vec<Option<WindowMeta>>,
    /// Slot `i`'s filter.
    filters: Vec<Bloom>,
    current: usize,
    next_id: u64,
    counters: RingCounters,
}

impl Ring {
    /// An empty ring (no filter allocated yet).
    ///
    /// # Errors
    /// As [`DigestConfig::geometry`].
    pub fn new(cfg: &DigestConfig) -> Result<Ring, ParamError> {
        let geometry = cfg.geometry()?;
        let hasher = cfg.seed.map_or_else(Hasher::new, Hasher::with_seed);
        let n = cfg.windows.clamp(1, MAX_WINDOWS);
        Ok(Ring {
            window_ns: cfg.window_ns.max(1),
            geometry,
            seed: cfg.seed,
            filters: (0..n)
                .map(|_| Bloom::new(geometry.params, hasher.clone()))
                .collect(),
            metas: vec![None; n],
            current: 0,
            next_id: 0,
            counters: RingCounters::default(),
        })
    }

    /// A ring of kept windows (oldest first), as [`super::store`] reads
    /// them: no window is current; probes only.
    pub(crate) fn restore(
        window_ns: u64,
        geometry: Geometry,
        seed: u64,
        windows: Vec<(WindowMeta, Bloom)>,
    ) -> Ring {
        let n = windows.len();
        let next_id = windows.last().map_or(0, |(m, _)| m.id + 1);
        let hasher = Hasher::with_seed(seed);
        let (mut metas, mut filters): (Vec<_>, Vec<_>) =
            windows.into_iter().map(|(m, b)| (Some(m), b)).unzip();
        if metas.is_empty() {
            metas.push(None);
            filters.push(Bloom::new(geometry.params, hasher.clone()));
        }
        Ring {
            window_ns,
            geometry,
            seed: Some(seed),
            metas,
            filters,
            current: n.saturating_sub(1),
            next_id,
            counters: RingCounters::default(),
        }
    }

    /// The window length, ns.
    pub fn window_ns(&self) -> u64 {
        self.window_ns
    }

    /// The windows' geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// The hash seed, when one was set.
    pub fn seed(&self) -> Option<u64> {
        self.seed
    }

    /// Windows kept at most.
    pub fn capacity_windows(&self) -> usize {
        self.metas.len()
    }

    /// The counters.
    pub fn counters(&self) -> RingCounters {
        self.counters
    }

    /// Bytes of the filters (windows x filter bytes, from the start).
    pub fn memory_bytes(&self) -> u64 {
        self.filters.len() as u64 * self.geometry.filter_bytes()
    }

    /// The windows kept, oldest first.
    pub fn windows(&self) -> impl Iterator<Item = (&WindowMeta, &Bloom)> {
        let n = self.metas.len();
        (1..=n)
            .map(move |i| (self.current + i) % n)
            .filter_map(|i| self.metas[i].as_ref().zip(self.filters.get(i)))
    }

    /// Opens a window at `now` in the next slot (the first, or the oldest
    /// reused and cleared); closes the current one first, early when it is
    /// full.
    fn roll(&mut self, now: u64, early: bool) {
        if let Some(m) = &mut self.metas[self.current] {
            m.closed_ns = Some(now);
            m.early = early;
            self.counters.closed += 1;
            self.counters.early += u64::from(early);
            self.current = (self.current + 1) % self.metas.len();
        }
        if self.metas[self.current].is_some() {
            self.filters[self.current].clear();
        }
        self.metas[self.current] = Some(WindowMeta::new(self.next_id, now));
        self.next_id += 1;
    }

    /// Closes the current window when its time has passed: on a tick
    /// (`inserting` false) only if it holds a digest, before an insert
    /// always (an idle window closes when traffic returns). Opens the
    /// first window.
    fn advance(&mut self, now: u64, inserting: bool) {
        match &self.metas[self.current] {
            None => self.roll(now, false),
            Some(m) => {
                let due = now >= m.opened_ns.saturating_add(self.window_ns);
                if due && (inserting || m.digests > 0) {
                    self.roll(now, false);
                }
            }
        }
    }

    /// The time-driven work at `now`: the current window closed when due.
    pub fn tick(&mut self, now: Timestamp) {
        self.advance(now.as_nanos(), false);
    }

    /// Records digests at `now`: the IPv4 keys `k4` and IPv6 keys `k6`
    /// (ports folded in) of packets that arrived between `first` and
    /// `last`. A window that fills closes and the rest go into the next.
    pub fn record(
        &mut self,
        now: Timestamp,
        span: (Timestamp, Timestamp),
        k4: &[[u32; V4_WORDS]],
        k6: &[[u32; V6_WORDS]],
    ) {
        let hasher = self.hasher();
        let mut pairs = vec![HashPair::default(); k4.len() + k6.len()];
        hasher.hash_batch(k4, &mut pairs[..k4.len()]);
        hasher.hash_batch(k6, &mut pairs[k4.len()..]);
        self.record_pairs(now, span, &pairs);
    }

    /// The hasher of the ring's filters (every key's pair for
    /// [`Ring::record_pairs`]).
    pub fn hasher(&self) -> Hasher {
        self.filters
            .first()
            .map_or_else(Hasher::new, |f| f.hasher().clone())
    }

    /// [`Ring::record`] of keys already hashed with [`Ring::hasher`].
    pub fn record_pairs(
        &mut self,
        now: Timestamp,
        (first, last): (Timestamp, Timestamp),
        mut pairs: &[HashPair],
    ) {
        let now = now.as_nanos();
        self.advance(now, !pairs.is_empty());
        let cap = self.geometry.capacity;
        while !pairs.is_empty() {
            let (Some(m), Some(bloom)) = (
                self.metas[self.current].as_mut(),
                self.filters.get_mut(self.current),
            ) else {
                self.roll(now, false);
                continue;
            };
            let room = cap.saturating_sub(m.digests);
            if room == 0 {
                self.roll(now, true);
                continue;
            }
            let take = pairs.len().min(usize::try_from(room).unwrap_or(usize::MAX));
            bloom.insert_pairs(&pairs[..take]);
            pairs = &pairs[take..];
            let n = take as u64;
            m.digests += n;
            m.first_ns = Some(
                m.first_ns
                    .map_or(first.as_nanos(), |f| f.min(first.as_nanos())),
            );
            m.last_ns = Some(
                m.last_ns
                    .map_or(last.as_nanos(), |l| l.max(last.as_nanos())),
            );
            self.counters.recorded += n;
        }
    }

    /// Tests `key` with each port `0..ports` folded in against every
    /// window whose range meets `range` (every window when `None`), oldest
    /// first.
    pub fn probe(&self, key: Invariant, ports: u8, range: Option<(u64, u64)>) -> Vec<WindowProbe> {
        let ports = ports.min(64);
        let mut out = Vec::new();
        let mut hit = [false; 64];
        for (meta, bloom) in self.windows() {
            if let Some((from, to)) = range
                && !meta.overlaps(from, to)
            {
                continue;
            }
            let hits = &mut hit[..usize::from(ports)];
            match key {
                Invariant::V4(_) => {
                    let keys: Vec<[u32; V4_WORDS]> = (0..ports)
                        .map(|p| match key.with_port(p) {
                            Invariant::V4(w) => w,
                            Invariant::V6(_) => unreachable!("with_port keeps the family"),
                        })
                        .collect();
                    bloom.contains_batch(&keys, hits);
                }
                Invariant::V6(_) => {
                    let keys: Vec<[u32; V6_WORDS]> = (0..ports)
                        .map(|p| match key.with_port(p) {
                            Invariant::V6(w) => w,
                            Invariant::V4(_) => unreachable!("with_port keeps the family"),
                        })
                        .collect();
                    bloom.contains_batch(&keys, hits);
                }
            }
            let mask = hits
                .iter()
                .enumerate()
                .fold(0u64, |m, (i, &h)| m | (u64::from(h) << i));
            out.push(WindowProbe {
                meta: *meta,
                fpr: self.geometry.fpr(meta.digests),
                ports: mask,
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(expected: u64, windows: usize) -> DigestConfig {
        DigestConfig {
            window_ns: 1_000,
            windows,
            expected,
            sizing: Sizing::FalsePositiveRate(0.01),
            seed: Some(7),
        }
    }

    fn key(i: u32) -> [u32; V4_WORDS] {
        [
            17 << 16 | 8,
            i,
            0x0a00_0001,
            0x0a00_0002,
            i.wrapping_mul(31),
            0,
        ]
    }

    fn t(ns: u64) -> Timestamp {
        Timestamp::from_nanos(ns)
    }

    /// The capacity is the most digests within the rate, at least the
    /// expected load; one more would pass the rate.
    #[test]
    fn geometry_uses_the_rounding_as_capacity() {
        for n in [1u64, 100, 1000, 4096, 100_000] {
            for p in [0.1, 0.01, 1e-4, 1e-6] {
                let c = DigestConfig {
                    sizing: Sizing::FalsePositiveRate(p),
                    ..cfg(n, 2)
                };
                let g = c.geometry().unwrap();
                assert!(g.capacity >= n, "{n} {p}: {g:?}");
                assert!(
                    g.design_fpr <= p && g.fpr(g.capacity + 1) > p,
                    "{n} {p}: {g:?}"
                );
            }
            let b = DigestConfig {
                sizing: Sizing::BitsPerPacket(16.0),
                ..cfg(n, 2)
            }
            .geometry()
            .unwrap();
            assert!(
                b.capacity >= n && b.params.bits() / b.capacity >= 16,
                "{b:?}"
            );
        }
    }

    /// Memory per Gbit/s and per second of history at full windows: the
    /// bits a window takes per digest it holds, for the rates of the
    /// documentation's table (printed for docs/BENCHMARKS.md), within 3%
    /// of the split-block formula's optimum for a large window.
    #[test]
    fn memory_per_gbit_and_second() {
        // Packets per second in one Gbit/s: 64-byte frames, simple IMIX
        // (7 x 64, 4 x 594, 1 x 1518: 353.8 bytes), 1500-byte frames, each
        // with 20 bytes of preamble and gap.
        let loads = [("64 B", 84.0), ("IMIX", 373.83), ("1500 B", 1538.0)];
        for (p, bits) in [(0.01, 10.53), (0.001, 16.89), (1e-4, 26.34), (1e-6, 64.66)] {
            let g = DigestConfig {
                sizing: Sizing::FalsePositiveRate(p),
                ..cfg(3_000_000, 2)
            }
            .geometry()
            .unwrap();
            let per = g.params.bits() as f64 / g.capacity as f64;
            assert!(
                (per / bits - 1.0).abs() < 0.03,
                "{p}: {per} bits per packet"
            );
            let mib: Vec<String> = loads
                .iter()
                .map(|(name, bytes)| {
                    let pps = 1e9 / (bytes * 8.0);
                    format!("{name} {:.2} MiB", pps * per / 8.0 / f64::from(1u32 << 20))
                })
                .collect();
            println!(
                "rate {p}: {per:.2} bits per packet; per Gbit/s and second: {}",
                mib.join(", ")
            );
        }
    }

    /// Windows close on time (only once they hold something), early when
    /// full, and the oldest is reused; no digest recorded is lost from a
    /// window still kept.
    #[test]
    fn windows_roll_on_time_and_when_full() {
        let c = cfg(100, 4);
        let mut r = Ring::new(&c).unwrap();
        let cap = r.geometry().capacity;
        r.tick(t(0));
        r.tick(t(5_000)); // empty: stays open
        assert_eq!(r.counters().closed, 0);
        r.record(t(5_000), (t(5_000), t(5_000)), &[key(1)], &[]);
        // The idle window closed, the digest is in a new one.
        assert_eq!(r.counters().closed, 1);
        let w: Vec<_> = r.windows().map(|(m, _)| *m).collect();
        assert_eq!(w.len(), 2);
        assert_eq!((w[0].digests, w[0].range()), (0, (0, 5_000)));
        assert_eq!((w[1].id, w[1].digests, w[1].opened_ns), (1, 1, 5_000));
        // Full: closes early, the rest in the next window.
        let keys: Vec<_> = (2..2 + cap as u32).map(key).collect();
        r.record(t(5_100), (t(5_100), t(5_100)), &keys, &[]);
        assert_eq!(r.counters().early, 1);
        let w: Vec<_> = r.windows().map(|(m, _)| *m).collect();
        assert_eq!(w.len(), 3);
        assert!(w[1].early && w[1].digests == cap);
        assert_eq!(w[2].digests, 1);
        assert_eq!(r.counters().recorded, cap + 1);
        // On time, then the ring wraps: four windows at most.
        for i in 0..6u64 {
            let now = 7_000 + i * 1_000;
            r.record(t(now), (t(now), t(now)), &[key(100 + i as u32)], &[]);
        }
        let ids: Vec<u64> = r.windows().map(|(m, _)| m.id).collect();
        assert_eq!(ids.len(), 4);
        assert!(ids.windows(2).all(|p| p[1] == p[0] + 1), "{ids:?}");
        assert_eq!(r.memory_bytes(), 4 * r.geometry().filter_bytes());
        // The last four digests are each found in their window only.
        for (i, (m, b)) in r.windows().enumerate() {
            assert_eq!(m.digests, 1);
            assert!(b.contains(&key(102 + i as u32)));
        }
    }

    /// A probe names the port folded in, searches only the windows that
    /// meet the range, and states each window's rate at its load.
    #[test]
    fn probes_find_the_port_in_their_window() {
        let mut r = Ring::new(&cfg(1000, 8)).unwrap();
        let k = Invariant::V4(key(9)).with_port(3);
        let Invariant::V4(w) = k else { unreachable!() };
        r.record(t(100), (t(90), t(100)), &[w], &[]);
        r.record(t(2_000), (t(2_000), t(2_000)), &[key(10)], &[]);
        let all = r.probe(Invariant::V4(key(9)), 8, None);
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].ports, 1 << 3);
        assert_eq!(all[1].ports, 0);
        assert_eq!(all[0].fpr, r.geometry().fpr(1));
        let early = r.probe(Invariant::V4(key(9)), 8, Some((0, 500)));
        assert_eq!(early.len(), 1);
        assert_eq!(early[0].meta.id, 0);
        assert!(
            r.probe(Invariant::V4(key(9)), 8, Some((5_000, 6_000)))
                .len()
                == 1
        );
    }
}
