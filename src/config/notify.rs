//! The `[notify]` section: receivers (Slack, email, webhook, Alertmanager), routes, and the
//! timing of groups, repeats and retries.
//!
//! Invariants:
//! - Secrets never live here: Slack webhook URLs, SMTP passwords, webhook URLs with tokens and
//!   HMAC keys are named by `*_env` / `*_file` keys ([`SecretSource`]). `Debug` is safe to log.
//! - Receiver names are unique and every route names existing receivers.
//! - Plaintext SMTP with credentials to a non-loopback host is refused unless
//!   `allow_insecure_auth = true`.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::SecretSource;
use super::raw::Checker;
use super::receivers::{RawAlertmanager, RawEmail, RawSlack, RawWebhook};
use crate::matcher::Matcher;

/// Alertmanager's defaults.
pub const DEFAULT_GROUP_WAIT: Duration = Duration::from_secs(30);
pub const DEFAULT_GROUP_INTERVAL: Duration = Duration::from_secs(300);
pub const DEFAULT_REPEAT_INTERVAL: Duration = Duration::from_secs(4 * 3600);

/// The validated `[notify]` section. Empty (no receivers) when absent.
#[derive(Debug, Clone, PartialEq)]
pub struct NotifyConfig {
    pub receivers: Vec<ReceiverConfig>,
    /// Tried in order; the first match wins unless it says `continue = true`.
    pub routes: Vec<RouteConfig>,
    /// Receivers of alerts no route matched (default: every receiver).
    pub default_receivers: Vec<String>,
    /// Grouping of the default route (and of routes that do not set their own).
    pub group_by: Vec<String>,
    pub timing: GroupTiming,
    /// A notification still undelivered after this long raises `gpuwatch_notify_backlog`
    /// (sent to the other receivers) and shows in `gpuwatch status`.
    pub backlog_alert_after: Duration,
    /// Retries of transient failures back off exponentially (with jitter) up to this.
    pub retry_max_backoff: Duration,
}

impl Default for NotifyConfig {
    fn default() -> Self {
        Self {
            receivers: Vec::new(),
            routes: Vec::new(),
            default_receivers: Vec::new(),
            group_by: vec!["rule".into(), "host".into()],
            timing: GroupTiming::default(),
            backlog_alert_after: Duration::from_secs(600),
            retry_max_backoff: Duration::from_secs(60),
        }
    }
}

/// Alertmanager's grouping clocks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupTiming {
    /// How long a new group waits to collect more alerts before its first message.
    pub group_wait: Duration,
    /// How long after a group's last message a change in it is sent.
    pub group_interval: Duration,
    /// How long after a group's last message alerts still firing are sent again.
    pub repeat_interval: Duration,
}

