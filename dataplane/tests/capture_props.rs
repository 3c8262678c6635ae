//! Property tests: arbitrary input never panics and every fault has an
//! offset inside the input; a valid file cut at every length yields exactly
//! the records that end before the cut, plus a fault when the cut is inside
//! a structure; the writers round-trip.

mod capture_common;

use std::io::{self, Cursor, Read, Write};

use capture_common::*;
use dataplane::io::capture::{
    CaptureReader, CaptureWriter, MAX_RECORD_LEN, OwnedRecord, PcapNgWriter, TimeResolution, drain,
};
use dataplane::wire::LinkType;
use proptest::prelude::*;

/// Hands out at most one byte per `read`, to exercise short reads.
struct OneByte<R>(R);

impl<R: Read> Read for OneByte<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len().min(1);
        self.0.read(&mut buf[..n])
    }
}

/// Reads `bytes` and checks the invariants every read must keep, whatever
/// the input: no panic (the test would fail), records within the limit, and
/// a fault offset no further than the input's length (for plain input; a
/// gzip stream's offsets count decompressed bytes).
fn read_checked(bytes: &[u8]) -> (Vec<OwnedRecord>, Option<u64>) {
    let (recs, err) = read_bytes("fuzz", bytes);
    for r in &recs {
        assert!(r.data.len() <= MAX_RECORD_LEN as usize);
    }
    let offset = err.map(|e| {
        assert!(e.to_string().starts_with("fuzz: byte "), "{e}");
        e.offset()
    });
    if let Some(off) = offset
        && !bytes.starts_with(&[0x1f, 0x8b])
    {
        assert!(
            off <= bytes.len() as u64,
            "offset {off} > len {}",
            bytes.len()
        );
    }
    (recs, offset)
}

/// A generated file: its bytes, the records it holds, and the stream
/// offsets at which a cut leaves a well-formed (shorter) file, each with the
/// number of records before it.
struct Built {
    bytes: Vec<u8>,
    records: Vec<OwnedRecord>,
    boundaries: Vec<(usize, usize)>,
}

#[derive(Debug, Clone)]
enum Fmt {
    Pcap { be: bool, nanos: bool },
    Pcapng { be: bool, tsresol: u8, spb: bool },
}

fn fmt_strategy() -> impl Strategy<Value = Fmt> {
    prop_oneof![
        (any::<bool>(), any::<bool>()).prop_map(|(be, nanos)| Fmt::Pcap { be, nanos }),
        (
            any::<bool>(),
            prop::sample::select(vec![3u8, 6, 9, 12, 0x80 | 10, 0x80 | 20, 0x80 | 32]),
            any::<bool>()
        )
            .prop_map(|(be, tsresol, spb)| Fmt::Pcapng { be, tsresol, spb }),
    ]
}

/// (timestamp in file units, extra original length, data, skip block first)
type Rec = (u64, u16, Vec<u8>, bool);

fn recs_strategy() -> impl Strategy<Value = Vec<Rec>> {
    prop::collection::vec(
        (
            0u64..(1 << 40),
            any::<u16>(),
            prop::collection::vec(any::<u8>(), 0..90),
            any::<bool>(),
        ),
        0..10,
    )
}

fn units(tsresol: u8) -> u64 {
    if tsresol & 0x80 == 0 {
        10u64.pow(u32::from(tsresol))
    } else {
        1 << (tsresol & 0x7f)
    }
}

