//! Multicast memberships shared between the live router's workers, without
//! sockets: two worker pipelines built as `dataplane run` builds them
//! (`runtime::build_workers`), each batch run as a worker runs it
//! (`runtime::share::process`: the other workers' events, the batch, this
//! batch's events out). A join, a leave and a refresh seen by one worker
//! act on the other; and, as a property, replicas that receive the same
//! events in any order (each sender's in its own order) end with the same
//! memberships and timers as one stage that saw every event in stamp order.

use std::collections::VecDeque;
use std::net::Ipv4Addr;

use dataplane::chain::Chain;
use dataplane::clock::Timestamp;
use dataplane::config::RouterConfig;
use dataplane::io::memory::MemoryPorts;
use dataplane::pipeline::{DropReason, PortSet, Verdict};
use dataplane::runtime::build_workers;
use dataplane::runtime::share::{self, EXPIRY_GRACE, MembershipLink};
use dataplane::stage::multicast::{
    GROUP_MEMBERSHIP_INTERVAL_NS, GroupKey, MembershipEvent, MulticastConfig, MulticastCounters,
    MulticastStage, group_key,
};
use kernels::Hasher;
use kernels::bloom::{Layout, Params};
use kernels::splitmix64 as mix;
use proptest::prelude::*;

mod multicast_common;
use multicast_common::{batch, data_frame, igmp_v2, verdicts};

const SEC: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;

/// Ports: A = 0 (the sender), B = 1 (the listener), C = 2.
const A: u8 = 0;
const B: u8 = 1;
const G: Ipv4Addr = Ipv4Addr::new(239, 5, 6, 7);

const CONFIG: &str = r#"
[workers]
count = 2

[[interfaces]]
name = "a0"
[[interfaces]]
name = "b0"
[[interfaces]]
name = "c0"

[multicast]
seed = 11
"#;

/// A worker's chain and its end of the membership exchange.
type WorkerPipeline = (Chain, Option<MembershipLink>);

fn workers() -> Vec<WorkerPipeline> {
    let cfg = RouterConfig::from_toml_str(CONFIG, "workers.toml").unwrap();
    let w = build_workers(&cfg, cfg.workers.resolved_count()).unwrap();
    assert_eq!(w.len(), 2);
    for (i, w) in w.iter().enumerate() {
        assert_eq!(w.1.as_ref().map(|l| l.id()), Some(i), "worker {i} linked");
    }
    w
}

/// One batch on worker `w` at `now`, as the runtime runs it.
fn step(w: &mut WorkerPipeline, frames: &[(u8, Vec<u8>)], now: u64) -> Vec<Verdict> {
    let mut b = batch(frames, now);
    let mut sink = MemoryPorts::new(3);
    share::process(
        &mut w.0,
        w.1.as_ref(),
        &mut b,
        Timestamp::from_nanos(now),
        &mut sink,
    );
    verdicts(&b)
}

fn stage(w: &WorkerPipeline) -> &MulticastStage {
    w.0.multicast().unwrap()
}

fn counters(w: &WorkerPipeline) -> MulticastCounters {
    stage(w).counters()
}

fn is_member(w: &WorkerPipeline) -> bool {
    stage(w)
        .control()
        .is_member(usize::from(B), &group_key(G.into()))
}

fn to_b() -> Verdict {
    Verdict::Forward(PortSet::single(B))
}

const NO_ROUTE: Verdict = Verdict::Drop(DropReason::NoRoute);
const CONSUMED: Verdict = Verdict::Consumed;

#[test]
fn join_seen_by_one_worker_forwards_on_the_other() {
    let mut w = workers();
    // B's IGMPv2 report hashes to worker 1 and is consumed there.
    assert_eq!(step(&mut w[1], &[(B, igmp_v2(0x16, G))], SEC), [CONSUMED]);
    assert!(is_member(&w[1]));
    assert!(!is_member(&w[0]), "worker 0 has not seen it yet");
    // A's data to G hashes to worker 0, whose next batch applies the join
    // first.
    assert_eq!(
        step(&mut w[0], &[(A, data_frame(G.into()))], SEC + MS),
        [to_b()]
    );
    assert!(is_member(&w[0]));
    let (c0, c1) = (counters(&w[0]), counters(&w[1]));
    assert_eq!((c1.joins, c1.events_sent, c1.events_applied), (1, 1, 0));
    assert_eq!((c0.joins, c0.events_sent, c0.events_applied), (0, 0, 1));
    assert_eq!((c0.forwarded, c0.copies), (1, 1));
    // Applied, not sent back: worker 1 has nothing to apply.
    step(&mut w[1], &[], SEC + 2 * MS);
    assert_eq!(counters(&w[1]).events_applied, 0);
}

