//! NVML itself: the library's version against the kernel driver's (the container mismatch:
//! the version in the picked file's name and the one NVML reports, and `nvmlInit`'s
//! LIB_RM_VERSION_MISMATCH), and NVML init with its GPU count.
//!
//! Invariant: every NVML error is worded by the one table (`sampler::diagnosis`); a side that
//! cannot be known makes the version check `warn`, never `ok`.

use std::time::Duration;

use super::Check;
use super::gpus::error_check;
use super::library::Library;
use crate::sampler::diagnosis;
use crate::sampler::nvml::InitError;
use crate::sampler::probe::{Probe, ProbeError};

/// `driver versions` and `nvml init`.
pub fn checks(
    probe: &Result<Probe, ProbeError>,
    module: Option<&str>,
    lib: &Library,
    timeout: Duration,
) -> Vec<Check> {
    vec![versions(probe, module, lib), init(probe, lib, timeout)]
}

fn versions(probe: &Result<Probe, ProbeError>, module: Option<&str>, lib: &Library) -> Check {
    let name = "driver versions";
    let file = lib.pick.as_ref().and_then(|c| c.version());
    let reported = probe
        .as_ref()
        .ok()
        .and_then(|p| p.system.driver_version.as_ref().ok().cloned());
    let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "unknown".into());
    let found = format!(
        "kernel module {}, library file {}, NVML reports {}",
        module.unwrap_or("unknown"),
        show(&file),
        show(&reported)
    );
    let mismatch = diagnosis::LIB_RM_VERSION_MISMATCH;
    if let Err(ProbeError::Init(InitError::Nvml(d))) = probe
        && *d == mismatch
    {
        return Check::fail(
            name,
            format!(
                "nvmlInit answered LIB_RM_VERSION_MISMATCH ({}); {found}",
                d.cause
            ),
            mismatch.fix,
        );
    }
    let Some(module) = module else {
        return Check::warn(
            name,
            format!("{found}: cannot compare without the kernel module's version"),
            "load the nvidia module (see `kernel module`) and run the doctor again",
        );
    };
    let others: Vec<&String> = file.iter().chain(reported.iter()).collect();
    if others.is_empty() {
        return Check::warn(
            name,
            format!(
                "{found}: neither the library's file name nor NVML gives the library's version"
            ),
            "run the doctor where NVML initialises (see `nvml init`)",
        );
    }
    if others.iter().any(|v| v.as_str() != module) {
        return Check::fail(
            name,
            format!("{found}: the library does not match the kernel module"),
            mismatch.fix,
        );
    }
    Check::ok(name, found)
}

fn init(probe: &Result<Probe, ProbeError>, lib: &Library, timeout: Duration) -> Check {
    let name = "nvml init";
    match probe {
        Err(ProbeError::Init(e)) => {
            let found = match e {
                InitError::LibraryMissing { path, reason } => {
                    format!("cannot load {path}: {reason}")
                }
                InitError::MissingSymbol { path, symbol } => format!("{path} lacks {symbol}"),
                InitError::Nvml(d) => format!("nvmlInit: {}: {}", d.code, d.cause),
            };
            Check::fail(name, found, e.diagnosis().fix)
        }
        Err(ProbeError::InitHung(_)) => Check::fail(
            name,
            format!(
                "nvmlInit did not return within {}",
                humantime::format_duration(timeout)
            ),
            diagnosis::TIMEOUT.fix,
        ),
        Err(e @ ProbeError::Thread(_)) => Check::fail(
            name,
            e.to_string(),
            "the machine is out of threads or memory: retry",
        ),
        Ok(p) => {
            let s = &p.system;
            let loaded = s
                .loaded_from
                .clone()
                .or_else(|| lib.configured.clone())
                .map_or_else(|| "libnvidia-ml.so.1".into(), |p| p.display().to_string());
            match &s.device_count {
                Err(d) => error_check(name, "nvmlDeviceGetCount", d),
                Ok(0) => Check::warn(
                    name,
                    format!("NVML ({loaded}) initialised but sees no GPUs"),
                    "check `nvidia-smi -L` and `lspci | grep -i nvidia`; in a container pass the GPUs in (`--gpus`, NVIDIA_VISIBLE_DEVICES, the device plugin)",
                ),
                Ok(n) => Check::ok(
                    name,
                    format!(
                        "NVML {} (driver {}) from {loaded}: {n} GPU{}",
                        s.nvml_version.as_deref().unwrap_or("unknown"),
                        s.driver_version.as_deref().unwrap_or("unknown"),
                        if *n == 1 { "" } else { "s" }
                    ),
                ),
            }
        }
    }
}
