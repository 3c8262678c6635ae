//! Icarus wire operations on whole frames: insert, strip, check-and-update,
//! with every length and checksum verified by an independent computation.

mod icarus_common;

use dataplane::stage::icarus::{FilterParams, filter_after_hops, insert_after_hops, node_mask};
use dataplane::wire::icarus::{
    self, Filter, FilterWidth, Hop, IcarusError, Ipv4Option, Ipv6Option, Stripped,
};
use dataplane::wire::{LinkType, parse};
use icarus_common::*;
use proptest::prelude::*;

const L3: usize = 14;

fn filter_of(width: FilterWidth, seed: u8) -> Filter {
    let bytes: Vec<u8> = (0..width.bytes() as u8)
        .map(|i| i.wrapping_mul(37) ^ seed)
        .collect();
    Filter::from_bytes(&bytes).unwrap()
}

/// The frame parses, and its flow and ports are the original's.
fn same_flow(a: &[u8], b: &[u8]) {
    let pa = parse(LinkType::Ethernet, a).unwrap();
    let pb = parse(LinkType::Ethernet, b).unwrap();
    assert_eq!(pa.flow, pb.flow);
    assert_eq!(pa.protocol, pb.protocol);
    assert_eq!(pa.payload_len, pb.payload_len);
}

#[test]
fn insert_ipv4_annotated() {
    let before = ipv4_frame(&[], 17, &[0xde, 0xad]);
    let mut f = before.clone();
    let loc = icarus::insert(&mut f, L3, &filter_of(FilterWidth::M64, 0)).unwrap();
    let hc = ipv4_header_checksum(&f, L3).to_be_bytes();
    #[rustfmt::skip]
    let expected_ip: [u8; 32] = [
        0x48, 0x00, // version 4, IHL 8 (32 bytes)
        0x00, 0x2a, // total length 42 = 32 + 8 (UDP) + 2
        0x12, 0x34, 0x40, 0x00, 64, 17, // ident, DF, TTL, UDP
        hc[0], hc[1], // header checksum
        192, 0, 2, 1, 198, 51, 100, 7, // addresses
        0x01, 0x01, // NOP, NOP
        0x5e, 0x0a, // icarus type, length 10
        0x00, 0x25, 0x4a, 0x6f, 0x94, 0xb9, 0xde, 0x03, // filter
    ];
    assert_eq!(&f[L3..L3 + 32], &expected_ip);
    assert_eq!(&f[L3 + 32..], &before[L3 + 20..]);
    assert_eq!((loc.option_offset, loc.filter_offset), (L3 + 22, L3 + 24));
    check_l4(&f, L3).unwrap();
    same_flow(&before, &f);
}

/// An IPv4 header checksum field of `ffff` comes back from insert then
/// strip as `0000`, the other form of the one's-complement zero (the
/// incremental update never writes `ffff`); every other value, correct or
/// not, comes back as it was. Found by the `icarus` fuzz target.
#[test]
fn checksum_ffff_comes_back_as_zero() {
    for hc in [0x0000u16, 0x0001, 0x1234, 0xfffe, 0xffff] {
        let mut before = ipv4_frame(&[], 17, b"abc");
        before[L3 + 10..L3 + 12].copy_from_slice(&hc.to_be_bytes());
        for w in FilterWidth::ALL {
            let mut f = before.clone();
            icarus::insert(&mut f, L3, &filter_of(w, 1)).unwrap();
            assert_eq!(
                icarus::strip(&mut f, L3),
                Ok(Stripped::Removed(w.ipv4_block_len()))
            );
            let want = if hc == 0xffff { 0 } else { hc };
            assert_eq!(
                u16::from_be_bytes([f[L3 + 10], f[L3 + 11]]),
                want,
                "{hc:#06x} {w:?}"
            );
            assert_eq!(f[..L3 + 10], before[..L3 + 10]);
            assert_eq!(f[L3 + 12..], before[L3 + 12..]);
        }
    }
}

