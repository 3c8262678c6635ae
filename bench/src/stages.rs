//! `multicast/*` and `icarus/*`: the per-packet work of two dataplane
//! stages, batched.
//!
//! * `multicast/query/{64,8}`: [`MulticastStage::egress_batch`] on 64-packet
//!   batches: one [`kernels::bloom::PortFilter`] query per packet (hash the
//!   group key, derive the block and the `k` positions, AND one word-set per
//!   position), then the interface mask and the ingress exclusion. The stage
//!   is built from its own config (`expected_groups` 1024, rate 0.1%, sized
//!   by `Params::for_port_filter`: blocked, 32 Ki positions, `k = 3`) with
//!   64 or 8 interfaces, each a static member of about 1/16 of a universe
//!   of 4,096 groups (256 groups per interface). Three keys in four are
//!   groups of that universe (members somewhere), one in four is a group
//!   nobody joined.
//! * `icarus/check/{v4,v6}`: [`Icarus::check_and_update_batch`] on 64-packet
//!   batches of Ethernet + IPv4 (or IPv6) + UDP frames carrying the 128-bit
//!   option at its canonical place, each having gone through 0 to 12 other
//!   nodes; one frame in 16 has been through this node already (a loop).
//!   The update writes into the frames, so every timed pass starts from a
//!   pristine copy: the report restores the whole pool *outside* the timed
//!   section and times one pass over it (32 batches); criterion does the
//!   same with `iter_batched_ref` (the copy is its untimed setup).
//!
//! Inputs are generated from fixed seeds before any timing; the result of
//! every call is folded into the value handed back to the timer.

use std::hint::black_box;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Instant;

use criterion::{BatchSize, Criterion, Throughput};
use dataplane::pipeline::PortSet;
use dataplane::stage::icarus::{
    FilterParams, Icarus, IcarusConfig, LoopAction, Outcome, insert_after_hops,
};
use dataplane::stage::multicast::{GroupKey, MulticastConfig, MulticastStage, group_key_v4};
use dataplane::wire::build::{self, Addrs, IpHeader, PROTO_UDP};

use crate::measure::Figure;

/// Packets per batch.
pub const BATCH: usize = 64;
/// Batches in a multicast input set and in an icarus frame pool.
const BATCHES: usize = 32;
/// Groups that have members somewhere.
const UNIVERSE: u32 = 4096;
/// An interface joins a group of the universe with probability 1/16.
const JOIN_ONE_IN: u64 = 16;
/// The seed of every input.
const SEED: u64 = 0x5eed_57a9_e5be_4c11;
/// Bytes per frame buffer (the IPv6 frame with the option is 104).
const FRAME: usize = 128;
/// The IP header offset (after Ethernet).
const L3: usize = 14;
/// This node's id (every other node on the paths has another).
const NODE: u64 = 0x1ca7_05ee_d000_0001;

/// SplitMix64 step: the deterministic source of every input.
fn mix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Group `i` of the universe (`i < 2^23`): `239.x.y.z`.
fn group(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(0xef00_0000 | (i & 0x00ff_ffff))
}

/// The multicast inputs for `ports` interfaces: the stage and
/// `BATCHES` batches of group keys with their ingress ports.
#[derive(Debug)]
pub struct MulticastInputs {
    /// The stage, memberships installed and published.
    pub stage: MulticastStage,
    /// `BATCHES * BATCH` group keys.
    pub keys: Vec<GroupKey>,
    /// The ingress port of each key.
    pub ingress: Vec<u8>,
}

impl MulticastInputs {
    /// Builds the stage and the keys (deterministic).
    pub fn new(ports: usize) -> MulticastInputs {
        let mut cfg = MulticastConfig::with_ports(ports);
        cfg.seed = Some(SEED);
        let mut stage = MulticastStage::new(&cfg).expect("valid multicast config");
        let mut s = SEED ^ ports as u64;
        for g in 0..UNIVERSE {
            for p in 0..ports {
                if mix(&mut s).is_multiple_of(JOIN_ONE_IN) {
                    stage.control_mut().add_static(p, group_key_v4(group(g)));
                }
            }
        }
        let n = BATCHES * BATCH;
        let mut keys = Vec::with_capacity(n);
        let mut ingress = Vec::with_capacity(n);
        for _ in 0..n {
            let r = mix(&mut s);
            let g = if r % 4 == 3 {
                // Nobody joined these: 239.128.0.0 upwards.
                group(0x0080_0000 | (r >> 40) as u32 & 0x7f_ffff)
            } else {
                group((r >> 32) as u32 % UNIVERSE)
            };
            keys.push(group_key_v4(g));
            ingress.push(((r >> 8) % ports as u64) as u8);
        }
        let mut out = [PortSet::EMPTY; BATCH];
        // Publish the memberships (egress_batch syncs first).
        stage.egress_batch(&keys[..1], &ingress[..1], &mut out);
        MulticastInputs {
            stage,
            keys,
            ingress,
        }
    }

