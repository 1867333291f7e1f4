//! 1-minute rollups of `samples` into `rollups_1m`, and the per-host rollup progress.
//!
//! Invariants:
//! - One accumulator ([`Acc`]: a minute of one GPU) and one upsert of its row, fed two ways:
//!   [`rollup_host`] recomputes whole minutes from the raw rows that exist (live writes,
//!   catch-up after an upgrade, [`Store::rollup_range`], "roll up before deleting raw data";
//!   idempotent), and an import adds its rows as it parses them (`import/fused.rs`), used only
//!   where the result equals what `rollup_host` would compute after the publish.
//! - It never deletes a rollup: a minute whose raw rows are gone keeps its rollup.
//! - `rollup_state.done_ms` per host: every minute starting before it has been rolled up.
//!   The live path advances it to the start of the host's newest (incomplete) minute, at most
//!   [`ROLLUP_BATCH_ROWS`] raw rows per step, so a backlog never stalls a tick.
//! - Aggregates: min/max over non-NULL values, avg over non-NULL values, NULL when the
//!   minute has no value; `throttle_reasons_or` is the bitwise OR of the masks (computed
//!   here in Rust, since SQL has no bit-or aggregate), ECC and energy take the max.

use std::sync::LazyLock;

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::rows::sat;
use super::{Store, StoreError};
use crate::model::{GpuSample, TsMs};

pub(super) const MINUTE_MS: i64 = 60_000;
/// Raw rows a catch-up step scans at most, per host.
pub(super) const ROLLUP_BATCH_ROWS: i64 = 4_000;

pub(super) fn floor_minute(ts_ms: TsMs) -> TsMs {
    ts_ms.div_euclid(MINUTE_MS) * MINUTE_MS
}

pub(super) fn ceil_minute(ts_ms: TsMs) -> TsMs {
    floor_minute(ts_ms + MINUTE_MS - 1)
}

/// How many metrics `rollups_1m` holds as min/max/avg: the metric registry's rows with a
/// rollup ([`crate::metric::ROLLED_METRICS`]), named `{name}_min`, `_max`, `_avg`, of their `sql`
/// column.
const METRICS: usize = crate::metric::ROLLED;
/// Extra columns: (rollup column, samples column), aggregated as noted in the module doc.
const EXTRAS: [(&str, &str); 4] = [
    ("ecc_corrected_max", "ecc_corrected"),
    ("ecc_uncorrected_max", "ecc_uncorrected"),
    ("throttle_reasons_or", "throttle_reasons"),
    ("energy_mj_max", "energy_mj"),
];

static SELECT_SQL: LazyLock<String> = LazyLock::new(|| {
    let cols: Vec<&str> = crate::metric::ROLLED_METRICS
        .iter()
        .map(|m| m.sql)
        .chain(EXTRAS.iter().map(|m| m.1))
        .collect();
    format!(
        "SELECT ts_ms, gpu_id, status, {} FROM samples
         WHERE ts_ms >= ?1 AND ts_ms < ?2 AND gpu_id IN (SELECT id FROM gpus WHERE host_id = ?3)
         ORDER BY ts_ms",
        cols.join(", ")
    )
});

/// The columns of `rollups_1m`, in the order [`Acc::params`] binds them.
pub(super) static COLUMNS: LazyLock<Vec<String>> = LazyLock::new(|| {
    let mut cols = vec!["ts_ms", "gpu_id", "n", "n_missed", "n_lost"]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
    for m in crate::metric::ROLLED_METRICS.iter() {
        for suffix in ["min", "max", "avg"] {
            cols.push(format!("{}_{suffix}", m.name));
        }
    }
    cols.extend(EXTRAS.iter().map(|e| e.0.to_string()));
    cols
});

/// `INSERT OR REPLACE` of one rollup row into `table`, an import's staging copy of
/// `rollups_1m` (whose `uuid_id` stays NULL until the publish).
pub(super) fn insert_sql(table: &str) -> String {
    insert_with(table, "", "")
}

/// The insert of [`COLUMNS`] into `table`, after `extra_cols` set to `extra_values`.
fn insert_with(table: &str, extra_cols: &str, extra_values: &str) -> String {
    let marks: Vec<String> = (1..=COLUMNS.len()).map(|i| format!("?{i}")).collect();
    format!(
        "INSERT OR REPLACE INTO {table} ({extra_cols}{}) VALUES ({extra_values}{})",
        COLUMNS.join(", "),
        marks.join(", ")
    )
}

