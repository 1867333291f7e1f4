//! `GET /metrics`: the GPUs as of the last stored tick, in dcgm-exporter's names (or
//! gpuwatch's), their hardware health (`health.rs`), the training progress joined per GPU,
//! the live alerts, and the daemon's own health — from the store through `status`'s readers and one kept read-only connection
//! (the daemon's one [`SharedScraper`], also used by the API and remote write), plus the
//! in-process telemetry.
//!
//! Invariants: a scrape never calls NVML and never waits on the writer (WAL readers do not
//! block it); it reads only this daemon's host (imports of other hosts in the same file are
//! not this node's GPUs); a value that is unknown is absent, never 0; the gpuwatch_* families
//! pass `promtool check metrics` (dcgm-exporter's own names and labels draw its lint, as
//! they do from dcgm-exporter).

pub mod expo;
mod fleet;
mod gpus;
mod health;
mod own;
mod usage;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use rusqlite::Connection;

use crate::config::Config;
use crate::store::{self, StoreError};

use super::Health;
use expo::{Family, Format};

/// Training points older than this are no longer exported (Prometheus's own staleness).
const TRAINING_FRESH_MS: i64 = 5 * 60_000;

/// Everything one scrape reads, in one read transaction.
struct Reads {
    rows: Vec<store::read::GpuStatusRow>,
    xids: Vec<store::scrape::Xid>,
    joins: crate::views::Joins,
    latest: HashMap<i64, (i64, f64)>,
    alerts: Vec<store::scrape::LiveAlert>,
    errors: Vec<store::read::MetricErrorRow>,
    outbox: Vec<store::outbox::ReceiverBacklog>,
    sources: Vec<store::read::TrainingSourceRow>,
    used_bytes: u64,
    pushed: Vec<store::remote_write::Backlog>,
    fleet: crate::fleet::Fleet,
}

impl Reads {
    fn read(
        conn: &Connection,
        cfg: &Config,
        xid_cursor: i64,
        memo: &mut crate::fleet::Memo,
        now_ms: i64,
    ) -> Result<Reads, StoreError> {
        let host = cfg.host.as_str();
        let rows = store::read::latest_per_gpu(conn, Some(host), now_ms)?;
        let joins = crate::views::Joins::read(conn, &rows)?;
        let chosen: Vec<i64> = rows
            .iter()
            .flat_map(|r| {
                let (step, loss) = joins.chosen(&r.host, r.inventory.index);
                [step, loss]
            })
            .flatten()
            .collect();
        let fleet = crate::fleet::read(
            conn,
            host,
            &rows,
            &joins,
            cfg.fleet.job_label.as_deref(),
            memo,
            now_ms,
        )?;
        Ok(Reads {
            fleet,
            xids: store::scrape::xids_after(conn, host, xid_cursor)?,
            latest: store::scrape::training_latest(conn, &chosen, now_ms - TRAINING_FRESH_MS)?,
            alerts: store::scrape::live_alerts(conn, host)?,
            errors: store::read::metric_error_summary(conn, Some(host))?,
            outbox: store::outbox::backlog(conn)?,
            sources: store::read::training_sources(conn, Some(host))?,
            used_bytes: store::scrape::used_bytes(conn)?,
            pushed: store::remote_write::backlog(conn)?,
            rows,
            joins,
        })
    }
}

/// The one scraper of a daemon, shared by `/metrics`, the API and remote write: one
/// read-only connection for all three.
pub type SharedScraper = std::sync::Arc<std::sync::Mutex<Scraper>>;

/// The scraping side's state: its connection, the XID cursor and the health series' label sets.
#[derive(Default)]
pub struct Scraper {
    conn: Option<Connection>,
    /// The newest XID event id read so far, and the newest XID of each GPU (by UUID).
    xid_cursor: i64,
    last_xid: HashMap<String, i64>,
    /// The health series' label sets, kept between scrapes.
    health_labels: health::LabelCache,
    /// The last answer's text, kept for the next one: the body of a scrape (70 kB with 8
    /// GPUs) is over malloc's mmap threshold, so a fresh buffer was mapped, faulted in and
    /// unmapped at every scrape. The response shares it
    /// ([`Answer`]); by the next scrape the server has dropped it, and it is written again in
    /// place (a new one only while a slow client still holds the last).
    answer: Arc<String>,
    /// What the fleet's series keep between scrapes (step windows, stalls found).
    fleet: crate::fleet::Memo,
}

