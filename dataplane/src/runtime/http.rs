//! The telemetry listener's HTTP server: one thread, every connection
//! polled (mio), requests parsed by `httparse`, bounded whatever remote
//! hosts open.
//!
//! A listener that answers other routers must not grow with what a remote
//! host opens: a server with a thread per connection (what `/metrics`
//! had) spawned about 1,590 threads for 3,000 idle, half-sent requests.
//! Here:
//!
//! * **one thread** serves every connection: a connection is a socket and
//!   a buffer, never a thread;
//! * at most [`Limits::max_connections`] are open; when a new one arrives
//!   at the cap, the oldest connection still waiting for its request is
//!   closed to make room ("evicted"), so idle connections cannot keep an
//!   honest client out (a client sends its request as soon as it
//!   connects; an idle one is always older);
//! * a request head must arrive within [`Limits::head_timeout`] of the
//!   connection and be at most [`Limits::max_head`] bytes (else 431); an
//!   answer must be taken within [`Limits::write_timeout`];
//! * one request per connection (`Connection: close`), `GET` and `HEAD`
//!   only, no body read.
//!
//! Memory is at most the cap times a head's buffer plus the answers being
//! written. Handlers run on the server's thread, between polls: they must
//! be short (a scrape encodes the counters; a digest query tests a few
//! windows, and is rate-limited).

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};

/// The server's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once.
    pub max_connections: usize,
    /// Time from a connection's acceptance to the end of its request head.
    pub head_timeout: Duration,
    /// Time to write an answer.
    pub write_timeout: Duration,
    /// Bytes of a request head.
    pub max_head: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 256,
            head_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(10),
            max_head: 8192,
        }
    }
}

/// A parsed request.
#[derive(Debug)]
pub struct Request<'a> {
    /// `GET` or `HEAD`.
    pub method: &'a str,
    /// The path, without the query.
    pub path: &'a str,
    /// The query string (after `?`; empty when none).
    pub query: &'a str,
    /// The headers.
    pub headers: &'a [httparse::Header<'a>],
    /// The client.
    pub peer: SocketAddr,
}

impl Request<'_> {
    /// The value of header `name` (case-insensitive), when present and
    /// text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .and_then(|h| std::str::from_utf8(h.value).ok())
    }
}

/// An answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// `Content-Type`.
    pub content_type: String,
    /// Further headers.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// A plain-text answer.
    pub fn text(status: u16, body: impl Into<String>) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8".into(),
            headers: Vec::new(),
            body: body.into().into_bytes(),
        }
    }

    /// An answer with its content type.
    pub fn with_type(status: u16, content_type: &str, body: Vec<u8>) -> Response {
        Response {
            status,
            content_type: content_type.into(),
            headers: Vec::new(),
            body,
        }
    }

    /// The answer with one more header.
    pub fn header(mut self, name: &str, value: impl Into<String>) -> Response {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The bytes on the wire (no body for `HEAD`).
    fn encode(&self, head_only: bool) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.status,
            reason(self.status),
            self.content_type,
            self.body.len()
        )
        .into_bytes();
        for (k, v) in &self.headers {
            out.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        if !head_only {
            out.extend_from_slice(&self.body);
        }
        out
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

/// What answers requests (on the server's thread).
pub trait Handler: Send + 'static {
    /// The answer to `req`.
    fn handle(&mut self, req: &Request<'_>) -> Response;
}

/// The server's counters.
#[derive(Debug, Default)]
pub struct HttpCounters {
    /// Connections accepted.
    pub accepted: AtomicU64,
    /// Requests answered (any status).
    pub answered: AtomicU64,
    /// Connections closed at the cap to make room.
    pub evicted: AtomicU64,
    /// Connections closed for a late request head or answer.
    pub timed_out: AtomicU64,
    /// Connections open now.
    pub open: AtomicU64,
}

/// A bound listener, not yet serving.
#[derive(Debug)]
pub struct HttpListener {
    listener: TcpListener,
    addr: SocketAddr,
}

impl HttpListener {
    /// Listens on `addr` (port 0: any free port).
    ///
    /// # Errors
    /// The address cannot be bound.
    pub fn bind(addr: SocketAddr) -> io::Result<HttpListener> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        Ok(HttpListener { listener, addr })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves with `handler` on a thread named `name` until stopped.
    ///
    /// # Errors
    /// The poller or the thread cannot be made.
    pub fn serve<H: Handler>(
        self,
        name: &str,
        handler: H,
        limits: Limits,
    ) -> io::Result<ServerThread> {
        let poll = Poll::new()?;
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(HttpCounters::default());
        let mut server = Server {
            poll,
            listener: self.listener,
            conns: Vec::new(),
            free: Vec::new(),
            limits,
            handler,
            counters: counters.clone(),
        };
        server
            .poll
            .registry()
            .register(&mut server.listener, LISTENER, Interest::READABLE)?;
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || server.run(&flag))?;
        Ok(ServerThread {
            stop,
            handle: Some(handle),
            counters,
        })
    }
}

