//! Live ports: one `AF_PACKET` socket per (worker, interface), bound by
//! pnet, read and written with `recvmsg(2)` and `send(2)` on its
//! descriptor; [`SocketPorts`] is a worker's set of them under the
//! [`Ports`] interface.
//!
//! [`open_socket`] opens one such socket from plain [`SocketOptions`]
//! (fanout group, receive buffer, promiscuous, qdisc bypass);
//! [`open_port`] is the router's case of it. traffic-gen's live sender and
//! receiver open their sockets here too, send with [`Port::send`] and read
//! with [`RecvBatch`] (`recvmmsg(2)`). [`kernel_drops`] reads what the
//! kernel dropped for any packet socket, this backend's and the rings'.
//!
//! pnet 0.35 (`pnet_datalink::linux::channel`) binds the socket, sets
//! promiscuous membership and `PACKET_FANOUT` from its `Config`
//! (`linux_fanout`, `promiscuous`), and accepts a socket of ours
//! (`socket_fd`). It does not set the socket receive buffer (its
//! `read_buffer_size` is the user-space buffer for one frame), and its
//! receiver drops the `sockaddr_ll` of every frame, so the packet type is
//! not visible through it. So the socket is created here, given its
//! options, and passed to pnet for binding and transmit; frames are read
//! with [`Port::recv`], which sees the packet type:
//!
//! * created with protocol 0, so it receives nothing until pnet binds it to
//!   the interface with `ETH_P_ALL` (no frame of another interface slips in);
//! * `SO_RCVBUFFORCE` when a buffer size is asked (needs `CAP_NET_ADMIN`;
//!   falls back to `SO_RCVBUF`, which `net.core.rmem_max` caps);
//! * `PACKET_IGNORE_OUTGOING` (Linux >= 4.20): the kernel should not loop
//!   the frames sent on this interface back to the socket;
//! * `PACKET_AUXDATA`: the kernel takes a frame's outer VLAN tag out before
//!   any packet socket sees it; this message gives it back, and
//!   [`Port::recv`] puts it back into the frame (found when the ring
//!   backend, which gets the tag in its frame header, forwarded the public
//!   VLAN captures with 4 more bytes per tagged frame than this one).
//!
//! **Outgoing frames are dropped here too.** A socket in a `PACKET_FANOUT`
//! group is fed by the group's own protocol hook, which does not carry the
//! member's `PACKET_IGNORE_OUTGOING`: frames that *another* socket or the
//! host stack sends out of the interface still arrive, with packet type
//! `PACKET_OUTGOING`. (The group's hook does skip frames its own members
//! sent, so the router never reads back its own transmissions.) Forwarding
//! them would let any local process inject frames into the router, and
//! two routers on the same ports would bounce a frame between them for
//! ever. [`Port::recv`] reports such a frame as [`Received::Outgoing`];
//! the worker counts and drops it. [`crate::runtime::lock`] keeps a second router
//! off the ports in the first place.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::time::Duration;

use pnet::datalink::{self, Channel, DataLinkReceiver, DataLinkSender, FanoutOption, FanoutType};

use crate::clock::{MonotonicClock, Timestamp};
use crate::io::port::{PortSettings, Ports, RxCounters};
use crate::packet::Batch;
use crate::packet::{Transmit, TxFrame};
use crate::wire::LinkType;

/// The largest frame read (a veth may hand over 64 KiB GRO frames when
/// offloads are on).
pub const READ_BUFFER: usize = 65_536 + 256;

/// Why a port could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// No such interface.
    #[error("interface \"{0}\" not found")]
    Missing(String),
    /// The interface is administratively down.
    #[error("interface \"{0}\" is down (ip link set {0} up)")]
    Down(String),
    /// `socket(AF_PACKET)` refused: no `CAP_NET_RAW`.
    #[error(
        "interface \"{0}\": cannot open a packet socket: {1} (the process needs CAP_NET_RAW: run as root or `setcap cap_net_raw,cap_net_admin+ep`)"
    )]
    Permission(String, io::Error),
    /// The kernel lacks `PACKET_IGNORE_OUTGOING`.
    #[error(
        "interface \"{0}\": PACKET_IGNORE_OUTGOING unsupported ({1}): Linux 4.20 or later is needed"
    )]
    IgnoreOutgoing(String, io::Error),
    /// Anything else, with what was being done.
    #[error("interface \"{name}\": {what}: {err}")]
    Os {
        /// The interface.
        name: String,
        /// The step that failed.
        what: &'static str,
        /// The error.
        err: io::Error,
    },
}

