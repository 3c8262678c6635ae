//! The network-wide flow set, reconciled with the Distributed Bloom Filter
//! ([`kernels::bloom::dbf`]; the protocol is in [`crate::peer`]).
//!
//! An element is a flow's ten-word key ([`FlowKey::words10`]) and the
//! generation of its last report: its report time in periods of half the
//! time to live. A receiver holds an element only as long as its report
//! is fresh, and a reconciliation only sends what the other side lacks, so
//! a flow still reported where it was detected must become a new element
//! from time to time to reach the others again before their copies
//! expire; a new generation every half time to live does that, and an
//! element is exact (every router holds the same words for it), so an
//! answer never has to be sent twice. A flow's entries of older
//! generations expire on their own.

use std::collections::HashSet;

use kernels::Hasher;
use kernels::bloom::dbf::{DbfFilter, DbfSet, Mapping};
use kernels::bloom::{DecodeError, Layout, Params};
use serde::Serialize;

use crate::flow::{Flow4, Flow6, FlowKey};
use crate::wire::IpProtocol;
use crate::wire::peer::{
    ANSWER_HEADER_LEN, FlowEntries, FlowEntry, HEADER_LEN, MAX_LEN, MAX_SEGMENTS, PeerError,
    TAG_LEN, segment_capacity,
};

/// The most flows one answer (to one summary) carries.
pub const MAX_ANSWER: usize = 1024;

/// `[peering.flows]`.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowsConfig {
    /// A summary goes to every peer this often, ns.
    pub exchange_interval_ns: u64,
    /// The summaries' false-positive rate (the DBF runs high: 0.5 works).
    pub fpr: f64,
    /// A flow no router reported for this long leaves the set, ns.
    pub ttl_ns: u64,
    /// The most elements held.
    pub capacity: usize,
    /// Flows an operator lists (always in the set).
    pub listed: Vec<FlowKey>,
}

/// The set's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct FlowCounters {
    /// Elements learned from peers' answers.
    pub learned: u64,
    /// Elements reported here (detected, or listed).
    pub detected: u64,
    /// Elements that expired.
    pub expired: u64,
    /// Elements refused at capacity.
    pub refused: u64,
}

/// An element: the flow's words and the generation.
type Element = [u32; 11];

/// The network-wide flow set (see the module docs).
#[derive(Debug, Clone)]
pub struct FlowSet {
    cfg: FlowsConfig,
    hasher: Hasher,
    set: DbfSet<Element>,
    counters: FlowCounters,
}

impl FlowSet {
    /// An empty set; `hash_seed` is the network's hash key.
    ///
    /// # Errors
    /// A rate, time to live or capacity that cannot work.
    pub fn new(cfg: FlowsConfig, hash_seed: u64) -> Result<FlowSet, String> {
        if !(cfg.fpr > 0.0 && cfg.fpr < 1.0) {
            return Err(format!("fpr {} is not in (0, 1)", cfg.fpr));
        }
        if cfg.ttl_ns < 2 || cfg.capacity == 0 {
            return Err("ttl_ms and capacity must be positive".into());
        }
        // A nonzero, distinct key for flows: their filters never meet the
        // groups'.
        let hasher = Hasher::with_seed(hash_seed ^ 0xf10f_f10f_f10f_f10f);
        Ok(FlowSet {
            set: DbfSet::new(hasher.clone(), cfg.ttl_ns, cfg.capacity),
            hasher,
            cfg,
            counters: FlowCounters::default(),
        })
    }

    /// The settings.
    pub fn config(&self) -> &FlowsConfig {
        &self.cfg
    }

    /// Elements held.
    pub fn len(&self) -> usize {
        self.set.len()
    }

    /// Whether none.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// The most elements held.
    pub fn capacity(&self) -> usize {
        self.cfg.capacity
    }

    /// The counters.
    pub fn counters(&self) -> FlowCounters {
        self.counters
    }

    fn generation(&self, at: u64) -> u32 {
        (at / (self.cfg.ttl_ns / 2).max(1)) as u32
    }

    /// `flow` reported at `at` (`detected`: here; else learned).
    pub fn report(&mut self, flow: FlowKey, at: u64, detected: bool) {
        let g = self.generation(at);
        self.add(element(&flow, g), at, detected);
    }

    fn add(&mut self, e: Element, at: u64, detected: bool) -> bool {
        match self.set.report(e, at) {
            Ok(true) => {
                if detected {
                    self.counters.detected += 1;
                } else {
                    self.counters.learned += 1;
                }
                true
            }
            Ok(false) => false,
            Err(_) => {
                self.counters.refused += 1;
                false
            }
        }
    }

    /// Expires the elements nobody reported for the time to live, after
    /// reporting the listed flows at `now`.
    pub fn expire(&mut self, now: u64) {
        for i in 0..self.cfg.listed.len() {
            let k = self.cfg.listed[i];
            self.report(k, now, true);
        }
        self.counters.expired += self.set.expire(now) as u64;
    }

    /// The distinct flows held.
    pub fn flow_keys(&self) -> HashSet<FlowKey> {
        self.set.iter().filter_map(|(e, _, _)| flow_of(e)).collect()
    }

    /// Whether `flow` is held (any generation).
    pub fn contains_flow(&self, flow: &FlowKey) -> bool {
        self.set
            .iter()
            .any(|(e, _, _)| flow_of(e).as_ref() == Some(flow))
    }

