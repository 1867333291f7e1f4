//! Stage one: serde structs mirroring the file, then `compile` into [`Config`] with every
//! value checked. Values that need checking are `Spanned` so errors point at them.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::error::{ConfigError, ConfigErrors};
use super::notify::RawNotify;
use super::prometheus::RawPrometheus;
use super::{Config, HttpConfig, Kubelet, KubernetesConfig, LogFormat, ProcessesConfig};

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    host: Option<Spanned<String>>,
    database: Option<PathBuf>,
    nvml_library: Option<PathBuf>,
    interval: Option<Spanned<String>>,
    sample_deadline: Option<Spanned<String>>,
    inventory_interval: Option<Spanned<String>>,
    lost_probe_after: Option<Spanned<String>>,
    commit_interval: Option<Spanned<String>>,
    retention: Option<Spanned<String>>,
    rollup_retention: Option<Spanned<String>>,
    max_db_size: Option<Spanned<SizeValue>>,
    #[serde(default)]
    processes: RawProcesses,
    #[serde(default)]
    kubernetes: RawKubernetes,
    #[serde(default)]
    http: RawHttp,
    prometheus: Option<Spanned<RawPrometheus>>,
    #[serde(default)]
    remote_write: Vec<Spanned<super::remote_write::RawRemoteWrite>>,
    #[serde(default)]
    rules: RawRules,
    #[serde(default)]
    notify: RawNotify,
    #[serde(default)]
    log: RawLog,
    #[serde(default)]
    xid: super::xid::RawXid,
    analysis: Option<Spanned<super::analysis::RawAnalysis>>,
    remediation: Option<Spanned<super::remediation::RawRemediation>>,
    #[serde(default)]
    usage: super::usage::RawUsage,
    #[serde(default)]
    fleet: RawFleet,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawFleet {
    job_label: Option<Spanned<String>>,
    multi_node: Option<bool>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLog {
    format: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawRules {
    default_rules: Option<bool>,
    eval_interval: Option<Spanned<String>>,
    #[serde(default)]
    files: Vec<PathBuf>,
}

/// A size written as a string ("2GiB") or a plain number of bytes.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum SizeValue {
    Bytes(i64),
    Text(String),
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawProcesses {
    enabled: Option<bool>,
    #[serde(default)]
    redact_patterns: Vec<Spanned<String>>,
    proc_root: Option<PathBuf>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawKubernetes {
    enabled: Option<Spanned<RawSwitch>>,
    pod_resources_socket: Option<PathBuf>,
    pod_logs_dir: Option<PathBuf>,
    kubelet_pods: Option<bool>,
    kubelet_pods_url: Option<Spanned<String>>,
    kubelet_token_file: Option<PathBuf>,
    kubelet_ca_file: Option<PathBuf>,
    kubelet_insecure_skip_verify: Option<bool>,
}

/// `true`, `false` or a word (`"auto"`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawSwitch {
    Bool(bool),
    Word(String),
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    enabled: Option<bool>,
    listen: Option<Spanned<String>>,
    stall_after: Option<Spanned<String>>,
    metrics_names: Option<Spanned<String>>,
    token: Option<Spanned<String>>,
    token_env: Option<Spanned<String>>,
    token_file: Option<Spanned<String>>,
    public_metrics: Option<bool>,
    tls_cert_file: Option<Spanned<String>>,
    tls_key_file: Option<Spanned<String>>,
}

/// Collects errors while compiling.
pub(super) struct Checker<'a> {
    origin: &'a Path,
    text: &'a str,
    pub(super) errors: Vec<ConfigError>,
}

impl Checker<'_> {
    pub(super) fn error(&mut self, span: std::ops::Range<usize>, message: String, hint: &str) {
        self.errors
            .push(ConfigError::at(self.origin, self.text, Some(span), message).with_hint(hint));
    }

    /// Parses a duration like "1s", "800ms", "7d" within `[min, max]`.
    pub(super) fn duration(
        &mut self,
        key: &str,
        value: &Option<Spanned<String>>,
        default: Duration,
        min: Duration,
        max: Duration,
    ) -> Duration {
        let Some(v) = value else { return default };
        match humantime::parse_duration(v.get_ref().trim()) {
            Ok(d) if d >= min && d <= max => d,
            Ok(_) => {
                self.error(
                    v.span(),
                    format!("`{key}` = {:?} is out of range", v.get_ref()),
                    &format!(
                        "use a duration between {} and {}",
                        humantime::format_duration(min),
                        humantime::format_duration(max)
                    ),
                );
                default
            }
            Err(e) => {
                self.error(
                    v.span(),
                    format!("`{key}` = {:?} is not a duration: {e}", v.get_ref()),
                    "write a number with a unit, e.g. \"500ms\", \"1s\", \"5m\", \"7d\"",
                );
                default
            }
        }
    }
}

