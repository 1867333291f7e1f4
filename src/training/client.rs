//! [`PromClient`]: one Prometheus HTTP API endpoint, `/api/v1/query_range`, over reqwest
//! (rustls), with a timeout, bearer or basic auth, and an optional CA file.
//!
//! Invariants:
//! - Secrets live only in [`Secret`] values (the one secret type, `crate::secret`) (whose `Debug` prints `***`) and in the request's
//!   `Authorization` header (marked sensitive by reqwest). An env secret is read once, at
//!   [`PromClient::new`]; a file secret at every request, so rotated tokens are picked up.
//! - Every error goes through [`FetchError::scrub`] with the secrets of the request, and no
//!   message is built from reqwest's `Display` (it prints the URL with its query string).
//! - Redirects are not followed (credentials are never sent elsewhere): a 3xx is an error.
//! - A body is read up to [`MAX_BODY_BYTES`], then refused.

use std::path::PathBuf;
use std::time::Duration;

use super::error::FetchError;
use super::response::{Matrix, parse_query_range};
use crate::config::{PrometheusAuth, PrometheusConfig, QueryMethod, SecretSource};
use crate::model::TsMs;
use crate::secret::Secret;
use crate::text::error_chain;

/// The largest answer accepted (a query over far too many series is refused, not buffered).
pub const MAX_BODY_BYTES: usize = 64 << 20;

/// Where a secret comes from at request time.
#[derive(Debug, Clone)]
enum SecretReader {
    /// Read from the environment once, at start.
    Value(Secret),
    File(PathBuf),
}

impl SecretReader {
    fn new(what: &'static str, source: &SecretSource) -> Result<Self, FetchError> {
        match source {
            SecretSource::File(p) => Ok(Self::File(p.clone())),
            SecretSource::Env(var) => {
                let fail = |reason: &str| FetchError::Secret {
                    what,
                    source_desc: format!("environment variable {var}"),
                    reason: reason.to_string(),
                };
                let value = std::env::var(var).map_err(|e| match e {
                    std::env::VarError::NotPresent => fail("it is not set"),
                    std::env::VarError::NotUnicode(_) => fail("it is not valid UTF-8"),
                })?;
                let value = value.trim();
                if value.is_empty() {
                    return Err(fail("it is empty"));
                }
                Ok(Self::Value(Secret::remembered(value.to_string())))
            }
        }
    }

    fn read(&self, what: &'static str) -> Result<Secret, FetchError> {
        match self {
            Self::Value(s) => Ok(s.clone()),
            Self::File(path) => {
                let fail = |reason: String| FetchError::Secret {
                    what,
                    source_desc: format!("file {}", path.display()),
                    reason,
                };
                let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
                let value = text.trim();
                if value.is_empty() {
                    return Err(fail("it is empty".into()));
                }
                Ok(Secret::remembered(value.to_string()))
            }
        }
    }
}

#[derive(Debug, Clone)]
enum Auth {
    None,
    Bearer(SecretReader),
    Basic {
        username: String,
        password: SecretReader,
    },
}

/// How requests to a Prometheus-style server authenticate (`[prometheus]`,
/// `[[remote_write]]`): env secrets read once, file secrets at every request.
#[derive(Debug, Clone)]
pub struct Credentials(Auth);

impl Credentials {
    pub fn new(auth: &PrometheusAuth) -> Result<Self, FetchError> {
        Ok(Self(match auth {
            PrometheusAuth::None => Auth::None,
            PrometheusAuth::Bearer(s) => Auth::Bearer(SecretReader::new("bearer token", s)?),
            PrometheusAuth::Basic { username, password } => Auth::Basic {
                username: username.clone(),
                password: SecretReader::new("password", password)?,
            },
        }))
    }

