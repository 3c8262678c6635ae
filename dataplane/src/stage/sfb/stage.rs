//! [`SfbStage`]: the pipeline stage over one egress port's [`SfbQueue`].

use std::any::Any;

use serde::Deserialize;

use crate::clock::Timestamp;
use crate::flow::FlowKey;
use crate::pipeline::{Batch, DropReason, Stage};
use crate::stage::egress::{Departure, EgressConfig};
use crate::wire::set_ce;

use super::config::{SfbConfig, SfbConfigError};
use super::keys::PortKeys;
use super::queue::{Arrival, Enqueued, SfbQueue};
use super::stats::SfbStats;

/// Settings of an [`SfbStage`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SfbStageConfig {
    /// The egress port this stage queues for.
    pub port: u8,
    /// SFB.
    pub sfb: SfbConfig,
    /// The port's queue and shaper.
    pub egress: EgressConfig,
    /// Keep every departure for [`SfbStage::take_departures`] (per-packet
    /// sojourn times); off, only the queue's aggregate counters are kept.
    pub record_departures: bool,
}

impl Default for SfbStageConfig {
    fn default() -> Self {
        SfbStageConfig {
            port: 1,
            sfb: SfbConfig::default(),
            egress: EgressConfig::default(),
            record_departures: false,
        }
    }
}

/// The pipeline stage: SFB and the shaped queue of one egress port.
///
/// Per batch: the SFB clock is ticked at `now`; the live packets going out
/// of `port` are hashed in one [`KeyBatch`] per address family present
/// (IPv4 at four words, IPv6 at ten; frames without a flow key share the
/// all-zero key); then packet by packet, at the packet's time (its capture
/// time, kept between the previous packet's and `now`), the queue is
/// drained to that time and the packet offered. The verdict follows: a drop
/// removes `port` from the packet's ports (the packet is dropped when none
/// is left), a mark sets ECN CE in the frame and turns the verdict into
/// [`Verdict::Mark`]. Finally the queue is drained to `now`.
///
/// The frame itself is not held: the pipeline forwards it at once, and the
/// queue holds its length, flow and timing, so what the stage models is the
/// port's queueing delay and SFB's decisions (in replay, exactly).
///
/// [`KeyBatch`]: super::KeyBatch
/// [`Verdict::Mark`]: crate::pipeline::Verdict::Mark
#[derive(Debug)]
pub struct SfbStage {
    cfg: SfbStageConfig,
    queue: SfbQueue<Option<FlowKey>>,
    keys: PortKeys,
    last: Timestamp,
    departures: Vec<Departure<Option<FlowKey>>>,
    /// The batch's outcomes, in [`PortKeys`] order.
    verdicts: Vec<Result<Enqueued, DropReason>>,
}

impl SfbStage {
    /// A stage for `cfg.port`.
    pub fn new(cfg: SfbStageConfig) -> Result<Self, SfbConfigError> {
        Ok(SfbStage {
            cfg,
            queue: SfbQueue::new(cfg.sfb, cfg.egress)?,
            keys: PortKeys::new(),
            last: Timestamp::ZERO,
            departures: Vec::new(),
            verdicts: Vec::new(),
        })
    }

    /// The port's SFB queue.
    pub fn queue(&self) -> &SfbQueue<Option<FlowKey>> {
        &self.queue
    }

    /// SFB's snapshot at `now` (`tc -s qdisc` style when displayed).
    pub fn stats(&self, now: Timestamp) -> SfbStats {
        self.queue.sfb().stats(now)
    }

    /// Moves the recorded departures into `out` (with `record_departures`).
    pub fn take_departures(&mut self, out: &mut Vec<Departure<Option<FlowKey>>>) {
        out.append(&mut self.departures);
    }

    fn drain(&mut self, now: Timestamp) {
        let record = self.cfg.record_departures;
        let deps = &mut self.departures;
        self.queue.drain_until(now, |d| {
            if record {
                deps.push(d);
            }
        });
    }
}

impl Stage for SfbStage {
    fn name(&self) -> &'static str {
        "sfb"
    }

    fn process(&mut self, batch: &mut Batch, now: Timestamp) {
        let port = self.cfg.port;
        self.queue.sfb_mut().tick(now);
        if self.keys.gather(batch, port, false) == 0 {
            self.drain(now);
            return;
        }
        self.keys.hash(self.queue.sfb());
        let keys = &self.keys;
        let last = &mut self.last;
        let record = self.cfg.record_departures;
        let departures = &mut self.departures;
        let verdicts = &mut self.verdicts;
        verdicts.clear();
        let packets = batch.packets();
        self.queue.offer_batch(
            (0..keys.len()).map(|k| {
                let p = &packets[keys.packet(k)];
                let t = p.ts.min(now).max(*last);
                *last = t;
                let flow = p.parsed.and_then(|x| x.flow);
                let a = Arrival {
                    key: keys.key(k),
                    ecn_capable: p.parsed.is_some_and(|x| x.ecn.is_ect()),
                    item: flow,
                    len: p.orig_len,
                    now: t,
                };
                (a, flow)
            }),
            |_, v| verdicts.push(v),
            |d| {
                if record {
                    departures.push(d);
                }
            },
        );
        for (k, &res) in self.verdicts.iter().enumerate() {
            let p = &mut batch.packets_mut()[self.keys.packet(k)];
            match res {
                Ok(Enqueued::Forward) => {}
                Ok(Enqueued::Mark) => {
                    if let Some(parsed) = p.parsed {
                        set_ce(p.data_mut(), &parsed);
                    }
                    p.mark();
                }
                Err(reason) => p.drop_port(port, reason),
            }
        }
        self.drain(now);
    }

    /// Drains the queue completely (every packet at the time the shaper
    /// releases it), so the last sojourns are recorded and the bins empty.
    fn finish(&mut self, now: Timestamp) {
        let _ = now;
        self.drain(Timestamp::from_nanos(u64::MAX));
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
