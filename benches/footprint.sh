#!/usr/bin/env bash
# Footprint of `gpuwatch run` against the simulated NVML library, side by side with the
# pynvml + sqlite3 loop of benches/pynvml_baseline.py, both sampling the same 8 simulated GPUs
# (4 processes each, scenarios/healthy-8gpu.toml) every second for the same wall time.
#
#   cargo build --release --workspace && benches/footprint.sh [SECONDS]   # default 600
#
# The daemon runs as deployed: every default rule, rollups, the size bound, `/healthz`, and one
# webhook receiver configured (to a closed loopback port: nothing is sent unless an alert
# fires). Environment:
#   FOOTPRINT_SCENARIO=scenarios/firing-8gpu.toml   a scenario that keeps 4 alerts firing
#   FOOTPRINT_RECEIVER=0                            no receiver
#   FOOTPRINT_RULES=0                               no rules (`[rules] default_rules = false`):
#       with FOOTPRINT_RECEIVER=0, the daemon does what the Python loop does (the same NVML
#       reads, the same rows stored) plus its rollups and size bound: the floor under the rules
#   FOOTPRINT_FLEET=1                               issue 12's budget: /metrics and
#       /api/v1/status fetched every 15 s (as Prometheus and a dashboard would), the live
#       page once a minute, remote write every 15 s to a local receiver (benches/rw_sink.py)
#   GPUWATCH=path/to/gpuwatch                       another binary (default target/release)
#   FOOTPRINT_NVML=path/to/libgpuwatch_fake_nvml.so another build of the simulated library,
#       served to both (default target/release's)
#
# Prints CPU time, CPU % of one core, CPU per GPU-sample and RSS for both, and their ratios;
# then gpuwatch's CPU and wake-ups (context switches) per thread, its RSS at 60 s and at the
# end, and the RSS slope between them.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-600}
scenario=${FOOTPRINT_SCENARIO:-scenarios/healthy-8gpu.toml}
gw=${GPUWATCH:-target/release/gpuwatch}
gpus=$(grep -c '^\[\[gpu\]\]' "$scenario")
python3 -c 'import pynvml' 2>/dev/null || python3 -m pip install --quiet nvidia-ml-py
work=$(mktemp -d /tmp/gpuwatch-footprint.XXXXXX)
gw_pid=; py_pid=; sink_pid=; scrape_pid=
trap 'kill $gw_pid $py_pid $sink_pid $scrape_pid 2>/dev/null || true' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
http_port=$(free_port)
for who in gw py; do
  mkdir -p "$work/$who"
  cp "${FOOTPRINT_NVML:-target/release/libgpuwatch_fake_nvml.so}" "$work/$who/libnvidia-ml.so.1"
  cp "$scenario" "$work/$who/gpuwatch-scenario.toml"
done
cat > "$work/gpuwatch.toml" <<CFG
database = "$work/gw.db"
nvml_library = "$work/gw/libnvidia-ml.so.1"
interval = "1s"
max_db_size = "2GiB"
[http]
listen = "127.0.0.1:$http_port"
CFG
if [ "${FOOTPRINT_RECEIVER:-1}" != 0 ]; then
  # A port nobody listens on: a firing alert's delivery fails and is retried, as in an outage.
  closed=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  printf 'http://127.0.0.1:%s/hook\n' "$closed" > "$work/webhook-url"
  cat >> "$work/gpuwatch.toml" <<CFG
[[notify.webhook]]
name = "bench"
url_file = "$work/webhook-url"
CFG
fi
if [ "${FOOTPRINT_RULES:-1}" = 0 ]; then
  printf '[rules]\ndefault_rules = false\n' >> "$work/gpuwatch.toml"
fi
if [ "${FOOTPRINT_FLEET:-0}" != 0 ]; then
  sink_port=$(free_port)
  python3 benches/rw_sink.py "$sink_port" & sink_pid=$!
  cat >> "$work/gpuwatch.toml" <<CFG
[[remote_write]]
name = "bench"
url = "http://127.0.0.1:$sink_port/api/v1/write"
interval = "15s"
CFG
fi
clk=$(getconf CLK_TCK)
"$gw" run --config "$work/gpuwatch.toml" --log warn & gw_pid=$!
if [ "${FOOTPRINT_FLEET:-0}" != 0 ]; then
  ( n=0; while sleep 15; do
      curl -sf -o /dev/null "http://127.0.0.1:$http_port/metrics" || true
      curl -sf -o /dev/null "http://127.0.0.1:$http_port/api/v1/status" || true
      n=$((n + 1)); if [ $((n % 4)) = 0 ]; then
        curl -sf -o /dev/null "http://127.0.0.1:$http_port/" || true
        curl -sf -o /dev/null "http://127.0.0.1:$http_port/api/v1/history?since=1h&metric=util_gpu,mem_used,temp,power" || true
      fi
    done ) & scrape_pid=$!