#[test]
fn insert_ipv6_annotated() {
    let before = ipv6_frame(&[], 17, &[0xde, 0xad]);
    let mut f = before.clone();
    icarus::insert(&mut f, L3, &filter_of(FilterWidth::M64, 0)).unwrap();
    #[rustfmt::skip]
    let expected: [u8; 24] = [
        0x60, 0, 0, 0, // version, class, flow
        0x00, 0x1a, // payload length 26 = 16 (hop-by-hop) + 8 (UDP) + 2
        0x00, 64, // next header: hop-by-hop; hop limit
        // (addresses: 32 bytes, unchanged, not listed)
        0x11, 0x01, // hop-by-hop: next header UDP, 16 bytes
        0x01, 0x02, 0x00, 0x00, // PadN
        0x3e, 0x08, // icarus type, data length 8
        0x00, 0x25, 0x4a, 0x6f, 0x94, 0xb9, 0xde, 0x03, // filter
    ];
    assert_eq!(&f[L3..L3 + 8], &expected[..8]);
    assert_eq!(&f[L3 + 8..L3 + 40], &before[L3 + 8..L3 + 40]);
    assert_eq!(&f[L3 + 40..L3 + 56], &expected[8..]);
    assert_eq!(&f[L3 + 56..], &before[L3 + 40..]);
    check_l4(&f, L3).unwrap();
    same_flow(&before, &f);
}

#[test]
fn check_and_update_fixes_checksum_like_a_recompute() {
    // Our option at an odd offset: after a 3-byte option and a NOP.
    let mut opts = vec![0x9f, 0x03, 0x77, 0x01];
    let w = FilterWidth::M128;
    let mut o = vec![0u8; w.ipv4_option_len()];
    Ipv4Option::new_unchecked(&mut o[..]).emit(&filter_of(w, 3));
    opts.extend_from_slice(&o);
    opts.extend_from_slice(&[0x01, 0x00]); // NOP, EOL: 24 bytes
    for options in [opts, vec![]] {
        let mut f = ipv4_frame(&options, 6, b"hello");
        if options.is_empty() {
            icarus::insert(&mut f, L3, &filter_of(w, 3)).unwrap();
        }
        let params = FilterParams::new(w, 10).unwrap();
        for id in 0..50u64 {
            let loc = icarus::find(&f, L3).unwrap().unwrap();
            let before = loc.filter(&f).unwrap();
            let mask = node_mask(id, &params);
            let hop = icarus::check_and_update(&mut f, &loc, &mask).unwrap();
            let after = loc.filter(&f).unwrap();
            let mut expect = before;
            assert_eq!(expect.check_and_update(&mask), hop);
            assert_eq!(after, expect);
            assert_eq!(
                u16::from_be_bytes([f[L3 + 10], f[L3 + 11]]),
                ipv4_header_checksum(&f, L3),
                "incremental checksum differs from a recompute (option at {})",
                loc.option_offset - L3
            );
            check_l4(&f, L3).unwrap();
        }
    }
}

#[test]
fn loop_leaves_the_packet_alone() {
    let params = FilterParams::default();
    let mut f = ipv4_frame(&[], 17, b"x");
    insert_after_hops(&mut f, L3, &[1, 2, 3], &params).unwrap();
    let snapshot = f.clone();
    let loc = icarus::find(&f, L3).unwrap().unwrap();
    let hop = icarus::check_and_update(&mut f, &loc, &node_mask(2, &params)).unwrap();
    assert_eq!(hop, Hop::Loop);
    assert_eq!(f, snapshot);
    assert_eq!(loc.filter(&f), Some(filter_after_hops(&[1, 2, 3], &params)));
    // A mask of another width is refused.
    let other = node_mask(2, &FilterParams::new(FilterWidth::M64, 4).unwrap());
    assert_eq!(
        icarus::check_and_update(&mut f, &loc, &other),
        Err(IcarusError::WidthMismatch)
    );
}

