#!/usr/bin/python3
"""gpuwatch soak (issue 14): a simulated week of the whole daemon at high speed, sampled every
simulated hour; one summary line, exit 1 when a check fails (2 when the rig could not run).

    benches/soak.py [--days 7] [--speed 1000] [--max-db-size 256MiB] [--out DIR] [--keep]

The daemon is `gpuwatch demo` (the daemon's own pipeline — sampler, store with its size bound
and retention, every default rule, alerts, the outbox and its receivers, the HTTP listener
with /metrics, remote write — driven by the simulated clock) on a generated scenario: 8 H100s
with 4 processes each whose utilisation, temperature and memory saw up and down over hours
(so gpu_idle, gpu_overheating and memory alerts fire and resolve all week), and a training
job per GPU that hangs for 20 minutes once a simulated day (training_hang). Alerts go to a
webhook receiver and series to a remote-write endpoint, both served here on loopback (they
answer 200/204 and count). Every simulated hour (the demo's `--every 1h` table is the clock)
the harness reads the process's RSS (anon and file), threads and open file descriptors, the
database's and WAL's sizes, and scrapes /metrics and /api/v1/status.

Checks: RSS flat after the first simulated day (least-squares growth over the rest of the week
under 1 MiB, and the slope is reported per simulated day), the database file never above its
bound, the WAL under 64 MiB, threads and file descriptors constant after the first hour (±2
for HTTP connections in flight), every scrape answered, the webhook and remote write received.
Figures of our runs: docs/RELIABILITY.md.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "chaos"))
from common import free_port  # noqa: E402
from receivers import HttpSink  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WAL_MAX = 64 << 20
RSS_GROWTH_MAX_MIB = 1.0


def find(arg, env, names):
    if arg:
        return arg
    if os.environ.get(env):
        return os.environ[env]
    for build in ("release", "debug"):
        for name in names:
            p = os.path.join(ROOT, "target", build, name)
            if os.path.exists(p):
                return p
    sys.exit(f"soak: no {names[0]} under target/ (cargo build --release --workspace)")


def scenario(days):
    """8 H100s, 4 processes each, saws over hours, a daily 20-minute hang per job."""
    out = [
        "[scenario]",
        'name = "soak-week"',
        "tick_ms = 1000",
        f'duration = "{days}d"',
        "seed = 77",
    ]
    for g in range(8):
        out += [
            "",
            "[[gpu]]",
            'model = "H100-SXM-80GB"',
            "[[gpu.timeline]]",
            f'util_gpu = {{ sawtooth = [0, 100], period = "{150 + 23 * g}m", noise = 2 }}',
            f'temp = {{ sawtooth = [35, 92], period = "{290 + 31 * g}m", noise = 0.5 }}',
        ]
    pid = 700000
    for g in range(8):
        for k in range(4):
            pid += 1
            mem = (
                f'{{ sawtooth = [2000, 60000], period = "{360 + 41 * g}m" }}'
                if k == 0
                else "900"
            )
            out += [
                "",
                "[[process]]",
                f"pid = {pid}",
                'name = "python"' if k == 0 else 'name = "pt_data_worker"',
                f'cmdline = "python train.py --rank {g}"' if k == 0 else "",
                f"gpu = {g}",
                f"mem_mib = {mem}",
            ]
    for g in range(8):
        out += [
            "",
            "[[training]]",
            f'job = "soak-{g}"',
            f"gpus = [{g}]",
            "per_gpu = true",
            "steps_per_sec = 1.5",
            "loss = { initial = 3.0, final = 1.2, decay_steps = 50000, noise = 0.02 }",
        ]
        for d in range(int(days) + 1):
            start = d * 1440 + 300 + 97 * g
            if start + 20 > days * 1440:
                break
            out += [
                "[[training.stall]]",
                f'from = "{start}m"',
                f'to = "{start + 20}m"',
                'kind = "hang"',
            ]
    return "\n".join(l for l in out if l is not None) + "\n"


def proc_stats(pid):
    st = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "RssAnon", "RssFile", "Threads"):
                st[k] = int(v.split()[0])
    st["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    return st


def size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def get(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read()
    except Exception as e:  # counted as a failed scrape
        return 0, str(e).encode()


def slope(points):
    """Least-squares slope of (x, y) points."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    den = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--days", type=float, default=7)
    p.add_argument("--speed", type=float, default=1000)
    p.add_argument("--max-db-size", default="256MiB")
    p.add_argument("--gpuwatch")
    p.add_argument("--lib")
    p.add_argument("--out", help="write hours.csv and summary.json here")
    p.add_argument("--keep", action="store_true")
    args = p.parse_args()
    exe = find(args.gpuwatch, "GPUWATCH_BIN", ["gpuwatch"])
    lib = find(args.lib, "GPUWATCH_FAKE_LIB", ["libgpuwatch_fake_nvml.so"])

    work = tempfile.mkdtemp(prefix="gpuwatch-soak-")
    counts = {}

    def count(h, _body):
        counts[h.path] = counts.get(h.path, 0) + 1
        return (204, b"") if h.path.startswith("/rw") else (200, b"ok")

    sink = HttpSink(count)
    sink.start()
    sport = sink.port
    with open(os.path.join(work, "soak.toml"), "w") as f:
        f.write(scenario(args.days))
    with open(os.path.join(work, "gpuwatch.toml"), "w") as f:
        f.write(
            f"""database = "{work}/unused.db"
[notify]
group_by = ["rule", "gpu"]
group_wait = "30s"
group_interval = "5m"
repeat_interval = "4h"
[[notify.webhook]]
name = "hook"
url = "http://127.0.0.1:{sport}/hook"
[[remote_write]]
name = "rw"
url = "http://127.0.0.1:{sport}/rw"
interval = "15s"
"""
        )
    port = free_port()
    db = os.path.join(work, "soak.db")
    cmd = [
        exe, "demo", "--speed", str(args.speed), "--scenario", f"{work}/soak.toml",
        "--db", db, "--every", "1h", "--config", f"{work}/gpuwatch.toml",
        "--listen", f"127.0.0.1:{port}", "--max-db-size", args.max_db_size,
        "--fake-nvml", lib,
    ]
    log = open(os.path.join(work, "demo.err"), "w")
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
    rows, scrape_fail, bound = [], 0, None
    for line in proc.stdout:
        if not line.startswith("── "):
            continue
        hour = int(line.split()[1].split(":")[0])
        try:
            st = proc_stats(proc.pid)
        except OSError:
            break
        m, text = get(port, "/metrics")
        # The bound the daemon applies, as it reports it.
        for line in text.decode(errors="replace").splitlines():
            if line.startswith("gpuwatch_database_size_limit_bytes"):
                bound = float(line.split()[-1])
        a, _ = get(port, "/api/v1/status")
        scrape_fail += (m != 200) + (a != 200)
        rows.append(
            dict(
                hour=hour, wall_s=round(time.monotonic() - started, 1),
                rss_kib=st["VmRSS"], anon_kib=st["RssAnon"], file_kib=st["RssFile"],
                threads=st["Threads"], fds=st["fds"],
                db_bytes=size(db), wal_bytes=size(db + "-wal"),
            )
        )
    rc = proc.wait()
    log.close()
    wall = time.monotonic() - started
    if rc != 0 or len(rows) < args.days * 24 - 1 or len(rows) < 4:
        print(open(os.path.join(work, "demo.err")).read()[-3000:], file=sys.stderr)
        print(f"soak: the demo exited {rc} after {len(rows)} hours; kept {work}")
        return 2

    warm = 24 if args.days >= 2 else int(args.days * 24 / 4)
    later = [r for r in rows if r["hour"] >= warm]
    per_hour = slope([(r["hour"], r["rss_kib"] / 1024) for r in later])
    growth = per_hour * (later[-1]["hour"] - later[0]["hour"])
    anon_day = slope([(r["hour"], r["anon_kib"] / 1024) for r in later]) * 24
    settled = [r for r in rows if r["hour"] >= 1]
    th = (min(r["threads"] for r in settled), max(r["threads"] for r in settled))
    fd = (min(r["fds"] for r in settled), max(r["fds"] for r in settled))
    db_max = max(r["db_bytes"] for r in rows)
    wal_max = max(r["wal_bytes"] for r in rows)
    sink.stop()
    hooks = counts.get("/hook", 0)
    rws = counts.get("/rw", 0)
    checks = {
        "rss flat": growth < RSS_GROWTH_MAX_MIB,
        "db within bound": bound is not None and db_max <= bound,
        "wal small": wal_max < WAL_MAX,
        "threads constant": th[1] - th[0] <= 2,
        "fds constant": fd[1] - fd[0] <= 2,
        "scrapes answered": scrape_fail == 0,
        "receivers reached": hooks > 0 and rws > 0,
    }
    summary = dict(
        days=args.days, speed=args.speed, wall_s=round(wall), hours=len(rows),
        rss_mib_first=round(rows[0]["rss_kib"] / 1024, 1),
        rss_mib_day1=round(later[0]["rss_kib"] / 1024, 1),
        rss_mib_last=round(rows[-1]["rss_kib"] / 1024, 1),
        rss_mib_max=round(max(r["rss_kib"] for r in rows) / 1024, 1),
        rss_slope_mib_per_day=round(per_hour * 24, 3),
        anon_slope_mib_per_day=round(anon_day, 3),
        threads=th, fds=fd, db_max_mib=round(db_max / 2**20, 1),
        bound_mib=round(bound / 2**20, 1) if bound else None, wal_max_mib=round(wal_max / 2**20, 2),
        webhook_messages=hooks, remote_write_requests=rws, scrape_failures=scrape_fail,
        failed=[k for k, ok in checks.items() if not ok],
    )
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "hours.csv"), "w") as f:
            f.write(",".join(rows[0]) + "\n")
            for r in rows:
                f.write(",".join(str(v) for v in r.values()) + "\n")
        with open(os.path.join(args.out, "summary.json"), "w") as f:
            json.dump(summary, f, indent=1)
    verdict = "PASS" if not summary["failed"] else "FAIL (" + ", ".join(summary["failed"]) + ")"
    print(
        f"soak: {args.days:g} simulated days at {args.speed:g}x in {wall:.0f} s, {len(rows)} hours: "
        f"RSS {summary['rss_mib_first']} -> {summary['rss_mib_day1']} (day 1) -> "
        f"{summary['rss_mib_last']} MiB, slope after day 1 {summary['rss_slope_mib_per_day']:+} "
        f"MiB/day (anon {summary['anon_slope_mib_per_day']:+}), threads {th[0]}-{th[1]}, "
        f"fds {fd[0]}-{fd[1]}, db max {summary['db_max_mib']} of {summary['bound_mib']} MiB, "
        f"WAL max {summary['wal_max_mib']} MiB, {hooks} webhook messages, {rws} remote-write "
        f"requests, {scrape_fail} failed scrapes: {verdict}"
    )
    if args.keep:
        print(f"kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if not summary["failed"] else 1


if __name__ == "__main__":
    sys.exit(main())
