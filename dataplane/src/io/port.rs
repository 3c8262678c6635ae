//! The port interface a worker runs over (see [`crate::io`]).

use serde::Serialize;

use crate::clock::Timestamp;
use crate::io::xdp::PortMode;
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
    /// Frames the kernel dropped before the router could read them: the
    /// socket's receive queue or ring was full (`PACKET_STATISTICS`
    /// `tp_drops`; live only).
    pub rx_dropped: u64,
    /// Times the kernel found the ring's next block still held by the
    /// router (`tp_freeze_q_cnt`; ring backend only).
    pub rx_frozen: u64,
    /// Copies the kernel refused to send after the router had handed them
    /// to the port (ring and xdp backends, whose sends are batched; counted
    /// in the egress stage's `sent`).
    pub tx_dropped: u64,
    /// Frames the port's XDP program left to the kernel's own stack: not
    /// the router's on a routed port, or on a queue without a socket (xdp
    /// backend only; not input, not in `rx_packets`).
    pub rx_passed: u64,
    /// How the port's frames reach the router (xdp backend only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<PortMode>,
}

impl RxCounters {
    /// Adds another worker's counters for the same port.
    pub fn merge(&mut self, o: &RxCounters) {
        self.rx_packets += o.rx_packets;
        self.rx_bytes += o.rx_bytes;
        self.rx_errors += o.rx_errors;
        self.rx_outgoing_dropped += o.rx_outgoing_dropped;
        self.rx_dropped += o.rx_dropped;
        self.rx_frozen += o.rx_frozen;
        self.tx_dropped += o.tx_dropped;
        self.rx_passed += o.rx_passed;
        self.mode = self.mode.or(o.mode);
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

    /// How long input may sit in the backend, unread though it arrived,
    /// before [`Ports::recv`] can see it (a ring's part-filled block waits
    /// for its timeout). A stopping worker waits this long for more before
    /// it concludes the input is drained. Zero by default.
    fn settle_time(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }

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

    /// Sends what [`Transmit::send`] gathered (a backend that batches its
    /// sends); the worker calls it after every round. By default nothing
    /// is held.
    fn flush(&mut self) {}

    /// Reads the counters the kernel keeps (socket and ring drops) into
    /// [`rx_counters`](Self::rx_counters); the worker calls it at every
    /// tick and when it stops. By default there are none.
    fn refresh_counters(&mut self) {}

    /// The worker is about to act on what it shares with other workers
    /// (the shaped ports' queues, multicast memberships, learned
    /// neighbours) for the input [`recv`](Self::recv) returned last (a
    /// batch, or the end of the input). A backend whose workers must do so
    /// in an order fixed by the input, so that a run is repeatable (a
    /// replay with several workers), waits here for this worker's turn; it
    /// is held until [`pass_turn`](Self::pass_turn). Live ports act as the
    /// packets come: by default this returns at once.
    fn take_turn(&mut self) {}

    /// The worker is done with the shared state until its next
    /// [`take_turn`](Self::take_turn) (its batch, tick and report, or its
    /// end, are over).
    fn pass_turn(&mut self) {}
}
