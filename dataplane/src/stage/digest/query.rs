//! The questions a router answers about the packets it forwarded, and its
//! answers.
//!
//! # The question
//!
//! A query is a URL query string (the part after `?` of `GET /digest?...`
//! on the telemetry listener, [`crate::runtime::digest`]):
//!
//! | parameter | meaning |
//! |---|---|
//! | `ip` | the packet: its IP datagram in hexadecimal, from the IP header on, at least through the first 8 bytes of payload (all of it when shorter); more is ignored. Required |
//! | `t` | when it was seen, seconds since the Unix epoch with up to 9 decimals (`1712345678.25`); absent: every window kept is searched |
//! | `span_ms` | search the windows that meet `[t - span, t + span]`; default 1000, at most 86,400,000 |
//!
//! [`DigestQuery::parse`] reads untrusted text: it never panics, and every
//! error names the parameter and what is wrong ([`QueryError`]). Its
//! fuzz target is `digest_query` (`dataplane/tests/fuzz_common/digest.rs`).
//! [`query_string`] writes a query as traffic-gen sends it.
//!
//! # The answer
//!
//! [`Digests::answer`] asks every worker's ring ([`super::Ring::probe`])
//! and returns an [`Answer`]: each window searched with its id, times (Unix
//! ns), load and the false-positive rate of one port's test against it;
//! the ports the packet may have come in by; and the probabilities that
//! make the answer readable. If the router never forwarded the packet in
//! the windows searched, a port is reported anyway with probability
//! `1 - prod_w (1 - f_w)` (one test per window `w` of every worker), and
//! some port with `1 - prod_w (1 - f_w)^P` for `P` ports. A packet the
//! router did forward in a window searched is always reported with its
//! ingress port (no false negatives), as long as that window is kept.

use std::fmt;

use super::key::{Completeness, Invariant, InvariantError};
use super::{SharedRing, lock};
use crate::clock::{MonotonicClock, Timestamp};

/// The default half-width of the searched time range, ms.
pub const DEFAULT_SPAN_MS: u64 = 1000;
/// The largest half-width accepted, ms (a day).
pub const MAX_SPAN_MS: u64 = 86_400_000;
/// The most bytes of `ip` accepted (hexadecimal: twice as many characters).
pub const MAX_IP_BYTES: usize = 2048;

/// A parsed query (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DigestQuery {
    /// The packet's key (ingress port 0; each port is tried).
    pub key: Invariant,
    /// When the packet was seen, Unix ns.
    pub at_unix_ns: Option<u64>,
    /// The half-width of the range searched around it, ns.
    pub span_ns: u64,
}

/// What is wrong with a query: the parameter and the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// A parameter this protocol does not have.
    #[error("unknown parameter \"{0}\" (ip, t, span_ms)")]
    Unknown(String),
    /// A parameter given twice.
    #[error("{0}: given twice")]
    Twice(&'static str),
    /// `ip` is missing.
    #[error("ip: missing (the packet's IP datagram in hexadecimal)")]
    NoPacket,
    /// A character that is not a hexadecimal digit.
    #[error("ip: character {at} is not a hexadecimal digit")]
    NotHex {
        /// Its offset in the value.
        at: usize,
    },
    /// An odd number of hexadecimal digits.
    #[error("ip: {0} hexadecimal digits (two per byte)")]
    OddLength(usize),
    /// More bytes than [`MAX_IP_BYTES`].
    #[error("ip: {0} bytes, more than {MAX_IP_BYTES}")]
    TooLong(usize),
    /// Bytes that give no key.
    #[error("ip: {0}")]
    Packet(InvariantError),
    /// `t` is not a time.
    #[error(
        "t: \"{0}\" is not seconds since the Unix epoch (digits, a point and at most 9 decimals)"
    )]
    Time(String),
    /// `span_ms` is not a number in range.
    #[error("span_ms: \"{0}\" is not a whole number of milliseconds up to {MAX_SPAN_MS}")]
    Span(String),
    /// `span_ms` without `t`.
    #[error("span_ms: needs t (without t every window is searched)")]
    SpanWithoutTime,
}

