//! The generic webhook receiver: POSTs a versioned JSON document ([`payload`], schema
//! version `"1"`, modelled on Alertmanager's webhook payload; docs/WEBHOOK.md is the
//! reference for consumers) to a URL, one delivery attempt per [`WebhookReceiver::send`].
//!
//! Schema v1 (`Content-Type: application/json`):
//! `{"version":"1", "receiver", "status":"firing"|"resolved", "group_key", "group_labels",
//! "sender_host", "repeat", "test", "alerts":[{"id", "status", "rule", "severity", "labels",
//! "summary", "description", "host", "gpu", "uuid", "model", "pid", "process", "user",
//! "starts_at", "ends_at", "starts_ms", "ends_ms", "story"}]}` — `*_at` are RFC 3339 UTC,
//! `*_ms` Unix milliseconds, `ends_*` null while firing, absent values null.
//!
//! Signature: with `hmac_secret_env`/`hmac_secret_file`, each request carries
//! `X-Gpuwatch-Timestamp: <unix seconds>` and `X-Gpuwatch-Signature: sha256=<hex>`, the
//! HMAC-SHA256 under the key of the bytes `<timestamp>.<body>` (the timestamp lets the
//! consumer refuse replays).
//!
//! Invariants:
//! - Secrets (a URL given by `url_env`/`url_file`, the HMAC key) are read at every send (a
//!   rotated file works; a failed read is transient) and never appear in errors or logs;
//!   transport errors never carry the URL (plain ones either: one code path for both).
//! - Classification is [`http::classify`]: 2xx delivered; 429 (with `Retry-After`), 408,
//!   5xx, timeouts and connection failures transient; other statuses permanent.

pub mod payload;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::config::{ReceiverConfig, SecretSource, UrlSource, WebhookConfig};
use crate::notify::{BuildCtx, Notification, SendError, http};
use crate::secret;

/// The signature header (`sha256=<hex>`).
pub const SIGNATURE_HEADER: &str = "X-Gpuwatch-Signature";
/// The header with the Unix seconds the signature covers.
pub const TIMESTAMP_HEADER: &str = "X-Gpuwatch-Timestamp";

#[derive(Debug)]
pub struct WebhookReceiver {
    name: String,
    /// How errors name this receiver: `webhook "ops"`.
    what: String,
    url: UrlSource,
    hmac_secret: Option<SecretSource>,
    client: reqwest::Client,
}

impl WebhookReceiver {
    /// Builds the HTTP client (with the receiver's timeout); secrets are read at each send.
    pub fn new(cfg: &ReceiverConfig, c: &WebhookConfig, _ctx: &BuildCtx) -> Result<Self, String> {
        let what = format!("webhook {:?}", cfg.name);
        Ok(Self {
            name: cfg.name.clone(),
            client: http::client(cfg.timeout).map_err(|e| format!("{what}: {e}"))?,
            what,
            url: c.url.clone(),
            hmac_secret: c.hmac_secret.clone(),
        })
    }

    /// One delivery attempt.
    pub async fn send(&self, n: &Notification) -> Result<(), SendError> {
        let what = &self.what;
        // A digest posts its own document (`kind: usage_digest`), not an alert payload.
        let body = match &n.digest {
            Some(d) => serde_json::to_vec(d),
            None => serde_json::to_vec(&payload::payload(n)),
        }
        .map_err(|e| SendError::Permanent(format!("{what}: cannot encode the payload: {e}")))?;
        let url = match &self.url {
            UrlSource::Plain(u) => u.clone(),
            UrlSource::Secret(s) => secret::read("webhook URL", s)
                .map_err(|e| SendError::transient(secret::scrub(&format!("{what}: {e}"))))?
                .expose()
                .to_string(),
        };
        let url = http::parse_url(&url)
            .map_err(|e| SendError::Permanent(secret::scrub(&format!("{what}: the URL {e}"))))?;
        let mut request = self
            .client
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json");
        if let Some(source) = &self.hmac_secret {
            let key = secret::read("webhook HMAC secret", source)
                .map_err(|e| SendError::transient(secret::scrub(&format!("{what}: {e}"))))?;
            let timestamp = chrono::Utc::now().timestamp();
            let signature = sign(key.expose().as_bytes(), timestamp, &body)
                .map_err(|e| SendError::Permanent(format!("{what}: {e}")))?;
            request = request
                .header(TIMESTAMP_HEADER, timestamp.to_string())
                .header(SIGNATURE_HEADER, signature);
        }
        let result = match http::send(what, request.body(body)).await {
            Ok(reply) => http::classify(what, &reply),
            Err(e) => Err(e),
        };
        match &result {
            Ok(()) => {
                tracing::debug!(receiver = %self.name, alerts = n.alerts.len(), "webhook: delivered")
            }
            Err(e) => tracing::debug!(receiver = %self.name, error = %e, "webhook: attempt failed"),
        }
        result
    }
}

/// `sha256=<hex>`: HMAC-SHA256 under `key` of `<timestamp>.<body>`.
pub fn sign(key: &[u8], timestamp: i64, body: &[u8]) -> Result<String, String> {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(key).map_err(|e| format!("cannot use the HMAC key: {e}"))?;
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    Ok(format!(
        "sha256={}",
        hex::encode(mac.finalize().into_bytes())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_matches_a_known_vector() {
        // python3 -c 'import hmac,hashlib;print(hmac.new(b"key",b"1700000000.{}",hashlib.sha256).hexdigest())'
        assert_eq!(
            sign(b"key", 1_700_000_000, b"{}").unwrap(),
            "sha256=9d713ed406bb7076d4123f0dc2c39d2df5c654ed4b0cd56b52c8b4c940bd63ae"
        );
    }
}
