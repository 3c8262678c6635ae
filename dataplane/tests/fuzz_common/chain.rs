//! `chain`: frames through the router's whole chain ([`Chain`]), built
//! from a small fixed config ([`CONFIG`]: three ports, Icarus inserting on
//! port 0 and stripping on port 2, heavy flows, multicast, an SFB queue
//! behind a slow shaper on port 1), over memory ports ([`MemoryPorts`]) as
//! replay runs it.
//!
//! Input: a settings byte, then [framed](super::frames) frames. Settings:
//! bit 0 passes malformed frames instead of dropping them, bit 1 turns on
//! strict lengths, bit 2 says each frame was 100 bytes longer on the wire
//! than captured, bit 3 builds the chain from [`ROUTED`] instead (every
//! port routed: the forwarding stage with its ICMP, ARP, neighbour
//! discovery and held packets), and bit 4 then addresses every Ethernet
//! frame to its ingress port's MAC, so that the fuzzed bytes are routed
//! rather than dropped as `other_host`.
//!
//! After every batch and at the end (queues drained): `received ==
//! forwarded + local + dropped + held` by reason; per port, every copy is sent, dropped
//! by a reason or still queued (`copies == sent + send_errors + dropped +
//! backlog`), the queued copies are the egress stage's backlog, and what
//! the ports sent is what the stage says it sent.

use std::sync::OnceLock;

use dataplane::chain::Chain;
use dataplane::clock::Timestamp;
use dataplane::config::RouterConfig;
use dataplane::io::memory::MemoryPorts;
use dataplane::io::port::Ports;
use dataplane::pipeline::{Batch, MalformedPolicy, PipelineConfig, PortSet};

use super::{Clock, frames};

/// The chain's config.
pub const CONFIG: &str = r#"
[[interfaces]]
name = "p0"

[[interfaces]]
name = "p1"
multicast_groups = ["239.1.1.1"]
[interfaces.egress]
rate_bps = 1_000_000
burst_bytes = 3000
limit = 16
[interfaces.sfb]
limit = 16
max = 6
target = 3
increment = 3000
decrement = 300
penalty_rate = 10
penalty_burst = 2
rehash_ms = 1000
db_ms = 200
seed = 3

[[interfaces]]
name = "p2"

[[wires]]
from = "p0"
to = "p1"
bidirectional = true

[[wires]]
from = "p0"
to = "p2"

[multicast]
expected_groups = 16
max_learned_groups = 8
records_per_batch = 16
verify_checksums = false
seed = 5

[heavy]
threshold = { packets = 4 }
epoch_ms = 100
rows = 2
log2_width = 6
capacity = 8
seed = 9

[icarus]
node_id = 7
filter_bits = 64
insert_on = ["p0"]
strip_on = ["p2"]
"#;

/// The routed chain's config: three routed ports (the second with the
/// SFB queue), static routes and a neighbour, Icarus, multicast, a small
/// hold queue and a tight ICMP bucket.
pub const ROUTED: &str = r#"
[[interfaces]]
name = "p0"
addresses = ["10.0.0.1/24", "2001:db8::1/64"]

[[interfaces]]
name = "p1"
addresses = ["10.0.1.1/24", "2001:db8:1::1/64"]
mtu = 1280
multicast_groups = ["239.1.1.1"]
[interfaces.egress]
rate_bps = 1_000_000
burst_bytes = 3000
limit = 16
[interfaces.sfb]
limit = 16
seed = 3

[[interfaces]]
name = "p2"
addresses = ["192.168.0.1/16"]

[[routes]]
prefix = "0.0.0.0/0"
via = "10.0.1.2"

[[routes]]
prefix = "::/0"
via = "2001:db8:1::2"

[[routes]]
prefix = "172.16.0.0/12"
interface = "p2"

[[neighbours]]
address = "10.0.1.2"
mac = "02:00:00:00:01:02"

[router]
icmp_rate = 100
icmp_burst = 4
neighbour_queue = 2
resolve_interval_ms = 50

[multicast]
expected_groups = 16
seed = 5

