//! Builders for hand-made pcap and pcapng files, shared by the `capture*`
//! tests. Each builder writes exactly what the format says, so a test can
//! corrupt one field at a known offset.
#![allow(dead_code)]

use std::io::Cursor;

use dataplane::io::capture::{CaptureError, CaptureReader, OwnedRecord, drain};

/// Reads `bytes` as a capture named `name`: the records before the first
/// fault, and the fault (an open failure included).
pub fn read_bytes(name: &str, bytes: &[u8]) -> (Vec<OwnedRecord>, Option<CaptureError>) {
    match CaptureReader::from_reader(name, Cursor::new(bytes.to_vec())) {
        Ok(mut r) => drain(&mut r),
        Err(e) => (Vec::new(), Some(e)),
    }
}

fn u16b(be: bool, v: u16) -> [u8; 2] {
    if be { v.to_be_bytes() } else { v.to_le_bytes() }
}

fn u32b(be: bool, v: u32) -> [u8; 4] {
    if be { v.to_be_bytes() } else { v.to_le_bytes() }
}

/// A pcap file header, version 2.4, snaplen 65535.
pub fn pcap_header(be: bool, nanos: bool, linktype: u32) -> Vec<u8> {
    pcap_header_version(be, nanos, linktype, 2, 4)
}

/// A pcap file header with any version.
pub fn pcap_header_version(
    be: bool,
    nanos: bool,
    linktype: u32,
    major: u16,
    minor: u16,
) -> Vec<u8> {
    let magic: u32 = if nanos { 0xa1b2_3c4d } else { 0xa1b2_c3d4 };
    let mut v = Vec::new();
    v.extend(u32b(be, magic));
    v.extend(u16b(be, major));
    v.extend(u16b(be, minor));
    v.extend(u32b(be, 0)); // thiszone
    v.extend(u32b(be, 0)); // sigfigs
    v.extend(u32b(be, 65535)); // snaplen
    v.extend(u32b(be, linktype));
    v
}

/// A pcap record: header (seconds, fraction, caplen = data length,
/// orig_len) and data.
pub fn pcap_record(be: bool, sec: u32, frac: u32, orig_len: u32, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend(u32b(be, sec));
    v.extend(u32b(be, frac));
    v.extend(u32b(be, data.len() as u32));
    v.extend(u32b(be, orig_len));
    v.extend(data);
    v
}

/// One pcapng option, value padded to 4.
pub fn opt(be: bool, code: u16, value: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend(u16b(be, code));
    v.extend(u16b(be, value.len() as u16));
    v.extend(value);
    while v.len() % 4 != 0 {
        v.push(0);
    }
    v
}

/// `opt_endofopt`.
pub fn end_opt() -> Vec<u8> {
    vec![0; 4]
}

/// A pcapng block of type `ty` around `body` (padded to 4), with correct
/// leading and trailing lengths.
pub fn block(be: bool, ty: u32, body: &[u8]) -> Vec<u8> {
    let mut body = body.to_vec();
    while !body.len().is_multiple_of(4) {
        body.push(0);
    }
    let len = (body.len() + 12) as u32;
    let mut v = Vec::new();
    v.extend(u32b(be, ty));
    v.extend(u32b(be, len));
    v.extend(body);
    v.extend(u32b(be, len));
    v
}

/// A section header block, section length -1, with `options`.
pub fn shb(be: bool, major: u16, minor: u16, options: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend(u32b(be, 0x1a2b_3c4d));
    body.extend(u16b(be, major));
    body.extend(u16b(be, minor));
    body.extend([0xff; 8]);
    body.extend(options);
    block(be, 0x0a0d_0d0a, &body)
}

/// An interface description block.
pub fn idb(be: bool, linktype: u16, snaplen: u32, options: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend(u16b(be, linktype));
    body.extend(u16b(be, 0));
    body.extend(u32b(be, snaplen));
    body.extend(options);
    block(be, 1, &body)
}

/// An enhanced packet block.
pub fn epb(be: bool, if_id: u32, ts: u64, orig_len: u32, data: &[u8], options: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend(u32b(be, if_id));
    body.extend(u32b(be, (ts >> 32) as u32));
    body.extend(u32b(be, ts as u32));
    body.extend(u32b(be, data.len() as u32));
    body.extend(u32b(be, orig_len));
    body.extend(data);
    while body.len() % 4 != 0 {
        body.push(0);
    }
    body.extend(options);
    block(be, 6, &body)
}

/// An obsolete packet block (type 2).
pub fn opb(be: bool, if_id: u16, ts: u64, orig_len: u32, data: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend(u16b(be, if_id));
    body.extend(u16b(be, 0)); // drops
    body.extend(u32b(be, (ts >> 32) as u32));
    body.extend(u32b(be, ts as u32));
    body.extend(u32b(be, data.len() as u32));
    body.extend(u32b(be, orig_len));
    body.extend(data);
    block(be, 2, &body)
}

/// A simple packet block.
pub fn spb(be: bool, orig_len: u32, data: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend(u32b(be, orig_len));
    body.extend(data);
    block(be, 3, &body)
}

/// Bytes `0, 1, 2, ...` of length `n`, so a misplaced slice shows.
pub fn payload(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| seed.wrapping_add(i as u8)).collect()
}
