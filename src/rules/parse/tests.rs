//! Parser tests: precedence, every function, canonical printing, and the error catalogue
//! (message, hint and column of each kind of mistake).

use std::time::Duration;

use super::*;
use crate::rules::ast::{Metric, PeerFn, ScalarFn, Static, TrendFn, WindowFn};

fn gpu(src: &str) -> Expr {
    parse_condition(src, Scope::Gpu).unwrap_or_else(|e| panic!("{src}: {e}"))
}

fn val(src: &str, scope: Scope) -> Expr {
    parse_expr(src, scope).unwrap_or_else(|e| panic!("{src}: {e}"))
}

/// Every error of `src` as `column: message (hint)`.
fn errs(src: &str, scope: Scope, want: Want) -> Vec<String> {
    match parse_checked(src, scope, want) {
        Ok(e) => panic!("{src} parsed as {e:?}"),
        Err(es) => es.iter().map(ToString::to_string).collect(),
    }
}

fn err(src: &str) -> String {
    let mut e = errs(src, Scope::Gpu, Want::Condition);
    assert_eq!(e.len(), 1, "{src}: {e:?}");
    e.remove(0)
}

fn bin(op: BinOp, lhs: Expr, rhs: Expr) -> Expr {
    Expr::Binary {
        op,
        lhs: Box::new(lhs),
        rhs: Box::new(rhs),
    }
}

fn cur(m: Metric) -> Expr {
    Expr::Current(m)
}

#[test]
fn precedence_and_associativity() {
    let (lost, gap, temp, fan) = (
        Metric::sample("lost"),
        Metric::sample("gap"),
        Metric::sample("temp"),
        Metric::sample("fan"),
    );
    let n = Expr::Number;
    assert_eq!(
        gpu("lost or gap and temp > 3"),
        bin(
            BinOp::Or,
            cur(lost),
            bin(BinOp::And, cur(gap), bin(BinOp::Gt, cur(temp), n(3.0)))
        )
    );
    let not_lt = Expr::Unary {
        op: UnOp::Not,
        expr: Box::new(bin(BinOp::Lt, cur(temp), n(1.0))),
    };
    assert_eq!(gpu("not temp < 1"), not_lt);
    let neg = Expr::Unary {
        op: UnOp::Neg,
        expr: Box::new(cur(fan)),
    };
    assert_eq!(
        val("-fan * 2 - 1 - temp", Scope::Gpu),
        bin(
            BinOp::Sub,
            bin(BinOp::Sub, bin(BinOp::Mul, neg, n(2.0)), n(1.0)),
            cur(temp)
        )
    );
    assert_eq!(
        val("(1 + 2) * 3", Scope::Gpu),
        bin(BinOp::Mul, bin(BinOp::Add, n(1.0), n(2.0)), n(3.0))
    );
    assert_eq!(val("true", Scope::Gpu), n(1.0));
    assert_eq!(gpu("false"), n(0.0));
}

#[test]
fn literals_names_and_calls() {
    let w = |func, metric, secs| Expr::Window {
        func,
        metric,
        window: Duration::from_secs(secs),
    };
    assert_eq!(
        gpu("unchanged_for(training_step[30m]) > 4m"),
        bin(
            BinOp::Gt,
            w(WindowFn::UnchangedFor, Metric::TrainingStep, 1800),
            Expr::Seconds(240.0)
        )
    );
    assert_eq!(
        gpu("temp >= temp_shutdown - 3"),
        bin(
            BinOp::Ge,
            cur(Metric::sample("temp")),
            bin(
                BinOp::Sub,
                Expr::Static(Static::TempShutdown),
                Expr::Number(3.0)
            )
        )
    );
    assert_eq!(
        val("min(util_gpu[25m])", Scope::Gpu),
        w(WindowFn::Min, Metric::sample("util_gpu"), 1500)
    );
    assert_eq!(
        val("max(temp, 3)", Scope::Gpu),
        Expr::Scalar {
            func: ScalarFn::Max2,
            args: vec![cur(Metric::sample("temp")), Expr::Number(3.0)]
        }
    );
    assert_eq!(
        val("quantile(0.9, temp[10m])", Scope::Gpu),
        Expr::Quantile {
            q: 0.9,
            metric: Metric::sample("temp"),
            window: Duration::from_secs(600)
        }
    );
    assert_eq!(
        val("theil_sen(process_mem[30m])", Scope::Process),
        Expr::Trend {
            func: TrendFn::TheilSen,
            metric: Metric::ProcessMem,
            window: Duration::from_secs(1800),
            step: Duration::from_secs(60)
        }
    );
    assert_eq!(
        val("peer_ratio(avg(power[5m]))", Scope::Gpu),
        Expr::Peer {
            func: PeerFn::RatioToMedian,
            expr: Box::new(w(WindowFn::Avg, Metric::sample("power"), 300))
        }
    );
}

