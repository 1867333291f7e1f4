#!/usr/bin/env python3
"""Times two commands side by side, as whole processes: A and B run in turn (A B A B ...),
each run a fresh process started without a shell, its output read through a pipe (or thrown
away with --devnull), after one warm-up run of each. Prints, for each command, the min, median
and max of its wall time and its CPU time (user + system, the kernel's own accounting of the
finished child, from wait4); then the median of the pairs' ratios A/B, which
stays meaningful when the machine's speed drifts during the runs (docs/BENCHMARKS.md quotes
medians).

    benches/pair.py -n 30 --vs "curl -sf -o /dev/null URL" -- target/release/gpuwatch query ...
"""
import argparse
import os
import shlex
import statistics
import subprocess
import sys
import time


def run(argv, devnull):
    out = subprocess.DEVNULL if devnull else subprocess.PIPE
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    if not devnull:
        while p.stdout.read(1 << 16):
            pass
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit(f"{argv[0]} exited with {code}")
    return wall, ru.ru_utime + ru.ru_stime


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=20, help="pairs (default 20)")
    ap.add_argument("--vs", required=True, help="command B, split as a shell splits words")
    ap.add_argument("--devnull", action="store_true", help="send both outputs to /dev/null")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- command A and its arguments")
    a = ap.parse_args()
    cmd_a = a.command[1:] if a.command[:1] == ["--"] else a.command
    cmd_b = shlex.split(a.vs)
    if not cmd_a:
        ap.error("command A is missing (after --)")
    run(cmd_a, a.devnull)
    run(cmd_b, a.devnull)
    res = {"A": [], "B": []}
    for _ in range(a.n):
        res["A"].append(run(cmd_a, a.devnull))
        res["B"].append(run(cmd_b, a.devnull))
    for k in "AB":
        for i, name in ((0, "wall"), (1, "cpu")):
            v = sorted(r[i] * 1e3 for r in res[k])
            print(f"{k} {name:4} ms {v[0]:10.1f} {statistics.median(v):10.1f} {v[-1]:10.1f}")
    for i, name in ((0, "wall"), (1, "cpu")):
        ratios = [x[i] / y[i] for x, y in zip(res["A"], res["B"]) if y[i] > 0]
        if ratios:
            print(f"A/B {name:4} median of {len(ratios)} pairs {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
