//! The stages: one file, one struct with its own counters each. Every stage
//! implements [`crate::pipeline::Stage`].

pub mod egress;
pub mod heavy;
pub mod icarus;
pub mod multicast;
pub mod sfb;
