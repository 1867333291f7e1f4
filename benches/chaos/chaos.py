#!/usr/bin/python3
"""gpuwatch fault campaigns (issue 14): each campaign is one command that prints one summary
line and exits 1 when a check fails (2 when the rig itself could not run).

    benches/chaos/chaos.py kill9   [--trials 50] [--seed S] [--max-run 5]
    benches/chaos/chaos.py outage  [--down 30] [--backlog-after 5s]
    benches/chaos/chaos.py blocked [--episodes 10] [--block 6] [--period 25]
    benches/chaos/chaos.py sighup  [--hups 300] [--max-gap-ms 30] [--seed S]
    benches/chaos/chaos.py lost    [--episodes 3] [--lost 20] [--period 70]
    benches/chaos/chaos.py diskfull [--size 32m] [--full 20]              (root: mounts a tmpfs)
    benches/chaos/chaos.py clock   [--steps -3600,0,3600,0] [--hold 30]   (libfaketime)
    benches/chaos/chaos.py prometheus [--down 120] [--slow 120] [--delay 30]
    benches/chaos/chaos.py import  [--trials 30] [--days 0.3] [--seed S]
    benches/chaos/chaos.py corrupt [--trials 30] [--seed S]
    benches/chaos/chaos.py lock    [--trials 20] [--max-gap 3] [--seed S]

What each checks, and the figures of our runs: docs/RELIABILITY.md. The modules: common (logging,
ports, artifacts), receivers, rig (the daemon and its config), counting (at the receivers
against the outbox), and one module per campaign family (restarts: kill9 and outage; blocked;
sighup; gpulost; diskfull; clocksteps; promfaults; imports; storefaults: corrupt and lock).

Common options: --gpuwatch PATH (default target/release/gpuwatch, else target/debug/...; or
$GPUWATCH_BIN), --lib PATH (libgpuwatch_fake_nvml.so, same search; or $GPUWATCH_FAKE_LIB),
--speed F (GPUWATCH_FAKE_SPEED), --keep (keep the work directory and print it), -v.

The rig (all on loopback, nothing leaves the machine):
- `gpuwatch run` on simulated GPUs: a private copy of the fake NVML library with
  scenarios/chaos-flap.toml (4 GPUs whose utilisation saws 0..100 %, so the rule
  `util_gpu > 50` fires and resolves about 0.7 times a second), GPUWATCH_FAKE_START_MS set once
  per campaign so a restarted daemon finds the GPUs where the scenario is;
- three receivers: a Slack-like HTTP endpoint (a fake: Slack cannot run here; it answers 200
  `ok` like Slack's incoming webhooks), a real SMTP server (aiosmtpd, Debian's
  python3-aiosmtpd) and a real Alertmanager (Debian's prometheus-alertmanager), reached
  through a recording proxy so that what gpuwatch posted is counted at Alertmanager's door,
  and Alertmanager's own webhook output is captured too.

Counting (the point): the database's `notifications` view (the outbox) lists, per receiver,
every transition message in enqueue order; the `alerts` view lists every reported alert.
At the end, after a drain, every (alert, firing|resolved) the outbox holds for a receiver
must have arrived there (lost = those that did not), duplicates are arrivals of an
(alert, state) already seen (Alertmanager's re-sends of a still-firing alert, which gpuwatch
makes by design every `resend_every` and at each start, are counted apart), and within each
notification group the messages must arrive in the outbox's order. Every reported alert in
the `alerts` view must have its firing (and resolved) row queued for every receiver.
"""


import argparse
import random
import sys
import traceback
import os

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
from blocked import campaign_blocked  # noqa: E402
from common import RigError  # noqa: E402
from restarts import campaign_kill9, campaign_outage  # noqa: E402
from sighup import campaign_sighup  # noqa: E402
from clocksteps import campaign_clock  # noqa: E402
from diskfull import campaign_diskfull  # noqa: E402
from gpulost import campaign_lost  # noqa: E402
from imports import campaign_import  # noqa: E402
from promfaults import campaign_prometheus  # noqa: E402
from storefaults import campaign_corrupt, campaign_lock  # noqa: E402



