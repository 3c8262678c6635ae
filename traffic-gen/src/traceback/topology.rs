//! The topology file of `traffic-gen traceback`: the routers, how to ask
//! each, and which of their ports face each other.
//!
//! ```toml
//! [[routers]]
//! name = "r1"
//! query = "127.0.0.1:9464"     # its [telemetry] listen address (GET /digest)
//! netns = "bl-r1"              # optional: connect from inside this network namespace
//!
//! [[routers]]
//! name = "r2"
//! digests = "kept/r2"          # or: windows `traffic-gen replay --digests DIR` kept
//!
//! [[links]]                    # r1's port r1-r2 and r2's port r2-r1 face each other
//! ends = ["r1:r1-r2", "r2:r2-r1"]
//!
//! [[hosts]]                    # optional: a name for what is behind a port
//! name = "A"
//! at = "r1:r1-a"
//! ```
//!
//! A port on no link is an edge of the traced domain: a packet that came
//! in there entered the domain there (from the host named by `[[hosts]]`,
//! if any). Router names are unique; every link end and host names a
//! router of the file (the port names are the routers' own, checked when
//! their answers come).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use serde::Deserialize;

/// How to ask a router.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    /// `GET /digest` at this address, from inside a network namespace when
    /// given.
    Http {
        /// The router's telemetry listener.
        addr: SocketAddr,
        /// `ip netns` name to connect from.
        netns: Option<String>,
    },
    /// Windows kept on disk (`replay --digests`).
    Kept(PathBuf),
}

/// A router of the topology.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Router {
    /// Its name.
    pub name: String,
    /// How to ask it.
    pub ask: Ask,
}

/// What lies behind a router's port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Beyond {
    /// Another router's port.
    Router {
        /// The router.
        router: String,
        /// Its port facing this one.
        port: String,
    },
    /// Outside the traced domain (a host, named or not).
    Edge(Option<String>),
}

