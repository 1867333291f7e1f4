#!/usr/bin/env bash
# Detection benchmark of gpuwatch's default alert rules: every labelled case of the catalogue
# (faults and healthy traps, crates/detection) in every data shape (the daemon on the simulated
# NVML library; nvidia-smi CSV logs at 1, 5, 15 and 60 s, with and without process rows),
# scored per rule and shape. The figures of docs/DETECTION.md come from this script.
#
#   benches/detection.sh            # markdown to $OUT (default /tmp/detection.md), JSON beside it
#
# Extra arguments go to gpuwatch-detection (e.g. --jobs 4, --case leak, --shape basic@15s).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/detection.md}
cargo build --release --workspace
target/release/gpuwatch-detection --set full --gpuwatch target/release/gpuwatch \
  --markdown "$out" --json "${out%.md}.json" "$@" > /dev/null
cat "$out"
