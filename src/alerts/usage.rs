//! The usage ledger's eyes (docs/USAGE.md): one GPU of the rule evaluator's world at one
//! evaluation time, as [`crate::usage::Ledger`] takes it: its holders and the state each held
//! it in.
//!
//! Holders: the kubelet's allocation (pod, namespace, container, the training job its owner
//! names) and the GPU's current processes — by pod, else Slurm job, else container, else
//! user; a process with none of these is a holder that cannot be named. Idle: `gpu_idle`'s
//! activity test ([`IdleTest`]); a GPU allocated with no process on it is idle at once.

use crate::model::TsMs;
use crate::rules::ast::{BinOp, Expr, Metric, SampleId};
use crate::rules::eval::expr::{EvalCtx, Target};
use crate::rules::eval::world::Gpu;
use crate::rules::rule::{Rule, Scope};
use crate::usage::{GpuLabel, Holder, Observation, State};

const PROCESS_COUNT: Metric = Metric::Sample(SampleId::named("process_count"));
const UTIL_GPU: Metric = Metric::Sample(SampleId::named("util_gpu"));
const SM_ACTIVE: Metric = Metric::Sample(SampleId::named("sm_active"));

/// `gpu_idle`'s test of activity: the condition's part that is not about the GPU being held
/// (who holds it is the ledger's own business), and its window.
#[derive(Debug, Clone)]
pub struct IdleTest {
    /// `None`: no `gpu_idle` to take it from (activity is then unknown, never busy).
    pub activity: Option<Expr>,
    pub window_ms: i64,
    /// Held by memory where processes are not observed (the rule's own evidence).
    by_memory: Expr,
}

impl IdleTest {
    /// The test of the rule named `gpu_idle` in `rules` (enabled or not), else the shipped
    /// rule's.
    pub fn from_rules(rules: &[Rule]) -> IdleTest {
        let condition = match rules.iter().find(|r| r.name == "gpu_idle") {
            Some(r) => Some(r.condition.clone()),
            None => shipped().clone(),
        };
        let activity = condition.map(|c| match c {
            // `activity and held`: the part that does not read the process count.
            Expr::Binary {
                op: BinOp::And,
                lhs,
                rhs,
            } if reads(&rhs, PROCESS_COUNT) && !reads(&lhs, PROCESS_COUNT) => *lhs,
            c => c,
        });
        let window_ms = activity
            .as_ref()
            .map_or(0, |a| a.longest_window().as_millis() as i64);
        IdleTest {
            activity,
            window_ms,
            by_memory: parse("mem_used > mem_free_baseline + 256"),
        }
    }

    /// Every expression the ledger evaluates (the evaluator keeps their windows).
    pub fn exprs(&self) -> Vec<&Expr> {
        self.activity.iter().chain([&self.by_memory]).collect()
    }

    /// The metrics the ledger reads besides the expressions' own.
    pub fn current_metrics() -> [Metric; 3] {
        [PROCESS_COUNT, UTIL_GPU, SM_ACTIVE]
    }

    /// Since when a GPU the test finds idle at `t` has been idle: the oldest sample of the
    /// window (its activity series'), else the window's start.
    fn window_start(&self, g: &Gpu, t: TsMs) -> TsMs {
        [UTIL_GPU, SM_ACTIVE]
            .iter()
            .filter_map(|m| g.series.get(m))
            .filter_map(|tr| {
                let (i, j) = tr.series.range(t, self.window_ms);
                (i < j).then(|| tr.series.time(i))
            })
            .min()
            .unwrap_or(t - self.window_ms)
    }

