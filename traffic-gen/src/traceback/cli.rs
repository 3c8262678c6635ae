//! The `traceback` subcommand's command line.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use super::packet::Packet;
use super::source::TopologySource;
use super::topology::{Ask, Topology};
use super::trace;
use crate::Usage;

/// `traffic-gen traceback`'s arguments.
#[derive(Debug, Args)]
pub struct TracebackArgs {
    /// The routers, their query addresses (or kept windows) and links (a
    /// TOML file; see docs/traceback.md).
    #[arg(long, value_name = "FILE", requires = "from", conflicts_with_all = ["query", "digests"])]
    pub topology: Option<PathBuf>,
    /// The router nearest the victim, where the walk starts (a name in
    /// --topology).
    #[arg(long, value_name = "ROUTER")]
    pub from: Option<String>,
    /// Ask one router only: its telemetry listener (`GET /digest`).
    #[arg(long, value_name = "ADDR:PORT", conflicts_with = "digests")]
    pub query: Option<std::net::SocketAddr>,
    /// With --query: connect from inside this network namespace (`ip netns`
    /// name; needs root).
    #[arg(long, value_name = "NAME", requires = "query")]
    pub netns: Option<String>,
    /// Ask one router's windows kept by `traffic-gen replay --digests DIR`.
    #[arg(long, value_name = "DIR")]
    pub digests: Option<PathBuf>,
    /// The packet: a capture holding it ...
    #[arg(long, value_name = "FILE", requires = "frame", conflicts_with = "hex")]
    pub capture: Option<PathBuf>,
    /// ... and its frame number (1 is the first, as Wireshark counts).
    #[arg(long, value_name = "N", requires = "capture")]
    pub frame: Option<u64>,
    /// The packet: its IP datagram in hexadecimal, from the IP header, at
    /// least through the first 8 bytes of payload.
    #[arg(long, value_name = "HEX")]
    pub hex: Option<String>,
    /// When the packet was seen: seconds since the Unix epoch
    /// (`1712345678.25`) or RFC 3339 (`2024-04-05T19:34:38.25Z`); default:
    /// the capture's time of the frame.
    #[arg(long, value_name = "TIME")]
    pub time: Option<String>,
    /// Search the windows within this many ms of the time seen (default:
    /// each router's, 1000).
    #[arg(long, value_name = "MS")]
    pub span_ms: Option<u64>,
    /// Search every window kept, whatever the time.
    #[arg(long)]
    pub all_windows: bool,
    /// Also write the result as JSON to FILE (`-`: standard output, and
    /// no text).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// Parses `--time`.
fn parse_time(s: &str) -> Result<u64> {
    if let Some(ns) = dataplane::stage::digest::query::parse_seconds(s) {
        return Ok(ns);
    }
    let t = humantime::parse_rfc3339_weak(s).map_err(|e| {
        Usage(format!(
            "--time: \"{s}\" is neither seconds since the Unix epoch nor RFC 3339 ({e})"
        ))
    })?;
    let d = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| Usage(format!("--time: \"{s}\" is before 1970")))?;
    u64::try_from(d.as_nanos()).map_err(|_| Usage("--time: too far ahead".into()).into())
}

/// Runs `traffic-gen traceback`.
///
/// # Errors
/// Bad arguments, an unreadable packet or topology, or a first router
/// that cannot be asked.
pub fn run(a: &TracebackArgs) -> Result<()> {
    let mut packet = match (&a.capture, a.frame, &a.hex) {
        (Some(c), Some(n), None) => Packet::from_capture(c, n)?,
        (None, None, Some(h)) => Packet::from_hex(h, None)?,
        _ => {
            return Err(
                Usage("the packet: give --capture FILE --frame N, or --hex HEX".into()).into(),
            );
        }
    };
    if let Some(t) = &a.time {
        packet.seen_unix_ns = Some(parse_time(t)?);
    }
    if a.all_windows {
        packet.seen_unix_ns = None;
    }
    let (topology, start) = match (&a.topology, &a.query, &a.digests) {
        (Some(f), None, None) => {
            let t = Topology::load(f)?;
            let start = a
                .from
                .clone()
                .ok_or_else(|| Usage("--topology needs --from ROUTER".into()))?;
            (t, start)
        }
        (None, Some(addr), None) => (
            Topology::single(
                "router",
                Ask::Http {
                    addr: *addr,
                    netns: a.netns.clone(),
                },
            ),
            "router".to_string(),
        ),
        (None, None, Some(dir)) => (
            Topology::single("router", Ask::Kept(dir.clone())),
            "router".to_string(),
        ),
        _ => {
            return Err(Usage(
                "the routers: give --topology FILE --from ROUTER, --query ADDR or --digests DIR"
                    .into(),
            )
            .into());
        }
    };
    let mut source = TopologySource::new(&topology);
    let t = trace(&topology, &mut source, &start, &packet, a.span_ms)?;
    let stdout_json = a.json.as_deref().is_some_and(|p| p.as_os_str() == "-");
    if !stdout_json {
        let mut out = std::io::stdout().lock();
        out.write_all(t.render().as_bytes())?;
    }
    if let Some(p) = &a.json {
        let text = serde_json::to_string_pretty(&t)? + "\n";
        if stdout_json {
            std::io::stdout().lock().write_all(text.as_bytes())?;
        } else {
            std::fs::write(p, text).with_context(|| format!("--json {}", p.display()))?;
        }
    }
    Ok(())
}
