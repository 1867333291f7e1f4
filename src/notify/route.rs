//! Routing: which receivers get an alert, in which group, with which timing — decided when
//! the transition is enqueued, from the alert's labels (`rule`, `severity`, `host`, `gpu`,
//! `uuid`, `pid` and the rule's own labels).
//!
//! Invariants: routes are tried in order, the first match wins unless it says `continue`;
//! an alert no route takes goes to `default_receivers`; a receiver gets an alert at most once
//! per transition (the first route that sends it there decides its group); the group key
//! names the route and the values of its `group_by` labels, so the same labels always land
//! in the same group.

use std::collections::BTreeMap;

use crate::config::{GroupTiming, NotifyConfig, ReceiverKind};
use crate::rules::rule::Scope;
use crate::store::outbox::NewNotification;
use crate::transition::Transition;

use super::AlertMsg;
use super::matcher::all_match;

/// Where one alert goes.
#[derive(Debug, Clone, PartialEq)]
pub struct Destination {
    pub receiver: String,
    pub group_key: String,
    pub timing: GroupTiming,
}

#[derive(Debug, Clone)]
pub struct Router {
    cfg: NotifyConfig,
    /// `[fleet] multi_node`: every job here spans nodes.
    multi_node: bool,
}

/// The node's hang alerts: for a job that spans nodes they go through Alertmanager only,
/// where the fleet's `GpuwatchJobHang` inhibits them (docs/FLEET.md).
pub const HANG_RULES: &[&str] = &["training_hang"];

impl Router {
    pub fn new(cfg: &NotifyConfig) -> Self {
        Self {
            cfg: cfg.clone(),
            multi_node: false,
        }
    }

    /// Whether receiver `name` is an Alertmanager.
    fn is_alertmanager(&self, name: &str) -> bool {
        self.cfg
            .receivers
            .iter()
            .any(|x| x.name == name && matches!(x.kind, ReceiverKind::Alertmanager(_)))
    }

    /// The configured receivers.
    pub fn receivers(&self) -> &[crate::config::ReceiverConfig] {
        &self.cfg.receivers
    }

    /// With `[fleet] multi_node`.
    pub fn multi_node(mut self, on: bool) -> Self {
        self.multi_node = on;
        self
    }

    /// Whether an alert is a hang of a job that spans nodes (`[fleet] multi_node`, or the
    /// job's own node count).
    fn fleet_hang(&self, tr: &Transition) -> bool {
        HANG_RULES.contains(&tr.rule.as_str())
            && (self.multi_node || tr.subject.job_nodes.is_some_and(|n| n > 1))
    }

    /// A multi-node job's hang goes to Alertmanager only: the Alertmanager receivers its
    /// routes chose, else every Alertmanager receiver (one group per job). Without any
    /// Alertmanager receiver the routes' own receivers keep it (nothing else could tell).
    fn through_alertmanager(
        &self,
        dests: Vec<Destination>,
        labels: &BTreeMap<String, String>,
    ) -> Vec<Destination> {
        let am: Vec<Destination> = dests
            .iter()
            .filter(|d| self.is_alertmanager(&d.receiver))
            .cloned()
            .collect();
        if !am.is_empty() {
            return am;
        }
        let all: Vec<Destination> = self
            .cfg
            .receivers
            .iter()
            .filter(|x| matches!(x.kind, ReceiverKind::Alertmanager(_)))
            .map(|x| Destination {
                receiver: x.name.clone(),
                group_key: group_key("fleet", &["training_job".to_string()], labels),
                timing: at_once(self.cfg.timing),
            })
            .collect();
        if all.is_empty() { dests } else { all }
    }

    pub fn is_empty(&self) -> bool {
        self.cfg.receivers.is_empty()
    }

