//! `synth --kind router`: the built-in router's workload. Determinism, the
//! pcapng read back (interfaces, counts, times), the truth against itself
//! and against the frames (shares and offered load within the bounds the
//! module docs give, Icarus verdicts by an independent subset test,
//! multicast egress sets, epochs), every frame parsing, and no allocation
//! per frame once the stream is warm.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use dataplane::io::capture::{CaptureReader, OwnedRecord, drain};
use dataplane::stage::icarus::{FilterParams, node_mask};
use dataplane::wire::icarus::find;
use dataplane::wire::{Ecn, LinkType, parse};
use traffic_gen::synth::SYNTH_START_NS;
use traffic_gen::synth::router::{
    Class, RouterSynth, RouterSynthConfig, RouterTruth, generate, truth_path, write_pcapng,
};

// ------------------------------------------------------------ allocations

/// Counts the allocations of the current thread (tests run in parallel
/// threads, so a global count would mix them up).
struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every method forwards to the system allocator with the caller's
// arguments unchanged; the count is a thread-local `Cell` with a const
// initialiser, which neither allocates nor re-enters the allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract for `alloc` is passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` through `alloc`/`realloc` here.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: as for `dealloc`; the caller's contract is passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCS.with(Cell::get)
}

// ------------------------------------------------------------ helpers

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("synth-router-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The default workload's truth (200,000 packets), made once.
fn default_truth() -> &'static RouterTruth {
    static T: OnceLock<RouterTruth> = OnceLock::new();
    T.get_or_init(|| generate(RouterSynthConfig::default(), |_| Ok(())).unwrap())
}

/// A smaller workload written to disk, read back: its truth and records.
fn written(packets: u64) -> &'static (RouterTruth, Vec<OwnedRecord>, Vec<String>) {
    static W: OnceLock<(RouterTruth, Vec<OwnedRecord>, Vec<String>)> = OnceLock::new();
    W.get_or_init(|| {
        let d = scratch("written");
        let path = d.join("router.pcapng");
        let cfg = RouterSynthConfig {
            packets,
            ..RouterSynthConfig::default()
        };
        let truth = write_pcapng(cfg, &path).unwrap();
        let on_disk: RouterTruth =
            serde_json::from_slice(&std::fs::read(truth_path(&path)).unwrap()).unwrap();
        assert_eq!(on_disk, truth, "the sidecar holds the truth");
        let mut r = CaptureReader::open(&path).unwrap();
        let (recs, err) = drain(&mut r);
        assert!(err.is_none(), "{err:?}");
        let names = (0..r.interface_count() as u32)
            .map(|i| r.interface_name(i).unwrap_or("").to_string())
            .collect();
        let _ = std::fs::remove_dir_all(&d);
        (truth, recs, names)
    })
}

const WRITTEN: u64 = 60_000;

// ------------------------------------------------------------ tests

#[test]
fn same_seed_same_bytes() {
    let d = scratch("determinism");
    let write = |name: &str, seed: u64| {
        let path = d.join(name);
        let cfg = RouterSynthConfig {
            packets: 20_000,
            seed,
            ..RouterSynthConfig::default()
        };
        write_pcapng(cfg, &path).unwrap();
        (
            std::fs::read(&path).unwrap(),
            std::fs::read(truth_path(&path)).unwrap(),
        )
    };
    let a = write("a.pcapng", 7);
    let b = write("b.pcapng", 7);
    let c = write("c.pcapng", 8);
    let _ = std::fs::remove_dir_all(&d);
    assert!(a.0 == b.0, "same seed, same capture");
    assert!(a.1 == b.1, "same seed, same truth");
    assert!(a.0 != c.0, "another seed, another capture");
}

#[test]
fn pcapng_reads_back_with_the_router_interfaces() {
    let (truth, recs, names) = written(WRITTEN);
    assert_eq!(*names, ["r-a", "r-b", "r-c"]);
    assert_eq!(truth.interfaces, *names);
    assert_eq!(recs.len() as u64, WRITTEN);
    assert_eq!(truth.packets, WRITTEN);
    let mut per_port = [0u64; 3];
    for (i, r) in recs.iter().enumerate() {
        assert_eq!(r.ts_ns, SYNTH_START_NS + i as u64 * truth.gap_ns);
        assert_eq!(r.orig_len as usize, r.data.len());
        assert_eq!(r.link_type, LinkType::Ethernet);
        per_port[r.interface as usize] += 1;
    }
    let c = |k| truth.class(k).packets;
    use Class::*;
    assert_eq!(
        per_port[0],
        c(Zipf) + c(Unresponsive) + c(McastStatic) + c(McastJoined) + c(McastUnjoined)
    );
    assert_eq!(per_port[1], c(Reverse));
    assert_eq!(per_port[2], c(Icarus) + c(Control));
    let bytes: u64 = recs.iter().map(|r| r.data.len() as u64).sum();
    assert_eq!(bytes, truth.classes.values().map(|c| c.bytes).sum::<u64>());
}

