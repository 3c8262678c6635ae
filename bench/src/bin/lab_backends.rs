//! The live router's port backends side by side in the namespace lab, in
//! one run: for each of `pnet`, `ring` and `xdp` (one worker, the lab's
//! forwarding router `dataplane/examples/lab-forwarding.toml`), the
//! zero-loss rate `traffic-gen throughput` finds at each frame size, and
//! the CPU the router spends per forwarded frame while `traffic-gen replay`
//! offers a fixed rate of unique 64-byte frames from host A to host B.
//!
//! CPU is read twice around the fixed-rate replay: the router's own time
//! on a CPU (every thread's `/proc/PID/task/TID/schedstat`, in ns), and
//! the whole machine's busy time (`/proc/stat`: everything but idle and
//! iowait, all CPUs). The second matters on veth: the sending side's
//! softirq, where the receiving veth's XDP program and its copy into the
//! UMEM run, is charged to whichever task sent, not to the router.
//!
//! Needs root and the release binaries (`cargo build --release -p
//! dataplane -p traffic-gen`); brings up its own lab (`scripts/lab.sh`,
//! prefix `bpb`, MTU 3000 so that 1518-byte frames fit on every backend)
//! and takes it down. The rounds run the backends in turn, so that a
//! machine that slows down in the middle slows all of them.
//!
//! ```sh
//! sudo target/release/lab_backends --rounds 2 --json lab-backends.json
//! ```

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use serde::Serialize;

#[derive(Parser, Debug)]
#[command(about = "The live router's port backends side by side in the namespace lab")]
struct Args {
    /// Backends, in the order each round runs them.
    #[arg(long, value_delimiter = ',', default_value = "pnet,ring,xdp")]
    backends: Vec<String>,
    /// Frame sizes of the zero-loss search (`traffic-gen throughput --size`).
    #[arg(long, default_value = "64,1518")]
    sizes: String,
    /// Length of each trial of the search.
    #[arg(long, default_value = "2s")]
    duration: String,
    /// The fixed rate of the CPU measurement, frames per second.
    #[arg(long, default_value_t = 200_000)]
    pps: u32,
    /// Unique 64-byte frames the CPU measurement replays.
    #[arg(long, default_value_t = 1_000_000)]
    frames: u64,
    /// Rounds (each runs every backend once).
    #[arg(long, default_value_t = 1)]
    rounds: u32,
    /// Where `dataplane` and `traffic-gen` are (default: target/release).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// The lab's namespace prefix.
    #[arg(long, default_value = "bpb")]
    prefix: String,
    /// Write every figure here as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// The router (default: dataplane/examples/lab-forwarding.toml); each
    /// run appends its `[io] backend`.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Extra keys for `[io.xdp]` (e.g. `coalesce_us = 0`), on xdp runs.
    #[arg(long)]
    xdp: Option<String>,
    /// Host B receives in a NAPI thread of its own (GRO on and
    /// `/sys/class/net/eth0/threaded` = 1 on B's end): the router's sends
    /// then no longer run B's receive path in the router's system calls,
    /// as they do on a plain veth, so the router's CPU is the router's.
    #[arg(long)]
    threaded_receiver: bool,
}

/// One backend's figures in one round.
#[derive(Debug, Serialize)]
struct Row {
    backend: String,
    round: u32,
    /// (frame size, zero-loss rate in frames per second).
    zero_loss: Vec<(u64, f64)>,
    /// Frames B received in the fixed-rate replay.
    received: u64,
    /// Frames A sent in it.
    sent: u64,
    /// The router's CPU time per received frame, ns.
    router_ns_per_frame: f64,
    /// The machine's busy time (all CPUs) per received frame, ns.
    machine_ns_per_frame: f64,
    /// The router's start line for the first port (its mode).
    mode: String,
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs `cmd`, failing with its output when it fails.
fn run(cmd: &mut Command, what: &str) -> Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("{what}: could not start"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!(
            "{what} failed ({}):\n{stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(stdout)
}

/// The sum of every thread's time on a CPU, ns.
fn task_ns(pid: u32) -> u64 {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    dir.filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// The machine's busy clock ticks (all CPUs): user, nice, system, irq,
/// softirq and steal.
fn busy_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(cpu) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return 0;
    };
    let v: Vec<u64> = cpu
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal
    [0, 1, 2, 5, 6, 7].iter().filter_map(|&i| v.get(i)).sum()
}

fn clock_ticks() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100)
}

struct Lab {
    prefix: String,
}

