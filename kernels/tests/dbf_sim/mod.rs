//! The experiments of "The Distributed Bloom Filter" (Ramabaja and
//! Avdullahu, §3) over `kernels::bloom::dbf`: a network of nodes that
//! reconcile random subsets of a universe `S` by exchanging filters at a
//! high false-positive rate, until (perhaps) every node holds `S`.
//!
//! Shared by the test `tests/dbf_paper.rs` (a few seeds, the assertions)
//! and the example `examples/dbf_paper.rs` (the full tables); included by
//! both with `#[path]`, so the library carries none of it.
//!
//! One exchange, `a` contacting `b`: `a` builds the filter of its set under
//! the exchange's mapping and sends it (its compressed transfer form);
//! `b` answers with the elements of its set the filter does not contain,
//! which `a` adds. Both ways, `b` then does the same towards `a` under the
//! same mapping. The variants differ only in the mapping:
//!
//! * standard: one mapping shared by every pair and every exchange (a
//!   standard Bloom filter: the same hash functions everywhere);
//! * standard, a mapping per size: as standard, but a filter sized for
//!   another item count maps elements anew, as the paper's did (its `m`
//!   follows `n` one for one and positions are reduced modulo `m`); differs
//!   from standard only in experiment 2;
//! * DBF: the pair's mapping ([`Mapping::for_pair`] of the two node ids),
//!   the same on every exchange between the two;
//! * DBF + nonce: the pair's mapping made unique to the exchange.
//!
//! The experiments differ in `m`: experiment 1 sizes every filter for
//! `|S|` items at the target rate (so a filter of fewer items has fewer
//! false positives); experiment 2 for `max(|A|, |B|)` of the pair (the two
//! first exchange their set sizes: 8 bytes counted).
//!
//! The paper leaves the protocol open; these are the [`Protocol`] choices:
//! whether a contact is one way or both ways, whether the neighbour
//! relation is directed (each node contacts the ten it picked) or symmetric
//! (a pick links both nodes, so a node contacts about twenty), and what one
//! round is (every node contacts each of its neighbours once, the
//! exchanges in a random order, each seeing what the earlier ones added;
//! or all at once, each seeing the round's starting sets).

#![allow(dead_code)] // each includer uses part of it

use std::collections::HashMap;

use kernels::Hasher;
use kernels::bloom::dbf::{DbfSet, Mapping};
use kernels::bloom::{Layout, Params};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};

/// Bytes of one element on the wire: an IPv4 5-tuple flow key, four words.
pub const ELEMENT_BYTES: u64 = 16;
/// Bytes of the set-size exchange before an experiment-2 filter.
pub const SIZE_EXCHANGE_BYTES: u64 = 8;

/// The paper's network and filters.
#[derive(Debug, Clone, Copy)]
pub struct Network {
    /// Nodes (50).
    pub nodes: usize,
    /// Neighbours each node picks at random (10).
    pub neighbours: usize,
    /// `|S|` (1000).
    pub universe: usize,
    /// Random elements of `S` each node starts with (200).
    pub initial: usize,
    /// The filters' target false-positive rate (0.5).
    pub rate: f64,
    /// Rounds before a run that has not converged counts as "never" (100).
    pub max_rounds: u32,
}

impl Network {
    /// §3.2's parameters.
    pub const PAPER: Network = Network {
        nodes: 50,
        neighbours: 10,
        universe: 1000,
        initial: 200,
        rate: 0.5,
        max_rounds: 100,
    };
}

/// How `m` is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Experiment {
    /// Experiment 1: every filter sized for `|S|` items.
    FixedM,
    /// Experiment 2: sized for the larger of the pair's two sets.
    PairM,
}

