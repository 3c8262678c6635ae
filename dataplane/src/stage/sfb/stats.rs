//! What SFB reports: its event counters, the flows in the penalty box, and
//! the `tc -s qdisc`-style snapshot ([`SfbStats`]).

use core::fmt;

use crate::clock::Timestamp;
use crate::flow::FlowKey;
use crate::stage::egress::fmt_rate;

use super::config::SFB_MAX_PROB;

/// SFB's event counters (`tc -s qdisc` shows these).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SfbCounters {
    /// Probabilistic drops.
    pub earlydrop: u64,
    /// Penalty-box drops.
    pub penaltydrop: u64,
    /// Drops at a full bin.
    pub bucketdrop: u64,
    /// Drops at the queue limit.
    pub queuedrop: u64,
    /// Packets admitted by SFB and refused by the queue.
    pub childdrop: u64,
    /// Packets marked CE (by Blue or by the fair-share check).
    pub marked: u64,
    /// Drops by the fair-share check (its flow's rate over the share).
    pub ratedrop: u64,
    /// Marks by the fair-share check (also in `marked`).
    pub ratemark: u64,
}

impl SfbCounters {
    /// Adds another queue's counters (workers' queues of one port).
    pub fn merge(&mut self, o: &SfbCounters) {
        self.earlydrop += o.earlydrop;
        self.penaltydrop += o.penaltydrop;
        self.bucketdrop += o.bucketdrop;
        self.queuedrop += o.queuedrop;
        self.childdrop += o.childdrop;
        self.marked += o.marked;
        self.ratedrop += o.ratedrop;
        self.ratemark += o.ratemark;
    }
}

/// The fair-share check's state at its last period boundary (the default
/// profile's; see [`FairRate`](super::FairRate)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct FairStats {
    /// The fair share, bit/s (0: the demands fit the link, no flow is
    /// judged).
    pub share_bps: u64,
    /// The flows the share was divided among: those over half of it and
    /// those held, by linear counting over the sketch's first row.
    pub competing: u32,
    /// First-row counters held as competing because Blue marked or
    /// dropped their flows in the last second and their rate has not come
    /// back.
    pub held: u32,
}

/// The highest bin count, highest probability and highest mean
/// probability of an SFB over the run ([`SfbStats::peak`]), each on its own
/// (they need not come from one moment).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SfbPeaks {
    /// Largest bin count.
    pub maxqlen: u16,
    /// Largest marking probability, Q0.16.
    pub maxprob: u16,
    /// Largest mean marking probability, Q0.16.
    pub avgprob: u16,
}

impl SfbPeaks {
    /// Each figure the larger of the two.
    pub fn max(self, o: SfbPeaks) -> SfbPeaks {
        SfbPeaks {
            maxqlen: self.maxqlen.max(o.maxqlen),
            maxprob: self.maxprob.max(o.maxprob),
            avgprob: self.avgprob.max(o.avgprob),
        }
    }
}

/// A flow in the penalty box.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PenalisedFlow {
    /// The flow.
    pub flow: FlowKey,
    /// Its first penalised packet (since it was listed).
    pub since: Timestamp,
    /// Its latest penalised packet.
    pub last: Timestamp,
    /// Packets the penalty bucket admitted.
    pub admitted: u64,
    /// Packets the penalty bucket dropped.
    pub dropped: u64,
}

/// A snapshot of SFB's state as `tc -s qdisc show` reports it, plus the
/// flows in the penalty box. `Display` prints it like `tc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SfbStats {
    /// Event counters.
    pub counters: SfbCounters,
    /// Largest bin count in the active set.
    pub maxqlen: u16,
    /// Largest probability in the active set, Q0.16.
    pub maxprob: u16,
    /// Mean probability over the active set, Q0.16 (integer mean, as the kernel).
    pub avgprob: u16,
    /// The highest `maxqlen`, `maxprob` and `avgprob` over the run: the
    /// three above are now (as `tc` reports them), these are their
    /// maxima, sampled before each batch the queue takes, at most every
    /// [`PEAK_SAMPLE_NS`](super::PEAK_SAMPLE_NS) of its clock, and now.
    pub peak: SfbPeaks,
    /// Flows recently penalised, most recent first.
    pub penalised: Vec<PenalisedFlow>,
    /// The fair-share check's state (`None`: `profile = "linux"`).
    pub fair: Option<FairStats>,
}

impl fmt::Display for SfbStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.counters;
        let p = |v: u16| f64::from(v) / f64::from(SFB_MAX_PROB);
        writeln!(
            f,
            "  earlydrop {} penaltydrop {} bucketdrop {} queuedrop {} childdrop {} marked {} ratedrop {} ratemark {}",
            c.earlydrop,
            c.penaltydrop,
            c.bucketdrop,
            c.queuedrop,
            c.childdrop,
            c.marked,
            c.ratedrop,
            c.ratemark
        )?;
        write!(
            f,
            "  maxqlen {} maxprob {:.5} avgprob {:.5} now, peak maxqlen {} maxprob {:.5} avgprob {:.5} over the run",
            self.maxqlen,
            p(self.maxprob),
            p(self.avgprob),
            self.peak.maxqlen,
            p(self.peak.maxprob),
            p(self.peak.avgprob)
        )?;
        if let Some(fair) = &self.fair {
            write!(f, "\n  {fair}")?;
        }
        if !self.penalised.is_empty() {
            write!(f, "\n  penalty box {} flows", self.penalised.len())?;
            for e in &self.penalised {
                write!(
                    f,
                    "\n    {} admitted {} dropped {} since {}",
                    e.flow, e.admitted, e.dropped, e.since
                )?;
            }
        }
        Ok(())
    }
}

impl fmt::Display for FairStats {
    /// `fairshare 1.234Mbit competing 17 held 3` (`fairshare none` when
    /// the demands fit).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.share_bps {
            0 => write!(f, "fairshare none")?,
            // Kept to kbit/s, in tc's units.
            b => write!(f, "fairshare {}", fmt_rate(b / 1000 * 1000))?,
        }
        write!(f, " competing {} held {}", self.competing, self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::sfb::{Sfb, SfbConfig};

    #[test]
    fn stats_display_like_tc() {
        let sfb = Sfb::new(SfbConfig {
            seed: Some(1),
            ..SfbConfig::default()
        })
        .unwrap();
        let s = sfb.stats(Timestamp::ZERO).to_string();
        assert_eq!(
            s,
            "  earlydrop 0 penaltydrop 0 bucketdrop 0 queuedrop 0 childdrop 0 marked 0 ratedrop 0 ratemark 0\n  \
             maxqlen 0 maxprob 0.00000 avgprob 0.00000 now, peak maxqlen 0 maxprob 0.00000 avgprob 0.00000 over the run\n  \
             fairshare none competing 0 held 0"
        );
        let fair = FairStats {
            share_bps: 1_234_567,
            competing: 17,
            held: 3,
        };
        assert_eq!(fair.to_string(), "fairshare 1.234Mbit competing 17 held 3");
    }
}
