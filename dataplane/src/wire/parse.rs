//! The hot-path parser: one call from link-layer bytes to a small `Copy`
//! summary of everything the stages need.
//!
//! # Length policy
//!
//! A capture's `caplen` can be shorter than the packet on the wire (snaplen),
//! and the parser only sees captured bytes. So:
//!
//! * [`Malformed`] is returned only when a header the summary needs (link
//!   header, VLAN tags, IP header with options, IPv6 extension headers, the
//!   L4 header through its ports) is cut short, or when length
//!   fields contradict each other (IHL < 5, total length below the header
//!   length, extension headers or L4 header beyond the IP payload, UDP length
//!   below 8 or beyond the IP payload, a fragment reaching past 65535, an
//!   inconsistent jumbogram).
//! * An IP datagram whose length field exceeds the captured bytes, with every
//!   needed header present, parses, with [`Parsed::truncated`] set. Such a
//!   datagram's TCP or UDP header is needed only through its ports (a
//!   40-byte snapshot keeps a TCP header's first 20 bytes, not its
//!   options): the flow is known, so it is keyed and counted, not
//!   malformed.
//!   [`parse_with_orig_len`] turns that flag into
//!   [`Malformed::Ipv4TotalLengthBeyondFrame`] /
//!   [`Malformed::Ipv6PayloadBeyondFrame`] when the caller knows the capture
//!   was complete (`caplen == len` in pcap, or a live frame), i.e. when the
//!   length field lies.
//! * Bytes after the IP datagram (Ethernet padding, trailers) are ignored.
//! * IPv4 total length 0 is taken as "the length of the frame" (Linux
//!   segmentation offload writes 0 for "BIG TCP" packets over 64 KiB, as
//!   tcpdump also assumes); [`Parsed::ip_len_from_capture`] is set.
//! * An IPv6 payload length of 0 with a hop-by-hop jumbo payload option
//!   (RFC 2675) uses the option's length; [`Parsed::jumbo`] is set. A jumbo
//!   option with a non-zero payload length, a jumbo length below 65536, a
//!   malformed option, or a jumbogram with a fragment header is
//!   [`Malformed::BadJumbogram`].
//!
//! Frames that are not IP (ARP, PPPoE, MPLS, LLC, or an unknown link type)
//! parse with [`Parsed::ip_version`] `None`: they are counted, not malformed.

use core::fmt;
use core::net::{Ipv4Addr, Ipv6Addr};

use super::flow::{Flow4, Flow6, FlowKey};
use super::{
    LinkType, checksum,
    ethernet::{self, EtherType},
    ip::{Ecn, IpProtocol, IpVersion},
    ipv4, ipv6, read_u16, sll,
    tcp::TcpFlags,
};

/// Fragment information of a fragmented IPv4 or IPv6 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fragment {
    /// Identification (IPv4: 16 bits widened; IPv6: 32 bits).
    pub id: u32,
    /// Offset of this fragment in bytes.
    pub offset: u16,
    /// The "more fragments" flag.
    pub more: bool,
}

impl Fragment {
    /// Whether this is the first fragment (offset 0), the only one with an L4 header.
    #[inline]
    pub fn is_first(&self) -> bool {
        self.offset == 0
    }
}

/// The summary of one parsed frame. Offsets are from the start of the frame
/// and always lie within it; for non-IP frames the IP fields are zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parsed {
    /// Number of VLAN tags (saturating at `u16::MAX`).
    pub vlan_depth: u16,
    /// VLAN id of the outermost tag.
    pub outer_vlan: Option<u16>,
    /// EtherType after the tags (for raw IP, the one the version nibble implies).
    pub ethertype: EtherType,
    /// Offset of the IP header (for non-IP frames, of the L2 payload).
    pub l3_offset: usize,
    /// IP version, `None` for non-IP frames.
    pub ip_version: Option<IpVersion>,
    /// IP header length: IHL × 4 for IPv4, 40 plus the extension headers
    /// walked for IPv6 (up to the upper-layer header, or up to and including
    /// the fragment header of a non-first fragment).
    pub ip_header_len: usize,
    /// Length of the IP datagram according to its header (IPv4 total length,
    /// IPv6 40 + payload length or jumbo length); may exceed the frame when
    /// [`truncated`](Self::truncated).
    pub ip_total_len: usize,
    /// ECN codepoint.
    pub ecn: Ecn,
    /// DSCP (6 bits).
    pub dscp: u8,
    /// IPv4 TTL or IPv6 hop limit.
    pub ttl: u8,
    /// Upper-layer protocol (after IPv6 extension headers; for a non-first
    /// IPv6 fragment, the fragment header's next header).
    pub protocol: IpProtocol,
    /// Offset of the L4 header; `None` for non-IP frames and non-first fragments.
    pub l4_offset: Option<usize>,
    /// L4 header length: TCP data offset × 4, 8 for UDP/ICMP/ICMPv6/IGMP,
    /// 0 for other protocols (and when there is no L4 header); of a header
    /// the capture cut ([`truncated`](Self::truncated)), the captured part,
    /// so `l4_offset + l4_header_len` never passes the captured bytes.
    pub l4_header_len: usize,
    /// Fragment information, `None` when not fragmented (an IPv6 atomic
    /// fragment — fragment header with offset 0 and M clear — is reported).
    pub fragment: Option<Fragment>,
    /// TCP/UDP source port (0 otherwise and for non-first fragments).
    pub src_port: u16,
    /// TCP/UDP destination port (0 otherwise and for non-first fragments).
    pub dst_port: u16,
    /// TCP flags (empty otherwise).
    pub tcp_flags: TcpFlags,
    /// IPv4 header checksum field as found (0 for IPv6; a zero IPv4 value
    /// usually means TX checksum offload in the capture).
    pub ipv4_checksum: u16,
    /// Upper-layer payload bytes after the L4 header according to the length
    /// fields (UDP length for UDP; the rest of the IP payload otherwise; for
    /// a non-first fragment, the fragment's data).
    pub payload_len: usize,
    /// Whether the destination is an IPv4 (224/4) or IPv6 (ff00::/8) multicast address.
    pub dst_multicast: bool,
    /// The IP datagram is longer than the captured frame: cut by the
    /// capture's snapshot length (headers through the L4 ports are all
    /// present; a TCP header's options, or its flags, may not be).
    pub truncated: bool,
    /// IPv4 total length was 0 and the frame's length was used.
    pub ip_len_from_capture: bool,
    /// IPv6 jumbogram (length from the hop-by-hop jumbo option).
    pub jumbo: bool,
    /// The 5-tuple, for IP frames.
    pub flow: Option<FlowKey>,
}

