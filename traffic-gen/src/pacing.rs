//! Pacing as tcpreplay's options say (`--topspeed`, `--multiplier`,
//! `--pps`, `--mbps`, `--loop`): the drift-free send schedule and the
//! pass clock that the embedded replay and the live replay share.

use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::input::{Limits, Stop};

/// How the input is played, the settings offline replay
/// ([`crate::replay::ReplayConfig`]) and live replay
/// ([`crate::live::LiveConfig`]) share: the pacing, the passes, where to
/// stop and which records to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Playback {
    /// Pacing.
    pub pacing: Pacing,
    /// Times to send the input (at least 1); offline, each pass is shifted
    /// in capture time to follow the previous one.
    pub loops: u32,
    /// `--limit`, `--duration`: stop sending short of the input's end.
    pub limits: Limits,
    /// `--filter`: a BPF expression (libpcap's); only matching records
    /// are sent.
    pub filter: Option<String>,
}

impl Default for Playback {
    /// At top speed, once, the whole input.
    fn default() -> Self {
        Playback {
            pacing: Pacing::TopSpeed,
            loops: 1,
            limits: Limits::default(),
            filter: None,
        }
    }
}

/// How fast to send, as tcpreplay's options.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pacing {
    /// As fast as possible (`--topspeed`).
    TopSpeed,
    /// The capture's own timing scaled: 2.0 is twice as fast (`--multiplier`).
    Multiplier(f64),
    /// Packets per second (`--pps`).
    Pps(f64),
    /// Megabits per second of wire length (`--mbps`).
    Mbps(f64),
}

impl Pacing {
    /// A short description for reports: `topspeed`, `multiplier 2`, `1000 pps`, `10 Mbps`.
    pub fn describe(self) -> String {
        match self {
            Pacing::TopSpeed => "topspeed".into(),
            Pacing::Multiplier(m) => format!("multiplier {m}"),
            Pacing::Pps(p) => format!("{p} pps"),
            Pacing::Mbps(m) => format!("{m} Mbps"),
        }
    }

    /// Checks that a rate is a positive finite number.
    pub fn validate(self) -> Result<()> {
        match self {
            Pacing::Multiplier(x) | Pacing::Pps(x) | Pacing::Mbps(x)
                if !(x.is_finite() && x > 0.0) =>
            {
                bail!("pacing rate must be a positive number, got {x}")
            }
            _ => Ok(()),
        }
    }
}

/// The send schedule of a paced stream, shared by the embedded and the live
/// replay: each packet's due time is an offset from the stream's start
/// computed from the packet's own position (its capture time, its index, or
/// the bytes before it), never from the previous packet's actual send time,
/// so lateness (a long sleep, a slow send) never accumulates: a late sender
/// catches up by sending the next packets at once.
///
/// Call [`next_offset`](Self::next_offset) once per packet in send order.
///
/// With a multiplier, a gap between two consecutive packets' capture times
/// longer than the schedule's maximum ([`DEFAULT_MAX_GAP_NS`], one minute,
/// like tcpreplay's `--maxsleep`) is waited for only that long and counted
/// ([`Schedule::capped_gaps`]): a capture whose clock jumps by 2^31 s must
/// not put the sender to sleep for 68 years. Such gaps are recorded in
/// every mode ([`Schedule::long_gaps`]): the other modes do not wait for
/// capture time, but the router's clock on replay is capture time, and a
/// report explains its span with them.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    pacing: Pacing,
    first_ts: Option<u64>,
    packets: u64,
    bits: u64,
    prev_ts: Option<u64>,
    /// Capture time cut out of long gaps so far.
    skipped_ns: u64,
    gaps: LongGaps,
    max_gap_ns: u64,
    /// The latest due offset given so far.
    last_due_ns: u64,
}

/// A paced run that reached less than this share of its rate is warned
/// about, as tcpreplay's statistics make a shortfall visible.
pub const RATE_WARN_BELOW: f64 = 0.95;

