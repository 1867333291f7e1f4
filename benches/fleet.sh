#!/usr/bin/env bash
# What the fleet rules (examples/prometheus/gpuwatch-fleet-rules.yml: GpuwatchJobHang,
# GpuwatchJobStraggler, their expressions and the annotation templates' queries) cost a
# Prometheus that holds a synthetic fleet of NODES nodes × GPUS GPUs: per GPU gpuwatch_job_info,
# gpuwatch_training_last_progress_timestamp_seconds and, on the GPUs of the hung jobs,
# gpuwatch_gpu_stall_start_timestamp_seconds; per (job, host), labels {training_job, Hostname}
# and the scrape's, gpuwatch_training_steps_per_second and the node's per-job means
# gpuwatch_job_gpu_sm_clock_hertz, _utilization_ratio and _power_watts (the straggler rule reads
# only those), so 2 + 4/GPUS + the stalled share series per GPU; next to dcgm-exporter's default
# counters (../shared/data/dcgm-exporter/default-counters.csv, with dcgm-exporter's labels) for
# comparison (no rule reads them). Jobs of JOB_NODES nodes, HUNG of them hung (the last step
# HANG_AGO s ago, one GPU stalled first, the others within seconds on every host), one more with
# a throttled host (SM clock 1400 vs 1980 MHz) for the straggler rule (pending: its for is 10m).
# Not run in CI.
#
#   benches/fleet.sh                       # NODES=1000 GPUS=8: 220 k series, ~3 min, 7 GB in /tmp
#   NODES=20 benches/fleet.sh              # a quick look
#
# Needs promtool and prometheus (2.42), python3 and curl. Environment: NODES (1000), GPUS (8),
# JOB_NODES (8), HUNG (3), HISTORY (1800 s of samples), STEP (15 s between samples), HANG_AGO
# (900), EVAL_INTERVAL (5s), EVALS (8 group evaluations to wait for: GpuwatchJobHang fires),
# RULES (the rules file), DCGM_COUNTERS (the counter list), PROMETHEUS / PROMTOOL (the
# binaries), KEEP=1 (keep the work directory).
# The history is written as OpenMetrics and backfilled (promtool tsdb create-blocks-from
# openmetrics) up to now; while that takes more than 2 × STEP, the time it took is written and
# backfilled again, so the data ends < 30 s before Prometheus starts and the rules' [2m] windows
# see every series. The data lies in blocks, not in the head block a scraping Prometheus would
# read the last hours from: the selectors' work (postings, chunks over the windows) is of the
# same kind. Prints the sanity counts (series the rules' selectors find, ALERTS), series per GPU
# (gpuwatch's fleet additions, per GPU and per job and host, vs dcgm-exporter's default
# counters), the group's evaluation time (last, median and p99 of Prometheus's own summary;
# each rule's last time, and its expression alone through the query API), Prometheus's RSS,
# and a last line for a benchmark table.
set -euo pipefail
cd "$(dirname "$0")/.."
nodes=${NODES:-1000}
gpus=${GPUS:-8}
job_nodes=${JOB_NODES:-8}
hung=${HUNG:-3}
history=${HISTORY:-1800}
step=${STEP:-15}
hang_ago=${HANG_AGO:-900}
eval_interval=${EVAL_INTERVAL:-5s}
evals=${EVALS:-8}
rules=$(realpath "${RULES:-examples/prometheus/gpuwatch-fleet-rules.yml}")
counters=$(realpath "${DCGM_COUNTERS:-../shared/data/dcgm-exporter/default-counters.csv}")
prometheus=${PROMETHEUS:-prometheus}
promtool=${PROMTOOL:-promtool}
work=$(mktemp -d /tmp/gpuwatch-fleet.XXXXXX)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  if [ "${KEEP:-0}" = 1 ]; then echo "work directory kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
"$promtool" check rules "$rules" > /dev/null
secs() { date +%s.%N; }
elapsed() { python3 -c "print(f'{$(secs) - $1:.1f}')"; }

