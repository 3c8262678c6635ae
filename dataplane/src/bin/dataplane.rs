//! The `dataplane` binary: run the router, or check a configuration.
//!
//! ```text
//! dataplane check-config router.toml
//! dataplane run --config router.toml [--stats-interval 5s] [--heavy-report FILE] [--final-report FILE]
//! dataplane completions bash     # a shell completion script
//! dataplane man                  # the manual page (roff)
//! ```
//!
//! `run` prints the counters (per interface, per stage, per drop reason) to
//! standard error every `--stats-interval`, each block headed by the time
//! (RFC 3339, UTC) and the interval's rates (in and out, pps and Mbit/s;
//! drops per second), and on exit; SIGINT or SIGTERM
//! drain the sockets, close the heavy-flow epochs, write the final report
//! and exit 0. With `[telemetry] listen` it serves `GET /metrics`
//! (`runtime::metrics`) from a thread of its own while it runs. It refuses
//! to start on an interface another router holds
//! (`runtime::lock`), and gives up every capability once its sockets are
//! open (`runtime::privileges`).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context as _;
use clap::{CommandFactory, Parser, Subcommand};
use dataplane::cli::{CompletionsArgs, ManArgs};
use dataplane::config::RouterConfig;
use dataplane::runtime::digest::DigestRoute;
use dataplane::runtime::http::Limits;
use dataplane::runtime::metrics::MetricsServer;
use dataplane::runtime::{IntervalRates, Router, RunOptions, Stats};

/// The exit statuses, as `--help` shows them.
const EXIT_STATUS: &str = "\
Exit status:
  0    done: check-config accepted the file, or run stopped on SIGINT or
       SIGTERM and wrote its final report
  1    error: the file has problems (each printed with its line and key),
       the router could not start, or a report could not be written
  64   usage: an unknown flag, a missing or malformed value (nothing was
       done)";

#[derive(Debug, Parser)]
#[command(
    name = "dataplane",
    version,
    about = "Bloomplane router dataplane",
    after_help = EXIT_STATUS
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate a configuration file without opening any socket.
    #[command(after_help = EXIT_STATUS)]
    CheckConfig {
        /// The TOML file.
        file: PathBuf,
    },
    /// Run the router.
    #[command(after_help = EXIT_STATUS)]
    Run {
        /// The TOML file.
        #[arg(long, short)]
        config: PathBuf,
        /// Print counters this often (e.g. 500ms, 5s, 1m); 0 prints only on exit.
        #[arg(long, default_value = "5s", value_parser = parse_duration)]
        stats_interval: Duration,
        /// Heavy-flow JSON lines go here ("-" for stdout), overriding `heavy.report`.
        #[arg(long)]
        heavy_report: Option<String>,
        /// Write the final counters as JSON (merged and per worker) to this file.
        #[arg(long)]
        final_report: Option<PathBuf>,
    },
    /// Print a shell completion script (bash, elvish, fish, powershell, zsh).
    Completions(CompletionsArgs),
    /// Print the manual page (roff), or a subcommand's (`man run`); --dir
    /// writes every page.
    Man(ManArgs),
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map_or((s, "s"), |i| s.split_at(i));
    let v: f64 = num
        .parse()
        .map_err(|_| format!("\"{s}\": expected a number with a unit (ms, s, m)"))?;
    let secs = match unit {
        "ms" => v / 1000.0,
        "s" => v,
        "m" => v * 60.0,
        _ => return Err(format!("\"{s}\": unknown unit \"{unit}\" (ms, s, m)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("\"{s}\": {e}"))
}

/// Writes to standard error, ignoring errors (a closed pipe must not stop
/// the router).
fn err_out(text: &str) {
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

fn main() -> ExitCode {
    let (_, cli) = dataplane::cli::parse_or_exit::<Cli>(
        Cli::command().long_version(kernels::platform::long_version(env!("CARGO_PKG_VERSION"))),
    );
    // Generated from the command line's definition; no backend needed.
    let generated = match &cli.command {
        Command::Completions(a) => Some(
            a.write(Cli::command(), &mut std::io::stdout().lock())
                .map_err(anyhow::Error::from),
        ),
        Command::Man(a) => Some(
            a.write(Cli::command(), &mut std::io::stdout().lock())
                .map_err(anyhow::Error::from),
        ),
        _ => None,
    };
    if let Some(res) = generated {
        return match res {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                err_out(&format!("dataplane: error: {e:#}\n"));
                ExitCode::FAILURE
            }
        };
    }
    // A forced backend this CPU lacks is an error before any work.
    if let Err(e) = kernels::Backend::from_env() {
        err_out(&format!(
            "dataplane: error: {}: {e}\n",
            kernels::BACKEND_ENV
        ));
        return ExitCode::FAILURE;
    }
    let res = match cli.command {
        Command::CheckConfig { file } => check(&file),
        Command::Run {
            config,
            stats_interval,
            heavy_report,
            final_report,
        } => run(&config, stats_interval, heavy_report, final_report),
        Command::Completions(_) | Command::Man(_) => Ok(()),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // A configuration's errors come one per line; each gets the prefix.
            for line in format!("{e:#}").lines() {
                err_out(&format!("dataplane: error: {line}\n"));
            }
            ExitCode::FAILURE
        }
    }
}