/// The `gpu_uuids.id` of GPU `?2`'s UUID: `rollups_1m.uuid_id`, the key of the view's
/// UUID-then-time order (migration 17).
pub(super) const UUID_ID_OF_GPU_2: &str =
    "(SELECT u.id FROM gpus g JOIN gpu_uuids u ON u.uuid = g.uuid WHERE g.id = ?2)";

/// The insert into `rollups_1m` itself, which also stores the GPU's [`UUID_ID_OF_GPU_2`].
static INSERT_SQL: LazyLock<String> =
    LazyLock::new(|| insert_with("rollups_1m", "uuid_id, ", &format!("{UUID_ID_OF_GPU_2}, ")));

/// The values a rollup aggregates, in [`METRICS`] then [`EXTRAS`] order.
pub(super) const VALUES: usize = METRICS + EXTRAS.len();

/// The rollup values of a sample, exactly as `samples` stores them
/// (`store::rows::sample_params`).
pub(super) fn sample_values(s: &GpuSample) -> [Option<i64>; VALUES] {
    let mut out = [None; VALUES];
    for (slot, m) in out.iter_mut().zip(crate::metric::ROLLED_METRICS.iter()) {
        *slot = m.rollup.and_then(|stored| stored(s));
    }
    out[METRICS..].copy_from_slice(&[
        sat(s.ecc_corrected),
        sat(s.ecc_uncorrected),
        s.throttle_reasons.map(|v| v as i64),
        sat(s.energy_mj),
    ]);
    out
}

#[derive(Debug, Clone, Copy, Default)]
struct MetricAcc {
    min: Option<i64>,
    max: Option<i64>,
    sum: i128,
    count: i64,
}

impl MetricAcc {
    fn add(&mut self, v: Option<i64>) {
        if let Some(v) = v {
            self.min = Some(self.min.map_or(v, |m| m.min(v)));
            self.max = Some(self.max.map_or(v, |m| m.max(v)));
            self.sum += i128::from(v);
            self.count += 1;
        }
    }

    fn avg(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum as f64 / self.count as f64)
    }
}

/// One GPU's rows of one minute, aggregated as the module doc says.
#[derive(Debug, Clone, Copy)]
pub(super) struct Acc {
    gpu_id: i64,
    n: i64,
    n_missed: i64,
    n_lost: i64,
    metrics: [MetricAcc; METRICS],
    ecc_corrected: Option<i64>,
    ecc_uncorrected: Option<i64>,
    throttle: Option<i64>,
    energy: Option<i64>,
}