    /// Adds the `Authorization` header; returns every form in which the secret could come
    /// back in a body (the value itself and, for basic auth, the header's base64), to scrub.
    pub fn apply(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<(reqwest::RequestBuilder, Vec<Secret>), FetchError> {
        Ok(match &self.0 {
            Auth::None => (req, Vec::new()),
            Auth::Bearer(r) => {
                let token = r.read("bearer token")?;
                (req.bearer_auth(token.expose()), vec![token])
            }
            Auth::Basic { username, password } => {
                let pw = password.read("password")?;
                let req = req.basic_auth(username, Some(pw.expose()));
                let encoded = base64(format!("{username}:{}", pw.expose()).as_bytes());
                (req, vec![pw, Secret::remembered(encoded)])
            }
        })
    }
}

/// A rustls client for a Prometheus-style server: a timeout on everything, no redirects,
/// the extra CA certificates of `ca_file`, and (dangerously) no certificate check.
pub fn http_client(
    timeout: Duration,
    ca_file: Option<&std::path::Path>,
    insecure_skip_verify: bool,
    url: &str,
) -> Result<reqwest::Client, FetchError> {
    let mut builder = crate::outbound::builder(timeout);
    if let Some(path) = ca_file {
        builder = crate::outbound::add_ca_file(builder, path).map_err(FetchError::Setup)?;
    }
    if insecure_skip_verify {
        tracing::warn!(
            url = %url,
            "insecure_skip_verify is set: the server's certificate is not checked, \
             so anyone on the network path can impersonate it and read the credentials"
        );
        builder = builder.danger_accept_invalid_certs(true);
    }
    builder
        .build()
        .map_err(|e| FetchError::Setup(error_chain(&e.without_url())))
}

/// A client for one Prometheus server.
#[derive(Debug, Clone)]
pub struct PromClient {
    http: reqwest::Client,
    /// Base URL without trailing `/` (config guarantees: no credentials, query or fragment).
    base: String,
    method: QueryMethod,
    timeout: Duration,
    auth: Credentials,
}

impl PromClient {
    /// Builds the client: reads env secrets and the CA file now (file secrets per request).
    pub fn new(cfg: &PrometheusConfig) -> Result<Self, FetchError> {
        let auth = Credentials::new(&cfg.auth)?;
        let http = http_client(
            cfg.timeout,
            cfg.ca_file.as_deref(),
            cfg.insecure_skip_verify,
            &cfg.url,
        )?;
        Ok(Self {
            http,
            base: cfg.url.clone(),
            method: cfg.method,
            timeout: cfg.timeout,
            auth,
        })
    }

    /// The base URL (safe to log).
    pub fn url(&self) -> &str {
        &self.base
    }

    /// Runs `query` over `[start_ms, end_ms]` every `step_ms` and parses the matrix.
    pub async fn query_range(
        &self,
        query: &str,
        start_ms: TsMs,
        end_ms: TsMs,
        step_ms: i64,
    ) -> Result<Matrix, FetchError> {
        let (request, secrets) = self.request(query, start_ms, end_ms, step_ms)?;
        let secrets: Vec<&str> = secrets.iter().map(Secret::expose).collect();
        self.send(request, &secrets)
            .await
            .map_err(|e| e.scrub(&secrets))
    }

    /// Runs the instant `query` at `at_ms`: with a range selector (`name[1h]`) its answer is
    /// the raw samples of the range, as stored (no resampling, no gap filled).
    pub async fn query_raw(&self, query: &str, at_ms: TsMs) -> Result<Matrix, FetchError> {
        let url = format!("{}/api/v1/query", self.base);
        let params = [("query", query.to_string()), ("time", seconds(at_ms))];
        let req = match self.method {
            QueryMethod::Get => self.http.get(&url).query(&params),
            QueryMethod::Post => self.http.post(&url).form(&params),
        };
        let (request, secrets) = self.auth.apply(req)?;
        let secrets: Vec<&str> = secrets.iter().map(Secret::expose).collect();
        self.send(request, &secrets)
            .await
            .map_err(|e| e.scrub(&secrets))
    }

