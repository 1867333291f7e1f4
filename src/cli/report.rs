//! `gpuwatch report`: one self-contained HTML file (inline CSS and SVG charts) for an alert
//! (`--alert ID`: its span with context before and after, its GPU highlighted) or a time
//! window (`--from/--to` or `--since`). The content and the rendering live in
//! [`crate::report`]; this file parses arguments, picks the GPUs and writes the file.
//!
//! Invariant: the output file is written whole (a temporary file renamed into place), so a
//! failure never leaves half a report.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, anyhow};

use super::timearg::RangeArgs;
use super::{ConfigArgs, Failure, exit, fail};
use crate::report::{self, ReportError};
use crate::store;
use crate::views::history::select_gpus;

#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Report on this alert (`alert_id` in `gpuwatch alerts`): its span, 20 minutes (or its
    /// length) before it and 5 minutes after, its GPU highlighted.
    #[arg(long, value_name = "ID", conflicts_with_all = ["since", "from"])]
    pub alert: Option<i64>,
    #[command(flatten)]
    pub range: RangeArgs,
    /// GPUs by index or UUID, comma-separated [default: all GPUs of the host(s)].
    #[arg(long, value_name = "N|UUID", value_delimiter = ',')]
    pub gpu: Vec<String>,
    /// Only this host's GPUs [default with --alert: the alert's host].
    #[arg(long, value_name = "H")]
    pub host: Option<String>,
    /// Output file.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: PathBuf,
}

pub fn run(args: ReportArgs) -> Result<(), Failure> {
    if args.alert.is_none() && args.range.since.is_none() && args.range.from.is_none() {
        return Err(fail(
            exit::USAGE,
            anyhow!(
                "say what to report on: --alert ID, or a window with --from T [--to T] or --since 2h"
            ),
        ));
    }
    let cfg = args.config.load().map_err(|e| fail(exit::USAGE, e))?;
    let conn = store::open_read_only(&cfg.database)?;
    let usage = |e: ReportError| match e {
        ReportError::NoSuchAlert(_) | ReportError::NoGpus => fail(exit::USAGE, e),
        e => fail(exit::FAILURE, e),
    };
    let focus = match args.alert {
        Some(id) => Some(report::find_alert(&conn, id).map_err(usage)?),
        None => None,
    };
    let host = args
        .host
        .clone()
        .or_else(|| focus.as_ref().map(|a| a.host.clone()));
    let now = crate::clock::now_ms();
    let (from, to) = match &focus {
        Some(a) => {
            let (from, to) = report::alert_window(a);
            let to = args.range.to.unwrap_or(to);
            // Not past the data: a live alert's window ends at its newest sample.
            let last = store::read::last_sample_ts(&conn, host.as_deref())?;
            (from, last.map_or(to, |l| to.min(l + 1000).max(from + 1000)))
        }
        None => {
            let now = store::read::last_sample_ts(&conn, host.as_deref())?
                .unwrap_or(0)
                .max(now);
            args.range
                .resolve(now, Duration::from_secs(3600))
                .map_err(|e| fail(exit::USAGE, anyhow!(e)))?
        }
    };
    let mut gpus = select_gpus(&store::history::gpus(&conn, host.as_deref())?, &args.gpu)
        .map_err(|e| fail(exit::USAGE, anyhow!(e)))?;
    if let Some(a) = &focus
        && !gpus.iter().any(|g| g.gpu_id == a.gpu_id)
    {
        // The alert's GPU is always in its report.
        gpus.extend(
            store::history::gpus(&conn, Some(&a.host))?
                .into_iter()
                .filter(|g| g.gpu_id == a.gpu_id),
        );
    }
    // A window without data: where the data is, instead of a report of empty charts.
    if focus.is_none()
        && let Some(hint) = super::timearg::no_data_hint(&conn, host.as_deref(), from, to, false)?
    {
        return Err(fail(exit::FAILURE, anyhow!(hint)));
    }
    let data = report::gather(&conn, gpus, (from, to), focus, now, &cfg.usage).map_err(usage)?;
    let html = report::render(&data)?;
    write_whole(&args.output, html.as_bytes())
        .with_context(|| format!("cannot write the report to {}", args.output.display()))?;
    eprintln!(
        "wrote {} ({} KiB): {} GPU(s), {} alert(s), {} process(es), {} event(s)",
        args.output.display(),
        html.len().div_ceil(1024),
        data.gpus.len(),
        data.alerts.len(),
        data.processes.len(),
        data.events.len()
    );
    Ok(())
}

/// Writes `bytes` to a temporary file next to `path`, then renames it into place.
fn write_whole(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    // A report is meant to be shared (tempfile creates 0600).
    tmp.as_file()
        .set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))?;
    tmp.write_all(bytes)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
