//! `traffic-gen throughput`: the zero-loss forwarding rate of whatever sits
//! between two interfaces (a router in the lab), RFC 2544 style.
//!
//! Per frame size, a binary search ([`search`]) over the offered rate: each
//! trial is one live run ([`run_live_generated`]) that offers `rate x
//! duration` unique frames ([`crate::synth::UniqueFrames`], made as they
//! are sent: five seconds of 1518-byte frames at a high rate would not fit
//! in memory as a capture) at `rate` packets per second, and counts how
//! many arrive. A trial passes when at most `--loss` of the frames offered
//! were lost (offered = sent + refused by the sender's kernel) and the
//! sender kept the rate ([`Verdict`]: where the sender shares the CPUs
//! with the router it measures, it can fall behind its schedule and send
//! every frame at a lower rate than asked, which proves nothing about the
//! rate asked). The search
//! starts at an upper bound (the sender's own top-speed rate, learned by a
//! short run, or `--max-pps`) and halves the interval between the highest
//! rate that passed and the lowest that failed until it is within
//! `--resolution` of the rate, or until `--max-trials`. With `--repeat
//! N` a rate passes only when N trials at it pass in a row (the first
//! failure ends them), as RFC 2544 asks trials to be repeated: on a shared
//! machine one lucky trial can otherwise set the answer. One more run at
//! half the rate found measures latency off the knee.
//!
//! Rates in Mbit/s count the frame's bytes as sent, times 8, as tcpreplay's
//! `Rated:` line does: no preamble, inter-frame gap or frame check
//! sequence (a veth has none).
//!
//! The search is a pure function of a trial closure, so it is tested on
//! synthetic loss curves; the trials themselves need the lab.

use std::io::{self, Write};
use std::time::Duration;

use anyhow::{Result, bail};
use dataplane::config::IoBackend;
use serde::Serialize;

use crate::live::{Endpoint, Generated, LiveConfig, check_fits, endpoint_mtu, run_live_generated};
use crate::pacing::{Pacing, Playback};
use crate::replay::Latency;
use crate::synth::{UNIQUE_SIZES, UniqueConfig};

/// The sizes RFC 2544 lists for Ethernet, the default of `--size`.
pub const DEFAULT_SIZES: [u16; 7] = [64, 128, 256, 512, 1024, 1280, 1518];

/// The most trials per rate (`--repeat`).
pub const MAX_REPEAT: u32 = 100;

/// Frames one trial may offer (each is remembered on both sides for
/// matching: about 60 bytes per frame in all).
pub const MAX_TRIAL_FRAMES: u64 = 50_000_000;

/// When the binary search stops.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SearchParams {
    /// Stop once the interval between the highest pass and the lowest
    /// failure is at most this fraction of the failing rate.
    pub resolution: f64,
    /// Stop after this many trials.
    pub max_trials: u32,
    /// Never try below this rate (pps).
    pub min_pps: f64,
}

/// A trial's rate and what the caller measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Tried<T> {
    /// Offered rate, pps.
    pub rate: f64,
    /// The caller's measurement.
    pub outcome: T,
}

/// What [`search`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct Search<T> {
    /// The highest rate that passed, with its trial; `None` when none did.
    pub found: Option<Tried<T>>,
    /// Trials run.
    pub trials: u32,
}

/// Binary search for the highest rate at which `trial(rate)` passes
/// (`trial` returns its verdict and a measurement). The
/// first trial is at `upper`; when it passes, that is the answer. Then the
/// interval [highest pass (0 at first), lowest failure] is halved until it
/// is within `p.resolution` of its top, `p.max_trials` trials have run, or
/// the next rate would be below `p.min_pps`. A loss curve that is not
/// monotonic (noise) can mislead it, as it can RFC 2544's; the answer is
/// always a rate that passed.
///
/// # Errors
/// The first error of `trial`, or a bad `upper` or `p`.
pub fn search<T>(
    upper: f64,
    p: &SearchParams,
    mut trial: impl FnMut(f64) -> Result<(bool, T)>,
) -> Result<Search<T>> {
    if !(upper.is_finite() && upper > 0.0) {
        bail!("the search's upper rate must be positive, got {upper}");
    }
    if !(p.resolution > 0.0 && p.resolution < 1.0) {
        bail!("--resolution must be in (0, 1), got {}", p.resolution);
    }
    let (mut lo, mut hi) = (0.0f64, upper);
    let mut found: Option<Tried<T>> = None;
    let mut trials = 0u32;
    let mut rate = upper;
    while trials < p.max_trials && rate >= p.min_pps {
        let (passed, outcome) = trial(rate)?;
        trials += 1;
        if passed {
            lo = rate;
            found = Some(Tried { rate, outcome });
            if rate >= upper {
                break;
            }
        } else {
            hi = rate;
        }
        if hi - lo <= p.resolution * hi {
            break;
        }
        rate = (lo + hi) / 2.0;
    }
    Ok(Search { found, trials })
}

