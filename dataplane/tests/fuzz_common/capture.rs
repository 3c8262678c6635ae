//! `capture`: bytes as a capture file through
//! `dataplane::io::capture::CaptureReader`, read to the end or the first
//! fault. Every record lies within its limits and within the input, every
//! fault within the input; a finished reader stays finished; and the same
//! bytes read one byte per `read`, or gzip-compressed, give the same
//! records and the same fault.

use std::io::{self, Cursor, Read, Write};

use dataplane::io::capture::{
    CaptureReader, FileFormat, MAX_ORIG_LEN, MAX_RECORD_LEN, OwnedRecord,
};

/// Hands out at most one byte per `read`.
struct OneByte<R>(R);

impl<R: Read> Read for OneByte<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len().min(1);
        self.0.read(&mut buf[..n])
    }
}

/// What one read of a stream gave.
#[derive(Debug, PartialEq)]
struct Outcome {
    format: Option<FileFormat>,
    records: Vec<OwnedRecord>,
    /// The fault's offset and kind, as text.
    fault: Option<(u64, String)>,
}

/// Reads `r` to the end, checking each record against the reader's own
/// limits; `plain_len` is the stream's length when it is not compressed
/// (offsets and positions then lie within it).
fn read(r: impl Read + Send + 'static, plain_len: Option<u64>) -> Outcome {
    let mut reader = match CaptureReader::from_reader("fuzz", r) {
        Ok(reader) => reader,
        Err(e) => {
            if let Some(len) = plain_len {
                assert!(e.offset() <= len, "{e}");
            }
            return Outcome {
                format: None,
                records: Vec::new(),
                fault: Some((e.offset(), e.kind().to_string())),
            };
        }
    };
    let format = reader.format().file;
    let mut records = Vec::new();
    let mut bytes = 0u64;
    let mut last_pos = reader.position();
    let fault = loop {
        let count = reader.interface_count();
        match reader.next_record() {
            Ok(Some(rec)) => {
                let caplen = rec.data.len();
                assert!(caplen <= MAX_RECORD_LEN as usize);
                assert!(rec.orig_len <= MAX_ORIG_LEN || rec.orig_len as usize == caplen);
                bytes += caplen as u64;
                let owned = rec.to_owned_record();
                match format {
                    FileFormat::Pcap => assert_eq!(owned.interface, 0),
                    FileFormat::Pcapng => {
                        // A record may open a new section; its interface is
                        // then one of the new section's.
                        assert!((owned.interface as usize) < reader.interface_count().max(count));
                        let _ = reader.interface_name(owned.interface);
                    }
                }
                records.push(owned);
            }
            Ok(None) => break None,
            Err(e) => {
                if let Some(len) = plain_len {
                    assert!(e.offset() <= len, "{e} past {len} bytes");
                }
                assert_eq!(e.file(), "fuzz");
                let _ = e.to_string();
                break Some((e.offset(), e.kind().to_string()));
            }
        }
        let pos = reader.position();
        assert!(pos >= last_pos, "position went back");
        last_pos = pos;
        if let Some(len) = plain_len {
            assert!(pos <= len && bytes <= len, "{pos} / {bytes} of {len}");
        }
    };
    // Finished: every later call says so.
    assert!(matches!(reader.next_record(), Ok(None)));
    let _ = (reader.lengths_fixed(), reader.pcap_fcs_len(), reader.name());
    Outcome {
        format: Some(format),
        records,
        fault,
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(bytes).expect("writing to memory");
    enc.finish().expect("writing to memory")
}

/// Checks one input (see the module docs).
pub fn check(data: &[u8]) {
    if data.starts_with(&[0x1f, 0x8b]) {
        // Compressed input: the offsets count decompressed bytes, and
        // where a corrupt stream fails depends on how it is read, so the
        // two reads are only checked on their own.
        read(Cursor::new(data.to_vec()), None);
        read(OneByte(Cursor::new(data.to_vec())), None);
        return;
    }
    let len = Some(data.len() as u64);
    let plain = read(Cursor::new(data.to_vec()), len);
    let one = read(OneByte(Cursor::new(data.to_vec())), len);
    assert_eq!(plain, one, "one byte per read");
    let mut gz = read(Cursor::new(gzip(data)), None);
    // Content with an unknown magic says it was inside gzip data; the rest
    // is the same fault.
    if let Some((_, kind)) = &mut gz.fault
        && let Some(magic) = kind
            .strip_prefix("gzip data (magic 1f 8b) whose content starts with unknown magic number ")
            .and_then(|m| m.strip_suffix(": not a pcap or pcapng capture"))
    {
        *kind = format!("unknown magic number {magic}: not a pcap, pcapng or gzip file");
    }
    assert_eq!(plain, gz, "through gzip");
}
