//! The router's configuration: one TOML file.
//!
//! [`RouterConfig::load`] reads a file, [`RouterConfig::from_toml_str`]
//! parses text. Both deserialize with the key path tracked
//! (`serde_path_to_error`) and then run a validation pass over the whole
//! file, so every error names the key and the reason:
//!
//! ```text
//! router.toml: interfaces[1].name: duplicate interface "veth1" (also interfaces[0])
//! router.toml: interfaces[0].sfb.levels: 0 is outside 1..=16
//! router.toml: wires[0].to: unknown interface "eth9"
//! ```
//!
//! The sections (see `dataplane/examples/router.toml`, annotated):
//!
//! * `[workers]` — how many worker threads and the cores they are pinned to;
//! * `[[interfaces]]` — one per port, in port order (port `i` is the `i`-th
//!   table): socket options, static multicast groups, and the port's egress
//!   queue (`[interfaces.egress]` rate and `[interfaces.sfb]`, the
//!   [`SfbConfig`] of `stage/sfb/config.rs`);
//! * `[[wires]]` — unicast forwarding: what arrives on `from` leaves by
//!   `to` (and back with `bidirectional = true`);
//! * `[heavy]` — heavy-flow detection ([`HeavyConfig`]) and where its JSON
//!   lines go; absent means the stage is off;
//! * `[icarus]` — loop detection ([`IcarusConfig`]): node id, filter width,
//!   edge interfaces; absent means the stage is off;
//! * `[multicast]` — the multicast stage's [`MulticastConfig`] (filter
//!   sizing, membership interval, ...) except its `interfaces`, which come
//!   from `interfaces[i].multicast_groups`. The stage is on when the table is
//!   present or any interface lists a group; off, multicast follows the wires.
//!
//! * routed mode (`config/l3.rs`): `interfaces[i].addresses` (connected
//!   routes; a port with addresses is routed, one without is a wire port),
//!   `mac` and `mtu`; `[[routes]]` (static, via a gateway or out of an
//!   interface); `[[neighbours]]` (static ARP / ND entries); `[router]`
//!   (ICMP error rate, neighbour resolution);
//!
//! * `[io]` — the live port backend: `backend = "pnet"` (default) or
//!   `"ring"`, and `[io.ring]`'s ring sizes ([`RingConfig`]).
//!
//! Validation only looks at the file: whether an interface exists, is up,
//! and may be opened is checked when the router starts.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::Path;

use serde::Deserialize;

use crate::io::port::PortSettings;
use crate::io::ring::RingConfig;
use crate::io::xdp::XdpConfig;
use crate::packet::PortSet;
use crate::stage::egress::EgressConfig;
use crate::stage::forward::{ForwardConfig, ForwardPort, RouteVia, StaticRoute};
use crate::stage::heavy::{HeavyConfig, Threshold};
use crate::stage::icarus::{FilterParams, IcarusConfig, LoopAction, default_k};
use crate::stage::multicast::{self, MulticastConfig, MulticastStage};
use crate::stage::sfb::SfbConfig;
use crate::wire::icarus::FilterWidth;

mod digest;
mod l3;
mod peering;

pub use digest::{DigestSection, parse_client};
pub use l3::{
    DEFAULT_MTU, InterfaceAddr, IpNet, MAX_HOLD, MAX_MTU, MIN_MTU, MIN_MTU_V6, MacAddr,
    NeighbourConfig, RouteConfig, RouterSection,
};
pub use peering::{FlowsSection, ListedFlow, PeerSection, PeeringSection};

/// Linux's `IFNAMSIZ` less the terminating NUL.
pub const MAX_IFNAME_LEN: usize = 15;

/// The most interfaces (ports are bits of a [`PortSet`]).
pub const MAX_INTERFACES: usize = PortSet::MAX_PORTS as usize;

/// The most worker threads.
pub const MAX_WORKERS: usize = 256;

/// The lowest shaped rate, bit/s: below it a full frame takes seconds to
/// leave and the queue drops nearly everything (0 means unshaped).
pub const MIN_RATE_BPS: u64 = 8_000;

/// The largest Ethernet frame without tags (a shaper's burst below it
/// sends such frames one at a time, each borrowing the whole bucket).
pub const ETHERNET_MAX_FRAME: u64 = 1514;

/// Most flows the heavy-flow stage may track per worker.
pub const MAX_HEAVY_CAPACITY: usize = 1 << 24;

/// The default socket receive buffer (`SO_RCVBUF`), 4 MiB.
pub const DEFAULT_RECV_BUFFER: u64 = 4 << 20;

/// The smallest and largest receive buffer accepted.
pub const RECV_BUFFER_RANGE: std::ops::RangeInclusive<u64> = (64 << 10)..=(1 << 30);

/// The largest count-min row width accepted from the file (2^24 counters,
/// 64 MiB per row): beyond it a typo costs gigabytes.
pub const MAX_LOG2_WIDTH: u32 = 24;

/// A configuration error: where (file, line, key) and why, written as
/// compilers write them: `router.toml:12: interfaces[1].name: reason`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}{}: {}{reason}", line_suffix(*.line), key_prefix(.key))]
pub struct ConfigError {
    /// The file (or `<string>`).
    pub origin: String,
    /// The line (1-based) of the key, or of the nearest table above it
    /// that the file writes; `None` where the file has no such line.
    pub line: Option<usize>,
    /// The key path, e.g. `interfaces[1].name`; empty for a syntax or I/O
    /// error that has no key.
    pub key: String,
    /// What is wrong.
    pub reason: String,
}

/// Every error of one configuration file, in line order: validation
/// reports them all at once (a file that is not TOML of the right shape
/// stops at its first error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    /// The first error (in line order).
    pub fn first(&self) -> Option<&ConfigError> {
        self.0.first()
    }
}

impl std::fmt::Display for ConfigErrors {
    /// One error per line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

fn line_suffix(line: Option<usize>) -> String {
    line.map(|l| format!(":{l}")).unwrap_or_default()
}

fn key_prefix(key: &str) -> String {
    if key.is_empty() {
        String::new()
    } else {
        format!("{key}: ")
    }
}

/// The 1-based line of byte `offset` of `text`.
fn line_at(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The line of `key` (`interfaces[1].egress.rate_bps`) in `doc`: the line
/// of its value where the file writes it, else of the nearest enclosing
/// table that it writes (a key left to its default has no line of its own).
fn line_of_key(doc: &toml_edit::ImDocument<&str>, text: &str, key: &str) -> Option<usize> {
    let mut item = doc.as_item();
    let mut best = None;
    for part in key.split('.') {
        let (name, indices) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        let Some(next) = item.get(name) else { break };
        item = next;
        best = item.span().or(best);
        let mut ok = true;
        for idx in indices
            .split(['[', ']'])
            .filter(|s| !s.is_empty())
            .map(str::parse::<usize>)
        {
            match idx.ok().and_then(|i| item.get(i)) {
                Some(next) => {
                    item = next;
                    best = item.span().or(best);
                }
                None => {
                    ok = false;
                    break;
                }
            }
        }
        if !ok {
            break;
        }
    }
    best.map(|span| line_at(text, span.start))
}

/// The dotted key that line `line` of `text` assigns (`capacity = ...`
/// under `[heavy]` gives `heavy.capacity`; under the second
/// `[[interfaces]]`, `interfaces[1]....`), for errors the TOML parser
/// raises before any key path exists.
fn key_on_line(text: &str, line: usize) -> Option<String> {
    let mut table = String::new();
    let mut arrays: BTreeMap<String, usize> = BTreeMap::new();
    for (n, raw) in text.lines().enumerate() {
        let l = raw.trim();
        if n + 1 == line {
            let (k, _) = l.split_once('=')?;
            let k = k.trim().trim_matches('"');
            return Some(if table.is_empty() {
                k.to_string()
            } else {
                format!("{table}.{k}")
            });
        }
        if let Some(name) = l.strip_prefix("[[").and_then(|r| r.split_once("]]")) {
            let name = name.0.trim().to_string();
            let i = arrays
                .entry(name.clone())
                .and_modify(|i| *i += 1)
                .or_insert(0);
            table = format!("{name}[{i}]");
        } else if let Some(name) = l.strip_prefix('[').and_then(|r| r.split_once(']')) {
            let name = name.0.trim();
            // `[interfaces.sfb]` continues the last `[[interfaces]]`.
            table = match name.split_once('.') {
                Some((head, rest)) if arrays.contains_key(head) => {
                    format!("{head}[{}].{rest}", arrays[head])
                }
                _ => name.to_string(),
            };
        }
    }
    None
}

/// A socket receive buffer above this is warned about (256 MiB).
pub const RECV_BUFFER_WARN: u64 = 256 << 20;

/// The row width (log2) the sketch has for `share`: `log2_width`, or its
/// default for the share.
fn sketch_width(share: f64, log2_width: Option<u32>) -> u32 {
    log2_width.unwrap_or_else(|| {
        crate::stage::heavy::HeavyConfig::default_log2_width(
            crate::stage::heavy::Threshold::ByteShare(share),
        )
    })
}

/// A heavy-flow share the sketch cannot tell from its own load: with 2^w
/// cells a row (`log2_width`, or its default for the share), an average
/// cell holds 1/2^w of the epoch's bytes; a threshold below that is
/// reached by a typical flow's estimate, so every flow would be reported
/// (memory, reports and epoch resets grow and tell nothing).
pub fn share_problem(share: f64, log2_width: Option<u32>) -> Option<String> {
    let w = sketch_width(share, log2_width);
    let least = 1.0 / f64::from(1u32 << w.min(31));
    (share < least).then(|| {
        let best = 1.0 / f64::from(1u32 << MAX_LOG2_WIDTH);
        let raise = if w < MAX_LOG2_WIDTH {
            format!(" (or raise heavy.log2_width, up to {MAX_LOG2_WIDTH}: {best:.1e})")
        } else {
            String::new()
        };
        format!(
            "{share:e} is below what the sketch can count: with 2^{w} cells a row an average cell holds {least:.1e} of the epoch's bytes, so every flow would reach the threshold; at least {least:.1e}{raise}"
        )
    })
}

/// The `[heavy]` settings that work but probably should not.
fn heavy_warnings(h: &HeavySection, w: &mut Vec<String>) {
    let c = h.stage_config();
    if let ThresholdConfig::Share(s) = h.threshold
        && s > 0.0
        && s <= 1.0
        && share_problem(s, h.log2_width).is_none()
    {
        let cells = 1u64 << sketch_width(s, h.log2_width).min(63);
        if s * (cells as f64) < crate::stage::heavy::CELLS_PER_SHARE {
            w.push(format!(
                "heavy.threshold.share: {s} with 2^{} cells a row: a flow's estimate may be off by a good part of the threshold (the default width gives {} cells per share); raise heavy.log2_width",
                c.log2_width,
                crate::stage::heavy::CELLS_PER_SHARE
            ));
        }
        let heavy_max = (1.0 / s).floor();
        if heavy_max > c.capacity as f64 {
            w.push(format!(
                "heavy.threshold.share: up to {heavy_max:.0} flows can each reach {s} of an epoch's bytes, more than the {} the flow memory holds per worker (heavy.capacity): the rest count as overflow, unreported",
                c.capacity
            ));
        }
    }
    if let Some(ms) = h.epoch_ms.filter(|&ms| ms > 0) {
        let sketch = (c.rows as u64) << c.log2_width << 3;
        let per_s = sketch.saturating_mul(1000) / ms;
        if per_s > 1 << 30 {
            w.push(format!(
                "heavy.epoch_ms: the sketch ({} MiB: {} rows of 2^{} cells) is cleared every {ms} ms epoch, {} MiB a second of traffic time: raise epoch_ms or lower log2_width",
                sketch >> 20,
                c.rows,
                c.log2_width,
                per_s >> 20
            ));
        }
    }
}

/// The machine's memory (`MemTotal` of `/proc/meminfo`), bytes.
fn mem_total() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// The file's key for a multicast stage key: the stage's per-interface
/// settings are the interfaces' own in the file.
fn file_key(stage_key: &str) -> String {
    let Some(rest) = stage_key.strip_prefix("multicast.interfaces[") else {
        return stage_key.to_string();
    };
    match rest.split_once(']') {
        Some((i, tail)) => {
            let tail = tail
                .strip_prefix(".static_groups")
                .map_or_else(|| tail.to_string(), |t| format!(".multicast_groups{t}"));
            format!("interfaces[{i}]{tail}")
        }
        None => stage_key.to_string(),
    }
}

/// `0..=1, 4` style list of `cores`.
fn describe_cores(cores: &BTreeSet<usize>) -> String {
    if cores.is_empty() {
        return "none could be read".into();
    }
    let mut parts = Vec::new();
    let mut it = cores.iter().copied().peekable();
    while let Some(start) = it.next() {
        let mut end = start;
        while it.peek() == Some(&(end + 1)) {
            end += 1;
            it.next();
        }
        parts.push(if end == start {
            start.to_string()
        } else {
            format!("{start}..={end}")
        });
    }
    format!("usable: {}", parts.join(", "))
}

/// Whether `path` can be opened for writing (created if absent) without
/// creating it: an existing file must be writable, else its directory.
fn writable(path: &Path) -> Result<(), String> {
    use std::os::unix::ffi::OsStrExt;
    let access = |p: &Path, mode: libc::c_int| -> bool {
        let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
            return false;
        };
        // SAFETY: `c` is a NUL-terminated path that lives across the call.
        unsafe { libc::access(c.as_ptr(), mode) == 0 }
    };
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Err("is a directory".into()),
        Ok(_) if access(path, libc::W_OK) => Ok(()),
        Ok(_) => Err("cannot be written (permission denied)".into()),
        Err(_) => {
            let dir = match path.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            match std::fs::metadata(dir) {
                Ok(m) if !m.is_dir() => Err(format!("{} is not a directory", dir.display())),
                Ok(_) if access(dir, libc::W_OK | libc::X_OK) => Ok(()),
                Ok(_) => Err(format!(
                    "cannot create a file in {} (permission denied)",
                    dir.display()
                )),
                Err(e) => Err(format!("{}: {e}", dir.display())),
            }
        }
    }
}