# 1. The generator: one window [START, END] of the fleet's series as OpenMetrics, one family
# after the other, each series in time order; the same fleet and values for every window.
cat > "$work/gen.py" <<'PY'
import hashlib, random, sys
out, counters = sys.argv[1], sys.argv[2]
nodes, gpus, job_nodes, hung, step, anchor, history, hang_ago, start, end = map(int, sys.argv[3:])
ts = list(range(start, end + 1, step))
t_base = anchor - history
hang_at = anchor - hang_ago
# dcgm-exporter's default counters: the uncommented "NAME, type, help" lines that are not labels.
dcgm = []
for line in open(counters):
    f = [x.strip() for x in line.split(",")]
    if line.strip() and not line.startswith("#") and len(f) >= 2 and f[1] != "label":
        dcgm.append(f[0])
njobs = (nodes + job_nodes - 1) // job_nodes
strag_job = 1 if njobs > 1 else 0
cand = [j for j in range(njobs) if j != strag_job]
hung_n = min(hung, len(cand) - 1 if len(cand) > 1 else len(cand))
hung_jobs = {cand[i * len(cand) // hung_n] for i in range(hung_n)} if hung_n else set()
def job_of(n): return n // job_nodes
def job_size(j): return min(job_nodes, nodes - j * job_nodes)
strag_node = strag_job * job_nodes + job_size(strag_job) // 2
rng = random.Random(42)
jit = [rng.uniform(-1, 1) for _ in range(4099)]
def job_id(j): return str(400000 + j * 37)
def host(n): return f"node-{n + 1:04d}"
def uuid(n, g):
    h = hashlib.md5(f"{host(n)}/{g}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
def base(n, g):  # the labels both kinds share (job and instance as the example scrape config sets them)
    return f'Hostname="{host(n)}",gpu="{g}",UUID="{uuid(n, g)}",instance="{host(n)}",job="gpuwatch"'
def dcgm_labels(n, g):
    return (base(n, g) + f',device="nvidia{g}",modelName="NVIDIA H100 80GB HBM3",'
            f'pci_bus_id="00000000:{0x18 + g * 0x10:02X}:00.0",DCGM_FI_DRIVER_VERSION="535.183.01"')
def fmt(v): return repr(v) if isinstance(v, int) else f"{v:.3f}".rstrip("0").rstrip(".")
cache = {}
def block(key, value_at, times=ts):
    """Every sample of one series, with \\0 where the name and labels go."""
    b = cache.get(key)
    if b is None:
        b = cache[key] = "".join(f"\0 {fmt(value_at(t))} {t}\n" for t in times)
    return b
def e(ph, t): return jit[(ph * 131 + t // step) % len(jit)]

def sps(j):  # a job's steps per second, lower behind a throttled host
    s = 0.5 + (int(job_id(j)) % 17) / 10
    return s * 0.6 if j == strag_job else s
def gpu_kind(n):
    j = job_of(n)
    return "hung" if j in hung_jobs else "slow" if n == strag_node else "waiting" if j == strag_job else "ok"
def dcgm_value(name, kind, ph):
    busy = {"ok": 1, "slow": 1, "waiting": 0.6, "hung": 1}[kind]
    hung_ = kind == "hung"
    return lambda t: {
        "DCGM_FI_DEV_SM_CLOCK": 1400 if kind == "slow" else 1980,
        "DCGM_FI_DEV_MEM_CLOCK": 2619,
        "DCGM_FI_DEV_MEMORY_TEMP": round(45 + 5 * busy + 2 * e(ph, t)),
        "DCGM_FI_DEV_GPU_TEMP": round(40 + 25 * busy + 3 * e(ph, t)),
        "DCGM_FI_DEV_POWER_USAGE": (240 if hung_ else 330 if kind == "slow" else 620 * busy) + 25 * e(ph, t),
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": int(9.1e9 + ph * 1e7 + (t - t_base) * 500e3),
        "DCGM_FI_DEV_GPU_UTIL": 100 if hung_ or kind == "slow" else round(min(100, 92 * busy + 5 * e(ph, t))),
        "DCGM_FI_DEV_MEM_COPY_UTIL": 0 if hung_ else round(35 * busy + 5 * e(ph, t)),
        "DCGM_FI_DEV_FB_FREE": 4310, "DCGM_FI_DEV_FB_USED": 76650, "DCGM_FI_DEV_FB_RESERVED": 547,
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": int(3.5e12 + ph * 1e9 + (t - t_base) * (0 if hung_ else 2e9)),
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.99 if hung_ else max(0, 0.85 * busy + 0.05 * e(ph, t)),
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0 if hung_ else max(0, 0.45 * busy + 0.05 * e(ph, t)),
        "DCGM_FI_PROF_DRAM_ACTIVE": 0.01 if hung_ else max(0, 0.3 * busy + 0.05 * e(ph, t)),
        "DCGM_FI_PROF_PCIE_TX_BYTES": max(0, round(2.1e8 + 4e7 * e(ph, t))),
        "DCGM_FI_PROF_PCIE_RX_BYTES": max(0, round(3.3e8 + 4e7 * e(ph, t))),
    }.get(name, 0)
def job_mean(name, kind, ph):  # a node's per-job means over the job's GPUs there (5-min means: smooth)
    return lambda t: {
        "gpuwatch_job_gpu_sm_clock_hertz": (1.4e9 if kind == "slow" else 1.98e9) + 2e6 * e(ph, t),
        "gpuwatch_job_gpu_utilization_ratio": {"ok": 0.95 + 0.01 * e(ph, t), "slow": 0.99, "waiting": 0.6 + 0.01 * e(ph, t),
                                               "hung": 1}[kind],
        "gpuwatch_job_gpu_power_watts": {"ok": 690, "slow": 450, "waiting": 420, "hung": 240}[kind] + 5 * e(ph, t),
    }[name]
def progress(j):  # the time of the GPU's last step (the last before the hang)
    period = 1 / sps(j)
    return lambda t: int(min(t, hang_at) / period) * period if j in hung_jobs else int(t / period) * period
def steps(j):
    s = sps(j)
    return lambda t: 0 if (j in hung_jobs and t >= hang_at) else s * (1 + 0.02 * e(j, t))
def stall_start(n, g):  # one GPU first (the job's 4th host, GPU 5), its host's others 1-2 s later, other hosts 3+ s
    j = job_of(n)
    h, first = n - j * job_nodes, (3 % job_size(j), 5 % gpus)
    if (h, g) == first:
        return float(hang_at)
    if h == first[0]:
        return hang_at + 1.2 + 0.1 * g
    return hang_at + 3 + 0.5 * h + 0.1 * g

per_gpu = ["gpuwatch_job_info", "gpuwatch_training_last_progress_timestamp_seconds",
           "gpuwatch_gpu_stall_start_timestamp_seconds"]
per_host = ["gpuwatch_training_steps_per_second", "gpuwatch_job_gpu_sm_clock_hertz",
            "gpuwatch_job_gpu_utilization_ratio", "gpuwatch_job_gpu_power_watts"]
fleet = per_gpu + per_host
seen = [t for t in ts if t >= hang_at + 60]  # a node exports a stall once it noticed it
count = {}
with open(out, "w", buffering=1 << 22) as f:
    for name in fleet + dcgm:
        f.write(f"# TYPE {name} gauge\n")
        count[name] = 0
        for n in range(nodes):
            j = job_of(n)
            tj = f'training_job="{job_id(j)}"'
            if name in per_host:  # one series per job and node (a node runs one job here)
                labels = f'{tj},Hostname="{host(n)}",instance="{host(n)}",job="gpuwatch"'
                if name == "gpuwatch_training_steps_per_second":
                    b = block(("steps", j), steps(j))
                else:
                    kind, ph = gpu_kind(n), n % 61
                    b = block((name, kind, ph), job_mean(name, kind, ph))
                f.write(b.replace("\0", f"{name}{{{labels}}}"))
                count[name] += 1
                continue
            for g in range(gpus):
                if name == "gpuwatch_job_info":
                    labels, b = f'{tj},job_source="slurm",{base(n, g)},slurm_job="{job_id(j)}"', block("one", lambda t: 1)
                elif name == "gpuwatch_training_last_progress_timestamp_seconds":
                    labels, b = f"{tj},{base(n, g)}", block(("progress", j), progress(j))
                elif name == "gpuwatch_gpu_stall_start_timestamp_seconds":
                    if j not in hung_jobs or not seen:
                        continue
                    v = stall_start(n, g)
                    labels, b = f'{tj},{base(n, g)},signature="nccl_hang"', block(("stall", v), lambda t: v, seen)
                else:
                    kind, ph = gpu_kind(n), (n * gpus + g) % 61
                    labels, b = dcgm_labels(n, g), block((name, kind, ph), dcgm_value(name, kind, ph))
                f.write(b.replace("\0", f"{name}{{{labels}}}"))
                count[name] += 1
    f.write("# EOF\n")
if start == t_base:
    print(f"jobs {njobs} of {job_nodes} nodes; hung (last step {hang_ago} s before the first window's end): "
          f"{', '.join(job_id(j) for j in sorted(hung_jobs)) or 'none'}; straggler: job {job_id(strag_job)} on {host(strag_node)}")
    print(f"series: gpuwatch fleet {sum(count[n] for n in fleet)} ({sum(count[n] for n in per_gpu)} per GPU, "
          f"{sum(count[n] for n in per_host)} per job and host), dcgm-exporter {sum(count[n] for n in dcgm)} "
          f"({len(dcgm)} default counters); {len(ts)} samples a series in the history")
PY
gen() {  # START END FILE
  python3 "$work/gen.py" "$3" "$counters" "$nodes" "$gpus" "$job_nodes" "$hung" "$step" "$anchor" \
    "$history" "$hang_ago" "$1" "$2"
}
anchor=$(($(date +%s) / step * step))
start=$((anchor - history)) end=$anchor round=1
while :; do
  t0=$(secs)
  gen "$start" "$end" "$work/fleet.om"
  gen_s=$(elapsed "$t0") size=$(du -h "$work/fleet.om" | cut -f1)
  t0=$(secs)
  "$promtool" tsdb create-blocks-from openmetrics --quiet "$work/fleet.om" "$work/data" > "$work/backfill.log"
  rm -f "$work/fleet.om"
  echo "round $round: $(((end - start) / step + 1)) samples a series, $size of OpenMetrics generated in $gen_s s, backfilled in $(elapsed "$t0") s"
  next=$(($(date +%s) / step * step))
  [ $((next - end)) -ge $((2 * step)) ] && [ "$round" -lt 5 ] || break
  start=$((end + step)) end=$next round=$((round + 1))
done
data_end=$end
echo "data: $(ls -d "$work"/data/*/ | wc -l) blocks, $(du -sh "$work/data" | cut -f1); it ends $(($(date +%s) - data_end)) s ago"

# 2. Prometheus on the blocks with the fleet rules and nothing to scrape.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url=http://127.0.0.1:$port
cat > "$work/prometheus.yml" <<CFG
global:
  evaluation_interval: $eval_interval
rule_files:
  - $rules
CFG
t0=$(secs)
"$prometheus" --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
  --web.listen-address="127.0.0.1:$port" --log.level=warn > "$work/prometheus.log" 2>&1 &
pid=$!
until curl -sf "$url/-/ready" > /dev/null; do
  kill -0 "$pid" 2>/dev/null || { cat "$work/prometheus.log"; exit 1; }
  sleep 0.5
done
echo "prometheus ready on :$port in $(elapsed "$t0") s"
# JSON from Prometheus's API, read by python lines over `d` (its "data").
json_py() { python3 -c "import json, sys; d = json.load(sys.stdin)['data']
$1"; }
query() { curl -sfG "$url/api/v1/query" --data-urlencode "query=$1" ${2:+--data-urlencode "stats=all"}; }
value() { query "$1" | json_py "print(d['result'][0]['value'][1] if d['result'] else 0)"; }
iterations() {
  curl -sf "$url/metrics" | awk '/^prometheus_rule_group_iterations_total/ {if (n++ == 0 || $2 < m) m = $2} END {print m + 0}'
}
until [ "$(iterations)" -ge "$evals" ]; do
  kill -0 "$pid" 2>/dev/null || { cat "$work/prometheus.log"; exit 1; }
  sleep 1
done
curl -sf "$url/metrics" > "$work/metrics.txt"
rss=$(awk '/^VmRSS/ {print int($2 / 1024)}' "/proc/$pid/status")
hwm=$(awk '/^VmHWM/ {print int($2 / 1024)}' "/proc/$pid/status")
echo "after $evals evaluations the data ended $(($(date +%s) - data_end)) s ago (the rules' windows: 2m)"

# 3. What the rules saw.
echo "the selectors find: job_info $(value 'count(gpuwatch_job_info)'), progress $(value 'count(gpuwatch_training_last_progress_timestamp_seconds)'), stall $(value 'count(last_over_time(gpuwatch_gpu_stall_start_timestamp_seconds[2m]))'); per job and host: steps/s $(value 'count(gpuwatch_training_steps_per_second)'), SM clock $(value 'count(gpuwatch_job_gpu_sm_clock_hertz)'), utilization $(value 'count(gpuwatch_job_gpu_utilization_ratio)'), power $(value 'count(gpuwatch_job_gpu_power_watts)')"
query 'count by (alertname, alertstate) (ALERTS)' | json_py "
print('ALERTS:', ', '.join('%s %s %s' % (x['metric']['alertname'], x['metric']['alertstate'], x['value'][1]) for x in d['result']) or 'none')"
curl -sf "$url/api/v1/alerts" | json_py "
shown = {}
for a in d['alerts']:  # at most 2 of each alert
    k = a['labels']['alertname']
    shown[k] = shown.get(k, 0) + 1
    if shown[k] <= 2:
        print('  %s %s: %s' % (k, a['state'], a['annotations'].get('summary', '')[:160]))"
curl -sf "$url/api/v1/rules" | json_py "
for g in d['groups']:
    for r in g['rules']:
        print('%s\t%s\t%d\t%s' % (r['name'], r['evaluationTime'], len(r.get('alerts', [])), r['health'] + (' ' + r['lastError'] if r.get('lastError') else '')))
        open('$work/expr.' + r['name'], 'w').write(r['query'])" > "$work/rules.tsv"
while IFS=$'\t' read -r name secs_ n health; do
  expr_ms=$(query "$(cat "$work/expr.$name")" stats | json_py "print('%.1f' % (d['stats']['timings']['evalTotalTime'] * 1e3))")
  printf '  rule %-21s last %8.1f ms (the expression alone %s ms), %d alerts, health %s\n' \
    "$name" "$(python3 -c "print($secs_ * 1e3)")" "$expr_ms" "$n" "$health"
done < "$work/rules.tsv"

# 4. What they cost.
total=$(value 'count({__name__=~".+"})')
gw=$(value 'count({__name__=~"gpuwatch_.+"})')
gwh=$(value 'count({__name__=~"gpuwatch_training_steps_per_second|gpuwatch_job_gpu_.+"})')
gws=$(value 'count({__name__="gpuwatch_gpu_stall_start_timestamp_seconds"})')
dc=$(value 'count({__name__=~"DCGM_.+"})')
python3 - "$work/metrics.txt" "$nodes" "$gpus" "$total" "$gw" "$gwh" "$gws" "$dc" "$rss" "$hwm" <<'PY'
import sys
path, nodes, gpus, total, gw, gwh, gws, dc, rss, hwm = sys.argv[1:]
nodes, gpus, total, gw, gwh, gws, dc = int(nodes), int(gpus), int(total), int(gw), int(gwh), int(gws), int(dc)
m = {}
for line in open(path):
    if line.startswith("prometheus_rule_"):
        k, v = line.rsplit(" ", 1)
        m[k] = float(v)
def get(prefix, extra=""):
    v = [x for k, x in m.items() if k.startswith(prefix + "{") and extra in k]
    return sum(v) if v else float("nan")
last = get("prometheus_rule_group_last_duration_seconds") * 1e3
p50 = get("prometheus_rule_group_duration_seconds", 'quantile="0.5"') * 1e3
p99 = get("prometheus_rule_group_duration_seconds", 'quantile="0.99"') * 1e3
its = get("prometheus_rule_group_iterations_total")
missed = get("prometheus_rule_group_iterations_missed_total")
fails = get("prometheus_rule_evaluation_failures_total")
n = nodes * gpus
print(f"nodes {nodes}, GPUs {n}, series {total}: per GPU {gw / n:.2f} gpuwatch fleet ({(gw - gwh - gws) / n:.2f} per GPU "
      f"+ {gwh / n:.2f} per job and host (4/GPUS = {4 / gpus:.2f}) + {gws / n:.2f} stalled) + {dc / n:.2f} dcgm-exporter default counters")
print(f"rule group: {its:.0f} evaluations ({missed:.0f} missed, {fails:.0f} failed); last {last:.1f} ms, median {p50:.1f} ms, p99 {p99:.1f} ms")
print(f"prometheus RSS {rss} MiB (peak {hwm} MiB)")
print(f"| fleet rules | {nodes} nodes × {gpus} GPUs | {total} series ({gw / n:.2f} gpuwatch + {dc / n:.2f} dcgm per GPU) "
      f"| group eval median {p50:.1f} ms, last {last:.1f} ms | Prometheus RSS {rss} MiB |")
PY
