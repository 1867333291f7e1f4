//! The typed form of a rule condition: what the parser produces once at load and the
//! evaluator walks at every cycle.
//!
//! Invariants: an `Expr` is already checked — every function has the right number and kinds
//! of arguments, every metric exists for the rule's scope, durations are positive — so the
//! evaluator never meets a type error. Values are `f64` with booleans as 0/1; "no data" is a
//! separate state carried by the evaluator, never a magic number.

use std::time::Duration;

pub use crate::metric::SampleId;

/// A series the evaluator can read for one GPU (or one process, or the host).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Metric {
    /// A per-GPU sample series of the metric registry (`crate::metric`), in the units the
    /// rule author sees.
    Sample(SampleId),
    /// Critical XIDs reported at that tick (0 when none): judged `hardware` by
    /// `crate::xid::judge`, a run's events counted; `sum` over a window.
    XidCritical,
    /// The number of the last XID seen at that tick (no data when none).
    Xid,
    /// XIDs of a job's crash (judged `application`: on half its GPUs of the host as its
    /// processes exited; `crate::xid::judge`), on the first of its GPUs with the XID.
    XidCrash,
    /// 1 while the GPU's training step stands still in a pause judged of this kind by its GPU
    /// signature (`rules::eval::world::pauses`), 0 while it is not (a pause of another kind,
    /// one not judged yet, or no pause); no data for a GPU without a training step.
    Pause(PauseKind),
    /// One point per ended pause of this kind: its length in seconds, at its end (the job's
    /// own pauses of a kind, learnt: `max(pause_flat_s[6h])`).
    PauseLen(PauseKind),
    // --- per-process (process scope only) ---
    /// Memory used by the process on this GPU, MiB.
    ProcessMem,
    // --- training metrics (joined to the GPU by labels) ---
    TrainingStep,
    TrainingLoss,
    /// 1 while the host's training-metrics source (Prometheus) is failing, 0 while it
    /// answers; no data for a host that never had training metrics, and in replays (a replay
    /// cannot know past outages). An instant value only (no windows).
    TrainingSourceFailing,
}

/// What a GPU did while its job's training step stood still.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PauseKind {
    /// Nothing runs: 0 % (the odd 1 %) and power at its floor (a host that stopped feeding
    /// the GPU: a dead dataloader, a deadlock).
    Flat,
    /// Near idle but something runs: short bursts of kernels or power, or a trickle of copy
    /// kernels (a checkpoint copying the model out).
    Bursty,
    /// Kernels running most of the time (an eval, or a collective spinning).
    Busy,
}

impl PauseKind {
    pub const ALL: [PauseKind; 3] = [PauseKind::Flat, PauseKind::Bursty, PauseKind::Busy];
}

/// Inventory facts (constant per GPU; no data when NVML did not report them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Static {
    /// Temperature where the GPU starts to slow down, °C.
    TempSlowdown,
    /// Temperature where the GPU shuts down, °C.
    TempShutdown,
    /// Maximum GPU operating temperature, °C.
    TempGpuMax,
    /// Memory total from the inventory, MiB.
    MemoryTotal,
    /// Power limit and its allowed range, W.
    PowerLimitDefault,
    PowerLimitMax,
    /// Maximum PCIe generation and width the link supports.
    PcieMaxGen,
    PcieMaxWidth,
    /// Number of GPUs on the host (for peer rules).
    HostGpuCount,
    /// NVLinks the model has (the model table only: a GPU reports the links it sees, not
    /// the ones it should have).
    NvlinksExpected,
    /// The most memory a free GPU of this model shows as used, MiB (the driver's reserved
    /// memory, from the model table; the largest of the table for a model it lacks).
    MemFreeBaseline,
}

