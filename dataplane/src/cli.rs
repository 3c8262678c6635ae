//! What the command-line tools (`dataplane` and `traffic-gen`) share: the
//! exit status of a command line that cannot be run ([`EXIT_USAGE`],
//! [`parse_or_exit`]), and shell completions and manual pages, made by
//! clap's own generators (`clap_complete`, `clap_mangen`) from each tool's
//! command definition, so they always list the flags the tool has.
//!
//! Each tool has two subcommands built on this module:
//!
//! ```text
//! dataplane completions bash > /usr/share/bash-completion/completions/dataplane
//! dataplane man > dataplane.1              # the tool's page
//! traffic-gen man replay                   # one subcommand's page
//! traffic-gen man --dir man/               # every page, one file each
//! ```
//!
//! ```
//! use clap::{CommandFactory, Parser};
//! use dataplane::cli::{CompletionsArgs, ManArgs};
//!
//! #[derive(Parser)]
//! #[command(name = "tool")]
//! enum Cli {
//!     /// Do the work.
//!     Work,
//! }
//!
//! let mut script = Vec::new();
//! CompletionsArgs { shell: clap_complete::Shell::Bash }
//!     .write(Cli::command(), &mut script)
//!     .unwrap();
//! assert!(String::from_utf8(script).unwrap().contains("work"));
//!
//! let mut page = Vec::new();
//! ManArgs { command: vec!["work".into()], dir: None }
//!     .write(Cli::command(), &mut page)
//!     .unwrap();
//! let page = String::from_utf8(page).unwrap();
//! assert!(page.lines().any(|l| l.starts_with(".TH tool-work 1")));
//! ```

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{ArgMatches, Command, FromArgMatches};

/// The exit status of a command line that cannot be run as written: an
/// unknown flag, a missing or malformed value, a value out of its range,
/// flags that exclude each other (`EX_USAGE` of `sysexits.h`). clap's own
/// default for these, 2, is left to the tools' own meanings
/// (`traffic-gen replay`: completed with input errors).
pub const EXIT_USAGE: u8 = 64;

/// Parses the process's arguments with `cmd` into `T`. `--help` and
/// `--version` print and exit 0; a usage error prints clap's message
/// (naming the flag, with a hint) and exits with [`EXIT_USAGE`].
pub fn parse_or_exit<T: FromArgMatches>(cmd: Command) -> (ArgMatches, T) {
    let matches = cmd.try_get_matches().unwrap_or_else(|e| exit_for(&e));
    let parsed = T::from_arg_matches(&matches).unwrap_or_else(|e| exit_for(&e));
    (matches, parsed)
}

/// Prints `e` where clap would (help and version on standard output) and
/// exits: 0 for help and version, [`EXIT_USAGE`] for an error.
fn exit_for(e: &clap::Error) -> ! {
    // Printing can only fail on a closed stream; the status says the rest.
    let _ = e.print();
    if e.use_stderr() {
        std::process::exit(i32::from(EXIT_USAGE))
    }
    std::process::exit(0)
}

/// `completions SHELL`: a completion script on standard output.
#[derive(Debug, Clone, clap::Args)]
pub struct CompletionsArgs {
    /// The shell: bash, elvish, fish, powershell or zsh.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

impl CompletionsArgs {
    /// Writes the completion script of `cmd` for the shell into `out`.
    ///
    /// # Errors
    /// Writing fails.
    pub fn write(&self, mut cmd: Command, out: &mut dyn Write) -> std::io::Result<()> {
        let name = cmd.get_name().to_string();
        let mut script = Vec::new();
        clap_complete::generate(self.shell, &mut cmd, name, &mut script);
        out.write_all(&script)?;
        out.flush()
    }
}

/// `man [COMMAND]...`: a manual page (roff) on standard output, or every
/// page into a directory.
#[derive(Debug, Clone, clap::Args)]
pub struct ManArgs {
    /// The subcommand whose page to print (`replay`, `scenario sfb`);
    /// none: the tool's own page.
    #[arg(value_name = "COMMAND")]
    pub command: Vec<String>,
    /// Write the tool's page and one per subcommand into DIR
    /// (`TOOL.1`, `TOOL-SUBCOMMAND.1`, ...) instead.
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    pub dir: Option<PathBuf>,
}

impl ManArgs {
    /// Does what the arguments ask with `cmd`'s pages: writes the page into
    /// `out`, or every page into the directory (naming each file written
    /// into `out`).
    ///
    /// # Errors
    /// An unknown subcommand, or writing fails.
    pub fn write(&self, cmd: Command, out: &mut dyn Write) -> Result<(), ManError> {
        let mut cmd = cmd.disable_help_subcommand(true);
        // Gives subcommands their display names (`tool-sub`), as their
        // pages are titled and named.
        cmd.build();
        // Every page's footer names the tool and its version.
        let source = format!(
            "{} {}",
            cmd.get_name(),
            cmd.get_version().unwrap_or_default()
        );
        if let Some(dir) = &self.dir {
            for path in write_pages(&cmd, dir, &source)? {
                writeln!(out, "wrote {}", path.display())?;
            }
            return Ok(());
        }
        let mut page = &cmd;
        for name in &self.command {
            page = page.find_subcommand(name).ok_or_else(|| {
                let known: Vec<&str> = page
                    .get_subcommands()
                    .filter(|s| !s.is_hide_set())
                    .map(Command::get_name)
                    .collect();
                ManError::UnknownSubcommand {
                    name: name.clone(),
                    of: page
                        .get_display_name()
                        .unwrap_or(page.get_name())
                        .to_string(),
                    known: known.join(", "),
                }
            })?;
        }
        clap_mangen::Man::new(page.clone())
            .source(source)
            .render(out)?;
        out.flush()?;
        Ok(())
    }
}

/// Why `man` could not write a page.
#[derive(Debug, thiserror::Error)]
pub enum ManError {
    /// A subcommand the tool does not have.
    #[error("man: no subcommand \"{name}\" of {of} (known: {known})")]
    UnknownSubcommand {
        /// The name asked for.
        name: String,
        /// The command it was looked up in.
        of: String,
        /// Its visible subcommands, comma-separated.
        known: String,
    },
    /// The directory of `--dir`, or a page in it, could not be written.
    #[error("man --dir {}: {err}", dir.display())]
    Dir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        err: std::io::Error,
    },
    /// Writing the page failed.
    #[error(transparent)]
    Write(#[from] std::io::Error),
}

/// Writes `cmd`'s page and each visible subcommand's into `dir`, created
/// if absent, each naming `source`; returns the files written, sorted.
fn write_pages(cmd: &Command, dir: &Path, source: &str) -> Result<Vec<PathBuf>, ManError> {
    let in_dir = |err| ManError::Dir {
        dir: dir.to_path_buf(),
        err,
    };
    std::fs::create_dir_all(dir).map_err(in_dir)?;
    let mut written = Vec::new();
    let mut stack = vec![cmd.clone()];
    while let Some(c) = stack.pop() {
        stack.extend(c.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
        let path = clap_mangen::Man::new(c)
            .source(source)
            .generate_to(dir)
            .map_err(in_dir)?;
        written.push(path);
    }
    written.sort();
    Ok(written)
}
