//! Evaluating a condition for one target (a GPU, or a process on a GPU) at one time.
//!
//! Invariants:
//! - Three outcomes: a number (booleans are 0/1), no data (`Ok(None)`), or an error (the data
//!   source the expression needs is failing: `Err`). Rules map the last two through
//!   `on_no_data` / `on_error`.
//! - Logic is three-valued: `false and <no data>` is false, `true or <no data>` is true;
//!   everything else touching no data is no data. Division by zero is no data.

use crate::rules::ast::{BinOp, Expr, Metric, PeerFn, ScalarFn, Static, UnOp};
use crate::specs::ModelSpec;

use super::stats;
use super::window;
use super::world::{Gpu, Proc, Tracked, World};

/// Why a condition could not be evaluated (as opposed to having no data).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    #[error("the training metrics source for `{0}` is failing")]
    TrainingSourceDown(&'static str),
}

pub type Outcome = Result<Option<f64>, EvalError>;

/// What an expression is evaluated for.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub gpu: &'a Gpu,
    pub proc: Option<&'a Proc>,
    /// A process rule evaluated for the GPU as a whole (its processes' own memory is not
    /// known): `process_mem` reads the GPU's `mem_used`.
    pub whole_gpu: bool,
}

impl<'a> Target<'a> {
    pub fn gpu(gpu: &'a Gpu) -> Self {
        Self {
            gpu,
            proc: None,
            whole_gpu: false,
        }
    }

    pub fn process(gpu: &'a Gpu, proc: &'a Proc) -> Self {
        Self {
            gpu,
            proc: Some(proc),
            whole_gpu: false,
        }
    }

    pub fn whole_gpu(gpu: &'a Gpu) -> Self {
        Self {
            gpu,
            proc: None,
            whole_gpu: true,
        }
    }
}

/// Where and when to evaluate.
#[derive(Debug, Clone, Copy)]
pub struct EvalCtx<'a> {
    pub world: &'a World,
    pub t: i64,
    /// A GPU metric older than this is no data for an instant reference (at least; a GPU
    /// sampled less often gets 3 of its own intervals, see [`EvalCtx::stale_after`]).
    pub staleness_ms: i64,
    /// The peer functions' inner values at `t` (one memo per evaluation time).
    pub peers: &'a PeerMemo,
}

/// Each GPU's value of a peer function's inner expression, computed once per evaluation time
/// and shared by all its peers: without it a peer rule costs GPUs² window scans per tick.
/// Keyed by the expression's address, so a memo must not outlive the rules it was filled
/// from (the engine makes one per evaluation).
#[derive(Debug, Default)]
pub struct PeerMemo {
    /// (expression, GPU) → its value.
    values: std::cell::RefCell<std::collections::HashMap<(usize, i64), Option<f64>>>,
    /// GPU → its job's key ([`job_key`]): who its peers are.
    jobs: std::cell::RefCell<std::collections::HashMap<i64, Option<String>>>,
}

impl PeerMemo {
    fn get_or(&self, e: &Expr, gpu_id: i64, f: impl FnOnce() -> Outcome) -> Outcome {
        let key = (std::ptr::from_ref(e) as usize, gpu_id);
        if let Some(v) = self.values.borrow().get(&key) {
            return Ok(*v);
        }
        let v = f()?;
        self.values.borrow_mut().insert(key, v);
        Ok(v)
    }

    /// Whether `a` and `b` work for a job, and for the same one: each GPU's job is
    /// found once per evaluation, not once per pair.
    fn jobs(&self, world: &World, a: &Gpu, b: &Gpu) -> (bool, bool, bool) {
        for g in [a, b] {
            if !self.jobs.borrow().contains_key(&g.gpu_id) {
                let key = job_key(world, g);
                self.jobs.borrow_mut().insert(g.gpu_id, key);
            }
        }
        let jobs = self.jobs.borrow();
        let (ja, jb) = (&jobs[&a.gpu_id], &jobs[&b.gpu_id]);
        (ja.is_some(), jb.is_some(), ja.is_some() && ja == jb)
    }
}

/// Prometheus's lookback: a training metric older than this is no data.
const TRAINING_STALENESS_MS: i64 = 5 * 60_000;
/// z-scores against identical peers are capped instead of infinite.
const Z_CAP: f64 = 1e6;

