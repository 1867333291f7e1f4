//! One GPU's time series of one rule-language metric (`util_gpu`, `temp`, `mem_used`, ...),
//! read from the raw `samples` table in the units a rule sees: what the email chart draws.
//!
//! Invariants:
//! - Read only; one range scan of the samples' time-first primary key.
//! - Values are computed by the rule evaluator's own [`sample_value`], so a chart shows exactly
//!   the numbers the rule compared (MiB, W, MB/s, 0/1 flags).
//! - A sample whose status is not `ok` (a missed deadline, a lost GPU) is a gap (`None`),
//!   except for the `lost` and `gap` flags, which are made of the status itself.
//! - Names that are not per-GPU sample series (process, XID, training metrics) and unknown
//!   names give `Ok(empty)`, not an error: "nothing to draw". [`sample_metric`] tells the
//!   two cases apart for callers that want to say why.

use rusqlite::{Connection, params};

use super::StoreError;
use super::read::sample_from_row;
use super::rows::sample_metric_columns;
use crate::model::{SampleStatus, TsMs};
use crate::rules::ast::Metric;
use crate::rules::eval::world::sample_value;
use crate::rules::names::metric_by_name;

/// Other tools' names for sample metrics, accepted besides the rule language's own.
const ALIASES: &[(&str, &str)] = &[
    ("util", "util_gpu"),
    ("utilization", "util_gpu"),
    ("temperature", "temp"),
    ("memory_used", "mem_used"),
    ("memory_free", "mem_free"),
    ("power_draw", "power"),
    ("power_usage", "power"),
];

/// The metric named `name` (or one of its common aliases, e.g. `util`) when it is a
/// per-GPU series stored in `samples`; `None` for process, XID and training metrics and for
/// unknown names.
pub fn sample_metric(name: &str) -> Option<Metric> {
    let name = ALIASES
        .iter()
        .find(|(a, _)| *a == name)
        .map_or(name, |(_, m)| *m);
    metric_by_name(name).filter(|m| is_sample_metric(*m))
}

/// True for the metrics read from one `samples` row (exhaustive: a new metric must choose).
fn is_sample_metric(m: Metric) -> bool {
    match m {
        Metric::UtilGpu
        | Metric::UtilMem
        | Metric::MemUsed
        | Metric::MemFree
        | Metric::MemTotal
        | Metric::MemUsedRatio
        | Metric::Temp
        | Metric::Fan
        | Metric::ClockSm
        | Metric::ClockMem
        | Metric::Power
        | Metric::PowerLimit
        | Metric::Pstate
        | Metric::PcieTx
        | Metric::PcieRx
        | Metric::PcieGen
        | Metric::PcieWidth
        | Metric::ThermalThrottle
        | Metric::HwSlowdown
        | Metric::EccCorrected
        | Metric::EccUncorrected
        | Metric::RetiredPages
        | Metric::RemappedRowsUncorrectable
        | Metric::RemapPending
        | Metric::Lost
        | Metric::Gap
        | Metric::ProcessCount => true,
        Metric::XidCritical
        | Metric::Xid
        | Metric::ProcessMem
        | Metric::TrainingStep
        | Metric::TrainingLoss
        | Metric::TrainingSourceFailing => false,
    }
}

