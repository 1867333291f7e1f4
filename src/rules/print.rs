//! The canonical text of an [`Expr`]: what `rules test`, replay and messages print, with the
//! fewest parentheses that keep the meaning.
//!
//! Invariants: parsing the printed text gives the same expression back (the parser tests
//! check it for every function and operator); durations print in their largest whole unit
//! (`1800 s` → `30m`).

use std::fmt;
use std::time::Duration;

use super::ast::Expr;
use super::names::{metric_name, seconds_text, static_name};

/// Binding strength of an expression's outermost operator (higher binds tighter).
fn precedence(e: &Expr) -> u8 {
    use super::ast::{BinOp::*, UnOp};
    match e {
        Expr::Binary { op: Or, .. } => 1,
        Expr::Binary { op: And, .. } => 2,
        Expr::Unary { op: UnOp::Not, .. } => 3,
        Expr::Binary {
            op: Lt | Le | Gt | Ge | Eq | Ne,
            ..
        } => 4,
        Expr::Binary { op: Add | Sub, .. } => 5,
        Expr::Binary { op: Mul | Div, .. } => 6,
        Expr::Unary { op: UnOp::Neg, .. } => 7,
        _ => 8,
    }
}

/// A duration value (seconds) as a literal the lexer reads back as the same `f64`: the
/// largest unit of which it is a whole number that multiplies back exactly, else seconds in
/// Rust's shortest round-trip form (`2.55s`, never `2550ms`, which reads as 2.5500000000000003).
/// Fuzzing (`rule_expr`) found the old detour through `Duration`, which rounded to whole
/// nanoseconds and printed `ms` whatever the product gave back.
fn seconds_literal(s: f64) -> String {
    if s == 0.0 {
        return "0s".into();
    }
    let mut units = super::lex::UNITS.to_vec();
    units.sort_by(|a, b| b.1.total_cmp(&a.1));
    for (unit, scale) in units {
        let k = s / scale;
        if k >= 1.0 && k.fract() == 0.0 && k * scale == s {
            return format!("{k}{unit}");
        }
    }
    format!("{s}s")
}

struct Prec<'a>(&'a Expr, u8);

impl fmt::Display for Prec<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if precedence(self.0) < self.1 {
            write!(f, "({})", self.0)
        } else {
            write!(f, "{}", self.0)
        }
    }
}

/// The canonical source text: parsing it gives the same expression back.
impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use super::ast::{BinOp, UnOp};
        use super::functions::{peer_fn_name, scalar_fn_name, trend_fn_name, window_fn_name};
        let dur = |d: &Duration| seconds_text(*d);
        match self {
            Expr::Number(v) => write!(f, "{v}"),
            Expr::Seconds(s) => write!(f, "{}", seconds_literal(*s)),
            Expr::Current(m) => write!(f, "{}", metric_name(*m)),
            Expr::Static(s) => write!(f, "{}", static_name(*s)),
            Expr::Window {
                func,
                metric,
                window,
            } => {
                write!(
                    f,
                    "{}({}[{}])",
                    window_fn_name(*func),
                    metric_name(*metric),
                    dur(window)
                )
            }
            Expr::Quantile { q, metric, window } => {
                write!(
                    f,
                    "quantile({q}, {}[{}])",
                    metric_name(*metric),
                    dur(window)
                )
            }
            Expr::PredictLinear {
                metric,
                window,
                horizon,
            } => {
                let m = metric_name(*metric);
                write!(f, "predict_linear({m}[{}], {})", dur(window), dur(horizon))
            }
            Expr::TimeTo {
                metric,
                window,
                threshold,
            } => {
                write!(
                    f,
                    "time_to({}[{}], {threshold})",
                    metric_name(*metric),
                    dur(window)
                )
            }
            Expr::Trend {
                func,
                metric,
                window,
                step,
            } => {
                let (name, m) = (trend_fn_name(*func), metric_name(*metric));
                write!(f, "{name}({m}[{}], {})", dur(window), dur(step))
            }
            Expr::Peer { func, expr } => write!(f, "{}({expr})", peer_fn_name(*func)),
            Expr::Scalar { func, args } => {
                write!(f, "{}(", scalar_fn_name(*func))?;
                for (i, a) in args.iter().enumerate() {
                    let sep = if i > 0 { ", " } else { "" };
                    write!(f, "{sep}{a}")?;
                }
                write!(f, ")")
            }
            Expr::Unary {
                op: UnOp::Neg,
                expr,
            } => write!(f, "-{}", Prec(expr, 7)),
            Expr::Unary {
                op: UnOp::Not,
                expr,
            } => write!(f, "not {}", Prec(expr, 3)),
            Expr::Binary { op, lhs, rhs } => {
                let p = precedence(self);
                let (l, r) = if p == 4 { (p + 1, p + 1) } else { (p, p + 1) };
                let op = match op {
                    BinOp::Add => "+",
                    BinOp::Sub => "-",
                    BinOp::Mul => "*",
                    BinOp::Div => "/",
                    BinOp::Lt => "<",
                    BinOp::Le => "<=",
                    BinOp::Gt => ">",
                    BinOp::Ge => ">=",
                    BinOp::Eq => "==",
                    BinOp::Ne => "!=",
                    BinOp::And => "and",
                    BinOp::Or => "or",
                };
                write!(f, "{} {op} {}", Prec(lhs, l), Prec(rhs, r))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::ast::{BinOp, Metric, UnOp};

    fn bin(op: BinOp, lhs: Expr, rhs: Expr) -> Expr {
        Expr::Binary {
            op,
            lhs: Box::new(lhs),
            rhs: Box::new(rhs),
        }
    }

    #[test]
    fn parentheses_only_where_needed() {
        let (a, b, c) = (
            Expr::Current(Metric::sample("temp")),
            Expr::Number(2.0),
            Expr::Seconds(90.0),
        );
        let sum = bin(BinOp::Add, a.clone(), b.clone());
        assert_eq!(
            bin(BinOp::Mul, sum.clone(), c.clone()).to_string(),
            "(temp + 2) * 90s"
        );
        assert_eq!(
            bin(BinOp::Sub, a.clone(), sum.clone()).to_string(),
            "temp - (temp + 2)"
        );
        assert_eq!(
            bin(BinOp::Sub, sum.clone(), a.clone()).to_string(),
            "temp + 2 - temp"
        );
        let cmp = bin(BinOp::Lt, a.clone(), b.clone());
        assert_eq!(
            bin(BinOp::Eq, cmp.clone(), cmp.clone()).to_string(),
            "(temp < 2) == (temp < 2)"
        );
        let not = Expr::Unary {
            op: UnOp::Not,
            expr: Box::new(bin(BinOp::Or, cmp.clone(), cmp)),
        };
        assert_eq!(not.to_string(), "not (temp < 2 or temp < 2)");
        let neg = Expr::Unary {
            op: UnOp::Neg,
            expr: Box::new(sum),
        };
        assert_eq!(neg.to_string(), "-(temp + 2)");
    }
}