/// Runs `run(k)` for `k = 0..n` until one fails: a rate's verdict under
/// `--repeat n`. Returns whether all `n` passed and the last run's
/// measurement (the failing one, if any).
///
/// # Errors
/// The first error of `run`, or `n == 0`.
pub fn all_pass<T>(n: u32, mut run: impl FnMut(u32) -> Result<(bool, T)>) -> Result<(bool, T)> {
    let mut last = None;
    for k in 0..n {
        let (passed, t) = run(k)?;
        if !passed {
            return Ok((false, t));
        }
        last = Some(t);
    }
    match last {
        Some(t) => Ok((true, t)),
        None => bail!("--repeat must be at least 1"),
    }
}

/// `traffic-gen throughput` settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ThroughputConfig {
    /// Where frames are sent.
    pub tx: Endpoint,
    /// Where they are received.
    pub rx: Endpoint,
    /// Packet I/O of both sides.
    pub io: IoBackend,
    /// Sender threads ([`LiveConfig::tx_threads`]).
    pub tx_threads: u32,
    /// Frame sizes, bytes, in order.
    pub sizes: Vec<u16>,
    /// One trial's length.
    pub duration: Duration,
    /// Largest loss fraction that passes.
    pub max_loss: f64,
    /// Flows the frames are spread over.
    pub flows: u32,
    /// The search's upper rate; `None`: the sender's top-speed rate.
    pub max_pps: Option<f64>,
    /// See [`SearchParams::resolution`].
    pub resolution: f64,
    /// See [`SearchParams::max_trials`] (rates tried, each `repeat` times
    /// at most).
    pub max_trials: u32,
    /// Trials per rate; the rate passes when all do ([`all_pass`]).
    pub repeat: u32,
    /// Receive buffer (or ring) size, bytes.
    pub rx_buffer_bytes: usize,
    /// How long after the last send the receiver waits.
    pub grace: Duration,
    /// Pause between trials, so that queues drain.
    pub pause: Duration,
}

impl Default for ThroughputConfig {
    fn default() -> Self {
        let live = LiveConfig::default();
        ThroughputConfig {
            tx: live.tx.clone(),
            rx: Endpoint {
                interface: "eth0".into(),
                netns: None,
            },
            io: IoBackend::Pnet,
            tx_threads: 1,
            sizes: DEFAULT_SIZES.to_vec(),
            duration: Duration::from_secs(5),
            max_loss: 0.001,
            flows: 1024,
            max_pps: None,
            resolution: 0.01,
            max_trials: 16,
            repeat: 1,
            rx_buffer_bytes: live.rx_buffer_bytes,
            grace: live.grace,
            pause: Duration::from_millis(500),
        }
    }
}

impl ThroughputConfig {
    /// Checks every setting; errors name the option.
    pub fn validate(&self) -> Result<()> {
        if self.sizes.is_empty() {
            bail!("--size needs at least one frame size");
        }
        for &s in &self.sizes {
            check_size(s)?;
        }
        if self.duration.is_zero() || self.duration > Duration::from_secs(3600) {
            bail!(
                "--duration must be more than 0 and at most 1 h, got {:?}",
                self.duration
            );
        }
        if !(0.0..1.0).contains(&self.max_loss) {
            bail!(
                "--loss is a fraction in [0, 1) (0.001 = 0.1%), got {}",
                self.max_loss
            );
        }
        if self.flows == 0 {
            bail!("--flows must be at least 1");
        }
        if let Some(p) = self.max_pps
            && !(p.is_finite() && p > 0.0)
        {
            bail!("--max-pps must be a positive number, got {p}");
        }
        if !(self.resolution > 0.0 && self.resolution < 1.0) {
            bail!(
                "--resolution is a fraction in (0, 1) (0.01 = 1%), got {}",
                self.resolution
            );
        }
        if self.max_trials == 0 {
            bail!("--max-trials must be at least 1");
        }
        if !(1..=MAX_REPEAT).contains(&self.repeat) {
            bail!("--repeat must be 1 to {MAX_REPEAT}, got {}", self.repeat);
        }
        // The live run's own check, as its trials will run (generated
        // frames, `--pps`).
        LiveConfig {
            tx_threads: self.tx_threads,
            play: Playback {
                pacing: Pacing::Pps(1.0),
                ..Playback::default()
            },
            ..LiveConfig::default()
        }
        .check_tx_threads(true)
    }
}