fn build(fmt: &Fmt, recs: &[Rec]) -> Built {
    let mut bytes = Vec::new();
    let mut records = Vec::new();
    let mut boundaries = Vec::new();
    match *fmt {
        Fmt::Pcap { be, nanos } => {
            bytes.extend(pcap_header(be, nanos, 1));
            boundaries.push((bytes.len(), 0));
            let per_sec = if nanos { 1_000_000_000 } else { 1_000_000 };
            for (ts, extra, data, _) in recs {
                let sec = (ts / per_sec) as u32;
                let frac = (ts % per_sec) as u32;
                let orig = data.len() as u32 + u32::from(*extra);
                bytes.extend(pcap_record(be, sec, frac, orig, data));
                records.push(OwnedRecord {
                    ts_ns: u64::from(sec) * 1_000_000_000
                        + u64::from(frac) * (1_000_000_000 / per_sec),
                    interface: 0,
                    orig_len: orig,
                    link_type: LinkType::Ethernet,
                    data: data.clone(),
                });
                boundaries.push((bytes.len(), records.len()));
            }
        }
        Fmt::Pcapng {
            be,
            tsresol,
            spb: use_spb,
        } => {
            bytes.extend(shb(be, 1, 0, &[opt(be, 4, b"prop"), end_opt()].concat()));
            boundaries.push((bytes.len(), 0));
            bytes.extend(idb(be, 1, 0, &[opt(be, 9, &[tsresol]), end_opt()].concat()));
            boundaries.push((bytes.len(), 0));
            for (i, (ts, extra, data, skip)) in recs.iter().enumerate() {
                if *skip {
                    bytes.extend(block(be, 5, &payload(i % 9, 0)));
                    boundaries.push((bytes.len(), records.len()));
                }
                let orig = data.len() as u32 + u32::from(*extra);
                // Every third packet is a simple packet block when asked:
                // no timestamp, and captured length = min(orig, data).
                let (blk, rec) = if use_spb && i % 3 == 2 {
                    (
                        spb(be, data.len() as u32, data),
                        OwnedRecord {
                            ts_ns: 0,
                            interface: 0,
                            orig_len: data.len() as u32,
                            link_type: LinkType::Ethernet,
                            data: data.clone(),
                        },
                    )
                } else {
                    let ns = u128::from(*ts) * 1_000_000_000 / u128::from(units(tsresol));
                    (
                        epb(be, 0, *ts, orig, data, &[]),
                        OwnedRecord {
                            ts_ns: ns as u64,
                            interface: 0,
                            orig_len: orig,
                            link_type: LinkType::Ethernet,
                            data: data.clone(),
                        },
                    )
                };
                bytes.extend(blk);
                records.push(rec);
                boundaries.push((bytes.len(), records.len()));
            }
        }
    }
    Built {
        bytes,
        records,
        boundaries,
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

/// The original length a reader hands back for one written as `orig`:
/// above `MAX_ORIG_LEN` it is taken as the captured length.
fn read_orig(orig: u32, data: &[u8]) -> u32 {
    if orig > dataplane::io::capture::MAX_ORIG_LEN {
        data.len() as u32
    } else {
        orig
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        read_checked(&bytes);
    }

    #[test]
    fn arbitrary_bytes_after_a_valid_header_never_panic(
        which in 0usize..6,
        tail in prop::collection::vec(any::<u8>(), 0..600),
    ) {
        let mut bytes = match which {
            0 => pcap_header(false, false, 1),
            1 => pcap_header(true, true, 1),
            2 => shb(false, 1, 0, &[]),
            3 => [shb(true, 1, 0, &[]), idb(true, 1, 0, &[])].concat(),
            4 => [shb(false, 1, 0, &[]), idb(false, 1, 64, &opt(false, 9, &[0x85]))].concat(),
            _ => gzip(&pcap_header(false, false, 1)),
        };
        bytes.extend(tail);
        read_checked(&bytes);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn valid_files_read_back_exactly(fmt in fmt_strategy(), recs in recs_strategy()) {
        let built = build(&fmt, &recs);
        let (got, err) = read_checked(&built.bytes);
        prop_assert_eq!(err, None);
        prop_assert_eq!(&got, &built.records);

        // The same through one-byte reads, and through gzip.
        let mut r = CaptureReader::from_reader("t", OneByte(Cursor::new(built.bytes.clone()))).unwrap();
        let (got, err) = drain(&mut r);
        prop_assert!(err.is_none());
        prop_assert_eq!(&got, &built.records);
        let (got, err) = read_checked(&gzip(&built.bytes));
        prop_assert!(err.is_none());
        prop_assert_eq!(&got, &built.records);
    }

    #[test]
    fn a_cut_at_every_length_keeps_the_records_before_it(
        fmt in fmt_strategy(),
        recs in recs_strategy(),
    ) {
        let built = build(&fmt, &recs);
        for cut in 0..=built.bytes.len() {
            let (got, err) = read_checked(&built.bytes[..cut]);
            let complete = built
                .boundaries
                .iter()
                .take_while(|(end, _)| *end <= cut)
                .last()
                .map_or(0, |&(_, n)| n);
            prop_assert_eq!(&got[..], &built.records[..complete], "cut at {}", cut);
            let on_boundary = built.boundaries.iter().any(|&(end, _)| end == cut);
            prop_assert_eq!(err.is_none(), on_boundary, "cut at {}: {:?}", cut, err);
            if let Some(off) = err {
                prop_assert!(off <= cut as u64);
            }
        }
    }

    #[test]
    fn corrupted_files_never_panic(
        fmt in fmt_strategy(),
        recs in recs_strategy(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..8),
    ) {
        let mut bytes = build(&fmt, &recs).bytes;
        for (i, x) in flips {
            let i = i.index(bytes.len());
            bytes[i] ^= x;
        }
        read_checked(&bytes);
    }

    #[test]
    fn writer_round_trips(
        micro in any::<bool>(),
        recs in prop::collection::vec(
            (0u64..(u64::from(u32::MAX) * 1_000_000_000), any::<u32>(), prop::collection::vec(any::<u8>(), 0..300)),
            0..20,
        ),
    ) {
        let res = if micro { TimeResolution::Micro } else { TimeResolution::Nano };
        let mut w = CaptureWriter::from_writer_with_resolution(Vec::new(), LinkType::Ethernet, 0, res).unwrap();
        for (ts, orig, data) in &recs {
            w.write(*ts, *orig, data).unwrap();
        }
        let (got, err) = read_checked(&w.finish().unwrap());
        prop_assert!(err.is_none());
        prop_assert_eq!(got.len(), recs.len());
        for (g, (ts, orig, data)) in got.iter().zip(&recs) {
            let ts = if micro { ts / 1000 * 1000 } else { *ts };
            prop_assert_eq!(g.ts_ns, ts);
            prop_assert_eq!(g.orig_len, read_orig(*orig, data));
            prop_assert_eq!(&g.data, data);
        }
    }

    #[test]
    fn pcapng_writer_round_trips(
        names in prop::collection::vec("[a-z0-9-]{0,12}", 1..5),
        recs in prop::collection::vec(
            (any::<u32>(), any::<u64>(), any::<u32>(), prop::collection::vec(any::<u8>(), 0..300)),
            0..20,
        ),
    ) {
        let ports: Vec<(&str, LinkType)> =
            names.iter().map(|n| (n.as_str(), LinkType::Ethernet)).collect();
        let mut w = PcapNgWriter::from_writer(Vec::new(), &ports).unwrap();
        for (i, ts, orig, data) in &recs {
            w.write(i % names.len() as u32, *ts, *orig, data).unwrap();
        }
        let bytes = w.finish().unwrap();
        let mut r = CaptureReader::from_reader("fuzz", Cursor::new(bytes)).unwrap();
        let (got, err) = drain(&mut r);
        prop_assert!(err.is_none());
        prop_assert_eq!(got.len(), recs.len());
        for (g, (i, ts, orig, data)) in got.iter().zip(&recs) {
            prop_assert_eq!(g.interface, i % names.len() as u32);
            prop_assert_eq!(g.ts_ns, *ts);
            prop_assert_eq!(g.orig_len, read_orig(*orig, data));
            prop_assert_eq!(&g.data, data);
        }
        if !recs.is_empty() {
            for (id, n) in names.iter().enumerate() {
                let want = (!n.is_empty()).then_some(n.as_str());
                prop_assert_eq!(r.interface_name(id as u32), want);
            }
        }
    }
}
