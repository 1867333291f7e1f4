//! The functions of the condition language: their table (name, signature, example) and the
//! builder that turns a call with parsed arguments into a checked [`Expr`].
//!
//! Invariants: every function a rule can call is in `FUNCTIONS` (docs/RULES.md lists the
//! same names); [`call`] returns an `Expr` only when the number and kinds of the arguments are
//! right (ranges where ranges are expected, plain values elsewhere, positive durations,
//! constants where constants are needed), so the evaluator never sees a bad call.

use std::ops::Range;
use std::time::Duration;

use super::ast::{Expr, Metric, PeerFn, ScalarFn, TrendFn, UnOp, WindowFn};
use super::lex::ExprError;
use super::names::{is_flag, metric_name, seconds_text, unknown_function};

/// What a value means to the type checker: numbers, true/false, or a 0/1 flag that is both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Num,
    Bool,
    Flag,
}

/// A parsed function argument.
#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    Value {
        expr: Expr,
        kind: Kind,
        span: Range<usize>,
    },
    /// `metric[window]`.
    Range {
        metric: Metric,
        window: Duration,
        span: Range<usize>,
    },
}

impl Arg {
    fn start(&self) -> usize {
        match self {
            Arg::Value { span, .. } | Arg::Range { span, .. } => span.start,
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Sig {
    Window(WindowFn),
    /// `min(x[w])` is a window function, `min(a, b)` a scalar one.
    MinMax(WindowFn, ScalarFn),
    Quantile,
    PredictLinear,
    TimeTo,
    Trend(TrendFn),
    Peer(PeerFn),
    Scalar(ScalarFn, usize),
}

/// Functions: name, signature, an example call (shown in hints).
#[rustfmt::skip]
const FUNCTIONS: &[(&str, Sig, &str)] = &[
    ("last",           Sig::Window(WindowFn::Last),         "last(temp[5m])"),
    ("first",          Sig::Window(WindowFn::First),        "first(temp[5m])"),
    ("avg",            Sig::Window(WindowFn::Avg),          "avg(util_gpu[5m])"),
    ("min",            Sig::MinMax(WindowFn::Min, ScalarFn::Min2), "min(util_gpu[5m])` or `min(a, b)"),
    ("max",            Sig::MinMax(WindowFn::Max, ScalarFn::Max2), "max(temp[5m])` or `max(a, b)"),
    ("sum",            Sig::Window(WindowFn::Sum),          "sum(xid_critical[10m])"),
    ("count",          Sig::Window(WindowFn::Count),        "count(temp[5m])"),
    ("stddev",         Sig::Window(WindowFn::Stddev),       "stddev(power[10m])"),
    ("delta",          Sig::Window(WindowFn::Delta),        "delta(ecc_corrected[1h])"),
    ("rate",           Sig::Window(WindowFn::Rate),         "rate(training_step[5m])"),
    ("increase",       Sig::Window(WindowFn::Increase),     "increase(ecc_uncorrected[10m])"),
    ("changes",        Sig::Window(WindowFn::Changes),      "changes(training_step[10m])"),
    ("unchanged_for",  Sig::Window(WindowFn::UnchangedFor), "unchanged_for(training_step[30m])"),
    ("max_unchanged_for", Sig::Window(WindowFn::MaxUnchangedFor), "max_unchanged_for(training_step[2h])"),
    ("last_change",    Sig::Window(WindowFn::LastChange),   "last_change(training_step[1h])"),
    ("age",            Sig::Window(WindowFn::Age),          "age(training_step[30m])"),
    ("span",           Sig::Window(WindowFn::Span),         "span(process_mem[30m])"),
    ("slope",          Sig::Window(WindowFn::Slope),        "slope(mem_used[30m])"),
    ("r2",             Sig::Window(WindowFn::R2),           "r2(mem_used[30m])"),
    ("slope_pvalue",   Sig::Window(WindowFn::SlopePValue),  "slope_pvalue(mem_used[30m])"),
    ("quantile",       Sig::Quantile,                       "quantile(0.9, temp[10m])"),
    ("predict_linear", Sig::PredictLinear,                  "predict_linear(mem_used[30m], 1h)"),
    ("time_to",        Sig::TimeTo,                         "time_to(mem_used[30m], mem_total)"),
    ("mann_kendall_p", Sig::Trend(TrendFn::MannKendallP),   "mann_kendall_p(mem_used[30m], 1m)"),
    ("kendall_tau",    Sig::Trend(TrendFn::KendallTau),     "kendall_tau(mem_used[30m], 1m)"),
    ("theil_sen",      Sig::Trend(TrendFn::TheilSen),       "theil_sen(mem_used[30m], 1m)"),
    ("drawdown",       Sig::Trend(TrendFn::Drawdown),       "drawdown(mem_used[30m], 1m)"),
    ("peer_zscore",    Sig::Peer(PeerFn::ZScore),           "peer_zscore(avg(util_gpu[5m]))"),
    ("peer_median",    Sig::Peer(PeerFn::Median),           "peer_median(avg(util_gpu[5m]))"),
    ("peer_ratio",     Sig::Peer(PeerFn::RatioToMedian),    "peer_ratio(avg(power[5m]))"),
    ("abs",            Sig::Scalar(ScalarFn::Abs, 1),       "abs(delta(temp[5m]))"),
    ("present",        Sig::Scalar(ScalarFn::Present, 1),   "present(training_step)"),
    ("default",        Sig::Scalar(ScalarFn::Default, 2),   "default(training_loss, 0)"),
    ("bit",            Sig::Scalar(ScalarFn::Bit, 2),       "bit(xid, 64)"),
];

/// The name of the first function whose signature matches.
fn name_where(matches: impl Fn(&Sig) -> bool) -> &'static str {
    FUNCTIONS
        .iter()
        .find(|(_, s, _)| matches(s))
        .map_or("?", |(n, ..)| n)
}

/// The language's name of a window function (`WindowFn::Avg` → `avg`).
pub fn window_fn_name(f: WindowFn) -> &'static str {
    name_where(|s| matches!(s, Sig::Window(w) | Sig::MinMax(w, _) if *w == f))
}

pub fn trend_fn_name(f: TrendFn) -> &'static str {
    name_where(|s| matches!(s, Sig::Trend(t) if *t == f))
}

