//! Hand-built pcap and pcapng files: every format variant the reader
//! supports, and every fault it must report (with its offset), plus the
//! writer round trip.

mod capture_common;

use std::io::{Cursor, Write};

use capture_common::*;
use dataplane::io::capture::{
    CaptureErrorKind, CaptureFormat, CaptureReader, CaptureWriter, FileFormat, GzipError,
    MAX_BLOCK_LEN, MAX_INTERFACES, MAX_ORIG_LEN, MAX_RECORD_LEN, OwnedRecord, PcapNgWriter,
    TimeResolution, drain, read_all,
};
use dataplane::wire::LinkType;

/// A minimal little-endian, microsecond pcap with one 4-byte record.
const PCAP_LE_US: [u8; 44] = [
    0xd4, 0xc3, 0xb2, 0xa1, // magic a1b2c3d4, little-endian
    0x02, 0x00, 0x04, 0x00, // version 2.4
    0x00, 0x00, 0x00, 0x00, // thiszone
    0x00, 0x00, 0x00, 0x00, // sigfigs
    0xff, 0xff, 0x00, 0x00, // snaplen 65535
    0x01, 0x00, 0x00, 0x00, // linktype 1, Ethernet
    // record at byte 24
    0x10, 0x00, 0x00, 0x00, // ts_sec 16
    0x20, 0xa1, 0x07, 0x00, // ts_usec 500_000
    0x04, 0x00, 0x00, 0x00, // caplen 4
    0x40, 0x00, 0x00, 0x00, // orig_len 64
    0xde, 0xad, 0xbe, 0xef, // data
];

/// The same record, big-endian, nanoseconds.
const PCAP_BE_NS: [u8; 44] = [
    0xa1, 0xb2, 0x3c, 0x4d, // magic a1b23c4d, big-endian
    0x00, 0x02, 0x00, 0x04, // version 2.4
    0x00, 0x00, 0x00, 0x00, // thiszone
    0x00, 0x00, 0x00, 0x00, // sigfigs
    0x00, 0x00, 0xff, 0xff, // snaplen 65535
    0x00, 0x00, 0x00, 0x65, // linktype 101, raw IP
    // record at byte 24
    0x00, 0x00, 0x00, 0x10, // ts_sec 16
    0x1d, 0xcd, 0x65, 0x01, // ts_nsec 500_000_001
    0x00, 0x00, 0x00, 0x04, // caplen 4
    0x00, 0x00, 0x00, 0x40, // orig_len 64
    0xde, 0xad, 0xbe, 0xef, // data
];

/// A minimal little-endian pcapng: SHB, IDB (Ethernet, if_tsresol 9),
/// EPB with 4 bytes of data (at byte 60, its trailer at 92).
const PCAPNG_LE: [u8; 96] = [
    // section header block at byte 0
    0x0a, 0x0d, 0x0d, 0x0a, // type
    0x1c, 0x00, 0x00, 0x00, // length 28
    0x4d, 0x3c, 0x2b, 0x1a, // byte-order magic: little-endian
    0x01, 0x00, 0x00, 0x00, // version 1.0
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // section length -1
    0x1c, 0x00, 0x00, 0x00, // length 28
    // interface description block at byte 28
    0x01, 0x00, 0x00, 0x00, // type 1
    0x20, 0x00, 0x00, 0x00, // length 32
    0x01, 0x00, 0x00, 0x00, // linktype 1, reserved
    0x00, 0x00, 0x04, 0x00, // snaplen 262144
    0x09, 0x00, 0x01, 0x00, // if_tsresol, length 1
    0x09, 0x00, 0x00, 0x00, // 10^-9, padding
    0x00, 0x00, 0x00, 0x00, // opt_endofopt
    0x20, 0x00, 0x00, 0x00, // length 32
    // enhanced packet block at byte 60
    0x06, 0x00, 0x00, 0x00, // type 6
    0x24, 0x00, 0x00, 0x00, // length 36
    0x00, 0x00, 0x00, 0x00, // interface 0
    0x00, 0x00, 0x00, 0x00, // timestamp high
    0x2a, 0x00, 0x00, 0x00, // timestamp low: 42 ns
    0x04, 0x00, 0x00, 0x00, // caplen 4
    0x40, 0x00, 0x00, 0x00, // orig_len 64
    0xde, 0xad, 0xbe, 0xef, // data
    0x24, 0x00, 0x00, 0x00, // length 36
];

fn one(bytes: &[u8]) -> OwnedRecord {
    let (recs, err) = read_bytes("t", bytes);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(recs.len(), 1);
    recs.into_iter().next().unwrap()
}

fn fault(bytes: &[u8]) -> (Vec<OwnedRecord>, String, u64, CaptureErrorKind) {
    let (recs, err) = read_bytes("t.pcap", bytes);
    let err = err.expect("expected a fault");
    let shown = err.to_string();
    let offset = err.offset();
    assert!(
        offset <= bytes.len() as u64,
        "offset {offset} past {} bytes",
        bytes.len()
    );
    assert!(
        shown.starts_with(&format!("t.pcap: byte {offset}: ")),
        "{shown}"
    );
    (recs, shown, offset, err.into_kind())
}

// ---------------------------------------------------------------- pcap

#[test]
fn parse_pcap_le_microseconds() {
    let mut r = CaptureReader::from_reader("t", Cursor::new(PCAP_LE_US.to_vec())).unwrap();
    assert_eq!(
        r.format(),
        CaptureFormat {
            file: FileFormat::Pcap,
            gzip: false
        }
    );
    assert_eq!(r.pcap_fcs_len(), None);
    let rec = r.next_record().unwrap().unwrap();
    assert_eq!(rec.ts_ns, 16_500_000_000);
    assert_eq!(rec.orig_len, 64);
    assert_eq!(rec.link_type, LinkType::Ethernet);
    assert_eq!(rec.data, [0xde, 0xad, 0xbe, 0xef]);
    assert!(r.next_record().unwrap().is_none());
    assert_eq!(r.position(), 44);
}

#[test]
fn parse_pcap_be_nanoseconds() {
    let rec = one(&PCAP_BE_NS);
    assert_eq!(rec.ts_ns, 16_500_000_001);
    assert_eq!(rec.orig_len, 64);
    assert_eq!(rec.link_type, LinkType::RawIp);
    assert_eq!(rec.data, [0xde, 0xad, 0xbe, 0xef]);
}

