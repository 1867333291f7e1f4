#!/usr/bin/env bash
# Finds the functions the running daemon executes and writes them to link/hot-functions.txt,
# which build.rs hands to the linker (`--symbol-ordering-file`) so that they sit together.
#
#   scripts/hot-functions.sh [SECONDS]     # default 150 per phase; needs root, tracefs, perf
#
# How: a release build writes its link map (GPUWATCH_LINK_MAP); every function section of the
# map gets a uprobe (tracefs `uprobe_events`, ~14 000 of them, counting only: the trace itself
# stays off), and a copy of the build runs the 8-GPU simulated scenario as a plain daemon
# with one webhook receiver, then with the fleet features as `FOOTPRINT_FLEET=1
# benches/footprint.sh` drives them (/metrics and /api/v1/status every 15 s, the page and an
# hour of history every 60 s, remote write every 15 s to benches/rw_sink.py). Each phase's
# calls are read from `uprobe_profile` after start-up (45 s: the first page-out at tick 30 is
# over) and at its end. Calls miss the loops entered at start-up (each thread's main loop),
# so each phase runs once more from a copy without probes, with the block device's
# read-ahead at 0 for the run: after start-up its code is paged out from outside
# (`process_madvise`), and `perf record -e page-faults -d` names the function at each
# fault's address. The list: the plain daemon's functions (those its faults name, then the
# rest most often called first), then those only the fleet features ran, then the previous
# list's other functions. Run it after large changes: a name the build no longer has costs
# memory, never a build.
#
# The probes are removed in the background when the run ends: the kernel waits for a grace
# period per probe, which takes minutes for all of them.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-150}
warm=45
T=/sys/kernel/tracing
[ -w "$T/uprobe_events" ] || { echo "needs root and tracefs at $T" >&2; exit 1; }
command -v perf > /dev/null || { echo "needs perf" >&2; exit 1; }
work=$(mktemp -d /tmp/gpuwatch-hot.XXXXXX)
dev=$(lsblk -no PKNAME "$(findmnt -no SOURCE --target "$work")" 2>/dev/null | head -1)
[ -n "$dev" ] || dev=$(basename "$(findmnt -no SOURCE --target "$work")")
ra_file=/sys/block/$dev/queue/read_ahead_kb
ra=$(cat "$ra_file")
group=gwhot$$
gw_pid=; sink_pid=; poll=
tracing_on=$(cat "$T/tracing_on")
cleanup() {
  kill $gw_pid $sink_pid $poll 2>/dev/null || true
  echo "$ra" > "$ra_file"
  echo "$tracing_on" > "$T/tracing_on"
  if [ -d "$T/events/$group" ]; then
    ( echo 0 > "$T/events/$group/enable"; grep "^p:$group/" "$T/uprobe_events" \
        | sed "s|^p:\([^ ]*\) .*|-:\1|" > "$work/remove"
      while read -r line; do echo "$line" >> "$T/uprobe_events"; done < "$work/remove" ) \
      > /dev/null 2>&1 &
    echo "removing the probes in the background (minutes)" >&2
  fi
}
trap cleanup EXIT
GPUWATCH_LINK_MAP="$work/gpuwatch.map" cargo build --release --workspace
mkdir -p "$work/gw"
cp target/release/gpuwatch "$work/gwbin"
cp target/release/gpuwatch "$work/gwfault"
cp target/release/libgpuwatch_fake_nvml.so "$work/gw/libnvidia-ml.so.1"
cp scenarios/healthy-8gpu.toml "$work/gw/gpuwatch-scenario.toml"
python3 scripts/hot_functions.py probes "$work/gpuwatch.map" "$work/gwbin" "$group" > "$work/probes"
while read -r line; do echo "$line" >> "$T/uprobe_events"; done < "$work/probes"
echo 0 > "$T/tracing_on"
echo 1 > "$T/events/$group/enable"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
port=$(free_port); closed=$(free_port); sink_port=$(free_port)
printf 'http://127.0.0.1:%s/hook\n' "$closed" > "$work/webhook-url"
config() {
  cat <<CFG
database = "$work/$1.db"
nvml_library = "$work/gw/libnvidia-ml.so.1"
interval = "1s"
# The inventory (every 5 minutes by default) runs within each phase, so its code is listed.
inventory_interval = "60s"
max_db_size = "2GiB"
[http]
listen = "127.0.0.1:$port"
[[notify.webhook]]
name = "bench"
url_file = "$work/webhook-url"
CFG
  if [ "$1" = fleet ]; then
    cat <<CFG
[[remote_write]]
name = "bench"
url = "http://127.0.0.1:$sink_port/api/v1/write"
interval = "15s"
CFG
  fi
}
phase() {  # plain|fleet  calls|faults
  config "$1" > "$work/$1.toml"
  rm -f "$work/$1.db"*
  local exe=$work/gwbin
  if [ "$2" = faults ]; then
    exe=$work/gwfault
    echo 0 > "$ra_file"
  fi
  [ "$1" = fleet ] && { python3 benches/rw_sink.py "$sink_port" & sink_pid=$!; }
  "$exe" run --config "$work/$1.toml" --log warn & gw_pid=$!
  if [ "$1" = fleet ]; then
    ( n=0; while sleep 15; do
        for path in metrics api/v1/status; do
          curl -sf -o /dev/null "http://127.0.0.1:$port/$path" || true
        done
        n=$((n + 1)); if [ $((n % 4)) = 0 ]; then
          curl -sf -o /dev/null "http://127.0.0.1:$port/" || true
          curl -sf -o /dev/null "http://127.0.0.1:$port/api/v1/history?since=1h&metric=util_gpu,mem_used,temp,power" || true
        fi
      done ) & poll=$!
  fi
  sleep "$warm"
  if [ "$2" = faults ]; then
    python3 scripts/hot_functions.py pageout "$gw_pid" "$exe"
    python3 -c "import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)" "$exe"
    perf record -q -e page-faults -c 1 -d -p "$gw_pid" -o "$work/$1.perf" -- sleep "$secs"
    perf script -i "$work/$1.perf" -F addr > "$work/$1-faults" 2>/dev/null
    echo "$ra" > "$ra_file"
  else
    cp "$T/uprobe_profile" "$work/$1-before"
    sleep "$secs"
    cp "$T/uprobe_profile" "$work/$1-after"
  fi
  kill -INT $gw_pid; wait $gw_pid 2>/dev/null || true; gw_pid=
  kill $poll $sink_pid 2>/dev/null || true; poll=; sink_pid=
}
phase plain calls
phase plain faults
phase fleet calls
phase fleet faults
cp link/hot-functions.txt "$work/previous"
python3 scripts/hot_functions.py order "$work/gpuwatch.map" \
  "$work/plain-before,$work/plain-after,$work/plain-faults" \
  "$work/fleet-before,$work/fleet-after,$work/fleet-faults" \
  --then "$work/previous" > link/hot-functions.txt
echo "$(wc -l < link/hot-functions.txt) functions -> link/hot-functions.txt (work files in $work)"
