//! The direction of the library's imports between its top-level modules.
//!
//! The port backends (`io`) sit under the stages and the router's
//! configuration: they take the packet types from the leaf `packet` and
//! plain settings from their own modules, never a stage or `config`. And
//! `io`, `config`, `packet`, the stages and `wire` are in no cycle of imports: each
//! can be read (and changed) knowing only what is below it.
//!
//! The test reads `dataplane/src/**/*.rs`, drops comments, string literals
//! and test-only code (`#[cfg(test)]` items and the files such items
//! declare: a unit test may reach anything, as an integration test does),
//! lists each top-level module's `crate::` paths, and checks the graph.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Module name -> the top-level modules it imports.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// `src` with comments and the contents of string and char literals
/// replaced by spaces (newlines kept), so braces and paths in them do not
/// count.
fn strip(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let blank = |out: &mut Vec<u8>, s: &[u8]| {
        out.extend(s.iter().map(|&c| if c == b'\n' { b'\n' } else { b' ' }));
    };
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            let end = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest.starts_with(b"/*") {
            let mut depth = 0usize;
            let mut j = 0;
            while j < rest.len() {
                if rest[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if rest[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, &rest[..j]);
            i += j;
        } else if (rest.starts_with(b"r\"") || rest.starts_with(b"r#") || rest.starts_with(b"br"))
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
            && raw_string_len(rest).is_some()
        {
            let n = raw_string_len(rest).unwrap_or(1);
            out.push(b'"');
            blank(&mut out, &rest[1..n]);
            i += n;
        } else if rest[0] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            out.push(b'"');
            blank(&mut out, &rest[1..j.min(rest.len())]);
            i += (j + 1).min(rest.len());
        } else if rest[0] == b'\'' {
            // A char literal ('x', '\n', '\u{..}'), else a lifetime.
            let len = if rest.get(1) == Some(&b'\\') {
                rest[2..].iter().position(|&c| c == b'\'').map(|p| p + 3)
            } else {
                let ch = std::str::from_utf8(&rest[1..rest.len().min(6)])
                    .ok()
                    .or_else(|| std::str::from_utf8(&rest[1..rest.len().min(5)]).ok())
                    .or_else(|| std::str::from_utf8(&rest[1..rest.len().min(4)]).ok())
                    .or_else(|| std::str::from_utf8(&rest[1..rest.len().min(3)]).ok())
                    .and_then(|s| s.chars().next());
                ch.map(char::len_utf8)
                    .filter(|&n| rest.get(1 + n) == Some(&b'\''))
                    .map(|n| n + 2)
            };
            match len {
                Some(n) => {
                    blank(&mut out, &rest[..n]);
                    i += n;
                }
                None => {
                    out.push(b'\'');
                    i += 1;
                }
            }
        } else {
            out.push(rest[0]);
            i += 1;
        }
    }
    String::from_utf8(out).expect("ASCII replacements keep UTF-8")
}

/// The length of the raw string literal `s` starts with (`r"..."`,
/// `r#"..."#`, `br"..."`), if it starts with one.
fn raw_string_len(s: &[u8]) -> Option<usize> {
    let mut i = usize::from(s.first() == Some(&b'b'));
    if s.get(i) != Some(&b'r') {
        return None;
    }
    i += 1;
    let hashes = s[i..].iter().take_while(|&&c| c == b'#').count();
    i += hashes;
    if s.get(i) != Some(&b'"') {
        return None;
    }
    let close: Vec<u8> = std::iter::once(b'"')
        .chain(std::iter::repeat_n(b'#', hashes))
        .collect();
    let body = &s[i + 1..];
    body.windows(close.len())
        .position(|w| w == close.as_slice())
        .map(|p| i + 1 + p + close.len())
}

/// The index just past the item starting at `at` in stripped `s`: its
/// first `;` at depth 0, or its closing brace.
fn item_end(s: &[u8], at: usize) -> usize {
    let mut depth = 0usize;
    for (j, &c) in s.iter().enumerate().skip(at) {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return j + 1;
                }
            }
            b';' if depth == 0 => return j + 1,
            _ => {}
        }
    }
    s.len()
}

/// Removes every `#[cfg(test)]` item from stripped `src`; returns the rest
/// and the names of the modules declared test-only (`#[cfg(test)] mod x;`).
fn without_tests(src: &str) -> (String, Vec<String>) {
    let mut s = src.as_bytes().to_vec();
    let mut test_mods = Vec::new();
    let marker = b"#[cfg(test)]";
    let mut from = 0;
    while let Some(p) = s[from..].windows(marker.len()).position(|w| w == marker) {
        let start = from + p;
        let end = item_end(&s, start + marker.len());
        let item = String::from_utf8_lossy(&s[start + marker.len()..end]).into_owned();
        let words: Vec<&str> = item
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ';'))
            .filter(|w| !w.is_empty())
            .collect();
        if let Some(i) = words.iter().position(|w| *w == "mod")
            && let Some(name) = words.get(i + 1)
            && let Some(name) = name.strip_suffix(';')
        {
            test_mods.push(name.to_string());
        }
        for c in &mut s[start..end] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
        from = end;
    }
    (String::from_utf8(s).expect("ASCII"), test_mods)
}

