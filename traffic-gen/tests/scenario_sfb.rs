//! `scenario sfb` at a small scale: 8 AIMD flows and one unresponsive UDP
//! flow at 10x its fair share (here 111% of the link), 10 s simulated,
//! measured over the last 6.67 s.
//!
//! With SFB's kernel defaults the target (unresponsive <= 2x fair
//! share) is not reached at any scale we ran (see the README table): a
//! constant-rate flow that never builds a backlog of `target` packets in
//! its bins is never driven to `p_mark = 1`, so the penalty box stays
//! empty, and Blue holds it near `target / sojourn`. What SFB does do, and
//! what this test holds it to for every seed tried (1-6): it halves the
//! unresponsive flow's share against drop-tail, which gives it the link
//! and starves the AIMD flows; the AIMD flows get about half the link and
//! share it fairly (Jain >= 0.9); and the run is deterministic.

use traffic_gen::scenario::{QueueKind, SfbScenarioConfig, run_sfb_scenario};

fn small(seed: u64) -> SfbScenarioConfig {
    SfbScenarioConfig {
        aimd: 8,
        duration_ns: 10_000_000_000,
        warmup_ns: 3_333_333_333,
        seed,
        ..SfbScenarioConfig::default()
    }
}

#[test]
fn sfb_protects_aimd_flows_and_droptail_does_not() {
    let cfg = small(1);
    let rep = run_sfb_scenario(&cfg).unwrap();
    let [sfb, dt] = &rep.results[..] else {
        panic!("two results expected");
    };
    assert_eq!((sfb.queue, dt.queue), (QueueKind::Sfb, QueueKind::DropTail));
    let aimd_share = |r: &traffic_gen::scenario::QueueResult| {
        r.flows
            .iter()
            .filter(|f| f.kind == "aimd")
            .map(|f| f.throughput_bps)
            .sum::<f64>()
            / cfg.rate_bps as f64
    };
    let text = {
        let mut v = Vec::new();
        rep.write_text(&mut v, true).unwrap();
        String::from_utf8(v).unwrap()
    };
    // Drop-tail: the unresponsive flow takes most of the link.
    assert!(dt.unresponsive_share > 8.0, "{text}");
    assert!(aimd_share(dt) < 0.02, "{text}");
    assert!(dt.drops.queuedrop > 0 && dt.marked == 0, "{text}");
    // SFB: at most half of drop-tail's share for the unresponsive flow,
    // the AIMD flows get about half the link and share it fairly.
    assert!(
        sfb.unresponsive_share < 0.55 * dt.unresponsive_share,
        "{text}"
    );
    assert!(aimd_share(sfb) > 0.4, "{text}");
    assert!(sfb.jain_aimd >= 0.9, "{text}");
    assert!(sfb.marked > 0 && sfb.drops.earlydrop > 0, "{text}");
    // Both keep the link busy; SFB keeps the queue short.
    assert!(sfb.utilisation > 0.9 && dt.utilisation > 0.99, "{text}");
    assert!(sfb.sojourn.p99 < dt.sojourn.p99 / 10, "{text}");
    assert_eq!(sfb.sojourn.count, sfb.histogram.len());
}

#[test]
fn same_seed_same_result() {
    let a = run_sfb_scenario(&small(7)).unwrap();
    let b = run_sfb_scenario(&small(7)).unwrap();
    assert_eq!(a, b);
    let c = run_sfb_scenario(&small(8)).unwrap();
    assert_ne!(a.results[0].flows, c.results[0].flows);
}
