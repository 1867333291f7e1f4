//! Store benchmark: ingest rate, bytes per GPU-day, the size of a week, the cost of a live
//! tick at steady state and a week-long per-minute query.
//!
//! ```text
//! cargo run --release --example bench_ingest [-- --days 7 --gpus 8 --procs-per-gpu 4]
//! ```
//!
//! 1. Imports `days` of 1-s ticks (synthetic, `store::synth`) with `write_ticks`, 600 ticks
//!    per transaction, rolling up as it goes: rows/s.
//! 2. Measures the database: bytes per GPU-day (all tables) and the week for 8 GPUs.
//! 3. Writes one more hour tick by tick with `write_tick` (retention now deletes as much as
//!    is written): per-tick cost, p50 / p99 / max.
//! 4. Runs week-long per-minute queries on the rollups and, for comparison, on raw samples.

use std::time::{Duration, Instant};

use gpuwatch::store::{self, StoreConfig, synth::TickGen};

const DAY_MS: i64 = 86_400_000;
const T0: i64 = 1_750_000_000_000;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let days = arg("--days", 7);
    let gpus = arg("--gpus", 8);
    let procs = arg("--procs-per-gpu", 4);
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("bench.db");
    let cfg = StoreConfig::new("bench-node");
    let mut st = store::open(&path, &cfg)?;
    let mut tg = TickGen::new(gpus, procs);
    tg.training_series = 4;
    println!(
        "store benchmark: {days} day(s) of 1-s ticks, {gpus} GPUs, {procs} processes per GPU, \
         max_db_size {} MiB",
        cfg.max_db_size >> 20
    );

    // 1. Import.
    let ticks = days as i64 * 86_400;
    let start = Instant::now();
    let mut rows = 0usize;
    let mut ts = T0;
    let mut batch = Vec::with_capacity(600);
    while ts < T0 + ticks * 1000 {
        batch.push(tg.tick(ts));
        ts += 1000;
        if batch.len() == 600 {
            rows += st.write_ticks(&batch)?.rows;
            batch.clear();
        }
    }
    rows += st.write_ticks(&batch)?.rows;
    let import = start.elapsed();
    let m = st.maintain_fully()?;
    println!(
        "import: {rows} rows in {:.1} s = {:.0} rows/s ({:.0} sample rows/s); catch-up after: {:?}",
        import.as_secs_f64(),
        rows as f64 / import.as_secs_f64(),
        (ticks as f64 * gpus as f64) / import.as_secs_f64(),
        m
    );

    // 2. Size.
    st.checkpoint()?;
    let u = st.usage()?;
    let file = std::fs::metadata(&path)?.len();
    let gpu_days = (gpus * days) as f64;
    let per_gpu_day = u.used_bytes as f64 / gpu_days;
    let conn = st.conn();
    let count = |t: &str| -> i64 {
        conn.query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get(0))
            .unwrap_or(-1)
    };
    println!(
        "rows: samples {} process_samples {} rollups_1m {} training_samples {}",
        count("samples"),
        count("process_samples"),
        count("rollups_1m"),
        count("training_samples")
    );
    let table_bytes: Vec<(String, i64)> = conn
        .prepare("SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC LIMIT 6")
        .and_then(|mut s| {
            s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<Vec<_>, _>>()
        })
        .unwrap_or_default();
    for (name, bytes) in &table_bytes {
        println!(
            "  {name:<28} {:>8.1} MiB  {:>6.1} bytes per GPU-second",
            *bytes as f64 / 1048576.0,
            *bytes as f64 / (gpu_days * 86_400.0)
        );
    }
    println!(
        "size: file {:.1} MiB, used {:.1} MiB = {:.1} MiB per GPU-day; week of 8 GPUs at 1 s: \
         {:.0} MiB ({:.0} % of the 2 GiB default bound)",
        file as f64 / 1048576.0,
        u.used_bytes as f64 / 1048576.0,
        per_gpu_day / 1048576.0,
        per_gpu_day * 56.0 / 1048576.0,
        per_gpu_day * 56.0 / (2u64 << 30) as f64 * 100.0
    );

    // 3. Live ticks at steady state (retention deletes the oldest second per second).
    let mut times: Vec<Duration> = Vec::with_capacity(3600);
    let mut write_only: Vec<Duration> = Vec::with_capacity(3600);
    for _ in 0..3600 {
        let b = tg.tick(ts);
        ts += 1000;
        let t = Instant::now();
        let w = st.write_tick(&b)?;
        times.push(t.elapsed());
        write_only.push(w.write_time);
    }
    times.sort();
    write_only.sort();
    let pct = |v: &[Duration], p: f64| v[((v.len() - 1) as f64 * p) as usize];
    let mean = times.iter().sum::<Duration>() / times.len() as u32;
    println!(
        "live tick ({gpus} GPUs + {} processes, with maintenance): mean {:?} p50 {:?} p99 {:?} \
         max {:?}; transaction only: p50 {:?} p99 {:?}",
        gpus * procs,
        mean,
        pct(&times, 0.5),
        pct(&times, 0.99),
        times[times.len() - 1],
        pct(&write_only, 0.5),
        pct(&write_only, 0.99)
    );

    // 4. Week-long queries, read-only connection as the CLI uses.
    drop(st);
    let ro = store::open_read_only(&path)?;
    let to = ts;
    let from = to - 7 * DAY_MS;
    let q = |sql: &str| -> Result<(usize, Duration), rusqlite::Error> {
        let t = Instant::now();
        let mut stmt = ro.prepare(sql)?;
        let n = stmt.query_map([from, to], |_| Ok(()))?.count();
        Ok((n, t.elapsed()))
    };
    let (n, t) = q(
        "SELECT minute_utc, gpu_index, util_gpu_pct_avg, mem_used_bytes_max, \
                    power_mw_avg, temp_c_max FROM gpu_rollups \
                    WHERE ts_ms >= ?1 AND ts_ms < ?2 ORDER BY ts_ms, gpu_index",
    )?;
    println!("week per-minute per-GPU from gpu_rollups: {n} rows in {t:?}");
    let (n, t) = q(
        "SELECT ts_ms, avg(util_gpu_avg), max(temp_max), sum(power_avg) \
                    FROM rollups_1m WHERE ts_ms >= ?1 AND ts_ms < ?2 GROUP BY ts_ms",
    )?;
    println!("week per-minute across GPUs from rollups_1m: {n} rows in {t:?}");
    let (n, t) = q(
        "SELECT ts_ms / 60000, gpu_id, avg(util_gpu_pct), max(temp_c) FROM samples \
                    WHERE ts_ms >= ?1 AND ts_ms < ?2 GROUP BY 1, 2",
    )?;
    println!("same from raw samples (why rollups matter): {n} rows in {t:?}");
    Ok(())
}
