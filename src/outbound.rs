//! The one outbound HTTP client policy: every client gpuwatch builds — the receivers (Slack,
//! webhooks, Alertmanager), the Prometheus client, remote write, the language model and the
//! Slack follow-ups — starts from [`builder`].
//!
//! Invariants: TLS is rustls; every request, connection included, ends within its timeout;
//! redirects are never followed (a 3xx is an error, so a secret URL path or a credential never
//! travels to another host); requests name gpuwatch and its version.

use std::time::Duration;

/// Trusts the PEM certificates of `path` besides the system roots (a private CA); the error
/// says what is wrong with the file.
pub fn add_ca_file(
    mut builder: reqwest::ClientBuilder,
    path: &std::path::Path,
) -> Result<reqwest::ClientBuilder, String> {
    let at = |m: &str| format!("CA file {}: {m}", path.display());
    let pem = std::fs::read(path).map_err(|e| at(&e.to_string()))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem)
        .map_err(|_| at("not a PEM certificate bundle"))?;
    if certs.is_empty() {
        return Err(at("holds no certificate"));
    }
    for c in certs {
        builder = builder.add_root_certificate(c);
    }
    Ok(builder)
}

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
