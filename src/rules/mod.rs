//! Rules: TOML files whose conditions (a small expression language) are parsed once into a
//! typed form ([`ast::Expr`]) and evaluated per GPU, per process or per host over windows of
//! the stored history.
//!
//! Invariants: the evaluator reads windows from the store and never does network I/O; the
//! live daemon and `replay` evaluate through the same code with time as a parameter.

pub mod ast;
pub mod check;
pub mod eval;
pub mod file;
pub mod functions;
pub mod lex;
pub mod names;
pub mod parse;
pub mod print;
pub mod rule;
pub mod series_notation;
pub mod template;
pub mod unittest_file;

pub use check::{RuleError, RuleErrors, load_configured, load_files, load_sources, load_str};
pub use lex::ExprError;
pub use parse::{parse_condition, parse_expr};

/// The shipped default rule files, embedded in the binary, as `(origin, text)` pairs: every
/// file under `rules/` is registered here (with `include_str!`), and `gpuwatch rules check`
/// without arguments checks exactly this set.
pub fn defaults() -> Vec<(String, String)> {
    const FILES: &[(&str, &str)] = &[
        (
            "rules/utilisation.toml",
            include_str!("../../rules/utilisation.toml"),
        ),
        ("rules/memory.toml", include_str!("../../rules/memory.toml")),
        (
            "rules/training.toml",
            include_str!("../../rules/training.toml"),
        ),
        (
            "rules/thermal.toml",
            include_str!("../../rules/thermal.toml"),
        ),
        (
            "rules/hardware.toml",
            include_str!("../../rules/hardware.toml"),
        ),
        ("rules/nvlink.toml", include_str!("../../rules/nvlink.toml")),
    ];
    FILES
        .iter()
        .map(|(o, t)| (o.to_string(), t.to_string()))
        .collect()
}
