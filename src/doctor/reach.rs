//! Prometheus and every receiver, reached without sending anything: a TCP connect with a
//! deadline to each address (Slack and webhook URLs, the SMTP server, every Alertmanager URL).
//!
//! Invariant: nothing is sent. A secret URL is read only to learn its host and port, and only
//! `host:port` is ever printed (errors are scrubbed of secrets).

use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use super::Check;
use crate::config::{Config, ReceiverKind, SecretSource, UrlSource};

/// `host:port` of a URL, for connecting and printing (never the path, query or credentials).
fn host_port(url: &str) -> Result<(String, u16), String> {
    let u = reqwest::Url::parse(url).map_err(|e| format!("not a URL: {e}"))?;
    let host = u.host_str().ok_or("the URL has no host")?.to_string();
    let port = u.port_or_known_default().ok_or("the URL has no port")?;
    Ok((host, port))
}

/// A TCP connect within `timeout`, to every address the name resolves to until one answers.
fn connect(host: &str, port: u16, timeout: Duration) -> Result<(), String> {
    let addrs: Vec<_> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .collect();
    let mut last = format!("{host} resolves to no address");
    for a in addrs {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(_) => return Ok(()),
            Err(e) => last = format!("{a}: {e}"),
        }
    }
    Err(last)
}

fn reach(
    name: &str,
    what: &str,
    url: Result<String, String>,
    timeout: Duration,
    fix: &str,
) -> Check {
    let scrub = crate::secret::scrub;
    let target = url.and_then(|u| host_port(&u));
    match target {
        Err(e) => Check::fail(name, scrub(&format!("{what}: {e}")), fix),
        Ok((host, port)) => match connect(&host, port, timeout) {
            Ok(()) => Check::ok(
                name,
                format!("{what}: {host}:{port} accepts TCP connections (nothing sent)"),
            ),
            Err(e) => Check::fail(
                name,
                scrub(&format!("{what}: cannot connect to {host}:{port}: {e}")),
                fix,
            ),
        },
    }
}

pub(super) fn prometheus(cfg: &Config, timeout: Duration) -> Check {
    let Some(p) = &cfg.prometheus else {
        return Check::ok("prometheus", "not configured: no training metrics");
    };
    reach(
        "prometheus",
        "[prometheus] url",
        Ok(p.url.clone()),
        timeout,
        "check [prometheus] url, the network path and firewalls (`curl URL/-/ready` from this machine)",
    )
}

fn secret_url(what: &str, s: &SecretSource) -> Result<String, String> {
    crate::secret::read(what, s).map(|v| v.expose().to_string())
}

pub(super) fn receiver(r: &crate::config::ReceiverConfig, timeout: Duration) -> Check {
    let name = format!("receiver {}", r.name);
    let what = r.kind.type_name();
    let fix = "check the receiver's address, the network path and firewalls; `gpuwatch notify test` sends a real test message";
    match &r.kind {
        ReceiverKind::Slack(s) => {
            let url = secret_url("Slack webhook URL", &s.webhook_url);
            let fix = if url.is_err() {
                "set the environment variable or file the receiver's webhook_url_env / webhook_url_file names"
            } else {
                fix
            };
            reach(&name, what, url, timeout, fix)
        }
        ReceiverKind::Webhook(w) => {
            let url = match &w.url {
                UrlSource::Plain(u) => Ok(u.clone()),
                UrlSource::Secret(s) => secret_url("webhook URL", s),
            };
            let fix = if url.is_err() {
                "set the environment variable or file the receiver's url_env / url_file names"
            } else {
                fix
            };
            reach(&name, what, url, timeout, fix)
        }
        ReceiverKind::Email(e) => match connect(&e.smtp_host, e.smtp_port, timeout) {
            Ok(()) => Check::ok(
                &name,
                format!(
                    "email: SMTP {}:{} accepts TCP connections (nothing sent)",
                    e.smtp_host, e.smtp_port
                ),
            ),
            Err(err) => Check::fail(
                &name,
                format!(
                    "email: cannot connect to SMTP {}:{}: {err}",
                    e.smtp_host, e.smtp_port
                ),
                fix,
            ),
        },
        ReceiverKind::Alertmanager(a) => {
            let mut bad = Vec::new();
            let mut good = Vec::new();
            for u in &a.urls {
                match host_port(u)
                    .and_then(|(h, p)| connect(&h, p, timeout).map(|()| format!("{h}:{p}")))
                {
                    Ok(hp) => good.push(hp),
                    Err(e) => bad.push(e),
                }
            }
            if bad.is_empty() {
                Check::ok(
                    &name,
                    format!(
                        "alertmanager: {} accept TCP connections (nothing sent)",
                        good.join(", ")
                    ),
                )
            } else {
                Check::fail(&name, format!("alertmanager: {}", bad.join("; ")), fix)
            }
        }
    }
}
