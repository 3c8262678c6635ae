//! Frames through the multicast stage: IGMP/MLD learning and forwarding.
//! The body and what it checks: `dataplane/tests/fuzz_common/multicast.rs`, shared
//! with the stable property tests (`dataplane/tests/fuzz_props.rs`).
#![no_main]

#[path = "../../dataplane/tests/fuzz_common/mod.rs"]
mod fuzz_common;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_common::multicast::check(data));
