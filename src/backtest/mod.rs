//! `gpuwatch backtest --rules PROMETHEUS_RULES.yml`: gpuwatch's rules and the user's own
//! Prometheus alerting rules over the same stored history, side by side — each set's alert
//! episodes (rule, host, GPU, fired, resolved), which have a counterpart in the other set
//! (firing together, or within a window of ±10 minutes of each other), and each set's alerts
//! in the quiet periods the user names.
//!
//! - gpuwatch's side is `replay`'s loop ([`crate::alerts::replay`]).
//! - Their side is evaluated by a real Prometheus ([`prometheus`]) over the same samples,
//!   exported as dcgm-exporter would have exported them ([`openmetrics`]).
//!
//! Invariants: an episode is on a host when its labels say which (`Hostname`, `host`,
//! `instance` without its port, `node`) and on a GPU when they say which (`gpu`, `UUID`);
//! two episodes are counterparts when they are on the same host, on the same GPU or one of
//! them on none, and fire at the same time or within the window of each other. Nothing is written to the
//! database.

pub mod openmetrics;
pub mod prometheus;

use serde_json::{Value, json};

use crate::model::TsMs;

/// Which rule set an episode is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Set {
    Gpuwatch,
    Theirs,
}

/// One alert episode.
#[derive(Debug, Clone, PartialEq)]
pub struct Episode {
    pub set: Set,
    pub rule: String,
    pub host: Option<String>,
    pub gpu: Option<u32>,
    pub uuid: Option<String>,
    pub active_since_ms: TsMs,
    pub fired_ms: TsMs,
    /// `None`: still firing where the range ends.
    pub resolved_ms: Option<TsMs>,
    pub labels: Vec<(String, String)>,
}

fn label<'a>(labels: &'a [(String, String)], keys: &[&str]) -> Option<&'a str> {
    keys.iter().find_map(|k| {
        labels
            .iter()
            .find(|(x, v)| x == k && !v.is_empty())
            .map(|(_, v)| v.as_str())
    })
}

impl Episode {
    /// An episode whose host and GPU come from its labels.
    pub fn from_labels(
        set: Set,
        rule: &str,
        labels: &[(String, String)],
        active_since_ms: TsMs,
        fired_ms: TsMs,
        resolved_ms: Option<TsMs>,
    ) -> Self {
        let host = label(labels, &["Hostname", "host", "node"])
            .or_else(|| {
                label(labels, &["instance"]).map(|i| i.rsplit_once(':').map_or(i, |(h, _)| h))
            })
            .map(str::to_string);
        Episode {
            set,
            rule: rule.to_string(),
            host,
            gpu: label(labels, &["gpu"]).and_then(|g| g.parse().ok()),
            uuid: label(labels, &["UUID", "uuid"]).map(str::to_string),
            active_since_ms,
            fired_ms,
            resolved_ms,
            labels: labels.to_vec(),
        }
    }

    fn same_gpu(&self, o: &Episode) -> bool {
        if let (Some(a), Some(b)) = (&self.uuid, &o.uuid) {
            return a.eq_ignore_ascii_case(b);
        }
        match (self.gpu, o.gpu) {
            (Some(a), Some(b)) => a == b,
            // One of them is about the host (or does not say which GPU).
            _ => true,
        }
    }

    /// Whether `o` is a counterpart of this episode: the same host and GPU, firing at the
    /// same time or within `window_ms` of each other (`end`: where the range ends, for an
    /// episode still firing).
    pub fn counterpart(&self, o: &Episode, window_ms: i64, end: TsMs) -> bool {
        let gap = self.fired_ms.max(o.fired_ms)
            - self
                .resolved_ms
                .unwrap_or(end)
                .min(o.resolved_ms.unwrap_or(end));
        self.host.is_some() && self.host == o.host && self.same_gpu(o) && gap <= window_ms
    }

    /// Whether the episode overlaps `[a, b)`.
    fn overlaps(&self, (a, b): (TsMs, TsMs), end: TsMs) -> bool {
        self.active_since_ms < b && self.resolved_ms.unwrap_or(end) > a
    }
}

/// The comparison.
#[derive(Debug, Clone)]
pub struct Report {
    pub from: TsMs,
    pub to: TsMs,
    pub window_ms: i64,
    pub ours: Vec<Episode>,
    pub theirs: Vec<Episode>,
    /// `(ours index, theirs index, their fired − ours fired in ms)`.
    pub matched: Vec<(usize, usize, i64)>,
    /// The quiet periods given (`None`: none given, so alerts in them are not counted).
    pub quiet: Option<Vec<(TsMs, TsMs)>>,
    /// Their rules, for the summary: (name, expression).
    pub their_rules: Vec<(String, String)>,
}

