//! The neighbour table: next-hop IP address -> MAC, for the routed ports.
//!
//! Static entries come from the config's `[[neighbours]]` and never
//! expire; learned entries (from ARP and neighbour discovery) are usable
//! until `reachable` after they were last confirmed, in packet time.

use std::collections::HashMap;
use std::net::IpAddr;

use crate::clock::Timestamp;
use crate::config::MacAddr;

/// One entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    mac: MacAddr,
    /// `None`: static.
    expires: Option<Timestamp>,
}

/// The table (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct Neighbours {
    entries: HashMap<IpAddr, Entry>,
    reachable_ns: u64,
}

impl Neighbours {
    /// A table with `statics`, learned entries lasting `reachable_ns`.
    pub fn new(statics: impl IntoIterator<Item = (IpAddr, MacAddr)>, reachable_ns: u64) -> Self {
        Neighbours {
            entries: statics
                .into_iter()
                .map(|(a, mac)| (a, Entry { mac, expires: None }))
                .collect(),
            reachable_ns,
        }
    }

    /// The MAC of `addr` at `now`, if known and not expired.
    #[inline]
    pub fn get(&self, addr: IpAddr, now: Timestamp) -> Option<MacAddr> {
        let e = self.entries.get(&addr)?;
        match e.expires {
            Some(t) if t <= now => None,
            _ => Some(e.mac),
        }
    }

    /// Learns (or confirms) `addr` at `mac` at `now`; a static entry is
    /// left alone. Returns whether the entry is new or changed its MAC.
    pub fn learn(&mut self, addr: IpAddr, mac: MacAddr, now: Timestamp) -> bool {
        let expires = Some(Timestamp::from_nanos(
            now.as_nanos().saturating_add(self.reachable_ns),
        ));
        match self.entries.get_mut(&addr) {
            Some(Entry { expires: None, .. }) => false,
            Some(e) => {
                let changed = e.mac != mac || e.expires.is_some_and(|t| t <= now);
                *e = Entry { mac, expires };
                changed
            }
            None => {
                self.entries.insert(addr, Entry { mac, expires });
                true
            }
        }
    }

    /// Forgets learned entries expired by `now` (keeps the table from
    /// growing with every neighbour ever seen).
    pub fn expire(&mut self, now: Timestamp) {
        self.entries
            .retain(|_, e| e.expires.is_none_or(|t| t > now));
    }

    /// Entries held (static and learned, expired ones not yet forgotten).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_entries_stay_learned_ones_expire() {
        let a: IpAddr = "10.0.0.2".parse().unwrap();
        let b: IpAddr = "10.0.0.3".parse().unwrap();
        let m1 = MacAddr([2, 0, 0, 0, 0, 1]);
        let m2 = MacAddr([2, 0, 0, 0, 0, 2]);
        let mut n = Neighbours::new([(a, m1)], 1000);
        let t = Timestamp::from_nanos;
        assert!(!n.learn(a, m2, t(0)), "static wins");
        assert_eq!(n.get(a, t(u64::MAX)), Some(m1));
        assert!(n.learn(b, m2, t(10)));
        assert!(!n.learn(b, m2, t(20)));
        assert_eq!(n.get(b, t(1019)), Some(m2));
        assert_eq!(n.get(b, t(1020)), None);
        n.expire(t(1020));
        assert_eq!(n.len(), 1);
    }
}