def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="campaign", required=True)

    def options(sp):
        sp.add_argument("--gpuwatch")
        sp.add_argument("--lib")
        sp.add_argument("--speed", type=float, default=1.0)
        sp.add_argument("--keep", action="store_true")
        sp.add_argument("-v", "--verbose", action="store_true")

    k = sub.add_parser("kill9", help="kill -9 at random moments, restart, count at the receivers")
    options(k)
    k.add_argument("--trials", type=int, default=50)
    k.add_argument("--max-run", type=float, default=5.0, help="kill uniformly in [0, this] s after the start")
    k.add_argument("--seed", type=int, default=None)

    o = sub.add_parser("outage", help="Slack and SMTP down for a stretch while alerts flap")
    options(o)
    o.add_argument("--before", type=float, default=5.0)
    o.add_argument("--down", type=float, default=30.0)
    o.add_argument("--after", type=float, default=5.0)
    o.add_argument("--backlog-after", default="5s")

    b = sub.add_parser("blocked", help="GPU 3's NVML calls block for a while, episode after episode")
    options(b)
    b.add_argument("--episodes", type=int, default=10)
    b.add_argument("--block", type=float, default=6.0, help="wall seconds each blocked call sleeps")
    b.add_argument(
        "--period",
        type=float,
        default=25.0,
        help="simulated seconds between episodes (25: the split-off lane merges back in between)",
    )
    b.add_argument("--max-hole-ms", type=int, default=1000, help="longest allowed gap between two ticks of another GPU")
    b.add_argument("--max-rss-growth-kib", type=int, default=2048)
    b.add_argument(
        "--max-missed-per-episode",
        type=int,
        default=0,
        help="missed ticks allowed to each other GPU per episode (the tick the stall is found "
        "in can miss on a loaded machine: the others are asked again on a new lane)",
    )

    h = sub.add_parser("sighup", help="a storm of SIGHUPs while the rules file changes")
    options(h)
    h.add_argument("--hups", type=int, default=300)
    h.add_argument("--max-gap-ms", type=float, default=30.0)
    h.add_argument("--before", type=float, default=3.0)
    h.add_argument("--after", type=float, default=12.0)
    h.add_argument("--seed", type=int, default=None)

    c = sub.add_parser("corrupt", help="a damaged database at start: moved aside, a new one, the alert sent")
    options(c)
    c.add_argument("--trials", type=int, default=30)
    c.add_argument("--seed", type=int, default=None)

    lk = sub.add_parser("lock", help="two daemons started on one database, 0..--max-gap s apart")
    options(lk)
    lk.add_argument("--trials", type=int, default=20)
    lk.add_argument("--max-gap", type=float, default=3.0)
    lk.add_argument("--exit-within", type=float, default=10.0)
    lk.add_argument("--seed", type=int, default=None)

    im = sub.add_parser("import", help="`gpuwatch import nvidia-smi` killed at random moments")
    im.add_argument("--gpuwatch")
    im.add_argument("--lib", help="not used (the import runs no daemon); accepted like the other campaigns")
    im.add_argument("--keep", action="store_true")
    im.add_argument("-v", "--verbose", action="store_true")
    im.add_argument("--trials", type=int, default=30)
    im.add_argument("--days", type=float, default=0.3, help="the generated log's length (x 8 GPUs x 1 s)")
    im.add_argument("--seed", type=int, default=None)

    gl = sub.add_parser("lost", help="GPU 2 lost mid-run, back after a reset, episode after episode")
    options(gl)
    gl.add_argument("--episodes", type=int, default=3)
    gl.add_argument("--before", type=float, default=5.0)
    gl.add_argument("--lost", type=float, default=20.0, help="scenario seconds GPU 2 answers GPU_IS_LOST")
    gl.add_argument("--period", type=float, default=70.0, help="scenario seconds between episodes (the probe comes --probe-after s after the loss)")
    gl.add_argument("--probe-after", type=float, default=None, help="the daemon's lost_probe_after, s (default: the daemon's, 60 s)")
    gl.add_argument("--max-hole-ms", type=int, default=1000)

    ck = sub.add_parser("clock", help="the wall clock steps back an hour and forward again (libfaketime)")
    options(ck)
    ck.add_argument("--steps", default="-3600,0,3600,0", help="wall-clock offsets in s, applied in turn")
    ck.add_argument("--restart", type=float, default=6.0, help="restart after the steps and run this long (0: no restart)")
    ck.add_argument("--before", type=float, default=6.0)
    ck.add_argument("--every", type=float, default=8.0, help="s between steps")
    ck.add_argument("--after", type=float, default=14.0)
    ck.add_argument("--hold", type=float, default=30.0, help="the `for` of the rule `held`, s")
    ck.add_argument("--min-tick-share", type=float, default=0.8)

    pr = sub.add_parser("prometheus", help="the training metrics' Prometheus down, then slow")
    options(pr)
    pr.add_argument("--before", type=float, default=45.0, help="s of training before the outage")
    pr.add_argument("--down", type=float, default=120.0)
    pr.add_argument("--between", type=float, default=30.0)
    pr.add_argument("--slow", type=float, default=120.0)
    pr.add_argument("--delay", type=float, default=30.0, help="s each answer is delayed while slow")
    pr.add_argument("--after", type=float, default=20.0)
    pr.add_argument("--unavailable-for", default=None, help="the `for` of training_metrics_unavailable (default: the rule file's)")
    pr.add_argument("--timeout", type=float, default=10.0, help="[prometheus] timeout, s")
    pr.add_argument("--max-hole-ms", type=int, default=1000)

    df = sub.add_parser("diskfull", help="the database's filesystem filled to the last byte, then emptied")
    options(df)
    df.add_argument("--size", default="32m", help="the tmpfs's size")
    df.add_argument("--before", type=float, default=10.0)
    df.add_argument("--full", type=float, default=20.0)
    df.add_argument("--after", type=float, default=15.0)
    df.add_argument("--max-log-lines", type=int, default=4)

    args = p.parse_args()
    common.VERBOSE = args.verbose
    if getattr(args, "seed", 0) is None:
        args.seed = random.SystemRandom().randrange(1 << 32)
        print("seed %d" % args.seed, file=sys.stderr)
    try:
        campaigns = {
            "kill9": campaign_kill9,
            "outage": campaign_outage,
            "blocked": campaign_blocked,
            "sighup": campaign_sighup,
            "corrupt": campaign_corrupt,
            "lock": campaign_lock,
            "import": campaign_import,
            "lost": campaign_lost,
            "clock": campaign_clock,
            "prometheus": campaign_prometheus,
            "diskfull": campaign_diskfull,
        }
        return campaigns[args.campaign](args)
    except RigError as e:
        print("chaos %s: rig failed: %s" % (args.campaign, e), flush=True)
        return 2
    except Exception as e:  # a harness bug: still one summary line, the traceback on stderr
        traceback.print_exc()
        print("chaos %s: harness error: %s: %s" % (args.campaign, type(e).__name__, e), flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
