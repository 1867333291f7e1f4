//! Their side of a backtest: the user's Prometheus alerting rules evaluated by a real
//! Prometheus over the same data. A temporary Prometheus (loopback, its own TSDB backfilled
//! by `promtool` from the store, the rules file loaded) parses and validates the rules
//! (`/api/v1/rules` gives each alert's expression, `for`, `keep_firing_for`, labels and its
//! group's interval) and evaluates every expression at every evaluation time of the range
//! (`query_range` with the group's interval as step: by definition the instant queries the
//! rule manager runs at those times). gpuwatch only applies `for` and `keep_firing_for` to
//! those answers as the rule manager does.
//!
//! Invariants: the Prometheus binds 127.0.0.1 on a free port and is killed when dropped; a
//! rules file Prometheus rejects is reported with promtool's own message; no expression is
//! re-implemented.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{Episode, Set};
use crate::model::TsMs;
use crate::training::{Matrix, PromClient};

#[derive(Debug, thiserror::Error)]
pub enum PromError {
    #[error("{0}")]
    Tool(String),
    #[error("{0}")]
    Rules(String),
    #[error("Prometheus: {0}")]
    Query(String),
}

/// Runs `promtool ARGS`, its output on failure as the error.
fn promtool(args: &[&std::ffi::OsStr]) -> Result<String, PromError> {
    let out = Command::new("promtool")
        .args(args)
        .output()
        .map_err(|e| {
            PromError::Tool(format!(
                "cannot run promtool ({e}): backtest evaluates your rules with Prometheus's own tools (Debian: apt install prometheus)"
            ))
        })?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(PromError::Rules(text.trim().to_string()))
    }
}

/// Checks the rules file with `promtool check rules` (its message on failure).
pub fn check_rules(rules: &Path) -> Result<(), PromError> {
    promtool(&["check".as_ref(), "rules".as_ref(), rules.as_os_str()])
        .map(|_| ())
        .map_err(|e| match e {
            PromError::Rules(t) => PromError::Rules(format!(
                "promtool check rules {}: {}",
                rules.display(),
                t.lines()
                    .filter(|l| !l.trim().is_empty())
                    .collect::<Vec<_>>()
                    .join("; ")
            )),
            e => e,
        })
}

/// Backfills OpenMetrics `file` into the TSDB at `data`.
pub fn backfill(file: &Path, data: &Path) -> Result<(), PromError> {
    promtool(&[
        "tsdb".as_ref(),
        "create-blocks-from".as_ref(),
        "openmetrics".as_ref(),
        file.as_os_str(),
        data.as_os_str(),
    ])
    .map(|_| ())
    .map_err(|e| PromError::Tool(format!("promtool could not backfill the samples: {e}")))
}

/// A temporary Prometheus over a TSDB with the rules loaded.
pub struct Local {
    child: Child,
    pub url: String,
    log: PathBuf,
}