/// An open port of one worker.
pub struct Port {
    /// The interface name.
    pub name: String,
    /// The socket (owned by pnet; kept for `poll` and [`Port::recv`]).
    pub fd: RawFd,
    /// pnet's halves, unused (its receiver hides the packet type, its
    /// sender polls before every send) but kept: they share the socket and
    /// close it when both are gone.
    _tx: Box<dyn DataLinkSender>,
    _rx: Box<dyn DataLinkReceiver>,
    /// The receive buffer the kernel granted (`SO_RCVBUF` as read back).
    pub recv_buffer: usize,
    /// The interface's MTU when the port was opened (0: not known).
    pub mtu: u32,
    /// Sends go past the qdisc layer (`PACKET_QDISC_BYPASS` asked in
    /// [`SocketOptions`] and granted).
    pub qdisc_bypass: bool,
}

/// What one [`Port::recv`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// A frame came in: `buf[start..start + len]` (a frame longer than the
    /// buffer is cut to it), `wire_len` bytes on the wire.
    Frame {
        /// Where it starts in the buffer.
        start: usize,
        /// Bytes read.
        len: usize,
        /// Its length on the wire.
        wire_len: u32,
    },
    /// A frame this host sent out of the interface (another socket, the
    /// host stack): not input; to be counted and dropped.
    Outgoing,
    /// Nothing waiting.
    Empty,
}

/// Room left at the front of the receive buffer for a VLAN tag the kernel
/// took out of the frame.
const TAG: usize = 4;

impl Port {
    /// Reads one frame without waiting (`recvmsg(2)`, `MSG_DONTWAIT`),
    /// with its packet type. The kernel takes a frame's outer VLAN tag out
    /// before packet sockets see it and says so in the `PACKET_AUXDATA`
    /// message (`TP_STATUS_VLAN_VALID`, `tp_vlan_tci`, `tp_vlan_tpid`):
    /// the tag is put back after the MAC addresses, so the router sees and
    /// forwards the frame as it was on the wire. `buf` needs 4 bytes more
    /// than the longest frame.
    ///
    /// # Errors
    /// The OS error other than "nothing to read" (`EINTR` included: the
    /// caller retries).
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Received> {
        if buf.len() <= TAG {
            return Ok(Received::Empty);
        }
        // SAFETY: all-zero bytes are a valid `sockaddr_ll` (plain integers
        // and a byte array).
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut control = [0u64; 8];
        let room = buf.len() - TAG;
        let mut iov = libc::iovec {
            iov_base: buf[TAG..].as_mut_ptr().cast(),
            iov_len: room,
        };
        // SAFETY: all-zero bytes are a valid, empty `msghdr`.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = (&mut addr as *mut libc::sockaddr_ll).cast();
        msg.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: `self.fd` is the open packet socket pnet's halves own for
        // as long as `self` lives; every pointer in `msg` points at a live
        // local (`addr`, `iov` over `buf[TAG..]`, `control`) of the length
        // given beside it. MSG_TRUNC: the return value is the frame's full
        // length even when the buffer cut it.
        let n = unsafe { libc::recvmsg(self.fd, &mut msg, libc::MSG_DONTWAIT | libc::MSG_TRUNC) };
        if n < 0 {
            let err = io::Error::last_os_error();
            return match err.kind() {
                io::ErrorKind::WouldBlock => Ok(Received::Empty),
                _ => Err(err),
            };
        }
        if addr.sll_pkttype == libc::PACKET_OUTGOING {
            return Ok(Received::Outgoing);
        }
        let full = n as usize;
        let len = full.min(room);
        let wire_len = u32::try_from(full).unwrap_or(u32::MAX);
        match vlan_of(&msg) {
            Some((tpid, tci)) if len >= 12 => {
                // The MACs move 4 bytes forward; the tag goes after them.
                buf.copy_within(TAG..TAG + 12, 0);
                buf[12..14].copy_from_slice(&tpid.to_be_bytes());
                buf[14..16].copy_from_slice(&tci.to_be_bytes());
                Ok(Received::Frame {
                    start: 0,
                    len: len + TAG,
                    wire_len: wire_len.saturating_add(TAG as u32),
                })
            }
            _ => Ok(Received::Frame {
                start: TAG,
                len,
                wire_len,
            }),
        }
    }

