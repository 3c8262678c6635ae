//! Giving up privileges once the ports are open.
//!
//! Opening a packet socket needs `CAP_NET_RAW`, and forcing its receive
//! buffer past `net.core.rmem_max` needs `CAP_NET_ADMIN`; nothing after
//! that does: sending and receiving on an open socket, `poll`, pinning a
//! thread to a core and writing to files already open are all unprivileged.
//! So [`Router::start`](super::Router::start), after opening every socket,
//! lock and report file and before starting any worker, clears every
//! capability set of the process ([`drop_all`]): bounding (while it still
//! may), ambient, inheritable, effective and permitted, and sets
//! `no_new_privs`, so neither an exec nor a set-uid file can bring them
//! back. A router that runs as root keeps uid 0 but none of root's powers;
//! one started unprivileged with `CAP_NET_RAW` and `CAP_NET_ADMIN` (file
//! capabilities from `setcap`, or ambient capabilities from systemd or
//! `setpriv`) ends with none.
//!
//! Capabilities are per thread on Linux: the sets are cleared on the
//! calling thread, and threads started afterwards inherit the empty sets.
//! The router calls this before it spawns any thread.

use std::io;

use caps::{CapSet, Capability};

/// The capability masks before and after [`drop_all`] (bit `i` is
/// capability `i`, as in `/proc/<pid>/status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dropped {
    /// The effective set before.
    pub effective_before: u64,
    /// The permitted set after (0 when everything went).
    pub permitted_after: u64,
}

/// Why capabilities could not be dropped.
#[derive(Debug, thiserror::Error)]
#[error("dropping capabilities: {what}: {err}")]
pub struct PrivilegeError {
    what: &'static str,
    err: String,
}

fn mask(set: CapSet) -> u64 {
    caps::read(None, set)
        .map(|s| s.iter().map(Capability::bitmask).fold(0, |a, b| a | b))
        .unwrap_or(0)
}

/// Clears every capability set of the calling thread and sets
/// `no_new_privs` (see the module docs).
///
/// # Errors
/// A set the kernel refused to clear (the bounding and ambient sets are
/// cleared only where the kernel and the held capabilities allow).
pub fn drop_all() -> Result<Dropped, PrivilegeError> {
    let fail = |what| {
        move |e: caps::errors::CapsError| PrivilegeError {
            what,
            err: e.to_string(),
        }
    };
    let effective_before = mask(CapSet::Effective);
    // The bounding set can only shrink with CAP_SETPCAP in effect.
    if caps::has_cap(None, CapSet::Effective, Capability::CAP_SETPCAP).unwrap_or(false) {
        caps::clear(None, CapSet::Bounding).map_err(fail("bounding set"))?;
    }
    // Ambient capabilities need Linux 4.3; an older kernel has none to clear.
    let _ = caps::clear(None, CapSet::Ambient);
    caps::clear(None, CapSet::Inheritable).map_err(fail("inheritable set"))?;
    caps::clear(None, CapSet::Effective).map_err(fail("effective set"))?;
    caps::clear(None, CapSet::Permitted).map_err(fail("permitted set"))?;
    // SAFETY: prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) takes no pointers; it
    // only sets a flag of the calling thread (inherited by later threads).
    let rc = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    if rc != 0 {
        return Err(PrivilegeError {
            what: "PR_SET_NO_NEW_PRIVS",
            err: io::Error::last_os_error().to_string(),
        });
    }
    Ok(Dropped {
        effective_before,
        permitted_after: mask(CapSet::Permitted),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a thread of its own (capabilities are per thread, and the test
    /// harness's other threads must keep theirs): afterwards the thread's
    /// status shows empty sets, whatever it had before.
    #[test]
    fn drops_every_set_on_the_calling_thread() {
        let status = std::thread::spawn(|| {
            let d = drop_all().expect("drop");
            assert_eq!(d.permitted_after, 0);
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap()
        })
        .join()
        .unwrap();
        for field in ["CapInh:", "CapPrm:", "CapEff:", "CapAmb:"] {
            let line = status.lines().find(|l| l.starts_with(field)).unwrap();
            assert!(line.ends_with("0000000000000000"), "{line}");
        }
        let nnp = status.lines().find(|l| l.starts_with("NoNewPrivs:"));
        assert_eq!(
            nnp.map(str::split_whitespace).and_then(|mut w| w.nth(1)),
            Some("1")
        );
    }
}
