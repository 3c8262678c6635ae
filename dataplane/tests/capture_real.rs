//! Every capture in the shared corpus (`../shared/pcaps` next to the
//! workspace): read with no panic, packet counts equal to MANIFEST.tsv, the
//! four `libpcap_*` files rejected with the file and offset named, and
//! first/last timestamps checked against Wireshark's tools.
//!
//! The corpus is not part of the repository; without it these tests print
//! `skipping: ...` and pass.
//!
//! Reference values come from Wireshark 4.x (`apt-get install tshark`):
//!
//! ```text
//! capinfos -T -r -c -a -e -S <files>          # count, earliest, latest
//! tshark -r <file> -T fields -e frame.time_epoch -e frame.len -e frame.cap_len \
//!     | sed -n '1p;$p'                         # first and last, file order
//! tshark -r libpcap_<...> -c 1                 # how Wireshark rejects them
//! ```
//!
//! All 49 readable files agree with capinfos on the count.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use dataplane::io::capture::{CaptureErrorKind, CaptureReader, FileFormat, read_all};

fn corpus() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent()?;
    let dir = root.join("../shared/pcaps");
    if dir.join("MANIFEST.tsv").is_file() {
        Some(dir.canonicalize().unwrap_or(dir))
    } else {
        let _ = writeln!(
            std::io::stderr(),
            "skipping: no capture corpus at {} (it lives outside the repository)",
            dir.display()
        );
        None
    }
}

/// `file -> packets` from MANIFEST.tsv.
fn manifest(dir: &Path) -> HashMap<String, u64> {
    let text = std::fs::read_to_string(dir.join("MANIFEST.tsv")).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split('\t').collect();
    let file_col = header.iter().position(|h| *h == "file").unwrap();
    let packets_col = header.iter().position(|h| *h == "packets").unwrap();
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let cols: Vec<&str> = l.split('\t').collect();
            (
                cols[file_col].to_string(),
                cols[packets_col].parse().unwrap(),
            )
        })
        .collect()
}

fn captures(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.contains(".pcap")
        })
        .collect();
    files.sort();
    files
}

#[test]
fn every_shared_capture_reads_cleanly_or_is_rejected_with_an_offset() {
    let Some(dir) = corpus() else { return };
    let manifest = manifest(&dir);
    let files = captures(&dir);
    assert!(files.len() >= 50, "only {} captures found", files.len());
    let mut clean = 0;
    for path in &files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let (recs, err) = read_all(path);
        if name.starts_with("libpcap_") {
            let err = err.unwrap_or_else(|| panic!("{name}: expected a fault"));
            let shown = err.to_string();
            assert!(shown.contains(&name), "{shown}");
            assert!(
                shown.contains(&format!(": byte {}: ", err.offset())),
                "{shown}"
            );
            let size = std::fs::metadata(path).unwrap().len();
            assert!(err.offset() < size, "{shown}");
            assert!(
                recs.is_empty(),
                "{name}: header faults come before any packet"
            );
            eprintln!("{shown}");
            continue;
        }
        if let Some(e) = err {
            panic!("{name}: {e} after {} records", recs.len());
        }
        let want = manifest
            .get(&name)
            .unwrap_or_else(|| panic!("{name} is not in MANIFEST.tsv"));
        assert_eq!(recs.len() as u64, *want, "{name}: packet count");
        clean += 1;
    }
    assert_eq!(clean, files.len() - 4);
}

#[test]
fn libpcap_malformed_headers() {
    let Some(dir) = corpus() else { return };
    let check = |file: &str, offset: u64, what: &str| {
        let path = dir.join(file);
        let err = CaptureReader::open(&path).unwrap_err();
        assert_eq!(err.offset(), offset, "{err}");
        assert_eq!(
            err.to_string(),
            format!("{}: byte {offset}: {what}", path.display())
        );
        err
    };
    // Wireshark: "pcap: network type reserved field not zero (0x00300000)".
    // libpcap 1.10 opens it and reports link type 0x300000 (it masks with
    // 0x03ffffff); see the module docs for why this reader rejects it.
    let e = check(
        "libpcap_linktype-reserved-field-not-zero.pcap",
        20,
        "link type field 0x00300000 has reserved bits set (mask 0x03ff0000)",
    );
    assert!(matches!(
        e.kind(),
        CaptureErrorKind::LinkTypeReserved(0x0030_0000)
    ));
    // Wireshark: "pcap: major version 1 unsupported".
    check(
        "libpcap_pcap-invalid-version-1.pcap",
        4,
        "unsupported pcap version 1.4",
    );
    // Wireshark: "pcapng: unknown SHB version 0.1".
    check(
        "libpcap_pcapng-invalid-vers-1.pcapng",
        12,
        "unsupported pcapng version 0.1",
    );
    // The SHB says 52 bytes, and its last four bytes are "0000". libpcap
    // reports the same ("block total length in header and trailer don't
    // match"); Wireshark reports the option ("Not enough data to handle
    // option of length 12336"), which this reader would report next.
    check(
        "libpcap_shb-option-too-long.pcapng",
        48,
        "trailing block length 808464432 differs from the leading length 52",
    );
}

