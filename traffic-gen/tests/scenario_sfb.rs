//! `scenario sfb` at a smaller scale.
//!
//! * **The router's default SFB** (the fair profile) in the model at
//!   flowmix's operating point (10 Mbit/s, 20 ms base RTT, 8 and 50 AIMD
//!   flows, 40 s, seeds 1-3), where the model agrees with real TCP: the
//!   unresponsive flow, offered 10x its fair share, within 0.8x-1.2x of
//!   its share on every seed and 0.9x-1.1x on average (measured
//!   0.96x-1.05x), and Jain's index at least 0.9. With long windows (24
//!   flows on 50 Mbit/s with 50 ms RTTs, 8 packets of window per flow) the
//!   AIMD senders, which halve on every mark, sit under half the share:
//!   the flows Blue signals count as competing, so the unresponsive flow
//!   keeps about its share (at or below 1.25x, measured 0.98x-1.00x; it
//!   kept 1.6x-2.4x when they were taken for light flows).
//! * **sch_sfb's rules** (`profile = "linux"`) with 8 x 64 bins, target 25,
//!   max 31, the setting the model chose before real TCP was measured: the
//!   unresponsive flow at or below 2x (measured 1.36x-1.63x) and Jain's
//!   index at least 0.9, while drop-tail gives the unresponsive flow its
//!   whole offered rate.
//! * **8 AIMD flows** at 100 Mbit/s and 50 ms (the unresponsive flow
//!   offered 111% of the link), sch_sfb's rules: SFB at least halves
//!   drop-tail's share and keeps the AIMD flows fair among themselves. The
//!   fair profile holds the unresponsive flow to 2x here (the most its gain
//!   allows on a link the others leave idle), but the model's AIMD senders
//!   with 46 packets of window leave 30% of the link idle; real Reno flows
//!   through the router filled 93% (the scenario module docs).

use dataplane::stage::sfb::SfbConfig;
use traffic_gen::scenario::{QueueKind, QueueResult, SfbScenarioConfig, run_sfb_scenario};

/// 24 AIMD flows at 50 Mbit/s: the 50-flow, 100 Mbit/s design point halved.
fn small(seed: u64) -> SfbScenarioConfig {
    SfbScenarioConfig {
        aimd: 24,
        rate_bps: 50_000_000,
        duration_ns: 20_000_000_000,
        warmup_ns: 6_666_666_667,
        seed,
        ..SfbScenarioConfig::default()
    }
}

fn text(rep: &traffic_gen::scenario::SfbScenarioReport) -> String {
    let mut v = Vec::new();
    rep.write_text(&mut v, true).unwrap();
    String::from_utf8(v).unwrap()
}

fn aimd_share(r: &QueueResult, rate_bps: u64) -> f64 {
    r.flows
        .iter()
        .filter(|f| f.kind == "aimd")
        .map(|f| f.throughput_bps)
        .sum::<f64>()
        / rate_bps as f64
}

/// flowmix's operating point (10 Mbit/s, 20 ms base RTT, 1514-byte
/// packets), where the model agrees with real TCP for the fair profile.
fn flowmix_point(aimd: u32, seed: u64) -> SfbScenarioConfig {
    SfbScenarioConfig {
        aimd,
        rate_bps: 10_000_000,
        packet_bytes: 1514,
        rtt_ns: 20_000_000,
        duration_ns: 40_000_000_000,
        warmup_ns: 10_000_000_000,
        seed,
        ..SfbScenarioConfig::default()
    }
}

