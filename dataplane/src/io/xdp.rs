//! Live ports over AF_XDP sockets (`[io] backend = "xdp"`): frames reach
//! the router without the kernel's packet sockets, socket buffers or IP
//! stack in the way.
//!
//! On every router interface an XDP program (`dataplane/bpf/bloomplane_xdp.c`,
//! built into the object committed beside it and embedded here) runs on
//! each received frame before the kernel allocates anything for it, and
//! redirects it into the AF_XDP socket bound to the receive queue it came
//! in on. Each socket has a UMEM (one memory mapping of fixed-size frames,
//! shared with the kernel) and four rings: the router hands free frames to
//! the kernel on the fill ring, reads received ones from the RX ring, posts
//! frames to send on the TX ring and takes them back, sent, from the
//! completion ring. A worker reads its frames in place, copies each into
//! its batch and gives the frame straight back to the fill ring; a copy
//! leaving through a port is written into a free frame of that port's UMEM
//! and posted, and one `sendto(2)` per port and round asks the kernel to
//! send what was posted.
//!
//! **Waiting.** Receiving takes no system call; waiting does. With nothing
//! read, a worker sleeps in `poll(2)` until a socket has a frame. After a
//! round that read frames it sleeps [`XdpConfig::coalesce_us`] instead
//! (interrupt moderation, as a NIC's `rx-usecs`), so that at moderate
//! rates it wakes once per batch of frames rather than once per frame: on
//! the lab's veths at 200,000 frames a second, waking per frame cost the
//! router about three times the CPU per frame of the ring backend, whose
//! block timeout batches the same way.
//!
//! **Queues and workers.** A socket serves one receive queue. Worker `w`
//! of `n` binds a socket to every queue `q` of every interface with
//! `q % n == w`, so an interface needs at least as many queues as there are
//! workers (`ethtool -L IFACE combined N`, or `rx N tx N` on a veth); with
//! fewer the router refuses to start and says so. Each worker sends
//! through the socket on its first queue of each interface.
//!
//! **Modes.** The program runs in the driver (native XDP) where the driver
//! has it, else in the kernel's generic hook ([`AttachMode`]); a socket is
//! zero-copy (the NIC writes into the UMEM) where the driver supports it,
//! else the kernel copies each frame into the UMEM ([`ZeroCopy`]). The mode
//! in use is printed at start and shown on each port's line of the stats.
//!
//! **What the kernel keeps.** On a routed port (one with addresses) only
//! IPv4, IPv6, ARP and VLAN-tagged frames are the router's; anything else
//! (LLDP, STP, ...) goes on to the host's stack, which the router would
//! only have dropped. A frame on a queue no socket is bound to goes on too.
//! Both are counted per port (`rx_passed`, from the program's per-CPU
//! counters, which worker 0 reads).
//!
//! **What is counted as dropped by the kernel.** A socket's own
//! statistics (`XDP_STATISTICS`): frames dropped because its RX ring was
//! full or no free frame was on its fill ring (`rx_dropped`).
//!
//! **Privileges.** Loading the program and attaching it need `CAP_BPF` (or
//! `CAP_SYS_ADMIN`) and `CAP_NET_ADMIN`, the sockets `CAP_NET_RAW`, and
//! registering a UMEM pins its memory (`CAP_IPC_LOCK`, or a memlock limit
//! above it). All of that happens in [`XdpSetup::open`], before the router
//! drops every capability; the rings, the maps' descriptors and `sendto`
//! need none. The program is detached when the router exits (it is held
//! through a BPF link, which the kernel drops with the process).
//!
//! Not done: frames are copied out of the UMEM into the worker's batch and
//! from the batch into a UMEM frame, as on the ring backend, not lent to
//! the chain in place; frames longer than a UMEM frame (jumbo frames, which
//! need XDP multi-buffer) are refused at start.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use std::time::Duration;

use aya::maps::{MapData, PerCpuArray, XskMap};
use aya::programs::{Xdp, XdpMode};
use serde::{Deserialize, Serialize};
use xdp::slab::{HeapSlab, Slab};
use xdp::socket::{XdpSocket, XdpSocketBuilder};
use xdp::umem::{FrameSize, UmemCfgBuilder};
use xdp::{CompletionRing, FillRing, RingConfigBuilder, RxRing, TxRing, Umem};

use crate::clock::{MonotonicClock, Timestamp};
use crate::io::port::{PortSettings, Ports, RxCounters};
use crate::io::socket::poll_readable;
use crate::packet::{BATCH_SIZE, Batch};
use crate::packet::{Transmit, TxFrame};
use crate::wire::LinkType;

/// The XDP program (`dataplane/bpf/bloomplane_xdp.o`, built from the `.c`
/// beside it by `dataplane/bpf/build.sh`).
static PROGRAM: &[u8] = aya::include_bytes_aligned!("../../bpf/bloomplane_xdp.o");

