//! `scenario sfb` at a smaller scale, with the scenario's SFB settings
//! ([`SfbScenarioConfig::evaluation_sfb`]: kernel defaults but 8 x 64 bins,
//! target 25, max 31).
//!
//! * **The issue's targets** are asserted at 24 AIMD flows on a 50 Mbit/s
//!   link (base RTT 50 ms): the same per-flow bandwidth-delay product (about
//!   8 packets) and flows per bin as the 50-flow, 100 Mbit/s row of the
//!   README, 20 s simulated. For every seed checked (1-6 here; 1-10 were
//!   swept) the unresponsive flow, offered 10x its fair share, is held at
//!   or below 2x (measured 1.36x-1.63x) and the AIMD flows' Jain index is at
//!   least 0.9 (measured >= 0.97), while drop-tail gives the unresponsive
//!   flow its whole offered rate.
//! * **8 AIMD flows** (the unresponsive flow offered 111% of the link): the
//!   2x target is not reached by SFB under any settings swept (see the
//!   module docs of `traffic_gen::scenario`); what SFB does do is hold it
//!   to about half of drop-tail's share, which starves the AIMD flows,
//!   and keep the AIMD flows fair among themselves.

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

#[test]
fn sfb_meets_the_issue_targets_at_small_scale() {
    for seed in 1..=6 {
        let cfg = small(seed);
        let rep = run_sfb_scenario(&cfg).unwrap();
        let [sfb, dt] = &rep.results[..] else {
            panic!("two results expected");
        };
        assert_eq!((sfb.queue, dt.queue), (QueueKind::Sfb, QueueKind::DropTail));
        let text = text(&rep);
        // The issue's targets.
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
    // it is judged over ten seeds of 30 s: in each, SFB halves drop-tail's
    // share and the AIMD flows get about half the link; the median index is
    // at least 0.9 and none falls below 0.8. Measured with the AES hash:
    // 0.945-0.995, except seed 2 at 0.846, where one AIMD flow ends at 0.1x
    // its share although its bins are shared with no other flow at any
    // level (checked from the hash pairs): the model's AIMD dynamics, not
    // a collision. (With the earlier multiply hash seeds 1-5 gave
    // 0.950-0.986.)
    let mut jain = Vec::new();
    for seed in 1..=10 {
        let cfg = SfbScenarioConfig {
            aimd: 8,
            duration_ns: 30_000_000_000,
            warmup_ns: 10_000_000_000,
            seed,
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
        // SFB: about half of drop-tail's share (not the 2x target), the
        // AIMD flows get about half the link.
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
