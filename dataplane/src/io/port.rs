//! The port interface a worker runs over (see [`crate::io`]).

use serde::Serialize;

use crate::clock::Timestamp;
use crate::pipeline::Batch;
use crate::stage::egress::Transmit;

/// What a backend counts per port on the way in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RxCounters {
    /// Frames read.
    pub rx_packets: u64,
    /// Their bytes (wire length).
    pub rx_bytes: u64,
    /// Read errors (other than "nothing to read").
    pub rx_errors: u64,
    /// Frames other local sockets or the host stack sent out of this port,
    /// read back and dropped (live only; not input, not in `rx_packets`).
    pub rx_outgoing_dropped: u64,
}

impl RxCounters {
    /// Adds another worker's counters for the same port.
    pub fn merge(&mut self, o: &RxCounters) {
        self.rx_packets += o.rx_packets;
        self.rx_bytes += o.rx_bytes;
        self.rx_errors += o.rx_errors;
        self.rx_outgoing_dropped += o.rx_outgoing_dropped;
    }
}

/// A worker's ports: where batches come from and copies go.
pub trait Ports: Transmit {
    /// Moves frames that have arrived into `batch`, up to its room, each
    /// with its arrival time and ingress port; returns how many. Does not
    /// wait.
    fn recv(&mut self, batch: &mut Batch) -> usize;

    /// The backend's clock: monotonic time live; on replay and in memory,
    /// the time of the latest frame handed out (capture time).
    fn now(&mut self) -> Timestamp;

    /// Nothing came in: waits until input may be there, or until `until`
    /// (the next queued departure) has passed. `false` when no input will
    /// ever come again (the end of a capture or of the frames in memory).
    fn wait(&mut self, until: Option<Timestamp>) -> bool;

    /// Whether [`now`](Self::now) is real time. A stopping worker then
    /// sends its queued copies at their rate until a deadline; otherwise
    /// (capture time) it sends them all at the times their shapers release
    /// them.
    fn real_time(&self) -> bool;

    /// Receive counters, one per port.
    fn rx_counters(&self) -> &[RxCounters];
}
