//! Arbitrary bytes as a TOML router config.
//! The body and what it checks: `dataplane/tests/fuzz_common/config.rs`, shared
//! with the stable property tests (`dataplane/tests/fuzz_props.rs`).
#![no_main]

#[path = "../../dataplane/tests/fuzz_common/mod.rs"]
mod fuzz_common;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_common::config::check(data));
