//! Configuration: one TOML file, parsed in two stages (ripgrep's low/high args).
//!
//! 1. [`raw`] holds serde structs that mirror the file exactly (`deny_unknown_fields`), with
//!    spans on the values that need checking.
//! 2. [`Config`] is the compiled, validated form the rest of the daemon uses.
//!
//! Invariants: every error names `file:line:col`, says what is wrong and how to fix it, and all
//! errors of a file are reported at once. Secrets never enter this module: it holds the names
//! of env vars and `*_file` paths to read them from (see [`SecretSource`]).

pub mod analysis;
mod error;
mod notify;
mod prometheus;
mod raw;
mod receivers;
pub mod remediation;
mod remote_write;
pub mod usage;
mod xid;
pub use remote_write::RemoteWriteConfig;
pub use xid::{DEFAULT_KMSG_PATH, OverrideClass, XidConfig, XidOverride};

pub use error::{ConfigError, ConfigErrors};
pub use notify::{
    AlertmanagerConfig, EmailConfig, GroupTiming, NotifyConfig, ReceiverConfig, ReceiverKind,
    RouteConfig, SlackConfig, SmtpTls, UrlSource, WebhookConfig, is_loopback_host,
};
pub use prometheus::{
    DEFAULT_LOSS_QUERY, DEFAULT_STEP_QUERY, PrometheusAuth, PrometheusConfig, QueryMethod,
    SecretSource, TrainingQueries,
};

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Default location of the configuration file.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/gpuwatch/gpuwatch.toml";
/// Default database location.
pub const DEFAULT_DATABASE: &str = "/var/lib/gpuwatch/gpuwatch.db";
/// `[processes] proc_root`: the host's procfs.
pub const DEFAULT_PROC_ROOT: &str = "/proc";
/// `[kubernetes] pod_logs_dir`: the kubelet's pod log directories.
pub const DEFAULT_POD_LOGS_DIR: &str = "/var/log/pods";

/// The validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Host name stored with every sample (defaults to the machine's host name).
    pub host: String,
    pub database: PathBuf,
    /// NVML library to load; `None` = the system's `libnvidia-ml.so.1`.
    pub nvml_library: Option<PathBuf>,
    pub interval: Duration,
    /// How long one tick may take before a GPU's sample is recorded as a gap.
    pub sample_deadline: Duration,
    /// How often the inventory (names, limits, thresholds) is re-read.
    pub inventory_interval: Duration,
    /// How long a lost GPU (GPU_IS_LOST, a fatal XID, missed deadlines) is left alone before
    /// the first probe asks whether it is back (then the wait doubles, up to an hour).
    pub lost_probe_after: Duration,
    /// How long ticks may wait in memory to be written together, in one transaction (zero:
    /// each tick in its own). Alerts are evaluated once the ticks are written, so this is
    /// also the most they wait; a tick with events (an XID) is written at once.
    pub commit_interval: Duration,
    pub retention: Duration,
    pub rollup_retention: Duration,
    pub max_db_size: u64,
    pub processes: ProcessesConfig,
    pub kubernetes: KubernetesConfig,
    pub http: HttpConfig,
    /// Where training metrics come from; `None` without a `[prometheus]` section.
    pub prometheus: Option<PrometheusConfig>,
    /// Where the series of `/metrics` are pushed (Prometheus remote write); none by default.
    pub remote_write: Vec<RemoteWriteConfig>,
    pub rules: RulesConfig,
    /// Receivers, routes and delivery timing (no receivers: alerts are only logged).
    pub notify: NotifyConfig,
    /// `[log] format`: how the daemon writes its log lines (`--log-format` wins).
    pub log_format: LogFormat,
    /// `[xid]`: where XIDs come from besides NVML's event API.
    pub xid: XidConfig,
    /// `[analysis]`: the language model that explains incidents; `None`: off (the default).
    pub analysis: Option<analysis::AnalysisConfig>,
    /// `[fleet]`: how this node names the multi-node job its GPUs work for.
    pub fleet: FleetConfig,
    /// `[remediation]`: taking a broken GPU's node out of service; `None`: off (the default).
    pub remediation: Option<remediation::RemediationConfig>,
    /// `[usage]`: GPU-hour prices and the usage digest.
    pub usage: usage::UsageConfig,
}

