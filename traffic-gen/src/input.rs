//! Reading the captures a replay sends: what is kept when a file has a
//! defect part-way, and the stop flag an operator's Ctrl-C sets.
//!
//! A capture cut by a copy, a record with a bogus length after good ones,
//! or garbage after a gzip member does not throw away the run: as tcpdump
//! and tshark do, the records before the defect are replayed, the defect
//! is recorded as an [`InputError`] (file, byte offset, reason, records
//! read before it) and the replay goes on with the next file. The report
//! carries the list (`input_errors` in the JSON) and `traffic-gen` exits
//! with its own status for "completed with input errors".
//!
//! What is refused up front is a file that cannot be opened at all or
//! whose file header is bad: [`check_headers`] opens every file before any
//! work, so one unreadable file out of several fails the run at once (as
//! tcpreplay does) instead of silently replaying a different input.

use std::collections::BTreeSet;
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Result, anyhow};
use dataplane::io::capture::{CaptureError, CaptureReader};
use serde::Serialize;

/// A defect part-way through a capture: where reading stopped and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InputError {
    /// The file, as it was named.
    pub file: String,
    /// Byte offset of the defect in the (decompressed) capture stream.
    pub offset: u64,
    /// What is wrong there (the capture reader's words).
    pub reason: String,
    /// Records read from the file before the defect (each was replayed).
    pub packets_read: u64,
}

impl InputError {
    /// The defect `e`, met after `packets_read` good records.
    pub fn of(e: &CaptureError, packets_read: u64) -> Self {
        InputError {
            file: e.file().to_string(),
            offset: e.offset(),
            reason: e.kind().to_string(),
            packets_read,
        }
    }
}

impl fmt::Display for InputError {
    /// `FILE: byte N: REASON (after K packets)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: byte {}: {} (after {} packets)",
            self.file, self.offset, self.reason, self.packets_read
        )
    }
}

/// The input errors of a run, each file's once however many passes
/// (`--loop`) meet it.
#[derive(Debug, Clone, Default)]
pub struct InputErrors {
    seen: BTreeSet<usize>,
    errors: Vec<InputError>,
}

impl InputErrors {
    /// Records the defect `e` of input file number `index` (its position on
    /// the command line), met after `packets_read` records, unless that
    /// file's defect is recorded already.
    pub fn note(&mut self, index: usize, e: &CaptureError, packets_read: u64) {
        if self.seen.insert(index) {
            self.errors.push(InputError::of(e, packets_read));
        }
    }

    /// The defects, in the order they were met.
    pub fn into_vec(self) -> Vec<InputError> {
        self.errors
    }
}

/// Opens every file and reads its header, so that a missing file or a bad
/// header fails before any work. Errors name the file, the byte offset and
/// the reason.
pub fn check_headers(files: &[PathBuf]) -> Result<()> {
    for f in files {
        CaptureReader::open(f).map_err(|e| anyhow!("{e}"))?;
    }
    Ok(())
}

/// An operator's request to stop (Ctrl-C, SIGTERM): a flag a signal
/// handler sets and the sender checks between frames and while it waits.
#[derive(Debug, Clone, Copy)]
pub struct Stop<'a>(Option<&'a AtomicBool>);

impl<'a> Stop<'a> {
    /// Stop when `flag` is set.
    pub fn on(flag: &'a AtomicBool) -> Self {
        Stop(Some(flag))
    }

    /// Never stop early.
    pub fn never() -> Self {
        Stop(None)
    }

    /// Whether the stop was requested.
    #[inline]
    pub fn requested(self) -> bool {
        self.0.is_some_and(|f| f.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::io::capture::CaptureErrorKind;

    #[test]
    fn one_error_per_file_in_order() {
        let cut = |file: &str, offset| {
            CaptureError::new(
                file,
                offset,
                CaptureErrorKind::Truncated {
                    what: "record data",
                    got: 3,
                    need: 60,
                },
            )
        };
        let mut errs = InputErrors::default();
        errs.note(1, &cut("b.pcap", 99), 7);
        errs.note(0, &cut("a.pcap", 40), 1);
        errs.note(1, &cut("b.pcap", 99), 7);
        let v = errs.into_vec();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].file, "b.pcap");
        assert_eq!(
            v[0].to_string(),
            "b.pcap: byte 99: record data cut short (3 of 60 bytes) (after 7 packets)"
        );
        assert_eq!(v[1].offset, 40);
    }

