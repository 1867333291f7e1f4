//! The one evaluation path: feed the history up to a time, evaluate every rule for every
//! target, step each alert's lifecycle, apply inhibition, and report transitions. The live
//! daemon and `replay` both drive an [`Engine`]; only where the time comes from differs.
//!
//! Invariants:
//! - An alert is reported firing at most once per episode and resolved only if it was
//!   reported firing; a muted (inhibited) alert is not reported until its inhibitor ends.
//! - A target that disappears (process exited, GPU gone from the data) is evaluated as "no
//!   data", so its alert follows the rule's `on_no_data`, never hangs forever.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use rusqlite::Connection;

use crate::model::TsMs;
use crate::rules::ast::Expr;
use crate::rules::eval::expr::{EvalCtx, Outcome, PeerMemo, Target};
use crate::rules::eval::needs::{self, Needs};
use crate::rules::eval::world::World;
use crate::rules::rule::{Missing, Rule, Scope, Severity};
use crate::rules::template::TemplateValue;
use crate::store::StoreError;

use super::state::{AlertState, Change, Phase, Timing, Verdict};

mod persist;
mod subject;
use crate::store::alerts::{SavedAlert, SavedSeverityChange};
pub use crate::transition::{Subject, Transition};
use persist::{removed, saved};
use subject::subject_of;

/// Which alert instance: a rule on a GPU (and a process, for process rules).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AlertKey {
    pub rule: Arc<str>,
    pub gpu_id: i64,
    pub process_id: Option<i64>,
}

#[derive(Debug, Clone)]
struct Instance {
    state: AlertState,
    reported: bool,
    subject: Subject,
    /// The last evaluation that saw this instance's target.
    evaluated_at: TsMs,
    /// The summary as it was rendered when the alert (last) fired.
    fired_summary: Option<String>,
    /// Changes of severity not saved yet.
    severity_changes: Vec<SavedSeverityChange>,
}

#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// An instant metric older than this is no data (3 sample intervals).
    pub staleness_ms: i64,
    /// Evaluate at a sample time only when at least this long has passed since the last
    /// evaluation (`[rules] eval_interval`; 0 = at every sample time).
    pub eval_every_ms: i64,
    /// `[fleet] job_label` (the `training_job` label's source besides Slurm and pods).
    pub job_label: Option<String>,
    /// `[[xid.override]]`.
    pub xid_overrides: Vec<crate::config::XidOverride>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            staleness_ms: 3000,
            eval_every_ms: 0,
            job_label: None,
            xid_overrides: Vec::new(),
        }
    }
}

pub struct Engine {
    /// The last evaluation time (for `eval_every_ms`).
    last_eval: Option<TsMs>,
    /// Instances whose state changed in this evaluation (to persist).
    dirty: HashSet<AlertKey>,
    /// Snapshots of changed instances, until the caller takes them.
    saves: Vec<SavedAlert>,
    /// Resolved transitions of reported alerts whose rule was removed (reload, restart).
    ended: Vec<Transition>,
    rules: Vec<Rule>,
    /// The rules' names, shared by their alert keys.
    names: Vec<Arc<str>>,
    world: World,
    alerts: BTreeMap<AlertKey, Instance>,
    opts: EngineOptions,
    /// `gpu_idle`'s activity test, for the usage ledger (its windows are kept).
    idle: crate::alerts::usage::IdleTest,
}

