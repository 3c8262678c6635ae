//! The experiments of "The Distributed Bloom Filter" (§3) reproduced over
//! `kernels::bloom::dbf`: 50 nodes, 10 random neighbours each, `|S|` =
//! 1000, 200 random elements per node, filters at a 50% false-positive
//! rate; experiment 1 (`m` from `|S|`) and experiment 2 (`m` from the
//! pair's set sizes), each with standard filters, the DBF and the DBF with
//! a nonce per exchange, for every protocol choice the paper leaves open.
//! Prints one markdown table per (protocol, experiment).
//!
//! ```text
//! cargo run --release -p kernels --example dbf_paper [-- --seeds 20 --threads 2]
//! ```
//!
//! The simulation is `tests/dbf_sim/mod.rs` (shared with the test
//! `tests/dbf_paper.rs`); its module docs define one exchange and each
//! choice.

#[path = "../tests/dbf_sim/mod.rs"]
mod dbf_sim;

use dbf_sim::{Contact, Experiment, Links, Network, Protocol, Round, Row, Sizing, Variant};

fn main() {
    let mut seeds = 20u64;
    let mut threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let value = |v: Option<String>| -> u64 {
            v.and_then(|v| v.parse().ok()).unwrap_or_else(|| {
                eprintln!("usage: dbf_paper [--seeds N] [--threads N]");
                std::process::exit(2)
            })
        };
        match a.as_str() {
            "--seeds" => seeds = value(args.next()).max(1),
            "--threads" => threads = value(args.next()).max(1) as usize,
            _ => {
                value(None);
            }
        };
    }
    let seeds: Vec<u64> = (1..=seeds).collect();
    let net = Network::PAPER;
    let mut protocols = Vec::new();
    for round in [Round::Sequential, Round::Synchronous] {
        for links in [Links::Directed, Links::Symmetric] {
            for contact in [Contact::OneWay, Contact::BothWays] {
                protocols.push(Protocol {
                    contact,
                    links,
                    round,
                    sizing: Sizing::Textbook,
                });
            }
        }
    }
    protocols.push(Protocol {
        contact: Contact::OneWay,
        links: Links::Directed,
        round: Round::Sequential,
        sizing: Sizing::Dense,
    });
    println!(
        "{} nodes, {} neighbours each, |S| = {}, {} per node, rate {}, cap {} rounds, seeds 1..={}",
        net.nodes,
        net.neighbours,
        net.universe,
        net.initial,
        net.rate,
        net.max_rounds,
        seeds.len()
    );
    for protocol in &protocols {
        for (experiment, name) in [
            (Experiment::FixedM, "experiment 1 (m from |S|)"),
            (
                Experiment::PairM,
                "experiment 2 (m from the pair's set sizes)",
            ),
        ] {
            println!("\n{name}; {}\n", protocol.describe());
            println!("{}", Row::header());
            for variant in Variant::ALL {
                let row = Row::run(&net, experiment, variant, *protocol, &seeds, threads);
                println!("{}", row.markdown(&net));
            }
        }
    }
}