    /// The destinations of an alert with these labels.
    pub fn route(&self, labels: &BTreeMap<String, String>) -> Vec<Destination> {
        let mut out: Vec<Destination> = Vec::new();
        let push = |out: &mut Vec<Destination>,
                    idx: String,
                    receivers: &[String],
                    group_by: &[String],
                    timing: GroupTiming| {
            for r in receivers {
                if out.iter().any(|d| d.receiver == *r) {
                    continue;
                }
                out.push(Destination {
                    receiver: r.clone(),
                    group_key: group_key(&idx, group_by, labels),
                    timing: if self.is_alertmanager(r) {
                        at_once(timing)
                    } else {
                        timing
                    },
                });
            }
        };
        let mut matched = false;
        for (i, route) in self.cfg.routes.iter().enumerate() {
            if !all_match(&route.matchers, labels) {
                continue;
            }
            matched = true;
            push(
                &mut out,
                format!("route{i}"),
                &route.receivers,
                &route.group_by,
                route.timing,
            );
            if !route.continue_ {
                break;
            }
        }
        if !matched {
            push(
                &mut out,
                "default".into(),
                &self.cfg.default_receivers,
                &self.cfg.group_by,
                self.cfg.timing,
            );
        }
        out
    }

    /// The outbox rows reporting a transition (none without receivers).
    pub fn enqueue(&self, tr: &Transition) -> Vec<NewNotification> {
        if self.is_empty() {
            return Vec::new();
        }
        let msg = alert_msg(tr);
        let payload = match serde_json::to_string(&msg) {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(error = %e, "cannot encode a notification");
                return Vec::new();
            }
        };
        let mut dests = self.route(&msg.labels);
        if self.fleet_hang(tr) {
            dests = self.through_alertmanager(dests, &msg.labels);
        }
        dests
            .into_iter()
            .map(|d| NewNotification {
                receiver: d.receiver,
                group_key: d.group_key,
                alert: Some((tr.rule.clone(), tr.gpu_id, tr.process_id)),
                alert_id: None,
                kind: tr.state.to_string(),
                payload_json: payload.clone(),
                created_ms: tr.at,
                group_wait_ms: d.timing.group_wait.as_millis() as i64,
                group_interval_ms: d.timing.group_interval.as_millis() as i64,
                repeat_interval_ms: d.timing.repeat_interval.as_millis() as i64,
            })
            .collect()
    }
}

/// Alertmanager groups by itself: its notifications are sent at once.
fn at_once(timing: GroupTiming) -> GroupTiming {
    GroupTiming {
        group_wait: std::time::Duration::ZERO,
        group_interval: std::time::Duration::ZERO,
        ..timing
    }
}

/// `route0|host=node-7,rule=gpu_idle`; `...` groups by every label (one alert per group).
fn group_key(route: &str, group_by: &[String], labels: &BTreeMap<String, String>) -> String {
    let parts: Vec<String> = if group_by.iter().any(|g| g == "...") {
        labels.iter().map(|(k, v)| format!("{k}={v}")).collect()
    } else {
        let mut g: Vec<&String> = group_by.iter().collect();
        g.sort();
        g.dedup();
        g.into_iter()
            .map(|k| format!("{k}={}", labels.get(k).map_or("", String::as_str)))
            .collect()
    };
    format!("{route}|{}", parts.join(","))
}

