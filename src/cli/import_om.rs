//! `gpuwatch import openmetrics FILE...`: a past run's training step and loss, from
//! OpenMetrics (timestamps in seconds, `# EOF`) or Prometheus text files (timestamps in
//! milliseconds), into the training-metrics tables, so `replay`, `incident` and the views see
//! them as if the daemon had fetched them from Prometheus.
//!
//! Which metrics are imported (the names `[prometheus.queries]` uses by default):
//! - step: samples named `training_step` or `training_step_total` (an OpenMetrics counter),
//!   or `--step-metric NAME` / `NAME_total`; stored as `training_step`;
//! - loss: samples named `training_loss` or `--loss-metric NAME`; stored as `training_loss`;
//! - everything else (including counters' `_created` samples) is ignored and counted in the
//!   summary: the rule evaluator treats every stored training series that is not a step
//!   counter as a loss candidate, so storing other metrics would make the GPU join ambiguous.
//!
//! A sample without a timestamp is an error (a post-mortem needs the time of every point)
//! unless `--at T` says when the file was scraped.
//!
//! Labels are kept as they are (sorted, `__name__` dropped): the GPU join reads `gpu`,
//! `uuid`/`UUID` (see `training::join`). NaN and ±Inf values are skipped, as the live fetcher
//! does. Points belong to `--host` (default: the database's only host with GPUs, else this
//! machine's). The summary says which GPUs each imported series joins, and warns about series
//! that join none (a `gpu`/`uuid` label naming a GPU the host lacks, `pod` labels).
//!
//! Invariants: every file is parsed completely before anything is written, and all points go
//! in one transaction: an error anywhere (reported as `FILE:LINE:COL: what is expected`)
//! imports nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use anyhow::{Context, anyhow};

use crate::model::{TrainingPoint, TrainingWrite, TsMs};
use crate::store::history;
use crate::store::{self, incident as store_incident};
use crate::training::openmetrics::{self, Exposition, Format};
use crate::training::{GpuRef, Join, Role, gpus_for_series};

use super::{ConfigArgs, Failure, exit, fail};

#[derive(Debug, Clone, Copy, clap::ValueEnum, Default)]
pub enum FormatArg {
    /// OpenMetrics when the file ends with `# EOF`, else the Prometheus text format.
    #[default]
    Auto,
    /// OpenMetrics 1.0 (timestamps in seconds; `# EOF` required).
    Openmetrics,
    /// Prometheus text format 0.0.4 (timestamps in milliseconds).
    Prometheus,
}

#[derive(Debug, clap::Args)]
pub struct ImportOmArgs {
    /// Files to import (all or nothing).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Host the training series belong to (their GPUs are joined on this host) [default: the
    /// database's only host, else this machine's host name].
    #[arg(long, value_name = "NAME")]
    pub host: Option<String>,
    /// Text format of the files (decides the timestamp unit); `--format` is accepted too.
    #[arg(long = "input-format", alias = "format", value_enum, default_value_t)]
    pub format: FormatArg,
    /// When the files were scraped: the time of samples written without a timestamp (RFC 3339
    /// or unix seconds) [default: such samples are an error].
    #[arg(long, value_name = "T", value_parser = super::timearg::parse_time)]
    pub at: Option<TsMs>,
    /// The step counter's name in the files (also accepted with `_total`).
    #[arg(long, value_name = "NAME", default_value = "training_step")]
    pub step_metric: String,
    /// The loss metric's name in the files.
    #[arg(long, value_name = "NAME", default_value = "training_loss")]
    pub loss_metric: String,
}

/// A stored point's identity: (stored name, sorted labels, time).
type PointKey = (String, Vec<(String, String)>, TsMs);

/// What the files held, mapped to training points.
#[derive(Debug, Default)]
struct Mapped {
    /// A point given twice keeps the last value.
    points: BTreeMap<PointKey, f64>,
    non_finite: usize,
    /// Ignored samples per metric name.
    ignored: BTreeMap<String, usize>,
}

impl Mapped {
    fn add(&mut self, e: &Exposition, step: &str, loss: &str) {
        for s in &e.samples {
            let role = if s.name == step || s.name.strip_suffix("_total") == Some(step) {
                Role::Step
            } else if s.name == loss {
                Role::Loss
            } else {
                *self.ignored.entry(s.name.clone()).or_default() += 1;
                continue;
            };
            if !s.value.is_finite() {
                self.non_finite += 1;
                continue;
            }
            let labels: Vec<(String, String)> = s
                .labels
                .iter()
                .filter(|(k, _)| k != "__name__")
                .cloned()
                .collect();
            self.points
                .insert((role.metric().to_string(), labels, s.ts_ms), s.value);
        }
    }
}

