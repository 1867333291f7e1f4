//! `gpuwatch import csv --map FIELD=COLUMN[:UNIT],...`: a CSV that people's own scripts
//! wrote, read by the nvidia-smi reader through a column map — the same timestamp parser
//! (epoch seconds / ms / µs / ns, RFC 3339, wall times in `--tz`) and the same value parser
//! (NULL markers, ranges) — so the two imports cannot disagree.
//!
//! FIELD is an nvidia-smi `--query-gpu` (or `--query-compute-apps`) field name
//! (`utilization.gpu`, `memory.used`, `power.draw`, `index`, `uuid`, `timestamp`, ...);
//! COLUMN a column of the file's header; UNIT the column's unit when it is not the field's
//! own (nvidia-smi's: MiB, W, %, MHz, °C): `B`, `KiB`, `MiB`, `GiB`, `KB`, `MB`, `GB` for
//! memory, `mW`, `W`, `kW` for power, `%` or `ratio` (0–1) for utilisation, `Hz`, `kHz`,
//! `MHz`, `GHz` for clocks; `s`, `ms`, `us`, `ns` for an epoch timestamp.
//!
//! Invariants: only mapped columns feed anything (an unmapped column that happens to carry
//! an nvidia-smi name is reported as ignored, not read); a mapped column missing from a
//! file's header, an unknown field or unit, or a field mapped twice is an error before
//! anything is read.

use super::fields::{self, Layout};
use super::values::Unit;
use crate::import::time::EpochUnit;

/// One `FIELD=COLUMN[:UNIT]`.
#[derive(Debug, Clone, PartialEq)]
pub struct MapEntry {
    /// The nvidia-smi field, lower case.
    pub field: String,
    pub column: String,
    /// From the column's unit to the field's.
    pub scale: f64,
    /// For `timestamp`: the epoch unit given.
    pub epoch: Option<EpochUnit>,
}

/// The parsed `--map`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ColumnMap {
    pub entries: Vec<MapEntry>,
}

/// The factor from `unit` to the field's `kind`, if `unit` measures that.
fn factor(kind: Unit, unit: &str) -> Option<f64> {
    const MIB: f64 = 1_048_576.0;
    Some(match (kind, unit) {
        (Unit::MiB, "B" | "bytes") => 1.0 / MIB,
        (Unit::MiB, "KiB") => 1.0 / 1024.0,
        (Unit::MiB, "MiB") => 1.0,
        (Unit::MiB, "GiB") => 1024.0,
        (Unit::MiB, "KB" | "kB") => 1e3 / MIB,
        (Unit::MiB, "MB") => 1e6 / MIB,
        (Unit::MiB, "GB") => 1e9 / MIB,
        (Unit::Watt, "mW") => 1e-3,
        (Unit::Watt, "W") => 1.0,
        (Unit::Watt, "kW") => 1e3,
        (Unit::Percent, "%") => 1.0,
        (Unit::Percent, "ratio") => 100.0,
        (Unit::MHz, "Hz") => 1e-6,
        (Unit::MHz, "kHz") => 1e-3,
        (Unit::MHz, "MHz") => 1.0,
        (Unit::MHz, "GHz") => 1e3,
        (Unit::Celsius, "C" | "°C") => 1.0,
        _ => return None,
    })
}

fn units_of(kind: Unit) -> &'static str {
    match kind {
        Unit::MiB => "B, KiB, MiB, GiB, KB, MB, GB",
        Unit::Watt => "mW, W, kW",
        Unit::Percent => "%, ratio",
        Unit::MHz => "Hz, kHz, MHz, GHz",
        Unit::Celsius => "C",
        Unit::Count => "none (a count)",
    }
}

