//! Packet builders and checksum checks for the icarus tests, written from
//! scratch (no crate helpers), so they are an independent computation.

#![allow(dead_code)]

/// One's-complement sum of big-endian 16-bit words, folded, not complemented.
pub fn inet_sum(parts: &[&[u8]]) -> u16 {
    let mut bytes = Vec::new();
    for p in parts {
        bytes.extend_from_slice(p);
    }
    if bytes.len() % 2 == 1 {
        bytes.push(0);
    }
    let mut acc: u64 = 0;
    for w in bytes.chunks(2) {
        acc += u64::from(w[0]) << 8 | u64::from(w[1]);
    }
    while acc > 0xffff {
        acc = (acc >> 16) + (acc & 0xffff);
    }
    acc as u16
}

/// Ethernet header with the given EtherType.
pub fn ethernet(ethertype: u16) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

/// A TCP (6) or UDP (17) segment with a zero checksum field.
pub fn segment(proto: u8, payload: &[u8]) -> Vec<u8> {
    let mut s = if proto == 6 {
        vec![
            0x04, 0xd2, 0x00, 0x50, // ports 1234 -> 80
            0, 0, 0, 1, 0, 0, 0, 0, // seq, ack
            0x50, 0x18, 0x20, 0x00, // data offset 5, PSH|ACK, window
            0, 0, 0, 0, // checksum, urgent
        ]
    } else {
        let len = (8 + payload.len()) as u16;
        let mut u = vec![0x04, 0xd2, 0x00, 0x35];
        u.extend_from_slice(&len.to_be_bytes());
        u.extend_from_slice(&[0, 0]);
        u
    };
    s.extend_from_slice(payload);
    s
}

fn csum_at(proto: u8) -> usize {
    if proto == 6 { 16 } else { 6 }
}

/// Ethernet + IPv4 (with `options`, a multiple of 4 bytes) + TCP/UDP,
/// every checksum right.
pub fn ipv4_frame(options: &[u8], proto: u8, payload: &[u8]) -> Vec<u8> {
    assert_eq!(options.len() % 4, 0);
    let mut seg = segment(proto, payload);
    let src = [192, 0, 2, 1];
    let dst = [198, 51, 100, 7];
    let pseudo_len = (seg.len() as u16).to_be_bytes();
    let c = !inet_sum(&[&src, &dst, &[0, proto], &pseudo_len, &seg]);
    let at = csum_at(proto);
    seg[at..at + 2].copy_from_slice(&c.to_be_bytes());
    let hl = 20 + options.len();
    let tl = (hl + seg.len()) as u16;
    let mut ip = vec![0x40 | (hl / 4) as u8, 0x00];
    ip.extend_from_slice(&tl.to_be_bytes());
    ip.extend_from_slice(&[0x12, 0x34, 0x40, 0x00, 64, proto, 0, 0]);
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    ip.extend_from_slice(options);
    let c = !inet_sum(&[&ip]);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let mut f = ethernet(0x0800);
    f.extend_from_slice(&ip);
    f.extend_from_slice(&seg);
    f
}

/// Ethernet + IPv6 + extension headers + TCP/UDP, checksum right. Each
/// extension header is (its type, its body after the two-byte prefix);
/// `2 + body.len()` must be a multiple of 8.
pub fn ipv6_frame(ext: &[(u8, Vec<u8>)], proto: u8, payload: &[u8]) -> Vec<u8> {
    let mut seg = segment(proto, payload);
    let src: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    let dst: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
    let ul = (seg.len() as u32).to_be_bytes();
    let c = !inet_sum(&[&src, &dst, &ul, &[0, 0, 0, proto], &seg]);
    let at = csum_at(proto);
    seg[at..at + 2].copy_from_slice(&c.to_be_bytes());
    let mut exts = Vec::new();
    for (i, (_, body)) in ext.iter().enumerate() {
        assert_eq!((2 + body.len()) % 8, 0);
        let next = ext.get(i + 1).map_or(proto, |e| e.0);
        exts.push(next);
        exts.push(((2 + body.len()) / 8 - 1) as u8);
        exts.extend_from_slice(body);
    }
    let first = ext.first().map_or(proto, |e| e.0);
    let pl = (exts.len() + seg.len()) as u16;
    let mut f = ethernet(0x86dd);
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&pl.to_be_bytes());
    f.extend_from_slice(&[first, 64]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&exts);
    f.extend_from_slice(&seg);
    f
}

/// Whether the IPv4 header at `l3` sums to 0xffff.
pub fn ipv4_header_ok(frame: &[u8], l3: usize) -> bool {
    let hl = usize::from(frame[l3] & 0x0f) * 4;
    inet_sum(&[&frame[l3..l3 + hl]]) == 0xffff
}

/// The IPv4 header checksum computed from scratch.
pub fn ipv4_header_checksum(frame: &[u8], l3: usize) -> u16 {
    let hl = usize::from(frame[l3] & 0x0f) * 4;
    let mut h = frame[l3..l3 + hl].to_vec();
    h[10] = 0;
    h[11] = 0;
    !inet_sum(&[&h])
}

/// Checks every length and the TCP/UDP checksum of the IP packet at `l3`,
/// walking the headers independently. Returns the L4 offset.
pub fn check_l4(frame: &[u8], l3: usize) -> Result<usize, String> {
    let (proto, l4, src, dst, ul_len, pseudo_v6) = match frame[l3] >> 4 {
        4 => {
            let hl = usize::from(frame[l3] & 0x0f) * 4;
            let tl = usize::from(u16::from_be_bytes([frame[l3 + 2], frame[l3 + 3]]));
            if l3 + tl != frame.len() {
                return Err(format!("total length {tl} vs frame {}", frame.len() - l3));
            }
            if !ipv4_header_ok(frame, l3) {
                return Err("bad IPv4 header checksum".into());
            }
            (
                frame[l3 + 9],
                l3 + hl,
                frame[l3 + 12..l3 + 16].to_vec(),
                frame[l3 + 16..l3 + 20].to_vec(),
                tl - hl,
                false,
            )
        }
        6 => {
            let pl = usize::from(u16::from_be_bytes([frame[l3 + 4], frame[l3 + 5]]));
            if l3 + 40 + pl != frame.len() {
                return Err(format!(
                    "payload length {pl} vs frame {}",
                    frame.len() - l3 - 40
                ));
            }
            let mut nh = frame[l3 + 6];
            let mut at = l3 + 40;
            while matches!(nh, 0 | 43 | 60) {
                if nh == 0 && at != l3 + 40 {
                    return Err("hop-by-hop not first".into());
                }
                let len = (usize::from(frame[at + 1]) + 1) * 8;
                nh = frame[at];
                at += len;
            }
            (
                nh,
                at,
                frame[l3 + 8..l3 + 24].to_vec(),
                frame[l3 + 24..l3 + 40].to_vec(),
                l3 + 40 + pl - at,
                true,
            )
        }
        v => return Err(format!("version {v}")),
    };
    let seg = &frame[l4..l4 + ul_len];
    let sum = if pseudo_v6 {
        inet_sum(&[
            &src,
            &dst,
            &(ul_len as u32).to_be_bytes(),
            &[0, 0, 0, proto],
            seg,
        ])
    } else {
        inet_sum(&[&src, &dst, &[0, proto], &(ul_len as u16).to_be_bytes(), seg])
    };
    if sum != 0xffff {
        return Err(format!("bad L4 checksum (proto {proto})"));
    }
    Ok(l4)
}
