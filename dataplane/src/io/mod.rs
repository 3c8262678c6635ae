//! Packet sources and sinks under the worker loop.
//!
//! [`port::Ports`] is the one interface a worker reads and sends through
//! (as smoltcp's `phy::Device` is under its `Interface::poll`): receive a
//! batch, send a copy, say what time it is, wait. Its backends:
//!
//! * [`socket`]: live interfaces, one `AF_PACKET` socket per interface and
//!   worker in a `PACKET_FANOUT` group, monotonic time (the portable
//!   default, opened through pnet);
//! * [`ring`]: the same over `TPACKET_V3` receive rings and batched
//!   `sendmmsg(2)` (Linux; `[io] backend = "ring"`);
//! * [`xdp`]: AF_XDP sockets behind an XDP program that redirects each
//!   port's frames to them, past the kernel's stack (Linux; `[io] backend
//!   = "xdp"`);
//! * [`memory`]: frames held in memory with their times and ingress ports
//!   (tests, benches, and replay, whose reader feeds each worker);
//! * [`capture`]: the capture file reader (pcap, pcapng, gzip) and writer
//!   that replay uses to feed the memory ports and to write what leaves
//!   each port.

pub mod capture;
pub mod memory;
pub mod port;
pub mod ring;
pub mod socket;
pub mod xdp;
