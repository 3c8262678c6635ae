//! Tests of the hot-path parser and of `set_ce`.

use super::*;
use crate::wire::{LinkType, igmp, mld};
use proptest::prelude::*;

/// Ethernet, 802.1ad S-tag VID 100, 802.1Q C-tag VID 200, IPv4 (DSCP 46,
/// ECT(0)) TCP SYN 10.0.0.1:1234 -> 10.0.0.2:80, Ethernet padding after.
static QINQ_TCP: [u8; 66] = [
    0x00, 0x11, 0x22, 0x33, 0x44, 0x55, // dst
    0x00, 0x66, 0x77, 0x88, 0x99, 0xaa, // src
    0x88, 0xa8, // TPID 802.1ad
    0x00, 0x64, 0x81, 0x00, // S-tag: VID 100, next TPID 802.1Q
    0x00, 0xc8, 0x08, 0x00, // C-tag: VID 200, next IPv4
    0x45, 0xba, 0x00, 0x28, // IPv4: IHL 5, DSCP 46 + ECT(0), total length 40
    0x00, 0x01, 0x40, 0x00, // ident 1, DF
    0x40, 0x06, 0x26, 0x13, // TTL 64, TCP, checksum
    0x0a, 0x00, 0x00, 0x01, // src 10.0.0.1
    0x0a, 0x00, 0x00, 0x02, // dst 10.0.0.2
    0x04, 0xd2, 0x00, 0x50, // TCP 1234 -> 80
    0x00, 0x00, 0x00, 0x01, // seq
    0x00, 0x00, 0x00, 0x00, // ack
    0x50, 0x02, 0xff, 0xff, // data offset 5, SYN, window
    0x00, 0x00, 0x00, 0x00, // checksum, urgent
    0x00, 0x00, 0x00, 0x00, // Ethernet padding (not part of the datagram)
];

/// Linux cooked capture, IPv6 (traffic class 0x21: CS1 + ECT(1)) with a
/// hop-by-hop and a destination-options header, UDP 5353 -> 5353 to ff02::fb.
static SLL_V6_UDP: [u8; 84] = [
    0x00, 0x00, 0x00, 0x01, 0x00, 0x06, // SLL: to us, ARPHRD_ETHER, addr len 6
    0x02, 0x11, 0x22, 0x33, 0x44, 0x55, 0x00, 0x00, // address
    0x86, 0xdd, // protocol IPv6
    0x62, 0x10, 0x00, 0x00, // version 6, traffic class 0x21, flow 0
    0x00, 0x1c, 0x00, 0x40, // payload length 28, next HBH, hop limit 64
    0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, // src 2001:db8::1
    0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xfb, // dst ff02::fb
    0x3c, 0x00, 0x01, 0x04, 0x00, 0x00, 0x00, 0x00, // HBH: next dest-opts, PadN
    0x11, 0x00, 0x01, 0x04, 0x00, 0x00, 0x00, 0x00, // dest-opts: next UDP, PadN
    0x14, 0xe9, 0x14, 0xe9, 0x00, 0x0c, 0x00, 0x00, // UDP 5353 -> 5353, length 12
    0xaa, 0xbb, 0xcc, 0xdd, // data
];

/// Raw IPv6, non-first fragment (offset 1448, M set) of a UDP datagram.
static RAW_V6_FRAG: [u8; 56] = [
    0x60, 0x00, 0x00, 0x00, 0x00, 0x10, 0x2c, 0x40, // payload 16, next fragment
    0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, // src
    0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, // dst
    0x11, 0x00, 0x05, 0xa9, 0x00, 0x00, 0x00, 0x2a, // fragment: UDP, offset 1448, M, id 42
    0xde, 0xad, 0xbe, 0xef, 0xde, 0xad, 0xbe, 0xef, // fragment data
];

/// Ethernet, IPv4 with router-alert option, IGMPv3 report with one
/// CHANGE_TO_EXCLUDE record for 239.1.2.3, then Ethernet padding.
static IGMPV3: [u8; 64] = [
    0x01, 0x00, 0x5e, 0x00, 0x00, 0x16, 0x00, 0x66, 0x77, 0x88, 0x99, 0xaa, 0x08, 0x00, //
    0x46, 0xc0, 0x00, 0x28, // IHL 6, DSCP 48, total 40
    0x00, 0x00, 0x40, 0x00, 0x01, 0x02, 0x00, 0x00, // DF, TTL 1, IGMP, checksum 0
    0xc0, 0xa8, 0x01, 0x02, 0xe0, 0x00, 0x00, 0x16, // 192.168.1.2 -> 224.0.0.22
    0x94, 0x04, 0x00, 0x00, // router alert
    0x22, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, // IGMPv3 report, 1 record
    0x04, 0x00, 0x00, 0x00, 0xef, 0x01, 0x02, 0x03, // TO_EX({}) 239.1.2.3
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // padding
];

fn assert_in_bounds(p: &Parsed, len: usize) {
    assert!(p.l3_offset <= len);
    if p.is_ip() {
        assert!(p.l3_offset + p.ip_header_len <= len);
        if !p.truncated {
            assert!(p.l3_offset + p.ip_total_len <= len);
        }
    }
    if let Some(l4) = p.l4_offset {
        assert!(l4 + p.l4_header_len <= len);
        assert_eq!(l4, p.l3_offset + p.ip_header_len);
    }
}

