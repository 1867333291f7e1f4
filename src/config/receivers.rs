//! The receivers of `[notify]` in raw form (`[[notify.slack]]`, `[[notify.email]]`,
//! `[[notify.webhook]]`, `[[notify.alertmanager]]`) and their checks: names, secrets only as
//! `*_env` / `*_file`, URLs without credentials, email addresses, and no plaintext SMTP
//! password to a non-loopback host unless allowed.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::notify::{
    AlertmanagerConfig, EmailConfig, ReceiverConfig, ReceiverKind, SlackConfig, SmtpTls, UrlSource,
    WebhookConfig, is_loopback_host,
};
use super::prometheus::secret;
use super::raw::Checker;

type Span = std::ops::Range<usize>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCommon {
    name: Option<Spanned<String>>,
    send_resolved: Option<bool>,
    timeout: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSlack {
    pub(super) name: Option<Spanned<String>>,
    send_resolved: Option<bool>,
    timeout: Option<Spanned<String>>,
    webhook_url: Option<Spanned<String>>,
    webhook_url_env: Option<Spanned<String>>,
    webhook_url_file: Option<Spanned<String>>,
    min_interval: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEmail {
    pub(super) name: Option<Spanned<String>>,
    send_resolved: Option<bool>,
    timeout: Option<Spanned<String>>,
    smtp_host: Option<Spanned<String>>,
    smtp_port: Option<Spanned<i64>>,
    tls: Option<Spanned<String>>,
    username: Option<Spanned<String>>,
    password: Option<Spanned<String>>,
    password_env: Option<Spanned<String>>,
    password_file: Option<Spanned<String>>,
    from: Option<Spanned<String>>,
    #[serde(default)]
    to: Vec<Spanned<String>>,
    ca_file: Option<PathBuf>,
    allow_insecure_auth: Option<bool>,
    chart: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWebhook {
    pub(super) name: Option<Spanned<String>>,
    send_resolved: Option<bool>,
    timeout: Option<Spanned<String>>,
    url: Option<Spanned<String>>,
    url_env: Option<Spanned<String>>,
    url_file: Option<Spanned<String>>,
    hmac_secret: Option<Spanned<String>>,
    hmac_secret_env: Option<Spanned<String>>,
    hmac_secret_file: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAlertmanager {
    pub(super) name: Option<Spanned<String>>,
    send_resolved: Option<bool>,
    timeout: Option<Spanned<String>>,
    #[serde(default)]
    urls: Vec<Spanned<String>>,
    resend_every: Option<Spanned<String>>,
    heartbeat: Option<bool>,
    bearer_token_env: Option<Spanned<String>>,
    bearer_token_file: Option<Spanned<String>>,
}

fn common(
    c: &mut Checker<'_>,
    kind: &str,
    section: Span,
    raw: RawCommon,
    default_timeout: Duration,
) -> (String, bool, Duration) {
    let name = match &raw.name {
        Some(n) if !n.get_ref().trim().is_empty() => n.get_ref().trim().to_string(),
        Some(n) => {
            c.error(
                n.span(),
                format!("`notify.{kind}.name` is empty"),
                "name the receiver, e.g. name = \"oncall\"",
            );
            String::new()
        }
        None => {
            c.error(
                section,
                format!("a `[[notify.{kind}]]` has no `name`"),
                "add name = \"...\" (routes and `notify test --receiver` use it)",
            );
            String::new()
        }
    };
    let timeout = c.duration(
        &format!("notify.{kind}.timeout"),
        &raw.timeout,
        default_timeout,
        Duration::from_millis(100),
        Duration::from_secs(600),
    );
    (name, raw.send_resolved.unwrap_or(true), timeout)
}

fn plain_secret_refused(c: &mut Checker<'_>, key: &str, v: &Option<Spanned<String>>) {
    if let Some(v) = v {
        c.error(
            v.span(),
            format!("`{key}` would put a secret in the config file"),
            &format!(
                "use {short}_env = \"VAR\" or {short}_file = \"PATH\" instead",
                short = key.rsplit('.').next().unwrap_or(key)
            ),
        );
    }
}

impl RawSlack {
    pub(super) fn compile(self, c: &mut Checker<'_>, section: Span) -> Option<ReceiverConfig> {
        let before = c.errors.len();
        let (name, send_resolved, timeout) = common(
            c,
            "slack",
            section.clone(),
            RawCommon {
                name: self.name,
                send_resolved: self.send_resolved,
                timeout: self.timeout,
            },
            Duration::from_secs(10),
        );
        plain_secret_refused(c, "notify.slack.webhook_url", &self.webhook_url);
        let url = secret(
            c,
            "notify.slack.webhook_url",
            &self.webhook_url_env,
            &self.webhook_url_file,
        );
        if url.is_none() && self.webhook_url.is_none() {
            c.error(
                section,
                "a `[[notify.slack]]` has no webhook URL".into(),
                "add webhook_url_env = \"VAR\" or webhook_url_file = \"PATH\"",
            );
        }
        let min_interval = c.duration(
            "notify.slack.min_interval",
            &self.min_interval,
            Duration::from_secs(1),
            Duration::ZERO,
            Duration::from_secs(3600),
        );
        let (_, webhook_url) = url?;
        (c.errors.len() == before).then_some(ReceiverConfig {
            name,
            send_resolved,
            timeout,
            kind: ReceiverKind::Slack(SlackConfig {
                webhook_url,
                min_interval,
            }),
        })
    }
}

impl RawEmail {
    pub(super) fn compile(self, c: &mut Checker<'_>, section: Span) -> Option<ReceiverConfig> {
        let before = c.errors.len();
        let (name, send_resolved, timeout) = common(
            c,
            "email",
            section.clone(),
            RawCommon {
                name: self.name,
                send_resolved: self.send_resolved,
                timeout: self.timeout,
            },
            Duration::from_secs(30),
        );
        let smtp_host = match &self.smtp_host {
            Some(h) if !h.get_ref().trim().is_empty() => h.get_ref().trim().to_string(),
            _ => {
                c.error(
                    self.smtp_host
                        .as_ref()
                        .map_or(section.clone(), |h| h.span()),
                    "`notify.email.smtp_host` is missing or empty".into(),
                    "add smtp_host = \"smtp.example.com\"",
                );
                String::new()
            }
        };
        let tls = match self.tls.as_ref().map(|t| (t.span(), t.get_ref().as_str())) {
            None | Some((_, "starttls")) => SmtpTls::StartTls,
            Some((_, "tls")) => SmtpTls::Tls,
            Some((_, "none")) => SmtpTls::None,
            Some((span, other)) => {
                c.error(
                    span,
                    format!("`notify.email.tls` = {other:?} is not starttls, tls or none"),
                    "use \"starttls\" (port 587, default), \"tls\" (port 465) or \"none\" (a local relay)",
                );
                SmtpTls::StartTls
            }
        };
        let smtp_port = match &self.smtp_port {
            None => match tls {
                SmtpTls::StartTls => 587,
                SmtpTls::Tls => 465,
                SmtpTls::None => 25,
            },
            Some(p) => u16::try_from(*p.get_ref())
                .ok()
                .filter(|p| *p > 0)
                .unwrap_or_else(|| {
                    c.error(
                        p.span(),
                        format!("`notify.email.smtp_port` = {} is not a port", p.get_ref()),
                        "use 1..65535 (587 for STARTTLS, 465 for TLS)",
                    );
                    0
                }),
        };
        plain_secret_refused(c, "notify.email.password", &self.password);
        let password = secret(
            c,
            "notify.email.password",
            &self.password_env,
            &self.password_file,
        )
        .map(|(_, s)| s);
        let username = self
            .username
            .as_ref()
            .map(|u| u.get_ref().trim().to_string());
        match (&username, &password) {
            (Some(_), None) => c.error(
                self.username.as_ref().map_or(0..0, |u| u.span()),
                "`notify.email.username` is set without a password".into(),
                "add password_env = \"VAR\" or password_file = \"PATH\"",
            ),
            (None, Some(_)) => c.error(
                section.clone(),
                "a password is set without `notify.email.username`".into(),
                "add username = \"...\"",
            ),
            _ => {}
        }
        let allow_insecure_auth = self.allow_insecure_auth.unwrap_or(false);
        if tls == SmtpTls::None
            && username.is_some()
            && !allow_insecure_auth
            && !is_loopback_host(&smtp_host)
        {
            c.error(
                self.tls.as_ref().map_or(section.clone(), |t| t.span()),
                format!(
                    "`notify.email` would send the SMTP password unencrypted to {smtp_host}"
                ),
                "use tls = \"starttls\" or \"tls\"; or set allow_insecure_auth = true if you accept that",
            );
        }
        let from =
            match &self.from {
                Some(f) if looks_like_address(f.get_ref()) => f.get_ref().trim().to_string(),
                Some(f) => {
                    c.error(
                    f.span(),
                    format!("`notify.email.from` = {:?} is not an email address", f.get_ref()),
                    "write e.g. \"gpuwatch@example.com\" or \"GPU watch <gpuwatch@example.com>\"",
                );
                    String::new()
                }
                None => {
                    c.error(
                        section.clone(),
                        "`notify.email.from` is missing".into(),
                        "add from = \"gpuwatch@example.com\"",
                    );
                    String::new()
                }
            };
        if self.to.is_empty() {
            c.error(
                section,
                "`notify.email.to` is missing or empty".into(),
                "add to = [\"oncall@example.com\"]",
            );
        }
        let mut to = Vec::new();
        for t in &self.to {
            if looks_like_address(t.get_ref()) {
                to.push(t.get_ref().trim().to_string());
            } else {
                c.error(
                    t.span(),
                    format!(
                        "`notify.email.to` has {:?}, not an email address",
                        t.get_ref()
                    ),
                    "write e.g. \"oncall@example.com\"",
                );
            }
        }
        (c.errors.len() == before).then_some(ReceiverConfig {
            name,
            send_resolved,
            timeout,
            kind: ReceiverKind::Email(EmailConfig {
                smtp_host,
                smtp_port,
                tls,
                username,
                password,
                from,
                to,
                ca_file: self.ca_file,
                allow_insecure_auth,
                chart: self.chart.unwrap_or(true),
            }),
        })
    }
}

impl RawWebhook {
    pub(super) fn compile(self, c: &mut Checker<'_>, section: Span) -> Option<ReceiverConfig> {
        let before = c.errors.len();
        let (name, send_resolved, timeout) = common(
            c,
            "webhook",
            section.clone(),
            RawCommon {
                name: self.name,
                send_resolved: self.send_resolved,
                timeout: self.timeout,
            },
            Duration::from_secs(10),
        );
        let secret_url = secret(c, "notify.webhook.url", &self.url_env, &self.url_file);
        let url = match (&self.url, secret_url) {
            (Some(u), None) => check_url(c, "notify.webhook.url", u).map(UrlSource::Plain),
            (None, Some((_, s))) => Some(UrlSource::Secret(s)),
            (Some(u), Some(_)) => {
                c.error(
                    u.span(),
                    "`notify.webhook.url` and `url_env`/`url_file` are both set".into(),
                    "keep one of them",
                );
                None
            }
            (None, None) => {
                c.error(
                    section,
                    "a `[[notify.webhook]]` has no URL".into(),
                    "add url = \"https://...\" (or url_env / url_file when it carries a token)",
                );
                None
            }
        };
        plain_secret_refused(c, "notify.webhook.hmac_secret", &self.hmac_secret);
        let hmac_secret = secret(
            c,
            "notify.webhook.hmac_secret",
            &self.hmac_secret_env,
            &self.hmac_secret_file,
        )
        .map(|(_, s)| s);
        let url = url?;
        (c.errors.len() == before).then_some(ReceiverConfig {
            name,
            send_resolved,
            timeout,
            kind: ReceiverKind::Webhook(WebhookConfig { url, hmac_secret }),
        })
    }
}

impl RawAlertmanager {
    pub(super) fn compile(self, c: &mut Checker<'_>, section: Span) -> Option<ReceiverConfig> {
        let before = c.errors.len();
        let (name, send_resolved, timeout) = common(
            c,
            "alertmanager",
            section.clone(),
            RawCommon {
                name: self.name,
                send_resolved: self.send_resolved,
                timeout: self.timeout,
            },
            Duration::from_secs(10),
        );
        if self.urls.is_empty() {
            c.error(
                section,
                "a `[[notify.alertmanager]]` has no `urls`".into(),
                "add urls = [\"http://alertmanager:9093\"] (every member of an HA cluster)",
            );
        }
        let urls: Vec<String> = self
            .urls
            .iter()
            .filter_map(|u| check_url(c, "notify.alertmanager.urls", u))
            .map(|u| u.trim_end_matches('/').to_string())
            .collect();
        let resend_every = c.duration(
            "notify.alertmanager.resend_every",
            &self.resend_every,
            Duration::from_secs(60),
            Duration::from_secs(1),
            Duration::from_secs(3600),
        );
        let bearer_token = secret(
            c,
            "notify.alertmanager.bearer_token",
            &self.bearer_token_env,
            &self.bearer_token_file,
        )
        .map(|(_, s)| s);
        (c.errors.len() == before).then_some(ReceiverConfig {
            name,
            send_resolved,
            timeout,
            kind: ReceiverKind::Alertmanager(AlertmanagerConfig {
                urls,
                resend_every,
                heartbeat: self.heartbeat.unwrap_or(false),
                bearer_token,
            }),
        })
    }
}

/// An http(s) URL without credentials (they would end up in logs).
fn check_url(c: &mut Checker<'_>, key: &str, u: &Spanned<String>) -> Option<String> {
    let text = u.get_ref().trim();
    match reqwest::Url::parse(text) {
        Err(e) => {
            c.error(
                u.span(),
                format!("`{key}` is not a URL: {e}"),
                "write e.g. \"https://hooks.example.com/gpuwatch\"",
            );
            None
        }
        Ok(p) if !matches!(p.scheme(), "http" | "https") => {
            c.error(
                u.span(),
                format!("`{key}` must be http or https"),
                "write http://... or https://...",
            );
            None
        }
        Ok(p) if !p.username().is_empty() || p.password().is_some() => {
            c.error(
                u.span(),
                format!("`{key}` contains credentials, which would end up in logs"),
                "remove them; put a URL with a token in url_env / url_file instead",
            );
            None
        }
        Ok(_) => Some(text.to_string()),
    }
}

fn looks_like_address(s: &str) -> bool {
    let s = s.trim();
    let addr = match (s.rfind('<'), s.ends_with('>')) {
        (Some(i), true) => &s[i + 1..s.len() - 1],
        _ => s,
    };
    match addr.split_once('@') {
        Some((local, domain)) => {
            !local.is_empty() && !domain.is_empty() && !addr.contains(char::is_whitespace)
        }
        None => false,
    }
}
