//! `icarus`: a control byte, then a frame, through the Icarus wire
//! operations (`dataplane::wire::icarus`: find, check-and-update, insert,
//! strip) and a node (`dataplane::stage::icarus::Icarus`: ingress on an
//! insertion edge, egress on a stripping edge, the batch hop).
//!
//! Control byte: bits 0-1 the filter width (64, 128, 256, 128), bits 2-3
//! the link type, bits 4-7 the node and domain seed. The operations run at
//! the parsed IP header's offset, and at offset `seed` (0..16) whatever is
//! there. What they promise, checked:
//!
//! * a found option lies within the frame;
//! * the canonical fast path gives (and writes) what find then
//!   check-and-update give, and writes nothing when it declines;
//! * a hop that marks leaves a filter holding the mask, and the next hop
//!   finds a loop; a loop or an error writes nothing; a correct IPv4
//!   header checksum stays correct;
//! * a refused insert leaves the frame alone; an insert is found where it
//!   says, carries the filter, takes the canonical path, and a strip gives
//!   back the original frame byte for byte (also after a hop when the
//!   IPv4 checksum was correct);
//! * the node counts every packet once, and its batch hop equals its
//!   one-by-one hop.

use dataplane::stage::icarus::{
    FilterParams, Icarus, IcarusConfig, Outcome, default_k, filter_after_hops, node_mask,
};
use dataplane::wire::icarus::{self, Filter, FilterWidth, Hop, Stripped};
use dataplane::wire::{IpVersion, parse};

use super::link_of;