impl Drop for Local {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Local {
    /// Starts Prometheus on a free loopback port over `data` with `rules`, evaluating groups
    /// without their own interval every `eval_interval`; waits until it is ready.
    pub fn start(
        data: &Path,
        rules: &Path,
        eval_interval: Duration,
        dir: &Path,
    ) -> Result<Self, PromError> {
        let rules = std::fs::canonicalize(rules).unwrap_or_else(|_| rules.to_path_buf());
        let config = dir.join("prometheus.yml");
        let text = format!(
            "global:\n  evaluation_interval: {}s\nrule_files:\n  - {}\nscrape_configs: []\n",
            eval_interval.as_secs().max(1),
            serde_json::Value::String(rules.display().to_string())
        );
        std::fs::write(&config, text)
            .map_err(|e| PromError::Tool(format!("writing {}: {e}", config.display())))?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .map_err(|e| PromError::Tool(format!("no free loopback port: {e}")))?;
        let log = dir.join("prometheus.log");
        let log_file = std::fs::File::create(&log)
            .map_err(|e| PromError::Tool(format!("writing {}: {e}", log.display())))?;
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg("--storage.tsdb.retention.time=100y")
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .map_err(|e| {
                PromError::Tool(format!(
                    "cannot start prometheus ({e}): backtest evaluates your rules with a real Prometheus (Debian: apt install prometheus)"
                ))
            })?;
        let mut p = Local {
            child,
            url: format!("http://127.0.0.1:{port}"),
            log,
        };
        p.wait_ready(Duration::from_secs(60))?;
        Ok(p)
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<(), PromError> {
        let end = Instant::now() + timeout;
        let url = format!("{}/-/ready", self.url);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                return Err(PromError::Tool(format!(
                    "prometheus exited ({status}): {}",
                    log.lines().rev().take(3).collect::<Vec<_>>().join(" | ")
                )));
            }
            if get_blocking(&url).is_ok_and(|(code, _)| code == 200) {
                return Ok(());
            }
            if Instant::now() > end {
                return Err(PromError::Tool(format!(
                    "prometheus was not ready within {}s (its log: {})",
                    timeout.as_secs(),
                    self.log.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

fn get_blocking(url: &str) -> Result<(u16, String), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let r = crate::outbound::builder(Duration::from_secs(10))
            .build()
            .map_err(|e| e.to_string())?
            .get(url)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let code = r.status().as_u16();
        Ok((code, r.text().await.map_err(|e| e.to_string())?))
    })
}

/// One alerting rule as Prometheus loaded it.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertRule {
    pub name: String,
    pub expr: String,
    pub for_ms: i64,
    pub keep_firing_for_ms: i64,
    pub labels: Vec<(String, String)>,
    pub interval_ms: i64,
}

/// The alerting rules Prometheus at `url` loaded.
pub fn alert_rules(url: &str) -> Result<Vec<AlertRule>, PromError> {
    let (code, body) =
        get_blocking(&format!("{url}/api/v1/rules?type=alert")).map_err(PromError::Query)?;
    if code != 200 {
        return Err(PromError::Query(format!("/api/v1/rules answered {code}")));
    }
    let v: serde_json::Value =
        serde_json::from_str(&body).map_err(|e| PromError::Query(format!("/api/v1/rules: {e}")))?;
    let ms = |x: Option<&serde_json::Value>| {
        x.and_then(serde_json::Value::as_f64)
            .map_or(0, |s| (s * 1000.0).round() as i64)
    };
    let mut out = Vec::new();
    for g in v["data"]["groups"].as_array().into_iter().flatten() {
        let interval_ms = ms(g.get("interval")).max(1000);
        for r in g["rules"].as_array().into_iter().flatten() {
            if r["type"] != "alerting" {
                continue;
            }
            let labels = r["labels"]
                .as_object()
                .map(|o| {
                    o.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                        .collect()
                })
                .unwrap_or_default();
            out.push(AlertRule {
                name: r["name"].as_str().unwrap_or_default().to_string(),
                expr: r["query"].as_str().unwrap_or_default().to_string(),
                for_ms: ms(r.get("duration")),
                keep_firing_for_ms: ms(r.get("keepFiringFor")),
                labels,
                interval_ms,
            });
        }
    }
    Ok(out)
}

/// Evaluates `rule` over `[from, to]` at its group's interval; its alert episodes.
pub fn evaluate(
    client: &PromClient,
    rule: &AlertRule,
    (from, to): (TsMs, TsMs),
) -> Result<Vec<Episode>, PromError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| PromError::Query(e.to_string()))?;
    let step = rule.interval_ms;
    let first = from.div_euclid(step) * step + if from.rem_euclid(step) == 0 { 0 } else { step };
    // The answers by label set: the evaluation times at which the expression returned it.
    let mut active: std::collections::BTreeMap<Vec<(String, String)>, Vec<TsMs>> =
        Default::default();
    let mut start = first;
    while start <= to {
        // Prometheus answers at most 11,000 points per series.
        let end = (start + 10_000 * step).min(to);
        let m: Matrix = rt
            .block_on(client.query_range(&rule.expr, start, end, step))
            .map_err(|e| PromError::Query(format!("{} (`{}`): {e}", rule.name, rule.expr)))?;
        for s in m.series {
            active
                .entry(s.labels)
                .or_default()
                .extend(s.points.iter().map(|p| p.0));
        }
        start = end + step;
    }
    let mut out = Vec::new();
    for (labels, times) in active {
        let mut all = labels.clone();
        for (k, v) in &rule.labels {
            all.retain(|(x, _)| x != k);
            all.push((k.clone(), v.clone()));
        }
        all.sort();
        for (active_since, fired, resolved) in episodes(&times, first, to, step, rule) {
            out.push(Episode::from_labels(
                Set::Theirs,
                &rule.name,
                &all,
                active_since,
                fired,
                resolved,
            ));
        }
    }
    Ok(out)
}

/// The rule manager's state machine over the evaluation times `first, first + step, ...`:
/// `(active since, fired, resolved)` of each episode.
pub fn episodes(
    times: &[TsMs],
    first: TsMs,
    to: TsMs,
    step: i64,
    rule: &AlertRule,
) -> Vec<(TsMs, TsMs, Option<TsMs>)> {
    let set: std::collections::BTreeSet<TsMs> = times.iter().copied().collect();
    let mut out = Vec::new();
    // Prometheus's KeepFiringSince: the first evaluation without the alert while it fires.
    let (mut pending, mut fired, mut absent_since): (Option<TsMs>, Option<TsMs>, Option<TsMs>) =
        (None, None, None);
    let mut t = first;
    while t <= to {
        if set.contains(&t) {
            absent_since = None;
            let since = *pending.get_or_insert(t);
            if fired.is_none() && t - since >= rule.for_ms {
                fired = Some(t);
            }
        } else if let Some(f) = fired {
            let kept = rule.keep_firing_for_ms > 0
                && t - *absent_since.get_or_insert(t) < rule.keep_firing_for_ms;
            if !kept {
                out.push((pending.unwrap_or(f), f, Some(t)));
                (pending, fired, absent_since) = (None, None, None);
            }
        } else {
            pending = None;
        }
        t += step;
    }
    if let Some(f) = fired {
        out.push((pending.unwrap_or(f), f, None));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(for_s: i64, keep_s: i64) -> AlertRule {
        AlertRule {
            name: "GpuIdle".into(),
            expr: "x".into(),
            for_ms: for_s * 1000,
            keep_firing_for_ms: keep_s * 1000,
            labels: Vec::new(),
            interval_ms: 60_000,
        }
    }

    #[test]
    fn for_and_keep_firing_for_as_the_rule_manager_applies_them() {
        let m = 60_000;
        // Active at minutes 2..=9, then 11..=12.
        let times: Vec<TsMs> = (2..=9).chain(11..=12).map(|k| k * m).collect();
        assert_eq!(
            episodes(&times, 0, 20 * m, m, &rule(300, 0)),
            [(2 * m, 7 * m, Some(10 * m))],
            "pending 5 minutes, fired at 7, resolved at the first inactive evaluation; the short second spell never fires"
        );
        assert_eq!(
            episodes(&times, 0, 20 * m, m, &rule(0, 180)),
            [(2 * m, 2 * m, Some(16 * m))],
            "keep_firing_for bridges the one-minute gap and holds 3 minutes from the first evaluation without it"
        );
        assert_eq!(
            episodes(&times, 0, 9 * m, m, &rule(60, 0)),
            [(2 * m, 3 * m, None)],
            "still firing where the range ends"
        );
    }
}
