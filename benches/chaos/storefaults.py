"""Campaigns on the database file: a damaged database at start (`corrupt`), and two daemons
started on one database (`lock`).

corrupt: each trial runs the daemon a moment (so the file has data and its alerts), stops it
with SIGTERM, damages the file (garbage at a random offset, a truncation at a random length,
or the `-wal` of another database put beside it) and starts the daemon again. The oracle is
SQLite itself, on a copy: the file is damaged when the copy does not open, `PRAGMA
quick_check` finds something, or the copy reads as another application's (the foreign WAL).
Checks: a damaged file is moved aside to `<db>.corrupt-<UTC time>` byte for byte (never
deleted or rewritten), a new database is started and `gpuwatch_database_recovered` arrives at
every receiver, once per move; a file SQLite finds sound is not moved; the daemon runs on
(ticks are written) after every start; no panic.

lock: each trial starts a daemon on the database and, 0..--max-gap s later (0 included: both
at once), a second one with the same config. Checks: exactly one keeps running, the other
exits non-zero within --exit-within s with the message naming the lock, and the survivor
keeps writing ticks; after the last trial the database passes `PRAGMA integrity_check`.
"""

import os
import random
import shutil
import sqlite3
import subprocess
import time

from common import RigError, log
from counting import panics, verdict
from rig import Rig
from restarts import self_alerts

RECOVERED = "self:gpuwatch_database_recovered"
DAMAGES = ("garbage", "truncate", "foreign-wal")


def ticks(rig):
    try:
        return rig.query("SELECT count(*) FROM samples")[0][0]
    except sqlite3.Error:
        return -1


def wait_ticks(rig, more_than, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if rig.daemon.poll() is not None:
            return False
        if ticks(rig) > more_than:
            return True
        time.sleep(0.1)
    return False


def sqlite_says_damaged(db, app_id):
    """What SQLite says about a copy of `db` with its companions: None (sound) or why not."""
    tmp = db + ".oracle"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    copy = os.path.join(tmp, "x.db")
    shutil.copy(db, copy)
    for s in ("-wal", "-shm"):
        if os.path.exists(db + s):
            shutil.copy(db + s, copy + s)
    if os.path.getsize(db) == 0 and not os.path.exists(db + "-wal"):
        return None  # an empty file is a new database to SQLite
    try:
        con = sqlite3.connect(copy, timeout=5)
        try:
            found = [r[0] for r in con.execute("PRAGMA quick_check")]
            if found != ["ok"]:
                return "quick_check: %s" % found[:2]
            got = con.execute("PRAGMA application_id").fetchone()[0]
            if got != app_id:
                return "application_id %d" % got
            return None
        finally:
            con.close()
    except sqlite3.DatabaseError as e:
        return str(e)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def foreign_wal(dirpath):
    """The `-wal` of another database with uncheckpointed writes."""
    other = os.path.join(dirpath, "other.db")
    for s in ("", "-wal", "-shm"):
        if os.path.exists(other + s):
            os.remove(other + s)
    con = sqlite3.connect(other)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA wal_autocheckpoint=0")
    con.execute("CREATE TABLE t (x)")
    con.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(200)])
    con.commit()
    with open(other + "-wal", "rb") as f:
        data = f.read()
    con.close()  # checkpoints and deletes its own WAL; the bytes are kept
    return data


def damage(rig, rng, kind):
    # The main file can be empty: a daemon stopped before its first checkpoint keeps
    # everything in the WAL (randrange(0, 0) would raise).
    size = os.path.getsize(rig.db)
    if kind == "garbage":
        at = rng.randrange(0, size) if size else 0
        n = rng.choice((1, 16, 512, 4096))
        with open(rig.db, "r+b") as f:
            f.seek(at)
            f.write(bytes(rng.randrange(256) for _ in range(n)))
        return "%d garbage bytes at %d of %d" % (n, at, size)
    if kind == "truncate":
        at = rng.randrange(0, size) if size else 0
        os.truncate(rig.db, at)
        return "truncated to %d of %d" % (at, size)
    with open(rig.db + "-wal", "wb") as f:
        f.write(foreign_wal(rig.dir))
    for s in ("-shm",):
        if os.path.exists(rig.db + s):
            os.remove(rig.db + s)
    return "the WAL of another database beside it"


def moved_files(rig):
    base = os.path.basename(rig.db) + ".corrupt-"
    return sorted(
        f for f in os.listdir(rig.dir) if f.startswith(base) and not f.endswith(("-wal", "-shm", "-journal"))
    )