fn b(v: bool) -> f64 {
    f64::from(u8::from(v))
}

fn ms(d: std::time::Duration) -> i64 {
    d.as_millis() as i64
}

impl<'a> EvalCtx<'a> {
    /// How old a GPU's newest sample may be and still count: 3 of its sampling intervals,
    /// and never less than the configured bound.
    pub fn stale_after(&self, gpu: &Gpu) -> i64 {
        self.staleness_ms.max(3 * gpu.interval.ms())
    }

    /// The series of `m` for `target`: `Ok(None)` when there is none, `Err` when its source is
    /// failing.
    fn tracked(&self, m: Metric, target: Target<'a>) -> Result<Option<&'a Tracked>, EvalError> {
        match m {
            Metric::ProcessMem => Ok(match target.proc {
                Some(p) => Some(&p.mem),
                None if target.whole_gpu => target
                    .gpu
                    .series
                    .get(&Metric::Sample(crate::metric::MEM_USED)),
                None => None,
            }),
            Metric::TrainingStep | Metric::TrainingLoss => {
                let (role, id) = if m == Metric::TrainingStep {
                    ("step", target.gpu.training.0)
                } else {
                    ("loss", target.gpu.training.1)
                };
                if self
                    .world
                    .training_down
                    .contains(&(target.gpu.host.clone(), role))
                {
                    return Err(EvalError::TrainingSourceDown(role));
                }
                Ok(id
                    .and_then(|id| self.world.training.get(&id))
                    .map(|t| &t.points))
            }
            _ => Ok(target.gpu.series.get(&m)),
        }
    }

    pub fn eval(&self, e: &Expr, target: Target<'a>) -> Outcome {
        let t = self.t;
        Ok(match e {
            Expr::Number(v) | Expr::Seconds(v) => Some(*v),
            Expr::Static(s) => static_value(*s, target.gpu, self.world),
            Expr::Current(Metric::TrainingSourceFailing) => {
                let host = &target.gpu.host;
                if !self.world.training_known.contains(host) {
                    return Ok(None);
                }
                Some(b(self.world.training_down.iter().any(|(h, _)| h == host)))
            }
            Expr::Current(m) => {
                let stale = match m {
                    Metric::TrainingStep | Metric::TrainingLoss | Metric::Pause(_) => {
                        TRAINING_STALENESS_MS
                    }
                    _ => self.stale_after(target.gpu),
                };
                self.tracked(*m, target)?
                    .and_then(|tr| tr.series.last())
                    .filter(|(ts, _)| *ts <= t && t - ts <= stale)
                    .map(|(_, v)| v)
            }
            Expr::Window {
                func,
                metric,
                window: w,
            } => self
                .tracked(*metric, target)?
                .and_then(|tr| window::window(&tr.series, *func, t, ms(*w))),
            Expr::Quantile {
                q,
                metric,
                window: w,
            } => self
                .tracked(*metric, target)?
                .and_then(|tr| window::quantile(&tr.series, *q, t, ms(*w))),
            Expr::PredictLinear {
                metric,
                window: w,
                horizon,
            } => self
                .tracked(*metric, target)?
                .and_then(|tr| window::predict_linear(&tr.series, t, ms(*w), ms(*horizon))),
            Expr::TimeTo {
                metric,
                window: w,
                threshold,
            } => {
                let Some(thr) = self.eval(threshold, target)? else {
                    return Ok(None);
                };
                self.tracked(*metric, target)?
                    .and_then(|tr| window::time_to(&tr.series, t, ms(*w), thr))
            }
            Expr::Trend {
                func,
                metric,
                window: w,
                step,
            } => self.tracked(*metric, target)?.and_then(|tr| {
                let mut cache = tr.trend.borrow_mut();
                window::trend(&tr.series, &mut cache, *func, t, ms(*w), ms(*step))
            }),
            Expr::Peer { func, expr } => self.peer(*func, expr, target)?,
            Expr::Scalar { func, args } => self.scalar(*func, args, target)?,
            Expr::Unary { op, expr } => {
                let v = self.eval(expr, target)?;
                v.map(|v| match op {
                    UnOp::Neg => -v,
                    UnOp::Not => b(v == 0.0),
                })
            }
            Expr::Binary { op, lhs, rhs } => self.binary(*op, lhs, rhs, target)?,
        })
    }

    fn binary(&self, op: BinOp, lhs: &Expr, rhs: &Expr, target: Target<'a>) -> Outcome {
        let l = self.eval(lhs, target)?;
        match op {
            BinOp::And => {
                if l == Some(0.0) {
                    return Ok(Some(0.0));
                }
                let r = self.eval(rhs, target)?;
                return Ok(match (l, r) {
                    (_, Some(0.0)) => Some(0.0),
                    (Some(_), Some(_)) => Some(1.0),
                    _ => None,
                });
            }
            BinOp::Or => {
                if l.is_some_and(|l| l != 0.0) {
                    return Ok(Some(1.0));
                }
                let r = self.eval(rhs, target)?;
                return Ok(match (l, r) {
                    (_, Some(r)) if r != 0.0 => Some(1.0),
                    (Some(_), Some(_)) => Some(0.0),
                    _ => None,
                });
            }
            _ => {}
        }
        let (Some(l), Some(r)) = (l, self.eval(rhs, target)?) else {
            return Ok(None);
        };
        Ok(match op {
            BinOp::Add => Some(l + r),
            BinOp::Sub => Some(l - r),
            BinOp::Mul => Some(l * r),
            BinOp::Div if r == 0.0 => None,
            BinOp::Div => Some(l / r),
            BinOp::Lt => Some(b(l < r)),
            BinOp::Le => Some(b(l <= r)),
            BinOp::Gt => Some(b(l > r)),
            BinOp::Ge => Some(b(l >= r)),
            BinOp::Eq => Some(b(l == r)),
            BinOp::Ne => Some(b(l != r)),
            BinOp::And | BinOp::Or => None,
        })
    }

    fn scalar(&self, func: ScalarFn, args: &[Expr], target: Target<'a>) -> Outcome {
        let arg = |i: usize| -> Outcome { args.get(i).map_or(Ok(None), |a| self.eval(a, target)) };
        Ok(match func {
            ScalarFn::Abs => arg(0)?.map(f64::abs),
            ScalarFn::Min2 => arg(0)?.zip(arg(1)?).map(|(a, c)| a.min(c)),
            ScalarFn::Max2 => arg(0)?.zip(arg(1)?).map(|(a, c)| a.max(c)),
            ScalarFn::Present => Some(b(arg(0)?.is_some())),
            ScalarFn::Default => match arg(0)? {
                Some(v) => Some(v),
                None => arg(1)?,
            },
            ScalarFn::Bit => arg(0)?
                .zip(arg(1)?)
                .map(|(v, m)| b((v as u64) & (m as u64) != 0)),
        })
    }

    /// `expr` for this GPU against its peers (see [`EvalCtx::is_peer`]); processes use the
    /// GPU-level value.
    fn peer(&self, func: PeerFn, expr: &Expr, target: Target<'a>) -> Outcome {
        let value = |g: &'a Gpu| {
            self.peers
                .get_or(expr, g.gpu_id, || self.eval(expr, Target::gpu(g)))
        };
        let Some(me) = value(target.gpu)? else {
            return Ok(None);
        };
        let mut others = Vec::new();
        for g in self
            .world
            .gpus
            .values()
            .filter(|g| self.is_peer(target.gpu, g))
        {
            if let Some(v) = value(g)? {
                others.push(v);
            }
        }
        Ok(match func {
            PeerFn::ZScore => {
                if others.len() < 2 {
                    return Ok(None);
                }
                let n = others.len() as f64;
                let mean = others.iter().sum::<f64>() / n;
                let sd = (others.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt();
                let z = if sd > 0.0 {
                    (me - mean) / sd
                } else if me == mean {
                    0.0
                } else {
                    (me - mean).signum() * Z_CAP
                };
                Some(z.clamp(-Z_CAP, Z_CAP))
            }
            PeerFn::Median => {
                others.push(me);
                stats::median(&mut others)
            }
            PeerFn::RatioToMedian => {
                others.push(me);
                match stats::median(&mut others) {
                    Some(m) if m != 0.0 => Some(me / m),
                    _ => None,
                }
            }
        })
    }
}

impl EvalCtx<'_> {
    /// Whether `g` is a peer of `me`: another GPU of the same host and model — a job rarely
    /// mixes models, and mixed models differ for no fault of theirs — of the same training
    /// job when `me` has one, else one that is in use (holding a job's memory) and in no job:
    /// a free GPU next to a job is not the job's peer.
    fn is_peer(&self, me: &Gpu, g: &Gpu) -> bool {
        if g.host != me.host || g.gpu_id == me.gpu_id || g.inv.name != me.inv.name {
            return false;
        }
        match self.peers.jobs(self.world, me, g) {
            (true, _, same) => same,
            (false, g_has_job, _) => !g_has_job && self.in_use(g),
        }
    }