impl Parsed {
    fn non_ip(
        vlan_depth: u16,
        outer_vlan: Option<u16>,
        ethertype: EtherType,
        l3_offset: usize,
    ) -> Parsed {
        Parsed {
            vlan_depth,
            outer_vlan,
            ethertype,
            l3_offset,
            ip_version: None,
            ip_header_len: 0,
            ip_total_len: 0,
            ecn: Ecn::NotEct,
            dscp: 0,
            ttl: 0,
            protocol: IpProtocol::Unknown(0xff),
            l4_offset: None,
            l4_header_len: 0,
            fragment: None,
            src_port: 0,
            dst_port: 0,
            tcp_flags: TcpFlags(0),
            ipv4_checksum: 0,
            payload_len: 0,
            dst_multicast: false,
            truncated: false,
            ip_len_from_capture: false,
            jumbo: false,
            flow: None,
        }
    }

    /// Whether the frame carries IPv4 or IPv6.
    #[inline]
    pub fn is_ip(&self) -> bool {
        self.ip_version.is_some()
    }

    /// The captured bytes of the L4 message: from the L4 header to the end of
    /// the IP datagram or of `frame`, whichever comes first (empty when there
    /// is no L4 header). `frame` must be the buffer that was parsed; with any
    /// other buffer the result is still in bounds but meaningless.
    pub fn l4_bytes<'a>(&self, frame: &'a [u8]) -> &'a [u8] {
        let Some(start) = self.l4_offset else {
            return &[];
        };
        let end = self
            .l3_offset
            .saturating_add(self.ip_total_len)
            .min(frame.len());
        frame.get(start..end).unwrap_or(&[])
    }
}

