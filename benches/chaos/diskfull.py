"""The disk-full campaign: the daemon's database lives on a small filesystem (a tmpfs of
--size, mounted by the harness: root needed) that the harness fills to the last byte while
alerts flap, then empties again.

Timeline (wall seconds): the daemon runs --before s; a filler file takes every free byte
of the filesystem; the daemon runs --full s on a full disk; the filler is deleted (space
returns) and the daemon runs --after s more; then the flapping ends and everything drains.

Checks: the daemon keeps running (and answers /healthz) through it all; it says so in its
log (the full disk reported, at most --max-log-lines lines about it, not one per tick) and
raises the `gpuwatch_database_full` self alert at the receivers; samples are written again
after space returns (rows after the filler went); alert state and notifications are not lost:
after the drain every transition in the outbox reached the three receivers (0 lost, at most
one duplicate per receiver: a send whose mark could not be written), order kept.
"""

import errno
import os
import shutil
import subprocess
import time

from common import RigError, log
from counting import delivery, panics, verdict
from restarts import self_alerts
from rig import Rig

FULL_RULE = "self:gpuwatch_database_full"


def fill(path):
    """Writes `path` until the filesystem is full; returns the bytes written."""
    n = 0
    chunk = b"\0" * 65536
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                f.write(chunk)
                n += len(chunk)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    break
                chunk = chunk[: len(chunk) // 2]
    return n


def log_lines(rig, since, words):
    with open(os.path.join(rig.dir, "daemon.log"), "rb") as f:
        text = f.read().decode("utf-8", "replace")
    return [l for l in text.splitlines()[since:] if any(w in l.lower() for w in words)]


def campaign_diskfull(args):
    if os.geteuid() != 0:
        raise RigError("the disk-full campaign mounts a tmpfs: run it as root")
    rig = Rig(args, "diskfull")
    disk = os.path.join(rig.dir, "disk")
    os.makedirs(disk)
    mounted = False
    problems = []
    try:
        m = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s" % args.size, "tmpfs", disk], capture_output=True, text=True)
        if m.returncode != 0:
            raise RigError("cannot mount a tmpfs: %s" % m.stderr.strip())
        mounted = True
        rig.db = os.path.join(disk, "gpuwatch.db")
        rig.start_receivers()
        rig.write_config()
        rig.start_daemon()
        time.sleep(args.before)
        with open(os.path.join(rig.dir, "daemon.log"), "rb") as f:
            lines_before = len(f.read().splitlines())
        oldest_before = rig.query("SELECT min(ts_ms) FROM samples")[0][0]
        filler = os.path.join(disk, "filler")
        filled = fill(filler)
        full_at = time.time()
        log("disk full: %d bytes of filler" % filled)
        healthz = []
        while time.time() < full_at + args.full:
            if rig.daemon.poll() is not None:
                problems.append("the daemon exited (%s) on the full disk" % rig.daemon.returncode)
                break
            healthz.append(rig_healthz(rig))
            time.sleep(0.5)
        rows_full, oldest_full, newest_full = rig.query("SELECT count(*), min(ts_ms), max(ts_ms) FROM samples")[0]
        if (newest_full or 0) < (full_at + args.full / 2) * 1000:
            problems.append("no sample written in the second half of the full period")
        if oldest_full is None or oldest_full <= oldest_before:
            problems.append("the oldest samples were not deleted while the disk was full")
        said = log_lines(rig, lines_before, ("full", "no space", "disk"))
        os.remove(filler)
        freed_at = time.time()
        log("space returned")
        time.sleep(args.after)
        alive = rig.daemon.poll() is None
        if not alive:
            problems.append("the daemon exited (%s)" % rig.daemon.returncode)
            raise RigError("daemon exited (see %s)" % rig.dir)
        newest = rig.query("SELECT max(ts_ms) FROM samples")[0][0] or 0
        if newest < freed_at * 1000 + 1000:
            problems.append("no sample written after space returned (newest %d)" % newest)
        rows_after = rig.query("SELECT count(*) FROM samples")[0][0]
        rig.write_scenario(flap_until_s=rig.flap_end_s())
        rig.sigterm()
        rig.start_daemon()
        drained = rig.drain()
        res = rig.count()
        rig.sigterm()
        problems += res["problems"]
        problems += ["daemon panicked: " + b for b in panics(rig)[:3]]
        if not said:
            problems.append("the daemon's log never mentions the full disk")
        elif len(said) > args.max_log_lines:
            problems.append("%d log lines about the full disk (at most %d)" % (len(said), args.max_log_lines))
        alerts = [r.log.name for r in rig.receivers if any(k == FULL_RULE for k, _s in self_alerts(r.log))]
        if len(alerts) != len(rig.receivers):
            problems.append("gpuwatch_database_full reached %s only" % (alerts or "no receiver"))
        if not all(healthz):
            problems.append("/healthz failed %d of %d times on the full disk" % (healthz.count(False), len(healthz)))
        res["problems"] = problems
        ok = drained and not problems and res["lost"] == 0 and res["max_dup_per_trial"] <= 1 and res["order_ok"]
        print(
            "chaos diskfull: tmpfs of %s filled (%d bytes of filler) for %gs while alerts flap, daemon %s, "
            "%d log lines about it, self alert at %d/%d receivers, /healthz %d/%d, oldest samples deleted "
            "%s, %d samples at the end of the full period (newest %.1f s before its end), %d after space returned, %s: %s"
            % (
                args.size,
                filled,
                args.full,
                "alive" if alive else "EXITED",
                len(said),
                len(alerts),
                len(rig.receivers),
                healthz.count(True),
                len(healthz),
                "yes" if oldest_full and oldest_full > oldest_before else "NO",
                rows_full,
                (full_at + args.full) - (newest_full or 0) / 1000.0,
                rows_after,
                delivery(res, drained, "dup_msgs"),
                "PASS" if ok else "FAIL",
            ),
            flush=True,
        )
        return verdict(ok, res)
    finally:
        rig.kill9()
        if mounted:
            if args.keep:
                shutil.copytree(disk, os.path.join(rig.dir, "disk-copy"), ignore=shutil.ignore_patterns("filler"))
            subprocess.run(["umount", "-l", disk], capture_output=True)
        rig.close()


def rig_healthz(rig):
    import urllib.request

    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/healthz" % rig.http_port, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False
