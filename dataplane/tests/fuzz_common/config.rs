//! `config`: bytes as a TOML router config through
//! `RouterConfig::from_toml_str`. An error starts with the input's name;
//! a config that validates gives its warnings and every stage's settings,
//! its interface names are unique, and the router's chain builds from it
//! (validation promises it does), unless building would take more than a
//! fuzz run should spend on one input (very large filters or sketches).

use dataplane::chain::Chain;
use dataplane::config::RouterConfig;

/// Multicast filters are sized for at most this many groups per
/// interface here (the config allows 262,144: 32 MiB of port filter).
const MAX_GROUPS_BUILT: u64 = 1 << 14;
/// Sketch cells built at most (rows times width).
const MAX_SKETCH_CELLS_BUILT: u64 = 1 << 20;
/// Heavy-flow capacity built at most.
const MAX_FLOWS_BUILT: usize = 1 << 16;

/// Checks one input (see the module docs).
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut cfg = match RouterConfig::from_toml_str(text, "fuzz.toml") {
        Ok(cfg) => cfg,
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.starts_with("fuzz.toml"), "{msg}");
            return;
        }
    };
    let _ = cfg.warnings();
    let _ = (
        cfg.unicast_routes(),
        cfg.egress_queues(),
        cfg.icarus_config(),
    );
    for (i, ifc) in cfg.interfaces.iter().enumerate() {
        assert_eq!(
            cfg.port_of(&ifc.name).map(usize::from),
            Some(i),
            "names are unique"
        );
    }
    cfg.fill_seeds(1);
    let groups = cfg.multicast_config().map_or(0, |m| m.expected_groups);
    let (cells, flows) = cfg.heavy_config().map_or((0, 0), |h| {
        let cells =
            (h.rows as u64).saturating_mul(1u64.checked_shl(h.log2_width).unwrap_or(u64::MAX));
        (cells, h.capacity)
    });
    if groups > MAX_GROUPS_BUILT || cells > MAX_SKETCH_CELLS_BUILT || flows > MAX_FLOWS_BUILT {
        return;
    }
    if let Err(e) = Chain::build(&cfg) {
        panic!("a validated config does not build: {e}");
    }
}