/// The top-level modules `code` names with a `crate::` path (also inside
/// `use crate::{a::.., b::..}`).
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    for (at, _) in code.match_indices("crate::") {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // `$crate::` or a longer identifier
        }
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1usize;
            let mut start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => start = true,
                    c if c.is_whitespace() => {}
                    _ if start && depth == 1 => {
                        let name = ident(&group[i..]);
                        if !name.is_empty() {
                            found.insert(name);
                        }
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                found.insert(name);
            }
        }
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).expect("read src") {
        let p = e.expect("dir entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The directory holding the files of `file`'s child modules.
fn child_dir(file: &Path) -> PathBuf {
    let parent = file.parent().expect("in src").to_path_buf();
    match file.file_stem().and_then(|s| s.to_str()) {
        Some("mod" | "lib" | "main") => parent,
        Some(stem) => parent.join(stem),
        None => parent,
    }
}

/// The library's import graph between top-level modules, test code left
/// out (the binaries under `src/bin` are crates of their own).
fn graph() -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut code = BTreeMap::new();
    let mut test_only = BTreeSet::new();
    for f in &files {
        let text = fs::read_to_string(f).expect("read source");
        let (rest, mods) = without_tests(&strip(&text));
        let dir = child_dir(f);
        for m in mods {
            test_only.insert(dir.join(format!("{m}.rs")));
            test_only.insert(dir.join(&m));
        }
        code.insert(f.clone(), rest);
    }
    let mut g = Graph::new();
    for (f, rest) in &code {
        let rel = f.strip_prefix(&src).expect("under src");
        if test_only.iter().any(|t| f.starts_with(t)) || rel.starts_with("bin") {
            continue;
        }
        let top = rel
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .map(|s| s.trim_end_matches(".rs").to_string())
            .expect("a path under src");
        if top == "lib" {
            continue;
        }
        let deps = g.entry(top.clone()).or_default();
        deps.extend(crate_paths(rest).into_iter().filter(|d| *d != top));
    }
    g
}

/// The modules reachable from `from` in `g` (not `from` itself unless it
/// is on a cycle).
fn reachable(g: &Graph, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo: Vec<&str> = g
        .get(from)
        .map_or(Vec::new(), |d| d.iter().map(String::as_str).collect());
    while let Some(m) = todo.pop() {
        if seen.insert(m.to_string())
            && let Some(d) = g.get(m)
        {
            todo.extend(d.iter().map(String::as_str));
        }
    }
    seen
}

fn render(g: &Graph) -> String {
    g.iter()
        .map(|(m, d)| {
            format!(
                "{m} -> {}\n",
                d.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        })
        .collect()
}

#[test]
fn io_imports_no_stage_and_no_config() {
    let g = graph();
    let io = g.get("io").expect("the io module");
    for banned in ["stage", "config", "chain", "pipeline", "runtime"] {
        assert!(
            !io.contains(banned),
            "io imports crate::{banned}:\n{}",
            render(&g)
        );
    }
    // Nor through anything it imports.
    let below = reachable(&g, "io");
    for banned in ["stage", "config"] {
        assert!(
            !below.contains(banned),
            "io reaches crate::{banned}:\n{}",
            render(&g)
        );
    }
}

#[test]
fn io_config_packet_stages_and_wire_are_on_no_cycle() {
    let g = graph();
    for m in ["io", "config", "packet", "stage", "wire"] {
        assert!(g.contains_key(m), "no module {m}:\n{}", render(&g));
        assert!(
            !reachable(&g, m).contains(m),
            "{m} is on an import cycle:\n{}",
            render(&g)
        );
    }
}

#[test]
fn packet_is_a_leaf_above_wire_and_clock() {
    let g = graph();
    let deps = &g["packet"];
    assert!(
        deps.iter().all(|d| d == "wire" || d == "clock"),
        "packet imports {deps:?}"
    );
}

#[test]
fn the_reader_sees_what_it_should() {
    // Paths in comments, strings and test-only items do not count; a
    // `use crate::{..}` group does.
    let src = r##"
        // use crate::config;
        /* crate::stage */
        const S: &str = "crate::runtime";
        const R: &str = r#"crate::chain"#;
        const C: char = '"';
        use crate::{wire::Frame, clock::Timestamp};
        fn f<'a>(x: &'a crate::flow::FlowKey) {}
        #[cfg(test)]
        mod tests {
            use crate::pipeline::Batch;
        }
        #[cfg(test)]
        mod tests_more;
    "##;
    let (rest, mods) = without_tests(&strip(src));
    assert_eq!(mods, ["tests_more"]);
    let found: Vec<String> = crate_paths(&rest).into_iter().collect();
    assert_eq!(found, ["clock", "flow", "wire"]);
}