    /// Observes `g` at `ctx.t`; `None` when it has no fresh sample.
    pub fn observe(&self, ctx: &EvalCtx<'_>, g: &Gpu) -> Option<Observation> {
        let t = ctx.t;
        let last = g.last_ts?;
        if last > t || t - last > ctx.stale_after(g) {
            return None;
        }
        let target = Target::gpu(g);
        let current = |m: Metric| ctx.eval(&Expr::Current(m), target).ok().flatten();
        let procs = current(PROCESS_COUNT);
        let alloc = g.holder_at(t);
        let mut holders: Vec<Holder> = Vec::new();
        if let Some(a) = alloc {
            holders.push(Holder {
                namespace: Some(a.namespace.clone()),
                pod: Some(a.pod.clone()),
                container: Some(a.container.clone()),
                ..Holder::default()
            });
        }
        for p in g.procs.values().filter(|p| p.last_seen >= last) {
            let pl = p.placement.as_ref();
            let h = match pl {
                Some(pl) if pl.pod.is_some() => Holder {
                    namespace: pl.namespace.clone(),
                    pod: pl.pod.clone(),
                    container: pl.container.clone(),
                    user: p.user.clone(),
                    ..Holder::default()
                },
                Some(pl) if pl.slurm_job.is_some() => Holder {
                    slurm_job: pl.slurm_job.map(|j| j.to_string()),
                    user: p.user.clone(),
                    ..Holder::default()
                },
                Some(pl) if pl.container.is_some() => Holder {
                    container: pl.container.clone(),
                    user: p.user.clone(),
                    ..Holder::default()
                },
                _ => Holder {
                    user: p.user.clone(),
                    ..Holder::default()
                },
            };
            merge(&mut holders, h);
        }
        holders.sort();
        let single = holders.len() == 1;
        for h in holders.iter_mut().filter(|h| h.is_known()) {
            h.training_job = if single {
                ctx.world.training_job(g)
            } else {
                crate::attribution::job::training_job(&crate::attribution::job::JobEvidence {
                    slurm_job: h.slurm_job.as_deref().and_then(|j| j.parse().ok()),
                    pod: h.pod.as_deref(),
                    pod_owner: alloc
                        .filter(|a| Some(&a.pod) == h.pod.as_ref())
                        .and_then(|a| a.job.as_deref()),
                    step_labels: None,
                    job_label: None,
                })
            }
            .map(|j| j.name);
        }
        let mut idle_since = None;
        let rows = if holders.is_empty() {
            let state = match procs {
                Some(0.0) => State::Free,
                Some(_) => State::Unknown,
                // Processes not observed: the memory says whether someone holds it.
                None => match ctx.eval(&self.by_memory, target) {
                    Ok(Some(0.0)) => State::Free,
                    _ => State::Unknown,
                },
            };
            vec![(Holder::default(), state)]
        } else {
            let activity = if procs == Some(0.0) {
                // Allocated, and no process on it: nothing can be running.
                State::IdleHeld
            } else if current(UTIL_GPU).is_none() && current(SM_ACTIVE).is_none() {
                State::Unknown
            } else {
                // As the rule's verdict (`on_no_data = "ok"`): a test that cannot decide
                // (an A100 has no SM activity for its second half) is not idle.
                match self.activity.as_ref().map(|a| ctx.eval(a, target)) {
                    Some(Ok(Some(v))) if v != 0.0 => {
                        idle_since = Some(self.window_start(g, t));
                        State::IdleHeld
                    }
                    Some(Ok(_)) => State::Busy,
                    Some(Err(_)) | None => State::Unknown,
                }
            };
            holders
                .into_iter()
                .map(|h| {
                    let s = if h.is_known() {
                        activity
                    } else {
                        State::Unknown
                    };
                    (h, s)
                })
                .collect()
        };
        Some(Observation {
            gpu_id: g.gpu_id,
            t,
            label: GpuLabel {
                index: Some(g.inv.index),
                uuid: g.inv.uuid.clone(),
                model: g.inv.name.clone(),
                mig: g.inv.mig.clone(),
            },
            rows,
            idle_since,
        })
    }
}

/// Adds `h` to `holders`, merged with the holder of the same pod, Slurm job, container or
/// (for bare processes) user.
fn merge(holders: &mut Vec<Holder>, h: Holder) {
    let same = |a: &Holder| {
        if h.pod.is_some() {
            a.pod == h.pod && a.namespace == h.namespace
        } else if h.slurm_job.is_some() {
            a.slurm_job == h.slurm_job
        } else if h.container.is_some() {
            a.pod.is_none() && a.slurm_job.is_none() && a.container == h.container
        } else {
            a.pod.is_none() && a.slurm_job.is_none() && a.container.is_none() && a.user == h.user
        }
    };
    match holders.iter_mut().find(|a| same(a)) {
        Some(a) => {
            if a.user.is_none() {
                a.user = h.user;
            }
            if a.container.is_none() {
                a.container = h.container;
            }
        }
        None => holders.push(h),
    }
}