    /// Batch `i` (mod `BATCHES`) through the stage; returns the XOR of
    /// the egress sets, so the result is used (a fold of one instruction
    /// per packet: a popcount would be a dozen without the `popcnt`
    /// target feature).
    #[inline(never)]
    pub fn run(&mut self, i: usize, out: &mut [PortSet; BATCH]) -> u64 {
        let at = (i % BATCHES) * BATCH;
        self.stage.egress_batch(
            black_box(&self.keys[at..at + BATCH]),
            black_box(&self.ingress[at..at + BATCH]),
            out,
        );
        out.iter().fold(0, |a, s| a ^ s.mask())
    }
}

/// Ethernet + IPv4 + UDP (`payload` zero bytes), every checksum right,
/// padded to [`FRAME`] bytes.
fn ipv4_udp(payload: usize, id: u16) -> Vec<u8> {
    let ip = IpHeader {
        ident: id,
        dont_fragment: true,
        ..IpHeader::v4([192, 0, 2, 1], [198, 51, 100, 7], PROTO_UDP)
    };
    // UDP checksum 0: none (IPv4).
    build::udp_frame(MAC_DST, MAC_SRC, &ip, 1234, 53, &vec![0; payload])
}

/// Ethernet + IPv6 + UDP (`payload` zero bytes), flow label `flow`.
fn ipv6_udp(payload: usize, flow: u32) -> Vec<u8> {
    let ip = IpHeader::new(
        Addrs::V6 {
            src: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1),
            dst: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2),
        },
        PROTO_UDP,
    );
    let mut f = build::udp_frame(MAC_DST, MAC_SRC, &ip, 1234, 53, &vec![0; payload]);
    // The flow label, which the builder leaves zero.
    f[14..18].copy_from_slice(&(0x6000_0000 | (flow & 0xf_ffff)).to_be_bytes());
    f
}

/// The test frames' Ethernet addresses.
const MAC_DST: [u8; 6] = [0x02, 0, 0, 0, 0, 1];
const MAC_SRC: [u8; 6] = [0x02, 0, 0, 0, 0, 2];

/// The icarus inputs: this node and a pool of `BATCHES` batches of
/// frames, with a pristine copy to restore from.
#[derive(Debug)]
pub struct IcarusInputs {
    /// This node (loops are counted and forwarded, so no frame is lost).
    pub node: Icarus,
    /// The frames, `BATCHES * BATCH` of them.
    pub frames: Vec<[u8; FRAME]>,
    /// The frames as generated.
    pub pristine: Vec<[u8; FRAME]>,
    /// The IP header offset of every frame of a batch.
    pub l3: [usize; BATCH],
}

impl IcarusInputs {
    /// IPv4 (`v6 == false`) or IPv6 frames with the default 128-bit option.
    pub fn new(v6: bool) -> IcarusInputs {
        let params = FilterParams::default();
        let mut cfg = IcarusConfig::new(NODE);
        cfg.on_loop = LoopAction::Forward;
        let node = Icarus::new(cfg);
        let mut s = SEED ^ u64::from(v6);
        let mut frames = Vec::with_capacity(BATCHES * BATCH);
        for i in 0..BATCHES * BATCH {
            let r = mix(&mut s);
            let mut f = if v6 {
                ipv6_udp(18, r as u32)
            } else {
                ipv4_udp(18, r as u16)
            };
            // 0 to 12 other nodes before this one; one path in 16 went
            // through this node already.
            let hops = (r >> 32) as usize % 13;
            let mut path: Vec<u64> = (0..hops).map(|_| mix(&mut s) | 1 << 63).collect();
            if i % 16 == 5 {
                path.push(NODE);
            }
            insert_after_hops(&mut f, L3, &path, &params).expect("room for the option");
            let mut b = [0u8; FRAME];
            b[..f.len()].copy_from_slice(&f);
            frames.push(b);
        }
        IcarusInputs {
            node,
            pristine: frames.clone(),
            frames,
            l3: [L3; BATCH],
        }
    }

    /// Puts every frame back as generated (not timed).
    pub fn restore(&mut self) {
        self.frames.copy_from_slice(&self.pristine);
    }

