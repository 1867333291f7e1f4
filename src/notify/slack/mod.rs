//! The Slack receiver: posts a notification to a Slack incoming webhook, one delivery
//! attempt per [`SlackReceiver::send`]. The message itself is built in [`blocks`].
//!
//! Invariants:
//! - The webhook URL is the secret (whoever has it can post): it is read through
//!   [`secret::read`] at every send (a rotated file works; a failed read is transient: the
//!   file may be being rewritten) and never appears in an error, a log line or `Debug`.
//! - At most one request per `min_interval` leaves a receiver: the instant the next one may
//!   leave is kept here, and `send` sleeps until then (a 429's `Retry-After` pushes it
//!   further, by at most [`MAX_RATE_LIMIT_WAIT`]). Concurrent sends of one receiver are
//!   serialised.
//! - Classification (Slack's answers): HTTP 200 with body `ok` is delivered; 429 is
//!   transient with `Retry-After`; 408, 5xx, timeouts and connection failures are transient;
//!   other 4xx (400 `invalid_payload`/`no_text`, 403 `action_prohibited`/`invalid_token`,
//!   404 `channel_not_found`/`no_service`, 410 `channel_is_archived`) are permanent and name
//!   Slack's error code; a 2xx with another body is permanent (not a Slack webhook).

pub mod blocks;

use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::config::{ReceiverConfig, SecretSource, SlackConfig};
use crate::notify::http::{self, HttpReply};
use crate::notify::{Notification, SendError};
use crate::secret;

/// How errors name this receiver kind.
const WHAT: &str = "Slack";

/// A 429's `Retry-After` delays this receiver's next request by at most this much (the
/// sender is told the full value with the error), so one `send` never sleeps for long.
pub const MAX_RATE_LIMIT_WAIT: Duration = Duration::from_secs(60);

#[derive(Debug)]
pub struct SlackReceiver {
    name: String,
    webhook_url: SecretSource,
    min_interval: Duration,
    client: reqwest::Client,
    /// When the next request may leave (none before the first).
    next_allowed: Mutex<Option<Instant>>,
}

impl SlackReceiver {
    /// Builds the HTTP client (with the receiver's timeout). The URL is read at each send.
    pub fn new(cfg: &ReceiverConfig, c: &SlackConfig) -> Result<Self, String> {
        Ok(Self {
            name: cfg.name.clone(),
            webhook_url: c.webhook_url.clone(),
            min_interval: c.min_interval,
            client: http::client(cfg.timeout)
                .map_err(|e| format!("Slack receiver {:?}: {e}", cfg.name))?,
            next_allowed: Mutex::new(None),
        })
    }

    /// One delivery attempt (after waiting out `min_interval` since the previous one).
    pub async fn send(&self, n: &Notification) -> Result<(), SendError> {
        let message = match &n.digest {
            Some(d) => super::digest::slack(d),
            None => blocks::payload(n),
        };
        let body = serde_json::to_vec(&message)
            .map_err(|e| SendError::Permanent(format!("{WHAT}: cannot encode the message: {e}")))?;
        let mut next_allowed = self.next_allowed.lock().await;
        if let Some(at) = *next_allowed
            && at > Instant::now()
        {
            tracing::debug!(
                receiver = %self.name,
                wait_ms = (at - Instant::now()).as_millis() as u64,
                "slack: waiting for min_interval before the next message"
            );
            tokio::time::sleep_until(at).await;
        }
        let url = secret::read("Slack webhook URL", &self.webhook_url)
            .map_err(|e| SendError::transient(secret::scrub(&format!("{WHAT}: {e}"))))?;
        let url = http::parse_url(url.expose()).map_err(|e| {
            SendError::Permanent(secret::scrub(&format!("{WHAT}: the webhook URL {e}")))
        })?;
        let request = self
            .client
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        let sent_at = Instant::now();
        let answer = http::send(WHAT, request).await;
        let mut next = sent_at + self.min_interval;
        if let Ok(HttpReply {
            status: 429,
            retry_after: Some(wait),
            ..
        }) = &answer
        {
            next = next.max(Instant::now() + (*wait).min(MAX_RATE_LIMIT_WAIT));
        }
        *next_allowed = Some(next);
        drop(next_allowed);
        let result = answer.and_then(|reply| classify(&reply));
        match &result {
            Ok(()) => tracing::debug!(
                receiver = %self.name,
                alerts = n.alerts.len(),
                "slack: message accepted"
            ),
            Err(e) => tracing::debug!(receiver = %self.name, error = %e, "slack: attempt failed"),
        }
        result
    }
}

