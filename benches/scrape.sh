#!/usr/bin/env bash
# CPU cost of one /metrics scrape of the whole `gpuwatch run` process, on 8 simulated GPUs ×
# 4 processes (scenarios/healthy-8gpu.toml, or FOOTPRINT_SCENARIO), one webhook receiver and
# remote write configured. Each round measures the process's CPU over an idle stretch, then
# over an equally long stretch of back-to-back scrapes; CPU per scrape = (busy - idle) /
# scrapes. Prints each round and the median, the answer's size, and the in-process build
# time (gpuwatch_scrape_duration_seconds) as a cross-check.
#
#   cargo build --release --workspace && benches/scrape.sh [ROUNDS] [SECONDS]   # default 5 20
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
secs=${2:-20}
scenario=${FOOTPRINT_SCENARIO:-scenarios/healthy-8gpu.toml}
gw=${GPUWATCH:-target/release/gpuwatch}
work=$(mktemp -d /tmp/gpuwatch-scrape.XXXXXX)
gw_pid=; sink_pid=
trap 'kill $gw_pid $sink_pid 2>/dev/null || true; rm -rf "$work"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
port=$(free_port); sink_port=$(free_port); closed=$(free_port)
mkdir -p "$work/lib"
cp target/release/libgpuwatch_fake_nvml.so "$work/lib/libnvidia-ml.so.1"
cp "$scenario" "$work/lib/gpuwatch-scenario.toml"
printf 'http://127.0.0.1:%s/hook\n' "$closed" > "$work/webhook-url"
python3 benches/rw_sink.py "$sink_port" & sink_pid=$!
cat > "$work/gpuwatch.toml" <<CFG
database = "$work/gw.db"
nvml_library = "$work/lib/libnvidia-ml.so.1"
interval = "1s"
[http]
listen = "127.0.0.1:$port"
[[notify.webhook]]
name = "bench"
url_file = "$work/webhook-url"
[[remote_write]]
name = "bench"
url = "http://127.0.0.1:$sink_port/api/v1/write"
interval = "15s"
CFG
"$gw" run --config "$work/gpuwatch.toml" --log warn & gw_pid=$!
clk=$(getconf CLK_TCK)
cpu() { awk -v c="$clk" '{print ($14 + $15) / c}' "/proc/$gw_pid/stat"; }
sleep 15
url="http://127.0.0.1:$port/metrics"
bytes=$(curl -sf "$url" | wc -c)
results=()
for r in $(seq "$rounds"); do
  a=$(cpu); sleep "$secs"; b=$(cpu)
  n=0; end=$(( $(date +%s) + secs )); c=$(cpu)
  while [ "$(date +%s)" -lt "$end" ]; do
    curl -sf -o /dev/null "$url"; n=$((n + 1))
  done
  d=$(cpu)
  per=$(awk -v i="$(awk -v a="$a" -v b="$b" 'BEGIN{print b-a}')" -v busy="$(awk -v c="$c" -v d="$d" 'BEGIN{print d-c}')" -v n="$n" \
    'BEGIN {printf "%.1f", 1e6 * (busy - i) / n}')
  echo "round $r: $n scrapes, CPU per scrape $per us"
  results+=("$per")
done
median=$(printf '%s\n' "${results[@]}" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}')
m=$(curl -sf "$url")
echo "answer                $bytes bytes, $(printf '%s\n' "$m" | grep -vc '^#') series"
echo "CPU per scrape        median $median us over $rounds rounds (whole process, busy minus idle)"
printf '%s\n' "$m" | awk '/^gpuwatch_scrape_duration_seconds_(sum|count)/ {v[$1] = $2} END {printf "in-process build      %.1f us per scrape (wall, gpuwatch_scrape_duration_seconds)\n", 1e6 * v["gpuwatch_scrape_duration_seconds_sum"] / v["gpuwatch_scrape_duration_seconds_count"]}'
echo "RSS after             $(awk '/VmRSS/ {printf "%.1f MiB", $2 / 1024}' /proc/$gw_pid/status)"
