//! A set of egress ports, and the port number of a frame with none.

/// The ingress port of a frame the router itself made (an ICMP error, an
/// ARP request): no port, so the egress stage sends it out of any port of
/// its verdict, the one a reply came in on included, while a forwarded
/// packet never goes back out of its ingress port (counted `hairpin`).
pub const NO_INGRESS: u8 = u8::MAX;

/// A set of egress ports (0..64) as a bit mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PortSet(u64);

impl PortSet {
    /// No port.
    pub const EMPTY: PortSet = PortSet(0);

    /// The most ports a set can name.
    pub const MAX_PORTS: u8 = 64;

    /// The set holding only `port` (`port < 64`; larger values give the empty set).
    #[inline]
    pub const fn single(port: u8) -> PortSet {
        if port < Self::MAX_PORTS {
            PortSet(1 << port)
        } else {
            PortSet(0)
        }
    }

    /// The set whose bit `i` is bit `i` of `mask`.
    #[inline]
    pub const fn from_mask(mask: u64) -> PortSet {
        PortSet(mask)
    }

    /// The bit mask.
    #[inline]
    pub const fn mask(self) -> u64 {
        self.0
    }

    /// Whether `port` is in the set.
    #[inline]
    pub const fn contains(self, port: u8) -> bool {
        port < Self::MAX_PORTS && self.0 & (1 << port) != 0
    }

    /// Whether the set is empty.
    #[inline]
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Number of ports.
    #[inline]
    pub const fn len(self) -> u32 {
        self.0.count_ones()
    }

    /// Both sets.
    #[inline]
    pub const fn union(self, other: PortSet) -> PortSet {
        PortSet(self.0 | other.0)
    }

    /// The ports in increasing order.
    pub fn iter(self) -> impl Iterator<Item = u8> {
        (0..Self::MAX_PORTS).filter(move |&p| self.contains(p))
    }
}
