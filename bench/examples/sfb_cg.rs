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
//! median ns per packet instead.

use std::hint::black_box;

use bench::sfb::{Case, PACKETS};
use kernels::Backend;

fn main() {
    let Some(mut case) = Case::new(Backend::best()) else {
        eprintln!("no backend");
        return;
    };
    if std::env::args().nth(1).as_deref() == Some("ab") {
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