#[test]
fn parse_pcap_all_four_magics() {
    for be in [false, true] {
        for nanos in [false, true] {
            let mut f = pcap_header(be, nanos, 113);
            f.extend(pcap_record(be, 7, 999, 100, &payload(20, 1)));
            f.extend(pcap_record(be, 8, 0, 0, &[]));
            let (recs, err) = read_bytes("t", &f);
            assert!(err.is_none(), "{err:?}");
            let frac = if nanos { 999 } else { 999_000 };
            assert_eq!(recs[0].ts_ns, 7_000_000_000 + frac);
            assert_eq!(recs[0].link_type, LinkType::LinuxSll);
            assert_eq!(recs[0].orig_len, 100);
            assert_eq!(recs[0].data, payload(20, 1));
            assert_eq!(recs[1].ts_ns, 8_000_000_000);
            assert!(recs[1].data.is_empty());
        }
    }
}

#[test]
fn pcap_record_header_cut_short() {
    let (recs, shown, offset, kind) = fault(&PCAP_LE_US[..32]);
    assert!(recs.is_empty());
    assert_eq!(offset, 24);
    assert_eq!(
        shown,
        "t.pcap: byte 24: record header cut short (8 of 16 bytes)"
    );
    assert!(matches!(kind, CaptureErrorKind::Truncated { .. }));
}

#[test]
fn pcap_record_data_cut_short_after_a_good_record() {
    let mut f = PCAP_LE_US.to_vec();
    f.extend(pcap_record(false, 17, 0, 60, &payload(60, 0)));
    f.truncate(44 + 16 + 10);
    let (recs, shown, offset, _) = fault(&f);
    assert_eq!(recs.len(), 1, "the good record comes first");
    assert_eq!(offset, 44 + 16);
    assert_eq!(
        shown,
        "t.pcap: byte 60: record data cut short (10 of 60 bytes)"
    );
}

#[test]
fn pcap_header_cut_short() {
    let (_, shown, offset, _) = fault(&PCAP_LE_US[..10]);
    assert_eq!(offset, 0);
    assert_eq!(
        shown,
        "t.pcap: byte 0: pcap file header cut short (10 of 24 bytes)"
    );
}

#[test]
fn zero_length_file() {
    let (recs, shown, offset, kind) = fault(&[]);
    assert!(recs.is_empty());
    assert_eq!(offset, 0);
    assert!(matches!(kind, CaptureErrorKind::Empty));
    assert_eq!(shown, "t.pcap: byte 0: empty file: no capture header");
}

#[test]
fn file_shorter_than_a_magic_number() {
    let (_, shown, _, _) = fault(&[0xd4, 0xc3]);
    assert_eq!(
        shown,
        "t.pcap: byte 0: magic number cut short (2 of 4 bytes)"
    );
}

#[test]
fn bad_magic() {
    let (_, shown, offset, kind) = fault(b"GET / HTTP/1.1\r\n\r\n");
    assert_eq!(offset, 0);
    assert!(matches!(kind, CaptureErrorKind::BadMagic(0x4745_5420)));
    assert_eq!(
        shown,
        "t.pcap: byte 0: unknown magic number 0x47455420 (\"GET \"): not a pcap, pcapng or gzip file"
    );
    let (_, shown, _, _) = fault(&[0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0]);
    assert_eq!(
        shown,
        "t.pcap: byte 0: unknown magic number 0xdeadbeef: not a pcap, pcapng or gzip file"
    );
}

/// Versions libpcap reads: 2.0-2.4 and 543.0; before 2.3 (and in 543.0)
/// the record's two lengths are the other way round, in 2.3 they may be
/// (swapped when the first is the larger), as libpcap reads them.
#[test]
fn pcap_versions_libpcap_reads() {
    let data = [1u8, 2, 3, 4];
    for (major, minor, swapped) in [
        (2, 0, true),
        (2, 1, true),
        (2, 2, true),
        (2, 3, true),
        (2, 4, false),
        (543, 0, true),
    ] {
        let mut f = pcap_header_version(false, false, 1, major, minor);
        // A 4-byte capture of a 60-byte frame, lengths as the version
        // writes them.
        let mut rec = pcap_record(false, 1, 0, 60, &data);
        if swapped {
            rec[8..12].copy_from_slice(&60u32.to_le_bytes());
            rec[12..16].copy_from_slice(&4u32.to_le_bytes());
        }
        f.extend(rec);
        let (recs, err) = read_bytes("t.pcap", &f);
        assert!(err.is_none(), "{major}.{minor}: {err:?}");
        assert_eq!(recs.len(), 1, "{major}.{minor}");
        assert_eq!(
            (recs[0].data.as_slice(), recs[0].orig_len),
            (&data[..], 60),
            "{major}.{minor}"
        );
    }
    // 2.3 in the modern order (captured <= original) is read as it is.
    let mut f = pcap_header_version(false, false, 1, 2, 3);
    f.extend(pcap_record(false, 1, 0, 60, &data));
    let (recs, err) = read_bytes("t.pcap", &f);
    assert!(err.is_none());
    assert_eq!((recs[0].data.len(), recs[0].orig_len), (4, 60));
}

/// An absurd original length (2^32 - 1 for 60 bytes) is taken as the
/// captured length and counted; a plausible one is kept.
#[test]
fn contradicting_original_lengths_are_fixed_and_counted() {
    let data = [7u8; 60];
    let mut f = pcap_header(false, false, 1);
    f.extend(pcap_record(false, 1, 0, u32::MAX, &data));
    f.extend(pcap_record(false, 2, 0, 10, &data));
    f.extend(pcap_record(false, 3, 0, 1514, &data));
    f.extend(pcap_record(false, 4, 0, MAX_ORIG_LEN, &data));
    let mut r = CaptureReader::from_reader("t.pcap", Cursor::new(f)).unwrap();
    let mut lens = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        lens.push(rec.orig_len);
    }
    assert_eq!(lens, [60, 10, 1514, MAX_ORIG_LEN]);
    assert_eq!(r.lengths_fixed(), 1);
}

/// A section may declare MAX_INTERFACES interfaces; one more is an error
/// at that block (a flood of compressed interface blocks would otherwise
/// take gigabytes), and the packets before it are read.
#[test]
fn too_many_pcapng_interfaces_are_refused() {
    let one = idb(false, 1, 65535, &[]);
    let mut f = shb(false, 1, 0, &[]);
    f.extend(idb(false, 1, 65535, &[]));
    f.extend(epb(false, 0, 1, 4, &[1, 2, 3, 4], &[]));
    for _ in 1..MAX_INTERFACES {
        f.extend_from_slice(&one);
    }
    let last = f.len() as u64;
    f.extend_from_slice(&one);
    let (recs, err) = read_bytes("t.pcapng", &f);
    assert_eq!(recs.len(), 1);
    let err = err.expect("refused");
    assert_eq!(err.offset(), last);
    assert!(
        err.to_string().ends_with(&format!(
            "more than {MAX_INTERFACES} interfaces in one section"
        )),
        "{err}"
    );
    // Exactly the limit reads.
    f.truncate(last as usize);
    let (recs, err) = read_bytes("t.pcapng", &f);
    assert!(err.is_none() && recs.len() == 1, "{err:?}");
}

