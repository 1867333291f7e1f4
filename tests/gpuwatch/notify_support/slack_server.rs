//! A local HTTP server that answers like a Slack incoming webhook, for tests of the Slack
//! receiver and of the daemon's notification path (the generic webhook tests use it too).
//!
//! Use it as `crate::notify_support::slack_server`.
//!
//! ```ignore
//! let slack = SlackServer::start();            // 127.0.0.1:<free port>, own thread + runtime
//! std::fs::write(&url_file, slack.url())?;     // http://127.0.0.1:P/services/T0/B0/<token>
//! slack.script(vec![Reply::RateLimited(2), Reply::ServerError]); // then Reply::Ok forever
//! // ... make gpuwatch send ...
//! let got = slack.wait_for(3, Duration::from_secs(10)); // panics if fewer arrive in time
//! assert!(got[2].answered_ok);
//! assert!(!log.contains(slack.token()));       // the token must never leak
//! ```
//!
//! Behaviour: each request to the webhook path takes the next scripted [`Reply`] (then the
//! default, [`Reply::Ok`] unless [`SlackServer::set_default`] changed it) and is recorded on
//! arrival (before any delay) as a [`Received`]. A request to another path gets Slack's 404
//! `no_service` and is recorded without consuming the script. The server runs on its own
//! thread and Tokio runtime, so blocking tests and async tests (any runtime flavour) can use
//! it; it stops when dropped (hung requests are abandoned).

#![allow(dead_code)]

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

/// What the server answers to one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// 200 `ok`: the message was posted.
    Ok,
    /// 429 `rate_limited` with `Retry-After: <seconds>`.
    RateLimited(u64),
    /// 429 `rate_limited` with `Retry-After` as an HTTP date this many seconds ahead.
    RateLimitedUntil(u64),
    /// 500 `internal_error`.
    ServerError,
    /// 503 `service_unavailable`.
    Unavailable,
    /// Never answers (the client's timeout must end the attempt).
    Hang,
    /// 200 `ok` after this delay.
    Delay(Duration),
    /// 400 `invalid_payload`.
    InvalidPayload,
    /// 400 `no_text`.
    NoText,
    /// 403 `action_prohibited`.
    ActionProhibited,
    /// 404 `channel_not_found`.
    ChannelNotFound,
    /// 410 `channel_is_archived`.
    ChannelArchived,
    /// Any status and body (`text/plain`).
    Status(u16, String),
}

impl Reply {
    /// Whether this reply is (eventually) 200 `ok`.
    pub fn is_ok(&self) -> bool {
        matches!(self, Reply::Ok | Reply::Delay(_))
    }
}

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    /// Header names in lower case (the last value of repeated headers).
    pub headers: BTreeMap<String, String>,
    pub body: String,
    /// The body parsed as JSON, when it is JSON.
    pub json: Option<serde_json::Value>,
    /// When it arrived (before any scripted delay).
    pub at: Instant,
    /// What it was answered.
    pub reply: Reply,
    /// Whether that answer is 200 `ok` (a `Delay` counts, even if the client gave up).
    pub answered_ok: bool,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    /// The JSON body (panics when it is not JSON).
    pub fn json(&self) -> &serde_json::Value {
        self.json
            .as_ref()
            .unwrap_or_else(|| panic!("request body is not JSON: {:?}", self.body))
    }

    /// The Slack message's fallback `text` ("" when absent).
    pub fn text(&self) -> &str {
        self.json
            .as_ref()
            .and_then(|j| j["text"].as_str())
            .unwrap_or("")
    }
}

