//! `peer`: a settings byte, then [framed](super::frames) datagrams, each
//! read as a message between routers ([`dataplane::wire::peer`]) and handed
//! to a router's control path ([`dataplane::peer::PeerControl`]) as if it
//! came from its configured peer (the frame's ingress bit 0: on the port
//! facing it, or another).
//!
//! Settings: bit 0, the peer has a key (most inputs then fail the tag);
//! bit 1, the router ticks after every datagram (its answers and filters
//! made and taken). What they promise, checked:
//!
//! * no panic, whatever the bytes;
//! * a view that checks never reads past its buffer: its body and tag lie
//!   inside it, the body parsers never panic, and a flow answer's entries
//!   re-emitted read back the same;
//! * every datagram is accepted or refused, counted once: the peer's
//!   accepted and refused messages, and the router's refusals of strangers,
//!   add up to the datagrams fed;
//! * a filter the router holds has the network's geometry;
//! * the flow set never exceeds its capacity.

use std::net::{IpAddr, Ipv4Addr};

use dataplane::peer::{FlowsConfig, PeerConfig, PeerControl, PeeringConfig};
use dataplane::wire::peer::{Delta, FlowEntries, Message, Segment};

use super::{frames, step_ns};

/// The router's clock at the start (Unix ns of the 2020s).
pub const T0: u64 = 1_764_000_000_000_000_000;
/// The configured peer's address.
pub const PEER: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 12, 2));

/// The router the inputs are fed to (id 1), its one peer (id 2) on port 0.
pub fn config(keyed: bool) -> PeeringConfig {
    PeeringConfig {
        router_id: 1,
        udp_port: 4784,
        hash_seed: 7,
        advert_interval_ns: 1_000_000_000,
        update_interval_ns: 100_000_000,
        hold_ns: 3_500_000_000,
        groups: 200,
        depth: 2,
        group_fpr: 0.01,
        rate: 1_000_000,
        burst: 1_000_000,
        max_skew_ns: u64::MAX / 4,
        flows: Some(FlowsConfig {
            exchange_interval_ns: 500_000_000,
            fpr: 0.5,
            ttl_ns: 60_000_000_000,
            capacity: 512,
            listed: Vec::new(),
        }),
        loss: 0.0,
        peers: vec![PeerConfig {
            port: 0,
            interface: "r1-r2".into(),
            address: PEER,
            udp_port: 4784,
            key: keyed.then(|| b"fuzz key".to_vec()),
        }],
    }
}

/// Checks one input (see the module docs).
pub fn check(data: &[u8]) {
    let Some((&settings, data)) = data.split_first() else {
        return;
    };
    let mut r = PeerControl::new(config(settings & 1 != 0), 9).expect("a valid config");
    let mut now = T0;
    let mut fed = 0u64;
    for f in frames(data) {
        now = now.saturating_add(step_ns(f.step));
        views(f.data);
        r.receive(PEER, f.ingress & 1, f.data, now);
        fed += 1;
        if settings & 2 != 0 {
            r.tick(now);
            let _ = r.take_outgoing();
        }
    }
    let rep = r.report(now);
    let p = &rep.peers[0].counters;
    assert_eq!(
        p.rx_messages + p.rejected.total() + rep.rejected_unknown,
        fed,
        "every datagram accepted or refused once: {rep:?}"
    );
    for f in r.remote_filters(2).into_iter().flatten() {
        assert_eq!(f.params(), r.params());
    }
    if let Some(flows) = r.flows() {
        assert!(flows.len() <= flows.capacity());
    }
}

/// The views over `bytes` (see the module docs).
fn views(bytes: &[u8]) {
    let Ok(m) = Message::new_checked(bytes) else {
        return;
    };
    let body = m.body();
    assert!(body.len() + 28 <= bytes.len());
    if let Some(t) = m.tag() {
        assert_eq!(t.len(), 16);
    }
    let _ = (m.kind(), m.sender(), m.seq(), m.aux(), m.signed().len());
    let _ = Segment::parse(body);
    if let Ok(d) = Delta::parse(body) {
        assert_eq!(d.positions().count(), d.len());
    }
    if let Ok(e) = FlowEntries::new(body) {
        let good: Vec<_> = e.map_while(Result::ok).collect();
        let mut again = Vec::new();
        FlowEntries::emit_count(good.len() as u16, &mut again);
        for f in &good {
            assert!(f.emit(&mut again));
        }
        let back: Vec<_> = FlowEntries::new(&again)
            .unwrap()
            .map_while(Result::ok)
            .collect();
        assert_eq!(back, good);
    }
}

/// Real exchanges to start from: the datagrams router 2 sends router 1
/// (membership filters, deltas, flow summaries and answers), framed, with
/// and without ticks in between.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    use dataplane::flow::{Flow4, FlowKey};
    use dataplane::stage::multicast::group_key;
    use dataplane::wire::IpProtocol;
    let mut c1 = config(false);
    let mut c2 = config(false);
    c2.router_id = 2;
    c2.peers[0].address = IpAddr::V4(Ipv4Addr::new(10, 0, 12, 1));
    c1.peers[0].address = PEER;
    let mut a = PeerControl::new(c1, 1).unwrap();
    let mut b = PeerControl::new(c2, 2).unwrap();
    let mut frames_out = Vec::new();
    let mut now = T0;
    for step in 0..12u64 {
        now += 250_000_000;
        if step == 2 {
            b.set_local_groups(
                (0..50u32).map(|i| group_key(IpAddr::V4(Ipv4Addr::from(0xe800_0000 + i)))),
            );
            b.detected(
                (0..20u16).map(|p| {
                    FlowKey::V4(Flow4 {
                        src: Ipv4Addr::new(10, 0, 0, 1),
                        dst: Ipv4Addr::new(10, 0, 0, 2),
                        src_port: 1000 + p,
                        dst_port: 80,
                        protocol: IpProtocol::Tcp,
                    })
                }),
                now,
            );
        }
        if step == 6 {
            b.set_local_groups(
                (0..40u32).map(|i| group_key(IpAddr::V4(Ipv4Addr::from(0xe800_0000 + i)))),
            );
        }
        a.tick(now);
        b.tick(now);
        for d in a.take_outgoing() {
            b.receive(IpAddr::V4(Ipv4Addr::new(10, 0, 12, 1)), 0, &d.payload, now);
        }
        for d in b.take_outgoing() {
            a.receive(PEER, 0, &d.payload, now);
            frames_out.push(d.payload);
        }
    }
    let framed = |settings: u8| {
        let mut v = vec![settings];
        for (i, f) in frames_out.iter().enumerate() {
            // Ingress 0 (the peer's port), a step of 1 ms-ish between.
            super::encode(&mut v, (if i == 0 { 0 } else { 7 }) << 4, f);
        }
        v
    };
    vec![
        ("exchange".into(), framed(0)),
        ("exchange-ticks".into(), framed(2)),
    ]
}
