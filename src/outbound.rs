//! The one outbound HTTP client policy: every client gpuwatch builds — the receivers (Slack,
//! webhooks, Alertmanager), the Prometheus client, remote write, the language model and the
//! Slack follow-ups — starts from [`builder`].
//!
//! Invariants: TLS is rustls; every request, connection included, ends within its timeout;
//! redirects are never followed (a 3xx is an error, so a secret URL path or a credential never
//! travels to another host); requests name gpuwatch and its version.

use std::time::Duration;

/// A client builder with the policy; callers add what their endpoint needs (extra CA
/// certificates) and build.
pub fn builder(timeout: Duration) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .use_rustls_tls()
        .timeout(timeout)
        .connect_timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("gpuwatch/", env!("CARGO_PKG_VERSION")))
}
