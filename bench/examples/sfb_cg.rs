//! One pass of `sfb/enqueue-dequeue` on the best backend, for instruction
//! counts:
//!
//! ```text
//! cargo build --release -p bench --example sfb_cg
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/sfb.out \
//!     target/release/examples/sfb_cg
//! callgrind_annotate --inclusive=yes /tmp/sfb.out | grep BenchWorkload::run
//! ```
//!
//! The case is built (and run once to warm up) before the counted pass;
//! divide the inclusive count of the second `run` by
//! [`bench::sfb::PACKETS`]. With `ab`, times 15 passes and prints the
//! median ns per packet instead. With `linux` (first or second argument),
//! SFB runs sch_sfb's rules alone (`profile = "linux"`), not the router's
//! default.

use std::hint::black_box;

use bench::sfb::{Case, PACKETS};
use dataplane::stage::sfb::SfbProfile;
use kernels::Backend;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let profile = if args.iter().any(|a| a == "linux") {
        SfbProfile::Linux
    } else {
        SfbProfile::Fair
    };
    let Some(mut case) = Case::with_profile(profile, Backend::best()) else {
        eprintln!("no backend");
        return;
    };
    if args.iter().any(|a| a == "ab") {
        let mut v: Vec<f64> = (0..15)
            .map(|_| {
                let t = std::time::Instant::now();
                black_box(case.run());
                t.elapsed().as_secs_f64() * 1e9 / PACKETS as f64
            })
            .collect();
        v.sort_by(f64::total_cmp);
        println!("sfb enqueue+dequeue {:.2} ns/packet (median of 15)", v[7]);
    } else {
        println!("{}", black_box(case.run()));
    }
}
