//! One router per interface: an advisory lock per port.
//!
//! Two routers reading and writing the same ports forward each other's
//! transmissions (each sees the other's frames as input), so a handful of
//! frames becomes an endless storm. [`Router::start`](super::Router::start)
//! therefore takes an exclusive `flock(2)` on one file per interface before
//! it opens any socket, and keeps it for its whole life; the kernel drops
//! the lock when the process ends, however it ends, so a crashed router
//! never leaves a stale lock behind (only a file, which the next router
//! locks again). A router that stops cleanly removes its files: it
//! unlinks each while it still holds its lock, and a router that locks a
//! file checks that the file is still the one the path names (else it
//! locked a file unlinked since it opened it, and opens the path again),
//! so two routers never each hold a lock on a different file of one name.
//!
//! The file is `bloomplane-net<ns>-<interface>.lock` in `/run/lock` (where
//! every user may create files; else the temporary directory; the
//! `BLOOMPLANE_LOCK_DIR` environment variable overrides both), `<ns>`
//! being the inode of the network namespace, since interface names are
//! per namespace. The holder writes its pid and command line into it; a
//! router refused the lock names the holder, found in `/proc/locks` (the
//! kernel's own record, so right even if the file's text is stale) or else
//! in the file.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Why an interface could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds the interface.
    #[error(
        "interface \"{interface}\" is in use by another router: {holder} (lock file {}); stop it first",
        path.display()
    )]
    InUse {
        /// The interface.
        interface: String,
        /// Who holds it (pid and command line, as far as known).
        holder: String,
        /// The lock file.
        path: PathBuf,
    },
    /// The lock file could not be opened or locked.
    #[error("interface \"{interface}\": lock file {}: {err}", path.display())]
    Io {
        /// The interface.
        interface: String,
        /// The lock file.
        path: PathBuf,
        /// The error.
        err: io::Error,
    },
}

/// A held interface lock; released, and its file removed, when dropped
/// (released only, when the process ends otherwise).
#[derive(Debug)]
pub struct InterfaceLock {
    interface: String,
    path: PathBuf,
    file: File,
}