#[test]
fn no_room_in_a_full_ipv4_header() {
    // 40 bytes of options (NOPs and a router alert): nothing fits.
    let mut opts = vec![0x94, 0x04, 0x00, 0x00];
    opts.resize(40, 0x01);
    let before = ipv4_frame(&opts, 17, b"abc");
    for w in FilterWidth::ALL {
        let mut f = before.clone();
        assert_eq!(
            icarus::insert(&mut f, L3, &Filter::empty(w)),
            Err(IcarusError::NoRoom)
        );
        assert_eq!(f, before);
    }
    // m = 256 (36 bytes) fits next to 4 bytes of options, not 8.
    let mut f = ipv4_frame(&[0x94, 0x04, 0x00, 0x00], 17, b"abc");
    icarus::insert(&mut f, L3, &Filter::empty(FilterWidth::M256)).unwrap();
    assert_eq!(f[L3] & 0x0f, 15);
    check_l4(&f, L3).unwrap();
    let before = ipv4_frame(&[0x01; 8], 17, b"abc");
    let mut f = before.clone();
    assert_eq!(
        icarus::insert(&mut f, L3, &Filter::empty(FilterWidth::M256)),
        Err(IcarusError::NoRoom)
    );
    assert_eq!(f, before);
}

#[test]
fn already_present_and_jumbogram() {
    let mut f = ipv6_frame(&[], 6, b"abc");
    icarus::insert(&mut f, L3, &Filter::empty(FilterWidth::M128)).unwrap();
    let snapshot = f.clone();
    assert_eq!(
        icarus::insert(&mut f, L3, &Filter::empty(FilterWidth::M128)),
        Err(IcarusError::AlreadyPresent)
    );
    assert_eq!(f, snapshot);

    // Payload length 0 and a jumbo payload option: not rewritten.
    let mut jumbo = ipv6_frame(&[(0, vec![0xc2, 0x04, 0x00, 0x01, 0x00, 0x00])], 17, b"abc");
    jumbo[L3 + 4] = 0;
    jumbo[L3 + 5] = 0;
    let snapshot = jumbo.clone();
    assert_eq!(
        icarus::insert(&mut jumbo, L3, &Filter::empty(FilterWidth::M128)),
        Err(IcarusError::Jumbogram)
    );
    assert_eq!(jumbo, snapshot);
}

#[test]
fn strip_foreign_placements() {
    let w = FilterWidth::M64;
    let mut opt = vec![0u8; w.ipv4_option_len()];
    Ipv4Option::new_unchecked(&mut opt[..]).emit(&filter_of(w, 9));
    // IPv4: after a router alert, no NOPs before it; two NOPs after.
    let mut opts = vec![0x94, 0x04, 0x00, 0x00];
    opts.extend_from_slice(&opt);
    opts.extend_from_slice(&[0x01, 0x01]);
    let mut f = ipv4_frame(&opts, 17, b"abc");
    assert_eq!(icarus::strip(&mut f, L3), Ok(Stripped::Removed(8)));
    check_l4(&f, L3).unwrap();
    assert_eq!(
        &f[L3 + 20..L3 + 28],
        &[0x94, 0x04, 0x00, 0x00, 0x01, 0x01, 0x01, 0x01]
    );
    assert_eq!(icarus::find(&f, L3), Ok(None));

    // IPv6: our option behind a router alert in an existing header.
    let mut body = vec![0x05, 0x02, 0x00, 0x00];
    let mut o6 = vec![0u8; w.ipv6_option_len()];
    Ipv6Option::new_unchecked(&mut o6[..]).emit(&filter_of(w, 9));
    body.extend_from_slice(&o6);
    body.extend_from_slice(&[0x00, 0x00]); // Pad1, Pad1
    body.extend_from_slice(&[0x01, 0x04, 0, 0, 0, 0]); // PadN to 24
    let mut f = ipv6_frame(&[(0, body)], 17, b"abc");
    let len = f.len();
    assert_eq!(icarus::strip(&mut f, L3), Ok(Stripped::Neutralised));
    assert_eq!(f.len(), len);
    assert_eq!(icarus::find(&f, L3), Ok(None));
    check_l4(&f, L3).unwrap();
    assert!(parse(LinkType::Ethernet, &f).is_ok());
}