#[test]
fn leave_seen_by_one_worker_stops_the_other() {
    let mut w = workers();
    step(&mut w[1], &[(B, igmp_v2(0x16, G))], SEC);
    assert_eq!(
        step(&mut w[0], &[(A, data_frame(G.into()))], SEC + MS),
        [to_b()]
    );
    // The leave reaches worker 1 only.
    assert_eq!(
        step(&mut w[1], &[(B, igmp_v2(0x17, G))], 2 * SEC),
        [CONSUMED]
    );
    assert!(!is_member(&w[1]));
    assert_eq!(
        step(&mut w[0], &[(A, data_frame(G.into()))], 2 * SEC + MS),
        [NO_ROUTE]
    );
    assert!(!is_member(&w[0]));
    let (c0, c1) = (counters(&w[0]), counters(&w[1]));
    assert_eq!((c1.leaves, c1.events_sent), (1, 2));
    assert_eq!((c0.leaves, c0.events_applied, c0.suppressed), (0, 2, 1));
}

#[test]
fn refresh_seen_by_one_worker_rearms_the_timer_on_both() {
    let gmi = GROUP_MEMBERSHIP_INTERVAL_NS;
    let grace = EXPIRY_GRACE.as_nanos() as u64;
    let mut w = workers();
    // Joined on worker 1 at 1 s, refreshed on worker 0 at 200 s.
    step(&mut w[1], &[(B, igmp_v2(0x16, G))], SEC);
    step(&mut w[0], &[(B, igmp_v2(0x16, G))], 200 * SEC);
    assert_eq!(counters(&w[0]).refreshes, 1);
    // Past the first timer (and its grace), worker 1 still forwards: the
    // refresh it never saw re-armed its timer.
    let t = SEC + gmi + grace + MS;
    assert_eq!(step(&mut w[1], &[(A, data_frame(G.into()))], t), [to_b()]);
    assert_eq!(step(&mut w[0], &[(A, data_frame(G.into()))], t), [to_b()]);
    // Within the grace after the refreshed timer both still forward...
    let end = 200 * SEC + gmi;
    for w in w.iter_mut() {
        assert_eq!(
            step(w, &[(A, data_frame(G.into()))], end + grace / 2),
            [to_b()]
        );
    }
    // ...and past it neither does, each having expired it once.
    for w in w.iter_mut() {
        assert_eq!(
            step(w, &[(A, data_frame(G.into()))], end + grace),
            [NO_ROUTE]
        );
        assert!(!is_member(w));
        assert_eq!(counters(w).expiries, 1);
    }
}

#[test]
fn one_worker_shares_nothing() {
    let cfg = RouterConfig::from_toml_str(CONFIG, "workers.toml").unwrap();
    let mut w = build_workers(&cfg, 1).unwrap();
    assert!(w[0].1.is_none());
    step(&mut w[0], &[(B, igmp_v2(0x16, G))], SEC);
    assert_eq!(counters(&w[0]).events_sent, 0);
    // Expiry at the timer itself, no grace.
    let v = step(
        &mut w[0],
        &[(A, data_frame(G.into()))],
        SEC + GROUP_MEMBERSHIP_INTERVAL_NS,
    );
    assert_eq!(v, [NO_ROUTE]);
}

// ------------------------------------------------------ convergence

const REPLICAS: usize = 3;
const PORTS: usize = 4;
const GROUPS: usize = 5;

/// A report one replica sees: (replica, port, group, join?, seconds since
/// that replica's previous report).
type Report = (usize, u8, usize, bool, u64);

fn report() -> impl Strategy<Value = Report> {
    (
        0..REPLICAS,
        0..PORTS as u8,
        0..GROUPS,
        prop::bool::weighted(0.6),
        0u64..3,
    )
}

fn replica(params: Params) -> MulticastStage {
    MulticastStage::with_params(
        &MulticastConfig::with_ports(PORTS),
        params,
        Hasher::with_seed(5),
    )
    .unwrap()
}

