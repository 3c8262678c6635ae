//! `cms/*` benches (being written).

use criterion::Criterion;

use crate::measure::Figure;

/// Registers the `cms/*` criterion benches.
pub fn register(_c: &mut Criterion) {}

/// The headline `cms` figures for the report binary.
pub fn report() -> Vec<Figure> {
    Vec::new()
}