/// The hexadecimal digit's value.
fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Decodes hexadecimal text (at most [`MAX_IP_BYTES`] bytes).
///
/// # Errors
/// A character that is not a digit (with its offset), an odd length, or
/// too many bytes.
pub fn decode_hex(s: &str) -> Result<Vec<u8>, QueryError> {
    let b = s.as_bytes();
    if let Some(at) = b.iter().position(|&c| hex_digit(c).is_none()) {
        return Err(QueryError::NotHex { at });
    }
    if !b.len().is_multiple_of(2) {
        return Err(QueryError::OddLength(b.len()));
    }
    if b.len() / 2 > MAX_IP_BYTES {
        return Err(QueryError::TooLong(b.len() / 2));
    }
    Ok(b.chunks_exact(2)
        .map(|p| (hex_digit(p[0]).unwrap_or(0) << 4) | hex_digit(p[1]).unwrap_or(0))
        .collect())
}

/// Parses seconds since the Unix epoch with up to 9 decimals
/// (`1712345678.25`) into ns; `None` for anything else.
pub fn parse_seconds(s: &str) -> Option<u64> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if int.is_empty()
        || int.len() > 11
        || frac.len() > 9
        || !int.bytes().all(|c| c.is_ascii_digit())
        || !frac.bytes().all(|c| c.is_ascii_digit())
        || (s.contains('.') && frac.is_empty())
    {
        return None;
    }
    let secs: u64 = int.parse().ok()?;
    let mut ns = 0u64;
    for (i, c) in frac.bytes().enumerate() {
        ns += u64::from(c - b'0') * 10u64.pow(8 - i as u32);
    }
    secs.checked_mul(1_000_000_000)?.checked_add(ns)
}

/// Formats Unix ns as `t` takes it.
pub fn format_seconds(ns: u64) -> String {
    format!("{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000)
}

impl DigestQuery {
    /// Parses a query string (see the module docs). Never panics.
    ///
    /// # Errors
    /// The first problem, naming its parameter.
    pub fn parse(query: &str) -> Result<DigestQuery, QueryError> {
        let (mut ip, mut t, mut span) = (None, None, None);
        for part in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            let slot = match k {
                "ip" => &mut ip,
                "t" => &mut t,
                "span_ms" => &mut span,
                other => {
                    let shown: String = other.chars().take(32).collect();
                    return Err(QueryError::Unknown(shown));
                }
            };
            if slot.replace(v).is_some() {
                return Err(QueryError::Twice(match k {
                    "ip" => "ip",
                    "t" => "t",
                    _ => "span_ms",
                }));
            }
        }
        let shown = |v: &str| v.chars().take(32).collect::<String>();
        let bytes = decode_hex(ip.ok_or(QueryError::NoPacket)?)?;
        let key = Invariant::from_ip(&bytes, Completeness::Whole).map_err(QueryError::Packet)?;
        let at_unix_ns = t
            .map(|v| parse_seconds(v).ok_or_else(|| QueryError::Time(shown(v))))
            .transpose()?;
        let span_ms = match span {
            None => DEFAULT_SPAN_MS,
            Some(_) if at_unix_ns.is_none() => return Err(QueryError::SpanWithoutTime),
            Some(v) => v
                .parse::<u64>()
                .ok()
                .filter(|&ms| ms <= MAX_SPAN_MS && v.bytes().all(|c| c.is_ascii_digit()))
                .ok_or_else(|| QueryError::Span(shown(v)))?,
        };
        Ok(DigestQuery {
            key: key.with_port(0),
            at_unix_ns,
            span_ns: span_ms * 1_000_000,
        })
    }
}

/// The query string asking about the IP datagram `ip` seen at `at_unix_ns`
/// (every window when `None`), `span_ms` either side (the default when
/// `None`).
pub fn query_string(ip: &[u8], at_unix_ns: Option<u64>, span_ms: Option<u64>) -> String {
    let mut s = String::with_capacity(ip.len() * 2 + 48);
    s.push_str("ip=");
    for b in ip {
        s.push_str(&format!("{b:02x}"));
    }
    if let Some(t) = at_unix_ns {
        s.push_str("&t=");
        s.push_str(&format_seconds(t));
        if let Some(ms) = span_ms {
            s.push_str(&format!("&span_ms={ms}"));
        }
    }
    s
}

/// How a ring's clock relates to the Unix epoch.
#[derive(Debug, Clone, Copy)]
pub enum TimeBase {
    /// The ring's times are Unix ns (capture time: replay, kept windows).
    Unix,
    /// The live router's monotonic clock, read against the wall clock at
    /// each answer ([`MonotonicClock::to_unix_ns`]).
    Monotonic(MonotonicClock),
}

impl TimeBase {
    /// Unix ns minus ring ns, now.
    fn offset(&self) -> i128 {
        match self {
            TimeBase::Unix => 0,
            TimeBase::Monotonic(c) => {
                let now = c.now();
                i128::from(c.to_unix_ns(now)) - i128::from(now.as_nanos())
            }
        }
    }
}