    /// The GPU's newest memory reading is more than 1 GiB above a free GPU's.
    fn in_use(&self, g: &Gpu) -> bool {
        let baseline = static_source(Static::MemFreeBaseline, g).map_or(0.0, |(v, _)| v);
        g.series
            .get(&Metric::Sample(crate::metric::MEM_USED))
            .and_then(|tr| tr.series.last())
            .is_some_and(|(ts, v)| self.t - ts <= self.stale_after(g) && v > baseline + 1024.0)
    }
}

/// The job a GPU works for, as a key: GPUs of one job are peers, GPUs of different jobs
/// are not (four single-GPU jobs on a host are not each other's stragglers): its training job
/// across nodes (`World::training_job`), else the `job` label of its step series.
fn job_key(world: &World, g: &Gpu) -> Option<String> {
    if let Some(j) = world.training_job(g) {
        return Some(format!("{}:{}", j.source.as_str(), j.name));
    }
    let t = world.training.get(&g.training.0?)?;
    t.labels
        .iter()
        .find(|(k, _)| k == "job")
        .map(|(_, v)| format!("series:{v}"))
}

fn static_value(s: Static, g: &Gpu, world: &World) -> Option<f64> {
    if s == Static::HostGpuCount {
        return Some(world.gpus.values().filter(|o| o.host == g.host).count() as f64);
    }
    static_source(s, g).map(|(v, _)| v)
}

