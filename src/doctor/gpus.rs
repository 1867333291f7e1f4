//! Judging each GPU's answers: identity, persistence, compute and MIG modes, ECC, memory
//! repair (row remapping or page retirement) and PCIe link (the library's version and NVML
//! init are `nvml.rs`).
//!
//! Invariant: every NVML error is worded by the one table (`sampler::diagnosis`); a read that
//! failed is `warn` (cannot tell) or, for errors that mean the GPU or driver is broken
//! (lost, needs a reset, hung, ...), `fail` — never `ok`. NOT_SUPPORTED is `ok` only where a
//! GPU without the feature is normal (MIG, ECC, memory repair).

use std::time::Duration;

use super::Check;
use super::host::Daemon;
use crate::sampler::diagnosis::{self, Diagnosis};
use crate::sampler::probe::{Answer, Compute, GpuProbe, Probe, ProbeError};

/// Errors that mean the GPU or the driver is broken, not just that a value is unknown.
pub(super) fn severe(d: &Diagnosis) -> bool {
    matches!(
        d.code,
        "GPU_IS_LOST"
            | "RESET_REQUIRED"
            | "TIMEOUT"
            | "GPU_NOT_FOUND"
            | "INSUFFICIENT_POWER"
            | "IRQ_ISSUE"
            | "DRIVER_NOT_LOADED"
            | "LIB_RM_VERSION_MISMATCH"
            | "UNINITIALIZED"
    )
}

pub(super) fn error_check(name: &str, what: &str, d: &Diagnosis) -> Check {
    let found = format!("{what}: {}: {}", d.code, d.cause);
    if severe(d) {
        Check::fail(name, found, d.fix)
    } else {
        Check::warn(name, found, d.fix)
    }
}

/// `f` judges a value; NOT_SUPPORTED is `ok` with `absent` when given, else cannot-tell.
fn answer<T>(
    name: &str,
    a: &Answer<T>,
    absent: Option<&str>,
    f: impl FnOnce(&T) -> Check,
) -> Check {
    match a {
        Ok(v) => f(v),
        Err(d) if *d == diagnosis::NOT_SUPPORTED => match absent {
            Some(text) => Check::ok(name, text),
            None => Check::warn(name, format!("cannot tell: {}: {}", d.code, d.cause), d.fix),
        },
        Err(d) => error_check(name, "cannot read", d),
    }
}

/// Every GPU's checks, and the hung GPU and those after it (nothing when NVML did not start).
pub fn checks(
    probe: &Result<Probe, ProbeError>,
    persistenced: &Daemon,
    fabric_manager: &Daemon,
    timeout: Duration,
) -> Vec<Check> {
    let mut out = Vec::new();
    let Ok(p) = probe else {
        return out;
    };
    for g in &p.gpus {
        out.extend(gpu(g, persistenced));
    }
    out.extend(fabric(&p.gpus, fabric_manager));
    if let Some(h) = p.hung {
        out.push(Check::fail(
            format!("gpu{h}"),
            format!(
                "its NVML reads did not return within {}",
                humantime::format_duration(timeout)
            ),
            diagnosis::TIMEOUT.fix,
        ));
        let count = p.system.device_count.unwrap_or(0);
        for i in h + 1..count {
            out.push(Check::warn(
                format!("gpu{i}"),
                format!("not read: the doctor stopped at the hung gpu{h}"),
                format!("fix gpu{h} first, then run the doctor again"),
            ));
        }
    }
    out
}

