//! Tests of the ICMP messages the forwarding stage sends.

use super::tests::{CFG, GW_B, HOST_A, MAC_A, MAC_B, run_at, stage, v4, v4_header_ok, v6};
use super::*;
use crate::chain::Chain;
use crate::config::RouterConfig;
use crate::io::memory::MemoryPorts;
use crate::wire::{LinkType, parse};

const T: Timestamp = Timestamp::from_nanos(5_000_000_000);

/// The frames made for one batch.
fn answers(s: &mut Forward, frames: &[(u8, Vec<u8>)]) -> (Batch, Vec<(Vec<u8>, Verdict, u8)>) {
    let mut out = Originated::new();
    let b = run_at(s, frames, T, &mut out);
    let made = out
        .batch()
        .packets()
        .iter()
        .map(|p| (p.data().to_vec(), p.verdict, p.ingress))
        .collect();
    (b, made)
}

/// The ICMP message of an IPv4 frame (after a 20-byte header at 14).
fn icmp4(f: &[u8]) -> &[u8] {
    let total = usize::from(u16::from_be_bytes([f[16], f[17]]));
    &f[34..14 + total]
}

/// The ICMPv6 message of an IPv6 frame (header at 14) and whether its
/// checksum verifies.
fn icmp6(f: &[u8]) -> (&[u8], bool) {
    let plen = usize::from(u16::from_be_bytes([f[18], f[19]]));
    let msg = &f[54..54 + plen];
    let src = Ipv6Addr::from(<[u8; 16]>::try_from(&f[22..38]).unwrap());
    let dst = Ipv6Addr::from(<[u8; 16]>::try_from(&f[38..54]).unwrap());
    let ok = crate::wire::icmpv6::Packet::new_unchecked(msg).verify_checksum(&src, &dst);
    (msg, ok)
}

#[test]
fn time_exceeded_ipv4_quotes_548_bytes_back_out_of_the_ingress() {
    let mut s = stage();
    let orig = v4(MAC_A, [10, 1, 0, 7], [10, 9, 3, 4], 1, 1000, false);
    let (b, made) = answers(&mut s, &[(0, orig.clone())]);
    assert_eq!(
        b.packets()[0].verdict,
        Verdict::Drop(DropReason::TtlExpired)
    );
    assert_eq!(made.len(), 1);
    let (f, verdict, ingress) = &made[0];
    assert_eq!(
        (*verdict, *ingress),
        (Verdict::Forward(PortSet::single(0)), NO_INGRESS)
    );
    assert_eq!(
        (&f[0..6], &f[6..12], &f[12..14]),
        (&HOST_A[..], &MAC_A[..], &[8, 0][..])
    );
    assert!(v4_header_ok(f, 14));
    assert_eq!(f[14 + 9], 1, "ICMP");
    assert_eq!(
        &f[26..30],
        &[10, 1, 0, 1],
        "from the ingress port's address"
    );
    assert_eq!(&f[30..34], &[10, 1, 0, 7]);
    let m = icmp4(f);
    assert_eq!((m[0], m[1]), (11, 0));
    assert_eq!(checksum::sum(m), 0xffff, "ICMP checksum");
    assert_eq!(m.len(), 8 + icmp::V4_QUOTE);
    assert_eq!(
        &m[8..],
        &orig[14..14 + icmp::V4_QUOTE],
        "the datagram as received"
    );
    assert_eq!(s.counters().icmp_errors, 1);
}

#[test]
fn time_exceeded_ipv6_quotes_up_to_1280() {
    let mut s = stage();
    let small = v6(MAC_A, "2001:db8:1::7", "2001:db8:9::1", 1, 100);
    let big = v6(MAC_A, "2001:db8:1::7", "2001:db8:9::1", 0, 1400);
    let (_, made) = answers(&mut s, &[(0, small.clone()), (0, big.clone())]);
    assert_eq!(made.len(), 2);
    for ((f, _, _), orig) in made.iter().zip([&small, &big]) {
        assert_eq!(f.len(), (14 + 40 + 8 + orig.len() - 14).min(14 + 1280));
        assert_eq!(&f[0..6], &HOST_A);
        assert_eq!(
            Ipv6Addr::from(<[u8; 16]>::try_from(&f[22..38]).unwrap()),
            "2001:db8:1::1".parse::<Ipv6Addr>().unwrap()
        );
        let (m, ok) = icmp6(f);
        assert!(ok, "ICMPv6 checksum");
        assert_eq!((m[0], m[1]), (3, 0));
        assert_eq!(&m[8..], &orig[14..14 + m.len() - 8]);
    }
}

