//! Plain-text rendering shared by receivers (Slack's fallback text, the email's plain part,
//! `notify test` output): one place decides how an alert reads.

use super::{AlertMsg, Notification};
use crate::model::TsMs;

/// `[FIRING:2] gpu_idle on node-7` / `[RESOLVED] ...`: a subject line.
pub fn title(n: &Notification) -> String {
    let firing = n.firing().count();
    let resolved = n.resolved().count();
    let status = if n.test {
        "[TEST]".to_string()
    } else if firing > 0 {
        format!("[FIRING:{firing}]")
    } else {
        format!("[RESOLVED:{resolved}]")
    };
    let rules: Vec<&str> = {
        let mut r: Vec<&str> = n.alerts.iter().map(|a| a.rule.as_str()).collect();
        r.dedup();
        r
    };
    let hosts: Vec<&str> = {
        let mut h: Vec<&str> = n.alerts.iter().map(|a| a.host.as_str()).collect();
        h.sort_unstable();
        h.dedup();
        h
    };
    let rules = match rules.len() {
        0 => "gpuwatch".to_string(),
        1..=2 => rules.join(", "),
        k => format!("{} and {} more rules", rules[0], k - 1),
    };
    let hosts = match hosts.len() {
        0 => String::new(),
        1 => format!(" on {}", hosts[0]),
        k => format!(" on {k} hosts"),
    };
    let severity = n
        .alerts
        .iter()
        .filter(|a| a.is_firing())
        .map(|a| a.severity.as_str())
        .max_by_key(|s| severity_rank(s))
        .map(|s| format!(" {s}"))
        .unwrap_or_default();
    format!("{status}{severity} {rules}{hosts}")
}

pub fn severity_rank(s: &str) -> u8 {
    match s {
        "critical" => 3,
        "warning" => 2,
        "info" => 1,
        _ => 0,
    }
}

/// Who the alert is about: `GPU 3 (NVIDIA H100 80GB HBM3, GPU-1234…) · pid 4242 python`.
pub fn subject(a: &AlertMsg) -> String {
    let mut parts = vec![format!("host {}", a.host)];
    if let Some(g) = a.gpu {
        let mut gpu = format!("GPU {g}");
        let extra: Vec<&str> = [a.model.as_deref(), a.uuid.as_deref()]
            .into_iter()
            .flatten()
            .collect();
        if !extra.is_empty() {
            gpu.push_str(&format!(" ({})", extra.join(", ")));
        }
        parts.push(gpu);
    }
    if let Some(pid) = a.pid {
        let mut p = format!("pid {pid}");
        if let Some(name) = &a.process {
            p.push_str(&format!(" {name}"));
        }
        if let Some(u) = &a.user {
            p.push_str(&format!(" (user {u})"));
        }
        parts.push(p);
    }
    parts.extend(placement_words(&a.labels));
    parts.join(" · ")
}

/// Where an alert's work runs, from its placement labels: `pod research/llm-7 (container
/// trainer)`, `Slurm job 4242`; nothing for labels that are not known. Messages and the
/// demo's alert lines say it this way.
pub fn placement_words(labels: &std::collections::BTreeMap<String, String>) -> Vec<String> {
    let mut parts = Vec::new();
    if let Some(pod) = labels.get("pod") {
        let mut p = match labels.get("namespace") {
            Some(ns) => format!("pod {ns}/{pod}"),
            None => format!("pod {pod}"),
        };
        if let Some(c) = labels.get("container") {
            p.push_str(&format!(" (container {c})"));
        }
        parts.push(p);
    }
    if let Some(job) = labels.get("slurm_job") {
        parts.push(format!("Slurm job {job}"));
    }
    parts
}

/// "firing for 12m 3s since 2026-11-30 18:02:11 UTC" / "resolved after 40m".
pub fn timing(a: &AlertMsg, now: TsMs) -> String {
    let dur = crate::format::duration(a.active_for_ms(now));
    if a.is_firing() {
        format!("firing for {dur} (since {})", utc(a.starts_ms))
    } else {
        format!("resolved at {} after {dur}", utc(a.ends_ms.unwrap_or(now)))
    }
}

/// An RFC 3339-like UTC time for messages.
pub use crate::format::utc_label as utc;

/// The whole notification as plain text.
pub fn plain(n: &Notification) -> String {
    let mut out = String::new();
    out.push_str(&title(n));
    out.push('\n');
    if n.test {
        out.push_str(&format!(
            "\nThis is a test message from gpuwatch on {} to receiver \"{}\".\n",
            n.sender_host, n.receiver
        ));
    }
    if n.repeat {
        out.push_str("\nStill firing (reminder).\n");
    }
    for a in &n.alerts {
        out.push('\n');
        out.push_str(&format!(
            "{} {} [{}] {}\n",
            if a.is_firing() { "FIRING" } else { "RESOLVED" },
            a.rule,
            a.severity,
            a.summary
        ));
        out.push_str(&format!("  {}\n", subject(a)));
        out.push_str(&format!("  {}\n", timing(a, n.now_ms)));
        if let Some(d) = &a.description {
            out.push_str(&format!("  {d}\n"));
        }
        if let Some(an) = &a.analysis {
            out.push_str(&format!("  {an}\n"));
        }
        if let Some(cmd) = a.story_command() {
            out.push_str(&format!("  alert {} — its story: {cmd}\n", a.id));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_everything() {
        let a = AlertMsg {
            id: 42,
            state: "firing".into(),
            rule: "training_hang".into(),
            severity: "critical".into(),
            summary: "step stuck at 1200 for 6m; util 100% at 71 W".into(),
            host: "node-7".into(),
            gpu: Some(3),
            uuid: Some("GPU-abc".into()),
            model: Some("NVIDIA H200".into()),
            pid: Some(4242),
            process: Some("python".into()),
            starts_ms: 1_000_000,
            fired_ms: 1_060_000,
            analysis: Some("Analysis: likely cause: a stuck collective".into()),
            ..Default::default()
        };
        let n = Notification {
            digest: None,
            receiver: "oncall".into(),
            alerts: vec![a],
            sender_host: "node-7".into(),
            now_ms: 1_000_000 + 360_000,
            ..Default::default()
        };
        let t = plain(&n);
        assert!(
            t.starts_with("[FIRING:1] critical training_hang on node-7"),
            "{t}"
        );
        for want in [
            "GPU 3 (NVIDIA H200, GPU-abc)",
            "pid 4242 python",
            "firing for 6m",
            "gpuwatch incident 42",
            "71 W",
            "  Analysis: likely cause: a stuck collective\n",
        ] {
            assert!(t.contains(want), "{want} missing in {t}");
        }
    }
}