/// Aggregations over a window `[t - window, t]` of one metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WindowFn {
    /// The newest value in the window.
    Last,
    /// The oldest value in the window.
    First,
    Avg,
    Min,
    Max,
    Sum,
    /// Number of samples with data.
    Count,
    /// Population standard deviation.
    Stddev,
    /// last - first.
    Delta,
    /// Per-second rate of increase, counter resets handled like Prometheus's `rate`.
    Rate,
    /// Increase of a counter over the window's samples, resets handled like Prometheus's
    /// `increase` (a drop counts the new value), not extrapolated.
    Increase,
    /// Number of times the value changed.
    Changes,
    /// Seconds since the value last changed (the whole window when it never did; no data when
    /// the window is empty).
    UnchangedFor,
    /// Seconds since the newest sample with data (staleness).
    Age,
    /// Seconds from the first to the newest sample in the window: how much history the
    /// window really holds (a process younger than the window has a short span).
    Span,
    /// The longest pause that ended in the window: seconds from one increase of the value to
    /// the next (the current run is `unchanged_for`; a decrease — a restart — and the time
    /// until the next increase are not pauses). 0 when none ended. Learns a job's normal
    /// checkpoint/eval pauses from its step counter.
    MaxUnchangedFor,
    /// The signed size of the newest value change in the window (new − old: negative when
    /// the value went back, e.g. a training job restarted from a checkpoint); no data when
    /// the value did not change in the window.
    LastChange,
    /// Least-squares slope, units per second.
    Slope,
    /// Coefficient of determination of the least-squares fit, 0..1.
    R2,
    /// Two-sided p-value of the least-squares slope (t-test, n-2 degrees of freedom).
    SlopePValue,
}

/// Robust trend statistics on the window downsampled to `step` means (1-minute means are the
/// right default: serial correlation makes 1-s samples overstate significance).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TrendFn {
    /// Mann–Kendall two-sided p-value (small = a significant monotonic trend).
    MannKendallP,
    /// Mann–Kendall S statistic normalised to -1..1 (Kendall's tau).
    KendallTau,
    /// Theil–Sen slope, units per second.
    TheilSen,
    /// The largest fall of the step means below their running maximum (0 for a series that
    /// never falls): a job restart or a freed buffer inside a leak window.
    Drawdown,
}

/// Comparisons with the other GPUs of the same host (or job).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PeerFn {
    /// (x - mean of peers) / stddev of peers; no data with fewer than 3 GPUs.
    ZScore,
    /// Median of the expression over all GPUs of the host.
    Median,
    /// x / median of all GPUs of the host.
    RatioToMedian,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnOp {
    Neg,
    Not,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    And,
    Or,
}

/// Functions of plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScalarFn {
    Abs,
    /// min(a, b) / max(a, b) of two values.
    Min2,
    Max2,
    /// `present(x)`: 1 when x has data, 0 when not (never no data itself).
    Present,
    /// `default(x, v)`: x, or v when x has no data.
    Default,
    /// `bit(x, mask)`: 1 when any bit of mask is set in x.
    Bit,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Number(f64),
    /// A duration literal used as a number of seconds (e.g. `unchanged_for(x[30m]) > 4m`).
    Seconds(f64),
    /// The newest value of a metric at the evaluation time (no data when older than the
    /// staleness bound, 3 sample intervals by default).
    Current(Metric),
    Static(Static),
    Window {
        func: WindowFn,
        metric: Metric,
        window: Duration,
    },
    /// `quantile(q, metric[window])`, q in 0..=1.
    Quantile {
        q: f64,
        metric: Metric,
        window: Duration,
    },
    /// `predict_linear(metric[window], horizon)`: the least-squares fit's value `horizon`
    /// after the evaluation time.
    PredictLinear {
        metric: Metric,
        window: Duration,
        horizon: Duration,
    },
    /// `time_to(metric[window], threshold)`: seconds until the least-squares fit reaches
    /// `threshold` (no data when it moves away from it or is flat; 0 when already there).
    TimeTo {
        metric: Metric,
        window: Duration,
        threshold: Box<Expr>,
    },
    /// `mann_kendall_p(metric[window], step)` and friends.
    Trend {
        func: TrendFn,
        metric: Metric,
        window: Duration,
        step: Duration,
    },
    /// `peer_zscore(expr)`: `expr` evaluated for every GPU of the host.
    Peer {
        func: PeerFn,
        expr: Box<Expr>,
    },
    Scalar {
        func: ScalarFn,
        args: Vec<Expr>,
    },
    Unary {
        op: UnOp,
        expr: Box<Expr>,
    },
    Binary {
        op: BinOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
}