#[test]
fn too_big_says_the_next_hop_mtu() {
    let mut s = stage();
    let df = v4(MAC_A, [10, 1, 0, 7], [10, 9, 3, 4], 64, 1400, false);
    let mut no_df = df.clone();
    no_df[20] = 0;
    let sum = !checksum::sum(&{
        let mut h = no_df[14..34].to_vec();
        h[10..12].fill(0);
        h
    });
    no_df[24..26].copy_from_slice(&sum.to_be_bytes());
    let six = v6(MAC_A, "2001:db8:1::7", "2001:db8:9::1", 64, 1400);
    let (b, made) = answers(&mut s, &[(0, df), (0, no_df), (0, six)]);
    assert!(
        b.packets()
            .iter()
            .all(|p| p.verdict == Verdict::Drop(DropReason::TooBig))
    );
    assert_eq!(made.len(), 2, "no error without DF (counted too_big only)");
    let m = icmp4(&made[0].0);
    assert_eq!((m[0], m[1], &m[4..8]), (3, 4, &[0, 0, 0x05, 0x78][..]));
    assert_eq!(checksum::sum(m), 0xffff);
    let (m, ok) = icmp6(&made[1].0);
    assert!(ok);
    assert_eq!((m[0], m[1], &m[4..8]), (2, 0, &1400u32.to_be_bytes()[..]));
    assert_eq!(s.counters().too_big, 3);
}

/// An echo request frame (IPv4 when `to` parses as one, else IPv6).
fn ping(from: &str, to: &str, ttl: u8) -> Vec<u8> {
    let mut f = if to.contains(':') {
        v6(MAC_A, from, to, ttl, 12)
    } else {
        let a = |s: &str| s.parse::<Ipv4Addr>().unwrap().octets();
        v4(MAC_A, a(from), a(to), ttl, 12, false)
    };
    let (l3, v6) = (14, to.contains(':'));
    let l4 = if v6 { l3 + 40 } else { l3 + 20 };
    if v6 {
        f[l3 + 6] = 58;
    } else {
        f[l3 + 9] = 1;
        f[l3 + 10..l3 + 12].fill(0);
        let sum = !checksum::sum(&f[l3..l3 + 20]);
        f[l3 + 10..l3 + 12].copy_from_slice(&sum.to_be_bytes());
    }
    // type, code, checksum, ident 0x1234, seq 7, then the 12 bytes.
    f[l4..l4 + 8].copy_from_slice(&[if v6 { 128 } else { 8 }, 0, 0, 0, 0x12, 0x34, 0, 7]);
    f
}

#[test]
fn echo_replies_ipv4_and_ipv6() {
    let mut s = stage();
    let frames = vec![
        (0, ping("10.1.0.7", "10.1.0.1", 1)),
        (0, ping("10.1.0.7", "10.2.0.1", 64)),
        (0, ping("2001:db8:1::7", "2001:db8:1::1", 64)),
    ];
    let (b, made) = answers(&mut s, &frames);
    assert!(b.packets().iter().all(|p| p.verdict == Verdict::Consumed));
    assert_eq!(made.len(), 3);
    for (i, (f, v, _)) in made.iter().take(2).enumerate() {
        assert_eq!(*v, Verdict::Forward(PortSet::single(0)));
        assert_eq!((&f[0..6], &f[6..12]), (&HOST_A[..], &MAC_A[..]));
        assert!(v4_header_ok(f, 14));
        assert_eq!(&f[26..30], &frames[i].1[30..34], "from the address pinged");
        assert_eq!(&f[30..34], &[10, 1, 0, 7]);
        let m = icmp4(f);
        assert_eq!((m[0], m[1]), (0, 0));
        assert_eq!(checksum::sum(m), 0xffff);
        assert_eq!(&m[4..], &frames[i].1[38..], "ident, sequence, data");
    }
    let f = &made[2].0;
    let (m, ok) = icmp6(f);
    assert!(ok);
    assert_eq!((m[0], m[1]), (129, 0));
    assert_eq!(&m[4..], &frames[2].1[58..]);
    assert_eq!(s.counters().echo_replies, 3);
}

