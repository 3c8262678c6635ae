//! IPFIX export of heavy flows (RFC 7011), so the flow collector an
//! operator already runs (nfcapd, an IPFIX-speaking SIEM) stores them.
//!
//! Each closed epoch's heavy flows go out as data records over UDP, in
//! messages of at most [`MAX_MESSAGE`] bytes (one Ethernet frame with room
//! for IP and UDP headers). Two templates describe them, one per address
//! family ([`TEMPLATE_V4`], [`TEMPLATE_V6`]): source and destination
//! address and port, protocol, `octetDeltaCount` and `packetDeltaCount`
//! (the upper bounds the router reports, as `bytes<=` and `packets<=`:
//! count-min estimates never fall below the truth), `flowStartMilliseconds`
//! and `flowEndMilliseconds` (the epoch), and two enterprise elements that
//! tell the estimate from the exact part: the bytes and packets counted
//! exactly since the flow was detected (enterprise number 32473, the one
//! RFC 5612 sets aside for documentation, elements 1 and 2; a collector
//! that does not know them skips them by their length, as RFC 7011 says).
//! ICMP flows carry type and code in the destination port, as NetFlow does.
//!
//! Over UDP a collector may start after the exporter, so the templates go
//! out in the first message and again every [`TEMPLATE_EVERY`] messages or
//! [`TEMPLATE_REFRESH`], whichever comes first (RFC 7011 section 8.4).
//! Every message carries a sequence number counting the data records sent
//! before it, so a collector sees what was lost.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::flow::FlowKey;
use crate::stage::heavy::{EpochReport, HeavyReport};

/// The IPFIX version number.
pub const VERSION: u16 = 10;

/// The IPv4 flows' template id.
pub const TEMPLATE_V4: u16 = 256;

/// The IPv6 flows' template id.
pub const TEMPLATE_V6: u16 = 257;

/// The enterprise number of the two exact-count elements (RFC 5612's
/// documentation number: these elements are the router's own).
pub const ENTERPRISE: u32 = 32473;

/// The largest message sent, bytes: a 1500-byte MTU less IPv6 and UDP
/// headers.
pub const MAX_MESSAGE: usize = 1452;

/// Messages between template refreshes.
pub const TEMPLATE_EVERY: u32 = 16;

/// The longest time between template refreshes.
pub const TEMPLATE_REFRESH: Duration = Duration::from_secs(60);

/// `(element id, length)` of the standard fields, by family, in order; the
/// two enterprise fields follow.
const FIELDS_V4: [(u16, u16); 9] = [
    (8, 4),   // sourceIPv4Address
    (12, 4),  // destinationIPv4Address
    (7, 2),   // sourceTransportPort
    (11, 2),  // destinationTransportPort
    (4, 1),   // protocolIdentifier
    (1, 8),   // octetDeltaCount
    (2, 8),   // packetDeltaCount
    (152, 8), // flowStartMilliseconds
    (153, 8), // flowEndMilliseconds
];

const FIELDS_V6: [(u16, u16); 9] = [
    (27, 16), // sourceIPv6Address
    (28, 16), // destinationIPv6Address
    (7, 2),
    (11, 2),
    (4, 1),
    (1, 8),
    (2, 8),
    (152, 8),
    (153, 8),
];

/// Enterprise elements: exact bytes and packets since detection.
const ENTERPRISE_FIELDS: [(u16, u16); 2] = [(1, 8), (2, 8)];

/// One data record's length, by family.
fn record_len(v6: bool) -> usize {
    let std: u16 = if v6 { &FIELDS_V6 } else { &FIELDS_V4 }
        .iter()
        .map(|f| f.1)
        .sum();
    usize::from(std) + 16
}