/// Expressions that must parse, each printed back in canonical form.
const CANONICAL: &[&str] = &[
    "last(temp[5m]) > 80",
    "first(temp[5m]) + avg(util_gpu[5m]) + min(util_gpu[5m]) + max(temp[5m])",
    "sum(xid_critical[10m]) + count(temp[5m]) + stddev(power[10m]) + delta(ecc_corrected[1h])",
    "rate(training_step[5m]) + changes(training_step[10m]) + age(training_step[30m])",
    "slope(mem_used[30m]) * r2(mem_used[30m]) / slope_pvalue(mem_used[30m])",
    "quantile(0.9, temp[10m]) - predict_linear(mem_used[30m], 1h)",
    "time_to(mem_used[30m], mem_total - 512) / 60",
    "mann_kendall_p(mem_used[30m], 1m) < 0.01 and kendall_tau(mem_used[1h], 2m) > 0.5",
    "theil_sen(mem_used[30m], 30s) * 60 > 50",
    "peer_zscore(avg(util_gpu[5m])) < -3 or peer_median(power) > 100 or peer_ratio(temp) > 1.2",
    "abs(delta(temp[5m])) > 10 and present(training_step) and default(training_loss, 0) > 1",
    "bit(xid, 64) and not lost and min(temp, power) < max(fan, 3)",
    "-(temp - 1) * (fan + 2) == 0 or (lost or gap) and host_gpu_count >= 2",
    "not (not lost) and 1e-7 < 2 and temp > 1.5 and 500ms < 1h30m",
    "(temp > 1) == (fan > 2)",
    "max(thermal_throttle[1m])",
];

#[test]
fn every_function_parses_and_prints_back() {
    for src in CANONICAL {
        let e = val(src, Scope::Gpu);
        let printed = e.to_string();
        assert_eq!(val(&printed, Scope::Gpu), e, "{src} printed as {printed}");
    }
    assert_eq!(gpu(CANONICAL[9]).to_string(), CANONICAL[9]);
    assert_eq!(
        gpu("1e-7 < 2 and 500ms < 1h30m").to_string(),
        "0.0000001 < 2 and 500ms < 90m"
    );
    assert_eq!(
        gpu("-(1 - 2) - (3 - 4) < 1").to_string(),
        "-(1 - 2) - (3 - 4) < 1"
    );
}

/// Found by the `rule_expr` fuzz target: `2.55s` printed as `2550ms`, which the lexer reads
/// as 2550 × 0.001 = 2.5500000000000003 s, and long fractions were cut to whole nanoseconds.
#[test]
fn fractional_durations_print_back_to_the_same_seconds() {
    for src in [
        "2.55s",
        "2.8s",
        "0.0009953955976405989599m",
        "--0.0009953955976405989599m",
        "0.1s + 0.2s",
        "1.5h",
        "1w2d3h4m5s6ms",
    ] {
        let e = val(src, Scope::Gpu);
        let printed = e.to_string();
        assert_eq!(val(&printed, Scope::Gpu), e, "{src} printed as {printed}");
    }
    assert_eq!(val("2.55s", Scope::Gpu).to_string(), "2.55s");
    assert_eq!(val("1.5h", Scope::Gpu).to_string(), "90m");
}

/// Found replaying the fuzz corpora on a 2 MiB test thread: thousands of nested
/// parentheses or signs overflowed the stack (parser, printer, comparison). Up to
/// `MAX_DEPTH` every shape parses, prints and compares on such a thread; past it the error
/// says why.
#[test]
fn deep_expressions_stop_at_the_depth_limit() {
    let d = super::MAX_DEPTH;
    let ok = [
        format!("{}temp{} > 1", "(".repeat(d - 1), ")".repeat(d - 1)),
        format!("{}temp > 1", "-".repeat(d - 3)),
        format!("{}lost", "not ".repeat(d - 1)),
        format!("{} > 1", vec!["temp"; d - 2].join(" + ")),
        format!("{}lost", "lost and ".repeat(d - 2)),
    ];
    for src in &ok {
        let e = parse_checked(src, Scope::Gpu, Want::Condition).expect("parses");
        let printed = e.to_string();
        assert_eq!(gpu(&printed), e);
    }
    for src in [
        format!("{}temp{} > 1", "(".repeat(5000), ")".repeat(5000)),
        format!("{}temp > 1", "-".repeat(5000)),
        format!("{}lost", "not ".repeat(5000)),
        format!("{} > 1", vec!["1"; 5000].join(" + ")),
        format!("{}lost", "lost or ".repeat(5000)),
        format!("{}temp{} > 1", "max(".repeat(5000), ", 1)".repeat(5000)),
    ] {
        let e = errs(&src, Scope::Gpu, Want::Condition);
        assert!(
            e[0].contains("nested too deeply (more than 100 levels)"),
            "{e:?}"
        );
    }
}

