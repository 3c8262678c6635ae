//! The traceback query parser and packet key on untrusted bytes. The body
//! and what it checks: `dataplane/tests/fuzz_common/digest.rs`, shared with
//! the stable property tests (`dataplane/tests/fuzz_props.rs`).
#![no_main]

#[path = "../../dataplane/tests/fuzz_common/mod.rs"]
mod fuzz_common;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_common::digest::check(data));