macro_rules! malformed {
    ($( $(#[$doc:meta])* $variant:ident => $name:literal, )+) => {
        /// Why a frame could not be parsed. Small and `Copy`; see the module
        /// docs for the length policy.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        pub enum Malformed {
            $( $(#[$doc])* $variant, )+
        }

        impl Malformed {
            /// Every reason, in declaration order.
            pub const ALL: [Malformed; Malformed::COUNT] = [$(Malformed::$variant,)+];
            /// Number of reasons.
            pub const COUNT: usize = [$($name,)+].len();

            /// Stable snake_case name, e.g. `truncated_l2`.
            pub fn name(self) -> &'static str {
                match self {
                    $( Malformed::$variant => $name, )+
                }
            }
        }
    };
}

malformed! {
    /// Ethernet or SLL header, or a VLAN tag, cut short; or an empty raw-IP frame.
    TruncatedL2 => "truncated_l2",
    /// Raw-IP frame whose version nibble is neither 4 nor 6.
    BadIpVersion => "bad_ip_version",
    /// Fewer than 20 bytes, or fewer than IHL × 4 bytes, of IPv4 header.
    TruncatedIpv4Header => "truncated_ipv4_header",
    /// EtherType IPv4 but version field not 4.
    BadIpv4Version => "bad_ipv4_version",
    /// IHL below 5.
    BadIpv4HeaderLength => "bad_ipv4_header_length",
    /// Non-zero total length below the header length.
    Ipv4TotalLengthBelowHeader => "ipv4_total_length_below_header",
    /// Total length beyond a frame known to be complete ([`parse_with_orig_len`] only).
    Ipv4TotalLengthBeyondFrame => "ipv4_total_length_beyond_frame",
    /// Fewer than 40 bytes of IPv6 header.
    TruncatedIpv6Header => "truncated_ipv6_header",
    /// EtherType IPv6 but version field not 6.
    BadIpv6Version => "bad_ipv6_version",
    /// Payload (or jumbo) length beyond a frame known to be complete ([`parse_with_orig_len`] only).
    Ipv6PayloadBeyondFrame => "ipv6_payload_beyond_frame",
    /// An IPv6 extension header cut short by the capture.
    TruncatedExtensionHeader => "truncated_extension_header",
    /// An IPv6 extension header extends past the payload length.
    Ipv6ExtensionBeyondPayload => "ipv6_extension_beyond_payload",
    /// Inconsistent jumbo payload option (RFC 2675).
    BadJumbogram => "bad_jumbogram",
    /// Fragment offset plus fragment length beyond 65535 bytes.
    FragmentOverflow => "fragment_overflow",
    /// The L4 header (TCP with options, UDP, ICMP, ICMPv6, IGMP) cut short by the capture.
    TruncatedL4Header => "truncated_l4_header",
    /// The L4 header extends past the IP payload length.
    L4HeaderBeyondIpPayload => "l4_header_beyond_ip_payload",
    /// TCP data offset below 5.
    BadTcpHeaderLength => "bad_tcp_header_length",
    /// UDP length below 8, or beyond the IP payload of an unfragmented datagram.
    BadUdpLength => "bad_udp_length",
}

impl Malformed {
    /// Position in [`Malformed::ALL`].
    #[inline]
    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::error::Error for Malformed {}

/// Per-reason counters of malformed frames.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MalformedCounters {
    counts: [u64; Malformed::COUNT],
}

impl MalformedCounters {
    /// All zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts one frame malformed for `reason`.
    #[inline]
    pub fn record(&mut self, reason: Malformed) {
        let c = &mut self.counts[reason.index()];
        *c = c.saturating_add(1);
    }

    /// The count for `reason`.
    pub fn get(&self, reason: Malformed) -> u64 {
        self.counts[reason.index()]
    }

    /// The sum over all reasons.
    pub fn total(&self) -> u64 {
        self.counts.iter().fold(0u64, |a, &c| a.saturating_add(c))
    }

    /// Adds another set of counters (merging per-worker shards).
    pub fn merge(&mut self, other: &MalformedCounters) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a = a.saturating_add(*b);
        }
    }

    /// `(name, count)` for every reason, zeros included, in a stable order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Malformed::ALL.iter().map(|r| (r.name(), self.get(*r)))
    }
}

/// Parses one frame of link type `link`. Never panics, never allocates, and
/// reads only bytes whose presence it checked. The frame is taken to be
/// possibly cut by a capture's snaplen; see the module docs.
#[inline]
pub fn parse(link: LinkType, frame: &[u8]) -> Result<Parsed, Malformed> {
    let (ethertype, off, depth, outer) = parse_l2(link, frame)?;
    let mut p = Parsed::non_ip(depth, outer, ethertype, off);
    parse_l3(frame, &mut p)?;
    Ok(p)
}

/// Like [`parse`], with the frame's original length on the wire (pcap
/// `len`; `frame.len()` for a live frame). When the whole frame is present
/// (`frame.len() >= orig_len`), an IP length beyond it is a lie, reported as
/// [`Malformed::Ipv4TotalLengthBeyondFrame`] or [`Malformed::Ipv6PayloadBeyondFrame`].
pub fn parse_with_orig_len(
    link: LinkType,
    frame: &[u8],
    orig_len: usize,
) -> Result<Parsed, Malformed> {
    let p = parse(link, frame)?;
    check_orig_len(&p, frame, orig_len)?;
    Ok(p)
}

/// [`parse`] (or, with `orig_len`, [`parse_with_orig_len`]) writing the
/// summary straight into `out`, which is `Some` after success and `None`
/// after a failure. The same result as the by-value functions; it exists
/// for the hot path, where the summary lives in a batch slot and a
/// returned `Parsed` (over a hundred bytes) would be built on the stack and
/// then copied there, and it decides the common plain UDP and TCP frames
/// on a shortcut of its own (`plain`).
#[inline]
pub fn parse_into(
    link: LinkType,
    frame: &[u8],
    orig_len: Option<usize>,
    out: &mut Option<Parsed>,
) -> Result<(), Malformed> {
    if link == LinkType::Ethernet && plain(frame, out) {
        return Ok(());
    }
    let res = match parse_l2(link, frame) {
        Ok((ethertype, off, depth, outer)) => {
            let p = out.insert(Parsed::non_ip(depth, outer, ethertype, off));
            parse_l3(frame, p).and_then(|()| match orig_len {
                Some(len) => check_orig_len(p, frame, len),
                None => Ok(()),
            })
        }
        Err(m) => Err(m),
    };
    if res.is_err() {
        *out = None;
    }
    res
}

