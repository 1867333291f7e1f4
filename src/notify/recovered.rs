//! The `gpuwatch_database_recovered` self alert: a damaged database was moved aside at start
//! and a new one started ([`crate::store::recover`]). It reports an event, so it is sent once,
//! firing, to every configured receiver, and never resolves; `gpuwatch doctor` keeps warning
//! about the moved-aside file until someone removes it.
//!
//! Invariant: like every notification it goes through the outbox (kind `self`, in the new
//! database), so the sender delivers it with retries, in order; a one-shot writer that did the
//! recovery (an import) leaves it queued for the daemon's next start.

use crate::config::Config;
use crate::store::outbox::Outbox;
use crate::store::{Recovered, Store, StoreError};

use super::AlertMsg;

/// The self alert's rule name.
pub const RECOVERED_RULE: &str = "gpuwatch_database_recovered";

/// Queues the self alert for every receiver when opening `store` moved a damaged database
/// aside. Returns how many notifications were queued; a failure is logged, not returned (the
/// new database is in use either way, and `doctor` still names the moved-aside file).
pub fn announce(store: &Store, cfg: &Config) -> usize {
    let Some(r) = store.recovered() else {
        return 0;
    };
    match enqueue(store, cfg, r) {
        Ok(n) => n,
        Err(e) => {
            tracing::error!(error = %e, "cannot queue the {RECOVERED_RULE} alert");
            0
        }
    }
}

fn enqueue(store: &Store, cfg: &Config, r: &Recovered) -> Result<usize, StoreError> {
    if cfg.notify.receivers.is_empty() {
        return Ok(0);
    }
    let msg = message(store, &cfg.host, r);
    let rows = super::self_alert::rows(
        cfg.notify.receivers.iter().map(|rc| rc.name.as_str()),
        &format!("self|rule={RECOVERED_RULE}"),
        &msg,
        r.at_ms,
        cfg.notify.timing.repeat_interval,
    )?;
    Outbox::open(store.path())?.enqueue(&rows)?;
    Ok(rows.len())
}

fn message(store: &Store, host: &str, r: &Recovered) -> AlertMsg {
    let mut msg = super::self_alert::firing(
        RECOVERED_RULE,
        "warning",
        host,
        &[],
        format!(
            "the database {} was damaged ({}): it was moved aside to {} and a new one started; \
             the history before {} is in the moved file",
            store.path().display(),
            r.reason,
            r.moved_to.display(),
            super::text::utc(r.at_ms)
        ),
        r.at_ms,
        r.at_ms,
    );
    msg.description = Some(
        "Keep the moved file for a post-mortem (sqlite3 can read what is left of it); delete it \
         once it is no longer needed: `gpuwatch doctor` warns while it exists."
            .into(),
    );
    msg
}
