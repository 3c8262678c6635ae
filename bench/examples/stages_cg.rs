//! Passes of the `stages` bench cases, for instruction counts and quick
//! timings:
//!
//! ```text
//! cargo build --release -p bench --example stages_cg
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out \
//!     target/release/examples/stages_cg mc64
//! callgrind_annotate --inclusive=yes /tmp/cg.out | grep -E 'run|pass'
//! ```
//!
//! Modes: `mc64`, `mc8` (`multicast/query/{64,8}`: 32 calls of
//! [`MulticastInputs::run`], 2,048 keys), `v4`, `v6` (`icarus/check/*`: one
//! [`IcarusInputs::pass`], 2,048 packets). The inputs are built first, so
//! read the inclusive count of the timed function and divide by 2,048.
//! `time` times every case (21 rounds each, medians), for quick checks.

use std::hint::black_box;
use std::time::Instant;

use bench::stages::{BATCH, IcarusInputs, MulticastInputs};
use dataplane::pipeline::PortSet;
use dataplane::stage::icarus::Outcome;

fn multicast(ports: usize) -> u64 {
    let mut inp = MulticastInputs::new(ports);
    let mut out = [PortSet::EMPTY; BATCH];
    let mut x = 0;
    for i in 0..32 {
        x ^= inp.run(black_box(i), &mut out);
    }
    x
}

fn icarus(v6: bool) -> usize {
    let mut inp = IcarusInputs::new(v6);
    let mut out = [Outcome::NoOption; BATCH];
    inp.pass(&mut out)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn time() {
    let pad: usize = std::env::var("PAD")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let _junk = vec![1u8; pad];
    for ports in [64, 8] {
        let mut inp = MulticastInputs::new(ports);
        let mut out = [PortSet::EMPTY; BATCH];
        let v = (0..21)
            .map(|_| {
                let t = Instant::now();
                let mut x = 0;
                for i in 0..3200 {
                    x ^= inp.run(i, &mut out);
                }
                black_box(x);
                t.elapsed().as_secs_f64() * 1e9 / (3200 * BATCH) as f64
            })
            .collect();
        println!("multicast/query/{ports}  {:.3} ns", median(v));
    }
    for v6 in [false, true] {
        let mut inp = IcarusInputs::new(v6);
        let mut out = [Outcome::NoOption; BATCH];
        let v = (0..2001)
            .map(|_| {
                inp.restore();
                let t = Instant::now();
                black_box(inp.pass(&mut out));
                t.elapsed().as_secs_f64() * 1e9 / inp.packets() as f64
            })
            .collect();
        let name = if v6 { "v6" } else { "v4" };
        println!("icarus/check/{name}  {:.3} ns", median(v));
    }
}

fn main() {
    match std::env::args().nth(1).unwrap_or_default().as_str() {
        "mc64" => println!("{}", multicast(64)),
        "mc8" => println!("{}", multicast(8)),
        "v4" => println!("{}", icarus(false)),
        "v6" => println!("{}", icarus(true)),
        "time" => time(),
        _ => eprintln!("usage: stages_cg mc64|mc8|v4|v6|time"),
    }
}
