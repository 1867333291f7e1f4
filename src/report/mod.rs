//! Post-mortem reports: one self-contained HTML file (inline CSS, inline SVG charts) with the
//! GPUs' metrics, training progress, alert periods, processes and events of a time window —
//! what an engineer attaches to an incident ticket.
//!
//! This module owns what goes into a report ([`gather`], [`ReportData`]) and the window of an
//! alert's report ([`alert_window`]); `html.rs` renders it, `chart.rs` draws the charts.
//!
//! Invariants:
//! - The output loads nothing: no scripts, stylesheets, fonts or images from anywhere.
//! - Every text that comes from the database is HTML-escaped.
//! - A line has at most [`MAX_POINTS`] points (the series are downsampled in SQL).
//! - Unknown values are gaps in the charts and `-` in the tables, never 0.

pub mod chart;
mod figures;
mod html;

pub use html::render;

use crate::model::TsMs;
use crate::store::StoreError;
use crate::store::history::{self, GpuRow, HolderRow};
use crate::store::postmortem::{self, AlertSpan, EventSpan, ProcessSpan, TrainingLine};
use crate::store::window::{self, SampleMetric, Series, Source};

/// The most points per line.
pub const MAX_POINTS: i64 = 600;
/// Context shown before an alert: this much, or the alert's own length when that is longer.
pub const CONTEXT_BEFORE_MS: i64 = 20 * 60_000;
/// Context shown after an alert's end.
pub const CONTEXT_AFTER_MS: i64 = 5 * 60_000;
/// The most rows in the process and event tables.
pub const MAX_ROWS: usize = 500;

/// The GPU metrics charted, in order.
pub const CHART_METRICS: &[&str] = &[
    "util_gpu",
    "mem_used",
    "temp",
    "power",
    "clock_sm",
    "clock_mem",
];

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(
        "alert {0} does not exist (see `gpuwatch alerts`, or `gpuwatch query 'SELECT alert_id, rule FROM alerts'`)"
    )]
    NoSuchAlert(i64),
    #[error("no GPU to report on")]
    NoGpus,
    #[error("cannot draw the {chart} chart: {message}")]
    Chart { chart: String, message: String },
}

/// Everything a report shows.
#[derive(Debug, Clone)]
pub struct ReportData {
    pub gpus: Vec<GpuRow>,
    pub from_ms: TsMs,
    pub to_ms: TsMs,
    pub generated_ms: TsMs,
    pub step_ms: i64,
    pub source: Source,
    /// GPU-major: for each GPU, one series per [`CHART_METRICS`] entry.
    pub series: Vec<Series>,
    /// Alerts of these GPUs (and their hosts) active in the window.
    pub alerts: Vec<AlertSpan>,
    /// The alert the report is about (`--alert`).
    pub focus: Option<AlertSpan>,
    pub processes: Vec<ProcessSpan>,
    /// Of the GPUs' ok samples in the window: (those whose process list was observed, all).
    pub process_observation: (u64, u64),
    pub events: Vec<EventSpan>,
    pub training: Vec<TrainingLine>,
    /// Who the kubelet said held these GPUs during the window (pod allocations).
    pub holders: Vec<HolderRow>,
    /// The rule-based analysis of the focused alert (`crate::analysis`).
    pub analysis: Option<crate::analysis::Analysis>,
    /// The usage ledger of these GPUs over the window, by holder (`None`: no ledger there).
    pub usage: Option<crate::usage::summary::Usage>,
}

/// The window of an alert's report: its span, [`CONTEXT_BEFORE_MS`] (or its length, when
/// longer) before it and [`CONTEXT_AFTER_MS`] after it.
pub fn alert_window(a: &AlertSpan) -> (TsMs, TsMs) {
    let len = (a.end_ms() - a.active_since_ms).max(0);
    (
        a.active_since_ms - len.max(CONTEXT_BEFORE_MS),
        a.end_ms() + CONTEXT_AFTER_MS,
    )
}

/// The alert `id`, or [`ReportError::NoSuchAlert`].
pub fn find_alert(conn: &rusqlite::Connection, id: i64) -> Result<AlertSpan, ReportError> {
    postmortem::alert(conn, id)?.ok_or(ReportError::NoSuchAlert(id))
}

