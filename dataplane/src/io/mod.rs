//! Packet sources and sinks: capture files (pcap, pcapng, gzip), and in later
//! changes live interfaces and memory.

pub mod capture;
