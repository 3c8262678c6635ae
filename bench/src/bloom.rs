//! `bloom/*` benches (being written).

use criterion::Criterion;

use crate::measure::Figure;

/// Registers the `bloom/*` criterion benches.
pub fn register(_c: &mut Criterion) {}

/// The headline `bloom` figures for the report binary.
pub fn report() -> Vec<Figure> {
    Vec::new()
}
