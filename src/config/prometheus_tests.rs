//! Tests of the `[prometheus]` section: defaults, every key, and every error at once.

use std::path::Path;
use std::time::Duration;

use super::super::{Config, ConfigErrors};
use super::*;

fn parse(text: &str) -> Result<Config, ConfigErrors> {
    Config::parse(text, Path::new("g.toml"))
}

fn prom(text: &str) -> PrometheusConfig {
    parse(text)
        .expect("valid config")
        .prometheus
        .expect("prometheus section")
}

fn err(text: &str) -> String {
    match parse(text) {
        Ok(c) => panic!("expected an error, got {c:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn no_section_means_no_prometheus() {
    assert_eq!(parse("").expect("valid").prometheus, None);
    assert_eq!(
        parse("[prometheus]\nenabled = false\nurl = \"http://p:9090\"\n")
            .expect("valid")
            .prometheus,
        None
    );
}

#[test]
fn defaults() {
    let p = prom("interval = \"2s\"\n[prometheus]\nurl = \"http://127.0.0.1:9090/\"\n");
    assert_eq!(p.url, "http://127.0.0.1:9090");
    assert_eq!(p.queries.step, DEFAULT_STEP_QUERY);
    assert_eq!(p.queries.loss, DEFAULT_LOSS_QUERY);
    assert_eq!(p.method, QueryMethod::Get);
    assert_eq!(
        p.query_step,
        Duration::from_secs(2),
        "defaults to the sampling interval"
    );
    assert_eq!(p.poll_interval, Duration::from_secs(15));
    assert_eq!(p.timeout, Duration::from_secs(10));
    assert_eq!(p.lookback, Duration::from_secs(3600));
    assert_eq!(p.overlap, Duration::from_secs(60));
    assert_eq!(p.auth, PrometheusAuth::None);
    assert_eq!(p.ca_file, None);
    assert!(!p.insecure_skip_verify);
}

#[test]
fn every_key() {
    let p = prom(
        r#"
[prometheus]
url = "https://prom.example/prometheus"
method = "post"
poll_interval = "30s"
query_step = "15s"
timeout = "3s"
lookback = "2h"
overlap = "5m"
token_file = "/run/token"
ca_file = "/etc/ca.pem"
insecure_skip_verify = true
[prometheus.queries]
step = 'my_step{node="$host"}'
loss = "avg by (rank) (my_loss)"
"#,
    );
    assert_eq!(p.url, "https://prom.example/prometheus");
    assert_eq!(p.method, QueryMethod::Post);
    assert_eq!(p.poll_interval, Duration::from_secs(30));
    assert_eq!(p.query_step, Duration::from_secs(15));
    assert_eq!(p.timeout, Duration::from_secs(3));
    assert_eq!(p.lookback, Duration::from_secs(7200));
    assert_eq!(p.overlap, Duration::from_secs(300));
    assert_eq!(
        p.auth,
        PrometheusAuth::Bearer(SecretSource::File("/run/token".into()))
    );
    assert_eq!(p.ca_file, Some("/etc/ca.pem".into()));
    assert!(p.insecure_skip_verify);
    assert_eq!(p.queries.step, "my_step{node=\"$host\"}");
    assert_eq!(p.queries.loss, "avg by (rank) (my_loss)");
}

#[test]
fn basic_auth() {
    let p = prom("[prometheus]\nurl = \"http://p\"\nusername = \"u\"\npassword_env = \"PW\"\n");
    assert_eq!(
        p.auth,
        PrometheusAuth::Basic {
            username: "u".into(),
            password: SecretSource::Env("PW".into())
        }
    );
}

#[test]
fn errors_are_reported_together_with_positions() {
    let e = err(r#"[prometheus]
url = "ftp://user:pw@p/?x=1"
method = "PUT"
timeout = "soon"
token_env = "T"
token_file = "/t"
username = "u"
[prometheus.queries]
loss = "  "
"#);
    let lines: Vec<&str> = e.lines().collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("g.toml:2:7: `prometheus.url` must be http or https")),
        "{e}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("g.toml:2:7: `prometheus.url` contains credentials")),
        "{e}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("g.toml:2:7: `prometheus.url` has a query")),
        "{e}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("g.toml:3:10: `prometheus.method` = \"PUT\"")),
        "{e}"
    );
    assert!(
        lines.iter().any(
            |l| l.starts_with("g.toml:4:11: `prometheus.timeout` = \"soon\" is not a duration")
        ),
        "{e}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with(
            "g.toml:6:14: `prometheus.token_env` and `prometheus.token_file` are both set"
        )),
        "{e}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("g.toml:7:12: `prometheus.username` is set without a password")),
        "{e}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("g.toml:9:8: `prometheus.queries.loss` is empty")),
        "{e}"
    );
    assert!(
        !e.contains("pw@"),
        "the URL's password is never echoed: {e}"
    );
}

#[test]
fn missing_url_and_unknown_keys() {
    let e = err("[prometheus]\ntimeout = \"1s\"\n");
    assert!(
        e.starts_with("g.toml:1:1: `prometheus.url` is missing"),
        "{e}"
    );
    let e = err("[prometheus]\nurl = \"http://p\"\ntoken = \"abc\"\n");
    assert!(e.starts_with("g.toml:3:1: unknown field `token`"), "{e}");
    let e = err("[prometheus]\nurl = \"http://p\"\n[prometheus.queries]\nsteps = \"x\"\n");
    assert!(e.starts_with("g.toml:4:1: unknown field `steps`"), "{e}");
}

#[test]
fn token_and_basic_auth_conflict() {
    let e = err(
        "[prometheus]\nurl = \"http://p\"\ntoken_env = \"T\"\nusername = \"u\"\npassword_file = \"/p\"\n",
    );
    assert!(
        e.contains("g.toml:3:13: `prometheus.token_*` and basic auth"),
        "{e}"
    );
    let e = err("[prometheus]\nurl = \"http://p\"\npassword_env = \"P\"\n");
    assert!(
        e.contains("a password is set without `prometheus.username`"),
        "{e}"
    );
}

#[test]
fn shipped_example_section_parses_when_uncommented() {
    let text = include_str!("../../examples/gpuwatch.toml");
    let start = text
        .find("# [prometheus]")
        .expect("example has the section");
    let mut section = String::new();
    for line in text[start..].lines() {
        // Uncomment `# key = value` and `# [table]` lines; keep prose commented.
        let l = line.trim_start_matches("# ");
        let is_code =
            l.starts_with('[') || l.split_once(" = ").is_some_and(|(k, _)| !k.contains(' '));
        if is_code && line.starts_with("# ") {
            section.push_str(l);
            section.push('\n');
        }
    }
    // The example shows both a token and basic auth, and env and file variants: keep one.
    let section: String = section
        .lines()
        .filter(|l| {
            !l.starts_with("token_") && !l.starts_with("password_env") && !l.starts_with("insecure")
        })
        .map(|l| format!("{l}\n"))
        .collect();
    let p = prom(&section);
    assert_eq!(p.url, "http://127.0.0.1:9090");
    assert_eq!(p.queries.step, DEFAULT_STEP_QUERY);
    assert!(matches!(p.auth, PrometheusAuth::Basic { .. }));
}