def campaign_corrupt(args):
    rng = random.Random(args.seed)
    rig = Rig(args, "corrupt")
    problems = []
    try:
        rig.start_receivers()
        rig.write_config()
        rig.start_daemon()
        if not wait_ticks(rig, 0, 30):
            raise RigError("the first daemon wrote no tick (see %s)" % rig.dir)
        time.sleep(3)  # alerts fire, the file grows past a few pages
        rig.sigterm()
        app_id = rig.query("PRAGMA application_id")[0][0]
        kinds = {k: 0 for k in DAMAGES}
        damaged = moved = 0
        for i in range(args.trials):
            kind = DAMAGES[i % len(DAMAGES)] if i < len(DAMAGES) else rng.choice(DAMAGES)
            kinds[kind] += 1
            sound_ticks = ticks(rig)
            what = damage(rig, rng, kind)
            oracle = sqlite_says_damaged(rig.db, app_id)
            before = moved_files(rig)
            with open(rig.db, "rb") as f:
                damaged_bytes = f.read()
            log("trial %d: %s; sqlite: %s" % (i, what, oracle or "sound"))
            rig.start_daemon()
            if oracle:
                # The damaged file may still answer a count: wait for the move first.
                deadline = time.time() + 30
                while time.time() < deadline and moved_files(rig) == before and rig.daemon.poll() is None:
                    time.sleep(0.1)
            started = wait_ticks(rig, 0 if oracle else sound_ticks, 30)
            new = [f for f in moved_files(rig) if f not in before]
            if not started:
                problems.append("trial %d (%s): the daemon wrote no tick after the start" % (i, what))
            if oracle:
                damaged += 1
                if len(new) != 1:
                    problems.append("trial %d (%s, %s): %d file(s) moved aside, 1 expected" % (i, what, oracle, len(new)))
                else:
                    moved += 1
                    with open(os.path.join(rig.dir, new[0]), "rb") as f:
                        if f.read() != damaged_bytes:
                            problems.append("trial %d: the moved-aside file %s differs from the damaged one" % (i, new[0]))
                    if not new[0][len(os.path.basename(rig.db) + ".corrupt-") :][:8].isdigit():
                        problems.append("trial %d: moved aside without a timestamp: %s" % (i, new[0]))
            elif new:
                problems.append("trial %d (%s): a file SQLite finds sound was moved aside: %s" % (i, what, new))
            # Each move's alert reaches every receiver before the next trial.
            deadline = time.time() + 20
            while time.time() < deadline:
                got = [sum(1 for k, s in self_alerts(r.log) if k == RECOVERED) for r in rig.receivers]
                if all(n >= moved for n in got):
                    break
                time.sleep(0.2)
            time.sleep(rng.uniform(0, 1))  # the new file grows a little
            rig.sigterm()
            if rig.daemon.returncode not in (0, None):
                problems.append("trial %d: the daemon exited %s" % (i, rig.daemon.returncode))
        got = {r.log.name: sum(1 for k, s in self_alerts(r.log) if k == RECOVERED) for r in rig.receivers}
        for name, n in got.items():
            if n != moved:
                problems.append("%s got gpuwatch_database_recovered %d time(s), %d moves" % (name, n, moved))
        problems += ["daemon panicked: " + b for b in panics(rig)[:3]]
        ok = not problems and damaged > 0
        print(
            "chaos corrupt: %d trials (seed %d; %s), %d damaged per SQLite, %d moved aside "
            "(byte for byte, timestamped), %d sound and kept, 0 deleted, recovered alert at "
            "receivers %s, daemon ran after every start: %s"
            % (
                args.trials,
                args.seed,
                ", ".join("%s %d" % kv for kv in kinds.items()),
                damaged,
                moved,
                args.trials - damaged,
                "/".join("%s %d" % kv for kv in got.items()),
                "PASS" if ok else "FAIL",
            ),
            flush=True,
        )
        return verdict(ok, {"problems": problems})
    finally:
        rig.close()


def campaign_lock(args):
    rng = random.Random(args.seed)
    rig = Rig(args, "lock")
    problems = []
    refused = 0
    try:
        rig.write_config()
        for i in range(args.trials):
            gap = 0.0 if i == 0 else rng.uniform(0, args.max_gap)
            first = rig.start_daemon()
            time.sleep(gap)
            second = subprocess.Popen(
                [rig.gpuwatch, "run", "--config", rig.config],
                env=rig.env(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=rig.dir,
            )
            deadline = time.time() + args.exit_within
            while time.time() < deadline and first.poll() is None and second.poll() is None:
                time.sleep(0.05)
            if (first.poll() is None) == (second.poll() is None):
                problems.append(
                    "trial %d (gap %.2fs): %s" % (i, gap, "both still run" if first.poll() is None else "both exited")
                )
            loser, survivor = (second, first) if second.poll() is not None else (first, second)
            text = ""
            if loser is second:
                text = second.communicate(timeout=10)[0].decode("utf-8", "replace")
            else:
                with open(os.path.join(rig.dir, "daemon.log"), "rb") as f:
                    text = f.read().decode("utf-8", "replace").rsplit("==== start", 1)[-1]
            if loser.returncode in (0, None):
                problems.append("trial %d: the refused daemon exited %s" % (i, loser.returncode))
            elif "holds the lock" not in text or rig.db not in text:
                problems.append("trial %d: no clear message: %r" % (i, text[-300:]))
            else:
                refused += 1
            rig.daemon = survivor
            n = ticks(rig)
            if not wait_ticks(rig, n + 4, 30):
                problems.append("trial %d (gap %.2fs): the running daemon stopped writing ticks" % (i, gap))
            log("trial %d: gap %.2fs, refused %s" % (i, gap, "second" if loser is second else "first"))
            rig.sigterm()
            for p in (first, second):
                if p.poll() is None:
                    p.kill()
                    p.wait()
        check = rig.query("PRAGMA integrity_check")
        if [r[0] for r in check] != ["ok"]:
            problems.append("integrity_check: %s" % check[:3])
        problems += ["daemon panicked: " + b for b in panics(rig)[:3]]
        ok = not problems
        print(
            "chaos lock: %d trials (seed %d), second daemon 0-%.1fs after the first, %d refused "
            "with the lock's message, %d ran alone and kept writing, integrity_check %s: %s"
            % (
                args.trials,
                args.seed,
                args.max_gap,
                refused,
                args.trials - sum(1 for p in problems if "stopped writing" in p),
                "ok" if not any(p.startswith("integrity") for p in problems) else "FAILED",
                "PASS" if ok else "FAIL",
            ),
            flush=True,
        )
        return verdict(ok, {"problems": problems})
    finally:
        rig.close()
