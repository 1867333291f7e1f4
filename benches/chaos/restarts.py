"""Campaigns that stop the daemon or its receivers: kill -9 at random moments, and a
receiver outage."""

import random
import time

from common import RigError, log
from counting import panics, verdict
from rig import Rig



def campaign_kill9(args):
    rng = random.Random(args.seed)
    rig = Rig(args, "kill9")
    try:
        rig.start_receivers()
        rig.write_config()
        windows = []
        kills_at = []
        for i in range(args.trials):
            t0 = time.time()
            rig.start_daemon()
            wait = rng.uniform(0, args.max_run)
            time.sleep(wait)
            if rig.daemon.poll() is not None:
                raise RigError("daemon exited by itself in trial %d (see %s)" % (i, rig.dir))
            rig.kill9()
            kills_at.append(wait)
            windows.append((t0, time.time() + 0.5))
            log("trial %d: killed after %.2fs" % (i, wait))
        # The last run: flapping ends a little ahead, then everything resolves and drains.
        rig.write_scenario(flap_until_s=rig.flap_end_s())
        rig.start_daemon()
        drained = rig.drain()
        res = rig.count(windows)
        rig.sigterm()
        bad = panics(rig)
        res["problems"] += ["daemon panicked: " + b for b in bad[:3]]
        ok = (
            drained
            and res["lost"] == 0
            and res["max_dup_per_trial"] <= 1
            and res["order_ok"]
            and not res["problems"]
            and res["transitions"] > 0
        )
        print(
            "chaos kill9: %d trials (seed %d), %d alerts, %d transitions x receivers, %d lost, "
            "%d duplicates (max %d/trial/receiver), order %s%s, "
            "%d alertmanager re-sends of firing alerts: %s"
            % (
                args.trials,
                args.seed,
                res["alerts"],
                res["transitions"],
                res["lost"],
                res["dup_msgs"],
                res["max_dup_per_trial"],
                "kept" if res["order_ok"] else "BROKEN",
                "" if drained else ", NOT DRAINED",
                res["am_resends"],
                "PASS" if ok else "FAIL",
            ),
            flush=True,
        )
        return verdict(ok, res)
    finally:
        rig.close()


def self_alerts(log_):
    out = []
    for _t, items in log_.snapshot():
        out += [(k, s) for k, s in items if isinstance(k, str)]
    return out


def campaign_outage(args):
    rig = Rig(args, "outage")
    try:
        rig.start_receivers()
        rig.write_config('backlog_alert_after = "%s"' % args.backlog_after)
        rig.start_daemon()
        time.sleep(args.before)
        rig.slack.stop()
        rig.smtp.stop()
        down_at = time.time()
        log("slack and smtp down")
        time.sleep(args.down)
        # Backlog measured while down: Slack's and email's oldest pending message.
        backlog = rig.query(
            "SELECT receiver, count(*) FROM notifications WHERE status = 'pending' GROUP BY receiver"
        )
        rig.slack.start()
        rig.smtp.start()
        up_at = time.time()
        log("slack and smtp up; backlog %s" % backlog)
        time.sleep(args.after)
        rig.write_scenario(flap_until_s=rig.flap_end_s())
        rig.sigterm()
        rig.start_daemon()
        drained = rig.drain()
        res = rig.count()
        rig.sigterm()
        res["problems"] += ["daemon panicked: " + b for b in panics(rig)[:3]]
        am_self = self_alerts(rig.am.log)
        fired = ("self:gpuwatch_notify_backlog", "firing") in am_self
        resolved = ("self:gpuwatch_notify_backlog", "resolved") in am_self
        if not fired:
            res["problems"].append("gpuwatch_notify_backlog never fired on alertmanager: %s" % am_self)
        if not resolved:
            res["problems"].append("gpuwatch_notify_backlog never resolved on alertmanager: %s" % am_self)
        backlog_peak = sum(n for r, n in backlog if r in ("slack", "email"))
        ok = (
            drained
            and res["lost"] == 0
            and res["dups"] == 0
            and res["order_ok"]
            and fired
            and resolved
            and backlog_peak > 0
            and not res["problems"]
        )
        print(
            "chaos outage: slack+smtp down %.0fs wall (%.0fs simulated), %d messages backlogged, "
            "%d alerts, %d transitions x receivers, %d lost, %d duplicates, order %s%s, "
            "backlog alert %s on alertmanager: %s"
            % (
                up_at - down_at,
                (up_at - down_at) * rig.speed,
                backlog_peak,
                res["alerts"],
                res["transitions"],
                res["lost"],
                res["dups"],
                "kept" if res["order_ok"] else "BROKEN",
                "" if drained else ", NOT DRAINED",
                "fired+resolved" if fired and resolved else ("fired" if fired else "MISSING"),
                "PASS" if ok else "FAIL",
            ),
            flush=True,
        )
        return verdict(ok, res)
    finally:
        rig.close()
