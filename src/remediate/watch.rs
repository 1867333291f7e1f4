//! The daemon's remediation thread (`gpuwatch-remediate`, only with `[remediation] enabled`):
//! every `interval` (15 s) it reads this host's firing hardware alerts (the `alerts` listed in the
//! section) and its GPUs' health verdicts (the `health` codes), and decides through
//! [`super::run`] as `gpuwatch gpu health --slurm` does — same breaker, same resume rule,
//! same audit.
//!
//! Invariants: the thread writes only `remediation_log`, through its own connection (as `gpu
//! set` writes its audit from its own process); the store writer stays the only writer of
//! samples and alerts. A failed read or decision is logged and tried again next period; the
//! thread never stops the daemon. Alerts act first (they carry the rule's judgement, XIDs
//! included), then health.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::{Fault, Who};
use crate::config::Config;
use crate::config::remediation::RemediationConfig;
use crate::store::{self, StoreConfig};

/// Starts the thread when the configuration has `[remediation]`.
pub fn spawn(
    config: &Config,
    stop: Arc<AtomicBool>,
) -> std::io::Result<Option<std::thread::JoinHandle<()>>> {
    let Some(r) = config.remediation.clone() else {
        return Ok(None);
    };
    let unknown = super::unknown_codes(&r.health);
    if !unknown.is_empty() {
        tracing::error!(codes = ?unknown, "[remediation] health names codes the health verdict does not have (docs/HEALTH.md): they never act");
    }
    tracing::info!(
        node = %r.node,
        dry_run = r.dry_run,
        action = ?r.action,
        "remediation on: a failing GPU takes this node out of service"
    );
    let (db, host) = (config.database.clone(), config.host.clone());
    let stale = config.http.stall_after.as_millis() as i64;
    std::thread::Builder::new()
        .name("gpuwatch-remediate".into())
        .spawn(move || run(&r, &db, &host, stale, &stop))
        .map(Some)
}

fn run(r: &RemediationConfig, db: &std::path::Path, host: &str, stale: i64, stop: &AtomicBool) {
    let backend = super::backend(&r.action);
    let who = Who {
        name: format!("gpuwatch daemon (pid {})", std::process::id()),
        uid: None,
    };
    let mut store = None;
    let mut last_line = String::new();
    while !stop.load(Ordering::Relaxed) {
        let due = Instant::now() + r.interval;
        if store.is_none() {
            store = store::open(db, &StoreConfig::new(host.to_string()))
                .map_err(|e| tracing::warn!(error = %e, "remediation: cannot open the database"))
                .ok();
        }
        if let Some(st) = store.as_mut() {
            match once(st, r, backend.as_ref(), &who, host, stale) {
                Ok(line) if line != last_line => {
                    tracing::info!("{line}");
                    last_line = line;
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "remediation: no decision this period"),
            }
        }
        while !stop.load(Ordering::Relaxed) && Instant::now() < due {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

fn once(
    st: &mut store::Store,
    r: &RemediationConfig,
    backend: &dyn super::Backend,
    who: &Who,
    host: &str,
    stale: i64,
) -> Result<String, Box<dyn std::error::Error>> {
    let now = crate::clock::now_ms();
    let (alerts, rows) = {
        let conn = st.conn();
        (
            store::remediation::firing_gpu_alerts(conn, host)?,
            store::read::latest_per_gpu(conn, Some(host), now)?,
        )
    };
    let mut faults: Vec<Fault> = alerts
        .into_iter()
        .filter(|(rule, ..)| r.alerts.iter().any(|a| a == rule))
        .map(|(rule, uuid, index, summary)| Fault {
            gpu_index: index,
            gpu_uuid: uuid,
            code: rule.clone(),
            text: summary,
            source: format!("alert:{rule}"),
        })
        .collect();
    faults.extend(super::health_faults(&rows, stale, &r.health));
    Ok(super::run(st, r, backend, who, &faults, now)?.line)
}
