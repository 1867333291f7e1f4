//! Alert delivery: routing, grouping, silences, the durable outbox's sender, and one folder
//! per receiver (Slack, email, webhook, Alertmanager).
//!
//! The flow: the rules thread writes each reported transition to the `notifications` outbox
//! (one row per routed receiver) in the same transaction as the alert's state
//! ([`crate::store::alerts`]); the sender thread ([`sender`]) groups due rows, drops what a
//! silence covers, hands a [`Notification`] to the receiver and marks the rows.
//!
//! Invariants:
//! - A notification is marked sent only after its receiver accepted it; a crash between the
//!   two sends it again (at most one duplicate); nothing else is ever sent twice.
//! - Per receiver and group, notifications leave in the order they were enqueued (between
//!   groups, each group's timing decides); a transient failure
//!   holds the receiver's queue (and is retried with backoff), a permanent one dead-letters
//!   the rows it concerned.
//! - Receivers never put secrets in errors; every error text still goes through
//!   [`secret::scrub`] before it is logged or stored.

pub mod alertmanager;
pub mod digest;
mod diskfull;
pub mod email;
pub mod http;
pub use crate::matcher;
pub mod recovered;
pub mod route;

mod self_alert;
pub mod sender;
pub mod slack;
pub mod text;
mod upkeep;
pub mod webhook;

/// gpuwatch's own alerts (rule names a route or silence can match).
pub const SELF_RULES: [&str; 3] = [
    diskfull::FULL_RULE,
    recovered::RECOVERED_RULE,
    sender::BACKLOG_RULE,
];

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::{ReceiverConfig, ReceiverKind};
use crate::model::TsMs;

/// One alert in a notification (also the outbox row's payload, as JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct AlertMsg {
    /// `alerts.id` (`gpuwatch incident ID` tells its story); 0 for test and self alerts.
    pub id: i64,
    /// `firing` or `resolved`.
    pub state: String,
    pub rule: String,
    /// `info`, `warning` or `critical`.
    pub severity: String,
    /// Identity labels (host, gpu, uuid, pid, the rule's labels) plus `rule` and `severity`.
    pub labels: BTreeMap<String, String>,
    /// The rendered summary: what is wrong, with the values that made it fire.
    pub summary: String,
    pub description: Option<String>,
    pub host: String,
    pub gpu: Option<u32>,
    pub uuid: Option<String>,
    pub model: Option<String>,
    pub pid: Option<u32>,
    pub process: Option<String>,
    pub user: Option<String>,
    /// When the condition started to hold.
    pub starts_ms: TsMs,
    /// When it was reported firing.
    pub fired_ms: TsMs,
    /// When it ended (resolved alerts).
    pub ends_ms: Option<TsMs>,
    /// The first metric of the rule's condition (rule-language name, e.g. `util`, `temp`):
    /// what the email chart draws.
    pub metric: Option<String>,
    /// `gpus.id` in the store, for charts (none for host alerts).
    pub gpu_id: Option<i64>,
    /// The rule-based analysis in one line (`analysis::text::one_line`), added by the
    /// sender when the message is built; never stored in the outbox.
    #[serde(default, skip_serializing)]
    pub analysis: Option<String>,
}

impl AlertMsg {
    pub fn is_firing(&self) -> bool {
        self.state == "firing"
    }

    /// The command that shows this alert's story.
    pub fn story_command(&self) -> Option<String> {
        (self.id > 0).then(|| format!("gpuwatch incident {}", self.id))
    }

    /// How long it has been (or was) active at `now`.
    pub fn active_for_ms(&self, now: TsMs) -> i64 {
        (self.ends_ms.unwrap_or(now) - self.starts_ms).max(0)
    }
}

/// What one delivery attempt sends: one group's alerts to one receiver.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Notification {
    pub receiver: String,
    pub group_key: String,
    /// The labels the group was made by (`group_by`).
    pub group_labels: BTreeMap<String, String>,
    /// Firing first, then resolved; each alert once (its latest state).
    pub alerts: Vec<AlertMsg>,
    /// A reminder of alerts still firing (`repeat_interval`).
    pub repeat: bool,
    /// Sent by `gpuwatch notify test`.
    pub test: bool,
    /// The host this gpuwatch runs on.
    pub sender_host: String,
    /// When the notification was built.
    pub now_ms: TsMs,
    /// The usage digest this message is (then `alerts` is empty): not an alert.
    pub digest: Option<Box<crate::usage::digest::DigestMsg>>,
}

