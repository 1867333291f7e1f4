"""The import campaign: `gpuwatch import nvidia-smi FILE` killed (SIGTERM or SIGKILL) at random
moments, many times; imports publish in one transaction, so the database holds all of the
import's rows or none.

A calibration import of the generated log (benches/gen_week.py: --days x 8 GPUs x 1 s) into
its own database gives the expected row counts and where the publish falls (the import's
own report: "read and staged in S s, published in one transaction of P s, rolled up in R s").
Each trial then starts the same import on a fresh database and kills it after a delay drawn
uniformly over the whole import (a third of the trials) or over its publish window, 0.2 s
either side (the rest). Checks per trial: `PRAGMA integrity_check` is ok; the import's
samples number 0 or all of them, never part; a rerun imports it fully (every sample, the
same rollup rows as the calibration) and the database is still sound.
"""

import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import shutil
import time

from common import REPO, RigError, find_artifact, log
from counting import verdict

REPORT = re.compile(
    r"read and staged in ([\d.]+) s, published in one transaction of ([\d.]+) s, rolled up in ([\d.]+) s"
)


def counts(db):
    # Read-write: after a kill -9 the WAL may need recovery, which a read-only connection
    # cannot do ("attempt to write a readonly database"); recovery is what any reader does.
    con = sqlite3.connect(db, timeout=10)
    try:
        check = [r[0] for r in con.execute("PRAGMA integrity_check")]
        try:
            samples = con.execute("SELECT count(*) FROM samples").fetchone()[0]
            rollups = con.execute("SELECT count(*) FROM rollups_1m").fetchone()[0]
        except sqlite3.OperationalError:  # killed before the schema was created
            samples = rollups = 0
        return check, samples, rollups
    finally:
        con.close()


def run_import(gpuwatch, csv, db, timeout=600):
    return subprocess.run(
        [gpuwatch, "--log", "warn", "import", "nvidia-smi", csv, "--db", db, "--tz", "UTC", "--host", "imp"],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def campaign_import(args):
    rng = random.Random(args.seed)
    gpuwatch = args.gpuwatch or find_artifact("GPUWATCH_BIN", "gpuwatch")
    if not gpuwatch or not os.path.exists(gpuwatch):
        raise RigError("no gpuwatch binary (cargo build, or --gpuwatch PATH)")
    work = tempfile.mkdtemp(prefix="gpuwatch-chaos-import-")
    problems = []
    try:
        csv = os.path.join(work, "log.csv")
        gen = subprocess.run(
            [sys.executable, os.path.join(REPO, "benches", "gen_week.py"), "--days", str(args.days), "--gpus", "8", "--smi", csv],
            capture_output=True,
            text=True,
        )
        if gen.returncode != 0:
            raise RigError("gen_week.py failed: %s" % gen.stderr)
        cal_db = os.path.join(work, "calibration.db")
        t0 = time.monotonic()
        cal = run_import(gpuwatch, csv, cal_db)
        total = time.monotonic() - t0
        m = REPORT.search(cal.stdout + cal.stderr)
        if cal.returncode != 0 or not m:
            raise RigError("calibration import failed (%d): %s%s" % (cal.returncode, cal.stdout, cal.stderr))
        staged, publish, rolled = (float(x) for x in m.groups())
        check, want_samples, want_rollups = counts(cal_db)
        if check != ["ok"] or want_samples == 0:
            raise RigError("calibration database: %s, %d samples" % (check, want_samples))
        # The publish ends `rolled` (+ the report) before the process does.
        pub_end = max(total - rolled - 0.05, 0.0)
        pub_start = max(pub_end - publish, 0.0)
        log("calibration: %.2fs total, publish at %.2f..%.2fs, %d samples" % (total, pub_start, pub_end, want_samples))
        tally = {"none": 0, "all": 0, "part": 0}
        sigs = {"TERM": 0, "KILL": 0}
        finished_first = 0
        for i in range(args.trials):
            db = os.path.join(work, "t%d.db" % i)
            if i % 3 == 0:
                delay = rng.uniform(0, total)
            else:
                delay = rng.uniform(max(pub_start - 0.2, 0), pub_end + 0.2)
            sig = signal.SIGTERM if rng.random() < 0.5 else signal.SIGKILL
            p = subprocess.Popen(
                [gpuwatch, "--log", "warn", "import", "nvidia-smi", csv, "--db", db, "--tz", "UTC", "--host", "imp"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(delay)
            if p.poll() is None:
                p.send_signal(sig)
                sigs[sig.name[3:]] += 1
            else:
                finished_first += 1
            p.wait()
            if not os.path.exists(db):
                tally["none"] += 1
                log("trial %d: %s after %.2fs, no database yet" % (i, sig.name, delay))
            else:
                check, n, _r = counts(db)
                what = "none" if n == 0 else "all" if n == want_samples else "part"
                tally[what] += 1
                log("trial %d: %s after %.2fs: %d samples (%s), %s" % (i, sig.name, delay, n, what, check[:1]))
                if check != ["ok"]:
                    problems.append("trial %d: integrity_check after the kill: %s" % (i, check[:3]))
                if what == "part":
                    problems.append("trial %d: %d of %d samples after %s at %.2fs" % (i, n, want_samples, sig.name, delay))
            again = run_import(gpuwatch, csv, db)
            check, n, r = counts(db)
            if again.returncode != 0 or check != ["ok"] or n != want_samples or r != want_rollups:
                problems.append(
                    "trial %d: the rerun gave exit %d, %s, %d/%d samples, %d/%d rollups: %s"
                    % (i, again.returncode, check[:1], n, want_samples, r, want_rollups, again.stderr[-300:])
                )
            os.remove(db)
            for s in ("-wal", "-shm"):
                if os.path.exists(db + s):
                    os.remove(db + s)
        # Ten trials or more must have hit both sides of the publish (a slice may not).
        if args.trials >= 10 and (tally["none"] == 0 or tally["all"] == 0):
            problems.append("the kills never fell on both sides of the publish: %s" % tally)
        ok = not problems
        print(
            "chaos import: %d trials (seed %d), %d samples per import (publish %.2fs of %.2fs), "
            "%d SIGTERM + %d SIGKILL (%d finished first), after the kill: %d none, %d all, %d part; "
            "%d integrity_check failures, reruns complete %d/%d: %s"
            % (
                args.trials,
                args.seed,
                want_samples,
                publish,
                total,
                sigs["TERM"],
                sigs["KILL"],
                finished_first,
                tally["none"],
                tally["all"],
                tally["part"],
                sum(1 for p in problems if "integrity_check" in p),
                args.trials - sum(1 for p in problems if "rerun" in p),
                args.trials,
                "PASS" if ok else "FAIL",
            ),
            flush=True,
        )
        return verdict(ok, {"problems": problems})
    finally:
        if args.keep:
            print("work directory kept: %s" % work, file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