/// Worker threads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkersConfig {
    /// Number of workers; defaults to the number of `cores`, or 1.
    pub count: Option<usize>,
    /// Core ids to pin worker `i` to (`cores[i]`); empty: not pinned.
    pub cores: Vec<usize>,
}

impl WorkersConfig {
    /// The number of workers.
    pub fn resolved_count(&self) -> usize {
        self.count.unwrap_or(self.cores.len().max(1))
    }
}

fn default_true() -> bool {
    true
}

fn default_recv_buffer() -> u64 {
    DEFAULT_RECV_BUFFER
}

/// One interface (one port).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InterfaceConfig {
    /// The Linux interface name.
    pub name: String,
    /// Receive frames for every MAC address (default true: a router port).
    #[serde(default = "default_true")]
    pub promiscuous: bool,
    /// Socket receive buffer in bytes (`SO_RCVBUFFORCE`), default 4 MiB.
    #[serde(default = "default_recv_buffer")]
    pub recv_buffer_bytes: u64,
    /// Multicast groups delivered out of this interface (static joins).
    #[serde(default)]
    pub multicast_groups: Vec<IpAddr>,
    /// The egress shaper (needs `sfb`): rate, burst, limit.
    #[serde(default)]
    pub egress: Option<EgressConfig>,
    /// SFB on this port's egress queue (the live router holds the frames
    /// in it and sends them at the shaper's pace); absent: no queue, frames
    /// leave as they come.
    #[serde(default)]
    pub sfb: Option<SfbConfig>,
    /// The router's addresses on this port, with their connected prefix
    /// lengths (`"10.1.0.1/24"`); any makes the port routed.
    #[serde(default)]
    pub addresses: Vec<InterfaceAddr>,
    /// The router's MAC on this port (live default: the interface's;
    /// replay default: [`MacAddr::default_for_port`]).
    #[serde(default)]
    pub mac: Option<MacAddr>,
    /// The port's IP MTU (live default: the interface's; replay default
    /// [`DEFAULT_MTU`]).
    #[serde(default)]
    pub mtu: Option<u32>,
}

impl InterfaceConfig {
    /// Whether the port is routed (it has addresses).
    pub fn is_routed(&self) -> bool {
        !self.addresses.is_empty()
    }

    /// What a live port backend needs to open this interface.
    pub fn port_settings(&self) -> PortSettings {
        PortSettings {
            name: self.name.clone(),
            promiscuous: self.promiscuous,
            recv_buffer_bytes: self.recv_buffer_bytes,
            routed: self.is_routed(),
        }
    }
}

/// A port's egress queue: SFB in front of a token-bucket shaped FIFO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueConfig {
    /// The port.
    pub port: u8,
    /// SFB.
    pub sfb: SfbConfig,
    /// The shaper and the queue's packet limit.
    pub egress: EgressConfig,
}

/// A unicast forwarding rule.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireConfig {
    /// Ingress interface.
    pub from: String,
    /// Egress interface.
    pub to: String,
    /// Also forward from `to` to `from`.
    #[serde(default)]
    pub bidirectional: bool,
}

/// The heavy-flow threshold as written in the file:
/// `{ share = 0.01 }`, `{ bytes = 1000000 }` or `{ packets = 1000 }`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ThresholdConfig {
    /// A share (0, 1] of the epoch's bytes.
    Share(f64),
    /// Bytes per epoch.
    Bytes(u64),
    /// Packets per epoch.
    Packets(u64),
}

impl From<ThresholdConfig> for Threshold {
    fn from(t: ThresholdConfig) -> Threshold {
        match t {
            ThresholdConfig::Share(s) => Threshold::ByteShare(s),
            ThresholdConfig::Bytes(b) => Threshold::Bytes(b),
            ThresholdConfig::Packets(p) => Threshold::Packets(p),
        }
    }
}

/// `[heavy]`: the heavy-flow stage. Missing keys take
/// [`HeavyConfig::default`]'s values.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HeavySection {
    /// When a flow is heavy.
    pub threshold: ThresholdConfig,
    /// Epoch length in ms; absent: one epoch for the whole run.
    pub epoch_ms: Option<u64>,
    /// Rows of the sketch.
    pub rows: usize,
    /// log2 of the sketch's row width (each cell holds a bytes and a
    /// packets counter: 8 bytes); absent: from the threshold
    /// ([`HeavyConfig::default_log2_width`]).
    pub log2_width: Option<u32>,
    /// Most flows tracked per worker.
    pub capacity: usize,
    /// Hash seed; absent: random per process.
    pub seed: Option<u64>,
    /// Where the JSON lines go: a file path, or `-` for standard output
    /// (the default).
    pub report: String,
    /// An IPFIX collector (`host:port`, UDP) to export each epoch's heavy
    /// flows to ([`crate::ipfix`]); absent: none.
    pub ipfix: Option<String>,
}

impl Default for HeavySection {
    fn default() -> Self {
        let d = HeavyConfig::default();
        HeavySection {
            threshold: match d.threshold {
                Threshold::ByteShare(s) => ThresholdConfig::Share(s),
                Threshold::Bytes(b) => ThresholdConfig::Bytes(b),
                Threshold::Packets(p) => ThresholdConfig::Packets(p),
            },
            epoch_ms: None,
            rows: d.rows,
            log2_width: None,
            capacity: d.capacity,
            seed: d.seed,
            report: "-".into(),
            ipfix: None,
        }
    }
}

impl HeavySection {
    /// The stage's settings.
    pub fn stage_config(&self) -> HeavyConfig {
        HeavyConfig {
            threshold: self.threshold.into(),
            epoch_ns: self.epoch_ms.map(|ms| ms.saturating_mul(1_000_000)),
            rows: self.rows,
            log2_width: self
                .log2_width
                .unwrap_or_else(|| HeavyConfig::default_log2_width(self.threshold.into())),
            capacity: self.capacity,
            seed: self.seed,
        }
    }
}

/// What to do with a looping packet, as written in the file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnLoop {
    /// Count and drop.
    #[default]
    Drop,
    /// Count and forward.
    Forward,
}

/// `[icarus]`: loop detection.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IcarusSection {
    /// This node's id.
    pub node_id: u64,
    /// Filter width m in bits: 64, 128 (default) or 256.
    #[serde(default = "default_width")]
    pub filter_bits: usize,
    /// Mask bits k; default: the best k for m over 10 hops.
    #[serde(default)]
    pub k: Option<usize>,
    /// Domain seed (every node of a domain must agree); default: the
    /// built-in one.
    #[serde(default)]
    pub seed: Option<u64>,
    /// `drop` (default) or `forward`.
    #[serde(default)]
    pub on_loop: OnLoop,
    /// Edge interfaces whose arriving packets get an empty filter.
    #[serde(default)]
    pub insert_on: Vec<String>,
    /// Edge interfaces whose departing packets lose the filter.
    #[serde(default)]
    pub strip_on: Vec<String>,
}

