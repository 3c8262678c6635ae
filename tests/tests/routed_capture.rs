//! A real capture, made by someone else's client, replayed through the
//! routed example (`dataplane/examples/router-l3.toml`) with the
//! destination MAC rewritten to the router's own (`--enet-dmac`): the
//! router forwards by its routes. The reference is computed here from the
//! capture's bytes and the config's routes alone (a longest-prefix match
//! by scanning, the checks of `docs/routed.md` in their order): the
//! counts per drop reason, and per egress port the exact sequence of
//! frames it sends (TTL one less, the next hop's MAC, the port's own).

use std::collections::BTreeMap;
use std::net::IpAddr;

use dataplane::config::RouterConfig;
use dataplane::io::capture::CaptureReader;
use traffic_gen::replay::{DmacRewrite, Input, MacRewrite, ReplayConfig, replay};

/// The example as it is.
fn example() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../dataplane/examples/router-l3.toml"
    ))
    .unwrap()
}

/// The example, and what the test adds to it: routes for both ends of
/// the captures' conversations, and the gateways' MACs (static
/// neighbours, so nothing waits for ARP).
fn config() -> String {
    let example = example();
    format!(
        r#"{example}
# The capture's client side, out of r-b.
[[routes]]
prefix = "192.168.0.0/16"
via = "10.2.0.2"
[[routes]]
prefix = "2601:647::/32"
via = "2001:db8:2::2"
# Everything else, out of r-c (MTU 1400).
[[routes]]
prefix = "::/0"
via = "2001:db8:3::fe"
[[neighbours]]
address = "10.3.0.254"
mac = "02:00:00:00:0c:fe"
[[neighbours]]
address = "2001:db8:3::fe"
mac = "02:00:00:00:0c:ff"
[[neighbours]]
address = "2001:db8:2::2"
mac = "02:00:00:00:0b:06"
"#
    )
}

/// What the reference says of one frame.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Fate {
    /// Out of this port, to this MAC.
    Forward(usize, [u8; 6]),
    Drop(&'static str),
    Consumed,
}

/// A prefix of the config: network, length, and where it leads (the
/// egress port and the next hop, `None`: the destination itself).
struct Route {
    net: IpAddr,
    len: u8,
    port: usize,
    via: Option<IpAddr>,
}

fn bits(a: IpAddr) -> (u128, u8) {
    match a {
        IpAddr::V4(a) => (u128::from(u32::from(a)), 32),
        IpAddr::V6(a) => (u128::from(a), 128),
    }
}

fn contains(net: IpAddr, len: u8, a: IpAddr) -> bool {
    let ((n, w), (x, wx)) = (bits(net), bits(a));
    if w != wx {
        return false;
    }
    let shift = u32::from(w - len);
    len == 0 || (n >> shift) == (x >> shift)
}

/// The routes of `cfg` (connected prefixes and `[[routes]]`), read from
/// the file's values, not the router's tables (a network's host bits do
/// not matter to [`contains`]).
fn routes(cfg: &RouterConfig) -> Vec<Route> {
    let mut out = Vec::new();
    for (port, ifc) in cfg.interfaces.iter().enumerate() {
        for a in &ifc.addresses {
            out.push(Route {
                net: a.addr,
                len: a.len,
                port,
                via: None,
            });
        }
    }
    let connected = out.len();
    for r in &cfg.routes {
        let s = r.prefix.to_string();
        let (net, len) = s.split_once('/').unwrap();
        let via: IpAddr = r.via.expect("the test's routes have gateways");
        let port = out[..connected]
            .iter()
            .find(|c| contains(c.net, c.len, via))
            .unwrap()
            .port;
        out.push(Route {
            net: net.parse().unwrap(),
            len: len.parse().unwrap(),
            port,
            via: Some(via),
        });
    }
    out
}