    fn request(
        &self,
        query: &str,
        start_ms: TsMs,
        end_ms: TsMs,
        step_ms: i64,
    ) -> Result<(reqwest::RequestBuilder, Vec<Secret>), FetchError> {
        let url = format!("{}/api/v1/query_range", self.base);
        let params = [
            ("query", query.to_string()),
            ("start", seconds(start_ms)),
            ("end", seconds(end_ms)),
            ("step", seconds(step_ms.max(1))),
        ];
        let req = match self.method {
            QueryMethod::Get => self.http.get(&url).query(&params),
            QueryMethod::Post => self.http.post(&url).form(&params),
        };
        let (req, secrets) = self.auth.apply(req)?;
        Ok((req, secrets))
    }

    /// Sends, reads the body (bounded), scrubs `secrets` out of it, then parses it: so an
    /// excerpt of the body in an error can never hold part of a secret.
    async fn send(
        &self,
        request: reqwest::RequestBuilder,
        secrets: &[&str],
    ) -> Result<Matrix, FetchError> {
        let mut resp = request.send().await.map_err(|e| self.transport(e))?;
        let status = resp.status().as_u16();
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| self.transport(e))? {
            if body.len() + chunk.len() > MAX_BODY_BYTES {
                return Err(FetchError::TooLarge {
                    limit: MAX_BODY_BYTES,
                });
            }
            body.extend_from_slice(&chunk);
        }
        for secret in secrets.iter().filter(|s| !s.is_empty()) {
            body = replace_bytes(&body, secret.as_bytes(), b"***");
        }
        parse_query_range(status, &body)
    }

    fn transport(&self, e: reqwest::Error) -> FetchError {
        if e.is_timeout() {
            FetchError::Timeout {
                url: self.base.clone(),
                timeout: self.timeout,
            }
        } else {
            FetchError::Unreachable {
                url: self.base.clone(),
                reason: error_chain(&e.without_url()),
            }
        }
    }
}

/// Milliseconds as Prometheus's decimal seconds ("1700000000.250").
fn seconds(ms: i64) -> String {
    let (s, frac) = (ms.div_euclid(1000), ms.rem_euclid(1000));
    if ms < 0 {
        (ms as f64 / 1000.0).to_string()
    } else if frac == 0 {
        s.to_string()
    } else {
        format!("{s}.{frac:03}")
    }
}

/// `haystack` with every occurrence of `needle` (non-empty) replaced by `with`.
fn replace_bytes(haystack: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(haystack.len());
    let mut i = 0;
    while i < haystack.len() {
        if haystack[i..].starts_with(needle) {
            out.extend_from_slice(with);
            i += needle.len();
        } else {
            out.push(haystack[i]);
            i += 1;
        }
    }
    out
}

/// Standard base64 with padding (what HTTP basic auth uses).
fn base64(input: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_format() {
        assert_eq!(seconds(1_700_000_000_000), "1700000000");
        assert_eq!(seconds(1_700_000_000_250), "1700000000.250");
        assert_eq!(seconds(500), "0.500");
        assert_eq!(seconds(-1500), "-1.5");
    }

    #[test]
    fn base64_matches_rfc4648() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"user:pass"), "dXNlcjpwYXNz");
    }

    #[test]
    fn replace_bytes_replaces_every_occurrence() {
        assert_eq!(
            replace_bytes(b"a tok b tok", b"tok", b"***"),
            b"a *** b ***"
        );
        assert_eq!(replace_bytes(b"to", b"tok", b"***"), b"to");
    }

    #[test]
    fn secret_debug_is_redacted() {
        let s = Secret::remembered("hunter2".into());
        assert_eq!(format!("{s:?}"), "Secret(***)");
        let r = SecretReader::Value(s);
        assert!(!format!("{r:?}").contains("hunter2"));
    }
}
