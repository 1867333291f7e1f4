//! `gpuwatch replay`: evaluates rules over stored history exactly as the live daemon would
//! (the same [`Engine`], a simulated clock stepping through every stored sample time), with
//! the database opened read-only and the alert state in memory, printing every transition.
//!
//! Output: a table by default; `--format jsonl`: one object per transition, in time order, with `at` (RFC 3339 UTC),
//! `state` (`firing`/`resolved`), `rule`, `severity`, `host`, `gpu`, `uuid`, `labels`,
//! `summary`, `severity_from` (the severity before, when a firing alert changed severity:
//! a change, not a new alert; else null); more fields may be added. Alerts still firing at
//! the end are not resolved.

use std::path::PathBuf;

use serde_json::json;

use crate::alerts::engine::Transition;
use crate::alerts::replay::{self, ReplayOptions};
use crate::rules::rule::Rule;
use crate::store::{self, history};

use super::{ConfigArgs, Failure, exit, fail};

#[derive(Debug, Clone, Copy, clap::ValueEnum, Default)]
pub enum Format {
    /// For people: one line per transition (also accepted as `text`).
    #[default]
    #[value(alias = "text")]
    Table,
    /// For programs: one JSON object per transition and line.
    Jsonl,
}

#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Rule file, or directory of `*.toml` rule files, replacing the default rules.
    #[arg(long, value_name = "DIR_OR_FILE")]
    pub rules: Option<PathBuf>,
    /// Start (RFC 3339 or unix seconds) [default: the oldest stored sample].
    #[arg(long, value_name = "T", value_parser = parse_time)]
    pub from: Option<i64>,
    /// End, inclusive (RFC 3339 or unix seconds) [default: the newest stored sample].
    #[arg(long, value_name = "T", value_parser = parse_time)]
    pub to: Option<i64>,
    /// Output format: `table` for people, `jsonl` for programs (one object per transition).
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
    /// Store the episodes found as alerts marked replayed (`alerts`, `incident` and `report`
    /// then show them; never delivered, never live), replacing those of an earlier
    /// `--save` that started in the same range.
    #[arg(long)]
    pub save: bool,
    /// Evaluate at most this often, like a daemon with `[rules] eval_interval` [default: at
    /// every stored sample].
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub eval_interval: Option<std::time::Duration>,
}

/// RFC 3339 or unix seconds (fractions allowed) → epoch milliseconds.
pub fn parse_time(s: &str) -> Result<i64, String> {
    if let Ok(secs) = s.trim().parse::<f64>() {
        return Ok((secs * 1000.0).round() as i64);
    }
    chrono::DateTime::parse_from_rfc3339(s.trim())
        .map(|d| d.timestamp_millis())
        .map_err(|e| {
            format!("`{s}` is neither RFC 3339 (2024-05-01T12:00:00Z) nor unix seconds: {e}")
        })
}

/// The rules to evaluate: `--rules` (file or directory) or the shipped defaults.
pub fn load_rules(path: Option<&PathBuf>) -> Result<Vec<Rule>, Failure> {
    let rules = match path {
        None => crate::rules::load_sources(&crate::rules::defaults()),
        Some(p) if p.is_dir() => {
            let mut files: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| {
                    fail(
                        exit::USAGE,
                        anyhow::anyhow!("cannot read {}: {e}", p.display()),
                    )
                })?
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "toml"))
                .collect();
            files.sort();
            crate::rules::load_files(&files)
        }
        Some(p) => crate::rules::load_files(std::slice::from_ref(p)),
    };
    rules.map_err(|e| fail(exit::USAGE, e))
}

pub fn run(args: ReplayArgs) -> Result<(), Failure> {
    let cfg = args.config.load().map_err(|e| fail(exit::USAGE, e))?;
    let rules = load_rules(args.rules.as_ref())?;
    // `--save` writes: an older file's schema is brought up to date first (nothing created).
    let mut rw = match args.save {
        true => Some(store::open_existing_upgraded(&cfg.database)?),
        false => None,
    };
    let conn = store::open_read_only(&cfg.database)?;
    let Some((first, last)) = history::sample_span(&conn)? else {
        return Err(fail(
            exit::FAILURE,
            anyhow::anyhow!(
                "no samples in {}: nothing to replay (`gpuwatch import nvidia-smi` or `gpuwatch run` stores some)",
                cfg.database.display()
            ),
        ));
    };
    let from = args.from.unwrap_or(first);
    let to = args.to.unwrap_or(last);
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if matches!(args.format, Format::Table) {
        use std::io::Write;
        let _ = writeln!(
            out,
            "{:<20} {:<9} {:<24} {:<9} {:<14} {:>4}  SUMMARY",
            "AT (UTC)", "STATE", "RULE", "SEVERITY", "HOST", "GPU"
        );
    }
    let mut episodes = crate::alerts::episodes::Episodes::default();
    let opts = ReplayOptions {
        eval_every_ms: args.eval_interval.map_or(0, |d| d.as_millis() as i64),
        job_label: cfg.fleet.job_label.clone(),
        xid_overrides: cfg.xid.overrides.clone(),
    };
    let end = replay::run(&conn, rules, &opts, (from, to), |tr| {
        print_transition(&mut out, tr, args.format);
        episodes.add(tr);
    })?;
    {
        use std::io::Write;
        let _ = out.flush();
    }
    if let Some(rw) = rw.as_mut() {
        let episodes = episodes.finish();
        let (replaced, saved) = store::alerts::save_replayed(rw, from, to, end, &episodes)?;
        eprintln!(
            "saved {saved} replayed alert(s) into {}{} (`gpuwatch alerts` lists them)",
            cfg.database.display(),
            if replaced > 0 {
                format!(", replacing {replaced} from an earlier replay")
            } else {
                String::new()
            }
        );
    }
    Ok(())
}

pub use crate::format::rfc3339_ms as rfc3339;

fn print_transition(out: &mut impl std::io::Write, tr: &Transition, format: Format) {
    let _ = match format {
        Format::Jsonl => writeln!(
            out,
            "{}",
            json!({
                "at": rfc3339(tr.at),
                "state": tr.state,
                "rule": tr.rule,
                "severity": tr.severity.as_str(),
                "host": tr.subject.host,
                "gpu": tr.subject.gpu,
                "uuid": tr.subject.uuid,
                "labels": tr.labels,
                "summary": tr.summary,
                "description": tr.description,
                "pid": tr.subject.pid,
                "active_since": tr.active_since.map(rfc3339),
                "severity_from": tr.severity_from.map(|s| s.as_str()),
            })
        ),
        Format::Table => writeln!(
            out,
            "{:<20} {:<9} {:<24} {:<9} {:<14} {:>4}  {}",
            &rfc3339(tr.at)[..19],
            tr.state,
            tr.rule,
            match tr.severity_from {
                Some(from) => format!("{} (was {})", tr.severity.as_str(), from.as_str()),
                None => tr.severity.as_str().to_string(),
            },
            tr.subject.host,
            tr.subject.gpu.map_or("-".to_string(), |g| g.to_string()),
            tr.summary
        ),
    };
}