/// The common case without the general parser's steps: an untagged
/// Ethernet frame carrying IPv4 that is not a fragment, or IPv6 without
/// extension headers, whose datagram lies whole within the frame,
/// with a UDP or TCP header that fits it. `false`, with `out` untouched,
/// for anything else, which the general parser decides. What it writes is
/// what [`parse`] returns (the tests compare the two on every public
/// capture and on mutated frames); it reads each field once and writes it
/// once, where the general path writes [`Parsed::non_ip`] and then the IP
/// fields over it, and it has no error to report (no [`Malformed`] reason
/// applies to such a frame). Most of a router's traffic is such frames.
#[inline(always)]
fn plain(frame: &[u8], out: &mut Option<Parsed>) -> bool {
    let Some(eth) = frame.first_chunk::<{ PLAIN_L3 + 1 }>() else {
        return false;
    };
    match EtherType::from(u16::from_be_bytes([eth[12], eth[13]])) {
        // Without options, the common case, every offset is a constant.
        EtherType::Ipv4 if eth[PLAIN_L3] == 0x45 => plain_ipv4::<false>(frame, out).is_some(),
        EtherType::Ipv4 => plain_ipv4::<true>(frame, out).is_some(),
        EtherType::Ipv6 => plain_ipv6(frame, out).is_some(),
        _ => false,
    }
}

/// The first byte after the Ethernet header.
const PLAIN_L3: usize = ethernet::HEADER_LEN;

/// [`plain`]'s IPv4, with `OPTIONS` (skipped, as the general parser skips
/// them: an Icarus filter travels there) or without.
#[inline(always)]
fn plain_ipv4<const OPTIONS: bool>(frame: &[u8], out: &mut Option<Parsed>) -> Option<()> {
    const FIXED: usize = PLAIN_L3 + ipv4::MIN_HEADER_LEN;
    let h: &[u8; FIXED] = frame.first_chunk()?;
    let ip = |i: usize| h[PLAIN_L3 + i];
    let be = |i: usize| u16::from_be_bytes([ip(i), ip(i + 1)]);
    let ihl = if OPTIONS {
        usize::from(ip(0) & 0x0f) * 4
    } else {
        ipv4::MIN_HEADER_LEN
    };
    if ip(0) >> 4 != 4 || ihl < ipv4::MIN_HEADER_LEN || be(6) & 0x3fff != 0 {
        return None;
    }
    let total = usize::from(be(2));
    let l4 = plain_l4(frame, PLAIN_L3 + ihl, total.checked_sub(ihl)?, ip(9))?;
    let src = Ipv4Addr::new(ip(12), ip(13), ip(14), ip(15));
    let dst = Ipv4Addr::new(ip(16), ip(17), ip(18), ip(19));
    let flow = FlowKey::V4(Flow4 {
        src,
        dst,
        src_port: l4.src_port,
        dst_port: l4.dst_port,
        protocol: l4.protocol,
    });
    let ip = PlainIp {
        version: IpVersion::V4,
        header: ihl,
        total,
        tc: ip(1),
        ttl: ip(8),
        checksum: be(10),
        dst_multicast: dst.is_multicast(),
    };
    l4.write(ip, flow, out);
    Some(())
}

/// [`plain`]'s IPv6.
#[inline(always)]
fn plain_ipv6(frame: &[u8], out: &mut Option<Parsed>) -> Option<()> {
    const L4: usize = PLAIN_L3 + ipv6::HEADER_LEN;
    let h: &[u8; L4] = frame.first_chunk()?;
    let ip = |i: usize| h[PLAIN_L3 + i];
    if ip(0) >> 4 != 6 {
        return None;
    }
    let payload = usize::from(u16::from_be_bytes([ip(4), ip(5)]));
    let l4 = plain_l4(frame, L4, payload, ip(6))?;
    let addr = |i: usize| {
        let mut a = [0u8; 16];
        a.copy_from_slice(&h[PLAIN_L3 + i..PLAIN_L3 + i + 16]);
        Ipv6Addr::from(a)
    };
    let (src, dst) = (addr(8), addr(24));
    let flow = FlowKey::V6(Flow6 {
        src,
        dst,
        src_port: l4.src_port,
        dst_port: l4.dst_port,
        protocol: l4.protocol,
    });
    let tc = (ip(0) << 4) | (ip(1) >> 4);
    let ip = PlainIp {
        version: IpVersion::V6,
        header: ipv6::HEADER_LEN,
        total: ipv6::HEADER_LEN + payload,
        tc,
        ttl: ip(7),
        checksum: 0,
        dst_multicast: dst.is_multicast(),
    };
    l4.write(ip, flow, out);
    Some(())
}

/// What [`plain_l4`] read.
struct PlainL4 {
    protocol: IpProtocol,
    src_port: u16,
    dst_port: u16,
    header: usize,
    payload: usize,
    flags: TcpFlags,
}