#[test]
fn pcap_bad_version() {
    for (major, minor) in [(1, 4), (2, 5), (3, 0), (543, 1)] {
        let mut f = pcap_header_version(false, false, 1, major, minor);
        f.extend(pcap_record(false, 1, 0, 4, &[1, 2, 3, 4]));
        let (recs, shown, offset, _) = fault(&f);
        assert!(recs.is_empty());
        assert_eq!(offset, 4);
        assert_eq!(
            shown,
            format!("t.pcap: byte 4: unsupported pcap version {major}.{minor}")
        );
    }
}

#[test]
fn pcap_record_too_large() {
    let mut f = pcap_header(false, false, 1);
    let mut rec = pcap_record(false, 1, 0, 0, &[]);
    rec[8..12].copy_from_slice(&(MAX_RECORD_LEN + 1).to_le_bytes());
    f.extend(rec);
    let (_, shown, offset, _) = fault(&f);
    assert_eq!(offset, 32);
    assert_eq!(
        shown,
        "t.pcap: byte 32: captured length 262145 exceeds the 262144-byte record limit"
    );
    // Exactly the limit is fine.
    let mut f = pcap_header(false, false, 1);
    f.extend(pcap_record(
        false,
        1,
        0,
        MAX_RECORD_LEN,
        &vec![7; MAX_RECORD_LEN as usize],
    ));
    assert_eq!(one(&f).data.len(), MAX_RECORD_LEN as usize);
}

#[test]
fn pcap_linktype_reserved_bits_rejected_fcs_bits_reported() {
    let f = pcap_header(false, false, 0x0030_0000);
    let (_, shown, offset, kind) = fault(&f);
    assert_eq!(offset, 20);
    assert!(matches!(
        kind,
        CaptureErrorKind::LinkTypeReserved(0x0030_0000)
    ));
    assert_eq!(
        shown,
        "t.pcap: byte 20: link type field 0x00300000 has reserved bits set (mask 0x03ff0000)"
    );

    // FCS present (bit 26), 2 x 16-bit words: 4 bytes of FCS on Ethernet.
    let mut f = pcap_header(false, false, 0x2400_0001);
    f.extend(pcap_record(false, 1, 0, 4, &[1, 2, 3, 4]));
    let mut r = CaptureReader::from_reader("t", Cursor::new(f)).unwrap();
    assert_eq!(r.pcap_fcs_len(), Some(4));
    assert_eq!(
        r.next_record().unwrap().unwrap().link_type,
        LinkType::Ethernet
    );

    // FCS length bits without the "present" bit (as in tcpdump's fuzzed
    // test files): ignored.
    let mut f = pcap_header(false, false, 0x3000_00e5);
    f.extend(pcap_record(false, 1, 0, 4, &[1, 2, 3, 4]));
    let r = CaptureReader::from_reader("t", Cursor::new(f)).unwrap();
    assert_eq!(r.pcap_fcs_len(), None);
}

#[test]
fn terminal_state_after_error() {
    let mut f = PCAP_LE_US.to_vec();
    f.extend([0u8; 5]);
    let mut r = CaptureReader::from_reader("t", Cursor::new(f)).unwrap();
    assert!(r.next_record().unwrap().is_some());
    assert!(r.next_record().is_err());
    for _ in 0..3 {
        assert!(r.next_record().unwrap().is_none());
    }
}

// ---------------------------------------------------------------- pcapng

/// Three named and unnamed interfaces (little-endian): IDB 0 named "r-a"
/// (microseconds), IDB 1 without options, IDB 2 named "r-c" with a
/// terminating NUL and if_tsresol 9; an EPB on interface 2, then one on
/// interface 0.
const PCAPNG_NAMES: [u8; 192] = [
    // section header block at byte 0
    0x0a, 0x0d, 0x0d, 0x0a, // type
    0x1c, 0x00, 0x00, 0x00, // length 28
    0x4d, 0x3c, 0x2b, 0x1a, // byte-order magic: little-endian
    0x01, 0x00, 0x00, 0x00, // version 1.0
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // section length -1
    0x1c, 0x00, 0x00, 0x00, // length 28
    // interface description block 0 at byte 28
    0x01, 0x00, 0x00, 0x00, // type 1
    0x20, 0x00, 0x00, 0x00, // length 32
    0x01, 0x00, 0x00, 0x00, // linktype 1, reserved
    0x00, 0x00, 0x04, 0x00, // snaplen 262144
    0x02, 0x00, 0x03, 0x00, // if_name (byte 44), length 3
    b'r', b'-', b'a', 0x00, // "r-a", padding
    0x00, 0x00, 0x00, 0x00, // opt_endofopt
    0x20, 0x00, 0x00, 0x00, // length 32
    // interface description block 1 at byte 60: no options
    0x01, 0x00, 0x00, 0x00, // type 1
    0x14, 0x00, 0x00, 0x00, // length 20
    0x01, 0x00, 0x00, 0x00, // linktype 1, reserved
    0x00, 0x00, 0x04, 0x00, // snaplen 262144
    0x14, 0x00, 0x00, 0x00, // length 20
    // interface description block 2 at byte 80
    0x01, 0x00, 0x00, 0x00, // type 1
    0x28, 0x00, 0x00, 0x00, // length 40
    0x01, 0x00, 0x00, 0x00, // linktype 1, reserved
    0x00, 0x00, 0x04, 0x00, // snaplen 262144
    0x02, 0x00, 0x04, 0x00, // if_name, length 4
    b'r', b'-', b'c', 0x00, // "r-c" and a terminating NUL
    0x09, 0x00, 0x01, 0x00, // if_tsresol, length 1
    0x09, 0x00, 0x00, 0x00, // 10^-9, padding
    0x00, 0x00, 0x00, 0x00, // opt_endofopt
    0x28, 0x00, 0x00, 0x00, // length 40
    // enhanced packet block at byte 120
    0x06, 0x00, 0x00, 0x00, // type 6
    0x24, 0x00, 0x00, 0x00, // length 36
    0x02, 0x00, 0x00, 0x00, // interface 2
    0x00, 0x00, 0x00, 0x00, // timestamp high
    0x2a, 0x00, 0x00, 0x00, // timestamp low: 42 ns
    0x04, 0x00, 0x00, 0x00, // caplen 4
    0x40, 0x00, 0x00, 0x00, // orig_len 64
    0xde, 0xad, 0xbe, 0xef, // data
    0x24, 0x00, 0x00, 0x00, // length 36
    // enhanced packet block at byte 156
    0x06, 0x00, 0x00, 0x00, // type 6
    0x24, 0x00, 0x00, 0x00, // length 36
    0x00, 0x00, 0x00, 0x00, // interface 0
    0x00, 0x00, 0x00, 0x00, // timestamp high
    0x07, 0x00, 0x00, 0x00, // timestamp low: 7 us
    0x04, 0x00, 0x00, 0x00, // caplen 4
    0x04, 0x00, 0x00, 0x00, // orig_len 4
    0x01, 0x02, 0x03, 0x04, // data
    0x24, 0x00, 0x00, 0x00, // length 36
];

