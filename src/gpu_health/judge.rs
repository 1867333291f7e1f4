//! The checks of one fresh, sampled GPU: its clock-event reasons, memory repair (row
//! remapping, or page retirement before Ampere), uncorrectable ECC errors and its PCIe link;
//! and, judged where the GPU reports them, the driver's recovery action, its NVLinks and its
//! NVLink fabric registration.
//!
//! Invariant: each check either judges from values that were read, or names itself in
//! `not_checked`; a missing value is never taken for a healthy one. Severities:
//! - `fail`: the hardware is degraded now or must be replaced — the power brake, hardware
//!   thermal or other hardware slowdown (clocks cut by half or more), a failed row remap,
//!   retired pages at NVIDIA's replacement threshold, a recovery action asked for, fewer
//!   NVLinks up than the model has, a fabric registration failed or not completed;
//! - `warn`: needs attention but work goes on — a software thermal slowdown under load, a
//!   pending row remap (a reset applies it), many retired pages, uncorrectable ECC errors
//!   since the driver loaded, a PCIe link below its maximum under load, NVLinks down beside
//!   links up on a model whose link count is not in the table;
//! - not a problem: idle, applications or display clocks, sync boost and the software power
//!   cap (a busy GPU at its power limit is the normal state of training) are listed in
//!   `clock_events` only.

use super::clock_events::{self as ce, ClockEvent};
use super::{
    BUSY_UTIL_PCT, CLOCK_EVENTS, ECC, Health, MEMORY_REPAIR, PCIE_LINK, RETIRED_PAGES_FAIL,
    RETIRED_PAGES_WARN, Reason, Status, reason,
};
use crate::model::{GpuInventory, GpuSample};

/// Reasons and unmade checks, collected.
#[derive(Default)]
struct Found {
    reasons: Vec<Reason>,
    not_checked: Vec<&'static str>,
}

/// The health of GPU `n` from its fresh sample `s`.
pub(super) fn sample(
    n: u32,
    s: &GpuSample,
    inv: &GpuInventory,
    xids_of: &[crate::model::RecentXid],
) -> Health {
    // None: utilisation not read, so whether the GPU is busy is unknown.
    let busy = s.util_gpu_pct.map(|u| u >= BUSY_UTIL_PCT);
    let mut f = Found::default();
    let clock_events = clocks(&mut f, s, busy);
    memory(&mut f, n, s);
    ecc(&mut f, s);
    pcie(&mut f, s, inv, busy);
    recovery(&mut f, n, s);
    nvlink(&mut f, n, s, inv);
    fabric(&mut f, s);
    xids(&mut f, xids_of);
    f.reasons.sort_by_key(|r| std::cmp::Reverse(r.severity));
    let status = if f.not_checked.len() == super::CHECKS.len() {
        f.reasons.push(reason(
            "nothing_read",
            "none of the health readings (clock events, memory repair, ECC, PCIe link) was read"
                .into(),
            "see the failing NVML reads in `gpuwatch status` and run `gpuwatch doctor`".into(),
        ));
        Status::Unknown
    } else {
        f.reasons
            .iter()
            .map(|r| r.severity)
            .max()
            .unwrap_or(Status::Ok)
    };
    Health {
        status,
        reasons: f.reasons,
        clock_events,
        not_checked: f.not_checked,
    }
}

