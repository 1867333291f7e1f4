//! `gpuwatch status`: the GPUs as the database last saw them.

use crate::store;

use super::gpus as format;

/// `status --format json` and `GET /api/v1/status`: `{"gpus": [...], "notify": {...},
/// "remote_write": [...]}`.
pub fn document(
    conn: &rusqlite::Connection,
    cfg: &crate::config::Config,
    host: Option<&str>,
    now: i64,
) -> Result<serde_json::Value, store::StoreError> {
    Ok(Status::read(conn, cfg, host, now)?.json(cfg))
}

/// A point (ts_ms, value) per training series id.
type Points = std::collections::HashMap<i64, (i64, f64)>;

/// How far back `status` looks for a job's progress (its steps per minute).
const PROGRESS_WINDOW_MS: i64 = 5 * 60_000;

/// Everything `status` shows, read once for either form.
pub struct Status {
    rows: Vec<store::read::GpuStatusRow>,
    errors: Vec<store::read::MetricErrorRow>,
    joins: super::status_training::Joins,
    /// The newest and the oldest point of the last [`PROGRESS_WINDOW_MS`] of each chosen
    /// training series (values, and steps per minute).
    progress: (Points, Points),
    delivery: Delivery,
    remote_write: Vec<store::remote_write::Backlog>,
}

impl Status {
    pub fn read(
        conn: &rusqlite::Connection,
        cfg: &crate::config::Config,
        host: Option<&str>,
        now: i64,
    ) -> Result<Status, store::StoreError> {
        let rows = store::read::latest_per_gpu(conn, host, now)?;
        let joins = super::status_training::Joins::read(conn, &rows)?;
        let chosen: Vec<i64> = rows
            .iter()
            .flat_map(|r| {
                let (step, loss) = joins.chosen(&r.host, r.inventory.index);
                [step, loss]
            })
            .flatten()
            .collect();
        let since = now - PROGRESS_WINDOW_MS;
        Ok(Status {
            errors: store::read::metric_error_summary(conn, host)?,
            progress: (
                store::scrape::training_latest(conn, &chosen, since)?,
                store::scrape::training_earliest(conn, &chosen, since)?,
            ),
            joins,
            delivery: delivery(conn, cfg, now)?,
            remote_write: store::remote_write::backlog(conn)?,
            rows,
        })
    }

    pub fn json(&self, cfg: &crate::config::Config) -> serde_json::Value {
        let stale = cfg.http.stall_after.as_millis() as i64;
        let mut v = format::json(&self.rows, stale);
        // format::json writes one object per row, in order.
        for (gpu, row) in v.as_array_mut().into_iter().flatten().zip(&self.rows) {
            let failing: Vec<serde_json::Value> = self
                .errors
                .iter()
                .filter(|e| gpu["uuid"] == e.error.gpu_uuid.as_str())
                .map(|e| {
                    serde_json::json!({
                        "metric": e.error.metric,
                        "error": e.error.error,
                        "count": e.error.count,
                        "first_ms": e.error.first_ms,
                        "last_ms": e.error.last_ms,
                    })
                })
                .collect();
            gpu["read_errors"] = serde_json::Value::Array(failing);
            let job = self.joins.training_job(row, cfg.fleet.job_label.as_deref());
            gpu["training_job"] = job.as_ref().map(|j| j.name.clone()).into();
            gpu["job_source"] = job.map(|j| j.source.as_str()).into();
            let mut training = self.joins.json(&row.host, row.inventory.index);
            self.add_progress(&mut training, &row.host, row.inventory.index);
            gpu["training"] = training;
        }
        serde_json::json!({ "gpus": v, "notify": self.delivery, "remote_write": self.remote_write })
    }