#[test]
fn parse_qinq_tcp() {
    let p = parse(LinkType::Ethernet, &QINQ_TCP).unwrap();
    assert_eq!(p.vlan_depth, 2);
    assert_eq!(p.outer_vlan, Some(100));
    assert_eq!(p.ethertype, EtherType::Ipv4);
    assert_eq!(p.l3_offset, 22);
    assert_eq!(p.ip_version, Some(IpVersion::V4));
    assert_eq!((p.ip_header_len, p.ip_total_len), (20, 40));
    assert_eq!((p.dscp, p.ecn, p.ttl), (46, Ecn::Ect0, 64));
    assert_eq!(p.protocol, IpProtocol::Tcp);
    assert_eq!((p.l4_offset, p.l4_header_len), (Some(42), 20));
    assert_eq!((p.src_port, p.dst_port), (1234, 80));
    assert_eq!(p.tcp_flags, TcpFlags::SYN);
    assert_eq!(p.ipv4_checksum, 0x2613);
    assert_eq!(p.payload_len, 0);
    assert!(!p.dst_multicast && !p.truncated && p.fragment.is_none());
    assert_eq!(
        p.flow.unwrap().to_string(),
        "10.0.0.1:1234 -> 10.0.0.2:80 tcp"
    );
    assert_eq!(p.l4_bytes(&QINQ_TCP).len(), 20);
    assert_eq!(checksum::sum(&QINQ_TCP[22..42]), 0xffff);
    assert_in_bounds(&p, QINQ_TCP.len());
}

#[test]
fn parse_sll_v6_ext_udp() {
    let p = parse(LinkType::LinuxSll, &SLL_V6_UDP).unwrap();
    assert_eq!((p.vlan_depth, p.outer_vlan), (0, None));
    assert_eq!(p.l3_offset, 16);
    assert_eq!(p.ip_version, Some(IpVersion::V6));
    assert_eq!(p.ip_header_len, 56);
    assert_eq!(p.ip_total_len, 68);
    assert_eq!((p.dscp, p.ecn, p.ttl), (8, Ecn::Ect1, 64));
    assert_eq!(p.protocol, IpProtocol::Udp);
    assert_eq!(
        (p.l4_offset, p.l4_header_len, p.payload_len),
        (Some(72), 8, 4)
    );
    assert_eq!((p.src_port, p.dst_port), (5353, 5353));
    assert!(p.dst_multicast);
    assert_eq!(
        p.flow.unwrap().to_string(),
        "[2001:db8::1]:5353 -> [ff02::fb]:5353 udp"
    );
    assert_in_bounds(&p, SLL_V6_UDP.len());
}

#[test]
fn parse_v6_non_first_fragment() {
    let p = parse(LinkType::RawIp, &RAW_V6_FRAG).unwrap();
    assert_eq!(
        p.fragment,
        Some(Fragment {
            id: 42,
            offset: 1448,
            more: true
        })
    );
    assert_eq!(p.protocol, IpProtocol::Udp);
    assert_eq!((p.l4_offset, p.src_port, p.dst_port), (None, 0, 0));
    assert_eq!(p.ip_header_len, 48);
    assert_eq!(p.payload_len, 8);
    assert_eq!(p.l4_bytes(&RAW_V6_FRAG), &[] as &[u8]);
    // Reassembly overflow: offset 65528 + 8 bytes > 65535.
    let mut big = RAW_V6_FRAG;
    big[42..44].copy_from_slice(&[0xff, 0xf9]);
    assert_eq!(
        parse(LinkType::RawIp, &big),
        Err(Malformed::FragmentOverflow)
    );
}

#[test]
fn parse_igmpv3_with_padding() {
    let p = parse(LinkType::Ethernet, &IGMPV3).unwrap();
    assert_eq!(p.protocol, IpProtocol::Igmp);
    assert_eq!((p.ip_header_len, p.l4_offset), (24, Some(38)));
    assert!(p.dst_multicast);
    let msg = p.l4_bytes(&IGMPV3);
    assert_eq!(msg.len(), 16, "padding excluded");
    let igmp = igmp::Packet::new_checked(msg).unwrap();
    assert_eq!(igmp.kind(), igmp::Kind::V3Report);
    let recs: Vec<_> = igmp.group_records().collect();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].multicast_addr(), Ipv4Addr::new(239, 1, 2, 3));
    assert!(recs[0].is_join());
}

#[test]
fn parse_mldv2_via_hbh() {
    // IPv6 + HBH(router alert) + MLDv2 report, one record for ff02::1:3.
    let mut f = vec![0x60, 0, 0, 0, 0, 36, 0, 1];
    f.extend_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    f.extend_from_slice(&[0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x16]);
    f.extend_from_slice(&[58, 0, 5, 2, 0, 0, 1, 0]);
    f.extend_from_slice(&[143, 0, 0, 0, 0, 0, 0, 1, 4, 0, 0, 0]);
    f.extend_from_slice(&[0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 3]);
    let p = parse(LinkType::RawIp, &f).unwrap();
    assert_eq!(p.protocol, IpProtocol::Icmpv6);
    let m = mld::Packet::new_checked(p.l4_bytes(&f)).unwrap();
    assert_eq!(m.kind(), mld::Kind::V2Report);
    let recs: Vec<_> = m.address_records().collect();
    assert_eq!(recs.len(), 1);
    assert_eq!(
        recs[0].multicast_addr(),
        "ff02::1:3".parse::<Ipv6Addr>().unwrap()
    );
}

