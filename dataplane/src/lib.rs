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

pub mod chain;
pub mod clock;
pub mod config;
pub mod flow;
pub mod io;
pub mod ipfix;
pub mod pipeline;
pub mod route;
pub mod runtime;
pub mod stage;
pub mod timing;
pub mod wire;
