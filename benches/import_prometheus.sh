#!/usr/bin/env bash
# `gpuwatch import prometheus` beside the floor the HTTP API sets: a real Prometheus
# (Debian's) backfilled by promtool with NODES x 8 GPUs of dcgm-exporter series (GPU_UTIL,
# FB_USED, FB_FREE, GPU_TEMP, POWER_USAGE, SM_CLOCK, PROF_SM_ACTIVE) at 15 s for HOURS hours;
# then RUNS times each, alternating: the import into a fresh database (wall time, peak RSS
# from GNU time), and `curl` fetching the same chunk queries (instant queries of a 1-hour
# range selector) to /dev/null, one after the other. Prints the medians and the ratio. Not
# run in CI.
#
#   benches/import_prometheus.sh                 # 3 nodes x 8 GPUs, 24 h, 3 runs
#   HOURS=6 benches/import_prometheus.sh         # RSS must not grow with the range
#
# Environment: GPUWATCH (target/release/gpuwatch), NODES (3), HOURS (24), RUNS (3), KEEP=1.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
bin="${GPUWATCH:-$here/target/release/gpuwatch}"
nodes="${NODES:-3}"
hours="${HOURS:-24}"
runs="${RUNS:-3}"
work="$(mktemp -d)"
[ "${KEEP:-0}" = 1 ] || trap 'kill $prom_pid 2>/dev/null || true; rm -rf "$work"' EXIT
now=$(date +%s)
t0=$(( (now - (hours + 3) * 3600) / 3600 * 3600 ))
t1=$(( t0 + hours * 3600 ))

python3 - "$nodes" "$t0" "$hours" > "$work/dcgm.om" <<'PY'
import sys
nodes, t0, hours = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
fams = ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_PROF_SM_ACTIVE"]
out = sys.stdout
for f in fams:
    out.write(f"# TYPE {f} gauge\n")
    for n in range(nodes):
        for g in range(8):
            labels = (f'gpu="{g}",UUID="GPU-{n:08x}-0000-4000-8000-{g:012x}",device="nvidia{g}",'
                      f'modelName="NVIDIA H100 80GB HBM3",Hostname="node-{n}"')
            for i in range(hours * 240):
                t = t0 + i * 15
                v = {"DCGM_FI_PROF_SM_ACTIVE": 0.8, "DCGM_FI_DEV_GPU_UTIL": 90 + (i % 7),
                     "DCGM_FI_DEV_GPU_TEMP": 60 + (i % 5)}.get(f, 40960 + (i % 3))
                out.write(f"{f}{{{labels}}} {v} {t}\n")
out.write("# EOF\n")
PY
mkdir -p "$work/tsdb"
promtool tsdb create-blocks-from openmetrics "$work/dcgm.om" "$work/tsdb" > /dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
printf 'global:\n  scrape_interval: 1m\nscrape_configs: []\n' > "$work/prometheus.yml"
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --storage.tsdb.retention.time=10y --web.listen-address="127.0.0.1:$port" \
  > "$work/prometheus.log" 2>&1 &
prom_pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/-/ready" > /dev/null && break; sleep 0.2; done
url="http://127.0.0.1:$port"
points=$(( nodes * 8 * 7 * hours * 240 ))
echo "source: $nodes nodes x 8 GPUs, $hours h at 15 s, 7 families: $points points ($(( nodes * 8 * hours * 240 )) samples)"

# The queries gpuwatch sends per chunk: the GPU series (both namings) and the default
# `[prometheus.queries]` step and loss selectors.
queries=('{__name__=~"DCGM_FI_(DEV|PROF)_.+|gpuwatch_gpu_.+"}[3600s]' 'training_step[3600s]'
         'training_step_total[3600s]' 'training_loss[3600s]')
curl_args=()
for h in $(seq 1 "$hours"); do
  for q in "${queries[@]}"; do
    enc=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$q")
    curl_args+=(-o /dev/null "$url/api/v1/query?query=$enc&time=$(( t0 + h * 3600 ))")
  done
done
imp=(); rss=(); fl=()
for r in $(seq "$runs"); do
  rm -f "$work"/i.db*
  /usr/bin/time -f '%e %M' -o "$work/time.txt" "$bin" --log warn import prometheus \
    --prometheus "$url" --from "$t0" --to "$t1" --chunk 1h --db "$work/i.db" > "$work/out.txt"
  read -r wall kib < "$work/time.txt"
  imp+=("$wall"); rss+=("$kib")
  start=$(date +%s.%N)
  # One curl for all of them (one connection, kept alive, as gpuwatch's client keeps it).
  curl -sf "${curl_args[@]}"
  fl+=("$(python3 -c "import time; print(round(time.time() - $start, 3))")")
done
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mi=$(med "${imp[@]}"); mf=$(med "${fl[@]}"); mr=$(med "${rss[@]}")
cat "$work/out.txt"
echo "import prometheus: median ${mi} s wall (runs: ${imp[*]}), peak RSS median $(( mr / 1024 )) MiB"
echo "curl floor (the same $(( hours * ${#queries[@]} )) queries): median ${mf} s (runs: ${fl[*]})"
python3 -c "print(f'import / floor: {float($mi) / float($mf):.2f}x')"
