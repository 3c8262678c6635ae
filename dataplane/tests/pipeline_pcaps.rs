//! Every capture in the shared corpus through the pipeline: no panic,
//! `received == forwarded + consumed + dropped` for every file under both malformed
//! policies, and the per-file numbers of `expected_pcaps.md` (malformed
//! reasons, IP versions, VLAN depths) asserted for the files listed in
//! `EXPECTED` below.
//!
//! The corpus lives outside the repository; without it these tests print
//! `skipping: ...` and pass.

use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use dataplane::clock::Timestamp;
use dataplane::io::capture::CaptureReader;
use dataplane::pipeline::{
    Batch, DropReason, MalformedPolicy, Pipeline, PipelineConfig, PipelineCounters, Stage,
};
use dataplane::wire::{IpVersion, Malformed};

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/pcaps");

fn corpus() -> Option<PathBuf> {
    let dir = Path::new(CORPUS);
    if dir.join("MANIFEST.tsv").is_file() {
        Some(dir.to_path_buf())
    } else {
        let _ = writeln!(
            std::io::stderr(),
            "skipping: capture corpus {CORPUS} not found"
        );
        None
    }
}

fn captures(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().contains(".pcap"))
        .collect();
    files.sort();
    files
}

/// A stage that only looks: VLAN depths, outer VLAN ids, IP versions.
#[derive(Debug, Default)]
struct Census {
    depth: BTreeMap<u16, u64>,
    outer_vid: BTreeMap<u16, u64>,
    v4: u64,
    v6: u64,
    batches: u64,
    last_now: Timestamp,
}