/// Checks one `--size` value.
pub fn check_size(size: u16) -> Result<()> {
    if !UNIQUE_SIZES.contains(&size) {
        bail!(
            "--size {size}: frame sizes must be in {}..={} bytes (the frame as sent, without the FCS)",
            UNIQUE_SIZES.start(),
            UNIQUE_SIZES.end()
        );
    }
    Ok(())
}

/// Parses `--size`'s list: `64,128,1518`.
pub fn parse_sizes(s: &str) -> Result<Vec<u16>> {
    let mut out = Vec::new();
    for part in s.split(',') {
        let p = part.trim();
        let Ok(v) = p.parse::<u16>() else {
            bail!("--size {s:?}: {p:?} is not a frame size in bytes (a list such as 64,128,1518)");
        };
        check_size(v)?;
        out.push(v);
    }
    Ok(out)
}

/// One live run's outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trial {
    /// The rate asked for, pps (0 for top speed).
    pub offered_pps: f64,
    /// The rate the sender achieved, pps.
    pub sent_pps: f64,
    /// Frames offered: sent + refused by the sender's kernel.
    pub offered: u64,
    /// Frames sent.
    pub sent: u64,
    /// Sent frames received.
    pub received: u64,
    /// Offered frames not received.
    pub lost: u64,
    /// `lost / offered`.
    pub loss: f64,
    /// Frames the receiver's kernel dropped (its buffer or ring full).
    pub kernel_dropped: u64,
    /// Send -> receive latency of the frames received, ns.
    pub latency: Latency,
    /// Whether it passed.
    pub verdict: Verdict,
}

/// A trial may fall short of the rate asked by this fraction (the sender's
/// clock reads and the last frame's send) and still count.
pub const SENDER_SHORTFALL: f64 = 0.02;

/// What a trial says about its rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// At most the allowed fraction lost, at the rate asked.
    Pass,
    /// More lost.
    Loss,
    /// The sender could not keep the rate (its schedule slipped by more
    /// than [`SENDER_SHORTFALL`]): the rate was not offered, so it does
    /// not pass, whatever arrived (on a small machine the sender shares
    /// the CPUs with what it measures).
    SenderBehind,
}

impl Verdict {
    /// `pass`, `fail (loss)`, `fail (sender behind)`.
    pub fn describe(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Loss => "fail (loss)",
            Verdict::SenderBehind => "fail (sender behind)",
        }
    }
}

impl Trial {
    /// Whether the trial passes with `max_loss` allowed.
    pub fn verdict(&self, max_loss: f64) -> Verdict {
        if self.offered_pps > 0.0 && self.sent_pps < self.offered_pps * (1.0 - SENDER_SHORTFALL) {
            Verdict::SenderBehind
        } else if self.loss <= max_loss {
            Verdict::Pass
        } else {
            Verdict::Loss
        }
    }
}

/// Where the search started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UpperBound {
    /// The sender's top-speed rate, from a short run.
    TopSpeed,
    /// `--max-pps`.
    MaxPps,
}

/// One frame size's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SizeResult {
    /// Frame size, bytes.
    pub size: u16,
    /// The search's upper rate, pps.
    pub upper_pps: f64,
    /// Where it came from.
    pub upper_from: UpperBound,
    /// The highest rate that passed (`None`: none did).
    pub zero_loss: Option<Trial>,
    /// The run at half that rate.
    pub half_rate: Option<Trial>,
    /// Every trial of the search, in order.
    pub trials: Vec<Trial>,
}

