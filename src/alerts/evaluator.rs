//! The live daemon's rule evaluation: follows what the store writer has committed and runs
//! the [`Engine`] at every stored sample time, exactly as `replay` does. It runs on the writer
//! thread after each commit ([`after_commit`]), reading through the writer's connection.
//!
//! Transitions are routed ([`Router`]) into outbox rows saved in the transaction that saves
//! the alert state; the sender thread ([`crate::notify::sender`]) delivers them.
//!
//! Invariants: it reads each new slice in one read transaction, between the writer's
//! transactions (it never sees uncommitted data); it never does network I/O; it evaluates
//! each sample time once, in order, and only after the writer committed it; it needs no
//! wake-up of its own (the writer runs it after each commit); alert state and notifications
//! are saved through their own connection ([`store::alerts::AlertDb`]).

use std::path::{Path, PathBuf};

use rusqlite::Connection;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::model::TsMs;
use crate::notify::route::Router;
use crate::rules::rule::Rule;
use crate::store;
use crate::store::outbox::NewNotification;

use super::engine::{Engine, EngineOptions, Transition};

/// How often the training sources' status is re-read (a failing Prometheus turns rules
/// that read training metrics into evaluation errors: `on_error`, not `on_no_data`).
const SOURCES_EVERY: Duration = Duration::from_secs(5);

/// Loads the rules again (on SIGHUP): `Err` holds every problem, one per line.
pub type Reloader = Box<dyn Fn() -> Result<Vec<Rule>, String> + Send>;

/// A reload request flag (set by the SIGHUP handler) and how to reload.
pub struct Reload {
    pub requested: Arc<AtomicBool>,
    pub load: Reloader,
}

/// Called with every transition (the demo prints; the daemon logs and enqueues them).
pub type TransitionSink = Box<dyn FnMut(&Transition) + Send>;

/// Wakes the sender thread after notifications were saved.
pub type Wake = Box<dyn Fn() + Send>;

/// Where transitions go, and how rules are reloaded.
pub struct Outputs {
    /// Called with every transition (besides the log line).
    pub sink: TransitionSink,
    /// How to reload the rules when asked (SIGHUP).
    pub reload: Option<Reload>,
    /// Routes transitions into the outbox (no receivers: nothing is enqueued).
    pub router: Router,
    /// Wakes the sender when notifications were queued.
    pub wake: Option<Wake>,
    /// Where each wake-up's duration is recorded (`/metrics`).
    pub health: Option<Arc<crate::telemetry::Health>>,
    /// Keep the usage ledger of this host's GPUs (`None`: no ledger).
    pub usage_host: Option<String>,
    /// `[usage]`: prices and the digest.
    pub usage_config: crate::config::usage::UsageConfig,
}

/// Where a [`Live`] path's transitions go.
pub struct Delivery {
    pub router: Router,
    pub sink: TransitionSink,
    pub wake: Option<Wake>,
    /// The usage ledger of this host's GPUs (`None`: no ledger).
    pub usage: Option<UsageOutput>,
}

/// Where the usage ledger of a live path goes: the host whose GPUs it accounts, and where its
/// counters are published (`/metrics`).
pub struct UsageOutput {
    pub host: String,
    pub health: Option<Arc<crate::telemetry::Health>>,
    /// `[usage]`: prices and the digest.
    pub config: crate::config::usage::UsageConfig,
}

/// The ledger and where it goes.
struct Usage {
    ledger: crate::usage::Ledger,
    out: UsageOutput,
    /// The end of the last digest period looked at.
    digest_checked: Option<TsMs>,
}

/// The live evaluation path, one wake-up at a time: what the rules thread runs and what
/// `examples/bench_rules` times (store slice → engine → state and outbox save).
pub struct Live {
    engine: Engine,
    alert_db: Option<store::alerts::AlertDb>,
    router: Router,
    sink: TransitionSink,
    wake: Option<Wake>,
    failures: u64,
    sources_read: Option<std::time::Instant>,
    usage: Option<Usage>,
}

