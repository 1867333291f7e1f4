"""The lost-GPU campaign: GPU 2 falls off the bus mid-run (its NVML calls answer GPU_IS_LOST;
every other episode the driver also reports XID 79 for it) and comes back after a reset (the
calls answer again, same UUID), episode after episode, while the daemon runs.

The harness appends to its scenario copy, per episode, a `[[fault]]` (`gpu = 2`, every
symbol, `error = "GPU_IS_LOST"`) lasting --lost s of scenario time, and on odd episodes an
`[[event]]` with XID 79 at its start. The sampler quarantines the GPU at once and probes it
--probe-after s later (`lost_probe_after`, wall time; default: the daemon's, 60 s); the GPU
is back by then, so the probe ends the quarantine. Rules: `busy` and the default
`gpu_lost`. Checks per episode: one `gpu_lost` event and one `gpu_recovered` after it; GPU
2's rows between them say `lost` with no values (no made-up readings), one per tick; the
other GPUs keep every tick (no status but `ok`, no hole over --max-hole-ms); `gpu_lost`
fired once per episode and resolved after the recovery; and, after a drain, every
transition reached the three receivers (0 lost, 0 duplicates, order kept).
"""

import subprocess
import time

from common import RigError, log
from counting import delivery, panics, verdict
from rig import RULES, Rig

RULES_LOST = RULES + """
[[rule]]
name = "gpu_lost"
severity = "critical"
condition = "last(lost[1m])"
summary = "GPU {gpu} ({model}) on {host} is lost: it fell off the bus or needs a reset"
"""