/// The program's name in the object.
const PROGRAM_NAME: &str = "bloomplane_xdp";

/// Receive queues the program's socket map holds (`MAX_QUEUES` there).
pub const MAX_QUEUES: u32 = 256;

/// Copies gathered per port before a round's end sends them.
const TX_BATCH: usize = 64;

/// Received frames of one call, before they are copied into the batch:
/// at most the batch's room.
struct RxSlab {
    frames: std::collections::VecDeque<xdp::Packet>,
    room: usize,
}

impl Slab for RxSlab {
    fn available(&self) -> usize {
        self.room.saturating_sub(self.frames.len())
    }
    fn len(&self) -> usize {
        self.frames.len()
    }
    fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }
    fn push_front(&mut self, packet: xdp::Packet) -> Option<xdp::Packet> {
        if self.available() == 0 {
            return Some(packet);
        }
        self.frames.push_front(packet);
        None
    }
    fn pop_back(&mut self) -> Option<xdp::Packet> {
        self.frames.pop_back()
    }
}

/// `sendto(2)` kicks per flush at most: copy mode sends at most 32 frames
/// a call and answers `EAGAIN` when more wait.
const KICKS: usize = 8;

/// Bytes a UMEM frame leaves for the frame itself: its size less the
/// kernel's `XDP_PACKET_HEADROOM`.
const HEADROOM: u32 = 256;

/// Where the XDP program runs (`[io.xdp] attach`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AttachMode {
    /// Native where the driver has it, else generic (with a warning).
    #[default]
    Auto,
    /// In the driver, before any socket buffer is allocated; refused by a
    /// driver without XDP.
    Native,
    /// In the kernel's generic hook, after the socket buffer is built: any
    /// interface, little faster than the ring backend.
    Generic,
}

/// Whether the sockets are zero-copy (`[io.xdp] zero_copy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ZeroCopy {
    /// Zero-copy where the driver supports it, else copy.
    #[default]
    Auto,
    /// Zero-copy or refuse to start.
    On,
    /// Always copy.
    Off,
}

/// What the router does when the kernel or driver refuses AF_XDP
/// (`[io.xdp] fallback`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Fallback {
    /// Refuse to start, naming the cause.
    #[default]
    None,
    /// Run on the ring backend (`[io.ring]`), with a warning naming the
    /// cause.
    Ring,
}

/// `[io.xdp]` in the router's file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct XdpConfig {
    /// Where the program runs.
    pub attach: AttachMode,
    /// Zero-copy or copy.
    pub zero_copy: ZeroCopy,
    /// UMEM frames per socket (a power of two): half are lent to the
    /// kernel to receive into, the rest carry copies being sent.
    pub frames: u32,
    /// When AF_XDP is refused.
    pub fallback: Fallback,
    /// Receive coalescing, µs (as a NIC's `rx-usecs`): after a round
    /// that read frames, the worker sleeps this long before reading
    /// again instead of waking on the next frame, so that frames arrive in
    /// batches; 0 wakes it on every frame (least latency, most CPU).
    pub coalesce_us: u32,
}

impl Default for XdpConfig {
    /// Auto modes, 4096 frames (8 MiB of 2 KiB frames at MTU 1500), no
    /// fallback.
    fn default() -> Self {
        XdpConfig {
            attach: AttachMode::Auto,
            zero_copy: ZeroCopy::Auto,
            frames: 4096,
            fallback: Fallback::None,
            coalesce_us: 50,
        }
    }
}

/// Limits of `[io.xdp] frames`.
pub const FRAMES_RANGE: std::ops::RangeInclusive<u32> = 64..=(1 << 16);

/// Limits of `[io.xdp] coalesce_us`.
pub const COALESCE_RANGE: std::ops::RangeInclusive<u32> = 0..=10_000;

impl XdpConfig {
    /// Checks the keys; each error is the key and what is wrong.
    pub(crate) fn validate(&self, errs: &mut Vec<(String, String)>) {
        if !FRAMES_RANGE.contains(&self.frames) || !self.frames.is_power_of_two() {
            errs.push((
                "io.xdp.frames".into(),
                format!(
                    "{} is not a power of two in {}..={}",
                    self.frames,
                    FRAMES_RANGE.start(),
                    FRAMES_RANGE.end()
                ),
            ));
        }
        if !COALESCE_RANGE.contains(&self.coalesce_us) {
            errs.push((
                "io.xdp.coalesce_us".into(),
                format!(
                    "{} is outside {}..={}",
                    self.coalesce_us,
                    COALESCE_RANGE.start(),
                    COALESCE_RANGE.end()
                ),
            ));
        }
    }
}

/// How a port's frames reach the router: where its program runs and
/// whether its sockets are zero-copy (shown on the port's stats line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PortMode {
    /// `native` or `generic`.
    pub attach: &'static str,
    /// The sockets are zero-copy.
    pub zero_copy: bool,
}

