//! `gpuwatch history`: GPU metrics over a time range, downsampled to a step, as a table, CSV,
//! JSON or terminal sparklines. The aggregation happens in SQL (`store::window`), from the
//! raw samples for short ranges and sub-minute steps and from the 1-minute rollups otherwise;
//! the output says which. This file parses arguments, picks the GPUs and the step;
//! `history/render.rs` prints.
//!
//! Invariants: a value that is unknown prints as `-` (CSV: empty, JSON: `null`, chart: a
//! space), never as 0; GPU selection errors list the GPUs that exist.

use std::time::Duration;

use anyhow::anyhow;

use super::timearg::RangeArgs;
use super::{ViewError, usage};
use crate::store::history::GpuRow;
use crate::store::window::{self, Source};
use crate::store::{self};

mod render;
use render::History;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// For people: one row per step and GPU (also accepted as `text`).
    #[value(alias = "text")]
    Table,
    /// A header row, then one line per step and GPU.
    Csv,
    /// One JSON document (the same as GET /api/v1/history).
    Json,
    /// For people: a sparkline per GPU and metric.
    Chart,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SourceArg {
    /// Raw samples for ranges up to 6 h or steps below a minute, rollups otherwise.
    Auto,
    Raw,
    Rollups,
}

/// What `gpuwatch history` and `GET /api/v1/history` select (the command's flags but the
/// config).
#[derive(Debug, clap::Args)]
pub struct HistoryQuery {
    #[command(flatten)]
    pub range: RangeArgs,
    /// GPUs by index or UUID, comma-separated [default: all].
    #[arg(long, value_name = "N|UUID", value_delimiter = ',')]
    pub gpu: Vec<String>,
    /// Only this host's GPUs (databases holding imports of several hosts).
    #[arg(long, value_name = "H")]
    pub host: Option<String>,
    /// Metrics, comma-separated: util_gpu, util_mem, mem_used, temp, power, clock_sm,
    /// clock_mem, fan, pcie_tx, pcie_rx (the rule language's names and units: %, MiB, °C, W,
    /// MHz, MB/s); aliases: util, mem, temperature, clocks (= clock_sm,clock_mem),
    /// pcie (= pcie_tx,pcie_rx).
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "util,mem,temp,power"
    )]
    pub metric: Vec<String>,
    /// Bucket width [default: the range / 60, rounded to 1s, 5s, 1m, 5m, 1h, ...].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub step: Option<Duration>,
    /// table: averages, local times; csv and json: avg/min/max with epoch ms and UTC times;
    /// chart: a sparkline per GPU and metric. (--since counts back from now, or from the
    /// newest sample when that is later, as in a demo's database.)
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Where to aggregate from.
    #[arg(long, value_enum, default_value_t = SourceArg::Auto)]
    pub source: SourceArg,
}

/// Steps the default rounds up to.
const NICE_STEPS_S: &[i64] = &[
    1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10_800, 21_600, 43_200, 86_400,
];

/// The smallest nice step of at least `range_ms / points`.
pub fn nice_step(range_ms: i64, points: i64) -> i64 {
    let want = range_ms / points.max(1);
    NICE_STEPS_S
        .iter()
        .map(|s| s * 1000)
        .find(|&s| s >= want)
        .unwrap_or_else(|| (want + 86_399_999) / 86_400_000 * 86_400_000)
}

