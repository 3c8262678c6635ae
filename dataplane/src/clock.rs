//! Time as the stages see it.
//!
//! Every stage takes `now` as an argument instead of reading a clock, so the
//! same code runs live (monotonic time) and on replay (the capture's own
//! timestamps), and a replay is deterministic: the same file gives the same
//! epochs, the same reports and the same counters on every run.
//!
//! A [`Timestamp`] is a count of nanoseconds from an origin that depends on
//! the source: the Unix epoch for capture timestamps, the moment the
//! [`MonotonicClock`] was created for live traffic. Stages only ever compare
//! timestamps from one source and subtract them.

use core::fmt;
use std::time::Instant;

/// A point in time, in nanoseconds from the source's origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The origin.
    pub const ZERO: Timestamp = Timestamp(0);

    /// The timestamp `ns` nanoseconds after the origin.
    #[inline]
    pub const fn from_nanos(ns: u64) -> Self {
        Timestamp(ns)
    }

    /// Nanoseconds since the origin.
    #[inline]
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Nanoseconds from `earlier` to `self`, 0 if `earlier` is later.
    #[inline]
    pub const fn nanos_since(self, earlier: Timestamp) -> u64 {
        self.0.saturating_sub(earlier.0)
    }

    /// `self` plus `ns` nanoseconds (saturating).
    #[inline]
    pub const fn add_nanos(self, ns: u64) -> Timestamp {
        Timestamp(self.0.saturating_add(ns))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:09}",
            self.0 / 1_000_000_000,
            self.0 % 1_000_000_000
        )
    }
}

/// A source of `now` for live traffic: monotonic nanoseconds since the clock
/// was created (never goes backwards, unaffected by wall-clock changes).
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    origin: Instant,
}

impl MonotonicClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        MonotonicClock {
            origin: Instant::now(),
        }
    }

    /// The current time.
    #[inline]
    pub fn now(&self) -> Timestamp {
        Timestamp(u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    /// `t` of this clock as wall-clock nanoseconds since the Unix epoch
    /// (through the wall clock's reading now: reports an operator reads
    /// need dates, the router's own time never goes backwards).
    pub fn to_unix_ns(&self, t: Timestamp) -> u64 {
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        wall.saturating_sub(self.now().as_nanos().saturating_sub(t.as_nanos()))
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let a = Timestamp::from_nanos(10);
        let b = Timestamp::from_nanos(25);
        assert_eq!(b.nanos_since(a), 15);
        assert_eq!(a.nanos_since(b), 0);
        assert_eq!(
            Timestamp::from_nanos(u64::MAX).add_nanos(1).as_nanos(),
            u64::MAX
        );
        assert_eq!(
            Timestamp::from_nanos(1_500_000_000).to_string(),
            "1.500000000"
        );
    }

    #[test]
    fn monotonic_never_goes_back() {
        let c = MonotonicClock::new();
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
    }
}
