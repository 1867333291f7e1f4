//! Fuzzing entry points: one function per parser of outside input, each taking raw bytes and
//! calling the parser the daemon and the CLI use (nothing here re-implements a parser).
//!
//! This module owns only the harness bodies: `fuzz/fuzz_targets/<name>.rs` (cargo-fuzz,
//! nightly) calls [`run`] with its target's name, and `tests/gpuwatch/fuzz_corpus.rs` (stable, CI)
//! replays every file of `fuzz/corpus/<name>/` and `fuzz/regressions/<name>/` through the same
//! call. A harness panics when the parser panics or when a checked property fails (e.g. a rule
//! expression printed and parsed again is not the same expression); that panic is the
//! fuzzer's crash.
//!
//! Files: `text.rs` (rule language, rule files, config, OpenMetrics, Prometheus JSON, cgroup
//! files, kernel-log lines), `sql.rs` (the SQL guard of `gpuwatch query`); the nvidia-smi CSV
//! harness lives beside its private reader ([`crate::import::nvidia_smi::fuzz_read`]).

mod sql;
mod text;

/// Every target, by the name of its `fuzz/fuzz_targets/<name>.rs` and corpus directory.
pub const TARGETS: &[&str] = &[
    "rule_expr",
    "rules_file",
    "config",
    "nvidia_smi_csv",
    "openmetrics",
    "prom_json",
    "cgroup",
    "kernel_log",
    "sql_guard",
];

/// Runs `data` through target `name`'s harness; `false` when no target has that name.
pub fn run(name: &str, data: &[u8]) -> bool {
    match name {
        "rule_expr" => text::rule_expr(data),
        "rules_file" => text::rules_file(data),
        "config" => text::config(data),
        "nvidia_smi_csv" => crate::import::nvidia_smi::fuzz_read(data),
        "openmetrics" => text::openmetrics(data),
        "prom_json" => text::prom_json(data),
        "cgroup" => text::cgroup(data),
        "kernel_log" => text::kernel_log(data),
        "sql_guard" => sql::sql_guard(data),
        _ => return false,
    }
    true
}

/// The number of lines `str::lines` sees in `text` (0 for an empty text).
fn line_count(text: &str) -> usize {
    text.lines().count()
}
