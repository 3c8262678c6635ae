//! SFB's settings ([`SfbConfig`]): the kernel's defaults, how bins are
//! indexed ([`BinIndex`]), validation that names the bad key, and `tc`-style
//! display.

use core::fmt;

use serde::Deserialize;

use super::rate::{MAX_RATE_LOG2_BINS, MAX_RATE_ROWS};

/// Probability 1 in Q0.16 (65535/65536, as in the kernel).
pub const SFB_MAX_PROB: u16 = 0xFFFF;

/// The most levels (`L`).
pub const MAX_LEVELS: usize = 16;

/// The largest `log2 N`. Besides, `L log2 N <= 64`: a flow's bin indices
/// are packed in one `u64` per set.
pub const MAX_LOG2_BINS: u32 = 16;

/// How a flow's hash pair becomes its `L` bin indices (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BinIndex {
    /// Independent bit fields of the pair `h2:h1`.
    #[default]
    Slices,
    /// The kernels' partitioned (double-hashing) indices; levels correlate.
    Partitioned,
}

/// A named set of defaults for the keys a file leaves out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SfbProfile {
    /// Linux's `sch_sfb` with the fair-share rate check in front (the
    /// default): Blue keeps the queue short, the check holds every flow to
    /// its max-min fair share (see [`FairRate`](super::FairRate)).
    #[default]
    Fair,
    /// Linux's `sch_sfb` as it is: no fair-share check (`rate_rows = 0`).
    Linux,
}

/// A probability in Q0.16: an integer as it is (0..=65535), a float in
/// `[0, 1]` scaled (tc's `increment 0.0005`).
fn probability<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u16, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum P {
        Units(u64),
        Probability(f64),
    }
    match P::deserialize(d)? {
        P::Units(u) => u16::try_from(u).map_err(|_| {
            serde::de::Error::custom(format!(
                "{u} is above {SFB_MAX_PROB} (Q0.16 units; write a probability with a point, e.g. 0.0005)"
            ))
        }),
        P::Probability(p) if (0.0..=1.0).contains(&p) => {
            Ok((p * 65536.0).round().min(f64::from(SFB_MAX_PROB)) as u16)
        }
        P::Probability(p) => Err(serde::de::Error::custom(format!(
            "{p} is not a probability in [0, 1]"
        ))),
    }
}

/// SFB settings. Deserialises from TOML/JSON with every field optional
/// (missing ones take the defaults, which are the kernel's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SfbConfig {
    /// Levels `L` (1..=16).
    pub levels: usize,
    /// log2 of the bins per level `N` (0..=16, and `levels * log2_bins <= 64`).
    pub log2_bins: u32,
    /// How bins are derived from the hash pair.
    pub index: BinIndex,
    /// Interval between hash-key swaps, ms; 0 never swaps.
    pub rehash_ms: u64,
    /// Double-buffering (warm-up) time before each swap, ms; at most `rehash_ms`.
    pub db_ms: u64,
    /// Hard limit on the queue, packets.
    pub limit: usize,
    /// Minimum bin count at which a packet is dropped (`bucketdrop`);
    /// unset: 22 under `profile = "fair"`, 25 (the kernel's) under `"linux"`.
    pub max: Option<u16>,
    /// Bin count from which arrivals raise the bin's probability.
    pub target: u16,
    /// Probability increase per arrival, Q0.16 (66 = 0.1%). In a file, an
    /// integer is Q0.16 units and a number with a point a probability, as
    /// tc takes it (`increment = 0.0005`).
    #[serde(deserialize_with = "probability")]
    pub increment: u16,
    /// Probability decrease per arrival at an empty bin, Q0.16 (11 =
    /// 0.017%); in a file as `increment`.
    #[serde(deserialize_with = "probability")]
    pub decrement: u16,
    /// Penalty box rate, packets per second (0 drops every penalised packet).
    pub penalty_rate: u32,
    /// Penalty box burst, packets (0 drops every penalised packet).
    pub penalty_burst: u32,
    /// Base seed of the hash keys and the random draws; `None` draws one
    /// from the operating system (not reproducible).
    pub seed: Option<u64>,
    /// How many penalised flows [`SfbStats`] lists (the most recent ones).
    ///
    /// [`SfbStats`]: super::SfbStats
    pub penalty_flows: usize,
    /// A listed flow leaves the list after this long without a penalised
    /// packet, ms.
    pub penalty_idle_ms: u64,
    /// The defaults of the keys below: `fair` (the fair-share check on) or
    /// `linux` (off, as `sch_sfb`).
    pub profile: SfbProfile,
    /// Rows of the fair-share check's rate sketch (0 turns it off, at most
    /// 4); unset: 2 under `profile = "fair"`, 0 under `"linux"`.
    pub rate_rows: Option<usize>,
    /// log2 of the counters per row of the rate sketch (1..=16).
    pub rate_log2_bins: u32,
    /// The rate counters lose `1/2^rate_shift` every `rate_period_ms` (and
    /// the fair share is recomputed then), ms.
    pub rate_period_ms: u64,
    /// See `rate_period_ms` (1..=16; 3: 1/8 per period).
    pub rate_shift: u32,
}

impl Default for SfbConfig {
    fn default() -> Self {
        SfbConfig {
            levels: 8,
            log2_bins: 4,
            index: BinIndex::Slices,
            rehash_ms: 600_000,
            db_ms: 60_000,
            limit: 1000,
            max: None,
            target: 20,
            increment: ((SFB_MAX_PROB as u32 + 500) / 1000) as u16,
            decrement: ((SFB_MAX_PROB as u32 + 3000) / 6000) as u16,
            penalty_rate: 10,
            penalty_burst: 20,
            seed: None,
            penalty_flows: 16,
            penalty_idle_ms: 1000,
            profile: SfbProfile::Fair,
            rate_rows: None,
            rate_log2_bins: 12,
            rate_period_ms: 100,
            rate_shift: 3,
        }
    }
}

