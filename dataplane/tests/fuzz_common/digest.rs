//! `digest`: the traceback query parser and the packet key, on untrusted
//! bytes (`dataplane::stage::digest::{query, key}`).
//!
//! The first byte chooses the input's form:
//!
//! * even: the rest is a query string as `GET /digest?...` carries it
//!   (read as UTF-8, invalid sequences replaced);
//! * odd: the rest is an IP datagram, asked about in a query string built
//!   as traffic-gen builds it (`query::query_string`), with a time when
//!   bit 1 is set.
//!
//! What is checked, whatever the bytes:
//!
//! * [`DigestQuery::parse`] never panics; an accepted query's key is the
//!   key of its decoded `ip` bytes, and the query written back
//!   (`query_string`) parses to the same query;
//! * a datagram the parser reads gives, from the parser's lengths
//!   (`Invariant::from_parsed`, the forwarding path's reading), the key
//!   `Completeness::AsCaptured` gives;
//! * a datagram with every byte a digest covers gives, on the forwarding
//!   path's reading (`Completeness::AsCaptured`), the key a query gets, and
//!   the same key after its TTL (hop limit), TOS (traffic class) and IPv4
//!   checksum change;
//! * a key recorded in a ring with an ingress port is found by a probe of
//!   that port (no false negatives).

use dataplane::clock::Timestamp;
use dataplane::stage::digest::query::{decode_hex, query_string};
use dataplane::stage::digest::{Completeness, DigestConfig, DigestQuery, Invariant, Ring, Sizing};
use dataplane::wire::{LinkType, parse};

/// The key with its TTL, TOS and checksum bytes changed, when `ip` is long
/// enough to hold them.
fn mutated(ip: &[u8]) -> Option<Vec<u8>> {
    let mut m = ip.to_vec();
    match ip.first()? >> 4 {
        4 if ip.len() >= 20 => {
            m[1] ^= 0xb5;
            m[8] = m[8].wrapping_sub(1);
            m[10] ^= 0x5a;
            m[11] ^= 0xa5;
        }
        6 if ip.len() >= 40 => {
            m[0] ^= 0x0a;
            m[1] ^= 0xb0;
            m[7] = m[7].wrapping_sub(1);
        }
        _ => return None,
    }
    Some(m)
}

fn ring_finds(key: Invariant, port: u8) {
    let mut ring = Ring::new(&DigestConfig {
        window_ns: 1_000_000,
        windows: 2,
        expected: 16,
        sizing: Sizing::FalsePositiveRate(0.01),
        seed: Some(1),
    })
    .expect("a small ring");
    let t = Timestamp::from_nanos(1);
    match key.with_port(port) {
        Invariant::V4(w) => ring.record(t, (t, t), &[w], &[]),
        Invariant::V6(w) => ring.record(t, (t, t), &[], &[w]),
    }
    let found = ring.probe(key, 8, None);
    assert!(
        found.iter().any(|w| w.ports & (1 << port) != 0),
        "a recorded key is not found"
    );
}

fn check_ip(ip: &[u8], at: Option<u64>) {
    let whole = Invariant::from_ip(ip, Completeness::Whole);
    let captured = Invariant::from_ip(ip, Completeness::AsCaptured);
    // The forwarding path reads IPv4 keys from the parser's lengths: the
    // same key, or none when there is none.
    if let Ok(p) = parse(LinkType::RawIp, ip)
        && p.ip_version.is_some()
    {
        assert_eq!(
            Invariant::from_parsed(ip, &p).ok(),
            captured.ok(),
            "the parser's lengths give another key"
        );
    }
    if let Ok(k) = whole {
        assert_eq!(captured, Ok(k), "the forwarding path reads another key");
        if let Some(m) = mutated(ip) {
            assert_eq!(
                Invariant::from_ip(&m, Completeness::Whole),
                Ok(k),
                "TTL, TOS or checksum changed the key"
            );
        }
        ring_finds(k, ip.len() as u8 % 8);
    }
    let q = query_string(ip, at, at.map(|t| t % 5000));
    match DigestQuery::parse(&q) {
        Ok(p) => {
            let k = whole.expect("a query accepted for bytes that give no key");
            assert_eq!(p.key, k.with_port(0));
            assert_eq!(p.at_unix_ns, at);
        }
        Err(_) => assert!(
            whole.is_err() || ip.len() > dataplane::stage::digest::query::MAX_IP_BYTES,
            "a query refused for bytes that give a key"
        ),
    }
}

fn check_text(text: &str) {
    let Ok(q) = DigestQuery::parse(text) else {
        return;
    };
    let ip_hex = text
        .split('&')
        .find_map(|p| p.strip_prefix("ip="))
        .expect("an accepted query has ip");
    let ip = decode_hex(ip_hex).expect("accepted hex decodes");
    assert_eq!(
        Invariant::from_ip(&ip, Completeness::Whole).map(|k| k.with_port(0)),
        Ok(q.key)
    );
    let span_ms = q.at_unix_ns.map(|_| q.span_ns / 1_000_000);
    let again = DigestQuery::parse(&query_string(&ip, q.at_unix_ns, span_ms))
        .expect("a query written back parses");
    assert_eq!(again, q);
}

/// The target's body (see the module docs).
pub fn check(data: &[u8]) {
    let Some((&c, rest)) = data.split_first() else {
        return;
    };
    if c & 1 == 0 {
        check_text(&String::from_utf8_lossy(rest));
    } else {
        let at = (c & 2 != 0).then(|| u64::from(c) * 1_000_000_007);
        check_ip(rest, at);
    }
}
