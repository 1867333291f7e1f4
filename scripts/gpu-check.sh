#!/usr/bin/env bash
# The checks that need a real NVIDIA GPU, as one script for a machine that has one (the
# project's sessions are sometimes lent one for a few minutes: build here, carry the binaries,
# run this there once). Everything lands in $OUT (default /tmp/gpu-check):
#   1. the NVML tests against the real driver (tests/real_nvml.rs): real_nvml.txt
#   2. `gpuwatch run` for RUN_SECS while benches/gpu_load.py keeps the GPU busy (tensor cores),
#      then `status`, `/metrics`, `/api/v1/status` and `doctor` (text and JSON)
#   3. a scenario recorded from the real GPU for the simulated library: scenario-real.toml
#   4. the per-tick sampling cost: the daemon's CPU per tick over the run and its
#      tick-duration histogram, beside `nvidia-smi --query-gpu=... --format=csv` run as a
#      process (wall and CPU per run, medians): summary.txt
#
#   cargo build --release && cargo test --release --features real-nvml --test real_nvml --no-run
#   # carry target/release/gpuwatch and target/release/deps/real_nvml-*, then there:
#   scripts/gpu-check.sh
#
# Environment: OUT, RUN_SECS (default 60), GPUWATCH (default target/release/gpuwatch),
# REAL_NVML_TEST (default: the newest target/release/deps/real_nvml-* executable),
# NVML_LIBRARY (another libnvidia-ml.so.1: the simulated one, to try this script without a
# GPU — the nvidia-smi and CUDA parts then report that they cannot run).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-check}
RUN_SECS=${RUN_SECS:-60}
gw=${GPUWATCH:-target/release/gpuwatch}
mkdir -p "$OUT"
lib_line=; record_lib=()
if [ -n "${NVML_LIBRARY:-}" ]; then
  export GPUWATCH_NVML_LIBRARY=$NVML_LIBRARY
  lib_line="nvml_library = \"$NVML_LIBRARY\""
  record_lib=(--nvml-library "$NVML_LIBRARY")
fi
exec > >(tee "$OUT/log.txt") 2>&1
stamp() { echo "== $(date -u +%H:%M:%S) $*"; }

stamp machine
nvidia-smi -L || true
nvidia-smi -q > "$OUT/nvidia-smi-q.txt" 2>&1 || true
# What gpuwatch reads of NVLink, the fabric and MIG, as the driver's own tool shows it.
nvidia-smi nvlink -s > "$OUT/nvlink-s.txt" 2>&1 || true
nvidia-smi nvlink -e > "$OUT/nvlink-e.txt" 2>&1 || true
nvidia-smi --query-gpu=index,fabric.state,fabric.status,mig.mode.current,gpu_recovery_action \
  --format=csv > "$OUT/fabric-mig.csv" 2>&1 || true
nvidia-smi mig -lgi > "$OUT/mig-lgi.txt" 2>&1 || true
uname -r; nproc

stamp "1. NVML tests against the real driver"
test_bin=${REAL_NVML_TEST:-$(ls -t target/release/deps/real_nvml-* 2>/dev/null | grep -v '\.d$' | head -1)}
if [ -n "$test_bin" ] && [ -x "$test_bin" ]; then
  "$test_bin" --nocapture --test-threads 1 > "$OUT/real_nvml.txt" 2>&1
  echo "real_nvml exit $?"
else
  timeout 300 cargo test --release --features real-nvml --test real_nvml -- --nocapture --test-threads 1 > "$OUT/real_nvml.txt" 2>&1
  echo "real_nvml (built here) exit $?"
fi
grep -E "test result|tick wall time|panicked" "$OUT/real_nvml.txt" || true

