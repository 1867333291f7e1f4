//! The one table of NVML errors: for each return code, what it means on this machine and what
//! to do about it. `run`'s start-up errors ([`super::nvml::InitError`]) and `gpuwatch doctor`
//! read it; nothing else words an NVML failure for people.
//!
//! Invariant: every [`NvmlError`] maps to exactly one [`Diagnosis`] (return codes that
//! nvml-wrapper leaves unmapped — 23 to 30 — by their number; errors of the wrapper itself, not
//! of the driver, to `WRAPPER`), and every entry names a fix, even if the fix is "nothing to
//! do".

use nvml_wrapper::error::NvmlError;

/// What an NVML error means and how to fix it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Diagnosis {
    /// NVML's name of the return code, without the `NVML_ERROR_` prefix.
    pub code: &'static str,
    /// What is wrong, as a clause ("the NVIDIA kernel driver is not loaded").
    pub cause: &'static str,
    /// What to do.
    pub fix: &'static str,
}

impl std::fmt::Display for Diagnosis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.cause, self.fix)
    }
}

const fn d(code: &'static str, cause: &'static str, fix: &'static str) -> Diagnosis {
    Diagnosis { code, cause, fix }
}

pub const UNINITIALIZED: Diagnosis = d(
    "UNINITIALIZED",
    "NVML was called before nvmlInit or after nvmlShutdown",
    "a bug in the caller, not the machine: report it with the command that failed",
);
pub const INVALID_ARGUMENT: Diagnosis = d(
    "INVALID_ARGUMENT",
    "NVML rejected an argument of the call",
    "a bug in gpuwatch or a driver it does not know: report it with `nvidia-smi -q` output",
);
pub const NOT_SUPPORTED: Diagnosis = d(
    "NOT_SUPPORTED",
    "this GPU or driver does not support the query",
    "nothing to fix: the value is unknown on this GPU (gpuwatch records it as missing, never as 0)",
);
pub const NO_PERMISSION: Diagnosis = d(
    "NO_PERMISSION",
    "no permission to open the NVIDIA devices",
    "run as a user that can read and write /dev/nvidia* (e.g. in the `video` group) or as root; in a container pass the GPUs in (`--gpus`, the NVIDIA device plugin)",
);
pub const NOT_FOUND: Diagnosis = d(
    "NOT_FOUND",
    "NVML found no such GPU, process or instance",
    "check the GPUs with `nvidia-smi -L`",
);
pub const INSUFFICIENT_SIZE: Diagnosis = d(
    "INSUFFICIENT_SIZE",
    "a buffer was too small for NVML's answer",
    "a bug in gpuwatch: report it",
);
pub const INSUFFICIENT_POWER: Diagnosis = d(
    "INSUFFICIENT_POWER",
    "a GPU's external power cables are not properly attached",
    "check the GPU's power cables and the power supply, then reboot",
);
pub const DRIVER_NOT_LOADED: Diagnosis = d(
    "DRIVER_NOT_LOADED",
    "the NVIDIA kernel driver is not loaded",
    "load it with `modprobe nvidia` or reinstall the driver; `nvidia-smi` shows the same error",
);
pub const TIMEOUT: Diagnosis = d(
    "TIMEOUT",
    "an NVML call timed out",
    "the GPU or the driver may be hung: look for `NVRM: Xid` lines in `dmesg`, drain the node and reset the GPU (`nvidia-smi -r -i N`) or reboot",
);
pub const IRQ_ISSUE: Diagnosis = d(
    "IRQ_ISSUE",
    "the kernel driver saw an interrupt problem with a GPU",
    "look for NVRM lines in `dmesg` and reboot; if it recurs check the PCIe slot and the BIOS settings",
);
pub const LIBRARY_NOT_FOUND: Diagnosis = d(
    "LIBRARY_NOT_FOUND",
    "the NVML library (libnvidia-ml.so.1) was not found",
    "install the NVIDIA driver, or point `nvml_library` / --nvml-library at libnvidia-ml.so.1 (in a container the NVIDIA container toolkit mounts it)",
);
pub const FUNCTION_NOT_FOUND: Diagnosis = d(
    "FUNCTION_NOT_FOUND",
    "the NVML library lacks a function gpuwatch calls (an old driver, or not NVIDIA's libnvidia-ml)",
    "upgrade the NVIDIA driver, or point `nvml_library` at the driver's libnvidia-ml.so.1",
);
pub const CORRUPTED_INFOROM: Diagnosis = d(
    "CORRUPTED_INFOROM",
    "a GPU's infoROM is corrupted",
    "the GPU works but its ECC and other records may be wrong: update the infoROM or RMA the board",
);
pub const GPU_IS_LOST: Diagnosis = d(
    "GPU_IS_LOST",
    "the GPU has fallen off the bus or is otherwise inaccessible",
    "look for Xid 79 in `dmesg`; drain the node and reset the GPU (`nvidia-smi -r -i N`) or reboot; if it recurs check power and seating, then RMA",
);
pub const RESET_REQUIRED: Diagnosis = d(
    "RESET_REQUIRED",
    "the GPU needs a reset before it can be used again",
    "drain the GPU and reset it (`nvidia-smi -r -i N`) or reboot",
);
pub const OPERATING_SYSTEM: Diagnosis = d(
    "OPERATING_SYSTEM",
    "the operating system or a cgroup blocks access to the GPU",
    "allow the NVIDIA devices in the device cgroup (container runtimes: pass the GPU in) or check SELinux/AppArmor",
);
pub const LIB_RM_VERSION_MISMATCH: Diagnosis = d(
    "LIB_RM_VERSION_MISMATCH",
    "the NVML library and the kernel driver have different versions",
    "reboot or reload the nvidia kernel module after a driver upgrade; in a container use the host driver's libnvidia-ml (mounted by the NVIDIA container toolkit), not one installed in the image",
);
pub const IN_USE: Diagnosis = d(
    "IN_USE",
    "the GPU is busy with another operation",
    "retry when the other operation (a reset, another management tool) is done",
);
pub const MEMORY: Diagnosis = d(
    "MEMORY",
    "the driver ran out of memory",
    "free host memory, or reboot",
);
pub const NO_DATA: Diagnosis = d(
    "NO_DATA",
    "NVML has no data for this query yet",
    "nothing to fix: the value appears once the GPU has data",
);
pub const VGPU_ECC_NOT_SUPPORTED: Diagnosis = d(
    "VGPU_ECC_NOT_SUPPORTED",
    "ECC is not supported with vGPU enabled",
    "nothing to fix: ECC values stay unknown on this vGPU",
);
pub const INSUFFICIENT_RESOURCES: Diagnosis = d(
    "INSUFFICIENT_RESOURCES",
    "the driver lacks the resources for the request",
    "retry later; free GPU resources (end idle processes)",
);
pub const FREQ_NOT_SUPPORTED: Diagnosis = d(
    "FREQ_NOT_SUPPORTED",
    "the requested clock frequency is not supported",
    "pick one of the GPU's supported clocks (`nvidia-smi -q -d SUPPORTED_CLOCKS`)",
);
pub const ARGUMENT_VERSION_MISMATCH: Diagnosis = d(
    "ARGUMENT_VERSION_MISMATCH",
    "the NVML library is older than the structure version of the call",
    "upgrade the NVIDIA driver",
);
pub const DEPRECATED: Diagnosis = d(
    "DEPRECATED",
    "the call is deprecated by this driver",
    "a gpuwatch that knows this driver is needed: report it",
);
pub const NOT_READY: Diagnosis = d(
    "NOT_READY",
    "the GPU is not ready for the request (still initialising)",
    "retry; enable persistence mode (`nvidia-smi -pm 1` or nvidia-persistenced) so the driver keeps the GPU initialised",
);
pub const GPU_NOT_FOUND: Diagnosis = d(
    "GPU_NOT_FOUND",
    "the GPU was not found",
    "check `nvidia-smi -L` and `dmesg`: the GPU may have fallen off the bus",
);
pub const INVALID_STATE: Diagnosis = d(
    "INVALID_STATE",
    "the GPU is in a state that does not allow the request",
    "check `nvidia-smi -q` (MIG, persistence and compute modes); reset the GPU if it stays",
);
pub const UNKNOWN: Diagnosis = d(
    "UNKNOWN",
    "NVML failed with an internal driver error",
    "check the driver with `nvidia-smi` and `dmesg`",
);
pub const WRAPPER: Diagnosis = d(
    "WRAPPER",
    "NVML answered something nvml-wrapper could not interpret",
    "report it with `nvidia-smi -q` output and the driver version",
);