fn gpu(g: &GpuProbe, persistenced: &Daemon) -> Vec<Check> {
    let id = format!("gpu{}", g.index);
    if let Err(d) = &g.handle {
        return vec![error_check(&id, "nvmlDeviceGetHandleByIndex", d)];
    }
    let n = g.index;
    let mut out = vec![match (&g.name, &g.uuid) {
        (Ok(name), Ok(uuid)) => Check::ok(&id, format!("{name} {uuid}")),
        (Err(d), _) | (_, Err(d)) => error_check(&id, "cannot read its name and UUID", d),
    }];
    let daemon = match persistenced {
        Daemon::Running(pid) => format!("nvidia-persistenced runs (pid {pid})"),
        Daemon::NotRunning => "nvidia-persistenced does not run".into(),
        Daemon::Unknown(why) => format!("unknown whether nvidia-persistenced runs ({why})"),
    };
    let name = format!("{id} persistence mode");
    out.push(answer(&name, &g.persistence, None, |on| {
        if *on {
            Check::ok(&name, format!("on; {daemon}"))
        } else {
            Check::warn(
                &name,
                format!("off; {daemon}: the driver tears the GPU down whenever no client holds it (slow first calls, lost settings)"),
                "start nvidia-persistenced (`systemctl enable --now nvidia-persistenced`), or `nvidia-smi -pm 1` as root",
            )
        }
    }));
    let name = format!("{id} compute mode");
    out.push(answer(&name, &g.compute, None, |m| match m {
        Compute::Default => Check::ok(&name, "Default"),
        Compute::ExclusiveProcess => {
            Check::ok(&name, "Exclusive_Process: one CUDA process at a time")
        }
        Compute::Prohibited => Check::warn(
            &name,
            "Prohibited: no CUDA process can use this GPU",
            format!(
                "`nvidia-smi -i {n} -c DEFAULT` as root, unless the GPU is meant to be unusable"
            ),
        ),
        Compute::ExclusiveThread => Check::warn(
            &name,
            "Exclusive_Thread, a mode current drivers no longer support",
            format!("`nvidia-smi -i {n} -c DEFAULT` (or EXCLUSIVE_PROCESS) as root"),
        ),
    }));
    let name = format!("{id} MIG mode");
    out.push(answer(&name, &g.mig, Some("not MIG-capable"), |(now, next)| {
        let word = |b: bool| if b { "enabled" } else { "disabled" };
        if now != next {
            Check::warn(
                &name,
                format!("{} now, {} after the next GPU reset", word(*now), word(*next)),
                format!("reset the GPU (`nvidia-smi -r -i {n}`) or reboot to apply the change, or set it back"),
            )
        } else {
            Check::ok(&name, word(*now))
        }
    }));
    let name = format!("{id} ECC");
    out.push(answer(&name, &g.ecc, Some("no ECC on this GPU"), |(now, next)| {
        if now != next {
            Check::warn(
                &name,
                format!("ECC {} now, {} after the next reboot", on(*now), on(*next)),
                "reboot (or reset the GPU) to apply the pending ECC mode",
            )
        } else if !now {
            Check::warn(
                &name,
                "ECC is off",
                format!("`nvidia-smi -i {n} -e 1` as root, then reboot: datacenter GPUs should run with ECC"),
            )
        } else {
            Check::ok(&name, "on")
        }
    }));
    out.push(memory(&id, g));
    let name = format!("{id} PCIe link");
    out.push(answer(&name, &g.pcie, None, |l| {
        let found = format!(
            "Gen{} x{} (maximum Gen{} x{})",
            l.gen_now, l.width_now, l.gen_max, l.width_max
        );
        if l.gen_now < l.gen_max || l.width_now < l.width_max {
            Check::warn(
                &name,
                format!("{found}: below the maximum"),
                "an idle GPU lowers its link generation to save power, so check again under load; a width below the maximum, or a generation that stays low under load, means a bad slot, riser or seating: reseat the card and check the BIOS PCIe settings",
            )
        } else {
            Check::ok(&name, found)
        }
    }));
    out
}