/// The reference's fate of `frame` (Ethernet), arriving on port 0 with
/// its destination MAC already the router's, and the index of its TTL
/// byte when forwarded.
fn fate(cfg: &RouterConfig, routes: &[Route], frame: &[u8]) -> (Fate, Option<usize>) {
    let mut at = 12;
    while matches!(frame.get(at..at + 2), Some([0x81, 0x00] | [0x88, 0xa8])) {
        at += 4;
    }
    let l3 = at + 2;
    let (dst, ttl_at, len, df, v6) = match frame.get(at..at + 2) {
        Some([0x08, 0x06]) => return (Fate::Consumed, None),
        Some([0x08, 0x00]) => {
            let h = &frame[l3..];
            let dst = IpAddr::V4([h[16], h[17], h[18], h[19]].into());
            let len = usize::from(u16::from_be_bytes([h[2], h[3]]));
            (dst, l3 + 8, len, h[6] & 0x40 != 0, false)
        }
        Some([0x86, 0xdd]) => {
            let h = &frame[l3..];
            // Neighbour discovery (RFC 4861: solicitations and
            // advertisements, hop limit 255) is the router's own input.
            if h[6] == 58 && h[7] == 255 && matches!(h[40..42], [135 | 136, 0]) {
                return (Fate::Consumed, None);
            }
            let b: [u8; 16] = h[24..40].try_into().unwrap();
            let len = 40 + usize::from(u16::from_be_bytes([h[4], h[5]]));
            (IpAddr::V6(b.into()), l3 + 7, len, true, true)
        }
        _ => return (Fate::Drop("not_routable"), None),
    };
    let mine = cfg
        .interfaces
        .iter()
        .flat_map(|i| &i.addresses)
        .any(|a| a.addr == dst);
    let multicast = match dst {
        IpAddr::V4(a) => a.is_multicast() || a.is_broadcast(),
        IpAddr::V6(a) => a.is_multicast(),
    };
    if mine || multicast {
        return (Fate::Consumed, None);
    }
    let Some(r) = routes
        .iter()
        .filter(|r| contains(r.net, r.len, dst))
        .max_by_key(|r| r.len)
    else {
        return (Fate::Drop("no_route"), None);
    };
    if frame[ttl_at] <= 1 {
        return (Fate::Drop("ttl_expired"), None);
    }
    let mtu = cfg.interfaces[r.port].mtu.unwrap_or(1500) as usize;
    if len > mtu {
        // Without DF an IPv4 datagram is dropped all the same (the router
        // does not fragment).
        let _ = (df, v6);
        return (Fate::Drop("too_big"), None);
    }
    let hop = r.via.unwrap_or(dst);
    let Some(n) = cfg.neighbours.iter().find(|n| n.address == hop) else {
        return (Fate::Drop("no_neighbour"), None);
    };
    (Fate::Forward(r.port, n.mac.0), Some(ttl_at))
}

#[test]
fn a_real_capture_is_forwarded_by_the_routes_with_enet_dmac() {
    for name in [
        "pcpp_tls2.pcap",
        "pcpp_many-protocols.pcap",
        "cesnet_mixed.pcap",
        "zeek_vnc-mac-to-linux.pcap",
        "arkime_v6.pcap",
    ] {
        if let Some(pcap) = tests::corpus_file(name) {
            // As shipped, its default route's gateway never answers and
            // IPv6 has no default: what is not dropped as no_neighbour or
            // no_route is forwarded by the routes to 10.9.0.0/16.
            check(&pcap, &example(), "router-l3.toml");
            check(&pcap, &config(), "router-l3.toml + routes");
        }
    }
}