/// (file, format, gzip, count, first ts_ns, last ts_ns), from tshark.
const TSHARK: &[(&str, FileFormat, bool, usize, u64, u64)] = &[
    (
        "pcpp_tls2.pcap",
        FileFormat::Pcap,
        false,
        7451,
        1_609_829_736_669_007_000,
        1_609_829_882_471_134_000,
    ),
    // Two captures concatenated: the last packet is years after the first.
    (
        "pcpp_many-protocols.pcap",
        FileFormat::Pcap,
        false,
        4709,
        1_277_840_495_135_052_000,
        1_420_290_330_099_620_000,
    ),
    // pcapng despite the name.
    (
        "cesnet_vlan.pcap",
        FileFormat::Pcapng,
        false,
        6,
        946_712_870_501_268_000,
        946_712_873_333_401_000,
    ),
    (
        "pcpp_ipv4-malformed.pcap",
        FileFormat::Pcapng,
        false,
        2,
        1_350_802_591_754_299_000,
        1_571_915_896_647_494_000,
    ),
    (
        "zeek_vlan-pcp-dei.pcapng",
        FileFormat::Pcapng,
        false,
        9,
        1_763_070_394_994_237_000,
        1_763_070_394_994_573_000,
    ),
    // Classic pcap despite the name.
    (
        "ddos_pkt.TCP.DOMINATE.syn.ecn.cwr.pcapng",
        FileFormat::Pcap,
        false,
        9878,
        1_617_292_545_785_081_000,
        1_617_292_580_057_107_000,
    ),
    (
        "zeek_echo-connections.pcap.gz",
        FileFormat::Pcap,
        true,
        82582,
        1_627_225_020_686_470_000,
        1_627_225_027_180_797_000,
    ),
    (
        "zeek_mpls-6in6-broken.pcap.gz",
        FileFormat::Pcap,
        true,
        1811,
        1_500_557_630_000_000_000,
        1_500_557_634_000_000_000,
    ),
    // After 2038: needs the unsigned seconds field.
    (
        "tcpdump_ip6_frag_asan.pcap",
        FileFormat::Pcap,
        false,
        1,
        2_145_916_800_000_000_000,
        2_145_916_800_000_000_000,
    ),
];

#[test]
fn counts_and_timestamps_match_tshark() {
    let Some(dir) = corpus() else { return };
    for &(file, format, gzip, count, first, last) in TSHARK {
        let mut r = CaptureReader::open(&dir.join(file)).unwrap();
        assert_eq!(r.format().file, format, "{file}");
        assert_eq!(r.format().gzip, gzip, "{file}");
        let mut n = 0;
        let mut ts = (0, 0);
        while let Some(rec) = r.next_record().unwrap() {
            if n == 0 {
                ts.0 = rec.ts_ns;
            }
            ts.1 = rec.ts_ns;
            assert!(rec.data.len() <= 256 * 1024);
            n += 1;
        }
        assert_eq!((n, ts.0, ts.1), (count, first, last), "{file}");
    }
}

#[test]
fn fuzzed_tcpdump_files_keep_their_odd_lengths() {
    let Some(dir) = corpus() else { return };
    // tshark: frame.len 262144, frame.cap_len 48, time 808464432.999999;
    // the link-type field is 0x300000e5: FCS-length bits without the
    // FCS-present bit, which are ignored, and link type 229 (IPv6).
    let (recs, err) = read_all(dir.join("tcpdump_ipv6hdr-heapoverflow.pcap"));
    assert!(err.is_none());
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].orig_len, 262_144);
    assert_eq!(recs[0].data.len(), 48);
    assert_eq!(recs[0].ts_ns, 808_464_432_999_999_000);
    assert_eq!(recs[0].link_type, dataplane::wire::LinkType::RawIp);
}
