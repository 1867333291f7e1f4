#!/usr/bin/env bash
# Finds the functions the running daemon executes and writes them to link/hot-functions.txt,
# which build.rs hands to the linker (`--symbol-ordering-file`) so that they sit together.
#
#   scripts/hot-functions.sh [SECONDS]     # default 240; needs root and perf
#
# How: a release build writes its link map (GPUWATCH_LINK_MAP); the daemon runs the 8-GPU
# simulated scenario with one webhook receiver and the fleet features (as
# `FOOTPRINT_FLEET=1 benches/footprint.sh` does: /metrics and /api/v1/status every 15 s, the
# page and a history once a minute, remote write every 15 s to benches/rw_sink.py) from a copy of
# that build whose pages are not cached, with the block device's read-ahead set to 0 for the
# run (restored after), so that every page of code it executes is read by a major fault of
# its own; `perf record -e major-faults` gives each fault's address, and the `madvise` calls
# are recorded beside them. The pages faulted after the daemon's first page-out (its last
# `MADV_PAGEOUT`, at tick 30, when start-up is over: everything it had mapped was dropped then)
# are the steady state's code; every function whose section overlaps one of them is listed,
# in the order of the faults. Run it for a few minutes: what runs once a minute (rollups)
# must run at least once after the page-out.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-240}
work=$(mktemp -d /tmp/gpuwatch-hot.XXXXXX)
dev=$(lsblk -no PKNAME "$(findmnt -no SOURCE --target "$work")" 2>/dev/null | head -1)
[ -n "$dev" ] || dev=$(basename "$(findmnt -no SOURCE --target "$work")")
ra_file=/sys/block/$dev/queue/read_ahead_kb
ra=$(cat "$ra_file")
gw_pid=; sink_pid=
trap 'echo "$ra" > "$ra_file"; kill $gw_pid $sink_pid 2>/dev/null || true' EXIT
GPUWATCH_LINK_MAP="$work/gpuwatch.map" cargo build --release --workspace
mkdir -p "$work/gw"
cp target/release/gpuwatch "$work/gwbin"
cp target/release/libgpuwatch_fake_nvml.so "$work/gw/libnvidia-ml.so.1"
cp scenarios/healthy-8gpu.toml "$work/gw/gpuwatch-scenario.toml"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
port=$(free_port); closed=$(free_port); sink_port=$(free_port)
python3 benches/rw_sink.py "$sink_port" & sink_pid=$!
printf 'http://127.0.0.1:%s/hook\n' "$closed" > "$work/webhook-url"
cat > "$work/gpuwatch.toml" <<CFG
database = "$work/gw.db"
nvml_library = "$work/gw/libnvidia-ml.so.1"
interval = "1s"
max_db_size = "2GiB"
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
sync
python3 -c "import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)" "$work/gwbin"
echo 0 > "$ra_file"
perf record -q -e major-faults -e syscalls:sys_enter_madvise -c 1 -d -o "$work/faults.perf" -- \
  "$work/gwbin" run --config "$work/gpuwatch.toml" --log warn & gw_pid=$!
( n=0; while sleep 15; do
    for path in healthz metrics api/v1/status; do
      curl -sf -o /dev/null "http://127.0.0.1:$port/$path" || true
    done
    n=$((n + 1)); if [ $((n % 4)) = 0 ]; then
      curl -sf -o /dev/null "http://127.0.0.1:$port/" || true
      curl -sf -o /dev/null "http://127.0.0.1:$port/api/v1/history?since=1h&metric=util_gpu,mem_used,temp,power" || true
    fi
  done ) & poll=$!
sleep "$secs"
kill -INT $gw_pid; wait $gw_pid 2>/dev/null || true; kill $poll $sink_pid 2>/dev/null || true
echo "$ra" > "$ra_file"
perf script -i "$work/faults.perf" -F time,event,addr,trace 2>/dev/null > "$work/faults.txt"
python3 scripts/hot_functions.py "$work/gpuwatch.map" "$work/faults.txt" > link/hot-functions.txt
echo "$(wc -l < link/hot-functions.txt) functions -> link/hot-functions.txt (work files in $work)"