impl std::fmt::Display for PortMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "xdp {} {}",
            self.attach,
            if self.zero_copy { "zero-copy" } else { "copy" }
        )
    }
}

/// Why the AF_XDP ports could not be opened. Each names the interface and
/// what the kernel or driver refused.
#[derive(Debug, thiserror::Error)]
pub enum XdpError {
    /// No such interface (or no index for it).
    #[error("interfaces[{index}] \"{name}\": no such interface")]
    Missing {
        /// Its position in `[[interfaces]]`.
        index: usize,
        /// Its name.
        name: String,
    },
    /// Fewer receive queues than workers.
    #[error(
        "interfaces[{index}] \"{name}\": {queues} receive queue(s) for {workers} workers: each worker needs a queue of its own on AF_XDP (raise them with `ethtool -L {name} combined {workers}`, or `rx {workers} tx {workers}` on a veth, or set [workers] count = {queues})"
    )]
    Queues {
        /// Its position in `[[interfaces]]`.
        index: usize,
        /// Its name.
        name: String,
        /// Its receive queues.
        queues: u32,
        /// The workers.
        workers: usize,
    },
    /// More queues than the program's socket map holds.
    #[error(
        "interfaces[{index}] \"{name}\": {queues} receive queues, more than the {MAX_QUEUES} the XDP program serves"
    )]
    TooManyQueues {
        /// Its position in `[[interfaces]]`.
        index: usize,
        /// Its name.
        name: String,
        /// Its receive queues.
        queues: u32,
    },
    /// The MTU takes frames longer than a UMEM frame.
    #[error(
        "interfaces[{index}] \"{name}\": MTU {mtu} takes frames up to {frame} bytes, more than the {max} an AF_XDP frame holds (jumbo frames need XDP multi-buffer, which the router does not use; lower the MTU or use backend = \"ring\")"
    )]
    Mtu {
        /// Its position in `[[interfaces]]`.
        index: usize,
        /// Its name.
        name: String,
        /// Its MTU.
        mtu: u32,
        /// The longest frame at that MTU (two VLAN tags).
        frame: u32,
        /// The most a frame holds.
        max: u32,
    },
    /// The program was refused (no BPF, no permission, a verifier error).
    #[error(
        "interfaces[{index}] \"{name}\": {what}: {err} (loading an XDP program needs CAP_BPF or CAP_SYS_ADMIN, and CAP_NET_ADMIN)"
    )]
    Program {
        /// Its position in `[[interfaces]]`.
        index: usize,
        /// Its name.
        name: String,
        /// The step.
        what: &'static str,
        /// The loader's error, with its causes.
        err: String,
    },
    /// The driver refused the program.
    #[error("interfaces[{index}] \"{name}\": attaching the XDP program in {mode} mode: {err}")]
    Attach {
        /// Its position in `[[interfaces]]`.
        index: usize,
        /// Its name.
        name: String,
        /// `native` or `generic`.
        mode: &'static str,
        /// The loader's error, with its causes.
        err: String,
    },
    /// A socket step the kernel refused.
    #[error("interfaces[{index}] \"{name}\" queue {queue}: {what}: {err}{hint}")]
    Socket {
        /// Its position in `[[interfaces]]`.
        index: usize,
        /// Its name.
        name: String,
        /// The receive queue.
        queue: u32,
        /// The step.
        what: &'static str,
        /// The error.
        err: String,
        /// What usually causes it.
        hint: &'static str,
    },
}

/// The error of an aya call with its causes, on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        src = c.source();
    }
    s
}

/// Receive queues of `name` (`/sys/class/net/NAME/queues/rx-*`: the
/// kernel's `real_num_rx_queues`, the queue ids a socket may bind to).
pub fn rx_queues(name: &str) -> u32 {
    std::fs::read_dir(Path::new("/sys/class/net").join(name).join("queues"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                .count() as u32
        })
        .unwrap_or(1)
        .max(1)
}

/// The MTU of `name` from sysfs.
fn mtu(name: &str) -> Option<u32> {
    std::fs::read_to_string(Path::new("/sys/class/net").join(name).join("mtu"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

/// The index of interface `name`.
fn if_index(name: &str) -> Option<u32> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (i != 0).then_some(i)
}

/// One interface's XDP program, attached, and its socket map. Held by the
/// router while it runs: dropping it detaches the program.
pub struct XdpProgram {
    /// The interface.
    pub name: String,
    /// Where the program runs and whether the sockets are zero-copy.
    pub mode: PortMode,
    /// Receive queues (each with a socket).
    pub queues: u32,
    /// The sockets by queue (kept with the program; an entry goes when its
    /// socket closes).
    _xsks: XskMap<MapData>,
    /// The program and its link.
    _ebpf: aya::Ebpf,
}

impl std::fmt::Debug for XdpProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpProgram")
            .field("name", &self.name)
            .field("mode", &self.mode)
            .field("queues", &self.queues)
            .finish_non_exhaustive()
    }
}

