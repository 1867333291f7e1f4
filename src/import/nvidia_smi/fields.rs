//! The nvidia-smi query fields gpuwatch stores, their older aliases, and the layout of one CSV
//! section (which column feeds which stored value).
//!
//! Invariants:
//! - A header cell is a field name, optionally followed by its unit in brackets
//!   (`memory.used [MiB]`); names are matched case-insensitively, units are ignored here.
//! - Every target is fed by at most one column: when several columns can feed it (e.g.
//!   `power.draw` and `power.draw.average`), the one with the best rank wins.
//! - A column that feeds nothing is *ignored* and reported by name once per import.
//! - `temperature.gpu.tlimit` is the margin to T.Limit (the maximum operating temperature),
//!   never a threshold itself.
//! - `clocks_event_reasons.<name>` columns are named by the one clock-event decoder
//!   ([`crate::gpu_health::clock_events`]).

use crate::gpu_health::clock_events;

/// What a column feeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Timestamp,
    Index,
    Uuid,
    Name,
    Serial,
    BusId,
    Driver,
    UtilGpu,
    UtilMem,
    MemUsed,
    MemFree,
    MemTotal,
    Temp,
    /// `temperature.gpu.tlimit`: degrees left before T.Limit (the max operating temperature).
    TempMargin,
    Fan,
    ClockSm,
    ClockMem,
    Power,
    /// The enforced limit, stored per sample.
    SamplePowerLimit,
    /// The configured limit, stored in the inventory.
    InvPowerLimit,
    PowerMin,
    PowerMax,
    Pstate,
    PcieGen,
    PcieWidth,
    PcieMaxGen,
    PcieMaxWidth,
    ThrottleMask,
    EccCorrected,
    EccUncorrected,
    RetiredSbe,
    RetiredDbe,
    RemapCorrectable,
    RemapUncorrectable,
    RemapPending,
    RemapFailure,
    Persistence,
    Mig,
    Pid,
    ProcessName,
    UsedMem,
}

pub const N_TARGETS: usize = Target::UsedMem as usize + 1;

/// The unit a field's number is read in (`None`: not a field, or not a number).
pub fn field_unit(name: &str) -> Option<super::values::Unit> {
    use super::values::Unit;
    use Target::*;
    let Meaning::Targets(ts) = meaning(name, name == "used_gpu_memory" || name == "used_memory")
    else {
        return None;
    };
    Some(match ts.first()?.0 {
        MemUsed | MemFree | MemTotal | UsedMem => Unit::MiB,
        Power | SamplePowerLimit | InvPowerLimit | PowerMin | PowerMax => Unit::Watt,
        UtilGpu | UtilMem | Fan => Unit::Percent,
        ClockSm | ClockMem => Unit::MHz,
        Temp | TempMargin => Unit::Celsius,
        Index | PcieGen | PcieWidth | PcieMaxGen | PcieMaxWidth | EccCorrected | EccUncorrected
        | RetiredSbe | RetiredDbe | RemapCorrectable | RemapUncorrectable | Pid => Unit::Count,
        _ => return None,
    })
}

/// Whether `name` is a field gpuwatch reads.
pub fn is_field(name: &str) -> bool {
    !matches!(meaning(name, false), Meaning::Unknown)
        || !matches!(meaning(name, true), Meaning::Unknown)
}