/// The diagnosis of an NVML error.
pub fn diagnose(e: &NvmlError) -> Diagnosis {
    match e {
        NvmlError::Uninitialized => UNINITIALIZED,
        NvmlError::InvalidArg => INVALID_ARGUMENT,
        NvmlError::NotSupported => NOT_SUPPORTED,
        NvmlError::NoPermission => NO_PERMISSION,
        NvmlError::NotFound => NOT_FOUND,
        NvmlError::InsufficientSize(_) => INSUFFICIENT_SIZE,
        NvmlError::InsufficientPower => INSUFFICIENT_POWER,
        NvmlError::DriverNotLoaded => DRIVER_NOT_LOADED,
        NvmlError::Timeout => TIMEOUT,
        NvmlError::IrqIssue => IRQ_ISSUE,
        NvmlError::LibraryNotFound | NvmlError::LibloadingError(_) => LIBRARY_NOT_FOUND,
        NvmlError::FunctionNotFound | NvmlError::FailedToLoadSymbol(_) => FUNCTION_NOT_FOUND,
        NvmlError::CorruptedInfoROM => CORRUPTED_INFOROM,
        NvmlError::GpuLost => GPU_IS_LOST,
        NvmlError::ResetRequired => RESET_REQUIRED,
        NvmlError::OperatingSystem => OPERATING_SYSTEM,
        NvmlError::LibRmVersionMismatch => LIB_RM_VERSION_MISMATCH,
        NvmlError::InUse => IN_USE,
        NvmlError::InsufficientMemory => MEMORY,
        NvmlError::NoData => NO_DATA,
        NvmlError::VgpuEccNotSupported => VGPU_ECC_NOT_SUPPORTED,
        NvmlError::UnexpectedVariant(23) => INSUFFICIENT_RESOURCES,
        NvmlError::UnexpectedVariant(24) => FREQ_NOT_SUPPORTED,
        NvmlError::UnexpectedVariant(25) => ARGUMENT_VERSION_MISMATCH,
        NvmlError::UnexpectedVariant(26) => DEPRECATED,
        NvmlError::UnexpectedVariant(27) => NOT_READY,
        NvmlError::UnexpectedVariant(28) => GPU_NOT_FOUND,
        NvmlError::UnexpectedVariant(29) => INVALID_STATE,
        NvmlError::Unknown => UNKNOWN,
        _ => WRAPPER,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_return_code_the_issue_names_has_its_own_cause_and_a_fix() {
        let cases = [
            (NvmlError::NotSupported, "NOT_SUPPORTED"),
            (NvmlError::NoPermission, "NO_PERMISSION"),
            (NvmlError::DriverNotLoaded, "DRIVER_NOT_LOADED"),
            (NvmlError::LibraryNotFound, "LIBRARY_NOT_FOUND"),
            (NvmlError::Timeout, "TIMEOUT"),
            (NvmlError::LibRmVersionMismatch, "LIB_RM_VERSION_MISMATCH"),
            (NvmlError::GpuLost, "GPU_IS_LOST"),
            (NvmlError::ResetRequired, "RESET_REQUIRED"),
            (NvmlError::InsufficientPower, "INSUFFICIENT_POWER"),
            (NvmlError::Uninitialized, "UNINITIALIZED"),
            (NvmlError::UnexpectedVariant(27), "NOT_READY"),
            (NvmlError::UnexpectedVariant(28), "GPU_NOT_FOUND"),
            (NvmlError::UnexpectedVariant(99), "WRAPPER"),
        ];
        let mut causes = std::collections::HashSet::new();
        for (e, code) in cases {
            let d = diagnose(&e);
            assert_eq!(d.code, code, "{e:?}");
            assert!(!d.fix.is_empty() && !d.cause.is_empty(), "{code}");
            assert!(causes.insert(d.cause), "{code} shares its cause");
        }
    }
}