fi
LD_LIBRARY_PATH="$work/py" python3 benches/pynvml_baseline.py --db "$work/py.db" --seconds $((secs + 5)) > "$work/py.out" & py_pid=$!
# utime + stime (fields 14, 15 of /proc/PID/stat) and VmRSS, read while both run.
cpu() { awk -v c="$clk" '{print ($14 + $15) / c}' "/proc/$1/stat"; }
rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
early=$(( secs > 360 ? 180 : secs / 2 ))
sleep "$early"
gw_rss_early=$(rss $gw_pid); gw_cpu_early=$(cpu $gw_pid)
# Per thread, from /proc/PID/task/TID: name, CPU time in ns (schedstat, exact), and voluntary +
# involuntary context switches (each one a wake-up).
threads() {
  for t in /proc/$gw_pid/task/*; do
    printf '%s %s %s %s\n' "${t##*/}" "$(sed 's/gpuwatch-gpu[0-9]*/gpuwatch-gpu*/; s/gpuwatch-lane[0-9]*/gpuwatch-lane*/' "$t/comm")" \
      "$(cut -d' ' -f1 "$t/schedstat")" "$(awk '/ctxt_switches/ {s += $2} END {print s}' "$t/status")"
  done
}
threads > "$work/threads.early"
sleep $(( secs - early ))
gw_cpu=$(cpu $gw_pid); gw_rss=$(rss $gw_pid); py_cpu=$(cpu $py_pid); py_rss=$(rss $py_pid)
gw_hwm=$(awk '/VmHWM/ {print $2}' /proc/$gw_pid/status)
# What the resident memory is: anonymous (heap, stacks) and file-backed (the binary's and the
# libraries' pages), and the two heap users the daemon reports about itself.
gw_anon=$(awk '/RssAnon/ {print $2}' /proc/$gw_pid/status)
gw_file=$(awk '/RssFile/ {print $2}' /proc/$gw_pid/status)
# The per-thread figures end here, before this script's own scrape below.
threads > "$work/threads.end"
self_metric() { curl -sf "http://127.0.0.1:$http_port/metrics" | awk -v n="$1" '$1 == n {print $2}'; }
gw_sqlite=$(self_metric gpuwatch_sqlite_memory_bytes); gw_windows=$(self_metric gpuwatch_rule_window_bytes)
kill -TERM $gw_pid; wait $gw_pid || true
kill $py_pid 2>/dev/null; wait $py_pid 2>/dev/null || true
gw_ticks=$(sqlite3 "$work/gw.db" "SELECT count(DISTINCT ts_ms) FROM samples" 2>/dev/null || echo "$secs")
py_ticks=$(sqlite3 "$work/py.db" "SELECT count(DISTINCT ts) FROM samples" 2>/dev/null || echo "$secs")
firing=$(sqlite3 "$work/gw.db" "SELECT count(*) FROM alerts WHERE state = 'firing'" 2>/dev/null || echo "?")
awk -v s="$secs" -v n="$gpus" -v gc="$gw_cpu" -v gr="$gw_rss" -v gh="$gw_hwm" -v pc="$py_cpu" -v pr="$py_rss" -v gt="$gw_ticks" -v pt="$py_ticks" 'BEGIN {
  printf "wall time             %d s, %d simulated GPUs, 1 s interval\n", s, n
  printf "                      %12s %12s %8s\n", "gpuwatch", "pynvml+sqlite3", "ratio"
  printf "ticks stored          %12d %12d\n", gt, pt
  printf "CPU time (s)          %12.2f %12.2f %8.3f\n", gc, pc, gc/pc
  printf "CPU %% of one core     %12.3f %12.3f\n", 100*gc/s, 100*pc/s
  printf "CPU per GPU-sample us %12.1f %12.1f %8.3f\n", 1e6*gc/(gt*n), 1e6*pc/(pt*n), (gc/(gt*n))/(pc/(pt*n))
  printf "RSS now (MiB)         %12.1f %12.1f %8.3f\n", gr/1024, pr/1024, gr/pr
  printf "gpuwatch peak RSS     %12.1f MiB\n", gh/1024
}'
echo "scenario              $scenario ($firing alerts firing at the end)"
awk -v a="$gw_anon" -v f="$gw_file" -v q="${gw_sqlite:-0}" -v w="${gw_windows:-0}" 'BEGIN {
  printf "gpuwatch RSS anon/file %6.1f / %.1f MiB (SQLite heap %.2f MB, rule windows %.2f MB)\n", a/1024, f/1024, q/1e6, w/1e6 }'
[ "${FOOTPRINT_RULES:-1}" = 0 ] && echo "rules                 none (FOOTPRINT_RULES=0)"
[ "${FOOTPRINT_FLEET:-0}" != 0 ] && echo "fleet features        /metrics + /api/v1/status every 15 s, page + history every 60 s, remote write every 15 s ($(sqlite3 "$work/gw.db" "SELECT sent_requests FROM remote_write_status" 2>/dev/null || echo '?') requests sent)"
awk -v e="$early" -v s="$secs" -v a="$gw_rss_early" -v b="$gw_rss" 'BEGIN {
  printf "gpuwatch RSS at %ds   %12.1f MiB\n", e, a/1024
  printf "gpuwatch RSS slope    %12.2f MiB/hour (from %d s to %d s)\n", (b-a)/1024*3600/(s-e), e, s
}'
# Steady state: from the early snapshot to the end, per tick of that stretch (start-up, which
# fills the rule windows and opens everything, is outside it).
steady=$(( secs - early ))
awk -v s="$steady" -v e="$early" -v n="$gpus" 'NR == FNR {cpu0[$1] = $3; next} {t += $3 - cpu0[$1]}
  END {printf "steady CPU per tick   %12.1f us (%.1f us per GPU-sample; from %d s to the end, all threads)\n", t/1e3/s, t/1e3/s/n, e}' \
  "$work/threads.early" "$work/threads.end"
awk -v s="$steady" 'NR == FNR {cpu0[$1] = $3; cs0[$1] = $4; next}
  {name = $2; cpu[name] += ($3 - cpu0[$1]) / 1e9; cs[name] += $4 - cs0[$1]; n[name]++}
  END {for (k in cpu) printf "thread %-22s x%-2d CPU %7.3f s  %7.1f us/tick  wake-ups/tick %6.2f\n", k, n[k], cpu[k], 1e6*cpu[k]/s, cs[k]/s}' \
  "$work/threads.early" "$work/threads.end" | sort -k5 -g -r
rm -rf "$work"
