//! Bloomplane dataplane: zero-copy packet views, capture and port I/O, the
//! stages, the router's chain of them, and the workers that run it.
//!
//! * [`wire`]: parsing without copying (Ethernet, VLAN stacks, SLL, raw
//!   IP; IPv4/IPv6 with extension headers; TCP/UDP/ICMP/IGMP/MLD; the
//!   Icarus option), every length checked, malformed frames classified by
//!   reason; ECN marking.
//! * [`io`]: capture files (pcap, pcapng, gzip; reading with file and
//!   offset in every error, writing pcap) and the port backends the worker
//!   loop runs on: live sockets through pnet, a `TPACKET_V3` ring with
//!   `sendmmsg`, and memory (tests, benches, the offline replay).
//! * [`stage`]: heavy-flow detection, SFB egress queues with token-bucket
//!   shapers, per-interface multicast filters learned from IGMP/MLD, Icarus
//!   loop detection, and the wires between ports.
//! * [`chain`]: the stages in their fixed order, built once from a
//!   [`config::RouterConfig`] (a router.toml); [`pipeline`] parses a batch
//!   and accounts for every packet.
//! * [`runtime`]: pinned worker threads, the periodic and final reports,
//!   privileges dropped after start-up; the `dataplane` binary (`run`,
//!   `check-config`) is built on it, and `traffic-gen replay` runs the same
//!   chain and worker loop offline.
//!
//! The router in a few lines: a chain built from a configuration, fed a
//! capture, driven by the worker loop as `traffic-gen replay` drives it
//! (memory ports, capture time), with every packet accounted for:
//!
//! ```
//! use dataplane::chain::Chain;
//! use dataplane::clock::Timestamp;
//! use dataplane::config::RouterConfig;
//! use dataplane::io::capture::{CaptureReader, CaptureWriter};
//! use dataplane::io::memory::MemoryPorts;
//! use dataplane::runtime::{Stats, Worker};
//! use dataplane::wire::LinkType;
//!
//! // A bump in the wire from port a to port b, b shaped to 1 Mbit/s behind
//! // SFB, heavy-flow detection on.
//! let cfg = RouterConfig::from_toml_str(
//!     r#"
//!     [[interfaces]]
//!     name = "a"
//!     [[interfaces]]
//!     name = "b"
//!     [interfaces.egress]
//!     rate_bps = 1_000_000
//!     [interfaces.sfb]
//!     seed = 1
//!     [[wires]]
//!     from = "a"
//!     to = "b"
//!     [heavy]
//!     threshold = { share = 0.1 }
//!     "#,
//!     "example.toml",
//! )?;
//!
//! // A capture of 100 UDP frames 10.0.0.1:1234 -> 10.0.0.2:53, 1 ms apart,
//! // written into memory.
//! let mut frame = [0u8; 60];
//! frame[12..14].copy_from_slice(&[0x08, 0x00]); // IPv4
//! frame[14] = 0x45; // version 4, 20-byte header
//! frame[16..18].copy_from_slice(&46u16.to_be_bytes()); // IP length
//! frame[22] = 64; // TTL
//! frame[23] = 17; // UDP
//! frame[26..30].copy_from_slice(&[10, 0, 0, 1]);
//! frame[30..34].copy_from_slice(&[10, 0, 0, 2]);
//! frame[34..36].copy_from_slice(&1234u16.to_be_bytes());
//! frame[36..38].copy_from_slice(&53u16.to_be_bytes());
//! frame[38..40].copy_from_slice(&26u16.to_be_bytes()); // UDP length
//! let mut w = CaptureWriter::from_writer(Vec::new(), LinkType::Ethernet, 65535)?;
//! for i in 0..100 {
//!     w.write(i * 1_000_000, 60, &frame)?;
//! }
//! let pcap = w.finish()?;
//!
//! // Read back as any capture file is, every frame arriving on port a.
//! let mut capture = CaptureReader::from_reader("memory.pcap", std::io::Cursor::new(pcap))?;
//! let mut ports = MemoryPorts::new(cfg.interfaces.len());
//! while let Some(r) = capture.next_record()? {
//!     ports.push(Timestamp::from_nanos(r.ts_ns), 0, r.link_type, r.orig_len, r.data);
//! }
//!
//! // The chain `dataplane run` would build, on one worker.
//! let mut worker = Worker::new(0, Chain::build(&cfg)?, ports, None);
//! while worker.step() {}
//! worker.finish(); // closes the heavy-flow epoch, drains b's queue
//!
//! let c = worker.chain().counters();
//! assert_eq!(c.received, 100);
//! assert_eq!(c.forwarded + c.dropped.total(), c.received);
//! assert_eq!(worker.io().tx_counts()[1].packets, c.forwarded);
//! // The counters as `dataplane run` and `traffic-gen replay` print them.
//! let text = Stats::of(&worker, None).render();
//! assert!(text.contains("pipeline received 100"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Parsing alone: a frame in, a summary (flow, offsets, flags) out, or the
//! reason it is malformed; never a panic.
//!
//! ```
//! use dataplane::wire::{LinkType, parse};
//!
//! // An IPv4/UDP frame: 14 bytes of Ethernet, 20 of IP, 8 of UDP.
//! let mut frame = [0u8; 42];
//! frame[12..14].copy_from_slice(&[0x08, 0x00]);
//! frame[14] = 0x45;
//! frame[16..18].copy_from_slice(&28u16.to_be_bytes());
//! frame[23] = 17;
//! frame[36..38].copy_from_slice(&53u16.to_be_bytes());
//! frame[38..40].copy_from_slice(&8u16.to_be_bytes());
//! let p = parse(LinkType::Ethernet, &frame).unwrap();
//! assert_eq!(p.flow.unwrap().to_string(), "0.0.0.0:0 -> 0.0.0.0:53 udp");
//! // Cut short, it is malformed (with a reason), never a panic.
//! assert!(parse(LinkType::Ethernet, &frame[..20]).is_err());
//! ```
//!
//! See `ARCHITECTURE.md` at the repository root for the map.

pub mod addr;
pub mod chain;
pub mod cli;
pub mod clock;
pub mod config;
/// Flow keys, parsed from the wire: [`wire::flow`] under its short name.
pub use wire::flow;
pub mod io;
pub mod ipfix;
pub mod packet;
pub mod peer;
pub mod pipeline;
pub mod route;
pub mod runtime;
pub mod stage;
pub mod timing;
pub mod wire;
