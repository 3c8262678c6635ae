//! One pass of a `pipeline` bench case, for instruction counts:
//!
//! ```text
//! cargo build --release -p bench --example heavy_cg
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out \
//!     target/release/examples/heavy_cg pipeline
//! callgrind_annotate --inclusive=yes /tmp/cg.out | grep bench::pipeline
//! ```
//!
//! Modes: `pipeline` (`pipeline/heavy/zipf64`: [`replay`]), `tls2`,
//! `ours` ([`detect_ours`]), `hk` ([`detect_heavykeeper`]); `ab` times
//! both interleaved (15 rounds, medians) for quick comparisons. The input is
//! built first, so read the inclusive count of the timed function and
//! divide by the packets (10^6 for the Zipf trace).

use std::hint::black_box;

use bench::pipeline::{Keys, Trace, detect_heavykeeper, detect_ours, replay};
use dataplane::pipeline::Batch;

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let mut batch = Batch::new();
    match mode.as_str() {
        "pipeline" => println!("{:?}", replay(black_box(&Trace::zipf64()), &mut batch)),
        "tls2" => match Trace::tls2() {
            Some(t) => println!("{:?}", replay(black_box(&t), &mut batch)),
            None => eprintln!("no {}", bench::pipeline::TLS2),
        },
        "ours" => {
            let k = Keys::of(&Trace::zipf64());
            println!("{}", detect_ours(black_box(&k)).len());
        }
        "hk" => {
            let k = Keys::of(&Trace::zipf64());
            println!("{}", detect_heavykeeper(black_box(&k)).len());
        }
        "ab" => {
            // Interleaved timing, for quick comparisons on a busy machine:
            // ours then heavykeeper, 15 rounds, median ns/packet of each and
            // the median of the per-round ratios.
            let k = Keys::of(&Trace::zipf64());
            let (mut a, mut b, mut r) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..15 {
                let t = std::time::Instant::now();
                black_box(detect_ours(black_box(&k)).len());
                let x = t.elapsed().as_secs_f64() * 1e9 / k.len() as f64;
                let t = std::time::Instant::now();
                black_box(detect_heavykeeper(black_box(&k)).len());
                let y = t.elapsed().as_secs_f64() * 1e9 / k.len() as f64;
                a.push(x);
                b.push(y);
                r.push(y / x);
            }
            for v in [&mut a, &mut b, &mut r] {
                v.sort_by(f64::total_cmp);
            }
            println!(
                "ours {:.2} ns  heavykeeper {:.2} ns  ratio {:.3}",
                a[7], b[7], r[7]
            );
        }
        _ => eprintln!("usage: heavy_cg pipeline|tls2|ours|hk|ab"),
    }
}