    /// The job's progress beside which series it is: each role's newest `value` and `ts_ms`
    /// (null when none in the last 5 minutes), `steps_per_minute` over them, and the `job`.
    fn add_progress(&self, training: &mut serde_json::Value, host: &str, index: u32) {
        if training.is_null() {
            return;
        }
        let (step, loss) = self.joins.chosen(host, index);
        let (latest, earliest) = &self.progress;
        for (role, id) in [("step", step), ("loss", loss)] {
            let point = id.and_then(|id| latest.get(&id));
            training[role]["value"] = point.map(|p| p.1).into();
            training[role]["ts_ms"] = point.map(|p| p.0).into();
        }
        let rate = step.and_then(|id| {
            let (&(t1, v1), &(t0, v0)) = (latest.get(&id)?, earliest.get(&id)?);
            (t1 > t0).then(|| (v1 - v0) / ((t1 - t0) as f64 / 60_000.0))
        });
        training["steps_per_minute"] = rate.into();
        let job = [step, loss]
            .into_iter()
            .flatten()
            .filter_map(|id| self.joins.series(id))
            .find_map(|s| {
                s.labels
                    .iter()
                    .find(|(k, _)| k == "job")
                    .map(|(_, v)| v.clone())
            });
        training["job"] = job.into();
    }

    /// `Training jobs: llm-pretrain (label) on GPU 0-3` lines, when a GPU's job is known.
    fn jobs_text(&self, cfg: &crate::config::Config) -> String {
        let mut jobs: std::collections::BTreeMap<(String, &'static str), Vec<String>> =
            std::collections::BTreeMap::new();
        for row in &self.rows {
            if let Some(j) = self.joins.training_job(row, cfg.fleet.job_label.as_deref()) {
                jobs.entry((j.name, j.source.as_str()))
                    .or_default()
                    .push(format!("{} GPU {}", row.host, row.inventory.index));
            }
        }
        if jobs.is_empty() {
            return String::new();
        }
        let mut out = String::from("\nTraining jobs (training_job, from):\n");
        for ((name, source), gpus) in jobs {
            out.push_str(&format!("  {name} ({source}): {}\n", gpus.join(", ")));
        }
        out
    }

    pub fn table(&self, cfg: &crate::config::Config, now: i64) -> String {
        let mut out = String::new();
        if self.rows.is_empty() {
            out.push_str(&format!(
                "no GPUs recorded in {} yet\n",
                cfg.database.display()
            ));
        } else {
            let stale = cfg.http.stall_after.as_millis() as i64;
            out.push_str(&format::table(&self.rows, stale));
            out.push_str(&format::health_lines(&self.rows, stale));
            out.push_str(&self.jobs_text(cfg));
            out.push_str(&self.joins.table());
            if !self.errors.is_empty() {
                out.push_str("\nNVML reads failing (counted, logged once):\n");
                for e in &self.errors {
                    out.push_str(&format!(
                        "  GPU {} {}: {} ({} times, last {} ago)\n",
                        e.gpu_index
                            .map_or_else(|| e.error.gpu_uuid.clone(), |i| i.to_string()),
                        e.error.metric,
                        e.error.error,
                        e.error.count,
                        format::age(now - e.error.last_ms)
                    ));
                }
            }
        }
        out.push_str(&delivery_text(&self.delivery, now));
        out.push_str(&remote_write_text(&self.remote_write, now));
        out
    }
}

/// A delivery queue's state as `status` words it (alert receivers and remote-write targets).
struct Queue<'a> {
    last_ok_ms: Option<i64>,
    pending: i64,
    pending_word: &'a str,
    oldest_ms: Option<i64>,
    head_attempts: i64,
    head_error: Option<&'a str>,
}

/// ` (last 3m ago), 2 pending (oldest 5m old), 4 failed attempts, last error: ...`
fn queue_text(q: Queue<'_>, now: i64) -> String {
    let mut out = String::new();
    if let Some(ok) = q.last_ok_ms {
        out.push_str(&format!(" (last {} ago)", format::age(now - ok)));
    }
    if q.pending > 0 {
        out.push_str(&format!(
            ", {} {}{}",
            q.pending,
            q.pending_word,
            q.oldest_ms
                .map(|o| format!(" (oldest {} old)", format::age(now - o)))
                .unwrap_or_default()
        ));
        if q.head_attempts > 0 {
            out.push_str(&format!(
                ", {} failed attempts, last error: {}",
                q.head_attempts,
                q.head_error.unwrap_or("?")
            ));
        }
    }
    out
}