#[test]
fn parse_pcapng_literal() {
    let mut r = CaptureReader::from_reader("t", Cursor::new(PCAPNG_LE.to_vec())).unwrap();
    assert_eq!(r.format().file, FileFormat::Pcapng);
    let rec = r.next_record().unwrap().unwrap();
    assert_eq!(rec.interface, 0);
    assert_eq!(rec.ts_ns, 42);
    assert_eq!(rec.orig_len, 64);
    assert_eq!(rec.link_type, LinkType::Ethernet);
    assert_eq!(rec.data, [0xde, 0xad, 0xbe, 0xef]);
    // The interface has no if_name.
    assert_eq!(r.interface_name(0), None);
    assert_eq!(r.interface_count(), 1);
    assert!(r.next_record().unwrap().is_none());
}

#[test]
fn pcapng_interface_names() {
    let mut r = CaptureReader::from_reader("t", Cursor::new(PCAPNG_NAMES.to_vec())).unwrap();
    // Interfaces are read with the records that follow them.
    assert_eq!(r.interface_count(), 0);
    let rec = r.next_record().unwrap().unwrap().to_owned_record();
    assert_eq!((rec.interface, rec.ts_ns, rec.orig_len), (2, 42, 64));
    assert_eq!(rec.data, [0xde, 0xad, 0xbe, 0xef]);
    assert_eq!(r.interface_count(), 3);
    assert_eq!(r.interface_name(0), Some("r-a"));
    assert_eq!(r.interface_name(1), None, "no if_name");
    assert_eq!(r.interface_name(2), Some("r-c"), "the NUL is dropped");
    assert_eq!(r.interface_name(3), None, "no such interface");
    let rec = r.next_record().unwrap().unwrap();
    assert_eq!((rec.interface, rec.ts_ns), (0, 7_000));
    assert!(r.next_record().unwrap().is_none());
}

#[test]
fn pcapng_names_belong_to_their_section() {
    let mut f = PCAPNG_NAMES.to_vec();
    f.extend(shb(true, 1, 0, &[]));
    f.extend(idb(
        true,
        1,
        0,
        &[opt(true, 2, b"eth9"), end_opt()].concat(),
    ));
    f.extend(epb(true, 0, 5, 4, &[9, 9, 9, 9], &[]));
    let mut r = CaptureReader::from_reader("t", Cursor::new(f)).unwrap();
    r.next_record().unwrap().unwrap();
    r.next_record().unwrap().unwrap();
    assert_eq!(r.interface_name(2), Some("r-c"));
    let rec = r.next_record().unwrap().unwrap();
    assert_eq!((rec.interface, rec.ts_ns), (0, 5_000));
    assert_eq!(r.interface_count(), 1);
    assert_eq!(r.interface_name(0), Some("eth9"));
    assert_eq!(r.interface_name(2), None);
}

#[test]
fn pcapng_obsolete_packet_block_names_its_interface() {
    let mut f = shb(false, 1, 0, &[]);
    f.extend(idb(false, 1, 0, &opt(false, 2, b"a")));
    f.extend(idb(false, 1, 0, &opt(false, 2, b"b")));
    f.extend(opb(false, 1, 3, 4, &[1, 2, 3, 4]));
    f.extend(spb(false, 4, &[1, 2, 3, 4]));
    let mut r = CaptureReader::from_reader("t", Cursor::new(f)).unwrap();
    let (recs, err) = drain(&mut r);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(recs[0].interface, 1);
    assert_eq!(recs[1].interface, 0, "a simple packet is on interface 0");
    assert_eq!(r.interface_name(1), Some("b"));
}

#[test]
fn pcapng_if_name_length_past_the_block() {
    // if_name claims 9 bytes: 4 + 12 padded, where 12 remain.
    let mut f = PCAPNG_NAMES.to_vec();
    f[46..48].copy_from_slice(&9u16.to_le_bytes());
    let (recs, shown, offset, kind) = fault(&f);
    assert!(recs.is_empty());
    assert_eq!(offset, 44);
    assert!(matches!(
        kind,
        CaptureErrorKind::OptionOverrun {
            code: Some(2),
            need: 16,
            avail: 12,
            ..
        }
    ));
    assert_eq!(
        shown,
        "t.pcap: byte 44: interface description block option 2 needs 16 bytes but only 12 remain in the block"
    );
    // The largest length the field holds is refused the same way.
    f[46..48].copy_from_slice(&u16::MAX.to_le_bytes());
    let (_, shown, offset, _) = fault(&f);
    assert_eq!(offset, 44);
    assert!(shown.ends_with("option 2 needs 65540 bytes but only 12 remain in the block"));
}

#[test]
fn pcapng_if_name_not_utf8() {
    let mut f = PCAPNG_NAMES.to_vec();
    f[48] = 0xff;
    let (recs, shown, offset, kind) = fault(&f);
    assert!(recs.is_empty());
    assert_eq!(offset, 44);
    assert!(matches!(kind, CaptureErrorKind::BadOption { code: 2, .. }));
    assert_eq!(
        shown,
        "t.pcap: byte 44: interface description block option 2: if_name is not UTF-8"
    );
}

#[test]
fn pcapng_empty_or_repeated_if_name() {
    let mut f = shb(false, 1, 0, &[]);
    f.extend(idb(false, 1, 0, &[opt(false, 2, b""), end_opt()].concat()));
    f.extend(idb(
        false,
        1,
        0,
        &[opt(false, 2, b"first"), opt(false, 2, b"second"), end_opt()].concat(),
    ));
    f.extend(epb(false, 1, 0, 4, &[1, 2, 3, 4], &[]));
    let mut r = CaptureReader::from_reader("t", Cursor::new(f)).unwrap();
    assert_eq!(r.next_record().unwrap().unwrap().interface, 1);
    assert_eq!(r.interface_name(0), None, "an empty name is none");
    assert_eq!(r.interface_name(1), Some("first"));
}

#[test]
fn pcap_records_are_interface_0() {
    let mut r = CaptureReader::from_reader("t", Cursor::new(PCAP_LE_US.to_vec())).unwrap();
    assert_eq!(r.next_record().unwrap().unwrap().interface, 0);
    assert_eq!(r.interface_count(), 1);
    assert_eq!(r.interface_name(0), None);
}

