//! Rules: TOML files whose conditions (a small expression language) are parsed once into a
//! typed form ([`ast::Expr`]) and evaluated per GPU, per process or per host over windows of
//! the stored history.
//!
//! Invariants: the evaluator reads windows from the store and never does network I/O; the
//! live daemon and `replay` evaluate through the same code with time as a parameter.

pub mod ast;
pub mod functions;
pub mod lex;
pub mod names;
pub mod parse;
pub mod rule;
pub mod template;
