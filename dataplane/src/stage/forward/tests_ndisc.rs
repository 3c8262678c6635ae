//! Tests of ARP, neighbour discovery and held packets.

use super::tests::{CFG, MAC_A, run_at, stage, v4, v4_header_ok, v6};
use super::*;
use crate::chain::Chain;
use crate::config::RouterConfig;
use crate::io::memory::MemoryPorts;
use crate::wire::{LinkType, parse};

const T: Timestamp = Timestamp::from_nanos(5_000_000_000);
const PEER: [u8; 6] = [2, 0, 0, 0, 1, 0x20];

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// An ARP message from `sha`/`spa` asking for (or answering about) `tpa`.
fn arp(op: u16, to: [u8; 6], sha: [u8; 6], spa: [u8; 4], tpa: [u8; 4]) -> Vec<u8> {
    let mut f = to.to_vec();
    f.extend_from_slice(&sha);
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4]);
    f.extend_from_slice(&op.to_be_bytes());
    f.extend_from_slice(&sha);
    f.extend_from_slice(&spa);
    f.extend_from_slice(&if op == 2 { MAC_A } else { [0; 6] });
    f.extend_from_slice(&tpa);
    f
}

/// A neighbour solicitation (`NS`) or advertisement (`NA`) from `src` at
/// `mac` about `target`, built with the router's own builders.
fn nd(kind: u8, mac: [u8; 6], src: &str, target: &str) -> Vec<u8> {
    let src: Ipv6Addr = src.parse().unwrap();
    let target: Ipv6Addr = target.parse().unwrap();
    let mut f = Vec::new();
    ndisc::neighbour_solicit(&mut f, MacAddr(mac), src, target);
    if kind == ndisc::NA {
        // Turn it into the advertisement the peer would send: to the
        // router's MAC, type 136, target option.
        let x = parse(LinkType::Ethernet, &f).unwrap();
        let ns = ndisc::read_nd(&f, &x).unwrap();
        let asked = ndisc::Nd {
            src: "2001:db8:1::1".parse().unwrap(),
            target,
            ..ns
        };
        let mut na = Vec::new();
        // The advert goes back to the "solicitor" (the router, MAC_A).
        let mut req = f.clone();
        req[6..12].copy_from_slice(&MAC_A);
        ndisc::neighbour_advert(&mut na, &req, &x, &asked, MacAddr(mac));
        return na;
    }
    f
}

fn made(out: &Originated) -> Vec<(Vec<u8>, PortSet)> {
    out.batch()
        .packets()
        .iter()
        .map(|p| (p.data().to_vec(), p.verdict.ports()))
        .collect()
}

#[test]
fn answers_arp_and_solicitations_for_its_addresses_and_learns() {
    let mut s = stage();
    let mut out = Originated::new();
    let frames = vec![
        (0, arp(1, [0xff; 6], PEER, [10, 1, 0, 20], [10, 1, 0, 1])),
        (0, arp(1, [0xff; 6], PEER, [10, 1, 0, 20], [10, 1, 0, 99])), // not ours
        (0, nd(ndisc::NS, PEER, "2001:db8:1::20", "2001:db8:1::1")),
    ];
    let b = run_at(&mut s, &frames, T, &mut out);
    assert!(b.packets().iter().all(|p| p.verdict == Verdict::Consumed));
    let m = made(&out);
    assert_eq!(m.len(), 2);
    let (rep, ports) = &m[0];
    assert_eq!(*ports, PortSet::single(0));
    let x = parse(LinkType::Ethernet, rep).unwrap();
    let a = ndisc::read_arp(rep, &x).unwrap();
    assert_eq!(
        (a.op, a.sha, a.spa, a.tha, a.tpa),
        (
            ndisc::ARP_REPLY,
            MacAddr(MAC_A),
            Ipv4Addr::new(10, 1, 0, 1),
            MacAddr(PEER),
            Ipv4Addr::new(10, 1, 0, 20)
        )
    );
    assert_eq!(&rep[0..6], &PEER);
    let (na, _) = &m[1];
    let y = parse(LinkType::Ethernet, na).unwrap();
    let ad = ndisc::read_nd(na, &y).unwrap();
    assert_eq!(
        (ad.kind, ad.target, ad.lladdr),
        (
            ndisc::NA,
            "2001:db8:1::1".parse().unwrap(),
            Some(MacAddr(MAC_A))
        )
    );
    let src: Ipv6Addr = "2001:db8:1::1".parse().unwrap();
    let dst: Ipv6Addr = "2001:db8:1::20".parse().unwrap();
    assert!(crate::wire::icmpv6::Packet::new_unchecked(y.l4_bytes(na)).verify_checksum(&src, &dst));
    assert_eq!(s.neighbours().get(ip("10.1.0.20"), T), Some(MacAddr(PEER)));
    assert_eq!(
        s.neighbours().get(ip("2001:db8:1::20"), T),
        Some(MacAddr(PEER))
    );
    let c = s.counters();
    assert_eq!((c.arp_replies, c.nd_adverts, c.learned), (1, 1, 2));
}

