//! The telemetry listener (`runtime::http`, serving `/metrics` and
//! `/digest` from one thread) against what remote hosts can open:
//!
//! * 3,000 connections that send half a request and wait: the process
//!   gains no thread and at most a few MiB, at most the cap of connections
//!   stays open (the oldest idle ones are closed for new ones), and an
//!   honest scrape still gets the metrics at once;
//! * `GET /digest` from an address not in `digest.query_clients`: 403;
//!   beyond the rate: 429; a malformed query: 400 naming the parameter,
//!   and the listener goes on; a packet the router forwarded is answered
//!   with its ingress port, one it did not with "not seen";
//! * requests that are not `GET`/`HEAD`, too long, or not HTTP get their
//!   status, never a crash.
//!
//! One test function: the thread and memory counts are the process's,
//! which other tests running beside it would change.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use dataplane::clock::Timestamp;
use dataplane::config::parse_client;
use dataplane::pipeline::{Batch, PipelineConfig, PipelineCounters, Stage, parse_batch};
use dataplane::runtime::Stats;
use dataplane::runtime::digest::DigestRoute;
use dataplane::runtime::http::Limits;
use dataplane::runtime::metrics::MetricsServer;
use dataplane::stage::digest::query::query_string;
use dataplane::stage::digest::{Answer, DigestConfig, DigestStage, Digests, Sizing, TimeBase};
use dataplane::wire::LinkType;
use dataplane::wire::build::{self, IpHeader, PROTO_UDP};

/// Ethernet + IPv4 UDP 10.0.0.1:1000 -> 10.0.0.2:2000, id `id`, 4
/// payload bytes.
fn frame(id: u16) -> Vec<u8> {
    let ip = IpHeader {
        ident: id,
        dont_fragment: true,
        ..IpHeader::v4([10, 0, 0, 1], [10, 0, 0, 2], PROTO_UDP)
    };
    build::udp_frame([0; 6], [0; 6], &ip, 1000, 2000, &[1, 2, 3, 4])
}

/// A router's digests after forwarding `frame(1..=100)` from port 1.
fn digests() -> Digests {
    let mut stage = DigestStage::new(&DigestConfig {
        window_ns: 1_000_000_000,
        windows: 4,
        expected: 1000,
        sizing: Sizing::FalsePositiveRate(1e-6),
        seed: Some(3),
    })
    .unwrap();
    let mut b = Batch::new();
    let mut c = PipelineCounters::default();
    for chunk in (1..=100u16).collect::<Vec<_>>().chunks(32) {
        b.clear();
        for &id in chunk {
            let f = frame(id);
            b.push_from(
                Timestamp::from_nanos(5_000_000_000),
                f.len() as u32,
                LinkType::Ethernet,
                1,
                &f,
            );
        }
        parse_batch(&PipelineConfig::default(), &mut b, &mut c);
        stage.process(&mut b, Timestamp::from_nanos(5_000_000_000));
    }
    assert_eq!(stage.counters().recorded, 100);
    Digests::new(
        vec![stage.ring()],
        vec!["r-a".into(), "r-b".into(), "r-c".into()],
        TimeBase::Unix,
    )
}

/// A request and the whole answer: (status, body).
fn request(addr: SocketAddr, raw: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(raw).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out.split_once("\r\n\r\n").map_or("", |x| x.1).to_string();
    (status, body)
}

fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    request(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
    )
}

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

/// Raises the descriptor limit to `want` (at most the hard limit);
/// returns the limit now.
fn raise_nofile(want: u64) -> u64 {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `l` is a live rlimit for getrlimit to fill.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) };
    l.rlim_cur = l.rlim_max.min(want);
    // SAFETY: `l` is a valid rlimit with cur <= max.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &l) };
    l.rlim_cur
}