/// Which mapping each exchange uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    /// One mapping for every pair and exchange.
    Standard,
    /// One mapping per design item count. In experiment 2 the paper's
    /// standard filters change `m` with every element a pair acquires
    /// (`m = -n ln p / ln^2 2`), and a filter that reduces positions modulo
    /// `m` maps every element anew when `m` changes; that is its
    /// explanation of why its standard network did well there. The
    /// kernels' classic `m` is a multiple of 64 (it changes every 44 items
    /// at 50%) and positions are reduced by multiply-shift, which keeps
    /// most collisions when `m` changes a little; this variant keys the
    /// shared mapping by the item count instead. In experiment 1 it is
    /// one shared mapping, like [`Variant::Standard`] (another seed).
    StandardPerSize,
    /// The pair's mapping.
    Dbf,
    /// The pair's mapping with a nonce per exchange.
    DbfNonce,
}

impl Variant {
    /// The four, in table order.
    pub const ALL: [Variant; 4] = [
        Variant::Standard,
        Variant::StandardPerSize,
        Variant::Dbf,
        Variant::DbfNonce,
    ];

    /// The table's name.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Standard => "standard",
            Variant::StandardPerSize => "standard, a mapping per size",
            Variant::Dbf => "DBF",
            Variant::DbfNonce => "DBF + nonce",
        }
    }
}

/// Whether one contact updates one node or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Contact {
    /// `a` sends its filter, `b` answers: `a` learns.
    OneWay,
    /// Then `b` sends its filter under the same mapping, `a` answers: both
    /// learn.
    BothWays,
}

/// The neighbour relation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Links {
    /// Each node contacts the nodes it picked.
    Directed,
    /// A pick links both nodes; each contacts all its links (the picks it
    /// made and the picks that named it).
    Symmetric,
}

/// What one round is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Round {
    /// Every node contacts each neighbour once; the round's exchanges in a
    /// random order, each seeing the sets as the earlier ones left them.
    Sequential,
    /// Every node contacts each neighbour once, all against the sets as
    /// the round found them; what they learn is added at its end.
    Synchronous,
}

/// How a filter's geometry is chosen for `n` items at the target rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Sizing {
    /// The textbook filter (the paper's): `m = -n ln p / ln^2 2`,
    /// `k = round(m/n ln 2)`; at 50%, `k = 1` and 1.44 bits per item.
    /// [`Params::for_transfer`], the router's sizing for the fewest bytes,
    /// gives exactly this at 50% (the test checks it).
    Textbook,
    /// The dense optimum of coded size at 50%: `k = 27`, the smallest `m`
    /// that reaches the rate (7.4 bits per item), 1.26 coded bits per item
    /// when the filter holds its design count. Shown to explain why
    /// [`Params::for_transfer`] leaves the dense side out.
    Dense,
}

/// `k` of [`Sizing::Dense`].
pub const DENSE_K: usize = 27;

impl Sizing {
    /// The geometry for `n` items at `rate`.
    pub fn params(self, n: usize, rate: f64) -> Params {
        match self {
            Sizing::Textbook => Params::for_items(Layout::Classic, n as u64, rate)
                .expect("a valid geometry for 1..=|S| items at the rate"),
            Sizing::Dense => (1..)
                .map(|words| Params::new(Layout::Classic, 64 * words, DENSE_K).expect("valid"))
                .find(|p| p.false_positive_rate(n as f64) <= rate)
                .expect("some size reaches the rate"),
        }
    }
}

/// The protocol choices the paper leaves open, and the sizing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Protocol {
    pub contact: Contact,
    pub links: Links,
    pub round: Round,
    pub sizing: Sizing,
}

impl Protocol {
    /// A short description for table headings.
    pub fn describe(&self) -> String {
        format!(
            "{} contacts, {} links, {} rounds, {} sizing",
            match self.contact {
                Contact::OneWay => "one-way",
                Contact::BothWays => "both-ways",
            },
            match self.links {
                Links::Directed => "directed",
                Links::Symmetric => "symmetric",
            },
            match self.round {
                Round::Sequential => "sequential",
                Round::Synchronous => "synchronous",
            },
            match self.sizing {
                Sizing::Textbook => "textbook",
                Sizing::Dense => "dense (k = 27)",
            },
        )
    }
}