stamp "2. gpuwatch run for ${RUN_SECS}s under a GPU load"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat > "$OUT/gpuwatch.toml" <<CFG
database = "$OUT/gpuwatch.db"
interval = "1s"
$lib_line
[http]
listen = "127.0.0.1:$port"
CFG
"$gw" run --config "$OUT/gpuwatch.toml" > "$OUT/run.log" 2>&1 & gw_pid=$!
python3 benches/gpu_load.py --seconds "$((RUN_SECS - 10))" > "$OUT/gpu_load.txt" 2>&1 & load_pid=$!
# 3. the scenario is recorded from the same minute, beside the daemon.
stamp "3. recording a scenario from the real GPU"
"$gw" scenario record "${record_lib[@]}" --duration "$((RUN_SECS - 5))s" --interval 1s -o "$OUT/scenario-real.toml" > "$OUT/record.log" 2>&1 & rec_pid=$!
sleep 5
cpu0=$(awk '{print $14 + $15}' "/proc/$gw_pid/stat" 2>/dev/null || echo 0)
t0=$(date +%s.%N)
sleep "$((RUN_SECS - 5))"
cpu1=$(awk '{print $14 + $15}' "/proc/$gw_pid/stat" 2>/dev/null || echo 0)
t1=$(date +%s.%N)
rss=$(awk '/VmRSS/ {print $2}' "/proc/$gw_pid/status" 2>/dev/null || echo 0)
curl -sf "http://127.0.0.1:$port/metrics" > "$OUT/metrics.txt"; echo "metrics exit $?"
curl -sf "http://127.0.0.1:$port/api/v1/status" > "$OUT/status.json"; echo "api status exit $?"
"$gw" status --db "$OUT/gpuwatch.db" > "$OUT/status.txt" 2>&1; echo "status exit $?"
"$gw" doctor --config "$OUT/gpuwatch.toml" > "$OUT/doctor.txt" 2>&1; echo "doctor exit $?"
"$gw" doctor --config "$OUT/gpuwatch.toml" --format json > "$OUT/doctor.json" 2>&1; echo "doctor json exit $?"
"$gw" query --db "$OUT/gpuwatch.db" \
  "SELECT gpu_index, count(*) AS n, round(avg(util_gpu_pct), 1) AS util, round(avg(tensor_active_pct), 1) AS tensor, max(temp_c) AS temp, round(max(power_w), 1) AS power FROM gpu_samples GROUP BY gpu_index" \
  > "$OUT/samples.txt" 2>&1
kill -TERM "$gw_pid"; wait "$gw_pid"; echo "run exit $?"
wait "$load_pid"; echo "gpu_load exit $?"; tail -2 "$OUT/gpu_load.txt"
wait "$rec_pid"; echo "record exit $?"
grep -E "^DCGM_FI_DEV_GPU_UTIL|^DCGM_FI_PROF_PIPE_TENSOR_ACTIVE|^gpuwatch_tick_duration_seconds_(sum|count)" "$OUT/metrics.txt" || true
cat "$OUT/samples.txt"

stamp "4. per-tick cost beside nvidia-smi"
clk=$(getconf CLK_TCK)
ticks=$(awk '/^gpuwatch_ticks_total/ {print $2}' "$OUT/metrics.txt")
tsum=$(awk '/^gpuwatch_tick_duration_seconds_sum/ {print $2}' "$OUT/metrics.txt")
tcount=$(awk '/^gpuwatch_tick_duration_seconds_count/ {print $2}' "$OUT/metrics.txt")
query="timestamp,index,utilization.gpu,utilization.memory,memory.used,memory.total,temperature.gpu,power.draw,clocks.sm,clocks.mem,pstate"
python3 - "$query" > "$OUT/nvidia-smi-cost.txt" <<'PY'
import resource, statistics, subprocess, sys, time
walls, cpus = [], []
for _ in range(15):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(["nvidia-smi", f"--query-gpu={sys.argv[1]}", "--format=csv"], check=True, capture_output=True)
    walls.append(time.perf_counter() - t)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
print(f"{statistics.median(walls) * 1e3:.1f} {statistics.median(cpus) * 1e3:.1f}")
PY
read -r smi_wall smi_cpu < "$OUT/nvidia-smi-cost.txt" || { smi_wall=0; smi_cpu=0; }
gpus=$(awk '/^gpuwatch_gpus / {print $2}' "$OUT/metrics.txt")
awk -v c0="$cpu0" -v c1="$cpu1" -v t0="$t0" -v t1="$t1" -v clk="$clk" -v s="$tsum" -v n="$tcount" \
    -v rss="$rss" -v sw="$smi_wall" -v sc="$smi_cpu" -v g="$gpus" -v ticks="$ticks" 'BEGIN {
  secs = t1 - t0
  printf "GPUs watched                        %d\n", g
  printf "ticks stored                        %s\n", ticks
  printf "gpuwatch CPU per 1-s tick (whole)   %.2f ms (%.1f s of CPU over %.0f s)\n", 1e3 * (c1 - c0) / clk / secs, (c1 - c0) / clk, secs
  printf "gpuwatch tick wall time, mean       %.2f ms (sampling all GPUs, from its histogram)\n", (n > 0 ? 1e3 * s / n : 0)
  printf "gpuwatch RSS                        %.1f MiB\n", rss / 1024
  printf "nvidia-smi --query-gpu, per run     %.1f ms wall, %.1f ms CPU (median of 15)\n", sw, sc
}' | tee "$OUT/summary.txt"
stamp done
