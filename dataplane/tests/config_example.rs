//! The shipped example configurations parse and validate.

use std::path::Path;

use dataplane::config::RouterConfig;

#[test]
fn example_router_toml_is_valid() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/router.toml");
    let cfg = RouterConfig::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg.interfaces.len(), 3);
    assert_eq!(cfg.port_of("r-b"), Some(1));
    assert_eq!(cfg.egress_queues().len(), 1);
    assert!(cfg.heavy_config().is_some());
    assert!(cfg.icarus_config().is_some());
    assert!(cfg.multicast_config().is_some());
    let t = cfg.telemetry.as_ref().expect("[telemetry] in the example");
    assert_eq!(t.listen_addr(), Some(([127, 0, 0, 1], 9464).into()));
}

#[test]
fn lab_forwarding_toml_is_valid() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/lab-forwarding.toml");
    let cfg = RouterConfig::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg.interfaces.len(), 3);
    assert!(cfg.egress_queues().is_empty(), "nothing shaped");
    assert!(cfg.heavy_config().is_some());
    assert!(cfg.icarus_config().is_some());
    assert!(cfg.multicast_config().is_some());
}

#[test]
fn router_l3_toml_is_valid() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/router-l3.toml");
    let cfg = RouterConfig::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg.interfaces.len(), 3);
    assert!(cfg.interfaces.iter().all(|i| i.is_routed()));
    assert_eq!(cfg.routes.len(), 3);
    assert_eq!(cfg.neighbours.len(), 1);
    assert_eq!(cfg.interfaces[2].mtu, Some(1400));
    let (ok, text) = check_config(&std::fs::read_to_string(&path).unwrap(), "l3");
    assert!(ok, "{text}");
    assert!(
        text.contains("ok (3 interfaces, 3 routed, 0 wires, 3 routes, 1 workers)"),
        "{text}"
    );
}

#[test]
fn load_names_the_file() {
    let e = RouterConfig::load(Path::new("/nonexistent/router.toml")).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("/nonexistent/router.toml: cannot read"),
        "{e}"
    );
}

/// A config with `n` static groups behind the second interface (and
/// `expected_groups` when given).
fn with_static_groups(n: u32, expected: Option<u64>) -> String {
    let groups: Vec<String> = (0..n)
        .map(|i| format!("\"{}\"", std::net::Ipv4Addr::from(0xe800_0000 + i)))
        .collect();
    let mut t = format!(
        "[[interfaces]]\nname = \"x0\"\n[[interfaces]]\nname = \"x1\"\nmulticast_groups = [{}]\n[[wires]]\nfrom = \"x0\"\nto = \"x1\"\n",
        groups.join(",")
    );
    if let Some(e) = expected {
        t.push_str(&format!("[multicast]\nexpected_groups = {e}\n"));
    }
    t
}

