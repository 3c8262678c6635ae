//! `traffic-gen traceback`: where did this packet come from?
//!
//! SPIE's reconstruction (Snoeren et al., SIGCOMM 2001): start at the
//! router nearest the victim and ask it whether it forwarded the packet
//! around the time it was seen, and from which port; the router behind
//! each such port (the [`topology`] says which) is asked in turn, until
//! the answers lead out of the traced domain (an edge port: the packet
//! entered there) or no router says it saw the packet. The result is a
//! graph: the true path (a router that forwarded the packet always says
//! so, while its window is kept), and possibly false branches, each from a
//! false positive whose probability the answer states.
//!
//! A router asked through its port `q` (the one facing the router that
//! asked) is not followed back through `q`. Each router is asked once; a
//! second way to a router already asked adds an edge to the graph.
//!
//! * [`topology`]: the routers, how to ask each, and their links;
//! * [`source`]: answers over HTTP (`GET /digest`), from windows kept by
//!   `replay --digests`, or from rings in memory;
//! * [`packet`]: the packet, from a capture or hex.

pub mod cli;
pub mod packet;
pub mod source;
pub mod topology;

use std::collections::{BTreeSet, VecDeque};
use std::fmt::Write as _;

use anyhow::{Result, bail};
use dataplane::stage::digest::Answer;
use serde::Serialize;

use packet::Packet;
use source::{Question, Source};
use topology::{Beyond, Topology};

/// A window a router searched.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Window {
    /// The worker whose ring holds it, and its id there.
    pub worker: usize,
    /// See [`Window::worker`].
    pub id: u64,
    /// Its range, Unix ns (`end` absent: the current window).
    pub start_unix_ns: u64,
    /// See [`Window::start_unix_ns`].
    pub end_unix_ns: Option<u64>,
    /// Digests in it.
    pub digests: u64,
    /// The false-positive rate of one port's test against it.
    pub false_positive_rate: f64,
}

/// Where a reported port leads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Leads {
    /// Another router, asked as hop `hop` (maybe asked before, by another
    /// way).
    Router {
        /// Its name.
        router: String,
        /// Its port facing this one.
        port: String,
        /// Its hop.
        hop: usize,
    },
    /// Out of the traced domain: the packet entered here.
    Edge {
        /// The host the topology names there.
        host: Option<String>,
    },
}

/// A port a router reported.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Branch {
    /// The port.
    pub port: String,
    /// The probability that it was reported falsely.
    pub false_positive_probability: f64,
    /// The windows (worker, id) whose test it passed.
    pub windows: Vec<(usize, u64)>,
    /// What is behind it.
    pub leads: Leads,
}

/// How a router answered.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// It reported one or more ports (other than the one toward the asker).
    Seen,
    /// It reported none.
    NotSeen,
    /// It could not be asked, or refused: why.
    Unanswered(String),
}

/// One router asked.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hop {
    /// The router.
    pub router: String,
    /// The hop whose answer led here (`None`: the first), and this
    /// router's port toward it.
    pub from_hop: Option<usize>,
    /// See [`Hop::from_hop`].
    pub toward: Option<String>,
    /// Hops from the first.
    pub depth: usize,
    /// Its answer.
    pub status: Status,
    /// The windows it searched.
    pub windows: Vec<Window>,
    /// The probability that it would report some port for a packet it did
    /// not forward in those windows.
    pub false_positive_probability: f64,
    /// The ports it reported (not the one toward the asker).
    pub branches: Vec<Branch>,
}

/// Where the packet entered the domain, as the answers say.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    /// The hop (router) and its port.
    pub hop: usize,
    /// The router.
    pub router: String,
    /// The port.
    pub port: String,
    /// The host the topology names there.
    pub host: Option<String>,
}

/// A traceback's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trace {
    /// The packet.
    pub packet: Packet,
    /// The range asked about, ms either side of the time seen.
    pub span_ms: Option<u64>,
    /// The routers asked, in the order asked (the first is the start).
    pub hops: Vec<Hop>,
    /// Where the packet entered, by the answers.
    pub entries: Vec<Entry>,
}

impl Trace {
    /// The routers from entry `e` to the start, in the packet's order.
    pub fn path_of(&self, e: &Entry) -> Vec<&str> {
        let mut out = Vec::new();
        let mut h = Some(e.hop);
        while let Some(i) = h {
            let Some(hop) = self.hops.get(i) else { break };
            out.push(hop.router.as_str());
            h = hop.from_hop;
        }
        out
    }

    /// Reported ports in all (a path of `n` routers has `n` of them; the
    /// rest are false branches when the packet took one path).
    pub fn branches(&self) -> usize {
        self.hops.iter().map(|h| h.branches.len()).sum()
    }