#[test]
fn parse_v6_ah_is_skipped() {
    // IPv6 + AH (len 4 -> 24 bytes) + TCP.
    let mut f = vec![0x60, 0, 0, 0, 0, 44, 51, 64];
    f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    f.extend_from_slice(&[6, 4]);
    f.extend_from_slice(&[0u8; 22]);
    f.extend_from_slice(&[
        0x00, 0x16, 0xc0, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0x50, 0x18, 0, 0, 0, 0, 0, 0,
    ]);
    let p = parse(LinkType::RawIp, &f).unwrap();
    assert_eq!(p.protocol, IpProtocol::Tcp);
    assert_eq!(p.ip_header_len, 64);
    assert_eq!((p.src_port, p.dst_port), (22, 49152));
    assert_eq!(p.tcp_flags, TcpFlags::PSH | TcpFlags::ACK);
}

#[test]
fn non_ip_is_not_malformed() {
    for et in [0x0806u16, 0x8864, 0x8863, 0x8847, 0x8848, 0x0042, 0x88cc] {
        let mut f = QINQ_TCP;
        f[20..22].copy_from_slice(&et.to_be_bytes());
        let p = parse(LinkType::Ethernet, &f).unwrap();
        assert!(!p.is_ip());
        assert_eq!(p.ethertype, EtherType::from(et));
        assert_eq!((p.vlan_depth, p.l3_offset, p.flow), (2, 22, None));
    }
    let p = parse(LinkType::Unknown(147), &QINQ_TCP).unwrap();
    assert!(!p.is_ip());
}

#[test]
fn triple_tag_legacy_tpid() {
    let mut f = vec![0u8; 12];
    f.extend_from_slice(&[
        0x91, 0x00, 0x00, 0x0a, 0x88, 0xa8, 0x00, 0x14, 0x81, 0x00, 0x00, 0x1e, 0x86, 0xdd,
    ]);
    f.extend_from_slice(&RAW_V6_FRAG);
    let p = parse(LinkType::Ethernet, &f).unwrap();
    assert_eq!((p.vlan_depth, p.outer_vlan, p.l3_offset), (3, Some(10), 26));
    assert_eq!(p.fragment.unwrap().offset, 1448);
}

fn raw_v4(total_len: u16, ihl: u8, proto: u8, l4: &[u8]) -> Vec<u8> {
    let mut f = vec![
        0x40 | ihl,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        64,
        proto,
        0,
        0,
        10,
        0,
        0,
        1,
        10,
        0,
        0,
        2,
    ];
    f[2..4].copy_from_slice(&total_len.to_be_bytes());
    f.resize(usize::from(ihl.max(5)) * 4, 1); // NOP options
    f.extend_from_slice(l4);
    f
}