/// A scrape's body: the [`Scraper`]'s kept buffer, shared with the response until it is sent.
struct Answer(Arc<String>);

impl AsRef<[u8]> for Answer {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl Scraper {
    /// One scrape in `format`. A database error drops the connection (the next scrape opens
    /// a fresh one) and is returned.
    pub fn scrape(
        &mut self,
        cfg: &Config,
        health: &Health,
        now_ms: i64,
        format: Format,
    ) -> Result<Bytes, StoreError> {
        let started = Instant::now();
        let families = self.collect(cfg, health, now_ms)?;
        // The last answer's buffer, unless a client still holds it.
        let mut text = Arc::try_unwrap(std::mem::take(&mut self.answer)).unwrap_or_default();
        text.clear();
        expo::encode_into(&families, format, &mut text);
        self.answer = Arc::new(text);
        health.scrape_seconds.observe(started.elapsed());
        Ok(Bytes::from_owner(Answer(self.answer.clone())))
    }

    /// The kept connection (opened on first use).
    pub fn conn(&mut self, db: &std::path::Path) -> Result<&Connection, StoreError> {
        let conn = match self.conn.take() {
            Some(c) => c,
            None => store::open_daemon_reader(db)?,
        };
        Ok(self.conn.insert(conn))
    }

    /// Drops the connection after an error: the next use opens a fresh one.
    pub fn reset(&mut self) {
        self.conn = None;
    }

    /// The families of one scrape (also what remote write pushes). A database error drops
    /// the connection (the next use opens a fresh one) and is returned.
    pub fn collect(
        &mut self,
        cfg: &Config,
        health: &Health,
        now_ms: i64,
    ) -> Result<Vec<Family>, StoreError> {
        let host = &cfg.host;
        let names = cfg.http.metrics_names;
        let stale = cfg.http.stall_after.as_millis() as i64;
        let xid_cursor = self.xid_cursor;
        // `now_ms` is the wall clock; samples are fresh or stale on their own clock.
        let wall_ms = now_ms;
        let now_ms = health.sample_now_or(wall_ms);
        let mut memo = std::mem::take(&mut self.fleet);
        let read = self.conn(&cfg.database).and_then(|conn| {
            // One read transaction: every family describes the same committed state.
            conn.execute_batch("BEGIN")?;
            let read = Reads::read(conn, cfg, xid_cursor, &mut memo, now_ms);
            let _ = conn.execute_batch("COMMIT");
            read
        });
        self.fleet = memo;
        let r = match read {
            Ok(r) => r,
            Err(e) => {
                self.reset();
                return Err(e);
            }
        };
        for x in r.xids {
            self.xid_cursor = self.xid_cursor.max(x.event_id);
            if let Some(code) = x.code {
                self.last_xid.insert(x.gpu_uuid, code);
            }
        }
        let watch = health.xid_watch();
        let gpus: Vec<gpus::Gpu> = r
            .rows
            .into_iter()
            .map(|row| {
                let xid = match self.last_xid.get(&row.inventory.uuid) {
                    Some(code) => Some(*code as f64),
                    None => watch
                        .and_then(|w| w.watched(row.inventory.index))
                        .and_then(|w| w.then_some(0.0)),
                };
                let job = r
                    .fleet
                    .gpus
                    .iter()
                    .find(|g| g.uuid == row.inventory.uuid)
                    .and_then(|g| g.job.as_ref())
                    .map(|j| j.name.clone());
                gpus::Gpu::new(row, host, names, xid, job.as_deref())
            })
            .collect();
        let mut out = gpus::families(&gpus, stale, names);
        let ctx = own::Ctx {
            cfg,
            health,
            now_ms,
            wall_ms,
            stale_after_ms: stale,
        };
        out.extend(own::gpu_state(&ctx, &gpus));
        out.extend(health::families(&gpus, stale, &mut self.health_labels));
        out.extend(own::training(&gpus, &r.joins, &r.latest));
        out.extend(fleet::families(&r.fleet, host, names));
        out.extend(usage::families(health, host, names));
        out.push(own::alerts(&ctx, &r.alerts));
        out.extend(own::daemon(
            &ctx,
            &r.errors,
            &r.outbox,
            &r.sources,
            r.used_bytes,
        ));
        out.extend(own::remote_write(&ctx, &r.pushed));
        Ok(out)
    }
}