/// The serving thread; [`ServerThread::stop`] (or dropping it) stops it
/// within 100 ms and closes the listener and every connection.
#[derive(Debug)]
pub struct ServerThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    counters: Arc<HttpCounters>,
}

impl ServerThread {
    /// Stops the thread and waits for it.
    pub fn stop(mut self) {
        self.finish();
    }

    /// The server's counters.
    pub fn counters(&self) -> &HttpCounters {
        &self.counters
    }

    fn finish(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for ServerThread {
    fn drop(&mut self) {
        self.finish();
    }
}

const LISTENER: Token = Token(0);
/// How long a poll waits before the stop flag and deadlines are looked at.
const POLL: Duration = Duration::from_millis(100);

#[derive(Debug)]
enum State {
    /// Waiting for the request head (what came so far).
    Reading(Vec<u8>),
    /// Writing the answer from `at`.
    Writing { out: Vec<u8>, at: usize },
}

#[derive(Debug)]
struct Conn {
    stream: TcpStream,
    peer: SocketAddr,
    accepted: Instant,
    deadline: Instant,
    state: State,
}

struct Server<H> {
    poll: Poll,
    listener: TcpListener,
    /// Slot `i` is token `i + 1`.
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    limits: Limits,
    handler: H,
    counters: Arc<HttpCounters>,
}

impl<H: Handler> Server<H> {
    fn run(&mut self, stop: &AtomicBool) {
        let mut events = Events::with_capacity(256);
        while !stop.load(Ordering::SeqCst) {
            if let Err(e) = self.poll.poll(&mut events, Some(POLL)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    say!("dataplane: telemetry listener: {e}");
                    std::thread::sleep(POLL);
                }
                continue;
            }
            for ev in &events {
                match ev.token() {
                    LISTENER => self.accept(),
                    Token(t) => self.ready(t - 1),
                }
            }
            self.expire(Instant::now());
        }
    }

    fn open(&self) -> usize {
        self.conns.len() - self.free.len()
    }

    fn accept(&mut self) {
        loop {
            let (stream, peer) = match self.listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // Out of descriptors, say: the backlog waits for the next
                // readiness; what is open is still served.
                Err(_) => return,
            };
            self.counters.accepted.fetch_add(1, Ordering::Relaxed);
            if self.open() >= self.limits.max_connections && !self.evict_oldest_reader() {
                // Every slot is writing an answer: this one waits no more.
                drop(stream);
                continue;
            }
            let now = Instant::now();
            let slot = match self.free.pop() {
                Some(i) => i,
                None => {
                    self.conns.push(None);
                    self.conns.len() - 1
                }
            };
            let mut conn = Conn {
                stream,
                peer,
                accepted: now,
                deadline: now + self.limits.head_timeout,
                state: State::Reading(Vec::new()),
            };
            if self
                .poll
                .registry()
                .register(&mut conn.stream, Token(slot + 1), Interest::READABLE)
                .is_err()
            {
                self.free.push(slot);
                continue;
            }
            self.conns[slot] = Some(conn);
            self.counters
                .open
                .store(self.open() as u64, Ordering::Relaxed);
            // Data may have come with the handshake.
            self.ready(slot);
        }
    }

