//! What each stage adds to `pipeline/router/core`: the same worker and
//! 64-byte mix with one part of the built-in router taken out at a time,
//! ns per packet (best of five timings of six passes, per round):
//! `cargo run --release -p bench --example router_ablate -- [rounds [variant]]`
//! (one variant alone, e.g. under callgrind).
//!
//! `-heavy`, `-multicast` and `-icarus` turn a stage off; `-queue` sends r-b's
//! copies at once (no SFB, no shaper); `linux` runs r-b's SFB without the
//! fair-share check; `unshaped` shapes r-b to 10 Gbit/s (nothing waits,
//! nothing is dropped); `none` is parsing, wires and sending alone.

use dataplane::config::RouterConfig;
use dataplane::stage::sfb::SfbProfile;

/// Port r-b of the built-in router: the shaped SFB port.
const RB: usize = 1;

fn no_queue(c: &mut RouterConfig) {
    c.interfaces[RB].sfb = None;
    c.interfaces[RB].egress = None;
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|r| r.parse().ok())
        .unwrap_or(2);
    let only = std::env::args().nth(2);
    let frames = bench::router::mix64();
    type Change = fn(&mut RouterConfig);
    let variants: [(&str, Change); 9] = [
        ("core", |_| {}),
        ("-heavy", |c| c.heavy = None),
        ("-multicast", |c| c.multicast = None),
        ("-icarus", |c| c.icarus = None),
        ("-queue", no_queue),
        ("linux", |c| {
            if let Some(s) = &mut c.interfaces[RB].sfb {
                s.profile = SfbProfile::Linux;
            }
        }),
        ("unshaped", |c| {
            if let Some(e) = &mut c.interfaces[RB].egress {
                e.rate_bps = 10_000_000_000;
            }
        }),
        ("-queue-heavy", |c| {
            no_queue(c);
            c.heavy = None;
        }),
        ("none", |c| {
            no_queue(c);
            (c.heavy, c.multicast, c.icarus) = (None, None, None);
        }),
    ];
    for round in 0..rounds {
        for (name, change) in variants {
            if only.as_deref().is_some_and(|o| o != name) {
                continue;
            }
            let mut cfg = bench::router::router(true);
            change(&mut cfg);
            let mut w = bench::router::worker_for(&cfg, &frames);
            let mut done = bench::router::pass(&mut w);
            let mut best = f64::MAX;
            for _ in 0..5 {
                let t = std::time::Instant::now();
                let mut n = done;
                for _ in 0..6 {
                    n = bench::router::pass(&mut w);
                }
                best = best.min(t.elapsed().as_nanos() as f64 / (n - done) as f64);
                done = n;
            }
            println!("round {round} {name:12} {best:6.1} ns per packet");
        }
    }
}
