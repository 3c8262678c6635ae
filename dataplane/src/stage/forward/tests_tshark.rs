//! A second opinion on the frames the router makes: every kind written to
//! a pcap and read back by `tshark` (Wireshark's dissectors verify the
//! IPv4 header, ICMP and ICMPv6 checksums and flag malformed packets).
//! Skipped, with the reason printed, where `tshark` is not installed.

use super::tests::{CFG, MAC_A, MAC_B, v4, v6};
use super::*;
use crate::chain::Chain;
use crate::config::RouterConfig;
use crate::io::capture::CaptureWriter;
use crate::io::memory::MemoryPorts;
use crate::wire::LinkType;

/// The frames the router sends for a batch exercising every builder.
fn router_frames() -> Vec<Vec<u8>> {
    let cfg = RouterConfig::from_toml_str(CFG, "t").unwrap();
    let mut chain = Chain::build(&cfg).unwrap();
    let mut tx = MemoryPorts::new(4).keep_sent(true);
    let t = Timestamp::from_nanos(1_000_000_000);
    let mut ping4 = v4(MAC_A, [10, 1, 0, 7], [10, 1, 0, 1], 64, 12, false);
    ping4[23] = 1;
    ping4[24..26].fill(0);
    let s = !checksum::sum(&ping4[14..34]);
    ping4[24..26].copy_from_slice(&s.to_be_bytes());
    ping4[34..38].copy_from_slice(&[8, 0, 0, 0]);
    let s = !checksum::sum(&ping4[34..]);
    ping4[36..38].copy_from_slice(&s.to_be_bytes());
    let mut ping6 = v6(MAC_A, "2001:db8:1::7", "2001:db8:1::1", 64, 12);
    ping6[20] = 58;
    ping6[54..58].copy_from_slice(&[128, 0, 0, 0]);
    let mut arp = vec![0xff; 6];
    arp.extend_from_slice(&[2, 0, 0, 0, 1, 0x20, 0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
    arp.extend_from_slice(&[
        2, 0, 0, 0, 1, 0x20, 10, 1, 0, 32, 0, 0, 0, 0, 0, 0, 10, 1, 0, 1,
    ]);
    let mut ns = Vec::new();
    ndisc::neighbour_solicit(
        &mut ns,
        MacAddr([2, 0, 0, 0, 1, 0x20]),
        "2001:db8:1::20".parse().unwrap(),
        "2001:db8:1::1".parse().unwrap(),
    );
    let frames = [
        (0, v4(MAC_A, [10, 1, 0, 7], [10, 9, 3, 4], 1, 700, false)),
        (0, v4(MAC_A, [10, 1, 0, 7], [10, 9, 3, 4], 64, 1400, false)),
        (0, v6(MAC_A, "2001:db8:1::7", "2001:db8:9::1", 1, 1400)),
        (0, v6(MAC_A, "2001:db8:1::7", "2001:db8:9::1", 64, 1400)),
        (0, ping4),
        (0, ping6),
        (0, arp),
        (0, ns),
        (0, v4(MAC_A, [10, 1, 0, 7], [10, 9, 3, 4], 64, 100, true)),
        (1, v4(MAC_B, [10, 2, 0, 7], [10, 1, 0, 50], 64, 100, false)),
        (1, v6(MAC_B, "2001:db8:2::7", "2001:db8:1::50", 64, 100)),
    ];
    let mut b = Batch::new();
    for (port, f) in &frames {
        b.push_from(t, f.len() as u32, LinkType::Ethernet, *port, f);
    }
    chain.process(&mut b, t, &mut tx);
    tx.take_sent().into_iter().map(|s| s.frame).collect()
}

#[test]
fn tshark_finds_every_checksum_good() {
    let frames = router_frames();
    // 2 time exceeded, 2 too big, 2 echo replies, an ARP reply, an
    // advertisement, the forwarded tagged frame, an ARP request and a
    // solicitation.
    assert_eq!(frames.len(), 11);
    let Ok(v) = std::process::Command::new("tshark")
        .arg("--version")
        .output()
    else {
        eprintln!("skipped: tshark is not installed");
        return;
    };
    assert!(v.status.success());
    let path = std::env::temp_dir().join(format!("bp-forward-{}.pcap", std::process::id()));
    let mut w = CaptureWriter::create(&path, LinkType::Ethernet, 65535).unwrap();
    for (i, f) in frames.iter().enumerate() {
        w.write(i as u64 * 1000, f.len() as u32, f).unwrap();
    }
    w.finish().unwrap();
    let out = std::process::Command::new("tshark")
        .args(["-n", "-r"])
        .arg(&path)
        .args([
            "-o",
            "ip.check_checksum:TRUE",
            "-T",
            "fields",
            "-E",
            "separator=|",
            "-e",
            "frame.number",
            "-e",
            "_ws.col.Protocol",
            "-e",
            "ip.checksum.status",
            "-e",
            "icmp.checksum.status",
            "-e",
            "icmpv6.checksum.status",
            "-e",
            "_ws.malformed",
            "-e",
            "_ws.col.Info",
        ])
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), frames.len(), "{text}");
    let (mut icmp, mut icmp6) = (0, 0);
    for l in &lines {
        let f: Vec<&str> = l.split('|').collect();
        assert_eq!(f.len(), 7, "{l}");
        // Wireshark's checksum status: 1 is good (0 bad, 2 unverified).
        for (i, name) in [(2, "ip"), (3, "icmp"), (4, "icmpv6")] {
            // Quoted packets carry inner checksums too: all must be good.
            assert!(
                f[i].is_empty() || f[i].split(',').all(|s| s == "1"),
                "{name} checksum not good: {l}"
            );
        }
        assert!(f[5].is_empty(), "malformed: {l}");
        icmp += usize::from(!f[3].is_empty());
        icmp6 += usize::from(!f[4].is_empty());
    }
    assert_eq!((icmp, icmp6), (3, 5), "{text}");
}