/// The notification form of a transition; its labels are the routing labels.
pub fn alert_msg(tr: &Transition) -> AlertMsg {
    let mut labels = tr.labels.clone();
    labels.insert("rule".into(), tr.rule.clone());
    labels.insert("severity".into(), tr.severity.as_str().into());
    let s = &tr.subject;
    AlertMsg {
        id: 0,
        state: tr.state.to_string(),
        rule: tr.rule.clone(),
        severity: tr.severity.as_str().into(),
        labels,
        summary: tr.summary.clone(),
        description: tr.description.clone(),
        host: s.host.clone(),
        gpu: s.gpu,
        uuid: s.uuid.clone(),
        model: s.model.clone(),
        pid: s.pid,
        process: s.process.clone(),
        user: s.user.clone(),
        starts_ms: tr.active_since.or(tr.fired_at).unwrap_or(tr.at),
        fired_ms: tr.fired_at.unwrap_or(tr.at),
        ends_ms: (tr.state == "resolved").then_some(tr.at),
        metric: tr.metric.map(str::to_string),
        gpu_id: (tr.scope != Scope::Host).then_some(tr.gpu_id),
        analysis: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::path::Path;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn first_match_wins_continue_goes_on_default_catches_the_rest() {
        let cfg = Config::parse(
            r#"
[[notify.webhook]]
name = "a"
url = "http://127.0.0.1:1/a"
[[notify.webhook]]
name = "b"
url = "http://127.0.0.1:1/b"
[[notify.webhook]]
name = "c"
url = "http://127.0.0.1:1/c"
[notify]
default_receivers = ["c"]
[[notify.route]]
match = ["severity=critical"]
receivers = ["a"]
group_by = ["host"]
continue = true
[[notify.route]]
match = ["rule=~gpu_.*"]
receivers = ["b", "a"]
group_wait = "5s"
"#,
            Path::new("t.toml"),
        )
        .unwrap();
        let r = Router::new(&cfg.notify);
        let crit = r.route(&labels(&[
            ("rule", "gpu_lost"),
            ("severity", "critical"),
            ("host", "n1"),
        ]));
        let names: Vec<&str> = crit.iter().map(|d| d.receiver.as_str()).collect();
        assert_eq!(names, ["a", "b"], "a once, from the first route");
        assert_eq!(crit[0].group_key, "route0|host=n1");
        assert_eq!(crit[1].group_key, "route1|host=n1,rule=gpu_lost");
        assert_eq!(crit[1].timing.group_wait.as_secs(), 5);
        let other = r.route(&labels(&[
            ("rule", "training_hang"),
            ("severity", "warning"),
        ]));
        assert_eq!(other.len(), 1);
        assert_eq!(other[0].receiver, "c");
        assert_eq!(other[0].group_key, "default|host=,rule=training_hang");
    }

    fn hang(job_nodes: Option<u32>) -> Transition {
        let subject = crate::transition::Subject {
            host: "n1".into(),
            gpu: Some(2),
            training_job: Some("4242".into()),
            slurm_job: Some(4242),
            job_nodes,
            ..Default::default()
        };
        Transition {
            at: 1,
            state: "firing",
            rule: "training_hang".into(),
            severity: crate::rules::rule::Severity::Critical,
            labels: subject.labels(&BTreeMap::new()),
            subject,
            summary: "hang".into(),
            description: None,
            active_since: Some(1),
            fired_at: Some(1),
            gpu_id: 1,
            process_id: None,
            scope: Scope::Gpu,
            metric: None,
            severity_from: None,
        }
    }

    #[test]
    fn a_multi_node_jobs_hang_goes_through_alertmanager_only() {
        let both = Config::parse(
            r#"
[[notify.slack]]
name = "chat"
webhook_url_env = "SLACK_URL"
[[notify.alertmanager]]
name = "am"
urls = ["http://127.0.0.1:1"]
[notify]
default_receivers = ["chat"]
"#,
            Path::new("t.toml"),
        )
        .unwrap();
        let names = |r: &Router, t: &Transition| -> Vec<String> {
            r.enqueue(t).into_iter().map(|n| n.receiver).collect()
        };
        let r = Router::new(&both.notify);
        assert_eq!(
            names(&r, &hang(None)),
            ["chat"],
            "a single-node job: its routes"
        );
        assert_eq!(names(&r, &hang(Some(1))), ["chat"]);
        let via = r.enqueue(&hang(Some(8)));
        assert_eq!(via.len(), 1);
        assert_eq!(
            via[0].receiver, "am",
            "Slurm says 8 nodes: Alertmanager only"
        );
        assert_eq!(via[0].group_key, "fleet|training_job=4242");
        let r = Router::new(&both.notify).multi_node(true);
        assert_eq!(names(&r, &hang(None)), ["am"], "[fleet] multi_node");
        // Other rules keep their routes; without an Alertmanager the routes keep it too.
        let mut idle = hang(Some(8));
        idle.rule = "gpu_idle".into();
        assert_eq!(names(&r, &idle), ["chat"]);
        let chat_only = Config::parse(
            "[[notify.slack]]\nname = \"chat\"\nwebhook_url_env = \"SLACK_URL\"\n",
            Path::new("t.toml"),
        )
        .unwrap();
        let r = Router::new(&chat_only.notify).multi_node(true);
        assert_eq!(names(&r, &hang(Some(8))), ["chat"]);
    }
}
