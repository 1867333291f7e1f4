#!/usr/bin/env python3
"""Writes the post-mortem benchmark's input: DAYS x GPUS x 1 s of samples, deterministic.

  benches/gen_week.py --days 7 --gpus 8 --smi week.csv --openmetrics week.om

--smi: an `nvidia-smi --query-gpu=timestamp,index,uuid,name,utilization.gpu,memory.used,
memory.total,temperature.gpu,power.draw --format=csv -l 1` log (UTC timestamps; import with
--tz UTC). --openmetrics: the same temperatures as an OpenMetrics file (`gpu_temp{gpu="N"}`,
timestamps in seconds, `# EOF`), for `promtool tsdb create-blocks-from openmetrics`.
"""
import argparse
import datetime as dt

p = argparse.ArgumentParser()
p.add_argument("--days", type=float, default=7)
p.add_argument("--gpus", type=int, default=8)
p.add_argument("--start", type=int, default=1_764_000_000, help="unix seconds of the first sample")
p.add_argument("--smi")
p.add_argument("--openmetrics")
a = p.parse_args()
n = int(a.days * 86400)


def temp(g, t):
    # A slow daily wave, a per-GPU offset and a little deterministic jitter.
    return 55 + (g % 4) * 3 + ((t // 600 + g) % 13) + ((t * 7 + g * 13) % 5)


if a.smi:
    with open(a.smi, "w") as f:
        f.write("timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], "
                "memory.total [MiB], temperature.gpu, power.draw [W]\n")
        base = dt.datetime.fromtimestamp(a.start, dt.timezone.utc)
        uuids = [f"GPU-5e1f0c3a-0000-0000-0000-{g:012d}" for g in range(a.gpus)]
        for i in range(n):
            ts = (base + dt.timedelta(seconds=i)).strftime("%Y/%m/%d %H:%M:%S.000")
            t = a.start + i
            for g in range(a.gpus):
                util = 90 + (t + g) % 10
                f.write(f"{ts}, {g}, {uuids[g]}, NVIDIA H100 80GB HBM3, {util} %, "
                        f"{40000 + (t // 60) % 3000} MiB, 81559 MiB, {temp(g, t)}, "
                        f"{600 + (t + g * 7) % 90}.25 W\n")

if a.openmetrics:
    with open(a.openmetrics, "w") as f:
        for g in range(a.gpus):
            for i in range(n):
                t = a.start + i
                f.write(f'gpu_temp{{gpu="{g}"}} {temp(g, t)} {t}\n')
        f.write("# EOF\n")
