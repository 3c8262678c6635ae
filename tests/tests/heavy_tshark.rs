//! Heavy flows through the built-in router against tshark: every public
//! capture that reads to its end and parses whole, replayed as `traffic-gen
//! replay --heavy-percent 0.1 --epoch-ms 1000000000000 FILE` runs it (0.1%
//! of one epoch over the whole capture, Icarus edges inserting on the
//! ingress port), reports exactly the flows whose bytes, counted by tshark
//! over the same flow definition, reach 0.1% of the capture's IP bytes:
//! recall and precision 1.0.
//!
//! The flow definition is the router's: the outer IPv4 or IPv6 header's
//! addresses and protocol (after IPv6 extension headers); TCP and UDP
//! ports of an unfragmented datagram or a first fragment, none otherwise;
//! ICMP and ICMPv6 type and code in the destination port; every frame's
//! length on the wire. tshark is asked not to reassemble fragments.
//!
//! Skipped, with the reason printed, without the public captures or
//! tshark.

use std::collections::{BTreeSet, HashMap};
use std::io::Write as _;
use std::net::{IpAddr, Ipv6Addr};
use std::path::Path;
use std::process::Command;

use dataplane::config::ThresholdConfig;
use dataplane::flow::FlowKey;
use dataplane::wire::IpProtocol;
use traffic_gen::replay::{Input, ReplayConfig, default_router, replay};

const SHARE: f64 = 0.001;

/// tshark's fields per frame, in this order.
const FIELDS: [&str; 22] = [
    "frame.len",
    "ip.src",
    "ip.dst",
    "ip.proto",
    "ip.frag_offset",
    "ipv6.src",
    "ipv6.dst",
    "ipv6.nxt",
    "ipv6.hopopts.nxt",
    "ipv6.routing.nxt",
    "ipv6.dstopts.nxt",
    "ipv6.fraghdr.nxt",
    "ipv6.fraghdr.offset",
    "tcp.srcport",
    "tcp.dstport",
    "udp.srcport",
    "udp.dstport",
    "icmp.type",
    "icmp.code",
    "icmpv6.type",
    "icmpv6.code",
    "_ws.malformed",
];

/// Why tshark cannot be used here, if it cannot.
fn no_tshark() -> Option<String> {
    match Command::new("tshark").arg("-v").output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!("tshark -v exited with {}", o.status)),
        Err(e) => Some(format!("tshark not found ({e}); .ci/run installs it")),
    }
}

/// The flow of one frame as tshark dissected it (`None`: not IP).
fn flow_of(f: &[&str]) -> Option<FlowKey> {
    let n = |i: usize| f.get(i).and_then(|s| s.parse::<u32>().ok());
    let port = |i: usize| n(i).map_or(0, |p| p as u16);
    let v6 = f[1].is_empty();
    let (src, dst): (IpAddr, IpAddr) = if !v6 {
        (f[1].parse().ok()?, f[2].parse().ok()?)
    } else if !f[5].is_empty() {
        (
            f[5].parse::<Ipv6Addr>().ok()?.into(),
            f[6].parse::<Ipv6Addr>().ok()?.into(),
        )
    } else {
        return None;
    };
    // The upper-layer protocol, and whether this is a later fragment.
    let (proto, later_fragment) = if !v6 {
        (n(3)?, n(4).unwrap_or(0) != 0)
    } else {
        // The extension headers' chain: the last next header given.
        let mut p = n(7)?;
        for i in [8, 9, 10, 11] {
            if let Some(x) = n(i) {
                p = x;
            }
        }
        (p, n(12).unwrap_or(0) != 0)
    };
    let (sport, dport) = match proto {
        _ if later_fragment => (0, 0),
        6 => (port(13), port(14)),
        17 => (port(15), port(16)),
        1 => (0, (port(17) << 8) | port(18)),
        58 => (0, (port(19) << 8) | port(20)),
        _ => (0, 0),
    };
    FlowKey::new(src, dst, IpProtocol::from(proto as u8), sport, dport)
}

