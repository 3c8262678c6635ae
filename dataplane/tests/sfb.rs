//! SFB and the egress shaper against their own APIs: the figures the design
//! promises (time to probability 1, mark/drop split, misjudged-flow rate,
//! penalty box, exact shaping), balance of the bin counts across rehashes,
//! and the router's egress stage end to end (marks on the queued copies,
//! drops per port, the token bucket, the port kept busy).

use dataplane::chain::Chain;
use dataplane::clock::Timestamp;
use dataplane::config::RouterConfig;
use dataplane::io::memory::MemoryPorts;
use dataplane::pipeline::{Batch, DropReason, Verdict};
use dataplane::stage::egress::{EgressConfig, EgressQueue};
use dataplane::stage::sfb::{
    Admit, BinIndex, Enqueued, KeyBatch, SFB_MAX_PROB, Sfb, SfbConfig, SfbDrop, SfbQueue,
};
use dataplane::wire::{LinkType, parse};

const MS: u64 = 1_000_000;

fn t(ns: u64) -> Timestamp {
    Timestamp::from_nanos(ns)
}

/// sch_sfb's rules (`profile = "linux"`): most tests here check them.
fn cfg() -> SfbConfig {
    SfbConfig {
        seed: Some(7),
        rehash_ms: 0,
        ..SfbConfig::linux()
    }
}

use kernels::splitmix64 as mix;

fn random_flow(state: &mut u64) -> [u32; 4] {
    let a = mix(state);
    let b = mix(state);
    [a as u32, (a >> 32) as u32, b as u32, 17]
}

/// Offers one packet to the bare SFB and, if admitted, counts it queued.
fn offer(sfb: &mut Sfb, words: &[u32; 4], ecn: bool, qlen: usize, now: Timestamp) -> Admit {
    let key = sfb.key_one(words);
    let a = sfb.enqueue(&key, None, ecn, qlen, now);
    if let Admit::Enqueue { tag, .. } = a {
        sfb.commit(&tag);
    }
    a
}

/// Arrivals at a flow whose bins sit at `target` until its probability is 1.
fn arrivals_to_probability_one(increment: u16) -> u32 {
    let mut sfb = Sfb::new(SfbConfig { increment, ..cfg() }).unwrap();
    sfb.tick(t(0));
    let flow = [10, 20, 30, 6];
    for i in 0..20 {
        assert!(matches!(
            offer(&mut sfb, &flow, false, i, t(0)),
            Admit::Enqueue { mark: false, .. }
        ));
    }
    let key = sfb.key_one(&flow);
    assert_eq!(sfb.probe(&key), (20, 0));
    let mut arrivals = 0;
    while sfb.probe(&key).1 < SFB_MAX_PROB {
        offer(&mut sfb, &flow, false, 20, t(0));
        arrivals += 1;
        assert!(arrivals < 100_000);
    }
    arrivals
}

#[test]
fn probability_one_after_ceil_of_inverse_increment() {
    // Kernel default: increment (0xFFFF + 500) / 1000 = 66.
    let inc = SfbConfig::default().increment;
    assert_eq!(inc, 66);
    let n = arrivals_to_probability_one(inc);
    assert_eq!(n, u32::from(SFB_MAX_PROB).div_ceil(u32::from(inc)));
    assert_eq!(n, 993);
    // tc's default when options are given: (0xFFFF + 1000) / 2000 = 33.
    assert_eq!(arrivals_to_probability_one(33), 1986);
}

#[test]
fn fixed_probability_three_quarters_splits_marks_and_drops() {
    let mut sfb = Sfb::new(SfbConfig {
        increment: 0,
        decrement: 0,
        ..cfg()
    })
    .unwrap();
    sfb.tick(t(0));
    let p = SfbConfig::prob(0.75);
    sfb.force_probability(p);
    let n = 100_000u32;
    let flow = [1, 2, 3, 17];
    let key = sfb.key_one(&flow);
    let mut count = |ecn: bool| {
        let (mut marked, mut dropped) = (0u32, 0u32);
        for _ in 0..n {
            match sfb.enqueue(&key, None, ecn, 0, t(0)) {
                Admit::Enqueue { mark, tag } => {
                    sfb.commit(&tag);
                    sfb.release(&tag);
                    marked += u32::from(mark);
                }
                Admit::Drop(SfbDrop::Early) => dropped += 1,
                other => panic!("{other:?}"),
            }
        }
        (
            f64::from(marked) / f64::from(n),
            f64::from(dropped) / f64::from(n),
        )
    };
    let (ecn_mark, ecn_drop) = count(true);
    let (plain_mark, plain_drop) = count(false);
    let within = |x: f64, q: f64| {
        let sigma = (q * (1.0 - q) / f64::from(n)).sqrt();
        (x - q).abs() <= 4.0 * sigma
    };
    eprintln!(
        "p = {p}/65535: ECN marked {ecn_mark:.4} dropped {ecn_drop:.4}; \
         non-ECN marked {plain_mark:.4} dropped {plain_drop:.4}"
    );
    assert!(within(ecn_drop, 0.5), "{ecn_drop}");
    assert!(within(ecn_mark, 0.25), "{ecn_mark}");
    assert_eq!(plain_mark, 0.0);
    assert!(within(plain_drop, 0.75), "{plain_drop}");
    assert_eq!(
        sfb.counters().marked,
        (ecn_mark * f64::from(n)).round() as u64
    );
    assert!(sfb.counts_are_zero());
}

