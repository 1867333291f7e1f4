//! `GET /`: the live page, one self-contained HTML file (no CDN, no build step) that reads
//! the JSON API every few seconds: each GPU's utilisation, memory, temperature, power and
//! holder, the pending and firing alerts, and charts of the last hour.
//!
//! Invariant: the HTML itself holds no data, so it is served without the token; the page's
//! requests to `/api/v1/*` carry the token the user enters (kept in the browser's
//! localStorage) when the server asks for one.

use axum::http::header;
use axum::response::IntoResponse;

const PAGE: &str = include_str!("page.html");

pub async fn page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:",
            ),
        ],
        PAGE,
    )
}
