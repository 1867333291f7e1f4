#!/usr/bin/env bash
# Footprint of `gpuwatch run` against the simulated NVML library, side by side with the
# pynvml + sqlite3 loop of benches/pynvml_baseline.py, both sampling the same 8 simulated GPUs
# (4 processes each, scenarios/healthy-8gpu.toml) every second for the same wall time.
#
#   cargo build --release --workspace && benches/footprint.sh [SECONDS]   # default 600
#
# Prints CPU time, CPU % of one core, CPU per GPU-sample and RSS for both, and their ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-600}
python3 -c 'import pynvml' 2>/dev/null || python3 -m pip install --quiet nvidia-ml-py
work=$(mktemp -d /tmp/gpuwatch-footprint.XXXXXX)
trap 'kill $gw_pid $py_pid 2>/dev/null || true' EXIT
for who in gw py; do
  mkdir -p "$work/$who"
  cp target/release/libgpuwatch_fake_nvml.so "$work/$who/libnvidia-ml.so.1"
  cp scenarios/healthy-8gpu.toml "$work/$who/gpuwatch-scenario.toml"
done
cat > "$work/gpuwatch.toml" <<CFG
database = "$work/gw.db"
nvml_library = "$work/gw/libnvidia-ml.so.1"
interval = "1s"
[http]
listen = "127.0.0.1:0"
CFG
clk=$(getconf CLK_TCK)
target/release/gpuwatch run --config "$work/gpuwatch.toml" --log warn & gw_pid=$!
LD_LIBRARY_PATH="$work/py" python3 benches/pynvml_baseline.py --db "$work/py.db" --seconds $((secs + 5)) > "$work/py.out" & py_pid=$!
sleep "$secs"
# utime + stime (fields 14, 15 of /proc/PID/stat) and VmRSS, read while both run.
cpu() { awk -v c="$clk" '{print ($14 + $15) / c}' "/proc/$1/stat"; }
rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
gw_cpu=$(cpu $gw_pid); gw_rss=$(rss $gw_pid); py_cpu=$(cpu $py_pid); py_rss=$(rss $py_pid)
gw_hwm=$(awk '/VmHWM/ {print $2}' /proc/$gw_pid/status)
kill -TERM $gw_pid; wait $gw_pid || true
kill $py_pid 2>/dev/null; wait $py_pid 2>/dev/null || true
gw_ticks=$(sqlite3 "$work/gw.db" "SELECT count(DISTINCT ts_ms) FROM samples" 2>/dev/null || echo "$secs")
py_ticks=$(sqlite3 "$work/py.db" "SELECT count(DISTINCT ts) FROM samples" 2>/dev/null || echo "$secs")
awk -v s="$secs" -v gc="$gw_cpu" -v gr="$gw_rss" -v gh="$gw_hwm" -v pc="$py_cpu" -v pr="$py_rss" -v gt="$gw_ticks" -v pt="$py_ticks" 'BEGIN {
  printf "wall time             %d s, 8 simulated GPUs x 4 processes, 1 s interval\n", s
  printf "                      %12s %12s %8s\n", "gpuwatch", "pynvml+sqlite3", "ratio"
  printf "ticks stored          %12d %12d\n", gt, pt
  printf "CPU time (s)          %12.2f %12.2f %8.3f\n", gc, pc, gc/pc
  printf "CPU %% of one core     %12.3f %12.3f\n", 100*gc/s, 100*pc/s
  printf "CPU per GPU-sample us %12.1f %12.1f %8.3f\n", 1e6*gc/(gt*8), 1e6*pc/(pt*8), (gc/(gt*8))/(pc/(pt*8))
  printf "RSS now (MiB)         %12.1f %12.1f %8.3f\n", gr/1024, pr/1024, gr/pr
  printf "gpuwatch peak RSS     %12.1f MiB\n", gh/1024
}'
rm -rf "$work"