/// The samples of GPU `gpu_id` (`gpus.id`) with `from_ms <= ts_ms <= to_ms`, in time order,
/// as `(ts_ms, value)` in rule units; `None` where the value was not read (NULL) or the tick
/// was a gap. Empty when `metric` is not a per-GPU sample series (see [`sample_metric`]) or
/// nothing was stored in the range.
pub fn metric_series(
    conn: &Connection,
    gpu_id: i64,
    metric: &str,
    from_ms: TsMs,
    to_ms: TsMs,
) -> Result<Vec<(TsMs, Option<f64>)>, StoreError> {
    let Some(m) = sample_metric(metric) else {
        return Ok(Vec::new());
    };
    let mut stmt = conn.prepare_cached(concat!(
        "SELECT ts_ms, ",
        sample_metric_columns!(),
        " FROM samples WHERE ts_ms >= ?2 AND ts_ms <= ?3 AND gpu_id = ?1 ORDER BY ts_ms"
    ))?;
    let rows = stmt.query_map(params![gpu_id, from_ms, to_ms], |r| {
        sample_from_row(r, String::new())
    })?;
    let mut out = Vec::new();
    for s in rows {
        let s = s?;
        let v = match m {
            Metric::Lost => Some(f64::from(u8::from(s.status == SampleStatus::Lost))),
            Metric::Gap => Some(f64::from(u8::from(
                s.status == SampleStatus::DeadlineMissed,
            ))),
            _ if s.status == SampleStatus::Ok => sample_value(m, &s),
            _ => None,
        };
        out.push((s.ts_ms, v));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{GpuSample, TickBatch};
    use crate::store::{StoreConfig, open, synth::TickGen};

    #[test]
    fn values_in_rule_units_with_gaps_and_flags() {
        let dir = tempfile::tempdir().unwrap();
        let mut st = open(&dir.path().join("g.db"), &StoreConfig::new("n1")).unwrap();
        let tg = TickGen::new(1, 0);
        let uuid = tg.uuid(0);
        let mut ok = GpuSample::empty(1000, &uuid, SampleStatus::Ok);
        ok.mem_used_bytes = Some(2 << 30);
        ok.power_mw = Some(71_500);
        let missed = GpuSample::empty(2000, &uuid, SampleStatus::DeadlineMissed);
        let lost = GpuSample::empty(3000, &uuid, SampleStatus::Lost);
        let null = GpuSample::empty(4000, &uuid, SampleStatus::Ok);
        st.write_tick(&TickBatch {
            ts_ms: 4000,
            inventory: tg.inventory(),
            samples: vec![ok, missed, lost, null],
            ..Default::default()
        })
        .unwrap();
        let conn = st.conn();
        let gpu: i64 = conn
            .query_row("SELECT id FROM gpus", [], |r| r.get(0))
            .unwrap();
        let got = |m: &str, from, to| metric_series(conn, gpu, m, from, to).unwrap();
        assert_eq!(
            got("mem_used", 0, 5000),
            vec![
                (1000, Some(2048.0)),
                (2000, None),
                (3000, None),
                (4000, None)
            ]
        );
        assert_eq!(got("power", 0, 1000), vec![(1000, Some(71.5))]);
        let flags = |m| -> Vec<Option<f64>> { got(m, 0, 5000).into_iter().map(|p| p.1).collect() };
        assert_eq!(flags("gap"), [Some(0.0), Some(1.0), Some(0.0), Some(0.0)]);
        assert_eq!(flags("lost"), [Some(0.0), Some(0.0), Some(1.0), Some(0.0)]);
        // Both ends are inclusive; other GPUs, other metrics and unknown names are empty.
        assert_eq!(got("mem_used", 2000, 3000).len(), 2);
        assert!(
            metric_series(conn, gpu + 1, "mem_used", 0, 5000)
                .unwrap()
                .is_empty()
        );
        assert!(got("xid", 0, 5000).is_empty());
        assert!(got("nonsense", 0, 5000).is_empty());
    }

    #[test]
    fn names_and_aliases() {
        assert_eq!(sample_metric("util"), Some(Metric::UtilGpu));
        assert_eq!(sample_metric("temp"), Some(Metric::Temp));
        assert_eq!(sample_metric("mem_used"), Some(Metric::MemUsed));
        assert_eq!(sample_metric("gap"), Some(Metric::Gap));
        assert_eq!(sample_metric("xid"), None);
        assert_eq!(sample_metric("training_step"), None);
        assert_eq!(sample_metric("no_such_metric"), None);
    }
}
