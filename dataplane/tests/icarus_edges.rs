//! The router's chain defers an insertion edge's Icarus option to the
//! copies that keep it (`stage::icarus`, "In the router's chain"). What
//! leaves must be what inserting at ingress gives: each copy's bytes and
//! wire length, each verdict and every Icarus counter, against the node
//! alone ([`Icarus::ingress`], then [`Icarus::egress`] on the copy leaving
//! by the stripping port), on IPv4 and IPv6 packets with and without
//! options, packets that already carry a filter (some on a loop), headers
//! with no room, and frames a capture cut short; through a port without a
//! queue and through an SFB queue. Frames arriving on a port that is not
//! an edge take the hop rule alone (a header without options is counted
//! as without option from the parse), checked the same way.

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
/// to both b and c, every packet from c to b; c behind an SFB queue when
/// `queued`.
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
         [[wires]]\nfrom = \"c\"\nto = \"b\"\n\n\
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

/// A frame's expected copies: (port, bytes), in port order.
type Copies = Vec<(u8, Vec<u8>)>;

fn run(queued: bool, frames: &[(Vec<u8>, u32, bool)]) -> Result<(), TestCaseError> {
    let cfg = config(queued);
    let mut chain = Chain::build(&cfg).unwrap();
    let mut node = Icarus::new(cfg.icarus_config().unwrap());
    let mut tx = MemoryPorts::new(3).keep_sent(true);
    let t = Timestamp::from_nanos(1_000);
    let mut batch = Batch::new();
    let mut want: Vec<Option<Copies>> = Vec::new();
    for (f, cut, from_c) in frames {
        let (ingress, ports) = if *from_c {
            (2, &[1][..])
        } else {
            (0, &[1, 2][..])
        };
        let orig = f.len() as u32 + cut;
        batch.push_from(t, orig, LinkType::Ethernet, ingress, f);
        let mut g = f.clone();
        let o = node.ingress(&mut g, L3, ingress);
        if node.drops(o) {
            want.push(None);
            continue;
        }
        let copies = ports
            .iter()
            .map(|&port| {
                let mut copy = g.clone();
                node.egress(&mut copy, L3, port);
                (port, copy)
            })
            .collect();
        want.push(Some(copies));
    }
    chain.process(&mut batch, t, &mut tx);
    chain.egress_mut().drain_all(&mut tx);
    let sent = tx.take_sent();
    let mut out: Vec<_> = (0..3u8)
        .map(|port| sent.iter().filter(move |s| s.port == port))
        .collect();
    for (i, (p, want)) in batch.packets().iter().zip(&want).enumerate() {
        let Some(copies) = want else {
            prop_assert!(matches!(p.verdict, Verdict::Drop(_)), "packet {}", i);
            continue;
        };
        let mask = copies.iter().fold(0u64, |m, (port, _)| m | 1 << port);
        prop_assert_eq!(p.verdict.ports().mask(), mask, "packet {}", i);
        let cut = frames[i].1;
        for (port, bytes) in copies {
            let s = out[usize::from(*port)].next().unwrap();
            prop_assert_eq!(&s.frame, bytes, "packet {} to port {}", i, port);
            prop_assert_eq!(s.wire_len, bytes.len() as u32 + cut);
        }
    }
    for o in &mut out {
        prop_assert!(o.next().is_none());
    }
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
                any::<bool>(),
            ),
            1..32,
        ),
        queued in any::<bool>(),
    ) {
        let frames: Vec<(Vec<u8>, u32, bool)> = frames
            .iter()
            .map(|(kind, payload, hops, cut, from_c)| (frame(*kind, payload, hops), *cut, *from_c))
            .collect();
        run(queued, &frames)?;
    }
}