/// One run's result.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Nodes holding all of `S` at the end.
    pub converged: usize,
    /// Every node's set size at the end.
    pub sizes: Vec<usize>,
    /// The round after which every node held `S`, if one did within the
    /// cap.
    pub rounds: Option<u32>,
    /// Rounds run: to convergence, to a round in which nothing moved (with
    /// fixed mappings nothing ever will again), or the cap.
    pub ran: u32,
    /// Filter messages sent until the last round that moved an element
    /// (compressed transfer form, header included; the set sizes of
    /// experiment 2 included).
    pub filter_bytes: u64,
    /// Elements sent back, at [`ELEMENT_BYTES`] each.
    pub element_bytes: u64,
    /// Filters sent, counted as the bytes are.
    pub filters: u64,
}

/// The network of one seed: the universe, the node ids, who contacts
/// whom, the initial sets. The same for every variant and protocol with
/// this seed (the paper's "identical nodes, neighbours, elements").
struct Setup {
    universe: Vec<[u32; 4]>,
    ids: Vec<u64>,
    picks: Vec<Vec<usize>>,
    initial: Vec<Vec<usize>>,
}

impl Setup {
    fn new(net: &Network, seed: u64) -> Setup {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut universe: Vec<[u32; 4]> = Vec::with_capacity(net.universe);
        let mut seen = std::collections::HashSet::new();
        while universe.len() < net.universe {
            let k = [
                rng.random(),
                rng.random(),
                rng.random(),
                rng.random_range(0..256),
            ];
            if seen.insert(k) {
                universe.push(k);
            }
        }
        let ids = (0..net.nodes).map(|_| rng.random()).collect();
        let picks = (0..net.nodes)
            .map(|a| {
                // `neighbours` distinct nodes other than `a`.
                sample(&mut rng, net.nodes - 1, net.neighbours)
                    .into_iter()
                    .map(|j| if j >= a { j + 1 } else { j })
                    .collect()
            })
            .collect();
        let initial = (0..net.nodes)
            .map(|_| sample(&mut rng, net.universe, net.initial).into_vec())
            .collect();
        Setup {
            universe,
            ids,
            picks,
            initial,
        }
    }

    /// Whom each node contacts in a round.
    fn contacts(&self, links: Links) -> Vec<(usize, usize)> {
        let mut out: Vec<(usize, usize)> = Vec::new();
        match links {
            Links::Directed => {
                for (a, picks) in self.picks.iter().enumerate() {
                    out.extend(picks.iter().map(|&b| (a, b)));
                }
            }
            Links::Symmetric => {
                let n = self.picks.len();
                let mut linked = vec![vec![false; n]; n];
                for (a, picks) in self.picks.iter().enumerate() {
                    for &b in picks {
                        linked[a][b] = true;
                        linked[b][a] = true;
                    }
                }
                for (a, row) in linked.iter().enumerate() {
                    out.extend(
                        row.iter()
                            .enumerate()
                            .filter(|(_, l)| **l)
                            .map(|(b, _)| (a, b)),
                    );
                }
            }
        }
        out
    }
}