/// `dataplane check-config` on `text`: (success, standard output and error).
fn check_config(text: &str, tag: &str) -> (bool, String) {
    let path = std::env::temp_dir().join(format!("bp-check-{}-{tag}.toml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    let out = dataplane().arg("check-config").arg(&path).output().unwrap();
    let _ = std::fs::remove_file(&path);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Runs `cmd` (the `dataplane` binary, [`dataplane`]) and expects exit
/// status 1; returns its standard error.
fn fails(cmd: &mut std::process::Command) -> String {
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    stderr
}

/// The `dataplane` binary.
fn dataplane() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_dataplane"))
}

/// 300,000 static groups (a size that once never returned) are refused
/// with the key and the limit they break; the largest accepted size is
/// built and checked (about half a second on the 2-core test machine,
/// mostly TOML parsing; not asserted here).
#[test]
fn huge_static_group_lists() {
    let (ok, text) = check_config(&with_static_groups(300_000, None), "default");
    assert!(!ok);
    assert!(
        text.contains("interfaces[1].multicast_groups: 300000 groups, more than multicast.expected_groups = 1024"),
        "{text}"
    );
    let (ok, text) = check_config(&with_static_groups(300_000, Some(300_000)), "over");
    assert!(!ok);
    assert!(
        text.contains("multicast.expected_groups: 300000 is above the limit of 262144"),
        "{text}"
    );
    let (ok, text) = check_config(&with_static_groups(262_144, Some(262_144)), "max");
    assert!(ok, "{text}");
}

/// `dataplane check-config` prints every error of a file, one per line,
/// each with the file, line and key, and exits 1.
#[test]
fn check_config_prints_every_error() {
    let dir = std::env::temp_dir().join(format!("bloomplane-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    std::fs::write(
        &path,
        "[[interfaces]]\nname = \"a\"\nrecv_buffer_bytes = 1\n\n[[interfaces]]\nname = \"b\"\n\n\
         [[wires]]\nfrom = \"a\"\nto = \"c\"\n\n[heavy]\nrows = 0\n",
    )
    .unwrap();
    let stderr = fails(dataplane().arg("check-config").arg(&path));
    let p = path.display();
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 3, "{stderr}");
    assert!(
        lines[0].starts_with(&format!(
            "dataplane: error: {p}:3: interfaces[0].recv_buffer_bytes: 1 is outside"
        )),
        "{stderr}"
    );
    assert!(
        lines[1].starts_with(&format!(
            "dataplane: error: {p}:10: wires[0].to: unknown interface \"c\""
        )),
        "{stderr}"
    );
    assert!(
        lines[2].starts_with(&format!(
            "dataplane: error: {p}:13: heavy.rows: 0 is outside"
        )),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_kernel_backend_this_cpu_lacks_stops_the_router_before_any_work() {
    let missing = if cfg!(target_arch = "aarch64") {
        "avx2"
    } else {
        "neon"
    };
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/router.toml");
    let stderr = fails(
        dataplane()
            .args(["check-config", example])
            .env("BLOOMPLANE_BACKEND", missing),
    );
    assert_eq!(
        stderr.trim_end(),
        format!(
            "dataplane: error: BLOOMPLANE_BACKEND: kernel backend {missing} is not available \
             on this CPU (available: {})",
            kernels::Backend::available_list()
                .iter()
                .map(|b| b.name())
                .collect::<Vec<_>>()
                .join(", ")
        )
    );
}

/// A configured interface this host lacks stops `run` with the file and
/// the key at fault (no root needed: the interface is looked up before any
/// socket is opened; the lock files go to a scratch directory).
#[test]
fn run_names_the_file_and_key_of_a_missing_interface() {
    let dir = std::env::temp_dir().join(format!("bloomplane-missing-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("r.toml");
    let (a, b) = (
        format!("bpq{}a", std::process::id() % 100_000),
        format!("bpq{}b", std::process::id() % 100_000),
    );
    std::fs::write(
        &path,
        format!(
            "[[interfaces]]\nname = \"{a}\"\n\n[[interfaces]]\nname = \"{b}\"\n\n\
             [[wires]]\nfrom = \"{a}\"\nto = \"{b}\"\n"
        ),
    )
    .unwrap();
    let stderr = fails(
        dataplane()
            .args(["run", "--config"])
            .arg(&path)
            .env("BLOOMPLANE_LOCK_DIR", &dir),
    );
    assert_eq!(
        stderr.trim_end(),
        format!(
            "dataplane: error: {}: interfaces[0].name: interface \"{a}\" not found",
            path.display()
        )
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Values no one can mean: what cannot work is refused, naming the key
/// and the bound (a heavy-flow share below what the sketch resolves;
/// receive buffers that may take more than the machine's memory); what
/// works but probably should not is warned about and accepted (more
/// workers than CPUs, a 1 GiB socket buffer, a share more flows can reach
/// than the flow memory holds, a sketch cleared a gigabyte a second); a
/// static group list over the filters' size is one error, under the key
/// the file uses.
#[test]
fn values_that_cannot_be_meant() {
    const TWO: &str = "[[interfaces]]\nname = \"a\"\n[[interfaces]]\nname = \"b\"\n[[wires]]\nfrom = \"a\"\nto = \"b\"\n";
    let (ok, text) = check_config(
        &format!(
            "{TWO}[heavy]\nthreshold = {{ share = 1e-300 }}\nepoch_ms = 1\nreport = \"/dev/null\"\n"
        ),
        "share",
    );
    assert!(!ok, "{text}");
    assert!(
        text.contains(
            ":9: heavy.threshold.share: 1e-300 is below what the sketch can count: with 2^18 cells a row an average cell holds 3.8e-6 of the epoch's bytes"
        ),
        "{text}"
    );
    let (ok, text) = check_config(
        "[workers]\ncount = 256\n[[interfaces]]\nname = \"a\"\nrecv_buffer_bytes = 1073741824\n\
         [[interfaces]]\nname = \"b\"\nrecv_buffer_bytes = 1073741824\n",
        "memory",
    );
    assert!(!ok, "{text}");
    assert!(
        text.contains(
            "interfaces.recv_buffer_bytes: 256 workers x 2 interfaces may hold 1048576 MiB in their receive buffers, more than the machine's"
        ),
        "{text}"
    );
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (ok, text) = check_config(
        &format!(
            "[workers]\ncount = {}\n[[interfaces]]\nname = \"a\"\nrecv_buffer_bytes = 1073741824\n\
             [[interfaces]]\nname = \"b\"\n[[wires]]\nfrom = \"a\"\nto = \"b\"\n\
             [heavy]\nthreshold = {{ share = 0.0001 }}\nepoch_ms = 1\nlog2_width = 22\nreport = \"/dev/null\"\n",
            cpus + 1
        ),
        "warn",
    );
    assert!(ok, "{text}");
    for want in [
        format!("workers.count: {} workers on the {cpus} CPUs this process may use", cpus + 1),
        "interfaces[0].recv_buffer_bytes: 1024 MiB per socket".to_string(),
        "heavy.threshold.share: up to 10000 flows can each reach 0.0001 of an epoch's bytes, more than the 4096".to_string(),
        "heavy.epoch_ms: the sketch (64 MiB: 2 rows of 2^22 cells) is cleared every 1 ms epoch".to_string(),
    ] {
        assert!(text.contains(&format!("dataplane: warning: {}", "")) && text.contains(&want), "{want}: {text}");
    }
    let (ok, text) = check_config(&with_static_groups(3, Some(2)), "twice");
    assert!(!ok);
    let errors: Vec<&str> = text.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(errors.len(), 1, "{text}");
    assert!(
        errors[0].contains(
            "interfaces[1].multicast_groups: 3 groups, more than multicast.expected_groups = 2"
        ),
        "{text}"
    );
}
