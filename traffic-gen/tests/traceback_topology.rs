//! Traceback over large topologies with the real digest code: every router
//! is a [`DigestStage`] (the stage the router's chain runs) fed the packets
//! it would forward, each with the port it came in by; the walk is
//! `traffic-gen traceback`'s ([`traffic_gen::traceback::trace`]) over the
//! answers the routers' own query code gives ([`Digests::answer`]).
//!
//! Two networks of 100 routers and more: a random tree (each router joins
//! one before it, chosen at random) and a random graph (a random spanning
//! tree plus random extra links, mean degree about 4); every router has one
//! host port besides its links. A traced packet goes from a random router's
//! host port to another router's host port by a shortest path; the trace
//! starts at the last router.
//!
//! Each router's window holds exactly its capacity (the traced packets
//! that cross it, then random background packets), so every test of one
//! port against one window is a false positive with the design rate `p`
//! (the split-block formula at the capacity), independently of any other
//! (each router has its own key; ports are folded into the key).
//!
//! **The analysis.** A router on the path (asked through port `t`, the
//! one toward the victim; none at the first) tests its other ports; the
//! true ingress is always found; any other port is a false branch with
//! probability `p`. A false branch to a router `M` (through `M`'s port
//! `m`) makes the walk ask `M`, whose ports other than `m` are each false
//! with probability `p`, and so on. So the expected false branches of a
//! traceback are `sum over path routers R, ports q other than t and the
//! ingress, of p (1 + G(beyond q))`, with `G(host) = 0` and `G(M via m) =
//! sum over M's ports r other than m of p (1 + G(beyond r))`, and `G = 0`
//! for a router of the path (asked anyway: a branch to it asks nothing
//! more). This is exact on a tree (the branches are independent and never
//! meet); on the graph two false branches may also meet at a router off
//! the path, which asks nothing the second time (terms of order `p^2`
//! per meeting, left out). The
//! total over all tracebacks must lie in the two-sided 99% interval of a
//! binomial with that mean and probability `p`; and the true path must be
//! in every graph (no false negatives).

use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::path::PathBuf;

use dataplane::clock::Timestamp;
use dataplane::pipeline::{Batch, PipelineConfig, PipelineCounters, Stage, parse_batch};
use dataplane::stage::digest::{DigestConfig, DigestStage, Digests, Sizing, TimeBase};
use dataplane::wire::LinkType;
use dataplane::wire::build::{self, Addrs, IpHeader};
use traffic_gen::traceback::packet::Packet;
use traffic_gen::traceback::source::MemorySource;
use traffic_gen::traceback::topology::{Ask, Topology};
use traffic_gen::traceback::{Leads, trace};

/// A network: for each router its links, (neighbour, my port, its port);
/// the host port of router `r` is `links[r].len()`.
struct Net {
    links: Vec<Vec<(usize, u8, u8)>>,
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        kernels::splitmix64(&mut self.0)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

impl Net {
    fn new(n: usize) -> Net {
        Net {
            links: vec![Vec::new(); n],
        }
    }

    fn linked(&self, a: usize, b: usize) -> bool {
        self.links[a].iter().any(|l| l.0 == b)
    }

    fn link(&mut self, a: usize, b: usize) {
        let pa = self.links[a].len() as u8;
        let pb = self.links[b].len() as u8;
        self.links[a].push((b, pa, pb));
        self.links[b].push((a, pb, pa));
    }

    /// A random recursive tree: router `i` joins one of `0..i`.
    fn tree(n: usize, rng: &mut Rng) -> Net {
        let mut net = Net::new(n);
        for i in 1..n {
            let j = rng.below(i);
            net.link(i, j);
        }
        net
    }

    /// A random spanning tree plus random links up to `edges` in all.
    fn graph(n: usize, edges: usize, rng: &mut Rng) -> Net {
        let mut net = Net::tree(n, rng);
        let mut m = n - 1;
        while m < edges {
            let (a, b) = (rng.below(n), rng.below(n));
            // Ports are bits of a u64 set: keep every router under 63 links.
            if a != b && !net.linked(a, b) && net.links[a].len() < 62 && net.links[b].len() < 62 {
                net.link(a, b);
                m += 1;
            }
        }
        net
    }

