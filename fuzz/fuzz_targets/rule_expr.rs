//! Fuzz target `rule_expr`: the harness body is `gpuwatch::fuzzing` (shared with tests/gpuwatch/fuzz_corpus.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    gpuwatch::fuzzing::run("rule_expr", data);
});
