//! `multicast`: frames through a pipeline with the multicast stage, three
//! ports, two static groups on port 1 and a small cap on learned groups:
//! IGMP and MLD learned from whatever arrives, data forwarded by the
//! filters.
//!
//! Input: a settings byte, then [framed](super::frames) frames. Settings:
//! bit 0 verify checksums, bit 1 fill in the IGMP/MLD checksums of the
//! frames first (so verified messages get through), bit 2 forward
//! link-local groups, bits 3-4 the cap (0, 1, 4, 16 learned groups per
//! port), bits 5-7 the records taken per batch (0, 1, 3, 8, 16, 64, 256,
//! 1024). A batch ends when 32 frames are in or the clock jumps by 16 s
//! or more.
//!
//! After every batch: the pipeline's accounting holds; per port, the
//! learned groups stay within the cap and the members are the learned
//! ones plus the static ones; the learned groups are the joins less the
//! leaves and expiries; every member is in the counting filter and the
//! published port filter (no false negatives); every multicast data
//! packet goes out of at least every other port that holds its group, and
//! never back out of its ingress. At the end, once every timer has run
//! out, only the static groups are left.

use std::net::IpAddr;

use dataplane::clock::Timestamp;
use dataplane::pipeline::{Batch, DropReason, Pipeline, PipelineConfig, Verdict};
use dataplane::stage::multicast::{
    GROUP_MEMBERSHIP_INTERVAL_NS, InterfaceConfig, MulticastConfig, MulticastStage, group_key,
    is_link_local,
};
use dataplane::wire::{IpProtocol, LinkType, Parsed, icmpv6, igmp, parse};

use super::{Clock, frames};

/// Ports of the stage.
const PORTS: usize = 3;
/// Time steps at or above this end a batch (16 s).
const BATCH_BREAK_STEP: u8 = 12;

fn statics() -> [Vec<IpAddr>; PORTS] {
    [
        Vec::new(),
        vec![
            "239.1.1.1".parse().expect("address"),
            "ff0e::1".parse().expect("address"),
        ],
        Vec::new(),
    ]
}

/// ICMPv6 types of MLD messages (query, v1 report, done, v2 report).
fn is_mld_type(t: u8) -> bool {
    matches!(t, 130 | 131 | 132 | 143)
}

/// The IP payload range of a parsed frame.
fn l4_range(p: &Parsed, len: usize) -> Option<std::ops::Range<usize>> {
    let start = p.l4_offset?;
    let end = p.l3_offset.saturating_add(p.ip_total_len).min(len);
    (start <= end).then_some(start..end)
}

/// Fills in the IGMP or ICMPv6 checksum of `frame`, when it is one.
fn fill_checksum(link: LinkType, frame: &mut [u8]) {
    let Ok(p) = parse(link, frame) else { return };
    let Some(r) = l4_range(&p, frame.len()) else {
        return;
    };
    match p.protocol {
        IpProtocol::Igmp => {
            if let Ok(mut m) = igmp::Packet::new_checked(&mut frame[r]) {
                m.fill_checksum();
            }
        }
        IpProtocol::Icmpv6 => {
            let Some((IpAddr::V6(s), IpAddr::V6(d))) = p.flow.map(|f| (f.src(), f.dst())) else {
                return;
            };
            if let Ok(mut m) = icmpv6::Packet::new_checked(&mut frame[r]) {
                m.fill_checksum(&s, &d);
            }
        }
        _ => {}
    }
}

fn stage(p: &Pipeline) -> &MulticastStage {
    p.stage::<MulticastStage>().expect("the stage is installed")
}

