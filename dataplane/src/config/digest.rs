//! `[digest]`: SPIE traceback, a digest of every forwarded packet kept in a
//! ring of time windows ([`crate::stage::digest`]), and who may ask about
//! them on the telemetry listener ([`crate::runtime::digest`]).

use std::net::IpAddr;

use serde::Deserialize;

use super::IpNet;
use crate::stage::digest::ring::MAX_WINDOWS;
use crate::stage::digest::{DigestConfig, Sizing};

/// The default window length, ms.
pub const DEFAULT_WINDOW_MS: u64 = 1000;
/// The default number of windows kept.
pub const DEFAULT_WINDOWS: usize = 60;
/// The default false-positive rate of a full window.
pub const DEFAULT_FALSE_POSITIVE_RATE: f64 = 0.001;
/// The default query rate (queries per second) and burst.
pub const DEFAULT_QUERY_RATE: u32 = 50;
/// The longest window accepted, ms (an hour).
pub const MAX_WINDOW_MS: u64 = 3_600_000;
/// The most memory the windows of every worker may take together.
pub const MAX_MEMORY_BYTES: u64 = 16 << 30;
/// The most query clients listed.
pub const MAX_CLIENTS: usize = 1024;

/// `[digest]` as written.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DigestSection {
    /// Window length, ms.
    #[serde(default = "default_window_ms")]
    pub window_ms: u64,
    /// Windows kept.
    #[serde(default = "default_windows")]
    pub windows: usize,
    /// Packets per second the router is expected to forward (all workers).
    pub packet_rate: u64,
    /// The false-positive rate of a full window (default 0.001); or
    /// `bits_per_packet`.
    #[serde(default)]
    pub false_positive_rate: Option<f64>,
    /// Filter bits per packet at `packet_rate`, instead of a rate.
    #[serde(default)]
    pub bits_per_packet: Option<f64>,
    /// Hash seed; absent: random per process (`replay`: from `--seed`).
    #[serde(default)]
    pub seed: Option<u64>,
    /// Who may query (`GET /digest` on `telemetry.listen`): addresses or
    /// prefixes.
    #[serde(default)]
    pub query_clients: Vec<String>,
    /// Queries per second answered, over all clients.
    #[serde(default = "default_query_rate")]
    pub query_rate: u32,
    /// Queries answered back to back.
    #[serde(default = "default_query_rate")]
    pub query_burst: u32,
}

fn default_window_ms() -> u64 {
    DEFAULT_WINDOW_MS
}
fn default_windows() -> usize {
    DEFAULT_WINDOWS
}
fn default_query_rate() -> u32 {
    DEFAULT_QUERY_RATE
}

/// A query client as written: an address (one host) or a prefix.
pub fn parse_client(s: &str) -> Result<IpNet, String> {
    if s.contains('/') {
        return s.parse();
    }
    let a: IpAddr = s
        .parse()
        .map_err(|_| format!("\"{s}\" is not an IP address or prefix"))?;
    IpNet::of(a, if a.is_ipv4() { 32 } else { 128 }).ok_or_else(|| format!("bad address \"{s}\""))
}

impl DigestSection {
    /// One worker's stage settings, for `workers` workers sharing the
    /// expected rate.
    pub fn stage_config(&self, workers: usize) -> DigestConfig {
        let per_window = (self.packet_rate as f64 * self.window_ms as f64 / 1000.0).ceil();
        let expected = (per_window / workers.max(1) as f64).ceil().max(1.0) as u64;
        DigestConfig {
            window_ns: self.window_ms.saturating_mul(1_000_000),
            windows: self.windows,
            expected,
            sizing: match self.bits_per_packet {
                Some(b) => Sizing::BitsPerPacket(b),
                None => Sizing::FalsePositiveRate(
                    self.false_positive_rate
                        .unwrap_or(DEFAULT_FALSE_POSITIVE_RATE),
                ),
            },
            seed: self.seed,
        }
    }

    /// The query clients (those that parse).
    pub fn clients(&self) -> Vec<IpNet> {
        self.query_clients
            .iter()
            .filter_map(|c| parse_client(c).ok())
            .collect()
    }

    /// The memory of every window of `workers` workers, bytes (`None`
    /// when the settings give no filter).
    pub fn memory_bytes(&self, workers: usize) -> Option<u64> {
        let g = self.stage_config(workers).geometry().ok()?;
        Some(
            g.filter_bytes()
                .saturating_mul(self.windows as u64)
                .saturating_mul(workers as u64),
        )
    }