#[test]
fn counts_return_to_zero_after_rehash_and_drain() {
    // Fast rehash (100 ms, 30 ms warm-up), a slow queue that stays backlogged,
    // quick probability growth so that flows reach the penalty box and the
    // standby set gets counted during double buffering.
    let sfb = SfbConfig {
        rehash_ms: 100,
        db_ms: 30,
        increment: 0x0800,
        max: Some(60),
        target: 4,
        penalty_rate: 500,
        penalty_burst: 50,
        seed: Some(11),
        ..SfbConfig::default()
    };
    let egress = EgressConfig {
        rate_bps: 2_000_000,
        burst_bytes: 1500,
        limit: 1000,
    };
    let mut q: SfbQueue<u32> = SfbQueue::new(sfb, egress).unwrap();
    let mut s = 5u64;
    let flows: Vec<[u32; 4]> = (0..40).map(|_| random_flow(&mut s)).collect();
    let (mut both_sets, mut queued) = (0u64, 0u64);
    let mut dual_standby_seen = false;
    for k in 0..60_000u64 {
        let now = t(k * 10_000); // 100 kpps for 0.6 s
        q.drain_until(now, |_| {});
        q.sfb_mut().tick(now);
        let f = &flows[(mix(&mut s) % 40) as usize];
        let key = q.sfb().key_one(f);
        if q.enqueue(&key, None, k % 3 < 1, 0, 500, now).is_ok() {
            queued += 1;
        }
        if q.sfb().double_buffering() {
            let standby = q.sfb().active_set() ^ 1;
            if q.sfb().bins(standby).iter().any(|b| b.qlen > 0) {
                dual_standby_seen = true;
            }
        }
        if k % 1000 < 1 {
            both_sets += q
                .sfb()
                .bins(0)
                .iter()
                .map(|b| u64::from(b.qlen))
                .sum::<u64>()
                .min(1)
                * q.sfb()
                    .bins(1)
                    .iter()
                    .map(|b| u64::from(b.qlen))
                    .sum::<u64>()
                    .min(1);
        }
    }
    assert!(q.sfb().generation() >= 6, "{}", q.sfb().generation());
    assert!(dual_standby_seen, "the standby set was never warmed");
    assert!(both_sets > 0);
    assert!(queued > 0 && !q.queue().is_empty());
    assert!(!q.sfb().counts_are_zero());
    let left = q.drain_until(t(u64::MAX), |_| {});
    assert!(left > 0);
    assert!(q.queue().is_empty());
    assert!(q.sfb().counts_are_zero());
    eprintln!(
        "rehash drain: {} generations, {}",
        q.sfb().generation(),
        q.sfb().stats(t(600 * MS))
    );
}

/// After heavy dropping the queue drains and a rehash clears Blue's
/// probabilities: the figures `tc` prints (`maxqlen`, `maxprob`,
/// `avgprob`) are of the bins now and read 0, so the end of a run said
/// nothing of what happened. The run's peaks keep it.
#[test]
fn the_end_of_run_figures_are_now_and_the_peaks_are_the_run_s() {
    let mut sfb = Sfb::new(cfg()).unwrap();
    let flow = [10, 20, 30, 6];
    let mut tags = Vec::new();
    let mut dropped = 0;
    for i in 0..3000u64 {
        sfb.tick(t(i * MS / 10));
        match offer(&mut sfb, &flow, false, tags.len(), t(i * MS / 10)) {
            Admit::Enqueue { tag, .. } => tags.push(tag),
            Admit::Drop(_) => dropped += 1,
        }
    }
    assert!(dropped > 1000, "{dropped}");
    let during = sfb.stats(t(300 * MS));
    assert_eq!(during.maxprob, SFB_MAX_PROB);
    // The queue drains, then the sets swap (a rehash).
    for tag in &tags {
        sfb.release(tag);
    }
    sfb.swap();
    sfb.tick(t(400 * MS));
    let end = sfb.stats(t(400 * MS));
    assert_eq!((end.maxqlen, end.maxprob, end.avgprob), (0, 0, 0), "{end}");
    assert_eq!(end.peak.maxprob, SFB_MAX_PROB, "{end}");
    assert!(end.peak.maxqlen >= during.maxqlen.min(20), "{end}");
    assert!(end.peak.avgprob > 0, "{end}");
    assert!(end.to_string().contains("now, peak maxqlen"), "{end}");
}

/// Fraction of innocent flows whose every bin is held at probability 1 by
/// `m` penalised flows, measured over `seeds` key draws.
fn misjudged(
    index: BinIndex,
    (levels, log2_bins): (usize, u32),
    m: usize,
    seeds: u64,
    probes: usize,
) -> (f64, f64) {
    let mut fractions = Vec::new();
    let mut s = 99u64;
    let mut kb = KeyBatch::new();
    for seed in 0..seeds {
        let mut sfb = Sfb::new(SfbConfig {
            levels,
            log2_bins,
            index,
            increment: 0x1000,
            target: 1,
            max: Some(10_000),
            limit: 1 << 20,
            seed: Some(seed),
            ..cfg()
        })
        .unwrap();
        sfb.tick(t(0));
        let bad: Vec<[u32; 4]> = (0..m).map(|_| random_flow(&mut s)).collect();
        let keys: Vec<_> = bad.iter().map(|f| sfb.key_one(f)).collect();
        let mut rounds = 0;
        while keys.iter().any(|k| sfb.probe(k).1 < SFB_MAX_PROB) {
            for (f, k) in bad.iter().zip(&keys) {
                if sfb.probe(k).1 < SFB_MAX_PROB {
                    offer(&mut sfb, f, true, 0, t(0));
                }
            }
            rounds += 1;
            assert!(rounds < 1000);
        }
        let innocent: Vec<[u32; 4]> = (0..probes).map(|_| random_flow(&mut s)).collect();
        let mut hit = 0usize;
        for chunk in innocent.chunks(64) {
            kb.hash(&sfb, chunk);
            hit += (0..chunk.len())
                .filter(|&i| sfb.probe(&kb.key(i)).1 == SFB_MAX_PROB)
                .count();
        }
        fractions.push(hit as f64 / probes as f64);
    }
    let mean = fractions.iter().sum::<f64>() / fractions.len() as f64;
    let var =
        fractions.iter().map(|f| (f - mean).powi(2)).sum::<f64>() / (fractions.len() - 1) as f64;
    (mean, (var / fractions.len() as f64).sqrt())
}

