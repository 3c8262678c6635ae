//! The metrics endpoint against the real tools: `promtool check metrics`
//! lints the exposition, and a real `prometheus` scrapes the server and
//! answers a query with the router's own drop count.
//!
//! The stats come from the router's chain and worker loop run over memory
//! ports (two workers, a shaped SFB port that drops), merged as a scrape of
//! the live router merges its workers' snapshots, and served by the same
//! server code `dataplane run` starts. Each test skips with a printed reason
//! when its tool is absent (Debian's `prometheus` package has both).

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use dataplane::clock::Timestamp;
use dataplane::config::RouterConfig;
use dataplane::io::memory::MemoryPorts;
use dataplane::runtime::metrics::{self, MetricsServer};
use dataplane::runtime::{Stats, Worker, build_workers};
use dataplane::wire::LinkType;

const PROMTOOL: &str = "/usr/bin/promtool";
const PROMETHEUS: &str = "/usr/bin/prometheus";

/// The tool at `path`, or `None` after printing why the test skips.
fn tool(test: &str, path: &str) -> Option<PathBuf> {
    let p = PathBuf::from(path);
    if p.exists() {
        return Some(p);
    }
    let _ = writeln!(
        std::io::stderr(),
        "{test}: skipped: {path} not found (Debian package prometheus)"
    );
    None
}

/// A UDP frame 10.0.0.1:1000 -> 10.0.0.2:2000 of `len` bytes.
fn frame(len: usize) -> Vec<u8> {
    use dataplane::wire::build::{self, IpHeader};
    let ip = IpHeader::v4([10, 0, 0, 1], [10, 0, 0, 2], build::PROTO_UDP);
    build::udp_frame([0; 6], [0; 6], &ip, 1000, 2000, &vec![0; len - 42])
}

/// The merged stats of two workers that each forwarded one 160 Mbit/s
/// flow from `a` into `b`'s 8 Mbit/s SFB queue (which drops).
fn router_stats() -> Stats {
    let text = r#"
[[interfaces]]
name = "a"
[[interfaces]]
name = "b"
[interfaces.egress]
rate_bps = 8_000_000
[interfaces.sfb]
seed = 1
[[wires]]
from = "a"
to = "b"
"#;
    let cfg = RouterConfig::from_toml_str(text, "test").unwrap();
    let mut workers = Vec::new();
    for (id, (chain, link)) in build_workers(&cfg, 2).unwrap().into_iter().enumerate() {
        let mut io = MemoryPorts::new(2);
        let f = frame(1000);
        for i in 0..300u64 {
            io.push(
                Timestamp::from_nanos(i * 50_000),
                0,
                LinkType::Ethernet,
                1000,
                &f,
            );
        }
        let mut w = Worker::new(id, chain, io, link);
        w.run(&AtomicBool::new(false), &mut |_, _, _| {});
        workers.push(w);
    }
    // Read once both have ended: the last to end drained the queue they
    // share.
    let all: Vec<Stats> = workers.iter().map(|w| Stats::of(w, None)).collect();
    let m = Stats::merged(&all);
    assert!(m.is_consistent(), "{m:?}");
    m
}

/// A plain HTTP/1.0 GET: (status, headers, body).
fn get(addr: SocketAddr, path: &str, accept: Option<&str>) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: {addr}\r\n{accept}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, head.to_string(), body.to_string())
}

