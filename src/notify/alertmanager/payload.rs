//! The body of `POST /api/v2/alerts`: gpuwatch alerts as Alertmanager postable alerts.
//!
//! Invariants:
//! - Labels are the alert's identity only (`alertname` = the rule, `severity`, `host`, `gpu`,
//!   `uuid`, `pid` when present, and the rule's own labels): never a value that changes, so
//!   that re-sends and the same alert from several senders merge into one Alertmanager alert.
//!   Values (summary, description, model, process, user, who sent it) are annotations.
//! - Label names are valid Prometheus names (anything else is rewritten with `_`) and empty
//!   values are left out (Alertmanager treats them as absent).
//! - `endsAt` is never before `startsAt` (Alertmanager refuses such an alert with a 400).
//!   A firing alert ends in the future (`now + 4 × resend_every`), so that Alertmanager
//!   resolves it by itself if gpuwatch stops re-sending; a resolved one ends when it ended.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::model::TsMs;
use crate::notify::AlertMsg;

/// The alert name of the always-firing heartbeat (Alertmanager's Watchdog pattern).
pub const HEARTBEAT_ALERTNAME: &str = "gpuwatch_heartbeat";

/// How many re-send periods a firing alert stays valid without being re-sent.
pub const ENDS_AFTER_RESENDS: u32 = 4;

/// One element of the `POST /api/v2/alerts` array.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PostableAlert {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    #[serde(rename = "startsAt")]
    pub starts_at: String,
    #[serde(rename = "endsAt")]
    pub ends_at: String,
    #[serde(rename = "generatorURL", skip_serializing_if = "Option::is_none")]
    pub generator_url: Option<String>,
}

/// RFC 3339 in UTC with milliseconds, as Alertmanager prints them.
pub use crate::format::rfc3339_ms as rfc3339;

/// When a firing alert posted at `now_ms` should end unless it is re-sent.
pub fn firing_ends_ms(now_ms: TsMs, resend_every: Duration) -> TsMs {
    let window = resend_every.saturating_mul(ENDS_AFTER_RESENDS).as_millis();
    now_ms.saturating_add(i64::try_from(window).unwrap_or(i64::MAX))
}

/// `[A-Za-z_][A-Za-z0-9_]*`: other characters become `_`, a leading digit gets a `_` before.
fn label_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

fn put(map: &mut BTreeMap<String, String>, name: &str, value: impl Into<String>) {
    let value = value.into();
    if value.is_empty() {
        map.remove(name);
    } else {
        map.insert(name.to_string(), value);
    }
}

/// The identity labels of `a`.
pub fn labels(a: &AlertMsg) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (k, v) in &a.labels {
        let name = if k == "rule" {
            "alertname".to_string()
        } else {
            label_name(k)
        };
        put(&mut out, &name, v.as_str());
    }
    // The alert's own fields win over copies in `labels` (they are the same when both exist).
    put(&mut out, "alertname", a.rule.as_str());
    put(&mut out, "severity", a.severity.as_str());
    put(&mut out, "host", a.host.as_str());
    if let Some(g) = a.gpu {
        put(&mut out, "gpu", g.to_string());
    }
    if let Some(u) = &a.uuid {
        put(&mut out, "uuid", u.as_str());
    }
    if let Some(p) = a.pid {
        put(&mut out, "pid", p.to_string());
    }
    out
}

/// The annotations of `a` (everything that may change between re-sends).
pub fn annotations(a: &AlertMsg, sender_host: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    put(&mut out, "summary", a.summary.as_str());
    if let Some(d) = &a.description {
        put(&mut out, "description", d.as_str());
    }
    if a.id > 0 {
        put(&mut out, "gpuwatch_alert_id", a.id.to_string());
    }
    if let Some(story) = a.story_command() {
        put(&mut out, "story", story);
    }
    for (name, value) in [
        ("model", &a.model),
        ("process", &a.process),
        ("user", &a.user),
    ] {
        if let Some(v) = value {
            put(&mut out, name, v.as_str());
        }
    }
    put(&mut out, "sender_host", sender_host);
    out
}

/// `a` as posted at `now_ms`.
pub fn alert(
    a: &AlertMsg,
    sender_host: &str,
    now_ms: TsMs,
    resend_every: Duration,
) -> PostableAlert {
    let ends_ms = if a.is_firing() {
        firing_ends_ms(now_ms, resend_every)
    } else {
        a.ends_ms.unwrap_or(now_ms)
    };
    PostableAlert {
        labels: labels(a),
        annotations: annotations(a, sender_host),
        starts_at: rfc3339(a.starts_ms),
        ends_at: rfc3339(ends_ms.max(a.starts_ms)),
        generator_url: None,
    }
}