#[derive(Default)]
struct Shared {
    path: String,
    script: Mutex<VecDeque<Reply>>,
    default: Mutex<Option<Reply>>,
    received: Mutex<Vec<Received>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub struct SlackServer {
    addr: SocketAddr,
    token: String,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl SlackServer {
    /// Starts on 127.0.0.1 with a free port and a fresh random token.
    pub fn start() -> SlackServer {
        let token: String = std::iter::repeat_with(fastrand::alphanumeric)
            .take(24)
            .collect();
        let shared = Arc::new(Shared {
            path: format!("/services/T0/B0/{token}"),
            ..Default::default()
        });
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("local addr");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let app = Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&shared));
        std::thread::Builder::new()
            .name("slack-server".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("slack server runtime");
                rt.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                    let serve = std::future::IntoFuture::into_future(axum::serve(listener, app));
                    tokio::select! {
                        _ = serve => {}
                        _ = stopped => {}
                    }
                });
                // Dropping the runtime abandons connections still hanging.
                rt.shutdown_background();
            })
            .expect("spawn slack server");
        SlackServer {
            addr,
            token,
            shared,
            stop: Some(stop),
        }
    }

    /// The webhook URL: `http://127.0.0.1:PORT/services/T0/B0/<token>`.
    pub fn url(&self) -> String {
        format!("http://{}{}", self.addr, self.shared.path)
    }

    /// `http://127.0.0.1:PORT` (requests elsewhere than [`Self::url`] get 404 `no_service`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The secret part of the URL: no error, log line or Debug output may contain it.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The next requests' answers, in order (replaces what is left of an earlier script);
    /// after them, the default.
    pub fn script(&self, replies: Vec<Reply>) {
        *lock(&self.shared.script) = replies.into();
    }

    /// The answer once the script is used up (initially [`Reply::Ok`]).
    pub fn set_default(&self, reply: Reply) {
        *lock(&self.shared.default) = Some(reply);
    }

    /// Every request so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        lock(&self.shared.received).clone()
    }

    /// How many requests were answered 200 `ok`.
    pub fn ok_count(&self) -> usize {
        lock(&self.shared.received)
            .iter()
            .filter(|r| r.answered_ok)
            .count()
    }

    /// Blocks until at least `n` requests arrived and returns them all; panics after
    /// `timeout`. (From async code on a current-thread runtime, use [`Self::wait_for_async`].)
    pub fn wait_for(&self, n: usize, timeout: Duration) -> Vec<Received> {
        let deadline = Instant::now() + timeout;
        loop {
            let got = self.received();
            if got.len() >= n {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "slack server: waited {timeout:?} for {n} requests, got {}: {got:#?}",
                got.len()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// [`Self::wait_for`] without blocking the caller's runtime.
    pub async fn wait_for_async(&self, n: usize, timeout: Duration) -> Vec<Received> {
        let deadline = Instant::now() + timeout;
        loop {
            let got = self.received();
            if got.len() >= n {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "slack server: waited {timeout:?} for {n} requests, got {}: {got:#?}",
                got.len()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Drop for SlackServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let at = Instant::now();
    let path = uri.path().to_string();
    let reply = if path == shared.path {
        let next = lock(&shared.script).pop_front();
        next.or_else(|| lock(&shared.default).clone())
            .unwrap_or(Reply::Ok)
    } else {
        Reply::Status(404, "no_service".into())
    };
    let body_text = String::from_utf8_lossy(&body).into_owned();
    lock(&shared.received).push(Received {
        method: method.to_string(),
        path,
        headers: headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_ascii_lowercase(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        json: serde_json::from_slice(&body).ok(),
        body: body_text,
        at,
        answered_ok: reply.is_ok(),
        reply: reply.clone(),
    });
    answer(reply).await
}

async fn answer(reply: Reply) -> Response {
    let plain = |status: u16, body: &str| -> Response {
        (
            StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            [(header::CONTENT_TYPE, "text/plain")],
            body.to_string(),
        )
            .into_response()
    };
    let rate_limited = |retry_after: String| -> Response {
        (
            StatusCode::TOO_MANY_REQUESTS,
            [
                (header::CONTENT_TYPE, "text/plain".to_string()),
                (header::RETRY_AFTER, retry_after),
            ],
            "rate_limited",
        )
            .into_response()
    };
    match reply {
        Reply::Ok => plain(200, "ok"),
        Reply::Delay(d) => {
            tokio::time::sleep(d).await;
            plain(200, "ok")
        }
        Reply::Hang => {
            std::future::pending::<()>().await;
            plain(500, "unreachable")
        }
        Reply::RateLimited(secs) => rate_limited(secs.to_string()),
        Reply::RateLimitedUntil(secs) => {
            let at = SystemTime::now() + Duration::from_secs(secs);
            rate_limited(http_date(at))
        }
        Reply::ServerError => plain(500, "internal_error"),
        Reply::Unavailable => plain(503, "service_unavailable"),
        Reply::InvalidPayload => plain(400, "invalid_payload"),
        Reply::NoText => plain(400, "no_text"),
        Reply::ActionProhibited => plain(403, "action_prohibited"),
        Reply::ChannelNotFound => plain(404, "channel_not_found"),
        Reply::ChannelArchived => plain(410, "channel_is_archived"),
        Reply::Status(status, body) => plain(status, &body),
    }
}

/// An IMF-fixdate: `Tue, 14 Nov 2023 22:13:20 GMT`.
fn http_date(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t)
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string()
}