    /// One pass over the pool, batch by batch; returns the number of hops
    /// that marked.
    #[inline(never)]
    pub fn pass(&mut self, out: &mut [Outcome; BATCH]) -> usize {
        let mut marked = 0;
        for batch in self.frames.chunks_exact_mut(BATCH) {
            self.node
                .check_and_update_batch(black_box(batch), &self.l3, out);
            marked += out.iter().filter(|&&o| o == Outcome::Marked).count();
        }
        marked
    }

    /// Packets per [`pass`](Self::pass).
    pub fn packets(&self) -> usize {
        self.frames.len()
    }
}

/// Median ns per packet of an icarus pass over a freshly restored pool,
/// over `samples` passes; the restore is outside the timed section.
fn icarus_figure(name: &str, v6: bool, samples: usize) -> Figure {
    let mut inp = IcarusInputs::new(v6);
    let mut out = [Outcome::NoOption; BATCH];
    let mut v = Vec::with_capacity(samples);
    for _ in 0..samples {
        inp.restore();
        let t = Instant::now();
        let marked = inp.pass(&mut out);
        let ns = t.elapsed().as_secs_f64() * 1e9;
        black_box(marked);
        v.push(ns / inp.packets() as f64);
    }
    v.sort_by(f64::total_cmp);
    let ns = v[v.len() / 2];
    Figure {
        name: name.into(),
        ns_per_item: ns,
        mitems_per_s: 1e3 / ns,
    }
}

/// Criterion registrations: `multicast/query/{64,8}`, `icarus/check/{v4,v6}`.
pub fn register(c: &mut Criterion) {
    let mut g = c.benchmark_group("multicast/query");
    g.throughput(Throughput::Elements(BATCH as u64));
    for ports in [64, 8] {
        let mut inp = MulticastInputs::new(ports);
        let mut out = [PortSet::EMPTY; BATCH];
        let mut i = 0usize;
        g.bench_function(ports.to_string(), |b| {
            b.iter(|| {
                i = i.wrapping_add(1);
                inp.run(i, &mut out)
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("icarus/check");
    g.throughput(Throughput::Elements(BATCH as u64));
    for (name, v6) in [("v4", false), ("v6", true)] {
        let mut inp = IcarusInputs::new(v6);
        let pristine: Vec<[u8; FRAME]> = inp.pristine[..BATCH].to_vec();
        let mut out = [Outcome::NoOption; BATCH];
        let l3 = inp.l3;
        g.bench_function(name, |b| {
            b.iter_batched_ref(
                || pristine.clone(),
                |frames| {
                    inp.node.check_and_update_batch(
                        black_box(frames.as_mut_slice()),
                        &l3,
                        &mut out,
                    );
                    out[0]
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

/// The headline `stages` figures for the report binary (same names as the
/// criterion benches).
pub fn report() -> Vec<Figure> {
    let mut figs = Vec::new();
    for ports in [64, 8] {
        let mut inp = MulticastInputs::new(ports);
        let mut out = [PortSet::EMPTY; BATCH];
        let mut i = 0usize;
        figs.push(crate::measure::figure(
            format!("multicast/query/{ports}"),
            BATCH,
            || {
                i = i.wrapping_add(1);
                inp.run(i, &mut out)
            },
        ));
    }
    figs.push(icarus_figure("icarus/check/v4", false, 2001));
    figs.push(icarus_figure("icarus/check/v6", true, 2001));
    figs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_exercise_both_outcomes() {
        let mut m = MulticastInputs::new(64);
        let mut out = [PortSet::EMPTY; BATCH];
        let mut copies = 0;
        let mut none = 0;
        for i in 0..BATCHES {
            m.run(i, &mut out);
            copies += out.iter().map(|s| s.len()).sum::<u32>();
            none += out.iter().filter(|s| s.is_empty()).count();
        }
        // About 1/4 non-members, and 64 * 3/4 / 16 = 3 copies per member.
        assert!(
            none > BATCHES * BATCH / 8 && none < BATCHES * BATCH / 2,
            "{none}"
        );
        assert!(copies as usize > BATCHES * BATCH, "{copies}");
        for v6 in [false, true] {
            let mut inp = IcarusInputs::new(v6);
            let mut out = [Outcome::NoOption; BATCH];
            let marked = inp.pass(&mut out);
            assert!(marked > inp.packets() / 2, "{marked}");
            assert!(marked < inp.packets(), "{marked}");
            inp.restore();
            assert_eq!(inp.pass(&mut out), marked);
        }
    }
}