/// What a field name means: targets with their rank (0 = preferred), or a throttle bit.
enum Meaning {
    Targets(&'static [(Target, u8)]),
    Reason(u64),
    Unknown,
}

fn meaning(name: &str, apps: bool) -> Meaning {
    use Target::*;
    let t = |v: &'static [(Target, u8)]| Meaning::Targets(v);
    if let Some(rest) = name
        .strip_prefix("clocks_event_reasons.")
        .or_else(|| name.strip_prefix("clocks_throttle_reasons."))
    {
        if rest == "active" {
            return t(&[(ThrottleMask, 0)]);
        }
        // nvidia-smi's field names are the decoder's names.
        return clock_events::bit(rest).map_or(Meaning::Unknown, Meaning::Reason);
    }
    match name {
        "timestamp" => t(&[(Timestamp, 0)]),
        "index" => t(&[(Index, 0)]),
        "uuid" | "gpu_uuid" => t(&[(Uuid, 0)]),
        "name" if apps => t(&[(ProcessName, 0)]),
        "name" | "gpu_name" => t(&[(Name, 0)]),
        "serial" | "gpu_serial" => t(&[(Serial, 0)]),
        "pci.bus_id" | "gpu_bus_id" => t(&[(BusId, 0)]),
        "driver_version" => t(&[(Driver, 0)]),
        "utilization.gpu" => t(&[(UtilGpu, 0)]),
        "utilization.memory" => t(&[(UtilMem, 0)]),
        "memory.used" => t(&[(MemUsed, 0)]),
        "memory.free" => t(&[(MemFree, 0)]),
        "memory.total" => t(&[(MemTotal, 0)]),
        "temperature.gpu" => t(&[(Temp, 0)]),
        "temperature.gpu.tlimit" => t(&[(TempMargin, 0)]),
        "fan.speed" => t(&[(Fan, 0)]),
        "clocks.current.sm" | "clocks.sm" => t(&[(ClockSm, 0)]),
        "clocks.current.memory" | "clocks.mem" => t(&[(ClockMem, 0)]),
        "power.draw" => t(&[(Power, 0)]),
        "power.draw.average" | "gpu.power.draw.average" => t(&[(Power, 1)]),
        "power.draw.instant" | "gpu.power.draw.instant" => t(&[(Power, 2)]),
        "enforced.power.limit" | "gpu.power.current_limit" => {
            t(&[(SamplePowerLimit, 0), (InvPowerLimit, 1)])
        }
        "power.limit" | "gpu.power.requested_limit" => {
            t(&[(InvPowerLimit, 0), (SamplePowerLimit, 1)])
        }
        "power.min_limit" | "gpu.power.min_limit" => t(&[(PowerMin, 0)]),
        "power.max_limit" | "gpu.power.max_limit" => t(&[(PowerMax, 0)]),
        "pstate" => t(&[(Pstate, 0)]),
        "pcie.link.gen.current" => t(&[(PcieGen, 0)]),
        "pcie.link.gen.gpucurrent" => t(&[(PcieGen, 1)]),
        "pcie.link.width.current" => t(&[(PcieWidth, 0)]),
        "pcie.link.gen.max" => t(&[(PcieMaxGen, 0)]),
        "pcie.link.gen.gpumax" => t(&[(PcieMaxGen, 1)]),
        "pcie.link.width.max" => t(&[(PcieMaxWidth, 0)]),
        "ecc.errors.corrected.volatile.total" => t(&[(EccCorrected, 0)]),
        "ecc.errors.uncorrected.volatile.total" => t(&[(EccUncorrected, 0)]),
        "retired_pages.single_bit_ecc.count" | "retired_pages.sbe" => t(&[(RetiredSbe, 0)]),
        "retired_pages.double_bit.count" | "retired_pages.dbe" => t(&[(RetiredDbe, 0)]),
        "remapped_rows.correctable" | "remapped_rows.sbe" => t(&[(RemapCorrectable, 0)]),
        "remapped_rows.uncorrectable" | "remapped_rows.dbe" => t(&[(RemapUncorrectable, 0)]),
        "remapped_rows.pending" => t(&[(RemapPending, 0)]),
        "remapped_rows.failure" => t(&[(RemapFailure, 0)]),
        "persistence_mode" => t(&[(Persistence, 0)]),
        "mig.mode.current" => t(&[(Mig, 0)]),
        "pid" => t(&[(Pid, 0)]),
        "process_name" => t(&[(ProcessName, 0)]),
        "used_gpu_memory" | "used_memory" => t(&[(UsedMem, 0)]),
        _ => Meaning::Unknown,
    }
}

/// The field name of a header cell: `memory.used [MiB]` → `memory.used`, lower case.
pub fn field_name(cell: &str) -> String {
    let name = cell.split(" [").next().unwrap_or(cell).trim();
    name.to_ascii_lowercase()
}

/// True when `line` looks like a header: every cell is a field name (with an optional unit)
/// and at least one is a field gpuwatch knows.
pub fn looks_like_header(line: &str) -> bool {
    let mut known = false;
    for cell in line.split(',') {
        let cell = cell.trim();
        let name = cell.split(" [").next().unwrap_or(cell);
        let ok = !name.is_empty()
            && name.as_bytes()[0].is_ascii_alphabetic()
            && name
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'.');
        if !ok {
            return false;
        }
        let lower = name.to_ascii_lowercase();
        known |= !matches!(meaning(&lower, false), Meaning::Unknown);
    }
    known
}

/// What a section holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SectionKind {
    /// `--query-gpu`: one row per GPU and poll.
    Gpu,
    /// `--query-compute-apps`: one row per process and poll.
    Apps,
}

/// Which column feeds which target in one section.
#[derive(Debug, Clone)]
pub struct Layout {
    pub kind: SectionKind,
    /// The field names, in column order (for messages).
    pub names: Vec<String>,
    cols: [Option<usize>; N_TARGETS],
    /// Throttle-reason columns and their bits.
    pub reasons: Vec<(usize, u64)>,
    /// Field names that feed nothing.
    pub ignored: Vec<String>,
    /// The epoch unit the timestamp column's header names (`timestamp [ms]`); without one an
    /// epoch number's unit is judged by its size.
    pub ts_unit: Option<crate::import::time::EpochUnit>,
    /// Per column, the factor from the column's unit to the field's (`import csv --map
    /// memory.used=mem:GiB`: 1024); empty: every column in the field's own unit.
    pub scales: Vec<f64>,
}