    fn host_port(&self, r: usize) -> u8 {
        self.links[r].len() as u8
    }

    fn ports(&self, r: usize) -> usize {
        self.links[r].len() + 1
    }

    /// A shortest path from `s` to `d` (breadth first, the lowest port
    /// first).
    fn path(&self, s: usize, d: usize) -> Vec<usize> {
        let mut prev = vec![usize::MAX; self.links.len()];
        prev[s] = s;
        let mut q = VecDeque::from([s]);
        while let Some(x) = q.pop_front() {
            if x == d {
                break;
            }
            for &(y, _, _) in &self.links[x] {
                if prev[y] == usize::MAX {
                    prev[y] = x;
                    q.push_back(y);
                }
            }
        }
        let mut p = vec![d];
        while *p.last().unwrap() != s {
            p.push(prev[*p.last().unwrap()]);
        }
        p.reverse();
        p
    }

    /// Router `r`'s port toward `n`.
    fn port_to(&self, r: usize, n: usize) -> u8 {
        self.links[r].iter().find(|l| l.0 == n).unwrap().1
    }

    fn port_name(&self, r: usize, p: u8) -> String {
        match self.links[r].get(usize::from(p)) {
            Some((n, _, _)) => format!("to-r{n}"),
            None => "host".into(),
        }
    }

    fn topology(&self) -> Topology {
        let mut t = Topology::default();
        for r in 0..self.links.len() {
            t.add_router(&format!("r{r}"), Ask::Kept(PathBuf::new()));
            t.add_host(&format!("h{r}"), (&format!("r{r}"), "host"));
            for &(n, p, q) in &self.links[r] {
                t.add_link(
                    (&format!("r{r}"), &self.port_name(r, p)),
                    (&format!("r{n}"), &self.port_name(n, q)),
                );
            }
        }
        t
    }

    /// The expected false branches beyond `r`'s port `q`, given that the
    /// walk tests it (see the module docs): the branch, and if it leads to
    /// a router not on the path (`on_path`), that router's own tests,
    /// `depth` more levels at most.
    fn beyond(&self, r: usize, q: u8, p: f64, on_path: &[usize], depth: u32) -> f64 {
        let Some(&(m, _, mp)) = self.links[r].get(usize::from(q)) else {
            return p; // a host port
        };
        if depth == 0 || on_path.contains(&m) {
            return p;
        }
        let below: f64 = (0..self.ports(m) as u8)
            .filter(|&x| x != mp)
            .map(|x| self.beyond(m, x, p, on_path, depth - 1))
            .sum();
        p * (1.0 + below)
    }

