//! `traffic-gen`: replay captures through the embedded dataplane, or write
//! synthetic ones. Run `traffic-gen --help`.
//!
//! Results are never thrown away: output files are created before a run
//! (a bad path fails at once, naming the flag), a capture with a defect
//! part-way is replayed up to it (exit status 2), and Ctrl-C or SIGTERM
//! during `replay` stops the sending, prints the summary and writes the
//! outputs of what was done (exit status 130).

use std::process::ExitCode;

use dataplane::cli::EXIT_USAGE;
use traffic_gen::Usage;

mod cli;

fn main() -> ExitCode {
    match cli::run() {
        Ok(outcome) => outcome.exit_code(),
        Err(e) => {
            // A configuration's errors come one per line; each gets the prefix.
            for line in format!("{e:#}").lines() {
                eprintln!("traffic-gen: error: {line}");
            }
            if e.downcast_ref::<Usage>().is_some() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