impl Lab {
    fn up(prefix: &str) -> Result<Lab> {
        run(
            Command::new("bash")
                .arg(workspace().join("scripts/lab.sh"))
                .arg("up")
                .env("LAB_PREFIX", prefix)
                .env("LAB_MTU", "3000"),
            "lab.sh up",
        )?;
        Ok(Lab {
            prefix: prefix.to_string(),
        })
    }

    fn ns(&self, h: &str) -> String {
        format!("{}-{h}", self.prefix)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(workspace().join("scripts/lab.sh"))
            .arg("down")
            .env("LAB_PREFIX", &self.prefix)
            .output();
    }
}

/// The router, stopped with SIGTERM when dropped.
struct Router {
    child: Child,
}

impl Router {
    fn start(lab: &Lab, bin: &Path, config: &Path, err: &Path) -> Result<(Router, String)> {
        let child = Command::new("ip")
            .args(["netns", "exec", &lab.ns("r")])
            .arg(bin)
            .args(["run", "--stats-interval", "0", "--config"])
            .arg(config)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(err)?)
            .spawn()
            .context("start the router")?;
        let mut r = Router { child };
        let t0 = Instant::now();
        loop {
            let text = std::fs::read_to_string(err).unwrap_or_default();
            if text.contains("dataplane: running (") {
                let mode = text
                    .lines()
                    .find(|l| l.starts_with("dataplane: r-a: "))
                    .unwrap_or_default()
                    .trim_start_matches("dataplane: r-a: ")
                    .to_string();
                return Ok((r, mode));
            }
            if let Some(st) = r.child.try_wait()? {
                bail!("the router exited ({st}):\n{text}");
            }
            if t0.elapsed() > Duration::from_secs(10) {
                bail!("the router did not start within 10 s:\n{text}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn json(path: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read(path).with_context(|| format!("{}", path.display()))?;
    Ok(serde_json::from_slice(&text)?)
}

fn main() -> Result<()> {
    let args = Args::parse();
    let uid = std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1).map(str::to_string))
        .unwrap_or_default();
    if uid != "0" {
        bail!("needs root (network namespaces, packet sockets, XDP)");
    }
    let bins = args
        .bin_dir
        .clone()
        .unwrap_or_else(|| workspace().join("target/release"));
    let (dp, tg) = (bins.join("dataplane"), bins.join("traffic-gen"));
    for b in [&dp, &tg] {
        if !b.is_file() {
            bail!(
                "{} missing: cargo build --release -p dataplane -p traffic-gen",
                b.display()
            );
        }
    }
    let dir = std::env::temp_dir().join(format!("{}-lab-backends", args.prefix));
    std::fs::create_dir_all(&dir)?;
    let pcap = dir.join("uniq64.pcap");
    run(
        Command::new(&tg)
            .args(["synth", "-o"])
            .arg(&pcap)
            .args(["--packets", &args.frames.to_string()])
            .args([
                "--flows", "1024", "--size", "64", "--zipf-s", "0", "--unique",
            ]),
        "traffic-gen synth",
    )?;
    let base_path = args
        .config
        .clone()
        .unwrap_or_else(|| workspace().join("dataplane/examples/lab-forwarding.toml"));
    let base =
        std::fs::read_to_string(&base_path).with_context(|| format!("{}", base_path.display()))?;
    let tick_ns = 1e9 / clock_ticks() as f64;
    let lab = Lab::up(&args.prefix)?;
    if args.threaded_receiver {
        run(
            Command::new("ip")
                .args(["netns", "exec", &lab.ns("b")])
                .args(["ethtool", "-K", "eth0", "gro", "on"]),
            "ethtool -K eth0 gro on (host B)",
        )?;
        run(
            Command::new("ip")
                .args(["netns", "exec", &lab.ns("b")])
                .args(["sh", "-c", "echo 1 > /sys/class/net/eth0/threaded"]),
            "threaded NAPI on host B's eth0",
        )?;
    }
    let mut rows = Vec::new();
    for round in 1..=args.rounds {
        for backend in &args.backends {
            let cfg = dir.join(format!("{backend}.toml"));
            let mut text = format!("{base}\n[io]\nbackend = \"{backend}\"\n");
            if let (Some(x), "xdp") = (&args.xdp, backend.as_str()) {
                text.push_str(&format!("\n[io.xdp]\n{x}\n"));
            }
            std::fs::write(&cfg, text)?;
            let err = dir.join(format!("{backend}-{round}.err"));
            let (router, mode) = Router::start(&lab, &dp, &cfg, &err)?;
            eprintln!("lab_backends: round {round}: {backend}: {mode}");
            // The zero-loss search.
            let tp = dir.join(format!("throughput-{backend}-{round}.json"));
            run(
                Command::new(&tg)
                    .arg("throughput")
                    .args(["--tx", "eth0", "--tx-netns", &lab.ns("a")])
                    .args(["--rx", "eth0", "--rx-netns", &lab.ns("b")])
                    .args(["--io", "ring", "--size", &args.sizes])
                    .args(["--duration", &args.duration])
                    .arg("--json")
                    .arg(&tp),
                "traffic-gen throughput",
            )?;
            let t = json(&tp)?;
            let zero_loss: Vec<(u64, f64)> = t["results"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|r| {
                            (
                                r["size"].as_u64().unwrap_or(0),
                                r["zero_loss"]["offered_pps"].as_f64().unwrap_or(0.0),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            // CPU per frame at a fixed rate.
            let rp = dir.join(format!("replay-{backend}-{round}.json"));
            let (task0, busy0) = (task_ns(router.pid()), busy_ticks());
            run(
                Command::new(&tg)
                    .arg("replay")
                    .args(["--tx", "eth0", "--tx-netns", &lab.ns("a")])
                    .args(["--rx", "eth0", "--rx-netns", &lab.ns("b")])
                    .args(["--io", "ring", "--pps", &args.pps.to_string(), "--preload"])
                    .arg("--json")
                    .arg(&rp)
                    .arg(&pcap),
                "traffic-gen replay",
            )?;
            let (task1, busy1) = (task_ns(router.pid()), busy_ticks());
            drop(router);
            let r = json(&rp)?;
            let received = r["rx"]["received"].as_u64().unwrap_or(0);
            let sent = r["sent"].as_u64().unwrap_or(0);
            let per = |x: f64| x / received.max(1) as f64;
            let row = Row {
                backend: backend.clone(),
                round,
                zero_loss,
                received,
                sent,
                router_ns_per_frame: per((task1 - task0) as f64),
                machine_ns_per_frame: per((busy1 - busy0) as f64 * tick_ns),
                mode,
            };
            eprintln!("lab_backends: {row:?}");
            rows.push(row);
        }
    }
    drop(lab);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .unwrap_or("unknown")
        .trim()
        .to_string();
    println!(
        "{cpu}, {} CPUs; one worker{}; zero-loss: traffic-gen throughput --io ring --size {} --duration {}; \
         CPU: traffic-gen replay --io ring --pps {} of {} unique 64-byte frames",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        if args.threaded_receiver {
            "; host B receives in its own NAPI thread"
        } else {
            ""
        },
        args.sizes,
        args.duration,
        args.pps,
        args.frames
    );
    println!();
    let sizes: Vec<u64> = rows
        .first()
        .map(|r| r.zero_loss.iter().map(|z| z.0).collect())
        .unwrap_or_default();
    let mut head = String::from("| router | round |");
    for s in &sizes {
        head.push_str(&format!(" {s} B zero-loss |"));
    }
    head.push_str(" router CPU per frame | machine CPU per frame | received of sent |");
    println!("{head}");
    println!("|{}", "---|".repeat(head.matches('|').count() - 1));
    for r in &rows {
        let mut line = format!("| {} ({}) | {} |", r.backend, r.mode, r.round);
        for z in &r.zero_loss {
            line.push_str(&format!(" {:.0} pps |", z.1));
        }
        line.push_str(&format!(
            " {:.0} ns | {:.0} ns | {} of {} |",
            r.router_ns_per_frame, r.machine_ns_per_frame, r.received, r.sent
        ));
        println!("{line}");
    }
    // Medians per backend, and xdp against the others.
    let median = |b: &str, f: &dyn Fn(&Row) -> f64| {
        let mut v: Vec<f64> = rows.iter().filter(|r| r.backend == b).map(f).collect();
        v.sort_by(f64::total_cmp);
        // An even count: the mean of the middle two (with two rounds, not
        // the larger one).
        match v.len() {
            0 => None,
            n if n % 2 == 0 => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
            n => Some(v[n / 2]),
        }
    };
    println!();
    for other in ["ring", "pnet"] {
        if let (Some(x), Some(o)) = (
            median("xdp", &|r| r.router_ns_per_frame),
            median(other, &|r| r.router_ns_per_frame),
        ) {
            let (mx, mo) = (
                median("xdp", &|r| r.machine_ns_per_frame).unwrap_or(0.0),
                median(other, &|r| r.machine_ns_per_frame).unwrap_or(0.0),
            );
            println!(
                "xdp against {other}: router CPU per frame {:.2}x ({x:.0} against {o:.0} ns), machine {:.2}x ({mx:.0} against {mo:.0} ns)",
                x / o,
                mx / mo.max(1.0)
            );
        }
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&rows)?)?;
    }
    Ok(())
}