#[test]
fn malformed_reasons() {
    let tcp_hdr = [
        0u8, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0x50, 0x10, 0, 0, 0, 0, 0, 0,
    ];
    let mut bad_doff = tcp_hdr;
    bad_doff[12] = 0x40;
    let mut v6 = RAW_V6_FRAG.to_vec();
    v6[0] = 0x50;
    let cases: Vec<(LinkType, Vec<u8>, Malformed)> = vec![
        (
            LinkType::Ethernet,
            QINQ_TCP[..13].to_vec(),
            Malformed::TruncatedL2,
        ),
        (
            LinkType::Ethernet,
            QINQ_TCP[..20].to_vec(),
            Malformed::TruncatedL2,
        ),
        (
            LinkType::LinuxSll,
            SLL_V6_UDP[..15].to_vec(),
            Malformed::TruncatedL2,
        ),
        (LinkType::RawIp, vec![], Malformed::TruncatedL2),
        (LinkType::RawIp, vec![0x50; 40], Malformed::BadIpVersion),
        (
            LinkType::Ethernet,
            QINQ_TCP[..41].to_vec(),
            Malformed::TruncatedIpv4Header,
        ),
        (
            LinkType::RawIp,
            raw_v4(40, 6, 6, &[])[..22].to_vec(),
            Malformed::TruncatedIpv4Header,
        ),
        (
            LinkType::Ethernet,
            [&QINQ_TCP[..22], &v6[..]].concat(),
            Malformed::BadIpv4Version,
        ),
        (
            LinkType::RawIp,
            raw_v4(40, 4, 6, &[0; 24]),
            Malformed::BadIpv4HeaderLength,
        ),
        (
            LinkType::RawIp,
            raw_v4(19, 5, 6, &tcp_hdr),
            Malformed::Ipv4TotalLengthBelowHeader,
        ),
        (
            LinkType::RawIp,
            raw_v4(23, 6, 6, &tcp_hdr),
            Malformed::Ipv4TotalLengthBelowHeader,
        ),
        (
            LinkType::RawIp,
            RAW_V6_FRAG[..39].to_vec(),
            Malformed::TruncatedIpv6Header,
        ),
        (
            LinkType::RawIp,
            SLL_V6_UDP[16..50].to_vec(),
            Malformed::TruncatedIpv6Header,
        ),
        (
            LinkType::RawIp,
            SLL_V6_UDP[16..62].to_vec(),
            Malformed::TruncatedExtensionHeader,
        ),
        (
            LinkType::RawIp,
            RAW_V6_FRAG[..47].to_vec(),
            Malformed::TruncatedExtensionHeader,
        ),
        (
            LinkType::RawIp,
            raw_v4(39, 5, 6, &tcp_hdr),
            Malformed::L4HeaderBeyondIpPayload,
        ),
        (
            LinkType::RawIp,
            raw_v4(40, 5, 6, &tcp_hdr[..3]),
            Malformed::TruncatedL4Header,
        ),
        (
            LinkType::RawIp,
            raw_v4(40, 5, 6, &bad_doff),
            Malformed::BadTcpHeaderLength,
        ),
        (
            LinkType::RawIp,
            raw_v4(27, 5, 17, &[0, 1, 0, 2, 0, 8, 0, 0]),
            Malformed::L4HeaderBeyondIpPayload,
        ),
        (
            LinkType::RawIp,
            raw_v4(28, 5, 17, &[0, 1, 0, 2, 0, 7, 0, 0]),
            Malformed::BadUdpLength,
        ),
        (
            LinkType::RawIp,
            raw_v4(28, 5, 17, &[0, 1, 0, 2, 0, 9, 0, 0, 0]),
            Malformed::BadUdpLength,
        ),
        (
            LinkType::RawIp,
            raw_v4(28, 5, 17, &[0, 1, 0]),
            Malformed::TruncatedL4Header,
        ),
        (
            LinkType::RawIp,
            raw_v4(28, 5, 1, &[8, 0, 0, 0]),
            Malformed::TruncatedL4Header,
        ),
        (
            LinkType::RawIp,
            raw_v4(27, 5, 1, &[8, 0, 0, 0, 0, 0, 0]),
            Malformed::L4HeaderBeyondIpPayload,
        ),
    ];
    for (i, (link, frame, want)) in cases.iter().enumerate() {
        assert_eq!(parse(*link, frame), Err(*want), "case {i}: {want}");
    }
    // The payload length does not cover the extension headers.
    let mut short = SLL_V6_UDP;
    short[21] = 12;
    assert_eq!(
        parse(LinkType::LinuxSll, &short),
        Err(Malformed::Ipv6ExtensionBeyondPayload)
    );
    short[21] = 18; // covers both ext headers but not the UDP header
    assert_eq!(
        parse(LinkType::LinuxSll, &short),
        Err(Malformed::L4HeaderBeyondIpPayload)
    );
    // A fragment reaching past 65535.
    let mut f = raw_v4(28, 5, 17, &[0, 1, 0, 2, 0, 8, 0, 0]);
    f[6..8].copy_from_slice(&[0x1f, 0xff]);
    assert_eq!(parse(LinkType::RawIp, &f), Err(Malformed::FragmentOverflow));
}

#[test]
fn snaplen_truncation_is_a_flag() {
    // Total length 1500, only headers and 4 bytes captured.
    let mut f = raw_v4(
        1500,
        5,
        6,
        &[
            0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0x50, 0x02, 0, 0, 0, 0, 0, 0,
        ],
    );
    f.extend_from_slice(&[1, 2, 3, 4]);
    let p = parse(LinkType::RawIp, &f).unwrap();
    assert!(p.truncated);
    assert_eq!(p.ip_total_len, 1500);
    assert_eq!(p.payload_len, 1460);
    assert_eq!(p.l4_bytes(&f).len(), 24);
    assert_eq!(parse_with_orig_len(LinkType::RawIp, &f, 1500).unwrap(), p);
    assert_eq!(
        parse_with_orig_len(LinkType::RawIp, &f, f.len()),
        Err(Malformed::Ipv4TotalLengthBeyondFrame)
    );
    let mut v6 = RAW_V6_FRAG;
    v6[5] = 0xff;
    assert!(parse(LinkType::RawIp, &v6).unwrap().truncated);
    assert_eq!(
        parse_with_orig_len(LinkType::RawIp, &v6, v6.len()),
        Err(Malformed::Ipv6PayloadBeyondFrame)
    );
    // UDP length within the IP length but beyond the capture is fine too.
    let mut u = raw_v4(1000, 5, 17, &[0, 1, 0, 2, 0x03, 0xd4, 0, 0]);
    u.extend_from_slice(&[0; 10]);
    let p = parse(LinkType::RawIp, &u).unwrap();
    assert!(p.truncated);
    assert_eq!(p.payload_len, 972);
}

#[test]
fn ipv4_total_length_zero_is_tso() {
    let mut f = raw_v4(
        0,
        5,
        6,
        &[
            0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0x50, 0x10, 0, 0, 0, 0, 0, 0,
        ],
    );
    f.resize(70_000, 0xab);
    let p = parse(LinkType::RawIp, &f).unwrap();
    assert!(p.ip_len_from_capture && !p.truncated);
    assert_eq!(p.ip_total_len, 70_000);
    assert_eq!(p.payload_len, 70_000 - 40);
}

fn jumbo_frame(payload_len: u16, jumbo: u32, extra: usize) -> Vec<u8> {
    let mut f = vec![0x60, 0, 0, 0, 0, 0, 0, 64];
    f[4..6].copy_from_slice(&payload_len.to_be_bytes());
    f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    f.extend_from_slice(&[17, 0, 0xc2, 4]);
    f.extend_from_slice(&jumbo.to_be_bytes());
    f.extend_from_slice(&[0x30, 0x39, 0x00, 0x35, 0, 0, 0, 0]); // UDP, length 0
    f.resize(f.len() + extra, 0);
    f
}

