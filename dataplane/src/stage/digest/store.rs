//! Windows kept on disk: `traffic-gen replay --digests DIR` writes a
//! router's rings when the replay ends, and `traffic-gen traceback
//! --digests DIR` (or a topology file naming DIR) queries them as it would
//! ask the router.
//!
//! A directory holds `digests.json`, which describes the router and each
//! window, and one file per window, `w<worker>-<id>.bloom`, the window's
//! filter in the kernels' raw transfer form ([`Bloom::to_bytes`]: a
//! versioned header with the geometry and the hash key's id, then the
//! bits). The seed of the hash key is in `digests.json`: whoever can read
//! the directory can compute digests (keep it as private as the capture).
//! Times are the replay's, capture time in Unix ns.
//!
//! Reading checks everything against everything: the JSON's shape
//! (errors name the file and the field, `workers[0].windows[3].digests`),
//! each filter's header (a [`kernels::bloom::DecodeError`] names the
//! file), its geometry and key against the JSON's, and the window's load
//! against its capacity.

use std::path::{Path, PathBuf};

use kernels::Hasher;
use kernels::bloom::{Bloom, Layout, Params, SPLIT_BLOCK_K};

use super::query::{Digests, TimeBase};
use super::ring::{Geometry, Ring, WindowMeta};
use super::{SharedRing, lock};

/// The name of the description file.
pub const INDEX: &str = "digests.json";
/// The format's name, in [`INDEX`].
pub const FORMAT: &str = "bloomplane-digests";
/// The format's version.
pub const VERSION: u32 = 1;

/// A kept directory's description ([`INDEX`]).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Index {
    /// [`FORMAT`].
    pub format: String,
    /// [`VERSION`].
    pub version: u32,
    /// The router's ports, in order.
    pub ports: Vec<String>,
    /// The hash key's seed.
    pub seed: u64,
    /// The window length, ns.
    pub window_ns: u64,
    /// Filter bits of every window (split block).
    pub filter_bits: u64,
    /// Digests a window holds.
    pub capacity: u64,
    /// The false-positive rate of a test against a full window.
    pub design_fpr: f64,
    /// Each worker's windows, oldest first.
    pub workers: Vec<WorkerIndex>,
}

/// One worker's windows.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerIndex {
    /// Its windows, oldest first.
    pub windows: Vec<WindowIndex>,
}

/// One window: its description and the file of its filter.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowIndex {
    /// The window.
    pub window: WindowMeta,
    /// Its filter's file, in the same directory.
    pub file: String,
}

/// Why windows could not be kept or read: the file and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{}: {reason}", path.display())]
pub struct StoreError {
    /// The file (or directory).
    pub path: PathBuf,
    /// What is wrong.
    pub reason: String,
}

