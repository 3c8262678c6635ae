//! Starting inputs for each target, from the public captures
//! (`../shared/pcaps`) and the example configs (`dataplane/examples`):
//!
//! * `capture`: every capture file, its first [`MAX_CAPTURE_SEED`] bytes;
//! * `parse`, `icarus`: single frames, a few spread over each capture;
//! * `multicast`: per capture, its IGMP, MLD and other multicast frames
//!   first, then others, in the multi-frame form;
//! * `chain`: per capture, its first frames with their time steps and
//!   pcapng interfaces as ingress ports, through the wired chain and
//!   through the routed one (addressed to the router);
//! * `config`: the example TOML files and the chain target's configs;
//! * `digest`: per capture, a few IP datagrams (the IP header on) and the
//!   query strings asking about them.
//!
//! Frames of link types the targets do not feed are left out.

use std::path::Path;

use dataplane::io::capture::{OwnedRecord, read_all};
use dataplane::wire::{IpProtocol, parse};

use super::{ctrl, encode, link_bits, step_for};

/// The targets, in the order the README lists them.
pub const TARGETS: [&str; 8] = [
    "parse",
    "capture",
    "config",
    "icarus",
    "multicast",
    "chain",
    "digest",
    "peer",
];

/// Capture seeds are cut to this many bytes (a few captures are megabytes;
/// libFuzzer takes its largest input length from the corpus).
pub const MAX_CAPTURE_SEED: usize = 64 * 1024;
/// Single-frame seeds per capture.
const FRAMES_PER_CAPTURE: usize = 8;
/// Frames per multi-frame seed.
const FRAMES_PER_SEED: usize = 64;
/// Frames are cut to this many bytes in seeds.
const MAX_FRAME: usize = 2048;

/// One starting input.
#[derive(Debug, Clone)]
pub struct Seed {
    /// A file name for it (unique within a target).
    pub name: String,
    /// The input.
    pub bytes: Vec<u8>,
}

/// The capture files in `dir` (names holding `.pcap`), sorted.
pub fn captures(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().contains(".pcap"))
    });
    files.sort();
    files
}

fn stem(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().replace('.', "_"))
        .unwrap_or_default()
}

/// The records of a capture the frame targets can take (Ethernet, raw IP,
/// Linux SLL), frames cut to [`MAX_FRAME`].
fn records(path: &Path) -> Vec<(u8, OwnedRecord)> {
    let (recs, _) = read_all(path);
    recs.into_iter()
        .filter_map(|mut r| {
            let bits = link_bits(r.link_type)?;
            r.data.truncate(MAX_FRAME);
            Some((bits, r))
        })
        .collect()
}

/// Whether a frame is multicast, IGMP or MLD (what the multicast target
/// is about).
fn is_multicast(r: &OwnedRecord) -> bool {
    parse(r.link_type, &r.data).is_ok_and(|p| {
        p.dst_multicast || matches!(p.protocol, IpProtocol::Igmp | IpProtocol::Icmpv6)
    })
}

/// `frames` in the multi-frame form after `settings`, with their time
/// steps; ingress ports from the pcapng interfaces (or spread over the
/// three ports for a capture with one interface).
fn multi(settings: u8, frames: &[&(u8, OwnedRecord)]) -> Vec<u8> {
    let mut out = vec![settings];
    let one_interface = frames.iter().all(|(_, r)| r.interface == 0);
    let mut last = frames.first().map_or(0, |(_, r)| r.ts_ns);
    for (i, (bits, r)) in frames.iter().enumerate() {
        let step = step_for(r.ts_ns.saturating_sub(last));
        last = r.ts_ns.max(last);
        let ingress = if one_interface {
            i % 3
        } else {
            r.interface as usize % 3
        };
        encode(&mut out, ctrl(ingress as u8, *bits, step), &r.data);
    }
    out
}