#[test]
fn ipv6_jumbogram() {
    let f = jumbo_frame(0, 70_016, 70_000);
    let p = parse(LinkType::RawIp, &f).unwrap();
    assert!(p.jumbo && !p.truncated);
    assert_eq!(p.ip_total_len, 70_056);
    assert_eq!((p.src_port, p.dst_port, p.payload_len), (12345, 53, 70_000));
    // Jumbo length beyond the frame: cut by capture, or a lie.
    let f = jumbo_frame(0, 70_017, 70_000);
    assert!(parse(LinkType::RawIp, &f).unwrap().truncated);
    assert_eq!(
        parse_with_orig_len(LinkType::RawIp, &f, f.len()),
        Err(Malformed::Ipv6PayloadBeyondFrame)
    );
    // Inconsistent: small jumbo length, or a non-zero payload length.
    assert_eq!(
        parse(LinkType::RawIp, &jumbo_frame(0, 65535, 100)),
        Err(Malformed::BadJumbogram)
    );
    assert_eq!(
        parse(LinkType::RawIp, &jumbo_frame(16, 70_016, 70_000)),
        Err(Malformed::BadJumbogram)
    );
    // Payload length 0 without a jumbo option: the headers lie outside the payload.
    let mut f = jumbo_frame(0, 70_016, 0);
    f[42] = 1; // turn the jumbo option into PadN
    assert_eq!(
        parse(LinkType::RawIp, &f),
        Err(Malformed::Ipv6ExtensionBeyondPayload)
    );
}

// ---------------------------------------------------------------- ECN ----

