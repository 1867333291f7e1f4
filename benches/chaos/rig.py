"""The rig: gpuwatch run on simulated GPUs (a private copy of the fake NVML library), its
configuration, start/kill/stop, read-only queries of its database and the drain."""

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request

from common import REPO, RigError, find_artifact, free_port
from counting import Counting
from receivers import Alertmanager, SlackFake, Smtp

# --------------------------------------------------------------------------- the rig

# scenarios/chaos-flap.toml: the shortest sawtooth period is 8 s, busy (> 50 %) from 4 s to 8 s;
# a flapping that lasts to this second has fired and resolved at least once.
FIRST_BUSY_END_S = 9

RULES = """
[[rule]]
name = "busy"
severity = "warning"
condition = "util_gpu > 50"
summary = "GPU {gpu} busy"
"""


class Rig(Counting):
    def __init__(self, args, name, alertmanager=True):
        self.args = args
        self.gpuwatch = args.gpuwatch or find_artifact("GPUWATCH_BIN", "gpuwatch")
        lib = args.lib or find_artifact("GPUWATCH_FAKE_LIB", "libgpuwatch_fake_nvml.so")
        if not self.gpuwatch or not os.path.exists(self.gpuwatch):
            raise RigError("no gpuwatch binary (cargo build, or --gpuwatch PATH)")
        if not lib or not os.path.exists(lib):
            raise RigError("no libgpuwatch_fake_nvml.so (cargo build -p gpuwatch-fake-nvml, or --lib)")
        self.dir = tempfile.mkdtemp(prefix="gpuwatch-chaos-%s-" % name)
        self.nvml_dir = os.path.join(self.dir, "nvml")
        os.makedirs(self.nvml_dir)
        # A private copy: the loader keeps one instance per path, and a shared build dir's
        # library may be rebuilt under our feet.
        shutil.copy(lib, os.path.join(self.nvml_dir, "libnvidia-ml.so.1"))
        with open(os.path.join(REPO, "scenarios", "chaos-flap.toml")) as f:
            self.scenario_template = f.read()
        self.write_scenario()
        self.db = os.path.join(self.dir, "gpuwatch.db")
        self.start_ms = int(time.time() * 1000)
        self.speed = args.speed
        self.daemon = None
        self.daemon_log = open(os.path.join(self.dir, "daemon.log"), "ab")
        self.http_port = free_port()
        self.slack = SlackFake()
        self.smtp = Smtp()
        self.am = Alertmanager(self.dir) if alertmanager else None
        self.receivers = [self.slack, self.smtp] + ([self.am] if self.am else [])

    def write_scenario(self, flap_until_s=None, extra=""):
        """The campaign's scenario: the template, the flapping ended at `flap_until_s`
        (simulated seconds; GPUs idle after it, so every alert resolves), plus `extra`."""
        text = self.scenario_template
        if flap_until_s is not None:
            text = re.sub(
                r"^(util_gpu = \{ sawtooth .*\})$",
                lambda m: 'to = "%ds"\n%s\n[[gpu.timeline]]\nfrom = "%ds"\nutil_gpu = 0'
                % (flap_until_s, m.group(1), flap_until_s),
                text,
                flags=re.M,
            )
        with open(os.path.join(self.nvml_dir, "gpuwatch-scenario.toml"), "w") as f:
            f.write(text + extra)

    def flap_end_s(self, more_s=3):
        """The simulated second at which the flapping should end when a campaign winds down:
        `more_s` past now, and never before FIRST_BUSY_END_S. Each GPU's sawtooth stays under
        50 % for the first half of its period, so a run wound down within the first seconds
        (short kill -9 trials, say) would otherwise see no alert at all and deliver nothing."""
        return max(int(self.sim_now_s()) + more_s, FIRST_BUSY_END_S)

    def sim_now_s(self):
        return (time.time() * 1000 - self.start_ms) * self.speed / 1000.0

    def write_config(self, notify_extra="", rules=RULES):
        url_file = os.path.join(self.dir, "slack-url")
        with open(url_file, "w") as f:
            f.write(self.slack.url)
        with open(os.path.join(self.dir, "rules.toml"), "w") as f:
            f.write(rules)
        self.config = os.path.join(self.dir, "gpuwatch.toml")
        with open(self.config, "w") as f:
            f.write(
                f"""host = "chaos-node"
database = "{self.db}"
nvml_library = "{self.nvml_dir}/libnvidia-ml.so.1"
interval = "200ms"
commit_interval = "1s"

[rules]
default_rules = false
files = ["rules.toml"]

[http]
enabled = true
listen = "127.0.0.1:{self.http_port}"

[notify]
group_by = ["..."]
group_wait = "0s"
group_interval = "1s"
repeat_interval = "24h"
retry_max_backoff = "500ms"
{notify_extra}

[[notify.slack]]
name = "slack"
webhook_url_file = "{url_file}"
min_interval = "0s"
timeout = "2s"

[[notify.email]]
name = "email"
smtp_host = "127.0.0.1"
smtp_port = {self.smtp.port}
tls = "none"
from = "gpuwatch <gpuwatch@chaos.invalid>"
to = ["oncall@chaos.invalid"]
timeout = "3s"
"""
            )
            if self.am:
                f.write(
                    f"""
[[notify.alertmanager]]
name = "alertmanager"
urls = ["{self.am.url}"]
resend_every = "1h"
timeout = "3s"
"""
                )
        check = subprocess.run(
            [self.gpuwatch, "run", "--check", "--config", self.config],
            capture_output=True,
            text=True,
        )
        if check.returncode != 0:
            raise RigError("config refused: %s%s" % (check.stdout, check.stderr))

    def start_receivers(self):
        for r in self.receivers:
            r.start()

    def env(self):
        e = dict(os.environ)
        e.pop("RUST_LOG", None)
        e["GPUWATCH_FAKE_START_MS"] = str(self.start_ms)
        e["GPUWATCH_FAKE_SPEED"] = str(self.speed)
        e["GPUWATCH_FAKE_SCENARIO"] = os.path.join(self.nvml_dir, "gpuwatch-scenario.toml")
        return e

    def start_daemon(self):
        self.daemon_log.write(b"\n==== start at %.3f\n" % time.time())
        self.daemon_log.flush()
        self.daemon = subprocess.Popen(
            [self.gpuwatch, "run", "--config", self.config],
            env=self.env(),
            stdin=subprocess.DEVNULL,
            stdout=self.daemon_log,
            stderr=self.daemon_log,
            cwd=self.dir,
        )
        return self.daemon

    def wait_serving(self, timeout=20):
        """Waits until the daemon answers /healthz with 200 (a tick done); RigError if it never
        does."""
        deadline = time.time() + timeout
        while True:
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/healthz" % self.http_port, timeout=1):
                    return
            except OSError:
                if time.time() > deadline or self.daemon.poll() is not None:
                    raise RigError("the daemon never answered /healthz (see %s)" % self.dir)
                time.sleep(0.1)

    def kill9(self):
        if self.daemon and self.daemon.poll() is None:
            self.daemon.send_signal(signal.SIGKILL)
        if self.daemon:
            self.daemon.wait()

    def sigterm(self, timeout=30):
        if self.daemon and self.daemon.poll() is None:
            self.daemon.send_signal(signal.SIGTERM)
            try:
                return self.daemon.wait(timeout)
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.daemon.wait()
                return None
        return self.daemon.returncode if self.daemon else None

    def query(self, sql, args=()):
        con = sqlite3.connect("file:%s?mode=ro" % self.db, uri=True, timeout=10)
        try:
            return con.execute(sql, args).fetchall()
        finally:
            con.close()

    def pending(self):
        return self.query("SELECT count(*) FROM notifications WHERE status = 'pending'")[0][0]

    def drain(self, timeout=90):
        """With the flapping over: waits for every alert to resolve, the outbox to empty and
        the receivers to go quiet (Alertmanager's webhook included)."""
        deadline = time.time() + timeout
        quiet_since = None
        last = None
        while time.time() < deadline:
            if self.daemon.poll() is not None:
                raise RigError("daemon exited during the drain (see %s)" % self.dir)
            try:
                live = self.query("SELECT count(*) FROM alerts WHERE resolved_ms IS NULL")[0][0]
                pend = self.pending()
            except sqlite3.Error:
                time.sleep(0.3)
                continue
            counts = tuple(len(r.log.snapshot()) for r in self.receivers)
            if live == 0 and pend == 0 and counts == last:
                quiet_since = quiet_since or time.time()
                if time.time() - quiet_since > 3:
                    return True
            else:
                quiet_since = None
            last = counts
            time.sleep(0.3)
        return False

    def close(self):
        self.kill9()
        with open(os.path.join(self.dir, "arrivals.json"), "w") as f:
            json.dump({r.log.name: r.log.snapshot() for r in self.receivers}, f)
        for r in self.receivers:
            try:
                r.stop()
            except Exception:  # noqa: BLE001 - best effort at exit
                pass
        self.daemon_log.close()
        if self.args.keep:
            print("work directory kept: %s" % self.dir, file=sys.stderr)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)
