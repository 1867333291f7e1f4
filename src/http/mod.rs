//! The HTTP listener: `/healthz`, `/metrics` (dcgm-exporter-compatible, see [`metrics`]),
//! the read-only JSON API (`/api/v1/status`, `/api/v1/alerts`, `/api/v1/history`,
//! `/api/v1/gpu/audit`, `/api/v1/usage`: the CLI's `--format json` documents, rendered by the same functions,
//! [`crate::views`]) and the live page at `/`.
//!
//! Invariants: binds 127.0.0.1 unless configured otherwise, and beyond loopback the config
//! refuses to load without a token; with a token every route but `/healthz` and the page's
//! static HTML (which holds no data) needs `Authorization: Bearer <token>` (`/metrics`
//! too, unless `public_metrics`); `/healthz` only reads atomics (never the database or NVML)
//! so a slow driver or a busy writer cannot make it hang; the other routes read the store
//! on the blocking pool through read-only connections (WAL: they never block the writer);
//! shutdown is a future passed in by the caller.

pub mod metrics;
mod page;
pub mod tls;

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::get;
use rusqlite::Connection;
use serde_json::json;

pub use crate::telemetry::Health;

use crate::clock::now_ms;
use crate::config::{Config, SecretSource};
use crate::secret;
use crate::views::ViewError;

/// Everything the routes share.
pub struct Api {
    health: Arc<Health>,
    cfg: Arc<Config>,
    token: Option<SecretSource>,
    /// `/metrics` and the API read through its one kept connection (shared with remote
    /// write).
    scraper: metrics::SharedScraper,
}

impl Api {
    /// Checks that the token (if any) can be read now: a daemon that could not check
    /// requests must not start.
    pub fn new(
        health: Arc<Health>,
        cfg: Arc<Config>,
        scraper: metrics::SharedScraper,
    ) -> Result<Arc<Api>, String> {
        let token = cfg.http.token.clone();
        if let Some(t) = &token {
            secret::read("HTTP API token", t)?;
        }
        Ok(Arc::new(Api {
            health,
            cfg,
            token,
            scraper,
        }))
    }

    /// `Some`: the response to send instead (401).
    fn denial(&self, headers: &HeaderMap) -> Option<Response> {
        let source = self.token.as_ref()?;
        let denied = |why: &str| {
            let mut r = (StatusCode::UNAUTHORIZED, Json(json!({ "error": why }))).into_response();
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"gpuwatch\""),
            );
            r
        };
        // Read each time: a rotated token file takes effect without a restart.
        let expected = match secret::read("HTTP API token", source) {
            Ok(t) => t,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the HTTP token; refusing requests");
                return Some(denied("the server cannot read its token"));
            }
        };
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        match given {
            None => Some(denied("send Authorization: Bearer <token>")),
            Some(g) if equal_time(g.as_bytes(), expected.expose().as_bytes()) => None,
            Some(_) => Some(denied("wrong token")),
        }
    }

    /// Runs `f` with the kept read-only connection (dropped after an error other than a bad
    /// argument, so that the next request starts clean).
    fn with_reader<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, ViewError>,
    ) -> Result<T, ViewError> {
        let mut s = self.scraper.lock().unwrap_or_else(|p| p.into_inner());
        let out = f(s.conn(&self.cfg.database)?);
        if out.as_ref().is_err_and(|e| !e.is_usage()) {
            s.reset();
        }
        out
    }
}

/// Compares without an early exit (the token's length is not secret).
fn equal_time(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn healthz(State(api): State<Arc<Api>>) -> impl IntoResponse {
    let (ok, body) = api.health.report();
    let code = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(body))
}

async fn scrape(State(api): State<Arc<Api>>, headers: HeaderMap) -> Response {
    if !api.cfg.http.public_metrics
        && let Some(r) = api.denial(&headers)
    {
        return r;
    }
    let format =
        metrics::expo::Format::negotiate(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    let a = api.clone();
    let answer = tokio::task::spawn_blocking(move || {
        let mut s = a.scraper.lock().unwrap_or_else(|p| p.into_inner());
        s.scrape(&a.cfg, &a.health, now_ms(), format)
    })
    .await;
    match answer {
        Ok(Ok(text)) => ([(header::CONTENT_TYPE, format.content_type())], text).into_response(),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "a /metrics scrape could not read the database");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot read the database: {e}\n"),
            )
                .into_response()
        }
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

/// Runs one API document on the blocking pool; usage errors are 400 with their message.
async fn document(
    api: Arc<Api>,
    headers: HeaderMap,
    render: impl FnOnce(&Api, &Connection) -> Result<String, ViewError> + Send + 'static,
) -> Response {
    if let Some(r) = api.denial(&headers) {
        return r;
    }
    let a = api.clone();
    let answer = tokio::task::spawn_blocking(move || a.with_reader(|c| render(&a, c))).await;
    let json_type = [(header::CONTENT_TYPE, "application/json")];
    match answer {
        Ok(Ok(text)) => (json_type, text).into_response(),
        Ok(Err(f)) => {
            let code = if f.is_usage() {
                StatusCode::BAD_REQUEST
            } else {
                StatusCode::INTERNAL_SERVER_ERROR
            };
            let body = json!({ "error": f.to_string() });
            (code, Json(body)).into_response()
        }
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({ "error": e.to_string() })),
        )
            .into_response(),
    }
}

async fn status(State(api): State<Arc<Api>>, headers: HeaderMap) -> Response {
    document(api, headers, |a, c| {
        let v = crate::views::api::status(c, &a.cfg, Some(&a.cfg.host), a.health.sample_now())?;
        Ok(v.to_string())
    })
    .await
}

async fn alerts(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    document(api, headers, move |a, c| {
        crate::views::api::alerts(&q, c, a.health.sample_now())
    })
    .await
}

async fn history(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    document(api, headers, move |a, c| {
        crate::views::api::history(&q, c, a.health.sample_now())
    })
    .await
}

async fn gpu_audit(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    document(api, headers, move |a, c| {
        crate::views::api::gpu_audit(&q, c, a.health.sample_now())
    })
    .await
}

async fn usage(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    document(api, headers, move |a, c| {
        crate::views::api::usage_doc(&q, c, &a.cfg.usage, a.health.sample_now())
    })
    .await
}

pub fn router(api: Arc<Api>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(scrape))
        .route("/api/v1/status", get(status))
        .route("/api/v1/alerts", get(alerts))
        .route("/api/v1/history", get(history))
        .route("/api/v1/gpu/audit", get(gpu_audit))
        .route("/api/v1/usage", get(usage))
        .route("/", get(page::page))
        .with_state(api)
}

/// Binds `addr` (errors come back before serving starts, so the caller can report them).
pub async fn bind(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

/// Serves until `shutdown` completes: plain HTTP, or HTTPS with `tls`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    api: Arc<Api>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    match tls {
        None => {
            axum::serve(listener, router(api))
                .with_graceful_shutdown(shutdown)
                .await
        }
        Some(acceptor) => {
            axum::serve(tls::TlsListener::new(listener, acceptor), router(api))
                .with_graceful_shutdown(shutdown)
                .await
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn token_comparison() {
        assert!(super::equal_time(b"abc", b"abc"));
        assert!(!super::equal_time(b"abc", b"abd"));
        assert!(!super::equal_time(b"abc", b"abcd"));
    }
}