    /// Sends one frame with `send(2)`, without waiting for room (a full
    /// socket queue is `EAGAIN`, a full device queue `ENOBUFS`: the
    /// caller's retry policy decides).
    ///
    /// # Errors
    /// The OS error.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        // SAFETY: `self.fd` is the open packet socket pnet's halves own for
        // as long as `self` lives; `frame` is a live byte slice and its
        // exact length is passed.
        let n = unsafe {
            libc::send(
                self.fd,
                frame.as_ptr().cast(),
                frame.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n >= 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// What the kernel dropped for this socket since the last call
    /// ([`kernel_drops`]).
    pub fn kernel_drops(&self) -> KernelDrops {
        kernel_drops(self.fd)
    }
}

/// Frames the kernel dropped for a packet socket before its reader saw
/// them, since the last reading (`PACKET_STATISTICS`; the kernel resets the
/// counts on every read).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelDrops {
    /// Frames dropped because the socket's receive queue or ring was full
    /// (`tp_drops`).
    pub dropped: u64,
    /// Times the kernel found a ring's next block still held by the reader
    /// (`tp_freeze_q_cnt`; `TPACKET_V3` rings only, else 0).
    pub frozen: u64,
}

/// Reads and resets the kernel's drop counts of packet socket `fd`
/// (`getsockopt(PACKET_STATISTICS)`): the one place every backend and
/// traffic-gen read them. A `TPACKET_V3` socket fills the whole
/// `tpacket_stats_v3`; any other fills its first part, `tpacket_stats`,
/// and the freeze count stays as zeroed. All zero when the kernel does not
/// say.
pub fn kernel_drops(fd: RawFd) -> KernelDrops {
    // SAFETY: plain data; all zeroes is a valid value.
    let mut st: libc::tpacket_stats_v3 = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tpacket_stats_v3>() as libc::socklen_t;
    // SAFETY: `st` and `len` are live and `len` holds the size of `st`, so
    // the kernel writes within it (it writes less to a socket without a
    // V3 ring, and says so in `len`); a descriptor that is not a packet
    // socket only makes the call fail.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            (&mut st as *mut libc::tpacket_stats_v3).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return KernelDrops::default();
    }
    KernelDrops {
        dropped: u64::from(st.tp_drops),
        frozen: u64::from(st.tp_freeze_q_cnt),
    }
}

/// Frames read per [`RecvBatch::recv`] call.
pub const RECV_BATCH: usize = 32;

/// Buffers for reading up to [`RECV_BATCH`] frames of up to
/// [`READ_BUFFER`] bytes from a [`Port`] with one `recvmmsg(2)` call, with
/// their addresses (for the packet type). Frames are returned as the
/// socket read them: a VLAN tag the kernel took out is not put back (no
/// control messages are read; [`Port::recv`] puts it back).
pub struct RecvBatch {
    bufs: Vec<u8>,
    addrs: Vec<libc::sockaddr_ll>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
}

impl Default for RecvBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for RecvBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBatch").finish_non_exhaustive()
    }
}

impl RecvBatch {
    /// Buffers for [`RECV_BATCH`] frames (about 2 MiB).
    pub fn new() -> Self {
        // SAFETY: sockaddr_ll, iovec and mmsghdr are plain C structs for
        // which all-zero bytes (null pointers, zero lengths) are valid.
        let (addr, iov, hdr) =
            unsafe { (std::mem::zeroed(), std::mem::zeroed(), std::mem::zeroed()) };
        RecvBatch {
            bufs: vec![0; RECV_BATCH * READ_BUFFER],
            addrs: vec![addr; RECV_BATCH],
            iovs: vec![iov; RECV_BATCH],
            hdrs: vec![hdr; RECV_BATCH],
        }
    }

