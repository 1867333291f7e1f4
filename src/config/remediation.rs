//! The `[remediation]` section: taking a broken GPU's node out of service — Slurm's drain or
//! a Kubernetes node condition — when the health verdict or an alert says the hardware is at
//! fault (docs/REMEDIATION.md). Absent or `enabled = false`: nothing ever acts.
//!
//! Invariants: off by default; `dry_run` is on unless set to false (the first run says what it
//! would do); which alerts and health codes act are checked against the known ones; the
//! Kubernetes token is never in the file, only where to read it; the breaker's limit is at
//! least 1 an hour.

use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use super::raw::Checker;

/// Health codes that act unless `health` says otherwise: the hardware is broken now.
pub const DEFAULT_HEALTH: &[&str] = &[
    "gpu_lost",
    "row_remap_failure",
    "retired_pages_limit",
    "recovery_action",
    "hw_power_brake_slowdown",
    "hw_thermal_slowdown",
    "nvlink_down",
    "fabric_failed",
    "fabric_not_ready",
];

/// Alerts that act unless `alerts` says otherwise (the daemon's path).
pub const DEFAULT_ALERTS: &[&str] = &[
    "gpu_lost",
    "gpu_xid_error",
    "gpu_ecc_uncorrected",
    "gpu_nvlink_down",
    "gpu_fabric_not_ready",
];

/// What taking the node out of service means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `scontrol update NodeName=… State=DRAIN Reason="gpuwatch: …"`.
    Slurm { scontrol: PathBuf },
    /// The node condition `GpuwatchGPUHealthy=False`, patched through the API server.
    Kubernetes(KubernetesApi),
}

/// The API server gpuwatch patches the node's status on, with its own token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubernetesApi {
    /// `https://host:port`, no trailing `/`.
    pub api_server: String,
    pub token_file: PathBuf,
    pub ca_file: Option<PathBuf>,
}