/// A packet for an unknown next hop is held, the next hop asked for; the
/// answer releases it, rewritten for the new MAC. Through the chain, so
/// that the accounting is checked on the way.
#[test]
fn holds_resolves_and_releases_through_the_chain() {
    let cfg = RouterConfig::from_toml_str(CFG, "t").unwrap();
    let mut chain = Chain::build(&cfg).unwrap();
    let mut tx = MemoryPorts::new(4).keep_sent(true);
    let mut batch = |chain: &mut Chain, frames: &[(u8, Vec<u8>)], t: Timestamp| {
        let mut b = Batch::new();
        for (port, f) in frames {
            b.push_from(t, f.len() as u32, LinkType::Ethernet, *port, f);
        }
        chain.process(&mut b, t, &mut tx);
        assert!(chain.counters().is_consistent(), "{:?}", chain.counters());
        tx.take_sent()
    };
    // From port 1 to hosts on port 0's prefix that nobody knows yet.
    let to20 = v4(
        super::tests::MAC_B,
        [10, 2, 0, 9],
        [10, 1, 0, 20],
        64,
        20,
        false,
    );
    let to20b = v6(
        super::tests::MAC_B,
        "2001:db8:2::9",
        "2001:db8:1::20",
        64,
        20,
    );
    let sent = batch(&mut chain, &[(1, to20.clone()), (1, to20b.clone())], T);
    let c = chain.counters();
    assert_eq!((c.received, c.held, c.forwarded), (2, 2, 0));
    // An ARP request and a solicitation out of port 0, nothing else.
    assert_eq!(sent.len(), 2);
    assert!(sent.iter().all(|s| s.port == 0));
    let x = parse(LinkType::Ethernet, &sent[0].frame).unwrap();
    let a = ndisc::read_arp(&sent[0].frame, &x).unwrap();
    assert_eq!(
        (a.op, a.tpa),
        (ndisc::ARP_REQUEST, Ipv4Addr::new(10, 1, 0, 20))
    );
    assert_eq!(&sent[0].frame[0..6], &[0xff; 6]);
    let y = parse(LinkType::Ethernet, &sent[1].frame).unwrap();
    let ns = ndisc::read_nd(&sent[1].frame, &y).unwrap();
    assert_eq!(ns.kind, ndisc::NS);
    assert_eq!(&sent[1].frame[0..6], &[0x33, 0x33, 0xff, 0, 0, 0x20]);
    // The answers.
    let t2 = T.add_nanos(1_000);
    let sent = batch(
        &mut chain,
        &[
            (0, arp(2, MAC_A, PEER, [10, 1, 0, 20], [10, 1, 0, 1])),
            (0, nd(ndisc::NA, PEER, "2001:db8:1::20", "2001:db8:1::20")),
        ],
        t2,
    );
    let c = chain.counters();
    assert_eq!((c.received, c.held, c.forwarded, c.consumed), (4, 0, 2, 2));
    assert_eq!(sent.len(), 2, "{sent:?}");
    let f = &sent[0].frame;
    assert_eq!(
        (sent[0].port, &f[0..6], &f[6..12]),
        (0, &PEER[..], &MAC_A[..])
    );
    assert_eq!(f[22], 63);
    assert!(v4_header_ok(f, 14));
    assert_eq!(&f[34..], &to20[34..]);
    let f = &sent[1].frame;
    assert_eq!((&f[0..6], f[21]), (&PEER[..], 63));
    let fwd = chain.forward().unwrap().counters();
    assert_eq!((fwd.held, fwd.released, fwd.learned), (2, 2, 2));
}

#[test]
fn gives_up_after_the_tries_and_bounds_the_queue() {
    let cfg = RouterConfig::from_toml_str(CFG, "t").unwrap();
    let mut chain = Chain::build(&cfg).unwrap();
    let mut tx = MemoryPorts::new(4).keep_sent(true);
    let f = v4(
        super::tests::MAC_B,
        [10, 2, 0, 9],
        [10, 1, 0, 30],
        64,
        20,
        false,
    );
    let mut b = Batch::new();
    for _ in 0..4 {
        b.push_from(T, f.len() as u32, LinkType::Ethernet, 1, &f);
    }
    chain.process(&mut b, T, &mut tx);
    let c = chain.counters();
    assert_eq!((c.held, c.dropped.get(DropReason::NoNeighbour)), (3, 1));
    let mut requests = tx.take_sent().len();
    for s in 1..=3u64 {
        chain.tick(&mut b, T.add_nanos(s * 1_000_000_000), &mut tx);
        requests += tx.take_sent().len();
        assert!(chain.counters().is_consistent());
    }
    assert_eq!(requests, 3, "three ARP requests, a second apart");
    let c = chain.counters();
    assert_eq!((c.held, c.dropped.get(DropReason::NoNeighbour)), (0, 4));
    assert_eq!(chain.forward().unwrap().counters().resolve_failed, 3);
}
