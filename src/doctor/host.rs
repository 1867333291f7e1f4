//! The host below NVML: the `nvidia` and `nvidia_uvm` kernel modules and their version
//! (`/proc/modules`, `/sys/module/nvidia/version`, `/proc/driver/nvidia/version`), the device
//! nodes (`/dev/nvidiactl`, `/dev/nvidia-uvm`, `/dev/nvidiaN`) and whether nvidia-persistenced
//! runs — all read under the host root.
//!
//! Invariant: a device node counts as present only as a character device; anything else (a
//! regular file, a directory) is reported by its type. A symlink is followed and said.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
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

/// What a device node is, in words, and whether it is usable.
fn node(path: &Path) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!("{} does not exist", path.display()),
        _ => format!("cannot stat {}: {e}", path.display()),
    })?;
    let via = std::fs::read_link(path)
        .map(|t| format!(" (a symlink to {})", t.display()))
        .unwrap_or_default();
    let ft = meta.file_type();
    if !ft.is_char_device() {
        let kind = if ft.is_file() {
            "a regular file"
        } else if ft.is_dir() {
            "a directory"
        } else if ft.is_block_device() {
            "a block device"
        } else {
            "not a device"
        };
        return Err(format!(
            "{} is {kind}{via}, not a character device",
            path.display()
        ));
    }
    let rdev = meta.rdev();
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("{} has a NUL byte", path.display()))?;
    // SAFETY: access only reads the NUL-terminated path.
    let rw = unsafe { libc::access(c.as_ptr(), libc::R_OK | libc::W_OK) } == 0;
    if !rw {
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        return Err(format!(
            "{} (character device {major}:{minor}, mode {:o}, owner {}:{}){via} is not readable and writable by uid {uid}",
            path.display(),
            meta.mode() & 0o7777,
            meta.uid(),
            meta.gid()
        ));
    }
    Ok(format!(
        "{} character device {major}:{minor}{via}, read-write",
        path.display()
    ))
}

const NODE_FIX: &str = "the driver creates the nodes when a client first opens a GPU: run `nvidia-modprobe -c 0 -u` (or `nvidia-smi`) as root; in a container pass the devices in (`--gpus`, the NVIDIA device plugin); a node that is not a character device must be removed first";
const PERM_FIX: &str = "run gpuwatch as root or as a member of the node's group (the driver's NVreg_DeviceFileGID / NVreg_DeviceFileMode set them); in a container allow the devices in its device cgroup";

fn node_check(name: &str, path: &Path, missing_is: fn(String) -> Check) -> Check {
    match node(path) {
        Ok(found) => Check::ok(name, found),
        Err(found) if found.ends_with("does not exist") => missing_is(found),
        Err(found) if found.contains("not readable and writable") => {
            Check::fail(name, found, PERM_FIX)
        }
        Err(found) => Check::fail(name, found, NODE_FIX),
    }
}

/// `/dev/nvidiactl`, `/dev/nvidia-uvm` and every `/dev/nvidiaN`.
pub fn device_nodes(root: &Path) -> Vec<Check> {
    let dev = root.join("dev");
    let mut checks = vec![
        node_check("/dev/nvidiactl", &dev.join("nvidiactl"), |f| {
            Check::fail("/dev/nvidiactl", f, NODE_FIX)
        }),
        node_check("/dev/nvidia-uvm", &dev.join("nvidia-uvm"), |f| {
            Check::warn(
                "/dev/nvidia-uvm",
                format!("{f}: NVML (and gpuwatch) work without it, CUDA programs do not"),
                "load nvidia_uvm and create the node: `nvidia-modprobe -u -c 0` as root; in a container pass /dev/nvidia-uvm in",
            )
        }),
    ];
    let mut gpus: Vec<(u32, std::path::PathBuf)> = match std::fs::read_dir(&dev) {
        Ok(rd) => rd
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let n = name.strip_prefix("nvidia")?.parse::<u32>().ok()?;
                Some((n, e.path()))
            })
            .collect(),
        Err(e) => {
            checks.push(Check::warn(
                "/dev/nvidiaN",
                format!("cannot list {}: {e}", dev.display()),
                "mount the host's /dev (or pass --host-root)",
            ));
            return checks;
        }
    };
    gpus.sort();
    if gpus.is_empty() {
        checks.push(Check::fail(
            "/dev/nvidiaN",
            format!("no /dev/nvidia0, /dev/nvidia1, ... in {}", dev.display()),
            NODE_FIX,
        ));
        return checks;
    }
    let results: Vec<(String, Result<String, String>)> = gpus
        .iter()
        .map(|(n, p)| (format!("nvidia{n}"), node(p)))
        .collect();
    let bad: Vec<&String> = results
        .iter()
        .filter_map(|(_, r)| r.as_ref().err())
        .collect();
    if bad.is_empty() {
        let names: Vec<&str> = results.iter().map(|(n, _)| n.as_str()).collect();
        checks.push(Check::ok(
            "/dev/nvidiaN",
            format!(
                "{} GPU node{} ({}): character devices, read-write",
                names.len(),
                if names.len() == 1 { "" } else { "s" },
                names.join(", ")
            ),
        ));
    } else {
        let fix = if bad.iter().all(|b| b.contains("not readable and writable")) {
            PERM_FIX
        } else {
            NODE_FIX
        };
        let found: Vec<&str> = bad.iter().map(|s| s.as_str()).collect();
        checks.push(Check::fail("/dev/nvidiaN", found.join("; "), fix));
    }
    checks
}

/// Whether nvidia-persistenced runs, from the host's /proc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Persistenced {
    Running(u32),
    NotRunning,
    /// /proc could not be listed.
    Unknown(String),
}

/// Looks for a process named `nvidia-persistenced` (its `comm` is cut to 15 bytes).
pub fn persistenced(root: &Path) -> Persistenced {
    let proc_dir = root.join("proc");
    let rd = match std::fs::read_dir(&proc_dir) {
        Ok(rd) => rd,
        Err(e) => return Persistenced::Unknown(format!("cannot list {}: {e}", proc_dir.display())),
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if std::fs::read_to_string(e.path().join("comm"))
            .is_ok_and(|c| c.trim_end().starts_with("nvidia-persiste"))
        {
            return Persistenced::Running(pid);
        }
    }
    Persistenced::NotRunning
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

    #[test]
    fn a_real_character_device_is_a_node_and_a_file_is_not() {
        let ok = node(Path::new("/dev/null")).expect("/dev/null");
        assert!(ok.contains("character device 1:3"), "{ok}");
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("nvidiactl");
        std::fs::write(&f, "").expect("write");
        let err = node(&f).expect_err("a file");
        assert!(
            err.contains("is a regular file, not a character device"),
            "{err}"
        );
        let err = node(&dir.path().join("missing")).expect_err("missing");
        assert!(err.ends_with("does not exist"), "{err}");
    }
}