    /// The text report: the packet, then the routers asked as a tree (a
    /// router under the one whose answer led to it), then the paths.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let seen = self.packet.seen_unix_ns.map_or_else(
            || "time unknown".to_string(),
            dataplane::stage::digest::query::format_seconds,
        );
        let _ = writeln!(
            s,
            "traceback of {} ({} bytes of IP), seen at {}{}",
            self.packet.summary,
            self.packet.ip.len(),
            seen,
            match (self.packet.seen_unix_ns, self.span_ms) {
                (None, _) => ", every window kept searched".to_string(),
                (Some(_), Some(ms)) => format!(", windows within {ms} ms searched"),
                (Some(_), None) =>
                    ", windows within the routers' default span searched".to_string(),
            }
        );
        self.render_hop(&mut s, 0, 1);
        if self.entries.is_empty() {
            let _ = writeln!(s, "no entry found: no answer leads out of the domain");
        }
        for e in &self.entries {
            let mut p: Vec<&str> = self.path_of(e);
            let host = e.host.as_deref().unwrap_or("outside");
            p.insert(0, host);
            let _ = writeln!(
                s,
                "path: {} (entered at {} {})",
                p.join(" -> "),
                e.router,
                e.port
            );
        }
        s
    }

    fn render_hop(&self, s: &mut String, i: usize, indent: usize) {
        let Some(h) = self.hops.get(i) else { return };
        let pad = "  ".repeat(indent - 1);
        let via = h
            .toward
            .as_deref()
            .map_or(String::new(), |t| format!(" (by {t})"));
        let ws = h.windows.len();
        match &h.status {
            Status::Unanswered(why) => {
                let _ = writeln!(s, "{pad}{}{via}: no answer: {why}", h.router);
                return;
            }
            Status::NotSeen => {
                let _ = writeln!(
                    s,
                    "{pad}{}{via}: not seen ({ws} window(s) searched; it would have been, had it forwarded the packet)",
                    h.router
                );
                return;
            }
            Status::Seen => {
                let _ = writeln!(
                    s,
                    "{pad}{}{via}: seen ({ws} window(s) searched, false-positive probability {:.2e})",
                    h.router, h.false_positive_probability
                );
            }
        }
        for b in &h.branches {
            let windows: Vec<String> = b
                .windows
                .iter()
                .map(|(w, id)| format!("{w}/{id}"))
                .collect();
            let pre = format!(
                "{pad}  from {} (window {}, false-positive probability {:.2e})",
                b.port,
                windows.join(" "),
                b.false_positive_probability
            );
            match &b.leads {
                Leads::Edge { host } => {
                    let _ = writeln!(
                        s,
                        "{pre}: entered here{}",
                        host.as_deref()
                            .map_or(String::new(), |h| format!(", from host {h}"))
                    );
                }
                Leads::Router { router, hop, .. } => {
                    if self.hops.get(*hop).and_then(|x| x.from_hop) == Some(i) {
                        let _ = writeln!(s, "{pre}:");
                        self.render_hop(s, *hop, indent + 2);
                    } else {
                        let _ = writeln!(s, "{pre}: {router}, asked by another way");
                    }
                }
            }
        }
    }
}

fn windows_of(a: &Answer) -> Vec<Window> {
    a.windows
        .iter()
        .map(|w| Window {
            worker: w.worker,
            id: w.id,
            start_unix_ns: w.start_unix_ns,
            end_unix_ns: w.end_unix_ns,
            digests: w.digests,
            false_positive_rate: w.false_positive_rate,
        })
        .collect()
}

/// Traces `packet` from router `start` (see the module docs).
///
/// # Errors
/// `start` is not in the topology, or cannot be asked (a router further
/// back that cannot be asked is reported in its hop, and the walk goes on).
pub fn trace(
    topology: &Topology,
    source: &mut impl Source,
    start: &str,
    packet: &Packet,
    span_ms: Option<u64>,
) -> Result<Trace> {
    if topology.router(start).is_none() {
        bail!("--from: no router \"{start}\" in the topology");
    }
    let q = Question {
        ip: packet.ip.clone(),
        at_unix_ns: packet.seen_unix_ns,
        span_ms: packet.seen_unix_ns.and(span_ms),
    };
    let mut t = Trace {
        packet: packet.clone(),
        span_ms: q.span_ms,
        hops: vec![Hop {
            router: start.to_string(),
            from_hop: None,
            toward: None,
            depth: 0,
            status: Status::NotSeen,
            windows: Vec::new(),
            false_positive_probability: 0.0,
            branches: Vec::new(),
        }],
        entries: Vec::new(),
    };
    let mut asked: BTreeSet<String> = BTreeSet::from([start.to_string()]);
    let mut queue = VecDeque::from([0usize]);
    while let Some(i) = queue.pop_front() {
        let router = t.hops[i].router.clone();
        let answer = match source.ask(&router, &q) {
            Ok(a) => a,
            Err(e) if i == 0 => return Err(e.context(format!("asking {router}"))),
            Err(e) => {
                t.hops[i].status = Status::Unanswered(format!("{e:#}"));
                continue;
            }
        };
        t.hops[i].windows = windows_of(&answer);
        t.hops[i].false_positive_probability = answer.false_positive_probability;
        let toward = t.hops[i].toward.clone();
        let mut branches = Vec::new();
        for p in &answer.seen {
            if toward.as_deref() == Some(p.port.as_str()) {
                continue;
            }
            let leads = match topology.beyond(&router, &p.port) {
                Beyond::Edge(host) => {
                    t.entries.push(Entry {
                        hop: i,
                        router: router.clone(),
                        port: p.port.clone(),
                        host: host.clone(),
                    });
                    Leads::Edge { host }
                }
                Beyond::Router { router: r, port } => {
                    let hop = if asked.insert(r.clone()) {
                        t.hops.push(Hop {
                            router: r.clone(),
                            from_hop: Some(i),
                            toward: Some(port.clone()),
                            depth: t.hops[i].depth + 1,
                            status: Status::NotSeen,
                            windows: Vec::new(),
                            false_positive_probability: 0.0,
                            branches: Vec::new(),
                        });
                        queue.push_back(t.hops.len() - 1);
                        t.hops.len() - 1
                    } else {
                        t.hops.iter().position(|h| h.router == r).unwrap_or(0)
                    };
                    Leads::Router {
                        router: r,
                        port,
                        hop,
                    }
                }
            };
            branches.push(Branch {
                port: p.port.clone(),
                false_positive_probability: p.false_positive_probability,
                windows: p.windows.clone(),
                leads,
            });
        }
        t.hops[i].status = if branches.is_empty() {
            Status::NotSeen
        } else {
            Status::Seen
        };
        t.hops[i].branches = branches;
    }
    Ok(t)
}
