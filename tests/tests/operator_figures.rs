//! The figures an operator reads after a replay through the whole router
//! (the built-in one, as `traffic-gen replay` runs it), each case named:
//!
//! * heavy flows (and their IPFIX records) count the bytes that arrived,
//!   not the Icarus option the router inserts on its way out;
//! * the IGMP/MLD reports the router learns from are consumed, not
//!   dropped as unroutable (text, JSON, Prometheus);
//! * SFB's end-of-run figures say which are now and keep the run's peaks;
//! * several workers repeat a run exactly, and count epochs as the report
//!   lists them;
//! * a frame shorter than its IP length, not cut by the capture, is
//!   malformed; only a record the capture cut is `cut_by_capture`;
//! * the capture time is the capture's span whatever became of the
//!   packets.
//!
//! Public captures (beside the checkout) add cases where present; their
//! absence is printed and skipped.

use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::time::Duration;

use dataplane::config::RouterConfig;
use dataplane::io::capture::CaptureWriter;
use dataplane::wire::{LinkType, checksum};
use tests::corpus_file;
use traffic_gen::replay::{Input, ReplayConfig, Report, default_router, replay};
use traffic_gen::synth::router::RouterSynthConfig;
use traffic_gen::synth::{SynthConfig, write_pcap};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("bp-figures-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(input: &Input, router: RouterConfig, workers: usize, write: Option<&Path>) -> Report {
    let cfg = ReplayConfig {
        pin: false,
        workers,
        write: write.map(Path::to_path_buf),
        ..ReplayConfig::new(router)
    };
    let r = replay(input, &cfg, None).unwrap();
    assert!(r.router.is_consistent(), "{:?}", r.router.pipeline);
    r
}

fn file(p: &Path) -> Input {
    Input::Files(vec![p.to_path_buf()])
}

/// The built-in router's synthetic workload, `packets` long.
fn synth(packets: u64) -> Input {
    Input::Synth(RouterSynthConfig {
        packets,
        ..RouterSynthConfig::default()
    })
}

/// Every IPFIX message the collector at `s` received, its export time
/// (bytes 4..8 of the header, the wall clock) zeroed.
fn ipfix_messages(s: &UdpSocket) -> Vec<Vec<u8>> {
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65_536];
    while let Ok(n) = s.recv(&mut buf) {
        let mut m = buf[..n].to_vec();
        if m.len() >= 8 {
            m[4..8].fill(0);
        }
        out.push(m);
    }
    out
}