[icarus]
node_id = 7
filter_bits = 64
insert_on = ["p0"]
strip_on = ["p2"]
"#;

const PORTS: usize = 3;

fn config(routed: bool) -> &'static RouterConfig {
    static CFG: OnceLock<RouterConfig> = OnceLock::new();
    static CFG_ROUTED: OnceLock<RouterConfig> = OnceLock::new();
    let (cell, text) = if routed {
        (&CFG_ROUTED, ROUTED)
    } else {
        (&CFG, CONFIG)
    };
    cell.get_or_init(|| {
        RouterConfig::from_toml_str(text, "chain.toml").unwrap_or_else(|e| panic!("{e}"))
    })
}

/// The accounting invariants (see the module docs).
fn check_accounts(chain: &Chain, ports: &MemoryPorts, now: Timestamp) {
    let c = chain.counters();
    assert!(c.is_consistent(), "{c:?}");
    let egress = chain.egress();
    let summaries = egress.summaries(now);
    assert_eq!(summaries.len(), PORTS);
    let mut backlog = 0;
    for (s, tx) in summaries.iter().zip(ports.tx_counts()) {
        assert!(s.is_consistent(), "{s:?}");
        assert_eq!(s.counters.sent, tx.packets, "{}: sent", s.name);
        assert_eq!(s.counters.sent_bytes, tx.bytes, "{}: bytes", s.name);
        backlog += s.backlog_packets;
    }
    assert_eq!(egress.backlog().0 as u64, backlog);
}

/// Checks one input (see the module docs).
pub fn check(data: &[u8]) {
    let Some((&settings, data)) = data.split_first() else {
        return;
    };
    let routed = settings & 8 != 0;
    let mut chain = Chain::build(config(routed)).unwrap_or_else(|e| panic!("{e}"));
    chain.set_parse_config(PipelineConfig {
        malformed: if settings & 1 != 0 {
            MalformedPolicy::Pass
        } else {
            MalformedPolicy::Drop
        },
        default_egress: PortSet::EMPTY,
    });
    let extra = if settings & 4 != 0 { 100 } else { 0 };
    let mut ports = MemoryPorts::new(PORTS);
    let mut clock = Clock::default();
    let mut pushed = 0u64;
    let to_router = routed && settings & 16 != 0;
    let mut frame = Vec::new();
    for f in frames(data) {
        let ts = clock.advance(f.step);
        frame.clear();
        frame.extend_from_slice(f.data);
        if to_router
            && f.link == dataplane::wire::LinkType::Ethernet
            && let Some(d) = frame.get_mut(0..6)
        {
            d.copy_from_slice(&dataplane::config::MacAddr::default_for_port(f.ingress).0);
        }
        ports.push(ts, f.ingress, f.link, frame.len() as u32 + extra, &frame);
        pushed += 1;
    }
    let mut batch = Batch::new();
    loop {
        batch.clear();
        if ports.recv(&mut batch) == 0 {
            break;
        }
        let now = ports.now();
        chain.process(&mut batch, now, &mut ports);
        check_accounts(&chain, &ports, now);
    }
    assert_eq!(chain.counters().received, pushed);

    // Time goes on with no packet (epochs close, the queue drains at its
    // rate), then the input ends and the rest of the queue leaves.
    let later = clock.now().add_nanos(10_000_000_000);
    chain.tick(&mut batch, later, &mut ports);
    check_accounts(&chain, &ports, later);
    if routed {
        // Every unresolved next hop has given up by now (3 tries 50 ms
        // apart, one per tick).
        for k in 1..=4u64 {
            chain.tick(&mut batch, later.add_nanos(k * 100_000_000), &mut ports);
            check_accounts(&chain, &ports, later);
        }
        assert_eq!(chain.counters().held, 0, "{:?}", chain.counters());
    }
    chain.finish(later);
    chain.egress_mut().drain_all(&mut ports);
    check_accounts(&chain, &ports, later);
    assert_eq!(chain.egress().backlog().0, 0);
    assert_eq!(chain.counters().received, pushed);
}