fn shift(ns: u64, by: i128) -> u64 {
    u64::try_from((i128::from(ns) + by).max(0)).unwrap_or(u64::MAX)
}

/// One window searched.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WindowAnswer {
    /// The worker whose ring holds it.
    pub worker: usize,
    /// Its id (per worker, in the order windows open).
    pub id: u64,
    /// Its range, Unix ns (`end` absent: the current window).
    pub start_unix_ns: u64,
    /// See [`WindowAnswer::start_unix_ns`].
    pub end_unix_ns: Option<u64>,
    /// Digests in it, and the most it holds.
    pub digests: u64,
    /// See [`WindowAnswer::digests`].
    pub capacity: u64,
    /// The false-positive rate of one port's test against it.
    pub false_positive_rate: f64,
    /// The ports whose test it passes.
    pub ports: Vec<String>,
}

/// A port the packet may have come in by.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PortAnswer {
    /// Its name.
    pub port: String,
    /// Its index (port order of the router's config).
    pub index: u8,
    /// The probability that the port would be reported had the router not
    /// forwarded the packet from it in the windows searched.
    pub false_positive_probability: f64,
    /// The windows (worker, id) whose test it passes.
    pub windows: Vec<(usize, u64)>,
}

/// A router's answer (see the module docs).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Answer {
    /// The router's ports, in order.
    pub ports: Vec<String>,
    /// The range searched, Unix ns (absent: every window).
    pub from_unix_ns: Option<u64>,
    /// See [`Answer::from_unix_ns`].
    pub to_unix_ns: Option<u64>,
    /// The history kept: the oldest window's start, Unix ns.
    pub kept_since_unix_ns: Option<u64>,
    /// The windows searched, per worker, oldest first.
    pub windows: Vec<WindowAnswer>,
    /// The ports the packet may have come in by.
    pub seen: Vec<PortAnswer>,
    /// The probability of one port's false report (see the module docs).
    pub port_false_positive_probability: f64,
    /// The probability that some port would be reported for a packet the
    /// router did not forward in the windows searched.
    pub false_positive_probability: f64,
}

impl Answer {
    /// Whether any port was reported.
    pub fn is_seen(&self) -> bool {
        !self.seen.is_empty()
    }
}

/// Every worker's ring of one router, and its port names: what answers
/// queries, live ([`crate::runtime::digest`]) or from windows kept on disk
/// ([`super::store`]).
#[derive(Debug, Clone)]
pub struct Digests {
    rings: Vec<SharedRing>,
    ports: Vec<String>,
    time: TimeBase,
}

impl Digests {
    /// The rings of a router whose ports are `ports` (in order).
    pub fn new(rings: Vec<SharedRing>, ports: Vec<String>, time: TimeBase) -> Digests {
        Digests { rings, ports, time }
    }

    /// The rings, one per worker.
    pub fn rings(&self) -> &[SharedRing] {
        &self.rings
    }

    /// The port names.
    pub fn ports(&self) -> &[String] {
        &self.ports
    }

    /// How the rings' times map to Unix time.
    pub fn time_base(&self) -> TimeBase {
        self.time
    }

