//! `gpuwatch rules test FILE...`: runs rule unit tests (see `crate::alerts::unittest`) and turns
//! their outcome into output and an exit code.
//!
//! Invariants: every file is run even when an earlier one fails; each failed expectation is
//! one stdout line `FILE: alert at AT: expected firing [...], got [...]`; a passing file prints
//! `FILE: OK`; exit 0 when all pass, 1 when an expectation fails or a run fails, 2 when a test
//! file (or a rule file it loads) is malformed — problems as `file:line:col: message` lines.

use std::path::PathBuf;

use crate::alerts::unittest::{UnitTestError, run_file};

use super::{Failure, exit, fail};

pub fn run(files: &[PathBuf]) -> Result<(), Failure> {
    let mut invalid: Vec<String> = Vec::new();
    let mut broken: Vec<String> = Vec::new();
    let mut failed = 0;
    for file in files {
        match run_file(file) {
            Ok(failures) if failures.is_empty() => println!("{}: OK", file.display()),
            Ok(failures) => {
                failed += 1;
                for f in failures {
                    println!("{f}");
                }
            }
            Err(UnitTestError::Invalid(e)) => invalid.push(e.to_string()),
            Err(e) => broken.push(e.to_string()),
        }
    }
    if !invalid.is_empty() {
        invalid.extend(broken);
        return Err(fail(exit::USAGE, anyhow::anyhow!("{}", invalid.join("\n"))));
    }
    if !broken.is_empty() {
        return Err(fail(
            exit::FAILURE,
            anyhow::anyhow!("{}", broken.join("\n")),
        ));
    }
    if failed > 0 {
        let noun = if failed == 1 { "file" } else { "files" };
        return Err(fail(
            exit::FAILURE,
            anyhow::anyhow!("{failed} of {} rule test {noun} failed", files.len()),
        ));
    }
    Ok(())
}
