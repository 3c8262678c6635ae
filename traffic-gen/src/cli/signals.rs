//! SIGINT and SIGTERM: the first stops a run (its outputs are written), a
//! second a second or more later exits at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use anyhow::{Context, Result};

/// A second SIGINT/SIGTERM at least this long after the first exits at
/// once (status 130, no outputs). A closer one is the same request
/// delivered twice (`timeout(1)` signals the command, then its whole
/// process group) and only stops the run as the first did.
pub(crate) const SECOND_SIGNAL_NS: u64 = 1_000_000_000;

/// `CLOCK_MONOTONIC` in ns (never 0); async-signal-safe.
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime is
    // async-signal-safe (POSIX), so this may run in a signal handler.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    let ns = u64::try_from(ts.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(ts.tv_nsec).unwrap_or(0));
    ns.max(1)
}

/// A signal came at `now` (ns, not 0): whether it is a second one,
/// [`SECOND_SIGNAL_NS`] or more after the first, so the program exits at
/// once. `first` holds when the first came (0: none yet). Async-signal-safe.
pub(crate) fn exit_on_signal(first: &AtomicU64, now: u64) -> bool {
    match first.compare_exchange(0, now, Ordering::SeqCst, Ordering::SeqCst) {
        Ok(_) => false,
        Err(t) => now.saturating_sub(t) >= SECOND_SIGNAL_NS,
    }
}

/// Sets the returned flag on SIGINT and SIGTERM, so that a replay stops
/// and still reports; a second signal [`SECOND_SIGNAL_NS`] or more after
/// the first exits at once with status 130.
pub(crate) fn stop_on_signals() -> Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    // When the first signal came (0: none yet).
    let first = Arc::new(AtomicU64::new(0));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let (flag, first) = (Arc::clone(&flag), Arc::clone(&first));
        let action = move || {
            if exit_on_signal(&first, monotonic_ns()) {
                signal_hook::low_level::exit(130);
            }
            flag.store(true, Ordering::SeqCst);
        };
        // SAFETY: the action is async-signal-safe: it reads the clock with
        // clock_gettime, does atomic operations on values it owns (no
        // allocation, no lock, no panic) and may call _exit
        // (signal_hook::low_level::exit).
        unsafe { signal_hook::low_level::register(sig, action) }
            .context("cannot install a signal handler")?;
    }
    Ok(flag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_later_second_signal_exits() {
        let first = AtomicU64::new(0);
        let t = 5_000_000_000;
        assert!(!exit_on_signal(&first, t), "the first stops the run");
        assert!(!exit_on_signal(&first, t + 1_000), "the same request twice");
        assert!(!exit_on_signal(&first, t + SECOND_SIGNAL_NS - 1));
        assert!(exit_on_signal(&first, t + SECOND_SIGNAL_NS));
        // A clock that went backwards is no second request.
        assert!(!exit_on_signal(&first, t - 1));
    }

    #[test]
    fn the_monotonic_clock_is_never_zero_and_moves_forward() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(a > 0 && b >= a);
    }
}