/// A UDP or TCP header at `l4`, followed by the rest of an IP payload of
/// `ip_payload` bytes, all within `frame`, its lengths consistent; `None`
/// otherwise.
#[inline(always)]
fn plain_l4(frame: &[u8], l4: usize, ip_payload: usize, next: u8) -> Option<PlainL4> {
    let rest = frame.get(l4..)?;
    if rest.len() < ip_payload {
        return None;
    }
    let protocol = IpProtocol::from(next);
    let (header, payload, flags) = match protocol {
        IpProtocol::Udp => {
            let u: &[u8; super::udp::HEADER_LEN] = rest.first_chunk()?;
            let ulen = usize::from(u16::from_be_bytes([u[4], u[5]]));
            if ulen < u.len() || ulen > ip_payload {
                return None;
            }
            (u.len(), ulen - u.len(), TcpFlags(0))
        }
        IpProtocol::Tcp => {
            let t: &[u8; super::tcp::MIN_HEADER_LEN] = rest.first_chunk()?;
            let doff = usize::from(t[12] >> 4) * 4;
            if doff < t.len() || doff > ip_payload {
                return None;
            }
            let flags = TcpFlags(u16::from_be_bytes([t[12], t[13]]) & 0x01ff);
            (doff, ip_payload - doff, flags)
        }
        _ => return None,
    };
    Some(PlainL4 {
        protocol,
        src_port: u16::from_be_bytes([rest[0], rest[1]]),
        dst_port: u16::from_be_bytes([rest[2], rest[3]]),
        header,
        payload,
        flags,
    })
}

/// The IP layer's part of a [`plain`] summary.
struct PlainIp {
    version: IpVersion,
    header: usize,
    total: usize,
    /// The traffic class byte (IPv4: the TOS byte).
    tc: u8,
    ttl: u8,
    checksum: u16,
    dst_multicast: bool,
}

impl PlainL4 {
    /// Writes the summary into `out`, field by field into a slot that
    /// usually holds one already (a batch slot's last packet's): a summary
    /// built on the stack and copied in costs more than reading the
    /// headers. The pattern names every field, so a field added to
    /// [`Parsed`] fails to compile here until it is written.
    #[inline(always)]
    fn write(self, ip: PlainIp, flow: FlowKey, out: &mut Option<Parsed>) {
        let ethertype = match ip.version {
            IpVersion::V4 => EtherType::Ipv4,
            IpVersion::V6 => EtherType::Ipv6,
        };
        let p = out.get_or_insert_with(|| Parsed::non_ip(0, None, ethertype, PLAIN_L3));
        let Parsed {
            vlan_depth,
            outer_vlan,
            ethertype: p_ethertype,
            l3_offset,
            ip_version,
            ip_header_len,
            ip_total_len,
            ecn,
            dscp,
            ttl,
            protocol,
            l4_offset,
            l4_header_len,
            fragment,
            src_port,
            dst_port,
            tcp_flags,
            ipv4_checksum,
            payload_len,
            dst_multicast,
            truncated,
            ip_len_from_capture,
            jumbo,
            flow: p_flow,
        } = p;
        *vlan_depth = 0;
        *outer_vlan = None;
        *p_ethertype = ethertype;
        *l3_offset = PLAIN_L3;
        *ip_version = Some(ip.version);
        *ip_header_len = ip.header;
        *ip_total_len = ip.total;
        *ecn = Ecn::from_bits(ip.tc);
        *dscp = ip.tc >> 2;
        *ttl = ip.ttl;
        *protocol = self.protocol;
        *l4_offset = Some(PLAIN_L3 + ip.header);
        *l4_header_len = self.header;
        *fragment = None;
        *src_port = self.src_port;
        *dst_port = self.dst_port;
        *tcp_flags = self.flags;
        *ipv4_checksum = ip.checksum;
        *payload_len = self.payload;
        *dst_multicast = ip.dst_multicast;
        *truncated = false;
        *ip_len_from_capture = false;
        *jumbo = false;
        *p_flow = Some(flow);
    }
}

/// The [`parse_with_orig_len`] check on a parsed frame.
#[inline]
fn check_orig_len(p: &Parsed, frame: &[u8], orig_len: usize) -> Result<(), Malformed> {
    if p.truncated && frame.len() >= orig_len {
        return Err(match p.ip_version {
            Some(IpVersion::V4) => Malformed::Ipv4TotalLengthBeyondFrame,
            _ => Malformed::Ipv6PayloadBeyondFrame,
        });
    }
    Ok(())
}

/// The link header and VLAN tags: the EtherType after them, the offset of
/// the L2 payload, the tag count and the outer VLAN id.
#[inline(always)]
fn parse_l2(
    link: LinkType,
    frame: &[u8],
) -> Result<(EtherType, usize, u16, Option<u16>), Malformed> {
    let (mut ethertype, mut off) = match link {
        LinkType::Ethernet => match read_u16(frame, ethernet::HEADER_LEN - 2) {
            Some(t) => (EtherType::from(t), ethernet::HEADER_LEN),
            None => return Err(Malformed::TruncatedL2),
        },
        LinkType::LinuxSll => match read_u16(frame, sll::HEADER_LEN - 2) {
            Some(t) => (EtherType::from(t), sll::HEADER_LEN),
            None => return Err(Malformed::TruncatedL2),
        },
        LinkType::RawIp => match frame.first().map(|b| b >> 4) {
            Some(4) => (EtherType::Ipv4, 0),
            Some(6) => (EtherType::Ipv6, 0),
            Some(_) => return Err(Malformed::BadIpVersion),
            None => return Err(Malformed::TruncatedL2),
        },
        LinkType::Unknown(_) => return Ok((EtherType::Unknown(0), 0, 0, None)),
    };

    let mut depth: u16 = 0;
    let mut outer = None;
    while ethertype.is_vlan_tpid() {
        let (Some(tci), Some(next)) = (read_u16(frame, off), read_u16(frame, off + 2)) else {
            return Err(Malformed::TruncatedL2);
        };
        if depth == 0 {
            outer = Some(tci & 0x0fff);
        }
        depth = depth.saturating_add(1);
        ethertype = EtherType::from(next);
        off += 4;
    }
    Ok((ethertype, off, depth, outer))
}