    /// This router's summary for peer `them` in the exchange of `nonce`:
    /// the DBF filter of the set under the pair's mapping made new by the
    /// nonce, sized for the larger of the two sets at the configured rate,
    /// in its transfer form; and the elements it holds. `None` when no
    /// filter of the messages' size holds that many at that rate (a set
    /// past what a summary can carry: the largest filter goes instead).
    pub fn summary(&self, me: u32, them: u32, nonce: u64, their_items: u64) -> (Vec<u8>, u32) {
        let n = (self.set.len() as u64).max(their_items).max(1);
        let most = u64::from(MAX_SEGMENTS) * segment_capacity(true) as u64 * 8;
        let params = Params::for_transfer(n, self.cfg.fpr, most)
            .or_else(|_| Params::new(Layout::Classic, most / 64 * 64, 1));
        let Ok(params) = params else {
            return (Vec::new(), 0);
        };
        let f = self.set.filter(params, mapping(me, them, nonce));
        (f.to_compressed_bytes(), self.set.len() as u32)
    }

    /// The flows a peer's summary (`bytes`, from `them` in the exchange of
    /// `nonce`) does not show: what that peer lacks, at most
    /// [`MAX_ANSWER`].
    ///
    /// # Errors
    /// A summary that does not decode with the network's key.
    pub fn answer(
        &self,
        bytes: &[u8],
        me: u32,
        them: u32,
        nonce: u64,
        now: u64,
    ) -> Result<Vec<FlowEntry>, DecodeError> {
        let f = DbfFilter::from_bytes(bytes, self.hasher.clone(), mapping(me, them, nonce))?;
        Ok(self
            .set
            .missing(&f)
            .filter_map(|(e, at)| {
                let k = flow_of(e)?;
                let (src_port, dst_port) = k.ports();
                Some(FlowEntry {
                    src: k.src(),
                    dst: k.dst(),
                    protocol: u8::from(k.protocol()),
                    src_port,
                    dst_port,
                    generation: e[10],
                    age_ms: u32::try_from(now.saturating_sub(at) / 1_000_000).unwrap_or(u32::MAX),
                })
            })
            .take(MAX_ANSWER)
            .collect())
    }

    /// Learns the flows of an answer's body at `now`; returns how many
    /// were new. Entries past the first bad one are not read.
    ///
    /// # Errors
    /// A body that is not an answer (what came before the fault is kept).
    pub fn learn(&mut self, body: &[u8], now: u64) -> Result<u64, PeerError> {
        let mut new = 0;
        for e in FlowEntries::new(body)? {
            let e = e?;
            let protocol = IpProtocol::from(e.protocol);
            let Some(k) = FlowKey::new(e.src, e.dst, protocol, e.src_port, e.dst_port) else {
                continue;
            };
            let at = now.saturating_sub(u64::from(e.age_ms) * 1_000_000);
            if self.add(element(&k, e.generation), at, false) {
                new += 1;
            }
        }
        Ok(new)
    }
}

/// The answer bodies for `flows`, each fitting a tagged message.
pub fn answer_bodies(flows: &[FlowEntry]) -> Vec<Vec<u8>> {
    let room = MAX_LEN - HEADER_LEN - TAG_LEN - ANSWER_HEADER_LEN;
    let mut out = Vec::new();
    let mut i = 0;
    while i < flows.len() {
        let (mut n, mut used) = (0usize, 0usize);
        while i + n < flows.len() && used + flows[i + n].wire_len() <= room {
            used += flows[i + n].wire_len();
            n += 1;
        }
        let mut b = Vec::with_capacity(ANSWER_HEADER_LEN + used);
        FlowEntries::emit_count(n as u16, &mut b);
        for f in &flows[i..i + n] {
            f.emit(&mut b);
        }
        out.push(b);
        i += n.max(1);
    }
    out
}

fn mapping(a: u32, b: u32, nonce: u64) -> Mapping {
    Mapping::for_pair(u64::from(a), u64::from(b)).with_nonce(nonce)
}

fn element(k: &FlowKey, generation: u32) -> Element {
    let w = k.words10();
    let mut e = [0u32; 11];
    e[..10].copy_from_slice(&w);
    e[10] = generation;
    e
}

/// The flow of an element (its first ten words: IPv4 mapped or IPv6).
fn flow_of(e: &Element) -> Option<FlowKey> {
    let proto = IpProtocol::from(u8::try_from(e[9]).ok()?);
    let (sport, dport) = ((e[8] >> 16) as u16, e[8] as u16);
    if e[0] == 0 && e[1] == 0 && e[2] == 0xffff && e[4] == 0 && e[5] == 0 && e[6] == 0xffff {
        return Some(FlowKey::V4(Flow4 {
            src: e[3].into(),
            dst: e[7].into(),
            src_port: sport,
            dst_port: dport,
            protocol: proto,
        }));
    }
    let addr = |w: &[u32]| {
        let mut b = [0u8; 16];
        for (i, x) in w.iter().enumerate() {
            b[i * 4..i * 4 + 4].copy_from_slice(&x.to_be_bytes());
        }
        std::net::Ipv6Addr::from(b)
    };
    Some(FlowKey::V6(Flow6 {
        src: addr(&e[0..4]),
        dst: addr(&e[4..8]),
        src_port: sport,
        dst_port: dport,
        protocol: proto,
    }))
}