def campaign_lost(args):
    rig = Rig(args, "lost")
    problems = []
    try:
        lead, period = args.before, args.period
        starts = [lead + k * period for k in range(args.episodes)]
        extra = ""
        for k, a in enumerate(starts):
            extra += '\n[[fault]]\ngpu = 2\nsymbol = "*"\nfrom = "%gs"\nuntil = "%gs"\nerror = "GPU_IS_LOST"\n' % (
                a,
                a + args.lost,
            )
            if k % 2 == 1:
                extra += '\n[[event]]\ngpu = 2\nat = "%gs"\nxid = 79\n' % a
        # The flapping ends a few seconds after the last episode's recovery: then the drain.
        end_sim = starts[-1] + period
        rig.write_scenario(flap_until_s=int(end_sim), extra=extra)
        rig.start_receivers()
        rig.write_config(rules=RULES_LOST)
        if args.probe_after:
            with open(rig.config) as f:
                text = f.read()
            with open(rig.config, "w") as f:
                f.write('lost_probe_after = "%gs"\n' % args.probe_after + text)
            check = subprocess.run([rig.gpuwatch, "run", "--check", "--config", rig.config], capture_output=True, text=True)
            if check.returncode != 0:
                raise RigError("config refused: %s%s" % (check.stdout, check.stderr))
        rig.start_daemon()
        wall = lambda t_sim: rig.start_ms / 1000.0 + t_sim / rig.speed  # noqa: E731
        while time.time() < wall(end_sim):
            if rig.daemon.poll() is not None:
                raise RigError("daemon exited (see %s)" % rig.dir)
            time.sleep(0.5)
        drained = rig.drain()
        res = rig.count()
        events = rig.query(
            "SELECT ts_ms, kind FROM gpu_events WHERE gpu_index = 2 AND kind IN ('gpu_lost', 'gpu_recovered') "
            "ORDER BY ts_ms"
        )
        fired = rig.query(
            "SELECT fired_ms, resolved_ms FROM alerts WHERE rule = 'gpu_lost' AND gpu_index = 2 ORDER BY fired_ms"
        )
        other_fired = rig.query("SELECT count(*) FROM alerts WHERE rule = 'gpu_lost' AND gpu_index != 2")[0][0]
        rig.sigterm()
        problems += res["problems"]
        problems += ["daemon panicked: " + b for b in panics(rig)[:3]]
        if other_fired:
            problems.append("gpu_lost fired %d time(s) for another GPU" % other_fired)
        recovered = lost_rows = worst_hole = bad_rows = ticks_other = 0
        for k, a in enumerate(starts):
            lo, hi = int(wall(a) * 1000) - 1000, int(wall(a + period) * 1000)
            mine = [(t, kind) for t, kind in events if lo <= t < hi]
            kinds = [kind for _t, kind in mine]
            if kinds != ["gpu_lost", "gpu_recovered"]:
                problems.append("episode %d: events %s, expected gpu_lost then gpu_recovered" % (k, kinds))
                continue
            recovered += 1
            t_lost, t_back = mine[0][0], mine[1][0]
            ep_alerts = [(f, r) for f, r in fired if lo <= f < hi]
            if len(ep_alerts) != 1:
                problems.append("episode %d: gpu_lost fired %d time(s)" % (k, len(ep_alerts)))
            elif ep_alerts[0][1] is None or ep_alerts[0][1] < t_back:
                problems.append("episode %d: gpu_lost not resolved after the recovery: %s" % (k, ep_alerts[0]))
            # GPU 2 while quarantined: `lost` rows with no values, one per tick.
            rows = rig.query(
                "SELECT ts_ms, status, util_gpu_pct, mem_used_bytes, temp_c, power_mw FROM gpu_samples "
                "WHERE gpu_index = 2 AND ts_ms > ? AND ts_ms < ? ORDER BY ts_ms",
                (t_lost, t_back),
            )
            lost_rows += len(rows)
            for r in rows:
                if r[1] != "lost" or any(v is not None for v in r[2:]):
                    bad_rows += 1
            expected = (t_back - t_lost) // 200 - 1
            if len(rows) < expected - 2:
                problems.append("episode %d: %d lost rows for %d ticks" % (k, len(rows), expected))
            # The other GPUs through the episode.
            for g in (0, 1, 3):
                got = rig.query(
                    "SELECT ts_ms, status FROM gpu_samples WHERE gpu_index = ? AND ts_ms BETWEEN ? AND ? "
                    "ORDER BY ts_ms",
                    (g, t_lost - 1000, t_back + 1000),
                )
                ticks_other += len(got)
                bad = [t for t, st in got if st != "ok"]
                if bad:
                    problems.append("episode %d: GPU %d has %d row(s) not ok" % (k, g, len(bad)))
                ts = [t for t, _s in got]
                worst_hole = max([b - a for a, b in zip(ts, ts[1:])] + [worst_hole])
        if bad_rows:
            problems.append("%d lost row(s) of GPU 2 with a status other than lost or made-up values" % bad_rows)
        if worst_hole > args.max_hole_ms:
            problems.append("a hole of %d ms between two ticks of another GPU" % worst_hole)
        if len(fired) != args.episodes:
            problems.append("gpu_lost fired %d time(s) for %d episodes" % (len(fired), args.episodes))
        # Every gpu_lost alert reached every receiver (count() checks all alerts; here by name).
        res["problems"] = problems
        ok = drained and not problems and res["lost"] == 0 and res["dups"] == 0 and res["order_ok"]
        print(
            "chaos lost: %d episodes of GPU 2 lost %gs (XID 79 in %d), gpu_lost fired %d and resolved "
            "%d, recovered by probe %d/%d, %d lost rows without values (%d bad), other GPUs %d ticks "
            "(longest gap %d ms), %s: %s"
            % (
                args.episodes,
                args.lost,
                args.episodes // 2,
                len(fired),
                sum(1 for _f, r in fired if r is not None),
                recovered,
                args.episodes,
                lost_rows,
                bad_rows,
                ticks_other,
                worst_hole,
                delivery(res, drained),
                "PASS" if ok else "FAIL",
            ),
            flush=True,
        )
        log("events: %s" % events)
        return verdict(ok, res)
    finally:
        rig.close()