/// Every interface's program and every worker's ports.
#[derive(Debug)]
pub struct XdpSetup {
    /// One per interface, in port order.
    pub programs: Vec<XdpProgram>,
    /// One per worker.
    pub workers: Vec<XdpPorts>,
}

/// One socket: its UMEM, rings and counters.
struct Xsk {
    queue: u32,
    fill: FillRing,
    rx: RxRing,
    completion: CompletionRing,
    tx: TxRing,
    socket: XdpSocket,
    /// Frames on the fill ring or being received into.
    in_fill: usize,
    /// Frames kept on the fill ring.
    fill_target: usize,
    /// Frames posted to send and not completed.
    in_flight: usize,
    /// The socket's drop counts last read (they only grow).
    seen_dropped: u64,
    /// Dropped after the other fields: the rings and the socket refer to
    /// its memory.
    umem: Umem,
}

impl Xsk {
    /// Gives back frames the kernel has sent.
    fn reap(&mut self) {
        if self.in_flight > 0 {
            let n = self.completion.dequeue(&mut self.umem, self.in_flight);
            self.in_flight -= n;
        }
    }

    /// Tops the fill ring up.
    fn refill(&mut self) {
        if self.in_fill < self.fill_target {
            // SAFETY: the UMEM is registered with this socket and outlives
            // it (it is dropped after the rings and the socket).
            let n = unsafe {
                self.fill
                    .enqueue(&mut self.umem, self.fill_target - self.in_fill)
            };
            self.in_fill += n;
        }
    }

