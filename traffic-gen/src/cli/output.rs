//! Output files of a command: checked before the run, written after it, each
//! announced with a `wrote FILE` line.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Creates the file `path` of `flag`, naming both when it cannot.
pub(crate) fn create_file(flag: &str, path: &Path) -> Result<File> {
    File::create(path).with_context(|| format!("{flag} {}: cannot create", path.display()))
}

/// Checks that the output file `path` of `flag` can be written, without
/// leaving a file behind (the writer creates it once the settings are
/// checked): a bad path fails at once, naming the flag and the path.
pub(crate) fn check_writable(flag: &str, path: &Path) -> Result<()> {
    let existed = path.exists();
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .with_context(|| format!("{flag} {}: cannot create", path.display()))?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// An output file of a run: checked before it ([`Output::check`]), so
/// that a bad path fails at once, and created when the results are
/// written, so that a run that fails leaves a file of that name as it was
/// (a previous run's results) or absent, not empty.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Output<'p> {
    pub(crate) flag: &'static str,
    pub(crate) path: &'p Path,
}

impl<'p> Output<'p> {
    /// [`check_writable`] on `path`, if given.
    pub(crate) fn check(flag: &'static str, path: Option<&'p Path>) -> Result<Option<Self>> {
        path.map(|path| check_writable(flag, path).map(|()| Output { flag, path }))
            .transpose()
    }

    /// Creates (or truncates) the file.
    pub(crate) fn create(&self) -> Result<File> {
        create_file(self.flag, self.path)
    }
}

/// Writes `value` as JSON into `out`; returns the path written.
pub(crate) fn write_json(
    out: Option<Output<'_>>,
    value: &impl serde::Serialize,
) -> Result<Option<PathBuf>> {
    let Some(o) = out else { return Ok(None) };
    let (p, f) = (o.path, o.create()?);
    let mut w = std::io::BufWriter::new(f);
    serde_json::to_writer_pretty(&mut w, value)
        .map_err(std::io::Error::from)
        .and_then(|()| w.flush())
        .with_context(|| format!("{}: write failed", p.display()))?;
    Ok(Some(p.to_path_buf()))
}

/// A `wrote FILE` line for each output file a command wrote (as the
/// replay's `--write` captures are listed), after its summary; a reader
/// gone from standard output is no error.
pub(crate) fn print_written(out: &mut impl Write, files: &[PathBuf]) -> Result<()> {
    for f in files {
        quiet_on_closed_pipe(writeln!(out, "wrote {}", f.display()))?;
    }
    Ok(())
}

/// A summary written into a pipe its reader closed (`| head`) is not an
/// error: like Unix tools, the run ends with its own status, the files it
/// wrote complete.
pub(crate) fn quiet_on_closed_pipe(r: std::io::Result<()>) -> std::io::Result<()> {
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}