/// The heartbeat of `sender_host` posted at `now_ms`: always firing, severity `none`.
pub fn heartbeat(sender_host: &str, now_ms: TsMs, resend_every: Duration) -> PostableAlert {
    let mut labels = BTreeMap::new();
    put(&mut labels, "alertname", HEARTBEAT_ALERTNAME);
    put(&mut labels, "severity", "none");
    put(&mut labels, "host", sender_host);
    let mut annotations = BTreeMap::new();
    put(
        &mut annotations,
        "summary",
        format!(
            "gpuwatch on {sender_host} is alive and can reach Alertmanager \
             (this alert always fires; route it to a dead man's switch)"
        ),
    );
    put(&mut annotations, "sender_host", sender_host);
    PostableAlert {
        labels,
        annotations,
        starts_at: rfc3339(now_ms),
        ends_at: rfc3339(firing_ends_ms(now_ms, resend_every)),
        generator_url: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg() -> AlertMsg {
        let mut labels = BTreeMap::new();
        for (k, v) in [
            ("rule", "gpu_idle"),
            ("severity", "warning"),
            ("host", "node-1"),
            ("gpu", "3"),
            ("uuid", "GPU-abc"),
            ("team", "ml"),
            ("bad-name", "x"),
            ("empty", ""),
        ] {
            labels.insert(k.to_string(), v.to_string());
        }
        AlertMsg {
            id: 42,
            state: "firing".into(),
            rule: "gpu_idle".into(),
            severity: "warning".into(),
            labels,
            summary: "GPU 3 idle for 30m (util 0%)".into(),
            description: Some("nobody uses it".into()),
            host: "node-1".into(),
            gpu: Some(3),
            uuid: Some("GPU-abc".into()),
            model: Some("H100".into()),
            pid: Some(1234),
            starts_ms: 1_700_000_000_000,
            fired_ms: 1_700_000_060_000,
            ..Default::default()
        }
    }

    #[test]
    fn labels_are_identity_only() {
        let l = labels(&msg());
        let keys: Vec<&str> = l.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "alertname",
                "bad_name",
                "gpu",
                "host",
                "pid",
                "severity",
                "team",
                "uuid"
            ]
        );
        assert_eq!(l["alertname"], "gpu_idle");
        assert_eq!(l["pid"], "1234");
        assert_eq!(label_name("9lives"), "_9lives");
    }

    #[test]
    fn firing_ends_in_the_future_resolved_when_it_ended() {
        let a = msg();
        let now = 1_700_000_100_000;
        let p = alert(&a, "node-1", now, Duration::from_secs(60));
        assert_eq!(p.starts_at, "2023-11-14T22:13:20.000Z");
        assert_eq!(p.ends_at, rfc3339(now + 240_000));
        assert_eq!(p.annotations["story"], "gpuwatch incident 42");
        assert_eq!(p.annotations["gpuwatch_alert_id"], "42");
        assert_eq!(p.annotations["sender_host"], "node-1");
        assert_eq!(p.annotations["model"], "H100");

        let mut r = a.clone();
        r.state = "resolved".into();
        r.ends_ms = Some(1_700_000_090_000);
        let p = alert(&r, "node-1", now, Duration::from_secs(60));
        assert_eq!(p.ends_at, rfc3339(1_700_000_090_000));
        // Never before the start (Alertmanager would refuse it).
        r.ends_ms = Some(1);
        assert_eq!(
            alert(&r, "n", now, Duration::from_secs(60)).ends_at,
            p.starts_at
        );
    }

    #[test]
    fn json_shape() {
        let mut a = msg();
        a.id = 0;
        a.description = None;
        let v = serde_json::to_value(alert(&a, "me", 0, Duration::from_secs(1))).unwrap();
        let o = v.as_object().unwrap();
        assert!(o.contains_key("startsAt") && o.contains_key("endsAt"));
        assert!(!o.contains_key("generatorURL"));
        assert!(v["annotations"].get("story").is_none());
        assert!(v["annotations"].get("gpuwatch_alert_id").is_none());
        let h = heartbeat("node-2", 1_000, Duration::from_secs(30));
        assert_eq!(h.labels["alertname"], HEARTBEAT_ALERTNAME);
        assert_eq!(h.labels["severity"], "none");
        assert_eq!(h.ends_at, rfc3339(121_000));
    }
}