/// The routers and their links.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Topology {
    routers: BTreeMap<String, Router>,
    /// (router, port) -> (router, port) both ways.
    links: BTreeMap<(String, String), (String, String)>,
    hosts: BTreeMap<(String, String), String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    routers: Vec<RouterEntry>,
    #[serde(default)]
    links: Vec<LinkEntry>,
    #[serde(default)]
    hosts: Vec<HostEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RouterEntry {
    name: String,
    #[serde(default)]
    query: Option<String>,
    #[serde(default)]
    netns: Option<String>,
    #[serde(default)]
    digests: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkEntry {
    ends: [String; 2],
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HostEntry {
    name: String,
    at: String,
}

/// Splits `router:port`.
fn end(s: &str) -> Result<(String, String)> {
    match s.split_once(':') {
        Some((r, p)) if !r.is_empty() && !p.is_empty() => Ok((r.to_string(), p.to_string())),
        _ => bail!("\"{s}\" is not ROUTER:PORT"),
    }
}

impl Topology {
    /// Reads a topology file; `digests` paths are relative to its directory.
    ///
    /// # Errors
    /// Unreadable, not TOML of this shape (naming the key), or
    /// inconsistent (naming the entry).
    pub fn load(path: &Path) -> Result<Topology> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("{}: cannot read", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text, base).with_context(|| path.display().to_string())
    }

    /// Parses a topology (see the module docs).
    ///
    /// # Errors
    /// As [`Topology::load`].
    pub fn parse(text: &str, base: &Path) -> Result<Topology> {
        let de = toml::Deserializer::new(text);
        let f: File = serde_path_to_error::deserialize(de).map_err(|e| {
            let key = e.path().to_string();
            anyhow!("{key}: {}", e.inner().message().trim())
        })?;
        let mut t = Topology::default();
        for (i, r) in f.routers.into_iter().enumerate() {
            let key = format!("routers[{i}]");
            if r.name.is_empty() || r.name.contains(':') {
                bail!("{key}.name: \"{}\" (not empty, no ':')", r.name);
            }
            let ask = match (r.query, r.digests) {
                (Some(q), None) => Ask::Http {
                    addr: q.parse().map_err(|_| {
                        anyhow!("{key}.query: \"{q}\" is not an IP address and port")
                    })?,
                    netns: r.netns,
                },
                (None, Some(d)) if r.netns.is_none() => Ask::Kept(base.join(d)),
                (None, Some(_)) => bail!("{key}.netns: only with query"),
                _ => bail!("{key}: give query (an address) or digests (a directory), one of them"),
            };
            if t.routers
                .insert(
                    r.name.clone(),
                    Router {
                        name: r.name.clone(),
                        ask,
                    },
                )
                .is_some()
            {
                bail!("{key}.name: \"{}\" twice", r.name);
            }
        }
        for (i, l) in f.links.iter().enumerate() {
            let key = format!("links[{i}].ends");
            let a = end(&l.ends[0]).with_context(|| key.clone())?;
            let b = end(&l.ends[1]).with_context(|| key.clone())?;
            for e in [&a, &b] {
                if !t.routers.contains_key(&e.0) {
                    bail!("{key}: no router \"{}\"", e.0);
                }
                if t.links.contains_key(e) {
                    bail!("{key}: {}:{} is on another link", e.0, e.1);
                }
            }
            if a == b {
                bail!("{key}: a port linked to itself");
            }
            t.links.insert(a.clone(), b.clone());
            t.links.insert(b, a);
        }
        for (i, h) in f.hosts.iter().enumerate() {
            let key = format!("hosts[{i}].at");
            let at = end(&h.at).with_context(|| key.clone())?;
            if !t.routers.contains_key(&at.0) {
                bail!("{key}: no router \"{}\"", at.0);
            }
            if t.links.contains_key(&at) {
                bail!("{key}: {}:{} faces a router", at.0, at.1);
            }
            t.hosts.insert(at, h.name.clone());
        }
        Ok(t)
    }

    /// A topology of one router (no links).
    pub fn single(name: &str, ask: Ask) -> Topology {
        let mut t = Topology::default();
        t.routers.insert(
            name.to_string(),
            Router {
                name: name.to_string(),
                ask,
            },
        );
        t
    }

    /// Adds a router (replacing one of the same name).
    pub fn add_router(&mut self, name: &str, ask: Ask) {
        self.routers.insert(
            name.to_string(),
            Router {
                name: name.to_string(),
                ask,
            },
        );
    }

    /// Joins two routers' ports.
    pub fn add_link(&mut self, a: (&str, &str), b: (&str, &str)) {
        let a = (a.0.to_string(), a.1.to_string());
        let b = (b.0.to_string(), b.1.to_string());
        self.links.insert(a.clone(), b.clone());
        self.links.insert(b, a);
    }

    /// Names what is behind a router's port.
    pub fn add_host(&mut self, name: &str, at: (&str, &str)) {
        self.hosts
            .insert((at.0.to_string(), at.1.to_string()), name.to_string());
    }

    /// The router named `name`.
    pub fn router(&self, name: &str) -> Option<&Router> {
        self.routers.get(name)
    }

    /// The routers, by name.
    pub fn routers(&self) -> impl Iterator<Item = &Router> {
        self.routers.values()
    }

    /// What is behind `router`'s `port`.
    pub fn beyond(&self, router: &str, port: &str) -> Beyond {
        let k = (router.to_string(), port.to_string());
        match self.links.get(&k) {
            Some((r, p)) => Beyond::Router {
                router: r.clone(),
                port: p.clone(),
            },
            None => Beyond::Edge(self.hosts.get(&k).cloned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAB: &str = r#"
[[routers]]
name = "r1"
query = "127.0.0.1:9464"
netns = "bl-r1"
[[routers]]
name = "r2"
digests = "kept/r2"
[[links]]
ends = ["r1:r1-r2", "r2:r2-r1"]
[[hosts]]
name = "A"
at = "r1:r1-a"
"#;

    #[test]
    fn parse() {
        let t = Topology::parse(LAB, Path::new("/x")).unwrap();
        assert_eq!(
            t.router("r1").unwrap().ask,
            Ask::Http {
                addr: "127.0.0.1:9464".parse().unwrap(),
                netns: Some("bl-r1".into())
            }
        );
        assert_eq!(t.router("r2").unwrap().ask, Ask::Kept("/x/kept/r2".into()));
        assert_eq!(
            t.beyond("r2", "r2-r1"),
            Beyond::Router {
                router: "r1".into(),
                port: "r1-r2".into()
            }
        );
        assert_eq!(t.beyond("r1", "r1-a"), Beyond::Edge(Some("A".into())));
        assert_eq!(t.beyond("r1", "r1-r3"), Beyond::Edge(None));
    }

    #[test]
    fn errors_name_the_entry() {
        for (text, want) in [
            ("[[routers]]\nname = \"a\"\n", "routers[0]: give query"),
            (
                "[[routers]]\nname = \"a\"\nquery = \"x\"\n",
                "routers[0].query: \"x\"",
            ),
            (
                "[[routers]]\nname = \"a\"\nquery = \"1.2.3.4:5\"\n[[links]]\nends = [\"a:p\", \"b:q\"]\n",
                "links[0].ends: no router \"b\"",
            ),
            ("[[routers]]\nnam = \"a\"\n", "routers[0]: unknown field"),
            (
                "[[routers]]\nname = \"a\"\nquery = \"1.2.3.4:5\"\n[[routers]]\nname = \"a\"\nquery = \"1.2.3.4:6\"\n",
                "routers[1].name: \"a\" twice",
            ),
        ] {
            let e = format!("{:#}", Topology::parse(text, Path::new(".")).unwrap_err());
            assert!(e.contains(want), "{text}: {e}");
        }
    }
}
