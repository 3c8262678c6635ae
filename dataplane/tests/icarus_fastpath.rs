//! The canonical fast path of the hop rule against the general one: for any
//! frame (options inserted canonically, then possibly damaged or cut short)
//! [`icarus::check_and_update_canonical`] either declines and leaves the
//! frame alone, or gives and writes exactly what [`icarus::find`] then
//! [`icarus::check_and_update`] give and write. And the batched hop
//! ([`Icarus::check_and_update_batch`]) equals the per-packet one, counters
//! included.

mod icarus_common;

use dataplane::stage::icarus::{
    FilterParams, Icarus, IcarusConfig, LoopAction, Outcome, filter_after_hops, node_mask,
};
use dataplane::wire::icarus::{self, Filter, FilterWidth, Hop};
use icarus_common::*;
use proptest::prelude::*;

const L3: usize = 14;

fn width() -> impl Strategy<Value = FilterWidth> {
    prop_oneof![
        Just(FilterWidth::M64),
        Just(FilterWidth::M128),
        Just(FilterWidth::M256)
    ]
}

/// A frame with the option at its canonical place (IPv4, IPv6 without a
/// hop-by-hop header, IPv6 with one), carrying the filter of `hops`.
fn frame(kind: u8, w: FilterWidth, hops: &[u64], k: usize) -> Vec<u8> {
    let mut f = match kind % 3 {
        0 => ipv4_frame(&[], 17, b"payload"),
        1 => ipv6_frame(&[], 17, b"payload"),
        _ => ipv6_frame(&[(0, vec![0x05, 0x02, 0x00, 0x00, 0x01, 0x00])], 6, b"xy"),
    };
    let params = FilterParams::new(w, k).unwrap();
    icarus::insert(&mut f, L3, &filter_after_hops(hops, &params)).unwrap();
    f
}

/// What the general path does to `f` with `mask`: the outcome, or `None`
/// when it finds no option or fails.
fn general(f: &mut [u8], mask: &Filter) -> Option<Hop> {
    let loc = icarus::find(f, L3).ok()??;
    icarus::check_and_update(f, &loc, mask).ok()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn fast_path_is_the_general_path_or_declines(
        kind in any::<u8>(),
        w in width(),
        mask_w in width(),
        hops in prop::collection::vec(any::<u64>(), 0..14),
        node in any::<u64>(),
        revisit in any::<bool>(),
        k in 1usize..20,
        damage in prop::collection::vec((0usize..100, any::<u8>()), 0..3),
        cut in prop::option::of(0usize..110),
    ) {
        let mut hops = hops;
        if revisit {
            hops.push(node);
        }
        let mut f = frame(kind, w, &hops, k);
        for (at, b) in damage {
            if let Some(x) = f.get_mut(L3 + at) {
                *x = b;
            }
        }
        if let Some(c) = cut {
            f.truncate(L3 + c);
        }
        let mask = node_mask(node, &FilterParams::new(mask_w, k).unwrap());
        let mut fast = f.clone();
        match icarus::check_and_update_canonical(&mut fast, L3, &mask) {
            None => prop_assert_eq!(&fast, &f),
            Some(hop) => {
                let mut slow = f.clone();
                prop_assert_eq!(general(&mut slow, &mask), Some(hop));
                prop_assert_eq!(&fast, &slow);
                // A right checksum stays right (a damaged one stays wrong
                // by the same amount).
                if f[L3] >> 4 == 4 && hop == Hop::Marked && ipv4_header_ok(&f, L3) {
                    prop_assert_eq!(
                        u16::from_be_bytes([fast[L3 + 10], fast[L3 + 11]]),
                        ipv4_header_checksum(&fast, L3)
                    );
                }
            }
        }
    }

    #[test]
    fn batch_equals_per_packet_hops(
        frames in prop::collection::vec(
            (any::<u8>(), width(), prop::collection::vec(any::<u64>(), 0..10),
             any::<bool>(), prop::option::of((0usize..60, any::<u8>()))),
            0..70,
        ),
        w in width(),
    ) {
        let node = 0x1ca7_05ee_d000_0001;
        let mut cfg = IcarusConfig::new(node);
        cfg.params = FilterParams::new(w, 6).unwrap();
        cfg.on_loop = LoopAction::Forward;
        let mut frames: Vec<Vec<u8>> = frames
            .into_iter()
            .map(|(kind, fw, mut hops, revisit, damage)| {
                if revisit {
                    hops.push(node);
                }
                let mut f = frame(kind, fw, &hops, 6);
                if let Some((at, b)) = damage
                    && let Some(x) = f.get_mut(L3 + at) {
                        *x = b;
                    }
                f
            })
            .collect();
        let mut one = Icarus::new(cfg);
        let mut each = frames.clone();
        let want: Vec<Outcome> = each.iter_mut().map(|f| one.hop(f, L3)).collect();
        let mut batched = Icarus::new(cfg);
        let l3 = vec![L3; frames.len()];
        let mut got = vec![Outcome::NoOption; frames.len()];
        batched.check_and_update_batch(&mut frames, &l3, &mut got);
        prop_assert_eq!(got, want);
        prop_assert_eq!(frames, each);
        prop_assert_eq!(batched.counters(), one.counters());
    }
}