impl Report {
    pub fn new(
        (from, to): (TsMs, TsMs),
        window_ms: i64,
        mut ours: Vec<Episode>,
        mut theirs: Vec<Episode>,
        quiet: Option<Vec<(TsMs, TsMs)>>,
        their_rules: Vec<(String, String)>,
    ) -> Self {
        let key = |e: &Episode| (e.fired_ms, e.host.clone(), e.gpu, e.rule.clone());
        ours.sort_by_key(key);
        theirs.sort_by_key(key);
        let mut matched = Vec::new();
        for (i, a) in ours.iter().enumerate() {
            for (j, b) in theirs.iter().enumerate() {
                if a.counterpart(b, window_ms, to) {
                    matched.push((i, j, b.fired_ms - a.fired_ms));
                }
            }
        }
        Report {
            from,
            to,
            window_ms,
            ours,
            theirs,
            matched,
            quiet,
            their_rules,
        }
    }

    fn has_match(&self, set: Set, i: usize) -> bool {
        self.matched.iter().any(|&(a, b, _)| match set {
            Set::Gpuwatch => a == i,
            Set::Theirs => b == i,
        })
    }

    fn in_quiet(&self, e: &Episode) -> Option<bool> {
        self.quiet
            .as_ref()
            .map(|q| q.iter().any(|&p| e.overlaps(p, self.to)))
    }

    fn list(&self, set: Set) -> &[Episode] {
        match set {
            Set::Gpuwatch => &self.ours,
            Set::Theirs => &self.theirs,
        }
    }

    /// A set's episodes, those with a counterpart, and those in the quiet periods (`None`:
    /// no period given).
    fn counts(&self, set: Set) -> (usize, usize, Option<usize>) {
        let list = self.list(set);
        let with = (0..list.len()).filter(|&i| self.has_match(set, i)).count();
        let quiet = self.quiet.as_ref().map(|_| {
            list.iter()
                .filter(|e| self.in_quiet(e) == Some(true))
                .count()
        });
        (list.len(), with, quiet)
    }

    fn side(&self, set: Set) -> Value {
        let list = self.list(set);
        let episodes: Vec<Value> = list
            .iter()
            .enumerate()
            .map(|(i, e)| {
                json!({
                    "rule": e.rule,
                    "host": e.host,
                    "gpu": e.gpu,
                    "uuid": e.uuid,
                    "active_since": crate::format::rfc3339_ms(e.active_since_ms),
                    "fired": crate::format::rfc3339_ms(e.fired_ms),
                    "resolved": e.resolved_ms.map(crate::format::rfc3339_ms),
                    "matched": self.has_match(set, i),
                    "in_quiet_period": self.in_quiet(e),
                })
            })
            .collect();
        let (n, with, quiet) = self.counts(set);
        json!({
            "episodes": episodes,
            "count": n,
            "with_counterpart": with,
            "without_counterpart": n - with,
            "in_quiet_periods": quiet,
        })
    }

    /// The JSON view (`--format json`).
    pub fn to_json(&self) -> Value {
        json!({
            "from": crate::format::rfc3339_ms(self.from),
            "to": crate::format::rfc3339_ms(self.to),
            "window_s": self.window_ms / 1000,
            "quiet_periods": self.quiet.as_ref().map(|q| q
                .iter()
                .map(|(a, b)| json!({"from": crate::format::rfc3339_ms(*a), "to": crate::format::rfc3339_ms(*b)}))
                .collect::<Vec<_>>()),
            "their_rules": self.their_rules.iter().map(|(n, e)| json!({"alert": n, "expr": e})).collect::<Vec<_>>(),
            "gpuwatch": self.side(Set::Gpuwatch),
            "theirs": self.side(Set::Theirs),
            "matched": self
                .matched
                .iter()
                .map(|&(a, b, d)| json!({
                    "gpuwatch": a,
                    "theirs": b,
                    "gpuwatch_rule": self.ours[a].rule,
                    "their_rule": self.theirs[b].rule,
                    "host": self.ours[a].host,
                    "gpu": self.ours[a].gpu.or(self.theirs[b].gpu),
                    "their_delay_s": d as f64 / 1000.0,
                }))
                .collect::<Vec<_>>(),
        })
    }