#[test]
fn no_error_about_errors_fragments_or_group_addresses() {
    let mut s = stage();
    // An ICMP time exceeded in transit, its TTL expiring here.
    let mut err = ping("10.1.0.7", "10.9.0.1", 1);
    err[34] = 11;
    // To the broadcast MAC.
    let mut bcast = v4(MAC_A, [10, 1, 0, 7], [10, 9, 3, 4], 1, 20, false);
    bcast[0..6].fill(0xff);
    // A non-first fragment (offset 8 bytes).
    let mut frag = v4(MAC_A, [10, 1, 0, 7], [10, 9, 3, 4], 1, 20, false);
    frag[20..22].copy_from_slice(&[0x00, 0x01]);
    frag[24..26].fill(0);
    let sum = !checksum::sum(&frag[14..34]);
    frag[24..26].copy_from_slice(&sum.to_be_bytes());
    // An echo request passing through is not an error: it gets one.
    let through = ping("10.1.0.7", "10.9.0.1", 1);
    let (b, made) = answers(&mut s, &[(0, err), (0, bcast), (0, frag), (0, through)]);
    assert!(
        b.packets()
            .iter()
            .all(|p| p.verdict == Verdict::Drop(DropReason::TtlExpired)),
        "{:?}",
        b.packets().iter().map(|p| p.verdict).collect::<Vec<_>>()
    );
    assert_eq!(made.len(), 1);
    assert_eq!(icmp4(&made[0].0)[0], 11);
}

#[test]
fn errors_are_rate_limited_in_packet_time() {
    let cfg = RouterConfig::from_toml_str(
        &format!("{CFG}\n[router]\nicmp_rate = 10\nicmp_burst = 3\n"),
        "t",
    )
    .unwrap();
    let mut s = Forward::new(&cfg.forward_config(), 0, false);
    let f = v4(MAC_A, [10, 1, 0, 7], [10, 9, 3, 4], 1, 20, false);
    let five: Vec<_> = (0..5).map(|_| (0u8, f.clone())).collect();
    let mut out = Originated::new();
    run_at(&mut s, &five, T, &mut out);
    assert_eq!(out.batch().len(), 3);
    run_at(&mut s, &five, T.add_nanos(100_000_000), &mut out);
    assert_eq!(out.batch().len(), 1, "one token in 100 ms at 10/s");
    let c = s.counters();
    assert_eq!(
        (c.icmp_errors, c.icmp_rate_limited, c.ttl_expired),
        (4, 6, 10)
    );
}

/// Through the whole chain: the error leaves by the ingress port (not a
/// hairpin), the forwarded packet by its egress, and the chain's
/// accounting holds.
#[test]
fn the_chain_sends_answers_out_of_the_ingress_port() {
    let cfg = RouterConfig::from_toml_str(CFG, "t").unwrap();
    let mut chain = Chain::build(&cfg).unwrap();
    let mut tx = MemoryPorts::new(4).keep_sent(true);
    let mut b = Batch::new();
    for f in [
        v4(MAC_A, [10, 1, 0, 7], [10, 9, 3, 4], 1, 20, false),
        v4(MAC_A, [10, 1, 0, 7], [10, 9, 3, 4], 9, 20, false),
        ping("10.1.0.7", "10.1.0.1", 64),
    ] {
        b.push_from(T, f.len() as u32, LinkType::Ethernet, 0, &f);
    }
    chain.process(&mut b, T, &mut tx);
    let c = chain.counters();
    assert_eq!(
        (c.received, c.forwarded, c.consumed, c.dropped.total()),
        (3, 1, 1, 1)
    );
    assert!(c.is_consistent());
    let sent = tx.take_sent();
    let ports: Vec<u8> = sent.iter().map(|s| s.port).collect();
    assert_eq!(ports, vec![1, 0, 0]);
    assert_eq!(&sent[0].frame[0..6], &GW_B);
    assert_eq!(&sent[0].frame[6..12], &MAC_B);
    let kinds: Vec<u8> = sent[1..].iter().map(|s| icmp4(&s.frame)[0]).collect();
    assert_eq!(kinds, vec![11, 0]);
    let port0 = chain.egress().counters().next().unwrap();
    assert_eq!((port0.sent, port0.hairpin), (2, 0));
    assert!(parse(LinkType::Ethernet, &sent[1].frame).is_ok());
}

