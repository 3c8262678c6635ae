//! `parse`: arbitrary bytes through `dataplane::wire::parse` with every link
//! type; the returned offsets lie within the buffer, the hot path's
//! `parse_into` (with its shortcut for plain frames) gives the by-value
//! functions' results, and the views and `set_ce` run over whatever parsed.

use dataplane::wire::{self, LinkType, igmp, mld, parse, parse_into, parse_with_orig_len, set_ce};

const LINKS: [LinkType; 4] = [
    LinkType::Ethernet,
    LinkType::RawIp,
    LinkType::LinuxSll,
    LinkType::Unknown(147),
];

/// Checks one input (see the module docs).
pub fn check(data: &[u8]) {
    for link in LINKS {
        for orig_len in [None, Some(data.len())] {
            let by_value = match orig_len {
                Some(len) => parse_with_orig_len(link, data, len),
                None => parse(link, data),
            };
            let mut out = None;
            let res = parse_into(link, data, orig_len, &mut out);
            assert_eq!(res.map(|()| out), by_value.map(Some));
        }
        let Ok(p) = parse(link, data) else { continue };
        assert!(p.l3_offset <= data.len());
        if p.is_ip() {
            assert!(p.l3_offset + p.ip_header_len <= data.len());
            assert!(p.truncated || p.l3_offset + p.ip_total_len <= data.len());
        }
        if let Some(l4) = p.l4_offset {
            assert!(l4 + p.l4_header_len <= data.len());
        }
        let msg = p.l4_bytes(data);
        match p.protocol {
            wire::IpProtocol::Igmp => {
                if let Ok(m) = igmp::Packet::new_checked(msg) {
                    let n = m
                        .group_records()
                        .map(|r| r.sources().count())
                        .sum::<usize>();
                    let _ = (n, m.query_sources().count(), m.kind());
                }
            }
            wire::IpProtocol::Icmpv6 => {
                if let Ok(m) = mld::Packet::new_checked(msg) {
                    let n = m
                        .address_records()
                        .map(|r| r.sources().count())
                        .sum::<usize>();
                    let _ = (n, m.query_sources().count(), m.kind());
                }
            }
            _ => {}
        }
        let mut copy = data.to_vec();
        let _ = set_ce(&mut copy, &p);
        if let Some(flow) = p.flow {
            let _ = (flow.words10(), flow.encode(), flow.to_string());
        }
    }
}
