//! Criterion benches for the dataplane: `cargo bench -p bench --bench dataplane`.
//! Names follow `area/case/backend-or-peer`; filter with e.g. `-- pipeline/heavy`.

use criterion::{Criterion, criterion_group, criterion_main};

fn all(c: &mut Criterion) {
    bench::lpm::register(c);
    bench::pipeline::register(c);
    bench::router::register(c);
    bench::sfb::register(c);
    bench::stages::register(c);
}

criterion_group!(benches, all);
criterion_main!(benches);