/// SHB, IDB 0 (Ethernet, microseconds), IDB 1 (raw IP, snaplen 8), then
/// every packet block type and some blocks to skip.
fn mixed_pcapng(be: bool) -> Vec<u8> {
    let mut f = shb(be, 1, 0, &[opt(be, 4, b"test"), end_opt()].concat());
    f.extend(idb(be, 1, 0, &[]));
    f.extend(idb(be, 101, 8, &opt(be, 2, b"eth1")));
    f.extend(epb(
        be,
        0,
        1_500_000,
        99,
        &payload(5, 0),
        &[opt(be, 1, b"hi"), end_opt()].concat(),
    ));
    f.extend(block(be, 5, &[0u8; 20])); // interface statistics: skipped
    f.extend(block(be, 0x4000_0bad, &payload(33, 9))); // local-use type: skipped
    f.extend(opb(be, 1, 2_000_000, 1000, &payload(8, 3)));
    f.extend(spb(be, 60, &payload(60, 7)));
    f.extend(block(be, 4, &[0u8; 4])); // name resolution: skipped
    f
}

#[test]
fn parse_pcapng_every_packet_block_both_orders() {
    for be in [false, true] {
        let (recs, err) = read_bytes("t", &mixed_pcapng(be));
        assert!(err.is_none(), "{err:?}");
        assert_eq!(recs.len(), 3);
        assert_eq!(recs[0].ts_ns, 1_500_000_000);
        assert_eq!(recs[0].orig_len, 99);
        assert_eq!(recs[0].data, payload(5, 0));
        assert_eq!(recs[0].interface, 0);
        assert_eq!(recs[1].interface, 1);
        assert_eq!(recs[1].link_type, LinkType::RawIp);
        assert_eq!(recs[1].ts_ns, 2_000_000_000);
        assert_eq!(recs[1].data, payload(8, 3));
        // Simple packet: interface 0, no timestamp.
        assert_eq!(recs[2].ts_ns, 0);
        assert_eq!(recs[2].orig_len, 60);
        assert_eq!(recs[2].link_type, LinkType::Ethernet);
        assert_eq!(recs[2].data, payload(60, 7));
    }
}

#[test]
fn pcapng_simple_packet_cut_to_snaplen() {
    let mut f = shb(false, 1, 0, &[]);
    f.extend(idb(false, 1, 16, &[]));
    f.extend(spb(false, 60, &payload(60, 0)));
    assert_eq!(one(&f).data, payload(16, 0));
}

#[test]
fn pcapng_tsresol_nanoseconds() {
    let mut f = shb(false, 1, 0, &[]);
    f.extend(idb(false, 1, 0, &[opt(false, 9, &[9]), end_opt()].concat()));
    f.extend(epb(
        false,
        0,
        1_700_000_000_123_456_789,
        4,
        &[1, 2, 3, 4],
        &[],
    ));
    assert_eq!(one(&f).ts_ns, 1_700_000_000_123_456_789);
}

#[test]
fn pcapng_tsresol_power_of_two() {
    // 2^-20 s units: 3 s and 2^19 ticks (half a second).
    let mut f = shb(true, 1, 0, &[]);
    f.extend(idb(true, 1, 0, &opt(true, 9, &[0x80 | 20])));
    f.extend(epb(true, 0, (3 << 20) | (1 << 19), 4, &[1, 2, 3, 4], &[]));
    assert_eq!(one(&f).ts_ns, 3_500_000_000);
}

#[test]
fn pcapng_tsoffset_adds_seconds() {
    let mut f = shb(false, 1, 0, &[]);
    f.extend(idb(false, 1, 0, &opt(false, 14, &100i64.to_le_bytes())));
    f.extend(epb(false, 0, 1_000_000, 4, &[1, 2, 3, 4], &[]));
    assert_eq!(one(&f).ts_ns, 101_000_000_000);
}

#[test]
fn pcapng_tsresol_too_fine() {
    let mut f = shb(false, 1, 0, &[]);
    f.extend(idb(false, 1, 0, &opt(false, 9, &[20])));
    let (_, shown, offset, _) = fault(&f);
    assert_eq!(offset, 28 + 16);
    assert_eq!(
        shown,
        "t.pcap: byte 44: if_tsresol 0x14 is finer than this reader supports"
    );
}

#[test]
fn pcapng_multiple_sections_reset_interfaces() {
    let mut f = mixed_pcapng(false);
    let second = f.len() as u64;
    // Section 2, big-endian: one nanosecond interface.
    f.extend(shb(true, 1, 2, &[]));
    f.extend(idb(true, 113, 0, &opt(true, 9, &[9])));
    f.extend(epb(true, 0, 77, 4, &[9, 9, 9, 9], &[]));
    let (recs, err) = read_bytes("t", &f);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(recs.len(), 4);
    assert_eq!(recs[3].ts_ns, 77);
    assert_eq!(recs[3].link_type, LinkType::LinuxSll);

    // Interface 1 belonged to section 1 only.
    f.extend(epb(true, 1, 77, 4, &[9, 9, 9, 9], &[]));
    let at = f.len() as u64 - 36;
    let (recs, shown, offset, _) = fault(&f);
    assert_eq!(recs.len(), 4);
    assert_eq!(offset, at + 8);
    assert!(second < at);
    assert_eq!(
        shown,
        format!(
            "t.pcap: byte {}: interface id 1 unknown: the section declares 1 interface(s)",
            at + 8
        )
    );
}

#[test]
fn pcapng_epb_unknown_interface() {
    let mut f = PCAPNG_LE.to_vec();
    f.extend(epb(false, 3, 0, 4, &[1, 2, 3, 4], &[]));
    let (recs, shown, offset, kind) = fault(&f);
    assert_eq!(recs.len(), 1, "the good packet comes first");
    assert_eq!(offset, 104);
    assert!(matches!(
        kind,
        CaptureErrorKind::UnknownInterface { id: 3, count: 1 }
    ));
    assert_eq!(
        shown,
        "t.pcap: byte 104: interface id 3 unknown: the section declares 1 interface(s)"
    );
}

#[test]
fn pcapng_block_length_not_multiple_of_4() {
    let mut f = PCAPNG_LE.to_vec();
    f[64..68].copy_from_slice(&35u32.to_le_bytes()); // EPB length
    let (recs, shown, offset, _) = fault(&f);
    assert!(recs.is_empty());
    assert_eq!(offset, 64);
    assert_eq!(
        shown,
        "t.pcap: byte 64: block length 35 is not a multiple of 4"
    );
}

