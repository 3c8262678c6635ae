//! Arbitrary datagrams as messages between routers, to a router's peering
//! control path (`dataplane::wire::peer`, `dataplane::peer`).
//! The body and what it checks: `dataplane/tests/fuzz_common/peer.rs`, shared
//! with the stable property tests (`dataplane/tests/fuzz_props.rs`).
#![no_main]

#[path = "../../dataplane/tests/fuzz_common/mod.rs"]
mod fuzz_common;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_common::peer::check(data));