#[test]
fn every_frame_parses() {
    let (_, recs, _) = written(WRITTEN);
    for (i, r) in recs.iter().enumerate() {
        let p = parse(LinkType::Ethernet, &r.data)
            .unwrap_or_else(|e| panic!("packet {i} is malformed: {e:?}"));
        assert!(p.is_ip() && p.flow.is_some(), "packet {i}");
        assert!(!p.truncated, "packet {i}");
    }
}

/// The bounds the module docs promise for the default workload.
#[test]
fn shares_and_load_within_bounds() {
    let t = default_truth();
    println!("{}", t.summary());
    let secs = t.duration_ns as f64 / 1e9;
    // r-b is offered 1.5 x its rate, the unresponsive flow 5 fair shares.
    assert!(
        (1.4..=1.6).contains(&t.offered_rb_ratio),
        "{}",
        t.offered_rb_ratio
    );
    assert!(
        (4.5..=5.5).contains(&t.unresponsive_fair_shares),
        "{}",
        t.unresponsive_fair_shares
    );
    let offered = [Class::Zipf, Class::Unresponsive, Class::McastStatic]
        .iter()
        .map(|&c| t.class(c).bytes)
        .sum::<u64>() as f64
        * 8.0
        / secs;
    assert!((offered - t.offered_rb_bps).abs() < 1.0);
    assert_eq!(t.offered_rb_ratio, t.offered_rb_bps / t.rb_rate_bps as f64);
    // The fair share is below the rate split evenly among a few flows and
    // far above an even split among all of them.
    assert!(t.fair_share_bps < t.rb_rate_bps as f64 / 10.0);
    assert!(t.fair_share_bps > 10.0 * t.rb_rate_bps as f64 / f64::from(t.zipf_flows));
    assert_eq!(
        t.unresponsive_bps,
        8.0 * t.class(Class::Unresponsive).bytes as f64 / secs
    );
    let every = t.unresponsive_every;
    assert_eq!(
        t.class(Class::Unresponsive).packets,
        (0..t.packets).filter(|i| i % every == every / 2).count() as u64,
        "a constant rate"
    );
    // Several one-second epochs.
    assert!(t.epochs.len() >= 20, "{} epochs", t.epochs.len());
    assert_eq!(t.epoch_ns, 1_000_000_000);
    // Class mix: the drawn slots' weights within 1.5 points.
    let drawn =
        (t.packets - t.class(Class::Unresponsive).packets - t.class(Class::Control).packets) as f64;
    let mcast = [Class::McastStatic, Class::McastJoined, Class::McastUnjoined]
        .iter()
        .map(|&c| t.class(c).packets)
        .sum::<u64>();
    for (got, want) in [
        (t.class(Class::Zipf).packets, 0.64),
        (t.class(Class::Reverse).packets, 0.16),
        (mcast, 0.08),
        (t.class(Class::Icarus).packets, 0.12),
    ] {
        assert!(
            (got as f64 / drawn - want).abs() < 0.015,
            "{got} of {drawn}, want {want}"
        );
    }
    // About 30% of the Zipf flows are ECT(0).
    let ect = t.zipf_ect0_flows_seen as f64 / t.zipf_flows_seen as f64;
    assert!((0.25..=0.35).contains(&ect), "{ect}");
    assert!(t.zipf_flows_seen > 5_000);
    // Reports: joins, refreshes and the one leave.
    assert!(t.class(Class::Control).packets >= 24 * 3);
}