fn opt_max(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

impl Acc {
    pub(super) fn new(gpu_id: i64) -> Self {
        Self {
            gpu_id,
            n: 0,
            n_missed: 0,
            n_lost: 0,
            metrics: [MetricAcc::default(); METRICS],
            ecc_corrected: None,
            ecc_uncorrected: None,
            throttle: None,
            energy: None,
        }
    }

    /// Adds one raw row: its stored `status` (1 deadline missed, 2 lost) and
    /// [`sample_values`].
    pub(super) fn add(&mut self, status: i64, v: &[Option<i64>; VALUES]) {
        self.n += 1;
        match status {
            1 => self.n_missed += 1,
            2 => self.n_lost += 1,
            _ => {}
        }
        for (m, v) in self.metrics.iter_mut().zip(v) {
            m.add(*v);
        }
        let base = METRICS;
        self.ecc_corrected = opt_max(self.ecc_corrected, v[base]);
        self.ecc_uncorrected = opt_max(self.ecc_uncorrected, v[base + 1]);
        if let Some(t) = v[base + 2] {
            self.throttle = Some(self.throttle.unwrap_or(0) | t);
        }
        self.energy = opt_max(self.energy, v[base + 3]);
    }

    /// Writes this minute's row with `insert` (a statement of [`insert_sql`]).
    pub(super) fn write(
        &self,
        insert: &mut rusqlite::Statement<'_>,
        minute: TsMs,
    ) -> Result<(), StoreError> {
        let mut values: Vec<rusqlite::types::Value> = Vec::with_capacity(COLUMNS.len());
        for v in [minute, self.gpu_id, self.n, self.n_missed, self.n_lost] {
            values.push(v.into());
        }
        for m in &self.metrics {
            values.push(m.min.into());
            values.push(m.max.into());
            values.push(m.avg().into());
        }
        for v in [
            self.ecc_corrected,
            self.ecc_uncorrected,
            self.throttle,
            self.energy,
        ] {
            values.push(v.into());
        }
        insert.execute(rusqlite::params_from_iter(values))?;
        Ok(())
    }
}

/// Recomputes the rollups of `host_id` for every minute in `[from_ms, to_ms)` (both rounded
/// out to whole minutes) from the raw rows present. Returns the number of rollup rows written.
pub(super) fn rollup_host(
    conn: &Connection,
    host_id: i64,
    from_ms: TsMs,
    to_ms: TsMs,
) -> Result<usize, StoreError> {
    let (from, to) = (floor_minute(from_ms), ceil_minute(to_ms));
    if from >= to {
        return Ok(0);
    }
    let mut select = conn.prepare_cached(&SELECT_SQL)?;
    let mut insert = conn.prepare_cached(&INSERT_SQL)?;
    let mut written = 0;
    let mut minute = i64::MIN;
    let mut accs: Vec<Acc> = Vec::new();
    let mut flush = |minute: i64, accs: &mut Vec<Acc>| -> Result<(), StoreError> {
        for a in accs.drain(..) {
            a.write(&mut insert, minute)?;
            written += 1;
        }
        Ok(())
    };
    let mut rows = select.query(params![from, to, host_id])?;
    let mut values = [None; VALUES];
    while let Some(r) = rows.next()? {
        let ts: i64 = r.get(0)?;
        let gpu_id: i64 = r.get(1)?;
        let m = floor_minute(ts);
        if m != minute {
            flush(minute, &mut accs)?;
            minute = m;
        }
        let idx = match accs.iter().position(|a| a.gpu_id == gpu_id) {
            Some(i) => i,
            None => {
                accs.push(Acc::new(gpu_id));
                accs.len() - 1
            }
        };
        for (i, v) in values.iter_mut().enumerate() {
            *v = r.get(3 + i)?;
        }
        accs[idx].add(r.get(2)?, &values);
    }
    flush(minute, &mut accs)?;
    Ok(written)
}

/// Raises `rollup_state.done_ms` of a host (never lowers it).
pub(super) fn set_done(conn: &Connection, host_id: i64, done_ms: TsMs) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO rollup_state (host_id, done_ms) VALUES (?1, ?2)
         ON CONFLICT (host_id) DO UPDATE SET done_ms = max(done_ms, excluded.done_ms)",
    )?
    .execute(params![host_id, done_ms])?;
    Ok(())
}

/// A host as maintenance sees it.
#[derive(Debug, Clone, Copy)]
pub(super) struct HostRow {
    pub id: i64,
    /// The host's newest timestamp; hosts without data are not loaded.
    pub last_seen_ms: TsMs,
    pub done_ms: Option<TsMs>,
    /// Oldest timestamp ever written for the host.
    pub first_seen_ms: Option<TsMs>,
    /// No raw row of the host is older than this.
    pub raw_floor_ms: Option<TsMs>,
    /// The earliest `first_seen_ms` of the host's GPUs: where rollups start for a host
    /// that has none yet (a new host, or a database from before rollups existed).
    pub first_gpu_ms: Option<TsMs>,
}

impl HostRow {
    fn rollup_start(&self) -> Option<TsMs> {
        self.done_ms.or(self.first_gpu_ms.map(floor_minute))
    }
}

pub(super) fn load_hosts(conn: &Connection) -> Result<Vec<HostRow>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT h.id, h.last_seen_ms, r.done_ms, h.first_seen_ms, h.raw_floor_ms,
           (SELECT min(first_seen_ms) FROM gpus g WHERE g.host_id = h.id)
         FROM hosts h LEFT JOIN rollup_state r ON r.host_id = h.id
         WHERE h.last_seen_ms IS NOT NULL ORDER BY h.id",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(HostRow {
            id: r.get(0)?,
            last_seen_ms: r.get(1)?,
            done_ms: r.get(2)?,
            first_seen_ms: r.get(3)?,
            raw_floor_ms: r.get(4)?,
            first_gpu_ms: r.get(5)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The timestamp of the row `offset` rows after the first row at or after `from_ms` in a
