//! The live router's peering control thread ([`crate::peer`]).
//!
//! One thread owns the [`PeerControl`]. Every worker's forwarding stage
//! hands it the datagrams addressed to the router's peering port over one
//! bounded channel (full: dropped and counted by the stage) and takes its
//! datagrams from another, to send as frames of the router's own; every
//! worker's multicast stage receives the neighbours' filters, per port,
//! whenever one changes. Worker 0 publishes the groups joined on the host
//! ports at its ticks (its multicast stage is a replica of the whole
//! membership state), and the heavy-flow reporter the flows of each merged
//! epoch. The thread wakes at least every 10 ms for the protocol's timers,
//! and keeps its latest figures where the stats and metrics read them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use crossbeam_channel::{Receiver, Sender, bounded, unbounded};
use kernels::bloom::Bloom;

use crate::flow::FlowKey;
use crate::peer::{Datagram, Inbound, PeerControl, PeerTap, PeeringConfig, PeeringReport};
use crate::stage::multicast::GroupKey;

/// Datagrams waiting for the control thread, at most (a flood beyond it is
/// dropped by the forwarding stage, counted).
pub const INBOUND_QUEUE: usize = 4096;
/// Datagrams waiting for a worker to send them.
pub const OUTBOUND_QUEUE: usize = 4096;

/// The latest figures of the control path (`None` before the first).
pub type ReportSlot = Arc<Mutex<Option<PeeringReport>>>;

/// What the workers and the owner hold of the running control thread.
#[derive(Debug)]
pub struct Peering {
    thread: Option<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    report: ReportSlot,
    /// Worker 0 sends the host ports' groups here.
    pub groups: Sender<Vec<GroupKey>>,
    /// The heavy-flow reporter sends detected flows here.
    pub flows: Sender<Vec<FlowKey>>,
    /// The ports that face peers (the rest are host ports).
    pub peer_ports: u64,
}

/// One worker's ends: its forwarding stage's tap and its multicast stage's
/// filters.
pub type WorkerEnds = (PeerTap, Receiver<Vec<Option<Bloom>>>);

/// Unix nanoseconds now.
fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl Peering {
    /// Starts the control thread of `cfg` for a router of `ports` ports and
    /// `workers` workers; returns it and each worker's ends.
    ///
    /// # Errors
    /// Settings the control path refuses, or a thread that cannot start.
    pub fn start(
        cfg: PeeringConfig,
        ports: usize,
        workers: usize,
    ) -> Result<(Peering, Vec<WorkerEnds>), super::RouterError> {
        let udp_port = cfg.udp_port;
        let peer_ports = cfg.peers.iter().fold(0u64, |m, p| {
            m | 1u64.checked_shl(u32::from(p.port)).unwrap_or(0)
        });
        let mut control = PeerControl::new(cfg, wall_ns())?;
        let (in_tx, in_rx) = bounded::<Inbound>(INBOUND_QUEUE);
        let (out_tx, out_rx) = bounded::<Datagram>(OUTBOUND_QUEUE);
        let (groups_tx, groups_rx) = unbounded::<Vec<GroupKey>>();
        let (flows_tx, flows_rx) = unbounded::<Vec<FlowKey>>();
        let mut remote_txs = Vec::new();
        let mut ends = Vec::new();
        for _ in 0..workers {
            let (tx, rx) = unbounded();
            remote_txs.push(tx);
            ends.push((
                PeerTap {
                    udp_port,
                    inbound: in_tx.clone(),
                    outbound: out_rx.clone(),
                },
                rx,
            ));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let report: ReportSlot = Arc::new(Mutex::new(None));
        let thread = {
            let (stop, report) = (stop.clone(), report.clone());
            std::thread::Builder::new()
                .name("bp-peering".into())
                .spawn(move || {
                    let mut published = u64::MAX;
                    let mut last_report = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        if let Ok(m) = in_rx.recv_timeout(Duration::from_millis(10)) {
                            let now = wall_ns();
                            control.receive(m.from, m.ingress, &m.payload, now);
                            for m in in_rx.try_iter().take(INBOUND_QUEUE) {
                                control.receive(m.from, m.ingress, &m.payload, now);
                            }
                        }
                        let now = wall_ns();
                        if let Some(g) = groups_rx.try_iter().last() {
                            control.set_local_groups(g);
                        }
                        for f in flows_rx.try_iter() {
                            control.detected(f, now);
                        }
                        control.tick(now);
                        for d in control.take_outgoing() {
                            // A full queue (workers not sending): the
                            // protocol repeats what matters.
                            let _ = out_tx.try_send(d);
                        }
                        if control.filters_version() != published {
                            published = control.filters_version();
                            let f = control.remote_filters(ports);
                            for tx in &remote_txs {
                                let _ = tx.send(f.clone());
                            }
                        }
                        if now.saturating_sub(last_report) >= 100_000_000 {
                            last_report = now;
                            if let Ok(mut r) = report.lock() {
                                *r = Some(control.report(now));
                            }
                        }
                    }
                    if let Ok(mut r) = report.lock() {
                        *r = Some(control.report(wall_ns()));
                    }
                })
                .map_err(|err| super::RouterError::Thread {
                    name: "bp-peering",
                    err,
                })?
        };
        Ok((
            Peering {
                thread: Some(thread),
                stop,
                report,
                groups: groups_tx,
                flows: flows_tx,
                peer_ports,
            },
            ends,
        ))
    }

    /// Where the latest figures are kept.
    pub fn report_slot(&self) -> ReportSlot {
        self.report.clone()
    }

    /// Stops the thread; its last figures.
    pub fn stop(mut self) -> Option<PeeringReport> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.report.lock().ok().and_then(|r| r.clone())
    }
}

impl Drop for Peering {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The groups joined on the host ports (`peer_ports` left out) of a
/// multicast stage's membership state, sorted.
pub fn host_groups(m: &crate::stage::multicast::MulticastStage, peer_ports: u64) -> Vec<GroupKey> {
    let c = m.control();
    let mut v: Vec<GroupKey> = (0..c.ports())
        .filter(|&p| peer_ports & 1u64.checked_shl(p as u32).unwrap_or(0) == 0)
        .flat_map(|p| c.members(p))
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}