/// `[fleet]`: the training job's identity across nodes (`training_job`, docs/FLEET.md).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FleetConfig {
    /// A label of the training step series whose value names the job on every node; it wins
    /// over the pod name (`None`: Slurm's job id, else the pod's controller name).
    pub job_label: Option<String>,
    /// Every job on this node spans nodes: its hang alerts go through Alertmanager only, so
    /// the fleet's `GpuwatchJobHang` can inhibit them.
    pub multi_node: bool,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Lines for people (colour only on a terminal) and the journal.
    #[default]
    Text,
    /// One JSON object per line (time, level, message, fields), for log shippers.
    Json,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RulesConfig {
    /// Load the shipped default rules (embedded in the binary).
    pub default_rules: bool,
    /// Rule files, directories of `*.toml` rule files, or globs, loaded in addition to (or, with
    /// `default_rules = false`, instead of) the defaults. Relative paths are relative to the
    /// config file.
    pub files: Vec<PathBuf>,
    /// Evaluate the rules at most this often (`None`: at every sample, the default).
    pub eval_interval: Option<Duration>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ProcessesConfig {
    pub enabled: bool,
    /// Extra regular expressions whose matches are redacted from command lines.
    pub redact_patterns: Vec<String>,
    /// Where the processes of the GPUs are looked up: the host's `/proc`, mounted elsewhere
    /// when gpuwatch runs in a container (`/host/proc`).
    pub proc_root: PathBuf,
}

/// `[kubernetes] enabled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kubelet {
    /// `"auto"`: used when the socket exists (a Kubernetes node), silent otherwise.
    Auto,
    /// `true`: used, and a missing socket is reported.
    On,
    Off,
}

#[derive(Debug, Clone, PartialEq)]
pub struct KubernetesConfig {
    /// Ask the kubelet which pod each GPU is allocated to.
    pub enabled: Kubelet,
    /// The kubelet's pod-resources socket.
    pub pod_resources_socket: PathBuf,
    /// The kubelet's pod log directories (`<namespace>_<pod>_<uid>/`): a pod UID from a
    /// process's cgroup names its pod and namespace there.
    pub pod_logs_dir: PathBuf,
    /// `[kubernetes] kubelet_pods`: the pods' owners from the kubelet's `/pods` (a job's
    /// name across nodes); `None`: off (the default: it needs `nodes/proxy`).
    pub kubelet_pods: Option<KubeletPods>,
}

/// Where the kubelet's `/pods` is and how to authenticate (the pod's service account).
#[derive(Debug, Clone, PartialEq)]
pub struct KubeletPods {
    /// `https://<node>:10250/pods` (`[kubernetes] kubelet_pods_url`).
    pub url: String,
    /// The bearer token, read at each request (the service account's, rotated by the
    /// kubelet).
    pub token_file: PathBuf,
    /// The CA that signed the kubelet's serving certificate (the cluster's CA when the
    /// kubelet's certificate is bootstrapped from it); `None`: the system roots.
    pub ca_file: Option<PathBuf>,
    /// Accept any certificate (a kubelet's self-signed one). Dangerous: the token travels.
    pub insecure_skip_verify: bool,
}

/// The service account's token and CA, as Kubernetes mounts them into a pod.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

#[derive(Debug, Clone, PartialEq)]
pub struct HttpConfig {
    pub enabled: bool,
    pub listen: SocketAddr,
    /// `/healthz` reports unhealthy when no tick completed for this long.
    pub stall_after: Duration,
    /// The names `/metrics` gives the GPU metrics.
    pub metrics_names: MetricNames,
    /// The bearer token every request but `/healthz` must carry (required when `listen` is
    /// not a loopback address).
    pub token: Option<SecretSource>,
    /// `/metrics` answers without the token (for scrapers that cannot send one).
    pub public_metrics: bool,
    /// HTTPS: (certificate chain, private key), PEM files read at start.
    pub tls: Option<(PathBuf, PathBuf)>,
}