    /// Reads up to [`RECV_BATCH`] frames from `port` without waiting;
    /// returns how many ([`RecvBatch::frame`] gives each).
    ///
    /// # Errors
    /// The OS error (`EAGAIN`: nothing to read; `EINTR`: the caller
    /// retries).
    pub fn recv(&mut self, port: &Port) -> io::Result<usize> {
        // The pointers are rebuilt on every call: they point into this
        // value's own vectors, which never reallocate (fixed lengths).
        let base = self.bufs.as_mut_ptr();
        for i in 0..RECV_BATCH {
            self.iovs[i] = libc::iovec {
                // SAFETY: `i * READ_BUFFER` is within `bufs`, whose length is
                // `RECV_BATCH * READ_BUFFER`.
                iov_base: unsafe { base.add(i * READ_BUFFER) }.cast(),
                iov_len: READ_BUFFER,
            };
            let h = &mut self.hdrs[i].msg_hdr;
            h.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_ll).cast();
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            h.msg_iov = &mut self.iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = std::ptr::null_mut();
            h.msg_controllen = 0;
            h.msg_flags = 0;
            self.hdrs[i].msg_len = 0;
        }
        // SAFETY: `port.fd` is the open packet socket pnet's halves own for
        // as long as `port` lives; `hdrs` holds `RECV_BATCH` initialised
        // headers whose name and iovec pointers point at live entries of
        // `addrs`, `iovs` and `bufs` with the lengths given, so the kernel
        // writes only within them; no timeout.
        let rc = unsafe {
            libc::recvmmsg(
                port.fd,
                self.hdrs.as_mut_ptr(),
                RECV_BATCH as libc::c_uint,
                libc::MSG_DONTWAIT as _,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(rc as usize)
        }
    }

    /// Frame `i` of the last call (cut to [`READ_BUFFER`]), and whether
    /// this host sent it (`PACKET_OUTGOING`) rather than received it.
    pub fn frame(&self, i: usize) -> (&[u8], bool) {
        let len = (self.hdrs[i].msg_len as usize).min(READ_BUFFER);
        let start = i * READ_BUFFER;
        let outgoing = self.addrs[i].sll_pkttype == libc::PACKET_OUTGOING;
        (&self.bufs[start..start + len], outgoing)
    }
}

/// The VLAN tag (TPID, TCI) the kernel took out of a frame, from the
/// `PACKET_AUXDATA` control message `recvmsg` filled in `msg`.
fn vlan_of(msg: &libc::msghdr) -> Option<(u16, u16)> {
    // SAFETY: `msg` was filled by recvmsg: `msg_control` points at a live
    // buffer and `msg_controllen` says how much of it the kernel wrote; the
    // CMSG_* walk stays inside that, and the aux data is read unaligned.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_PACKET
                && (*c).cmsg_type == libc::PACKET_AUXDATA
                && (*c).cmsg_len as usize
                    >= libc::CMSG_LEN(std::mem::size_of::<libc::tpacket_auxdata>() as u32) as usize
            {
                let aux: libc::tpacket_auxdata =
                    std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                if aux.tp_status & libc::TP_STATUS_VLAN_VALID == 0 {
                    return None;
                }
                let tpid = if aux.tp_status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                    aux.tp_vlan_tpid
                } else {
                    0x8100
                };
                return Some((tpid, aux.tp_vlan_tci));
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    None
}

impl std::fmt::Debug for Port {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Port")
            .field("name", &self.name)
            .field("fd", &self.fd)
            .field("recv_buffer", &self.recv_buffer)
            .finish_non_exhaustive()
    }
}

