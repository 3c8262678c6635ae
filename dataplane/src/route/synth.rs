//! Generated routing tables shaped like the public BGP table, and lookup
//! addresses for them, reproducible from a seed (tests and benchmarks share
//! them).
//!
//! The prefix-length shares are approximate, rounded from the public
//! route-collector reports of 2024 (Geoff Huston's BGP reports at
//! bgp.potaroo.net, the AS65000/AS131072 table data; no exact snapshot is
//! reproduced): IPv4 about 1M prefixes, /24 about 60%, /22 about 10%, /23
//! 9%, /21 5%, /20 4%, /19 3%, /16 1.3%, a few down to /8, nothing longer
//! than /24 (filtered in the global table); IPv6 about 200k prefixes, /48
//! about 45%, /32 and /44 common, then /40, /29, /36, /46, /47 and a few
//! longer than /48. Potaroo's reports also show that more than half of the
//! entries are more-specifics of another entry (57% for IPv6 in 2024), so
//! half of the generated prefixes are drawn inside an earlier, shorter one.
//! Addresses: IPv4 prefixes start in a unicast /8 (1-223, not 10 or 127),
//! IPv6 ones in one of the RIRs' 2000::/3 blocks.

use std::collections::HashSet;

use kernels::splitmix64;

use super::addr::{Address, Prefix};

/// IPv4 prefix lengths and their weights (percent of the table, approximate).
pub const BGP_V4_LENGTHS: &[(u8, f64)] = &[
    (8, 0.002),
    (9, 0.005),
    (10, 0.01),
    (11, 0.01),
    (12, 0.03),
    (13, 0.05),
    (14, 0.1),
    (15, 0.1),
    (16, 1.3),
    (17, 1.0),
    (18, 1.6),
    (19, 3.2),
    (20, 4.3),
    (21, 5.0),
    (22, 10.5),
    (23, 9.0),
    (24, 60.0),
];

/// IPv6 prefix lengths and their weights (percent, approximate).
pub const BGP_V6_LENGTHS: &[(u8, f64)] = &[
    (19, 0.01),
    (20, 0.05),
    (24, 0.1),
    (28, 1.0),
    (29, 5.0),
    (30, 0.5),
    (31, 0.5),
    (32, 12.0),
    (33, 1.0),
    (34, 1.0),
    (35, 0.5),
    (36, 3.0),
    (37, 0.5),
    (38, 1.0),
    (39, 0.5),
    (40, 6.0),
    (41, 0.5),
    (42, 1.5),
    (43, 1.0),
    (44, 8.0),
    (45, 1.5),
    (46, 3.0),
    (47, 3.0),
    (48, 45.0),
    (56, 0.5),
    (64, 0.3),
];

/// Distinct next hops in generated tables (a router's peers).
pub const NEXT_HOPS: u32 = 64;

/// A small deterministic generator (SplitMix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A stream from a seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        splitmix64(&mut self.0)
    }

    /// The next 32 random bits (the high half of 64).
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// 128 random bits.
    pub fn next_u128(&mut self) -> u128 {
        (u128::from(self.next_u64()) << 64) | u128::from(self.next_u64())
    }

    /// Uniform in `0..n` (`n > 0`; the bias is below `n / 2^64`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `n` distinct IPv4 routes following [`BGP_V4_LENGTHS`], next hops below
/// [`NEXT_HOPS`].
pub fn bgp_v4(n: usize, seed: u64) -> Vec<(Prefix<u32>, u32)> {
    generate(n, seed, BGP_V4_LENGTHS, |rng| {
        // A unicast /8: 1..=223 except 10 and 127.
        loop {
            let o = 1 + rng.below(223) as u128;
            if o != 10 && o != 127 {
                return o << 24;
            }
        }
    })
}

/// `n` distinct IPv6 routes following [`BGP_V6_LENGTHS`], next hops below
/// [`NEXT_HOPS`].
pub fn bgp_v6(n: usize, seed: u64) -> Vec<(Prefix<u128>, u32)> {
    // The RIRs' large blocks: 2001::/16, 2400::/12, 2600::/12, 2800::/12,
    // 2a00::/12, 2c00::/12.
    const BLOCKS: [(u128, u8); 6] = [
        (0x2001, 16),
        (0x2400, 12),
        (0x2600, 12),
        (0x2800, 12),
        (0x2a00, 12),
        (0x2c00, 12),
    ];
    generate(n, seed, BGP_V6_LENGTHS, |rng| {
        let (top, len) = BLOCKS[rng.below(BLOCKS.len() as u64) as usize];
        let free = 16 - len;
        (top | (rng.below(1 << free) as u128)) << 112
    })
}

