//! The Alertmanager receiver: posts gpuwatch alerts to `{url}/api/v2/alerts` of every member
//! of an Alertmanager cluster, and the `gpuwatch_heartbeat` alert (the Watchdog pattern).
//!
//! Alertmanager groups, de-duplicates, silences and routes by itself; gpuwatch is one of many
//! senders (one per node of the fleet) whose identical label sets merge into one alert there.
//! [`payload`] builds the alerts; [`crate::notify::http`] reads and classifies the answers
//! (2xx accepted; 429, 408, 5xx, timeouts and connection failures transient; the rest
//! permanent), which also keeps URLs and secrets out of every message.
//!
//! Invariants:
//! - [`AlertmanagerReceiver::send`] is one delivery attempt: it posts the same body to every
//!   configured URL at once (HA clusters expect all members to get every alert) and succeeds
//!   only if every member accepted it. Otherwise the error names each failing member by
//!   `host:port` (never a path or a token); it is permanent if any member refused the alert
//!   for good (retrying would not change that answer), else transient. Re-posting to members
//!   that already accepted is harmless: Alertmanager de-duplicates.
//! - Firing alerts end at `now + 4 × resend_every` (the sender re-posts them every
//!   `resend_every`), so Alertmanager resolves them by itself when gpuwatch dies. `now` is the
//!   later of the notification's time and the clock at the attempt, so that a retry after a
//!   long backoff never posts an end already past.
//! - Resolved alerts are always posted, whatever `send_resolved` says: for Alertmanager they
//!   are state, not a message (its own receivers decide whether to tell anyone).
//! - The bearer token is read at every attempt (rotated files work) and only ever travels in
//!   the `Authorization` header, which reqwest marks sensitive. Redirects are not followed.

pub mod payload;

use std::time::Duration;

use reqwest::Url;
use tokio::task::JoinSet;

use crate::config::{AlertmanagerConfig, ReceiverConfig, SecretSource};
use crate::model::TsMs;
use crate::notify::{BuildCtx, Notification, SendError, http};
use crate::secret;

/// One Alertmanager of the cluster.
#[derive(Debug, Clone)]
struct Member {
    /// `host:port`: how errors name it.
    name: String,
    /// `{url}/api/v2/alerts`.
    endpoint: Url,
}

pub struct AlertmanagerReceiver {
    name: String,
    members: Vec<Member>,
    client: reqwest::Client,
    resend_every: Duration,
    heartbeat: bool,
    bearer_token: Option<SecretSource>,
    /// This gpuwatch's host (when a notification does not say).
    host: String,
}

impl AlertmanagerReceiver {
    /// Checks the URLs and builds the HTTP client. Errors are setup problems.
    pub fn new(
        cfg: &ReceiverConfig,
        c: &AlertmanagerConfig,
        ctx: &BuildCtx,
    ) -> Result<Self, String> {
        if c.urls.is_empty() {
            return Err(format!("alertmanager receiver {:?} has no URLs", cfg.name));
        }
        let members = c
            .urls
            .iter()
            .map(|u| member(u).map_err(|e| format!("alertmanager receiver {:?}: {e}", cfg.name)))
            .collect::<Result<Vec<_>, _>>()?;
        let client = http::client(cfg.timeout)
            .map_err(|e| format!("alertmanager receiver {:?}: {e}", cfg.name))?;
        Ok(Self {
            name: cfg.name.clone(),
            members,
            client,
            resend_every: c.resend_every,
            heartbeat: c.heartbeat,
            bearer_token: c.bearer_token.clone(),
            host: ctx.host.clone(),
        })
    }

    /// The receiver's name in the config.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How often the sender must re-post active alerts (and the heartbeat).
    pub fn resend_every(&self) -> Duration {
        self.resend_every
    }

    /// Whether the sender should post [`Self::send_heartbeat`] every [`Self::resend_every`].
    pub fn heartbeat_enabled(&self) -> bool {
        self.heartbeat
    }

    /// One delivery attempt of every alert of `n` to every member.
    pub async fn send(&self, n: &Notification) -> Result<(), SendError> {
        if n.digest.is_some() {
            // Not an alert: the router never queues a digest for Alertmanager.
            return Err(SendError::Permanent(
                "a usage digest is not an alert: not sent to Alertmanager".into(),
            ));
        }
        if n.alerts.is_empty() {
            return Ok(());
        }
        let sender_host = if n.sender_host.is_empty() {
            self.host.as_str()
        } else {
            n.sender_host.as_str()
        };
        let now = effective_now(n.now_ms);
        let alerts: Vec<payload::PostableAlert> = n
            .alerts
            .iter()
            .map(|a| payload::alert(a, sender_host, now, self.resend_every))
            .collect();
        self.post(&alerts).await
    }

    /// Posts `gpuwatch_heartbeat` for `sender_host`: always firing, severity `none`, ending
    /// at `now + 4 × resend_every`. Pair it with a dead man's switch route in Alertmanager.
    pub async fn send_heartbeat(&self, sender_host: &str, now_ms: i64) -> Result<(), SendError> {
        let alert = payload::heartbeat(sender_host, effective_now(now_ms), self.resend_every);
        self.post(&[alert]).await
    }