impl Live {
    /// Opens the alert state for writing, fills the rule windows from the history up to the
    /// newest stored sample (or `fallback_start`) and restores the live alerts.
    pub fn start(
        db: &Path,
        conn: &Connection,
        rules: Vec<Rule>,
        opts: EngineOptions,
        fallback_start: TsMs,
        delivery: Delivery,
        stop: &AtomicBool,
    ) -> Live {
        let Delivery {
            router,
            sink,
            wake,
            usage,
        } = delivery;
        // Start at the newest stored sample with the windows filled from history (a restart
        // neither replays old alerts nor starts blind), and restore the live alerts.
        let start = match store::history::sample_span(conn) {
            Ok(span) => span.map_or(fallback_start, |(_, last)| last),
            Err(_) => fallback_start,
        };
        let engine = match Engine::primed(conn, rules.clone(), opts.clone(), start) {
            Ok(e) => e,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the history to fill rule windows; starting empty");
                Engine::new(rules, opts, start)
            }
        };
        let alert_db = match store::alerts::AlertDb::open(db) {
            Ok(a) => Some(a),
            Err(e) => {
                tracing::error!(error = %e, "alert state will not survive a restart: cannot open the database for writing");
                None
            }
        };
        let usage = usage.map(|out| {
            let open = store::usage::open_rows(conn, Some(&out.host)).unwrap_or_else(|e| {
                tracing::error!(error = %e, "cannot read the usage ledger's open rows; they are closed by the next change");
                Vec::new()
            });
            Usage {
                ledger: crate::usage::Ledger::resume(open),
                out,
                digest_checked: None,
            }
        });
        let mut live = Live {
            engine,
            alert_db,
            router,
            sink,
            wake,
            failures: 0,
            sources_read: None,
            usage,
        };
        if let Some(loaded) = live.alert_db.as_ref().map(|a| a.load_live()) {
            match loaded {
                Ok(saved) => {
                    if !saved.is_empty() {
                        tracing::info!(alerts = saved.len(), "restored live alerts");
                    }
                    live.engine.restore(saved);
                    live.end_removed(start, stop);
                }
                Err(e) => tracing::error!(error = %e, "cannot restore alert state"),
            }
        }
        live
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Saves and notifies the end of alerts whose rule no longer exists.
    fn end_removed(&mut self, at: TsMs, stop: &AtomicBool) {
        let ended = self.engine.take_saves();
        let outbox = enqueue(&self.router, &self.engine.take_ended(), &mut self.sink);
        save(&mut self.alert_db, at, &ended, &outbox, stop, &self.wake);
    }

    /// Loads new rules (SIGHUP); a broken set keeps the running rules.
    pub fn reload(&mut self, conn: &Connection, load: &Reloader, stop: &AtomicBool) {
        match load() {
            Ok(rules) => {
                let n = rules.iter().filter(|r| r.enabled).count();
                match self.engine.reload(conn, rules) {
                    Ok(()) => {
                        tracing::info!(rules = n, "rules reloaded");
                        // Alerts of removed rules end: save and notify that now.
                        let at = self.engine.world().fed_to;
                        self.end_removed(at, stop);
                    }
                    Err(e) => log_failure(&mut self.failures, &e),
                }
            }
            Err(errors) => {
                for line in errors.lines() {
                    tracing::error!("rule reload failed, the previous rules keep running: {line}");
                }
            }
        }
    }

    /// Evaluates every sample time committed up to `upto` that was not evaluated yet: the
    /// slice is read in one read transaction (one snapshot and one lock, not one per query);
    /// each evaluation's changes and notifications are saved in one write transaction, and
    /// only when something changed.
    pub fn catch_up(&mut self, conn: &Connection, upto: TsMs, stop: &AtomicBool) {
        if upto <= self.engine.world().fed_to {
            return;
        }
        let tx = match conn.unchecked_transaction() {
            Ok(tx) => tx,
            Err(e) => return log_failure(&mut self.failures, &e.into()),
        };
        if self
            .sources_read
            .is_none_or(|r| r.elapsed() >= SOURCES_EVERY)
        {
            self.sources_read = Some(std::time::Instant::now());
            if let Err(e) = self.engine.refresh_training_sources(&tx) {
                log_failure(&mut self.failures, &e);
            }
        }
        loop {
            match self.engine.world_mut().next_sample_time(&tx, upto) {
                Ok(Some(t)) => {
                    if let Err(e) = self.engine.advance(&tx, t) {
                        log_failure(&mut self.failures, &e);
                        break;
                    }
                    let transitions = self.engine.evaluate(t);
                    let outbox = enqueue(&self.router, &transitions, &mut self.sink);
                    let saves = self.engine.take_saves();
                    save(&mut self.alert_db, t, &saves, &outbox, stop, &self.wake);
                    self.account(t, stop);
                }
                Ok(None) => break,
                Err(e) => {
                    log_failure(&mut self.failures, &e);
                    break;
                }
            }
        }
    }

