//! The shipped example configurations parse and validate.

use std::path::Path;

use dataplane::config::RouterConfig;

#[test]
fn example_router_toml_is_valid() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/router.toml");
    let cfg = RouterConfig::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg.interfaces.len(), 3);
    assert_eq!(cfg.port_of("r-b"), Some(1));
    assert_eq!(cfg.sfb_stages().len(), 1);
    assert!(cfg.heavy_config().is_some());
    assert!(cfg.icarus_config().is_some());
    assert!(cfg.multicast_config().is_some());
}

#[test]
fn lab_forwarding_toml_is_valid() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/lab-forwarding.toml");
    let cfg = RouterConfig::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg.interfaces.len(), 3);
    assert!(cfg.sfb_stages().is_empty(), "nothing shaped");
    assert!(cfg.heavy_config().is_some());
    assert!(cfg.icarus_config().is_some());
    assert!(cfg.multicast_config().is_some());
}

#[test]
fn load_names_the_file() {
    let e = RouterConfig::load(Path::new("/nonexistent/router.toml")).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("/nonexistent/router.toml: cannot read"),
        "{e}"
    );
}
