//! The neighbour table: next-hop IP address -> MAC, for the routed ports.
//!
//! Static entries come from the config's `[[neighbours]]` and never
//! expire; learned entries (from ARP and neighbour discovery) are usable
//! until `reachable` after they were last confirmed, in packet time.
//!
//! # Resolution
//!
//! A packet whose next hop has no entry is **held**: its frame (already
//! forwarded but for the destination MAC) is copied into a buffer of a
//! pool and queued on the next hop's pending entry, at most `hold`
//! frames per next hop (a packet that finds the queue full is dropped).
//! [`Neighbours::due`] runs after every batch: a next hop resolved since
//! gives its frames back to be sent; one still unresolved is solicited
//! again every `interval` (the first time at once), and after `tries`
//! solicitations its frames are dropped. The pool's buffers are reused:
//! once it has grown to the most frames held at once, holding allocates
//! nothing.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use crate::addr::MacAddr;
use crate::clock::Timestamp;

/// The most next hops being resolved at once; a packet for another one is
/// dropped (`no_neighbour`) rather than held.
pub const MAX_PENDING: usize = 1024;

/// A held frame.
#[derive(Debug, Clone, Copy)]
pub struct Held {
    /// The pool buffer holding it.
    slot: usize,
    /// Its arrival time.
    pub ts: Timestamp,
    /// Its length on the wire.
    pub orig_len: u32,
    /// Its ingress port.
    pub ingress: u8,
    /// Bytes of its deferred Icarus option
    /// ([`Packet::icarus_pending`](crate::packet::Packet::icarus_pending)).
    pub icarus_pending: u8,
}

impl Held {
    /// A frame that arrived at `ts` on `ingress`, `orig_len` bytes on the
    /// wire.
    pub fn new(ts: Timestamp, orig_len: u32, ingress: u8) -> Held {
        Held {
            slot: 0,
            ts,
            orig_len,
            ingress,
            icarus_pending: 0,
        }
    }
}

/// A next hop being resolved.
#[derive(Debug, Clone)]
struct Pending {
    port: u8,
    /// Solicitations sent.
    tries: u32,
    /// When the next one is due.
    next: Timestamp,
    frames: Vec<Held>,
}

/// How resolution is paced (from the config's `[router]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resolution {
    /// Frames held per next hop.
    pub hold: usize,
    /// Solicitations before the held frames are dropped.
    pub tries: u32,
    /// Time between two of them, ns.
    pub interval_ns: u64,
}

impl Default for Resolution {
    fn default() -> Self {
        Resolution {
            hold: 3,
            tries: 3,
            interval_ns: 1_000_000_000,
        }
    }
}

/// What [`Neighbours::hold`] did with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Queued.
    Held,
    /// Not held: the next hop's queue (or the table of pending next hops)
    /// is full, or holding is off.
    Full,
}