    /// Posts `alerts` to every member concurrently and combines the outcomes.
    async fn post(&self, alerts: &[payload::PostableAlert]) -> Result<(), SendError> {
        let body = serde_json::to_vec(alerts)
            .map_err(|e| SendError::Permanent(format!("cannot encode the alerts: {e}")))?;
        let token = match &self.bearer_token {
            None => None,
            // A missing token holds the queue (transient) until someone puts it back.
            Some(src) => Some(
                secret::read("Alertmanager bearer token", src)
                    .map_err(|e| SendError::transient(secret::scrub(&e)))?,
            ),
        };
        let mut tasks = JoinSet::new();
        for (i, m) in self.members.iter().enumerate() {
            let mut request = self
                .client
                .post(m.endpoint.clone())
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.clone());
            if let Some(t) = &token {
                request = request.bearer_auth(t.expose());
            }
            let name = m.name.clone();
            tasks.spawn(async move { (i, post_one(&name, request).await) });
        }
        let mut results: Vec<(usize, Result<(), SendError>)> = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok(r) => results.push(r),
                Err(e) => {
                    return Err(SendError::transient(format!(
                        "an alertmanager post did not finish: {e}"
                    )));
                }
            }
        }
        results.sort_by_key(|(i, _)| *i);
        combine(results.into_iter().map(|(_, r)| r).collect())
    }
}

/// A base URL as a member: its endpoint and its `host:port`.
fn member(base: &str) -> Result<Member, String> {
    let base = base.trim().trim_end_matches('/');
    let endpoint = http::parse_url(&format!("{base}/api/v2/alerts"))
        .map_err(|e| format!("an Alertmanager URL {e}"))?;
    let host = endpoint
        .host_str()
        .ok_or_else(|| "an Alertmanager URL has no host".to_string())?;
    let name = match endpoint.port_or_known_default() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    };
    Ok(Member { name, endpoint })
}

/// The later of `now_ms` and the clock.
fn effective_now(now_ms: TsMs) -> TsMs {
    now_ms.max(chrono::Utc::now().timestamp_millis())
}

/// One POST to one member; errors start with `alertmanager host:port`.
async fn post_one(member: &str, request: reqwest::RequestBuilder) -> Result<(), SendError> {
    let what = format!("alertmanager {member}");
    let reply = http::send(&what, request).await?;
    http::classify(&what, &reply)
}

/// Every member's outcome (in config order) as the attempt's.
fn combine(results: Vec<Result<(), SendError>>) -> Result<(), SendError> {
    let total = results.len();
    let mut permanent = false;
    let mut retry_after: Option<Duration> = None;
    let mut messages = Vec::new();
    for r in &results {
        match r {
            Ok(()) => {}
            Err(SendError::Permanent(m)) => {
                permanent = true;
                messages.push(m.clone());
            }
            Err(SendError::Transient {
                message,
                retry_after: ra,
            }) => {
                retry_after = retry_after.max(*ra);
                messages.push(message.clone());
            }
        }
    }
    if messages.is_empty() {
        return Ok(());
    }
    let accepted = total - messages.len();
    let mut message = messages.join("; ");
    if total > 1 {
        message.push_str(&format!(
            " ({accepted} of {total} members accepted the alerts)"
        ));
    }
    if permanent {
        Err(SendError::Permanent(message))
    } else {
        Err(SendError::Transient {
            message,
            retry_after,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_named_by_host_and_port() {
        let m = member("http://am-1.example:9093/").unwrap();
        assert_eq!(m.name, "am-1.example:9093");
        assert_eq!(
            m.endpoint.as_str(),
            "http://am-1.example:9093/api/v2/alerts"
        );
        let m = member("https://proxy.example/alertmanager/sekrit").unwrap();
        assert_eq!(m.name, "proxy.example:443");
        assert_eq!(
            m.endpoint.as_str(),
            "https://proxy.example/alertmanager/sekrit/api/v2/alerts"
        );
        assert_eq!(member("http://[::1]:9093").unwrap().name, "[::1]:9093");
        assert!(member("not a url").is_err());
    }

    #[test]
    fn combined_outcomes() {
        let t = |m: &str, s: u64| SendError::Transient {
            message: m.into(),
            retry_after: Some(Duration::from_secs(s)),
        };
        assert_eq!(combine(vec![Ok(()), Ok(())]), Ok(()));
        assert_eq!(
            combine(vec![Ok(()), Err(t("b down", 3)), Err(t("c down", 9))]),
            Err(t("b down; c down (1 of 3 members accepted the alerts)", 9))
        );
        assert_eq!(
            combine(vec![
                Err(t("a down", 1)),
                Err(SendError::Permanent("b: 400".into()))
            ]),
            Err(SendError::Permanent(
                "a down; b: 400 (0 of 2 members accepted the alerts)".into()
            ))
        );
        assert_eq!(combine(vec![Err(t("a", 1))]), Err(t("a", 1)));
    }
}