impl Expr {
    /// Whether the tree has more than `limit` levels; walks at most `limit` levels down (the
    /// parser's bound on depth, [`super::parse::MAX_DEPTH`], uses it on trees it builds).
    pub fn deeper_than(&self, limit: usize) -> bool {
        let Some(below) = limit.checked_sub(1) else {
            return true;
        };
        match self {
            Expr::Number(_)
            | Expr::Seconds(_)
            | Expr::Current(_)
            | Expr::Static(_)
            | Expr::Window { .. }
            | Expr::Quantile { .. }
            | Expr::PredictLinear { .. }
            | Expr::Trend { .. } => false,
            Expr::TimeTo { threshold, .. } => threshold.deeper_than(below),
            Expr::Peer { expr, .. } | Expr::Unary { expr, .. } => expr.deeper_than(below),
            Expr::Scalar { args, .. } => args.iter().any(|a| a.deeper_than(below)),
            Expr::Binary { lhs, rhs, .. } => lhs.deeper_than(below) || rhs.deeper_than(below),
        }
    }

    /// Every inventory constant the expression reads.
    pub fn statics(&self, out: &mut Vec<Static>) {
        match self {
            Expr::Static(s) => {
                if !out.contains(s) {
                    out.push(*s);
                }
            }
            Expr::Number(_)
            | Expr::Seconds(_)
            | Expr::Current(_)
            | Expr::Window { .. }
            | Expr::Quantile { .. }
            | Expr::PredictLinear { .. }
            | Expr::Trend { .. } => {}
            Expr::TimeTo { threshold, .. } => threshold.statics(out),
            Expr::Peer { expr, .. } | Expr::Unary { expr, .. } => expr.statics(out),
            Expr::Scalar { args, .. } => args.iter().for_each(|a| a.statics(out)),
            Expr::Binary { lhs, rhs, .. } => {
                lhs.statics(out);
                rhs.statics(out);
            }
        }
    }

    /// The longest window the expression reads (zero when it reads instant values only).
    pub fn longest_window(&self) -> Duration {
        match self {
            Expr::Number(_) | Expr::Seconds(_) | Expr::Static(_) | Expr::Current(_) => {
                Duration::ZERO
            }
            Expr::Window { window, .. }
            | Expr::Quantile { window, .. }
            | Expr::PredictLinear { window, .. }
            | Expr::Trend { window, .. } => *window,
            Expr::TimeTo {
                window, threshold, ..
            } => (*window).max(threshold.longest_window()),
            Expr::Peer { expr, .. } | Expr::Unary { expr, .. } => expr.longest_window(),
            Expr::Scalar { args, .. } => args
                .iter()
                .map(Expr::longest_window)
                .max()
                .unwrap_or_default(),
            Expr::Binary { lhs, rhs, .. } => lhs.longest_window().max(rhs.longest_window()),
        }
    }

    /// Every metric the expression reads.
    pub fn metrics(&self, out: &mut Vec<Metric>) {
        match self {
            Expr::Number(_) | Expr::Seconds(_) | Expr::Static(_) => {}
            Expr::Current(m)
            | Expr::Window { metric: m, .. }
            | Expr::Quantile { metric: m, .. }
            | Expr::PredictLinear { metric: m, .. }
            | Expr::Trend { metric: m, .. } => {
                if !out.contains(m) {
                    out.push(*m);
                }
            }
            Expr::TimeTo {
                metric, threshold, ..
            } => {
                if !out.contains(metric) {
                    out.push(*metric);
                }
                threshold.metrics(out);
            }
            Expr::Peer { expr, .. } | Expr::Unary { expr, .. } => expr.metrics(out),
            Expr::Scalar { args, .. } => args.iter().for_each(|a| a.metrics(out)),
            Expr::Binary { lhs, rhs, .. } => {
                lhs.metrics(out);
                rhs.metrics(out);
            }
        }
    }
}

impl Metric {
    /// The registry's sample metric named `name`, for code and tests that name one (a
    /// compile-time error in a `const`, a panic elsewhere, when there is none).
    pub const fn sample(name: &str) -> Metric {
        Metric::Sample(SampleId::named(name))
    }
}