/// Independent one's-complement sum (no shared code with `checksum`).
fn naive_sum(h: &[u8]) -> u32 {
    let mut s: u32 = 0;
    for i in (0..h.len()).step_by(2) {
        s += (u32::from(h[i]) << 8) | u32::from(*h.get(i + 1).unwrap_or(&0));
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s
}

fn naive_checksum(h: &[u8]) -> u16 {
    let mut c = h.to_vec();
    c[10] = 0;
    c[11] = 0;
    !(naive_sum(&c) as u16)
}

fn v4_with(ecn: u8, ihl: u8, fill: bool) -> Vec<u8> {
    let mut f = raw_v4(28, ihl, 17, &[0, 1, 0, 2, 0, 8, 0, 0]);
    f[1] = (26 << 2) | ecn;
    f[4..6].copy_from_slice(&[0x12, 0x34]);
    let hl = usize::from(ihl) * 4;
    if fill {
        let c = naive_checksum(&f[..hl]);
        f[10..12].copy_from_slice(&c.to_be_bytes());
    }
    let total = (f.len() as u16).to_be_bytes();
    f[2..4].copy_from_slice(&total);
    if fill {
        let c = naive_checksum(&f[..hl]);
        f[10..12].copy_from_slice(&c.to_be_bytes());
    }
    f
}

#[test]
fn set_ce_ipv4_fixes_checksum() {
    for ihl in [5u8, 6, 15] {
        for ecn in [0b01u8, 0b10] {
            let mut f = v4_with(ecn, ihl, true);
            let hl = usize::from(ihl) * 4;
            let p = parse(LinkType::RawIp, &f).unwrap();
            assert!(set_ce(&mut f, &p));
            assert_eq!(f[1], (26 << 2) | 0b11);
            let field = u16::from_be_bytes([f[10], f[11]]);
            assert_eq!(field, naive_checksum(&f[..hl]), "ihl {ihl} ecn {ecn}");
            assert_eq!(naive_sum(&f[..hl]), 0xffff);
            let again = parse(LinkType::RawIp, &f).unwrap();
            assert_eq!(again.ecn, Ecn::Ce);
        }
    }
}

#[test]
fn set_ce_zero_checksum_keeps_header_sum() {
    // TX-offload capture: checksum field 0. Documented behaviour: the RFC 1624
    // update is applied as to any value, so the header's one's-complement sum
    // is unchanged: it failed verification before and fails by the same
    // amount after.
    for ecn in [0b01u8, 0b10] {
        let mut f = v4_with(ecn, 6, false);
        assert_eq!(&f[10..12], &[0, 0]);
        let before = naive_sum(&f[..24]);
        let p = parse(LinkType::RawIp, &f).unwrap();
        assert!(set_ce(&mut f, &p));
        assert_eq!(naive_sum(&f[..24]), before);
        // Concretely: ~delta, where delta is the change of the TOS word.
        let delta = u16::from(0b11 - ecn);
        assert_eq!(u16::from_be_bytes([f[10], f[11]]), !delta);
    }
}

#[test]
fn set_ce_leaves_not_ect_and_ce_alone() {
    for (ecn, want) in [(0b00u8, false), (0b11, true)] {
        let mut f = v4_with(ecn, 5, true);
        let orig = f.clone();
        let p = parse(LinkType::RawIp, &f).unwrap();
        assert_eq!(set_ce(&mut f, &p), want);
        assert_eq!(f, orig);
    }
    let mut f = QINQ_TCP;
    f[20..22].copy_from_slice(&[0x08, 0x06]);
    let p = parse(LinkType::Ethernet, &f).unwrap();
    assert!(!set_ce(&mut f, &p));
    assert_eq!(f, {
        let mut g = QINQ_TCP;
        g[20..22].copy_from_slice(&[0x08, 0x06]);
        g
    });
}

#[test]
fn set_ce_ipv6() {
    let mut f = SLL_V6_UDP;
    let p = parse(LinkType::LinuxSll, &f).unwrap();
    assert!(set_ce(&mut f, &p));
    assert_eq!(&f[16..18], &[0x62, 0x30]); // traffic class 0x23, flow label untouched
    assert_eq!(f[18..], SLL_V6_UDP[18..]);
    assert_eq!(parse(LinkType::LinuxSll, &f).unwrap().ecn, Ecn::Ce);
    let mut n = RAW_V6_FRAG;
    let p = parse(LinkType::RawIp, &n).unwrap();
    assert!(!set_ce(&mut n, &p));
    assert_eq!(n, RAW_V6_FRAG);
}

#[test]
fn set_ce_on_a_short_buffer_is_refused() {
    let p = parse(LinkType::Ethernet, &QINQ_TCP).unwrap();
    let mut short = QINQ_TCP[..30].to_vec();
    assert!(!set_ce(&mut short, &p));
}

// ------------------------------------------------------------ counters ----

#[test]
fn counters() {
    let mut c = MalformedCounters::new();
    c.record(Malformed::TruncatedL2);
    c.record(Malformed::TruncatedL2);
    c.record(Malformed::BadUdpLength);
    assert_eq!(c.get(Malformed::TruncatedL2), 2);
    assert_eq!(c.total(), 3);
    let names: Vec<_> = c.iter().map(|(n, _)| n).collect();
    assert_eq!(names.len(), Malformed::COUNT);
    assert_eq!(names[0], "truncated_l2");
    assert!(c.iter().any(|(n, v)| n == "bad_udp_length" && v == 1));
    let mut d = MalformedCounters::new();
    d.merge(&c);
    d.merge(&c);
    assert_eq!(d.total(), 6);
    for (i, r) in Malformed::ALL.iter().enumerate() {
        assert_eq!(r.index(), i);
        assert!(
            r.name()
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        );
        assert_eq!(r.to_string(), r.name());
    }
    let mut uniq: Vec<_> = Malformed::ALL.iter().map(|r| r.name()).collect();
    uniq.sort_unstable();
    uniq.dedup();
    assert_eq!(uniq.len(), Malformed::COUNT);
}

#[test]
fn parsed_is_small() {
    assert!(
        core::mem::size_of::<Parsed>() <= 160,
        "{}",
        core::mem::size_of::<Parsed>()
    );
}

// ----------------------------------------------------------- proptests ----

fn link_strategy() -> impl Strategy<Value = LinkType> {
    prop_oneof![
        Just(LinkType::Ethernet),
        Just(LinkType::RawIp),
        Just(LinkType::LinuxSll),
        Just(LinkType::Unknown(147)),
    ]
}

fn check_any(link: LinkType, bytes: &[u8]) {
    if let Ok(p) = parse(link, bytes) {
        assert_in_bounds(&p, bytes.len());
        let l4 = p.l4_bytes(bytes);
        assert!(l4.len() <= bytes.len());
        let mut copy = bytes.to_vec();
        let marked = set_ce(&mut copy, &p);
        let changed: Vec<usize> = (0..bytes.len()).filter(|&i| copy[i] != bytes[i]).collect();
        if !changed.is_empty() {
            assert!(marked);
            assert!(
                changed
                    .iter()
                    .all(|&i| i >= p.l3_offset && i < p.l3_offset + p.ip_header_len)
            );
        }
    }
    // The in-place form agrees with the by-value ones, whatever the slot
    // held before.
    let stale = parse(LinkType::RawIp, &[0x45; 28]).ok();
    for orig_len in [None, Some(bytes.len()), Some(bytes.len() + 1)] {
        let by_value = match orig_len {
            Some(len) => parse_with_orig_len(link, bytes, len),
            None => parse(link, bytes),
        };
        for start in [None, stale] {
            let mut out = start;
            let res = parse_into(link, bytes, orig_len, &mut out);
            assert_eq!(res.map(|()| out), by_value.map(Some));
            if res.is_err() {
                assert_eq!(out, None);
            }
        }
    }
}

/// A valid packet built from random parameters, with the offset where the
/// needed headers end and the offset where the IP datagram ends.
#[derive(Debug, Clone)]
struct Built {
    link: LinkType,
    bytes: Vec<u8>,
    headers_end: usize,
    ip_end: usize,
    ports: (u16, u16),
}

#[allow(clippy::too_many_arguments)]
fn build(
    link: u8,
    tags: u8,
    v6: bool,
    opt_words: u8,
    exts: u8,
    proto: u8,
    tcp_opt_words: u8,
    payload: u16,
    ports: (u16, u16),
) -> Built {
    let mut f = Vec::new();
    let link = match link % 3 {
        0 => {
            f.extend_from_slice(&[2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2]);
            for i in 0..tags % 4 {
                f.extend_from_slice(
                    &[[0x81, 0x00], [0x88, 0xa8], [0x91, 0x00], [0x81, 0x00]][usize::from(i)],
                );
                f.extend_from_slice(&[0, i + 1]);
            }
            f.extend_from_slice(if v6 { &[0x86, 0xdd] } else { &[0x08, 0x00] });
            LinkType::Ethernet
        }
        1 => {
            f.extend_from_slice(&[0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0]);
            f.extend_from_slice(if v6 { &[0x86, 0xdd] } else { &[0x08, 0x00] });
            LinkType::LinuxSll
        }
        _ => LinkType::RawIp,
    };
    let l3 = f.len();
    let (proto_num, l4_len) = match proto % 4 {
        0 => (6u8, 20 + 4 * usize::from(tcp_opt_words % 11)),
        1 => (17, 8),
        2 => (if v6 { 58 } else { 1 }, 8),
        _ => (if v6 { 132 } else { 47 }, 0),
    };
    if v6 {
        f.extend_from_slice(&[0x60, 0x20, 0, 0, 0, 0, 0, 64]);
        f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        f.extend_from_slice(&[0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        let n = exts % 4;
        let kinds = [0u8, 60, 43, 51];
        f[l3 + 6] = if n == 0 { proto_num } else { kinds[0] };
        for i in 0..n {
            let next = if i + 1 == n {
                proto_num
            } else {
                kinds[usize::from(i + 1)]
            };
            if kinds[usize::from(i)] == 51 {
                f.extend_from_slice(&[next, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            } else {
                f.extend_from_slice(&[next, 0, 1, 4, 0, 0, 0, 0]);
            }
        }
    } else {
        let ihl = 5 + opt_words % 11;
        f.extend_from_slice(&[
            0x40 | ihl,
            0x02,
            0,
            0,
            0,
            1,
            0,
            0,
            64,
            proto_num,
            0,
            0,
            10,
            0,
            0,
            1,
            10,
            0,
            0,
            2,
        ]);
        f.resize(l3 + usize::from(ihl) * 4, 1);
    }
    let l4 = f.len();
    let payload = usize::from(payload % 300);
    let (sp, dp) = ports;
    match proto % 4 {
        0 => {
            f.extend_from_slice(&sp.to_be_bytes());
            f.extend_from_slice(&dp.to_be_bytes());
            f.extend_from_slice(&[0; 8]);
            f.push(((l4_len / 4) as u8) << 4);
            f.push(0x12);
            f.extend_from_slice(&[0; 6]);
            f.resize(l4 + l4_len, 1);
        }
        1 => {
            f.extend_from_slice(&sp.to_be_bytes());
            f.extend_from_slice(&dp.to_be_bytes());
            f.extend_from_slice(&((8 + payload) as u16).to_be_bytes());
            f.extend_from_slice(&[0, 0]);
        }
        2 => f.extend_from_slice(&[8, 0, 0, 0, 0, 0, 0, 0]),
        _ => {}
    }
    let headers_end = f.len();
    f.resize(headers_end + payload, 0x5a);
    let ip_end = f.len();
    if v6 {
        let pl = (ip_end - l3 - 40) as u16;
        f[l3 + 4..l3 + 6].copy_from_slice(&pl.to_be_bytes());
    } else {
        let tl = (ip_end - l3) as u16;
        f[l3 + 2..l3 + 4].copy_from_slice(&tl.to_be_bytes());
    }
    // ICMP echo: type 8, code 0 in the destination port, as NetFlow keys it.
    let ports = match proto % 4 {
        0 | 1 => ports,
        2 => (0, 0x0800),
        _ => (0, 0),
    };
    Built {
        link,
        bytes: f,
        headers_end,
        ip_end,
        ports,
    }
}

fn built_strategy() -> impl Strategy<Value = Built> {
    (
        any::<u8>(),
        any::<u8>(),
        any::<bool>(),
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
        any::<u16>(),
        any::<(u16, u16)>(),
    )
        .prop_map(|(l, t, v6, o, e, p, to, pl, ports)| build(l, t, v6, o, e, p, to, pl, ports))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(link in link_strategy(), bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        check_any(link, &bytes);
    }

    #[test]
    fn mutated_valid_packets_never_panic(b in built_strategy(), edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
        let mut bytes = b.bytes.clone();
        for (at, v) in edits {
            let n = bytes.len();
            bytes[at % n] = v;
        }
        check_any(b.link, &bytes);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn valid_packets_truncated_at_every_length(b in built_strategy()) {
        let full = parse(b.link, &b.bytes).unwrap();
        prop_assert!(!full.truncated);
        prop_assert_eq!((full.src_port, full.dst_port), b.ports);
        prop_assert_eq!(full.l4_offset.map(|o| o + full.l4_header_len), Some(b.headers_end));
        // A TCP or UDP header cut after its ports parses (the flow is
        // known); anything cut before them does not.
        let ports_end = match full.protocol {
            IpProtocol::Tcp | IpProtocol::Udp => full.l4_offset.map_or(b.headers_end, |o| o + 4),
            _ => b.headers_end,
        };
        for cut in 0..=b.bytes.len() {
            let r = parse(b.link, &b.bytes[..cut]);
            if cut < ports_end {
                let e = r.unwrap_err();
                prop_assert!(e.name().starts_with("truncated_"), "cut {} gave {}", cut, e);
            } else if cut < b.headers_end {
                let p = r.unwrap();
                assert_in_bounds(&p, cut);
                prop_assert!(p.truncated);
                prop_assert_eq!(p.flow, full.flow);
                prop_assert_eq!((p.src_port, p.dst_port), b.ports);
            } else {
                let p = r.unwrap();
                assert_in_bounds(&p, cut);
                prop_assert_eq!(p.truncated, cut < b.ip_end);
                prop_assert_eq!(p.flow, full.flow);
                prop_assert_eq!(p.payload_len, full.payload_len);
                prop_assert_eq!(p.l4_bytes(&b.bytes[..cut]).len(), cut - full.l4_offset.unwrap());
            }
        }
    }
}

/// Cut by the capture's snapshot length after the TCP or UDP ports (a
/// 40-byte snapshot keeps 20 bytes of a TCP header with options): the flow
/// is known, so the datagram parses, truncated, with what was captured.
#[test]
fn cut_by_the_snapshot_after_the_ports_is_not_malformed() {
    // TCP with 12 bytes of options (data offset 8), 100 bytes of payload:
    // total length 20 + 32 + 100; captured: the first 20 TCP bytes.
    let mut tcp = vec![
        0u8, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0x80, 0x12, 0, 0, 0, 0, 0, 0,
    ];
    let p = parse(LinkType::RawIp, &raw_v4(152, 5, 6, &tcp)).unwrap();
    assert!(p.truncated);
    assert_eq!((p.src_port, p.dst_port), (1, 2));
    assert_eq!(p.tcp_flags, TcpFlags(0x012));
    // The header is 32 bytes; 20 were captured.
    assert_eq!((p.l4_header_len, p.payload_len), (20, 100));
    assert!(p.flow.is_some());
    // Only the ports: flags unknown.
    tcp.truncate(6);
    let p = parse(LinkType::RawIp, &raw_v4(152, 5, 6, &tcp)).unwrap();
    assert!(p.truncated);
    assert_eq!((p.src_port, p.dst_port, p.tcp_flags), (1, 2, TcpFlags(0)));
    // UDP: the ports.
    let p = parse(LinkType::RawIp, &raw_v4(128, 5, 17, &[0, 7, 0, 53])).unwrap();
    assert!(p.truncated);
    assert_eq!((p.src_port, p.dst_port, p.payload_len), (7, 53, 100));
    // A bad data offset captured is still malformed.
    let bad = [0u8, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0x40, 0x10];
    assert_eq!(
        parse(LinkType::RawIp, &raw_v4(152, 5, 6, &bad)),
        Err(Malformed::BadTcpHeaderLength)
    );
    // When the capture is known complete, a length beyond it is a lie.
    assert_eq!(
        parse_with_orig_len(LinkType::RawIp, &raw_v4(152, 5, 6, &tcp), 26),
        Err(Malformed::Ipv4TotalLengthBeyondFrame)
    );
}

/// `parse_into`'s shortcut ([`plain`]) gives [`parse`]'s summary on every
/// frame it takes and declines every frame it cannot decide: six plain
/// frames (IPv4 with and without options and IPv6, UDP and TCP, with and
/// without Ethernet padding) with each header byte set to values that
/// matter to some check (version, header length, fragment bits, protocol
/// numbers, length fields), and cut at every length.
#[test]
fn plain_agrees_with_the_general_parser() {
    let ether = |b: Built| {
        assert_eq!(b.link, LinkType::Ethernet);
        b.bytes
    };
    // link 0 (Ethernet), no tags, no IPv4 options or IPv6 extension
    // headers; proto 0 is TCP (no options), 1 UDP.
    let udp4 = ether(build(0, 0, false, 0, 0, 1, 0, 18, (1000, 53)));
    let tcp4 = ether(build(0, 0, false, 0, 0, 0, 0, 6, (40000, 443)));
    let udp6 = ether(build(0, 0, true, 0, 0, 1, 0, 0, (5353, 5353)));
    let tcp6 = ether(build(0, 0, true, 0, 0, 0, 3, 0, (22, 50000)));
    // Two words of IPv4 options (where an Icarus filter travels).
    let options = ether(build(0, 0, false, 2, 0, 1, 0, 20, (7, 9)));
    let mut padded = udp4.clone();
    padded.extend_from_slice(&[0; 6]);
    let values = [
        0x00, 0x01, 0x04, 0x05, 0x06, 0x07, 0x08, 0x11, 0x14, 0x1c, 0x20, 0x28, 0x2c, 0x3a, 0x40,
        0x45, 0x46, 0x4f, 0x50, 0x60, 0x86, 0xdd, 0xe0, 0xef, 0xf0, 0xff,
    ];
    let (mut taken, mut declined) = (0, 0);
    let mut check = |f: &[u8]| {
        let mut out = parse(LinkType::RawIp, &[0x45; 28]).ok();
        if plain(f, &mut out) {
            taken += 1;
            assert_eq!(
                out.ok_or(Malformed::TruncatedL2),
                parse(LinkType::Ethernet, f),
                "{f:02x?}"
            );
        } else {
            declined += 1;
        }
    };
    for base in [&udp4, &tcp4, &udp6, &tcp6, &options, &padded] {
        let headers = base.len().min(ethernet::HEADER_LEN + ipv6::HEADER_LEN + 20);
        for i in 0..headers {
            for v in values {
                let mut f = base.clone();
                f[i] = v;
                check(&f);
            }
        }
        for cut in 0..=base.len() {
            check(&base[..cut]);
        }
    }
    // Most single-byte changes (addresses, ports, TTL) keep a frame plain;
    // the checked fields and the cuts are declined.
    assert!(
        taken > 5000 && declined > 1000,
        "taken {taken}, declined {declined}"
    );
}