/// The links down (bit N: link N) as `3, 7`.
fn links(mask: u32) -> String {
    (0..32)
        .filter(|l| mask & (1 << l) != 0)
        .map(|l: u32| l.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// NVLink, where the GPU has it (judged when read, like the recovery action): fewer links up
/// than the model has (the model table) fails; on a model the table does not know, links down
/// beside links up warn (a bridged PCIe board without its bridges has none up: nothing).
fn nvlink(f: &mut Found, n: u32, s: &GpuSample, inv: &GpuInventory) {
    let Some(up) = s.nvlink_links_up else {
        return;
    };
    let mask = s.nvlink_down_mask.unwrap_or(0);
    let expected = inv
        .name
        .as_deref()
        .and_then(crate::specs::lookup)
        .and_then(|m| m.nvlinks);
    let down = if mask != 0 {
        format!(" (link(s) {} down)", links(mask))
    } else {
        String::new()
    };
    let fix = format!(
        "drain the node's multi-GPU jobs and reset the GPU (`nvidia-smi -r -i {n}`); a link still down after the reset, or after a reboot, needs the board or its NVSwitch tray checked (`nvidia-smi nvlink -s -i {n}`)"
    );
    match expected {
        Some(want) if up < want => f.reasons.push(reason(
            "nvlink_down",
            format!("{up} of the model's {want} NVLinks up{down}: multi-GPU jobs on it slow down or hang"),
            fix,
        )),
        None if up > 0 && mask != 0 => f.reasons.push(reason(
            "nvlink_links_down",
            format!("{up} NVLinks up{down}"),
            fix,
        )),
        _ => {}
    }
}

/// The NVLink fabric registration, where the GPU is in one (judged when read).
fn fabric(f: &mut Found, s: &GpuSample) {
    let (Some(state), Some(status)) = (s.fabric_state, s.fabric_status) else {
        return;
    };
    let fix = "check the Fabric Manager (`systemctl status nvidia-fabricmanager`, /var/log/fabricmanager.log; its version must match the driver's) and reset the GPU once it runs; `gpuwatch doctor` checks it";
    match (state, status) {
        (3, 0) => {}
        (3, code) => f.reasons.push(reason(
            "fabric_failed",
            format!("the NVLink fabric registration failed (NVML error {code}): CUDA cannot use this GPU"),
            fix.into(),
        )),
        (st, _) => f.reasons.push(reason(
            "fabric_not_ready",
            format!(
                "the NVLink fabric registration has not completed (state {}): CUDA cannot start on this GPU until it does",
                if st == 1 { "not started" } else { "in progress" }
            ),
            fix.into(),
        )),
    }
}

/// The GPU's recent XIDs that are the hardware's or the driver's (the catalogue's class; an
/// application's XID is the job's fault and an informational one a report of another), each
/// with the catalogue's action: critical ones fail, the others warn. Judged where any
/// happened, not a check of its own.
fn xids(f: &mut Found, recent: &[crate::model::RecentXid]) {
    use crate::xid::{self, Class};
    for x in recent {
        let Some(e) = xid::lookup(x.code) else {
            continue;
        };
        if !matches!(e.class, Class::Hardware | Class::Driver) {
            continue;
        }
        let code = if e.severity == crate::model::Severity::Critical {
            "xid_critical"
        } else {
            "xid_warning"
        };
        f.reasons.push(reason(
            code,
            format!(
                "XID {} ({}) {}× in the last day, last at {}: {}",
                x.code,
                e.name,
                x.count,
                crate::format::utc_label(x.last_ms),
                e.meaning
            ),
            format!("{}: {}", e.action.as_str(), e.detail),
        ));
    }
}

/// The recovery action the driver asks for, where it reports one (R550 and later, boards
/// with row remapping): judged when read, and not a check of its own (absent on most drivers,
/// it is not listed in `not_checked`).
fn recovery(f: &mut Found, n: u32, s: &GpuSample) {
    let Some(action) = s.recovery_action.filter(|a| *a != 0) else {
        return;
    };
    let (what, fix) = match action {
        1 => (
            "a GPU reset",
            format!("stop the GPU's processes and reset it (`nvidia-smi -r -i {n}`); new work may start after"),
        ),
        2 => (
            "a node reboot",
            "the fault may have left the OS inconsistent: drain the node and reboot it".into(),
        ),
        3 => (
            "draining peer-to-peer traffic",
            "stop the jobs that use this GPU's NVLink/P2P paths (multi-GPU jobs), then reset the GPU".into(),
        ),
        4 => (
            "draining peer-to-peer traffic, then a GPU reset",
            format!("drain the node's multi-GPU jobs, then reset the GPU (`nvidia-smi -r -i {n}`)"),
        ),
        5 => (
            "recovering its IMEX domain",
            "drain the jobs of the NVLink domain and restart the IMEX service of its nodes".into(),
        ),
        6 => (
            "a reset of its PCIe bus",
            "drain the node and reset the GPU's bus (a reboot does it)".into(),
        ),
        7 => (
            "a system reboot",
            "drain the node and reboot it (a full power cycle if the GPU does not come back)".into(),
        ),
        _ => (
            "an action gpuwatch does not know",
            "see the driver's documentation of nvmlDeviceGpuRecoveryAction_t for this value".into(),
        ),
    };
    f.reasons.push(reason(
        "recovery_action",
        format!("the driver asks for {what} (recovery action {action})"),
        fix,
    ));
}

fn clocks(f: &mut Found, s: &GpuSample, busy: Option<bool>) -> Option<Vec<&'static str>> {
    let Some(mask) = s.throttle_reasons else {
        f.not_checked.push(CLOCK_EVENTS);
        return None;
    };
    let set: Vec<&'static ClockEvent> = ce::decode(mask).collect();
    let has = |bit: u64| mask & bit != 0;
    let temp = s
        .temp_c
        .map_or_else(String::new, |t| format!(" (GPU at {t} °C)"));
    let cooling = "check the cooling: fans, airflow, inlet temperature, the heatsink or cold plate; drain the GPU until it is fixed";
    if has(ce::HW_POWER_BRAKE_SLOWDOWN) {
        f.reasons.push(reason(
            "hw_power_brake_slowdown",
            "clocks cut by the external power brake: the system's power supply asserted it".into(),
            "check the node's power supplies and the BMC's event log (a failed PSU, lost redundancy, an overloaded circuit); drain the node while it persists".into(),
        ));
    }
    if has(ce::HW_THERMAL_SLOWDOWN) {
        f.reasons.push(reason(
            "hw_thermal_slowdown",
            format!("clocks cut by hardware thermal protection: the GPU is too hot{temp}"),
            cooling.into(),
        ));
    }
    // HW slowdown accompanies the two above; alone it names another hardware cause.
    if has(ce::HW_SLOWDOWN) && !has(ce::HW_POWER_BRAKE_SLOWDOWN | ce::HW_THERMAL_SLOWDOWN) {
        f.reasons.push(reason(
            "hw_slowdown",
            format!("hardware slowdown: clocks cut by half or more (high temperature, the power brake or too much power draw){temp}"),
            "check the cooling and the node's power supplies; if neither explains it, drain the GPU and run DCGM diagnostics (`dcgmi diag -r 3`)".into(),
        ));
    }
    // At idle a software slowdown costs nothing; with utilisation unknown it may.
    if has(ce::SW_THERMAL_SLOWDOWN) && busy != Some(false) {
        f.reasons.push(reason(
            "sw_thermal_slowdown",
            format!("the driver lowers clocks under load to keep the GPU below its maximum operating temperature{temp}"),
            "check the cooling (fans, airflow, inlet temperature) and compare with the node's other GPUs".into(),
        ));
    }
    Some(set.iter().map(|r| r.name).collect())
}

fn memory(f: &mut Found, n: u32, s: &GpuSample) {
    let rows = || {
        format!(
            "{} correctable, {} uncorrectable rows remapped",
            count(s.remapped_rows_correctable),
            count(s.remapped_rows_uncorrectable)
        )
    };
    let reset = format!(
        "reset the GPU when its work is drained (`nvidia-smi -r -i {n}`) or reboot: the repair takes effect at the reset"
    );
    match (s.remap_failure, s.remap_pending, s.retired_pages) {
        (Some(true), ..) => f.reasons.push(reason(
            "row_remap_failure",
            format!("row remapping failed: a memory bank ran out of spare rows ({})", rows()),
            format!("drain the GPU and RMA the board (NVIDIA's RMA criterion, XID 64); until then {reset}"),
        )),
        (_, Some(true), _) => f.reasons.push(reason(
            "row_remap_pending",
            format!("a memory row remap is pending ({})", rows()),
            reset,
        )),
        (Some(false), _, _) | (_, Some(false), _) => {}
        (None, None, Some(pages)) if pages >= RETIRED_PAGES_FAIL => f.reasons.push(reason(
            "retired_pages_limit",
            format!("{pages} memory pages retired: at NVIDIA's replacement threshold ({RETIRED_PAGES_FAIL}; at most 64 can be retired)"),
            "drain the GPU and RMA the board".into(),
        )),
        (None, None, Some(pages)) if pages >= RETIRED_PAGES_WARN => f.reasons.push(reason(
            "retired_pages_high",
            format!("{pages} memory pages retired ({RETIRED_PAGES_WARN} or more; replacement at {RETIRED_PAGES_FAIL})"),
            "run DCGM diagnostics (`dcgmi diag -r 3`) and plan the board's replacement if the count grows".into(),
        )),
        (None, None, Some(_)) => {}
        (None, None, None) => f.not_checked.push(MEMORY_REPAIR),
    }
}

fn ecc(f: &mut Found, s: &GpuSample) {
    match s.ecc_uncorrected {
        None => f.not_checked.push(ECC),
        Some(0) => {}
        Some(errors) => f.reasons.push(reason(
            "ecc_uncorrectable",
            format!("{errors} uncorrectable ECC errors since the driver loaded"),
            "the job on the GPU was likely hit (XID 48/94/95): restart it; a pending row remap or page retirement needs a GPU reset; if errors repeat, run DCGM diagnostics and RMA the board".into(),
        )),
    }
}

fn pcie(f: &mut Found, s: &GpuSample, inv: &GpuInventory, busy: Option<bool>) {
    let gen_low = s.pcie_gen.zip(inv.pcie_max_gen).map(|(g, m)| g < m);
    let width_low = s.pcie_width.zip(inv.pcie_max_width).map(|(w, m)| w < m);
    // An idle GPU lowers its link to save power: judged only under load.
    if busy != Some(true) || (gen_low.is_none() && width_low.is_none()) {
        f.not_checked.push(PCIE_LINK);
        return;
    }
    if gen_low == Some(true) || width_low == Some(true) {
        f.reasons.push(reason(
            "pcie_link_degraded",
            format!(
                "PCIe link Gen{} x{} under load, below its maximum Gen{} x{}",
                count(s.pcie_gen),
                count(s.pcie_width),
                count(inv.pcie_max_gen),
                count(inv.pcie_max_width)
            ),
            "reseat the card; check the slot, the riser and the BIOS PCIe settings".into(),
        ));
    }
}

fn count(v: Option<u32>) -> String {
    v.map_or_else(|| "?".into(), |v| v.to_string())
}