    /// Asks the kernel to send what is posted: `sendto(2)` until it has
    /// taken everything or stops making room ([`KICKS`] calls at most).
    fn kick(&mut self) {
        for _ in 0..KICKS {
            // SAFETY: a zero-length send on a socket descriptor this value
            // owns; no buffer is read.
            let rc = unsafe {
                libc::sendto(
                    self.socket.as_raw_fd(),
                    std::ptr::null(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null(),
                    0,
                )
            };
            self.reap();
            if rc >= 0 {
                return;
            }
            match io::Error::last_os_error().raw_os_error() {
                // More waits (copy mode sends a bounded number per call),
                // or the completion ring was full: go again.
                Some(libc::EAGAIN | libc::EINTR) => {}
                // The device is busy or down: what is posted goes with the
                // next kick.
                _ => return,
            }
        }
    }

    /// Frames the socket's kernel side dropped since the last call.
    fn dropped_since(&mut self) -> u64 {
        match self.socket.statistics() {
            Ok(s) => {
                let total = s.rx_dropped + s.rx_ring_full;
                let d = total.saturating_sub(self.seen_dropped);
                self.seen_dropped = total;
                d
            }
            Err(_) => 0,
        }
    }
}

/// One interface of one worker.
struct XdpPort {
    /// Its sockets (the first also sends).
    socks: Vec<Xsk>,
    /// Copies gathered for the first socket's TX ring.
    tx: HeapSlab,
    /// The longest frame a UMEM frame holds.
    max_frame: usize,
    /// The longest untagged frame the interface takes: its MTU and the
    /// Ethernet header (a VLAN-tagged frame may be 4 bytes longer), as a
    /// packet socket checks before `EMSGSIZE`. Longer ones the device
    /// would drop without a word; the router refuses them and counts them.
    mtu_frame: usize,
    /// The program's per-CPU counts of frames left to the kernel (worker 0
    /// only) and their sum last read.
    passed: Option<(PerCpuArray<MapData, u64>, u64)>,
}

impl XdpPort {
    /// Posts the gathered copies and kicks. A copy the TX ring has no room
    /// for after one kick is given back and counted.
    fn flush(&mut self, counters: &mut RxCounters) {
        let Some(s) = self.socks.first_mut() else {
            return;
        };
        if self.tx.is_empty() {
            return;
        }
        let want = self.tx.len();
        // SAFETY: every frame in the slab was allocated from this socket's
        // UMEM, which outlives the socket.
        let mut posted = unsafe { s.tx.send(&mut self.tx) };
        if posted < want {
            s.kick();
            // SAFETY: as above.
            posted += unsafe { s.tx.send(&mut self.tx) };
        }
        s.in_flight += posted;
        while let Some(p) = self.tx.pop_back() {
            counters.tx_dropped += 1;
            // The TX ring full, still after a kick: as send(2)'s EAGAIN.
            counters.tx_errors.record(libc::EAGAIN, 0, 1);
            s.umem.free_packet(p);
        }
        s.kick();
    }
}

/// One worker's ports on AF_XDP sockets (see the module docs).
pub struct XdpPorts {
    ports: Vec<XdpPort>,
    clock: MonotonicClock,
    /// The port read first next time (ports take turns).
    next: usize,
    rx: Vec<RxCounters>,
    pollfds: Vec<libc::pollfd>,
    /// Received frames of one call, before they are copied.
    slab: RxSlab,
    /// Receive coalescing (`[io.xdp] coalesce_us`).
    coalesce: Duration,
    /// Frames were read since the last [`Ports::wait`].
    busy: bool,
}

// SAFETY: the raw pointers inside (the UMEM's and the rings' mappings, and
// frames pointing into them while a call runs) refer to memory mapped by
// and for this value alone; nothing else in the process holds them. The
// value is moved to its worker's thread once and used there only through
// `&mut self`; the kernel's side of the rings is synchronised by their
// producer and consumer indices, not by the thread.
unsafe impl Send for XdpPorts {}

impl std::fmt::Debug for XdpPorts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpPorts")
            .field("ports", &self.ports.len())
            .field(
                "queues",
                &self
                    .ports
                    .iter()
                    .map(|p| p.socks.iter().map(|s| s.queue).collect::<Vec<_>>())
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// The loader's error, as [`XdpError::Program`].
fn program_err(
    index: usize,
    name: &str,
    what: &'static str,
    e: &dyn std::error::Error,
) -> XdpError {
    XdpError::Program {
        index,
        name: name.to_string(),
        what,
        err: chain(e),
    }
}

/// Loads the program for a port (routed or not), verified, not attached.
fn load(index: usize, name: &str, routed: bool) -> Result<aya::Ebpf, XdpError> {
    let routed = u32::from(routed);
    let mut ebpf = aya::EbpfLoader::new()
        .override_global("routed", &routed, true)
        .load(PROGRAM)
        .map_err(|e| program_err(index, name, "loading the XDP program", &e))?;
    let prog: &mut Xdp = ebpf
        .program_mut(PROGRAM_NAME)
        .ok_or_else(|| XdpError::Program {
            index,
            name: name.to_string(),
            what: "finding the XDP program in its object",
            err: PROGRAM_NAME.into(),
        })?
        .try_into()
        .map_err(|e| program_err(index, name, "the XDP program's type", &e))?;
    prog.load()
        .map_err(|e| program_err(index, name, "verifying the XDP program", &e))?;
    Ok(ebpf)
}

/// Attaches the loaded program to `ifindex` as `attach` asks; returns
/// where it runs.
fn attach_to(
    index: usize,
    name: &str,
    ifindex: u32,
    ebpf: &mut aya::Ebpf,
    attach: AttachMode,
) -> Result<&'static str, XdpError> {
    let prog: &mut Xdp = ebpf
        .program_mut(PROGRAM_NAME)
        .and_then(|p| p.try_into().ok())
        .ok_or_else(|| XdpError::Program {
            index,
            name: name.to_string(),
            what: "finding the XDP program in its object",
            err: PROGRAM_NAME.into(),
        })?;
    let tries: &[(XdpMode, &'static str)] = match attach {
        AttachMode::Auto => &[(XdpMode::Driver, "native"), (XdpMode::Skb, "generic")],
        AttachMode::Native => &[(XdpMode::Driver, "native")],
        AttachMode::Generic => &[(XdpMode::Skb, "generic")],
    };
    let mut last = None;
    for &(mode, label) in tries {
        match prog.attach_to_if_index(ifindex, mode) {
            Ok(_) => {
                if let Some((_, why)) = &last {
                    eprintln!(
                        "dataplane: interfaces[{index}] \"{name}\": the driver refused native XDP ({why}); running the program in generic mode (slower)"
                    );
                }
                return Ok(label);
            }
            Err(e) => last = Some((label, chain(&e))),
        }
    }
    let (mode, err) = last.unwrap_or(("native", "no mode tried".into()));
    Err(XdpError::Attach {
        index,
        name: name.to_string(),
        mode,
        err,
    })
}

/// `getsockopt(XDP_OPTIONS)`: whether the bound socket is zero-copy.
fn is_zero_copy(fd: RawFd) -> bool {
    let mut o = libc::xdp_options { flags: 0 };
    let mut len = std::mem::size_of::<libc::xdp_options>() as libc::socklen_t;
    // SAFETY: `fd` is a bound AF_XDP socket; `o` and `len` are live and
    // `len` holds the size of `o`, so the kernel writes within it.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_XDP,
            libc::XDP_OPTIONS,
            (&mut o as *mut libc::xdp_options).cast(),
            &mut len,
        )
    };
    rc == 0 && o.flags & libc::XDP_OPTIONS_ZEROCOPY != 0
}

