//! Harness bodies of the text parsers: the rule language and rule files, the config file,
//! OpenMetrics / Prometheus text, Prometheus JSON answers, `/proc/PID/cgroup` and kernel-log
//! lines. Each takes raw bytes; input that is not UTF-8 goes where the daemon would send it
//! (lossily decoded where the daemon reads lossily, skipped where it refuses it).

use std::path::Path;

use crate::rules::parse::{Want, parse_checked};
use crate::rules::rule::Scope;

/// The rule language: any text parses or fails with errors inside the text; an expression
/// that parses prints to a text that parses to the same expression (and prints the same).
pub fn rule_expr(data: &[u8]) {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    for scope in [Scope::Gpu, Scope::Process, Scope::Host] {
        for want in [Want::Condition, Want::Value] {
            match parse_checked(src, scope, want) {
                Ok(expr) => {
                    let printed = expr.to_string();
                    match parse_checked(&printed, scope, want) {
                        Ok(again) => {
                            assert_eq!(
                                again, expr,
                                "{src:?} printed as {printed:?} reparses to another expression"
                            );
                            assert_eq!(
                                again.to_string(),
                                printed,
                                "printing is not stable for {src:?}"
                            );
                        }
                        Err(e) => {
                            panic!("{src:?} printed as {printed:?}, which does not parse: {e:?}")
                        }
                    }
                }
                Err(errors) => {
                    assert!(!errors.is_empty(), "an empty error list for {src:?}");
                    for e in errors {
                        assert!(
                            e.offset <= src.len(),
                            "error offset {} past the end of {src:?}",
                            e.offset
                        );
                        assert!(e.column >= 1, "column 0 in an error for {src:?}");
                    }
                }
            }
        }
    }
}

/// Rules TOML files, as `rules check` and the daemon load them: every error names a line of
/// the file (or none); every loaded rule's expressions print to text that parses again.
pub fn rules_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match crate::rules::load_str(text, "fuzz.toml") {
        Ok(rules) => {
            for r in rules {
                let exprs = std::iter::once((Want::Condition, &r.condition))
                    .chain(r.critical.iter().map(|e| (Want::Condition, e)))
                    .chain(r.resolve.iter().map(|e| (Want::Condition, e)))
                    .chain(r.values.iter().map(|(_, e)| (Want::Value, e)));
                for (want, e) in exprs {
                    let printed = e.to_string();
                    let again = parse_checked(&printed, r.scope, want);
                    assert!(
                        again.as_ref() == Ok(e),
                        "rule {}: {printed:?} reparses as {again:?}",
                        r.name
                    );
                }
            }
        }
        Err(errors) => errors_inside(text, errors.0.iter().map(|e| (e.position, &e.message))),
    }
}

/// The config file: parses or fails with errors inside the file.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(errors) = crate::config::Config::parse(text, Path::new("fuzz.toml")) {
        errors_inside(text, errors.0.iter().map(|e| (e.position, &e.message)));
    }
}

/// A file's errors: at least one, and every position (1-based line and column) inside `text`.
fn errors_inside<'a>(
    text: &str,
    errors: impl ExactSizeIterator<Item = (Option<(usize, usize)>, &'a String)>,
) {
    assert!(errors.len() > 0, "an empty error list");
    let lines = super::line_count(text).max(1);
    for (position, message) in errors {
        if let Some((line, col)) = position {
            assert!(
                line >= 1 && line <= lines + 1 && col >= 1,
                "error at {line}:{col} of a {lines}-line file: {message}"
            );
        }
    }
}

/// OpenMetrics and Prometheus text (`gpuwatch import openmetrics`), detected and forced:
/// samples come in line order with sorted, distinct labels; errors name a line of the input.
pub fn openmetrics(data: &[u8]) {
    use crate::training::openmetrics::{Format, parse_at};
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let lines = super::line_count(text);
    for format in [None, Some(Format::OpenMetrics), Some(Format::Prometheus)] {
        for scraped in [None, Some(1_700_000_000_000)] {
            match parse_at(text, format, scraped) {
                Ok(exp) => {
                    let mut last = 0;
                    for s in &exp.samples {
                        assert!(
                            s.line > last && s.line <= lines,
                            "sample line {} after {last} of {lines}",
                            s.line
                        );
                        last = s.line;
                        assert!(
                            s.labels.windows(2).all(|w| w[0].0 < w[1].0),
                            "labels not sorted and distinct: {:?}",
                            s.labels
                        );
                        let _ = exp.kind_of(&s.name);
                    }
                }
                Err(e) => {
                    assert!(
                        e.line >= 1 && e.line <= lines + 1 && e.col >= 1,
                        "error at {}:{} of {lines} lines: {}",
                        e.line,
                        e.col,
                        e.message
                    );
                }
            }
        }
    }
}

/// Prometheus `query_range` answers (the training-metrics fetcher), as a success and as an
/// error status: a parsed matrix has sorted labels without `__name__` and finite points in
/// time order.
pub fn prom_json(data: &[u8]) {
    for status in [200, 503] {
        if let Ok(m) = crate::training::parse_query_range(status, data) {
            assert_eq!(status, 200, "an error status parsed as a matrix");
            for s in &m.series {
                assert!(
                    s.labels.windows(2).all(|w| w[0].0 < w[1].0),
                    "labels not sorted: {:?}",
                    s.labels
                );
                assert!(
                    s.labels.iter().all(|(k, _)| k != "__name__"),
                    "__name__ kept as a label"
                );
                assert!(
                    s.points.windows(2).all(|w| w[0].0 <= w[1].0),
                    "points out of order"
                );
                assert!(
                    s.points.iter().all(|p| p.1.is_finite()),
                    "a non-finite point kept"
                );
            }
        }
    }
}

/// `/proc/PID/cgroup` (attribution; a file that is not UTF-8 is not read): the chosen cgroup
/// is one of the file's paths.
pub fn cgroup(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Some(c) = crate::attribution::cgroup::parse(text) {
        assert!(
            text.lines().any(|l| l.ends_with(c.path.as_str())),
            "path {:?} is not in the file",
            c.path
        );
    }
    for line in text.lines() {
        let _ = crate::attribution::cgroup::from_path(line);
    }
}

/// Kernel-log lines: `/dev/kmsg` records (`record::parse`, then the `NVRM:` parser on the
/// record's text, as the follower does) and whole `dmesg` / journal lines (the `NVRM:` parser
/// on the line, as `import dmesg` does). An error's offset lies inside the text it read.
pub fn kernel_log(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let clock = crate::kmsg::record::BootClock::fixed(1_700_000_000_000, 5_000_000);
    for line in text.lines() {
        if let Some(r) = crate::kmsg::record::parse(line) {
            let _ = clock.wall_ms(r.ts_us);
            let _ = clock.before_open(r.ts_us);
            nvrm(r.text);
        }
        nvrm(line);
    }
}

fn nvrm(text: &str) {
    use crate::xid::nvrm::{Nvrm, parse};
    match parse(text) {
        Ok(Some(Nvrm::Xid(x))) => {
            assert!(
                text.contains(x.text.as_str()),
                "the XID text {:?} is not in {text:?}",
                x.text
            );
            let _ = crate::xid::describe(x.code);
        }
        Ok(Some(Nvrm::GpuAt { pci, uuid })) => {
            assert!(
                text.contains(uuid.as_str()),
                "uuid {uuid:?} is not in {text:?}"
            );
            let _ = pci.as_str();
        }
        Ok(None) => {}
        Err(e) => {
            assert!(
                e.offset <= text.chars().count(),
                "error offset {} past the end of {text:?}",
                e.offset
            );
        }
    }
}