impl Engine {
    /// An engine whose history starts after `start_after`.
    pub fn new(rules: Vec<Rule>, opts: EngineOptions, start_after: TsMs) -> Self {
        let mut needs: Needs = Needs::new();
        // Room for the staleness of a GPU sampled once a minute (3 intervals).
        let slack = opts.staleness_ms.max(180_000);
        for r in rules.iter().filter(|r| r.enabled) {
            let mut exprs: Vec<&Expr> = vec![&r.condition];
            exprs.extend(r.critical.iter());
            exprs.extend(r.resolve.iter());
            exprs.extend(r.values.iter().map(|(_, e)| e));
            for e in exprs {
                needs::add(&mut needs, e, slack, r.gpu_fallback);
            }
        }
        let idle = crate::alerts::usage::IdleTest::from_rules(&rules);
        for e in idle.exprs() {
            needs::add(&mut needs, e, slack, false);
        }
        for m in crate::alerts::usage::IdleTest::current_metrics() {
            needs::add(&mut needs, &Expr::Current(m), slack, false);
        }
        let mut world = World::new(needs, start_after);
        world.job_label = opts.job_label.clone();
        world.xid_overrides = opts.xid_overrides.clone();
        Self {
            last_eval: None,
            dirty: HashSet::new(),
            saves: Vec::new(),
            ended: Vec::new(),
            names: rules.iter().map(|r| Arc::from(r.name.as_str())).collect(),
            rules,
            world,
            alerts: BTreeMap::new(),
            opts,
            idle,
        }
    }

    /// Observes every GPU of `host` (all hosts: `None`) with a fresh sample at `t`, for the
    /// usage ledger.
    pub fn observe_usage(&self, t: TsMs, host: Option<&str>) -> Vec<crate::usage::Observation> {
        let peers = PeerMemo::default();
        let ctx = EvalCtx {
            world: &self.world,
            t,
            staleness_ms: self.opts.staleness_ms,
            peers: &peers,
        };
        // A GPU split into MIG instances is accounted through them (each a GPU of its own):
        // the parent's hours would count them twice.
        let parents: HashSet<&str> = self
            .world
            .gpus
            .values()
            .filter_map(|g| g.inv.mig.as_ref().map(|m| m.parent_uuid.as_str()))
            .collect();
        self.world
            .gpus
            .values()
            .filter(|g| host.is_none_or(|h| g.host == h))
            .filter(|g| !parents.contains(g.inv.uuid.as_str()))
            .filter_map(|g| self.idle.observe(&ctx, g))
            .collect()
    }

    /// The window of `gpu_idle`'s activity test (ms).
    pub fn idle_window_ms(&self) -> TsMs {
        self.idle.window_ms
    }

    /// How old a GPU's sample may be and still count, for the usage ledger (its staleness
    /// bound, or 3 of its own intervals).
    pub fn stale_after(&self, gpu_id: i64) -> i64 {
        let interval = self.world.gpus.get(&gpu_id).map_or(0, |g| g.interval.ms());
        self.opts.staleness_ms.max(3 * interval)
    }

    pub fn world(&self) -> &World {
        &self.world
    }

