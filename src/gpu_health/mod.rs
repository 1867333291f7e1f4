//! A GPU's hardware health — `ok`, `warn`, `fail` or `unknown`, with its reasons — judged from
//! what the store already holds about the GPU: its newest sample, its inventory, whether it
//! is lost and how old the sample is. `gpuwatch status` (the table and `--format json`, hence
//! `/api/v1/status`), `/metrics` (`gpuwatch_gpu_health`, `gpuwatch_gpu_health_reason`,
//! `gpuwatch_gpu_clock_event_reason`) and the live page show it. (Not to be confused with
//! `telemetry::Health`, the daemon's own `/healthz`.)
//!
//! Each reason is a stable code ([`CODES`]; docs/HEALTH.md lists them, a test checks), a
//! severity, a text with the values behind it and a fix, worded like the doctor's checks and
//! the XID catalogue's actions.
//!
//! Invariants:
//! - Pure and cheap: a function of one [`GpuStatusRow`] and the staleness bound, no I/O; a
//!   scrape judges the rows it has already read (their recent XIDs included: one query of
//!   the status read for every GPU), so health adds no query of its own.
//! - Unknown is not OK: no sample, a stale one or a gap is `unknown`; a check whose readings
//!   were not read (or, for the PCIe link, an idle GPU) is named in `not_checked`, and a GPU
//!   none of whose checks could be made is `unknown`, never `ok`.
//! - A lost GPU is `fail`, whatever its last sample said.
//! - Clock-event bits are decoded by the one table, [`clock_events`].

pub mod clock_events;
mod judge;
#[cfg(test)]
mod tests;

use crate::model::SampleStatus;
use crate::store::read::GpuStatusRow;

/// A verdict, mildest first (so the worst of several is their maximum).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    /// Nothing recent enough to judge.
    Unknown,
    Warn,
    Fail,
}

impl Status {
    /// Every status, in the order `/metrics` exports them.
    pub const ALL: [Status; 4] = [Status::Ok, Status::Warn, Status::Fail, Status::Unknown];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Unknown => "unknown",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }
}

/// One thing wrong (or unknowable) about a GPU.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Reason {
    /// One of [`CODES`].
    pub code: &'static str,
    /// `warn`, `fail` or `unknown`; never `ok`.
    pub severity: Status,
    /// What was found, with the values.
    pub text: String,
    /// What to do.
    pub fix: String,
}

/// A GPU's health.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Health {
    pub status: Status,
    /// Worst first.
    pub reasons: Vec<Reason>,
    /// The clock-event reasons set in the judged sample, by name; `None` (JSON `null`) when
    /// the bitmask was not read or there is no sample to judge.
    pub clock_events: Option<Vec<&'static str>>,
    /// The checks ([`CHECKS`]) that could not be made from the sample.
    pub not_checked: Vec<&'static str>,
}

/// The checks, as `not_checked` names them.
pub const CHECKS: [&str; 4] = [CLOCK_EVENTS, MEMORY_REPAIR, ECC, PCIE_LINK];
pub const CLOCK_EVENTS: &str = "clock_events";
pub const MEMORY_REPAIR: &str = "memory_repair";
pub const ECC: &str = "ecc";
pub const PCIE_LINK: &str = "pcie_link";

/// Every reason code with its severity (docs/HEALTH.md has one row per code).
pub const CODES: &[(&str, Status)] = &[
    ("gpu_lost", Status::Fail),
    ("hw_power_brake_slowdown", Status::Fail),
    ("hw_thermal_slowdown", Status::Fail),
    ("hw_slowdown", Status::Fail),
    ("sw_thermal_slowdown", Status::Warn),
    ("row_remap_failure", Status::Fail),
    ("row_remap_pending", Status::Warn),
    ("retired_pages_limit", Status::Fail),
    ("retired_pages_high", Status::Warn),
    ("ecc_uncorrectable", Status::Warn),
    ("pcie_link_degraded", Status::Warn),
    ("recovery_action", Status::Fail),
    ("nvlink_down", Status::Fail),
    ("nvlink_links_down", Status::Warn),
    ("fabric_failed", Status::Fail),
    ("fabric_not_ready", Status::Fail),
    ("xid_critical", Status::Fail),
    ("xid_warning", Status::Warn),
    ("mig_instance", Status::Unknown),
    ("no_sample", Status::Unknown),
    ("stale_sample", Status::Unknown),
    ("sample_gap", Status::Unknown),
    ("nothing_read", Status::Unknown),
];