/// The NVLink fabric (NVSwitch systems): each GPU's registration, and the Fabric Manager that
/// registers them. Nothing on hosts whose GPUs are in no fabric (NOT_SUPPORTED everywhere).
fn fabric(gpus: &[GpuProbe], fm: &Daemon) -> Vec<Check> {
    let in_fabric: Vec<(u32, u8, u32)> = gpus
        .iter()
        .filter_map(|g| {
            g.fabric
                .as_ref()
                .ok()
                .map(|&(st, code)| (g.index, st, code))
        })
        .filter(|&(_, st, _)| (1..=3).contains(&st))
        .collect();
    if in_fabric.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut pending = Vec::new();
    for &(i, state, status) in &in_fabric {
        let name = format!("gpu{i} fabric");
        out.push(match (state, status) {
            (3, 0) => Check::ok(&name, "registered (state completed, status success)"),
            (3, code) => Check::fail(
                &name,
                format!("registration completed with an error: {}", fabric_error(code)),
                "read the Fabric Manager's log (/var/log/fabricmanager.log), restart it (`systemctl restart nvidia-fabricmanager`) and reset the GPU; a GPU that fails again needs its NVSwitch tray or the GPU checked",
            ),
            (s, _) => {
                pending.push(i);
                Check::fail(
                    &name,
                    format!(
                        "not registered (state {}): CUDA cannot start on this GPU until it is",
                        if s == 1 { "not started" } else { "in progress" }
                    ),
                    "start the Fabric Manager (`systemctl enable --now nvidia-fabricmanager`; its version must match the driver's); right after boot, wait a minute and run the doctor again",
                )
            }
        });
    }
    out.push(match fm {
        Daemon::Running(pid) => Check::ok("fabric manager", format!("nv-fabricmanager runs (pid {pid}); {} GPU(s) in the NVLink fabric", in_fabric.len())),
        Daemon::NotRunning if pending.is_empty() => Check::warn(
            "fabric manager",
            "nv-fabricmanager does not run, though the GPUs registered: a GPU reset or a new partition will not register",
            "`systemctl enable --now nvidia-fabricmanager` (the package matching the driver's version)",
        ),
        Daemon::NotRunning => Check::fail(
            "fabric manager",
            format!("nv-fabricmanager does not run on this NVSwitch system and GPU(s) {} are not registered", list(&pending)),
            "install the Fabric Manager of the driver's version and `systemctl enable --now nvidia-fabricmanager`",
        ),
        Daemon::Unknown(why) => Check::warn(
            "fabric manager",
            format!("unknown whether nv-fabricmanager runs ({why})"),
            "run the doctor with access to /proc (the host's PID namespace)",
        ),
    });
    out
}

fn list(gpus: &[u32]) -> String {
    gpus.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// An `nvmlReturn_t` as NVML names it.
fn fabric_error(code: u32) -> String {
    match gpuwatch_sim::nvml::return_code_name(code) {
        Some(name) => format!("NVML error {code} ({name})"),
        None => format!("NVML error {code}"),
    }
}

fn on(b: bool) -> &'static str {
    if b { "on" } else { "off" }
}

