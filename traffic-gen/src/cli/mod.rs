//! The command line: one module per command, the exit statuses and the
//! dispatch.

use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::parser::ValueSource;
use clap::{CommandFactory, Parser, Subcommand};
use dataplane::cli::{CompletionsArgs, ManArgs};
use dataplane::config::IoBackend;
use traffic_gen::input::InputError;

use self::output::check_writable;
use self::replay::{ReplayArgs, SYNTH_ONLY, run_replay};
use self::scenario::{ScenarioCmd, run_scenario_sfb};
use self::synth::{SynthCmd, run_synth};
use self::throughput::{ThroughputArgs, run_throughput_cmd};

/// The exit statuses, as `--help` shows them.
pub(crate) const EXIT_STATUS: &str = "\
Exit status:
  0    done
  1    error: the run failed, or could not start (the message names the
       file, offset, flag or interface)
  2    replay completed with input errors: a capture had a defect part-way
       (cut short, a bad record, garbage after the data); what precedes it
       was replayed, the next file read, and each defect is in the warnings
       and the JSON report's input_errors
  64   usage: an unknown flag, a missing or malformed value, a value out of
       range, flags that exclude each other (nothing was run)
  130  replay interrupted (SIGINT/Ctrl-C or SIGTERM): the summary and the
       --json/--hgrm/--heavy-jsonl/--plot/--write outputs cover what was
       sent (a second signal a second or more later exits at once, writing
       nothing)
  141  replay -v stopped because its standard output was closed (| head),
       as tcpdump ends on SIGPIPE (128 + 13); the outputs cover what was
       sent, as at an interrupt";

/// Returns a [`Usage`] error from the enclosing function.
macro_rules! usage {
    ($($t:tt)*) => {
        return Err(Usage(format!($($t)*)).into())
    };
}

mod output;
mod replay;
mod scenario;
mod signals;
mod synth;
mod throughput;

/// How a command ended, short of an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Everything done.
    Done,
    /// Replayed up to a defect in some input file.
    InputErrors,
    /// Stopped by a signal, outputs written.
    Interrupted,
    /// `-v`'s standard output was closed: stopped as by a signal.
    OutputClosed,
}

impl Outcome {
    /// A replay's outcome: an interruption before input errors.
    pub(crate) fn of_replay(interrupted: bool, input_errors: &[InputError]) -> Self {
        if interrupted {
            Outcome::Interrupted
        } else if input_errors.is_empty() {
            Outcome::Done
        } else {
            Outcome::InputErrors
        }
    }

    pub(crate) fn exit_code(self) -> ExitCode {
        match self {
            Outcome::Done => ExitCode::SUCCESS,
            Outcome::InputErrors => ExitCode::from(2),
            Outcome::Interrupted => ExitCode::from(130),
            Outcome::OutputClosed => ExitCode::from(141),
        }
    }
}

#[derive(Debug, Parser)]
#[command(
    name = "traffic-gen",
    version,
    about = "Bloomplane traffic generator",
    after_help = EXIT_STATUS
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Replay pcap/pcapng files (or, with none, a synthetic workload)
    /// through the embedded router (--config FILE, or the built-in one) in
    /// capture time and report counters per port and stage, latency and
    /// heavy flows. A capture with a defect part-way is replayed up to it
    /// (exit status 2); a file that cannot be opened or whose header is bad
    /// fails the run before anything is sent, one of several included.
    /// Ctrl-C or SIGTERM stops, prints the summary of what was sent and
    /// writes the outputs (exit status 130).
    #[command(after_help = EXIT_STATUS)]
    Replay(Box<ReplayArgs>),
    /// Write a synthetic workload (--kind: Zipf flows, multicast, Icarus,
    /// the built-in router's) as a capture, with its ground truth beside it.
    Synth(SynthCmd),
    /// Closed-loop scenarios against the embedded dataplane in virtual time.
    #[command(subcommand)]
    Scenario(ScenarioCmd),
    /// The zero-loss rate between two live interfaces (RFC 2544 style): per
    /// frame size, a binary search of the offered rate at which at most
    /// --loss of the frames are lost; unique frames made as they are sent,
    /// sent from --tx and matched at --rx (needs CAP_NET_RAW).
    Throughput(ThroughputArgs),
    /// Where did a packet come from? Asks the router nearest the victim
    /// whether it forwarded the packet and from which port, then the
    /// routers behind those ports, hop by hop backwards (SPIE digests:
    /// the routers' [digest] tables, live on their telemetry listeners or
    /// kept by `replay --digests`).
    Traceback(traffic_gen::traceback::cli::TracebackArgs),
    /// Print a shell completion script (bash, elvish, fish, powershell, zsh).
    Completions(CompletionsArgs),
    /// Print the manual page (roff), or a subcommand's (`man replay`);
    /// --dir writes every page.
    Man(ManArgs),
}

pub(crate) fn parse_io(s: &str) -> Result<IoBackend, String> {
    s.parse()
}

pub(crate) fn run() -> Result<Outcome> {
    let (matches, cli) = dataplane::cli::parse_or_exit::<Cli>(
        Cli::command().long_version(kernels::platform::long_version(env!("CARGO_PKG_VERSION"))),
    );
    // Generated from the command line's definition; no backend needed.
    match &cli.command {
        Command::Completions(a) => {
            a.write(Cli::command(), &mut std::io::stdout().lock())?;
            return Ok(Outcome::Done);
        }
        Command::Man(a) => {
            a.write(Cli::command(), &mut std::io::stdout().lock())?;
            return Ok(Outcome::Done);
        }
        _ => {}
    }
    // A backend forced through the environment that this CPU lacks (or an
    // unknown name) is an error here, before any work, not a silent
    // fallback.
    kernels::Backend::from_env().context(kernels::BACKEND_ENV)?;
    if let Command::Synth(s) = &cli.command {
        check_writable("--output", &s.output)?;
    }
    // The synthetic workload's flags the command line gave (not defaults).
    let synth_flags: Vec<&str> = matches
        .subcommand_matches("replay")
        .map(|m| {
            SYNTH_ONLY
                .into_iter()
                .filter(|id| m.value_source(id) == Some(ValueSource::CommandLine))
                .collect()
        })
        .unwrap_or_default();
    match &cli.command {
        Command::Replay(a) => run_replay(a, &synth_flags),
        Command::Scenario(ScenarioCmd::Sfb(a)) => run_scenario_sfb(a).map(|()| Outcome::Done),
        Command::Throughput(a) => run_throughput_cmd(a).map(|()| Outcome::Done),
        Command::Synth(s) => run_synth(s).map(|()| Outcome::Done),
        Command::Traceback(a) => traffic_gen::traceback::cli::run(a).map(|()| Outcome::Done),
        Command::Completions(_) | Command::Man(_) => Ok(Outcome::Done),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cli_is_well_formed() {
        <Cli as clap::CommandFactory>::command().debug_assert();
    }
}