/// Prints the config's warnings (tc-style: valid, probably not meant),
/// the file's and this machine's.
fn warn(file: &std::path::Path, cfg: &RouterConfig) {
    for w in cfg.warnings().into_iter().chain(cfg.host_warnings()) {
        err_out(&format!("dataplane: warning: {}: {w}\n", file.display()));
    }
}

fn check(file: &std::path::Path) -> anyhow::Result<()> {
    let cfg = RouterConfig::load_for_host(file)?;
    warn(file, &cfg);
    let _ = writeln!(
        std::io::stdout().lock(),
        "{}: ok ({} interfaces, {} routed, {} wires, {} routes, {} workers{})",
        file.display(),
        cfg.interfaces.len(),
        cfg.interfaces.iter().filter(|i| i.is_routed()).count(),
        cfg.wires.len(),
        cfg.routes.len(),
        cfg.workers.resolved_count(),
        match &cfg.peering {
            Some(p) => format!(", router id {} with {} peers", p.router_id, cfg.peers.len()),
            None => String::new(),
        }
    );
    Ok(())
}

fn run(
    file: &std::path::Path,
    interval: Duration,
    heavy_report: Option<String>,
    final_report: Option<PathBuf>,
) -> anyhow::Result<()> {
    let mut cfg = RouterConfig::load_for_host(file)?;
    warn(file, &cfg);
    cfg.read_link_settings(&file.display().to_string())?;
    // Created now: a bad path fails before the run, and the router gives up
    // its capabilities once started (a root-owned directory may then be
    // out of reach).
    let mut final_out = final_report
        .map(|path| {
            std::fs::File::create(&path)
                .map(|f| (path.clone(), f))
                .map_err(|e| anyhow::anyhow!("--final-report {}: {e}", path.display()))
        })
        .transpose()?;
    // Bound before the router gives up its capabilities (a port below 1024
    // needs one); served once the workers run.
    let listener = cfg
        .telemetry
        .as_ref()
        .and_then(|t| t.listen_addr())
        .map(MetricsServer::bind)
        .transpose()?;
    // Its errors name the file: the interface or port at fault is one of
    // its keys.
    let mut router = Router::start(&cfg, &RunOptions { heavy_report })
        .with_context(|| file.display().to_string())?;
    let metrics = match listener {
        Some(l) => {
            let addr = l.local_addr();
            let digest = match (router.digests(), &cfg.digest) {
                (Some(d), Some(s)) => Some(DigestRoute::new(
                    d,
                    s.clients(),
                    s.query_rate,
                    s.query_burst,
                )),
                _ => None,
            };
            let queries = digest.is_some();
            let thread = l.spawn_with(router.snapshots_handle(), digest, Limits::default())?;
            err_out(&format!(
                "dataplane: metrics at http://{addr}/metrics (OpenMetrics)\n"
            ));
            if queries {
                err_out(&format!(
                    "dataplane: packet digests answered at http://{addr}/digest\n"
                ));
            }
            Some(thread)
        }
        None => None,
    };
    let stop = router.stop_flag();
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())?;
    }
    err_out(&format!(
        "dataplane: running ({} workers, {} ports); SIGINT/SIGTERM to stop\n",
        cfg.workers.resolved_count(),
        cfg.io.backend.name()
    ));
    let mut last = Instant::now();
    // The previous periodic snapshot, for the interval's rates.
    let mut prev = Stats::default();
    let mut failed = None;
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(50));
        // A report that cannot be written stops the router cleanly, with
        // its final counters, rather than leaving it half alive.
        if let Err(e) = router.pump_reports() {
            failed = Some(e);
            break;
        }
        let exited = router.exited_workers();
        if !exited.is_empty() {
            err_out(&format!(
                "dataplane: worker(s) {exited:?} exited unexpectedly; stopping\n"
            ));
            break;
        }
        if !interval.is_zero() && last.elapsed() >= interval {
            let secs = last.elapsed().as_secs_f64();
            last = Instant::now();
            let now = router.snapshots_handle().merged();
            let rates = IntervalRates::between(&prev, &now, secs);
            err_out(&rates.heading(SystemTime::now(), secs));
            err_out(&now.render());
            prev = now;
        }
    }
    err_out("dataplane: stopping: draining and writing the final report\n");
    if let Some(m) = metrics {
        m.stop();
    }
    let done = router.shutdown()?;
    for w in &done.workers {
        err_out(&w.render());
    }
    err_out(&done.total.render());
    for f in &done.failures {
        err_out(&format!("dataplane: {f}\n"));
    }
    if let Some((path, f)) = &mut final_out {
        let json = serde_json::json!({
            "total": done.total,
            "workers": done.workers,
            "failures": done.failures,
        });
        f.write_all(&serde_json::to_vec_pretty(&json)?)
            .map_err(|e| anyhow::anyhow!("--final-report {}: {e}", path.display()))?;
    }
    if let Some(e) = failed {
        return Err(e.into());
    }
    if !done.failures.is_empty() {
        anyhow::bail!("{}", done.failures.join("; "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        assert!(parse_duration("3h").is_err());
        assert!(parse_duration("x").is_err());
    }
}