#[test]
fn misjudged_fraction_matches_formula() {
    let m = 10;
    for (levels, log2_bins, seeds) in [(2usize, 4u32, 300u64), (8, 4, 400), (4, 3, 300)] {
        let n = f64::from(1u32 << log2_bins);
        let expected = (1.0 - (1.0 - 1.0 / n).powi(m as i32)).powi(levels as i32);
        let (mean, se) = misjudged(BinIndex::Slices, (levels, log2_bins), m, seeds, 20_000);
        let (pmean, pse) = misjudged(
            BinIndex::Partitioned,
            (levels, log2_bins),
            m,
            seeds / 2,
            20_000,
        );
        eprintln!(
            "L={levels} N={n}: misjudged {mean:.5} +- {se:.5} with slices, \
             {pmean:.5} +- {pse:.5} with partitioned indices (formula {expected:.5}, {seeds} seeds)"
        );
        assert!(
            (mean - expected).abs() <= 4.0 * se + 1e-4,
            "L={levels} N={n}: {mean} vs {expected} (se {se})"
        );
    }
}

/// The kernel's penalty bucket as `sch_sfb.c` behaves (re-expressed): refill
/// only when empty, whole tokens from the time since the last refill, and the
/// refill time reset even when nothing accrued. Jiffies at HZ = 1000.
fn kernel_penalty_admits(rate: u64, burst: u64, arrivals_ms: impl Iterator<Item = u64>) -> u64 {
    const HZ: u64 = 1000;
    let (mut tokens, mut token_time, mut admitted) = (burst, 0u64, 0u64);
    for jiffies in arrivals_ms {
        if tokens < 1 {
            let age = (jiffies - token_time).min(10 * HZ);
            tokens = (age * rate / HZ).min(burst);
            token_time = jiffies;
            if tokens < 1 {
                continue;
            }
        }
        tokens -= 1;
        admitted += 1;
    }
    admitted
}

/// The fair profile's Blue: an ECN-capable packet of a flow within its
/// share (here the fair-share check sees no congestion: one flow on an
/// unshaped port) is marked at any probability, never dropped early nor sent
/// to the penalty box; other packets as in sch_sfb.
#[test]
fn fair_profile_blue_only_marks_ecn_capable_packets_under_the_share() {
    let cfg = SfbConfig {
        increment: 0,
        decrement: 0,
        seed: Some(7),
        rehash_ms: 0,
        ..SfbConfig::default()
    };
    let unshaped = EgressConfig {
        rate_bps: 0,
        burst_bytes: 0,
        limit: 1000,
    };
    let n = 100_000u32;
    let flow = [1, 2, 3, 17];
    for (p, want_plain_drop) in [(SfbConfig::prob(0.75), 0.75), (SFB_MAX_PROB, 1.0)] {
        let mut q = SfbQueue::<()>::new(cfg, unshaped).unwrap();
        q.sfb_mut().tick(t(0));
        q.sfb_mut().force_probability(p);
        let key = q.sfb().key_one(&flow);
        let mut count = |ecn: bool| {
            let (mut marked, mut dropped) = (0u32, 0u32);
            for _ in 0..n {
                match q.enqueue(&key, None, ecn, (), 100, t(0)) {
                    Ok(Enqueued::Mark) => marked += 1,
                    Ok(Enqueued::Forward) => {}
                    Err(_) => dropped += 1,
                }
                q.drain_until(t(0), |_| {});
            }
            (
                f64::from(marked) / f64::from(n),
                f64::from(dropped) / f64::from(n),
            )
        };
        let (ecn_mark, ecn_drop) = count(true);
        let (plain_mark, plain_drop) = count(false);
        let q = f64::from(p) / 65536.0;
        let sigma = (q * (1.0 - q) / f64::from(n)).sqrt();
        assert_eq!(ecn_drop, 0.0, "p {p}");
        assert!(
            (ecn_mark - q).abs() <= 4.0 * sigma + 1e-4,
            "p {p}: {ecn_mark}"
        );
        assert_eq!(plain_mark, 0.0);
        // At p = 1 the plain flow is in the penalty box (10 pps, burst 20):
        // all but the burst dropped at one instant.
        assert!(
            (plain_drop - want_plain_drop).abs() <= 4.0 * sigma + 2e-4,
            "p {p}: {plain_drop}"
        );
    }
}

