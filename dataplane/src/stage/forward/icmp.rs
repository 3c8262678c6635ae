//! The ICMP messages the router makes: errors (Time Exceeded,
//! Fragmentation Needed / Packet Too Big) and echo replies, for IPv4
//! (RFC 792, RFC 1812) and IPv6 (RFC 4443), and the token bucket that
//! limits the errors.
//!
//! Each builder writes a whole Ethernet frame into a reused buffer from
//! the frame it answers: the link header is the request's (VLAN tags
//! kept) with the addresses swapped, so the answer goes back to the MAC
//! the packet came from; a fresh IP header (no options or extension
//! headers) from the router's address to the packet's source; checksums
//! computed over the whole message. Every length is checked: a frame too
//! short for what the builder needs gives `false` and no frame.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::addr::MacAddr;
use crate::clock::Timestamp;
use crate::wire::Parsed;
use crate::wire::build::{self, Addrs, IpHeader};

/// IPv4: errors carry the original datagram up to a 576-byte message
/// (RFC 1812 4.3.2.3): 576 - 20 (IP) - 8 (ICMP).
pub const V4_QUOTE: usize = 548;
/// IPv6: up to the minimum MTU (RFC 4443 2.4 (c)): 1280 - 40 - 8.
pub const V6_QUOTE: usize = 1232;
/// The shortest Ethernet frame (without FCS); shorter ones are padded.
pub use crate::wire::build::MIN_FRAME;

/// ICMP type: destination unreachable (code 0: network unreachable; 3:
/// port unreachable; 4: fragmentation needed).
pub const V4_UNREACHABLE: u8 = 3;
/// ICMP type: time exceeded.
pub const V4_TIME_EXCEEDED: u8 = 11;
/// ICMPv6 type: destination unreachable (code 0: no route; 4: port
/// unreachable).
pub const V6_UNREACHABLE: u8 = 1;
/// ICMPv6 type: packet too big.
pub const V6_TOO_BIG: u8 = 2;
/// ICMPv6 type: time exceeded.
pub const V6_TIME_EXCEEDED: u8 = 3;

/// A token bucket in packet time: `rate` tokens a second, at most
/// `burst` (rate 0: no limit, as Linux's `icmp_ratelimit = 0`).
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: u64,
    /// Capacity and credit in token-nanoseconds (a token is 10^9).
    cap: u64,
    credit: u64,
    last: Timestamp,
}

const TOKEN: u64 = 1_000_000_000;

impl TokenBucket {
    /// A full bucket.
    pub fn new(rate: u32, burst: u32) -> Self {
        let cap = u64::from(burst.max(1)).saturating_mul(TOKEN);
        TokenBucket {
            rate: u64::from(rate),
            cap,
            credit: cap,
            last: Timestamp::ZERO,
        }
    }

    /// Takes a token at `now` if there is one.
    pub fn take(&mut self, now: Timestamp) -> bool {
        if self.rate == 0 {
            return true;
        }
        let dt = now.nanos_since(self.last);
        self.last = self.last.max(now);
        self.credit = self
            .credit
            .saturating_add(dt.saturating_mul(self.rate))
            .min(self.cap);
        if self.credit >= TOKEN {
            self.credit -= TOKEN;
            true
        } else {
            false
        }
    }
}