#[test]
fn syntax_errors() {
    assert_eq!(err(""), "column 1: the expression is empty");
    assert_eq!(
        err("temp > "),
        "column 8: expected a value here, found the end of the expression"
    );
    assert_eq!(
        err("temp > 80 util_gpu < 5"),
        "column 11: expected an operator, found `util_gpu` (join conditions with `and` or `or`)"
    );
    assert_eq!(
        err("0 < temp < 80"),
        "column 10: comparisons cannot be chained (write `a < b and b < c`)"
    );
    assert_eq!(
        err("temp > 80 && lost"),
        "column 11: unexpected `&` (write `and`)"
    );
    assert_eq!(
        err("(temp > 80"),
        "column 1: this `(` is not closed (expected `)`, found the end of the expression)"
    );
    assert_eq!(
        err("avg(temp[5m] 3) > 1"),
        "column 14: expected `,` or `)` after an argument of `avg`, found `3` (separate arguments with `,`)"
    );
    assert_eq!(
        err("avg(temp[5m] > 3"),
        "column 4: the `(` of `avg` is not closed (expected `)`)"
    );
    assert_eq!(
        err("avg(temp[5]) > 1"),
        "column 10: a window needs a unit (write `temp[5s]` or `temp[5m]`)"
    );
    assert_eq!(
        err("avg(temp[x]) > 1"),
        "column 10: expected a window like `[5m]`, found `x`"
    );
    assert_eq!(
        err("lost == not gap"),
        "column 9: `not` cannot stand here (put parentheses around it: `(not x)`)"
    );
}

#[test]
fn name_errors() {
    assert_eq!(
        err("gpu_util < 5"),
        "column 1: unknown metric `gpu_util` (did you mean `util_gpu`?)"
    );
    assert_eq!(
        err("temperature > 80"),
        "column 1: unknown metric `temperature` (did you mean `temp`?)"
    );
    assert_eq!(
        err("avgg(temp[5m]) > 1"),
        "column 1: unknown function `avgg` (did you mean `avg`?)"
    );
    assert_eq!(
        err("avg_over_time(temp[5m]) > 1"),
        "column 1: unknown function `avg_over_time` (did you mean `avg`?)"
    );
    assert_eq!(
        err("deriv(mem_used[1h]) > 0"),
        "column 1: unknown function `deriv` (use `slope(x[5m])`)"
    );
    assert_eq!(
        err("temp(5) > 1"),
        "column 1: `temp` is a metric, not a function (e.g. `avg(temp[5m])`)"
    );
    assert_eq!(
        err("avg > 1"),
        "column 1: `avg` is a function (call it, e.g. `avg(util_gpu[5m])`)"
    );
    assert_eq!(
        err("max(temp_slowdown[5m]) > 1"),
        "column 5: `temp_slowdown` is a constant of the GPU, it has no history (write `temp_slowdown` without a window)"
    );
    // Two unknown names: both reported; the call around the first is not checked again.
    assert_eq!(
        errs("avg(foo[5m]) > tmp", Scope::Gpu, Want::Condition),
        vec![
            "column 5: unknown metric `foo` (docs/RULES.md lists every metric)",
            "column 16: unknown metric `tmp` (did you mean `temp`?)"
        ]
    );
}

