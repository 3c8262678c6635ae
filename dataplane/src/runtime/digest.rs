//! `GET /digest` on the telemetry listener: the router's answers about the
//! packets it forwarded ([`crate::stage::digest::query`]), for its
//! configured clients only.
//!
//! In this order, so that a host that may not ask costs nothing and a
//! flood of bad questions is held to the rate:
//!
//! 1. the client's address must be in `digest.query_clients`, else **403**;
//! 2. a token bucket of `digest.query_rate` queries per second
//!    (`digest.query_burst` back to back), over all clients, else **429**
//!    with `Retry-After: 1`;
//! 3. the query must parse, else **400** with the parameter at fault;
//! 4. **200** with the [`Answer`](crate::stage::digest::Answer) as JSON.
//!
//! An answer locks each worker's ring while it tests the windows searched
//! (a few microseconds per window); the rate bounds what queries can take
//! from the workers. The counters ([`QueryCounters`]) are exported as
//! `bloomplane_digest_queries_total{result}`.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::http::{Request, Response};
use crate::clock::MonotonicClock;
use crate::config::IpNet;
use crate::stage::digest::{DigestQuery, Digests};
use crate::stage::forward::TokenBucket;

/// Queries by outcome.
#[derive(Debug, Default)]
pub struct QueryCounters {
    /// Answered (200).
    pub answered: AtomicU64,
    /// From an address not listed (403).
    pub refused: AtomicU64,
    /// Over the rate (429).
    pub rate_limited: AtomicU64,
    /// That did not parse (400).
    pub malformed: AtomicU64,
}

/// A snapshot of [`QueryCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QueryCounts {
    /// Answered (200).
    pub answered: u64,
    /// From an address not listed (403).
    pub refused: u64,
    /// Over the rate (429).
    pub rate_limited: u64,
    /// That did not parse (400).
    pub malformed: u64,
}

impl QueryCounters {
    /// The counts now.
    pub fn snapshot(&self) -> QueryCounts {
        QueryCounts {
            answered: self.answered.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            rate_limited: self.rate_limited.load(Ordering::Relaxed),
            malformed: self.malformed.load(Ordering::Relaxed),
        }
    }
}

/// The `/digest` route (see the module docs).
#[derive(Debug)]
pub struct DigestRoute {
    digests: Digests,
    clients: Vec<IpNet>,
    bucket: TokenBucket,
    clock: MonotonicClock,
    counters: Arc<QueryCounters>,
}

/// An IPv4 address in IPv6 form (`::ffff:a.b.c.d`, as a dual-stack
/// listener sees an IPv4 client) as the IPv4 address it is.
fn plain(a: IpAddr) -> IpAddr {
    match a {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(a, IpAddr::V4),
        v4 => v4,
    }
}

impl DigestRoute {
    /// Answers from `digests` to `clients`, at most `rate` queries per
    /// second (`burst` back to back).
    pub fn new(digests: Digests, clients: Vec<IpNet>, rate: u32, burst: u32) -> DigestRoute {
        DigestRoute {
            digests,
            clients,
            // Full from the start.
            bucket: TokenBucket::new(rate, burst),
            clock: MonotonicClock::new(),
            counters: Arc::new(QueryCounters::default()),
        }
    }

    /// The counters, shared with whoever reports them.
    pub fn counters(&self) -> Arc<QueryCounters> {
        self.counters.clone()
    }

    /// Whether `addr` may ask.
    pub fn allows(&self, addr: IpAddr) -> bool {
        let a = plain(addr);
        self.clients.iter().any(|n| n.contains(a))
    }

    /// The answer to one request.
    pub fn handle(&mut self, rq: &Request<'_>) -> Response {
        let c = &self.counters;
        if !self.allows(rq.peer.ip()) {
            c.refused.fetch_add(1, Ordering::Relaxed);
            return Response::text(
                403,
                format!(
                    "forbidden: {} is not in digest.query_clients\n",
                    plain(rq.peer.ip())
                ),
            );
        }
        if !self.bucket.take(self.clock.now()) {
            c.rate_limited.fetch_add(1, Ordering::Relaxed);
            return Response::text(429, "too many queries: digest.query_rate\n")
                .header("Retry-After", "1");
        }
        match DigestQuery::parse(rq.query) {
            Err(e) => {
                c.malformed.fetch_add(1, Ordering::Relaxed);
                Response::text(400, format!("bad query: {e}\n"))
            }
            Ok(q) => {
                c.answered.fetch_add(1, Ordering::Relaxed);
                let a = self.digests.answer(&q);
                match serde_json::to_vec(&a) {
                    Ok(body) => Response::with_type(200, "application/json", body),
                    Err(e) => Response::text(503, format!("cannot encode the answer: {e}\n")),
                }
            }
        }
    }
}
