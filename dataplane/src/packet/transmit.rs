//! The frame a port sends ([`TxFrame`]) and where it goes ([`Transmit`]).
//!
//! The egress stage hands every departing copy to a [`Transmit`]; the port
//! backends in [`crate::io`] implement it (a socket, a ring, a capture
//! file per port, memory), and so does anything that wraps them.

use crate::clock::Timestamp;

/// A copy leaving a port.
#[derive(Debug, Clone, Copy)]
pub struct TxFrame<'a> {
    /// The port.
    pub port: u8,
    /// The bytes.
    pub frame: &'a [u8],
    /// The length on the wire (more than `frame` when a capture cut it).
    pub wire_len: u32,
    /// When its packet arrived.
    pub arrived: Timestamp,
    /// When it leaves: the arrival for a port without a queue, the time
    /// the shaper released it for a queued one.
    pub departs: Timestamp,
    /// Whether it came out of the port's queue.
    pub queued: bool,
}

/// Where departing copies go: a socket, a capture file, memory.
pub trait Transmit {
    /// Sends one copy; `false` when it could not leave (counted as a send
    /// error).
    fn send(&mut self, tx: &TxFrame<'_>) -> bool;
}