/// `n` lookup addresses for `table`: a share `inside` of them drawn inside
/// a random route of the table (uniform host bits), the rest uniform over
/// the address space (IPv6: over 2000::/3, where routes are).
pub fn addresses<A: Address>(
    table: &[(Prefix<A>, u32)],
    n: usize,
    inside: f64,
    seed: u64,
) -> Vec<A> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| {
            let r = rng.next_u128();
            if !table.is_empty() && rng.unit() < inside {
                let (p, _) = table[rng.below(table.len() as u64) as usize];
                let host = r & host_mask(A::BITS, p.prefix_len());
                A::from_u128(p.addr().to_u128() | host)
            } else if A::BITS == 128 {
                A::from_u128((r >> 3) | (1 << 125))
            } else {
                A::from_u128(r)
            }
        })
        .collect()
}

/// The bits past `len` in an address of `bits` bits.
fn host_mask(bits: u8, len: u8) -> u128 {
    let all = if bits == 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    };
    all.checked_shr(u32::from(len)).unwrap_or(0)
}

/// The shared generator: a length by weight; half the time inside an
/// earlier shorter prefix, else under `top` (the first bits of a plausible
/// network), the remaining bits random.
fn generate<A: Address>(
    n: usize,
    seed: u64,
    lengths: &[(u8, f64)],
    top: impl Fn(&mut Rng) -> u128,
) -> Vec<(Prefix<A>, u32)> {
    let mut rng = Rng::new(seed);
    let total: f64 = lengths.iter().map(|&(_, w)| w).sum();
    let mut seen = HashSet::with_capacity(n);
    let mut out: Vec<(Prefix<A>, u32)> = Vec::with_capacity(n);
    while out.len() < n {
        let mut x = rng.unit() * total;
        let len = lengths
            .iter()
            .find(|&&(_, w)| {
                x -= w;
                x < 0.0
            })
            .map_or(lengths[lengths.len() - 1].0, |&(l, _)| l);
        let mut base = None;
        if !out.is_empty() && rng.unit() < 0.5 {
            for _ in 0..4 {
                let (p, _) = out[rng.below(out.len() as u64) as usize];
                if p.prefix_len() < len {
                    base = Some(p);
                    break;
                }
            }
        }
        let bits = match base {
            Some(p) => p.addr().to_u128() | (rng.next_u128() & host_mask(A::BITS, p.prefix_len())),
            None => {
                // `top` fills the first 8 (IPv4) or 16 (IPv6) bits.
                let top_len = if A::BITS == 32 { 8 } else { 16 };
                top(&mut rng) | (rng.next_u128() & host_mask(A::BITS, top_len))
            }
        };
        let p = Prefix::new(A::from_u128(bits), len).expect("lengths fit");
        if seen.insert(p) {
            out.push((p, rng.below(u64::from(NEXT_HOPS)) as u32));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares() {
        let t = bgp_v4(100_000, 1);
        let share = |l: u8| t.iter().filter(|(p, _)| p.prefix_len() == l).count() as f64 / 1e3;
        assert!((55.0..65.0).contains(&share(24)), "{}", share(24));
        assert!((8.0..13.0).contains(&share(22)), "{}", share(22));
        assert!(t.iter().all(|(p, _)| (1..=223).contains(&(p.addr() >> 24))));
        let t6 = bgp_v6(20_000, 1);
        let share6 = t6.iter().filter(|(p, _)| p.prefix_len() == 48).count() as f64 / 200.0;
        assert!((40.0..50.0).contains(&share6), "{share6}");
        assert!(t6.iter().all(|(p, _)| p.addr() >> 125 == 1));
        // Reproducible.
        assert_eq!(bgp_v4(1000, 7), bgp_v4(1000, 7));
    }

    #[test]
    fn addresses_inside() {
        let t = bgp_v4(1000, 3);
        let a = addresses(&t, 1000, 1.0, 4);
        let covered = a
            .iter()
            .filter(|&&x| t.iter().any(|(p, _)| p.contains(x)))
            .count();
        assert_eq!(covered, 1000);
    }
}