/// The step (whole seconds; whole minutes beyond the raw range) that keeps a line at most
/// [`MAX_POINTS`] long, and where to read it from.
pub fn report_step(from_ms: TsMs, to_ms: TsMs) -> (i64, Source) {
    let range = (to_ms - from_ms).max(1);
    let mut step = (range + MAX_POINTS - 1) / MAX_POINTS;
    step = ((step + 999) / 1000 * 1000).max(1000);
    if range > window::RAW_MAX_RANGE_MS {
        step = (step + 59_999) / 60_000 * 60_000;
    }
    (step, Source::auto(from_ms, to_ms, step))
}

fn chart_metrics() -> Vec<SampleMetric> {
    CHART_METRICS
        .iter()
        .filter_map(|n| window::window_metric(n))
        .collect()
}

/// Reads what the report of `gpus` over `[from_ms, to_ms)` shows.
pub fn gather(
    conn: &rusqlite::Connection,
    gpus: Vec<GpuRow>,
    (from_ms, to_ms): (TsMs, TsMs),
    focus: Option<AlertSpan>,
    generated_ms: TsMs,
    prices: &crate::config::usage::UsageConfig,
) -> Result<ReportData, ReportError> {
    if gpus.is_empty() {
        return Err(ReportError::NoGpus);
    }
    let ids: Vec<i64> = gpus.iter().map(|g| g.gpu_id).collect();
    let (mut step_ms, mut source) = report_step(from_ms, to_ms);
    // A window older than the raw samples still stored is drawn from the rollups.
    if source == Source::Raw {
        let minute_step = (step_ms + 59_999) / 60_000 * 60_000;
        if Source::choose(conn, &ids, from_ms, to_ms, minute_step)? == Source::Rollups {
            step_ms = minute_step;
            source = Source::Rollups;
        }
    }
    let series = window::series(
        conn,
        &ids,
        &chart_metrics(),
        from_ms,
        to_ms,
        step_ms,
        source,
    )?;
    let mut process_observation = (0, 0);
    for &id in &ids {
        let (o, n) = crate::store::incident::process_observation(conn, id, from_ms, to_ms - 1)?;
        process_observation = (process_observation.0 + o, process_observation.1 + n);
    }
    // The focused alert's analysis, with the report's context before it as the window.
    let analysis = match &focus {
        Some(f) => crate::store::incident::alert(conn, f.id)?
            .map(|row| {
                crate::analysis::Facts::gather(conn, &row, CONTEXT_BEFORE_MS)
                    .map(|facts| crate::analysis::analyse(&facts))
            })
            .transpose()?,
        None => None,
    };
    let uuids: Vec<&str> = gpus.iter().map(|g| g.inventory.uuid.as_str()).collect();
    let intervals: Vec<_> = crate::store::usage::intervals(conn, from_ms, to_ms, None)?
        .into_iter()
        .filter(|i| uuids.contains(&i.gpu_uuid.as_str()))
        .collect();
    let usage = (!intervals.is_empty()).then(|| {
        crate::usage::summary::summarize(
            &intervals,
            crate::usage::summary::By::Holder,
            (from_ms, to_ms),
            prices,
        )
    });
    Ok(ReportData {
        usage,
        analysis,
        process_observation,
        alerts: postmortem::alerts_in(conn, &ids, from_ms, to_ms)?,
        processes: postmortem::processes_in(conn, &ids, from_ms, to_ms, MAX_ROWS)?,
        events: postmortem::events_in(conn, &ids, from_ms, to_ms, MAX_ROWS)?,
        training: postmortem::training_in(conn, &ids, from_ms, to_ms, step_ms)?,
        holders: history::holders(conn, from_ms - 1, to_ms)?
            .into_iter()
            .filter(|h| ids.contains(&h.gpu_id))
            .collect(),
        gpus,
        from_ms,
        to_ms,
        generated_ms,
        step_ms,
        source,
        series,
        focus,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_keep_lines_short() {
        assert_eq!(report_step(0, 600_000), (1000, Source::Raw));
        assert_eq!(report_step(0, 3_600_000), (6000, Source::Raw));
        let (step, src) = report_step(0, 7 * 86_400_000);
        assert_eq!((step % 60_000, src), (0, Source::Rollups));
        assert!(7 * 86_400_000 / step <= MAX_POINTS);
    }
}
