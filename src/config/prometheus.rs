//! The `[prometheus]` section: where the training job's own metrics come from.
//!
//! [`RawPrometheus`] mirrors the file (`deny_unknown_fields`, spans on every checked value);
//! [`RawPrometheus::compile`] turns it into a [`PrometheusConfig`], pushing every problem into
//! the shared checker so that all errors of the file are reported at once.
//!
//! Invariants:
//! - Secrets never live in the config: it holds where to read them ([`SecretSource`]: an
//!   environment variable's name or a file's path), and the training fetcher reads them.
//!   So `Debug` of a config, and every message of this module, is safe to log.
//! - `url` carries no credentials, query or fragment, and no trailing `/`.
//! - At most one auth method: a bearer token, or a username with a password.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::raw::Checker;

/// The default PromQL of the `step` role: a gauge, or an OpenMetrics counter (`_total`).
/// `or` keeps `training_step` where both exist for the same labels.
pub const DEFAULT_STEP_QUERY: &str = "training_step or training_step_total";
/// The default PromQL of the `loss` role.
pub const DEFAULT_LOSS_QUERY: &str = "training_loss";

/// Where a secret is read from. Holds no secret itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// The name of an environment variable (read once, at start).
    Env(String),
    /// A file, re-read at every poll (rotated tokens work); surrounding whitespace is trimmed.
    File(PathBuf),
}

/// How requests to Prometheus authenticate.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum PrometheusAuth {
    #[default]
    None,
    /// `Authorization: Bearer <token>`.
    Bearer(SecretSource),
    /// HTTP basic auth.
    Basic {
        username: String,
        password: SecretSource,
    },
}

/// The HTTP method of `/api/v1/query_range` (POST suits very long queries).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueryMethod {
    #[default]
    Get,
    Post,
}

/// PromQL for each training-metric role. Results are stored under the role's canonical
/// name (`training_step`, `training_loss`) whatever the query's metric names are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrainingQueries {
    pub step: String,
    pub loss: String,
}