/// Row remapping where the GPU has it, else page retirement.
fn memory(id: &str, g: &GpuProbe) -> Check {
    let name = format!("{id} memory repair");
    let n = g.index;
    match (&g.remapped, &g.retired) {
        (Ok(r), _) if r.failure => Check::fail(
            &name,
            format!(
                "row remapping failed ({} correctable, {} uncorrectable rows remapped)",
                r.correctable, r.uncorrectable
            ),
            "the GPU has run out of spare memory rows: drain it and RMA the board",
        ),
        (Ok(r), _) if r.pending => Check::warn(
            &name,
            format!(
                "a row remap is pending ({} correctable, {} uncorrectable rows remapped)",
                r.correctable, r.uncorrectable
            ),
            format!(
                "drain the GPU and reset it (`nvidia-smi -r -i {n}`) or reboot so the remap takes effect"
            ),
        ),
        (Ok(r), _) => Check::ok(
            &name,
            format!(
                "{} correctable, {} uncorrectable rows remapped; none pending",
                r.correctable, r.uncorrectable
            ),
        ),
        (Err(d), retired) if *d == diagnosis::NOT_SUPPORTED => answer(
            &name,
            retired,
            Some("neither row remapping nor page retirement on this GPU"),
            |p| {
                let found = format!(
                    "{} pages retired for single-bit, {} for double-bit errors",
                    p.single_bit, p.double_bit
                );
                if p.pending {
                    Check::warn(
                        &name,
                        format!("{found}; more pending retirement"),
                        format!(
                            "drain the GPU and reset it (`nvidia-smi -r -i {n}`) or reboot to retire them"
                        ),
                    )
                } else {
                    Check::ok(&name, format!("{found}; none pending"))
                }
            },
        ),
        (Err(d), _) => error_check(&name, "cannot read the remapped rows", d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::Status;
    use crate::sampler::probe::{PcieLink, Remapped};

    fn healthy(index: u32) -> GpuProbe {
        GpuProbe {
            index,
            handle: Ok(()),
            name: Ok("NVIDIA H100 80GB HBM3".into()),
            uuid: Ok(format!("GPU-{index}")),
            minor: Ok(index),
            persistence: Ok(true),
            compute: Ok(Compute::Default),
            mig: Ok((false, false)),
            ecc: Ok((true, true)),
            remapped: Ok(Remapped {
                correctable: 0,
                uncorrectable: 0,
                pending: false,
                failure: false,
            }),
            retired: Err(diagnosis::NOT_SUPPORTED),
            pcie: Ok(PcieLink {
                gen_now: 5,
                gen_max: 5,
                width_now: 16,
                width_max: 16,
            }),
            fabric: Ok((3, 0)),
        }
    }

    #[test]
    fn the_fabric_is_checked_where_the_gpus_are_in_one() {
        let running = Daemon::Running(9);
        let checks = fabric(&[healthy(0), healthy(1)], &running);
        assert!(checks.iter().all(|c| c.status == Status::Ok), "{checks:?}");
        assert_eq!(checks.len(), 3);
        // A GPU still registering without the Fabric Manager: both fail, with the fix.
        let mut g = healthy(1);
        g.fabric = Ok((2, 0));
        let checks = fabric(&[healthy(0), g], &Daemon::NotRunning);
        assert_eq!(status_of(&checks, "gpu1 fabric"), Status::Fail);
        assert_eq!(status_of(&checks, "gpu0 fabric"), Status::Ok);
        let fm = checks
            .iter()
            .find(|c| c.name == "fabric manager")
            .expect("fm");
        assert_eq!(fm.status, Status::Fail);
        assert!(fm.found.contains("GPU(s) 1"), "{fm:?}");
        assert!(fm.fix.contains("nvidia-fabricmanager"), "{fm:?}");
        // Registered with an error: named.
        let mut g = healthy(0);
        g.fabric = Ok((3, 27));
        let checks = fabric(&[g], &running);
        let c = checks
            .iter()
            .find(|c| c.name == "gpu0 fabric")
            .expect("gpu0");
        assert_eq!(c.status, Status::Fail);
        assert!(c.found.contains("NOT_READY"), "{c:?}");
        // Registered, but no Fabric Manager: a warning.
        let checks = fabric(&[healthy(0)], &Daemon::NotRunning);
        assert_eq!(status_of(&checks, "fabric manager"), Status::Warn);
        // Not in a fabric (a PCIe board, an A100): nothing at all.
        let mut g = healthy(0);
        g.fabric = Err(diagnosis::NOT_SUPPORTED);
        assert!(fabric(&[g], &Daemon::NotRunning).is_empty());
    }

    fn status_of(checks: &[Check], name: &str) -> Status {
        checks
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no {name} in {checks:?}"))
            .status
    }

    #[test]
    fn a_healthy_gpu_is_all_ok_and_a_failed_row_remap_fails() {
        let running = Daemon::Running(7);
        assert!(
            gpu(&healthy(0), &running)
                .iter()
                .all(|c| c.status == Status::Ok)
        );
        let mut g = healthy(0);
        g.remapped = Ok(Remapped {
            correctable: 3,
            uncorrectable: 2,
            pending: false,
            failure: true,
        });
        let checks = gpu(&g, &running);
        assert_eq!(status_of(&checks, "gpu0 memory repair"), Status::Fail);
        let c = checks
            .iter()
            .find(|c| c.name == "gpu0 memory repair")
            .expect("check");
        assert!(c.fix.contains("RMA"), "{c:?}");
    }

    #[test]
    fn pending_modes_and_retired_pages_warn_with_the_reset_fix() {
        let mut g = healthy(1);
        g.mig = Ok((false, true));
        g.ecc = Ok((true, false));
        g.remapped = Err(diagnosis::NOT_SUPPORTED);
        g.retired = Ok(crate::sampler::probe::Retired {
            single_bit: 2,
            double_bit: 1,
            pending: true,
        });
        let checks = gpu(&g, &Daemon::NotRunning);
        for name in ["gpu1 MIG mode", "gpu1 ECC", "gpu1 memory repair"] {
            assert_eq!(status_of(&checks, name), Status::Warn, "{name}");
        }
        // A read error that means the GPU is broken fails; an unknown value only warns.
        g.persistence = Err(diagnosis::RESET_REQUIRED);
        g.compute = Err(diagnosis::NO_PERMISSION);
        let checks = gpu(&g, &Daemon::NotRunning);
        assert_eq!(status_of(&checks, "gpu1 persistence mode"), Status::Fail);
        assert_eq!(status_of(&checks, "gpu1 compute mode"), Status::Warn);
    }
}
