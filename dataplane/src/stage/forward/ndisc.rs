//! ARP (RFC 826) and IPv6 neighbour discovery (RFC 4861): reading the
//! requests and advertisements the router sees, and building its own.
//!
//! Readers take the frame and the parse summary and check every length;
//! builders write a whole Ethernet frame into a reused buffer (see
//! [`super::icmp`] for the conventions).

use std::net::{Ipv4Addr, Ipv6Addr};

use super::icmp::{ipv6_header, link_back};
use crate::addr::MacAddr;
use crate::wire::build;
use crate::wire::{IpProtocol, Parsed};

pub use crate::wire::build::{ARP_REPLY, ARP_REQUEST, ND_ADVERT as NA, ND_SOLICIT as NS};

/// An Ethernet/IPv4 ARP message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arp {
    /// Request or reply.
    pub op: u16,
    /// Sender hardware and protocol address.
    pub sha: MacAddr,
    /// Sender protocol address.
    pub spa: Ipv4Addr,
    /// Target hardware address.
    pub tha: MacAddr,
    /// Target protocol address.
    pub tpa: Ipv4Addr,
}

/// The ARP message of a frame parsed as ARP (`None`: not Ethernet/IPv4,
/// or cut short).
pub fn read_arp(frame: &[u8], x: &Parsed) -> Option<Arp> {
    let a = frame.get(x.l3_offset..x.l3_offset + 28)?;
    if a[0..6] != [0, 1, 8, 0, 6, 4] {
        return None;
    }
    let mac = |r: &[u8]| MacAddr(r.try_into().unwrap_or([0; 6]));
    Some(Arp {
        op: u16::from_be_bytes([a[6], a[7]]),
        sha: mac(&a[8..14]),
        spa: Ipv4Addr::new(a[14], a[15], a[16], a[17]),
        tha: mac(&a[18..24]),
        tpa: Ipv4Addr::new(a[24], a[25], a[26], a[27]),
    })
}

fn arp_body(out: &mut Vec<u8>, op: u16, sha: MacAddr, spa: Ipv4Addr, tha: MacAddr, tpa: Ipv4Addr) {
    build::arp(out, op, sha.0, spa, tha.0, tpa);
    build::pad(out);
}

/// The reply to the ARP request `req` (in `frame`) for the router's
/// address `req.tpa` at `mac`.
pub fn arp_reply(out: &mut Vec<u8>, frame: &[u8], x: &Parsed, req: &Arp, mac: MacAddr) -> bool {
    if !link_back(out, frame, x.l3_offset, mac) {
        return false;
    }
    arp_body(out, ARP_REPLY, mac, req.tpa, req.sha, req.spa);
    true
}

/// A broadcast ARP request for `target` from `mac` / `src`.
pub fn arp_request(out: &mut Vec<u8>, mac: MacAddr, src: Ipv4Addr, target: Ipv4Addr) -> bool {
    out.clear();
    build::ethernet(out, MacAddr::BROADCAST.0, mac.0, build::ETHERTYPE_ARP);
    arp_body(out, ARP_REQUEST, mac, src, MacAddr::default(), target);
    true
}

/// A neighbour solicitation or advertisement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nd {
    /// [`NS`] or [`NA`].
    pub kind: u8,
    /// The IPv6 source.
    pub src: Ipv6Addr,
    /// The target address.
    pub target: Ipv6Addr,
    /// The link-layer address option (source for NS, target for NA).
    pub lladdr: Option<MacAddr>,
}

/// The neighbour solicitation or advertisement of an IPv6 frame (`None`:
/// another message, a hop limit other than 255, code not 0, or cut
/// short; RFC 4861 7.1.1 and 7.1.2).
pub fn read_nd(frame: &[u8], x: &Parsed) -> Option<Nd> {
    if x.protocol != IpProtocol::Icmpv6 || x.ttl != 255 || x.truncated {
        return None;
    }
    let msg = x.l4_bytes(frame);
    let kind = *msg.first()?;
    if !(kind == NS || kind == NA) || msg.get(1) != Some(&0) {
        return None;
    }
    let target: [u8; 16] = msg.get(8..24)?.try_into().ok()?;
    let src: [u8; 16] = frame
        .get(x.l3_offset + 8..x.l3_offset + 24)?
        .try_into()
        .ok()?;
    let want = if kind == NS { 1 } else { 2 };
    let mut lladdr = None;
    let mut opts = msg.get(24..)?;
    while let [ty, len, ..] = *opts {
        let n = usize::from(len) * 8;
        let Some(opt) = opts.get(..n).filter(|_| n > 0) else {
            break;
        };
        if ty == want && n == 8 {
            lladdr = Some(MacAddr(opt[2..8].try_into().unwrap_or([0; 6])));
        }
        opts = &opts[n..];
    }
    Some(Nd {
        kind,
        src: Ipv6Addr::from(src),
        target: Ipv6Addr::from(target),
        lladdr,
    })
}