/// Schedules shorter than this are not judged (a few packets' timing says
/// little about a rate).
const RATE_JUDGED_FROM_NS: u64 = 10_000_000;

/// Gaps in a capture's clock longer than [`DEFAULT_MAX_GAP_NS`] (see
/// [`Schedule`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct LongGaps {
    /// How many.
    pub count: u64,
    /// The longest, ns.
    pub longest_ns: u64,
    /// Their lengths beyond the maximum, summed, ns: what a multiplier
    /// does not wait for.
    pub beyond_ns: u64,
}

impl LongGaps {
    /// The gaps of several senders of one stream (each sees every gap).
    pub fn max(self, o: LongGaps) -> LongGaps {
        LongGaps {
            count: self.count.max(o.count),
            longest_ns: self.longest_ns.max(o.longest_ns),
            beyond_ns: self.beyond_ns.max(o.beyond_ns),
        }
    }
}

/// The longest gap between two packets' capture times a multiplier
/// schedule keeps (see [`Schedule`]).
pub const DEFAULT_MAX_GAP_NS: u64 = 60 * 1_000_000_000;

/// Offsets are capped here (about 31 years), so that adding one to an
/// `Instant` cannot overflow.
const MAX_OFFSET_NS: u64 = 1_000_000_000 * 1_000_000_000;

impl Schedule {
    /// A schedule that starts with its first packet at offset 0.
    pub fn new(pacing: Pacing) -> Self {
        Schedule {
            pacing,
            first_ts: None,
            packets: 0,
            bits: 0,
            prev_ts: None,
            skipped_ns: 0,
            gaps: LongGaps::default(),
            max_gap_ns: DEFAULT_MAX_GAP_NS,
            last_due_ns: 0,
        }
    }

    /// The share of the requested rate reached by a sending that took
    /// `elapsed` from the start to its last packet: the last packet's due
    /// offset over the time taken, at most 1. `None` at top speed or for a
    /// schedule shorter than 10 ms (too short to judge).
    pub fn rate_reached(&self, elapsed: Duration) -> Option<f64> {
        if self.pacing == Pacing::TopSpeed || self.last_due_ns < RATE_JUDGED_FROM_NS {
            return None;
        }
        let took = elapsed.as_nanos() as f64;
        Some(if took <= 0.0 {
            1.0
        } else {
            (self.last_due_ns as f64 / took).min(1.0)
        })
    }

    /// The same with another longest kept gap, ns (at least 1).
    pub fn with_max_gap(mut self, ns: u64) -> Self {
        self.max_gap_ns = ns.max(1);
        self
    }

    /// Gaps longer than the maximum whose wait was cut to it so far (only
    /// a multiplier waits for capture time; 0 in the other modes).
    pub fn capped_gaps(&self) -> u64 {
        if matches!(self.pacing, Pacing::Multiplier(_)) {
            self.gaps.count
        } else {
            0
        }
    }

    /// The gaps in capture time longer than the maximum so far, whatever
    /// the mode.
    pub fn long_gaps(&self) -> LongGaps {
        self.gaps
    }

    /// Whether this schedule waits for capture time (a multiplier).
    pub fn follows_capture_time(&self) -> bool {
        matches!(self.pacing, Pacing::Multiplier(_))
    }