pub fn run(args: ImportOmArgs) -> Result<(), Failure> {
    let cfg = args.config.load().map_err(|e| fail(exit::USAGE, e))?;
    let format = match args.format {
        FormatArg::Auto => None,
        FormatArg::Openmetrics => Some(Format::OpenMetrics),
        FormatArg::Prometheus => Some(Format::Prometheus),
    };
    let mut mapped = Mapped::default();
    let mut errors = Vec::new();
    let mut formats = Vec::new();
    for file in &args.files {
        let text = match std::fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) => {
                errors.push(format!("{}: cannot read: {e}", file.display()));
                continue;
            }
        };
        match openmetrics::parse_at(&text, format, args.at) {
            Ok(e) => {
                formats.push(format!("{} ({})", file.display(), e.format.name()));
                mapped.add(&e, &args.step_metric, &args.loss_metric);
            }
            Err(e) => errors.push(format!("{}:{e}", file.display())),
        }
    }
    if !errors.is_empty() {
        errors.push("nothing was imported; fix the files and run the import again".into());
        return Err(fail(exit::FAILURE, anyhow!(errors.join("\n"))));
    }
    if mapped.points.is_empty() {
        let seen: Vec<&str> = mapped.ignored.keys().map(String::as_str).collect();
        return Err(fail(
            exit::FAILURE,
            anyhow!(
                "no `{}` or `{}` samples with finite values in {} (metrics found: {}); name yours with --step-metric / --loss-metric; nothing was imported",
                args.step_metric,
                args.loss_metric,
                formats.join(", "),
                if seen.is_empty() {
                    "none".to_string()
                } else {
                    seen.join(", ")
                }
            ),
        ));
    }

    let host = match args.host {
        Some(h) => h,
        None => {
            let hosts = match store::open_read_only_if_sound(&cfg.database)
                .with_context(|| format!("opening {}", cfg.database.display()))?
            {
                Some(conn) => store_incident::hosts_with_gpus(&conn)?,
                None => Vec::new(),
            };
            match hosts.as_slice() {
                [one] => one.clone(),
                [] => cfg.host.clone(),
                many => {
                    return Err(fail(
                        exit::USAGE,
                        anyhow!(
                            "{} holds the GPUs of several hosts ({}): say which one the training series belong to with --host",
                            cfg.database.display(),
                            many.join(", ")
                        ),
                    ));
                }
            }
        }
    };
    let mut st_cfg = store::StoreConfig::new(host.clone());
    st_cfg.retention = cfg.retention;
    st_cfg.rollup_retention = cfg.rollup_retention;
    st_cfg.max_db_size = cfg.max_db_size;
    let mut st = store::open(&cfg.database, &st_cfg)
        .with_context(|| format!("opening {}", cfg.database.display()))?;
    crate::notify::recovered::announce(&st, &cfg);

    let series: BTreeSet<(String, Vec<(String, String)>)> = mapped
        .points
        .keys()
        .map(|(n, l, _)| (n.clone(), l.clone()))
        .collect();
    let (first, last) = (
        mapped.points.keys().map(|k| k.2).min().unwrap_or(0),
        mapped.points.keys().map(|k| k.2).max().unwrap_or(0),
    );
    retention_guard(
        store_incident::host_span(st.conn(), &host)?,
        (first, last),
        cfg.retention,
        &host,
    )
    .map_err(|e| fail(exit::FAILURE, e))?;
    let n_series = series.len();
    let n_points = mapped.points.len();
    let points: Vec<TrainingPoint> = std::mem::take(&mut mapped.points)
        .into_iter()
        .map(|((name, labels, ts_ms), value)| TrainingPoint {
            ts_ms,
            name,
            labels,
            value,
        })
        .collect();
    st.write_training(&TrainingWrite {
        points,
        sources: Vec::new(),
    })
    .with_context(|| {
        format!(
            "writing to {}; nothing was imported",
            cfg.database.display()
        )
    })?;

    println!(
        "imported {n_points} points of {n_series} series for host {host} ({} .. {}) from {}",
        crate::format::utc_label(first),
        crate::format::utc_label(last),
        formats.join(", ")
    );
    let gpus: Vec<GpuRef> = history::gpus(st.conn(), Some(&host))?
        .into_iter()
        .map(|g| GpuRef {
            index: g.inventory.index,
            uuid: g.inventory.uuid,
            pod: None,
        })
        .collect();
    print!("{}", joins(&series, &gpus, &host));
    if mapped.non_finite > 0 {
        println!("skipped {} NaN/Inf values", mapped.non_finite);
    }
    if !mapped.ignored.is_empty() {
        let list: Vec<String> = mapped
            .ignored
            .iter()
            .map(|(n, c)| format!("{n} ({c})"))
            .collect();
        println!(
            "ignored samples of other metrics (only step and loss are imported): {}",
            list.join(", ")
        );
    }
    Ok(())
}