fn err(path: &Path, reason: impl Into<String>) -> StoreError {
    StoreError {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Writes `digests` into `dir` (created if missing).
///
/// # Errors
/// A ring without a seed (the random process key cannot be kept), or a
/// file that cannot be written.
pub fn save(digests: &Digests, dir: &Path) -> Result<(), StoreError> {
    std::fs::create_dir_all(dir).map_err(|e| err(dir, format!("cannot create: {e}")))?;
    let mut workers = Vec::new();
    let mut common: Option<(u64, u64, Geometry)> = None;
    for (w, ring) in digests.rings().iter().enumerate() {
        let ring = lock(ring);
        let seed = ring.seed().ok_or_else(|| {
            err(
                dir,
                "the digest stage has no seed (set digest.seed; replay sets one from --seed)",
            )
        })?;
        common.get_or_insert((seed, ring.window_ns(), *ring.geometry()));
        let mut windows = Vec::new();
        for (meta, bloom) in ring.windows() {
            let file = format!("w{w}-{}.bloom", meta.id);
            let path = dir.join(&file);
            std::fs::write(&path, bloom.to_bytes())
                .map_err(|e| err(&path, format!("cannot write: {e}")))?;
            windows.push(WindowIndex {
                window: *meta,
                file,
            });
        }
        workers.push(WorkerIndex { windows });
    }
    let Some((seed, window_ns, g)) = common else {
        return Err(err(dir, "no digest ring to keep"));
    };
    let index = Index {
        format: FORMAT.into(),
        version: VERSION,
        ports: digests.ports().to_vec(),
        seed,
        window_ns,
        filter_bits: g.params.bits(),
        capacity: g.capacity,
        design_fpr: g.design_fpr,
        workers,
    };
    let path = dir.join(INDEX);
    let text = serde_json::to_vec_pretty(&index).map_err(|e| err(&path, e.to_string()))?;
    std::fs::write(&path, text).map_err(|e| err(&path, format!("cannot write: {e}")))
}

/// The most bytes of [`INDEX`] read.
const MAX_INDEX_BYTES: u64 = 64 << 20;

/// Reads an [`Index`] from its JSON text (`path` names it in errors).
///
/// # Errors
/// Not JSON of the format's shape (naming the field), another format or
/// version, or inconsistent figures.
pub fn parse_index(text: &[u8], path: &Path) -> Result<Index, StoreError> {
    let de = &mut serde_json::Deserializer::from_slice(text);
    let index: Index = serde_path_to_error::deserialize(de).map_err(|e| {
        let at = e.path().to_string();
        err(path, format!("{at}: {}", e.inner()))
    })?;
    if index.format != FORMAT {
        return Err(err(
            path,
            format!("format: \"{}\", not \"{FORMAT}\"", index.format),
        ));
    }
    if index.version != VERSION {
        return Err(err(
            path,
            format!("version: {} (this build reads {VERSION})", index.version),
        ));
    }
    if index.ports.is_empty() || index.ports.len() > 64 {
        return Err(err(
            path,
            format!("ports: {} ports (1 to 64)", index.ports.len()),
        ));
    }
    if index.workers.is_empty() {
        return Err(err(path, "workers: none"));
    }
    let params = Params::new(Layout::SplitBlock, index.filter_bits, SPLIT_BLOCK_K)
        .map_err(|e| err(path, format!("filter_bits: {e}")))?;
    if index.capacity == 0 || index.capacity > params.bits() {
        return Err(err(
            path,
            format!(
                "capacity: {} for a filter of {} bits",
                index.capacity,
                params.bits()
            ),
        ));
    }
    for (w, wk) in index.workers.iter().enumerate() {
        for (i, win) in wk.windows.iter().enumerate() {
            let at = format!("workers[{w}].windows[{i}]");
            let m = &win.window;
            if m.digests > index.capacity {
                return Err(err(
                    path,
                    format!(
                        "{at}.digests: {} above the capacity {}",
                        m.digests, index.capacity
                    ),
                ));
            }
            if m.closed_ns.is_some_and(|c| c < m.opened_ns) {
                return Err(err(
                    path,
                    format!("{at}.window.closed_ns: before opened_ns"),
                ));
            }
            let plain = !win.file.is_empty()
                && !win.file.contains(['/', '\\'])
                && win.file != "."
                && win.file != "..";
            if !plain {
                return Err(err(
                    path,
                    format!("{at}.file: \"{}\" is not a file name", win.file),
                ));
            }
        }
    }
    Ok(index)
}

/// Reads the windows `dir` keeps.
///
/// # Errors
/// A missing or unreadable file, or any inconsistency (see the module
/// docs), naming the file.
pub fn load(dir: &Path) -> Result<Digests, StoreError> {
    let path = dir.join(INDEX);
    let meta = std::fs::metadata(&path).map_err(|e| err(&path, format!("cannot read: {e}")))?;
    if meta.len() > MAX_INDEX_BYTES {
        return Err(err(&path, format!("{} bytes: too large", meta.len())));
    }
    let text = std::fs::read(&path).map_err(|e| err(&path, format!("cannot read: {e}")))?;
    let index = parse_index(&text, &path)?;
    let params = Params::new(Layout::SplitBlock, index.filter_bits, SPLIT_BLOCK_K)
        .map_err(|e| err(&path, format!("filter_bits: {e}")))?;
    let geometry = Geometry {
        params,
        capacity: index.capacity,
        design_fpr: params.false_positive_rate(index.capacity as f64),
    };
    let hasher = Hasher::with_seed(index.seed);
    let mut rings: Vec<SharedRing> = Vec::new();
    for wk in &index.workers {
        let mut windows = Vec::new();
        for win in &wk.windows {
            let f = dir.join(&win.file);
            let bytes = std::fs::read(&f).map_err(|e| err(&f, format!("cannot read: {e}")))?;
            let bloom = Bloom::from_bytes(&bytes, hasher.clone())
                .map_err(|e| err(&f, format!("not a filter of this key: {e}")))?;
            if bloom.params() != params {
                return Err(err(
                    &f,
                    format!(
                        "a filter of {} bits, {:?}; {INDEX} says {} bits, split block",
                        bloom.params().bits(),
                        bloom.params().layout(),
                        params.bits()
                    ),
                ));
            }
            windows.push((win.window, bloom));
        }
        let ring = Ring::restore(index.window_ns, geometry, index.seed, windows);
        rings.push(std::sync::Arc::new(std::sync::Mutex::new(ring)));
    }
    Ok(Digests::new(rings, index.ports, TimeBase::Unix))
}
