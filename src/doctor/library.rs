//! Which `libnvidia-ml.so.1` the dynamic loader would give NVML, found the way glibc's
//! `dlopen` searches: the configured file (`nvml_library`, opened directly), then
//! `LD_LIBRARY_PATH`, `ld.so.cache` (read with `ldconfig -p -C FILE`, by argv) and the standard
//! directories; each candidate's symlink chain (`libnvidia-ml.so.1` → `libnvidia-ml.so.<version>`),
//! broken links, and the driver versions in the file names found.
//!
//! Invariant: every path is read under the host root — absolute link targets too — except the
//! configured file, which is what the daemon opens. A candidate whose chain is broken is
//! skipped, as the loader skips it.

use std::path::{Path, PathBuf};

use super::Check;
use super::host::version_token;
use crate::sampler::diagnosis;

/// The soname NVML is opened by.
pub const SONAME: &str = "libnvidia-ml.so.1";

/// The standard directories, in the order the loader tries them (multiarch first).
const STANDARD_DIRS: &[&str] = &[
    "lib/x86_64-linux-gnu",
    "usr/lib/x86_64-linux-gnu",
    "lib/aarch64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "lib64",
    "usr/lib64",
    "lib",
    "usr/lib",
];

/// One place the loader would look.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Where it came from: "configured", "LD_LIBRARY_PATH", "ld.so.cache", "standard dirs".
    pub source: &'static str,
    /// The file asked for (`<dir>/libnvidia-ml.so.1`, or the configured file).
    pub path: PathBuf,
    /// The link targets followed, in order.
    pub chain: Vec<String>,
    /// The file the chain ends at, or why it ends nowhere.
    pub target: Result<PathBuf, String>,
}

impl Candidate {
    /// The driver version in the final file's name (`libnvidia-ml.so.550.90.07`).
    pub fn version(&self) -> Option<String> {
        let t = self.target.as_ref().ok()?;
        file_version(t)
    }

    fn shown(&self) -> String {
        let mut s = self.path.display().to_string();
        for hop in &self.chain {
            s.push_str(" → ");
            s.push_str(hop);
        }
        s
    }

    /// The chain and why it does not end in a file.
    fn why_broken(&self) -> String {
        format!(
            "{}: {}",
            self.shown(),
            self.target.as_ref().err().map_or("", String::as_str)
        )
    }
}

fn file_version(p: &Path) -> Option<String> {
    let name = p.file_name()?.to_str()?;
    version_token(name.strip_prefix("libnvidia-ml.so.")?)
}

/// What the search found.
#[derive(Debug, Clone)]
pub struct Library {
    pub configured: Option<PathBuf>,
    /// Every place looked at that has the soname, in search order.
    pub candidates: Vec<Candidate>,
    /// The one the loader takes: the first whose chain ends at a file.
    pub pick: Option<Candidate>,
    /// `libnvidia-ml.so.<version>` files in the searched directories.
    pub versioned: Vec<(String, PathBuf)>,
    /// Broken `libnvidia-ml.so` development links.
    pub broken_dev_links: Vec<String>,
    /// Why ld.so.cache was not used, if it was not.
    pub cache_note: Option<String>,
    pub searched: Vec<String>,
}

/// Follows the symlinks from `path`, rooting absolute targets at `root`.
fn resolve(root: &Path, path: &Path) -> (Vec<String>, Result<PathBuf, String>) {
    let mut chain = Vec::new();
    let mut p = path.to_path_buf();
    for _ in 0..16 {
        let meta = match std::fs::symlink_metadata(&p) {
            Ok(m) => m,
            Err(e) if chain.is_empty() => return (chain, Err(format!("{}: {e}", p.display()))),
            Err(_) => {
                return (
                    chain,
                    Err(format!("broken link: {} does not exist", p.display())),
                );
            }
        };
        if meta.file_type().is_symlink() {
            let t = match std::fs::read_link(&p) {
                Ok(t) => t,
                Err(e) => return (chain, Err(format!("cannot read link {}: {e}", p.display()))),
            };
            chain.push(t.display().to_string());
            p = match t.strip_prefix("/") {
                Ok(rel) => root.join(rel),
                Err(_) => p.parent().unwrap_or(Path::new("/")).join(&t),
            };
            continue;
        }
        return if meta.is_file() {
            (chain, Ok(p))
        } else {
            (chain, Err(format!("{} is not a file", p.display())))
        };
    }
    (
        chain,
        Err(format!("{}: too many levels of links", path.display())),
    )
}