/// The MTU of interface `name`, asked through `fd` (any socket, so in its
/// network namespace) with `SIOCGIFMTU`.
///
/// # Errors
/// `ENAMETOOLONG` for a name `ifreq` cannot hold, or the ioctl's error.
pub fn interface_mtu(fd: RawFd, name: &str) -> io::Result<u32> {
    // SAFETY: ifreq is plain data; all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    let bytes = name.as_bytes();
    if bytes.len() >= req.ifr_name.len() {
        return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    for (d, &b) in req.ifr_name.iter_mut().zip(bytes) {
        *d = libc::c_char::from_ne_bytes([b]);
    }
    // SAFETY: `req` is a live ifreq naming the interface (NUL-terminated:
    // zeroed beyond the name); SIOCGIFMTU writes its `ifru_mtu` only, and
    // fails cleanly on a descriptor that is not a socket.
    let rc = unsafe { libc::ioctl(fd, libc::SIOCGIFMTU, &mut req) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFMTU succeeded, so the union holds the MTU.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    Ok(mtu.max(0) as u32)
}

/// An interface as the system lists it.
pub fn find_interface(name: &str) -> Result<datalink::NetworkInterface, PortError> {
    let ifc = datalink::interfaces()
        .into_iter()
        .find(|i| i.name == name)
        .ok_or_else(|| PortError::Missing(name.to_string()))?;
    if !ifc.is_up() {
        return Err(PortError::Down(name.to_string()));
    }
    Ok(ifc)
}

/// The fanout group id of an interface for this process: the same for every
/// worker, distinct per interface (and, very likely, per process).
pub fn fanout_group(ifindex: u32) -> u16 {
    let pid = std::process::id();
    (pid.wrapping_mul(0x9e37)
        .wrapping_add(ifindex.wrapping_mul(0x1f1f))
        & 0xffff) as u16
}

/// `setsockopt(2)` of an `int`-valued option on `fd`.
///
/// # Errors
/// The OS error.
pub fn setsockopt_int(
    fd: &OwnedFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `fd` is an open socket owned by the caller for the duration of
    // the call; the option value is a live `c_int` and the length passed is
    // exactly its size, which is what every option set here expects.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `getsockopt(2)` of an `int`-valued option on `fd`.
///
/// # Errors
/// The OS error.
pub fn getsockopt_int(
    fd: &OwnedFd,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `fd` is an open socket; `value` and `len` are live locals and
    // `len` holds the size of `value`, so the kernel writes within it.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// How [`open_socket`] sets up one packet socket, beyond what every
/// socket gets (see the module docs): plain settings, so that a caller
/// other than the router (traffic-gen's live sender and receiver) opens
/// its sockets here too.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SocketOptions {
    /// Receive frames for every MAC address.
    pub promiscuous: bool,
    /// The receive buffer asked for, bytes (`SO_RCVBUFFORCE`, or
    /// `SO_RCVBUF` without `CAP_NET_ADMIN`); `None`: the kernel's default.
    pub recv_buffer_bytes: Option<u64>,
    /// The `PACKET_FANOUT` group (hash mode) the socket joins; `None`: a
    /// socket of its own, which gets every frame of the interface.
    pub fanout: Option<u16>,
    /// Send past the qdisc layer (`PACKET_QDISC_BYPASS`) where the kernel
    /// allows it ([`Port::qdisc_bypass`] says whether it did).
    pub qdisc_bypass: bool,
}

/// Opens `cfg`'s interface for one worker, in fanout group `group` (hash mode).
pub fn open_port(cfg: &PortSettings, group: u16) -> Result<Port, PortError> {
    open_socket(
        &cfg.name,
        &SocketOptions {
            promiscuous: cfg.promiscuous,
            recv_buffer_bytes: Some(cfg.recv_buffer_bytes),
            fanout: Some(group),
            qdisc_bypass: false,
        },
    )
}

/// A new raw packet socket for interface `name` (only named in errors),
/// with protocol 0: it receives nothing until bound.
///
/// # Errors
/// No `CAP_NET_RAW` ([`PortError::Permission`]), or the OS error.
pub(crate) fn packet_socket(name: &str) -> Result<OwnedFd, PortError> {
    // SAFETY: plain socket(2) call with constant arguments; the result is
    // checked before use.
    let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        let err = io::Error::last_os_error();
        return Err(match err.raw_os_error() {
            Some(libc::EPERM | libc::EACCES) => PortError::Permission(name.to_string(), err),
            _ => PortError::Os {
                name: name.to_string(),
                what: "socket(AF_PACKET)",
                err,
            },
        });
    }
    // SAFETY: `raw` is a descriptor socket(2) just returned and nothing
    // else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Opens a packet socket on interface `name` with `opts`, in the calling
/// thread's network namespace (see the module docs for the options every
/// socket gets).
///
/// # Errors
/// A missing or down interface, no `CAP_NET_RAW`, a kernel without
/// `PACKET_IGNORE_OUTGOING`, or the step that failed (named).
pub fn open_socket(name: &str, opts: &SocketOptions) -> Result<Port, PortError> {
    let name = name.to_string();
    let ifc = find_interface(&name)?;
    let os = |what: &'static str| {
        let name = name.clone();
        move |err| PortError::Os { name, what, err }
    };

    let fd = packet_socket(&name)?;
    if let Some(bytes) = opts.recv_buffer_bytes {
        let want = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
        if setsockopt_int(&fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, want).is_err() {
            setsockopt_int(&fd, libc::SOL_SOCKET, libc::SO_RCVBUF, want)
                .map_err(os("SO_RCVBUF"))?;
        }
    }
    let recv_buffer = getsockopt_int(&fd, libc::SOL_SOCKET, libc::SO_RCVBUF)
        .map_err(os("getsockopt(SO_RCVBUF)"))? as usize;
    // For the reasons of send errors (`TxErrors`); not needed to run.
    let mtu = interface_mtu(fd.as_raw_fd(), &name).unwrap_or(0);
    setsockopt_int(&fd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, 1)
        .map_err(|e| PortError::IgnoreOutgoing(name.clone(), e))?;
    // VLAN tags the kernel takes out of frames come back in this (see
    // `Port::recv`).
    setsockopt_int(&fd, libc::SOL_PACKET, libc::PACKET_AUXDATA, 1)
        .map_err(os("setsockopt(PACKET_AUXDATA)"))?;
    // Straight to the driver: no qdisc (and no requeue) on the way.
    let qdisc_bypass = opts.qdisc_bypass
        && setsockopt_int(&fd, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, 1).is_ok();

    let raw = fd.into_raw_fd();
    let config = datalink::Config {
        // Nothing is read or written through pnet's buffers.
        write_buffer_size: 64,
        read_buffer_size: 64,
        read_timeout: Some(Duration::ZERO),
        write_timeout: Some(Duration::from_millis(10)),
        linux_fanout: opts.fanout.map(|group_id| FanoutOption {
            group_id,
            fanout_type: FanoutType::HASH,
            defrag: false,
            rollover: false,
        }),
        promiscuous: opts.promiscuous,
        socket_fd: Some(raw),
        ..datalink::Config::default()
    };
    // pnet owns `raw` from here: it closes it on failure and on drop.
    match datalink::channel(&ifc, config) {
        Ok(Channel::Ethernet(tx, rx)) => Ok(Port {
            name,
            fd: raw,
            _tx: tx,
            _rx: rx,
            recv_buffer,
            mtu,
            qdisc_bypass,
        }),
        Ok(_) => Err(PortError::Os {
            name,
            what: "pnet channel",
            err: io::Error::other("not an Ethernet channel"),
        }),
        Err(err) => Err(PortError::Os {
            name,
            what: if opts.fanout.is_some() {
                "bind/fanout"
            } else {
                "bind"
            },
            err,
        }),
    }
}

/// Longest wait in `ppoll` when every port is idle (shorter when a queued
/// copy is due sooner).
pub const IDLE_POLL: Duration = Duration::from_millis(10);

/// Waits in `ppoll(2)` until any of `fds` is readable, for at most
/// [`IDLE_POLL`] and never past `until` (nanosecond precision: `poll(2)`
/// counts whole milliseconds, which would wake a shaped queue late or
/// spin); `now` is the clock `until` is on. EINTR counts as a timeout.
/// `pollfds` is scratch space.
pub fn poll_readable(
    pollfds: &mut Vec<libc::pollfd>,
    fds: impl Iterator<Item = RawFd>,
    now: Timestamp,
    until: Option<Timestamp>,
) {
    let timeout = until.map_or(IDLE_POLL, |t| {
        IDLE_POLL.min(Duration::from_nanos(t.nanos_since(now)))
    });
    pollfds.clear();
    pollfds.extend(fds.map(|fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }));
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: timeout.subsec_nanos().into(),
    };
    // SAFETY: `pollfds` is a live, initialised array of `len()` pollfd
    // structs and `ts` a live timespec for the duration of the call; a null
    // signal mask leaves the mask alone. The caller's descriptors are open
    // (a closed one would only come back as POLLNVAL).
    unsafe {
        libc::ppoll(
            pollfds.as_mut_ptr(),
            pollfds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        );
    }
}

