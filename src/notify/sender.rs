//! The sender thread: delivers the outbox. Every cycle it reads the active silences, then for
//! each receiver takes the pending rows in enqueue order, groups them, and sends each group
//! that is due (`group_wait` after its first alert, `group_interval` after its last message);
//! it also enqueues reminders (`repeat_interval`), re-sends live alerts to Alertmanager, and
//! raises `gpuwatch_notify_backlog` when a receiver's backlog gets old.
//!
//! Invariants:
//! - Rows are marked only after the receiver's answer: `sent` after success (a crash between
//!   the two re-sends that message once), `dead` after a permanent error, and on a transient
//!   error they stay pending with a backoff (exponential with jitter, at least the server's
//!   Retry-After, at most `retry_max_backoff`). Nothing is ever dropped.
//! - Per receiver, delivery follows enqueue order: while its oldest failed row waits for its
//!   retry, nothing newer is sent to it (the other receivers go on).
//! - Silenced alerts are marked `silenced`, not sent; a resolved message goes only to a
//!   receiver that was told the alert fired (and that wants resolved messages).
//! - Group timing runs on the daemon's clock (simulated in the demo); retry backoff on the
//!   wall clock.
//! - No polling: after each pass the thread sleeps until the earliest time something can be
//!   due (a group's wait, a retry, a reminder, a re-send, a backlog age, the hourly prune) or
//!   until the rules thread rings its bell after queueing notifications. Only a silenced
//!   firing alert (whose silence another process may end) is looked at every 2 s.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::clock::Clock;
use crate::config::{NotifyConfig, ReceiverConfig};
use crate::model::TsMs;
use crate::store::outbox::{Outbox, PendingRow};
use crate::store::{self, StoreError};

use super::matcher::{Matcher, all_match};
use super::{AlertMsg, BuildCtx, Notification, Receiver, SendError};
use crate::secret;

/// The longest sleep towards a time on a simulated clock (the demo), and between passes
/// while flushing at shutdown.
const CYCLE: Duration = Duration::from_millis(200);
/// How often a silenced firing alert is checked for the end of its silence.
pub(super) const HOUSEKEEPING: Duration = Duration::from_secs(2);
/// The longest sleep when nothing is due at all.
const IDLE: Duration = Duration::from_secs(3600);
/// How long a stopping daemon keeps trying to deliver what is due.
const FLUSH_FOR: Duration = Duration::from_secs(10);
/// The self alert's rule name.
pub const BACKLOG_RULE: &str = "gpuwatch_notify_backlog";

pub struct SenderParts {
    pub db: PathBuf,
    pub config: NotifyConfig,
    pub host: String,
    /// The daemon's clock (group timing; created_ms of rows is on this clock).
    pub now: Clock,
    pub stop: Arc<AtomicBool>,
    /// How long delivery history is kept (the daemon passes `rollup_retention`).
    pub history: Duration,
    /// Rung after notifications were queued (and at stop).
    pub bell: Arc<tokio::sync::Notify>,
    /// Whether `now` is the wall clock (a simulated clock's times are approached in
    /// [`CYCLE`] steps).
    pub wall_clock: bool,
    /// Incident analysis: each message's analysis line, and the follow-ups `[analysis]
    /// attach_to` asks for (the daemon hands in `analysis::Analyst`; `None`: neither).
    pub analyst: Option<Arc<dyn Analyst>>,
}

/// What delivery takes from incident analysis, which sits above it in the house: the daemon
/// hands in the implementation (`analysis::Analyst`), so delivery never imports it.
pub trait Analyst: Send + Sync {
    /// The one-line analysis of alert `alert_id` for its message; `None` when there is none
    /// (a message is never held back for its analysis).
    fn message_line(&self, conn: &rusqlite::Connection, alert_id: i64) -> Option<String>;
    /// After a Slack receiver accepted a message: the machine-written follow-up of firing
    /// alert `alert_id` to the same webhook, when `[analysis] attach_to` asks for one; on a
    /// thread of its own, returning at once.
    fn follow_up(
        &self,
        alert_id: i64,
        webhook: &crate::config::SecretSource,
        receiver: &str,
        post_timeout: Duration,
    );
}