/// table with a leading `ts_ms` key (an index seek plus `offset` steps).
pub(super) fn ts_at_offset(
    conn: &Connection,
    table: &str,
    from_ms: TsMs,
    offset: i64,
) -> Result<Option<TsMs>, StoreError> {
    let sql =
        format!("SELECT ts_ms FROM {table} WHERE ts_ms >= ?1 ORDER BY ts_ms LIMIT 1 OFFSET ?2");
    Ok(conn
        .prepare_cached(&sql)?
        .query_row(params![from_ms, offset], |r| r.get(0))
        .optional()?)
}

/// Advances the rollups of every host towards the start of its newest minute, at most
/// [`ROLLUP_BATCH_ROWS`] raw rows per host; once caught up, `full` also computes the newest
/// minute. Returns the rollup rows written and whether work is left.
pub(super) fn advance(
    conn: &Connection,
    hosts: &[HostRow],
    full: bool,
) -> Result<(usize, bool), StoreError> {
    let mut written = 0;
    let mut backlog = false;
    for h in hosts {
        let target = floor_minute(h.last_seen_ms);
        let Some(start) = h.rollup_start() else {
            continue;
        };
        if start >= target {
            if full {
                // Caught up: also compute the newest, maybe incomplete, minute. It stays
                // pending and is recomputed once complete.
                written += rollup_host(conn, h.id, target, target + MINUTE_MS)?;
            }
            continue;
        }
        let mut end = target;
        if let Some(ts) = ts_at_offset(conn, "samples", start, ROLLUP_BATCH_ROWS)? {
            end = end.min(ceil_minute(ts + 1));
        }
        written += rollup_host(conn, h.id, start, end)?;
        set_done(conn, h.id, end)?;
        backlog |= end < target;
    }
    Ok((written, backlog))
}

/// Makes sure the minutes of `host` before `before_ms` are rolled up before raw rows before
/// `before_ms` are deleted; cheap when they are (the usual case).
pub(super) fn ensure_rolled_up(
    conn: &Connection,
    host: &HostRow,
    before_ms: TsMs,
) -> Result<usize, StoreError> {
    let Some(done) = host.rollup_start() else {
        return Ok(0);
    };
    if done >= before_ms {
        return Ok(0);
    }
    let end = ceil_minute(before_ms);
    let n = rollup_host(conn, host.id, done, end)?;
    set_done(conn, host.id, end)?;
    Ok(n)
}

impl Store {
    /// Recomputes the 1-minute rollups of this store's host for every minute overlapping
    /// `[from_ms, to_ms)`, from the raw samples present (imports call it for the range they
    /// wrote). Existing rollups of minutes without raw rows are kept. Returns rows written.
    pub fn rollup_range(&mut self, from_ms: TsMs, to_ms: TsMs) -> Result<usize, StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let n = rollup_host(&tx, self.host_id, from_ms, to_ms)?;
        tx.commit()?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minute_rounding() {
        assert_eq!(floor_minute(0), 0);
        assert_eq!(floor_minute(59_999), 0);
        assert_eq!(floor_minute(60_000), 60_000);
        assert_eq!(floor_minute(-1), -60_000);
        assert_eq!(ceil_minute(0), 0);
        assert_eq!(ceil_minute(1), 60_000);
        assert_eq!(ceil_minute(60_000), 60_000);
    }

    #[test]
    fn metric_acc_ignores_nulls() {
        let mut m = MetricAcc::default();
        assert_eq!(m.avg(), None);
        m.add(None);
        m.add(Some(0));
        m.add(Some(10));
        assert_eq!((m.min, m.max, m.avg()), (Some(0), Some(10), Some(5.0)));
    }

    #[test]
    fn insert_sql_has_one_mark_per_column() {
        // 5 + 3 per rolled metric (10, and the test build's probe) + 4 extras.
        assert_eq!(COLUMNS.len(), 5 + 3 * 11 + 4);
        assert!(INSERT_SQL.contains("?42)"));
        assert!(!INSERT_SQL.contains("?43"));
    }
}