/// Whether the router may send an ICMP error about this packet: never
/// about an ICMP error, a non-first fragment, a packet to a group address
/// (link or IP), or from an address that cannot be answered (RFC 1812
/// 4.3.2.7, RFC 4443 2.4 (e)).
pub fn may_answer_with_error(frame: &[u8], x: &Parsed) -> bool {
    if frame.first().is_none_or(|b| b & 1 != 0) || x.dst_multicast {
        return false;
    }
    if x.fragment.is_some_and(|f| !f.is_first()) {
        return false;
    }
    let l3 = x.l3_offset;
    let l4_type = x.l4_offset.and_then(|o| frame.get(o).copied());
    match frame.get(l3).map(|b| b >> 4) {
        Some(4) => {
            let Some(src) = frame.get(l3 + 12..l3 + 16) else {
                return false;
            };
            let src = Ipv4Addr::new(src[0], src[1], src[2], src[3]);
            if src.is_unspecified() || src.is_multicast() || src.is_broadcast() || src.is_loopback()
            {
                return false;
            }
            // ICMP errors: types 3, 4, 5, 11, 12.
            !(frame.get(l3 + 9) == Some(&1) && matches!(l4_type, None | Some(3 | 4 | 5 | 11 | 12)))
        }
        Some(6) => {
            let Some(src) = frame.get(l3 + 8..l3 + 24) else {
                return false;
            };
            let src: [u8; 16] = src.try_into().unwrap_or([0; 16]);
            let src = Ipv6Addr::from(src);
            if src.is_unspecified() || src.is_multicast() || src.is_loopback() {
                return false;
            }
            // ICMPv6 errors are types 0..=127.
            !(x.protocol == crate::wire::IpProtocol::Icmpv6 && l4_type.is_none_or(|t| t < 128))
        }
        _ => false,
    }
}

/// Starts `out` with the link header of `frame` (its first `l3` bytes),
/// addressed back to `frame`'s source from `mac`.
pub(super) fn link_back(out: &mut Vec<u8>, frame: &[u8], l3: usize, mac: MacAddr) -> bool {
    let Some(l2) = frame.get(..l3).filter(|h| h.len() >= 14) else {
        return false;
    };
    out.clear();
    out.extend_from_slice(l2);
    out.copy_within(6..12, 0);
    out[6..12].copy_from_slice(&mac.0);
    true
}

/// The IPv4 header of an ICMP message from `src` to `dst` (TTL 64).
fn ipv4_header(tos: u8, ident: u16, src: Ipv4Addr, dst: [u8; 4]) -> IpHeader {
    IpHeader {
        tos,
        ident,
        ..IpHeader::new(
            Addrs::V4 {
                src,
                dst: Ipv4Addr::from(dst),
            },
            build::PROTO_ICMP,
        )
    }
}

/// The IPv6 header of an ICMPv6 message from `src` to `dst`.
pub(super) fn ipv6_header(src: Ipv6Addr, dst: [u8; 16], hops: u8) -> IpHeader {
    IpHeader {
        ttl: hops,
        ..IpHeader::new(
            Addrs::V6 {
                src,
                dst: Ipv6Addr::from(dst),
            },
            build::PROTO_ICMPV6,
        )
    }
}

/// The captured bytes of the datagram (header included), at most to its
/// length field.
fn datagram<'a>(frame: &'a [u8], x: &Parsed) -> Option<&'a [u8]> {
    let end = x.l3_offset.saturating_add(x.ip_total_len).min(frame.len());
    frame.get(x.l3_offset..end)
}

/// An ICMP error (`ty`, `code`, second word `rest`) from `src` about the
/// IPv4 packet `frame`, into `out`.
#[allow(clippy::too_many_arguments)]
pub fn v4_error(
    out: &mut Vec<u8>,
    frame: &[u8],
    x: &Parsed,
    mac: MacAddr,
    src: Ipv4Addr,
    ty: u8,
    code: u8,
    rest: u32,
) -> bool {
    let Some(orig) = datagram(frame, x).filter(|d| d.len() >= 20) else {
        return false;
    };
    let quote = &orig[..orig.len().min(V4_QUOTE)];
    let dst: [u8; 4] = [orig[12], orig[13], orig[14], orig[15]];
    if !link_back(out, frame, x.l3_offset, mac) {
        return false;
    }
    if !ipv4_header(0xc0, 0, src, dst).try_push(out, 8 + quote.len()) {
        return false;
    }
    build::icmpv4(out, ty, code, rest, quote);
    build::pad(out);
    true
}