#[test]
fn penalty_box_admits_rate_times_time_plus_burst() {
    let mut sfb = Sfb::new(SfbConfig {
        increment: 0,
        decrement: 0,
        ..cfg()
    })
    .unwrap();
    sfb.tick(t(0));
    sfb.force_probability(SFB_MAX_PROB);
    let flow = dataplane::flow::FlowKey::V4(dataplane::flow::Flow4 {
        src: [10, 0, 0, 1].into(),
        dst: [10, 0, 0, 2].into(),
        src_port: 5000,
        dst_port: 80,
        protocol: dataplane::wire::IpProtocol::Udp,
    });
    let words = [0x0a00_0001, 0x0a00_0002, (5000 << 16) | 80, 17];
    let (mut admitted, mut dropped) = (0u64, 0u64);
    // 100 pps for 10 s, each admitted packet leaving at once.
    for k in 0..1000u64 {
        let now = t(k * 10 * MS);
        let key = sfb.key_one(&words);
        match sfb.enqueue(&key, Some(&flow), true, 0, now) {
            Admit::Enqueue { mark, tag } => {
                assert!(!mark, "penalised packets are not marked");
                sfb.commit(&tag);
                sfb.release(&tag);
                admitted += 1;
            }
            Admit::Drop(SfbDrop::Penalty) => dropped += 1,
            other => panic!("{other:?}"),
        }
    }
    let kernel = kernel_penalty_admits(10, 20, (0..1000).map(|k| k * 10));
    eprintln!("penalty box: admitted {admitted} (kernel's bucket: {kernel}), dropped {dropped}");
    // 20 + 10/s * 9.99 s: the burst and every whole token since.
    assert_eq!(admitted, 20 + 99);
    assert!(kernel <= 22, "{kernel}");
    assert_eq!(sfb.counters().penaltydrop, dropped);
    let stats = sfb.stats(t(9990 * MS));
    assert_eq!(stats.penalised.len(), 1);
    let e = stats.penalised[0];
    assert_eq!((e.flow, e.admitted, e.dropped), (flow, admitted, dropped));
    let shown = stats.to_string();
    assert!(shown.contains("penalty box 1 flows"), "{shown}");
    // A second later it has left the listing (no penalised packet since).
    assert!(sfb.stats(t(11_000 * MS)).penalised.is_empty());
}

#[test]
fn shaper_drains_at_exactly_the_configured_rate() {
    // 1 Mbit/s, 3000-byte bucket, 1500-byte packets all queued at t = 0:
    // two leave at once, then one every 12 ms.
    let mut q = EgressQueue::new(EgressConfig {
        rate_bps: 1_000_000,
        burst_bytes: 3000,
        limit: 1000,
    });
    for i in 0..100u32 {
        q.enqueue(i, 1500, t(0)).unwrap();
    }
    let mut deps = Vec::new();
    // Poll coarsely (every 7 ms): departure times stay exact.
    let mut now = 0;
    while !q.is_empty() {
        while let Some(d) = q.dequeue(t(now)) {
            deps.push(d);
        }
        now += 7 * MS;
    }
    for (k, d) in deps.iter().enumerate() {
        let expect = (k as u64).saturating_sub(1) * 12 * MS;
        assert_eq!(d.departed, t(expect), "packet {k}");
        assert_eq!(d.sojourn_ns(), expect);
    }
    assert_eq!(q.stats().bytes_out, 150_000);

    // An awkward rate: the k-th departure of a backlog is exactly
    // ceil((k * len - burst) * 8e9 / rate) ns, no drift over 10^4 packets.
    let (rate, len, burst) = (1_000_003u64, 1000u64, 2500u64);
    let mut q = EgressQueue::new(EgressConfig {
        rate_bps: rate,
        burst_bytes: burst,
        limit: 20_000,
    });
    for _ in 0..10_000 {
        q.enqueue((), len as u32, t(0)).unwrap();
    }
    let mut k = 0u64;
    while let Some(d) = q.dequeue(t(u64::MAX)) {
        k += 1;
        let bits = u128::from((k * len).saturating_sub(burst)) * 8_000_000_000;
        let expect = bits.div_ceil(u128::from(rate)) as u64;
        assert_eq!(d.departed, t(expect), "packet {k}");
    }
    assert_eq!(k, 10_000);

    // After idling, the bucket refills to the burst and no further.
    let mut q = EgressQueue::new(EgressConfig {
        rate_bps: 8_000, // 1000 byte/s
        burst_bytes: 2000,
        limit: 10,
    });
    for _ in 0..4 {
        q.enqueue((), 1000, t(10_000 * MS)).unwrap();
    }
    let times: Vec<u64> = std::iter::from_fn(|| q.dequeue(t(u64::MAX)))
        .map(|d| d.departed.as_nanos() / MS)
        .collect();
    assert_eq!(times, vec![10_000, 10_000, 11_000, 12_000]);
}