fn default_width() -> usize {
    FilterWidth::default().bits()
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouterConfig {
    /// Worker threads.
    #[serde(default)]
    pub workers: WorkersConfig,
    /// The ports, in port order.
    pub interfaces: Vec<InterfaceConfig>,
    /// Unicast forwarding.
    #[serde(default)]
    pub wires: Vec<WireConfig>,
    /// Static routes (routed ports).
    #[serde(default)]
    pub routes: Vec<RouteConfig>,
    /// Static neighbours (routed ports).
    #[serde(default)]
    pub neighbours: Vec<NeighbourConfig>,
    /// The routed ports' shared settings.
    #[serde(default)]
    pub router: RouterSection,
    /// Heavy-flow detection; absent: off.
    #[serde(default)]
    pub heavy: Option<HeavySection>,
    /// Loop detection; absent: off.
    #[serde(default)]
    pub icarus: Option<IcarusSection>,
    /// Multicast forwarding settings (its `interfaces` come from
    /// `interfaces[i].multicast_groups`).
    #[serde(default)]
    pub multicast: Option<MulticastConfig>,
    /// How the live router reads and sends frames.
    #[serde(default)]
    pub io: IoConfig,
    /// Prometheus metrics; absent: off.
    #[serde(default)]
    pub telemetry: Option<TelemetryConfig>,
    /// Packet digests for traceback; absent: off.
    #[serde(default)]
    pub digest: Option<DigestSection>,
    /// The protocol between routers; absent: off.
    #[serde(default)]
    pub peering: Option<PeeringSection>,
    /// The neighbouring routers it talks to.
    #[serde(default)]
    pub peers: Vec<PeerSection>,
}

/// `[telemetry]`: where the live router serves `GET /metrics`
/// (OpenMetrics text, [`crate::runtime::metrics`]).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// The address and port to listen on, e.g. `"127.0.0.1:9464"` (an IP
    /// address, not a host name: nothing is resolved).
    pub listen: String,
}

impl TelemetryConfig {
    /// [`TelemetryConfig::listen`] parsed (`None` when it does not parse,
    /// which validation reports).
    pub fn listen_addr(&self) -> Option<std::net::SocketAddr> {
        self.listen.parse().ok()
    }

    fn validate(&self, errs: &mut Vec<(String, String)>) {
        if self.listen_addr().is_none() {
            errs.push((
                "telemetry.listen".into(),
                format!(
                    "\"{}\" is not an IP address and port (e.g. \"127.0.0.1:9464\" or \"[::1]:9464\")",
                    self.listen
                ),
            ));
        }
    }
}

/// Which live port backend the router runs on (`[io] backend`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IoBackend {
    /// pnet's datalink channels: one system call per frame, portable
    /// ([`crate::io::socket`]).
    #[default]
    Pnet,
    /// `TPACKET_V3` receive rings and `sendmmsg` (Linux;
    /// [`crate::io::ring`]).
    Ring,
    /// AF_XDP sockets behind an XDP program (Linux;
    /// [`crate::io::xdp`]).
    Xdp,
}

impl IoBackend {
    /// The name as written in the file.
    pub fn name(self) -> &'static str {
        match self {
            IoBackend::Pnet => "pnet",
            IoBackend::Ring => "ring",
            IoBackend::Xdp => "xdp",
        }
    }
}

impl std::str::FromStr for IoBackend {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "pnet" => Ok(IoBackend::Pnet),
            "ring" => Ok(IoBackend::Ring),
            "xdp" => Ok(IoBackend::Xdp),
            _ => Err(format!("unknown I/O backend \"{s}\" (pnet, ring or xdp)")),
        }
    }
}

/// `[io]`: the live port backend and its ring sizes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IoConfig {
    /// `"pnet"` (default), `"ring"` or `"xdp"`.
    pub backend: IoBackend,
    /// `[io.ring]`: each ring's size (one per worker and interface).
    pub ring: RingConfig,
    /// `[io.xdp]`: the AF_XDP backend's modes, UMEM size and fallback.
    pub xdp: XdpConfig,
}

/// Limits of `[io.ring]`.
pub const RING_BLOCK_BYTES_RANGE: std::ops::RangeInclusive<u32> = 4096..=(16 << 20);
/// Blocks per ring.
pub const RING_BLOCKS_RANGE: std::ops::RangeInclusive<u32> = 2..=4096;
/// Bytes per ring.
pub const RING_MAX_BYTES: u64 = 1 << 30;
/// Block timeout, ms.
pub const RING_TIMEOUT_RANGE: std::ops::RangeInclusive<u32> = 1..=1000;
/// Transmit ring slots (0: `sendmmsg(2)` instead of a ring).
pub const RING_TX_FRAMES_MAX: u32 = 1 << 16;

impl IoConfig {
    fn validate(&self, errs: &mut Vec<(String, String)>) {
        self.xdp.validate(errs);
        let r = &self.ring;
        let key = |k: &str| format!("io.ring.{k}");
        if !RING_BLOCK_BYTES_RANGE.contains(&r.block_bytes) || !r.block_bytes.is_power_of_two() {
            errs.push((
                key("block_bytes"),
                format!(
                    "{} is not a power of two in {}..={}",
                    r.block_bytes,
                    RING_BLOCK_BYTES_RANGE.start(),
                    RING_BLOCK_BYTES_RANGE.end()
                ),
            ));
        }
        if !RING_BLOCKS_RANGE.contains(&r.blocks) {
            errs.push((
                key("blocks"),
                format!(
                    "{} is outside {}..={}",
                    r.blocks,
                    RING_BLOCKS_RANGE.start(),
                    RING_BLOCKS_RANGE.end()
                ),
            ));
        }
        let total = u64::from(r.block_bytes) * u64::from(r.blocks);
        if total > RING_MAX_BYTES {
            errs.push((
                key("blocks"),
                format!(
                    "{} blocks of {} bytes is {total} bytes per ring, more than {RING_MAX_BYTES}",
                    r.blocks, r.block_bytes
                ),
            ));
        }
        if r.tx_frames > RING_TX_FRAMES_MAX {
            errs.push((
                key("tx_frames"),
                format!(
                    "{} is above {RING_TX_FRAMES_MAX} (0 sends with sendmmsg instead of a ring)",
                    r.tx_frames
                ),
            ));
        }
        if !RING_TIMEOUT_RANGE.contains(&r.block_timeout_ms) {
            errs.push((
                key("block_timeout_ms"),
                format!(
                    "{} is outside {}..={}",
                    r.block_timeout_ms,
                    RING_TIMEOUT_RANGE.start(),
                    RING_TIMEOUT_RANGE.end()
                ),
            ));
        }
    }
}

impl RouterConfig {
    /// Reads and validates `path`. Errors are prefixed with the file name
    /// and line.
    ///
    /// # Errors
    /// The file cannot be read, is not TOML of this shape (the first such
    /// error), or fails validation (every problem at once).
    pub fn load(path: &Path) -> Result<RouterConfig, ConfigErrors> {
        Self::load_with(path, false)
    }

    /// [`RouterConfig::load`], plus the checks that only hold on the
    /// machine that runs the router: pinned cores this process may run on,
    /// a heavy-flow report path that can be written (`check-config`, `run`).
    ///
    /// # Errors
    /// As [`RouterConfig::load`], with the host's problems among the rest.
    pub fn load_for_host(path: &Path) -> Result<RouterConfig, ConfigErrors> {
        Self::load_with(path, true)
    }