#[test]
fn pcapng_block_length_too_short() {
    let mut f = PCAPNG_LE.to_vec();
    f.extend([0x05, 0, 0, 0, 0x08, 0, 0, 0]); // ISB, length 8
    let (recs, shown, _, _) = fault(&f);
    assert_eq!(recs.len(), 1);
    assert_eq!(
        shown,
        "t.pcap: byte 100: block length 8 is less than the minimum of 12"
    );

    let mut f = PCAPNG_LE.to_vec();
    f.extend(block(false, 6, &[0u8; 16])); // EPB of 28 bytes
    let (_, shown, _, _) = fault(&f);
    assert_eq!(
        shown,
        "t.pcap: byte 100: block length 28 is less than the minimum of 32"
    );
}

#[test]
fn pcapng_trailing_length_mismatch() {
    let mut f = PCAPNG_LE.to_vec();
    f[92..96].copy_from_slice(&40u32.to_le_bytes());
    let (recs, shown, offset, kind) = fault(&f);
    assert!(recs.is_empty());
    assert_eq!(offset, 92);
    assert!(matches!(
        kind,
        CaptureErrorKind::BlockTrailerMismatch {
            leading: 36,
            trailing: 40
        }
    ));
    assert_eq!(
        shown,
        "t.pcap: byte 92: trailing block length 40 differs from the leading length 36"
    );
    // A skipped block's trailer is checked too.
    let mut f = PCAPNG_LE.to_vec();
    let mut isb = block(false, 5, &[0u8; 8]);
    let n = isb.len();
    isb[n - 4] = 0x99;
    f.extend(isb);
    let (recs, shown, _, _) = fault(&f);
    assert_eq!(recs.len(), 1);
    assert_eq!(
        shown,
        "t.pcap: byte 112: trailing block length 153 differs from the leading length 20"
    );
}

#[test]
fn pcapng_shb_option_too_long() {
    // Option 4 (shb_os) claims 100 bytes; the block holds 8 after its header.
    let mut bad = opt(false, 4, &[0x30; 4]);
    bad[2..4].copy_from_slice(&100u16.to_le_bytes());
    let f = shb(false, 1, 0, &bad);
    let (_, shown, offset, kind) = fault(&f);
    assert_eq!(offset, 24);
    assert!(matches!(
        kind,
        CaptureErrorKind::OptionOverrun {
            code: Some(4),
            need: 104,
            avail: 8,
            ..
        }
    ));
    assert_eq!(
        shown,
        "t.pcap: byte 24: section header block option 4 needs 104 bytes but only 8 remain in the block"
    );
}

#[test]
fn pcapng_epb_option_overrun() {
    let mut f = PCAPNG_LE[..60].to_vec();
    let mut bad = opt(false, 1, b"abcd");
    bad[2] = 9;
    f.extend(epb(false, 0, 0, 4, &[1, 2, 3, 4], &bad));
    let (recs, shown, _, _) = fault(&f);
    assert!(recs.is_empty());
    assert_eq!(
        shown,
        "t.pcap: byte 92: enhanced packet block option 1 needs 16 bytes but only 8 remain in the block"
    );
}

#[test]
fn pcapng_epb_data_overruns_block() {
    let mut f = PCAPNG_LE.to_vec();
    f[80..84].copy_from_slice(&5u32.to_le_bytes()); // caplen 5 > 4 bytes held
    let (_, shown, offset, _) = fault(&f);
    assert_eq!(offset, 80);
    assert_eq!(
        shown,
        "t.pcap: byte 80: enhanced packet block packet data needs 5 bytes but the block has only 4"
    );
}

#[test]
fn pcapng_bad_versions() {
    for (major, minor, ok) in [(1, 0, true), (1, 2, true), (0, 1, false), (2, 0, false)] {
        let mut f = shb(false, major, minor, &[]);
        f.extend(PCAPNG_LE[28..].iter());
        let (recs, err) = read_bytes("t.pcapng", &f);
        if ok {
            assert!(err.is_none());
            assert_eq!(recs.len(), 1);
        } else {
            let err = err.unwrap();
            assert_eq!(
                err.to_string(),
                format!("t.pcapng: byte 12: unsupported pcapng version {major}.{minor}")
            );
        }
    }
}

#[test]
fn pcapng_bad_byte_order_magic() {
    let mut f = PCAPNG_LE.to_vec();
    f[8..12].copy_from_slice(&[1, 2, 3, 4]);
    let (_, shown, offset, _) = fault(&f);
    assert_eq!(offset, 8);
    assert_eq!(
        shown,
        "t.pcap: byte 8: pcapng byte-order magic 0x01020304 is neither 0x1a2b3c4d nor its byte swap"
    );
}

#[test]
fn pcapng_cut_inside_a_block() {
    let (recs, shown, _, _) = fault(&PCAPNG_LE[..90]);
    assert!(recs.is_empty());
    assert_eq!(
        shown,
        "t.pcap: byte 60: enhanced packet block cut short (30 of 36 bytes)"
    );
    let (_, shown, _, _) = fault(&PCAPNG_LE[..63]);
    assert_eq!(
        shown,
        "t.pcap: byte 60: block header cut short (3 of 8 bytes)"
    );
    let (_, shown, _, _) = fault(&PCAPNG_LE[..10]);
    assert_eq!(
        shown,
        "t.pcap: byte 0: section header block cut short (10 of 12 bytes)"
    );
}

#[test]
fn pcapng_huge_blocks() {
    // A skipped block claiming nearly 4 GiB is streamed past, not loaded.
    let mut f = PCAPNG_LE.to_vec();
    f.extend([0x05, 0, 0, 0, 0xf0, 0xff, 0xff, 0xff]);
    f.extend([0u8; 64]);
    let (recs, shown, _, _) = fault(&f);
    assert_eq!(recs.len(), 1);
    assert_eq!(
        shown,
        "t.pcap: byte 96: block cut short (72 of 4294967280 bytes)"
    );
    // A packet block that large is refused before reading it.
    let mut f = PCAPNG_LE.to_vec();
    f.extend([0x06, 0, 0, 0]);
    f.extend((MAX_BLOCK_LEN + 4).to_le_bytes());
    let (_, shown, _, _) = fault(&f);
    assert_eq!(
        shown,
        "t.pcap: byte 100: enhanced packet block of 327684 bytes exceeds the 327680-byte limit"
    );
}

// ---------------------------------------------------------------- gzip

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

#[test]
fn gzip_is_transparent() {
    for plain in [PCAP_LE_US.to_vec(), mixed_pcapng(true)] {
        let z = gzip(&plain);
        let mut r = CaptureReader::from_reader("t.gz", Cursor::new(z.clone())).unwrap();
        assert!(r.format().gzip);
        let first = r.next_record().unwrap().unwrap().to_owned_record();
        assert_eq!(first, read_bytes("t", &plain).0[0]);
        assert_eq!(read_bytes("t", &z).0, read_bytes("t", &plain).0);
    }
}

