//! BPF filter expressions on replay input (`--filter 'udp and port 53'`),
//! compiled and run by libpcap itself, as tcpdump runs them.
//!
//! Why libpcap and not a Rust parser: the expression language is libpcap's
//! (`pcap-filter(7)`), with its qualifiers, VLAN and MPLS offsets and
//! link-type rules; any other compiler is a subset that disagrees with
//! tcpdump somewhere. libpcap is loaded when a filter is given (`dlopen`
//! of `libpcap.so.0.8`, Debian's `libpcap0.8`, which tcpdump and tshark
//! bring), not linked: a build needs no C library, and a run without a
//! filter never touches it. Without libpcap a filter is refused with a
//! message saying what to install.
//!
//! Each record is matched with `pcap_offline_filter` against the program
//! compiled for its link type (compiled once per link type, lazily, as a
//! pcapng file may mix them), with its captured bytes and original length,
//! exactly as `tcpdump -r FILE EXPR` matches it.

use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};

use anyhow::{Result, anyhow, bail};
use dataplane::wire::LinkType;
use libloading::Library;

/// The libpcap names tried, in order.
const LIBPCAP: [&str; 3] = ["libpcap.so.0.8", "libpcap.so.1", "libpcap.so"];

/// `PCAP_NETMASK_UNKNOWN`: `ip broadcast` cannot be compiled without one.
const NETMASK_UNKNOWN: u32 = 0xffff_ffff;

/// libpcap's `struct bpf_program`.
#[repr(C)]
struct BpfProgram {
    bf_len: c_uint,
    bf_insns: *mut c_void,
}

/// libpcap's `struct pcap_pkthdr`.
#[repr(C)]
struct PcapPkthdr {
    ts: libc::timeval,
    caplen: u32,
    len: u32,
}

type OpenDead = unsafe extern "C" fn(c_int, c_int) -> *mut c_void;
type Compile =
    unsafe extern "C" fn(*mut c_void, *mut BpfProgram, *const c_char, c_int, u32) -> c_int;
type GetErr = unsafe extern "C" fn(*mut c_void) -> *mut c_char;
type OfflineFilter = unsafe extern "C" fn(*const BpfProgram, *const PcapPkthdr, *const u8) -> c_int;
type FreeCode = unsafe extern "C" fn(*mut BpfProgram);
type Close = unsafe extern "C" fn(*mut c_void);

/// The libpcap functions used, resolved once.
struct Pcap {
    open_dead: OpenDead,
    compile: Compile,
    geterr: GetErr,
    offline_filter: OfflineFilter,
    freecode: FreeCode,
    close: Close,
    /// Keeps the library mapped while the pointers above are used.
    _lib: Library,
}

impl Pcap {
    fn load() -> Result<Pcap> {
        let mut last = None;
        for name in LIBPCAP {
            // SAFETY: loading libpcap runs its initialisers, which only set
            // up its own state; it is a C library with no Rust-side
            // invariants to break.
            match unsafe { Library::new(name) } {
                Ok(lib) => return Pcap::resolve(lib),
                Err(e) => last = Some(e),
            }
        }
        bail!(
            "--filter needs libpcap (tried {}: {}); install it (Debian: apt install libpcap0.8, which tcpdump brings)",
            LIBPCAP.join(", "),
            last.map_or_else(String::new, |e| e.to_string())
        )
    }

    fn resolve(lib: Library) -> Result<Pcap> {
        /// One symbol, copied out of its `Symbol` (the library is kept).
        ///
        /// # Safety
        /// `T` must be the C signature of `name` in libpcap.
        unsafe fn sym<T: Copy>(lib: &Library, name: &[u8]) -> Result<T> {
            // SAFETY: the caller gives the symbol's true type.
            let s = unsafe { lib.get::<T>(name) };
            s.map(|s| *s).map_err(|e| {
                anyhow!(
                    "libpcap has no {}: {e}",
                    String::from_utf8_lossy(name.strip_suffix(b"\0").unwrap_or(name))
                )
            })
        }
        // SAFETY: each type is the function's prototype in pcap/pcap.h
        // (libpcap 1.x): pcap_open_dead(int, int), pcap_compile(pcap_t *,
        // struct bpf_program *, const char *, int, bpf_u_int32),
        // pcap_geterr(pcap_t *), pcap_offline_filter(const struct
        // bpf_program *, const struct pcap_pkthdr *, const u_char *),
        // pcap_freecode(struct bpf_program *), pcap_close(pcap_t *).
        unsafe {
            Ok(Pcap {
                open_dead: sym(&lib, b"pcap_open_dead\0")?,
                compile: sym(&lib, b"pcap_compile\0")?,
                geterr: sym(&lib, b"pcap_geterr\0")?,
                offline_filter: sym(&lib, b"pcap_offline_filter\0")?,
                freecode: sym(&lib, b"pcap_freecode\0")?,
                close: sym(&lib, b"pcap_close\0")?,
                _lib: lib,
            })
        }
    }

