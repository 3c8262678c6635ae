//! The router's chain defers an insertion edge's Icarus option to the
//! copies that keep it (`stage::icarus`, "In the router's chain"). What
//! leaves must be what inserting at ingress gives: each copy's bytes and
//! wire length, each verdict and every Icarus counter, against the node
//! alone ([`Icarus::ingress`], then [`Icarus::egress`] on the copy leaving
//! by the stripping port), on IPv4 and IPv6 packets with and without
//! options, packets that already carry a filter (some on a loop), headers
//! with no room, and frames a capture cut short; through a port without a
//! queue and through an SFB queue.

mod icarus_common;

use dataplane::chain::Chain;
use dataplane::clock::Timestamp;
use dataplane::config::RouterConfig;
use dataplane::io::memory::MemoryPorts;
use dataplane::pipeline::{Batch, Verdict};
use dataplane::stage::icarus::{FilterParams, Icarus, insert_after_hops};
use dataplane::wire::LinkType;
use icarus_common::*;
use proptest::prelude::*;

const L3: usize = 14;

/// Ports a (inserts), b (strips) and c (keeps), every packet from a wired
/// to both b and c; c behind an SFB queue when `queued`.
fn config(queued: bool) -> RouterConfig {
    let queue = if queued {
        "[interfaces.egress]\nrate_bps = 10_000_000_000\nburst_bytes = 1_000_000\nlimit = 1000\n\
         [interfaces.sfb]\nlimit = 1000\nseed = 3\n"
    } else {
        ""
    };
    let text = format!(
        "[[interfaces]]\nname = \"a\"\n\n[[interfaces]]\nname = \"b\"\n\n\
         [[interfaces]]\nname = \"c\"\n{queue}\n\
         [[wires]]\nfrom = \"a\"\nto = \"b\"\n\n[[wires]]\nfrom = \"a\"\nto = \"c\"\n\n\
         [icarus]\nnode_id = 7\nfilter_bits = 128\ninsert_on = [\"a\"]\nstrip_on = [\"b\"]\n"
    );
    RouterConfig::from_toml_str(&text, "icarus_edges").unwrap()
}

/// A frame of one of the kinds the module docs name.
fn frame(kind: u8, payload: &[u8], hops: &[u64]) -> Vec<u8> {
    let alert4 = [0x94, 0x04, 0, 0];
    let alert6 = (0u8, vec![0x05, 0x02, 0, 0, 0x01, 0x00]);
    let mut f = match kind % 6 {
        0 => ipv4_frame(&[], 17, payload),
        1 => ipv4_frame(&alert4, 6, payload),
        // 36 option bytes: no room for the 20-byte block.
        2 => ipv4_frame(&[1; 36], 17, payload),
        3 => ipv6_frame(&[], 17, payload),
        4 => ipv6_frame(&[alert6], 6, payload),
        _ => ipv6_frame(&[(60, vec![0x01, 0x04, 0, 0, 0, 0])], 17, payload),
    };
    if !hops.is_empty() {
        // Arrived from inside the domain; no room is no option.
        let _ = insert_after_hops(&mut f, L3, hops, &FilterParams::default());
    }
    f
}

fn run(queued: bool, frames: &[(Vec<u8>, u32)]) -> Result<(), TestCaseError> {
    let cfg = config(queued);
    let mut chain = Chain::build(&cfg).unwrap();
    let mut node = Icarus::new(cfg.icarus_config().unwrap());
    let mut tx = MemoryPorts::new(3).keep_sent(true);
    let t = Timestamp::from_nanos(1_000);
    let mut batch = Batch::new();
    let mut want = Vec::new();
    for (f, cut) in frames {
        let orig = f.len() as u32 + cut;
        batch.push_from(t, orig, LinkType::Ethernet, 0, f);
        let mut g = f.clone();
        let o = node.ingress(&mut g, L3, 0);
        let keep = g.clone();
        if !node.drops(o) {
            node.egress(&mut g, L3, 1);
        }
        want.push((node.drops(o), g, keep, *cut));
    }
    chain.process(&mut batch, t, &mut tx);
    chain.egress_mut().drain_all(&mut tx);
    let sent = tx.take_sent();
    let (mut to_b, mut to_c) = (
        sent.iter().filter(|s| s.port == 1),
        sent.iter().filter(|s| s.port == 2),
    );
    for (i, (p, (dropped, b, c, cut))) in batch.packets().iter().zip(&want).enumerate() {
        if *dropped {
            prop_assert!(matches!(p.verdict, Verdict::Drop(_)), "packet {i}");
            continue;
        }
        prop_assert_eq!(p.verdict.ports().mask(), 0b110, "packet {}", i);
        let (sb, sc) = (to_b.next().unwrap(), to_c.next().unwrap());
        prop_assert_eq!(&sb.frame, b, "packet {} to the stripping port", i);
        prop_assert_eq!(&sc.frame, c, "packet {} to the port that keeps it", i);
        prop_assert_eq!(sb.wire_len, b.len() as u32 + cut);
        prop_assert_eq!(sc.wire_len, c.len() as u32 + cut);
    }
    prop_assert!(to_b.next().is_none() && to_c.next().is_none());
    let mine = chain.icarus().unwrap().counters();
    let theirs = node.counters();
    let stripped: u64 = chain.egress().counters().map(|c| c.stripped).sum();
    prop_assert_eq!(stripped, theirs.stripped);
    let strip_free = |c: &dataplane::stage::icarus::IcarusCounters| {
        let mut c = *c;
        c.stripped = 0;
        c
    };
    prop_assert_eq!(strip_free(mine), strip_free(theirs));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn deferred_insertion_sends_what_inserting_at_ingress_sends(
        frames in prop::collection::vec(
            (
                any::<u8>(),
                prop::collection::vec(any::<u8>(), 0..64),
                prop::collection::vec(prop_oneof![Just(7u64), 1u64..6], 0..4),
                prop_oneof![Just(0u32), Just(100)],
            ),
            1..32,
        ),
        queued in any::<bool>(),
    ) {
        let frames: Vec<(Vec<u8>, u32)> = frames
            .iter()
            .map(|(kind, payload, hops, cut)| (frame(*kind, payload, hops), *cut))
            .collect();
        run(queued, &frames)?;
    }
}
