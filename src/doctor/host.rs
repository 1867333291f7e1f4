//! The host below NVML: the `nvidia` and `nvidia_uvm` kernel modules and their version
//! (`/proc/modules`, `/sys/module/nvidia/version`, `/proc/driver/nvidia/version`) and whether
//! nvidia-persistenced runs — all read under the host root (the device nodes are `nodes.rs`).
//!
//! Invariant: a version is taken only from a token that looks like one (`550.90.07`); a file
//! that cannot be read makes its check `warn`, never `ok`.

use std::path::Path;

use super::Check;

/// The kernel module's checks and the driver version they found.
#[derive(Debug, Clone)]
pub struct Module {
    pub checks: Vec<Check>,
    /// The `nvidia` module's version, when a version file could be read.
    pub version: Option<String>,
}

/// The first token of `line` that looks like a driver version (`550.90.07`, `535.104.05`).
pub fn version_token(line: &str) -> Option<String> {
    line.split_whitespace()
        .find(|t| {
            let parts: Vec<&str> = t.split('.').collect();
            parts.len() >= 2
                && parts
                    .iter()
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_string)
}

fn read(root: &Path, rel: &str) -> Result<String, String> {
    let p = root.join(rel);
    std::fs::read_to_string(&p).map_err(|e| format!("cannot read {}: {e}", p.display()))
}

const MODPROBE_FIX: &str = "load it with `modprobe nvidia` (install the NVIDIA driver if modprobe finds no module; after a kernel update rebuild it, e.g. `dkms autoinstall`); in a container the host must load it";

/// `nvidia` loaded with its version, and `nvidia_uvm`.
pub fn kernel_module(root: &Path) -> Module {
    let modules = read(root, "proc/modules");
    let loaded = |name: &str| -> Option<bool> {
        let text = modules.as_ref().ok()?;
        Some(
            text.lines()
                .any(|l| l.split_whitespace().next() == Some(name)),
        )
    };
    let sys = read(root, "sys/module/nvidia/version")
        .ok()
        .and_then(|t| version_token(&t));
    let nvrm_line = read(root, "proc/driver/nvidia/version").ok().and_then(|t| {
        t.lines()
            .find(|l| l.starts_with("NVRM version:"))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
    });
    let nvrm = nvrm_line.as_deref().and_then(version_token);
    let version = sys.clone().or_else(|| nvrm.clone());
    let mut checks = Vec::new();
    let name = "kernel module";
    checks.push(match (loaded("nvidia"), &modules) {
        (None, Err(e)) => Check::warn(
            name,
            format!("{e}: cannot tell whether the nvidia module is loaded"),
            "mount the host's /proc (or pass --host-root) so the doctor can read /proc/modules",
        ),
        (Some(false) | None, _) => Check::fail(
            name,
            format!(
                "nvidia is not in {}",
                root.join("proc/modules").display()
            ),
            MODPROBE_FIX,
        ),
        (Some(true), _) => match (&sys, &nvrm) {
            (Some(a), Some(b)) if a != b => Check::fail(
                name,
                format!(
                    "nvidia loaded, but /sys/module/nvidia/version says {a} and /proc/driver/nvidia/version says {b}"
                ),
                "the loaded module is not the installed driver: reboot, or reload the module (`rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia; modprobe nvidia`)",
            ),
            (None, None) => Check::warn(
                name,
                "nvidia loaded, but neither /sys/module/nvidia/version nor the NVRM line of /proc/driver/nvidia/version could be read: its version is unknown",
                "mount the host's /sys and /proc (or pass --host-root)",
            ),
            _ => Check::ok(
                name,
                format!(
                    "nvidia {} loaded{}",
                    version.as_deref().unwrap_or("?"),
                    nvrm_line
                        .as_deref()
                        .map(|l| format!(" ({l})"))
                        .unwrap_or_default()
                ),
            ),
        },
    });
    checks.push(match loaded("nvidia_uvm") {
        Some(true) => Check::ok("nvidia_uvm", "loaded"),
        Some(false) => Check::warn(
            "nvidia_uvm",
            "nvidia_uvm is not loaded: NVML (and gpuwatch) work, CUDA programs fail",
            "load it with `modprobe nvidia-uvm` (or `nvidia-modprobe -u -c=0`)",
        ),
        None => Check::warn(
            "nvidia_uvm",
            "cannot read /proc/modules: unknown whether nvidia_uvm is loaded",
            "mount the host's /proc (or pass --host-root)",
        ),
    });
    Module { checks, version }
}

/// Whether a daemon (nvidia-persistenced, the Fabric Manager) runs, from the host's /proc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Daemon {
    Running(u32),
    NotRunning,
    /// /proc could not be listed.
    Unknown(String),
}

/// Looks for a process named `nvidia-persistenced` (its `comm` is cut to 15 bytes).
pub fn persistenced(root: &Path) -> Daemon {
    daemon(root, "nvidia-persistenced")
}

/// Looks for the Fabric Manager (`nv-fabricmanager`, the daemon of `nvidia-fabricmanager`).
pub fn fabric_manager(root: &Path) -> Daemon {
    daemon(root, "nv-fabricmanager")
}

/// Looks for a process whose `comm` is `name` (cut to 15 bytes, as the kernel keeps it).
fn daemon(root: &Path, name: &str) -> Daemon {
    let comm = &name.as_bytes()[..name.len().min(15)];
    let proc_dir = root.join("proc");
    let rd = match std::fs::read_dir(&proc_dir) {
        Ok(rd) => rd,
        Err(e) => return Daemon::Unknown(format!("cannot list {}: {e}", proc_dir.display())),
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if std::fs::read_to_string(e.path().join("comm"))
            .is_ok_and(|c| c.trim_end().as_bytes() == comm)
        {
            return Daemon::Running(pid);
        }
    }
    Daemon::NotRunning
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_from_the_real_version_files() {
        assert_eq!(
            version_token("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 09:35:42 UTC 2024").as_deref(),
            Some("550.90.07")
        );
        assert_eq!(
            version_token("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.104.05  Release Build  (dvs-builder@U16-I3-B03-4-3)").as_deref(),
            Some("535.104.05")
        );
        assert_eq!(version_token("550.90.07\n").as_deref(), Some("550.90.07"));
        assert_eq!(version_token("x86_64 Kernel Module"), None);
    }
}