impl ColumnMap {
    /// Parses `FIELD=COLUMN[:UNIT],...`.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let mut entries: Vec<MapEntry> = Vec::new();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((field, rest)) = part.split_once('=') else {
                return Err(format!(
                    "`{part}` is not FIELD=COLUMN (e.g. `utilization.gpu=util` or `memory.used=mem_gb:GiB`)"
                ));
            };
            let field = field.trim().to_ascii_lowercase();
            let (column, unit) = match rest.rsplit_once(':') {
                Some((c, u)) => (c.trim(), Some(u.trim())),
                None => (rest.trim(), None),
            };
            if column.is_empty() {
                return Err(format!("`{part}` names no column"));
            }
            if !fields::is_field(&field) {
                return Err(format!(
                    "`{field}` is not an nvidia-smi field gpuwatch reads (e.g. timestamp, index, uuid, utilization.gpu, memory.used, power.draw, temperature.gpu; docs/IMPORT.md lists them)"
                ));
            }
            if entries.iter().any(|e| e.field == field) {
                return Err(format!("`{field}` is mapped twice"));
            }
            let (mut scale, mut epoch) = (1.0, None);
            if let Some(u) = unit {
                if field == "timestamp" {
                    epoch = Some(EpochUnit::from_header(u).ok_or_else(|| {
                        format!("timestamp unit `{u}`: use s, ms, us or ns (epoch numbers); RFC 3339 and wall times need none")
                    })?);
                } else {
                    let kind = fields::field_unit(&field)
                        .ok_or_else(|| format!("`{field}` is not a number: it takes no unit"))?;
                    scale = factor(kind, u).ok_or_else(|| {
                        format!("`{field}` in `{u}`: its units are {}", units_of(kind))
                    })?;
                }
            }
            entries.push(MapEntry {
                field,
                column: column.to_string(),
                scale,
                epoch,
            });
        }
        if !entries.iter().any(|e| e.field == "timestamp") {
            return Err(
                "map a `timestamp` column (e.g. `timestamp=ts` or `timestamp=time_ms:ms`): gpuwatch places every sample in time"
                    .into(),
            );
        }
        Ok(Self { entries })
    }

    /// The layout of a file whose header is `cells`, read through the map.
    pub fn layout(&self, cells: &[&str]) -> Result<Layout, String> {
        let names: Vec<&str> = cells.iter().map(|c| c.trim()).collect();
        let mut renamed: Vec<String> = names.iter().map(|n| format!("unmapped:{n}")).collect();
        let mut scales = vec![1.0; names.len()];
        for e in &self.entries {
            let Some(c) = names.iter().position(|n| *n == e.column) else {
                return Err(format!(
                    "header: no column `{}` (mapped to {}); the header's columns are: {}",
                    e.column,
                    e.field,
                    names.join(", ")
                ));
            };
            renamed[c] = match e.epoch {
                Some(u) => format!("{} [{}]", e.field, u.header()),
                None => e.field.clone(),
            };
            scales[c] = e.scale;
        }
        let refs: Vec<&str> = renamed.iter().map(String::as_str).collect();
        let mut layout = Layout::new(&refs).map_err(|e| format!("--map: {e}"))?;
        for n in layout.ignored.iter_mut() {
            if let Some(orig) = n.strip_prefix("unmapped:") {
                *n = orig.to_string();
            }
        }
        layout.scales = scales;
        Ok(layout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::nvidia_smi::fields::Target;

    #[test]
    fn a_map_with_units() {
        let m = ColumnMap::parse(
            "timestamp=ts:ms, utilization.gpu=util:ratio, memory.used=mem_gb:GiB, power.draw=pw, index=gpu",
        )
        .unwrap();
        let l = m
            .layout(&["ts", "gpu", "util", "mem_gb", "pw", "note", "index"])
            .unwrap();
        assert_eq!(l.col(Target::Timestamp), Some(0));
        assert_eq!(
            l.col(Target::Index),
            Some(1),
            "the mapped column, not the one named index"
        );
        assert_eq!(l.col(Target::UtilGpu), Some(2));
        assert_eq!(l.scale(2), 100.0);
        assert_eq!(l.scale(3), 1024.0);
        assert_eq!(l.scale(4), 1.0);
        assert_eq!(l.ts_unit, Some(EpochUnit::Millis));
        assert_eq!(l.ignored, ["note", "index"]);
    }

    #[test]
    fn bad_maps_say_what_to_write() {
        let e = |s: &str| ColumnMap::parse(s).unwrap_err();
        assert!(e("utilization.gpu=u").contains("map a `timestamp` column"));
        assert!(e("timestamp=t,util=u").contains("`util` is not an nvidia-smi field"));
        assert!(e("timestamp=t,memory.used=m:furlongs").contains("B, KiB, MiB, GiB"));
        assert!(e("timestamp=t:days").contains("s, ms, us or ns"));
        assert!(e("timestamp=t,timestamp=u").contains("mapped twice"));
        assert!(e("timestamp").contains("FIELD=COLUMN"));
        let m = ColumnMap::parse("timestamp=t,utilization.gpu=u").unwrap();
        let err = m.layout(&["time", "u"]).unwrap_err();
        assert!(
            err.contains("no column `t`") && err.contains("time, u"),
            "{err}"
        );
    }
}
