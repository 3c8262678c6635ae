//! Addresses and prefixes: what the table needs to know about IPv4 (`u32`)
//! and IPv6 (`u128`) addresses, in host order with the first bit of the
//! address as the most significant bit.

use std::fmt;
use std::hash::Hash;

use kernels::{HashPair, Hasher};

/// An IP address as an unsigned integer (`u32` for IPv4, `u128` for IPv6).
///
/// The table hashes a candidate prefix of length `len` as the key
/// [`Address::key`]: the address's words masked to `len` bits followed by
/// `len` itself, so equal bits at two lengths are two different keys.
///
/// Sealed: implemented for `u32` and `u128` only.
pub trait Address:
    Copy + Default + Eq + Ord + Hash + fmt::Debug + Send + Sync + sealed::Sealed + 'static
{
    /// Bits in an address: 32 or 128.
    const BITS: u8;
    /// The hashed form of a (masked address, length) candidate: `[u32; W]`.
    type Key: Copy + Default + fmt::Debug;

    /// The address with every bit past the first `len` cleared
    /// (`len <= BITS`; 0 clears all).
    fn mask(self, len: u8) -> Self;
    /// The key of the candidate prefix `self/len`.
    fn key(self, len: u8) -> Self::Key;
    /// `out[i]` = the hash pair of `keys[i]`, on the hasher's SIMD backend.
    fn hash_keys(hasher: &Hasher, keys: &[Self::Key], out: &mut [HashPair]);
    /// The hash pair of one key.
    fn hash_one(hasher: &Hasher, key: &Self::Key) -> HashPair;
    /// The first `bits` bits (`bits <= 32`) as an index.
    fn top(self, bits: u8) -> usize;
    /// The address as a `u128` (IPv4 in the low 32 bits).
    fn to_u128(self) -> u128;
    /// The inverse of [`Address::to_u128`] (IPv4 keeps the low 32 bits).
    fn from_u128(v: u128) -> Self;
}

mod sealed {
    /// Keeps [`Address`](super::Address) to the two address widths.
    pub trait Sealed {}
    impl Sealed for u32 {}
    impl Sealed for u128 {}
}

impl Address for u32 {
    const BITS: u8 = 32;
    type Key = [u32; 2];

    #[inline(always)]
    fn mask(self, len: u8) -> Self {
        // A shift by 32 would overflow: length 0 keeps nothing.
        self & u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
    }

    #[inline(always)]
    fn key(self, len: u8) -> [u32; 2] {
        [self.mask(len), u32::from(len)]
    }

    #[inline(always)]
    fn hash_keys(hasher: &Hasher, keys: &[[u32; 2]], out: &mut [HashPair]) {
        hasher.hash_batch(keys, out)
    }

    #[inline(always)]
    fn hash_one(hasher: &Hasher, key: &[u32; 2]) -> HashPair {
        hasher.hash_one(key)
    }

    #[inline(always)]
    fn top(self, bits: u8) -> usize {
        self.checked_shr(32 - u32::from(bits)).unwrap_or(0) as usize
    }

    fn to_u128(self) -> u128 {
        u128::from(self)
    }

    fn from_u128(v: u128) -> Self {
        v as u32
    }
}

impl Address for u128 {
    const BITS: u8 = 128;
    type Key = [u32; 5];

    #[inline(always)]
    fn mask(self, len: u8) -> Self {
        self & u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)
    }

    #[inline(always)]
    fn key(self, len: u8) -> [u32; 5] {
        let m = self.mask(len);
        [
            (m >> 96) as u32,
            (m >> 64) as u32,
            (m >> 32) as u32,
            m as u32,
            u32::from(len),
        ]
    }

    #[inline(always)]
    fn hash_keys(hasher: &Hasher, keys: &[[u32; 5]], out: &mut [HashPair]) {
        hasher.hash_batch(keys, out)
    }

    #[inline(always)]
    fn hash_one(hasher: &Hasher, key: &[u32; 5]) -> HashPair {
        hasher.hash_one(key)
    }

    #[inline(always)]
    fn top(self, bits: u8) -> usize {
        self.checked_shr(128 - u32::from(bits)).unwrap_or(0) as usize
    }

    fn to_u128(self) -> u128 {
        self
    }

    fn from_u128(v: u128) -> Self {
        v
    }
}

/// A prefix longer than the address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("prefix length {len} exceeds the address's {bits} bits")]
pub struct PrefixLenError {
    /// The length asked for.
    pub len: u8,
    /// The address width.
    pub bits: u8,
}

/// A route's destination: the first `len` bits of `addr` (the rest are
/// always zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Prefix<A> {
    addr: A,
    len: u8,
}

impl<A: Address> Prefix<A> {
    /// `addr/len` with the host bits (past `len`) cleared, as `ip route`
    /// would refuse and routers commonly do anyway.
    ///
    /// # Errors
    /// If `len` exceeds the address width.
    pub fn new(addr: A, len: u8) -> Result<Self, PrefixLenError> {
        if len > A::BITS {
            return Err(PrefixLenError { len, bits: A::BITS });
        }
        Ok(Prefix {
            addr: addr.mask(len),
            len,
        })
    }

    /// The network address (host bits zero).
    pub fn addr(&self) -> A {
        self.addr
    }

    /// The prefix length.
    pub fn prefix_len(&self) -> u8 {
        self.len
    }

    /// Whether `addr` lies inside the prefix.
    pub fn contains(&self, addr: A) -> bool {
        addr.mask(self.len) == self.addr
    }
}

impl fmt::Display for Prefix<u32> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", std::net::Ipv4Addr::from(self.addr), self.len)
    }
}

impl fmt::Display for Prefix<u128> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", std::net::Ipv6Addr::from(self.addr), self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks() {
        assert_eq!(0xffff_ffffu32.mask(0), 0);
        assert_eq!(0xffff_ffffu32.mask(8), 0xff00_0000);
        assert_eq!(0xffff_ffffu32.mask(32), 0xffff_ffff);
        assert_eq!(u128::MAX.mask(0), 0);
        assert_eq!(u128::MAX.mask(1), 1 << 127);
        assert_eq!(u128::MAX.mask(128), u128::MAX);
        assert_eq!(0xc0a8_0101u32.top(16), 0xc0a8);
        assert_eq!(0xc0a8_0101u32.top(0), 0);
        assert_eq!((0x2001u128 << 112).top(16), 0x2001);
    }

    #[test]
    fn prefixes() {
        let p = Prefix::new(0xc0a8_01ffu32, 24).unwrap();
        assert_eq!(p.addr(), 0xc0a8_0100);
        assert_eq!(p.to_string(), "192.168.1.0/24");
        assert!(p.contains(0xc0a8_0107));
        assert!(!p.contains(0xc0a8_0207));
        assert_eq!(
            Prefix::new(0u32, 33),
            Err(PrefixLenError { len: 33, bits: 32 })
        );
        let q = Prefix::new(0x2001_0db8u128 << 96, 32).unwrap();
        assert_eq!(q.to_string(), "2001:db8::/32");
        // Equal bits at two lengths are two keys.
        assert_ne!(0u32.key(8), 0u32.key(16));
    }
}
