//! The device nodes under the host root: `/dev/nvidiactl`, `/dev/nvidia-uvm` and every
//! `/dev/nvidiaN` (present, a character device, readable and writable by this process), and
//! each GPU NVML lists against its node by its minor number (the N of `/dev/nvidiaN`).
//!
//! Invariants: a device node counts as usable only as a character device; anything else (a
//! regular file, a directory) is reported by its type, and a symlink is followed and said.
//! Permission is the kernel's answer for this process's effective ids (`faccessat` with
//! `AT_EACCESS`), never a guess from the mode bits. Against NVML's GPUs an entry counts by
//! its name (its type is the `/dev/nvidiaN` check's business).

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::Check;
use crate::sampler::probe::Answer;

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
    // The kernel's own answer for this process's effective uid, gid and groups (as `open`
    // would judge them; ACLs included), not a guess from the mode bits.
    // SAFETY: faccessat only reads the NUL-terminated path.
    let rw = unsafe {
        libc::faccessat(
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::R_OK | libc::W_OK,
            libc::AT_EACCESS,
        )
    } == 0;
    if !rw {
        // SAFETY: geteuid and getegid cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        return Err(format!(
            "{} (character device {major}:{minor}, mode {:o}, owner {}:{}){via} is not readable and writable by uid {uid} (gid {gid})",
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

/// The `/dev/nvidiaN` entries (any file type) by their number N, in order.
fn gpu_nodes(root: &Path) -> Result<Vec<(u32, PathBuf)>, String> {
    let dev = root.join("dev");
    let rd = std::fs::read_dir(&dev).map_err(|e| format!("cannot list {}: {e}", dev.display()))?;
    let mut gpus: Vec<(u32, PathBuf)> = rd
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let n = name.strip_prefix("nvidia")?.parse::<u32>().ok()?;
            Some((n, e.path()))
        })
        .collect();
    gpus.sort();
    Ok(gpus)
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
    let gpus = match gpu_nodes(root) {
        Ok(gpus) => gpus,
        Err(e) => {
            checks.push(Check::warn(
                "/dev/nvidiaN",
                e,
                "mount the host's /dev (or pass --host-root)",
            ));
            return checks;
        }
    };
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

const MISSING_NODE_FIX: &str = "create the nodes as root: `nvidia-modprobe -c N` for each missing minor number N (running `nvidia-smi` once as root creates them all); in a container pass every GPU's node in (`--gpus`, the NVIDIA device plugin)";
const EXTRA_NODE_FIX: &str = "if `nvidia-smi -L` lists every GPU this machine should have, the extra nodes are stale (a removed GPU, or one bound to vfio-pci for a VM) and harmless; otherwise a GPU failed to initialise or fell off the bus: look for `NVRM` and `Xid` lines in `dmesg`, check `lspci -d 10de:`, and reset the GPU or reboot";

/// `/dev/nvidiaN` against the GPUs NVML lists, each by its minor number (the N of its node):
/// FAIL for a GPU without its node, warn for nodes no listed GPU has. `gpus` holds every GPU
/// NVML read, with `all` false when some were not read (then extra nodes are not judged).
/// `None` when /dev cannot be listed (the `/dev/nvidiaN` check said so).
pub fn nodes_for_gpus(root: &Path, gpus: &[(u32, Answer<u32>)], all: bool) -> Option<Check> {
    let name = "/dev/nvidiaN vs NVML";
    let nodes: Vec<u32> = gpu_nodes(root).ok()?.into_iter().map(|(n, _)| n).collect();
    let mut missing = Vec::new();
    let mut unknown = Vec::new();
    let mut matched = Vec::new();
    for (index, minor) in gpus {
        match minor {
            Ok(m) if nodes.contains(m) => matched.push(format!("gpu{index} → nvidia{m}")),
            Ok(m) => missing.push(format!(
                "gpu{index} (minor number {m}) has no /dev/nvidia{m}"
            )),
            Err(d) => unknown.push(format!(
                "gpu{index}'s minor number: {}: {}",
                d.code, d.cause
            )),
        }
    }
    let minors: Vec<u32> = gpus
        .iter()
        .filter_map(|(_, m)| m.as_ref().ok().copied())
        .collect();
    let extra: Vec<String> = if all && unknown.is_empty() {
        nodes
            .iter()
            .filter(|n| !minors.contains(n))
            .map(|n| format!("nvidia{n}"))
            .collect()
    } else {
        Vec::new()
    };
    let extra_text = (!extra.is_empty()).then(|| {
        format!(
            "{} for no GPU NVML lists ({} GPU{})",
            extra.join(", "),
            gpus.len(),
            if gpus.len() == 1 { "" } else { "s" }
        )
    });
    Some(if !missing.is_empty() {
        let mut found = missing;
        found.extend(extra_text);
        Check::fail(name, found.join("; "), MISSING_NODE_FIX)
    } else if let Some(text) = extra_text {
        Check::warn(name, text, EXTRA_NODE_FIX)
    } else if !unknown.is_empty() {
        Check::warn(
            name,
            format!("cannot tell: {}", unknown.join("; ")),
            "see the GPU's own check; run the doctor again when NVML answers",
        )
    } else {
        Check::ok(
            name,
            format!(
                "{} node{} for NVML's {} GPU{} ({})",
                nodes.len(),
                if nodes.len() == 1 { "" } else { "s" },
                gpus.len(),
                if gpus.len() == 1 { "" } else { "s" },
                matched.join(", ")
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