/// IPv4 option lists that fit in `room` bytes: NOPs, router alerts, and
/// options of arbitrary type (not ours, not EOL/NOP) and data.
fn ipv4_options(room: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![
            Just(vec![0x01]),
            Just(vec![0x94, 0x04, 0x00, 0x00]),
            (2u8..0xff, prop::collection::vec(any::<u8>(), 0..6)).prop_map(|(t, d)| {
                let t = if t == 0x5e { 0x5f } else { t };
                let mut o = vec![t, (2 + d.len()) as u8];
                o.extend_from_slice(&d);
                o
            }),
        ],
        0..8,
    )
    .prop_map(move |parts| {
        let mut o: Vec<u8> = parts.concat();
        o.truncate(room);
        // Cut at an option boundary is not guaranteed: pad a cut option
        // out by making the list end with EOL-terminated padding instead.
        let mut i = 0;
        let mut ok = Vec::new();
        while i < o.len() {
            match o[i] {
                0x01 => {
                    ok.push(0x01);
                    i += 1;
                }
                _ => {
                    let l = usize::from(o.get(i + 1).copied().unwrap_or(0));
                    if l >= 2 && i + l <= o.len() {
                        ok.extend_from_slice(&o[i..i + l]);
                        i += l;
                    } else {
                        break;
                    }
                }
            }
        }
        while ok.len() & 3 != 0 {
            ok.push(0x00);
        }
        ok
    })
}

fn width() -> impl Strategy<Value = FilterWidth> {
    prop_oneof![
        Just(FilterWidth::M64),
        Just(FilterWidth::M128),
        Just(FilterWidth::M256)
    ]
}