impl Layout {
    /// The layout of a header (or of `--columns`); an error says why the section cannot be
    /// imported.
    pub fn new(cells: &[&str]) -> Result<Self, String> {
        let names: Vec<String> = cells.iter().map(|c| field_name(c)).collect();
        let apps = names.iter().any(|n| n == "pid");
        if apps
            && !names.iter().any(|n| {
                matches!(
                    n.as_str(),
                    "used_gpu_memory" | "used_memory" | "process_name" | "name"
                )
            })
        {
            return Err(
                "this section has a pid but neither used_gpu_memory nor process_name: \
                 only --query-gpu and --query-compute-apps logs can be imported \
                 (not --query-accounted-apps)"
                    .to_string(),
            );
        }
        let mut cols = [None; N_TARGETS];
        let mut ranks = [u8::MAX; N_TARGETS];
        let mut reasons = Vec::new();
        let mut used = vec![false; names.len()];
        for (i, n) in names.iter().enumerate() {
            match meaning(n, apps) {
                Meaning::Targets(ts) => {
                    for &(t, rank) in ts {
                        let k = t as usize;
                        if rank < ranks[k] {
                            ranks[k] = rank;
                            cols[k] = Some(i);
                        }
                    }
                }
                Meaning::Reason(bit) if !apps => {
                    reasons.push((i, bit));
                    used[i] = true;
                }
                _ => {}
            }
        }
        if cols[Target::Temp as usize].is_none() {
            // The margin alone cannot give the threshold: without temperature.gpu it is unused.
            cols[Target::TempMargin as usize] = None;
        }
        for c in cols.iter().flatten() {
            used[*c] = true;
        }
        let kind = if apps {
            SectionKind::Apps
        } else {
            SectionKind::Gpu
        };
        let ts_unit = cols[Target::Timestamp as usize]
            .and_then(|c| cells[c].split_once(" ["))
            .and_then(|(_, unit)| {
                crate::import::time::EpochUnit::from_header(unit.trim_end_matches(']'))
            });
        let mut layout = Self {
            kind,
            ignored: Vec::new(),
            names,
            cols,
            reasons,
            ts_unit,
            scales: Vec::new(),
        };
        if apps {
            // The GPU's name and serial only identify it; they are not "ignored" data.
            for t in [Target::Name, Target::Serial] {
                if let Some(c) = layout.col(t) {
                    used[c] = true;
                }
            }
        }
        layout.ignored = layout
            .names
            .iter()
            .zip(&used)
            .filter(|(_, u)| !**u)
            .map(|(n, _)| n.clone())
            .collect();
        layout.check()?;
        Ok(layout)
    }

    fn check(&self) -> Result<(), String> {
        if self.col(Target::Timestamp).is_none() && self.kind == SectionKind::Gpu {
            return Err(
                "the fields have no `timestamp`: gpuwatch cannot place the samples in time \
                 (log with --query-gpu=timestamp,...)"
                    .to_string(),
            );
        }
        match self.kind {
            SectionKind::Gpu => {
                let stores_something = self.reasons.len()
                    + (Target::UtilGpu as usize..=Target::Mig as usize)
                        .filter(|&k| self.cols[k].is_some())
                        .count();
                if stores_something == 0 {
                    return Err("none of the fields is one gpuwatch stores".to_string());
                }
            }
            SectionKind::Apps => {
                if self.col(Target::Pid).is_none() {
                    return Err("a --query-compute-apps section needs the pid field".to_string());
                }
            }
        }
        Ok(())
    }

    /// The column feeding `t`, if any.
    pub fn col(&self, t: Target) -> Option<usize> {
        self.cols[t as usize]
    }

    /// The factor from column `c`'s unit to its field's.
    pub fn scale(&self, c: usize) -> f64 {
        self.scales.get(c).copied().unwrap_or(1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_with_units_and_aliases() {
        let l = Layout::new(&[
            "timestamp",
            " index",
            "utilization.gpu [%]",
            "clocks.sm [MHz]",
            "clocks_throttle_reasons.hw_thermal_slowdown",
            "power.draw.instant [W]",
            "power.draw [W]",
            "encoder.stats.sessionCount",
        ])
        .unwrap();
        assert_eq!(l.kind, SectionKind::Gpu);
        assert_eq!(l.col(Target::UtilGpu), Some(2));
        assert_eq!(l.col(Target::ClockSm), Some(3));
        assert_eq!(l.reasons, vec![(4, 0x40)]);
        assert_eq!(l.col(Target::Power), Some(6));
        assert_eq!(
            l.ignored,
            vec!["power.draw.instant", "encoder.stats.sessioncount"]
        );
    }

    #[test]
    fn compute_apps_and_bad_sections() {
        let l = Layout::new(&["gpu_uuid", "pid", "name", "used_memory [MiB]"]).unwrap();
        assert_eq!(l.kind, SectionKind::Apps);
        assert_eq!(l.col(Target::ProcessName), Some(2));
        assert!(Layout::new(&["index", "utilization.gpu"]).is_err());
        assert!(Layout::new(&["timestamp", "uuid", "vbios_version"]).is_err());
        assert!(Layout::new(&["timestamp", "pid", "gpu_utilization", "time"]).is_err());
    }

    #[test]
    fn header_detection() {
        assert!(looks_like_header("timestamp, index, utilization.gpu [%]"));
        assert!(!looks_like_header("2024/05/01 12:00:00.000, 0, 12 %"));
        assert!(!looks_like_header("P0, Tesla"));
    }
}
