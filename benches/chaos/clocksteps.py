"""The clock-step campaign: the daemon's wall clock jumps back an hour and forward again while
it runs (libfaketime, Debian's `faketime` package: LD_PRELOAD with FAKETIME_TIMESTAMP_FILE
rewritten mid-run, FAKETIME_NO_CACHE=1, FAKETIME_DONT_FAKE_MONOTONIC=1: only the wall clock
steps; the monotonic clock does not).

The simulated GPUs run on the fake library's own clock, from its init on the monotonic clock
(GPUWATCH_FAKE_START_MS unset), so they do not step. The wall clock's offset goes through
--steps (default `-3600,0,3600,0`: back an hour, back to true time, an hour ahead, back to
true time), one every --every s after --before s; then (--restart S) the daemon is restarted
with the wall clock where the last step left it (an hour behind the newest stored tick) and
runs S s more. Rules: `busy`, and `held` (`max(util_gpu[5s]) > 1`: true from
the first ticks while the GPUs flap, `for` = --hold s) whose firing must come --hold s of monotonic time after the start:
not cut short by a forward step, not stretched by a backward one. A thread reads every GPU's
sample times every 0.3 s.

Checks: the daemon survives every step and the restart; no row is written with a time at or
before one already stored for its GPU (no reordering, no overwrite; the restart included); ticks keep coming through the
steps (per GPU at least --min-tick-share of the ticks the monotonic clock allows); rollups
are sane (samples per minute at most a minute of ticks, averages within 0..100); `held`
fires between --hold and --hold + 3 s after the start; after a drain, every transition
reached the receivers (0 lost, 0 duplicates, order kept).
"""

import glob
import os
import threading
import time

from common import RigError, log
from counting import delivery, panics, verdict
from rig import RULES, Rig

FAKETIME_LIBS = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1")) + sorted(
    glob.glob("/usr/lib/*/faketime/libfaketime.so.1")
)


def rules_held(hold):
    return RULES + (
        '\n[[rule]]\nname = "held"\nseverity = "warning"\ncondition = "max(util_gpu[5s]) > 1"\n'
        'for = "%gs"\nsummary = "GPU {gpu} held"\n' % hold
    )


class Watcher:
    """Polls the database: per GPU, rows that appear with a time at or before the newest
    time already seen (out of order)."""

    def __init__(self, rig):
        self.rig = rig
        self.seen = {}
        self.newest = {}
        self.out_of_order = []
        self.polls = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                rows = self.rig.query("SELECT gpu_id, ts_ms FROM samples")
            except Exception:  # noqa: BLE001 - a busy read is retried
                time.sleep(0.1)
                continue
            self.polls += 1
            per = {}
            for g, t in rows:
                per.setdefault(g, set()).add(t)
            for g, ts in per.items():
                new = ts - self.seen.get(g, set())
                top = self.newest.get(g)
                if top is not None:
                    bad = sorted(t for t in new if t <= top)
                    if bad:
                        self.out_of_order.append((g, top, bad[:3], len(bad)))
                self.seen[g] = ts
                if ts:
                    self.newest[g] = max(ts)
            time.sleep(0.3)

    def start(self):
        self._t.start()

    def stop(self):
        self._stop.set()
        self._t.join()


