//! Where answers come from: a router's `GET /digest` (over TCP, from a
//! network namespace when asked), windows kept on disk, or rings in
//! memory (tests, simulations).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use dataplane::stage::digest::query::query_string;
use dataplane::stage::digest::{Answer, DigestQuery, Digests, store};

use super::topology::{Ask, Topology};

/// How long a router may take to answer.
pub const TIMEOUT: Duration = Duration::from_secs(5);
/// The most bytes of an answer read.
const MAX_ANSWER: u64 = 16 << 20;

/// The question as sent: the IP datagram and the time range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    /// The IP datagram from its header, at least through the first 8
    /// bytes of payload.
    pub ip: Vec<u8>,
    /// When the packet was seen, Unix ns (`None`: every window).
    pub at_unix_ns: Option<u64>,
    /// Half-width of the range searched, ms (`None`: the router's default).
    pub span_ms: Option<u64>,
}

impl Question {
    /// The query string of `GET /digest`.
    pub fn query_string(&self) -> String {
        query_string(&self.ip, self.at_unix_ns, self.span_ms)
    }
}

/// Something that answers for routers by name.
pub trait Source {
    /// `router`'s answer to `q`.
    ///
    /// # Errors
    /// The router cannot be reached or refuses (the message says why).
    fn ask(&mut self, router: &str, q: &Question) -> Result<Answer>;
}

/// Answers from each router as the topology says: over HTTP, or from kept
/// windows (read once, on first use).
#[derive(Debug)]
pub struct TopologySource<'a> {
    topology: &'a Topology,
    kept: BTreeMap<String, Digests>,
}

impl<'a> TopologySource<'a> {
    /// Asks the routers of `topology`.
    pub fn new(topology: &'a Topology) -> Self {
        TopologySource {
            topology,
            kept: BTreeMap::new(),
        }
    }
}

impl Source for TopologySource<'_> {
    fn ask(&mut self, router: &str, q: &Question) -> Result<Answer> {
        let r = self
            .topology
            .router(router)
            .ok_or_else(|| anyhow!("no router \"{router}\" in the topology"))?;
        match &r.ask {
            Ask::Http { addr, netns } => http_ask(*addr, netns.as_deref(), &q.query_string()),
            Ask::Kept(dir) => {
                if !self.kept.contains_key(router) {
                    let d = store::load(dir).map_err(|e| anyhow!("{e}"))?;
                    self.kept.insert(router.to_string(), d);
                }
                let d = &self.kept[router];
                let query = DigestQuery::parse(&q.query_string()).map_err(|e| anyhow!("{e}"))?;
                Ok(d.answer(&query))
            }
        }
    }
}

/// Answers from rings in memory, by router name (the same code a router
/// answers with).
#[derive(Debug, Default)]
pub struct MemorySource {
    /// Each router's rings and port names.
    pub routers: BTreeMap<String, Digests>,
}

impl Source for MemorySource {
    fn ask(&mut self, router: &str, q: &Question) -> Result<Answer> {
        let d = self
            .routers
            .get(router)
            .ok_or_else(|| anyhow!("no router \"{router}\""))?;
        let query = DigestQuery::parse(&q.query_string()).map_err(|e| anyhow!("{e}"))?;
        Ok(d.answer(&query))
    }
}

/// `GET /digest?query` at `addr`, from inside `netns` when given; the
/// answer's JSON.
///
/// # Errors
/// Unreachable, no answer in time, or a status other than 200 (with the
/// router's reason).
pub fn http_ask(addr: SocketAddr, netns: Option<&str>, query: &str) -> Result<Answer> {
    let request =
        format!("GET /digest?{query} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let raw = match netns {
        None => exchange(addr, request.as_bytes()),
        Some(ns) => {
            let ns = ns.to_string();
            std::thread::spawn(move || {
                crate::live::enter_netns(&ns)?;
                exchange(addr, request.as_bytes())
            })
            .join()
            .map_err(|_| anyhow!("the query thread panicked"))?
        }
    }
    .with_context(|| format!("{addr}"))?;
    let (status, body) = parse_response(&raw).with_context(|| format!("{addr}: bad answer"))?;
    if status != 200 {
        bail!("{addr}: {status}: {}", String::from_utf8_lossy(body).trim());
    }
    serde_json::from_slice(body).with_context(|| format!("{addr}: the answer is not an answer"))
}

/// Sends `request` and reads until the router closes.
fn exchange(addr: SocketAddr, request: &[u8]) -> Result<Vec<u8>> {
    let mut s = TcpStream::connect_timeout(&addr, TIMEOUT).context("cannot connect")?;
    s.set_read_timeout(Some(TIMEOUT))?;
    s.set_write_timeout(Some(TIMEOUT))?;
    s.write_all(request).context("cannot send")?;
    let mut raw = Vec::new();
    s.take(MAX_ANSWER)
        .read_to_end(&mut raw)
        .context("no answer")?;
    Ok(raw)
}

/// The status and body of an HTTP response.
pub fn parse_response(raw: &[u8]) -> Result<(u16, &[u8])> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut r = httparse::Response::new(&mut headers);
    match r.parse(raw)? {
        httparse::Status::Complete(n) => Ok((r.code.unwrap_or(0), &raw[n..])),
        httparse::Status::Partial => bail!("cut short ({} bytes)", raw.len()),
    }
}