/// The IP layer and up, into `p` (a [`Parsed::non_ip`] of the L2 result).
#[inline(always)]
fn parse_l3(frame: &[u8], p: &mut Parsed) -> Result<(), Malformed> {
    match p.ethertype {
        EtherType::Ipv4 => parse_ipv4(frame, p.l3_offset, p),
        EtherType::Ipv6 => parse_ipv6(frame, p.l3_offset, p),
        _ => Ok(()),
    }
}

fn parse_ipv4(frame: &[u8], off: usize, p: &mut Parsed) -> Result<(), Malformed> {
    let Some(h) = frame.get(off..off + ipv4::MIN_HEADER_LEN) else {
        return Err(Malformed::TruncatedIpv4Header);
    };
    if h[0] >> 4 != 4 {
        return Err(Malformed::BadIpv4Version);
    }
    let ihl = usize::from(h[0] & 0x0f) * 4;
    if ihl < ipv4::MIN_HEADER_LEN {
        return Err(Malformed::BadIpv4HeaderLength);
    }
    let captured = frame.len() - off;
    if captured < ihl {
        return Err(Malformed::TruncatedIpv4Header);
    }
    let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
    let ip_len = if total == 0 {
        p.ip_len_from_capture = true;
        captured
    } else if total < ihl {
        return Err(Malformed::Ipv4TotalLengthBelowHeader);
    } else {
        total
    };
    let flg_off = u16::from_be_bytes([h[6], h[7]]);
    let more = flg_off & 0x2000 != 0;
    let frag_offset = (flg_off & 0x1fff) << 3;
    let fragment = (more || frag_offset != 0).then_some(Fragment {
        id: u32::from(u16::from_be_bytes([h[4], h[5]])),
        offset: frag_offset,
        more,
    });
    if fragment.is_some() && usize::from(frag_offset) + (ip_len - ihl) > 65535 {
        return Err(Malformed::FragmentOverflow);
    }
    let src = Ipv4Addr::new(h[12], h[13], h[14], h[15]);
    let dst = Ipv4Addr::new(h[16], h[17], h[18], h[19]);

    p.ip_version = Some(IpVersion::V4);
    p.ip_header_len = ihl;
    p.ip_total_len = ip_len;
    p.ecn = Ecn::from_bits(h[1]);
    p.dscp = h[1] >> 2;
    p.ttl = h[8];
    p.protocol = IpProtocol::from(h[9]);
    p.ipv4_checksum = u16::from_be_bytes([h[10], h[11]]);
    p.fragment = fragment;
    p.dst_multicast = dst.is_multicast();
    p.truncated = ip_len > captured;

    parse_l4(frame, off + ihl, off + ip_len, false, p)?;
    p.flow = Some(FlowKey::V4(Flow4 {
        src,
        dst,
        src_port: p.src_port,
        dst_port: p.dst_port,
        protocol: p.protocol,
    }));
    Ok(())
}

