//! Packet digests on real traffic: public captures replayed through a
//! router with its digest stage on (`traffic-gen replay --digests DIR`, the
//! library call), the windows read back from DIR (`store::load`, what
//! `traceback --digests` reads) and asked about:
//!
//! * **no false negative**: every packet the router forwarded is found in
//!   a window whose range holds its capture time, from its ingress port;
//! * **false positives at the design rate**: 10^6 packets that were never
//!   sent (random IPv4 and IPv6 keys), tested against every full window in
//!   turn, are found at a rate within 10% of the design rate (the rate a
//!   full window states; windows here close when full, so every window but
//!   each capture's last is at its design load);
//! * **collisions** on the invariant content between distinct packets of
//!   the captures (SPIE measured them on real traces) are counted and
//!   printed: packets whose key another packet shares while their
//!   datagrams differ beyond the TTL, TOS and checksum, and identical
//!   copies (retransmissions with the same IP id, a packet captured
//!   twice), which no digest can tell apart.
//!
//! Skipped with a note when the corpus (`../shared/pcaps`) is absent.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use dataplane::config::RouterConfig;
use dataplane::io::capture::read_all;
use dataplane::stage::digest::key::{V4_WORDS, V6_WORDS};
use dataplane::stage::digest::{Completeness, DigestQuery, Invariant, lock, store};
use dataplane::wire::parse_with_orig_len;
use traffic_gen::replay::{Input, ReplayConfig, replay};

const CAPTURES: [&str; 7] = [
    "pcpp_tls2.pcap",
    "pcpp_many-protocols.pcap",
    "pcpp_ip-frag.pcap",
    "ddos_amp.dns.RRSIG.fragmented.pcap",
    "ddos_pkt.TCP.synflood.spoofed.pcap",
    "ddos_pkt.TCP.DOMINATE.syn.ecn.cwr.pcapng",
    "zeek_echo-connections.pcap.gz",
];

/// A wire router (every frame of r-a to r-b) keeping digests: windows of
/// an hour that hold 3,600 packets at 1% (they close when full), 1,024
/// windows kept (none is reused here).
const ROUTER: &str = r#"
[[interfaces]]
name = "r-a"
[[interfaces]]
name = "r-b"
[[wires]]
from = "r-a"
to = "r-b"
bidirectional = true
[digest]
window_ms = 3600000
windows = 1024
packet_rate = 1
false_positive_rate = 0.01
"#;

fn corpus() -> Option<PathBuf> {
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/pcaps"));
    dir.join("MANIFEST.tsv")
        .is_file()
        .then(|| dir.to_path_buf())
}

/// The datagram with the fields routers change zeroed (TOS, TTL and
/// checksum; traffic class and hop limit).
fn masked(ip: &[u8]) -> Vec<u8> {
    let mut m = ip.to_vec();
    match ip.first().map(|b| b >> 4) {
        Some(4) if m.len() >= 20 => {
            m[1] = 0;
            m[8] = 0;
            m[10] = 0;
            m[11] = 0;
        }
        Some(6) if m.len() >= 40 => {
            m[0] &= 0xf0;
            m[1] &= 0x0f;
            m[7] = 0;
        }
        _ => {}
    }
    m
}

#[derive(Debug, Default)]
struct Row {
    forwarded: u64,
    keyed: u64,
    found: u64,
    windows: u64,
    full: u64,
    distinct_keys: u64,
    colliding: u64,
    copies: u64,
}

fn run_capture(
    dir: &Path,
    name: &str,
    workers: usize,
    tmp: &Path,
) -> (Row, dataplane::stage::digest::Digests) {
    let path = dir.join(name);
    let kept = tmp.join(format!("{name}-{workers}"));
    let _ = std::fs::remove_dir_all(&kept);
    let router = RouterConfig::from_toml_str(ROUTER, "router.toml").unwrap();
    let cfg = ReplayConfig {
        pin: false,
        workers,
        digests: Some(kept.clone()),
        ..ReplayConfig::new(router)
    };
    let report = replay(&Input::Files(vec![path.clone()]), &cfg, None).unwrap();
    let d = store::load(&kept).unwrap();
    let mut row = Row {
        forwarded: report.router.pipeline.forwarded,
        ..Row::default()
    };
    let digest = report.router.digest.expect("the digest stage is on");
    // Every packet forwarded: found in a window holding its time, from r-a.
    let (recs, _) = read_all(&path);
    let mut by_key: HashMap<Invariant, Vec<Vec<u8>>> = HashMap::new();
    for r in &recs {
        let Ok(p) = parse_with_orig_len(r.link_type, &r.data, r.orig_len as usize) else {
            continue;
        };
        if p.ip_version.is_none() {
            continue;
        }
        let ip = &r.data[p.l3_offset..];
        let Ok(key) = Invariant::from_ip(ip, Completeness::AsCaptured) else {
            continue;
        };
        row.keyed += 1;
        let q = DigestQuery {
            key,
            at_unix_ns: Some(r.ts_ns),
            span_ns: 0,
        };
        let a = d.answer(&q);
        if a.seen.iter().any(|s| s.port == "r-a") {
            row.found += 1;
        }
        // The datagram as the IP length says (not the link's padding).
        let len = p.ip_total_len.min(ip.len());
        by_key.entry(key).or_default().push(masked(&ip[..len]));
    }
    row.distinct_keys = by_key.len() as u64;
    for group in by_key.values().filter(|g| g.len() > 1) {
        let mut counts: HashMap<&[u8], u64> = HashMap::new();
        for g in group {
            *counts.entry(g.as_slice()).or_default() += 1;
        }
        // Copies of one datagram beyond its first; packets sharing the key
        // with a different datagram.
        row.copies += counts.values().map(|c| c - 1).sum::<u64>();
        if counts.len() > 1 {
            row.colliding += group.len() as u64;
        }
    }
    assert_eq!(digest.recorded, row.keyed, "{name}: digests recorded");
    for ring in d.rings() {
        let ring = lock(ring);
        let cap = ring.geometry().capacity;
        for (m, _) in ring.windows() {
            row.windows += 1;
            row.full += u64::from(m.digests == cap);
        }
        assert!(
            (ring.counters().closed as usize) < ring.capacity_windows(),
            "{name}: a window was reused"
        );
    }
    (row, d)
}