/// When the sender has something to do next: a time on the daemon's clock (group timing,
/// reminders) and one on the wall clock (retries, pruning).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Next {
    pub(super) daemon: Option<TsMs>,
    pub(super) wall: Option<TsMs>,
}

impl Next {
    pub(super) fn daemon_at(&mut self, t: TsMs) {
        self.daemon = Some(self.daemon.map_or(t, |d| d.min(t)));
    }
    pub(super) fn wall_at(&mut self, t: TsMs) {
        self.wall = Some(self.wall.map_or(t, |w| w.min(t)));
    }
    fn merge(&mut self, o: Next) {
        if let Some(t) = o.daemon {
            self.daemon_at(t);
        }
        if let Some(t) = o.wall {
            self.wall_at(t);
        }
    }
}

pub(super) struct Slot {
    pub(super) cfg: ReceiverConfig,
    pub(super) receiver: Result<Receiver, String>,
    /// Failures in a row (for log throttling).
    pub(super) failures: u64,
    /// When Alertmanager last got the live alerts (daemon clock).
    pub(super) last_resend: Option<TsMs>,
    /// Backlog self alert raised for this receiver (the message that raised it).
    pub(super) backlog_raised: Option<AlertMsg>,
}

/// Starts the sender thread (nothing to do without receivers: returns `None`).
pub fn spawn(parts: SenderParts) -> std::io::Result<Option<JoinHandle<()>>> {
    if parts.config.receivers.is_empty() {
        return Ok(None);
    }
    crate::clock::spawn_runtime_thread("gpuwatch-notify", "alert delivery", move || run(parts))
        .map(Some)
}

