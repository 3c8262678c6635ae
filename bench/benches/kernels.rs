//! Criterion benches for the kernels: `cargo bench -p bench --bench kernels`.
//! Names follow `area/case/backend-or-peer`; filter with e.g. `-- hash/ipv4`.

use criterion::{Criterion, criterion_group, criterion_main};

fn all(c: &mut Criterion) {
    bench::hash::register(c);
    bench::bloom::register(c);
    bench::cms::register(c);
}

criterion_group!(benches, all);
criterion_main!(benches);