impl RawConfig {
    pub fn compile(self, origin: &Path, text: &str) -> Result<Config, ConfigErrors> {
        let d = Config::default();
        let mut c = Checker {
            origin,
            text,
            errors: Vec::new(),
        };
        let ms = Duration::from_millis;
        let s = Duration::from_secs;
        let day = 86_400;

        let host = match &self.host {
            Some(h) if h.get_ref().trim().is_empty() => {
                c.error(
                    h.span(),
                    "`host` is empty".into(),
                    "remove the key to use NODE_NAME or the machine's host name",
                );
                d.host.clone()
            }
            Some(h) => h.get_ref().trim().to_string(),
            None => d.host.clone(),
        };
        let interval = c.duration("interval", &self.interval, d.interval, ms(100), s(3600));
        let default_deadline = interval.mul_f64(0.8);
        let sample_deadline = c.duration(
            "sample_deadline",
            &self.sample_deadline,
            default_deadline,
            ms(10),
            s(3600),
        );
        if let Some(v) = &self.sample_deadline
            && sample_deadline > interval
        {
            c.error(
                v.span(),
                "`sample_deadline` is longer than `interval`".into(),
                "a tick must end before the next begins: make it at most the interval",
            );
        }
        let inventory_interval = c.duration(
            "inventory_interval",
            &self.inventory_interval,
            d.inventory_interval,
            s(1),
            s(day),
        );
        let lost_probe_after = c.duration(
            "lost_probe_after",
            &self.lost_probe_after,
            d.lost_probe_after,
            s(1),
            s(3600),
        );
        let commit_interval = c.duration(
            "commit_interval",
            &self.commit_interval,
            d.commit_interval,
            Duration::ZERO,
            s(300),
        );
        let retention = c.duration(
            "retention",
            &self.retention,
            d.retention,
            s(60),
            s(3650 * day),
        );
        let rollup_retention = c.duration(
            "rollup_retention",
            &self.rollup_retention,
            d.rollup_retention,
            s(60),
            s(3650 * day),
        );
        let max_db_size = match &self.max_db_size {
            None => d.max_db_size,
            Some(v) => {
                let parsed = match v.get_ref() {
                    SizeValue::Bytes(n) => u64::try_from(*n).map_err(|_| "negative".to_string()),
                    SizeValue::Text(t) => t.trim().parse::<bytesize::ByteSize>().map(|b| b.0),
                };
                match parsed {
                    Ok(n) if n >= 1024 * 1024 => n,
                    Ok(_) => {
                        c.error(
                            v.span(),
                            "`max_db_size` is below 1 MiB".into(),
                            "give room for at least a few minutes of samples, e.g. \"2GiB\"",
                        );
                        d.max_db_size
                    }
                    Err(e) => {
                        c.error(
                            v.span(),
                            format!("`max_db_size` is not a size: {e}"),
                            "write bytes or a number with a unit, e.g. \"500MiB\", \"2GiB\"",
                        );
                        d.max_db_size
                    }
                }
            }
        };

        let mut redact_patterns = Vec::new();
        for p in &self.processes.redact_patterns {
            match regex::Regex::new(p.get_ref()) {
                Ok(_) => redact_patterns.push(p.get_ref().clone()),
                Err(e) => {
                    let first = e
                        .to_string()
                        .lines()
                        .last()
                        .unwrap_or("")
                        .trim()
                        .to_string();
                    c.error(
                        p.span(),
                        format!(
                            "invalid regular expression in `processes.redact_patterns`: {first}"
                        ),
                        "see https://docs.rs/regex for the syntax",
                    );
                }
            }
        }

        let listen = match &self.http.listen {
            None => d.http.listen,
            Some(v) => match v.get_ref().parse::<SocketAddr>() {
                Ok(a) => a,
                Err(_) => {
                    c.error(
                        v.span(),
                        format!("`http.listen` = {:?} is not an address", v.get_ref()),
                        "write IP:PORT, e.g. \"127.0.0.1:9835\" (binding beyond loopback exposes the API)",
                    );
                    d.http.listen
                }
            },
        };
        let metrics_names = match self
            .http
            .metrics_names
            .as_ref()
            .map(|v| (v.span(), v.get_ref()))
        {
            None => d.http.metrics_names,
            Some((_, w)) if w == "dcgm" => super::MetricNames::Dcgm,
            Some((_, w)) if w == "gpuwatch" => super::MetricNames::Gpuwatch,
            Some((span, w)) => {
                c.error(
                    span,
                    format!("`http.metrics_names` = {w:?} is not a naming"),
                    "use \"dcgm\" (dcgm-exporter's names: NVIDIA's Grafana dashboard works unchanged) or \"gpuwatch\" (gpuwatch_gpu_* in base units)",
                );
                d.http.metrics_names
            }
        };
        if let Some(t) = &self.http.token {
            c.error(
                t.span(),
                "`http.token` would put a secret in the config file".into(),
                "use token_env = \"VAR\" or token_file = \"PATH\" instead",
            );
        }
        let token = super::prometheus::secret(
            &mut c,
            "http.token",
            &self.http.token_env,
            &self.http.token_file,
        )
        .map(|(_, s)| s);
        if self.http.enabled != Some(false)
            && !listen.ip().is_loopback()
            && token.is_none()
            && self.http.token.is_none()
        {
            let span = self.http.listen.as_ref().map(|v| v.span());
            let msg = format!(
                "`http.listen` = \"{listen}\" serves the API beyond this machine without a token"
            );
            let hint = "set token_env = \"VAR\" or token_file = \"PATH\" (clients send `Authorization: Bearer <token>`), or listen on 127.0.0.1";
            match span {
                Some(span) => c.error(span, msg, hint),
                None => c
                    .errors
                    .push(ConfigError::at(c.origin, c.text, None, msg).with_hint(hint)),
            }
        }
        let tls = match (&self.http.tls_cert_file, &self.http.tls_key_file) {
            (None, None) => None,
            (Some(cert), Some(key)) => {
                Some((PathBuf::from(cert.get_ref()), PathBuf::from(key.get_ref())))
            }
            (Some(v), None) | (None, Some(v)) => {
                c.error(
                    v.span(),
                    "`http.tls_cert_file` and `http.tls_key_file` go together".into(),
                    "set both (PEM certificate chain and its private key), or neither for plain HTTP",
                );
                None
            }
        };
        let kubelet = match self
            .kubernetes
            .enabled
            .as_ref()
            .map(|v| (v.span(), v.get_ref()))
        {
            None => d.kubernetes.enabled,
            Some((_, RawSwitch::Bool(true))) => Kubelet::On,
            Some((_, RawSwitch::Bool(false))) => Kubelet::Off,
            Some((_, RawSwitch::Word(w))) if w == "auto" => Kubelet::Auto,
            Some((span, RawSwitch::Word(w))) => {
                c.error(
                    span,
                    format!("`kubernetes.enabled` = {w:?} is not a setting"),
                    "use true, false or \"auto\" (use the kubelet when its socket exists)",
                );
                d.kubernetes.enabled
            }
        };
        let kubelet_pods = self.kubernetes.kubelet_pods.unwrap_or(false).then(|| {
            let sa = Path::new(super::SERVICE_ACCOUNT_DIR);
            let url = match &self.kubernetes.kubelet_pods_url {
                None => format!("https://{host}:10250/pods"),
                Some(u) => {
                    let ok = (u.get_ref().starts_with("https://")
                        || u.get_ref().starts_with("http://"))
                        && reqwest::Url::parse(u.get_ref()).is_ok();
                    if !ok {
                        c.error(
                            u.span(),
                            format!("`kubernetes.kubelet_pods_url` = {:?} is not an http(s) URL", u.get_ref()),
                            "leave it out for https://<NODE_NAME>:10250/pods, or write the kubelet's full URL",
                        );
                    }
                    u.get_ref().clone()
                }
            };
            super::KubeletPods {
                url,
                token_file: self
                    .kubernetes
                    .kubelet_token_file
                    .clone()
                    .unwrap_or_else(|| sa.join("token")),
                ca_file: self
                    .kubernetes
                    .kubelet_ca_file
                    .clone()
                    .or_else(|| Some(sa.join("ca.crt"))),
                insecure_skip_verify: self.kubernetes.kubelet_insecure_skip_verify.unwrap_or(false),
            }
        });
        let log_format = match self.log.format.as_ref().map(|v| (v.span(), v.get_ref())) {
            None => d.log_format,
            Some((_, w)) if w == "text" => LogFormat::Text,
            Some((_, w)) if w == "json" => LogFormat::Json,
            Some((span, w)) => {
                c.error(
                    span,
                    format!("`log.format` = {w:?} is not a log format"),
                    "use \"text\" (lines for people and the journal) or \"json\" (one object per line, for log shippers)",
                );
                d.log_format
            }
        };
        let stall_after = c.duration(
            "http.stall_after",
            &self.http.stall_after,
            d.http.stall_after.max(interval * 3),
            ms(100),
            s(day),
        );
        let eval_interval = self.rules.eval_interval.as_ref().map(|_| {
            c.duration(
                "rules.eval_interval",
                &self.rules.eval_interval,
                interval,
                interval,
                s(3600),
            )
        });
        let prometheus = self.prometheus.and_then(|p| {
            let span = p.span();
            p.into_inner().compile(&mut c, span, interval)
        });
        let notify = self.notify.compile(&mut c);
        let analysis = self.analysis.and_then(|a| {
            let span = a.span();
            a.into_inner().compile(&mut c, span)
        });
        let usage = self.usage.compile(&mut c);
        let remediation = self.remediation.and_then(|r| {
            let span = r.span();
            r.into_inner().compile(&mut c, span, &host)
        });
        let mut remote_write = Vec::new();
        for (i, r) in self.remote_write.into_iter().enumerate() {
            let span = r.span();
            if let Some(t) = r
                .into_inner()
                .compile(&mut c, span.clone(), i, interval, &host)
            {
                remote_write.push((span, t));
            }
        }
        super::remote_write::check_names(&mut c, &remote_write);
        let remote_write = remote_write.into_iter().map(|(_, t)| t).collect();
        let job_label = self.fleet.job_label.as_ref().and_then(|v| {
            let name = v.get_ref().trim();
            let valid = name
                .chars()
                .enumerate()
                .all(|(i, ch)| ch == '_' || ch.is_ascii_alphabetic() || (i > 0 && ch.is_ascii_digit()));
            if name.is_empty() || !valid || name.starts_with("__") {
                c.error(
                    v.span(),
                    format!("`fleet.job_label` = {name:?} is not a Prometheus label name"),
                    "name the label of the training series whose value is equal on every node of a job, e.g. \"run_id\" or \"jobset_name\"",
                );
                return None;
            }
            Some(name.to_string())
        });

        let xid = self.xid.compile(&mut c);
        if !c.errors.is_empty() {
            return Err(ConfigErrors(c.errors));
        }
        Ok(Config {
            host,
            database: self.database.unwrap_or(d.database),
            nvml_library: self.nvml_library,
            interval,
            sample_deadline,
            inventory_interval,
            lost_probe_after,
            commit_interval,
            retention,
            rollup_retention,
            max_db_size,
            processes: ProcessesConfig {
                enabled: self.processes.enabled.unwrap_or(true),
                redact_patterns,
                proc_root: self.processes.proc_root.unwrap_or(d.processes.proc_root),
            },
            kubernetes: KubernetesConfig {
                enabled: kubelet,
                pod_resources_socket: self
                    .kubernetes
                    .pod_resources_socket
                    .unwrap_or(d.kubernetes.pod_resources_socket),
                pod_logs_dir: self
                    .kubernetes
                    .pod_logs_dir
                    .unwrap_or(d.kubernetes.pod_logs_dir),
                kubelet_pods,
            },
            http: HttpConfig {
                enabled: self.http.enabled.unwrap_or(true),
                listen,
                stall_after,
                metrics_names,
                token,
                public_metrics: self.http.public_metrics.unwrap_or(false),
                tls,
            },
            prometheus,
            remote_write,
            notify,
            analysis,
            remediation,
            usage,
            log_format,
            xid,
            fleet: super::FleetConfig {
                job_label,
                multi_node: self.fleet.multi_node.unwrap_or(false),
            },
            rules: super::RulesConfig {
                default_rules: self.rules.default_rules.unwrap_or(true),
                eval_interval,
                files: self
                    .rules
                    .files
                    .into_iter()
                    .map(|f| match origin.parent() {
                        Some(dir) if f.is_relative() => dir.join(f),
                        _ => f,
                    })
                    .collect(),
            },
        })
    }
}