fn remote_write_text(targets: &[store::remote_write::Backlog], now: i64) -> String {
    let mut out = String::new();
    if targets.is_empty() {
        return out;
    }
    out.push_str("\nRemote write:\n");
    for t in targets {
        let mut line = format!(
            "  {}: {} samples sent in {} requests",
            t.target, t.sent_samples, t.sent_requests
        );
        line.push_str(&queue_text(
            Queue {
                last_ok_ms: t.last_success_ms,
                pending: t.pending_requests,
                pending_word: "request(s) queued",
                oldest_ms: t.oldest_pending_ms,
                head_attempts: t.head_attempts,
                head_error: t.last_error.as_deref(),
            },
            now,
        ));
        out.push_str(&line);
        out.push('\n');
        if t.refused_requests > 0 || t.dropped_requests > 0 {
            out.push_str(&format!(
                "    {} request(s) refused by the receiver (4xx, not retried), {} dropped (queue full){}\n",
                t.refused_requests,
                t.dropped_requests,
                t.last_error
                    .as_deref()
                    .map(|e| format!("; last error: {e}"))
                    .unwrap_or_default()
            ));
        }
    }
    out
}

/// Alert delivery as `status` shows it: per receiver, and the silences in force.
#[derive(Debug, serde::Serialize)]
struct Delivery {
    receivers: Vec<ReceiverState>,
    silences_active: usize,
}

#[derive(Debug, serde::Serialize)]
struct ReceiverState {
    #[serde(flatten)]
    backlog: store::outbox::ReceiverBacklog,
    /// `slack`, `email`, ... (absent for receivers no longer configured).
    kind: Option<&'static str>,
    /// The oldest pending notification is older than `backlog_alert_after`.
    backlog_alert: bool,
}

fn delivery(
    conn: &rusqlite::Connection,
    cfg: &crate::config::Config,
    now: i64,
) -> Result<Delivery, store::StoreError> {
    let mut rows = store::outbox::backlog(conn)?;
    for r in &cfg.notify.receivers {
        if !rows.iter().any(|b| b.receiver == r.name) {
            rows.push(store::outbox::ReceiverBacklog {
                receiver: r.name.clone(),
                ..Default::default()
            });
        }
    }
    let limit = cfg.notify.backlog_alert_after.as_millis() as i64;
    let receivers = rows
        .into_iter()
        .map(|b| ReceiverState {
            kind: cfg
                .notify
                .receivers
                .iter()
                .find(|r| r.name == b.receiver)
                .map(|r| r.kind.type_name()),
            backlog_alert: b.overdue_since_ms.is_some_and(|o| now - o > limit),
            backlog: b,
        })
        .collect();
    let silences_active = store::silences::list(conn, now, false)?
        .iter()
        .filter(|s| s.is_active(now))
        .count();
    Ok(Delivery {
        receivers,
        silences_active,
    })
}

fn delivery_text(d: &Delivery, now: i64) -> String {
    let mut out = String::new();
    if d.receivers.is_empty() {
        return out;
    }
    out.push_str("\nAlert delivery:\n");
    for r in &d.receivers {
        let b = &r.backlog;
        let mut line = format!(
            "  {} ({}): {} alert notification(s) delivered in {} message(s)",
            b.receiver,
            r.kind.unwrap_or("not configured"),
            b.delivered,
            b.messages
        );
        line.push_str(&queue_text(
            Queue {
                last_ok_ms: b.last_delivered_ms,
                pending: b.pending,
                pending_word: "pending",
                oldest_ms: b.oldest_pending_ms,
                head_attempts: b.head_attempts,
                head_error: b.head_error.as_deref(),
            },
            now,
        ));
        if b.silenced > 0 {
            line.push_str(&format!(", {} silenced", b.silenced));
        }
        if r.backlog_alert {
            line.push_str("  BACKLOG");
        }
        out.push_str(&line);
        out.push('\n');
        if b.dead > 0 {
            out.push_str(&format!(
                "    {} dead letter(s) (permanent errors, not retried); last: {}\n",
                b.dead,
                b.last_dead_error.as_deref().unwrap_or("?")
            ));
        }
    }
    if d.silences_active > 0 {
        out.push_str(&format!(
            "  {} silence(s) in force (gpuwatch silence list)\n",
            d.silences_active
        ));
    }
    out
}