/// An ICMPv6 error (`ty`, `code`, first body word `rest`) from `src`
/// about the IPv6 packet `frame`, into `out`.
#[allow(clippy::too_many_arguments)]
pub fn v6_error(
    out: &mut Vec<u8>,
    frame: &[u8],
    x: &Parsed,
    mac: MacAddr,
    src: Ipv6Addr,
    ty: u8,
    code: u8,
    rest: u32,
) -> bool {
    let Some(orig) = datagram(frame, x).filter(|d| d.len() >= 40) else {
        return false;
    };
    let quote = &orig[..orig.len().min(V6_QUOTE)];
    let dst: [u8; 16] = orig[8..24].try_into().unwrap_or([0; 16]);
    if !link_back(out, frame, x.l3_offset, mac) {
        return false;
    }
    let ip = ipv6_header(src, dst, 64);
    if !ip.try_push(out, 8 + quote.len()) {
        return false;
    }
    build::icmpv6(out, &ip, ty, code, rest, quote);
    build::pad(out);
    true
}

/// Whether `frame` is a whole (uncut, unfragmented) echo request.
pub fn is_echo_request(frame: &[u8], x: &Parsed) -> bool {
    let want = match x.protocol {
        crate::wire::IpProtocol::Icmp => 8,
        crate::wire::IpProtocol::Icmpv6 => 128,
        _ => return false,
    };
    !x.truncated
        && x.fragment.is_none()
        && x.l4_offset
            .and_then(|o| frame.get(o..o + 2))
            .is_some_and(|t| t == [want, 0])
}

/// The echo reply to the echo request `frame` (see [`is_echo_request`]),
/// from the address it was sent to, into `out`.
pub fn echo_reply(out: &mut Vec<u8>, frame: &[u8], x: &Parsed, mac: MacAddr) -> bool {
    let Some(orig) = datagram(frame, x) else {
        return false;
    };
    let msg = x.l4_bytes(frame);
    if msg.len() < 8 || !link_back(out, frame, x.l3_offset, mac) {
        return false;
    }
    let at;
    match orig.first().map(|b| b >> 4) {
        Some(4) if orig.len() >= 20 => {
            let src = Ipv4Addr::new(orig[16], orig[17], orig[18], orig[19]);
            let dst = [orig[12], orig[13], orig[14], orig[15]];
            let ident = u16::from_be_bytes([orig[4], orig[5]]);
            if !ipv4_header(orig[1], ident, src, dst).try_push(out, msg.len()) {
                return false;
            }
            at = out.len();
            out.extend_from_slice(msg);
            out[at] = 0;
            build::icmpv4_checksum(out, at);
        }
        Some(6) if orig.len() >= 40 => {
            let src = Ipv6Addr::from(<[u8; 16]>::try_from(&orig[24..40]).unwrap_or([0; 16]));
            let dst: [u8; 16] = orig[8..24].try_into().unwrap_or([0; 16]);
            let ip = ipv6_header(src, dst, 64);
            if !ip.try_push(out, msg.len()) {
                return false;
            }
            at = out.len();
            out.extend_from_slice(msg);
            out[at] = 129;
            build::icmpv6_checksum(out, at, &ip);
        }
        _ => return false,
    }
    build::pad(out);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_refills_in_packet_time() {
        let mut b = TokenBucket::new(1000, 3);
        let t = Timestamp::from_nanos;
        assert!(b.take(t(0)) && b.take(t(0)) && b.take(t(0)));
        assert!(!b.take(t(0)));
        assert!(!b.take(t(999_999)));
        assert!(b.take(t(1_000_000)), "one token a millisecond");
        assert!(!b.take(t(1_000_000)));
        assert!(b.take(t(10_000_000_000)) && b.take(t(10_000_000_000)));
        assert!(b.take(t(10_000_000_000)));
        assert!(!b.take(t(10_000_000_000)), "never above the burst");
        let mut free = TokenBucket::new(0, 1);
        assert!((0..100).all(|_| free.take(t(0))));
    }
}