fn reads(e: &Expr, m: Metric) -> bool {
    let mut v = Vec::new();
    e.metrics(&mut v);
    v.contains(&m)
}

fn parse(src: &str) -> Expr {
    // The expressions of this module are constants: a failure is a bug caught by its tests.
    crate::rules::parse_condition(src, Scope::Gpu).unwrap_or(Expr::Number(0.0))
}

/// The shipped `gpu_idle`'s condition, parsed once (the embedded rules; `None` only if they
/// did not load, which `rules check`'s tests rule out).
fn shipped() -> &'static Option<Expr> {
    static SHIPPED: std::sync::OnceLock<Option<Expr>> = std::sync::OnceLock::new();
    SHIPPED.get_or_init(|| {
        crate::rules::load_sources(&crate::rules::defaults())
            .ok()?
            .into_iter()
            .find(|r| r.name == "gpu_idle")
            .map(|r| r.condition)
    })
}

/// Accounts imported history: the ledger of `hosts`' GPUs over `[from, to]` built again from
/// the stored samples by the evaluator's own path (the engine stepped through every sample
/// time once for all of them, as `replay`), its rows replacing the range's, every interval
/// closed at the GPU's last sample there. Returns the rows' changes written.
pub fn account(
    db: &std::path::Path,
    hosts: &[String],
    (from, to): (TsMs, TsMs),
) -> Result<usize, crate::store::StoreError> {
    use crate::alerts::engine::{Engine, EngineOptions};
    let conn = crate::store::open_read_only(db)?;
    let staleness_ms = 3 * crate::alerts::replay::estimate_interval(&conn, from)?;
    let mut engine = Engine::new(
        Vec::new(),
        EngineOptions {
            staleness_ms,
            ..EngineOptions::default()
        },
        from - 1,
    );
    engine.world_mut().set_fetch_ahead(10 * 60_000);
    let gpu_hosts: std::collections::HashMap<i64, String> =
        crate::store::history::gpus(&conn, None)?
            .into_iter()
            .map(|g| (g.gpu_id, g.host))
            .collect();
    let mut ledger = crate::usage::Ledger::default();
    let mut ops = Vec::new();
    while let Some(t) = engine.world_mut().next_sample_time(&conn, to)? {
        engine.advance(&conn, t)?;
        for o in engine.observe_usage(t, None) {
            if !gpu_hosts.get(&o.gpu_id).is_some_and(|h| hosts.contains(h)) {
                continue;
            }
            let stale = engine.stale_after(o.gpu_id);
            ledger.observe(o, stale, &mut ops);
        }
    }
    ledger.close_all(&mut ops);
    let mut db = crate::store::alerts::AlertDb::open(db)?;
    db.replace_usage(hosts, (from, to), &ops)?;
    Ok(ops.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_gpu_idle_gives_its_activity_part_and_window() {
        let t = IdleTest::from_rules(&[]);
        assert_eq!(t.window_ms, 600_000);
        let a = t.activity.as_ref().expect("the shipped gpu_idle");
        assert!(!reads(a, PROCESS_COUNT));
        assert!(reads(a, UTIL_GPU));
        assert!(reads(a, SM_ACTIVE));
        assert!(!matches!(t.by_memory, Expr::Number(_)));
        // A loaded rule named gpu_idle wins over the shipped one, its held part left out.
        let rules = crate::rules::load_str(
            "[[rule]]\nname = \"gpu_idle\"\nseverity = \"warning\"\ncondition = \"avg(util_gpu[30m]) < 1 and min(process_count[30m]) > 0\"\nsummary = \"s\"\n",
            "r.toml",
        )
        .expect("rule");
        let t = IdleTest::from_rules(&rules);
        assert_eq!(t.window_ms, 1_800_000);
        assert_eq!(
            t.activity.expect("test").to_string(),
            "avg(util_gpu[30m]) < 1"
        );
    }
}