/// One line per series (at most 20): which GPUs of the host it joins (the rule evaluator's
/// join rules), with a hint where it joins none.
fn joins(
    series: &BTreeSet<(String, Vec<(String, String)>)>,
    gpus: &[GpuRef],
    host: &str,
) -> String {
    if gpus.is_empty() {
        return format!(
            "host {host} has no GPUs in the database yet: the series join its GPUs once their samples are there (e.g. `gpuwatch import nvidia-smi --host {host}`)\n"
        );
    }
    let mut out = String::new();
    for (i, (name, labels)) in series.iter().enumerate() {
        if i == 20 {
            out.push_str(&format!("  ... and {} more series\n", series.len() - 20));
            break;
        }
        let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
        let to = match gpus_for_series(labels, gpus) {
            Join::All => "every GPU of the host (no gpu/uuid label)".to_string(),
            Join::Gpus(ix) if ix.is_empty() => format!(
                "no GPU: its gpu/uuid label names no GPU of host {host} (rules will not see it)"
            ),
            Join::Gpus(ix) => {
                let ix: Vec<String> = ix.iter().map(u32::to_string).collect();
                format!("GPU {}", ix.join(", "))
            }
            Join::Unknown => {
                "no GPU yet: its pod/namespace labels join the GPUs that pod holds, and no GPU's pod is known here (the daemon learns it from the kubelet or the processes' cgroups)"
                    .to_string()
            }
        };
        out.push_str(&format!("  {name}{{{}}} -> {to}\n", l.join(",")));
    }
    out
}

/// Refuses an import that retention would undo at once: raw data is kept for `retention`
/// counted back from the host's newest timestamp, which the import may move forward.
fn retention_guard(
    host_span: Option<(TsMs, TsMs)>,
    (first, last): (TsMs, TsMs),
    retention: std::time::Duration,
    host: &str,
) -> anyhow::Result<()> {
    let keep = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
    let newest = host_span.map_or(last, |(_, l)| l.max(last));
    let cutoff = newest.saturating_sub(keep);
    let utc = crate::format::utc_label;
    let what = if first < cutoff {
        format!("imported points before {}", utc(cutoff))
    } else if let Some((host_first, host_last)) = host_span
        && last > host_last
        && host_first < cutoff
    {
        format!("stored data of host {host} before {}", utc(cutoff))
    } else {
        return Ok(());
    };
    Err(anyhow!(
        "the import spans {} .. {}, and with retention {} counted back from the host's newest time ({}) the {what} would be deleted right away; nothing was imported: use a config (--config) with a longer `retention`, or import into another host (--host)",
        utc(first),
        utc(last),
        humantime::format_duration(retention),
        utc(newest)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: TsMs = 86_400_000;

    #[test]
    fn retention_guard_refuses_what_retention_would_delete() {
        let week = std::time::Duration::from_secs(7 * 86_400);
        // Fresh host: a span within retention is fine, a longer one is not.
        assert!(retention_guard(None, (0, 6 * DAY), week, "h").is_ok());
        let e = retention_guard(None, (0, 8 * DAY), week, "h").unwrap_err();
        assert!(e.to_string().contains("imported points before"), "{e}");
        // Points older than the host's newest data minus retention.
        let e = retention_guard(Some((20 * DAY, 30 * DAY)), (DAY, 2 * DAY), week, "h").unwrap_err();
        assert!(e.to_string().contains("imported points before"), "{e}");
        // Newer points that would push the host's stored samples out.
        let e = retention_guard(Some((0, DAY)), (9 * DAY, 10 * DAY), week, "h").unwrap_err();
        assert!(
            e.to_string().contains("stored data of host h before"),
            "{e}"
        );
        // Inside the host's span: fine.
        assert!(retention_guard(Some((0, 6 * DAY)), (DAY, 2 * DAY), week, "h").is_ok());
    }
}
