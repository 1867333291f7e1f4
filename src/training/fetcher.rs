//! [`TrainingFetcher`]: runs the role queries over a time range, turns the matrices into
//! [`TrainingPoint`]s, keeps a per-role cursor for polling, and runs the polling task.
//!
//! Invariants:
//! - Ranges are aligned down to multiples of `query_step`, so every poll evaluates the same
//!   grid timestamps and an overlapping re-fetch replaces points instead of adding new ones.
//! - A range longer than [`MAX_POINTS_PER_QUERY`] steps is split into several requests
//!   (Prometheus refuses more than 11,000 points per series).
//! - A role's cursor advances only when its query succeeded; a poll asks again from
//!   `cursor - overlap` (late scrapes), but never further back than `lookback`.
//! - Two series of one role whose labels are equal without `__name__` would be one stored
//!   series: the first is kept, the others are dropped with a warning.
//! - `$host` in a query is replaced by the host name, quoted for a PromQL string.

use std::collections::HashSet;
use std::future::Future;
use std::time::Duration;

use super::Role;
use super::client::PromClient;
use super::error::FetchError;
use crate::config::PrometheusConfig;
use crate::model::{TrainingPoint, TrainingSourceUpdate, TrainingWrite, TsMs};

/// Steps per request; Prometheus's limit is 11,000 points per series.
pub const MAX_POINTS_PER_QUERY: i64 = 10_000;

/// One role's answer over a range.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RoleFetch {
    pub points: Vec<TrainingPoint>,
    /// Series in the answer (0: an empty result).
    pub series: usize,
    pub skipped_non_finite: u64,
}

/// Fetches the training metrics of one host.
#[derive(Debug)]
pub struct TrainingFetcher {
    client: PromClient,
    queries: Vec<(Role, String)>,
    step_ms: i64,
    lookback_ms: i64,
    overlap_ms: i64,
    poll_interval: Duration,
    host: String,
    /// Per role (in `queries` order): the end of the last successful range.
    cursors: Vec<Option<TsMs>>,
}

impl TrainingFetcher {
    /// Builds the HTTP client and reads env secrets (file secrets are read per request).
    pub fn new(cfg: &PrometheusConfig, host: &str) -> Result<Self, FetchError> {
        let client = PromClient::new(cfg)?;
        let quoted = host.replace('\\', "\\\\").replace('"', "\\\"");
        let queries: Vec<(Role, String)> = Role::ALL
            .iter()
            .map(|&r| {
                let q = match r {
                    Role::Step => &cfg.queries.step,
                    Role::Loss => &cfg.queries.loss,
                };
                (r, q.replace("$host", &quoted))
            })
            .collect();
        Ok(Self {
            client,
            cursors: vec![None; queries.len()],
            queries,
            step_ms: ms(cfg.query_step).max(1),
            lookback_ms: ms(cfg.lookback),
            overlap_ms: ms(cfg.overlap),
            poll_interval: cfg.poll_interval,
            host: host.to_string(),
        })
    }

    /// The PromQL run for `role` (after `$host` substitution).
    pub fn query(&self, role: Role) -> &str {
        self.queries
            .iter()
            .find(|(r, _)| *r == role)
            .map_or("", |(_, q)| q.as_str())
    }

    /// Fetches one role over `[from_ms, to_ms]` (aligned down to the step grid).
    pub async fn fetch_role(
        &self,
        role: Role,
        from_ms: TsMs,
        to_ms: TsMs,
    ) -> Result<RoleFetch, FetchError> {
        let step = self.step_ms;
        let (start, end) = (align(from_ms, step), align(to_ms, step));
        let mut out = RoleFetch::default();
        let mut seen: HashSet<Vec<(String, String)>> = HashSet::new();
        let mut chunk_start = start;
        while chunk_start <= end {
            let chunk_end = end.min(chunk_start + (MAX_POINTS_PER_QUERY - 1) * step);
            let m = self
                .client
                .query_range(self.query(role), chunk_start, chunk_end, step)
                .await?;
            out.skipped_non_finite += m.skipped_non_finite;
            for w in &m.warnings {
                tracing::warn!(role = role.key(), warning = %w, "Prometheus warning");
            }
            let mut chunk_seen = HashSet::new();
            for s in m.series {
                if !chunk_seen.insert(s.labels.clone()) {
                    tracing::warn!(
                        role = role.key(),
                        metric = s.metric_name.as_deref().unwrap_or(""),
                        labels = ?s.labels,
                        "two series have the same labels without __name__; keeping the first"
                    );
                    continue;
                }
                out.points
                    .extend(s.points.iter().map(|&(ts_ms, value)| TrainingPoint {
                        ts_ms,
                        name: role.metric().to_string(),
                        labels: s.labels.clone(),
                        value,
                    }));
                seen.insert(s.labels);
            }
            chunk_start = chunk_end + step;
        }
        out.series = seen.len();
        Ok(out)
    }

    /// Fetches every role over `[from_ms, to_ms]`; the first failure fails the whole call.
    pub async fn fetch_range(
        &self,
        from_ms: TsMs,
        to_ms: TsMs,
    ) -> Result<Vec<TrainingPoint>, FetchError> {
        let mut points = Vec::new();
        for &(role, _) in &self.queries {
            points.extend(self.fetch_role(role, from_ms, to_ms).await?.points);
        }
        Ok(points)
    }