    #[test]
    fn stop_follows_its_flag() {
        let flag = AtomicBool::new(false);
        let stop = Stop::on(&flag);
        assert!(!stop.requested());
        flag.store(true, Ordering::Relaxed);
        assert!(stop.requested());
        assert!(!Stop::never().requested());
    }
}

/// `--limit` and `--duration`: where a replay stops short of its input's
/// end, as tcpreplay's `--limit` and `--duration` do (the embedded and the
/// live replay alike; with `--loop`, across the passes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// Stop after this many packets.
    pub packets: Option<u64>,
    /// Stop this long (wall clock) after the start.
    pub duration: Option<std::time::Duration>,
}

/// The limit that ended a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitReached {
    /// `--limit` packets were sent.
    Packets,
    /// `--duration` passed.
    Duration,
}

impl Limits {
    /// Whether a run that has sent `sent` packets since `start` must stop
    /// before the next one, and why. Reads the clock only with a duration.
    pub fn reached(&self, sent: u64, start: std::time::Instant) -> Option<LimitReached> {
        if self.packets.is_some_and(|n| sent >= n) {
            return Some(LimitReached::Packets);
        }
        if self.duration.is_some_and(|d| start.elapsed() >= d) {
            return Some(LimitReached::Duration);
        }
        None
    }

    /// The moment the duration ends, for waits that must not outlast it.
    pub fn deadline(&self, start: std::time::Instant) -> Option<std::time::Instant> {
        self.duration.map(|d| start + d)
    }
}

impl fmt::Display for LimitReached {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LimitReached::Packets => "--limit",
            LimitReached::Duration => "--duration",
        })
    }
}

/// How a replay ended and what its input needed, as the embedded and the
/// live report both print it (each line only when it applies).
#[derive(Debug, Clone, Copy)]
pub struct RunNotes<'a> {
    /// Packets sent.
    pub sent: u64,
    /// The operator stopped the run.
    pub interrupted: bool,
    /// `--limit` or `--duration` ended it.
    pub limit_reached: Option<LimitReached>,
    /// The pacing, as described in the report.
    pub pacing: &'a str,
    /// The share of the requested rate reached.
    pub rate_reached: Option<f64>,
    /// Records whose absurd original length was replaced.
    pub lengths_fixed: u64,
    /// Gaps in capture time longer than a minute.
    pub gaps: crate::pacing::LongGaps,
    /// The pacing waits for capture time (a multiplier), so it cut them.
    pub paced_by_capture_time: bool,
    /// The capture time the report covers, s (the embedded router's clock;
    /// `None` live).
    pub capture_span_s: Option<f64>,
}

impl RunNotes<'_> {
    /// The lines about how the run ended: interrupted, limit reached, rate
    /// not reached.
    pub fn write_ending(&self, w: &mut impl std::io::Write) -> std::io::Result<()> {
        let sent = self.sent;
        if self.interrupted {
            writeln!(
                w,
                "interrupted: stopped after {sent} packets, before the end of the input"
            )?;
        }
        if let Some(l) = self.limit_reached {
            writeln!(
                w,
                "{l} reached: stopped after {sent} packets, before the end of the input"
            )?;
        }
        if let Some(line) = crate::pacing::shortfall_warning(self.pacing, self.rate_reached) {
            writeln!(w, "{line}")?;
        }
        Ok(())
    }

    /// The lines about what the input needed: lengths replaced, gaps cut.
    pub fn write_input_fixes(&self, w: &mut impl std::io::Write) -> std::io::Result<()> {
        if self.lengths_fixed > 0 {
            writeln!(
                w,
                "input warning: {} records gave an original length above 16 MiB; their captured length was used",
                self.lengths_fixed
            )?;
        }
        let g = self.gaps;
        if g.count > 0 {
            let (them, it) = if g.count == 1 {
                ("gap", "it")
            } else {
                ("gaps", "them")
            };
            let pacing = if self.paced_by_capture_time {
                format!(
                    "--{} paced each as one minute of capture time ({:.3} s of the capture's timing skipped)",
                    self.pacing,
                    g.beyond_ns as f64 / 1e9
                )
            } else {
                format!("{} pacing does not wait for capture time", self.pacing)
            };
            let clock = match self.capture_span_s {
                Some(span) => format!(
                    ", and the router runs on capture time, so the {span:.3} s of capture time include {it}"
                ),
                None => String::new(),
            };
            writeln!(
                w,
                "capture time: {} {them} longer than a minute (the longest {:.3} s); {pacing}{clock}",
                g.count,
                g.longest_ns as f64 / 1e9
            )?;
        }
        Ok(())
    }
}
