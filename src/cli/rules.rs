//! `gpuwatch rules`: rule files without the daemon. `check` loads files (or the embedded
//! default rules) exactly as the daemon does and prints the rules or every error.
//!
//! Invariants: `check` reads nothing but the rule files (no config, database or GPU); it
//! exits 0 when every rule loads and 2 (usage) with one `file:line:col: message (hint)` line
//! per problem otherwise.

use std::path::PathBuf;

use crate::rules::rule::{Rule, Scope};
use crate::rules::{load_files, load_sources};

use super::{Failure, exit, fail};

#[derive(Debug, clap::Args)]
pub struct RulesArgs {
    #[command(subcommand)]
    pub command: RulesCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum RulesCommand {
    /// Check rule files and print every error at once (exit code 2 on errors).
    Check(CheckArgs),
    /// Run rule unit tests: input series, expected alerts (exit 1 on a failure, 2 on a bad file).
    Test(TestArgs),
}

#[derive(Debug, clap::Args)]
pub struct TestArgs {
    /// Test files (`*.test.toml`); see docs/RULES.md, "Testing rules".
    #[arg(value_name = "FILE", required = true)]
    pub files: Vec<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// Rule files, or directories of `*.toml` rule files [default: the shipped default rules].
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
}

pub fn run(args: RulesArgs) -> Result<(), Failure> {
    match args.command {
        RulesCommand::Check(a) => check(&a, &crate::rules::defaults()),
        RulesCommand::Test(a) => super::rules_test::run(&a.files),
    }
}

/// Checks `args.files`, or `defaults` (`(origin, text)` pairs) when no file is given.
pub fn check(args: &CheckArgs, defaults: &[(String, String)]) -> Result<(), Failure> {
    let loaded = if args.files.is_empty() {
        load_sources(defaults)
    } else {
        load_files(&args.files)
    };
    let rules = loaded.map_err(|e| fail(exit::USAGE, e))?;
    print!("{}", report(&rules));
    Ok(())
}

/// `N rules OK` and a line per rule: name, severity, scope, origin.
fn report(rules: &[Rule]) -> String {
    let noun = if rules.len() == 1 { "rule" } else { "rules" };
    let mut out = format!("{} {noun} OK\n", rules.len());
    let width = rules.iter().map(|r| r.name.len()).max().unwrap_or(0);
    for r in rules {
        let scope = match r.scope {
            Scope::Gpu => "gpu",
            Scope::Process => "process",
            Scope::Host => "host",
        };
        let off = if r.enabled { "" } else { "  (disabled)" };
        out.push_str(&format!(
            "  {:width$}  {:8}  {:7}  {}:{}{off}\n",
            r.name,
            r.severity.as_str(),
            scope,
            r.origin.file,
            r.origin.line,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_lists_every_rule() {
        let text = "[[rule]]\nname = \"gpu_idle\"\nseverity = \"warning\"\ncondition = \"lost\"\nsummary = \"s\"\n\n[[rule]]\nname = \"leak\"\nseverity = \"critical\"\nscope = \"process\"\ncondition = \"lost\"\nsummary = \"s\"\nenabled = false\n";
        let rules = crate::rules::load_str(text, "rules/a.toml").expect("loads");
        assert_eq!(
            report(&rules),
            "2 rules OK\n  gpu_idle  warning   gpu      rules/a.toml:1\n  leak      critical  process  rules/a.toml:7  (disabled)\n"
        );
        assert_eq!(report(&[]), "0 rules OK\n");
    }
}