/// The validated `[remediation]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemediationConfig {
    pub dry_run: bool,
    pub action: Action,
    /// The node's name in the scheduler (Slurm's NodeName, the Kubernetes node).
    pub node: String,
    /// Health codes (docs/HEALTH.md) whose failure acts.
    pub health: Vec<String>,
    /// Alert names whose firing acts (the daemon).
    pub alerts: Vec<String>,
    /// The circuit breaker: at most this many actions in any hour, across restarts.
    pub max_actions_per_hour: u32,
    /// How often the daemon decides.
    pub interval: std::time::Duration,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRemediation {
    enabled: Option<bool>,
    dry_run: Option<bool>,
    action: Option<Spanned<String>>,
    node: Option<Spanned<String>>,
    health: Option<Vec<Spanned<String>>>,
    alerts: Option<Vec<Spanned<String>>>,
    max_actions_per_hour: Option<Spanned<i64>>,
    interval: Option<Spanned<String>>,
    scontrol: Option<PathBuf>,
    #[serde(default)]
    kubernetes: RawKubernetesApi,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawKubernetesApi {
    api_server: Option<Spanned<String>>,
    token_file: Option<PathBuf>,
    ca_file: Option<PathBuf>,
}

impl RawRemediation {
    /// Checks the section; `None` when it is off or has errors (pushed into `c`). `host` is
    /// the configured host name (the default node name: its first label, as Slurm's).
    pub(super) fn compile(
        self,
        c: &mut Checker<'_>,
        section: std::ops::Range<usize>,
        host: &str,
    ) -> Option<RemediationConfig> {
        let before = c.errors.len();
        let action = match self
            .action
            .as_ref()
            .map(|a| (a.span(), a.get_ref().as_str()))
        {
            None => {
                c.error(
                    section.clone(),
                    "`remediation.action` is missing".into(),
                    "add action = \"slurm\" (drain the node with scontrol) or action = \"kubernetes\" (set the node condition GpuwatchGPUHealthy=False)",
                );
                None
            }
            Some((_, "slurm")) => Some(Action::Slurm {
                scontrol: self.scontrol.clone().unwrap_or_else(|| "scontrol".into()),
            }),
            Some((span, "kubernetes")) => self.kubernetes.compile(c, span),
            Some((span, other)) => {
                c.error(
                    span,
                    format!("`remediation.action` = {other:?} is not an action"),
                    "use \"slurm\" or \"kubernetes\"",
                );
                None
            }
        };
        let node = match &self.node {
            Some(n) if !n.get_ref().trim().is_empty() => n.get_ref().trim().to_string(),
            Some(n) => {
                c.error(
                    n.span(),
                    "`remediation.node` is empty".into(),
                    "name the node as the scheduler knows it, or remove the key for this host's name",
                );
                String::new()
            }
            None => std::env::var("NODE_NAME")
                .ok()
                .filter(|n| !n.is_empty() && matches!(action, Some(Action::Kubernetes(_))))
                .unwrap_or_else(|| host.split('.').next().unwrap_or(host).to_string()),
        };
        let health = names(
            c,
            "remediation.health",
            &self.health,
            DEFAULT_HEALTH,
            is_name,
            "a health code of docs/HEALTH.md, e.g. \"gpu_lost\"",
        );
        let alerts = names(
            c,
            "remediation.alerts",
            &self.alerts,
            DEFAULT_ALERTS,
            is_name,
            "an alert (rule) name, e.g. \"gpu_xid_error\"",
        );
        let max = match &self.max_actions_per_hour {
            None => 1,
            Some(n) if (1..=100).contains(n.get_ref()) => *n.get_ref() as u32,
            Some(n) => {
                c.error(
                    n.span(),
                    format!(
                        "`remediation.max_actions_per_hour` = {} is out of range",
                        n.get_ref()
                    ),
                    "use 1 to 100 (a breaker that allows nothing is `enabled = false`)",
                );
                1
            }
        };
        let s = std::time::Duration::from_secs;
        let interval = c.duration("remediation.interval", &self.interval, s(15), s(1), s(3600));
        if c.errors.len() > before || self.enabled != Some(true) {
            return None;
        }
        Some(RemediationConfig {
            interval,
            dry_run: self.dry_run.unwrap_or(true),
            action: action?,
            node,
            health,
            alerts,
            max_actions_per_hour: max,
        })
    }
}

impl RawKubernetesApi {
    fn compile(&self, c: &mut Checker<'_>, at: std::ops::Range<usize>) -> Option<Action> {
        let api_server = match &self.api_server {
            Some(u) => {
                let text = u.get_ref().trim().trim_end_matches('/');
                let ok = reqwest::Url::parse(text).is_ok_and(|p| {
                    matches!(p.scheme(), "https" | "http")
                        && p.username().is_empty()
                        && p.password().is_none()
                });
                if !ok {
                    c.error(
                        u.span(),
                        format!("`remediation.kubernetes.api_server` = {:?} is not an http(s) URL without credentials", u.get_ref()),
                        "write the API server's URL, e.g. \"https://kubernetes.default.svc\"; the token goes in token_file",
                    );
                }
                text.to_string()
            }
            None => match (
                std::env::var("KUBERNETES_SERVICE_HOST"),
                std::env::var("KUBERNETES_SERVICE_PORT"),
            ) {
                (Ok(h), Ok(p)) if !h.is_empty() => format!("https://{h}:{p}"),
                _ => "https://kubernetes.default.svc".to_string(),
            },
        };
        let Some(token_file) = self.token_file.clone() else {
            c.error(
                at,
                "`remediation.kubernetes.token_file` is missing".into(),
                "give the token of gpuwatch's own remediation service account (RBAC: patch nodes/status, get nodes; docs/REMEDIATION.md), e.g. token_file = \"/var/run/secrets/gpuwatch-remediation/token\"",
            );
            return None;
        };
        Some(Action::Kubernetes(KubernetesApi {
            api_server,
            token_file,
            ca_file: self
                .ca_file
                .clone()
                .or_else(|| Some(PathBuf::from(super::SERVICE_ACCOUNT_DIR).join("ca.crt"))),
        }))
    }
}

/// A code or rule name: lower-case words joined by `_` (which codes exist is the health
/// module's to say, above this layer: `remediate` checks them when it starts).
fn is_name(n: &str) -> bool {
    !n.is_empty()
        && n.chars()
            .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_')
}

/// A list of names, each checked; the default when absent.
fn names(
    c: &mut Checker<'_>,
    key: &str,
    given: &Option<Vec<Spanned<String>>>,
    default: &[&str],
    known: impl Fn(&str) -> bool,
    what: &str,
) -> Vec<String> {
    let Some(given) = given else {
        return default.iter().map(|s| s.to_string()).collect();
    };
    let mut out = Vec::new();
    for n in given {
        let name = n.get_ref().trim();
        if known(name) {
            out.push(name.to_string());
        } else {
            c.error(
                n.span(),
                format!("`{key}` entry {:?} is not known", n.get_ref()),
                &format!("write {what}"),
            );
        }
    }
    out
}