/// A setting SFB cannot run with: the key and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("sfb.{key}: {reason}")]
pub struct SfbConfigError {
    /// The offending key.
    pub key: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

impl SfbConfig {
    /// A probability as Q0.16, rounded as `tc` does (`p * 0xFFFF + 0.5`);
    /// `p` is clamped to `0..=1`.
    pub fn prob(p: f64) -> u16 {
        (p.clamp(0.0, 1.0) * f64::from(SFB_MAX_PROB) + 0.5) as u16
    }

    /// Linux's `sch_sfb` with the kernel's defaults (`profile = "linux"`).
    pub fn linux() -> Self {
        SfbConfig {
            profile: SfbProfile::Linux,
            ..SfbConfig::default()
        }
    }

    /// The rate sketch's rows in effect (0: the fair-share check is off).
    pub fn effective_rate_rows(&self) -> usize {
        self.rate_rows.unwrap_or(match self.profile {
            SfbProfile::Fair => 2,
            SfbProfile::Linux => 0,
        })
    }

    /// `max` in effect.
    pub fn effective_max(&self) -> u16 {
        self.max.unwrap_or(match self.profile {
            SfbProfile::Fair => 22,
            SfbProfile::Linux => 25,
        })
    }

    /// Bins per level.
    pub fn bins(&self) -> usize {
        1 << self.log2_bins
    }

    /// Checks every key.
    pub fn validate(&self) -> Result<(), SfbConfigError> {
        let err = |key, reason: String| Err(SfbConfigError { key, reason });
        if !(1..=MAX_LEVELS).contains(&self.levels) {
            return err(
                "levels",
                format!("{} is outside 1..={MAX_LEVELS}", self.levels),
            );
        }
        if self.log2_bins > MAX_LOG2_BINS {
            return err(
                "log2_bins",
                format!("{} is above {MAX_LOG2_BINS}", self.log2_bins),
            );
        }
        if self.levels as u32 * self.log2_bins > 64 {
            return err(
                "log2_bins",
                format!(
                    "levels x log2_bins must fit 64 bits, got {} x {}",
                    self.levels, self.log2_bins
                ),
            );
        }
        if self.rehash_ms > 0 && self.db_ms > self.rehash_ms {
            return err(
                "db_ms",
                format!(
                    "{} exceeds rehash_ms ({}): warm-up must fit in the interval",
                    self.db_ms, self.rehash_ms
                ),
            );
        }
        if self.limit == 0 {
            return err("limit", "must be at least 1 packet".into());
        }
        if self.effective_max() == 0 {
            return err(
                "max",
                "0 drops every packet (a bin may hold at most 0): at least 1".into(),
            );
        }
        if self.effective_rate_rows() > MAX_RATE_ROWS {
            return err(
                "rate_rows",
                format!("{} is above {MAX_RATE_ROWS}", self.effective_rate_rows()),
            );
        }
        if !(1..=MAX_RATE_LOG2_BINS).contains(&self.rate_log2_bins) {
            return err(
                "rate_log2_bins",
                format!(
                    "{} is outside 1..={MAX_RATE_LOG2_BINS}",
                    self.rate_log2_bins
                ),
            );
        }
        if self.rate_period_ms == 0 {
            return err("rate_period_ms", "must be at least 1 ms".into());
        }
        if !(1..=16).contains(&self.rate_shift) {
            return err(
                "rate_shift",
                format!("{} is outside 1..=16", self.rate_shift),
            );
        }
        Ok(())
    }
}

impl fmt::Display for SfbConfig {
    /// Like `tc qdisc show` prints an sfb qdisc's options.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = |v: u16| f64::from(v) / f64::from(SFB_MAX_PROB);
        write!(
            f,
            "limit {} max {} target {}\n  increment {:.5} decrement {:.5} penalty rate {} burst {} ({}ms {}ms)",
            self.limit,
            self.effective_max(),
            self.target,
            p(self.increment),
            p(self.decrement),
            self.penalty_rate,
            self.penalty_burst,
            self.rehash_ms,
            self.db_ms
        )?;
        match self.effective_rate_rows() {
            0 => Ok(()),
            rows => write!(
                f,
                "\n  fair-share rows {rows} bins {} period {}ms decay 1/{}",
                1u32 << self.rate_log2_bins,
                self.rate_period_ms,
                1u32 << self.rate_shift
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_kernels() {
        let c = SfbConfig::linux();
        assert_eq!(c.increment, 66);
        assert_eq!(c.decrement, 11);
        assert_eq!((c.effective_max(), c.target, c.limit), (25, 20, 1000));
        assert_eq!((c.rehash_ms, c.db_ms), (600_000, 60_000));
        assert_eq!((c.penalty_rate, c.penalty_burst), (10, 20));
        assert_eq!(SfbConfig::prob(0.001), 66);
        assert_eq!(
            c.to_string(),
            "limit 1000 max 25 target 20\n  increment 0.00101 decrement 0.00017 \
             penalty rate 10 burst 20 (600000ms 60000ms)"
        );
    }

    #[test]
    fn config_errors_name_the_key() {
        let bad = SfbConfig {
            levels: 0,
            ..SfbConfig::default()
        };
        assert_eq!(bad.validate().unwrap_err().key, "levels");
        let bad = SfbConfig {
            db_ms: 700_000,
            ..SfbConfig::default()
        };
        let e = bad.validate().unwrap_err();
        assert!(e.to_string().starts_with("sfb.db_ms: "), "{e}");
    }
}
