"""What every module of the chaos rig shares: logging, the rig-failure exception, free
loopback ports and the build's artifacts."""

import os
import socket
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AM_BINARY = "/usr/bin/prometheus-alertmanager"
VERBOSE = False


def log(*a):
    if VERBOSE:
        print("[%7.2f]" % (time.monotonic() - T0), *a, file=sys.stderr, flush=True)


T0 = time.monotonic()


class RigError(Exception):
    """The rig could not run (not a gpuwatch failure): exit status 2."""


_HANDED_OUT = set()


def free_port():
    """A free loopback port, never one handed out before (ports are bound later, so the
    kernel could offer the same one twice)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def find_artifact(env, name):
    if os.environ.get(env):
        return os.environ[env]
    roots = [os.environ.get("CARGO_TARGET_DIR"), os.path.join(REPO, "target")]
    for root in filter(None, roots):
        for profile in ("release", "debug"):
            for sub in ("", "deps"):
                p = os.path.join(root, profile, sub, name)
                if os.path.exists(p):
                    return p
    return None
