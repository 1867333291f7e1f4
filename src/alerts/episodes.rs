//! The episodes a sequence of transitions describes (`gpuwatch replay --save`): an alert
//! fires, may change severity, and resolves or is still firing where the data ends.
//!
//! Invariants: one open episode per alert identity (rule, GPU, process); a change of severity
//! (a transition with `severity_from`) belongs to the open episode, never starts one; the
//! summary is the latest firing text, as the daemon keeps it.

use std::collections::BTreeMap;

use super::engine::Transition;
use crate::rules::rule::{Scope, Severity};
use crate::store::alerts::{ReplayedAlert, SavedSeverityChange};

/// Folds transitions, in time order, into episodes.
#[derive(Debug, Default)]
pub struct Episodes {
    open: BTreeMap<(String, i64, Option<i64>), (ReplayedAlert, Severity)>,
    done: Vec<ReplayedAlert>,
}

impl Episodes {
    pub fn add(&mut self, tr: &Transition) {
        let key = (tr.rule.clone(), tr.gpu_id, tr.process_id);
        match (tr.state, tr.severity_from) {
            ("firing", Some(from)) => {
                if let Some((e, max)) = self.open.get_mut(&key) {
                    e.severity_changes.push(SavedSeverityChange {
                        at_ms: tr.at,
                        from: Some(from.as_str().to_string()),
                        to: tr.severity.as_str().to_string(),
                        summary: Some(tr.summary.clone()),
                    });
                    e.severity = tr.severity.as_str().to_string();
                    e.summary = tr.summary.clone();
                    if tr.severity > *max {
                        *max = tr.severity;
                        e.max_severity = tr.severity.as_str().to_string();
                    }
                }
            }
            ("firing", None) => {
                let labels: Vec<(String, String)> = tr
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let e = ReplayedAlert {
                    rule: tr.rule.clone(),
                    gpu_id: tr.gpu_id,
                    process_id: tr.process_id,
                    scope: match tr.scope {
                        Scope::Gpu => "gpu",
                        Scope::Process => "process",
                        Scope::Host => "host",
                    }
                    .to_string(),
                    severity: tr.severity.as_str().to_string(),
                    max_severity: tr.severity.as_str().to_string(),
                    active_since_ms: tr.active_since.unwrap_or(tr.at),
                    fired_ms: tr.fired_at.unwrap_or(tr.at),
                    resolved_ms: None,
                    summary: tr.summary.clone(),
                    labels_json: crate::store::labels_json(&labels),
                    severity_changes: Vec::new(),
                };
                if let Some((old, _)) = self.open.insert(key, (e, tr.severity)) {
                    // Cannot happen with one engine; an episode is never lost if it does.
                    self.done.push(old);
                }
            }
            _ => {
                if let Some((mut e, _)) = self.open.remove(&key) {
                    e.resolved_ms = Some(tr.at);
                    self.done.push(e);
                }
            }
        }
    }

    /// Every episode, by start: resolved ones and those still firing at the end.
    pub fn finish(mut self) -> Vec<ReplayedAlert> {
        self.done.extend(self.open.into_values().map(|(e, _)| e));
        self.done
            .sort_by_key(|e| (e.active_since_ms, e.rule.clone(), e.gpu_id));
        self.done
    }
}