#[test]
fn fair_profile_holds_the_unresponsive_flow_in_the_model() {
    // The goal: the unresponsive flow within 0.8-1.2x its share, held to
    // it, not starved.
    for aimd in [8, 50] {
        let mut shares = Vec::new();
        for seed in 1..=3 {
            let rep = run_sfb_scenario(&flowmix_point(aimd, seed)).unwrap();
            let [sfb, dt] = &rep.results[..] else {
                panic!("two results expected");
            };
            let text = text(&rep);
            shares.push(sfb.unresponsive_share);
            eprintln!(
                "{aimd} flows, seed {seed}: unresponsive {:.3}x, Jain {:.4}",
                sfb.unresponsive_share, sfb.jain_aimd
            );
            assert!(
                (0.8..=1.2).contains(&sfb.unresponsive_share),
                "{aimd} flows, seed {seed}: unresponsive {:.3}x fair\n{text}",
                sfb.unresponsive_share
            );
            assert!(
                sfb.jain_aimd >= 0.9,
                "{aimd} flows, seed {seed}: Jain {:.4}\n{text}",
                sfb.jain_aimd
            );
            assert!(sfb.drops.ratedrop > 0 && sfb.marked > 0, "{text}");
            assert!(sfb.utilisation > 0.99, "{text}");
            assert!(dt.unresponsive_share > 8.0, "{text}");
        }
        let mean = shares.iter().sum::<f64>() / shares.len() as f64;
        assert!(
            (0.9..=1.1).contains(&mean),
            "{aimd} flows: mean {mean:.3}x over seeds 1-3"
        );
    }
}

/// Long windows (24 AIMD flows at 50 Mbit/s and 50 ms: 8 packets each),
/// where the model's senders, halving on every mark, sit under half the
/// share: the flows Blue signals still compete, so the unresponsive flow
/// keeps about its share (measured 0.98x-1.00x over seeds 1-3; 1.6x-2.4x
/// when they were taken for light flows).
#[test]
fn fair_profile_holds_the_unresponsive_flow_with_long_windows() {
    for seed in 1..=3 {
        let cfg = SfbScenarioConfig {
            packet_bytes: 1514,
            rtt_ns: 50_000_000,
            duration_ns: 40_000_000_000,
            warmup_ns: 10_000_000_000,
            ..small(seed)
        };
        let rep = run_sfb_scenario(&cfg).unwrap();
        let [sfb, _] = &rep.results[..] else {
            panic!("two results expected");
        };
        let text = text(&rep);
        eprintln!(
            "long windows, seed {seed}: unresponsive {:.3}x, Jain {:.4}",
            sfb.unresponsive_share, sfb.jain_aimd
        );
        assert!(
            sfb.unresponsive_share <= 1.25,
            "seed {seed}: unresponsive {:.3}x fair\n{text}",
            sfb.unresponsive_share
        );
        assert!(sfb.jain_aimd >= 0.95, "seed {seed}\n{text}");
        assert!(sfb.utilisation > 0.95, "{text}");
        assert!(sfb.drops.ratedrop > 0, "{text}");
    }
}

/// Eight AIMD flows at 100 Mbit/s and 50 ms (46 packets of window each),
/// the unresponsive flow offered 111% of the link: the AIMD flows Blue
/// signals compete, so the unresponsive flow is held to at most twice its
/// share (the share's gain while the link is short, with Blue's rules on
/// it; measured 2.16x-2.24x over seeds 1-3) where, taken for light flows,
/// they left it 3.8x-4.9x.
#[test]
fn fair_profile_with_long_windows_caps_the_unresponsive_flow_at_the_gain() {
    for seed in 1..=3 {
        let cfg = SfbScenarioConfig {
            aimd: 8,
            packet_bytes: 1514,
            duration_ns: 40_000_000_000,
            warmup_ns: 10_000_000_000,
            seed,
            ..SfbScenarioConfig::default()
        };
        let rep = run_sfb_scenario(&cfg).unwrap();
        let [sfb, dt] = &rep.results[..] else {
            panic!("two results expected");
        };
        let text = text(&rep);
        eprintln!(
            "8 flows at 100 Mbit/s, seed {seed}: unresponsive {:.3}x",
            sfb.unresponsive_share
        );
        assert!(
            sfb.unresponsive_share <= 2.3,
            "seed {seed}: unresponsive {:.3}x fair\n{text}",
            sfb.unresponsive_share
        );
        assert!(
            sfb.unresponsive_share < dt.unresponsive_share / 4.0,
            "{text}"
        );
    }
}

