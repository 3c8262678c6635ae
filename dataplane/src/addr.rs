//! The addresses a router is configured with and speaks: an Ethernet
//! [`MacAddr`], an IP prefix ([`IpNet`]), one of a port's addresses with
//! its connected prefix length ([`InterfaceAddr`]), and a multicast group
//! as the kernels hash it ([`GroupKey`]; the multicast stage and the
//! protocol between routers both use it).
//!
//! Each is written in the configuration as a user writes it
//! (`02:00:00:00:00:01`, `10.9.0.0/16`, `10.1.0.1/24`) and read with
//! [`FromStr`] or serde, the error naming what is wrong. They sit below
//! the configuration and the stages, which both use them.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use serde::Deserialize;

use crate::route::Prefix;

/// An Ethernet MAC address, written `02:00:00:00:00:01`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);

    /// Whether the group bit (multicast or broadcast) is set.
    pub fn is_group(self) -> bool {
        self.0[0] & 1 != 0
    }

    /// The replay default for port `port`: a locally administered unicast
    /// address, `02:62:70:00:00:pp` (`b`, `p` for Bloomplane) with `pp`
    /// the port plus one.
    pub fn default_for_port(port: u8) -> MacAddr {
        MacAddr([0x02, 0x62, 0x70, 0, 0, port.wrapping_add(1)])
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

impl FromStr for MacAddr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let mut out = [0u8; 6];
        let mut parts = s.split([':', '-']);
        for b in &mut out {
            let p = parts.next().unwrap_or("");
            if p.is_empty() || p.len() > 2 {
                return Err(format!("\"{s}\" is not a MAC address (02:00:00:00:00:01)"));
            }
            *b = u8::from_str_radix(p, 16)
                .map_err(|_| format!("\"{s}\" is not a MAC address (02:00:00:00:00:01)"))?;
        }
        if parts.next().is_some() {
            return Err(format!("\"{s}\" is not a MAC address (02:00:00:00:00:01)"));
        }
        Ok(MacAddr(out))
    }
}

impl<'de> Deserialize<'de> for MacAddr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// An IPv4 or IPv6 prefix, written `10.9.0.0/16` (host bits must be
/// zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IpNet {
    /// IPv4.
    V4(Prefix<u32>),
    /// IPv6.
    V6(Prefix<u128>),
}

impl IpNet {
    /// The prefix of `addr` of length `len` (host bits cleared);
    /// `None` when `len` exceeds the address.
    pub fn of(addr: IpAddr, len: u8) -> Option<IpNet> {
        match addr {
            IpAddr::V4(a) => Prefix::new(u32::from(a), len).ok().map(IpNet::V4),
            IpAddr::V6(a) => Prefix::new(u128::from(a), len).ok().map(IpNet::V6),
        }
    }

    /// Whether `addr` lies inside (never for the other family).
    pub fn contains(&self, addr: IpAddr) -> bool {
        match (self, addr) {
            (IpNet::V4(p), IpAddr::V4(a)) => p.contains(u32::from(a)),
            (IpNet::V6(p), IpAddr::V6(a)) => p.contains(u128::from(a)),
            _ => false,
        }
    }

    /// The prefix length.
    pub fn prefix_len(&self) -> u8 {
        match self {
            IpNet::V4(p) => p.prefix_len(),
            IpNet::V6(p) => p.prefix_len(),
        }
    }

    /// The network address.
    pub fn addr(&self) -> IpAddr {
        match self {
            IpNet::V4(p) => IpAddr::V4(p.addr().into()),
            IpNet::V6(p) => IpAddr::V6(p.addr().into()),
        }
    }

    /// Whether the two share an address (one holds the other).
    pub fn overlaps(&self, other: &IpNet) -> bool {
        let (a, b) = if self.prefix_len() <= other.prefix_len() {
            (self, other)
        } else {
            (other, self)
        };
        a.contains(b.addr())
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IpNet::V4(p) => p.fmt(f),
            IpNet::V6(p) => p.fmt(f),
        }
    }
}

/// Splits `a/len` into its address and length.
fn split_prefix(s: &str) -> Result<(IpAddr, u8), String> {
    let (a, l) = s
        .split_once('/')
        .ok_or_else(|| format!("\"{s}\" has no prefix length (10.1.0.1/24, 2001:db8::1/64)"))?;
    let addr: IpAddr = a
        .parse()
        .map_err(|_| format!("\"{a}\" is not an IP address"))?;
    let bits = if addr.is_ipv4() { 32 } else { 128 };
    let len: u8 = l
        .parse()
        .ok()
        .filter(|&n| n <= bits)
        .ok_or_else(|| format!("\"{l}\" is not a prefix length of 0..={bits}"))?;
    Ok((addr, len))
}

impl FromStr for IpNet {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (addr, len) = split_prefix(s)?;
        let net = IpNet::of(addr, len).ok_or_else(|| format!("bad prefix \"{s}\""))?;
        if net.addr() != addr {
            return Err(format!(
                "\"{s}\" has host bits set past /{len} (the prefix is {net})"
            ));
        }
        Ok(net)
    }
}

impl<'de> Deserialize<'de> for IpNet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// One of a port's addresses with its connected prefix length, written
/// `10.1.0.1/24`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct InterfaceAddr {
    /// The router's address.
    pub addr: IpAddr,
    /// The connected prefix's length.
    pub len: u8,
    net: IpNet,
}

impl InterfaceAddr {
    /// `addr/len`; `None` when `len` exceeds the address.
    pub fn new(addr: IpAddr, len: u8) -> Option<InterfaceAddr> {
        Some(InterfaceAddr {
            addr,
            len,
            net: IpNet::of(addr, len)?,
        })
    }

    /// The connected route.
    pub fn network(&self) -> IpNet {
        self.net
    }
}

impl fmt::Display for InterfaceAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl FromStr for InterfaceAddr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (addr, len) = split_prefix(s)?;
        InterfaceAddr::new(addr, len).ok_or_else(|| format!("bad address \"{s}\""))
    }
}

impl<'de> Deserialize<'de> for InterfaceAddr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A group as hashed: four big-endian words of the 128-bit address (IPv4 as
/// `::ffff:a.b.c.d`).
pub type GroupKey = [u32; 4];

/// The key of an IPv4 group: `[0, 0, 0xffff, group]`.
pub fn group_key_v4(group: Ipv4Addr) -> GroupKey {
    [0, 0, 0xffff, group.to_bits()]
}

/// The key of an IPv6 group: the address's four big-endian words.
pub fn group_key_v6(group: Ipv6Addr) -> GroupKey {
    let b = group.to_bits();
    [
        (b >> 96) as u32,
        (b >> 64) as u32,
        (b >> 32) as u32,
        b as u32,
    ]
}

/// The key of a group of either family.
pub fn group_key(group: IpAddr) -> GroupKey {
    match group {
        IpAddr::V4(a) => group_key_v4(a),
        IpAddr::V6(a) => group_key_v6(a),
    }
}

/// The address a key was made from (inverse of [`group_key`]).
pub fn group_addr(key: &GroupKey) -> IpAddr {
    let b = (u128::from(key[0]) << 96)
        | (u128::from(key[1]) << 64)
        | (u128::from(key[2]) << 32)
        | u128::from(key[3]);
    let a = Ipv6Addr::from_bits(b);
    match a.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(a),
    }
}