#[test]
fn gzip_cut_or_corrupt_is_an_error() {
    let mut plain = PCAP_LE_US.to_vec();
    for i in 0..50 {
        plain.extend(pcap_record(false, i, 0, 100, &payload(100, i as u8)));
    }
    let z = gzip(&plain);
    let (recs, err) = read_bytes("t.gz", &z[..z.len() / 2]);
    assert!(err.is_some());
    assert!(recs.len() < 51);
    let mut bad = z.clone();
    bad[20] ^= 0xff;
    let (_, err) = read_bytes("t.gz", &bad);
    assert!(err.is_some());
}

/// A gzip file whose content is not a capture says it is gzip (its magic
/// `1f 8b` was understood) and what the content starts with.
#[test]
fn gzip_content_that_is_not_a_capture_is_named_as_such() {
    let z = gzip(b"hello, this is text, not a capture\n");
    let err = CaptureReader::from_reader("t.gz", Cursor::new(z)).unwrap_err();
    assert!(matches!(
        err.kind(),
        CaptureErrorKind::BadMagicInGzip(0x6865_6c6c)
    ));
    assert_eq!(
        err.to_string(),
        "t.gz: byte 0: gzip data (magic 1f 8b) whose content starts with unknown magic number \
         0x68656c6c (\"hell\"): not a pcap or pcapng capture"
    );
}

/// Bytes after the last gzip member: the records before are read, and the
/// fault says what follows the member, how much, and at which compressed
/// byte (the offset of the error is the decompressed stream's, where the
/// next record would start). Two members are one stream.
#[test]
fn garbage_after_the_gzip_member_is_shown_with_its_compressed_offset() {
    let mut plain = PCAP_LE_US.to_vec();
    for i in 0..5 {
        plain.extend(pcap_record(false, i, 0, 100, &payload(100, i as u8)));
    }
    let z = gzip(&plain);
    let mut two = gzip(&plain[..24 + 2 * 116]);
    two.extend(gzip(&plain[24 + 2 * 116..]));
    let (both, err) = read_bytes("t.gz", &two);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(both, read_bytes("t", &plain).0);
    for (tail, shown) in [
        (
            &b"GARBAGE-AFTER-THE-MEMBER"[..],
            "24 more bytes that are not a gzip member: 47 41 52 42 41 47 45 2d ...",
        ),
        (
            &[0u8; 3][..],
            "3 more bytes that are not a gzip member: 00 00 00",
        ),
    ] {
        let mut bad = z.clone();
        bad.extend_from_slice(tail);
        let (recs, err) = read_bytes("t.gz", &bad);
        assert_eq!(recs, read_bytes("t", &plain).0, "every record before");
        let err = err.unwrap();
        assert_eq!(err.offset(), plain.len() as u64);
        assert!(
            matches!(err.kind(), CaptureErrorKind::Gzip(GzipError::TrailingGarbage { at, .. }) if *at == z.len() as u64)
        );
        assert_eq!(
            err.to_string(),
            format!(
                "t.gz: byte {}: after the gzip data (ends at compressed byte {}): {shown}",
                plain.len(),
                z.len()
            )
        );
    }
    let (recs, err) = read_bytes("t.gz", &z[..z.len() - 3]);
    assert_eq!(recs, read_bytes("t", &plain).0, "the trailer alone is cut");
    assert_eq!(
        err.unwrap().kind().to_string(),
        format!(
            "gzip data cut short: the file ends at compressed byte {}, inside a member",
            z.len() - 3
        )
    );
}

// ---------------------------------------------------------------- files

#[test]
fn read_all_names_a_missing_file() {
    let (recs, err) = read_all("/nonexistent/x.pcap");
    assert!(recs.is_empty());
    let err = err.unwrap();
    assert_eq!(err.file(), "/nonexistent/x.pcap");
    assert_eq!(err.offset(), 0);
    assert!(matches!(err.kind(), CaptureErrorKind::Io(_)));
    assert!(
        err.to_string()
            .starts_with("/nonexistent/x.pcap: byte 0: I/O error: ")
    );
}

// ---------------------------------------------------------------- writer

fn sample_records() -> Vec<OwnedRecord> {
    (0..20u32)
        .map(|i| OwnedRecord {
            ts_ns: 1_600_000_000_000_000_000 + u64::from(i) * 1_234_567,
            interface: 0,
            orig_len: 100 + i,
            link_type: LinkType::Ethernet,
            data: payload(i as usize * 7, i as u8),
        })
        .collect()
}

#[test]
fn writer_round_trip_nanoseconds() {
    let recs = sample_records();
    let mut w = CaptureWriter::from_writer(Vec::new(), LinkType::Ethernet, 65535).unwrap();
    for r in &recs {
        w.write(r.ts_ns, r.orig_len, &r.data).unwrap();
    }
    let bytes = w.finish().unwrap();
    assert_eq!(bytes[..4], [0x4d, 0x3c, 0xb2, 0xa1]);
    let (back, err) = read_bytes("t", &bytes);
    assert!(err.is_none());
    assert_eq!(back, recs);
}

#[test]
fn writer_round_trip_microseconds_and_snaplen() {
    let recs = sample_records();
    let mut w = CaptureWriter::from_writer_with_resolution(
        Vec::new(),
        LinkType::RawIp,
        50,
        TimeResolution::Micro,
    )
    .unwrap();
    for r in &recs {
        w.write(r.ts_ns, r.orig_len, &r.data).unwrap();
    }
    let bytes = w.finish().unwrap();
    assert_eq!(bytes[..4], [0xd4, 0xc3, 0xb2, 0xa1]);
    let (back, err) = read_bytes("t", &bytes);
    assert!(err.is_none());
    for (a, b) in recs.iter().zip(&back) {
        assert_eq!(b.ts_ns, a.ts_ns / 1000 * 1000);
        assert_eq!(b.orig_len, a.orig_len);
        assert_eq!(b.link_type, LinkType::RawIp);
        assert_eq!(b.data, a.data[..a.data.len().min(50)]);
    }
}

#[test]
fn writer_rejects_timestamps_past_2106() {
    let mut w = CaptureWriter::from_writer(Vec::new(), LinkType::Ethernet, 0).unwrap();
    let err = w.write(u64::MAX, 1, &[0]).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "<writer>: byte 24: timestamp {} ns does not fit a pcap record header",
            u64::MAX
        )
    );
    // The largest representable second still works.
    w.write(u64::from(u32::MAX) * 1_000_000_000 + 999_999_999, 1, &[0])
        .unwrap();
}