    /// `expr` compiled for libpcap link type `dlt`.
    fn compile(&self, expr: &CStr, dlt: c_int) -> Result<BpfProgram, String> {
        // SAFETY: pcap_open_dead only allocates a handle (NULL on failure,
        // checked); the handle is closed below on every path.
        let p = unsafe { (self.open_dead)(dlt, 262_144) };
        if p.is_null() {
            return Err(format!("libpcap cannot open a handle for link type {dlt}"));
        }
        let mut prog = BpfProgram {
            bf_len: 0,
            bf_insns: std::ptr::null_mut(),
        };
        // SAFETY: `p` is a live handle, `prog` a writable bpf_program and
        // `expr` a NUL-terminated string that outlives the call.
        let rc = unsafe { (self.compile)(p, &mut prog, expr.as_ptr(), 1, NETMASK_UNKNOWN) };
        let result = if rc == 0 {
            Ok(prog)
        } else {
            // SAFETY: after a failed pcap_compile, pcap_geterr returns the
            // handle's NUL-terminated error buffer, valid until the handle
            // is closed (it is copied before).
            let msg = unsafe { CStr::from_ptr((self.geterr)(p)) };
            Err(msg.to_string_lossy().into_owned())
        };
        // SAFETY: `p` came from pcap_open_dead and is not used after this.
        unsafe { (self.close)(p) };
        result
    }
}

/// A compiled `--filter`: one BPF program per link type met.
pub struct BpfFilter {
    expr: String,
    c_expr: CString,
    pcap: Pcap,
    programs: HashMap<c_int, BpfProgram>,
}

impl std::fmt::Debug for BpfFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BpfFilter")
            .field("expr", &self.expr)
            .field("link_types", &self.programs.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// libpcap's `DLT_` value for a capture's link type (they differ from the
/// file's `LINKTYPE_` value for raw IP).
fn dlt(link: LinkType) -> c_int {
    match link {
        LinkType::Ethernet => 1,
        // LINKTYPE_RAW (101) is DLT_RAW, 12 on Linux.
        LinkType::RawIp => 12,
        LinkType::LinuxSll => 113,
        other => c_int::try_from(other.to_linktype()).unwrap_or(c_int::MAX),
    }
}

impl BpfFilter {
    /// Loads libpcap and compiles `expr` for Ethernet, so that an
    /// expression libpcap cannot compile is refused before any work.
    ///
    /// # Errors
    /// No libpcap, or libpcap's own message for the expression.
    pub fn new(expr: &str) -> Result<BpfFilter> {
        let c_expr =
            CString::new(expr).map_err(|_| anyhow!("--filter: a NUL byte in the expression"))?;
        let mut f = BpfFilter {
            expr: expr.to_string(),
            c_expr,
            pcap: Pcap::load()?,
            programs: HashMap::new(),
        };
        f.program(dlt(LinkType::Ethernet))?;
        Ok(f)
    }

    /// The expression as given.
    pub fn expr(&self) -> &str {
        &self.expr
    }

    fn program(&mut self, dlt: c_int) -> Result<&BpfProgram> {
        if !self.programs.contains_key(&dlt) {
            let prog = self
                .pcap
                .compile(&self.c_expr, dlt)
                .map_err(|e| anyhow!("--filter '{}': {e}", self.expr))?;
            self.programs.insert(dlt, prog);
        }
        self.programs
            .get(&dlt)
            .ok_or_else(|| anyhow!("--filter: no program for link type {dlt}"))
    }

    /// Whether a record (its captured bytes and original length) matches,
    /// as `tcpdump -r` decides it.
    ///
    /// # Errors
    /// The expression cannot be compiled for this record's link type (a
    /// `tcp` filter on a link type libpcap does not know).
    pub fn matches(&mut self, link: LinkType, data: &[u8], orig_len: u32) -> Result<bool> {
        let caplen = u32::try_from(data.len()).unwrap_or(u32::MAX);
        let hdr = PcapPkthdr {
            ts: libc::timeval {
                tv_sec: 0,
                tv_usec: 0,
            },
            caplen,
            len: orig_len.max(caplen),
        };
        let offline_filter = self.pcap.offline_filter;
        let prog = self.program(dlt(link))?;
        // SAFETY: `prog` is a program pcap_compile filled and not yet
        // freed; `hdr.caplen` is the length of `data`, which lives across
        // the call; libpcap's filter machine checks every load against
        // caplen.
        let rc = unsafe { offline_filter(prog, &hdr, data.as_ptr()) };
        Ok(rc != 0)
    }
}

impl Drop for BpfFilter {
    fn drop(&mut self) {
        for prog in self.programs.values_mut() {
            // SAFETY: each program was filled by pcap_compile and is freed
            // once, here, while the library is still loaded.
            unsafe { (self.pcap.freecode)(prog) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet + IPv4 + UDP frame to port `dport`.
    fn udp(dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 42];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&28u16.to_be_bytes());
        f[22] = 64;
        f[23] = 17;
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f[38..40].copy_from_slice(&8u16.to_be_bytes());
        f
    }

    #[test]
    fn matches_as_libpcap_compiles() {
        let mut f = match BpfFilter::new("udp and port 53") {
            Ok(f) => f,
            Err(e) if format!("{e:#}").contains("needs libpcap") => {
                use std::io::Write as _;
                let _ = writeln!(std::io::stderr(), "skipping: {e:#}");
                return;
            }
            Err(e) => panic!("{e:#}"),
        };
        assert!(f.matches(LinkType::Ethernet, &udp(53), 42).unwrap());
        assert!(!f.matches(LinkType::Ethernet, &udp(54), 42).unwrap());
        // Cut short: libpcap's machine rejects loads past caplen.
        assert!(!f.matches(LinkType::Ethernet, &udp(53)[..30], 42).unwrap());
        // The same packet without its Ethernet header, as raw IP.
        assert!(f.matches(LinkType::RawIp, &udp(53)[14..], 28).unwrap());
        let e = BpfFilter::new("udp and prot 53").unwrap_err();
        assert!(
            format!("{e:#}").starts_with("--filter 'udp and prot 53': "),
            "{e:#}"
        );
    }
}
