//! Runs `pipeline/router/<case>` passes for a profiler:
//! `cargo run --release -p bench --example router_cg -- [default|core|digest] [passes] [links] [linux]`
//! (e.g. under `valgrind --tool=callgrind` or `perf record`).
//!
//! Built with `--features step-timing` it also prints the time of each
//! step of the chain per packet ([`dataplane::timing`]); with `links` it
//! prints, per pass, what the shaped SFB port r-b was offered and sent and
//! the rate it sent at in capture time; `linux` runs r-b's SFB with
//! sch_sfb's rules (`profile = "linux"`) instead of the default; `digest`
//! is `default` with the digest stage on ([`bench::router::router_digest`]).

use dataplane::clock::Timestamp;
use dataplane::stage::sfb::SfbProfile;
use dataplane::timing::{self, Step};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let core = args.first().map(String::as_str) == Some("core");
    let passes: u64 = args.get(1).and_then(|p| p.parse().ok()).unwrap_or(50);
    let links = args.iter().any(|a| a == "links");
    let frames = bench::router::mix64();
    let mut cfg = match args.first().map(String::as_str) {
        Some("digest") => bench::router::router_digest(),
        _ => bench::router::router(core),
    };
    if args.iter().any(|a| a == "linux") {
        for i in &mut cfg.interfaces {
            if let Some(s) = &mut i.sfb {
                s.profile = SfbProfile::Linux;
            }
        }
    }
    let mut w = bench::router::worker_for(&cfg, &frames);
    let pass_s = (bench::router::FRAMES as u64 * bench::router::GAP_NS) as f64 / 1e9;
    let (t, ticks0) = (std::time::Instant::now(), timing::ticks());
    let mut n = 0;
    let mut last = (0, 0, 0);
    for _ in 0..passes {
        n = bench::router::pass(&mut w);
        if links {
            let s = w
                .chain()
                .egress()
                .summaries(Timestamp::from_nanos(u64::MAX));
            if let Some(c) = s.iter().find(|s| s.name == "r-b").map(|s| &s.counters) {
                let (copies, sent, bytes) =
                    (c.copies - last.0, c.sent - last.1, c.sent_bytes - last.2);
                let mbps = bytes as f64 * 8.0 / pass_s / 1e6;
                println!("r-b: offered {copies} sent {sent} ({bytes} bytes, {mbps:.1} Mbit/s)");
                last = (c.copies, c.sent, c.sent_bytes);
            }
        }
    }
    let elapsed = t.elapsed().as_nanos() as f64;
    let ns = elapsed / n as f64;
    println!("{n} packets, {ns:.1} ns per packet");
    if timing::ENABLED {
        // Ticks to nanoseconds over the whole run.
        let per_ns = timing::ticks().wrapping_sub(ticks0) as f64 / elapsed;
        let totals = timing::totals();
        for s in Step::ALL {
            let step_ns = totals[s.index()] as f64 / per_ns / n as f64;
            println!("{:14} {step_ns:6.1} ns per packet", s.name());
        }
    }
}
