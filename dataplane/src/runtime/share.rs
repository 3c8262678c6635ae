//! Multicast group memberships and learned neighbours shared between
//! workers.
//!
//! Each worker's [`MulticastStage`](crate::stage::multicast::MulticastStage) is a replica of one membership state
//! (see "Replicas" in [`crate::stage::multicast`]): the joins and leaves it
//! learns from the reports its sockets deliver are sent, as
//! [`MembershipEvent`]s, to every other worker, which applies them between
//! its batches. A [`MembershipLink`] is one worker's end: an inbox (one
//! unbounded crossbeam channel per worker) and a sender to each other
//! worker's inbox, so events of one worker arrive everywhere in the order
//! it learned them. Nothing here is touched per packet; per batch, a
//! worker looks at its inbox (empty: two atomic loads) and takes the
//! events its stage queued.
//!
//! The worker loop ([`super::worker`]) applies the inbox before each batch,
//! so the batch's data sees every join another worker sent before it
//! began; then runs the batch; then sends the joins and leaves the batch
//! taught at once. A join is thus in force on the worker that saw
//! it from the batch that carries it, and on every other worker from the
//! first batch that worker begins after that one ended.
//!
//! The channels are unbounded: an event is never dropped (a lost join would
//! be a false negative). Events come only from IGMP/MLD reports, and each
//! worker empties its inbox before every batch and at every tick.
//!
//! The same links carry the neighbours the forwarding stage learns
//! ([`NeighbourEvent`]: an ARP reply or neighbour advertisement may reach
//! another worker than the one holding the packets that wait for it), so
//! every worker's table holds every neighbour any worker saw.

use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use crate::chain::Chain;
use crate::clock::Timestamp;
use crate::packet::Batch;
use crate::packet::Transmit;
use crate::stage::forward::NeighbourEvent;
use crate::stage::multicast::MembershipEvent;

/// What a worker tells the others.
#[derive(Debug, Clone, Copy)]
enum Shared {
    Membership(MembershipEvent),
    Neighbour(NeighbourEvent),
}

/// How long after its timer a membership still stands on a worker, so that
/// a refresh learned by another worker at about that time, and still in
/// flight, cannot lose to the timer. Events take one batch of the slowest
/// worker to cross (microseconds to a few milliseconds); a second is far
/// beyond that and adds at most a second of copies after a host goes away
/// silently (the membership interval is 260 s).
pub const EXPIRY_GRACE: Duration = Duration::from_secs(1);

/// One worker's end of the membership exchange.
#[derive(Debug)]
pub struct MembershipLink {
    id: u16,
    inbox: Receiver<Shared>,
    peers: Vec<Sender<Shared>>,
}

/// The links of `workers` workers, each connected to every other; link `i`
/// is worker `i`'s.
///
/// # Panics
/// If `workers` exceeds `u16::MAX` (the replica ids).
pub fn links(workers: usize) -> Vec<MembershipLink> {
    assert!(workers <= usize::from(u16::MAX), "{workers} workers");
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..workers).map(|_| crossbeam_channel::unbounded()).unzip();
    rxs.into_iter()
        .enumerate()
        .map(|(id, inbox)| MembershipLink {
            id: id as u16,
            inbox,
            peers: txs
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != id)
                .map(|(_, tx)| tx.clone())
                .collect(),
        })
        .collect()
}

impl MembershipLink {
    /// The worker this link belongs to (its replica id).
    pub fn id(&self) -> usize {
        usize::from(self.id)
    }

    /// Makes `chain`'s multicast stage this worker's replica (id, and
    /// [`EXPIRY_GRACE`]) and has its forwarding stage report the
    /// neighbours it learns. `false` if the chain has neither stage.
    pub fn attach(&self, chain: &mut Chain) -> bool {
        let mut any = false;
        if let Some(m) = chain.multicast_mut() {
            let grace = u64::try_from(EXPIRY_GRACE.as_nanos()).unwrap_or(u64::MAX);
            m.control_mut().share(self.id, grace);
            any = true;
        }
        if let Some(f) = chain.forward_mut() {
            f.share_neighbours();
            any = true;
        }
        any
    }

    /// Applies every event the other workers have sent so far; returns how
    /// many. The stage publishes the changes to its data path at the start
    /// of its next batch.
    pub fn receive(&self, chain: &mut Chain) -> usize {
        if self.inbox.is_empty() {
            return 0;
        }
        let mut n = 0;
        while let Ok(e) = self.inbox.try_recv() {
            match e {
                Shared::Membership(e) => {
                    if let Some(m) = chain.multicast_mut() {
                        m.control_mut().apply(&e);
                    }
                }
                Shared::Neighbour(e) => {
                    if let Some(f) = chain.forward_mut() {
                        f.apply_neighbour(&e);
                    }
                }
            }
            n += 1;
        }
        n
    }

    /// Sends the events the stage learned since the last call to every
    /// other worker; returns how many. A worker that has exited is skipped.
    pub fn send(&self, chain: &mut Chain) -> usize {
        let mut n = 0;
        if let Some(m) = chain.multicast_mut() {
            let control = m.control_mut();
            if control.has_events() {
                for e in control.take_events() {
                    for p in &self.peers {
                        let _ = p.send(Shared::Membership(e));
                    }
                    n += 1;
                }
            }
        }
        if let Some(f) = chain.forward_mut() {
            for e in f.take_neighbour_events() {
                for p in &self.peers {
                    let _ = p.send(Shared::Neighbour(e));
                }
                n += 1;
            }
        }
        n
    }
}