/// Percent-encodes a query parameter.
fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `promtool check metrics` on `text`: (passed, what it printed).
fn promtool_check(promtool: &Path, text: &str) -> (bool, String) {
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

/// The server answers both formats, and 404 elsewhere; promtool passes
/// what a curl gets.
#[test]
fn served_exposition_passes_promtool() {
    let stats = router_stats();
    let server = MetricsServer::bind(([127, 0, 0, 1], 0).into()).unwrap();
    let addr = server.local_addr();
    let thread = server.spawn(stats.clone()).unwrap();

    let (status, head, open) = get(addr, "/metrics", Some("application/openmetrics-text"));
    assert_eq!(status, 200, "{head}");
    assert!(head.contains(metrics::OPENMETRICS_CONTENT_TYPE), "{head}");
    assert_eq!(open, metrics::encode(&stats));
    assert!(open.ends_with("# EOF\n"));

    let (status, head, text) = get(addr, "/metrics", None);
    assert_eq!(status, 200, "{head}");
    assert!(head.contains(metrics::TEXT_CONTENT_TYPE), "{head}");
    assert_eq!(text, metrics::to_prometheus_text(&open));

    let (status, _, _) = get(addr, "/", None);
    assert_eq!(status, 404);
    thread.stop();
    // The listener is closed with the thread.
    assert!(TcpStream::connect(addr).is_err() || get_fails(addr));

    let Some(promtool) = tool("served_exposition_passes_promtool", PROMTOOL) else {
        return;
    };
    let (ok, said) = promtool_check(&promtool, &text);
    assert!(ok, "promtool check metrics:\n{said}\n{text}");
}

/// A connection that is accepted but never answered (the listener's
/// backlog outliving the server) counts as closed.
fn get_fails(addr: SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return true;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let _ = s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n");
    let mut buf = [0u8; 16];
    !matches!(s.read(&mut buf), Ok(n) if n > 0)
}

/// Kills and reaps the child when dropped.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A free TCP port on 127.0.0.1 (free when asked).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Prometheus's answer to an instant query: the first result's value.
fn query(prom: SocketAddr, q: &str) -> Option<String> {
    let (status, _, body) = get(prom, &format!("/api/v1/query?query={}", urlencode(q)), None);
    if status != 200 {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    Some(v["data"]["result"][0]["value"][1].as_str()?.to_string())
}

/// A real Prometheus scrapes the served metrics every second; once the
/// target is up, a query of the largest drop reason's counter returns the
/// count the router reported.
#[test]
fn real_prometheus_scrapes_the_drop_counter() {
    const TEST: &str = "real_prometheus_scrapes_the_drop_counter";
    let Some(prometheus) = tool(TEST, PROMETHEUS) else {
        return;
    };
    let stats = router_stats();
    let (reason, want) = stats
        .pipeline
        .drops
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(r, n)| (r.clone(), *n))
        .expect("the SFB port drops");
    assert!(want > 0);
    let server = MetricsServer::bind(([127, 0, 0, 1], 0).into()).unwrap();
    let target = server.local_addr();
    let _thread = server.spawn(stats.clone()).unwrap();

    let dir = std::env::temp_dir().join(format!("bp-prometheus-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: bloomplane\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .unwrap();
    let prom: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    let child = Command::new(prometheus)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={prom}"))
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let child = Reaped(child);

    let q = format!("bloomplane_pipeline_dropped_total{{reason=\"{reason}\"}}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut up = None;
    let mut got = None;
    // The sojourn histogram: its count equals the copies the queue sent.
    let hq = "bloomplane_sojourn_latency_seconds_count";
    let hwant = stats.latency_buckets.sojourn.count;
    let mut hgot = None;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        if TcpStream::connect(prom).is_err() {
            continue;
        }
        up = query(prom, "up{job=\"bloomplane\"}");
        if up.as_deref() == Some("1") {
            got = query(prom, &q);
            hgot = query(prom, hq);
            if got.is_some() && hgot.is_some() {
                break;
            }
        }
    }
    drop(child);
    let log = std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        up.as_deref(),
        Some("1"),
        "target never up; prometheus said:\n{log}"
    );
    assert_eq!(
        got.as_deref(),
        Some(want.to_string().as_str()),
        "{q}; prometheus said:\n{log}"
    );
    assert!(hwant > 0);
    assert_eq!(
        hgot.as_deref(),
        Some(hwant.to_string().as_str()),
        "{hq}; prometheus said:\n{log}"
    );
    let _ = writeln!(
        std::io::stderr(),
        "{TEST}: prometheus answered {q} = {want} and {hq} = {hwant}, the router's counts"
    );
}
