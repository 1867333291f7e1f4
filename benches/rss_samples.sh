#!/usr/bin/env bash
# Samples a running process's resident memory every INTERVAL seconds (default 60) from
# /proc/PID/smaps until it exits: one line per sample, "unix-time anon-KiB file-KiB", where
# anon is the heap, the stacks and the other anonymous mappings, and file the pages of mapped
# files (the executable, the libraries). docs/BENCHMARKS.md takes medians and slopes of a
# window of these beside `benches/footprint.sh`, whose own figures are single readings.
#
#   benches/rss_samples.sh PID [INTERVAL] > samples.txt
set -euo pipefail
pid=$1
every=${2:-60}
while [ -r "/proc/$pid/smaps" ]; do
  awk -v t="$(date +%s)" '
    /^[0-9a-f]+-[0-9a-f]+ / { name = $6 }
    /^Anonymous:/ { anon += $2 }
    /^Rss:/ { if (name ~ /^\//) file += $2 }
    END { if (NR) printf "%s %d %d\n", t, anon, file }' "/proc/$pid/smaps" 2>/dev/null || true
  sleep "$every"
done