/// Each Icarus packet's filter, read from the frame, holds node 42's whole
/// mask exactly when the truth says so, by a subset test on the words.
#[test]
fn icarus_verdicts_are_exact() {
    let (t, recs, _) = written(WRITTEN);
    let params = FilterParams::from_bits(t.m, t.k)
        .unwrap()
        .with_seed(t.domain_seed);
    let mask = node_mask(t.node_id, &params);
    assert_eq!(mask.count_ones() as usize, t.k);
    let (mut holds, mut looping) = (0, 0);
    for p in &t.icarus {
        let r = &recs[p.index as usize];
        assert_eq!(r.interface, 2, "from r-c");
        let loc = find(&r.data, 14).unwrap().expect("an icarus option");
        let filter = loc.filter(&r.data).unwrap();
        let subset = filter
            .words()
            .iter()
            .zip(mask.words())
            .all(|(f, m)| f & m == *m);
        assert_eq!(subset, p.mark.holds_mask, "packet {}", p.index);
        if p.mark.looping {
            assert!(p.mark.holds_mask);
        }
        holds += u64::from(p.mark.holds_mask);
        looping += u64::from(p.mark.looping);
    }
    let n = t.icarus.len() as f64;
    assert_eq!(n as u64, t.class(Class::Icarus).packets);
    assert!(
        (0.08..=0.12).contains(&(looping as f64 / n)),
        "{looping} of {n}"
    );
    assert!(holds >= looping);
    // Every other packet carries no option.
    let icarus: std::collections::HashSet<u64> = t.icarus.iter().map(|p| p.index).collect();
    for (i, r) in recs.iter().enumerate() {
        if !icarus.contains(&(i as u64)) {
            assert!(find(&r.data, 14).unwrap().is_none(), "packet {i}");
        }
    }
}

/// Multicast data: the destination is the truth's group, the egress sets
/// are the static port for 239.1.1.1, r-c for joined groups (until the
/// leave), nothing for the others.
#[test]
fn multicast_egress_sets() {
    let (t, recs, _) = written(WRITTEN);
    let static_group: IpAddr = "239.1.1.1".parse().unwrap();
    let left: IpAddr = "239.2.0.16".parse().unwrap();
    let leave_at = t.start_ns + t.duration_ns / 2;
    let mut seen: HashMap<(IpAddr, u64), u64> = HashMap::new();
    for m in &t.multicast {
        let r = &recs[m.index as usize];
        assert_eq!(r.interface, 0, "from r-a");
        let p = parse(LinkType::Ethernet, &r.data).unwrap();
        let dst = match p.flow.unwrap() {
            dataplane::flow::FlowKey::V4(f) => IpAddr::V4(f.dst),
            dataplane::flow::FlowKey::V6(f) => IpAddr::V6(f.dst),
        };
        assert_eq!(dst, m.group);
        let want = match m.group {
            g if g == static_group => 1 << 1,
            g if g == left && r.ts_ns > leave_at => 0,
            IpAddr::V4(g) if g.octets()[..3] == [239, 2, 0] => 1 << 2,
            IpAddr::V6(g) if g.segments()[6] == 2 => 1 << 2,
            _ => 0,
        };
        assert_eq!(m.egress, want, "packet {} to {}", m.index, m.group);
        *seen.entry((m.group, m.egress)).or_default() += 1;
    }
    let count = |f: &dyn Fn(&(IpAddr, u64)) -> bool| {
        seen.iter()
            .filter(|(k, _)| f(k))
            .map(|(_, n)| n)
            .sum::<u64>()
    };
    assert!(count(&|k| k.1 == 2) > 500, "data to the static group");
    assert!(count(&|k| k.1 == 4) > 300, "data to joined groups");
    assert!(count(&|k| k.1 == 0) > 100, "data nobody wants");
}

/// The epochs hold every packet the heavy stage sees, each in the epoch of
/// its own time, and the bytes an inserting router counts.
#[test]
fn epochs_account_for_every_packet() {
    let (t, recs, _) = written(WRITTEN);
    let holding = t.icarus.iter().filter(|p| p.mark.holds_mask).count() as u64;
    let packets: u64 = t.epochs.iter().map(|e| e.packets).sum();
    assert_eq!(packets, t.packets - holding);
    let bytes: u64 = t.epochs.iter().map(|e| e.bytes).sum();
    let dropped: u64 = t
        .icarus
        .iter()
        .filter(|p| p.mark.holds_mask)
        .map(|p| recs[p.index as usize].data.len() as u64)
        .sum();
    assert_eq!(
        bytes + dropped,
        recs.iter().map(|r| r.data.len() as u64).sum::<u64>()
    );
    let dropped: std::collections::HashSet<u64> = t
        .icarus
        .iter()
        .filter(|p| p.mark.holds_mask)
        .map(|p| p.index)
        .collect();
    let mut per_epoch: HashMap<u64, u64> = HashMap::new();
    for (j, r) in recs.iter().enumerate() {
        if !dropped.contains(&(j as u64)) {
            *per_epoch.entry(r.ts_ns / t.epoch_ns).or_default() += 1;
        }
    }
    assert_eq!(per_epoch.len(), t.epochs.len());
    for (i, e) in t.epochs.iter().enumerate() {
        assert_eq!(e.epoch, t.epochs[0].epoch + i as u64, "consecutive");
        assert_eq!(
            (e.start_ns, e.end_ns),
            (e.epoch * t.epoch_ns, (e.epoch + 1) * t.epoch_ns)
        );
        assert_eq!(per_epoch[&e.epoch], e.packets, "epoch {}", e.epoch);
        assert_eq!(e.packets, e.flows.iter().map(|f| f.packets).sum::<u64>());
        assert_eq!(
            e.router_bytes,
            e.flows.iter().map(|f| f.router_bytes).sum::<u64>()
        );
        for f in &e.flows {
            // The router inserts a filter on r-a and r-b: 20 bytes in an
            // IPv4 header, a 24-byte hop-by-hop header in IPv6 (m = 128).
            let extra = f.router_bytes - f.bytes;
            if f.ingress == 2 {
                assert_eq!(extra, 0, "{}", f.flow);
            } else {
                assert!(
                    extra == 20 * f.packets || extra == 24 * f.packets,
                    "{}",
                    f.flow
                );
            }
        }
        assert!(
            e.flows
                .windows(2)
                .all(|w| w[0].router_bytes >= w[1].router_bytes)
        );
    }
    // The unresponsive flow is heavy (1% of the bytes) in every full epoch.
    for e in &t.epochs[1..t.epochs.len() - 1] {
        let u = e
            .flows
            .iter()
            .find(|f| f.class == Class::Unresponsive)
            .expect("the unresponsive flow sends every epoch");
        assert!(u.router_bytes * 100 >= e.router_bytes, "epoch {}", e.epoch);
        assert!(
            u.flow
                .starts_with("10.255.255.254:4000 -> 172.31.255.254:4000"),
            "{}",
            u.flow
        );
    }
}