    /// Answers `q` (see the module docs).
    pub fn answer(&self, q: &DigestQuery) -> Answer {
        let off = self.time.offset();
        let range = q.at_unix_ns.map(|t| {
            let from = t.saturating_sub(q.span_ns);
            let to = t.saturating_add(q.span_ns);
            (shift(from, -off), shift(to, -off))
        });
        let nports = u8::try_from(self.ports.len().min(64)).unwrap_or(64);
        let mut windows = Vec::new();
        let mut seen: Vec<Option<PortAnswer>> = vec![None; usize::from(nports)];
        let mut kept_since: Option<u64> = None;
        let mut miss = 1.0f64;
        for (worker, ring) in self.rings.iter().enumerate() {
            let ring = lock(ring);
            if let Some((m, _)) = ring.windows().next() {
                let s = shift(m.range().0, off);
                kept_since = Some(kept_since.map_or(s, |k| k.min(s)));
            }
            let capacity = ring.geometry().capacity;
            for w in ring.probe(q.key, nports, range) {
                miss *= 1.0 - w.fpr;
                let names: Vec<String> = (0..nports)
                    .filter(|p| w.ports & (1u64 << p) != 0)
                    .map(|p| self.ports[usize::from(p)].clone())
                    .collect();
                for p in 0..nports {
                    if w.ports & (1u64 << p) != 0 {
                        seen[usize::from(p)]
                            .get_or_insert_with(|| PortAnswer {
                                port: self.ports[usize::from(p)].clone(),
                                index: p,
                                false_positive_probability: 0.0,
                                windows: Vec::new(),
                            })
                            .windows
                            .push((worker, w.meta.id));
                    }
                }
                let (lo, hi) = w.meta.range();
                windows.push(WindowAnswer {
                    worker,
                    id: w.meta.id,
                    start_unix_ns: shift(lo, off),
                    end_unix_ns: (hi != u64::MAX).then(|| shift(hi, off)),
                    digests: w.meta.digests,
                    capacity,
                    false_positive_rate: w.fpr,
                    ports: names,
                });
            }
        }
        let port_fpp = 1.0 - miss;
        let any_fpp = 1.0 - miss.powi(i32::from(nports));
        let seen = seen
            .into_iter()
            .flatten()
            .map(|mut p| {
                p.false_positive_probability = port_fpp;
                p
            })
            .collect();
        Answer {
            ports: self.ports.clone(),
            from_unix_ns: q.at_unix_ns.map(|t| t.saturating_sub(q.span_ns)),
            to_unix_ns: q.at_unix_ns.map(|t| t.saturating_add(q.span_ns)),
            kept_since_unix_ns: kept_since,
            windows,
            seen,
            port_false_positive_probability: port_fpp,
            false_positive_probability: any_fpp,
        }
    }
}

impl fmt::Display for Answer {
    /// One line: the ports seen with their probability, or "not seen".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.seen.is_empty() {
            write!(
                f,
                "not seen in {} window(s) (a packet forwarded there would be)",
                self.windows.len()
            )
        } else {
            let ports: Vec<&str> = self.seen.iter().map(|p| p.port.as_str()).collect();
            write!(
                f,
                "seen from {} (false-positive probability {:.3e} per port) in {} window(s)",
                ports.join(", "),
                self.port_false_positive_probability,
                self.windows.len()
            )
        }
    }
}

/// The ring time of Unix ns `t` now (for tests of live rings).
pub fn ring_time(time: TimeBase, unix_ns: u64) -> Timestamp {
    Timestamp::from_nanos(shift(unix_ns, -time.offset()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const V4: &str = "450000200000400040110000\
                      0a0000010a00000203e807d0000cabcd01020304";

    #[test]
    fn parse() {
        let q = DigestQuery::parse(&format!("ip={V4}&t=1712345678.25&span_ms=20")).unwrap();
        assert_eq!(q.at_unix_ns, Some(1_712_345_678_250_000_000));
        assert_eq!(q.span_ns, 20_000_000);
        assert_eq!(q.key.port(), 0);
        let q = DigestQuery::parse(&format!("ip={V4}")).unwrap();
        assert_eq!(
            (q.at_unix_ns, q.span_ns),
            (None, DEFAULT_SPAN_MS * 1_000_000)
        );
        assert_eq!(
            DigestQuery::parse(&query_string(&decode_hex(V4).unwrap(), Some(7), Some(3))).unwrap(),
            DigestQuery {
                key: q.key,
                at_unix_ns: Some(7),
                span_ns: 3_000_000
            }
        );
    }

    #[test]
    fn every_error_names_its_parameter() {
        for (q, want) in [
            ("", "ip: missing"),
            ("x=1", "unknown parameter \"x\""),
            (&format!("ip={V4}&ip={V4}"), "ip: given twice"),
            ("ip=45zz", "ip: character 2 is not"),
            ("ip=450", "ip: 3 hexadecimal digits"),
            ("ip=4500", "ip: 2 bytes: the header"),
            (&format!("ip={V4}&t=12x"), "t: \"12x\""),
            (&format!("ip={V4}&t=1.0000000001"), "t: "),
            (&format!("ip={V4}&t=1."), "t: "),
            (&format!("ip={V4}&t=1&span_ms=-1"), "span_ms: \"-1\""),
            (&format!("ip={V4}&t=1&span_ms=86400001"), "span_ms: "),
            (&format!("ip={V4}&span_ms=1"), "span_ms: needs t"),
        ] {
            let e = DigestQuery::parse(q).unwrap_err().to_string();
            assert!(e.starts_with(want), "{q}: {e}");
        }
        let long = "00".repeat(MAX_IP_BYTES + 1);
        assert!(
            DigestQuery::parse(&format!("ip={long}"))
                .unwrap_err()
                .to_string()
                .contains("more than")
        );
    }
}
