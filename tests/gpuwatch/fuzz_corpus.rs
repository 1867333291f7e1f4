//! Replays every fuzzing corpus (`fuzz/corpus/<target>/`) and every crash kept as a regression
//! (`fuzz/regressions/<target>/`) through the harness the fuzz target calls
//! (`gpuwatch::fuzzing::run`): on stable, in CI, without libFuzzer. A harness panics when its
//! parser panics or a checked property fails, which fails this test with the file's name.

use std::path::{Path, PathBuf};

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .collect(),
        Err(_) => Vec::new(),
    };
    out.sort();
    out
}

fn replay(kind: &str, target: &str) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join(kind)
        .join(target);
    let inputs = files(&dir);
    for path in &inputs {
        let data = std::fs::read(path).expect("read a corpus file");
        let r = std::panic::catch_unwind(|| gpuwatch::fuzzing::run(target, &data));
        match r {
            Ok(known) => assert!(known, "no harness for target {target}"),
            Err(_) => panic!("{} fails its harness", path.display()),
        }
    }
    inputs.len()
}

#[test]
fn every_corpus_replays_without_a_failure() {
    for target in gpuwatch::fuzzing::TARGETS {
        let n = replay("corpus", target);
        assert!(n > 0, "fuzz/corpus/{target}/ has no seeds");
    }
}

#[test]
fn every_regression_replays_without_a_failure() {
    for target in gpuwatch::fuzzing::TARGETS {
        replay("regressions", target);
    }
}

#[test]
fn every_target_has_a_fuzz_target_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("fuzz/Cargo.toml");
    for target in gpuwatch::fuzzing::TARGETS {
        let file = root.join("fuzz_targets").join(format!("{target}.rs"));
        let body = std::fs::read_to_string(&file).expect("a fuzz target file per target");
        assert!(
            body.contains(&format!("run(\"{target}\"")),
            "{} calls another harness",
            file.display()
        );
        assert!(
            manifest.contains(&format!("name = \"{target}\"")),
            "fuzz/Cargo.toml lacks {target}"
        );
    }
    assert!(!gpuwatch::fuzzing::run("no_such_target", b""));
}