/// Posts one plain-text message to an incoming webhook outside the outbox (the analysis
/// follow-up), with the receivers' client policy and Slack's verdict on the answer.
pub async fn post_text(
    webhook: &SecretSource,
    timeout: Duration,
    text: &str,
) -> Result<(), SendError> {
    let url = secret::read("Slack webhook URL", webhook)
        .map_err(|e| SendError::transient(secret::scrub(&format!("{WHAT}: {e}"))))?;
    let url = http::parse_url(url.expose()).map_err(|e| {
        SendError::Permanent(secret::scrub(&format!("{WHAT}: the webhook URL {e}")))
    })?;
    let client = http::client(timeout).map_err(SendError::Permanent)?;
    let body = serde_json::to_vec(&serde_json::json!({ "text": text }))
        .map_err(|e| SendError::Permanent(format!("{WHAT}: cannot encode the message: {e}")))?;
    let request = client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body);
    classify(&http::send(WHAT, request).await?)
}

/// Slack's verdict on one answer (see the module doc).
pub fn classify(reply: &HttpReply) -> Result<(), SendError> {
    let code = reply.excerpt();
    if reply.is_success() {
        return if reply.body.trim() == "ok" {
            Ok(())
        } else {
            Err(SendError::Permanent(secret::scrub(&format!(
                "{WHAT}: HTTP {} with {code:?} instead of \"ok\": is the URL a Slack incoming \
                 webhook?",
                reply.status_text()
            ))))
        };
    }
    match reply.status {
        400..=499 if reply.status != 408 && reply.status != 429 => {
            Err(SendError::Permanent(secret::scrub(&format!(
                "{WHAT} refused the message: {code} (HTTP {}){}",
                reply.status_text(),
                hint(reply.body.trim())
            ))))
        }
        _ => http::classify(WHAT, reply),
    }
}

/// What a permanent Slack error usually means.
fn hint(code: &str) -> &'static str {
    match code {
        "channel_not_found" => ": the webhook's channel was deleted, or the app left it",
        "channel_is_archived" => ": the webhook's channel is archived",
        "action_prohibited" => ": a workspace admin restricted posting to that channel",
        "invalid_token" | "no_service" | "no_team" | "team_disabled" => {
            ": the webhook was revoked or the URL is wrong"
        }
        "invalid_payload" | "no_text" | "invalid_blocks" | "too_many_attachments" => {
            ": Slack rejected the message format (a gpuwatch bug: please report it)"
        }
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(status: u16, body: &str) -> HttpReply {
        HttpReply {
            status,
            retry_after: None,
            body: body.into(),
        }
    }

    #[test]
    fn slack_answers_are_classified() {
        assert_eq!(classify(&reply(200, "ok")), Ok(()));
        assert!(matches!(
            classify(&reply(200, "<html>proxy</html>")),
            Err(SendError::Permanent(_))
        ));
        for (status, code) in [
            (400, "invalid_payload"),
            (400, "no_text"),
            (403, "action_prohibited"),
            (404, "channel_not_found"),
            (410, "channel_is_archived"),
        ] {
            match classify(&reply(status, code)) {
                Err(SendError::Permanent(m)) => {
                    assert!(m.contains(code) && m.contains(&status.to_string()), "{m}")
                }
                other => panic!("{status} {code}: {other:?}"),
            }
        }
        for status in [408, 429, 500, 503] {
            assert!(
                matches!(
                    classify(&reply(status, "x")),
                    Err(SendError::Transient { .. })
                ),
                "{status}"
            );
        }
    }
}