fn members(s: &MulticastStage, groups: &[GroupKey]) -> Vec<(usize, usize)> {
    let mut v = Vec::new();
    for p in 0..PORTS {
        for (g, k) in groups.iter().enumerate() {
            if s.control().is_member(p, k) {
                v.push((p, g));
            }
        }
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Replicas learn reports each on its own clock, exchange events in a
    /// random interleaving (each sender's events in its order), and end
    /// with the memberships one unshared stage holds after every report in
    /// stamp order `(time, replica)` — at every later expiry time too —
    /// with no false negative on any replica's data path; every event is
    /// applied once by each other replica.
    #[test]
    fn replicas_converge_on_stamp_order(
        reports in proptest::collection::vec(report(), 1..120),
        seed in any::<u64>(),
    ) {
        let params = Params::new(Layout::SplitBlock, 512, 8).unwrap();
        let grace = EXPIRY_GRACE.as_nanos() as u64;
        let mut st = seed;
        let groups: Vec<GroupKey> = (0..GROUPS)
            .map(|i| group_key(Ipv4Addr::new(239, 9, 0, i as u8).into()))
            .collect();
        let mut reps: Vec<MulticastStage> = (0..REPLICAS).map(|_| replica(params)).collect();
        for (i, r) in reps.iter_mut().enumerate() {
            r.control_mut().share(i as u16, grace);
        }
        // queues[src][dst]: events in flight.
        let mut queues: Vec<Vec<VecDeque<MembershipEvent>>> =
            vec![vec![VecDeque::new(); REPLICAS]; REPLICAS];
        let mut clocks = [SEC; REPLICAS];
        // The stamps (time, replica, sequence) of the reports, for the model.
        let mut stamps: Vec<(u64, usize, usize)> = Vec::new();
        let deliver = |reps: &mut [MulticastStage], queues: &mut [Vec<VecDeque<MembershipEvent>>], st: &mut u64| {
            let src = (mix(st) % REPLICAS as u64) as usize;
            let dst = (mix(st) % REPLICAS as u64) as usize;
            if let Some(e) = queues[src][dst].pop_front() {
                reps[dst].control_mut().apply(&e);
            }
        };
        for (seq, &(r, port, g, join, dt)) in reports.iter().enumerate() {
            clocks[r] += dt * SEC;
            let now = Timestamp::from_nanos(clocks[r]);
            let c = reps[r].control_mut();
            if join {
                c.join(usize::from(port), groups[g], now);
            } else {
                c.leave(usize::from(port), &groups[g], now);
            }
            for e in c.take_events() {
                for (dst, q) in queues[r].iter_mut().enumerate() {
                    if dst != r {
                        q.push_back(e);
                    }
                }
            }
            stamps.push((clocks[r], r, seq));
            for _ in 0..mix(&mut st) % 4 {
                deliver(&mut reps, &mut queues, &mut st);
            }
        }
        while queues.iter().flatten().any(|q| !q.is_empty()) {
            deliver(&mut reps, &mut queues, &mut st);
        }

        // The model: one unshared stage, every report in stamp order.
        stamps.sort_unstable();
        let mut model = replica(params);
        for &(t, _, seq) in &stamps {
            let (_, port, g, join, _) = reports[seq];
            let c = model.control_mut();
            if join {
                c.join(usize::from(port), groups[g], Timestamp::from_nanos(t));
            } else {
                c.leave(usize::from(port), &groups[g], Timestamp::from_nanos(t));
            }
        }

        let sent: u64 = reps.iter().map(|r| r.counters().events_sent).sum();
        let applied: u64 = reps.iter().map(|r| r.counters().events_applied).sum();
        prop_assert_eq!(sent, reports.len() as u64);
        prop_assert_eq!(applied, sent * (REPLICAS as u64 - 1));

        let last = clocks.iter().copied().max().unwrap();
        let gmi = GROUP_MEMBERSHIP_INTERVAL_NS;
        for t in [0, last + gmi - 2 * SEC, last + gmi - SEC, last + gmi, last + gmi + SEC] {
            model.control_mut().expire(Timestamp::from_nanos(t));
            let want = members(&model, &groups);
            for (i, r) in reps.iter_mut().enumerate() {
                r.control_mut().expire(Timestamp::from_nanos(t + grace));
                prop_assert_eq!(&members(r, &groups), &want, "replica {} at {}", i, t);
                // The data path holds every member.
                let mut out = vec![PortSet::EMPTY; GROUPS];
                r.egress_batch(&groups, &[255; GROUPS], &mut out);
                for &(p, g) in &want {
                    prop_assert!(out[g].contains(p as u8), "replica {} port {} group {}", i, p, g);
                }
            }
        }
    }
}