#[test]
fn writer_file_round_trip() {
    let path = std::env::temp_dir().join(format!("capture_formats_{}.pcap", std::process::id()));
    let recs = sample_records();
    let mut w = CaptureWriter::create(&path, LinkType::Ethernet, 65535).unwrap();
    for r in &recs {
        w.write(r.ts_ns, r.orig_len, &r.data).unwrap();
    }
    w.finish().unwrap();
    let (back, err) = read_all(&path);
    std::fs::remove_file(&path).unwrap();
    assert!(err.is_none());
    assert_eq!(back, recs);
}

// ---------------------------------------------------------------- pcapng writer

/// Records over three interfaces, times in nanoseconds not multiples of a
/// microsecond, one of them larger than the record limit.
fn pcapng_sample() -> Vec<OwnedRecord> {
    (0..30u32)
        .map(|i| {
            let len = if i == 7 {
                MAX_RECORD_LEN as usize + 10
            } else {
                i as usize * 5
            };
            OwnedRecord {
                ts_ns: 1_700_000_000_000_000_000 + u64::from(i) * 1_234_567,
                interface: i % 3,
                orig_len: len as u32 + i,
                link_type: LinkType::Ethernet,
                data: payload(len, i as u8),
            }
        })
        .collect()
}

const PORTS: [(&str, LinkType); 3] = [
    ("r-a", LinkType::Ethernet),
    ("r-b", LinkType::Ethernet),
    ("r-c", LinkType::Ethernet),
];

fn write_pcapng(recs: &[OwnedRecord]) -> Vec<u8> {
    let mut w = PcapNgWriter::from_writer(Vec::new(), &PORTS).unwrap();
    assert_eq!(w.interface_count(), 3);
    for r in recs {
        w.write(r.interface, r.ts_ns, r.orig_len, &r.data).unwrap();
    }
    w.finish().unwrap()
}

#[test]
fn pcapng_writer_round_trip() {
    let recs = pcapng_sample();
    let bytes = write_pcapng(&recs);
    let mut r = CaptureReader::from_reader("t", Cursor::new(bytes)).unwrap();
    assert_eq!(r.format().file, FileFormat::Pcapng);
    let (back, err) = drain(&mut r);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(back.len(), recs.len());
    for (a, b) in recs.iter().zip(&back) {
        assert_eq!(b.interface, a.interface);
        assert_eq!(b.ts_ns, a.ts_ns, "nanoseconds kept");
        assert_eq!(b.orig_len, a.orig_len);
        assert_eq!(b.link_type, LinkType::Ethernet);
        assert_eq!(b.data, a.data[..a.data.len().min(MAX_RECORD_LEN as usize)]);
    }
    assert_eq!(r.interface_count(), 3);
    for (id, (name, _)) in PORTS.iter().enumerate() {
        assert_eq!(r.interface_name(id as u32), Some(*name));
    }
}

#[test]
fn pcapng_writer_header_bytes() {
    let w = PcapNgWriter::from_writer(
        Vec::new(),
        &[("r-a", LinkType::RawIp), ("", LinkType::Ethernet)],
    )
    .unwrap();
    let bytes = w.finish().unwrap();
    assert_eq!(bytes[..28], PCAPNG_LE[..28], "the same section header");
    let idb0: [u8; 40] = [
        0x01, 0x00, 0x00, 0x00, // type 1
        0x28, 0x00, 0x00, 0x00, // length 40
        0x65, 0x00, 0x00, 0x00, // linktype 101, reserved
        0x00, 0x00, 0x04, 0x00, // snaplen 262144
        0x02, 0x00, 0x03, 0x00, // if_name, length 3
        b'r', b'-', b'a', 0x00, // "r-a", padding
        0x09, 0x00, 0x01, 0x00, // if_tsresol, length 1
        0x09, 0x00, 0x00, 0x00, // 10^-9, padding
        0x00, 0x00, 0x00, 0x00, // opt_endofopt
        0x28, 0x00, 0x00, 0x00, // length 40
    ];
    assert_eq!(bytes[28..68], idb0);
    // An empty name is left out.
    assert_eq!(bytes[68..72], [1, 0, 0, 0]);
    assert_eq!(bytes[72..76], 32u32.to_le_bytes());
    assert_eq!(bytes.len(), 68 + 32);
}

#[test]
fn pcapng_writer_rejects_an_unknown_interface() {
    let mut w = PcapNgWriter::from_writer(Vec::new(), &PORTS).unwrap();
    w.write(0, 1, 4, &[1, 2, 3, 4]).unwrap();
    let err = w.write(3, 1, 4, &[1, 2, 3, 4]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "<writer>: byte 184: interface id 3 unknown: the section declares 3 interface(s)"
    );
    let long = "x".repeat(70_000);
    let err =
        PcapNgWriter::from_writer(Vec::new(), &[(long.as_str(), LinkType::Ethernet)]).unwrap_err();
    assert!(
        matches!(err.kind(), CaptureErrorKind::NameTooLong(70_000)),
        "{err}"
    );
}

/// tshark reads what the writer wrote with the same interface names and
/// times. Skipped (with the reason printed) when tshark is not installed.
#[test]
fn pcapng_writer_agrees_with_tshark() {
    let recs: Vec<OwnedRecord> = pcapng_sample()
        .into_iter()
        .filter(|r| r.data.len() < 1000)
        .collect();
    let path = std::env::temp_dir().join(format!("capture_formats_{}.pcapng", std::process::id()));
    let mut w = PcapNgWriter::create(&path, &PORTS).unwrap();
    for r in &recs {
        w.write(r.interface, r.ts_ns, r.orig_len, &r.data).unwrap();
    }
    w.finish().unwrap();
    let out = std::process::Command::new("tshark")
        .arg("-r")
        .arg(&path)
        .args([
            "-T",
            "fields",
            "-e",
            "frame.interface_name",
            "-e",
            "frame.time_epoch",
        ])
        .output();
    let (back, err) = read_all(&path);
    std::fs::remove_file(&path).unwrap();
    assert!(err.is_none());
    assert_eq!(back.len(), recs.len());
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            println!("skipped: tshark cannot be run ({e})");
            return;
        }
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), recs.len(), "{text}");
    for (line, r) in lines.iter().zip(&recs) {
        let (name, time) = line.split_once('\t').unwrap();
        assert_eq!(name, PORTS[r.interface as usize].0);
        // frame.time_epoch prints seconds with nanosecond digits.
        let (sec, frac) = time.split_once('.').unwrap();
        let ns = sec.parse::<u64>().unwrap() * 1_000_000_000
            + format!("{frac:0<9}")[..9].parse::<u64>().unwrap();
        assert_eq!(ns, r.ts_ns, "{line}");
    }
}