/// `[http] metrics_names`: dcgm-exporter's names and labels (NVIDIA's dashboard works
/// unchanged), or gpuwatch's own in base units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MetricNames {
    #[default]
    Dcgm,
    Gpuwatch,
}

/// The first probe of a lost GPU, after its quarantine began (`lost_probe_after`).
pub const DEFAULT_LOST_PROBE_AFTER: Duration = Duration::from_secs(60);

impl Default for Config {
    fn default() -> Self {
        Self {
            host: default_host(),
            database: PathBuf::from(DEFAULT_DATABASE),
            nvml_library: None,
            interval: Duration::from_secs(1),
            sample_deadline: Duration::from_millis(800),
            inventory_interval: Duration::from_secs(300),
            lost_probe_after: DEFAULT_LOST_PROBE_AFTER,
            commit_interval: Duration::from_secs(5),
            retention: Duration::from_secs(7 * 86_400),
            rollup_retention: Duration::from_secs(90 * 86_400),
            max_db_size: 2 * 1024 * 1024 * 1024,
            processes: ProcessesConfig {
                enabled: true,
                redact_patterns: Vec::new(),
                proc_root: PathBuf::from(DEFAULT_PROC_ROOT),
            },
            kubernetes: KubernetesConfig {
                enabled: Kubelet::Auto,
                pod_resources_socket: PathBuf::from("/var/lib/kubelet/pod-resources/kubelet.sock"),
                pod_logs_dir: PathBuf::from(DEFAULT_POD_LOGS_DIR),
                kubelet_pods: None,
            },
            http: HttpConfig {
                enabled: true,
                listen: SocketAddr::from(([127, 0, 0, 1], 9835)),
                stall_after: Duration::from_secs(10),
                metrics_names: MetricNames::Dcgm,
                token: None,
                public_metrics: false,
                tls: None,
            },
            prometheus: None,
            remote_write: Vec::new(),
            notify: NotifyConfig::default(),
            rules: RulesConfig {
                default_rules: true,
                files: Vec::new(),
                eval_interval: None,
            },
            log_format: LogFormat::Text,
            xid: XidConfig::default(),
            analysis: None,
            remediation: None,
            usage: usage::UsageConfig::default(),
            fleet: FleetConfig::default(),
        }
    }
}

impl Config {
    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigErrors::single(ConfigError::io(
                path,
                &e,
                "check the path, or pass --config PATH",
            ))
        })?;
        Self::parse(&text, path)
    }

    /// Parses config text; `origin` names the file in error messages.
    pub fn parse(text: &str, origin: &Path) -> Result<Config, ConfigErrors> {
        let raw: raw::RawConfig = toml::from_str(text)
            .map_err(|e| ConfigErrors::single(ConfigError::from_toml(origin, text, &e)))?;
        raw.compile(origin, text)
    }
}

/// The host a daemon without `host` in its config stores and alerts under: `NODE_NAME` when
/// set (Kubernetes' downward API gives a DaemonSet pod its node's name there; the pod's own
/// host name changes with every rollout), else the machine's host name.
pub fn default_host() -> String {
    host_from(std::env::var("NODE_NAME").ok(), system_hostname)
}

/// `NODE_NAME` (trimmed, when not empty), else `fallback()`.
fn host_from(node_name: Option<String>, fallback: impl FnOnce() -> String) -> String {
    match node_name.map(|n| n.trim().to_string()) {
        Some(n) if !n.is_empty() => n,
        _ => fallback(),
    }
}

/// The machine's host name, or "localhost" when it cannot be read.
pub fn system_hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into a buffer we own.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        let name = String::from_utf8_lossy(&buf[..end]).trim().to_string();
        if !name.is_empty() {
            return name;
        }
    }
    "localhost".to_string()
}

#[cfg(test)]
mod tests;