#[test]
fn queue_limit_and_child_limit() {
    let slow = EgressConfig {
        rate_bps: 1000,
        burst_bytes: 0,
        limit: 1000,
    };
    let mut q: SfbQueue<()> = SfbQueue::new(SfbConfig { limit: 10, ..cfg() }, slow).unwrap();
    q.sfb_mut().tick(t(0));
    let mut s = 1u64;
    let mut results = Vec::new();
    for _ in 0..15 {
        let key = q.sfb().key_one(&random_flow(&mut s));
        results.push(q.enqueue(&key, None, false, (), 100, t(0)));
    }
    assert!(results[..10].iter().all(|r| *r == Ok(Enqueued::Forward)));
    assert!(
        results[10..]
            .iter()
            .all(|r| *r == Err(DropReason::QueueFull))
    );
    assert_eq!(q.sfb().counters().queuedrop, 5);
    let maxqlen = q.sfb().stats(t(0)).maxqlen;
    assert!((1..=10).contains(&maxqlen), "{maxqlen}");

    // The queue's own limit below SFB's: SFB admits, the queue refuses.
    let small = EgressConfig { limit: 5, ..slow };
    let mut q: SfbQueue<()> = SfbQueue::new(cfg(), small).unwrap();
    q.sfb_mut().tick(t(0));
    for _ in 0..8 {
        let key = q.sfb().key_one(&random_flow(&mut s));
        let _ = q.enqueue(&key, None, false, (), 100, t(0));
    }
    assert_eq!(q.sfb().counters().childdrop, 3);
    assert_eq!(q.sfb().counters().queuedrop, 0);
    assert_eq!(q.queue().len(), 5);
    q.drain_until(t(u64::MAX), |_| {});
    assert!(q.sfb().counts_are_zero());
}

/// Ethernet + IPv4 (ECN `ecn`) + UDP `sport` -> 10.0.0.2:2000, `len` payload bytes.
fn udp_frame(sport: u16, ecn: u8, payload: usize) -> Vec<u8> {
    use dataplane::wire::build::{self, IpHeader};
    let ip = IpHeader {
        tos: ecn,
        ..IpHeader::v4([10, 0, 0, 1], [10, 0, 0, 2], build::PROTO_UDP)
    };
    build::udp_frame(
        [0, 1, 2, 3, 4, 5],
        [6, 7, 8, 9, 10, 11],
        &ip,
        sport,
        2000,
        &vec![0xab; payload],
    )
}

/// Port `b` shaped to 8 Mbit/s behind SFB (seed 5), `c` unshaped; every
/// frame from `a` goes out of both.
const STAGE_ROUTER: &str = r#"
[[interfaces]]
name = "a"
[[interfaces]]
name = "b"
[interfaces.egress]
rate_bps = 8_000_000
burst_bytes = 3000
limit = 1000
[interfaces.sfb]
seed = 5
[[interfaces]]
name = "c"
[[wires]]
from = "a"
to = "b"
[[wires]]
from = "a"
to = "c"
"#;

#[test]
fn egress_stage_marks_drops_and_balances_in_the_chain() {
    // 8 Mbit/s port, 4 flows (2 ECN-capable) each at 4 Mbit/s: 2x overload.
    let cfg = RouterConfig::from_toml_str(STAGE_ROUTER, "stage.toml").unwrap();
    let mut chain = Chain::build(&cfg).unwrap();
    let mut sink = MemoryPorts::new(3).keep_sent(true);
    let frames: Vec<Vec<u8>> = (0..4u16)
        .map(|i| udp_frame(1000 + i, if i & 1 == 0 { 0b10 } else { 0 }, 972))
        .collect();
    let len = frames[0].len() as u32; // 1014 bytes
    let mut batch = Batch::new();
    let (mut marked_seen, mut dropped_port1, mut seen) = (0u64, 0u64, 0u64);
    let mut ts = 0u64;
    let mut departures = Vec::new();
    let mut to_c = 0u64;
    for _ in 0..600 {
        batch.clear();
        for k in 0..32usize {
            // 4 flows x 500 pps = 2000 pps of 1014 bytes = 16.2 Mbit/s.
            batch.push(t(ts), len, LinkType::Ethernet, &frames[k % 4]);
            ts += 500_000;
        }
        let now = batch.latest_ts().unwrap();
        chain.process(&mut batch, now, &mut sink);
        for pk in batch.packets() {
            seen += 1;
            match pk.verdict {
                Verdict::Mark(ports) => {
                    assert!(ports.contains(1));
                    // Only the queued copy is marked; the copy to port 2
                    // left before it (checked below), and the frame itself
                    // moved into port 1's queue as its last copy.
                    assert!(pk.data().is_empty());
                    assert_ne!(pk.parsed.unwrap().ecn, dataplane::wire::Ecn::Ce);
                    marked_seen += 1;
                }
                // A drop on port 1 leaves the copy to port 2.
                Verdict::Forward(ports) if !ports.contains(1) => {
                    assert!(ports.contains(2));
                    dropped_port1 += 1;
                }
                Verdict::Forward(_) => {}
                Verdict::Drop(r) => panic!("port 2 has no SFB, yet dropped: {r}"),
                v @ (Verdict::Consumed | Verdict::Held) => panic!("no routed port, yet {v:?}"),
            }
        }
        for s in sink.take_sent() {
            if s.port == 1 {
                departures.push(s);
            } else {
                let copy = parse(LinkType::Ethernet, &s.frame).unwrap();
                assert_ne!(
                    copy.ecn,
                    dataplane::wire::Ecn::Ce,
                    "port 2's copy is not marked"
                );
                to_c += 1;
            }
        }
    }
    chain.egress_mut().drain_all(&mut sink);
    departures.extend(sink.take_sent().into_iter().filter(|s| s.port == 1));
    let summary = &chain.egress().summaries(t(ts))[1];
    let sfb = summary.sfb.clone().unwrap().counters;
    let c = &summary.counters;
    eprintln!("egress over {seen} packets: {summary:?}");
    assert_eq!(to_c, seen, "every packet also left by the unshaped port");
    assert_eq!(sfb.marked, marked_seen);
    let ce = departures
        .iter()
        .filter(|d| parse(LinkType::Ethernet, &d.frame).unwrap().ecn == dataplane::wire::Ecn::Ce)
        .count() as u64;
    assert_eq!(ce, sfb.marked, "the marked copies left CE");
    assert_eq!(
        sfb.earlydrop
            + sfb.penaltydrop
            + sfb.bucketdrop
            + sfb.queuedrop
            + sfb.childdrop
            + sfb.ratedrop,
        dropped_port1
    );
    assert!(sfb.marked > 0 && dropped_port1 > 0);
    assert_eq!(c.sent as usize, departures.len());
    assert_eq!(c.enqueued, c.sent);
    assert_eq!(c.enqueued + dropped_port1, seen);
    assert!(summary.is_consistent() && summary.backlog_packets == 0);
    // The token-bucket bound on every run of up to 64 departures: bytes
    // out in [t_i, t_j] <= burst + rate * (t_j - t_i).
    for i in 0..departures.len() {
        let mut bytes = 0u128;
        for d in &departures[i..(i + 64).min(departures.len())] {
            bytes += u128::from(d.wire_len);
            let span = u128::from(d.departs.nanos_since(departures[i].departs));
            assert!(bytes * 8_000_000_000 <= 3000 * 8_000_000_000 + 8_000_000 * span);
        }
    }
    // And the port stays busy: SFB keeps the 2x overload from idling it.
    let (first, last) = (
        departures[0].departs,
        departures[departures.len() - 1].departs,
    );
    let util = c.sent_bytes as f64 * 8.0 / (last.nanos_since(first) as f64 * 8e-3);
    eprintln!(
        "port utilisation {util:.3}, mean sojourn {:.3} ms",
        c.mean_sojourn_ms()
    );
    assert!(util > 0.95, "{util}");
    assert!(chain.counters().is_consistent());
}