/// Runs one experiment, one variant, one protocol, one seed.
pub fn run(
    net: &Network,
    experiment: Experiment,
    variant: Variant,
    protocol: Protocol,
    seed: u64,
) -> Outcome {
    let setup = Setup::new(net, seed);
    let hasher = Hasher::with_seed(seed);
    let mut sets: Vec<DbfSet<[u32; 4]>> = setup
        .initial
        .iter()
        .map(|elems| {
            let mut s = DbfSet::new(hasher.clone(), u64::MAX, net.universe);
            for &e in elems {
                s.report(setup.universe[e], 0).expect("within capacity");
            }
            s
        })
        .collect();
    let mut contacts = setup.contacts(protocol.links);
    // The order of exchanges: its own stream, the same for every variant.
    let mut order = StdRng::seed_from_u64(seed ^ 0x006f_7264_6572);
    let mut sizing: HashMap<usize, Params> = HashMap::new();
    let mut params_for = |n: usize| -> Params {
        *sizing
            .entry(n)
            .or_insert_with(|| protocol.sizing.params(n, net.rate))
    };
    let standard = Mapping::new(0x5354_414e_4441_5244);
    let mut out = Outcome {
        converged: 0,
        sizes: Vec::new(),
        rounds: None,
        ran: 0,
        filter_bytes: 0,
        element_bytes: 0,
        filters: 0,
    };
    let mut exchange_id = 0u64;
    // Bytes as of the end of the last round that moved an element: a
    // stalled network keeps sending filters that change nothing.
    let mut settled = (0u64, 0u64, 0u64);
    let full = |sets: &[DbfSet<[u32; 4]>]| sets.iter().all(|s| s.len() == net.universe);
    while out.ran < net.max_rounds && !full(&sets) {
        out.ran += 1;
        if protocol.round == Round::Sequential {
            contacts.shuffle(&mut order);
        }
        // Synchronous rounds answer from the sets as the round found them.
        let start = (protocol.round == Round::Synchronous).then(|| sets.clone());
        let mut learned: Vec<Vec<[u32; 4]>> = vec![Vec::new(); net.nodes];
        let mut moved = 0usize;
        for &(a, b) in &contacts {
            exchange_id += 1;
            let view = start.as_deref().unwrap_or(&sets);
            let n = match experiment {
                Experiment::FixedM => net.universe,
                Experiment::PairM => {
                    out.filter_bytes += SIZE_EXCHANGE_BYTES;
                    view[a].len().max(view[b].len())
                }
            };
            let params = params_for(n);
            let mapping = match variant {
                Variant::Standard => standard,
                Variant::StandardPerSize => Mapping::new(standard.seed() ^ n as u64),
                Variant::Dbf => Mapping::for_pair(setup.ids[a], setup.ids[b]),
                Variant::DbfNonce => {
                    Mapping::for_pair(setup.ids[a], setup.ids[b]).with_nonce(exchange_id)
                }
            };
            let directions: &[(usize, usize)] = match protocol.contact {
                Contact::OneWay => &[(a, b)],
                Contact::BothWays => &[(a, b), (b, a)],
            };
            for &(sender, receiver) in directions {
                let view = start.as_deref().unwrap_or(&sets);
                let filter = view[sender].filter(params, mapping);
                out.filter_bytes += filter.to_compressed_bytes().len() as u64;
                out.filters += 1;
                let answer: Vec<[u32; 4]> =
                    view[receiver].missing(&filter).map(|(e, _)| *e).collect();
                out.element_bytes += answer.len() as u64 * ELEMENT_BYTES;
                match start {
                    Some(_) => learned[sender].extend(answer),
                    None => {
                        for e in answer {
                            if sets[sender].report(e, 0).expect("within capacity") {
                                moved += 1;
                            }
                        }
                    }
                }
            }
        }
        for (node, elems) in learned.into_iter().enumerate() {
            for e in elems {
                if sets[node].report(e, 0).expect("within capacity") {
                    moved += 1;
                }
            }
        }
        if moved > 0 {
            settled = (out.filter_bytes, out.element_bytes, out.filters);
        }
        if full(&sets) {
            out.rounds = Some(out.ran);
        } else if moved == 0 && variant != Variant::DbfNonce {
            // Same sets, same sizes, same mappings: every later round
            // repeats this one.
            break;
        }
    }
    (out.filter_bytes, out.element_bytes, out.filters) = settled;
    out.sizes = sets.iter().map(|s| s.len()).collect();
    out.converged = out.sizes.iter().filter(|&&s| s == net.universe).count();
    out
}

/// The median of `v` (the mean of the middle two for an even count);
/// `None` if empty.
pub fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let mid = s.len() / 2;
    Some(if s.len() % 2 == 1 {
        s[mid]
    } else {
        (s[mid - 1] + s[mid]) / 2.0
    })
}

/// One table row: a variant over many seeds.
#[derive(Debug, Clone)]
pub struct Row {
    pub variant: Variant,
    pub outcomes: Vec<Outcome>,
}