pub fn peer_fn_name(f: PeerFn) -> &'static str {
    name_where(|s| matches!(s, Sig::Peer(p) if *p == f))
}

pub fn scalar_fn_name(f: ScalarFn) -> &'static str {
    name_where(|s| matches!(s, Sig::Scalar(x, _) | Sig::MinMax(_, x) if *x == f))
}

pub fn function_names() -> impl Iterator<Item = &'static str> {
    FUNCTIONS.iter().map(|(n, ..)| *n)
}

pub fn is_function(name: &str) -> bool {
    FUNCTIONS.iter().any(|(n, ..)| *n == name)
}

pub fn is_peer(name: &str) -> bool {
    matches!(sig(name), Some(Sig::Peer(_)))
}

fn sig(name: &str) -> Option<Sig> {
    FUNCTIONS
        .iter()
        .find(|(n, ..)| *n == name)
        .map(|(_, s, _)| *s)
}

/// An example call of a function, for hints.
pub fn usage(name: &str) -> &'static str {
    FUNCTIONS
        .iter()
        .find(|(n, ..)| *n == name)
        .map_or("", |(.., u)| u)
}

/// Builds the call `name(args)`; `at` is the offset of the name. Returns the expression and
/// its kind.
pub fn call(name: &str, at: usize, args: Vec<Arg>) -> Result<(Expr, Kind), ExprError> {
    let Some(sig) = sig(name) else {
        return Err(unknown_function(name, at));
    };
    let arity = |min: usize, max: usize| -> Result<(), ExprError> {
        if (min..=max).contains(&args.len()) {
            return Ok(());
        }
        let want = match (min, max) {
            (1, 1) => "1 argument".to_string(),
            (a, b) if a == b => format!("{a} arguments"),
            (a, b) => format!("{a} or {b} arguments"),
        };
        Err(
            ExprError::new(at, format!("`{name}` takes {want}, got {}", args.len()))
                .hint(format!("e.g. `{}`", usage(name))),
        )
    };
    let arg = |i: usize| {
        args.get(i)
            .ok_or_else(|| ExprError::new(at, "missing argument"))
    };
    match sig {
        Sig::MinMax(w, s) => {
            arity(1, 2)?;
            if args.len() == 1 {
                let (metric, window) = range(name, arg(0)?)?;
                return Ok(window_fn(w, metric, window));
            }
            let (a, b) = (value(arg(0)?)?, value(arg(1)?)?);
            let kind = if a.1 == Kind::Num || b.1 == Kind::Num {
                Kind::Num
            } else {
                Kind::Flag
            };
            Ok((scalar(s, vec![a.0, b.0]), kind))
        }
        Sig::Window(w) => {
            arity(1, 1)?;
            let (metric, window) = range(name, arg(0)?)?;
            Ok(window_fn(w, metric, window))
        }
        Sig::Quantile => {
            arity(2, 2)?;
            let q_arg = arg(0)?;
            let q = match constant(q_arg) {
                Some(q) if (0.0..=1.0).contains(&q) => q,
                _ => {
                    return Err(ExprError::new(
                        q_arg.start(),
                        "the quantile must be a number from 0 to 1",
                    )
                    .hint("e.g. `quantile(0.9, temp[10m])` for the 90th percentile"));
                }
            };
            let (metric, window) = range(name, arg(1)?)?;
            Ok((Expr::Quantile { q, metric, window }, Kind::Num))
        }
        Sig::PredictLinear => {
            arity(2, 2)?;
            let (metric, window) = range(name, arg(0)?)?;
            let horizon = duration(name, "horizon", arg(1)?)?;
            Ok((
                Expr::PredictLinear {
                    metric,
                    window,
                    horizon,
                },
                Kind::Num,
            ))
        }
        Sig::TimeTo => {
            arity(2, 2)?;
            let (metric, window) = range(name, arg(0)?)?;
            let threshold = Box::new(value(arg(1)?)?.0);
            Ok((
                Expr::TimeTo {
                    metric,
                    window,
                    threshold,
                },
                Kind::Num,
            ))
        }
        Sig::Trend(func) => {
            arity(1, 2)?;
            let range_arg = arg(0)?;
            let (metric, window) = range(name, range_arg)?;
            let step = match args.get(1) {
                Some(a) => duration(name, "step", a)?,
                None => Duration::from_secs(60),
            };
            if window.as_secs_f64() < 3.0 * step.as_secs_f64() {
                return Err(ExprError::new(
                    range_arg.start(),
                    format!(
                        "the window holds fewer than 3 steps of {}",
                        seconds_text(step)
                    ),
                )
                .hint("use a longer window or a shorter step"));
            }
            Ok((
                Expr::Trend {
                    func,
                    metric,
                    window,
                    step,
                },
                Kind::Num,
            ))
        }
        Sig::Peer(func) => {
            arity(1, 1)?;
            let expr = Box::new(value(arg(0)?)?.0);
            Ok((Expr::Peer { func, expr }, Kind::Num))
        }
        Sig::Scalar(func, n) => {
            arity(n, n)?;
            let a = value(arg(0)?)?;
            let mut exprs = vec![a.0];
            if n == 2 {
                let b_arg = arg(1)?;
                let b = value(b_arg)?;
                if func == ScalarFn::Bit
                    && constant(b_arg).is_some_and(|m| m < 1.0 || m.fract() != 0.0)
                {
                    return Err(ExprError::new(
                        b_arg.start(),
                        "the mask must be a whole number ≥ 1",
                    ));
                }
                exprs.push(b.0);
            }
            let kind = match func {
                ScalarFn::Present | ScalarFn::Bit => Kind::Bool,
                ScalarFn::Default => a.1,
                _ => Kind::Num,
            };
            Ok((scalar(func, exprs), kind))
        }
    }
}

