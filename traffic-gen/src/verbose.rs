//! `replay -v`: a line per packet once the router has decided it, as
//! tcpdump prints packets.
//!
//! ```text
//! 0.000412 r-a 10.0.0.1:1024 -> 172.16.0.1:80 tcp length 60: forward r-b
//! 0.000415 r-a vlan 118, p 0, vlan 10, p 0, 10.118.10.1 -> 10.118.10.2 icmp 8/0 length 122: forward r-b
//! 0.000933 r-a 45.179.193.111 -> 10.10.10.10 udp frag (2912|1018) length 1052: drop no_route
//! ```
//!
//! Each line holds the time ([`TimeFormat`], tcpdump's `-tt` ... `-ttttt`),
//! the ingress interface, the frame's VLAN tags as tcpdump `-e` shows
//! them (`vlan ID, p PCP[, DEI],`, outermost first), what it carries (the
//! flow; for a fragment its offset and length as tcpdump prints IPv6
//! fragments, `frag (OFFSET|LENGTH)`, and no ports where a non-first
//! fragment has none; an EtherType by name), its length on the wire and
//! the verdict. The lines are written from the worker thread; when
//! standard output goes away (`| head`) the log sets a flag the replay's
//! dispatcher stops on, as tcpdump stops when its output closes.

use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use dataplane::chain::{PacketLog, PacketLogger};
use dataplane::clock::Timestamp;
use dataplane::pipeline::{Batch, Packet, PortSet, Verdict};
use dataplane::wire::{EtherType, IpVersion, LinkType};

/// How `-v` shows a packet's time, as tcpdump's `-t` family (the flags
/// of `replay` are long ones: its `-t` is tcpreplay's `--topspeed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimeFormat {
    /// Seconds since the first packet, `0.000412` (the default).
    #[default]
    Relative,
    /// Seconds since the Unix epoch, `1277840495.135052` (`--tt`).
    Epoch,
    /// Time since the previous packet, `00:00:00.000858` (`--ttt`).
    Delta,
    /// Local date and time, `2019-12-08 21:59:54.599412` (`--tttt`; the
    /// `TZ` environment variable applies, as it does to tcpdump).
    Date,
    /// Time since the first packet, `00:00:00.001880` (`--ttttt`).
    SinceFirst,
}

impl TimeFormat {
    /// Formats `ns` (capture time), with the first packet's and the
    /// previous packet's times.
    pub fn format(self, ns: u64, first: u64, prev: u64) -> String {
        match self {
            TimeFormat::Relative => format!("{:.6}", ns.saturating_sub(first) as f64 / 1e9),
            TimeFormat::Epoch => format!("{}.{:06}", ns / 1_000_000_000, ns % 1_000_000_000 / 1000),
            TimeFormat::Delta => clock(ns.saturating_sub(prev)),
            TimeFormat::SinceFirst => clock(ns.saturating_sub(first)),
            TimeFormat::Date => local_date(ns),
        }
    }
}

/// `HH:MM:SS.uuuuuu` of a duration (hours beyond 99 in full).
fn clock(ns: u64) -> String {
    let s = ns / 1_000_000_000;
    format!(
        "{:02}:{:02}:{:02}.{:06}",
        s / 3600,
        s / 60 % 60,
        s % 60,
        ns % 1_000_000_000 / 1000
    )
}