/// Port `b` shaped to 20 Mbit/s behind the default SFB profile (seed 5).
const FLOOD_ROUTER: &str = r#"
[[interfaces]]
name = "a"
[[interfaces]]
name = "b"
[interfaces.egress]
rate_bps = 20_000_000
burst_bytes = 3000
limit = 1000
[interfaces.sfb]
seed = 5
[[wires]]
from = "a"
to = "b"
"#;

/// A flood of small unresponsive flows (4096 UDP flows of 64-byte frames
/// drawn Zipf, s = 1.1, 30% of them ECT(0), at 1.55 times the port's rate,
/// as on the router bench's r-b) keeps the port busy. Blue signals
/// hundreds of the small flows whenever the queue builds; when every
/// signal held a flow's counter as competing for a second, the fair share
/// fell to a fraction and the port sent 87% of its rate here (82% on the
/// bench); a hold now ends when the flow does not slow down: 93%.
#[test]
fn a_flood_of_small_unresponsive_flows_keeps_the_port_busy() {
    use rand::{SeedableRng, rngs::StdRng};
    use rand_distr::{Distribution, Zipf};
    let cfg = RouterConfig::from_toml_str(FLOOD_ROUTER, "flood.toml").unwrap();
    let mut chain = Chain::build(&cfg).unwrap();
    let mut sink = MemoryPorts::new(2).keep_sent(true);
    let frames: Vec<Vec<u8>> = (0..4096u32)
        .map(|f| {
            let ect = (f.wrapping_mul(0x9e37_79b9) >> 16) % 10 < 3;
            udp_frame(1024 + f as u16, if ect { 0b10 } else { 0 }, 64 - 42)
        })
        .collect();
    let zipf = Zipf::new(4096.0, 1.1).unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    // 1.55 x 20 Mbit/s of 64-byte frames.
    let rate_bps = 20_000_000u64;
    let pps = rate_bps as f64 * 1.55 / (64.0 * 8.0);
    let gap = (1e9 / pps) as u64;
    let (warmup, end) = (5_000 * MS, 20_000 * MS);
    let mut batch = Batch::new();
    let (mut ts, mut sent_bytes) = (0u64, 0u64);
    while ts < end {
        batch.clear();
        for _ in 0..32 {
            let f = zipf.sample(&mut rng) as usize - 1;
            batch.push(t(ts), 64, LinkType::Ethernet, &frames[f]);
            ts += gap;
        }
        let now = batch.latest_ts().unwrap();
        chain.process(&mut batch, now, &mut sink);
        sent_bytes += sink
            .take_sent()
            .iter()
            .filter(|s| s.port == 1 && s.departs >= t(warmup))
            .map(|s| u64::from(s.wire_len))
            .sum::<u64>();
    }
    let util = sent_bytes as f64 * 8.0 / (rate_bps as f64 * (ts - warmup) as f64 * 1e-9);
    let summary = &chain.egress().summaries(t(ts))[1];
    eprintln!("port utilisation {util:.3}: {summary:?}");
    assert!(summary.sfb.as_ref().unwrap().counters.ratedrop > 0);
    assert!(util > 0.9, "{util}");
}

/// Port `b` shaped to 4 Mbit/s behind SFB (seed 5; `extra`: more keys of
/// its `sfb` table), as r-b in the namespace lab's floods.
fn lab_port(extra: &str) -> String {
    format!(
        r#"
[[interfaces]]
name = "a"
[[interfaces]]
name = "b"
[interfaces.egress]
rate_bps = 4_000_000
burst_bytes = 3000
limit = 1000
[interfaces.sfb]
seed = 5
{extra}
[[wires]]
from = "a"
to = "b"
"#
    )
}