    /// The usage ledger's changes at `t`, saved like alert state (retried until saved).
    fn account(&mut self, t: TsMs, stop: &AtomicBool) {
        let Some(u) = self.usage.as_mut() else { return };
        let mut ops = Vec::new();
        for o in self.engine.observe_usage(t, Some(&u.out.host)) {
            let stale = self.engine.stale_after(o.gpu_id);
            u.ledger.observe(o, stale, &mut ops);
        }
        if let Some(h) = &u.out.health
            && let Ok(mut c) = h.usage.lock()
        {
            *c = u.ledger.counters(t);
        }
        let Some(db) = self.alert_db.as_mut() else {
            return;
        };
        if !ops.is_empty() && !retry_save(stop, "the usage ledger", || db.save_usage(&ops)) {
            tracing::error!("giving up saving the usage ledger at shutdown");
            return;
        }
        self.digest(t);
    }

    /// Queues the usage digest of the period that ended (`[usage] digest`), once the idle
    /// test's window has passed its end (an idle onset found late still counts in it).
    fn digest(&mut self, t: TsMs) {
        let (Some(u), Some(db)) = (self.usage.as_mut(), self.alert_db.as_mut()) else {
            return;
        };
        let Some(d) = u.out.config.digest.clone() else {
            return;
        };
        let settle = self.engine.idle_window_ms();
        let Some(p) = crate::usage::digest::last_period(&d, t - settle) else {
            return;
        };
        if u.digest_checked == Some(p.to_ms) {
            return;
        }
        let (host, cfg, router) = (&u.out.host, &u.out.config, &self.router);
        let queued = db.queue_digest((p.from_ms, p.to_ms), host, t, |intervals| {
            let usage = crate::usage::summary::summarize(
                intervals,
                crate::usage::summary::By::Holder,
                (p.from_ms, p.to_ms),
                cfg,
            );
            let msg = crate::usage::digest::build(&usage, host, d.period, p, d.top);
            router.digest_rows(&msg, t)
        });
        match queued {
            Ok(sent) => {
                u.digest_checked = Some(p.to_ms);
                if sent {
                    tracing::info!(period_end = %crate::format::rfc3339_ms(p.to_ms), "usage digest queued");
                    if let Some(w) = &self.wake {
                        w();
                    }
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot queue the usage digest; trying again at the next evaluation")
            }
        }
    }
}

/// The daemon's rule evaluation as the store writer's [`store::AfterCommit`]: built on the
/// writer thread (the windows are filled from the stored history there, before the first tick
/// is written) and run after every committed tick with the writer's connection, so it needs no
/// thread of its own and reads the slice from the pages just written. A reload request
/// (SIGHUP) is taken at the next commit. `stop` makes a failing save give up (at shutdown).
pub fn after_commit(
    db: PathBuf,
    rules: Vec<Rule>,
    opts: EngineOptions,
    stop: Arc<AtomicBool>,
    outputs: Outputs,
) -> store::AfterCommitStart {
    Box::new(move |conn: &Connection| {
        let Outputs {
            sink,
            reload,
            router,
            wake,
            health,
            usage_host,
            usage_config,
        } = outputs;
        let usage = usage_host.map(|host| UsageOutput {
            host,
            health: health.clone(),
            config: usage_config,
        });
        let delivery = Delivery {
            router,
            sink,
            wake,
            usage,
        };
        let live = Live::start(&db, conn, rules, opts, 0, delivery, &stop);
        Box::new(Follower {
            live,
            reload,
            health,
            stop,
        })
    })
}

/// [`Live`] following the writer's commits.
struct Follower {
    live: Live,
    reload: Option<Reload>,
    health: Option<Arc<crate::telemetry::Health>>,
    stop: Arc<AtomicBool>,
}

impl store::AfterCommit for Follower {
    fn committed(&mut self, conn: &Connection, upto: TsMs) {
        if let Some(r) = self
            .reload
            .as_ref()
            .filter(|r| r.requested.swap(false, Ordering::Relaxed))
        {
            self.live.reload(conn, &r.load, &self.stop);
        }
        let started = std::time::Instant::now();
        self.live.catch_up(conn, upto, &self.stop);
        if let Some(h) = &self.health {
            h.eval_seconds.observe(started.elapsed());
            let bytes = self.live.engine.world().heap_bytes() as u64;
            h.rule_window_bytes.store(bytes, Ordering::Relaxed);
        }
    }
}

/// Saves what changed (and its notifications, in the same transaction), then wakes the
/// sender when rows were queued. Nothing changed: no transaction.
fn save(
    alert_db: &mut Option<store::alerts::AlertDb>,
    t: TsMs,
    saves: &[store::alerts::SavedAlert],
    outbox: &[NewNotification],
    stop: &AtomicBool,
    wake: &Option<Wake>,
) {
    if saves.is_empty() && outbox.is_empty() {
        return;
    }
    if let Some(a) = alert_db.as_mut()
        && persist(a, t, saves, outbox, stop)
        && !outbox.is_empty()
    {
        crate::notify::pause_point("after_enqueue");
        if let Some(w) = wake {
            w();
        }
    }
}

/// Saves alert state and its notifications, retrying until it worked: the engine has moved
/// on, so giving up would lose notifications. Gives up only when stopping (after a few more
/// tries), with an error naming what is lost. Returns whether the save happened.
fn persist(
    db: &mut store::alerts::AlertDb,
    t: TsMs,
    saves: &[store::alerts::SavedAlert],
    outbox: &[NewNotification],
    stop: &AtomicBool,
) -> bool {
    let saved = retry_save(stop, "alert state and notifications", || {
        db.save(t, saves, outbox)
    });
    if !saved {
        tracing::error!(
            alerts = saves.len(),
            notifications = outbox.len(),
            "giving up saving alert state at shutdown: these changes are lost"
        );
    }
    saved
}

/// Runs `save` until it works (the evaluation has moved on: what it saves would be lost),
/// every 100 ms, logging the 1st, 2nd, 4th … failure; gives up only when stopping, after 20
/// tries. Returns whether it saved.
fn retry_save(
    stop: &AtomicBool,
    what: &str,
    mut save: impl FnMut() -> Result<(), store::StoreError>,
) -> bool {
    let mut tries = 0u64;
    loop {
        match save() {
            Ok(()) => return true,
            Err(e) => {
                tries += 1;
                if tries == 1 || tries.is_power_of_two() {
                    tracing::error!(error = %e, tries, "cannot save {what}; retrying");
                }
                if stop.load(Ordering::Relaxed) && tries >= 20 {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// Logs and reports transitions, and routes them into outbox rows.
fn enqueue(
    router: &Router,
    transitions: &[Transition],
    sink: &mut TransitionSink,
) -> Vec<NewNotification> {
    let mut rows = Vec::new();
    for tr in transitions {
        match tr.severity_from {
            Some(from) => {
                tracing::warn!(rule = %tr.rule, state = "severity_changed", from = from.as_str(), severity = tr.severity.as_str(), host = %tr.subject.host, gpu = ?tr.subject.gpu, "severity {} → {}: {}", from.as_str(), tr.severity.as_str(), tr.summary)
            }
            None => {
                tracing::warn!(rule = %tr.rule, state = tr.state, severity = tr.severity.as_str(), host = %tr.subject.host, gpu = ?tr.subject.gpu, "{}", tr.summary)
            }
        }
        sink(tr);
        rows.extend(router.enqueue(tr));
    }
    rows
}

fn log_failure(failures: &mut u64, e: &store::StoreError) {
    *failures += 1;
    if *failures == 1 || failures.is_power_of_two() {
        tracing::error!(error = %e, failures = *failures, "rule evaluation could not read the store; retrying");
    }
}