impl Stage for Census {
    fn name(&self) -> &'static str {
        "census"
    }
    fn process(&mut self, batch: &mut Batch, now: Timestamp) {
        assert!(now >= self.last_now, "now went backwards");
        self.last_now = now;
        self.batches += 1;
        for p in batch.packets().iter().filter(|p| p.is_live()) {
            let Some(parsed) = &p.parsed else { continue };
            *self.depth.entry(parsed.vlan_depth).or_default() += 1;
            if let Some(v) = parsed.outer_vlan {
                *self.outer_vid.entry(v).or_default() += 1;
            }
            match parsed.ip_version {
                Some(IpVersion::V4) => self.v4 += 1,
                Some(IpVersion::V6) => self.v6 += 1,
                None => {}
            }
        }
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

struct Run {
    counters: PipelineCounters,
    census: Census,
    fault: Option<String>,
}

fn run(path: &Path, config: PipelineConfig) -> Run {
    let mut pipeline = Pipeline::new(config).with_stage(Census::default());
    let mut batch = Batch::new();
    let fault = match CaptureReader::open(path) {
        Ok(mut reader) => match pipeline.run_capture(&mut reader, &mut batch) {
            Ok(last) => {
                pipeline.finish(last.unwrap_or_default());
                None
            }
            Err(e) => Some(e.to_string()),
        },
        Err(e) => Some(e.to_string()),
    };
    let census = std::mem::take(
        pipeline
            .stage_mut::<Census>()
            .expect("census stage is installed"),
    );
    Run {
        counters: pipeline.counters().clone(),
        census,
        fault,
    }
}

/// One row of `expected_pcaps.md`.
struct Expect {
    file: &'static str,
    frames: u64,
    malformed: &'static [(Malformed, u64)],
    v4: u64,
    v6: u64,
    non_ip: u64,
    depths: &'static [(u16, u64)],
    outer_vids: &'static [(u16, u64)],
}

const EXPECTED: &[Expect] = &[
    Expect {
        file: "pcpp_VlanPackets.pcap",
        frames: 26,
        malformed: &[],
        v4: 20,
        v6: 0,
        non_ip: 6,
        depths: &[(0, 2), (1, 4), (2, 20)],
        outer_vids: &[(118, 12), (209, 12)],
    },
    Expect {
        file: "zeek_vlan-qinqinq.pcap",
        frames: 14,
        malformed: &[],
        v4: 14,
        v6: 0,
        non_ip: 0,
        depths: &[(3, 14)],
        outer_vids: &[(30, 14)],
    },
    Expect {
        file: "tcpdump_802.1ad_QinQ.pcap",
        frames: 2,
        malformed: &[],
        v4: 0,
        v6: 0,
        non_ip: 2,
        depths: &[(2, 2)],
        outer_vids: &[(200, 2)],
    },
    Expect {
        file: "zeek_vlan-pcp-dei.pcapng",
        frames: 9,
        malformed: &[],
        v4: 9,
        v6: 0,
        non_ip: 0,
        depths: &[(0, 3), (1, 3), (2, 3)],
        outer_vids: &[(20, 3), (10, 3)],
    },
    Expect {
        file: "zeek_ip6-ext-trunc.pcap",
        frames: 1,
        malformed: &[(Malformed::TruncatedExtensionHeader, 1)],
        v4: 0,
        v6: 0,
        non_ip: 0,
        depths: &[],
        outer_vids: &[],
    },
    Expect {
        file: "pcpp_ipv4-malformed.pcap",
        frames: 2,
        malformed: &[
            (Malformed::BadIpv4Version, 1),
            (Malformed::Ipv4TotalLengthBelowHeader, 1),
        ],
        v4: 0,
        v6: 0,
        non_ip: 0,
        depths: &[],
        outer_vids: &[],
    },
    Expect {
        // Link-type field 0x30000001: FCS bits set, Ethernet underneath.
        file: "tcpdump_udp-length-heapoverflow.pcap",
        frames: 1,
        // Cut by the capture after the UDP ports (as tshark: "UDP
        // truncated"), not malformed.
        malformed: &[],
        v4: 1,
        v6: 0,
        non_ip: 0,
        depths: &[],
        outer_vids: &[],
    },
    Expect {
        file: "zeek_tcp-truncated-header.pcap",
        frames: 24,
        // Frame 1's TCP options are cut by the snapshot: keyed, counted.
        malformed: &[],
        v4: 24,
        v6: 0,
        non_ip: 0,
        depths: &[(0, 24)],
        outer_vids: &[],
    },
    Expect {
        file: "tcpdump_ipv6hdr-heapoverflow.pcap",
        frames: 1,
        malformed: &[(Malformed::TruncatedExtensionHeader, 1)],
        v4: 0,
        v6: 0,
        non_ip: 0,
        depths: &[],
        outer_vids: &[],
    },
    Expect {
        file: "zeek_ipv4-internally-truncated-header.pcap",
        frames: 1,
        malformed: &[(Malformed::TruncatedIpv4Header, 1)],
        v4: 0,
        v6: 0,
        non_ip: 0,
        depths: &[],
        outer_vids: &[],
    },
    Expect {
        file: "tcpdump_ipv6_frag6_negative_len.pcap",
        frames: 1,
        malformed: &[(Malformed::Ipv6ExtensionBeyondPayload, 1)],
        v4: 0,
        v6: 0,
        non_ip: 0,
        depths: &[],
        outer_vids: &[],
    },
    Expect {
        file: "pcpp_IgmpPackets.pcap",
        frames: 81,
        malformed: &[],
        v4: 61,
        v6: 18,
        non_ip: 2,
        depths: &[],
        outer_vids: &[],
    },
    Expect {
        file: "pcpp_tls2.pcap",
        frames: 7451,
        malformed: &[],
        v4: 3011,
        v6: 4440,
        non_ip: 0,
        depths: &[],
        outer_vids: &[],
    },
    Expect {
        file: "pcpp_ip4_bad_fragment.pcap",
        frames: 1,
        malformed: &[],
        v4: 0,
        v6: 0,
        non_ip: 1,
        depths: &[],
        outer_vids: &[],
    },
];

#[test]
fn every_capture_balances_under_both_policies() {
    let Some(dir) = corpus() else { return };
    let files = captures(&dir);
    assert!(files.len() >= 50, "only {} captures", files.len());
    let mut total = 0u64;
    for path in &files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let drop = run(path, PipelineConfig::default());
        let c = &drop.counters;
        assert!(c.is_consistent(), "{name}: {c:?}");
        assert_eq!(c.malformed.total(), c.dropped.total(), "{name}");
        if name.starts_with("libpcap_") {
            let fault = drop.fault.as_deref().unwrap_or("");
            assert!(fault.contains(&name), "{name}: fault {fault:?}");
        } else {
            assert!(drop.fault.is_none(), "{name}: {:?}", drop.fault);
        }
        let pass = run(
            path,
            PipelineConfig {
                malformed: MalformedPolicy::Pass,
                ..PipelineConfig::default()
            },
        );
        let p = &pass.counters;
        assert!(p.is_consistent(), "{name}: {p:?}");
        assert_eq!(p.received, c.received, "{name}");
        assert_eq!(p.forwarded, p.received, "{name}: pass forwards all");
        assert_eq!(p.malformed, c.malformed, "{name}: counted either way");
        total += c.received;
    }
    assert!(total > 100_000, "{total} packets");
}