    /// The offset from the start, in ns, at which the next packet (capture
    /// time `ts_ns`, `wire_len` bytes) is due; `None` at top speed (send at
    /// once). Multiplier: capture time since the first packet divided by the
    /// multiplier (a capture time before the first packet is due at once);
    /// pps: index / rate; Mbps: bits of the packets before this one / rate.
    pub fn next_offset(&mut self, ts_ns: u64, wire_len: u32) -> Option<u64> {
        let first = *self.first_ts.get_or_insert(ts_ns);
        if let Some(prev) = self.prev_ts {
            let gap = ts_ns.saturating_sub(prev);
            if gap > self.max_gap_ns {
                self.skipped_ns = self.skipped_ns.saturating_add(gap - self.max_gap_ns);
                self.gaps.count += 1;
                self.gaps.longest_ns = self.gaps.longest_ns.max(gap);
                self.gaps.beyond_ns = self.skipped_ns;
            }
        }
        // The latest time so far: a packet back in time opens no gap.
        self.prev_ts = Some(self.prev_ts.map_or(ts_ns, |p| p.max(ts_ns)));
        let ns = match self.pacing {
            Pacing::TopSpeed => None,
            Pacing::Multiplier(m) => {
                Some(ts_ns.saturating_sub(first).saturating_sub(self.skipped_ns) as f64 / m)
            }
            Pacing::Pps(p) => Some(self.packets as f64 * 1e9 / p),
            Pacing::Mbps(r) => Some(self.bits as f64 * 1e3 / r),
        };
        self.packets += 1;
        self.bits = self.bits.saturating_add(u64::from(wire_len) * 8);
        // `as` saturates: NaN -> 0, beyond u64 -> u64::MAX.
        let due = ns.map(|ns| (ns.max(0.0) as u64).min(MAX_OFFSET_NS));
        if let Some(d) = due {
            self.last_due_ns = self.last_due_ns.max(d);
        }
        due
    }
}

/// Capture time across passes (`--loop`): pass 0 keeps the capture's times;
/// every later pass is shifted to start 1 us after the latest time of the
/// passes before it, so time keeps increasing from pass to pass (and the
/// multiplier schedule plays the passes back to back).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassClock {
    last_out: Option<u64>,
    shift: Option<i128>,
}

impl PassClock {
    /// A clock before the first pass.
    pub fn new() -> Self {
        PassClock::default()
    }

    /// Starts the next pass: its first packet sets the shift.
    pub fn start_pass(&mut self) {
        self.shift = None;
    }

    /// The shifted time of a packet captured at `ts_ns` in the current pass.
    pub fn map(&mut self, ts_ns: u64) -> u64 {
        let last_out = self.last_out;
        let s = *self.shift.get_or_insert_with(|| match last_out {
            None => 0,
            Some(l) => i128::from(l) + 1_000 - i128::from(ts_ns),
        });
        let t = (i128::from(ts_ns) + s).clamp(0, i128::from(u64::MAX)) as u64;
        self.last_out = Some(last_out.map_or(t, |l| l.max(t)));
        t
    }
}

/// Sleeps until shortly before `deadline`, then spins until it; returns the
/// last time read, at or after `deadline` (one clock read when the deadline
/// has already passed). Sleeping only to 100 us before keeps the wake-up's
/// lateness (timer slack, scheduling) out of the send time. The spin yields
/// the CPU between clock reads: alone on a core that costs a system call
/// per round, but where other threads share it (on a small machine, the
/// router and receiver being measured) they run instead of waiting for the
/// spinner's time slice to end, which measured 100x lower median latency
/// through the live lab on 2 cores.
pub fn wait_until(deadline: Instant) -> Instant {
    let mut now = Instant::now();
    if now >= deadline {
        return now;
    }
    let wait = deadline - now;
    if wait > Duration::from_micros(200) {
        thread::sleep(wait - Duration::from_micros(100));
    }
    loop {
        now = Instant::now();
        if now >= deadline {
            return now;
        }
        thread::yield_now();
    }
}

/// Longest sleep between two looks at the stop flag in
/// [`wait_until_or_stop`].
const STOP_CHECK: Duration = Duration::from_millis(20);