/// The invariants after a batch (see the module docs).
fn check_batch(p: &Pipeline, batch: &Batch, cap: u64, forward_link_local: bool) {
    assert!(p.counters().is_consistent(), "{:?}", p.counters());
    let s = stage(p);
    let control = s.control();
    let c = control.counters();
    let statics = statics();
    let mut learned = 0u64;
    let filter = s.filter();
    for (port, st) in statics.iter().enumerate() {
        let n = control.learned_count(port);
        assert!(n as u64 <= cap, "port {port}: {n} learned, cap {cap}");
        assert_eq!(control.member_count(port), n + st.len(), "port {port}");
        for g in st {
            assert!(control.is_member(port, &group_key(*g)), "static {g} lost");
        }
        let counting = control.counting_filter(port).expect("port exists");
        for g in control.members(port) {
            assert!(
                counting.contains(&g),
                "port {port}: member missing from its counting filter"
            );
            assert!(
                filter.query(&g).contains(port),
                "port {port}: member missing from the port filter"
            );
        }
        learned += n as u64;
    }
    assert_eq!(learned, c.joins - c.leaves - c.expiries, "{c:?}");
    let refused: u64 = (0..PORTS).map(|p| control.refused(p)).sum();
    assert_eq!(refused, c.joins_refused);
    for st in s.interface_stats() {
        assert!(
            (0.0..=1.0).contains(&st.fill) && (0.0..=1.0).contains(&st.fpr),
            "{st:?}"
        );
    }

    // The data path: no false negatives, no copy back out of the ingress.
    for pk in batch.packets() {
        let Some(parsed) = pk.parsed.as_ref().filter(|q| q.is_ip() && q.dst_multicast) else {
            continue;
        };
        let control_msg = match parsed.protocol {
            IpProtocol::Igmp => true,
            IpProtocol::Icmpv6 => parsed
                .l4_bytes(pk.data())
                .first()
                .is_some_and(|&t| is_mld_type(t)),
            _ => false,
        };
        let Some(dst) = parsed.flow.map(|f| f.dst()) else {
            continue;
        };
        if control_msg || (!forward_link_local && is_link_local(dst)) {
            continue;
        }
        let ingress = usize::from(pk.ingress);
        let key = group_key(dst);
        let want = (0..PORTS).filter(|&j| j != ingress && control.is_member(j, &key));
        match pk.verdict {
            Verdict::Forward(set) | Verdict::Mark(set) => {
                for j in want {
                    assert!(set.contains(j as u8), "member port {j} missed");
                }
                assert!(!set.contains(pk.ingress), "sent back out of its ingress");
                assert!(set.iter().all(|j| usize::from(j) < PORTS));
            }
            Verdict::Drop(DropReason::NoRoute) => {
                assert_eq!(want.count(), 0, "a member port got nothing");
            }
            Verdict::Drop(r) => panic!("multicast data dropped for {r}"),
            v @ (Verdict::Consumed | Verdict::Held) => {
                panic!("multicast data {v:?} (no routed port)")
            }
        }
    }
}

/// Checks one input (see the module docs).
pub fn check(data: &[u8]) {
    let Some((&settings, data)) = data.split_first() else {
        return;
    };
    let verify = settings & 1 != 0;
    let fill = settings & 2 != 0;
    let forward_link_local = settings & 4 != 0;
    let cap = [0u64, 1, 4, 16][usize::from((settings >> 3) & 3)];
    let budget = [0u32, 1, 3, 8, 16, 64, 256, 1024][usize::from(settings >> 5)];
    let cfg = MulticastConfig {
        interfaces: statics()
            .into_iter()
            .map(|static_groups| InterfaceConfig {
                name: None,
                static_groups,
            })
            .collect(),
        forward_link_local,
        expected_groups: 16,
        false_positive_rate: 0.01,
        verify_checksums: verify,
        max_learned_groups: Some(cap),
        records_per_batch: budget,
        seed: Some(7),
        ..MulticastConfig::default()
    };
    let mut p = Pipeline::new(PipelineConfig::default())
        .with_stage(MulticastStage::new(&cfg).expect("a valid config"));
    let mut batch = Batch::new();
    let mut clock = Clock::default();
    let mut frame = Vec::new();
    let mut taken = 0;
    let run = |p: &mut Pipeline, batch: &mut Batch, now: Timestamp, taken: &mut u64| {
        if batch.is_empty() {
            return;
        }
        p.process(batch, now);
        // Every join or leave a record asked for took one from the budget.
        let c = stage(p).control().counters();
        let t = c.joins
            + c.refreshes
            + c.joins_refused
            + c.unknown_port
            + c.leaves
            + c.leaves_ignored
            + c.invalid_groups;
        assert!(t - *taken <= u64::from(budget), "over the budget");
        *taken = t;
        check_batch(p, batch, cap, forward_link_local);
        batch.clear();
    };
    for f in frames(data) {
        if batch.is_full() || f.step >= BATCH_BREAK_STEP {
            run(&mut p, &mut batch, clock.now(), &mut taken);
        }
        let ts = clock.advance(f.step);
        frame.clear();
        frame.extend_from_slice(f.data);
        if fill {
            fill_checksum(f.link, &mut frame);
        }
        batch.push_from(ts, frame.len() as u32, f.link, f.ingress, &frame);
    }
    run(&mut p, &mut batch, clock.now(), &mut taken);

    // Every learned membership runs out.
    let end = clock.now().add_nanos(2 * GROUP_MEMBERSHIP_INTERVAL_NS);
    let control = p
        .stage_mut::<MulticastStage>()
        .expect("the stage is installed")
        .control_mut();
    control.expire(end);
    for (port, st) in statics().iter().enumerate() {
        assert_eq!(control.learned_count(port), 0);
        assert_eq!(control.member_count(port), st.len());
    }
}