    /// Closes the oldest connection still reading its request; `false`
    /// when there is none.
    fn evict_oldest_reader(&mut self) -> bool {
        let oldest = self
            .conns
            .iter()
            .enumerate()
            .filter_map(|(i, c)| match c {
                Some(c) if matches!(c.state, State::Reading(_)) => Some((c.accepted, i)),
                _ => None,
            })
            .min();
        match oldest {
            Some((_, i)) => {
                self.close(i);
                self.counters.evicted.fetch_add(1, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    fn close(&mut self, slot: usize) {
        if let Some(mut c) = self.conns.get_mut(slot).and_then(Option::take) {
            let _ = self.poll.registry().deregister(&mut c.stream);
            let _ = c.stream.shutdown(Shutdown::Both);
            self.free.push(slot);
            self.counters
                .open
                .store(self.open() as u64, Ordering::Relaxed);
        }
    }

    fn expire(&mut self, now: Instant) {
        for i in 0..self.conns.len() {
            if self.conns[i].as_ref().is_some_and(|c| now >= c.deadline) {
                self.close(i);
                self.counters.timed_out.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Reads or writes what the connection in `slot` can.
    fn ready(&mut self, slot: usize) {
        let Some(Some(conn)) = self.conns.get_mut(slot) else {
            return;
        };
        if let State::Reading(buf) = &mut conn.state {
            let mut chunk = [0u8; 2048];
            let answer = loop {
                match conn.stream.read(&mut chunk) {
                    Ok(0) => break Err(()),
                    Ok(n) => {
                        buf.extend_from_slice(&chunk[..n]);
                        if let Some(out) = respond(&mut self.handler, buf, conn.peer, &self.limits)
                        {
                            break Ok(Some(out));
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break Ok(None),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => break Err(()),
                }
            };
            match answer {
                Err(()) => return self.close(slot),
                Ok(None) => return,
                Ok(Some(out)) => {
                    self.counters.answered.fetch_add(1, Ordering::Relaxed);
                    conn.state = State::Writing { out, at: 0 };
                    conn.deadline = Instant::now() + self.limits.write_timeout;
                    if self
                        .poll
                        .registry()
                        .reregister(&mut conn.stream, Token(slot + 1), Interest::WRITABLE)
                        .is_err()
                    {
                        return self.close(slot);
                    }
                }
            }
        }
        if let State::Writing { out, at } = &mut conn.state {
            while *at < out.len() {
                match conn.stream.write(&out[*at..]) {
                    Ok(0) => return self.close(slot),
                    Ok(n) => *at += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return self.close(slot),
                }
            }
            self.close(slot);
        }
    }
}

/// The answer's bytes once `buf` holds a whole request head (or is bad
/// or too long); `None` while it is partial.
fn respond<H: Handler>(
    handler: &mut H,
    buf: &[u8],
    peer: SocketAddr,
    limits: &Limits,
) -> Option<Vec<u8>> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    let status = req.parse(buf);
    let too_long = || {
        Some(
            Response::text(
                431,
                format!(
                    "request head over {} bytes or 32 headers\n",
                    limits.max_head
                ),
            )
            .encode(false),
        )
    };
    match status {
        Ok(httparse::Status::Partial) if buf.len() > limits.max_head => too_long(),
        Ok(httparse::Status::Partial) => None,
        Ok(httparse::Status::Complete(n)) if n > limits.max_head => too_long(),
        Err(httparse::Error::TooManyHeaders) => too_long(),
        Err(e) => Some(Response::text(400, format!("bad request: {e}\n")).encode(false)),
        Ok(httparse::Status::Complete(_)) => {
            let method = req.method.unwrap_or("");
            let target = req.path.unwrap_or("");
            let (path, query) = target.split_once('?').unwrap_or((target, ""));
            let head = method == "HEAD";
            if method != "GET" && !head {
                return Some(Response::text(405, "method not allowed\n").encode(false));
            }
            let r = Request {
                method,
                path,
                query,
                headers: req.headers,
                peer,
            };
            Some(handler.handle(&r).encode(head))
        }
    }
}