/// One socket on queue `queue` of interface `ifindex`, its UMEM of
/// `frames` frames of `frame_size`, bound as `zc` asks; half its frames on
/// the fill ring.
fn open_socket(
    index: usize,
    name: &str,
    ifindex: u32,
    queue: u32,
    frames: u32,
    frame_size: FrameSize,
    zc: ZeroCopy,
) -> Result<Xsk, XdpError> {
    let err = |what: &'static str, hint: &'static str| {
        move |e: String| XdpError::Socket {
            index,
            name: name.to_string(),
            queue,
            what,
            err: e,
            hint,
        }
    };
    let cfg = UmemCfgBuilder {
        frame_size,
        frame_count: frames,
        ..UmemCfgBuilder::default()
    }
    .build()
    .map_err(|e| err("the UMEM's size", "")(e.to_string()))?;
    let umem = Umem::map(cfg).map_err(|e| err("mapping the UMEM", "")(e.to_string()))?;
    let mut b = XdpSocketBuilder::new().map_err(|e| {
        err(
            "opening an AF_XDP socket",
            " (a kernel with AF_XDP, and CAP_NET_RAW, are needed)",
        )(chain(&e))
    })?;
    let half = frames / 2;
    let rings = RingConfigBuilder {
        rx_count: half,
        tx_count: half,
        fill_count: half,
        completion_count: half,
    }
    .build()
    .map_err(|e| err("the rings' sizes", "")(e.to_string()))?;
    let (rings, mut flags) = b.build_rings(&umem, rings).map_err(|e| {
        err(
            "registering the UMEM and mapping its rings",
            " (the UMEM is pinned memory: CAP_IPC_LOCK, or a memlock limit above it, `ulimit -l`)",
        )(chain(&e))
    })?;
    match zc {
        ZeroCopy::Auto => {}
        ZeroCopy::On => flags.force_zerocopy(),
        ZeroCopy::Off => flags.force_copy(),
    }
    let socket = b
        .bind(xdp::nic::NicIndex::new(ifindex), queue, flags)
        .map_err(|e| {
            err(
                "binding the socket",
                if zc == ZeroCopy::On {
                    " (zero_copy = \"on\": the driver may not support zero-copy)"
                } else {
                    ""
                },
            )(chain(&e))
        })?;
    let (Some(rx), Some(tx)) = (rings.rx_ring, rings.tx_ring) else {
        return Err(err("mapping the rings", "")("no RX or TX ring".into()));
    };
    let mut s = Xsk {
        queue,
        fill: rings.fill_ring,
        rx,
        completion: rings.completion_ring,
        tx,
        socket,
        in_fill: 0,
        fill_target: half as usize,
        in_flight: 0,
        seen_dropped: 0,
        umem,
    };
    s.refill();
    Ok(s)
}

/// Whether this kernel and process can run the backend: opens an AF_XDP
/// socket and loads (without attaching) the XDP program. `Err` names what
/// was refused.
///
/// # Errors
/// No AF_XDP, no BPF, or the privileges for them.
pub fn probe() -> Result<(), XdpError> {
    XdpSocketBuilder::new().map_err(|e| XdpError::Socket {
        index: 0,
        name: "(probe)".into(),
        queue: 0,
        what: "opening an AF_XDP socket",
        err: chain(&e),
        hint: " (a kernel with AF_XDP, and CAP_NET_RAW, are needed)",
    })?;
    let mut ebpf = aya::EbpfLoader::new()
        .load(PROGRAM)
        .map_err(|e| program_err(0, "(probe)", "loading the XDP program", &e))?;
    let prog: &mut Xdp = ebpf
        .program_mut(PROGRAM_NAME)
        .and_then(|p| p.try_into().ok())
        .ok_or_else(|| XdpError::Program {
            index: 0,
            name: "(probe)".into(),
            what: "finding the XDP program in its object",
            err: PROGRAM_NAME.into(),
        })?;
    prog.load()
        .map_err(|e| program_err(0, "(probe)", "verifying the XDP program", &e))
}

