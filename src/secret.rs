//! Secrets of receivers (Slack webhook URLs, SMTP passwords, webhook URLs and HMAC keys,
//! Alertmanager tokens), read from the environment or a file at send time (rotated files
//! work).
//!
//! Invariant: every value read here is remembered, and [`scrub`] replaces each of them (and
//! the path and query of every URL secret) in any text before it is logged, stored in the
//! outbox or shown by `status` — a belt to the braces of errors that never print URLs.

use std::sync::Mutex;

use crate::config::SecretSource;

/// A secret value. `Debug` and `Display` never print it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// A value a caller read with its own error wording (the Prometheus client's, or a value
    /// derived from a secret, such as a basic-auth header): remembered for [`scrub`] like
    /// every value [`read`] returns.
    pub fn remembered(value: String) -> Secret {
        remember(&value);
        Secret(value)
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

static KNOWN: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn remember(value: &str) {
    let mut known = KNOWN.lock().unwrap_or_else(|p| p.into_inner());
    let before = known.len();
    let mut add = |v: &str| {
        if v.len() >= 4 && !known.iter().any(|k| k == v) {
            known.push(v.to_string());
        }
    };
    add(value);
    // A URL's path + query is what makes it secret (Slack: /services/T../B../XXXX).
    if let Some(after_scheme) = value.find("://").map(|i| &value[i + 3..])
        && let Some(slash) = after_scheme.find('/')
    {
        let tail = &after_scheme[slash..];
        if tail.len() > 1 {
            add(tail);
        }
    }
    // Longest first, so that a secret containing another is replaced whole.
    if known.len() > before {
        known.sort_by_key(|k| std::cmp::Reverse(k.len()));
    }
}

/// Reads a secret; `what` names it in errors ("Slack webhook URL"). Errors name the source
/// (variable or file) and never contain the value.
pub fn read(what: &str, source: &SecretSource) -> Result<Secret, String> {
    let (value, from) = match source {
        SecretSource::Env(var) => {
            let from = format!("environment variable {var}");
            match std::env::var(var) {
                Ok(v) => (v, from),
                Err(std::env::VarError::NotPresent) => {
                    return Err(format!("{what}: {from} is not set"));
                }
                Err(std::env::VarError::NotUnicode(_)) => {
                    return Err(format!("{what}: {from} is not valid UTF-8"));
                }
            }
        }
        SecretSource::File(path) => {
            let from = format!("file {}", path.display());
            match std::fs::read_to_string(path) {
                Ok(v) => (v, from),
                Err(e) => return Err(format!("{what}: cannot read {from}: {e}")),
            }
        }
    };
    let value = value.trim();
    if value.is_empty() {
        return Err(format!("{what}: {from} is empty"));
    }
    remember(value);
    Ok(Secret(value.to_string()))
}

/// Replaces every secret read so far in `text` with `[redacted]`.
pub fn scrub(text: &str) -> String {
    let known = KNOWN.lock().unwrap_or_else(|p| p.into_inner());
    let mut out = text.to_string();
    for k in known.iter() {
        if out.contains(k.as_str()) {
            out = out.replace(k.as_str(), "[redacted]");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrub_replaces_values_and_url_tails() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("url");
        std::fs::write(&f, "https://hooks.slack.test/services/T1/B2/sekritsekrit\n").unwrap();
        let s = read("Slack webhook URL", &SecretSource::File(f.clone())).unwrap();
        assert_eq!(
            s.expose(),
            "https://hooks.slack.test/services/T1/B2/sekritsekrit"
        );
        assert_eq!(format!("{s:?}"), "Secret(***)");
        let msg =
            scrub("error sending to https://hooks.slack.test/services/T1/B2/sekritsekrit: 500");
        assert!(!msg.contains("sekrit"), "{msg}");
        let msg = scrub("POST /services/T1/B2/sekritsekrit failed");
        assert!(!msg.contains("sekrit"), "{msg}");
        let e = read("x", &SecretSource::Env("GPUWATCH_TEST_SURELY_UNSET".into())).unwrap_err();
        assert!(e.contains("GPUWATCH_TEST_SURELY_UNSET is not set"), "{e}");
        std::fs::write(&f, "  \n").unwrap();
        assert!(
            read("x", &SecretSource::File(f))
                .unwrap_err()
                .contains("is empty")
        );
    }
}