#[test]
fn real_captures_no_false_negative_design_rate_and_collisions() {
    let Some(dir) = corpus() else {
        let _ = writeln!(
            std::io::stderr(),
            "skipping: the capture corpus is not found"
        );
        return;
    };
    let tmp = std::env::temp_dir().join(format!("bp-digest-captures-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let mut all = Vec::new();
    println!(
        "{:<42} {:>8} {:>8} {:>8} {:>7} {:>5} {:>9} {:>9} {:>7}",
        "capture", "forward", "digests", "found", "windows", "full", "keys", "colliding", "copies"
    );
    for name in CAPTURES {
        if !dir.join(name).is_file() {
            let _ = writeln!(std::io::stderr(), "skipping {name}: not found");
            continue;
        }
        let (row, d) = run_capture(&dir, name, 1, &tmp);
        println!(
            "{name:<42} {:>8} {:>8} {:>8} {:>7} {:>5} {:>9} {:>9} {:>7}",
            row.forwarded,
            row.keyed,
            row.found,
            row.windows,
            row.full,
            row.distinct_keys,
            row.colliding,
            row.copies
        );
        assert_eq!(row.found, row.keyed, "{name}: false negatives");
        assert!(row.keyed > 0);
        all.push(d);
    }
    // Two workers: each keeps its own windows; still every packet found.
    let (row, _) = run_capture(&dir, "ddos_pkt.TCP.synflood.spoofed.pcap", 2, &tmp);
    assert_eq!(row.found, row.keyed, "two workers: false negatives");

    // Packets never sent against the full windows.
    let mut fulls = Vec::new();
    let mut design = 0.0;
    for d in &all {
        for ring in d.rings() {
            let ring = lock(ring);
            design = ring.geometry().design_fpr;
            let cap = ring.geometry().capacity;
            for (m, b) in ring.windows() {
                if m.digests == cap {
                    fulls.push(b.clone());
                }
            }
        }
    }
    assert!(fulls.len() >= 20, "{} full windows", fulls.len());
    const N: usize = 1_000_000;
    let mut s = 0x5eed_u64;
    let (mut tests, mut hits) = (0u64, 0u64);
    let mut k4 = vec![[0u32; V4_WORDS]; 500];
    let mut k6 = vec![[0u32; V6_WORDS]; 500];
    let mut out = vec![false; 500];
    let mut w = 0;
    while (tests as usize) < N {
        for k in &mut k4 {
            for x in k.iter_mut() {
                *x = kernels::splitmix64(&mut s) as u32;
            }
            k[0] &= 0x00ff_ffff; // port 0
        }
        for k in &mut k6 {
            for x in k.iter_mut() {
                *x = kernels::splitmix64(&mut s) as u32;
            }
            k[0] &= 0x00ff_ffff;
        }
        let f = &fulls[w % fulls.len()];
        w += 1;
        f.contains_batch(&k4, &mut out);
        hits += out.iter().filter(|&&h| h).count() as u64;
        f.contains_batch(&k6, &mut out);
        hits += out.iter().filter(|&&h| h).count() as u64;
        tests += 1000;
    }
    let rate = hits as f64 / tests as f64;
    println!(
        "never sent: {hits} of {tests} tests against {} full windows found: {rate:.5} against the design rate {design:.5} (ratio {:.3})",
        fulls.len(),
        rate / design
    );
    assert!(
        (rate / design - 1.0).abs() <= 0.1,
        "false-positive rate {rate} against {design}"
    );
    let _ = std::fs::remove_dir_all(&tmp);
}