/// The seeds of `target` (one of [`TARGETS`]) from the captures in
/// `pcaps` (none when `None`) and the configs in `examples`.
pub fn for_target(target: &str, pcaps: Option<&Path>, examples: &Path) -> Vec<Seed> {
    let mut out = Vec::new();
    if target == "config" {
        let mut files: Vec<_> = std::fs::read_dir(examples)
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        files.retain(|p| p.extension().is_some_and(|e| e == "toml"));
        files.sort();
        for f in files {
            if let Ok(bytes) = std::fs::read(&f) {
                out.push(Seed {
                    name: stem(&f),
                    bytes,
                });
            }
        }
        out.push(Seed {
            name: "chain_toml".into(),
            bytes: super::chain::CONFIG.as_bytes().to_vec(),
        });
        out.push(Seed {
            name: "chain_routed_toml".into(),
            bytes: super::chain::ROUTED.as_bytes().to_vec(),
        });
        return out;
    }
    if target == "peer" {
        return super::peer::seeds()
            .into_iter()
            .map(|(name, bytes)| Seed { name, bytes })
            .collect();
    }
    let Some(dir) = pcaps else {
        return out;
    };
    for path in captures(dir) {
        let name = stem(&path);
        if target == "capture" {
            if let Ok(mut bytes) = std::fs::read(&path) {
                bytes.truncate(MAX_CAPTURE_SEED);
                out.push(Seed { name, bytes });
            }
            continue;
        }
        let recs = records(&path);
        if recs.is_empty() {
            continue;
        }
        match target {
            "parse" | "icarus" => {
                let every = recs.len().div_ceil(FRAMES_PER_CAPTURE);
                for (i, (bits, r)) in recs.iter().step_by(every).enumerate() {
                    let bytes = if target == "parse" {
                        r.data.clone()
                    } else {
                        // Width 64/128/256 in turn, the link, seed i.
                        let c = (i % 3) as u8 | (bits << 2) | ((i as u8 & 15) << 4);
                        [&[c][..], &r.data].concat()
                    };
                    out.push(Seed {
                        name: format!("{name}-{i}"),
                        bytes,
                    });
                }
            }
            "multicast" => {
                let (mut picked, rest): (Vec<_>, Vec<_>) =
                    recs.iter().partition(|(_, r)| is_multicast(r));
                picked.extend(rest);
                picked.truncate(FRAMES_PER_SEED);
                // Checksums filled in and verified (bits 0-1), cap 16 (3 in
                // bits 3-4), 1024 records a batch (7 in bits 5-7); and
                // unverified, 3 records a batch (2).
                out.push(Seed {
                    name: format!("{name}-verified"),
                    bytes: multi(0b11 | (3 << 3) | (7 << 5), &picked),
                });
                out.push(Seed {
                    name: format!("{name}-unverified"),
                    bytes: multi((3 << 3) | (2 << 5), &picked),
                });
            }
            "digest" => {
                let every = recs.len().div_ceil(FRAMES_PER_CAPTURE);
                for (i, (_, r)) in recs.iter().step_by(every).enumerate() {
                    let Some(ip) = parse(r.link_type, &r.data)
                        .ok()
                        .filter(|p| p.ip_version.is_some())
                        .and_then(|p| r.data.get(p.l3_offset..))
                    else {
                        continue;
                    };
                    out.push(Seed {
                        name: format!("{name}-{i}-ip"),
                        bytes: [&[1u8 | 2][..], ip].concat(),
                    });
                    let q =
                        dataplane::stage::digest::query::query_string(ip, Some(r.ts_ns), Some(250));
                    out.push(Seed {
                        name: format!("{name}-{i}-query"),
                        bytes: [&[0u8][..], q.as_bytes()].concat(),
                    });
                }
            }
            "chain" => {
                let first: Vec<_> = recs.iter().take(FRAMES_PER_SEED).collect();
                // Through the routed chain too, every frame to the router's
                // MAC (settings bits 3 and 4).
                out.push(Seed {
                    name: format!("{name}-routed"),
                    bytes: multi(8 | 16, &first),
                });
                out.push(Seed {
                    name,
                    bytes: multi(0, &first),
                });
            }
            other => panic!("unknown fuzz target {other}"),
        }
    }
    out
}