/// Bytes per flow and their total, by tshark; `None` when tshark calls a
/// frame malformed (the router's own parser then decides what counts).
fn truth(path: &Path) -> Option<(HashMap<FlowKey, u64>, u64)> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-r").arg(path).args([
        "-n",
        "-o",
        "ip.defragment:FALSE",
        "-o",
        "ipv6.defragment:FALSE",
        "-T",
        "fields",
        "-E",
        "separator=/t",
        "-E",
        "occurrence=f",
    ]);
    for f in FIELDS {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut flows: HashMap<FlowKey, u64> = HashMap::new();
    let mut total = 0;
    for line in text.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() < FIELDS.len() {
            continue;
        }
        if !f[21].is_empty() {
            return None;
        }
        let Some(k) = flow_of(&f) else { continue };
        let len: u64 = f[0].parse().ok()?;
        *flows.entry(k).or_default() += len;
        total += len;
    }
    Some((flows, total))
}

#[test]
fn heavy_flows_at_a_tenth_of_a_percent_equal_tshark_s_count() {
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/pcaps"));
    let Ok(entries) = std::fs::read_dir(dir) else {
        let _ = writeln!(std::io::stderr(), "skipping: {} not found", dir.display());
        return;
    };
    if let Some(why) = no_tshark() {
        let _ = writeln!(std::io::stderr(), "skipping: {why}");
        return;
    }
    let mut files: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().contains(".pcap"))
        .collect();
    files.sort();
    let mut router = default_router();
    let h = router.heavy.as_mut().unwrap();
    h.threshold = ThresholdConfig::Share(SHARE);
    h.epoch_ms = Some(1_000_000_000_000);
    let cfg = ReplayConfig {
        pin: false,
        ..ReplayConfig::new(router)
    };
    let mut checked = Vec::new();
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let Ok(r) = replay(&Input::Files(vec![f.clone()]), &cfg, None) else {
            continue; // a bad header: nothing to compare
        };
        // Whole captures whose every frame the router parsed: the two
        // parsers then see the same datagrams.
        if !r.input_errors.is_empty() || !r.router.pipeline.malformed.is_empty() {
            continue;
        }
        let Some((flows, total)) = truth(f) else {
            continue;
        };
        if total == 0 {
            continue;
        }
        let counted = r.router.heavy.as_ref().map_or(0, |h| h.bytes);
        assert_eq!(counted, total, "{name}: the router counted other IP bytes");
        let want: BTreeSet<FlowKey> = flows
            .iter()
            .filter(|&(_, &b)| b as f64 >= SHARE * total as f64)
            .map(|(k, _)| *k)
            .collect();
        let got: BTreeSet<FlowKey> = r
            .heavy
            .iter()
            .flat_map(|e| e.flows.iter().map(|f| f.key))
            .collect();
        let missed: Vec<_> = want.difference(&got).collect();
        let extra: Vec<_> = got.difference(&want).collect();
        assert!(
            missed.is_empty() && extra.is_empty(),
            "{name}: recall {}/{}, missed {missed:?}, not heavy {extra:?}",
            want.len() - missed.len(),
            want.len()
        );
        checked.push((name, want.len(), flows.len()));
    }
    for (name, heavy, flows) in &checked {
        eprintln!("{name}: {heavy} heavy of {flows} flows, recall and precision 1.0");
    }
    assert!(
        checked.len() >= 10,
        "only {} captures compared",
        checked.len()
    );
}

/// The parser of tshark's fields: IPv4 ICMP, IPv6 behind a hop-by-hop
/// header, a later fragment.
#[test]
fn tshark_fields_make_the_router_s_flow_keys() {
    let mut f = vec![""; FIELDS.len()];
    f[0] = "98";
    (f[1], f[2], f[3], f[4]) = ("10.0.0.1", "10.0.0.2", "1", "0");
    (f[17], f[18]) = ("8", "0");
    let k = flow_of(&f).unwrap();
    assert_eq!(k.to_string(), "10.0.0.1 -> 10.0.0.2 icmp 8/0");
    let mut g = vec![""; FIELDS.len()];
    (g[5], g[6], g[7], g[8]) = ("2001:db8::1", "2001:db8::2", "0", "17");
    (g[15], g[16]) = ("5000", "53");
    let k = flow_of(&g).unwrap();
    assert_eq!(k.to_string(), "[2001:db8::1]:5000 -> [2001:db8::2]:53 udp");
    (g[11], g[12]) = ("17", "1448");
    let k = flow_of(&g).unwrap();
    assert_eq!(k.to_string(), "[2001:db8::1]:0 -> [2001:db8::2]:0 udp");
    assert!(flow_of(&vec![""; FIELDS.len()]).is_none());
}