/// A worker's live ports: one [`Port`] per interface, read round robin (a
/// batch from one port at a time), monotonic time.
pub struct SocketPorts {
    ports: Vec<Port>,
    clock: MonotonicClock,
    next: usize,
    rx: Vec<RxCounters>,
    rx_buf: Box<[u8]>,
    pollfds: Vec<libc::pollfd>,
}

impl std::fmt::Debug for SocketPorts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SocketPorts")
            .field("ports", &self.ports)
            .field("rx", &self.rx)
            .finish_non_exhaustive()
    }
}

impl SocketPorts {
    /// The worker's ports (port `i` is `ports[i]`), on `clock` (shared by
    /// the workers, so their times compare).
    pub fn new(ports: Vec<Port>, clock: MonotonicClock) -> Self {
        let rx = ports
            .iter()
            .map(|p| {
                let mut c = RxCounters::default();
                c.tx_errors.mtu = p.mtu;
                c
            })
            .collect();
        let n = ports.len();
        SocketPorts {
            ports,
            clock,
            next: 0,
            rx,
            rx_buf: vec![0; READ_BUFFER].into_boxed_slice(),
            pollfds: Vec::with_capacity(n),
        }
    }

    /// The ports.
    pub fn ports(&self) -> &[Port] {
        &self.ports
    }