/// Utilisation (%) from which a GPU counts as busy: below it, a lowered PCIe link and a
/// software thermal slowdown are power saving, not faults.
pub const BUSY_UTIL_PCT: u32 = 20;
/// Retired pages from which a pre-Ampere GPU warns (DCGM's soft limit).
pub const RETIRED_PAGES_WARN: u32 = 15;
/// Retired pages from which it fails: NVIDIA's replacement threshold (64 can be retired).
pub const RETIRED_PAGES_FAIL: u32 = 60;

impl Health {
    /// A verdict that judged nothing: lost, or no usable sample.
    fn without_checks(reason: Reason) -> Health {
        Health {
            status: reason.severity,
            reasons: vec![reason],
            clock_events: None,
            not_checked: CHECKS.to_vec(),
        }
    }

    /// `{"status", "reasons": [{"code", "severity", "text", "fix"}], "clock_events",
    /// "not_checked"}`.
    pub fn json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

fn reason(code: &'static str, text: String, fix: String) -> Reason {
    let severity = CODES
        .iter()
        .find(|(c, _)| *c == code)
        .map_or(Status::Unknown, |(_, s)| *s);
    Reason {
        code,
        severity,
        text,
        fix,
    }
}

/// The health of the GPU of `row`, whose sample counts as stale after `stale_after_ms`.
pub fn judge(row: &GpuStatusRow, stale_after_ms: i64) -> Health {
    let n = row.inventory.index;
    // A MIG instance's hardware is its parent's: judged there, once.
    if let Some(m) = &row.inventory.mig {
        return Health::without_checks(reason(
            "mig_instance",
            format!(
                "MIG instance {}/{} ({}): its hardware is judged on its parent, GPU {n}",
                n, m.gpu_instance_id, m.profile
            ),
            format!("see GPU {n}'s health"),
        ));
    }
    let latest = row.latest.as_ref();
    if row.lost_at_ms.is_some() || latest.is_some_and(|s| s.status == SampleStatus::Lost) {
        return Health::without_checks(reason(
            "gpu_lost",
            "the GPU has fallen off the bus (NVML: GPU is lost); gpuwatch no longer reads it".into(),
            "drain the node and reboot it; check the card's power, cooling and seating; RMA if it repeats (XID 79)".into(),
        ));
    }
    let Some(s) = latest else {
        return Health::without_checks(reason(
            "no_sample",
            "no sample of this GPU is stored".into(),
            "check that `gpuwatch run` samples it (`gpuwatch doctor`)".into(),
        ));
    };
    if s.status == SampleStatus::DeadlineMissed {
        return Health::without_checks(reason(
            "sample_gap",
            "the newest sample is a gap: NVML did not answer before the tick's deadline".into(),
            format!(
                "a GPU whose reads keep timing out is treated as lost; `gpuwatch doctor` reads GPU {n} with a deadline"
            ),
        ));
    }
    match row.age_ms {
        Some(age) if age <= stale_after_ms => {}
        age => {
            let age = age.map_or_else(|| "?".into(), seconds);
            return Health::without_checks(reason(
                "stale_sample",
                format!(
                    "the newest sample is {age} old (stale after {})",
                    seconds(stale_after_ms)
                ),
                "check that `gpuwatch run` is running and sampling (`/healthz`, its log)".into(),
            ));
        }
    }
    judge::sample(n, s, &row.inventory, &row.recent_xids)
}

/// `ms` as `1h 2m 3s`, whole seconds.
fn seconds(ms: i64) -> String {
    let secs = u64::try_from(ms / 1000).unwrap_or(0);
    humantime::format_duration(std::time::Duration::from_secs(secs)).to_string()
}
