//! The types both the ports and the stages handle: the [`Batch`] of
//! [`Packet`]s a worker reads, each packet's [`Verdict`] (to a [`PortSet`],
//! or a [`DropReason`]), and the [`TxFrame`] each departing copy becomes,
//! handed to a [`Transmit`].
//!
//! This module is a leaf: it imports the packet views ([`crate::wire`])
//! and the clock, and nothing above them. The port backends
//! ([`crate::io`]) fill batches and transmit frames through these types
//! without knowing any stage or the router's configuration; the stages
//! ([`crate::stage`]) and the chain read and write the same types without
//! knowing which backend runs under them (as smoltcp's `phy` is imported
//! by `iface`, never the reverse). `dataplane/tests/module_imports.rs`
//! checks that direction.

mod batch;
mod ports;
mod transmit;
mod verdict;

pub use batch::{BATCH_SIZE, Batch, Lease, Packet};
pub use ports::{NO_INGRESS, PortSet};
pub use transmit::{Transmit, TxFrame};
pub use verdict::{DropCounters, DropReason, Verdict};