/// IPv6 extension chains: nothing, a hop-by-hop header with some options,
/// and/or a destination-options header.
fn ipv6_exts() -> impl Strategy<Value = Vec<(u8, Vec<u8>)>> {
    (any::<bool>(), 0usize..3, any::<bool>()).prop_map(|(hbh, pads, dst)| {
        let mut v = Vec::new();
        if hbh {
            // Router alert + PadN, plus `pads` more 8-byte PadN runs.
            let mut body = vec![0x05, 0x02, 0x00, 0x00, 0x01, 0x00];
            for _ in 0..pads {
                body.extend_from_slice(&[0x01, 0x06, 0, 0, 0, 0, 0, 0]);
            }
            v.push((0, body));
        }
        if dst {
            v.push((60, vec![0x01, 0x04, 0, 0, 0, 0]));
        }
        v
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn ipv4_insert_then_strip_restores(
        options in ipv4_options(40),
        tcp in any::<bool>(),
        payload in prop::collection::vec(any::<u8>(), 0..64),
        w in width(),
        seed in any::<u8>(),
        trailer in prop::collection::vec(any::<u8>(), 0..3),
    ) {
        let proto = if tcp { 6 } else { 17 };
        let mut before = ipv4_frame(&options, proto, &payload);
        let ip_end = before.len();
        let filter = filter_of(w, seed);
        let mut f = before.clone();
        match icarus::insert(&mut f, L3, &filter) {
            Ok(loc) => {
                prop_assert_eq!(usize::from(f[L3] & 0x0f) * 4, 20 + options.len() + w.ipv4_block_len());
                check_l4(&f, L3).map_err(TestCaseError::fail)?;
                same_flow(&before, &f);
                prop_assert_eq!(icarus::find(&f, L3).unwrap(), Some(loc));
                prop_assert_eq!(loc.filter(&f), Some(filter));
                prop_assert_eq!(icarus::strip(&mut f, L3), Ok(Stripped::Removed(w.ipv4_block_len())));
                prop_assert_eq!(&f, &before);
            }
            Err(IcarusError::NoRoom) => {
                prop_assert!(20 + options.len() + w.ipv4_block_len() > 60);
                prop_assert_eq!(&f, &before);
            }
            Err(e) => prop_assert!(false, "unexpected {e}"),
        }
        // Ethernet padding after the datagram moves along and comes back.
        before.extend_from_slice(&trailer);
        let mut f = before.clone();
        if icarus::insert(&mut f, L3, &filter).is_ok() {
            prop_assert_eq!(&f[f.len() - trailer.len()..], &trailer[..]);
            icarus::strip(&mut f, L3).unwrap();
        }
        prop_assert_eq!(&f, &before);
        prop_assert_eq!(&f[..ip_end], &before[..ip_end]);
    }

    #[test]
    fn ipv6_insert_then_strip_restores(
        exts in ipv6_exts(),
        tcp in any::<bool>(),
        payload in prop::collection::vec(any::<u8>(), 0..64),
        w in width(),
        seed in any::<u8>(),
    ) {
        let proto = if tcp { 6 } else { 17 };
        let before = ipv6_frame(&exts, proto, &payload);
        let filter = filter_of(w, seed);
        let mut f = before.clone();
        let loc = icarus::insert(&mut f, L3, &filter).unwrap();
        prop_assert_eq!(f.len(), before.len() + w.ipv6_block_len());
        prop_assert_eq!(f[L3 + 6], 0, "hop-by-hop first");
        prop_assert_eq!((loc.filter_offset - L3) % 8, 0, "filter 8-byte aligned");
        check_l4(&f, L3).map_err(TestCaseError::fail)?;
        same_flow(&before, &f);
        prop_assert_eq!(icarus::find(&f, L3).unwrap(), Some(loc));
        prop_assert_eq!(loc.filter(&f), Some(filter));
        // A hop keeps everything valid too.
        let mask = node_mask(u64::from(seed), &FilterParams::new(w, 5).unwrap());
        icarus::check_and_update(&mut f, &loc, &mask).unwrap();
        check_l4(&f, L3).map_err(TestCaseError::fail)?;
        let mut expect = filter;
        expect.union_with(&mask);
        prop_assert_eq!(loc.filter(&f), Some(expect));
        prop_assert_eq!(icarus::strip(&mut f, L3), Ok(Stripped::Removed(w.ipv6_block_len())));
        prop_assert_eq!(&f, &before);
    }

    #[test]
    fn ipv4_hop_checksum_matches_recompute(
        options in ipv4_options(20),
        w in width(),
        seed in any::<u8>(),
        ids in prop::collection::vec(any::<u64>(), 1..12),
        k in 1usize..20,
    ) {
        let mut f = ipv4_frame(&options, 17, b"payload");
        if icarus::insert(&mut f, L3, &filter_of(w, seed)).is_err() {
            return Ok(());
        }
        let params = FilterParams::new(w, k).unwrap();
        for id in ids {
            let loc = icarus::find(&f, L3).unwrap().unwrap();
            icarus::check_and_update(&mut f, &loc, &node_mask(id, &params)).unwrap();
            prop_assert_eq!(
                u16::from_be_bytes([f[L3 + 10], f[L3 + 11]]),
                ipv4_header_checksum(&f, L3)
            );
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..120),
        l3 in 0usize..24,
        v6 in any::<bool>(),
        w in width(),
    ) {
        let mut bytes = bytes;
        if let Some(b) = bytes.get_mut(l3) {
            *b = (*b & 0x0f) | if v6 { 0x60 } else { 0x40 };
        }
        let _ = Ipv4Option::new_checked(&bytes[..]).map(|o| o.filter());
        let _ = Ipv6Option::new_checked(&bytes[..]).map(|o| o.filter());
        let mask = Filter::empty(w);
        if let Ok(Some(loc)) = icarus::find(&bytes, l3) {
            prop_assert!(loc.filter_offset + loc.width.bytes() <= bytes.len());
            let _ = icarus::check_and_update(&mut bytes, &loc, &Filter::empty(loc.width));
        }
        let mut v = bytes.clone();
        let _ = icarus::insert(&mut v, l3, &mask);
        let mut v = bytes.clone();
        let _ = icarus::strip(&mut v, l3);
    }

    #[test]
    fn arbitrary_options_never_panic(
        opts in prop::collection::vec(any::<u8>(), 0..=40),
        w in width(),
    ) {
        // A header with valid lengths and garbage options.
        let mut opts = opts;
        while opts.len() & 3 != 0 {
            opts.push(0);
        }
        let mut f = ipv4_frame(&opts, 17, b"abc");
        let _ = icarus::find(&f, L3);
        let _ = icarus::insert(&mut f, L3, &Filter::empty(w));
        let _ = icarus::strip(&mut f, L3);
    }
}
