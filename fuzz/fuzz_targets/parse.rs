//! Arbitrary bytes as a frame through `dataplane::wire::parse` with every link
//! type.
//! The body and what it checks: `dataplane/tests/fuzz_common/parse.rs`, shared
//! with the stable property tests (`dataplane/tests/fuzz_props.rs`).
#![no_main]

#[path = "../../dataplane/tests/fuzz_common/mod.rs"]
mod fuzz_common;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_common::parse::check(data));