#[test]
fn udp_to_the_router_gets_port_unreachable_from_the_address_probed() {
    let mut s = stage();
    let frames = vec![
        (0, v4(MAC_A, [10, 1, 0, 7], [10, 1, 0, 1], 1, 20, false)),
        (0, v4(MAC_A, [10, 1, 0, 7], [10, 2, 0, 1], 3, 20, false)),
        (0, v4(MAC_A, [10, 1, 0, 7], [10, 1, 0, 255], 3, 20, false)), // broadcast: none
        (0, v6(MAC_A, "2001:db8:1::7", "2001:db8:2::1", 64, 20)),
    ];
    let (b, made) = answers(&mut s, &frames);
    assert!(b.packets().iter().all(|p| p.verdict == Verdict::Consumed));
    assert_eq!(made.len(), 3);
    for (f, from) in made.iter().take(2).zip([[10, 1, 0, 1], [10, 2, 0, 1]]) {
        let m = icmp4(&f.0);
        assert_eq!((m[0], m[1]), (3, 3));
        assert_eq!(&f.0[26..30], &from);
        assert_eq!(checksum::sum(m), 0xffff);
        assert!(v4_header_ok(&f.0, 14));
    }
    let (m, ok) = icmp6(&made[2].0);
    assert!(ok);
    assert_eq!((m[0], m[1]), (1, 4));
    assert_eq!(
        &made[2].0[22..38],
        &"2001:db8:2::1".parse::<Ipv6Addr>().unwrap().octets()
    );
}

#[test]
fn no_route_gets_destination_unreachable() {
    let mut s = stage();
    let frames = vec![
        (0, v4(MAC_A, [10, 1, 0, 7], [10, 7, 0, 1], 64, 20, false)),
        (0, v6(MAC_A, "2001:db8:1::7", "2001:db8:7::1", 64, 20)),
    ];
    let (b, made) = answers(&mut s, &frames);
    assert!(
        b.packets()
            .iter()
            .all(|p| p.verdict == Verdict::Drop(DropReason::NoRoute))
    );
    assert_eq!(made.len(), 2);
    let m = icmp4(&made[0].0);
    assert_eq!((m[0], m[1], &made[0].0[26..30]), (3, 0, &[10, 1, 0, 1][..]));
    assert_eq!(checksum::sum(m), 0xffff);
    let (m, ok) = icmp6(&made[1].0);
    assert!(ok);
    assert_eq!((m[0], m[1]), (1, 0));
}

/// A route back out of the ingress port is followed (Linux forwards such
/// packets), not counted as a hairpin; other packets still never go back
/// out of their ingress port.
#[test]
fn routes_back_out_of_the_ingress_port() {
    let text = format!("{CFG}\n[[routes]]\nprefix = \"10.5.0.0/16\"\nvia = \"10.1.0.7\"\n");
    let cfg = RouterConfig::from_toml_str(&text, "t").unwrap();
    let mut chain = Chain::build(&cfg).unwrap();
    let mut tx = MemoryPorts::new(4).keep_sent(true);
    let mut b = Batch::new();
    let f = v4(MAC_A, [10, 1, 0, 8], [10, 5, 0, 1], 64, 20, false);
    b.push_from(T, f.len() as u32, LinkType::Ethernet, 0, &f);
    chain.process(&mut b, T, &mut tx);
    let sent = tx.take_sent();
    assert_eq!(sent.len(), 1);
    assert_eq!((sent[0].port, &sent[0].frame[0..6]), (0, &HOST_A[..]));
    let port0 = chain.egress().counters().next().unwrap();
    assert_eq!((port0.sent, port0.hairpin), (1, 0));
    assert!(b.packets()[0].to_ingress);
    // The flag does not outlive the slot's next use.
    b.clear();
    b.push_from(T, f.len() as u32, LinkType::Ethernet, 2, &f);
    assert!(!b.packets()[0].to_ingress);
}