/// The validated `[prometheus]` section.
#[derive(Debug, Clone, PartialEq)]
pub struct PrometheusConfig {
    /// Base URL, e.g. `http://127.0.0.1:9090` or `https://prom.example/prometheus`.
    pub url: String,
    pub queries: TrainingQueries,
    pub method: QueryMethod,
    /// How often the daemon polls.
    pub poll_interval: Duration,
    /// The `step` parameter of `query_range`: the resolution of the stored points.
    pub query_step: Duration,
    /// Deadline of one HTTP request (connect + answer).
    pub timeout: Duration,
    /// How far back the first poll after a start reaches.
    pub lookback: Duration,
    /// How much of the previous poll's range every poll asks for again (late scrapes).
    pub overlap: Duration,
    pub auth: PrometheusAuth,
    /// Extra CA certificate(s) (PEM) trusted for `https` URLs.
    pub ca_file: Option<PathBuf>,
    /// Accept any server certificate. Dangerous: anyone on the path can read the token.
    pub insecure_skip_verify: bool,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPrometheus {
    enabled: Option<bool>,
    url: Option<Spanned<String>>,
    #[serde(default)]
    queries: RawQueries,
    method: Option<Spanned<String>>,
    poll_interval: Option<Spanned<String>>,
    query_step: Option<Spanned<String>>,
    timeout: Option<Spanned<String>>,
    lookback: Option<Spanned<String>>,
    overlap: Option<Spanned<String>>,
    token_env: Option<Spanned<String>>,
    token_file: Option<Spanned<String>>,
    username: Option<Spanned<String>>,
    password_env: Option<Spanned<String>>,
    password_file: Option<Spanned<String>>,
    ca_file: Option<Spanned<String>>,
    insecure_skip_verify: Option<bool>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawQueries {
    step: Option<Spanned<String>>,
    loss: Option<Spanned<String>>,
}

impl RawPrometheus {
    /// Checks the section; `None` when it is disabled or has errors (pushed into `c`).
    /// `section` is the span of the table; `interval` is the sampling interval, the default
    /// `query_step`.
    pub(super) fn compile(
        self,
        c: &mut Checker<'_>,
        section: std::ops::Range<usize>,
        interval: Duration,
    ) -> Option<PrometheusConfig> {
        let errors_before = c.errors.len();
        let ms = Duration::from_millis;
        let s = Duration::from_secs;
        let url = match &self.url {
            None => {
                c.error(
                    section,
                    "`prometheus.url` is missing".into(),
                    "add url = \"http://127.0.0.1:9090\" to [prometheus], or remove the section",
                );
                String::new()
            }
            Some(u) => check_url(c, u),
        };
        let queries = TrainingQueries {
            step: query(
                c,
                "prometheus.queries.step",
                &self.queries.step,
                DEFAULT_STEP_QUERY,
            ),
            loss: query(
                c,
                "prometheus.queries.loss",
                &self.queries.loss,
                DEFAULT_LOSS_QUERY,
            ),
        };
        let method = match &self.method {
            None => QueryMethod::Get,
            Some(m) if m.get_ref().eq_ignore_ascii_case("get") => QueryMethod::Get,
            Some(m) if m.get_ref().eq_ignore_ascii_case("post") => QueryMethod::Post,
            Some(m) => {
                c.error(
                    m.span(),
                    format!("`prometheus.method` = {:?} is not GET or POST", m.get_ref()),
                    "use \"GET\" (default) or \"POST\" (for very long queries)",
                );
                QueryMethod::Get
            }
        };
        let poll_interval = c.duration(
            "prometheus.poll_interval",
            &self.poll_interval,
            s(15),
            ms(100),
            s(3600),
        );
        let query_step = c.duration(
            "prometheus.query_step",
            &self.query_step,
            interval,
            ms(1),
            s(3600),
        );
        let timeout = c.duration("prometheus.timeout", &self.timeout, s(10), ms(100), s(300));
        let lookback = c.duration(
            "prometheus.lookback",
            &self.lookback,
            s(3600),
            s(0),
            s(30 * 86_400),
        );
        let overlap = c.duration("prometheus.overlap", &self.overlap, s(60), s(0), s(86_400));
        let auth = self.auth(c);
        let ca_file = ca_file(c, "prometheus.ca_file", &self.ca_file);
        if c.errors.len() > errors_before || self.enabled == Some(false) {
            return None;
        }
        Some(PrometheusConfig {
            url,
            queries,
            method,
            poll_interval,
            query_step,
            timeout,
            lookback,
            overlap,
            auth,
            ca_file,
            insecure_skip_verify: self.insecure_skip_verify.unwrap_or(false),
        })
    }

    fn auth(&self, c: &mut Checker<'_>) -> PrometheusAuth {
        auth(
            c,
            "prometheus",
            AuthKeys {
                token_env: &self.token_env,
                token_file: &self.token_file,
                username: &self.username,
                password_env: &self.password_env,
                password_file: &self.password_file,
            },
        )
    }
}

/// A `ca_file` key: a path, not empty.
pub(super) fn ca_file(
    c: &mut Checker<'_>,
    key: &str,
    v: &Option<Spanned<String>>,
) -> Option<PathBuf> {
    let f = v.as_ref()?;
    if f.get_ref().trim().is_empty() {
        c.error(
            f.span(),
            format!("`{key}` is empty"),
            "name a PEM file, or remove the key",
        );
        return None;
    }
    Some(PathBuf::from(f.get_ref()))
}

/// The authentication keys of a section that talks to a Prometheus-style server.
pub(super) struct AuthKeys<'a> {
    pub token_env: &'a Option<Spanned<String>>,
    pub token_file: &'a Option<Spanned<String>>,
    pub username: &'a Option<Spanned<String>>,
    pub password_env: &'a Option<Spanned<String>>,
    pub password_file: &'a Option<Spanned<String>>,
}

/// A bearer token (`token_env` / `token_file`) or basic auth (`username` + `password_*`) of
/// section `prefix`, at most one of them.
pub(super) fn auth(c: &mut Checker<'_>, prefix: &str, k: AuthKeys<'_>) -> PrometheusAuth {
    let token = secret(c, &format!("{prefix}.token"), k.token_env, k.token_file);
    let password = secret(
        c,
        &format!("{prefix}.password"),
        k.password_env,
        k.password_file,
    );
    let username = k
        .username
        .as_ref()
        .map(|u| (u.span(), u.get_ref().trim().to_string()));
    match (token, username, password) {
        (None, None, None) => PrometheusAuth::None,
        (Some(t), None, None) => PrometheusAuth::Bearer(t.1),
        (Some((span, _)), _, _) => {
            c.error(
                span,
                format!(
                    "`{prefix}.token_*` and basic auth (`username`, `password_*`) are both set"
                ),
                "use one authentication method",
            );
            PrometheusAuth::None
        }
        (None, Some((span, u)), _) if u.is_empty() => {
            c.error(
                span,
                format!("`{prefix}.username` is empty"),
                "set it, or remove basic auth",
            );
            PrometheusAuth::None
        }
        (None, Some(_), None) => {
            let span = k.username.as_ref().map_or(0..0, |u| u.span());
            c.error(
                span,
                format!("`{prefix}.username` is set without a password"),
                "add password_env = \"VAR\" or password_file = \"PATH\"",
            );
            PrometheusAuth::None
        }
        (None, None, Some((span, _))) => {
            c.error(
                span,
                format!("a password is set without `{prefix}.username`"),
                "add username = \"...\", or use token_env / token_file for a bearer token",
            );
            PrometheusAuth::None
        }
        (None, Some((_, username)), Some((_, password))) => {
            PrometheusAuth::Basic { username, password }
        }
    }
}

/// `{key}_env` / `{key}_file` (`key` is the dotted key without the suffix, e.g.
/// `prometheus.token`): at most one, neither empty. Returns the span of the key used.
pub(super) fn secret(
    c: &mut Checker<'_>,
    what: &str,
    env: &Option<Spanned<String>>,
    file: &Option<Spanned<String>>,
) -> Option<(std::ops::Range<usize>, SecretSource)> {
    match (env, file) {
        (None, None) => None,
        (Some(_), Some(f)) => {
            c.error(
                f.span(),
                format!("`{what}_env` and `{what}_file` are both set"),
                "keep one of them",
            );
            None
        }
        (Some(v), None) | (None, Some(v)) if v.get_ref().trim().is_empty() => {
            let key = if env.is_some() { "env" } else { "file" };
            c.error(
                v.span(),
                format!("`{what}_{key}` is empty"),
                "name an environment variable or a file, or remove the key",
            );
            None
        }
        (Some(v), None) => Some((v.span(), SecretSource::Env(v.get_ref().trim().to_string()))),
        (None, Some(v)) => Some((v.span(), SecretSource::File(PathBuf::from(v.get_ref())))),
    }
}

fn query(c: &mut Checker<'_>, key: &str, v: &Option<Spanned<String>>, default: &str) -> String {
    match v {
        None => default.to_string(),
        Some(q) if q.get_ref().trim().is_empty() => {
            c.error(
                q.span(),
                format!("`{key}` is empty"),
                &format!(
                    "write a PromQL expression, or remove the key for the default {default:?}"
                ),
            );
            default.to_string()
        }
        Some(q) => q.get_ref().trim().to_string(),
    }
}

fn check_url(c: &mut Checker<'_>, u: &Spanned<String>) -> String {
    let text = u.get_ref().trim();
    let parsed = match reqwest::Url::parse(text) {
        Ok(p) => p,
        Err(e) => {
            // The parser's message never repeats the URL, so it cannot leak credentials.
            c.error(
                u.span(),
                format!("`prometheus.url` is not a URL: {e}"),
                "write e.g. \"http://127.0.0.1:9090\" or \"https://prometheus.example/prom\"",
            );
            return String::new();
        }
    };
    let mut problems = Vec::new();
    if !matches!(parsed.scheme(), "http" | "https") {
        problems.push((
            "`prometheus.url` must be http or https",
            "write http://... or https://...",
        ));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        problems.push((
            "`prometheus.url` contains credentials, which would end up in logs",
            "remove them from the URL and use username with password_env / password_file",
        ));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        problems.push((
            "`prometheus.url` has a query or fragment",
            "give the base URL only; gpuwatch appends /api/v1/query_range",
        ));
    }
    for (message, hint) in &problems {
        c.error(u.span(), (*message).to_string(), hint);
    }
    text.trim_end_matches('/').to_string()
}

#[cfg(test)]
#[path = "prometheus_tests.rs"]
mod tests;
