//! Every capture of the shared corpus (`../shared/pcaps`) through the
//! built-in router (all four stages, a shaped SFB port), as `traffic-gen
//! replay FILE` runs it: no panic; a capture that reads to its end is
//! replayed whole with every packet and every copy accounted for
//! (received = forwarded + consumed + dropped by reason; per port copies = sent +
//! dropped + backlog, the backlog drained to zero); a capture with a fault
//! part-way is replayed up to it, with the fault in the report's input
//! errors; a capture whose header is bad gives an error naming the file.
//! Skipped with a note when the corpus is absent.

use std::io::Write as _;
use std::path::Path;

use dataplane::io::capture::CaptureReader;
use traffic_gen::replay::{Input, ReplayConfig, replay};

/// Records before the end or the first fault, and whether there was one.
fn count(path: &Path) -> (u64, bool) {
    let Ok(mut r) = CaptureReader::open(path) else {
        return (0, true);
    };
    let mut n = 0;
    loop {
        match r.next_record() {
            Ok(Some(_)) => n += 1,
            Ok(None) => return (n, false),
            Err(_) => return (n, true),
        }
    }
}

#[test]
fn every_shared_capture_through_the_default_router() {
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/pcaps"));
    let Ok(entries) = std::fs::read_dir(dir) else {
        let _ = writeln!(std::io::stderr(), "skipping: {} not found", dir.display());
        return;
    };
    let mut files: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.contains(".pcap"))
        })
        .collect();
    files.sort();
    assert!(!files.is_empty());
    let cfg = ReplayConfig {
        pin: false,
        ..ReplayConfig::default()
    };
    let (mut whole, mut partial, mut refused) = (0, 0, 0);
    for f in &files {
        let (records, fault) = count(f);
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        match replay(&Input::Files(vec![f.clone()]), &cfg, None) {
            Ok(r) => {
                match (fault, r.input_errors.as_slice()) {
                    (false, []) => whole += 1,
                    (true, [e]) => {
                        assert!(e.file.contains(&name), "{name}: {e}");
                        assert_eq!(e.packets_read, records, "{name}: {e}");
                        partial += 1;
                    }
                    (_, errs) => panic!("{name}: reader fault {fault}, input errors {errs:?}"),
                }
                let s = &r.router;
                assert_eq!(s.pipeline.received, records, "{name}");
                assert!(s.is_consistent(), "{name}: {s:?}");
                for i in &s.interfaces {
                    assert_eq!(i.port.backlog_packets, 0, "{name}: {} drained", i.port.name);
                }
            }
            Err(e) => {
                assert!(
                    CaptureReader::open(f).is_err(),
                    "{name}: replay failed on a capture whose header reads: {e:#}"
                );
                assert!(format!("{e:#}").contains(&name), "{name}: {e:#}");
                refused += 1;
            }
        }
    }
    eprintln!(
        "{whole} captures replayed whole, {partial} up to a fault, {refused} refused (bad header)"
    );
    assert!(whole > 40, "{whole} of {}", files.len());
}