/// What [`Neighbours::due`] asks of its caller for one next hop.
#[derive(Debug)]
pub enum Due<'a> {
    /// Send a solicitation for `addr` out of `port`; return whether it
    /// was made.
    Solicit {
        /// The next hop.
        addr: IpAddr,
        /// Its port.
        port: u8,
    },
    /// Send `frame` (held) out of `port` to `mac`; return whether it was
    /// taken (a frame not taken stays held for the next call).
    Release {
        /// Its port.
        port: u8,
        /// The next hop's MAC.
        mac: MacAddr,
        /// The frame.
        frame: &'a [u8],
        /// What it was held with.
        held: Held,
    },
    /// `n` frames were dropped: resolution failed.
    Failed {
        /// How many.
        n: u64,
    },
}

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
    /// Looked up once per forwarded packet: a fast keyed hash (ahash,
    /// randomly keyed per table), not SipHash.
    entries: HashMap<IpAddr, Entry, ahash::RandomState>,
    reachable_ns: u64,
    /// Ordered, so that a replay makes its solicitations and releases in
    /// the same order every run.
    pending: BTreeMap<IpAddr, Pending>,
    resolution: Resolution,
    pool: Vec<Vec<u8>>,
    free: Vec<usize>,
    /// Frames held now.
    held: usize,
    last_sweep: Timestamp,
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
            ..Neighbours::default()
        }
    }

    /// Sets how resolution is paced.
    pub fn with_resolution(mut self, r: Resolution) -> Self {
        self.resolution = r;
        self
    }

    /// Frames held now.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Next hops being resolved.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// When [`due`](Self::due) next has work for a next hop being
    /// resolved (its next solicitation, or giving up); `None` when none
    /// is.
    pub fn next_due(&self) -> Option<Timestamp> {
        self.pending.values().map(|p| p.next).min()
    }

    /// Holds `frame` until `addr` (out of `port`) is resolved.
    pub fn hold(
        &mut self,
        addr: IpAddr,
        port: u8,
        frame: &[u8],
        held: Held,
        now: Timestamp,
    ) -> Hold {
        let hold = self.resolution.hold;
        if hold == 0 || (self.pending.len() >= MAX_PENDING && !self.pending.contains_key(&addr)) {
            return Hold::Full;
        }
        let p = self.pending.entry(addr).or_insert_with(|| Pending {
            port,
            tries: 0,
            next: now,
            frames: Vec::with_capacity(hold),
        });
        if p.frames.len() >= hold {
            return Hold::Full;
        }
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.pool.push(Vec::new());
                self.pool.len() - 1
            }
        };
        if let Some(buf) = self.pool.get_mut(slot) {
            buf.clear();
            buf.extend_from_slice(frame);
        }
        p.frames.push(Held { slot, ..held });
        self.held += 1;
        Hold::Held
    }

    /// Asks for `addr` (out of `port`) with no frame held: a frame of the
    /// router's own that can wait for a later attempt (the peering
    /// protocol's) starts its resolution. Nothing when it is already being
    /// resolved or the table of pending next hops is full.
    pub fn want(&mut self, addr: IpAddr, port: u8, now: Timestamp) {
        if self.pending.len() >= MAX_PENDING || self.pending.contains_key(&addr) {
            return;
        }
        self.pending.insert(
            addr,
            Pending {
                port,
                tries: 0,
                next: now,
                frames: Vec::new(),
            },
        );
    }

    /// The time-driven work at `now` (see the module docs): `f` is asked
    /// to release the frames of every resolved next hop, to solicit the
    /// unresolved ones that are due, and told of the frames dropped.
    pub fn due(&mut self, now: Timestamp, mut f: impl FnMut(Due<'_>) -> bool) {
        if self.pending.is_empty() {
            if now.nanos_since(self.last_sweep) >= self.reachable_ns {
                self.expire(now);
                self.last_sweep = now;
            }
            return;
        }
        let r = self.resolution;
        let (entries, pool, free) = (&self.entries, &mut self.pool, &mut self.free);
        let mut held = self.held;
        self.pending.retain(|addr, p| {
            let mac = entries
                .get(addr)
                .filter(|e| e.expires.is_none_or(|t| t > now))
                .map(|e| e.mac);
            if let Some(mac) = mac {
                let mut sent = 0;
                for h in &p.frames {
                    let frame = pool.get(h.slot).map_or(&[][..], |b| b.as_slice());
                    if !f(Due::Release {
                        port: p.port,
                        mac,
                        frame,
                        held: *h,
                    }) {
                        break;
                    }
                    free.push(h.slot);
                    sent += 1;
                }
                p.frames.drain(..sent);
                held -= sent;
                return !p.frames.is_empty();
            }
            if p.next > now {
                return true;
            }
            if p.tries >= r.tries {
                let n = p.frames.len();
                free.extend(p.frames.iter().map(|h| h.slot));
                held -= n;
                f(Due::Failed { n: n as u64 });
                return false;
            }
            if f(Due::Solicit {
                addr: *addr,
                port: p.port,
            }) {
                p.tries += 1;
                p.next = now.add_nanos(r.interval_ns);
            }
            true
        });
        self.held = held;
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

    /// Held frames leave once resolved; unresolved ones are solicited
    /// `tries` times, `interval` apart, then dropped.
    #[test]
    fn holds_solicits_releases_and_gives_up() {
        let a: IpAddr = "10.0.0.2".parse().unwrap();
        let b: IpAddr = "10.0.0.3".parse().unwrap();
        let m = MacAddr([2, 0, 0, 0, 0, 2]);
        let t = Timestamp::from_nanos;
        let mut n = Neighbours::new([], 10_000).with_resolution(Resolution {
            hold: 2,
            tries: 2,
            interval_ns: 100,
        });
        let h = Held::new(t(0), 3, 1);
        assert_eq!(n.hold(a, 0, &[1, 2, 3], h, t(0)), Hold::Held);
        assert_eq!(n.hold(a, 0, &[4, 5, 6], h, t(0)), Hold::Held);
        assert_eq!(n.hold(a, 0, &[7], h, t(0)), Hold::Full);
        assert_eq!(n.hold(b, 1, &[8], h, t(0)), Hold::Held);
        assert_eq!(n.held(), 3);
        let mut log = Vec::new();
        let mut step = |n: &mut Neighbours, now: u64, take: bool| {
            n.due(t(now), |d| {
                log.push(match d {
                    Due::Solicit { addr, port } => format!("{now} solicit {addr} {port}"),
                    Due::Release { port, frame, .. } => format!("{now} release {port} {frame:?}"),
                    Due::Failed { n } => format!("{now} failed {n}"),
                });
                take
            });
        };
        step(&mut n, 0, true);
        step(&mut n, 50, true);
        n.learn(a, m, t(60));
        step(&mut n, 60, false);
        step(&mut n, 61, true);
        step(&mut n, 100, true);
        step(&mut n, 200, true);
        let mut want = vec![
            "0 solicit 10.0.0.2 0",
            "0 solicit 10.0.0.3 1",
            "60 release 0 [1, 2, 3]",
            "61 release 0 [1, 2, 3]",
            "61 release 0 [4, 5, 6]",
            "100 solicit 10.0.0.3 1",
            "200 failed 1",
        ];
        log.sort();
        want.sort();
        assert_eq!(log, want);
        assert_eq!((n.held(), n.pending()), (0, 0));
        // The buffers are reused.
        assert_eq!(n.hold(b, 1, &[9], h, t(300)), Hold::Held);
        assert_eq!(n.pool.len(), 3);
    }
}
