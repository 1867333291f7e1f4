//! gpuwatch's own setup: the configuration and rules, the database (`PRAGMA quick_check` on a
//! read-only connection, its size against `max_db_size`; damaged databases moved aside beside
//! it, `store::recover`), process attribution (`proc_root`
//! and the PID namespace) and the kubelet's pod-resources socket; Prometheus and the receivers
//! are `reach.rs`.
//!
//! Invariant: nothing is written: the database gets a read-only connection, the kubelet a
//! unix-socket connect and nothing more.

use std::path::Path;

use super::reach::{prometheus, receiver};
use super::{Check, Options};
use crate::config::{Config, Kubelet};
use crate::sampler::procs::{self, PidNamespace};

/// Every setup check, in order.
pub fn checks(opts: &Options, cfg: &Config) -> Vec<Check> {
    let mut out = vec![config(opts, cfg), database(cfg)];
    out.extend(moved_aside(cfg));
    out.extend([
        processes(cfg),
        kubelet(cfg),
        prometheus(cfg, opts.connect_timeout),
    ]);
    if cfg.notify.receivers.is_empty() {
        out.push(Check::ok(
            "receivers",
            "none configured: alerts are only logged",
        ));
    }
    for r in &cfg.notify.receivers {
        out.push(receiver(r, opts.connect_timeout));
    }
    out
}

fn config(opts: &Options, cfg: &Config) -> Check {
    let name = "config";
    let shown = opts.config_path.as_ref().map_or_else(
        || "no config file: built-in defaults".to_string(),
        |p| p.display().to_string(),
    );
    match &opts.config {
        Err(e) => Check::fail(
            name,
            format!("{shown}: {}", e.lines().collect::<Vec<_>>().join("; ")),
            "fix the file at the lines named (every key is documented in examples/gpuwatch.toml); `gpuwatch run --check` checks it again; the other checks used the built-in defaults",
        ),
        Ok(_) => match crate::rules::load_configured(cfg.rules.default_rules, &cfg.rules.files) {
            Ok(rules) => Check::ok(
                name,
                format!(
                    "{shown}: valid; {} rules enabled",
                    rules.iter().filter(|r| r.enabled).count()
                ),
            ),
            Err(e) => Check::fail(
                name,
                format!(
                    "{shown}: the rules do not load: {}",
                    e.to_string().lines().collect::<Vec<_>>().join("; ")
                ),
                "fix the rule files (`gpuwatch rules check FILE` shows every error)",
            ),
        },
    }
}

fn database(cfg: &Config) -> Check {
    let name = "database";
    let path = &cfg.database;
    if !path.exists() {
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
        return match parent {
            Some(dir) if !dir.is_dir() => Check::fail(
                name,
                format!(
                    "{}: its directory {} does not exist",
                    path.display(),
                    dir.display()
                ),
                format!(
                    "create it (`mkdir -p {}`) for the user gpuwatch runs as, or set `database`",
                    dir.display()
                ),
            ),
            _ => Check::ok(
                name,
                format!(
                    "{} does not exist yet; `gpuwatch run` creates it",
                    path.display()
                ),
            ),
        };
    }
    let conn = match crate::store::open_read_only(path) {
        Ok(c) => c,
        Err(e @ crate::store::StoreError::Outdated { .. }) => {
            return Check::warn(
                name,
                e.to_string(),
                "start `gpuwatch run` once: it upgrades the schema in place",
            );
        }
        Err(crate::store::StoreError::Sqlite(e)) if is_corrupt(&e) => return damaged(path, &e),
        Err(crate::store::StoreError::Corrupt { detail, .. }) => {
            return Check::fail(
                name,
                format!("{}: the file is damaged: {detail}", path.display()),
                DAMAGED_FIX,
            );
        }
        Err(e @ crate::store::StoreError::TooNew { .. }) => {
            return Check::fail(
                name,
                e.to_string(),
                "run the gpuwatch version that wrote it (or a newer one), or point `database` / --db at a file of this version; never let an older gpuwatch write it",
            );
        }
        Err(e @ crate::store::StoreError::NotGpuwatch { .. }) => {
            return Check::fail(
                name,
                e.to_string(),
                "the file belongs to another program: point `database` / --db at gpuwatch's database (or at a path that does not exist yet)",
            );
        }
        Err(e) => {
            return Check::fail(
                name,
                format!("{}: {e}", path.display()),
                "let the user gpuwatch runs as read the file and its directory (`ls -l`), or point `database` / --db at gpuwatch's database; if the file is damaged, move it aside (the daemon starts a new one)",
            );
        }
    };
    // SQLite's default limit: up to 100 findings.
    let quick = crate::store::recover::quick_check_findings(&conn, 100);
    let sizes: Result<(i64, i64, i64), rusqlite::Error> = conn.query_row(
        "SELECT * FROM pragma_page_count(), pragma_freelist_count(), pragma_page_size()",
        [],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    );
    match (quick, sizes) {
        (Ok(findings), Ok((pages, free, size))) if findings.is_empty() => {
            let total = u64::try_from(pages * size).unwrap_or(0);
            let used = u64::try_from((pages - free) * size).unwrap_or(0);
            let max = cfg.max_db_size;
            let found = format!(
                "{}: quick_check ok; {} in use, file {}, bound {} ({:.0}% used)",
                path.display(),
                bytesize::ByteSize::b(used),
                bytesize::ByteSize::b(total),
                bytesize::ByteSize::b(max),
                used as f64 * 100.0 / max.max(1) as f64
            );
            if total > max {
                Check::warn(
                    name,
                    format!("{found}: the file is larger than max_db_size"),
                    "the writer keeps the data under the bound from now on; raise `max_db_size`, or stop gpuwatch and `VACUUM` the file to shrink it",
                )
            } else {
                Check::ok(name, found)
            }
        }
        (Ok(findings), Ok(_)) => Check::fail(
            name,
            format!(
                "{}: quick_check found damage ({} finding{}): {}",
                path.display(),
                findings.len(),
                if findings.len() == 1 { "" } else { "s" },
                findings[..findings.len().min(3)].join("; ")
            ),
            DAMAGED_FIX,
        ),
        (Err(e), _) | (_, Err(e)) if is_corrupt(&e) => damaged(path, &e),
        (Err(e), _) | (_, Err(e)) => Check::fail(
            name,
            format!("{}: {e}", path.display()),
            "check the file's permissions and the disk; move a damaged file aside",
        ),
    }
}