/// A chain and what left its port `b`: (departure ns, wire length, UDP
/// source port).
struct Port4 {
    chain: Chain,
    sink: MemoryPorts,
    out: Vec<(u64, u32, u16)>,
}

impl Port4 {
    fn new(extra: &str) -> Self {
        let cfg = RouterConfig::from_toml_str(&lab_port(extra), "lab.toml").unwrap();
        Port4 {
            chain: Chain::build(&cfg).unwrap(),
            sink: MemoryPorts::new(2).keep_sent(true),
            out: Vec::new(),
        }
    }

    /// Frames at their times, 32 to a batch (a batch never spans more
    /// than 10 ms, as a live worker's does not).
    fn run<'a>(&mut self, frames: impl IntoIterator<Item = (u64, &'a [u8])>) {
        let mut batch = Batch::new();
        let mut first = None;
        for (ts, f) in frames {
            if batch.len() == 32 || first.is_some_and(|s| ts > s + 10 * MS) {
                self.process(&mut batch);
                first = None;
            }
            first.get_or_insert(ts);
            batch.push(t(ts), f.len() as u32, LinkType::Ethernet, f);
        }
        self.process(&mut batch);
    }

    fn process(&mut self, batch: &mut Batch) {
        if let Some(now) = batch.latest_ts() {
            self.chain.process(batch, now, &mut self.sink);
        }
        batch.clear();
        self.collect();
    }

    fn collect(&mut self) {
        for s in self.sink.take_sent() {
            if s.port == 1 {
                let sport = u16::from_be_bytes([s.frame[34], s.frame[35]]);
                self.out.push((s.departs.as_nanos(), s.wire_len, sport));
            }
        }
    }

    /// Sends what is still queued, at its times.
    fn finish(&mut self) {
        self.chain.egress_mut().drain_all(&mut self.sink);
        self.collect();
    }

    /// Bits per second port `b` sent between `from` and `to` ns.
    fn rate(&self, from: u64, to: u64) -> f64 {
        let bytes: u64 = self
            .out
            .iter()
            .filter(|o| (from..to).contains(&o.0))
            .map(|o| u64::from(o.1))
            .sum();
        bytes as f64 * 8.0 / ((to - from) as f64 * 1e-9)
    }

    fn summary(&self, now: u64) -> dataplane::stage::egress::PortSummary {
        self.chain.egress().summaries(t(now))[1].clone()
    }
}

/// `flows` flows taking turns (source ports from `sport`, not-ECT), each
/// frame `payload` bytes of UDP, together at `bps` from `start` to `end` ns.
fn constant_rate(
    frames: &[Vec<u8>],
    bps: f64,
    start: u64,
    end: u64,
) -> impl Iterator<Item = (u64, &[u8])> {
    let gap = frames[0].len() as f64 * 8.0 / bps * 1e9;
    (0u64..)
        .map(move |i| (start + (i as f64 * gap) as u64, i))
        .take_while(move |&(ts, _)| ts < end)
        .map(move |(ts, i)| (ts, frames[i as usize % frames.len()].as_slice()))
}

fn flows(sport: u16, n: u16, payload: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| udp_frame(sport + i, 0, payload)).collect()
}

/// A flood of unresponsive flows at three times a 4 Mbit/s port, each flow
/// at three times its share, as the lab floods r-b (1000-byte datagrams
/// from 1000 or 32 sockets taking turns): the port sends at least 99% of
/// its rate from its first frame on, in every half second of the flood,
/// with a queue of 1000 packets or of 64 (the lab's), and the queue stays
/// short. The
/// fair-share check holds each flow to the share; under the
/// work-conserving floor nothing is dropped, so the check's estimates
/// never idle the link (with every flow's packets dropped by the check
/// whatever the queue held, 1000 flows left the lab's port at 92% of its
/// rate, and 32 at 97%); Blue drops nothing of a capped flow, and the
/// share shrinks while the capped flows hold more than 20 ms of the link.
/// While it is shrunk the floor still spares flows under four times the
/// share before the shrinking: 32 flows whose share had shrunk left the
/// port at 75% of its rate from 0.5 to 1 s (94% with 64 packets of queue),
/// as the lab's two-worker run saw.
#[test]
fn floods_of_unresponsive_flows_keep_the_port_full() {
    for (n, limit) in [(1000u16, ""), (32, ""), (32, "limit = 64")] {
        let frames = flows(1024, n, 1000);
        let mut p = Port4::new(limit);
        p.run(constant_rate(&frames, 12e6, 0, 20_000 * MS));
        for half in 0..40 {
            let (from, to) = (half * 500 * MS, (half + 1) * 500 * MS);
            let use_ = p.rate(from, to) / 4e6;
            assert!(
                use_ >= 0.98,
                "{n} flows {limit:?}: link use {use_:.3} from {from} to {to} ns"
            );
        }
        let use_ = p.rate(0, 20_000 * MS) / 4e6;
        let s = p.summary(20_000 * MS);
        let sfb = s.sfb.clone().unwrap();
        eprintln!(
            "{n} flows: link use {use_:.4}, mean sojourn {:.1} ms, max {:.1} ms: {sfb:?}",
            s.counters.mean_sojourn_ms(),
            s.counters.sojourn_max_ns as f64 / 1e6
        );
        assert!(use_ >= 0.99, "{n} flows: {use_}");
        assert!(sfb.counters.ratedrop > 0, "{n} flows: {sfb:?}");
        assert!(
            s.counters.mean_sojourn_ms() < 60.0,
            "{n} flows: the queue stays short: {s:?}"
        );
    }
}