impl Drop for InterfaceLock {
    /// Removes the file while the lock is still held (see the module
    /// docs), if the path still names it; then closing it releases the
    /// lock.
    fn drop(&mut self) {
        if same_file(&self.file, &self.path) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Whether `path` names the file `file` has open.
fn same_file(file: &File, path: &Path) -> bool {
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Attempts at a lock whose file another router removed meanwhile.
const LOCK_TRIES: usize = 8;

impl InterfaceLock {
    /// Locks `interface` of the current network namespace for this
    /// process, with its lock file in the default directory (see the module
    /// docs).
    ///
    /// # Errors
    /// [`LockError::InUse`] naming the holder, or [`LockError::Io`].
    pub fn acquire(interface: &str) -> Result<InterfaceLock, LockError> {
        Self::acquire_in(&lock_dir(), interface)
    }

    /// [`acquire`](Self::acquire) with the lock file in `dir`.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub fn acquire_in(dir: &Path, interface: &str) -> Result<InterfaceLock, LockError> {
        let path = dir.join(format!(
            "bloomplane-net{}-{interface}.lock",
            netns_inode().unwrap_or(0)
        ));
        let io_err = |err| LockError::Io {
            interface: interface.to_string(),
            path: path.clone(),
            err,
        };
        let mut tries = 0;
        let (mut file, writable) = loop {
            let (file, writable) = Self::lock_file(interface, &path)?;
            // The file may have been unlinked by its last holder between
            // our open and our lock: then the path names another file (or
            // none), and this lock guards nothing.
            if same_file(&file, &path) {
                break (file, writable);
            }
            tries += 1;
            if tries == LOCK_TRIES {
                return Err(io_err(io::Error::other(
                    "the lock file keeps being removed and re-created by another process",
                )));
            }
        };
        if writable {
            let me = format!("pid {} ({})\n", std::process::id(), cmdline("self"));
            file.set_len(0)
                .and_then(|()| file.rewind())
                .and_then(|()| file.write_all(me.as_bytes()))
                .map_err(io_err)?;
        }
        Ok(InterfaceLock {
            interface: interface.to_string(),
            path,
            file,
        })
    }

    /// Opens `path` (creating it) and locks it: the file and whether it
    /// is writable.
    fn lock_file(interface: &str, path: &Path) -> Result<(File, bool), LockError> {
        let io_err = |err| LockError::Io {
            interface: interface.to_string(),
            path: path.to_path_buf(),
            err,
        };
        // Read-write to record the holder; a file another user created
        // (mode 0644) can still be locked read-only.
        let (mut file, writable) = match OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .open(path)
        {
            Ok(f) => (f, true),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                (File::open(path).map_err(io_err)?, false)
            }
            Err(e) => return Err(io_err(e)),
        };
        match file.try_lock() {
            Ok(()) => Ok((file, writable)),
            Err(std::fs::TryLockError::WouldBlock) => Err(LockError::InUse {
                interface: interface.to_string(),
                holder: holder(&mut file),
                path: path.to_path_buf(),
            }),
            Err(std::fs::TryLockError::Error(e)) => Err(io_err(e)),
        }
    }

    /// The interface.
    pub fn interface(&self) -> &str {
        &self.interface
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Locks every interface in `names`, in order; on a refusal the locks
/// already taken are released.
///
/// # Errors
/// The first interface that could not be locked.
pub fn lock_all<'a>(
    names: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<InterfaceLock>, LockError> {
    lock_all_in(&lock_dir(), names)
}

/// [`lock_all`] with the lock files in `dir`.
///
/// # Errors
/// As [`lock_all`].
pub fn lock_all_in<'a>(
    dir: &Path,
    names: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<InterfaceLock>, LockError> {
    names
        .into_iter()
        .map(|n| InterfaceLock::acquire_in(dir, n))
        .collect()
}

/// Where lock files go (see the module docs).
pub fn lock_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("BLOOMPLANE_LOCK_DIR") {
        return PathBuf::from(d);
    }
    let run_lock = Path::new("/run/lock");
    if run_lock.is_dir() {
        run_lock.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// The inode of this process's network namespace.
fn netns_inode() -> Option<u64> {
    std::fs::metadata("/proc/self/ns/net").ok().map(|m| m.ino())
}

/// `/proc/<pid>/cmdline` with spaces for NULs ("?" if unreadable).
fn cmdline(pid: &str) -> String {
    match std::fs::read(format!("/proc/{pid}/cmdline")) {
        Ok(b) if !b.is_empty() => String::from_utf8_lossy(&b)
            .trim_end_matches('\0')
            .replace('\0', " "),
        _ => "?".to_string(),
    }
}

/// Who holds the lock on `file`: the pid `/proc/locks` gives for its inode,
/// else what the holder wrote into the file.
fn holder(file: &mut File) -> String {
    let ino = file.metadata().map(|m| m.ino()).ok();
    let from_proc = ino.and_then(|ino| {
        let locks = std::fs::read_to_string("/proc/locks").ok()?;
        locks.lines().find_map(|l| lock_holder(l, ino))
    });
    if let Some(pid) = from_proc {
        return format!("pid {pid} ({})", cmdline(&pid.to_string()));
    }
    let mut text = String::new();
    let _ = file.read_to_string(&mut text);
    match text.trim() {
        "" => "a process that did not say who it is".to_string(),
        t => format!("{t} (as it recorded)"),
    }
}

/// The pid of a `/proc/locks` line that holds a lock on inode `ino`:
/// `1: FLOCK  ADVISORY  WRITE 1234 00:1a:5678 0 EOF`.
fn lock_holder(line: &str, ino: u64) -> Option<u32> {
    let f: Vec<&str> = line.split_whitespace().collect();
    // A waiter's line has "->" after the index; it holds nothing.
    if f.get(1) == Some(&"->") {
        return None;
    }
    let pid = f.get(4)?.parse().ok()?;
    let file_ino: u64 = f.get(5)?.rsplit(':').next()?.parse().ok()?;
    (file_ino == ino).then_some(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_locks_lines() {
        let l = "1: FLOCK  ADVISORY  WRITE 9316 00:19:1234 0 EOF";
        assert_eq!(lock_holder(l, 1234), Some(9316));
        assert_eq!(lock_holder(l, 1235), None);
        assert_eq!(
            lock_holder("1: -> FLOCK  ADVISORY  WRITE 77 00:19:1234 0 EOF", 1234),
            None
        );
        assert_eq!(lock_holder("garbage", 1), None);
    }

    /// A second lock on the same interface is refused while the first is
    /// held (flock locks belong to the open file, so this works within one
    /// process), names this process, and succeeds once the first is gone.
    #[test]
    fn second_lock_is_refused_and_names_the_holder() {
        let dir = std::env::temp_dir().join(format!("bp-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let acquire = |n| InterfaceLock::acquire_in(&dir, n);
        let first = acquire("bp-test0").unwrap();
        assert!(first.path().starts_with(&dir));
        let e = acquire("bp-test0").unwrap_err().to_string();
        let me = format!("pid {} (", std::process::id());
        assert!(e.contains("interface \"bp-test0\" is in use"), "{e}");
        assert!(e.contains(&me), "{e}");
        let all = lock_all_in(&dir, ["bp-test1", "bp-test0"])
            .unwrap_err()
            .to_string();
        assert!(all.contains("bp-test0"), "{all}");
        // bp-test1's lock was released with the failed call.
        drop(acquire("bp-test1").unwrap());
        drop(first);
        let again = acquire("bp-test0").unwrap();
        assert_eq!(again.interface(), "bp-test0");
        let text = std::fs::read_to_string(again.path()).unwrap();
        assert!(text.starts_with(&me), "{text}");
        drop(again);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A lock released (the router stopped cleanly) leaves no file behind
    /// in the lock directory; one held still has its file.
    #[test]
    fn a_released_lock_removes_its_file() {
        let dir = std::env::temp_dir().join(format!("bp-lock-clean-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let locks = lock_all_in(&dir, ["bp-test3", "bp-test4"]).unwrap();
        let paths: Vec<PathBuf> = locks.iter().map(|l| l.path().to_path_buf()).collect();
        assert!(paths.iter().all(|p| p.exists()));
        drop(locks);
        assert!(paths.iter().all(|p| !p.exists()), "{paths:?}");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A lock taken on a file its holder removed before the lock was
    /// granted guards nothing: the path is opened again, and the lock
    /// taken on the file the path names.
    #[test]
    fn a_removed_file_is_not_locked() {
        let dir = std::env::temp_dir().join(format!("bp-lock-rm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let first = InterfaceLock::acquire_in(&dir, "bp-test2").unwrap();
        let path = first.path().to_path_buf();
        // A second router opened the file, then the first released it.
        let stale = File::open(&path).unwrap();
        drop(first);
        assert!(!path.exists());
        assert!(!same_file(&stale, &path));
        let second = InterfaceLock::acquire_in(&dir, "bp-test2").unwrap();
        assert!(same_file(&second.file, &path));
        drop(second);
        assert!(!path.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
