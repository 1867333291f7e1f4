//! [`FetchError`]: every way a fetch of training metrics can fail, classified.
//!
//! Invariants:
//! - No message contains a secret, a URL's credentials or its query string: messages are
//!   built from the base URL (which config forbids to carry credentials), status codes and
//!   Prometheus's own `error` text, with every known secret value scrubbed (see
//!   [`super::client`]), never from reqwest's `Display` (which prints the full URL).
//! - An empty result is not an error: it is `Ok` with no series.
//! - [`FetchError::kind`] is a stable short name, stored in `training_source.last_error_kind`.

use std::time::Duration;

/// Why a query could not be answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// Nothing answered: connection refused, DNS failure, reset before an answer.
    #[error("cannot reach Prometheus at {url}: {reason}")]
    Unreachable { url: String, reason: String },
    /// The request (connect, send, answer, body) took longer than the configured timeout.
    #[error("Prometheus at {url} did not answer within {}", humantime::format_duration(*.timeout))]
    Timeout { url: String, timeout: Duration },
    /// HTTP status outside 2xx. `error_type`/`error` come from Prometheus's JSON when the body
    /// had it; `detail` is a short, scrubbed excerpt of a body that did not.
    #[error(
        "Prometheus answered HTTP {status}{}{}",
        error_type.as_deref().map(|t| format!(" ({t})")).unwrap_or_default(),
        error.as_deref().or(detail.as_deref()).map(|e| format!(": {e}")).unwrap_or_default()
    )]
    Http {
        status: u16,
        error_type: Option<String>,
        error: Option<String>,
        detail: Option<String>,
    },
    /// A 2xx answer whose body is not Prometheus's JSON envelope (a proxy's HTML page, ...).
    #[error("Prometheus answered with a body that is not its JSON API ({detail})")]
    NotJson { detail: String },
    /// HTTP 2xx with `"status": "error"`.
    #[error("Prometheus reported a query error ({error_type}): {error}")]
    QueryFailed { error_type: String, error: String },
    /// The query evaluated to a scalar, string or instant vector instead of a matrix.
    #[error("the query returned a {got} result, not a matrix (use a range query over series)")]
    WrongResultType { got: String },
    /// JSON of the right shape with unreadable contents (a value that is not a number).
    #[error("Prometheus's answer is malformed: {detail}")]
    Malformed { detail: String },
    /// The body exceeded the size limit (a query matching far too many series).
    #[error("Prometheus's answer is larger than {limit} bytes; narrow the query")]
    TooLarge { limit: usize },
    /// A secret could not be read. Names the source, never the content.
    #[error("cannot read the {what} from {source_desc}: {reason}")]
    Secret {
        what: &'static str,
        source_desc: String,
        reason: String,
    },
    /// The HTTP client could not be built (CA file, TLS setup).
    #[error("cannot set up the Prometheus client: {0}")]
    Setup(String),
}

impl FetchError {
    /// A stable short name for the class of failure.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Unreachable { .. } => "unreachable",
            Self::Timeout { .. } => "timeout",
            Self::Http { status, .. } if *status >= 500 => "http_5xx",
            Self::Http { status, .. } if *status >= 400 => "http_4xx",
            Self::Http { .. } => "http_other",
            Self::NotJson { .. } => "not_json",
            Self::QueryFailed { .. } => "query_error",
            Self::WrongResultType { .. } => "wrong_result_type",
            Self::Malformed { .. } => "malformed",
            Self::TooLarge { .. } => "too_large",
            Self::Secret { .. } => "secret",
            Self::Setup(_) => "setup",
        }
    }

    /// True for failures of Prometheus or the path to it (as opposed to a bad query or a
    /// local problem): the ones that mean "the source is down".
    pub fn is_outage(&self) -> bool {
        matches!(
            self,
            Self::Unreachable { .. } | Self::Timeout { .. } | Self::NotJson { .. }
        ) || matches!(self, Self::Http { status, .. } if *status >= 500)
    }

    /// Replaces every occurrence of each secret in the error's texts by `***`.
    pub(crate) fn scrub(self, secrets: &[&str]) -> Self {
        let s = |t: String| scrub_text(t, secrets);
        let o = |t: Option<String>| t.map(|t| scrub_text(t, secrets));
        match self {
            Self::Unreachable { url, reason } => Self::Unreachable {
                url: s(url),
                reason: s(reason),
            },
            Self::Http {
                status,
                error_type,
                error,
                detail,
            } => Self::Http {
                status,
                error_type: o(error_type),
                error: o(error),
                detail: o(detail),
            },
            Self::NotJson { detail } => Self::NotJson { detail: s(detail) },
            Self::QueryFailed { error_type, error } => Self::QueryFailed {
                error_type: s(error_type),
                error: s(error),
            },
            Self::WrongResultType { got } => Self::WrongResultType { got: s(got) },
            Self::Malformed { detail } => Self::Malformed { detail: s(detail) },
            Self::Setup(m) => Self::Setup(s(m)),
            other @ (Self::Timeout { .. } | Self::TooLarge { .. } | Self::Secret { .. }) => other,
        }
    }
}

fn scrub_text(mut text: String, secrets: &[&str]) -> String {
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        if text.contains(secret) {
            text = text.replace(secret, "***");
        }
    }
    text
}

/// A short, printable excerpt of a body for error messages (control characters dropped).
pub(crate) fn excerpt(body: &[u8], max_chars: usize) -> String {
    let text = String::from_utf8_lossy(body);
    let mut out: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(max_chars)
        .collect();
    out = out.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.chars().count() > max_chars {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_error_display_uses_prometheus_fields() {
        let e = FetchError::Http {
            status: 503,
            error_type: Some("unavailable".into()),
            error: Some("TSDB not ready".into()),
            detail: None,
        };
        assert_eq!(
            e.to_string(),
            "Prometheus answered HTTP 503 (unavailable): TSDB not ready"
        );
        assert_eq!(e.kind(), "http_5xx");
        assert!(e.is_outage());
    }

    #[test]
    fn scrub_replaces_secrets_everywhere() {
        let e = FetchError::Http {
            status: 401,
            error_type: None,
            error: None,
            detail: Some("bad token s3cr3t (s3cr3t)".into()),
        }
        .scrub(&["s3cr3t", ""]);
        assert_eq!(
            e.to_string(),
            "Prometheus answered HTTP 401: bad token *** (***)"
        );
        assert!(!format!("{e:?}").contains("s3cr3t"));
    }

    #[test]
    fn excerpt_is_short_and_single_line() {
        assert_eq!(
            excerpt(b"<html>\n  <b>502</b>\n</html>", 15),
            "<html> <b>502…"
        );
        assert_eq!(excerpt(b"ok", 10), "ok");
    }
}