    /// Reads up to the batch's room from port `i`; returns how many.
    fn fill(&mut self, i: usize, batch: &mut Batch) -> usize {
        let mut n = 0;
        while !batch.is_full() {
            let (start, len, wire_len) = match self.ports[i].recv(&mut self.rx_buf) {
                Ok(Received::Frame {
                    start,
                    len,
                    wire_len,
                }) => (start, len, wire_len),
                Ok(Received::Empty) => break,
                Ok(Received::Outgoing) => {
                    self.rx[i].rx_outgoing_dropped += 1;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.rx[i].rx_errors += 1;
                    break;
                }
            };
            let rx = &mut self.rx[i];
            rx.rx_packets += 1;
            rx.rx_bytes += u64::from(wire_len);
            let now = self.clock.now();
            batch.push_from(
                now,
                wire_len,
                LinkType::Ethernet,
                i as u8,
                &self.rx_buf[start..start + len],
            );
            n += 1;
        }
        n
    }
}

impl Transmit for SocketPorts {
    /// `send(2)` on the port's socket; on a full socket buffer it waits up
    /// to 10 ms for room once, then counts a send error. Each error is
    /// counted by its reason ([`TxErrors`](super::port::TxErrors)).
    fn send(&mut self, f: &TxFrame<'_>) -> bool {
        let i = usize::from(f.port);
        let (Some(p), Some(c)) = (self.ports.get(i), self.rx.get_mut(i)) else {
            return false;
        };
        for attempt in 0..2 {
            let Err(err) = p.send(f.frame) else {
                return true;
            };
            let errno = err.raw_os_error().unwrap_or(0);
            let full = matches!(errno, libc::EAGAIN | libc::ENOBUFS);
            if !full || attempt == 1 {
                c.tx_errors.record(errno, f.frame.len(), 1);
                return false;
            }
            wait_writable(p.fd, 10);
        }
        false
    }
}

/// Waits at most `timeout_ms` for room to send on `fd` (`POLLOUT`), once:
/// the senders' answer to a full socket queue before they count a drop.
pub fn wait_writable(fd: RawFd, timeout_ms: i32) {
    poll_one(fd, libc::POLLOUT, timeout_ms);
}

/// Waits at most `timeout_ms` for something to read on `fd` (`POLLIN`;
/// a receive ring's socket is readable when a block is handed over).
pub fn wait_readable(fd: RawFd, timeout_ms: i32) {
    poll_one(fd, libc::POLLIN, timeout_ms);
}

/// `poll(2)` on one descriptor for `events`, at most `timeout_ms`.
fn poll_one(fd: RawFd, events: libc::c_short, timeout_ms: i32) {
    let mut pfd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: `pfd` is one live pollfd for the duration of the call; an
    // error or a closed fd only ends the wait early.
    unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
}

impl Ports for SocketPorts {
    fn recv(&mut self, batch: &mut Batch) -> usize {
        let n = self.ports.len();
        for k in 0..n {
            let i = (self.next + k) % n;
            let got = self.fill(i, batch);
            if got > 0 {
                self.next = (i + 1) % n;
                return got;
            }
        }
        0
    }

    fn now(&mut self) -> Timestamp {
        self.clock.now()
    }

    /// Waits in `ppoll(2)` for any port to be readable, for at most
    /// [`IDLE_POLL`] and never past `until` (nanosecond precision:
    /// `poll(2)` counts whole milliseconds, which would wake a shaped queue
    /// late or spin). EINTR counts as a timeout.
    fn wait(&mut self, until: Option<Timestamp>) -> bool {
        let now = self.clock.now();
        poll_readable(
            &mut self.pollfds,
            self.ports.iter().map(|p| p.fd),
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

    /// Adds each socket's queue drops since the last read
    /// ([`kernel_drops`]).
    fn refresh_counters(&mut self) {
        for (p, rx) in self.ports.iter().zip(&mut self.rx) {
            rx.rx_dropped += p.kernel_drops().dropped;
        }
    }
}
