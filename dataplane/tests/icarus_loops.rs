//! Icarus per node: loops are always detected at the first revisit, the
//! edges insert and strip, the counters add up, and the pipeline stage drops
//! packets on a loop.

mod icarus_common;

use std::time::Instant;

use dataplane::clock::Timestamp;
use dataplane::pipeline::{Batch, DropReason, Pipeline, PipelineConfig, Verdict};
use dataplane::stage::icarus::{
    FilterParams, Icarus, IcarusConfig, IcarusStage, LoopAction, Outcome, insert_after_hops,
};
use dataplane::wire::LinkType;
use dataplane::wire::icarus::{self, FilterWidth};
use icarus_common::*;
use proptest::prelude::*;

const L3: usize = 14;

fn node(id: u64, params: FilterParams) -> Icarus {
    let mut c = IcarusConfig::new(id);
    c.params = params;
    c.on_loop = LoopAction::Forward;
    Icarus::new(c)
}

fn width() -> impl Strategy<Value = FilterWidth> {
    prop_oneof![
        Just(FilterWidth::M64),
        Just(FilterWidth::M128),
        Just(FilterWidth::M256)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A path of distinct nodes, then a revisit of any earlier node: the
    /// revisit is detected, always, on real IPv4 and IPv6 packets.
    #[test]
    fn a_loop_is_detected_at_the_first_revisit(
        ids in prop::collection::hash_set(any::<u64>(), 1..40),
        pick in any::<prop::sample::Index>(),
        w in width(),
        k in 1usize..=16,
        v6 in any::<bool>(),
    ) {
        let params = FilterParams::new(w, k).unwrap();
        let ids: Vec<u64> = ids.into_iter().collect();
        let mut nodes: Vec<Icarus> = ids.iter().map(|&id| node(id, params)).collect();
        let mut f = if v6 { ipv6_frame(&[], 17, b"loop") } else { ipv4_frame(&[], 17, b"loop") };
        icarus::insert(&mut f, L3, &dataplane::wire::icarus::Filter::empty(w)).unwrap();
        for n in nodes.iter_mut() {
            let o = n.hop(&mut f, L3);
            prop_assert!(matches!(o, Outcome::Marked | Outcome::Loop));
            check_l4(&f, L3).map_err(TestCaseError::fail)?;
        }
        let j = pick.index(nodes.len());
        prop_assert_eq!(nodes[j].hop(&mut f, L3), Outcome::Loop);
        prop_assert!(nodes[j].counters().loops_detected >= 1);
        check_l4(&f, L3).map_err(TestCaseError::fail)?;
    }
}

#[test]
fn edges_insert_and_strip_and_counters_add_up() {
    let mut edge = Icarus::new(IcarusConfig::new(7).insert_on(1).strip_on(2));
    let plain = ipv4_frame(&[], 6, b"abcdef");
    let mut full_opts = vec![0x94, 0x04, 0x00, 0x00];
    full_opts.resize(40, 0x01);
    let full = ipv4_frame(&full_opts, 6, b"abcdef");
    let v6 = ipv6_frame(&[], 17, b"abcdef");

    // Port 0 is not an edge: passed untouched.
    let mut f = plain.clone();
    assert_eq!(edge.ingress(&mut f, L3, 0), Outcome::NoOption);
    assert_eq!(f, plain);
    // Port 1 inserts, then the node marks.
    let mut f4 = plain.clone();
    assert_eq!(edge.ingress(&mut f4, L3, 1), Outcome::Marked);
    check_l4(&f4, L3).unwrap();
    let loc = icarus::find(&f4, L3).unwrap().unwrap();
    assert_eq!(loc.filter(&f4), Some(*edge.mask()));
    let mut f6 = v6.clone();
    assert_eq!(edge.ingress(&mut f6, L3, 1), Outcome::Marked);
    check_l4(&f6, L3).unwrap();
    // No room: counted, untouched.
    let mut f = full.clone();
    assert_eq!(edge.ingress(&mut f, L3, 1), Outcome::NoRoom);
    assert_eq!(f, full);
    // Same node again: a loop.
    assert_eq!(edge.ingress(&mut f4, L3, 1), Outcome::Loop);
    assert!(edge.drops(Outcome::Loop));
    // Egress: port 1 keeps it, port 2 strips it.
    assert!(!edge.egress(&mut f4, L3, 1));
    assert!(edge.egress(&mut f4, L3, 2));
    assert!(edge.egress(&mut f6, L3, 2));
    assert_eq!(icarus::find(&f4, L3), Ok(None));
    check_l4(&f4, L3).unwrap();
    check_l4(&f6, L3).unwrap();
    assert_eq!(f6, v6);
    // Garbage is counted, not touched.
    let mut junk = vec![0x45; 30];
    junk[..14].copy_from_slice(&ethernet(0x0800));
    assert_eq!(edge.ingress(&mut junk, L3, 0), Outcome::BadOption);

    let c = *edge.counters();
    assert_eq!(c.inserted, 2);
    assert_eq!(c.stripped, 2);
    assert_eq!(c.marked_hops, 2);
    assert_eq!(c.loops_detected, 1);
    assert_eq!(c.no_room, 1);
    assert_eq!(c.passed_without_option, 1);
    assert_eq!(c.bad_option, 1);
    assert_eq!(c.seen(), 6);
}

#[test]
fn width_mismatch_passes() {
    let mut n = Icarus::new(IcarusConfig::new(1));
    let mut f = ipv4_frame(&[], 17, b"x");
    let p64 = FilterParams::new(FilterWidth::M64, 4).unwrap();
    insert_after_hops(&mut f, L3, &[5, 6], &p64).unwrap();
    let snapshot = f.clone();
    assert_eq!(n.hop(&mut f, L3), Outcome::WidthMismatch);
    assert_eq!(f, snapshot);
    assert_eq!(n.counters().width_mismatch, 1);
}

#[test]
fn stage_drops_packets_on_a_loop() {
    let params = FilterParams::default();
    let mut looping = ipv4_frame(&[], 17, b"loop");
    insert_after_hops(&mut looping, L3, &[11, 42, 12], &params).unwrap();
    let mut fresh = ipv6_frame(&[], 17, b"fresh");
    insert_after_hops(&mut fresh, L3, &[11, 12], &params).unwrap();
    let plain = ipv4_frame(&[], 6, b"plain");

    let mut pipeline = Pipeline::new(PipelineConfig::default())
        .with_stage(IcarusStage::new(IcarusConfig::new(42)));
    let mut batch = Batch::new();
    for f in [&looping, &fresh, &plain] {
        batch.push(Timestamp::ZERO, f.len() as u32, LinkType::Ethernet, f);
    }
    pipeline.process(&mut batch, Timestamp::ZERO);
    let v: Vec<Verdict> = batch.packets().iter().map(|p| p.verdict).collect();
    assert_eq!(v[0], Verdict::Drop(DropReason::Loop));
    assert!(v[1].is_forwarded() && v[2].is_forwarded());
    check_l4(batch.packets()[1].data(), L3).unwrap();
    let stage = pipeline.stage::<IcarusStage>().unwrap();
    let c = stage.counters();
    assert_eq!(
        (c.loops_detected, c.marked_hops, c.passed_without_option),
        (1, 1, 1)
    );
    assert_eq!(pipeline.counters().dropped.get(DropReason::Loop), 1);
    assert!(pipeline.counters().is_consistent());
}

/// Rough cost of the batched hop (printed, not asserted: timings belong in
/// the benches).
#[test]
fn batched_hop_cost() {
    let params = FilterParams::default();
    let mut frames: Vec<Vec<u8>> = (0..32u64)
        .map(|i| {
            let mut f = if i % 4 == 3 {
                ipv6_frame(&[], 17, &[0u8; 64])
            } else {
                ipv4_frame(&[], 6, &[0u8; 64])
            };
            icarus::insert(
                &mut f,
                L3,
                &dataplane::wire::icarus::Filter::empty(params.width()),
            )
            .unwrap();
            f
        })
        .collect();
    let pristine = frames.clone();
    let offsets = [L3; 32];
    let mut out = [Outcome::NoOption; 32];
    let rounds = 20_000u64;
    let mut per_round = Vec::with_capacity(rounds as usize);
    let mut marked = 0u64;
    for r in 0..rounds {
        // A fresh node every round so most hops mark; reset the filters
        // now and then so they do not saturate.
        let mut n = Icarus::new(IcarusConfig::new(r));
        if r & 7 == 0 {
            frames.clone_from(&pristine);
        }
        let t = Instant::now();
        n.check_and_update_batch(&mut frames, &offsets, &mut out);
        per_round.push(t.elapsed().as_nanos() as f64 / 32.0);
        marked += out.iter().filter(|o| **o == Outcome::Marked).count() as u64;
    }
    per_round.sort_by(f64::total_cmp);
    eprintln!(
        "icarus check_and_update_batch (32 packets, 3/4 IPv4): min {:.2} / median {:.2} ns/packet over {} batches ({} marked)",
        per_round[0],
        per_round[per_round.len() / 2],
        rounds,
        marked
    );
    assert!(marked > 0);
}
