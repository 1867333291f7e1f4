//! `[[remote_write]]`: where the daemon pushes its `/metrics` series (Prometheus
//! remote-write 1.0) for fleets that do not scrape — Prometheus with
//! `--web.enable-remote-write-receiver`, Mimir, Thanos Receive, VictoriaMetrics.
//!
//! Invariants: secrets only from env or files (a bearer token or basic auth, as
//! `[prometheus]`); the URL carries no credentials; names are unique (they key the queue);
//! the external labels are valid label names and include `job` and `instance` (defaults:
//! `gpuwatch` and the host name), so dashboards that select by them work as with a scrape.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::PrometheusAuth;
use super::prometheus::{AuthKeys, auth, ca_file};
use super::raw::Checker;

/// One validated `[[remote_write]]` target.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteWriteConfig {
    /// Names the target in logs, `status` and self-metrics (default `remote_write_N`).
    pub name: String,
    /// The receiver's write URL, e.g. `http://prometheus:9090/api/v1/write`.
    pub url: String,
    /// How often a snapshot of the series is queued.
    pub interval: Duration,
    /// Deadline of one request.
    pub timeout: Duration,
    pub auth: PrometheusAuth,
    /// Extra CA certificate(s) (PEM) trusted for an `https` URL.
    pub ca_file: Option<PathBuf>,
    /// The most queued bytes (snappy-compressed requests) kept through an outage; the oldest
    /// go first when it is full.
    pub max_queue_bytes: u64,
    /// Labels added to every series, sorted by name (`job` and `instance` included).
    pub labels: Vec<(String, String)>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRemoteWrite {
    name: Option<Spanned<String>>,
    url: Option<Spanned<String>>,
    interval: Option<Spanned<String>>,
    timeout: Option<Spanned<String>>,
    token_env: Option<Spanned<String>>,
    token_file: Option<Spanned<String>>,
    username: Option<Spanned<String>>,
    password_env: Option<Spanned<String>>,
    password_file: Option<Spanned<String>>,
    ca_file: Option<Spanned<String>>,
    max_queue: Option<Spanned<String>>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

fn valid_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with("__")
}

impl RawRemoteWrite {
    pub(super) fn compile(
        self,
        c: &mut Checker<'_>,
        section: std::ops::Range<usize>,
        index: usize,
        interval: Duration,
        host: &str,
    ) -> Option<RemoteWriteConfig> {
        let before = c.errors.len();
        let s = Duration::from_secs;
        let name = match &self.name {
            Some(n) if n.get_ref().trim().is_empty() => {
                c.error(
                    n.span(),
                    "`remote_write.name` is empty".into(),
                    "name the target, or remove the key",
                );
                String::new()
            }
            Some(n) => n.get_ref().trim().to_string(),
            None => format!("remote_write_{}", index + 1),
        };
        let url = match &self.url {
            None => {
                c.error(
                    section.clone(),
                    "a `[[remote_write]]` has no `url`".into(),
                    "add url = \"http://prometheus:9090/api/v1/write\" (Prometheus needs --web.enable-remote-write-receiver)",
                );
                String::new()
            }
            Some(u) => check_url(c, u),
        };
        let interval = c.duration(
            "remote_write.interval",
            &self.interval,
            s(15).max(interval),
            interval,
            s(600),
        );
        let timeout = c.duration(
            "remote_write.timeout",
            &self.timeout,
            s(10),
            Duration::from_millis(100),
            s(300),
        );
        let auth = auth(
            c,
            "remote_write",
            AuthKeys {
                token_env: &self.token_env,
                token_file: &self.token_file,
                username: &self.username,
                password_env: &self.password_env,
                password_file: &self.password_file,
            },
        );
        let ca_file = ca_file(c, "remote_write.ca_file", &self.ca_file);
        let max_queue_bytes = match &self.max_queue {
            None => 64 * 1024 * 1024,
            Some(v) => match v.get_ref().trim().parse::<bytesize::ByteSize>() {
                Ok(b) if b.0 >= 64 * 1024 => b.0,
                Ok(_) => {
                    c.error(
                        v.span(),
                        "`remote_write.max_queue` is below 64 KiB".into(),
                        "keep room for a few requests, e.g. \"64MiB\"",
                    );
                    0
                }
                Err(e) => {
                    c.error(
                        v.span(),
                        format!("`remote_write.max_queue` is not a size: {e}"),
                        "write e.g. \"64MiB\"",
                    );
                    0
                }
            },
        };
        let mut labels: BTreeMap<String, String> = BTreeMap::new();
        labels.insert("job".into(), "gpuwatch".into());
        labels.insert("instance".into(), host.to_string());
        for (k, v) in self.labels {
            if !valid_label_name(&k) {
                c.error(
                    section.clone(),
                    format!("`remote_write.labels` has {k:?}, which is not a label name"),
                    "use letters, digits and _ (not starting with a digit or __)",
                );
            }
            labels.insert(k, v);
        }
        (c.errors.len() == before).then(|| RemoteWriteConfig {
            name,
            url,
            interval,
            timeout,
            auth,
            ca_file,
            max_queue_bytes,
            labels: labels.into_iter().collect(),
        })
    }
}

fn check_url(c: &mut Checker<'_>, u: &Spanned<String>) -> String {
    let text = u.get_ref().trim();
    match reqwest::Url::parse(text) {
        Err(e) => c.error(
            u.span(),
            format!("`remote_write.url` is not a URL: {e}"),
            "write e.g. \"http://prometheus:9090/api/v1/write\"",
        ),
        Ok(p) if !matches!(p.scheme(), "http" | "https") => c.error(
            u.span(),
            "`remote_write.url` must be http or https".into(),
            "write http://... or https://...",
        ),
        Ok(p) if !p.username().is_empty() || p.password().is_some() => c.error(
            u.span(),
            "`remote_write.url` contains credentials, which would end up in logs".into(),
            "remove them and use token_env / token_file or username with password_env / password_file",
        ),
        Ok(_) => {}
    }
    text.to_string()
}

/// Checks that target names are unique (they key the queue and the self-metrics).
pub(super) fn check_names(
    c: &mut Checker<'_>,
    targets: &[(std::ops::Range<usize>, RemoteWriteConfig)],
) {
    for (i, (span, t)) in targets.iter().enumerate() {
        if targets[..i].iter().any(|(_, o)| o.name == t.name) {
            c.error(
                span.clone(),
                format!("two `[[remote_write]]` targets are named {:?}", t.name),
                "give each a distinct name",
            );
        }
    }
}