#[test]
fn linux_profile_with_64_bins_meets_the_targets_at_small_scale() {
    for seed in 1..=6 {
        let cfg = SfbScenarioConfig {
            sfb: SfbConfig {
                log2_bins: 6,
                target: 25,
                max: Some(31),
                ..SfbConfig::linux()
            },
            ..small(seed)
        };
        let rep = run_sfb_scenario(&cfg).unwrap();
        let [sfb, dt] = &rep.results[..] else {
            panic!("two results expected");
        };
        assert_eq!((sfb.queue, dt.queue), (QueueKind::Sfb, QueueKind::DropTail));
        let text = text(&rep);
        // The targets.
        assert!(
            sfb.unresponsive_share <= 2.0,
            "seed {seed}: unresponsive {:.3}x fair\n{text}",
            sfb.unresponsive_share
        );
        assert!(
            sfb.jain_aimd >= 0.9,
            "seed {seed}: Jain {:.4}\n{text}",
            sfb.jain_aimd
        );
        // SFB works by marking and early drops; the link stays busy.
        assert!(sfb.marked > 0 && sfb.drops.earlydrop > 0, "{text}");
        assert!(sfb.utilisation > 0.99, "{text}");
        assert_eq!(sfb.sojourn.count, sfb.histogram.len());
        // Drop-tail gives the unresponsive flow everything it offers.
        assert!(dt.unresponsive_share > 9.0, "{text}");
        assert!(dt.drops.queuedrop > 0 && dt.marked == 0, "{text}");
        assert!(dt.utilisation > 0.99, "{text}");
    }
}

#[test]
fn eight_flows_sfb_halves_the_unresponsive_share_and_keeps_aimd_fair() {
    // Eight AIMD flows make Jain's index over a measured window a noisy
    // figure (one flow's unlucky run of early drops shows for seconds), so
    // it is judged over ten seeds of 30 s: in each, SFB at least halves
    // drop-tail's share and the AIMD flows get at least 40% of the link;
    // the median index is at least 0.9 and none falls below 0.8.
    let mut jain = Vec::new();
    for seed in 1..=10 {
        let cfg = SfbScenarioConfig {
            aimd: 8,
            duration_ns: 30_000_000_000,
            warmup_ns: 10_000_000_000,
            seed,
            sfb: SfbConfig::linux(),
            ..SfbScenarioConfig::default()
        };
        let rep = run_sfb_scenario(&cfg).unwrap();
        let [sfb, dt] = &rep.results[..] else {
            panic!("two results expected");
        };
        let text = text(&rep);
        // Drop-tail: the unresponsive flow takes most of the link.
        assert!(dt.unresponsive_share > 8.0, "{text}");
        assert!(aimd_share(dt, cfg.rate_bps) < 0.02, "{text}");
        // SFB: at most half of drop-tail's share, the AIMD flows get at
        // least 40% of the link.
        assert!(
            sfb.unresponsive_share < 0.55 * dt.unresponsive_share,
            "{text}"
        );
        assert!(aimd_share(sfb, cfg.rate_bps) > 0.4, "{text}");
        assert!(sfb.jain_aimd >= 0.8, "seed {seed}\n{text}");
        // No flow is driven to p = 1: the penalty box stays empty.
        assert_eq!(sfb.drops.penaltydrop, 0, "{text}");
        assert!(sfb.sojourn.p99 < dt.sojourn.p99 / 10, "{text}");
        jain.push(sfb.jain_aimd);
    }
    jain.sort_by(f64::total_cmp);
    assert!(jain[4] >= 0.9, "median Jain over seeds 1-10: {jain:?}");
}

#[test]
fn same_seed_same_result() {
    let a = run_sfb_scenario(&small(7)).unwrap();
    let b = run_sfb_scenario(&small(7)).unwrap();
    assert_eq!(a, b);
    let c = run_sfb_scenario(&small(8)).unwrap();
    assert_ne!(a.results[0].flows, c.results[0].flows);
}