/// The solicited-node multicast address of `a` (RFC 4291 2.7.1).
pub fn solicited_node(a: Ipv6Addr) -> Ipv6Addr {
    let o = a.octets();
    Ipv6Addr::from([
        0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, o[13], o[14], o[15],
    ])
}

/// The advertisement answering the solicitation `ns` (in `frame`) for the
/// router's address `ns.target` at `mac`: solicited, override, router.
pub fn neighbour_advert(
    out: &mut Vec<u8>,
    frame: &[u8],
    x: &Parsed,
    ns: &Nd,
    mac: MacAddr,
) -> bool {
    if ns.src.is_unspecified() || !link_back(out, frame, x.l3_offset, mac) {
        return false;
    }
    let ip = ipv6_header(ns.target, ns.src.octets(), 255);
    ip.push(out, build::ND_LEN);
    build::nd(
        out,
        &ip,
        NA,
        0xe0,
        ns.target,
        build::ND_OPT_TARGET_LL,
        mac.0,
    );
    build::pad(out);
    true
}

/// A solicitation for `target` from `mac` / `src`, to its solicited-node
/// multicast address.
pub fn neighbour_solicit(out: &mut Vec<u8>, mac: MacAddr, src: Ipv6Addr, target: Ipv6Addr) -> bool {
    let group = solicited_node(target).octets();
    out.clear();
    let dst = [0x33, 0x33, group[12], group[13], group[14], group[15]];
    build::ethernet(out, dst, mac.0, build::ETHERTYPE_IPV6);
    let ip = ipv6_header(src, group, 255);
    ip.push(out, build::ND_LEN);
    build::nd(out, &ip, NS, 0, target, build::ND_OPT_SOURCE_LL, mac.0);
    build::pad(out);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{LinkType, parse};

    const MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);

    #[test]
    fn solicit_then_advert_round_trip() {
        let me: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let peer: Ipv6Addr = "2001:db8::abcd:1234".parse().unwrap();
        let mut ns = Vec::new();
        assert!(neighbour_solicit(&mut ns, MAC, me, peer));
        assert_eq!(&ns[0..6], &[0x33, 0x33, 0xff, 0xcd, 0x12, 0x34]);
        let x = parse(LinkType::Ethernet, &ns).unwrap();
        assert!(x.dst_multicast);
        let got = read_nd(&ns, &x).unwrap();
        assert_eq!(
            got,
            Nd {
                kind: NS,
                src: me,
                target: peer,
                lladdr: Some(MAC)
            }
        );
        let msg = x.l4_bytes(&ns);
        assert!(
            crate::wire::icmpv6::Packet::new_unchecked(msg)
                .verify_checksum(&me, &solicited_node(peer))
        );
        // The peer's answer, built as the router builds its own.
        let theirs = MacAddr([2, 0, 0, 0, 0, 9]);
        let asked = Nd {
            target: peer,
            src: me,
            ..got
        };
        let mut na = Vec::new();
        assert!(neighbour_advert(&mut na, &ns, &x, &asked, theirs));
        let y = parse(LinkType::Ethernet, &na).unwrap();
        let ad = read_nd(&na, &y).unwrap();
        assert_eq!((ad.kind, ad.target, ad.lladdr), (NA, peer, Some(theirs)));
        assert_eq!(&na[0..6], &MAC.0, "back to the solicitor");
        assert!(
            crate::wire::icmpv6::Packet::new_unchecked(y.l4_bytes(&na)).verify_checksum(&peer, &me)
        );
    }

    #[test]
    fn arp_request_and_reply() {
        let me = Ipv4Addr::new(10, 0, 0, 1);
        let peer = Ipv4Addr::new(10, 0, 0, 2);
        let mut req = Vec::new();
        assert!(arp_request(&mut req, MAC, me, peer));
        assert_eq!(req.len(), 60);
        let x = parse(LinkType::Ethernet, &req).unwrap();
        let a = read_arp(&req, &x).unwrap();
        assert_eq!((a.op, a.sha, a.spa, a.tpa), (ARP_REQUEST, MAC, me, peer));
        let theirs = MacAddr([2, 0, 0, 0, 0, 9]);
        let mut rep = Vec::new();
        assert!(arp_reply(&mut rep, &req, &x, &a, theirs));
        let y = parse(LinkType::Ethernet, &rep).unwrap();
        let b = read_arp(&rep, &y).unwrap();
        assert_eq!(
            (b.op, b.sha, b.spa, b.tha, b.tpa),
            (ARP_REPLY, theirs, peer, MAC, me)
        );
        assert_eq!((&rep[0..6], &rep[6..12]), (&MAC.0[..], &theirs.0[..]));
        assert!(read_arp(&req[..40], &x).is_none());
    }
}
