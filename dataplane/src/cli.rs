//! Shell completions and manual pages for the command-line tools
//! (`dataplane` and `traffic-gen`), made by clap's own generators
//! (`clap_complete`, `clap_mangen`) from each tool's command definition, so
//! they always list the flags the tool has.
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

use clap::Command;

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
    pub fn write(&self, cmd: Command, out: &mut dyn Write) -> anyhow::Result<()> {
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
                anyhow::anyhow!(
                    "man: no subcommand \"{name}\" of {} (known: {})",
                    page.get_display_name().unwrap_or(page.get_name()),
                    known.join(", ")
                )
            })?;
        }
        clap_mangen::Man::new(page.clone())
            .source(source)
            .render(out)?;
        out.flush()?;
        Ok(())
    }
}

/// Writes `cmd`'s page and each visible subcommand's into `dir`, created
/// if absent, each naming `source`; returns the files written, sorted.
fn write_pages(cmd: &Command, dir: &Path, source: &str) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)
        .map_err(|e| anyhow::anyhow!("man --dir {}: {e}", dir.display()))?;
    let mut written = Vec::new();
    let mut stack = vec![cmd.clone()];
    while let Some(c) = stack.pop() {
        stack.extend(c.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
        let path = clap_mangen::Man::new(c)
            .source(source)
            .generate_to(dir)
            .map_err(|e| anyhow::anyhow!("man --dir {}: {e}", dir.display()))?;
        written.push(path);
    }
    written.sort();
    Ok(written)
}