/// [`wait_until`], but looking at `stop` at least every 20 ms while more
/// than that is left: returns `None` as soon as a stop is requested (so a
/// slow rate or a long gap in the capture never holds up Ctrl-C), else the
/// time [`wait_until`] returns.
pub fn wait_until_or_stop(deadline: Instant, stop: Stop<'_>) -> Option<Instant> {
    loop {
        if stop.requested() {
            return None;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left <= STOP_CHECK {
            return Some(wait_until(deadline));
        }
        thread::sleep(STOP_CHECK);
    }
}

/// The terminal line for a paced run that fell short of its rate.
pub fn shortfall_warning(pacing: &str, reached: Option<f64>) -> Option<String> {
    let r = reached.filter(|&r| r < RATE_WARN_BELOW)?;
    Some(format!(
        "warning: the requested rate ({pacing}) was not reached: {:.0}% of it",
        r * 100.0
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_reached_compares_the_schedule_with_the_time_taken() {
        let mut s = Schedule::new(Pacing::Pps(1000.0));
        for _ in 0..101 {
            s.next_offset(0, 60);
        }
        // The last of 101 packets is due at 100 ms.
        assert_eq!(s.rate_reached(Duration::from_millis(100)), Some(1.0));
        assert_eq!(s.rate_reached(Duration::from_millis(90)), Some(1.0));
        let r = s.rate_reached(Duration::from_millis(400)).unwrap();
        assert!((r - 0.25).abs() < 1e-9, "{r}");
        assert_eq!(
            shortfall_warning("1000 pps", Some(r)).unwrap(),
            "warning: the requested rate (1000 pps) was not reached: 25% of it"
        );
        assert!(shortfall_warning("1000 pps", Some(0.96)).is_none());
        let mut t = Schedule::new(Pacing::TopSpeed);
        t.next_offset(0, 60);
        assert_eq!(t.rate_reached(Duration::from_secs(9)), None);
        let mut short = Schedule::new(Pacing::Pps(1000.0));
        for _ in 0..5 {
            short.next_offset(0, 60);
        }
        assert_eq!(
            short.rate_reached(Duration::from_secs(9)),
            None,
            "4 ms: not judged"
        );
    }

    /// The offsets of `packets` (capture time, length) over `loops` passes.
    fn offsets(pacing: Pacing, packets: &[(u64, u32)], loops: u32) -> Vec<Option<u64>> {
        let mut sched = Schedule::new(pacing);
        let mut clock = PassClock::new();
        let mut out = Vec::new();
        for _ in 0..loops {
            clock.start_pass();
            for &(ts, len) in packets {
                out.push(sched.next_offset(clock.map(ts), len));
            }
        }
        out
    }

    const CAPTURE: [(u64, u32); 4] = [
        (5_000_000_000, 100),
        (5_000_001_000, 200),
        (5_000_004_000, 1500),
        (5_000_010_000, 64),
    ];

    #[test]
    fn hostile_gaps_are_cut_to_the_maximum_and_counted() {
        // A 2^31 s jump between the second and third packet.
        let jump = (1u64 << 31) * 1_000_000_000;
        let mut s = Schedule::new(Pacing::Multiplier(1.0));
        let got: Vec<Option<u64>> = [0, 1_000, 1_000 + jump, 2_000 + jump]
            .iter()
            .map(|&t| s.next_offset(1_000_000_000 + t, 64))
            .collect();
        let max = DEFAULT_MAX_GAP_NS;
        assert_eq!(
            got,
            [Some(0), Some(1_000), Some(1_000 + max), Some(2_000 + max)]
        );
        assert_eq!(s.capped_gaps(), 1);
        assert_eq!(
            s.long_gaps(),
            LongGaps {
                count: 1,
                longest_ns: jump,
                beyond_ns: jump - max
            }
        );
        // Top speed waits for nothing: the gap is recorded, nothing cut.
        let mut t = Schedule::new(Pacing::TopSpeed);
        for &ts in &[0, 1_000, 1_000 + jump] {
            assert_eq!(t.next_offset(ts, 64), None);
        }
        assert_eq!((t.capped_gaps(), t.long_gaps().count), (0, 1));
        // A tighter cap, and gaps below it kept.
        let mut s = Schedule::new(Pacing::Multiplier(2.0)).with_max_gap(10_000);
        let got: Vec<Option<u64>> = [0, 5_000, 50_000, 55_000]
            .iter()
            .map(|&t| s.next_offset(t, 64))
            .collect();
        assert_eq!(got, [Some(0), Some(2_500), Some(7_500), Some(10_000)]);
        assert_eq!(s.capped_gaps(), 1);
    }

    #[test]
    fn schedule_topspeed_sends_at_once() {
        assert!(
            offsets(Pacing::TopSpeed, &CAPTURE, 3)
                .iter()
                .all(Option::is_none)
        );
    }

    #[test]
    fn schedule_multiplier_follows_capture_time_across_loops() {
        let got = offsets(Pacing::Multiplier(2.0), &CAPTURE, 2);
        // Pass 2 starts 1 us after pass 1's last packet (10 us): at 11 us.
        let want = [0, 1_000, 4_000, 10_000, 11_000, 12_000, 15_000, 21_000].map(|us| Some(us / 2));
        assert_eq!(got, want);
        // Slower than real time; a capture going back in time is sent at once.
        let got = offsets(
            Pacing::Multiplier(0.5),
            &[(100, 60), (50, 60), (300, 60)],
            1,
        );
        assert_eq!(got, [Some(0), Some(0), Some(400)]);
    }

    #[test]
    fn schedule_pps_is_index_over_rate_without_drift() {
        // 3 pps: offsets are n/3 s rounded down, never an accumulated sum of
        // rounded gaps (which would drift by up to 1 ns per packet).
        let many: Vec<(u64, u32)> = (0..3000).map(|i| (i, 60)).collect();
        let got = offsets(Pacing::Pps(3.0), &many, 1);
        for (n, o) in got.iter().enumerate() {
            let want = (n as u128 * 1_000_000_000 / 3) as u64;
            let o = o.unwrap();
            assert!(o.abs_diff(want) <= 1, "packet {n}: {o} vs {want}");
        }
        // Loops continue the count.
        let got = offsets(Pacing::Pps(1000.0), &CAPTURE, 2);
        let want: Vec<Option<u64>> = (0..8).map(|n| Some(n * 1_000_000)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn schedule_mbps_is_bits_before_over_rate() {
        // 8 Mbit/s = 1 byte per us: a packet is due when the bytes before it
        // have gone out.
        let got = offsets(Pacing::Mbps(8.0), &CAPTURE, 2);
        let want = [0, 100, 300, 1800, 1864, 1964, 2164, 3664].map(|us| Some(us * 1_000));
        assert_eq!(got, want);
    }

    #[test]
    fn schedule_offsets_are_capped() {
        let mut s = Schedule::new(Pacing::Multiplier(1e-12));
        assert_eq!(s.next_offset(0, 60), Some(0));
        assert_eq!(s.next_offset(u64::MAX, 60), Some(MAX_OFFSET_NS));
        assert!(
            Instant::now()
                .checked_add(Duration::from_nanos(MAX_OFFSET_NS))
                .is_some()
        );
    }

    #[test]
    fn pacing_rates_must_be_positive() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(Pacing::Pps(bad).validate().is_err());
            assert!(Pacing::Mbps(bad).validate().is_err());
            assert!(Pacing::Multiplier(bad).validate().is_err());
        }
        assert!(Pacing::TopSpeed.validate().is_ok());
        assert!(Pacing::Pps(1.0).validate().is_ok());
    }

    #[test]
    fn a_stop_ends_a_long_wait() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let flag = AtomicBool::new(false);
        let far = Instant::now() + Duration::from_secs(3600);
        let near = Instant::now() + Duration::from_millis(30);
        let t = wait_until_or_stop(near, Stop::on(&flag));
        assert!(t.is_some_and(|t| t >= near));
        flag.store(true, Ordering::Relaxed);
        // Returns at once: a wait of an hour would hang the test.
        assert_eq!(wait_until_or_stop(far, Stop::on(&flag)), None);
    }

    #[test]
    fn wait_until_is_not_early() {
        let start = Instant::now();
        for k in 1..=20u64 {
            let deadline = start + Duration::from_micros(50 * k);
            let t = wait_until(deadline);
            assert!(t >= deadline);
            assert!(Instant::now() >= deadline);
        }
    }
}