/// `YYYY-MM-DD HH:MM:SS.uuuuuu` in the local time zone (`TZ`), as
/// tcpdump's `-tttt`; the UTC date where the zone cannot be had.
fn local_date(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let micros = ns % 1_000_000_000 / 1000;
    // SAFETY: an all-zero `tm` is a valid value to be overwritten.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let t = libc::time_t::try_from(secs).unwrap_or(libc::time_t::MAX);
    // SAFETY: `t` and `tm` are live values of the types localtime_r takes;
    // it writes only into `tm` (reentrant, no shared buffer).
    let ok = unsafe { !libc::localtime_r(&t, &mut tm).is_null() };
    if !ok {
        let utc = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
        let d = humantime::format_rfc3339_seconds(utc).to_string();
        return format!("{} {}.{micros:06}", &d[..10], &d[11..19]);
    }
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{micros:06}",
        i64::from(tm.tm_year) + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

/// The log a replay worker's chain writes (see the module docs): `names`
/// are the ports' interfaces; `closed` is set when standard output is
/// gone.
pub fn packet_log(names: Vec<String>, time: TimeFormat, closed: Arc<AtomicBool>) -> PacketLog {
    if time == TimeFormat::Date {
        unsafe extern "C" {
            /// POSIX `tzset(3)` (the libc crate does not declare it).
            fn tzset();
        }
        // SAFETY: tzset takes no arguments and reads TZ into libc's zone
        // state (localtime_r need not); no thread of this program changes
        // the environment.
        unsafe { tzset() };
    }
    Box::new(VerboseLog {
        names,
        time,
        closed,
        first: None,
        prev: None,
        what: Vec::new(),
        line: String::new(),
    })
}

/// [`packet_log`]'s state.
struct VerboseLog {
    names: Vec<String>,
    time: TimeFormat,
    closed: Arc<AtomicBool>,
    first: Option<u64>,
    prev: Option<u64>,
    /// Per packet of the batch, what it carries, read from its bytes
    /// before the egress stage took them.
    what: Vec<String>,
    line: String,
}

impl PacketLogger for VerboseLog {
    fn before_egress(&mut self, batch: &Batch) {
        if self.closed.load(Ordering::Relaxed) {
            return;
        }
        let n = batch.packets().len();
        self.what.resize_with(n.max(self.what.len()), String::new);
        for (p, w) in batch.packets().iter().zip(&mut self.what) {
            w.clear();
            describe(p, w);
        }
        self.what.truncate(n);
    }

    fn decided(&mut self, batch: &Batch, _now: Timestamp) {
        if self.closed.load(Ordering::Relaxed) {
            return;
        }
        let mut out = std::io::stdout().lock();
        let line = &mut self.line;
        for (i, p) in batch.packets().iter().enumerate() {
            let t = p.ts.as_nanos();
            let first = *self.first.get_or_insert(t);
            line.clear();
            line.push_str(&self.time.format(t, first, self.prev.unwrap_or(t)));
            self.prev = Some(t);
            line.push(' ');
            line.push_str(
                self.names
                    .get(usize::from(p.ingress))
                    .map_or("?", String::as_str),
            );
            line.push(' ');
            match self.what.get(i) {
                Some(w) if self.what.len() == batch.packets().len() => line.push_str(w),
                _ => describe(p, line),
            }
            line.push_str(&format!(" length {}: ", p.orig_len));
            verdict(p.verdict, &self.names, line);
            line.push('\n');
            if let Err(e) = out.write_all(line.as_bytes()) {
                // The reader went away: stop the replay, as tcpdump stops;
                // any other error ends the lines only.
                if e.kind() == std::io::ErrorKind::BrokenPipe {
                    self.closed.store(true, Ordering::Relaxed);
                }
                return;
            }
        }
    }
}

/// `forward r-b,r-c`, `mark CE, forward r-b`, `drop loop`, ...
fn verdict(v: Verdict, names: &[String], out: &mut String) {
    let ports = |set: PortSet| -> String {
        let v: Vec<&str> = set
            .iter()
            .map(|p| names.get(usize::from(p)).map_or("?", String::as_str))
            .collect();
        if v.is_empty() {
            "nowhere".into()
        } else {
            v.join(",")
        }
    };
    match v {
        Verdict::Forward(set) => out.push_str(&format!("forward {}", ports(set))),
        Verdict::Mark(set) => out.push_str(&format!("mark CE, forward {}", ports(set))),
        Verdict::Drop(r) => out.push_str(&format!("drop {r}")),
        Verdict::Consumed => out.push_str("consumed (by the router)"),
        Verdict::Held => out.push_str("held (resolving the next hop)"),
    }
}

/// The VLAN tags, then what the frame carries (see the module docs).
fn describe(p: &Packet, out: &mut String) {
    let Some(x) = &p.parsed else {
        match p.malformed {
            Some(m) => out.push_str(&format!("malformed ({})", m.name())),
            None => out.push_str("not parsed"),
        }
        return;
    };
    let data = p.data();
    if p.link_type == LinkType::Ethernet {
        vlan_tags(data, x.l3_offset, out);
    }
    let Some(flow) = x.flow else {
        out.push_str(&format!("ethertype {}", ethertype_name(x.ethertype)));
        return;
    };
    let Some(frag) = x.fragment else {
        out.push_str(&flow.to_string());
        return;
    };
    // tcpdump's `frag (OFFSET|LENGTH)`: the fragment's place in the
    // datagram and the bytes of it this packet carries (after the IPv4
    // header, or after the IPv6 fragment header).
    let after = match x.ip_version {
        Some(IpVersion::V6) => v6_fragment_end(data, x.l3_offset, x.ip_header_len),
        _ => x.l3_offset + x.ip_header_len,
    };
    let len = (x.l3_offset + x.ip_total_len).saturating_sub(after);
    if frag.is_first() {
        out.push_str(&format!("{flow} frag (0|{len})"));
    } else {
        // No ports: they are in the first fragment only.
        let (s, d, proto) = match flow {
            dataplane::flow::FlowKey::V4(k) => (k.src.to_string(), k.dst.to_string(), k.protocol),
            dataplane::flow::FlowKey::V6(k) => (k.src.to_string(), k.dst.to_string(), k.protocol),
        };
        out.push_str(&format!("{s} -> {d} {proto} frag ({}|{len})", frag.offset));
    }
}

/// `vlan 118, p 0, vlan 10, p 0, ` as tcpdump `-e` prints the tags between
/// the Ethernet header and `l3`.
fn vlan_tags(data: &[u8], l3: usize, out: &mut String) {
    let mut at = 12;
    while at + 4 <= l3 {
        let (Some(&[t0, t1]), Some(&[c0, c1])) = (data.get(at..at + 2), data.get(at + 2..at + 4))
        else {
            return;
        };
        if !EtherType::from(u16::from_be_bytes([t0, t1])).is_vlan_tpid() {
            return;
        }
        let tci = u16::from_be_bytes([c0, c1]);
        out.push_str(&format!("vlan {}, p {}, ", tci & 0x0fff, tci >> 13));
        if tci & 0x1000 != 0 {
            out.push_str("DEI, ");
        }
        at += 4;
    }
}

/// Where an IPv6 fragment header ends: the extension headers from `l3 +
/// 40` walked up to it (within the `header_len` the parser walked).
fn v6_fragment_end(data: &[u8], l3: usize, header_len: usize) -> usize {
    let end = l3 + header_len;
    let mut next = data.get(l3 + 6).copied().unwrap_or(59);
    let mut at = l3 + 40;
    while at + 8 <= end {
        let (nh, len) = match (data.get(at), data.get(at + 1)) {
            (Some(&nh), Some(&len)) => (nh, usize::from(len)),
            _ => break,
        };
        match next {
            // The fragment header: 8 bytes.
            44 => return at + 8,
            // Hop-by-hop, routing, destination options: (len + 1) x 8.
            0 | 43 | 60 => at += (len + 1) * 8,
            // Authentication header: (len + 2) x 4.
            51 => at += (len + 2) * 4,
            _ => break,
        }
        next = nh;
    }
    end
}

/// `ARP (0x0806)`, as tcpdump `-e` names EtherTypes.
fn ethertype_name(t: EtherType) -> String {
    let v = u16::from(t);
    let name = match t {
        EtherType::Ipv4 => "IPv4",
        EtherType::Arp => "ARP",
        EtherType::Ipv6 => "IPv6",
        EtherType::Vlan => "802.1Q",
        EtherType::QinQ => "802.1Q-QinQ",
        EtherType::QinQLegacy => "802.1Q-9100",
        EtherType::PppoeDiscovery => "PPPoE D",
        EtherType::PppoeSession => "PPPoE S",
        EtherType::MplsUnicast => "MPLS unicast",
        EtherType::MplsMulticast => "MPLS multicast",
        _ if v == 0x88cc => "LLDP",
        _ => "Unknown",
    };
    format!("{name} (0x{v:04x})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_as_tcpdump() {
        let first = 1_277_840_495_135_052_000;
        let t = first + 1_880_123;
        assert_eq!(TimeFormat::Relative.format(t, first, t), "0.001880");
        assert_eq!(TimeFormat::Epoch.format(t, first, t), "1277840495.136932");
        assert_eq!(
            TimeFormat::Delta.format(t, first, t - 1_022_000),
            "00:00:00.001022"
        );
        assert_eq!(
            TimeFormat::SinceFirst.format(t, first, t),
            "00:00:00.001880"
        );
        assert_eq!(clock(90_061_000_000_000), "25:01:01.000000");
    }

    #[test]
    fn ethertypes_by_name() {
        assert_eq!(ethertype_name(EtherType::Arp), "ARP (0x0806)");
        assert_eq!(ethertype_name(EtherType::from(0x88cc)), "LLDP (0x88cc)");
        assert_eq!(ethertype_name(EtherType::from(0x1234)), "Unknown (0x1234)");
    }

    #[test]
    fn vlan_tags_outermost_first() {
        // dst, src, 88a8 tag 200 p 3, 8100 tag 2001 p 5 DEI, 0800.
        let mut f = vec![0u8; 12];
        f.extend([0x88, 0xa8, 0x60, 0xc8, 0x81, 0x00, 0xb7, 0xd1, 0x08, 0x00]);
        let mut s = String::new();
        vlan_tags(&f, 22, &mut s);
        assert_eq!(s, "vlan 200, p 3, vlan 2001, p 5, DEI, ");
    }
}