    /// The table for people.
    pub fn to_table(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let (g, t) = (self.counts(Set::Gpuwatch), self.counts(Set::Theirs));
        let quiet = |q: Option<usize>| q.map_or("-".to_string(), |n| n.to_string());
        let _ = writeln!(
            out,
            "backtest {} .. {} (counterparts within ±{} min)",
            crate::format::rfc3339_ms(self.from),
            crate::format::rfc3339_ms(self.to),
            self.window_ms / 60_000
        );
        let _ = writeln!(out, "{:<28} {:>9} {:>9}", "", "GPUWATCH", "THEIRS");
        for (what, a, b) in [
            ("alert episodes", g.0.to_string(), t.0.to_string()),
            ("with a counterpart", g.1.to_string(), t.1.to_string()),
            (
                "without one",
                (g.0 - g.1).to_string(),
                (t.0 - t.1).to_string(),
            ),
            ("in quiet periods", quiet(g.2), quiet(t.2)),
        ] {
            let _ = writeln!(out, "{what:<28} {a:>9} {b:>9}");
        }
        let _ = writeln!(
            out,
            "\n{:<9} {:<26} {:<14} {:>4}  {:<20} {:<20} COUNTERPART",
            "SET", "RULE", "HOST", "GPU", "FIRED (UTC)", "RESOLVED"
        );
        for (set, list) in [(Set::Gpuwatch, &self.ours), (Set::Theirs, &self.theirs)] {
            for (i, e) in list.iter().enumerate() {
                let other: Vec<String> = self
                    .matched
                    .iter()
                    .filter_map(|&(a, b, d)| match set {
                        Set::Gpuwatch if a == i => Some(format!(
                            "{} ({:+.0} min)",
                            self.theirs[b].rule,
                            d as f64 / 60_000.0
                        )),
                        Set::Theirs if b == i => Some(format!(
                            "{} ({:+.0} min)",
                            self.ours[a].rule,
                            -d as f64 / 60_000.0
                        )),
                        _ => None,
                    })
                    .collect();
                let ts = |t: TsMs| crate::format::rfc3339_ms(t)[..19].to_string();
                let _ = writeln!(
                    out,
                    "{:<9} {:<26} {:<14} {:>4}  {:<20} {:<20} {}",
                    match set {
                        Set::Gpuwatch => "gpuwatch",
                        Set::Theirs => "theirs",
                    },
                    e.rule,
                    e.host.as_deref().unwrap_or("-"),
                    e.gpu.map_or("-".to_string(), |g| g.to_string()),
                    ts(e.fired_ms),
                    e.resolved_ms.map_or("firing at the end".to_string(), ts),
                    if other.is_empty() {
                        "none".to_string()
                    } else {
                        other.join(", ")
                    }
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(set: Set, rule: &str, host: &str, gpu: Option<u32>, fired_min: i64) -> Episode {
        let mut labels = vec![("Hostname".to_string(), host.to_string())];
        if let Some(g) = gpu {
            labels.push(("gpu".into(), g.to_string()));
        }
        let t = fired_min * 60_000;
        Episode::from_labels(set, rule, &labels, t, t, Some(t + 5 * 60_000))
    }

    #[test]
    fn counterparts_are_the_same_gpu_within_the_window() {
        let ours = vec![
            ep(Set::Gpuwatch, "gpu_idle", "n1", Some(6), 100),
            ep(Set::Gpuwatch, "training_hang", "n2", Some(0), 500),
        ];
        let theirs = vec![
            ep(Set::Theirs, "GpuIdle", "n1", Some(6), 113),
            ep(Set::Theirs, "GpuIdle", "n1", Some(5), 100),
            ep(Set::Theirs, "NodeDown", "n2", None, 495),
            ep(Set::Theirs, "GpuIdle", "n1", Some(6), 300),
        ];
        let r = Report::new(
            (0, 1000 * 60_000),
            600_000,
            ours,
            theirs,
            Some(vec![(280 * 60_000, 320 * 60_000)]),
            vec![],
        );
        assert_eq!(r.matched.len(), 2, "{:?}", r.matched);
        let j = r.to_json();
        assert_eq!(j["gpuwatch"]["with_counterpart"], 2);
        assert_eq!(j["theirs"]["with_counterpart"], 2);
        assert_eq!(j["theirs"]["in_quiet_periods"], 1);
        assert_eq!(j["gpuwatch"]["in_quiet_periods"], 0);
        let t = r.to_table();
        assert!(t.contains("with a counterpart"), "{t}");
        // Without quiet periods nothing is counted in them: unknown, not 0.
        let r = Report::new((0, 1), 600_000, vec![], vec![], None, vec![]);
        assert!(r.to_json()["gpuwatch"]["in_quiet_periods"].is_null());
    }
}

/// What a backtest compares.
pub struct Input<'a> {
    pub conn: &'a rusqlite::Connection,
    /// Their Prometheus rules file.
    pub rules_file: &'a std::path::Path,
    /// gpuwatch's rules (the defaults unless replaced).
    pub gpuwatch_rules: Vec<crate::rules::rule::Rule>,
    pub replay: crate::alerts::replay::ReplayOptions,
    /// `None`: the stored samples' span.
    pub range: (Option<TsMs>, Option<TsMs>),
    /// The evaluation interval of their groups without one of their own.
    pub eval_interval: std::time::Duration,
    pub window_ms: i64,
    pub quiet: Option<Vec<(TsMs, TsMs)>>,
}

#[derive(Debug, thiserror::Error)]
pub enum BacktestError {
    #[error("{0}")]
    Prometheus(#[from] prometheus::PromError),
    #[error("{0}")]
    Export(#[from] openmetrics::ExportError),
    #[error("{0}")]
    Store(#[from] crate::store::StoreError),
    #[error("{0}")]
    Nothing(String),
}

/// Runs both sides over the same data and compares them.
pub fn run(input: Input<'_>) -> Result<Report, BacktestError> {
    use crate::store::history;
    let Some((first, last)) = history::sample_span(input.conn)? else {
        return Err(BacktestError::Nothing(
            "no samples stored: nothing to backtest (import some first: gpuwatch import prometheus|nvidia-smi|csv|wandb)".into(),
        ));
    };
    let (from, to) = (
        input.range.0.unwrap_or(first),
        input.range.1.unwrap_or(last),
    );
    prometheus::check_rules(input.rules_file)?;
    let dir = tempfile::Builder::new()
        .prefix("gpuwatch-backtest-")
        .tempdir()
        .map_err(|e| BacktestError::Nothing(format!("no temporary directory: {e}")))?;
    let om = dir.path().join("samples.om");
    let points = openmetrics::write(input.conn, (from, to), dir.path(), &om)?;
    if points == 0 {
        return Err(BacktestError::Nothing(format!(
            "no sample between {} and {}: nothing to backtest",
            crate::format::rfc3339_ms(from),
            crate::format::rfc3339_ms(to)
        )));
    }
    let tsdb = dir.path().join("tsdb");
    std::fs::create_dir_all(&tsdb)
        .map_err(|e| BacktestError::Nothing(format!("{}: {e}", tsdb.display())))?;
    prometheus::backfill(&om, &tsdb)?;
    let _ = std::fs::remove_file(&om);
    let local = prometheus::Local::start(&tsdb, input.rules_file, input.eval_interval, dir.path())?;
    let rules = prometheus::alert_rules(&local.url)?;
    if rules.is_empty() {
        return Err(BacktestError::Nothing(format!(
            "{} has no alerting rule (only `alert:` rules are compared; recording rules are not alerts)",
            input.rules_file.display()
        )));
    }
    // The client as `[prometheus]` would build it for this URL (no auth: its own server).
    let prom = crate::config::Config::parse(
        &format!(
            "[prometheus]\nurl = \"{}\"\ntimeout = \"120s\"\n",
            local.url
        ),
        std::path::Path::new("backtest"),
    )
    .ok()
    .and_then(|c| c.prometheus)
    .ok_or_else(|| BacktestError::Nothing("the local Prometheus URL did not parse".into()))?;
    let client = crate::training::PromClient::new(&prom)
        .map_err(|e| BacktestError::Nothing(format!("client: {e}")))?;
    let mut theirs = Vec::new();
    for r in &rules {
        theirs.extend(prometheus::evaluate(&client, r, (from, to))?);
    }
    drop(local);
    // gpuwatch's side: replay's loop over the same range.
    let gpus: std::collections::BTreeMap<i64, (String, u32, String)> =
        history::gpus(input.conn, None)?
            .into_iter()
            .map(|g| (g.gpu_id, (g.host, g.inventory.index, g.inventory.uuid)))
            .collect();
    let mut eps = crate::alerts::episodes::Episodes::default();
    crate::alerts::replay::run(
        input.conn,
        input.gpuwatch_rules,
        &input.replay,
        (from, to),
        |tr| eps.add(tr),
    )?;
    let ours = eps
        .finish()
        .into_iter()
        .map(|a| {
            let g = gpus.get(&a.gpu_id);
            let on_gpu = a.scope != "host";
            Episode {
                set: Set::Gpuwatch,
                rule: a.rule,
                host: g.map(|g| g.0.clone()),
                gpu: g.filter(|_| on_gpu).map(|g| g.1),
                uuid: g.filter(|_| on_gpu).map(|g| g.2.clone()),
                active_since_ms: a.active_since_ms,
                fired_ms: a.fired_ms,
                resolved_ms: a.resolved_ms,
                labels: serde_json::from_str::<std::collections::BTreeMap<String, String>>(
                    &a.labels_json,
                )
                .map(|m| m.into_iter().collect())
                .unwrap_or_default(),
            }
        })
        .collect();
    Ok(Report::new(
        (from, to),
        input.window_ms,
        ours,
        theirs,
        input.quiet,
        rules.into_iter().map(|r| (r.name, r.expr)).collect(),
    ))
}