async fn run(parts: SenderParts) {
    let ctx = BuildCtx {
        db: Some(parts.db.clone()),
        host: parts.host.clone(),
    };
    let mut slots: Vec<Slot> = parts
        .config
        .receivers
        .iter()
        .map(|cfg| {
            let receiver = Receiver::build(cfg, &ctx).map_err(|e| secret::scrub(&e));
            if let Err(e) = &receiver {
                tracing::error!(receiver = %cfg.name, "cannot set up the receiver; its notifications wait: {e}");
            }
            Slot {
                cfg: cfg.clone(),
                receiver,
                failures: 0,
                last_resend: None,
                backlog_raised: None,
            }
        })
        .collect();
    let outbox = loop {
        match Outbox::open(&parts.db) {
            Ok(o) => break o,
            Err(e) => {
                tracing::error!(error = %e, "cannot open the outbox; retrying");
                if parts.stop.load(Ordering::Relaxed) {
                    return;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    };
    let mut s = Sender {
        outbox,
        db: parts.db.clone(),
        analyst: parts.analyst.clone(),
        cfg: parts.config.clone(),
        host: parts.host.clone(),
        history: parts.history,
        pruned_at: None,
        disk_full_raised: None,
        analysis_lines: HashMap::new(),
    };
    // Rows left for a receiver that is no longer configured can never go: dead letters.
    let names: Vec<&str> = slots.iter().map(|s| s.cfg.name.as_str()).collect();
    match s.outbox.orphan_receivers(&names) {
        Ok(orphans) => {
            for name in orphans {
                tracing::warn!(receiver = %name, "notifications for a receiver that is no longer configured are kept as dead letters");
                if let Err(e) = s.outbox.mark_receiver_dead(
                    &name,
                    (parts.now)(),
                    "the receiver is no longer configured",
                ) {
                    tracing::error!(error = %e, "cannot mark notifications of a removed receiver");
                }
            }
        }
        Err(e) => tracing::error!(error = %e, "cannot read the outbox"),
    }
    // When housekeeping is due next (at once at start).
    let mut housekeeping = Next {
        daemon: Some(TsMs::MIN),
        wall: None,
    };
    let mut flush_until: Option<Instant> = None;
    loop {
        let stopping = parts.stop.load(Ordering::Relaxed);
        if stopping && flush_until.is_none() {
            flush_until = Some(Instant::now() + FLUSH_FOR);
        }
        let now = (parts.now)();
        let wall = crate::clock::now_ms();
        if housekeeping.daemon.is_some_and(|d| now >= d)
            || housekeeping.wall.is_some_and(|w| wall >= w)
        {
            housekeeping = match s.housekeeping(&mut slots, now).await {
                Ok(next) => next,
                Err(e) => {
                    tracing::error!(error = %e, "alert delivery housekeeping failed; retrying");
                    Next {
                        daemon: Some(now + HOUSEKEEPING.as_millis() as i64),
                        wall: None,
                    }
                }
            };
        }
        let (left, mut next) = match s.cycle(&mut slots, now, stopping).await {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, "alert delivery could not read the outbox; retrying");
                let mut n = Next::default();
                n.wall_at(wall + 1000);
                (true, n)
            }
        };
        if next.daemon.is_some_and(|d| d <= now) {
            // Something was delivered: reminders and backlog ages depend on it.
            housekeeping.daemon_at(now);
        }
        if let Some(until) = flush_until
            && (!left || Instant::now() >= until)
        {
            if left {
                tracing::warn!(
                    "stopping with undelivered notifications; they go out after the next start"
                );
            }
            return;
        }
        next.merge(housekeeping);
        let nap = if stopping {
            CYCLE
        } else {
            nap(
                next,
                (parts.now)(),
                crate::clock::now_ms(),
                parts.wall_clock,
            )
        };
        tokio::select! {
            _ = parts.bell.notified() => {}
            _ = tokio::time::sleep(nap) => {}
        }
    }
}

/// How long to sleep until `next` (daemon and wall clock times), at most [`IDLE`]; towards a
/// simulated clock's time, at most [`CYCLE`].
fn nap(next: Next, now: TsMs, wall: TsMs, wall_clock: bool) -> Duration {
    let ms = |d: TsMs| Duration::from_millis(d.max(0) as u64);
    let mut nap = IDLE;
    if let Some(d) = next.daemon {
        let until = ms(d - now);
        nap = nap.min(if wall_clock { until } else { until.min(CYCLE) });
    }
    if let Some(w) = next.wall {
        nap = nap.min(ms(w - wall));
    }
    nap
}

pub(super) struct Sender {
    pub(super) outbox: Outbox,
    pub(super) db: PathBuf,
    /// Incident analysis (message lines, follow-ups), when the daemon hands one in.
    pub(super) analyst: Option<Arc<dyn Analyst>>,
    pub(super) cfg: NotifyConfig,
    pub(super) host: String,
    /// Delivery history older than this is pruned (rows of live alerts are kept).
    pub(super) history: Duration,
    /// When history was last pruned (wall clock).
    pub(super) pruned_at: Option<TsMs>,
    /// `gpuwatch_database_full` as raised, while it fires.
    pub(super) disk_full_raised: Option<AlertMsg>,
    /// The analysis line given to an outbox row's alert, and when (see [`ANALYSIS_REUSE`]).
    pub(super) analysis_lines: HashMap<i64, (Instant, Option<String>)>,
}

/// What a group's rows become.
enum Fate {
    Send(Box<AlertMsg>),
    /// A usage digest: a message of its own.
    Digest(Box<crate::usage::digest::DigestMsg>),
    Silenced,
    Skipped,
    Dead(String),
}

impl Sender {
    /// One pass over every receiver. Returns whether sendable rows are left (for the flush
    /// at shutdown, where group waits no longer apply) and when the next pass is due (`now`
    /// when something was delivered).
    async fn cycle(
        &mut self,
        slots: &mut [Slot],
        now: TsMs,
        flush: bool,
    ) -> Result<(bool, Next), StoreError> {
        let mut silences = None;
        let mut left = false;
        let mut next = Next::default();
        for slot in slots.iter_mut() {
            left |= self
                .deliver(slot, now, flush, &mut silences, &mut next)
                .await?;
        }
        Ok((left, next))
    }

    pub(super) fn silences(&self, now: TsMs) -> Result<Vec<Vec<Matcher>>, StoreError> {
        Ok(store::silences::list(self.outbox.conn(), now, false)?
            .into_iter()
            .filter(|s| s.is_active(now))
            .filter_map(|s| Matcher::parse_list(&s.matchers).ok())
            .collect())
    }

    /// Delivers what is due for one receiver; true when rows that could go are left. Notes
    /// in `next` when its rows are due. Silences are read once per pass, when needed.
    async fn deliver(
        &mut self,
        slot: &mut Slot,
        now: TsMs,
        flush: bool,
        silences: &mut Option<Vec<Vec<Matcher>>>,
        next: &mut Next,
    ) -> Result<bool, StoreError> {
        let rows = self.outbox.pending(&slot.cfg.name)?;
        if rows.is_empty() {
            return Ok(false);
        }
        let wall = crate::clock::now_ms();
        // Order: while the oldest failed row waits for its retry, nothing newer goes.
        if let Some(retry) = rows
            .iter()
            .filter(|r| r.attempts > 0 && r.next_attempt_ms > wall)
            .map(|r| r.next_attempt_ms)
            .min()
        {
            next.wall_at(retry);
            return Ok(!flush);
        }
        let Ok(receiver) = &slot.receiver else {
            return Ok(false);
        };
        let silences: &[Vec<Matcher>] = match silences {
            Some(s) => s,
            None => silences.insert(self.silences(now)?),
        };
        let mut groups: Vec<(String, Vec<PendingRow>)> = Vec::new();
        for r in rows {
            match groups.iter_mut().find(|(k, _)| *k == r.group_key) {
                Some((_, g)) => g.push(r),
                None => groups.push((r.group_key.clone(), vec![r])),
            }
        }
        let mut left = false;
        for (key, rows) in groups {
            // One message carries each alert once: a later change of an alert already in
            // it (resolved after firing, during an outage) goes in the next message, in order.
            let mut seen = std::collections::HashSet::new();
            let rows: Vec<PendingRow> = rows
                .into_iter()
                .take_while(|r| r.alert_id.is_none_or(|id| seen.insert(id)))
                .collect();
            let head = &rows[0];
            let first_due = head.created_ms + head.group_wait_ms;
            let due = match self.outbox.last_delivered(&slot.cfg.name, &key)? {
                // A row that was already due when the group's last message went is a backlog
                // (an outage, or a later state of an alert in that message): it goes at once.
                Some(last) if first_due <= last => first_due,
                Some(last) => first_due.max(last + head.group_interval_ms),
                None => first_due,
            };
            if due > now && !flush {
                next.daemon_at(due);
                continue;
            }
            // Marks below change what is due: look again at once.
            next.daemon_at(now);
            let mut send: Vec<(i64, AlertMsg)> = Vec::new();
            let mut digest: Option<(i64, Box<crate::usage::digest::DigestMsg>)> = None;
            let (mut silenced, mut skipped) = (Vec::new(), Vec::new());
            for r in &rows {
                match self.fate(slot, r, &rows, silences)? {
                    Fate::Send(m) => send.push((r.id, *m)),
                    // One digest per message; another waits for the next pass.
                    Fate::Digest(d) if digest.is_none() => digest = Some((r.id, d)),
                    Fate::Digest(_) => {}
                    Fate::Silenced => silenced.push(r.id),
                    Fate::Skipped => skipped.push(r.id),
                    Fate::Dead(e) => self.outbox.mark(&[r.id], "dead", now, Some(&e))?,
                }
            }
            self.outbox.mark(&silenced, "silenced", now, None)?;
            self.outbox.mark(&skipped, "skipped", now, None)?;
            let (ids, n) = match digest {
                Some((id, d)) => {
                    let mut n = self.notification(&slot.cfg.name, &key, &rows, Vec::new(), now);
                    n.digest = Some(d);
                    (vec![id], n)
                }
                None if send.is_empty() => continue,
                None => {
                    let ids: Vec<i64> = send.iter().map(|(id, _)| *id).collect();
                    (
                        ids,
                        self.notification(&slot.cfg.name, &key, &rows, send, now),
                    )
                }
            };
            let attempt =
                tokio::time::timeout(slot.cfg.timeout + Duration::from_secs(5), receiver.send(&n))
                    .await
                    .unwrap_or_else(|_| {
                        Err(SendError::transient(format!(
                            "no answer within {}",
                            humantime::format_duration(slot.cfg.timeout)
                        )))
                    });
            match attempt {
                Ok(()) => {
                    super::pause_point("after_send");
                    self.mark_sent(&ids, now).await?;
                    if slot.failures > 0 {
                        tracing::info!(receiver = %slot.cfg.name, "delivering again");
                    }
                    slot.failures = 0;
                    tracing::info!(receiver = %slot.cfg.name, alerts = n.alerts.len(), "notification delivered");
                    self.follow_up(&slot.cfg, &n);
                }
                Err(SendError::Permanent(m)) => {
                    let m = secret::scrub(&m);
                    tracing::error!(receiver = %slot.cfg.name, alerts = n.alerts.len(), "notification rejected, kept as a dead letter (see gpuwatch status): {m}");
                    self.outbox.mark(&ids, "dead", now, Some(&m))?;
                }
                Err(SendError::Transient {
                    message,
                    retry_after,
                }) => {
                    let m = secret::scrub(&message);
                    slot.failures += 1;
                    let delay = backoff(head.attempts + 1, self.cfg.retry_max_backoff)
                        .max(retry_after.unwrap_or_default());
                    if slot.failures == 1 || slot.failures.is_power_of_two() {
                        tracing::warn!(receiver = %slot.cfg.name, failures = slot.failures, retry_in = ?delay, "notification not delivered, will retry: {m}");
                    }
                    let retry = crate::clock::now_ms() + delay.as_millis() as i64;
                    self.outbox.retry_later(&ids, &m, retry)?;
                    next.wall_at(retry);
                    // Hold this receiver's queue: order is kept.
                    return Ok(true);
                }
            }
            left = true;
        }
        Ok(left)
    }

    /// Marks delivered rows, retrying while the database is busy: giving up would send the
    /// message again at the next cycle.
    async fn mark_sent(&mut self, ids: &[i64], now: TsMs) -> Result<(), StoreError> {
        let mut tries = 0;
        loop {
            match self.outbox.mark(ids, "sent", now, None) {
                Ok(()) => return Ok(()),
                Err(e) if tries < 50 => {
                    tries += 1;
                    if tries == 1 {
                        tracing::warn!(error = %e, "cannot mark a delivered notification yet; retrying");
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn fate(
        &self,
        slot: &Slot,
        r: &PendingRow,
        group: &[PendingRow],
        silences: &[Vec<Matcher>],
    ) -> Result<Fate, StoreError> {
        if r.kind == "digest" {
            return Ok(
                match serde_json::from_str::<crate::usage::digest::DigestMsg>(&r.payload_json) {
                    Ok(d) => Fate::Digest(Box::new(d)),
                    Err(e) => Fate::Dead(format!("unreadable digest: {e}")),
                },
            );
        }
        let mut msg: AlertMsg = match serde_json::from_str(&r.payload_json) {
            Ok(m) => m,
            Err(e) => return Ok(Fate::Dead(format!("unreadable payload: {e}"))),
        };
        if let Some(id) = r.alert_id {
            msg.id = id;
        }
        if r.kind != "self" && silences.iter().any(|m| all_match(m, &msg.labels)) {
            return Ok(Fate::Silenced);
        }
        // Alertmanager holds state: it always hears that an alert ended.
        let send_resolved =
            slot.cfg.send_resolved || slot.receiver.as_ref().is_ok_and(Receiver::is_alertmanager);
        // A reminder of an alert that has ended since it was queued would contradict the
        // resolved message.
        if r.kind == "repeat"
            && let Some(id) = r.alert_id
            && !self.outbox.alert_firing(id)?
        {
            return Ok(Fate::Skipped);
        }
        if msg.is_firing() || r.kind == "self" {
            if msg.is_firing() || send_resolved {
                return Ok(Fate::Send(Box::new(msg)));
            }
            return Ok(Fate::Skipped);
        }
        if !send_resolved {
            return Ok(Fate::Skipped);
        }
        // A resolved message only where the firing one went (or goes now).
        let told = match r.alert_id {
            Some(id) => {
                group
                    .iter()
                    .any(|o| o.alert_id == Some(id) && o.id < r.id && o.kind != "resolved")
                    || self.outbox.firing_delivered(&slot.cfg.name, id)?
            }
            None => true,
        };
        Ok(if told {
            Fate::Send(Box::new(msg))
        } else {
            Fate::Skipped
        })
    }

    /// After a delivery: a machine-written follow-up for each newly firing alert of a Slack
    /// receiver's message, when `[analysis] attach_to` asks for it. Each runs on its own
    /// thread; this returns at once.
    fn follow_up(&self, rc: &ReceiverConfig, n: &Notification) {
        let (Some(an), crate::config::ReceiverKind::Slack(slack)) = (&self.analyst, &rc.kind)
        else {
            return;
        };
        if n.repeat || n.test {
            return;
        }
        for a in n.firing().filter(|a| a.id > 0) {
            an.follow_up(a.id, &slack.webhook_url, &rc.name, rc.timeout);
        }
    }

    /// One message: each alert once (its latest state), firing first.
    fn notification(
        &mut self,
        receiver: &str,
        key: &str,
        rows: &[PendingRow],
        send: Vec<(i64, AlertMsg)>,
        now: TsMs,
    ) -> Notification {
        let repeat = send
            .iter()
            .all(|(id, _)| rows.iter().any(|r| r.id == *id && r.kind == "repeat"));
        let mut latest: Vec<(i64, AlertMsg)> = Vec::new();
        for (row, m) in send {
            match latest
                .iter_mut()
                .find(|(_, x)| x.id != 0 && x.id == m.id && x.rule == m.rule)
            {
                Some(x) => *x = (row, m),
                None => latest.push((row, m)),
            }
        }
        latest.sort_by_key(|(_, m)| !m.is_firing());
        // A row's analysis is gathered once and given to each attempt of its message (a
        // delivery retried with backoff would otherwise read the alert's window again every
        // time); a new row (a reminder, another receiver's copy) gets its own.
        let clock = Instant::now();
        self.analysis_lines
            .retain(|_, (at, _)| clock.duration_since(*at) < ANALYSIS_REUSE);
        for (row, m) in latest
            .iter_mut()
            .filter(|(_, m)| m.is_firing() && m.id > 0)
            .take(MAX_ANALYSED)
        {
            let Some(an) = &self.analyst else { break };
            m.analysis = match self.analysis_lines.get(row) {
                Some((_, line)) => line.clone(),
                None => {
                    let line = an.message_line(self.outbox.conn(), m.id);
                    self.analysis_lines.insert(*row, (clock, line.clone()));
                    line
                }
            };
        }
        let latest: Vec<AlertMsg> = latest.into_iter().map(|(_, m)| m).collect();
        let group_labels: BTreeMap<String, String> = key
            .split_once('|')
            .map(|(_, labels)| {
                labels
                    .split(',')
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            })
            .unwrap_or_default();
        Notification {
            digest: None,
            receiver: receiver.to_string(),
            group_key: key.to_string(),
            group_labels,
            alerts: latest,
            repeat,
            test: false,
            sender_host: self.host.clone(),
            now_ms: now,
        }
    }
}

/// The most alerts of one message given an analysis line (each costs a few reads).
const MAX_ANALYSED: usize = 10;
/// How long a row's analysis line is reused for the attempts of its message (then gathered
/// again, so a delivery retried for hours does not carry an hours-old analysis).
const ANALYSIS_REUSE: Duration = Duration::from_secs(600);

/// Exponential backoff with full jitter in [d/2, d]: 1 s, 2 s, 4 s ... up to `max`.
fn backoff(attempt: i64, max: Duration) -> Duration {
    let exp = attempt.clamp(1, 30) as u32 - 1;
    let base = Duration::from_secs(1)
        .saturating_mul(1u32 << exp.min(20))
        .min(max);
    base.mul_f64(0.5 + fastrand::f64() * 0.5)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let max = Duration::from_secs(60);
        for _ in 0..50 {
            let b1 = backoff(1, max);
            assert!(b1 >= Duration::from_millis(500) && b1 <= Duration::from_secs(1));
            let b4 = backoff(4, max);
            assert!(b4 >= Duration::from_secs(4) && b4 <= Duration::from_secs(8));
            assert!(backoff(40, max) <= max);
        }
    }
}
