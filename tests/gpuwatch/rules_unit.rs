//! `gpuwatch rules test` through the binary: the shipped default rules pass their unit tests
//! in `tests/rules/`; a failing expectation exits 1 with a promtool-style message; a
//! malformed test file exits 2 with `file:line:col`.

use std::process::{Command, Output};

fn rules_test(files: &[String]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["rules", "test"])
        .args(files)
        .output()
        .expect("runs gpuwatch")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn the_default_rules_pass_their_unit_tests() {
    let mut files: Vec<String> =
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/rules"))
            .expect("tests/rules")
            .filter_map(Result::ok)
            .map(|e| format!("tests/rules/{}", e.file_name().to_string_lossy()))
            .filter(|f| f.ends_with(".test.toml"))
            .collect();
    files.sort();
    assert!(files.len() >= 4, "{files:?}");
    let out = rules_test(&files);
    assert!(
        out.status.success(),
        "stdout:\n{}\nstderr:\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    for f in &files {
        assert!(text(&out.stdout).contains(&format!("{f}: OK")), "{f}");
    }
}

#[test]
fn a_failed_expectation_exits_1_with_what_fired() {
    let out = rules_test(&["tests/rules_unit_fixtures/fails.test.toml".into()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "tests/rules_unit_fixtures/fails.test.toml: alert at 5m: expected firing [gpu_idle gpu 0], got []\n"
    );
    assert_eq!(text(&out.stderr), "error: 1 of 1 rule test file failed\n");
}

#[test]
fn a_malformed_file_exits_2_with_its_position() {
    let out = rules_test(&["tests/rules_unit_fixtures/malformed.test.toml".into()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    assert_eq!(
        text(&out.stderr),
        "error: tests/rules_unit_fixtures/malformed.test.toml:3:21: `q` in `5xq` is not a count of samples (e.g. `0+1x60`, `95x600`, `_x10`, `1 2 _ 4`)\n"
    );
}
