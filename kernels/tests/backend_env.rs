//! `BLOOMPLANE_BACKEND` forces a backend, and asking for one the CPU lacks
//! (or an unknown name) is a clear error. Each case re-runs this test binary
//! in a child process with the variable set, because changing the
//! environment of a running multi-threaded test process is unsound.

use std::io::Write as _;
use std::process::Command;

use kernels::{Backend, BackendError, Hasher};

const CHILD: &str = "BLOOMPLANE_TEST_CHILD_EXPECT";

/// What the child checks, given what the parent expects.
fn child(expect: &str) {
    let env = Backend::from_env();
    match expect {
        "unset" => assert_eq!(env, Ok(None)),
        "unknown" => {
            let err = env.unwrap_err();
            assert!(matches!(err, BackendError::UnknownName(_)));
            assert!(
                err.to_string()
                    .contains("expected one of scalar, avx2, avx512, neon"),
                "{err}"
            );
            // The library falls back to detection; programs reject at start-up.
            assert_eq!(Backend::active(), Backend::best());
        }
        "unavailable" => {
            let err = env.unwrap_err();
            assert!(matches!(err, BackendError::Unavailable(_)), "{err:?}");
            assert!(
                err.to_string().contains("not available on this CPU"),
                "{err}"
            );
            assert_eq!(Backend::active(), Backend::best());
        }
        name => {
            let b: Backend = name.parse().unwrap();
            assert_eq!(env, Ok(Some(b)));
            assert_eq!(Backend::active(), b);
            assert_eq!(Hasher::with_seed(1).backend(), b);
        }
    }
}

fn run_child(value: Option<&str>, expect: &str) {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(exe);
    cmd.args([
        "--exact",
        "backend_from_environment",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD, expect);
    match value {
        Some(v) => cmd.env("BLOOMPLANE_BACKEND", v),
        None => cmd.env_remove("BLOOMPLANE_BACKEND"),
    };
    let out = cmd.output().expect("re-running the test binary");
    assert!(
        out.status.success(),
        "child with BLOOMPLANE_BACKEND={value:?} expecting {expect} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The child must really have run the check, not filtered it out.
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 passed"));
}

#[test]
fn backend_from_environment() {
    if let Ok(expect) = std::env::var(CHILD) {
        child(&expect);
        return;
    }
    // Under qemu user emulation a child process of the test binary may not
    // start (no binfmt_misc); probe once and skip with the reason if so.
    let probe = Command::new(std::env::current_exe().unwrap())
        .args(["--list", "--exact", "backend_from_environment"])
        .output();
    match probe {
        Ok(o) if String::from_utf8_lossy(&o.stdout).contains("backend_from_environment") => {}
        other => {
            let _ = writeln!(
                std::io::stderr(),
                "skipping: this test binary cannot be re-run as a child process: {other:?}"
            );
            return;
        }
    }
    run_child(None, "unset");
    run_child(Some("sse9"), "unknown");
    for b in Backend::ALL {
        if b.is_available() {
            run_child(Some(b.name()), b.name());
        } else {
            run_child(Some(b.name()), "unavailable");
        }
    }
}