impl Row {
    /// Runs `seeds` (on up to `threads` threads).
    pub fn run(
        net: &Network,
        experiment: Experiment,
        variant: Variant,
        protocol: Protocol,
        seeds: &[u64],
        threads: usize,
    ) -> Row {
        let threads = threads.clamp(1, seeds.len().max(1));
        let mut outcomes: Vec<Option<Outcome>> = vec![None; seeds.len()];
        std::thread::scope(|s| {
            for (chunk_seeds, chunk_out) in seeds
                .chunks(seeds.len().div_ceil(threads).max(1))
                .zip(outcomes.chunks_mut(seeds.len().div_ceil(threads).max(1)))
            {
                s.spawn(move || {
                    for (&seed, o) in chunk_seeds.iter().zip(chunk_out) {
                        *o = Some(run(net, experiment, variant, protocol, seed));
                    }
                });
            }
        });
        Row {
            variant,
            outcomes: outcomes
                .into_iter()
                .map(|o| o.expect("every seed ran"))
                .collect(),
        }
    }

    /// Converged nodes per seed.
    pub fn converged(&self) -> Vec<usize> {
        self.outcomes.iter().map(|o| o.converged).collect()
    }

    /// Seeds on which every node converged within the cap.
    pub fn all_converged(&self) -> usize {
        self.outcomes.iter().filter(|o| o.rounds.is_some()).count()
    }

    /// The markdown row: variant, converged nodes (mean, min-max), seeds
    /// with every node converged, median set size (over every node of
    /// every seed, and over the nodes that did not converge), rounds to
    /// full convergence (median, min-max over the seeds that got there),
    /// kilobytes of filters per run, bytes per filter message, kilobytes of
    /// elements per run.
    pub fn markdown(&self, net: &Network) -> String {
        let seeds = self.outcomes.len();
        let conv = self.converged();
        let mean = conv.iter().sum::<usize>() as f64 / seeds as f64;
        let (lo, hi) = (
            conv.iter().min().copied().unwrap_or(0),
            conv.iter().max().copied().unwrap_or(0),
        );
        let sizes = || self.outcomes.iter().flat_map(|o| o.sizes.iter().copied());
        let all: Vec<f64> = sizes().map(|s| s as f64).collect();
        let unconverged: Vec<f64> = sizes()
            .filter(|&s| s != net.universe)
            .map(|s| s as f64)
            .collect();
        let rounds: Vec<f64> = self
            .outcomes
            .iter()
            .filter_map(|o| o.rounds.map(f64::from))
            .collect();
        let rounds_text = match median(&rounds) {
            None => "never".to_string(),
            Some(m) => {
                let lo = rounds.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = rounds.iter().copied().fold(0.0, f64::max);
                let never = seeds - rounds.len();
                let tail = if never > 0 {
                    format!("; never on {never}")
                } else {
                    String::new()
                };
                format!("{m:.0} ({lo:.0}-{hi:.0}{tail})")
            }
        };
        let kb = |f: fn(&Outcome) -> u64| {
            self.outcomes.iter().map(f).sum::<u64>() as f64 / seeds as f64 / 1000.0
        };
        let med = |v: &[f64]| median(v).map_or("-".to_string(), |m| format!("{m:.0}"));
        let filters: u64 = self.outcomes.iter().map(|o| o.filters).sum();
        let per_filter = kb(|o| o.filter_bytes) * 1000.0 * seeds as f64 / filters.max(1) as f64;
        format!(
            "| {:<11} | {:>4.1} ({}-{}) | {:>2}/{} | {:>4} | {:>4} | {:<16} | {:>7.1} | {:>5.0} | {:>7.1} |",
            self.variant.name(),
            mean,
            lo,
            hi,
            self.all_converged(),
            seeds,
            med(&all),
            med(&unconverged),
            rounds_text,
            kb(|o| o.filter_bytes),
            per_filter,
            kb(|o| o.element_bytes),
        )
    }

    /// The table's header.
    pub fn header() -> &'static str {
        "| variant | nodes converged, of 50: mean (min-max) | seeds all converged | median set | median unconverged set | rounds to all converged: median (min-max) | filter kB per run | bytes per filter | element kB per run |\n\
         |---|---|---|---:|---:|---|---:|---:|---:|"
    }
}