impl XdpSetup {
    /// Attaches the program to every interface and opens the sockets of
    /// `workers` workers (see the module docs for the queue split).
    ///
    /// # Errors
    /// The first interface the kernel or driver refused, naming why; what
    /// was attached before it is detached again.
    pub fn open(
        interfaces: &[PortSettings],
        workers: usize,
        cfg: &XdpConfig,
        clock: MonotonicClock,
    ) -> Result<XdpSetup, XdpError> {
        let n = workers.max(1);
        let mut programs = Vec::with_capacity(interfaces.len());
        let mut per_worker: Vec<Vec<XdpPort>> = (0..n).map(|_| Vec::new()).collect();
        for (index, ifc) in interfaces.iter().enumerate() {
            let name = ifc.name.as_str();
            let ifindex = if_index(name).ok_or_else(|| XdpError::Missing {
                index,
                name: name.to_string(),
            })?;
            let queues = rx_queues(name);
            if queues > MAX_QUEUES {
                return Err(XdpError::TooManyQueues {
                    index,
                    name: name.to_string(),
                    queues,
                });
            }
            if (queues as usize) < n {
                return Err(XdpError::Queues {
                    index,
                    name: name.to_string(),
                    queues,
                    workers: n,
                });
            }
            let mtu = mtu(name).unwrap_or(1500);
            // Ethernet header and two VLAN tags.
            let frame = mtu.saturating_add(22);
            let frame_size = if frame <= 2048 - HEADROOM {
                FrameSize::TwoK
            } else if frame <= 4096 - HEADROOM {
                FrameSize::FourK
            } else {
                return Err(XdpError::Mtu {
                    index,
                    name: name.to_string(),
                    mtu,
                    frame,
                    max: 4096 - HEADROOM,
                });
            };
            let max_frame = match frame_size {
                FrameSize::TwoK => 2048 - HEADROOM,
                FrameSize::FourK => 4096 - HEADROOM,
            } as usize;
            let mut ebpf = load(index, name, ifc.routed)?;
            let mut xsks: XskMap<MapData> = ebpf
                .take_map("xsks")
                .ok_or_else(|| XdpError::Program {
                    index,
                    name: name.to_string(),
                    what: "finding the socket map",
                    err: "xsks".into(),
                })?
                .try_into()
                .map_err(|e| program_err(index, name, "the socket map's type", &e))?;
            let passed: PerCpuArray<MapData, u64> = ebpf
                .take_map("passed")
                .ok_or_else(|| XdpError::Program {
                    index,
                    name: name.to_string(),
                    what: "finding the counter map",
                    err: "passed".into(),
                })?
                .try_into()
                .map_err(|e| program_err(index, name, "the counter map's type", &e))?;
            let mut zero_copy = true;
            let mut passed = Some(passed);
            for (w, ports) in per_worker.iter_mut().enumerate() {
                let mut socks = Vec::new();
                for q in (w as u32..queues).step_by(n) {
                    let s = open_socket(
                        index,
                        name,
                        ifindex,
                        q,
                        cfg.frames,
                        frame_size,
                        cfg.zero_copy,
                    )?;
                    zero_copy &= is_zero_copy(s.socket.as_raw_fd());
                    xsks.set(q, s.socket.as_raw_fd(), 0)
                        .map_err(|e| XdpError::Socket {
                            index,
                            name: name.to_string(),
                            queue: q,
                            what: "putting the socket in the program's map",
                            err: chain(&e),
                            hint: "",
                        })?;
                    socks.push(s);
                }
                ports.push(XdpPort {
                    socks,
                    tx: HeapSlab::with_capacity(TX_BATCH),
                    max_frame,
                    mtu_frame: mtu as usize + 14,
                    passed: passed.take().map(|m| (m, 0)),
                });
            }
            // Attached once every queue has its socket: no frame arrives
            // to find none.
            let attach = attach_to(index, name, ifindex, &mut ebpf, cfg.attach)?;
            programs.push(XdpProgram {
                name: name.to_string(),
                mode: PortMode { attach, zero_copy },
                queues,
                _xsks: xsks,
                _ebpf: ebpf,
            });
        }
        let workers = per_worker
            .into_iter()
            .map(|ports| {
                let k = ports.len();
                let mut rx = vec![RxCounters::default(); k];
                for (c, p) in rx.iter_mut().zip(&programs) {
                    c.mode = Some(p.mode);
                    c.tx_errors.mtu = mtu(&p.name).unwrap_or(0);
                }
                XdpPorts {
                    ports,
                    clock,
                    next: 0,
                    rx,
                    pollfds: Vec::new(),
                    slab: RxSlab {
                        frames: std::collections::VecDeque::with_capacity(BATCH_SIZE),
                        room: 0,
                    },
                    coalesce: Duration::from_micros(u64::from(cfg.coalesce_us)),
                    busy: false,
                }
            })
            .collect();
        Ok(XdpSetup { programs, workers })
    }
}

impl XdpPorts {
    /// Reads up to the batch's room from port `i`'s sockets.
    fn fill(&mut self, i: usize, batch: &mut Batch) -> usize {
        let Some(port) = self.ports.get_mut(i) else {
            return 0;
        };
        let rx = &mut self.rx[i];
        let now = self.clock.now();
        let mut n = 0;
        for s in &mut port.socks {
            // `recv` takes at most the slab's room: the batch's.
            self.slab.room = BATCH_SIZE.saturating_sub(batch.len());
            if self.slab.room == 0 {
                break;
            }
            // SAFETY: the frames are copied and given back below, while the
            // UMEM (owned by `s`) lives.
            let got = unsafe { s.rx.recv(&s.umem, &mut self.slab) };
            s.in_fill -= got;
            while let Some(p) = self.slab.pop_back() {
                let len = p.len() as u32;
                let pushed = batch.push_from(now, len, LinkType::Ethernet, i as u8, &p);
                debug_assert!(pushed, "the slab took more than the batch's room");
                rx.rx_packets += 1;
                rx.rx_bytes += u64::from(len);
                n += 1;
                s.umem.free_packet(p);
            }
            s.refill();
        }
        n
    }
}