/// The template set (set id 2) describing both families.
fn template_set() -> Vec<u8> {
    let mut s = vec![0, 2, 0, 0];
    for (id, fields) in [(TEMPLATE_V4, &FIELDS_V4), (TEMPLATE_V6, &FIELDS_V6)] {
        s.extend_from_slice(&id.to_be_bytes());
        let count = (fields.len() + ENTERPRISE_FIELDS.len()) as u16;
        s.extend_from_slice(&count.to_be_bytes());
        for &(e, l) in fields {
            s.extend_from_slice(&e.to_be_bytes());
            s.extend_from_slice(&l.to_be_bytes());
        }
        for &(e, l) in &ENTERPRISE_FIELDS {
            s.extend_from_slice(&(e | 0x8000).to_be_bytes());
            s.extend_from_slice(&l.to_be_bytes());
            s.extend_from_slice(&ENTERPRISE.to_be_bytes());
        }
    }
    let len = s.len() as u16;
    s[2..4].copy_from_slice(&len.to_be_bytes());
    s
}

/// Appends `f`'s data record (epoch from `start_ms` to `end_ms`).
fn push_record(out: &mut Vec<u8>, f: &HeavyReport, start_ms: u64, end_ms: u64) {
    let (sp, dp, proto) = match f.key {
        FlowKey::V4(k) => {
            out.extend_from_slice(&k.src.octets());
            out.extend_from_slice(&k.dst.octets());
            (k.src_port, k.dst_port, k.protocol)
        }
        FlowKey::V6(k) => {
            out.extend_from_slice(&k.src.octets());
            out.extend_from_slice(&k.dst.octets());
            (k.src_port, k.dst_port, k.protocol)
        }
    };
    out.extend_from_slice(&sp.to_be_bytes());
    out.extend_from_slice(&dp.to_be_bytes());
    out.push(u8::from(proto));
    for v in [
        f.bytes_upper,
        f.packets_upper,
        start_ms,
        end_ms,
        f.exact_bytes,
        f.exact_packets,
    ] {
        out.extend_from_slice(&v.to_be_bytes());
    }
}

/// Encodes IPFIX messages: a header and the sets given, in order.
#[derive(Debug)]
pub struct Encoder {
    /// Data records sent so far (the next message's sequence number).
    sequence: u32,
    /// The observation domain.
    domain: u32,
    /// Messages since the templates last went out (`None`: never).
    since_template: Option<(u32, Instant)>,
}

impl Encoder {
    /// An encoder for observation domain `domain`.
    pub fn new(domain: u32) -> Self {
        Encoder {
            sequence: 0,
            domain,
            since_template: None,
        }
    }

    /// Whether the next message carries the templates.
    fn template_due(&self) -> bool {
        self.since_template
            .is_none_or(|(n, at)| n >= TEMPLATE_EVERY || at.elapsed() >= TEMPLATE_REFRESH)
    }

    /// The messages that carry `epoch`'s heavy flows, times converted to
    /// Unix milliseconds by `to_unix_ms`, exported at `export_s` (Unix
    /// seconds). An epoch without flows gives no message.
    pub fn epoch_messages(
        &mut self,
        epoch: &EpochReport,
        to_unix_ms: impl Fn(u64) -> u64,
        export_s: u32,
    ) -> Vec<Vec<u8>> {
        let (start, end) = (to_unix_ms(epoch.start_ns), to_unix_ms(epoch.end_ns));
        let mut messages = Vec::new();
        let mut flows = epoch.flows.iter().peekable();
        while flows.peek().is_some() {
            let mut m = vec![0u8; 16];
            if self.template_due() {
                m.extend_from_slice(&template_set());
                self.since_template = Some((0, Instant::now()));
            }
            let mut records = 0u32;
            // One data set per run of same-family flows.
            while let Some(f) = flows.peek() {
                let v6 = matches!(f.key, FlowKey::V6(_));
                if m.len() + 4 + record_len(v6) > MAX_MESSAGE {
                    break;
                }
                let set_at = m.len();
                let id = if v6 { TEMPLATE_V6 } else { TEMPLATE_V4 };
                m.extend_from_slice(&id.to_be_bytes());
                m.extend_from_slice(&[0, 0]);
                while let Some(f) = flows.peek() {
                    if matches!(f.key, FlowKey::V6(_)) != v6
                        || m.len() + record_len(v6) > MAX_MESSAGE
                    {
                        break;
                    }
                    push_record(&mut m, f, start, end);
                    records += 1;
                    flows.next();
                }
                let set_len = (m.len() - set_at) as u16;
                m[set_at + 2..set_at + 4].copy_from_slice(&set_len.to_be_bytes());
            }
            m[0..2].copy_from_slice(&VERSION.to_be_bytes());
            let len = m.len() as u16;
            m[2..4].copy_from_slice(&len.to_be_bytes());
            m[4..8].copy_from_slice(&export_s.to_be_bytes());
            m[8..12].copy_from_slice(&self.sequence.to_be_bytes());
            m[12..16].copy_from_slice(&self.domain.to_be_bytes());
            self.sequence = self.sequence.wrapping_add(records);
            if let Some((n, _)) = &mut self.since_template {
                *n += 1;
            }
            messages.push(m);
        }
        messages
    }
}

