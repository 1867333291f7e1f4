//! `gpuwatch rules check` through the binary, like bottom's `tests/invalid_configs`: every
//! `tests/rules_check/*.toml` is a broken rule file whose `# expect: LINE:COL: message`
//! comments are, in order, the exact error lines the command must print (each as
//! `error: tests/rules_check/FILE:LINE:COL: message`), with exit code 2. Plus a valid file,
//! several files at once, a missing file and the embedded defaults.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn check(files: &[&Path]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
        .current_dir(root())
        .env_remove("RUST_LOG")
        .args(["rules", "check"])
        .args(files)
        .output()
        .expect("runs gpuwatch")
}

fn lines(bytes: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(str::to_string)
        .collect()
}

fn fixtures() -> Vec<PathBuf> {
    let dir = root().join("tests/rules_check");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("fixture directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .map(|p| {
            p.strip_prefix(root())
                .expect("under the crate")
                .to_path_buf()
        })
        .collect();
    files.sort();
    files
}

/// The error lines a fixture expects.
fn expected(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(root().join(file)).expect("fixture");
    text.lines()
        .filter_map(|l| l.strip_prefix("# expect: "))
        .map(|e| format!("error: {}:{e}", file.display()))
        .collect()
}

#[test]
fn every_broken_fixture_prints_exactly_its_errors() {
    let files = fixtures();
    assert!(files.len() >= 30, "fixtures: {files:?}");
    let mut failures = Vec::new();
    for file in &files {
        let want = expected(file);
        assert!(
            !want.is_empty(),
            "{} has no `# expect:` line",
            file.display()
        );
        let out = check(&[file]);
        let got = lines(&out.stderr);
        if out.status.code() != Some(2) || got != want || !out.stdout.is_empty() {
            failures.push(format!(
                "{}: exit {:?}\n  want {want:#?}\n  got  {got:#?}\n  stdout {:?}",
                file.display(),
                out.status.code(),
                String::from_utf8_lossy(&out.stdout)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn errors_of_several_files_come_in_argument_order() {
    let a = Path::new("tests/rules_check/wrong_arity.toml");
    let b = Path::new("tests/rules_check/bad_severity.toml");
    let out = check(&[b, a]);
    assert_eq!(out.status.code(), Some(2));
    let want: Vec<String> = expected(b).into_iter().chain(expected(a)).collect();
    assert_eq!(lines(&out.stderr), want);
}

#[test]
fn a_valid_file_lists_its_rules() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("ok.toml");
    let text = "[[rule]]\nname = \"gpu_idle\"\nseverity = \"warning\"\ncondition = \"avg(util_gpu[15m]) < 5 and process_count > 0\"\nsummary = \"GPU {gpu} idle\"\nfor = \"5m\"\n";
    std::fs::write(&file, text).expect("write");
    let out = check(&[&file]);
    assert_eq!(out.status.code(), Some(0), "{:?}", lines(&out.stderr));
    assert_eq!(
        lines(&out.stdout),
        [
            "1 rule OK".to_string(),
            format!("  gpu_idle  warning   gpu      {}:1", file.display())
        ]
    );
    assert!(out.stderr.is_empty());
}

#[test]
fn a_missing_file_is_an_error() {
    let out = check(&[Path::new("tests/rules_check/does-not-exist.toml")]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        lines(&out.stderr),
        [
            "error: tests/rules_check/does-not-exist.toml: cannot read rule file: No such file or directory (os error 2)"
        ]
    );
}

#[test]
fn without_files_the_embedded_defaults_are_checked() {
    let out = check(&[]);
    assert_eq!(out.status.code(), Some(0), "{:?}", lines(&out.stderr));
    let first = lines(&out.stdout).into_iter().next().unwrap_or_default();
    assert!(first.ends_with(" OK"), "{first}");
}