impl Default for GroupTiming {
    fn default() -> Self {
        Self {
            group_wait: DEFAULT_GROUP_WAIT,
            group_interval: DEFAULT_GROUP_INTERVAL,
            repeat_interval: DEFAULT_REPEAT_INTERVAL,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ReceiverConfig {
    pub name: String,
    /// Send a message when an alert ends (default true).
    pub send_resolved: bool,
    /// Deadline of one delivery attempt.
    pub timeout: Duration,
    pub kind: ReceiverKind,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ReceiverKind {
    Slack(SlackConfig),
    Email(EmailConfig),
    Webhook(WebhookConfig),
    Alertmanager(AlertmanagerConfig),
}

impl ReceiverKind {
    pub fn type_name(&self) -> &'static str {
        match self {
            ReceiverKind::Slack(_) => "slack",
            ReceiverKind::Email(_) => "email",
            ReceiverKind::Webhook(_) => "webhook",
            ReceiverKind::Alertmanager(_) => "alertmanager",
        }
    }
}

/// A Slack incoming webhook.
#[derive(Debug, Clone, PartialEq)]
pub struct SlackConfig {
    /// The webhook URL (it is the secret: whoever has it can post).
    pub webhook_url: SecretSource,
    /// At most one message per this interval per webhook (Slack: about one per second).
    pub min_interval: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmtpTls {
    /// Plain connection upgraded with STARTTLS (required; port 587).
    StartTls,
    /// TLS from the first byte (port 465).
    Tls,
    /// No TLS (loopback relays; with credentials only if `allow_insecure_auth`).
    None,
}

#[derive(Debug, Clone, PartialEq)]
pub struct EmailConfig {
    pub smtp_host: String,
    pub smtp_port: u16,
    pub tls: SmtpTls,
    pub username: Option<String>,
    pub password: Option<SecretSource>,
    pub from: String,
    pub to: Vec<String>,
    /// Extra CA certificate(s) (PEM) trusted for the SMTP server.
    pub ca_file: Option<PathBuf>,
    /// Send credentials over a plaintext connection to a non-loopback host.
    pub allow_insecure_auth: bool,
    /// Attach a PNG chart of the metric that fired (last hour) to the HTML part.
    pub chart: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum UrlSource {
    /// A URL without credentials, written in the config.
    Plain(String),
    /// A URL that carries a token: read from env or a file.
    Secret(SecretSource),
}

#[derive(Debug, Clone, PartialEq)]
pub struct WebhookConfig {
    pub url: UrlSource,
    /// HMAC-SHA256 key; when set, requests carry `X-Gpuwatch-Signature: sha256=<hex>`.
    pub hmac_secret: Option<SecretSource>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AlertmanagerConfig {
    /// Base URLs of every Alertmanager of the HA cluster (all are sent to).
    pub urls: Vec<String>,
    /// Active alerts are re-sent this often with `endsAt` = now + 4 × this.
    pub resend_every: Duration,
    /// Also send `gpuwatch_heartbeat`, an alert that always fires (the Watchdog pattern).
    pub heartbeat: bool,
    pub bearer_token: Option<SecretSource>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RouteConfig {
    /// All must match the alert's labels (`rule`, `severity`, `host`, `gpu`, `uuid`, ...).
    pub matchers: Vec<Matcher>,
    pub receivers: Vec<String>,
    pub group_by: Vec<String>,
    pub timing: GroupTiming,
    /// Go on to the next routes after this one matched.
    pub continue_: bool,
}

// ---------------------------------------------------------------------------------------
// Raw form

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNotify {
    #[serde(default)]
    slack: Vec<Spanned<RawSlack>>,
    #[serde(default)]
    email: Vec<Spanned<RawEmail>>,
    #[serde(default)]
    webhook: Vec<Spanned<RawWebhook>>,
    #[serde(default)]
    alertmanager: Vec<Spanned<RawAlertmanager>>,
    #[serde(default)]
    route: Vec<Spanned<RawRoute>>,
    default_receivers: Option<Vec<Spanned<String>>>,
    group_by: Option<Vec<Spanned<String>>>,
    group_wait: Option<Spanned<String>>,
    group_interval: Option<Spanned<String>>,
    repeat_interval: Option<Spanned<String>>,
    backlog_alert_after: Option<Spanned<String>>,
    retry_max_backoff: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    #[serde(rename = "match", default)]
    matchers: Vec<Spanned<String>>,
    #[serde(default)]
    receivers: Vec<Spanned<String>>,
    group_by: Option<Vec<Spanned<String>>>,
    group_wait: Option<Spanned<String>>,
    group_interval: Option<Spanned<String>>,
    repeat_interval: Option<Spanned<String>>,
    #[serde(rename = "continue")]
    continue_: Option<bool>,
}

type Span = std::ops::Range<usize>;

impl RawNotify {
    pub(super) fn compile(self, c: &mut Checker<'_>) -> NotifyConfig {
        let d = NotifyConfig::default();
        let s = Duration::from_secs;
        let timing = GroupTiming {
            group_wait: c.duration(
                "notify.group_wait",
                &self.group_wait,
                d.timing.group_wait,
                s(0),
                s(86_400),
            ),
            group_interval: c.duration(
                "notify.group_interval",
                &self.group_interval,
                d.timing.group_interval,
                s(0),
                s(86_400),
            ),
            repeat_interval: c.duration(
                "notify.repeat_interval",
                &self.repeat_interval,
                d.timing.repeat_interval,
                s(1),
                s(30 * 86_400),
            ),
        };
        let backlog_alert_after = c.duration(
            "notify.backlog_alert_after",
            &self.backlog_alert_after,
            d.backlog_alert_after,
            s(1),
            s(30 * 86_400),
        );
        let retry_max_backoff = c.duration(
            "notify.retry_max_backoff",
            &self.retry_max_backoff,
            d.retry_max_backoff,
            Duration::from_millis(100),
            s(86_400),
        );
        let group_by = self
            .group_by
            .as_ref()
            .map_or(d.group_by.clone(), |g| label_list(c, "notify.group_by", g));

        // Names are checked for duplicates before compiling (a receiver with errors is
        // dropped, but its name still counts).
        let name = |span: Span, n: &Option<Spanned<String>>| {
            n.as_ref()
                .map(|n| n.get_ref().trim().to_string())
                .filter(|n| !n.is_empty())
                .map(|n| (span, n))
        };
        let raw_names: Vec<(Span, String)> = (self.slack.iter())
            .filter_map(|r| name(r.span(), &r.get_ref().name))
            .chain(
                self.email
                    .iter()
                    .filter_map(|r| name(r.span(), &r.get_ref().name)),
            )
            .chain(
                self.webhook
                    .iter()
                    .filter_map(|r| name(r.span(), &r.get_ref().name)),
            )
            .chain((self.alertmanager.iter()).filter_map(|r| name(r.span(), &r.get_ref().name)))
            .collect();
        for (i, (span, name)) in raw_names.iter().enumerate() {
            if raw_names[..i].iter().any(|(_, o)| o == name) {
                c.error(
                    span.clone(),
                    format!("receiver name {name:?} is used twice"),
                    "give every receiver its own `name`",
                );
            }
        }
        let mut receivers: Vec<(Span, ReceiverConfig)> = Vec::new();
        for r in self.slack {
            let span = r.span();
            receivers.extend(r.into_inner().compile(c, span.clone()).map(|x| (span, x)));
        }
        for r in self.email {
            let span = r.span();
            receivers.extend(r.into_inner().compile(c, span.clone()).map(|x| (span, x)));
        }
        for r in self.webhook {
            let span = r.span();
            receivers.extend(r.into_inner().compile(c, span.clone()).map(|x| (span, x)));
        }
        for r in self.alertmanager {
            let span = r.span();
            receivers.extend(r.into_inner().compile(c, span.clone()).map(|x| (span, x)));
        }
        let names: Vec<String> = raw_names.into_iter().map(|(_, n)| n).collect();
        let known = |c: &mut Checker<'_>, key: &str, list: &[Spanned<String>]| -> Vec<String> {
            let mut out = Vec::new();
            for n in list {
                if names.iter().any(|x| x == n.get_ref()) {
                    out.push(n.get_ref().clone());
                } else {
                    c.error(
                        n.span(),
                        format!("`{key}` names {:?}, which is not a receiver", n.get_ref()),
                        &format!(
                            "receivers are: {}",
                            if names.is_empty() {
                                "none (add [[notify.slack]], [[notify.email]], ...)".to_string()
                            } else {
                                names.join(", ")
                            }
                        ),
                    );
                }
            }
            out
        };
        let default_receivers = match &self.default_receivers {
            None => names.clone(),
            Some(list) => known(c, "notify.default_receivers", list),
        };
        let mut routes = Vec::new();
        for r in self.route {
            let span = r.span();
            let r = r.into_inner();
            if r.receivers.is_empty() {
                c.error(
                    span.clone(),
                    "a `[[notify.route]]` has no `receivers`".into(),
                    "add receivers = [\"name\", ...]",
                );
            }
            let receivers = known(c, "notify.route.receivers", &r.receivers);
            let mut matchers = Vec::new();
            for m in &r.matchers {
                match Matcher::parse(m.get_ref()) {
                    Ok(x) => matchers.push(x),
                    Err(e) => c.error(
                        m.span(),
                        format!("`notify.route.match`: {e}"),
                        "write label=value, label!=value, label=~regex or label!~regex",
                    ),
                }
            }
            let group_by = r.group_by.as_ref().map_or(group_by.clone(), |g| {
                label_list(c, "notify.route.group_by", g)
            });
            let route_timing = GroupTiming {
                group_wait: c.duration(
                    "notify.route.group_wait",
                    &r.group_wait,
                    timing.group_wait,
                    s(0),
                    s(86_400),
                ),
                group_interval: c.duration(
                    "notify.route.group_interval",
                    &r.group_interval,
                    timing.group_interval,
                    s(0),
                    s(86_400),
                ),
                repeat_interval: c.duration(
                    "notify.route.repeat_interval",
                    &r.repeat_interval,
                    timing.repeat_interval,
                    s(1),
                    s(30 * 86_400),
                ),
            };
            routes.push(RouteConfig {
                matchers,
                receivers,
                group_by,
                timing: route_timing,
                continue_: r.continue_.unwrap_or(false),
            });
        }
        NotifyConfig {
            receivers: receivers.into_iter().map(|(_, r)| r).collect(),
            routes,
            default_receivers,
            group_by,
            timing,
            backlog_alert_after,
            retry_max_backoff,
        }
    }
}

fn label_list(c: &mut Checker<'_>, key: &str, list: &[Spanned<String>]) -> Vec<String> {
    let mut out = Vec::new();
    for l in list {
        let v = l.get_ref().trim();
        let ok = v == "..."
            || (!v.is_empty()
                && v.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
                && !v.starts_with(|ch: char| ch.is_ascii_digit()));
        if ok {
            out.push(v.to_string());
        } else {
            c.error(
                l.span(),
                format!("`{key}` has {v:?}, which is not a label name"),
                "use label names such as \"rule\", \"host\", \"gpu\", \"severity\", or \"...\" for every label",
            );
        }
    }
    out
}

/// `localhost` or a loopback IP literal.
pub fn is_loopback_host(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .trim_matches(|c| c == '[' || c == ']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}