/// After a flood (3 s of 64-byte frames over 1024 unresponsive flows at
/// three times a 4 Mbit/s port) and 5 s with nothing, 20 new flows at 10%
/// of the rate (500 frames) lose none of their packets, and the stats read
/// the bins as the idle time left them: Blue's probabilities decay while
/// the link is idle. Under sch_sfb's rules (`profile = "linux"`) the bins
/// keep the flood's probabilities, and the new flows pay for it.
#[test]
fn new_flows_after_a_flood_see_none_of_it() {
    let flood = flows(1024, 1024, 64 - 42);
    let fresh = flows(40_000, 20, 64 - 42);
    let new_flows = |p: &mut Port4| {
        p.run(constant_rate(&flood, 12e6, 0, 3_000 * MS));
        let after = p.summary(8_000 * MS).sfb.unwrap();
        // 500 frames at 0.4 Mbit/s from 8 s.
        let gap = 64 * 8 * 1_000_000_000 / 400_000;
        p.run((0..500u64).map(|i| (8_000 * MS + i * gap, fresh[i as usize % 20].as_slice())));
        p.finish();
        let got = p.out.iter().filter(|o| o.2 >= 40_000).count();
        (500 - got, after)
    };
    let mut fair = Port4::new("");
    let (lost, after) = new_flows(&mut fair);
    eprintln!("fair: lost {lost} of 500; after the gap: {after:?}");
    assert!(
        after.maxprob < after.peak.maxprob / 100,
        "p decayed while idle: {after:?}"
    );
    assert!(lost < 5, "fair profile: lost {lost} of 500");
    let mut linux = Port4::new("profile = \"linux\"");
    let (lost, after) = new_flows(&mut linux);
    eprintln!("linux: lost {lost} of 500; after the gap: {after:?}");
    assert!(
        after.maxprob > SFB_MAX_PROB / 2,
        "sch_sfb keeps p: {after:?}"
    );
    assert!(lost > 50, "sch_sfb's rules: lost {lost} of 500");
}

/// The fair profile drops nothing while the queue is under its
/// work-conserving floor (2 ms of the link, at least two full frames),
/// whatever Blue's probabilities say; sch_sfb's rules drop at once.
#[test]
fn fair_profile_drops_nothing_under_the_floor() {
    let egress = EgressConfig {
        rate_bps: 4_000_000,
        burst_bytes: 3000,
        limit: 1000,
    };
    for (profile, lost_want) in [
        (dataplane::stage::sfb::SfbProfile::Fair, 0),
        (dataplane::stage::sfb::SfbProfile::Linux, 1),
    ] {
        let c = SfbConfig {
            profile,
            increment: 0,
            decrement: 0,
            ..cfg()
        };
        let mut q: SfbQueue<()> = SfbQueue::new(c, egress).unwrap();
        q.sfb_mut().force_probability(SFB_MAX_PROB);
        q.tick(t(0));
        let mut s = 3u64;
        let mut lost = 0;
        // A 1000-byte packet every 2 ms, the port's rate: the queue never
        // holds 3028 bytes.
        for i in 0..200u64 {
            let now = t(i * 2 * MS);
            q.drain_until(now, |_| {});
            let key = q.sfb().key_one(&random_flow(&mut s));
            if q.enqueue(&key, None, false, (), 1000, now).is_err() {
                lost += 1;
            }
        }
        assert_eq!(lost.min(1), lost_want, "{profile:?}: lost {lost}");
    }
}

/// While the queue is empty the fair profile's bins lose half their
/// probability every 100 ms of the queue's clock; the stats show it
/// before the next arrival applies it. sch_sfb's rules keep it.
#[test]
fn idle_time_halves_the_probabilities() {
    let egress = EgressConfig {
        rate_bps: 8_000_000,
        burst_bytes: 3000,
        limit: 1000,
    };
    for profile in [
        dataplane::stage::sfb::SfbProfile::Fair,
        dataplane::stage::sfb::SfbProfile::Linux,
    ] {
        let c = SfbConfig {
            profile,
            increment: 0,
            decrement: 0,
            ..cfg()
        };
        let mut q: SfbQueue<()> = SfbQueue::new(c, egress).unwrap();
        q.sfb_mut().force_probability(0x8000);
        q.tick(t(0));
        let key = q.sfb().key_one(&[1, 2, 3, 4]);
        // An ECN-capable packet: marked or passed, never dropped at p = 1/2.
        q.enqueue(&key, None, true, (), 1000, t(0)).unwrap();
        // It leaves at once (a full bucket) and takes 1 ms on the wire.
        assert_eq!(q.drain_until(t(MS / 2), |_| {}), 1);
        let later = q.stats(t(201 * MS));
        q.enqueue(&key, None, true, (), 1000, t(201 * MS)).unwrap();
        let bins = q.sfb().bins(q.sfb().active_set());
        match profile {
            dataplane::stage::sfb::SfbProfile::Fair => {
                // 200 ms idle: a quarter.
                assert_eq!(later.maxprob, 0x2000, "{later:?}");
                assert!(bins.iter().all(|b| b.p_mark == 0x2000), "{bins:?}");
            }
            dataplane::stage::sfb::SfbProfile::Linux => {
                assert_eq!(later.maxprob, 0x8000, "{later:?}");
                assert!(bins.iter().all(|b| b.p_mark == 0x8000), "{bins:?}");
            }
        }
    }
}