fn scalar(func: ScalarFn, args: Vec<Expr>) -> Expr {
    Expr::Scalar { func, args }
}

fn window_fn(func: WindowFn, metric: Metric, window: Duration) -> (Expr, Kind) {
    let keeps_kind = matches!(
        func,
        WindowFn::Last | WindowFn::First | WindowFn::Min | WindowFn::Max
    );
    let kind = if keeps_kind && is_flag(metric) {
        Kind::Flag
    } else {
        Kind::Num
    };
    (
        Expr::Window {
            func,
            metric,
            window,
        },
        kind,
    )
}

/// The argument as a range `metric[window]`.
fn range(name: &str, arg: &Arg) -> Result<(Metric, Duration), ExprError> {
    match arg {
        Arg::Range { metric, window, .. } => Ok((*metric, *window)),
        Arg::Value {
            expr: Expr::Current(m),
            span,
            ..
        } => {
            let m = metric_name(*m);
            Err(ExprError::new(
                span.start,
                format!("`{name}` needs a range like `{m}[5m]`, not a value"),
            )
            .hint(format!("write `{name}({m}[5m])`")))
        }
        Arg::Value { span, .. } => Err(ExprError::new(
            span.start,
            format!("`{name}` needs a range `metric[window]`, not an expression"),
        )
        .hint(format!("e.g. `{}`", usage(name)))),
    }
}

/// The argument as a plain value.
pub fn value(arg: &Arg) -> Result<(Expr, Kind), ExprError> {
    match arg {
        Arg::Value { expr, kind, .. } => Ok((expr.clone(), *kind)),
        Arg::Range {
            metric,
            window,
            span,
        } => Err(range_not_value(*metric, *window, span.start)),
    }
}

pub fn range_not_value(metric: Metric, window: Duration, at: usize) -> ExprError {
    let r = format!("{}[{}]", metric_name(metric), seconds_text(window));
    ExprError::new(at, format!("`{r}` is a range, not a value"))
        .hint(format!("aggregate it, e.g. `avg({r})` or `last({r})`"))
}

fn duration(name: &str, what: &str, arg: &Arg) -> Result<Duration, ExprError> {
    match arg {
        Arg::Value {
            expr: Expr::Seconds(s),
            ..
        } if *s > 0.0 => Ok(Duration::from_secs_f64(*s)),
        Arg::Value {
            expr: Expr::Seconds(_),
            span,
            ..
        } => Err(ExprError::new(
            span.start,
            format!("the {what} of `{name}` must be longer than 0s"),
        )),
        _ => Err(ExprError::new(
            arg.start(),
            format!("the {what} of `{name}` must be a duration like `1h`"),
        )
        .hint(format!("e.g. `{}`", usage(name)))),
    }
}

/// A literal number (possibly negated), not a duration or a boolean.
fn constant(arg: &Arg) -> Option<f64> {
    match arg {
        Arg::Value {
            expr: Expr::Number(v),
            kind: Kind::Num,
            ..
        } => Some(*v),
        Arg::Value {
            expr: Expr::Unary {
                op: UnOp::Neg,
                expr,
            },
            ..
        } => match **expr {
            Expr::Number(v) => Some(-v),
            _ => None,
        },
        _ => None,
    }
}