    /// Every problem, as `(key, reason)`.
    pub(super) fn validate(&self, workers: usize, listen: bool, errs: &mut Vec<(String, String)>) {
        let key = |k: &str| format!("digest.{k}");
        if !(1..=MAX_WINDOW_MS).contains(&self.window_ms) {
            errs.push((
                key("window_ms"),
                format!("{} is outside 1..={MAX_WINDOW_MS}", self.window_ms),
            ));
        }
        if !(2..=MAX_WINDOWS).contains(&self.windows) {
            errs.push((
                key("windows"),
                format!("{} is outside 2..={MAX_WINDOWS}", self.windows),
            ));
        }
        if self.packet_rate == 0 {
            errs.push((
                key("packet_rate"),
                "must be at least 1 packet per second".into(),
            ));
        }
        match (self.false_positive_rate, self.bits_per_packet) {
            (Some(_), Some(_)) => errs.push((
                key("bits_per_packet"),
                "set false_positive_rate or bits_per_packet, not both".into(),
            )),
            (Some(p), None) if !(p > 0.0 && p <= 0.5) => errs.push((
                key("false_positive_rate"),
                format!("{p} is outside (0, 0.5]"),
            )),
            (None, Some(b)) if !(1.0..=256.0).contains(&b) => {
                errs.push((key("bits_per_packet"), format!("{b} is outside 1..=256")))
            }
            _ => {}
        }
        let ok = errs.iter().all(|(k, _)| !k.starts_with("digest."));
        if ok {
            match self.stage_config(workers).geometry() {
                Err(e) => errs.push((
                    key("packet_rate"),
                    format!(
                        "{} packets per second over {} ms: {e}",
                        self.packet_rate, self.window_ms
                    ),
                )),
                Ok(_) => {
                    let bytes = self.memory_bytes(workers).unwrap_or(u64::MAX);
                    if bytes > MAX_MEMORY_BYTES {
                        errs.push((
                            key("windows"),
                            format!(
                                "{} windows of {} workers take {} MiB, more than {} MiB",
                                self.windows,
                                workers,
                                bytes >> 20,
                                MAX_MEMORY_BYTES >> 20
                            ),
                        ));
                    }
                }
            }
        }
        if self.query_clients.len() > MAX_CLIENTS {
            errs.push((
                key("query_clients"),
                format!(
                    "{} clients, at most {MAX_CLIENTS}",
                    self.query_clients.len()
                ),
            ));
        }
        for (i, c) in self.query_clients.iter().enumerate() {
            if let Err(why) = parse_client(c) {
                errs.push((key(&format!("query_clients[{i}]")), why));
            }
        }
        if !self.query_clients.is_empty() && !listen {
            errs.push((
                key("query_clients"),
                "queries are answered on telemetry.listen: add a [telemetry] table".into(),
            ));
        }
        if self.query_rate == 0 {
            errs.push((
                key("query_rate"),
                "must be at least 1 query per second".into(),
            ));
        }
        if self.query_burst == 0 {
            errs.push((key("query_burst"), "must be at least 1".into()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_are_addresses_or_prefixes() {
        assert_eq!(parse_client("10.1.2.3").unwrap().to_string(), "10.1.2.3/32");
        assert_eq!(parse_client("2001:db8::1").unwrap().prefix_len(), 128);
        assert_eq!(
            parse_client("10.1.0.0/16").unwrap().to_string(),
            "10.1.0.0/16"
        );
        assert!(
            parse_client("10.1.0.1/16")
                .unwrap_err()
                .contains("host bits")
        );
        assert!(
            parse_client("router-7")
                .unwrap_err()
                .contains("not an IP address")
        );
    }

    #[test]
    fn the_rate_is_shared_by_the_workers() {
        let s = DigestSection {
            window_ms: 500,
            windows: 10,
            packet_rate: 100_001,
            false_positive_rate: None,
            bits_per_packet: None,
            seed: None,
            query_clients: Vec::new(),
            query_rate: 1,
            query_burst: 1,
        };
        assert_eq!(s.stage_config(1).expected, 50_001);
        assert_eq!(s.stage_config(4).expected, 12_501);
        assert_eq!(
            s.stage_config(1).sizing,
            Sizing::FalsePositiveRate(DEFAULT_FALSE_POSITIVE_RATE)
        );
    }
}