#[test]
fn the_listener_is_bounded_and_answers_its_clients() {
    const IDLE: usize = 3000;
    let nofile = raise_nofile(8192);
    assert!(
        nofile as usize >= IDLE + 512,
        "RLIMIT_NOFILE is {nofile}: the test needs {} descriptors",
        IDLE + 512
    );
    let d = digests();
    let clients = vec![parse_client("127.0.0.1").unwrap()];
    let server = MetricsServer::bind(([127, 0, 0, 1], 0).into()).unwrap();
    let addr = server.local_addr();
    let route = DigestRoute::new(d.clone(), clients, 5, 5);
    let thread = server
        .spawn_with(Stats::default(), Some(route), Limits::default())
        .unwrap();
    let (status, body) = get(addr, "/metrics");
    assert_eq!(status, 200);
    assert!(
        body.contains("bloomplane_pipeline_received_total 0"),
        "{body}"
    );

    // 3,000 half-sent requests.
    let (t0, rss0) = (threads(), rss_kib());
    let mut idle = Vec::with_capacity(IDLE);
    for _ in 0..IDLE {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /metr").unwrap();
        idle.push(s);
    }
    // Let the server see them all.
    let deadline = Instant::now() + Duration::from_secs(20);
    while thread
        .counters()
        .accepted
        .load(std::sync::atomic::Ordering::Relaxed)
        < IDLE as u64 + 1
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let started = Instant::now();
    let (status, body) = get(addr, "/metrics");
    let took = started.elapsed();
    let (t1, rss1) = (threads(), rss_kib());
    let c = thread.counters();
    let open = c.open.load(std::sync::atomic::Ordering::Relaxed);
    let evicted = c.evicted.load(std::sync::atomic::Ordering::Relaxed);
    println!(
        "{IDLE} idle connections: threads {t0} -> {t1}, RSS {rss0} -> {rss1} KiB, open {open}, evicted {evicted}, a scrape answered in {took:?}"
    );
    assert_eq!(status, 200, "the honest scrape");
    assert!(body.contains("bloomplane_"), "{body}");
    assert_eq!(t1, t0, "threads grew with idle connections");
    assert!(
        rss1 < rss0 + 16 * 1024,
        "RSS grew from {rss0} to {rss1} KiB"
    );
    assert!(open as usize <= Limits::default().max_connections);
    assert!(evicted as usize >= IDLE - Limits::default().max_connections);
    drop(idle);

    // The digest route: answered, rate-limited, malformed.
    let ip = &frame(7)[14..];
    let (status, body) = get(addr, &format!("/digest?{}", query_string(ip, None, None)));
    assert_eq!(status, 200, "{body}");
    let a: Answer = serde_json::from_str(&body).unwrap();
    assert_eq!(a.seen.len(), 1, "{a:?}");
    assert_eq!((a.seen[0].port.as_str(), a.seen[0].index), ("r-b", 1));
    assert!(a.seen[0].false_positive_probability < 1e-5);
    let other = &frame(500)[14..];
    let (_, body) = get(
        addr,
        &format!("/digest?{}", query_string(other, None, None)),
    );
    let a: Answer = serde_json::from_str(&body).unwrap();
    assert!(!a.is_seen(), "{a:?}");
    let (status, body) = get(addr, "/digest?ip=45zz");
    assert_eq!(status, 400);
    assert!(
        body.contains("ip: character 2 is not a hexadecimal digit"),
        "{body}"
    );
    // The burst (5) is spent: the rest of a quick run is refused.
    let mut codes = Vec::new();
    for _ in 0..10 {
        codes.push(get(addr, &format!("/digest?{}", query_string(ip, None, None))).0);
    }
    assert!(codes.contains(&429), "{codes:?}");
    assert!(codes.iter().all(|c| [200, 429].contains(c)), "{codes:?}");

    // Other methods, a head too long, not HTTP.
    let post = request(addr, b"POST /metrics HTTP/1.1\r\n\r\n");
    assert_eq!(post.0, 405, "{post:?}");
    let long = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(9000));
    assert_eq!(request(addr, long.as_bytes()).0, 431);
    assert_eq!(request(addr, b"\x16\x03\x01\x00\xa5garbage\r\n\r\n").0, 400);
    assert_eq!(get(addr, "/nothing").0, 404);
    let (status, body) = request(addr, b"HEAD /metrics HTTP/1.1\r\n\r\n");
    assert_eq!((status, body.as_str()), (200, ""));
    // Still serving.
    assert_eq!(get(addr, "/metrics").0, 200);
    thread.stop();

    // Clients not listed are refused before anything else.
    let server = MetricsServer::bind(([127, 0, 0, 1], 0).into()).unwrap();
    let addr = server.local_addr();
    let route = DigestRoute::new(d, vec![parse_client("10.9.0.0/16").unwrap()], 5, 5);
    let thread = server
        .spawn_with(Stats::default(), Some(route), Limits::default())
        .unwrap();
    for _ in 0..20 {
        let (status, body) = get(addr, &format!("/digest?{}", query_string(ip, None, None)));
        assert_eq!(status, 403, "{body}");
        assert!(
            body.contains("127.0.0.1 is not in digest.query_clients"),
            "{body}"
        );
    }
    let (status, body) = get(addr, "/metrics");
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("bloomplane_digest_queries_total{result=\"refused\"} 20"),
        "{body}"
    );
    thread.stop();
}
