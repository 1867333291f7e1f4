//! HTTP plumbing shared by the HTTP receivers (Slack, webhook): the client, one request's
//! answer read off the wire, and the classification of answers and transport failures into
//! [`SendError`].
//!
//! Invariants:
//! - No text made here contains a URL: reqwest errors are stripped with
//!   [`reqwest::Error::without_url`], URL parse errors never quote the URL, redirects are not
//!   followed (a `Location` is never read), and every text finally goes through
//!   [`secret::scrub`] (for Slack the URL itself is the secret).
//! - Bodies are read up to [`MAX_BODY_BYTES`]; errors quote at most [`EXCERPT_CHARS`] of them.
//! - Classification: 2xx is delivered; 429 is transient with the server's `Retry-After`
//!   (seconds or an HTTP date); 408 and 5xx are transient (with `Retry-After` when given);
//!   timeouts and connection failures are transient; every other status (other 4xx, and 1xx
//!   or 3xx since redirects are refused) is permanent, with a short excerpt of the body.

use std::time::{Duration, SystemTime};

use super::SendError;
use crate::secret;
pub use crate::text::error_chain;

/// How much of a body is kept (receivers' answers are short).
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// How much of a body an error message quotes.
pub const EXCERPT_CHARS: usize = 200;

/// A client of the outbound policy ([`crate::outbound`]: every request, connection included,
/// ends within `timeout`; redirects are not followed — a webhook URL answering 3xx is a
/// configuration problem, and following it could carry a secret path elsewhere).
pub fn client(timeout: Duration) -> Result<reqwest::Client, String> {
    crate::outbound::builder(timeout)
        .build()
        .map_err(|e| secret::scrub(&format!("HTTP client: {}", error_chain(&e.without_url()))))
}

/// Parses an http(s) URL; the error never quotes it.
pub fn parse_url(text: &str) -> Result<reqwest::Url, String> {
    match reqwest::Url::parse(text.trim()) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => Ok(u),
        Ok(_) => Err("is not an http or https URL".into()),
        Err(e) => Err(format!("is not a valid URL ({e})")),
    }
}

/// One answer: its status, `Retry-After`, and the start of its body (scrubbed).
#[derive(Debug, Clone, PartialEq)]
pub struct HttpReply {
    pub status: u16,
    pub retry_after: Option<Duration>,
    /// The first [`MAX_BODY_BYTES`] of the body as (lossy) UTF-8, scrubbed of known secrets.
    pub body: String,
}

impl HttpReply {
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// `404 Not Found`.
    pub fn status_text(&self) -> String {
        status_text(self.status)
    }

    /// A short single-line excerpt of the body for error messages.
    pub fn excerpt(&self) -> String {
        excerpt(&self.body)
    }
}

/// Sends `request` and reads the answer. `what` names the receiver in errors ("Slack",
/// `webhook "ops"`). Transport failures come back classified; HTTP statuses do not (see
/// [`classify`]).
pub async fn send(what: &str, request: reqwest::RequestBuilder) -> Result<HttpReply, SendError> {
    let mut resp = request.send().await.map_err(|e| transport_error(what, e))?;
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| parse_retry_after(v, SystemTime::now()));
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| transport_error(what, e))? {
        let room = MAX_BODY_BYTES - body.len();
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() >= MAX_BODY_BYTES {
            break;
        }
    }
    Ok(HttpReply {
        status,
        retry_after,
        body: secret::scrub(&String::from_utf8_lossy(&body)),
    })
}

/// The generic verdict on an answer (see the module doc).
pub fn classify(what: &str, reply: &HttpReply) -> Result<(), SendError> {
    let status = reply.status;
    let text = |detail: String| secret::scrub(&format!("{what}: {detail}"));
    match status {
        200..=299 => Ok(()),
        429 => Err(SendError::Transient {
            message: text(format!(
                "rate limited (HTTP {}{}): {}",
                reply.status_text(),
                retry_note(reply.retry_after),
                reply.excerpt()
            )),
            retry_after: reply.retry_after,
        }),
        408 | 500..=599 => Err(SendError::Transient {
            message: text(format!(
                "HTTP {}{}: {}",
                reply.status_text(),
                retry_note(reply.retry_after),
                reply.excerpt()
            )),
            retry_after: reply.retry_after,
        }),
        400..=499 => Err(SendError::Permanent(text(format!(
            "refused with HTTP {}: {}",
            reply.status_text(),
            reply.excerpt()
        )))),
        _ => Err(SendError::Permanent(text(format!(
            "unexpected HTTP {} (redirects are not followed: check the URL)",
            reply.status_text()
        )))),
    }
}