/// Where an inventory constant's value came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StaticSource {
    /// The GPU (NVML, or the imported log) reported it.
    Reported,
    /// The GPU did not report it: the model table's value (`crate::specs`).
    Table(&'static ModelSpec),
    /// Neither knows it for this model: the table's most conservative value (only for
    /// `mem_free_baseline`: the largest reservation of any known model).
    Generic,
}

/// A GPU's inventory constant and its source (`HostGpuCount` is not one: see `static_value`).
pub fn static_source(s: Static, g: &Gpu) -> Option<(f64, StaticSource)> {
    let inv = &g.inv;
    let f = |v: Option<u32>| v.map(f64::from);
    let reported = match s {
        Static::TempSlowdown => f(inv.temp_slowdown_c),
        Static::TempShutdown => f(inv.temp_shutdown_c),
        Static::TempGpuMax => f(inv.temp_gpu_max_c),
        Static::MemoryTotal => inv.memory_total_bytes.map(|b| b as f64 / (1024.0 * 1024.0)),
        Static::PowerLimitDefault => inv.power_limit_mw.map(|w| f64::from(w) / 1000.0),
        Static::PowerLimitMax => inv.power_limit_max_mw.map(|w| f64::from(w) / 1000.0),
        Static::PcieMaxGen => f(inv.pcie_max_gen),
        Static::PcieMaxWidth => f(inv.pcie_max_width),
        Static::HostGpuCount | Static::MemFreeBaseline | Static::NvlinksExpected => None,
    };
    if let Some(v) = reported {
        return Some((v, StaticSource::Reported));
    }
    let table = g.spec.and_then(|m| {
        let v = match s {
            Static::TempSlowdown => f(m.temp_slowdown_c),
            Static::TempShutdown => f(m.temp_shutdown_c),
            Static::TempGpuMax => f(m.temp_max_c),
            Static::MemoryTotal => m.memory_total_mib.map(|v| v as f64),
            Static::PowerLimitDefault => f(m.power_default_w),
            Static::MemFreeBaseline => f(m.reserved_mib),
            Static::NvlinksExpected => f(m.nvlinks),
            Static::PowerLimitMax
            | Static::PcieMaxGen
            | Static::PcieMaxWidth
            | Static::HostGpuCount => None,
        }?;
        Some((v, StaticSource::Table(m)))
    });
    table.or_else(|| {
        (s == Static::MemFreeBaseline).then(|| {
            (
                f64::from(crate::specs::largest_reserved_mib()),
                StaticSource::Generic,
            )
        })
    })
}
