#!/usr/bin/env bash
# The cost of attribution in the running daemon: two `gpuwatch run` side by side on the same
# 8 simulated GPUs x 4 processes (scenarios/healthy-8gpu.toml), 1 s interval, every default
# rule, for the same wall time. Both resolve their processes from a host /proc fixture
# (`[processes] proc_root`, examples/attribution_fixture.rs); "on" also has each process's
# cgroup (a containerd pod), the pods' /var/log/pods directories, and a kubelet serving the
# pod-resources API that allocates every GPU to a pod (`[kubernetes] enabled = true`); "off"
# has no cgroup files and no kubelet.
#
#   cargo build --release --workspace && cargo build --release --examples
#   benches/attribution.sh [SECONDS] [ROUNDS]     # default 120 s, 3 rounds
#
# ATTRIBUTION_CONTROL=1 runs "off" against a second "off" instead (an A/A control: the
# spread two identical daemons show side by side on this machine).
#
# Prints, per round and as the median of the rounds: steady CPU per tick (all threads, from
# a third of the run to its end), the sampling (main) thread's CPU per tick, the kubelet
# thread's, RSS at the end; and that "on" stored pods for every process and GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-120}
if [ "${ATTRIBUTION_CONTROL:-0}" = 1 ]; then on=off2; else on=on; fi
rounds=${2:-3}
scenario=scenarios/healthy-8gpu.toml
gw=${GPUWATCH:-target/release/gpuwatch}
fixture=target/release/examples/attribution_fixture
[ -x "$fixture" ] || { echo "build the fixture: cargo build --release --examples" >&2; exit 2; }
work=$(mktemp -d /tmp/gpuwatch-attribution.XXXXXX)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"' EXIT

# Per thread: name, CPU ns (schedstat).
threads() {
  for t in /proc/$1/task/*; do
    printf '%s %s %s\n' "${t##*/}" "$(sed 's/gpuwatch-gpu[0-9]*/gpuwatch-gpu*/' "$t/comm")" \
      "$(cut -d' ' -f1 "$t/schedstat")"
  done
}
# Steady CPU per tick between two snapshots: all threads, the main thread, the kubelet's.
steady() {
  awk -v s="$3" 'NR == FNR {c0[$1] = $3; next}
    {d = ($3 - c0[$1]) / 1e3 / s; all += d; if ($2 == "gpuwatch") main += d; if ($2 == "gpuwatch-kubele") kube += d}
    END {printf "%.1f %.1f %.1f\n", all, main, kube}' "$1" "$2"
}

for r in $(seq 1 "$rounds"); do
  for mode in $on off; do
    d="$work/$r-$mode"
    mkdir -p "$d/lib"
    cp target/release/libgpuwatch_fake_nvml.so "$d/lib/libnvidia-ml.so.1"
    cp "$scenario" "$d/lib/gpuwatch-scenario.toml"
    if [ $mode = on ]; then
      "$fixture" "$scenario" "$d" on & pids+=($!)
      for _ in $(seq 100); do [ -S "$d/kubelet.sock" ] && break; sleep 0.1; done
      kube="[kubernetes]
enabled = true
pod_resources_socket = \"$d/kubelet.sock\"
pod_logs_dir = \"$d/pods\""
    else
      "$fixture" "$scenario" "$d" off
      kube="[kubernetes]
enabled = false"
    fi
    cat > "$d/gpuwatch.toml" <<CFG
database = "$d/gw.db"
nvml_library = "$d/lib/libnvidia-ml.so.1"
interval = "1s"
[http]
listen = "127.0.0.1:0"
[processes]
proc_root = "$d/proc"
$kube
CFG
    "$gw" run --config "$d/gpuwatch.toml" --log warn 2> "$d/run.log" & pids+=($!)
    echo $! > "$d/pid"
  done
  early=$(( secs / 3 ))
  sleep "$early"
  for mode in $on off; do threads "$(cat "$work/$r-$mode/pid")" > "$work/$r-$mode/t0"; done
  sleep $(( secs - early ))
  for mode in $on off; do
    d="$work/$r-$mode"; p=$(cat "$d/pid")
    threads "$p" > "$d/t1"
    awk '/VmRSS/ {print $2}' "/proc/$p/status" > "$d/rss"
    kill -TERM "$p"; wait "$p" || true
    read -r all main kube < <(steady "$d/t0" "$d/t1" $(( secs - early )))
    placed=$(sqlite3 "$d/gw.db" "SELECT count(*) || '/' || (SELECT count(*) FROM gpu_processes) FROM gpu_processes WHERE pod IS NOT NULL" 2>/dev/null || echo "?")
    held=$(sqlite3 "$d/gw.db" "SELECT count(DISTINCT gpu_uuid) FROM gpu_allocations" 2>/dev/null || echo "?")
    echo "$r $mode $all $main $kube $(( $(cat "$d/rss") / 1024 )) $placed $held" >> "$work/rows"
  done
  kill "${pids[@]}" 2>/dev/null || true
  pids=()
done

printf '%-5s %-4s %18s %18s %16s %8s %16s %10s\n' round mode "CPU/tick us (all)" "sampling thread us" "kubelet thread us" "RSS MiB" "process rows w/ pod" "GPUs held"
awk '{printf "%-5s %-4s %18.1f %18.1f %16.1f %8d %16s %10s\n", $1, $2, $3, $4, $5, $6, $7, $8}' "$work/rows"
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
for col in 3 4; do
  on_v=$(awk -v c=$col -v m=$on '$2 == m {print $c}' "$work/rows" | median)
  off=$(awk -v c=$col '$2 == "off" {print $c}' "$work/rows" | median)
  ratio=$(awk -v c=$col -v m=$on '{v[$1 " " $2] = $c} END {for (k in v) {split(k, a, " "); if (a[2] == m) print v[k] / v[a[1] " off"]}}' "$work/rows" | median)
  what=$([ $col = 3 ] && echo "CPU per tick, all threads" || echo "sampling thread per tick ")
  printf 'median %s: %s %.1f us, off %.1f us, %s/off %.3f (median of per-round ratios)\n' "$what" "$on" "$on_v" "$off" "$on" "$ratio"
done