fn parse_ipv6(frame: &[u8], off: usize, p: &mut Parsed) -> Result<(), Malformed> {
    let Some(h) = frame.get(off..off + ipv6::HEADER_LEN) else {
        return Err(Malformed::TruncatedIpv6Header);
    };
    if h[0] >> 4 != 6 {
        return Err(Malformed::BadIpv6Version);
    }
    let tc = (h[0] << 4) | (h[1] >> 4);
    let payload_len = usize::from(u16::from_be_bytes([h[4], h[5]]));
    let mut next = IpProtocol::from(h[6]);
    let mut a = [0u8; 16];
    a.copy_from_slice(&h[8..24]);
    let src = Ipv6Addr::from(a);
    a.copy_from_slice(&h[24..40]);
    let dst = Ipv6Addr::from(a);

    let mut ip_len = ipv6::HEADER_LEN + payload_len;
    let mut end = off.saturating_add(ip_len);
    let mut cur = off + ipv6::HEADER_LEN;
    let mut first = true;
    let mut jumbo = false;
    let mut non_first_fragment = false;
    loop {
        match next {
            IpProtocol::HopByHop
            | IpProtocol::Ipv6Route
            | IpProtocol::Ipv6Opts
            | IpProtocol::Ah => {
                let Some(&len_field) = frame.get(cur + 1) else {
                    return Err(Malformed::TruncatedExtensionHeader);
                };
                let hl = ipv6::ext_header_len(len_field, next == IpProtocol::Ah);
                let Some(hdr) = frame.get(cur..cur + hl) else {
                    return Err(Malformed::TruncatedExtensionHeader);
                };
                if first && next == IpProtocol::HopByHop {
                    for opt in ipv6::Options::new(&hdr[2..]) {
                        if opt.kind != ipv6::OPT_JUMBO {
                            continue;
                        }
                        let &[a, b, c, d] = opt.data else {
                            return Err(Malformed::BadJumbogram);
                        };
                        let j = u32::from_be_bytes([a, b, c, d]);
                        if payload_len != 0 || j <= 65535 || jumbo {
                            return Err(Malformed::BadJumbogram);
                        }
                        jumbo = true;
                        ip_len = ipv6::HEADER_LEN.saturating_add(j as usize);
                        end = off.saturating_add(ip_len);
                    }
                }
                if cur + hl > end {
                    return Err(Malformed::Ipv6ExtensionBeyondPayload);
                }
                next = IpProtocol::from(hdr[0]);
                cur += hl;
            }
            IpProtocol::Ipv6Frag => {
                let Some(hdr) = frame.get(cur..cur + ipv6::FRAGMENT_HEADER_LEN) else {
                    return Err(Malformed::TruncatedExtensionHeader);
                };
                if cur + ipv6::FRAGMENT_HEADER_LEN > end {
                    return Err(Malformed::Ipv6ExtensionBeyondPayload);
                }
                if jumbo {
                    return Err(Malformed::BadJumbogram);
                }
                let off_m = u16::from_be_bytes([hdr[2], hdr[3]]);
                let frag = Fragment {
                    id: u32::from_be_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]),
                    offset: off_m & !0x7,
                    more: off_m & 1 != 0,
                };
                next = IpProtocol::from(hdr[0]);
                cur += ipv6::FRAGMENT_HEADER_LEN;
                if usize::from(frag.offset) + (end - cur) > 65535 {
                    return Err(Malformed::FragmentOverflow);
                }
                p.fragment = Some(frag);
                if !frag.is_first() {
                    non_first_fragment = true;
                    break;
                }
            }
            _ => break,
        }
        first = false;
    }

    p.ip_version = Some(IpVersion::V6);
    p.ip_header_len = cur - off;
    p.ip_total_len = ip_len;
    p.ecn = Ecn::from_bits(tc);
    p.dscp = tc >> 2;
    p.ttl = h[7];
    p.protocol = next;
    p.dst_multicast = dst.is_multicast();
    p.jumbo = jumbo;
    p.truncated = end > frame.len();

    if non_first_fragment {
        p.payload_len = end - cur;
    } else {
        parse_l4(frame, cur, end, jumbo, p)?;
    }
    p.flow = Some(FlowKey::V6(Flow6 {
        src,
        dst,
        src_port: p.src_port,
        dst_port: p.dst_port,
        protocol: p.protocol,
    }));
    Ok(())
}

/// Parses the L4 header at `l4` of an IP datagram ending (per its length
/// fields) at `end >= l4`. Handles non-first IPv4 fragments too.
#[inline(always)]
fn parse_l4(
    frame: &[u8],
    l4: usize,
    end: usize,
    jumbo: bool,
    p: &mut Parsed,
) -> Result<(), Malformed> {
    let ip_payload = end - l4;
    if let Some(f) = p.fragment
        && !f.is_first()
    {
        p.payload_len = ip_payload;
        return Ok(());
    }
    let need = match p.protocol {
        IpProtocol::Tcp => super::tcp::MIN_HEADER_LEN,
        IpProtocol::Udp => super::udp::HEADER_LEN,
        IpProtocol::Icmp | IpProtocol::Icmpv6 | IpProtocol::Igmp => 8,
        _ => 0,
    };
    if ip_payload < need {
        return Err(Malformed::L4HeaderBeyondIpPayload);
    }
    let Some(h) = frame.get(l4..l4 + need) else {
        return cut_l4(frame, l4, ip_payload, need, p);
    };
    p.l4_offset = Some(l4);
    match p.protocol {
        IpProtocol::Tcp => {
            let doff = usize::from(h[12] >> 4) * 4;
            if doff < super::tcp::MIN_HEADER_LEN {
                return Err(Malformed::BadTcpHeaderLength);
            }
            if doff > ip_payload {
                return Err(Malformed::L4HeaderBeyondIpPayload);
            }
            // Options past the captured bytes: the datagram is cut by the
            // capture (it ends within the frame otherwise, and `doff` is
            // within it), and the ports and flags are in the first 20
            // bytes, which are here. Not malformed.
            p.src_port = u16::from_be_bytes([h[0], h[1]]);
            p.dst_port = u16::from_be_bytes([h[2], h[3]]);
            p.tcp_flags = TcpFlags(u16::from_be_bytes([h[12], h[13]]) & 0x01ff);
            // The captured part of the header when the options are cut.
            p.l4_header_len = doff.min(frame.len() - l4);
            p.payload_len = ip_payload - doff;
        }
        IpProtocol::Udp => {
            let ulen = usize::from(u16::from_be_bytes([h[4], h[5]]));
            let ulen = if ulen == 0 && jumbo { ip_payload } else { ulen };
            if ulen < super::udp::HEADER_LEN || (p.fragment.is_none() && ulen > ip_payload) {
                return Err(Malformed::BadUdpLength);
            }
            p.src_port = u16::from_be_bytes([h[0], h[1]]);
            p.dst_port = u16::from_be_bytes([h[2], h[3]]);
            p.l4_header_len = super::udp::HEADER_LEN;
            p.payload_len = if p.fragment.is_some() {
                ip_payload
            } else {
                ulen
            } - super::udp::HEADER_LEN;
        }
        IpProtocol::Icmp | IpProtocol::Icmpv6 => {
            // As NetFlow and IPFIX key ICMP: type and code in the
            // destination port (`type << 8 | code`), so echo requests,
            // replies and errors are flows of their own and show as such.
            p.dst_port = u16::from_be_bytes([h[0], h[1]]);
            p.l4_header_len = need;
            p.payload_len = ip_payload - need;
        }
        _ => {
            p.l4_header_len = need;
            p.payload_len = ip_payload - need;
        }
    }
    Ok(())
}

