//! Runs `pipeline/router/<case>` passes for a profiler:
//! `cargo run --release -p bench --example router_cg -- [default|core] [passes]`
//! (e.g. under `valgrind --tool=callgrind` or `perf record`).

fn main() {
    let mut args = std::env::args().skip(1);
    let core = args.next().as_deref() == Some("core");
    let passes: u64 = args.next().and_then(|p| p.parse().ok()).unwrap_or(50);
    let frames = bench::router::mix64();
    let mut w = bench::router::worker(core, &frames);
    let t = std::time::Instant::now();
    let mut n = 0;
    for _ in 0..passes {
        n = bench::router::pass(&mut w);
    }
    let ns = t.elapsed().as_nanos() as f64 / n as f64;
    println!("{n} packets, {ns:.1} ns per packet");
}