/// The MTU check sees the packet as it will leave: an Icarus option
/// inserted at ingress counts (a datagram of exactly the egress MTU is
/// then too big, and the MTU reported leaves room for the option, or the
/// sender would never fit), unless the egress port strips it again (then
/// it fits, and leaves at its original size).
#[test]
fn icarus_option_counts_against_the_mtu_unless_stripped() {
    let run_with = |strip: &str| {
        let text = format!(
            "{CFG}\n[icarus]\nnode_id = 1\nfilter_bits = 64\ninsert_on = [\"a\"]\nstrip_on = [{strip}]\n"
        );
        let cfg = RouterConfig::from_toml_str(&text, "t").unwrap();
        let mut chain = Chain::build(&cfg).unwrap();
        let mut tx = MemoryPorts::new(4).keep_sent(true);
        let mut b = Batch::new();
        // 1400 bytes of IP: exactly port b's MTU.
        let f = v4(MAC_A, [10, 1, 0, 7], [10, 9, 3, 4], 64, 1372, false);
        b.push_from(T, f.len() as u32, LinkType::Ethernet, 0, &f);
        chain.process(&mut b, T, &mut tx);
        // The insertion is deferred to the egress stage (see
        // `stage::icarus`): the packet only says how much it will grow.
        assert_eq!(
            b.packets()[0].data().len(),
            f.len(),
            "the frame keeps its size"
        );
        let grown = usize::from(b.packets()[0].icarus_pending);
        (b.packets()[0].verdict, tx.take_sent(), grown)
    };
    let (v, sent, grown) = run_with("");
    assert_eq!(v, Verdict::Drop(DropReason::TooBig));
    assert!(grown > 0, "an option is to be inserted");
    assert_eq!(sent.len(), 1);
    let m = icmp4(&sent[0].frame);
    let mtu = (1400 - grown) as u16;
    assert_eq!((m[0], m[1], &m[6..8]), (3, 4, &mtu.to_be_bytes()[..]));
    let (v, sent, _) = run_with("\"b\"");
    assert_eq!(v, Verdict::Forward(PortSet::single(1)));
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].port, 1);
    assert_eq!(sent[0].frame.len(), 14 + 1400, "stripped back to its size");
    assert!(v4_header_ok(&sent[0].frame, 14));
}

#[test]
fn errors_and_echo_replies_follow_the_route_to_their_source() {
    let mut s = stage();
    // From 10.9.3.4 (routed via 10.2.0.2 on port b, a known neighbour) but
    // arriving on port a, as after a loop: the error goes out of b to the
    // gateway, from b's MAC, with a's address (where the packet came in).
    let expiring = v4(MAC_A, [10, 9, 3, 4], [10, 1, 0, 7], 1, 100, false);
    let (_, made) = answers(&mut s, &[(0, expiring)]);
    assert_eq!(made.len(), 1);
    let (f, verdict, _) = &made[0];
    assert_eq!(*verdict, Verdict::Forward(PortSet::single(1)), "out of b");
    assert_eq!((&f[0..6], &f[6..12]), (&GW_B[..], &MAC_B[..]));
    assert_eq!(&f[26..30], &[10, 1, 0, 1]);
    assert_eq!(&f[30..34], &[10, 9, 3, 4]);
    assert_eq!(icmp4(f)[0], 11);
    // A source whose next hop is unknown (10.1.0.8: connected, never
    // seen): back out of the ingress port to the MAC the packet came from.
    let unknown = v4(MAC_A, [10, 1, 0, 8], [10, 9, 3, 4], 1, 100, false);
    let (_, made) = answers(&mut s, &[(0, unknown)]);
    let (f, verdict, _) = &made[0];
    assert_eq!(*verdict, Verdict::Forward(PortSet::single(0)));
    assert_eq!((&f[0..6], &f[6..12]), (&HOST_A[..], &MAC_A[..]));
    // A ping of a's address from behind b: the reply leaves by b.
    let mut ping = v4(MAC_A, [10, 9, 3, 4], [10, 1, 0, 1], 64, 16, false);
    ping[14 + 9] = 1; // ICMP
    ping[34..42].copy_from_slice(&[8, 0, 0, 0, 0, 1, 0, 1]);
    let sum = !checksum::sum(&ping[34..]);
    ping[36..38].copy_from_slice(&sum.to_be_bytes());
    let sum = {
        ping[24..26].copy_from_slice(&[0, 0]);
        !checksum::sum(&ping[14..34])
    };
    ping[24..26].copy_from_slice(&sum.to_be_bytes());
    let (_, made) = answers(&mut s, &[(0, ping)]);
    assert_eq!(made.len(), 1, "an echo reply");
    let (f, verdict, _) = &made[0];
    assert_eq!(*verdict, Verdict::Forward(PortSet::single(1)));
    assert_eq!((&f[0..6], &f[6..12]), (&GW_B[..], &MAC_B[..]));
    assert_eq!(icmp4(f)[0], 0, "echo reply");
}
