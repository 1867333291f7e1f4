#!/usr/bin/env bash
# Post-mortem benchmark (issue 5): DAYS x 8 GPUs x 1 s of samples, side by side with a real
# Prometheus holding the same temperatures.
#
#   cargo build --release --workspace && benches/postmortem.sh [DAYS] [RUNS]   # default 7, 5
#
# Measures: `gpuwatch import nvidia-smi` rate (rows/s); `gpuwatch history --step 1m` over the
# range; the max temperature per GPU per minute through `gpuwatch query`, from the rollups and
# from raw samples; and the same aggregate through Prometheus (`promtool tsdb
# create-blocks-from openmetrics`, then `query_range` of max_over_time(gpu_temp[1m]) at 60 s
# steps). Query timings are the median of RUNS, each a fresh process (CLI) or request (HTTP).
set -euo pipefail
cd "$(dirname "$0")/.."
days=${1:-7}
runs=${2:-5}
gw=${GPUWATCH:-target/release/gpuwatch}
work=$(mktemp -d /tmp/gpuwatch-postmortem.XXXXXX)
trap 'kill $prom_pid 2>/dev/null || true' EXIT
prom_pid=
start=1764000000
end=$(python3 -c "print($start + int($days * 86400) - 1)")
say() { printf '%-58s %s\n' "$1" "$2"; }
now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
timed() { # runs "$@" RUNS times, prints the median wall time in ms
  for _ in $(seq "$runs"); do
    local t0 t1; t0=$(now); "$@" > /dev/null; t1=$(now)
    awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f\n", (b - a) * 1000}'
  done | median
}

echo "generating $days days x 8 GPUs x 1 s in $work ..."
python3 benches/gen_week.py --days "$days" --gpus 8 --start $start \
  --smi "$work/week.csv" --openmetrics "$work/week.om"
rows=$(( $(wc -l < "$work/week.csv") - 1 ))
# The generated files (800 MB) are written back before the import is timed, and the imported
# database before the queries are: a post-mortem reads logs and a database already on disk,
# not while the kernel flushes them.
sync

t0=$(now)
$gw --log warn import nvidia-smi "$work/week.csv" --db "$work/week.db" --tz UTC --host bench > "$work/import.out"
t1=$(now)
import_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}')
say "rows" "$rows"
say "import nvidia-smi (s)" "$import_s"
say "import rate (rows/s)" "$(awk -v r="$rows" -v s="$import_s" 'BEGIN {printf "%.0f", r / s}')"
say "database size (MiB)" "$(du -m "$work/week.db" | cut -f1)"
sync

from_ms=$((start * 1000)); to_ms=$(( (end + 1) * 1000 ))
q_rollup="SELECT gpu_uuid, ts_ms, temp_c_max FROM gpu_rollups WHERE ts_ms >= $from_ms AND ts_ms < $to_ms ORDER BY gpu_uuid, ts_ms"
q_raw="SELECT gpu_uuid, ts_ms / 60000 * 60000 AS minute, max(temp_c) FROM gpu_samples WHERE ts_ms >= $from_ms AND ts_ms < $to_ms GROUP BY gpu_uuid, minute ORDER BY gpu_uuid, minute"
check_rows() { "$@" | tail -n +2 | wc -l; }
say "history --step 1m, all metrics, 8 GPUs (ms, median)" \
  "$(timed $gw history --db "$work/week.db" --from $start --to $((end + 1)) --step 1m --format csv)"
say "query max temp/GPU/minute from rollups (ms, median)" \
  "$(timed $gw query --db "$work/week.db" --format csv "$q_rollup")"
say "  rows" "$(check_rows $gw query --db "$work/week.db" --format csv "$q_rollup")"
say "query max temp/GPU/minute from raw samples (ms, median)" \
  "$(timed $gw query --db "$work/week.db" --format csv --timeout 600s "$q_raw")"

echo "building the Prometheus TSDB (promtool tsdb create-blocks-from openmetrics) ..."
mkdir -p "$work/tsdb"
promtool tsdb create-blocks-from openmetrics "$work/week.om" "$work/tsdb" > "$work/promtool.out" 2>&1
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
printf 'global:\n  scrape_interval: 1h\n' > "$work/prom.yml"
prometheus --config.file="$work/prom.yml" --storage.tsdb.path="$work/tsdb" \
  --storage.tsdb.retention.time=100y --web.listen-address="127.0.0.1:$port" \
  --query.max-samples=500000000 > "$work/prometheus.log" 2>&1 & prom_pid=$!
for _ in $(seq 120); do curl -sf "127.0.0.1:$port/-/ready" > /dev/null && break; sleep 0.5; done
url="http://127.0.0.1:$port/api/v1/query_range?query=max_over_time(gpu_temp%5B1m%5D)&start=$((start + 59))&end=$end&step=60"
curl -sf "$url" > "$work/prom.json"   # warm-up (loads the blocks)
say "Prometheus query_range max_over_time[1m], step 60 (ms, median)" "$(timed curl -sf "$url")"
say "  series x points" "$(python3 -c "import json; d=json.load(open('$work/prom.json'))['data']['result']; print(len(d), 'x', len(d[0]['values']) if d else 0)")"
echo "work dir: $work (delete it when done)"