impl SizeResult {
    /// The zero-loss rate in Mbit/s of frame bytes (0 when none passed).
    pub fn mbps(&self) -> f64 {
        self.zero_loss
            .as_ref()
            .map_or(0.0, |t| t.offered_pps * f64::from(self.size) * 8.0 / 1e6)
    }
}

/// The whole report (`--json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ThroughputReport {
    /// Where frames were sent.
    pub tx: Endpoint,
    /// Where they were received.
    pub rx: Endpoint,
    /// Packet I/O of both sides.
    pub io: IoBackend,
    /// Sender threads.
    pub tx_threads: u32,
    /// Trials per rate (a rate passed when all did).
    pub repeat: u32,
    /// One trial's length, s.
    pub duration_s: f64,
    /// Largest loss fraction that passes.
    pub max_loss: f64,
    /// Search resolution (fraction of the rate).
    pub resolution: f64,
    /// Flows.
    pub flows: u32,
    /// How Mbit/s counts.
    pub mbps_counts: &'static str,
    /// Per frame size.
    pub results: Vec<SizeResult>,
}

/// What Mbit/s counts (see the module docs).
pub const MBPS_COUNTS: &str =
    "frame bytes x 8 as sent (as tcpreplay): no preamble, inter-frame gap or FCS";

impl ThroughputReport {
    /// The table, in Markdown.
    pub fn write_text(&self, w: &mut impl Write) -> io::Result<()> {
        writeln!(
            w,
            "Zero-loss throughput, {} -> {}, io {}{}: loss <= {}, {:.3} s trials{}, {} flows, resolution {}",
            self.tx.describe(),
            self.rx.describe(),
            self.io.name(),
            match self.tx_threads {
                1 => String::new(),
                n => format!(", {n} senders"),
            },
            self.max_loss,
            self.duration_s,
            match self.repeat {
                1 => String::new(),
                n => format!(" ({n} per rate, all must pass)"),
            },
            self.flows,
            self.resolution
        )?;
        writeln!(w, "Mbit/s: {}", self.mbps_counts)?;
        writeln!(w)?;
        writeln!(
            w,
            "| frame B | zero-loss pps | Mbit/s | sent pps | received | loss | p50 us | p99 us | half rate p50 us | half rate p99 us |"
        )?;
        writeln!(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")?;
        let us = |ns: u64| ns as f64 / 1e3;
        for r in &self.results {
            match &r.zero_loss {
                Some(z) => {
                    write!(
                        w,
                        "| {} | {:.0} | {:.1} | {:.0} | {} | {:.6} | {:.1} | {:.1} |",
                        r.size,
                        z.offered_pps,
                        r.mbps(),
                        z.sent_pps,
                        z.received,
                        z.loss,
                        us(z.latency.p50),
                        us(z.latency.p99)
                    )?;
                    match &r.half_rate {
                        Some(h) => {
                            writeln!(w, " {:.1} | {:.1} |", us(h.latency.p50), us(h.latency.p99))?
                        }
                        None => writeln!(w, " - | - |")?,
                    }
                }
                None => writeln!(
                    w,
                    "| {} | none (every rate down to {:.0} pps lost more) | - | - | - | - | - | - | - | - |",
                    r.size,
                    r.trials.last().map_or(0.0, |t| t.offered_pps)
                )?,
            }
        }
        Ok(())
    }
}

/// One live run of `size`-byte frames at `pacing` (`packets` frames, or
/// until `time_limit`).
fn run_trial(
    cfg: &ThroughputConfig,
    size: u16,
    pacing: Pacing,
    packets: u64,
    time_limit: Option<Duration>,
) -> Result<Trial> {
    let live = LiveConfig {
        tx: cfg.tx.clone(),
        rx: Some(cfg.rx.clone()),
        play: Playback {
            pacing,
            ..Playback::default()
        },
        preload: false,
        grace: cfg.grace,
        rx_buffer_bytes: cfg.rx_buffer_bytes,
        io: cfg.io,
        tx_threads: cfg.tx_threads,
        ..LiveConfig::default()
    };
    let generated = Generated {
        frames: UniqueConfig {
            size,
            flows: cfg.flows,
            packets,
        },
        time_limit,
    };
    let rep = run_live_generated(&generated, &live, None)?;
    let offered = rep.sent + rep.tx_stats.failed;
    let Some(rx) = rep.rx else {
        bail!("the run has no receive side");
    };
    let lost = offered.saturating_sub(rx.received);
    let mut t = Trial {
        offered_pps: match pacing {
            Pacing::Pps(p) => p,
            _ => 0.0,
        },
        sent_pps: rep.rated.pps,
        offered,
        sent: rep.sent,
        received: rx.received,
        lost,
        loss: if offered == 0 {
            1.0
        } else {
            lost as f64 / offered as f64
        },
        kernel_dropped: rx.kernel_dropped,
        latency: rx.latency,
        verdict: Verdict::Pass,
    };
    t.verdict = t.verdict(cfg.max_loss);
    Ok(t)
}

/// One `--duration` trial at `rate` pps.
fn paced_trial(cfg: &ThroughputConfig, size: u16, rate: f64) -> Result<Trial> {
    run_trial(
        cfg,
        size,
        Pacing::Pps(rate),
        frames_for(rate, cfg.duration)?,
        None,
    )
}

/// Frames a trial at `rate` for `duration` offers (at least 1); an error
/// past [`MAX_TRIAL_FRAMES`].
fn frames_for(rate: f64, duration: Duration) -> Result<u64> {
    let n = (rate * duration.as_secs_f64()).ceil().max(1.0);
    if n > MAX_TRIAL_FRAMES as f64 {
        bail!(
            "a {:?} trial at {rate:.0} pps offers {n:.0} frames, more than the {MAX_TRIAL_FRAMES} that can be matched in memory: shorten --duration or lower --max-pps",
            duration
        );
    }
    Ok(n as u64)
}

/// One progress line on standard error.
fn progress(size: u16, what: &str, t: &Trial) {
    eprintln!(
        "throughput {size} B: {what}: {:.0} pps asked, sent {} ({:.0} pps), received {}, loss {:.6}, kernel dropped {}, p50 {:.1} us",
        t.offered_pps,
        t.sent,
        t.sent_pps,
        t.received,
        t.loss,
        t.kernel_dropped,
        t.latency.p50 as f64 / 1e3
    );
}

/// Runs the search for every size in `cfg` (progress on standard error).
///
/// # Errors
/// A bad setting (named), or a live run's error (interface, namespace).
pub fn run_throughput(cfg: &ThroughputConfig) -> Result<ThroughputReport> {
    cfg.validate()?;
    // Every size must fit, before hours of trials.
    let mtu = endpoint_mtu(&cfg.tx)?;
    for &size in &cfg.sizes {
        check_fits(&cfg.tx, mtu, size)?;
    }
    let mut results = Vec::with_capacity(cfg.sizes.len());
    for &size in &cfg.sizes {
        let (upper, upper_from) = match cfg.max_pps {
            Some(p) => (p, UpperBound::MaxPps),
            None => {
                let probe_time = cfg.duration.min(Duration::from_secs(1));
                let t = run_trial(cfg, size, Pacing::TopSpeed, u64::MAX, Some(probe_time))?;
                progress(size, "top speed", &t);
                std::thread::sleep(cfg.pause);
                if t.sent == 0 || t.sent_pps <= 0.0 {
                    bail!(
                        "--tx {}: the sender sent nothing at top speed",
                        cfg.tx.describe()
                    );
                }
                (t.sent_pps, UpperBound::TopSpeed)
            }
        };
        let params = SearchParams {
            resolution: cfg.resolution,
            max_trials: cfg.max_trials,
            // At least 100 frames per trial.
            min_pps: 100.0 / cfg.duration.as_secs_f64(),
        };
        let mut trials = Vec::new();
        let s = search(upper, &params, |rate| {
            all_pass(cfg.repeat, |k| {
                let t = paced_trial(cfg, size, rate)?;
                let verdict = t.verdict;
                let which = match cfg.repeat {
                    1 => String::new(),
                    n => format!(" ({} of {n} at this rate)", k + 1),
                };
                progress(
                    size,
                    &format!("trial {} {}{which}", trials.len() + 1, verdict.describe()),
                    &t,
                );
                trials.push(t.clone());
                std::thread::sleep(cfg.pause);
                Ok((verdict == Verdict::Pass, t))
            })
        })?;
        let zero_loss = s.found.map(|f| f.outcome);
        let half_rate = match &zero_loss {
            Some(z) => {
                let t = paced_trial(cfg, size, z.offered_pps / 2.0)?;
                progress(size, "half rate", &t);
                std::thread::sleep(cfg.pause);
                Some(t)
            }
            None => None,
        };
        results.push(SizeResult {
            size,
            upper_pps: upper,
            upper_from,
            zero_loss,
            half_rate,
            trials,
        });
    }
    Ok(ThroughputReport {
        tx: cfg.tx.clone(),
        rx: cfg.rx.clone(),
        io: cfg.io,
        tx_threads: cfg.tx_threads,
        repeat: cfg.repeat,
        duration_s: cfg.duration.as_secs_f64(),
        max_loss: cfg.max_loss,
        resolution: cfg.resolution,
        flows: cfg.flows,
        mbps_counts: MBPS_COUNTS,
        results,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::MAX_TX_THREADS;

    fn params() -> SearchParams {
        SearchParams {
            resolution: 0.01,
            max_trials: 30,
            min_pps: 10.0,
        }
    }

    /// A device that forwards up to `knee` pps and drops the excess, with
    /// 0.1% loss allowed.
    fn knee_loss(knee: f64) -> impl FnMut(f64) -> Result<(bool, f64)> {
        move |rate| Ok((((rate - knee) / rate).max(0.0) <= 0.001, rate))
    }

    #[test]
    fn finds_the_knee_within_resolution() {
        for (upper, knee) in [
            (1e6, 123_456.0),
            (1e6, 999_000.0),
            (2e6, 1.0e6),
            (20_000.0, 3_000.0),
        ] {
            let mut rates = Vec::new();
            let mut f = knee_loss(knee);
            let s = search(upper, &params(), |r| {
                rates.push(r);
                f(r)
            })
            .unwrap();
            let found = s.found.expect("a rate passes").rate;
            assert!(
                found <= knee / 0.999 + 1e-6,
                "{found} above the knee {knee}"
            );
            assert!(
                found >= knee * (1.0 - 0.01) * (1.0 - 0.001),
                "{found} not within 1% of {knee}"
            );
            assert_eq!(s.trials as usize, rates.len());
            // A binary search: about log2(1 / resolution) trials past the
            // first few halvings.
            assert!(s.trials <= 20, "{} trials", s.trials);
            // Every rate tried is within the bound.
            assert!(rates.iter().all(|&r| r > 0.0 && r <= upper));
        }
    }

    #[test]
    fn a_loss_allowance_is_honoured() {
        // Loss grows linearly past the knee; 1% allowed lifts the answer
        // to where loss reaches 1%.
        let knee = 100_000.0;
        let loss = |r: f64| ((r - knee) / r).max(0.0);
        let s = search(1e6, &params(), |r| Ok((loss(r) <= 0.01, ()))).unwrap();
        let found = s.found.unwrap();
        assert!(loss(found.rate) <= 0.01);
        // loss(r) = 0.01 at r = knee / 0.99.
        let edge = knee / 0.99;
        assert!(
            found.rate <= edge + 1e-6 && found.rate >= edge * 0.99,
            "{}",
            found.rate
        );
    }

    #[test]
    fn no_loss_stops_at_the_upper_bound() {
        let mut n = 0;
        let s = search(50_000.0, &params(), |r| {
            n += 1;
            Ok((true, r))
        })
        .unwrap();
        assert_eq!(s.trials, 1);
        assert_eq!(n, 1);
        let f = s.found.unwrap();
        assert_eq!((f.rate, f.outcome), (50_000.0, 50_000.0));
    }

    #[test]
    fn all_loss_finds_nothing_and_stops() {
        let mut rates = Vec::new();
        let s = search(1e6, &params(), |r| {
            rates.push(r);
            Ok((false, ()))
        })
        .unwrap();
        assert!(s.found.is_none());
        // Halving from 1e6 down to the 10 pps floor: 17 trials.
        assert_eq!(s.trials, 17);
        assert!(rates.iter().all(|&r| r >= 10.0));
        assert!(rates.windows(2).all(|w| w[1] < w[0]));
        // And the trial cap holds.
        let s = search(
            1e6,
            &SearchParams {
                max_trials: 3,
                ..params()
            },
            |_| Ok((false, ())),
        )
        .unwrap();
        assert_eq!((s.trials, s.found.is_none()), (3, true));
    }

    #[test]
    fn trial_errors_and_bad_bounds_surface() {
        let err = search(1e6, &params(), |_| -> Result<(bool, ())> { bail!("boom") });
        assert!(format!("{:#}", err.unwrap_err()).contains("boom"));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(search(bad, &params(), |_| Ok((true, ()))).is_err());
        }
        let p = SearchParams {
            resolution: 0.0,
            ..params()
        };
        assert!(search(1e6, &p, |_| Ok((true, ()))).is_err());
    }

    #[test]
    fn sizes_parse_and_are_checked() {
        assert_eq!(parse_sizes("64,128, 1518").unwrap(), vec![64, 128, 1518]);
        assert_eq!(parse_sizes("60").unwrap(), vec![60]);
        assert_eq!(parse_sizes("9000").unwrap(), vec![9000]);
        for bad in ["", "64,", "59", "9001", "70000", "64,abc", "-64", "1e3"] {
            let err = parse_sizes(bad).unwrap_err().to_string();
            assert!(err.contains("--size"), "{bad}: {err}");
        }
    }

    /// `--repeat`: a rate passes only when every run at it passes; the
    /// first failure ends its runs. On a flaky curve (every third run at
    /// a rate above the knee passes by luck) a single run can be fooled,
    /// three in a row cannot.
    #[test]
    fn repeated_trials_must_all_pass() {
        let knee = 1000.0;
        let p = SearchParams {
            resolution: 0.01,
            max_trials: 30,
            min_pps: 1.0,
        };
        for (repeat, fooled) in [(1u32, true), (3, false)] {
            let mut runs = 0u32;
            let mut at_rate = Vec::new();
            let s = search(4000.0, &p, |rate| {
                all_pass(repeat, |k| {
                    runs += 1;
                    at_rate.push((rate, k));
                    // Above the knee, the first run at a rate passes by luck.
                    Ok((rate <= knee || k == 0, rate))
                })
            })
            .unwrap();
            let found = s.found.expect("a rate passed").rate;
            assert_eq!(found > knee, fooled, "repeat {repeat}: found {found}");
            if repeat == 3 {
                assert!((knee * 0.99..=knee).contains(&found), "{found}");
                // A failing rate stops at its first failure (2 runs), a
                // passing one takes all 3.
                for w in at_rate.windows(2) {
                    if w[0].0 == w[1].0 {
                        assert_eq!(w[1].1, w[0].1 + 1);
                    }
                }
                assert!(runs <= 3 * s.trials);
            }
        }
        assert!(all_pass(0, |_| Ok((true, ()))).is_err());
        let (ok, last) = all_pass(4, |k| Ok((k < 2, k))).unwrap();
        assert!(!ok);
        assert_eq!(last, 2, "the failing run's measurement");
    }

    #[test]
    fn settings_are_checked() {
        let ok = ThroughputConfig::default();
        assert!(ok.validate().is_ok());
        let cases: [(ThroughputConfig, &str); 11] = [
            (
                ThroughputConfig {
                    sizes: vec![],
                    ..ok.clone()
                },
                "--size",
            ),
            (
                ThroughputConfig {
                    duration: Duration::ZERO,
                    ..ok.clone()
                },
                "--duration",
            ),
            (
                ThroughputConfig {
                    max_loss: 1.0,
                    ..ok.clone()
                },
                "--loss",
            ),
            (
                ThroughputConfig {
                    flows: 0,
                    ..ok.clone()
                },
                "--flows",
            ),
            (
                ThroughputConfig {
                    max_pps: Some(0.0),
                    ..ok.clone()
                },
                "--max-pps",
            ),
            (
                ThroughputConfig {
                    resolution: 1.5,
                    ..ok.clone()
                },
                "--resolution",
            ),
            (
                ThroughputConfig {
                    tx_threads: 0,
                    ..ok.clone()
                },
                "--tx-threads",
            ),
            (
                ThroughputConfig {
                    repeat: 0,
                    ..ok.clone()
                },
                "--repeat",
            ),
            (
                ThroughputConfig {
                    repeat: MAX_REPEAT + 1,
                    ..ok.clone()
                },
                "--repeat",
            ),
            (
                ThroughputConfig {
                    tx_threads: MAX_TX_THREADS + 1,
                    ..ok.clone()
                },
                "--tx-threads",
            ),
            (
                ThroughputConfig {
                    max_trials: 0,
                    ..ok.clone()
                },
                "--max-trials",
            ),
        ];
        for (c, opt) in cases {
            let err = c.validate().unwrap_err().to_string();
            assert!(err.contains(opt), "{opt}: {err}");
        }
        assert!(frames_for(1e6, Duration::from_secs(5)).is_ok());
        assert_eq!(frames_for(0.1, Duration::from_secs(1)).unwrap(), 1);
        let err = frames_for(2e7, Duration::from_secs(5)).unwrap_err();
        assert!(err.to_string().contains("--duration"), "{err}");
    }

    fn trial(pps: f64, p50: u64) -> Trial {
        Trial {
            offered_pps: pps,
            sent_pps: pps,
            offered: 1000,
            sent: 1000,
            received: 1000,
            lost: 0,
            loss: 0.0,
            kernel_dropped: 0,
            latency: Latency {
                count: 1000,
                p50,
                p99: p50 * 3,
                ..Latency::default()
            },
            verdict: Verdict::Pass,
        }
    }

    #[test]
    fn verdicts() {
        let t = trial(100_000.0, 1);
        assert_eq!(t.verdict(0.0), Verdict::Pass);
        let lossy = Trial {
            lost: 2,
            received: 998,
            loss: 0.002,
            ..t.clone()
        };
        assert_eq!(lossy.verdict(0.001), Verdict::Loss);
        assert_eq!(lossy.verdict(0.01), Verdict::Pass);
        // Sent everything, but at 90% of the rate asked: not this rate.
        let slow = Trial {
            sent_pps: 90_000.0,
            ..t.clone()
        };
        assert_eq!(slow.verdict(0.001), Verdict::SenderBehind);
        let close = Trial {
            sent_pps: 99_000.0,
            ..t
        };
        assert_eq!(close.verdict(0.001), Verdict::Pass);
    }

    #[test]
    fn table_rows_and_json_fields() {
        let rep = ThroughputReport {
            tx: Endpoint {
                interface: "eth0".into(),
                netns: Some("bp-a".into()),
            },
            rx: Endpoint {
                interface: "eth0".into(),
                netns: Some("bp-b".into()),
            },
            io: IoBackend::Ring,
            tx_threads: 4,
            repeat: 3,
            duration_s: 5.0,
            max_loss: 0.001,
            resolution: 0.01,
            flows: 1024,
            mbps_counts: MBPS_COUNTS,
            results: vec![
                SizeResult {
                    size: 64,
                    upper_pps: 1e6,
                    upper_from: UpperBound::TopSpeed,
                    zero_loss: Some(trial(500_000.0, 20_000)),
                    half_rate: Some(trial(250_000.0, 10_000)),
                    trials: vec![trial(500_000.0, 20_000)],
                },
                SizeResult {
                    size: 1518,
                    upper_pps: 1e5,
                    upper_from: UpperBound::MaxPps,
                    zero_loss: None,
                    half_rate: None,
                    trials: vec![trial(10.0, 1)],
                },
            ],
        };
        let mut out = Vec::new();
        rep.write_text(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("io ring, 4 senders"), "{text}");
        assert!(
            text.contains("5.000 s trials (3 per rate, all must pass)"),
            "{text}"
        );
        assert!(text.contains("as tcpreplay"), "{text}");
        assert!(
            text.contains(
                "| 64 | 500000 | 256.0 | 500000 | 1000 | 0.000000 | 20.0 | 60.0 | 10.0 | 30.0 |"
            ),
            "{text}"
        );
        assert!(text.contains("| 1518 | none"), "{text}");
        let v = serde_json::to_value(&rep).unwrap();
        assert_eq!(v["io"], "ring");
        assert_eq!(v["tx_threads"], 4);
        assert_eq!(v["repeat"], 3);
        assert_eq!(v["results"][0]["upper_from"], "top_speed");
        assert_eq!(v["results"][0]["zero_loss"]["offered_pps"], 500_000.0);
        assert!(v["results"][1]["zero_loss"].is_null());
    }
}