    /// One poll ending at `to_ms` (the evaluation clock's now): every role from its cursor
    /// (minus the overlap; `lookback` on the first poll), points and a status per role.
    /// A failing role does not stop the others.
    pub async fn poll(&mut self, to_ms: TsMs) -> TrainingWrite {
        let mut out = TrainingWrite::default();
        for i in 0..self.queries.len() {
            let role = self.queries[i].0;
            let from = self.poll_from(self.cursors[i], to_ms);
            let mut update = TrainingSourceUpdate {
                role: role.key().to_string(),
                query: self.queries[i].1.clone(),
                at_ms: to_ms,
                ..TrainingSourceUpdate::default()
            };
            match self.fetch_role(role, from, to_ms).await {
                Ok(f) => {
                    self.cursors[i] = Some(to_ms);
                    update.series = f.series as u64;
                    update.points = f.points.len() as u64;
                    update.skipped_non_finite = f.skipped_non_finite;
                    update.newest_point_ms = f.points.iter().map(|p| p.ts_ms).max();
                    out.points.extend(f.points);
                }
                Err(e) => {
                    tracing::warn!(host = %self.host, role = role.key(), kind = e.kind(), error = %e,
                        "fetching training metrics failed");
                    update.error = Some((e.kind().to_string(), e.to_string()));
                }
            }
            out.sources.push(update);
        }
        out
    }

    /// Where a poll ending at `to_ms` starts: the cursor minus the overlap, but never before
    /// `to_ms - lookback` (or `- overlap` if longer); `to_ms - lookback` without a cursor or
    /// when the clock went back past it.
    fn poll_from(&self, cursor: Option<TsMs>, to_ms: TsMs) -> TsMs {
        let floor = to_ms - self.lookback_ms.max(self.overlap_ms);
        match cursor {
            Some(c) if c <= to_ms => (c - self.overlap_ms).max(floor),
            _ => to_ms - self.lookback_ms,
        }
    }

    /// Polls every `poll_interval` (real time) until `shutdown` completes: each poll ends at
    /// `clock()` and its [`TrainingWrite`] goes to `sink` (e.g. a store
    /// [`crate::store::TrainingSender`]). Spawn the returned future on the daemon's runtime.
    pub async fn run(
        mut self,
        clock: impl Fn() -> TsMs + Send + 'static,
        mut sink: impl FnMut(TrainingWrite) + Send + 'static,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) {
        let mut ticker = tokio::time::interval(self.poll_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                _ = ticker.tick() => {}
            }
            let to_ms = clock();
            tokio::select! {
                () = &mut shutdown => break,
                w = self.poll(to_ms) => sink(w),
            }
        }
        tracing::debug!(host = %self.host, "training-metrics poller stopped");
    }

    /// Spawns [`TrainingFetcher::run`] on `runtime`.
    pub fn spawn(
        self,
        runtime: &tokio::runtime::Handle,
        clock: impl Fn() -> TsMs + Send + 'static,
        sink: impl FnMut(TrainingWrite) + Send + 'static,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> tokio::task::JoinHandle<()> {
        runtime.spawn(self.run(clock, sink, shutdown))
    }
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The largest multiple of `step` not after `t`.
fn align(t: TsMs, step: i64) -> TsMs {
    t - t.rem_euclid(step)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fetcher(url: &str) -> TrainingFetcher {
        let cfg = PrometheusConfig {
            url: url.into(),
            queries: crate::config::TrainingQueries {
                step: "s".into(),
                loss: "l".into(),
            },
            method: crate::config::QueryMethod::Get,
            poll_interval: Duration::from_millis(20),
            query_step: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            lookback: Duration::from_secs(600),
            overlap: Duration::from_secs(60),
            auth: crate::config::PrometheusAuth::None,
            ca_file: None,
            insecure_skip_verify: false,
        };
        TrainingFetcher::new(&cfg, "h").expect("fetcher")
    }

    #[test]
    fn poll_ranges_follow_the_cursor() {
        let f = fetcher("http://127.0.0.1:9");
        let t = 1_000_000_000;
        assert_eq!(f.poll_from(None, t), t - 600_000, "first poll: lookback");
        assert_eq!(
            f.poll_from(Some(t - 15_000), t),
            t - 75_000,
            "cursor minus overlap"
        );
        assert_eq!(
            f.poll_from(Some(t - 3_600_000), t),
            t - 600_000,
            "catch-up is bounded"
        );
        assert_eq!(f.poll_from(Some(t + 1), t), t - 600_000, "clock went back");
    }

    #[tokio::test]
    async fn run_polls_with_the_clock_until_shutdown() {
        let f = fetcher("http://127.0.0.1:9");
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let clock = std::sync::atomic::AtomicI64::new(1_000_000);
        let task = tokio::spawn(f.run(
            move || clock.fetch_add(1000, std::sync::atomic::Ordering::Relaxed),
            move |w| {
                let _ = tx.send(w);
            },
            async move {
                let _ = stop_rx.await;
            },
        ));
        let mut seen = Vec::new();
        while seen.len() < 3 {
            seen.push(rx.recv().await.expect("a poll"));
        }
        let _ = stop_tx.send(());
        task.await.expect("stops");
        for (i, w) in seen.iter().enumerate() {
            assert!(w.points.is_empty());
            assert_eq!(w.sources.len(), 2);
            for s in &w.sources {
                assert_eq!(s.at_ms, 1_000_000 + 1000 * i as i64);
                assert_eq!(s.error.as_ref().map(|e| e.0.as_str()), Some("unreachable"));
            }
        }
    }

    #[test]
    fn align_is_floor_to_grid() {
        assert_eq!(align(1_700_000_001_234, 1000), 1_700_000_001_000);
        assert_eq!(align(15_000, 15_000), 15_000);
        assert_eq!(align(-1, 1000), -1000);
    }
}
