//! Time per step of the chain, for profiling: with the cargo feature
//! `step-timing`, [`Chain::process`](crate::chain::Chain::process) and the
//! egress stage read the CPU's time-stamp counter between their steps and
//! add each step's ticks to a per-thread total ([`totals`]); without it
//! ([`ENABLED`] is false) a [`Lap`] is an empty value and every call below
//! compiles to nothing.
//!
//! # Why
//!
//! Instruction counts (callgrind) do not show where the router stalls:
//! a step with few instructions can take long (a mispredicted branch on a
//! random outcome, a load that waits on another). A wall-clock timer around
//! each step does, at the cost of one counter read per step and batch (a
//! lap ends where the next begins; a batch is up to 32 packets). `bench/examples/router_cg` prints the steps
//! in nanoseconds per packet when built with the feature:
//!
//! ```text
//! cargo run --release -p bench --features step-timing --example router_cg -- core 20
//! ```
//!
//! On x86_64 the ticks are `rdtsc`'s (a constant rate on every CPU this
//! router targets; [`ticks`] lets a caller relate them to wall-clock time);
//! elsewhere they are nanoseconds since the first read.

/// Whether this build times the steps (the `step-timing` feature).
pub const ENABLED: bool = cfg!(feature = "step-timing");

/// A step of the chain or of its egress stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Parsing the batch.
    Parse,
    /// Icarus loop detection.
    Icarus,
    /// Heavy-flow detection.
    Heavy,
    /// IP forwarding and the wires.
    Forward,
    /// The multicast filters.
    Multicast,
    /// The whole egress stage (the five `Egress*` steps and the rest).
    Egress,
    /// Counting verdicts, originated packets, the packet log.
    Tail,
    /// Egress: copies for ports without a queue, sent at once.
    EgressDirect,
    /// Egress: gathering a queued port's copies and their flow keys.
    EgressGather,
    /// Egress: locking the port's queue and advancing SFB's clock.
    EgressLock,
    /// Egress: hashing the gathered keys into SFB bins.
    EgressHash,
    /// Egress: offering the copies to SFB and the queue, with the
    /// departures between them.
    EgressOffer,
    /// Egress: the departures due by the batch's time after the offers.
    EgressDrain,
}

impl Step {
    /// Every step, in [`index`](Self::index) order.
    pub const ALL: [Step; 13] = [
        Step::Parse,
        Step::Icarus,
        Step::Heavy,
        Step::Forward,
        Step::Multicast,
        Step::Egress,
        Step::Tail,
        Step::EgressDirect,
        Step::EgressGather,
        Step::EgressLock,
        Step::EgressHash,
        Step::EgressOffer,
        Step::EgressDrain,
    ];

    /// The step's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Step::Parse => "parse",
            Step::Icarus => "icarus",
            Step::Heavy => "heavy",
            Step::Forward => "forward+wires",
            Step::Multicast => "multicast",
            Step::Egress => "egress",
            Step::Tail => "tail",
            Step::EgressDirect => "  direct",
            Step::EgressGather => "  gather",
            Step::EgressLock => "  lock+tick",
            Step::EgressHash => "  key hash",
            Step::EgressOffer => "  offer",
            Step::EgressDrain => "  drain",
        }
    }

    /// The step's place in [`ALL`](Self::ALL) and in [`totals`].
    pub fn index(self) -> usize {
        self as usize
    }
}

#[cfg(feature = "step-timing")]
thread_local! {
    /// This thread's ticks per step.
    static TOTALS: [std::cell::Cell<u64>; Step::ALL.len()] =
        const { [const { std::cell::Cell::new(0) }; Step::ALL.len()] };
}

/// The tick counter now (0 without the feature).
#[inline(always)]
pub fn ticks() -> u64 {
    #[cfg(all(feature = "step-timing", target_arch = "x86_64"))]
    {
        // SAFETY: `rdtsc` has no preconditions and every x86_64 CPU has
        // it; it reads a counter and touches no memory.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(all(feature = "step-timing", not(target_arch = "x86_64")))]
    {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        let start = START.get_or_init(std::time::Instant::now);
        u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
    #[cfg(not(feature = "step-timing"))]
    {
        0
    }
}

/// A running timer: [`lap`](Self::lap) adds the ticks since the last lap
/// (or the start) to a step's total.
#[derive(Debug, Clone, Copy)]
pub struct Lap {
    #[cfg(feature = "step-timing")]
    last: u64,
}

impl Lap {
    /// A timer started now.
    #[inline(always)]
    pub fn start() -> Self {
        Lap {
            #[cfg(feature = "step-timing")]
            last: ticks(),
        }
    }

    /// Adds the ticks since the last lap to `step` and starts the next lap.
    #[inline(always)]
    pub fn lap(&mut self, step: Step) {
        #[cfg(feature = "step-timing")]
        {
            let now = ticks();
            let spent = now.wrapping_sub(self.last);
            self.last = now;
            TOTALS.with(|t| {
                if let Some(c) = t.get(step.index()) {
                    c.set(c.get().wrapping_add(spent));
                }
            });
        }
        #[cfg(not(feature = "step-timing"))]
        let _ = step;
    }
}

/// This thread's ticks per step, in [`Step::ALL`] order (all 0 without
/// the feature).
pub fn totals() -> [u64; Step::ALL.len()] {
    #[cfg(feature = "step-timing")]
    {
        TOTALS.with(|t| std::array::from_fn(|i| t[i].get()))
    }
    #[cfg(not(feature = "step-timing"))]
    {
        [0; Step::ALL.len()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_listed_in_index_order() {
        for (i, s) in Step::ALL.iter().enumerate() {
            assert_eq!(s.index(), i, "{s:?}");
        }
    }

    /// With the feature a lap adds to its own step only; without it
    /// nothing is counted.
    #[test]
    fn a_lap_counts_to_its_step() {
        let before = totals();
        let mut lap = Lap::start();
        std::hint::black_box((0..10_000u64).sum::<u64>());
        lap.lap(Step::Multicast);
        let after = totals();
        for s in Step::ALL {
            let d = after[s.index()] - before[s.index()];
            if ENABLED && s == Step::Multicast {
                assert!(d > 0, "{s:?} gained nothing");
            } else {
                assert_eq!(d, 0, "{s:?}");
            }
        }
    }
}
