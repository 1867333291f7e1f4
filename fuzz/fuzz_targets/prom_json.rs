//! Fuzz target `prom_json`: the harness body is `gpuwatch::fuzzing` (shared with tests/gpuwatch/fuzz_corpus.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    gpuwatch::fuzzing::run("prom_json", data);
});