def campaign_clock(args):
    lib = next((p for p in FAKETIME_LIBS if os.path.exists(p)), None)
    if not lib:
        raise RigError("libfaketime not found (apt-get install faketime)")
    steps = [int(s) for s in args.steps.split(",")]
    # Alertmanager judges an alert resolved by its endsAt, on its own clock: with the daemon's
    # host an hour ahead at the end (the last step), it would keep every resolved alert active
    # for that hour, by design. Slack and email carry the state in the message.
    rig = Rig(args, "clock", alertmanager=False)
    problems = []
    try:
        stamp = os.path.join(rig.dir, "faketime")
        with open(stamp, "w") as f:
            f.write("+0\n")
        total = args.before + len(steps) * args.every + args.after
        # Unanchored: scenario time 0 is the daemon's NVML init, on the monotonic clock.
        rig.write_scenario(flap_until_s=int(total))
        rig.start_receivers()
        rig.write_config(rules=rules_held(args.hold))
        base_env = rig.env

        def env():
            e = base_env()
            e.pop("GPUWATCH_FAKE_START_MS", None)
            e["LD_PRELOAD"] = lib
            e["FAKETIME_TIMESTAMP_FILE"] = stamp
            e["FAKETIME_NO_CACHE"] = "1"
            e["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
            return e

        rig.env = env
        t0 = time.monotonic()
        rig.start_daemon()
        watcher = Watcher(rig)
        watcher.start()
        held_at = None
        step_at = [args.before + i * args.every for i in range(len(steps))]
        done = 0
        while time.monotonic() - t0 < total:
            now = time.monotonic() - t0
            if done < len(steps) and now >= step_at[done]:
                with open(stamp + ".tmp", "w") as f:
                    f.write("%+d\n" % steps[done])
                os.replace(stamp + ".tmp", stamp)
                log("wall clock offset %+d s at %.1f s" % (steps[done], now))
                done += 1
            if rig.daemon.poll() is not None:
                problems.append("the daemon exited (%s) %.1f s in" % (rig.daemon.returncode, now))
                break
            if held_at is None:
                try:
                    if rig.query("SELECT count(*) FROM alerts WHERE rule = 'held' AND fired_ms IS NOT NULL")[0][0]:
                        held_at = now
                        log("held fired at %.1f s" % now)
                except Exception:  # noqa: BLE001 - retried next round
                    pass
            time.sleep(0.2)
        elapsed = time.monotonic() - t0
        per_gpu = rig.query("SELECT gpu_id, count(*) FROM samples GROUP BY gpu_id")
        restarted = ""
        if args.restart and rig.daemon.poll() is None:
            # A restart with the wall clock where the last step left it: behind the newest
            # stored tick when that step went back. The watcher goes on checking the order.
            rig.sigterm()
            rig.write_scenario(flap_until_s=1)  # idle from the new start (its own time 0)
            rig.start_daemon()
            time.sleep(args.restart)
            restarted = ", restarted %gs" % args.restart
            if rig.daemon.poll() is not None:
                problems.append("the daemon exited after the restart (%s)" % rig.daemon.returncode)
        drained = rig.daemon.poll() is None and rig.drain()
        watcher.stop()
        res = rig.count() if rig.daemon.poll() is None else {"problems": [], "lost": -1, "dups": -1, "order_ok": False, "alerts": 0, "transitions": 0}
        rig.sigterm()
        problems += res["problems"]
        problems += ["daemon panicked: " + b for b in panics(rig)[:3]]
        for g, top, bad, n in watcher.out_of_order[:5]:
            problems.append("GPU row %d: %d row(s) written at or before the newest stored %d: %s" % (g, n, top, bad))
        possible = elapsed / 0.2
        fewest = min((n for _g, n in per_gpu), default=0)
        if fewest < args.min_tick_share * possible:
            problems.append("a GPU has %d rows for %.0f ticks' worth of monotonic time" % (fewest, possible))
        bad_rollups = rig.query(
            "SELECT count(*) FROM gpu_rollups WHERE samples > 300 OR util_gpu_pct_avg < 0 OR util_gpu_pct_avg > 100"
        )[0][0]
        if bad_rollups:
            problems.append("%d rollup row(s) out of bounds" % bad_rollups)
        n_rollups = rig.query("SELECT count(*) FROM gpu_rollups")[0][0]
        if held_at is None:
            problems.append("`held` never fired")
        elif not (args.hold <= held_at <= args.hold + 3):
            problems.append("`held` (for %gs) fired %.1f s after the start" % (args.hold, held_at))
        res["problems"] = problems
        ok = drained and not problems and res["lost"] == 0 and res["dups"] == 0 and res["order_ok"]
        print(
            "chaos clock: wall clock stepped %s s%s, daemon %s, %d rows out of order, fewest rows per GPU "
            "%d of %.0f ticks, %d rollup rows (%d out of bounds), `held` (for %gs) fired after %s s of "
            "monotonic time, %s: %s"
            % (
                ",".join("%+d" % s for s in steps),
                restarted,
                "alive" if not any("exited" in p for p in problems) else "EXITED",
                sum(n for *_x, n in watcher.out_of_order),
                fewest,
                possible,
                n_rollups,
                bad_rollups,
                args.hold,
                "%.1f" % held_at if held_at is not None else "never",
                delivery(res, drained),
                "PASS" if ok else "FAIL",
            ),
            flush=True,
        )
        return verdict(ok, res)
    finally:
        rig.close()
