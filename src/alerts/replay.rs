//! The replay loop: the live daemon's [`Engine`] stepped through every stored sample time of
//! a range over a read-only connection — what `gpuwatch replay` prints and `gpuwatch
//! backtest` compares. One loop, so the two cannot disagree.

use rusqlite::Connection;

use super::engine::{Engine, EngineOptions, Transition};
use crate::model::TsMs;
use crate::rules::rule::Rule;
use crate::store::{StoreError, history};

/// What a replay needs besides the rules.
#[derive(Debug, Clone, Default)]
pub struct ReplayOptions {
    /// Evaluate at most this often (ms); 0: at every stored sample.
    pub eval_every_ms: i64,
    pub job_label: Option<String>,
    pub xid_overrides: Vec<crate::config::XidOverride>,
}

/// Replays `rules` over `[from, to]`, calling `on` with every transition in time order;
/// returns the last evaluated time.
pub fn run(
    conn: &Connection,
    rules: Vec<Rule>,
    opts: &ReplayOptions,
    (from, to): (TsMs, TsMs),
    mut on: impl FnMut(&Transition),
) -> Result<TsMs, StoreError> {
    let staleness_ms = 3 * estimate_interval(conn, from)?;
    let mut engine = Engine::new(
        rules,
        EngineOptions {
            staleness_ms,
            eval_every_ms: opts.eval_every_ms,
            job_label: opts.job_label.clone(),
            xid_overrides: opts.xid_overrides.clone(),
        },
        from - 1,
    );
    engine.world_mut().set_fetch_ahead(10 * 60_000);
    let mut end = from;
    while let Some(t) = engine.world_mut().next_sample_time(conn, to)? {
        engine.advance(conn, t)?;
        for tr in engine.evaluate(t) {
            on(&tr);
        }
        end = t;
    }
    Ok(end)
}

/// The typical spacing of samples near `from` (1 s when it cannot be told).
pub fn estimate_interval(conn: &Connection, from: TsMs) -> Result<i64, StoreError> {
    let rows = history::samples(conn, from - 1, from + 120_000)?;
    let mut times: Vec<i64> = rows.iter().map(|(_, s)| s.ts_ms).collect();
    times.dedup();
    let mut gaps: Vec<i64> = times
        .windows(2)
        .map(|w| w[1] - w[0])
        .filter(|g| *g > 0)
        .collect();
    gaps.sort_unstable();
    Ok(gaps.get(gaps.len() / 2).copied().unwrap_or(1000).max(1))
}
