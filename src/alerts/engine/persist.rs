//! The engine's persistence side: restoring live alerts saved before a restart, snapshots
//! of changed alerts for the store, and the resolved transition of an alert whose rule was
//! removed (by a reload or across a restart).
//!
//! Invariant: an alert that was reported firing always ends with a reported resolved
//! transition, even when its rule disappears (so receivers hear that the page is over).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::model::TsMs;
use crate::rules::eval::expr::Target;
use crate::rules::rule::{Scope, Severity};
use crate::store::alerts::SavedAlert;

use super::super::state::{AlertState, Phase};
use super::{AlertKey, Engine, Instance, Subject, Transition, subject_of};

impl Engine {
    /// Restores live alerts saved before a restart (those of rules that still exist).
    pub fn restore(&mut self, saved: Vec<SavedAlert>) {
        for a in saved {
            let Some(name) = self.names.iter().find(|n| ***n == *a.rule).cloned() else {
                // The rule no longer exists: the alert ends, recorded through `take_saves`
                // (and reported through `take_ended` when it was reported firing).
                if a.reported && a.phase == "firing" {
                    let key = AlertKey {
                        rule: Arc::from(a.rule.as_str()),
                        gpu_id: a.gpu_id,
                        process_id: a.process_id,
                    };
                    let subject = self
                        .world
                        .gpus
                        .get(&a.gpu_id)
                        .map(|g| {
                            let proc = a.process_id.and_then(|p| g.procs.get(&p));
                            let scope = match a.scope.as_str() {
                                "process" => Scope::Process,
                                "host" => Scope::Host,
                                _ => Scope::Gpu,
                            };
                            subject_of(
                                &self.world,
                                Target {
                                    gpu: g,
                                    proc,
                                    whole_gpu: false,
                                },
                                scope,
                            )
                        })
                        .unwrap_or_default();
                    let at = self.world.fed_to;
                    self.ended.push(removed(
                        at,
                        &key,
                        subject,
                        a.severity.as_deref().and_then(severity_from),
                        a.summary.clone(),
                        a.active_since_ms,
                        a.fired_ms,
                    ));
                }
                self.saves.push(SavedAlert {
                    phase: "inactive".into(),
                    ..a
                });
                continue;
            };
            let phase = match a.phase.as_str() {
                "firing" => Phase::Firing,
                "pending" => Phase::Pending,
                _ => continue,
            };
            let severity = a.severity.as_deref().and_then(severity_from);
            let key = AlertKey {
                rule: name,
                gpu_id: a.gpu_id,
                process_id: a.process_id,
            };
            let scope = self
                .rules
                .iter()
                .find(|r| *r.name == *key.rule)
                .map_or(Scope::Gpu, |r| r.scope);
            let subject = self
                .world
                .gpus
                .get(&a.gpu_id)
                .map(|g| {
                    subject_of(
                        &self.world,
                        Target {
                            gpu: g,
                            proc: a.process_id.and_then(|p| g.procs.get(&p)),
                            whole_gpu: false,
                        },
                        scope,
                    )
                })
                .unwrap_or_default();
            let state = AlertState {
                phase,
                active_since: a.active_since_ms,
                fired_at: a.fired_ms,
                last_true: a.last_true_ms,
                kept_since: a.kept_since_ms,
                severity,
            };
            self.alerts.insert(
                key,
                Instance {
                    state,
                    reported: a.reported,
                    subject,
                    evaluated_at: 0,
                    fired_summary: a.summary,
                    severity_changes: Vec::new(),
                },
            );
        }
    }
}

/// A stored severity name.
pub(super) fn severity_from(s: &str) -> Option<Severity> {
    match s {
        "info" => Some(Severity::Info),
        "warning" => Some(Severity::Warning),
        "critical" => Some(Severity::Critical),
        _ => None,
    }
}

/// The resolved transition of a reported alert whose rule was removed.
pub(super) fn removed(
    at: TsMs,
    key: &AlertKey,
    subject: Subject,
    severity: Option<Severity>,
    summary: Option<String>,
    active_since: Option<TsMs>,
    fired_at: Option<TsMs>,
) -> Transition {
    // The rule (and its own labels) is gone: the identity and placement labels remain.
    let labels = subject.labels(&BTreeMap::new());
    Transition {
        at,
        state: "resolved",
        rule: key.rule.to_string(),
        severity: severity.unwrap_or(Severity::Warning),
        scope: if key.process_id.is_some() {
            Scope::Process
        } else {
            Scope::Gpu
        },
        subject,
        labels,
        summary: summary.unwrap_or_else(|| key.rule.to_string()),
        description: Some("the rule was removed from the configuration".into()),
        active_since,
        fired_at,
        gpu_id: key.gpu_id,
        process_id: key.process_id,
        metric: None,
        severity_from: None,
    }
}

/// The persisted form of an instance; `rule` is `None` for a rule no longer configured.
pub(super) fn saved(
    key: &AlertKey,
    inst: &Instance,
    rule: Option<&crate::rules::rule::Rule>,
) -> SavedAlert {
    let st = &inst.state;
    let scope = rule.map(|r| r.scope);
    SavedAlert {
        rule: key.rule.to_string(),
        gpu_id: key.gpu_id,
        process_id: key.process_id,
        scope: match scope {
            Some(Scope::Process) => "process",
            Some(Scope::Host) => "host",
            _ => "gpu",
        }
        .into(),
        phase: match st.phase {
            Phase::Inactive => "inactive",
            Phase::Pending => "pending",
            Phase::Firing => "firing",
        }
        .into(),
        severity: st.severity.map(|s| s.as_str().to_string()),
        reported: inst.reported,
        active_since_ms: st.active_since,
        fired_ms: st.fired_at,
        last_true_ms: st.last_true,
        kept_since_ms: st.kept_since,
        summary: inst.fired_summary.clone(),
        // The labels receivers were (or will be) given; `None` keeps the stored ones.
        labels_json: rule.map(|r| {
            let labels: Vec<(String, String)> =
                inst.subject.labels(&r.labels).into_iter().collect();
            crate::store::labels_json(&labels)
        }),
        severity_changes: Vec::new(),
    }
}