#[test]
fn per_file_expectations() {
    let Some(dir) = corpus() else { return };
    let mut checked = 0;
    for e in EXPECTED {
        let r = run(&dir.join(e.file), PipelineConfig::default());
        let c = &r.counters;
        let f = e.file;
        assert!(r.fault.is_none(), "{f}: {:?}", r.fault);
        assert_eq!(c.received, e.frames, "{f}: frames");
        let bad: u64 = e.malformed.iter().map(|&(_, n)| n).sum();
        assert_eq!(c.malformed.total(), bad, "{f}: malformed");
        for &(m, n) in e.malformed {
            assert_eq!(c.malformed.get(m), n, "{f}: {m}");
            assert_eq!(c.dropped.get(DropReason::Malformed(m)), n, "{f}: {m}");
        }
        assert_eq!(c.forwarded, e.frames - bad, "{f}: forwarded");
        assert_eq!((r.census.v4, r.census.v6), (e.v4, e.v6), "{f}: versions");
        assert_eq!(c.non_ip, e.non_ip, "{f}: non-IP");
        if !e.depths.is_empty() {
            let want: BTreeMap<u16, u64> = e.depths.iter().copied().collect();
            assert_eq!(r.census.depth, want, "{f}: VLAN depths");
            let want: BTreeMap<u16, u64> = e.outer_vids.iter().copied().collect();
            assert_eq!(r.census.outer_vid, want, "{f}: outer VIDs");
        }
        assert!(c.is_consistent());
        checked += 1;
    }
    assert!(checked >= 5);
}

/// The capture did not cut the record (`caplen == len`), so a payload
/// length past its end is a lie: malformed, not `cut_by_capture`.
#[test]
fn the_lying_jumbogram_is_malformed() {
    let Some(dir) = corpus() else { return };
    let path = dir.join("tcpdump_ipv6_jumbogram_invalid_length.pcap");
    let r = run(&path, PipelineConfig::default());
    let c = &r.counters;
    assert_eq!(c.cut_by_capture, 0);
    assert_eq!(c.malformed.get(Malformed::Ipv6PayloadBeyondFrame), 1);
    assert_eq!(c.dropped.total(), 1);
    assert!(c.is_consistent());
}

#[test]
fn replay_is_deterministic() {
    let Some(dir) = corpus() else { return };
    let path = dir.join("pcpp_many-protocols.pcap");
    let a = run(&path, PipelineConfig::default());
    let b = run(&path, PipelineConfig::default());
    assert_eq!(a.counters, b.counters);
    let summary: HashMap<_, _> = a.census.depth.iter().collect();
    let again: HashMap<_, _> = b.census.depth.iter().collect();
    assert_eq!(summary, again);
    assert_eq!(a.census.batches, b.census.batches);
}