/// Runs one batch through a worker's chain the way the worker loop does:
/// the other workers' events, the batch, then this batch's events out.
/// Without a link (one worker, or no multicast stage) it is
/// [`Chain::process`].
pub fn process(
    chain: &mut Chain,
    link: Option<&MembershipLink>,
    batch: &mut Batch,
    now: Timestamp,
    tx: &mut impl Transmit,
) {
    chain.process_local(batch, now);
    process_shared(chain, link, batch, now, tx);
}

/// The steps of [`process`] after [`Chain::process_local`]: the other
/// workers' events, [`Chain::process_shared`], then this batch's events
/// out. The worker loop runs it in its turn ([`Ports::take_turn`]).
///
/// [`Ports::take_turn`]: crate::io::port::Ports::take_turn
pub fn process_shared(
    chain: &mut Chain,
    link: Option<&MembershipLink>,
    batch: &mut Batch,
    now: Timestamp,
    tx: &mut impl Transmit,
) {
    if let Some(l) = link {
        l.receive(chain);
    }
    chain.process_shared(batch, now, tx);
    if let Some(l) = link {
        l.send(chain);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RouterConfig;
    use crate::stage::multicast::{MulticastStage, group_key};

    fn mc(p: &mut Chain) -> &mut MulticastStage {
        p.multicast_mut().unwrap()
    }

    fn chain(multicast: bool) -> Chain {
        let mut text = String::from("[[interfaces]]\nname = \"a\"\n[[interfaces]]\nname = \"b\"\n");
        if multicast {
            text.push_str("[multicast]\nseed = 1\n");
        }
        Chain::build(&RouterConfig::from_toml_str(&text, "test").unwrap()).unwrap()
    }

    fn pipeline() -> Chain {
        chain(true)
    }

    #[test]
    fn every_event_reaches_every_other_worker_once() {
        let links = links(3);
        let mut p: Vec<Chain> = (0..3).map(|_| pipeline()).collect();
        for (l, p) in links.iter().zip(&mut p) {
            assert!(l.attach(p));
        }
        let g = group_key("239.1.1.1".parse().unwrap());
        mc(&mut p[1])
            .control_mut()
            .join(1, g, Timestamp::from_nanos(5));
        assert_eq!(links[1].send(&mut p[1]), 1);
        assert_eq!(links[1].send(&mut p[1]), 0, "sent once");
        for i in [0, 2] {
            assert_eq!(links[i].receive(&mut p[i]), 1);
            assert!(mc(&mut p[i]).control().is_member(1, &g));
            assert_eq!(links[i].send(&mut p[i]), 0, "applied, not re-sent");
        }
        assert_eq!(links[1].receive(&mut p[1]), 0, "not back to its sender");
        let c: Vec<_> = p.iter_mut().map(|p| mc(p).counters()).collect();
        assert_eq!(
            c.iter()
                .map(|c| (c.events_sent, c.events_applied, c.joins))
                .collect::<Vec<_>>(),
            [(0, 1, 0), (1, 0, 1), (0, 1, 0)]
        );
    }

    #[test]
    fn learned_neighbours_reach_every_worker() {
        let text = "[[interfaces]]\nname = \"a\"\naddresses = [\"10.0.0.1/24\"]\n\
                    [[interfaces]]\nname = \"b\"\naddresses = [\"10.0.1.1/24\"]\n";
        let cfg = RouterConfig::from_toml_str(text, "test").unwrap();
        let links = links(2);
        let mut p: Vec<Chain> = (0..2).map(|_| Chain::build(&cfg).unwrap()).collect();
        for (l, p) in links.iter().zip(&mut p) {
            assert!(l.attach(p));
        }
        // An ARP request from 10.0.0.9 for the router, seen by worker 0.
        let mut arp = vec![0xff; 6];
        arp.extend_from_slice(&[2, 0, 0, 0, 0, 9, 0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
        arp.extend_from_slice(&[2, 0, 0, 0, 0, 9, 10, 0, 0, 9, 0, 0, 0, 0, 0, 0, 10, 0, 0, 1]);
        let mut b = Batch::new();
        let t = Timestamp::from_nanos(1_000);
        b.push_from(
            t,
            arp.len() as u32,
            crate::wire::LinkType::Ethernet,
            0,
            &arp,
        );
        let mut tx = crate::io::memory::MemoryPorts::new(2);
        process(&mut p[0], Some(&links[0]), &mut b, t, &mut tx);
        assert_eq!(links[1].receive(&mut p[1]), 1);
        let a = "10.0.0.9".parse().unwrap();
        let mac = crate::addr::MacAddr([2, 0, 0, 0, 0, 9]);
        for c in &p {
            assert_eq!(c.forward().unwrap().neighbours().get(a, t), Some(mac));
        }
        assert_eq!(links[1].send(&mut p[1]), 0, "applied, not re-sent");
    }

    #[test]
    fn no_multicast_stage_no_sharing() {
        let mut p = chain(false);
        let l = links(2);
        assert!(!l[0].attach(&mut p));
        assert_eq!((l[0].receive(&mut p), l[0].send(&mut p)), (0, 0));
    }
}
