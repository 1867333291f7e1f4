"""The blocked-driver campaign: every NVML call of GPU 3 blocks for seconds, episode after
episode; the other GPUs must keep their deadline."""

import os
import sys
import threading
import time
import urllib.request

from common import RigError, log
from counting import panics, verdict
from rig import Rig


def thread_names(pid):
    """name -> count of a process's threads (lanes as `gpuwatch-lane`)."""
    names = {}
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, t)) as f:
                n = f.read().strip()
        except OSError:
            continue
        n = "gpuwatch-lane" if n.startswith("gpuwatch-lane") else n
        names[n] = names.get(n, 0) + 1
    return names


def proc_figures(pid, spread=2.0, lanes_settle=20.0):
    """(threads, lanes, RSS in KiB) of a process, from /proc. Waits up to `lanes_settle` s for
    the NVML lanes to be one again (a lane split off by a stall, or by a scheduling hiccup of
    a loaded machine, merges back after 60 ticks in time), then counts the other threads at
    their most over `spread` s (some come and go: HTTP connections)."""
    end = time.time() + lanes_settle
    while thread_names(pid).get("gpuwatch-lane", 0) > 1 and time.time() < end:
        time.sleep(0.2)
    others, lanes = 0, 0
    end = time.time() + spread
    while True:
        names = thread_names(pid)
        lanes = max(lanes, names.get("gpuwatch-lane", 0))
        others = max(others, sum(v for k, v in names.items() if k != "gpuwatch-lane"))
        if time.time() >= end:
            break
        time.sleep(0.1)
    log("threads now: %s" % sorted(names.items()))
    rss = 0
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    return others + lanes, lanes, rss


class Prober:
    """Polls /healthz and /metrics every 0.25 s in a thread: answers, failures, worst latency."""

    def __init__(self, port):
        self.port = port
        self.stop_flag = threading.Event()
        self.results = []  # (wall time, path, ok, seconds)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop_flag.is_set():
            for path in ("/healthz", "/metrics"):
                t = time.time()
                try:
                    with urllib.request.urlopen(
                        "http://127.0.0.1:%d%s" % (self.port, path), timeout=2
                    ) as r:
                        r.read()
                        ok = r.status == 200
                except urllib.error.HTTPError as e:
                    # /healthz answers 503 when no tick completed lately: an answer, but a
                    # failed check here (the other GPUs keep ticking).
                    ok = False
                    e.read()
                except OSError:
                    ok = False
                self.results.append((t, path, ok, time.time() - t))
            self.stop_flag.wait(0.25)

    def start(self):
        self.thread.start()

    def stop(self):
        self.stop_flag.set()
        self.thread.join()


