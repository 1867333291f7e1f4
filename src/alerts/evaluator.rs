//! The live daemon's evaluation thread: follows what the store writer has committed and runs
//! the [`Engine`] at every stored sample time, exactly as `replay` does.
//!
//! Transitions are routed ([`Router`]) into outbox rows saved in the transaction that saves
//! the alert state; the sender thread ([`crate::notify::sender`]) delivers them.
//!
//! Invariants: it reads through its own read-only connection (WAL: it never blocks the
//! writer); it never does network I/O; it evaluates each sample time once, in order, and only
//! after the writer committed it; on stop it catches up with what was committed, then ends.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
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

/// Where transitions go, and how rules are reloaded.
pub struct Outputs {
    /// Called with every transition (besides the log line).
    pub sink: TransitionSink,
    /// How to reload the rules when asked (SIGHUP).
    pub reload: Option<Reload>,
    /// Routes transitions into the outbox (no receivers: nothing is enqueued).
    pub router: Router,
}

/// Starts the thread. `committed` says up to which time the writer has committed.
pub fn spawn(
    db: PathBuf,
    rules: Vec<Rule>,
    opts: EngineOptions,
    committed: impl Fn() -> Option<TsMs> + Send + 'static,
    stop: Arc<AtomicBool>,
    outputs: Outputs,
) -> std::io::Result<JoinHandle<()>> {
    let Outputs {
        mut sink,
        reload,
        router,
    } = outputs;
    std::thread::Builder::new().name("gpuwatch-rules".into()).spawn(move || {
        let conn = match store::open_read_only(&db) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "rule evaluation disabled: cannot open the database");
                return;
            }
        };
        // Start at the newest stored sample with the windows filled from history (a restart
        // neither replays old alerts nor starts blind), and restore the live alerts.
        let start = match store::history::sample_span(&conn) {
            Ok(span) => span.map_or(committed().unwrap_or(0), |(_, last)| last),
            Err(_) => committed().unwrap_or(0),
        };
        let mut engine = match Engine::primed(&conn, rules.clone(), opts, start) {
            Ok(e) => e,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the history to fill rule windows; starting empty");
                Engine::new(rules, opts, start)
            }
        };
        let mut alert_db = match store::alerts::AlertDb::open(&db) {
            Ok(a) => Some(a),
            Err(e) => {
                tracing::error!(error = %e, "alert state will not survive a restart: cannot open the database for writing");
                None
            }
        };
        if let Some(a) = &alert_db {
            match a.load_live() {
                Ok(saved) => {
                    if !saved.is_empty() {
                        tracing::info!(alerts = saved.len(), "restored live alerts");
                    }
                    engine.restore(saved);
                    let ended = engine.take_saves();
                    let outbox = enqueue(&router, &engine.take_ended(), &mut sink);
                    if let Some(a) = alert_db.as_mut() {
                        persist(a, start, &ended, &outbox, &stop);
                    }
                }
                Err(e) => tracing::error!(error = %e, "cannot restore alert state"),
            }
        }
        let mut failures = 0u64;
        let mut sources_read = std::time::Instant::now() - SOURCES_EVERY;
        loop {
            let stopping = stop.load(Ordering::Relaxed);
            if let Some(r) = reload.as_ref().filter(|r| r.requested.swap(false, Ordering::Relaxed)) {
                match (r.load)() {
                    Ok(rules) => {
                        let n = rules.iter().filter(|r| r.enabled).count();
                        match engine.reload(&conn, rules) {
                            Ok(()) => {
                                tracing::info!(rules = n, "rules reloaded");
                                // Alerts of removed rules end: save and notify that now.
                                let outbox = enqueue(&router, &engine.take_ended(), &mut sink);
                                if let Some(a) = alert_db.as_mut() {
                                    let at = engine.world().fed_to;
                                    persist(a, at, &engine.take_saves(), &outbox, &stop);
                                }
                            }
                            Err(e) => log_failure(&mut failures, &e),
                        }
                    }
                    Err(errors) => {
                        for line in errors.lines() {
                            tracing::error!("rule reload failed, the previous rules keep running: {line}");
                        }
                    }
                }
            }
            if sources_read.elapsed() >= SOURCES_EVERY {
                sources_read = std::time::Instant::now();
                if let Err(e) = engine.refresh_training_sources(&conn) {
                    log_failure(&mut failures, &e);
                }
            }
            if let Some(upto) = committed() {
                loop {
                    match engine.world_mut().next_sample_time(&conn, upto) {
                        Ok(Some(t)) => {
                            if let Err(e) = engine.advance(&conn, t) {
                                log_failure(&mut failures, &e);
                                break;
                            }
                            let transitions = engine.evaluate(t);
                            let outbox = enqueue(&router, &transitions, &mut sink);
                            if let Some(a) = alert_db.as_mut()
                                && persist(a, t, &engine.take_saves(), &outbox, &stop)
                                && !outbox.is_empty()
                            {
                                crate::notify::pause_point("after_enqueue");
                            }
                        }
                        Ok(None) => break,
                        Err(e) => {
                            log_failure(&mut failures, &e);
                            break;
                        }
                    }
                }
            }
            if stopping {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    })
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
    let mut tries = 0u64;
    loop {
        match db.save(t, saves, outbox) {
            Ok(()) => return true,
            Err(e) => {
                tries += 1;
                if tries == 1 || tries.is_power_of_two() {
                    tracing::error!(error = %e, tries, "cannot save alert state and notifications; retrying");
                }
                if stop.load(Ordering::Relaxed) && tries >= 20 {
                    tracing::error!(
                        alerts = saves.len(),
                        notifications = outbox.len(),
                        "giving up saving alert state at shutdown: these changes are lost"
                    );
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
        tracing::warn!(rule = %tr.rule, state = tr.state, severity = tr.severity.as_str(), host = %tr.subject.host, gpu = ?tr.subject.gpu, "{}", tr.summary);
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