/// A flow's bytes are the bytes that arrived on the wire: the built-in
/// router, whose edges insert an Icarus option into every packet from a
/// host, and the same router without `[icarus]` report the same heavy
/// flows (bytes, packets, every epoch) and send the same IPFIX records.
/// (With the option counted, small-packet flows were pushed over the
/// share threshold: 20 bytes more per packet.)
#[test]
fn heavy_flows_and_ipfix_count_the_bytes_that_arrived_not_the_inserted_icarus_option() {
    let dir = scratch("icarus-bytes");
    let zipf = dir.join("zipf.pcap");
    write_pcap(
        SynthConfig {
            packets: 30_000,
            flows: 2_000,
            ..SynthConfig::default()
        },
        &zipf,
    )
    .unwrap();
    let mut inputs = vec![zipf];
    inputs.extend(
        [
            "pcpp_many-protocols.pcap",
            "ddos_pkt.TCP.synflood.spoofed.pcap",
        ]
        .iter()
        .filter_map(|n| corpus_file(n)),
    );
    for input in &inputs {
        let name = input.file_name().unwrap().to_string_lossy();
        let mut reports = Vec::new();
        for icarus in [true, false] {
            let collector = UdpSocket::bind("127.0.0.1:0").unwrap();
            let mut router = default_router();
            if !icarus {
                router.icarus = None;
            }
            let h = router.heavy.as_mut().unwrap();
            h.ipfix = Some(collector.local_addr().unwrap().to_string());
            let r = run(&file(input), router, 1, None);
            let inserted = r.router.icarus.as_ref().map_or(0, |c| c.inserted);
            assert_eq!(inserted > 0, icarus, "{name}: inserted {inserted}");
            let messages = ipfix_messages(&collector);
            assert_eq!(
                r.ipfix.as_ref().map(|x| x.records > 0),
                Some(true),
                "{name}"
            );
            reports.push((r, messages));
        }
        let (with, without) = (&reports[0], &reports[1]);
        let heavy = |r: &Report| serde_json::to_value(&r.heavy).unwrap();
        assert_eq!(heavy(&with.0), heavy(&without.0), "{name}: heavy flows");
        assert_eq!(
            with.0.router.heavy.map(|h| h.bytes),
            without.0.router.heavy.map(|h| h.bytes),
            "{name}: heavy bytes"
        );
        assert_eq!(with.1, without.1, "{name}: IPFIX messages");
        eprintln!(
            "{name}: {} epochs, {} IPFIX messages, equal with and without Icarus",
            with.0.heavy.len(),
            with.1.len()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The IGMP/MLD reports the router learns memberships from are its own
/// input: counted `consumed` (text, JSON, Prometheus), never as
/// `no_route` drops, and the accounting identity holds with that term.
#[test]
fn consumed_reports_are_counted_as_consumed_not_as_no_route() {
    let mut inputs = vec![("synthetic".to_string(), synth(40_000))];
    for n in ["zeek_igmp-many-groups.pcap", "pcpp_IgmpPackets.pcap"] {
        if let Some(p) = corpus_file(n) {
            inputs.push((n.to_string(), file(&p)));
        }
    }
    for (name, input) in &inputs {
        let r = run(input, default_router(), 1, None);
        let pl = &r.router.pipeline;
        let control = r.router.multicast.as_ref().unwrap().control;
        assert!(control > 0, "{name}: no report learned from");
        assert_eq!(pl.consumed, control, "{name}: {pl:?}");
        assert_eq!(
            pl.received,
            pl.forwarded + pl.consumed + pl.dropped + pl.held,
            "{name}"
        );
        // Only multicast data nobody wants is left as `no_route` here.
        let mc = r.router.multicast.as_ref().unwrap();
        assert_eq!(
            pl.drops.get("no_route").copied().unwrap_or(0),
            mc.suppressed + mc.link_local,
            "{name}: {pl:?}"
        );
        let text = r.router.render();
        assert!(
            text.contains(&format!("    consumed {} held 0\n", pl.consumed)),
            "{name}: {text}"
        );
        let json = serde_json::to_value(&r.router).unwrap();
        assert_eq!(json["pipeline"]["consumed"], pl.consumed, "{name}");
        let metrics = dataplane::runtime::metrics::encode(&r.router);
        assert!(
            metrics.contains(&format!(
                "bloomplane_pipeline_consumed_total {}\n",
                pl.consumed
            )),
            "{name}"
        );
    }
}

/// After heavy dropping the shaped queue drains at the end of a replay,
/// so SFB's bins read empty: the end-of-run line says its bin figures are
/// now (as `tc` prints them) and gives the run's peaks beside them.
#[test]
fn the_sfb_end_of_run_line_says_what_is_now_and_keeps_the_run_s_peaks() {
    let r = run(&synth(60_000), default_router(), 1, None);
    let rb = r
        .router
        .interfaces
        .iter()
        .find(|i| i.port.name == "r-b")
        .unwrap();
    let sfb = rb.port.sfb.as_ref().unwrap();
    let dropped = rb.port.counters.dropped.total();
    assert!(dropped > 1000, "{dropped}");
    assert_eq!(rb.port.backlog_packets, 0);
    assert!(sfb.peak.maxqlen > 0 && sfb.peak.maxprob > 0, "{sfb:?}");
    assert!(sfb.peak.maxqlen >= sfb.maxqlen && sfb.peak.maxprob >= sfb.maxprob);
    assert!(sfb.peak.avgprob >= sfb.avgprob);
    let text = r.router.render();
    let line = format!("      peak maxqlen {} maxprob ", sfb.peak.maxqlen);
    assert!(text.contains(&line), "{text}");
    assert!(text.contains("(bins now, sojourn over the run)"), "{text}");
    let json = serde_json::to_value(sfb).unwrap();
    assert_eq!(json["peak"]["maxqlen"], sfb.peak.maxqlen);
}

/// The report as JSON without what the wall clock decides (how fast the
/// run went, the processing latency, where threads ran, how often a
/// worker waited for its turn).
fn without_wall_clock(r: &Report) -> serde_json::Value {
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                for k in ["elapsed_s", "pps", "mbps", "processing", "core", "waits"] {
                    m.remove(k);
                }
                m.values_mut().for_each(strip);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut v = serde_json::to_value(r).unwrap();
    strip(&mut v);
    v
}

/// A run's `--write` captures: (file name, bytes).
type Captures = Vec<(String, Vec<u8>)>;

/// The `--write` captures of a run, by name.
fn written(dir: &Path) -> Captures {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

/// With two and three workers, five runs each of the same input give
/// byte-identical `--write` captures and the same JSON report (wall-clock
/// fields aside): the workers take turns at the shaped queue, the
/// memberships and the neighbours they share in an order the input fixes.
/// Each merged report counts its epochs as it lists them.
#[test]
fn several_workers_repeat_a_run_exactly() {
    let dir = scratch("repeat");
    let mut inputs = vec![("synthetic".to_string(), synth(60_000))];
    for n in [
        "ddos_pkt.TCP.synflood.spoofed.pcap",
        "zeek_igmp-many-groups.pcap",
        "cesnet_ssdp.pcap",
        "pcpp_many-protocols.pcap",
    ] {
        if let Some(p) = corpus_file(n) {
            inputs.push((n.to_string(), file(&p)));
        }
    }
    for (name, input) in &inputs {
        for workers in [2, 3] {
            let mut first: Option<(serde_json::Value, Captures)> = None;
            for k in 0..5 {
                let out = dir.join(format!("{workers}-{k}"));
                let r = run(input, default_router(), workers, Some(&out));
                assert!(r.turns.is_some(), "{name}: {workers} workers take turns");
                if let Some(h) = &r.router.heavy {
                    assert_eq!(h.epochs, r.heavy.len() as u64, "{name}: epochs");
                    let flows: usize = r.heavy.iter().map(|e| e.flows.len()).sum();
                    assert_eq!(h.reported, flows as u64, "{name}: reported");
                }
                let got = (without_wall_clock(&r), written(&out));
                // Run-specific paths aside.
                let mut got_json = got.0;
                got_json["written"] = serde_json::Value::Null;
                match &first {
                    None => first = Some((got_json, got.1)),
                    Some((json, files)) => {
                        assert!(
                            *files == got.1,
                            "{name}: {workers} workers, run {k}: the --write captures differ"
                        );
                        assert_eq!(*json, got_json, "{name}: {workers} workers, run {k}");
                    }
                }
                let _ = std::fs::remove_dir_all(&out);
            }
        }
        eprintln!("{name}: 2 and 3 workers, five runs each, identical");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// An Ethernet/IPv4/UDP frame of `len` bytes to 10.0.0.2 whose IPv4 total
/// length says `ip_len`.
fn udp_frame(len: usize, ip_len: u16) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
    ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
    let sum = !checksum::sum(ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f[34..36].copy_from_slice(&4000u16.to_be_bytes());
    f[36..38].copy_from_slice(&53u16.to_be_bytes());
    f[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
    f
}

/// A record whose captured length equals its length on the wire holds the
/// whole frame: an IPv4 total length beyond it is a lie (tcpdump:
/// `truncated-ip - N bytes missing`), malformed and dropped. A record the
/// capture cut (`caplen < len`) is `cut_by_capture`, counted and
/// forwarded. (Both used to be `cut_by_capture`.)
#[test]
fn a_frame_shorter_than_its_ip_length_is_malformed_unless_the_capture_cut_it() {
    let dir = scratch("lengths");
    let pcap = dir.join("lengths.pcap");
    let mut w = CaptureWriter::create(&pcap, LinkType::Ethernet, 65535).unwrap();
    let lying = udp_frame(271, 1500);
    w.write(1_000_000_000, 271, &lying).unwrap();
    let whole = udp_frame(1514, 1500);
    w.write(1_000_001_000, 1514, &whole[..271]).unwrap();
    w.write(1_000_002_000, 1514, &whole).unwrap();
    w.finish().unwrap();
    let r = run(&file(&pcap), default_router(), 1, None);
    let pl = &r.router.pipeline;
    assert_eq!(pl.received, 3);
    assert_eq!(pl.cut_by_capture, 1, "{pl:?}");
    assert_eq!(
        pl.malformed.get("ipv4_total_length_beyond_frame").copied(),
        Some(1),
        "{pl:?}"
    );
    assert_eq!(pl.forwarded, 2, "{pl:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A capture spanning 78.9 s of which no packet leaves (every frame too
/// short to parse) still spans 78.9 s of capture time: the span is the
/// capture's, from its first arrival to its last arrival or departure.
#[test]
fn capture_time_is_the_capture_s_span_when_nothing_leaves() {
    let dir = scratch("span");
    let pcap = dir.join("short.pcap");
    let mut w = CaptureWriter::create(&pcap, LinkType::Ethernet, 65535).unwrap();
    let start = 1_700_000_000_000_000_000u64;
    for i in 0..=789u64 {
        w.write(start + i * 100_000_000, 10, &[0xab; 10]).unwrap();
    }
    w.finish().unwrap();
    let r = run(&file(&pcap), default_router(), 1, None);
    assert_eq!(r.router.pipeline.forwarded, 0);
    assert_eq!(r.router.pipeline.dropped, 790);
    assert!(
        (r.capture_span_s - 78.9).abs() < 1e-9,
        "{}",
        r.capture_span_s
    );
    let mut text = Vec::new();
    r.write_text(&mut text, 10).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(text.contains("78.900 s of capture time"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
