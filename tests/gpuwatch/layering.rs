//! The arrows of the house point down: every `crate::` path of `src/` names a module listed
//! before its own in ARCHITECTURE.md's "Layers" (tests and comments aside), and every module
//! of `src/` is listed there.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Imports that still run upward, (from, to): each must still exist (the list only shrinks)
/// and no other may appear. ARCHITECTURE.md says what removes each.
const KNOWN_UPWARD: &[(&str, &str)] = &[];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The modules of ARCHITECTURE.md's layer lines, bottom first.
fn order() -> Vec<String> {
    let doc = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let section = doc
        .split("## Layers")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("a Layers section");
    let mut out = Vec::new();
    for line in section.lines().filter(|l| {
        ["- bottom:", "- middle:", "- top:"]
            .iter()
            .any(|p| l.starts_with(p))
    }) {
        out.extend(line.split('`').skip(1).step_by(2).map(str::to_string));
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read_dir") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file without its comments and its `#[cfg(test)] mod tests` block.
fn code(text: &str) -> String {
    let text = text
        .find("#[cfg(test)]\nmod tests")
        .map_or(text, |i| &text[..i]);
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn imports_point_down_the_documented_layers() {
    let order = order();
    let rank: BTreeMap<&str, usize> = order
        .iter()
        .enumerate()
        .map(|(i, m)| (m.as_str(), i))
        .collect();
    let src = root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut modules = BTreeSet::new();
    let mut upward: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    let path = regex::Regex::new(r"crate::([a-z_][a-z0-9_]*)").expect("regex");
    for f in &files {
        let rel = f
            .strip_prefix(&src)
            .expect("under src")
            .to_string_lossy()
            .into_owned();
        if rel == "lib.rs" || rel.ends_with("/tests.rs") || rel.contains("/tests/") {
            continue;
        }
        let top = rel
            .split('/')
            .next()
            .unwrap_or_default()
            .trim_end_matches(".rs")
            .to_string();
        modules.insert(top.clone());
        let text = std::fs::read_to_string(f).expect("read");
        for c in path.captures_iter(&code(&text)) {
            let to = c[1].to_string();
            if to == top {
                continue;
            }
            let (Some(a), Some(b)) = (rank.get(top.as_str()), rank.get(to.as_str())) else {
                continue; // unlisted modules are reported below
            };
            if b > a {
                upward
                    .entry((top.clone(), to))
                    .or_default()
                    .insert(rel.clone());
            }
        }
    }
    let unlisted: Vec<&String> = modules
        .iter()
        .filter(|m| !rank.contains_key(m.as_str()))
        .collect();
    assert!(
        unlisted.is_empty(),
        "modules missing from ARCHITECTURE.md's Layers: {unlisted:?}"
    );
    let known: BTreeSet<(String, String)> = KNOWN_UPWARD
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let new: Vec<_> = upward.iter().filter(|(k, _)| !known.contains(*k)).collect();
    assert!(
        new.is_empty(),
        "imports that run up the layers (move the shared piece below both): {new:?}"
    );
    let gone: Vec<_> = known.iter().filter(|k| !upward.contains_key(*k)).collect();
    assert!(
        gone.is_empty(),
        "no longer upward, take them off KNOWN_UPWARD and ARCHITECTURE.md: {gone:?}"
    );
}
