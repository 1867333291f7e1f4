#!/usr/bin/env bash
# Cost per GPU as devices grow: two `gpuwatch run` daemons side by side for the same wall time,
# one on 8 simulated H100s (scenarios/healthy-8gpu.toml), one on 64 (scenarios/healthy-64gpu.toml:
# the same job on 8 × 8 GPUs), each with its own copy of the simulated library, every default
# rule, rollups and the size bound, 1-s interval.
#
#   cargo build --release --workspace && benches/per_gpu.sh [SECONDS]   # default 300
#
# Environment: FOOTPRINT_RULES=0 (no rules: the sampling and storage path alone),
# GPUWATCH=path/to/gpuwatch, SMALL= / LARGE= other scenarios, GPUWATCH_SMALL= / GPUWATCH_LARGE=
# another binary for one side (two builds side by side on the same scenario).
# Prints each daemon's steady CPU per tick (all threads, from half-way to the end, so the rule
# windows are filling in both), per thread, and per GPU-sample, and the ratio large/small.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-300}
gw=$(realpath "${GPUWATCH:-target/release/gpuwatch}")
lib=$(realpath "${FOOTPRINT_NVML:-target/release/libgpuwatch_fake_nvml.so}")
small=${SMALL:-scenarios/healthy-8gpu.toml}
large=${LARGE:-scenarios/healthy-64gpu.toml}
work=$(mktemp -d /tmp/gpuwatch-per-gpu.XXXXXX)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"' EXIT
for who in small large; do
  d="$work/$who"; mkdir -p "$d"
  cp "$lib" "$d/libnvidia-ml.so.1"
  cp "${!who}" "$d/gpuwatch-scenario.toml"
  cat > "$d/gpuwatch.toml" <<CFG
database = "$d/gw.db"
nvml_library = "$d/libnvidia-ml.so.1"
interval = "1s"
max_db_size = "2GiB"
[http]
listen = "127.0.0.1:$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
CFG
  [ "${FOOTPRINT_RULES:-1}" = 0 ] && printf '[rules]\ndefault_rules = false\n' >> "$d/gpuwatch.toml"
  bin_var="GPUWATCH_${who^^}"
  "$(realpath "${!bin_var:-$gw}")" run --config "$d/gpuwatch.toml" --log warn > "$d/log" 2>&1 &
  pids+=($!)
done
# Per thread: name (numbered lanes and GPU threads folded) and CPU ns (schedstat, exact).
snap() {
  for t in /proc/"$1"/task/*; do
    printf '%s %s\n' "$(sed 's/[0-9]*$//' "$t/comm")" "$(cut -d' ' -f1 "$t/schedstat")"
  done
}
early=$((secs / 2))
sleep "$early"
snap "${pids[0]}" > "$work/small.a"; snap "${pids[1]}" > "$work/large.a"
sleep $((secs - early))
snap "${pids[0]}" > "$work/small.b"; snap "${pids[1]}" > "$work/large.b"
steady=$((secs - early))
echo "wall time $secs s, steady from $early s; rules: $([ "${FOOTPRINT_RULES:-1}" = 0 ] && echo none || echo default)"
for who in small large; do
  n=$(grep -c '^\[\[gpu\]\]' "$work/$who/gpuwatch-scenario.toml")
  awk -v s="$steady" -v n="$n" -v who="$who" 'NR == FNR {a[$1] += $2; next} {b[$1] += $2}
    END {
      for (k in b) { d = (b[k] - a[k]) / 1e3 / s; t += d; printf "%-5s %2d GPUs  thread %-18s %8.1f us/tick\n", who, n, k, d }
      printf "%-5s %2d GPUs  all threads               %8.1f us/tick  %6.1f us per GPU-sample\n", who, n, t, t / n
    }' "$work/$who.a" "$work/$who.b" | sort -k6 -g -r
done | tee "$work/out"
awk '/all threads/ {v[++i] = $(NF - 3)} END {printf "per GPU-sample, large vs small: %.2fx\n", v[2] / v[1]}' "$work/out"
