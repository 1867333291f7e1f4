"""The SIGHUP storm: the rules file rewritten in place before each of many SIGHUPs."""

import os
import random
import signal
import time

from counting import panics, verdict
from blocked import Prober
from rig import RULES, Rig


RULES_HOT = RULES + """
[[rule]]
name = "hot"
severity = "critical"
condition = "util_gpu > 90"
summary = "GPU {gpu} flat out"
"""

RULES_BROKEN = RULES + """
[[rule]]
name = "broken"
severity = "warning"
condition = "util_gpu >"
"""


def campaign_sighup(args):
    rng = random.Random(args.seed)
    rig = Rig(args, "sighup")
    rules = os.path.join(rig.dir, "rules.toml")
    try:
        rig.start_receivers()
        rig.write_config()
        rig.start_daemon()
        rig.wait_serving()  # the prober starts once the daemon serves
        prober = Prober(rig.http_port)
        prober.start()
        time.sleep(args.before)
        storm_start = time.time()
        kinds = {"hot": 0, "plain": 0, "broken": 0}
        for _ in range(args.hups):
            # The rules file changes under the daemon, written in place (a reload may read a
            # torn file: it must keep the last good rules), then SIGHUP.
            kind = rng.choice(["hot", "plain", "broken"])
            kinds[kind] += 1
            text = {"hot": RULES_HOT, "plain": RULES, "broken": RULES_BROKEN}[kind]
            with open(rules, "w") as f:
                f.write(text)
            if rig.daemon.poll() is not None:
                break
            rig.daemon.send_signal(signal.SIGHUP)
            time.sleep(rng.uniform(0, args.max_gap_ms / 1000.0))
        storm_end = time.time()
        alive_after_storm = rig.daemon.poll() is None
        # Then for sure (the storm's reloads take whatever file is there at the next commit):
        # `busy` alone, then a broken file, which is refused (`busy` alone stays: `hot` must
        # not fire in between), then both rules (`hot` must fire).
        for text in (RULES, RULES_BROKEN):
            with open(rules, "w") as f:
                f.write(text)
            if alive_after_storm:
                rig.daemon.send_signal(signal.SIGHUP)
            if text is RULES:
                plain_hup = time.time()
            time.sleep(2.5 if text is RULES else 4.0)
        # The last word: both rules, one more SIGHUP; `hot` must fire after it.
        with open(rules, "w") as f:
            f.write(RULES_HOT)
        final_hup = time.time()
        if alive_after_storm:
            rig.daemon.send_signal(signal.SIGHUP)
        time.sleep(args.after)
        prober.stop()
        hot_after = 0
        res_extra = []
        if alive_after_storm and rig.daemon.poll() is None:
            hot_after = rig.query(
                "SELECT count(*) FROM alerts WHERE rule = 'hot' AND fired_ms > ?",
                (int(final_hup * 1000) + 1500,),
            )[0][0]
            hot_while_off = rig.query(
                "SELECT count(*) FROM alerts WHERE rule = 'hot' AND fired_ms BETWEEN ? AND ?",
                # A reload is taken at the next commit and evaluates the ticks held for it
                # (up to `commit_interval`, 1 s): the margins are 1.5 s.
                (int(plain_hup * 1000) + 1500, int(final_hup * 1000) - 1500),
            )[0][0]
            if hot_while_off:
                res_extra.append(
                    "`hot` fired %d time(s) while the last good rules were `busy` alone"
                    % hot_while_off
                )
            # The scenario is read at NVML init: a restart takes the end of the flapping.
            rig.write_scenario(flap_until_s=rig.flap_end_s())
            rig.sigterm()
            rig.start_daemon()
            drained = rig.drain()
        else:
            drained = False
        res = rig.count()
        rig.sigterm()
        res["problems"] += res_extra
        res["problems"] += ["daemon panicked: " + b for b in panics(rig)[:3]]
        with open(os.path.join(rig.dir, "daemon.log"), "rb") as f:
            text = f.read().decode("utf-8", "replace")
        reloaded = text.count("rules reloaded")
        refused = text.count("rule reload failed")
        missed = rig.query(
            "SELECT count(*) FROM gpu_samples WHERE status != 'ok' AND ts_ms BETWEEN ? AND ?",
            (int(storm_start * 1000), int(storm_end * 1000)),
        )[0][0]
        answers = [x for x in prober.results]
        failed = [x for x in answers if not x[2]]
        ok = (
            alive_after_storm
            and drained
            and res["lost"] == 0
            and res["dups"] == 0
            and res["order_ok"]
            and not res["problems"]
            and hot_after > 0
            and reloaded > 0
            and refused > 0
            and missed == 0
            and answers
            and not failed
        )
        print(
            "chaos sighup: %d SIGHUPs in %.1fs (rules file rewritten before each: %d with `hot`, "
            "%d without, %d broken), %d reloads, %d refused, daemon %s, %d missed ticks, "
            "`hot` fired %d time(s) after the last reload, %d alerts, %d lost, %d duplicates, "
            "order %s%s, http %d/%d answered: %s"
            % (
                args.hups,
                storm_end - storm_start,
                kinds["hot"],
                kinds["plain"],
                kinds["broken"],
                reloaded,
                refused,
                "alive" if alive_after_storm else "DEAD",
                missed,
                hot_after,
                res["alerts"],
                res["lost"],
                res["dups"],
                "kept" if res["order_ok"] else "BROKEN",
                "" if drained else ", NOT DRAINED",
                len(answers) - len(failed),
                len(answers),
                "PASS" if ok else "FAIL",
            ),
            flush=True,
        )
        return verdict(ok, res)
    finally:
        rig.close()