/// Sends heavy flows to a collector over UDP (`[heavy] ipfix`).
#[derive(Debug)]
pub struct Exporter {
    sock: UdpSocket,
    to: SocketAddr,
    encoder: Encoder,
    /// Messages the socket refused (a collector not listening yet makes
    /// the next send fail with "connection refused"; counted, not fatal).
    pub send_errors: u64,
    /// Data records sent.
    pub records: u64,
}

impl Exporter {
    /// An exporter to `to` (`host:port`).
    ///
    /// # Errors
    /// The address does not parse or no UDP socket can be opened.
    pub fn new(to: &str) -> io::Result<Exporter> {
        let to: SocketAddr = to
            .parse()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{to}: {e}")))?;
        let bind: SocketAddr = if to.is_ipv4() {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let sock = UdpSocket::bind(bind)?;
        Ok(Exporter {
            sock,
            to,
            encoder: Encoder::new(std::process::id()),
            send_errors: 0,
            records: 0,
        })
    }

    /// Sends `epoch`'s heavy flows, its times converted by `to_unix_ms`.
    pub fn export(&mut self, epoch: &EpochReport, to_unix_ms: impl Fn(u64) -> u64) {
        let now_s = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u32::try_from(d.as_secs()).unwrap_or(u32::MAX));
        for m in self.encoder.epoch_messages(epoch, to_unix_ms, now_s) {
            match self.sock.send_to(&m, self.to) {
                Ok(_) => {}
                Err(_) => self.send_errors += 1,
            }
        }
        self.records += epoch.flows.len() as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::{Flow4, Flow6};
    use crate::wire::IpProtocol;

    fn report(i: u32, v6: bool) -> HeavyReport {
        let key = if v6 {
            FlowKey::V6(Flow6 {
                src: format!("2001:db8::{i:x}").parse().unwrap(),
                dst: "2001:db8::ffff".parse().unwrap(),
                src_port: 1000,
                dst_port: 443,
                protocol: IpProtocol::Udp,
            })
        } else {
            FlowKey::V4(Flow4 {
                src: std::net::Ipv4Addr::from(0x0a00_0000 + i),
                dst: std::net::Ipv4Addr::new(10, 9, 9, 9),
                src_port: 2000,
                dst_port: 80,
                protocol: IpProtocol::Tcp,
            })
        };
        HeavyReport {
            epoch: 0,
            epoch_start_ns: 0,
            epoch_end_ns: 0,
            flow: key.to_string(),
            fields: crate::stage::heavy::FlowFields::of(&key),
            vlan: None,
            detected_ns: 0,
            est_bytes: 100,
            est_packets: 1,
            exact_bytes: 1000 * u64::from(i),
            exact_packets: 10,
            bytes_upper: 1000 * u64::from(i) + 100,
            packets_upper: 11,
            key,
        }
    }

    fn epoch(n: u32) -> EpochReport {
        EpochReport {
            epoch: 0,
            start_ns: 1_700_000_000_000_000_000,
            end_ns: 1_700_000_001_000_000_000,
            bytes: 0,
            packets: 0,
            overflow: 0,
            omitted: 0,
            flows: (0..n).map(|i| report(i, i % 3 == 2)).collect(),
        }
    }

    /// Walks a message's sets: `(set id, body)`.
    fn sets(m: &[u8]) -> Vec<(u16, &[u8])> {
        let mut out = Vec::new();
        let mut at = 16;
        while at < m.len() {
            let id = u16::from_be_bytes([m[at], m[at + 1]]);
            let len = usize::from(u16::from_be_bytes([m[at + 2], m[at + 3]]));
            out.push((id, &m[at + 4..at + len]));
            at += len;
        }
        out
    }

    #[test]
    fn messages_hold_every_flow_within_the_size_limit() {
        let mut enc = Encoder::new(7);
        let e = epoch(100);
        let ms = enc.epoch_messages(&e, |ns| ns / 1_000_000, 1_700_000_002);
        assert!(ms.len() > 1, "100 flows need several messages");
        let (mut v4, mut v6, mut seq) = (0, 0, 0u32);
        for (i, m) in ms.iter().enumerate() {
            assert!(m.len() <= MAX_MESSAGE);
            assert_eq!(u16::from_be_bytes([m[0], m[1]]), 10);
            assert_eq!(usize::from(u16::from_be_bytes([m[2], m[3]])), m.len());
            assert_eq!(u32::from_be_bytes([m[4], m[5], m[6], m[7]]), 1_700_000_002);
            assert_eq!(u32::from_be_bytes([m[8], m[9], m[10], m[11]]), seq);
            assert_eq!(u32::from_be_bytes([m[12], m[13], m[14], m[15]]), 7);
            let s = sets(m);
            // Templates in the first message only (16 messages apart).
            assert_eq!(s.iter().any(|(id, _)| *id == 2), i == 0);
            for (id, body) in s {
                match id {
                    TEMPLATE_V4 => {
                        assert_eq!(body.len() % record_len(false), 0);
                        v4 += body.len() / record_len(false);
                        seq += (body.len() / record_len(false)) as u32;
                    }
                    TEMPLATE_V6 => {
                        assert_eq!(body.len() % record_len(true), 0);
                        v6 += body.len() / record_len(true);
                        seq += (body.len() / record_len(true)) as u32;
                    }
                    2 => {}
                    other => panic!("set {other}"),
                }
            }
        }
        assert_eq!((v4, v6), (67, 33));
        // The first IPv4 record: flow 0, bound 100, start/end in ms.
        let (_, body) = sets(&ms[0])
            .into_iter()
            .find(|(id, _)| *id == TEMPLATE_V4)
            .unwrap();
        assert_eq!(&body[0..4], &[10, 0, 0, 0]);
        assert_eq!(u16::from_be_bytes([body[10], body[11]]), 80);
        assert_eq!(body[12], 6);
        let u64_at = |o: usize| u64::from_be_bytes(body[o..o + 8].try_into().unwrap());
        assert_eq!((u64_at(13), u64_at(21)), (100, 11));
        assert_eq!(
            (u64_at(29), u64_at(37)),
            (1_700_000_000_000, 1_700_000_001_000)
        );
        assert_eq!((u64_at(45), u64_at(53)), (0, 10));
        // An empty epoch sends nothing.
        assert!(enc.epoch_messages(&epoch(0), |ns| ns, 0).is_empty());
    }

    #[test]
    fn template_describes_both_families() {
        let t = template_set();
        assert_eq!(u16::from_be_bytes([t[0], t[1]]), 2);
        assert_eq!(usize::from(u16::from_be_bytes([t[2], t[3]])), t.len());
        assert_eq!(u16::from_be_bytes([t[4], t[5]]), TEMPLATE_V4);
        assert_eq!(u16::from_be_bytes([t[6], t[7]]), 11);
        // 9 standard fields (4 bytes each), 2 enterprise (8 bytes each).
        let v6_at = 4 + 4 + 9 * 4 + 2 * 8;
        assert_eq!(u16::from_be_bytes([t[v6_at], t[v6_at + 1]]), TEMPLATE_V6);
        assert_eq!(t.len(), v6_at + 4 + 9 * 4 + 2 * 8);
    }
}