/// A failure to get an answer at all: always transient (the server or the network may
/// recover), except a request that cannot even be built.
pub fn transport_error(what: &str, e: reqwest::Error) -> SendError {
    let e = e.without_url();
    let chain = error_chain(&e);
    let message = if e.is_timeout() {
        format!("{what}: no answer in time (request timed out): {chain}")
    } else if e.is_connect() {
        format!("{what}: cannot connect: {chain}")
    } else if e.is_builder() {
        return SendError::Permanent(secret::scrub(&format!(
            "{what}: cannot build the request: {chain}"
        )));
    } else {
        format!("{what}: request failed: {chain}")
    };
    SendError::transient(secret::scrub(&message))
}

/// `Retry-After`: delay-seconds or an HTTP date (a date in the past means now).
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let at = SystemTime::from(at.with_timezone(&chrono::Utc));
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// `body` on one line, control characters dropped, at most [`EXCERPT_CHARS`] characters,
/// scrubbed; `(empty body)` when there is nothing.
pub fn excerpt(body: &str) -> String {
    let one_line: String = body
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .filter(|c| !c.is_control())
        .collect();
    if one_line.is_empty() {
        return "(empty body)".into();
    }
    let mut out: String = one_line.chars().take(EXCERPT_CHARS).collect();
    if one_line.chars().count() > EXCERPT_CHARS {
        out.push('…');
    }
    secret::scrub(&out)
}

/// `404 Not Found` (the number alone for unknown codes).
pub fn status_text(status: u16) -> String {
    match reqwest::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
    {
        Some(reason) => format!("{status} {reason}"),
        None => status.to_string(),
    }
}

fn retry_note(retry_after: Option<Duration>) -> String {
    retry_after
        .map(|d| format!(", retry after {}s", d.as_secs_f64().ceil()))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(status: u16, body: &str, retry: Option<u64>) -> HttpReply {
        HttpReply {
            status,
            retry_after: retry.map(Duration::from_secs),
            body: body.into(),
        }
    }

    #[test]
    fn retry_after_seconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(parse_retry_after(" 7 ", now), Some(Duration::from_secs(7)));
        assert_eq!(
            parse_retry_after("1.5", now),
            Some(Duration::from_millis(1500))
        );
        // 1_700_000_030 = Tue, 14 Nov 2023 22:13:50 GMT
        assert_eq!(
            parse_retry_after("Tue, 14 Nov 2023 22:13:50 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Tue, 14 Nov 2023 22:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-3", now), None);
    }

    #[test]
    fn statuses_are_classified() {
        assert_eq!(classify("x", &reply(204, "", None)), Ok(()));
        match classify("x", &reply(429, "slow down", Some(3))) {
            Err(SendError::Transient {
                retry_after,
                message,
            }) => {
                assert_eq!(retry_after, Some(Duration::from_secs(3)));
                assert!(
                    message.contains("429") && message.contains("3s"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
        for s in [408, 500, 502, 503, 504] {
            assert!(matches!(
                classify("x", &reply(s, "", None)),
                Err(SendError::Transient { .. })
            ));
        }
        for s in [400, 401, 403, 404, 410, 422] {
            let e = classify("hook", &reply(s, "bad thing\nhappened", None)).unwrap_err();
            assert!(matches!(e, SendError::Permanent(_)), "{s}");
            assert!(e.message().contains("bad thing happened"), "{e}");
            assert!(e.message().starts_with("hook: "), "{e}");
        }
        assert!(matches!(
            classify("x", &reply(302, "", None)),
            Err(SendError::Permanent(_))
        ));
    }

    #[test]
    fn excerpts_are_short_and_single_line() {
        assert_eq!(excerpt(""), "(empty body)");
        assert_eq!(excerpt("  channel_not_found \n"), "channel_not_found");
        let long = "é".repeat(1000);
        let e = excerpt(&long);
        assert_eq!(e.chars().count(), EXCERPT_CHARS + 1);
        assert!(e.ends_with('…'));
    }

    #[test]
    fn url_errors_do_not_quote_the_url() {
        let e = parse_url("hxxps//hooks/services/T1/B2/topsecret").unwrap_err();
        assert!(!e.contains("topsecret"), "{e}");
        let e = parse_url("ftp://hooks/services/T1/B2/topsecret").unwrap_err();
        assert!(!e.contains("topsecret"), "{e}");
        assert!(parse_url("https://hooks.slack.com/services/T/B/x").is_ok());
    }
}
