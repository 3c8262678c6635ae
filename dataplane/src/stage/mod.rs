//! The stages: one file (or folder), one struct with its own counters
//! each. The router's chain ([`crate::chain::Chain`]) calls them in a fixed
//! order; every stage but the egress one also implements
//! [`crate::pipeline::Stage`], for tests and benches of single stages.

pub mod digest;
pub mod egress;
pub mod forward;
pub mod heavy;
pub mod icarus;
pub mod multicast;
pub mod sfb;
pub mod wires;
