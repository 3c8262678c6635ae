//! Zero-copy packet views. Parsing untrusted bytes never panics.

/// The link-layer header type of a captured or received frame
/// (libpcap `LINKTYPE_*` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkType {
    /// `LINKTYPE_ETHERNET` (1).
    Ethernet,
    /// `LINKTYPE_RAW` (101) or `LINKTYPE_IPV4`/`LINKTYPE_IPV6` (228/229): the frame starts with an IP header.
    RawIp,
    /// `LINKTYPE_LINUX_SLL` (113): Linux cooked capture v1.
    LinuxSll,
    /// Any other link type, kept as its number.
    Unknown(u32),
}

impl LinkType {
    /// Maps a libpcap `LINKTYPE_*` number to a link type.
    pub fn from_linktype(v: u32) -> Self {
        match v {
            1 => LinkType::Ethernet,
            101 | 228 | 229 => LinkType::RawIp,
            113 => LinkType::LinuxSll,
            other => LinkType::Unknown(other),
        }
    }

    /// The libpcap `LINKTYPE_*` number for this link type.
    pub fn to_linktype(self) -> u32 {
        match self {
            LinkType::Ethernet => 1,
            LinkType::RawIp => 101,
            LinkType::LinuxSll => 113,
            LinkType::Unknown(v) => v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linktype_round_trip() {
        for v in [1u32, 101, 113, 147] {
            assert_eq!(LinkType::from_linktype(v).to_linktype(), v);
        }
        assert_eq!(LinkType::from_linktype(228), LinkType::RawIp);
    }
}