/// The directories `ld.so.cache` lists for the soname, read by `ldconfig -p -C FILE`.
fn cache_dirs(root: &Path) -> Result<Vec<PathBuf>, String> {
    let cache = root.join("etc/ld.so.cache");
    if !cache.is_file() {
        return Err(format!("no {}", cache.display()));
    }
    let ldconfig = ["/sbin/ldconfig", "/usr/sbin/ldconfig"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.is_file())
        .unwrap_or(Path::new("ldconfig"));
    let out = std::process::Command::new(ldconfig)
        .arg("-p")
        .arg("-C")
        .arg(&cache)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", ldconfig.display()))?;
    if !out.status.success() {
        return Err(format!(
            "`ldconfig -p -C {}` failed: {}",
            cache.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let arch = if cfg!(target_arch = "aarch64") {
        "AArch64"
    } else {
        "x86-64"
    };
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.trim_start().starts_with(SONAME) && l.contains(arch))
        .filter_map(|l| l.split("=> ").nth(1))
        .filter_map(|p| Path::new(p.trim()).parent().map(Path::to_path_buf))
        .map(|d| match d.strip_prefix("/") {
            Ok(rel) => root.join(rel),
            Err(_) => d,
        })
        .collect())
}

/// Searches as the loader would.
pub fn find(root: &Path, configured: Option<&Path>) -> Library {
    let mut dirs: Vec<(&'static str, PathBuf)> = Vec::new();
    let mut searched = Vec::new();
    if let Some(v) = std::env::var_os("LD_LIBRARY_PATH") {
        for d in std::env::split_paths(&v).filter(|d| d.is_absolute()) {
            let rooted = root.join(d.strip_prefix("/").unwrap_or(&d));
            dirs.push(("LD_LIBRARY_PATH", rooted));
        }
        searched.push("LD_LIBRARY_PATH".to_string());
    }
    let cache_note = match cache_dirs(root) {
        Ok(ds) => {
            dirs.extend(ds.into_iter().map(|d| ("ld.so.cache", d)));
            searched.push("ld.so.cache".to_string());
            None
        }
        Err(note) => Some(note),
    };
    dirs.extend(
        STANDARD_DIRS
            .iter()
            .map(|d| ("standard dirs", root.join(d))),
    );
    searched.push("the standard directories".to_string());

    let mut seen = std::collections::HashSet::new();
    let mut candidates = Vec::new();
    let mut versioned = Vec::new();
    let mut broken_dev_links = Vec::new();
    if let Some(c) = configured {
        let (chain, target) = resolve(Path::new("/"), c);
        candidates.push(Candidate {
            source: "configured",
            path: c.to_path_buf(),
            chain,
            target,
        });
    }
    for (source, dir) in dirs {
        let canon = dir.canonicalize().unwrap_or_else(|_| dir.clone());
        if !seen.insert(canon) {
            continue;
        }
        let path = dir.join(SONAME);
        if std::fs::symlink_metadata(&path).is_ok() {
            let (chain, target) = resolve(root, &path);
            candidates.push(Candidate {
                source,
                path,
                chain,
                target,
            });
        }
        let dev = dir.join("libnvidia-ml.so");
        if std::fs::symlink_metadata(&dev).is_ok()
            && let (chain, Err(e)) = resolve(root, &dev)
        {
            broken_dev_links.push(format!("{} → {}: {e}", dev.display(), chain.join(" → ")));
        }
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = e.path();
            if let Some(v) = file_version(&p)
                && p.is_file()
            {
                versioned.push((v, p));
            }
        }
    }
    versioned.sort();
    let pick = match configured {
        Some(_) => candidates.first().filter(|c| c.target.is_ok()).cloned(),
        None => candidates.iter().find(|c| c.target.is_ok()).cloned(),
    };
    Library {
        configured: configured.map(Path::to_path_buf),
        candidates,
        pick,
        versioned,
        broken_dev_links,
        cache_note,
        searched,
    }
}

impl Library {
    /// `nvml library`, `nvml library links` and (when versioned files were found)
    /// `nvml library versions`.
    pub fn checks(&self) -> Vec<Check> {
        let name = "nvml library";
        let mut out = Vec::new();
        let broken: Vec<&Candidate> = self
            .candidates
            .iter()
            .filter(|c| c.target.is_err())
            .collect();
        const RELINK: &str = "reinstall the driver's user-space libraries (the package that owns libnvidia-ml.so.1), or recreate the links with `ldconfig`";
        out.push(match (&self.configured, &self.pick) {
            (Some(c), None) => Check::fail(
                name,
                format!(
                    "the configured nvml_library {} cannot be opened: {}",
                    c.display(),
                    self.candidates
                        .first()
                        .and_then(|c| c.target.as_ref().err())
                        .map_or("missing", String::as_str)
                ),
                "point `nvml_library` / --nvml-library at the driver's libnvidia-ml.so.1, or remove the setting to use the system's",
            ),
            (_, Some(p)) => Check::ok(
                name,
                format!(
                    "{} {} ({})",
                    if p.source == "configured" {
                        "configured"
                    } else {
                        "the loader picks"
                    },
                    p.shown(),
                    p.source
                ),
            ),
            (None, None) if !broken.is_empty() => Check::fail(
                name,
                broken
                    .iter()
                    .map(|c| c.why_broken())
                    .collect::<Vec<_>>()
                    .join("; "),
                RELINK,
            ),
            (None, None) => Check::fail(
                name,
                format!(
                    "no {SONAME} in {}{}",
                    match self.searched.split_last() {
                        Some((last, [])) => last.clone(),
                        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
                        None => "no directory".into(),
                    },
                    self.cache_note
                        .as_deref()
                        .map(|n| format!(" ({n})"))
                        .unwrap_or_default()
                ),
                diagnosis::LIBRARY_NOT_FOUND.fix,
            ),
        });
        if self.pick.is_some() {
            let mut problems: Vec<String> = broken.iter().map(|c| c.why_broken()).collect();
            problems.extend(self.broken_dev_links.iter().cloned());
            out.push(if problems.is_empty() {
                Check::ok("nvml library links", "no broken links")
            } else {
                Check::warn("nvml library links", problems.join("; "), RELINK)
            });
        }
        let mut versions: Vec<&str> = self.versioned.iter().map(|(v, _)| v.as_str()).collect();
        versions.dedup();
        match versions.len() {
            0 => {}
            1 => out.push(Check::ok(
                "nvml library versions",
                format!("one version: {}", versions[0]),
            )),
            _ => out.push(Check::warn(
                "nvml library versions",
                format!(
                    "several versions: {}",
                    self.versioned
                        .iter()
                        .map(|(v, p)| format!("{v} ({})", p.display()))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                "remove the stale copies (a leftover of a driver upgrade, or one installed in the container image) so that only the loaded kernel module's version remains",
            )),
        }
        out
    }
}