def campaign_blocked(args):
    rig = Rig(args, "blocked")
    try:
        # Episode k: GPU 3's NVML calls made in [lead + k*period, +1s) of scenario time
        # block `block` wall seconds, then answer.
        lead, period = 6.0, args.period
        windows_sim = [(lead + k * period, lead + k * period + 1.0) for k in range(args.episodes)]
        faults = "".join(
            '\n[[fault]]\ngpu = 3\nsymbol = "*"\nfrom = "%gs"\nuntil = "%gs"\nblock = "%gs"\n'
            % (a, b, args.block)
            for a, b in windows_sim
        )
        rig.write_scenario(extra=faults)
        rig.start_receivers()
        rig.write_config()
        rig.start_daemon()
        pid = rig.daemon.pid
        rig.wait_serving()  # the prober starts once the daemon serves
        prober = Prober(rig.http_port)
        prober.start()
        wall = lambda t_sim: rig.start_ms / 1000.0 + t_sim / rig.speed  # noqa: E731
        figures = []
        for k, (a, _b) in enumerate(windows_sim):
            # Measure just before each episode (the previous one long over).
            time.sleep(max(0.0, wall(a) - 2.5 - time.time()))
            if time.time() > wall(a) - 1.0:
                raise RigError("episode %d began before its measurement: --period too short" % k)
            if rig.daemon.poll() is not None:
                raise RigError("daemon exited (see %s)" % rig.dir)
            figures.append(proc_figures(pid, lanes_settle=0.0))
            log("episode %d: threads %d (lanes %d), RSS %d KiB" % (k, *figures[-1]))
        # After the last block: its split-off lane merges back after MERGE_AFTER (60) ticks
        # answered in time (12 s at 200 ms).
        time.sleep(max(0.0, wall(windows_sim[-1][0]) + args.block + 12 + 2 - time.time()))
        figures.append(proc_figures(pid))
        log("after the last: threads %d (lanes %d), RSS %d KiB" % figures[-1])
        end_wall = time.time()
        prober.stop()
        rig.write_scenario(flap_until_s=rig.flap_end_s(), extra=faults)
        rig.sigterm()
        rig.start_daemon()
        drained = rig.drain()
        res = rig.count()
        rig.sigterm()
        res["problems"] += ["daemon panicked: " + b for b in panics(rig)[:3]]

        start_ms = rig.start_ms
        end_ms = int(end_wall * 1000)
        # Other GPUs: every tick ok while GPU 3 is blocked, no hole between ticks. (Missed
        # ticks outside the blocks are reported: on a loaded machine a debug build can miss
        # one for every GPU.)
        others_bad = 0
        for a, _b in windows_sim:
            lo = int(wall(a) * 1000)
            others_bad += rig.query(
                "SELECT count(*) FROM gpu_samples WHERE gpu_index < 3 AND status != 'ok' "
                "AND ts_ms BETWEEN ? AND ?",
                (lo, lo + int(args.block * 1000) + 1000),
            )[0][0]
        others_bad_all = rig.query(
            "SELECT count(*) FROM gpu_samples WHERE gpu_index < 3 AND status != 'ok' "
            "AND ts_ms BETWEEN ? AND ?",
            (start_ms, end_ms),
        )[0][0]
        worst_hole = 0
        for g in range(3):
            ts = [
                t
                for (t,) in rig.query(
                    "SELECT ts_ms FROM gpu_samples WHERE gpu_index = ? AND ts_ms BETWEEN ? AND ? "
                    "ORDER BY ts_ms",
                    (g, start_ms, end_ms),
                )
            ]
            worst_hole = max([b - a for a, b in zip(ts, ts[1:])] + [worst_hole])
        # GPU 3: a gap recorded in each episode (deadline_missed rows after its start).
        gaps = 0
        for a, _b in windows_sim:
            lo = int(wall(a) * 1000)
            hi = lo + int(args.block * 1000) + 2000
            n = rig.query(
                "SELECT count(*) FROM gpu_samples WHERE gpu_index = 3 AND status = 'deadline_missed' "
                "AND ts_ms BETWEEN ? AND ?",
                (lo, hi),
            )[0][0]
            gaps += 1 if n > 0 else 0
        # Alerts evaluated during the blocks: transitions of GPUs 0-2 inside the blocked spans.
        during = 0
        for a, _b in windows_sim:
            lo = int(wall(a) * 1000)
            hi = lo + int(args.block * 1000)
            during += rig.query(
                "SELECT (SELECT count(*) FROM alerts WHERE gpu_index < 3 AND fired_ms BETWEEN ?1 AND ?2)"
                " + (SELECT count(*) FROM alerts WHERE gpu_index < 3 AND resolved_ms BETWEEN ?1 AND ?2)",
                (lo, hi),
            )[0][0]
        answers = [x for x in prober.results if x[0] < end_wall]
        failed = [x for x in answers if not x[2]]
        slowest = max((x[3] for x in answers), default=0.0)
        # The baseline: before the second episode (the first warms up: the RSS of the start
        # is given back after 30 ticks, SQLite's cache fills), or the first if only one.
        base_threads, _base_lanes, base_rss = figures[1] if len(figures) > 2 else figures[0]
        last_threads, last_lanes, last_rss = figures[-1]
        thread_growth = last_threads - base_threads
        rss_growth = last_rss - base_rss
        ok = (
            drained
            and res["lost"] == 0
            and res["order_ok"]
            and not res["problems"]
            and others_bad <= args.max_missed_per_episode * 3 * args.episodes
            and worst_hole <= args.max_hole_ms
            and gaps == args.episodes
            and during > 0
            and answers
            and not failed
            and thread_growth <= 0
            and last_lanes == 1
            and rss_growth <= args.max_rss_growth_kib
        )
        print(
            "chaos blocked: %d episodes of GPU 3 blocked %gs, other GPUs %d missed ticks during "
            "the blocks (%d in the whole run; longest gap between ticks %d ms), gaps recorded %d/%d, %d transitions during the "
            "blocks, %d lost, http %d/%d answered (slowest %.0f ms), threads %d -> %d, "
            "RSS %d -> %d KiB: %s"
            % (
                args.episodes,
                args.block,
                others_bad,
                others_bad_all,
                worst_hole,
                gaps,
                args.episodes,
                during,
                res["lost"],
                len(answers) - len(failed),
                len(answers),
                slowest * 1000,
                base_threads,
                last_threads,
                base_rss,
                last_rss,
                "PASS" if ok else "FAIL",
            ),
            flush=True,
        )
        for x in failed[:5] if not ok else []:
            print("  %s failed at %.1f s" % (x[1], x[0] - rig.start_ms / 1000.0), file=sys.stderr)
        return verdict(ok, res)
    finally:
        rig.close()
