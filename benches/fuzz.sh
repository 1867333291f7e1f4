#!/usr/bin/env bash
# The fuzzing campaign (not CI): builds the cargo-fuzz targets of fuzz/ with the nightly
# toolchain and runs each for SECONDS (default 600) on its corpus fuzz/corpus/<target>/,
# one after another (FUZZ_JOBS=2: two targets at a time, each still SECONDS). libFuzzer runs
# in fork mode with crashes, timeouts and OOMs ignored, so a target keeps fuzzing after a
# crash; every crashing input is written to
# fuzz/artifacts/<target>/ and counted. Prints one summary line per target (also appended to
# fuzz/artifacts/summary.txt); the full libFuzzer output is in fuzz/artifacts/<target>.log.
#
#   benches/fuzz.sh [SECONDS] [TARGET...]      e.g. nice -n 10 benches/fuzz.sh 600
#
# Environment: FUZZ_SANITIZER (default none: the targets are safe Rust over SQLite; use
# `address` for ASan), CARGO_TARGET_DIR (default fuzz/target), FUZZ_MAX_LEN (default 16384),
# FUZZ_JOBS (targets run at a time, default 1).
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-600}
shift || true
if [ $# -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^gpuwatch-fuzz$')
fi
san=${FUZZ_SANITIZER:-none}
target_dir=${CARGO_TARGET_DIR:-$PWD/fuzz/target}
max_len=${FUZZ_MAX_LEN:-16384}
jobs=${FUZZ_JOBS:-1}

cargo +nightly fuzz build -s "$san" --target-dir "$target_dir"
mkdir -p fuzz/artifacts
printf '%-16s %8s %12s %8s %8s\n' target seconds execs corpus crashes | tee -a fuzz/artifacts/summary.txt
run_target() {
    local t=$1 log start took execs corpus crashes
    mkdir -p "fuzz/artifacts/$t" "fuzz/corpus/$t"
    log="fuzz/artifacts/$t.log"
    start=$(date +%s)
    # Fork mode exits non-zero when it saw a crash; the summary counts them instead.
    cargo +nightly fuzz run -s "$san" --target-dir "$target_dir" "$t" "fuzz/corpus/$t" -- \
        -max_total_time="$secs" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
        -timeout=10 -rss_limit_mb=2048 -max_len="$max_len" \
        -artifact_prefix="fuzz/artifacts/$t/" >"$log" 2>&1 || true
    took=$(($(date +%s) - start))
    # Status lines start with "#EXECS" (fork mode: "#EXECS: cov: ... corp: N/...").
    execs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')
    corpus=$(find "fuzz/corpus/$t" -type f | wc -l)
    crashes=$(find "fuzz/artifacts/$t" -type f \( -name 'crash-*' -o -name 'timeout-*' -o -name 'oom-*' -o -name 'leak-*' \) | wc -l)
    printf '%-16s %8s %12s %8s %8s\n' "$t" "$took" "${execs:-0}" "$corpus" "$crashes" | tee -a fuzz/artifacts/summary.txt
}

for t in "${targets[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
        wait -n || true
    done
    run_target "$t" &
done
wait