/// The ECN marks: ECT(0) only on Zipf flows that are ECT(0) throughout.
#[test]
fn ecn_marks_per_flow() {
    let (_, recs, _) = written(WRITTEN);
    let mut per_flow: HashMap<dataplane::flow::FlowKey, Ecn> = HashMap::new();
    for r in recs {
        let p = parse(LinkType::Ethernet, &r.data).unwrap();
        let prev = *per_flow.entry(p.flow.unwrap()).or_insert(p.ecn);
        assert_eq!(prev, p.ecn, "a flow keeps its ECN codepoint");
        assert!(matches!(p.ecn, Ecn::NotEct | Ecn::Ect0));
    }
}

#[test]
fn no_allocation_per_frame_once_warm() {
    let mut s = RouterSynth::new(RouterSynthConfig::default()).unwrap();
    // Warm: every class, the joins and a first refresh (10 s).
    let warm = 10_000_000_000 / s.gap_ns() + 2_000;
    for _ in 0..warm {
        s.next().unwrap().unwrap();
    }
    let before = allocations();
    let mut n = 0u64;
    while let Some(p) = s.next().unwrap() {
        n += p.frame.len() as u64;
    }
    assert!(n > 0);
    assert_eq!(allocations() - before, 0, "allocations after the warm-up");
}

/// Runs `traffic-gen synth ARGS -o PATH`, which must succeed; its stdout.
fn synth(args: &[&str], path: &std::path::Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_traffic-gen"))
        .arg("synth")
        .args(args)
        .arg("-o")
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn cli_writes_the_router_workload() {
    let d = scratch("cli");
    let path = d.join("r.pcapng");
    let stdout = synth(&["--kind", "router", "--packets", "5000"], &path);
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(
        stdout.contains("router: 5000 packets") && stdout.contains("r-a, r-b, r-c"),
        "{stdout}"
    );
    let truth: serde_json::Value =
        serde_json::from_slice(&std::fs::read(truth_path(&path)).unwrap()).unwrap();
    assert_eq!(truth["packets"], 5000);
    let (recs, err) = dataplane::io::capture::read_all(&path);
    assert!(err.is_none());
    assert_eq!(recs.len(), 5000);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn cli_multicast_writes_named_interfaces() {
    let d = scratch("cli-mcast");
    let path = d.join("m.pcapng");
    synth(
        &["--kind", "multicast", "--ports", "3", "--packets", "500"],
        &path,
    );
    let mut r = CaptureReader::open(&path).unwrap();
    let (recs, err) = drain(&mut r);
    assert!(err.is_none());
    let truth: serde_json::Value =
        serde_json::from_slice(&std::fs::read(format!("{}.mcast.json", path.display())).unwrap())
            .unwrap();
    for (i, rec) in recs.iter().enumerate() {
        assert_eq!(
            u64::from(rec.interface),
            truth["ingress"][i].as_u64().unwrap()
        );
    }
    assert_eq!(
        (0..3).map(|i| r.interface_name(i)).collect::<Vec<_>>(),
        [Some("p0"), Some("p1"), Some("p2")]
    );
    let _ = std::fs::remove_dir_all(&d);
}
