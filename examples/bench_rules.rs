//! Rule engine cost: one live evaluation cycle of all default rules for 8 GPUs with their
//! windows full, and a replay of a day of 8 GPUs at 1 s.
//!
//!   cargo run --release --example bench_rules [-- HOURS]      # default 24
//!
//! Writes HOURS of synthetic 1-s ticks (8 GPUs, 4 processes each, `store::synth`) into a
//! temporary database, then evaluates the shipped rules over it through the same `Engine`
//! as `gpuwatch replay` and the daemon: every sample time, in order. Reports the replay's
//! wall time and the median/p99 of one evaluation cycle (`Engine::evaluate`) after the first
//! hour (windows full).
//!
//! Then the daemon's live path, tick by tick for 30 more minutes: the store write of the tick
//! (`Store::write_tick`, as the writer thread does it) and the rules thread's work for it
//! (`alerts::evaluator::Live::catch_up`: the slice read from SQLite in one read transaction,
//! the engine, and the alert state + outbox save, with one webhook receiver routed), as
//! medians and p99 per tick. This is what runs in `gpuwatch run`; a regression in any of
//! its parts shows here. The usage ledger's part of the rules path is also timed apart
//! (`ledger step`); `GPUWATCH_BENCH_LEDGER=off` runs the live path without the ledger.

use std::time::{Duration, Instant};

use std::sync::atomic::AtomicBool;

use gpuwatch::alerts::engine::{Engine, EngineOptions};
use gpuwatch::alerts::evaluator::{Delivery, Live};
use gpuwatch::store::{self, StoreConfig, synth::TickGen};

fn main() -> anyhow::Result<()> {
    let hours: i64 = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(24);
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("rules-bench.db");
    let t0: i64 = 1_700_000_000_000;
    let ticks = hours * 3600;
    let mut tg = TickGen::new(8, 4);
    {
        let mut st = store::open(&path, &StoreConfig::new("bench"))?;
        let started = Instant::now();
        let mut batch = Vec::with_capacity(600);
        for k in 0..ticks {
            batch.push(tg.tick(t0 + k * 1000));
            if batch.len() == 600 {
                st.write_ticks(&batch)?;
                batch.clear();
            }
        }
        if !batch.is_empty() {
            st.write_ticks(&batch)?;
        }
        println!(
            "generated {hours} h x 8 GPUs x 1 s in {:.1?}",
            started.elapsed()
        );
    }
    let rules = gpuwatch::rules::load_configured(true, &[])?;
    let enabled = rules.iter().filter(|r| r.enabled).count();
    let conn = store::open_read_only(&path)?;
    let mut engine = Engine::new(rules, EngineOptions::default(), t0 - 1);
    engine.world_mut().set_fetch_ahead(10 * 60_000);
    let mut cycles: Vec<Duration> = Vec::new();
    let (mut evals, mut transitions) = (0u64, 0usize);
    let started = Instant::now();
    while let Some(t) = engine.world_mut().next_sample_time(&conn, i64::MAX)? {
        engine.advance(&conn, t)?;
        let c = Instant::now();
        transitions += engine.evaluate(t).len();
        if t - t0 >= 3_600_000 {
            cycles.push(c.elapsed());
        }
        evals += 1;
    }
    let replay = started.elapsed();
    cycles.sort();
    let pick = |p: f64| {
        cycles
            .get(((cycles.len().max(1) - 1) as f64 * p) as usize)
            .copied()
            .unwrap_or_default()
    };
    println!("rules enabled             {enabled}");
    println!(
        "replay                    {evals} evaluations ({hours} h) in {replay:.2?} ({transitions} transitions)"
    );
    println!(
        "one evaluation cycle      median {:?}  p99 {:?}  (8 GPUs, 32 processes, windows full)",
        pick(0.5),
        pick(0.99)
    );
    println!(
        "rule windows, full        {:.2} MiB (gpuwatch_rule_window_bytes)",
        engine.world().heap_bytes() as f64 / (1024.0 * 1024.0)
    );
    live_path(&path, &mut tg, t0 + ticks * 1000)
}

/// The daemon's per-tick path after the history: write the tick, then catch the rules up.
fn live_path(path: &std::path::Path, tg: &mut TickGen, from: i64) -> anyhow::Result<()> {
    let cfg = gpuwatch::config::Config::parse(
        "[[notify.webhook]]\nname = \"bench\"\nurl = \"http://127.0.0.1:9/hook\"\n",
        std::path::Path::new("bench.toml"),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let stop = AtomicBool::new(false);
    let mut st = store::open(path, &StoreConfig::new("bench"))?;
    let conn = store::open_read_only(path)?;
    let opts = EngineOptions {
        staleness_ms: 3000,
        eval_every_ms: 0,
        job_label: None,
        xid_overrides: Vec::new(),
    };
    let delivery = Delivery {
        router: gpuwatch::notify::route::Router::new(&cfg.notify),
        sink: Box::new(|_| {}),
        wake: None,
        // The daemon keeps the usage ledger of its own host on this path
        // (`GPUWATCH_BENCH_LEDGER=off`: without it, to measure what it costs).
        usage: (std::env::var("GPUWATCH_BENCH_LEDGER").as_deref() != Ok("off")).then(|| {
            gpuwatch::alerts::evaluator::UsageOutput {
                host: "bench".into(),
                health: None,
                config: Default::default(),
            }
        }),
    };
    let rules = gpuwatch::rules::load_configured(true, &[])?;
    let started = Instant::now();
    let mut live = Live::start(path, &conn, rules, opts, from, delivery, &stop);
    println!(
        "live start-up             {:.2?} (windows filled from the stored history)",
        started.elapsed()
    );
    let (mut writes, mut rules_path, mut ledger_step) = (Vec::new(), Vec::new(), Vec::new());
    // The usage ledger's own work at each tick, timed apart (what `Live` does for it besides
    // a write when something changed): observe every GPU, step the ledger, take its counters.
    let mut ledger = gpuwatch::usage::Ledger::default();
    let mut ops = Vec::new();
    for k in 1..=1800 {
        let t = from + k * 1000;
        let batch = tg.tick(t);
        let w = Instant::now();
        st.write_tick(&batch)?;
        writes.push(w.elapsed());
        let r = Instant::now();
        live.catch_up(&conn, t, &stop);
        rules_path.push(r.elapsed());
        let u = Instant::now();
        for o in live.engine().observe_usage(t, None) {
            let stale = live.engine().stale_after(o.gpu_id);
            ledger.observe(o, stale, &mut ops);
        }
        std::hint::black_box(ledger.counters(t));
        ledger_step.push(u.elapsed());
    }
    anyhow::ensure!(
        live.engine().world().fed_to == from + 1_800_000,
        "the live path fell behind"
    );
    let (rows, changes): (i64, i64) = conn.query_row(
        "SELECT count(*), count(DISTINCT gpu_id || '/' || ts_ms) FROM usage_intervals",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    println!(
        "usage ledger              {rows} rows, {changes} intervals for 8 GPUs (history and 30 live minutes)"
    );
    println!(
        "usage ledger (timed apart) {} changes in 1800 ticks",
        ops.len()
    );
    for (name, v) in [
        ("store write", &mut writes),
        ("rules path", &mut rules_path),
        ("ledger step", &mut ledger_step),
    ] {
        v.sort();
        let at = |p: f64| v[((v.len() - 1) as f64 * p) as usize];
        println!(
            "live tick: {name:<14} median {:?}  p99 {:?}  (1800 ticks, 8 GPUs, 32 processes)",
            at(0.5),
            at(0.99)
        );
    }
    Ok(())
}