/// The replay of `pcap` through the router `text` against the reference.
fn check(pcap: &std::path::Path, text: &str, label: &str) {
    let name = format!(
        "{} through {label}",
        pcap.file_name().unwrap().to_string_lossy()
    );
    let pcap = pcap.to_path_buf();
    let cfg = RouterConfig::from_toml_str(text, label).unwrap();
    let routes = routes(&cfg);
    let dir = std::env::temp_dir().join(format!(
        "bloomplane-routed-{}-{}",
        std::process::id(),
        name.replace([' ', '+'], "_")
    ));
    // Without the rewrite every unicast frame is another host's.
    let plain = replay(
        &Input::Files(vec![pcap.clone()]),
        &ReplayConfig {
            pin: false,
            ..ReplayConfig::new(cfg.clone())
        },
        None,
    )
    .unwrap();

    let report = replay(
        &Input::Files(vec![pcap.clone()]),
        &ReplayConfig {
            pin: false,
            write: Some(dir.clone()),
            rewrite: MacRewrite {
                dmac: Some(DmacRewrite::PortOwn),
                smac: None,
            },
            ..ReplayConfig::new(cfg.clone())
        },
        None,
    )
    .unwrap();

    // The reference, frame by frame.
    let mut want_drops: BTreeMap<String, u64> = BTreeMap::new();
    let (mut consumed, mut forwarded) = (0u64, 0u64);
    // Per port, the frames and where a checksum not to compare is.
    let mut want_out: Vec<Vec<(Vec<u8>, Option<usize>)>> = vec![Vec::new(); cfg.interfaces.len()];
    let mut r = CaptureReader::open(&pcap).unwrap();
    let mut unicast = 0u64;
    while let Some(rec) = r.next_record().unwrap() {
        let mut f = rec.data.to_vec();
        if f[0] & 1 == 0 {
            unicast += 1;
            f[..6].copy_from_slice(&cfg.router_mac(0).unwrap().0);
        }
        match fate(&cfg, &routes, &f) {
            (Fate::Forward(port, mac), Some(ttl)) => {
                forwarded += 1;
                f[..6].copy_from_slice(&mac);
                f[6..12].copy_from_slice(&cfg.router_mac(port).unwrap().0);
                f[ttl] -= 1;
                // IPv4: the checksum is right again when it was right
                // before; one that was not (a capture's TX offload zeros)
                // is not compared.
                let mut skip = None;
                let l3 = ttl.wrapping_sub(8);
                if (f[l3] >> 4) == 4 {
                    let ihl = usize::from(f[l3] & 0x0f) * 4;
                    let hdr = l3..l3 + ihl;
                    let mut orig = f[hdr.clone()].to_vec();
                    orig[8] += 1;
                    if checksum(&orig) == 0 {
                        f[l3 + 10..l3 + 12].fill(0);
                        let c = checksum(&f[hdr]);
                        f[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
                    } else {
                        skip = Some(l3 + 10);
                    }
                }
                want_out[port].push((f, skip));
            }
            (Fate::Drop(why), _) => *want_drops.entry(why.to_string()).or_default() += 1,
            (Fate::Consumed, _) => consumed += 1,
            (Fate::Forward(..), None) => unreachable!(),
        }
    }
    let p = serde_json::to_value(&report.router.pipeline).unwrap();
    assert_eq!(p["received"], unicast + e_kept(&report));
    assert_eq!(p["forwarded"], forwarded);
    assert_eq!(p["consumed"].as_u64().unwrap_or(0), consumed);
    let drops: BTreeMap<String, u64> = serde_json::from_value(p["drops"].clone()).unwrap();
    assert_eq!(drops, want_drops);
    // Without the rewrite every unicast frame was another host's.
    assert_eq!(
        plain.router.pipeline.drops.get("other_host").copied(),
        Some(unicast),
        "{name}"
    );
    let e = report.enet_rewrite.unwrap();
    assert_eq!(e.dmac_rewritten, unicast, "{name}");
    eprintln!("{name}: forwarded {forwarded} consumed {consumed} drops {want_drops:?}");
    if label != "router-l3.toml" {
        assert!(forwarded > 100, "{name}: {forwarded} {want_drops:?}");
    }

    // What left each port: the forwarded frames in order (the router's own
    // frames set aside), each as the reference
    // made it (the IPv4 header checksum aside: it is updated, and this
    // capture's are zero).
    let router_addrs: Vec<IpAddr> = cfg
        .interfaces
        .iter()
        .flat_map(|i| &i.addresses)
        .map(|a| a.addr)
        .collect();
    for (port, want) in want_out.iter().enumerate() {
        let ifname = &cfg.interfaces[port].name;
        let mut r = CaptureReader::open(&dir.join(format!("{ifname}.pcap"))).unwrap();
        let mut got = Vec::new();
        while let Some(rec) = r.next_record().unwrap() {
            let f = rec.data.to_vec();
            let src: Option<IpAddr> = match (f[12], f[13]) {
                (0x08, 0x00) => Some(IpAddr::V4([f[26], f[27], f[28], f[29]].into())),
                (0x86, 0xdd) => {
                    let b: [u8; 16] = f[22..38].try_into().unwrap();
                    Some(IpAddr::V6(b.into()))
                }
                _ => None,
            };
            // The router's own: ICMP errors from its addresses, ARP
            // requests for a gateway.
            if src.is_some_and(|s| router_addrs.contains(&s)) || f[12..14] == [0x08, 0x06] {
                continue;
            }
            got.push(f);
        }
        assert_eq!(got.len(), want.len(), "{name}: {ifname}");
        for (i, (g, (w, skip))) in got.iter().zip(want).enumerate() {
            let (mut g, mut w) = (g.clone(), w.clone());
            if let Some(at) = *skip {
                g[at..at + 2].fill(0);
                w[at..at + 2].fill(0);
            }
            assert_eq!(g, w, "{name}: {ifname} frame {i}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Frames the rewrite left as they were.
fn e_kept(r: &traffic_gen::replay::Report) -> u64 {
    r.enet_rewrite.map_or(0, |e| e.dmac_kept)
}

/// The Internet checksum of `b` (RFC 1071): 0 over a header whose
/// checksum field is right.
fn checksum(b: &[u8]) -> u16 {
    let mut sum: u32 = b
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}