const DAMAGED_FIX: &str = "start `gpuwatch run` (stop it first if it runs): it moves the file aside, keeps it for a post-mortem, starts a new one and sends the gpuwatch_database_recovered alert; or move the file aside yourself and restore a backup";

/// Damaged databases a start moved aside beside the database (only shown when there are
/// some, or when the directory cannot be listed).
fn moved_aside(cfg: &Config) -> Option<Check> {
    let name = "database recovery";
    let path = &cfg.database;
    match crate::store::recover::moved_aside(path) {
        Ok(found) if found.is_empty() => None,
        Ok(found) => {
            let shown: Vec<String> = found.iter().map(|p| p.display().to_string()).collect();
            Some(Check::warn(
                name,
                format!(
                    "{} damaged database{} moved aside when gpuwatch found {} damaged and started a new one: {}",
                    found.len(),
                    if found.len() == 1 { " was" } else { "s were" },
                    path.display(),
                    shown.join(", ")
                ),
                "the history before the move is in the moved file (open a copy with sqlite3 for a post-mortem); delete it, with its -wal and -shm files, once it is no longer needed",
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => Some(Check::warn(
            name,
            format!(
                "cannot list the directory of {} for damaged databases moved aside: {e}",
                path.display()
            ),
            "let the user gpuwatch runs as read the database's directory",
        )),
    }
}

/// SQLite says the file is damaged (or not a database at all).
fn is_corrupt(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
    )
}

fn damaged(path: &Path, e: &rusqlite::Error) -> Check {
    Check::fail(
        "database",
        format!("{}: the file is damaged: {e}", path.display()),
        DAMAGED_FIX,
    )
}

fn processes(cfg: &Config) -> Check {
    let name = "process attribution";
    if !cfg.processes.enabled {
        return Check::ok(
            name,
            "process sampling is off ([processes] enabled = false)",
        );
    }
    let root = &cfg.processes.proc_root;
    if !root.join("1").is_dir() {
        return Check::fail(
            name,
            format!(
                "proc_root {} has no processes (no {}/1)",
                root.display(),
                root.display()
            ),
            "set [processes] proc_root to the host's procfs (e.g. /host/proc with the host's /proc mounted there)",
        );
    }
    const HOST_PID: &str =
        "run with the host's PID namespace (Kubernetes: hostPID: true; Docker/Podman: --pid=host)";
    match procs::pid_namespace(Path::new("/proc")) {
        PidNamespace::Host => Check::ok(
            name,
            format!("host PID namespace; processes read from {}", root.display()),
        ),
        PidNamespace::Other(ns) if procs::shows_host_processes(root) => Check::warn(
            name,
            format!(
                "PID namespace {ns}, not the host's: {} shows the host's processes, but NVML lists only this namespace's, so process counts are unknown",
                root.display()
            ),
            HOST_PID,
        ),
        PidNamespace::Other(ns) => Check::warn(
            name,
            format!(
                "PID namespace {ns}, not the host's, and {} does not show the host's processes: process counts are unknown and processes are known by PID only",
                root.display()
            ),
            format!(
                "{HOST_PID}, or mount the host's /proc (e.g. at /host/proc) and set [processes] proc_root"
            ),
        ),
        PidNamespace::Unknown => Check::warn(
            name,
            "cannot tell the PID namespace (no /proc/self/ns/pid)",
            "run on a kernel with PID namespaces in /proc, or check hostPID / --pid=host by hand",
        ),
    }
}

fn kubelet(cfg: &Config) -> Check {
    let name = "kubelet";
    let k = &cfg.kubernetes;
    let sock = &k.pod_resources_socket;
    if k.enabled == Kubelet::Off {
        return Check::ok(
            name,
            "pod attribution is off ([kubernetes] enabled = false)",
        );
    }
    let fix = "check that the kubelet runs and that its pod-resources directory is mounted into gpuwatch's container (/var/lib/kubelet/pod-resources), or set [kubernetes] pod_resources_socket";
    if !sock.exists() {
        return if k.enabled == Kubelet::Auto {
            Check::ok(
                name,
                format!(
                    "no pod-resources socket at {}: not a Kubernetes node",
                    sock.display()
                ),
            )
        } else {
            Check::fail(name, format!("{} does not exist", sock.display()), fix)
        };
    }
    match std::os::unix::net::UnixStream::connect(sock) {
        Ok(_) => Check::ok(
            name,
            format!("{} accepts connections (nothing asked)", sock.display()),
        ),
        Err(e) => Check::fail(
            name,
            format!("cannot connect to {}: {e}", sock.display()),
            fix,
        ),
    }
}