/// The GPUs named by `wanted` (index or UUID; all when empty), in `all`'s order. The error
/// lists what exists.
pub fn select_gpus(all: &[GpuRow], wanted: &[String]) -> Result<Vec<GpuRow>, String> {
    if all.is_empty() {
        return Err("the database holds no GPUs (for this host)".into());
    }
    if wanted.is_empty() {
        return Ok(all.to_vec());
    }
    let mut out: Vec<GpuRow> = Vec::new();
    for w in wanted {
        let w = w.trim();
        // `3` is GPU 3 (the whole GPU, not its MIG instances), `0/7` instance 7 of GPU 0, else
        // a UUID (`GPU-…` or a MIG instance's `MIG-…`).
        let found: Vec<&GpuRow> = match w.parse::<u32>() {
            Ok(i) => all
                .iter()
                .filter(|g| g.inventory.index == i && g.inventory.mig.is_none())
                .collect(),
            Err(_) if w.contains('/') => all
                .iter()
                .filter(|g| g.inventory.mig.is_some() && g.inventory.address() == w)
                .collect(),
            Err(_) => all
                .iter()
                .filter(|g| g.inventory.uuid.eq_ignore_ascii_case(w))
                .collect(),
        };
        if found.is_empty() {
            let have: Vec<String> = all
                .iter()
                .map(|g| format!("{} ({})", g.inventory.address(), g.inventory.uuid))
                .collect();
            return Err(format!(
                "--gpu {w:?} matches no GPU; the database has: {}",
                have.join(", ")
            ));
        }
        for g in found {
            if !out.iter().any(|o| o.gpu_id == g.gpu_id) {
                out.push(g.clone());
            }
        }
    }
    Ok(out)
}

/// The most points (steps x GPUs x metrics) one `history` call computes.
const MAX_POINTS: usize = 5_000_000;

/// The window `args` asks for: `--since` counts back from now, or from the newest sample
/// when that is later (a demo's database).
pub fn window(
    args: &HistoryQuery,
    conn: &rusqlite::Connection,
    now_ms: i64,
) -> Result<(i64, i64), ViewError> {
    let now = store::read::last_sample_ts(conn, args.host.as_deref())?
        .unwrap_or(0)
        .max(now_ms);
    args.range
        .resolve(now, Duration::from_secs(3600))
        .map_err(|e| usage(anyhow!(e)))
}

/// The output of `history` for `args` (`--format json` is also `GET /api/v1/history`).
pub fn output(
    args: &HistoryQuery,
    conn: &rusqlite::Connection,
    now_ms: i64,
) -> Result<String, ViewError> {
    let metrics =
        window::resolve_metrics(&args.metric).map_err(|e| usage(anyhow!("--metric: {e}")))?;
    let host = args.host.as_deref();
    let (from, to) = window(args, conn, now_ms)?;
    let step = match args.step {
        Some(d) if d.as_millis() == 0 => {
            return Err(usage(anyhow!("--step must be positive")));
        }
        Some(d) => d.as_millis() as i64,
        None => nice_step(to - from, 60),
    };
    let gpus = select_gpus(&store::history::gpus(conn, host)?, &args.gpu)
        .map_err(|e| usage(anyhow!(e)))?;
    let source = match args.source {
        SourceArg::Auto => {
            let ids: Vec<i64> = gpus.iter().map(|g| g.gpu_id).collect();
            Source::choose(conn, &ids, from, to, step)?
        }
        SourceArg::Raw => Source::Raw,
        SourceArg::Rollups if step % 60_000 != 0 => {
            return Err(usage(anyhow!(
                "--source rollups needs a --step of whole minutes (rollups are per minute)"
            )));
        }
        SourceArg::Rollups => Source::Rollups,
    };
    let ids: Vec<i64> = gpus.iter().map(|g| g.gpu_id).collect();
    let (_, buckets) = window::buckets(from, to, step);
    let points = buckets.saturating_mul(ids.len() * metrics.len());
    if points > MAX_POINTS {
        return Err(usage(anyhow!(
            "{buckets} steps x {} GPU(s) x {} metric(s) is more than {MAX_POINTS} points: use a larger --step (e.g. {}) or a shorter range",
            ids.len(),
            metrics.len(),
            humantime::format_duration(std::time::Duration::from_millis(
                nice_step(to - from, 1000) as u64
            ))
        )));
    }
    let series = window::series(conn, &ids, &metrics, from, to, step, source)?;
    let h = History {
        gpus: &gpus,
        series: &series,
        from,
        to,
        step,
        source,
    };
    Ok(match args.format {
        Format::Table => h.table(),
        Format::Csv => h.csv(),
        Format::Json => h.json(),
        Format::Chart => h.chart(100),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(3_600_000, 60), 60_000);
        assert_eq!(nice_step(2 * 3_600_000, 60), 120_000);
        assert_eq!(nice_step(3 * 86_400_000, 60), 3_600_000 * 2);
        assert_eq!(nice_step(10_000, 60), 1000);
    }
}