    fn load_with(path: &Path, host: bool) -> Result<RouterConfig, ConfigErrors> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigErrors(vec![ConfigError {
                origin: origin.clone(),
                line: None,
                key: String::new(),
                reason: format!("cannot read: {e}"),
            }])
        })?;
        Self::parse(&text, &origin, host)
    }

    /// Parses and validates `text`; `origin` names it in errors.
    ///
    /// # Errors
    /// As [`RouterConfig::load`].
    pub fn from_toml_str(text: &str, origin: &str) -> Result<RouterConfig, ConfigErrors> {
        Self::parse(text, origin, false)
    }

    fn parse(text: &str, origin: &str, host: bool) -> Result<RouterConfig, ConfigErrors> {
        let de = toml::Deserializer::new(text);
        let cfg: RouterConfig = serde_path_to_error::deserialize(de).map_err(|e| {
            let mut key = e.path().to_string();
            let inner = e.inner();
            let line = inner.span().map(|span| line_at(text, span.start));
            // serde_path_to_error writes `.` for the root; a syntax error
            // (an integer beyond i64, say) has no path: name the key the
            // line assigns.
            if key == "." {
                key = line.and_then(|l| key_on_line(text, l)).unwrap_or_default();
            }
            let mut reason = inner.message().trim().to_string();
            if reason.starts_with("number too large") {
                reason.push_str(" (TOML integers are at most 9223372036854775807)");
            }
            ConfigErrors(vec![ConfigError {
                origin: origin.to_string(),
                line,
                key,
                reason,
            }])
        })?;
        let mut problems = Vec::new();
        let raw_multicast_interfaces = text
            .parse::<toml::Table>()
            .ok()
            .and_then(|t| t.get("multicast")?.get("interfaces").cloned())
            .is_some();
        if raw_multicast_interfaces {
            problems.push((
                "multicast.interfaces".to_string(),
                "not set here: list static groups in interfaces[i].multicast_groups".to_string(),
            ));
        }
        cfg.validate(&mut problems);
        if host {
            cfg.host_checks(&mut problems);
        }
        if problems.is_empty() {
            return Ok(cfg);
        }
        // One line per key: a later check of the same key repeats the first.
        let mut seen = BTreeSet::new();
        problems.retain(|(k, _)| seen.insert(k.clone()));
        let doc = toml_edit::ImDocument::parse(text).ok();
        let mut errors: Vec<ConfigError> = problems
            .into_iter()
            .map(|(key, reason)| ConfigError {
                origin: origin.to_string(),
                line: doc.as_ref().and_then(|d| line_of_key(d, text, &key)),
                key,
                reason,
            })
            .collect();
        errors.sort_by_key(|e| e.line.unwrap_or(usize::MAX));
        Err(ConfigErrors(errors))
    }

    /// Settings this machine can run but probably should not, as `key:
    /// reason` lines (`check-config` and `run` print them with
    /// [`RouterConfig::warnings`]): more workers than CPUs this process may
    /// use, and receive buffers or rings that could take more than half
    /// the machine's memory.
    pub fn host_warnings(&self) -> Vec<String> {
        let mut w = self.icarus_headroom(|name| {
            let path = Path::new(l3::SYSFS_NET).join(name).join("mtu");
            std::fs::read_to_string(path).ok()?.trim().parse().ok()
        });
        let cpus = core_affinity::get_core_ids().map_or(0, |c| c.len());
        let n = self.workers.resolved_count();
        if cpus > 0 && n > cpus {
            w.push(format!(
                "workers.count: {n} workers on the {cpus} CPUs this process may use: the workers beyond {cpus} take turns on them, which adds latency and forwards nothing faster; at most one worker per CPU"
            ));
        }
        if let (Some(total), Some(mem)) = (self.socket_memory(), mem_total())
            && total > mem / 2
            && total <= mem
        {
            w.push(format!(
                "{}: the sockets may hold {} MiB, more than half the machine's {} MiB",
                self.socket_memory_key(),
                total >> 20,
                mem >> 20
            ));
        }
        w
    }

    /// Where Icarus insertion leaves no headroom (see [`icarus::insert`]):
    /// packets that arrive on an `insert_on` port at its full MTU grow by
    /// the option (20 bytes on IPv4, 24 on IPv6 with m = 128) and may leave
    /// by a wire port that does not strip it; when that port's MTU is not
    /// at least the ingress MTU plus the option, the kernel refuses them
    /// (`msgsize` on the port's line). `mtu_of` gives an interface's MTU
    /// (`None`: unknown, taken as equal to the other's). Routed egress
    /// ports are left out: the forwarding stage checks the MTU with the
    /// option counted and answers with Fragmentation Needed / Packet Too
    /// Big.
    ///
    /// [`icarus::insert`]: crate::wire::icarus::insert
    pub fn icarus_headroom(&self, mtu_of: impl Fn(&str) -> Option<u32>) -> Vec<String> {
        let mut w = Vec::new();
        let Some(ic) = &self.icarus else {
            return w;
        };
        let Some(width) = FilterWidth::from_bits(ic.filter_bits) else {
            return w;
        };
        let (v4, v6) = (width.ipv4_block_len() as u32, width.ipv6_block_len() as u32);
        let mtu = |i: &InterfaceConfig| i.mtu.or_else(|| mtu_of(&i.name));
        for ingress in &ic.insert_on {
            let Some(x) = self.interfaces.iter().find(|i| &i.name == ingress) else {
                continue;
            };
            for y in &self.interfaces {
                if y.name == x.name || y.is_routed() || ic.strip_on.contains(&y.name) {
                    continue;
                }
                let (mx, my) = (mtu(x), mtu(y));
                let (xn, yn) = (&x.name, &y.name);
                let head = format!(
                    "icarus.insert_on: {xn} inserts the option ({v4} bytes on IPv4, {v6} on IPv6) and {yn} does not strip it"
                );
                match (mx, my) {
                    (Some(a), Some(b)) if a + v6 > b => w.push(format!(
                        "{head}: a packet of {xn}'s MTU ({a}) leaves {yn} up to {} bytes over {yn}'s MTU ({b}) and the kernel refuses it (msgsize); give {yn} an MTU of at least {}, add it to icarus.strip_on, or give the hosts behind {xn} an MTU of at most {}",
                        a + v6 - b,
                        a + v6,
                        b.saturating_sub(v6)
                    )),
                    (Some(_), Some(_)) => {}
                    _ => w.push(format!(
                        "{head}: unless {yn}'s MTU is at least {v6} bytes above {xn}'s, packets of {xn}'s full MTU leave {yn} too long and the kernel refuses them (msgsize); raise {yn}'s MTU, add it to icarus.strip_on, or keep the hosts behind {xn} {v6} bytes under its MTU"
                    )),
                }
            }
        }
        w
    }

    /// The most memory the router's receive sockets or rings may take,
    /// bytes: per worker and interface, a ring (ring backend) or twice the
    /// receive buffer (the kernel doubles `SO_RCVBUF` for its bookkeeping).
    fn socket_memory(&self) -> Option<u64> {
        let per_worker: u64 = match self.io.backend {
            IoBackend::Ring => {
                u64::from(self.io.ring.block_bytes)
                    * u64::from(self.io.ring.blocks)
                    * self.interfaces.len() as u64
            }
            IoBackend::Pnet => self
                .interfaces
                .iter()
                .map(|i| i.recv_buffer_bytes.saturating_mul(2))
                .sum(),
            // A UMEM per socket, of frames of at most 4 KiB.
            IoBackend::Xdp => u64::from(self.io.xdp.frames) * 4096 * self.interfaces.len() as u64,
        };
        per_worker.checked_mul(self.workers.resolved_count() as u64)
    }

    /// The key to change when [`socket_memory`](Self::socket_memory) is too
    /// much.
    fn socket_memory_key(&self) -> &'static str {
        match self.io.backend {
            IoBackend::Ring => "io.ring",
            IoBackend::Pnet => "interfaces.recv_buffer_bytes",
            IoBackend::Xdp => "io.xdp.frames",
        }
    }

    /// Problems of this machine rather than of the file: pinned cores the
    /// process may not run on, a heavy-flow report that cannot be written,
    /// receive sockets or rings that may take more memory than the
    /// machine has.
    fn host_checks(&self, errs: &mut Vec<(String, String)>) {
        if let (Some(total), Some(mem)) = (self.socket_memory(), mem_total())
            && total > mem
        {
            errs.push((
                self.socket_memory_key().into(),
                format!(
                    "{} workers x {} interfaces may hold {} MiB in their receive {}, more than the machine's {} MiB of memory",
                    self.workers.resolved_count(),
                    self.interfaces.len(),
                    total >> 20,
                    match self.io.backend {
                        IoBackend::Ring => "rings",
                        IoBackend::Pnet => "buffers",
                        IoBackend::Xdp => "UMEM",
                    },
                    mem >> 20
                ),
            ));
        }
        if !self.workers.cores.is_empty() {
            let usable: BTreeSet<usize> = core_affinity::get_core_ids()
                .unwrap_or_default()
                .into_iter()
                .map(|c| c.id)
                .collect();
            for (i, c) in self.workers.cores.iter().enumerate() {
                if !usable.contains(c) {
                    errs.push((
                        format!("workers.cores[{i}]"),
                        format!(
                            "core {c} is not one this process may run on ({})",
                            describe_cores(&usable)
                        ),
                    ));
                }
            }
        }
        if let Some(h) = &self.heavy
            && h.report != "-"
            && !h.report.is_empty()
            && let Err(why) = writable(Path::new(&h.report))
        {
            errs.push(("heavy.report".into(), format!("{}: {why}", h.report)));
        }
    }

    /// Gives every hash key the file leaves to chance a seed derived from
    /// `seed` (heavy flows, multicast, each port's SFB, digests), so a replay of the
    /// same capture is the same run; seeds the file sets stay.
    pub fn fill_seeds(&mut self, seed: u64) {
        let mut k = 0u64;
        let mut next = || {
            k += 1;
            seed ^ k.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        };
        if let Some(h) = &mut self.heavy {
            h.seed.get_or_insert_with(&mut next);
        }
        if let Some(m) = &mut self.multicast {
            m.seed.get_or_insert_with(&mut next);
        } else if self.multicast_config().is_some() {
            self.multicast = Some(MulticastConfig {
                seed: Some(next()),
                ..MulticastConfig::default()
            });
        }
        for i in &mut self.interfaces {
            if let Some(s) = &mut i.sfb {
                s.seed.get_or_insert_with(&mut next);
            }
        }
        // Last, so the other stages' seeds do not depend on it.
        if let Some(d) = &mut self.digest {
            d.seed.get_or_insert_with(&mut next);
        }
    }

    /// What the live port backends need to open the interfaces, in port
    /// order.
    pub fn port_settings(&self) -> Vec<PortSettings> {
        self.interfaces
            .iter()
            .map(InterfaceConfig::port_settings)
            .collect()
    }

    /// The forwarding stage's settings: each port's MAC (its `mac`, else
    /// [`MacAddr::default_for_port`]), MTU (its `mtu`, else
    /// [`DEFAULT_MTU`]) and addresses, the static routes with their
    /// interfaces resolved to ports (a route naming an unknown interface,
    /// or both a gateway and an interface, is left out), the static
    /// neighbours and `[router]`.
    pub fn forward_config(&self) -> ForwardConfig {
        let ports = self
            .interfaces
            .iter()
            .enumerate()
            .map(|(i, ifc)| ForwardPort {
                mac: ifc
                    .mac
                    .unwrap_or_else(|| MacAddr::default_for_port(i as u8)),
                mtu: ifc.mtu.unwrap_or(DEFAULT_MTU),
                addresses: ifc.addresses.clone(),
            })
            .collect();
        let routes = self
            .routes
            .iter()
            .filter_map(|r| {
                let via = match (&r.via, &r.interface) {
                    (Some(via), None) => RouteVia::Gateway(*via),
                    (None, Some(name)) => RouteVia::Port(self.port_of(name)?),
                    _ => return None,
                };
                Some(StaticRoute {
                    prefix: r.prefix,
                    via,
                })
            })
            .collect();
        let r = &self.router;
        ForwardConfig {
            ports,
            routes,
            neighbours: self.neighbours.iter().map(|n| (n.address, n.mac)).collect(),
            icmp_rate: r.icmp_rate,
            icmp_burst: r.icmp_burst,
            neighbour_queue: r.neighbour_queue,
            resolve_tries: r.resolve_tries,
            resolve_interval_ms: r.resolve_interval_ms,
            reachable_ms: r.reachable_ms,
        }
    }

    /// The port of interface `name`.
    pub fn port_of(&self, name: &str) -> Option<u8> {
        self.interfaces
            .iter()
            .position(|i| i.name == name)
            .and_then(|p| u8::try_from(p).ok())
    }

    /// Unicast egress ports per ingress port (index = ingress port): the
    /// union of the wires out of it, never the ingress port itself.
    pub fn unicast_routes(&self) -> Vec<PortSet> {
        let mut routes = vec![PortSet::EMPTY; self.interfaces.len()];
        for w in &self.wires {
            let (Some(f), Some(t)) = (self.port_of(&w.from), self.port_of(&w.to)) else {
                continue;
            };
            if f == t {
                continue;
            }
            routes[usize::from(f)] = routes[usize::from(f)].union(PortSet::single(t));
            if w.bidirectional {
                routes[usize::from(t)] = routes[usize::from(t)].union(PortSet::single(f));
            }
        }
        routes
    }

    /// The multicast stage's settings, when enabled: the `[multicast]`
    /// table (or the defaults) with one entry per interface holding its
    /// name and `multicast_groups` as static groups.
    pub fn multicast_config(&self) -> Option<MulticastConfig> {
        let any_groups = self
            .interfaces
            .iter()
            .any(|i| !i.multicast_groups.is_empty());
        if self.multicast.is_none() && !any_groups {
            return None;
        }
        let mut m = self.multicast.clone().unwrap_or_default();
        m.interfaces = self
            .interfaces
            .iter()
            .map(|i| multicast::InterfaceConfig {
                name: Some(i.name.clone()),
                static_groups: i.multicast_groups.clone(),
            })
            .collect();
        Some(m)
    }

    /// One egress queue per interface that has an `sfb` table (its shaper
    /// the `egress` table, or the default 1 Gbit/s).
    pub fn egress_queues(&self) -> Vec<QueueConfig> {
        self.interfaces
            .iter()
            .enumerate()
            .filter_map(|(port, i)| {
                i.sfb.map(|sfb| QueueConfig {
                    port: port as u8,
                    sfb,
                    egress: i.egress.unwrap_or_default(),
                })
            })
            .collect()
    }

    /// The heavy-flow stage's settings, when enabled.
    pub fn heavy_config(&self) -> Option<HeavyConfig> {
        self.heavy.as_ref().map(HeavySection::stage_config)
    }

    /// The digest stage's settings for one of `workers` workers, when
    /// enabled.
    pub fn digest_config(&self, workers: usize) -> Option<crate::stage::digest::DigestConfig> {
        self.digest.as_ref().map(|d| d.stage_config(workers))
    }

    /// The icarus stage's settings, when enabled.
    pub fn icarus_config(&self) -> Option<IcarusConfig> {
        let s = self.icarus.as_ref()?;
        let width = FilterWidth::from_bits(s.filter_bits)?;
        let mut params = FilterParams::new(width, s.k.unwrap_or(default_k(width))).ok()?;
        if let Some(seed) = s.seed {
            params = params.with_seed(seed);
        }
        let mut c = IcarusConfig::new(s.node_id);
        c.params = params;
        c.on_loop = match s.on_loop {
            OnLoop::Drop => LoopAction::Drop,
            OnLoop::Forward => LoopAction::Forward,
        };
        for n in &s.insert_on {
            c = c.insert_on(self.port_of(n)?);
        }
        for n in &s.strip_on {
            c = c.strip_on(self.port_of(n)?);
        }
        Some(c)
    }

    /// Settings that are valid but probably not meant, as `key: reason`
    /// lines (`check-config` and `run` print them, as tc warns).
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if let Some(h) = &self.heavy {
            heavy_warnings(h, &mut w);
        }
        for (i, ifc) in self.interfaces.iter().enumerate() {
            if let Some(e) = &ifc.egress
                && e.rate_bps > 0
                && e.burst_bytes < ETHERNET_MAX_FRAME
            {
                w.push(format!(
                    "interfaces[{i}].egress.burst_bytes: {} is below a full Ethernet frame ({ETHERNET_MAX_FRAME} bytes): larger frames leave one at a time, each taking the whole bucket",
                    e.burst_bytes
                ));
            }
            if ifc.recv_buffer_bytes > RECV_BUFFER_WARN && self.io.backend == IoBackend::Pnet {
                w.push(format!(
                    "interfaces[{i}].recv_buffer_bytes: {} MiB per socket ({} sockets: one per worker): a queue that deep holds {:.0} ms of a 10 Gbit/s link, frames too old to be worth forwarding, and the kernel may hold twice it in memory; the default is {} MiB",
                    ifc.recv_buffer_bytes >> 20,
                    self.workers.resolved_count(),
                    ifc.recv_buffer_bytes as f64 * 8.0 / 10e9 * 1e3,
                    DEFAULT_RECV_BUFFER >> 20
                ));
            }
            if let Some(sfb) = &ifc.sfb
                && sfb.target >= sfb.effective_max()
            {
                w.push(format!(
                    "interfaces[{i}].sfb.target: {} is not below max ({}): bins overflow (bucketdrop) before marking starts",
                    sfb.target,
                    sfb.effective_max()
                ));
            }
        }
        w
    }

    /// The validation pass: every problem, as `(key, reason)`, into `errs`.
    fn validate(&self, errs: &mut Vec<(String, String)>) {
        self.io.validate(errs);
        if let Some(t) = &self.telemetry {
            t.validate(errs);
        }
        if let Some(d) = &self.digest {
            d.validate(
                self.workers.resolved_count().max(1),
                self.telemetry.is_some(),
                errs,
            );
        }
        // Workers.
        let w = &self.workers;
        if let Some(n) = w.count {
            if n == 0 || n > MAX_WORKERS {
                errs.push((
                    "workers.count".into(),
                    format!("{n} is outside 1..={MAX_WORKERS}"),
                ));
            }
            if !w.cores.is_empty() && w.cores.len() != n {
                errs.push((
                    "workers.cores".into(),
                    format!(
                        "{} cores listed for {n} workers (one core per worker)",
                        w.cores.len()
                    ),
                ));
            }
        }
        if w.cores.len() > MAX_WORKERS {
            errs.push((
                "workers.cores".into(),
                format!("{} cores: at most {MAX_WORKERS} workers", w.cores.len()),
            ));
        }
        let mut seen_cores = BTreeMap::new();
        for (i, c) in w.cores.iter().enumerate() {
            if let Some(j) = seen_cores.insert(*c, i) {
                errs.push((
                    format!("workers.cores[{i}]"),
                    format!("core {c} is already used by worker {j}"),
                ));
            }
        }

        // Interfaces.
        if self.interfaces.is_empty() {
            errs.push((
                "interfaces".into(),
                "at least one interface is needed".into(),
            ));
        }
        if self.interfaces.len() > MAX_INTERFACES {
            errs.push((
                "interfaces".into(),
                format!(
                    "{} interfaces: at most {MAX_INTERFACES}",
                    self.interfaces.len()
                ),
            ));
        }
        let mut names: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, ifc) in self.interfaces.iter().enumerate() {
            let key = |k: &str| format!("interfaces[{i}].{k}");
            let n = ifc.name.as_str();
            if n.is_empty() || n.len() > MAX_IFNAME_LEN {
                errs.push((
                    key("name"),
                    format!("\"{n}\" must be 1..={MAX_IFNAME_LEN} bytes long"),
                ));
            }
            if n == "." || n == ".." || n.chars().any(|c| c == '/' || c.is_whitespace()) {
                errs.push((
                    key("name"),
                    format!("\"{n}\" is not a valid interface name"),
                ));
            }
            if let Some(j) = names.insert(n, i) {
                errs.push((
                    key("name"),
                    format!("duplicate interface \"{n}\" (also interfaces[{j}])"),
                ));
            }
            if !RECV_BUFFER_RANGE.contains(&ifc.recv_buffer_bytes) {
                errs.push((
                    key("recv_buffer_bytes"),
                    format!(
                        "{} is outside {}..={}",
                        ifc.recv_buffer_bytes,
                        RECV_BUFFER_RANGE.start(),
                        RECV_BUFFER_RANGE.end()
                    ),
                ));
            }
            let expected = self.multicast.as_ref().map_or_else(
                || MulticastConfig::default().expected_groups,
                |m| m.expected_groups,
            );
            if ifc.multicast_groups.len() as u64 > expected {
                errs.push((
                    key("multicast_groups"),
                    format!(
                        "{} groups, more than multicast.expected_groups = {expected} that the filters are sized for (raise multicast.expected_groups, up to {})",
                        ifc.multicast_groups.len(),
                        multicast::MAX_EXPECTED_GROUPS
                    ),
                ));
            }
            let mut groups = BTreeSet::new();
            for (g, addr) in ifc.multicast_groups.iter().enumerate() {
                if !addr.is_multicast() {
                    errs.push((
                        key(&format!("multicast_groups[{g}]")),
                        format!("{addr} is not a multicast address"),
                    ));
                }
                if !groups.insert(*addr) {
                    errs.push((
                        key(&format!("multicast_groups[{g}]")),
                        format!("duplicate group {addr}"),
                    ));
                }
            }
            if let Some(e) = &ifc.egress {
                if ifc.sfb.is_none() {
                    errs.push((
                        key("egress"),
                        "needs an [interfaces.sfb] table: the egress queue is SFB's".into(),
                    ));
                }
                if e.limit == 0 {
                    errs.push((key("egress.limit"), "must be at least 1 packet".into()));
                }
                if (1..MIN_RATE_BPS).contains(&e.rate_bps) {
                    errs.push((
                        key("egress.rate_bps"),
                        format!(
                            "{} bit/s is below {MIN_RATE_BPS}: a 1500-byte frame would take {:.0} s to leave and the queue would drop nearly everything (0 means unshaped)",
                            e.rate_bps,
                            12_000.0 / e.rate_bps as f64
                        ),
                    ));
                }
            }
            if let Some(s) = &ifc.sfb
                && let Err(e) = s.validate()
            {
                errs.push((key(&format!("sfb.{}", e.key)), e.reason));
            }
        }

        // Wires.
        let mut wires = BTreeMap::new();
        for (i, wire) in self.wires.iter().enumerate() {
            let key = |k: &str| format!("wires[{i}].{k}");
            if !names.contains_key(wire.from.as_str()) {
                errs.push((key("from"), format!("unknown interface \"{}\"", wire.from)));
            }
            if !names.contains_key(wire.to.as_str()) {
                errs.push((key("to"), format!("unknown interface \"{}\"", wire.to)));
            }
            if wire.from == wire.to {
                errs.push((
                    key("to"),
                    format!(
                        "\"{}\" is also `from`: a frame never leaves by the interface it came in on",
                        wire.to
                    ),
                ));
            }
            let mut dirs = vec![(wire.from.as_str(), wire.to.as_str())];
            if wire.bidirectional {
                dirs.push((wire.to.as_str(), wire.from.as_str()));
            }
            for d in dirs {
                if let Some(j) = wires.insert(d, i) {
                    errs.push((
                        format!("wires[{i}]"),
                        format!("{} -> {} is already wires[{j}]", d.0, d.1),
                    ));
                }
            }
        }

        // Routed mode.
        l3::validate(self, errs);
        peering::validate(self, errs);

        // Heavy.
        if let Some(h) = &self.heavy {
            let key = |k: &str| format!("heavy.{k}");
            match h.threshold {
                ThresholdConfig::Share(s) if !(s > 0.0 && s <= 1.0) => {
                    errs.push((key("threshold.share"), format!("{s} is outside (0, 1]")));
                }
                ThresholdConfig::Share(s) => {
                    if let Some(why) = share_problem(s, h.log2_width) {
                        errs.push((key("threshold.share"), why));
                    }
                }
                ThresholdConfig::Bytes(0) => {
                    errs.push((key("threshold.bytes"), "must be at least 1".into()));
                }
                ThresholdConfig::Packets(0) => {
                    errs.push((key("threshold.packets"), "must be at least 1".into()));
                }
                _ => {}
            }
            if h.epoch_ms == Some(0) {
                errs.push((key("epoch_ms"), "must be at least 1 ms".into()));
            }
            let max_rows = kernels::cms::MAX_ROWS;
            if !(1..=max_rows).contains(&h.rows) {
                errs.push((key("rows"), format!("{} is outside 1..={max_rows}", h.rows)));
            }
            if let Some(w) = h.log2_width
                && w > MAX_LOG2_WIDTH
            {
                errs.push((key("log2_width"), format!("{w} is above {MAX_LOG2_WIDTH}")));
            }
            if h.capacity == 0 {
                errs.push((key("capacity"), "must be at least 1 flow".into()));
            }
            if h.capacity > MAX_HEAVY_CAPACITY {
                errs.push((
                    key("capacity"),
                    format!(
                        "{} flows is above {MAX_HEAVY_CAPACITY} per worker (the flow memory is allocated up front)",
                        h.capacity
                    ),
                ));
            }
            if let Some(a) = &h.ipfix
                && let Err(e) = a.parse::<std::net::SocketAddr>()
            {
                errs.push((
                    key("ipfix"),
                    format!("\"{a}\" is not an address and port (127.0.0.1:4739, [::1]:4739): {e}"),
                ));
            }
            if h.report.is_empty() {
                errs.push((
                    key("report"),
                    "empty: give a file path, or \"-\" for standard output".into(),
                ));
            }
        }

        // Multicast: the stage's own checks, on the assembled settings. The
        // stage calls an interface's static groups
        // `multicast.interfaces[i].static_groups`; the file calls them
        // `interfaces[i].multicast_groups`, whose checks above come first
        // (one line per key: the stage's repeat is dropped).
        if let Some(m) = self.multicast_config()
            && let Err(e) = MulticastStage::new(&m)
        {
            let msg = e.to_string();
            errs.push(match msg.split_once(": ") {
                Some((k, r)) if k.starts_with("multicast.") => (file_key(k), r.to_string()),
                _ => ("multicast".to_string(), msg),
            });
        }

        // Icarus.
        if let Some(ic) = &self.icarus {
            match FilterWidth::from_bits(ic.filter_bits) {
                None => errs.push((
                    "icarus.filter_bits".into(),
                    format!("{} is not one of 64, 128, 256", ic.filter_bits),
                )),
                Some(width) => {
                    if let Some(k) = ic.k
                        && FilterParams::new(width, k).is_err()
                    {
                        errs.push((
                            "icarus.k".to_string(),
                            format!(
                                "{k} is outside 1..={}",
                                crate::stage::icarus::MAX_K.min(width.bits())
                            ),
                        ));
                    }
                }
            }
            for (list, names_in) in [("insert_on", &ic.insert_on), ("strip_on", &ic.strip_on)] {
                for (i, n) in names_in.iter().enumerate() {
                    if !names.contains_key(n.as_str()) {
                        errs.push((
                            format!("icarus.{list}[{i}]"),
                            format!("unknown interface \"{n}\""),
                        ));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: &str = r#"
[[interfaces]]
name = "veth0"
[[interfaces]]
name = "veth1"
[[wires]]
from = "veth0"
to = "veth1"
bidirectional = true
"#;

    /// The first error, without its line (the cases below name keys).
    fn parse(text: &str) -> Result<RouterConfig, String> {
        RouterConfig::from_toml_str(text, "router.toml").map_err(|e| {
            let first = e.first().unwrap();
            ConfigError {
                line: None,
                ..first.clone()
            }
            .to_string()
        })
    }

    #[test]
    fn every_error_at_once_with_its_line() {
        let text = "[workers]\ncount = 0\n\n[[interfaces]]\nname = \"a\"\nrecv_buffer_bytes = 1\n\n\
                    [[interfaces]]\nname = \"b\"\n[interfaces.egress]\nrate_bps = 1\nlimit = 0\n\
                    [interfaces.sfb]\nmax = 0\n\n[[wires]]\nfrom = \"a\"\nto = \"c\"\n\n\
                    [heavy]\ncapacity = 10000000000\n";
        let e = RouterConfig::from_toml_str(text, "r.toml").unwrap_err();
        let lines: Vec<String> = e.0.iter().map(ToString::to_string).collect();
        let want = [
            "r.toml:2: workers.count: 0 is outside",
            "r.toml:6: interfaces[0].recv_buffer_bytes: 1 is outside",
            "r.toml:11: interfaces[1].egress.rate_bps: 1 bit/s is below 8000",
            "r.toml:12: interfaces[1].egress.limit: must be at least 1 packet",
            "r.toml:14: interfaces[1].sfb.max: 0 drops every packet",
            "r.toml:18: wires[0].to: unknown interface \"c\"",
            "r.toml:21: heavy.capacity: 10000000000 flows is above",
        ];
        assert_eq!(lines.len(), want.len(), "{e}");
        for (got, want) in lines.iter().zip(want) {
            assert!(got.starts_with(want), "got {got:?}, want {want:?}\n{e}");
        }
        // Display: one per line.
        assert_eq!(e.to_string().lines().count(), want.len());
    }

    #[test]
    fn a_key_left_to_its_default_gets_its_tables_line() {
        let text = "[workers]\ncount = 2\n\n[[interfaces]]\nname = \"a\"\n\n[[interfaces]]\n\
                    name = \"b\"\negress = { rate_bps = 9 }\n\n[heavy]\nrows = 2\n";
        let doc = toml_edit::ImDocument::parse(text).unwrap();
        let line = |k| line_of_key(&doc, text, k);
        assert_eq!(line("workers.count"), Some(2));
        assert_eq!(line("interfaces[1].name"), Some(8));
        assert_eq!(line("interfaces[1].egress.rate_bps"), Some(9));
        // Not written: the nearest table the file writes.
        assert_eq!(line("heavy.capacity"), Some(11));
        assert_eq!(line("interfaces[1].egress.limit"), Some(9));
        assert_eq!(line("interfaces[1].sfb.max"), Some(7));
        assert_eq!(line("icarus.k"), None);
    }

    #[test]
    fn integers_beyond_toml_name_their_key() {
        let t = format!("{MIN}\n[heavy]\ncapacity = 18446744073709551615\n");
        let e = RouterConfig::from_toml_str(&t, "r.toml").unwrap_err();
        let first = e.first().unwrap();
        assert_eq!(first.key, "heavy.capacity", "{e}");
        assert_eq!(first.line, Some(t.lines().count()), "{e}");
        let t = format!(
            "{MIN}\n[[interfaces]]\nname = \"x\"\nrecv_buffer_bytes = 99999999999999999999\n"
        );
        let e = RouterConfig::from_toml_str(&t, "r.toml").unwrap_err();
        assert_eq!(
            e.first().unwrap().key,
            "interfaces[2].recv_buffer_bytes",
            "{e}"
        );
    }

    #[test]
    fn host_checks_cores_and_report_path() {
        let dir = std::env::temp_dir().join(format!("bloomplane-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("r.toml");
        let usable = core_affinity::get_core_ids().unwrap_or_default().len();
        let text = format!(
            "[workers]\ncores = [0, {usable}]\n{MIN}\n[heavy]\nreport = \"{}/no/such/dir/h.jsonl\"\n",
            dir.display()
        );
        std::fs::write(&path, &text).unwrap();
        // The file is valid anywhere; this machine cannot run it.
        assert!(RouterConfig::load(&path).is_ok());
        let e = RouterConfig::load_for_host(&path).unwrap_err();
        assert_eq!(e.0.len(), 2, "{e}");
        assert_eq!(e.0[0].key, "workers.cores[1]");
        assert_eq!(e.0[0].line, Some(2));
        assert!(
            e.0[0].reason.contains("is not one this process may run on"),
            "{e}"
        );
        assert_eq!(e.0[1].key, "heavy.report");
        assert!(e.0[1].reason.contains("No such file or directory"), "{e}");
        let ok = text
            .replace(&format!(", {usable}]"), "]")
            .replace("/no/such/dir/h.jsonl", "/h.jsonl");
        std::fs::write(&path, ok).unwrap();
        RouterConfig::load_for_host(&path).unwrap();
        assert!(
            !dir.join("h.jsonl").exists(),
            "checking must not create the report"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn minimal() {
        let c = parse(MIN).unwrap();
        assert_eq!(c.workers.resolved_count(), 1);
        assert!(c.interfaces[0].promiscuous);
        assert_eq!(c.interfaces[0].recv_buffer_bytes, DEFAULT_RECV_BUFFER);
        let r = c.unicast_routes();
        assert_eq!(r, vec![PortSet::single(1), PortSet::single(0)]);
        assert!(c.heavy_config().is_none() && c.icarus_config().is_none());
        assert!(c.egress_queues().is_empty());
    }

    #[test]
    fn telemetry_listen() {
        assert!(parse(MIN).unwrap().telemetry.is_none());
        for (listen, want) in [("127.0.0.1:9464", "127.0.0.1:9464"), ("[::1]:0", "[::1]:0")] {
            let c = parse(&format!("{MIN}\n[telemetry]\nlisten = \"{listen}\"\n")).unwrap();
            let t = c.telemetry.unwrap();
            assert_eq!(t.listen_addr().unwrap().to_string(), want);
        }
        // The error names the key and the line it is on.
        let text = format!("{MIN}\n[telemetry]\nlisten = \"metrics:9464\"\n");
        let e = RouterConfig::from_toml_str(&text, "r.toml").unwrap_err();
        let line = text.lines().position(|l| l.starts_with("listen")).unwrap() + 1;
        assert!(
            e.to_string().starts_with(&format!(
                "r.toml:{line}: telemetry.listen: \"metrics:9464\""
            )),
            "{e}"
        );
    }

    #[test]
    fn duplicate_interface() {
        let t = MIN.replace("name = \"veth1\"", "name = \"veth0\"");
        assert_eq!(
            parse(&t).unwrap_err(),
            "router.toml: interfaces[1].name: duplicate interface \"veth0\" (also interfaces[0])"
        );
    }

    #[test]
    fn serde_errors_carry_the_path() {
        let t = format!("{MIN}\n[interfaces.sfb]\nlevels = \"eight\"\n");
        let e = parse(&t).unwrap_err();
        assert!(
            e.starts_with("router.toml: interfaces[1].sfb.levels: invalid type"),
            "{e}"
        );
        let full = RouterConfig::from_toml_str(&t, "router.toml").unwrap_err();
        assert_eq!(
            full.first().unwrap().line,
            Some(t.lines().count()),
            "{full}"
        );
        let e = parse(&format!("{MIN}\n[heavy]\nthreshold = {{ percent = 3 }}\n")).unwrap_err();
        assert!(e.starts_with("router.toml: heavy.threshold: "), "{e}");
        let e = parse(&MIN.replace("bidirectional", "bidirectionl")).unwrap_err();
        assert!(
            e.contains("wires[0].bidirectionl: unknown field `bidirectionl`"),
            "{e}"
        );
        let e = parse("interfaces = 3").unwrap_err();
        assert!(
            e.starts_with("router.toml: interfaces: invalid type"),
            "{e}"
        );
        let e = parse("[[interfaces]\n").unwrap_err();
        assert!(e.starts_with("router.toml: "), "{e}");
    }

    #[test]
    fn sfb_probabilities_as_tc_writes_them_and_warnings() {
        let t = MIN.replacen(
            "name = \"veth0\"\n",
            "name = \"veth0\"\n[interfaces.egress]\nrate_bps = 1000000\nburst_bytes = 1000\n\
             [interfaces.sfb]\nincrement = 0.0005\ndecrement = 11\nmax = 10\ntarget = 10\n",
            1,
        );
        let c = RouterConfig::from_toml_str(&t, "router.toml").unwrap();
        let sfb = c.interfaces[0].sfb.unwrap();
        // 0.0005 x 65536 = 32.8: 33 Q0.16 units; an integer is units.
        assert_eq!((sfb.increment, sfb.decrement), (33, 11));
        let w = c.warnings();
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].starts_with("interfaces[0].egress.burst_bytes: 1000 is below"),
            "{w:?}"
        );
        assert!(
            w[1].starts_with("interfaces[0].sfb.target: 10 is not below max (10)"),
            "{w:?}"
        );
        assert!(
            RouterConfig::from_toml_str(MIN, "router.toml")
                .unwrap()
                .warnings()
                .is_empty()
        );
    }

    #[test]
    fn validation_names_the_key() {
        let cases: &[(&str, &str)] = &[
            (
                "[workers]\ncount = 0",
                "workers.count: 0 is outside 1..=256",
            ),
            (
                "[workers]\ncount = 2\ncores = [1]",
                "workers.cores: 1 cores listed for 2 workers",
            ),
            (
                "[workers]\ncores = [1, 1]",
                "workers.cores[1]: core 1 is already used by worker 0",
            ),
            (
                "[[wires]]\nfrom = \"veth0\"\nto = \"veth9\"",
                "wires[1].to: unknown interface \"veth9\"",
            ),
            (
                "[[wires]]\nfrom = \"veth1\"\nto = \"veth1\"",
                "wires[1].to: \"veth1\" is also `from`",
            ),
            (
                "[[wires]]\nfrom = \"veth1\"\nto = \"veth0\"",
                "wires[1]: veth1 -> veth0 is already wires[0]",
            ),
            (
                "[heavy]\nthreshold = { share = 1.5 }",
                "heavy.threshold.share: 1.5 is outside (0, 1]",
            ),
            (
                "[heavy]\nepoch_ms = 0",
                "heavy.epoch_ms: must be at least 1 ms",
            ),
            ("[heavy]\nrows = 0", "heavy.rows: 0 is outside 1..="),
            (
                "[heavy]\nlog2_width = 40",
                "heavy.log2_width: 40 is above 24",
            ),
            (
                "[icarus]\nnode_id = 1\nfilter_bits = 100",
                "icarus.filter_bits: 100 is not one of 64, 128, 256",
            ),
            (
                "[icarus]\nnode_id = 1\nk = 0",
                "icarus.k: 0 is outside 1..=",
            ),
            (
                "[icarus]\nnode_id = 1\nstrip_on = [\"eth7\"]",
                "icarus.strip_on[0]: unknown interface \"eth7\"",
            ),
            (
                "[io]\nbackend = \"dpdk\"",
                "io.backend: unknown variant `dpdk`",
            ),
            (
                "[io.ring]\nblock_bytes = 5000",
                "io.ring.block_bytes: 5000 is not a power of two in 4096..=",
            ),
            ("[io.ring]\nblocks = 1", "io.ring.blocks: 1 is outside 2..="),
            (
                "[io.ring]\nblock_bytes = 16777216\nblocks = 4096",
                "io.ring.blocks: 4096 blocks of 16777216 bytes",
            ),
            (
                "[io.ring]\nblock_timeout_ms = 0",
                "io.ring.block_timeout_ms: 0 is outside 1..=1000",
            ),
            (
                "[io.ring]\ntx_frames = 70000",
                "io.ring.tx_frames: 70000 is above 65536",
            ),
            (
                "[io.xdp]\nframes = 3000",
                "io.xdp.frames: 3000 is not a power of two in 64..=65536",
            ),
            (
                "[io.xdp]\ncoalesce_us = 20000",
                "io.xdp.coalesce_us: 20000 is outside 0..=10000",
            ),
            (
                "[io.xdp]\nframes = 32",
                "io.xdp.frames: 32 is not a power of two in 64..=65536",
            ),
            (
                "[io.xdp]\nattach = \"offload\"",
                "io.xdp.attach: unknown variant `offload`",
            ),
            (
                "[io.xdp]\nfallback = \"pnet\"",
                "io.xdp.fallback: unknown variant `pnet`",
            ),
            (
                "[io.xdp]\nqueues = 4",
                "io.xdp.queues: unknown field `queues`, expected one of `attach`",
            ),
            (
                "[telemetry]\nlisten = \"localhost:9464\"",
                "telemetry.listen: \"localhost:9464\" is not an IP address and port",
            ),
            (
                "[telemetry]\nlisten = \"127.0.0.1\"",
                "telemetry.listen: \"127.0.0.1\" is not an IP address and port",
            ),
            (
                "[telemetry]\nport = 9464",
                "telemetry.port: unknown field `port`, expected `listen`",
            ),
            (
                "[heavy]\ncapacity = 10000000000",
                "heavy.capacity: 10000000000 flows is above 16777216 per worker",
            ),
            (
                "[heavy]\nipfix = \"collector:4739\"",
                "heavy.ipfix: \"collector:4739\" is not an address and port",
            ),
        ];
        for (extra, want) in cases {
            let e = parse(&format!("{MIN}\n{extra}\n")).unwrap_err();
            assert!(
                e.starts_with(&format!("router.toml: {want}")),
                "{extra:?}: got {e}"
            );
        }
        let iface_cases: &[(&str, &str)] = &[
            (
                "multicast_groups = [\"10.0.0.1\"]",
                "interfaces[0].multicast_groups[0]: 10.0.0.1 is not a multicast address",
            ),
            (
                "recv_buffer_bytes = 10",
                "interfaces[0].recv_buffer_bytes: 10 is outside",
            ),
            (
                "[interfaces.egress]\nrate_bps = 1000",
                "interfaces[0].egress: needs an [interfaces.sfb] table",
            ),
            (
                "[interfaces.sfb]\nlevels = 0",
                "interfaces[0].sfb.levels: 0 is outside 1..=",
            ),
            (
                "[interfaces.egress]\nrate_bps = 1\n[interfaces.sfb]",
                "interfaces[0].egress.rate_bps: 1 bit/s is below 8000",
            ),
            (
                "[interfaces.sfb]\nmax = 0\ntarget = 0\nlimit = 10",
                "interfaces[0].sfb.max: 0 drops every packet",
            ),
            (
                "[interfaces.sfb]\nincrement = 1.5",
                "interfaces[0].sfb.increment: 1.5 is not a probability",
            ),
            (
                "[interfaces.sfb]\nincrement = 70000",
                "interfaces[0].sfb.increment: 70000 is above 65535",
            ),
        ];
        for (extra, want) in iface_cases {
            let t = MIN.replacen(
                "name = \"veth0\"\n",
                &format!("name = \"veth0\"\n{extra}\n"),
                1,
            );
            let e = parse(&t).unwrap_err();
            assert!(
                e.starts_with(&format!("router.toml: {want}")),
                "{extra:?}: got {e}"
            );
        }
        let long = MIN.replace("veth1", "a-very-long-interface");
        assert!(
            parse(&long)
                .unwrap_err()
                .starts_with("router.toml: interfaces[1].name: \"a-very-long-interface\" must be")
        );
        assert_eq!(
            parse("interfaces = []").unwrap_err(),
            "router.toml: interfaces: at least one interface is needed"
        );
    }

    #[test]
    fn stage_configs() {
        let t = format!(
            "{MIN}\n[interfaces.egress]\nrate_bps = 1000000\n[interfaces.sfb]\nlimit = 50\n\
             [heavy]\nthreshold = {{ packets = 10 }}\nepoch_ms = 100\nreport = \"h.jsonl\"\n\
             [icarus]\nnode_id = 7\nfilter_bits = 64\ninsert_on = [\"veth0\"]\nstrip_on = [\"veth1\"]\n"
        );
        let c = parse(&t).unwrap();
        let s = c.egress_queues();
        assert_eq!(s.len(), 1);
        assert_eq!(
            (s[0].port, s[0].sfb.limit, s[0].egress.rate_bps),
            (1, 50, 1_000_000)
        );
        let h = c.heavy_config().unwrap();
        assert_eq!(h.threshold, Threshold::Packets(10));
        assert_eq!(h.epoch_ns, Some(100_000_000));
        let i = c.icarus_config().unwrap();
        assert_eq!(i.node_id, 7);
        assert_eq!(i.params.width(), FilterWidth::M64);
        assert_eq!(i.params.k(), default_k(FilterWidth::M64));
        assert_eq!((i.insert_on_ingress, i.strip_on_egress), (1, 2));
    }

    #[test]
    fn multicast() {
        let t = MIN.replacen(
            "name = \"veth1\"\n",
            "name = \"veth1\"\nmulticast_groups = [\"239.1.1.1\", \"ff15::1\"]\n",
            1,
        );
        let c = parse(&t).unwrap();
        let m = c.multicast_config().unwrap();
        assert_eq!(m.interfaces.len(), 2);
        assert_eq!(m.interfaces[1].static_groups.len(), 2);
        assert_eq!(m.interfaces[0].name.as_deref(), Some("veth0"));
        let t2 = format!("{t}\n[multicast]\nmembership_interval_ms = 1000\n");
        assert_eq!(
            parse(&t2)
                .unwrap()
                .multicast_config()
                .unwrap()
                .membership_interval_ms,
            1000
        );
        let e = parse(&format!("{MIN}\n[multicast]\ninterfaces = []\n")).unwrap_err();
        assert!(
            e.starts_with("router.toml: multicast.interfaces: not set here"),
            "{e}"
        );
        let e = parse(&format!("{MIN}\n[multicast]\nmembership_interval_ms = 0\n")).unwrap_err();
        assert!(
            e.starts_with("router.toml: multicast.membership_interval_ms: "),
            "{e}"
        );
        assert!(parse(MIN).unwrap().multicast_config().is_none());
    }

    const ROUTED: &str = r#"
[[interfaces]]
name = "r-a"
addresses = ["10.1.0.1/24", "2001:db8:1::1/64"]
mac = "02:00:00:00:0a:01"
mtu = 1500
[[interfaces]]
name = "r-b"
addresses = ["10.2.0.1/24"]
[[interfaces]]
name = "w0"
[[interfaces]]
name = "w1"
[[wires]]
from = "w0"
to = "w1"
[[routes]]
prefix = "10.9.0.0/16"
via = "10.2.0.2"
[[routes]]
prefix = "2001:db8:9::/48"
interface = "r-a"
[[neighbours]]
address = "10.2.0.2"
mac = "02:00:00:00:0b:02"
[router]
icmp_rate = 100
"#;

    #[test]
    fn routed_mode() {
        let c = parse(ROUTED).unwrap();
        assert!(c.interfaces[0].is_routed() && !c.interfaces[2].is_routed());
        assert_eq!(c.interfaces[0].addresses[1].to_string(), "2001:db8:1::1/64");
        assert_eq!(c.interfaces[0].mac, Some(MacAddr([2, 0, 0, 0, 0x0a, 1])));
        assert_eq!(c.routes[0].prefix.to_string(), "10.9.0.0/16");
        assert_eq!((c.router.icmp_rate, c.router.icmp_burst), (100, 50));
        assert_eq!(
            c.router,
            RouterSection {
                icmp_rate: 100,
                ..RouterSection::default()
            }
        );
    }

    #[test]
    fn routed_mode_errors_name_the_key() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "addresses = [\"10.1.0.1/24\", \"2001:db8:1::1/64\"]",
                "addresses = [\"10.1.0.1/33\"]",
                "interfaces[0].addresses[0]: \"33\" is not a prefix length of 0..=32",
            ),
            (
                "addresses = [\"10.1.0.1/24\", \"2001:db8:1::1/64\"]",
                "addresses = [\"10.1.0.0/24\"]",
                "interfaces[0].addresses[0]: 10.1.0.0/24: the network address",
            ),
            (
                "addresses = [\"10.2.0.1/24\"]",
                "addresses = [\"10.1.0.9/16\"]",
                "interfaces[1].addresses[0]: 10.1.0.0/16 overlaps 10.1.0.0/24 of interfaces[0].addresses[0]",
            ),
            (
                "addresses = [\"10.2.0.1/24\"]",
                "addresses = [\"10.2.0.1/24\", \"10.2.0.1/25\"]",
                "interfaces[1].addresses[1]: 10.2.0.1 is also interfaces[1].addresses[0]",
            ),
            (
                "mac = \"02:00:00:00:0a:01\"",
                "mac = \"01:00:5e:00:00:01\"",
                "interfaces[0].mac: 01:00:5e:00:00:01 is not a unicast MAC address",
            ),
            (
                "mac = \"02:00:00:00:0a:01\"",
                "mac = \"02:00\"",
                "interfaces[0].mac: \"02:00\" is not a MAC address",
            ),
            (
                "mtu = 1500",
                "mtu = 1000",
                "interfaces[0].mtu: 1000 is outside 1280..=65535",
            ),
            (
                "from = \"w0\"",
                "from = \"r-a\"",
                "wires[0].from: \"r-a\" is a routed port",
            ),
            (
                "prefix = \"10.9.0.0/16\"",
                "prefix = \"10.9.0.1/16\"",
                "routes[0].prefix: \"10.9.0.1/16\" has host bits set",
            ),
            (
                "via = \"10.2.0.2\"",
                "via = \"10.3.0.2\"",
                "routes[0].via: 10.3.0.2 is on no connected prefix",
            ),
            (
                "via = \"10.2.0.2\"",
                "via = \"2001:db8:1::2\"",
                "routes[0].via: 2001:db8:1::2 is not of the family of 10.9.0.0/16",
            ),
            (
                "via = \"10.2.0.2\"",
                "via = \"10.2.0.1\"",
                "routes[0].via: 10.2.0.1 is one of the router's addresses",
            ),
            (
                "interface = \"r-a\"",
                "interface = \"w0\"",
                "routes[1].interface: \"w0\" has no addresses",
            ),
            (
                "interface = \"r-a\"",
                "interface = \"r-a\"\nvia = \"2001:db8:1::2\"",
                "routes[1]: give exactly one of `via`",
            ),
            (
                "address = \"10.2.0.2\"",
                "address = \"10.7.0.2\"",
                "neighbours[0].address: 10.7.0.2 is on no connected prefix",
            ),
            (
                "icmp_rate = 100",
                "icmp_burst = 0",
                "router.icmp_burst: must be at least 1",
            ),
            (
                "prefix = \"10.9.0.0/16\"",
                "prefix = \"10.2.0.0/24\"",
                "routes[0].prefix: 10.2.0.0/24 is the connected prefix of interfaces[1].addresses[0]",
            ),
            (
                "icmp_rate = 100",
                "neighbour_queue = 65",
                "router.neighbour_queue: 65 is above 64",
            ),
        ];
        for (from, to, want) in cases {
            assert!(ROUTED.contains(from), "{from}");
            let t = ROUTED.replacen(from, to, 1);
            let e = parse(&t).unwrap_err();
            assert!(
                e.starts_with(&format!("router.toml: {want}")),
                "{e}\nwanted {want}"
            );
        }
    }

    /// Icarus insertion without headroom: a wire port that does not strip
    /// the option and whose MTU is under the inserting port's plus the
    /// option is named with the figures to fix it; one with the room, one
    /// that strips, and a routed one (the forwarding stage answers with
    /// Fragmentation Needed) are not; unknown MTUs give the rule.
    #[test]
    fn icarus_insertion_without_headroom_is_named() {
        let text = "[[interfaces]]\nname = \"a\"\n[[interfaces]]\nname = \"b\"\n\
                    [[interfaces]]\nname = \"c\"\n[[interfaces]]\nname = \"d\"\naddresses = [\"10.1.0.1/24\"]\n\
                    [[wires]]\nfrom = \"a\"\nto = \"b\"\n[icarus]\nnode_id = 1\ninsert_on = [\"a\"]\nstrip_on = [\"c\"]\n";
        let cfg = RouterConfig::from_toml_str(text, "t").unwrap();
        let mtus = |b: u32| {
            move |n: &str| match n {
                "b" => Some(b),
                _ => Some(1500),
            }
        };
        assert_eq!(
            cfg.icarus_headroom(mtus(1500)),
            [
                "icarus.insert_on: a inserts the option (20 bytes on IPv4, 24 on IPv6) and b does not strip it: \
              a packet of a's MTU (1500) leaves b up to 24 bytes over b's MTU (1500) and the kernel refuses it (msgsize); \
              give b an MTU of at least 1524, add it to icarus.strip_on, or give the hosts behind a an MTU of at most 1476"
            ]
        );
        assert!(cfg.icarus_headroom(mtus(1524)).is_empty());
        let unknown = cfg.icarus_headroom(|_| None);
        assert_eq!(unknown.len(), 1);
        assert!(
            unknown[0].contains("unless b's MTU is at least 24 bytes above a's"),
            "{unknown:?}"
        );
    }

    /// `ROUTED` with the protocol between routers on.
    fn peered() -> String {
        format!(
            "{ROUTED}\n[peering]\nrouter_id = 3\n[peering.flows]\nfpr = 0.5\n[[peering.flows.listed]]\nsrc = \"10.1.0.9\"\ndst = \"10.9.0.1\"\nprotocol = \"udp\"\ndst_port = 53\n[[peers]]\ninterface = \"r-b\"\naddress = \"10.2.0.2\"\nkey = \"s3cret\"\n"
        )
    }

    #[test]
    fn peering() {
        let c = parse(&peered()).unwrap();
        let p = c.peering_config().unwrap();
        assert_eq!((p.router_id, p.udp_port, p.depth), (3, 4784, 2));
        assert_eq!(p.peers.len(), 1);
        assert_eq!(p.peers[0].port, 1);
        assert_eq!(p.peers[0].key.as_deref(), Some(&b"s3cret"[..]));
        let f = p.flows.unwrap();
        assert_eq!(f.fpr, 0.5);
        assert_eq!(f.listed[0].to_string(), "10.1.0.9:0 -> 10.9.0.1:53 udp");
    }

    #[test]
    fn peering_errors_name_the_key() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "router_id = 3",
                "router_id = 0",
                "peering.router_id: 0 is not a router id",
            ),
            (
                "router_id = 3",
                "router_id = 3\ndepth = 0",
                "peering.depth: 0 is outside 1..=16",
            ),
            (
                "router_id = 3",
                "router_id = 3\nhold_ms = 500",
                "peering.hold_ms: 500 is not above advert_interval_ms",
            ),
            (
                "router_id = 3",
                "router_id = 3\ngroup_fpr = 1.5",
                "peering.group_fpr: 1.5 is not in (0, 1)",
            ),
            (
                "fpr = 0.5",
                "fpr = 0.5\nttl_ms = 1000",
                "peering.flows.ttl_ms: 1000 is below two exchanges",
            ),
            (
                "protocol = \"udp\"",
                "protocol = \"sctp\"",
                "peering.flows.listed[0]: protocol \"sctp\"",
            ),
            (
                "interface = \"r-b\"",
                "interface = \"w0\"",
                "peers[0].interface: \"w0\" has no addresses",
            ),
            (
                "interface = \"r-b\"",
                "interface = \"r-x\"",
                "peers[0].interface: no interface \"r-x\"",
            ),
            (
                "address = \"10.2.0.2\"\nkey",
                "address = \"10.1.0.2\"\nkey",
                "peers[0].address: 10.1.0.2 is not on a connected prefix of \"r-b\"",
            ),
            (
                "address = \"10.2.0.2\"\nkey",
                "address = \"10.2.0.1\"\nkey",
                "peers[0].address: 10.2.0.1 is this router's own address",
            ),
            (
                "key = \"s3cret\"",
                "key = \"\"",
                "peers[0].key: an empty key",
            ),
            (
                "[peering]\nrouter_id = 3",
                "[unused]\nrouter_id = 3",
                "unused",
            ),
        ];
        for (from, to, want) in cases {
            let base = peered();
            assert!(base.contains(from), "{from}");
            let t = base.replacen(from, to, 1);
            let e = parse(&t).unwrap_err();
            assert!(e.contains(want), "{e}\nwanted {want}");
        }
        // Peers without [peering].
        let t = format!("{ROUTED}\n[[peers]]\ninterface = \"r-b\"\naddress = \"10.2.0.2\"\n");
        let e = parse(&t).unwrap_err();
        assert!(
            e.contains("peers: [[peers]] needs a [peering] table"),
            "{e}"
        );
    }
}