/// The IPv4 header at `l3`, when there is a whole one: whether its
/// checksum verifies.
fn ipv4_checksum_ok(frame: &[u8], l3: usize) -> Option<bool> {
    let first = *frame.get(l3)?;
    let hl = usize::from(first & 0x0f) * 4;
    if first >> 4 != 4 || hl < 20 {
        return None;
    }
    let header = frame.get(l3..l3 + hl)?;
    let mut sum: u32 = header
        .chunks_exact(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    Some(sum == 0xffff)
}

/// `after` is `frame` restored: byte for byte, but that an IPv4 header
/// checksum of `ffff` may come back as `0000`, the same one's-complement
/// value (an incremental update yields one form of zero; see
/// `wire::icarus`'s module docs).
fn restored(after: &[u8], frame: &[u8], l3: usize) -> bool {
    after == frame
        || (frame.get(l3 + 10..l3 + 12) == Some(&[0xff, 0xff])
            && after.get(l3 + 10..l3 + 12) == Some(&[0, 0])
            && equal_but_checksum(after, frame, l3))
}

/// `a` and `b` are equal but for the IPv4 header checksum at `l3`.
fn equal_but_checksum(a: &[u8], b: &[u8], l3: usize) -> bool {
    let at = l3 + 10..l3 + 12;
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .enumerate()
            .all(|(i, (x, y))| x == y || at.contains(&i))
}

/// The wire operations at one offset.
fn at_offset(frame: &[u8], l3: usize, mask: &Filter, filter: &Filter) {
    let found = icarus::find(frame, l3);
    let checksum_ok = ipv4_checksum_ok(frame, l3);
    if let Ok(Some(loc)) = found {
        assert_eq!(loc.l3_offset, l3);
        assert!(loc.option_offset < loc.filter_offset);
        assert!(loc.filter_offset + loc.width.bytes() <= frame.len());
        assert!(loc.filter(frame).is_some());
    }

    // The canonical fast path against find + check-and-update.
    let mut fast = frame.to_vec();
    match icarus::check_and_update_canonical(&mut fast, l3, mask) {
        Some(hop) => {
            let loc = found
                .expect("the canonical path found an option find refuses")
                .expect("the canonical path found an option find does not");
            let mut general = frame.to_vec();
            assert_eq!(icarus::check_and_update(&mut general, &loc, mask), Ok(hop));
            assert_eq!(fast, general, "the fast path wrote otherwise");
        }
        None => assert_eq!(fast, frame, "a declined fast path wrote"),
    }

    // The general hop.
    if let Ok(Some(loc)) = found {
        let mut f = frame.to_vec();
        match icarus::check_and_update(&mut f, &loc, mask) {
            Ok(Hop::Marked) => {
                let now = loc.filter(&f).expect("the option is still there");
                assert!(now.contains_all(mask));
                assert_eq!(icarus::find(&f, l3), Ok(Some(loc)));
                if checksum_ok == Some(true) {
                    assert_eq!(ipv4_checksum_ok(&f, l3), Some(true), "checksum broken");
                }
                assert_eq!(icarus::check_and_update(&mut f, &loc, mask), Ok(Hop::Loop));
            }
            Ok(Hop::Loop) | Err(_) => assert_eq!(f, frame, "a loop or an error wrote"),
        }
    }

    // Insert, then strip.
    let mut f = frame.to_vec();
    match icarus::insert(&mut f, l3, filter) {
        Ok(loc) => {
            let w = filter.width();
            let block = match loc.version {
                IpVersion::V4 => w.ipv4_block_len(),
                IpVersion::V6 => w.ipv6_block_len(),
            };
            assert_eq!(f.len(), frame.len() + block);
            assert_eq!(icarus::find(&f, l3), Ok(Some(loc)));
            assert_eq!(loc.filter(&f), Some(*filter));
            if checksum_ok == Some(true) {
                assert_eq!(ipv4_checksum_ok(&f, l3), Some(true), "checksum broken");
            }
            let mut hopped = f.clone();
            assert_eq!(icarus::strip(&mut f, l3), Ok(Stripped::Removed(block)));
            assert!(
                restored(&f, frame, l3),
                "insert then strip changed the frame"
            );

            let hop = icarus::check_and_update_canonical(&mut hopped, l3, mask);
            assert!(hop.is_some(), "an inserted option is not canonical");
            assert_eq!(icarus::strip(&mut hopped, l3), Ok(Stripped::Removed(block)));
            if checksum_ok == Some(true) || loc.version == IpVersion::V6 {
                assert!(
                    restored(&hopped, frame, l3),
                    "insert, hop, strip changed the frame"
                );
            } else {
                assert!(equal_but_checksum(&hopped, frame, l3));
            }
        }
        Err(_) => assert_eq!(f, frame, "a refused insert wrote"),
    }

    // Strip alone.
    let mut f = frame.to_vec();
    match icarus::strip(&mut f, l3) {
        Ok(Stripped::Removed(n)) => assert_eq!(f.len() + n, frame.len()),
        Ok(Stripped::Neutralised) => assert_eq!(f.len(), frame.len()),
        Ok(Stripped::Absent) | Err(_) => assert_eq!(f, frame, "nothing stripped, yet written"),
    }
}

/// A node at one offset: ingress on an insertion edge (port 0) then egress
/// on a stripping edge (port 1); the plain hop one by one and in a batch.
fn node(frame: &[u8], l3: usize, params: FilterParams, id: u64) {
    let cfg = IcarusConfig {
        params,
        ..IcarusConfig::new(id).insert_on(0).strip_on(1)
    };
    let checksum_ok = ipv4_checksum_ok(frame, l3);
    let mut edge = Icarus::new(cfg);
    let mut f = frame.to_vec();
    let o = edge.ingress(&mut f, l3, 0);
    assert_eq!(edge.counters().seen(), 1);
    if edge.counters().inserted == 1 {
        assert!(matches!(o, Outcome::Marked | Outcome::Loop), "{o:?}");
        assert!(
            edge.egress(&mut f, l3, 1),
            "the inserted option is not stripped"
        );
        assert_eq!(edge.counters().stripped, 1);
        if checksum_ok == Some(true) || frame[l3] >> 4 == 6 {
            assert!(
                restored(&f, frame, l3),
                "ingress then egress changed the frame"
            );
        } else {
            assert!(equal_but_checksum(&f, frame, l3));
        }
    }

    let mut one = Icarus::new(cfg);
    let mut batch = Icarus::new(cfg);
    let mut a = frame.to_vec();
    let want = one.hop(&mut a, l3);
    let mut frames = [frame.to_vec()];
    let mut got = [Outcome::NoOption];
    batch.check_and_update_batch(&mut frames, &[l3], &mut got);
    assert_eq!(got[0], want);
    assert_eq!(frames[0], a);
    assert_eq!(one.counters(), batch.counters());
}

/// Checks one input (see the module docs).
pub fn check(data: &[u8]) {
    let Some((&c, frame)) = data.split_first() else {
        return;
    };
    let width = match c & 3 {
        0 => FilterWidth::M64,
        2 => FilterWidth::M256,
        _ => FilterWidth::M128,
    };
    let seed = c >> 4;
    let params = FilterParams::new(width, default_k(width))
        .expect("default k fits")
        .with_seed(u64::from(seed));
    let id = u64::from(seed) + 1;
    let mask = node_mask(id, &params);
    let filter = filter_after_hops(&[id + 1, id + 2], &params);
    let parsed = parse(link_of(c >> 2), frame)
        .ok()
        .filter(|p| p.is_ip())
        .map(|p| p.l3_offset);
    for l3 in parsed.into_iter().chain([usize::from(seed)]) {
        at_offset(frame, l3, &mask, &filter);
        if l3 < frame.len() {
            node(frame, l3, params, id);
        }
    }
}