#[test]
fn argument_errors() {
    assert_eq!(
        err("avg(util_gpu) < 5"),
        "column 5: `avg` needs a range like `util_gpu[5m]`, not a value (write `avg(util_gpu[5m])`)"
    );
    assert_eq!(
        err("avg(temp * 2) < 5"),
        "column 5: `avg` needs a range `metric[window]`, not an expression (e.g. `avg(util_gpu[5m])`)"
    );
    assert_eq!(
        err("util_gpu[5m] < 5"),
        "column 1: `util_gpu[5m]` is a range, not a value (aggregate it, e.g. `avg(util_gpu[5m])` or `last(util_gpu[5m])`)"
    );
    assert_eq!(
        err("abs(temp[30m]) > 1"),
        "column 5: `temp[30m]` is a range, not a value (aggregate it, e.g. `avg(temp[30m])` or `last(temp[30m])`)"
    );
    assert_eq!(
        err("avg(temp[5m], 3) > 1"),
        "column 1: `avg` takes 1 argument, got 2 (e.g. `avg(util_gpu[5m])`)"
    );
    assert_eq!(
        err("default(temp) > 1"),
        "column 1: `default` takes 2 arguments, got 1 (e.g. `default(training_loss, 0)`)"
    );
    assert_eq!(
        err("avg(temp[0s]) > 1"),
        "column 10: the window must be longer than 0s"
    );
    assert_eq!(
        err("quantile(1.5, temp[5m]) > 1"),
        "column 10: the quantile must be a number from 0 to 1 (e.g. `quantile(0.9, temp[10m])` for the 90th percentile)"
    );
    assert!(err("quantile(-0.1, temp[5m]) > 1").starts_with("column 10: the quantile"));
    assert_eq!(
        err("predict_linear(mem_used[30m], 3600) > 1"),
        "column 31: the horizon of `predict_linear` must be a duration like `1h` (e.g. `predict_linear(mem_used[30m], 1h)`)"
    );
    assert_eq!(
        err("theil_sen(mem_used[30m], 0s) > 1"),
        "column 26: the step of `theil_sen` must be longer than 0s"
    );
    assert_eq!(
        err("theil_sen(mem_used[5m], 2m) > 1"),
        "column 11: the window holds fewer than 3 steps of 2m (use a longer window or a shorter step)"
    );
    assert_eq!(
        err("bit(xid, 0.5)"),
        "column 10: the mask must be a whole number ≥ 1"
    );
}

#[test]
fn kind_and_scope_errors() {
    assert_eq!(
        err("avg(temp[5m])"),
        "column 1: the condition is a number, not true or false (compare it with a threshold, e.g. `avg(temp[5m]) > 0`)"
    );
    assert_eq!(
        err("temp > 80 and fan"),
        "column 15: `and` needs true or false, but `fan` is a number (compare it, e.g. `fan > 0`)"
    );
    assert_eq!(
        err("not changes(xid[5m])"),
        "column 5: `not` needs true or false, but `changes(xid[5m])` is a number (compare it, e.g. `changes(xid[5m]) > 0`)"
    );
    assert_eq!(
        err("process_mem > 100"),
        "column 1: `process_mem` exists only in rules with scope = \"process\" (add `scope = \"process\"` to the rule, or use `mem_used` (the whole GPU))"
    );
    assert!(parse_condition("process_mem > 100", Scope::Process).is_ok());
    assert_eq!(
        errs("peer_zscore(temp) > 3", Scope::Host, Want::Condition),
        vec!["column 1: `peer_zscore` compares GPUs; rules with scope = \"host\" have none"]
    );
    assert_eq!(
        err("peer_zscore(peer_median(temp)) > 3"),
        "column 13: peer functions cannot be nested"
    );
    assert_eq!(
        errs(
            "peer_ratio(avg(process_mem[5m])) > 3",
            Scope::Process,
            Want::Condition
        ),
        vec![
            "column 16: `process_mem` cannot be compared across GPUs (peer functions compare per-GPU values such as `mem_used`)"
        ]
    );
    // Values may be numbers; flags and true/false work as conditions.
    assert!(parse_expr("avg(temp[5m])", Scope::Gpu).is_ok());
    for ok in [
        "lost",
        "max(hw_slowdown[1m])",
        "default(lost, 0)",
        "present(xid)",
    ] {
        assert!(parse_condition(ok, Scope::Gpu).is_ok(), "{ok}");
    }
}

#[test]
fn columns_are_per_line_in_multi_line_expressions() {
    let src = "\n  temp > 80\n  and fan_speed > 3\n";
    assert_eq!(
        errs(src, Scope::Gpu, Want::Condition),
        vec!["column 7: unknown metric `fan_speed` (docs/RULES.md lists every metric)"]
    );
    let e = parse_condition(src, Scope::Gpu).expect_err("unknown");
    assert_eq!(e.offset, 19);
}

#[test]
fn truncated_and_damaged_expressions_never_panic() {
    for src in CANONICAL {
        for (i, _) in src.char_indices() {
            for scope in [Scope::Gpu, Scope::Process, Scope::Host] {
                let _ = parse_checked(&src[..i], scope, Want::Condition);
                let mut damaged = src.to_string();
                damaged.remove(i);
                let _ = parse_checked(&damaged, scope, Want::Value);
            }
        }
    }
}
