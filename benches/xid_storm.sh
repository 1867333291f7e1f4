#!/usr/bin/env bash
# XID storms through `gpuwatch import dmesg`: a saved kernel log (`dmesg --time-format iso`)
# with LINES lines of one XID (95, uncontained ECC) on one GPU over SPAN_S seconds, plus the
# real log ../shared/data/gpud-xid-dmesg-and-smi-q/dmesg-time-format-iso.log around it;
# imported RUNS times each into a fresh database (median wall time, lines/s), then imported
# again into the same database (it must add nothing and exit 1). Prints the rows stored and
# the database size. Not run in CI.
#
#   benches/xid_storm.sh                          # 800,000 lines over 10 min, 5 runs
#   LINES=12000 benches/xid_storm.sh              # the storm of issue 37's report
#   GPUWATCH=/path/to/old/gpuwatch benches/xid_storm.sh   # another build, side by side
#
# Environment: GPUWATCH (target/release/gpuwatch), LINES (800000), SPAN_S (600), RUNS (5),
# KEEP=1 (keep the work directory).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
bin="${GPUWATCH:-$here/target/release/gpuwatch}"
lines="${LINES:-800000}"
span="${SPAN_S:-600}"
runs="${RUNS:-5}"
real="$here/../shared/data/gpud-xid-dmesg-and-smi-q/dmesg-time-format-iso.log"
work="$(mktemp -d)"
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
log="$work/storm.log"

python3 - "$lines" "$span" "$real" > "$log" <<'EOF'
import sys, datetime
n, span, real = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
start = datetime.datetime(2024, 11, 15, 13, 0, 0, tzinfo=datetime.timezone.utc)
out = sys.stdout
with open(real) as f:
    text = f.read()
out.write(text if text.endswith("\n") else text + "\n")
for i in range(n):
    t = start + datetime.timedelta(seconds=span * i / max(n - 1, 1))
    stamp = t.strftime("%Y-%m-%dT%H:%M:%S,%f+00:00")
    part = i % 4
    out.write(f"{stamp} NVRM: Xid (PCI:0000:19:00): 95, pid=2{part}1{part}, name=python3, "
              f"Uncontained: FBHUB. RST: Yes, D-RST: No\n")
EOF
total=$(wc -l < "$log")
echo "log: $total lines ($lines storm lines of XID 95 over ${span}s + the real iso log), $(du -h "$log" | cut -f1)"

times=()
for r in $(seq "$runs"); do
  db="$work/run$r.db"
  s=$(date +%s.%N)
  "$bin" import dmesg --db "$db" --host storm "$log" > "$work/out$r" 2>&1
  e=$(date +%s.%N)
  times+=("$(echo "$e - $s" | bc)")
done
median=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
echo "import times (s): ${times[*]}"
echo "median: ${median}s = $(echo "$total / $median" | bc) lines/s"
db="$work/run1.db"
# A build before XID runs (schema < 22) has one row per event and no `count` column.
cnt=count
[ "$(sqlite3 "$db" "SELECT count(*) FROM pragma_table_info('gpu_events') WHERE name = 'count'")" = 1 ] || cnt=1
sqlite3 "$db" "SELECT 'rows: ' || count(*) || ', events: ' || sum($cnt) FROM gpu_events WHERE kind = 'xid'"
sqlite3 "$db" "SELECT '  XID ' || code || ': ' || count(*) || ' row(s), ' || sum($cnt) || ' events' FROM gpu_events WHERE kind = 'xid' GROUP BY code"
echo "database: $(du -h "$db" | cut -f1)"
set +e
s=$(date +%s.%N)
"$bin" import dmesg --db "$db" --host storm "$log" > "$work/again" 2>&1
rc=$?
e=$(date +%s.%N)
set -e
echo "re-import: exit $rc in $(echo "$e - $s" | bc)s; $(grep -o '[0-9]* new, [0-9]* merged[^;]*' "$work/again")"
sqlite3 "$db" "SELECT 'rows after the re-import: ' || count(*) || ', events: ' || sum($cnt) FROM gpu_events WHERE kind = 'xid'"