impl Notification {
    pub fn firing(&self) -> impl Iterator<Item = &AlertMsg> {
        self.alerts.iter().filter(|a| a.is_firing())
    }

    pub fn resolved(&self) -> impl Iterator<Item = &AlertMsg> {
        self.alerts.iter().filter(|a| !a.is_firing())
    }
}

/// Why a delivery attempt failed. Messages never contain secrets.
#[derive(Debug, Clone, PartialEq)]
pub enum SendError {
    /// Retrying cannot help (400 invalid_payload, 403, 404 channel_not_found, 410
    /// channel_is_archived, a rejected recipient, bad credentials): a dead letter.
    Permanent(String),
    /// Retry later (5xx, timeouts, refused connections, 429): no sooner than `retry_after`
    /// when the server said so.
    Transient {
        message: String,
        retry_after: Option<Duration>,
    },
}

impl SendError {
    pub fn transient(message: impl Into<String>) -> Self {
        SendError::Transient {
            message: message.into(),
            retry_after: None,
        }
    }

    /// The same error with its message rewritten (e.g. scrubbed of a request's secrets).
    pub fn map_message(self, f: impl Fn(String) -> String) -> Self {
        match self {
            SendError::Permanent(m) => SendError::Permanent(f(m)),
            SendError::Transient {
                message,
                retry_after,
            } => SendError::Transient {
                message: f(message),
                retry_after,
            },
        }
    }

    pub fn message(&self) -> &str {
        match self {
            SendError::Permanent(m) => m,
            SendError::Transient { message, .. } => message,
        }
    }
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::Permanent(m) => write!(f, "permanent failure: {m}"),
            SendError::Transient { message, .. } => write!(f, "temporary failure: {message}"),
        }
    }
}

/// What receivers may need besides their own config.
#[derive(Debug, Clone, Default)]
pub struct BuildCtx {
    /// The database (read-only use: charts).
    pub db: Option<PathBuf>,
    /// This gpuwatch's host name.
    pub host: String,
}

/// A configured receiver, ready to send.
pub enum Receiver {
    Slack(slack::SlackReceiver),
    Email(email::EmailReceiver),
    Webhook(webhook::WebhookReceiver),
    Alertmanager(alertmanager::AlertmanagerReceiver),
}

impl Receiver {
    /// Builds a receiver (HTTP clients, TLS settings). Errors are setup problems.
    pub fn build(cfg: &ReceiverConfig, ctx: &BuildCtx) -> Result<Receiver, String> {
        Ok(match &cfg.kind {
            ReceiverKind::Slack(c) => Receiver::Slack(slack::SlackReceiver::new(cfg, c)?),
            ReceiverKind::Email(c) => Receiver::Email(email::EmailReceiver::new(cfg, c, ctx)?),
            ReceiverKind::Webhook(c) => {
                Receiver::Webhook(webhook::WebhookReceiver::new(cfg, c, ctx)?)
            }
            ReceiverKind::Alertmanager(c) => {
                Receiver::Alertmanager(alertmanager::AlertmanagerReceiver::new(cfg, c, ctx)?)
            }
        })
    }

    /// One delivery attempt.
    pub async fn send(&self, n: &Notification) -> Result<(), SendError> {
        match self {
            Receiver::Slack(r) => r.send(n).await,
            Receiver::Email(r) => r.send(n).await,
            Receiver::Webhook(r) => r.send(n).await,
            Receiver::Alertmanager(r) => r.send(n).await,
        }
    }

    /// Alertmanager groups and de-duplicates by itself and wants every alert at once.
    pub fn is_alertmanager(&self) -> bool {
        matches!(self, Receiver::Alertmanager(_))
    }
}

/// A crash-test hook: when the environment variable `GPUWATCH_TEST_PAUSE_AT` names this
/// point (`after_enqueue`, `after_send`), the whole process stops itself (SIGSTOP) right
/// there, so a test can `kill -9` it at exactly that moment. Unset, it costs one load.
pub fn pause_point(name: &str) {
    static AT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let at = AT.get_or_init(|| std::env::var("GPUWATCH_TEST_PAUSE_AT").ok());
    if at.as_deref() == Some(name) {
        eprintln!("gpuwatch: test pause point {name} reached; stopping");
        // SAFETY: raising a signal at our own process has no memory-safety preconditions.
        unsafe {
            libc::raise(libc::SIGSTOP);
        }
    }
}