impl Transmit for XdpPorts {
    /// Writes the copy into a free frame of the port's UMEM and gathers it
    /// for the TX ring (posted and sent at [`Ports::flush`], or at once
    /// when 64 are waiting). A copy no frame can take (all are
    /// in flight, or it is longer than a frame) is counted as refused by
    /// the kernel (`tx_dropped`).
    fn send(&mut self, f: &TxFrame<'_>) -> bool {
        let i = usize::from(f.port);
        let (Some(p), Some(counters)) = (self.ports.get_mut(i), self.rx.get_mut(i)) else {
            return false;
        };
        // A VLAN tag's 4 bytes are allowed beyond the MTU, as a packet
        // socket allows them.
        let tagged = matches!(f.frame.get(12..14), Some([0x81, 0x00] | [0x88, 0xa8]));
        let takes = p.mtu_frame + if tagged { 4 } else { 0 };
        if f.frame.len() > p.max_frame.min(takes) {
            counters.tx_dropped += 1;
            // Longer than the interface or a UMEM frame takes: as send(2)'s
            // EMSGSIZE.
            counters.tx_errors.record(libc::EMSGSIZE, f.frame.len(), 1);
            return true;
        }
        if p.tx.available() == 0 {
            p.flush(counters);
        }
        let Some(s) = p.socks.first_mut() else {
            return false;
        };
        // SAFETY: the frame stays in this socket's UMEM, which outlives it:
        // it is posted on the socket's TX ring or given back.
        let mut frame = unsafe { s.umem.alloc() };
        if frame.is_none() {
            s.reap();
            // SAFETY: as above.
            frame = unsafe { s.umem.alloc() };
        }
        // No UMEM frame free, or no room to gather it: the socket's
        // buffers full, as send(2)'s EAGAIN.
        let Some(mut frame) = frame else {
            counters.tx_dropped += 1;
            counters.tx_errors.record(libc::EAGAIN, f.frame.len(), 1);
            return true;
        };
        if frame.append(f.frame).is_err() {
            s.umem.free_packet(frame);
            counters.tx_dropped += 1;
            counters.tx_errors.record(libc::EMSGSIZE, f.frame.len(), 1);
            return true;
        }
        if let Some(back) = p.tx.push_front(frame) {
            s.umem.free_packet(back);
            counters.tx_dropped += 1;
            counters.tx_errors.record(libc::EAGAIN, f.frame.len(), 1);
        }
        true
    }
}

impl Ports for XdpPorts {
    fn recv(&mut self, batch: &mut Batch) -> usize {
        let n = self.ports.len();
        for k in 0..n {
            let i = (self.next + k) % n;
            let got = self.fill(i, batch);
            if got > 0 {
                self.next = (i + 1) % n;
                self.busy = true;
                return got;
            }
        }
        0
    }

    fn now(&mut self) -> Timestamp {
        self.clock.now()
    }

    fn wait(&mut self, until: Option<Timestamp>) -> bool {
        self.flush();
        // Frames still in flight come back as the kernel sends them; a
        // quiet port must not keep them.
        for p in &mut self.ports {
            for s in &mut p.socks {
                s.reap();
            }
        }
        let now = self.clock.now();
        if std::mem::take(&mut self.busy) && !self.coalesce.is_zero() {
            // Frames are flowing: let the next ones gather (see
            // `coalesce_us`), as a NIC holds its interrupt.
            let left = until.map_or(self.coalesce, |t| {
                Duration::from_nanos(t.nanos_since(now)).min(self.coalesce)
            });
            std::thread::sleep(left);
            return true;
        }
        poll_readable(
            &mut self.pollfds,
            self.ports
                .iter()
                .flat_map(|p| p.socks.iter().map(|s| s.socket.as_raw_fd())),
            now,
            until,
        );
        true
    }

    fn real_time(&self) -> bool {
        true
    }

    fn rx_counters(&self) -> &[RxCounters] {
        &self.rx
    }

    fn flush(&mut self) {
        for (p, c) in self.ports.iter_mut().zip(&mut self.rx) {
            p.flush(c);
        }
    }

    fn refresh_counters(&mut self) {
        for (p, rx) in self.ports.iter_mut().zip(&mut self.rx) {
            for s in &mut p.socks {
                rx.rx_dropped += s.dropped_since();
            }
            if let Some((map, seen)) = &mut p.passed {
                let total: u64 = (0..2u32)
                    .filter_map(|k| map.get(&k, 0).ok())
                    .map(|v| v.iter().sum::<u64>())
                    .sum();
                rx.rx_passed += total.saturating_sub(*seen);
                *seen = total;
            }
        }
    }
}
