//! The packet to trace: a frame of a capture, or an IP datagram in hex.

use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use dataplane::io::capture::CaptureReader;
use dataplane::stage::digest::query::decode_hex;
use dataplane::stage::digest::{Completeness, Invariant};
use dataplane::wire::{LinkType, parse};

/// The packet a traceback is about.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Packet {
    /// Its IP datagram from the IP header (what the routers are sent).
    #[serde(skip)]
    pub ip: Vec<u8>,
    /// When it was seen (the capture's time), Unix ns.
    pub seen_unix_ns: Option<u64>,
    /// `10.0.0.1:1000 -> 10.0.0.2:2000 udp`, or what can be said.
    pub summary: String,
}

impl Packet {
    /// The IP datagram `ip` (hexadecimal, from the IP header), seen at
    /// `at` when known.
    ///
    /// # Errors
    /// Not hexadecimal, or not an IP datagram with the bytes a digest
    /// covers.
    pub fn from_hex(hex: &str, at: Option<u64>) -> Result<Packet> {
        let ip = decode_hex(hex.trim()).map_err(|e| anyhow!("--hex: {e}"))?;
        Invariant::from_ip(&ip, Completeness::Whole).map_err(|e| anyhow!("--hex: {e}"))?;
        let summary = parse(LinkType::RawIp, &ip)
            .ok()
            .and_then(|p| p.flow)
            .map_or_else(|| format!("{} bytes of IP", ip.len()), |f| f.to_string());
        Ok(Packet {
            ip,
            seen_unix_ns: at,
            summary,
        })
    }

    /// Frame `number` (1 is the first, as Wireshark counts) of `capture`.
    ///
    /// # Errors
    /// The capture cannot be read up to it, or the frame is not IP with
    /// the bytes a digest covers.
    pub fn from_capture(capture: &Path, number: u64) -> Result<Packet> {
        let what = || format!("{} frame {number}", capture.display());
        if number == 0 {
            bail!("--frame: frames are numbered from 1");
        }
        let mut r = CaptureReader::open(capture).map_err(|e| anyhow!("{e}"))?;
        let mut n = 0u64;
        loop {
            let rec = r
                .next_record()
                .map_err(|e| anyhow!("{e}"))?
                .ok_or_else(|| anyhow!("{}: the capture has {n} frames", what()))?;
            n += 1;
            if n < number {
                continue;
            }
            let p = parse(rec.link_type, rec.data)
                .map_err(|m| anyhow!("{}: does not parse: {}", what(), m.name()))?;
            if p.ip_version.is_none() {
                bail!("{}: not an IP packet ({:?})", what(), p.ethertype);
            }
            let ip = rec.data.get(p.l3_offset..).unwrap_or_default().to_vec();
            Invariant::from_ip(&ip, Completeness::Whole).with_context(what)?;
            let summary = p
                .flow
                .map_or_else(|| format!("{} bytes of IP", ip.len()), |f| f.to_string());
            return Ok(Packet {
                ip,
                seen_unix_ns: (rec.ts_ns != 0).then_some(rec.ts_ns),
                summary,
            });
        }
    }
}
