"""Counting at the receivers against the database's outbox: lost, duplicates (per trial),
order per group, and Alertmanager's own last word per label set."""

import os
import sys
import time

from common import log


class Counting:
    """Mixed into the Rig: needs `query`, `receivers` and `am`."""


    def expected(self):
        """receiver -> [(alert id, kind)] in outbox order, and the problems between the alerts
        table and the outbox (a reported transition without its message)."""
        # The `outbox` table, not the `notifications` view: the order promise is per group.
        rows = self.query(
            "SELECT id, alert_id, receiver, kind, status, group_key FROM outbox "
            "WHERE alert_id IS NOT NULL AND kind IN ('firing', 'resolved') ORDER BY id"
        )
        per = {}
        statuses = {}
        self.group_of = {}
        for _nid, aid, recv, kind, status, group in rows:
            per.setdefault(recv, []).append((aid, kind))
            self.group_of[(recv, aid, kind)] = group
            statuses[status] = statuses.get(status, 0) + 1
        problems = []
        alerts = self.query(
            "SELECT alert_id, fired_ms, resolved_ms FROM alerts WHERE reported = 1 "
            "AND fired_ms IS NOT NULL"
        )
        for recv in [r.log.name for r in self.receivers]:
            have = set(per.get(recv, []))
            for aid, _f, resolved in alerts:
                if (aid, "firing") not in have:
                    problems.append("%s: alert %d fired but no firing message queued" % (recv, aid))
                if resolved is not None and (aid, "resolved") not in have:
                    problems.append("%s: alert %d resolved but no resolved message queued" % (recv, aid))
        return per, statuses, problems, len(alerts)

    def count(self, windows=None):
        """Compares arrivals with the outbox. `windows`: [(start, end)] wall times of trials,
        to attribute duplicate messages to trials."""
        per, statuses, problems, n_alerts = self.expected()
        res = {
            "alerts": n_alerts,
            "transitions": sum(len(v) for v in per.values()),
            "lost": 0,
            "dups": 0,
            "dup_msgs": 0,
            "am_resends": 0,
            "max_dup_per_trial": 0,
            "order_ok": True,
            "problems": list(problems),
            "statuses": statuses,
        }
        if statuses.get("pending") or statuses.get("dead"):
            res["problems"].append("outbox not drained: %s" % statuses)
        per_trial = {}
        for r in self.receivers:
            want = per.get(r.log.name, [])
            wanted = set(want)
            seen = {}
            first = []
            fresh = []  # per message, the items arriving for the first time
            for t, items in r.log.snapshot():
                dup_in_msg = False
                fresh.append([])
                for it in items:
                    if isinstance(it[0], str):
                        continue
                    if it not in wanted:
                        res["problems"].append("%s: got %s, which the outbox never queued" % (r.log.name, it))
                        continue
                    seen[it] = seen.get(it, 0) + 1
                    if seen[it] == 1:
                        first.append(it)
                        fresh[-1].append(it)
                    elif r is self.am and it[1] == "firing" and (it[0], "resolved") not in seen:
                        # Alertmanager gets every firing alert again each `resend_every` and
                        # at each start (state re-asserted; identical alerts merge there):
                        # by design, counted apart.
                        res["am_resends"] += 1
                    else:
                        res["dups"] += 1
                        dup_in_msg = True
                        if it[1] == "firing" and (it[0], "resolved") in seen:
                            res["order_ok"] = False
                            res["problems"].append(
                                "%s: alert %d firing again after its resolved" % (r.log.name, it[0])
                            )
                if dup_in_msg:
                    res["dup_msgs"] += 1
                    trial = None
                    for i, (a, b) in enumerate(windows or []):
                        if a <= t < b:
                            trial = i
                    key = (trial, r.log.name)
                    per_trial[key] = per_trial.get(key, 0) + 1
            lost = [it for it in want if it not in seen]
            res["lost"] += len(lost)
            for it in lost[:5]:
                res["problems"].append("%s: lost %s" % (r.log.name, it))
            # Per group, messages leave in enqueue order: a message's place is its earliest
            # new row (the group's later rows may ride in it: one message carries a group's
            # changes, firing first), so those places must rise message after message within
            # a group. Across groups each group's `group_interval` decides (as in
            # Alertmanager), so no order is promised there.
            index = {it: i for i, it in enumerate(want)}
            last_place = {}
            for new_items in fresh:
                new = [index[it] for it in new_items]
                if not new:
                    continue
                place = min(new)
                group = self.group_of.get((r.log.name,) + want[place])
                if place < last_place.get(group, -1):
                    res["order_ok"] = False
                    res["problems"].append(
                        "%s: a message with outbox row %s arrived after one with row %s "
                        "of the same group" % (r.log.name, want[place], want[last_place[group]])
                    )
                last_place[group] = place
            # Per alert: its firing before its resolved.
            pos = {it: i for i, it in enumerate(first)}
            for aid, kind in want:
                if kind == "resolved" and (aid, "firing") in pos and (aid, "resolved") in pos:
                    if pos[(aid, "resolved")] < pos[(aid, "firing")]:
                        res["order_ok"] = False
                        res["problems"].append("%s: alert %d resolved before firing" % (r.log.name, aid))
        res["max_dup_per_trial"] = max(per_trial.values(), default=0)
        res["per_trial"] = per_trial
        if self.am is None:
            return res
        for (trial, recv), n in sorted(per_trial.items(), key=str):
            log("duplicates: trial %s, %s: %d message(s)" % (trial, recv, n))
        # Alertmanager's own word: every label set it notified ends `resolved`, and every
        # label set gpuwatch kept firing longer than Alertmanager's group_wait + group_interval
        # (1 s + 1 s here) was notified. An episode shorter than that may fire and resolve
        # between two of its flushes, and Alertmanager then never notifies it (nothing to say:
        # it was resolved before anyone was told) - that is its design, not a loss. It may
        # lag: its group timers run on a loaded machine too, so wait up to 30 s; a pass
        # returns as soon as the condition holds.
        all_sets = set(
            self.query(
                "SELECT DISTINCT rule, CAST(gpu_index AS TEXT) FROM alerts "
                "WHERE reported = 1 AND fired_ms IS NOT NULL"
            )
        )
        long_sets = set(
            self.query(
                "SELECT DISTINCT rule, CAST(gpu_index AS TEXT) FROM alerts "
                "WHERE reported = 1 AND fired_ms IS NOT NULL "
                "AND (resolved_ms IS NULL OR resolved_ms - fired_ms > 2500)"
            )
        )
        deadline = time.time() + 30
        while True:
            with self.am.webhook_lock:
                hook = dict(self.am.webhook)
            missing = sorted(
                k
                for k in all_sets
                if (k in hook and hook[k] != "resolved") or (k in long_sets and k not in hook)
            )
            if not missing or time.time() > deadline:
                break
            time.sleep(0.2)
        res["am_webhook_missing"] = len(missing)
        if missing:
            res["problems"].append(
                "alertmanager's webhook: %d label set(s) not notified or not last notified resolved, e.g. %s"
                % (len(missing), missing[:5])
            )
        return res



def panics(rig):
    with open(os.path.join(rig.dir, "daemon.log"), "rb") as f:
        text = f.read().decode("utf-8", "replace")
    return [l for l in text.splitlines() if "panicked" in l]


def delivery(res, drained, dups="dups"):
    """The delivery part of a campaign's summary line: alerts, transitions, lost, duplicates
    (`res[dups]`), order, and whether the drain finished."""
    return "%d alerts, %d transitions x receivers, %d lost, %d duplicates, order %s%s" % (
        res["alerts"],
        res["transitions"],
        res["lost"],
        res[dups],
        "kept" if res["order_ok"] else "BROKEN",
        "" if drained else ", NOT DRAINED",
    )


def verdict(ok, res):
    """The campaign's exit status; on a failure, its problems on stderr."""
    if not ok:
        for p in res["problems"][:20]:
            print("  " + p, file=sys.stderr)
    return 0 if ok else 1


# --------------------------------------------------------------------------- campaigns