/// An L4 header the capture cut (the datagram goes on past the captured
/// bytes) before `need` bytes: a TCP or UDP header whose ports are here
/// parses, with what is here (TCP flags when captured; lengths from the IP
/// header), as the flow is known, and [`Parsed::truncated`] tells it was
/// cut; anything shorter, or another protocol, is
/// [`Malformed::TruncatedL4Header`].
#[cold]
fn cut_l4(
    frame: &[u8],
    l4: usize,
    ip_payload: usize,
    need: usize,
    p: &mut Parsed,
) -> Result<(), Malformed> {
    let h = frame.get(l4..).unwrap_or_default();
    let ports = matches!(p.protocol, IpProtocol::Tcp | IpProtocol::Udp);
    if !(p.truncated && ports && h.len() >= 4) {
        return Err(Malformed::TruncatedL4Header);
    }
    p.l4_offset = Some(l4);
    p.src_port = u16::from_be_bytes([h[0], h[1]]);
    p.dst_port = u16::from_be_bytes([h[2], h[3]]);
    let mut header = need;
    if p.protocol == IpProtocol::Tcp
        && let (Some(&off), Some(&fl)) = (h.get(12), h.get(13))
    {
        p.tcp_flags = TcpFlags(u16::from_be_bytes([off, fl]) & 0x01ff);
        let doff = usize::from(off >> 4) * 4;
        if doff < super::tcp::MIN_HEADER_LEN {
            return Err(Malformed::BadTcpHeaderLength);
        }
        header = doff.min(ip_payload);
    }
    p.l4_header_len = header.min(h.len());
    p.payload_len = ip_payload - header.min(ip_payload);
    Ok(())
}

/// Marks congestion: sets the ECN codepoint of the IP header at
/// `parsed.l3_offset` to CE when it is ECT(0) or ECT(1), updating the IPv4
/// header checksum incrementally (RFC 1624 eqn. 3, see
/// [`ipv4::Packet::set_ecn_update_checksum`]: a zero, offloaded checksum is
/// updated like any other, which keeps the header's one's-complement sum
/// unchanged).
///
/// Returns whether the packet carries CE afterwards: `true` for ECT(0),
/// ECT(1) (now CE) and CE (left alone), `false` for Not-ECT (left alone: the
/// caller drops instead) and for non-IP frames. Like Linux's
/// `INET_ECN_set_ce`. The header is re-read from `frame` (which must be the
/// buffer that was parsed); a frame too short for it is left untouched.
pub fn set_ce(frame: &mut [u8], parsed: &Parsed) -> bool {
    match parsed.ip_version {
        Some(_) => set_ce_at(frame, parsed.l3_offset),
        None => false,
    }
}

/// [`set_ce`] on the IP header at `l3_offset` of `frame`, its version read
/// from the header itself (a frame whose byte there is neither IPv4 nor
/// IPv6, or that is too short, is left alone: `false`).
pub fn set_ce_at(frame: &mut [u8], l3_offset: usize) -> bool {
    let l3 = l3_offset;
    match frame.get(l3).map(|b| b >> 4) {
        Some(4) => {
            let Some(h) = frame.get_mut(l3..l3 + ipv4::MIN_HEADER_LEN) else {
                return false;
            };
            match Ecn::from_bits(h[1]) {
                Ecn::NotEct => false,
                Ecn::Ce => true,
                Ecn::Ect0 | Ecn::Ect1 => {
                    let old = u16::from_be_bytes([h[0], h[1]]);
                    h[1] |= 0b11;
                    let new = u16::from_be_bytes([h[0], h[1]]);
                    let hc = checksum::update_word(u16::from_be_bytes([h[10], h[11]]), old, new);
                    h[10..12].copy_from_slice(&hc.to_be_bytes());
                    true
                }
            }
        }
        Some(6) => {
            let Some(h) = frame.get_mut(l3..l3 + ipv6::HEADER_LEN) else {
                return false;
            };
            match Ecn::from_bits(h[1] >> 4) {
                Ecn::NotEct => false,
                _ => {
                    h[1] |= 0x30;
                    true
                }
            }
        }
        _ => false,
    }
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
