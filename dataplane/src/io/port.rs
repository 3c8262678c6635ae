//! The port interface a worker runs over (see [`crate::io`]).

use serde::Serialize;

use crate::clock::Timestamp;
use crate::io::xdp::PortMode;
use crate::packet::{Batch, Transmit};

/// What a live backend needs to know to open one interface. The router's
/// configuration builds these (`RouterConfig::port_settings`); the
/// backends take nothing else from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSettings {
    /// The Linux interface name.
    pub name: String,
    /// Receive frames for every MAC address.
    pub promiscuous: bool,
    /// Socket receive buffer in bytes (`SO_RCVBUFFORCE`; pnet backend).
    pub recv_buffer_bytes: u64,
    /// The port has addresses of the router's: on the xdp backend its
    /// program passes the frames that are not the router's to the kernel.
    pub routed: bool,
}

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
    /// Frames copied into the router's batch on the way in rather than
    /// lent where the kernel put them: a frame whose VLAN tag the kernel
    /// took out, copied with the tag back in (ring backend only; its
    /// other frames are not copied).
    pub rx_copied: u64,
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
    /// Why the kernel refused copies (the pnet backend's send errors, the
    /// ring and xdp backends' `tx_dropped`), and the port's MTU.
    pub tx_errors: TxErrors,
}

/// Why the kernel refused to send copies out of a port, counted by reason
/// (`send(2)`'s, `sendmmsg(2)`'s or the transmit ring's), with what an
/// operator needs to act on the commonest: the longest frame refused as
/// too long and the interface's MTU.
///
/// Shown on the port line of the stats as `(N err: 51886 msgsize
/// 1534>1500, 3 nobufs)`: 51,886 copies refused as longer than the
/// interface takes (the longest 1534 bytes, the MTU 1500: an Ethernet
/// frame may be the MTU plus its 14-byte header), 3 for want of buffers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TxErrors {
    /// `EMSGSIZE`: the frame is longer than the interface takes (its MTU
    /// and the link header).
    pub msgsize: u64,
    /// The longest frame refused with `EMSGSIZE`, bytes.
    pub msgsize_largest: u32,
    /// The interface's MTU when the port was opened (0: not known).
    pub mtu: u32,
    /// `ENOBUFS`: the device's queue had no room, still after a wait.
    pub nobufs: u64,
    /// `EAGAIN`: the socket's send buffer or the transmit ring was full,
    /// still after a wait.
    pub again: u64,
    /// Any other error (`ENETDOWN`: the interface went down, ...).
    pub other: u64,
    /// The errno of the latest other error.
    pub other_errno: i32,
}

impl TxErrors {
    /// The reasons, as the stats text and the metrics name them.
    pub const REASONS: [&'static str; 4] = ["msgsize", "nobufs", "again", "other"];

    /// Counts `n` copies of `len` bytes refused with `errno`.
    pub fn record(&mut self, errno: i32, len: usize, n: u64) {
        match errno {
            libc::EMSGSIZE => {
                self.msgsize += n;
                self.msgsize_largest = self
                    .msgsize_largest
                    .max(u32::try_from(len).unwrap_or(u32::MAX));
            }
            libc::ENOBUFS => self.nobufs += n,
            libc::EAGAIN => self.again += n,
            e => {
                self.other += n;
                self.other_errno = e;
            }
        }
    }

    /// Copies refused, every reason.
    pub fn total(&self) -> u64 {
        self.msgsize + self.nobufs + self.again + self.other
    }

    /// The count of each of [`REASONS`](Self::REASONS), in order.
    pub fn by_reason(&self) -> [(&'static str, u64); 4] {
        [
            ("msgsize", self.msgsize),
            ("nobufs", self.nobufs),
            ("again", self.again),
            ("other", self.other),
        ]
    }

    /// Adds another worker's counts for the same port.
    pub fn merge(&mut self, o: &TxErrors) {
        self.msgsize += o.msgsize;
        self.msgsize_largest = self.msgsize_largest.max(o.msgsize_largest);
        self.mtu = self.mtu.max(o.mtu);
        self.nobufs += o.nobufs;
        self.again += o.again;
        self.other += o.other;
        if o.other_errno != 0 {
            self.other_errno = o.other_errno;
        }
    }
}

impl std::fmt::Display for TxErrors {
    /// `51886 msgsize 1534>1500, 3 nobufs, 2 other (errno 100: Network is
    /// down)`: the reasons that occurred.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut sep = "";
        if self.msgsize > 0 {
            write!(
                f,
                "{} msgsize {}>{}",
                self.msgsize, self.msgsize_largest, self.mtu
            )?;
            sep = ", ";
        }
        for (name, n) in [("nobufs", self.nobufs), ("again", self.again)] {
            if n > 0 {
                write!(f, "{sep}{n} {name}")?;
                sep = ", ";
            }
        }
        if self.other > 0 {
            let e = std::io::Error::from_raw_os_error(self.other_errno);
            let text = e.to_string();
            let text = text.split(" (os error").next().unwrap_or_default();
            write!(
                f,
                "{sep}{} other (errno {}: {text})",
                self.other, self.other_errno
            )?;
        }
        Ok(())
    }
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
        self.rx_copied += o.rx_copied;
        self.tx_dropped += o.tx_dropped;
        self.rx_passed += o.rx_passed;
        self.mode = self.mode.or(o.mode);
        self.tx_errors.merge(&o.tx_errors);
    }
}

/// A worker's ports: where batches come from and copies go.
pub trait Ports: Transmit {
    /// Moves frames that have arrived into `batch`, up to its room, each
    /// with its arrival time and ingress port; returns how many. Does not
    /// wait.
    ///
    /// A backend may lend its frames rather than copy them
    /// ([`Batch::lend`]): the chain then works on each frame where the
    /// backend holds it. A lending backend takes its memory back only
    /// after the batch its frames went into was cleared, so the caller
    /// clears the batch before each call (the worker does); a packet ring
    /// lends nothing while a batch it filled still holds its frames.
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
