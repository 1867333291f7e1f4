use super::*;

fn parse(text: &str) -> Result<Config, ConfigErrors> {
    Config::parse(text, Path::new("g.toml"))
}

fn err(text: &str) -> String {
    match parse(text) {
        Ok(c) => panic!("expected an error, got {c:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn empty_file_gives_defaults() {
    let c = parse("").expect("empty config is valid");
    let d = Config::default();
    assert_eq!(c.interval, Duration::from_secs(1));
    assert_eq!(c.max_db_size, 2 * 1024 * 1024 * 1024);
    assert_eq!(c.http.listen, d.http.listen);
    assert!(c.http.listen.ip().is_loopback());
}

#[test]
fn shipped_example_parses() {
    let text = include_str!("../../examples/gpuwatch.toml");
    let c = Config::parse(text, Path::new("examples/gpuwatch.toml")).expect("example is valid");
    assert_eq!(c.interval, Duration::from_secs(1));
    assert_eq!(c.retention, Duration::from_secs(7 * 86_400));
}

#[test]
fn values_are_parsed() {
    let c = parse(
        "host = \"node-17\"\ninterval = \"500ms\"\nmax_db_size = \"64MiB\"\nretention = \"2d\"\n\
         [http]\nlisten = \"0.0.0.0:9000\"\ntoken_env = \"GPUWATCH_TOKEN\"\n",
    )
    .expect("valid");
    assert_eq!(c.host, "node-17");
    assert_eq!(
        c.http.token,
        Some(SecretSource::Env("GPUWATCH_TOKEN".into()))
    );
    assert_eq!(c.http.metrics_names, MetricNames::Dcgm);
    assert_eq!(c.interval, Duration::from_millis(500));
    assert_eq!(c.sample_deadline, Duration::from_millis(400));
    assert_eq!(c.max_db_size, 64 * 1024 * 1024);
    assert_eq!(c.http.listen.port(), 9000);
}

#[test]
fn unknown_key_names_line_and_column() {
    let e = err("interval = \"1s\"\nintervall = \"2s\"\n");
    assert!(
        e.starts_with("g.toml:2:1: unknown field `intervall`"),
        "{e}"
    );
    assert!(e.contains("examples/gpuwatch.toml"), "{e}");
}

#[test]
fn unknown_key_in_table() {
    let e = err("[http]\nlisten = \"127.0.0.1:1\"\nport = 3\n");
    assert!(e.starts_with("g.toml:3:1: unknown field `port`"), "{e}");
}

#[test]
fn bad_duration_points_at_value() {
    let e = err("interval = \"fast\"\n");
    assert!(
        e.starts_with("g.toml:1:12: `interval` = \"fast\" is not a duration"),
        "{e}"
    );
}

#[test]
fn every_error_is_reported_at_once() {
    let e = err("interval = \"0s\"\nmax_db_size = \"lots\"\n[http]\nlisten = \"nowhere\"\n");
    let lines: Vec<&str> = e.lines().collect();
    assert_eq!(lines.len(), 3, "{e}");
    assert!(lines[0].starts_with("g.toml:1:12: `interval`"), "{e}");
    assert!(lines[1].starts_with("g.toml:2:15: `max_db_size`"), "{e}");
    assert!(lines[2].starts_with("g.toml:4:10: `http.listen`"), "{e}");
}

#[test]
fn wrong_type_is_an_error() {
    let e = err("[processes]\nenabled = \"yes\"\n");
    assert!(e.starts_with("g.toml:2:11:"), "{e}");
}

#[test]
fn lost_probe_after_defaults_to_a_minute_and_is_bounded() {
    let d = parse("").expect("valid");
    assert_eq!(d.lost_probe_after, Duration::from_secs(60));
    let c = parse("lost_probe_after = \"10s\"\n").expect("valid");
    assert_eq!(c.lost_probe_after, Duration::from_secs(10));
    let e = err("lost_probe_after = \"2h\"\n");
    assert!(e.starts_with("g.toml:1:20:"), "{e}");
}

#[test]
fn deadline_longer_than_interval_is_rejected() {
    let e = err("interval = \"1s\"\nsample_deadline = \"2s\"\n");
    assert!(
        e.contains("g.toml:2:19: `sample_deadline` is longer than `interval`"),
        "{e}"
    );
}

#[test]
fn bad_regex_is_reported() {
    let e = err("[processes]\nredact_patterns = [\"ok\", \"(unclosed\"]\n");
    assert!(
        e.starts_with("g.toml:2:26: invalid regular expression"),
        "{e}"
    );
}

#[test]
fn line_col_counts_characters() {
    assert_eq!(error::line_col("ab\ncdé f", 8), (2, 5));
    assert_eq!(error::line_col("", 0), (1, 1));
}

#[test]
fn rules_section() {
    let c = parse("interval = \"2s\"\n[rules]\ndefault_rules = false\nfiles = [\"r.d/*.toml\"]\neval_interval = \"10s\"\n")
        .expect("valid");
    assert!(!c.rules.default_rules);
    assert_eq!(c.rules.files, vec![std::path::PathBuf::from("r.d/*.toml")]);
    assert_eq!(c.rules.eval_interval, Some(Duration::from_secs(10)));
    let e = err("interval = \"2s\"\n[rules]\neval_interval = \"1s\"\n");
    assert!(
        e.starts_with("g.toml:3:17: `rules.eval_interval` = \"1s\" is out of range"),
        "{e}"
    );
}

#[test]
fn shipped_notify_example_parses_when_uncommented() {
    let text = include_str!("../../examples/gpuwatch.toml");
    let start = text.find("# [notify]").expect("example has [notify]");
    let end = text
        .find("# [prometheus]")
        .expect("example has [prometheus]");
    let mut section = String::new();
    for line in text[start..end].lines() {
        let l = line.trim_start_matches("# ");
        let is_code =
            l.starts_with('[') || l.split_once(" = ").is_some_and(|(k, _)| !k.contains(' '));
        // The example shows env and file variants of each secret: keep the env ones.
        let alt = [
            "webhook_url_file",
            "password_file",
            "hmac_secret_file",
            "bearer_token_file",
            "url = ",
        ];
        if is_code && line.starts_with("# ") && !alt.iter().any(|a| l.starts_with(a)) {
            section.push_str(l);
            section.push('\n');
        }
    }
    let c = Config::parse(&section, Path::new("notify.toml"))
        .unwrap_or_else(|e| panic!("{e}\n{section}"));
    let n = &c.notify;
    let names: Vec<&str> = n.receivers.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["oncall", "team", "ticketing", "fleet"]);
    assert_eq!(n.routes.len(), 1);
    assert!(n.routes[0].continue_);
    assert_eq!(n.timing.group_wait, Duration::from_secs(30));
}

#[test]
fn notify_errors_name_the_place() {
    let text = r#"
[notify]
group_wait = "soon"
[[notify.slack]]
name = "a"
webhook_url = "https://hooks.slack.com/services/T/B/secret"
[[notify.email]]
name = "a"
smtp_host = "smtp.example.com"
tls = "none"
username = "u"
password_env = "P"
from = "not an address"
to = ["x@example.com"]
[[notify.route]]
match = ["rule=~("]
receivers = ["nobody"]
"#;
    let e = Config::parse(text, Path::new("n.toml"))
        .unwrap_err()
        .to_string();
    for want in [
        "n.toml:3:14: `notify.group_wait`",
        "n.toml:6:15: `notify.slack.webhook_url` would put a secret in the config file",
        "unencrypted to smtp.example.com",
        "`notify.email.from` = \"not an address\"",
        "receiver name \"a\" is used twice",
        "bad regular expression",
        "names \"nobody\", which is not a receiver",
    ] {
        assert!(e.contains(want), "{want:?} missing in:\n{e}");
    }
    assert!(!e.contains("secret\""), "the URL is not echoed: {e}");
}

#[test]
fn the_alerting_guide_config_is_valid() {
    let doc = include_str!("../../docs/ALERTING.md");
    let start = doc.find("```toml").expect("a toml block") + "```toml".len();
    let end = start + doc[start..].find("```").expect("closed");
    let c = Config::parse(&doc[start..end], Path::new("docs/ALERTING.md"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.notify.receivers.len(), 3);
    assert_eq!(c.notify.routes.len(), 2);
}

#[test]
fn proc_root_and_pod_logs_dir() {
    let d = parse("").expect("defaults");
    assert_eq!(d.processes.proc_root, Path::new("/proc"));
    assert_eq!(d.kubernetes.pod_logs_dir, Path::new("/var/log/pods"));
    let c = parse(
        "[processes]\nproc_root = \"/host/proc\"\n[kubernetes]\npod_logs_dir = \"/host/pods\"\n",
    )
    .expect("valid");
    assert_eq!(c.processes.proc_root, Path::new("/host/proc"));
    assert_eq!(c.kubernetes.pod_logs_dir, Path::new("/host/pods"));
    assert_eq!(d.kubernetes.enabled, Kubelet::Auto);
    assert_eq!(
        d.kubernetes.pod_resources_socket,
        Path::new("/var/lib/kubelet/pod-resources/kubelet.sock")
    );
    for (v, want) in [
        ("true", Kubelet::On),
        ("false", Kubelet::Off),
        ("\"auto\"", Kubelet::Auto),
    ] {
        let c = parse(&format!("[kubernetes]\nenabled = {v}\n")).expect("valid");
        assert_eq!(c.kubernetes.enabled, want, "{v}");
    }
    let e = err("[kubernetes]\nenabled = \"yes\"\n");
    assert!(e.starts_with("g.toml:2:11: `kubernetes.enabled`"), "{e}");
    let e = err("[kubernetes]\npod_log_dir = \"/x\"\n");
    assert!(e.starts_with("g.toml:2:1:"), "{e}");
}

#[test]
fn http_beyond_loopback_needs_a_token_and_names_are_checked() {
    let e = err("[http]\nlisten = \"0.0.0.0:9835\"\n");
    assert!(e.starts_with("g.toml:2:10: `http.listen` = \"0.0.0.0:9835\" serves the API beyond this machine without a token"), "{e}");
    assert!(e.contains("token_env"), "{e}");
    let e = err("[http]\nlisten = \"127.0.0.1:9835\"\ntoken = \"hunter2hunter2\"\n");
    assert!(
        e.starts_with("g.toml:3:9: `http.token` would put a secret in the config file"),
        "{e}"
    );
    assert!(!e.contains("hunter2"), "the secret is not echoed: {e}");
    let e = err("[http]\nmetrics_names = \"prometheus\"\n");
    assert!(
        e.starts_with("g.toml:2:17: `http.metrics_names` = \"prometheus\" is not a naming"),
        "{e}"
    );
    let c = parse(
        "[http]\nmetrics_names = \"gpuwatch\"\nlisten = \"[::1]:9835\"\npublic_metrics = true\n",
    )
    .expect("valid");
    assert_eq!(c.http.metrics_names, MetricNames::Gpuwatch);
    assert!(c.http.public_metrics && c.http.token.is_none());
    // A listener that is off needs no token.
    parse("[http]\nenabled = false\nlisten = \"0.0.0.0:9835\"\n").expect("disabled listener");
}

#[test]
fn the_default_host_is_node_name_then_the_host_name() {
    let host = |n: Option<&str>| host_from(n.map(str::to_string), || "pod-x7k2p".to_string());
    assert_eq!(host(Some("gpu-node-17")), "gpu-node-17");
    assert_eq!(host(Some("  gpu-node-17\n")), "gpu-node-17");
    assert_eq!(host(Some("")), "pod-x7k2p");
    assert_eq!(host(None), "pod-x7k2p");
}

#[test]
fn fleet_and_kubelet_pods_settings() {
    let c = parse("host = \"gpu-node-7\"\n[fleet]\njob_label = \"run_id\"\nmulti_node = true\n[kubernetes]\nkubelet_pods = true\n")
        .expect("valid");
    assert_eq!(c.fleet.job_label.as_deref(), Some("run_id"));
    assert!(c.fleet.multi_node);
    let k = c.kubernetes.kubelet_pods.expect("on");
    assert_eq!(k.url, "https://gpu-node-7:10250/pods");
    assert_eq!(
        k.token_file,
        std::path::Path::new("/var/run/secrets/kubernetes.io/serviceaccount/token")
    );
    assert!(!k.insecure_skip_verify);
    let c = parse("").expect("defaults");
    assert_eq!((c.fleet.job_label, c.fleet.multi_node), (None, false));
    assert!(
        c.kubernetes.kubelet_pods.is_none(),
        "off by default: it needs nodes/proxy"
    );
    let e = err("[fleet]\njob_label = \"run id\"\n");
    assert!(
        e.starts_with("g.toml:2:13: `fleet.job_label` = \"run id\" is not a Prometheus label name"),
        "{e}"
    );
    let e = err("[kubernetes]\nkubelet_pods = true\nkubelet_pods_url = \"kubelet:10250\"\n");
    assert!(e.contains("`kubernetes.kubelet_pods_url`"), "{e}");
    let e = err("[fleet]\nmulti_nodes = true\n");
    assert!(e.contains("multi_nodes"), "{e}");
}

#[test]
fn xid_overrides_are_checked_where_they_are_written() {
    use crate::config::{OverrideClass, XidOverride};
    let c = parse(
        "[xid]\nkernel_log = false\n[[xid.override]]\ncodes = [13, 31]\nclass = \"ignore\"\n\
         [[xid.override]]\ncodes = [94]\nclass = \"hardware\"\ncount = 3\nwithin = \"1h\"\n",
    )
    .expect("valid");
    assert!(!c.xid.kernel_log);
    assert_eq!(
        c.xid.overrides,
        [
            XidOverride {
                codes: vec![13, 31],
                class: OverrideClass::Ignore,
                count_within: None
            },
            XidOverride {
                codes: vec![94],
                class: OverrideClass::Hardware,
                count_within: Some((3, std::time::Duration::from_secs(3600)))
            }
        ]
    );
    let e = err("[[xid.override]]\ncodes = [13]\nclass = \"benign\"\n");
    assert!(
        e.starts_with("g.toml:3:9: `xid.override.class` = \"benign\" is not a class"),
        "{e}"
    );
    let e = err("[[xid.override]]\ncodes = [13, 0]\nclass = \"ignore\"\n");
    assert!(
        e.starts_with("g.toml:2:14: `xid.override.codes`: 0 is not an XID number"),
        "{e}"
    );
    let e = err(
        "[[xid.override]]\ncodes = [13]\nclass = \"ignore\"\n[[xid.override]]\ncodes = [13]\nclass = \"application\"\n",
    );
    assert!(
        e.contains("XID 13 is already in another `[[xid.override]]`"),
        "{e}"
    );
    let e = err("[[xid.override]]\ncodes = [94]\nclass = \"hardware\"\ncount = 3\n");
    assert!(e.contains("`count` and `within` go together"), "{e}");
    let e = err("[[xid.override]]\ncodes = [13]\nclass = \"ignore\"\ncount = 3\nwithin = \"1h\"\n");
    assert!(e.contains("apply to class = \"hardware\" only"), "{e}");
    let e =
        err("[[xid.override]]\ncodes = [94]\nclass = \"hardware\"\ncount = 3\nwithin = \"soon\"\n");
    assert!(
        e.contains("`xid.override.within` = \"soon\" is not a duration"),
        "{e}"
    );
    let e = err("[[xid.override]]\ncodes = [94]\nclass = \"hardware\"\nevery = 3\n");
    assert!(e.contains("every"), "{e}");
}

#[test]
fn remediation_is_off_by_default_dry_run_first_and_checked() {
    assert_eq!(parse("").expect("valid").remediation, None);
    // Present but not enabled: off.
    let c = parse("[remediation]\naction = \"slurm\"\n").expect("valid");
    assert_eq!(c.remediation, None);
    let c = parse("host = \"gpu-17.cluster\"\n[remediation]\nenabled = true\naction = \"slurm\"\n")
        .expect("valid");
    let r = c.remediation.expect("on");
    assert!(r.dry_run, "dry run unless said otherwise");
    assert_eq!(r.node, "gpu-17");
    assert_eq!(r.max_actions_per_hour, 1);
    assert!(r.health.iter().any(|h| h == "gpu_lost"));
    assert!(r.alerts.iter().any(|a| a == "gpu_xid_error"));
    let e = err("[remediation]\nenabled = true\naction = \"drain\"\n");
    assert!(
        e.starts_with("g.toml:3:10: `remediation.action` = \"drain\" is not an action"),
        "{e}"
    );
    let e = err("[remediation]\nenabled = true\naction = \"kubernetes\"\n");
    assert!(
        e.contains("`remediation.kubernetes.token_file` is missing"),
        "{e}"
    );
    let e = err("[remediation]\nenabled = true\naction = \"slurm\"\nmax_actions_per_hour = 0\n");
    assert!(e.starts_with("g.toml:4:24:"), "{e}");
    let e = err("[remediation]\nenabled = true\naction = \"slurm\"\nhealth = [\"GPU Lost\"]\n");
    assert!(
        e.contains("`remediation.health` entry \"GPU Lost\" is not known"),
        "{e}"
    );
}

#[test]
fn usage_prices_and_the_digest_are_checked_where_they_are_written() {
    let c = parse(
        "[usage]\ncost_per_gpu_hour = { \"NVIDIA H100 80GB HBM3\" = 2.5, default = 1.0 }\ncurrency = \"EUR\"\n\
         digest = \"weekly\"\nday = \"fri\"\nhour = 17\nzone = \"Europe/Berlin\"\n",
    )
    .expect("valid");
    assert_eq!(c.usage.rate(Some("NVIDIA H100 80GB HBM3")), Some(2.5));
    assert_eq!(c.usage.rate(Some("NVIDIA A100-SXM4-40GB")), Some(1.0));
    assert_eq!(c.usage.currency, "EUR");
    let d = c.usage.digest.expect("digest");
    assert_eq!(d.day, chrono::Weekday::Fri);
    assert_eq!((d.hour, d.zone), (17, chrono_tz::Europe::Berlin));
    // Off by default, no price: no cost (never 0).
    let c = parse("").expect("valid");
    assert!(c.usage.digest.is_none());
    assert_eq!(c.usage.rate(Some("NVIDIA H100 80GB HBM3")), None);
    let e = err("[usage]\ncost_per_gpu_hour = { default = -1.0 }\n");
    assert!(
        e.starts_with("g.toml:2:33: `usage.cost_per_gpu_hour` of \"default\" = -1 is not a price"),
        "{e}"
    );
    let e = err("[usage]\ndigest = \"monthly\"\n");
    assert!(
        e.starts_with("g.toml:2:10: `usage.digest` = \"monthly\" is not a period"),
        "{e}"
    );
    let e = err("[usage]\ndigest = \"weekly\"\ndigest_zone = \"Mars/Olympus\"\n");
    assert!(
        e.starts_with("g.toml:3:15: `usage.digest_zone` = \"Mars/Olympus\" is not a time zone"),
        "{e}"
    );
    let e = err("[usage]\ndigest_hour = 24\n");
    assert!(e.contains("is not an hour"), "{e}");
}
