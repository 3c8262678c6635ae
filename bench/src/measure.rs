//! The report binary's timer: medians of repeated samples, no statistics
//! beyond that (criterion does the careful work; the report needs numbers
//! that are comparable within one run).

use std::hint::black_box;
use std::time::{Duration, Instant};

use serde::Serialize;

/// One headline figure.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    /// `area/case/backend-or-peer`, as the criterion bench is named.
    pub name: String,
    /// Median nanoseconds per item (key or packet).
    pub ns_per_item: f64,
    /// Millions of items per second at that median.
    pub mitems_per_s: f64,
}

/// Times `run` (which processes `items` items per call and returns a value
/// the optimiser must keep) and returns the median ns per item over
/// `samples` samples of about `per_sample` each.
pub fn median_ns_per_item<T>(
    items: usize,
    samples: usize,
    per_sample: Duration,
    mut run: impl FnMut() -> T,
) -> f64 {
    let iters = calibrate(per_sample, &mut run);
    let mut v: Vec<f64> = (0..samples)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..iters {
                black_box(run());
            }
            t.elapsed().as_secs_f64() * 1e9 / (iters as f64 * items as f64)
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Measures with the report's default sampling (21 samples of 40 ms).
pub fn figure<T>(name: impl Into<String>, items: usize, run: impl FnMut() -> T) -> Figure {
    let ns = median_ns_per_item(items, 21, Duration::from_millis(40), run);
    Figure {
        name: name.into(),
        ns_per_item: ns,
        mitems_per_s: 1e3 / ns,
    }
}

/// How many calls of `run` fill `per_sample` (at least one).
fn calibrate<T>(per_sample: Duration, run: &mut impl FnMut() -> T) -> u64 {
    let start = Instant::now();
    let mut calls = 0u64;
    while start.elapsed() < per_sample / 4 || calls < 3 {
        black_box(run());
        calls += 1;
    }
    let per_call = start.elapsed().as_secs_f64() / calls as f64;
    ((per_sample.as_secs_f64() / per_call).ceil() as u64).max(1)
}

/// Two figures measured in turn, sample for sample (21 samples of 40 ms
/// each), so that a machine whose speed drifts (other work, frequency)
/// moves both alike and their ratio holds: `a` then `b`, each processing
/// `items` items per call.
pub fn figure_pair<T, U>(
    names: (impl Into<String>, impl Into<String>),
    items: usize,
    mut a: impl FnMut() -> T,
    mut b: impl FnMut() -> U,
) -> (Figure, Figure) {
    let per_sample = Duration::from_millis(40);
    let (ia, ib) = (calibrate(per_sample, &mut a), calibrate(per_sample, &mut b));
    let time = |iters: u64, f: &mut dyn FnMut()| {
        let t = Instant::now();
        for _ in 0..iters {
            f();
        }
        t.elapsed().as_secs_f64() * 1e9 / (iters as f64 * items as f64)
    };
    let (mut va, mut vb) = (Vec::new(), Vec::new());
    for _ in 0..21 {
        va.push(time(ia, &mut || {
            black_box(a());
        }));
        vb.push(time(ib, &mut || {
            black_box(b());
        }));
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let fig = |name: String, ns: f64| Figure {
        name,
        ns_per_item: ns,
        mitems_per_s: 1e3 / ns,
    };
    (
        fig(names.0.into(), median(&mut va)),
        fig(names.1.into(), median(&mut vb)),
    )
}