    /// The expected false branches of a traceback of `path` (source
    /// first).
    fn expected(&self, path: &[usize], p: f64) -> f64 {
        let mut e = 0.0;
        for (k, &r) in path.iter().enumerate() {
            let ingress = if k == 0 {
                self.host_port(r)
            } else {
                self.port_to(r, path[k - 1])
            };
            let toward = path.get(k + 1).map(|&n| self.port_to(r, n));
            for q in 0..self.ports(r) as u8 {
                if q != ingress && Some(q) != toward {
                    e += self.beyond(r, q, p, path, 8);
                }
            }
        }
        e
    }
}

/// A random IPv4 UDP frame, and its IP datagram.
fn frame(rng: &mut Rng) -> (Vec<u8>, Vec<u8>) {
    let a = rng.next();
    let ip = IpHeader {
        ident: (a >> 48) as u16,
        ..IpHeader::new(
            Addrs::V4 {
                src: Ipv4Addr::from(a as u32),
                dst: Ipv4Addr::from((a >> 32) as u32 ^ 0x5555),
            },
            17,
        )
    };
    let mut f = Vec::with_capacity(64);
    build::ethernet(
        &mut f,
        [2, 0, 0, 0, 0, 2],
        [2, 0, 0, 0, 0, 1],
        ip.ethertype(),
    );
    ip.push(&mut f, 8 + 8);
    build::udp(&mut f, (a >> 16) as u16, (a >> 24) as u16, 8);
    f.extend_from_slice(&rng.next().to_be_bytes());
    let l3 = 14;
    (f.clone(), f[l3..].to_vec())
}

/// Feeds `(ingress, frame)` through `stage` in batches, forwarded.
fn feed(stage: &mut DigestStage, frames: &[(u8, Vec<u8>)]) {
    let cfg = PipelineConfig::default();
    let mut c = PipelineCounters::default();
    let mut b = Batch::new();
    for chunk in frames.chunks(32) {
        b.clear();
        for (port, f) in chunk {
            b.push_from(
                Timestamp::from_nanos(1),
                f.len() as u32,
                LinkType::Ethernet,
                *port,
                f,
            );
        }
        parse_batch(&cfg, &mut b, &mut c);
        stage.process(&mut b, Timestamp::from_nanos(1));
    }
}

/// The exact two-sided 99% interval of a binomial with mean `mean` and
/// probability `p` (n = mean / p trials), its terms summed in log space.
fn binomial_99(mean: f64, p: f64) -> (u64, u64) {
    let n = (mean / p).round() as u64;
    let step = (p / (1.0 - p)).ln();
    let mut log_pmf = n as f64 * (1.0 - p).ln();
    let (mut cdf, mut lo, mut hi) = (0.0, None, n);
    for k in 0..=n {
        cdf += log_pmf.exp();
        if lo.is_none() && cdf >= 0.005 {
            lo = Some(k);
        }
        if cdf >= 0.995 {
            hi = k;
            break;
        }
        log_pmf += ((n - k) as f64 / (k + 1) as f64).ln() + step;
    }
    (lo.unwrap_or(0), hi)
}

fn run(name: &str, net: &Net, tracebacks: usize, rate: f64, seed: u64) {
    let mut rng = Rng(seed);
    let n = net.links.len();
    let cfg = |r: usize| DigestConfig {
        window_ns: u64::MAX / 4,
        windows: 2,
        expected: 3000,
        sizing: Sizing::FalsePositiveRate(rate),
        seed: Some(seed ^ (r as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
    };
    let mut stages: Vec<DigestStage> = (0..n).map(|r| DigestStage::new(&cfg(r)).unwrap()).collect();
    let g = *dataplane::stage::digest::Ring::new(&cfg(0))
        .unwrap()
        .geometry();
    let p = g.design_fpr;
    // The traced packets, recorded along their paths.
    let mut traced = Vec::new();
    let mut per_router: Vec<Vec<(u8, Vec<u8>)>> = vec![Vec::new(); n];
    for _ in 0..tracebacks {
        let s = rng.below(n);
        let mut d = rng.below(n);
        while d == s {
            d = rng.below(n);
        }
        let path = net.path(s, d);
        let (f, ip) = frame(&mut rng);
        for (k, &r) in path.iter().enumerate() {
            let ingress = if k == 0 {
                net.host_port(r)
            } else {
                net.port_to(r, path[k - 1])
            };
            per_router[r].push((ingress, f.clone()));
        }
        traced.push((path, ip));
    }
    // Background up to each window's capacity.
    for (r, frames) in per_router.iter_mut().enumerate() {
        assert!(
            frames.len() as u64 <= g.capacity,
            "{name}: r{r} over capacity"
        );
        while (frames.len() as u64) < g.capacity {
            let port = rng.below(net.ports(r)) as u8;
            frames.push((port, frame(&mut rng).0));
        }
        feed(&mut stages[r], frames);
        let c = stages[r].counters();
        assert_eq!((c.recorded, c.windows), (g.capacity, 0), "{name}: r{r}");
    }
    let topology = net.topology();
    let mut source = MemorySource::default();
    for (r, st) in stages.iter().enumerate() {
        let names = (0..net.ports(r) as u8)
            .map(|q| net.port_name(r, q))
            .collect();
        source.routers.insert(
            format!("r{r}"),
            Digests::new(vec![st.ring()], names, TimeBase::Unix),
        );
    }
    let (mut observed, mut expected, mut hops) = (0u64, 0.0f64, 0usize);
    for (path, ip) in &traced {
        let pkt = Packet {
            ip: ip.clone(),
            seen_unix_ns: None,
            summary: String::new(),
        };
        let victim = *path.last().unwrap();
        let t = trace(&topology, &mut source, &format!("r{victim}"), &pkt, None).unwrap();
        // No false negative: every path router reports its true ingress,
        // and the walk ends at the source's host port.
        for (k, &r) in path.iter().enumerate() {
            let want = if k == 0 {
                "host".to_string()
            } else {
                net.port_name(r, net.port_to(r, path[k - 1]))
            };
            let hop = t
                .hops
                .iter()
                .find(|h| h.router == format!("r{r}"))
                .unwrap_or_else(|| panic!("{name}: r{r} of {path:?} not asked"));
            assert!(
                hop.branches.iter().any(|b| b.port == want),
                "{name}: r{r} of {path:?} did not report {want}"
            );
        }
        let src = path[0];
        assert!(
            t.entries
                .iter()
                .any(|e| e.router == format!("r{src}") && e.port == "host"),
            "{name}: the entry at r{src} is missing"
        );
        let branches = t.branches();
        assert!(branches >= path.len());
        observed += (branches - path.len()) as u64;
        expected += net.expected(path, p);
        hops += path.len();
        // Every branch leads somewhere the topology knows.
        for h in &t.hops {
            for b in &h.branches {
                if let Leads::Router { hop, .. } = b.leads {
                    assert!(hop < t.hops.len());
                }
            }
        }
    }
    let (lo, hi) = binomial_99(expected, p);
    println!(
        "{name}: {n} routers, {tracebacks} tracebacks, mean path {:.2} routers, p {p:.5} per port and window: false branches {observed} (mean {:.4} per traceback), expected {expected:.1} ({:.4}), 99% interval {lo}..={hi}",
        hops as f64 / tracebacks as f64,
        observed as f64 / tracebacks as f64,
        expected / tracebacks as f64
    );
    assert!(
        (lo..=hi).contains(&observed),
        "{name}: {observed} false branches, outside {lo}..={hi} (expected {expected:.1})"
    );
}

#[test]
fn a_tree_of_127_routers() {
    let mut rng = Rng(11);
    let net = Net::tree(127, &mut rng);
    run("tree", &net, 2000, 0.02, 101);
}

#[test]
fn a_random_graph_of_100_routers() {
    let mut rng = Rng(12);
    let net = Net::graph(100, 200, &mut rng);
    run("graph", &net, 2000, 0.02, 102);
}

#[test]
fn a_tree_at_a_high_rate() {
    // At 10% the branches beyond false branches weigh in (p^2 terms).
    let mut rng = Rng(13);
    let net = Net::tree(150, &mut rng);
    run("tree at 10%", &net, 1000, 0.1, 103);
}

#[test]
fn the_binomial_interval() {
    // Binomial(10000, 0.01): mean 100, sd 9.95; 99% within about 2.576 sd.
    let (lo, hi) = binomial_99(100.0, 0.01);
    assert!(
        (73..=76).contains(&lo) && (125..=127).contains(&hi),
        "{lo} {hi}"
    );
    // Binomial(30000, 0.1): mean 3000, sd 52; the terms far below the
    // mean underflow on their own, not their sum.
    let (lo, hi) = binomial_99(3000.0, 0.1);
    assert!(
        (2860..=2870).contains(&lo) && (3130..=3140).contains(&hi),
        "{lo} {hi}"
    );
}