    pub fn world_mut(&mut self) -> &mut World {
        &mut self.world
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Replaces the rules (a reload), keeping what can be kept: the windows are refilled from
    /// the stored history up to the time already evaluated, and the alerts of rules that still
    /// exist keep their state (a firing alert is neither lost nor fired again).
    pub fn reload(&mut self, conn: &Connection, rules: Vec<Rule>) -> Result<(), StoreError> {
        let mut fresh = Engine::primed(conn, rules, self.opts.clone(), self.world.fed_to)?;
        fresh.last_eval = self.last_eval;
        fresh.saves = std::mem::take(&mut self.saves);
        fresh.ended = std::mem::take(&mut self.ended);
        let at = self.last_eval.unwrap_or(self.world.fed_to);
        fresh.world.training_down = std::mem::take(&mut self.world.training_down);
        fresh.world.training_known = std::mem::take(&mut self.world.training_known);
        for (key, mut inst) in std::mem::take(&mut self.alerts) {
            match fresh.names.iter().find(|n| ***n == *key.rule) {
                Some(name) => {
                    let key = AlertKey {
                        rule: name.clone(),
                        ..key
                    };
                    fresh.alerts.insert(key, inst);
                }
                // The rule is gone: its alert ends (recorded as such, not left live).
                None => {
                    if inst.reported && inst.state.is_firing() {
                        fresh.ended.push(removed(
                            at,
                            &key,
                            inst.subject.clone(),
                            inst.state.severity,
                            inst.fired_summary.clone(),
                            inst.state.active_since,
                            inst.state.fired_at,
                        ));
                    }
                    inst.state.phase = Phase::Inactive;
                    fresh.saves.push(saved(&key, &inst, None));
                }
            }
        }
        *self = fresh;
        Ok(())
    }

    /// The alert changes of the evaluations since the last call, to persist.
    pub fn take_saves(&mut self) -> Vec<SavedAlert> {
        std::mem::take(&mut self.saves)
    }

    /// Resolved transitions of reported alerts whose rule no longer exists (after a reload
    /// or a restore), to notify.
    pub fn take_ended(&mut self) -> Vec<Transition> {
        std::mem::take(&mut self.ended)
    }

    /// An engine whose windows are filled from the stored history up to `t` (nothing is
    /// evaluated for that history): the daemon starts here, so a restart neither replays old
    /// alerts nor starts with empty windows.
    pub fn primed(
        conn: &Connection,
        rules: Vec<Rule>,
        opts: EngineOptions,
        t: TsMs,
    ) -> Result<Self, StoreError> {
        let probe = Engine::new(rules, opts.clone(), t);
        let back = probe.world.longest_keep();
        let mut e = Engine::new(probe.rules, opts, t - back);
        e.world.set_fetch_ahead(0);
        e.advance(conn, t)?;
        Ok(e)
    }

    /// Reads the training-metrics sources' status (the live daemon calls this every few
    /// seconds; a replay does not, since the status is not historical): a failing source makes
    /// rules that read training metrics an error, and `training_source_failing` true.
    pub fn refresh_training_sources(&mut self, conn: &Connection) -> Result<(), StoreError> {
        let rows = crate::store::read::training_sources(conn, None)?;
        let w = &mut self.world;
        w.training_known = rows
            .iter()
            .filter(|r| r.last_nonempty_ms.is_some())
            .map(|r| r.host.clone())
            .collect();
        w.training_down = rows
            .into_iter()
            .filter(|r| r.consecutive_failures > 0)
            .filter_map(|r| match r.role.as_str() {
                "step" => Some((r.host, "step")),
                "loss" => Some((r.host, "loss")),
                _ => None,
            })
            .collect();
        Ok(())
    }

    /// Feeds the stored history up to `upto`.
    pub fn advance(&mut self, conn: &Connection, upto: TsMs) -> Result<(), StoreError> {
        self.world.advance(conn, upto)
    }

    /// Alerts currently firing and reported (not muted).
    pub fn firing(&self) -> impl Iterator<Item = (&AlertKey, Option<Severity>)> {
        self.alerts
            .iter()
            .filter(|(_, i)| i.reported && i.state.is_firing())
            .map(|(k, i)| (k, i.state.severity))
    }

    /// Evaluates every rule at `t` and returns what changed, in rule then target order.
    pub fn evaluate(&mut self, t: TsMs) -> Vec<Transition> {
        if self
            .last_eval
            .is_some_and(|l| t < l + self.opts.eval_every_ms)
        {
            return Vec::new();
        }
        // A forward step of the wall clock since the last evaluation was not observed time.
        if let Some(l) = self.last_eval {
            let jump = crate::clock::steps::forward_steps_between(l, t);
            if jump > 0 {
                for (key, inst) in &mut self.alerts {
                    if inst.state.discount(jump) {
                        self.dirty.insert(key.clone());
                    }
                }
            }
        }
        self.last_eval = Some(t);
        let peers = PeerMemo::default();
        let ctx = EvalCtx {
            world: &self.world,
            t,
            staleness_ms: self.opts.staleness_ms,
            peers: &peers,
        };
        let mut changes: Vec<(AlertKey, Change)> = Vec::new();
        for (rule, name) in self
            .rules
            .iter()
            .zip(&self.names)
            .filter(|(r, _)| r.enabled)
        {
            let timing = Timing {
                for_: rule.for_,
                keep_firing_for: rule.keep_firing_for,
            };
            for (gpu_id, process_id, target) in targets(&self.world, rule, &ctx) {
                let key = AlertKey {
                    rule: name.clone(),
                    gpu_id,
                    process_id,
                };
                let existing = self.alerts.get_mut(&key);
                let firing = existing.as_ref().is_some_and(|i| i.state.is_firing());
                let verdict = match (&rule.resolve, firing) {
                    (Some(resolve), true) => match verdict(rule, ctx.eval(resolve, target)) {
                        Verdict::True => Verdict::False,
                        Verdict::False => Verdict::True,
                        Verdict::Keep => Verdict::Keep,
                    },
                    _ => verdict(rule, ctx.eval(&rule.condition, target)),
                };
                // Nothing can happen to an alert that does not exist and is not triggered.
                let inst = match existing {
                    Some(i) => i,
                    None if verdict != Verdict::True => continue,
                    None => self.alerts.entry(key.clone()).or_insert_with(|| Instance {
                        state: AlertState::default(),
                        reported: false,
                        // Set just below, as for every instance not reported yet.
                        subject: Subject::default(),
                        evaluated_at: t,
                        fired_summary: None,
                        severity_changes: Vec::new(),
                    }),
                };
                inst.evaluated_at = t;
                // Until it is reported, an alert is about its target as known now (a pod
                // the kubelet named since it became pending); once reported, its labels
                // stay what the receivers were told, so that its resolution matches.
                if !inst.reported {
                    inst.subject = subject_of(&self.world, target, rule.scope);
                }
                let before = inst.state;
                let severity = match &rule.critical {
                    Some(c) if matches!(ctx.eval(c, target), Ok(Some(v)) if v != 0.0) => {
                        Severity::Critical
                    }
                    _ => rule.severity,
                };
                let change = inst.state.step(t, verdict, severity, timing);
                if inst.state.changed_from(&before) || before.phase == Phase::Inactive {
                    self.dirty.insert(key.clone());
                }
                if let Some(c) = change {
                    changes.push((key, c));
                }
            }
            // Targets that vanished: no data.
            for (key, inst) in self
                .alerts
                .iter_mut()
                .filter(|(k, i)| k.rule == *name && i.evaluated_at != t)
            {
                inst.evaluated_at = t;
                let before = inst.state;
                let change = inst
                    .state
                    .step(t, verdict(rule, Ok(None)), rule.severity, timing);
                if inst.state.changed_from(&before) {
                    self.dirty.insert(key.clone());
                }
                if let Some(c) = change {
                    changes.push((key.clone(), c));
                }
            }
        }
        self.report(t, changes)
    }

    /// Applies inhibition and turns lifecycle changes into reported transitions.
    fn report(&mut self, t: TsMs, changes: Vec<(AlertKey, Change)>) -> Vec<Transition> {
        let muting: HashSet<(String, i64)> = self
            .alerts
            .iter()
            .filter(|(_, i)| i.state.is_firing())
            .filter_map(|(k, _)| {
                self.rules
                    .iter()
                    .find(|r| *r.name == *k.rule)
                    .map(|r| (r, k.gpu_id))
            })
            .flat_map(|(r, gpu)| r.inhibits.iter().map(move |name| (name.clone(), gpu)))
            .collect();
        // `inhibits_job`: (rule, host, training job) → the inhibitors' GPUs: muted on the
        // job's other GPUs there (its own GPU is `inhibits`' business).
        let mut muting_job: HashMap<(String, String, String), Vec<i64>> = HashMap::new();
        for (k, i) in self.alerts.iter().filter(|(_, i)| i.state.is_firing()) {
            let (Some(job), Some(r)) = (
                i.subject.training_job.as_ref(),
                self.rules.iter().find(|r| *r.name == *k.rule),
            ) else {
                continue;
            };
            for name in &r.inhibits_job {
                muting_job
                    .entry((name.clone(), i.subject.host.clone(), job.clone()))
                    .or_default()
                    .push(k.gpu_id);
            }
        }
        let is_muted = |key: &AlertKey, subject: &Subject| {
            muting.contains(&(key.rule.to_string(), key.gpu_id))
                || subject.training_job.as_ref().is_some_and(|j| {
                    muting_job
                        .get(&(key.rule.to_string(), subject.host.clone(), j.clone()))
                        .is_some_and(|gpus| gpus.iter().any(|g| *g != key.gpu_id))
                })
        };
        // (alert, state, the severity before a change of severity)
        let mut out: Vec<(AlertKey, &'static str, Option<Severity>)> = Vec::new();
        // Changes of severity, recorded whether or not they are reported (muted).
        let mut severity_changes: Vec<(AlertKey, Option<Severity>, Severity)> = Vec::new();
        let changed: HashSet<AlertKey> = changes.iter().map(|(k, _)| k.clone()).collect();
        for (key, change) in changes {
            let Some(inst) = self.alerts.get_mut(&key) else {
                continue;
            };
            let muted = is_muted(&key, &inst.subject);
            match change {
                Change::Escalated { from, to } => {
                    severity_changes.push((key.clone(), from, to));
                    if muted {
                    } else if inst.reported {
                        out.push((key, "firing", from));
                    } else {
                        // Muted until now: this is its first report.
                        inst.reported = true;
                        out.push((key, "firing", None));
                    }
                }
                Change::Fired(_) if muted => {}
                Change::Fired(_) => {
                    inst.reported = true;
                    out.push((key, "firing", None));
                }
                Change::Resolved => {
                    if inst.reported {
                        out.push((key, "resolved", None));
                    } else {
                        self.alerts.remove(&key);
                    }
                }
            }
        }
        // Alerts that were muted and no longer are.
        for (key, inst) in &mut self.alerts {
            if inst.state.is_firing()
                && !inst.reported
                && !changed.contains(key)
                && !is_muted(key, &inst.subject)
            {
                inst.reported = true;
                out.push((key.clone(), "firing", None));
            }
        }
        let mut transitions: Vec<Transition> = Vec::with_capacity(out.len());
        let mut reported: Vec<&AlertKey> = Vec::with_capacity(out.len());
        for (k, state, from) in &out {
            if let Some(mut tr) = self.transition(t, k, state) {
                tr.severity_from = *from;
                transitions.push(tr);
                reported.push(k);
            }
        }
        for (key, from, to) in severity_changes {
            let summary = match reported.iter().position(|k| **k == key) {
                Some(i) => Some(transitions[i].summary.clone()),
                None => self.transition(t, &key, "firing").map(|tr| tr.summary),
            };
            if let Some(inst) = self.alerts.get_mut(&key) {
                inst.severity_changes.push(SavedSeverityChange {
                    at_ms: t,
                    from: from.map(|s| s.as_str().to_string()),
                    to: to.as_str().to_string(),
                    summary,
                });
                self.dirty.insert(key);
            }
        }
        // A resolved message repeats what fired (the values now describe the recovery, not
        // the problem); the firing text is kept for that.
        for (tr, key) in transitions.iter_mut().zip(&reported) {
            let Some(inst) = self.alerts.get_mut(key) else {
                continue;
            };
            if tr.state == "firing" {
                inst.fired_summary = Some(tr.summary.clone());
            } else if let Some(s) = &inst.fired_summary {
                tr.summary = s.clone();
            }
        }
        for (key, ..) in &out {
            self.dirty.insert(key.clone());
        }
        let dirty = std::mem::take(&mut self.dirty);
        for key in dirty {
            let Some(inst) = self.alerts.get_mut(&key) else {
                continue;
            };
            let rule = self.rules.iter().find(|r| *r.name == *key.rule);
            let mut save = saved(&key, inst, rule);
            save.severity_changes = std::mem::take(&mut inst.severity_changes);
            self.saves.push(save);
        }
        // Forget instances that are over (after rendering their resolved message).
        self.alerts.retain(|_, i| i.state.phase != Phase::Inactive);
        transitions
    }

    fn transition(&self, t: TsMs, key: &AlertKey, state: &'static str) -> Option<Transition> {
        let rule = self.rules.iter().find(|r| *r.name == *key.rule)?;
        let inst = self.alerts.get(key)?;
        let gpu = self.world.gpus.get(&key.gpu_id)?;
        let proc = key.process_id.and_then(|p| gpu.procs.get(&p));
        let target = Target {
            gpu,
            proc,
            whole_gpu: rule.scope == Scope::Process && key.process_id.is_none(),
        };
        let peers = PeerMemo::default();
        let ctx = EvalCtx {
            world: &self.world,
            t,
            staleness_ms: self.opts.staleness_ms,
            peers: &peers,
        };
        let values: Vec<(String, Outcome)> = rule
            .values
            .iter()
            .map(|(n, e)| (n.clone(), ctx.eval(e, target)))
            .collect();
        let s = &inst.subject;
        let severity = inst.state.severity.unwrap_or(rule.severity);
        let since = inst.state.active_since;
        // `{job}`: the training job across nodes when known, else (as before there was one)
        // the `job` label of the GPU's step series.
        let job = s.training_job.clone().or_else(|| {
            gpu.training
                .0
                .and_then(|id| self.world.training.get(&id))
                .and_then(|ts| {
                    ts.labels
                        .iter()
                        .find(|(k, _)| k == "job")
                        .map(|(_, v)| v.clone())
                })
        });
        let vars = |name: &str| -> Option<TemplateValue> {
            let text = |v: &Option<String>| {
                Some(v.clone().map_or(TemplateValue::NoData, TemplateValue::Text))
            };
            match name {
                "host" => Some(TemplateValue::Text(s.host.clone())),
                "gpu" => Some(
                    s.gpu_address()
                        .map_or(TemplateValue::NoData, TemplateValue::Text),
                ),
                "uuid" => text(&s.uuid),
                "model" => text(&s.model),
                "severity" => Some(TemplateValue::Text(severity.as_str().into())),
                "rule" => Some(TemplateValue::Text(rule.name.clone())),
                "for" => Some(since.map_or(TemplateValue::NoData, |a| {
                    TemplateValue::Text(crate::format::duration(t - a))
                })),
                "active" => Some(since.map_or(TemplateValue::NoData, |a| {
                    let window = rule.condition.longest_window().as_millis() as i64;
                    TemplateValue::Text(crate::format::duration((t - a).max(0) + window))
                })),
                "pid" => Some(s.pid.map_or(TemplateValue::NoData, |p| {
                    TemplateValue::Text(p.to_string())
                })),
                "process" => text(&s.process),
                "user" => text(&s.user),
                "cmdline" => text(&s.cmdline),
                "who" => Some(TemplateValue::Text(match (s.pid, &s.process) {
                    (Some(pid), Some(name)) => format!("pid {pid} {name}"),
                    (Some(pid), None) => format!("pid {pid}"),
                    (None, _) => "all processes: per-process memory not observed".to_string(),
                })),
                "job" => text(&job),
                "training_job" => text(&s.training_job),
                _ => {
                    if let Some(l) = name.strip_prefix("label_") {
                        return rule.labels.get(l).map(|v| TemplateValue::Text(v.clone()));
                    }
                    values
                        .iter()
                        .find(|(n, _)| n == name)
                        .map(|(_, v)| match v {
                            Ok(Some(x)) => TemplateValue::Number(*x),
                            _ => TemplateValue::NoData,
                        })
                }
            }
        };
        let labels = s.labels(&rule.labels);
        let mut metrics = Vec::new();
        rule.condition.metrics(&mut metrics);
        let mut summary = rule.summary.render(&vars);
        if let Some(note) = assumed(rule, gpu) {
            summary.push_str(&note);
        }
        Some(Transition {
            at: t,
            state,
            rule: rule.name.clone(),
            severity,
            subject: s.clone(),
            labels,
            summary,
            description: rule.description.as_ref().map(|d| d.render(&vars)),
            active_since: since,
            fired_at: inst.state.fired_at,
            gpu_id: key.gpu_id,
            process_id: key.process_id,
            scope: rule.scope,
            metric: metrics
                .first()
                .map(|m| crate::rules::names::metric_name(*m)),
            severity_from: None,
        })
    }
}

/// What the rule's thresholds took from the model table because the GPU did not report
/// them, said in the alert text: " (slowdown threshold 88 °C assumed from the H100 80GB HBM3
/// table)". Unknown stays visible: an assumed value is never presented as a reading.
fn assumed(rule: &Rule, gpu: &crate::rules::eval::world::Gpu) -> Option<String> {
    use crate::rules::ast::Static;
    use crate::rules::eval::expr::{StaticSource, static_source};
    let mut statics = Vec::new();
    rule.condition.statics(&mut statics);
    for e in rule
        .critical
        .iter()
        .chain(rule.values.iter().map(|(_, e)| e))
    {
        e.statics(&mut statics);
    }
    let mut table: Option<&str> = None;
    let mut parts = Vec::new();
    for st in statics {
        let Some((v, source)) = static_source(st, gpu) else {
            continue;
        };
        let what = match st {
            Static::TempSlowdown => format!("slowdown threshold {v:.0} °C"),
            Static::TempShutdown => format!("shutdown threshold {v:.0} °C"),
            Static::TempGpuMax => format!("max operating temperature {v:.0} °C"),
            Static::MemoryTotal => format!("memory total {v:.0} MiB"),
            Static::PowerLimitDefault => format!("default power limit {v:.0} W"),
            // A free GPU's memory is never reported: the table (or its largest value) is its
            // only source, documented with the rules; it guards, it does not measure.
            Static::MemFreeBaseline => continue,
            Static::NvlinksExpected => format!("{v:.0} NVLinks"),
            Static::PowerLimitMax | Static::PcieMaxGen | Static::PcieMaxWidth => continue,
            Static::HostGpuCount => continue,
        };
        if let StaticSource::Table(m) = source {
            table = Some(m.short());
            parts.push(what);
        }
    }
    let model = table?;
    Some(format!(
        " ({} assumed from the {model} table)",
        parts.join(", ")
    ))
}

/// Maps an evaluation outcome through the rule's policies.
fn verdict(rule: &Rule, o: Outcome) -> Verdict {
    let missing = |m: Missing| match m {
        Missing::Ok => Verdict::False,
        Missing::Alerting => Verdict::True,
        Missing::KeepLast => Verdict::Keep,
    };
    match o {
        Ok(Some(v)) if v != 0.0 => Verdict::True,
        Ok(Some(_)) => Verdict::False,
        Ok(None) => missing(rule.on_no_data),
        Err(_) => missing(rule.on_error),
    }
}

/// The targets a rule is evaluated for at `t`: (gpu id, process id, target). A process
/// rule with `fallback = "gpu"` is evaluated for the whole GPU where none of its live
/// processes reports its own memory (processes not observed, or NVML gives no per-process
/// memory).
fn targets<'a>(
    world: &'a World,
    rule: &Rule,
    ctx: &EvalCtx<'_>,
) -> Vec<(i64, Option<i64>, Target<'a>)> {
    let t = ctx.t;
    let mut out = Vec::new();
    let mut hosts: HashSet<&str> = HashSet::new();
    for g in world.gpus.values().filter(|g| g.last_ts.is_some()) {
        match rule.scope {
            Scope::Gpu => out.push((g.gpu_id, None, Target::gpu(g))),
            // One alert per host, keyed by (and evaluated with) the host's first GPU.
            Scope::Host => {
                if hosts.insert(g.host.as_str()) {
                    out.push((g.gpu_id, None, Target::gpu(g)));
                }
            }
            Scope::Process => {
                let stale = ctx.stale_after(g);
                let mut attributed = false;
                for p in g.procs.values().filter(|p| t - p.last_seen <= stale) {
                    attributed |= p.mem.series.last().is_some_and(|(ts, _)| t - ts <= stale);
                    out.push((g.gpu_id, Some(p.process_id), Target::process(g, p)));
                }
                if rule.gpu_fallback && !attributed {
                    out.push((g.gpu_id, None, Target::whole_gpu(g)));
                }
            }
        }
    }
    out
}
